//! Changing an engine's policies: publish (full documents), apply (partial ones), withdraw,
//! and checking a document without publishing it.

use loadctl::policy::{self, MergeError, Uri};
use loadctl::runtime::{PublishError, Source};

use super::lc_engine;
use crate::{Code, boundary, lc_result, lc_str};

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
