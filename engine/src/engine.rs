//! Requests, decisions, and the [`Shard`] that owns limiter state.
//!
//! A shard holds a shared, read-only [`CompiledPolicy`] and, for each of its rules, the limiter
//! state and counters that only this shard touches. `classify` finds the first matching rule
//! (through the policy's indexes), asks that rule's limiter, and turns a refusal into the rule's
//! alt-action. It does not allocate once its scratch buffers are warm, takes no lock and makes
//! no system call: time comes in with the request.

use std::sync::Arc;
use std::time::Duration;

use crate::compile::{CompiledPolicy, CompiledRule, Identities, Scratch};
use crate::limit::Limiter;
use crate::policy::AltAction;

/// The transport a request arrived on. Only UDP is unreliable: there a silent drop causes
/// retransmissions, so `drop` is turned into `reject` (RFC 7200 §5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Transport {
    /// UDP (unreliable).
    #[default]
    Udp,
    /// TCP.
    Tcp,
    /// TLS over TCP.
    Tls,
    /// SCTP.
    Sctp,
    /// WebSocket.
    Ws,
    /// Secure WebSocket.
    Wss,
}

impl Transport {
    /// True for every transport except UDP.
    pub fn is_reliable(self) -> bool {
        !matches!(self, Transport::Udp)
    }

    /// Parses `udp`, `tcp`, `tls`, `sctp`, `ws`, `wss` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        [
            ("udp", Transport::Udp),
            ("tcp", Transport::Tcp),
            ("tls", Transport::Tls),
            ("sctp", Transport::Sctp),
            ("ws", Transport::Ws),
            ("wss", Transport::Wss),
        ]
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(s))
        .map(|(_, t)| t)
    }
}

/// The time of a request: a monotonic clock for limiters, a wall clock for validity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Time {
    /// Monotonic nanoseconds (any origin, never going backwards).
    pub monotonic_ns: u64,
    /// Wall-clock nanoseconds since the Unix epoch.
    pub unix_ns: i128,
}

/// A request to classify: header values as the SIP stack holds them, borrowed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'r> {
    /// The method (case-sensitive, e.g. `INVITE`).
    pub method: &'r str,
    /// From, To, Request-URI, P-Asserted-Identity and the target entity.
    pub identities: Identities<'r>,
    /// The transport it arrived on.
    pub transport: Transport,
    /// True for a request outside a dialog (no To tag). Only initial requests are filtered.
    pub initial: bool,
    /// The Event header value, if any.
    pub event: Option<&'r str>,
    /// When it arrived.
    pub time: Time,
}

impl Request<'_> {
    /// RFC 7200 §5.1: ACK, BYE, CANCEL, in-dialog requests and SUBSCRIBEs for the
    /// `load-control` event itself are never filtered.
    pub fn is_exempt(&self) -> bool {
        if !self.initial || matches!(self.method, "ACK" | "BYE" | "CANCEL") {
            return true;
        }
        self.method == "SUBSCRIBE"
            && self.event.is_some_and(|e| {
                e.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case("load-control")
            })
    }
}

/// What to do with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Let it through.
    Accept,
    /// Answer 503 Service Unavailable.
    Reject,
    /// Answer 302 Moved Temporarily with the rule's targets as Contacts.
    Redirect,
    /// Discard it without an answer (only over reliable transports).
    Drop,
}

impl Verdict {
    /// The SIP status to answer with: 503 for reject, 302 for redirect, none otherwise.
    pub fn status(self) -> Option<u16> {
        match self {
            Verdict::Reject => Some(503),
            Verdict::Redirect => Some(302),
            Verdict::Accept | Verdict::Drop => None,
        }
    }

    /// `accept`, `reject`, `redirect` or `drop`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accept => "accept",
            Verdict::Reject => "reject",
            Verdict::Redirect => "redirect",
            Verdict::Drop => "drop",
        }
    }
}

/// Proof that a window rule admitted a request: give it back with [`Shard::complete`] when
/// the transaction ends. Not `Clone`, so one admission is released once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a window slot stays taken until the ticket is completed"]
pub struct Ticket {
    rule: u32,
}

/// The outcome of [`Shard::classify`].
#[derive(Debug)]
pub struct Decision<'p> {
    /// What to do.
    pub verdict: Verdict,
    /// The matched rule; `None` when no rule matched or the request is exempt.
    pub rule: Option<&'p CompiledRule>,
    /// True when the request was not filtered at all (§5.1).
    pub exempt: bool,
    /// For a request admitted by a window rule.
    pub ticket: Option<Ticket>,
}

impl Decision<'_> {
    /// The SIP status to answer with (503, 302) or none.
    pub fn status(&self) -> Option<u16> {
        self.verdict.status()
    }

    /// The redirect targets (empty unless the verdict is redirect).
    pub fn targets(&self) -> &[crate::policy::Uri] {
        match (self.verdict, self.rule) {
            (Verdict::Redirect, Some(r)) => r.redirect_targets(),
            _ => &[],
        }
    }
}

/// Counters of one rule on one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleStats {
    /// Requests the rule matched.
    pub matched: u64,
    /// Of those, admitted.
    pub accepted: u64,
    /// Answered 503 (including drops over UDP and refused redirects).
    pub rejected: u64,
    /// Redirected.
    pub redirected: u64,
    /// Dropped silently.
    pub dropped: u64,
    /// Redirects turned into rejects because a target is outside the allow-list.
    pub redirect_refused: u64,
}

/// How a shard's limiters behave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardConfig {
    /// GCRA burst tolerance τ of rate rules: at most max(1, ⌈r·τ⌉) requests at once.
    pub burst_tolerance: Duration,
}

impl Default for ShardConfig {
    fn default() -> Self {
        Self {
            burst_tolerance: Duration::from_millis(100),
        }
    }
}

/// What a shard keeps per rule.
#[derive(Debug)]
struct RuleState {
    limiter: Limiter,
    stats: RuleStats,
}

/// One worker's classifier: a shared policy plus this worker's limiter state and counters.
#[derive(Debug)]
pub struct Shard {
    policy: Arc<CompiledPolicy>,
    /// Per rule, the limiter and counters side by side: one cache line per decision.
    rules: Vec<RuleState>,
    exempt: u64,
    unmatched: u64,
    scratch: Scratch,
    config: ShardConfig,
}

impl Shard {
    /// A shard enforcing `policy` with fresh limiter state.
    pub fn new(policy: Arc<CompiledPolicy>, config: ShardConfig) -> Self {
        let rules = policy
            .rules()
            .iter()
            .map(|r| RuleState {
                limiter: Limiter::new(r.limit(), config.burst_tolerance),
                stats: RuleStats::default(),
            })
            .collect();
        Self {
            policy,
            rules,
            exempt: 0,
            unmatched: 0,
            scratch: Scratch::default(),
            config,
        }
    }

    /// The policy this shard enforces.
    pub fn policy(&self) -> &Arc<CompiledPolicy> {
        &self.policy
    }

    /// The configuration.
    pub fn config(&self) -> &ShardConfig {
        &self.config
    }

    /// Decides one request.
    pub fn classify(&mut self, req: &Request<'_>) -> Decision<'_> {
        if req.is_exempt() {
            self.exempt += 1;
            return Decision {
                verdict: Verdict::Accept,
                rule: None,
                exempt: true,
                ticket: None,
            };
        }
        let Some(i) = self.policy.find_with(
            req.method,
            req.time.unix_ns,
            &req.identities,
            &mut self.scratch,
        ) else {
            self.unmatched += 1;
            return Decision {
                verdict: Verdict::Accept,
                rule: None,
                exempt: false,
                ticket: None,
            };
        };
        let rule = &self.policy.rules()[i];
        let RuleState { limiter, stats } = &mut self.rules[i];
        stats.matched += 1;
        if limiter.try_acquire(req.time.monotonic_ns) {
            stats.accepted += 1;
            let ticket = matches!(limiter, Limiter::Window(_)).then_some(Ticket { rule: i as u32 });
            return Decision {
                verdict: Verdict::Accept,
                rule: Some(rule),
                exempt: false,
                ticket,
            };
        }
        let verdict = match rule.alt_action() {
            AltAction::Reject => Verdict::Reject,
            AltAction::Drop if req.transport.is_reliable() => Verdict::Drop,
            AltAction::Drop => Verdict::Reject,
            AltAction::Redirect(_) if rule.redirect_refused() => {
                stats.redirect_refused += 1;
                Verdict::Reject
            }
            AltAction::Redirect(_) => Verdict::Redirect,
        };
        match verdict {
            Verdict::Reject => stats.rejected += 1,
            Verdict::Redirect => stats.redirected += 1,
            Verdict::Drop => stats.dropped += 1,
            Verdict::Accept => {}
        }
        Decision {
            verdict,
            rule: Some(rule),
            exempt: false,
            ticket: None,
        }
    }

    /// Releases the window slot a request took, when its transaction completes.
    pub fn complete(&mut self, ticket: Ticket) {
        if let Some(RuleState {
            limiter: Limiter::Window(w),
            ..
        }) = self.rules.get_mut(ticket.rule as usize)
        {
            w.release();
        }
    }

    /// Counters of rule `i` (document order).
    pub fn rule_stats(&self, i: usize) -> Option<&RuleStats> {
        self.rules.get(i).map(|r| &r.stats)
    }

    /// Requests not filtered because exempt (§5.1).
    pub fn exempt_count(&self) -> u64 {
        self.exempt
    }

    /// Requests no rule matched.
    pub fn unmatched_count(&self) -> u64 {
        self.unmatched
    }
}
