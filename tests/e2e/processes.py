"""The programs a test starts, each in a process group of its own with its logs in a per-run
directory, and none of them left running when the test ends, however it ends.

A failed or interrupted suite must not leave a SIPp or a Kamailio behind to disturb the next one,
and the logs of a failed test must stay readable:

- ``Run``: a per-run temporary directory and every process started in it. Each process gets
  its own session (so its own process group, which holds Kamailio's forked workers too), its
  stdout/stderr in log files under the run directory, and optionally a core (``taskset``).
  ``Run.stop_all()`` signals every group (TERM, then KILL); it runs on ``with``-exit, on
  interpreter exit (atexit) and on SIGTERM/SIGINT/SIGHUP, so no SIPp or Kamailio outlives a
  failed test.
- ``Proc``: one started program (exit code, signals, the tail of its logs); ``Proc.cpu_both()``
  and ``CpuMeter`` give the CPU time of a process and all its descendants.
- ``Neighbour``: with NEIGHBOUR=1, a busy CPU beside a suite.
- ``wait_until()``: polls a condition until a deadline.

Python 3 standard library only.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from procstat import cpu_seconds, descendants, sched_seconds, stat_fields


class HarnessError(RuntimeError):
    """A process or port did not behave (the message names which, and where its logs are)."""


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    """Polls `predicate` every `interval` s until it holds or `timeout` s have passed; whether it
    held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


@dataclass
class Proc:
    """One started program: its Popen, its log files, and its process group."""

    name: str
    argv: list
    popen: subprocess.Popen
    stdout_path: Path
    stderr_path: Path
    cwd: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def returncode(self):
        return self.popen.poll()

    def wait(self, timeout=None):
        """Waits for the program to exit; returns its exit code (HarnessError on timeout)."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"{self.name} (pid {self.pid}) still running after {timeout} s; logs in {self.cwd}")

    def running(self) -> bool:
        """Whether the process has not exited yet, without reaping it (a zombie is not running;
        its CPU times stay readable until Popen reaps it)."""
        fields = stat_fields(self.pid)
        return fields is not None and fields[0] not in ("Z", "X")

    def wait_cpu(self, timeout=None):
        """Waits for the program to exit and returns (exit code, (utime+stime, scheduler
        on-CPU time)) in seconds, with its descendants. The CPU is read from /proc while the
        process is a zombie, just before it is reaped (polling its state every 50 ms, which
        costs next to nothing). HarnessError on timeout."""
        if not wait_until(lambda: not self.running(), timeout if timeout is not None else 1e9):
            raise HarnessError(f"{self.name} (pid {self.pid}) still running after {timeout} s; logs in {self.cwd}")
        used = self.cpu_both()
        return self.popen.wait(), used

    def send_signal(self, sig) -> None:
        if self.alive():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def pids(self) -> list:
        """This process and every live descendant (Kamailio's workers and timers, ...)."""
        return [self.pid] + descendants(self.pid)

    def cpu_seconds(self) -> float:
        """utime+stime of this process and its live descendants, in seconds."""
        return cpu_seconds(self.pids())

    def cpu_both(self):
        """(utime+stime, scheduler on-CPU time) of this process and its live descendants."""
        pids = self.pids()
        return cpu_seconds(pids), sched_seconds(pids)

    def stop(self, timeout: float = 5.0, sig=signal.SIGTERM) -> None:
        """Signals the whole process group, waits, then kills what is left."""
        stop_group(self.popen, timeout, sig)

    def tail(self, lines: int = 20) -> str:
        out = []
        for p in (self.stdout_path, self.stderr_path):
            try:
                text = p.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            if text:
                out.append(f"--- {p.name}\n" + "\n".join(text))
        return "\n".join(out)


_LIVE: list = []  # every Popen started by any Run in this interpreter, for the exit hooks


def stop_group(popen: subprocess.Popen, timeout: float = 5.0, sig=signal.SIGTERM) -> None:
    """TERM (or `sig`) to the process group, wait up to `timeout`, then KILL the group."""
    pgid = popen.pid  # start_new_session=True: the child leads its own group
    if popen.poll() is None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        try:
            popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    # The leader may be gone while forked members linger (Kamailio's children): KILL the group.
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        popen.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass


def _stop_everything() -> None:
    while _LIVE:
        popen = _LIVE.pop()
        try:
            stop_group(popen, timeout=2)
        except Exception:  # an exit hook must not raise
            pass


def _on_signal(signum, frame):
    _stop_everything()
    # Let finally-blocks and the caller see an ordinary exit.
    raise SystemExit(128 + signum)


atexit.register(_stop_everything)
for _sig in (signal.SIGTERM, signal.SIGHUP):
    try:
        signal.signal(_sig, _on_signal)
    except (ValueError, OSError):  # not the main thread
        pass
# SIGINT raises KeyboardInterrupt (`with Run()` and atexit clean up on it), also when the
# harness was started in the background by a shell that had SIGINT ignored.
try:
    signal.signal(signal.SIGINT, signal.default_int_handler)
except (ValueError, OSError):
    pass


def run_base():
    """Where run directories go: $LOADCTL_E2E_DIR if set, else /dev/shm when it is a writable
    tmpfs, else the temporary directory. Every process under measurement writes its logs and
    statistics there, and on a disk those writes can block for seconds while the file system
    commits other work (a fresh-clone CI run saw the UAC, the UAS and the notifier SIPp all
    write no statistics line for 8.7 s at once, a few minutes after a large build); a RAM disk
    does not wait on the disk."""
    explicit = os.environ.get("LOADCTL_E2E_DIR")
    if explicit:
        return explicit
    shm = Path("/dev/shm")
    try:
        with open("/proc/mounts") as mounts:
            tmpfs = any(line.split()[1:3] == [str(shm), "tmpfs"] for line in mounts if len(line.split()) > 2)
    except OSError:
        tmpfs = False
    return str(shm) if tmpfs and os.access(shm, os.W_OK | os.X_OK) else None


class Neighbour:
    """With NEIGHBOUR=1 in the environment: a process that keeps one CPU busy (a spin loop
    pinned to the last CPU) while the suite runs, as another job on a CI machine would; the
    suites' timing-sensitive checks must hold beside it. A context manager; without
    NEIGHBOUR=1 it does nothing."""

    def __init__(self):
        self.proc = None

    def __enter__(self):
        if os.environ.get("NEIGHBOUR") != "1":
            return self
        cpu = max(os.sched_getaffinity(0))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"])
        print(f"[harness] NEIGHBOUR=1: process {self.proc.pid} keeps CPU {cpu} busy while the suite runs", flush=True)
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        return False


class Run:
    """A per-run directory and the processes started in it; a context manager.

    with Run("accuracy") as run:
        uas = run.start("uas", [...], cpu=0)
        ...
    Everything still running is stopped on exit from the block, whatever the reason. The
    directory is removed afterwards unless `keep` is true or the block raised (then its path is
    printed so the logs can be read).
    """

    def __init__(self, name: str = "e2e", keep: bool = False, base=None):
        self.dir = Path(tempfile.mkdtemp(prefix=f"loadctl-{name}-", dir=base or run_base()))
        self.keep = keep
        self.procs: list = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop_all()
        if exc_type is not None or self.keep:
            kept = self.dir
            if kept.parent != Path(tempfile.gettempdir()):
                # Off the RAM disk, so that kept logs neither fill it nor vanish at a reboot.
                try:
                    kept = Path(tempfile.gettempdir()) / kept.name
                    shutil.move(str(self.dir), str(kept))
                except OSError:
                    kept = self.dir
            print(f"[harness] logs kept in {kept}", flush=True)
        else:
            _rmtree(self.dir)
        return False

    def path(self, *parts) -> Path:
        p = self.dir.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def start(self, name: str, argv, cpu=None, cwd=None, env=None) -> Proc:
        """Starts `argv` in the background: own session/process group, stdin from /dev/null,
        stdout and stderr to <run dir>/<name>/{stdout,stderr}.log, working directory
        <run dir>/<name>/ unless `cwd` is given, pinned to core `cpu` with taskset if given."""
        argv = [str(a) for a in argv]
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu)] + argv
        work = Path(cwd) if cwd else self.path(name)
        work.mkdir(parents=True, exist_ok=True)
        out_path, err_path = work / "stdout.log", work / "stderr.log"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=work, env=env, start_new_session=True)
        _LIVE.append(popen)
        proc = Proc(name, argv, popen, out_path, err_path, work)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, timeout: float = 5.0, sig=signal.SIGTERM) -> None:
        proc.stop(timeout, sig)
        if proc.popen in _LIVE:
            _LIVE.remove(proc.popen)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc, timeout=3)


def _rmtree(path: Path) -> None:
    for root, dirs, files in os.walk(path, topdown=False):
        for f in files:
            try:
                os.unlink(os.path.join(root, f))
            except OSError:
                pass
        for d in dirs:
            try:
                os.rmdir(os.path.join(root, d))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


class CpuMeter:
    """CPU seconds a process and its descendants used between start() and stop(), both as
    utime+stime (/proc/PID/stat, what `cpu` gives) and as scheduler on-CPU time (`sched`).

    The set of processes is re-read at each reading (descendants may be forked late); one that
    exits in between loses its ticks, which does not happen to the long-lived proxies here.
    """

    def __init__(self, proc: Proc):
        self.proc = proc
        self.t0 = self.t1 = None
        self.c0 = self.c1 = (0.0, 0.0)

    def start(self):
        self.t0, self.c0 = time.monotonic(), self.proc.cpu_both()
        return self

    def stop(self):
        self.t1, self.c1 = time.monotonic(), self.proc.cpu_both()
        return self

    @property
    def cpu(self) -> float:
        return self.c1[0] - self.c0[0]

    @property
    def sched(self) -> float:
        return self.c1[1] - self.c0[1]

    @property
    def wall(self) -> float:
        return self.t1 - self.t0

    @property
    def utilisation(self) -> float:
        """Share of one core: CPU seconds (utime+stime) per wall second."""
        return self.cpu / self.wall if self.wall > 0 else 0.0
