#!/usr/bin/env python3
"""Instructions the edge spends per call, counted by callgrind on the edge itself under SIPp.

The edge (`target/edge`, one worker) runs under `valgrind --tool=callgrind
--toggle-collect=handle`, so what is counted is `handle()` and everything it calls — validation,
the library's scan, detector and classification, the answer or the forwarded copy, the
response's way back — and not the read loop or the system calls. A SIPp UAC makes `--calls`
calls (INVITE, and ACK / BYE when answered) at `--rate` to one callee through it, a SIPp UAS
answers; the edge's one rule limits that callee to `--limit` calls/s:

  python3 tests/e2e/edge_callgrind.py --limit 0        # every call answered 503: the reject path
  python3 tests/e2e/edge_callgrind.py --limit 100000   # every call admitted: the forward path

prints the instructions counted, per call (JSON with --json). Instruction counts do not depend
on the machine's speed or its neighbours, so two builds can be compared from runs at different
times; callgrind makes the edge ~50x slower, so keep --rate low enough for it (default 200).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kamailio_compare import edge_policy  # noqa: E402
from ports import free_udp_port, wait_udp_port  # noqa: E402
from processes import Run, wait_until  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent


def collected(out_file: Path) -> int:
    """The instructions callgrind collected (its `summary:` line; with --toggle-collect, only
    inside the toggled function)."""
    for line in out_file.read_text().splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {out_file}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=0, help="the rule's calls/s (0: every call rejected; default 0)")
    ap.add_argument("--calls", type=int, default=2000, help="calls the UAC makes (default 2000)")
    ap.add_argument("--rate", type=float, default=200.0, help="calls/s (default 200)")
    ap.add_argument("--edge", type=Path, default=REPO / "target" / "edge", help="the edge binary (default target/edge)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    for tool in ("valgrind", "sipp"):
        if not shutil.which(tool):
            print(f"{tool} is not installed", file=sys.stderr)
            return 2
    if not args.edge.exists():
        print(f"{args.edge} is not built (make edge)", file=sys.stderr)
        return 2
    with Run("edge-callgrind") as run:
        uas_ports, uac_ports = SippPorts.pick(), SippPorts.pick()
        guard = args.calls / args.rate + 60
        uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=guard + 30, logs=False), cpu=0)
        wait_udp_port(uas_ports.sip, proc=uas)
        listen = free_udp_port(tcp=True)
        policy = run.path("policy.xml")
        policy.write_text(edge_policy("+1555", args.limit))
        out = run.path("callgrind.out")
        edge = run.start(
            "edge",
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--toggle-collect=handle", str(args.edge),
             "--listen", f"127.0.0.1:{listen}", "--next-hop", f"127.0.0.1:{uas_ports.sip}", "--policy", str(policy), "--workers", "1"],
            cpu=1,
        )
        wait_udp_port(listen, proc=edge, timeout=60)
        inf = write_injection(run.path("callees.csv"), ["+15550001234"])
        uac = run.start(
            "uac",
            sipp_command("uac_invite.xml", uac_ports, remote=f"127.0.0.1:{listen}", inf=inf, rate=args.rate, calls=args.calls,
                         duration_ms=200, max_concurrent=5000, timeout_s=guard, logs=False),
            cpu=0,
        )
        wait_until(lambda: not uac.running(), guard + 15, interval=0.2)
        time.sleep(1.0)  # the last BYE's 200 on its way back through the edge
        outcomes = invite_outcomes(SippOutputs(uac.cwd))
        edge.send_signal(signal.SIGTERM)
        if not wait_until(lambda: not edge.alive(), 30):
            print(f"the edge did not exit; logs in {run.dir}", file=sys.stderr)
            return 1
        ir = collected(out)
    result = {
        "limit": args.limit,
        "calls": args.calls,
        "answered_200": outcomes["answered_200"],
        "rejected_503": outcomes["rejected_503"],
        "failed_calls": outcomes["failed_calls"],
        "retransmissions": outcomes["retransmissions"],
        "instructions": ir,
        "instructions_per_call": round(ir / args.calls),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{ir:,} instructions in handle() for {args.calls} calls ({result['answered_200']} answered 200, "
            f"{result['rejected_503']} 503, {result['failed_calls']} failed, {result['retransmissions']} retransmissions): "
            f"{result['instructions_per_call']:,} per call"
        )
    clean = outcomes["failed_calls"] == 0 and outcomes["retransmissions"] == 0
    if not clean:
        print("calls failed or were retransmitted: the count includes repeats; lower --rate", file=sys.stderr)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
