#!/usr/bin/env python3
"""Faults survived, end to end: loss, delay, reordering, duplicates, black holes and crashes
between real processes (the fault relay of faultrelay.py between them).

    python3 tests/e2e/test_faults.py [--long] [--keep] [NAME ...]

The short form (the default, run by `make faults` in `make test`) keeps the whole set within about three
minutes; `--long` runs each scenario longer (more changes, longer outages) by hand.

- notify_path_lossy: Kamailio (the module as RFC 7200 notifier, tm retransmitting its NOTIFYs)
  → relay (20 % loss, 0–200 ms jitter, 10 % duplicates, both ways) → the C edge as subscriber.
  The policy (two rate rules) changes every 1.2 s over RPC. The edge never applies an older
  version after a newer one, applies each version within the bound derived from the RFC 3261
  timers, ends with exactly the notifier's last policy, and converges to it within the bound
  derived from the timers and RFC 7200 §4.10 pacing (below).
- partial_after_lost: a SIPp notifier whose partial NOTIFY v1 is lost (the relay drops every
  copy) gives up on it and sends partial v2: the edge ignores v2, re-SUBSCRIBEs, and applies the
  full v3 the notifier answers with (RFC 7200 §4.11); it never applies v2 on the wrong base.

Bounds. RFC 3261 §17.1.2.2: a non-INVITE client transaction over UDP retransmits at T1, then
doubling up to T2 (T1 = 500 ms, T2 = 4 s): copies leave at 0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5,
19.5, 23.5 … s, and Timer F ends it at 64·T1 = 32 s. With independent loss l per datagram the
first k copies are all lost with probability l^k. A document therefore reaches the subscriber
within t(k−1) + J (J: the relay's largest jitter) except with probability l^k; the tests take k
with l^k ≤ 10^-4 per version. Convergence after the last change adds the RFC 7200 §4.10 pacing
(the notifier sends at most one NOTIFY a second) and the end of the NOTIFY transaction in flight
(its request and its 200 must both pass: (1 − (1 − l)²)^k ≤ 10^-4).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from admission import admission_stats, count_in  # noqa: E402
from checks import Checks, run_tests  # noqa: E402
from edge_proc import EDGE, edge_events, edge_stats, start_edge, wait_event  # noqa: E402
from faultrelay import FaultRelay, Faults  # noqa: E402
from kamailio_proc import Kamailio, build  # noqa: E402
from policy_docs import document, rule  # noqa: E402
from ports import free_udp_port, wait_udp_port  # noqa: E402
from processes import Run, wait_until  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402

T1, T2 = 0.5, 4.0
LONG = False


def retransmit_times(n: int) -> list:
    """When the first n copies of a non-INVITE request leave (RFC 3261 §17.1.2.2), seconds."""
    out, t, interval = [], 0.0, T1
    for _ in range(n):
        out.append(t)
        t += interval
        interval = min(2 * interval, T2)
    return out


def copies_needed(p_fail: float, target: float = 1e-4) -> int:
    """The least k with p_fail^k ≤ target."""
    return max(1, math.ceil(math.log(target) / math.log(p_fail))) if p_fail > 0 else 1


def two_rules(a: float, b: float, version: int = 0, state: str = "full") -> str:
    """A policy of two rate rules: `a` on To +1555…, `b` on To +1666…."""
    return document(version, state, rate_rule_xml("a", "+1555", a) + rate_rule_xml("b", "+1666", b))


def rate_rule_xml(rule_id: str, prefix: str, rate: float) -> str:
    return (
        f'<rule id="{rule_id}"><conditions><lc:call-identity><lc:sip><lc:to>'
        f'<many-tel prefix="{prefix}"/></lc:to></lc:sip></lc:call-identity>'
        f"<method>INVITE</method></conditions>"
        f'<actions><lc:accept alt-action="reject"><lc:rate>{rate}</lc:rate></lc:accept></actions></rule>'
    )


def notifies_sent(relay: FaultRelay) -> dict:
    """Every document version the notifier sent (a b2a NOTIFY copy the relay received, whatever
    it did to it): version -> (relay time of its first copy, doc state, rates, copies)."""
    out = {}
    for e in relay.events:
        if e["dir"] != "b2a" or e.get("method") != "NOTIFY" or "version" not in e or e["action"] == "duplicate":
            continue
        v = e["version"]
        if v not in out:
            out[v] = [e["t"], e["doc"], e["rates"], 0]
        out[v][3] += 1
    return out


def applied(edge) -> list:
    """(wall time, version) of every document the edge applied, in order."""
    return [(t, n) for t, w, n, _ in edge_events(edge) if w == "policy applied (version)"]


def replay(docs: dict, versions: list) -> dict:
    """The policy (rule id -> rate) a subscriber holds after applying `versions` in order, by
    RFC 7200 §4.11: a full document replaces the policy, a partial one adds or replaces rules by
    id."""
    policy: dict = {}
    for v in versions:
        _, state, rates, _ = docs[v]
        if state == "full":
            policy = dict(rates)
        else:
            policy.update(rates)
    return policy


def start_relay(run: Run, name: str, b_target: tuple, a_target: tuple, faults: Faults, seed: int, **kw) -> FaultRelay:
    relay = FaultRelay(a_port=0, b_target=b_target, a_target=a_target, a2b=faults, b2a=Faults(**vars(faults)), seed=seed,
                       log_path=str(run.path(f"{name}.jsonl")), **kw)
    return relay.start()


def output_tap(run: Run, name: str, uas_port: int) -> FaultRelay:
    """A fault-free relay between a proxy and the UAS, to read the proxy's admissions from:
    the kernel's receive time of each INVITE it sent on is stamped as the proxy's `sendto`
    hands the datagram to loopback, right after the decision. SIPp's arrival times at the UAS
    lag that by milliseconds under load, unevenly, and a limiter at its bound (a second that
    starts with a full burst reaches r·(1 s + τ) + 1 exactly) is then read one over."""
    return start_relay(run, name, ("127.0.0.1", uas_port), None, Faults(), seed=0)


def forwarded_invites(relay: FaultRelay, user_prefix: str) -> list:
    """Sorted wall-clock times of the first copy of each INVITE to a user starting with
    `user_prefix` that reached `relay` from its A side (the kernel's receive time)."""
    first: dict = {}
    for e in relay.events:
        if e["dir"] == "a2b" and e.get("method") == "INVITE" and e.get("user", "").startswith(user_prefix):
            first.setdefault(e["call_id"], e.get("kt", e["t"] + relay.started_wall))
    return sorted(first.values())


def decided_invites(relay: FaultRelay, user_prefix: str) -> list:
    """Like `forwarded_invites`, for a Kamailio with the STAMP define: (decision time, the
    tap's kernel receive time) of the first copy of each INVITE, sorted by decision time. The
    decision is stamped in the request right after lc_classify(); the tap sees it once
    Kamailio has relayed it, which under load can be tens of milliseconds later, unevenly."""
    first: dict = {}
    for e in relay.events:
        if e["dir"] == "a2b" and e.get("method") == "INVITE" and e.get("user", "").startswith(user_prefix):
            first.setdefault(e["call_id"], (e.get("lc_at"), e.get("kt", e["t"] + relay.started_wall)))
    return sorted(first.values(), key=lambda p: (p[0] is None, p[0] or 0.0))


# ---------------------------------------------------------------------------------------------
# the NOTIFY path


def notify_path_lossy(run: Run) -> Checks:
    loss, jitter_ms, dup = 0.2, 200.0, 0.1
    c = Checks(f"notify_path_lossy: Kamailio notifier → relay ({loss:.0%} loss, 0–{jitter_ms:.0f} ms jitter, {dup:.0%} duplicates) → edge")
    changes = 40 if LONG else 10
    kam_port, edge_port = free_udp_port(), free_udp_port(tcp=True)
    relay = start_relay(run, "relay", ("127.0.0.1", kam_port), ("127.0.0.1", edge_port),
                        Faults(loss=loss, jitter_ms=jitter_ms, duplicate=dup), seed=21)
    policy = run.path("policy.xml")
    rates = [10.0, 10.0]
    policy.write_text(two_rules(*rates))
    notifier_uri = f"sip:lc@127.0.0.1:{relay.a_port}"
    kam = Kamailio(run, "kamailio", None, 2, free_udp_port(), port=kam_port, advertise=relay.a_port,
                   defines=[f'NOTIFIER_URI="{notifier_uri}"', 'NOTIFIER_ALLOW="127.0.0.1"', f'NOTIFIER_POLICY="{policy}"'])
    edge = start_edge(run, "edge", edge_port, free_udp_port(), "--subscribe", notifier_uri, "--uri", f"sip:edge@127.0.0.1:{relay.b_port}")
    # The first SUBSCRIBE and its NOTIFY cross the lossy relay too: up to Timer F.
    wait_event(edge, "policy applied (version)", 0, timeout=40.0)
    last_change = time.time()
    for k in range(changes):
        # Mostly one rule changes (a partial document), every fourth change both (a full one).
        rates = [rates[0] + 1.0, rates[1]] if k % 4 != 3 else [rates[0] + 1.0, rates[1] + 1.0]
        step = run.path(f"policy-{k}.xml")
        step.write_text(two_rules(*rates))
        r = kam.rpc("loadctl.notifier_policy", str(step))
        if "error" in r:
            c.that(False, f"loadctl.notifier_policy {step.name}: {r['error']}")
            return c
        last_change = time.time()
        time.sleep(1.2)
    final = {"a": rates[0], "b": rates[1]}
    # The bound after the last change (module documentation).
    k_doc = copies_needed(loss)
    k_txn = copies_needed(1 - (1 - loss) ** 2)
    deliver = retransmit_times(k_doc)[-1] + jitter_ms / 1000
    bound = 1.0 + retransmit_times(k_txn)[-1] + jitter_ms / 1000 + deliver

    def converged() -> bool:
        docs = notifies_sent(relay)
        got = applied(edge)
        return bool(got) and bool(docs) and replay(docs, [v for _, v in got if v in docs]) == final and got[-1][1] == max(docs)

    ok = wait_until(converged, bound + 1.0, interval=0.1)
    got = applied(edge)
    took = (got[-1][0] - last_change) if got else float("inf")
    counts = relay.stop()
    docs = notifies_sent(relay)
    c.that(ok and took <= bound,
           f"the edge holds the notifier's last policy {final} (version {max(docs)}) {took:.2f} s after the last change "
           f"(bound {bound:.1f} s: pacing 1 s + the transaction in flight {retransmit_times(k_txn)[-1]:.1f} s + delivery {deliver:.1f} s)")
    versions = [v for _, v in got]
    c.that(all(b > a for a, b in zip(versions, versions[1:])),
           f"never an older (or the same) version after a newer one: applied {versions}")
    c.that(set(versions) <= set(docs), f"every version applied was one the notifier sent ({sorted(docs)})")
    lag = []
    wall0 = relay.started_wall
    for t, v in got:
        lag.append(t - (wall0 + docs[v][0]))
    worst = max(lag) if lag else float("inf")
    c.that(worst <= deliver,
           f"each document applied within {deliver:.1f} s of its first transmission (k = {k_doc} copies, {loss:.0%}^{k_doc} = "
           f"{loss ** k_doc:.1e}): worst {worst:.2f} s, median {sorted(lag)[len(lag) // 2]:.2f} s over {len(lag)} versions")
    c.that(replay(docs, versions) == final, f"what the edge applied, replayed by RFC 7200 §4.11, is the final policy: {replay(docs, versions)}")
    partials = [v for v in versions if docs[v][1] == "partial"]
    c.that(bool(partials), f"partial documents were among them ({len(partials)} of {len(versions)})")
    both = counts["a2b"]["lost"] + counts["b2a"]["lost"]
    dups = counts["a2b"]["duplicated"] + counts["b2a"]["duplicated"]
    copies = sum(d[3] for d in docs.values())
    c.that(both > 0 and copies > len(docs) and (dups > 0 or not LONG),
           f"faults happened: {both} datagrams lost, {dups} duplicated; {copies} NOTIFY copies for {len(docs)} versions "
           f"({copies - len(docs)} retransmissions)")
    subs = [t for t, w, _, _ in edge_events(edge) if w == "subscribed (seconds)"]
    c.that(len(subs) == 1, f"one subscription throughout (no NOTIFY transaction failed): {len(subs)} subscribed events")
    kam.proc.stop()
    return c


def partial_after_lost(run: Run) -> Checks:
    c = Checks("partial_after_lost: SIPp notifier, partial v1 lost, partial v2 → re-SUBSCRIBE → full v3")
    r = 20.0
    ports = SippPorts.pick()
    edge_port = free_udp_port(tcp=True)
    # Jitter on the notifier's side only: SIPp plays its scenario in order, and a 200 overtaken
    # by the re-SUBSCRIBE it precedes would stop it (reordering is notify_path_lossy's part).
    relay = start_relay(run, "relay", ("127.0.0.1", ports.sip), ("127.0.0.1", edge_port), Faults(), seed=22)
    relay.b2a.jitter_ms = 100.0
    relay.b2a.drop_if = rb'version="1"'
    docs = {
        "@DOC_V0@": two_rules(r, r, 0, "full"),
        "@DOC_V1@": document(1, "partial", rate_rule_xml("a", "+1555", 2 * r)),
        "@DOC_V2@": document(2, "partial", rate_rule_xml("b", "+1666", 3 * r)),
        "@DOC_V3@": two_rules(2 * r, 2 * r, 3, "full"),
    }
    text = (HERE / "scenarios" / "notifier_lost_partial.xml").read_text().replace("@VIA_PORT@", str(relay.a_port))
    for k, v in docs.items():
        text = text.replace(k, v)
    scenario = run.path("notifier_lost_partial.xml")
    scenario.write_text(text)
    notifier = run.start("notifier", sipp_command(scenario, ports, calls=1, timeout_s=40, logs=False, extra=["-nr"]))
    wait_udp_port(ports.sip, proc=notifier)
    edge = start_edge(run, "edge", edge_port, free_udp_port(), "--subscribe", f"sip:sbc@127.0.0.1:{relay.a_port}",
                      "--uri", f"sip:edge@127.0.0.1:{relay.b_port}")
    code = notifier.wait(timeout=40)
    c.that(code == 0, f"the SIPp notifier completed its scenario, the re-SUBSCRIBE included (exit {code}): {SippOutputs(notifier.cwd).errors(300)!r}")
    relay.stop()
    sent = notifies_sent(relay)
    lost = [e for e in relay.events if e["action"] == "targeted"]
    c.that(len(lost) == 3 and sent.get(1, [0, 0, 0, 0])[3] == 3,
           f"every copy of v1 was lost: {len(lost)} of 3 (the first and its two retransmissions)")
    versions = [v for _, v in applied(edge)]
    c.that(versions == [0, 3], f"the edge applied v0 and then the full v3, never the partial v2 on the wrong base: {versions}")
    events = edge_events(edge)
    ignored = [n for _, w, n, _ in events if w == "document ignored (version)"]
    c.that(ignored == [2], f"v2 (a gap after v0) was ignored: {ignored}")
    resub = [e for e in relay.events if e["dir"] == "a2b" and e.get("method") == "SUBSCRIBE"]
    t_v2 = min(e["t"] for e in relay.events if e.get("version") == 2)
    c.that(any(e["t"] > t_v2 for e in resub), f"a re-SUBSCRIBE followed v2 ({len(resub)} SUBSCRIBE copies crossed the relay)")
    docs_sent = {v: (t, state, rates, n) for v, (t, state, rates, n) in sent.items()}
    c.that(replay(docs_sent, versions) == {"a": 2 * r, "b": 2 * r}, f"the edge's policy is the notifier's full state: {replay(docs_sent, versions)}")
    withdrawn = [t for t, w, _, _ in events if w == "policy withdrawn"]
    c.that(len(withdrawn) == 1, "terminated withdrew the policy (RFC 7200 §4.8)")
    return c


# ---------------------------------------------------------------------------------------------
# outages under overload

TAU = 0.1  # the engine's default burst tolerance (the edge's GCRA: at most r·(W + τ) + 1 in W)
MATCH = "+15550001234"  # rule a (+1555)
OTHER = "+17770001234"  # no rule


def overload(run: Run, target_port: int, r: float, seconds: float, name: str = "uac", via_port=None, hold_ms=None, timeout_s=None):
    """A SIPp UAC offering 3r calls/s matching rule a and r/s matching nothing, for `seconds`.
    `via_port`: the port its Via names (responses go there; default its own)."""
    inf = write_injection(run.path(f"{name}-callees.csv"), [MATCH, MATCH, MATCH, OTHER])
    ports = SippPorts.pick()
    return run.start(name, sipp_command("uac_faults.xml", ports, remote=f"127.0.0.1:{target_port}", inf=inf, rate=4 * r,
                                        calls=int(4 * r * seconds), timeout_s=timeout_s or seconds + 40, duration_ms=hold_ms,
                                        extra=["-key", "via_port", str(via_port or ports.sip)]))


def admitted_bound(c: Checks, matching: list, r: float, start: float, end: float, label: str, uas=None, also="") -> dict:
    """The over-admission check: at most r·(1 s + τ) + 1 in any second of [start, end) of the
    admission times `matching`. With `uas` (its SIPp process), the same count from SIPp's own
    arrival times is shown beside it, for information (see `output_tap`), and `also` after."""
    st = admission_stats(matching, start, end, r)
    bound = int(r * (1.0 + TAU)) + 1
    seen = ""
    if uas is not None:
        at_uas = [a.t for a in SippOutputs(uas.cwd).arrivals() if a.callee.startswith("+1555")]
        seen = f"; {admission_stats(at_uas, start, end, r)['max_1s']} by SIPp's arrival times at the UAS"
    c.that(st["max_1s"] <= bound, f"{label}: at most {st['max_1s']} admitted in any 1 s (bound r·(1 s + τ) + 1 = {bound}); "
                                  f"{st['admitted_per_s']:.1f}/s over {st['interval_s']:.1f} s{seen}{also}")
    return st


def notifier_outage(run: Run) -> Checks:
    """The notifier (Kamailio) is black-holed for longer than the subscription, then killed
    with SIGKILL and restarted, while a SIPp UAC offers 3R through the edge."""
    c = Checks("notifier_outage: notifier black-holed past the subscription, then SIGKILLed, under 3× overload")
    r, expires = 50.0, 6
    hole = 80.0 if LONG else 2 * expires + 1.0
    kam_port, edge_port = free_udp_port(), free_udp_port(tcp=True)
    relay = start_relay(run, "relay", ("127.0.0.1", kam_port), ("127.0.0.1", edge_port), Faults(), seed=23)
    policy = run.path("policy.xml")
    policy.write_text(two_rules(r, r))
    notifier_uri = f"sip:lc@127.0.0.1:{relay.a_port}"
    defines = [f'NOTIFIER_URI="{notifier_uri}"', 'NOTIFIER_ALLOW="127.0.0.1"', f'NOTIFIER_POLICY="{policy}"',
               f"NOTIFIER_MIN_EXPIRES={expires}", f"NOTIFIER_EXPIRES={expires}"]
    kam = Kamailio(run, "kam1", None, 2, free_udp_port(), port=kam_port, advertise=relay.a_port, defines=defines)
    uas_ports = SippPorts.pick()
    total = 3.0 + hole + 6.0 + 3.0 + 3.0 * expires + 2.0
    uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=total + 60))
    wait_udp_port(uas_ports.sip, proc=uas)
    tap = output_tap(run, "tap", uas_ports.sip)
    edge = start_edge(run, "edge", edge_port, tap.a_port, "--subscribe", notifier_uri, "--uri", f"sip:edge@127.0.0.1:{relay.b_port}",
                      "--expires", str(expires))
    t_sub = wait_event(edge, "policy applied (version)", 0)
    uac = overload(run, edge_port, r, total)
    time.sleep(3.0)
    # 1. Black hole, both ways, for longer than the subscription.
    relay.cut(True)
    cut_at = time.time()
    time.sleep(hole)
    if not LONG:
        # The order made certain: the refresh in flight (the old dialog's SUBSCRIBE, still
        # retransmitted) is held back until the notifier's `terminated` (its own expiry of the
        # subscription, retransmitted by tm) has got through, so the edge gets `terminated`
        # while its refresh is outstanding. In the long form tm has given up on it by then.
        old = [e["call_id"] for e in relay.events if e["dir"] == "a2b" and e.get("method") == "SUBSCRIBE" and e["action"] == "blackholed"]
        relay.a2b.drop_if = b"Call-ID: " + re.escape(old[-1].encode()) if old else None
    relay.cut(False)
    restored = time.time()
    if not LONG:
        passed = wait_until(lambda: any(e["dir"] == "b2a" and e.get("state") == "terminated" and e["action"] == "queued"
                                                for e in list(relay.events)), T2 + 1.0)
        relay.a2b.drop_if = None
        c.that(passed, "the notifier's retransmitted terminated NOTIFY got through within T2 + 1 s of its return, the refresh held back")
    bound_back = T2 + 1.0  # the next copy of the refresh in flight leaves within T2
    ok = wait_until(lambda: any(t > restored for t, v in applied(edge)), bound_back + 1.0)
    events = edge_events(edge)
    back = min((t for t, v in applied(edge) if t > restored), default=float("inf"))
    lapsed = [t for t, w, _, _ in events if w == "subscription lapsed" and cut_at < t < restored]
    c.that(bool(lapsed), f"the subscription lapsed {lapsed[0] - cut_at:.1f} s into the black hole (granted {expires} s)" if lapsed
           else "the subscription never lapsed during the black hole")
    c.that(ok and back - restored <= bound_back,
           f"subscribed again and the policy applied {back - restored:.2f} s after the notifier came back (bound T2 + 1 s = {bound_back:.0f} s)")
    first_copy: dict = {}  # SUBSCRIBE transaction (branch) -> when its first copy left
    for e in relay.events:
        if e["dir"] == "a2b" and e.get("method") == "SUBSCRIBE" and e["action"] == "blackholed":
            first_copy.setdefault(e["branch"], e["t"])
    attempts = sorted(first_copy.values())
    c.that(bool(attempts), f"SUBSCRIBE transactions during the black hole started at {[round(a - attempts[0], 1) for a in attempts]} s "
                           f"(each retransmitted T1 doubling to T2 for 64·T1, then back-off from 1 s)")
    if LONG:
        gaps = [b - a for a, b in zip(attempts, attempts[1:])]
        c.that(len(gaps) >= 2 and all(g >= 32.0 for g in gaps) and gaps[1] > gaps[0],
               f"re-subscription backs off: {[round(g, 1) for g in gaps]} s between transactions (≥ 64·T1, growing)")
    # 2. SIGKILL: no terminated NOTIFY, no goodbye; a new Kamailio on the same port knows no dialog.
    time.sleep(3.0)
    run.stop(kam.proc, sig=signal.SIGKILL)
    killed = time.time()
    time.sleep(3.0)
    kam2 = Kamailio(run, "kam2", None, 2, free_udp_port(), port=kam_port, advertise=relay.a_port, defines=defines)
    restarted = time.time()
    bound_again = expires / 2 + T2 + 1.0
    ok = wait_until(lambda: any(t > restarted for t, v in applied(edge)), bound_again + 1.0)
    again = min((t for t, v in applied(edge) if t > restarted), default=float("inf"))
    c.that(ok and again - restarted <= bound_again,
           f"after the SIGKILL: subscribed to the new notifier {again - restarted:.2f} s after its start "
           f"(bound: refresh at half of {expires} s + T2 + 1 s = {bound_again:.0f} s)")
    uac.wait(timeout=total + 60)
    run.stop(uas)
    events = edge_events(edge)
    # A lapse alone keeps the rules (RFC 7200 §4.8 removes them only on terminated; the rules
    # carry no validity end). The notifier's own expiry of the subscription sends `terminated`
    # (reason timeout), lost in the black hole and retransmitted by tm: when a copy gets
    # through, the edge must withdraw (§4.8: "MUST also terminate previously received
    # load-filtering policies") and re-subscribe at once (RFC 6665 §4.1.3, timeout).
    withdrawn = [t for t, w, _, _ in events if w == "policy withdrawn"]
    terminated = [e["t"] + relay.started_wall for e in relay.events
                  if e["dir"] == "b2a" and e.get("state") == "terminated" and e["action"] in ("queued", "duplicate")]
    c.that(all(any(abs(w - t) < 0.5 for t in terminated) for w in withdrawn) and (LONG or len(withdrawn) == 1),
           f"the policy was withdrawn on the terminated NOTIFY that got through (RFC 7200 §4.8: subscribers \"MUST also "
           f"terminate previously received load-filtering policies\"), and only then: {len(withdrawn)} withdrawals, "
           f"{len(terminated)} terminated NOTIFYs delivered")
    gaps = [min((t for t, v in applied(edge) if t >= w), default=float("inf")) - w for w in withdrawn]
    c.that(all(g <= 0.1 for g in gaps), f"each withdrawal was followed by the re-subscription's policy within 100 ms: "
                                        f"{[round(1000 * g, 1) for g in gaps]} ms")
    matching = forwarded_invites(tap, "+1555")
    start, end = t_sub + 1.0, matching[-1] if matching else t_sub + 1.0
    st = admitted_bound(c, matching, r, start, end, "the whole run", uas=uas)
    for label, a, b in (("before the black hole", start, cut_at), ("black hole", cut_at, restored),
                        ("notifier dead", killed, restarted), ("after", again + 0.5, end)):
        if b - a >= 1.0:
            n = count_in(matching, a, b)
            c.that(abs(n / (b - a) / r - 1.0) <= 0.05 + 1.0 / (b - a) / r * 2,
                   f"{label}: {n / (b - a):.1f}/s admitted, the rule's {r:g}/s kept (± 5 %)")
    kam2.proc.stop()
    del st
    return c


def edge_restart(run: Run) -> Checks:
    """The edge is SIGKILLed under 3× overload and started again on the same port."""
    c = Checks("edge_restart: the edge SIGKILLed under 3× overload and started again")
    r = 50.0
    kam_port, edge_port = free_udp_port(), free_udp_port(tcp=True)
    policy = run.path("policy.xml")
    policy.write_text(two_rules(r, r))
    notifier_uri = f"sip:lc@127.0.0.1:{kam_port}"
    Kamailio(run, "kamailio", None, 2, free_udp_port(), port=kam_port,
             defines=[f'NOTIFIER_URI="{notifier_uri}"', 'NOTIFIER_ALLOW="127.0.0.1"', f'NOTIFIER_POLICY="{policy}"'])
    uas_ports = SippPorts.pick()
    total = 14.0
    uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=total + 60))
    wait_udp_port(uas_ports.sip, proc=uas)
    args = ["--subscribe", notifier_uri, "--uri", f"sip:edge@127.0.0.1:{edge_port}"]
    tap = output_tap(run, "tap", uas_ports.sip)
    edge = start_edge(run, "edge1", edge_port, tap.a_port, *args)
    t_sub = wait_event(edge, "policy applied (version)", 0)
    uac = overload(run, edge_port, r, total)
    time.sleep(5.0)
    run.stop(edge, sig=signal.SIGKILL)
    killed = time.time()
    time.sleep(1.0)
    started = time.time()
    edge2 = start_edge(run, "edge2", edge_port, tap.a_port, *args)
    t2 = wait_event(edge2, "policy applied (version)", 0)
    uac.wait(timeout=total + 60)
    run.stop(uas)
    matching = forwarded_invites(tap, "+1555")
    open_door = count_in(matching, started, t2)
    held = [line for line in edge2.stderr_path.read_text(errors="replace").splitlines() if "startup hold ended" in line]
    c.that(t2 - started < 1.0 and open_door == 0 and bool(held),
           f"the new edge applied the notifier's policy {1000 * (t2 - started):.1f} ms after its start and let nothing through "
           f"before it ({open_door} matching calls; {held[0].split(': ', 1)[1] if held else 'no startup hold logged'})")
    end = matching[-1] if matching else killed
    admitted_bound(c, matching, r, t_sub + 1.0, end, "across the kill and the restart", uas=uas)
    n = count_in(matching, t2 + 1.0, end)
    c.that(abs(n / (end - t2 - 1.0) / r - 1.0) <= 0.05, f"the new edge enforces {n / (end - t2 - 1.0):.1f}/s (rule {r:g}/s ± 5 %)")
    out = invite_outcomes(SippOutputs(uac.cwd))
    c.that(out["answered_200"] + out["rejected_503"] + out["failed_calls"] >= out["invites"] - 1,
           f"every INVITE was answered 200 or 503, or failed while no edge listened: {out['answered_200']} + {out['rejected_503']} "
           f"+ {out['failed_calls']} failed of {out['invites']}")
    return c


# ---------------------------------------------------------------------------------------------
# the call path


def transactions(events: list, direction: str, actions=("queued", "duplicate")) -> dict:
    """Request copies that left the relay in `direction` (delivered or about to be), per
    transaction (top Via branch, method), ACKs left out (the detector does not see them)."""
    out: dict = {}
    for e in events:
        if e["dir"] == direction and e["action"] in actions and e.get("method") not in (None, "ACK") and "branch" in e:
            key = (e["branch"], e["method"])
            out[key] = out.get(key, 0) + 1
    return out


def call_path_lossy(run: Run) -> Checks:
    """SIPp UAC → relay → edge → relay → SIPp UAS, every leg lossy (10 % loss and 5 %
    duplicates, both ways), 3r offered to a rate rule and r to a window rule, and one call whose
    final response never comes back (its window slot goes back by Timer B). No jitter here:
    SIPp plays a call's scenario in order and aborts the call on a message that overtook
    another (a retransmitted INVITE behind the ACK, a 180 behind the 200); reordering is
    notify_path_lossy's part."""
    loss, jitter_ms, dup = 0.1, 0.0, 0.05
    c = Checks(f"call_path_lossy: SIPp ↔ relay ↔ edge ↔ relay ↔ SIPp, {loss:.0%} loss, {dup:.0%} duplicates, both ways")
    r, window = 30.0, 4
    seconds = 60.0 if LONG else 10.0
    uas_ports = SippPorts.pick()
    edge_port = free_udp_port(tcp=True)
    faults = Faults(loss=loss, jitter_ms=jitter_ms, duplicate=dup)
    callee_side = start_relay(run, "relay-uas", ("127.0.0.1", uas_ports.sip), ("127.0.0.1", edge_port), faults, seed=31)
    caller_side = start_relay(run, "relay-uac", ("127.0.0.1", edge_port), None, faults, seed=32)
    policy = run.path("policy.xml")
    # Rule w (window 4) takes the UAC's other calls; rule lost (window 2) only the test's own
    # INVITEs, so that a slot it holds can be told from the traffic's.
    policy.write_text(document(0, "full", rate_rule_xml("a", "+1555", r)
                               + rule("w", "+1777", f"<lc:win>{window}</lc:win>")
                               + rule("lost", "+1888", "<lc:win>2</lc:win>")))
    # scenarios/uas.xml keeps a finished call 500 ms for a retransmitted BYE; on a lossy path
    # the BYE's 200 can be lost up to Timer J = 64·T1 = 32 s (RFC 3261 §17.2.2), so this copy
    # keeps it that long (a dead call's BYE is not answered, and the UAC's call fails).
    # And SIPp 3.6.1 aborts a call on a retransmitted INVITE that arrives after its 200 (a 200
    # lost on the way back: the UAC retransmits, the edge forwards the retransmission); this
    # copy absorbs such INVITEs while it waits for the ACK (its 200 is retransmitted on its own
    # timer until then).
    template = (HERE / "scenarios" / "uas.xml").read_text()
    ack = '  <recv request="ACK" optional="global" crlf="true"/>'
    assert '<timewait milliseconds="500"/>' in template and ack in template
    uas_xml = run.path("uas.xml")
    uas_xml.write_text(template.replace('<timewait milliseconds="500"/>', '<timewait milliseconds="32000"/>').replace(
        ack, '  <label id="wait_ack"/>\n  <recv request="INVITE" optional="true" next="wait_ack"/>\n' + ack))
    uas = run.start("uas", sipp_command(uas_xml, uas_ports, timeout_s=seconds + 120))
    wait_udp_port(uas_ports.sip, proc=uas)
    edge = start_edge(run, "edge", edge_port, callee_side.a_port, "--policy", policy)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    probe.settimeout(1.0)
    pport = probe.getsockname()[1]

    def invite(call: str, callee: str) -> bytes:
        # user=phone: the user part is a telephone number, so the rules' tel prefixes apply.
        return (f"INVITE sip:{callee}@127.0.0.1:{edge_port};user=phone SIP/2.0\r\n"
                f"Via: SIP/2.0/UDP 127.0.0.1:{pport};branch=z9hG4bK-{call}\r\nMax-Forwards: 70\r\n"
                f"From: <sip:probe@127.0.0.1>;tag={call}\r\nTo: <sip:{callee}@127.0.0.1;user=phone>\r\n"
                f"Call-ID: {call}@127.0.0.1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n").encode()

    def offer(name: str, callee: str, n: int) -> int:
        """Offers n INVITEs at once straight to the edge; how many it refused (503)."""
        for k in range(n):
            probe.sendto(invite(f"probe-{name}-{k}", callee), ("127.0.0.1", edge_port))
        refused = 0
        try:
            while True:
                refused += probe.recv(4096).startswith(b"SIP/2.0 503")
        except socket.timeout:
            pass
        return refused

    # A call whose final response never comes back (every response to it dropped on the way
    # from the UAS: targeted loss) holds its slot of rule `lost` (window 2) until Timer B, 64·T1
    # = 32 s (the edge's expiry runs every 100 ms): 5 s later one probe of two is refused;
    # once Timer B has passed for it and for that probe (whose own answer may be lost on the
    # lossy relays: then Timer B frees its slot too), two probes pass.
    callee_side.b2a.drop_if = rb"Call-ID: lost-final@"
    probe.sendto(invite("lost-final", "+18880000001"), ("127.0.0.1", edge_port))
    lost_at = time.monotonic()
    uac = overload(run, caller_side.a_port, r, seconds, via_port=caller_side.b_port, timeout_s=seconds + 35)
    time.sleep(5.0)
    held = offer("held", "+18880000002", 2)
    held_at = time.monotonic()
    c.that(held == 1, f"5 s after a call whose every response was lost: {held} of 2 INVITEs refused by its window of 2 (its slot held)")
    uac.wait(timeout=seconds + 100)
    time.sleep(0.5)  # what the relays still hold reaches the edge
    stats = edge_stats(edge)
    out = invite_outcomes(SippOutputs(uac.cwd))
    # The traffic's window after the run, with the relays made lossless so that the probes
    # themselves are answered: whole (a retransmitted INVITE took no second slot, every final
    # response released the slot its request took).
    for relay in (caller_side, callee_side):
        for f in (relay.a2b, relay.b2a):
            f.loss, f.duplicate = 0.0, 0.0
    refused = offer("after", "+17770000999", window)
    c.that(refused == 0, f"the traffic's window of {window} is whole after the run: {window - refused} of {window} INVITEs forwarded")
    time.sleep(max(0.0, held_at + 32.0 + 0.5 - time.monotonic()))
    back = offer("timer-b", "+18880000003", 2)
    c.that(back == 0, f"Timer B gave the lost call's slot back: {2 - back} of 2 INVITEs forwarded {time.monotonic() - lost_at:.1f} s after it "
                      f"({sum(1 for e in callee_side.events if e['action'] == 'targeted')} responses to it dropped)")
    run.stop(uas)
    probe.close()
    caller_side.stop()
    callee_side.stop()
    # Retransmissions as the detector saw them: copies the caller-side relay delivered, per
    # transaction, less one.
    seen = transactions(caller_side.events, "a2b")
    expected_rtx = sum(n - 1 for n in seen.values())
    got_rtx = stats.get("edge_detector_retransmissions_total", -1)
    c.that(got_rtx == expected_rtx,
           f"retransmissions classified as retransmissions: {got_rtx} (the relay delivered {sum(seen.values())} copies of "
           f"{len(seen)} transactions: {expected_rtx} repeats, duplicates included)")
    c.that(stats.get("edge_detector_originals_total", -1) == len(seen) + 3,
           f"originals: {stats.get('edge_detector_originals_total')} = the {len(seen)} transactions the relay delivered "
           f"+ the lost call and its 2 probes")
    rep, unrem = stats.get("edge_retransmissions_repeated_total", -1), stats.get("edge_retransmissions_unremembered_total", -1)
    c.that(rep + unrem == got_rtx and unrem == 0, f"every retransmission got its original's treatment: {rep} repeated, {unrem} unremembered")
    # No call both forwarded and refused: a retransmission of a forwarded INVITE is forwarded.
    forwarded = {e["call_id"] for e in callee_side.events
                 if e["dir"] == "a2b" and e.get("method") == "INVITE" and not e["call_id"].startswith(("probe-", "lost-final"))}
    refused_ids = {e["call_id"] for e in caller_side.events if e["dir"] == "b2a" and e.get("status") == 503}
    both = forwarded & refused_ids
    c.that(not both, f"no call was both forwarded and answered 503: {len(forwarded)} forwarded, {len(refused_ids)} refused, {len(both)} both")
    # What the edge admitted, when: the first copy of each +1555 INVITE it sent on (the
    # kernel's receive time of it at the relay, before any fault and free of the relay
    # thread's scheduling; the UAS sees lost ones later or never).
    matching = forwarded_invites(callee_side, "+1555")
    if matching:
        admitted_bound(c, matching, r, matching[0], matching[-1], "rate rule under loss (at the edge's output)")
    # Counters add up at the edge: every INVITE transaction it got was forwarded or refused.
    delivered = {e["call_id"] for e in caller_side.events
                 if e["dir"] == "a2b" and e.get("method") == "INVITE" and e["action"] in ("queued", "duplicate")}
    c.that(forwarded | refused_ids == delivered,
           f"every INVITE the edge got was forwarded or refused: {len(forwarded)} + {len(refused_ids)} = {len(delivered)} calls")
    # SIPp's own accounting: a call ends answered, refused or failed (7 copies lost in a row:
    # 0.34^7 ≈ 6·10^-4 per call over the four lossy legs). A few calls may still be running when
    # SIPp's timeout ends it: SIPp does not tell a retransmitted 200 to the INVITE from the 200 to
    # the BYE it waits for, so a lost ACK and BYE followed by such a 200 leaves its UAS waiting.
    ended = out["answered_200"] + out["rejected_503"] + out["failed_calls"]
    c.that(out["failed_calls"] <= 0.01 * out["invites"] and ended >= 0.99 * out["invites"],
           f"calls add up at SIPp: {out['answered_200']} answered + {out['rejected_503']} refused + {out['failed_calls']} failed = "
           f"{ended} of {out['invites']} INVITEs ({out['retransmissions']} SIPp retransmissions); failures ≤ 1 %, ended ≥ 99 %")
    lost = caller_side.counts["a2b"]["lost"] + caller_side.counts["b2a"]["lost"] + callee_side.counts["a2b"]["lost"] + callee_side.counts["b2a"]["lost"]
    c.that(lost > 0 and expected_rtx > 0, f"faults happened: {lost} datagrams lost on the two relays")
    return c


def kamailio_worker_killed(run: Run) -> Checks:
    """One of Kamailio's UDP workers is SIGKILLed under 3× overload (the module, children=4,
    one shared cell per rule). Kamailio 5.6's main process ends the whole instance when a child
    dies ("terminating due to SIGCHLD"), so its shared memory — the cells and the window slots
    in them — goes with it; a supervisor starts it again. What must hold: no second in which
    more than r·(1 s + τ) + 1 were admitted, across the death and the restart, and the new
    instance enforcing r with every slot free. Admissions are counted at their decision times
    (STAMP), which is where the limit holds; the tap's count is shown beside them."""
    c = Checks("kamailio_worker_killed: a Kamailio worker SIGKILLed under 3× overload, Kamailio started again")
    r = 50.0
    uas_ports = SippPorts.pick()
    total = 12.0
    uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=total + 60))
    wait_udp_port(uas_ports.sip, proc=uas)
    tap = output_tap(run, "tap", uas_ports.sip)
    policy = document(0, "full", rate_rule_xml("a", "+1555", r))
    kam = Kamailio(run, "kam1", policy, 4, tap.a_port, stateful=True, defines=["STAMP"])
    port = kam.port
    workers = [p["PID"] for p in kam.rpc("core.psx")["result"] if p["DSC"].startswith("udp receiver")]
    uac = overload(run, port, r, total)
    time.sleep(4.0)
    os.kill(workers[1], signal.SIGKILL)
    killed = time.time()
    ended = kam.proc.popen.wait(timeout=10) is not None
    gone = time.time()
    log = kam.log()
    c.that(ended and "terminating due to SIGCHLD" in log,
           f"Kamailio ended the whole instance {1000 * (gone - killed):.0f} ms after the worker's death ({len(workers)} workers)")
    time.sleep(max(0.0, 1.0 - (time.time() - gone)))
    started = time.time()
    kam2 = Kamailio(run, "kam2", policy, 4, tap.a_port, stateful=True, port=port, defines=["STAMP"])
    serving = time.time()
    uac.wait(timeout=total + 60)
    run.stop(uas)
    # The limit holds at the decisions; what reaches the next hop is later by the relay's
    # own delay, and a limiter at its bound is read over it by that delay's spread x r.
    pairs = decided_invites(tap, "+1555")
    unstamped = sum(1 for d, _ in pairs if d is None)
    delays = [k - d for d, k in pairs if d is not None]
    c.that(bool(pairs) and unstamped == 0 and min(delays) >= -0.001,
           f"every admitted INVITE carries its decision time, before the tap's receive time: {unstamped} of "
           f"{len(pairs)} without; decision -> tap {1000 * min(delays, default=0):.1f}-{1000 * max(delays, default=0):.1f} ms")
    matching = [d for d, _ in pairs if d is not None]
    first = matching[0] if matching else started
    end = matching[-1] if matching else serving
    at_tap = sorted(k for _, k in pairs)
    admitted_bound(c, matching, r, first, end, "across the death and the restart", uas=uas,
                   also=f"; {admission_stats(at_tap, first, end + 1.0, r)['max_1s']} by the tap's receive times")
    n = count_in(matching, serving + 1.0, end)
    c.that(abs(n / (end - serving - 1.0) / r - 1.0) <= 0.05,
           f"the new instance ({1000 * (serving - started):.0f} ms to start) enforces {n / (end - serving - 1.0):.1f}/s (rule {r:g}/s ± 5 %)")
    del kam2
    out = invite_outcomes(SippOutputs(uac.cwd))
    c.that(out["answered_200"] + out["rejected_503"] + out["failed_calls"] >= out["invites"] - 1,
           f"every INVITE was answered 200 or 503, or failed while no Kamailio listened: {out['answered_200']} + "
           f"{out['rejected_503']} + {out['failed_calls']} failed of {out['invites']}")
    return c


TESTS = {
    "notify_path_lossy": notify_path_lossy,
    "partial_after_lost": partial_after_lost,
    "notifier_outage": notifier_outage,
    "edge_restart": edge_restart,
    "kamailio_worker_killed": kamailio_worker_killed,
    "call_path_lossy": call_path_lossy,
}
# the scenarios with a Kamailio (LOADCTL_KAMAILIO_BUILD picks which), for a second Kamailio release
WITH_KAMAILIO = ["notify_path_lossy", "notifier_outage", "edge_restart", "kamailio_worker_killed"]


def main() -> int:
    global LONG
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--long", action="store_true", help="the long form: more changes, longer outages")
    ap.add_argument("--keep", action="store_true", help="keep every run directory (logs, relay logs)")
    ap.add_argument("--kamailio-only", action="store_true", help=f"only the scenarios with a Kamailio: {', '.join(WITH_KAMAILIO)}")
    ap.add_argument("names", nargs="*", help=f"tests to run (default all): {', '.join(TESTS)}")
    args = ap.parse_args()
    LONG = args.long
    names = args.names or (WITH_KAMAILIO if args.kamailio_only else [])
    if not Path(EDGE).exists():
        print(f"missing {EDGE}: run `make e2e`, which builds it", file=sys.stderr)
        return 2
    label = "faults e2e" + (" (long)" if LONG else "")
    if any(name in WITH_KAMAILIO for name in names or TESTS):
        label += f" (Kamailio {build().version})"
    return run_tests(TESTS, names, args.keep, label, prefix="faults-")


if __name__ == "__main__":
    sys.exit(main())
