//! The subscriber: SUBSCRIBEs to one notifier, applies the policies its NOTIFYs carry to an
//! [`Engine`] as one source, refreshes, and recovers from failures.
//!
//! # Rules it follows
//! - SUBSCRIBE carries `Event: load-control`, `Accept: application/load-control+xml` and
//!   `Expires` (default 3600). It is refreshed before expiry (at the earlier of expiry − 60 s
//!   and half the granted duration). 2xx arms the refresh; 423 retries at once with
//!   Min-Expires; 403 and 489 stop for good (reported); 481 to a refresh starts a new
//!   subscription; anything else, or no final response within 32 s, retries with exponential
//!   back-off (1 s doubling to 5 min, or the server's Retry-After).
//! - Only a NOTIFY from a notifier in the trust domain, inside the current subscription, is
//!   accepted; anything else gets 481 and nothing is applied. A NOTIFY for another event package
//!   gets 489. With forking only the first dialog-creating NOTIFY creates the dialog (§4.9).
//! - Policy bodies are applied through [`Engine::apply`]: a full document replaces this
//!   notifier's policy, a partial one merges into it: its rules are added or replace the rules
//!   with the same id (RFC 7200 §4.11). loadctl also accepts, from peers that use it, a
//!   partial rule with no `<accept>` as "delete the rule with this id" (the policy reader's
//!   deletion form); loadctl's own notifier never sends it (a rule that disappears makes it
//!   send a full document), so any subscriber understands loadctl's documents.
//! - Versions (§4.11: "a version number that increases by exactly one"). A version that
//!   repeats or precedes the last one applied is ignored; a partial document that skips ahead
//!   is ignored and triggers a re-SUBSCRIBE (the notifier answers a refresh with its full
//!   state); a full document that skips ahead applies (it is the whole state). Versions are
//!   compared in 32-bit serial arithmetic (RFC 1982): after 4294967295 comes 0, so a notifier
//!   that wraps inside the dialog with a full document is followed; a partial document across
//!   the wrap has no base and is answered with a re-SUBSCRIBE. (loadctl's own notifier never
//!   wraps in a dialog: it ends the subscription with `terminated;reason=deactivated` and the
//!   new subscription starts again at 0.)
//! - An invalid document is answered 200, changes nothing, and is reported with the notifier
//!   and the version it claims ([`SubscriberEvent::InvalidDocument`], counted in
//!   [`SubscriberStats::refused`]). A document applied with reader warnings is reported
//!   ([`SubscriberEvent::DocumentWarnings`], [`SubscriberStats::warned`]). Bodies of other
//!   types are discarded.
//! - **A NOTIFY without a body changes nothing** (RFC 7200 §4.8: "A NOTIFY request without a
//!   body indicates that no load-filtering policies need to be updated"): the policy in force
//!   stays, also when it is the first NOTIFY of a new subscription after a lapse
//!   ([`SubscriberEvent::NothingToUpdate`]).
//! - `terminated` withdraws every rule of this notifier (§4.8: subscribers "MUST also
//!   terminate previously received load-filtering policies from that notifier"). What comes
//!   next follows RFC 6665 §4.1.3:
//!
//!   | reason | RFC 6665 §4.1.3 | the subscriber |
//!   |---|---|---|
//!   | `deactivated` | "SHOULD retry immediately with a new subscription" | a new subscription at once (a new dialog, §4.4.2); when subscriptions keep ending this way within 60 s (or half the granted duration) of their grant, from the second in a row after the back-off (1 s, doubling) |
//!   | `timeout` | "MAY re-subscribe immediately" | the same |
//!   | `probation` | "SHOULD wait at least the number of seconds specified" | a new subscription after `retry-after`; without it after the back-off delay (1 s after a subscription that was granted) |
//!   | `giveup` | the same | the same |
//!   | `rejected`, `noresource`, `invariant` | "SHOULD NOT attempt to re-subscribe" | stops ([`SubscriberEvent::Stopped`]) until [`Subscriber::resubscribe`] |
//!   | none, or unknown | "MAY attempt to re-subscribe at any time (unless a "retry-after" parameter is present" | at once, or after `retry-after` |
//!
//!   A new SUBSCRIBE that fails (no final response within 32 s, 5xx, 408, …) is retried after
//!   a back-off of 1 s doubling to 300 s ([`SubscriberConfig::retry_initial`],
//!   [`SubscriberConfig::retry_max`]), or after the Retry-After of a 5xx; the first 2xx
//!   resets it.
//! - **In-dialog requests go to the remote target** (RFC 3261 §12.2.1.1; SUBSCRIBE and NOTIFY
//!   are target refresh requests, RFC 6665 §3.1–3.2). The remote target is the Contact of the
//!   2xx to the SUBSCRIBE, replaced by the Contact of every NOTIFY and of every 2xx to a
//!   refresh; until one is known it is the configured notifier URI. The route set is the
//!   Record-Route of the 2xx to the initial SUBSCRIBE, reversed (RFC 3261 §12.1.2), unless the
//!   first NOTIFY of the dialog carries a Record-Route: then that one, in order (RFC 6665
//!   §4.4.1: "the route set at the subscriber is taken from the NOTIFY request itself"; a
//!   proxy that record-routed the SUBSCRIBE record-routes the NOTIFYs too, §4.3, so the two
//!   agree unless the NOTIFY came another way or from another fork). Later messages do not
//!   change it. Refreshes, re-SUBSCRIBEs after a gap and the unsubscribe carry the remote
//!   target as Request-URI and the route set as Route ([`EventRequest::next_hop`] says where to
//!   send them); a new subscription starts again from the configured URI.
//! - The engine source is [`Source::notifier`]: the notifier's redirect targets are checked
//!   against its own domain and the engine's allow-list (RFC 7200 §7, see
//!   [`crate::compile::CompileConfig`]); each rule the engine refuses to redirect is reported
//!   once ([`SubscriberEvent::RedirectOutsideAllowList`]). Rules without `target-sip-entity`
//!   apply whatever the request's target unless [`SubscriberConfig::scope_to_notifier`] is set.
//! - **A notifier that goes silent (dead, unreachable) leaves its rules in force**: through the
//!   rest of the subscription (up to the granted duration, 3600 s by default), and after it
//!   lapses too ([`SubscriberEvent::Lapsed`]) while the subscriber keeps trying to subscribe
//!   again (a refresh, then new subscriptions with the back-off above): RFC 7200 §4.8 has a
//!   rule whose validity starts later enforced "\[r\]egardless of whether or not this
//!   re-activation of subscription is successful". They go with a `terminated` NOTIFY, a new
//!   document from the notifier, or their own `<validity>` end; an overloaded server that
//!   dies is not a reason to let its upstream flood it once it is back.
//!
//! # Where each part lives
//! - `config`: how the subscriber behaves ([`SubscriberConfig`]).
//! - `report`: what it reports ([`SubscriberEvent`], [`SubscriberStats`]).
//! - `subscribe`: the SUBSCRIBEs: building, refresh, retry and back-off, their answers, the
//!   timers.
//! - `notify`: a NOTIFY's checks (trust, dialog, package, Subscription-State) and what its
//!   state calls for.
//! - `apply`: a NOTIFY's body put to the engine (versions, documents, redirect reports).
//!
//! This module holds the state they share: [`Subscriber`] and its dialog.

mod apply;
mod config;
mod notify;
mod report;
mod sink;
mod subscribe;

use std::collections::VecDeque;

use super::{EventRequest, SECOND_NS};
use crate::clock::nanos;
use crate::policy::Uri;
use crate::runtime::{Engine, Source};

pub use config::SubscriberConfig;
pub use report::{IgnoreReason, StopReason, SubscriberEvent, SubscriberStats};
pub use sink::PolicySink;

/// A subscription that a `deactivated` or `timeout` ends sooner than this (or than half its
/// granted duration) after its grant is "young": two such ends in a row make the next
/// SUBSCRIBE wait the back-off.
const YOUNG_NS: u64 = 60 * SECOND_NS;

#[derive(Clone, Debug)]
struct Dialog {
    call_id: String,
    local_tag: String,
    remote_tag: Option<String>,
    /// Last document version applied on this subscription.
    last_version: Option<u32>,
    /// Where in-dialog requests go (RFC 3261 §12.2.1.1); `None`: the configured notifier URI.
    remote_target: Option<Uri>,
    /// The route set, in the order of the Route headers to send.
    route_set: Vec<Uri>,
    /// The dialog-creating NOTIFY has set the route set (RFC 6665 §4.4.1); nothing changes it.
    route_set_fixed: bool,
    /// A 2xx to the initial SUBSCRIBE came.
    answered: bool,
    /// A NOTIFY of this dialog came.
    notified: bool,
    /// A 2xx granted this dialog's subscription.
    granted: bool,
}

impl Dialog {
    fn new(call_id: String, local_tag: String) -> Self {
        Self {
            call_id,
            local_tag,
            remote_tag: None,
            last_version: None,
            remote_target: None,
            route_set: Vec::new(),
            route_set_fixed: false,
            answered: false,
            notified: false,
            granted: false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Transaction {
    cseq: u32,
    sent_at: u64,
    expires: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A SUBSCRIBE is (or is about to be) outstanding.
    Subscribing,
    /// Subscribed; refresh at the given time.
    Active { refresh_at: u64 },
    /// Waiting to try again.
    Waiting { retry_at: u64 },
    /// Unsubscribing (Expires: 0 sent).
    Ending,
    /// Done.
    Stopped,
}

/// One subscription to one notifier, feeding one source of a [`PolicySink`]: an [`Engine`]
/// unless said otherwise.
#[derive(Debug)]
pub struct Subscriber<S: PolicySink = Engine> {
    config: SubscriberConfig,
    sink: S,
    source: Source,
    phase: Phase,
    dialog: Dialog,
    subscriptions: u32,
    cseq: u32,
    txn: Option<Transaction>,
    retry_delay: u64,
    /// When the last granted subscription runs out (survives re-subscribing).
    lapses_at: Option<u64>,
    /// Until when the current subscription is young: [`YOUNG_NS`] or half its granted
    /// duration after the 2xx that created it, whichever is sooner.
    young_until: Option<u64>,
    /// Subscriptions ended at once (`deactivated`, `timeout`) while young, in a row.
    young_ends: u32,
    applied_any: bool,
    /// Ids of this notifier's rules whose redirect the engine refuses and that were reported
    /// already (each is reported once while it stays refused).
    refused_redirects: Vec<String>,
    stats: SubscriberStats,
    outbox: VecDeque<EventRequest>,
    events: VecDeque<SubscriberEvent>,
}

impl<S: PolicySink> Subscriber<S> {
    /// A subscriber that sends its first SUBSCRIBE at `now_ns` and puts the policies it
    /// receives into `sink`.
    pub fn new(config: SubscriberConfig, sink: S, now_ns: u64) -> Self {
        // The origin is always the notifier (its redirect targets are checked against its own
        // domain, RFC 7200 §7); scoping is a separate opt-in.
        let source = Source::notifier(config.notifier.clone());
        let source = if config.scope_to_notifier {
            source.scoped_to_notifier()
        } else {
            source
        };
        let mut s = Self {
            retry_delay: nanos(config.retry_initial),
            dialog: Dialog::new(String::new(), String::new()),
            config,
            sink,
            source,
            phase: Phase::Subscribing,
            lapses_at: None,
            young_until: None,
            young_ends: 0,
            subscriptions: 0,
            cseq: 0,
            txn: None,
            applied_any: false,
            refused_redirects: Vec::new(),
            stats: SubscriberStats::default(),
            outbox: VecDeque::new(),
            events: VecDeque::new(),
        };
        s.new_subscription(now_ns);
        s
    }

    /// The sink this subscriber feeds.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// The engine source this subscriber feeds.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// What this subscriber has counted.
    pub fn stats(&self) -> SubscriberStats {
        self.stats
    }

    /// The dialog's remote target (where in-dialog requests go), once a Contact was received.
    pub fn remote_target(&self) -> Option<&Uri> {
        self.dialog.remote_target.as_ref()
    }

    /// The dialog's route set, in the order of the Route headers its requests carry.
    pub fn route_set(&self) -> &[Uri] {
        &self.dialog.route_set
    }

    /// True once stopped for good.
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<EventRequest> {
        self.outbox.pop_front()
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<SubscriberEvent> {
        self.events.pop_front()
    }
}
