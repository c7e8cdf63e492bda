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
use loadctl::event::{EventRequest, Method, NameAddr, Response};
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
fn request_to_c(r: &EventRequest, route: &str) -> lc_sip_message {
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
unsafe fn request_from_c(m: &lc_sip_message) -> Result<EventRequest, Code> {
    let method = crate::abi::checked(m.method, "lc_sip_message.method")?;
    // SAFETY: the caller promises readable strings.
    unsafe {
        let mut r = EventRequest::new(
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
    handle: impl FnOnce(&EventRequest) -> Response,
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
    slot: &mut Option<EventRequest>,
    route: &mut String,
    next: Option<EventRequest>,
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

mod notifier;
mod subscriber;

pub use notifier::*;
pub use subscriber::*;
