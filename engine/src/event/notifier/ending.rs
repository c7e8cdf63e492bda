//! How subscriptions end on purpose and what is left of them: [`Notifier::shutdown`], the
//! dialogs a restarted process needs ([`DialogRecord`]) and their deactivation, and the
//! removal of ended subscriptions, whose shares stay counted (as orphans) while their
//! subscribers may still enforce them.

use super::shares::exposure_of;
use super::{Notifier, Orphan, Subscription, uri_key};
use crate::event::{
    EVENT_PACKAGE, EventRequest, Method, NameAddr, SubscriptionState, TRANSACTION_TIMEOUT_NS,
};
use crate::policy::{self, Uri};

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

impl Notifier {
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
            self.outbox.push_back(EventRequest {
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

    /// Removes the subscriptions that ended; a subscriber left without one leaves the
    /// allocation, and the others' shares grow (when their NOTIFYs are due).
    pub(super) fn retire(&mut self) {
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
    pub(super) fn orphan(&mut self, s: &Subscription) {
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
}
