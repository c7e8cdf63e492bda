//! `loadctl classify --policy FILE [--now T] [--transport X]`: JSON Lines in, decisions out.
//!
//! Input, one request per line: `{"t": 0.25, "method": "INVITE", "from": "...", "to": "...",
//! "ruri": "...", "pai": "...", "target": "...", "transport": "udp", "initial": true,
//! "known_dialog": false, "source": "192.0.2.7", "event": "...", "resource_priority":
//! "ets.0, wps.2", "hold": 0.5}`; only `t` (seconds since the start, non-decreasing) and
//! `method` are required. `initial: false` says the request has a To tag; `known_dialog: true`
//! that it belongs to a dialog the caller keeps (only then is it in-dialog, unless
//! `--to-tag-is-dialog`); `source` is the address it came from, whose Resource-Priority counts
//! only when in `--priority-peers`. `pai` and `resource_priority`
//! are header values, several lines joined with commas (RFC 3261 §7.3.1). Output, one line per
//! request: `{"action": …, "rule": …, "status": …}` plus `"targets"` for redirects; an exempt
//! request (RFC 7200 §5.1, an emergency call, an exempt Resource-Priority namespace) is
//! `{"action": "accept", "rule": null, "status": null}`. A request admitted by a window rule
//! completes at `t + hold` (never, without `hold`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufRead, Write};

use loadctl::compile::Identities;
use loadctl::runtime::{Exemptions, Request, Ticket, Time, Transport, Verdict};
use serde::Deserialize;

#[derive(Deserialize)]
struct Line {
    t: f64,
    method: String,
    from: Option<String>,
    to: Option<String>,
    ruri: Option<String>,
    pai: Option<String>,
    target: Option<String>,
    transport: Option<String>,
    initial: Option<bool>,
    known_dialog: Option<bool>,
    source: Option<String>,
    event: Option<String>,
    resource_priority: Option<String>,
    hold: Option<f64>,
}

/// A window admission waiting for its transaction to end.
struct Pending {
    at_ns: u64,
    seq: u64,
    ticket: Ticket,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ns, self.seq) == (other.at_ns, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_ns, self.seq).cmp(&(other.at_ns, other.seq))
    }
}

fn seconds_to_ns(s: f64) -> Option<u64> {
    (s.is_finite() && (0.0..1e9).contains(&s)).then(|| (s * 1e9).round() as u64)
}

/// Runs the command; returns the exit code.
pub fn run(
    policy: &str,
    now: Option<&str>,
    transport: &str,
    exemptions: &Exemptions,
    numbers: loadctl::uri::SipUserNumbers,
) -> u8 {
    let Some(default_transport) = Transport::parse(transport) else {
        eprintln!("loadctl: --transport {transport:?}: expected udp, tcp, tls, sctp, ws or wss");
        return 2;
    };
    let wall0 = match crate::policy_file::wall_clock(now) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let mut shard = match crate::policy_file::load(policy, numbers)
        .and_then(|(ruleset, _)| crate::policy_file::shard(ruleset, exemptions, numbers))
    {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut pending: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let mut last_t = 0u64;
    let mut seq = 0u64;
    let mut bad = false;
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for (n, line) in stdin.lock().lines().enumerate() {
        let lineno = n + 1;
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("loadctl: standard input: {e}");
                return 2;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let req: Line = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("line {lineno}: {e}");
                bad = true;
                continue;
            }
        };
        let Some(t_ns) = seconds_to_ns(req.t) else {
            eprintln!("line {lineno}: \"t\" must be a number of seconds ≥ 0");
            bad = true;
            continue;
        };
        if t_ns < last_t {
            eprintln!(
                "line {lineno}: \"t\" goes backwards ({} after {})",
                req.t,
                last_t as f64 / 1e9
            );
            bad = true;
            continue;
        }
        let transport = match req.transport.as_deref() {
            None => default_transport,
            Some(name) => match Transport::parse(name) {
                Some(t) => t,
                None => {
                    eprintln!("line {lineno}: unknown transport {name:?}");
                    bad = true;
                    continue;
                }
            },
        };
        let source = match req.source.as_deref().map(str::parse::<std::net::IpAddr>) {
            None => None,
            Some(Ok(a)) => Some(a),
            Some(Err(_)) => {
                eprintln!("line {lineno}: \"source\" must be an IP address");
                bad = true;
                continue;
            }
        };
        let hold_ns = match req.hold.map(seconds_to_ns) {
            Some(None) => {
                eprintln!("line {lineno}: \"hold\" must be a number of seconds ≥ 0");
                bad = true;
                continue;
            }
            Some(Some(h)) => Some(h),
            None => None,
        };
        last_t = t_ns;
        while pending.peek().is_some_and(|p| p.0.at_ns <= t_ns) {
            if let Some(Reverse(p)) = pending.pop() {
                shard.complete(p.ticket);
            }
        }
        let request = Request {
            method: &req.method,
            identities: Identities {
                from: req.from.as_deref(),
                to: req.to.as_deref(),
                request_uri: req.ruri.as_deref(),
                p_asserted_identity: req.pai.as_deref().into(),
                target: req.target.as_deref(),
            },
            transport,
            initial: req.initial.unwrap_or(true),
            known_dialog: req.known_dialog.unwrap_or(false),
            source,
            event: req.event.as_deref(),
            time: Some(Time {
                monotonic_ns: t_ns,
                unix_ns: wall0 + i128::from(t_ns),
            }),
            resource_priority: req.resource_priority.as_deref().into(),
        };
        let decision = shard.classify(&request);
        let mut json = serde_json::json!({
            "action": decision.verdict.as_str(),
            "rule": decision.rule.map(|r| r.id().as_str()),
            "status": decision.status(),
        });
        if decision.verdict == Verdict::Redirect {
            let targets: Vec<&str> = decision.targets().iter().map(|t| t.as_str()).collect();
            json["targets"] = serde_json::json!(targets);
        }
        if let (Some(ticket), Some(hold)) = (decision.ticket, hold_ns) {
            seq += 1;
            pending.push(Reverse(Pending {
                at_ns: t_ns.saturating_add(hold),
                seq,
                ticket,
            }));
        }
        if writeln!(out, "{json}").is_err() {
            return 2;
        }
    }
    if out.flush().is_err() {
        return 2;
    }
    u8::from(bad)
}
