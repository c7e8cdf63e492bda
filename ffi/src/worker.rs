//! The worker handle: one per worker thread (or process), classifying without locks.
//!
//! # Lifetime of the strings in an `lc_decision`
//! `rule_id`, `source` and `targets` point into the policy snapshot the worker holds. They stay
//! valid until the next `lc_classify`, `lc_classify_sip`, `lc_classify_sip_opts`,
//! `lc_classify_scanned` or `lc_complete` on the **same worker** (any of which may switch it to
//! a newly published snapshot), or `lc_worker_free`.
//! Publishing from another thread never invalidates them by itself. Copy what you keep longer.

use loadctl::compile::Identities;
use loadctl::runtime::{Decision, ExemptReason, Request, Shard, Ticket, Time, Transport, Verdict};
use loadctl::sip::{self, SipError};

use crate::abi::FromC;
use crate::engine::lc_engine;
use crate::scanned::Scan;
use crate::{Code, Out, boundary, lc_result, lc_str};

/// A worker's classifier (a shard of the engine). Use it from one thread at a time.
pub struct lc_worker {
    shard: Shard,
}

/// The transport a request arrived on: an `LC_TRANSPORT_*` value (anything else passed in is
/// `LC_RESULT_INVALID_ARGUMENT`). Only UDP is unreliable (`drop` becomes 503 there).
pub type lc_transport = u32;
/// UDP.
pub const LC_TRANSPORT_UDP: lc_transport = 0;
/// TCP.
pub const LC_TRANSPORT_TCP: lc_transport = 1;
/// TLS.
pub const LC_TRANSPORT_TLS: lc_transport = 2;
/// SCTP.
pub const LC_TRANSPORT_SCTP: lc_transport = 3;
/// WebSocket.
pub const LC_TRANSPORT_WS: lc_transport = 4;
/// Secure WebSocket.
pub const LC_TRANSPORT_WSS: lc_transport = 5;

impl FromC for Transport {
    const C_NAMES: &'static str = "LC_TRANSPORT_*";

    fn from_c(value: u32) -> Option<Self> {
        Some(match value {
            LC_TRANSPORT_UDP => Transport::Udp,
            LC_TRANSPORT_TCP => Transport::Tcp,
            LC_TRANSPORT_TLS => Transport::Tls,
            LC_TRANSPORT_SCTP => Transport::Sctp,
            LC_TRANSPORT_WS => Transport::Ws,
            LC_TRANSPORT_WSS => Transport::Wss,
            _ => return None,
        })
    }
}

/// A request as the SIP stack holds it: header values (display names, tags and all) as
/// pointer + length; absent fields have a NULL `ptr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_request {
    /// Method (required), e.g. `INVITE`.
    pub method: lc_str,
    /// From header value.
    pub from: lc_str,
    /// To header value.
    pub to: lc_str,
    /// Request-URI.
    pub request_uri: lc_str,
    /// P-Asserted-Identity header value.
    pub p_asserted_identity: lc_str,
    /// The target entity (next hop) URI.
    pub target: lc_str,
    /// Event header value.
    pub event: lc_str,
    /// Transport: an `LC_TRANSPORT_*` value (anything else: `LC_RESULT_INVALID_ARGUMENT`).
    pub transport: lc_transport,
    /// 1 without a To tag, else 0. Only initial requests are filtered; one with a To tag is
    /// in a dialog only with `known_dialog` (or `LC_EXEMPT_TO_TAG`). A C boolean as a byte: any
    /// value but 0 or 1 is `LC_RESULT_INVALID_ARGUMENT`.
    pub initial: u8,
    /// 1 when the caller matched the request to a dialog it keeps (its Call-ID and tags, RFC
    /// 3261 §12), else 0: an in-dialog request, never filtered (RFC 7200 §4.8). A C boolean.
    pub known_dialog: u8,
    /// The address the request came from (the UDP source, the TCP/TLS peer), for
    /// `lc_engine_config.priority_peers`. `LC_IP_NONE`: unknown, its priority markings count
    /// for nothing.
    pub source: lc_ip,
    /// 1 when `monotonic_ns` / `unix_ns` are set; 0 reads the engine's clock. Any other value:
    /// `LC_RESULT_INVALID_ARGUMENT`.
    pub has_time: u8,
    /// The request's monotonic time, nanoseconds (read when `has_time` is 1). Use one clock
    /// for every call on an engine: the engine's own (read when `has_time` is 0, and by
    /// `lc_classify_sip`) is `CLOCK_MONOTONIC_COARSE` in nanoseconds since boot, so
    /// `CLOCK_MONOTONIC` values mix with it; with any other clock pass the time on every call.
    pub monotonic_ns: u64,
    /// Wall-clock nanoseconds since the Unix epoch.
    pub unix_ns: i64,
    /// The `Resource-Priority` header value (RFC 4412), for the priority exemption
    /// (`lc_engine_config.priority_namespaces`); several lines joined with `,` as RFC 3261
    /// §7.3.1 allows. Absent (NULL): none.
    pub resource_priority: lc_str,
}

/// Options of `lc_classify_sip_opts`. Zero-initialise it, then set what you need.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_sip_options {
    /// The transport the request arrived on: an `LC_TRANSPORT_*` value. Anything else:
    /// `LC_RESULT_INVALID_ARGUMENT`.
    pub transport: lc_transport,
    /// A bitwise OR of `LC_SIP_*` flags. An undeclared bit: `LC_RESULT_INVALID_ARGUMENT`.
    pub flags: u32,
    /// Monotonic nanoseconds; read only with `LC_SIP_HAS_TIME`. One clock for every call on an
    /// engine, as for `lc_request.monotonic_ns`.
    pub monotonic_ns: u64,
    /// Wall-clock nanoseconds since the Unix epoch; read only with `LC_SIP_HAS_TIME`.
    pub unix_ns: i64,
    /// The URI of the next hop the request will be routed to: the target entity rules with a
    /// `target-sip-entity` (RFC 7200 §5.3.3) are compared with. Absent (NULL): none, and such
    /// rules do not match. Must be UTF-8 (else `LC_RESULT_INVALID_UTF8`). Read during the call
    /// only.
    pub target: lc_str,
    /// The address the request came from (the UDP source, the TCP/TLS peer), for
    /// `lc_engine_config.priority_peers`. `LC_IP_NONE` (a zeroed field): unknown, its priority
    /// markings count for nothing.
    pub source: lc_ip,
}

/// An IP address: `family` is `LC_IP_NONE` (no address), `LC_IP_V4` (the first 4 bytes of
/// `addr`, network order) or `LC_IP_V6` (16 bytes, network order; an IPv4-mapped address is
/// the IPv4 address it maps). Any other family: `LC_RESULT_INVALID_ARGUMENT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_ip {
    /// `LC_IP_NONE`, `LC_IP_V4` or `LC_IP_V6`.
    pub family: u8,
    /// The address bytes, network order.
    pub addr: [u8; 16],
}

/// `lc_ip.family`: no address.
pub const LC_IP_NONE: u8 = 0;
/// `lc_ip.family`: IPv4.
pub const LC_IP_V4: u8 = 4;
/// `lc_ip.family`: IPv6.
pub const LC_IP_V6: u8 = 6;

impl lc_ip {
    /// The address, checked (`field` names it in the error).
    pub(crate) fn to_rust(self, field: &str) -> Result<Option<std::net::IpAddr>, Code> {
        let a = self.addr;
        match self.family {
            LC_IP_NONE => Ok(None),
            LC_IP_V4 => Ok(Some(std::net::IpAddr::from([a[0], a[1], a[2], a[3]]))),
            LC_IP_V6 => Ok(Some(std::net::IpAddr::from(a))),
            other => Err(crate::abi::invalid(
                &format!("{field}.family"),
                format_args!("{other} (LC_IP_NONE, LC_IP_V4 or LC_IP_V6)"),
            )),
        }
    }
}

/// Bits of `lc_sip_options.flags`.
pub type lc_sip_flags = u32;

/// `monotonic_ns` and `unix_ns` hold the request's time; without it the engine's clock is read.
pub const LC_SIP_HAS_TIME: lc_sip_flags = 1;

/// The caller matched the request to a dialog it keeps (its Call-ID and tags, RFC 3261 §12):
/// an in-dialog request, never filtered (RFC 7200 §4.8) and in overload control's priority
/// category (RFC 7339 §5.10.1). Without it a To tag makes no dialog, unless the engine has
/// `LC_EXEMPT_TO_TAG`: anyone can write a To tag into a new INVITE.
pub const LC_SIP_KNOWN_DIALOG: lc_sip_flags = 2;

/// Every declared `LC_SIP_*` bit.
const SIP_FLAGS_KNOWN: u32 = LC_SIP_HAS_TIME | LC_SIP_KNOWN_DIALOG;

/// Why a request was let through without trying any rule (`lc_decision.exempt_reason`).
pub type lc_exempt_reason = u32;

/// Not exempt: the rules were tried.
pub const LC_EXEMPT_REASON_NONE: lc_exempt_reason = 0;
/// Not filtered at all (RFC 7200 §5.1): ACK, BYE, CANCEL, in-dialog, `load-control` SUBSCRIBE.
pub const LC_EXEMPT_REASON_NOT_FILTERED: lc_exempt_reason = 1;
/// An emergency request (`urn:service:sos`, RFC 5031), with `LC_EXEMPT_EMERGENCY`.
pub const LC_EXEMPT_REASON_EMERGENCY: lc_exempt_reason = 2;
/// A `Resource-Priority` namespace in `lc_engine_config.priority_namespaces` (RFC 4412).
pub const LC_EXEMPT_REASON_RESOURCE_PRIORITY: lc_exempt_reason = 3;

/// The `lc_exempt_reason` of an engine reason.
fn exempt_reason_code(reason: Option<ExemptReason>) -> lc_exempt_reason {
    match reason {
        None => LC_EXEMPT_REASON_NONE,
        Some(ExemptReason::NotFiltered) => LC_EXEMPT_REASON_NOT_FILTERED,
        Some(ExemptReason::Emergency) => LC_EXEMPT_REASON_EMERGENCY,
        Some(ExemptReason::ResourcePriority) => LC_EXEMPT_REASON_RESOURCE_PRIORITY,
    }
}

/// What to do with a request: an `LC_VERDICT_*` value (`lc_decision.verdict`).
pub type lc_verdict = u32;
/// Let it through.
pub const LC_VERDICT_ACCEPT: lc_verdict = 0;
/// Answer 503.
pub const LC_VERDICT_REJECT: lc_verdict = 1;
/// Answer 302 with `targets` as Contacts.
pub const LC_VERDICT_REDIRECT: lc_verdict = 2;
/// Discard without answer.
pub const LC_VERDICT_DROP: lc_verdict = 3;

/// A window admission, to give back with `lc_complete` when the transaction ends.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct lc_ticket {
    /// The rule's key.
    pub key: u64,
    /// Where to find it quickly.
    pub hint: u64,
}

/// Most redirect targets a decision reports.
pub const LC_MAX_TARGETS: usize = 16;

/// The decision for one request. **Lifetime of its strings:** `rule_id`, `source` and
/// `targets` point into the policy snapshot the worker holds; they stay valid until the next
/// `lc_classify`, `lc_classify_sip`, `lc_classify_sip_opts`, `lc_classify_scanned` or
/// `lc_complete` on the same worker (any of which may switch it to a newly published snapshot),
/// or `lc_worker_free`.
/// Publishing from another thread never invalidates them by itself. Copy what you keep longer.
/// The caller owns the struct itself (it may be uninitialised before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_decision {
    /// What to do: an `LC_VERDICT_*` value.
    pub verdict: lc_verdict,
    /// The SIP status to answer with: 503, 302, or 0 for none.
    pub status: u16,
    /// Let through without trying any rule (`exempt_reason` says why).
    pub exempt: bool,
    /// Why it was exempt: an `LC_EXEMPT_REASON_*` value (`LC_EXEMPT_REASON_NONE` when not).
    pub exempt_reason: lc_exempt_reason,
    /// A rule matched (`rule_id` and `source` are set).
    pub matched: bool,
    /// The matched rule's id.
    pub rule_id: lc_str,
    /// The source (notifier) that published it.
    pub source: lc_str,
    /// Redirect targets in use (for `LC_VERDICT_REDIRECT`).
    pub target_count: usize,
    /// The redirect target URIs; only the first `target_count` are set.
    pub targets: [lc_str; LC_MAX_TARGETS],
    /// A window rule admitted the request: `ticket` must go back through `lc_complete`.
    pub has_ticket: bool,
    /// The ticket.
    pub ticket: lc_ticket,
}

/// Attaches a worker (a shard of `engine`'s limiter state) and writes it to `*out` (the
/// caller's, freed with `lc_worker_free`). Attach one per thread that classifies, and use it
/// from that thread (it may move between threads, never be used by two at once). With
/// `core_hint` ≥ 0 the calling thread is also pinned to a core: the `core_hint`-th CPU of the
/// thread's current affinity mask (counting from 0; on an unrestricted thread that is CPU
/// `core_hint`, under `taskset -c 4-7` hint 0 is CPU 4); -1 leaves the thread alone.
///
/// Errors: `LC_RESULT_PIN_FAILED` (and no worker) when the thread cannot be pinned to
/// `core_hint`; `LC_RESULT_INVALID_ARGUMENT` for a `core_hint` below -1.
///
/// # Safety
/// `engine` from `lc_engine_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_worker_attach(
    engine: *const lc_engine,
    core_hint: i32,
    out: *mut *mut lc_worker,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let out = try_out!(out);
        if core_hint < -1 {
            return crate::abi::invalid(
                "core_hint",
                format_args!("{core_hint} (a core number ≥ 0, or -1 for none)"),
            );
        }
        let shard = if core_hint >= 0 {
            match engine.attach_pinned(core_hint as usize) {
                Ok(s) => s,
                Err(e) => return crate::error::fail(Code::PinFailed, e),
            }
        } else {
            engine.attach()
        };
        out.write(Box::into_raw(Box::new(lc_worker { shard })));
        Code::Ok
    })
}

/// Frees a worker. Its counters stay in the engine's totals; window tickets it issued can still
/// be completed on another worker of the same engine. Strings of decisions it wrote become
/// invalid. `NULL` is a no-op.
///
/// # Safety
/// `worker` NULL or from `lc_worker_attach`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_worker_free(worker: *mut lc_worker) {
    // SAFETY: NULL or from Box::into_raw in lc_worker_attach, freed once.
    let _ = boundary(|| unsafe { crate::free_box(worker) });
}

/// A header value as text; one that is not UTF-8 (a display name in an 8-bit charset) is cut
/// down to its URI at the byte level, so it still classifies.
fn header(v: Option<&[u8]>) -> Option<&str> {
    let b = v?;
    // With several comma-separated values (P-Asserted-Identity), only the first survives the
    // fallback.
    text(b).or_else(|| sip::uri_part(b))
}

/// No byte of `b` has its top bit set: eight bytes per step, no early exit (the values are
/// short, and a branch per word costs more than it saves).
#[inline]
fn is_ascii(b: &[u8]) -> bool {
    let mut chunks = b.chunks_exact(8);
    let mut acc = 0u64;
    for c in &mut chunks {
        acc |= u64::from_ne_bytes(c.try_into().unwrap_or_default());
    }
    for &x in chunks.remainder() {
        acc |= u64::from(x);
    }
    acc & 0x8080_8080_8080_8080 == 0
}

/// `b` as text when it is valid UTF-8. SIP header values are ASCII in practice: an OR of all
/// bytes proves that without the byte-by-byte state machine of full validation, which
/// measured ~25 ns of a 390 ns `lc_classify` call on the standard mix; anything else takes the
/// full check.
#[inline]
fn text(b: &[u8]) -> Option<&str> {
    if is_ascii(b) {
        // SAFETY: every byte is below 0x80, and any ASCII byte sequence is valid UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(b) })
    } else {
        std::str::from_utf8(b).ok()
    }
}

/// Writes the decision `d` into the caller's `out` (`source` absent), field by field: the
/// caller's memory may be uninitialised, and only the first `target_count` targets are written
/// (clearing all sixteen on every call would cost more than the rest of the decision).
fn write_decision(d: &Decision<'_>, out: &mut Out<'_, lc_decision>) {
    let p = out.as_mut_ptr();
    macro_rules! set {
        ($field:ident, $value:expr) => {{
            let value = $value;
            // SAFETY: `p` is writable for one lc_decision (Out's contract); a field's place is
            // written without reading or dropping what was there.
            unsafe { (&raw mut (*p).$field).write(value) }
        }};
    }
    set!(
        verdict,
        match d.verdict {
            Verdict::Accept => LC_VERDICT_ACCEPT,
            Verdict::Reject => LC_VERDICT_REJECT,
            Verdict::Redirect => LC_VERDICT_REDIRECT,
            Verdict::Drop => LC_VERDICT_DROP,
        }
    );
    set!(status, d.status().unwrap_or(0));
    set!(exempt, d.exempt.is_some());
    set!(exempt_reason, exempt_reason_code(d.exempt));
    set!(matched, d.rule.is_some());
    set!(
        rule_id,
        d.rule.map_or(lc_str::NONE, |r| {
            lc_str::from_bytes(r.id().as_str().as_bytes())
        })
    );
    set!(source, lc_str::NONE);
    let targets = d.targets();
    set!(target_count, targets.len().min(LC_MAX_TARGETS));
    // SAFETY: as for `set!`; the array's first element, LC_MAX_TARGETS slots long.
    let slots = unsafe { (&raw mut (*p).targets).cast::<lc_str>() };
    for (i, t) in targets.iter().take(LC_MAX_TARGETS).enumerate() {
        // SAFETY: `i` < LC_MAX_TARGETS, inside the array.
        unsafe {
            slots
                .add(i)
                .write(lc_str::from_bytes(t.as_str().as_bytes()))
        };
    }
    set!(has_ticket, d.ticket.is_some());
    set!(
        ticket,
        d.ticket.as_ref().map_or(lc_ticket::default(), |t| {
            let (key, hint) = t.to_parts();
            lc_ticket { key, hint }
        })
    );
}

/// Classifies and fills `out`. The strings point into the snapshot the worker holds after the
/// call (the decision came from it), which stays until the worker's next call.
fn decide(worker: &mut lc_worker, req: &Request<'_>, mut out: Out<'_, lc_decision>) {
    let d = worker.shard.classify(req);
    write_decision(&d, &mut out);
    let source = d.rule.map(|r| r.source() as usize);
    if let Some(name) = source.and_then(|i| worker.shard.snapshot().sources().get(i)) {
        let p = out.as_mut_ptr();
        // SAFETY: `p` is writable for one lc_decision (Out's contract).
        unsafe { (&raw mut (*p).source).write(lc_str::from_bytes(name.as_bytes())) };
    }
}

/// Classifies one request whose headers the caller has parsed; writes the decision into `*out`
/// (see `lc_decision` for how long its strings stay valid). Once the worker is warm it never
/// allocates, locks or makes a system call (reading the engine's clock, `has_time` 0, is a
/// vDSO call); the first call after a publish moves the worker to the new snapshot, which
/// allocates its per-rule state and takes a statistics lock once. The request's strings are
/// read during the call only. In `from`, `to` and `p_asserted_identity` only the URIs must be
/// UTF-8 (a display name that is not is skipped); another field that is not UTF-8 counts as
/// absent (it matches no rule), except `method`.
///
/// Errors: `LC_RESULT_NULL_PARAMETER` for a NULL `method`; `LC_RESULT_INVALID_UTF8` when
/// `method` is not UTF-8; `LC_RESULT_INVALID_ARGUMENT` when `transport` is no `LC_TRANSPORT_*`
/// value or `initial` / `has_time` is neither 0 nor 1. No decision is written then.
///
/// # Safety
/// `worker` from `lc_worker_attach` (used by this thread only); `req` valid with readable
/// strings; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_classify(
    worker: *mut lc_worker,
    req: *const lc_request,
    out: *mut lc_decision,
) -> lc_result {
    boundary(|| {
        let worker = try_mut!(worker);
        let r = try_ref!(req);
        let out = try_out!(out);
        let transport = try_value!(r.transport, "lc_request.transport");
        let initial = try_!(crate::abi::checked_bool(r.initial, "lc_request.initial"));
        let known_dialog = try_!(crate::abi::checked_bool(
            r.known_dialog,
            "lc_request.known_dialog"
        ));
        let source = try_!(r.source.to_rust("lc_request.source"));
        let has_time = try_!(crate::abi::checked_bool(r.has_time, "lc_request.has_time"));
        // SAFETY: the strings are readable for the duration of the call by contract.
        let (method, from, to, ruri, pai, target, event, rp) = unsafe {
            (
                r.method.bytes(),
                r.from.bytes(),
                r.to.bytes(),
                r.request_uri.bytes(),
                r.p_asserted_identity.bytes(),
                r.target.bytes(),
                r.event.bytes(),
                r.resource_priority.bytes(),
            )
        };
        let Some(method) = method else {
            return crate::abi::null("lc_request.method");
        };
        let Some(method) = text(method) else {
            return crate::error::fail(Code::InvalidUtf8, "lc_request.method: not UTF-8");
        };
        let request = Request {
            method,
            identities: Identities {
                from: header(from),
                to: header(to),
                request_uri: ruri.and_then(text),
                p_asserted_identity: header(pai).into(),
                target: target.and_then(text),
            },
            transport,
            initial,
            known_dialog,
            source,
            event: event.and_then(text),
            time: has_time.then_some(Time {
                monotonic_ns: r.monotonic_ns,
                unix_ns: i128::from(r.unix_ns),
            }),
            resource_priority: rp.map_or(sip::HeaderValues::NONE, sip::HeaderValues::one),
        };
        decide(worker, &request, out);
        Code::Ok
    })
}

/// What the caller knows of a raw request's origin: where it came from, and whether it belongs
/// to a dialog the caller keeps.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Peer {
    pub(crate) source: Option<std::net::IpAddr>,
    pub(crate) known_dialog: bool,
}

impl Peer {
    /// `request` with this origin.
    pub(crate) fn apply<'r>(self, request: Request<'r>) -> Request<'r> {
        Request {
            source: self.source,
            known_dialog: self.known_dialog,
            ..request
        }
    }

    /// The origin `options` give (NULL: none), with the options' transport: their flags, transport
    /// and source checked (the checks of `lc_classify_sip_opts` and `lc_oc_category_sip`).
    pub(crate) fn of_options(options: Option<&lc_sip_options>) -> Result<(Peer, Transport), Code> {
        let Some(o) = options else {
            return Ok((Peer::default(), Transport::Udp));
        };
        let flags = crate::abi::checked_flags(o.flags, SIP_FLAGS_KNOWN, "lc_sip_options.flags")?;
        let transport = crate::abi::checked(o.transport, "lc_sip_options.transport")?;
        Ok((
            Peer {
                source: o.source.to_rust("lc_sip_options.source")?,
                known_dialog: flags & LC_SIP_KNOWN_DIALOG != 0,
            },
            transport,
        ))
    }
}

/// The result code for a raw request the scanner refused (also used by `lc_detector_*_sip`).
pub(crate) fn sip_error(e: SipError) -> Code {
    match e {
        SipError::Truncated => Code::SipTruncated,
        SipError::BadRequestLine => Code::SipBadRequestLine,
        SipError::NotARequest => Code::SipNotARequest,
        SipError::BadHeader => Code::SipBadHeader,
        SipError::MissingHeader(_) => Code::SipMissingHeader,
        SipError::BadCSeq => Code::SipBadCseq,
        SipError::RepeatedHeader(_) => Code::SipBadHeader,
    }
}

/// [`sip_error`], with the scanner's message as the call's error detail.
pub(crate) fn sip_error_detail(e: SipError) -> Code {
    crate::error::fail(sip_error(e), format_args!("SIP: {e}"))
}

/// The checked contents of an `lc_sip_options` (or of `lc_classify_sip`'s transport): what
/// classifying a raw request takes besides the message.
#[derive(Clone, Copy, Debug, Default)]
struct SipOptions<'a> {
    peer: Peer,
    transport: Transport,
    time: Option<Time>,
    target: Option<&'a str>,
}

impl<'a> SipOptions<'a> {
    /// `options` checked (NULL: the defaults, UDP at the engine's clock with no target and an
    /// unknown origin): flags, transport, source and a UTF-8 target, before anything happens.
    ///
    /// # Safety
    /// `options` NULL or readable, its `target` NULL or readable during `'a`.
    unsafe fn checked(options: *const lc_sip_options) -> Result<Self, Code> {
        // SAFETY: NULL or readable by the caller's contract.
        let Some(o) = (unsafe { options.as_ref() }) else {
            return Ok(SipOptions::default());
        };
        let (peer, transport) = Peer::of_options(Some(o))?;
        // SAFETY: `target` is NULL or readable during 'a by the caller's contract.
        let target = unsafe { o.target.to_opt_str("lc_sip_options.target") }?;
        let time = (o.flags & LC_SIP_HAS_TIME != 0).then_some(Time {
            monotonic_ns: o.monotonic_ns,
            unix_ns: i128::from(o.unix_ns),
        });
        Ok(SipOptions {
            peer,
            transport,
            time,
            target,
        })
    }
}

/// Classifies a scanned request as `lc_classify_sip_opts` does: the shared body of the raw and
/// the scanned entry points, after their checks.
fn classify_scan(
    worker: &mut lc_worker,
    scanned: &Scan<'_>,
    o: SipOptions<'_>,
    out: Out<'_, lc_decision>,
) -> Code {
    let request = scanned.request(o.transport, o.time).with_target(o.target);
    decide(worker, &o.peer.apply(request), out);
    Code::Ok
}

/// Scans `msg`, then [`classify_scan`].
fn classify_raw(
    worker: &mut lc_worker,
    msg: &[u8],
    o: SipOptions<'_>,
    out: Out<'_, lc_decision>,
) -> Code {
    let scanned = try_!(sip::scan(msg).map_err(sip_error_detail));
    classify_scan(worker, &Scan::new(scanned), o, out)
}

/// Scans a raw SIP request (`len` bytes: request line and headers; a body is ignored) and
/// classifies it like `lc_classify`, without allocating, at the engine's clock. It has no
/// target entity, so rules with a `target-sip-entity` never match: `lc_classify_sip_opts` takes
/// the next hop (and the request's time). `msg` is read during the call only; the decision's
/// strings point into the policy (see `lc_decision`), never into `msg`.
///
/// Errors: a malformed message gets an `LC_RESULT_SIP_*` code (`lc_last_error` says what is
/// malformed); a `transport` that is no `LC_TRANSPORT_*` value `LC_RESULT_INVALID_ARGUMENT`
/// (checked before the message is scanned). No decision is written then.
///
/// # Safety
/// `worker` from `lc_worker_attach` (this thread only); `msg` readable for `len` bytes; `out`
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_classify_sip(
    worker: *mut lc_worker,
    msg: *const u8,
    len: usize,
    transport: lc_transport,
    out: *mut lc_decision,
) -> lc_result {
    boundary(|| {
        let worker = try_mut!(worker);
        let bytes = try_slice!(msg, len);
        let out = try_out!(out);
        let transport = try_value!(transport, "lc_classify_sip: transport");
        let o = SipOptions {
            transport,
            ..SipOptions::default()
        };
        classify_raw(worker, bytes, o, out)
    })
}

/// Like `lc_classify_sip`, with options: the target entity (the next hop the request will be
/// routed to, so that rules with a `target-sip-entity` can match), the request's time, and the
/// transport (see `lc_sip_options`). `options` and its `target` are read during the call only.
///
/// Errors: those of `lc_classify_sip`. The options are checked before the message is scanned: an
/// undeclared flag bit or transport value gives `LC_RESULT_INVALID_ARGUMENT`, a target that is
/// not UTF-8 `LC_RESULT_INVALID_UTF8`. No decision is written then.
///
/// # Safety
/// `worker` from `lc_worker_attach` (this thread only); `msg` readable for `len` bytes;
/// `options` readable (its `target` readable during the call); `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_classify_sip_opts(
    worker: *mut lc_worker,
    msg: *const u8,
    len: usize,
    options: *const lc_sip_options,
    out: *mut lc_decision,
) -> lc_result {
    boundary(|| {
        let worker = try_mut!(worker);
        let bytes = try_slice!(msg, len);
        let options = try_ref!(options);
        let out = try_out!(out);
        // SAFETY: readable, its target readable during the call, by contract.
        let o = try_!(unsafe { SipOptions::checked(options) });
        classify_raw(worker, bytes, o, out)
    })
}

/// Classifies a request `lc_sip_scan` scanned, exactly as `lc_classify_sip_opts` classifies the
/// same message with the same options, without scanning it again. `options` NULL means the
/// defaults (those of a zeroed `lc_sip_options`: UDP, the engine's clock, no target, an unknown
/// origin). `options` and its `target` are read during the call only; the decision's strings
/// point into the policy (see `lc_decision`), never into the message.
///
/// Errors: the options' errors of `lc_classify_sip_opts`; `LC_RESULT_INVALID_ARGUMENT` for a
/// `scanned` that holds no successful scan (zeroed, or its `lc_sip_scan` failed). No decision
/// is written then.
///
/// # Safety
/// `worker` from `lc_worker_attach` (this thread only); `scanned` filled by `lc_sip_scan`, its
/// message unchanged and readable (see `lc_scanned_sip`); `options` NULL or readable (its
/// `target` readable during the call); `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_classify_scanned(
    worker: *mut lc_worker,
    scanned: *const crate::scanned::lc_scanned_sip,
    options: *const lc_sip_options,
    out: *mut lc_decision,
) -> lc_result {
    boundary(|| {
        let worker = try_mut!(worker);
        let out = try_out!(out);
        // SAFETY: NULL or readable, its target readable during the call, by contract.
        let o = try_!(unsafe { SipOptions::checked(options) });
        // SAFETY: NULL or filled by lc_sip_scan, its message kept, by contract.
        let request = try_!(unsafe { crate::scanned::load(scanned) });
        classify_scan(worker, &request, o, out)
    })
}

/// Gives back the window slot of a completed transaction (`lc_decision.ticket` of a decision
/// with `has_ticket`): call it once per ticket when the transaction ends (final response,
/// timeout, or the request is abandoned). Any worker of the same engine, or of another engine on
/// the same shared cell table, may complete any ticket, also after the rule changed or was
/// removed (the engine keeps a removed window rule's cell until its slots are back; completing
/// such a ticket takes a short lock, other completions none). `ticket` is read during the call
/// only.
///
/// Any 16 bytes are safe to pass: a ticket whose key names no window rule the engine knows
/// releases nothing and returns `LC_RESULT_OK`; a window never holds more free slots than its
/// size. A ticket completed twice (or forged with a real rule's key) frees a slot that another
/// transaction still holds, so the window may admit one more than its size until that
/// transaction completes: don't.
///
/// # Safety
/// `worker` from `lc_worker_attach` (this thread only); `ticket` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_complete(
    worker: *mut lc_worker,
    ticket: *const lc_ticket,
) -> lc_result {
    boundary(|| {
        let worker = try_mut!(worker);
        let t = *try_ref!(ticket);
        worker.shard.complete(Ticket::from_parts(t.key, t.hint));
        Code::Ok
    })
}
