#!/usr/bin/env python3
"""pipelimit TAILDROP vs the loadctl module, side by side in the same Kamailio.

Debian's kamailio 5.6.3 runs tests/e2e/kamailio/limiter-compare.cfg, one configuration that
loads both pipelimit and the loadctl module (kamailio/loadctl/, target/kamailio/loadctl.so) in
every variant; the variants differ only by the limiter block of the request route:

  pipelimit        pl_check(pipe, "TAILDROP", R) on initial INVITEs to +1555, 503 on excess
                   (timer_interval 1 s; the module's default of 10 s would make it R per 10 s)
  loadctl          lc_classify() on every request, lc_reply() on a negative verdict, with a
                   policy of one rate rule R on callee +1555 (GCRA, τ = 100 ms)
  pipelimit-pass,  the same limiters with a limit nothing reaches (R = 1,000,000): the same
  loadctl-pass     messages as `none`, so the difference is the limiter's own cost
  none             no limiter on the path

A SIPp UAC offers 4R calls/s, call by call 3 to +1555… (3R matching the limit) and 1 to a
number that matches nothing (R); a SIPp UAS answers behind Kamailio and logs when each INVITE
reached it. Kamailio (all its processes) is pinned to one core, both SIPp to the other, as in
kamailio_compare.py, whose run function (traffic_run) and CPU meters this script uses: CPU is
utime+stime of every Kamailio process from /proc/PID/stat (the scheduler's schedstat beside
it), per 1,000 SIP messages through Kamailio (everything both SIPp sent and received).

Runs are interleaved (each repetition runs every variant once, in a rotated order) so slow
drifts of the shared machine hit all variants alike; medians over repetitions are reported.

  python3 tests/e2e/kamailio_module_compare.py --short            # CI (make kamailio-module-compare)
  python3 tests/e2e/kamailio_module_compare.py --out results.json # the full table

The short mode (children=4, R = 100, one run of loadctl, pipelimit and none) fails when the
loadctl module admits outside its rate semantics: R ± 3 % over the measured interval, more
than r·(1 s + τ) + 1 in any sliding second (onset included), a failed call, a non-matching
call not passed, or an ACK to Kamailio's own 503 reaching the UAS. pipelimit is reported, not
judged.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from admission import admission_stats, max_in_window  # noqa: E402
from figures import markdown_table  # noqa: E402
import kamailio_compare as kc  # noqa: E402

REPO = HERE.parent.parent
CFG = HERE / "kamailio" / "limiter-compare.cfg"
MODULE = REPO / "target" / "kamailio" / "loadctl.so"
KAMAILIO = "/usr/sbin/kamailio"
MATCH, OTHER = "+15550001234", "+16660001234"
TAU_S = 0.1  # the module's burst_ms default
LIMIT_ABOVE_ALL = kc.LIMIT_ABOVE_ALL

# variant -> (limiter define or None, limited: the rule's limit is R, else LIMIT_ABOVE_ALL)
VARIANTS = {
    "pipelimit": ("PIPELIMIT", True),
    "loadctl": ("LOADCTL", True),
    "pipelimit-pass": ("PIPELIMIT", False),
    "loadctl-pass": ("LOADCTL", False),
    "none": (None, False),
}


def kamailio_proxy(variant: str, children: int, args) -> kc.Proxy:
    define, _ = VARIANTS[variant]

    def build(s: kc.ProxySetup) -> list:
        rundir = s.dir / "kamailio-run"
        rundir.mkdir(parents=True, exist_ok=True)
        policy = s.dir / "policy.xml"
        policy.write_text(kc.edge_policy(s.prefix, s.limit if s.limit is not None else LIMIT_ABOVE_ALL))
        argv = [KAMAILIO, "-f", CFG, "-DD", "-E", "-x", "tlsf", "-X", "tlsf", "-n", children]
        if args.perf:
            # a profile of every Kamailio process (perf follows the forks); cpu-clock: this VM
            # has no hardware counters. The perf process is on Kamailio's core too.
            args.perf.mkdir(parents=True, exist_ok=True)
            data = args.perf.resolve() / f"{variant}-c{children}-r{s.limit if s.limit != LIMIT_ABOVE_ALL else 'pass'}.data"
            argv = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "4999", "-o", data, "--"] + argv
        argv += ["-l", f"udp:127.0.0.1:{s.listen_port}", "-w", s.dir, "-Y", rundir]
        argv += ["-A", f'NEXT_HOP="sip:127.0.0.1:{s.next_hop_port}"', "-A", f'PREFIX="{s.prefix}"', "-A", "PL_INTERVAL=1"]
        argv += ["-A", f'LOADCTL_SO="{args.module}"', "-A", f'POLICY="{policy}"']
        argv += ["-A", f"LIMIT={s.limit if s.limit is not None else LIMIT_ABOVE_ALL}"]
        if define:
            argv += ["-A", define]
        return [str(a) for a in argv]

    return kc.Proxy(f"{variant}-c{children}", f"Kamailio 5.6.3, children={children}, {variant}", build)


def one_run(variant: str, children: int, r: int, args) -> dict:
    """One traffic run: 4R calls/s (3R matching, R not) for warmup + duration + 1 s."""
    _, limited = VARIANTS[variant]
    offered = 4 * r
    calls = kc.calls_for(offered, args)
    limit = r if limited else LIMIT_ABOVE_ALL
    res = kc.traffic_run(kamailio_proxy(variant, children, args), limit, offered, calls, args, log_arrivals=limited, label=f"r{r}")
    o = res.uac
    row = {
        "variant": variant,
        "children": children,
        "limit": r,
        "offered_cps": offered,
        "calls": o["invites"],
        "admitted": o["answered_200"],
        "rejected_503": o["rejected_503"],
        "failed_calls": o["failed_calls"],
        "retransmissions": (o["retransmissions"] or 0) + (res.uas_stat.get("Retransmissions(C)") or 0),
        "uas_failed": res.uas_stat.get("FailedCall(C)"),
        "stray_acks_at_uas": sum(n for k, n in res.uas_counts.items() if k.startswith("0_ACK_Recv")),
        "messages": res.messages,
        "cpu_s": round(res.proxy_cpu, 3),
        "sched_s": round(res.proxy_sched, 4),
        "cpu_ms_per_1000": round(res.cpu_ms_per_1000, 3),
        "sched_ms_per_1000": round(res.sched_ms_per_1000, 3),
        "proxy_util": round(res.proxy_load_util, 3),
        "sipp_util": round(res.sipp_load_util, 3),
        "idle_cpu_ms_per_s": round(1000 * res.proxy_idle_cpu_per_s, 2),
        "drops": res.drops,
        "uac_exit": res.uac_exit,
        "wall_s": round(res.wall, 2),
    }
    if limited:
        start = res.t_start + args.warmup
        st = admission_stats(res.arrivals, start, start + args.duration, limit_per_s=r)
        st["max_1s_whole_run"] = max_in_window(res.arrivals, 1.0)
        row["accuracy"] = st
        # every INVITE not to +1555 should pass: admitted minus the matching ones at the UAS
        row["matching_at_uas"] = len(res.arrivals)
        row["other_sent"] = o["invites"] - (3 * o["invites"] + 3) // 4
        row["other_passed"] = o["answered_200"] - len(res.arrivals)
    return row


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(runs: list) -> list:
    """One row per (children, limit, variant): medians over repetitions, with the spread."""
    groups = {}
    for r in runs:
        groups.setdefault((r["children"], r["limit"], r["variant"]), []).append(r)
    rows = []
    for (children, limit, variant), rs in groups.items():
        row = {
            "children": children,
            "limit": limit,
            "offered_cps": rs[0]["offered_cps"],
            "variant": variant,
            "runs": len(rs),
            "admitted_median": median([x["admitted"] for x in rs]),
            "rejected_median": median([x["rejected_503"] for x in rs]),
            "messages_median": median([x["messages"] for x in rs]),
            "failed_calls_total": sum((x["failed_calls"] or 0) for x in rs),
            "retransmissions_total": sum((x["retransmissions"] or 0) for x in rs),
            "cpu_ms_per_1000_median": median([x["cpu_ms_per_1000"] for x in rs]),
            "cpu_ms_per_1000_all": [x["cpu_ms_per_1000"] for x in rs],
            "sched_ms_per_1000_median": median([x["sched_ms_per_1000"] for x in rs]),
            "sched_ms_per_1000_all": [x["sched_ms_per_1000"] for x in rs],
            "proxy_util_median": median([x["proxy_util"] for x in rs]),
            "sipp_util_median": median([x["sipp_util"] for x in rs]),
            "drops_proxy_max": max((x["drops"].get("proxy") or 0) for x in rs),
            "drops_uas_max": max((x["drops"].get("uas") or 0) for x in rs),
        }
        acc = [x["accuracy"] for x in rs if "accuracy" in x]
        if acc:
            row.update(
                {
                    "admitted_per_s_all": [a["admitted_per_s"] for a in acc],
                    "admitted_per_s_median": median([a["admitted_per_s"] for a in acc]),
                    "max_1s_all": [a["max_1s"] for a in acc],
                    "max_1s_whole_run_all": [a["max_1s_whole_run"] for a in acc],
                    "max_100ms_all": [a["max_100ms"] for a in acc],
                    "cv_100ms_median": median([a["cv_100ms"] for a in acc]),
                    "profile_100ms_first": acc[0].get("profile_100ms"),
                    "per_second_sample": acc[0].get("per_second", [])[:3],
                    "other_passed_all": [f"{x['other_passed']}/{x['other_sent']}" for x in rs],
                }
            )
        rows.append(row)
    return rows


def check(runs: list, args) -> list:
    """What CI requires: no failed call and no stray ACK in any run; the loadctl module within
    R ± 3 %, never more than r·(1 s + τ) + 1 in any sliding second (onset included), and every
    non-matching call passed. pipelimit's accuracy is reported, not judged."""
    problems = []
    for r in runs:
        tag = f"{r['variant']} children={r['children']} R={r['limit']}"
        if r["failed_calls"]:
            problems.append(f"{tag}: {r['failed_calls']} failed calls")
        if r["stray_acks_at_uas"]:
            problems.append(f"{tag}: {r['stray_acks_at_uas']} ACKs to Kamailio's 503s reached the UAS")
        if r["uac_exit"] is None:
            problems.append(f"{tag}: the UAC did not finish")
        if r["variant"] == "loadctl":
            a = r["accuracy"]
            bound = int(r["limit"] * (1.0 + TAU_S)) + 1
            if abs(a["admitted_per_s"] / r["limit"] - 1.0) > 0.03:
                problems.append(f"{tag}: {a['admitted_per_s']}/s admitted, limit {r['limit']} ± 3 %")
            if a["max_1s_whole_run"] > bound:
                problems.append(f"{tag}: {a['max_1s_whole_run']} admitted in one sliding second, bound r·(1 s + τ) + 1 = {bound}")
            if abs(r["other_passed"] - r["other_sent"]) > 1:
                problems.append(f"{tag}: {r['other_passed']} of {r['other_sent']} non-matching calls passed")
    return problems


def _fmt(x, nd=2):
    return "—" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def _spread(xs, nd=2):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    return f"{min(xs):.{nd}f}–{max(xs):.{nd}f}" if len(xs) > 1 else f"{xs[0]:.{nd}f}"


def report(summary: list, args) -> str:
    out = []
    by = {(s["children"], s["limit"], s["variant"]): s for s in summary}
    for children in args.children:
        out.append(f"### children={children}: accuracy (R on +1555, 3R offered to it + R not matching; {args.duration:g} s measured after {args.warmup:g} s)")
        out.append("")
        rows = []
        for r in args.limits:
            for v in ("pipelimit", "loadctl"):
                s = by.get((children, r, v))
                if not s or "max_1s_all" not in s:
                    continue
                rows.append(
                    [
                        f"{s['offered_cps']:g}",
                        r,
                        v,
                        s["runs"],
                        _spread(s["admitted_per_s_all"], 1),
                        f"{max(s['max_1s_all'])} / {max(s['max_1s_whole_run_all'])}",
                        max(s["max_100ms_all"]),
                        _fmt(s["cv_100ms_median"]),
                        s["failed_calls_total"],
                        ", ".join(s["other_passed_all"]),
                    ]
                )
        out.append(
            markdown_table(
                ["offered calls/s", "R", "limiter", "runs", "admitted/s", "max any 1 s (steady / incl. onset)", "max any 100 ms", "CV of 100 ms counts", "failed calls", "non-matching passed"],
                rows,
            )
        )
        out.append("")
        for r in args.limits:
            for v in ("pipelimit", "loadctl"):
                s = by.get((children, r, v))
                if s and s.get("per_second_sample"):
                    out.append(f"- R={r} {v}: admissions per 100 ms, first measured seconds: {s['per_second_sample']}")
        out.append("")
        out.append(f"### children={children}: CPU per 1,000 messages (all Kamailio processes, utime+stime; median of runs, range)")
        out.append("")
        rows = []
        for r in args.limits:
            none = by.get((children, r, "none"))
            for v in ("pipelimit", "loadctl", "pipelimit-pass", "loadctl-pass", "none"):
                s = by.get((children, r, v))
                if not s:
                    continue
                diff = ""
                if v.endswith("-pass") and none:
                    d = s["sched_ms_per_1000_median"] - none["sched_ms_per_1000_median"]
                    diff = f"{d:+.2f}"
                rows.append(
                    [
                        f"{s['offered_cps']:g}",
                        v,
                        s["runs"],
                        s["admitted_median"],
                        s["rejected_median"],
                        s["messages_median"],
                        _fmt(s["cpu_ms_per_1000_median"]),
                        _spread(s["cpu_ms_per_1000_all"]),
                        _fmt(s["sched_ms_per_1000_median"]),
                        diff,
                        f"{s['proxy_util_median']:.0%}",
                        f"{s['sipp_util_median']:.0%}",
                        s["failed_calls_total"],
                        s["retransmissions_total"],
                        f"{s['drops_proxy_max']}/{s['drops_uas_max']}",
                    ]
                )
        out.append(
            markdown_table(
                [
                    "offered calls/s",
                    "variant",
                    "runs",
                    "admitted",
                    "503",
                    "messages",
                    "CPU ms/1000 msgs (stat)",
                    "stat range",
                    "(schedstat)",
                    "− none (schedstat)",
                    "Kamailio core",
                    "SIPp core",
                    "failed",
                    "retrans",
                    "drops K/UAS",
                ],
                rows,
            )
        )
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", action="store_true", help="CI mode: children=4, R=100, loadctl/pipelimit/none once each, 6 s measured")
    ap.add_argument("--out", type=Path, help="write the results as JSON here (rewritten after every run)")
    ap.add_argument("--children", help="comma-separated Kamailio children counts (default 4,1; --short 4)")
    ap.add_argument("--limits", help="comma-separated R; each offered at 4R calls/s (default 100,750,2500; --short 100)")
    ap.add_argument("--variants", help=f"comma-separated from {','.join(VARIANTS)} (default all; --short pipelimit,loadctl,none)")
    ap.add_argument("--repeat", type=int, help="repetitions of every variant, interleaved (default 3, --short 1)")
    ap.add_argument("--duration", type=float, help="measured interval, s (default 10, --short 6)")
    ap.add_argument("--warmup", type=float, help="traffic before the measured interval, s (default 2, --short 1)")
    ap.add_argument("--pause-ms", type=int, default=200, help="call hold time between ACK and BYE (default 200 ms)")
    ap.add_argument("--proxy-cpu", type=int, default=1, help="core for Kamailio (default 1)")
    ap.add_argument("--sipp-cpu", type=int, default=0, help="core for both SIPp instances (default 0)")
    ap.add_argument("--idle-s", type=float, default=1.0, help="idle CPU reading before traffic (default 1 s)")
    ap.add_argument("--keep", action="store_true", help="keep every run's directory")
    ap.add_argument("--module", type=Path, default=MODULE, help=f"the loadctl module (default {MODULE.relative_to(REPO)})")
    ap.add_argument("--perf", type=Path, help="profile: run Kamailio under `perf record -e cpu-clock`, one DIR/<variant>-c<children>-r<R>.data per run (CPU figures then include perf's own)")
    args = ap.parse_args(argv)
    args.module = args.module.resolve()
    # kamailio_compare.traffic_run reads the SIP transport; this comparison is UDP only
    # (limiter-compare.cfg has TCP off).
    args.transport = "udp"

    args.children = [int(x) for x in (args.children or ("4" if args.short else "4,1")).split(",")]
    args.limits = [int(x) for x in (args.limits or ("100" if args.short else "100,750,2500")).split(",")]
    args.variants = (args.variants or ("pipelimit,loadctl,none" if args.short else ",".join(VARIANTS))).split(",")
    for v in args.variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}")
    args.repeat = args.repeat or (1 if args.short else 3)
    args.duration = args.duration or (6.0 if args.short else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if args.short else 2.0)
    # what kamailio_compare.traffic_run reads from args
    args.prefix, args.callee, args.callees = "+1555", MATCH, [MATCH, MATCH, MATCH, OTHER]

    for tool in ("sipp", "taskset", KAMAILIO):
        if not shutil.which(tool):
            print(f"{tool} is not installed (make e2e-tools)", file=sys.stderr)
            return 2
    if not args.module.exists():
        print(f"missing {args.module}: run `make kamailio-module`", file=sys.stderr)
        return 2

    results = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {
            "cores": os.cpu_count(),
            "kernel": platform.release(),
            "sipp": kc._version(["sipp", "-v"]),
            "kamailio": kc._version([KAMAILIO, "-v"]),
            "loadavg_start": os.getloadavg(),
        },
        "runs": [],
    }
    os.sched_setaffinity(0, {args.sipp_cpu})  # the script sleeps on SIPp's core
    t0 = time.monotonic()
    n = 0
    for children in args.children:
        for r in args.limits:
            for rep in range(args.repeat):
                k = rep % len(args.variants)
                order = args.variants[k:] + args.variants[:k]  # rotate: no variant always first
                for v in order:
                    n += 1
                    row = one_run(v, children, r, args)
                    row["rep"] = rep
                    row["loadavg"] = os.getloadavg()[0]
                    results["runs"].append(row)
                    acc = row.get("accuracy")
                    print(
                        f"[{time.monotonic() - t0:6.0f} s] children={children} R={r} {v:15s} rep {rep}: "
                        f"{row['cpu_ms_per_1000']:.2f} ms/1000 msgs (sched {row['sched_ms_per_1000']:.2f}), "
                        f"admitted {row['admitted']}, 503 {row['rejected_503']}, failed {row['failed_calls']}, retrans {row['retransmissions']}, "
                        f"core {row['proxy_util']:.0%}/{row['sipp_util']:.0%}"
                        + (f"; {acc['admitted_per_s']}/s, max 1 s {acc['max_1s']} ({acc['max_1s_whole_run']} incl. onset), max 100 ms {acc['max_100ms']}, other {row['other_passed']}/{row['other_sent']}" if acc else ""),
                        flush=True,
                    )
                    if args.out:
                        args.out.parent.mkdir(parents=True, exist_ok=True)
                        args.out.write_text(json.dumps(results, indent=1) + "\n")
    results["elapsed_s"] = round(time.monotonic() - t0, 1)
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["summary"] = summarise(results["runs"])
    text = report(results["summary"], args)
    print()
    print(text)
    print(f"\nelapsed {results['elapsed_s']} s, {n} runs")
    problems = check(results["runs"], args)
    results["problems"] = problems
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text + "\n")
        print(f"results written to {args.out} and {args.out.with_suffix('.md')}")
    for p in problems:
        print(f"CHECK FAILED: {p}", file=sys.stderr)
    if not problems:
        print("checks passed: loadctl within R ± 3 %, within r·(1 s + τ) + 1 in any second, no failed call")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
