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
- uas_loss_call_mix: whole calls (INVITE, ACK, BYE a second later) through the edge to a SIPp
  UAS answering every INVITE and BYE with `oc=50;oc-algo="loss"`: the requests reaching the UAS
  are 50 % ± 3 points fewer than those offered (ACKs and BYEs are the second category of §7.2's
  mix), and the share of INVITEs passed holds in every second (overload_setups.py).

The example server's figures (μ, the load offered at three times its capacity) and the phases of
uas_loss_feedback are in overload_setups.py, shared with the Kamailio suites that run them through
Kamailio.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from checks import Checks, suite_main  # noqa: E402
from edge_proc import EDGE, LOADCTL, start_edge  # noqa: E402
from oc_wire import WireCapture, oc_sent, oc_wire_vs_sent, via_oc  # noqa: E402
from overload_setups import CALLEE, CALLS_CAPACITY, MU, OFFERED, SERVER, WINDOW_S, loss_call_mix_through, loss_feedback_through, stats_now, stats_of  # noqa: E402
from policy_docs import document  # noqa: E402
from ports import free_udp_port, wait_udp_port  # noqa: E402
from processes import Run  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, last_csv_row, response_ms, sipp_command, write_injection  # noqa: E402


def stat_rows(directory: Path) -> list:
    """Every -trace_stat row SIPp wrote (one per -fd period)."""
    p = directory / "stat.csv"
    if not p.exists():
        return []
    with open(p, newline="", errors="replace") as f:
        rows = [r for r in csv.reader(f, delimiter=";") if r]
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def pass_all_policy(run: Run) -> Path:
    """A policy with no rule: the edge forwards everything it does not shed for overload."""
    p = run.path("policy.xml")
    p.write_text(document(0, "full", ""))
    return p


# ---------------------------------------------------------------------------------------------


def one_loop(run: Run, label: str, overload_control: bool) -> dict:
    sport, eport = free_udp_port(), free_udp_port(tcp=True)
    flags = ["--overload-control"] if overload_control else []
    log_oc = run.path(f"server-{label}", "oc-sent.log")
    server = run.start(f"server-{label}", [SERVER, "--listen", f"127.0.0.1:{sport}", "--rate", MU, "--buffer", 10000, *flags,
                                           *(["--log-oc", log_oc] if overload_control else [])])
    wait_udp_port(sport, proc=server)
    # the second reader of the values on the wire (with overload control only: without, nothing
    # carries them)
    capture = WireCapture(run, f"capture-{label}", [sport]) if overload_control else None
    edge = start_edge(run, f"edge-{label}", eport, sport, "--policy", pass_all_policy(run), "--transport", "udp", *flags)
    inf = write_injection(run.path(f"callees-{label}.csv"), [CALLEE])
    ports = SippPorts.pick()
    calls = int(OFFERED * WINDOW_S)
    uac = run.start(
        f"uac-{label}",
        sipp_command("uac_invite.xml", ports, remote=f"127.0.0.1:{eport}", inf=inf, rate=OFFERED, calls=calls,
                     duration_ms=100, timeout_s=WINDOW_S + 45, max_concurrent=20000, logs=False),
    )
    uac.wait(timeout=WINDOW_S + 60)
    edge_now, server_now = stats_now(edge), stats_now(server)
    out = invite_outcomes(SippOutputs(uac.cwd))
    st = SippOutputs(uac.cwd).stat()
    out["response_ms"] = response_ms(str(st.get("ResponseTime1(C)", "")))
    counts = sorted(uac.cwd.glob("*_counts.csv"))
    last = last_csv_row(counts[-1]) if counts else {}
    out["elapsed_s"] = response_ms(str(last.get("ElapsedTime", ""))) / 1000.0
    out["edge"] = edge_now
    out["server"] = server_now
    run.stop(edge)
    run.stop(server)
    out["server"] = stats_of(server) or out["server"]
    if capture:
        capture.stop()
        out["wire_responses"] = capture.top_via_oc(sport, eport)
        out["wire_requests"] = capture.requests(eport, sport)
        out["wire_offers"] = capture.top_via_oc(eport, sport, requests=True)
        out["sent"] = oc_sent(log_oc.read_text(errors="replace") if log_oc.exists() else "")
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
    oc_wire_vs_sent(c, "with: server → edge", o["wire_responses"], o["sent"])
    offers = o["wire_offers"]
    # the offer as the top Via's text shows it (tshark's sip.Via), read by RFC 7339 §9's grammar
    sent = [via_oc(r["via"] or "") for r in offers]
    c.that(o["wire_requests"] > 100 and len(offers) == o["wire_requests"]
           and all(v["oc"] and v["oc_val"] is None and v["oc_algo"] == "loss,rate" for v in sent),
           f"with: every one of the {o['wire_requests']} requests the edge sent to the server offers `;oc;oc-algo=\"loss,rate\"` "
           f"in its top Via ({len(offers)} with oc; §5.1: the client's oc has no value)")
    # Wireshark's own fields: its SIP dissector (4.0) ends the Via entry at the comma inside the
    # quotes, so it reads oc-algo as "loss (an interoperability note, not judged)
    algos = sorted({r["oc_algo"] or "" for r in offers})
    c.lines.append(f"info  tshark's sip.Via.oc_algo of those offers: {algos}")


# ---------------------------------------------------------------------------------------------


def behind_edge(run: Run, c: Checks, setup) -> None:
    """Plays `setup` (an overload_setups function: UAC → proxy → a UAS answering oc=50 loss) with
    the edge as the proxy, then holds the edge's counters against what the UAC saw."""
    proxy = {}

    def start(uas_port: int) -> int:
        eport = free_udp_port(tcp=True)
        proxy["edge"] = start_edge(run, "edge", eport, uas_port, "--policy", pass_all_policy(run), "--transport", "udp", "--overload-control")
        return eport

    out = setup(run, c, start)
    edge = proxy["edge"]
    edge_stats = stats_now(edge)
    shed = edge_stats.get("edge_oc_shed_total", -1)
    c.that(shed == out["shed"], f"the edge shed {shed:.0f} INVITEs and the UAC got {out['shed']} 503s")
    c.that(edge_stats.get("edge_oc_bad_feedback_total", -1) == 0, "no feedback refused")


def uas_loss_feedback(run: Run) -> Checks:
    c = Checks("uas_loss_feedback: a SIPp UAS answering oc=50;oc-algo=\"loss\" behind the edge")
    behind_edge(run, c, loss_feedback_through)
    return c


def uas_loss_call_mix(run: Run) -> Checks:
    c = Checks("uas_loss_call_mix: whole calls through the edge to a SIPp UAS answering oc=50;oc-algo=\"loss\"")
    behind_edge(run, c, loss_call_mix_through)
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
    capture = WireCapture(run, "capture", [bport])
    b = start_edge(run, "edge-b", bport, uas_ports.sip, "--policy", pass_all_policy(run), "--transport", "udp", "--overload-control",
                   "--oc-occupancy-target", "0.005", "--log-oc", log_b)
    a = start_edge(run, "edge-a", aport, bport, "--policy", pass_all_policy(run), "--transport", "udp", "--overload-control")
    inf = write_injection(run.path("callees.csv"), [CALLEE])
    seconds, rate = 12, 50
    uac_a = run.start("uac-a", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{aport}", inf=inf, rate=rate,
                                            calls=seconds * rate, timeout_s=40, logs=False))
    uac_b = run.start("uac-b", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{bport}", inf=inf, rate=rate,
                                            calls=seconds * rate, timeout_s=40, logs=False))
    uac_a.wait(timeout=60)
    uac_b.wait(timeout=60)
    sa, sb = stats_now(a), stats_now(b)
    out_a = invite_outcomes(SippOutputs(uac_a.cwd))
    out_b = invite_outcomes(SippOutputs(uac_b.cwd))
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
    oc_wire_vs_sent(c, "edge B → edge A", capture.top_via_oc(bport, aport), oc_sent(log_b.read_text(errors="replace")))
    return c


TESTS = {
    "uas_loss_feedback": uas_loss_feedback,
    "uas_loss_call_mix": uas_loss_call_mix,
    "loop_goodput": loop_goodput,
    "edge_as_server": edge_as_server,
}


def main() -> int:
    return suite_main(__doc__, TESTS, "e2e overload control", prefix="oc-", needs=(EDGE, SERVER, LOADCTL))


if __name__ == "__main__":
    sys.exit(main())
