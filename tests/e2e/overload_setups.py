"""The overload-control setups that several suites run, with their figures: the example server
of μ messages/s offered three times its capacity, and a SIPp UAS answering oc=50 (loss) behind
any proxy.

The server and its load go through the edge (test_overload.py) and through Kamailio's
dispatcher (test_kamailio_oc_interop.py); the UAS's phases are played behind the edge
(test_overload.py) and behind the Kamailio module (test_kamailio_oc.py). One definition of each,
so that the results compare. ``stats_of()`` reads the counters the edge and the example server
print.

Python 3 standard library only.
"""

from __future__ import annotations

from pathlib import Path

from checks import Checks
from ports import wait_udp_port
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


def stats_of(proc: Proc) -> dict:
    """The `name value` lines a program printed to stdout (its SIGUSR1 / exit counters)."""
    out = {}
    for line in proc.stdout_path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and not parts[0].startswith("#"):
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


# ---------------------------------------------------------------------------------------------
# a SIPp UAS answering oc=50 (loss) behind a proxy

RATE = 50  # calls/s offered
WARM_CALLS = 300  # 6 s at 50/s: the edge samples its category mix over 5 s (RFC 7339 §7.2)
ON_CALLS = 250  # ~10 s at the 25/s that get through
VALIDITY_MS = 1000


def loss_feedback_through(run: Run, c: Checks, start_proxy) -> dict:
    """SIPp UAC at RATE calls/s → the proxy `start_proxy(uas_port)` starts (it returns the
    proxy's port) → a SIPp UAS answering with the phases of scenarios/uas_oc.xml; checks the
    arrival rate at the UAS in each phase. Returns the UAC's outcome counts and the phase
    times."""
    uas_ports = SippPorts.pick()
    # Warm-up: "oc=0;oc-validity=0" (§5.1: supported, not overloaded); then oc=50 with a new
    # oc-seq per answer; then answers without feedback (no `oc` parameter), so the last value
    # runs out after its validity.
    rows = [["oc", "0", "0", "1.0", "loss"]] * WARM_CALLS
    rows += [["oc", "50", str(VALIDITY_MS), f"{k + 2}.0", "loss"] for k in range(ON_CALLS)]
    rows += [["x-oc", "50", str(VALIDITY_MS), f"{ON_CALLS + 2}.0", "loss"]] * 1000
    uas_inf = write_injection(run.path("uas.csv"), rows)
    uas = run.start("uas", sipp_command("uas_oc.xml", uas_ports, inf=uas_inf, timeout_s=80))
    wait_udp_port(uas_ports.sip, proc=uas)
    port = start_proxy(uas_ports.sip)
    total = 1250
    inf = write_injection(run.path("callees.csv"), [CALLEE])
    uac = run.start("uac", sipp_command("uac_invite_only.xml", SippPorts.pick(), remote=f"127.0.0.1:{port}", inf=inf, rate=RATE,
                                        calls=total, timeout_s=60))
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
    # §7.2: every decided request is an INVITE (reducible), so oc=50 sheds half of them.
    c.passed_share("oc=50 in force", ts, shed, on_start + 0.5, on_end, 0.5, 0.5 * 0.15)
    # §4.3: once the validity passed without new values, "overload control is not in effect".
    after = on_end + VALIDITY_MS / 1000.0 + 0.3
    c.passed_share("after oc-validity", ts, shed, after, ts[-20], 1.0, 0.0)
    failed = SippOutputs(uac.cwd).stat().get("FailedCall(C)", -1)
    c.that(failed == 0, f"no UAC call failed ({failed})")
    stray = SippOutputs(uas.cwd).counts().get("0_ACK_Recv", -1)
    c.that(stray == 0, f"the ACKs to the proxy's 503s stopped at the proxy: {stray} reached the UAS")
    return {"shed": shed_uac}
