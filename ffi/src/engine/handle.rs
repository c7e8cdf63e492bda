//! The engine handle: its configuration, creation and release.

use std::time::Duration;

use loadctl::runtime::{Engine, EngineConfig};
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
    /// The peers whose Resource-Priority markings count (RFC 4412 §11.3: "Only SIP elements
    /// within the same administrative trust domain employing a secure channel between their
    /// SIP elements will trust a Resource-Priority header field that is not appropriately
    /// signed"): address blocks (`192.0.2.0/24`, `2001:db8::/32`, or single addresses)
    /// separated by commas and/or spaces, compared with each request's source (`lc_request` /
    /// `lc_sip_options` `source`). Absent or empty (the default): none — a request's
    /// Resource-Priority is honoured from no peer. Anything that is not a block:
    /// `LC_RESULT_INVALID_ARGUMENT`; not UTF-8: `LC_RESULT_INVALID_UTF8`. Read during
    /// `lc_engine_new*` only.
    pub priority_peers: lc_str,
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

/// A To tag alone makes a request in-dialog (never filtered, overload control's priority
/// category). For callers that keep no dialogs and take requests only from peers they trust:
/// anyone else can put a To tag into a new INVITE. Without it, only `LC_SIP_KNOWN_DIALOG` /
/// `lc_request.known_dialog` make a request in-dialog. Not in the default.
pub const LC_EXEMPT_TO_TAG: lc_exempt_flags = 2;

/// Every declared `LC_EXEMPT_*` bit.
const EXEMPT_KNOWN: u32 = LC_EXEMPT_EMERGENCY | LC_EXEMPT_TO_TAG;

/// The blocks of a `priority_peers` list (commas and/or spaces between them).
pub(super) fn networks(list: &[u8]) -> Result<Vec<loadctl::runtime::Network>, Code> {
    let list = utf8(list, "priority_peers")?;
    loadctl::runtime::Network::parse_list(list)
        .map_err(|e| crate::abi::invalid("lc_engine_config.priority_peers", e))
}

/// `list` as text, or `LC_RESULT_INVALID_UTF8` naming `lc_engine_config.FIELD`.
fn utf8<'a>(list: &'a [u8], field: &str) -> Result<&'a str, Code> {
    std::str::from_utf8(list).map_err(|e| {
        crate::error::fail(
            Code::InvalidUtf8,
            format_args!(
                "lc_engine_config.{field}: not UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )
    })
}

/// The default `priority_namespaces`: `Exemptions::default()`'s (a unit test keeps them equal).
pub(super) static DEFAULT_NAMESPACES: &str = "ets wps";

/// RFC 4412 §3.1: `token-nodot = 1*( alphanum / "-" / "!" / "%" / "*" / "_" / "+" / "`" /
/// "'" / "~" )`.
fn is_token_nodot(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-!%*_+`'~".contains(&b))
}

/// The namespaces of a `priority_namespaces` list (commas and/or spaces between names).
pub(super) fn namespaces(list: &[u8]) -> Result<Vec<String>, Code> {
    let list = utf8(list, "priority_namespaces")?;
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
            priority_peers: lc_str::NONE,
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
/// value, `priority_namespaces` holds a name that is not an RFC 4412 `token-nodot`, or
/// `priority_peers` something that is not an address block; `LC_RESULT_INVALID_UTF8` when
/// `redirect_allow`, `priority_namespaces` or `priority_peers` is not UTF-8.
///
/// # Safety
/// `config` must be NULL or valid (its `redirect_allow`, `priority_namespaces` and `priority_peers` readable);
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
/// `config` must be NULL or valid (its `redirect_allow`, `priority_namespaces` and `priority_peers` readable);
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
/// `config` must be NULL or valid (its `redirect_allow`, `priority_namespaces` and `priority_peers` readable).
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
        c.exemptions.to_tag_is_dialog = exempt_flags & LC_EXEMPT_TO_TAG != 0;
        // SAFETY: the caller promises `priority_peers` is NULL or readable.
        c.exemptions.priority_peers = match unsafe { cfg.priority_peers.bytes() } {
            Some(list) => networks(list)?,
            None => Vec::new(),
        };
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
