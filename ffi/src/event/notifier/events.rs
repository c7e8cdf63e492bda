//! What a notifier reports, taken one at a time: each `NotifierEvent` as an
//! `lc_notifier_event`.

use super::*;

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
