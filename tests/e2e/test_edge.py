#!/usr/bin/env python3
"""End-to-end tests of the C edge (examples/edge/) with real SIP peers on loopback.

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

Tolerances: rates within 3 % of the limit over each measured interval (the GCRA admits at most
r·τ + 1 = a few calls more at an interval's start); every non-matching call passes; every admitted
call completes (ACK and BYE pass).
"""

from __future__ import annotations

import argparse
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


EVENT = re.compile(r"^edge: subscriber at (\d+\.\d+): (.*?) (\d+) ?(.*)$")


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
    c.rate("terminated: rule lifted, all 3R pass", matching, t_term + 0.5, last - 0.5, 3 * r)
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
    failed = []
    started_all = time.monotonic()
    for name in names or tests:
        if name not in tests:
            print(f"unknown test {name}", file=sys.stderr)
            return 2
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
    n = len(names or tests)
    print(f"{label}: {n} tests, {len(failed)} failed {failed if failed else ''} ({time.monotonic() - started_all:.0f} s)")
    return 1 if failed else 0


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
