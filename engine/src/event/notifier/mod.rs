//! The notifier: accepts SUBSCRIBEs from authorised subscribers and pushes each its policy in
//! NOTIFYs, paced and versioned.
//!
//! # Rules it follows
//! - SUBSCRIBE for another package: 489. An `Accept` listing no `application/load-control+xml`
//!   (nor `application/*`, `*/*`): 406. A subscriber that is not authorised: 403 (§4.6: "If
//!   the identity of the subscriber sending the SUBSCRIBE request is not allowed to receive
//!   load-filtering policies, the notifier MUST return a 403"); the identity is the From URI,
//!   checked against [`Authorization`]. `Expires` below Min-Expires and below one hour: 423
//!   with Min-Expires (RFC 6665 §4.2.1.1: never for an hour or more); above the maximum:
//!   shortened.
//! - After every accepted SUBSCRIBE **and every refresh** a NOTIFY with the full current policy
//!   follows (§4.7). A subscriber that has never been sent a document and for which there is
//!   no policy gets a NOTIFY without a body that keeps its Content-Type (§4.7). A NOTIFY
//!   without a body never removes rules (to a subscriber it means "nothing to update",
//!   §4.8): clearing the policy of a subscriber that holds one sends a full document with no
//!   rules (`<ruleset … state="full">` with no `<rule>`).
//! - Each NOTIFY that carries a document carries the next version on that subscription
//!   (0, 1, 2, …, §4.11; [`NotifierConfig::first_version`] moves the start). A change is sent
//!   as a partial document only when rules were added or changed and none disappeared — a
//!   partial document only adds or replaces rules by id (§4.11), so any subscriber reads it
//!   the same — and when the partial one reproduces the new policy exactly (order included);
//!   as a full one otherwise and after every (re-)SUBSCRIBE.
//! - Versions never wrap inside a dialog: §4.11 asks for "a version number that increases by
//!   exactly one" for each NOTIFY of a subscription, and none follows 4294967295. When a
//!   document would need a version past it, the subscription ends with
//!   `terminated;reason=deactivated` (RFC 6665 §4.1.3: the subscriber "SHOULD retry
//!   immediately with a new subscription") and the new subscription starts again at the first
//!   version. Every RFC 6665 subscriber handles that; a wrap to 0 inside the dialog would look
//!   stale to a subscriber that compares versions as numbers.
//! - NOTIFYs go to the subscriber's remote target (RFC 3261 §12.2.1.1): the Contact of its
//!   SUBSCRIBE, replaced by the Contact of each refresh (a target refresh request, RFC 6665
//!   §3.1), with the Record-Route of the initial SUBSCRIBE, in order, as Route (the UAS's route
//!   set, RFC 3261 §12.1.1). A SUBSCRIBE without Contact (which RFC 3261 §8.1.1.8 requires)
//!   gets its NOTIFYs at its From URI.
//! - At most one NOTIFY per second per subscription (§4.10): changes in between are coalesced,
//!   so a burst of changes yields at most two NOTIFYs, the last carrying the final state. Only
//!   one NOTIFY is outstanding per subscription at a time.
//! - A subscription ends on expiry (`terminated;reason=timeout`), on unsubscribe
//!   (`Expires: 0`, same), on [`Notifier::shutdown`] (see [`ShutdownReason`]: a restart sends
//!   `probation;retry-after=N`, a decommission `noresource`), and when a NOTIFY fails (any
//!   non-2xx, or no final response within 32 s). After a shutdown every new SUBSCRIBE is
//!   answered 503 (with `Retry-After: N` for a restart): a subscription accepted by a notifier
//!   on its way out would leave its subscriber believing itself protected by a process that is
//!   gone.
//! - A notifier that died without a shutdown (SIGKILL, a crash) loses its subscriptions while
//!   their subscribers go on enforcing what they were sent, until their next refresh (up to
//!   the granted duration). [`Notifier::dialogs`] lists what a restarted process needs to reach
//!   them again ([`DialogRecord`], for the caller to persist), and [`Notifier::deactivate`]
//!   ends those dialogs with `terminated;reason=deactivated` (RFC 6665 §4.1.3: the subscriber
//!   "SHOULD retry immediately with a new subscription"), so that each subscriber is back on a
//!   live subscription one round trip after the restart.
//!
//! # Where each part lives
//! - `config`: who may subscribe ([`Authorization`]) and how the notifier behaves
//!   ([`NotifierConfig`]).
//! - `subscribe`: SUBSCRIBE handling (refusals, grants, refreshes, unsubscribes).
//! - `notify`: the NOTIFYs: pacing, building, their answers, the timers.
//! - `document`: which document (full, partial or none) brings a subscriber to its policy.
//! - `shares`: a capacity shared among the subscribers ([`Notifier::set_capacity`]).
//! - `ending`: how subscriptions end ([`Notifier::shutdown`], [`Notifier::deactivate`]) and
//!   what stays counted after they do.
//!
//! This module holds the state they share: [`Notifier`], its subscriptions, and the policies
//! it is given.

mod config;
mod document;
mod ending;
mod notify;
mod shares;
mod subscribe;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::allocator::Allocation;
use super::{EventRequest, NameAddr};
use crate::policy::{Rule, Uri};

pub use config::{Authorization, NotifierConfig};
pub use ending::{DialogRecord, ShutdownReason};

/// A policy: the rules, in order. `None` is "no policy" (NOTIFY without body).
pub type Policy = Option<Vec<Arc<Rule>>>;

/// What a notifier reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifierEvent {
    /// A new subscription.
    Subscribed {
        /// The subscriber's URI.
        subscriber: String,
        /// Granted seconds.
        expires: u32,
    },
    /// A subscription was refreshed.
    Refreshed {
        /// The subscriber's URI.
        subscriber: String,
    },
    /// A SUBSCRIBE was refused.
    Refused {
        /// The status sent.
        status: u16,
        /// Why.
        why: &'static str,
    },
    /// A subscription ended.
    Ended {
        /// The subscriber's URI.
        subscriber: String,
        /// Why (`timeout`, `notify-failed`, `unsubscribed`, `restart` ([`Notifier::shutdown`]
        /// with [`ShutdownReason::Restart`]: `reason=probation`), `noresource` (with
        /// [`ShutdownReason::Decommission`]), and `versions-exhausted`: ended with
        /// `reason=deactivated` so that the subscriber's new subscription starts again at the
        /// first version).
        reason: &'static str,
    },
}

#[derive(Debug)]
struct Subscription {
    call_id: String,
    subscriber: NameAddr,
    /// Where NOTIFYs go: the Contact of the SUBSCRIBE (or of its last refresh).
    remote_target: Uri,
    /// The Record-Route of the initial SUBSCRIBE, in order.
    route_set: Vec<Uri>,
    key: String,
    our_tag: String,
    expires_at: u64,
    cseq: u32,
    /// The version the next document carries; past `u32::MAX` the versions are used up.
    next_version: u64,
    /// The policy the subscriber has (as last sent); `None` when it has none.
    sent: Option<Vec<Arc<Rule>>>,
    dirty: bool,
    full_next: bool,
    last_notify_at: Option<u64>,
    outstanding: Option<(u32, u64)>,
    /// Remove once the final NOTIFY is out.
    ending: Option<&'static str>,
    /// Under an allocation: the share in the outstanding NOTIFY.
    outstanding_share: Option<f64>,
    /// Under an allocation: the share of the last NOTIFY answered 2xx.
    in_force_share: Option<f64>,
}

/// The notifier side of the package for any number of subscriptions.
#[derive(Debug)]
pub struct Notifier {
    config: NotifierConfig,
    subs: Vec<Subscription>,
    count: u64,
    policy: Policy,
    per_subscriber: HashMap<String, Policy>,
    outbox: VecDeque<EventRequest>,
    events: VecDeque<NotifierEvent>,
    allocation: Option<Allocation>,
    /// Shares still counted after their subscription ended, until the subscriber is known to
    /// have dropped them. See [`Orphan`].
    orphans: Vec<Orphan>,
    /// Set by [`Notifier::shutdown`]: new SUBSCRIBEs are refused.
    closed: Option<ShutdownReason>,
}

/// The share of a subscription that ended, still counted: its subscriber may still enforce
/// it (a lapsed subscription keeps its rules; a partitioned edge cannot be told from a dead
/// one). Released when the subscription's `terminated` NOTIFY is answered 2xx, else at
/// `until`: when it would have expired (a NOTIFY failed), or, for a `terminated` NOTIFY that
/// got no answer, 32 s after it was sent if later. Not even an acknowledgement from the same
/// subscriber key on another dialog releases it: that may be another process (a restarted
/// edge) while the old one still runs.
#[derive(Clone, Debug)]
struct Orphan {
    key: String,
    share: f64,
    until: u64,
    /// The `terminated` NOTIFY (Call-ID, CSeq) whose 2xx releases it.
    notify: Option<(String, u32)>,
}

/// The canonical key of a URI (per-subscriber policies are keyed by it).
fn uri_key(uri: &Uri) -> String {
    let mut buf = Vec::new();
    String::from_utf8_lossy(crate::uri::canonicalize(uri.parsed(), &mut buf).key).into_owned()
}

impl Notifier {
    /// A notifier with no policy and no subscription.
    pub fn new(config: NotifierConfig) -> Self {
        Self {
            config,
            subs: Vec::new(),
            count: 0,
            policy: None,
            per_subscriber: HashMap::new(),
            outbox: VecDeque::new(),
            events: VecDeque::new(),
            allocation: None,
            orphans: Vec::new(),
            closed: None,
        }
    }

    /// Number of live subscriptions.
    pub fn subscriptions(&self) -> usize {
        self.subs.len()
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<EventRequest> {
        self.outbox.pop_front()
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<NotifierEvent> {
        self.events.pop_front()
    }

    /// Sets the policy every subscriber without a policy of its own receives.
    pub fn set_policy(&mut self, now_ns: u64, policy: Policy) {
        self.policy = policy;
        for s in &mut self.subs {
            if !self.per_subscriber.contains_key(&s.key) {
                s.dirty = true;
            }
        }
        self.flush(now_ns);
    }

    /// Sets (or, with `None`, clears) the policy of one subscriber, by its URI.
    pub fn set_subscriber_policy(&mut self, now_ns: u64, subscriber: &Uri, policy: Option<Policy>) {
        let key = uri_key(subscriber);
        match policy {
            Some(p) => {
                self.per_subscriber.insert(key.clone(), p);
            }
            None => {
                self.per_subscriber.remove(&key);
            }
        }
        for s in &mut self.subs {
            if s.key == key {
                s.dirty = true;
            }
        }
        self.flush(now_ns);
    }

    fn policy_for(&self, key: &str) -> &Policy {
        self.per_subscriber.get(key).unwrap_or(&self.policy)
    }
}
