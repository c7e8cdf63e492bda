"""The C edge (target/edge) as the suites start it, and what it tells about itself: the
subscriber events it logs, the counters it prints on SIGUSR1 (its own and the engine's) and
its --metrics endpoint.

Every suite that puts the edge between real peers starts it the same way (ready once its UDP
port is bound; with EDGE_WORKERS=N in the environment, with `--workers N`, else with the edge's
default of one UDP worker per CPU) and judges it by the same log lines and counters. LOADCTL is the `loadctl` CLI
(`loadctl notifier`, the notifier an edge subscribes to); both are built by `make e2e`.

Python 3 standard library only.
"""

from __future__ import annotations

import os
import re
import signal
import socket
from pathlib import Path

from ports import wait_udp_port
from processes import Proc, Run, wait_until

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EDGE = ROOT / "target" / "edge"
LOADCTL = ROOT / "target" / "release" / "loadctl"
WORKERS = os.environ.get("EDGE_WORKERS", "")


def start_edge(run: Run, name: str, port: int, next_hop: int, *args) -> Proc:
    workers = ["--workers", WORKERS] if WORKERS and "--workers" not in args else []
    proc = run.start(name, [EDGE, "--listen", f"127.0.0.1:{port}", "--next-hop", f"127.0.0.1:{next_hop}", *workers, *args])
    wait_udp_port(port, proc=proc)
    return proc


EVENT = re.compile(r"^(?:\S+ )?edge: subscriber at (\d+\.\d+): (.*?) (\d+) ?(.*)$")


def edge_events(proc: Proc) -> list:
    """(wall time, what, number, detail) of every subscriber event the edge logged."""
    out = []
    for line in proc.stderr_path.read_text(errors="replace").splitlines():
        m = EVENT.match(line)
        if m:
            out.append((float(m.group(1)), m.group(2), int(m.group(3)), m.group(4)))
    return out


def when(events, what: str, number=None) -> float:
    """The time of the first event `what` (with that number)."""
    for t, w, n, _ in events:
        if w == what and (number is None or n == number):
            return t
    raise AssertionError(f"the edge never logged {what!r} {number if number is not None else ''}: {events}")


def wait_event(proc: Proc, what: str, number=None, timeout: float = 10.0) -> float:
    found = wait_until(lambda: any(w == what and (number is None or n == number) for _, w, n, _ in edge_events(proc)), timeout)
    if not found:
        raise AssertionError(f"the edge did not log {what!r} {number} within {timeout} s:\n{proc.tail(30)}")
    return when(edge_events(proc), what, number)


DUMP_END = "# EOF"


def signal_dump(proc: Proc, timeout: float = 20.0) -> str:
    """Sends SIGUSR1 and returns the counters the program prints for it, once the dump is whole.

    The edge and the example server end each dump with the line `# EOF`; a dump is written in
    more than one write, so its first lines are no sign that the rest is there. The edge handles
    signals between batches of messages: later on a busy machine."""
    before = proc.stdout_path.stat().st_size if proc.stdout_path.exists() else 0

    def text() -> str:
        return proc.stdout_path.read_bytes()[before:].decode(errors="replace") if proc.stdout_path.exists() else ""

    proc.send_signal(signal.SIGUSR1)
    if not wait_until(lambda: f"\n{DUMP_END}\n" in "\n" + text(), timeout):
        raise AssertionError(f"no whole counter dump ({DUMP_END!r} not printed) within {timeout} s of SIGUSR1:\n{proc.tail(30)}")
    out = text()
    return out[: ("\n" + out).index(f"\n{DUMP_END}\n")]


def edge_stats(proc: Proc) -> dict:
    """The edge's counters: SIGUSR1 makes it print them (Prometheus text) on stdout."""
    out = {}
    for line in signal_dump(proc).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("edge_"):
            value = float(parts[1])
            out[parts[0]] = int(value) if value.is_integer() else value
    return out


def engine_counters(proc: Proc) -> dict:
    """The engine's own counters (loadctl_*) from the edge's SIGUSR1 output."""
    out = {}
    for line in signal_dump(proc).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("loadctl_") and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def scrape(port: int, path: str = "/metrics", method: str = "GET") -> tuple:
    """(status, headers, body) of one HTTP request to the edge's metrics endpoint."""
    with socket.create_connection(("127.0.0.1", port), timeout=3.0) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)}
    return int(lines[0].split()[1]), headers, body.decode(errors="replace")


def samples(text: str) -> dict:
    """Prometheus text → {name{labels}: value}."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
