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

use loadctl::event::wire::{self, Via, WireError};

use crate::event::{lc_notifier, lc_subscriber};
use crate::{Code, Out, OutBuf, boundary, lc_result, lc_str};

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
/// Every string of `w` readable or absent.
unsafe fn wire_of<'a>(w: &lc_sip_wire) -> Result<Wire<'a>, Code> {
    // SAFETY: readable strings by this function's contract.
    unsafe {
        Ok(Wire {
            transport: w.transport.to_str("lc_sip_wire.transport")?,
            sent_by: w.sent_by.to_str("lc_sip_wire.sent_by")?,
            contact: w.contact.to_str("lc_sip_wire.contact")?,
        })
    }
}

/// The result code of a wire error, with its message as the call's error detail.
fn wire_error(e: &WireError) -> Code {
    crate::error::detail(format_args!("SIP: {e}"));
    match e {
        WireError::Sip(s) => crate::worker::sip_error(*s),
        WireError::OtherMethod(_) => Code::SipOtherMessage,
        WireError::Missing(_) => Code::SipMissingHeader,
        WireError::TruncatedBody => Code::SipTruncated,
        WireError::BadStatusLine | WireError::BadValue(_) => Code::SipBadHeader,
    }
}

/// What a handle's `…_transmit_wire` rendered last.
#[derive(Default)]
pub(crate) struct Rendered {
    /// A request that did not fit the caller's buffer yet (empty once delivered).
    pending: Vec<u8>,
    /// Where the last request goes (its first Route, else its Request-URI).
    next_hop: String,
}

/// The shared part of the two `…_transmit_wire` functions: renders the handle's next request
/// (`next`) unless one is still pending, and delivers it.
///
/// # Safety
/// Every string of `w` and `branch` readable or absent.
unsafe fn transmit(
    r: &mut Rendered,
    next: impl FnOnce() -> Option<loadctl::event::EventRequest>,
    w: &lc_sip_wire,
    branch: lc_str,
    out: OutBuf<'_>,
) -> Code {
    if r.pending.is_empty() {
        // SAFETY: readable strings by the caller's contract.
        let (wire, branch) =
            try_!(unsafe { wire_of(w).and_then(|w| Ok((w, branch.to_str("branch")?))) });
        if !branch.starts_with("z9hG4bK") {
            return crate::abi::invalid(
                "branch",
                format_args!("{branch:?} does not start with the RFC 3261 magic cookie z9hG4bK"),
            );
        }
        let Some(req) = next() else {
            return Code::Empty;
        };
        let via = Via {
            transport: wire.transport,
            sent_by: wire.sent_by,
            branch,
        };
        wire::write_request(&req, &via, wire.contact, &mut r.pending);
        r.next_hop = req.next_hop().as_str().to_owned();
    }
    let code = out.deliver(&r.pending);
    if code == Code::Ok {
        r.pending.clear();
    }
    code
}

/// Renders the subscriber's next SUBSCRIBE as SIP bytes into `buf` (not NUL-terminated) and its
/// length into `*len`, with a Via from `wire` and `branch` and this end's Contact. `branch` is
/// the Via branch for this transaction (must start with `z9hG4bK`; keep it to match the
/// response and to retransmit the same bytes over UDP). Send the bytes to
/// `lc_subscriber_wire_next_hop`. `wire` and `branch` are read during the call only.
///
/// Errors: `LC_RESULT_EMPTY`: nothing to send. `LC_RESULT_BUFFER_TOO_SMALL`: `*len` is the size
/// needed; the request is kept and the next call (with a bigger buffer) delivers it, ignoring
/// `branch`. `LC_RESULT_INVALID_ARGUMENT` for a `branch` without the `z9hG4bK` cookie;
/// `LC_RESULT_NULL_PARAMETER` for a NULL `wire` string or `branch`.
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
        let (s, wire, out) = (try_mut!(sub), try_ref!(wire), try_buf!(buf, cap, len));
        let (rendered, handle) = (&mut s.wire, &mut s.sub);
        // SAFETY: readable strings by contract.
        unsafe { transmit(rendered, || handle.poll_transmit(), wire, branch, out) }
    })
}

/// Takes one received message of the package (`msg_len` bytes, read during the call only): a
/// NOTIFY (applied to the engine as `lc_subscriber_handle_notify` does; the response to send
/// back is written to `buf`, `*len` bytes, not NUL-terminated, with the NOTIFY's Via headers
/// copied: send it where the NOTIFY came from) or a response to this subscriber's SUBSCRIBE
/// (`*len` = 0).
///
/// Errors: a message of another method, or a SUBSCRIBE, is `LC_RESULT_SIP_OTHER_MESSAGE` (for
/// the caller's own handling); malformed bytes get an `LC_RESULT_SIP_*` code (`lc_last_error`
/// says what) and change nothing. `LC_RESULT_BUFFER_TOO_SMALL` (`*len`: the size needed): the
/// message was taken all the same, and its response is lost; a retransmission is taken as a
/// new message (a `terminated` NOTIFY then gets 481). Give a buffer of at least 4 KiB plus the
/// size of the received Via headers so that this never happens.
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
        let (s, bytes) = (try_mut!(sub), try_slice!(msg, msg_len));
        let (wire, out) = (try_ref!(wire), try_buf!(buf, cap, len));
        // SAFETY: readable strings by contract.
        unsafe {
            receive(bytes, wire, &SUBSCRIBER, out, |m| match m {
                Incoming::Request(req) => Some(s.sub.handle_notify(now_ns, req)),
                Incoming::Response(resp) => {
                    s.sub.handle_response(now_ns, resp);
                    None
                }
            })
        }
    })
}

/// A scanned message of the package, for the handle that takes it.
enum Incoming<'a> {
    Request(&'a loadctl::event::EventRequest),
    Response(&'a loadctl::event::Response),
}

/// Which end of the package a handle is, for `receive`.
struct Role {
    /// The method of the requests it takes (and answers).
    takes: &'static [u8],
    /// The method of its own requests, whose responses it takes.
    answers: &'static [u8],
    /// Whether its 2xx answers carry this end's Contact (a notifier's 2xx to SUBSCRIBE).
    contact_on_2xx: bool,
}

/// A subscriber takes NOTIFYs and responses to its SUBSCRIBEs.
const SUBSCRIBER: Role = Role {
    takes: b"NOTIFY",
    answers: b"SUBSCRIBE",
    contact_on_2xx: false,
};

/// A notifier takes SUBSCRIBEs (its 2xx with a Contact) and responses to its NOTIFYs.
const NOTIFIER: Role = Role {
    takes: b"SUBSCRIBE",
    answers: b"NOTIFY",
    contact_on_2xx: true,
};

/// What both `…_receive_wire` functions do: scan `bytes`; a request the `role` takes goes to
/// `handle`, whose answer is delivered to `out`; a response to one of the role's own requests
/// goes to `handle` too (length 0); anything else is `LC_RESULT_SIP_OTHER_MESSAGE`.
///
/// # Safety
/// Every string of `w` readable.
unsafe fn receive(
    bytes: &[u8],
    w: &lc_sip_wire,
    role: &Role,
    out: OutBuf<'_>,
    handle: impl FnOnce(Incoming<'_>) -> Option<loadctl::event::Response>,
) -> Code {
    // SAFETY: readable strings by this function's contract.
    let w = try_!(unsafe { wire_of(w) });
    let raw = try_!(wire::scan(bytes).map_err(|e| wire_error(&e)));
    if raw.status == 0 && raw.method == role.takes {
        let req = try_!(raw.request().map_err(|e| wire_error(&e)));
        let Some(resp) = handle(Incoming::Request(&req)) else {
            return Code::Ok;
        };
        let contact = (role.contact_on_2xx && resp.is_success()).then_some(w.contact);
        let mut answer = Vec::with_capacity(512);
        wire::write_response(&resp, &raw, contact, &mut answer);
        out.deliver(&answer)
    } else if raw.status != 0 && raw.method == role.answers {
        let r = try_!(raw.response().map_err(|e| wire_error(&e)));
        handle(Incoming::Response(&r));
        out.nothing()
    } else {
        Code::SipOtherMessage
    }
}

/// Renders the notifier's next NOTIFY as SIP bytes (as `lc_subscriber_transmit_wire`, with the
/// same errors). Send it to `lc_notifier_wire_next_hop`.
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
        let (h, wire, out) = (try_mut!(n), try_ref!(wire), try_buf!(buf, cap, len));
        let (rendered, handle) = (&mut h.wire, &mut h.notifier);
        // SAFETY: readable strings by contract.
        unsafe { transmit(rendered, || handle.poll_transmit(), wire, branch, out) }
    })
}

/// Takes one received message of the package: a SUBSCRIBE (answered as
/// `lc_notifier_handle_subscribe` does; the response, with this end's Contact on a 2xx, is
/// written to `buf`) or a response to one of this notifier's NOTIFYs (`*len` = 0). Errors as for
/// `lc_subscriber_receive_wire` (other messages: `LC_RESULT_SIP_OTHER_MESSAGE`); a SUBSCRIBE
/// whose response did not fit is taken all the same, and its retransmission (no To tag yet)
/// starts a second subscription: give a buffer of at least 4 KiB plus the Via headers. The
/// notifier does not absorb SUBSCRIBE retransmissions: a transaction layer in front of it
/// should (RFC 3261 §17.2).
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
        let (h, bytes) = (try_mut!(n), try_slice!(msg, msg_len));
        let (wire, out) = (try_ref!(wire), try_buf!(buf, cap, len));
        // SAFETY: readable strings by contract.
        unsafe {
            receive(bytes, wire, &NOTIFIER, out, |m| match m {
                Incoming::Request(req) => Some(h.notifier.handle_subscribe(now_ns, req)),
                Incoming::Response(resp) => {
                    h.notifier.handle_response(now_ns, resp);
                    None
                }
            })
        }
    })
}

/// Writes `hop` to `out`, or `Empty` when there is none yet.
fn write_hop(hop: &str, out: Out<'_, lc_str>) -> Code {
    if hop.is_empty() {
        return Code::Empty;
    }
    out.write(lc_str::from_bytes(hop.as_bytes()));
    Code::Ok
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
    boundary(|| write_hop(&try_ref!(sub).wire.next_hop, try_out!(out)))
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
    boundary(|| write_hop(&try_ref!(n).wire.next_hop, try_out!(out)))
}
