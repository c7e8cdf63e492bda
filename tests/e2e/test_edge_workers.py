#!/usr/bin/env python3
"""End-to-end tests of the edge on several cores (`--workers N`): N UDP workers, each with its
own socket on the listening port (SO_REUSEPORT), thread and engine shard. Every test runs at
`--workers 1` and `--workers 2`; with two, the senders are many (SIPp's `-t un`: a socket and so a
source port per call, or many Python sockets), so that the kernel's reuseport hash gives both
workers traffic, and each test checks from `edge_worker_datagrams_total` that it did.

    python3 tests/e2e/test_edge_workers.py [--keep] [NAME ...]

- rate_across_workers: SIPp calls at 60/s from a port per call against a rate rule of 20/s:
  the rule's bound holds across the workers at the next hop (never more than r·(1 s + τ) + 1 in
  any second, τ = 100 ms, libloadctl's GCRA tolerance) and its rate within 3 %; every INVITE is
  forwarded or answered 503, and the edge's counters add up to what SIPp sent.
- window_across_workers: a window of 4 (RFC 7200 §5.4: "the <win> element describes the
  acceptable window size") against 30 calls/s from a port per
  call, a next hop that answers each INVITE 400 ms after it arrives: never more than 4 INVITEs
  unanswered at the next hop, and 4 reached (the window is exact across workers, its slots given
  back by final responses that reach whichever worker the kernel gives the next hop's address).
- tcp_across_workers: the same rule against SIPp calls over TCP, a connection per call (`-t
  tn`): the TCP workers each accept connections, each opens at most one connection to the next
  hop, the rule's bound and rate hold across them.
- connection_limit: `--max-connections 5` and 12 connections: exactly 5 served and 7 refused,
  whichever workers accept them (the limit is over all TCP workers).
- connections_per_source: `--max-connections-per-source 3`: of 20 connections from one address
  3 are served and 17 refused, another address's 3 are served beside them, and a place comes
  back when one of the first address's connections closes (the count is over all TCP workers).
- retransmission_other_port: a request retransmitted from another source port (a NAT
  rebinding) may reach another worker; it still gets its original's decision (RFC 3261 §16.11:
  "a retransmitted request MUST be forwarded to the same destination each time it is
  processed", and its branch "MUST be the same each time a retransmitted request is
  forwarded"; RFC 7200 limits new requests, so a copy takes no second token): a rate-0 call's
  copies from 16 other ports are each answered 503 without being classified again, an admitted
  call's copies are forwarded with the original's branch, and none is unremembered.

Python 3 standard library, SIPp.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from admission import count_in, max_in_window  # noqa: E402
from checks import Checks, suite_main  # noqa: E402
from edge_proc import EDGE, edge_stats, engine_counters, start_edge  # noqa: E402
from policy_docs import MATCH, document, rate_rule, rule  # noqa: E402
from ports import free_udp_port, wait_tcp_port, wait_udp_port  # noqa: E402
from processes import Run, wait_until  # noqa: E402
from sip_sockets import UdpPeers, header  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402

WORKERS = (1, 2)
TAU_S = 0.1  # libloadctl's GCRA burst tolerance
# SIPp with a socket per call (-t un) asks for 50,000 descriptors unless told fewer.
UN = ("-max_socket", "2000")


def spread(c: Checks, proc, workers: int, family: str = "edge_worker_datagrams_total") -> None:
    """Checks that every worker took part (datagrams read; over TCP, connections accepted), and
    that there are `workers` of them."""
    stats = edge_stats(proc)
    per = [stats.get(f'{family}{{worker="{k}"}}', 0) for k in range(workers)]
    extra = stats.get(f'{family}{{worker="{workers}"}}')
    c.that(all(n > 0 for n in per) and extra is None, f"{workers} worker(s), {family} of each: {per}")


def rate_held(c: Checks, ts: list, r: float) -> None:
    """The rule's GCRA bound in any second and its rate after the first, at the next hop."""
    c.that(len(ts) > 100, f"{len(ts)} INVITEs reached the next hop")
    if len(ts) > 100:
        worst = max_in_window(ts, 1.0)
        bound = int(r * (1.0 + TAU_S)) + 1
        c.that(worst <= bound, f"at most {worst} INVITEs in any 1 s at the next hop (bound r·(1 s + τ) + 1 = {bound})")
        start, end = ts[0] + 1.0, ts[-1]
        rate = (count_in(ts, start, end) - 1) / (end - start) if end > start else 0.0
        c.that(abs(rate - r) <= 0.03 * r, f"{rate:.2f}/s admitted after the first second, expected {r:g}/s ± 3 %")


def rate_across_workers(run: Run, workers: int) -> Checks:
    c = Checks(f"rate_across_workers --workers {workers}: SIPp at 60 calls/s, a port per call, rule 20/s")
    r, offered, calls = 20.0, 60, 600
    path = run.path("policy.xml")
    path.write_text(document(0, "full", rate_rule(r)))
    uas_ports = SippPorts.pick()
    uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=40))
    wait_udp_port(uas_ports.sip, proc=uas)
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, uas_ports.sip, "--policy", path, "--transport", "udp", "--workers", str(workers))
    inf = write_injection(run.path("callees.csv"), [MATCH])
    uac = run.start("uac", sipp_command("uac_invite.xml", SippPorts.pick(), remote=f"127.0.0.1:{port}", inf=inf, rate=offered,
                                        calls=calls, timeout_s=40, transport="un", extra=UN))
    uac.wait(timeout=60)
    ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
    out = invite_outcomes(SippOutputs(uac.cwd))
    rate_held(c, ts, r)
    invites = out["invites"]
    c.that(invites == calls and out["answered_200"] + out["rejected_503"] == calls and out["failed_calls"] == 0,
           f"every call answered 200 or 503: {out['answered_200']} + {out['rejected_503']} of {invites}, {out['failed_calls']} failed")
    stats, engine = edge_stats(edge), engine_counters(edge)
    key = '{source="edge",rule="prefix-1555"}'
    accepted = engine.get(f"loadctl_rule_accepted_total{key}", -1)
    rejected = engine.get(f"loadctl_rule_rejected_total{key}", -1)
    c.that(accepted == len(ts) and rejected == out["rejected_503"],
           f"the rule's counters add up over the workers: {accepted} accepted (next hop got {len(ts)}), "
           f"{rejected} rejected (SIPp got {out['rejected_503']} 503s)")
    c.that(stats.get("edge_requests_original_total") == calls + out["answered_200"],
           f"originals: {stats.get('edge_requests_original_total')} = {calls} INVITEs + {out['answered_200']} BYEs")
    spread(c, edge, workers)
    return c


def window_across_workers(run: Run, workers: int) -> Checks:
    c = Checks(f"window_across_workers --workers {workers}: win 4, 30 calls/s from a port per call, answers after 400 ms")
    win, offered, calls, delay = 4, 30, 240, 0.4
    path = run.path("policy.xml")
    path.write_text(document(0, "full", rule("window", "+1555", f"<lc:win>{win}</lc:win>")))
    hop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hop.bind(("127.0.0.1", 0))
    hop.settimeout(0.2)
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, hop.getsockname()[1], "--policy", path, "--transport", "udp", "--workers", str(workers))
    # The next hop: each INVITE answered 200 `delay` after it came (a final response gives its
    # window slot back), its ACK and BYE 200; the most INVITEs unanswered at once is recorded.
    state = {"open": 0, "most": 0, "invites": 0, "stop": False}
    due = []  # (time, response bytes)
    seen = set()  # Call-IDs

    def answer(req: str, code: str) -> bytes:
        keep = [h for h in req.split("\r\n\r\n", 1)[0].split("\r\n")[1:] if h.split(":", 1)[0].lower() in ("via", "from", "to", "call-id", "cseq")]
        to = [h + ";tag=hop" if h.lower().startswith("to:") and ";tag=" not in h and code[0] != "1" else h for h in keep]
        return (f"SIP/2.0 {code}\r\n" + "\r\n".join(to) + "\r\nContent-Length: 0\r\n\r\n").encode()

    def next_hop():
        edge_addr = ("127.0.0.1", port)
        while not state["stop"]:
            now = time.monotonic()
            while due and due[0][0] <= now:
                _, resp = due.pop(0)
                state["open"] -= 1
                hop.sendto(resp, edge_addr)
            try:
                data = hop.recv(65535).decode(errors="replace")
            except socket.timeout:
                continue
            if data.startswith("INVITE "):
                # 100 at once (no retransmissions from SIPp); a copy that came anyway is not a
                # second transaction.
                hop.sendto(answer(data, "100 Trying"), edge_addr)
                call = header(data, "Call-ID")
                if call in seen:
                    continue
                seen.add(call)
                state["invites"] += 1
                state["open"] += 1
                state["most"] = max(state["most"], state["open"])
                due.append((time.monotonic() + delay, answer(data, "200 OK")))
            elif data.startswith("BYE "):
                hop.sendto(answer(data, "200 OK"), edge_addr)

    t = threading.Thread(target=next_hop, daemon=True)
    t.start()
    inf = write_injection(run.path("callees.csv"), [MATCH])
    uac = run.start("uac", sipp_command("uac_invite.xml", SippPorts.pick(), remote=f"127.0.0.1:{port}", inf=inf, rate=offered,
                                        calls=calls, timeout_s=40, transport="un", extra=UN))
    uac.wait(timeout=60)
    time.sleep(delay + 0.3)
    state["stop"] = True
    t.join(2.0)
    hop.close()
    out = invite_outcomes(SippOutputs(uac.cwd))
    c.that(state["most"] == win, f"at most {state['most']} INVITEs unanswered at the next hop at once (window {win}: exactly {win} expected)")
    c.that(out["answered_200"] == state["invites"] and out["answered_200"] + out["rejected_503"] == calls and out["failed_calls"] == 0,
           f"{out['answered_200']} calls admitted (the next hop got {state['invites']} INVITEs), {out['rejected_503']} answered 503, "
           f"{out['failed_calls']} failed, of {calls}")
    # About win / delay = 10 calls a second get a slot.
    c.that(out["answered_200"] >= 0.6 * win / delay * calls / offered,
           f"{out['answered_200']} admitted: the slots came back (at least {0.6 * win / delay * calls / offered:.0f} expected)")
    spread(c, edge, workers)
    return c


def tcp_across_workers(run: Run, workers: int) -> Checks:
    c = Checks(f"tcp_across_workers --workers {workers}: SIPp over TCP, a connection per call, 60 calls/s, rule 20/s")
    r, offered, calls = 20.0, 60, 600
    path = run.path("policy.xml")
    path.write_text(document(0, "full", rate_rule(r)))
    uas_ports = SippPorts.pick(tcp=True)
    uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=40, transport="t1"))
    wait_tcp_port(uas_ports.sip, proc=uas)
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, uas_ports.sip, "--policy", path, "--workers", str(workers))
    wait_tcp_port(port, proc=edge)
    inf = write_injection(run.path("callees.csv"), [MATCH])
    uac = run.start("uac", sipp_command("uac_invite.xml", SippPorts.pick(tcp=True), remote=f"127.0.0.1:{port}", inf=inf, rate=offered,
                                        calls=calls, timeout_s=40, transport="tn", extra=UN))
    uac.wait(timeout=60)
    ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
    out = invite_outcomes(SippOutputs(uac.cwd))
    rate_held(c, ts, r)
    c.that(out["invites"] == calls and out["answered_200"] + out["rejected_503"] == calls and out["failed_calls"] == 0,
           f"every call answered 200 or 503: {out['answered_200']} + {out['rejected_503']} of {out['invites']}, {out['failed_calls']} failed")
    stats = edge_stats(edge)
    hops = stats.get("edge_tcp_hop_connects_total", 0)
    c.that(1 <= hops <= workers, f"{hops} connection(s) to the next hop: one per TCP worker at most ({workers})")
    spread(c, edge, workers, "edge_tcp_worker_accepted_total")
    return c


def tcp_edge(run: Run, workers: int, *args) -> tuple:
    """An edge with an empty policy listening on TCP, and a UDP socket as its next hop that never
    answers; (edge, port, next hop socket)."""
    path = run.path("policy.xml")
    path.write_text(document(0, "full", ""))
    hop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hop.bind(("127.0.0.1", 0))
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, hop.getsockname()[1], "--policy", path, "--workers", str(workers), *args)
    wait_tcp_port(port, proc=edge)
    return edge, port, hop


def served(s: socket.socket) -> bool:
    """Whether the edge serves the connection: an RFC 5626 ping gets its CRLF back (a refused
    connection was closed at once)."""
    try:
        s.sendall(b"\r\n\r\n")
        return s.recv(16) == b"\r\n"
    except OSError:
        return False


def connection_limit(run: Run, workers: int) -> Checks:
    c = Checks(f"connection_limit --workers {workers}: --max-connections 5, 12 connections")
    edge, port, hop = tcp_edge(run, workers, "--max-connections", "5")
    conns = [socket.create_connection(("127.0.0.1", port), timeout=2.0) for _ in range(12)]
    count = sum(served(s) for s in conns)
    stats = edge_stats(edge)
    c.that(count == 5, f"{count} of 12 connections served (5 expected)")
    c.that(stats.get("edge_tcp_accepted_total") == 5 and stats.get("edge_tcp_refused_total") == 7,
           f"accepted {stats.get('edge_tcp_accepted_total')}, refused {stats.get('edge_tcp_refused_total')} (5 and 7 expected)")
    for s in conns:
        s.close()
    hop.close()
    return c


def connections_per_source(run: Run, workers: int) -> Checks:
    c = Checks(f"connections_per_source --workers {workers}: --max-connections-per-source 3, 20 connections from one address")
    edge, port, hop = tcp_edge(run, workers, "--max-connections", "50", "--max-connections-per-source", "3")

    def connect(source: str) -> socket.socket:
        # 127.0.0.0/8 is all loopback: each address is another peer to the edge.
        return socket.create_connection(("127.0.0.1", port), timeout=2.0, source_address=(source, 0))

    flood = [connect("127.0.0.2") for _ in range(20)]
    others = [connect("127.0.0.3") for _ in range(3)]
    flood_served = [s for s in flood if served(s)]
    others_served = sum(served(s) for s in others)
    stats = edge_stats(edge)
    c.that(len(flood_served) == 3, f"{len(flood_served)} of 127.0.0.2's 20 connections served (3 expected)")
    c.that(others_served == 3, f"{others_served} of 127.0.0.3's 3 served beside them (3 expected)")
    c.that(stats.get("edge_tcp_accepted_total") == 6 and stats.get("edge_tcp_source_refused_total") == 17
           and stats.get("edge_tcp_refused_total") == 0,
           f"accepted {stats.get('edge_tcp_accepted_total')}, refused per source {stats.get('edge_tcp_source_refused_total')}, "
           f"refused by --max-connections {stats.get('edge_tcp_refused_total')} (6, 17 and 0 expected)")
    # A connection that closes gives its place back, whichever worker held it.
    closed_before = stats.get("edge_tcp_closed_total", 0)
    flood_served[0].close()
    wait_until(lambda: edge_stats(edge).get("edge_tcp_closed_total", 0) > closed_before, 10.0)
    again = [connect("127.0.0.2") for _ in range(2)]
    count = sum(served(s) for s in again)
    c.that(count == 1, f"after one of 127.0.0.2's connections closed, {count} of 2 more served (1 expected)")
    for s in flood + others + again:
        s.close()
    hop.close()
    return c


def retransmission_other_port(run: Run, workers: int) -> Checks:
    c = Checks(f"retransmission_other_port --workers {workers}: copies of a request from 16 other source ports")
    path = run.path("policy.xml")
    path.write_text(document(0, "full", rule("closed", "+1555", "<lc:rate>0</lc:rate>")))
    hop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hop.bind(("127.0.0.1", 0))
    port = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", port, hop.getsockname()[1], "--policy", path, "--transport", "udp", "--workers", str(workers))
    edge_addr = ("127.0.0.1", port)
    socks = []
    for _ in range(17):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    first = socks[0].getsockname()[1]

    def invite(callee: str, call: str) -> bytes:
        # The sent-by stays the first socket's: a retransmission is the same request, only the
        # address it left from changed.
        return (f"INVITE sip:{callee}@127.0.0.1:{port} SIP/2.0\r\n"
                f"Via: SIP/2.0/UDP 127.0.0.1:{first};branch=z9hG4bK-{call};rport\r\n"
                f"From: <sip:alice@127.0.0.1>;tag={call}\r\nTo: <sip:{callee}@127.0.0.1;user=phone>\r\n"
                f"Call-ID: {call}@workers\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n").encode()

    for call, callee in (("closed", MATCH), ("open", "+16660001234")):
        # The original, decided before its retransmissions come (as over UDP, T1 = 500 ms later).
        socks[0].sendto(invite(callee, call), edge_addr)
        answers = [UdpPeers.drain(socks[0], 0.3)]
        forwarded = UdpPeers.drain(hop, 0.3)
        for s in socks[1:]:
            s.sendto(invite(callee, call), edge_addr)
        answers += [UdpPeers.drain(s, 0.3) for s in socks[1:]]
        forwarded += UdpPeers.drain(hop, 0.3)
        if call == "closed":
            ok = [a for a in answers if len(a) == 1 and a[0].startswith("SIP/2.0 503")]
            c.that(len(ok) == 17 and not forwarded, f"rate 0: {len(ok)} of 17 copies answered 503 each, {len(forwarded)} forwarded")
        else:
            branches = {header(f, "Via").split(",")[0] for f in forwarded}
            c.that(len(forwarded) == 17 and len(branches) == 1 and all(a == [] for a in answers),
                   f"admitted: {len(forwarded)} of 17 copies forwarded, with {len(branches)} distinct top Via (1 expected)")
    stats, engine = edge_stats(edge), engine_counters(edge)
    c.that(stats.get("edge_retransmissions_repeated_total") == 32 and stats.get("edge_retransmissions_unremembered_total") == 0,
           f"32 copies given their original's decision: {stats.get('edge_retransmissions_repeated_total')} repeated, "
           f"{stats.get('edge_retransmissions_unremembered_total')} unremembered")
    matched = engine.get('loadctl_rule_matched_total{source="edge",rule="closed"}', -1)
    c.that(matched == 1, f"the rate-0 call was classified once: {matched}")
    spread(c, edge, workers)
    for s in socks:
        s.close()
    hop.close()
    return c


TESTS = {
    f"{name}_{w}": (lambda run, f=f, w=w: f(run, w))
    for name, f in (("rate_across_workers", rate_across_workers), ("window_across_workers", window_across_workers),
                    ("tcp_across_workers", tcp_across_workers), ("connection_limit", connection_limit),
                    ("connections_per_source", connections_per_source),
                    ("retransmission_other_port", retransmission_other_port))
    for w in WORKERS
}


def main() -> int:
    return suite_main(__doc__, TESTS, "e2e edge workers", prefix="workers-", needs=(EDGE,))


if __name__ == "__main__":
    sys.exit(main())
