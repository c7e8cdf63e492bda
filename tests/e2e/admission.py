"""When requests arrived at a SIPp UAS, and how admissions spread over time: the measure of
every rate a limiter is judged on.

scenarios/uas.xml logs one line per INVITE when SIPp reads it (``<log>`` action,
``-trace_logs``; SIPp flushes each line). ``read_arrivals()`` parses it; ``count_in()`` counts
the arrivals in an interval; ``admission_stats()`` gives the total admitted in an interval, the
most admitted in any sliding 1 s (and 100 ms) window, and how admissions spread inside each
second (the profile folded on the limiter's own intervals).

Python 3 standard library only.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Arrival:
    t: float  # epoch seconds (microsecond resolution), when SIPp read the request
    callee: str
    call_id: str
    method: str = "INVITE"


def read_arrivals(path: Path) -> list:
    """Parses a UAS -trace_logs file from scenarios/uas.xml or uas_noninvite.xml:
    '<date>\\t<time>\\t<epoch> <callee>@ <Call-ID> [<method>]' per line, sorted by time."""
    out = []
    try:
        f = open(path, errors="replace")
    except OSError:
        return out
    with f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                continue
            rest = parts[2].split()
            if len(rest) < 3:
                continue
            try:
                t = float(rest[0])
            except ValueError:
                continue
            method = rest[3] if len(rest) > 3 else "INVITE"
            out.append(Arrival(t, rest[1].rstrip("@"), rest[2], method))
    out.sort(key=lambda a: a.t)
    return out


def count_in(ts, start: float, end: float) -> int:
    """How many of the sorted times `ts` fall in [start, end)."""
    return bisect.bisect_left(ts, end) - bisect.bisect_left(ts, start)


def max_in_window(ts, window: float = 1.0) -> int:
    """The most of the sorted times `ts` inside any half-open window [t, t + window).
    (A window holding the most can always be slid right until it starts at an element.)"""
    best, j = 0, 0
    eps = 1e-7  # below the logs' microsecond resolution: float noise at the window's edge
    for i in range(len(ts)):
        while j < len(ts) and ts[j] < ts[i] + window - eps:
            j += 1
        best = max(best, j - i)
    return best


def bucket_counts(ts, start: float, end: float, width: float = 0.1) -> list:
    """Counts of the sorted times `ts` in consecutive buckets of `width` over [start, end)."""
    n = int(round((end - start) / width))
    out = [0] * n
    for t in ts:
        if start <= t < end:
            k = int((t - start) / width)
            if k < n:
                out[k] += 1
    return out


def coefficient_of_variation(xs) -> float:
    """Population standard deviation over mean (0 for an even spread)."""
    if not xs:
        return 0.0
    m = statistics.fmean(xs)
    return statistics.pstdev(xs) / m if m > 0 else 0.0


def folded_profile(ts, phase: float, period: float = 1.0, bins: int = 10) -> list:
    """Share of `ts` in each of `bins` slices of the period, counting time from `phase`."""
    counts = [0] * bins
    for t in ts:
        counts[int(((t - phase) % period) / period * bins) % bins] += 1
    total = sum(counts) or 1
    return [c / total for c in counts]


def limiter_phase(ts, period: float = 1.0, bins: int = 10, step: float = 0.005) -> float:
    """Where, modulo `period`, the admissions jump from few to many: the phase maximising the
    count in the slice after it minus the count in the slice before it (slices of
    period/bins). For an interval counter (TAILDROP) that is the instant each interval's quota
    opens; for an even spread it is arbitrary, and the folded profile flat whatever it is."""
    fracs = sorted((t % period) for t in ts)
    width = period / bins

    def n_in(lo):  # how many fracs fall in [lo, lo + width), modulo period
        lo %= period
        hi = lo + width
        n = bisect.bisect_left(fracs, min(hi, period)) - bisect.bisect_left(fracs, lo)
        if hi > period:
            n += bisect.bisect_left(fracs, hi - period)
        return n

    best, best_phase = None, 0.0
    for k in range(int(round(period / step))):
        ph = k * step
        score = n_in(ph) - n_in(ph - width)
        if best is None or score > best:
            best, best_phase = score, ph
    return best_phase


def admission_stats(ts, start: float, end: float, limit_per_s=None, period: float = 1.0) -> dict:
    """Accuracy and spread of admissions (sorted arrival times `ts`) over [start, end):

    admitted            total admitted in the interval
    admitted_per_s      admitted / interval length
    error_vs_limit      admitted_per_s / limit - 1 (with a limit)
    max_1s              the most admitted in any sliding 1 s window inside the interval
    max_100ms           the most admitted in any sliding 100 ms window (even spread: limit/10)
    cv_100ms            coefficient of variation of consecutive 100 ms bucket counts (even: ~0)
    phase               estimated start of the limiter's own 1 s intervals (mod 1 s, epoch)
    profile_100ms       share of admissions in each 100 ms of the limiter's second (folded on
                        `phase`; even spread: 0.1 each)
    first_100ms_share   profile_100ms[0]: share of each second's admissions in its first 100 ms
    busy_fraction       share of 100 ms buckets that admitted anything
    per_second          admissions per limiter second, each split in ten 100 ms buckets
    """
    inside = [t for t in ts if start <= t < end]
    length = end - start
    out = {
        "interval_s": round(length, 3),
        "admitted": len(inside),
        "admitted_per_s": round(len(inside) / length, 3) if length > 0 else 0.0,
        "max_1s": max_in_window(inside, 1.0),
        "max_100ms": max_in_window(inside, 0.1),
    }
    if limit_per_s:
        out["limit_per_s"] = limit_per_s
        out["error_vs_limit"] = round(out["admitted_per_s"] / limit_per_s - 1.0, 4)
        out["max_1s_over_limit"] = round(out["max_1s"] / limit_per_s, 3)
    buckets = bucket_counts(inside, start, end, 0.1)
    out["cv_100ms"] = round(coefficient_of_variation(buckets), 3)
    out["busy_fraction"] = round(sum(1 for b in buckets if b) / len(buckets), 3) if buckets else 0.0
    if inside:
        phase = limiter_phase(inside, period)
        prof = folded_profile(inside, phase, period)
        out["phase"] = round(phase, 3)
        out["profile_100ms"] = [round(x, 3) for x in prof]
        out["first_100ms_share"] = round(prof[0], 3)
        # per limiter-second breakdown, whole seconds inside the interval only
        first = start + ((phase - start) % period)
        secs = []
        s = first
        while s + period <= end + 1e-9:
            secs.append(bucket_counts(inside, s, s + period, period / 10))
            s += period
        out["per_second"] = secs
    return out
