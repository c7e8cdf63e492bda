"""SIP over plain UDP sockets on loopback: a caller, a next hop and a notifier written in a
few lines of Python, for checks of one request at a time.

A SIPp scenario is too rigid to send one malformed request, hold a response back or answer a
SUBSCRIBE by hand; these peers send exactly what a test writes and collect what comes back.
``UdpPeers`` is a caller and a next hop around an edge; ``Peer`` one socket around a Kamailio,
``Notifier`` a notifier that answers the module's SUBSCRIBEs and sends NOTIFYs; ``NextHop`` a
next hop that answers every request 200 on its own thread (optionally writing overload-control
values into the Vias below its top one, as a downstream server must not), and ``options()`` an
OPTIONS to send it through a proxy; ``strip_checks()`` what a proxy in between must have done
to the Vias of both (RFC 7339 §5.4, §5.6). ``Sender`` sends requests at a rate (``send_for``)
from one or many sockets and counts the answers, taking part in RFC 7339 or not; ``marked()``
builds them with priority markings, ``set_up_dialog()`` a dialog through a proxy for them.

Python 3 standard library only.
"""

from __future__ import annotations

import re
import socket
import threading
import time


def header(msg: str, name: str) -> str:
    """The value of the first `name` header line of a message's header block ("" when none)."""
    for line in msg.split("\r\n\r\n", 1)[0].split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == name.lower():
            return v.strip()
    return ""


class UdpPeers:
    """A Python client and next hop on loopback UDP sockets, for one-request checks."""

    def __init__(self):
        self.hop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.hop.bind(("127.0.0.1", 0))
        self.client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.client.bind(("127.0.0.1", 0))
        self.hop_port = self.hop.getsockname()[1]
        self.cport = self.client.getsockname()[1]
        self.n = 0

    def invite(self, edge_port: int, ruri: str, to: str, extra: str = "") -> tuple:
        """Sends one INVITE to the edge; (first lines of what came back to the client, how
        many requests reached the next hop)."""
        self.n += 1
        n = self.n
        msg = (
            f"INVITE {ruri} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{self.cport};branch=z9hG4bK-x-{n}\r\n"
            f"From: <sip:alice@127.0.0.1:{self.cport}>;tag=a{n}\r\nTo: {to}\r\n"
            f"Call-ID: x-{n}@e2e\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\n{extra}Content-Length: 0\r\n\r\n"
        ).encode()
        self.client.sendto(msg, ("127.0.0.1", edge_port))
        replies = [r.splitlines()[0] for r in self.drain(self.client)]
        return replies, len(self.drain(self.hop))

    @staticmethod
    def drain(sock, quiet: float = 0.3) -> list:
        """What arrives on `sock` until it has been quiet for `quiet` s (0: what is there)."""
        out = []
        sock.settimeout(quiet)
        try:
            while True:
                out.append(sock.recv(65535).decode(errors="replace"))
        except (socket.timeout, BlockingIOError):
            pass
        return out

    def close(self):
        self.hop.close()
        self.client.close()


class Peer:
    """A UDP socket on loopback that sends requests and collects what arrives."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    def invite(self, kam_port: int, callee: str, n: int, extra: str = "") -> bytes:
        return (
            f"INVITE sip:{callee}@127.0.0.1:{kam_port} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{self.port};branch=z9hG4bK-km-{callee}-{n}-{time.monotonic_ns()}\r\n"
            f"From: <sip:alice@127.0.0.1:{self.port}>;tag=a{n}\r\nTo: <sip:{callee}@127.0.0.1;user=phone>\r\n"
            f"Call-ID: {callee}-{n}-{time.monotonic_ns()}@km\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\n{extra}Content-Length: 0\r\n\r\n"
        ).encode()

    def drain(self, quiet: float = 0.3) -> list:
        out = []
        self.sock.settimeout(quiet)
        try:
            while True:
                out.append(self.sock.recv(65535).decode(errors="replace"))
        except socket.timeout:
            pass
        return out

    def close(self):
        self.sock.close()


def first_lines(msgs) -> list:
    return [m.splitlines()[0] for m in msgs if m]


class Notifier(Peer):
    """A notifier on a plain UDP socket: reads the module's SUBSCRIBEs, answers them, sends NOTIFYs."""

    def __init__(self):
        super().__init__()
        self.uri = f"sip:sbc@127.0.0.1:{self.port}"
        self.cseq = 0

    def wait_request(self, method: str, timeout: float) -> tuple:
        """The next request `method` (others are kept out), and where it came from."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                data, addr = self.sock.recvfrom(65535)
            except socket.timeout:
                break
            msg = data.decode(errors="replace")
            if msg.startswith(method + " "):
                return msg, addr
        return "", None

    header = staticmethod(header)

    def answer(self, req: str, addr, status: str = "200 OK", extra: str = "") -> None:
        head = req.split("\r\n\r\n", 1)[0].split("\r\n")
        keep = [h for h in head[1:] if h.split(":", 1)[0].lower() in ("via", "from", "to", "call-id", "cseq")]
        keep = [h + ";tag=ntf" if h.lower().startswith("to:") and ";tag=" not in h else h for h in keep]
        self.sock.sendto(("SIP/2.0 " + status + "\r\n" + "\r\n".join(keep) + f"\r\nContact: <{self.uri}>\r\n{extra}Content-Length: 0\r\n\r\n").encode(), addr)

    def notify(self, sub: str, addr, body: str, state: str = "active;expires=60", call_id=None) -> str:
        """Sends a NOTIFY in the dialog `sub` created; returns its branch."""
        self.cseq += 1
        branch = f"z9hG4bK-ntf-{self.cseq}-{time.monotonic_ns()}"
        frm = self.header(sub, "From")
        contact = re.search(r"<([^>]+)>", self.header(sub, "Contact")).group(1)
        msg = (
            f"NOTIFY {contact} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{self.port};branch={branch}\r\n"
            f"From: <{self.uri}>;tag=ntf\r\nTo: {frm}\r\nCall-ID: {call_id or self.header(sub, 'Call-ID')}\r\n"
            f"CSeq: {self.cseq} NOTIFY\r\nMax-Forwards: 70\r\nContact: <{self.uri}>\r\nEvent: load-control\r\n"
            f"Subscription-State: {state}\r\nContent-Type: application/load-control+xml\r\n"
            f"Content-Length: {len(body.encode())}\r\n\r\n{body}"
        )
        self.sock.sendto(msg.encode(), addr)
        return branch

    def wait_response(self, branch: str, timeout: float = 2.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                msg = self.sock.recv(65535).decode(errors="replace")
            except socket.timeout:
                break
            if msg.startswith("SIP/2.0 ") and branch in self.header(msg, "Via"):
                return msg
        return ""


INSERTED = ";oc=90;oc-validity=60000;oc-seq=999999.0"


class NextHop:
    """A next hop on a UDP socket that answers 200 to every request it gets, its Vias copied (a
    To tag added for an INVITE);
    with `insert`, every Via below the top one gets `INSERTED` (a downstream server writing
    overload-control values where they do not belong); `top` is appended to the top Via (the
    hop's own overload-control values, `{n}` numbering its answers from 1)."""

    def __init__(self, insert: bool = False, top: str = ""):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.insert = insert
        self.top = top
        self.received = []
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopped:
            try:
                data, addr = self.sock.recvfrom(65535)
            except socket.timeout:
                continue
            text = data.decode(errors="replace")
            self.received.append(text)
            head = text.split("\r\n\r\n", 1)[0].split("\r\n")
            vias = [h for h in head if h.lower().startswith("via:")]
            keep = [h for h in head[1:] if h.split(":", 1)[0].lower() in ("from", "to", "call-id", "cseq")]
            if head[0].startswith("INVITE "):
                # a UAS answering an INVITE adds its To tag (RFC 3261 §8.2.6.2): the dialog's
                keep = [h + f";tag=hop{len(self.received)}" if h.lower().startswith(("to:", "t:")) and ";tag=" not in h else h
                        for h in keep]
            out = ["SIP/2.0 200 OK"]
            for k, v in enumerate(vias):
                if k == 0 and self.top:
                    # the server's values replace the client's offer (RFC 7339 §5.3)
                    offer = re.sub(r';oc(-[a-z]+)?(=("[^"]*"|[^;]*))?', "", v, flags=re.I)
                    out.append(offer + self.top.format(n=len(self.received)))
                elif k == 0:
                    out.append(v)
                else:
                    out.append(v + (INSERTED if self.insert else ""))
            out += keep + ["Content-Length: 0", "", ""]
            self.sock.sendto("\r\n".join(out).encode(), addr)

    def close(self):
        self.stopped = True
        self.thread.join()
        self.sock.close()


def options(port: int, via_port: int, n: int, params: str = "", extra_via: str = "") -> bytes:
    return (
        f"OPTIONS sip:ping@127.0.0.1 SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:{via_port};branch=z9hG4bK-ic-{port}-{n}{params}\r\n{extra_via}"
        f"From: <sip:probe@127.0.0.1>;tag=t{n}\r\nTo: <sip:ping@127.0.0.1>\r\n"
        f"Call-ID: ic-{port}-{n}-{time.monotonic_ns()}@e2e\r\nCSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
    ).encode()


def via_lines(msg: str) -> list:
    return [h for h in msg.split("\r\n\r\n", 1)[0].split("\r\n") if h.lower().startswith("via:")]


def strip_checks(c, who: str, forwarded: list, got: dict) -> None:
    """RFC 7339 §5.4 and §5.6 at a proxy (`who`) that took part between a client and a
    ``NextHop(insert=True)``: `forwarded` are the two OPTIONS the next hop got, `got` the 200
    the client got back for each case (`plain`, no offer; `offering`, an `oc` offer), each
    request with a Via of an earlier hop below the client's."""
    c.that(len(forwarded) == 2 and all(len(via_lines(m)) == 3 for m in forwarded),
           f"the next hop got both requests with three Vias ({[len(via_lines(m)) for m in forwarded]})")
    client_vias = [via_lines(m)[1] for m in forwarded if len(via_lines(m)) == 3]
    c.that(len(client_vias) == 2 and all(";oc" not in v.lower() for v in client_vias),
           f"§5.6: the client's Via reached the next hop without its oc parameters: {client_vias}")
    for name, reply in got.items():
        vias = via_lines(reply)
        c.that(reply.startswith("SIP/2.0 200") and len(vias) == 2, f"{name}: the 200 came back with two Vias ({vias})")
        if len(vias) != 2:
            continue
        top, lower = vias
        c.that("oc=90" not in top and "60000" not in top and "999999" not in top,
               f"{name}: §5.4: none of the next hop's values in the client's Via: {top}")
        c.that("oc=" not in lower.lower() and "oc-validity" not in lower.lower() and "oc-seq" not in lower.lower(),
               f"{name}: §5.4: none in the Via below it either: {lower}")
    plain_top = via_lines(got["plain"])[0] if via_lines(got["plain"]) else ""
    c.that(plain_top != "" and ";oc" not in plain_top, f"plain: a client that did not offer gets no oc value at all: {plain_top}")
    offering_top = via_lines(got["offering"])[0] if via_lines(got["offering"]) else ""
    c.that(";oc=0;" in offering_top and "oc-validity=0" in offering_top,
           f"offering: {who}'s own answer, not overloaded (§5.1: oc=0): {offering_top}")


def send_for(seconds: float, rate: float, senders: list) -> None:
    """Calls every sender's `send(n)` `rate` times a second each for `seconds`."""
    start = time.monotonic()
    n = 0
    while True:
        due = start + n / rate
        now = time.monotonic()
        if due - start >= seconds:
            return
        if due > now:
            time.sleep(due - now)
        for s in senders:
            s.send(n)
        n += 1


class Sender:
    """Requests from one socket, or from a pool of sockets used in turn; counts the answers
    after `from_n` by status. One that `obeys` takes part as RFC 7415 asks: while the rate it
    was last told holds (its oc-validity from the response that carried it), it sends no
    faster than that rate; when it has lapsed, as fast as it likes (§4.3: "overload control is
    not in effect")."""

    def __init__(self, edge_port: int, sockets: int = 1, rotate_via: bool = False, params: str = "", from_n: int = 0,
                 obeys: bool = False, build=None, bind: str = "127.0.0.1"):
        self.edge_port = edge_port
        self.build = build or options
        self.socks = []
        for _ in range(sockets):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((bind, 0))
            s.setblocking(False)
            self.socks.append(s)
        self.rotate_via = rotate_via
        self.params = params
        self.from_n = from_n
        self.sent = 0
        self.answers = {}
        self.tops = []
        self.obeys = obeys
        self.rate, self.until, self.last = 0.0, 0.0, 0.0

    def send(self, n: int):
        now = time.monotonic()
        if self.obeys and now < self.until and (self.rate <= 0 or now - self.last < 1.0 / self.rate):
            self.collect()
            return
        self.last = now
        s = self.socks[n % len(self.socks)]
        port = s.getsockname()[1]
        via_port = 20000 + n % 40000 if self.rotate_via else port
        params = self.params + (";rport" if self.rotate_via else "")
        s.sendto(self.build(port, via_port, n, params), ("127.0.0.1", self.edge_port))
        self.sent += 1 if n >= self.from_n else 0
        self.collect()

    def collect(self):
        for s in self.socks:
            for r in UdpPeers.drain(s, quiet=0):
                try:
                    seq = int(r.split("branch=z9hG4bK-ic-", 1)[1].split("-", 2)[1].split(";")[0].split("\r")[0])
                except (IndexError, ValueError):
                    seq = -1
                top = via_lines(r)[0] if via_lines(r) else ""
                values = dict(p.split("=", 1) for p in top.split(";") if p.startswith(("oc=", "oc-validity=")))
                if "oc=" in top and values.get("oc-validity", "0") != "0":
                    self.rate = float(values.get("oc", "0"))
                    self.until = time.monotonic() + int(values["oc-validity"]) / 1000.0
                if seq >= self.from_n:
                    status = r[8:11]
                    self.answers[status] = self.answers.get(status, 0) + 1
                    if status == "200":
                        self.tops.append(via_lines(r)[0] if via_lines(r) else "")

    def share(self, status: str) -> float:
        return self.answers.get(status, 0) / max(1, self.sent)

    def close(self):
        for s in self.socks:
            s.close()


def marked(headers: str = "", ruri: str = "sip:ping@127.0.0.1", to: str = "<sip:ping@127.0.0.1>", dialog=None):
    """A request builder for Sender: an OPTIONS with `headers` added, to `ruri` / `to`; with
    `dialog` (Call-ID, From tag, To tag) one in that dialog."""
    def build(port: int, via_port: int, n: int, params: str = "") -> bytes:
        call_id, from_tag, to_tag = dialog or (f"ic-{port}-{n}-{time.monotonic_ns()}@e2e", f"t{n}", None)
        to_header = to + (f";tag={to_tag}" if to_tag else "")
        return (
            f"OPTIONS {ruri} SIP/2.0\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{via_port};branch=z9hG4bK-ic-{port}-{n}{params}\r\n"
            f"From: <sip:probe@127.0.0.1>;tag={from_tag}\r\nTo: {to_header}\r\n"
            f"Call-ID: {call_id}\r\nCSeq: {n + 2} OPTIONS\r\nMax-Forwards: 70\r\n{headers}Content-Length: 0\r\n\r\n"
        ).encode()
    return build


def set_up_dialog(edge_port: int, sock: socket.socket) -> tuple:
    """An INVITE through the edge, answered 200 by the next hop: the dialog (Call-ID, From tag, To
    tag) the edge saw set up."""
    port = sock.getsockname()[1]
    call_id = f"dialog-{port}@e2e"
    sock.sendto((f"INVITE sip:ping@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bK-dlg-{port}\r\n"
                 f"From: <sip:probe@127.0.0.1>;tag=caller\r\nTo: <sip:ping@127.0.0.1>\r\nCall-ID: {call_id}\r\n"
                 f"CSeq: 1 INVITE\r\nContact: <sip:probe@127.0.0.1:{port}>\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n").encode(),
                ("127.0.0.1", edge_port))
    ok = [m for m in UdpPeers.drain(sock, quiet=0.5) if m.startswith("SIP/2.0 200")]
    to = next((h for h in (ok[0].split("\r\n") if ok else []) if h.lower().startswith("to:")), "")
    tag = to.split(";tag=", 1)[1].strip() if ";tag=" in to else None
    return call_id, "caller", tag
