#!/usr/bin/env python3
"""Every script function and RPC command of the loadctl Kamailio module, on every kind of request,
under each configuration of the module's roles: nothing a peer sends may crash Kamailio, whatever
the configuration left off.

    python3 tests/e2e/test_kamailio_functions.py [--keep] [CONFIG ...]
    (LOADCTL_KAMAILIO_BUILD=DIR picks the Kamailio build, default target/kamailio: Debian's)

One Kamailio (tests/e2e/kamailio/functions.cfg, 2 UDP workers) per configuration: no role, tm not
loaded, a policy_file only (the subscriber role off, so lc_handle_notify() must answer through
the module's own sl binding), a subscriber, a notifier, overload control, and all of
them. Into each, from one UDP socket: every request method (new and in-dialog), load-control
SUBSCRIBEs and NOTIFYs (with a document, bodyless, terminated, an invalid body, another
package), each with X-Fn naming the function the script calls (functions.cfg); "relay" sends the
request on to a second socket, which answers 200 or 500 so that the branch, reply and failure
routes call the reply-side functions; stray responses run the main onreply_route. Then every
loadctl.* RPC command, with and without arguments.

Checks per configuration:
- no Kamailio process died (the same PIDs before and after; none of the crash lines in the log);
- every request but ACK got a final response;
- where the RFC fixes the answer: a load-control NOTIFY for no subscription gets 481 (RFC 6665
  §4.1.3: "if not, it MUST return a 481 (Subscription does not exist) response"), a
  load-control SUBSCRIBE to a Kamailio without the notifier role gets 489 (§4.2.1.1: "If not
  [understood], the notifier SHOULD return a 489 (Bad Event) response");
- every RPC command answered (a result or an error object) and Kamailio still answers RPC.
"""

from __future__ import annotations

import argparse
import re
import select
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from checks import Checks, run_tests  # noqa: E402
from kamailio_proc import KamailioBuild, jsonrpc as rpc  # noqa: E402
from policy_docs import document, rate_rule  # noqa: E402
from ports import free_udp_port, wait_udp_port  # noqa: E402
from processes import HarnessError, Run  # noqa: E402
from procstat import descendants  # noqa: E402
from sip_sockets import header  # noqa: E402

CFG = HERE / "kamailio" / "functions.cfg"
BUILD: KamailioBuild = None  # set by main()

FUNCTIONS = [
    "lc_classify", "lc_reply", "lc_classify+lc_reply", "lc_handle_notify", "lc_handle_subscribe",
    "lc_observe", "lc_observe_uri", "lc_oc_forward", "lc_oc_check", "lc_oc_occupancy", "relay", "",
]

LC_DOC = ('<?xml version="1.0" encoding="UTF-8"?>\r\n'
          '<load-control xmlns="urn:ietf:params:xml:ns:load-control" version="0" state="full">'
          '<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"><rule id="r"><conditions>'
          '<method xmlns="urn:ietf:params:xml:ns:load-control">INVITE</method></conditions>'
          '<actions><accept xmlns="urn:ietf:params:xml:ns:load-control"><rate>10</rate></accept>'
          '</actions></rule></ruleset></load-control>')

# (label, method, in-dialog, extra headers, body)
KINDS = [
    ("INVITE", "INVITE", False, "", ""),
    ("INVITE in dialog", "INVITE", True, "", ""),
    ("ACK", "ACK", True, "", ""),
    ("BYE", "BYE", True, "", ""),
    ("CANCEL", "CANCEL", False, "", ""),
    ("OPTIONS", "OPTIONS", False, "", ""),
    ("REGISTER", "REGISTER", False, "Expires: 60\r\n", ""),
    ("MESSAGE", "MESSAGE", False, "Content-Type: text/plain\r\n", "hello"),
    ("PUBLISH", "PUBLISH", False, "Event: presence\r\n", ""),
    ("INFO", "INFO", True, "", ""),
    ("UPDATE", "UPDATE", True, "", ""),
    ("PRACK", "PRACK", True, "RAck: 1 1 INVITE\r\n", ""),
    ("REFER", "REFER", True, "Refer-To: <sip:c@127.0.0.1>\r\n", ""),
    ("SUBSCRIBE load-control", "SUBSCRIBE", False, "Event: load-control\r\nExpires: 60\r\nAccept: application/load-control+xml\r\n", ""),
    ("SUBSCRIBE load-control refresh", "SUBSCRIBE", True, "Event: load-control\r\nExpires: 60\r\n", ""),
    ("SUBSCRIBE load-control unsubscribe", "SUBSCRIBE", True, "Event: load-control\r\nExpires: 0\r\n", ""),
    ("SUBSCRIBE presence", "SUBSCRIBE", False, "Event: presence\r\nExpires: 60\r\n", ""),
    ("NOTIFY load-control", "NOTIFY", True,
     "Event: load-control\r\nSubscription-State: active;expires=60\r\nContent-Type: application/load-control+xml\r\n", LC_DOC),
    ("NOTIFY load-control bodyless", "NOTIFY", True, "Event: load-control\r\nSubscription-State: active;expires=60\r\n", ""),
    ("NOTIFY load-control terminated", "NOTIFY", True,
     "Event: load-control\r\nSubscription-State: terminated;reason=noresource\r\n", ""),
    ("NOTIFY load-control invalid body", "NOTIFY", True,
     "Event: load-control\r\nSubscription-State: active;expires=60\r\nContent-Type: application/load-control+xml\r\n", "<load-control"),
    ("NOTIFY load-control no Subscription-State", "NOTIFY", True, "Event: load-control\r\n", ""),
    ("NOTIFY presence", "NOTIFY", True, "Event: presence\r\nSubscription-State: active;expires=60\r\n", ""),
    ("NOTIFY without Event", "NOTIFY", True, "Subscription-State: active\r\n", ""),
]

CRASH = re.compile(r"SIGSEGV|segfault|signal 11|terminating due to|CRITICAL|core dump|Aborted", re.I)

RPCS = [
    ("loadctl.publish",), ("loadctl.publish", "<not-xml"), ("loadctl.publish", "/nonexistent/policy.xml"),
    ("loadctl.withdraw",), ("loadctl.withdraw", "nobody"), ("loadctl.reload",), ("loadctl.stats",), ("loadctl.rules",),
    ("loadctl.subscriptions",), ("loadctl.resubscribe",), ("loadctl.notifier",), ("loadctl.notifier_policy",),
    ("loadctl.notifier_policy", "/nonexistent/policy.xml"), ("loadctl.notifier_capacity",),
    ("loadctl.notifier_capacity", "/nonexistent/capacity.xml"),
]


def request(method: str, kam_port: int, me: int, n: int, fn: str, in_dialog: bool, extra: str, body: str) -> tuple:
    call_id = f"fn-{n}-{time.monotonic_ns()}@functions"
    branch = f"z9hG4bK-fn-{n}-{time.monotonic_ns()}"
    to_tag = ";tag=callee" if in_dialog else ""
    cseq_method = "INVITE" if method in ("ACK", "CANCEL") else method
    fn_line = f"X-Fn: {fn}\r\n" if fn else ""
    msg = (f"{method} sip:+15551234@127.0.0.1:{kam_port} SIP/2.0\r\n"
           f"Via: SIP/2.0/UDP 127.0.0.1:{me};branch={branch};rport\r\n"
           f"From: <sip:caller@127.0.0.1:{me}>;tag=caller{n}\r\nTo: <sip:+15551234@127.0.0.1>{to_tag}\r\n"
           f"Call-ID: {call_id}\r\nCSeq: 1 {cseq_method}\r\nMax-Forwards: 70\r\n"
           f"Contact: <sip:caller@127.0.0.1:{me}>\r\n{fn_line}{extra}Content-Length: {len(body)}\r\n\r\n{body}")
    return call_id, msg.encode()


def stray_response(kam_port: int, me: int, n: int, code: str) -> bytes:
    return (f"SIP/2.0 {code}\r\nVia: SIP/2.0/UDP 127.0.0.1:{kam_port};branch=z9hG4bK-stray-{n};oc=20;oc-validity=500;oc-seq=1.1;oc-algo=\"loss\"\r\n"
            f"Via: SIP/2.0/UDP 127.0.0.1:{me};branch=z9hG4bK-up-{n}\r\n"
            f"From: <sip:a@127.0.0.1>;tag=a\r\nTo: <sip:b@127.0.0.1>;tag=b\r\nCall-ID: stray-{n}@functions\r\n"
            f"CSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n").encode()


def kamailio_pids(main_pid: int) -> set:
    return {main_pid, *descendants(main_pid)}


class Wire:
    """The caller's socket and the next hop's, read together: the next hop answers relayed
    requests (200, or 500 for an even CSeq so that the failure route runs, with an oc Via value
    for the client side; nothing to ACK), the caller collects final responses by Call-ID."""

    def __init__(self):
        self.caller = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.caller.bind(("127.0.0.1", 0))
        self.hop = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.hop.bind(("127.0.0.1", 0))
        self.responses = {}  # call-id -> [status codes]
        self.relayed = 0

    def pump(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while True:
            left = until - time.monotonic()
            ready, _, _ = select.select([self.caller, self.hop], [], [], max(left, 0))
            if not ready and left <= 0:
                return
            for s in ready:
                data, addr = s.recvfrom(65535)
                msg = data.decode(errors="replace")
                if s is self.caller:
                    if msg.startswith("SIP/2.0 ") and int(msg.split()[1]) >= 200:
                        self.responses.setdefault(header(msg, "Call-ID"), []).append(int(msg.split()[1]))
                elif not msg.startswith("SIP/2.0") and not msg.startswith("ACK "):
                    self.answer(msg, addr)

    def answer(self, msg: str, addr) -> None:
        head = msg.split("\r\n\r\n", 1)[0].split("\r\n")
        vias = [h for h in head[1:] if h.lower().startswith("via:")]
        keep = [h for h in head[1:] if h.split(":", 1)[0].lower() in ("from", "call-id", "cseq")]
        to = [h + ("" if "tag=" in h else ";tag=hop") for h in head[1:] if h.lower().startswith("to:")]
        cseq = header(msg, "CSeq").split()
        status = "500 Server Internal Error" if cseq and cseq[0].isdigit() and int(cseq[0]) % 2 == 0 else "200 OK"
        if vias:
            vias[0] += ";oc=30;oc-validity=1000;oc-seq=1765000000.1"
        self.hop.sendto(("SIP/2.0 " + status + "\r\n" + "\r\n".join(vias + keep + to) + "\r\nContent-Length: 0\r\n\r\n").encode(), addr)
        self.relayed += 1

    def close(self):
        self.caller.close()
        self.hop.close()


def exercise(run: Run, name: str, defines: list, notifier: bool = False, subscriber: bool = False) -> Checks:
    c = Checks(f"functions_{name}: every loadctl function and RPC on every request ({' '.join(defines) or 'no role'})")
    kam = BUILD
    port, rpc_port = free_udp_port(), free_udp_port()
    wire = Wire()
    hop_port = wire.hop.getsockname()[1]
    rundir = run.path(name, "run")
    rundir.mkdir(parents=True, exist_ok=True)
    argv = [kam.binary, "-f", CFG, "-DD", "-E", "-n", 2, "-l", f"udp:127.0.0.1:{port}", "-Y", rundir, *kam.defines(),
            "-A", f'RPC_SOCKET="udp:127.0.0.1:{rpc_port}"', "-A", f'PEER="sip:127.0.0.1:{hop_port}"',
            "-A", f'PEER_HOSTPORT="127.0.0.1:{hop_port}"']
    for d in defines:
        argv += ["-A", d]
    proc = run.start(f"kamailio-{name}", argv)
    wait_udp_port(port, proc=proc)
    wait_udp_port(rpc_port, proc=proc)
    time.sleep(0.3)  # the module's role processes start after the SIP workers
    before = kamailio_pids(proc.popen.pid)

    me = wire.caller.getsockname()[1]
    sent = {}  # call-id -> (kind, fn, method)
    n = 0
    for fn in FUNCTIONS:
        for kind, method, in_dialog, extra, body in KINDS:
            n += 1
            call_id, msg = request(method, port, me, n, fn, in_dialog, extra, body)
            sent[call_id] = (kind, fn, method)
            wire.caller.sendto(msg, ("127.0.0.1", port))
            wire.pump(0.002)
    for i in range(20):
        wire.caller.sendto(stray_response(port, me, i, ("200 OK", "503 Service Unavailable", "100 Trying", "180 Ringing")[i % 4]), ("127.0.0.1", port))
    wire.pump(3.0)  # tm's fr_timer is 2 s: every relayed transaction has ended
    wire.close()
    responses, relayed = wire.responses, wire.relayed

    unanswered = [(k, fn) for cid, (k, fn, m) in sent.items() if m != "ACK" and cid not in responses]
    c.that(not unanswered, f"every request but ACK got a final response: {len(sent) - len(unanswered)} of "
           f"{sum(1 for v in sent.values() if v[2] != 'ACK')} answered ({relayed} relayed and answered by the next hop)"
           + (f"; unanswered (kind, function): {unanswered[:6]}" if unanswered else ""))
    notify_481 = [responses.get(cid, [None])[0] for cid, (k, fn, m) in sent.items()
                  if fn == "lc_handle_notify" and k == "NOTIFY load-control" and not subscriber]
    if notify_481:
        c.that(all(code == 481 for code in notify_481),
               f"a load-control NOTIFY without a subscription is answered 481 (RFC 6665 §4.1.3): {notify_481}")
    if subscriber:
        # a NOTIFY matching none of the subscriber's dialogs (To tag and Call-ID are the test's)
        stray = [responses.get(cid, [None])[0] for cid, (k, fn, m) in sent.items()
                 if fn == "lc_handle_notify" and k == "NOTIFY load-control"]
        c.that(all(code == 481 for code in stray),
               f"a load-control NOTIFY matching none of the subscriptions is answered 481 (RFC 6665 §4.1.3): {stray}")
    if not notifier:
        sub_489 = [responses.get(cid, [None])[0] for cid, (k, fn, m) in sent.items()
                   if fn == "lc_handle_subscribe" and k == "SUBSCRIBE load-control"]
        c.that(all(code == 489 for code in sub_489),
               f"a load-control SUBSCRIBE without the notifier role is answered 489 (RFC 6665 §4.2.1.1): {sub_489}")

    answered_rpc, faults = 0, []
    for call in RPCS:
        if not proc.alive():
            faults.append("Kamailio is gone")
            break
        try:
            reply = rpc(rpc_port, *call)
            answered_rpc += 1
            if "error" in reply:
                faults.append(f"{call[0]}: {reply['error'].get('code')}")
        except (socket.timeout, ValueError) as e:
            faults.append(f"{call[0]}: no answer ({e})")
    c.that(answered_rpc == len(RPCS), f"every loadctl.* RPC answered: {answered_rpc} of {len(RPCS)} "
           f"(errors, as expected where a role is off or an argument is bad: {', '.join(faults) or 'none'})")
    try:
        alive_rpc = "result" in rpc(rpc_port, "loadctl.stats")
    except (socket.timeout, ValueError):
        alive_rpc = False
    c.that(alive_rpc, "Kamailio still answers RPC after all of it")

    time.sleep(0.5)
    after = kamailio_pids(proc.popen.pid) if proc.popen.poll() is None else set()
    log = proc.stderr_path.read_text(errors="replace")
    crashes = [line for line in log.splitlines() if CRASH.search(line)]
    c.that(proc.popen.poll() is None and before <= after,
           f"no Kamailio process died: {len(before)} processes before, {len(before & after)} of them after")
    c.that(not crashes, "no crash in Kamailio's log" + (f": {crashes[:3]}" if crashes else ""))
    return c


def policy(run: Run) -> str:
    path = run.path("policy.xml")
    path.write_text(document(0, "full", rate_rule(5)))
    return f'POLICY="{path}"'


def dead_notifier() -> str:
    return f'SUBSCRIBE="sip:lc@127.0.0.1:{free_udp_port()}"'


def notifier_uri() -> str:
    return f'NOTIFIER_URI="sip:lc@127.0.0.1:{free_udp_port()}"'


CONFIGS = {
    "no_role": lambda run: exercise(run, "no_role", []),
    "no_tm": lambda run: exercise(run, "no_tm", ["NO_TM"]),
    "policy_file": lambda run: exercise(run, "policy_file", [policy(run)]),
    "policy_file_no_tm": lambda run: exercise(run, "policy_file_no_tm", [policy(run), "NO_TM"]),
    "subscriber": lambda run: exercise(run, "subscriber", [dead_notifier()], subscriber=True),
    "notifier": lambda run: exercise(run, "notifier", [notifier_uri()], notifier=True),
    "overload_control": lambda run: exercise(run, "overload_control", ["OC"]),
    "every_role": lambda run: exercise(run, "every_role", [policy(run), dead_notifier(), notifier_uri(), "OC"],
                                       notifier=True, subscriber=True),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", action="store_true", help="keep every run directory")
    ap.add_argument("names", nargs="*", help=f"configurations (default all): {', '.join(CONFIGS)}")
    args = ap.parse_args()
    global BUILD
    try:
        BUILD = KamailioBuild()
    except HarnessError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"kamailio functions e2e: {BUILD.label}, module {BUILD.module}")
    return run_tests(CONFIGS, args.names, args.keep, f"kamailio functions e2e (Kamailio {BUILD.version})", prefix="kamfn-")


if __name__ == "__main__":
    sys.exit(main())
