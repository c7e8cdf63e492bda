//! The engine handle: configuration, policies (publish / apply / withdraw), stats.

use std::ffi::c_void;
use std::time::Duration;

use loadctl::policy::{self, AltAction, Limit, MergeError, Uri};
use loadctl::runtime::{Engine, EngineConfig, EngineStats, PublishError, Source};
use loadctl::uri::SipUserNumbers;

use crate::worker::{LC_VERDICT_DROP, LC_VERDICT_REDIRECT, LC_VERDICT_REJECT, lc_verdict};
use crate::{Code, boundary, lc_result, lc_str};

/// The engine: owns the published policy; shared by every worker. Thread-safe.
pub struct lc_engine {
    pub(crate) engine: Engine,
}

impl lc_engine {
    /// The Rust engine behind the handle (for Rust code that links the rlib).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// Engine settings. Get the defaults with `lc_engine_config_default` and change what you need.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_engine_config {
    /// Expected number of workers. Default: the number of cores. Advisory today (must not be
    /// 0): any number of workers may attach.
    pub shards: u32,
    /// GCRA burst tolerance of rate rules, milliseconds. Default 100.
    pub burst_tolerance_ms: u32,
    /// Rate-token lease horizon, microseconds. Default 500.
    pub lease_period_us: u32,
    /// Most rules over all sources. Default 100,000.
    pub max_rules: u32,
    /// Largest policy body, bytes. Default 64 MiB.
    pub max_body_bytes: u64,
    /// Space-separated hosts/domains a notifier's redirect targets may point at **besides the
    /// notifier's own domain** (its URI's host and that host's subdomains; an IP literal is
    /// itself only). RFC 7200 §7: the destinations of redirects are agreed in advance. A
    /// redirect from a notifier's policy (`lc_engine_publish` / `lc_engine_apply` with a
    /// `notifier`, or a subscriber) to any other target is answered as a reject (503) and
    /// counted in `redirect_refused`. `*` allows every target. Absent or empty: the notifier's
    /// own domain only. Policies published without a `notifier` (the operator's) are trusted.
    pub redirect_allow: lc_str,
    /// Which requests are let through before any rule is tried: a bitwise OR of `LC_EXEMPT_*`
    /// (`LC_EXEMPT_EMERGENCY`). Default `LC_EXEMPT_EMERGENCY`. An undeclared bit:
    /// `LC_RESULT_INVALID_ARGUMENT`.
    pub exempt_flags: u32,
    /// Resource-Priority namespaces (RFC 4412 §3.1, compared case-insensitively) whose requests
    /// are let through, separated by commas and/or spaces. Default `"ets wps"` (a static string
    /// of the library). Absent or empty: none. A name that is not an RFC 4412 `token-nodot`:
    /// `LC_RESULT_INVALID_ARGUMENT`; not UTF-8: `LC_RESULT_INVALID_UTF8`. Read during
    /// `lc_engine_new*` only (the engine keeps a copy).
    pub priority_namespaces: lc_str,
    /// How the user part of a `sip:`/`sips:` URI **without `;user=phone`** is read, in From,
    /// To, Request-URI and P-Asserted-Identity and in the policy's ids alike: an
    /// `LC_SIP_USER_NUMBERS_*` value. RFC 3261 §19.1.1: "Even without this parameter,
    /// recipients of SIP and SIPS URIs MAY interpret the pre-@ part as a telephone number if
    /// local restrictions on the name space for user name allow it." Default
    /// `LC_SIP_USER_NUMBERS_GLOBAL` (0, so a zeroed field is the default). Any other value:
    /// `LC_RESULT_INVALID_ARGUMENT`. URIs with `user=phone` are numbers under every value.
    pub sip_user_numbers: lc_sip_user_numbers,
}

/// How SIP user parts without `user=phone` are read (`lc_engine_config.sip_user_numbers`). A
/// user part read as a number holds only digits and the visual separators `-` `.` `(` `)`
/// (no parameters, no %-escapes); anything else stays a user name.
pub type lc_sip_user_numbers = u32;
/// `+` followed by digits and visual separators is a global number (`sip:+1-555-0100@gw` is
/// `tel:+15550100`): a `<many-tel prefix="+1555"/>` rule matches it. The default.
pub const LC_SIP_USER_NUMBERS_GLOBAL: lc_sip_user_numbers = 0;
/// Only `;user=phone` makes a number (the strict reading of RFC 3261 §19.1.1).
pub const LC_SIP_USER_NUMBERS_USER_PHONE: lc_sip_user_numbers = 1;
/// As `LC_SIP_USER_NUMBERS_GLOBAL`, and digits and visual separators alone are a local number
/// whose phone-context is the URI's host (`sip:7042@pbx.example` is
/// `tel:7042;phone-context=pbx.example`; RFC 3966 §5.1.5: local numbers need a context).
pub const LC_SIP_USER_NUMBERS_DIGITS: lc_sip_user_numbers = 2;

impl crate::abi::FromC for SipUserNumbers {
    const C_NAMES: &'static str = "LC_SIP_USER_NUMBERS_*";

    fn from_c(value: u32) -> Option<Self> {
        Some(match value {
            LC_SIP_USER_NUMBERS_GLOBAL => SipUserNumbers::Global,
            LC_SIP_USER_NUMBERS_USER_PHONE => SipUserNumbers::UserPhone,
            LC_SIP_USER_NUMBERS_DIGITS => SipUserNumbers::Digits,
            _ => return None,
        })
    }
}

/// The C value of a setting.
fn sip_user_numbers_to_c(n: SipUserNumbers) -> lc_sip_user_numbers {
    match n {
        SipUserNumbers::Global => LC_SIP_USER_NUMBERS_GLOBAL,
        SipUserNumbers::UserPhone => LC_SIP_USER_NUMBERS_USER_PHONE,
        SipUserNumbers::Digits => LC_SIP_USER_NUMBERS_DIGITS,
    }
}

/// Bits of `lc_engine_config.exempt_flags`.
pub type lc_exempt_flags = u32;

/// Let emergency requests through: Request-URI (or To, when the Request-URI is not a URN)
/// `urn:service:sos` or `urn:service:sos.*` (RFC 5031).
pub const LC_EXEMPT_EMERGENCY: lc_exempt_flags = 1;

/// Every declared `LC_EXEMPT_*` bit.
const EXEMPT_KNOWN: u32 = LC_EXEMPT_EMERGENCY;

/// The default `priority_namespaces`: `Exemptions::default()`'s (a unit test keeps them equal).
static DEFAULT_NAMESPACES: &str = "ets wps";

/// RFC 4412 §3.1: `token-nodot = 1*( alphanum / "-" / "!" / "%" / "*" / "_" / "+" / "`" /
/// "'" / "~" )`.
fn is_token_nodot(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-!%*_+`'~".contains(&b))
}

/// The namespaces of a `priority_namespaces` list (commas and/or spaces between names).
fn namespaces(list: &[u8]) -> Result<Vec<String>, Code> {
    let list = std::str::from_utf8(list).map_err(|e| {
        crate::error::fail(
            Code::InvalidUtf8,
            format_args!(
                "lc_engine_config.priority_namespaces: not UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )
    })?;
    list.split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|n| !n.is_empty())
        .map(|n| {
            if is_token_nodot(n) {
                Ok(n.to_ascii_lowercase())
            } else {
                Err(crate::abi::invalid(
                    "lc_engine_config.priority_namespaces",
                    format_args!("{n:?} is not a namespace (RFC 4412 token-nodot)"),
                ))
            }
        })
        .collect()
}

/// Writes the default configuration into `*out`. Its `priority_namespaces` points at a static
/// string of the library (valid forever); the other strings are absent.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one `lc_engine_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_config_default(out: *mut lc_engine_config) -> lc_result {
    boundary(|| {
        let out = try_out!(out);
        let d = EngineConfig::default();
        let config = lc_engine_config {
            shards: d.shards as u32,
            burst_tolerance_ms: d.burst_tolerance.as_millis() as u32,
            lease_period_us: d.lease_period.as_micros() as u32,
            max_rules: d.limits.max_rules as u32,
            max_body_bytes: d.limits.max_body_bytes as u64,
            redirect_allow: lc_str::NONE,
            exempt_flags: if d.exemptions.emergency {
                LC_EXEMPT_EMERGENCY
            } else {
                0
            },
            priority_namespaces: lc_str::from_bytes(DEFAULT_NAMESPACES.as_bytes()),
            sip_user_numbers: sip_user_numbers_to_c(d.compile.sip_user_numbers),
        };
        out.write(config);
        Code::Ok
    })
}

/// Creates an engine with no policy (every request accepted) and writes it to `*out` (the
/// caller's, freed with `lc_engine_free`). `config` NULL means the defaults; the engine copies
/// what it needs from `config` and its strings during the call.
///
/// Errors: `LC_RESULT_INVALID_ARGUMENT` when `shards`, `max_rules` or `max_body_bytes` is 0,
/// `exempt_flags` sets an undeclared bit, `sip_user_numbers` is not an `LC_SIP_USER_NUMBERS_*`
/// value, or `priority_namespaces` holds a name that is not an RFC 4412 `token-nodot`;
/// `LC_RESULT_INVALID_UTF8` when `redirect_allow` or `priority_namespaces` is not UTF-8.
///
/// # Safety
/// `config` must be NULL or valid (its `redirect_allow` and `priority_namespaces` readable);
/// `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_new(
    config: *const lc_engine_config,
    out: *mut *mut lc_engine,
) -> lc_result {
    // SAFETY: forwarded from the caller.
    boundary(|| unsafe { new_engine(config, out, |c| Ok(Engine::new(c))) })
}

/// Reads `config`, builds the engine with `make` and writes its handle to `*out` (the body of
/// the `lc_engine_new*` constructors).
///
/// # Safety
/// `config` must be NULL or valid (its `redirect_allow` and `priority_namespaces` readable);
/// `out` NULL or writable.
pub(crate) unsafe fn new_engine(
    config: *const lc_engine_config,
    out: *mut *mut lc_engine,
    make: impl FnOnce(EngineConfig) -> Result<Engine, Code>,
) -> Code {
    let out = try_out!(out);
    // SAFETY: the caller promises `config` is NULL or valid.
    let engine = try_!(unsafe { engine_config(config) }.and_then(make));
    out.write(Box::into_raw(Box::new(lc_engine { engine })));
    Code::Ok
}

/// The engine configuration `config` describes (NULL: the defaults).
///
/// # Safety
/// `config` must be NULL or valid (its `redirect_allow` and `priority_namespaces` readable).
unsafe fn engine_config(config: *const lc_engine_config) -> Result<EngineConfig, Code> {
    let mut c = EngineConfig::default();
    // SAFETY: the caller promises NULL or a valid struct.
    if let Some(&cfg) = unsafe { config.as_ref() } {
        let exempt_flags = crate::abi::checked_flags(
            cfg.exempt_flags,
            EXEMPT_KNOWN,
            "lc_engine_config.exempt_flags",
        )?;
        let numbers: SipUserNumbers =
            crate::abi::checked(cfg.sip_user_numbers, "lc_engine_config.sip_user_numbers")?;
        for (field, zero) in [
            ("shards", cfg.shards == 0),
            ("max_rules", cfg.max_rules == 0),
            ("max_body_bytes", cfg.max_body_bytes == 0),
        ] {
            if zero {
                return Err(crate::abi::invalid(
                    &format!("lc_engine_config.{field}"),
                    "0 (must be at least 1)",
                ));
            }
        }
        c.shards = cfg.shards as usize;
        c.burst_tolerance = Duration::from_millis(u64::from(cfg.burst_tolerance_ms));
        c.lease_period = Duration::from_micros(u64::from(cfg.lease_period_us));
        c.limits.max_rules = cfg.max_rules as usize;
        c.limits.max_body_bytes = usize::try_from(cfg.max_body_bytes).unwrap_or(usize::MAX);
        // SAFETY: the caller promises `redirect_allow` is NULL or readable.
        if let Some(list) = unsafe {
            cfg.redirect_allow
                .to_opt_str("lc_engine_config.redirect_allow")
        }? {
            c.compile.redirect_allow =
                Some(list.split_ascii_whitespace().map(str::to_owned).collect());
        }
        c.compile.sip_user_numbers = numbers;
        c.exemptions.emergency = exempt_flags & LC_EXEMPT_EMERGENCY != 0;
        // SAFETY: the caller promises `priority_namespaces` is NULL or readable.
        c.exemptions.resource_priority = match unsafe { cfg.priority_namespaces.bytes() } {
            Some(list) => namespaces(list)?,
            None => Vec::new(),
        };
    }
    Ok(c)
}

/// Frees the caller's handle to an engine. Workers and subscribers made from it hold the
/// engine's shared state themselves and keep working (subscribers keep applying NOTIFYs,
/// workers keep following them); the policy lives until the last of them is freed. Without
/// the handle nothing can be published or withdrawn any more: free them too. `NULL` is a no-op.
///
/// # Safety
/// `engine` must be NULL or come from `lc_engine_new` / `lc_engine_new_shared` and not be used
/// afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_free(engine: *mut lc_engine) {
    // SAFETY: NULL or from Box::into_raw in lc_engine_new*, freed once.
    let _ = boundary(|| unsafe { crate::free_box(engine) });
}

/// The result code of a refused policy change, with its message as the call's error detail.
fn publish_error(e: &PublishError) -> Code {
    crate::error::detail(e);
    match e {
        PublishError::NotFull => Code::NotFull,
        PublishError::Merge(MergeError::VersionGap { .. }) => Code::VersionGap,
        PublishError::Merge(MergeError::NoBase { .. } | MergeError::BaseNotFull) => Code::NoBase,
        PublishError::Merge(MergeError::UnknownRule(_)) => Code::UnknownRule,
        PublishError::Merge(MergeError::TooManyRules { .. })
        | PublishError::TooManyRules { .. } => Code::TooManyRules,
        PublishError::UnknownSource(_) => Code::UnknownSource,
        PublishError::CellTable(e) => crate::cells::table_error(*e),
    }
}

/// # Safety
/// As for the exported functions that call it.
unsafe fn source_of(name: lc_str, notifier: lc_str) -> Result<Source, Code> {
    // SAFETY: the caller promises readable strings.
    let (name, notifier) = unsafe { (name.to_str("source")?, notifier.to_opt_str("notifier")?) };
    match notifier {
        None => Ok(Source::local(name)),
        Some(uri) => {
            let uri = Uri::new(uri)
                .map_err(|e| crate::abi::invalid("notifier", format_args!("{uri:?}: {e}")))?;
            // The notifier is the policy's origin (its redirect targets are checked against
            // its own domain); its rules are not scoped to it (RFC 7200 §5.3.3 MAY, off).
            Ok(Source {
                name: name.to_owned(),
                ..Source::notifier(uri)
            })
        }
    }
}

/// The result of a policy change: writes the generation on success.
fn changed(result: Result<u64, PublishError>, generation: crate::Out<'_, u64>) -> Code {
    match result {
        Ok(g) => {
            generation.write(g);
            Code::Ok
        }
        Err(e) => publish_error(&e),
    }
}

/// # Safety
/// `engine` valid or NULL; `body` readable for `len` bytes or NULL; `generation` writable or NULL.
unsafe fn apply(
    engine: *const lc_engine,
    source: lc_str,
    notifier: lc_str,
    body: *const u8,
    len: usize,
    full_only: bool,
    generation: *mut u64,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let body = try_slice!(body, len);
        let generation = try_out!(generation);
        // SAFETY: the caller promises readable strings.
        let source = try_!(unsafe { source_of(source, notifier) });
        let doc = match policy::read(body, &engine.config().limits) {
            Ok(doc) => doc,
            Err(e) => return crate::error::fail(Code::InvalidPolicy, e),
        };
        let result = if full_only {
            engine.publish(&source, doc.ruleset)
        } else {
            engine.apply(&source, doc.ruleset)
        };
        changed(result, generation)
    })
}

/// Replaces `source`'s policy with a full document (`body`, `len` bytes) and publishes the new
/// snapshot to every worker. On success writes the new snapshot generation. On any error
/// nothing changes.
///
/// - `source` (UTF-8, required) names the publisher: its rules replace the previous rules of the
///   same name and no other's; `lc_engine_withdraw` removes them; statistics and
///   `lc_decision.source` report it. A subscriber (`lc_subscriber_new`) publishes under its
///   notifier's URI exactly as `lc_subscriber_config.notifier` spells it.
/// - `notifier` (absent or a URI) is the notifier the policy came from: its redirect targets must
///   lie in the notifier's own domain or `lc_engine_config.redirect_allow`, else the rule rejects
///   instead (RFC 7200 §7). Absent: the operator's own policy (a file, an RPC), trusted. Either
///   way, rules without `target-sip-entity` apply whatever the request's target (they are not
///   scoped to the notifier).
/// - `body` is read during the call only.
///
/// Errors: `LC_RESULT_INVALID_POLICY` when the document does not validate (or is larger than
/// `max_body_bytes`; `lc_last_error` gives the reader's `LINE:COLUMN: …` message);
/// `LC_RESULT_NOT_FULL` for a partial document (use `lc_engine_apply`);
/// `LC_RESULT_TOO_MANY_RULES` when all sources together would exceed `max_rules` (one
/// document over `max_rules` on its own is `LC_RESULT_INVALID_POLICY`);
/// `LC_RESULT_INVALID_ARGUMENT` when `notifier` is not a URI; on an engine made with
/// `lc_engine_new_shared`, `LC_RESULT_CELL_TABLE_FULL` / `LC_RESULT_CELL_TABLE_BUSY`.
///
/// # Safety
/// `engine` from `lc_engine_new`; `source`/`notifier` readable or absent; `body` readable for
/// `len` bytes; `generation` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_publish(
    engine: *const lc_engine,
    source: lc_str,
    notifier: lc_str,
    body: *const u8,
    len: usize,
    generation: *mut u64,
) -> lc_result {
    // SAFETY: same contract as this function.
    unsafe { apply(engine, source, notifier, body, len, true, generation) }
}

/// Applies a document from `source` as a NOTIFY body is applied: a full one replaces the
/// source's policy (as `lc_engine_publish`), a partial one (RFC 7200 §4.2) adds or replaces the
/// rules it carries in the source's current policy and must carry the current version + 1. On
/// success writes the new snapshot generation; on any error nothing changes.
///
/// Errors: those of `lc_engine_publish` but `LC_RESULT_NOT_FULL`, and for a partial document
/// `LC_RESULT_VERSION_GAP` (not the next version: re-SUBSCRIBE; `lc_last_error` gives the
/// expected and received versions), `LC_RESULT_NO_BASE` (the source has no full policy yet),
/// `LC_RESULT_UNKNOWN_RULE` (it deletes a rule the source does not have).
///
/// # Safety
/// As for `lc_engine_publish`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_apply(
    engine: *const lc_engine,
    source: lc_str,
    notifier: lc_str,
    body: *const u8,
    len: usize,
    generation: *mut u64,
) -> lc_result {
    // SAFETY: same contract as this function.
    unsafe { apply(engine, source, notifier, body, len, false, generation) }
}

/// Removes every rule `source` published (the name given to `lc_engine_publish` /
/// `lc_engine_apply`; for a subscriber's rules, its `lc_subscriber_config.notifier` string) and
/// writes the new snapshot generation.
///
/// Errors: `LC_RESULT_UNKNOWN_SOURCE` when no policy has that name (nothing changes).
///
/// # Safety
/// `engine` from `lc_engine_new`; `source` readable; `generation` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_withdraw(
    engine: *const lc_engine,
    source: lc_str,
    generation: *mut u64,
) -> lc_result {
    boundary(|| {
        let engine = &try_ref!(engine).engine;
        let generation = try_out!(generation);
        let name = try_str!(source);
        changed(engine.withdraw(name), generation)
    })
}

/// Validates a policy document without applying it (no engine needed), against the default
/// limits (`lc_engine_config_default`): an engine configured with a smaller `max_rules` or
/// `max_body_bytes` may still refuse a document this accepts. Returns `LC_RESULT_OK`
/// or `LC_RESULT_INVALID_POLICY`; in both cases writes the reader's message (`LINE:COLUMN: …`,
/// empty when valid) into `buf` and its length into `*written` (the full length even when `buf`
/// is too small, then `LC_RESULT_BUFFER_TOO_SMALL` whether the document is valid or not, and
/// `buf` untouched). The message is UTF-8, not NUL-terminated.
///
/// # Safety
/// `body` readable for `len` bytes; `buf` writable for `cap` bytes (or NULL with `cap` 0);
/// `written` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_policy_check(
    body: *const u8,
    len: usize,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> lc_result {
    boundary(|| {
        let body = try_slice!(body, len);
        let out = try_buf!(buf, cap, written);
        let (message, result) = match policy::read(body, &policy::Limits::default()) {
            Ok(_) => (String::new(), Code::Ok),
            Err(e) => (e.to_string(), Code::InvalidPolicy),
        };
        match out.deliver(message.as_bytes()) {
            Code::Ok if result != Code::Ok => crate::error::fail(result, &message),
            Code::Ok => result,
            other => other,
        }
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A rate rule (20/s, reject), a percent rule with redirect, a window rule with drop, at
    /// version 7.
    const FULL_7: &str = r#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
        xmlns:lc="urn:ietf:params:xml:ns:load-control" version="7" state="full">
      <rule id="calls"><conditions><lc:call-identity><lc:sip><lc:to>
          <one id="tel:+1-212-555-1234"/></lc:to></lc:sip></lc:call-identity>
          <method>INVITE</method></conditions>
        <actions><lc:accept alt-action="reject"><lc:rate>20</lc:rate></lc:accept></actions></rule>
      <rule id="messages"><conditions><method>MESSAGE</method></conditions>
        <actions><lc:accept alt-action="redirect"
            alt-target="sip:a@alt.example.com sip:b@alt.example.com"><lc:percent>30</lc:percent>
          </lc:accept></actions></rule>
      <rule id="registrations"><conditions><method>REGISTER</method></conditions>
        <actions><lc:accept alt-action="drop"><lc:win>5</lc:win></lc:accept></actions></rule>
    </ruleset>"#;

    /// Version 8: `calls` retuned to 12.5/s.
    const PARTIAL_8: &str = r#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
        xmlns:lc="urn:ietf:params:xml:ns:load-control" version="8" state="partial">
      <rule id="calls"><conditions><lc:call-identity><lc:sip><lc:to>
          <one id="tel:+1-212-555-1234"/></lc:to></lc:sip></lc:call-identity>
          <method>INVITE</method></conditions>
        <actions><lc:accept alt-action="reject"><lc:rate>12.5</lc:rate></lc:accept></actions></rule>
    </ruleset>"#;

    /// A full document of no rules at version 3.
    const EMPTY_3: &str = r#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
        version="3" state="full"/>"#;

    fn s(v: &str) -> lc_str {
        lc_str::from_bytes(v.as_bytes())
    }

    /// An engine with the defaults.
    fn new_engine() -> *mut lc_engine {
        let mut e = std::ptr::null_mut();
        // SAFETY: NULL config (the defaults), a valid output place.
        assert_eq!(
            unsafe { lc_engine_new(std::ptr::null(), &mut e) },
            crate::LC_RESULT_OK
        );
        e
    }

    /// `lc_engine_publish` (`full`) or `lc_engine_apply` of `doc` from the local source `source`.
    fn put(e: *const lc_engine, source: &str, doc: &str, full: bool) -> lc_result {
        let mut generation = 0;
        let f = if full {
            lc_engine_publish
        } else {
            lc_engine_apply
        };
        // SAFETY: `e` is live; the strings and the body are readable for the call.
        unsafe {
            f(
                e,
                s(source),
                lc_str::NONE,
                doc.as_ptr(),
                doc.len(),
                &mut generation,
            )
        }
    }

    /// An `lc_rule_info` row, copied out of the callback.
    #[derive(Debug, PartialEq)]
    struct Row {
        index: usize,
        source: String,
        rule: String,
        text: String,
        source_version: u32,
        limit_kind: lc_limit_kind,
        limit: f64,
        alt_targets: String,
        alt_action: lc_verdict,
    }

    /// The row `lc_engine_rules_each` expects from this test's documents (`text` left empty).
    fn row(
        index: usize,
        source: &str,
        rule: &str,
        source_version: u32,
        (limit_kind, limit): (lc_limit_kind, f64),
        (alt_action, alt_targets): (lc_verdict, &str),
    ) -> Row {
        Row {
            index,
            source: source.into(),
            rule: rule.into(),
            text: String::new(),
            source_version,
            limit_kind,
            limit,
            alt_targets: alt_targets.into(),
            alt_action,
        }
    }

    /// The string a row's `lc_str` holds.
    ///
    /// # Safety
    /// `v` readable (during the callback).
    unsafe fn text_of(v: lc_str) -> String {
        // SAFETY: by the caller's contract.
        let bytes = unsafe { v.bytes() }.expect("a row's strings are never NULL");
        String::from_utf8(bytes.to_vec()).expect("UTF-8")
    }

    /// What the callbacks collect into (`userdata`); `publish` is published to `engine` from
    /// the first callback.
    struct Collected {
        rows: Vec<Row>,
        engine: *const lc_engine,
        publish: Option<&'static str>,
    }

    unsafe extern "C" fn collect(userdata: *mut c_void, row: *const lc_rule_info) {
        // SAFETY: the tests pass a `Collected` as userdata; `row` is valid during the call.
        let (c, row) = unsafe { (&mut *userdata.cast::<Collected>(), &*row) };
        // SAFETY: the row's strings are valid during the callback.
        let (source, rule, text, alt_targets) = unsafe {
            (
                text_of(row.source),
                text_of(row.rule),
                text_of(row.text),
                text_of(row.alt_targets),
            )
        };
        c.rows.push(Row {
            index: row.index,
            source,
            rule,
            text,
            source_version: row.source_version,
            limit_kind: row.limit_kind,
            limit: row.limit,
            alt_targets,
            alt_action: row.alt_action,
        });
        if let Some(doc) = c.publish.take() {
            assert_eq!(put(c.engine, "b", doc, true), crate::LC_RESULT_OK);
        }
    }

    /// The rows of `e`'s published policy, each `text` checked to start with its rule id and
    /// then left out (it is for people); with `publish`, published from the first callback.
    fn rules_of(e: *const lc_engine, publish: Option<&'static str>) -> Vec<Row> {
        let mut c = Collected {
            rows: Vec::new(),
            engine: e,
            publish,
        };
        // SAFETY: `e` is live; `collect` never unwinds (a panic in an `extern "C"` function
        // aborts); `c` outlives the call.
        let r = unsafe { lc_engine_rules_each(e, Some(collect), (&raw mut c).cast()) };
        assert_eq!(r, crate::LC_RESULT_OK);
        for r in &mut c.rows {
            assert!(r.text.starts_with(&format!("{}: ", r.rule)), "{}", r.text);
            r.text.clear();
        }
        c.rows
    }

    fn version_of(e: *const lc_engine, source: &str) -> (lc_result, u32) {
        let mut v = u32::MAX;
        // SAFETY: `e` live, `source` readable, `v` writable.
        let r = unsafe { lc_engine_source_version(e, s(source), &mut v) };
        (r, v)
    }

    #[test]
    fn rules_each_describes_every_rule_and_source_version_follows_partial_documents() {
        let e = new_engine();
        assert_eq!(rules_of(e, None), []);
        assert_eq!(
            version_of(e, "a"),
            (crate::LC_RESULT_UNKNOWN_SOURCE, u32::MAX)
        );
        assert_eq!(put(e, "a", FULL_7, true), crate::LC_RESULT_OK);
        let redirect = (
            LC_VERDICT_REDIRECT,
            "sip:a@alt.example.com sip:b@alt.example.com",
        );
        let at = |v: u32, rate: f64| {
            vec![
                row(
                    0,
                    "a",
                    "calls",
                    v,
                    (LC_LIMIT_RATE, rate),
                    (LC_VERDICT_REJECT, ""),
                ),
                row(1, "a", "messages", v, (LC_LIMIT_PERCENT, 30.0), redirect),
                row(
                    2,
                    "a",
                    "registrations",
                    v,
                    (LC_LIMIT_WINDOW, 5.0),
                    (LC_VERDICT_DROP, ""),
                ),
            ]
        };
        assert_eq!(rules_of(e, None), at(7, 20.0));
        assert_eq!(version_of(e, "a"), (crate::LC_RESULT_OK, 7));
        assert_eq!(put(e, "a", PARTIAL_8, false), crate::LC_RESULT_OK);
        assert_eq!(rules_of(e, None), at(8, 12.5));
        assert_eq!(version_of(e, "a"), (crate::LC_RESULT_OK, 8));
        // A source without rules has a version and no row.
        assert_eq!(put(e, "empty", EMPTY_3, true), crate::LC_RESULT_OK);
        assert_eq!(rules_of(e, None).len(), 3);
        assert_eq!(version_of(e, "empty"), (crate::LC_RESULT_OK, 3));
        // Publishing from the callback: the remaining rows are still the old snapshot's.
        assert_eq!(rules_of(e, Some(FULL_7)), at(8, 12.5));
        let mut now = at(8, 12.5);
        now.extend(at(7, 20.0).into_iter().map(|r| Row {
            index: r.index + 3,
            source: "b".into(),
            ..r
        }));
        assert_eq!(rules_of(e, None), now);
        // Withdrawn: unknown again.
        let mut g = 0;
        // SAFETY: `e` live, `g` writable.
        assert_eq!(
            unsafe { lc_engine_withdraw(e, s("empty"), &mut g) },
            crate::LC_RESULT_OK
        );
        assert_eq!(
            version_of(e, "empty"),
            (crate::LC_RESULT_UNKNOWN_SOURCE, u32::MAX)
        );
        // SAFETY: from lc_engine_new, freed once.
        unsafe { lc_engine_free(e) };
    }

    #[test]
    fn rules_each_and_source_version_check_their_arguments() {
        let e = new_engine();
        assert_eq!(put(e, "a", FULL_7, true), crate::LC_RESULT_OK);
        let mut v = u32::MAX;
        // SAFETY: every non-NULL pointer is valid; NULL ones are refused before use.
        unsafe {
            assert_eq!(
                lc_engine_rules_each(e, None, std::ptr::null_mut()),
                crate::LC_RESULT_NULL_PARAMETER
            );
            assert_eq!(
                lc_engine_rules_each(std::ptr::null(), Some(collect), std::ptr::null_mut()),
                crate::LC_RESULT_NULL_PARAMETER
            );
            assert_eq!(
                lc_engine_source_version(std::ptr::null(), s("a"), &mut v),
                crate::LC_RESULT_NULL_PARAMETER
            );
            assert_eq!(
                lc_engine_source_version(e, s("a"), std::ptr::null_mut()),
                crate::LC_RESULT_NULL_PARAMETER
            );
            assert_eq!(
                lc_engine_source_version(e, lc_str::NONE, &mut v),
                crate::LC_RESULT_NULL_PARAMETER
            );
            let bad = [b'a', 0xff];
            assert_eq!(
                lc_engine_source_version(e, lc_str::from_bytes(&bad), &mut v),
                crate::LC_RESULT_INVALID_UTF8
            );
            assert_eq!(
                lc_engine_source_version(e, s("A"), &mut v),
                crate::LC_RESULT_UNKNOWN_SOURCE
            );
            assert_eq!(v, u32::MAX, "a failing call writes no output");
            lc_engine_free(e);
        }
    }

    #[test]
    fn a_rows_text_is_the_rules_display() {
        let e = new_engine();
        assert_eq!(put(e, "a", FULL_7, true), crate::LC_RESULT_OK);
        let mut c = Collected {
            rows: Vec::new(),
            engine: e,
            publish: None,
        };
        // SAFETY: as in `rules_of`.
        let r = unsafe { lc_engine_rules_each(e, Some(collect), (&raw mut c).cast()) };
        assert_eq!(r, crate::LC_RESULT_OK);
        // SAFETY: `e` is live.
        let snapshot = unsafe { &*e }.engine().snapshot();
        let texts: Vec<String> = snapshot.rules().map(|r| r.rule.to_string()).collect();
        let got: Vec<&str> = c.rows.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(got, texts);
        assert!(got[0].contains("rate 20/s"), "{}", got[0]);
        // SAFETY: from lc_engine_new, freed once.
        unsafe { lc_engine_free(e) };
    }

    #[test]
    fn the_default_namespaces_are_the_engines() {
        assert_eq!(
            namespaces(DEFAULT_NAMESPACES.as_bytes()),
            Ok(loadctl::runtime::Exemptions::default().resource_priority)
        );
    }

    #[test]
    fn namespace_lists_are_checked() {
        assert_eq!(
            namespaces(b" ETS,wps ,, q735 "),
            Ok(vec!["ets".into(), "wps".into(), "q735".into()])
        );
        assert_eq!(namespaces(b""), Ok(Vec::new()));
        assert_eq!(namespaces(b"ets.0"), Err(Code::InvalidArgument));
        assert_eq!(namespaces(b"ets;x"), Err(Code::InvalidArgument));
        assert_eq!(namespaces(b"\xff"), Err(Code::InvalidUtf8));
    }
}
