"""RFC 7339 overload-control values as a reader nobody here wrote sees them on the wire
(Wireshark's SIP dissector, through dumpcap and tshark), held against what the loadctl sender
logged it wrote.

A sender's own log can agree with its own parser on a wrong encoding; tshark's decoding of the
Via parameters cannot:

- ``WireCapture``: dumpcap on the loopback for some UDP ports while a test runs, then tshark's
  reading of each SIP message (its oc, oc-validity, oc-seq, oc-algo Via parameters).
- ``oc_sent()`` reads the ``oc-sent|...`` lines a loadctl sender logs (the edge's and the
  example server's --log-oc, the Kamailio module's oc_log); ``oc_wire_vs_sent()`` holds the two
  readings against each other and against RFC 7339 §9's grammar; ``via_oc()``, ``unquote()``
  and ``carries_values()`` read one Via.

Needs dumpcap and tshark (Debian's tshark package) and the right to capture (root).
"""

from __future__ import annotations

import re
import signal
import subprocess
import time

from processes import HarnessError, Run


OC_FIELDS = ("oc", "oc_val", "oc_validity", "oc_seq", "oc_algo")


class WireCapture:
    """dumpcap on the loopback for some UDP ports while a test runs, then Wireshark's reading of
    the RFC 7339 Via parameters in what was sent (tshark's SIP dissector: sip.Via.oc,
    sip.Via.oc_val, sip.Via.oc_validity, sip.Via.oc_seq, sip.Via.oc_algo): a reader of the wire
    nobody here wrote. Needs dumpcap and tshark (Debian's tshark package) and the right to
    capture (root)."""

    def __init__(self, run: Run, name: str, ports):
        """Captures what comes from or goes to `ports` (and decodes them as SIP)."""
        self.path = run.path(name, "capture.pcapng")
        self.ports = list(ports)
        self._rows = None
        bpf = " or ".join(f"udp port {p}" for p in self.ports)
        self.run = run
        self.proc = run.start(name, ["dumpcap", "-q", "-i", "lo", "-f", bpf, "-w", self.path])
        deadline = time.time() + 10
        while not self.path.exists() or self.path.stat().st_size == 0:
            if time.time() > deadline or self.proc.popen.poll() is not None:
                raise HarnessError(f"dumpcap did not start: {self.proc.tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        time.sleep(0.3)  # the last datagrams
        self.run.stop(self.proc, sig=signal.SIGINT)

    def _messages(self) -> list:
        """Every SIP message in the capture as tshark decodes it, read once (one tshark pass:
        the captures hold tens of thousands of datagrams)."""
        if self._rows is None:
            # decode the test's ports as SIP, not only 5060 and what the heuristics catch
            decode = [a for p in self.ports for a in ("-d", f"udp.port=={p},sip")]
            fields = ["frame.time_epoch", "udp.srcport", "udp.dstport", "sip.Method", "sip.Status-Code", "sip.Call-ID",
                      "sip.CSeq", "sip.Via"] + [f"sip.Via.{f}" for f in OC_FIELDS]
            argv = ["tshark", "-r", self.path, *decode, "-Y", "sip", "-T", "fields", "-E", "separator=\t",
                    "-E", "occurrence=f"] + [a for f in fields for a in ("-e", f)]
            res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300)
            if res.returncode != 0:
                raise HarnessError(f"tshark failed: {res.stderr[-2000:]}")
            self._rows = []
            for line in res.stdout.splitlines():
                cells = line.split("\t")
                cells += [""] * (len(fields) - len(cells))
                row = {"t": float(cells[0] or 0), "src": int(cells[1] or 0), "dst": int(cells[2] or 0), "method": cells[3],
                       "status": int(cells[4] or 0), "call_id": cells[5], "cseq": cells[6], "via": cells[7]}
                for f, v in zip(OC_FIELDS, cells[8:]):
                    row[f] = v if v != "" else None
                self._rows.append(row)
        return self._rows

    def requests(self, src_port: int, dst_port: int) -> int:
        """How many SIP requests went from `src_port` to `dst_port`."""
        return sum(1 for m in self._messages() if m["src"] == src_port and m["dst"] == dst_port and m["method"])

    def top_via_oc(self, src_port: int, dst_port: int, requests: bool = False) -> list:
        """Every SIP response (`requests`: request) from 127.0.0.1:`src_port` to `dst_port`
        with `oc` in a Via, as tshark decodes it: dicts with call_id, cseq, status (0 for a
        request), its capture time t, the Via's text (via) and OC_FIELDS (tshark's first
        occurrence, the top Via's when it has them; None when absent; `oc` is "oc" for the
        parameter without a value)."""
        return [m for m in self._messages() if m["src"] == src_port and m["dst"] == dst_port
                and bool(m["method"]) == requests and m["oc"] is not None]


_OC_PARAM = re.compile(r';\s*(oc-validity|oc-seq|oc-algo|oc)\s*(?:=\s*("[^"]*"|[^;,\s]*))?(?=\s*(?:[;,]|$))', re.IGNORECASE)


def unquote(v):
    """A Via parameter value without its quotes; None for an empty or absent one."""
    return None if v in (None, "", "<null>") else v.strip().strip('"')


def carries_values(row: dict) -> bool:
    """Whether a WireCapture row's Via carries a server's values: `oc` with a value (a bare
    `oc`, tshark's "oc", is a client's offer, or one echoed back)."""
    return unquote(row["oc_val"]) not in (None, "oc")


def via_oc(via: str) -> dict:
    """The oc_val, oc_validity, oc_seq and oc_algo of the first Via entry in `via` (RFC 7339 §9;
    a quoted oc-algo may hold commas), None when absent, quotes removed."""
    params = {}
    for name, value in _OC_PARAM.findall(via):
        params.setdefault(name.lower(), value)
    return {"oc_val": unquote(params.get("oc")), "oc_validity": unquote(params.get("oc-validity")),
            "oc_seq": unquote(params.get("oc-seq")), "oc_algo": unquote(params.get("oc-algo")), "oc": "oc" in params}


def oc_sent(text: str) -> list:
    """What a loadctl sender logged it wrote, from its log text: the lines
    `oc-sent|CLIENT|CALL-ID|CSEQ|STATUS|VIA` (the edge's and the example server's --log-oc, the
    Kamailio module's oc_log) as dicts with client, call_id, cseq, status and the oc_val,
    oc_validity, oc_seq, oc_algo of VIA (None when absent; quotes removed), in log order."""
    rows = []
    for line in text.splitlines():
        _, sep, rest = line.partition("oc-sent|")
        f = rest.split("|", 4)
        if not sep or len(f) != 5:
            continue
        rows.append({"client": f[0], "call_id": f[1], "cseq": f[2], "status": int(f[3] or 0), **via_oc(f[4])})
    return rows


def oc_wire_vs_sent(c, label: str, wire: list, sent: list) -> None:
    """Holds tshark's decoding of the responses a loadctl sender sent (WireCapture.top_via_oc)
    against what it logged it wrote (oc_sent): every logged response is on the wire with the
    same oc, oc-validity, oc-seq and oc-algo, and every response on the wire was logged or is a
    copy of one (a stateful proxy retransmits a reply as it sent it, without logging again).
    Matched per Call-ID, CSeq and status, in order. A response whose Via has `oc` without a
    value carries no values: the client's offer echoed, as Kamailio's tm does in the 100 Trying
    it sends itself (RFC 7339 §5.11 lets the values come in the first non-100 response); only a
    100 may be such, or a response in the first 0.2 s of the run: each Kamailio process runs its
    own server, which knows a client from its first request of that client, and a reply may
    reach a process before any request did. Then each value against RFC 7339 §9's grammar: oc-value and oc-validity
    1*DIGIT, oc-seq 1*12DIGIT "." 1*5DIGIT."""
    start = min((w["t"] for w in wire), default=0.0)
    echoed = [w for w in wire if not carries_values(w)]
    wire = [w for w in wire if carries_values(w)]
    by_status = {}
    for w in echoed:
        by_status[w["status"]] = by_status.get(w["status"], 0) + 1
    late = [w for w in echoed if w["status"] != 100 and w["t"] > start + 0.2]
    c.that(not late, f"{label}: responses with the offer echoed and no values: {by_status or 'none'}; other than 100 Trying "
           f"(RFC 7339 §5.11) only in the first 0.2 s ({len(late)} later{': ' + repr(late[:2]) if late else ''})")
    keyed = {}
    for r in sent:
        keyed.setdefault((r["call_id"], r["cseq"], r["status"]), []).append(r)
    fields = ("oc_val", "oc_validity", "oc_seq", "oc_algo")
    taken, copies, unlogged, differ = {}, 0, [], []
    for w in wire:
        key = (w["call_id"], w["cseq"], w["status"])
        logged = keyed.get(key)
        if not logged:
            unlogged.append(w)
            continue
        k = taken.get(key, 0)
        if k >= len(logged):
            copies += 1
            k = len(logged)
        else:
            taken[key] = k + 1
        ref = logged[min(k, len(logged) - 1)]
        if tuple(unquote(w[f]) for f in fields) != tuple(ref[f] for f in fields):
            differ.append((w, ref))
    on_wire = sum(taken.values())
    c.that(len(sent) >= 50 and on_wire == len(sent) and not unlogged,
           f"{label}: tshark decoded oc values in {len(wire)} responses; {on_wire} of the {len(sent)} the sender logged are among "
           f"them, {copies} copies, {len(unlogged)} not logged{': ' + repr(unlogged[:2]) if unlogged else ''}")
    c.that(not differ, f"{label}: tshark reads the oc, oc-validity, oc-seq and oc-algo the sender logged in every one "
           f"({len(differ)} differ{': ' + repr(differ[:2]) if differ else ''})")
    vals = sorted({int(r["oc_val"]) for r in sent if (r["oc_val"] or "").isdigit()})
    c.lines.append(f"info  {label}: oc values sent {vals[:1] + vals[-1:] if vals else []} (lowest, highest; {len(vals)} distinct), "
                   f"{len({r['oc_seq'] for r in sent})} oc-seq, oc-algo {sorted({r['oc_algo'] or '' for r in sent})}, "
                   f"oc-validity {sorted({r['oc_validity'] or '' for r in sent})[:4]}")
    bad = [r for r in sent if not (re.fullmatch(r"\d+", r["oc_val"] or "") and re.fullmatch(r"\d+", r["oc_validity"] or "")
                                   and re.fullmatch(r"\d{1,12}\.\d{1,5}", r["oc_seq"] or ""))]
    c.that(not bad, f"{label}: every value sent is in RFC 7339 §9's grammar ({len(bad)} not{': ' + repr(bad[:2]) if bad else ''})")
