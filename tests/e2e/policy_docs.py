"""Load-control policy documents as the suites write them (RFC 7200 §5: a common-policy
ruleset with load-control conditions and actions), and the two callees their traffic uses.

Every suite that gives a proxy a policy (the edge, the Kamailio module, a SIPp or Python
notifier, `loadctl notifier`) writes the same XML, and judges its traffic by the same numbers:
MATCH matches the rules' prefix +1555, OTHER matches nothing, ``split()`` tells their arrivals
apart.

Python 3 standard library only.
"""

from __future__ import annotations

MATCH = "+15550001234"  # matches the rules' prefix +1555
OTHER = "+16660001234"  # matches nothing


def document(version: int, state: str, rules: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<ruleset xmlns="urn:ietf:params:xml:ns:common-policy" '
        'xmlns:lc="urn:ietf:params:xml:ns:load-control" '
        f'version="{version}" state="{state}">\n{rules}\n</ruleset>'
    )


def rule(rule_id: str, prefix: str, limit: str, alt: str = 'alt-action="reject"') -> str:
    return (
        f'<rule id="{rule_id}"><conditions><lc:call-identity><lc:sip><lc:to>'
        f'<many-tel prefix="{prefix}"/></lc:to></lc:sip></lc:call-identity>'
        f"<method>INVITE</method></conditions>"
        f"<actions><lc:accept {alt}>{limit}</lc:accept></actions></rule>"
    )


def rate_rule(rate: float, rule_id: str = "prefix-1555", prefix: str = "+1555") -> str:
    return rule(rule_id, prefix, f"<lc:rate>{rate}</lc:rate>")


def split(arrivals):
    matching = [a.t for a in arrivals if a.callee.startswith("+1555")]
    other = [a.t for a in arrivals if not a.callee.startswith("+1555")]
    return matching, other
