#!/usr/bin/env python3
"""End-to-end tests of the loadctl Kamailio module (kamailio/loadctl/) in the RFC 7200 event
package: as a subscriber (a SIPp notifier playing every kind of document, Python notifiers for
the dialog, the notifier's redirects held to the trust domain, the notifier's Contact) and as a
notifier sharing one capacity between C edges by their demand. The module as a limiter is tested
in test_kamailio_module.py, its RFC 7339 overload control in test_kamailio_oc.py.

    python3 tests/e2e/test_kamailio_rfc7200.py [--keep] [NAME ...]
    (make kamailio-module-test builds target/kamailio/loadctl.so first; kamailio/build.sh
    already gated it with `kamailio -c`)

Kamailio runs tests/e2e/kamailio/loadctl.cfg (Debian's /usr/sbin/kamailio 5.6.3, TLSF memory,
one UDP socket on loopback, jsonrpcs on a UDP datagram socket for the loadctl.* RPC commands).

- subscriber_lifecycle: the module subscribes to a SIPp notifier (scenarios/notifier.xml): full,
  partial, a bodyless refresh NOTIFY (RFC 7200 §4.8: 2R stays in force, counted at the UAS),
  invalid (logged at WARNING with the notifier and its version), gap and re-SUBSCRIBE,
  terminated.
- subscriber_over_tcp: a `sip:…;transport=tcp` SIPp notifier (scenarios/notifier_held.xml,
  `-t t1`): the SUBSCRIBE leaves from Kamailio's TCP socket with a Contact on TCP, the NOTIFY
  comes back on the connection and applies, its rate is enforced, and on SIGTERM the unsubscribe
  reaches the notifier over TCP; without a TCP listener Kamailio does not start.
- subscriber_dialog: two Python notifiers: SUBSCRIBE through tm, retry, refresh, unsubscribe.
- subscriber_resubscribe: noresource stops the subscriber (rules withdrawn), loadctl.resubscribe
  starts a new subscription, probation;retry-after=1 brings it back after that second.
- redirect_agreement: `loadctl notifier` sends redirects into its own domain and to
  bank.example: 302 and 503 (logged once) without redirect_allow, 302 for both with
  redirect_allow bank.example (RFC 7200 §7); the same document published over RPC is trusted.
- subscriber_remote_target: the notifier's Contact names a second SIPp; the re-SUBSCRIBE after
  a gap and the unsubscribe on shutdown reach it through tm (RFC 3261 §12.2.1.1), never the
  first.
- notifier_shares_by_demand: Kamailio as RFC 7200 notifier (notifier_capacity_file, R = 120)
  for three C edges fed by SIPp at 10, 60 and 130 calls/s, lc_observe() on their INVITEs:
  convergence time, each edge's admitted rate against max-min fairness (10, 55, 55), R ± 3 % at
  the UAS; one edge killed: its subscription ends and the others take its share; the blind
  equal split for comparison (90/s). Writes target/e2e/notifier-shares.svg and .csv.
- notifier_restart: the notifier is SIGKILLed and restarted on the same port: the edges keep
  their shares meanwhile, their next refresh gets 481 and they subscribe again.
"""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from admission import count_in  # noqa: E402
from checks import Checks, suite_main  # noqa: E402
from edge_proc import edge_events, start_edge, wait_event  # noqa: E402
from figures import svg_lines  # noqa: E402
from kamailio_proc import CFG, Kamailio, build, check_calls, held_notifier_end, offered_load, start_held_notifier, start_uas, suite_label  # noqa: E402
from notifier_scenarios import moved_notifier_scenarios, notifier_scenario  # noqa: E402
from policy_docs import MATCH, document, rate_rule, rule, split  # noqa: E402
from ports import free_udp_port, wait_udp_port  # noqa: E402
from processes import HarnessError, Run, wait_until  # noqa: E402
from sip_sockets import Notifier, Peer, first_lines  # noqa: E402
from sipp import SippOutputs, SippPorts, sipp_command, write_injection  # noqa: E402

ROOT = HERE.parents[1]


# ---------------------------------------------------------------------------------------------
# the module as an RFC 7200 subscriber

SUB_EVENT = re.compile(r"subscription to (\S+) at (\d+\.\d+): (.*?) (\d+) ?(.*)$")


def sub_events(kam: Kamailio) -> list:
    """(wall time, what, number, detail) of every subscriber event the module logged."""
    out = []
    for line in kam.log().splitlines():
        m = SUB_EVENT.search(line)
        if m:
            out.append((float(m.group(2)), m.group(3), int(m.group(4)), m.group(5)))
    return out


def sub_when(events, what: str, number=None) -> float:
    for t, w, n, _ in events:
        if w == what and (number is None or n == number):
            return t
    raise AssertionError(f"the module never logged {what!r} {number if number is not None else ''}: {events}")


def sub_wait(kam: Kamailio, what: str, number=None, timeout: float = 10.0) -> float:
    if not wait_until(lambda: any(w == what and (number is None or n == number) for _, w, n, _ in sub_events(kam)), timeout):
        raise AssertionError(f"the module did not log {what!r} {number} within {timeout} s:\n{kam.proc.tail(30)}")
    return sub_when(sub_events(kam), what, number)


def subscriber_lifecycle(run: Run) -> Checks:
    c = Checks("subscriber_lifecycle: children=4, SIPp notifier: full / partial / invalid / gap / terminated")
    r = 50.0
    holds = {"A": 6000, "B": 3500, "B2": 3500, "C": 3500, "D": 5000, "E": 3000}
    scenario = notifier_scenario(run, r, holds)
    total_s = sum(holds.values()) / 1000 + 3
    uas, uas_ports = start_uas(run, total_s)
    notifier_ports = SippPorts.pick()
    notifier = run.start("notifier", sipp_command(scenario, notifier_ports, calls=1, timeout_s=total_s + 20, logs=False,
                                                  extra=["-trace_msg", "-message_file", "messages.log"]))
    wait_udp_port(notifier_ports.sip, proc=notifier)
    notifier_uri = f"sip:sbc@127.0.0.1:{notifier_ports.sip}"
    kam = Kamailio(run, "kamailio", None, 4, uas_ports.sip, subscribe=[notifier_uri])
    sub_wait(kam, "policy applied (version)", 0)
    uac = offered_load(run, kam, uas_ports, r, total_s + 2)
    subs = kam.rpc("loadctl.subscriptions")["result"]
    row = (subs.get("subscriptions") or [{}])[0]
    c.that(row.get("notifier") == notifier_uri and row.get("state") == "active" and row.get("version") == 0 and row.get("published") == 1,
           f"loadctl.subscriptions: {row.get('notifier')} {row.get('state')}, version {row.get('version')}, published {row.get('published')}")
    rules = kam.rpc("loadctl.rules")["result"]
    c.that([(x["source"], x["rule"]) for x in rules["rules"]] == [(notifier_uri, "prefix-1555")],
           f"the notifier's rule is in the shared store: {rules['rules']}")
    code = notifier.wait(timeout=total_s + 30)
    c.that(code == 0, f"the SIPp notifier completed its scenario: SUBSCRIBE, 7 NOTIFYs each answered 200, the re-SUBSCRIBE after the gap (exit {code}): "
           f"{SippOutputs(notifier.cwd).errors(300)!r}")
    uac.wait(timeout=60)
    subs_end = kam.rpc("loadctl.subscriptions")["result"]["subscriptions"][0]
    stats = kam.rpc("loadctl.stats")["result"]
    run.stop(uas)
    events = sub_events(kam)
    arrivals = SippOutputs(uas.cwd).arrivals()
    matching, other = split(arrivals)
    t0 = sub_when(events, "policy applied (version)", 0)
    t1 = sub_when(events, "policy applied (version)", 1)
    t_none = sub_when(events, "NOTIFY without body, policy kept")
    t_bad = sub_when(events, "invalid document, policy kept")
    t_gap = sub_when(events, "document ignored (version)", 5)
    t6 = sub_when(events, "policy applied (version)", 6)
    t_term = sub_when(events, "policy withdrawn")
    last = matching[-1] if matching else t_term
    first_call = matching[0] if matching else t0
    c.rate("full v0, rate R (children=4, one limit)", matching, max(t0, first_call) + 1.0, t1, r)
    n1 = count_in(matching, t1, t1 + 1.0)
    c.that(n1 >= 0.9 * 2 * r, f"partial v1 (2R) took effect within 1 s in every child: {n1} admitted in the first second (≥ {0.9 * 2 * r:g})")
    c.rate("partial v1, rate 2R", matching, t1 + 1.0, t_none, 2 * r)
    # RFC 7200 §4.8: a NOTIFY without a body means nothing to update; withdrawing would let 3R in.
    c.rate("bodyless refresh NOTIFY: 2R stays in force", matching, t_none + 0.1, t_bad, 2 * r)
    bad = [(n, d) for _, w, n, d in events if w == "invalid document, policy kept"]
    c.that(bool(bad) and bad[0][0] == 2 and bad[0][1].startswith(f"from {notifier_uri}: ")
           and re.search(r"WARNING: .*subscription to \S+ at [\d.]+: invalid document, policy kept 2 from ", kam.log()) is not None,
           f"the refused document is logged (WARNING) with its version (2) and the notifier: {bad[:1]}")
    c.rate("invalid v2 ignored, 2R kept", matching, t_bad + 0.1, t_gap, 2 * r)
    c.that(t_gap < t6, "the gap (v5) was ignored and the full state (v6) applied after the re-SUBSCRIBE")
    c.rate("full v6 after the gap, rate R", matching, t6 + 1.0, t_term, r)
    c.all_pass("terminated: rule lifted, every matching call passes", matching, other, t_term + 1.0, last - 0.5)
    trace = (notifier.cwd / "messages.log").read_text(errors="replace") if (notifier.cwd / "messages.log").exists() else ""
    received = re.findall(r"message received.*?\n\s*\n?(\S+ \S+)", trace)
    subscribes = [m for m in received if m.startswith("SUBSCRIBE ")]
    oks = [m for m in received if m.startswith("SIP/2.0 200")]
    c.that(len(subscribes) == 2, f"the SIPp notifier's trace shows 2 SUBSCRIBEs from Kamailio (initial, re-SUBSCRIBE after the gap): {len(subscribes)}")
    c.that(len(oks) == 7, f"the trace shows the 7 NOTIFYs answered 200 by the module: {len(oks)} 200s received")
    c.that(subs_end.get("state") == "stopped" and subs_end.get("published") == 0 and subs_end.get("applied") == 3
           and subs_end.get("invalid") == 1 and subs_end.get("ignored") == 1 and subs_end.get("notifies") == 7
           and subs_end.get("bodyless") == 1 and subs_end.get("warned") == 0,
           f"loadctl.subscriptions at the end: {subs_end}")
    c.that(stats["rules"] == [], f"no rule left in the store after terminated: {stats['rules']}")
    check_calls(c, uac, uas, other)
    c.lines.append(("info  phases in the module's log, from v0: v1 {:+.2f} s, invalid {:+.2f} s, gap {:+.2f} s, v6 {:+.2f} s, "
                    "terminated {:+.2f} s").format(t1 - t0, t_bad - t0, t_gap - t0, t6 - t0, t_term - t0))
    return c


def subscriber_over_tcp(run: Run) -> Checks:
    c = Checks("subscriber_over_tcp: a sip:…;transport=tcp SIPp notifier: SUBSCRIBE, NOTIFY and the unsubscribe over TCP")
    r, seconds = 30.0, 6.0
    notifier_ports = SippPorts.pick(tcp=True)
    notifier_uri = f"sip:sbc@127.0.0.1:{notifier_ports.sip};transport=tcp"
    notifier, logs = start_held_notifier(run, notifier_ports, r, notifier_uri)
    uas, uas_ports = start_uas(run, seconds + 30)
    tcp_port = free_udp_port(tcp=True)
    kam = Kamailio(run, "kamailio", None, 2, uas_ports.sip, subscribe=[notifier_uri], tcp_port=tcp_port)
    sub_wait(kam, "policy applied (version)", 0)
    dialog = next((ln for ln in logs.read_text(errors="replace").splitlines() if ln.startswith("dialog|")), "")
    _, _, _, _, target, via = (x.strip() for x in (dialog.split("|") + [""] * 6)[:6])
    # RFC 3261 §18.1.1: the request leaves over the transport its URI names (SIPp -t t1 takes
    # nothing else); §8.1.1.8: the Contact is where the notifier reaches the subscriber, so on
    # TCP too: a Contact without a transport parameter would be UDP (RFC 3263 §4.1).
    c.that(via.startswith(f"SIP/2.0/TCP 127.0.0.1:{tcp_port}") and target == f"sip:loadctl@127.0.0.1:{tcp_port};transport=tcp",
           f"the SUBSCRIBE left from Kamailio's TCP socket with a TCP Contact: Via {via!r}, Contact {target!r}")
    sub = {s["notifier"]: s for s in kam.rpc("loadctl.subscriptions")["result"]["subscriptions"]}.get(notifier_uri, {})
    c.that(sub.get("state") == "active" and sub.get("version") == 0 and sub.get("notifies") == 1,
           f"loadctl.subscriptions: {sub.get('state')}, version {sub.get('version')}, {sub.get('notifies')} NOTIFY (over the TCP connection)")
    uac = offered_load(run, kam, uas_ports, r, seconds)
    uac.wait(timeout=seconds + 60)
    held_notifier_end(c, run, kam, uac, uas, logs, notifier_uri, r, "TCP")
    # Without a TCP listener the subscription could neither be sent nor name a Contact on TCP:
    # Kamailio does not start, and says what to configure.
    proc = run.start("kamailio-no-tcp", [
        build().binary, "-f", CFG, "-DD", "-E", "-n", 1, "-l", f"udp:127.0.0.1:{free_udp_port()}", "-Y", run.path("rundir-no-tcp", "x").parent,
        *build().defines(), "-A", f'SUBSCRIBE="{notifier_uri}"', "-A", f'RPC_SOCKET="udp:127.0.0.1:{free_udp_port()}"',
        "-A", 'NEXT_HOP="sip:127.0.0.1:9"',
    ])
    try:
        code = proc.wait(timeout=10)
    except HarnessError:
        code = None
        run.stop(proc)
    said = next((ln.strip() for ln in proc.stderr_path.read_text(errors="replace").splitlines() if "needs a TCP listening socket" in ln), "")
    c.that(code not in (None, 0) and "disable_tcp=no" in said,
           f"without a TCP listener Kamailio does not start (status {code}) and says why: {said[-160:]!r}")
    return c


def subscriber_remote_target(run: Run) -> Checks:
    c = Checks("subscriber_remote_target: the module's in-dialog SUBSCRIBEs go through tm to the notifier's Contact "
               "(RFC 3261 §12.2.1.1)")
    first_ports, target_ports = SippPorts.pick(), SippPorts.pick()
    moved, target = moved_notifier_scenarios(run, 50.0, target_ports.sip, {"A": 1500, "B": 6000}, unsubscribe=True)
    second = run.start("target", sipp_command(target, target_ports, calls=1, timeout_s=40))
    wait_udp_port(target_ports.sip, proc=second)
    first = run.start("notifier", sipp_command(moved, first_ports, calls=1, timeout_s=40, logs=False))
    wait_udp_port(first_ports.sip, proc=first)
    hop = Peer()
    try:
        kam = Kamailio(run, "kamailio", None, 2, hop.port, subscribe=[f"sip:sbc@127.0.0.1:{first_ports.sip}"])
        sub_wait(kam, "policy applied (version)", 0)
        # The gap (v5): the re-SUBSCRIBE goes to the Contact, the second SIPp, whose v6 applies.
        sub_wait(kam, "policy applied (version)", 6, timeout=15)
        code_first = first.wait(timeout=30)
        c.that(code_first == 0, f"the SIPp the SUBSCRIBE was first sent to saw no second SUBSCRIBE (exit {code_first}): "
               f"{SippOutputs(first.cwd).errors(300)!r}")
        kam.proc.send_signal(signal.SIGTERM)
        code = second.wait(timeout=30)
        c.that(code == 0, f"the SIPp at the Contact got the in-dialog re-SUBSCRIBE and, on shutdown, the unsubscribe (exit {code}): "
               f"{SippOutputs(second.cwd).errors(300)!r}")
        log = (second.cwd / "logs.log").read_text(errors="replace") if (second.cwd / "logs.log").exists() else ""
        c.that("unsubscribed SUBSCRIBE sip:notifier@" in log, f"the unsubscribe's Request-URI is the Contact: {log.strip()[-200:]!r}")
    finally:
        hop.close()
    return c


def subscriber_resubscribe(run: Run) -> Checks:
    """RFC 6665 §4.1.3: after `terminated;reason=noresource` the subscriber "SHOULD NOT attempt to
    re-subscribe" (it stops, the rules withdrawn, RFC 7200 §4.8); `probation;retry-after=1`
    brings it back after at least that second; loadctl.resubscribe starts a new one at once."""
    c = Checks("subscriber_resubscribe: noresource stops the subscriber, probation brings it back, loadctl.resubscribe restarts it")
    n, hop = Notifier(), Peer()
    try:
        kam = Kamailio(run, "kamailio", None, 2, hop.port, subscribe=[n.uri], defines=["SUB_EXPIRES=60"])
        addr_k = ("127.0.0.1", kam.port)

        def subscribed(policy_rate: int) -> str:
            sub, _ = n.wait_request("SUBSCRIBE", 5.0)
            if sub:
                n.answer(sub, addr_k, extra="Expires: 60\r\n")
                n.wait_response(n.notify(sub, addr_k, document(0, "full", rate_rule(policy_rate, "n-rule", "+1555"))))
            return sub

        sub = subscribed(0)
        c.that(bool(sub), "the first SUBSCRIBE came and was granted")
        n.wait_response(n.notify(sub, addr_k, "", state="terminated;reason=noresource"))
        time.sleep(0.3)
        st = kam.rpc("loadctl.subscriptions")["result"]["subscriptions"][0]["state"]
        again, _ = n.wait_request("SUBSCRIBE", 3.0)
        rules = kam.rpc("loadctl.rules")["result"]["rules"]
        c.that(not again and st == "stopped" and rules == [],
               f"noresource: no new SUBSCRIBE in 3 s, state {st!r}, rules withdrawn ({rules})")
        t_rpc = time.monotonic()
        res = kam.rpc("loadctl.resubscribe")
        sub = subscribed(0)
        c.that("result" in res and bool(sub) and time.monotonic() - t_rpc < 1.0,
               f"loadctl.resubscribe: {res.get('result') or res.get('error')}; a new SUBSCRIBE within "
               f"{time.monotonic() - t_rpc:.2f} s")
        t_term = time.monotonic()
        n.wait_response(n.notify(sub, addr_k, "", state="terminated;reason=probation;retry-after=1"))
        back = subscribed(0)
        waited = time.monotonic() - t_term
        c.that(bool(back) and 1.0 <= waited <= 3.0,
               f"probation;retry-after=1: a new SUBSCRIBE {waited:.2f} s later (at least 1 s: \"SHOULD wait at least the number of seconds\")")
        bad = kam.rpc("loadctl.resubscribe", "sip:nobody@127.0.0.1:9")
        c.that("error" in bad, f"an unknown notifier is refused: {bad.get('error')}")
    finally:
        n.close()
        hop.close()
    return c


def subscriber_dialog(run: Run) -> Checks:
    c = Checks("subscriber_dialog: two notifiers (Python sockets), children=2: SUBSCRIBE through tm, NOTIFY answers, "
               "retry, refresh, unsubscribe on shutdown")
    a, b = Notifier(), Notifier()
    hop = Peer()
    try:
        kam = Kamailio(run, "kamailio", None, 2, hop.port, subscribe=[a.uri, b.uri], defines=["SUB_EXPIRES=60"])
        addr_k = ("127.0.0.1", kam.port)
        sub_a, from_a = a.wait_request("SUBSCRIBE", 5.0)
        sub_b, _ = b.wait_request("SUBSCRIBE", 5.0)
        c.that(bool(sub_a) and bool(sub_b), "each notifier got a SUBSCRIBE")
        c.that(from_a == addr_k and a.header(sub_a, "Event") == "load-control" and a.header(sub_a, "Expires") == "60"
               and a.header(sub_a, "Accept") == "application/load-control+xml" and "branch=z9hG4bK" in a.header(sub_a, "Via")
               and a.header(sub_a, "Max-Forwards") == "70",
               f"SUBSCRIBE sent through tm from Kamailio's SIP socket with Event, Accept, Expires 60: {sub_a.splitlines()[:1]} from {from_a}")
        # b refuses with 503: the state machine backs off (1 s) and starts a new subscription
        t_refused = time.monotonic()
        b.answer(sub_b, addr_k, "503 Service Unavailable")
        sub_b2, _ = b.wait_request("SUBSCRIBE", 4.0)
        waited = time.monotonic() - t_refused
        c.that(bool(sub_b2) and b.header(sub_b2, "Call-ID") != b.header(sub_b, "Call-ID") and 0.8 <= waited <= 2.5,
               f"503 → a new SUBSCRIBE after the 1 s back-off ({waited:.2f} s, Call-ID {b.header(sub_b2, 'Call-ID')})")
        # a grants 4 s: the refresh comes in the dialog at half of it
        a.answer(sub_a, addr_k, extra="Expires: 4\r\n")
        t_granted = time.monotonic()
        b.answer(sub_b2, addr_k, extra="Expires: 60\r\n")
        branch = a.notify(sub_a, addr_k, document(0, "full", rate_rule(0, "a-rule", "+1555")))
        reply = a.wait_response(branch)
        c.that(reply.startswith("SIP/2.0 200") and a.header(reply, "Call-ID") == a.header(sub_a, "Call-ID"),
               f"the NOTIFY was answered by the module: {reply.splitlines()[:1]}")
        branch = b.notify(sub_b2, addr_k, document(0, "full", rate_rule(0, "b-rule", "+1666")))
        c.that(b.wait_response(branch).startswith("SIP/2.0 200"), "the second notifier's NOTIFY answered 200 too")
        branch = a.notify(sub_a, addr_k, document(1, "partial", rate_rule(0, "a-rule", "+1555")), call_id="not-a-subscription@x")
        reply = a.wait_response(branch)
        c.that(reply.startswith("SIP/2.0 481"), f"a NOTIFY outside any subscription: {reply.splitlines()[:1]}")
        time.sleep(0.3)
        rules = [(x["source"], x["rule"]) for x in kam.rpc("loadctl.rules")["result"]["rules"]]
        c.that(sorted(rules) == sorted([(a.uri, "a-rule"), (b.uri, "b-rule")]), f"two notifiers, two sources in the store: {rules}")
        subs = kam.rpc("loadctl.subscriptions")["result"]
        states = [(x["notifier"], x["state"], x["version"], x["retries"]) for x in subs["subscriptions"]]
        c.that(states == [(a.uri, "active", 0, 0), (b.uri, "active", 0, 1)], f"loadctl.subscriptions: {states}, subscriber pid {subs['subscriber_pid']}")
        contact = f"sip:loadctl@127.0.0.1:{kam.port}"
        c.that(subs["contact"] == contact and a.header(sub_a, "Contact") == f"<{contact}>" and subs["channel_full"] == 0,
               f"default Contact from the first listen socket: {subs['contact']} (SUBSCRIBE: {a.header(sub_a, 'Contact')}); "
               f"{subs['handed']} messages handed to the subscriber process, {subs['channel_full']} refused")
        # a rate-0 rule from a: a call to +1555 is refused by whichever child takes it
        client = Peer()
        try:
            client.sock.sendto(client.invite(kam.port, "+15550000000", 1), addr_k)
            got = [m.splitlines()[0] for m in client.drain(0.5)]
            c.that(got == ["SIP/2.0 503 Service Unavailable"], f"the notified rule is enforced by the workers: {got}")
        finally:
            client.close()
        refresh, _ = a.wait_request("SUBSCRIBE", 4.0)
        after = time.monotonic() - t_granted
        c.that(bool(refresh) and ";tag=ntf" in a.header(refresh, "To") and a.header(refresh, "Call-ID") == a.header(sub_a, "Call-ID")
               and a.header(refresh, "CSeq").startswith("2 ") and 1.5 <= after <= 3.5,
               f"granted 4 s: refreshed in the dialog after {after:.2f} s (To {a.header(refresh, 'To')}, CSeq {a.header(refresh, 'CSeq')})")
        a.answer(refresh, addr_k, extra="Expires: 60\r\n")
        time.sleep(0.3)
        t_term = time.monotonic()
        kam.proc.send_signal(signal.SIGTERM)
        unsub, _ = a.wait_request("SUBSCRIBE", 3.0)
        c.that(bool(unsub) and a.header(unsub, "Expires") == "0" and a.header(unsub, "Call-ID") == a.header(sub_a, "Call-ID")
               and a.header(unsub, "CSeq").startswith("3 "),
               f"on shutdown: SUBSCRIBE Expires 0 in the dialog after {time.monotonic() - t_term:.2f} s (Expires {a.header(unsub, 'Expires')!r}, CSeq {a.header(unsub, 'CSeq')})")
        unsub_b, _ = b.wait_request("SUBSCRIBE", 1.0)
        c.that(bool(unsub_b) and b.header(unsub_b, "Expires") == "0", "and to the second notifier")
        try:
            code = kam.proc.wait(timeout=10)
        except HarnessError:
            code = None
        c.that(code == 0, f"Kamailio exited cleanly ({code})")
    finally:
        a.close()
        b.close()
        hop.close()
    return c


def redirect_agreement(run: Run) -> Checks:
    """RFC 7200 §7: "this specification requires that a Trust Domain agrees on ... the
    destinations to which calls may be redirected". `loadctl notifier` (host 127.0.0.1) sends a
    redirect into its own domain and one to bank.example: the module redirects the first and
    answers 503 to the second (logged once), until redirect_allow lists bank.example. The same
    document published over RPC (the operator's) is trusted."""
    c = Checks("redirect_agreement: a notifier's redirect outside its own domain is refused")
    rules = "\n".join([
        rule("own-domain", "+1777", "<lc:rate>0</lc:rate>", 'alt-action="redirect" alt-target="sip:ivr@127.0.0.1"'),
        rule("victim", "+1888", "<lc:rate>0</lc:rate>", 'alt-action="redirect" alt-target="sip:victim@bank.example"'),
    ])
    policy = run.path("policy.xml")
    policy.write_text(document(0, "full", rules))
    nport = free_udp_port()
    notifier = run.start("notifier", [ROOT / "target" / "release" / "loadctl", "notifier", "--listen", f"127.0.0.1:{nport}",
                                      "--policy", policy, "--duration", 60, "--allow", "127.0.0.1"])
    wait_udp_port(nport, proc=notifier)
    notifier_uri = f"sip:loadctl@127.0.0.1:{nport}"
    hop, client = Peer(), Peer()
    try:
        for label, defines, victim in [("no redirect_allow", [], "SIP/2.0 503 Service Unavailable"),
                                       ("redirect_allow bank.example", ['REDIRECT_ALLOW="bank.example"'], "SIP/2.0 302 Moved Temporarily")]:
            kam = Kamailio(run, f"kamailio-{len(defines)}", None, 2, hop.port, subscribe=[notifier_uri], defines=defines)
            sub_wait(kam, "policy applied (version)", 0)
            # the store reaches every child at its next request
            client.sock.sendto(client.invite(kam.port, "+17770000000", 1), ("127.0.0.1", kam.port))
            replies = first_lines(m for m in client.drain() if not m.startswith("SIP/2.0 100"))
            c.that(replies == ["SIP/2.0 302 Moved Temporarily"], f"{label}: redirect into the notifier's own domain: {replies}")
            outcomes = set()
            for n in range(4):  # both children
                client.sock.sendto(client.invite(kam.port, "+18880000000", n), ("127.0.0.1", kam.port))
                outcomes.update(first_lines(m for m in client.drain() if not m.startswith("SIP/2.0 100")))
            c.that(outcomes == {victim}, f"{label}: redirect to bank.example: {sorted(outcomes)}")
            logged = [e for e in sub_events(kam) if e[1] == "redirect outside the allow-list"]
            if defines:
                c.that(logged == [], f"{label}: nothing logged: {logged}")
            else:
                c.that(len(logged) == 1 and logged[0][3] == "victim", f"{label}: the refused rule logged once, by id: {logged}")
            run.stop(kam.proc)
        kam = Kamailio(run, "kamailio-rpc", None, 1, hop.port)
        c.that("result" in kam.rpc("loadctl.publish", document(0, "full", rules)), "the same document published over RPC")
        client.sock.sendto(client.invite(kam.port, "+18880000000", 9), ("127.0.0.1", kam.port))
        replies = first_lines(m for m in client.drain() if not m.startswith("SIP/2.0 100"))
        c.that(replies == ["SIP/2.0 302 Moved Temporarily"], f"the operator's document (RPC) is trusted: {replies}")
    finally:
        hop.close()
        client.close()
    return c


# ---------------------------------------------------------------------------------------------
# the module as RFC 7200 notifier: one capacity over three edges


def notifier_edges(run: Run, name: str, capacity: float, demands, seconds: float, observe: bool, kill_at=None):
    """Kamailio (children=2) as notifier sharing `capacity` INVITEs/s to +1555 among three C
    edges, each fed by its own SIPp UAC at `demands[k]` calls/s, forwarding to one SIPp UAS.
    With `observe`, Kamailio counts each +1555 INVITE for the edge it came from (lc_observe());
    without, the notifier splits blindly. `kill_at` (s after the traffic starts): the third edge
    and its UAC are killed then. Returns (UAS arrival times, per-second samples of
    loadctl.notifier: (t, {subscriber: (observed, share, target, active)}), traffic start, kam)."""
    uas_ports = SippPorts.pick()
    uas = run.start(f"{name}-uas", sipp_command("uas.xml", uas_ports, timeout_s=int(seconds) + 60))
    wait_udp_port(uas_ports.sip, proc=uas)
    template = run.path(f"{name}-capacity.xml")
    template.write_text(document(0, "full", rate_rule(capacity)))
    port = free_udp_port()
    uri = f"sip:lc@127.0.0.1:{port}"
    # Subscriptions of 10 s (refreshed every 5 s): a share the killed edge held is counted
    # until its subscription would have expired (it may be alive behind a partition).
    defines = [f'NOTIFIER_URI="{uri}"', 'NOTIFIER_ALLOW="127.0.0.1"', f'NOTIFIER_CAPACITY="{template}"', "FR_TIMER=2000",
               "NOTIFIER_EXPIRES=10", "NOTIFIER_MIN_EXPIRES=10"]
    if observe:
        defines.append('OBSERVE_RE="^\\+1555"')
    kam = Kamailio(run, f"{name}-kam", None, 2, uas_ports.sip, defines=defines, port=port)
    edges = []
    for k in range(len(demands)):
        eport = free_udp_port(tcp=True)
        edges.append((eport, start_edge(run, f"{name}-edge{k}", eport, kam.port, "--subscribe", uri, "--uri", f"sip:edge{k}@127.0.0.1:{eport}")))
    for _, e in edges:
        wait_event(e, "policy applied (version)", 0)
    inf = write_injection(run.path(f"{name}-callees.csv"), [MATCH])
    uacs = []
    for k, ((eport, _), d) in enumerate(zip(edges, demands)):
        ports = SippPorts.pick()
        uacs.append(run.start(f"{name}-uac{k}", sipp_command("uac_invite.xml", ports, remote=f"127.0.0.1:{eport}", inf=inf, rate=d,
                                                              calls=int(d * seconds), timeout_s=int(seconds) + 60)))
    start = time.time()
    samples = []
    killed = False
    while time.time() - start < seconds + 1.0:
        time.sleep(1.0 - ((time.time() - start) % 1.0))
        r = kam.rpc("loadctl.notifier").get("result", {})
        samples.append((time.time(), {s["subscriber"]: (s["observed"], s["share"], s["target"], s["active"]) for s in r.get("subscribers", [])}))
        if kill_at is not None and not killed and time.time() - start >= kill_at:
            run.stop(uacs[-1], sig=signal.SIGKILL)
            run.stop(edges[-1][1], sig=signal.SIGKILL)
            killed = True
    for u in uacs[: len(uacs) - (1 if killed else 0)]:
        u.wait(timeout=60)
    run.stop(uas)
    matching, _ = split(SippOutputs(uas.cwd).arrivals())
    return matching, samples, start, kam


def edge_counts(samples, k: int):
    """(t, calls admitted, seconds) of edge k between consecutive samples, from the notifier's
    count."""
    key = None
    out = []
    prev = None
    for t, subs in samples:
        key = key or next((s for s in subs if s.startswith(f"sip:edge{k}@")), None)
        if key is None or key not in subs:
            continue
        if prev is not None:
            out.append((t, subs[key][0] - prev[1], t - prev[0]))
        prev = (t, subs[key][0])
    return out


def edge_rates(samples, k: int):
    """(t, admitted calls/s) of edge k between consecutive samples, from the notifier's count."""
    return [(t, n / dt) for t, n, dt in edge_counts(samples, k)]


def shares_of(samples, k: int):
    for t, subs in samples:
        for s, v in subs.items():
            if s.startswith(f"sip:edge{k}@"):
                yield t, v


def write_shares_plot(run: Run, samples, start: float, kill: float) -> None:
    """target/e2e/notifier-shares.svg and .csv: each edge's admitted rate and share over time."""
    out = ROOT / "target" / "e2e"
    out.mkdir(parents=True, exist_ok=True)
    series = {}
    rows = ["t_s,edge,admitted_per_s,share_per_s"]
    for k in range(3):
        shares = dict((round(t - start, 3), v[1]) for t, v in shares_of(samples, k) if v[1] >= 0)
        pts = [(t - start, r) for t, r in edge_rates(samples, k)]
        series[f"edge {k} admitted"] = pts
        series[f"edge {k} share"] = sorted(shares.items())
        rows += [f"{t:.3f},{k},{r:.2f},{shares.get(round(t, 3), -1):g}" for t, r in pts]
    svg_lines(out / "notifier-shares.svg", "Kamailio notifier, R = 120/s, demands 10 / 60 / 130 per s",
                      series, "seconds of traffic", "calls/s", marks=[(kill - start, "edge 2 killed")])
    (out / "notifier-shares.csv").write_text("\n".join(rows) + "\n")


def notifier_shares_by_demand(run: Run) -> Checks:
    c = Checks("notifier_shares_by_demand: the module as notifier shares R by demand over three edges")
    capacity, demands, seconds, kill_after = 120.0, (10.0, 60.0, 130.0), 30.0, 12.0
    # Water-filling of 120 over demands (10, 60, 130) with the allocator's default headroom of
    # 15 % (event::AllocatorConfig): the quiet edge donates and keeps 10 × 1.15 = 11.5, the
    # other two split the rest, (120 - 11.5) / 2 = 54.25 each. Each edge then admits what it is
    # offered up to its share: 10, 54.25, 54.25 (118.5/s at the server).
    headroom = 0.15
    quiet = demands[0] * (1 + headroom)
    shares_want = (quiet, (capacity - quiet) / 2, (capacity - quiet) / 2)
    admitted_want = tuple(min(d, w) for d, w in zip(demands, shares_want))
    matching, samples, start, kam = notifier_edges(run, "demand", capacity, demands, seconds, observe=True, kill_at=kill_after)
    kill = start + kill_after
    # Converged: the first sample from which the share the notifier gives every edge stays
    # within 5 % of its fair share until the kill. Judged on the shares, which are the
    # allocator's decisions; what each edge admits also depends on how evenly its SIPp UAC
    # offers calls, and is judged below on its mean.
    shares = [[(t, v[1]) for t, v in shares_of(samples, k)] for k in range(3)]
    series = [edge_rates(samples, k) for k in range(3)]
    converged = None
    for t, _ in shares[0]:
        if t > kill:
            break
        if all(all(abs(v - w) <= 0.05 * w for tt, v in sh if t <= tt <= kill) for sh, w in zip(shares, shares_want)):
            converged = t - start
            break
    c.that(converged is not None and converged <= 5.0,
           f"every edge's share within 5 % of ({', '.join(f'{w:g}' for w in shares_want)})/s after "
           f"{converged if converged is None else round(converged, 1)} s of traffic (≤ 5 s)")
    for k in range(3):
        c.that(True, f"edge {k} admitted per second: {[round(r, 1) for _, r in series[k]]}")
        c.that(True, f"edge {k} share per second: {[v for _, v in shares[k]]}")
    if matching:
        c.rate("all edges together at the server, converged until the kill", matching, start + 5.0, kill, sum(admitted_want))
    else:
        c.that(False, "no call reached the UAS")
    for k in range(3):
        rates = [r for t, r in series[k] if start + 5.0 <= t <= kill]
        mean = sum(rates) / len(rates) if rates else 0.0
        c.that(rates and abs(mean / admitted_want[k] - 1.0) <= 0.05,
               f"edge {k} (demand {demands[k]:g}/s) admitted {mean:.1f}/s, min(demand, share) {admitted_want[k]:g}/s ± 5 %")
    # The killed edge's subscription ends (a NOTIFY unanswered within fr_timer 2 s, or its 10 s
    # without a refresh); its share stays counted until those 10 s are over, then edge 1 gets
    # what it wants (60/s).
    ended = next((t - kill for t, v in shares_of(samples, 2) if t >= kill and v[3] == 0), None)
    c.that(ended is not None and ended <= 12.0, f"the killed edge's subscription ended {ended if ended is None else round(ended, 1)} s after the kill (≤ 12 s)")
    # Then edge 1 is given more than its demand and admits all it is offered: its share on
    # every sample, its admitted rate on their mean (a pause of its UAC lowers one sample).
    late = [r for t, r in series[1] if kill + 13.0 <= t <= start + seconds - 0.5]
    late_shares = [v for t, v in shares[1] if kill + 13.0 <= t <= start + seconds - 0.5]
    c.that(bool(late_shares) and min(late_shares) >= demands[1], f"edge 1's share then: {late_shares} (≥ its demand, {demands[1]:g}/s)")
    late_mean = sum(late) / len(late) if late else 0.0
    c.that(late_mean >= 0.95 * demands[1], f"edge 1 then admits its whole demand: {late_mean:.1f}/s, per second {[round(r, 1) for r in late]} (≥ 95 % of {demands[1]:g}/s)")
    stats = kam.rpc("loadctl.notifier").get("result", {})
    c.that(stats.get("refused") == 0 and stats.get("send_errors") == 0, f"no SUBSCRIBE refused, no NOTIFY unsent: {stats.get('refused')}, {stats.get('send_errors')}")
    write_shares_plot(run, samples, start, kill)
    # The same without demand reports: equal thirds, so the busy edges are held at 40/s and the
    # quiet one's unused 30/s are lost (10 + 40 + 40 = 90/s at the server).
    matching, samples, start, _ = notifier_edges(run, "blind", capacity, demands, 8.0, observe=False)
    if matching:
        c.rate("the blind equal split for comparison (10 + 40 + 40)", matching, start + 3.0, start + 8.0, 90.0)
    return c


def notifier_restart(run: Run) -> Checks:
    """The notifier (Kamailio) is killed (SIGKILL: no terminated NOTIFY) and restarted on the
    same address: the edges keep enforcing their last shares meanwhile (a subscription that
    merely lapses keeps its rules, RFC 7200 §4.8 removes them only on `terminated`), their next
    refresh gets 481 from the new notifier (it knows no dialog) and they subscribe again."""
    c = Checks("notifier_restart: edges keep their shares while the notifier restarts, then re-subscribe")
    template = run.path("capacity.xml")
    template.write_text(document(0, "full", rate_rule(60.0)))
    port = free_udp_port()
    uri = f"sip:lc@127.0.0.1:{port}"
    defines = [f'NOTIFIER_URI="{uri}"', 'NOTIFIER_ALLOW="127.0.0.1"', f'NOTIFIER_CAPACITY="{template}"', "NOTIFIER_MIN_EXPIRES=10", "FR_TIMER=2000"]
    hop = free_udp_port()
    kam = Kamailio(run, "kam1", None, 2, hop, defines=defines, port=port)
    edges = []
    for k in range(2):
        eport = free_udp_port(tcp=True)
        edges.append(start_edge(run, f"edge{k}", eport, kam.port, "--subscribe", uri, "--uri", f"sip:edge{k}@127.0.0.1:{eport}", "--expires", "10"))
    for e in edges:
        wait_event(e, "policy applied (version)", 0)
    # Both hold a share once the first has given up what the second needs (pacing: 1 s).
    time.sleep(2.5)
    shares = {s["subscriber"]: s["share"] for s in kam.rpc("loadctl.notifier")["result"]["subscribers"]}
    c.that(sorted(shares.values()) == [30.0, 30.0], f"60/s shared equally before the restart: {shares}")
    run.stop(kam.proc, sig=signal.SIGKILL)
    killed = time.time()
    time.sleep(3.0)
    kam2 = Kamailio(run, "kam2", None, 2, hop, defines=defines, port=port)
    restarted = time.time()
    # The edges refresh at half of the 10 s granted: within 5 s (plus the SUBSCRIBE's own
    # retransmissions while no notifier answered) each refresh reaches the new notifier.
    ok = wait_until(lambda: sum(1 for s in kam2.rpc("loadctl.notifier")["result"]["subscribers"] if s["active"] and s["share"] > 0) == 2, 20.0)
    back = time.time() - restarted
    c.that(ok, f"both edges subscribed to the new notifier and hold a share {back:.1f} s after its start (≤ 20 s)")
    for k, e in enumerate(edges):
        events = edge_events(e)
        withdrawn = [ev for ev in events if ev[1] == "policy withdrawn"]
        c.that(not withdrawn, f"edge {k}: its policy was never withdrawn ({len(withdrawn)} withdrawals)")
        again = [t for t, w, n, _ in events if w == "subscribed (seconds)" and t > killed]
        c.that(bool(again), f"edge {k}: subscribed again {again[0] - killed:.1f} s after the kill" if again else f"edge {k}: never subscribed again")
    shares = {s["subscriber"]: s["share"] for s in kam2.rpc("loadctl.notifier")["result"]["subscribers"] if s["active"]}
    c.that(sum(shares.values()) <= 60.0 + 1e-9, f"the new notifier's shares add up to at most 60/s: {shares}")
    # A new capacity over RPC (an invalid document is refused and changes nothing).
    bad = run.path("bad.xml")
    bad.write_text("<ruleset")
    r = kam2.rpc("loadctl.notifier_capacity", str(bad))
    c.that("error" in r, f"loadctl.notifier_capacity refuses an invalid document: {r.get('error')}")
    smaller = run.path("capacity-40.xml")
    smaller.write_text(document(0, "full", rate_rule(40.0)))
    r = kam2.rpc("loadctl.notifier_capacity", str(smaller))
    ok = wait_until(lambda: sorted(s["share"] for s in kam2.rpc("loadctl.notifier")["result"]["subscribers"] if s["active"]) == [20.0, 20.0], 5.0)
    c.that("error" not in r and ok, f"loadctl.notifier_capacity 40/s: 20/s each within 5 s (pacing 1 s): {kam2.rpc('loadctl.notifier')['result']['subscribers']}")
    # Kamailio stops (SIGTERM to its main process, as systemd stops it): every subscription
    # ends with terminated, and the edges drop the policy.
    stopped = time.time()
    kam2.proc.send_signal(signal.SIGTERM)
    for k, e in enumerate(edges):
        ok = wait_until(lambda: any(w == "policy withdrawn" and t >= stopped for t, w, _, _ in edge_events(e)), 5.0)
        c.that(ok, f"edge {k}: the notifier's shutdown ended its subscription (terminated) and withdrew its policy")
    return c


TESTS = {
    "subscriber_lifecycle": subscriber_lifecycle,
    "subscriber_over_tcp": subscriber_over_tcp,
    "subscriber_dialog": subscriber_dialog,
    "subscriber_resubscribe": subscriber_resubscribe,
    "redirect_agreement": redirect_agreement,
    "subscriber_remote_target": subscriber_remote_target,
    "notifier_shares_by_demand": notifier_shares_by_demand,
    "notifier_restart": notifier_restart,
}


def main() -> int:
    return suite_main(__doc__, TESTS, suite_label("kamailio module RFC 7200 e2e"), prefix="kam-")


if __name__ == "__main__":
    sys.exit(main())
