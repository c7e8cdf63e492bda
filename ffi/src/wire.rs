//! The event package over raw SIP bytes: for a C program without a SIP stack of its own, the
//! subscriber and notifier handles read and write whole SIP messages (`loadctl::event::wire`).
//!
//! `…_transmit_wire` renders the next request to send (SUBSCRIBE / NOTIFY) with the caller's
//! Via (transport, sent-by, a fresh branch per call) and Contact; `…_receive_wire` takes one
//! received message of the package — a request it answers (the response's bytes are written to
//! the caller's buffer, with the request's Via headers copied) or a response to one of its own
//! requests. The caller moves the bytes and runs the UDP transaction layer (retransmitting its
//! request until a response arrives).
//!
//! A rendered request goes where `…_wire_next_hop` says: its first Route, else its
//! Request-URI, which inside a dialog is the remote target (RFC 3261 §8.1.2, §12.2.1.1) — the
//! Contact the peer last sent, not necessarily the URI first subscribed to.

use loadctl::event::wire::{self, Raw, Via, WireError};

use crate::event::{lc_notifier, lc_subscriber};
use crate::{boundary, lc_result, lc_str};

/// Where this end is, for the requests it sends and its 2xx answers to SUBSCRIBE.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_sip_wire {
    /// `UDP`, `TCP`, … (required).
    pub transport: lc_str,
    /// `host[:port]` for the Via: where responses come back (required).
    pub sent_by: lc_str,
    /// This end's Contact URI (required), e.g. `sip:edge@192.0.2.1:5070`.
    pub contact: lc_str,
}

struct Wire<'a> {
    transport: &'a str,
    sent_by: &'a str,
    contact: &'a str,
}

/// # Safety
/// `w` non-null and valid with readable strings.
unsafe fn wire_of<'a>(w: *const lc_sip_wire) -> Result<Wire<'a>, lc_result> {
    // SAFETY: non-null and valid by this function's contract.
    let w = unsafe { &*w };
    // SAFETY: readable strings by contract.
    let field = |s: lc_str| -> Result<&'a str, lc_result> {
        let b = unsafe { s.bytes() }.ok_or(lc_result::NullParameter)?;
        std::str::from_utf8(b).map_err(|_| lc_result::InvalidUtf8)
    };
    Ok(Wire {
        transport: field(w.transport)?,
        sent_by: field(w.sent_by)?,
        contact: field(w.contact)?,
    })
}

/// Copies `bytes` into the caller's buffer, or says how much room it needs.
///
/// # Safety
/// `buf` writable for `cap` bytes (or NULL with `cap` 0); `len` writable.
unsafe fn deliver(bytes: &[u8], buf: *mut u8, cap: usize, len: *mut usize) -> lc_result {
    // SAFETY: writable by contract.
    unsafe { len.write(bytes.len()) };
    if bytes.len() > cap || (buf.is_null() && !bytes.is_empty()) {
        return lc_result::BufferTooSmall;
    }
    if !bytes.is_empty() {
        // SAFETY: `buf` has room for `cap` ≥ `bytes.len()` bytes and does not overlap ours.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
    }
    lc_result::Ok
}

fn wire_error(e: &WireError) -> lc_result {
    match e {
        WireError::Sip(s) => crate::worker::sip_error(*s),
        WireError::OtherMethod(_) => lc_result::SipOtherMessage,
        WireError::Missing(_) => lc_result::SipMissingHeader,
        WireError::TruncatedBody => lc_result::SipTruncated,
        WireError::BadStatusLine | WireError::BadValue(_) => lc_result::SipBadHeader,
    }
}

/// The shared part of the two `…_transmit_wire` functions.
///
/// # Safety
/// As for the exported functions.
#[allow(clippy::too_many_arguments)]
unsafe fn transmit(
    pending: &mut Vec<u8>,
    next_hop: &mut String,
    next: impl FnOnce() -> Option<loadctl::event::Request>,
    w: *const lc_sip_wire,
    branch: lc_str,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> lc_result {
    if pending.is_empty() {
        // SAFETY: valid by the caller's contract.
        let wire = match unsafe { wire_of(w) } {
            Ok(w) => w,
            Err(e) => return e,
        };
        // SAFETY: readable by contract.
        let branch = match unsafe { branch.bytes() }.map(std::str::from_utf8) {
            Some(Ok(b)) if b.starts_with("z9hG4bK") => b,
            Some(Ok(_)) => return lc_result::InvalidArgument,
            Some(Err(_)) => return lc_result::InvalidUtf8,
            None => return lc_result::NullParameter,
        };
        let Some(req) = next() else {
            return lc_result::Empty;
        };
        let via = Via {
            transport: wire.transport,
            sent_by: wire.sent_by,
            branch,
        };
        wire::write_request(&req, &via, wire.contact, pending);
        *next_hop = req.next_hop().as_str().to_owned();
    }
    // SAFETY: by the caller's contract.
    let r = unsafe { deliver(pending, buf, cap, len) };
    if r == lc_result::Ok {
        pending.clear();
    }
    r
}

/// Renders the subscriber's next SUBSCRIBE as SIP bytes into `buf` and its length into
/// `*len`. `branch` is the Via branch for this transaction (must start with `z9hG4bK`; keep it
/// to match the response and to retransmit the same bytes over UDP). `LC_RESULT_EMPTY`: nothing
/// to send. `LC_RESULT_BUFFER_TOO_SMALL`: `*len` is the size needed; the request is kept and the
/// next call (with a bigger buffer) delivers it, ignoring `branch`.
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `wire` valid with readable strings; `branch` readable;
/// `buf` writable for `cap` bytes; `len` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_transmit_wire(
    sub: *mut lc_subscriber,
    wire: *const lc_sip_wire,
    branch: lc_str,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> lc_result {
    boundary(|| {
        if sub.is_null() || wire.is_null() || len.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        let s = unsafe { &mut *sub };
        let (pending, hop, sub) = (&mut s.wire_out, &mut s.wire_next_hop, &mut s.sub);
        // SAFETY: the remaining pointers are valid by contract.
        unsafe {
            transmit(
                pending,
                hop,
                || sub.poll_transmit(),
                wire,
                branch,
                buf,
                cap,
                len,
            )
        }
    })
}

/// Takes one received message of the package: a NOTIFY (applied to the engine as
/// `lc_subscriber_handle_notify` does; the response to send back is written to `buf`, `*len`
/// bytes, with the NOTIFY's Via headers copied) or a response to this subscriber's SUBSCRIBE
/// (`*len` = 0). A message of another method, or a SUBSCRIBE, is `LC_RESULT_SIP_OTHER_MESSAGE`
/// (for the caller's own handling); malformed bytes get a `LC_RESULT_SIP_*` code and change
/// nothing. With a buffer too small for the response the NOTIFY still counts (its repeat gets
/// the same answer).
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `msg` readable for `msg_len` bytes; `wire` valid; `buf`
/// writable for `cap` bytes; `len` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_receive_wire(
    sub: *mut lc_subscriber,
    now_ns: u64,
    msg: *const u8,
    msg_len: usize,
    wire: *const lc_sip_wire,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> lc_result {
    boundary(|| {
        if sub.is_null() || msg.is_null() || wire.is_null() || len.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use and readable bytes by contract.
        let (s, bytes) = unsafe { (&mut *sub, std::slice::from_raw_parts(msg, msg_len)) };
        // SAFETY: the remaining pointers are valid by contract.
        unsafe {
            receive(
                bytes,
                wire,
                b"NOTIFY",
                b"SUBSCRIBE",
                false,
                buf,
                cap,
                len,
                |m| match m {
                    Incoming::Request(req) => Some(s.sub.handle_notify(now_ns, req)),
                    Incoming::Response(resp) => {
                        s.sub.handle_response(now_ns, resp);
                        None
                    }
                },
            )
        }
    })
}

/// A scanned message of the package, for the handle that takes it.
enum Incoming<'a> {
    Request(&'a loadctl::event::Request),
    Response(&'a loadctl::event::Response),
}

/// What both `…_receive_wire` functions do: scan `bytes`; a request of method `takes` goes to
/// `handle`, whose answer is written to `buf` (with this end's Contact on a 2xx when
/// `contact_on_2xx`); a response to a request of method `answers` goes to `handle` too
/// (`*len` = 0); anything else is `LC_RESULT_SIP_OTHER_MESSAGE`.
///
/// # Safety
/// `w` non-null and valid; `buf` writable for `cap` bytes; `len` non-null and writable.
#[allow(clippy::too_many_arguments)]
unsafe fn receive(
    bytes: &[u8],
    w: *const lc_sip_wire,
    takes: &[u8],
    answers: &[u8],
    contact_on_2xx: bool,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
    handle: impl FnOnce(Incoming<'_>) -> Option<loadctl::event::Response>,
) -> lc_result {
    // SAFETY: valid by this function's contract.
    let w = match unsafe { wire_of(w) } {
        Ok(w) => w,
        Err(e) => return e,
    };
    let raw = match wire::scan(bytes) {
        Ok(r) => r,
        Err(e) => return wire_error(&e),
    };
    if raw.status == 0 && raw.method == takes {
        let req = match raw.request() {
            Ok(r) => r,
            Err(e) => return wire_error(&e),
        };
        let Some(resp) = handle(Incoming::Request(&req)) else {
            return lc_result::Ok;
        };
        let contact = (contact_on_2xx && resp.is_success()).then_some(w.contact);
        // SAFETY: by this function's contract.
        unsafe { answer_bytes(&resp, &raw, contact, buf, cap, len) }
    } else if raw.status != 0 && raw.method == answers {
        match raw.response() {
            Ok(r) => {
                handle(Incoming::Response(&r));
                // SAFETY: non-null and writable by this function's contract.
                unsafe { len.write(0) };
                lc_result::Ok
            }
            Err(e) => wire_error(&e),
        }
    } else {
        lc_result::SipOtherMessage
    }
}

/// # Safety
/// As for [`deliver`].
unsafe fn answer_bytes(
    resp: &loadctl::event::Response,
    request: &Raw<'_>,
    contact: Option<&str>,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> lc_result {
    let mut out = Vec::with_capacity(512);
    wire::write_response(resp, request, contact, &mut out);
    // SAFETY: by this function's contract.
    unsafe { deliver(&out, buf, cap, len) }
}

/// Renders the notifier's next NOTIFY as SIP bytes (see `lc_subscriber_transmit_wire`). Send
/// it to the subscriber its Request-URI names.
///
/// # Safety
/// As for `lc_subscriber_transmit_wire`, with `n` from `lc_notifier_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_transmit_wire(
    n: *mut lc_notifier,
    wire: *const lc_sip_wire,
    branch: lc_str,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> lc_result {
    boundary(|| {
        if n.is_null() || wire.is_null() || len.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use by contract.
        let h = unsafe { &mut *n };
        let (pending, hop, notifier) = (&mut h.wire_out, &mut h.wire_next_hop, &mut h.notifier);
        // SAFETY: the remaining pointers are valid by contract.
        unsafe {
            transmit(
                pending,
                hop,
                || notifier.poll_transmit(),
                wire,
                branch,
                buf,
                cap,
                len,
            )
        }
    })
}

/// Takes one received message of the package: a SUBSCRIBE (answered as
/// `lc_notifier_handle_subscribe` does; the response, with this end's Contact on a 2xx, is
/// written to `buf`) or a response to one of this notifier's NOTIFYs (`*len` = 0). Other
/// messages: `LC_RESULT_SIP_OTHER_MESSAGE`.
///
/// # Safety
/// As for `lc_subscriber_receive_wire`, with `n` from `lc_notifier_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_receive_wire(
    n: *mut lc_notifier,
    now_ns: u64,
    msg: *const u8,
    msg_len: usize,
    wire: *const lc_sip_wire,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> lc_result {
    boundary(|| {
        if n.is_null() || msg.is_null() || wire.is_null() || len.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; exclusive use and readable bytes by contract.
        let (h, bytes) = unsafe { (&mut *n, std::slice::from_raw_parts(msg, msg_len)) };
        // SAFETY: the remaining pointers are valid by contract.
        unsafe {
            receive(
                bytes,
                wire,
                b"SUBSCRIBE",
                b"NOTIFY",
                true,
                buf,
                cap,
                len,
                |m| match m {
                    Incoming::Request(req) => Some(h.notifier.handle_subscribe(now_ns, req)),
                    Incoming::Response(resp) => {
                        h.notifier.handle_response(now_ns, resp);
                        None
                    }
                },
            )
        }
    })
}

/// # Safety
/// `out` non-null and writable.
unsafe fn write_hop(hop: &str, out: *mut lc_str) -> lc_result {
    if hop.is_empty() {
        return lc_result::Empty;
    }
    // SAFETY: by this function's contract.
    unsafe { out.write(lc_str::from_bytes(hop.as_bytes())) };
    lc_result::Ok
}

/// Writes where the request last rendered by `lc_subscriber_transmit_wire` must be sent: the
/// URI of its first Route header, or its Request-URI when it has none (RFC 3261 §8.1.2). Inside
/// a dialog that is the notifier's remote target (the Contact of its 2xx and NOTIFYs) or the
/// first proxy of the route set; the first SUBSCRIBE of a subscription goes to the configured
/// notifier URI (or an outbound proxy the caller chooses). `LC_RESULT_EMPTY` before the first
/// request. The string stays valid until the next call on the handle.
///
/// # Safety
/// `sub` from `lc_subscriber_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_subscriber_wire_next_hop(
    sub: *const lc_subscriber,
    out: *mut lc_str,
) -> lc_result {
    boundary(|| {
        if sub.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract; `out` writable.
        unsafe { write_hop(&(*sub).wire_next_hop, out) }
    })
}

/// Writes where the NOTIFY last rendered by `lc_notifier_transmit_wire` must be sent: its first
/// Route (the subscriber's record-routing proxy), else its Request-URI (the Contact of the
/// subscriber's SUBSCRIBE). `LC_RESULT_EMPTY` before the first NOTIFY. Valid until the next
/// call on the handle.
///
/// # Safety
/// `n` from `lc_notifier_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_wire_next_hop(
    n: *const lc_notifier,
    out: *mut lc_str,
) -> lc_result {
    boundary(|| {
        if n.is_null() || out.is_null() {
            return lc_result::NullParameter;
        }
        // SAFETY: checked non-null; valid by contract; `out` writable.
        unsafe { write_hop(&(*n).wire_next_hop, out) }
    })
}
