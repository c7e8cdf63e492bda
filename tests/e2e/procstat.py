"""What /proc says about running processes: their descendants and the CPU time they used.

The CPU figures (per 1,000 messages, a core's share) must count a program together with every
process it forked (Kamailio's workers and timers), and utime+stime alone is coarse for a program
that runs in bursts shorter than a clock tick, so both readings are here:

- ``cpu_seconds(pids)`` sums utime+stime from /proc/PID/stat (clock ticks, 10 ms on this
  kernel); ``sched_seconds(pids)`` the scheduler's exact on-CPU time (/proc/PID/schedstat), a
  cross-check for processes that run in bursts shorter than a tick.
- ``descendants(pid)``: every live process below one (by scanning /proc), so that a reading
  covers a program and its children; ``stat_fields(pid)``: one process's /proc/PID/stat.

Python 3 standard library only.
"""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int):
    """Fields of /proc/PID/stat after the command name (which may contain spaces), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def descendants(pid: int) -> list:
    """Live descendants of `pid` (children, grandchildren, ...), by scanning /proc."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(int(entry))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(entry))  # field 4: ppid
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cpu_ticks(pid: int) -> int:
    """utime + stime of one process in clock ticks (0 if it is gone)."""
    fields = stat_fields(pid)
    if not fields:
        return 0
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)


def cpu_seconds(pids) -> float:
    """utime + stime summed over `pids`, in seconds (/proc/PID/stat, clock ticks / CLK_TCK)."""
    return sum(cpu_ticks(p) for p in pids) / CLK_TCK


def sched_ns(pid: int) -> int:
    """Time on CPU of every thread of one process in nanoseconds, from the scheduler's own
    accounting (/proc/PID/task/TID/schedstat, first field). Unlike utime+stime, which the kernel
    charges a whole tick at a time to whoever is running when the tick fires, this is exact
    for processes that run in bursts much shorter than a tick (a proxy at a few % of a core)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = [str(pid)]
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def sched_seconds(pids) -> float:
    """Scheduler on-CPU time summed over `pids`, in seconds (see sched_ns)."""
    return sum(sched_ns(p) for p in pids) / 1e9
