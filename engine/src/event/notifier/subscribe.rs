//! SUBSCRIBE handling: the checks that refuse one (RFC 7200 §4.6, RFC 6665 §4.2.1), and the
//! grant, refresh or unsubscribe of a subscription that passes them. The NOTIFY each accepted
//! SUBSCRIBE calls for is built in `notify`.

use super::{Notifier, NotifierEvent, ShutdownReason, Subscription, uri_key};
use crate::event::{EventRequest, Method, Response, SECOND_NS, is_load_control};
use crate::policy;

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
    fn refuse(&mut self, req: &EventRequest, status: u16, why: &'static str) -> Response {
        self.events
            .push_back(NotifierEvent::Refused { status, why });
        Response::to(req, status, None)
    }

    /// Handles a SUBSCRIBE; returns the response to send (a NOTIFY follows in
    /// [`Notifier::poll_transmit`] when it was accepted).
    pub fn handle_subscribe(&mut self, now_ns: u64, req: &EventRequest) -> Response {
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
}
