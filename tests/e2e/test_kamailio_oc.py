#!/usr/bin/env python3
"""End-to-end tests of the loadctl Kamailio module's RFC 7339 overload control (kamailio/loadctl/,
lc_oc_forward / lc_oc_check / lc_oc_via): Kamailio as a client of a SIPp UAS that answers with
overload values, and as a server fed an occupancy signal, with tshark reading what it wrote on
the wire. The module as a limiter is tested in test_kamailio_module.py, in the RFC 7200 event
package in test_kamailio_rfc7200.py; against Kamailio's own RFC 7339 client in
test_kamailio_oc_interop.py.

    python3 tests/e2e/test_kamailio_oc.py [--keep] [NAME ...]
    (make kamailio-module-test builds target/kamailio/loadctl.so first; kamailio/build.sh
    already gated it with `kamailio -c`)

Kamailio runs tests/e2e/kamailio/loadctl.cfg (Debian's /usr/sbin/kamailio 5.6.3, TLSF memory,
one UDP socket on loopback, jsonrpcs on a UDP datagram socket for the loadctl.* RPC commands).

- oc_client_loss: Kamailio (children=2, tm) as an RFC 7339 client of a SIPp UAS answering
  oc=50;oc-algo="loss" (overload_setups.loss_feedback_through, the phases the edge is held to in
  test_overload.py's uas_loss_feedback): half the INVITEs shed while the value is valid, none
  before or after it.
- oc_client_call_mix: the same UAS answering whole calls (INVITE, ACK, BYE a second later)
  through Kamailio (children=2): the requests reaching the UAS are oc % ± 3 points fewer than
  those offered, and the share of INVITEs passed holds in every second
  (overload_setups.loss_call_mix_through, also run behind the edge).
- oc_client_offer: the algorithms Kamailio offers for its version (loss,rate from 5.8 on; loss
  alone before, where Kamailio refuses a Via with a comma inside a quoted parameter value), and
  a SIPp UAS selecting rate (RFC 7415): applied from 5.8 on, refused before.
- oc_server_occupancy: Kamailio as an RFC 7339 server on an occupancy signal computed from the
  UAS's arrival rate (a server of 60 calls/s): an RFC 7339 edge and a plain SIPp UAC offering
  60 calls/s each; the loop holds the capacity, each loses about half, and tshark reads the
  values the module logged it sent.
- oc_strip: Kamailio (tm) as an RFC 7339 server between a Python client and a next hop that
  writes `oc=90;oc-validity=60000;oc-seq` into every Via below its top one: the client sees only
  the module's own values (§5.4: "A SIP client SHOULD remove the "oc", "oc-validity", and
  "oc-seq" parameters from all Via headers of a response received, except for the topmost Via
  header"), and the next hop does not see the client's offer (§5.6: "a SIP proxy SHOULD strip
  the overload control parameters inserted by the client before proxying the request further
  downstream").
- oc_forged_priority: Kamailio as an RFC 7339 server in overload (an occupancy of 500 %), with
  priority_peers 127.0.0.2 and dialog_flag (the dialog module's is_known_dlg()): senders that
  do not take part, as in test_interconnect.py's forged_priority — Resource-Priority ets.0 from a
  peer not listed and a To tag of no dialog get lc_oc_check()'s 503s like unmarked requests
  (RFC 4412 §11.3); the listed peer, a dialog Kamailio tracks and sos are never rejected.
- oc_hop_ageing: Kamailio with `oc_hops 1`, `oc_hop_idle 64`, sending to the next hop each
  request names; both next hops answer `oc=100;oc-algo="loss"` (shed everything) for ten
  minutes. The first hop takes the one cell and its value sheds its requests; the second gets
  no control while the first is in use; once the first has been idle for 64 s the second takes
  the cell, its value applies, and the first is forgotten.
"""

from __future__ import annotations

import re
import socket
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from admission import count_in  # noqa: E402
from checks import Checks, suite_main  # noqa: E402
from edge_proc import start_edge  # noqa: E402
from kamailio_proc import Kamailio, build, feed_occupancy, suite_label  # noqa: E402
from oc_wire import WireCapture, oc_sent, oc_wire_vs_sent, via_oc  # noqa: E402
from overload_setups import loss_call_mix_through, loss_feedback_through, stats_now  # noqa: E402
from policy_docs import MATCH, document  # noqa: E402
from ports import free_udp_port, wait_udp_port  # noqa: E402
from processes import Run  # noqa: E402
from sip_sockets import NextHop, Sender, UdpPeers, marked, options, send_for, set_up_dialog, strip_checks  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402


def oc_client_loss(run: Run) -> Checks:
    """Kamailio (children=2, tm) as an RFC 7339 client of a SIPp UAS that answers oc=50 loss."""
    c = Checks("oc_client_loss: Kamailio children=2 as RFC 7339 client of a SIPp UAS answering oc=50;oc-algo=\"loss\"")

    holder = {}

    def start(uas_port: int) -> int:
        holder["kam"] = Kamailio(run, "kamailio", document(0, "full", ""), 2, uas_port, stateful=True,
                                 defines=(f'OC_CLIENT="127.0.0.1:{uas_port}"',))
        return holder["kam"].port

    loss_feedback_through(run, c, start)
    log = holder["kam"].log()
    c.that("feedback from" not in log, "Kamailio refused no feedback")
    return c


def oc_client_call_mix(run: Run) -> Checks:
    """Kamailio (children=2, tm) as an RFC 7339 client of a SIPp UAS answering whole calls with
    oc=50 loss."""
    c = Checks("oc_client_call_mix: Kamailio children=2, whole calls to a SIPp UAS answering oc=50;oc-algo=\"loss\"")
    holder = {}

    def start(uas_port: int) -> int:
        holder["kam"] = Kamailio(run, "kamailio", document(0, "full", ""), 2, uas_port, stateful=True,
                                 defines=(f'OC_CLIENT="127.0.0.1:{uas_port}"',))
        return holder["kam"].port

    loss_call_mix_through(run, c, start)
    c.that("feedback from" not in holder["kam"].log(), "Kamailio refused no feedback")
    return c


def oc_client_offer(run: Run) -> Checks:
    """Kamailio (children=2, tm) as an RFC 7339 client: the algorithms it offers for its
    Kamailio version, and a SIPp UAS that selects the rate algorithm (RFC 7415) for it."""
    rate_offered = build().major_minor >= (5, 8)
    offer = "loss,rate" if rate_offered else "loss"
    c = Checks(f"oc_client_offer: Kamailio {build().version} children=2 offers oc-algo=\"{offer}\"; "
               f"a SIPp UAS answers oc=20;oc-algo=\"rate\"")
    offered, warm, on, limit = 50.0, 150, 600, 20.0
    uas_ports = SippPorts.pick()
    # Warm-up: oc=0;oc-validity=0 (supported, not overloaded), then oc=20 with a new oc-seq
    # per answer, valid 1 s.
    rows = [["oc", "0", "0", "1.0", "rate"]] * warm
    rows += [["oc", f"{limit:.0f}", "1000", f"{k + 2}.0", "rate"] for k in range(on)]
    uas = run.start("uas", sipp_command("uas_oc.xml", uas_ports, inf=write_injection(run.path("uas.csv"), rows),
                                        timeout_s=60, extra=("-trace_msg", "-message_file", "messages.log")))
    wait_udp_port(uas_ports.sip, proc=uas)
    kam = Kamailio(run, "kamailio", document(0, "full", ""), 2, uas_ports.sip, stateful=True,
                   defines=(f'OC_CLIENT="127.0.0.1:{uas_ports.sip}"',))
    inf = write_injection(run.path("callees.csv"), [MATCH])
    uac = run.start("uac", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{kam.port}", inf=inf,
                                        rate=offered, calls=warm + on, timeout_s=40, logs=False))
    uac.wait(timeout=60)
    time.sleep(0.5)
    messages = (uas.cwd / "messages.log").read_text(errors="replace")
    top = re.search(r"^INVITE sip:.*?^Via:([^\r\n]*)", messages, re.S | re.M)
    algos = re.findall(r'oc-algo="([^"]*)"', top.group(1) if top else "")
    # RFC 7339 §4.2: the client lists "the algorithms supported by the SIP client". Kamailio
    # before 5.8 refuses a Via with a comma inside a quoted parameter value, so the module
    # offers loss alone there.
    c.that(algos[:1] == [offer], f"the INVITE's top Via offers oc-algo={algos[:1]} (expected [{offer!r}])")
    ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
    c.that(len(ts) > warm + 100, f"{len(ts)} INVITEs reached the UAS")
    if len(ts) <= warm + 100:
        return c
    c.rate("warm-up (oc=0, oc-validity=0)", ts, ts[20], ts[warm - 20], offered, 0.10)
    log = kam.log()
    if rate_offered:
        # RFC 7415 §3.5.1: the client "limits the message rate to the "oc" parameter in units
        # of messages per second" — across both processes (the hop's bucket is shared).
        c.rate("oc=20 (rate) in force", ts, ts[warm] + 1.0, ts[-1], limit, 0.10)
        c.that("feedback from" not in log, "Kamailio refused no feedback")
    else:
        # §4.2: the server "chooses one algorithm from the list": a rate answer to a loss-only
        # offer is not one, and is refused rather than applied.
        c.rate("a rate answer to a loss-only offer is not applied", ts, ts[warm] + 1.0, ts[-1], offered, 0.10)
        c.that("feedback from" in log, "Kamailio logged the refused feedback")
    counts = SippOutputs(uac.cwd).counts()
    failed = SippOutputs(uac.cwd).stat().get("FailedCall(C)", -1)
    c.that(failed == 0, f"no UAC call failed ({failed}; {sum(n for k, n in counts.items() if k.endswith('_503_Recv'))} shed with 503)")
    return c


def oc_server_occupancy(run: Run) -> Checks:
    """Kamailio (children=2, tm) as an RFC 7339 server on an occupancy signal the test computes
    from the UAS's arrival rate (a server of CAPACITY calls/s): a participating client (the edge
    with --overload-control) and a SIPp UAC that does not take part each offer 60 calls/s."""
    capacity, offered, seconds = 60.0, 60.0, 16.0
    c = Checks(f"oc_server_occupancy: Kamailio children=2 as RFC 7339 server, occupancy = arrivals / {capacity:.0f}/s, "
               f"an RFC 7339 edge and a plain SIPp UAC offering {offered:.0f} calls/s each")
    # A UAS that answers 200 and takes the ACK (uac_invite_only.xml's calls).
    uas_ports = SippPorts.pick()
    uas = run.start("uas", sipp_command("uas_invite_only.xml", uas_ports, timeout_s=seconds + 40))
    wait_udp_port(uas_ports.sip, proc=uas)
    kam = Kamailio(run, "kamailio", document(0, "full", ""), 2, uas_ports.sip, stateful=True, defines=("OC_SERVER",))
    eport = free_udp_port(tcp=True)
    policy = run.path("edge-policy.xml")
    policy.write_text(document(0, "full", ""))
    # `loss` only: Kamailio 5.6's Via parser refuses the comma inside oc-algo="loss,rate"
    # ("bad header field [,rate\"]"): an interoperability limit of that peer, not of RFC 7339.
    capture = WireCapture(run, "capture", [kam.port])
    edge = start_edge(run, "edge", eport, kam.port, "--policy", policy, "--transport", "udp", "--overload-control",
                      "--oc-algorithms", "loss")
    inf = write_injection(run.path("callees.csv"), [MATCH])
    calls = int(offered * seconds)
    uac_oc = run.start("uac-oc", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{eport}", inf=inf,
                                              rate=offered, calls=calls, timeout_s=seconds + 30, logs=False))
    uac_plain = run.start("uac-plain", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{kam.port}", inf=inf,
                                                    rate=offered, calls=calls, timeout_s=seconds + 30, logs=False))
    t0, fed = feed_occupancy(uas, kam.port, capacity, seconds)
    uac_oc.wait(timeout=60)
    uac_plain.wait(timeout=60)
    edge_stats = stats_now(edge)
    ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
    # What each report said against what the UAS logged in the same window once it had
    # flushed (a lagging log would feed the loop too little).
    run.path("occupancy.tsv").write_text("".join(f"{a - t0:.3f}\t{b - t0:.3f}\t{m:.3f}\t{count_in(ts, a, b) / (capacity * (b - a)):.3f}\n"
                                                 for a, b, m in fed))
    first = ts[0] if ts else t0
    # Physics: the loop aims at the capacity: CAPACITY ± 15 % at the UAS once it has settled.
    c.rate("INVITEs at the UAS after 4 s", ts, first + 4.0, first + seconds - 1.0, capacity, 0.15)
    # RFC 7339 §5.1: the server chose loss for the edge (the module's servers run the loss
    # algorithm) and its values reached the edge in the Via of relayed replies.
    c.that(edge_stats.get("edge_oc_next_hop_algorithm") == 1, f"the edge's next hop selected loss (algorithm {edge_stats.get('edge_oc_next_hop_algorithm')})")
    c.that(edge_stats.get("edge_oc_next_hop_updates_total", 0) > 10, f"feedback updates applied at the edge: {edge_stats.get('edge_oc_next_hop_updates_total')}")
    shed = edge_stats.get("edge_oc_shed_total", 0)
    plain = invite_outcomes(SippOutputs(uac_plain.cwd))
    oc_out = invite_outcomes(SippOutputs(uac_oc.cwd))
    # Max-min fair over two equal demands: half each; the participant sheds its excess itself,
    # the non-participant is rejected by the server (§5.10.2): both lose about half.
    c.that(0.3 <= shed / max(oc_out["invites"], 1) <= 0.7, f"the edge shed {shed:.0f} of {oc_out['invites']} INVITEs ({shed / max(oc_out['invites'], 1):.0%}; half ± 20 %)")
    c.that(0.3 <= plain["rejected_503"] / max(plain["invites"], 1) <= 0.7,
           f"Kamailio answered 503 to {plain['rejected_503']} of the plain UAC's {plain['invites']} INVITEs ({plain['rejected_503'] / max(plain['invites'], 1):.0%}; half ± 20 %)")
    c.that(oc_out["failed_calls"] == 0 and plain["failed_calls"] == 0, f"no call failed ({oc_out['failed_calls']}, {plain['failed_calls']})")
    # A second reader of the wire: tshark's decoding of the replies the module's Kamailio sent
    # the edge against what the module logged it wrote (oc_log), and the edge's offer in the
    # requests it sent (`loss`, as configured).
    capture.stop()
    oc_wire_vs_sent(c, "module → edge", capture.top_via_oc(kam.port, eport), oc_sent(kam.log()))
    offers = [via_oc(r["via"] or "") for r in capture.top_via_oc(eport, kam.port, requests=True)]
    requests = capture.requests(eport, kam.port)
    c.that(requests > 100 and len(offers) == requests and all(o["oc"] and o["oc_algo"] == "loss" for o in offers),
           f"tshark: every one of the {requests} requests the edge sent offers `;oc;oc-algo=\"loss\"` ({len(offers)} with oc)")
    return c


def oc_strip(run: Run) -> Checks:
    c = Checks("oc_strip: Kamailio as RFC 7339 server relays no oc value a next hop inserted, and no client's offer downstream")
    hop = NextHop(insert=True)
    try:
        # one worker: the module's server is per process, and the reply must meet the one that
        # counted the request
        kam = Kamailio(run, "kamailio", document(0, "full", ""), 1, hop.port, stateful=True, defines=("OC_SERVER",))
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        cport = sock.getsockname()[1]
        earlier = "Via: SIP/2.0/UDP 192.0.2.9:5060;branch=z9hG4bK-upstream;oc=7;oc-validity=500;oc-seq=1.0\r\n"
        # `loss` alone: Kamailio 5.6 refuses a Via with a comma inside a quoted value
        cases = {"plain": "", "offering": ';oc;oc-algo="loss"'}
        got = {}
        for n, (name, params) in enumerate(cases.items()):
            sock.sendto(options(cport, cport, n, params, extra_via=earlier), ("127.0.0.1", kam.port))
            r = [m for m in UdpPeers.drain(sock, quiet=1.0) if m.startswith("SIP/2.0 ")]
            got[name] = r[-1] if r else ""
        forwarded = [m for m in hop.received if m.startswith("OPTIONS ")]
        sock.close()
    finally:
        hop.close()
    strip_checks(c, "the module", forwarded, got)
    return c


def oc_forged_priority(run: Run) -> Checks:
    c = Checks("oc_forged_priority: Kamailio in overload rejects forged priority markings like any request")
    hop = NextHop()
    seconds, rate, warmup = 6.0, 30.0, 30  # the first second: overload sets in
    stop = threading.Event()
    try:
        # one worker: the module's server is per process
        kam = Kamailio(run, "kamailio", document(0, "full", ""), 1, hop.port, stateful=True,
                       defines=("OC_SERVER", 'PRIORITY_PEERS="127.0.0.2"', "DIALOG_FLAG=5"))
        caller = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        caller.bind(("127.0.0.1", 0))
        dialog = set_up_dialog(kam.port, caller)
        caller.close()
        c.that(dialog[2] is not None, f"an INVITE through Kamailio set up a dialog (To tag {dialog[2]})")

        def overload():
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            probe.bind(("127.0.0.1", 0))
            n = 0
            while not stop.is_set():
                n += 1
                probe.sendto((f"OPTIONS sip:kamailio@127.0.0.1:{kam.port} SIP/2.0\r\n"
                              f"Via: SIP/2.0/UDP 127.0.0.1:{probe.getsockname()[1]};branch=z9hG4bK-occ{n}\r\n"
                              f"From: <sip:test@127.0.0.1>;tag=o{n}\r\nTo: <sip:kamailio@127.0.0.1>\r\nCall-ID: occ{n}\r\n"
                              f"CSeq: 1 OPTIONS\r\nX-Measured: 5000000\r\nX-Target: 1000000\r\nContent-Length: 0\r\n\r\n").encode(),
                             ("127.0.0.1", kam.port))
                stop.wait(0.1)
            probe.close()

        feeder = threading.Thread(target=overload, daemon=True)
        feeder.start()
        senders = {
            "unmarked": Sender(kam.port, from_n=warmup),
            "Resource-Priority ets.0 from 127.0.0.1 (not listed)": Sender(kam.port, from_n=warmup, build=marked("Resource-Priority: ets.0\r\n")),
            "a To tag of no dialog": Sender(kam.port, from_n=warmup, build=marked(to="<sip:ping@127.0.0.1>;tag=forged")),
            "Resource-Priority ets.0 from 127.0.0.2 (listed)": Sender(kam.port, from_n=warmup, build=marked("Resource-Priority: ets.0\r\n"),
                                                                     bind="127.0.0.2"),
            "in the dialog Kamailio tracks": Sender(kam.port, from_n=warmup, build=marked(dialog=dialog)),
            "urn:service:sos": Sender(kam.port, from_n=warmup, build=marked(ruri="urn:service:sos", to="<urn:service:sos>")),
        }
        send_for(seconds, rate, list(senders.values()))
        time.sleep(0.5)
        for s in senders.values():
            s.collect()
    finally:
        stop.set()
        hop.close()
    unmarked = senders["unmarked"].share("503")
    for name, s in senders.items():
        shed = s.share("503")
        trusted = name.startswith(("Resource-Priority ets.0 from 127.0.0.2", "in the dialog", "urn:"))
        # In overload the server rejects most of what does not take part (§5.10.2); a forged
        # marking changes nothing: the same share as unmarked requests.
        ok = (shed == 0 and s.answers.get("200", 0) >= 0.95 * s.sent) if trusted else shed >= 0.5 and abs(shed - unmarked) <= 0.15
        c.that(ok, f"{name}: {s.answers.get('503', 0)} of {s.sent} requests after the first second answered 503 "
                   f"({shed:.0%}; 200: {s.answers.get('200', 0)}), expected "
                   f"{'none' if trusted else f'most, as unmarked ({unmarked:.0%}) ± 15 points'}")
    for s in senders.values():
        s.close()
    return c


def oc_hop_ageing(run: Run) -> Checks:
    c = Checks("oc_hop_ageing: oc_hops 1, oc_hop_idle 64: an idle destination gives its cell to a new one")
    top = ';oc=100;oc-algo="loss";oc-validity=600000;oc-seq={n}.0'
    a, b = NextHop(top=top), NextHop(top=top)
    try:
        kam = Kamailio(run, "kamailio", document(0, "full", ""), 1, a.port, stateful=True,
                       defines=('OC_CLIENT="$hdr(X-Hop)"', "HOP_HEADER", "OC_HOPS=1", "OC_HOP_IDLE=64"))
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        cport = sock.getsockname()[1]
        sent = [0]

        def ask(hop: NextHop) -> str:
            """The status line Kamailio answers an OPTIONS for `hop` with."""
            sent[0] += 1
            req = options(cport, cport, sent[0]).replace(
                b"Max-Forwards: 70\r\n", f"Max-Forwards: 70\r\nX-Hop: 127.0.0.1:{hop.port}\r\n".encode())
            sock.sendto(req, ("127.0.0.1", kam.port))
            r = [m for m in UdpPeers.drain(sock, quiet=0.5) if m.startswith("SIP/2.0 ")]
            return r[-1].split("\r\n", 1)[0] if r else "(no answer)"

        first = ask(a)
        c.that(first.startswith("SIP/2.0 200"), f"the first request to A went (no value yet): {first}")
        shed = ask(a)
        c.that(shed.startswith("SIP/2.0 503"), f"A's oc=100 then sheds its requests: {shed}")
        last_use_a = time.monotonic()
        b_before = [ask(b) for _ in range(2)]
        c.that(all(r.startswith("SIP/2.0 200") for r in b_before) and len(b.received) == 2,
               f"while A is in use, B gets no cell and no control: {b_before}, {len(b.received)} reached B")
        c.that("no hop for 127.0.0.1:%d" % b.port in kam.log(), "Kamailio logged that B found no cell")
        # oc_hop_idle counts whole seconds of the last use: 64 s after A's last request, + 2 s.
        time.sleep(max(0.0, last_use_a + 66 - time.monotonic()))
        taken = ask(b)
        c.that(taken.startswith("SIP/2.0 200") and len(b.received) == 3,
               f"after A's 64 idle seconds B takes the cell; its first request goes: {taken}")
        b_shed = ask(b)
        c.that(b_shed.startswith("SIP/2.0 503"), f"B's own oc=100 now applies: {b_shed}")
        a_again = ask(a)
        c.that(a_again.startswith("SIP/2.0 200") and len(a.received) == 2,
               f"A was forgotten with its cell (its value no longer sheds, and it finds no cell): {a_again}")
        c.that("feedback from" not in kam.log(), "Kamailio refused no feedback")
        sock.close()
    finally:
        a.close()
        b.close()
    return c


TESTS = {
    "oc_client_loss": oc_client_loss,
    "oc_client_call_mix": oc_client_call_mix,
    "oc_client_offer": oc_client_offer,
    "oc_server_occupancy": oc_server_occupancy,
    "oc_strip": oc_strip,
    "oc_forged_priority": oc_forged_priority,
    "oc_hop_ageing": oc_hop_ageing,
}


def main() -> int:
    return suite_main(__doc__, TESTS, suite_label("kamailio module RFC 7339 e2e"), prefix="kam-")


if __name__ == "__main__":
    sys.exit(main())
