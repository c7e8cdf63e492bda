"""The checks a scenario makes and how a suite runs its scenarios.

``Checks`` collects a scenario's verdicts, each printed with the numbers it saw (a rate against
a limit within TOLERANCE, a share that passed, every matching call passing, any condition);
``run_tests()`` is every suite's runner and ``suite_main()`` the command line of the suites
that take only ``[--keep] [NAME …]``; ``run_tests()`` runs: the scenarios named on the command line (all by
default), each in its own ``Run`` (its directory kept when it fails or with --keep), a summary
line, the exit status, and with NEIGHBOUR=1 a busy CPU beside them. One runner and one report
format, so every suite is run and read the same way.

Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable, Union

from admission import count_in
from processes import HarnessError, Neighbour, Run

TOLERANCE = 0.03


class Checks:
    def __init__(self, name: str):
        self.name = name
        self.failed = []
        self.lines = []

    def rate(self, label: str, ts, start: float, end: float, expected: float, tolerance: float = TOLERANCE):
        n = count_in(ts, start, end)
        got = n / (end - start)
        ok = abs(got / expected - 1.0) <= tolerance
        self.record(ok, f"{label}: {n} in {end - start:.2f} s = {got:.2f}/s, expected {expected:g}/s ± {tolerance:.0%}")

    def steady_rate(self, label: str, ts, expected: float, none: str, tolerance: float = TOLERANCE):
        """`rate` from 1 s after the first arrival to 0.5 s before the last (the onset and the
        tail left out); a failure saying `none` when nothing arrived."""
        if ts:
            self.rate(label, ts, ts[0] + 1.0, ts[-1] - 0.5, expected, tolerance)
        else:
            self.record(False, none)

    def passed_share(self, label: str, passed, shed, start: float, end: float, expected: float, tolerance: float):
        """Of the requests decided in [start, end), the share that passed: `passed` are their
        arrival times downstream, `shed` the times their rejections came back. A share of
        what was offered, so a pause of the load generator and the burst that catches up after
        it (SIPp sends missed calls late) change both counts alike; a rate would count them."""
        n, s = count_in(passed, start, end), count_in(shed, start, end)
        got = n / (n + s) if n + s else 0.0
        ok = n + s >= 100 and abs(got - expected) <= tolerance
        self.record(ok, f"{label}: {n} passed and {s} shed in {end - start:.2f} s = {got:.1%} passed, expected {expected:.0%} ± {tolerance:.1%} (at least 100 decided)")

    def all_pass(self, label: str, matching, other, start: float, end: float, per_other: int = 3):
        """Every matching call offered in [start, end) reached the UAS: the UAC's injection file
        repeats `per_other` matching callees then one other, and other calls always pass, so
        the UAS sees `per_other` matching per other call. Judged on counts, not on time, so a
        pause of the load generator (or the machine) inside the window cannot fail it; a rule
        that still refuses more than 1 % of the matching calls does."""
        n, o = count_in(matching, start, end), count_in(other, start, end)
        slack = per_other + 0.01 * per_other * o
        ok = o >= 50 and abs(n - per_other * o) <= slack
        self.record(ok, f"{label}: {n} matching beside {o} other in {end - start:.2f} s, expected {per_other} × {o} ± {slack:.0f} (at least 50 other)")

    def that(self, ok: bool, what: str):
        self.record(ok, what)

    def record(self, ok: bool, what: str):
        self.lines.append(("ok  " if ok else "FAIL") + "  " + what)
        if not ok:
            self.failed.append(what)

    def report(self) -> bool:
        print(f"== {self.name}")
        for line in self.lines:
            print("   " + line)
        return not self.failed


def run_tests(tests: dict, names: list, keep: bool, label: str, prefix: str = "") -> int:
    """Runs `names` (all of `tests` when empty), each in its own `Run` (kept when it fails or
    with `keep`), prints each test's checks and a summary line; the exit status."""
    started_all = time.monotonic()
    unknown = [name for name in names if name not in tests]
    if unknown:
        print(f"unknown test {unknown[0]}", file=sys.stderr)
        return 2
    with Neighbour():
        failed = _run_each(tests, names, keep, prefix)
    n = len(names or tests)
    print(f"{label}{' (NEIGHBOUR=1)' if os.environ.get('NEIGHBOUR') == '1' else ''}: {n} tests, {len(failed)} failed "
          f"{failed if failed else ''} ({time.monotonic() - started_all:.0f} s)")
    return 1 if failed else 0


def _run_each(tests: dict, names: list, keep: bool, prefix: str) -> list:
    failed = []
    for name in names or tests:
        started = time.monotonic()
        try:
            with Run(f"{prefix}{name}", keep=keep) as run:
                ok = tests[name](run).report()
                if not ok:
                    run.keep = True
        except Exception as e:  # a harness error is a failed test, with its logs kept
            print(f"== {name}\n   FAIL  {type(e).__name__}: {e}")
            ok = False
        print(f"   ({time.monotonic() - started:.1f} s)")
        if not ok:
            failed.append(name)
    return failed


def suite_main(doc: str, tests: dict, label: Union[str, Callable[[], str]], prefix: str = "", needs: tuple = ()) -> int:
    """A suite's command line, ``[--keep] [NAME …]`` (its help: ``doc``), then ``run_tests``.
    ``needs``: the programs the suite runs, each checked first (one missing: exit 2). ``label``:
    the summary line's label, or a function that finds what the suite runs against (its
    Kamailio) and returns the label; a HarnessError there exits 2."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep every run directory (logs, traces)")
    ap.add_argument("names", nargs="*", help=f"tests to run (default all): {', '.join(tests)}")
    args = ap.parse_args()
    for tool in needs:
        if not Path(tool).exists():
            print(f"missing {tool}: run `make e2e`, which builds it", file=sys.stderr)
            return 2
    if callable(label):
        try:
            label = label()
        except HarnessError as e:
            print(e, file=sys.stderr)
            return 2
    return run_tests(tests, args.names, args.keep, label, prefix=prefix)
