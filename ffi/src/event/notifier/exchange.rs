//! The SIP side of the handle: SUBSCRIBEs and NOTIFY answers in, NOTIFYs out, and the timers
//! that pace and expire them.

use super::*;

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
