//! The policies a notifier pushes: the common one and each subscriber's own, read from full
//! documents at the boundary.

use super::*;

/// # Safety
/// `body` NULL or readable for `len` bytes.
pub(super) unsafe fn policy_of(
    body: *const u8,
    len: usize,
) -> Result<Option<Vec<Arc<policy::Rule>>>, Code> {
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
