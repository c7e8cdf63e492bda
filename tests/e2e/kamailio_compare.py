#!/usr/bin/env python3
"""Side-by-side measurement of SIP proxies doing load control, with SIPp on loopback.

For each proxy under test (PROXIES below: a name, a command line, a readiness check; the
proxy's CPU is read from its process and all its descendants):

  (a) accuracy: a limit of R calls/s on the callee prefix, a SIPp UAC offering 3R calls/s of
      matching INVITEs, a SIPp UAS logging when each INVITE reached it. Over the measured
      interval (after a warm-up): total admitted, admitted/s, the most admitted in any sliding
      1 s and 100 ms window, and how admissions spread inside each second.
  (b) CPU per 1,000 SIP messages at each --cpu-rates load, with the limiter rejecting the excess
      of R, with the limiter in the path admitting everything, and without it (same proxy,
      limiter left out), in --cpu-repeat rounds in which the proxies take turns, so that each
      proxy's cost against the first's is a median of per-round ratios. Messages are every SIP
      message the proxy received or sent: the sum over both SIPp instances of what they sent
      and received (each crossed the proxy once), from SIPp's -trace_counts.
  (c) the highest call rate the proxy sustains on one core without failed calls or
      retransmissions, stepping the rate up with the limiter out of the path; each step says
      which core ran out (the proxy's, or SIPp's: UAC and UAS share the other core).

The proxy is pinned to one core and both SIPp instances to the other (taskset). Prints
markdown tables; --out FILE writes everything (per-second admission buckets too) as JSON.

  python3 tests/e2e/kamailio_compare.py [--short] [--out results.json] [--proxies kamailio,...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from admission import admission_stats, max_in_window  # noqa: E402
from figures import markdown_table  # noqa: E402
from ports import free_udp_port, udp_drops, udp_stats, wait_tcp_port, wait_udp_port  # noqa: E402
from processes import CpuMeter, HarnessError, Proc, Run, wait_until  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402
from tls_peers import Pki, stunnel  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
KAMAILIO_CFG = HERE / "kamailio" / "kamailio.cfg"

# ---------------------------------------------------------------------------------------------
# proxies under test


@dataclass
class ProxySetup:
    """What a proxy command is built from."""

    listen_port: int  # the proxy listens on udp 127.0.0.1:listen_port
    next_hop_port: int  # and forwards to the UAS on udp 127.0.0.1:next_hop_port
    prefix: str  # callee ($rU / To user) prefix that is limited, e.g. "+1555"
    limit: Optional[int]  # calls/s on that prefix; None: limiter out of the path
    dir: Path  # a directory for the proxy's own files (configs, policies, runtime dir)


@dataclass
class Proxy:
    """One proxy under test. `command` builds its argv; `ready` returns once it serves (default:
    its UDP port is bound; the socket is bound before the workers fork, so a datagram sent
    then waits in the socket buffer). CPU is the started process plus its descendants."""

    name: str
    description: str
    command: Callable[[ProxySetup], list]
    ready: Optional[Callable[[Proc, ProxySetup], None]] = None
    available: Callable[[], Optional[str]] = lambda: None  # None, or why it cannot run here
    accuracy_only: bool = False  # variants that only show limiter behaviour


def kamailio_command(pl_interval: int = 1) -> Callable[[ProxySetup], list]:
    def build(s: ProxySetup) -> list:
        rundir = s.dir / "kamailio-run"
        rundir.mkdir(parents=True, exist_ok=True)
        argv = ["kamailio", "-f", KAMAILIO_CFG, "-DD", "-E", "-x", "tlsf", "-X", "tlsf", "-n", "1"]
        argv += ["-l", f"udp:127.0.0.1:{s.listen_port}", "-w", s.dir, "-Y", rundir]
        argv += ["-A", f'NEXT_HOP="sip:127.0.0.1:{s.next_hop_port}"', "-A", f'PREFIX="{s.prefix}"']
        argv += ["-A", f"PL_INTERVAL={pl_interval}"]
        argv += ["-A", f"LIMIT={s.limit}"] if s.limit is not None else ["-A", "NOLIMIT"]
        return [str(a) for a in argv]

    return build


def kamailio_available() -> Optional[str]:
    if not shutil.which("kamailio"):
        return "kamailio is not installed (make e2e-tools)"
    return None


def edge_policy(prefix: str, limit: int) -> str:
    # The edge's policy: one rate rule on the callee prefix (numbers: the UAC sends user=phone).
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
         xmlns:lc="urn:ietf:params:xml:ns:load-control" version="0" state="full">
  <rule id="e2e-prefix">
    <conditions>
      <lc:call-identity><lc:sip><lc:to><many-tel prefix="{prefix}"/></lc:to></lc:sip></lc:call-identity>
      <method>INVITE</method>
    </conditions>
    <actions><lc:accept alt-action="reject"><lc:rate>{limit}</lc:rate></lc:accept></actions>
  </rule>
</ruleset>
"""


def edge_command(s: ProxySetup) -> list:
    policy = s.dir / "edge-policy.xml"
    if s.limit is None:
        policy.write_text('<ruleset xmlns="urn:ietf:params:xml:ns:common-policy" version="0" state="full"/>\n')
    else:
        policy.write_text(edge_policy(s.prefix, s.limit))
    # One worker, as Kamailio here has one: CPU per message compared like for like.
    return [str(REPO / "target" / "edge"), "--listen", f"127.0.0.1:{s.listen_port}", "--next-hop", f"127.0.0.1:{s.next_hop_port}", "--policy", str(policy),
            "--workers", "1"]


def edge_available() -> Optional[str]:
    return None if (REPO / "target" / "edge").exists() else "target/edge is not built (make edge)"


PROXIES = [
    Proxy("kamailio", "Kamailio 5.6 stateless, pipelimit TAILDROP, timer_interval=1, TLSF, 1 worker", kamailio_command(1), available=kamailio_available),
    Proxy(
        "kamailio-ti10",
        "as kamailio, but pipelimit's default timer_interval=10",
        kamailio_command(10),
        available=kamailio_available,
        accuracy_only=True,
    ),
    # The C edge (edge/) with libloadctl, measured the same way.
    Proxy("edge", "edge/ with libloadctl, one rate rule", edge_command, available=edge_available),
]
DEFAULT_PROXIES = "kamailio,edge"

# ---------------------------------------------------------------------------------------------
# one traffic run


@dataclass
class TrafficResult:
    proxy: str
    limit: Optional[int]
    rate: float
    calls: int
    pause_ms: int
    t_start: float  # epoch when the UAC was started
    wall: float  # seconds from UAC start until the last call's BYE had settled
    load_wall: float  # seconds of the offered-load phase (calls / rate), or less if the UAC quit
    uac: dict
    uas_stat: dict
    uas_counts: dict
    messages: int
    proxy_cpu: float  # utime+stime over `wall`, seconds
    proxy_sched: float  # scheduler on-CPU time over `wall`, seconds
    proxy_idle_cpu_per_s: float
    proxy_load_util: float  # share of the proxy's core during the offered-load phase
    sipp_load_util: float  # share of SIPp's core (UAC + UAS) during the offered-load phase
    drops: dict  # datagrams the kernel dropped at each socket: proxy, uac, uas
    rcvbuf_errors: int  # system-wide UDP RcvbufErrors during the run
    uac_exit: Optional[int]
    arrivals: list = field(repr=False, default_factory=list)
    run_dir: str = ""

    @property
    def cpu_ms_per_1000(self) -> float:
        return 1e6 * self.proxy_cpu / self.messages if self.messages else float("nan")

    @property
    def sched_ms_per_1000(self) -> float:
        return 1e6 * self.proxy_sched / self.messages if self.messages else float("nan")


def traffic_run(
    proxy: Proxy,
    limit: Optional[int],
    rate: float,
    calls: int,
    args,
    log_arrivals: bool = True,
    label: str = "",
) -> TrafficResult:
    """Starts UAS, proxy, UAC (in that order), waits for the UAC to finish its `calls` calls
    at `rate`, and collects everything. All processes are stopped on the way out."""
    with Run(f"{proxy.name}-{label or 'run'}", keep=args.keep) as run:
        tcp = args.transport in ("tcp", "tls")
        tls = args.transport == "tls"
        uas_ports, uac_ports = SippPorts.pick(tcp=tcp), SippPorts.pick(tcp=tcp)
        sipp_transport = "t1" if tcp else None
        listen = free_udp_port(tcp=True)
        load_s = calls / rate
        guard = load_s + args.pause_ms / 1000.0 + 30

        uas = run.start(
            "uas",
            sipp_command("uas.xml", uas_ports, timeout_s=guard + 30, logs=log_arrivals, max_concurrent=max(1000, int(rate * 5)), transport=sipp_transport),
            cpu=args.sipp_cpu,
        )
        (wait_tcp_port if tcp else wait_udp_port)(uas_ports.sip, proc=uas)

        setup = ProxySetup(listen, uas_ports.sip, args.prefix, limit, run.path("proxy-files"))
        setup.dir.mkdir(parents=True, exist_ok=True)
        argv, front = proxy.command(setup), listen
        if tls:
            # SIPp over TCP behind stunnel (on SIPp's core) both ways; the edge speaks TLS to both.
            ca = Pki(run.dir / "pki")
            hop_cert, edge_cert = ca.issue("hop.test", dns=["hop.test"]), ca.issue("edge.test", dns=["edge.test"])
            hop, tls_port, front = free_udp_port(tcp=True), free_udp_port(tcp=True), free_udp_port(tcp=True)
            stunnel(run, "hop-tls", hop, uas_ports.sip, client=False, cert=hop_cert, cpu=args.sipp_cpu)
            argv += ["--tls-listen", f"127.0.0.1:{tls_port}", "--tls-next-hop", f"127.0.0.1:{hop}", "--tls-next-hop-name", "hop.test",
                     "--tls-cert", edge_cert.cert, "--tls-key", edge_cert.key, "--tls-ca", ca.cert]
        px = run.start(proxy.name, argv, cpu=args.proxy_cpu)
        (proxy.ready or (lambda p, s: (wait_tcp_port if tcp else wait_udp_port)(s.listen_port, proc=p)))(px, setup)
        if tls:
            wait_tcp_port(tls_port, proc=px)
            stunnel(run, "uac-tls", front, tls_port, client=True, ca=ca.cert, check_host="edge.test", cpu=args.sipp_cpu)
        time.sleep(0.3)  # let forked workers settle before the idle reading

        idle = CpuMeter(px).start()
        time.sleep(args.idle_s)
        idle.stop()
        if not px.alive():
            raise HarnessError(f"{proxy.name} exited with {px.returncode()}\n{px.tail()}")

        # one callee, or the callers' list (SEQUENTIAL, call by call: e.g. 3 matching, 1 not)
        inf = write_injection(run.path("callees.csv"), getattr(args, "callees", None) or [args.callee])
        uac_argv = sipp_command(
            "uac_invite.xml",
            uac_ports,
            remote=f"127.0.0.1:{front}",
            inf=inf,
            rate=rate,
            calls=calls,
            duration_ms=args.pause_ms,
            max_concurrent=max(1000, int(rate * (args.pause_ms / 1000.0 + 1.0) * 3)),
            timeout_s=guard,
            logs=False,
            transport=sipp_transport,
        )
        udp0 = udp_stats()
        t_start = time.time()
        uac = run.start("uac", uac_argv, cpu=args.sipp_cpu)
        m_px, m_uas, m_uac = CpuMeter(px).start(), CpuMeter(uas).start(), CpuMeter(uac).start()
        l_px, l_uas = CpuMeter(px).start(), CpuMeter(uas).start()
        # The offered-load phase: utilisation of both cores while SIPp is creating calls.
        wait_until(lambda: not uac.running(), load_s, interval=0.1)
        load_uac_cpu = uac.cpu_seconds()  # the UAC is still running (or a zombie) here
        l_px.stop()
        l_uas.stop()
        try:
            uac_exit, (uac_cpu, _) = uac.wait_cpu(timeout=guard + 15)
        except HarnessError:
            uac_exit, uac_cpu = None, 0.0
        # The UAC exits when its last call ends; the UAS may still be absorbing that BYE.
        time.sleep(0.6)
        m_px.stop()
        m_uas.stop()
        drops = {"proxy": udp_drops(listen), "uas": udp_drops(uas_ports.sip), "uac": None}
        udp1 = udp_stats()
        # soft exit first (SIPp finishes and dumps its counters), then TERM
        uas.send_signal(signal.SIGUSR1)
        if not wait_until(lambda: not uas.alive(), 3.0):
            run.stop(uas)
        run.stop(px)

        uac_out, uas_out = SippOutputs(uac.cwd), SippOutputs(uas.cwd)
        messages = uac_out.message_total() + uas_out.message_total()
        arrivals = [a.t for a in uas_out.arrivals() if a.callee.startswith(args.prefix)] if log_arrivals else []
        if uac_exit is None:
            print(f"[{proxy.name}] UAC did not finish in time; logs in {run.dir}", flush=True)
            run.keep = True
        load_wall = l_px.wall
        return TrafficResult(
            proxy=proxy.name,
            limit=limit,
            rate=rate,
            calls=calls,
            pause_ms=args.pause_ms,
            t_start=t_start,
            wall=m_px.wall,
            load_wall=load_wall,
            uac=invite_outcomes(uac_out),
            uas_stat={k: uas_out.stat().get(k) for k in ("SuccessfulCall(C)", "FailedCall(C)", "Retransmissions(C)", "OutOfCallMsgs(C)", "DeadCallMsgs(C)")},
            uas_counts=uas_out.counts(),
            messages=messages,
            proxy_cpu=m_px.cpu,
            proxy_sched=m_px.sched,
            proxy_idle_cpu_per_s=idle.utilisation,
            proxy_load_util=l_px.utilisation,
            sipp_load_util=((load_uac_cpu - m_uac.c0[0]) + l_uas.cpu) / load_wall if load_wall else 0.0,
            drops=drops,
            rcvbuf_errors=udp1.get("RcvbufErrors", 0) - udp0.get("RcvbufErrors", 0),
            uac_exit=uac_exit,
            arrivals=arrivals,
            run_dir=str(run.dir),
        )


# ---------------------------------------------------------------------------------------------
# the three measurements


def calls_for(rate: float, args) -> int:
    return int(round(rate * (args.warmup + args.duration + 1.0)))


def accuracy(proxy: Proxy, args) -> dict:
    r = args.limit
    offered = args.offer_factor * r
    res = traffic_run(proxy, r, offered, calls_for(offered, args), args, label="accuracy")
    start = res.t_start + args.warmup
    stats = admission_stats(res.arrivals, start, start + args.duration, limit_per_s=r)
    # The warm-up is left out of the interval, but the onset of overload is where an interval
    # counter can admit two quotas in well under a second: the most in any 1 s of the whole run.
    stats["max_1s_whole_run"] = max_in_window(res.arrivals, 1.0)
    return {"result": res, "stats": stats, "offered": offered}


# A limit no offered load here reaches: the limiter is in the path but admits everything, so
# the run has the same messages as the one without a limiter and the difference is its cost.
LIMIT_ABOVE_ALL = 1000000


CPU_VARIANTS = ("limit", "pass", "nolimit")


def cpu_variant(tag: str, args) -> tuple:
    """(the variant's name in the tables, the limit its proxy runs with)."""
    return {
        "limit": (f"limit {args.limit}/s", args.limit),
        "pass": ("limiter, admits all", LIMIT_ABOVE_ALL),
        "nolimit": ("no limiter", None),
    }[tag]


def cpu_runs(proxies: list, args, limited: dict) -> dict:
    """{(proxy, rate, variant tag): [results, one per round]}: at each CPU rate, the limiter
    rejecting the excess of R, the limiter in the path admitting everything, and no limiter,
    --cpu-repeat rounds. The proxies take turns within a round (A B, then B A in the next), so
    each round's figures were measured minutes apart at most and their ratio is not moved by
    what the rest of the machine did over the whole run. With one round, a proxy's accuracy run
    (`limited`, at 3R) stands for its limit run at that rate."""
    out = {}
    for rnd in range(args.cpu_repeat):
        order = proxies if rnd % 2 == 0 else list(reversed(proxies))
        for rate in args.cpu_rates:
            calls = calls_for(rate, args)
            for tag in CPU_VARIANTS:
                _, limit = cpu_variant(tag, args)
                for proxy in order:
                    key = (proxy.name, rate, tag)
                    acc = limited.get(proxy.name)
                    if args.cpu_repeat == 1 and tag == "limit" and acc is not None and acc.rate == rate:
                        out.setdefault(key, []).append(acc)
                        continue
                    r = traffic_run(proxy, limit, rate, calls, args, log_arrivals=False, label=f"cpu{rate:g}-{tag}")
                    out.setdefault(key, []).append(r)
            print(
                f"cpu round {rnd + 1}/{args.cpu_repeat} at {rate:g} calls/s (ms per 1000 msgs): "
                + "; ".join(f"{p.name} " + ", ".join(f"{tag} {out[(p.name, rate, tag)][-1].sched_ms_per_1000:.2f}" for tag in CPU_VARIANTS) for p in proxies),
                flush=True,
            )
    return out


def cpu_ratios(proxies: list, runs: dict, args) -> list:
    """Each proxy after the first against the first, per rate and variant: the median of the
    per-round ratios of their CPU per message (min – max), the figure to quote."""
    rows = []
    if len(proxies) < 2:
        return rows
    base = proxies[0].name
    for other in proxies[1:]:
        for rate in args.cpu_rates:
            for tag in CPU_VARIANTS:
                a, b = runs.get((base, rate, tag), []), runs.get((other.name, rate, tag), [])
                per_round = [round(y.sched_ms_per_1000 / x.sched_ms_per_1000, 3) for x, y in zip(a, b) if x.sched_ms_per_1000 > 0]
                if not per_round:
                    continue
                rows.append(
                    {
                        "proxy": other.name,
                        "against": base,
                        "offered_cps": rate,
                        "variant": cpu_variant(tag, args)[0],
                        "ratio_median": round(statistics.median(per_round), 3),
                        "ratio_per_round": per_round,
                    }
                )
    return rows


def max_rate(proxy: Proxy, args) -> list:
    steps = []
    for rate in args.steps:
        calls = int(rate * args.step_s)
        res = traffic_run(proxy, None, rate, calls, args, log_arrivals=False, label=f"rate{rate}")
        o = res.uac
        retrans = (o["retransmissions"] or 0) + (res.uas_stat.get("Retransmissions(C)") or 0)
        failed = (o["failed_calls"] or 0) + (res.uas_stat.get("FailedCall(C)") or 0)
        ok = res.uac_exit == 0 and failed == 0 and retrans == 0 and o["bye_200"] == calls
        reasons = []
        if not ok:
            if res.drops.get("proxy"):
                reasons.append(f"kernel dropped {res.drops['proxy']} datagrams at the proxy's socket")
            if res.drops.get("uas"):
                reasons.append(f"{res.drops['uas']} at the UAS's socket")
            if res.proxy_load_util >= 0.9:
                reasons.append("proxy core saturated")
            if res.sipp_load_util >= 0.9:
                reasons.append("SIPp core saturated")
            if not reasons:
                reasons.append("failed, neither core saturated")
        verdict = "ok" if ok else "; ".join(reasons)
        step = {
            "rate": rate,
            "calls": calls,
            "messages": res.messages,
            "messages_per_s": round(rate * res.messages / calls, 1) if calls else 0,
            "sipp_call_rate": o["call_rate"],
            "failed_calls": failed,
            "retransmissions": retrans,
            "completed": o["bye_200"],
            "proxy_util": round(res.proxy_load_util, 3),
            "sipp_util": round(res.sipp_load_util, 3),
            "drops": res.drops,
            "rcvbuf_errors": res.rcvbuf_errors,
            "proxy_cpu_ms_per_1000": round(res.cpu_ms_per_1000, 3),
            "proxy_sched_ms_per_1000": round(res.sched_ms_per_1000, 3),
            "ok": ok,
            "verdict": verdict,
            "uac_exit": res.uac_exit,
        }
        steps.append(step)
        print(
            f"[{proxy.name}] {rate} calls/s: {verdict} (failed {failed}, retrans {retrans}, proxy core {res.proxy_load_util:.0%}, "
            f"SIPp core {res.sipp_load_util:.0%}, drops {res.drops})",
            flush=True,
        )
        if not ok:
            break
    return steps


# ---------------------------------------------------------------------------------------------
# reporting


def cpu_row(name: str, variant: str, runs: list) -> dict:
    """One CPU table row: the run with the median schedstat cost per message, and the spread
    over all the runs of this variant."""
    ranked = sorted(runs, key=lambda r: r.sched_ms_per_1000)
    res = ranked[len(ranked) // 2]
    calls = res.uac["invites"]
    return {
        "proxy": name,
        "variant": variant,
        "offered_cps": res.rate,
        "runs": len(runs),
        "calls": calls,
        "admitted": res.uac["answered_200"],
        "rejected": res.uac["rejected_503"],
        "messages": res.messages,
        "messages_per_call": round(res.messages / calls, 2) if calls else None,
        "proxy_cpu_s": round(res.proxy_cpu, 3),
        "wall_s": round(res.wall, 2),
        "cpu_ms_per_1000_messages": round(res.cpu_ms_per_1000, 3),
        "proxy_sched_s": round(res.proxy_sched, 4),
        "sched_ms_per_1000_messages": round(res.sched_ms_per_1000, 3),
        "sched_ms_per_1000_all_runs": [round(r.sched_ms_per_1000, 3) for r in runs],
        "cpu_ms_per_1000_all_runs": [round(r.cpu_ms_per_1000, 3) for r in runs],
        "cpu_us_per_offered_call": round(1e6 * res.proxy_sched / calls, 2) if calls else None,
        "idle_cpu_ms_per_s": round(1000 * res.proxy_idle_cpu_per_s, 3),
        "proxy_util": round(res.proxy_load_util, 4),
        "sipp_util": round(res.sipp_load_util, 3),
        "failed_calls": res.uac["failed_calls"],
        "retransmissions": res.uac["retransmissions"],
        "drops": res.drops,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", action="store_true", help="CI mode: 6 s measured interval, short rate steps (about a minute per proxy)")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--proxies", default=DEFAULT_PROXIES, help=f"comma-separated, from: {', '.join(p.name for p in PROXIES)} (default {DEFAULT_PROXIES})")
    ap.add_argument("--limit", type=int, default=100, help="R: calls/s allowed on the prefix (default 100)")
    ap.add_argument("--offer-factor", type=float, default=3.0, help="offered load as a multiple of R (default 3)")
    ap.add_argument("--duration", type=float, help="measured interval in seconds (default 20, --short 6)")
    ap.add_argument("--warmup", type=float, help="seconds of traffic before the measured interval (default 2, --short 1)")
    ap.add_argument("--steps", help="call rates for the max-rate sweep (default 500,1000,2000,4000,8000,10000,12000,14000,16000; --short 500,1000,2000,4000); stops at the first step that fails")
    ap.add_argument("--step-s", type=float, help="seconds of traffic per step (default 10, --short 3)")
    ap.add_argument("--cpu-rates", help="offered calls/s for the CPU runs (default: 3R and 4000; --short: 3R)")
    ap.add_argument("--cpu-repeat", type=int, help="runs per CPU variant, the median is reported (default 3, --short 1)")
    ap.add_argument("--pause-ms", type=int, default=200, help="call hold time between ACK and BYE (default 200 ms)")
    ap.add_argument("--prefix", default="+1555", help="limited callee prefix (default +1555)")
    ap.add_argument("--callee", default="+15550001234", help="callee the UAC calls (default +15550001234)")
    ap.add_argument("--proxy-cpu", type=int, default=1, help="core for the proxy (default 1)")
    ap.add_argument("--sipp-cpu", type=int, default=0, help="core for both SIPp instances (default 0)")
    ap.add_argument("--idle-s", type=float, default=1.0, help="idle CPU reading before traffic (default 1 s)")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: accuracy,cpu,maxrate")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory (logs, SIPp outputs)")
    ap.add_argument("--transport", choices=("udp", "tcp", "tls"), default="udp",
                    help="SIP between SIPp and the proxy: udp (default), tcp (SIPp -t t1: one connection each way; the edge only, "
                         "Kamailio's configuration has TCP off) or tls (as tcp, with stunnel on SIPp's core turning SIPp's TCP into TLS "
                         "both ways; the edge only)")
    args = ap.parse_args(argv)

    args.duration = args.duration or (6.0 if args.short else 20.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if args.short else 2.0)
    args.step_s = args.step_s or (3.0 if args.short else 10.0)
    args.steps = [int(x) for x in (args.steps or ("500,1000,2000,4000" if args.short else "500,1000,2000,4000,8000,10000,12000,14000,16000")).split(",")]
    offered = args.offer_factor * args.limit
    args.cpu_rates = [float(x) for x in args.cpu_rates.split(",")] if args.cpu_rates else ([offered] if args.short else [offered, 4000.0])
    args.cpu_repeat = args.cpu_repeat or (1 if args.short else 3)
    skip = {s for s in args.skip.split(",") if s}
    by_name = {p.name: p for p in PROXIES}
    chosen = []
    for name in args.proxies.split(","):
        if name not in by_name:
            ap.error(f"unknown proxy {name!r}")
        chosen.append(by_name[name])
    if args.transport != "udp" and any(p.name != "edge" for p in chosen):
        ap.error(f"--transport {args.transport} measures the edge only (--proxies edge)")
    for tool in ("sipp", "taskset"):
        if not shutil.which(tool):
            print(f"{tool} is not installed (make e2e-tools)", file=sys.stderr)
            return 2
    if os.cpu_count() and max(args.proxy_cpu, args.sipp_cpu) >= os.cpu_count():
        ap.error(f"only {os.cpu_count()} cores")

    results = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"cores": os.cpu_count(), "kernel": platform.release(), "sipp": _version(["sipp", "-v"]), "kamailio": _version(["kamailio", "-v"])},
        "accuracy": [],
        "cpu": [],
        "max_rate": {},
    }
    # The harness itself sleeps most of the time; keep its wake-ups off the proxy's core.
    os.sched_setaffinity(0, {args.sipp_cpu})
    t0 = time.monotonic()
    measured, limited = [], {}
    for proxy in chosen:
        why = proxy.available()
        if why:
            print(f"[{proxy.name}] skipped: {why}", file=sys.stderr)
            results.setdefault("skipped", {})[proxy.name] = why
            continue
        print(f"[{proxy.name}] {proxy.description}", flush=True)
        if "accuracy" not in skip or ("cpu" not in skip and not proxy.accuracy_only):
            a = accuracy(proxy, args)
            acc = limited[proxy.name] = a["result"]
            results["accuracy"].append(
                {
                    "proxy": proxy.name,
                    "limit": args.limit,
                    "offered_cps": a["offered"],
                    "outcomes": acc.uac,
                    "uas": acc.uas_stat,
                    "stray_acks_at_uas": sum(n for k, n in acc.uas_counts.items() if k.startswith("0_ACK_Recv")),
                    "drops": acc.drops,
                    **a["stats"],
                }
            )
            s = a["stats"]
            print(
                f"[{proxy.name}] accuracy: {s['admitted']} admitted in {s['interval_s']} s = {s['admitted_per_s']}/s "
                f"(limit {args.limit}), max 1 s {s['max_1s']} ({s['max_1s_whole_run']} with the onset), max 100 ms {s['max_100ms']}, cv(100 ms) {s['cv_100ms']}, "
                f"first 100 ms {s.get('first_100ms_share')}",
                flush=True,
            )
        if not proxy.accuracy_only:
            measured.append(proxy)
    if "cpu" not in skip and measured:
        runs = cpu_runs(measured, args, limited)
        for proxy in measured:
            for rate in args.cpu_rates:
                for tag in CPU_VARIANTS:
                    results["cpu"].append(cpu_row(proxy.name, cpu_variant(tag, args)[0], runs[(proxy.name, rate, tag)]))
        results["cpu_ratios"] = cpu_ratios(measured, runs, args)
    if "maxrate" not in skip:
        for proxy in measured:
            results["max_rate"][proxy.name] = max_rate(proxy, args)
    results["elapsed_s"] = round(time.monotonic() - t0, 1)

    print()
    print(report(results, args))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"\nresults written to {args.out}")
    problems = check(results, args)
    for p in problems:
        print(f"CHECK FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0


# The edge's GCRA burst tolerance (libloadctl's default): at most r·(1 s + τ) + 1 in any second.
EDGE_TAU_S = 0.1


def check(results: dict, args) -> list:
    """What must hold for the run to pass (CI runs the short mode): every proxy's calls
    completed (no failed call, no stray ACK at the UAS), and the edge admits within its rate
    semantics: the limit ±3 % over the measured interval and never more than r·(1 s + τ) + 1 in
    any sliding second, onset included. Kamailio's spread is reported, not judged."""
    problems = []
    for a in results["accuracy"]:
        name = a["proxy"]
        failed = a["outcomes"].get("failed_calls", 0) if isinstance(a["outcomes"], dict) else 0
        if failed:
            problems.append(f"{name}: {failed} failed calls in the accuracy run")
        if a.get("stray_acks_at_uas"):
            problems.append(f"{name}: {a['stray_acks_at_uas']} ACKs to the proxy's own 503s reached the UAS")
        if name == "edge":
            bound = int(args.limit * (1.0 + EDGE_TAU_S)) + 1
            if abs(a["admitted_per_s"] / args.limit - 1.0) > 0.03:
                problems.append(f"edge: {a['admitted_per_s']}/s admitted, limit {args.limit} ± 3 %")
            if a["max_1s_whole_run"] > bound:
                problems.append(f"edge: {a['max_1s_whole_run']} admitted in one second, bound r·(1 s + τ) + 1 = {bound}")
    for name, steps in results["max_rate"].items():
        if steps and not steps[0]["ok"]:
            problems.append(f"{name}: the first max-rate step ({steps[0]['rate']} calls/s) already failed")
    return problems


def _spread(xs) -> str:
    return f"{min(xs):g}–{max(xs):g} ({len(xs)})" if len(xs) > 1 else f"{xs[0]:g}"


def _version(cmd) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for line in out.splitlines():
        if line.strip():
            return line.strip()
    return ""


def report(results: dict, args) -> str:
    out = []
    out.append(f"### Accuracy: limit R = {args.limit} calls/s on {args.prefix}, {args.offer_factor:g}R offered, {args.duration:g} s measured after {args.warmup:g} s")
    out.append("")
    rows = []
    for a in results["accuracy"]:
        rows.append(
            [
                a["proxy"],
                a["admitted"],
                a["admitted_per_s"],
                f"{100 * a.get('error_vs_limit', 0):+.1f} %",
                a["max_1s"],
                a.get("max_1s_whole_run"),
                a["max_100ms"],
                a["cv_100ms"],
                a.get("first_100ms_share"),
                a["busy_fraction"],
                a["outcomes"]["rejected_503"],
                a["outcomes"]["failed_calls"],
            ]
        )
    out.append(
        markdown_table(
            ["proxy", "admitted", "admitted/s", "vs R", "max any 1 s", "max any 1 s, whole run", "max any 100 ms", "CV of 100 ms counts", "share in 1st 100 ms", "busy 100 ms share", "503 (whole run)", "failed calls"],
            rows,
        )
    )
    for a in results["accuracy"]:
        out.append("")
        out.append(f"{a['proxy']}: share of each second's admissions per 100 ms, from the limiter's interval start: {a.get('profile_100ms')}")
        sample = a.get("per_second", [])[:3]
        if sample:
            out.append(f"{a['proxy']}: first seconds, admissions per 100 ms: {sample}")
    out.append("")
    out.append(f"### CPU per 1,000 SIP messages (proxy on core {args.proxy_cpu}, SIPp on core {args.sipp_cpu})")
    out.append("")
    rows = [
        [
            c["proxy"],
            f"{c['offered_cps']:g}",
            c["variant"],
            c["admitted"],
            c["rejected"],
            c["messages"],
            c["messages_per_call"],
            c["proxy_cpu_s"],
            c["cpu_ms_per_1000_messages"],
            c["sched_ms_per_1000_messages"],
            _spread(c["sched_ms_per_1000_all_runs"]),
            c["cpu_us_per_offered_call"],
            f"{c['proxy_util']:.1%}",
        ]
        for c in results["cpu"]
    ]
    out.append(
        markdown_table(
            ["proxy", "offered calls/s", "path", "admitted", "503", "messages", "msgs/call", "CPU s", "CPU ms / 1000 msgs (stat)", "(schedstat)", "schedstat, all runs", "CPU µs / offered call", "proxy core"],
            rows,
        )
    )
    out.append("")
    out.append("Messages: everything both SIPp instances sent or received (each crossed the proxy once). An admitted call is 14 (INVITE, 100, 180, 200, ACK, BYE, 200, in and out); a rejected one 3 (INVITE in, 503 out, ACK in).")
    if results.get("cpu_ratios"):
        out.append("")
        out.append("CPU per message, each proxy against the first, round by round (the proxies take turns within a round):")
        out.append("")
        out.append(
            markdown_table(
                ["proxy / against", "offered calls/s", "path", "median of per-round ratios", "per round"],
                [[f"{r['proxy']} / {r['against']}", f"{r['offered_cps']:g}", r["variant"], r["ratio_median"], ", ".join(f"{x:g}" for x in r["ratio_per_round"])] for r in results["cpu_ratios"]],
            )
        )
    out.append("CPU (stat): utime+stime of all the proxy's processes from /proc/PID/stat, charged in 10 ms ticks; (schedstat): the scheduler's exact on-CPU time, /proc/PID/task/*/schedstat; µs per offered call from schedstat. Each row is the run with the median schedstat figure of its variant.")
    for name, steps in results["max_rate"].items():
        out.append("")
        out.append(f"### Max rate, {name}, limiter out of the path ({args.step_s:g} s per step, {args.pause_ms} ms hold)")
        out.append("")
        rows = [
            [
                s["rate"],
                s["sipp_call_rate"],
                s["messages_per_s"],
                s["failed_calls"],
                s["retransmissions"],
                f"{s['proxy_util']:.0%}",
                f"{s['sipp_util']:.0%}",
                f"{s['drops'].get('proxy')}/{s['drops'].get('uas')}",
                s["proxy_cpu_ms_per_1000"],
                s["proxy_sched_ms_per_1000"],
                s["verdict"],
            ]
            for s in steps
        ]
        out.append(
            markdown_table(
                ["calls/s", "SIPp's call rate", "msgs/s", "failed", "retrans", "proxy core", "SIPp core", "drops proxy/UAS", "CPU ms/1000 msgs (stat)", "(schedstat)", "result"], rows
            )
        )
        good = [s for s in steps if s["ok"]]
        if good:
            out.append(f"\nhighest clean step: {good[-1]['rate']} calls/s ({good[-1]['messages_per_s']} messages/s through the proxy)")
        out.append("Core shares are over the offered-load phase; SIPp's core runs both the UAC and the UAS.")
    out.append(f"\nelapsed {results.get('elapsed_s')} s")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
