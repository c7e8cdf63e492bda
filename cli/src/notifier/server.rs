//! The notifier on its UDP socket: SUBSCRIBEs in, NOTIFYs out and retransmitted until
//! answered (T1 doubling up to T2, for 64·T1), demand reports, signals.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, Instant};

use loadctl::event::notifier::{DialogRecord, Notifier};
use loadctl::event::wire::{self, Via};
use loadctl::policy::Uri;

use super::state::{SavedDialog, StateFile, unix_ms, write_state};

pub(super) const T1_NS: u64 = 500_000_000;
pub(super) const T2_NS: u64 = 4_000_000_000;
pub(super) const GIVE_UP_NS: u64 = 64 * T1_NS;

/// A NOTIFY waiting for its response.
pub(super) struct Outstanding {
    pub(super) bytes: Vec<u8>,
    pub(super) to: SocketAddr,
    pub(super) started: u64,
    pub(super) next: u64,
    pub(super) interval: u64,
}

/// The socket address a SIP URI's host:port names (port 5060 when absent).
pub(super) fn address_of(uri: &Uri) -> Option<SocketAddr> {
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

pub(super) struct Server {
    pub(super) sock: UdpSocket,
    pub(super) sent_by: String,
    pub(super) contact: String,
    pub(super) notifier: Notifier,
    /// Demand reports (`--observe`) as [`read_reports`] received them.
    pub(super) observe: Option<Receiver<Report>>,
    /// The targets last printed.
    pub(super) shown: Vec<(String, f64)>,
    pub(super) outstanding: HashMap<String, Outstanding>,
    pub(super) branches: u64,
    pub(super) start: Instant,
    /// `--state-file`, and the dialogs last written to it (`None`: not written yet).
    pub(super) state: Option<(String, Option<Vec<DialogRecord>>)>,
    /// The last write of the state file failed (and was said).
    pub(super) state_failing: bool,
}

impl Server {
    pub(super) fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Rewrites the state file when the dialogs changed (a NOTIFY's CSeq, a refresh, a
    /// subscription that started or ended). A failure is said once, until a write succeeds
    /// again; it is returned for the first write, which decides whether the notifier starts.
    pub(super) fn persist(&mut self) -> Result<(), String> {
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

    pub(super) fn send(&self, bytes: &[u8], to: SocketAddr) {
        if let Err(e) = self.sock.send_to(bytes, to) {
            eprintln!("loadctl notifier: send to {to}: {e}");
        }
    }

    /// Sends every NOTIFY the notifier has ready.
    pub(super) fn transmit(&mut self) {
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
    pub(super) fn events(&mut self) {
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

    /// Applies the demand reports received since the last call, each at the time it arrived.
    pub(super) fn observations(&mut self) {
        let Some(reports) = &self.observe else {
            return;
        };
        while let Ok(Report {
            at: now,
            from,
            bytes,
        }) = reports.try_recv()
        {
            for line in String::from_utf8_lossy(&bytes).lines() {
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

    pub(super) fn receive(&mut self, bytes: &[u8], from: SocketAddr) {
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
    pub(super) fn retransmit(&mut self) {
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

    pub(super) fn step(&mut self, until: u64, buf: &mut [u8]) {
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

/// A datagram of demand reports and when it arrived (ns on the server's clock).
pub(super) struct Report {
    at: u64,
    from: SocketAddr,
    bytes: Vec<u8>,
}

/// Demand reports in flight between [`read_reports`] and the server's loop: a bound on what a
/// flood of reports can hold in memory (past it the socket's buffer fills and the kernel drops).
pub(super) const REPORTS_QUEUED: usize = 256;

/// The `--observe` socket's reader, on a thread of its own: a report is timestamped when it
/// arrives, not when the server's loop next wakes (up to 50 ms later, and later still on a busy
/// machine), so the demand measured from the reports' spacing is the senders'. Ends when the
/// server is gone.
pub(super) fn read_reports(sock: UdpSocket, start: Instant, to: SyncSender<Report>) {
    let mut buf = [0u8; 4096];
    while let Ok((n, from)) = sock.recv_from(&mut buf) {
        let at = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let report = Report {
            at,
            from,
            bytes: buf[..n].to_vec(),
        };
        if to.send(report).is_err() {
            return;
        }
    }
}

/// One line of a demand report: `SUBSCRIBER-URI COUNT`; `None` for a blank line or a `#`
/// comment.
pub(super) fn parse_report(line: &str) -> Result<Option<(Uri, u64)>, String> {
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
