#!/usr/bin/env python3
"""The edge on many cores under SIPp load, and the one results file of bench/many-core.sh.

The edge (target/edge) runs with `--workers W` (worker k pinned to the k-th of its cores), one
rate rule of R calls/s (GCRA, `--limit`) on callee +1555 and a SIPp UAS as its next hop. U SIPp
UACs (scenarios/uac_invite.xml over `-t un`: a socket per call, at most 5,000 open per UAC, so the
kernel's reuseport hash spreads their datagrams over the workers) each offer `--rates` calls/s
to +1555. The edge answers the calls above R 503 itself (INVITE in, 503 out, ACK in) and passes
the rest to the UAS and back (14 messages a call). Each step is one rate for `--step-s` seconds
with fresh processes; the steps stop after the first that fails (a failed call, a
retransmission, a UAC that did not finish) or in which the UACs made fewer than 90 % of the
calls/s asked (SIPp, not the edge, ran out: a higher rate would offer no more).

Per step: calls/s offered (and what the UACs achieved), calls completed (200 or 503, as the
scenario expects) and failed, retransmissions (UACs and UAS), the edge's CPU per 1,000 messages
(utime+stime and schedstat over all its threads; messages: everything the SIPp instances sent
and received, each of which crossed the edge once), the cores the edge and each SIPp used, the
busiest edge thread, the kernel's drops at the edge's and the UAS's sockets, and
`edge_worker_datagrams_total{worker}` from the edge's metrics endpoint. The UAS answers from one
address and port to one, so the kernel gives all its datagrams to one worker: 4 of the 7 an
admitted call brings the edge land there, whatever W is (edge/README.md, "Workers").

Cores (this process's affinity): with at least W + 5 of them the edge gets the first W, the UAS
the next and the UACs the rest, at least 4 ("dedicated"). With fewer, so that the UACs are still
several, the UAS takes the last core and one UAC for every two cores the ones below it, the
edge's among them ("shared"), and the output says so: the edge's pinned workers then compete
with SIPp for their cores, so a failed step may be a core running out under either, and the
edge's CPU per message includes what being preempted costs.

With --harness (the harness's JSON, from bench/many-core.sh) the one file --out holds that too,
with the harness's stderr (--harness-log), its machine line and what the script capped.

  python3 tests/e2e/edge_many_core.py --workers 16 [--rates 1000,2000,4000] [--out FILE]

Python 3 standard library, SIPp.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from edge_proc import EDGE, samples, scrape  # noqa: E402
from figures import markdown_table  # noqa: E402
from policy_docs import MATCH, document, rate_rule  # noqa: E402
from ports import free_udp_port, udp_drops, udp_stats, wait_tcp_port, wait_udp_port  # noqa: E402
from processes import CpuMeter, HarnessError, Run, wait_until  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402

REPO = HERE.parents[1]
# A socket (so a source port) per call, at most 5,000 open per UAC. SIPp 3.6.1 shares the open
# ones once at the limit, and then writes some Vias with port 0, which the edge must drop
# (RFC 3261 §18.2.2: no way to answer; `edge_invalid_requests_total{reason="no-via"}`): with
# 1,000, one UAC at 24,000 calls/s against a responder answering 503 at once sent 0.6 % of its
# INVITEs so, with 5,000 none; through the edge, at 1,000, most of its calls then failed.
UN = ("-max_socket", "5000")


@dataclass
class Layout:
    mode: str  # "dedicated": the generator on cores of its own; "shared": on the edge's
    edge: list
    uas: int
    uacs: list


def layout(workers: int, uacs: int) -> Layout:
    cpus = sorted(os.sched_getaffinity(0))
    n = len(cpus)
    if n - workers >= 5:
        rest = cpus[workers:]
        return Layout("dedicated", cpus[:workers], rest[0], rest[1 : 1 + (uacs or len(rest) - 1)])
    count = uacs or max(1, n // 2)
    return Layout("shared", cpus[:workers], cpus[-1], [cpus[(n - 2 - i) % n] for i in range(count)])


def thread_ns(pid: int) -> dict:
    """Scheduler on-CPU nanoseconds of each thread of `pid` (/proc/PID/task/TID/schedstat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def step(args, lay: Layout, rate: int) -> dict:
    """One offered rate per UAC for args.step_s seconds; every process stopped on the way out."""
    calls, guard = int(rate * args.step_s), args.step_s + args.pause_ms / 1000.0 + 10
    with Run(f"many-core-{rate}", keep=args.keep) as run:
        uas_ports = SippPorts.pick()
        uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=guard + 30, logs=False,
                                            max_concurrent=max(1000, args.limit * 5)), cpu=lay.uas)
        wait_udp_port(uas_ports.sip, proc=uas)
        policy = run.path("policy.xml")
        policy.write_text(document(0, "full", rate_rule(args.limit)))
        port, metrics = free_udp_port(tcp=True), free_udp_port(tcp=True)
        edge = run.start("edge", [EDGE, "--listen", f"127.0.0.1:{port}", "--next-hop", f"127.0.0.1:{uas_ports.sip}", "--policy", policy,
                                  "--workers", args.workers, "--transport", "udp", "--metrics", f"127.0.0.1:{metrics}"],
                         cpu=",".join(map(str, lay.edge)))
        wait_udp_port(port, proc=edge)
        wait_tcp_port(metrics, proc=edge)
        inf = write_injection(run.path("callees.csv"), [MATCH])
        udp0, threads0 = udp_stats(), thread_ns(edge.pid)
        uacs = [run.start(f"uac{i}", sipp_command("uac_invite.xml", SippPorts.pick(), remote=f"127.0.0.1:{port}", inf=inf, rate=rate,
                                                  calls=calls, duration_ms=args.pause_ms,
                                                  max_concurrent=max(1000, int(rate * (args.pause_ms / 1000.0 + 1.0) * 3)),
                                                  timeout_s=guard, logs=False, transport="un", extra=UN), cpu=cpu)
                for i, cpu in enumerate(lay.uacs)]
        m_edge, l_edge, l_uas = CpuMeter(edge).start(), CpuMeter(edge).start(), CpuMeter(uas).start()
        # The load phase: until every UAC has made its calls and seen them end (a UAC that cannot
        # keep up takes longer than step_s).
        wait_until(lambda: not any(u.running() for u in uacs), guard, interval=0.1)
        uac_load_cpu = [u.cpu_seconds() for u in uacs]  # zombies not yet reaped (or still running)
        l_edge.stop()
        l_uas.stop()
        threads1 = thread_ns(edge.pid)
        exits = []
        for u in uacs:
            try:
                exits.append(u.wait(timeout=guard + 15))
            except HarnessError:
                exits.append(None)
        time.sleep(0.6)  # the UAS absorbing the last BYEs
        m_edge.stop()
        drops = {"edge": udp_drops(port), "uas": udp_drops(uas_ports.sip)}
        udp1 = udp_stats()
        _, _, body = scrape(metrics)
        counters = samples(body)
        per_worker = [int(counters.get(f'edge_worker_datagrams_total{{worker="{k}"}}', -1)) for k in range(args.workers)]
        invalid = {k[k.index('"') + 1 : k.rindex('"')]: int(v) for k, v in counters.items() if k.startswith("edge_invalid_requests_total{") and v}
        uas.send_signal(signal.SIGUSR1)  # soft exit: SIPp writes its counters
        if not wait_until(lambda: not uas.alive(), 3.0):
            run.stop(uas)
        run.stop(edge)

        outs = [SippOutputs(u.cwd) for u in uacs]
        uas_out = SippOutputs(uas.cwd)
        o = [invite_outcomes(x) for x in outs]
        total = lambda key: sum(x.get(key) or 0 for x in o)  # noqa: E731
        messages = sum(x.message_total() for x in outs) + uas_out.message_total()
        uas_stat = uas_out.stat()
        retrans = total("retransmissions") + (uas_stat.get("Retransmissions(C)") or 0)
        failed = total("failed_calls") + (uas_stat.get("FailedCall(C)") or 0)
        offered_calls = calls * len(uacs)
        load_wall = l_edge.wall
        thread_cores = sorted(((threads1.get(t, 0) - n) / 1e9 / load_wall for t, n in threads0.items()), reverse=True)
        uac_cores = [c / load_wall for c in uac_load_cpu]
        ok = all(e == 0 for e in exits) and failed == 0 and retrans == 0 and total("successful_calls") == offered_calls
        achieved = sum(x.get("call_rate") or 0 for x in o)
        short = achieved < 0.9 * rate * len(uacs)  # SIPp could not make the calls at the rate asked
        reasons = []
        if not ok:
            if drops["edge"]:
                reasons.append(f"the kernel dropped {drops['edge']} datagrams at the edge's sockets")
            if drops["uas"]:
                reasons.append(f"{drops['uas']} at the UAS's")
            if thread_cores and thread_cores[0] >= 0.9:
                reasons.append(f"an edge thread at {thread_cores[0]:.0%} of a core")
            if max(uac_cores) >= 0.9:
                reasons.append(f"a UAC at {max(uac_cores):.0%} of a core")
            if l_uas.utilisation >= 0.9:
                reasons.append(f"the UAS at {l_uas.utilisation:.0%} of a core")
            if invalid:
                reasons.append(f"the edge dropped invalid requests {invalid} (no-via: SIPp wrote Via port 0)")
            if any(e is None for e in exits):
                reasons.append("a UAC did not finish")
            if not reasons:
                reasons.append("failed, no core saturated")
        if not ok:
            run.keep = True
        mean = sum(per_worker) / len(per_worker) if per_worker else 0
        return {
            "rate_per_uac": rate,
            "uacs": len(uacs),
            "offered_cps": rate * len(uacs),
            "achieved_cps": round(achieved, 1),
            "calls": offered_calls,
            "completed": total("successful_calls"),
            "admitted_200": total("answered_200"),
            "rejected_503": total("rejected_503"),
            "failed_calls": failed,
            "retransmissions": retrans,
            "messages": messages,
            "load_s": round(load_wall, 2),
            "messages_per_s": round(messages / load_wall),
            "edge_cpu_s": round(m_edge.cpu, 3),
            "edge_cpu_ms_per_1000": round(1e6 * m_edge.cpu / messages, 3) if messages else None,
            "edge_sched_ms_per_1000": round(1e6 * m_edge.sched / messages, 3) if messages else None,
            "edge_cores": round(l_edge.utilisation, 3),
            "edge_busiest_thread_core": round(thread_cores[0], 3) if thread_cores else None,
            "edge_thread_cores": [round(c, 3) for c in thread_cores if c >= 0.001],
            "uac_cores": [round(c, 3) for c in uac_cores],
            "uas_core": round(l_uas.utilisation, 3),
            "worker_datagrams": per_worker,
            "worker_max_over_mean": round(max(per_worker) / mean, 2) if mean else None,
            "invalid_requests": invalid,
            "drops": drops,
            "rcvbuf_errors": udp1.get("RcvbufErrors", 0) - udp0.get("RcvbufErrors", 0),
            "uac_exits": exits,
            "ok": ok,
            "generator_short": short,
            "verdict": ("; ".join(reasons) if not ok else
                        f"ok, but the UACs made {achieved:.0f} calls/s (busiest at {max(uac_cores):.0%} of a core)" if short else "ok"),
            "kept": str(run.dir) if not ok else None,
        }


def table(steps: list) -> str:
    rows = [[s["offered_cps"], s["achieved_cps"], f"{s['completed']}/{s['calls']}", s["admitted_200"], s["rejected_503"], s["failed_calls"],
             s["retransmissions"], s["messages_per_s"], s["edge_cpu_ms_per_1000"], s["edge_sched_ms_per_1000"], s["edge_cores"],
             s["edge_busiest_thread_core"], " ".join(map(str, s["worker_datagrams"])), s["verdict"]] for s in steps]
    return markdown_table(["offered calls/s", "achieved", "completed", "200", "503", "failed", "retrans", "msgs/s",
                           "edge CPU ms/1000 msgs (stat)", "(schedstat)", "edge cores", "busiest edge thread",
                           "datagrams per worker", "result"], rows)


def _run_text(cmd) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=REPO).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[0] if lines else ""


def _ints(text: str) -> list:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, required=True, help="the edge's --workers (at most the usable cores)")
    ap.add_argument("--rates", default="2000,4000,8000,12000,16000", help="calls/s offered by each UAC, one step each, in order (default 2000,4000,8000,12000,16000)")
    ap.add_argument("--step-s", type=float, default=6.0, help="seconds of offered load per step (default 6)")
    ap.add_argument("--limit", type=int, default=2000, help="R: the rate rule's calls/s, what the UAS gets (default 2000)")
    ap.add_argument("--pause-ms", type=int, default=100, help="call hold time between ACK and BYE (default 100 ms)")
    ap.add_argument("--uacs", type=int, default=0, help="SIPp UACs (default: every core left when the generator has cores of its own, else half the cores)")
    ap.add_argument("--keep", action="store_true", help="keep every step's directory (failed steps' are kept anyway)")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--harness", type=Path, help="the harness's JSON (loadctl-bench --json), put in --out")
    ap.add_argument("--harness-log", type=Path, help="the harness's stderr (its tables), put in --out")
    ap.add_argument("--threads-asked", default="", help="for --out: the harness thread counts asked for")
    ap.add_argument("--threads", default="", help="for --out: the thread counts run (capped at the usable cores)")
    ap.add_argument("--workers-asked", type=int, help="for --out: the edge workers asked for")
    ap.add_argument("--started", type=float, help="for --out: when the script started (epoch seconds)")
    ap.add_argument("--build-s", type=float, help="for --out: seconds the build took")
    ap.add_argument("--harness-s", type=float, help="for --out: seconds the harness took")
    args = ap.parse_args(argv)
    for tool in ("sipp", "taskset"):
        if not shutil.which(tool):
            print(f"edge_many_core: {tool} is not installed (make e2e-tools)", file=sys.stderr)
            return 2
    if not EDGE.exists():
        print(f"edge_many_core: {EDGE} is not built (make edge)", file=sys.stderr)
        return 2
    cores = len(os.sched_getaffinity(0))
    if not 1 <= args.workers <= cores:
        ap.error(f"--workers {args.workers}: {cores} usable cores")
    lay = layout(args.workers, args.uacs)
    note = f"the edge on cores {lay.edge}, the UAS on core {lay.uas}, {len(lay.uacs)} SIPp UACs on cores {lay.uacs}: " + (
        "the load generator shares the edge's cores, the edge's pinned workers compete with SIPp, so a failed step may be a core "
        "running out under either, and the edge's CPU per message includes what being preempted costs" if lay.mode == "shared" else
        "no core shared")
    print(f"[edge] {args.workers} workers, rule {args.limit} calls/s, {args.step_s:g} s per step; {lay.mode}: {note}", flush=True)

    # The harness itself sleeps most of the time; keep its wake-ups off the edge's first core.
    os.sched_setaffinity(0, {lay.uas})
    t0 = time.monotonic()
    steps = []
    for rate in _ints(args.rates):
        s = step(args, lay, rate)
        steps.append(s)
        print(f"[edge] {s['offered_cps']} calls/s offered: {s['verdict']} (completed {s['completed']}/{s['calls']}, failed {s['failed_calls']}, "
              f"retrans {s['retransmissions']}, {s['edge_sched_ms_per_1000']} ms per 1000 msgs, edge {s['edge_cores']} cores, "
              f"datagrams per worker {s['worker_datagrams']})", flush=True)
        if not s["ok"] or s["generator_short"]:
            break  # a higher rate would fail again, or offer no more
    edge = {
        "workers": args.workers,
        "layout": {**asdict(lay), "note": note},
        "settings": {"rates_per_uac": _ints(args.rates), "step_s": args.step_s, "limit_cps": args.limit, "pause_ms": args.pause_ms,
                     "sipp": _run_text(["sipp", "-v"]), "kernel": platform.release()},
        "steps": steps,
        "table": table(steps),
        "seconds": round(time.monotonic() - t0, 1),
    }
    print()
    print(table(steps))
    good = [s for s in steps if s["ok"]]
    print(f"\nhighest clean step: {good[-1]['offered_cps']} calls/s offered, {good[-1]['achieved_cps']:g} made" if good else "\nno clean step")

    if args.out:
        doc = {"what": "bench/many-core.sh", "commit": _run_text(["git", "describe", "--always", "--dirty"]), "usable_cores": cores}
        if args.harness:
            log = args.harness_log.read_text(errors="replace") if args.harness_log else ""
            line = next((x[len("machine: "):] for x in log.splitlines() if x.startswith("machine: ")), None)
            doc["machine_line"] = line
            doc["harness"] = json.loads(args.harness.read_text())
            doc["machine"] = doc["harness"].get("machine")
            doc["harness_log"] = log
        doc["capped"] = {
            "threads": {"asked": _ints(args.threads_asked), "run": _ints(args.threads)},
            "edge_workers": {"asked": args.workers_asked, "run": args.workers},
        }
        doc["edge"] = edge
        doc["seconds"] = {"build": args.build_s, "harness": args.harness_s, "edge": edge["seconds"],
                          "wall": round(time.time() - args.started, 1) if args.started else None}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"results written to {args.out}")
    if not steps or not steps[0]["ok"]:
        print("edge_many_core: the first step already failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
