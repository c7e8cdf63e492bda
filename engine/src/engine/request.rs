//! What goes into a classification and what comes out: [`Request`], [`Decision`], [`Ticket`].

use crate::compile::{CompiledRule, Identities};

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
    /// When it arrived; `None` reads the engine's clock (a cheap coarse clock).
    pub time: Option<Time>,
    /// The `Resource-Priority` values (RFC 4412), for the priority exemption.
    pub resource_priority: crate::sip::HeaderValues<'r>,
}

impl<'r> Request<'r> {
    /// The request a scanned raw SIP message describes. The target entity is left empty: the
    /// message does not say where it goes next; the caller that knows its next hop sets it with
    /// [`Request::with_target`] (else rules with `target-sip-entity` never match it).
    pub fn from_sip(
        sip: &crate::sip::SipRequest<'r>,
        transport: Transport,
        time: Option<Time>,
    ) -> Self {
        use crate::sip::uri_part;
        Request {
            method: sip.method,
            identities: Identities {
                from: uri_part(sip.from),
                to: uri_part(sip.to),
                request_uri: Some(sip.request_uri),
                // Both comma-separated values when the header is clean text, else the first URI.
                p_asserted_identity: sip
                    .p_asserted_identity
                    .and_then(|v| std::str::from_utf8(v).ok().or_else(|| uri_part(v))),
                target: None,
            },
            transport,
            initial: sip.initial,
            event: sip.event.and_then(|e| std::str::from_utf8(e).ok()),
            time,
            resource_priority: sip.resource_priority,
        }
    }

    /// This request with `target` as its target entity: the URI of the next hop it will be
    /// routed to (RFC 7200 §5.3.3 `target-sip-entity`).
    pub fn with_target(mut self, target: Option<&'r str>) -> Self {
        self.identities.target = target;
        self
    }

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

/// Why a request was let through without trying any rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExemptReason {
    /// RFC 7200 §5.1: ACK, BYE, CANCEL, an in-dialog request, or a `load-control` SUBSCRIBE.
    NotFiltered,
    /// An emergency call: Request-URI (or To) `urn:service:sos` or `urn:service:sos.*`
    /// (RFC 5031), with [`Exemptions::emergency`] on.
    Emergency,
    /// A `Resource-Priority` namespace in [`Exemptions::resource_priority`] (RFC 4412).
    ResourcePriority,
}

/// Requests exempt from load filtering by local policy, before any rule is tried (RFC 7200
/// §4.8: the subscriber SHOULD honour local policy prioritising Resource-Priority and
/// emergency requests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exemptions {
    /// Exempt emergency requests (RFC 5031 service URNs). Default true.
    pub emergency: bool,
    /// Resource-Priority namespaces (RFC 4412 §3.1, compared case-insensitively) whose
    /// requests are exempt. Default `ets` and `wps` (GETS / WPS / MPS).
    pub resource_priority: Vec<String>,
}

impl Default for Exemptions {
    fn default() -> Self {
        Self {
            emergency: true,
            resource_priority: vec!["ets".into(), "wps".into()],
        }
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
    /// The rule's lineage key (source, id, action).
    pub(crate) key: u64,
    /// Where the rule was in the snapshot that admitted the request.
    pub(crate) index: u32,
    /// That snapshot's generation.
    pub(crate) generation: u64,
}

impl Ticket {
    /// The ticket as one integer pair, for callers that must store it outside Rust (the C ABI).
    pub fn to_parts(&self) -> (u64, u64) {
        (self.key, self.generation << 32 | u64::from(self.index))
    }

    /// Rebuilds a ticket from [`Ticket::to_parts`]. A forged or reused pair can release a
    /// window slot that was not taken; the engine never releases below zero.
    pub fn from_parts(key: u64, packed: u64) -> Self {
        Self {
            key,
            index: packed as u32,
            generation: packed >> 32,
        }
    }
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
