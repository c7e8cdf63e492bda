"""The overload-control setups that several suites run, with their figures: the example server
of μ messages/s offered three times its capacity, and a SIPp UAS answering oc=50 (loss) behind
any proxy, for calls of an INVITE and its ACK and for whole calls.

The server and its load go through the edge (test_overload.py) and through Kamailio's
dispatcher (test_kamailio_oc_interop.py); the UAS's phases are played behind the edge
(test_overload.py) and behind the Kamailio module (test_kamailio_oc.py). One definition of each,
so that the results compare. ``stats_of()`` reads the counters the edge and the example server
print.

Python 3 standard library only.
"""

from __future__ import annotations

from pathlib import Path

from admission import count_in
from checks import Checks
from edge_proc import signal_dump
from ports import wait_tcp_port, wait_udp_port
from processes import Proc, Run
from sipp import SippOutputs, SippPorts, sipp_command, write_injection

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SERVER = ROOT / "target" / "server"
CALLEE = "+15550001234"


# ---------------------------------------------------------------------------------------------
# the example server, offered three times its capacity

MU = 300.0  # messages/s the server serves: INVITE, ACK and BYE of a call, 100 calls/s
CALLS_CAPACITY = MU / 3.0
OFFERED = 3.0 * CALLS_CAPACITY
WINDOW_S = 20


def name_values(text: str) -> dict:
    """The `name value` lines of a counter dump."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not parts[0].startswith("#"):
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


def stats_of(proc: Proc) -> dict:
    """The counters a program printed to stdout, the last value of each (its exit counters)."""
    return name_values(proc.stdout_path.read_text(errors="replace"))


def stats_now(proc: Proc) -> dict:
    """The counters a running program prints on SIGUSR1, once the dump is whole."""
    return name_values(signal_dump(proc))


# ---------------------------------------------------------------------------------------------
# a SIPp UAS answering oc=50 (loss) behind a proxy

RATE = 50  # calls/s offered
WARM_CALLS = 300  # 6 s at 50/s, nothing shed (the client samples its mix meanwhile, RFC 7339 §7.2)
ON_CALLS = 200  # ~12 s at the 17/s that get through
VALIDITY_MS = 1000


def loss_feedback_through(run: Run, c: Checks, start_proxy, transport: str = None) -> dict:
    """SIPp UAC at RATE calls/s → the proxy `start_proxy(uas_port)` starts (it returns the
    port the UAC sends to) → a SIPp UAS answering with the phases of scenarios/uas_oc.xml;
    checks the arrival rate at the UAS in each phase. `transport`: SIPp's -t for both (t1: one
    TCP connection each; the proxy's callback may put TLS in between). Returns the UAC's outcome
    counts and the phase times."""
    uas_ports = SippPorts.pick(tcp=bool(transport))
    # Warm-up: "oc=0;oc-validity=0" (§5.1: supported, not overloaded); then oc=50 with a new
    # oc-seq per answer; then answers without feedback (no `oc` parameter), so the last value
    # runs out after its validity.
    rows = [["oc", "0", "0", "1.0", "loss"]] * WARM_CALLS
    rows += [["oc", "50", str(VALIDITY_MS), f"{k + 2}.0", "loss"] for k in range(ON_CALLS)]
    rows += [["x-oc", "50", str(VALIDITY_MS), f"{ON_CALLS + 2}.0", "loss"]] * 1000
    uas_inf = write_injection(run.path("uas.csv"), rows)
    uas = run.start("uas", sipp_command("uas_oc.xml", uas_ports, inf=uas_inf, timeout_s=80, transport=transport))
    (wait_tcp_port if transport else wait_udp_port)(uas_ports.sip, proc=uas)
    port = start_proxy(uas_ports.sip)
    total = 1250
    inf = write_injection(run.path("callees.csv"), [CALLEE])
    uac = run.start("uac", sipp_command("uac_invite_only.xml", SippPorts.pick(tcp=bool(transport)), remote=f"127.0.0.1:{port}", inf=inf,
                                        rate=RATE, calls=total, timeout_s=60, transport=transport))
    uac.wait(timeout=70)
    ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
    shed = [a.t for a in SippOutputs(uac.cwd).arrivals()]
    counts = SippOutputs(uac.cwd).counts()
    shed_uac = sum(n for k, n in counts.items() if k.endswith("_503_Recv"))
    c.that(len(ts) > WARM_CALLS + ON_CALLS + 100, f"{len(ts)} INVITEs reached the UAS")
    c.that(len(shed) == shed_uac, f"the UAC logged when each of its {shed_uac} 503s came back: {len(shed)}")
    if len(ts) <= WARM_CALLS + ON_CALLS + 100:
        return {"shed": shed_uac}
    on_start, on_end = ts[WARM_CALLS], ts[WARM_CALLS + ON_CALLS - 1]
    # Judged on the share of the INVITEs decided in each phase that passed, not on rates at the
    # UAS: the loss algorithm sheds a share of what is offered (RFC 7339 §7: the neighbour
    # "rejects 10% of the traffic originally destined for that server"), and a share does not
    # depend on how evenly SIPp offered the calls.
    # Nothing shed before the first oc=50 (RFC 7339 §5: "If overload controls are not currently
    # active ... the SIP client sends the SIP message to the server").
    c.passed_share("warm-up (oc=0, oc-validity=0)", ts, shed, ts[20], ts[WARM_CALLS - 20], 1.0, 0.0)
    # §7.2: the INVITEs are the first category, the ACKs of the calls answered the second; the
    # overall reduction of the requests offered to the UAS (INVITEs, ACKs of admitted calls)
    # must be oc: 1 − 2n / (2n + s) = 50 % ± 3 points, n passed and s shed (n / (n + s) = 1/3).
    n, s = count_in(ts, on_start + 0.5, on_end), count_in(shed, on_start + 0.5, on_end)
    reduction = 1.0 - 2 * n / (2 * n + s) if n + s else 0.0
    c.that(n + s >= 100 and abs(reduction - 0.5) <= 0.03,
           f"oc=50 in force: {n} INVITEs passed and {s} shed: overall reduction {reduction:.1%} of the {2 * n + s} "
           f"INVITEs and ACKs offered, expected 50% ± 3 points")
    # §4.3: once the validity passed without new values, "overload control is not in effect".
    after = on_end + VALIDITY_MS / 1000.0 + 0.3
    c.passed_share("after oc-validity", ts, shed, after, ts[-20], 1.0, 0.0)
    failed = SippOutputs(uac.cwd).stat().get("FailedCall(C)", -1)
    c.that(failed == 0, f"no UAC call failed ({failed})")
    stray = SippOutputs(uas.cwd).counts().get("0_ACK_Recv", -1)
    c.that(stray == 0, f"the ACKs to the proxy's 503s stopped at the proxy: {stray} reached the UAS")
    return {"shed": shed_uac}


# ---------------------------------------------------------------------------------------------
# whole calls (INVITE, ACK, BYE) through a proxy to a UAS answering oc (loss)

MIX_CALLS = 1250  # 25 s at 50/s
MIX_HOLD_MS = 1000  # the BYE a second after the ACK


def loss_call_mix_through(run: Run, c: Checks, start_proxy, oc: int = 50) -> dict:
    """SIPp UAC calls at RATE/s (INVITE, ACK, BYE after MIX_HOLD_MS) → the proxy
    `start_proxy(uas_port)` starts → a SIPp UAS answering each INVITE and BYE 200 with
    `oc=OC;oc-algo="loss"` (a new oc-seq per call, valid 2 s: in force throughout).

    RFC 7339 §7.2 converts oc onto the first category's share of the requests offered, ACK and
    BYE (of the calls admitted) being the second: the overall reduction of the requests offered
    to the UAS — INVITEs, and the ACKs and BYEs of the calls answered 200 — must be oc % ± 3
    points, which with an ACK and a BYE per admitted call is f = (1 − p) / (1 + 2p) of the
    INVITEs (p = oc / 100: 25 % at oc=50). The admissions must be steady: the share of the
    INVITEs passed in every second after the first three within ± 8 points of f."""
    uas_ports = SippPorts.pick()
    rows = [["oc", str(oc), "2000", f"{k + 1}.0", "loss"] for k in range(MIX_CALLS)]
    uas = run.start("uas", sipp_command("uas_oc_calls.xml", uas_ports, inf=write_injection(run.path("uas.csv"), rows), timeout_s=90))
    wait_udp_port(uas_ports.sip, proc=uas)
    port = start_proxy(uas_ports.sip)
    inf = write_injection(run.path("callees.csv"), [CALLEE])
    uac = run.start("uac", sipp_command("uac_invite.xml", SippPorts.pick(), remote=f"127.0.0.1:{port}", inf=inf, rate=RATE,
                                        calls=MIX_CALLS, duration_ms=MIX_HOLD_MS, timeout_s=70))
    uac.wait(timeout=90)
    p = oc / 100.0
    f = (1.0 - p) / (1.0 + 2.0 * p)
    ts = [a.t for a in SippOutputs(uas.cwd).arrivals()]
    shed = [a.t for a in SippOutputs(uac.cwd).arrivals()]
    sent = SippOutputs(uac.cwd).counts()
    got = SippOutputs(uas.cwd).counts()
    invites = sum(n for k, n in sent.items() if k.endswith("_INVITE_Sent"))
    answered = [n for k, n in sorted(sent.items(), key=lambda kv: int(kv[0].split("_")[0])) if k.endswith("_200_Recv")]
    answered = answered[0] if answered else 0
    # Offered to the UAS: every INVITE, and the ACK and BYE of every call answered 200 (the
    # ACKs to the proxy's 503s end at the proxy). Forwarded: what reached the UAS.
    offered = invites + 2 * answered
    forwarded = sum(n for k, n in got.items() if k.endswith(("_INVITE_Recv", "_ACK_Recv", "_BYE_Recv")))
    reduction = 1.0 - forwarded / offered if offered else 0.0
    c.that(invites == MIX_CALLS and len(ts) == answered,
           f"{invites} INVITEs sent, {len(ts)} reached the UAS, {answered} answered 200, {len(shed)} shed")
    c.that(abs(reduction - p) <= 0.03,
           f"overall reduction {reduction:.1%} ({forwarded} of {offered} requests reached the UAS), expected {p:.0%} ± 3 points")
    if ts and shed:
        start = min(ts[0], shed[0])
        end = max(ts[-1], shed[-1])
        seconds = [(start + k, start + k + 1) for k in range(3, int(end - start))]
        shares = []
        for a, b in seconds:
            n, s = count_in(ts, a, b), count_in(shed, a, b)
            shares.append(n / (n + s) if n + s else 0.0)
        steady = shares and all(abs(x - f) <= 0.08 for x in shares)
        c.that(bool(steady), f"INVITEs passed per second after the first three: {', '.join(f'{x:.0%}' for x in shares)}, "
                             f"expected {f:.0%} ± 8 points each")
    failed = SippOutputs(uac.cwd).stat().get("FailedCall(C)", -1)
    c.that(failed == 0, f"no UAC call failed ({failed})")
    return {"shed": len(shed), "reduction": reduction}
