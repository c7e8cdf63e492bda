//! An engine's counters: totals and per rule.

use std::ffi::c_void;

use loadctl::runtime::EngineStats;

use super::lc_engine;
use crate::{Code, boundary, lc_result, lc_str};

/// Totals over every worker (attached or freed).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_stats {
    /// The published snapshot generation.
    pub generation: u64,
    /// Rules in the published policy.
    pub rules: u64,
    /// Requests classified.
    pub total: u64,
    /// Let through without trying any rule, for any reason (the three counts below).
    pub exempt: u64,
    /// No rule matched.
    pub unmatched: u64,
    /// Matched a rule (removed rules included).
    pub matched: u64,
    /// Admitted by the matched rule.
    pub accepted: u64,
    /// Answered 503.
    pub rejected: u64,
    /// Redirected.
    pub redirected: u64,
    /// Dropped.
    pub dropped: u64,
    /// Of `exempt`: not filtered by RFC 7200 §5.1 (ACK, BYE, CANCEL, in-dialog, load-control
    /// SUBSCRIBE).
    pub exempt_not_filtered: u64,
    /// Of `exempt`: emergency calls (RFC 5031 `urn:service:sos`, `urn:service:sos.*`).
    pub exempt_emergency: u64,
    /// Of `exempt`: an exempt Resource-Priority namespace (RFC 4412).
    pub exempt_resource_priority: u64,
    /// Of `unmatched`, while the policy compares telephone numbers (a `many-tel`, a `tel:` id):
    /// requests with a SIP/SIPS URI in a field some rule looks at whose user part looks like a
    /// number (digits and visual separators after an optional `+`) that
    /// `lc_engine_config.sip_user_numbers` did not read as one. Non-zero means tel rules may
    /// be missing calls they were meant for (`loadctl explain` names the setting that would
    /// match them).
    pub unread_numbers: u64,
}

/// One rule's counters, for `lc_engine_stats_each`. The strings are valid during the callback.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_rule_stats {
    /// Position in the published policy (the order rules are tried).
    pub index: usize,
    /// The source that published the rule.
    pub source: lc_str,
    /// The rule id.
    pub rule: lc_str,
    /// Requests matched.
    pub matched: u64,
    /// Admitted.
    pub accepted: u64,
    /// Answered 503.
    pub rejected: u64,
    /// Redirected.
    pub redirected: u64,
    /// Dropped.
    pub dropped: u64,
    /// Redirects turned into 503 by the allow-list.
    pub redirect_refused: u64,
}

fn totals(s: &EngineStats) -> lc_stats {
    let mut t = lc_stats {
        generation: s.generation,
        rules: s.rules.len() as u64,
        total: s.total(),
        exempt: s.exempt,
        unmatched: s.unmatched,
        exempt_not_filtered: s.exempt_by_reason.not_filtered,
        exempt_emergency: s.exempt_by_reason.emergency,
        exempt_resource_priority: s.exempt_by_reason.resource_priority,
        unread_numbers: s.unread_numbers,
        ..lc_stats::default()
    };
    for src in &s.sources {
        t.matched += src.stats.matched;
        t.accepted += src.stats.accepted;
        t.rejected += src.stats.rejected;
        t.redirected += src.stats.redirected;
        t.dropped += src.stats.dropped;
    }
    t
}

/// Writes the totals over every worker (attached or freed) into `*out`. Counters are read
/// without stopping the workers: each is exact, their sum is a snapshot in motion.
///
/// # Safety
/// `engine` from `lc_engine_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_stats(
    engine: *const lc_engine,
    out: *mut lc_stats,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let out = try_out!(out);
        out.write(totals(&engine.stats()));
        Code::Ok
    })
}

/// Calls `callback(userdata, &row)` once for each rule of the published policy, in the order
/// rules are tried, on the calling thread, before returning. The rows are a copy taken when the
/// call starts: the callback may call any `lc_` function, publishing to this engine included,
/// without changing what the remaining rows report. `row` and its strings (`source`, `rule`)
/// are valid during that callback only. The callback must not unwind (no C++ exceptions, no
/// `longjmp` out of it). `callback` NULL: `LC_RESULT_NULL_PARAMETER`.
///
/// # Safety
/// `engine` from `lc_engine_new`; `callback` a valid function that does not unwind; `userdata`
/// is passed through untouched.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_stats_each(
    engine: *const lc_engine,
    callback: Option<unsafe extern "C" fn(userdata: *mut c_void, row: *const lc_rule_stats)>,
    userdata: *mut c_void,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let Some(callback) = callback else {
            return crate::abi::null("callback");
        };
        let stats = engine.stats();
        for (index, r) in stats.rules.iter().enumerate() {
            let row = lc_rule_stats {
                index,
                source: lc_str::from_bytes(r.source.as_bytes()),
                rule: lc_str::from_bytes(r.rule.as_bytes()),
                matched: r.stats.matched,
                accepted: r.stats.accepted,
                rejected: r.stats.rejected,
                redirected: r.stats.redirected,
                dropped: r.stats.dropped,
                redirect_refused: r.stats.redirect_refused,
            };
            // SAFETY: the caller provides a valid callback; `row` lives across the call.
            unsafe { callback(userdata, &row) };
        }
        Code::Ok
    })
}
