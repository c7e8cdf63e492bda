#!/usr/bin/env python3
"""End-to-end tests of the loadctl Kamailio module (kamailio/loadctl/) in Debian's kamailio, as a
limiter in Kamailio's routes: its policy file, rates across children, rule actions and windows,
RPC publishing, KEMI, and the target and exemptions of a rule. The module as an RFC 7200
subscriber and notifier is tested in test_kamailio_rfc7200.py, its RFC 7339 overload control in
test_kamailio_oc.py.

    python3 tests/e2e/test_kamailio_module.py [--keep] [NAME ...]
    (make kamailio-module-test builds target/kamailio/loadctl.so first; kamailio/build.sh
    already gated it with `kamailio -c`)

Kamailio runs tests/e2e/kamailio/loadctl.cfg (Debian's /usr/sbin/kamailio 5.6.3, TLSF memory,
one UDP socket on loopback, jsonrpcs on a UDP datagram socket for the loadctl.* RPC commands).

- bad_policy_file: Kamailio refuses to start on an invalid policy_file and says why; so does
  `kamailio -c` (the file is checked as the configuration is parsed).
- policy_reload: loadctl.reload re-reads the policy_file: a bad file is refused, the policy in
  force stays; a good one replaces the source's policy.
- rate_accuracy: children=1; a SIPp UAC offers 3R calls/s matching a rate-R rule and R/s matching
  nothing, through Kamailio to a SIPp UAS: the UAS receives R ± 3 % of the matching calls and
  every other call.
- children4_rpc: children=4, 300 matching calls/s to a rule of R = 100: with the shared cells
  (libloadctl's lc_engine_new_shared; loadctl.stats says `shared_cells: 1`) the UAS receives one
  R ± 3 % from the four processes together. Built against a libloadctl without that ABI, limits
  are per process: the test then uses R = 25 and asserts that *each process* admits
  min(what it saw, R·t) ± 3 % (and reports R per busy process at the UAS). Then over RPC: an invalid document is refused and changes
  nothing; `rate 0` published by RPC stops the matching calls at the UAS from 1 s after the
  publish on (so every child applied it); withdraw lifts the rule (all 3R pass); every process
  that handled traffic reports it synced to the store's version.
- actions: children=1, stateful (tm), Python sockets as caller and next hop: redirect → 302 with
  the rule's Contact; drop over UDP → 503; unmatched traffic forwarded, with $lc(...) values
  written into a header; window 3 → three forwarded, 503 after (a retransmitted INVITE is
  absorbed by tm before lc_classify and not counted); the next hop's 200 releases a slot (tm
  callback) for the next call.
- window_release_children4: children=4, stateful: 24 calls one after the other through a window-2
  rule, each answered 200 by the next hop: every one is admitted, so each slot came back even
  when the 200 was read by another process than the one that admitted the INVITE — with shared
  cells completed there directly, with per-process engines (`shared_cells 0`) handed back
  through the issuer's mailbox.
- drop_over_tcp: a drop rule over TCP: lc_classify returns -3, nothing is sent, the stats
  count a drop (over UDP the same rule answers 503: `actions`).
- targets_and_exemptions: the next hop is the target entity: $du when set before lc_classify(),
  else the Request-URI's host:port (RFC 7200 §5.3.3); INVITEs to urn:service:sos(.fire) and with
  Resource-Priority ets.0 / wps.1 (two lines) pass a rule rejecting every INVITE (RFC 7200 §4.8,
  RFC 5031, RFC 4412; Resource-Priority only from a peer in priority_peers, RFC 4412 §11.3),
  with $lc(exempt_reason) and loadctl.stats exempt_emergency / exempt_priority; without
  priority_peers ets.0 is filtered; emergency_exempt 0 and priority_namespaces "" turn them off;
  an invalid priority_namespaces stops Kamailio.
- kemi: the same functions through KEMI (KSR.loadctl.lc_classify / lc_reply, KSR.pv.get of
  $lc(...)) from a JavaScript route (app_jsdt, kamailio/loadctl-kemi.cfg + loadctl-kemi.js).
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from admission import admission_stats, count_in  # noqa: E402
from checks import Checks, suite_main  # noqa: E402
from kamailio_proc import CFG, Kamailio, build, check_calls, offered_load, start_uas, suite_label  # noqa: E402
from policy_docs import document, rate_rule, rule, split  # noqa: E402
from ports import free_udp_port  # noqa: E402
from processes import HarnessError, Run  # noqa: E402
from sip_sockets import Notifier, Peer, first_lines  # noqa: E402
from sipp import SippOutputs  # noqa: E402

ROOT = HERE.parents[1]
TOLERANCE = 0.03


def kamailio_statistics(kam: "Kamailio", which: str) -> dict:
    """kex's `stats.get_statistics WHICH` ("group:" or "all"): {name: value} for that group."""
    out = {}
    for line in kam.rpc("stats.get_statistics", which).get("result", []):
        name, _, value = line.partition(" = ")
        out[name.split(":", 1)[-1].strip()] = int(value)
    return out


def per_process(stats: dict) -> dict:
    return {p["pid"]: p for p in stats["result"]["per_process"]}


# ---------------------------------------------------------------------------------------------
# SIP over plain sockets


def requests(msgs, callee: str = "", method="INVITE") -> dict:
    """Requests (to `callee` if given) by Call-ID: tm retransmits to a next hop that does not
    answer at once, so one request may arrive several times."""
    out = {}
    for m in msgs:
        if m.startswith(f"{method} sip:{callee}"):
            for line in m.split("\r\n"):
                if line.lower().startswith("call-id:"):
                    out.setdefault(line.split(":", 1)[1].strip(), m)
    return out


def answer(req: str, status: str = "200 OK") -> bytes:
    head = req.split("\r\n\r\n", 1)[0].split("\r\n")
    keep = [h for h in head[1:] if h.split(":", 1)[0].lower() in ("via", "from", "to", "call-id", "cseq")]
    keep = [h + ";tag=hop" if h.lower().startswith("to:") else h for h in keep]
    return ("SIP/2.0 " + status + "\r\n" + "\r\n".join(keep) + "\r\nContent-Length: 0\r\n\r\n").encode()


# ---------------------------------------------------------------------------------------------
# tests


def bad_policy_file(run: Run) -> Checks:
    c = Checks("bad_policy_file: Kamailio refuses to start on an invalid policy_file")
    policy = run.path("bad.xml")
    policy.write_text(document(0, "full", rate_rule(-3)))
    proc = run.start("kamailio", [
        build().binary, "-f", CFG, "-DD", "-E", "-n", 1, "-l", f"udp:127.0.0.1:{free_udp_port()}", "-Y", run.path("rundir", "x").parent,
        *build().defines(), "-A", f'POLICY="{policy}"', "-A", f'RPC_SOCKET="udp:127.0.0.1:{free_udp_port()}"',
    ])
    try:
        code = proc.wait(timeout=10)
    except HarnessError:
        code = None
    log = proc.stderr_path.read_text(errors="replace")
    c.that(code not in (None, 0), f"kamailio exited with status {code}")
    line = next((l for l in log.splitlines() if "policy_file" in l and "refused" in l), "")
    c.that('"-3" is negative' in line, f"the log says why: {line.strip()[:200]!r}")
    # `kamailio -c` checks a configuration without starting the modules: the policy_file is
    # read and checked as the configuration is parsed, so the check refuses it too
    check = run.start("kamailio-check", [build().binary, "-c", "-f", CFG, *build().defines(), "-A", f'POLICY="{policy}"'])
    code = check.wait(timeout=10)
    out = check.stderr_path.read_text(errors="replace") + check.stdout_path.read_text(errors="replace")
    c.that(code != 0 and '"-3" is negative' in out and "config file ok" not in out,
           f"kamailio -c refuses it too (status {code}, says why: {'-3' in out})")
    good = run.path("good.xml")
    good.write_text(document(0, "full", rate_rule(3)))
    check = run.start("kamailio-check-good", [build().binary, "-c", "-f", CFG, *build().defines(), "-A", f'POLICY="{good}"'])
    code = check.wait(timeout=10)
    out = check.stderr_path.read_text(errors="replace") + check.stdout_path.read_text(errors="replace")
    c.that(code == 0 and "config file ok" in out, f"kamailio -c accepts a valid one (status {code})")
    return c


def policy_reload(run: Run) -> Checks:
    """loadctl.reload reads the policy_file again: a bad file is refused and the policy stays, a
    good one replaces the source's policy (also one loadctl.publish put under that source)."""
    c = Checks("policy_reload: loadctl.reload re-reads the policy_file")
    peer, hop = Peer(), Peer()
    kam = Kamailio(run, "kamailio", document(0, "full", rule("reload", "+1555", "<lc:rate>0</lc:rate>")), 2, hop.port)
    path = run.path("kamailio-policy.xml")

    def first_line_of_call(n: int) -> str:
        peer.sock.sendto(peer.invite(kam.port, "+15550001", n), ("127.0.0.1", kam.port))
        time.sleep(0.3)
        got = first_lines(peer.drain(0.2))
        fwd = hop.drain(0.1)
        return "forwarded" if fwd else (got[0] if got else "nothing")

    c.that(first_line_of_call(1) == "SIP/2.0 503 Service Unavailable", "rate 0 from the policy_file: 503")
    path.write_text(document(1, "full", rule("reload", "+1555", "<lc:rate>-1</lc:rate>")))
    bad = kam.rpc("loadctl.reload")
    c.that("error" in bad and "negative" in bad["error"]["message"], f"a bad file is refused: {bad.get('error')}")
    c.that(first_line_of_call(2) == "SIP/2.0 503 Service Unavailable", "the policy in force stays: 503")
    kam.rpc("loadctl.publish", document(0, "full", rule("rpc", "+1999", "<lc:rate>0</lc:rate>")))
    path.write_text(document(2, "full", rule("reload", "+1555", "<lc:rate>1000</lc:rate>")))
    good = kam.rpc("loadctl.reload")
    c.that("result" in good, f"the edited file is published: {good.get('result') or good.get('error')}")
    c.that(first_line_of_call(3) == "forwarded", "its rate 1000 admits the call")
    listed = kam.rpc("loadctl.rules")["result"]
    rules = [r["rule"] for r in listed["rules"]]
    c.that(rules == ["reload"], f"it replaced the source's policy, the one published by RPC under it too: {rules}")
    # the file's <ruleset version="2"> and <rate>1000</rate> (RFC 7200 §5), not the store's counter
    row = (listed["rules"] or [{}])[0]
    c.that(row.get("version") == 2 and row.get("limit_kind") == "rate" and row.get("limit") == 1000.0 and row.get("alt_action") == "reject",
           f"loadctl.rules shows the reloaded document's version and limit: version {row.get('version')}, {row.get('limit_kind')} {row.get('limit')}, "
           f"else {row.get('alt_action')}")
    c.that([(x["source"], x.get("version")) for x in listed["sources"]] == [("local", 2)], f"loadctl.rules sources: {listed['sources']}")
    peer.close()
    hop.close()
    return c


def rate_accuracy(run: Run) -> Checks:
    c = Checks("rate_accuracy: children=1, 3R offered to a rate-R rule, R = 100")
    r, seconds = 100.0, 12.0
    uas, uas_ports = start_uas(run, seconds)
    kam = Kamailio(run, "kamailio", document(0, "full", rate_rule(r)), 1, uas_ports.sip)
    t_start = time.time()
    uac = offered_load(run, kam, uas_ports, r, seconds)
    uac.wait(timeout=seconds + 60)
    run.stop(uas)
    matching, other = split(SippOutputs(uas.cwd).arrivals())
    first = matching[0] if matching else t_start
    c.rate("matching calls at the UAS, after 2 s", matching, first + 2.0, first + seconds - 0.5, r)
    st = admission_stats(matching, first + 2.0, first + seconds - 0.5, r)
    c.that(st["max_1s"] <= r * 1.1 + 1, f"most admitted in any sliding second: {st['max_1s']} (GCRA bound r·(1 s + τ) + 1 = {r * 1.1 + 1:g})")
    c.that(st["max_100ms"] <= 0.2 * r, f"spread: most in any 100 ms {st['max_100ms']} (even: {r / 10:g})")
    check_calls(c, uac, uas, other)
    stats = kam.rpc("loadctl.stats")["result"]
    rule_row = next((x for x in stats["rules"] if x["rule"] == "prefix-1555"), {})
    c.that(rule_row.get("accepted") == len(matching),
           f"loadctl.stats: rule accepted {rule_row.get('accepted')} = {len(matching)} at the UAS; rejected {rule_row.get('rejected')}")
    return c


def children4_rpc(run: Run) -> Checks:
    c = Checks("children4_rpc: children=4; one limit across processes (shared cells); RPC publish/withdraw on every child")
    # 300 matching calls/s (3 × 100). Per-process engines: R = 25, so each of the 4 processes
    # sees ~75/s, more than R, and its own limit binds (4R in total at the UAS). Shared cells
    # (the module built against a libloadctl with lc_engine_new_shared): R = 100, one limit.
    offered_r, seconds = 100.0, 17.0
    uas, uas_ports = start_uas(run, seconds)
    kam = Kamailio(run, "kamailio", document(0, "full", rate_rule(25.0)), 4, uas_ports.sip)
    shared = bool(kam.rpc("loadctl.stats")["result"].get("shared_cells"))
    has_abi = "lc_engine_new_shared" in (ROOT / "include" / "loadctl.h").read_text()
    c.that(shared == has_abi, f"shared cells {'on' if shared else 'off'}, as include/loadctl.h {'has' if has_abi else 'lacks'} the ABI")
    r = 100.0 if shared else 25.0
    if shared:
        c.that("result" in kam.rpc("loadctl.publish", document(0, "full", rate_rule(r))), "shared cells: R = 100 published")
    uac = offered_load(run, kam, uas_ports, offered_r, seconds)
    time.sleep(2.0)
    s0, t0 = per_process(kam.rpc("loadctl.stats")), time.time()
    time.sleep(5.0)
    s1, t1 = per_process(kam.rpc("loadctl.stats")), time.time()
    span = t1 - t0
    active = 0
    seen_by = {}
    for pid, p1 in sorted(s1.items()):
        p0 = s0.get(pid, {"matched": 0, "accepted": 0})
        seen, admitted = p1["matched"] - p0["matched"], p1["accepted"] - p0["accepted"]
        seen_by[pid] = (seen, admitted)
        if seen == 0 or shared:
            continue
        active += 1
        # each process on its own: admitted min(seen, R·t) ± 3 % (+ the GCRA burst r·τ + 1)
        cap = r * span
        expected = min(seen, cap)
        ok = abs(admitted - expected) <= TOLERANCE * expected + r * 0.1 + 1
        c.that(ok, f"process {pid} (rank {p1['rank']}): saw {seen} matching in {span:.2f} s, admitted {admitted}, expected min(seen, R·t = {cap:.0f}) = {expected:.0f} ± 3 %")
    if shared:
        total = sum(a for _, a in seen_by.values())
        c.that(abs(total / span / r - 1) <= TOLERANCE, f"shared cells: all processes together admitted {total / span:.1f}/s, R = {r:g} ± 3 % ({seen_by})")
    else:
        c.that(active >= 2, f"the kernel spread the load over {active} of 4 processes")
        bound = [p for p in s1 if s1[p]["matched"] - s0.get(p, {"matched": 0})["matched"] > 1.1 * r * span]
        c.that(len(bound) >= 2, f"{len(bound)} processes saw more than R·t, so their own limit bound")
    # An invalid document over RPC is refused and changes nothing.
    version = kam.rpc("loadctl.stats")["result"]["store_version"]
    bad = kam.rpc("loadctl.publish", document(1, "full", rate_rule(-1)))
    c.that("error" in bad and "negative" in bad["error"]["message"], f"invalid document refused: {bad.get('error')}")
    c.that(kam.rpc("loadctl.stats")["result"]["store_version"] == version, "the store's version did not move")
    time.sleep(1.0)
    # rate 0: no child may admit a matching call from 1 s after the publish on.
    zero = kam.rpc("loadctl.publish", document(1, "full", rate_rule(0)))
    t_zero = time.time()
    c.that("result" in zero, f"rate 0 published: {zero.get('result') or zero.get('error')}")
    time.sleep(3.0)
    # The withdraw can take effect as soon as it is sent: a child may admit and forward a call
    # (and the UAS log it) before this process has read the RPC's answer, so rate 0 is judged
    # up to the moment the withdraw was sent, and "all pass" from 1 s after its answer.
    t_withdraw_sent = time.time()
    w = kam.rpc("loadctl.withdraw")
    t_withdraw = time.time()
    c.that("result" in w, f"withdrawn: {w.get('result') or w.get('error')}")
    uac.wait(timeout=seconds + 60)
    t_end = time.time()
    stats = kam.rpc("loadctl.stats")["result"]
    run.stop(uas)
    matching, other = split(SippOutputs(uas.cwd).arrivals())
    n_after = count_in(matching, t_zero + 1.0, t_withdraw_sent)
    n_during = count_in(matching, t_zero, t_zero + 1.0)
    n_rpc = count_in(matching, t_withdraw_sent, t_withdraw)
    c.that(n_after == 0, f"after rate 0 by RPC: {n_after} matching calls reached the UAS from 1 s after the publish until the withdraw was sent "
                         f"({n_during} in its first second; {n_rpc} while the withdraw was in flight, {1000 * (t_withdraw - t_withdraw_sent):.1f} ms)")
    if shared:
        c.rate("shared cells: matching calls at the UAS with children=4", matching, t0, t1, r)
    else:
        c.rate("before the publish, at the UAS: what the processes admitted together (4 per-process limits)",
               matching, t0, t1, sum(a for _, a in seen_by.values()) / span, tolerance=0.05)
    c.all_pass("after withdraw: every matching call passes", matching, other, t_withdraw + 1.0, t_end - 1.0)
    synced = [p for p in stats["per_process"] if p["total"] > 0]
    c.that(synced and all(p["synced"] for p in synced), f"every process that handled traffic synced to store version {stats['store_version']}: {[(p['pid'], p['store_version']) for p in synced]}")
    # the same counters as Kamailio statistics (kex's stats.get_statistics), summed over the
    # processes: equal to loadctl.stats's totals read right after (no traffic in between)
    kstats = kamailio_statistics(kam, "loadctl:")
    pairs = [("requests", "total"), ("accepted", "accepted"), ("rejected", "rejected"), ("unmatched", "unmatched"),
             ("matched", "matched"), ("exempt", "exempt")]
    c.that(all(kstats.get(k) == stats[v] for k, v in pairs),
           "Kamailio statistics loadctl:* equal loadctl.stats's totals: "
           + ", ".join(f"{k} {kstats.get(k)} / {stats[v]}" for k, v in pairs))
    check_calls(c, uac, uas, other)
    if not shared:
        print(f"   (children=4, per-process engines: {count_in(matching, t0, t1) / span:.1f} matching calls/s reached the UAS "
              f"for a rule of R = {r:g}/s, i.e. R per busy process; one global R needs the shared-cell ABI)")
    return c


def actions(run: Run) -> Checks:
    c = Checks("actions: children=1, tm: redirect, drop, $lc(...), window released by the final response")
    policy = document(0, "full", "\n".join([
        rule("redirect", "+1777", "<lc:rate>0</lc:rate>", 'alt-action="redirect" alt-target="sip:overflow@example.net"'),
        rule("drop", "+1888", "<lc:rate>0</lc:rate>", 'alt-action="drop"'),
        rule("window", "+1444", "<lc:win>3</lc:win>"),
    ]))
    hop, client = Peer(), Peer()
    kam = Kamailio(run, "kamailio", policy, 1, hop.port, stateful=True, annotate=True)
    addr = ("127.0.0.1", kam.port)
    try:
        client.sock.sendto(client.invite(kam.port, "+17770000000", 1), addr)
        replies = [m for m in client.drain() if not m.startswith("SIP/2.0 100")]
        c.that(first_lines(replies) == ["SIP/2.0 302 Moved Temporarily"], f"redirect: {first_lines(replies)}")
        c.that(bool(replies) and "Contact: <sip:overflow@example.net>" in replies[0], "redirect: Contact is the rule's alt-target")
        client.sock.sendto(client.invite(kam.port, "+18880000000", 1), addr)
        replies = [m for m in client.drain() if not m.startswith("SIP/2.0 100")]
        c.that(first_lines(replies) == ["SIP/2.0 503 Service Unavailable"], f"drop over UDP: {first_lines(replies)}")
        c.that(requests(hop.drain()) == {}, "nothing reached the next hop for redirected or dropped calls")
        client.sock.sendto(client.invite(kam.port, "+19990000000", 1), addr)
        got = list(requests(hop.drain()).values())
        c.that(len(got) == 1, f"unmatched: forwarded ({len(got)})")
        c.that(bool(got) and "X-LC: accept <null> 0 <null> 0" in got[0], f"$lc(...) of an unmatched request: {[l for l in (got[0] if got else '').splitlines() if l.startswith('X-LC')]}")
        window_invites = [client.invite(kam.port, "+14440000000", n) for n in range(5)]
        for msg in window_invites:
            client.sock.sendto(msg, addr)
        client.sock.sendto(window_invites[0], addr)  # a retransmission: tm absorbs it, not classified
        held = list(requests(hop.drain(0.5), "+1444").values())
        rejected = [m for m in client.drain(0.3) if m.startswith("SIP/2.0 503")]
        c.that(len(held) == 3 and len(rejected) == 2, f"window 3: {len(held)} forwarded, {len(rejected)} answered 503 of 5")
        c.that(bool(held) and "X-LC: accept window 0 local 1" in held[0], f"$lc(verdict) $lc(rule) $lc(status) $lc(source) $lc(ticket): {[l for l in (held[0] if held else '').splitlines() if l.startswith('X-LC')]}")
        if held:
            hop.sock.sendto(answer(held[0]), addr)
            back = client.drain(0.5)
            c.that(any(m.startswith("SIP/2.0 200") for m in back), "window: the 200 went back to the caller")
            client.sock.sendto(client.invite(kam.port, "+14440000000", 99), addr)
            later = [k for k in requests(hop.drain(0.5), "+1444") if k.startswith("+14440000000-99-")]
            c.that(len(later) == 1, "window: the slot the 200 released admitted the next call")
        stats = kam.rpc("loadctl.stats")["result"]
        rows = {x["rule"]: x for x in stats["rules"]}
        c.that(rows.get("window", {}).get("matched") == 6 and rows.get("window", {}).get("accepted") == 4
               and rows.get("redirect", {}).get("redirected") == 1,
               f"loadctl.stats per rule: {[(k, v['matched'], v['accepted'], v['rejected'], v['redirected']) for k, v in rows.items()]}")
        rules = kam.rpc("loadctl.rules")["result"]
        c.that([x["rule"] for x in rules["rules"]] == ["redirect", "drop", "window"], f"loadctl.rules: {rules['rules']}")
        # what the document says each rule does (RFC 7200 §5.3: <rate>, <win>, alt-action, alt-target)
        got = [(x["rule"], x["limit_kind"], x["limit"], x["alt_action"], x.get("alt_targets"), x["version"]) for x in rules["rules"]]
        want = [("redirect", "rate", 0.0, "redirect", "sip:overflow@example.net", 0), ("drop", "rate", 0.0, "drop", None, 0),
                ("window", "window", 3.0, "reject", None, 0)]
        c.that(got == want, f"loadctl.rules: limit, excess and document version per rule: {got}")
        c.that(all(x["text"].startswith(x["rule"] + ":") for x in rules["rules"]), f"loadctl.rules: each rule on one line: {[x['text'] for x in rules['rules']]}")
        c.that([(x["source"], x.get("version")) for x in rules["sources"]] == [("local", 0)], f"loadctl.rules sources: {rules['sources']}")
    finally:
        hop.close()
        client.close()
    return c


def window_release_children4(run: Run) -> Checks:
    c = Checks("window_release_children4: children=4, tm; 24 sequential calls through a window of 2, both modes")
    for per_process in (False, True):
        mode = "per-process engines" if per_process else "shared cells"
        hop, client = Peer(), Peer()
        kam = Kamailio(run, f"kamailio-{'pp' if per_process else 'sc'}", document(0, "full", rule("window", "+1444", "<lc:win>2</lc:win>")), 4,
                       hop.port, stateful=True, per_process=per_process)
        addr = ("127.0.0.1", kam.port)
        admitted = 0
        try:
            shared = bool(kam.rpc("loadctl.stats")["result"]["shared_cells"])
            if not per_process and not shared:
                c.that(True, "shared cells: not in this build of libloadctl (skipped)")
                continue
            for n in range(24):
                client.sock.sendto(client.invite(kam.port, "+14440000000", n), addr)
                got = list(requests(hop.drain(0.15)).values())
                if got:
                    admitted += 1
                    hop.sock.sendto(answer(got[0]), addr)
                client.drain(0.1)
            c.that(admitted == 24, f"{mode}: {admitted} of 24 admitted (a lost slot per call would stop them after 2 per window)")
            stats = kam.rpc("loadctl.stats")["result"]
            procs = [(p["pid"], p["total"], p["tickets_issued"], p["tickets_completed"], p["tickets_forwarded"]) for p in stats["per_process"]
                     if p["total"] or p["tickets_completed"] or p["tickets_forwarded"]]
            forwarded = sum(p["tickets_forwarded"] for p in stats["per_process"])
            c.that(len(procs) >= 2, f"{mode}: processes (pid, requests, tickets issued, completed, handed to the issuer): {procs}")
            if per_process:
                c.that(forwarded > 0, f"{mode}: {forwarded} tickets went back to their issuer through its mailbox (the 200 was read by another process)")
            else:
                c.that(forwarded == 0 and stats["tickets_open"] == 0,
                       f"{mode}: every ticket completed where its 200 was read ({forwarded} handed over, {stats['tickets_open']} open)")
        finally:
            hop.close()
            client.close()
            run.stop(kam.proc)
    return c


def free_tcp_port() -> int:
    """A port free for UDP (harness) that is also bindable for TCP on loopback."""
    while True:
        port = free_udp_port()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()


def drop_over_tcp(run: Run) -> Checks:
    c = Checks("drop_over_tcp: a drop rule over TCP sends nothing (lc_classify -3); over UDP 503")
    policy = document(0, "full", rule("drop", "+1888", "<lc:rate>0</lc:rate>", 'alt-action="drop"'))
    hop = Peer()
    tcp_port = free_tcp_port()
    kam = Kamailio(run, "kamailio", policy, 1, hop.port, tcp_port=tcp_port)
    conn = socket.create_connection(("127.0.0.1", tcp_port), timeout=2.0)
    try:
        port = conn.getsockname()[1]
        msg = (
            f"INVITE sip:+18880000000@127.0.0.1:{tcp_port};transport=tcp SIP/2.0\r\n"
            f"Via: SIP/2.0/TCP 127.0.0.1:{port};branch=z9hG4bK-tcp-{time.monotonic_ns()}\r\n"
            f"From: <sip:alice@127.0.0.1:{port};transport=tcp>;tag=t1\r\nTo: <sip:+18880000000@127.0.0.1;user=phone>\r\n"
            f"Call-ID: tcp-{time.monotonic_ns()}@km\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        )
        conn.sendall(msg.encode())
        conn.settimeout(1.0)
        try:
            got = conn.recv(65535).decode(errors="replace")
        except socket.timeout:
            got = ""
        c.that(got == "", f"no answer over TCP within 1 s ({got.splitlines()[:1]})")
        rows = {x["rule"]: x for x in kam.rpc("loadctl.stats")["result"]["rules"]}
        c.that(rows.get("drop", {}).get("dropped") == 1, f"counted as dropped: {rows.get('drop')}")
        c.that(requests(hop.drain(0.2)) == {}, "nothing reached the next hop")
    finally:
        conn.close()
        hop.close()
    return c


def kemi(run: Run) -> Checks:
    c = Checks("kemi: KSR.loadctl.lc_classify / lc_reply / lc_handle_notify from a JavaScript route (app_jsdt)")
    policy = document(0, "full", "\n".join([
        rule("redirect", "+1777", "<lc:rate>0</lc:rate>", 'alt-action="redirect" alt-target="sip:overflow@example.net"'),
        rule("hotline", "+1555", "<lc:rate>1000</lc:rate>"),
    ]))
    hop, client, notifier = Peer(), Peer(), Notifier()
    kam = Kamailio(run, "kamailio", policy, 1, hop.port, kemi=True, subscribe=[notifier.uri])
    addr = ("127.0.0.1", kam.port)
    nh = f"X-Next-Hop: sip:127.0.0.1:{hop.port}\r\n"
    try:
        sub, _ = notifier.wait_request("SUBSCRIBE", 5.0)
        notifier.answer(sub, addr)
        branch = notifier.notify(sub, addr, document(0, "full", rate_rule(0, "notified", "+1999")))
        reply = notifier.wait_response(branch)
        c.that(reply.startswith("SIP/2.0 200"), f"KSR.loadctl.lc_handle_notify(): NOTIFY answered {reply.splitlines()[:1]}")
        time.sleep(0.2)
        client.sock.sendto(client.invite(kam.port, "+19990000000", 3, nh), addr)
        c.that(first_lines(client.drain()) == ["SIP/2.0 503 Service Unavailable"], "the notified rule (rate 0) is enforced")
        client.sock.sendto(client.invite(kam.port, "+17770000000", 1, nh), addr)
        replies = client.drain()
        c.that(first_lines(replies) == ["SIP/2.0 302 Moved Temporarily"], f"redirect via KSR.loadctl.lc_reply(): {first_lines(replies)}")
        c.that(bool(replies) and "Contact: <sip:overflow@example.net>" in replies[0], "redirect: Contact is the rule's alt-target")
        client.sock.sendto(client.invite(kam.port, "+15550000000", 2, nh), addr)
        got = list(requests(hop.drain(), "+1555").values())
        c.that(len(got) == 1 and "X-LC: accept hotline 1" in got[0],
               f"accepted and forwarded, KSR.pv.get('$lc(...)'): {[l for l in (got[0] if got else '').splitlines() if l.startswith('X-LC')]}")
    finally:
        hop.close()
        client.close()
        notifier.close()
    return c


# ---------------------------------------------------------------------------------------------
# targets and exemptions


def every_invite_policy(*extra_rules: str) -> str:
    """`extra_rules`, then a rule rejecting every INVITE (rate 0)."""
    every = ('<rule id="every-invite"><conditions><method>INVITE</method></conditions>'
             "<actions><lc:accept><lc:rate>0</lc:rate></lc:accept></actions></rule>")
    return document(0, "full", "\n".join([*extra_rules, every]))


def targeted_rule(rule_id: str, prefix: str, target: str, alt_target: str) -> str:
    return (
        f'<rule id="{rule_id}"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix="{prefix}"/>'
        f"</lc:to></lc:sip></lc:call-identity><lc:target-sip-entity>{target}</lc:target-sip-entity></conditions>"
        f'<actions><lc:accept alt-action="redirect" alt-target="{alt_target}"><lc:rate>0</lc:rate></lc:accept></actions></rule>'
    )


def pai_rule(rule_id: str, prefix: str, alt_target: str) -> str:
    """A rule on a P-Asserted-Identity number prefix that redirects (302) every match."""
    return (
        f'<rule id="{rule_id}"><conditions><lc:call-identity><lc:sip><lc:p-asserted-identity><many-tel prefix="{prefix}"/>'
        f"</lc:p-asserted-identity></lc:sip></lc:call-identity></conditions>"
        f'<actions><lc:accept alt-action="redirect" alt-target="{alt_target}"><lc:rate>0</lc:rate></lc:accept></actions></rule>'
    )


def raw_invite(peer: Peer, kam_port: int, ruri: str, to: str, n: int, extra: str = "") -> bytes:
    return (
        f"INVITE {ruri} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:{peer.port};branch=z9hG4bK-kx-{n}-{time.monotonic_ns()}\r\n"
        f"From: <sip:alice@127.0.0.1:{peer.port}>;tag=a{n}\r\nTo: {to}\r\n"
        f"Call-ID: kx-{n}-{time.monotonic_ns()}@km\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\n{extra}Content-Length: 0\r\n\r\n"
    ).encode()


# RFC 5031 §4.2 (urn:service:sos and its sub-services) and RFC 4412 §3.1 (namespace.priority;
# RFC 3261 §7.3.1: two lines are one list).
EXEMPT_CALLS = [
    ("urn:service:sos", "<urn:service:sos>", "", "emergency", "urn:service:sos"),
    ("urn:service:sos.fire", "<urn:service:sos.fire>", "", "emergency", "urn:service:sos.fire"),
    ("sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", "Resource-Priority: ets.0\r\n", "resource-priority", "Resource-Priority: ets.0"),
    ("sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", "Resource-Priority: dsn.flash\r\nResource-Priority: wps.1\r\n", "resource-priority",
     "Resource-Priority: dsn.flash + Resource-Priority: wps.1 (two lines)"),
]


def targets_and_exemptions(run: Run) -> Checks:
    """The next hop ($du, else the Request-URI's host:port) is the target entity (RFC 7200
    §5.3.3); emergency and ets/wps calls pass a rule rejecting every INVITE (RFC 7200 §4.8,
    RFC 5031, RFC 4412), with $lc(exempt_reason) and loadctl.stats per reason; the modparams
    turn them off; an invalid priority_namespaces stops Kamailio."""
    c = Checks("targets_and_exemptions: next hop as target; sos and ets/wps pass; modparams")
    hop, client = Peer(), Peer()

    def send(kam: Kamailio, ruri: str, to: str, n: int, extra: str = "") -> tuple:
        client.sock.sendto(raw_invite(client, kam.port, ruri, to, n, extra), ("127.0.0.1", kam.port))
        replies = first_lines(m for m in client.drain() if not m.startswith("SIP/2.0 100"))
        got = [m for m in hop.drain() if m.startswith("INVITE ")]
        return replies, got

    def exempt_header(msgs) -> str:
        return next((l for m in msgs for l in m.split("\r\n") if l.startswith("X-LC-Exempt:")), "")

    try:
        # 1. $du set before lc_classify(): the next hop is the target.
        kam = Kamailio(run, "kamailio", None, 1, hop.port, defines=["DU_FIRST", "ANNOTATE_EXEMPT", 'PRIORITY_PEERS="127.0.0.1"'])
        policy = every_invite_policy(
            targeted_rule("to-du", "+1777", f"sip:127.0.0.1:{hop.port}", "sip:via-du@example.net"),
            targeted_rule("to-ruri-host", "+1666", f"sip:127.0.0.1:{kam.port}", "sip:via-ruri@example.net"),
        )
        c.that("result" in kam.rpc("loadctl.publish", policy), "policy published over RPC")
        replies, _ = send(kam, f"sip:+17770000000@127.0.0.1:{kam.port};user=phone", "<sip:+17770000000@127.0.0.1;user=phone>", 1)
        c.that(replies == ["SIP/2.0 302 Moved Temporarily"], f"$du set: a rule whose target-sip-entity is $du applies: {replies}")
        replies, _ = send(kam, f"sip:+16660000000@127.0.0.1:{kam.port};user=phone", "<sip:+16660000000@127.0.0.1;user=phone>", 2)
        c.that(replies == ["SIP/2.0 503 Service Unavailable"], f"$du set: a rule for the Request-URI's host does not: {replies}")
        replies, got = send(kam, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", 3)
        c.that(replies == ["SIP/2.0 503 Service Unavailable"] and got == [], f"an ordinary INVITE: 503 ({replies})")
        for n, (ruri, to, extra, reason, label) in enumerate(EXEMPT_CALLS):
            replies, got = send(kam, ruri, to, 10 + n, extra)
            c.that(replies == [] and len(got) == 1 and exempt_header(got) == f"X-LC-Exempt: 1 {reason}",
                   f"{label} is exempt: forwarded ({len(got)}), {exempt_header(got)!r}, answers {replies}")
        replies, got = send(kam, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", 20, "Resource-Priority: dsn.flash\r\n")
        c.that(replies == ["SIP/2.0 503 Service Unavailable"], f"a namespace not listed (dsn) is filtered: {replies}")
        totals = kam.rpc("loadctl.stats")["result"]
        c.that(totals.get("exempt_emergency") == 2 and totals.get("exempt_priority") == 2,
               f"loadctl.stats: exempt_emergency {totals.get('exempt_emergency')}, exempt_priority {totals.get('exempt_priority')} (2 and 2)")
        run.stop(kam.proc)
        # 2. No $du: the Request-URI's host and port are the target.
        kam = Kamailio(run, "kamailio-ruri", None, 1, hop.port)
        policy = every_invite_policy(
            targeted_rule("to-du", "+1777", f"sip:127.0.0.1:{hop.port}", "sip:via-du@example.net"),
            targeted_rule("to-ruri-host", "+1666", f"sip:127.0.0.1:{kam.port}", "sip:via-ruri@example.net"),
            pai_rule("pai-tel", "+1555", "sip:via-pai@example.net"),
        )
        c.that("result" in kam.rpc("loadctl.publish", policy), "policy published over RPC")
        # No priority_peers: no peer's Resource-Priority counts (RFC 4412 §11.3).
        replies, got = send(kam, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", 29, "Resource-Priority: ets.0\r\n")
        c.that(replies == ["SIP/2.0 503 Service Unavailable"] and got == [],
               f"no priority_peers: Resource-Priority ets.0 from 127.0.0.1 is filtered ({replies})")
        replies, _ = send(kam, f"sip:+16660000000@127.0.0.1:{kam.port};user=phone", "<sip:+16660000000@127.0.0.1;user=phone>", 30)
        c.that(replies == ["SIP/2.0 302 Moved Temporarily"], f"no $du: a rule whose target is the Request-URI's host:port applies: {replies}")
        replies, _ = send(kam, f"sip:+17770000000@127.0.0.1:{kam.port};user=phone", "<sip:+17770000000@127.0.0.1;user=phone>", 31)
        c.that(replies == ["SIP/2.0 503 Service Unavailable"], f"no $du: a rule for another entity does not: {replies}")
        # RFC 3325 §9.1 allows a sip and a tel identity, RFC 3261 §7.3.1 makes two lines one
        # list: a rule on the tel identity matches when it is on the second line.
        two_lines = "P-Asserted-Identity: <sip:alice@example.com>\r\nP-Asserted-Identity: <tel:+15550001234>\r\n"
        replies, _ = send(kam, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", 32, two_lines)
        c.that(replies == ["SIP/2.0 302 Moved Temporarily"], f"P-Asserted-Identity on two lines: the tel one on the second matches: {replies}")
        replies, _ = send(kam, "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", 33, "P-Asserted-Identity: <sip:alice@example.com>, <tel:+15550001234>\r\n")
        c.that(replies == ["SIP/2.0 302 Moved Temporarily"], f"P-Asserted-Identity as one comma list: matches too: {replies}")
        run.stop(kam.proc)
        # 3. Exemptions off.
        kam = Kamailio(run, "kamailio-off", every_invite_policy(), 1, hop.port, defines=["EMERGENCY_EXEMPT=0", 'PRIORITY_NAMESPACES=""'])
        for n, (ruri, to, extra, _, label) in enumerate(EXEMPT_CALLS):
            replies, got = send(kam, ruri, to, 40 + n, extra)
            c.that(replies == ["SIP/2.0 503 Service Unavailable"] and got == [], f"emergency_exempt 0, priority_namespaces \"\": {label} gets 503 ({replies})")
        run.stop(kam.proc)
        # 4. An invalid namespace: Kamailio does not start.
        bad = run.start("kamailio-bad", [
            build().binary, "-f", CFG, "-DD", "-E", "-n", 1, "-l", f"udp:127.0.0.1:{free_udp_port()}", "-Y", run.path("rundir-bad", "x").parent,
            *build().defines(), "-A", f'RPC_SOCKET="udp:127.0.0.1:{free_udp_port()}"', "-A", 'PRIORITY_NAMESPACES="ets.0"',
        ])
        try:
            code = bad.wait(timeout=10)
        except HarnessError:
            code = None
        log = bad.stderr_path.read_text(errors="replace")
        c.that(code not in (None, 0) and "priority_namespaces" in log, f"priority_namespaces \"ets.0\" refused at start-up (exit {code})")
    finally:
        hop.close()
        client.close()
    return c


TESTS = {
    "bad_policy_file": bad_policy_file,
    "policy_reload": policy_reload,
    "rate_accuracy": rate_accuracy,
    "children4_rpc": children4_rpc,
    "actions": actions,
    "window_release_children4": window_release_children4,
    "kemi": kemi,
    "drop_over_tcp": drop_over_tcp,
    "targets_and_exemptions": targets_and_exemptions,
}


def main() -> int:
    return suite_main(__doc__, TESTS, suite_label("kamailio module e2e"), prefix="kam-")


if __name__ == "__main__":
    sys.exit(main())
