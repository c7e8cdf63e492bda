#!/usr/bin/env python3
"""End-to-end tests of the C edge (edge/) as a proxy, with real SIP peers on loopback: its rules'
actions and conditions, non-INVITE methods, SIP over TCP, request validation, Retry-After, its
command line, logs and metrics, each under a local policy (--policy). The edge as an RFC 7200
subscriber is tested in test_edge_subscriber.py, `loadctl notifier` serving edges in
test_loadctl_notifier.py.

    python3 tests/e2e/test_edge.py [--keep] [NAME ...]      (make e2e builds what it needs first)

- rule_actions: a local policy, and Python sockets as client and next hop: redirect → 302 with
  the rule's Contact, drop over UDP → 503, percent 50 → half forwarded, window 3 → three
  forwarded until a final response releases a slot.
- non_invite_methods: REGISTER, MESSAGE and OPTIONS from a SIPp UAC through the edge; a rule for
  MESSAGE limits only MESSAGE.
- tcp_rate_limit: SIPp UAC → edge → SIPp UAS over TCP (-t t1: one connection each way), a rate
  rule R with 3R offered: R at the UAS, 503 for the rest, every call completes.
- tcp_connection_per_call: the UAC opens a connection per call (-t tn); 503 and 302 (with its
  Contact checked by the scenario) over TCP; a second UAC killed mid-test disturbs nobody.
- targets_and_exemptions: Python sockets as client and next hop. A rule whose target-sip-entity
  is the next hop applies, one for another target does not (RFC 7200 §5.3.3); INVITEs to
  urn:service:sos(.police) and with Resource-Priority ets.0 / wps.2 pass a rule rejecting every
  INVITE (RFC 7200 §4.8, RFC 5031, RFC 4412), dsn does not; the Resource-Priority ones only from
  a peer in --priority-peers (RFC 4412 §11.3); --no-emergency-exempt and --priority-namespaces
  turn them off or change the list; an invalid namespace is refused.
- request_validation: RFC 3261 §16.3 (483 at Max-Forwards 0, 200 to OPTIONS at 0, 400, 416, 420,
  482 with the edge as its own next hop; no Via: dropped) and §16.6 step 3 (Max-Forwards
  decremented, 70 added when absent), one request per case from Python sockets.
- retry_after: 503s without Retry-After by default (RFC 3261 §21.5.4), with it for --retry-after.
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

import re
import signal
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from checks import Checks, suite_main  # noqa: E402
from edge_proc import EDGE, edge_stats, engine_counters, samples, scrape, start_edge  # noqa: E402
from policy_docs import MATCH, OTHER, document, rate_rule, rule, split  # noqa: E402
from ports import free_udp_port, wait_tcp_port, wait_udp_port  # noqa: E402
from processes import CpuMeter, Run, wait_until  # noqa: E402
from sip_sockets import UdpPeers  # noqa: E402
from sipp import SCENARIOS, SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402


# ---------------------------------------------------------------------------------------------
# rule actions and methods


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

    drain = UdpPeers.drain

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
    inf = write_injection(run.path("requests.csv"), [[MATCH, "MESSAGE"], [MATCH, "REGISTER"], [MATCH, "OPTIONS"]])
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


# ---------------------------------------------------------------------------------------------
# TCP


def uas_over_tcp(run: Run, timeout_s: float) -> tuple:
    """A SIPp UAS listening on TCP (-t t1: it takes whatever connections come)."""
    ports = SippPorts.pick(tcp=True)
    uas = run.start("uas", sipp_command("uas.xml", ports, timeout_s=timeout_s, transport="t1", max_concurrent=5000))
    wait_tcp_port(ports.sip, proc=uas)
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
    wait_tcp_port(edge_port, proc=edge)
    # 3R matching calls/s and R/s that match nothing: rows cycle m, m, m, other.
    inf = write_injection(run.path("callees.csv"), [MATCH, MATCH, MATCH, OTHER])
    offered = 4 * r
    calls = int(offered * seconds)
    uac_ports = SippPorts.pick(tcp=True)
    cpu = CpuMeter(edge).start()
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
    out = invite_outcomes(SippOutputs(uac.cwd))
    c.that(code == 0, f"the UAC exited 0 ({code}): {SippOutputs(uac.cwd).errors(300)!r}")
    c.steady_rate("matching calls admitted at R over TCP", matching, r, "no matching call reached the UAS")
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
    wait_tcp_port(edge_port, proc=edge)
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
    inf = write_injection(run.path("callees.csv"), [MATCH, MATCH, "+17770001234", OTHER])
    offered = 160.0
    calls = int(offered * seconds)
    # A second UAC on one connection, long calls to a number no rule matches, killed mid-test.
    victim_ports = SippPorts.pick(tcp=True)
    victim_inf = write_injection(run.path("victim.csv"), ["+19990001234"])
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
    out = invite_outcomes(SippOutputs(uac.cwd))
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
    # Each TCP worker opens its own connection to the next hop (the responses to its requests
    # come back on it), and the connections per call reach them all.
    per_worker = [n for k, n in after.items() if k.startswith("edge_tcp_worker_accepted_total{")]
    hops = after.get("edge_tcp_hop_connects_total", 0)
    c.that(per_worker and all(n > 0 for n in per_worker) and 1 <= hops <= len(per_worker),
           f"connections accepted by each of the {len(per_worker)} TCP workers: {per_worker}; one connection to the next hop per "
           f"worker at most: {hops}")
    c.that(
        after.get("edge_tcp_framing_errors_total", -1) == 0 and after.get("edge_tcp_overflows_total", -1) == 0,
        f"no framing error or overflow; responses for the killed UAC's connection dropped: {after.get('edge_tcp_responses_orphaned_total')} "
        f"(before the kill {before.get('edge_tcp_responses_orphaned_total')})",
    )
    return c


# ---------------------------------------------------------------------------------------------
# targets and exemptions, request validation, Retry-After, daemon behaviour


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
    # The client (127.0.0.1) is a peer whose Resource-Priority markings count (RFC 4412 §11.3).
    edge = start_edge(run, "edge", port, peers.hop_port, "--policy", path, "--priority-peers", "127.0.0.1")
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
    # Without --priority-peers no peer's Resource-Priority counts; emergency calls still do.
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge-untrusted", port, peers.hop_port, "--policy", path)
    for ruri, to, extra, label in exempt_calls:
        replies, forwarded = peers.invite(port, ruri, to, extra)
        if extra:
            c.that(len(replies) == 1 and replies[0].startswith("SIP/2.0 503") and forwarded == 0,
                   f"no --priority-peers: {label} from 127.0.0.1 gets 503 ({replies})")
        else:
            c.that(replies == [] and forwarded == 1, f"no --priority-peers: {label} is still exempt ({replies})")
    run.stop(edge)
    # Only the namespaces listed.
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge-q735", port, peers.hop_port, "--policy", path, "--priority-namespaces", "q735",
                      "--priority-peers", "127.0.0.0/8")
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


ISO_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z edge: ")

OPTIONS = ["--listen", "--next-hop", "--policy", "--source", "--subscribe", "--notifier", "--uri", "--expires", "--startup-hold-ms",
           "--fallback-policy", "--redirect-allow", "--no-emergency-exempt", "--priority-namespaces", "--retry-after", "--transport",
           "--max-connections", "--tcp-idle-s", "--linger-us", "--overload-control", "--oc-algorithms", "--oc-occupancy-target",
           "--oc-timeout-ms", "--log-oc", "--metrics", "--help", "--version", "--priority-peers", "--to-tag-is-dialog",
           "--sip-user-numbers", "--tls-listen", "--tls-next-hop", "--tls-next-hop-name", "--tls-cert", "--tls-key", "--tls-ca",
           "--tls-require-client-cert", "--notifier-name"]


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
    wait_tcp_port(mport, proc=edge)

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
    wait_until(lambda: "generation 2" in edge.stderr_path.read_text(errors="replace"), 5.0)
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


# ---------------------------------------------------------------------------------------------
# SIP URIs with numbers


def uac_without_user_phone(run: Run) -> Path:
    """scenarios/uac_invite.xml with `;user=phone` taken out of every request line and To."""
    text = (SCENARIOS / "uac_invite.xml").read_text()
    assert ";user=phone" in text, "uac_invite.xml carries ;user=phone"
    path = run.path("uac_invite_no_user_phone.xml")
    path.write_text(text.replace(";user=phone", ""))
    return path


def sip_user_numbers(run: Run) -> Checks:
    c = Checks("sip_user_numbers: many-tel +1555 rate R, calls to sip:+1555…@host without ;user=phone")
    r = 30.0
    seconds = 8
    policy = run.path("policy.xml")
    policy.write_text(document(0, "full", rate_rule(r)))
    scenario = uac_without_user_phone(run)
    # 3R matching calls/s and R/s that match nothing: rows cycle m, m, m, other.
    inf = write_injection(run.path("callees.csv"), [MATCH, MATCH, MATCH, OTHER])
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
        out = invite_outcomes(SippOutputs(uac.cwd))
        sent_matching = out["invites"] - out["invites"] // 4
        c.that(code == 0 and out["invites"] == calls, f"{setting}: the UAC exited 0 ({code}) after {out['invites']} of {calls} INVITEs: {SippOutputs(uac.cwd).errors(300)!r}")
        invite_checks(c, setting, out, len(other), out["invites"] // 4, SippOutputs(uas.cwd))
        unread = counters.get("loadctl_unread_numbers_total", -1)
        if setting == "global":
            # +1555… is a global number: the rule limits it to R (GCRA: R·t + R·τ + 1).
            c.steady_rate("global (default): matching calls admitted at R", matching, r, "global: no matching call reached the UAS")
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


TESTS = {
    "rule_actions": rule_actions,
    "non_invite_methods": non_invite_methods,
    "tcp_rate_limit": tcp_rate_limit,
    "tcp_connection_per_call": tcp_connection_per_call,
    "targets_and_exemptions": targets_and_exemptions,
    "request_validation": request_validation,
    "retry_after": retry_after,
    "cli_and_logs": cli_and_logs,
    "metrics_endpoint": metrics_endpoint,
    "sip_user_numbers": sip_user_numbers,
}


def main() -> int:
    return suite_main(__doc__, TESTS, "e2e", needs=(EDGE,))


if __name__ == "__main__":
    sys.exit(main())
