"""Loopback ports for the programs a test starts: picked free at run time, waited for until
bound, and the kernel's drop counters of a socket.

Several suites and their SIPp instances run on one machine, so no port may be fixed; a program
is ready only once its socket is bound; and a datagram the kernel dropped at a full socket
buffer says the program behind it did not keep up:

- ``free_udp_port()`` picks loopback UDP ports that are bindable now (with extra offsets when a
  program binds a neighbour too, like SIPp's media ports) and never hands out the same port
  twice in one process. It picks below the kernel's ephemeral range (ip_local_port_range), so
  a port picked cannot be taken by another program's connect or bind to port 0 before the
  program it is for binds it; E2E_PORTS=LOW-HIGH narrows the choice, so that suites running at
  once (``make test``'s lanes) never pick the same port; ``wait_udp_port()`` waits until a port is bound (/proc/net/udp),
  ``wait_tcp_port()`` until one listens (/proc/net/tcp), failing early with the logs when the
  program died first.
- ``udp_drops()`` reads how many datagrams the kernel dropped at one socket (its receive buffer
  was full: the program behind it did not keep up); ``udp_stats()`` the system-wide counters.

Python 3 standard library only.
"""

from __future__ import annotations

import os
import random
import socket
import time

from processes import HarnessError


_HANDED_OUT: set = set()


def _bindable(port: int, host: str, kind: int = socket.SOCK_DGRAM) -> bool:
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _port_range() -> tuple:
    """[low, high) to pick ports from: E2E_PORTS=LOW-HIGH (inclusive) if set, else from 10000 to
    the start of the kernel's ephemeral range."""
    spec = os.environ.get("E2E_PORTS")
    if spec:
        try:
            low, high = (int(x) for x in spec.split("-"))
        except ValueError:
            raise HarnessError(f"E2E_PORTS={spec!r}: expected LOW-HIGH, e.g. 10000-21000") from None
        if not 1024 <= low < high <= 65535:
            raise HarnessError(f"E2E_PORTS={spec!r}: expected 1024 <= LOW < HIGH <= 65535")
        return low, high + 1
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    return 10000, max(ephemeral, 20000)


def free_udp_port(offsets=(0,), host: str = "127.0.0.1", tcp: bool = False) -> int:
    """A UDP port P such that P+o is bindable on `host` (and on 0.0.0.0) for every o in
    `offsets`, and that this process has not handed out before (nor any P+o). With `tcp`, P is
    free for TCP too (a program listening on both, like the edge, or SIPp over TCP)."""
    low, high = _port_range()
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(2000):
        port = rng.randrange(low, high - max(offsets))
        wanted = [port + o for o in offsets]
        if any(p in _HANDED_OUT for p in wanted):
            continue
        if all(_bindable(p, host) and _bindable(p, "0.0.0.0") for p in wanted) and (
            not tcp or (_bindable(port, host, socket.SOCK_STREAM) and _bindable(port, "0.0.0.0", socket.SOCK_STREAM))
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
