//! A capacity shared among the subscribers by demand: the allocator's settings in C units
//! (parts per million, thousandths of a request per second), the capacity's template, demand
//! observations and each subscriber's share.

use super::policies::policy_of;
use super::*;

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
            period_ns: crate::abi::nanos(c.period),
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
            config.period = std::time::Duration::from_nanos(self.period_ns);
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
    /// next call on it, `lc_notifier_share` included: a loop over the shares copies each URI
    /// it keeps before asking for the next share.
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
