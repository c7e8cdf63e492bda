#!/usr/bin/env python3
"""A user-space UDP fault injector for the end-to-end tests: a relay between two SIP parties on
loopback that loses, delays (with jitter, hence reorders), duplicates and black-holes datagrams,
from a seed, and says what it did.

These machines' kernels have no netem and no packet filter, so faults are made here. The relay
has one socket per side:

    party A  <->  [a-side socket]  relay  [b-side socket]  <->  party B

A datagram that arrives on the a-side socket goes out of the b-side socket to B (`b_target`);
one that arrives on the b-side socket goes out of the a-side socket to A (`a_target`, or the
address A last sent from). So A talks to B by sending to the relay's a-side port, and B talks to
A by sending to its b-side port: give B that port as A's address (a Contact, a next hop).

Each direction (`a2b`, `b2a`) has its own faults: `loss` (probability a datagram is dropped),
`delay_ms` plus a uniform `jitter_ms` (datagrams overtake each other when the jitter exceeds
their spacing), `duplicate` (probability a second copy follows, with its own delay), `drop_if` (targeted
loss: a regular expression; every datagram it matches is dropped). Black-hole
windows (`blackhole`: (start s, end s) after the relay started) drop everything both ways.
Everything is drawn from one `random.Random(seed)`, so a run with the same traffic in the same
order repeats. Bounded: at most `max_queued` datagrams wait (more are dropped and counted), and
only loopback targets are accepted.

    python3 tests/e2e/faultrelay.py --a-port 6000 --b-target 127.0.0.1:5060 --loss 0.2 \\
        --jitter-ms 200 --duplicate 0.05 --seed 7 --log relay.jsonl
    python3 tests/e2e/faultrelay.py --self-test

As a library: `FaultRelay(...)`, `.start()` (a thread), `.cut(on)` (black-hole both ways from
now until `.cut(False)`), `.stop()`, `.counts`, `.events` (what it did to each datagram: time,
the kernel's receive time `kt` (wall clock), direction, action, size, and what the datagram was: request method or response status,
Call-ID, CSeq, top Via branch, and a load-control document's version and state).
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Faults:
    """The faults of one direction."""

    loss: float = 0.0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    duplicate: float = 0.0
    # Targeted loss: every datagram this regular expression (bytes) finds something in is
    # dropped ("targeted" in the log), e.g. every copy of the NOTIFY that carries one version.
    drop_if: bytes | None = None

    def check(self, name: str) -> None:
        for what, v in (("loss", self.loss), ("duplicate", self.duplicate)):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}.{what} must be a probability, got {v}")
        if self.delay_ms < 0 or self.jitter_ms < 0 or self.delay_ms + self.jitter_ms > 60_000:
            raise ValueError(f"{name}: delay and jitter must be >= 0 and together at most 60 s")
        if self.drop_if is not None:
            re.compile(self.drop_if)


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; SCM_TIMESTAMPNS has the same value
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # Linux


def _large_receive_buffer(sock: socket.socket, size: int = 4 << 20) -> None:
    """A receive buffer of `size` bytes (past net.core.rmem_max where allowed, as root), so a
    burst that arrives while this process is not scheduled waits in the kernel instead of being
    dropped there: loss is what the test asked for, never the relay's own."""
    for option in (_SO_RCVBUFFORCE, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, size)
            return
        except OSError:
            continue
_FIRST = re.compile(rb"^(?:SIP/2\.0 (\d{3})|([A-Z]+) (?:sips?:|tel:)?([^@;> ]*))")
_HEADERS = {
    "call_id": re.compile(rb"\r\n(?:Call-ID|i)[ \t]*:[ \t]*([^\r\n]*)", re.I),
    "cseq": re.compile(rb"\r\nCSeq[ \t]*:[ \t]*(\d+)[ \t]+([A-Za-z]+)", re.I),
    "branch": re.compile(rb"\r\n(?:Via|v)[ \t]*:[^\r\n]*?;[ \t]*branch=([^;,\s]+)", re.I),
    "state": re.compile(rb"\r\nSubscription-State[ \t]*:[ \t]*([^\r\n;]*)", re.I),
    # the Kamailio test configuration's decision stamp (loadctl.cfg, STAMP)
    "lc_at": re.compile(rb"\r\nX-LC-At[ \t]*:[ \t]*([0-9]+\.[0-9]+)", re.I),
    "version": re.compile(rb"<ruleset[^>]*?\sversion=\"(\d+)\"[^>]*?\sstate=\"(\w+)\"", re.S),
}
_RATE_RULE = re.compile(rb"<rule\s+id=\"([^\"]+)\".*?<(?:\w+:)?rate>\s*([0-9.]+)\s*</(?:\w+:)?rate>", re.S)


def sip_summary(data: bytes) -> dict:
    """What a datagram is, for the log: `method` (with the Request-URI's `user`) or `status`,
    `call_id`, `cseq` (number and method), the top Via `branch`, the `lc_at` decision stamp
    of the Kamailio test configuration (X-LC-At, wall-clock seconds), and for load-control
    NOTIFYs the `state` of the subscription, the document's `version` and `doc` state and the
    `rates` of its rate rules (id: rate). Fields that are absent are left out."""
    out: dict = {}
    m = _FIRST.match(data)
    if not m:
        return out
    if m.group(1):
        out["status"] = int(m.group(1))
    else:
        out["method"] = m.group(2).decode()
        out["user"] = m.group(3).decode(errors="replace")
    for name, rx in _HEADERS.items():
        h = rx.search(data)
        if not h:
            continue
        if name == "cseq":
            out["cseq"] = [int(h.group(1)), h.group(2).decode().upper()]
        elif name == "lc_at":
            out["lc_at"] = float(h.group(1))
        elif name == "version":
            out["version"], out["doc"] = int(h.group(1)), h.group(2).decode()
            out["rates"] = {r.group(1).decode(): float(r.group(2)) for r in _RATE_RULE.finditer(data)}
        else:
            out[name] = h.group(1).decode(errors="replace").strip()
    return out


@dataclass
class FaultRelay:
    """The relay (see the module documentation)."""

    a_port: int
    b_target: tuple
    a_target: tuple | None = None
    b_port: int = 0
    a2b: Faults = field(default_factory=Faults)
    b2a: Faults = field(default_factory=Faults)
    blackhole: list = field(default_factory=list)
    seed: int = 1
    max_queued: int = 100_000
    log_path: str | None = None
    # Log what each datagram is (`sip_summary`) next to what was done to it.
    sip: bool = True

    def __post_init__(self):
        for t in (self.b_target, self.a_target):
            if t is not None and not t[0].startswith("127."):
                raise ValueError(f"loopback targets only, got {t[0]}")
        self.a2b.check("a2b")
        self.b2a.check("b2a")
        for w in self.blackhole:
            if not (len(w) == 2 and 0 <= w[0] < w[1]):
                raise ValueError(f"a black-hole window is (start s, end s) with start < end, got {w}")
        self.rng = random.Random(self.seed)
        self.sa = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sa.bind(("127.0.0.1", self.a_port))
        self.sb = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sb.bind(("127.0.0.1", self.b_port))
        self.b_port = self.sb.getsockname()[1]
        self.a_port = self.sa.getsockname()[1]
        # The kernel's receive time of each datagram (wall clock, ns): what a sender did when,
        # free of this thread's scheduling (a test measuring a limiter's output uses it).
        for sock in (self.sa, self.sb):
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            _large_receive_buffer(sock)
        self.counts = {d: {"received": 0, "delivered": 0, "lost": 0, "duplicated": 0, "blackholed": 0, "targeted": 0, "overflow": 0}
                       for d in ("a2b", "b2a")}
        self.events: list = []
        self._queue: list = []
        self._seq = 0
        self._stop = threading.Event()
        self._thread = None
        self._log = open(self.log_path, "w") if self.log_path else None
        self._cut = False
        self._kt = None  # the kernel receive time of the datagram being handled
        self.started = time.monotonic()
        self.started_wall = time.time()

    def cut(self, on: bool = True) -> None:
        """Black-holes both directions from now on (`on`) or ends that (a window in time that
        a test opens and closes at events rather than at fixed times)."""
        self._cut = on

    # -- what happens to one datagram

    def _record(self, t: float, direction: str, action: str, data: bytes) -> None:
        ev = {"t": round(t - self.started, 6), "dir": direction, "action": action, "size": len(data)}
        if self._kt is not None:
            ev["kt"] = self._kt
        if self.sip:
            ev.update(sip_summary(data))
        self.events.append(ev)
        if self._log:
            self._log.write(json.dumps(ev) + "\n")

    def _in_blackhole(self, t: float) -> bool:
        rel = t - self.started
        return self._cut or any(start <= rel < end for start, end in self.blackhole)

    def _schedule(self, t: float, direction: str, data: bytes, f: Faults, copy: bool) -> None:
        if len(self._queue) >= self.max_queued:
            self.counts[direction]["overflow"] += 1
            self._record(t, direction, "overflow", data)
            return
        delay = (f.delay_ms + self.rng.uniform(0.0, f.jitter_ms)) / 1000.0
        self._seq += 1
        heapq.heappush(self._queue, (t + delay, self._seq, direction, data))
        self._record(t, direction, "duplicate" if copy else "queued", data)

    def _arrive(self, t: float, direction: str, data: bytes) -> None:
        c = self.counts[direction]
        c["received"] += 1
        f = self.a2b if direction == "a2b" else self.b2a
        if self._in_blackhole(t):
            c["blackholed"] += 1
            self._record(t, direction, "blackholed", data)
            return
        if f.drop_if is not None and re.search(f.drop_if, data):
            c["targeted"] += 1
            self._record(t, direction, "targeted", data)
            return
        if self.rng.random() < f.loss:
            c["lost"] += 1
            self._record(t, direction, "lost", data)
            return
        self._schedule(t, direction, data, f, False)
        if self.rng.random() < f.duplicate:
            c["duplicated"] += 1
            self._schedule(t, direction, data, f, True)

    def _deliver_due(self, now: float) -> None:
        while self._queue and self._queue[0][0] <= now:
            _, _, direction, data = heapq.heappop(self._queue)
            if direction == "a2b":
                target, sock = self.b_target, self.sb
            else:
                target, sock = self.a_target, self.sa
            if target is None:  # A has not sent anything yet: nowhere to deliver
                self.counts[direction]["lost"] += 1
                continue
            try:
                sock.sendto(data, target)
                self.counts[direction]["delivered"] += 1
            except OSError:
                self.counts[direction]["lost"] += 1

    # -- the loop

    def run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            timeout = 0.05
            if self._queue:
                timeout = max(0.0, min(timeout, self._queue[0][0] - now))
            ready, _, _ = select.select([self.sa, self.sb], [], [], timeout)
            now = time.monotonic()
            for sock in ready:
                try:
                    data, anc, _, addr = sock.recvmsg(65535, 64)
                except OSError:
                    continue
                self._kt = None
                for level, kind, blob in anc:
                    if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(blob) >= 16:
                        sec, nsec = struct.unpack("qq", blob[:16])
                        self._kt = round(sec + nsec / 1e9, 6)
                if sock is self.sa:
                    if self.a_target is None or self.a_target != addr:
                        self.a_target = addr
                    self._arrive(now, "a2b", data)
                else:
                    self._arrive(now, "b2a", data)
            self._deliver_due(time.monotonic())

    def start(self) -> "FaultRelay":
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        self.sa.close()
        self.sb.close()
        if self._log:
            self._log.write(json.dumps({"summary": self.counts}) + "\n")
            self._log.close()
        return self.counts


def _addr(text: str) -> tuple:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def self_test() -> int:
    """The relay against its own definition, with statistical bounds (binomial, 5 sigma)."""
    failures = []

    def check(ok: bool, what: str) -> None:
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            failures.append(what)

    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    _large_receive_buffer(sink)
    sink.settimeout(0.5)
    n, p_loss, p_dup = 4000, 0.2, 0.1
    relay = FaultRelay(a_port=0, b_target=sink.getsockname(), a2b=Faults(loss=p_loss, duplicate=p_dup, delay_ms=5, jitter_ms=20),
                       seed=7).start()
    src = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sent_at = {}
    got, late = [], []

    def receive() -> None:  # reads while the sender sends, so the sink's buffer never fills
        try:
            while True:
                data, _ = sink.recvfrom(100)
                k = int(data)
                got.append(k)
                late.append(time.monotonic() - sent_at[k])
        except socket.timeout:
            pass

    reader = threading.Thread(target=receive)
    reader.start()
    a2b = relay.counts["a2b"]
    for k in range(n):
        sent_at[k] = time.monotonic()
        src.sendto(str(k).encode(), ("127.0.0.1", relay.a_port))
        if k % 50 == 0:
            time.sleep(0.005)
            # At most 100 datagrams ahead of the relay and of the sink's reader, whatever the
            # scheduler does to either thread on a busy machine: what the checks below count is
            # the relay's doing, not a socket buffer's overflow.
            deadline = time.monotonic() + 10.0
            while (a2b["received"] < k - 100 or a2b["delivered"] - len(got) > 100) and time.monotonic() < deadline:
                time.sleep(0.001)
    reader.join()
    counts = relay.stop()["a2b"]
    expect = n * (1 - p_loss) * (1 + p_dup)
    sigma = (n * (1 - p_loss) * (1 + p_dup) * 0.3) ** 0.5
    check(counts["received"] == n, f"received {counts['received']} of {n}")
    check(abs(counts["lost"] - n * p_loss) < 5 * (n * p_loss * (1 - p_loss)) ** 0.5, f"lost {counts['lost']} (expected {n * p_loss:.0f})")
    check(abs(len(got) - expect) < 5 * sigma, f"delivered {len(got)} (expected {expect:.0f})")
    check(counts["delivered"] == len(got), f"delivered count {counts['delivered']} = datagrams at the sink {len(got)}")
    check(len(got) > len(set(got)), f"duplicates arrived ({len(got) - len(set(got))})")
    check(min(late) >= 0.005 - 0.001, f"no datagram before the 5 ms delay (earliest {min(late) * 1000:.1f} ms)")
    check(any(got[i] > got[i + 1] for i in range(len(got) - 1)), "20 ms of jitter reordered some datagrams")
    # Repeatable: the same seed and the same traffic in the same order draw the same fates.
    fates = [e["action"] for e in relay.events]
    relay2 = FaultRelay(a_port=0, b_target=sink.getsockname(), a2b=Faults(loss=p_loss, duplicate=p_dup, delay_ms=5, jitter_ms=20), seed=7)
    for k in range(n):
        relay2._arrive(relay2.started, "a2b", str(k).encode())
    check([e["action"] for e in relay2.events] == fates, "the same seed draws the same fates")
    relay2.stop()
    # A black hole drops everything, both ways, for its window only.
    relay3 = FaultRelay(a_port=0, b_target=sink.getsockname(), blackhole=[(0.0, 0.3)], seed=1).start()
    for k in range(50):
        src.sendto(b"x", ("127.0.0.1", relay3.a_port))
    time.sleep(0.4)
    for k in range(50):
        src.sendto(b"y", ("127.0.0.1", relay3.a_port))
    time.sleep(0.2)
    c3 = relay3.stop()["a2b"]
    check((c3["blackholed"], c3["delivered"]) == (50, 50), f"black hole: {c3['blackholed']} dropped in the window, {c3['delivered']} delivered after")
    for bad in (dict(a2b=Faults(loss=1.5)), dict(blackhole=[(2, 1)])):
        try:
            FaultRelay(a_port=0, b_target=("127.0.0.1", 9), **bad).stop()
            check(False, f"refused {bad}")
        except ValueError:
            check(True, f"refused {bad}")
    # Targeted loss drops exactly what the expression finds, whatever the random draws; the log
    # says what each datagram was.
    notify = (b"NOTIFY sip:edge@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5090;branch=z9hG4bK-7\r\n"
              b"Call-ID: abc@x\r\nCSeq: 4 NOTIFY\r\nSubscription-State: active;expires=60\r\n\r\n"
              b'<ruleset xmlns="urn:ietf:params:xml:ns:common-policy" version="3" state="partial"/>')
    relay4 = FaultRelay(a_port=0, b_target=sink.getsockname(), a2b=Faults(drop_if=rb'version="3"'), seed=1)
    for k in range(20):
        relay4._arrive(relay4.started, "a2b", notify if k % 2 else notify.replace(b'"3"', b'"2"'))
    c4 = relay4.counts["a2b"]
    first = relay4.events[0]
    relay4.stop()
    check((c4["targeted"], c4["lost"]) == (10, 0), f"targeted loss: {c4['targeted']} of the 10 copies of version 3 dropped, none else")
    want = {"method": "NOTIFY", "call_id": "abc@x", "cseq": [4, "NOTIFY"], "branch": "z9hG4bK-7", "state": "active",
            "version": 2, "doc": "partial"}
    check(all(first.get(k) == v for k, v in want.items()), f"the log says what the datagram was: {first}")
    try:
        FaultRelay(a_port=0, b_target=("192.0.2.1", 9))
        check(False, "refused a target off loopback")
    except ValueError:
        check(True, "refused a target off loopback")
    src.close()
    sink.close()
    print(f"faultrelay self-test: {len(failures)} failed")
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="check the relay against its definition and exit")
    ap.add_argument("--a-port", type=int, help="the a-side port (party A sends here)")
    ap.add_argument("--b-port", type=int, default=0, help="the b-side port (party B sends here; default any)")
    ap.add_argument("--b-target", type=_addr, help="party B, IP:PORT (loopback)")
    ap.add_argument("--a-target", type=_addr, help="party A, IP:PORT (default: where A last sent from)")
    for d in ("a2b", "b2a", ""):
        pre = f"{d}-" if d else ""
        what = f" ({d} only)" if d else " (both directions)"
        ap.add_argument(f"--{pre}loss", type=float, help="drop probability" + what)
        ap.add_argument(f"--{pre}delay-ms", type=float, help="fixed delay" + what)
        ap.add_argument(f"--{pre}jitter-ms", type=float, help="uniform extra delay up to this" + what)
        ap.add_argument(f"--{pre}duplicate", type=float, help="probability of a second copy" + what)
    ap.add_argument("--blackhole", action="append", default=[], help="START:END seconds after start: drop everything (repeatable)")
    ap.add_argument("--a2b-drop-if", help="a regular expression: drop every a2b datagram it matches (targeted loss)")
    ap.add_argument("--b2a-drop-if", help="a regular expression: drop every b2a datagram it matches (targeted loss)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", help="write what happened to each datagram (JSON lines) and a summary")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.a_port is None or args.b_target is None:
        ap.error("--a-port and --b-target are required")

    def faults(d: str) -> Faults:
        f = Faults()
        for name in ("loss", "delay_ms", "jitter_ms", "duplicate"):
            v = getattr(args, f"{d}_{name}")
            if v is None:
                v = getattr(args, name)
            if v is not None:
                setattr(f, name, v)
        rx = getattr(args, f"{d}_drop_if")
        f.drop_if = rx.encode() if rx else None
        return f

    holes = [tuple(float(x) for x in w.split(":")) for w in args.blackhole]
    relay = FaultRelay(a_port=args.a_port, b_port=args.b_port, b_target=args.b_target, a_target=args.a_target,
                       a2b=faults("a2b"), b2a=faults("b2a"), blackhole=holes, seed=args.seed, log_path=args.log)
    print(f"faultrelay: a-side 127.0.0.1:{relay.a_port}, b-side 127.0.0.1:{relay.b_port} -> {args.b_target}", flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    relay.start()
    done.wait()
    print(json.dumps(relay.stop()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
