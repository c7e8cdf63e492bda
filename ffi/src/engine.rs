//! The engine handle: configuration, policies (publish / apply / withdraw), stats.

use std::ffi::c_void;
use std::time::Duration;

use loadctl::engine::{Engine, EngineConfig, EngineStats, PublishError, Source};
use loadctl::policy::{self, MergeError, Uri};
use loadctl::uri::SipUserNumbers;

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

    #[test]
    fn the_default_namespaces_are_the_engines() {
        assert_eq!(
            namespaces(DEFAULT_NAMESPACES.as_bytes()),
            Ok(loadctl::engine::Exemptions::default().resource_priority)
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
