//! The `load-control` event package through the C ABI: subscriber and notifier handles around
//! the sans-I/O state machines of `loadctl::event`.
//!
//! The SIP stack parses SUBSCRIBE / NOTIFY messages and responses into an [`lc_sip_message`]
//! and feeds them in; it sends what `…_poll_transmit` returns and what `…_handle_notify` /
//! `…_handle_subscribe` write as the response. Strings in a message or event written by a
//! handle stay valid until the next call on the same handle. Times are monotonic nanoseconds.
//!
//! In-dialog requests go to the dialog's remote target through its route set (RFC 3261
//! §12.2.1.1): the stack passes the Contact and Record-Route of what it receives
//! (`lc_sip_message.contact`, `.record_route`), and a request the handle produces carries the
//! remote target as its Request-URI and the route set in `.route`; send it to the first
//! `.route` URI, else to the Request-URI.

use std::sync::Arc;

use loadctl::event::allocator::AllocatorConfig;
use loadctl::event::notifier::{
    Authorization, DialogRecord, Notifier, NotifierConfig, NotifierEvent, ShutdownReason,
};
use loadctl::event::subscriber::{IgnoreReason, Subscriber, SubscriberConfig, SubscriberEvent};
use loadctl::event::{Method, NameAddr, Request, Response};
use loadctl::policy::{self, Uri};

use crate::abi::FromC;
use crate::engine::lc_engine;
use crate::{Code, boundary, lc_result, lc_str};

/// SUBSCRIBE or NOTIFY: an `LC_METHOD_*` value (anything else passed in is
/// `LC_RESULT_INVALID_ARGUMENT`).
pub type lc_method = u32;
/// SUBSCRIBE.
pub const LC_METHOD_SUBSCRIBE: lc_method = 0;
/// NOTIFY.
pub const LC_METHOD_NOTIFY: lc_method = 1;

impl FromC for Method {
    const C_NAMES: &'static str = "LC_METHOD_*";

    fn from_c(value: u32) -> Option<Self> {
        match value {
            LC_METHOD_SUBSCRIBE => Some(Method::Subscribe),
            LC_METHOD_NOTIFY => Some(Method::Notify),
            _ => None,
        }
    }
}

/// The `lc_method` of a method.
fn method_to_c(m: Method) -> lc_method {
    match m {
        Method::Subscribe => LC_METHOD_SUBSCRIBE,
        Method::Notify => LC_METHOD_NOTIFY,
    }
}

/// A SUBSCRIBE or NOTIFY request (`status` 0) or a response to one (`status` ≥ 100).
/// Absent strings have a NULL `ptr`; absent numbers are -1.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_sip_message {
    /// 0 for a request, else the response status.
    pub status: u16,
    /// The request's method (for a response: the method it answers): an `LC_METHOD_*` value.
    pub method: lc_method,
    /// Request-URI (requests).
    pub request_uri: lc_str,
    /// Call-ID.
    pub call_id: lc_str,
    /// From URI.
    pub from_uri: lc_str,
    /// From tag.
    pub from_tag: lc_str,
    /// To URI.
    pub to_uri: lc_str,
    /// To tag.
    pub to_tag: lc_str,
    /// CSeq number.
    pub cseq: u32,
    /// Event header value.
    pub event: lc_str,
    /// Accept header value.
    pub accept: lc_str,
    /// Subscription-State header value.
    pub subscription_state: lc_str,
    /// Content-Type header value.
    pub content_type: lc_str,
    /// The body.
    pub body: lc_str,
    /// Expires, or -1.
    pub expires: i64,
    /// Min-Expires, or -1.
    pub min_expires: i64,
    /// Retry-After, or -1.
    pub retry_after: i64,
    /// The Contact URI of a received request or response (the remote target: a 2xx to
    /// SUBSCRIBE and every NOTIFY carry the notifier's, a SUBSCRIBE the subscriber's). Absent
    /// on what the handles produce: the SIP stack adds its own Contact.
    pub contact: lc_str,
    /// The Record-Route header values of a received message, comma-separated, in message
    /// order (`<sip:p1;lr>, <sip:p2;lr>`); absent for none. Ignored on a response to a NOTIFY.
    pub record_route: lc_str,
    /// On a request a handle produces: the dialog's route set as one Route header value
    /// (`<sip:p1;lr>, <sip:p2;lr>`), absent when empty. Put it in the request as Route and
    /// send the request to its first URI, or to the Request-URI when absent (RFC 3261 §8.1.2;
    /// every entry is taken as a loose router). Ignored on what the caller passes in.
    pub route: lc_str,
}

fn opt_str(s: &Option<String>) -> lc_str {
    s.as_ref()
        .map_or(lc_str::NONE, |v| lc_str::from_bytes(v.as_bytes()))
}

fn num(v: Option<u32>) -> i64 {
    v.map_or(-1, i64::from)
}

fn from_num(v: i64) -> Option<u32> {
    u32::try_from(v).ok()
}

/// `route`: the request's route set as text, kept by the caller until its next call.
fn request_to_c(r: &Request, route: &str) -> lc_sip_message {
    lc_sip_message {
        status: 0,
        method: method_to_c(r.method),
        request_uri: lc_str::from_bytes(r.request_uri.as_str().as_bytes()),
        call_id: lc_str::from_bytes(r.call_id.as_bytes()),
        from_uri: lc_str::from_bytes(r.from.uri.as_str().as_bytes()),
        from_tag: opt_str(&r.from.tag),
        to_uri: lc_str::from_bytes(r.to.uri.as_str().as_bytes()),
        to_tag: opt_str(&r.to.tag),
        cseq: r.cseq,
        event: opt_str(&r.event),
        accept: opt_str(&r.accept),
        subscription_state: opt_str(&r.subscription_state),
        content_type: opt_str(&r.content_type),
        body: if r.body.is_empty() {
            lc_str::NONE
        } else {
            lc_str::from_bytes(&r.body)
        },
        expires: num(r.expires),
        min_expires: -1,
        retry_after: -1,
        contact: lc_str::NONE,
        record_route: lc_str::NONE,
        route: if route.is_empty() {
            lc_str::NONE
        } else {
            lc_str::from_bytes(route.as_bytes())
        },
    }
}

fn response_to_c(r: &Response) -> lc_sip_message {
    lc_sip_message {
        status: r.status,
        method: method_to_c(r.method),
        request_uri: lc_str::NONE,
        call_id: lc_str::from_bytes(r.call_id.as_bytes()),
        from_uri: lc_str::from_bytes(r.from.uri.as_str().as_bytes()),
        from_tag: opt_str(&r.from.tag),
        to_uri: lc_str::from_bytes(r.to.uri.as_str().as_bytes()),
        to_tag: opt_str(&r.to.tag),
        cseq: r.cseq,
        event: lc_str::NONE,
        accept: lc_str::NONE,
        subscription_state: lc_str::NONE,
        content_type: lc_str::NONE,
        body: lc_str::NONE,
        expires: num(r.expires),
        min_expires: num(r.min_expires),
        retry_after: num(r.retry_after),
        contact: lc_str::NONE,
        record_route: lc_str::NONE,
        route: lc_str::NONE,
    }
}

/// # Safety
/// `s` must be NULL-pointered or readable.
unsafe fn text(s: lc_str, what: &str) -> Result<Option<String>, Code> {
    // SAFETY: by the caller's contract.
    Ok(unsafe { s.to_opt_str(what) }?.map(str::to_owned))
}

/// # Safety
/// As for [`text`].
unsafe fn uri(s: lc_str, what: &str) -> Result<Uri, Code> {
    // SAFETY: by the caller's contract.
    let s = unsafe { s.to_str(what) }?;
    Uri::new(s).map_err(|e| crate::abi::invalid(what, format_args!("{s:?}: {e}")))
}

/// # Safety
/// As for [`text`].
unsafe fn opt_uri(s: lc_str, what: &str) -> Result<Option<Uri>, Code> {
    // SAFETY: by the caller's contract.
    match unsafe { s.to_opt_str(what) }? {
        None => Ok(None),
        Some(t) => Uri::new(t)
            .map(Some)
            .map_err(|e| crate::abi::invalid(what, format_args!("{t:?}: {e}"))),
    }
}

/// # Safety
/// As for [`text`].
unsafe fn uri_list(s: lc_str, what: &str) -> Result<Vec<Uri>, Code> {
    // SAFETY: by the caller's contract.
    match unsafe { s.to_opt_str(what) }? {
        None => Ok(Vec::new()),
        Some(t) => loadctl::event::wire::route_list(t.as_bytes())
            .map_err(|e| crate::abi::invalid(what, format_args!("{t:?}: {e}"))),
    }
}

/// # Safety
/// Every string of `m` readable or absent.
unsafe fn request_from_c(m: &lc_sip_message) -> Result<Request, Code> {
    let method = crate::abi::checked(m.method, "lc_sip_message.method")?;
    // SAFETY: the caller promises readable strings.
    unsafe {
        let mut r = Request::new(
            method,
            uri(m.request_uri, "lc_sip_message.request_uri")?,
            m.call_id.to_str("lc_sip_message.call_id")?,
            NameAddr {
                uri: uri(m.from_uri, "lc_sip_message.from_uri")?,
                tag: text(m.from_tag, "lc_sip_message.from_tag")?,
            },
            NameAddr {
                uri: uri(m.to_uri, "lc_sip_message.to_uri")?,
                tag: text(m.to_tag, "lc_sip_message.to_tag")?,
            },
            m.cseq,
        );
        r.event = text(m.event, "lc_sip_message.event")?;
        r.expires = from_num(m.expires);
        r.accept = text(m.accept, "lc_sip_message.accept")?;
        r.subscription_state = text(m.subscription_state, "lc_sip_message.subscription_state")?;
        r.content_type = text(m.content_type, "lc_sip_message.content_type")?;
        r.body = m.body.bytes().map(<[u8]>::to_vec).unwrap_or_default();
        r.contact = opt_uri(m.contact, "lc_sip_message.contact")?;
        r.record_route = uri_list(m.record_route, "lc_sip_message.record_route")?;
        Ok(r)
    }
}

/// Reads the request in `msg`, lets `handle` answer it, keeps the answer in `keep` (its strings
/// stay valid until the handle's next call) and writes it to `response`: what
/// `lc_subscriber_handle_notify` and `lc_notifier_handle_subscribe` share.
///
/// # Safety
/// Every string of `msg` readable or absent.
unsafe fn answer(
    msg: &lc_sip_message,
    response: crate::Out<'_, lc_sip_message>,
    keep: &mut Option<Response>,
    handle: impl FnOnce(&Request) -> Response,
) -> Code {
    // SAFETY: readable strings by this function's contract.
    let req = try_!(unsafe { request_from_c(msg) });
    let r = keep.insert(handle(&req));
    response.write(response_to_c(r));
    Code::Ok
}

/// # Safety
/// As for [`request_from_c`].
unsafe fn response_from_c(m: &lc_sip_message) -> Result<Response, Code> {
    if m.status < 100 {
        return Err(crate::abi::invalid(
            "lc_sip_message.status",
            format_args!("{} is not a SIP status code (100 or above)", m.status),
        ));
    }
    let method = crate::abi::checked(m.method, "lc_sip_message.method")?;
    // SAFETY: the caller promises readable strings.
    unsafe {
        Ok(Response {
            status: m.status,
            reason: loadctl::event::reason_phrase(m.status).to_owned(),
            method,
            call_id: m.call_id.to_str("lc_sip_message.call_id")?.to_owned(),
            cseq: m.cseq,
            from: NameAddr {
                uri: uri(m.from_uri, "lc_sip_message.from_uri")?,
                tag: text(m.from_tag, "lc_sip_message.from_tag")?,
            },
            to: NameAddr {
                uri: uri(m.to_uri, "lc_sip_message.to_uri")?,
                tag: text(m.to_tag, "lc_sip_message.to_tag")?,
            },
            expires: from_num(m.expires),
            min_expires: from_num(m.min_expires),
            retry_after: from_num(m.retry_after),
            contact: opt_uri(m.contact, "lc_sip_message.contact")?,
            record_route: uri_list(m.record_route, "lc_sip_message.record_route")?,
        })
    }
}

fn words(s: Option<String>) -> Vec<String> {
    s.map(|v| v.split_ascii_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Takes a handle's next request (`next`), keeps it and its route set in `slot` / `route`
/// (their strings stay valid until the handle's next call) and writes it to `out`, or
/// `Empty`: the body of both `…_poll_transmit`.
fn transmit_next(
    slot: &mut Option<Request>,
    route: &mut String,
    next: Option<Request>,
    out: crate::Out<'_, lc_sip_message>,
) -> Code {
    *slot = next;
    let Some(r) = slot else {
        return Code::Empty;
    };
    *route = loadctl::event::wire::route_text(&r.route);
    out.write(request_to_c(r, route));
    Code::Ok
}

/// Writes a handle's next timer to `out`, or `Empty`: the body of both `…_poll_timeout`.
fn timeout_to_c(at: Option<u64>, out: crate::Out<'_, u64>) -> Code {
    match at {
        None => Code::Empty,
        Some(t) => {
            out.write(t);
            Code::Ok
        }
    }
}

/// Reads the response in `m` and hands it to `handle`: the body of both
/// `…_handle_response`.
///
/// # Safety
/// Every string of `m` readable or absent.
unsafe fn take_response(m: &lc_sip_message, handle: impl FnOnce(&Response)) -> Code {
    // SAFETY: by this function's contract.
    handle(&try_!(unsafe { response_from_c(m) }));
    Code::Ok
}

// ------------------------------------------------------------------ subscriber

/// A subscriber: one subscription to one notifier, feeding an engine. One thread at a time.
pub struct lc_subscriber {
    pub(crate) sub: Subscriber,
    out_request: Option<Request>,
    out_route: String,
    out_response: Option<Response>,
    event_text: String,
    event_notifier: String,
    /// What `lc_subscriber_transmit_wire` rendered last.
    pub(crate) wire: crate::wire::Rendered,
}

/// Subscriber settings for `lc_subscriber_new` (zero-initialise, then set the required
/// strings). Read during `lc_subscriber_new` only: the subscriber keeps copies.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_subscriber_config {
    /// The notifier's URI (required).
    pub notifier: lc_str,
    /// This server's URI (required).
    pub subscriber: lc_str,
    /// Call-ID stem (required; subscription n uses `stem-n`).
    pub call_id: lc_str,
    /// From-tag stem (required).
    pub tag: lc_str,
    /// Requested duration, seconds; 0 means the default 3600.
    pub expires: u32,
    /// Who may send NOTIFYs besides the notifier's own host: space-separated hosts or domains
    /// (`example.net` takes `example.net` and `p1.example.net`; a leading `*.` is ignored),
    /// compared case-insensitively with the host of the NOTIFY's From URI (a `sip:`/`sips:`
    /// URI; any other scheme is never trusted). Absent: the notifier's host only. A NOTIFY from
    /// outside is answered 481 and reported (`LC_SUBSCRIBER_EVENT_KIND_NOTIFY_REJECTED`).
    pub trust: lc_str,
    /// Reserved: never read (whatever it holds, even bytes that are not UTF-8), removed at the
    /// next major version. Which redirect targets a notifier may use is the engine's
    /// `lc_engine_config.redirect_allow` (plus the notifier's own domain, RFC 7200 §7); the
    /// subscriber reports (`LC_SUBSCRIBER_EVENT_KIND_REDIRECT_OUTSIDE_ALLOW_LIST`) each rule the
    /// engine refuses, once.
    pub redirect_allow: lc_str,
    /// Scope rules without target-sip-entity to the notifier's URI (RFC 7200 §5.3.3 MAY): they
    /// then match only requests classified with that target (`lc_request.target`,
    /// `lc_sip_options.target`), never requests without one. Default (zero) false: they apply
    /// whatever the target. A C boolean as a byte: 0 or 1, anything else
    /// `LC_RESULT_INVALID_ARGUMENT`.
    pub scope_to_notifier: u8,
}

/// What a subscriber reports: an `LC_SUBSCRIBER_EVENT_KIND_*` value (`lc_subscriber_event.kind`;
/// later versions may add kinds: switch with a `default`).
pub type lc_subscriber_event_kind = u32;
/// Subscribed (`number`: granted seconds).
pub const LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED: lc_subscriber_event_kind = 0;
/// The notifier reported pending.
pub const LC_SUBSCRIBER_EVENT_KIND_PENDING: lc_subscriber_event_kind = 1;
/// A document was applied (`number`: version, `generation`).
pub const LC_SUBSCRIBER_EVENT_KIND_POLICY_APPLIED: lc_subscriber_event_kind = 2;
/// This notifier's rules were removed (`terminated`).
pub const LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN: lc_subscriber_event_kind = 3;
/// A document was ignored (`number`: version; `text`: why).
pub const LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_IGNORED: lc_subscriber_event_kind = 4;
/// An invalid document, refused; the policy stays (`number`: the version it claims, or
/// `LC_VERSION_UNKNOWN`; `notifier`; `text`: the reader's error).
pub const LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT: lc_subscriber_event_kind = 5;
/// The engine refused the document; the policy stays (`number`: version; `notifier`;
/// `text`).
pub const LC_SUBSCRIBER_EVENT_KIND_APPLY_FAILED: lc_subscriber_event_kind = 6;
/// A body of another type was discarded (`text`: its type).
pub const LC_SUBSCRIBER_EVENT_KIND_UNKNOWN_BODY: lc_subscriber_event_kind = 7;
/// Rules redirect outside the agreed list (`text`: their ids).
pub const LC_SUBSCRIBER_EVENT_KIND_REDIRECT_OUTSIDE_ALLOW_LIST: lc_subscriber_event_kind = 8;
/// A NOTIFY was refused (`number`: status; `text`: why).
pub const LC_SUBSCRIBER_EVENT_KIND_NOTIFY_REJECTED: lc_subscriber_event_kind = 9;
/// Will retry (`at_ns`; `text`: what failed).
pub const LC_SUBSCRIBER_EVENT_KIND_RETRYING: lc_subscriber_event_kind = 10;
/// The subscription lapsed; its rules stay.
pub const LC_SUBSCRIBER_EVENT_KIND_LAPSED: lc_subscriber_event_kind = 11;
/// Stopped for good (`text`: why).
pub const LC_SUBSCRIBER_EVENT_KIND_STOPPED: lc_subscriber_event_kind = 12;
/// The document about to be applied came with reader warnings; it applies (`number`:
/// version; `notifier`; `text`: the warnings, one per line). A POLICY_APPLIED follows.
pub const LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_WARNINGS: lc_subscriber_event_kind = 13;
/// A NOTIFY without a body: nothing to update, the policy stays (RFC 7200 §4.8).
pub const LC_SUBSCRIBER_EVENT_KIND_NOTHING_TO_UPDATE: lc_subscriber_event_kind = 14;

/// `lc_subscriber_event.number` of an INVALID_DOCUMENT whose version could not be read.
pub const LC_VERSION_UNKNOWN: u64 = u64::MAX;

/// One subscriber event; `text` is valid until the next call on the handle.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_subscriber_event {
    /// What happened.
    pub kind: lc_subscriber_event_kind,
    /// Version, seconds or status, by kind.
    pub number: u64,
    /// Engine generation (`POLICY_APPLIED`).
    pub generation: u64,
    /// When (`RETRYING`).
    pub at_ns: u64,
    /// Details, by kind.
    pub text: lc_str,
    /// Who sent the document (the NOTIFY's From URI) for DOCUMENT_WARNINGS,
    /// INVALID_DOCUMENT and APPLY_FAILED; absent otherwise. Valid until the next call.
    pub notifier: lc_str,
}

/// What a subscriber has counted since it was created (`lc_subscriber_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_subscriber_counters {
    /// NOTIFYs handled.
    pub notifies: u64,
    /// Documents applied.
    pub applied: u64,
    /// Documents applied with reader warnings.
    pub warned: u64,
    /// NOTIFYs without a body (nothing to update).
    pub bodyless: u64,
    /// Documents ignored (stale version or gap).
    pub ignored: u64,
    /// Documents refused (invalid, or refused by the engine).
    pub refused: u64,
    /// Times the notifier's rules were withdrawn (`terminated`).
    pub withdrawn: u64,
    /// NOTIFYs answered with an error.
    pub rejected: u64,
}

/// The subscriber configuration `c` describes.
///
/// # Safety
/// Every string of `c` readable or absent.
unsafe fn subscriber_config(c: &lc_subscriber_config) -> Result<SubscriberConfig, Code> {
    // SAFETY: by this function's contract.
    unsafe {
        let (call_id, tag) = (
            c.call_id.to_str("lc_subscriber_config.call_id")?,
            c.tag.to_str("lc_subscriber_config.tag")?,
        );
        let mut sc = SubscriberConfig::new(
            uri(c.notifier, "lc_subscriber_config.notifier")?,
            uri(c.subscriber, "lc_subscriber_config.subscriber")?,
            call_id,
            tag,
        );
        if c.expires > 0 {
            sc.expires = c.expires;
        }
        sc.trust = words(text(c.trust, "lc_subscriber_config.trust")?);
        sc.scope_to_notifier = crate::abi::checked_bool(
            c.scope_to_notifier,
            "lc_subscriber_config.scope_to_notifier",
        )?;
        Ok(sc)
    }
}

/// Creates a subscriber feeding `engine` (which it keeps alive: the engine may be freed first)
/// and writes it to `*out` (the caller's, freed with `lc_subscriber_free`). Its first SUBSCRIBE
/// is ready in `lc_subscriber_poll_transmit` (or `lc_subscriber_transmit_wire`). The subscriber
/// copies `config` and its strings during the call.
///
/// - The notifier's documents are published to `engine` under the source name
///   `config->notifier`, exactly as spelled there (so `lc_engine_withdraw(engine,
///   config->notifier, …)` removes them), with the notifier as their origin (its redirect targets
///   are checked against its own domain and `lc_engine_config.redirect_allow`, RFC 7200 §7).
/// - A NOTIFY is taken only from the trust domain: its From URI must be a `sip:`/`sips:` URI
///   whose host equals `config->notifier`'s host, or equals or lies under (`p1.example.net` under
///   `example.net`) one of the space-separated entries of `trust` (compared case-insensitively;
///   a leading `*.` is allowed and ignored). Others are answered 481 and reported
///   (`LC_SUBSCRIBER_EVENT_KIND_NOTIFY_REJECTED`).
///
/// Errors: `LC_RESULT_NULL_PARAMETER` for a NULL `notifier`, `subscriber`, `call_id` or `tag`;
/// `LC_RESULT_INVALID_ARGUMENT` when `notifier` or `subscriber` is not a URI or
/// `scope_to_notifier` is neither 0 nor 1; `LC_RESULT_INVALID_UTF8` for a string that is not
/// UTF-8 (`lc_last_error` names the field).
///
/// # Safety
/// `engine` from `lc_engine_new`; `config` valid with readable strings; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_new(
    engine: *const lc_engine,
    config: *const lc_subscriber_config,
    now_ns: u64,
    out: *mut *mut lc_subscriber,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let c = try_ref!(config);
        let out = try_out!(out);
        // SAFETY: strings readable by contract.
        let sc = try_!(unsafe { subscriber_config(c) });
        let handle = lc_subscriber {
            sub: Subscriber::new(sc, engine.clone(), now_ns),
            out_request: None,
            out_route: String::new(),
            out_response: None,
            event_text: String::new(),
            event_notifier: String::new(),
            wire: crate::wire::Rendered::default(),
        };
        out.write(Box::into_raw(Box::new(handle)));
        Code::Ok
    })
}

/// Frees a subscriber. Nothing is sent (call `lc_subscriber_unsubscribe` and send its SUBSCRIBE
/// first to end the subscription politely) and its rules stay in the engine (withdraw them with
/// `lc_engine_withdraw(engine, config->notifier, …)` if wanted). Strings it handed out become
/// invalid. `NULL` is a no-op.
///
/// # Safety
/// `sub` NULL or from `lc_subscriber_new`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_free(sub: *mut lc_subscriber) {
    // SAFETY: NULL or from Box::into_raw in lc_subscriber_new, freed once.
    let _ = boundary(|| unsafe { crate::free_box(sub) });
}

/// Takes the next SUBSCRIBE to send (`LC_RESULT_EMPTY` when none) as fields, for a SIP stack
/// that builds its own messages: send it to the first URI of `route` when present, else to its
/// Request-URI. The strings written into `*out` point into the handle: valid until the next call on the
/// same handle, or its free.
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_poll_transmit(
    sub: *mut lc_subscriber,
    out: *mut lc_sip_message,
) -> lc_result {
    boundary(|| {
        let s = try_mut!(sub);
        let out = try_out!(out);
        let next = s.sub.poll_transmit();
        transmit_next(&mut s.out_request, &mut s.out_route, next, out)
    })
}

/// Feeds a final response to a SUBSCRIBE (a provisional one, or one that answers no SUBSCRIBE of
/// this subscriber's current transaction, is ignored). Results show in the events
/// (`LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED`, `RETRYING`, `STOPPED`, …) and timers.
///
/// Errors: `LC_RESULT_INVALID_ARGUMENT` when `msg->status` is below 100, `msg->method` is no
/// `LC_METHOD_*` value, or a URI field is not a URI; `LC_RESULT_NULL_PARAMETER` for a NULL
/// `call_id`, `from_uri` or `to_uri`.
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `msg` valid with readable strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_handle_response(
    sub: *mut lc_subscriber,
    now_ns: u64,
    msg: *const lc_sip_message,
) -> lc_result {
    boundary(|| {
        let (s, m) = (try_mut!(sub), try_ref!(msg));
        // SAFETY: readable strings by contract.
        unsafe { take_response(m, |r| s.sub.handle_response(now_ns, r)) }
    })
}

/// Feeds a NOTIFY: when it is this subscription's and from the trust domain, applies its body to
/// the engine (a full document replaces the notifier's rules, a partial one merges, a bodyless
/// one keeps them, `terminated` withdraws them) and writes the response to send into
/// `*response` — 200, or an error status (400, 481, 489, …) for a NOTIFY refused; either way the
/// call returns `LC_RESULT_OK` and the events say what happened. The strings written into `*response` point into the handle: valid until the next call on the
/// same handle, or its free.
///
/// Errors: `LC_RESULT_INVALID_ARGUMENT` when `msg->method` is no `LC_METHOD_*` value or a URI
/// field is not a URI; `LC_RESULT_NULL_PARAMETER` for a NULL `request_uri`, `call_id`,
/// `from_uri` or `to_uri` (nothing is counted, no response is written).
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `msg` valid with readable strings; `response` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_handle_notify(
    sub: *mut lc_subscriber,
    now_ns: u64,
    msg: *const lc_sip_message,
    response: *mut lc_sip_message,
) -> lc_result {
    boundary(|| {
        let (s, msg, response) = (try_mut!(sub), try_ref!(msg), try_out!(response));
        // SAFETY: readable strings by contract.
        unsafe {
            answer(msg, response, &mut s.out_response, |req| {
                s.sub.handle_notify(now_ns, req)
            })
        }
    })
}

/// Writes when `lc_subscriber_handle_timeout` is next due, in the `now_ns` clock
/// (`LC_RESULT_EMPTY`: no timer). Ask again after every call that feeds the subscriber.
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_poll_timeout(
    sub: *const lc_subscriber,
    out: *mut u64,
) -> lc_result {
    boundary(|| {
        let s = try_ref!(sub);
        timeout_to_c(s.sub.poll_timeout(), try_out!(out))
    })
}

/// Advances the subscriber's timers to `now_ns` (refreshes, retries, expiry); then poll for
/// messages and events. Calling it early or often is harmless.
///
/// # Safety
/// `sub` from `lc_subscriber_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_handle_timeout(
    sub: *mut lc_subscriber,
    now_ns: u64,
) -> lc_result {
    boundary(|| {
        try_mut!(sub).sub.handle_timeout(now_ns);
        Code::Ok
    })
}

/// Starts a new subscription now, whatever the state: after `LC_SUBSCRIBER_EVENT_KIND_STOPPED`
/// (the notifier sent `noresource` or `rejected`, answered 403 or 489, or the subscription was
/// unsubscribed), while waiting out a `retry-after` or a back-off, or on a live dialog (which
/// is abandoned: the notifier's next NOTIFY on it is answered 481). For an operator's "the
/// notifier is back" (an RPC). The back-off starts again from its first delay; the rules in
/// force stay until the new subscription's first document replaces them. Poll the SUBSCRIBE
/// it queues and send it.
///
/// # Safety
/// `sub` from `lc_subscriber_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_resubscribe(
    sub: *mut lc_subscriber,
    now_ns: u64,
) -> lc_result {
    boundary(|| {
        try_mut!(sub).sub.resubscribe(now_ns);
        Code::Ok
    })
}

/// Ends the subscription: with a dialog, a SUBSCRIBE with `Expires: 0` is queued (poll it and
/// send it), and the notifier's rules stay until its final NOTIFY (`terminated`) arrives.
/// Without one (never subscribed, or waiting to retry) it stops at once
/// (`LC_SUBSCRIBER_EVENT_KIND_STOPPED`). Either way the rules stay in the engine until a
/// `terminated` NOTIFY or `lc_engine_withdraw`.
///
/// # Safety
/// `sub` from `lc_subscriber_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_unsubscribe(
    sub: *mut lc_subscriber,
    now_ns: u64,
) -> lc_result {
    boundary(|| {
        try_mut!(sub).sub.unsubscribe(now_ns);
        Code::Ok
    })
}

/// Takes the next event (`LC_RESULT_EMPTY` when none). Its `text` and `notifier` point into the
/// handle: valid until the next call on the same handle, or its free.
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_poll_event(
    sub: *mut lc_subscriber,
    out: *mut lc_subscriber_event,
) -> lc_result {
    boundary(|| {
        let s = try_mut!(sub);
        let out = try_out!(out);
        let Some(ev) = s.sub.poll_event() else {
            return Code::Empty;
        };
        let mut notifier_of = String::new();
        let (kind, number, generation, at_ns, text) = match ev {
            SubscriberEvent::Subscribed { expires } => (
                LC_SUBSCRIBER_EVENT_KIND_SUBSCRIBED,
                u64::from(expires),
                0,
                0,
                String::new(),
            ),
            SubscriberEvent::Pending => (LC_SUBSCRIBER_EVENT_KIND_PENDING, 0, 0, 0, String::new()),
            SubscriberEvent::PolicyApplied {
                version,
                generation,
                ..
            } => (
                LC_SUBSCRIBER_EVENT_KIND_POLICY_APPLIED,
                u64::from(version),
                generation,
                0,
                String::new(),
            ),
            SubscriberEvent::DocumentWarnings {
                notifier,
                version,
                warnings,
            } => {
                notifier_of = notifier;
                (
                    LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_WARNINGS,
                    u64::from(version),
                    0,
                    0,
                    warnings.join("\n"),
                )
            }
            SubscriberEvent::NothingToUpdate => (
                LC_SUBSCRIBER_EVENT_KIND_NOTHING_TO_UPDATE,
                0,
                0,
                0,
                String::new(),
            ),
            SubscriberEvent::PolicyWithdrawn => (
                LC_SUBSCRIBER_EVENT_KIND_POLICY_WITHDRAWN,
                0,
                0,
                0,
                String::new(),
            ),
            SubscriberEvent::DocumentIgnored { version, reason } => {
                let why = match reason {
                    IgnoreReason::Stale { last } => format!("stale: last applied {last}"),
                    IgnoreReason::Gap { expected } => {
                        format!("gap: expected {expected}, re-SUBSCRIBE sent")
                    }
                };
                (
                    LC_SUBSCRIBER_EVENT_KIND_DOCUMENT_IGNORED,
                    u64::from(version),
                    0,
                    0,
                    why,
                )
            }
            SubscriberEvent::InvalidDocument {
                notifier,
                version,
                error,
            } => {
                notifier_of = notifier;
                let v = version.map_or(LC_VERSION_UNKNOWN, u64::from);
                (LC_SUBSCRIBER_EVENT_KIND_INVALID_DOCUMENT, v, 0, 0, error)
            }
            SubscriberEvent::ApplyFailed {
                notifier,
                version,
                error,
            } => {
                notifier_of = notifier;
                (
                    LC_SUBSCRIBER_EVENT_KIND_APPLY_FAILED,
                    u64::from(version),
                    0,
                    0,
                    error.to_string(),
                )
            }
            SubscriberEvent::UnknownBody { content_type } => {
                (LC_SUBSCRIBER_EVENT_KIND_UNKNOWN_BODY, 0, 0, 0, content_type)
            }
            SubscriberEvent::RedirectOutsideAllowList { rules } => (
                LC_SUBSCRIBER_EVENT_KIND_REDIRECT_OUTSIDE_ALLOW_LIST,
                0,
                0,
                0,
                rules.join(" "),
            ),
            SubscriberEvent::NotifyRejected { status, why } => (
                LC_SUBSCRIBER_EVENT_KIND_NOTIFY_REJECTED,
                u64::from(status),
                0,
                0,
                why.to_owned(),
            ),
            SubscriberEvent::Retrying { at_ns, why } => {
                (LC_SUBSCRIBER_EVENT_KIND_RETRYING, 0, 0, at_ns, why)
            }
            SubscriberEvent::Lapsed => (LC_SUBSCRIBER_EVENT_KIND_LAPSED, 0, 0, 0, String::new()),
            SubscriberEvent::Stopped(why) => (
                LC_SUBSCRIBER_EVENT_KIND_STOPPED,
                0,
                0,
                0,
                format!("{why:?}"),
            ),
        };
        s.event_notifier = notifier_of;
        s.event_text = text;
        let event = lc_subscriber_event {
            kind,
            number,
            generation,
            at_ns,
            text: lc_str::from_bytes(s.event_text.as_bytes()),
            notifier: if s.event_notifier.is_empty() {
                lc_str::NONE
            } else {
                lc_str::from_bytes(s.event_notifier.as_bytes())
            },
        };
        out.write(event);
        Code::Ok
    })
}

/// Writes what the subscriber has counted into `*out`.
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_stats(
    sub: *const lc_subscriber,
    out: *mut lc_subscriber_counters,
) -> lc_result {
    boundary(|| {
        let st = try_ref!(sub).sub.stats();
        let out = try_out!(out);
        let c = lc_subscriber_counters {
            notifies: st.notifies,
            applied: st.applied,
            warned: st.warned,
            bodyless: st.bodyless,
            ignored: st.ignored,
            refused: st.refused,
            withdrawn: st.withdrawn,
            rejected: st.rejected,
        };
        out.write(c);
        Code::Ok
    })
}

// ------------------------------------------------------------------ notifier

/// A notifier: pushes policies to its subscribers. One thread at a time.
pub struct lc_notifier {
    pub(crate) notifier: Notifier,
    out_request: Option<Request>,
    out_route: String,
    out_response: Option<Response>,
    event_text: String,
    /// The subscriber named by the last `lc_notifier_share`.
    share_text: String,
    /// What `lc_notifier_transmit_wire` rendered last.
    pub(crate) wire: crate::wire::Rendered,
}

/// Notifier settings for `lc_notifier_new`, read during that call only (they must end up as
/// min ≤ default ≤ max expires, defaults included: a `max_expires` below 3600 needs a
/// `default_expires` too); zero numbers mean the
/// defaults (60 s / 3600 s / 3600 s / 1000 ms).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_notifier_config {
    /// This server's URI (required).
    pub uri: lc_str,
    /// To-tag stem (required).
    pub tag: lc_str,
    /// Space-separated entries naming who may subscribe (RFC 7200 §4.6; others get 403): a SIP
    /// URI (`sip:proxy@192.0.2.7:5060`, compared with the SUBSCRIBE's From URI as RFC 3261
    /// §19.1.4 says), or a host or domain (`p1.example.net`, `example.net`) the From URI's host
    /// is or is inside. Absent: anyone.
    pub authorized: lc_str,
    /// Shortest subscription, seconds.
    pub min_expires: u32,
    /// Longest subscription, seconds.
    pub max_expires: u32,
    /// Duration when a SUBSCRIBE names none, seconds.
    pub default_expires: u32,
    /// Least spacing of NOTIFYs on one subscription, milliseconds.
    pub pacing_ms: u32,
}

/// What a notifier reports: an `LC_NOTIFIER_EVENT_KIND_*` value (`lc_notifier_event.kind`;
/// later versions may add kinds: switch with a `default`).
pub type lc_notifier_event_kind = u32;
/// A new subscription (`text`: subscriber; `number`: seconds).
pub const LC_NOTIFIER_EVENT_KIND_SUBSCRIBED: lc_notifier_event_kind = 0;
/// A refresh (`text`: subscriber).
pub const LC_NOTIFIER_EVENT_KIND_REFRESHED: lc_notifier_event_kind = 1;
/// A SUBSCRIBE was refused (`number`: status; `text`: why).
pub const LC_NOTIFIER_EVENT_KIND_REFUSED: lc_notifier_event_kind = 2;
/// A subscription ended (`text`: subscriber and reason).
pub const LC_NOTIFIER_EVENT_KIND_ENDED: lc_notifier_event_kind = 3;

/// One notifier event; `text` is valid until the next call on the handle.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_notifier_event {
    /// What happened.
    pub kind: lc_notifier_event_kind,
    /// Seconds or status, by kind.
    pub number: u64,
    /// Details.
    pub text: lc_str,
}

/// The notifier configuration `c` describes.
///
/// # Safety
/// Every string of `c` readable or absent.
unsafe fn notifier_config(c: &lc_notifier_config) -> Result<NotifierConfig, Code> {
    // SAFETY: by this function's contract.
    let (tag, authorized, uri) = unsafe {
        (
            c.tag.to_str("lc_notifier_config.tag")?,
            text(c.authorized, "lc_notifier_config.authorized")?,
            uri(c.uri, "lc_notifier_config.uri")?,
        )
    };
    let auth = match authorized {
        None => Authorization::Any,
        Some(list) => {
            let entries = words(Some(list));
            if entries.is_empty() {
                return Err(crate::abi::invalid(
                    "lc_notifier_config.authorized",
                    "empty: it would refuse every subscriber; leave it absent (NULL) for anyone",
                ));
            }
            if let Some(bad) = entries.iter().find(|e| !authorized_entry(e)) {
                return Err(crate::abi::invalid(
                    "lc_notifier_config.authorized",
                    format_args!("{bad:?} is neither a SIP URI nor a host or domain"),
                ));
            }
            Authorization::Domains(entries)
        }
    };
    let mut nc = NotifierConfig::new(uri, tag, auth);
    if c.min_expires > 0 {
        nc.min_expires = c.min_expires;
    }
    if c.max_expires > 0 {
        nc.max_expires = c.max_expires;
    }
    if c.default_expires > 0 {
        nc.default_expires = c.default_expires;
    }
    if c.pacing_ms > 0 {
        nc.pacing_ns = u64::from(c.pacing_ms) * 1_000_000;
    }
    if !(nc.min_expires <= nc.default_expires && nc.default_expires <= nc.max_expires) {
        return Err(crate::abi::invalid(
            "lc_notifier_config",
            format_args!(
                "min_expires {} ≤ default_expires {} ≤ max_expires {} does not hold (0 means the \
                 default 60 / 3600 / 3600)",
                nc.min_expires, nc.default_expires, nc.max_expires
            ),
        ));
    }
    Ok(nc)
}

/// Whether `entry` of `lc_notifier_config.authorized` is usable: a `sip:`/`sips:` URI, or a
/// host or domain (`p1.example.net`, `*.example.net`, `192.0.2.7`, `[2001:db8::1]`).
fn authorized_entry(entry: &str) -> bool {
    let lower = entry.to_ascii_lowercase();
    if lower.starts_with("sip:") || lower.starts_with("sips:") {
        return Uri::new(entry).is_ok_and(|u| matches!(u.parsed(), loadctl::uri::UriRef::Sip(_)));
    }
    let host = entry.strip_prefix("*.").unwrap_or(entry);
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && !host.starts_with('.')
        && !host.contains("..")
}

/// Creates a notifier and writes it to `*out` (the caller's, freed with `lc_notifier_free`). It
/// starts with no policy (subscribers get bodyless NOTIFYs until `lc_notifier_set_policy`). The
/// notifier copies `config` and its strings during the call.
///
/// Errors: `LC_RESULT_NULL_PARAMETER` for a NULL `uri` or `tag`; `LC_RESULT_INVALID_ARGUMENT`
/// when `uri` is not a URI, `authorized` holds an entry that is neither a URI nor a host, or the
/// durations contradict each other (`min_expires` above `max_expires`, …);
/// `LC_RESULT_INVALID_UTF8`.
///
/// # Safety
/// `config` valid with readable strings; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_new(
    config: *const lc_notifier_config,
    out: *mut *mut lc_notifier,
) -> lc_result {
    boundary(|| {
        let c = try_ref!(config);
        let out = try_out!(out);
        // SAFETY: strings readable by contract.
        let nc = try_!(unsafe { notifier_config(c) });
        let handle = lc_notifier {
            notifier: Notifier::new(nc),
            out_request: None,
            out_route: String::new(),
            out_response: None,
            event_text: String::new(),
            share_text: String::new(),
            wire: crate::wire::Rendered::default(),
        };
        out.write(Box::into_raw(Box::new(handle)));
        Code::Ok
    })
}

/// Frees a notifier. Nothing is sent (call `lc_notifier_shutdown` and send its NOTIFYs first
/// to end the subscriptions politely). Strings it handed out become invalid. `NULL` is a no-op.
///
/// # Safety
/// `n` NULL or from `lc_notifier_new`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_free(n: *mut lc_notifier) {
    // SAFETY: NULL or from Box::into_raw in lc_notifier_new, freed once.
    let _ = boundary(|| unsafe { crate::free_box(n) });
}

/// # Safety
/// `body` NULL or readable for `len` bytes.
unsafe fn policy_of(body: *const u8, len: usize) -> Result<Option<Vec<Arc<policy::Rule>>>, Code> {
    if body.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and readable by contract.
    let bytes = unsafe { std::slice::from_raw_parts(body, len) };
    let doc = policy::read(bytes, &policy::Limits::default())
        .map_err(|e| crate::error::fail(Code::InvalidPolicy, e))?;
    let Some(rules) = doc.ruleset.rules() else {
        return Err(crate::error::fail(
            Code::NotFull,
            "the default policy must be a full document",
        ));
    };
    Ok(Some(rules.to_vec()))
}

/// Sets the policy every subscriber without one of its own gets: a full document (`body`,
/// `len`; read during the call), or NULL for "no policy" (subscribers that hold a document
/// get an empty full one; the others, and new subscribers, get bodyless NOTIFYs). NOTIFYs
/// carrying the change are queued, paced per subscription.
///
/// Errors: `LC_RESULT_INVALID_POLICY` when the document does not validate (`lc_last_error`
/// gives `LINE:COLUMN`); `LC_RESULT_NOT_FULL` for a partial document. Nothing changes then.
///
/// # Safety
/// `n` from `lc_notifier_new`; `body` NULL or readable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_set_policy(
    n: *mut lc_notifier,
    now_ns: u64,
    body: *const u8,
    len: usize,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        // SAFETY: readable by contract.
        let policy = try_!(unsafe { policy_of(body, len) });
        h.notifier.set_policy(now_ns, policy);
        Code::Ok
    })
}

/// Sets one subscriber's own policy (a full document, read during the call, or NULL for "no
/// policy"); with `clear` 1 instead reverts the subscriber to the common policy (`body` is then
/// ignored). `clear` is a C boolean as a byte: 0 or 1. `subscriber` is compared with the From
/// URI of the subscriber's SUBSCRIBE in canonical form (RFC 3261 §19.1.4: scheme and host
/// case-insensitive, escapes of unreserved characters equal to the characters); it may name a
/// subscriber that has not subscribed yet.
///
/// Errors: `LC_RESULT_INVALID_ARGUMENT` when `subscriber` is not a URI or `clear` is neither 0
/// nor 1; those of `lc_notifier_set_policy`.
///
/// # Safety
/// `n` from `lc_notifier_new`; `subscriber` readable; `body` NULL or readable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_set_subscriber_policy(
    n: *mut lc_notifier,
    now_ns: u64,
    subscriber: lc_str,
    body: *const u8,
    len: usize,
    clear: u8,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        let clear = try_!(crate::abi::checked_bool(clear, "clear"));
        // SAFETY: readable by contract.
        let who = try_!(unsafe { uri(subscriber, "subscriber") });
        let policy = if clear {
            None
        } else {
            // SAFETY: readable by contract.
            Some(try_!(unsafe { policy_of(body, len) }))
        };
        h.notifier.set_subscriber_policy(now_ns, &who, policy);
        Code::Ok
    })
}

/// How a notifier shares a capacity (`lc_notifier_set_capacity`); fractions are in parts per
/// million, rates in thousandths of a request per second. `lc_allocator_config_default` writes
/// the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_allocator_config {
    /// How often demand is measured and shares recomputed, nanoseconds (> 0; default 1 s).
    pub period_ns: u64,
    /// Weight of the newest period's rate in the smoothed demand, 1 to 1,000,000 (default
    /// 1,000,000: no smoothing beyond measuring over two periods).
    pub alpha_ppm: u32,
    /// A subscriber admitting at least this fraction of its share is constrained, 1 to
    /// 1,000,000 (default 970,000).
    pub busy_ppm: u32,
    /// A constrained subscriber's demand is estimated at its share times 1 + probe, 1 to
    /// 100,000,000 (default 500,000).
    pub probe_ppm: u32,
    /// A donating subscriber keeps its rate times 1 + headroom; (1 + headroom) · busy must
    /// exceed 1, headroom at most 1,000,000 (default 150,000).
    pub headroom_ppm: u32,
    /// A target moves only by more than this fraction, 0 to 999,999 (default 100,000; a
    /// constrained subscriber's rises by more than a tenth of it).
    pub hysteresis_ppm: u32,
    /// The least share of a subscriber, thousandths of a request per second (default 1,000).
    pub min_share_milli: u64,
}

impl lc_allocator_config {
    fn from_rust(c: &AllocatorConfig) -> Self {
        let ppm = |x: f64| (x * 1e6).round() as u32;
        Self {
            period_ns: c.period_ns,
            alpha_ppm: ppm(c.alpha),
            busy_ppm: ppm(c.busy),
            probe_ppm: ppm(c.probe),
            headroom_ppm: ppm(c.headroom),
            hysteresis_ppm: ppm(c.hysteresis),
            min_share_milli: (c.min_share * 1e3).round() as u64,
        }
    }

    fn to_rust(self) -> AllocatorConfig {
        let f = |ppm: u32| f64::from(ppm) / 1e6;
        AllocatorConfig {
            period_ns: self.period_ns,
            alpha: f(self.alpha_ppm),
            busy: f(self.busy_ppm),
            probe: f(self.probe_ppm),
            headroom: f(self.headroom_ppm),
            hysteresis: f(self.hysteresis_ppm),
            min_share: self.min_share_milli as f64 / 1e3,
        }
    }
}

/// Writes the default allocator settings into `*out`.
///
/// # Safety
/// `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_allocator_config_default(out: *mut lc_allocator_config) -> lc_result {
    boundary(|| {
        try_out!(out).write(lc_allocator_config::from_rust(&AllocatorConfig::default()));
        Code::Ok
    })
}

/// Shares a capacity among the subscribers by their demand: `template` (`len` bytes, read
/// during the call) is a full document whose first rule names the class of requests (its
/// conditions and alt-action) and whose `<rate>` is the capacity R; each subscriber gets that
/// rule with its share as `<rate>`. Demand comes from `lc_notifier_observe`. A subscriber's
/// own policy (`lc_notifier_set_subscriber_policy`) wins over its share; the share wins over
/// `lc_notifier_set_policy`'s policy. The shares that subscribers have acknowledged or have in
/// flight never add up to more than R: a share grows only out of capacity nobody else holds,
/// so a new subscriber's first NOTIFY carries what is free (possibly 0). Shares are recomputed
/// once per `period_ns` in `lc_notifier_handle_timeout`. Calling it again with the same rule
/// (id, conditions, alt-action: its `<rate>` may differ) and settings changes only R
/// (measurements kept). `config` NULL means the defaults. NOTIFYs
/// are queued, paced per subscription.
///
/// Errors: `LC_RESULT_INVALID_POLICY` (`lc_last_error` gives `LINE:COLUMN`) and
/// `LC_RESULT_NOT_FULL` as for `lc_notifier_set_policy`; `LC_RESULT_INVALID_ARGUMENT` when the
/// document has no rule, its first rule has no `<rate>`, or a `config` field is out of range
/// (`lc_last_error` names it). Nothing changes then.
///
/// # Safety
/// `n` from `lc_notifier_new`; `template` readable for `len` bytes; `config` NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_set_capacity(
    n: *mut lc_notifier,
    now_ns: u64,
    template: *const u8,
    len: usize,
    config: *const lc_allocator_config,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        if template.is_null() {
            return crate::error::fail(
                Code::NullParameter,
                "template: NULL where a pointer is required",
            );
        }
        let config = if config.is_null() {
            AllocatorConfig::default()
        } else {
            // SAFETY: non-null and readable by contract.
            unsafe { *config }.to_rust()
        };
        // SAFETY: non-null and readable by contract.
        let rules = try_!(unsafe { policy_of(template, len) }).unwrap_or_default();
        let Some(rule) = rules.first() else {
            return crate::error::fail(Code::InvalidArgument, "template: the document has no rule");
        };
        let policy::Limit::Rate(capacity) = rule.accept.limit else {
            return crate::error::fail(
                Code::InvalidArgument,
                "template: the first rule's limit must be a <rate> (the capacity to share)",
            );
        };
        match h
            .notifier
            .set_capacity(now_ns, capacity.per_second(), (**rule).clone(), config)
        {
            Ok(()) => Code::Ok,
            Err(e) => crate::error::fail(Code::InvalidArgument, e),
        }
    })
}

/// Stops sharing a capacity: subscribers get `lc_notifier_set_policy`'s policy again (NOTIFYs
/// queued). Without a shared capacity, nothing happens.
///
/// # Safety
/// `n` from `lc_notifier_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_clear_capacity(n: *mut lc_notifier, now_ns: u64) -> lc_result {
    boundary(|| {
        try_mut!(n).notifier.clear_capacity(now_ns);
        Code::Ok
    })
}

/// Counts `count` requests of the shared class that arrived from `subscriber` (what it
/// admitted) since its previous observation, the last of them at `now_ns`: one call per
/// request with `count` 1, or one per report. `subscriber` is compared with the From URI of
/// the subscriber's SUBSCRIBE as in `lc_notifier_set_subscriber_policy`.
///
/// Errors: `LC_RESULT_UNKNOWN_SOURCE` when no capacity is shared or `subscriber` has no
/// subscription (nothing counted); `LC_RESULT_INVALID_ARGUMENT` when `subscriber` is not a
/// URI.
///
/// # Safety
/// `n` from `lc_notifier_new`; `subscriber` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_observe(
    n: *mut lc_notifier,
    now_ns: u64,
    subscriber: lc_str,
    count: u64,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        // SAFETY: readable by contract.
        let who = try_!(unsafe { uri(subscriber, "subscriber") });
        if h.notifier.observe(now_ns, &who, count) {
            Code::Ok
        } else {
            crate::error::fail(
                Code::UnknownSource,
                format_args!(
                    "subscriber {}: no shared capacity or no subscription",
                    who.as_str()
                ),
            )
        }
    })
}

/// One subscriber of a shared capacity (`lc_notifier_share`); rates in thousandths of a
/// request per second.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_share {
    /// The subscriber's URI (its SUBSCRIBE's From); points into the handle, valid until the
    /// next call on it.
    pub subscriber: lc_str,
    /// Its measured (smoothed) rate; `UINT64_MAX` before its first measurement.
    pub usage_milli: u64,
    /// The share the allocator wants it to have.
    pub target_milli: u64,
    /// The share it acknowledged last; `UINT64_MAX` before any.
    pub in_force_milli: u64,
    /// Its last measurement reached its share (its real demand is unknown).
    pub constrained: bool,
}

/// Writes subscriber number `index` (0, 1, …, in a stable order) of the shared capacity into
/// `*out`; `LC_RESULT_EMPTY` past the last one, or when no capacity is shared.
///
/// # Safety
/// `n` from `lc_notifier_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_share(
    n: *mut lc_notifier,
    index: usize,
    out: *mut lc_share,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        let out = try_out!(out);
        let Some(r) = h.notifier.shares().into_iter().nth(index) else {
            return Code::Empty;
        };
        let milli = |x: f64| (x * 1e3).round() as u64;
        h.share_text = r.subscriber;
        out.write(lc_share {
            subscriber: lc_str::from_bytes(h.share_text.as_bytes()),
            usage_milli: r.usage.map_or(u64::MAX, milli),
            target_milli: milli(r.target),
            in_force_milli: r.in_force.map_or(u64::MAX, milli),
            constrained: r.constrained,
        });
        Code::Ok
    })
}

/// Feeds a SUBSCRIBE; writes the response to send into `*response` — 200 (a NOTIFY follows in
/// `lc_notifier_poll_transmit`), or a refusal (403 for a subscriber that is not `authorized`,
/// 423, 489, …); either way the call returns `LC_RESULT_OK` and the events say what happened.
/// The strings of `*response` point into the handle: valid until the next call on the same
/// handle, or its free.
///
/// Errors: `LC_RESULT_INVALID_ARGUMENT` when `msg->method` is no `LC_METHOD_*` value or a URI
/// field is not a URI; `LC_RESULT_NULL_PARAMETER` for a NULL `request_uri`, `call_id`,
/// `from_uri` or `to_uri`.
///
/// # Safety
/// `n` from `lc_notifier_new`; `msg` valid with readable strings; `response` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_handle_subscribe(
    n: *mut lc_notifier,
    now_ns: u64,
    msg: *const lc_sip_message,
    response: *mut lc_sip_message,
) -> lc_result {
    boundary(|| {
        let (h, msg, response) = (try_mut!(n), try_ref!(msg), try_out!(response));
        // SAFETY: readable strings by contract.
        unsafe {
            answer(msg, response, &mut h.out_response, |req| {
                h.notifier.handle_subscribe(now_ns, req)
            })
        }
    })
}

/// Feeds a final response to a NOTIFY (one that answers no outstanding NOTIFY is ignored). An
/// error response ends that subscription (RFC 6665 §4.2.2), reported as an event.
///
/// Errors: as for `lc_subscriber_handle_response`.
///
/// # Safety
/// `n` from `lc_notifier_new`; `msg` valid with readable strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_handle_response(
    n: *mut lc_notifier,
    now_ns: u64,
    msg: *const lc_sip_message,
) -> lc_result {
    boundary(|| {
        let (h, m) = (try_mut!(n), try_ref!(msg));
        // SAFETY: readable strings by contract.
        unsafe { take_response(m, |r| h.notifier.handle_response(now_ns, r)) }
    })
}

/// Takes the next NOTIFY to send (`LC_RESULT_EMPTY` when none) as fields: send it to the first
/// URI of `route` when present, else to its Request-URI (the subscriber's Contact). The strings written into `*out` point into the handle: valid until the next call on the
/// same handle, or its free.
///
/// # Safety
/// `n` from `lc_notifier_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_poll_transmit(
    n: *mut lc_notifier,
    out: *mut lc_sip_message,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        let out = try_out!(out);
        let next = h.notifier.poll_transmit();
        transmit_next(&mut h.out_request, &mut h.out_route, next, out)
    })
}

/// Writes when `lc_notifier_handle_timeout` is next due, in the `now_ns` clock
/// (`LC_RESULT_EMPTY`: no timer). Ask again after every call that feeds the notifier.
///
/// # Safety
/// `n` from `lc_notifier_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_poll_timeout(
    n: *const lc_notifier,
    out: *mut u64,
) -> lc_result {
    boundary(|| {
        let h = try_ref!(n);
        timeout_to_c(h.notifier.poll_timeout(), try_out!(out))
    })
}

/// Advances the notifier's timers to `now_ns` (paced NOTIFYs, expiries, unanswered NOTIFYs);
/// then poll for messages and events. Calling it early or often is harmless.
///
/// # Safety
/// `n` from `lc_notifier_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_handle_timeout(n: *mut lc_notifier, now_ns: u64) -> lc_result {
    boundary(|| {
        try_mut!(n).notifier.handle_timeout(now_ns);
        Code::Ok
    })
}

/// Why a notifier ends every subscription: an `LC_SHUTDOWN_*` value
/// (`lc_notifier_shutdown_with_reason`; anything else is `LC_RESULT_INVALID_ARGUMENT`).
pub type lc_shutdown_reason = u32;
/// The notifier goes down to come back (a restart, an upgrade): `terminated;reason=probation;
/// retry-after=N`. Subscribers withdraw its rules and SUBSCRIBE again after N seconds (RFC
/// 6665 §4.1.3: "SHOULD wait at least the number of seconds specified").
pub const LC_SHUTDOWN_RESTART: lc_shutdown_reason = 0;
/// The notifier is taken out of service for good: `terminated;reason=noresource`. Subscribers
/// withdraw its rules and do not SUBSCRIBE again ("SHOULD NOT attempt to re-subscribe") until
/// an operator tells them (`lc_subscriber_resubscribe`).
pub const LC_SHUTDOWN_DECOMMISSION: lc_shutdown_reason = 1;

/// The `retry-after` of `lc_notifier_shutdown`, seconds: when the subscribers' new SUBSCRIBE
/// goes out. One that finds the notifier not yet back is retransmitted by the subscriber's SIP
/// stack (every T2 = 4 s for 32 s), so a short value costs little and shortens the time
/// without protection when the restart is quick.
pub const LC_SHUTDOWN_DEFAULT_RETRY_AFTER_S: u32 = 2;

c_enum! {
    /// `lc_shutdown_reason` values.
    enum Shutdown: lc_shutdown_reason {
        Restart = LC_SHUTDOWN_RESTART,
        Decommission = LC_SHUTDOWN_DECOMMISSION,
    }
}

/// Ends every subscription for a restart: the same as `lc_notifier_shutdown_with_reason(n,
/// now_ns, LC_SHUTDOWN_RESTART, LC_SHUTDOWN_DEFAULT_RETRY_AFTER_S)`
/// (`terminated;reason=probation;retry-after=2`), so that subscribers come back. A notifier
/// leaving for good uses `LC_SHUTDOWN_DECOMMISSION`.
///
/// # Safety
/// `n` from `lc_notifier_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_shutdown(n: *mut lc_notifier, now_ns: u64) -> lc_result {
    boundary(|| {
        try_mut!(n).notifier.shutdown(
            now_ns,
            ShutdownReason::Restart {
                retry_after_s: LC_SHUTDOWN_DEFAULT_RETRY_AFTER_S,
            },
        );
        Code::Ok
    })
}

/// Ends every subscription with the `terminated` NOTIFY `reason` calls for (queued: poll and
/// send them before `lc_notifier_free`): `LC_SHUTDOWN_RESTART` with `retry_after_s` as its
/// `retry-after` (1 to 86400 s), or `LC_SHUTDOWN_DECOMMISSION` (`retry_after_s` must be 0:
/// `noresource` has no retry-after, RFC 6665 §4.1.3). From then on the notifier answers every
/// new SUBSCRIBE 503 (with `Retry-After` for a restart). An undeclared `reason` or an
/// out-of-range `retry_after_s` is `LC_RESULT_INVALID_ARGUMENT` and ends nothing.
///
/// # Safety
/// `n` from `lc_notifier_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_shutdown_with_reason(
    n: *mut lc_notifier,
    now_ns: u64,
    reason: lc_shutdown_reason,
    retry_after_s: u32,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        let reason = match (try_value!(reason, "reason"), retry_after_s) {
            (Shutdown::Restart, 1..=86_400) => ShutdownReason::Restart { retry_after_s },
            (Shutdown::Restart, _) => {
                return crate::abi::invalid(
                    "retry_after_s",
                    format_args!("{retry_after_s} is not 1 to 86400 seconds"),
                );
            }
            (Shutdown::Decommission, 0) => ShutdownReason::Decommission,
            (Shutdown::Decommission, _) => {
                return crate::abi::invalid(
                    "retry_after_s",
                    "must be 0 with LC_SHUTDOWN_DECOMMISSION (noresource has no retry-after)",
                );
            }
        };
        h.notifier.shutdown(now_ns, reason);
        Code::Ok
    })
}

/// The first line of a saved-dialogs document (`lc_notifier_save_dialogs`).
const DIALOGS_HEADER: &str = "loadctl-dialogs 1";

/// One record as a line of tab-separated fields: Call-ID, subscriber URI, subscriber tag,
/// notifier tag, remote target, route set (space-separated), CSeq, expiry (Unix ms), share.
/// `None` when a field holds a tab, a line break or (URIs) a space, which the format cannot
/// carry (such a dialog is left to the subscriber's refresh).
fn dialog_line(r: &DialogRecord, now_ns: u64, unix_ms: u64) -> Option<String> {
    fn plain(f: &str) -> bool {
        !f.contains(['\t', '\r', '\n'])
    }
    fn uri(u: &Uri) -> Option<&str> {
        Some(u.as_str()).filter(|t| plain(t) && !t.contains(' '))
    }
    let routes = r
        .route_set
        .iter()
        .map(uri)
        .collect::<Option<Vec<_>>>()?
        .join(" ");
    let tag = r.subscriber.tag.as_deref().unwrap_or("");
    if ![r.call_id.as_str(), tag, r.notifier_tag.as_str()]
        .iter()
        .all(|f| plain(f))
    {
        return None;
    }
    let expires = unix_ms.saturating_add(r.expires_at_ns.saturating_sub(now_ns) / 1_000_000);
    let share = r.share.map(|x| x.to_string()).unwrap_or_default();
    Some(format!(
        "{}\t{}\t{tag}\t{}\t{}\t{routes}\t{}\t{expires}\t{share}",
        r.call_id,
        uri(&r.subscriber.uri)?,
        r.notifier_tag,
        uri(&r.remote_target)?,
        r.cseq,
    ))
}

/// The records of a saved-dialogs document in this process's clock; expired ones are left
/// out. The error names the line.
fn read_dialogs(doc: &[u8], now_ns: u64, unix_ms: u64) -> Result<Vec<DialogRecord>, String> {
    let text = std::str::from_utf8(doc).map_err(|_| "not UTF-8".to_owned())?;
    let mut lines = text.lines();
    if lines.next() != Some(DIALOGS_HEADER) {
        return Err(format!("line 1: not {DIALOGS_HEADER:?}"));
    }
    let mut out = Vec::new();
    for (n, line) in lines.enumerate().filter(|(_, l)| !l.is_empty()) {
        let bad = |what: &str| format!("line {}: {what}", n + 2);
        let f: Vec<&str> = line.split('\t').collect();
        let [
            call_id,
            sub,
            tag,
            ntag,
            target,
            routes,
            cseq,
            expires,
            share,
        ] = f[..]
        else {
            return Err(bad("expected 9 tab-separated fields"));
        };
        let uri = |u: &str| Uri::new(u).map_err(|e| bad(&format!("{u:?}: {e}")));
        let route_set = routes
            .split(' ')
            .filter(|r| !r.is_empty())
            .map(uri)
            .collect::<Result<Vec<_>, _>>()?;
        let cseq = cseq.parse().map_err(|_| bad("CSeq"))?;
        let expires: u64 = expires.parse().map_err(|_| bad("expiry"))?;
        let share = match share {
            "" => None,
            s => Some(s.parse::<f64>().map_err(|_| bad("share"))?),
        };
        if call_id.is_empty() || ntag.is_empty() {
            return Err(bad("empty Call-ID or notifier tag"));
        }
        let Some(left_ms) = expires.checked_sub(unix_ms) else {
            continue;
        };
        out.push(DialogRecord {
            call_id: call_id.to_owned(),
            subscriber: NameAddr {
                uri: uri(sub)?,
                tag: (!tag.is_empty()).then(|| tag.to_owned()),
            },
            notifier_tag: ntag.to_owned(),
            remote_target: uri(target)?,
            route_set,
            cseq,
            expires_at_ns: now_ns.saturating_add(left_ms.saturating_mul(1_000_000)),
            share,
        });
    }
    Ok(out)
}

/// Writes the live subscriptions' dialogs as a document for the next process (a file, a
/// database row): what it needs to reach each subscriber after this process dies without
/// `lc_notifier_shutdown` (a crash, SIGKILL), with each expiry in wall-clock time. `now_ns` is
/// this notifier's clock, `unix_ms` the wall clock (CLOCK_REALTIME, milliseconds) at the same
/// moment. The dialogs change with every NOTIFY sent (its CSeq) and every subscription that
/// starts, is refreshed or ends: write it again after those (keep the previous copy until the
/// new one is whole). Text, UTF-8, no NUL. `LC_RESULT_BUFFER_TOO_SMALL` with the needed size in
/// `written` when `cap` is too small.
///
/// # Safety
/// `n` from `lc_notifier_new`; `buf` NULL or writable for `cap` bytes; `written` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_save_dialogs(
    n: *const lc_notifier,
    now_ns: u64,
    unix_ms: u64,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> lc_result {
    boundary(|| {
        let h = try_ref!(n);
        let out = try_buf!(buf, cap, written);
        let mut doc = String::from(DIALOGS_HEADER);
        doc.push('\n');
        for r in h.notifier.dialogs() {
            if let Some(line) = dialog_line(&r, now_ns, unix_ms) {
                doc.push_str(&line);
                doc.push('\n');
            }
        }
        out.deliver(doc.as_bytes())
    })
}

/// Ends the dialogs of an earlier process (a document its `lc_notifier_save_dialogs` wrote)
/// with `terminated;reason=deactivated` NOTIFYs, queued for `lc_notifier_poll_transmit`: each
/// subscriber withdraws that process's rules and subscribes again at once (RFC 6665 §4.1.3:
/// "SHOULD retry immediately with a new subscription"), to this notifier. Call it once, after
/// `lc_notifier_new` and the policy, with this clock's `now_ns` and the wall clock `unix_ms`.
/// Expired dialogs and live ones of this notifier are skipped; `queued` gets how many NOTIFYs
/// were queued. Under a shared capacity each dialog's share counts until its NOTIFY is
/// answered. A document that is not one (its line named in the last error) is
/// `LC_RESULT_INVALID_ARGUMENT` and queues nothing.
///
/// # Safety
/// `n` from `lc_notifier_new`; `doc` readable for `len` bytes; `queued` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_deactivate_saved(
    n: *mut lc_notifier,
    now_ns: u64,
    unix_ms: u64,
    doc: *const u8,
    len: usize,
    queued: *mut usize,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        let doc = try_slice!(doc, len);
        let queued = try_out!(queued);
        let records = match read_dialogs(doc, now_ns, unix_ms) {
            Ok(r) => r,
            Err(e) => return crate::abi::invalid("doc", e),
        };
        queued.write(h.notifier.deactivate(now_ns, &records));
        Code::Ok
    })
}

/// Takes the next event (`LC_RESULT_EMPTY` when none). Its `text` points into the handle: valid
/// until the next call on the same handle, or its free.
///
/// # Safety
/// `n` from `lc_notifier_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_poll_event(
    n: *mut lc_notifier,
    out: *mut lc_notifier_event,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        let out = try_out!(out);
        let Some(ev) = h.notifier.poll_event() else {
            return Code::Empty;
        };
        let (kind, number, text) = match ev {
            NotifierEvent::Subscribed {
                subscriber,
                expires,
            } => (
                LC_NOTIFIER_EVENT_KIND_SUBSCRIBED,
                u64::from(expires),
                subscriber,
            ),
            NotifierEvent::Refreshed { subscriber } => {
                (LC_NOTIFIER_EVENT_KIND_REFRESHED, 0, subscriber)
            }
            NotifierEvent::Refused { status, why } => (
                LC_NOTIFIER_EVENT_KIND_REFUSED,
                u64::from(status),
                why.to_owned(),
            ),
            NotifierEvent::Ended { subscriber, reason } => (
                LC_NOTIFIER_EVENT_KIND_ENDED,
                0,
                format!("{subscriber} {reason}"),
            ),
        };
        h.event_text = text;
        let event = lc_notifier_event {
            kind,
            number,
            text: lc_str::from_bytes(h.event_text.as_bytes()),
        };
        out.write(event);
        Code::Ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(call_id: &str, route: &[&str]) -> DialogRecord {
        let uri = |u: &str| Uri::new(u).expect("uri");
        DialogRecord {
            call_id: call_id.into(),
            subscriber: NameAddr {
                uri: uri("sip:edge@192.0.2.7:5070"),
                tag: Some("t1".into()),
            },
            notifier_tag: "n-1".into(),
            remote_target: uri("sip:edge@192.0.2.7:5070;transport=udp"),
            route_set: route.iter().map(|r| uri(r)).collect(),
            cseq: 41,
            expires_at_ns: 600_000_000_000,
            share: Some(12.25),
        }
    }

    #[test]
    fn saved_dialogs_round_trip_in_the_next_processs_clock() {
        let r = record("c@h", &["sip:p1.example.net;lr", "sip:p2.example.net;lr"]);
        // Saved at 100 s (500 s left), read 20 s later at 3 s of the next process.
        let line = dialog_line(&r, 100_000_000_000, 1_000_000).expect("representable");
        let doc = format!("{DIALOGS_HEADER}\n{line}\n\n");
        let back = read_dialogs(doc.as_bytes(), 3_000_000_000, 1_020_000).expect("valid");
        assert_eq!(
            back,
            vec![DialogRecord {
                expires_at_ns: 483_000_000_000,
                ..r.clone()
            }]
        );
        let none = DialogRecord {
            share: None,
            subscriber: NameAddr {
                tag: None,
                ..r.subscriber.clone()
            },
            route_set: Vec::new(),
            ..r.clone()
        };
        let line = dialog_line(&none, 100_000_000_000, 1_000_000).expect("representable");
        let doc = format!("{DIALOGS_HEADER}\n{line}\n");
        let back = read_dialogs(doc.as_bytes(), 100_000_000_000, 1_000_000).expect("valid");
        assert_eq!(back, vec![none]);
        // Expired: left out.
        assert_eq!(
            read_dialogs(doc.as_bytes(), 0, 1_000_000 + 500_001),
            Ok(Vec::new())
        );
        // A Call-ID the format cannot carry is not written.
        assert!(dialog_line(&record("a\tb", &[]), 0, 0).is_none());
    }

    #[test]
    fn damaged_saved_dialogs_are_refused_with_the_line() {
        let good = dialog_line(&record("c", &[]), 0, 0).expect("line");
        for (doc, what) in [
            (String::new(), "line 1"),
            ("loadctl-dialogs 2\n".into(), "line 1"),
            (format!("{DIALOGS_HEADER}\n{good}\nx\ty\n"), "line 3"),
            (
                format!("{DIALOGS_HEADER}\n{}", good.replace("\t41\t", "\t-1\t")),
                "CSeq",
            ),
            (
                format!(
                    "{DIALOGS_HEADER}\n{}",
                    good.replace("sip:edge", "not a uri")
                ),
                "line 2",
            ),
            (
                format!("{DIALOGS_HEADER}\n{}", good.replace("12.25", "many")),
                "share",
            ),
            (format!("{DIALOGS_HEADER}\n\t{}", &good[2..]), "line 2"),
        ] {
            let e = read_dialogs(doc.as_bytes(), 0, 0).expect_err(&doc);
            assert!(e.contains(what), "{doc:?}: {e}");
        }
        assert!(read_dialogs(&[0xff, 0xfe], 0, 0).is_err());
    }
}
