#!/usr/bin/env python3
"""End-to-end tests of RFC 7339 overload control against peers that do not play by it, the edge
as the server (and proxy) between them and the network it protects, over UDP on loopback:

    python3 tests/e2e/test_interconnect.py [--keep] [NAME ...]    (make e2e builds the edge)

RFC 7339 §11: "servers should monitor client behavior to determine whether they are complying
with overload control policies. If a client is not conforming to such policies, then the server
should treat it as a non-supporting client (see Section 5.10.2)". Each scenario is one attack:

- downstream_inserted_oc: the next hop (a Python peer) writes `oc=90;oc-validity=60000;oc-seq`
  into every Via of its responses below the edge's own. Upstream clients must see only what the
  edge itself says (§5.4: "A SIP client SHOULD remove the "oc", "oc-validity", and "oc-seq"
  parameters from all Via headers of a response received, except for the topmost Via header"),
  and the next hop must not see the client's offer (§5.6: "a SIP proxy SHOULD strip the overload
  control parameters inserted by the client before proxying the request further downstream").
- addresses: the edge in overload (an occupancy target far below what it costs, as in
  test_overload.py's edge_as_server) and three senders that do not take part, 50 OPTIONS/s
  each: one socket; one socket writing a new Via port into every request (rport, so the answers
  come back); and a flood from 300 sockets used in turn, each a new source address for the
  edge. All three must get the server's 503s (§5.10.2: "A SIP server that is in overload and
  has started to throttle incoming traffic MUST reject some requests from non-participating
  clients"): the client is the address it sends from, and addresses the edge has not seen
  before share one allocation.
- cheating_participant: a sender that offers `oc` and sends 100 OPTIONS/s whatever it is told.
  The edge must mark it non-conforming and reject its excess itself.
- forged_priority: the edge in overload, `--priority-peers 127.0.0.2`, and senders that do not
  take part marking their requests as what is shed last (RFC 7339 §5.10.1): `Resource-Priority:
  ets.0` from 127.0.0.1 (a peer not listed), a To tag of no dialog, the tags of a dialog a 200 OK
  sent by the attacker (not the next hop) claimed, and an sos URN; beside them
  `ets.0` from 127.0.0.2 and requests in a dialog the edge saw set up (an INVITE answered 200
  before the overload). The forged markings get the server's 503s like unmarked requests (RFC
  4412 §11.3: "Only SIP elements within the same administrative trust domain ... will trust a
  Resource-Priority header field that is not appropriately signed"; a To tag is not a dialog);
  the listed peer, the real dialog and the emergency calls are never rejected.

The next hop is a Python peer answering 200 to every request (OPTIONS need no ACK), so what a
sender gets back is either that 200 (relayed) or the edge's 503.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from checks import Checks, suite_main  # noqa: E402
from edge_proc import EDGE, edge_stats, start_edge  # noqa: E402
from policy_docs import document  # noqa: E402
from ports import free_udp_port  # noqa: E402
from processes import Run  # noqa: E402
from sip_sockets import NextHop, Sender, UdpPeers, marked, options, send_for, set_up_dialog, strip_checks  # noqa: E402

def pass_all(run: Run) -> Path:
    p = run.path("policy.xml")
    p.write_text(document(0, "full", ""))
    return p


# ---------------------------------------------------------------------------------------------


def downstream_inserted_oc(run: Run) -> Checks:
    c = Checks("downstream_inserted_oc: values a next hop writes into lower Vias stop at the edge; the client's offer too")
    hop = NextHop(insert=True)
    try:
        eport = free_udp_port(tcp=True)
        edge = start_edge(run, "edge", eport, hop.port, "--policy", pass_all(run), "--transport", "udp", "--overload-control")
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.bind(("127.0.0.1", 0))
        cport = client.getsockname()[1]
        earlier = "Via: SIP/2.0/UDP 192.0.2.9:5060;branch=z9hG4bK-upstream;oc=7;oc-validity=500;oc-seq=1.0\r\n"
        cases = {
            "plain": "",
            "offering": ';oc;oc-algo="loss,rate"',
        }
        got = {}
        for n, (name, params) in enumerate(cases.items()):
            client.sendto(options(cport, cport, n, params, extra_via=earlier), ("127.0.0.1", eport))
            r = UdpPeers.drain(client)
            got[name] = r[0] if r else ""
        forwarded = list(hop.received)
        stats = edge_stats(edge)
    finally:
        hop.close()
    strip_checks(c, "the edge", forwarded, got)
    c.that(stats.get("edge_oc_stripped_total", 0) == 5,
           f"edge_oc_stripped_total {stats.get('edge_oc_stripped_total')}: the offering client's Via, and the two Vias "
           "below the edge's in each of the two responses")
    return c


def overloaded_edge(run: Run, hop: NextHop):
    eport = free_udp_port(tcp=True)
    edge = start_edge(run, "edge", eport, hop.port, "--policy", pass_all(run), "--transport", "udp", "--overload-control",
                      "--oc-occupancy-target", "0.005")
    return eport, edge


def addresses(run: Run) -> Checks:
    c = Checks("addresses: in overload, a sender that does not take part gets 503s whatever addresses it uses")
    hop = NextHop()
    seconds, rate, warmup = 8.0, 50.0, 100  # the first 2 s: the edge enters overload
    try:
        eport, edge = overloaded_edge(run, hop)
        one = Sender(eport, from_n=warmup)
        via = Sender(eport, rotate_via=True, from_n=warmup)
        flood = Sender(eport, sockets=300, from_n=warmup)
        send_for(seconds, rate, [one, via, flood])
        time.sleep(0.5)
        for s in (one, via, flood):
            s.collect()
        stats = edge_stats(edge)
    finally:
        hop.close()
    for name, s in (("one socket", one), ("a new Via port every request", via), ("300 source addresses in turn", flood)):
        c.that(s.share("503") >= 0.8,
               f"{name}: {s.answers.get('503', 0)} of {s.sent} requests after the warm-up answered 503 by the edge "
               f"({s.share('503'):.0%}; 200: {s.answers.get('200', 0)})")
    c.that(stats.get("edge_oc_server_overloaded") == 1, "the edge is in overload")
    c.that(stats.get("edge_oc_server_clients", 10**9) <= 1024,
           f"the edge tracks {stats.get('edge_oc_server_clients')} clients (its table: 1,024 slots; 302 addresses sent)")
    c.that(stats.get("edge_oc_server_newcomers_rejected_total", 0) > 0,
           f"the newcomers' share rejected {stats.get('edge_oc_server_newcomers_rejected_total')} requests")
    for s in (one, via, flood):
        s.close()
    return c


def cheating_participant(run: Run) -> Checks:
    c = Checks("cheating_participant: a sender that offers oc and ignores what it is told is treated as not taking part")
    hop = NextHop()
    seconds, rate, warmup = 8.0, 100.0, 300  # 3 s: overload, then the tolerance of 50 requests
    offer = ';oc;oc-algo="loss,rate"'
    try:
        eport, edge = overloaded_edge(run, hop)
        cheat = Sender(eport, params=offer, from_n=warmup)
        honest = Sender(eport, params=offer, from_n=warmup, obeys=True)
        send_for(seconds, rate, [cheat, honest])
        time.sleep(0.5)
        for s in (cheat, honest):
            s.collect()
        stats = edge_stats(edge)
    finally:
        hop.close()
    c.that(cheat.share("503") >= 0.8,
           f"the cheat: {cheat.answers.get('503', 0)} of its {cheat.sent} requests after {warmup / rate:.0f} s answered 503 by "
           f"the edge ({cheat.share('503'):.0%}; 200: {cheat.answers.get('200', 0)})")
    c.that(honest.rate > 0 and honest.answers.get("200", 0) > 0 and honest.answers.get("503", 0) == 0,
           f"the participant that obeys (told {honest.rate:.0f}/s): {honest.answers.get('200', 0)} of its {honest.sent} "
           f"requests relayed, {honest.answers.get('503', 0)} answered 503 (§5.10.2: the server rejects only clients that "
           "do not take part)")
    c.that(stats.get("edge_oc_server_nonconforming") == 1, f"edge_oc_server_nonconforming {stats.get('edge_oc_server_nonconforming')}")
    for s in (cheat, honest):
        s.close()
    return c


def forged_priority(run: Run) -> Checks:
    c = Checks("forged_priority: in overload, priority markings from peers not trusted with them get 503s like any request")
    hop = NextHop()
    seconds, rate, warmup = 8.0, 40.0, 80  # the first 2 s: the edge enters overload
    try:
        eport = free_udp_port(tcp=True)
        edge = start_edge(run, "edge", eport, hop.port, "--policy", pass_all(run), "--transport", "udp", "--overload-control",
                          "--oc-occupancy-target", "0.005", "--priority-peers", "127.0.0.2")
        caller = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        caller.bind(("127.0.0.1", 0))
        dialog = set_up_dialog(eport, caller)
        # A 200 to an INVITE that does not come from the next hop sets up nothing.
        planted = ("planted@e2e", "a", "b")
        caller.sendto((f"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:{eport};branch=z9hG4bK-planted\r\n"
                       f"From: <sip:x@127.0.0.1>;tag=a\r\nTo: <sip:y@127.0.0.1>;tag=b\r\nCall-ID: planted@e2e\r\n"
                       f"CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n").encode(), ("127.0.0.1", eport))
        caller.close()
        c.that(dialog[2] is not None, f"an INVITE through the edge set up a dialog (To tag {dialog[2]})")
        senders = {
            "unmarked": Sender(eport, from_n=warmup),
            "Resource-Priority ets.0 from 127.0.0.1 (not listed)": Sender(eport, from_n=warmup, build=marked("Resource-Priority: ets.0\r\n")),
            "a To tag of no dialog": Sender(eport, from_n=warmup, build=marked(dialog=None, to="<sip:ping@127.0.0.1>;tag=forged")),
            "a dialog a forged 200 OK claimed": Sender(eport, from_n=warmup, build=marked(dialog=planted)),
            "Resource-Priority ets.0 from 127.0.0.2 (listed)": Sender(eport, from_n=warmup, build=marked("Resource-Priority: ets.0\r\n"),
                                                                     bind="127.0.0.2"),
            "in the dialog the edge saw set up": Sender(eport, from_n=warmup, build=marked(dialog=dialog)),
            "urn:service:sos": Sender(eport, from_n=warmup, build=marked(ruri="urn:service:sos", to="<urn:service:sos>")),
        }
        send_for(seconds, rate, list(senders.values()))
        time.sleep(0.5)
        for s in senders.values():
            s.collect()
        stats = edge_stats(edge)
    finally:
        hop.close()
    c.that(stats.get("edge_oc_server_overloaded") == 1, "the edge is in overload")
    for name, s in senders.items():
        shed = s.share("503")
        trusted = name.startswith(("Resource-Priority ets.0 from 127.0.0.2", "in the dialog", "urn:"))
        ok = (shed == 0 and s.answers.get("200", 0) >= 0.95 * s.sent) if trusted else shed >= 0.8
        c.that(ok, f"{name}: {s.answers.get('503', 0)} of {s.sent} requests after the warm-up answered 503 "
                   f"({shed:.0%}; 200: {s.answers.get('200', 0)}), expected {'none' if trusted else 'most'}")
    for s in senders.values():
        s.close()
    return c


TESTS = {
    "downstream_inserted_oc": downstream_inserted_oc,
    "addresses": addresses,
    "cheating_participant": cheating_participant,
    "forged_priority": forged_priority,
}


def main() -> int:
    return suite_main(__doc__, TESTS, "e2e interconnect", prefix="ic-", needs=(EDGE,))


if __name__ == "__main__":
    sys.exit(main())
