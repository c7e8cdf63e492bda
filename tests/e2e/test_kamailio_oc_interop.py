#!/usr/bin/env python3
"""RFC 7339 between loadctl and an implementation nobody here wrote: Kamailio's own client
(6.0+: the dispatcher's overload-control algorithm 64 with ds_oc_set_attrs, the core Via parser's
$via0(oc...)), configured as Kamailio's documentation describes (tests/e2e/kamailio/
dispatcher-oc.cfg; no loadctl module in that Kamailio).

    LOADCTL_KAMAILIO_BUILD=target/kamailio/6.1.4 python3 tests/e2e/test_kamailio_oc_interop.py
    (a build of kamailio/build.sh --source with the dispatcher and corex modules; make
    kamailio-releases runs it for every KAMAILIO_E2E_SOURCES release from 6.0 on)

- dispatcher_loop: SIPp offers three times what loadctl's example server takes (examples/server:
  μ = 300 messages/s, PRSM queue of 10,000, its RFC 7339 server driven by its queue) through
  Kamailio's dispatcher, without and with the loop closed (Kamailio offering `oc`, the server
  answering with values, the reply route copying them into the destination record). Measured:
  goodput, 503s, retransmissions, failed calls, response time, and how often Kamailio took a new
  value (`dispatcher.oclist` every 100 ms).
- dispatcher_module_server: the same client in front of a second Kamailio of the same release
  running the loadctl module as the RFC 7339 server (tests/e2e/kamailio/loadctl.cfg's OC_SERVER:
  lc_oc_check() on requests, lc_oc_via() on the replies it relays upstream), fed the occupancy
  of a server of 60 calls/s; SIPp offers three times that.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from checks import Checks, run_tests  # noqa: E402
from kamailio_proc import Kamailio, KamailioBuild, feed_occupancy, jsonrpc  # noqa: E402
from oc_wire import WireCapture, carries_values, oc_sent, oc_wire_vs_sent, unquote  # noqa: E402
from overload_setups import CALLEE, CALLS_CAPACITY, MU, OFFERED, SERVER, WINDOW_S, stats_of  # noqa: E402
from policy_docs import MATCH, document  # noqa: E402
from ports import free_udp_port, wait_udp_port  # noqa: E402
from processes import HarnessError, Run  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, last_csv_row, response_ms, sipp_command, write_injection  # noqa: E402

CFG = HERE / "kamailio" / "dispatcher-oc.cfg"
BUILD: KamailioBuild = None  # set by main()


class OcList(threading.Thread):
    """Samples `dispatcher.oclist 1` every 100 ms: (time, ocrate, ocseq, octime) of the one
    destination."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port = port
        self.samples = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.1):
            try:
                res = jsonrpc(self.port, "dispatcher.oclist", 1, timeout=0.5).get("result")
            except (OSError, ValueError):
                continue
            row = res[0] if isinstance(res, list) and res else res
            if isinstance(row, dict):
                self.samples.append((time.time(), row.get("ocrate"), row.get("ocseq"),
                                     row.get("octime_sec", 0) + row.get("octime_usec", 0) / 1e6))


def start_dispatcher(run: Run, label: str, dest_port: int, loop: bool, log_oc: bool = False):
    """Kamailio's dispatcher (dispatcher-oc.cfg) in front of 127.0.0.1:`dest_port`: (process,
    SIP port, RPC port)."""
    kport, rport = free_udp_port(), free_udp_port()
    dest = f"sip:127.0.0.1:{dest_port}"
    ds_list = run.path(f"dispatcher-{label}.list")
    # ocmin=0: the record's floor for the skip rate (default 10 %), or oc=0 would still shed
    ds_list.write_text(f"1 {dest} 0 0 ocmin=0\n")
    rundir = run.path(f"kamailio-{label}", "run")
    rundir.mkdir(parents=True, exist_ok=True)
    argv = [BUILD.binary, "-f", CFG, "-DD", "-E", "-m", 512, "-n", 2, "-l", f"udp:127.0.0.1:{kport}", "-Y", rundir,
            "-A", f'MPATH="{BUILD.mpath}/"', "-A", f'DS_LIST="{ds_list}"', "-A", f'DEST="{dest}"',
            "-A", f'RPC_SOCKET="udp:127.0.0.1:{rport}"']
    if loop:
        argv += ["-A", "OC"]
    if log_oc:
        argv += ["-A", "OC_LOG"]
    kam = run.start(f"kamailio-{label}", argv)
    wait_udp_port(kport, proc=kam)
    wait_udp_port(rport, proc=kam)
    return kam, kport, rport


def dispatcher_run(run: Run, label: str, loop: bool) -> dict:
    sport, kport, rport = free_udp_port(), free_udp_port(), free_udp_port()
    flags = ["--overload-control"] if loop else []
    server = run.start(f"server-{label}", [SERVER, "--listen", f"127.0.0.1:{sport}", "--rate", MU, "--buffer", 10000, *flags])
    wait_udp_port(sport, proc=server)
    kam, kport, rport = start_dispatcher(run, label, sport, loop)
    oclist = OcList(rport)
    oclist.start()
    inf = write_injection(run.path(f"callees-{label}.csv"), [CALLEE])
    calls = int(OFFERED * WINDOW_S)
    uac = run.start(
        f"uac-{label}",
        sipp_command("uac_invite.xml", SippPorts.pick(), remote=f"127.0.0.1:{kport}", inf=inf, rate=OFFERED, calls=calls,
                     duration_ms=100, timeout_s=WINDOW_S + 45, max_concurrent=20000, logs=False),
    )
    uac.wait(timeout=WINDOW_S + 60)
    oclist.stop.set()
    oclist.join(timeout=2)
    out = invite_outcomes(SippOutputs(uac.cwd))
    st = SippOutputs(uac.cwd).stat()
    out["response_ms"] = response_ms(str(st.get("ResponseTime1(C)", "")))
    counts = sorted(uac.cwd.glob("*_counts.csv"))
    last = last_csv_row(counts[-1]) if counts else {}
    out["elapsed_s"] = response_ms(str(last.get("ElapsedTime", ""))) / 1000.0
    out["goodput"] = out["bye_200"] / max(out["elapsed_s"], 1e-9)
    run.stop(kam)
    run.stop(server)
    out["server"] = stats_of(server)
    out["oclist"] = oclist.samples
    return out


def dispatcher_loop(run: Run) -> Checks:
    c = Checks(f"dispatcher_loop: SIPp {OFFERED:.0f} calls/s → Kamailio {BUILD.version} dispatcher (RFC 7339 client) → "
               f"loadctl's example server of {MU:.0f} messages/s ({CALLS_CAPACITY:.0f} calls/s)")
    without = dispatcher_run(run, "without", False)
    with_oc = dispatcher_run(run, "with", True)
    for label, o in (("without", without), ("with", with_oc)):
        c.record(True, f"{label} the loop: goodput {o['goodput']:.1f} calls/s ({o['goodput'] / CALLS_CAPACITY:.0%} of capacity) "
                 f"over {o['elapsed_s']:.1f} s, {o['answered_200']} INVITEs answered 200, {o['rejected_503']} 503s, "
                 f"{o['invite_retransmissions']} INVITE retransmissions, {o['failed_calls']} failed calls of {o['invites']}, "
                 f"mean response {o['response_ms']:.0f} ms, server dropped {o['server'].get('server_dropped_total', 0):.0f}, "
                 f"rejected {o['server'].get('server_rejected_total', 0):.0f}, served {o['server'].get('server_served_total', 0):.0f}")
    w, wo = with_oc, without
    samples = w["oclist"]
    shedding = [s for s in samples if s[1] and s[1] > 0 and s[3] > s[0]]
    seqs = sorted({s[2] for s in shedding})
    span = (shedding[-1][0] - shedding[0][0]) if len(shedding) > 1 else 0.0
    rates = [s[1] for s in shedding]
    c.record(True, f"with: Kamailio's record while it shed: {len(shedding)} of {len(samples)} samples, ocrate "
             f"{min(rates) if rates else '-'}–{max(rates) if rates else '-'} %, {len(seqs)} distinct ocseq over {span:.1f} s "
             f"({len(seqs) / max(span, 1e-9):.1f} new values/s taken)")
    # the loop closed: Kamailio took the server's values and shed on them
    c.that(len(shedding) > 0 and w["rejected_503"] > 0,
           f"with: Kamailio applied the server's oc values (ocrate > 0 while valid in {len(shedding)} samples) and answered "
           f"{w['rejected_503']} INVITEs 503")
    # physics: the server finishes at most μ/3 calls a second
    c.that(w["goodput"] <= 1.05 * CALLS_CAPACITY, f"with: goodput {w['goodput']:.1f}/s ≤ capacity + 5 %")
    c.that(w["goodput"] > wo["goodput"], f"with: goodput {w['goodput']:.1f}/s above without ({wo['goodput']:.1f}/s)")
    # Kamailio answers 100 Trying at once, so SIPp does not retransmit: the overload shows as
    # tm's retransmissions the server's full buffer drops, and as calls that time out
    c.that(w["server"].get("server_dropped_total", 0) < wo["server"].get("server_dropped_total", 0),
           f"with: the server's buffer dropped {w['server'].get('server_dropped_total', 0):.0f} messages, fewer than without "
           f"({wo['server'].get('server_dropped_total', 0):.0f})")
    c.that(w["failed_calls"] <= 0.01 * w["invites"] and w["failed_calls"] < max(wo["failed_calls"], 1),
           f"with: failed calls {w['failed_calls']} ≤ 1 % of {w['invites']} and below without ({wo['failed_calls']})")
    c.that(w["answered_200"] + w["rejected_503"] >= 0.99 * w["invites"],
           f"with: every INVITE answered 200 or 503 ({w['answered_200']} + {w['rejected_503']} of {w['invites']})")
    # RFC 7339 §4.4: values "generated ... at time t and t+1 MUST have an increasing value in the
    # "oc-seq" parameter"; Kamailio keeps a value only if its (integer) ocseq is above the
    # stored one, so a server that sends a new value every period must raise the integer part
    # each time for Kamailio to follow it (the server's period is 100 ms: up to 10 a second)
    c.that(span > 0 and len(seqs) / span >= 3.0,
           f"with: Kamailio took the server's new values at {len(seqs) / max(span, 1e-9):.1f}/s while shedding "
           f"(≥ 3/s: more than one per second, so oc-seq's integer part rises with every value)")
    return c


def sl_replies(rpc_port: int) -> dict:
    """The sl module's reply counters of the Kamailio whose jsonrpcs socket is `rpc_port`
    (kex's `stats.get_statistics sl:`): {name: value}."""
    out = {}
    for line in jsonrpc(rpc_port, "stats.get_statistics", "sl:").get("result", []):
        name, _, value = line.partition(" = ")
        out[name.split(":", 1)[-1].strip()] = int(value)
    return out


def dispatcher_module_server(run: Run) -> Checks:
    capacity, offered, seconds = 60.0, 180.0, 16.0
    c = Checks(f"dispatcher_module_server: SIPp {offered:.0f} calls/s → Kamailio {BUILD.version} dispatcher (RFC 7339 client) → "
               f"Kamailio {BUILD.version} with the loadctl module as RFC 7339 server (occupancy of {capacity:.0f} calls/s) → SIPp UAS")
    uas_ports = SippPorts.pick()
    uas = run.start("uas", sipp_command("uas_invite_only.xml", uas_ports, timeout_s=seconds + 40))
    wait_udp_port(uas_ports.sip, proc=uas)
    server = Kamailio(run, "kamailio-server", document(0, "full", ""), 2, uas_ports.sip, stateful=True,
                                 defines=("OC_SERVER",))
    kam, kport, rport = start_dispatcher(run, "client", server.port, True, log_oc=True)
    capture = WireCapture(run, "capture", [server.port])
    oclist = OcList(rport)
    oclist.start()
    inf = write_injection(run.path("callees.csv"), [MATCH])
    uac = run.start("uac", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{kport}", inf=inf,
                                        rate=offered, calls=int(offered * seconds), timeout_s=seconds + 30, logs=False))
    t0, fed = feed_occupancy(uas, server.port, capacity, seconds)
    uac.wait(timeout=60)
    oclist.stop.set()
    oclist.join(timeout=2)
    capture.stop()
    ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
    run.path("occupancy.tsv").write_text("".join(f"{a - t0:.3f}\t{b - t0:.3f}\t{m:.3f}\n" for a, b, m in fed))
    out = invite_outcomes(SippOutputs(uac.cwd))
    client_sl = sl_replies(rport)
    server_sl = sl_replies(server.rpc_port)
    first = ts[0] if ts else t0
    # Physics: the loop aims at the capacity: CAPACITY ± 15 % at the UAS once it has settled.
    c.rate("INVITEs at the UAS after 4 s", ts, first + 4.0, first + seconds - 1.0, capacity, 0.15)
    samples = oclist.samples
    shedding = [s for s in samples if s[1] and s[1] > 0 and s[3] > s[0]]
    seqs = sorted({s[2] for s in shedding})
    span = (shedding[-1][0] - shedding[0][0]) if len(shedding) > 1 else 0.0
    rates = [s[1] for s in shedding]
    c.record(True, f"Kamailio's record while it shed: {len(shedding)} of {len(samples)} samples, ocrate "
             f"{min(rates) if rates else '-'}–{max(rates) if rates else '-'} %, {len(seqs)} distinct ocseq over {span:.1f} s")
    # RFC 7339 §5.2: the client reduces; the module's loss values took effect in the dispatcher
    c.that(len(shedding) > 0, f"the dispatcher applied the module's oc values (ocrate > 0 while valid in {len(shedding)} samples)")
    # §4.4 with Kamailio's integer reading of oc-seq: the module's values are taken more than
    # once a second (its law's period is 100 ms)
    c.that(span > 0 and len(seqs) / span >= 3.0,
           f"the dispatcher took new values at {len(seqs) / max(span, 1e-9):.1f}/s while shedding (≥ 3/s)")
    # Physics: of 3 × capacity offered, about 2/3 is shed (± 15 %), and by the client itself:
    # the dispatcher's own 503s (sl) are the 503s the UAC got
    shed = out["rejected_503"] / max(out["invites"], 1)
    c.that(abs(shed - 2.0 / 3.0) <= 0.15, f"503s to {out['rejected_503']} of {out['invites']} INVITEs ({shed:.0%}; 67 % ± 15 %)")
    c.that(client_sl.get("5xx_replies") == out["rejected_503"],
           f"the dispatcher sent those 503s itself ({client_sl.get('5xx_replies')} sl 5xx replies)")
    # RFC 7339 §5.10.2 sheds the requests of clients that do not take part; the dispatcher
    # offers oc in its Via, so the module rejected none of its requests
    c.that(server_sl.get("5xx_replies") == 0, f"the module's Kamailio answered no request 503 ({server_sl.get('5xx_replies')} sl 5xx replies)")
    c.that(out["failed_calls"] <= 0.01 * out["invites"], f"failed calls {out['failed_calls']} ≤ 1 % of {out['invites']}")
    wire = capture.top_via_oc(server.port, kport)
    oc_wire_vs_sent(c, "module → dispatcher", wire, oc_sent(server.log()))
    wire_agrees(c, wire, kam.stderr_path.read_text(errors="replace"))
    return c


def wire_agrees(c: Checks, wire: list, kamailio_log: str) -> None:
    """Wireshark's and Kamailio's readings of the same replies (the loadctl module's values in
    the dispatcher's Via) agree. Kamailio's `$via0(ocseq)` is the integer part of oc-seq (its
    parser reads it with str2int: core/parser/parse_via.c, parse_via_oc), so that is what it is
    compared with; the values themselves are checked against the sender's log and RFC 7339 §9
    by oc_wire.oc_wire_vs_sent."""
    read = {}
    for line in kamailio_log.splitlines():
        _, sep, rest = line.partition("oc-read|")
        if sep:
            f = rest.split("|")
            if len(f) == 7:
                read[(f[0], f[1], int(f[2]))] = tuple(unquote(v) for v in f[3:])
    valued = [w for w in wire if carries_values(w)]
    both = [(w, read.get((w["call_id"], w["cseq"], w["status"]))) for w in valued]
    seen = [(w, k) for w, k in both if k is not None]
    c.that(len(valued) > 100 and len(seen) >= 0.99 * len(valued),
           f"tshark decoded oc values in {len(valued)} replies to the dispatcher; Kamailio logged its reading of {len(seen)} of them")
    def tshark_reading(w):
        seq = unquote(w["oc_seq"]) or ""
        return (unquote(w["oc_val"]), unquote(w["oc_validity"]), seq.split(".")[0] or None, unquote(w["oc_algo"]))
    differ = [(w, k) for w, k in seen if tshark_reading(w) != k]
    c.that(not differ, f"tshark and Kamailio read the same oc, oc-validity, oc-seq (integer part) and oc-algo in every one of them "
           f"({len(differ)} differ{': ' + repr(differ[:3]) if differ else ''})")
    algos = {unquote(w["oc_algo"]) for w in valued}
    c.that(algos == {"loss"}, f"the module selected the algorithm the dispatcher offered, loss: {sorted(a or '' for a in algos)}")


TESTS = {
    "dispatcher_loop": dispatcher_loop,
    "dispatcher_module_server": dispatcher_module_server,
}


def main() -> int:
    global BUILD
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep every run directory")
    ap.add_argument("names", nargs="*", help=f"tests to run (default all): {', '.join(TESTS)}")
    args = ap.parse_args()
    try:
        BUILD = KamailioBuild()
    except HarnessError as e:
        print(e, file=sys.stderr)
        return 2
    if BUILD.major_minor < (6, 0) or not (Path(BUILD.mpath) / "dispatcher.so").exists():
        print(f"kamailio oc interop: needs a Kamailio 6.0 or later with the dispatcher and corex modules "
              f"(this build: {BUILD.label}); build one with kamailio/build.sh --source", file=sys.stderr)
        return 2
    print(f"kamailio oc interop: {BUILD.label}")
    return run_tests(TESTS, args.names, args.keep, f"kamailio oc interop (Kamailio {BUILD.version})", prefix="kamoc-")


if __name__ == "__main__":
    sys.exit(main())
