//! `lc_subscriber`: one subscription to one notifier, feeding an engine.

use super::*;

/// A subscriber: one subscription to one notifier, feeding an engine. One thread at a time.
pub struct lc_subscriber {
    pub(crate) sub: Subscriber,
    out_request: Option<EventRequest>,
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
