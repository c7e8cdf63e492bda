#!/usr/bin/env python3
"""End-to-end tests of the C edge (edge/) over TLS: calls, the RFC 7200 dialog and the RFC 7339
loop with real peers, and the peers that must be refused. Certificates are made by the test
(tls_peers.Pki: a CA, and a rogue CA issuing look-alike certificates); SIPp speaks TLS through
stunnel (Debian's SIPp has no TLS).

    python3 tests/e2e/test_edge_tls.py [--keep] [NAME ...]
    (make e2e builds what it needs first)

- calls_over_tls: SIPp UAC → stunnel (verifying the edge as edge.test) → the edge's
  --tls-listen → TLS to the next hop (verified as hop.test) → stunnel → SIPp UAS, a rate rule
  R on +1555 and 4R calls/s (3 matching : 1 other): R admitted, every other call passes, every
  admitted call completes, the forwarded requests carry the edge's TLS Via, and exactly two
  handshakes (one each way) carried it all.
- subscription_over_tls: the edge subscribes to a sips: notifier (SIPp behind stunnel with a
  certificate for notifier.test) and applies its document; the same dialog's NOTIFY forged over
  UDP (from the notifier's own host, which the RFC 6665 state machine alone would accept) and
  over the edge's TLS listener (with a valid client certificate that is not the notifier's
  connection) is answered 403, counted and not applied; the edge enforces the notifier's rate;
  on SIGTERM the unsubscribe and the final NOTIFY pass on the TLS connection.
- notifier_connection_lost: a Python TLS notifier that closes the connection after its first
  NOTIFY: the edge subscribes again at once on a new connection (a new dialog) and applies the
  new subscription's document.
- untrusted_notifier: a notifier presenting a rogue CA's certificate for notifier.test, or the
  right CA's for another name, gets no SUBSCRIBE (the handshake fails, logged with the reason).
- client_certificates: --tls-require-client-cert: a client without a certificate or with a
  rogue one is refused at the handshake, one with the CA's certificate is served; a next hop
  with a rogue certificate gets nothing (503 to the caller); a connection that never finishes
  its handshake is closed after 10 s.
- reconnecting_clients: a client that resumes its TLS session on a new connection is served
  (with client certificates requested, OpenSSL refuses resumption unless the edge sets a
  session id context), and a request written in the same segment as the client's last
  handshake flight is answered (read ahead with the handshake, epoll does not report it again).
- forged_responses: a response naming a TLS caller's connection (its lc-conn, read off the next
  hop's copy) sent over plain TCP or UDP by someone else reaches nobody (counted), and oc values
  in a response from anyone but the next hop change nothing; a sips: Request-URI that did not
  come over TLS is answered 416 (RFC 3261 §16.6 step 7), over TLS it is forwarded.
- certificate_reload: SIGHUP reads the certificate files again: a new connection gets the
  renewed certificate; files that cannot be used leave the one in use (logged).
- tls_command_line: TLS options without what they need are refused (exit 2, naming what is
  missing); a certificate or key that cannot be used stops the edge (exit 1, naming the file).
- abandoned_handshakes: 30 connections from one address to the TLS port that never start their
  handshake: with `--max-connections 10` alone they take every place and a client from another
  address is refused; with `--max-connections-per-source 4` they hold 4 places, 26 are refused
  at once, and the other client is served.
- overload_loop_over_tls: tests/e2e/overload_setups.py's loss feedback (SIPp UAS answering
  oc=50 loss, RFC 7339 §7.2) with the edge reaching the UAS over TLS: the same shares as over
  UDP (test_overload.py uas_loss_feedback).
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import ssl
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from checks import Checks, suite_main  # noqa: E402
from edge_proc import EDGE, edge_events, edge_stats, samples, scrape, start_edge, wait_event  # noqa: E402
from overload_setups import loss_feedback_through, stats_now  # noqa: E402
from policy_docs import MATCH, OTHER, document, rate_rule, split  # noqa: E402
from ports import free_udp_port, wait_tcp_port, wait_udp_port  # noqa: E402
from processes import Run, wait_until  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402
from sip_sockets import header  # noqa: E402
from tls_peers import Pki, TlsServer, client_context, read_message, read_messages, stunnel  # noqa: E402


class Certs:
    """The run's trust root and certificates: the edge (edge.test and 127.0.0.1), the next hop
    (hop.test), the notifier (notifier.test), a client; and a rogue root's look-alikes."""

    def __init__(self, run: Run):
        self.ca = Pki(run.dir / "pki", "ca")
        self.rogue = Pki(run.dir / "pki", "rogue")
        self.edge = self.ca.issue("edge.test", dns=["edge.test"], ips=["127.0.0.1"])
        self.hop = self.ca.issue("hop.test", dns=["hop.test"])
        self.notifier = self.ca.issue("notifier.test", dns=["notifier.test"])
        self.other = self.ca.issue("other.test", dns=["other.test"])
        self.client = self.ca.issue("client.test", dns=["client.test"])
        self.rogue_notifier = self.rogue.issue("notifier.test", dns=["notifier.test"])
        self.rogue_hop = self.rogue.issue("hop.test", dns=["hop.test"])
        self.rogue_client = self.rogue.issue("client.test", dns=["client.test"])

    def edge_flags(self) -> list:
        return ["--tls-cert", self.edge.cert, "--tls-key", self.edge.key, "--tls-ca", self.ca.cert]


def tls_edge(run: Run, certs: Certs, name: str, next_hop: int, tls_next_hop: int, *args):
    """An edge with --tls-listen on a port of its own; (proc, UDP/TCP port, TLS port)."""
    port, tls_port = free_udp_port(tcp=True), free_udp_port(tcp=True)
    edge = start_edge(run, name, port, next_hop, "--tls-listen", f"127.0.0.1:{tls_port}", "--tls-next-hop",
                      f"127.0.0.1:{tls_next_hop}", *certs.edge_flags(), *args)
    wait_tcp_port(tls_port, proc=edge)
    return edge, port, tls_port


def hop_edge(run: Run, certs: Certs, *args):
    """A Python TLS next hop (hop.test) and an edge forwarding to it under a rate-5 policy;
    (edge, hop, UDP/TCP port, TLS port)."""
    hop = TlsNextHop(certs.hop)
    edge, port, tls_port = tls_edge(run, certs, "edge", free_udp_port(), hop.port, "--policy", policy_file(run, 5),
                                    "--tls-next-hop-name", "hop.test", *args)
    return edge, hop, port, tls_port


def policy_file(run: Run, r: float) -> Path:
    p = run.path("policy.xml")
    p.write_text(document(0, "full", rate_rule(r)))
    return p



# ---------------------------------------------------------------------------------------------
# Python TLS peers


class TlsNextHop(TlsServer):
    """A TLS next hop answering 200 to every request (Via, From, To, Call-ID, CSeq copied),
    keeping the requests."""

    def __init__(self, cert):
        self.requests = []
        super().__init__(cert)

    def serve(self, conn):
        for msg in read_messages(conn):
            self.requests.append(msg)
            keep = [ln for ln in msg.split("\r\n")[1:] if ln.split(":")[0].strip().lower() in ("via", "from", "to", "call-id", "cseq")]
            conn.sendall(("SIP/2.0 200 OK\r\n" + "\r\n".join(keep) + "\r\nContent-Length: 0\r\n\r\n").encode())


def tls_connect(port: int, ca, cert=None, name: str = "edge.test"):
    """A TLS connection to the edge verified as `name`, presenting `cert`; raises on a refused
    handshake. TLS 1.3 reports a refused client certificate only at the first read, so the
    connection is read once (up to 0.5 s) before it is handed back."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn = client_context(ca, cert).wrap_socket(raw, server_hostname=name)
    conn.settimeout(0.5)
    try:
        data = conn.recv(1)
        if data == b"":
            raise ssl.SSLError("closed by the edge after the handshake")
    except socket.timeout:
        pass
    conn.settimeout(5)
    return conn


def options(n: int) -> bytes:
    return (f"OPTIONS sip:+16660000000@example.com SIP/2.0\r\nVia: SIP/2.0/TLS 127.0.0.1:5999;branch=z9hG4bKtls{n}\r\n"
            f"From: <sip:tester@example.com>;tag=t{n}\r\nTo: <sip:+16660000000@example.com>\r\nCall-ID: tls-{n}\r\n"
            f"CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n").encode()



# ---------------------------------------------------------------------------------------------


def calls_over_tls(run: Run) -> Checks:
    c = Checks("calls_over_tls: SIPp → stunnel → edge (TLS) → TLS next hop → stunnel → SIPp, rate rule R")
    certs = Certs(run)
    r, seconds = 20.0, 8
    uas_ports, uac_ports = SippPorts.pick(tcp=True), SippPorts.pick(tcp=True)
    uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=seconds + 40, transport="t1"))
    wait_tcp_port(uas_ports.sip, proc=uas)
    hop_port = free_udp_port(tcp=True)
    stunnel(run, "hop-tls", hop_port, uas_ports.sip, client=False, cert=certs.hop)
    edge, _, tls_port = tls_edge(run, certs, "edge", free_udp_port(), hop_port, "--policy", policy_file(run, r),
                                 "--tls-next-hop-name", "hop.test", "--metrics", f"127.0.0.1:{(mport := free_udp_port(tcp=True))}")
    front = free_udp_port(tcp=True)
    stunnel(run, "uac-tls", front, tls_port, client=True, ca=certs.ca.cert, check_host="edge.test")
    inf = write_injection(run.path("callees.csv"), [MATCH, MATCH, MATCH, OTHER])
    offered = 4 * r
    uac = run.start("uac", sipp_command("uac_invite.xml", uac_ports, remote=f"127.0.0.1:{front}", inf=inf, rate=offered,
                                        calls=int(offered * seconds), timeout_s=seconds + 30, transport="t1"))
    uac.wait(timeout=seconds + 40)
    run.stop(uas)
    arrivals = SippOutputs(uas.cwd).arrivals()
    matching, other = split(arrivals)
    out = invite_outcomes(SippOutputs(uac.cwd))
    c.steady_rate("matching calls admitted over TLS at rate R", matching, r, "no matching call reached the UAS")
    c.that(abs(len(other) - out["invites"] // 4) <= 1, f"every non-matching call passed: {len(other)} of ~{out['invites'] // 4}")
    c.that(out["failed_calls"] == 0, f"no UAC call failed ({out})")
    c.that(out["answered_200"] + out["rejected_503"] == out["invites"],
           f"every INVITE was answered 200 or 503 over TLS: {out['answered_200']} + {out['rejected_503']} of {out['invites']}")
    c.that(out["bye_200"] == out["answered_200"], f"every admitted call completed (ACK, BYE, 200): {out['bye_200']} of {out['answered_200']}")
    metrics = edge_metrics(mport)
    c.that(metrics.get("edge_tls_handshakes_total") == 2 and metrics.get("edge_tls_handshake_failures_total") == 0,
           f"one TLS connection each way carried every call: {metrics.get('edge_tls_handshakes_total')} handshakes, "
           f"{metrics.get('edge_tls_handshake_failures_total')} failed")
    log = edge.stderr_path.read_text(errors="replace")
    c.that(f"tls: next hop 127.0.0.1:{hop_port} verified as hop.test" in log, "the edge logged the next hop verified as hop.test")
    return c


def edge_metrics(port: int) -> dict:
    status, _, body = scrape(port)
    return samples(body) if status == 200 else {}


def subscription_over_tls(run: Run) -> Checks:
    c = Checks("subscription_over_tls: a sips: notifier behind stunnel; forged NOTIFYs over UDP and TLS refused")
    certs = Certs(run)
    r = 20.0
    template = (HERE / "scenarios" / "notifier_tls.xml").read_text().replace("@DOC_V0@", document(0, "full", rate_rule(r)))
    scenario = run.path("notifier_tls.xml")
    scenario.write_text(template)
    notifier_ports = SippPorts.pick(tcp=True)
    notifier = run.start("notifier", sipp_command(scenario, notifier_ports, calls=1, timeout_s=90, transport="t1"))
    wait_tcp_port(notifier_ports.sip, proc=notifier)
    front = free_udp_port(tcp=True)
    stunnel(run, "notifier-tls", front, notifier_ports.sip, client=False, cert=certs.notifier)
    uas_ports = SippPorts.pick()
    uas = run.start("uas", sipp_command("uas.xml", uas_ports, timeout_s=60))
    wait_udp_port(uas_ports.sip, proc=uas)
    edge, port, tls_port = tls_edge(run, certs, "edge", uas_ports.sip, free_udp_port(tcp=True),
                                    "--subscribe", "sips:sbc@notifier.test", "--notifier", f"127.0.0.1:{front}",
                                    "--metrics", f"127.0.0.1:{(mport := free_udp_port(tcp=True))}")
    wait_event(edge, "policy applied (version)", 0)
    log = edge.stderr_path.read_text(errors="replace")
    c.that(f"notifier 127.0.0.1:{front} verified as notifier.test" in log, "the edge verified the notifier as notifier.test")
    dialog = wait_until(lambda: "dialog|" in (notifier.cwd / "logs.log").read_text(errors="replace")
                        if (notifier.cwd / "logs.log").exists() else False, 5)
    c.that(dialog, "the notifier logged the subscription's dialog")
    line = next(ln for ln in (notifier.cwd / "logs.log").read_text(errors="replace").splitlines() if ln.startswith("dialog|"))
    _, call_id, peer, tag, target = line.split("|")[:5]
    c.that(target.startswith("sips:edge@"), f"the edge's Contact is a sips: URI ({target})")

    def forged(via: str, cseq: int) -> bytes:
        body = document(9, "full", rate_rule(0))
        return (f"NOTIFY {target} SIP/2.0\r\nVia: {via};branch=z9hG4bKforged{cseq}\r\nMax-Forwards: 70\r\n"
                f"From: <sip:sbc@notifier.test>;tag={tag}\r\nTo: {peer}\r\nCall-ID: {call_id}\r\n"
                f"CSeq: {cseq} NOTIFY\r\nContact: <sip:sbc@127.0.0.1:{notifier_ports.sip}>\r\nEvent: load-control\r\n"
                f"Subscription-State: active;expires=3000\r\nContent-Type: application/load-control+xml\r\n"
                f"Content-Length: {len(body.encode())}\r\n\r\n{body}").encode()

    # Over UDP from the notifier's own host, with the subscription's dialog.
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(3)
    udp.sendto(forged(f"SIP/2.0/UDP 127.0.0.1:{udp.getsockname()[1]};rport", 50), ("127.0.0.1", port))
    try:
        answer = udp.recv(65536).decode(errors="replace")
    except socket.timeout:
        answer = ""
    c.that(answer.startswith("SIP/2.0 403"), f"the forged NOTIFY over UDP was answered 403: {answer.splitlines()[:1]}")
    # Over the edge's TLS listener, with a valid client certificate of the same CA.
    conn = tls_connect(tls_port, certs.ca.cert, certs.client)
    conn.sendall(forged("SIP/2.0/TLS 127.0.0.1:5999", 51))
    answer = read_message(conn)
    conn.close()
    c.that(answer.startswith("SIP/2.0 403"), f"the forged NOTIFY over another TLS connection was answered 403: {answer.splitlines()[:1]}")
    metrics = edge_metrics(mport)
    c.that(metrics.get("edge_subscriber_notifies_refused_total") == 2, f"both counted as refused ({metrics.get('edge_subscriber_notifies_refused_total')})")
    c.that(metrics.get("edge_subscriber_documents_applied_total") == 1 and
           not any(n == 9 for _, w, n, _ in edge_events(edge) if w == "policy applied (version)"),
           f"only the notifier's document was applied ({metrics.get('edge_subscriber_documents_applied_total')} applied)")
    # The notifier's rate R is what is enforced (a forged rate 0 would admit nothing).
    seconds = 5
    inf = write_injection(run.path("callees.csv"), [MATCH])
    uac = run.start("uac", sipp_command("uac_invite.xml", SippPorts.pick(), remote=f"127.0.0.1:{port}", inf=inf, rate=2 * r,
                                        calls=int(2 * r * seconds), timeout_s=40))
    uac.wait(timeout=50)
    matching, _ = split(SippOutputs(uas.cwd).arrivals())
    c.steady_rate("the notifier's rate R is enforced", matching, r, "no call was admitted: the notifier's rate R is not what is enforced")
    # SIGTERM: the unsubscribe and the terminated NOTIFY on the TLS connection.
    run.stop(edge)
    code = notifier.wait(timeout=20)
    c.that(code == 0, f"the notifier got the unsubscribe over TLS and its final NOTIFY was answered (exit {code}): "
           f"{SippOutputs(notifier.cwd).errors(300)!r}")
    return c


class TlsNotifier(TlsServer):
    """A TLS notifier: answers each SUBSCRIBE 200 and sends one NOTIFY with the next of
    `documents` on the same connection; closes connection number n (from 0) after its NOTIFY's
    200 when n is in `drop`. Records (time, Call-ID, Expires) of each SUBSCRIBE."""

    def __init__(self, cert, documents, drop):
        self.documents, self.drop = list(documents), drop
        self.subscribes, self.closed_at = [], []
        self.connections = 0
        super().__init__(cert)

    def serve(self, conn):
        n = self.connections
        self.connections += 1
        conn.settimeout(10)
        for msg in read_messages(conn):
            if msg.startswith("SIP/2.0 200") and "NOTIFY" in header(msg, "CSeq"):
                if n in self.drop:
                    self.closed_at.append(time.monotonic())
                    return
                continue
            if not msg.startswith("SUBSCRIBE "):
                continue
            self.subscribes.append((time.monotonic(), header(msg, "Call-ID"), header(msg, "Expires")))
            vias = "\r\n".join(ln for ln in msg.split("\r\n") if ln.lower().startswith("via:"))
            contact = re.search(r"<([^>]+)>", header(msg, "Contact")).group(1)
            tag = f"tn{len(self.subscribes)}"
            ok = (f"SIP/2.0 200 OK\r\n{vias}\r\nFrom: {header(msg, 'From')}\r\nTo: {header(msg, 'To')};tag={tag}\r\n"
                  f"Call-ID: {header(msg, 'Call-ID')}\r\nCSeq: {header(msg, 'CSeq')}\r\nContact: <sip:sbc@notifier.test>\r\n"
                  f"Expires: 600\r\nContent-Length: 0\r\n\r\n")
            conn.sendall(ok.encode())
            if header(msg, "Expires").strip() == "0" or not self.documents:
                continue
            body = self.documents.pop(0)
            notify = (f"NOTIFY {contact} SIP/2.0\r\nVia: SIP/2.0/TLS notifier.test;branch=z9hG4bKn{len(self.subscribes)}\r\n"
                      f"Max-Forwards: 70\r\nFrom: <sip:sbc@notifier.test>;tag={tag}\r\nTo: {header(msg, 'From')}\r\n"
                      f"Call-ID: {header(msg, 'Call-ID')}\r\nCSeq: 1 NOTIFY\r\nContact: <sip:sbc@notifier.test>\r\n"
                      f"Event: load-control\r\nSubscription-State: active;expires=600\r\n"
                      f"Content-Type: application/load-control+xml\r\nContent-Length: {len(body.encode())}\r\n\r\n{body}")
            conn.sendall(notify.encode())


def notifier_connection_lost(run: Run) -> Checks:
    c = Checks("notifier_connection_lost: the notifier's TLS connection breaks; the edge subscribes again at once")
    certs = Certs(run)
    notifier = TlsNotifier(certs.notifier, [document(0, "full", rate_rule(10)), document(0, "full", rate_rule(30))], drop={0})
    edge = start_edge(run, "edge", free_udp_port(tcp=True), free_udp_port(), "--subscribe", "sips:sbc@notifier.test",
                      "--notifier", f"127.0.0.1:{notifier.port}", "--tls-ca", certs.ca.cert,
                      "--metrics", f"127.0.0.1:{(mport := free_udp_port(tcp=True))}")
    again = wait_until(lambda: len(notifier.subscribes) >= 2, 5)
    c.that(again, f"a second SUBSCRIBE came after the connection was closed ({len(notifier.subscribes)} SUBSCRIBEs)")
    if again and notifier.closed_at:
        delay = notifier.subscribes[1][0] - notifier.closed_at[0]
        c.that(0 <= delay < 1.0, f"within 1 s of the close ({delay * 1000:.0f} ms), not at the refresh 600 s later")
        c.that(notifier.subscribes[1][1] != notifier.subscribes[0][1], "as a new subscription (a new Call-ID: the old dialog cannot be reached)")
    applied = wait_until(lambda: edge_metrics(mport).get("edge_subscriber_documents_applied_total") == 2, 3)
    c.that(applied, f"the new subscription's document was applied ({edge_metrics(mport).get('edge_subscriber_documents_applied_total')} applied)")
    log = edge.stderr_path.read_text(errors="replace")
    c.that("the notifier's TLS connection was lost: subscribing again" in log and log.count("verified as notifier.test") == 2,
           "the edge logged the loss and verified the notifier again")
    run.stop(edge)
    notifier.close()
    return c


def untrusted_notifier(run: Run) -> Checks:
    c = Checks("untrusted_notifier: a rogue CA's notifier.test, and the CA's other.test, get no SUBSCRIBE")
    certs = Certs(run)
    for label, cert, reason in (("rogue CA", certs.rogue_notifier, "certificate not accepted: unable to get local issuer certificate"),
                                ("another name", certs.other, "certificate not accepted: hostname mismatch")):
        server = TlsNextHop(cert)
        edge = start_edge(run, f"edge-{label.replace(' ', '-')}", free_udp_port(tcp=True), free_udp_port(),
                          "--subscribe", "sips:sbc@notifier.test", "--notifier", f"127.0.0.1:{server.port}", "--tls-ca", certs.ca.cert,
                          "--startup-hold-ms", "0", "--fallback-policy", policy_file(run, 5))
        refused = wait_until(lambda: reason in edge.stderr_path.read_text(errors="replace"), 5)
        time.sleep(0.5)
        c.that(refused, f"{label}: the edge refused the handshake ({reason!r})")
        c.that(server.handshake_failures >= 1 and not server.requests,
               f"{label}: the notifier got no SUBSCRIBE ({server.handshake_failures} failed handshakes, {len(server.requests)} requests)")
        c.that(not any(w == "policy applied (version)" for _, w, _, _ in edge_events(edge)), f"{label}: no policy applied")
        run.stop(edge)
        server.close()
    return c


def client_certificates(run: Run) -> Checks:
    c = Checks("client_certificates: --tls-require-client-cert, a rogue next hop, a handshake that never ends")
    certs = Certs(run)
    edge, hop, _, tls_port = hop_edge(run, certs, "--tls-require-client-cert", "--metrics", f"127.0.0.1:{(mport := free_udp_port(tcp=True))}")
    silent = socket.create_connection(("127.0.0.1", tls_port))
    opened = time.monotonic()
    for label, cert in (("no certificate", None), ("a rogue CA's certificate", certs.rogue_client)):
        try:
            conn = tls_connect(tls_port, certs.ca.cert, cert)
            conn.sendall(options(1))
            answer = read_message(conn)
            refused = answer == ""
        except (ssl.SSLError, OSError):
            refused = True
        c.that(refused, f"a client with {label} is refused")
    conn = tls_connect(tls_port, certs.ca.cert, certs.client)
    conn.sendall(options(2))
    answer = read_message(conn)
    c.that(answer.startswith("SIP/2.0 200"), f"a client with the CA's certificate is served: {answer.splitlines()[:1]}")
    c.that(len(hop.requests) == 1 and "Via: SIP/2.0/TLS 127.0.0.1:" in hop.requests[0],
           f"the next hop got it over TLS with the edge's TLS Via: {[v for v in hop.requests[0].splitlines() if v.startswith('Via')] if hop.requests else []}")
    conn.close()
    # A next hop with a rogue certificate gets nothing: the caller gets 503 (RFC 3261 §16.9).
    rogue_hop = TlsNextHop(certs.rogue_hop)
    edge2, _, tls2 = tls_edge(run, certs, "edge-rogue-hop", free_udp_port(), rogue_hop.port, "--policy", policy_file(run, 5),
                              "--tls-next-hop-name", "hop.test")
    conn = tls_connect(tls2, certs.ca.cert)
    conn.sendall(options(3))
    answer = read_message(conn)
    conn.close()
    c.that(answer.startswith("SIP/2.0 503") and not rogue_hop.requests,
           f"a rogue next hop got nothing and the caller 503: {answer.splitlines()[:1]}, {len(rogue_hop.requests)} requests there")
    # The silent connection is closed once its handshake has waited 10 s.
    silent.settimeout(max(1.0, 13.0 - (time.monotonic() - opened)))
    try:
        closed = silent.recv(1) == b""
    except socket.timeout:
        closed = False
    except OSError:
        closed = True
    waited = time.monotonic() - opened
    c.that(closed and 10.0 <= waited <= 13.0, f"a connection that never finished its handshake was closed after {waited:.1f} s (10 s)")
    metrics = edge_metrics(mport)
    c.that(metrics.get("edge_tls_handshake_failures_total") == 3,
           f"three handshakes failed (no certificate, rogue, never finished): {metrics.get('edge_tls_handshake_failures_total')}")
    hop.close()
    rogue_hop.close()
    run.stop(edge2)
    return c


def overload_loop_over_tls(run: Run) -> Checks:
    c = Checks("overload_loop_over_tls: a SIPp UAS answering oc=50;oc-algo=\"loss\" reached over TLS")
    certs = Certs(run)
    proxy = {}

    def start(uas_port: int) -> int:
        hop_port = free_udp_port(tcp=True)
        stunnel(run, "hop-tls", hop_port, uas_port, client=False, cert=certs.hop)
        policy = run.path("pass.xml")
        policy.write_text(document(0, "full", ""))
        edge, _, tls_port = tls_edge(run, certs, "edge", free_udp_port(), hop_port, "--policy", policy, "--tls-next-hop-name", "hop.test",
                                     "--overload-control")
        proxy["edge"] = edge
        front = free_udp_port(tcp=True)
        stunnel(run, "uac-tls", front, tls_port, client=True, ca=certs.ca.cert, check_host="edge.test")
        return front

    out = loss_feedback_through(run, c, start, transport="t1")
    edge = proxy["edge"]
    st = stats_now(edge)
    c.that(st.get("edge_oc_shed_total", -1) == out["shed"], f"the edge shed {st.get('edge_oc_shed_total', -1):.0f} INVITEs and the UAC got {out['shed']} 503s")
    c.that(st.get("edge_oc_tls_next_hop_updates_total", 0) >= 100 and st.get("edge_oc_next_hop_updates_total", -1) == 0,
           f"the feedback went to --tls-next-hop's state ({st.get('edge_oc_tls_next_hop_updates_total', 0):.0f} updates), "
           f"not --next-hop's ({st.get('edge_oc_next_hop_updates_total', -1):.0f})")
    c.that(st.get("edge_oc_bad_feedback_total", -1) == 0, "no feedback refused")
    return c


def reconnecting_clients(run: Run) -> Checks:
    c = Checks("reconnecting_clients: a resumed session, and a request sent with the handshake's last flight")
    certs = Certs(run)
    edge, hop, _, tls_port = hop_edge(run, certs)
    ctx = client_context(certs.ca.cert, certs.client)
    first = ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port), timeout=5), server_hostname="edge.test")
    first.sendall(options(10))
    c.that(read_message(first).startswith("SIP/2.0 200"), "the first connection is served")
    session = first.session  # TLS 1.3 sends its ticket after the handshake: there by now
    first.close()
    try:
        again = ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port), timeout=5), server_hostname="edge.test", session=session)
        again.sendall(options(11))
        answer = read_message(again)
        reused = again.session_reused
        again.close()
    except (ssl.SSLError, OSError) as err:
        answer, reused = f"refused: {err}", False
    c.that(answer.startswith("SIP/2.0 200") and reused, f"a client resuming its session is served ({answer.splitlines()[:1]}, resumed {reused})")
    # The client's Finished and its first request in one write (ssl's memory BIOs build both).
    raw = socket.create_connection(("127.0.0.1", tls_port), timeout=5)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="edge.test")
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            if outgoing.pending:
                raw.sendall(outgoing.read())
            incoming.write(raw.recv(65536))
    obj.write(options(12))
    raw.sendall(outgoing.read())  # Finished and the OPTIONS together
    raw.settimeout(3)
    got = b""
    try:
        while True:
            data = raw.recv(65536)
            if not data:
                break
            incoming.write(data)
            try:
                got += obj.read(65536)
            except ssl.SSLWantReadError:
                continue
            if b"\r\n\r\n" in got:
                break
    except socket.timeout:
        pass
    raw.close()
    c.that(got.startswith(b"SIP/2.0 200"), f"a request sent with the last handshake flight is answered within 3 s ({got[:20]!r})")
    hop.close()
    run.stop(edge)
    return c


def forged_responses(run: Run) -> Checks:
    c = Checks("forged_responses: responses injected into a TLS caller's connection, forged feedback, sips: without TLS")
    certs = Certs(run)
    edge, hop, port, tls_port = hop_edge(run, certs, "--overload-control", "--metrics", f"127.0.0.1:{(mport := free_udp_port(tcp=True))}")
    caller = tls_connect(tls_port, certs.ca.cert, certs.client)
    caller.sendall(options(20))
    c.that(read_message(caller).startswith("SIP/2.0 200"), "the TLS caller is served")
    request = hop.requests[-1]
    vias = [ln for ln in request.split("\r\n") if ln.startswith("Via: ")]
    c.that(len(vias) == 2 and ";lc-conn=" in vias[0], f"the next hop saw the edge's Via with lc-conn: {vias[:1]}")
    keep = [ln for ln in request.split("\r\n")[1:] if ln.split(":")[0] in ("From", "To", "Call-ID", "CSeq")]
    forged = ("SIP/2.0 200 OK\r\n" + "\r\n".join(vias + keep) + "\r\nX-Forged: yes\r\nContent-Length: 0\r\n\r\n").encode()
    plain = socket.create_connection(("127.0.0.1", port), timeout=5)
    plain.sendall(forged)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.sendto(forged, ("127.0.0.1", port))
    caller.settimeout(1.0)
    try:
        leaked = caller.recv(65536)
    except socket.timeout:
        leaked = b""
    c.that(leaked == b"", f"neither the TCP nor the UDP forgery reached the TLS caller ({leaked[:40]!r})")
    # Feedback in a response that does not come from the next hop (another UDP port).
    feedback = (f"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bK-lcdead.beef;oc=100;oc-algo=\"loss\";"
                f"oc-validity=60000;oc-seq=5\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKx\r\nFrom: <sip:a@example.com>;tag=1\r\n"
                f"To: <sip:b@example.com>;tag=2\r\nCall-ID: forged\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n").encode()
    udp.sendto(feedback, ("127.0.0.1", port))
    time.sleep(0.3)
    m = edge_metrics(mport)
    c.that(m.get("edge_responses_refused_total") == 2, f"the two forgeries are counted ({m.get('edge_responses_refused_total')})")
    c.that(m.get("edge_oc_next_hop_updates_total") == 0 and m.get("edge_oc_next_hop_active") == 0,
           f"oc=100 from another port than the next hop's is not applied ({m.get('edge_oc_next_hop_updates_total')} updates)")
    # RFC 3261 §16.6 step 7: a sips: Request-URI goes on over TLS only.
    sips = options(21).replace(b"OPTIONS sip:", b"OPTIONS sips:")
    udp.settimeout(2)
    udp.sendto(sips.replace(b"SIP/2.0/TLS 127.0.0.1:5999", f"SIP/2.0/UDP 127.0.0.1:{udp.getsockname()[1]}".encode()), ("127.0.0.1", port))
    try:
        answer = udp.recv(65536).decode(errors="replace")
    except socket.timeout:
        answer = ""
    c.that(answer.startswith("SIP/2.0 416"), f"a sips: Request-URI over UDP is answered 416: {answer.splitlines()[:1]}")
    before = len(hop.requests)
    caller.settimeout(5)
    caller.sendall(sips)
    answer = read_message(caller)
    c.that(answer.startswith("SIP/2.0 200") and len(hop.requests) == before + 1,
           f"over TLS it is forwarded over TLS: {answer.splitlines()[:1]}")
    caller.close()
    plain.close()
    hop.close()
    return c


def certificate_reload(run: Run) -> Checks:
    c = Checks("certificate_reload: SIGHUP reads the certificate files again")
    certs = Certs(run)
    renewed = certs.ca.issue("edge-renewed.test", dns=["edge.test"], ips=["127.0.0.1"])
    cert, key = run.path("live", "edge.pem"), run.path("live", "edge.key")
    shutil.copy(certs.edge.cert, cert)
    shutil.copy(certs.edge.key, key)
    edge, hop, _, tls_port = hop_edge(run, certs, "--tls-cert", cert, "--tls-key", key)

    def presented() -> str:
        conn = tls_connect(tls_port, certs.ca.cert)
        subject = dict(x[0] for x in conn.getpeercert()["subject"])
        conn.close()
        return subject.get("commonName", "")

    c.that(presented() == "edge.test", "the edge presents edge.test")
    shutil.copy(renewed.cert, cert)
    shutil.copy(renewed.key, key)
    edge.send_signal(signal.SIGHUP)
    c.that(wait_until(lambda: "tls: certificates, key and CA certificates read again" in edge.stderr_path.read_text(errors="replace"), 5),
           "SIGHUP read the files again (logged)")
    c.that(presented() == "edge-renewed.test", "a new connection gets the renewed certificate")
    key.write_text("not a key\n")
    edge.send_signal(signal.SIGHUP)
    c.that(wait_until(lambda: "the certificates in use stay" in edge.stderr_path.read_text(errors="replace"), 5),
           "a key file that cannot be used is reported")
    c.that(presented() == "edge-renewed.test", "and the certificate in use stays")
    hop.close()
    return c


def tls_command_line(run: Run) -> Checks:
    c = Checks("tls_command_line: refused TLS command lines")
    certs = Certs(run)
    policy = policy_file(run, 5)
    base = ["--listen", f"127.0.0.1:{free_udp_port(tcp=True)}", "--next-hop", f"127.0.0.1:{free_udp_port()}", "--policy", str(policy)]
    listen = ["--tls-listen", f"127.0.0.1:{free_udp_port(tcp=True)}"]
    hop = ["--tls-next-hop", f"127.0.0.1:{free_udp_port(tcp=True)}"]
    cert = ["--tls-cert", str(certs.edge.cert), "--tls-key", str(certs.edge.key)]
    ca = ["--tls-ca", str(certs.ca.cert)]
    for label, args, code_wanted, needle in [
        ("--tls-listen without a certificate", listen + hop + ca, 2, "--tls-cert"),
        ("--tls-listen without --tls-next-hop", listen + cert + ca, 2, "--tls-next-hop"),
        ("--tls-next-hop without --tls-ca (never unverified)", listen + hop + cert, 2, "--tls-ca"),
        ("--tls-cert without --tls-key", listen + hop + ca + cert[:2], 2, "--tls-key"),
        ("--tls-require-client-cert without --tls-listen", ["--tls-require-client-cert"], 2, "--tls-listen"),
        ("a sips: notifier without --tls-ca", ["--subscribe", "sips:sbc@notifier.test"], 2, "--tls-ca"),
        ("--notifier-name with a sip: notifier", ["--subscribe", "sip:sbc@127.0.0.1:5999", "--notifier-name", "x.test"], 2, "--notifier-name"),
        ("a key that is not the certificate's", listen + hop + ca + ["--tls-cert", str(certs.edge.cert), "--tls-key", str(certs.hop.key)], 1,
         str(certs.hop.key)),
        ("a certificate file that is missing", listen + hop + ca + ["--tls-cert", str(run.dir / "none.pem"), "--tls-key", str(certs.edge.key)], 1,
         "none.pem"),
    ]:
        p = subprocess.run([str(EDGE), *base, *args], capture_output=True, text=True, timeout=10)
        c.that(p.returncode == code_wanted and needle in p.stderr, f"{label}: exit {p.returncode}, {p.stderr.strip()[-160:]!r}")
    return c

def abandoned_handshakes(run: Run) -> Checks:
    c = Checks("abandoned_handshakes: 30 connections from one address that never handshake, then a client from another")
    certs = Certs(run)

    def flood_then_client(*args) -> tuple:
        """(whether the client from 127.0.0.1 was served, the edge's counters) after 127.0.0.2
        opened 30 connections to the TLS port and sent nothing (each would hold its place 10 s)."""
        edge, hop, _, tls_port = hop_edge(run, certs, "--max-connections", "10", *args)
        flood = [socket.create_connection(("127.0.0.1", tls_port), timeout=5, source_address=("127.0.0.2", 0)) for _ in range(30)]
        # Every flood connection accepted or refused before the client comes: the edge has
        # counted all 30 (the client's place must not depend on winning a race).
        wait_until(lambda: sum(edge_stats(edge).get(k, 0) for k in ("edge_tcp_accepted_total", "edge_tcp_refused_total",
                                                                      "edge_tcp_source_refused_total")) >= 30, 5.0)
        try:
            conn = tls_connect(tls_port, certs.ca.cert)
            conn.sendall(options(40))
            answer = read_message(conn)
            conn.close()
        except (ssl.SSLError, OSError):
            answer = ""
        stats = edge_stats(edge)
        for s in flood:
            s.close()
        hop.close()
        run.stop(edge)
        return answer.startswith("SIP/2.0 200"), stats

    # Without a limit per source the flood takes every place of --max-connections for the 10 s
    # a handshake may take: the attack this option is for.
    ok, stats = flood_then_client()
    c.that(not ok and stats.get("edge_tcp_accepted_total") == 10 and stats.get("edge_tcp_refused_total") == 21,
           f"--max-connections 10 alone: the client {'served' if ok else 'refused'} (refused expected); accepted "
           f"{stats.get('edge_tcp_accepted_total')}, refused {stats.get('edge_tcp_refused_total')} (10 and 21 expected)")
    ok, stats = flood_then_client("--max-connections-per-source", "4")
    c.that(ok, "--max-connections-per-source 4: the client from another address is served (200)")
    c.that(stats.get("edge_tcp_source_refused_total") == 26 and stats.get("edge_tcp_refused_total") == 0
           and stats.get("edge_tcp_accepted_total") == 5,
           f"127.0.0.2 held 4 places: accepted {stats.get('edge_tcp_accepted_total')} (4 and the client's), refused per source "
           f"{stats.get('edge_tcp_source_refused_total')} (26), by --max-connections {stats.get('edge_tcp_refused_total')} (0)")
    return c



TESTS = {
    "calls_over_tls": calls_over_tls,
    "subscription_over_tls": subscription_over_tls,
    "notifier_connection_lost": notifier_connection_lost,
    "untrusted_notifier": untrusted_notifier,
    "client_certificates": client_certificates,
    "reconnecting_clients": reconnecting_clients,
    "forged_responses": forged_responses,
    "certificate_reload": certificate_reload,
    "tls_command_line": tls_command_line,
    "overload_loop_over_tls": overload_loop_over_tls,
    "abandoned_handshakes": abandoned_handshakes,
}


def main() -> int:
    return suite_main(__doc__, TESTS, "e2e edge over TLS", prefix="tls-", needs=(EDGE,))


if __name__ == "__main__":
    sys.exit(main())
