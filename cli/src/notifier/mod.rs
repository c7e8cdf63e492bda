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
//! protected server, a tap or a script reading the server's counters sends them; each counts
//! at the time it arrives, read on a thread of its own). Without
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

mod access;
mod policy;
mod server;
mod state;

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use loadctl::event::notifier::{
    Authorization, DialogRecord, Notifier, NotifierConfig, ShutdownReason,
};
use loadctl::policy::Uri;

use access::authorization;
use policy::PolicySource;
use server::Server;
use state::{read_state, unix_ms};

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
    let start = Instant::now();
    let observe = match o.observe.map(|a| (a, UdpSocket::bind(a))) {
        None => None,
        Some((a, Ok(s))) => {
            let (to, reports) = std::sync::mpsc::sync_channel(server::REPORTS_QUEUED);
            let reader = std::thread::Builder::new()
                .name("observe".into())
                .spawn(move || server::read_reports(s, start, to));
            if let Err(e) = reader {
                eprintln!("loadctl notifier: cannot read reports on {a}: {e}");
                return 2;
            }
            Some(reports)
        }
        Some((a, Err(e))) => {
            eprintln!("loadctl notifier: cannot listen for reports on {a}: {e}");
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
        start,
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

#[cfg(test)]
mod tests;
