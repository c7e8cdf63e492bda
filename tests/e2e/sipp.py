"""SIPp as the tests run it: its command line with the options every run needs, and what a
finished SIPp left in its working directory.

Every SIPp must be bounded in time, bind ports picked free, and leave counters a test can judge:

- ``sipp_command()`` builds a command line with the options every run needs (loopback
  addresses, explicit media and control ports, ``-buff_size 4194304``, ``-trace_stat``,
  ``-trace_counts``, ``-trace_err``, ``-timeout`` with ``-timeout_error``); ``SippPorts`` picks
  its ports; ``write_injection()`` writes its -inf file (the callee, or the method, per call).
- ``SippOutputs`` reads what a finished SIPp left: the last ``-trace_stat`` row (successful /
  failed calls, retransmissions, ...), the ``-trace_counts`` per-message totals (so the 200 /
  503 / 302 outcomes of scenarios/uac_invite.xml are told apart, ``invite_outcomes()``), and
  the UAS arrival log (admission.read_arrivals); ``last_csv_row()`` and ``response_ms()`` read
  its CSV files and time columns.

Python 3 standard library only.
"""

from __future__ import annotations

import csv
import glob
import math
from dataclasses import dataclass
from pathlib import Path

from admission import read_arrivals
from ports import free_udp_port

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
SIPP_BUFF_SIZE = 4194304


def write_injection(path: Path, rows) -> Path:
    """An -inf file: SEQUENTIAL, one call per row, fields separated by ';' (field0 = callee,
    field1 = method for uac_noninvite.xml). SIPp cycles through the rows."""
    with open(path, "w") as f:
        f.write("SEQUENTIAL\n")
        for row in rows:
            if isinstance(row, str):
                row = [row]
            f.write(";".join(row) + ";\n")
    return path


@dataclass
class SippPorts:
    """The ports one SIPp instance binds: SIP, media (mp and mp+2), control (on 0.0.0.0)."""

    sip: int
    media: int
    control: int

    @staticmethod
    def pick(tcp: bool = False) -> "SippPorts":
        """With `tcp`, the SIP port is free for TCP as well (SIPp run with -t t1 / -t tn)."""
        return SippPorts(free_udp_port(tcp=tcp), free_udp_port(offsets=(0, 1, 2, 3)), free_udp_port())


def sipp_command(
    scenario,
    ports: SippPorts,
    remote=None,
    inf=None,
    rate=None,
    rate_period_ms=None,
    calls=None,
    duration_ms=None,
    max_concurrent=None,
    timeout_s=None,
    logs=True,
    transport=None,
    extra=(),
) -> list:
    """A SIPp command line. `scenario`: a file name under scenarios/ or a path. `remote`:
    "IP:PORT" for a UAC. `transport`: SIPp's -t (t1: every call on one TCP connection, tn: one
    connection per call; default UDP). Output files get fixed names in SIPp's working directory (the Proc's
    directory): stat.csv, errors.log, logs.log (with `logs`), and <scenario>_<pid>_counts.csv.
    """
    scenario = Path(scenario)
    if not scenario.is_absolute() and not scenario.exists():
        scenario = SCENARIOS / scenario
    argv = ["sipp", "-sf", str(scenario), "-i", "127.0.0.1", "-p", ports.sip, "-mp", ports.media, "-cp", ports.control]
    argv += ["-nostdin", "-buff_size", SIPP_BUFF_SIZE, "-f", "5", "-fd", "1"]
    argv += ["-trace_stat", "-stf", "stat.csv", "-trace_counts", "-trace_err", "-error_file", "errors.log"]
    argv += ["-max_log_size", "20000000"]
    if logs:
        argv += ["-trace_logs", "-log_file", "logs.log"]
    if inf is not None:
        argv += ["-inf", str(inf)]
    if rate is not None:
        argv += ["-r", rate]
    if rate_period_ms is not None:
        argv += ["-rp", rate_period_ms]
    if calls is not None:
        argv += ["-m", calls]
    if duration_ms is not None:
        argv += ["-d", duration_ms]
    if max_concurrent is not None:
        argv += ["-l", max_concurrent]
    if timeout_s is not None:
        argv += ["-timeout", f"{int(math.ceil(timeout_s))}s", "-timeout_error"]
    if transport is not None:
        argv += ["-t", transport]  # u1 (default), t1 (one TCP connection), tn (one per call)
    argv += list(extra)
    if remote is not None:
        argv.append(remote)
    return [str(a) for a in argv]


def last_csv_row(path: Path, delimiter=";"):
    with open(path, newline="", errors="replace") as f:
        rows = [r for r in csv.reader(f, delimiter=delimiter) if r]
    if len(rows) < 2:
        return {}
    header, last = rows[0], rows[-1]
    return dict(zip(header, last))


def _num(text):
    try:
        return float(text) if "." in text else int(text)
    except (TypeError, ValueError):
        return None


class SippOutputs:
    """What a SIPp run left in its working directory."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)

    def stat(self) -> dict:
        """The last -trace_stat row: cumulative (C) and period (P) counters by column name,
        e.g. stat()["SuccessfulCall(C)"], ["FailedCall(C)"], ["Retransmissions(C)"]."""
        p = self.dir / "stat.csv"
        if not p.exists():
            return {}
        return {k: (_num(v) if _num(v) is not None else v) for k, v in last_csv_row(p).items()}

    def counts(self) -> dict:
        """The last -trace_counts row: {'<index>_<message>_<Sent|Recv|Retrans|Timeout|Unexp>': n}."""
        files = sorted(glob.glob(str(self.dir / "*_counts.csv")))
        if not files:
            return {}
        row = last_csv_row(Path(files[-1]))
        return {k: int(v) for k, v in row.items() if k not in ("CurrentTime", "ElapsedTime") and v.strip().lstrip("-").isdigit()}

    def message_total(self) -> int:
        """Every SIP message this SIPp sent or received (first copies, retransmissions both
        ways, unexpected ones). Each of them crossed the proxy once."""
        return sum(n for k, n in self.counts().items() if k.endswith(("_Sent", "_Recv", "_Retrans", "_Unexp")))

    def count(self, message: str, column: str = "Recv") -> int:
        """Sum over scenario steps of one message name, e.g. count("503"), count("INVITE", "Sent")."""
        return sum(n for k, n in self.counts().items() if k.split("_", 1)[-1] == f"{message}_{column}")

    def arrivals(self) -> list:
        return read_arrivals(self.dir / "logs.log")

    def errors(self, limit: int = 2000) -> str:
        p = self.dir / "errors.log"
        return p.read_text(errors="replace")[:limit] if p.exists() else ""


def invite_outcomes(uac: SippOutputs) -> dict:
    """Outcomes of scenarios/uac_invite.xml calls, from its -trace_counts and -trace_stat."""
    c = uac.counts()

    def col(step_suffix):
        return sum(n for k, n in c.items() if k.endswith(step_suffix))

    # Step names carry their index: the 302/503 and the first 200 are the INVITE's answers;
    # the second 200 Recv answers the BYE.
    ok_200 = [n for k, n in sorted(c.items(), key=lambda kv: int(kv[0].split("_")[0])) if k.endswith("_200_Recv")]
    st = uac.stat()
    return {
        "invites": col("_INVITE_Sent"),
        "invite_retransmissions": col("_INVITE_Retrans"),
        "answered_200": ok_200[0] if ok_200 else 0,
        "bye_200": ok_200[1] if len(ok_200) > 1 else 0,
        "rejected_503": col("_503_Recv"),
        "redirected_302": col("_302_Recv"),
        "successful_calls": st.get("SuccessfulCall(C)", 0),
        "failed_calls": st.get("FailedCall(C)", 0),
        "retransmissions": st.get("Retransmissions(C)", 0),
        "call_rate": st.get("CallRate(C)", 0),
        "elapsed": st.get("ElapsedTime(C)", ""),
    }


def response_ms(text: str) -> float:
    """A SIPp time column (`HH:MM:SS:mmmuuu`: response times, -trace_counts' ElapsedTime) in
    milliseconds."""
    try:
        h, m, s, frac = text.split(":")
        return (int(h) * 3600 + int(m) * 60 + int(s)) * 1000.0 + int(frac) / 1000.0
    except ValueError:
        return float("nan")
