//! `loadctl notifier`: an RFC 7200 notifier on a UDP socket, for a protected server that has no
//! SIP stack of its own to run one (and for the end-to-end tests).
//!
//! It answers SUBSCRIBEs for the `load-control` package and pushes a policy to every
//! subscriber through the engine's [`Notifier`] and its wire codec: one policy for all
//! (`--policy FILE`), or with `--capacity R --template FILE` the allocator's share of R
//! requests/s for each subscriber (the template's first rule with the share as its rate), so
//! that all subscribers together admit R. Shares follow demand (see
//! `loadctl::event::allocator`) when something in the traffic path reports it: with
//! `--observe IP:PORT` the notifier reads UDP datagrams of lines `SUBSCRIBER-URI COUNT` (the
//! requests of the class that arrived from that subscriber since its previous report; the
//! protected server, a tap or a script reading the server's counters sends them). Without
//! reports the split is blind: every subscriber counts as wanting more than it has, so all get
//! equal shares, re-split whenever one comes or goes. NOTIFYs are retransmitted over UDP until answered (T1 doubling up to T2, for
//! 64·T1). After `--duration` seconds it ends every subscription (`terminated`) and exits.
//!
//! Who may subscribe (RFC 7200 §4.6: "If the identity of the subscriber sending the SUBSCRIBE
//! request is not allowed to receive load-filtering policies, the notifier MUST return a 403
//! "Forbidden" response"): the SUBSCRIBE's From URI is checked against the entries of
//! `--allow` (repeatable) and `--allow-file` (one entry per line, `#` starts a comment) — a
//! SIP URI (`sip:proxy@192.0.2.7:5060`, equal as RFC 3261 §19.1.4 compares URIs), a host
//! (`p1.example.net`, `192.0.2.7`) or a domain (`example.net` or `*.example.net`: that host
//! and every host under it). Everyone else gets 403. With no entry it refuses to start unless
//! `--allow-any` says that every subscriber is welcome (a trust domain that authenticates at
//! the SIP layer). NOTIFYs go to the subscriber's Contact (or its first Record-Route).

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use loadctl::event::allocator::AllocatorConfig;
use loadctl::event::notifier::{Authorization, Notifier, NotifierConfig};
use loadctl::event::wire::{self, Via};
use loadctl::policy::{Limits, Rule, Uri};

const T1_NS: u64 = 500_000_000;
const T2_NS: u64 = 4_000_000_000;
const GIVE_UP_NS: u64 = 64 * T1_NS;

/// Options of `loadctl notifier`.
pub struct Options<'a> {
    /// `IP:PORT` to listen on.
    pub listen: &'a str,
    /// This notifier's URI (default `sip:loadctl@LISTEN`).
    pub uri: Option<&'a str>,
    /// One policy for every subscriber.
    pub policy: Option<&'a str>,
    /// The capacity (requests/s) the allocator shares.
    pub capacity: Option<f64>,
    /// The rule whose rate the allocator sets per subscriber.
    pub template: Option<&'a str>,
    /// How long to run, seconds.
    pub duration: f64,
    /// Least spacing of NOTIFYs on one subscription, milliseconds.
    pub pacing_ms: u64,
    /// Where demand reports arrive (`IP:PORT`, UDP).
    pub observe: Option<&'a str>,
    /// Subscribers allowed (`--allow`): SIP URIs, hosts or domains.
    pub allow: &'a [String],
    /// Files of allowed subscribers, one entry per line (`--allow-file`).
    pub allow_files: &'a [String],
    /// Accept every subscriber (`--allow-any`).
    pub allow_any: bool,
}

/// Checks one allow-list entry: a SIP or SIPS URI, or a host / domain name / IP address
/// (optionally `*.` before a domain). Returns it as the notifier compares it.
pub fn allow_entry(entry: &str) -> Result<String, String> {
    let e = entry.trim();
    if e.is_empty() {
        return Err("empty entry".into());
    }
    let lower = e.to_ascii_lowercase();
    if lower.starts_with("sip:") || lower.starts_with("sips:") {
        return Uri::new(e)
            .map(|_| e.to_owned())
            .map_err(|why| format!("{e:?} is not a SIP URI: {why}"));
    }
    let host = e.strip_prefix("*.").unwrap_or(e);
    let ipv6 = host.starts_with('[') && host.ends_with(']') && host.len() > 2;
    let name = !host.is_empty()
        && !host.starts_with('.')
        && !host.ends_with('.')
        && !host.contains("..")
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if ipv6
        && host[1..host.len() - 1]
            .parse::<std::net::Ipv6Addr>()
            .is_ok()
        || name
    {
        Ok(e.to_owned())
    } else {
        Err(format!(
            "{e:?} is neither a sip: URI nor a host or domain name"
        ))
    }
}

/// Reads an allow-list file: one entry per line; `#` starts a comment; blank lines skipped.
/// The error names the line.
pub fn read_allow_file(path: &str, text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        out.push(allow_entry(line).map_err(|e| format!("{path}:{}: {e}", n + 1))?);
    }
    Ok(out)
}

/// The notifier's [`Authorization`] from the options, or the exit code after saying why not.
fn authorization(o: &Options<'_>) -> Result<Authorization, u8> {
    let mut entries = Vec::new();
    for a in o.allow {
        match allow_entry(a) {
            Ok(e) => entries.push(e),
            Err(e) => {
                eprintln!("loadctl notifier: --allow {e}");
                return Err(2);
            }
        }
    }
    for path in o.allow_files {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("loadctl notifier: {path}: {e}");
                return Err(2);
            }
        };
        match read_allow_file(path, &text) {
            Ok(more) => entries.extend(more),
            Err(e) => {
                eprintln!("loadctl notifier: {e}");
                return Err(2);
            }
        }
    }
    match (o.allow_any, entries.is_empty()) {
        (true, true) => Ok(Authorization::Any),
        (true, false) => {
            eprintln!("loadctl notifier: --allow-any and an allow-list exclude each other");
            Err(2)
        }
        (false, true) if o.allow.is_empty() && o.allow_files.is_empty() => {
            eprintln!(
                "loadctl notifier: say who may subscribe: --allow ENTRY, --allow-file FILE, or --allow-any (RFC 7200 §4.6: others get 403)"
            );
            Err(2)
        }
        // Files with no entry: nobody may subscribe (every SUBSCRIBE gets 403).
        (false, _) => Ok(Authorization::Domains(entries)),
    }
}

/// A NOTIFY waiting for its response.
struct Outstanding {
    bytes: Vec<u8>,
    to: SocketAddr,
    started: u64,
    next: u64,
    interval: u64,
}

fn read_rules(path: &str) -> Result<Vec<Arc<Rule>>, u8> {
    let bytes = crate::read_input(path).map_err(|e| {
        eprintln!("loadctl: {path}: {e}");
        2u8
    })?;
    let doc = loadctl::policy::read(&bytes, &Limits::default()).map_err(|e| {
        eprintln!("{path}:{e}");
        1u8
    })?;
    crate::policy_file::print_warnings(path, &doc.warnings);
    doc.ruleset.rules().map(<[_]>::to_vec).ok_or_else(|| {
        eprintln!("loadctl: {path}: a partial document cannot be pushed as a policy");
        1u8
    })
}

/// The socket address a SIP URI's host:port names (port 5060 when absent).
fn address_of(uri: &Uri) -> Option<SocketAddr> {
    let text = uri.as_str();
    let rest = text.split_once(':')?.1;
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = host.split([';', '?', '>']).next()?;
    let target = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5060")
    };
    target.to_socket_addrs().ok()?.next()
}

struct Server {
    sock: UdpSocket,
    sent_by: String,
    contact: String,
    notifier: Notifier,
    /// Demand reports (`--observe`), non-blocking.
    observe: Option<UdpSocket>,
    /// The targets last printed.
    shown: Vec<(String, f64)>,
    outstanding: HashMap<String, Outstanding>,
    branches: u64,
    start: Instant,
}

impl Server {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn send(&self, bytes: &[u8], to: SocketAddr) {
        if let Err(e) = self.sock.send_to(bytes, to) {
            eprintln!("loadctl notifier: send to {to}: {e}");
        }
    }

    /// Sends every NOTIFY the notifier has ready.
    fn transmit(&mut self) {
        while let Some(req) = self.notifier.poll_transmit() {
            self.branches += 1;
            let branch = format!("z9hG4bKlcn{:x}-{}", std::process::id(), self.branches);
            let mut bytes = Vec::with_capacity(1024 + req.body.len());
            let via = Via {
                transport: "UDP",
                sent_by: &self.sent_by,
                branch: &branch,
            };
            wire::write_request(&req, &via, &self.contact, &mut bytes);
            // The subscriber's remote target, or the first proxy of the route set.
            let Some(to) = address_of(req.next_hop()) else {
                eprintln!(
                    "loadctl notifier: no address for {}",
                    req.next_hop().as_str()
                );
                continue;
            };
            self.send(&bytes, to);
            let now = self.now();
            self.outstanding.insert(
                branch,
                Outstanding {
                    bytes,
                    to,
                    started: now,
                    next: now + T1_NS,
                    interval: T1_NS,
                },
            );
        }
    }

    /// Logs what the notifier reports, and each subscriber's target share when one changed.
    fn events(&mut self) {
        while let Some(event) = self.notifier.poll_event() {
            eprintln!("loadctl notifier: {event:?}");
        }
        let shares: Vec<(String, f64)> = self
            .notifier
            .shares()
            .into_iter()
            .map(|r| (r.subscriber, r.target))
            .collect();
        if shares != self.shown {
            for r in self.notifier.shares() {
                let usage = r
                    .usage
                    .map_or_else(|| "unmeasured".to_owned(), |u| format!("{u:.1}/s"));
                eprintln!(
                    "loadctl notifier: {} share {:.3}/s (demand {usage}{})",
                    r.subscriber,
                    r.target,
                    if r.constrained { ", constrained" } else { "" }
                );
            }
            self.shown = shares;
        }
    }

    /// Reads the demand reports waiting on the `--observe` socket.
    fn observations(&mut self) {
        let Some(sock) = &self.observe else {
            return;
        };
        let mut buf = [0u8; 4096];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let now = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            for line in String::from_utf8_lossy(&buf[..n]).lines() {
                match parse_report(line) {
                    Ok(None) => {}
                    Ok(Some((uri, count))) => {
                        if !self.notifier.observe(now, &uri, count) {
                            eprintln!(
                                "loadctl notifier: report from {from}: no subscription of {uri}"
                            );
                        }
                    }
                    Err(e) => eprintln!("loadctl notifier: report from {from}: {e}"),
                }
            }
        }
    }

    fn receive(&mut self, bytes: &[u8], from: SocketAddr) {
        let raw = match wire::scan(bytes) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("loadctl notifier: from {from}: {e}");
                return;
            }
        };
        let now = self.now();
        if raw.status == 0 && raw.method == b"SUBSCRIBE" {
            match raw.request() {
                Ok(req) => {
                    let resp = self.notifier.handle_subscribe(now, &req);
                    let mut out = Vec::with_capacity(512);
                    let contact = resp.is_success().then_some(self.contact.as_str());
                    wire::write_response(&resp, &raw, contact, &mut out);
                    self.send(&out, from);
                }
                Err(e) => eprintln!("loadctl notifier: SUBSCRIBE from {from}: {e}"),
            }
        } else if raw.status >= 200 && raw.method == b"NOTIFY" {
            let branch = raw
                .top_branch()
                .map(|b| String::from_utf8_lossy(b).into_owned());
            if let Some(b) = branch
                && self.outstanding.remove(&b).is_some()
            {
                match raw.response() {
                    Ok(resp) => self.notifier.handle_response(now, &resp),
                    Err(e) => eprintln!("loadctl notifier: response from {from}: {e}"),
                }
            }
        }
    }

    /// Retransmits NOTIFYs still unanswered; forgets those given up on (the notifier's own
    /// transaction timeout ends their subscriptions).
    fn retransmit(&mut self) {
        let now = self.now();
        let mut resend = Vec::new();
        self.outstanding.retain(|_, o| {
            if now - o.started >= GIVE_UP_NS {
                return false;
            }
            if now >= o.next {
                resend.push((o.bytes.clone(), o.to));
                o.interval = (o.interval * 2).min(T2_NS);
                o.next = now + o.interval;
            }
            true
        });
        for (bytes, to) in resend {
            self.send(&bytes, to);
        }
    }

    fn step(&mut self, until: u64, buf: &mut [u8]) {
        let now = self.now();
        if let Some(due) = self.notifier.poll_timeout()
            && due <= now
        {
            self.notifier.handle_timeout(now);
        }
        self.retransmit();
        self.observations();
        self.transmit();
        self.events();
        let mut next = until.min(now + 50_000_000);
        if let Some(due) = self.notifier.poll_timeout() {
            next = next.min(due);
        }
        if let Some(o) = self.outstanding.values().map(|o| o.next).min() {
            next = next.min(o);
        }
        let wait = Duration::from_nanos(next.saturating_sub(self.now()).max(1_000_000));
        if self.sock.set_read_timeout(Some(wait)).is_err() {
            return;
        }
        if let Ok((n, from)) = self.sock.recv_from(buf) {
            self.receive(&buf[..n], from);
        }
    }
}

/// Runs the notifier; returns the exit code.
pub fn run(o: &Options<'_>) -> u8 {
    let sock = match UdpSocket::bind(o.listen) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("loadctl notifier: cannot listen on {}: {e}", o.listen);
            return 2;
        }
    };
    let sent_by = sock
        .local_addr()
        .map_or_else(|_| o.listen.to_owned(), |a| a.to_string());
    let uri_text = o
        .uri
        .map_or_else(|| format!("sip:loadctl@{sent_by}"), str::to_owned);
    let Ok(uri) = Uri::new(&uri_text) else {
        eprintln!("loadctl notifier: --uri {uri_text:?} is not a URI");
        return 2;
    };
    let authorization = match authorization(o) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match &authorization {
        Authorization::Any => eprintln!("loadctl notifier: every subscriber is accepted"),
        Authorization::Domains(list) => {
            eprintln!("loadctl notifier: subscribers allowed: {}", list.join(" "))
        }
    }
    let mut config = NotifierConfig::new(uri, "lcn", authorization);
    config.pacing_ns = o.pacing_ms.saturating_mul(1_000_000);
    let mut notifier = Notifier::new(config);
    match (o.policy, o.capacity, o.template) {
        (Some(path), None, None) => match read_rules(path) {
            Ok(rules) => notifier.set_policy(0, Some(rules)),
            Err(code) => return code,
        },
        (None, Some(capacity), Some(path)) => {
            let rules = match read_rules(path) {
                Ok(rules) => rules,
                Err(code) => return code,
            };
            let Some(rule) = rules.first() else {
                eprintln!("loadctl notifier: {path}: the template has no rule");
                return 1;
            };
            if let Err(e) =
                notifier.set_capacity(0, capacity, (**rule).clone(), AllocatorConfig::default())
            {
                eprintln!("loadctl notifier: --capacity: {e}");
                return 2;
            }
        }
        _ => {
            eprintln!(
                "loadctl notifier: give --policy FILE, or --capacity R (≥ 0) with --template FILE"
            );
            return 2;
        }
    }
    let observe = match o.observe.map(|a| (a, UdpSocket::bind(a))) {
        None => None,
        Some((_, Ok(s))) if s.set_nonblocking(true).is_ok() => Some(s),
        Some((a, Err(e))) => {
            eprintln!("loadctl notifier: cannot listen for reports on {a}: {e}");
            return 2;
        }
        Some((a, Ok(_))) => {
            eprintln!("loadctl notifier: cannot listen for reports on {a}");
            return 2;
        }
    };
    eprintln!("loadctl notifier: {uri_text} listening on {sent_by}");
    let mut server = Server {
        sock,
        contact: uri_text,
        sent_by,
        notifier,
        observe,
        shown: Vec::new(),
        outstanding: HashMap::new(),
        branches: 0,
        start: Instant::now(),
    };
    let end = (o.duration.clamp(0.0, 1e6) * 1e9) as u64;
    let mut buf = vec![0u8; 65_536];
    while server.now() < end {
        server.step(end, &mut buf);
    }
    // Ends every subscription and waits a moment for the answers.
    let now = server.now();
    server.notifier.shutdown(now);
    server.transmit();
    let last = now + 1_000_000_000;
    while server.now() < last
        && (server.notifier.poll_timeout().is_some() || !server.outstanding.is_empty())
    {
        server.step(last, &mut buf);
        if server.outstanding.is_empty() {
            break;
        }
    }
    eprintln!("loadctl notifier: stopped");
    0
}

/// One line of a demand report: `SUBSCRIBER-URI COUNT`; `None` for a blank line or a `#`
/// comment.
fn parse_report(line: &str) -> Result<Option<(Uri, u64)>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let mut words = line.split_ascii_whitespace();
    let (Some(uri), Some(count), None) = (words.next(), words.next(), words.next()) else {
        return Err(format!("{line:?}: expected `SUBSCRIBER-URI COUNT`"));
    };
    let uri = Uri::new(uri).map_err(|e| format!("{line:?}: {uri:?} is not a URI: {e}"))?;
    let count = count
        .parse::<u64>()
        .map_err(|_| format!("{line:?}: {count:?} is not a count (0 to 2^64-1)"))?;
    Ok(Some((uri, count)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demand_reports() {
        let (u, n) = parse_report("  sip:edge1@192.0.2.7:5060 42 ")
            .expect("valid")
            .expect("a report");
        assert_eq!((u.as_str(), n), ("sip:edge1@192.0.2.7:5060", 42));
        assert_eq!(parse_report(""), Ok(None));
        assert_eq!(parse_report("# comment"), Ok(None));
        for bad in [
            "sip:edge1.example.net",
            "sip:edge1.example.net 4 2",
            "sip:edge1.example.net -1",
            "sip:edge1.example.net 1.5",
            "sip:edge1.example.net 18446744073709551616",
            "not-a-uri 3",
        ] {
            let e = parse_report(bad).expect_err(bad);
            assert!(e.contains(bad.trim()), "{e}");
        }
    }

    #[test]
    fn allow_entries_and_files() {
        for ok in [
            "sip:edge@127.0.0.1:5070",
            "SIPS:proxy@example.net",
            "p1.example.net",
            "*.example.net",
            "192.0.2.7",
            "[2001:db8::1]",
            "localhost",
        ] {
            assert!(allow_entry(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "sip:",
            "sip:a@",
            "tel:+1555",
            "user@example.net",
            "example..net",
            ".example.net",
            "host name",
            "[not-v6]",
            "example.net:5060",
        ] {
            assert!(allow_entry(bad).is_err(), "{bad}");
        }
        let text = "# who may subscribe

sip:edge@127.0.0.1:5070   # the edge
  *.trusted.example
";
        assert_eq!(
            read_allow_file("f", text),
            Ok(vec![
                "sip:edge@127.0.0.1:5070".to_owned(),
                "*.trusted.example".to_owned()
            ])
        );
        assert_eq!(
            read_allow_file(
                "f",
                "ok.example
user@bad
"
            ),
            Err("f:2: \"user@bad\" is neither a sip: URI nor a host or domain name".to_owned())
        );
    }

    #[test]
    fn addresses_of_uris() {
        let a = |s: &str| address_of(&Uri::new(s).expect("uri"));
        assert_eq!(a("sip:edge@127.0.0.1:5070"), "127.0.0.1:5070".parse().ok());
        assert_eq!(a("sip:127.0.0.1"), "127.0.0.1:5060".parse().ok());
        assert_eq!(
            a("sip:e@127.0.0.1:5071;transport=udp"),
            "127.0.0.1:5071".parse().ok()
        );
    }
}
