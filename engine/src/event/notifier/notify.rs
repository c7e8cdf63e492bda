//! The NOTIFYs: when one is due (pacing, one outstanding per subscription), what it carries
//! (state, version, document), what its answer does, and the timers that drive them.

use super::document::{document, same};
use super::{Notifier, NotifierEvent, ShutdownReason};
use crate::clock::nanos;
use crate::event::allocator::Allocation;
use crate::event::{
    EVENT_PACKAGE, EventRequest, Method, NameAddr, Response, SECOND_NS, SubscriptionState,
    TRANSACTION_TIMEOUT_NS,
};
use crate::policy;

impl Notifier {
    /// Sends every NOTIFY that is due, then retires the subscriptions that ended.
    pub(super) fn flush(&mut self, now_ns: u64) {
        for i in 0..self.subs.len() {
            self.send_if_due(now_ns, i, false);
        }
        self.retire();
    }

    /// When [`Notifier::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<u64> {
        // Timers as numbers (u64::MAX: none), not Options: see the subscriber's poll_timeout.
        const NONE: u64 = u64::MAX;
        let subs = self.subs.iter().map(|s| {
            let paced = if s.dirty && s.outstanding.is_none() {
                s.last_notify_at
                    .map_or(0, |t| t.saturating_add(nanos(self.config.pacing)))
            } else {
                NONE
            };
            let txn = s
                .outstanding
                .map_or(NONE, |(_, at)| at.saturating_add(TRANSACTION_TIMEOUT_NS));
            s.expires_at.min(paced).min(txn)
        });
        let allocation = self.allocation.as_ref().map_or(NONE, Allocation::next_tick);
        let next = subs
            .chain(self.orphans.iter().map(|o| o.until))
            .fold(allocation, u64::min);
        (next != NONE).then_some(next)
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
    pub(super) fn send_if_due(&mut self, now_ns: u64, i: usize, immediate: bool) {
        let pacing = nanos(self.config.pacing);
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
        let req = EventRequest {
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
