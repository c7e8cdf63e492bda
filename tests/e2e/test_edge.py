#!/usr/bin/env python3
"""End-to-end tests of the C edge (edge/) with real SIP peers on loopback.

    python3 tests/e2e/test_edge.py [--keep] [NAME ...]      (make e2e builds what it needs first)

- notifier_lifecycle: SIPp plays the RFC 7200 notifier (scenarios/notifier.xml) and the edge
  subscribes to it; a SIPp UAC offers 3R matching calls/s (and R/s that match no rule) through
  the edge to a SIPp UAS while the notifier sends a full policy (rate R), a partial update (2R),
  a refresh NOTIFY without a body (RFC 7200 §4.8: nothing to update — 2R stays in force,
  counted at the UAS), an invalid document (kept, logged with the notifier and its version), a
  version gap (the edge re-SUBSCRIBEs and gets the full state back: R), and `terminated` (the
  rule is lifted). Each phase is measured at the UAS between the moments the edge logged
  applying the documents.
- remote_target: the notifier's 200 and NOTIFYs carry a Contact that is not the URI subscribed
  to and names a second SIPp on another port (scenarios/notifier_moved.xml and
  notifier_target.xml); the re-SUBSCRIBE after a version gap and the unsubscribe must reach
  that second SIPp (RFC 3261 §12.2.1.1; SUBSCRIBE and NOTIFY are target refresh requests, RFC
  6665 §3.1–3.2), and the first must see no second SUBSCRIBE.
- notifier_allow_list: `loadctl notifier --allow … --allow-file …` and a SIPp subscriber
  (scenarios/subscriber.xml): from an unlisted domain 403 (RFC 7200 §4.6), from a listed one
  200 and a NOTIFY with the policy; no allow-list at all refuses to start.
- rule_actions: a local policy, and Python sockets as client and next hop: redirect → 302 with
  the rule's Contact, drop over UDP → 503, percent 50 → half forwarded, window 3 → three
  forwarded until a final response releases a slot.
- two_edges_allocator: `loadctl notifier --capacity C` shares C between two edges; each gets its
  own SIPp UAC offering 1.5C; together the UAS receives C.
- non_invite_methods: REGISTER, MESSAGE and OPTIONS from a SIPp UAC through the edge; a rule for
  MESSAGE limits only MESSAGE.
- tcp_rate_limit: SIPp UAC → edge → SIPp UAS over TCP (-t t1: one connection each way), a rate
  rule R with 3R offered: R at the UAS, 503 for the rest, every call completes.
- tcp_connection_per_call: the UAC opens a connection per call (-t tn); 503 and 302 (with its
  Contact checked by the scenario) over TCP; a second UAC killed mid-test disturbs nobody.
- targets_and_exemptions: Python sockets as client and next hop. A rule whose target-sip-entity
  is the next hop applies, one for another target does not (RFC 7200 §5.3.3); INVITEs to
  urn:service:sos(.police) and with Resource-Priority ets.0 / wps.2 pass a rule rejecting every
  INVITE (RFC 7200 §4.8, RFC 5031, RFC 4412), dsn does not; --no-emergency-exempt and
  --priority-namespaces turn them off or change the list; an invalid namespace is refused.
- redirect_agreement: `loadctl notifier` pushes redirects into its own domain and to
  bank.example: 302 and 503 (logged once) without an allow-list, 302 for both with
  --redirect-allow bank.example (RFC 7200 §7); the same file as --policy is trusted.
- notifier_observe_reports: `loadctl notifier --capacity 60 --observe`: UDP demand reports of
  10/s and 100/s for two subscribed edges give 11.5/s (a donor's rate + 15 %) and the rest.
- request_validation: RFC 3261 §16.3 (483 at Max-Forwards 0, 200 to OPTIONS at 0, 400, 416, 420,
  482 with the edge as its own next hop; no Via: dropped) and §16.6 step 3 (Max-Forwards
  decremented, 70 added when absent), one request per case from Python sockets.
- retry_after: 503s without Retry-After by default (RFC 3261 §21.5.4), with it for --retry-after.
- no_policy_fallback / no_policy_reject: the notifier down at start; the --fallback-policy limits
  the held burst and what follows to r·(1 s + τ) + 1 in any second, or, without it, every
  unclassified new request gets 503 without Retry-After while in-dialog requests pass.
- fallback_withdrawn: the fallback gives way once the notifier's policy is applied.
- unsubscribe_on_stop: SIGTERM sends one SUBSCRIBE Expires: 0 and no new one, whether the
  notifier answers it 481 or 200.
- cli_and_logs: --help, --version, refused command lines (exit 2), ISO 8601 UTC log times.
- metrics_endpoint: GET /metrics with HELP/TYPE everywhere, counters monotonic over a reload that
  changes a rule's limit, the endpoint's bounds.
- sip_user_numbers: a `many-tel prefix="+1555"` rate rule R and SIPp calls to
  `sip:+1555…@host` **without** `;user=phone` (RFC 3261 §19.1.1: recipients "MAY interpret the
  pre-@ part as a telephone number"): under the edge's default (`--sip-user-numbers global`)
  admitted at R, under `--sip-user-numbers user-phone` every call passes and each INVITE counts
  in `loadctl_unread_numbers_total`.

Tolerances: rates within 3 % of the limit over each measured interval (the GCRA admits at most
r·τ + 1 = a few calls more at an interval's start); every non-matching call passes; every admitted
call completes (ACK and BYE pass).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
from harness import Run, SippOutputs, SippPorts, free_udp_port, sipp_command, wait_udp_port  # noqa: E402

ROOT = HERE.parents[1]
EDGE = ROOT / "target" / "edge"
LOADCTL = ROOT / "target" / "release" / "loadctl"
TOLERANCE = 0.03

MATCH = "+15550001234"  # matches the rules' prefix +1555
OTHER = "+16660001234"  # matches nothing


# ---------------------------------------------------------------------------------------------
# policies


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


# ---------------------------------------------------------------------------------------------
# the edge


def start_edge(run: Run, name: str, port: int, next_hop: int, *args) -> harness.Proc:
    proc = run.start(name, [EDGE, "--listen", f"127.0.0.1:{port}", "--next-hop", f"127.0.0.1:{next_hop}", *args])
    wait_udp_port(port, proc=proc)
    return proc


EVENT = re.compile(r"^(?:\S+ )?edge: subscriber at (\d+\.\d+): (.*?) (\d+) ?(.*)$")


def edge_events(proc: harness.Proc) -> list:
    """(wall time, what, number, detail) of every subscriber event the edge logged."""
    out = []
    for line in proc.stderr_path.read_text(errors="replace").splitlines():
        m = EVENT.match(line)
        if m:
            out.append((float(m.group(1)), m.group(2), int(m.group(3)), m.group(4)))
    return out


def when(events, what: str, number=None) -> float:
    """The time of the first event `what` (with that number)."""
    for t, w, n, _ in events:
        if w == what and (number is None or n == number):
            return t
    raise AssertionError(f"the edge never logged {what!r} {number if number is not None else ''}: {events}")


def wait_event(proc: harness.Proc, what: str, number=None, timeout: float = 10.0) -> float:
    found = harness.wait_until(lambda: any(w == what and (number is None or n == number) for _, w, n, _ in edge_events(proc)), timeout)
    if not found:
        raise AssertionError(f"the edge did not log {what!r} {number} within {timeout} s:\n{proc.tail(30)}")
    return when(edge_events(proc), what, number)


# ---------------------------------------------------------------------------------------------
# checks


class Checks:
    def __init__(self, name: str):
        self.name = name
        self.failed = []
        self.lines = []

    def rate(self, label: str, ts, start: float, end: float, expected: float, tolerance: float = TOLERANCE):
        n = harness.count_in(ts, start, end)
        got = n / (end - start)
        ok = abs(got / expected - 1.0) <= tolerance
        self.record(ok, f"{label}: {n} in {end - start:.2f} s = {got:.2f}/s, expected {expected:g}/s ± {tolerance:.0%}")

    def passed_share(self, label: str, passed, shed, start: float, end: float, expected: float, tolerance: float):
        """Of the requests decided in [start, end), the share that passed: `passed` are their
        arrival times downstream, `shed` the times their rejections came back. A share of
        what was offered, so a pause of the load generator and the burst that catches up after
        it (SIPp sends missed calls late) change both counts alike; a rate would count them."""
        n, s = harness.count_in(passed, start, end), harness.count_in(shed, start, end)
        got = n / (n + s) if n + s else 0.0
        ok = n + s >= 100 and abs(got - expected) <= tolerance
        self.record(ok, f"{label}: {n} passed and {s} shed in {end - start:.2f} s = {got:.1%} passed, expected {expected:.0%} ± {tolerance:.1%} (at least 100 decided)")

    def all_pass(self, label: str, matching, other, start: float, end: float, per_other: int = 3):
        """Every matching call offered in [start, end) reached the UAS: the UAC's injection file
        repeats `per_other` matching callees then one other, and other calls always pass, so
        the UAS sees `per_other` matching per other call. Judged on counts, not on time, so a
        pause of the load generator (or the machine) inside the window cannot fail it; a rule
        that still refuses more than 1 % of the matching calls does."""
        n, o = harness.count_in(matching, start, end), harness.count_in(other, start, end)
        slack = per_other + 0.01 * per_other * o
        ok = o >= 50 and abs(n - per_other * o) <= slack
        self.record(ok, f"{label}: {n} matching beside {o} other in {end - start:.2f} s, expected {per_other} × {o} ± {slack:.0f} (at least 50 other)")

    def that(self, ok: bool, what: str):
        self.record(ok, what)

    def record(self, ok: bool, what: str):
        self.lines.append(("ok  " if ok else "FAIL") + "  " + what)
        if not ok:
            self.failed.append(what)

    def report(self) -> bool:
        print(f"== {self.name}")
        for line in self.lines:
            print("   " + line)
        return not self.failed


def split(arrivals):
    matching = [a.t for a in arrivals if a.callee.startswith("+1555")]
    other = [a.t for a in arrivals if not a.callee.startswith("+1555")]
    return matching, other


# ---------------------------------------------------------------------------------------------
# tests


def notifier_lifecycle(run: Run) -> Checks:
    c = Checks("notifier_lifecycle: SIPp notifier, full/partial/invalid/gap/terminated")
    r = 50.0
    holds = {"A": 10000, "B": 4000, "B2": 4000, "C": 4000, "D": 6000, "E": 5000}
    scenario = notifier_scenario(run, r, holds)

    uas_ports, notifier_ports, uac_ports = SippPorts.pick(), SippPorts.pick(), SippPorts.pick()
    edge_port = free_udp_port(tcp=True)
    total_s = sum(holds.values()) / 1000 + 3
    uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=total_s + 40))
    wait_udp_port(uas_ports.sip, proc=uas)
    notifier = run.start("notifier", sipp_command(scenario, notifier_ports, calls=1, timeout_s=total_s + 20, logs=False))
    wait_udp_port(notifier_ports.sip, proc=notifier)
    edge = start_edge(
        run, "edge", edge_port, uas_ports.sip,
        "--subscribe", f"sip:sbc@127.0.0.1:{notifier_ports.sip}", "--uri", f"sip:edge@127.0.0.1:{edge_port}",
    )
    wait_event(edge, "policy applied (version)", 0)
    # 3R matching calls/s and R/s that match nothing: rows cycle m, m, m, other.
    inf = harness.write_injection(run.path("callees.csv"), [MATCH, MATCH, MATCH, OTHER])
    offered = 4 * r
    calls = int(offered * (total_s + 2))
    uac = run.start(
        "uac",
        sipp_command("uac_invite.xml", uac_ports, remote=f"127.0.0.1:{edge_port}", inf=inf, rate=offered, calls=calls, timeout_s=total_s + 40),
    )
    code = notifier.wait(timeout=total_s + 30)
    c.that(code == 0, f"the SIPp notifier completed its scenario, re-SUBSCRIBE included (exit {code}): {SippOutputs(notifier.cwd).errors(300)!r}")
    uac.wait(timeout=60)
    run.stop(uas)
    counters = edge_stats(edge)
    wanted = {"edge_subscriber_notifies_without_body_total": 1, "edge_subscriber_documents_refused_total": 1,
              "edge_subscriber_documents_applied_total": 3, "edge_subscriber_documents_ignored_total": 1,
              "edge_subscriber_withdrawals_total": 1}
    got = {k: counters.get(k) for k in wanted}
    c.that(got == wanted, f"the edge's subscriber counters (SIGUSR1): {got}")
    events = edge_events(edge)
    arrivals = SippOutputs(uas.cwd).arrivals()
    matching, other = split(arrivals)
    t0 = when(events, "policy applied (version)", 0)
    t1 = when(events, "policy applied (version)", 1)
    t_none = when(events, "NOTIFY without body, policy kept")
    t_bad = when(events, "invalid document, policy kept")
    t_gap = when(events, "document ignored (version)", 5)
    t6 = when(events, "policy applied (version)", 6)
    t_term = when(events, "policy withdrawn")
    last = matching[-1] if matching else t_term
    c.rate("full v0, rate R", matching, t0 + 0.5, t1, r)
    c.that(
        harness.count_in(matching, t1, t1 + 1.0) >= 0.9 * 2 * r,
        f"partial v1 (2R) took effect within 1 s: {harness.count_in(matching, t1, t1 + 1.0)} admitted in the first second (≥ {0.9 * 2 * r:g})",
    )
    c.rate("partial v1, rate 2R", matching, t1 + 1.0, t_none, 2 * r)
    # RFC 7200 §4.8: "A NOTIFY request without a body indicates that no load-filtering policies
    # need to be updated." Withdrawing would let all 3R through.
    c.rate("bodyless refresh NOTIFY: 2R stays in force", matching, t_none + 0.1, t_bad, 2 * r)
    bad = [(n, d) for _, w, n, d in events if w == "invalid document, policy kept"]
    c.that(bool(bad) and bad[0][0] == 2 and bad[0][1].startswith(f"from sip:sbc@127.0.0.1:{notifier_ports.sip}: "),
           f"the refused document is logged with its version (2) and the notifier: {bad[:1]}")
    c.rate("invalid v2 ignored, 2R kept", matching, t_bad + 0.1, t_gap, 2 * r)
    c.that(t_gap < t6, "the gap (v5) was ignored and the full state (v6) applied after the re-SUBSCRIBE")
    c.rate("full v6 after the gap, rate R", matching, t6 + 0.5, t_term, r)
    c.all_pass("terminated: rule lifted, every matching call passes", matching, other, t_term + 0.5, last - 0.5)
    out = harness.invite_outcomes(SippOutputs(uac.cwd))
    c.that(out["failed_calls"] == 0, f"no UAC call failed ({out})")
    sent_other = out["invites"] // 4
    c.that(abs(len(other) - sent_other) <= 1, f"every non-matching call passed: {len(other)} at the UAS of ~{sent_other} sent")
    c.that(
        out["answered_200"] + out["rejected_503"] == out["invites"],
        f"every INVITE was answered 200 or 503: {out['answered_200']} + {out['rejected_503']} of {out['invites']}",
    )
    c.that(out["bye_200"] == out["answered_200"], f"every admitted call completed (ACK, BYE, 200): {out['bye_200']} of {out['answered_200']}")
    c.that(len(matching) + len(other) == out["answered_200"], f"the UAS saw each admitted call once: {len(matching) + len(other)} vs {out['answered_200']}")
    # The first step of uas.xml is an optional ACK: one that starts a "call" at the UAS is an ACK
    # the edge should have absorbed (it acknowledges the edge's own 503).
    stray = SippOutputs(uas.cwd).counts().get("0_ACK_Recv", -1)
    c.that(stray == 0, f"the ACKs to the edge's 503s stopped at the edge: {stray} reached the UAS")
    return c


def rule_actions(run: Run) -> Checks:
    c = Checks("rule_actions: redirect, drop, percent, window over UDP")
    policy = document(
        0,
        "full",
        "\n".join(
            [
                rule("redirect", "+1777", "<lc:rate>0</lc:rate>", 'alt-action="redirect" alt-target="sip:overflow@example.net"'),
                rule("drop", "+1888", "<lc:rate>0</lc:rate>", 'alt-action="drop"'),
                rule("percent", "+1999", "<lc:percent>50</lc:percent>"),
                rule("window", "+1444", "<lc:win>3</lc:win>"),
            ]
        ),
    )
    path = run.path("policy.xml")
    path.write_text(policy)
    hop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hop.bind(("127.0.0.1", 0))
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.bind(("127.0.0.1", 0))
    for s in (hop, client):
        s.settimeout(2.0)
    edge_port = free_udp_port(tcp=True)
    start_edge(run, "edge", edge_port, hop.getsockname()[1], "--policy", path)
    cport = client.getsockname()[1]

    def invite(callee: str, n: int) -> bytes:
        return (
            f"INVITE sip:{callee}@127.0.0.1:{edge_port} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{cport};branch=z9hG4bK-e2e-{callee}-{n}\r\n"
            f"From: <sip:alice@127.0.0.1:{cport}>;tag=a{n}\r\nTo: <sip:{callee}@127.0.0.1;user=phone>\r\n"
            f"Call-ID: {callee}-{n}@e2e\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        ).encode()

    def drain(sock, quiet: float = 0.3) -> list:
        out = []
        sock.settimeout(quiet)
        try:
            while True:
                out.append(sock.recv(65535).decode(errors="replace"))
        except socket.timeout:
            pass
        return out

    edge_addr = ("127.0.0.1", edge_port)
    client.sendto(invite("+17770000000", 1), edge_addr)
    replies = drain(client)
    c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 302"), f"redirect: 302 ({[r.splitlines()[0] for r in replies]})")
    c.that(bool(replies) and "Contact: <sip:overflow@example.net>" in replies[0], "redirect: Contact is the rule's alt-target")
    client.sendto(invite("+18880000000", 1), edge_addr)
    replies = drain(client)
    c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 503"), f"drop over UDP: 503 ({[r.splitlines()[0] for r in replies]})")
    c.that(drain(hop) == [], "nothing reached the next hop for redirected or dropped calls")
    for n in range(200):
        client.sendto(invite("+19990000000", n), edge_addr)
    forwarded, rejected = len(drain(hop, 0.5)), sum(1 for r in drain(client, 0.5) if r.startswith("SIP/2.0 503"))
    c.that(abs(forwarded - 100) <= 3 and forwarded + rejected == 200, f"percent 50: {forwarded} forwarded, {rejected} answered 503 of 200")
    for n in range(5):
        client.sendto(invite("+14440000000", n), edge_addr)
    held = drain(hop, 0.5)
    rejected = [r for r in drain(client, 0.5) if r.startswith("SIP/2.0 503")]
    c.that(len(held) == 3 and len(rejected) == 2, f"window 3: {len(held)} forwarded, {len(rejected)} answered 503 of 5")
    if held:
        # The next hop answers the first one: the final response releases its slot.
        req = held[0]
        head = req.split("\r\n\r\n", 1)[0].split("\r\n")
        keep = [h for h in head[1:] if h.split(":", 1)[0].lower() in ("via", "from", "to", "call-id", "cseq")]
        resp = "SIP/2.0 200 OK\r\n" + "\r\n".join(keep) + "\r\nContent-Length: 0\r\n\r\n"
        hop.sendto(resp.encode(), edge_addr)
        back = drain(client, 0.5)
        c.that(any(r.startswith("SIP/2.0 200") for r in back), "window: the 200 went back to the caller")
        client.sendto(invite("+14440000000", 99), edge_addr)
        c.that(len(drain(hop, 0.5)) == 1, "window: the released slot admitted the next call")
    hop.close()
    client.close()
    return c


def two_edges_allocator(run: Run) -> Checks:
    c = Checks("two_edges_allocator: loadctl notifier shares a global rate between two edges")
    capacity = 60.0
    template = run.path("template.xml")
    template.write_text(document(0, "full", rate_rule(1)))
    nport = free_udp_port(tcp=True)
    notifier = run.start(
        "notifier",
        [LOADCTL, "notifier", "--listen", f"127.0.0.1:{nport}", "--capacity", capacity, "--template", template, "--duration", 60, "--allow", "127.0.0.1"],
    )
    wait_udp_port(nport, proc=notifier)
    uas_ports = SippPorts.pick()
    uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=80))
    wait_udp_port(uas_ports.sip, proc=uas)
    edges = []
    for k in range(2):
        port = free_udp_port(tcp=True)
        edges.append(
            (port, start_edge(run, f"edge{k}", port, uas_ports.sip, "--subscribe", f"sip:loadctl@127.0.0.1:{nport}", "--uri", f"sip:edge{k}@127.0.0.1:{port}"))
        )
    # Both subscribed and given a policy; when the first got the whole capacity before the
    # second came, its share shrinks to half in a partial NOTIFY within the 1 s pacing.
    for _, e in edges:
        wait_event(e, "policy applied (version)", 0)
    time.sleep(1.5)
    inf = harness.write_injection(run.path("callees.csv"), [MATCH])
    seconds = 12
    uacs = []
    for k, (port, _) in enumerate(edges):
        ports = SippPorts.pick()
        uacs.append(
            run.start(f"uac{k}", sipp_command("uac_invite.xml", ports, remote=f"127.0.0.1:{port}", inf=inf, rate=1.5 * capacity, calls=int(1.5 * capacity * seconds), timeout_s=60))
        )
    for u in uacs:
        u.wait(timeout=60)
    run.stop(uas)
    matching, _ = split(SippOutputs(uas.cwd).arrivals())
    if matching:
        c.rate("both edges together, global rate C", matching, matching[0] + 1.0, matching[-1] - 0.5, capacity)
    else:
        c.that(False, "no call reached the UAS")
    for k, u in enumerate(uacs):
        out = harness.invite_outcomes(SippOutputs(u.cwd))
        c.that(out["failed_calls"] == 0, f"UAC {k}: no failed call ({out['answered_200']} admitted, {out['rejected_503']} rejected)")
    return c


def non_invite_methods(run: Run) -> Checks:
    c = Checks("non_invite_methods: REGISTER, MESSAGE, OPTIONS through the edge")
    r = 40.0
    policy = run.path("policy.xml")
    policy.write_text(
        document(0, "full", rule("messages", "+1555", f"<lc:rate>{r}</lc:rate>").replace("<method>INVITE</method>", "<method>MESSAGE</method>"))
    )
    uas_ports, uac_ports = SippPorts.pick(), SippPorts.pick()
    uas = run.start("uas", sipp_command("uas_noninvite.xml", uas_ports, timeout_s=60))
    wait_udp_port(uas_ports.sip, proc=uas)
    edge_port = free_udp_port(tcp=True)
    start_edge(run, "edge", edge_port, uas_ports.sip, "--policy", policy)
    # MESSAGE offered at 2R (a rule of R for MESSAGE only); REGISTER and OPTIONS at 2R each.
    inf = harness.write_injection(run.path("requests.csv"), [[MATCH, "MESSAGE"], [MATCH, "REGISTER"], [MATCH, "OPTIONS"]])
    seconds = 10
    uac = run.start(
        "uac",
        sipp_command("uac_noninvite.xml", uac_ports, remote=f"127.0.0.1:{edge_port}", inf=inf, rate=6 * r, calls=int(6 * r * seconds), timeout_s=60),
    )
    uac.wait(timeout=60)
    run.stop(uas)
    arrivals = SippOutputs(uas.cwd).arrivals()
    by = {m: [a.t for a in arrivals if a.method == m] for m in ("MESSAGE", "REGISTER", "OPTIONS")}
    sent = int(6 * r * seconds) // 3
    if by["MESSAGE"]:
        first, last = min(a.t for a in arrivals), max(a.t for a in arrivals)
        c.rate("MESSAGE limited to R", by["MESSAGE"], first + 0.5, last - 0.5, r)
    else:
        c.that(False, "no MESSAGE reached the UAS")
    for m in ("REGISTER", "OPTIONS"):
        c.that(abs(len(by[m]) - sent) <= 1, f"every {m} passed: {len(by[m])} of {sent}")
    uout = SippOutputs(uac.cwd)
    c.that(uout.stat().get("FailedCall(C)", 0) == 0, f"no UAC request failed: {uout.errors(300)!r}")
    return c


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


def remote_target(run: Run) -> Checks:
    c = Checks("remote_target: in-dialog SUBSCRIBEs go to the notifier's Contact (RFC 3261 §12.2.1.1)")
    first_ports, target_ports = SippPorts.pick(), SippPorts.pick()
    moved, target = moved_notifier_scenarios(run, 50.0, target_ports.sip, {"A": 1500, "B": 6000}, unsubscribe=True)
    second = run.start("target", sipp_command(target, target_ports, calls=1, timeout_s=40))
    wait_udp_port(target_ports.sip, proc=second)
    first = run.start("notifier", sipp_command(moved, first_ports, calls=1, timeout_s=40, logs=False))
    wait_udp_port(first_ports.sip, proc=first)
    edge_port = free_udp_port(tcp=True)
    edge = start_edge(
        run, "edge", edge_port, free_udp_port(),
        "--subscribe", f"sip:sbc@127.0.0.1:{first_ports.sip}", "--uri", f"sip:edge@127.0.0.1:{edge_port}",
    )
    wait_event(edge, "policy applied (version)", 0)
    # The gap (v5) makes the edge re-SUBSCRIBE: to the Contact, i.e. the second SIPp, whose
    # NOTIFY (v6) it applies.
    wait_event(edge, "policy applied (version)", 6, timeout=15)
    code_first = first.wait(timeout=30)
    c.that(code_first == 0, f"the SIPp the SUBSCRIBE was first sent to saw no second SUBSCRIBE (exit {code_first}): "
           f"{SippOutputs(first.cwd).errors(300)!r}")
    # SIGTERM: the edge unsubscribes, again to the remote target.
    run.stop(edge)
    code = second.wait(timeout=30)
    c.that(code == 0, f"the SIPp at the Contact got the in-dialog re-SUBSCRIBE and the unsubscribe (exit {code}): "
           f"{SippOutputs(second.cwd).errors(300)!r}")
    log = (second.cwd / "logs.log").read_text(errors="replace") if (second.cwd / "logs.log").exists() else ""
    c.that("unsubscribed SUBSCRIBE sip:notifier@" in log, f"the unsubscribe's Request-URI is the Contact: {log.strip()[-200:]!r}")
    events = edge_events(edge)
    c.that(any(w == "document ignored (version)" and n == 5 for _, w, n, _ in events), "the gap (v5) was ignored")
    return c


def notifier_allow_list(run: Run) -> Checks:
    c = Checks("notifier_allow_list: loadctl notifier answers 403 to subscribers it does not know (RFC 7200 §4.6)")
    policy = run.path("policy.xml")
    policy.write_text(document(0, "full", rate_rule(10)))
    allow = run.path("allow.txt")
    allow.write_text("# subscribers that may receive our policies\n\nallowed.example   # the upstream proxies\n")
    # No allow-list at all: it refuses to start (exit 2) rather than serve everyone.
    refused = run.start("no-allow", [LOADCTL, "notifier", "--listen", f"127.0.0.1:{free_udp_port()}", "--policy", policy, "--duration", 5])
    code = refused.wait(timeout=10)
    c.that(code == 2, f"without --allow / --allow-file / --allow-any it does not start (exit {code})")
    nport = free_udp_port()
    notifier = run.start(
        "notifier",
        [LOADCTL, "notifier", "--listen", f"127.0.0.1:{nport}", "--policy", policy, "--duration", 60,
         "--allow", "sip:edge@elsewhere.example", "--allow-file", allow],
    )
    wait_udp_port(nport, proc=notifier)
    template = (HERE / "scenarios" / "subscriber.xml").read_text()
    forbidden = run.path("subscriber_forbidden.xml")
    forbidden.write_text(template.replace("@EXPECT@", '  <recv response="403"/>\n'))
    allowed = run.path("subscriber_allowed.xml")
    allowed.write_text(template.replace("@EXPECT@", ALLOWED_STEPS))
    results = {}
    for name, scenario, host in (("unlisted", forbidden, "unlisted.example"), ("listed", allowed, "p1.allowed.example")):
        ports = SippPorts.pick()
        proc = run.start(name, sipp_command(scenario, ports, remote=f"127.0.0.1:{nport}", calls=1, timeout_s=20, extra=["-key", "from_host", host]))
        results[name] = (proc.wait(timeout=30), proc)
    code, proc = results["unlisted"]
    c.that(code == 0, f"a SUBSCRIBE from sip:edge@unlisted.example is answered 403 (exit {code}): {SippOutputs(proc.cwd).errors(300)!r}")
    code, proc = results["listed"]
    log = (proc.cwd / "logs.log").read_text(errors="replace") if (proc.cwd / "logs.log").exists() else ""
    c.that(code == 0, f"a SUBSCRIBE from sip:edge@p1.allowed.example gets 200, a NOTIFY and its unsubscribe completes (exit {code}): "
           f"{SippOutputs(proc.cwd).errors(300)!r}")
    c.that('state="full"' in log and "prefix-1555" in log, f"the NOTIFY carried the full policy: {log.strip()[-200:]!r}")
    return c


ALLOWED_STEPS = """
  <recv response="200" rrs="true">
    <action>
      <ereg regexp=";tag=[^;> ]*" search_in="hdr" header="To:" check_it="true" assign_to="totag"/>
    </action>
  </recv>
  <recv request="NOTIFY">
    <action>
      <ereg regexp="state=.full.*rule id=.prefix-1555." search_in="body" check_it="true" assign_to="doc"/>
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
      Content-Length: 0

    ]]>
  </send>
  <nop>
    <action>
      <log message="NOTIFY [$doc]"/>
    </action>
  </nop>
  <send retrans="500">
    <![CDATA[

      SUBSCRIBE sip:loadctl@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      Max-Forwards: 70
      From: <sip:edge@[from_host]>;tag=s[pid]-[call_number]
      To: <sip:loadctl@[remote_ip]:[remote_port]>[$totag]
      Call-ID: [call_id]
      CSeq: 2 SUBSCRIBE
      Contact: <sip:sipp@[local_ip]:[local_port]>
      Event: load-control
      Accept: application/load-control+xml
      Expires: 0
      Content-Length: 0

    ]]>
  </send>
  <recv response="200"/>
  <recv request="NOTIFY"/>
  <send>
    <![CDATA[

      SIP/2.0 200 OK
      [last_Via:]
      [last_From:]
      [last_To:]
      [last_Call-ID:]
      [last_CSeq:]
      Content-Length: 0

    ]]>
  </send>
"""


# ---------------------------------------------------------------------------------------------
# TCP


def edge_stats(proc: harness.Proc) -> dict:
    """The edge's counters: SIGUSR1 makes it print them (Prometheus text) on stdout."""
    before = proc.stdout_path.stat().st_size if proc.stdout_path.exists() else 0
    proc.send_signal(signal.SIGUSR1)
    harness.wait_until(lambda: "edge_dropped_total" in proc.stdout_path.read_bytes()[before:].decode(errors="replace"), 3.0)
    out = {}
    for line in proc.stdout_path.read_bytes()[before:].decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("edge_"):
            out[parts[0]] = int(parts[1])
    return out


def uas_over_tcp(run: Run, timeout_s: float) -> tuple:
    """A SIPp UAS listening on TCP (-t t1: it takes whatever connections come)."""
    ports = SippPorts.pick(tcp=True)
    uas = run.start("uas", sipp_command("uas.xml", ports, timeout_s=timeout_s, transport="t1", max_concurrent=5000))
    harness.wait_tcp_port(ports.sip, proc=uas)
    return ports, uas


def invite_checks(c: Checks, label: str, out: dict, arrivals_other: int, sent_other: int, uas: SippOutputs):
    c.that(out["invites"] > 0 and out["failed_calls"] == 0, f"{label}: no UAC call failed ({out})")
    c.that(abs(arrivals_other - sent_other) <= 1, f"{label}: every non-matching call passed: {arrivals_other} at the UAS of ~{sent_other} sent")
    answered = out["answered_200"] + out["rejected_503"] + out["redirected_302"]
    c.that(answered == out["invites"], f"{label}: every INVITE was answered 200, 503 or 302: {out['answered_200']} + {out['rejected_503']} + {out['redirected_302']} of {out['invites']}")
    c.that(out["bye_200"] == out["answered_200"], f"{label}: every admitted call completed (ACK, BYE, 200): {out['bye_200']} of {out['answered_200']}")
    stray = uas.counts().get("0_ACK_Recv", -1)
    c.that(stray == 0, f"{label}: the ACKs to the edge's own answers stopped at the edge: {stray} reached the UAS")


def tcp_rate_limit(run: Run) -> Checks:
    c = Checks("tcp_rate_limit: SIPp UAC → edge → SIPp UAS over TCP (-t t1), rate rule R, 3R offered")
    r = 50.0
    seconds = 12
    policy = run.path("policy.xml")
    policy.write_text(document(0, "full", rate_rule(r)))
    uas_ports, uas = uas_over_tcp(run, seconds + 60)
    edge_port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", edge_port, uas_ports.sip, "--policy", policy)
    harness.wait_tcp_port(edge_port, proc=edge)
    # 3R matching calls/s and R/s that match nothing: rows cycle m, m, m, other.
    inf = harness.write_injection(run.path("callees.csv"), [MATCH, MATCH, MATCH, OTHER])
    offered = 4 * r
    calls = int(offered * seconds)
    uac_ports = SippPorts.pick(tcp=True)
    cpu = harness.CpuMeter(edge).start()
    uac = run.start(
        "uac",
        sipp_command("uac_invite.xml", uac_ports, remote=f"127.0.0.1:{edge_port}", inf=inf, rate=offered, calls=calls, timeout_s=seconds + 40, transport="t1"),
    )
    code = uac.wait(timeout=seconds + 50)
    time.sleep(0.6)  # the last BYE's 200
    cpu.stop()
    stats = edge_stats(edge)
    run.stop(uas)
    matching, other = split(SippOutputs(uas.cwd).arrivals())
    out = harness.invite_outcomes(SippOutputs(uac.cwd))
    c.that(code == 0, f"the UAC exited 0 ({code}): {SippOutputs(uac.cwd).errors(300)!r}")
    if matching:
        c.rate("matching calls admitted at R over TCP", matching, matching[0] + 1.0, matching[-1] - 0.5, r)
    else:
        c.that(False, "no matching call reached the UAS")
    invite_checks(c, "t1", out, len(other), out["invites"] // 4, SippOutputs(uas.cwd))
    c.that(out["rejected_503"] > 0 and out["redirected_302"] == 0, f"the excess got 503 at the UAC: {out['rejected_503']}")
    c.that(len(matching) + len(other) == out["answered_200"], f"the UAS saw each admitted call once: {len(matching) + len(other)} vs {out['answered_200']}")
    c.that(
        stats.get("edge_tcp_accepted_total") == 1 and stats.get("edge_tcp_hop_connects_total") == 1,
        f"one connection from the UAC, one to the UAS: accepted {stats.get('edge_tcp_accepted_total')}, to the next hop {stats.get('edge_tcp_hop_connects_total')}",
    )
    c.that(
        stats.get("edge_tcp_framing_errors_total", -1) == 0 and stats.get("edge_tcp_overflows_total", -1) == 0 and stats.get("edge_tcp_responses_orphaned_total", -1) == 0,
        f"no framing error, overflow or orphaned response: {({k: v for k, v in stats.items() if k.startswith('edge_tcp_')})}",
    )
    msgs = SippOutputs(uac.cwd).message_total() + SippOutputs(uas.cwd).message_total()
    if msgs:
        c.that(True, f"edge CPU over TCP: {1e6 * cpu.sched / msgs:.2f} ms per 1,000 messages ({msgs} messages, {cpu.sched:.2f} s on CPU, {cpu.wall:.1f} s)")
    return c


def tcp_connection_per_call(run: Run) -> Checks:
    c = Checks("tcp_connection_per_call: SIPp -t tn (a connection per call, ~150 open at once), 503 and 302 over TCP, a UAC killed mid-test")
    r, r_redirect = 25.0, 10.0
    seconds = 10
    policy = run.path("policy.xml")
    policy.write_text(
        document(
            0,
            "full",
            rate_rule(r)
            + "\n"
            + rule("redirect", "+1777", f"<lc:rate>{r_redirect}</lc:rate>", 'alt-action="redirect" alt-target="sip:overflow@example.net"'),
        )
    )
    uas_ports, uas = uas_over_tcp(run, seconds + 60)
    edge_port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", edge_port, uas_ports.sip, "--policy", policy)
    harness.wait_tcp_port(edge_port, proc=edge)
    # The UAC checks each 302's Contact (check_it: a 302 without it fails the call) and logs it.
    scenario = (HERE / "scenarios" / "uac_invite.xml").read_text()
    plain = '<recv response="302" optional="true" response_txn="invite" next="final_error"/>'
    assert plain in scenario
    scenario = scenario.replace(
        plain,
        '<recv response="302" optional="true" response_txn="invite" next="final_error"><action>'
        '<ereg regexp="Contact: &lt;sip:overflow@example.net&gt;" search_in="msg" check_it="true" assign_to="contact"/>'
        '<log message="302 [$contact]"/></action></recv>',
    )
    uac_scenario = run.path("uac_302.xml")
    uac_scenario.write_text(scenario)
    inf = harness.write_injection(run.path("callees.csv"), [MATCH, MATCH, "+17770001234", OTHER])
    offered = 160.0
    calls = int(offered * seconds)
    # A second UAC on one connection, long calls to a number no rule matches, killed mid-test.
    victim_ports = SippPorts.pick(tcp=True)
    victim_inf = harness.write_injection(run.path("victim.csv"), ["+19990001234"])
    victim = run.start(
        "victim",
        sipp_command("uac_invite.xml", victim_ports, remote=f"127.0.0.1:{edge_port}", inf=victim_inf, rate=40, duration_ms=3000, timeout_s=seconds + 40, transport="t1", logs=False),
    )
    uac_ports = SippPorts.pick(tcp=True)
    uac = run.start(
        "uac",
        sipp_command(
            uac_scenario, uac_ports, remote=f"127.0.0.1:{edge_port}", inf=inf, rate=offered, calls=calls, duration_ms=2000,
            timeout_s=seconds + 40, transport="tn", max_concurrent=2000, extra=("-max_socket", 4000),
        ),
    )
    time.sleep(seconds / 2)
    before = edge_stats(edge)
    run.stop(victim, sig=signal.SIGKILL)  # its connection goes with calls open
    code = uac.wait(timeout=seconds + 50)
    time.sleep(0.6)
    after = edge_stats(edge)
    c.that(edge.alive(), "the edge is still running")
    run.stop(uas)
    arrivals = SippOutputs(uas.cwd).arrivals()
    mine = [a for a in arrivals if not a.callee.startswith("+1999")]
    matching = [a.t for a in mine if a.callee.startswith("+1555")]
    redirected_ok = [a.t for a in mine if a.callee.startswith("+1777")]
    other = [a.t for a in mine if a.callee.startswith("+1666")]
    out = harness.invite_outcomes(SippOutputs(uac.cwd))
    c.that(code == 0, f"the tn UAC exited 0 ({code}): {SippOutputs(uac.cwd).errors(300)!r}")
    if matching and redirected_ok:
        c.rate("+1555 admitted at R (the rest 503)", matching, matching[0] + 1.0, matching[-1] - 0.5, r)
        c.rate("+1777 admitted at its rate (the rest 302)", redirected_ok, redirected_ok[0] + 1.0, redirected_ok[-1] - 0.5, r_redirect)
    else:
        c.that(False, f"calls reached the UAS: {len(matching)} +1555, {len(redirected_ok)} +1777")
    invite_checks(c, "tn", out, len(other), out["invites"] // 4, SippOutputs(uas.cwd))
    logged = (uac.cwd / "logs.log").read_text(errors="replace").count("302 Contact: <sip:overflow@example.net>") if (uac.cwd / "logs.log").exists() else 0
    c.that(out["redirected_302"] > 0 and logged == out["redirected_302"], f"302 over TCP, each with the rule's Contact: {out['redirected_302']} received, {logged} checked")
    c.that(out["rejected_503"] > 0, f"503 over TCP: {out['rejected_503']}")
    c.that(
        out["invites"] > 0 and after.get("edge_tcp_accepted_total", 0) >= out["invites"],
        f"a connection per call: {after.get('edge_tcp_accepted_total')} accepted for {out['invites']} calls (+1 for the killed UAC)",
    )
    open_mid = before.get("edge_tcp_accepted_total", 0) - before.get("edge_tcp_closed_total", 0)
    c.that(open_mid >= 100, f"many connections open at once: {open_mid} half-way (the ~75 admitted calls/s hold theirs for 2 s: ~150, + 1)")
    c.that(after.get("edge_tcp_hop_connects_total") == 1, f"one connection to the next hop: {after.get('edge_tcp_hop_connects_total')}")
    c.that(
        after.get("edge_tcp_framing_errors_total", -1) == 0 and after.get("edge_tcp_overflows_total", -1) == 0,
        f"no framing error or overflow; responses for the killed UAC's connection dropped: {after.get('edge_tcp_responses_orphaned_total')} "
        f"(before the kill {before.get('edge_tcp_responses_orphaned_total')})",
    )
    return c


class UdpPeers:
    """A Python client and next hop on loopback UDP sockets, for one-request checks."""

    def __init__(self):
        self.hop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.hop.bind(("127.0.0.1", 0))
        self.client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.client.bind(("127.0.0.1", 0))
        self.hop_port = self.hop.getsockname()[1]
        self.cport = self.client.getsockname()[1]
        self.n = 0

    def invite(self, edge_port: int, ruri: str, to: str, extra: str = "") -> tuple:
        """Sends one INVITE to the edge; (first lines of what came back to the client, how
        many requests reached the next hop)."""
        self.n += 1
        n = self.n
        msg = (
            f"INVITE {ruri} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{self.cport};branch=z9hG4bK-x-{n}\r\n"
            f"From: <sip:alice@127.0.0.1:{self.cport}>;tag=a{n}\r\nTo: {to}\r\n"
            f"Call-ID: x-{n}@e2e\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\n{extra}Content-Length: 0\r\n\r\n"
        ).encode()
        self.client.sendto(msg, ("127.0.0.1", edge_port))
        replies = [r.splitlines()[0] for r in self.drain(self.client)]
        return replies, len(self.drain(self.hop))

    @staticmethod
    def drain(sock, quiet: float = 0.3) -> list:
        out = []
        sock.settimeout(quiet)
        try:
            while True:
                out.append(sock.recv(65535).decode(errors="replace"))
        except socket.timeout:
            pass
        return out

    def close(self):
        self.hop.close()
        self.client.close()


def targets_and_exemptions(run: Run) -> Checks:
    """The next hop is the target entity (RFC 7200 §5.3.3), and emergency / priority calls pass
    a rule that rejects every INVITE (RFC 7200 §4.8, RFC 5031, RFC 4412)."""
    c = Checks("targets_and_exemptions: target-sip-entity is the next hop; sos and ets/wps pass")
    peers = UdpPeers()
    hop_uri = f"sip:127.0.0.1:{peers.hop_port}"

    def targeted(rule_id: str, prefix: str, target: str, alt_target: str) -> str:
        return (
            f'<rule id="{rule_id}"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix="{prefix}"/>'
            f"</lc:to></lc:sip></lc:call-identity><lc:target-sip-entity>{target}</lc:target-sip-entity></conditions>"
            f'<actions><lc:accept alt-action="redirect" alt-target="{alt_target}"><lc:rate>0</lc:rate></lc:accept></actions></rule>'
        )

    every_invite = (
        '<rule id="every-invite"><conditions><method>INVITE</method></conditions>'
        "<actions><lc:accept><lc:rate>0</lc:rate></lc:accept></actions></rule>"
    )
    path = run.path("policy.xml")
    path.write_text(
        document(
            0,
            "full",
            "\n".join(
                [
                    targeted("to-hop", "+1777", hop_uri, "sip:via-hop@example.net"),
                    targeted("to-elsewhere", "+1666", "sip:192.0.2.1:5060", "sip:via-elsewhere@example.net"),
                    every_invite,
                ]
            ),
        )
    )
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, peers.hop_port, "--policy", path)
    replies, _ = peers.invite(port, "sip:+17770000000@127.0.0.1;user=phone", "<sip:+17770000000@127.0.0.1;user=phone>")
    c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 302"),
           f"a rule whose target-sip-entity is the next hop ({hop_uri}) applies: 302 ({replies})")
    replies, _ = peers.invite(port, "sip:+16660000000@127.0.0.1;user=phone", "<sip:+16660000000@127.0.0.1;user=phone>")
    c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 503"),
           f"a rule for another target does not; the next rule rejects: 503 ({replies})")
    replies, _ = peers.invite(port, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>")
    c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 503"), f"an ordinary INVITE: 503 ({replies})")
    # RFC 5031 §4.2: urn:service:sos and its sub-services; RFC 4412 §3.1: namespace.priority.
    exempt_calls = [
        ("urn:service:sos", "<urn:service:sos>", "", "an emergency call (urn:service:sos)"),
        ("urn:service:sos.police", "<urn:service:sos.police>", "", "an emergency call (urn:service:sos.police)"),
        ("sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", "Resource-Priority: ets.0\r\n", "Resource-Priority: ets.0"),
        ("sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", "Resource-Priority: dsn.flash, wps.2\r\n", "Resource-Priority: dsn.flash, wps.2"),
    ]
    for ruri, to, extra, label in exempt_calls:
        replies, forwarded = peers.invite(port, ruri, to, extra)
        c.that(replies == [] and forwarded == 1, f"{label} is exempt: forwarded ({forwarded}), no answer ({replies})")
    replies, forwarded = peers.invite(port, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", "Resource-Priority: dsn.flash\r\n")
    c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 503") and forwarded == 0,
           f"a namespace not listed (dsn) is filtered: 503 ({replies})")
    run.stop(edge)
    # Exemptions off: the same calls are filtered like any other.
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge-off", port, peers.hop_port, "--policy", path, "--no-emergency-exempt", "--priority-namespaces", "")
    for ruri, to, extra, label in exempt_calls:
        replies, forwarded = peers.invite(port, ruri, to, extra)
        c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 503") and forwarded == 0,
               f"--no-emergency-exempt --priority-namespaces '': {label} gets 503 ({replies})")
    run.stop(edge)
    # Only the namespaces listed.
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge-q735", port, peers.hop_port, "--policy", path, "--priority-namespaces", "q735")
    replies, forwarded = peers.invite(port, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", "Resource-Priority: q735.2\r\n")
    c.that(replies == [] and forwarded == 1, f"--priority-namespaces q735: q735.2 is exempt ({replies})")
    replies, forwarded = peers.invite(port, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", "Resource-Priority: ets.0\r\n")
    c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 503"), f"--priority-namespaces q735: ets.0 gets 503 ({replies})")
    run.stop(edge)
    # A namespace that is not an RFC 4412 token: refused at start-up.
    bad = run.start("edge-bad", [EDGE, "--listen", f"127.0.0.1:{free_udp_port(tcp=True)}", "--next-hop", f"127.0.0.1:{peers.hop_port}",
                                 "--policy", path, "--priority-namespaces", "ets.0"])
    code = bad.wait(timeout=10)
    c.that(code == 2 and "priority-namespaces" in bad.stderr_path.read_text(), f"--priority-namespaces ets.0 is refused (exit {code})")
    peers.close()
    return c


def redirect_agreement(run: Run) -> Checks:
    """RFC 7200 §7: "this specification requires that a Trust Domain agrees on ... the
    destinations to which calls may be redirected". A notifier's redirect into its own domain
    (here its host 127.0.0.1) is used; one to bank.example is answered 503 and logged, until
    --redirect-allow lists it. The edge's own --policy file is trusted."""
    c = Checks("redirect_agreement: a notifier's redirect outside its own domain is refused")
    rules = "\n".join(
        [
            rule("own-domain", "+1777", "<lc:rate>0</lc:rate>", 'alt-action="redirect" alt-target="sip:ivr@127.0.0.1"'),
            rule("victim", "+1888", "<lc:rate>0</lc:rate>", 'alt-action="redirect" alt-target="sip:victim@bank.example"'),
        ]
    )
    policy = run.path("policy.xml")
    policy.write_text(document(0, "full", rules))
    nport = free_udp_port(tcp=True)
    notifier = run.start("notifier", [LOADCTL, "notifier", "--listen", f"127.0.0.1:{nport}", "--policy", policy, "--duration", 60, "--allow", "127.0.0.1"])
    wait_udp_port(nport, proc=notifier)
    peers = UdpPeers()
    for label, args, victim_status in [
        ("no allow-list", [], "503"),
        ("--redirect-allow bank.example", ["--redirect-allow", "bank.example"], "302"),
    ]:
        port = free_udp_port(tcp=True)
        edge = start_edge(run, f"edge-{victim_status}", port, peers.hop_port, "--subscribe", f"sip:loadctl@127.0.0.1:{nport}",
                          "--uri", f"sip:edge@127.0.0.1:{port}", *args)
        wait_event(edge, "policy applied (version)", 0)
        replies, _ = peers.invite(port, "sip:+17770000000@127.0.0.1;user=phone", "<sip:+17770000000@127.0.0.1;user=phone>")
        c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 302"), f"{label}: redirect into the notifier's own domain: 302 ({replies})")
        replies, _ = peers.invite(port, "sip:+18880000000@127.0.0.1;user=phone", "<sip:+18880000000@127.0.0.1;user=phone>")
        c.that(len(replies) == 1 and replies[0].startswith(f"SIP/2.0 {victim_status}"),
               f"{label}: redirect to bank.example: {victim_status} ({replies})")
        logged = [e for e in edge_events(edge) if e[1] == "redirect outside the allow-list"]
        if victim_status == "503":
            c.that(len(logged) == 1 and logged[0][3] == "victim", f"{label}: the refused rule logged once, by id: {logged}")
        else:
            c.that(logged == [], f"{label}: nothing logged: {logged}")
        run.stop(edge)
    # The same document as the edge's own --policy file: trusted.
    port = free_udp_port(tcp=True)
    start_edge(run, "edge-local", port, peers.hop_port, "--policy", policy)
    replies, _ = peers.invite(port, "sip:+18880000000@127.0.0.1;user=phone", "<sip:+18880000000@127.0.0.1;user=phone>")
    c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 302"), f"the operator's --policy file is trusted: 302 ({replies})")
    peers.close()
    return c


def run_tests(tests: dict, names: list, keep: bool, label: str, prefix: str = "") -> int:
    """Runs `names` (all of `tests` when empty), each in its own `Run` (kept when it fails or
    with `keep`), prints each test's checks and a summary line; the exit status."""
    started_all = time.monotonic()
    unknown = [name for name in names if name not in tests]
    if unknown:
        print(f"unknown test {unknown[0]}", file=sys.stderr)
        return 2
    with harness.Neighbour():
        failed = _run_each(tests, names, keep, prefix)
    n = len(names or tests)
    print(f"{label}{' (NEIGHBOUR=1)' if os.environ.get('NEIGHBOUR') == '1' else ''}: {n} tests, {len(failed)} failed "
          f"{failed if failed else ''} ({time.monotonic() - started_all:.0f} s)")
    return 1 if failed else 0


def _run_each(tests: dict, names: list, keep: bool, prefix: str) -> list:
    failed = []
    for name in names or tests:
        started = time.monotonic()
        try:
            with Run(f"{prefix}{name}", keep=keep) as run:
                ok = tests[name](run).report()
                if not ok:
                    run.keep = True
        except Exception as e:  # a harness error is a failed test, with its logs kept
            print(f"== {name}\n   FAIL  {type(e).__name__}: {e}")
            ok = False
        print(f"   ({time.monotonic() - started:.1f} s)")
        if not ok:
            failed.append(name)
    return failed


SHARE = re.compile(r"^loadctl notifier: (\S+) share ([0-9.]+)/s")


def notifier_observe_reports(run: Run) -> Checks:
    """`loadctl notifier --observe`: demand reports over UDP (lines `SUBSCRIBER-URI COUNT`) steer
    the shares. Two edges subscribe; the reports say 10/s from the first and 100/s from the
    second: the first is a donor (its rate × 1.15 = 11.5/s), the second gets the rest of 60."""
    c = Checks("notifier_observe_reports: loadctl notifier shares by reported demand")
    template = run.path("template.xml")
    template.write_text(document(0, "full", rate_rule(1)))
    nport, oport = free_udp_port(tcp=True), free_udp_port()
    notifier = run.start(
        "notifier",
        [LOADCTL, "notifier", "--listen", f"127.0.0.1:{nport}", "--capacity", 60, "--template", template, "--observe", f"127.0.0.1:{oport}",
         "--duration", 30, "--allow", "127.0.0.1"],
    )
    wait_udp_port(nport, proc=notifier)
    wait_udp_port(oport, proc=notifier)
    uris = []
    edges = []
    for k in range(2):
        port = free_udp_port(tcp=True)
        uris.append(f"sip:edge{k}@127.0.0.1:{port}")
        edges.append(start_edge(run, f"edge{k}", port, free_udp_port(), "--subscribe", f"sip:loadctl@127.0.0.1:{nport}", "--uri", uris[-1]))
    for e in edges:
        wait_event(e, "policy applied (version)", 0)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"not a report\n", ("127.0.0.1", oport))
    start = time.time()
    while time.time() - start < 6.0:
        s.sendto(f"{uris[0]} 1\n# ten a second from edge 0, a hundred from edge 1\n{uris[1]} 10\n".encode(), ("127.0.0.1", oport))
        time.sleep(0.1)
    s.close()
    last = {}
    for line in notifier.stderr_path.read_text(errors="replace").splitlines():
        m = SHARE.match(line)
        if m:
            last[m.group(1)] = float(m.group(2))
    got = [last.get(u, -1.0) for u in uris]
    c.that(abs(got[0] / 11.5 - 1.0) <= 0.05, f"edge 0 (10/s reported) has {got[0]}/s: its rate + 15 % headroom = 11.5/s ± 5 %")
    c.that(got[1] >= 0.95 * (60.0 - 11.5) and sum(got) <= 60.0 + 1e-9, f"edge 1 (100/s reported) has {got[1]}/s: the rest of 60 (48.5) ± 5 %, total {sum(got):.3f} ≤ 60")
    log = notifier.stderr_path.read_text(errors="replace")
    c.that("expected `SUBSCRIBER-URI COUNT`" in log, "a malformed report is logged and ignored")
    return c


# ---------------------------------------------------------------------------------------------
# request validation, the start before a policy arrives, Retry-After, daemon behaviour


def scrape(port: int, path: str = "/metrics", method: str = "GET") -> tuple:
    """(status, headers, body) of one HTTP request to the edge's metrics endpoint."""
    with socket.create_connection(("127.0.0.1", port), timeout=3.0) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
    return int(lines[0].split()[1]), headers, body.decode(errors="replace")


def samples(text: str) -> dict:
    """Prometheus text → {name{labels}: value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def families_documented(text: str) -> list:
    """Sample names whose family has no # HELP or no # TYPE line before it."""
    helped, typed, missing = set(), set(), []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif line:
            name = re.split(r"[{ ]", line, 1)[0]
            if name not in helped or name not in typed:
                missing.append(name)
    return missing


def sip_request(method: str, ruri: str, cport: int, n: int, headers: str = None, mf: str = "Max-Forwards: 70\r\n") -> bytes:
    """A request from 127.0.0.1:cport; `headers` replaces Via/From/To/Call-ID/CSeq when given."""
    if headers is None:
        headers = (
            f"Via: SIP/2.0/UDP 127.0.0.1:{cport};branch=z9hG4bK-v-{n}\r\n"
            f"From: <sip:alice@127.0.0.1:{cport}>;tag=a{n}\r\nTo: <sip:bob@127.0.0.1>\r\n"
            f"Call-ID: v-{n}@e2e\r\nCSeq: 1 {method}\r\n"
        )
    return f"{method} {ruri} SIP/2.0\r\n{headers}{mf}Content-Length: 0\r\n\r\n".encode()


def request_validation(run: Run) -> Checks:
    """RFC 3261 §16.3 (request validation) and §16.6 step 3 (Max-Forwards) at the edge, one
    request per case from a Python client, a Python socket as next hop."""
    c = Checks("request_validation: RFC 3261 §16.3 checks and §16.6 Max-Forwards")
    path = run.path("policy.xml")
    path.write_text(document(0, "full", ""))
    peers = UdpPeers()
    port, mport = free_udp_port(tcp=True), free_udp_port(tcp=True)
    start_edge(run, "edge", port, peers.hop_port, "--policy", path, "--metrics", f"127.0.0.1:{mport}")
    cp = peers.cport

    def send(msg: bytes) -> tuple:
        peers.client.sendto(msg, ("127.0.0.1", port))
        return peers.drain(peers.client), peers.drain(peers.hop)

    ok_headers = lambda n, method="INVITE": (  # noqa: E731
        f"Via: SIP/2.0/UDP 127.0.0.1:{cp};branch=z9hG4bK-v-{n}\r\nFrom: <sip:a@127.0.0.1>;tag=a{n}\r\n"
        f"To: <sip:b@127.0.0.1>\r\nCall-ID: v-{n}@e2e\r\nCSeq: 1 {method}\r\n"
    )
    cases = [
        # (label, request, expected status line start or None for no answer, forwarded?)
        ("Max-Forwards: 0 (§16.3 item 3: \"the element MUST return a 483\")",
         sip_request("INVITE", "sip:b@127.0.0.1", cp, 1, mf="Max-Forwards: 0\r\n"), "SIP/2.0 483", False),
        ("OPTIONS with Max-Forwards: 0 (§16.3 item 3: MAY \"act as the final recipient\", §11)",
         sip_request("OPTIONS", "sip:b@127.0.0.1", cp, 2, mf="Max-Forwards: 0\r\n"), "SIP/2.0 200", False),
        ("an ACK with Max-Forwards: 0 (no response to an ACK, not forwarded)",
         sip_request("ACK", "sip:b@127.0.0.1", cp, 3, mf="Max-Forwards: 0\r\n"), None, False),
        ("no Via (no response can be routed: dropped)",
         sip_request("INVITE", "sip:b@127.0.0.1", cp, 4, headers=ok_headers(4).split("\r\n", 1)[1]), None, False),
        ("a Via that does not parse (dropped)",
         sip_request("INVITE", "sip:b@127.0.0.1", cp, 5, headers="Via: garbage\r\n" + ok_headers(5).split("\r\n", 1)[1]), None, False),
        ("a garbage Request-URI (§16.3 item 1: 400)", sip_request("INVITE", "garbage", cp, 6, headers=ok_headers(6)), "SIP/2.0 400", False),
        ("an http: Request-URI (§16.3 item 2: 416)", sip_request("INVITE", "http://example.org/", cp, 7, headers=ok_headers(7)),
         "SIP/2.0 416", False),
        ("no Call-ID (400)", sip_request("INVITE", "sip:b@127.0.0.1", cp, 8, headers=ok_headers(8).replace("Call-ID: v-8@e2e\r\n", "")),
         "SIP/2.0 400", False),
        ("no CSeq (400)", sip_request("INVITE", "sip:b@127.0.0.1", cp, 9, headers=ok_headers(9).replace("CSeq: 1 INVITE\r\n", "")),
         "SIP/2.0 400", False),
        ("no From (400)", sip_request("INVITE", "sip:b@127.0.0.1", cp, 10, headers=ok_headers(10).replace("From: <sip:a@127.0.0.1>;tag=a10\r\n", "")),
         "SIP/2.0 400", False),
        ("Proxy-Require: foo (§16.3 item 5: 420 with Unsupported)",
         sip_request("INVITE", "sip:b@127.0.0.1", cp, 11, headers=ok_headers(11) + "Proxy-Require: foo\r\n"), "SIP/2.0 420", False),
    ]
    for label, msg, status, forwarded in cases:
        replies, fwd = send(msg)
        heads = [r.splitlines()[0] for r in replies]
        want = [] if status is None else [status]
        c.that([h[: len(status)] for h in heads] == want if status else heads == [],
               f"{label}: answered {heads or 'nothing'}, forwarded {len(fwd)}")
        c.that(bool(fwd) == forwarded, f"{label}: {'forwarded' if forwarded else 'not forwarded'} ({len(fwd)})")
        if status == "SIP/2.0 420":
            c.that(bool(replies) and "\r\nUnsupported: foo\r\n" in replies[0], "420 lists the tag: Unsupported: foo")
        if status == "SIP/2.0 200":
            c.that(bool(replies) and "\r\nAllow: " in replies[0], "the 200 to OPTIONS carries Allow (§11.2)")
    # §16.6 step 3: decremented when present, "MUST add one … which SHOULD be 70" when absent.
    _, fwd = send(sip_request("INVITE", "sip:b@127.0.0.1", cp, 12, mf="Max-Forwards: 10\r\n"))
    c.that(len(fwd) == 1 and "\r\nMax-Forwards: 9\r\n" in fwd[0], "Max-Forwards: 10 is forwarded as 9")
    _, fwd = send(sip_request("INVITE", "sip:b@127.0.0.1", cp, 13, mf=""))
    c.that(len(fwd) == 1 and "\r\nMax-Forwards: 70\r\n" in fwd[0], "no Max-Forwards: forwarded with Max-Forwards: 70")
    _, _, body = scrape(mport)
    got = samples(body)
    for reason, n in [("too-many-hops", 1), ("options-max-forwards-0", 1), ("bad-ack", 1), ("no-via", 2), ("bad-syntax", 4),
                      ("bad-scheme", 1), ("bad-extension", 1)]:
        key = f'edge_invalid_requests_total{{reason="{reason}"}}'
        c.that(got.get(key) == n, f"{key} = {got.get(key)} (expected {n})")
    # Over TCP the same checks apply (one handler for both transports): 483 and 400 on the connection.
    with socket.create_connection(("127.0.0.1", port), timeout=3.0) as t:
        tcp_headers = lambda n: ok_headers(n).replace("SIP/2.0/UDP", "SIP/2.0/TCP")  # noqa: E731
        t.sendall(sip_request("INVITE", "sip:b@127.0.0.1", cp, 20, headers=tcp_headers(20), mf="Max-Forwards: 0\r\n")
                  + sip_request("INVITE", "sip:b@127.0.0.1", cp, 21, headers=tcp_headers(21).replace("Call-ID: v-21@e2e\r\n", "")))
        got, deadline = b"", time.monotonic() + 2.0
        while got.count(b"SIP/2.0 ") < 2 and time.monotonic() < deadline:
            got += t.recv(65535)
    heads = [line for line in got.decode(errors="replace").split("\r\n") if line.startswith("SIP/2.0 ")]
    c.that([h[:11] for h in heads] == ["SIP/2.0 483", "SIP/2.0 400"], f"over TCP: Max-Forwards 0 → 483, no Call-ID → 400 ({heads})")
    c.that(peers.drain(peers.hop) == [], "over TCP: neither reached the next hop over UDP")
    # The edge as its own next hop: the OPTIONS comes back through it once and is a loop
    # (§16.3 item 4: "If the parameters match, the request has looped … MAY return a 482").
    lport, lmport = free_udp_port(tcp=True), free_udp_port(tcp=True)
    start_edge(run, "edge-loop", lport, lport, "--policy", path, "--metrics", f"127.0.0.1:{lmport}")
    peers.client.sendto(sip_request("OPTIONS", "sip:b@127.0.0.1", cp, 14), ("127.0.0.1", lport))
    replies = [r.splitlines()[0] for r in peers.drain(peers.client, 1.0)]
    got = samples(scrape(lmport)[2])
    c.that(replies[:1] == ["SIP/2.0 482 Loop Detected"] and len(replies) == 1, f"own next hop: the caller gets one 482 ({replies})")
    loops = got.get('edge_invalid_requests_total{reason="loop"}')
    c.that(got.get("edge_forwarded_total") == 1 and loops == 1,
           f"own next hop: forwarded once, then the loop detected: {got.get('edge_forwarded_total')} forwarded, {loops} loop")
    peers.close()
    return c


def retry_after(run: Run) -> Checks:
    """RFC 3261 §21.5.4: a client "SHOULD NOT forward any other requests to that server for the
    duration specified in the Retry-After header field", so the 503s of a rule carry none unless
    --retry-after asks for it."""
    c = Checks("retry_after: none by default, --retry-after SECONDS when asked")
    path = run.path("policy.xml")
    path.write_text(document(0, "full", rate_rule(0)))
    peers = UdpPeers()
    for label, args, want in [("default", [], None), ("--retry-after 7", ["--retry-after", "7"], "Retry-After: 7"),
                              ("--retry-after 0", ["--retry-after", "0"], None)]:
        port = free_udp_port(tcp=True)
        edge = start_edge(run, f"edge-{len(args)}-{want is None}", port, peers.hop_port, "--policy", path, *args)
        peers.client.sendto(sip_request("INVITE", f"sip:{MATCH}@127.0.0.1;user=phone", peers.cport, 1,
                                        headers=f"Via: SIP/2.0/UDP 127.0.0.1:{peers.cport};branch=z9hG4bK-ra-{port}\r\n"
                                        f"From: <sip:a@127.0.0.1>;tag=a\r\nTo: <sip:{MATCH}@127.0.0.1;user=phone>\r\n"
                                        f"Call-ID: ra-{port}@e2e\r\nCSeq: 1 INVITE\r\n"), ("127.0.0.1", port))
        replies = peers.drain(peers.client)
        lines = replies[0].split("\r\n") if replies else []
        ra = [line for line in lines if line.lower().startswith("retry-after")]
        c.that(bool(lines) and lines[0].startswith("SIP/2.0 503"), f"{label}: 503 ({lines[:1]})")
        c.that(ra == ([want] if want else []), f"{label}: Retry-After {ra or 'absent'}")
        run.stop(edge)
    bad = run.start("edge-bad", [EDGE, "--listen", f"127.0.0.1:{free_udp_port(tcp=True)}", "--next-hop", f"127.0.0.1:{peers.hop_port}",
                                 "--policy", path, "--retry-after", "soon"])
    c.that(bad.wait(timeout=10) == 2, "--retry-after soon is refused (exit 2)")
    peers.close()
    return c


def offer_calls(edge_port: int, rate: float, seconds: float, prefix: str = "+1555") -> tuple:
    """Sends rate·seconds INVITEs (distinct calls) to the edge from a Python socket while a
    Python next hop receives; (send times, next-hop arrival times (monotonic), answers by status,
    Retry-After seen, hop socket, client socket). The sockets stay open for more checks."""
    import threading

    hop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hop.bind(("127.0.0.1", 0))
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    client.bind(("127.0.0.1", 0))
    arrivals, answers, retry = [], {}, []
    stop = threading.Event()

    def receive(sock, on):
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                on(sock.recv(65535).decode(errors="replace"))
            except socket.timeout:
                pass

    def on_answer(m):
        status = m.split(" ", 2)[1]
        answers[status] = answers.get(status, 0) + 1
        if "\r\nRetry-After:" in m:
            retry.append(m)

    threads = [threading.Thread(target=receive, args=(hop, lambda m: arrivals.append(time.monotonic())), daemon=True),
               threading.Thread(target=receive, args=(client, on_answer), daemon=True)]
    for t in threads:
        t.start()
    return hop, client, arrivals, answers, retry, stop, threads


def drive(client, edge_port: int, rate: float, seconds: float, tag: str) -> list:
    cport = client.getsockname()[1]
    sent = []
    start = time.monotonic()
    n = int(rate * seconds)
    for k in range(n):
        due = start + k / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        callee = f"+1555{k:07d}"
        client.sendto(
            (f"INVITE sip:{callee}@127.0.0.1;user=phone SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{cport};branch=z9hG4bK-{tag}-{k}\r\n"
             f"From: <sip:a@127.0.0.1:{cport}>;tag=f{k}\r\nTo: <sip:{callee}@127.0.0.1;user=phone>\r\nCall-ID: {tag}-{k}@e2e\r\n"
             f"CSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n").encode(), ("127.0.0.1", edge_port))
        sent.append(time.monotonic())
    return sent


def max_in_window(ts: list, window: float) -> int:
    ts = sorted(ts)
    best, j = 0, 0
    for i, t in enumerate(ts):
        while ts[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


def no_policy_fallback(run: Run) -> Checks:
    """The notifier is down at start: the startup hold (2 s) ends without its policy. With
    --fallback-policy (a rate R) the held requests and those after are classified under the
    fallback: never more than the GCRA's r·(1 s + τ) + 1 (τ = 100 ms) in any 1 s window."""
    c = Checks("no_policy_fallback: notifier down, the fallback policy limits held and new calls")
    r, offered, seconds = 20.0, 60.0, 4.0
    fallback = run.path("fallback.xml")
    fallback.write_text(document(0, "full", rate_rule(r, rule_id="fallback-rate")))
    port, nport = free_udp_port(tcp=True), free_udp_port()  # nothing listens at nport
    hop, client, arrivals, answers, retry, stop, threads = offer_calls(port, offered, seconds)
    edge = start_edge(run, "edge", port, hop.getsockname()[1], "--subscribe", f"sip:loadctl@127.0.0.1:{nport}",
                      "--fallback-policy", fallback, "--startup-hold-ms", "2000")
    sent = drive(client, port, offered, seconds, "fb")
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    bound = r * 1.1 + 1
    worst = max_in_window(arrivals, 1.0)
    log = edge.stderr_path.read_text(errors="replace")
    held = re.search(r"startup hold ended: (\d+) requests held", log)
    c.that(held is not None and int(held.group(1)) >= offered * 1.5,
           f"the hold ended without a policy and released {held.group(1) if held else '?'} held requests (offered {offered:g}/s for the 2 s hold)")
    c.that(worst <= bound, f"at most {worst} INVITEs reached the next hop in any 1 s (bound r·(1 s + τ) + 1 = {bound:g})")
    c.that(len(arrivals) >= 0.8 * r * 2.0, f"the fallback admits: {len(arrivals)} forwarded of {len(sent)} (≥ 0.8·R·2 s after the hold)")
    c.that(len(arrivals) + answers.get("503", 0) == len(sent), f"every call forwarded or answered 503: {len(arrivals)} + {answers}")
    c.that(retry == [], f"no Retry-After on the fallback's 503s ({len(retry)})")
    hop.close()
    client.close()
    return c


def no_policy_reject(run: Run) -> Checks:
    """No notifier and no --fallback-policy: what no rule classifies is answered 503 without
    Retry-After (held requests too); in-dialog requests (RFC 7200 §5.1: not filtered) pass."""
    c = Checks("no_policy_reject: notifier down, no fallback: unclassified new requests get 503")
    port, nport = free_udp_port(tcp=True), free_udp_port()
    hop, client, arrivals, answers, retry, stop, threads = offer_calls(port, 30.0, 3.0)
    edge = start_edge(run, "edge", port, hop.getsockname()[1], "--subscribe", f"sip:loadctl@127.0.0.1:{nport}",
                      "--startup-hold-ms", "1000")
    sent = drive(client, port, 30.0, 3.0, "rj")
    cport = client.getsockname()[1]
    for k in range(5):
        client.sendto((f"BYE sip:b@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{cport};branch=z9hG4bK-bye-{k}\r\n"
                       f"From: <sip:a@127.0.0.1>;tag=f{k}\r\nTo: <sip:b@127.0.0.1>;tag=t{k}\r\nCall-ID: bye-{k}@e2e\r\n"
                       f"CSeq: 2 BYE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n").encode(), ("127.0.0.1", port))
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    stats = edge_stats(edge)
    c.that(answers.get("503", 0) == len(sent), f"every INVITE answered 503: {answers} of {len(sent)}")
    c.that(retry == [], f"without Retry-After ({len(retry)} had one)")
    c.that(len(arrivals) == 5, f"only the 5 in-dialog BYEs reached the next hop ({len(arrivals)})")
    c.that(stats.get("edge_no_policy_rejected_total") == len(sent), f"edge_no_policy_rejected_total = {stats.get('edge_no_policy_rejected_total')}")
    c.that(stats.get("edge_notifier_policy_pending") == 1, "edge_notifier_policy_pending = 1")
    hop.close()
    client.close()
    return c


class FakeNotifier:
    """A notifier on a Python socket: 200 to a SUBSCRIBE and a NOTIFY with `policy`; the
    unsubscribe (Expires: 0) is answered `unsub_status` (200: then a terminated NOTIFY)."""

    def __init__(self, policy: str, unsub_status: int, deaf_s: float = 0.0):
        import threading

        self.deaf_until = time.monotonic() + deaf_s  # SUBSCRIBEs before this are ignored (a notifier still down)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.policy, self.unsub_status = policy, unsub_status
        self.subscribes = []  # (monotonic time, Expires)
        self.notify_answers = []
        self.stop = threading.Event()
        self.cseq = 0
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @staticmethod
    def header(msg: str, name: str) -> str:
        for line in msg.split("\r\n")[1:]:
            if line.lower().startswith(name.lower() + ":"):
                return line.split(":", 1)[1].strip()
        return ""

    def notify(self, sub: str, addr, state: str, body: str = ""):
        self.cseq += 1
        ctype = "Content-Type: application/load-control+xml\r\n" if body else ""
        msg = (f"NOTIFY sip:edge@127.0.0.1:{addr[1]} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{self.port};branch=z9hG4bK-n{self.cseq}\r\n"
               f"Max-Forwards: 70\r\nFrom: <sip:loadctl@127.0.0.1:{self.port}>;tag=n1\r\nTo: {self.header(sub, 'From')}\r\n"
               f"Call-ID: {self.header(sub, 'Call-ID')}\r\nCSeq: {self.cseq} NOTIFY\r\nContact: <sip:loadctl@127.0.0.1:{self.port}>\r\n"
               f"Event: load-control\r\nSubscription-State: {state}\r\n{ctype}Content-Length: {len(body.encode())}\r\n\r\n{body}")
        self.sock.sendto(msg.encode(), addr)

    def serve(self):
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                data, addr = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            msg = data.decode(errors="replace")
            if msg.startswith("SIP/2.0 "):
                self.notify_answers.append(msg.split("\r\n", 1)[0])
                continue
            if not msg.startswith("SUBSCRIBE "):
                continue
            expires = int(self.header(msg, "Expires") or "-1")
            if time.monotonic() < self.deaf_until:
                continue
            self.subscribes.append((time.monotonic(), expires))
            status = 200 if expires != 0 else self.unsub_status
            to = self.header(msg, "To")
            to = to if ";tag=" in to else to + ";tag=n1"
            resp = (f"SIP/2.0 {status} {'OK' if status == 200 else 'Call/Transaction Does Not Exist'}\r\n"
                    f"Via: {self.header(msg, 'Via')}\r\nFrom: {self.header(msg, 'From')}\r\nTo: {to}\r\n"
                    f"Call-ID: {self.header(msg, 'Call-ID')}\r\nCSeq: {self.header(msg, 'CSeq')}\r\n"
                    f"Contact: <sip:loadctl@127.0.0.1:{self.port}>\r\nExpires: {max(expires, 0) if expires == 0 else 3600}\r\nContent-Length: 0\r\n\r\n")
            self.sock.sendto(resp.encode(), addr)
            if status == 200 and expires != 0:
                self.notify(msg, addr, "active;expires=3600", self.policy)
            elif status == 200:
                self.notify(msg, addr, "terminated")

    def close(self):
        self.stop.set()
        self.thread.join()
        self.sock.close()


def unsubscribe_on_stop(run: Run) -> Checks:
    """SIGTERM ends the subscription with one SUBSCRIBE Expires: 0 (RFC 6665 §4.1.2.3) and
    starts no new one, whatever the unsubscribe is answered: on a 481 (the notifier lost the
    dialog) libloadctl's subscriber starts a new subscription, which the edge must not send."""
    c = Checks("unsubscribe_on_stop: one unsubscribe on SIGTERM, no new SUBSCRIBE on the way out")
    policy = document(0, "full", rate_rule(5))
    for status in (481, 200):
        notifier = FakeNotifier(policy, status)
        port = free_udp_port(tcp=True)
        edge = start_edge(run, f"edge-{status}", port, free_udp_port(), "--subscribe", f"sip:loadctl@127.0.0.1:{notifier.port}",
                          "--uri", f"sip:edge@127.0.0.1:{port}")
        wait_event(edge, "policy applied (version)", 0)
        stopped_at = time.monotonic()
        edge.send_signal(signal.SIGTERM)
        code = edge.wait(timeout=5)
        time.sleep(0.5)
        notifier.close()
        after = [e for t, e in notifier.subscribes if t >= stopped_at]
        c.that(code == 0, f"unsubscribe answered {status}: the edge exited 0 ({code})")
        c.that(after == [0], f"unsubscribe answered {status}: SUBSCRIBEs after SIGTERM, by Expires: {after} (expected [0])")
        if status == 200:
            c.that(notifier.notify_answers[-1:] == ["SIP/2.0 200 OK"],
                   f"the terminated NOTIFY after the unsubscribe was answered: {notifier.notify_answers}")
    return c


def fallback_withdrawn(run: Run) -> Checks:
    """The notifier answers only after the startup hold: the fallback (a rate-0 rule on +1555)
    is in force until its policy (rate 1000 on +1555) arrives, then withdrawn."""
    c = Checks("fallback_withdrawn: the fallback gives way to the notifier's policy")
    fallback = run.path("fallback.xml")
    fallback.write_text(document(0, "full", rate_rule(0, rule_id="fallback-rate")))
    notifier = FakeNotifier(document(0, "full", rate_rule(1000)), 200, deaf_s=1.2)
    peers = UdpPeers()
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, peers.hop_port, "--subscribe", f"sip:loadctl@127.0.0.1:{notifier.port}",
                      "--uri", f"sip:edge@127.0.0.1:{port}", "--fallback-policy", fallback, "--startup-hold-ms", "300")
    time.sleep(0.6)
    replies, forwarded = peers.invite(port, f"sip:{MATCH}@127.0.0.1;user=phone", f"<sip:{MATCH}@127.0.0.1;user=phone>")
    c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 503") and forwarded == 0,
           f"after the hold, before the notifier answers: the fallback's rate 0 → 503 ({replies})")
    wait_event(edge, "policy applied (version)", 0)
    log = edge.stderr_path.read_text(errors="replace")
    c.that("fallback policy" in log and "withdrawn" in log, "the edge logged the fallback withdrawn")
    replies, forwarded = peers.invite(port, f"sip:{MATCH}@127.0.0.1;user=phone", f"<sip:{MATCH}@127.0.0.1;user=phone>")
    c.that(replies == [] and forwarded == 1, f"the notifier's rate 1000 in force: forwarded ({replies}, {forwarded})")
    replies, forwarded = peers.invite(port, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>")
    c.that(replies == [] and forwarded == 1, "a call no rule matches passes once the notifier's policy is in force")
    stats = edge_stats(edge)
    c.that(stats.get("edge_notifier_policy_pending") == 0, f"edge_notifier_policy_pending = {stats.get('edge_notifier_policy_pending')}")
    run.stop(edge)
    notifier.close()
    return c


# ---------------------------------------------------------------------------------------------
# the notifier's lifecycle: reload, graceful stop, hard restart

# Which policy is in force, seen from one INVITE each: "old" refuses +1555, "new" refuses +1666
# (rate-0 rules answer the first matching INVITE 503), "none" refuses neither.
OLD_POLICY = rule("old", "+1555", "<lc:rate>0</lc:rate>")
NEW_POLICY = rule("new", "+1666", "<lc:rate>0</lc:rate>")
RETRY_AFTER_S = 2.0  # --retry-after, the default
T2_S = 4.0  # RFC 3261 Timer E's cap: a SUBSCRIBE is retransmitted at least this often for 32 s
SLACK_S = 0.5  # process start, the notifier's 50 ms loop, loopback delivery, a busy neighbour


def in_force(peers: "UdpPeers", port: int) -> str:
    old = peers.invite(port, "sip:+15550000000@127.0.0.1;user=phone", "<sip:+15550000000@127.0.0.1;user=phone>")[0]
    new = peers.invite(port, "sip:+16660000000@127.0.0.1;user=phone", "<sip:+16660000000@127.0.0.1;user=phone>")[0]
    refused = lambda replies: any(r.startswith("SIP/2.0 503") for r in replies)  # noqa: E731
    return {(True, False): "old", (False, True): "new", (False, False): "none"}.get((refused(old), refused(new)), "both")


def start_notifier(run: Run, name: str, nport: int, policy: Path, *args) -> harness.Proc:
    proc = run.start(name, [LOADCTL, "notifier", "--listen", f"127.0.0.1:{nport}", "--policy", policy, "--allow", "127.0.0.1", *args])
    wait_udp_port(nport, proc=proc)
    return proc


def events_after(proc: harness.Proc, what: str, after: float) -> list:
    return [t for t, w, _, _ in edge_events(proc) if w == what and t > after]


def wait_after(proc: harness.Proc, what: str, after: float, timeout: float) -> float:
    if not harness.wait_until(lambda: events_after(proc, what, after), timeout):
        raise AssertionError(f"the edge did not log {what!r} within {timeout} s:\n{proc.tail(30)}")
    return events_after(proc, what, after)[0]


def notifier_reload(run: Run) -> Checks:
    """SIGHUP: a valid file reaches the edge within the pacing interval (RFC 7200 §4.10, 1 s)
    + slack; an invalid one is refused with its line:column and the policy in force stays. With
    --watch an edit alone does the same, within the 1 s check + pacing + slack."""
    c = Checks("notifier_reload: loadctl notifier re-reads its policy on SIGHUP and with --watch")
    policy = run.path("policy.xml")
    policy.write_text(document(0, "full", OLD_POLICY))
    nport = free_udp_port(tcp=True)
    notifier = start_notifier(run, "notifier", nport, policy, "--watch")
    peers = UdpPeers()
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, peers.hop_port, "--subscribe", f"sip:loadctl@127.0.0.1:{nport}", "--uri", f"sip:edge@127.0.0.1:{port}")
    wait_event(edge, "policy applied (version)", 0)
    c.that(in_force(peers, port) == "old", "the first policy is in force")
    policy.write_text(document(0, "full", OLD_POLICY).replace("</lc:rate>", "</lc:rat>"))
    sent = time.time()
    notifier.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "reload refused" in notifier.stderr_path.read_text(errors="replace"), 3.0)
    log = notifier.stderr_path.read_text(errors="replace")
    refusal = [line for line in log.splitlines() if "reload refused" in line]
    c.that(bool(refusal) and re.search(r"policy\.xml:\d+:\d+", refusal[0]) is not None,
           f"a bad file is refused with line:column: {refusal}")
    time.sleep(1.5)
    c.that(notifier.alive(), "the notifier survives SIGHUP and a bad file")
    c.that(events_after(edge, "policy applied (version)", sent) == [] and in_force(peers, port) == "old",
           "after the bad file the edge still enforces the first policy")
    policy.write_text(document(0, "full", NEW_POLICY))
    sent = time.time()
    notifier.send_signal(signal.SIGHUP)
    applied = wait_after(edge, "policy applied (version)", sent, 5.0)
    bound = 1.0 + SLACK_S
    c.that(applied - sent <= bound, f"the new file applied at the edge {applied - sent:.3f} s after SIGHUP (≤ pacing 1 s + {SLACK_S} s)")
    c.that(in_force(peers, port) == "new", "the edge enforces the new policy")
    time.sleep(1.5)
    policy.write_text(document(0, "full", OLD_POLICY))
    written = time.time()
    applied = wait_after(edge, "policy applied (version)", written, 5.0)
    c.that(applied - written <= 2.0 + SLACK_S, f"--watch: the edited file applied {applied - written:.3f} s after the edit (≤ 1 s check + 1 s pacing + {SLACK_S} s)")
    c.that(in_force(peers, port) == "old", "--watch: the edge enforces the edited policy")
    peers.close()
    return c


ISO_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z edge: ")

OPTIONS = ["--listen", "--next-hop", "--policy", "--source", "--subscribe", "--notifier", "--uri", "--expires", "--startup-hold-ms",
           "--fallback-policy", "--redirect-allow", "--no-emergency-exempt", "--priority-namespaces", "--retry-after", "--transport",
           "--max-connections", "--tcp-idle-s", "--linger-us", "--overload-control", "--oc-algorithms", "--oc-occupancy-target",
           "--oc-timeout-ms", "--log-oc", "--metrics", "--help", "--version"]


def cli_and_logs(run: Run) -> Checks:
    """--help, --version, refused command lines (exit 2, the option named), and the ISO 8601 UTC
    time on every log line."""
    import datetime
    import subprocess

    c = Checks("cli_and_logs: --help, --version, refused options, timestamps")

    def edge(*args):
        p = subprocess.run([str(EDGE), *args], capture_output=True, text=True, timeout=10)
        return p.returncode, p.stdout, p.stderr

    code, out, _ = edge("--help")
    c.that(code == 0 and all(o in out for o in OPTIONS), f"--help exits 0 and names every option ({[o for o in OPTIONS if o not in out]} missing)")
    required = out.split("Required:", 1)[1].split("\n\n", 1)[0] if "Required:" in out else ""
    c.that("--listen" in required and "--next-hop" in required, "--help shows --listen and --next-hop as required")
    code, out, _ = edge("--version")
    c.that(code == 0 and "libloadctl" in out, f"--version exits 0: {out.strip()}")
    hop = f"127.0.0.1:{free_udp_port()}"
    policy = run.path("policy.xml")
    policy.write_text(document(0, "full", ""))
    port = free_udp_port(tcp=True)
    base = ["--listen", f"127.0.0.1:{port}", "--next-hop", hop, "--policy", str(policy)]
    for label, args, needle in [
        ("an unknown option", base + ["--bogus"], "--bogus"),
        ("a value missing, the next option in its place", ["--listen", "--next-hop", hop, "--policy", str(policy)], "--listen"),
        ("a stray argument", base + ["stray"], "stray"),
        ("--oc-algorithms without --overload-control", base + ["--oc-algorithms", "loss"], "--overload-control"),
        ("--log-oc without --overload-control", base + ["--log-oc", str(policy) + ".oc"], "--overload-control"),
        ("--listen 127.0.0.1:99999 (port out of range)", ["--listen", "127.0.0.1:99999", "--next-hop", hop, "--policy", str(policy)], "99999"),
        ("--next-hop 127.0.0.1:0", ["--listen", f"127.0.0.1:{port}", "--next-hop", "127.0.0.1:0", "--policy", str(policy)], "--next-hop"),
        ("no --next-hop (required)", ["--listen", f"127.0.0.1:{port}", "--policy", str(policy)], "--next-hop"),
        ("--fallback-policy without --subscribe", base + ["--fallback-policy", str(policy)], "--subscribe"),
    ]:
        code, _, err = edge(*args)
        c.that(code == 2 and needle in err, f"{label}: exit {code}, {err.strip()!r}")
    proc = start_edge(run, "edge", port, int(hop.split(":")[1]), "--policy", policy)
    run.stop(proc)
    lines = [line for line in proc.stderr_path.read_text(errors="replace").splitlines() if line]
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    stamps = [ISO_LINE.match(line) for line in lines]
    c.that(len(lines) >= 3 and all(stamps), f"every log line starts with an ISO 8601 UTC time: {lines[:2]}")
    if all(stamps) and stamps:
        t = datetime.datetime.strptime(stamps[0].group(1), "%Y-%m-%dT%H:%M:%S.%f")
        c.that(abs((now - t).total_seconds()) < 30, f"... in UTC: {stamps[0].group(1)} vs now {now.isoformat()}")
    return c


def metrics_endpoint(run: Run) -> Checks:
    """GET /metrics: the Prometheus text format 0.0.4 with # HELP and # TYPE for every metric;
    a reload that changes a rule's limit (a new rule to the engine, whose own row starts at 0)
    decreases no exported counter; the endpoint is bounded and never holds up SIP."""
    c = Checks("metrics_endpoint: /metrics, monotonic over a reload, bounded")
    path = run.path("policy.xml")
    path.write_text(document(0, "full", rate_rule(1000, rule_id="r")))
    peers = UdpPeers()
    port, mport = free_udp_port(tcp=True), free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, peers.hop_port, "--policy", path, "--metrics", f"127.0.0.1:{mport}")
    harness.wait_tcp_port(mport, proc=edge)

    def calls(n: int):
        for _ in range(n):
            peers.n += 1
            peers.client.sendto(sip_request("INVITE", f"sip:{MATCH}@127.0.0.1;user=phone", peers.cport, 1000 + peers.n,
                                            headers=f"Via: SIP/2.0/UDP 127.0.0.1:{peers.cport};branch=z9hG4bK-m-{peers.n}\r\n"
                                            f"From: <sip:a@127.0.0.1>;tag=a\r\nTo: <sip:{MATCH}@127.0.0.1;user=phone>\r\n"
                                            f"Call-ID: m-{peers.n}@e2e\r\nCSeq: 1 INVITE\r\n"), ("127.0.0.1", port))
        got = len(peers.drain(peers.hop, 0.5))
        c.that(got == n, f"{n} calls forwarded ({got})")

    calls(30)
    status, headers, body = scrape(mport)
    c.that(status == 200 and headers.get("content-type", "").startswith("text/plain; version=0.0.4"),
           f"GET /metrics: {status}, Content-Type {headers.get('content-type')}")
    c.that(families_documented(body) == [], f"every metric has # HELP and # TYPE (missing: {sorted(set(families_documented(body)))[:5]})")
    first = samples(body)
    key = 'loadctl_rule_matched_total{source="edge",rule="r"}'
    c.that(first.get(key) == 30 and first.get("edge_forwarded_total") == 30, f"{key} = {first.get(key)} after 30 calls")
    path.write_text(document(1, "full", rate_rule(500, rule_id="r")))
    edge.send_signal(signal.SIGHUP)
    harness.wait_until(lambda: "generation 2" in edge.stderr_path.read_text(errors="replace"), 5.0)
    calls(20)
    second = samples(scrape(mport)[2])
    counters = [k for k in first if k.split("{")[0].endswith("_total")]
    went_back = [(k, first[k], second.get(k)) for k in counters if second.get(k, -1) < first[k]]
    c.that(second.get(key) == 50 and second.get('loadctl_rule_accepted_total{source="edge",rule="r"}') == 50,
           f"after the reload (rate 1000 → 500) and 20 more: {key} = {second.get(key)} (30 + 20)")
    c.that(went_back == [], f"no counter went back over the reload ({len(counters)} counters; went back: {went_back[:3]})")
    c.that(scrape(mport, "/other")[0] == 404 and scrape(mport, "/metrics", "POST")[0] == 405, "/other: 404, POST: 405")
    with socket.create_connection(("127.0.0.1", mport), timeout=3.0) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 5000)
        reply = s.recv(200).decode(errors="replace")
    c.that(reply.startswith("HTTP/1.1 431"), f"a request head over 4 KiB: {reply.splitlines()[:1]}")
    # Connections that never send: the endpoint holds 8, closes the rest, and SIP goes on.
    idle = [socket.create_connection(("127.0.0.1", mport), timeout=3.0) for _ in range(12)]
    t0 = time.monotonic()
    replies, forwarded = peers.invite(port, f"sip:{MATCH}@127.0.0.1;user=phone", f"<sip:{MATCH}@127.0.0.1;user=phone>")
    c.that(forwarded == 1, f"with 12 idle scrapers connected an INVITE is still forwarded ({time.monotonic() - t0:.2f} s with the drain)")
    closed = 0
    for s in idle:
        s.settimeout(0.5)
        try:
            closed += s.recv(1) == b""
        except (socket.timeout, ConnectionResetError):
            pass
    c.that(closed >= 4, f"beyond 8 connections the endpoint closes them at once ({closed} of 12 closed)")
    for s in idle:
        s.close()
    time.sleep(0.3)
    c.that(scrape(mport)[0] == 200, "once they are gone, scrapes are served again")
    stats = edge_stats(edge)
    c.that(stats.get("edge_forwarded_total") == 51, f"SIGUSR1 still prints the counters: edge_forwarded_total {stats.get('edge_forwarded_total')}")
    peers.close()
    return c


def uac_without_user_phone(run: Run) -> Path:
    """scenarios/uac_invite.xml with `;user=phone` taken out of every request line and To."""
    text = (harness.SCENARIOS / "uac_invite.xml").read_text()
    assert ";user=phone" in text, "uac_invite.xml carries ;user=phone"
    path = run.path("uac_invite_no_user_phone.xml")
    path.write_text(text.replace(";user=phone", ""))
    return path


def engine_counters(proc: harness.Proc) -> dict:
    """The engine's own counters (loadctl_*) from the edge's SIGUSR1 output."""
    before = proc.stdout_path.stat().st_size if proc.stdout_path.exists() else 0
    proc.send_signal(signal.SIGUSR1)
    harness.wait_until(lambda: "edge_dropped_total" in proc.stdout_path.read_bytes()[before:].decode(errors="replace"), 3.0)
    out = {}
    for line in proc.stdout_path.read_bytes()[before:].decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("loadctl_") and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def sip_user_numbers(run: Run) -> Checks:
    c = Checks("sip_user_numbers: many-tel +1555 rate R, calls to sip:+1555…@host without ;user=phone")
    r = 30.0
    seconds = 8
    policy = run.path("policy.xml")
    policy.write_text(document(0, "full", rate_rule(r)))
    scenario = uac_without_user_phone(run)
    # 3R matching calls/s and R/s that match nothing: rows cycle m, m, m, other.
    inf = harness.write_injection(run.path("callees.csv"), [MATCH, MATCH, MATCH, OTHER])
    offered = 4 * r
    calls = int(offered * seconds)
    for setting in ("global", "user-phone"):
        uas_ports, uac_ports = SippPorts.pick(), SippPorts.pick()
        uas = run.start(f"uas-{setting}", sipp_command("uas.xml", uas_ports, timeout_s=seconds + 60, max_concurrent=5000))
        wait_udp_port(uas_ports.sip, proc=uas)
        edge_port = free_udp_port(tcp=True)
        args = ["--policy", policy, "--transport", "udp"]
        if setting != "global":
            args += ["--sip-user-numbers", setting]  # the default stays implicit: it is what is tested
        edge = start_edge(run, f"edge-{setting}", edge_port, uas_ports.sip, *args)
        uac = run.start(
            f"uac-{setting}",
            sipp_command(scenario, uac_ports, remote=f"127.0.0.1:{edge_port}", inf=inf, rate=offered, calls=calls, timeout_s=seconds + 40),
        )
        code = uac.wait(timeout=seconds + 50)
        time.sleep(0.6)  # the last BYE's 200
        counters = engine_counters(edge)
        run.stop(uas)
        matching, other = split(SippOutputs(uas.cwd).arrivals())
        out = harness.invite_outcomes(SippOutputs(uac.cwd))
        sent_matching = out["invites"] - out["invites"] // 4
        c.that(code == 0 and out["invites"] == calls, f"{setting}: the UAC exited 0 ({code}) after {out['invites']} of {calls} INVITEs: {SippOutputs(uac.cwd).errors(300)!r}")
        invite_checks(c, setting, out, len(other), out["invites"] // 4, SippOutputs(uas.cwd))
        unread = counters.get("loadctl_unread_numbers_total", -1)
        if setting == "global":
            # +1555… is a global number: the rule limits it to R (GCRA: R·t + R·τ + 1).
            if matching:
                c.rate("global (default): matching calls admitted at R", matching, matching[0] + 1.0, matching[-1] - 0.5, r)
            else:
                c.that(False, "global: no matching call reached the UAS")
            span = matching[-1] - matching[0] if matching else 0.0
            c.that(len(matching) <= r * span + r * 0.1 + 1 + 1, f"global: {len(matching)} matching admitted in {span:.2f} s <= R·t + R·τ + 1 + 1 = {r * span + r * 0.1 + 2:.1f}")
            c.that(out["rejected_503"] == sent_matching - len(matching), f"global: the excess got 503: {out['rejected_503']} = {sent_matching} sent - {len(matching)} admitted")
            c.that(unread == 0, f"global: no number left unread (loadctl_unread_numbers_total {unread})")
        else:
            # Strict reading: no call is a number, none matches, all pass.
            c.that(len(matching) == sent_matching and out["rejected_503"] == 0, f"user-phone: every matching call passed: {len(matching)} of {sent_matching}, {out['rejected_503']} 503")
            # Each INVITE the edge classified (a retransmission may be classified again).
            most = out["invites"] + out["invite_retransmissions"]
            c.that(out["invites"] <= unread <= most, f"user-phone: each INVITE counted as an unread number: {unread} for {out['invites']} INVITEs (+{out['invite_retransmissions']} retransmissions; loadctl_unread_numbers_total)")
            unmatched = counters.get("loadctl_unmatched_total", -1)
            c.that(unmatched == unread, f"user-phone: every unmatched INVITE was an unread number: loadctl_unmatched_total {unmatched}")
        run.stop(edge)
    return c


def notifier_graceful_restart(run: Run) -> Checks:
    """SIGTERM: every subscription ends with probation;retry-after=2 and the notifier exits 0;
    the edge withdraws the rules (RFC 7200 §4.8) and SUBSCRIBEs again after retry-after. A
    notifier back within it protects at retry-after (+ slack) after the stop; one back later,
    within T2 = 4 s (+ slack) of its start (the SUBSCRIBE is being retransmitted). With
    --decommission the edge stops (noresource) and does not come back."""
    c = Checks("notifier_graceful_restart: SIGTERM ends subscriptions with a reason that brings subscribers back")
    old, new = run.path("old.xml"), run.path("new.xml")
    old.write_text(document(0, "full", OLD_POLICY))
    new.write_text(document(0, "full", NEW_POLICY))
    nport = free_udp_port(tcp=True)
    notifier = start_notifier(run, "notifier-1", nport, old)
    peers = UdpPeers()
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, peers.hop_port, "--subscribe", f"sip:loadctl@127.0.0.1:{nport}", "--uri", f"sip:edge@127.0.0.1:{port}")
    wait_event(edge, "policy applied (version)", 0)
    c.that(in_force(peers, port) == "old", "the first notifier's policy is in force")
    policies = [new, old, new]
    for k, (back_after, label) in enumerate([(1.0, "back within retry-after"), (5.0, "back 3 s after retry-after")]):
        stopped = time.time()
        notifier.send_signal(signal.SIGTERM)
        code = notifier.wait(timeout=5)
        c.that(code == 0, f"{label}: SIGTERM: exit {code} after the graceful stop")
        withdrawn = wait_after(edge, "policy withdrawn", stopped, 3.0)
        c.that(in_force(peers, port) == "none", f"{label}: the edge withdrew the notifier's rules (terminated)")
        log = notifier.stderr_path.read_text(errors="replace")
        c.that("Restart { retry_after_s: 2 }" in log, f"{label}: the notifier ended them for a restart")
        harness.wait_until(lambda: time.time() >= stopped + back_after, back_after + 1)
        policy = policies[k]
        started = time.time()
        notifier = start_notifier(run, f"notifier-{k + 2}", nport, policy)
        applied = wait_after(edge, "policy applied (version)", withdrawn, 40.0)
        if back_after < RETRY_AFTER_S:
            c.that(RETRY_AFTER_S <= applied - withdrawn <= RETRY_AFTER_S + SLACK_S,
                   f"{label}: protected again {applied - withdrawn:.3f} s after the withdrawal (retry-after {RETRY_AFTER_S:g} s … + {SLACK_S} s)")
        else:
            c.that(applied - started <= T2_S + SLACK_S,
                   f"{label}: protected again {applied - started:.3f} s after the notifier started (≤ T2 {T2_S:g} s + {SLACK_S} s)")
        want = "new" if policy == new else "old"
        c.that(in_force(peers, port) == want, f"{label}: the edge enforces the new process's policy ({want})")
    # A decommission: noresource, and the edge does not come back.
    notifier.stop()
    notifier = start_notifier(run, "notifier-decommission", nport, new, "--decommission")
    applied = wait_after(edge, "policy applied (version)", time.time() - 0.01, 40.0)
    stopped = time.time()
    notifier.send_signal(signal.SIGTERM)
    c.that(notifier.wait(timeout=5) == 0, "--decommission: exit 0")
    c.that(bool(harness.wait_until(lambda: events_after(edge, "subscription stopped", stopped), 3.0)),
           "--decommission: the edge stopped (noresource)")
    again = start_notifier(run, "notifier-after", nport, new)
    time.sleep(RETRY_AFTER_S + T2_S)
    c.that(events_after(edge, "policy applied (version)", stopped) == [] and in_force(peers, port) == "none",
           "--decommission: the edge does not subscribe again")
    again.stop()
    peers.close()
    return c


def notifier_hard_restart(run: Run) -> Checks:
    """SIGKILL, then a new process 1 s later with the same --state-file: it ends the dead one's
    dialogs with terminated;reason=deactivated and the edge subscribes to it at once: its policy
    is in force within one round trip (+ slack) of its start. Without --state-file the edge keeps
    the dead notifier's policy until its refresh (~an hour)."""
    c = Checks("notifier_hard_restart: a notifier killed and restarted reaches its subscribers at once with --state-file")
    old, new = run.path("old.xml"), run.path("new.xml")
    old.write_text(document(0, "full", OLD_POLICY))
    new.write_text(document(0, "full", NEW_POLICY))
    state = run.path("notifier.state")
    for with_state in (True, False):
        args = ["--state-file", state] if with_state else []
        label = "--state-file" if with_state else "without --state-file"
        nport = free_udp_port(tcp=True)
        notifier = start_notifier(run, f"notifier-{label}-1", nport, old, *args)
        peers = UdpPeers()
        port = free_udp_port(tcp=True)
        edge = start_edge(run, f"edge-{label}", port, peers.hop_port, "--subscribe", f"sip:loadctl@127.0.0.1:{nport}", "--uri", f"sip:edge@127.0.0.1:{port}")
        wait_event(edge, "policy applied (version)", 0)
        c.that(in_force(peers, port) == "old", f"{label}: the first notifier's policy is in force")
        time.sleep(0.3)
        notifier.send_signal(signal.SIGKILL)
        notifier.wait(timeout=5)
        killed = time.time()
        time.sleep(1.0)
        c.that(in_force(peers, port) == "old", f"{label}: the dead notifier's policy stays in force")
        started = time.time()
        again = start_notifier(run, f"notifier-{label}-2", nport, new, *args)
        if with_state:
            applied = wait_after(edge, "policy applied (version)", killed, 5.0)
            c.that(applied - started <= SLACK_S, f"{label}: the new policy applied {applied - started:.3f} s after the restart (≤ {SLACK_S} s)")
            c.that(in_force(peers, port) == "new", f"{label}: the edge enforces the new process's policy")
            log = again.stderr_path.read_text(errors="replace")
            c.that("1 deactivated" in log, f"{label}: the new process deactivated the dialog it found")
        else:
            time.sleep(3.0)
            c.that(events_after(edge, "policy applied (version)", killed) == [] and in_force(peers, port) == "old",
                   f"{label}: the edge still enforces the dead notifier's policy 3 s after the restart (until its refresh)")
        run.stop(again)
        run.stop(edge)
        peers.close()
    return c


TESTS = {
    "rule_actions": rule_actions,
    "notifier_lifecycle": notifier_lifecycle,
    "two_edges_allocator": two_edges_allocator,
    "remote_target": remote_target,
    "notifier_allow_list": notifier_allow_list,
    "non_invite_methods": non_invite_methods,
    "tcp_rate_limit": tcp_rate_limit,
    "tcp_connection_per_call": tcp_connection_per_call,
    "targets_and_exemptions": targets_and_exemptions,
    "redirect_agreement": redirect_agreement,
    "notifier_observe_reports": notifier_observe_reports,
    "request_validation": request_validation,
    "retry_after": retry_after,
    "no_policy_fallback": no_policy_fallback,
    "no_policy_reject": no_policy_reject,
    "unsubscribe_on_stop": unsubscribe_on_stop,
    "fallback_withdrawn": fallback_withdrawn,
    "cli_and_logs": cli_and_logs,
    "metrics_endpoint": metrics_endpoint,
    "sip_user_numbers": sip_user_numbers,
    "notifier_reload": notifier_reload,
    "notifier_graceful_restart": notifier_graceful_restart,
    "notifier_hard_restart": notifier_hard_restart,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep every run directory (logs, traces)")
    ap.add_argument("names", nargs="*", help=f"tests to run (default all): {', '.join(TESTS)}")
    args = ap.parse_args()
    for tool in (EDGE, LOADCTL):
        if not Path(tool).exists():
            print(f"missing {tool}: run `make e2e`, which builds it", file=sys.stderr)
            return 2
    return run_tests(TESTS, args.names, args.keep, "e2e")

if __name__ == "__main__":
    sys.exit(main())
