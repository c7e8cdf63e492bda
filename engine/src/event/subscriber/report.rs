//! What a subscriber reports: its events, its counters and the reasons they carry: the types
//! a caller matches on, which the state machine only produces.

use crate::policy::State;
use crate::runtime::PublishError;

/// What a subscriber has counted since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubscriberStats {
    /// NOTIFYs handled (answered, whatever the answer).
    pub notifies: u64,
    /// Documents applied.
    pub applied: u64,
    /// Documents applied with reader warnings ([`SubscriberEvent::DocumentWarnings`]).
    pub warned: u64,
    /// NOTIFYs without a body (nothing to update).
    pub bodyless: u64,
    /// Documents ignored (stale version, or a gap).
    pub ignored: u64,
    /// Documents refused: invalid ([`SubscriberEvent::InvalidDocument`]) or refused by the
    /// engine ([`SubscriberEvent::ApplyFailed`]).
    pub refused: u64,
    /// Times this notifier's rules were withdrawn (`terminated`).
    pub withdrawn: u64,
    /// NOTIFYs answered with an error (481, 489, 400).
    pub rejected: u64,
}

/// Why a subscriber gave up for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// 403: this server may not receive policies (§4.6).
    Forbidden,
    /// 489: the notifier does not know the package.
    BadEvent,
    /// `terminated;reason=rejected` or `noresource`.
    Terminated(String),
    /// [`Subscriber::unsubscribe`](super::Subscriber::unsubscribe) completed.
    Unsubscribed,
}

/// Why a policy document was not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IgnoreReason {
    /// The version repeats or precedes the last one applied.
    Stale {
        /// Last version applied.
        last: u32,
    },
    /// The version skips ahead: a re-SUBSCRIBE was sent for a full document.
    Gap {
        /// The version that would have applied.
        expected: u64,
    },
}

/// What a subscriber reports.
#[derive(Clone, Debug, PartialEq)]
pub enum SubscriberEvent {
    /// A 2xx granted the subscription for this many seconds.
    Subscribed {
        /// Granted duration.
        expires: u32,
    },
    /// The notifier reported `pending`.
    Pending,
    /// A document was applied to the engine.
    PolicyApplied {
        /// Document version.
        version: u32,
        /// Full or partial.
        state: State,
        /// The engine generation it produced.
        generation: u64,
    },
    /// The document just applied (reported before its [`SubscriberEvent::PolicyApplied`])
    /// came with warnings from the policy reader: it applied, a person should look.
    DocumentWarnings {
        /// Who sent it (the NOTIFY's From URI).
        notifier: String,
        /// Its version.
        version: u32,
        /// The reader's warnings (`line:column: …`).
        warnings: Vec<String>,
    },
    /// A NOTIFY without a body: nothing to update (RFC 7200 §4.8); the policy in force stays.
    NothingToUpdate,
    /// This notifier's rules were removed (`terminated`).
    PolicyWithdrawn,
    /// A document was not applied.
    DocumentIgnored {
        /// Its version.
        version: u32,
        /// Why.
        reason: IgnoreReason,
    },
    /// The body did not validate; the current policy is unchanged.
    InvalidDocument {
        /// Who sent it (the NOTIFY's From URI).
        notifier: String,
        /// The version the document claims (its root's `version` attribute), when readable.
        version: Option<u32>,
        /// The reader's error (`line:column: …`).
        error: String,
    },
    /// The engine refused the document (e.g. too many rules); nothing changed.
    ApplyFailed {
        /// Who sent it (the NOTIFY's From URI).
        notifier: String,
        /// Its version.
        version: u32,
        /// The error.
        error: PublishError,
    },
    /// A body of another type was discarded.
    UnknownBody {
        /// Its Content-Type.
        content_type: String,
    },
    /// Rules redirect outside the agreed targets (RFC 7200 §7).
    RedirectOutsideAllowList {
        /// Their ids.
        rules: Vec<String>,
    },
    /// A NOTIFY was refused.
    NotifyRejected {
        /// The status sent.
        status: u16,
        /// Why.
        why: &'static str,
    },
    /// The subscription will be tried again.
    Retrying {
        /// When (monotonic ns).
        at_ns: u64,
        /// What failed.
        why: String,
    },
    /// The subscription lapsed without a successful refresh (its rules stay in force).
    Lapsed,
    /// The subscriber stopped for good.
    Stopped(StopReason),
}
