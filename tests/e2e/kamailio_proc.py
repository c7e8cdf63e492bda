"""Kamailio with the loadctl module as the suites start and drive it: the build under test, its
process with tests/e2e/kamailio/loadctl.cfg, its JSON-RPC, the SIPp load offered through it and
the occupancy signal fed to its RFC 7339 server.

The module's suites, the fault scenarios and RFC 7339 against Kamailio's own dispatcher start
the same Kamailio the same way:

- ``KamailioBuild`` / ``build()``: the Kamailio the module was built for and gated against
  (LOADCTL_KAMAILIO_BUILD names its directory; default target/kamailio: Debian's kamailio),
  from the build.json kamailio/build.sh writes.
- ``Kamailio``: one Kamailio running loadctl.cfg with the defines a test asks for (a policy,
  children, the next hop, tm, subscriptions, KEMI, TCP, TLS, ...), ready once its SIP and RPC
  sockets are bound; ``jsonrpc()`` one request to its jsonrpcs datagram socket.
- ``offered_load()``, ``start_uas()``, ``check_calls()``: a SIPp UAC offering 3R matching and R
  other calls/s through it to a SIPp UAS, and the checks every such run makes;
  ``start_held_notifier()`` and ``held_notifier_end()``: a SIPp notifier holding a
  subscription, and those checks and the unsubscribe at its end.
- ``feed_occupancy()``: the occupancy of a server of a given capacity, reported to the module's
  RFC 7339 server (loadctl.cfg's OC_SERVER).

Python 3 standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

from admission import count_in
from checks import Checks
from policy_docs import MATCH, OTHER, document, rate_rule, split
from ports import free_udp_port, wait_tcp_port, wait_udp_port
from processes import HarnessError, Run, wait_until
from sipp import SippOutputs, SippPorts, invite_outcomes, sipp_command, write_injection

HERE = Path(__file__).resolve().parent
CFG = HERE / "kamailio" / "loadctl.cfg"
CFG_KEMI = HERE / "kamailio" / "loadctl-kemi.cfg"
_BUILD = None


class KamailioBuild:
    """One Kamailio that the module was built for and gated against (kamailio/build.sh writes
    build.json beside the module): its binary, module directory, the loadctl.so for it.
    LOADCTL_KAMAILIO_BUILD names the directory (default target/kamailio: Debian's kamailio)."""

    def __init__(self, directory=None):
        root = HERE.parents[1]
        self.dir = Path(directory or os.environ.get("LOADCTL_KAMAILIO_BUILD") or root / "target" / "kamailio")
        path = self.dir / "build.json"
        if not path.exists():
            raise HarnessError(f"{path} missing: build the module first (make kamailio-module, or "
                               f"kamailio/build.sh --source SRC for a release)")
        info = json.loads(path.read_text())
        self.version = info["version"]
        self.binary = info["kamailio"]
        self.mpath = info["mpath"]
        self.module = Path(info["module"])
        self.label = info["label"]
        self.major_minor = tuple(int(x) for x in self.version.split(".")[:2])

    def defines(self) -> list:
        """The -A arguments every test configuration takes: the module and the module path."""
        return ["-A", f'LOADCTL_SO="{self.module}"', "-A", f'MPATH="{self.mpath}/"']


def jsonrpc(port: int, method: str, *params, timeout: float = 3.0) -> dict:
    """One JSON-RPC request to Kamailio's jsonrpcs datagram socket on 127.0.0.1:`port`; the
    whole response object."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", 0))
        s.settimeout(timeout)
        s.sendto(json.dumps({"jsonrpc": "2.0", "method": method, "params": list(params), "id": 1}).encode(), ("127.0.0.1", port))
        return json.loads(s.recv(1 << 20))
    finally:
        s.close()


def build() -> KamailioBuild:
    """The Kamailio under test (LOADCTL_KAMAILIO_BUILD; default Debian's, target/kamailio)."""
    global _BUILD
    if _BUILD is None:
        _BUILD = KamailioBuild()
    return _BUILD


def suite_label(suite: str):
    """For ``checks.suite_main``: finds the Kamailio under test, says which, and gives the
    summary line's label (a HarnessError when there is none)."""
    def label() -> str:
        kam = build()
        print(f"{suite}: {kam.label}, module {kam.module}")
        return f"{suite} (Kamailio {kam.version})"
    return label


# ---------------------------------------------------------------------------------------------
# Kamailio with the module


class Kamailio:
    def __init__(self, run: Run, name: str, policy: str, children: int, next_hop: int, stateful=False, annotate=False, kemi=False,
                 per_process=False, tcp_port=None, subscribe=(), defines=(), port=None, advertise=None, tls=None):
        """`next_hop`: a port of 127.0.0.1, or a SIP URI. `advertise`: a port of 127.0.0.1
        Kamailio names in its Via and Contact headers instead of its own (`-l
        udp:IP:PORT/IP:ADVERTISED`): a fault relay in front of it. `tls`: (port, the tls
        module's configuration file): Kamailio loads the tls module and listens for TLS on
        127.0.0.1:port (loadctl.cfg's TLS_CFG)."""
        self.run = run
        self.port = port or free_udp_port()
        self.rpc_port = free_udp_port()
        rundir = run.path(name, "run")
        rundir.mkdir(parents=True, exist_ok=True)
        argv = [
            build().binary, "-f", CFG, "-DD", "-E", "-x", "tlsf", "-X", "tlsf", "-n", children,
            "-l", f"udp:127.0.0.1:{self.port}" + (f"/127.0.0.1:{advertise}" if advertise else ""), "-Y", rundir,
            *build().defines(),
            "-A", f'NEXT_HOP="{next_hop if isinstance(next_hop, str) else f"sip:127.0.0.1:{next_hop}"}"',
            "-A", f'RPC_SOCKET="udp:127.0.0.1:{self.rpc_port}"',
        ]
        if policy is not None:
            policy_path = run.path(f"{name}-policy.xml")
            policy_path.write_text(policy)
            argv += ["-A", f'POLICY="{policy_path}"']
        for define, uri in zip(("SUBSCRIBE", "SUBSCRIBE2", "SUBSCRIBE3", "SUBSCRIBE4"), subscribe):
            argv += ["-A", f'{define}="{uri}"']
        for d in defines:
            argv += ["-A", d]
        if stateful:
            argv += ["-A", "STATEFUL"]
        if annotate:
            argv += ["-A", "ANNOTATE"]
        if per_process:
            argv += ["-A", "PER_PROCESS"]
        if tcp_port:
            argv += ["-l", f"tcp:127.0.0.1:{tcp_port}"]
        if tls:
            self.tls_port, tls_cfg = tls
            argv += ["-A", f'TLS_CFG="{tls_cfg}"', "-l", f"tls:127.0.0.1:{self.tls_port}"]
            if build().major_minor >= (5, 8):
                # libssl 3 wants the core's tls_threads_mode (the tls module's README, Note 2)
                argv += ["-A", "TLS_THREADS_MODE=2"]
        if tcp_port or tls:
            argv += ["-A", "TCP"]
        if kemi:
            argv[2] = CFG_KEMI
            argv += ["-A", f'KEMI_JS="{HERE / "kamailio" / "loadctl-kemi.js"}"']
        self.proc = run.start(name, argv)
        wait_udp_port(self.port, proc=self.proc)
        wait_udp_port(self.rpc_port, proc=self.proc)
        if tls:
            wait_tcp_port(self.tls_port, proc=self.proc)

    def rpc(self, method: str, *params, timeout: float = 5.0) -> dict:
        """One JSON-RPC request over jsonrpcs's datagram socket; the whole response object."""
        return jsonrpc(self.rpc_port, method, *params, timeout=timeout)

    def log(self) -> str:
        return self.proc.stderr_path.read_text(errors="replace")


# ---------------------------------------------------------------------------------------------
# SIPp load through it


def offered_load(run: Run, kam: Kamailio, uas_ports: SippPorts, r: float, seconds: float):
    """A SIPp UAC offering 4r calls/s for `seconds`: 3r matching the rule, r matching nothing."""
    inf = write_injection(run.path("callees.csv"), [MATCH, MATCH, MATCH, OTHER])
    uac_ports = SippPorts.pick()
    offered = 4 * r
    return run.start(
        "uac",
        sipp_command("uac_invite.xml", uac_ports, remote=f"127.0.0.1:{kam.port}", inf=inf, rate=offered,
                     calls=int(offered * seconds), timeout_s=seconds + 40),
    )


def start_uas(run: Run, seconds: float):
    ports = SippPorts.pick()
    uas = run.start("uas", sipp_command("uas.xml", ports, timeout_s=seconds + 60))
    wait_udp_port(ports.sip, proc=uas)
    return uas, ports


def check_calls(c: Checks, uac, uas, other):
    out = invite_outcomes(SippOutputs(uac.cwd))
    c.that(out["failed_calls"] == 0, f"no UAC call failed ({out['failed_calls']} failed, {out['retransmissions']} retransmissions)")
    sent_other = out["invites"] // 4
    c.that(abs(len(other) - sent_other) <= 1, f"every non-matching call passed: {len(other)} at the UAS of ~{sent_other} sent")
    c.that(out["answered_200"] + out["rejected_503"] == out["invites"],
           f"every INVITE was answered 200 or 503: {out['answered_200']} + {out['rejected_503']} of {out['invites']}")
    c.that(out["bye_200"] == out["answered_200"], f"every admitted call completed: {out['bye_200']} of {out['answered_200']}")
    stray = SippOutputs(uas.cwd).counts().get("0_ACK_Recv", -1)
    c.that(stray == 0, f"the ACKs to Kamailio's 503s stopped there (sl): {stray} reached the UAS")
    return out


def start_held_notifier(run: Run, ports: SippPorts, r: float, uri: str):
    """A SIPp notifier over TCP (-t t1) on `ports` that sends one document with a rate rule `r`
    and holds the subscription until the subscriber ends it (scenarios/notifier_held.xml),
    `uri` its Contact; (the SIPp process, its log file)."""
    scenario = run.path("notifier_held.xml")
    scenario.write_text((HERE / "scenarios" / "notifier_held.xml").read_text()
                        .replace("@DOC_V0@", document(0, "full", rate_rule(r))).replace("@CONTACT@", uri))
    notifier = run.start("notifier", sipp_command(scenario, ports, calls=1, timeout_s=120, transport="t1"))
    wait_tcp_port(ports.sip, proc=notifier)
    return notifier, notifier.cwd / "logs.log"


def held_notifier_end(c: Checks, run: Run, kam: "Kamailio", uac, uas, logs: Path, notifier_uri: str, r: float, over: str) -> None:
    """The end of a subscription to a SIPp notifier holding it (scenarios/notifier_held.xml,
    whose log is `logs`) while `uac` offered 3r matching and r other calls/s (done by now): the
    notifier's rate r enforced at the UAS, the calls' outcomes (check_calls), then SIGTERM to
    Kamailio's main process, which asks the subscriber to unsubscribe before it stops the
    others: the unsubscribe (Expires 0) goes to the notifier's Contact, over `over`."""
    run.stop(uas)
    matching, other = split(SippOutputs(uas.cwd).arrivals())
    c.steady_rate("the notifier's rate R is enforced", matching, r, "no matching call was admitted: the notifier's rate R is not what is enforced")
    check_calls(c, uac, uas, other)
    kam.proc.send_signal(signal.SIGTERM)
    unsubscribed = wait_until(lambda: "unsubscribed|" in logs.read_text(errors="replace"), 10)
    line = next((ln for ln in logs.read_text(errors="replace").splitlines() if ln.startswith("unsubscribed|")), "")
    c.that(unsubscribed and [x.strip() for x in line.split("|")] == ["unsubscribed", "0", f"SUBSCRIBE {notifier_uri}"],
           f"on SIGTERM the unsubscribe (Expires 0) reached the notifier over {over}: {line!r}")


# ---------------------------------------------------------------------------------------------
# the occupancy its RFC 7339 server is fed


def feed_occupancy(uas, port: int, capacity: float, seconds: float) -> tuple[float, list]:
    """The occupancy signal of a server of `capacity` calls/s, for `seconds`, to the Kamailio
    on `port` (loadctl.cfg's OC_SERVER OPTIONS): every 200 ms the INVITEs the UAS logged since
    the previous report / (capacity × the time since it) — what a CPU meter of such a server
    would read over that time —, against a target of 100 %. Windows follow each other without
    gap or overlap: the server scales what it admitted between two reports by the report.
    Returns the start time and the (from, to, measured) of each report."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    t0 = time.time()
    prev, n, fed = t0, 0, []
    while prev - t0 < seconds:
        time.sleep(max(0.0, prev + 0.2 - time.time()))
        ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
        now = time.time()
        measured = count_in(ts, prev, now) / (capacity * (now - prev))
        fed.append((prev, now, measured))
        prev = now
        n += 1
        msg = (f"OPTIONS sip:kamailio@127.0.0.1:{port} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{probe.getsockname()[1]};branch=z9hG4bK-occ{n}\r\n"
               f"From: <sip:test@127.0.0.1>;tag=o{n}\r\nTo: <sip:kamailio@127.0.0.1>\r\nCall-ID: occ{n}\r\nCSeq: 1 OPTIONS\r\n"
               f"X-Measured: {int(measured * 1e6)}\r\nX-Target: 1000000\r\nContent-Length: 0\r\n\r\n")
        probe.sendto(msg.encode(), ("127.0.0.1", port))
    probe.close()
    return t0, fed
