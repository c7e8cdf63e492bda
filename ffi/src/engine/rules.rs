//! What an engine enforces: its rules, each source's version and policy, and the Prometheus
//! exposition.

use std::ffi::c_void;

use loadctl::policy::{self, AltAction, Limit, Uri};

use super::lc_engine;
use crate::worker::{LC_VERDICT_DROP, LC_VERDICT_REDIRECT, LC_VERDICT_REJECT, lc_verdict};
use crate::{Code, boundary, lc_result, lc_str};

/// What a rule's `limit` counts (`lc_rule_info.limit_kind`): an `LC_LIMIT_*` value.
pub type lc_limit_kind = u32;
/// `<rate>`: `limit` is requests per second.
pub const LC_LIMIT_RATE: lc_limit_kind = 1;
/// `<percent>`: `limit` is the percentage (0 to 100) of the matching requests accepted.
pub const LC_LIMIT_PERCENT: lc_limit_kind = 2;
/// `<win>`: `limit` is how many accepted requests may be outstanding at once (a window rule's
/// admission holds its slot until its ticket goes back through `lc_complete`).
pub const LC_LIMIT_WINDOW: lc_limit_kind = 3;

/// One rule of the published policy as it is enforced, for `lc_engine_rules_each` (its counters
/// are `lc_engine_stats_each`'s). The strings are valid during the callback.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_rule_info {
    /// Position in the published policy (the order rules are tried). To pair a row with
    /// `lc_engine_stats_each`'s, match `source` and `rule`: a publish between the two calls
    /// may move indexes.
    pub index: usize,
    /// The source that published the rule.
    pub source: lc_str,
    /// The rule id.
    pub rule: lc_str,
    /// The whole rule on one line, as `loadctl check` prints it (`r1: to in
    /// {tel:+1-212-555-1234}; method INVITE -> accept rate 100/s, else reject (503)`). For
    /// people: the format may change in any release, do not parse it.
    pub text: lc_str,
    /// The version (the `version` attribute of `<ruleset>`, RFC 7200) of the source's current
    /// policy: that of the last document applied to it, full or partial (partial documents
    /// merged in), as `lc_engine_source_version` gives it. The same in every row of a source.
    pub source_version: u32,
    /// What `limit` counts: an `LC_LIMIT_*` value.
    pub limit_kind: lc_limit_kind,
    /// The amount accepted: requests per second (`LC_LIMIT_RATE`), the percentage of matching
    /// requests (`LC_LIMIT_PERCENT`) or the outstanding requests (`LC_LIMIT_WINDOW`).
    pub limit: f64,
    /// For `LC_VERDICT_REDIRECT`: the `alt-target` URIs, in document order, separated by single
    /// spaces. Empty (`len` 0) otherwise.
    pub alt_targets: lc_str,
    /// What the requests over the limit get (the rule's `alt-action`), as the `lc_decision`
    /// verdict they are given: `LC_VERDICT_REJECT` (503), `LC_VERDICT_REDIRECT` (302 to
    /// `alt_targets`) or `LC_VERDICT_DROP`. The policy as written: a notifier's redirect that
    /// the engine answers with a reject (its targets are outside `redirect_allow`, see
    /// `lc_rule_stats.redirect_refused`) is still `LC_VERDICT_REDIRECT` here.
    pub alt_action: lc_verdict,
}

/// The C values of a limit: (`LC_LIMIT_*`, the amount).
fn limit_to_c(limit: &Limit) -> (lc_limit_kind, f64) {
    match *limit {
        Limit::Rate(r) => (LC_LIMIT_RATE, r.per_second()),
        Limit::Percent(p) => (LC_LIMIT_PERCENT, p.value()),
        Limit::Window(w) => (LC_LIMIT_WINDOW, f64::from(w)),
    }
}

/// The C verdict of an alt-action and its targets joined by spaces (empty but for a redirect).
fn alt_action_to_c(alt: &AltAction) -> (lc_verdict, String) {
    match alt {
        AltAction::Reject => (LC_VERDICT_REJECT, String::new()),
        AltAction::Drop => (LC_VERDICT_DROP, String::new()),
        AltAction::Redirect(targets) => {
            let targets: Vec<&str> = targets.iter().map(Uri::as_str).collect();
            (LC_VERDICT_REDIRECT, targets.join(" "))
        }
    }
}

/// Calls `callback(userdata, &row)` once for each rule of the published policy, in the order
/// rules are tried, on the calling thread, before returning: what each rule is (its source and
/// the version of the source's policy, its limit, what the excess gets), where
/// `lc_engine_stats_each` gives what it counted. The rows are a copy taken when the call starts:
/// the callback may call any `lc_` function, publishing to this engine included, without
/// changing what the remaining rows report. `row` and its strings (`source`, `rule`, `text`,
/// `alt_targets`) are valid during that callback only: copy what you keep. The callback must
/// not unwind (no C++ exceptions, no `longjmp` out of it). `callback` NULL:
/// `LC_RESULT_NULL_PARAMETER`. A source whose policy has no rules has no row
/// (`lc_engine_source_version` gives its version).
///
/// # Safety
/// `engine` from `lc_engine_new`; `callback` a valid function that does not unwind; `userdata`
/// is passed through untouched.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_rules_each(
    engine: *const lc_engine,
    callback: Option<unsafe extern "C" fn(userdata: *mut c_void, row: *const lc_rule_info)>,
    userdata: *mut c_void,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let Some(callback) = callback else {
            return crate::abi::null("callback");
        };
        // Immutable: a publish from the callback swaps in another snapshot and leaves this one.
        let snapshot = engine.snapshot();
        for (index, r) in snapshot.rules().enumerate() {
            let (limit_kind, limit) = limit_to_c(&r.rule.accept.limit);
            let (alt_action, alt_targets) = alt_action_to_c(&r.rule.accept.alt_action);
            let text = r.rule.to_string();
            let row = lc_rule_info {
                index,
                source: lc_str::from_bytes(r.source.as_bytes()),
                rule: lc_str::from_bytes(r.rule.id.as_str().as_bytes()),
                text: lc_str::from_bytes(text.as_bytes()),
                source_version: r.source_version,
                limit_kind,
                limit,
                alt_targets: lc_str::from_bytes(alt_targets.as_bytes()),
                alt_action,
            };
            // SAFETY: the caller provides a valid callback; `row` and the strings it points
            // into (`snapshot`, `text`, `alt_targets`) live across the call.
            unsafe { callback(userdata, &row) };
        }
        Code::Ok
    })
}

/// Writes the version (the `version` attribute of `<ruleset>`, RFC 7200) of `source`'s current
/// policy into `*out`: that of the last document applied to it, full or partial. The next
/// partial document `lc_engine_apply` takes for the source carries this version + 1. A source
/// whose policy has no rules has a version too (and no row in `lc_engine_rules_each`).
///
/// Errors: `LC_RESULT_UNKNOWN_SOURCE` when the source has no policy (none published, or
/// withdrawn).
///
/// # Safety
/// `engine` from `lc_engine_new`; `source` readable; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_source_version(
    engine: *const lc_engine,
    source: lc_str,
    out: *mut u32,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let out = try_out!(out);
        let name = try_str!(source);
        match engine.snapshot().source_version(name) {
            Some(version) => {
                out.write(version);
                Code::Ok
            }
            None => crate::error::fail(
                Code::UnknownSource,
                format_args!("no policy from source {name:?}"),
            ),
        }
    })
}

/// Writes the counters in the Prometheus text exposition format (version 0.0.4) into `buf` and
/// the length into `*written` (not NUL-terminated). When `cap` is too small returns
/// `LC_RESULT_BUFFER_TOO_SMALL` with `*written` set to the size needed (call again with a bigger
/// buffer; rules may have been added in between, so allow some slack or loop).
///
/// The metrics (every counter is `_total`):
/// - `loadctl_rule_{matched,accepted,rejected,redirected,dropped,redirect_refused}_total`
///   with labels `source` and `rule`: per rule of the published policy. A rule whose limit
///   or conditions change (a NOTIFY retuning a rate) is another rule to the engine: its row
///   starts again at 0 (Prometheus treats that as a counter reset) while its counts move
///   into the source's totals below;
/// - `loadctl_source_{matched,accepted,rejected,redirected,dropped,redirect_refused}_total`
///   with label `source`: per source, rules removed or changed since included (monotonic);
/// - `loadctl_exempt_total`: requests let through without trying any rule;
/// - `loadctl_exempt_reason_total` with label `reason` = `not-filtered` (RFC 7200 §5.1),
///   `emergency` (sos URN), `resource-priority` (an exempt namespace);
/// - `loadctl_unmatched_total`: requests no rule matched;
/// - `loadctl_unread_numbers_total`: of those, requests with a number-like SIP user part the
///   `sip_user_numbers` setting did not read (see `lc_stats.unread_numbers`);
/// - gauges `loadctl_policy_generation` (the published snapshot) and `loadctl_policy_rules`.
///
/// # Safety
/// `engine` from `lc_engine_new`; `buf` writable for `cap` bytes (or NULL with `cap` 0);
/// `written` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_prometheus(
    engine: *const lc_engine,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let out = try_buf!(buf, cap, written);
        out.deliver(engine.stats().prometheus().as_bytes())
    })
}

/// Writes the current policy of `source` — every full and partial document applied so far,
/// merged — as one full `application/load-control+xml` document into `buf` and its length into
/// `*written` (not NUL-terminated); it reads back (`lc_engine_publish`) as the same policy. For
/// copying a source's policy to other engines (the processes of a forking server) or showing it
/// to an operator.
///
/// Errors: `LC_RESULT_BUFFER_TOO_SMALL` with `*written` set to the size needed (`buf`
/// untouched); `LC_RESULT_UNKNOWN_SOURCE` when the source has no policy.
///
/// # Safety
/// `engine` from `lc_engine_new`; `source` readable; `buf` writable for `cap` bytes (or NULL
/// with `cap` 0); `written` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_source_policy(
    engine: *const lc_engine,
    source: lc_str,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let out = try_buf!(buf, cap, written);
        let name = try_str!(source);
        let Some(policy) = engine.source_policy(name) else {
            return Code::UnknownSource;
        };
        out.deliver(policy::write(&policy).as_bytes())
    })
}
