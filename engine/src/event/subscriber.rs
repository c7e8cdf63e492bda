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
//!   a back-off of 1 s doubling to 300 s ([`SubscriberConfig::retry_initial_ns`],
//!   [`SubscriberConfig::retry_max_ns`]), or after the Retry-After of a 5xx; the first 2xx
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
//!   target as Request-URI and the route set as Route ([`Request::next_hop`] says where to
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

use std::collections::VecDeque;

use super::{
    EVENT_PACKAGE, Method, NameAddr, Request, Response, SECOND_NS, SubscriptionState,
    TRANSACTION_TIMEOUT_NS, is_load_control, is_policy_type,
};
use crate::policy::{self, Body, MergeError, State, Uri};
use crate::runtime::{Engine, PublishError, Source};

/// A subscription that a `deactivated` or `timeout` ends sooner than this (or than half its
/// granted duration) after its grant is "young": two such ends in a row make the next
/// SUBSCRIBE wait the back-off.
const YOUNG_NS: u64 = 60 * SECOND_NS;

/// How a subscriber behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SubscriberConfig {
    /// The notifier's URI: Request-URI and To of the SUBSCRIBE, and the source name.
    pub notifier: Uri,
    /// This server's URI (From).
    pub subscriber: Uri,
    /// Call-ID stem: subscription n uses `{call_id}-{n}` (the SIP stack makes it unique).
    pub call_id: String,
    /// From-tag stem: subscription n uses `{tag}-{n}`.
    pub tag: String,
    /// Requested duration in seconds. Default 3600 (RFC 7200 §4).
    pub expires: u32,
    /// Hosts or domains notifiers may be at (a host matches an entry equal to it or a parent
    /// domain of it). Empty: only the configured notifier's host.
    pub trust: Vec<String>,
    /// Scope rules without `target-sip-entity` to the notifier's URI (RFC 7200 §5.3.3: the
    /// subscriber MAY record the originator as the target). Only sensible where every request
    /// is classified with its target entity: a scoped rule never matches a request without
    /// one. Default false: the rules apply whatever the request's target.
    pub scope_to_notifier: bool,
    /// First retry delay after a failure. Default 1 s.
    pub retry_initial_ns: u64,
    /// Longest retry delay. Default 300 s.
    pub retry_max_ns: u64,
}

impl SubscriberConfig {
    /// A configuration with the defaults above.
    pub fn new(notifier: Uri, subscriber: Uri, call_id: &str, tag: &str) -> Self {
        Self {
            notifier,
            subscriber,
            call_id: call_id.to_owned(),
            tag: tag.to_owned(),
            expires: 3600,
            trust: Vec::new(),
            scope_to_notifier: false,
            retry_initial_ns: SECOND_NS,
            retry_max_ns: 300 * SECOND_NS,
        }
    }
}

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
    /// [`Subscriber::unsubscribe`] completed.
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

/// One subscription to one notifier, feeding one [`Engine`] source.
#[derive(Debug)]
pub struct Subscriber {
    config: SubscriberConfig,
    engine: Engine,
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
    outbox: VecDeque<Request>,
    events: VecDeque<SubscriberEvent>,
}

impl Subscriber {
    /// A subscriber that sends its first SUBSCRIBE at `now_ns`.
    pub fn new(config: SubscriberConfig, engine: Engine, now_ns: u64) -> Self {
        // The origin is always the notifier (its redirect targets are checked against its own
        // domain, RFC 7200 §7); scoping is a separate opt-in.
        let source = Source::notifier(config.notifier.clone());
        let source = if config.scope_to_notifier {
            source.scoped_to_notifier()
        } else {
            source
        };
        let mut s = Self {
            retry_delay: config.retry_initial_ns,
            dialog: Dialog::new(String::new(), String::new()),
            config,
            engine,
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
    pub fn poll_transmit(&mut self) -> Option<Request> {
        self.outbox.pop_front()
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<SubscriberEvent> {
        self.events.pop_front()
    }

    /// When [`Subscriber::handle_timeout`] must be called next (monotonic ns).
    pub fn poll_timeout(&self) -> Option<u64> {
        let txn = self.txn.map(|t| t.sent_at + TRANSACTION_TIMEOUT_NS);
        let phase = match self.phase {
            Phase::Active { refresh_at } => Some(refresh_at),
            Phase::Waiting { retry_at } => Some(retry_at),
            _ => None,
        };
        let lapse = self
            .lapses_at
            .filter(|_| !matches!(self.phase, Phase::Stopped));
        [txn, phase, lapse].into_iter().flatten().min()
    }

    /// Advances timers to `now_ns`.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        if let Some(t) = self.txn
            && now_ns >= t.sent_at + TRANSACTION_TIMEOUT_NS
        {
            self.txn = None;
            if self.phase == Phase::Ending {
                self.stop(StopReason::Unsubscribed);
            } else {
                self.retry_later(now_ns, None, "no final response to SUBSCRIBE within 32 s");
            }
        }
        if let Some(at) = self.lapses_at
            && now_ns >= at
            && self.phase != Phase::Stopped
        {
            self.lapses_at = None;
            self.events.push_back(SubscriberEvent::Lapsed);
        }
        match self.phase {
            Phase::Active { refresh_at } if now_ns >= refresh_at => {
                self.send_subscribe(now_ns, self.config.expires)
            }
            Phase::Waiting { retry_at } if now_ns >= retry_at => self.new_subscription(now_ns),
            _ => {}
        }
    }

    /// Ends the subscription (SUBSCRIBE with Expires: 0). The notifier's final NOTIFY
    /// withdraws the policy.
    pub fn unsubscribe(&mut self, now_ns: u64) {
        if self.phase == Phase::Stopped {
            return;
        }
        if self.dialog.remote_tag.is_none() && self.txn.is_none() {
            self.stop(StopReason::Unsubscribed);
            return;
        }
        self.send_subscribe(now_ns, 0);
        self.phase = Phase::Ending;
    }

    /// Starts a new subscription now, whatever the state: after a stop (`noresource`,
    /// `rejected`, 403, an unsubscribe), during a wait (`probation`'s `retry-after`, back-off)
    /// or on a live dialog — an operator's "the notifier is back" (an RPC). The back-off starts
    /// again from [`SubscriberConfig::retry_initial_ns`]. The rules in force stay until the new
    /// subscription's first document replaces them; a live dialog is abandoned (not
    /// unsubscribed): the notifier's next NOTIFY on it is answered 481, which ends it there.
    pub fn resubscribe(&mut self, now_ns: u64) {
        self.retry_delay = self.config.retry_initial_ns;
        // Out of `Ending` too: `send_subscribe` keeps that phase.
        self.phase = Phase::Subscribing;
        self.events.push_back(SubscriberEvent::Retrying {
            at_ns: now_ns,
            why: "re-subscription requested".into(),
        });
        self.new_subscription(now_ns);
    }

    fn new_subscription(&mut self, now_ns: u64) {
        self.subscriptions += 1;
        let n = self.subscriptions;
        // A new dialog: the remote target and the route set start again (RFC 6665 §4.4.2).
        self.dialog = Dialog::new(
            format!("{}-{n}", self.config.call_id),
            format!("{}-{n}", self.config.tag),
        );
        self.cseq = 0;
        self.send_subscribe(now_ns, self.config.expires);
    }

    fn send_subscribe(&mut self, now_ns: u64, expires: u32) {
        self.cseq += 1;
        let req = Request {
            method: Method::Subscribe,
            request_uri: self
                .dialog
                .remote_target
                .clone()
                .unwrap_or_else(|| self.config.notifier.clone()),
            call_id: self.dialog.call_id.clone(),
            from: NameAddr {
                uri: self.config.subscriber.clone(),
                tag: Some(self.dialog.local_tag.clone()),
            },
            to: NameAddr {
                uri: self.config.notifier.clone(),
                tag: self.dialog.remote_tag.clone(),
            },
            cseq: self.cseq,
            event: Some(EVENT_PACKAGE.to_owned()),
            expires: Some(expires),
            accept: Some(policy::CONTENT_TYPE.to_owned()),
            subscription_state: None,
            content_type: None,
            body: Vec::new(),
            contact: None,
            record_route: Vec::new(),
            route: self.dialog.route_set.clone(),
        };
        self.txn = Some(Transaction {
            cseq: self.cseq,
            sent_at: now_ns,
            expires,
        });
        if self.phase != Phase::Ending {
            self.phase = Phase::Subscribing;
        }
        self.outbox.push_back(req);
    }

    fn retry_later(&mut self, now_ns: u64, retry_after_s: Option<u32>, why: &str) {
        let delay = match retry_after_s {
            Some(s) => u64::from(s) * SECOND_NS,
            None => {
                let d = self.retry_delay;
                self.retry_delay =
                    (self.retry_delay.saturating_mul(2)).min(self.config.retry_max_ns);
                d
            }
        };
        self.wait(now_ns, delay, why);
    }

    /// A new subscription `delay` from now.
    fn wait(&mut self, now_ns: u64, delay: u64, why: &str) {
        let at = now_ns.saturating_add(delay);
        self.txn = None;
        self.phase = Phase::Waiting { retry_at: at };
        self.events.push_back(SubscriberEvent::Retrying {
            at_ns: at,
            why: why.to_owned(),
        });
    }

    fn stop(&mut self, why: StopReason) {
        self.phase = Phase::Stopped;
        self.txn = None;
        self.lapses_at = None;
        self.events.push_back(SubscriberEvent::Stopped(why));
    }

    /// Handles a response to a SUBSCRIBE this subscriber sent.
    pub fn handle_response(&mut self, now_ns: u64, resp: &Response) {
        let Some(txn) = self.txn else { return };
        if resp.method != Method::Subscribe
            || resp.call_id != self.dialog.call_id
            || resp.cseq != txn.cseq
        {
            return;
        }
        if resp.status < 200 {
            return;
        }
        self.txn = None;
        if self.phase == Phase::Ending && resp.status >= 300 {
            // Unsubscribing: whatever refused it (a 481 from a notifier that had already
            // forgotten the dialog), the subscription is over; a new one would outlive us.
            self.stop(StopReason::Unsubscribed);
            return;
        }
        match resp.status {
            200..=299 => {
                if self.dialog.remote_tag.is_none() {
                    self.dialog.remote_tag = resp.to.tag.clone();
                }
                if self.dialog.remote_tag == resp.to.tag {
                    // RFC 3261 §12.1.2 / §12.2.1.2: the 2xx's Contact is the remote target;
                    // the route set is the initial 2xx's Record-Route reversed, unless the
                    // dialog-creating NOTIFY brought its own (RFC 6665 §4.4.1).
                    if let Some(c) = &resp.contact {
                        self.dialog.remote_target = Some(c.clone());
                    }
                    if !self.dialog.answered && !self.dialog.route_set_fixed {
                        self.dialog.route_set = resp.record_route.iter().rev().cloned().collect();
                    }
                    self.dialog.answered = true;
                }
                let granted = resp.expires.unwrap_or(txn.expires).min(txn.expires.max(1));
                if txn.expires == 0 || self.phase == Phase::Ending {
                    // The final NOTIFY (terminated) follows; stop if it does not come.
                    self.txn = Some(Transaction {
                        cseq: 0,
                        sent_at: now_ns,
                        expires: 0,
                    });
                    return;
                }
                self.retry_delay = self.config.retry_initial_ns;
                let duration = u64::from(granted) * SECOND_NS;
                if self.dialog.granted {
                    // A refresh went through: this dialog works.
                    self.young_ends = 0;
                } else {
                    self.dialog.granted = true;
                    self.young_until = Some(now_ns + YOUNG_NS.min(duration / 2));
                }
                self.lapses_at = Some(now_ns + duration);
                let before = (60 * SECOND_NS).min(duration / 2);
                self.phase = Phase::Active {
                    refresh_at: now_ns + duration - before,
                };
                self.events
                    .push_back(SubscriberEvent::Subscribed { expires: granted });
            }
            423 => {
                let min = resp
                    .min_expires
                    .unwrap_or(txn.expires.saturating_mul(2))
                    .max(txn.expires + 1);
                self.config.expires = min;
                self.send_subscribe(now_ns, min);
            }
            403 => self.stop(StopReason::Forbidden),
            489 => self.stop(StopReason::BadEvent),
            481 if self.dialog.remote_tag.is_some() => {
                // The notifier lost the subscription: start a new one.
                self.events.push_back(SubscriberEvent::Retrying {
                    at_ns: now_ns,
                    why: "481 to a refresh".into(),
                });
                self.new_subscription(now_ns);
            }
            status => {
                let retry_after = if status == 503 {
                    resp.retry_after
                } else {
                    resp.retry_after.filter(|_| status >= 500)
                };
                self.retry_later(now_ns, retry_after, &format!("SUBSCRIBE answered {status}"));
            }
        }
    }

    fn trusted(&self, uri: &Uri) -> bool {
        let host = match uri.parsed() {
            crate::uri::UriRef::Sip(s) => s.host.to_ascii_lowercase(),
            _ => return false,
        };
        let notifier_host = match self.config.notifier.parsed() {
            crate::uri::UriRef::Sip(s) => Some(s.host.to_ascii_lowercase()),
            _ => None,
        };
        let in_domain = |entry: &str| {
            let entry = entry.trim().trim_start_matches("*.").to_ascii_lowercase();
            host == entry
                || host
                    .strip_suffix(entry.as_str())
                    .is_some_and(|rest| rest.ends_with('.'))
        };
        notifier_host.as_deref() == Some(host.as_str())
            || self.config.trust.iter().any(|e| in_domain(e))
    }

    fn refuse(&mut self, req: &Request, status: u16, why: &'static str) -> Response {
        self.stats.rejected += 1;
        self.events
            .push_back(SubscriberEvent::NotifyRejected { status, why });
        Response::to(req, status, None)
    }

    /// Handles a NOTIFY; returns the response to send.
    pub fn handle_notify(&mut self, now_ns: u64, req: &Request) -> Response {
        self.stats.notifies += 1;
        if req.method != Method::Notify {
            return self.refuse(req, 400, "not a NOTIFY");
        }
        if !self.trusted(&req.from.uri) {
            return self.refuse(req, 481, "notifier outside the trust domain");
        }
        let ours = req.call_id == self.dialog.call_id
            && req.to.tag.as_deref() == Some(self.dialog.local_tag.as_str());
        if !ours || self.phase == Phase::Stopped {
            return self.refuse(req, 481, "NOTIFY outside a subscription");
        }
        match (&self.dialog.remote_tag, &req.from.tag) {
            (None, Some(tag)) => self.dialog.remote_tag = Some(tag.clone()),
            (Some(ours), Some(theirs)) if ours == theirs => {}
            _ => return self.refuse(req, 481, "NOTIFY from another dialog (forked)"),
        }
        if !is_load_control(req.event.as_deref()) {
            return self.refuse(req, 489, "NOTIFY for another event package");
        }
        // NOTIFY is a target refresh request (RFC 6665 §3.2): its Contact is the remote target.
        // The first NOTIFY of the dialog creates it: its Record-Route, in order, is the route
        // set (RFC 6665 §4.4.1, RFC 3261 §12.1.1); later ones cannot change it (§4.3).
        if let Some(c) = &req.contact {
            self.dialog.remote_target = Some(c.clone());
        }
        if !self.dialog.notified && !req.record_route.is_empty() {
            self.dialog.route_set = req.record_route.clone();
            self.dialog.route_set_fixed = true;
        }
        self.dialog.notified = true;
        let Some(state) = req
            .subscription_state
            .as_deref()
            .and_then(SubscriptionState::parse)
        else {
            return self.refuse(req, 400, "missing or unknown Subscription-State");
        };
        if let SubscriptionState::Terminated {
            reason,
            retry_after,
        } = &state
        {
            self.withdraw();
            self.lapses_at = None;
            // RFC 6665 §4.1.3.
            match reason.as_deref() {
                _ if self.phase == Phase::Ending => self.stop(StopReason::Unsubscribed),
                Some("rejected") | Some("noresource") | Some("invariant") => {
                    self.stop(StopReason::Terminated(reason.clone().unwrap_or_default()))
                }
                Some("probation") | Some("giveup") => {
                    let why = format!("terminated ({})", reason.as_deref().unwrap_or(""));
                    self.retry_later(now_ns, *retry_after, &why)
                }
                Some("deactivated") | Some("timeout") => self.resubscribe_now(now_ns),
                // No reason or an unknown one: at once, unless retry-after says when.
                other => match retry_after {
                    Some(_) => {
                        let why = format!("terminated ({})", other.unwrap_or("no reason"));
                        self.retry_later(now_ns, *retry_after, &why)
                    }
                    None => self.resubscribe_now(now_ns),
                },
            }
            return Response::to(req, 200, None);
        }
        match &state {
            SubscriptionState::Pending { .. } => self.events.push_back(SubscriberEvent::Pending),
            SubscriptionState::Active { expires: Some(e) } if self.lapses_at.is_none() => {
                // A NOTIFY ahead of the 2xx: the subscription lives at least this long.
                self.lapses_at = Some(now_ns + u64::from(*e) * SECOND_NS);
            }
            _ => {}
        }
        self.handle_body(now_ns, req);
        Response::to(req, 200, None)
    }

    /// A new subscription at once (`deactivated`, `timeout`), unless subscriptions keep ending
    /// young (see [`YOUNG_NS`]): from the second such end in a row, after the back-off (the
    /// first delay, doubling), so that a notifier that ends every subscription at once does
    /// not get a SUBSCRIBE per round trip. The 2xx of each cycle resets the ordinary back-off,
    /// hence the count of its own; a refresh that goes through resets this one.
    fn resubscribe_now(&mut self, now_ns: u64) {
        let young = self.young_until.is_some_and(|t| now_ns < t);
        self.young_ends = if young { self.young_ends + 1 } else { 0 };
        if self.young_ends > 1 {
            let shift = (self.young_ends - 2).min(32);
            let delay = self
                .config
                .retry_initial_ns
                .saturating_mul(1 << shift)
                .min(self.config.retry_max_ns);
            self.wait(now_ns, delay, "terminated again soon after it was granted");
            return;
        }
        self.events.push_back(SubscriberEvent::Retrying {
            at_ns: now_ns,
            why: "terminated".into(),
        });
        self.new_subscription(now_ns);
    }

    fn withdraw(&mut self) {
        if self.applied_any && self.engine.withdraw(&self.source.name).is_ok() {
            self.stats.withdrawn += 1;
            self.events.push_back(SubscriberEvent::PolicyWithdrawn);
        }
        self.applied_any = false;
    }

    fn handle_body(&mut self, now_ns: u64, req: &Request) {
        let content_type = req.content_type.as_deref().unwrap_or("");
        if req.body.is_empty() {
            // RFC 7200 §4.8: "A NOTIFY request without a body indicates that no load-filtering
            // policies need to be updated." The policy in force stays.
            self.stats.bodyless += 1;
            self.events.push_back(SubscriberEvent::NothingToUpdate);
            return;
        }
        if !is_policy_type(content_type) {
            self.events.push_back(SubscriberEvent::UnknownBody {
                content_type: content_type.to_owned(),
            });
            return;
        }
        let notifier = req.from.uri.to_string();
        let doc = match policy::read(&req.body, &self.engine.config().limits) {
            Ok(d) => d,
            Err(e) => {
                self.stats.refused += 1;
                self.events.push_back(SubscriberEvent::InvalidDocument {
                    notifier,
                    version: claimed_version(&req.body),
                    error: e.to_string(),
                });
                return;
            }
        };
        let version = doc.ruleset.version();
        if let Some(last) = self.dialog.last_version {
            // 32-bit serial arithmetic (RFC 1982): 0 follows 4294967295.
            let ahead = version.wrapping_sub(last);
            if ahead == 0 || ahead >= 1 << 31 {
                self.stats.ignored += 1;
                self.events.push_back(SubscriberEvent::DocumentIgnored {
                    version,
                    reason: IgnoreReason::Stale { last },
                });
                return;
            }
            // A gap matters only for a partial document, which needs the versions before it;
            // a full one is the whole state (after a re-SUBSCRIBE it carries the notifier's
            // current version, past the gap).
            if ahead > 1 && doc.ruleset.state() != State::Full {
                let expected = u64::from(last) + 1;
                self.stats.ignored += 1;
                self.events.push_back(SubscriberEvent::DocumentIgnored {
                    version,
                    reason: IgnoreReason::Gap { expected },
                });
                self.refetch(now_ns);
                return;
            }
        }
        let refused = self.refused_redirects(&doc.ruleset);
        let state = doc.ruleset.state();
        let warnings: Vec<String> = doc.warnings.iter().map(ToString::to_string).collect();
        match self.engine.apply(&self.source, doc.ruleset) {
            Ok(generation) => {
                self.report_redirects(refused);
                self.dialog.last_version = Some(version);
                self.applied_any = true;
                self.stats.applied += 1;
                if !warnings.is_empty() {
                    self.stats.warned += 1;
                    self.events.push_back(SubscriberEvent::DocumentWarnings {
                        notifier,
                        version,
                        warnings,
                    });
                }
                self.events.push_back(SubscriberEvent::PolicyApplied {
                    version,
                    state,
                    generation,
                });
            }
            Err(PublishError::Merge(MergeError::NoBase { .. } | MergeError::VersionGap { .. })) => {
                // A partial document with no base: none applied yet on this subscription, or
                // one across the version wrap (the merge wants last + 1 in 64 bits).
                let expected = self.dialog.last_version.map_or(0, |l| u64::from(l) + 1);
                self.stats.ignored += 1;
                self.events.push_back(SubscriberEvent::DocumentIgnored {
                    version,
                    reason: IgnoreReason::Gap { expected },
                });
                self.refetch(now_ns);
            }
            Err(error) => {
                self.stats.refused += 1;
                self.events.push_back(SubscriberEvent::ApplyFailed {
                    notifier,
                    version,
                    error,
                });
            }
        }
    }

    /// Asks for the full state again: a refresh SUBSCRIBE in the dialog (the notifier answers
    /// every refresh with a full NOTIFY), unless one is already outstanding.
    fn refetch(&mut self, now_ns: u64) {
        if self.txn.is_none() && self.phase != Phase::Ending {
            self.send_subscribe(now_ns, self.config.expires);
        }
    }

    /// Whether `ruleset` is full, and (rule id, refused) for every rule it puts — refused when
    /// the engine will reject instead of redirecting (RFC 7200 §7) — and every id it deletes.
    fn refused_redirects(&self, ruleset: &policy::Ruleset) -> (bool, Vec<(String, bool)>) {
        let config = &self.engine.config().compile;
        let notifier = self.source.notifier_uri();
        let check = |r: &policy::Rule| {
            (
                r.id.to_string(),
                crate::compile::redirect_refused(r, notifier, config),
            )
        };
        match ruleset.body() {
            Body::Full(rules) => (true, rules.iter().map(|r| check(r)).collect()),
            Body::Partial(changes) => (
                false,
                changes
                    .iter()
                    .map(|c| match c {
                        policy::Change::Put(r) => check(r),
                        policy::Change::Delete(id) => (id.to_string(), false),
                    })
                    .collect(),
            ),
        }
    }

    /// Reports the rules newly refused by an applied document, once each while they stay
    /// refused (a full document replaces the whole set, a partial one updates its rules).
    fn report_redirects(&mut self, (full, checked): (bool, Vec<(String, bool)>)) {
        if full {
            self.refused_redirects
                .retain(|id| checked.iter().any(|(c, refused)| *refused && c == id));
        }
        let mut fresh = Vec::new();
        for (id, refused) in checked {
            let known = self.refused_redirects.iter().position(|r| *r == id);
            match (refused, known) {
                (true, None) => {
                    fresh.push(id.clone());
                    self.refused_redirects.push(id);
                }
                (false, Some(i)) => {
                    self.refused_redirects.swap_remove(i);
                }
                _ => {}
            }
        }
        if !fresh.is_empty() {
            self.events
                .push_back(SubscriberEvent::RedirectOutsideAllowList { rules: fresh });
        }
    }
}

/// The `version` attribute of a document's root element, read without validating anything
/// else: what an invalid document claims to be, for the report that refuses it.
fn claimed_version(body: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(body).ok()?;
    let mut rest = text;
    // The root element: the first `<` not starting a declaration, comment or PI.
    let root = loop {
        let at = rest.find('<')?;
        rest = &rest[at + 1..];
        if !rest.starts_with(['?', '!']) {
            break &rest[..rest.find('>')?];
        }
    };
    let mut attrs = root;
    while let Some(at) = attrs.find("version") {
        let before = attrs[..at].chars().next_back();
        let after = attrs[at + "version".len()..].trim_start();
        attrs = &attrs[at + "version".len()..];
        if !before.is_some_and(char::is_whitespace) {
            continue;
        }
        let Some(value) = after.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        let quote = value.chars().next()?;
        if quote != '"' && quote != '\'' {
            return None;
        }
        let inner = &value[1..];
        return inner[..inner.find(quote)?].trim().parse().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::claimed_version;

    #[test]
    fn claimed_versions() {
        let v = |s: &str| claimed_version(s.as_bytes());
        assert_eq!(
            v(r#"<?xml version="1.0"?><ruleset xmlns="x" version="7" state="full">"#),
            Some(7)
        );
        assert_eq!(v("<!-- c --><ruleset version = '42'><rule/>"), Some(42));
        assert_eq!(v(r#"<ruleset xversion="3" state="full"/>"#), None);
        assert_eq!(v(r#"<ruleset version="-1"/>"#), None);
        assert_eq!(v(r#"<ruleset version="4294967295"/>"#), Some(u32::MAX));
        assert_eq!(v("no markup"), None);
        assert_eq!(v(r#"<ruleset version="1"#), None);
    }
}
