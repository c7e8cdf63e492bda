"""End-to-end harness: real SIP programs on loopback, started and cleaned up by the tests.

Python 3 standard library only. What it gives a test:

- ``Run``: a per-run temporary directory and every process started in it. Each process gets
  its own session (so its own process group, which holds Kamailio's forked workers too), its
  stdout/stderr in log files under the run directory, and optionally a core (``taskset``).
  ``Run.stop_all()`` signals every group (TERM, then KILL); it runs on ``with``-exit, on
  interpreter exit (atexit) and on SIGTERM/SIGINT/SIGHUP, so no SIPp or Kamailio outlives a
  failed test.
- Ports: ``free_udp_port()`` picks loopback UDP ports that are bindable now (with extra offsets
  when a program binds a neighbour too, like SIPp's media ports) and never hands out the same
  port twice in one process; ``wait_udp_port()`` waits until a port is bound (/proc/net/udp);
  ``udp_drops()`` reads how many datagrams the kernel dropped at one socket (its receive
  buffer was full: the program behind it did not keep up).
- CPU: ``cpu_seconds(pids)`` sums utime+stime from /proc/PID/stat (clock ticks, 10 ms on this
  kernel); ``sched_seconds(pids)`` the scheduler's exact on-CPU time (/proc/PID/schedstat), a
  cross-check for processes that run in bursts shorter than a tick; ``Proc.cpu_both()`` and
  ``CpuMeter`` cover a process and all its descendants.
- SIPp: ``sipp_command()`` builds a command line with the options every run needs (loopback
  addresses, explicit media and control ports, ``-buff_size 4194304``, ``-trace_stat``,
  ``-trace_counts``, ``-trace_err``, ``-timeout`` with ``-timeout_error``), and
  ``SippOutputs`` reads what a finished SIPp left: the last ``-trace_stat`` row (successful /
  failed calls, retransmissions, ...), the ``-trace_counts`` per-message totals (so the 200 /
  503 / 302 outcomes of scenarios/uac_invite.xml are told apart), and the UAS arrival log.
- Arrivals: scenarios/uas.xml logs one line per INVITE when SIPp reads it (``<log>`` action,
  ``-trace_logs``; SIPp flushes each line). ``read_arrivals()`` parses it; ``admission_stats()``
  gives the total admitted in an interval, the most admitted in any sliding 1 s (and 100 ms)
  window, and how admissions spread inside each second.
"""

from __future__ import annotations

import atexit
import bisect
import csv
import glob
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import sys
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
CLK_TCK = os.sysconf("SC_CLK_TCK")
SIPP_BUFF_SIZE = 4194304

# ---------------------------------------------------------------------------------------------
# processes


class HarnessError(RuntimeError):
    """A process or port did not behave (the message names which, and where its logs are)."""


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
        fields = _stat_fields(self.pid)
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


# ---------------------------------------------------------------------------------------------
# /proc: descendants, CPU time


def _stat_fields(pid: int):
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
        fields = _stat_fields(int(entry))
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
    fields = _stat_fields(pid)
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


# ---------------------------------------------------------------------------------------------
# ports

_HANDED_OUT: set = set()


def _bindable(port: int, host: str) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _bindable_tcp(port: int, host: str) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_udp_port(offsets=(0,), host: str = "127.0.0.1", low: int = 20000, high: int = 60000, tcp: bool = False) -> int:
    """A UDP port P such that P+o is bindable on `host` (and on 0.0.0.0) for every o in
    `offsets`, and that this process has not handed out before (nor any P+o). With `tcp`, P is
    free for TCP too (a program listening on both, like the edge, or SIPp over TCP)."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(2000):
        port = rng.randrange(low, high - max(offsets))
        wanted = [port + o for o in offsets]
        if any(p in _HANDED_OUT for p in wanted):
            continue
        if all(_bindable(p, host) and _bindable(p, "0.0.0.0") for p in wanted) and (
            not tcp or (_bindable_tcp(port, host) and _bindable_tcp(port, "0.0.0.0"))
        ):
            _HANDED_OUT.update(wanted)
            return port
    raise HarnessError("no free UDP port found")


def _sockets(table: str, port: int, host: str):
    """The rows (split into columns) of /proc/net/`table` (tcp, udp) for sockets on `port` on
    `host` or on the wildcard address; none when the table cannot be read."""
    # The address is printed as the in-memory (network order) u32 in host order.
    want = {f"{int.from_bytes(socket.inet_aton(host), 'little'):08X}", "00000000"}
    found = []
    try:
        with open(f"/proc/net/{table}") as f:
            next(f)
            for line in f:
                cols = line.split()
                addr, hexport = cols[1].split(":")
                if int(hexport, 16) == port and addr in want:
                    found.append(cols)
    except OSError:
        pass
    return found


def tcp_listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether some socket listens on TCP `port` on `host` or on the wildcard address."""
    return any(c[3] == "0A" for c in _sockets("tcp", port, host))  # TCP_LISTEN


def _wait_port(bound, what: str, port: int, host: str, timeout: float, proc) -> None:
    """Waits until `bound(port, host)`; fails early (with the logs) if `proc` exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if bound(port, host):
            return
        if proc is not None and not proc.alive():
            raise HarnessError(f"{proc.name} exited with {proc.returncode()} before {what} {host}:{port}\n{proc.tail()}")
        time.sleep(0.02)
    detail = f"\n{proc.tail()}" if proc is not None else ""
    raise HarnessError(f"{what} {host}:{port}: not ready after {timeout} s{detail}")


def wait_tcp_port(port: int, host: str = "127.0.0.1", timeout: float = 10.0, proc=None) -> None:
    """Waits until something listens on TCP `port`; fails early (with the logs) if `proc` exits."""
    _wait_port(tcp_listening, "listening on tcp", port, host, timeout, proc)


def udp_bound(port: int, host: str = "127.0.0.1") -> bool:
    """Whether some socket is bound to UDP `port` on `host` or on the wildcard address."""
    return bool(_sockets("udp", port, host))


def udp_drops(port: int, host: str = "127.0.0.1"):
    """Datagrams the kernel dropped for the socket bound to UDP `port` (receive buffer full),
    from the last column of /proc/net/udp; None if no such socket. Counts for the socket's
    lifetime: read it before the program exits."""
    rows = _sockets("udp", port, host)
    return sum(int(c[-1]) for c in rows) if rows else None


def udp_stats() -> dict:
    """The system-wide UDP counters of /proc/net/snmp (InDatagrams, RcvbufErrors, ...)."""
    try:
        with open("/proc/net/snmp") as f:
            lines = [l.split() for l in f if l.startswith("Udp:")]
        return {k: int(v) for k, v in zip(lines[0][1:], lines[1][1:])}
    except (OSError, IndexError, ValueError):
        return {}


def wait_udp_port(port: int, host: str = "127.0.0.1", timeout: float = 10.0, proc=None) -> None:
    """Waits until UDP `port` is bound; fails early (with the logs) if `proc` exits first."""
    _wait_port(udp_bound, "binding udp", port, host, timeout, proc)


# ---------------------------------------------------------------------------------------------
# SIPp


class KamailioBuild:
    """One Kamailio that the module was built for and gated against (kamailio/build.sh writes
    build.json beside the module): its binary, module directory, the loadctl.so for it.
    LOADCTL_KAMAILIO_BUILD names the directory (default target/kamailio: Debian's kamailio)."""

    def __init__(self, directory=None):
        root = HERE.parents[1]
        self.dir = Path(directory or os.environ.get("LOADCTL_KAMAILIO_BUILD") or root / "target" / "kamailio")
        path = self.dir / "build.json"
        if not path.exists():
            raise HarnessError(f"{path} missing: build the module first (make kamailio-module, or "
                               f"kamailio/build.sh --source SRC for a release)")
        info = json.loads(path.read_text())
        self.version = info["version"]
        self.binary = info["kamailio"]
        self.mpath = info["mpath"]
        self.module = Path(info["module"])
        self.label = info["label"]
        self.major_minor = tuple(int(x) for x in self.version.split(".")[:2])

    def defines(self) -> list:
        """The -A arguments every test configuration takes: the module and the module path."""
        return ["-A", f'LOADCTL_SO="{self.module}"', "-A", f'MPATH="{self.mpath}/"']


def jsonrpc(port: int, method: str, *params, timeout: float = 3.0) -> dict:
    """One JSON-RPC request to Kamailio's jsonrpcs datagram socket on 127.0.0.1:`port`; the
    whole response object."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", 0))
        s.settimeout(timeout)
        s.sendto(json.dumps({"jsonrpc": "2.0", "method": method, "params": list(params), "id": 1}).encode(), ("127.0.0.1", port))
        return json.loads(s.recv(1 << 20))
    finally:
        s.close()


def write_injection(path: Path, rows) -> Path:
    """An -inf file: SEQUENTIAL, one call per row, fields separated by ';' (field0 = callee,
    field1 = method for uac_noninvite.xml). SIPp cycles through the rows."""
    with open(path, "w") as f:
        f.write("SEQUENTIAL\n")
        for row in rows:
            if isinstance(row, str):
                row = [row]
            f.write(";".join(row) + ";\n")
    return path


@dataclass
class SippPorts:
    """The ports one SIPp instance binds: SIP, media (mp and mp+2), control (on 0.0.0.0)."""

    sip: int
    media: int
    control: int

    @staticmethod
    def pick(tcp: bool = False) -> "SippPorts":
        """With `tcp`, the SIP port is free for TCP as well (SIPp run with -t t1 / -t tn)."""
        return SippPorts(free_udp_port(tcp=tcp), free_udp_port(offsets=(0, 1, 2, 3)), free_udp_port())


def sipp_command(
    scenario,
    ports: SippPorts,
    remote=None,
    inf=None,
    rate=None,
    rate_period_ms=None,
    calls=None,
    duration_ms=None,
    max_concurrent=None,
    timeout_s=None,
    logs=True,
    transport=None,
    extra=(),
) -> list:
    """A SIPp command line. `scenario`: a file name under scenarios/ or a path. `remote`:
    "IP:PORT" for a UAC. `transport`: SIPp's -t (t1: every call on one TCP connection, tn: one
    connection per call; default UDP). Output files get fixed names in SIPp's working directory (the Proc's
    directory): stat.csv, errors.log, logs.log (with `logs`), and <scenario>_<pid>_counts.csv.
    """
    scenario = Path(scenario)
    if not scenario.is_absolute() and not scenario.exists():
        scenario = SCENARIOS / scenario
    argv = ["sipp", "-sf", str(scenario), "-i", "127.0.0.1", "-p", ports.sip, "-mp", ports.media, "-cp", ports.control]
    argv += ["-nostdin", "-buff_size", SIPP_BUFF_SIZE, "-f", "5", "-fd", "1"]
    argv += ["-trace_stat", "-stf", "stat.csv", "-trace_counts", "-trace_err", "-error_file", "errors.log"]
    argv += ["-max_log_size", "20000000"]
    if logs:
        argv += ["-trace_logs", "-log_file", "logs.log"]
    if inf is not None:
        argv += ["-inf", str(inf)]
    if rate is not None:
        argv += ["-r", rate]
    if rate_period_ms is not None:
        argv += ["-rp", rate_period_ms]
    if calls is not None:
        argv += ["-m", calls]
    if duration_ms is not None:
        argv += ["-d", duration_ms]
    if max_concurrent is not None:
        argv += ["-l", max_concurrent]
    if timeout_s is not None:
        argv += ["-timeout", f"{int(math.ceil(timeout_s))}s", "-timeout_error"]
    if transport is not None:
        argv += ["-t", transport]  # u1 (default), t1 (one TCP connection), tn (one per call)
    argv += list(extra)
    if remote is not None:
        argv.append(remote)
    return [str(a) for a in argv]


def _last_csv_row(path: Path, delimiter=";"):
    with open(path, newline="", errors="replace") as f:
        rows = [r for r in csv.reader(f, delimiter=delimiter) if r]
    if len(rows) < 2:
        return {}
    header, last = rows[0], rows[-1]
    return dict(zip(header, last))


def _num(text):
    try:
        return float(text) if "." in text else int(text)
    except (TypeError, ValueError):
        return None


class SippOutputs:
    """What a SIPp run left in its working directory."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)

    def stat(self) -> dict:
        """The last -trace_stat row: cumulative (C) and period (P) counters by column name,
        e.g. stat()["SuccessfulCall(C)"], ["FailedCall(C)"], ["Retransmissions(C)"]."""
        p = self.dir / "stat.csv"
        if not p.exists():
            return {}
        return {k: (_num(v) if _num(v) is not None else v) for k, v in _last_csv_row(p).items()}

    def counts(self) -> dict:
        """The last -trace_counts row: {'<index>_<message>_<Sent|Recv|Retrans|Timeout|Unexp>': n}."""
        files = sorted(glob.glob(str(self.dir / "*_counts.csv")))
        if not files:
            return {}
        row = _last_csv_row(Path(files[-1]))
        return {k: int(v) for k, v in row.items() if k not in ("CurrentTime", "ElapsedTime") and v.strip().lstrip("-").isdigit()}

    def message_total(self) -> int:
        """Every SIP message this SIPp sent or received (first copies, retransmissions both
        ways, unexpected ones). Each of them crossed the proxy once."""
        return sum(n for k, n in self.counts().items() if k.endswith(("_Sent", "_Recv", "_Retrans", "_Unexp")))

    def count(self, message: str, column: str = "Recv") -> int:
        """Sum over scenario steps of one message name, e.g. count("503"), count("INVITE", "Sent")."""
        return sum(n for k, n in self.counts().items() if k.split("_", 1)[-1] == f"{message}_{column}")

    def arrivals(self) -> list:
        return read_arrivals(self.dir / "logs.log")

    def errors(self, limit: int = 2000) -> str:
        p = self.dir / "errors.log"
        return p.read_text(errors="replace")[:limit] if p.exists() else ""


def invite_outcomes(uac: SippOutputs) -> dict:
    """Outcomes of scenarios/uac_invite.xml calls, from its -trace_counts and -trace_stat."""
    c = uac.counts()

    def col(step_suffix):
        return sum(n for k, n in c.items() if k.endswith(step_suffix))

    # Step names carry their index: the 302/503 and the first 200 are the INVITE's answers;
    # the second 200 Recv answers the BYE.
    ok_200 = [n for k, n in sorted(c.items(), key=lambda kv: int(kv[0].split("_")[0])) if k.endswith("_200_Recv")]
    st = uac.stat()
    return {
        "invites": col("_INVITE_Sent"),
        "invite_retransmissions": col("_INVITE_Retrans"),
        "answered_200": ok_200[0] if ok_200 else 0,
        "bye_200": ok_200[1] if len(ok_200) > 1 else 0,
        "rejected_503": col("_503_Recv"),
        "redirected_302": col("_302_Recv"),
        "successful_calls": st.get("SuccessfulCall(C)", 0),
        "failed_calls": st.get("FailedCall(C)", 0),
        "retransmissions": st.get("Retransmissions(C)", 0),
        "call_rate": st.get("CallRate(C)", 0),
        "elapsed": st.get("ElapsedTime(C)", ""),
    }


# ---------------------------------------------------------------------------------------------
# arrivals and admission statistics


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


# ---------------------------------------------------------------------------------------------
# small helpers


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def markdown_table(headers, rows) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in cells[1:]])


def svg_lines(path: Path, title: str, series: dict, xlabel: str, ylabel: str, marks=()) -> Path:
    """A line plot as a standalone SVG: `series` maps a label to [(x, y), …]; `marks` are
    (x, label) vertical lines. No plotting library on these machines, so by hand."""
    w, h, left, right, top, bottom = 720, 400, 60, 150, 40, 50
    xs = [x for pts in series.values() for x, _ in pts] or [0.0, 1.0]
    ys = [y for pts in series.values() for _, y in pts] or [0.0, 1.0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1e-9)
    y1 = max(ys) * 1.1 or 1.0
    sx = lambda x: left + (x - x0) / (x1 - x0) * (w - left - right)  # noqa: E731
    sy = lambda y: h - bottom - y / y1 * (h - top - bottom)  # noqa: E731
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">{xlabel}</text>',
           f'<text x="15" y="{(top + h - bottom) / 2}" text-anchor="middle" transform="rotate(-90 15 {(top + h - bottom) / 2})">{ylabel}</text>']
    for i in range(6):
        y = y1 * i / 5
        out.append(f'<text x="{left - 5}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
        out.append(f'<line x1="{left}" y1="{sy(y):.1f}" x2="{w - right}" y2="{sy(y):.1f}" stroke="#ddd"/>')
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        out.append(f'<text x="{sx(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">{x:.0f}</text>')
    for x, label in marks:
        out.append(f'<line x1="{sx(x):.1f}" y1="{top}" x2="{sx(x):.1f}" y2="{h - bottom}" stroke="#999" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{sx(x) + 3:.1f}" y="{top + 12}">{label}</text>')
    for i, (label, pts) in enumerate(series.items()):
        color = colors[i % len(colors)]
        if pts:
            d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{d}"/>')
        out.append(f'<line x1="{w - right + 10}" y1="{top + 20 * i + 10}" x2="{w - right + 30}" y2="{top + 20 * i + 10}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{w - right + 35}" y="{top + 20 * i + 14}">{label}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
    return path


OC_FIELDS = ("oc", "oc_val", "oc_validity", "oc_seq", "oc_algo")


class WireCapture:
    """dumpcap on the loopback for some UDP ports while a test runs, then Wireshark's reading of
    the RFC 7339 Via parameters in what was sent (tshark's SIP dissector: sip.Via.oc,
    sip.Via.oc_val, sip.Via.oc_validity, sip.Via.oc_seq, sip.Via.oc_algo): a reader of the wire
    nobody here wrote. Needs dumpcap and tshark (Debian's tshark package) and the right to
    capture (root)."""

    def __init__(self, run: "Run", name: str, ports):
        """Captures what comes from or goes to `ports` (and decodes them as SIP)."""
        self.path = run.path(name, "capture.pcapng")
        self.ports = list(ports)
        self._rows = None
        bpf = " or ".join(f"udp port {p}" for p in self.ports)
        self.run = run
        self.proc = run.start(name, ["dumpcap", "-q", "-i", "lo", "-f", bpf, "-w", self.path])
        deadline = time.time() + 10
        while not self.path.exists() or self.path.stat().st_size == 0:
            if time.time() > deadline or self.proc.popen.poll() is not None:
                raise HarnessError(f"dumpcap did not start: {self.proc.tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        time.sleep(0.3)  # the last datagrams
        self.run.stop(self.proc, sig=signal.SIGINT)

    def _messages(self) -> list:
        """Every SIP message in the capture as tshark decodes it, read once (one tshark pass:
        the captures hold tens of thousands of datagrams)."""
        if self._rows is None:
            # decode the test's ports as SIP, not only 5060 and what the heuristics catch
            decode = [a for p in self.ports for a in ("-d", f"udp.port=={p},sip")]
            fields = ["frame.time_epoch", "udp.srcport", "udp.dstport", "sip.Method", "sip.Status-Code", "sip.Call-ID",
                      "sip.CSeq", "sip.Via"] + [f"sip.Via.{f}" for f in OC_FIELDS]
            argv = ["tshark", "-r", self.path, *decode, "-Y", "sip", "-T", "fields", "-E", "separator=\t",
                    "-E", "occurrence=f"] + [a for f in fields for a in ("-e", f)]
            res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300)
            if res.returncode != 0:
                raise HarnessError(f"tshark failed: {res.stderr[-2000:]}")
            self._rows = []
            for line in res.stdout.splitlines():
                cells = line.split("\t")
                cells += [""] * (len(fields) - len(cells))
                row = {"t": float(cells[0] or 0), "src": int(cells[1] or 0), "dst": int(cells[2] or 0), "method": cells[3],
                       "status": int(cells[4] or 0), "call_id": cells[5], "cseq": cells[6], "via": cells[7]}
                for f, v in zip(OC_FIELDS, cells[8:]):
                    row[f] = v if v != "" else None
                self._rows.append(row)
        return self._rows

    def requests(self, src_port: int, dst_port: int) -> int:
        """How many SIP requests went from `src_port` to `dst_port`."""
        return sum(1 for m in self._messages() if m["src"] == src_port and m["dst"] == dst_port and m["method"])

    def top_via_oc(self, src_port: int, dst_port: int, requests: bool = False) -> list:
        """Every SIP response (`requests`: request) from 127.0.0.1:`src_port` to `dst_port`
        with `oc` in a Via, as tshark decodes it: dicts with call_id, cseq, status (0 for a
        request), its capture time t, the Via's text (via) and OC_FIELDS (tshark's first
        occurrence, the top Via's when it has them; None when absent; `oc` is "oc" for the
        parameter without a value)."""
        return [m for m in self._messages() if m["src"] == src_port and m["dst"] == dst_port
                and bool(m["method"]) == requests and m["oc"] is not None]


_OC_PARAM = re.compile(r';\s*(oc-validity|oc-seq|oc-algo|oc)\s*(?:=\s*("[^"]*"|[^;,\s]*))?(?=\s*(?:[;,]|$))', re.IGNORECASE)


def unquote(v):
    """A Via parameter value without its quotes; None for an empty or absent one."""
    return None if v in (None, "", "<null>") else v.strip().strip('"')


def carries_values(row: dict) -> bool:
    """Whether a WireCapture row's Via carries a server's values: `oc` with a value (a bare
    `oc`, tshark's "oc", is a client's offer, or one echoed back)."""
    return unquote(row["oc_val"]) not in (None, "oc")


def via_oc(via: str) -> dict:
    """The oc_val, oc_validity, oc_seq and oc_algo of the first Via entry in `via` (RFC 7339 §9;
    a quoted oc-algo may hold commas), None when absent, quotes removed."""
    params = {}
    for name, value in _OC_PARAM.findall(via):
        params.setdefault(name.lower(), value)
    return {"oc_val": unquote(params.get("oc")), "oc_validity": unquote(params.get("oc-validity")),
            "oc_seq": unquote(params.get("oc-seq")), "oc_algo": unquote(params.get("oc-algo")), "oc": "oc" in params}


def oc_sent(text: str) -> list:
    """What a loadctl sender logged it wrote, from its log text: the lines
    `oc-sent|CLIENT|CALL-ID|CSEQ|STATUS|VIA` (the edge's and the example server's --log-oc, the
    Kamailio module's oc_log) as dicts with client, call_id, cseq, status and the oc_val,
    oc_validity, oc_seq, oc_algo of VIA (None when absent; quotes removed), in log order."""
    rows = []
    for line in text.splitlines():
        _, sep, rest = line.partition("oc-sent|")
        f = rest.split("|", 4)
        if not sep or len(f) != 5:
            continue
        rows.append({"client": f[0], "call_id": f[1], "cseq": f[2], "status": int(f[3] or 0), **via_oc(f[4])})
    return rows


def oc_wire_vs_sent(c, label: str, wire: list, sent: list) -> None:
    """Holds tshark's decoding of the responses a loadctl sender sent (WireCapture.top_via_oc)
    against what it logged it wrote (oc_sent): every logged response is on the wire with the
    same oc, oc-validity, oc-seq and oc-algo, and every response on the wire was logged or is a
    copy of one (a stateful proxy retransmits a reply as it sent it, without logging again).
    Matched per Call-ID, CSeq and status, in order. A response whose Via has `oc` without a
    value carries no values: the client's offer echoed, as Kamailio's tm does in the 100 Trying
    it sends itself (RFC 7339 §5.11 lets the values come in the first non-100 response); only a
    100 may be such, or a response in the first 0.2 s of the run: each Kamailio process runs its
    own server, which knows a client from its first request of that client, and a reply may
    reach a process before any request did. Then each value against RFC 7339 §9's grammar: oc-value and oc-validity
    1*DIGIT, oc-seq 1*12DIGIT "." 1*5DIGIT."""
    start = min((w["t"] for w in wire), default=0.0)
    echoed = [w for w in wire if not carries_values(w)]
    wire = [w for w in wire if carries_values(w)]
    by_status = {}
    for w in echoed:
        by_status[w["status"]] = by_status.get(w["status"], 0) + 1
    late = [w for w in echoed if w["status"] != 100 and w["t"] > start + 0.2]
    c.that(not late, f"{label}: responses with the offer echoed and no values: {by_status or 'none'}; other than 100 Trying "
           f"(RFC 7339 §5.11) only in the first 0.2 s ({len(late)} later{': ' + repr(late[:2]) if late else ''})")
    keyed = {}
    for r in sent:
        keyed.setdefault((r["call_id"], r["cseq"], r["status"]), []).append(r)
    fields = ("oc_val", "oc_validity", "oc_seq", "oc_algo")
    taken, copies, unlogged, differ = {}, 0, [], []
    for w in wire:
        key = (w["call_id"], w["cseq"], w["status"])
        logged = keyed.get(key)
        if not logged:
            unlogged.append(w)
            continue
        k = taken.get(key, 0)
        if k >= len(logged):
            copies += 1
            k = len(logged)
        else:
            taken[key] = k + 1
        ref = logged[min(k, len(logged) - 1)]
        if tuple(unquote(w[f]) for f in fields) != tuple(ref[f] for f in fields):
            differ.append((w, ref))
    on_wire = sum(taken.values())
    c.that(len(sent) >= 50 and on_wire == len(sent) and not unlogged,
           f"{label}: tshark decoded oc values in {len(wire)} responses; {on_wire} of the {len(sent)} the sender logged are among "
           f"them, {copies} copies, {len(unlogged)} not logged{': ' + repr(unlogged[:2]) if unlogged else ''}")
    c.that(not differ, f"{label}: tshark reads the oc, oc-validity, oc-seq and oc-algo the sender logged in every one "
           f"({len(differ)} differ{': ' + repr(differ[:2]) if differ else ''})")
    vals = sorted({int(r["oc_val"]) for r in sent if (r["oc_val"] or "").isdigit()})
    c.lines.append(f"info  {label}: oc values sent {vals[:1] + vals[-1:] if vals else []} (lowest, highest; {len(vals)} distinct), "
                   f"{len({r['oc_seq'] for r in sent})} oc-seq, oc-algo {sorted({r['oc_algo'] or '' for r in sent})}, "
                   f"oc-validity {sorted({r['oc_validity'] or '' for r in sent})[:4]}")
    bad = [r for r in sent if not (re.fullmatch(r"\d+", r["oc_val"] or "") and re.fullmatch(r"\d+", r["oc_validity"] or "")
                                   and re.fullmatch(r"\d{1,12}\.\d{1,5}", r["oc_seq"] or ""))]
    c.that(not bad, f"{label}: every value sent is in RFC 7339 §9's grammar ({len(bad)} not{': ' + repr(bad[:2]) if bad else ''})")
