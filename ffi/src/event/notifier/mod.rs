//! `lc_notifier`: pushes policies to its subscribers, shares a capacity among them by demand,
//! and keeps its dialogs across a restart.
//!
//! This file holds the handle, the events it hands out and its life (`lc_notifier_new`,
//! `lc_notifier_free`); each other part of the API is a file of its own: `config` (the C
//! settings and their checks), `policies`, `capacity` (a shared capacity and its shares),
//! `exchange` (SUBSCRIBEs, NOTIFY answers, what to send, the timers), `shutdown`, `dialogs`
//! (saved dialogs across a restart) and `events` (taking them out).

// cbindgen writes the header's types, constants and functions in the order it meets them:
// this module's first, then the modules below in the order they are declared (one a group, so
// that rustfmt keeps that order), which is the header's.
mod config;

mod policies;

mod capacity;

mod exchange;

mod shutdown;

mod dialogs;

mod events;

pub use capacity::*;
pub use config::*;
pub use dialogs::*;
pub use events::*;
pub use exchange::*;
pub use policies::*;
pub use shutdown::*;

use super::*;

/// A notifier: pushes policies to its subscribers. One thread at a time.
pub struct lc_notifier {
    pub(crate) notifier: Notifier,
    out_request: Option<EventRequest>,
    out_route: String,
    out_response: Option<Response>,
    event_text: String,
    /// The subscriber named by the last `lc_notifier_share`.
    share_text: String,
    /// What `lc_notifier_transmit_wire` rendered last.
    pub(crate) wire: crate::wire::Rendered,
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
        let nc = try_!(unsafe { config::notifier_config(c) });
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
