//! Ending every subscription on purpose: a restart (`probation`, subscribers come back) or a
//! decommission (`noresource`), with the reason's C values and their checks.

use super::*;

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
