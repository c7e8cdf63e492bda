#!/usr/bin/env python3
"""End-to-end tests of the C edge (edge/) as an RFC 7200 subscriber, with real SIP peers on
loopback: the notifier's documents applied as they come (a SIPp notifier playing every kind of
document), in-dialog requests to the notifier's Contact, the notifier's redirects held to the
trust domain, the start while no notifier answers (startup hold, fallback policy) and the
unsubscribe on stop. The edge as a proxy under a local policy is tested in test_edge.py,
`loadctl notifier` serving edges in test_loadctl_notifier.py.

    python3 tests/e2e/test_edge_subscriber.py [--keep] [NAME ...]
    (make e2e builds what it needs first)

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
- redirect_agreement: `loadctl notifier` pushes redirects into its own domain and to
  bank.example: 302 and 503 (logged once) without an allow-list, 302 for both with
  --redirect-allow bank.example (RFC 7200 §7); the same file as --policy is trusted.
- no_policy_fallback / no_policy_reject: the notifier down at start; the --fallback-policy limits
  the held burst and what follows to r·(1 s + τ) + 1 in any second, or, without it, every
  unclassified new request gets 503 without Retry-After while in-dialog requests pass.
- fallback_withdrawn: the fallback gives way once the notifier's policy is applied.
- unsubscribe_on_stop: SIGTERM sends one SUBSCRIBE Expires: 0 and no new one, whether the
  notifier answers it 481 or 200.

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

from admission import count_in  # noqa: E402
from checks import Checks, suite_main  # noqa: E402
from edge_proc import EDGE, LOADCTL, edge_events, edge_stats, start_edge, wait_event, when  # noqa: E402
from notifier_scenarios import moved_notifier_scenarios, notifier_scenario  # noqa: E402
from policy_docs import MATCH, OTHER, document, rate_rule, rule, split  # noqa: E402
from ports import free_udp_port, wait_udp_port  # noqa: E402
from processes import Run  # noqa: E402
from sip_sockets import UdpPeers  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402


# ---------------------------------------------------------------------------------------------
# the notifier's documents, its Contact, its redirects


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
    inf = write_injection(run.path("callees.csv"), [MATCH, MATCH, MATCH, OTHER])
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
        count_in(matching, t1, t1 + 1.0) >= 0.9 * 2 * r,
        f"partial v1 (2R) took effect within 1 s: {count_in(matching, t1, t1 + 1.0)} admitted in the first second (≥ {0.9 * 2 * r:g})",
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
    out = invite_outcomes(SippOutputs(uac.cwd))
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


# ---------------------------------------------------------------------------------------------
# the start before a policy arrives, the stop


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


TESTS = {
    "notifier_lifecycle": notifier_lifecycle,
    "remote_target": remote_target,
    "redirect_agreement": redirect_agreement,
    "no_policy_fallback": no_policy_fallback,
    "no_policy_reject": no_policy_reject,
    "unsubscribe_on_stop": unsubscribe_on_stop,
    "fallback_withdrawn": fallback_withdrawn,
}


def main() -> int:
    return suite_main(__doc__, TESTS, "e2e edge subscriber", needs=(EDGE, LOADCTL))


if __name__ == "__main__":
    sys.exit(main())
