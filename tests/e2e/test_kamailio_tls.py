#!/usr/bin/env python3
"""End-to-end tests of the loadctl Kamailio module (kamailio/loadctl/) over Kamailio's tls
module: the RFC 7200 subscriber hearing its notifier only from a verified TLS peer that the
notifier's certificate names (RFC 7200 §7: "if the notifiers can be spoofed, attackers can send
fake notifications asking subscribers to throttle all traffic"), and the RFC 7339 loop over TLS
(§11: "Attacks that indicate false overload control are best mitigated by using TLS").
Certificates are made by the test (tls_peers.Pki: a CA, and a rogue CA issuing look-alikes);
SIPp speaks TLS through stunnel (Debian's SIPp has no TLS); the peers the tests write themselves
are Python TLS sockets.

    python3 tests/e2e/test_kamailio_tls.py [--keep] [NAME ...]
    (kamailio/build.sh builds the module; LOADCTL_KAMAILIO_BUILD=DIR picks a release build,
    which must include the tls module)

Kamailio runs tests/e2e/kamailio/loadctl.cfg with TLS_CFG: the tls module loaded first, a
TLS listener beside the UDP one, tests/e2e/kamailio/tls.cfg filled in with the run's
certificates (Kamailio presents kamailio.test / 127.0.0.1; verifies every server it connects to
and every client certificate presented against the CA).

- subscription_over_tls: the module subscribes to sips:sbc@127.0.0.1:PORT, a SIPp notifier
  (scenarios/notifier_held.xml, -t t1) behind a server-mode stunnel presenting the CA's
  certificate for notifier.test (subscribe_tls_name); the SUBSCRIBE leaves over TLS with a
  sips: Contact, the notifier's rate R applies and is enforced on calls that come over TLS too
  (SIPp UAC → stunnel → Kamailio's TLS listener, 4R calls/s: R of the matching ones admitted,
  the rest 503). The same dialog's NOTIFY, forged with a rate of 0,
  over UDP, over TCP, over TLS with the CA's certificate for client.test and over TLS without
  a certificate is answered 403, counted (loadctl.subscriptions, the sub_unauthenticated
  statistic), logged once, and changes nothing; a client with a rogue CA's certificate does
  not get through the handshake. On SIGTERM the unsubscribe reaches the notifier over TLS.
- notifier_names: Python TLS notifiers the module subscribes to, one Kamailio for those whose
  documents must apply and one for those that must be refused (RFC 5922 §7, RFC 6125 §6.4):
  applied — an IP-address URI and an IP subjectAltName, a CN naming the notifier in a
  certificate without subjectAltName, (Kamailio 5.8 and later) the name in the second DNS
  subjectAltName; refused — a rogue CA's notifier.test (the tls module refuses the handshake:
  no SUBSCRIBE arrives), the CA's other.test (the SUBSCRIBE goes out, its 200 is dropped and
  the NOTIFY answered 403), a CN naming the notifier beside a subjectAltName that does not, a
  DNS name where the URI is an IP address, and (Kamailio 5.6, which shows only the first) the
  name in the second DNS subjectAltName.
- overload_loop_over_tls: overload_setups.loss_feedback_through with TLS on both sides of
  Kamailio (SIPp UAC over TCP → client-mode stunnel verifying kamailio.test → Kamailio's TLS
  listener; Kamailio, children=2, an RFC 7339 client, → a TLS next hop: stunnel presenting
  hop.test → SIPp UAS answering oc=50;oc-algo="loss"): nothing shed before the feedback, an
  overall reduction of 50 % ± 3 points while it is valid (RFC 7339 §7.2), nothing after.
- oc_server_over_tls: Kamailio (children=2, tm) as an RFC 7339 server on the occupancy of a
  server of 60 calls/s (the UAS's arrivals), its client the C edge over TLS (SIPp UAC → stunnel
  → the edge's TLS listener → `--tls-next-hop` Kamailio, verified as kamailio.test) offering
  120 calls/s: 60/s ± 15 % at the UAS after 4 s, the edge sheds half ± 20 % on the loss values
  Kamailio writes into the replies it relays over the edge's connection (read by another process
  than the one that read the request: the values go with the transaction).
"""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from checks import Checks, suite_main  # noqa: E402
from edge_proc import start_edge  # noqa: E402
from kamailio_proc import Kamailio, build, feed_occupancy, held_notifier_end, start_held_notifier, start_uas, suite_label  # noqa: E402
from overload_setups import loss_feedback_through, stats_now  # noqa: E402
from policy_docs import MATCH, OTHER, document, rate_rule  # noqa: E402
from ports import free_udp_port, wait_tcp_port, wait_udp_port  # noqa: E402
from processes import HarnessError, Run, wait_until  # noqa: E402
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection  # noqa: E402
from sip_sockets import header  # noqa: E402
from tls_peers import Issued, Pki, TlsServer, client_context, read_message, read_messages, stunnel  # noqa: E402

SUB_EVENT = re.compile(r"subscription to (\S+) at (\d+\.\d+): (.*?) (\d+) ?(.*)$")


class Certs:
    """The run's trust root and certificates, and a rogue root's look-alikes."""

    def __init__(self, run: Run):
        self.ca = Pki(run.dir / "pki", "ca")
        self.rogue = Pki(run.dir / "pki", "rogue")
        self.kamailio = self.ca.issue("kamailio.test", dns=["kamailio.test"], ips=["127.0.0.1"])
        self.notifier = self.ca.issue("notifier", dns=["notifier.test"])
        self.notifier_ip = self.ca.issue("notifier-ip", ips=["127.0.0.1"])
        self.second_san = self.ca.issue("notifier-2", dns=["sbc.test", "notifier.test"])
        self.other = self.ca.issue("other.test", dns=["other.test"])
        self.client = self.ca.issue("client.test", dns=["client.test"])
        self.hop = self.ca.issue("hop.test", dns=["hop.test"])
        # two certificates with the CN notifier.test: kept under names of their own (the CA's
        # files are named by the CN)
        self.cn_only = self._keep(self.ca.issue("notifier.test"), "cn-only")
        self.cn_other = self._keep(self.ca.issue("notifier.test", dns=["other.test"]), "cn-other")
        self.rogue_notifier = self.rogue.issue("notifier", dns=["notifier.test"])
        self.rogue_client = self.rogue.issue("client.test", dns=["client.test"])

    @staticmethod
    def _keep(issued: Issued, stem: str) -> Issued:
        cert, key = issued.cert.with_name(f"{stem}.pem"), issued.key.with_name(f"{stem}.key")
        shutil.copyfile(issued.cert, cert)
        shutil.copyfile(issued.key, key)
        return Issued(cert, key)

    def tls_cfg(self, run: Run, client_domains: str = "") -> Path:
        """tests/e2e/kamailio/tls.cfg with the run's files (and extra [client:…] domains)."""
        text = (HERE / "kamailio" / "tls.cfg").read_text()
        text = (text.replace("@CERT@", str(self.kamailio.cert)).replace("@KEY@", str(self.kamailio.key))
                .replace("@CA@", str(self.ca.cert)).replace("@CLIENT_DOMAINS@", client_domains))
        path = run.path("tls.cfg")
        path.write_text(text)
        return path

    def client_domain(self, port: int, server_name: str) -> str:
        """A [client:127.0.0.1:PORT] domain: the default's settings and SNI `server_name`."""
        return (f"\n[client:127.0.0.1:{port}]\nmethod = TLSv1.2+\nverify_certificate = yes\nrequire_certificate = yes\n"
                f"certificate = {self.kamailio.cert}\nprivate_key = {self.kamailio.key}\nca_list = {self.ca.cert}\n"
                f"server_name = {server_name}\n")


def tls_kamailio(run: Run, certs: Certs, name: str, next_hop, cfg: Path = None, **kw) -> Kamailio:
    tls_port = free_udp_port(tcp=True)
    return Kamailio(run, name, kw.pop("policy", None), kw.pop("children", 2), next_hop,
                    tls=(tls_port, cfg or certs.tls_cfg(run)), **kw)


def sub_events(kam: Kamailio) -> list:
    out = []
    for line in kam.log().splitlines():
        m = SUB_EVENT.search(line)
        if m:
            out.append((m.group(1), m.group(3), int(m.group(4))))
    return out


def applied(kam: Kamailio, notifier: str) -> list:
    """The versions the module logged as applied from `notifier`."""
    return [n for who, what, n in sub_events(kam) if who == notifier and what == "policy applied (version)"]


def subscriptions(kam: Kamailio) -> dict:
    """loadctl.subscriptions, by notifier URI."""
    return {s["notifier"]: s for s in kam.rpc("loadctl.subscriptions")["result"]["subscriptions"]}


def statistic(kam: Kamailio, name: str):
    """One of the module's Kamailio statistics (kex's stats.get_statistics)."""
    for line in kam.rpc("stats.get_statistics", "loadctl:").get("result", []):
        key, _, value = line.partition(" = ")
        if key.strip() == f"loadctl:{name}":
            return int(value)
    return None




# ---------------------------------------------------------------------------------------------
# a notifier over TLS written in Python


class TlsNotifier(TlsServer):
    """A TLS server presenting `cert` that answers every SUBSCRIBE 200 and sends one NOTIFY with
    `body` on the same connection, as an RFC 7200 notifier reached at sips:sbc@127.0.0.1:PORT
    does; it records the SUBSCRIBEs, the answers to its NOTIFYs and the handshakes that failed."""

    def __init__(self, cert: Issued, body: str):
        self.body = body
        self.subscribes, self.answers = [], []
        self.closed = 0  # connections the subscriber closed
        super().__init__(cert)
        self.uri = f"sips:sbc@127.0.0.1:{self.port}"

    def serve(self, conn):
        conn.settimeout(60)
        n = 0
        try:
            for msg in read_messages(conn):
                if msg.startswith("SIP/2.0 "):
                    self.answers.append(msg.split("\r\n", 1)[0])
                    continue
                if not msg.startswith("SUBSCRIBE "):
                    continue
                self.subscribes.append(msg)
                n += 1
                conn.sendall(self._ok(msg, n))
                if header(msg, "Expires") != "0":
                    conn.sendall(self._notify(msg, n))
            self.closed += 1
        except socket.timeout:
            return

    def _ok(self, sub: str, n: int) -> bytes:
        vias = "".join(f"Via: {v}\r\n" for v in re.findall(r"^Via:\s*(.*?)\r?$", sub, re.M | re.I))
        to = header(sub, "To")
        return (f"SIP/2.0 200 OK\r\n{vias}From: {header(sub, 'From')}\r\nTo: {to}{'' if ';tag=' in to else f';tag=n{n}'}\r\n"
                f"Call-ID: {header(sub, 'Call-ID')}\r\nCSeq: {header(sub, 'CSeq')}\r\nContact: <{self.uri}>\r\n"
                f"Expires: 600\r\nContent-Length: 0\r\n\r\n").encode()

    def _notify(self, sub: str, n: int) -> bytes:
        target = re.search(r"<([^>]+)>", header(sub, "Contact")).group(1)
        body = self.body.encode()
        return (f"NOTIFY {target} SIP/2.0\r\nVia: SIP/2.0/TLS 127.0.0.1:{self.port};branch=z9hG4bK-tn-{n}-{time.monotonic_ns()}\r\n"
                f"Max-Forwards: 70\r\nFrom: <sip:sbc@127.0.0.1>;tag=n{n}\r\nTo: {header(sub, 'From')}\r\n"
                f"Call-ID: {header(sub, 'Call-ID')}\r\nCSeq: 1 NOTIFY\r\nContact: <{self.uri}>\r\nEvent: load-control\r\n"
                f"Subscription-State: active;expires=600\r\nContent-Type: application/load-control+xml\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body

# ---------------------------------------------------------------------------------------------


def subscription_over_tls(run: Run) -> Checks:
    c = Checks("subscription_over_tls: a sips: SIPp notifier behind stunnel; its rate enforced; forged NOTIFYs over UDP, "
               "TCP and TLS refused")
    certs = Certs(run)
    r, seconds = 30.0, 6.0
    notifier_ports = SippPorts.pick(tcp=True)
    front = free_udp_port(tcp=True)
    notifier_uri = f"sips:sbc@127.0.0.1:{front}"
    notifier, logs = start_held_notifier(run, notifier_ports, r, notifier_uri)
    stunnel(run, "notifier-tls", front, notifier_ports.sip, client=False, cert=certs.notifier)
    uas, uas_ports = start_uas(run, seconds + 30)
    tcp_port = free_udp_port(tcp=True)
    kam = tls_kamailio(run, certs, "kamailio", uas_ports.sip, cfg=certs.tls_cfg(run, certs.client_domain(front, "notifier.test")),
                       subscribe=[notifier_uri], tcp_port=tcp_port, stateful=True,
                       defines=(f'SUB_TLS_NAME="{notifier_uri} notifier.test"',))
    if not wait_until(lambda: applied(kam, notifier_uri), 10):
        raise HarnessError(f"the notifier's document was not applied within 10 s:\n{kam.proc.tail(30)}")
    dialog = next((ln for ln in logs.read_text(errors="replace").splitlines() if ln.startswith("dialog|")), "")
    _, call_id, peer, tag, target, via = (x.strip() for x in (dialog.split("|") + [""] * 6)[:6])
    c.that(via.startswith("SIP/2.0/TLS 127.0.0.1:") and target == f"sips:loadctl@127.0.0.1:{kam.tls_port}",
           f"the SUBSCRIBE left from Kamailio's TLS socket with a sips: Contact (RFC 3261 §8.1.1.8): Via {via!r}, Contact {target!r}")
    sub = subscriptions(kam)[notifier_uri]
    c.that(sub["state"] == "active" and sub["version"] == 0 and sub["tls_name"] == "notifier.test" and sub["unauthenticated"] == 0,
           f"loadctl.subscriptions: {sub['state']}, version {sub['version']}, tls_name {sub['tls_name']!r}, "
           f"{sub['unauthenticated']} refused")

    def forged(via: str, cseq: int) -> bytes:
        # The dialog as the notifier set it up, and a document that would admit nothing.
        body = document(9, "full", rate_rule(0)).encode()
        return (f"NOTIFY {target} SIP/2.0\r\nVia: {via};branch=z9hG4bK-forged{cseq}\r\n"
                f"Max-Forwards: 70\r\nFrom: <sip:sbc@127.0.0.1>;tag={tag}\r\nTo: {peer}\r\nCall-ID: {call_id}\r\n"
                f"CSeq: {cseq} NOTIFY\r\nContact: <{notifier_uri}>\r\nEvent: load-control\r\n"
                f"Subscription-State: active;expires=3000\r\nContent-Type: application/load-control+xml\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    answers = {}
    forging = time.monotonic()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(3)
    udp.sendto(forged(f"SIP/2.0/UDP 127.0.0.1:{udp.getsockname()[1]}", 50), ("127.0.0.1", kam.port))
    try:
        answers["UDP"] = udp.recv(65536).decode(errors="replace")
    except socket.timeout:
        answers["UDP"] = ""
    udp.close()
    with socket.create_connection(("127.0.0.1", tcp_port), timeout=3) as tcp:
        tcp.sendall(forged("SIP/2.0/TCP 127.0.0.1:5999", 51))
        answers["TCP"] = read_message(tcp)

    def over_tls(cert, cseq):
        raw = socket.create_connection(("127.0.0.1", kam.tls_port), timeout=3)
        with client_context(certs.ca.cert, cert).wrap_socket(raw, server_hostname="kamailio.test") as conn:
            conn.sendall(forged("SIP/2.0/TLS 127.0.0.1:5999", cseq))
            return read_message(conn)

    answers["TLS, the CA's client.test"] = over_tls(certs.client, 52)
    answers["TLS, no certificate"] = over_tls(None, 53)
    for how, answer in answers.items():
        c.that(answer.startswith("SIP/2.0 403"), f"the forged NOTIFY over {how} was answered 403: {answer.splitlines()[:1]}")
    try:
        rogue = over_tls(certs.rogue_client, 54)
        refused = not rogue
    except (ssl.SSLError, OSError) as e:
        rogue, refused = repr(e), True
    c.that(refused, f"a client with a rogue CA's certificate did not get through the handshake ({rogue[:80]!r})")
    forged_for = time.monotonic() - forging
    time.sleep(0.3)
    sub = subscriptions(kam)[notifier_uri]
    c.that(sub["unauthenticated"] == 4 and statistic(kam, "sub_unauthenticated") == 4,
           f"the four refusals counted: loadctl.subscriptions unauthenticated {sub['unauthenticated']}, "
           f"statistic loadctl:sub_unauthenticated {statistic(kam, 'sub_unauthenticated')}; last: {sub['last_unauthenticated']!r}")
    c.that(sub["version"] == 0 and sub["applied"] == 1 and applied(kam, notifier_uri) == [0],
           f"only the notifier's document applied: version {sub['version']}, {sub['applied']} applied, logged {applied(kam, notifier_uri)}")
    lines = [ln for ln in kam.log().splitlines() if "refused: " in ln and "is heard only over TLS" in ln]
    most = int(forged_for) + 1
    c.that(1 <= len(lines) <= most and "NOTIFY from 127.0.0.1:" in lines[0] and "over UDP" in lines[0],
           f"logged at most once a second: {len(lines)} line(s) for the 4 refusals of {forged_for:.2f} s (at most {most}); "
           f"first: {lines[:1]}")
    # The notifier's rate R is what is enforced (the forged rate 0 would admit nothing), on
    # calls that come over TLS too: SIPp over TCP → stunnel verifying kamailio.test.
    uac_front = free_udp_port(tcp=True)
    stunnel(run, "uac-tls", uac_front, kam.tls_port, client=True, ca=certs.ca.cert, check_host="kamailio.test")
    inf = write_injection(run.path("callees.csv"), [MATCH, MATCH, MATCH, OTHER])
    uac = run.start("uac", sipp_command("uac_invite.xml", SippPorts.pick(tcp=True), remote=f"127.0.0.1:{uac_front}", inf=inf,
                                        rate=4 * r, calls=int(4 * r * seconds), timeout_s=seconds + 40, transport="t1"))
    uac.wait(timeout=seconds + 50)
    held_notifier_end(c, run, kam, uac, uas, logs, notifier_uri, r, "TLS")
    return c


def notifier_names(run: Run) -> Checks:
    c = Checks("notifier_names: which notifier certificates name the notifier (RFC 5922 §7, RFC 6125 §6.4)")
    certs = Certs(run)
    indexed = build().major_minor >= (5, 8)
    # (label, certificate, the name given by subscribe_tls_name (None: the URI's host), outcome:
    # "applied", "refused" by the module, or the handshake refused by the tls module)
    cases = [
        ("an IP subjectAltName for an IP-address URI", certs.notifier_ip, None, "applied"),
        ("a CN naming it, no subjectAltName", certs.cn_only, "notifier.test", "applied"),
        ("its name in the second DNS subjectAltName (Kamailio 5.6 shows only the first)", certs.second_san, "notifier.test",
         "applied" if indexed else "refused"),
        ("the CA's other.test", certs.other, "notifier.test", "refused"),
        ("a CN naming it beside a subjectAltName that does not", certs.cn_other, "notifier.test", "refused"),
        ("a DNS name where the URI is an IP address", certs.notifier, None, "refused"),
        ("a rogue CA's notifier.test", certs.rogue_notifier, "notifier.test", "handshake"),
    ]
    for first in range(0, len(cases), 4):  # loadctl.cfg takes four subscribe parameters
        chunk = cases[first:first + 4]
        notifiers = [TlsNotifier(cert, document(0, "full", rate_rule(10 + first + k, f"rule-{first + k}", f"+1{first + k}")))
                     for k, (_, cert, _, _) in enumerate(chunk)]
        names = [f'SUB_TLS_NAME{k + 1 if k else ""}="{n.uri} {name}"'
                 for k, (n, (_, _, name, _)) in enumerate(zip(notifiers, chunk)) if name]
        kam = tls_kamailio(run, certs, f"kamailio-{first // 4}", free_udp_port(), subscribe=[n.uri for n in notifiers],
                           defines=tuple(names))
        want = sorted(f"rule-{first + k}" for k, case in enumerate(chunk) if case[3] == "applied")

        def settled() -> bool:
            heard = [bool(applied(kam, n.uri)) if case[3] == "applied" else bool(n.answers or n.handshake_failures or n.closed)
                     for case, n in zip(chunk, notifiers)]
            return all(heard) and sorted(x["rule"] for x in kam.rpc("loadctl.rules")["result"]["rules"]) == want

        try:
            wait_until(settled, 10, interval=0.2)
            time.sleep(0.3)  # anything more that would come (a second NOTIFY, a late refusal)
            subs = subscriptions(kam)
            for (label, _, _, outcome), n in zip(chunk, notifiers):
                s = subs[n.uri]
                if outcome == "applied":
                    c.that(applied(kam, n.uri) == [0] and n.answers[:1] == ["SIP/2.0 200 OK"] and s["unauthenticated"] == 0,
                           f"{label}: applied (answers {n.answers}, {s['state']}, version {s['version']})")
                elif outcome == "handshake":
                    c.that(n.handshake_failures >= 1 and not n.subscribes and not applied(kam, n.uri),
                           f"{label}: Kamailio refused the handshake ({n.handshake_failures} failed), no SUBSCRIBE, "
                           f"nothing applied ({s['state']})")
                else:
                    # The module refuses the 200 and answers the NOTIFY 403; or (seen once with
                    # 5.6.3 under load: its tls module logged "certificate verify failed" for a
                    # DNS-only certificate reached by IP) Kamailio's tls layer drops the
                    # connection after the SUBSCRIBE went out. Either way nothing applies.
                    by_module = n.answers[:1] == ["SIP/2.0 403 Forbidden"] and s["unauthenticated"] >= 2
                    by_tls = n.closed >= 1 and not n.answers
                    c.that(len(n.subscribes) >= 1 and (by_module or by_tls) and not applied(kam, n.uri) and s["state"] != "active",
                           f"{label}: refused ({'the 200 dropped and the NOTIFY answered 403' if by_module else 'the connection dropped by the tls module' if by_tls else 'neither'}), "
                           f"nothing applied ({len(n.subscribes)} SUBSCRIBEs, answers {n.answers}, {s['unauthenticated']} refused, {s['state']}): "
                           f"{s['last_unauthenticated']!r}")
            rules = sorted(x["rule"] for x in kam.rpc("loadctl.rules")["result"]["rules"])
            c.that(rules == want, f"the rules in force are those of the notifiers named: {rules} (expected {want})")
        finally:
            run.stop(kam.proc)
            for n in notifiers:
                n.close()
    return c


def overload_loop_over_tls(run: Run) -> Checks:
    c = Checks("overload_loop_over_tls: Kamailio children=2 between TLS legs, RFC 7339 client of a SIPp UAS answering "
               "oc=50;oc-algo=\"loss\" behind stunnel")
    certs = Certs(run)
    holder = {}

    def start(uas_port: int) -> int:
        hop = free_udp_port(tcp=True)
        stunnel(run, "hop-tls", hop, uas_port, client=False, cert=certs.hop)
        kam = tls_kamailio(run, certs, "kamailio", f"sip:127.0.0.1:{hop};transport=tls", policy=document(0, "full", ""),
                           stateful=True, defines=(f'OC_CLIENT="127.0.0.1:{hop}"',))
        holder["kam"] = kam
        front = free_udp_port(tcp=True)
        stunnel(run, "uac-tls", front, kam.tls_port, client=True, ca=certs.ca.cert, check_host="kamailio.test")
        return front

    loss_feedback_through(run, c, start, transport="t1")
    log = holder["kam"].log()
    c.that("feedback from" not in log, "Kamailio refused no feedback")
    hop_log = run.path("hop-tls", "stunnel.log").read_text(errors="replace")
    c.that(hop_log.count("connection from 127.0.0.1") == 1 or hop_log.count("accepted connection from") == 1,
           "one TLS connection from Kamailio carried every request to the next hop")
    return c


def oc_server_over_tls(run: Run) -> Checks:
    """Kamailio (children=2, tm) as an RFC 7339 server on the occupancy of a server of CAPACITY
    calls/s (the UAS's arrivals, as in test_kamailio_oc.py's oc_server_occupancy), its client
    the C edge over TLS (`--overload-control --oc-algorithms loss`, `--tls-next-hop` to
    Kamailio's TLS listener verified as kamailio.test), fed by a SIPp UAC over TLS at twice the
    capacity."""
    capacity, offered, seconds = 60.0, 120.0, 16.0
    c = Checks(f"oc_server_over_tls: Kamailio children=2 as RFC 7339 server, occupancy = arrivals / {capacity:.0f}/s, "
               f"the edge its client over TLS offering {offered:.0f} calls/s")
    certs = Certs(run)
    edge_cert = certs.ca.issue("edge.test", dns=["edge.test"], ips=["127.0.0.1"])
    uas_ports = SippPorts.pick()
    uas = run.start("uas", sipp_command("uas_invite_only.xml", uas_ports, timeout_s=seconds + 40))
    wait_udp_port(uas_ports.sip, proc=uas)
    kam = tls_kamailio(run, certs, "kamailio", uas_ports.sip, policy=document(0, "full", ""), stateful=True, defines=("OC_SERVER",))
    policy = run.path("edge-policy.xml")
    policy.write_text(document(0, "full", ""))
    eport, etls = free_udp_port(tcp=True), free_udp_port(tcp=True)
    edge = start_edge(run, "edge", eport, kam.port, "--policy", policy, "--overload-control", "--oc-algorithms", "loss",
                      "--tls-listen", f"127.0.0.1:{etls}", "--tls-next-hop", f"127.0.0.1:{kam.tls_port}",
                      "--tls-next-hop-name", "kamailio.test", "--tls-cert", edge_cert.cert, "--tls-key", edge_cert.key,
                      "--tls-ca", certs.ca.cert)
    wait_tcp_port(etls, proc=edge)
    front = free_udp_port(tcp=True)
    stunnel(run, "uac-tls", front, etls, client=True, ca=certs.ca.cert, check_host="edge.test")
    inf = write_injection(run.path("callees.csv"), [MATCH])
    uac = run.start("uac", sipp_command("uac_invite_only.xml", SippPorts.pick(tcp=True), remote=f"127.0.0.1:{front}", inf=inf,
                                        rate=offered, calls=int(offered * seconds), timeout_s=seconds + 30, logs=False,
                                        transport="t1"))
    feed_occupancy(uas, kam.port, capacity, seconds)
    uac.wait(timeout=60)
    stats = stats_now(edge)
    ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
    first = ts[0] if ts else time.time()
    # Physics: the loop aims at the capacity, whoever sheds: CAPACITY ± 15 % once settled.
    c.rate("INVITEs at the UAS after 4 s", ts, first + 4.0, first + seconds - 1.0, capacity, 0.15)
    # RFC 7339 §5.1: Kamailio chose loss for the edge and its values reached it over TLS, in the
    # Via of the replies it relayed on the edge's connection (the edge's TLS next hop has
    # counters of its own where it keeps it apart from the UDP one).
    hop = "edge_oc_tls_next_hop" if "edge_oc_tls_next_hop_algorithm" in stats else "edge_oc_next_hop"
    c.that(stats.get(f"{hop}_algorithm") == 1 and stats.get(f"{hop}_updates_total", 0) > 10,
           f"the edge's TLS next hop selected loss ({hop}_algorithm {stats.get(f'{hop}_algorithm')}) and its values "
           f"applied {stats.get(f'{hop}_updates_total')} times")
    out = invite_outcomes(SippOutputs(uac.cwd))
    shed = stats.get("edge_oc_shed_total", 0)
    # The participant sheds its excess itself, 1 − capacity / offered = half: Kamailio's own
    # 503s (§5.10.2, for clients that do not take part) stay few.
    c.that(0.3 <= shed / max(out["invites"], 1) <= 0.7,
           f"the edge shed {shed:.0f} of {out['invites']} INVITEs ({shed / max(out['invites'], 1):.0%}; half ± 20 %)")
    sent = sum(1 for line in kam.log().splitlines() if "oc-sent|" in line)
    c.that(sent > 100, f"Kamailio wrote its values into {sent} replies to the edge over TLS (oc_log)")
    c.that(out["failed_calls"] == 0, f"no call failed ({out['failed_calls']})")
    return c


TESTS = {
    "subscription_over_tls": subscription_over_tls,
    "notifier_names": notifier_names,
    "overload_loop_over_tls": overload_loop_over_tls,
    "oc_server_over_tls": oc_server_over_tls,
}

if __name__ == "__main__":
    sys.exit(suite_main(__doc__, TESTS, suite_label("test_kamailio_tls.py"), prefix="ktls-"))
