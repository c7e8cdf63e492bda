//! A NOTIFY's way in: the checks that refuse it (trust domain, dialog, fork, package,
//! Subscription-State) and what its state calls for (RFC 6665 §4.1.3 on `terminated`); its body
//! goes to `apply`.

use super::{Phase, PolicySink, StopReason, Subscriber, SubscriberEvent};
use crate::event::{EventRequest, Method, Response, SECOND_NS, SubscriptionState, is_load_control};
use crate::policy::Uri;

impl<S: PolicySink> Subscriber<S> {
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

    fn refuse(&mut self, req: &EventRequest, status: u16, why: &'static str) -> Response {
        self.stats.rejected += 1;
        self.events
            .push_back(SubscriberEvent::NotifyRejected { status, why });
        Response::to(req, status, None)
    }

    /// Handles a NOTIFY; returns the response to send.
    pub fn handle_notify(&mut self, now_ns: u64, req: &EventRequest) -> Response {
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
}
