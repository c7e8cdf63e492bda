"""SIPp playing an RFC 7200 notifier: the scenario templates under scenarios/ filled in with the
documents and pauses of a test.

The edge's and the Kamailio module's subscribers are held to the same notifier: full, partial,
a bodyless refresh NOTIFY, invalid, a version gap and `terminated` (scenarios/notifier.xml), and
one whose Contact names a second SIPp that the in-dialog SUBSCRIBEs must reach
(scenarios/notifier_moved.xml and notifier_target.xml).

Python 3 standard library only.
"""

from __future__ import annotations

from pathlib import Path

from policy_docs import document, rate_rule
from processes import Run

HERE = Path(__file__).resolve().parent


def notifier_scenario(run: Run, r: float, holds: dict) -> Path:
    """scenarios/notifier.xml with its documents for a rate rule on +1555 (v0 full r, v1 partial
    2r, a bodyless NOTIFY, v2 invalid, v5 partial 3r after a gap, v6 full r) and the pauses
    `holds` (ms, by phase: A, B, B2, C, D, E), written into the run's directory."""
    template = (HERE / "scenarios" / "notifier.xml").read_text()
    docs = {
        "@DOC_V0@": document(0, "full", rate_rule(r)),
        "@DOC_V1@": document(1, "partial", rate_rule(2 * r)),
        "@DOC_V2_INVALID@": document(2, "full", rate_rule(-1)),
        "@DOC_V5_GAP@": document(5, "partial", rate_rule(3 * r)),
        "@DOC_V6@": document(6, "full", rate_rule(r)),
    }
    for k, v in docs.items():
        template = template.replace(k, v)
    for k, v in holds.items():
        template = template.replace(f"@HOLD_{k}_MS@", str(v))
    scenario = run.path("notifier.xml")
    scenario.write_text(template)
    return scenario


UNSUBSCRIBE_STEP = """
  <recv request="SUBSCRIBE" timeout="20000">
    <action>
      <ereg regexp="^SUBSCRIBE sip:notifier@" search_in="msg" check_it="true" assign_to="ruri2"/>
      <ereg regexp="^ *0 *$" search_in="hdr" header="Expires:" check_it="true" assign_to="zero"/>
    </action>
  </recv>
  <send>
    <![CDATA[

      SIP/2.0 200 OK
      [last_Via:]
      [last_From:]
      [last_To:]
      [last_Call-ID:]
      [last_CSeq:]
      Contact: <sip:notifier@[local_ip]:[local_port]>
      Expires: 0
      Content-Length: 0

    ]]>
  </send>
  <nop>
    <action>
      <log message="unsubscribed [$ruri2] [$zero]"/>
    </action>
  </nop>
"""


def moved_notifier_scenarios(run: Run, r: float, target_port: int, holds: dict, unsubscribe: bool) -> tuple:
    """scenarios/notifier_moved.xml (Contact pointing at `target_port`) and
    notifier_target.xml (with the unsubscribe step when `unsubscribe`), filled in."""
    docs = {
        "@DOC_V0@": document(0, "full", rate_rule(r)),
        "@DOC_V5_GAP@": document(5, "partial", rate_rule(3 * r)),
        "@DOC_V6@": document(6, "full", rate_rule(2 * r)),
        "@TARGET_PORT@": str(target_port),
        "@UNSUBSCRIBE@": UNSUBSCRIBE_STEP if unsubscribe else "",
    }
    docs.update({f"@HOLD_{k}_MS@": str(v) for k, v in holds.items()})
    out = []
    for name in ("notifier_moved.xml", "notifier_target.xml"):
        text = (HERE / "scenarios" / name).read_text()
        for k, v in docs.items():
            text = text.replace(k, v)
        path = run.path(name)
        path.write_text(text)
        out.append(path)
    return tuple(out)
