"""TLS for the end-to-end tests: certificates made by the test, stunnel around SIPp, and Python
TLS sockets for the peers the tests write themselves.

Debian's SIPp (3.6.1) is built without TLS, so a SIPp that speaks TLS is SIPp over TCP behind
stunnel (Debian's stunnel4, OpenSSL underneath): a client-mode stunnel takes SIPp's TCP
connection and opens the TLS one, verifying the server's certificate; a server-mode stunnel
terminates TLS with a certificate and hands SIPp the plain TCP. Every message SIPp sends on its
connection goes on the same TLS connection, so a SIPp notifier's NOTIFYs reach a subscriber on
the connection it subscribed on.

- ``Pki(directory, name)``: a CA made with the openssl command (EC P-256 keys, SHA-256), and
  ``issue(cn, dns=…, ips=…)`` certificates signed by it (server and client use). Two ``Pki``
  with the same names are two different trust roots: a certificate of the other one is what an
  attacker with a look-alike certificate presents.
- ``stunnel(run, name, …)``: one stunnel, client or server mode, in the foreground under the
  Run (its log in the run directory), waited for until its port listens.
- ``client_context()`` / ``server_context()``: Python ``ssl`` contexts from those files.
- ``TlsServer``: a TLS listener on a Python socket, a thread per connection, counting the
  handshakes that failed; a test's peer subclasses it with what it does on a connection.

Python 3 standard library, the openssl command and stunnel4.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from ports import free_udp_port, wait_tcp_port
from processes import HarnessError


def _openssl(*args, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise HarnessError(f"openssl {' '.join(args)} failed: {r.stderr.strip()}")


@dataclass
class Issued:
    """A certificate and its key (PEM files)."""

    cert: Path
    key: Path


class Pki:
    """A CA in `directory`/`name`/, and the certificates it issues there."""

    def __init__(self, directory: Path, name: str = "ca"):
        self.dir = Path(directory) / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.key = self.dir / "ca.key"
        self.cert = self.dir / "ca.pem"
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(self.key), cwd=self.dir)
        _openssl("req", "-x509", "-new", "-key", str(self.key), "-sha256", "-days", "2", "-subj", f"/O=loadctl tests/CN={name}",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 "-out", str(self.cert), cwd=self.dir)

    def issue(self, cn: str, dns=(), ips=(), client: bool = True, server: bool = True) -> Issued:
        """A certificate for `cn` with these subjectAltNames (DNS names, IP addresses), for TLS
        server and/or client use, valid for two days."""
        stem = cn.replace("/", "_")
        key, csr, cert, ext = (self.dir / f"{stem}.{s}" for s in ("key", "csr", "pem", "ext"))
        uses = [u for u, on in (("serverAuth", server), ("clientAuth", client)) if on]
        sans = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
        lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature",
                 f"extendedKeyUsage={','.join(uses)}"]
        if sans:
            lines.append(f"subjectAltName={','.join(sans)}")
        ext.write_text("\n".join(lines) + "\n")
        _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key), cwd=self.dir)
        _openssl("req", "-new", "-key", str(key), "-subj", f"/O=loadctl tests/CN={cn}", "-out", str(csr), cwd=self.dir)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key), "-CAcreateserial",
                 "-sha256", "-days", "2", "-extfile", str(ext), "-out", str(cert), cwd=self.dir)
        return Issued(cert, key)


def stunnel_binary() -> str:
    for name in ("stunnel4", "stunnel"):
        path = shutil.which(name)
        if path:
            return path
    raise HarnessError("stunnel is not installed (make e2e-tools installs Debian's stunnel4)")


def stunnel(run, name: str, accept: int, connect: int, *, client: bool, ca: Path = None, cert: Issued = None,
            check_host: str = None, check_ip: str = None, require_cert: bool = False, cpu=None):
    """Starts stunnel: `client` mode takes plain TCP on `accept` and opens TLS to `connect`
    (verifying the server against `ca`, with `check_host` / `check_ip`), server mode takes TLS
    on `accept` (presenting `cert`; with `ca`, verifying a client certificate, mandatory with
    `require_cert`) and opens plain TCP to `connect`; pinned to core `cpu` if given. Returns the
    Proc once `accept` listens."""
    conf = run.path(name, "stunnel.conf")
    lines = ["foreground = yes", "pid =", "debug = 5", "syslog = no", f"output = {run.path(name, 'stunnel.log')}",
             f"[{name}]", f"client = {'yes' if client else 'no'}", f"accept = 127.0.0.1:{accept}",
             f"connect = 127.0.0.1:{connect}", "sslVersionMin = TLSv1.2"]
    if cert is not None:
        lines += [f"cert = {cert.cert}", f"key = {cert.key}"]
    if ca is not None:
        lines += [f"CAfile = {ca}", "verifyChain = yes"]
        if not client:
            lines.append(f"requireCert = {'yes' if require_cert else 'no'}")
    if check_host:
        lines.append(f"checkHost = {check_host}")
    if check_ip:
        lines.append(f"checkIP = {check_ip}")
    conf.write_text("\n".join(lines) + "\n")
    proc = run.start(name, [stunnel_binary(), str(conf)], cpu=cpu)
    wait_tcp_port(accept, proc=proc)
    return proc


def client_context(ca: Path, cert: Issued = None, check_hostname: bool = True) -> ssl.SSLContext:
    """A Python TLS client context: verifies the server against `ca`; presents `cert` if given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cafile=str(ca))
    ctx.check_hostname = check_hostname
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


def server_context(cert: Issued, ca: Path = None, require_cert: bool = False) -> ssl.SSLContext:
    """A Python TLS server context presenting `cert`; with `ca`, client certificates are
    verified against it (required with `require_cert`)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert.cert), str(cert.key))
    if ca is not None:
        ctx.load_verify_locations(cafile=str(ca))
        ctx.verify_mode = ssl.CERT_REQUIRED if require_cert else ssl.CERT_OPTIONAL
    return ctx


class TlsServer:
    """Listens on a loopback port (`self.port`) with `server_context(cert, ca, require_cert)`;
    each connection whose handshake succeeds goes to `serve(conn)` on a thread of its own (its
    socket closed afterwards), each failed one is counted in `handshake_failures`."""

    def __init__(self, cert: Issued, ca: Path = None, require_cert: bool = False):
        self.ctx = server_context(cert, ca, require_cert)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", free_udp_port(tcp=True)))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.handshake_failures = 0
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._connection, args=(raw,), daemon=True).start()

    def _connection(self, raw):
        raw.settimeout(5)
        try:
            conn = self.ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            self.handshake_failures += 1
            raw.close()
            return
        try:
            self.serve(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def serve(self, conn) -> None:
        """What is done with one connection (override)."""

    def close(self):
        self.stopping = True
        self.sock.close()


def read_messages(conn, buf: bytes = b""):
    """The messages of a TLS or TCP stream, framed by Content-Length (RFC 3261 §18.3), as text,
    until the peer closes: a generator."""
    while True:
        while b"\r\n\r\n" not in buf:
            data = conn.recv(65536)
            if not data:
                return
            buf += data
        head, rest = buf.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() in (b"content-length", b"l"):
                length = int(value.strip() or 0)
        while len(rest) < length:
            data = conn.recv(65536)
            if not data:
                return
            rest += data
        yield (head + b"\r\n\r\n" + rest[:length]).decode(errors="replace")
        buf = rest[length:]


def read_message(conn) -> str:
    """The next SIP message on a stream; "" when it closed first."""
    return next(read_messages(conn), "")
