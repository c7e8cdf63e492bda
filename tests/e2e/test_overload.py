#!/usr/bin/env python3
"""End-to-end tests of feedback overload control (RFC 7339 loss-based, RFC 7415 rate-based)
with real processes over UDP on loopback.

    python3 tests/e2e/test_overload.py [--keep] [NAME ...]      (make e2e builds what it needs)

- loop_goodput: SIPp UAC offers three times what a capacity-limited server can take, through the
  edge, to the example server (examples/server/: μ messages/s from a PRSM queue of 10,000).
  Without overload control the server's queue grows, its answers come seconds late and clients
  retransmit; with `--overload-control` on both (the edge an RFC 7339/7415 client, the server an
  RFC 7339/7415 server driven by its queue), the edge sheds the excess with 503s and the server
  answers what it can take in time. Measured: goodput (calls completed: INVITE answered 200
  within SIPp's retransmission timers, ACK, BYE answered 200; per second SIPp ran), 503s,
  retransmissions, failed calls, response time.
- edge_as_server: the edge as an RFC 7339 server on its own busy share (an occupancy target far
  below its cost, so it is in overload): an RFC 7339 edge in front of it gets rate values in the
  Via of the responses and sheds on them; a plain SIPp UAC gets 503s from it (§5.10.2).
- uas_loss_feedback: the edge in front of a SIPp UAS that writes `oc=50;oc-algo="loss"` into
  the top Via of its 200s (scenarios/uas_oc.xml, values from its injection file): after a
  warm-up without reduction, about half of the new INVITEs must be shed at the edge while the
  value is valid (RFC 7339 §7.2), and none once `oc-validity` has passed with no new value
  (§4.3).
"""

from __future__ import annotations

import argparse
import csv
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
from harness import Run, SippOutputs, SippPorts, free_udp_port, sipp_command, wait_udp_port  # noqa: E402
from test_edge import EDGE, LOADCTL, Checks, document, run_tests, start_edge  # noqa: E402

ROOT = HERE.parents[1]
SERVER = ROOT / "target" / "server"
CALLEE = "+15550001234"


def stats_of(proc: harness.Proc) -> dict:
    """The `name value` lines a program printed to stdout (its SIGUSR1 / exit counters)."""
    out = {}
    for line in proc.stdout_path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and not parts[0].startswith("#"):
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


def stat_rows(directory: Path) -> list:
    """Every -trace_stat row SIPp wrote (one per -fd period)."""
    p = directory / "stat.csv"
    if not p.exists():
        return []
    with open(p, newline="", errors="replace") as f:
        rows = [r for r in csv.reader(f, delimiter=";") if r]
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def response_ms(text: str) -> float:
    """A SIPp time column (`HH:MM:SS:mmmuuu`: response times, -trace_counts' ElapsedTime) in
    milliseconds."""
    try:
        h, m, s, frac = text.split(":")
        return (int(h) * 3600 + int(m) * 60 + int(s)) * 1000.0 + int(frac) / 1000.0
    except ValueError:
        return float("nan")


def pass_all_policy(run: Run) -> Path:
    """A policy with no rule: the edge forwards everything it does not shed for overload."""
    p = run.path("policy.xml")
    p.write_text(document(0, "full", ""))
    return p


# ---------------------------------------------------------------------------------------------


MU = 300.0  # messages/s the server serves: INVITE, ACK and BYE of a call, 100 calls/s
CALLS_CAPACITY = MU / 3.0
OFFERED = 3.0 * CALLS_CAPACITY
WINDOW_S = 20


def one_loop(run: Run, label: str, overload_control: bool) -> dict:
    sport, eport = free_udp_port(), free_udp_port(tcp=True)
    flags = ["--overload-control"] if overload_control else []
    log_oc = run.path(f"server-{label}", "oc-sent.log")
    server = run.start(f"server-{label}", [SERVER, "--listen", f"127.0.0.1:{sport}", "--rate", MU, "--buffer", 10000, *flags,
                                           *(["--log-oc", log_oc] if overload_control else [])])
    wait_udp_port(sport, proc=server)
    # the second reader of the values on the wire (with overload control only: without, nothing
    # carries them)
    capture = harness.WireCapture(run, f"capture-{label}", [sport]) if overload_control else None
    edge = start_edge(run, f"edge-{label}", eport, sport, "--policy", pass_all_policy(run), "--transport", "udp", *flags)
    inf = harness.write_injection(run.path(f"callees-{label}.csv"), [CALLEE])
    ports = SippPorts.pick()
    calls = int(OFFERED * WINDOW_S)
    uac = run.start(
        f"uac-{label}",
        sipp_command("uac_invite.xml", ports, remote=f"127.0.0.1:{eport}", inf=inf, rate=OFFERED, calls=calls,
                     duration_ms=100, timeout_s=WINDOW_S + 45, max_concurrent=20000, logs=False),
    )
    uac.wait(timeout=WINDOW_S + 60)
    for p in (edge, server):
        p.send_signal(signal.SIGUSR1)
    time.sleep(0.5)
    out = harness.invite_outcomes(SippOutputs(uac.cwd))
    st = SippOutputs(uac.cwd).stat()
    out["response_ms"] = response_ms(str(st.get("ResponseTime1(C)", "")))
    counts = sorted(uac.cwd.glob("*_counts.csv"))
    last = harness._last_csv_row(counts[-1]) if counts else {}
    out["elapsed_s"] = response_ms(str(last.get("ElapsedTime", ""))) / 1000.0
    out["edge"] = stats_of(edge)
    out["server"] = stats_of(server)
    run.stop(edge)
    run.stop(server)
    out["server"] = stats_of(server) or out["server"]
    if capture:
        capture.stop()
        out["wire_responses"] = capture.top_via_oc(sport, eport)
        out["wire_requests"] = capture.requests(eport, sport)
        out["wire_offers"] = capture.top_via_oc(eport, sport, requests=True)
        out["sent"] = harness.oc_sent(log_oc.read_text(errors="replace") if log_oc.exists() else "")
    return out


def loop_goodput(run: Run) -> Checks:
    """Offered 3× the server's capacity for 20 s, without and with overload control."""
    c = Checks(f"loop_goodput: SIPp {OFFERED:.0f} calls/s → edge → server of {MU:.0f} messages/s ({CALLS_CAPACITY:.0f} calls/s), PRSM")
    without = one_loop(run, "without", False)
    with_oc = one_loop(run, "with", True)
    for label, o in (("without", without), ("with", with_oc)):
        # Goodput: calls completed (INVITE answered 200 within SIPp's timers, then ACK, BYE and
        # its 200) per second SIPp ran.
        o["goodput"] = o["bye_200"] / max(o["elapsed_s"], 1e-9)
        c.record(True, f"{label} overload control: goodput {o['goodput']:.1f} calls/s ({o['goodput'] / CALLS_CAPACITY:.0%} of capacity) "
                 f"over {o['elapsed_s']:.1f} s, {o['answered_200']} INVITEs answered 200, {o['rejected_503']} 503s, "
                 f"{o['invite_retransmissions']} INVITE retransmissions, {o['failed_calls']} failed calls of {o['invites']}, "
                 f"mean response {o['response_ms']:.0f} ms, server dropped {o['server'].get('server_dropped_total', 0):.0f} "
                 f"and served {o['server'].get('server_served_total', 0):.0f}")
    # Physics: the server finishes at most μ/3 calls a second; with the loop closed it should
    # spend its capacity on calls it answers in time: at least 85 % of it (the first few
    # hundred ms pass before the first feedback), no failed call, almost no retransmission (the
    # answers come within T1).
    w = with_oc
    c.that(w["goodput"] >= 0.85 * CALLS_CAPACITY, f"with: goodput {w['goodput']:.1f}/s ≥ 85 % of {CALLS_CAPACITY:.0f}/s")
    c.that(w["goodput"] <= 1.05 * CALLS_CAPACITY, f"with: goodput {w['goodput']:.1f}/s ≤ capacity + 5 % (no more fits)")
    c.that(w["failed_calls"] <= 0.01 * w["invites"], f"with: failed calls {w['failed_calls']} ≤ 1 % of {w['invites']}")
    c.that(w["answered_200"] + w["rejected_503"] >= 0.99 * w["invites"], f"with: every INVITE answered 200 or 503 ({w['answered_200']} + {w['rejected_503']} of {w['invites']})")
    c.that(w["bye_200"] >= 0.99 * w["answered_200"], f"with: the answered calls completed, no BYE shed ({w['bye_200']} of {w['answered_200']})")
    c.that(w["invite_retransmissions"] <= 0.01 * w["invites"], f"with: INVITE retransmissions {w['invite_retransmissions']} ≤ 1 % of INVITEs")
    shed = w["edge"].get("edge_oc_shed_total", -1)
    c.that(abs(shed - w["rejected_503"]) <= 0.01 * w["invites"], f"with: the 503s are the edge's overload-control sheds ({shed:.0f} shed, {w['rejected_503']} at the UAC)")
    c.that(w["response_ms"] < 500, f"with: mean response time {w['response_ms']:.0f} ms < T1 (500 ms)")
    wire_checks(c, w)
    # Without control the offered 3× cannot be served: the queue grows by about twice the
    # capacity each second until the buffer overflows, answers come seconds late (past T1) and
    # clients retransmit.
    wo = without
    c.that(wo["response_ms"] > 1000, f"without: mean response time {wo['response_ms']:.0f} ms > 1 s (the queue grows)")
    c.that(wo["invite_retransmissions"] > 10 * max(1, w["invite_retransmissions"]),
           f"without: INVITE retransmissions {wo['invite_retransmissions']} ≫ with ({w['invite_retransmissions']})")
    c.that(wo["server"].get("server_dropped_total", 0) > 0, f"without: the server's buffer overflowed ({wo['server'].get('server_dropped_total', 0):.0f} dropped)")
    return c


def wire_checks(c: Checks, o: dict) -> None:
    """tshark's reading of the with-control run: the server's values decode to what it logged,
    and every request the edge forwarded offers overload control as the edge's README says
    (`;oc;oc-algo="loss,rate"` by default, RFC 7339 §5.1 and RFC 7415 §3.3)."""
    harness.oc_wire_vs_sent(c, "with: server → edge", o["wire_responses"], o["sent"])
    offers = o["wire_offers"]
    # the offer as the top Via's text shows it (tshark's sip.Via), read by RFC 7339 §9's grammar
    sent = [harness.via_oc(r["via"] or "") for r in offers]
    c.that(o["wire_requests"] > 100 and len(offers) == o["wire_requests"]
           and all(v["oc"] and v["oc_val"] is None and v["oc_algo"] == "loss,rate" for v in sent),
           f"with: every one of the {o['wire_requests']} requests the edge sent to the server offers `;oc;oc-algo=\"loss,rate\"` "
           f"in its top Via ({len(offers)} with oc; §5.1: the client's oc has no value)")
    # Wireshark's own fields: its SIP dissector (4.0) ends the Via entry at the comma inside the
    # quotes, so it reads oc-algo as "loss (an interoperability note, not judged)
    algos = sorted({r["oc_algo"] or "" for r in offers})
    c.lines.append(f"info  tshark's sip.Via.oc_algo of those offers: {algos}")


# ---------------------------------------------------------------------------------------------

RATE = 50  # calls/s offered
WARM_CALLS = 300  # 6 s at 50/s: the edge samples its category mix over 5 s (RFC 7339 §7.2)
ON_CALLS = 250  # ~10 s at the 25/s that get through
VALIDITY_MS = 1000


def loss_feedback_through(run: Run, c: Checks, start_proxy) -> dict:
    """SIPp UAC at RATE calls/s → the proxy `start_proxy(uas_port)` starts (it returns the
    proxy's port) → a SIPp UAS answering with the phases of scenarios/uas_oc.xml; checks the
    arrival rate at the UAS in each phase. Returns the UAC's outcome counts and the phase
    times."""
    uas_ports = SippPorts.pick()
    # Warm-up: "oc=0;oc-validity=0" (§5.1: supported, not overloaded); then oc=50 with a new
    # oc-seq per answer; then answers without feedback (no `oc` parameter), so the last value
    # runs out after its validity.
    rows = [["oc", "0", "0", "1.0", "loss"]] * WARM_CALLS
    rows += [["oc", "50", str(VALIDITY_MS), f"{k + 2}.0", "loss"] for k in range(ON_CALLS)]
    rows += [["x-oc", "50", str(VALIDITY_MS), f"{ON_CALLS + 2}.0", "loss"]] * 1000
    uas_inf = harness.write_injection(run.path("uas.csv"), rows)
    uas = run.start("uas", sipp_command("uas_oc.xml", uas_ports, inf=uas_inf, timeout_s=80))
    wait_udp_port(uas_ports.sip, proc=uas)
    port = start_proxy(uas_ports.sip)
    total = 1250
    inf = harness.write_injection(run.path("callees.csv"), [CALLEE])
    uac = run.start("uac", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{port}", inf=inf, rate=RATE,
                                        calls=total, timeout_s=60))
    uac.wait(timeout=70)
    ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
    shed = [a.t for a in SippOutputs(uac.cwd).arrivals()]
    counts = SippOutputs(uac.cwd).counts()
    shed_uac = sum(n for k, n in counts.items() if k.endswith("_503_Recv"))
    c.that(len(ts) > WARM_CALLS + ON_CALLS + 100, f"{len(ts)} INVITEs reached the UAS")
    c.that(len(shed) == shed_uac, f"the UAC logged when each of its {shed_uac} 503s came back: {len(shed)}")
    if len(ts) <= WARM_CALLS + ON_CALLS + 100:
        return {"shed": shed_uac}
    on_start, on_end = ts[WARM_CALLS], ts[WARM_CALLS + ON_CALLS - 1]
    # Judged on the share of the INVITEs decided in each phase that passed, not on rates at the
    # UAS: the loss algorithm sheds a share of what is offered (RFC 7339 §7: the neighbour
    # "rejects 10% of the traffic originally destined for that server"), and a share does not
    # depend on how evenly SIPp offered the calls.
    # Nothing shed before the first oc=50 (RFC 7339 §5: "If overload controls are not currently
    # active ... the SIP client sends the SIP message to the server").
    c.passed_share("warm-up (oc=0, oc-validity=0)", ts, shed, ts[20], ts[WARM_CALLS - 20], 1.0, 0.0)
    # §7.2: every decided request is an INVITE (reducible), so oc=50 sheds half of them.
    c.passed_share("oc=50 in force", ts, shed, on_start + 0.5, on_end, 0.5, 0.5 * 0.15)
    # §4.3: once the validity passed without new values, "overload control is not in effect".
    after = on_end + VALIDITY_MS / 1000.0 + 0.3
    c.passed_share("after oc-validity", ts, shed, after, ts[-20], 1.0, 0.0)
    failed = SippOutputs(uac.cwd).stat().get("FailedCall(C)", -1)
    c.that(failed == 0, f"no UAC call failed ({failed})")
    stray = SippOutputs(uas.cwd).counts().get("0_ACK_Recv", -1)
    c.that(stray == 0, f"the ACKs to the proxy's 503s stopped at the proxy: {stray} reached the UAS")
    return {"shed": shed_uac}


def uas_loss_feedback(run: Run) -> Checks:
    c = Checks("uas_loss_feedback: a SIPp UAS answering oc=50;oc-algo=\"loss\" behind the edge")
    proxy = {}

    def start(uas_port: int) -> int:
        eport = free_udp_port(tcp=True)
        proxy["edge"] = start_edge(run, "edge", eport, uas_port, "--policy", pass_all_policy(run), "--transport", "udp", "--overload-control")
        return eport

    out = loss_feedback_through(run, c, start)
    edge = proxy["edge"]
    edge.send_signal(signal.SIGUSR1)
    time.sleep(0.5)
    edge_stats = stats_of(edge)
    shed = edge_stats.get("edge_oc_shed_total", -1)
    c.that(shed == out["shed"], f"the edge shed {shed:.0f} INVITEs and the UAC got {out['shed']} 503s")
    c.that(edge_stats.get("edge_oc_bad_feedback_total", -1) == 0, "no feedback refused")
    return c


def edge_as_server(run: Run) -> Checks:
    """The edge as an RFC 7339 server to its upstream clients, on its own busy share: edge B
    with an occupancy target far below what forwarding 100 calls/s costs it (0.005 % of a
    core), so it is in overload all along; in front of it edge A (`--overload-control`: it
    takes part) and a plain SIPp UAC (it does not), 50 calls/s each."""
    c = Checks("edge_as_server: an edge in overload (occupancy target 0.005 %) serving an RFC 7339 edge and a plain UAC")
    uas_ports = SippPorts.pick()
    uas = run.start("uas", sipp_command("uas_invite_only.xml", uas_ports, timeout_s=60))
    wait_udp_port(uas_ports.sip, proc=uas)
    bport, aport = free_udp_port(tcp=True), free_udp_port(tcp=True)
    log_b = run.path("edge-b", "oc-sent.log")
    capture = harness.WireCapture(run, "capture", [bport])
    b = start_edge(run, "edge-b", bport, uas_ports.sip, "--policy", pass_all_policy(run), "--transport", "udp", "--overload-control",
                   "--oc-occupancy-target", "0.005", "--log-oc", log_b)
    a = start_edge(run, "edge-a", aport, bport, "--policy", pass_all_policy(run), "--transport", "udp", "--overload-control")
    inf = harness.write_injection(run.path("callees.csv"), [CALLEE])
    seconds, rate = 12, 50
    uac_a = run.start("uac-a", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{aport}", inf=inf, rate=rate,
                                            calls=seconds * rate, timeout_s=40, logs=False))
    uac_b = run.start("uac-b", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{bport}", inf=inf, rate=rate,
                                            calls=seconds * rate, timeout_s=40, logs=False))
    uac_a.wait(timeout=60)
    uac_b.wait(timeout=60)
    for e in (a, b):
        e.send_signal(signal.SIGUSR1)
    time.sleep(0.5)
    sa, sb = stats_of(a), stats_of(b)
    out_a = harness.invite_outcomes(SippOutputs(uac_a.cwd))
    out_b = harness.invite_outcomes(SippOutputs(uac_b.cwd))
    # RFC 7339 §5.1 / RFC 7415 §3.3: A offers loss,rate and the server (rate preferred) selects
    # rate; its values reach A in the Via of the responses B relays (the same client key both
    # ways), and A sheds on them.
    c.that(sa.get("edge_oc_next_hop_algorithm") == 2, f"edge A's next hop selected rate (algorithm {sa.get('edge_oc_next_hop_algorithm')})")
    c.that(sa.get("edge_oc_next_hop_updates_total", 0) >= 10, f"edge A applied {sa.get('edge_oc_next_hop_updates_total', 0):.0f} updates from B")
    c.that(sb.get("edge_oc_server_overloaded") == 1, "edge B is in overload")
    c.that(out_a["rejected_503"] > 0.3 * out_a["invites"], f"edge A shed {out_a['rejected_503']} of {out_a['invites']} INVITEs itself")
    c.that(sa.get("edge_oc_shed_total", -1) == out_a["rejected_503"], f"those 503s are A's sheds ({sa.get('edge_oc_shed_total', -1):.0f})")
    # §5.10.2: the plain UAC's reducible requests get 503s from B itself.
    c.that(out_b["rejected_503"] > 0.3 * out_b["invites"], f"edge B answered 503 to {out_b['rejected_503']} of the plain UAC's {out_b['invites']} INVITEs")
    c.that(sb.get("edge_oc_rejected_total", -1) == out_b["rejected_503"], f"those 503s are B's rejections ({sb.get('edge_oc_rejected_total', -1):.0f})")
    c.that(out_a["failed_calls"] == 0 and out_b["failed_calls"] == 0, f"no call failed ({out_a['failed_calls']}, {out_b['failed_calls']})")
    capture.stop()
    harness.oc_wire_vs_sent(c, "edge B → edge A", capture.top_via_oc(bport, aport), harness.oc_sent(log_b.read_text(errors="replace")))
    return c


TESTS = {
    "uas_loss_feedback": uas_loss_feedback,
    "loop_goodput": loop_goodput,
    "edge_as_server": edge_as_server,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep every run directory (logs, traces)")
    ap.add_argument("names", nargs="*", help=f"tests to run (default all): {', '.join(TESTS)}")
    args = ap.parse_args()
    for tool in (EDGE, SERVER, LOADCTL):
        if not Path(tool).exists():
            print(f"missing {tool}: run `make e2e`, which builds it", file=sys.stderr)
            return 2
    return run_tests(TESTS, args.names, args.keep, "e2e overload control", prefix="oc-")


if __name__ == "__main__":
    sys.exit(main())
