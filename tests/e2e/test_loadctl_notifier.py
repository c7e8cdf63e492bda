#!/usr/bin/env python3
"""End-to-end tests of `loadctl notifier` (the RFC 7200 notifier of cli/) serving C edges
(edge/) on loopback: one capacity shared between edges, by reported demand too, its allow-list
of subscribers, and its lifecycle (a reload, a graceful stop, a hard restart) as its subscribers
see it. The edge's own subscriber behaviour is tested in test_edge_subscriber.py.

    python3 tests/e2e/test_loadctl_notifier.py [--keep] [NAME ...]
    (make e2e builds what it needs first)

- two_edges_allocator: `loadctl notifier --capacity C` shares C between two edges; each gets its
  own SIPp UAC offering 1.5C; together the UAS receives C.
- notifier_allow_list: `loadctl notifier --allow … --allow-file …` and a SIPp subscriber
  (scenarios/subscriber.xml): from an unlisted domain 403 (RFC 7200 §4.6), from a listed one
  200 and a NOTIFY with the policy; no allow-list at all refuses to start.
- notifier_observe_reports: `loadctl notifier --capacity 60 --observe`: UDP demand reports of
  10/s and 100/s for two subscribed edges give 11.5/s (a donor's rate + 15 %) and the rest.
- notifier_reload: SIGHUP re-reads the policy file: a valid one reaches the edge within the
  pacing interval (RFC 7200 §4.10), an invalid one is refused with its line:column and the
  policy in force stays; with --watch an edit alone does the same.
- notifier_graceful_restart: SIGTERM ends every subscription with probation;retry-after=2: the
  edge withdraws the rules and subscribes again to the notifier that comes back; with
  --decommission (noresource) it does not come back.
- notifier_hard_restart: SIGKILL and a new process with the same --state-file: it deactivates
  the dead one's dialogs and the edge subscribes to it at once; without --state-file the edge
  keeps the dead notifier's policy until its refresh.

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
from edge_proc import EDGE, LOADCTL, edge_events, start_edge, wait_event  # noqa: E402
from policy_docs import MATCH, document, rate_rule, rule, split  # noqa: E402
from ports import free_udp_port, wait_udp_port  # noqa: E402
from processes import Proc, Run, wait_until  # noqa: E402
from sip_sockets import UdpPeers  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402


# ---------------------------------------------------------------------------------------------
# one capacity between edges, the allow-list, demand reports


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
    inf = write_injection(run.path("callees.csv"), [MATCH])
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
    c.steady_rate("both edges together, global rate C", matching, capacity, "no call reached the UAS")
    for k, u in enumerate(uacs):
        out = invite_outcomes(SippOutputs(u.cwd))
        c.that(out["failed_calls"] == 0, f"UAC {k}: no failed call ({out['answered_200']} admitted, {out['rejected_503']} rejected)")
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


def start_notifier(run: Run, name: str, nport: int, policy: Path, *args) -> Proc:
    proc = run.start(name, [LOADCTL, "notifier", "--listen", f"127.0.0.1:{nport}", "--policy", policy, "--allow", "127.0.0.1", *args])
    wait_udp_port(nport, proc=proc)
    return proc


def events_after(proc: Proc, what: str, after: float) -> list:
    return [t for t, w, _, _ in edge_events(proc) if w == what and t > after]


def wait_after(proc: Proc, what: str, after: float, timeout: float) -> float:
    if not wait_until(lambda: events_after(proc, what, after), timeout):
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
    wait_until(lambda: "reload refused" in notifier.stderr_path.read_text(errors="replace"), 3.0)
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
        wait_until(lambda: time.time() >= stopped + back_after, back_after + 1)
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
    c.that(bool(wait_until(lambda: events_after(edge, "subscription stopped", stopped), 3.0)),
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
    "two_edges_allocator": two_edges_allocator,
    "notifier_allow_list": notifier_allow_list,
    "notifier_observe_reports": notifier_observe_reports,
    "notifier_reload": notifier_reload,
    "notifier_graceful_restart": notifier_graceful_restart,
    "notifier_hard_restart": notifier_hard_restart,
}


def main() -> int:
    return suite_main(__doc__, TESTS, "e2e loadctl notifier", needs=(EDGE, LOADCTL))


if __name__ == "__main__":
    sys.exit(main())
