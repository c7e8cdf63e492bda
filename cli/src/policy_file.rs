//! Loading a policy file for the commands that classify.

use std::sync::Arc;

use loadctl::compile::{CompileConfig, CompiledPolicy, compile};
use loadctl::policy::{self, Limits, Ruleset};
use loadctl::runtime::{Engine, EngineConfig, Exemptions, Shard};
use loadctl::uri::SipUserNumbers;

/// Reads, validates and compiles a full policy, SIP user parts read as `numbers` says; on
/// failure prints why and returns the exit code (1 invalid, 2 I/O).
pub fn load(path: &str, numbers: SipUserNumbers) -> Result<(Ruleset, Arc<CompiledPolicy>), u8> {
    let bytes = crate::read_input(path).map_err(|e| {
        eprintln!("loadctl: {path}: {e}");
        2u8
    })?;
    let doc = policy::read(&bytes, &Limits::default()).map_err(|e| {
        eprintln!("{path}:{e}");
        1u8
    })?;
    print_warnings(path, &doc.warnings);
    let compiled = compile(&doc.ruleset, &compile_config(numbers)).map_err(|e| {
        eprintln!("{path}: {e}");
        1u8
    })?;
    Ok((doc.ruleset, Arc::new(compiled)))
}

/// The compile options of the commands that classify.
pub fn compile_config(numbers: SipUserNumbers) -> CompileConfig {
    CompileConfig::default().with_sip_user_numbers(numbers)
}

/// Prints the reader's warnings as `FILE:LINE:COL: warning: …` on standard error.
pub fn print_warnings(name: &str, warnings: &[policy::Warning]) {
    for w in warnings {
        let rule = w
            .rule
            .as_ref()
            .map(|r| format!("in rule {r:?}: "))
            .unwrap_or_default();
        eprintln!("{name}:{}: warning: {rule}{}", w.position, w.message);
    }
}

/// A one-shard engine enforcing `ruleset` with `exemptions` and SIP user parts read as
/// `numbers` says, and its shard.
pub fn shard(
    ruleset: Ruleset,
    exemptions: &Exemptions,
    numbers: SipUserNumbers,
) -> Result<Shard, u8> {
    let engine = Engine::from_ruleset(
        ruleset,
        EngineConfig::default()
            .with_shards(1)
            .with_exemptions(exemptions.clone())
            .with_compile(compile_config(numbers)),
    )
    .map_err(|e| {
        eprintln!("loadctl: {e}");
        1u8
    })?;
    Ok(engine.attach())
}

/// Parses `--now` (an xs:dateTime / RFC 3339 time with a zone) into Unix nanoseconds;
/// without one, the real time.
pub fn wall_clock(now: Option<&str>) -> Result<i128, u8> {
    match now {
        None => Ok(policy::Timestamp::now().unix_nanos()),
        Some(text) => policy::Timestamp::parse(text)
            .map(|t| t.unix_nanos())
            .map_err(|e| {
                eprintln!("loadctl: --now {text:?}: {e}");
                2u8
            }),
    }
}

/// The exemptions `--no-emergency-exempt` and `--priority-namespaces LIST` ask for: the
/// engine's defaults (emergency calls, `ets` and `wps`) unless changed. LIST is
/// comma-separated Resource-Priority namespaces (RFC 4412 §3.1 `token-nodot`), or empty for
/// none. A namespace that is not a token-nodot is a usage error (exit code 2).
pub fn exemptions(no_emergency: bool, namespaces: Option<&str>) -> Result<Exemptions, u8> {
    let mut e = Exemptions::default();
    e.emergency = !no_emergency;
    if let Some(list) = namespaces {
        e.resource_priority = Vec::new();
        for ns in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let token_nodot = ns
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-!%*_+`'~".contains(&b));
            if !token_nodot {
                eprintln!(
                    "loadctl: --priority-namespaces: {ns:?} is not a namespace (letters, digits and -!%*_+`'~, no dot; RFC 4412 §3.1)"
                );
                return Err(2);
            }
            e.resource_priority.push(ns.to_owned());
        }
    }
    Ok(e)
}
