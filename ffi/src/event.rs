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

use loadctl::event::notifier::{Authorization, Notifier, NotifierConfig, NotifierEvent};
use loadctl::event::subscriber::{IgnoreReason, Subscriber, SubscriberConfig, SubscriberEvent};
use loadctl::event::{Method, NameAddr, Request, Response};
use loadctl::policy::{self, Uri};

use crate::engine::lc_engine;
use crate::{boundary, lc_result, lc_str};

/// SUBSCRIBE or NOTIFY.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum lc_method {
    /// SUBSCRIBE.
    Subscribe = 0,
    /// NOTIFY.
    Notify = 1,
}

/// A SUBSCRIBE or NOTIFY request (`status` 0) or a response to one (`status` ≥ 100).
/// Absent strings have a NULL `ptr`; absent numbers are -1.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_sip_message {
    /// 0 for a request, else the response status.
    pub status: u16,
    /// The request's method (for a response: the method it answers).
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
        method: if r.method == Method::Subscribe {
            lc_method::Subscribe
        } else {
            lc_method::Notify
        },
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
        body: lc_str::from_bytes(&r.body),
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
        method: if r.method == Method::Subscribe {
            lc_method::Subscribe
        } else {
            lc_method::Notify
        },
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
unsafe fn text(s: lc_str) -> Result<Option<String>, lc_result> {
    // SAFETY: by the caller's contract.
    match unsafe { s.bytes() } {
        None => Ok(None),
        Some(b) => std::str::from_utf8(b)
            .map(|v| Some(v.to_owned()))
            .map_err(|_| lc_result::InvalidUtf8),
    }
}

/// # Safety
/// As for [`text`].
unsafe fn uri(s: lc_str) -> Result<Uri, lc_result> {
    // SAFETY: by the caller's contract.
    let t = unsafe { text(s) }?.ok_or(lc_result::NullParameter)?;
    Uri::new(&t).map_err(|_| lc_result::InvalidArgument)
}

/// # Safety
/// As for [`text`].
unsafe fn opt_uri(s: lc_str) -> Result<Option<Uri>, lc_result> {
    // SAFETY: by the caller's contract.
    match unsafe { text(s) }? {
        None => Ok(None),
        Some(t) => Uri::new(&t)
            .map(Some)
            .map_err(|_| lc_result::InvalidArgument),
    }
}

/// # Safety
/// As for [`text`].
unsafe fn uri_list(s: lc_str) -> Result<Vec<Uri>, lc_result> {
    // SAFETY: by the caller's contract.
    match unsafe { s.bytes() } {
        None => Ok(Vec::new()),
        Some(b) => {
            std::str::from_utf8(b).map_err(|_| lc_result::InvalidUtf8)?;
            loadctl::event::wire::route_list(b).map_err(|_| lc_result::InvalidArgument)
        }
    }
}

/// # Safety
/// Every string of `m` readable or absent.
unsafe fn request_from_c(m: &lc_sip_message) -> Result<Request, lc_result> {
    // SAFETY: the caller promises readable strings.
    unsafe {
        Ok(Request {
            method: if m.method == lc_method::Subscribe {
                Method::Subscribe
            } else {
                Method::Notify
            },
            request_uri: uri(m.request_uri)?,
            call_id: text(m.call_id)?.ok_or(lc_result::NullParameter)?,
            from: NameAddr {
                uri: uri(m.from_uri)?,
                tag: text(m.from_tag)?,
            },
            to: NameAddr {
                uri: uri(m.to_uri)?,
                tag: text(m.to_tag)?,
            },
            cseq: m.cseq,
            event: text(m.event)?,
            expires: from_num(m.expires),
            accept: text(m.accept)?,
            subscription_state: text(m.subscription_state)?,
            content_type: text(m.content_type)?,
            body: m.body.bytes().map(<[u8]>::to_vec).unwrap_or_default(),
            contact: opt_uri(m.contact)?,
            record_route: uri_list(m.record_route)?,
            route: Vec::new(),
        })
    }
}

/// Reads the request in `msg`, lets `handle` answer it, keeps the answer in `keep` (its strings
/// stay valid until the handle's next call) and writes it to `response`: what
/// `lc_subscriber_handle_notify` and `lc_notifier_handle_subscribe` share.
///
/// # Safety
/// `msg` non-null and valid with readable strings; `response` non-null and writable.
unsafe fn answer(
    msg: *const lc_sip_message,
    response: *mut lc_sip_message,
    keep: &mut Option<Response>,
    handle: impl FnOnce(&Request) -> Response,
) -> lc_result {
    // SAFETY: valid with readable strings by this function's contract.
    let req = match unsafe { request_from_c(&*msg) } {
        Ok(r) => r,
        Err(e) => return e,
    };
    let r = keep.insert(handle(&req));
    // SAFETY: writable by this function's contract.
    unsafe { response.write(response_to_c(r)) };
    lc_result::Ok
}

/// # Safety
/// As for [`request_from_c`].
unsafe fn response_from_c(m: &lc_sip_message) -> Result<Response, lc_result> {
    if m.status < 100 {
        return Err(lc_result::InvalidArgument);
    }
    // SAFETY: the caller promises readable strings.
    unsafe {
        Ok(Response {
            status: m.status,
            reason: loadctl::event::reason_phrase(m.status).to_owned(),
            method: if m.method == lc_method::Subscribe {
                Method::Subscribe
            } else {
                Method::Notify
            },
            call_id: text(m.call_id)?.ok_or(lc_result::NullParameter)?,
            cseq: m.cseq,
            from: NameAddr {
                uri: uri(m.from_uri)?,
                tag: text(m.from_tag)?,
            },
            to: NameAddr {
                uri: uri(m.to_uri)?,
                tag: text(m.to_tag)?,
            },
            expires: from_num(m.expires),
            min_expires: from_num(m.min_expires),
            retry_after: from_num(m.retry_after),
            contact: opt_uri(m.contact)?,
            record_route: uri_list(m.record_route)?,
        })
    }
}

fn words(s: Option<String>) -> Vec<String> {
    s.map(|v| v.split_ascii_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
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
    /// A request rendered by `lc_subscriber_transmit_wire` that did not fit the caller's buffer.
    pub(crate) wire_out: Vec<u8>,
    /// Where that request goes (its first Route, else its Request-URI).
    pub(crate) wire_next_hop: String,
}

/// Subscriber settings (see `loadctl::event::subscriber::SubscriberConfig`).
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
    /// Space-separated hosts/domains notifiers may be at; absent: the notifier's host only.
    pub trust: lc_str,
    /// Not used: which redirect targets the notifier may use is the engine's
    /// `lc_engine_config.redirect_allow` (plus the notifier's own domain, RFC 7200 §7); the
    /// subscriber reports (`LC_SUBSCRIBER_EVENT_KIND_REDIRECT_OUTSIDE_ALLOW_LIST`) each rule the
    /// engine refuses, once. Kept for source compatibility.
    pub redirect_allow: lc_str,
    /// Scope rules without target-sip-entity to the notifier's URI (RFC 7200 §5.3.3 MAY): they
    /// then match only requests classified with that target (`lc_request.target`,
    /// `lc_sip_options.target`), never requests without one. Default (zero) false: they apply
    /// whatever the target.
    pub scope_to_notifier: bool,
}

/// What a subscriber reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum lc_subscriber_event_kind {
    /// Subscribed (`number`: granted seconds).
    Subscribed = 0,
    /// The notifier reported pending.
    Pending = 1,
    /// A document was applied (`number`: version, `generation`).
    PolicyApplied = 2,
    /// This notifier's rules were removed (`terminated`).
    PolicyWithdrawn = 3,
    /// A document was ignored (`number`: version; `text`: why).
    DocumentIgnored = 4,
    /// An invalid document, refused; the policy stays (`number`: the version it claims, or
    /// `LC_VERSION_UNKNOWN`; `notifier`; `text`: the reader's error).
    InvalidDocument = 5,
    /// The engine refused the document; the policy stays (`number`: version; `notifier`;
    /// `text`).
    ApplyFailed = 6,
    /// A body of another type was discarded (`text`: its type).
    UnknownBody = 7,
    /// Rules redirect outside the agreed list (`text`: their ids).
    RedirectOutsideAllowList = 8,
    /// A NOTIFY was refused (`number`: status; `text`: why).
    NotifyRejected = 9,
    /// Will retry (`at_ns`; `text`: what failed).
    Retrying = 10,
    /// The subscription lapsed; its rules stay.
    Lapsed = 11,
    /// Stopped for good (`text`: why).
    Stopped = 12,
    /// The document about to be applied came with reader warnings; it applies (`number`:
    /// version; `notifier`; `text`: the warnings, one per line). A POLICY_APPLIED follows.
    DocumentWarnings = 13,
    /// A NOTIFY without a body: nothing to update, the policy stays (RFC 7200 §4.8).
    NothingToUpdate = 14,
}

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

/// What a subscriber has counted (see `loadctl::event::subscriber::SubscriberStats`).
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

/// Creates a subscriber feeding `engine`; its first SUBSCRIBE is ready in `poll_transmit`.
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
        if engine.is_null() || config.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null, valid by contract.
        let (engine, c) = unsafe { (&(*engine).engine, &*config) };
        // SAFETY: strings readable by contract.
        let built = unsafe {
            (|| -> Result<SubscriberConfig, lc_result> {
                let call_id = text(c.call_id)?.ok_or(lc_result::NullParameter)?;
                let tag = text(c.tag)?.ok_or(lc_result::NullParameter)?;
                let mut sc =
                    SubscriberConfig::new(uri(c.notifier)?, uri(c.subscriber)?, &call_id, &tag);
                if c.expires > 0 {
                    sc.expires = c.expires;
                }
                sc.trust = words(text(c.trust)?);
                sc.redirect_allow = text(c.redirect_allow)?.map(|v| words(Some(v)));
                sc.scope_to_notifier = c.scope_to_notifier;
                Ok(sc)
            })()
        };
        let sc = match built {
            Ok(sc) => sc,
            Err(e) => return e,
        };
        let handle = lc_subscriber {
            sub: Subscriber::new(sc, engine.clone(), now_ns),
            out_request: None,
            out_route: String::new(),
            out_response: None,
            event_text: String::new(),
            event_notifier: String::new(),
            wire_out: Vec::new(),
            wire_next_hop: String::new(),
        };
        // SAFETY: checked non-null, writable by contract.
        unsafe { out.write(Box::into_raw(Box::new(handle))) };
        lc_result::Ok
    })
}

/// Frees a subscriber (its rules stay in the engine; withdraw them with `lc_engine_withdraw`
/// if wanted). `NULL` is a no-op.
///
/// # Safety
/// `sub` NULL or from `lc_subscriber_new`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_free(sub: *mut lc_subscriber) {
    let _ = boundary(|| {
        if !sub.is_null() {
            // SAFETY: from Box::into_raw, freed once.
            drop(unsafe { Box::from_raw(sub) });
        }
        lc_result::Ok
    });
}

/// Takes the next SUBSCRIBE to send (`LC_RESULT_EMPTY` when none).
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_poll_transmit(
    sub: *mut lc_subscriber,
    out: *mut lc_sip_message,
) -> lc_result {
    boundary(|| {
        if sub.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        let s = unsafe { &mut *sub };
        s.out_request = s.sub.poll_transmit();
        match &s.out_request {
            None => lc_result::Empty,
            Some(r) => {
                s.out_route = loadctl::event::wire::route_text(&r.route);
                // SAFETY: checked non-null, writable by contract.
                unsafe { out.write(request_to_c(r, &s.out_route)) };
                lc_result::Ok
            }
        }
    })
}

/// Feeds a final response to a SUBSCRIBE.
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
        if sub.is_null() || msg.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract.
        let (s, m) = unsafe { (&mut *sub, &*msg) };
        // SAFETY: readable strings by contract.
        match unsafe { response_from_c(m) } {
            Ok(r) => {
                s.sub.handle_response(now_ns, &r);
                lc_result::Ok
            }
            Err(e) => e,
        }
    })
}

/// Feeds a NOTIFY; writes the response to send into `*response`.
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
        if sub.is_null() || msg.is_null() || response.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract.
        let s = unsafe { &mut *sub };
        // SAFETY: checked non-null; readable strings and a writable response by contract.
        unsafe {
            answer(msg, response, &mut s.out_response, |req| {
                s.sub.handle_notify(now_ns, req)
            })
        }
    })
}

/// Writes when `lc_subscriber_handle_timeout` is due (`LC_RESULT_EMPTY`: no timer).
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_poll_timeout(
    sub: *const lc_subscriber,
    out: *mut u64,
) -> lc_result {
    boundary(|| {
        if sub.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract.
        match unsafe { &*sub }.sub.poll_timeout() {
            None => lc_result::Empty,
            Some(t) => {
                // SAFETY: checked non-null, writable by contract.
                unsafe { out.write(t) };
                lc_result::Ok
            }
        }
    })
}

/// Advances the subscriber's timers to `now_ns`.
///
/// # Safety
/// `sub` from `lc_subscriber_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_handle_timeout(
    sub: *mut lc_subscriber,
    now_ns: u64,
) -> lc_result {
    boundary(|| {
        if sub.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        unsafe { &mut *sub }.sub.handle_timeout(now_ns);
        lc_result::Ok
    })
}

/// Ends the subscription (SUBSCRIBE with Expires: 0 queued).
///
/// # Safety
/// `sub` from `lc_subscriber_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_unsubscribe(
    sub: *mut lc_subscriber,
    now_ns: u64,
) -> lc_result {
    boundary(|| {
        if sub.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        unsafe { &mut *sub }.sub.unsubscribe(now_ns);
        lc_result::Ok
    })
}

/// Takes the next event (`LC_RESULT_EMPTY` when none).
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_poll_event(
    sub: *mut lc_subscriber,
    out: *mut lc_subscriber_event,
) -> lc_result {
    boundary(|| {
        if sub.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        let s = unsafe { &mut *sub };
        let Some(ev) = s.sub.poll_event() else {
            return lc_result::Empty;
        };
        use lc_subscriber_event_kind as K;
        let mut notifier_of = String::new();
        let (kind, number, generation, at_ns, text) = match ev {
            SubscriberEvent::Subscribed { expires } => {
                (K::Subscribed, u64::from(expires), 0, 0, String::new())
            }
            SubscriberEvent::Pending => (K::Pending, 0, 0, 0, String::new()),
            SubscriberEvent::PolicyApplied {
                version,
                generation,
                ..
            } => (
                K::PolicyApplied,
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
                    K::DocumentWarnings,
                    u64::from(version),
                    0,
                    0,
                    warnings.join("\n"),
                )
            }
            SubscriberEvent::NothingToUpdate => (K::NothingToUpdate, 0, 0, 0, String::new()),
            SubscriberEvent::PolicyWithdrawn => (K::PolicyWithdrawn, 0, 0, 0, String::new()),
            SubscriberEvent::DocumentIgnored { version, reason } => {
                let why = match reason {
                    IgnoreReason::Stale { last } => format!("stale: last applied {last}"),
                    IgnoreReason::Gap { expected } => {
                        format!("gap: expected {expected}, re-SUBSCRIBE sent")
                    }
                };
                (K::DocumentIgnored, u64::from(version), 0, 0, why)
            }
            SubscriberEvent::InvalidDocument {
                notifier,
                version,
                error,
            } => {
                notifier_of = notifier;
                let v = version.map_or(LC_VERSION_UNKNOWN, u64::from);
                (K::InvalidDocument, v, 0, 0, error)
            }
            SubscriberEvent::ApplyFailed {
                notifier,
                version,
                error,
            } => {
                notifier_of = notifier;
                (K::ApplyFailed, u64::from(version), 0, 0, error.to_string())
            }
            SubscriberEvent::UnknownBody { content_type } => {
                (K::UnknownBody, 0, 0, 0, content_type)
            }
            SubscriberEvent::RedirectOutsideAllowList { rules } => {
                (K::RedirectOutsideAllowList, 0, 0, 0, rules.join(" "))
            }
            SubscriberEvent::NotifyRejected { status, why } => {
                (K::NotifyRejected, u64::from(status), 0, 0, why.to_owned())
            }
            SubscriberEvent::Retrying { at_ns, why } => (K::Retrying, 0, 0, at_ns, why),
            SubscriberEvent::Lapsed => (K::Lapsed, 0, 0, 0, String::new()),
            SubscriberEvent::Stopped(why) => (K::Stopped, 0, 0, 0, format!("{why:?}")),
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
        // SAFETY: checked non-null, writable by contract.
        unsafe { out.write(event) };
        lc_result::Ok
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
        if sub.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract.
        let st = unsafe { &*sub }.sub.stats();
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
        // SAFETY: checked non-null, writable by contract.
        unsafe { out.write(c) };
        lc_result::Ok
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
    /// A request rendered by `lc_notifier_transmit_wire` that did not fit the caller's buffer.
    pub(crate) wire_out: Vec<u8>,
    /// Where that request goes (its first Route, else its Request-URI).
    pub(crate) wire_next_hop: String,
}

/// Notifier settings (see `loadctl::event::notifier::NotifierConfig`); zero numbers mean the
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

/// What a notifier reports.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum lc_notifier_event_kind {
    /// A new subscription (`text`: subscriber; `number`: seconds).
    Subscribed = 0,
    /// A refresh (`text`: subscriber).
    Refreshed = 1,
    /// A SUBSCRIBE was refused (`number`: status; `text`: why).
    Refused = 2,
    /// A subscription ended (`text`: subscriber and reason).
    Ended = 3,
}

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

/// Creates a notifier.
///
/// # Safety
/// `config` valid with readable strings; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_new(
    config: *const lc_notifier_config,
    out: *mut *mut lc_notifier,
) -> lc_result {
    boundary(|| {
        if config.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract.
        let c = unsafe { &*config };
        // SAFETY: strings readable by contract.
        let built = unsafe {
            (|| -> Result<NotifierConfig, lc_result> {
                let tag = text(c.tag)?.ok_or(lc_result::NullParameter)?;
                let auth = match text(c.authorized)? {
                    None => Authorization::Any,
                    Some(list) => Authorization::Domains(words(Some(list))),
                };
                let mut nc = NotifierConfig::new(uri(c.uri)?, &tag, auth);
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
                Ok(nc)
            })()
        };
        let nc = match built {
            Ok(nc) => nc,
            Err(e) => return e,
        };
        let handle = lc_notifier {
            notifier: Notifier::new(nc),
            out_request: None,
            out_route: String::new(),
            out_response: None,
            event_text: String::new(),
            wire_out: Vec::new(),
            wire_next_hop: String::new(),
        };
        // SAFETY: checked non-null, writable by contract.
        unsafe { out.write(Box::into_raw(Box::new(handle))) };
        lc_result::Ok
    })
}

/// Frees a notifier. `NULL` is a no-op.
///
/// # Safety
/// `n` NULL or from `lc_notifier_new`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_free(n: *mut lc_notifier) {
    let _ = boundary(|| {
        if !n.is_null() {
            // SAFETY: from Box::into_raw, freed once.
            drop(unsafe { Box::from_raw(n) });
        }
        lc_result::Ok
    });
}

/// # Safety
/// `body` NULL or readable for `len` bytes.
unsafe fn policy_of(
    body: *const u8,
    len: usize,
) -> Result<Option<Vec<Arc<policy::Rule>>>, lc_result> {
    if body.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and readable by contract.
    let bytes = unsafe { std::slice::from_raw_parts(body, len) };
    let doc =
        policy::read(bytes, &policy::Limits::default()).map_err(|_| lc_result::InvalidPolicy)?;
    let rules = doc.ruleset.rules().ok_or(lc_result::NotFull)?;
    Ok(Some(rules.to_vec()))
}

/// Sets the policy every subscriber without one of its own gets: a full document (`body`,
/// `len`), or NULL for "no policy".
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
        if n.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: readable by contract.
        let policy = match unsafe { policy_of(body, len) } {
            Ok(p) => p,
            Err(e) => return e,
        };
        // SAFETY: checked non-null; exclusive use by contract.
        unsafe { &mut *n }.notifier.set_policy(now_ns, policy);
        lc_result::Ok
    })
}

/// Sets one subscriber's own policy (full document, or NULL for "no policy"); with `clear`
/// true instead reverts it to the common policy.
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
    clear: bool,
) -> lc_result {
    boundary(|| {
        if n.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: readable by contract.
        let who = match unsafe { uri(subscriber) } {
            Ok(u) => u,
            Err(e) => return e,
        };
        let policy = if clear {
            None
        } else {
            // SAFETY: readable by contract.
            match unsafe { policy_of(body, len) } {
                Ok(p) => Some(p),
                Err(e) => return e,
            }
        };
        // SAFETY: checked non-null; exclusive use by contract.
        unsafe { &mut *n }
            .notifier
            .set_subscriber_policy(now_ns, &who, policy);
        lc_result::Ok
    })
}

/// Feeds a SUBSCRIBE; writes the response to send into `*response` (a NOTIFY follows in
/// `lc_notifier_poll_transmit` when accepted).
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
        if n.is_null() || msg.is_null() || response.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract.
        let h = unsafe { &mut *n };
        // SAFETY: checked non-null; readable strings and a writable response by contract.
        unsafe {
            answer(msg, response, &mut h.out_response, |req| {
                h.notifier.handle_subscribe(now_ns, req)
            })
        }
    })
}

/// Feeds a final response to a NOTIFY.
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
        if n.is_null() || msg.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract.
        let (h, m) = unsafe { (&mut *n, &*msg) };
        // SAFETY: readable strings by contract.
        match unsafe { response_from_c(m) } {
            Ok(r) => {
                h.notifier.handle_response(now_ns, &r);
                lc_result::Ok
            }
            Err(e) => e,
        }
    })
}

/// Takes the next NOTIFY to send (`LC_RESULT_EMPTY` when none).
///
/// # Safety
/// `n` from `lc_notifier_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_poll_transmit(
    n: *mut lc_notifier,
    out: *mut lc_sip_message,
) -> lc_result {
    boundary(|| {
        if n.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        let h = unsafe { &mut *n };
        h.out_request = h.notifier.poll_transmit();
        match &h.out_request {
            None => lc_result::Empty,
            Some(r) => {
                h.out_route = loadctl::event::wire::route_text(&r.route);
                // SAFETY: checked non-null, writable by contract.
                unsafe { out.write(request_to_c(r, &h.out_route)) };
                lc_result::Ok
            }
        }
    })
}

/// Writes when `lc_notifier_handle_timeout` is due (`LC_RESULT_EMPTY`: no timer).
///
/// # Safety
/// `n` from `lc_notifier_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_poll_timeout(
    n: *const lc_notifier,
    out: *mut u64,
) -> lc_result {
    boundary(|| {
        if n.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract.
        match unsafe { &*n }.notifier.poll_timeout() {
            None => lc_result::Empty,
            Some(t) => {
                // SAFETY: checked non-null, writable by contract.
                unsafe { out.write(t) };
                lc_result::Ok
            }
        }
    })
}

/// Advances the notifier's timers (paced NOTIFYs, expiries, unanswered NOTIFYs).
///
/// # Safety
/// `n` from `lc_notifier_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_handle_timeout(n: *mut lc_notifier, now_ns: u64) -> lc_result {
    boundary(|| {
        if n.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        unsafe { &mut *n }.notifier.handle_timeout(now_ns);
        lc_result::Ok
    })
}

/// Ends every subscription (`terminated;reason=noresource` NOTIFYs queued).
///
/// # Safety
/// `n` from `lc_notifier_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_shutdown(n: *mut lc_notifier, now_ns: u64) -> lc_result {
    boundary(|| {
        if n.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        unsafe { &mut *n }.notifier.shutdown(now_ns);
        lc_result::Ok
    })
}

/// Takes the next event (`LC_RESULT_EMPTY` when none).
///
/// # Safety
/// `n` from `lc_notifier_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_poll_event(
    n: *mut lc_notifier,
    out: *mut lc_notifier_event,
) -> lc_result {
    boundary(|| {
        if n.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        let h = unsafe { &mut *n };
        let Some(ev) = h.notifier.poll_event() else {
            return lc_result::Empty;
        };
        let (kind, number, text) = match ev {
            NotifierEvent::Subscribed {
                subscriber,
                expires,
            } => (
                lc_notifier_event_kind::Subscribed,
                u64::from(expires),
                subscriber,
            ),
            NotifierEvent::Refreshed { subscriber } => {
                (lc_notifier_event_kind::Refreshed, 0, subscriber)
            }
            NotifierEvent::Refused { status, why } => (
                lc_notifier_event_kind::Refused,
                u64::from(status),
                why.to_owned(),
            ),
            NotifierEvent::Ended { subscriber, reason } => (
                lc_notifier_event_kind::Ended,
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
        // SAFETY: checked non-null, writable by contract.
        unsafe { out.write(event) };
        lc_result::Ok
    })
}
