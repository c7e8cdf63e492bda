//! `lc_notifier`: pushes policies to its subscribers, shares a capacity among them by demand,
//! and keeps its dialogs across a restart.

use super::*;

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
        {
            let mut config = AllocatorConfig::default();
            config.period_ns = self.period_ns;
            config.alpha = f(self.alpha_ppm);
            config.busy = f(self.busy_ppm);
            config.probe = f(self.probe_ppm);
            config.headroom = f(self.headroom_ppm);
            config.hysteresis = f(self.hysteresis_ppm);
            config.min_share = self.min_share_milli as f64 / 1e3;
            config
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
