//! What goes into a classification and what comes out: [`Request`], [`Decision`], [`Ticket`].
//!
//! # Exempt requests
//! Before any rule is tried, [`Request::is_exempt`] lets some requests through and says why
//! ([`ExemptReason`]), in this order:
//! 1. [`ExemptReason::NotFiltered`] — RFC 7200 §5.1: ACK, BYE, CANCEL, in-dialog requests
//!    and SUBSCRIBEs for the `load-control` event itself. A request is in a dialog when the
//!    caller says it matched it to a dialog it keeps ([`Request::known_dialog`]); a To tag
//!    alone, which any sender can write, counts only with [`Exemptions::to_tag_is_dialog`].
//! 2. [`ExemptReason::Emergency`] (with [`Exemptions::emergency`], on by default) — RFC 7200
//!    §4.8: "The subscriber SHOULD honor the local policy for prioritizing SIP requests
//!    relating to emergency calls as identified by the sos URN [RFC5031]". The Request-URI,
//!    or the To URI when the Request-URI is not a URN, is `urn:service:sos` or
//!    `urn:service:sos.<sub-service>`; RFC 5031 §3: "'service' identifiers are compared
//!    according to case-insensitive string equality", so `URN:Service:SOS.fire` counts.
//! 3. [`ExemptReason::ResourcePriority`] (namespaces in [`Exemptions::resource_priority`],
//!    default `ets` and `wps`) — RFC 7200 §4.8: the subscriber "SHOULD honor the local policy
//!    for prioritizing SIP requests based on the content of the Resource-Priority header". Any
//!    r-value (`namespace "." r-priority`, RFC 4412 §3.1) of any `Resource-Priority` line
//!    whose namespace is in the list, compared case-insensitively ("Namespaces and priorities
//!    are case-insensitive ASCII tokens"); the priority value is not looked at. Only from a
//!    peer in [`Exemptions::priority_peers`] (by [`Request::source`]): RFC 4412 §11.3, "Only
//!    SIP elements within the same administrative trust domain employing a secure channel
//!    between their SIP elements will trust a Resource-Priority header field that is not
//!    appropriately signed"; none by default.
//!
//! The check allocates nothing: the engine normalises the namespace list once, when it is
//! created ([`Exemptions::normalized`]).

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
/// `Request::default()` is an initial request (outside a dialog) with nothing else set, so a
/// request built from it is filtered unless `initial` is cleared.
#[derive(Clone, Copy, Debug)]
pub struct Request<'r> {
    /// The method (case-sensitive, e.g. `INVITE`).
    pub method: &'r str,
    /// From, To, Request-URI, P-Asserted-Identity and the target entity.
    pub identities: Identities<'r>,
    /// The transport it arrived on.
    pub transport: Transport,
    /// True for a request without a To tag. Only initial requests are filtered, and a request
    /// with a To tag counts as in a dialog only as [`Request::known_dialog`] says.
    pub initial: bool,
    /// The caller matched this request to a dialog it keeps (RFC 3261 §12: its Call-ID, local
    /// and remote tags), so it is not initial whatever [`Exemptions::to_tag_is_dialog`] says.
    pub known_dialog: bool,
    /// The address the request came from (the transport peer: UDP source, TCP/TLS peer), for
    /// [`Exemptions::priority_peers`]; `None`: unknown, never trusted.
    pub source: Option<std::net::IpAddr>,
    /// The Event header value, if any.
    pub event: Option<&'r str>,
    /// When it arrived; `None` reads the engine's clock (a cheap coarse clock).
    pub time: Option<Time>,
    /// The `Resource-Priority` values (RFC 4412), for the priority exemption.
    pub resource_priority: crate::sip::HeaderValues<'r>,
}

impl Default for Request<'_> {
    fn default() -> Self {
        Request {
            method: "",
            identities: Identities::default(),
            transport: Transport::default(),
            // A default that skipped every rule (`NotFiltered`) would fail open without a word.
            initial: true,
            known_dialog: false,
            source: None,
            event: None,
            time: None,
            resource_priority: crate::sip::HeaderValues::default(),
        }
    }
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
        Self::from_sip_with_uris(sip, uri_part(sip.from), uri_part(sip.to), transport, time)
    }

    /// [`Request::from_sip`], given the URIs of `sip.from` and `sip.to` (what
    /// [`crate::sip::uri_part`] finds in each): for a caller that builds several requests from
    /// one scan and finds them once, as the C ABI's scanned message does.
    pub fn from_sip_with_uris(
        sip: &crate::sip::SipRequest<'r>,
        from: Option<&'r str>,
        to: Option<&'r str>,
        transport: Transport,
        time: Option<Time>,
    ) -> Self {
        Request {
            method: sip.method,
            identities: Identities {
                from,
                to,
                request_uri: Some(sip.request_uri),
                p_asserted_identity: sip.p_asserted_identity,
                target: None,
            },
            transport,
            initial: sip.initial,
            known_dialog: false,
            source: None,
            event: sip.event.and_then(|e| std::str::from_utf8(e).ok()),
            time,
            resource_priority: sip.resource_priority,
        }
    }

    /// Why this request is let through without trying any rule, if it is (see the module
    /// docs for the reasons and their order). `exemptions` should be
    /// [`Exemptions::normalized`] (the engine's always is); a list that is not still works,
    /// with entries compared as written.
    pub fn is_exempt(&self, exemptions: &Exemptions) -> Option<ExemptReason> {
        if self.not_filtered(exemptions) {
            return Some(ExemptReason::NotFiltered);
        }
        if exemptions.emergency && self.is_emergency() {
            return Some(ExemptReason::Emergency);
        }
        if !exemptions.resource_priority.is_empty()
            && !self.resource_priority.is_empty()
            && self
                .source
                .is_some_and(|a| exemptions.priority_peers.iter().any(|n| n.contains(a)))
            && self.resource_priority.values().any(|v| {
                r_value_namespace(v).is_some_and(|ns| {
                    exemptions
                        .resource_priority
                        .iter()
                        .any(|e| e.as_bytes().eq_ignore_ascii_case(ns))
                })
            })
        {
            return Some(ExemptReason::ResourcePriority);
        }
        None
    }

    /// This request with `target` as its target entity: the URI of the next hop it will be
    /// routed to (RFC 7200 §5.3.3 `target-sip-entity`).
    pub fn with_target(mut self, target: Option<&'r str>) -> Self {
        self.identities.target = target;
        self
    }

    /// RFC 7200 §5.1: ACK, BYE, CANCEL, in-dialog requests and SUBSCRIBEs for the
    /// `load-control` event itself are never filtered.
    fn not_filtered(&self, exemptions: &Exemptions) -> bool {
        let in_dialog = self.known_dialog || (!self.initial && exemptions.to_tag_is_dialog);
        if in_dialog || matches!(self.method, "ACK" | "BYE" | "CANCEL") {
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

    /// The Request-URI is an emergency service URN, or the To URI is when the Request-URI is
    /// not a URN (after routing, the Request-URI may name the emergency centre instead).
    fn is_emergency(&self) -> bool {
        // Quick looks first (`may_be_urn`, `may_hold_sos_urn`): most Request-URIs are no URN
        // and most To values name none; the exact checks behind them would find nothing.
        match self
            .identities
            .request_uri
            .filter(|ruri| may_be_urn(ruri))
            .map(bare_uri)
        {
            Some(ruri) if has_scheme(ruri, "urn") => is_sos_urn(ruri),
            _ => self
                .identities
                .to
                .filter(|to| may_hold_sos_urn(to.as_bytes()))
                .and_then(|to| crate::sip::uri_part(to.as_bytes()))
                .map(bare_uri)
                .is_some_and(is_sos_urn),
        }
    }
}

/// True when `ruri` may be a URN. False only when it has no white space or `<` in front and
/// does not start with `urn:` (case-insensitive): then [`bare_uri`] leaves its start as it is
/// and [`has_scheme`]`(bare_uri(ruri), "urn")` is false. Anything else goes to that exact
/// check. Spares trimming every Request-URI (most are `sip:` or `tel:`).
fn may_be_urn(ruri: &str) -> bool {
    match ruri.as_bytes() {
        // White space (ASCII, or Unicode: lead bytes are non-ASCII) or `<`: bare_uri decides.
        [c, ..] if !c.is_ascii() || matches!(c, b'\t'..=b'\r' | b' ' | b'<') => true,
        [u, r, n, b':', ..] => [*u, *r, *n].eq_ignore_ascii_case(b"urn"),
        _ => false,
    }
}

/// The text every sos URN starts with (RFC 5031 §3), compared case-insensitively.
const SOS: &[u8] = b"urn:service:sos";

/// Boyer–Moore–Horspool shifts for [`SOS`], case-insensitive: for a byte at the end of the
/// window, how far the window may move without skipping an occurrence.
const SOS_SHIFT: [u8; 256] = {
    let mut shift = [SOS.len() as u8; 256];
    let mut j = 0;
    while j < SOS.len() - 1 {
        let c = SOS[j];
        shift[c as usize] = (SOS.len() - 1 - j) as u8;
        shift[c.to_ascii_uppercase() as usize] = (SOS.len() - 1 - j) as u8;
        j += 1;
    }
    shift
};

/// True when `value` contains `urn:service:sos` (case-insensitive) somewhere. Any URI
/// [`is_sos_urn`] accepts starts with that text, and the URI [`Request::is_emergency`] takes
/// from the To value is a slice of it, so a false here means the exact check (which walks the
/// display name, extracts and trims the URI) would say no. A Horspool search: a handful of
/// byte loads for a typical To value instead of a walk over every byte.
fn may_hold_sos_urn(value: &[u8]) -> bool {
    let mut end = SOS.len();
    while let Some(&last) = value.get(end - 1) {
        // `s` or `S` (no other byte ORed with 0x20 gives `s`), then the whole window.
        if last | 0x20 == b's' && value[end - SOS.len()..end].eq_ignore_ascii_case(SOS) {
            return true;
        }
        end += usize::from(SOS_SHIFT[usize::from(last)]);
    }
    false
}

/// A URI without white space and without the `<>` of a name-addr.
fn bare_uri(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('<')
        .map_or(s, |inner| inner.split('>').next().unwrap_or(inner))
        .trim()
}

/// `uri` starts with `scheme:` (case-insensitive).
fn has_scheme(uri: &str, scheme: &str) -> bool {
    let b = uri.as_bytes();
    b.len() > scheme.len()
        && b[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
        && b[scheme.len()] == b':'
}

/// `urn:service:sos` or `urn:service:sos.` followed by sub-services (RFC 5031 §3 syntax
/// `service = top-level *("." sub-service)`, §4.2 the `sos` sub-services), case-insensitive.
fn is_sos_urn(uri: &str) -> bool {
    let b = uri.as_bytes();
    if b.len() < SOS.len() || !b[..SOS.len()].eq_ignore_ascii_case(SOS) {
        return false;
    }
    match &b[SOS.len()..] {
        [] => true,
        [b'.', sub @ ..] => {
            !sub.is_empty()
                && sub.split(|&c| c == b'.').all(|label| {
                    !label.is_empty()
                        && label
                            .iter()
                            .all(|c| c.is_ascii_alphanumeric() || *c == b'-')
                })
        }
        _ => false,
    }
}

/// The namespace of an r-value (`namespace "." r-priority`, RFC 4412 §3.1), trimmed; `None`
/// without a dot.
fn r_value_namespace(r_value: &[u8]) -> Option<&[u8]> {
    let dot = r_value.iter().position(|&c| c == b'.')?;
    Some(crate::sip::trim(&r_value[..dot]))
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

impl ExemptReason {
    /// Every reason, in the order [`Request::is_exempt`] checks them.
    pub const ALL: [ExemptReason; 3] = [
        ExemptReason::NotFiltered,
        ExemptReason::Emergency,
        ExemptReason::ResourcePriority,
    ];

    /// Position in [`ExemptReason::ALL`] (counter arrays are indexed by it).
    pub fn index(self) -> usize {
        self as usize
    }

    /// `not-filtered`, `emergency` or `resource-priority` (Prometheus label, CLI output).
    pub fn as_str(self) -> &'static str {
        match self {
            ExemptReason::NotFiltered => "not-filtered",
            ExemptReason::Emergency => "emergency",
            ExemptReason::ResourcePriority => "resource-priority",
        }
    }

    /// Why, for a person (`loadctl explain`).
    pub fn describe(self) -> &'static str {
        match self {
            ExemptReason::NotFiltered => {
                "ACK, BYE, CANCEL, in-dialog requests and load-control SUBSCRIBEs are never filtered (RFC 7200 §5.1)"
            }
            ExemptReason::Emergency => {
                "an emergency call: the Request-URI (or the To URI) is an sos service URN (RFC 5031), exempt by local policy (RFC 7200 §4.8)"
            }
            ExemptReason::ResourcePriority => {
                "its Resource-Priority header names an exempt namespace (RFC 4412), exempt by local policy (RFC 7200 §4.8)"
            }
        }
    }
}

/// Requests exempt from load filtering by local policy, before any rule is tried (RFC 7200
/// §4.8: the subscriber SHOULD honour local policy prioritising Resource-Priority and
/// emergency requests).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Exemptions {
    /// Exempt emergency requests (RFC 5031 service URNs). Default true.
    pub emergency: bool,
    /// Resource-Priority namespaces (RFC 4412 §3.1, compared case-insensitively) whose
    /// requests are exempt, from the [`Exemptions::priority_peers`]. Default `ets` and `wps`
    /// (GETS / WPS / MPS).
    pub resource_priority: Vec<String>,
    /// The peers whose Resource-Priority markings count (RFC 4412 §11.3: only within the
    /// operator's trust domain). Default none: a request's Resource-Priority counts only from
    /// a network the operator listed.
    pub priority_peers: Vec<super::Network>,
    /// Whether a To tag alone makes a request in-dialog (for callers that keep no dialogs and
    /// take requests only from peers they trust). Default false: in-dialog only as the caller
    /// says ([`Request::known_dialog`]), since anyone can write a To tag into a new INVITE.
    pub to_tag_is_dialog: bool,
}

impl Exemptions {
    /// No exemption beyond RFC 7200 §5.1 (for tests and operators that want every request
    /// filtered).
    pub fn none() -> Self {
        Self {
            emergency: false,
            resource_priority: Vec::new(),
            priority_peers: Vec::new(),
            to_tag_is_dialog: false,
        }
    }

    /// The namespaces trimmed and lower-cased, empty ones and repeats dropped, and anything
    /// from a `.` on cut (a namespace is a token without dots, RFC 4412 §3.1: `ets.0` names
    /// the `ets` namespace). The engine keeps its exemptions in this form.
    pub fn normalized(&self) -> Self {
        let mut resource_priority: Vec<String> = Vec::new();
        for ns in &self.resource_priority {
            let ns = ns
                .split('.')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            if !ns.is_empty() && !resource_priority.contains(&ns) {
                resource_priority.push(ns);
            }
        }
        Self {
            resource_priority,
            ..self.clone()
        }
    }
}

impl Default for Exemptions {
    fn default() -> Self {
        Self {
            emergency: true,
            resource_priority: vec!["ets".into(), "wps".into()],
            priority_peers: Vec::new(),
            to_tag_is_dialog: false,
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

/// Proof that a window rule admitted a request: give it back with [`Shard::complete`](super::Shard::complete) when
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

/// The outcome of [`Shard::classify`](super::Shard::classify). A window rule's admission carries its slot in
/// `ticket`: give it back with [`Shard::complete`](super::Shard::complete) when the transaction ends, or the slot stays
/// taken.
///
/// A decision left unread is a warning (an error under `deny(unused_must_use)`), since it may
/// carry a slot that nothing else can release:
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # use loadctl::{Engine, EngineConfig, Request};
/// # let engine = Engine::new(EngineConfig::default());
/// # let mut shard = engine.attach();
/// shard.classify(&Request::default()); // refused: a window's slot would be lost
/// ```
/// Read it, and give its ticket back:
/// ```
/// #![deny(unused_must_use)]
/// # use loadctl::{Engine, EngineConfig, Request};
/// # let engine = Engine::new(EngineConfig::default());
/// # let mut shard = engine.attach();
/// let decision = shard.classify(&Request::default());
/// if let Some(ticket) = decision.ticket {
///     shard.complete(ticket); // when the transaction ends
/// }
/// ```
#[derive(Debug)]
#[must_use = "a window admission's ticket must go back to the shard (Shard::complete)"]
pub struct Decision<'p> {
    /// What to do.
    pub verdict: Verdict,
    /// The matched rule; `None` when no rule matched or the request is exempt.
    pub rule: Option<&'p CompiledRule>,
    /// Why the request was let through without trying any rule, when it was (RFC 7200 §5.1,
    /// an emergency call, a Resource-Priority namespace: see [`Request::is_exempt`]).
    pub exempt: Option<ExemptReason>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The exact emergency check alone, without the quick looks (`may_be_urn`,
    /// `may_hold_sos_urn`) that skip it: the fast version must agree with it on every input.
    fn is_emergency_reference(request_uri: Option<&str>, to: Option<&str>) -> bool {
        match request_uri.map(bare_uri) {
            Some(ruri) if has_scheme(ruri, "urn") => is_sos_urn(ruri),
            _ => to
                .and_then(|to| crate::sip::uri_part(to.as_bytes()))
                .map(bare_uri)
                .is_some_and(is_sos_urn),
        }
    }

    fn is_emergency(request_uri: Option<&str>, to: Option<&str>) -> bool {
        let mut r = Request {
            method: "INVITE",
            initial: true,
            ..Request::default()
        };
        r.identities.request_uri = request_uri;
        r.identities.to = to;
        r.is_emergency()
    }

    #[test]
    fn quick_looks_agree_with_the_exact_check() {
        let ruris = [
            "sip:+12125551234@gw.example;user=phone",
            "urn:service:sos",
            "URN:Service:SOS.fire",
            "urn:service:sos.",
            "urn:service:sosx",
            "urn:service:counseling",
            " urn:service:sos",
            "\u{a0}urn:service:sos",
            "<urn:service:sos.police>",
            "< urn:service:sos >",
            "<sip:a@b>",
            "urn:",
            "urn",
            "",
            "tel:+1",
        ];
        let tos = [
            "\"Alice\" <tel:+12125551234>;tag=1",
            "<urn:service:sos>",
            "\"Bob\" <URN:SERVICE:SOS.ambulance>;tag=x",
            "urn:service:sos",
            "urn:service:sos;tag=1",
            "\u{a0}urn:service:sos",
            "\"<urn:service:sos>\" <sip:a@b>",
            "\"x\" <urn:service:sos",
            "< urn:service:sos.fire >",
            "Bob urn:service:sos",
            "<sip:urn:service:sos@x>",
            "",
            "   ",
        ];
        for ruri in ruris.iter().map(Some).chain([None]) {
            for to in tos.iter().map(Some).chain([None]) {
                assert_eq!(
                    is_emergency(ruri.copied(), to.copied()),
                    is_emergency_reference(ruri.copied(), to.copied()),
                    "{ruri:?} {to:?}"
                );
            }
        }
        assert!(is_emergency(
            Some("sip:x@y"),
            Some("\"E\" <urn:service:sos>")
        ));
        assert!(is_emergency(Some("URN:service:SOS"), None));
        assert!(!is_emergency(
            Some("urn:service:x"),
            Some("<urn:service:sos>")
        ));
    }

    /// Pieces that make the quick looks and the exact check take every branch.
    fn piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("urn:service:sos".to_owned()),
            Just("URN:Service:SOS".to_owned()),
            Just("urn:".to_owned()),
            Just("urn:service:".to_owned()),
            Just(".fire".to_owned()),
            Just("sip:".to_owned()),
            Just("<".to_owned()),
            Just(">".to_owned()),
            Just("\"".to_owned()),
            Just("\\".to_owned()),
            Just(";tag=s".to_owned()),
            Just(",".to_owned()),
            Just(" ".to_owned()),
            Just("\t".to_owned()),
            Just("\u{a0}".to_owned()),
            Just("\u{3000}".to_owned()),
            "[a-zA-Z0-9:.@+-]{0,6}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

        #[test]
        fn quick_looks_never_change_the_answer(
            ruri in proptest::option::of(proptest::collection::vec(piece(), 0..5)),
            to in proptest::option::of(proptest::collection::vec(piece(), 0..6)),
        ) {
            let ruri = ruri.map(|p| p.concat());
            let to = to.map(|p| p.concat());
            prop_assert_eq!(
                is_emergency(ruri.as_deref(), to.as_deref()),
                is_emergency_reference(ruri.as_deref(), to.as_deref())
            );
        }
    }
}
