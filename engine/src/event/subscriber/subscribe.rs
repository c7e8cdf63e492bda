//! The SUBSCRIBEs: a new subscription or a refresh, when each goes out (refresh before expiry,
//! retries with back-off, the wait after young ends), what their answers do, and the timers
//! that drive them.

use super::{
    Dialog, Phase, PolicySink, StopReason, Subscriber, SubscriberEvent, Transaction, YOUNG_NS,
};
use crate::clock::nanos;
use crate::event::{
    EVENT_PACKAGE, EventRequest, Method, NameAddr, Response, SECOND_NS, TRANSACTION_TIMEOUT_NS,
};
use crate::policy;

impl<S: PolicySink> Subscriber<S> {
    /// When [`Subscriber::handle_timeout`] must be called next (monotonic ns).
    pub fn poll_timeout(&self) -> Option<u64> {
        // Each timer as a number (u64::MAX: none), then the least: comparing Options directly
        // lets the optimiser compare the bytes of a `None` before its tag, which is sound but
        // makes valgrind report "Conditional jump or move depends on uninitialised value(s)"
        // in the C programs that run their tests under it.
        const NONE: u64 = u64::MAX;
        let txn = self
            .txn
            .map_or(NONE, |t| t.sent_at.saturating_add(TRANSACTION_TIMEOUT_NS));
        let phase = match self.phase {
            Phase::Active { refresh_at } => refresh_at,
            Phase::Waiting { retry_at } => retry_at,
            _ => NONE,
        };
        let lapse = match self.phase {
            Phase::Stopped => NONE,
            _ => self.lapses_at.unwrap_or(NONE),
        };
        let next = txn.min(phase).min(lapse);
        (next != NONE).then_some(next)
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
    /// again from
    /// [`SubscriberConfig::retry_initial`](super::SubscriberConfig::retry_initial). The
    /// rules in force stay until the new subscription's first document replaces them; a live
    /// dialog is abandoned (not unsubscribed): the notifier's next NOTIFY on it is answered
    /// 481, which ends it there.
    pub fn resubscribe(&mut self, now_ns: u64) {
        self.retry_delay = nanos(self.config.retry_initial);
        // Out of `Ending` too: `send_subscribe` keeps that phase.
        self.phase = Phase::Subscribing;
        self.events.push_back(SubscriberEvent::Retrying {
            at_ns: now_ns,
            why: "re-subscription requested".into(),
        });
        self.new_subscription(now_ns);
    }

    pub(super) fn new_subscription(&mut self, now_ns: u64) {
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

    pub(super) fn send_subscribe(&mut self, now_ns: u64, expires: u32) {
        self.cseq += 1;
        let req = EventRequest {
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

    pub(super) fn retry_later(&mut self, now_ns: u64, retry_after_s: Option<u32>, why: &str) {
        let delay = match retry_after_s {
            Some(s) => u64::from(s) * SECOND_NS,
            None => {
                let d = self.retry_delay;
                self.retry_delay =
                    (self.retry_delay.saturating_mul(2)).min(nanos(self.config.retry_max));
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

    pub(super) fn stop(&mut self, why: StopReason) {
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
                self.retry_delay = nanos(self.config.retry_initial);
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

    /// A new subscription at once (`deactivated`, `timeout`), unless subscriptions keep ending
    /// young (see [`YOUNG_NS`]): from the second such end in a row, after the back-off (the
    /// first delay, doubling), so that a notifier that ends every subscription at once does
    /// not get a SUBSCRIBE per round trip. The 2xx of each cycle resets the ordinary back-off,
    /// hence the count of its own; a refresh that goes through resets this one.
    pub(super) fn resubscribe_now(&mut self, now_ns: u64) {
        let young = self.young_until.is_some_and(|t| now_ns < t);
        self.young_ends = if young { self.young_ends + 1 } else { 0 };
        if self.young_ends > 1 {
            let shift = (self.young_ends - 2).min(32);
            let delay = nanos(self.config.retry_initial)
                .saturating_mul(1 << shift)
                .min(nanos(self.config.retry_max));
            self.wait(now_ns, delay, "terminated again soon after it was granted");
            return;
        }
        self.events.push_back(SubscriberEvent::Retrying {
            at_ns: now_ns,
            why: "terminated".into(),
        });
        self.new_subscription(now_ns);
    }

    /// Asks for the full state again: a refresh SUBSCRIBE in the dialog (the notifier answers
    /// every refresh with a full NOTIFY), unless one is already outstanding.
    pub(super) fn refetch(&mut self, now_ns: u64) {
        if self.txn.is_none() && self.phase != Phase::Ending {
            self.send_subscribe(now_ns, self.config.expires);
        }
    }
}
