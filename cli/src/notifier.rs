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
//! equal shares, re-split whenever one comes or goes. NOTIFYs are retransmitted over UDP until
//! answered (T1 doubling up to T2, for 64·T1).
//!
//! Its lifecycle:
//! - **SIGHUP** reads the policy (or template) file again. A valid one replaces the policy and
//!   every subscriber gets it in its next NOTIFY (at once, or when the 1 s pacing of RFC 7200
//!   §4.10 allows); an invalid one is refused with its `line:column` and the policy in force
//!   stays. With `--watch` a change of the file's modification time or size does the same
//!   (checked every second).
//! - **SIGTERM, SIGINT and the end of `--duration`** stop it gracefully: every subscription
//!   ends with `terminated;reason=probation;retry-after=N` (`--retry-after`, default 2 s), so
//!   that subscribers SUBSCRIBE again N seconds later, to the next process; it waits up to 2 s
//!   for the answers and exits 0. With `--decommission` the reason is `noresource`:
//!   subscribers stop until an operator tells them.
//! - **A hard stop** (SIGKILL, a crash) sends nothing: subscribers keep its rules and would not
//!   notice until their refresh (up to `--max-expires`). With `--state-file FILE` it keeps the
//!   dialogs of its subscriptions in FILE (rewritten whenever they change), and the next
//!   process started with the same FILE ends them at once with
//!   `terminated;reason=deactivated` (RFC 6665 §4.1.3: "SHOULD retry immediately with a new
//!   subscription"): the subscribers are on its subscriptions, with its policy, one round
//!   trip after it started.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use loadctl::event::NameAddr;
use loadctl::event::allocator::AllocatorConfig;
use loadctl::event::notifier::{
    Authorization, DialogRecord, Notifier, NotifierConfig, ShutdownReason,
};
use loadctl::event::wire::{self, Via};
use loadctl::policy::{Limits, Rule, Uri};
use serde::{Deserialize, Serialize};

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
    /// How long to run before the graceful stop, seconds; `None`: until a signal.
    pub duration: Option<f64>,
    /// Least spacing of NOTIFYs on one subscription, milliseconds.
    pub pacing_ms: u64,
    /// The `retry-after` of the graceful stop's `probation`, seconds.
    pub retry_after: u32,
    /// The graceful stop sends `noresource` instead.
    pub decommission: bool,
    /// Reload when the policy file changes (`--watch`).
    pub watch: bool,
    /// Where the subscriptions' dialogs are kept across processes.
    pub state_file: Option<&'a str>,
    /// The longest subscription granted, seconds.
    pub max_expires: u32,
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

/// The rules of a policy file, or the exit code and what to say: 2 when it cannot be read, 1
/// when it is not a full policy (the reader's error carries `line:column`).
fn read_rules(path: &str) -> Result<Vec<Arc<Rule>>, (u8, String)> {
    let bytes = crate::read_input(path).map_err(|e| (2u8, format!("{path}: {e}")))?;
    let doc = loadctl::policy::read(&bytes, &Limits::default())
        .map_err(|e| (1u8, format!("{path}:{e}")))?;
    crate::policy_file::print_warnings(path, &doc.warnings);
    doc.ruleset.rules().map(<[_]>::to_vec).ok_or_else(|| {
        (
            1u8,
            format!("{path}: a partial document cannot be pushed as a policy"),
        )
    })
}

/// What the notifier pushes, and the file it comes from (read again on SIGHUP).
enum PolicySource<'a> {
    /// `--policy FILE`: one policy for everyone.
    Policy(&'a str),
    /// `--capacity R --template FILE`: the template's first rule with each one's share.
    Capacity(f64, &'a str),
}

impl PolicySource<'_> {
    fn path(&self) -> &str {
        match self {
            PolicySource::Policy(p) | PolicySource::Capacity(_, p) => p,
        }
    }

    /// What `--watch` compares: the file's modification time and size.
    fn stamp(&self) -> Option<(SystemTime, u64)> {
        let m = std::fs::metadata(self.path()).ok()?;
        Some((m.modified().ok()?, m.len()))
    }

    /// Reads the file again (SIGHUP, `--watch`) and says what came of it.
    fn reload(&self, notifier: &mut Notifier, now: u64, why: &str) {
        if self.path() == "-" {
            eprintln!(
                "loadctl notifier: {why}: the policy came from standard input; nothing to re-read"
            );
            return;
        }
        match self.load(notifier, now) {
            Ok(()) => eprintln!("loadctl notifier: {why}: {} reloaded", self.path()),
            Err((_, e)) => {
                eprintln!("loadctl notifier: {why}: reload refused, the policy in force stays: {e}")
            }
        }
    }

    /// Reads the file and hands its policy to the notifier; nothing changes on an error.
    fn load(&self, notifier: &mut Notifier, now: u64) -> Result<(), (u8, String)> {
        let rules = read_rules(self.path())?;
        match self {
            PolicySource::Policy(_) => notifier.set_policy(now, Some(rules)),
            PolicySource::Capacity(capacity, path) => {
                let Some(rule) = rules.first() else {
                    return Err((1, format!("{path}: the template has no rule")));
                };
                notifier
                    .set_capacity(now, *capacity, (**rule).clone(), AllocatorConfig::default())
                    .map_err(|e| (2, format!("--capacity: {e}")))?;
            }
        }
        Ok(())
    }
}

/// The `--state-file` document: the dialogs of the live subscriptions, with wall-clock expiry
/// (the monotonic clock of one process means nothing to the next).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct StateFile {
    /// The format (1).
    format: u32,
    dialogs: Vec<SavedDialog>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct SavedDialog {
    call_id: String,
    subscriber: String,
    subscriber_tag: Option<String>,
    notifier_tag: String,
    remote_target: String,
    route_set: Vec<String>,
    cseq: u32,
    expires_unix_ms: u64,
    share: Option<f64>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl SavedDialog {
    fn from_record(r: &DialogRecord, now_ns: u64, now_unix_ms: u64) -> Self {
        Self {
            call_id: r.call_id.clone(),
            subscriber: r.subscriber.uri.to_string(),
            subscriber_tag: r.subscriber.tag.clone(),
            notifier_tag: r.notifier_tag.clone(),
            remote_target: r.remote_target.to_string(),
            route_set: r.route_set.iter().map(ToString::to_string).collect(),
            cseq: r.cseq,
            expires_unix_ms: now_unix_ms + r.expires_at_ns.saturating_sub(now_ns) / 1_000_000,
            share: r.share,
        }
    }

    /// The record in a new process's clock; `None` when it expired or holds a bad URI.
    fn to_record(&self, now_ns: u64, now_unix_ms: u64) -> Option<DialogRecord> {
        let left_ms = self.expires_unix_ms.checked_sub(now_unix_ms)?;
        let route_set = self
            .route_set
            .iter()
            .map(|u| Uri::new(u).ok())
            .collect::<Option<Vec<_>>>()?;
        Some(DialogRecord {
            call_id: self.call_id.clone(),
            subscriber: NameAddr {
                uri: Uri::new(&self.subscriber).ok()?,
                tag: self.subscriber_tag.clone(),
            },
            notifier_tag: self.notifier_tag.clone(),
            remote_target: Uri::new(&self.remote_target).ok()?,
            route_set,
            cseq: self.cseq,
            expires_at_ns: now_ns.saturating_add(left_ms.saturating_mul(1_000_000)),
            share: self.share,
        })
    }
}

/// Reads a state file; a missing one is empty, an unreadable or invalid one is said and
/// ignored (its subscribers come back at their refresh).
fn read_state(path: &str) -> StateFile {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            eprintln!("loadctl notifier: {path}: not a state file ({e}); ignored");
            StateFile::default()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => StateFile::default(),
        Err(e) => {
            eprintln!("loadctl notifier: {path}: {e}; ignored");
            StateFile::default()
        }
    }
}

/// Writes the state file whole (a temporary file renamed over it: a process killed mid-write
/// leaves the previous one).
fn write_state(path: &str, state: &StateFile) -> std::io::Result<()> {
    let tmp = format!("{path}.tmp");
    let text = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
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
    /// `--state-file`, and the dialogs last written to it (`None`: not written yet).
    state: Option<(String, Option<Vec<DialogRecord>>)>,
    /// The last write of the state file failed (and was said).
    state_failing: bool,
}

impl Server {
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Rewrites the state file when the dialogs changed (a NOTIFY's CSeq, a refresh, a
    /// subscription that started or ended). A failure is said once, until a write succeeds
    /// again; it is returned for the first write, which decides whether the notifier starts.
    fn persist(&mut self) -> Result<(), String> {
        let dialogs = self.notifier.dialogs();
        let now = self.now();
        let Some((path, written)) = &mut self.state else {
            return Ok(());
        };
        if written.as_ref() == Some(&dialogs) {
            return Ok(());
        }
        let unix = unix_ms();
        let state = StateFile {
            format: 1,
            dialogs: dialogs
                .iter()
                .map(|r| SavedDialog::from_record(r, now, unix))
                .collect(),
        };
        match write_state(path, &state) {
            Ok(()) => {
                *written = Some(dialogs);
                self.state_failing = false;
                Ok(())
            }
            Err(e) => {
                let why = format!("{path}: cannot write the state file: {e}");
                if !self.state_failing {
                    eprintln!("loadctl notifier: {why}");
                    self.state_failing = true;
                }
                Err(why)
            }
        }
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
    let hup = Arc::new(AtomicBool::new(false));
    let term = Arc::new(AtomicBool::new(false));
    for (signal, flag) in [
        (signal_hook::consts::SIGHUP, &hup),
        (signal_hook::consts::SIGTERM, &term),
        (signal_hook::consts::SIGINT, &term),
    ] {
        if let Err(e) = signal_hook::flag::register(signal, Arc::clone(flag)) {
            eprintln!("loadctl notifier: cannot handle signal {signal}: {e}");
            return 2;
        }
    }
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
    // Each process its own To-tags: a subscriber's refresh of a dialog of the process before
    // must not match a subscription of this one.
    let tag = format!("lcn{:x}x{:x}", std::process::id(), unix_ms() & 0xffff_ffff);
    let mut config = NotifierConfig::new(uri, &tag, authorization);
    config.pacing = std::time::Duration::from_millis(o.pacing_ms);
    config.max_expires = o.max_expires;
    config.default_expires = config.default_expires.min(o.max_expires);
    let mut notifier = Notifier::new(config);
    let source = match (o.policy, o.capacity, o.template) {
        (Some(path), None, None) => PolicySource::Policy(path),
        (None, Some(capacity), Some(path)) => PolicySource::Capacity(capacity, path),
        _ => {
            eprintln!(
                "loadctl notifier: give --policy FILE, or --capacity R (≥ 0) with --template FILE"
            );
            return 2;
        }
    };
    if let Err((code, why)) = source.load(&mut notifier, 0) {
        eprintln!("loadctl notifier: {why}");
        return code;
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
        state: o.state_file.map(|p| (p.to_owned(), None)),
        state_failing: false,
    };
    if let Some(path) = o.state_file {
        let saved = read_state(path);
        let (now, unix) = (server.now(), unix_ms());
        let records: Vec<DialogRecord> = saved
            .dialogs
            .iter()
            .filter_map(|d| d.to_record(now, unix))
            .collect();
        let queued = server.notifier.deactivate(now, &records);
        eprintln!(
            "loadctl notifier: {path}: {} dialog(s) of the previous process, {queued} deactivated",
            saved.dialogs.len()
        );
        server.transmit();
        // Written at once (without them): those dialogs are over whatever happens next. A file
        // that cannot be written would leave a hard stop unprotected: refuse to start.
        if server.persist().is_err() {
            return 2;
        }
    }
    let end = o
        .duration
        .map_or(u64::MAX, |d| (d.clamp(0.0, 1e9) * 1e9) as u64);
    let mut buf = vec![0u8; 65_536];
    let mut stamp = source.stamp();
    let mut next_check = 0;
    while server.now() < end && !term.load(Ordering::Relaxed) {
        if hup.swap(false, Ordering::Relaxed) {
            let now = server.now();
            source.reload(&mut server.notifier, now, "SIGHUP");
            stamp = source.stamp();
        }
        if o.watch && server.now() >= next_check {
            next_check = server.now() + 1_000_000_000;
            let seen = source.stamp();
            if seen != stamp {
                stamp = seen;
                let now = server.now();
                source.reload(&mut server.notifier, now, "the file changed");
            }
        }
        server.step(end, &mut buf);
        // Failures are said in `persist`; the notifier keeps serving.
        let _ = server.persist();
    }
    // The graceful stop: every subscription ends with a reason that says what to do next.
    let reason = if o.decommission {
        ShutdownReason::Decommission
    } else {
        ShutdownReason::Restart {
            retry_after_s: o.retry_after,
        }
    };
    let why = if term.load(Ordering::Relaxed) {
        "signal"
    } else {
        "--duration"
    };
    eprintln!("loadctl notifier: stopping ({why}): {reason:?}");
    let now = server.now();
    server.notifier.shutdown(now, reason);
    server.transmit();
    let _ = server.persist();
    // Waits for the answers (the retransmissions at 0.5 and 1.5 s included).
    let last = now + 2_000_000_000;
    while server.now() < last && !server.outstanding.is_empty() {
        server.step(last, &mut buf);
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
    fn state_file_round_trip_keeps_the_expiry_in_wall_clock_time() {
        let record = DialogRecord {
            call_id: "c-1".into(),
            subscriber: NameAddr {
                uri: Uri::new("sip:edge@127.0.0.1:5070").expect("uri"),
                tag: Some("t1".into()),
            },
            notifier_tag: "lcn1-1".into(),
            remote_target: Uri::new("sip:edge@127.0.0.1:5070").expect("uri"),
            route_set: vec![Uri::new("sip:p1.example.net;lr").expect("uri")],
            cseq: 7,
            expires_at_ns: 1_000_000_000_000, // 1000 s in the old process's clock
            share: Some(12.5),
        };
        // Saved at 400 s of the old process (600 s left), read 100 s later at 5 s of the new one.
        let saved = SavedDialog::from_record(&record, 400_000_000_000, 1_700_000_000_000);
        assert_eq!(saved.expires_unix_ms, 1_700_000_600_000);
        let dir = std::env::temp_dir().join(format!("loadctl-state-{}", std::process::id()));
        let path = dir.to_string_lossy().into_owned();
        let state = StateFile {
            format: 1,
            dialogs: vec![saved],
        };
        write_state(&path, &state).expect("written");
        let back = read_state(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(back, state);
        let restored = back.dialogs[0]
            .to_record(5_000_000_000, 1_700_000_100_000)
            .expect("not expired");
        assert_eq!(restored.expires_at_ns, 505_000_000_000);
        assert_eq!(
            DialogRecord {
                expires_at_ns: record.expires_at_ns,
                ..restored
            },
            record
        );
        // Expired by the time it is read: skipped.
        assert!(back.dialogs[0].to_record(0, 1_700_000_600_001).is_none());
        // A damaged file is ignored, not fatal.
        std::fs::write(&path, b"{not json").expect("written");
        assert_eq!(read_state(&path), StateFile::default());
        let _ = std::fs::remove_file(&path);
        assert_eq!(read_state(&path), StateFile::default());
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
