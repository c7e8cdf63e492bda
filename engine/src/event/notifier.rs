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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::allocator::{Allocation, AllocatorConfig, AllocatorError, ShareReport, round_share};
use super::{
    EVENT_PACKAGE, Method, NameAddr, Request, Response, SECOND_NS, SubscriptionState,
    TRANSACTION_TIMEOUT_NS, is_load_control,
};
use crate::policy::{self, Change, Limits, Rule, Ruleset, Uri};

/// Who may subscribe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authorization {
    /// Anyone (only inside a trust domain that authenticates at the SIP layer).
    Any,
    /// Subscribers whose From URI matches an entry: a SIP or SIPS URI entry matches that URI
    /// (compared as RFC 3261 §19.1.4 says, e.g. `sip:proxy@p1.example.net`); any other entry
    /// is a host or a domain (`p1.example.net`, `example.net`, `*.example.net`) and matches a
    /// SIP URI whose host is that host or inside that domain.
    Domains(Vec<String>),
}

impl Authorization {
    /// True when `subscriber` (a SUBSCRIBE's From URI) may subscribe.
    pub fn allows(&self, subscriber: &Uri) -> bool {
        let Authorization::Domains(list) = self else {
            return true;
        };
        let crate::uri::UriRef::Sip(s) = subscriber.parsed() else {
            return false;
        };
        let host = s.host.to_ascii_lowercase();
        let key = uri_key(subscriber);
        list.iter().any(|e| {
            let e = e.trim();
            if let Some(entry) = Uri::new(e)
                .ok()
                .filter(|u| matches!(u.parsed(), crate::uri::UriRef::Sip(_)))
            {
                return uri_key(&entry) == key;
            }
            let e = e.trim_start_matches("*.").to_ascii_lowercase();
            host == e
                || host
                    .strip_suffix(e.as_str())
                    .is_some_and(|r| r.ends_with('.'))
        })
    }
}

/// How a notifier behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NotifierConfig {
    /// This server's URI (From of the NOTIFYs).
    pub uri: Uri,
    /// To-tag stem: subscription n gets `{tag}-{n}`.
    pub tag: String,
    /// Who may subscribe.
    pub authorization: Authorization,
    /// Shortest subscription accepted, seconds (423 below). Default 60.
    pub min_expires: u32,
    /// Longest subscription granted, seconds. Default 3600.
    pub max_expires: u32,
    /// Duration when a SUBSCRIBE names none, seconds. Default 3600 (RFC 7200 §4).
    pub default_expires: u32,
    /// Minimum spacing of NOTIFYs on one subscription. Default 1 s (§4.10).
    pub pacing_ns: u64,
    /// The version of the first document of each subscription. Default 0 (tests of the
    /// version wrap start close to 4294967295).
    pub first_version: u32,
}

impl NotifierConfig {
    /// A configuration with the defaults above.
    pub fn new(uri: Uri, tag: &str, authorization: Authorization) -> Self {
        Self {
            uri,
            tag: tag.to_owned(),
            authorization,
            min_expires: 60,
            max_expires: 3600,
            default_expires: 3600,
            pacing_ns: SECOND_NS,
            first_version: 0,
        }
    }
}

/// Why a notifier ends every subscription ([`Notifier::shutdown`]). The reason tells the
/// subscribers what to do (RFC 6665 §4.1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownReason {
    /// The notifier goes down to come back (a restart, an upgrade): `terminated;reason=
    /// probation;retry-after=N`. RFC 6665 §4.1.3: "the client SHOULD retry at some later time
    /// [...] the client SHOULD wait at least the number of seconds specified". `deactivated`
    /// ("SHOULD retry immediately") would send the new SUBSCRIBE to the process that is
    /// exiting; `probation` says when the notifier expects to be back.
    Restart {
        /// Seconds the subscribers wait before they SUBSCRIBE again (`retry-after`).
        retry_after_s: u32,
    },
    /// The notifier is taken out of service for good: `terminated;reason=noresource` (RFC 6665
    /// §4.1.3: "Clients SHOULD NOT attempt to re-subscribe").
    Decommission,
}

/// What a restarted process needs to reach the subscriber of a subscription it no longer
/// holds ([`Notifier::dialogs`], [`Notifier::deactivate`]). Its clock is the notifier's: a
/// caller that keeps it across processes converts `expires_at_ns` to wall-clock time and back.
#[derive(Clone, Debug, PartialEq)]
pub struct DialogRecord {
    /// The dialog's Call-ID.
    pub call_id: String,
    /// The subscriber (From of its SUBSCRIBE, with its tag).
    pub subscriber: NameAddr,
    /// The notifier's own tag in the dialog.
    pub notifier_tag: String,
    /// Where NOTIFYs go (the subscriber's Contact).
    pub remote_target: Uri,
    /// The route set, in the order of the Route headers.
    pub route_set: Vec<Uri>,
    /// The CSeq of the last NOTIFY sent in the dialog (the next one carries this + 1, RFC 3261
    /// §12.2.1.1).
    pub cseq: u32,
    /// When the subscription expires, in the notifier's clock.
    pub expires_at_ns: u64,
    /// Under an allocation: the share the subscriber may be enforcing (counted against the
    /// capacity until the deactivation is answered or the subscription would have expired).
    pub share: Option<f64>,
}

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
    outbox: VecDeque<Request>,
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

fn accepts_policy(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return true };
    if accept.trim().is_empty() {
        return true;
    }
    accept.split(',').any(|t| {
        let t = t
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        t == policy::CONTENT_TYPE || t == "application/*" || t == "*/*"
    })
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
    pub fn poll_transmit(&mut self) -> Option<Request> {
        self.outbox.pop_front()
    }

    /// The next thing that happened.
    pub fn poll_event(&mut self) -> Option<NotifierEvent> {
        self.events.pop_front()
    }

    fn refuse(&mut self, req: &Request, status: u16, why: &'static str) -> Response {
        self.events
            .push_back(NotifierEvent::Refused { status, why });
        Response::to(req, status, None)
    }

    /// Handles a SUBSCRIBE; returns the response to send (a NOTIFY follows in
    /// [`Notifier::poll_transmit`] when it was accepted).
    pub fn handle_subscribe(&mut self, now_ns: u64, req: &Request) -> Response {
        if req.method != Method::Subscribe {
            return self.refuse(req, 400, "not a SUBSCRIBE");
        }
        if !is_load_control(req.event.as_deref()) {
            return self.refuse(req, 489, "not the load-control package");
        }
        if !accepts_policy(req.accept.as_deref()) {
            return self.refuse(req, 406, "Accept lists no application/load-control+xml");
        }
        if !self.config.authorization.allows(&req.from.uri) {
            return self.refuse(req, 403, "subscriber not authorised");
        }
        // A new subscription only: an in-dialog request finds no subscription (481).
        if let Some(reason) = self.closed
            && req.to.tag.is_none()
        {
            let mut r = self.refuse(req, 503, "notifier shutting down");
            if let ShutdownReason::Restart { retry_after_s } = reason {
                r.retry_after = Some(retry_after_s);
            }
            return r;
        }
        let requested = req.expires.unwrap_or(self.config.default_expires);
        // RFC 6665 §4.2.1.1: 423 "if and only if the expiration interval is greater than zero
        // AND smaller than one hour AND less than a notifier-configured minimum".
        if requested != 0 && requested < 3600 && requested < self.config.min_expires {
            let mut r = self.refuse(req, 423, "interval too brief");
            r.min_expires = Some(self.config.min_expires);
            return r;
        }
        let granted = requested.min(self.config.max_expires);
        let existing = self.subs.iter().position(|s| {
            s.call_id == req.call_id
                && s.subscriber.tag == req.from.tag
                && req.to.tag.as_deref() == Some(s.our_tag.as_str())
        });
        let index = match (existing, &req.to.tag) {
            (Some(i), _) => {
                let s = &mut self.subs[i];
                // A refresh is a target refresh request (RFC 6665 §3.1).
                if let Some(c) = &req.contact {
                    s.remote_target = c.clone();
                }
                s.expires_at = now_ns + u64::from(granted) * SECOND_NS;
                s.dirty = true;
                s.full_next = true;
                if granted == 0 {
                    s.ending = Some("unsubscribed");
                } else {
                    let subscriber = s.subscriber.uri.to_string();
                    self.events
                        .push_back(NotifierEvent::Refreshed { subscriber });
                }
                i
            }
            (None, Some(_)) => return self.refuse(req, 481, "no such subscription"),
            (None, None) => {
                // Expires: 0 on a new subscription is a fetch: one final NOTIFY with the state.
                self.count += 1;
                let sub = Subscription {
                    call_id: req.call_id.clone(),
                    subscriber: req.from.clone(),
                    remote_target: req.contact.clone().unwrap_or_else(|| req.from.uri.clone()),
                    route_set: req.record_route.clone(),
                    key: uri_key(&req.from.uri),
                    our_tag: format!("{}-{}", self.config.tag, self.count),
                    expires_at: now_ns + u64::from(granted) * SECOND_NS,
                    cseq: 0,
                    next_version: u64::from(self.config.first_version),
                    sent: None,
                    dirty: true,
                    full_next: true,
                    last_notify_at: None,
                    outstanding: None,
                    ending: (granted == 0).then_some("unsubscribed"),
                    outstanding_share: None,
                    in_force_share: None,
                };
                // A new subscriber takes part in the allocation at once, so its first NOTIFY
                // carries a share (the others' shrink to make room).
                if sub.ending.is_none()
                    && let Some(a) = &mut self.allocation
                {
                    a.join(&sub.key, req.from.uri.as_str(), now_ns);
                }
                self.events.push_back(NotifierEvent::Subscribed {
                    subscriber: req.from.uri.to_string(),
                    expires: granted,
                });
                self.subs.push(sub);
                self.subs.len() - 1
            }
        };
        let mut resp = Response::to(req, 200, Some(&self.subs[index].our_tag));
        resp.expires = Some(granted);
        // The NOTIFY a (re-)SUBSCRIBE calls for is not paced (§4.7).
        self.send_if_due(now_ns, index, true);
        // An unsubscribe's `terminated` NOTIFY is out: nothing more goes to that dialog.
        self.retire();
        if self.allocation.is_some() {
            // The others' shares shrank: send those that are due.
            self.mark_allocated_dirty();
            self.flush(now_ns);
        }
        self.retire();
        resp
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

    /// Ends every subscription with the `terminated` NOTIFY `reason` calls for (queued in
    /// [`Notifier::poll_transmit`]); from then on every new SUBSCRIBE is answered 503 (with
    /// `Retry-After` for a restart). A notifier stays closed: a new process (or a new
    /// [`Notifier`]) serves the subscribers when they come back.
    pub fn shutdown(&mut self, now_ns: u64, reason: ShutdownReason) {
        self.closed = Some(reason);
        let ending = match reason {
            ShutdownReason::Restart { .. } => "restart",
            ShutdownReason::Decommission => "noresource",
        };
        for i in 0..self.subs.len() {
            self.subs[i].ending = Some(ending);
            self.subs[i].outstanding = None;
            self.send_if_due(now_ns, i, true);
        }
        self.retire();
    }

    /// The live subscriptions' dialogs, for a caller that persists them so that a restarted
    /// process can [`Notifier::deactivate`] them. They change with every NOTIFY sent (its
    /// CSeq), refresh and subscription that starts or ends.
    pub fn dialogs(&self) -> Vec<DialogRecord> {
        self.subs
            .iter()
            .filter(|s| s.ending.is_none())
            .map(|s| DialogRecord {
                call_id: s.call_id.clone(),
                subscriber: s.subscriber.clone(),
                notifier_tag: s.our_tag.clone(),
                remote_target: s.remote_target.clone(),
                route_set: s.route_set.clone(),
                cseq: s.cseq,
                expires_at_ns: s.expires_at,
                share: Some(exposure_of(s)).filter(|e| *e > 0.0),
            })
            .collect()
    }

    /// Ends the dialogs of an earlier process (what its [`Notifier::dialogs`] returned, with
    /// `expires_at_ns` in this notifier's clock) with `terminated;reason=deactivated` NOTIFYs,
    /// queued in [`Notifier::poll_transmit`]: each subscriber withdraws that process's rules
    /// and subscribes again at once (RFC 6665 §4.1.3), to this one. Records that expired, or
    /// that name a live subscription of this notifier, are skipped. Under an allocation each
    /// record's share counts against the capacity until its NOTIFY is answered 2xx or the
    /// subscription would have expired. Returns how many NOTIFYs were queued.
    pub fn deactivate(&mut self, now_ns: u64, records: &[DialogRecord]) -> usize {
        let mut queued = 0;
        for r in records {
            let live = self
                .subs
                .iter()
                .any(|s| s.call_id == r.call_id && s.our_tag == r.notifier_tag);
            if live || r.expires_at_ns <= now_ns {
                continue;
            }
            let cseq = r.cseq.wrapping_add(1);
            if let Some(share) = r.share.filter(|s| s.is_finite() && *s > 0.0) {
                self.orphans.push(Orphan {
                    key: uri_key(&r.subscriber.uri),
                    share,
                    until: r
                        .expires_at_ns
                        .max(now_ns.saturating_add(TRANSACTION_TIMEOUT_NS)),
                    notify: Some((r.call_id.clone(), cseq)),
                });
            }
            let state = SubscriptionState::Terminated {
                reason: Some("deactivated".to_owned()),
                retry_after: None,
            };
            self.outbox.push_back(Request {
                method: Method::Notify,
                request_uri: r.remote_target.clone(),
                call_id: r.call_id.clone(),
                from: NameAddr {
                    uri: self.config.uri.clone(),
                    tag: Some(r.notifier_tag.clone()),
                },
                to: r.subscriber.clone(),
                cseq,
                event: Some(EVENT_PACKAGE.to_owned()),
                expires: None,
                accept: None,
                subscription_state: Some(state.render()),
                content_type: Some(policy::CONTENT_TYPE.to_owned()),
                body: Vec::new(),
                contact: None,
                record_route: Vec::new(),
                route: r.route_set.clone(),
            });
            queued += 1;
        }
        if queued > 0 && self.allocation.is_some() {
            self.mark_allocated_dirty();
            self.flush(now_ns);
        }
        queued
    }

    fn policy_for(&self, key: &str) -> &Policy {
        self.per_subscriber.get(key).unwrap_or(&self.policy)
    }

    /// Removes the subscriptions that ended; a subscriber left without one leaves the
    /// allocation, and the others' shares grow (when their NOTIFYs are due).
    fn retire(&mut self) {
        // An ending subscription's share counts until its `terminated` NOTIFY is answered.
        if self.allocation.is_some() {
            let ending: Vec<Orphan> = self
                .subs
                .iter()
                .filter(|s| s.ending.is_some())
                .filter_map(|s| {
                    let share = exposure_of(s);
                    let (cseq, at) = s.outstanding?;
                    (share > 0.0).then(|| Orphan {
                        key: s.key.clone(),
                        share,
                        until: s.expires_at.max(at.saturating_add(TRANSACTION_TIMEOUT_NS)),
                        notify: Some((s.call_id.clone(), cseq)),
                    })
                })
                .collect();
            self.orphans.extend(ending);
        }
        self.subs.retain(|s| s.ending.is_none());
        let Some(a) = &mut self.allocation else {
            return;
        };
        let gone: Vec<String> = a
            .keys()
            .filter(|k| !self.subs.iter().any(|s| s.key == **k))
            .cloned()
            .collect();
        for k in &gone {
            a.leave(k);
        }
        if !gone.is_empty() {
            self.mark_allocated_dirty();
        }
    }

    /// Keeps counting the share of a subscription that ends without a `terminated` NOTIFY
    /// reaching the subscriber, until it would have expired.
    fn orphan(&mut self, s: &Subscription) {
        let share = exposure_of(s);
        if self.allocation.is_some() && share > 0.0 {
            self.orphans.push(Orphan {
                key: s.key.clone(),
                share,
                until: s.expires_at,
                notify: None,
            });
        }
    }

    /// Marks every subscription whose policy the allocation writes as having something to
    /// send (a NOTIFY goes out only if its share actually changed).
    fn mark_allocated_dirty(&mut self) {
        let Some(a) = &self.allocation else {
            return;
        };
        for s in &mut self.subs {
            if a.contains(&s.key) && !self.per_subscriber.contains_key(&s.key) {
                s.dirty = true;
            }
        }
    }

    /// What each subscriber (key) may be enforcing under the allocation: the largest share
    /// any of its subscriptions acknowledged or has in flight, or an orphaned one.
    fn exposures(&self) -> HashMap<&str, f64> {
        let mut exposure: HashMap<&str, f64> = HashMap::new();
        let subs = self.subs.iter().map(|s| (s.key.as_str(), exposure_of(s)));
        let orphans = self.orphans.iter().map(|o| (o.key.as_str(), o.share));
        for (k, e) in subs.chain(orphans) {
            let x = exposure.entry(k).or_insert(e);
            *x = x.max(e);
        }
        exposure
    }

    /// The share subscription `i` is to be sent under the allocation, and its rules: the
    /// target when it is no more than what the subscriber may already be enforcing (a
    /// decrease never adds exposure); above that, no more than the capacity minus what every
    /// other subscriber may be enforcing (acknowledged, in flight or orphaned), and never less
    /// than what it already has. `None` when the allocation does not write its policy.
    fn allocated(&self, i: usize) -> Option<(f64, Vec<Arc<Rule>>)> {
        let a = self.allocation.as_ref()?;
        let key = &self.subs[i].key;
        if self.per_subscriber.contains_key(key) {
            return None;
        }
        let target = a.target(key)?;
        let exposure = self.exposures();
        let own = exposure.get(key.as_str()).copied().unwrap_or(0.0);
        let others: f64 = exposure
            .iter()
            .filter(|(k, _)| **k != key.as_str())
            .map(|(_, e)| e)
            .sum();
        let share = if target <= own {
            target
        } else {
            target.min(own.max(a.capacity() - others))
        };
        let share = round_share(share.max(0.0));
        Some((share, a.rules(share)))
    }

    /// Shares `capacity` requests/s of the requests `template` matches among the subscribers
    /// by demand (see [`super::allocator`]): each gets `template` with its share as `<rate>`,
    /// unless [`Notifier::set_subscriber_policy`] gave it a policy of its own (that one wins;
    /// the allocation comes before [`Notifier::set_policy`]'s). Demand comes from
    /// [`Notifier::observe`]. Calling it again with a template of the same class (id,
    /// conditions, alt-action; its limit is ignored) and the same configuration only changes
    /// the capacity (measurements kept). Nothing changes on an error.
    pub fn set_capacity(
        &mut self,
        now_ns: u64,
        capacity: f64,
        template: Rule,
        config: AllocatorConfig,
    ) -> Result<(), AllocatorError> {
        match &mut self.allocation {
            Some(a) if same_class(a.template(), &template) && *a.config() == config => {
                a.set_capacity(capacity)?;
            }
            _ => {
                let mut a = Allocation::new(capacity, template, config, now_ns)?;
                for s in self.subs.iter().filter(|s| s.ending.is_none()) {
                    a.join(&s.key, s.subscriber.uri.as_str(), now_ns);
                }
                self.allocation = Some(a);
            }
        }
        self.mark_allocated_dirty();
        self.flush(now_ns);
        Ok(())
    }

    /// Stops sharing a capacity: subscribers get [`Notifier::set_policy`]'s policy again.
    pub fn clear_capacity(&mut self, now_ns: u64) {
        if self.allocation.take().is_none() {
            return;
        }
        // What subscribers may still enforce stays counted (if a capacity comes back).
        for s in &mut self.subs {
            if !self.per_subscriber.contains_key(&s.key) {
                s.dirty = true;
            }
        }
        self.flush(now_ns);
    }

    /// Counts `count` requests of the allocated class that arrived from `subscriber` (what it
    /// admitted) since its previous observation, the last at `now_ns` (see
    /// [`Allocation::observe`]). False when no capacity is shared or the subscriber has no
    /// subscription.
    pub fn observe(&mut self, now_ns: u64, subscriber: &Uri, count: u64) -> bool {
        let key = uri_key(subscriber);
        self.allocation
            .as_mut()
            .is_some_and(|a| a.observe(&key, count, now_ns))
    }

    /// Each subscriber's measured demand and shares (empty when no capacity is shared).
    pub fn shares(&self) -> Vec<ShareReport> {
        self.allocation
            .as_ref()
            .map(Allocation::reports)
            .unwrap_or_default()
    }

    fn flush(&mut self, now_ns: u64) {
        for i in 0..self.subs.len() {
            self.send_if_due(now_ns, i, false);
        }
        self.retire();
    }

    /// When [`Notifier::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.subs
            .iter()
            .flat_map(|s| {
                let paced = (s.dirty && s.outstanding.is_none())
                    .then(|| s.last_notify_at.map_or(0, |t| t + self.config.pacing_ns));
                let txn = s.outstanding.map(|(_, at)| at + TRANSACTION_TIMEOUT_NS);
                [Some(s.expires_at), paced, txn]
            })
            .flatten()
            .chain(self.allocation.as_ref().map(Allocation::next_tick))
            .chain(self.orphans.iter().map(|o| o.until))
            .min()
    }

    /// Advances timers: paced NOTIFYs, expiries, NOTIFY transactions that got no answer, and
    /// the allocation's measurement period.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        if self.allocation.as_mut().is_some_and(|a| a.tick(now_ns)) {
            self.mark_allocated_dirty();
        }
        let orphans = self.orphans.len();
        self.orphans.retain(|o| o.until > now_ns);
        if self.orphans.len() < orphans {
            // Capacity an ended subscription held is free again.
            self.mark_allocated_dirty();
        }
        let mut gone = Vec::new();
        for (i, s) in self.subs.iter_mut().enumerate() {
            if let Some((_, at)) = s.outstanding
                && now_ns >= at + TRANSACTION_TIMEOUT_NS
            {
                gone.push((i, "notify-failed"));
                continue;
            }
            if now_ns >= s.expires_at && s.ending.is_none() {
                s.ending = Some("timeout");
                s.outstanding = None;
            }
        }
        for (i, reason) in gone.into_iter().rev() {
            let s = self.subs.remove(i);
            self.orphan(&s);
            self.events.push_back(NotifierEvent::Ended {
                subscriber: s.subscriber.uri.to_string(),
                reason,
            });
        }
        for i in 0..self.subs.len() {
            let force = self.subs[i].ending.is_some();
            self.send_if_due(now_ns, i, force);
        }
        self.retire();
    }

    /// Handles a response to a NOTIFY this notifier sent.
    pub fn handle_response(&mut self, now_ns: u64, resp: &Response) {
        if resp.method != Method::Notify || resp.status < 200 {
            return;
        }
        let Some(i) = self.subs.iter().position(|s| {
            s.call_id == resp.call_id && s.outstanding.is_some_and(|(c, _)| c == resp.cseq)
        }) else {
            // The answer to an ended subscription's `terminated` NOTIFY: with a 2xx its
            // subscriber dropped the share.
            let before = self.orphans.len();
            self.orphans.retain(|o| {
                !(resp.is_success()
                    && o.notify
                        .as_ref()
                        .is_some_and(|(c, n)| *c == resp.call_id && *n == resp.cseq))
            });
            if self.orphans.len() < before {
                self.mark_allocated_dirty();
                self.flush(now_ns);
            }
            return;
        };
        self.subs[i].outstanding = None;
        if !resp.is_success() {
            let s = self.subs.remove(i);
            self.orphan(&s);
            self.events.push_back(NotifierEvent::Ended {
                subscriber: s.subscriber.uri.to_string(),
                reason: "notify-failed",
            });
            self.retire();
            return;
        }
        let s = &mut self.subs[i];
        let before = s.in_force_share;
        // A NOTIFY that carried no share (a bodyless one) leaves the share in force as it was.
        if let Some(share) = s.outstanding_share.take() {
            s.in_force_share = Some(share);
            if let Some(a) = &mut self.allocation {
                a.acknowledged(&s.key, share);
            }
        }
        let s = &self.subs[i];
        let less = s.in_force_share < before;
        if self.allocation.is_some() && less {
            // The subscriber now enforces less: what it gave back may let others grow.
            self.mark_allocated_dirty();
            self.flush(now_ns);
            return;
        }
        self.send_if_due(now_ns, i, false);
        self.retire();
    }

    /// Sends subscription `i`'s pending NOTIFY if it is due (`immediate` skips the pacing).
    fn send_if_due(&mut self, now_ns: u64, i: usize, immediate: bool) {
        let pacing = self.config.pacing_ns;
        let s = &self.subs[i];
        if s.outstanding.is_some() && s.ending.is_none() {
            return;
        }
        if !s.dirty && s.ending.is_none() {
            return;
        }
        if !immediate && s.ending.is_none() && s.last_notify_at.is_some_and(|t| now_ns < t + pacing)
        {
            return;
        }
        let (share, target) = match self.allocated(i) {
            Some((share, rules)) => (Some(share), Some(rules)),
            None => (None, self.policy_for(&s.key).clone()),
        };
        let s = &mut self.subs[i];
        // A NOTIFY without a body means "nothing to update" (§4.8): a subscriber that holds a
        // document is cleared with a full document that has no rules.
        let target = match target {
            None if s.sent.is_some() => Some(Vec::new()),
            t => t,
        };
        let (body, sent) = match &target {
            // Never sent a document, and no policy: the bodyless NOTIFY of §4.7, due after a
            // (re-)SUBSCRIBE or at the end.
            None if s.full_next || s.ending.is_some() => (Vec::new(), None),
            None => {
                s.dirty = false;
                return;
            }
            Some(rules) => {
                let changed = s.ending.is_none()
                    && (s.full_next || s.sent.as_ref().is_none_or(|old| !same(old, rules)));
                match u32::try_from(s.next_version) {
                    // Versions used up: end the subscription so that a new one starts at the
                    // first version again (see the module documentation).
                    Err(_) if changed => {
                        s.ending = Some("versions-exhausted");
                        s.outstanding = None;
                        (Vec::new(), s.sent.clone())
                    }
                    Err(_) => (Vec::new(), s.sent.clone()),
                    Ok(version) => {
                        match document(version, s.sent.as_ref().filter(|_| !s.full_next), rules) {
                            Some(doc) => {
                                s.next_version += 1;
                                (policy::write(&doc).into_bytes(), Some(rules.clone()))
                            }
                            // Nothing changed since the last NOTIFY.
                            None if s.ending.is_none() => {
                                s.dirty = false;
                                return;
                            }
                            None => (Vec::new(), s.sent.clone()),
                        }
                    }
                }
            }
        };
        let remaining = s.expires_at.saturating_sub(now_ns) / SECOND_NS;
        let retry_after = match self.closed {
            Some(ShutdownReason::Restart { retry_after_s }) => Some(retry_after_s),
            _ => None,
        };
        let state = match s.ending {
            Some(reason) => SubscriptionState::Terminated {
                reason: Some(
                    match reason {
                        "unsubscribed" => "timeout",
                        "versions-exhausted" => "deactivated",
                        "restart" => "probation",
                        other => other,
                    }
                    .to_owned(),
                ),
                retry_after: retry_after.filter(|_| reason == "restart"),
            },
            None => SubscriptionState::Active {
                expires: Some(remaining as u32),
            },
        };
        s.cseq += 1;
        // A `terminated` NOTIFY sets no share (a subscriber withdraws the policy whatever its
        // body holds), and may go out while the NOTIFY before it is still unanswered: its
        // subscriber may have applied that one (the answer late or lost) and enforces it until
        // the `terminated` one reaches it, so that share keeps counting (it becomes the
        // orphan's, see `retire`).
        if s.ending.is_none() {
            s.outstanding_share = share.filter(|_| !body.is_empty());
        }
        let req = Request {
            method: Method::Notify,
            request_uri: s.remote_target.clone(),
            call_id: s.call_id.clone(),
            from: NameAddr {
                uri: self.config.uri.clone(),
                tag: Some(s.our_tag.clone()),
            },
            to: s.subscriber.clone(),
            cseq: s.cseq,
            event: Some(EVENT_PACKAGE.to_owned()),
            expires: None,
            accept: None,
            subscription_state: Some(state.render()),
            content_type: Some(policy::CONTENT_TYPE.to_owned()),
            body,
            contact: None,
            record_route: Vec::new(),
            route: s.route_set.clone(),
        };
        s.sent = sent;
        s.dirty = false;
        s.full_next = false;
        s.last_notify_at = Some(now_ns);
        s.outstanding = Some((s.cseq, now_ns));
        self.outbox.push_back(req);
        if let Some(reason) = s.ending {
            let subscriber = s.subscriber.uri.to_string();
            self.events
                .push_back(NotifierEvent::Ended { subscriber, reason });
        }
    }
}

/// What a subscription's subscriber may be enforcing under an allocation: the larger of the
/// share it acknowledged and the one in flight.
fn exposure_of(s: &Subscription) -> f64 {
    s.in_force_share
        .unwrap_or(0.0)
        .max(s.outstanding_share.unwrap_or(0.0))
}

/// True when two template rules name the same class of requests (the same id, conditions and
/// alt-action; their limits may differ: the capacity is given separately).
fn same_class(a: &Rule, b: &Rule) -> bool {
    a.id == b.id && a.conditions == b.conditions && a.accept.alt_action == b.accept.alt_action
}

/// True when two policies hold the same rules in the same order.
fn same(a: &[Arc<Rule>], b: &[Arc<Rule>]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| Arc::ptr_eq(x, y) || **x == **y)
}

/// The document that brings a subscriber from `sent` (or nothing) to `target` with version
/// `version`: partial when rules were only added or changed (a partial document adds or
/// replaces rules by id, RFC 7200 §4.11: no rule disappears through one), that reproduces
/// `target` exactly and changes fewer rules than it holds; full otherwise; `None` when nothing
/// changed.
fn document(version: u32, sent: Option<&Vec<Arc<Rule>>>, target: &[Arc<Rule>]) -> Option<Ruleset> {
    let full = || Ruleset::full_shared(version, target.to_vec()).ok();
    let Some(sent) = sent else { return full() };
    if sent
        .iter()
        .any(|old| !target.iter().any(|r| r.id == old.id))
    {
        // A rule disappeared: only a full document says so to every subscriber.
        return full();
    }
    let mut changes = Vec::new();
    for new in target {
        match sent.iter().find(|r| r.id == new.id) {
            Some(old) if Arc::ptr_eq(old, new) || **old == **new => {}
            _ => changes.push(Change::Put((**new).clone())),
        }
    }
    if changes.is_empty() {
        // Same rules; a new order needs a full document.
        let same_order = sent.iter().map(|r| &r.id).eq(target.iter().map(|r| &r.id));
        return if same_order { None } else { full() };
    }
    if changes.len() >= target.len() {
        return full();
    }
    let partial = Ruleset::partial(version, changes).ok()?;
    let base = Ruleset::full_shared(version.wrapping_sub(1), sent.clone()).ok()?;
    let limits = Limits {
        max_rules: usize::MAX,
        ..Limits::default()
    };
    match policy::merge(Some(&base), partial.clone(), &limits) {
        Ok(merged)
            if merged
                .rules()
                .is_some_and(|m| m.iter().map(|r| &**r).eq(target.iter().map(|r| &**r))) =>
        {
            Some(partial)
        }
        _ => full(),
    }
}
