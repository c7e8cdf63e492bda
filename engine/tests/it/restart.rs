//! A notifier that restarts, gracefully or not, and the subscriber that must be protected again,
//! in simulated time: each `terminated` reason of RFC 6665 §4.1.3, the back-off when the new
//! SUBSCRIBE finds nobody, the rules of a notifier that went silent, an operator's
//! re-subscription, and a hard restart that deactivates the dialogs of the process before it.
//! Expected times are the RFC's parameters and the subscriber's documented back-off.

use std::sync::Arc;

use loadctl::event::allocator::AllocatorConfig;
use loadctl::event::notifier::{Authorization, Notifier, NotifierConfig, ShutdownReason};
use loadctl::event::subscriber::{StopReason, Subscriber, SubscriberConfig, SubscriberEvent};
use loadctl::event::*;
use loadctl::policy::{self, Limits, Rule, Uri};
use loadctl::runtime::{Engine, EngineConfig};

const S: u64 = 1_000_000_000;
const NOTIFIER: &str = "sip:sbc.example.com";

fn uri(s: &str) -> Uri {
    Uri::new(s).expect("uri")
}

/// One rate rule whose id says its rate (`r20`, `r40`).
fn policy_at(rate: u32) -> Vec<Arc<Rule>> {
    let doc = format!(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">\
         <rule id=\"r{rate}\"><actions><accept><rate>{rate}</rate></accept></actions></rule></ruleset>"
    );
    policy::read(doc.as_bytes(), &Limits::default())
        .expect("valid")
        .ruleset
        .rules()
        .expect("full")
        .to_vec()
}

/// A notifier process (`tag` tells processes apart) pushing `rate`.
fn notifier_process(tag: &str, rate: u32) -> Notifier {
    let mut n = Notifier::new(NotifierConfig::new(uri(NOTIFIER), tag, Authorization::Any));
    n.set_policy(0, Some(policy_at(rate)));
    n
}

/// One subscriber and at most one notifier process; `None` is the notifier down (what is sent
/// to it is lost).
struct Net {
    sub: Subscriber,
    engine: Engine,
    notifier: Option<Notifier>,
    now: u64,
    /// NOTIFY answers the subscriber gave, in order.
    answers: Vec<u16>,
    /// SUBSCRIBEs the subscriber sent (to whoever was there), with when.
    subscribes: Vec<u64>,
}

impl Net {
    fn new(expires: u32, notifier: Notifier) -> Self {
        let engine = Engine::new(EngineConfig::default().with_shards(1));
        let mut c = SubscriberConfig::new(uri(NOTIFIER), uri("sip:edge.example.net"), "c", "t");
        c.expires = expires;
        let sub = Subscriber::new(c, engine.clone(), 0);
        let mut net = Self {
            sub,
            engine,
            notifier: Some(notifier),
            now: 0,
            answers: Vec::new(),
            subscribes: Vec::new(),
        };
        net.pump();
        net
    }

    fn pump(&mut self) {
        for _ in 0..100 {
            let mut moved = false;
            while let Some(req) = self.sub.poll_transmit() {
                moved = true;
                self.subscribes.push(self.now);
                if let Some(n) = &mut self.notifier {
                    let resp = n.handle_subscribe(self.now, &req);
                    self.sub.handle_response(self.now, &resp);
                }
            }
            if let Some(n) = &mut self.notifier {
                while let Some(req) = n.poll_transmit() {
                    moved = true;
                    let resp = self.sub.handle_notify(self.now, &req);
                    self.answers.push(resp.status);
                    n.handle_response(self.now, &resp);
                }
            }
            if !moved {
                return;
            }
        }
    }

    fn run_until(&mut self, t: u64) {
        loop {
            self.pump();
            let next = self
                .sub
                .poll_timeout()
                .into_iter()
                .chain(self.notifier.as_ref().and_then(Notifier::poll_timeout))
                .min();
            match next {
                Some(n) if n <= t => {
                    self.now = self.now.max(n);
                    self.sub.handle_timeout(self.now);
                    if let Some(n) = &mut self.notifier {
                        n.handle_timeout(self.now);
                    }
                }
                _ => {
                    self.now = t;
                    self.pump();
                    return;
                }
            }
        }
    }

    /// The id of the rule in force from the notifier (`None`: unprotected).
    fn in_force(&self) -> Option<String> {
        self.engine
            .source_policy(NOTIFIER)
            .and_then(|p| p.rules().and_then(|r| r.first().map(|r| r.id.to_string())))
    }

    /// Runs until `rule` is in force (at most until `limit`); returns when.
    fn protected_at(&mut self, rule: &str, limit: u64) -> Option<u64> {
        while self.now < limit {
            if self.in_force().as_deref() == Some(rule) {
                return Some(self.now);
            }
            let step = (self.now + S / 10).min(limit);
            self.run_until(step);
        }
        (self.in_force().as_deref() == Some(rule)).then_some(self.now)
    }

    fn events(&mut self) -> Vec<SubscriberEvent> {
        std::iter::from_fn(|| self.sub.poll_event()).collect()
    }
}

#[test]
fn a_graceful_restart_sends_probation_and_the_subscriber_is_back_after_retry_after() {
    let mut net = Net::new(1800, notifier_process("n1", 20));
    assert_eq!(net.in_force().as_deref(), Some("r20"));
    net.run_until(100 * S);
    let mut old = net.notifier.take().expect("running");
    old.shutdown(net.now, ShutdownReason::Restart { retry_after_s: 5 });
    let last = old.poll_transmit().expect("the terminated NOTIFY");
    assert_eq!(
        last.subscription_state.as_deref(),
        Some("terminated;reason=probation;retry-after=5")
    );
    // A SUBSCRIBE reaching the notifier on its way out is not accepted: it would be a
    // subscription to a process that is gone a moment later.
    let mut late = Subscriber::new(
        SubscriberConfig::new(uri(NOTIFIER), uri("sip:other.example.net"), "o", "o"),
        net.engine.clone(),
        net.now,
    );
    let refused = old.handle_subscribe(net.now, &late.poll_transmit().expect("SUBSCRIBE"));
    assert_eq!((refused.status, refused.retry_after), (503, Some(5)));
    assert_eq!(old.subscriptions(), 0);
    let resp = net.sub.handle_notify(net.now, &last);
    assert_eq!(resp.status, 200);
    // RFC 7200 §4.8: the rules of a terminated subscription go.
    assert_eq!(net.in_force(), None);
    // The new process is up 3 s later; the subscriber waits the 5 s retry-after.
    let down = net.now;
    net.run_until(down + 3 * S);
    assert!(net.subscribes.iter().all(|t| *t < down), "not before 5 s");
    net.notifier = Some(notifier_process("n2", 40));
    let at = net
        .protected_at("r40", down + 60 * S)
        .expect("protected again");
    assert_eq!(at, down + 5 * S);
}

#[test]
fn a_restart_longer_than_retry_after_is_met_with_a_bounded_back_off() {
    let mut net = Net::new(1800, notifier_process("n1", 20));
    let mut old = net.notifier.take().expect("running");
    old.shutdown(0, ShutdownReason::Restart { retry_after_s: 5 });
    let last = old.poll_transmit().expect("NOTIFY");
    net.sub.handle_notify(0, &last);
    // Down for 50 s: the SUBSCRIBE at 5 s gets no answer (32 s, RFC 3261 Timer F), the next
    // after 1 s of back-off at 38 s neither, the next after 2 s at 72 s finds the new process.
    net.run_until(50 * S);
    assert_eq!(net.subscribes[1..], [5 * S, 38 * S]);
    net.notifier = Some(notifier_process("n2", 40));
    let at = net.protected_at("r40", 400 * S).expect("protected again");
    assert_eq!(at, 72 * S);
}

#[test]
fn the_back_off_doubles_to_its_cap_and_stays_there() {
    let mut net = Net::new(1800, notifier_process("n1", 20));
    net.notifier = None;
    // The refresh at 1800 − 60 s finds nobody, nor does any SUBSCRIBE after it.
    net.run_until(20_000 * S);
    let gaps: Vec<u64> = net.subscribes[1..]
        .windows(2)
        .map(|w| (w[1] - w[0]) / S)
        .collect();
    // 32 s without an answer, then 1, 2, 4 … 256, 300, 300 … s (retry_max 300 s).
    let expected: Vec<u64> = [1, 2, 4, 8, 16, 32, 64, 128, 256]
        .into_iter()
        .chain(std::iter::repeat(300))
        .map(|b| 32 + b)
        .take(gaps.len())
        .collect();
    assert!(gaps.len() > 12, "{gaps:?}");
    assert_eq!(gaps, expected);
    // The rules of a notifier that went silent stay in force (RFC 7200 §4.8).
    assert_eq!(net.in_force().as_deref(), Some("r20"));
}

#[test]
fn a_silent_notifiers_rules_stay_in_force_through_expiry_and_after_the_lapse() {
    let mut net = Net::new(600, notifier_process("n1", 20));
    net.notifier = None;
    net.run_until(599 * S);
    assert_eq!(net.in_force().as_deref(), Some("r20"));
    assert!(!net.events().contains(&SubscriberEvent::Lapsed));
    net.run_until(601 * S);
    assert!(net.events().contains(&SubscriberEvent::Lapsed));
    net.run_until(7200 * S);
    assert_eq!(net.in_force().as_deref(), Some("r20"));
    assert!(!net.sub.is_stopped());
}

#[test]
fn each_terminated_reason_brings_the_subscriber_back_when_rfc_6665_says() {
    // (Subscription-State, seconds until the new SUBSCRIBE; None: stops until told).
    for (state, after) in [
        ("terminated;reason=deactivated", Some(0)),
        ("terminated;reason=timeout", Some(0)),
        ("terminated;reason=probation;retry-after=30", Some(30)),
        ("terminated;reason=giveup;retry-after=12", Some(12)),
        // No retry-after: the back-off delay, 1 s after a granted subscription.
        ("terminated;reason=probation", Some(1)),
        ("terminated;reason=giveup", Some(1)),
        ("terminated;reason=noresource", None),
        ("terminated;reason=rejected", None),
    ] {
        let mut net = Net::new(1800, notifier_process("n1", 20));
        net.run_until(10 * S);
        // The notifier's own NOTIFY in the live dialog, with the reason under test.
        let mut n = net.notifier.take().expect("running");
        n.set_policy(net.now, Some(policy_at(21)));
        let mut req = n.poll_transmit().expect("NOTIFY");
        req.subscription_state = Some(state.into());
        req.body.clear();
        let sent = net.subscribes.len();
        assert_eq!(net.sub.handle_notify(net.now, &req).status, 200);
        assert_eq!(net.in_force(), None, "{state}: withdrawn");
        net.notifier = Some(notifier_process("n2", 40));
        net.run_until(3600 * S);
        match after {
            Some(s) => {
                assert_eq!(net.subscribes[sent], 10 * S + s * S, "{state}");
                assert_eq!(net.in_force().as_deref(), Some("r40"), "{state}");
            }
            None => {
                assert_eq!(net.subscribes.len(), sent, "{state}: no SUBSCRIBE");
                assert!(net.sub.is_stopped(), "{state}");
                assert_eq!(net.in_force(), None, "{state}");
            }
        }
    }
}

#[test]
fn a_decommission_stops_the_subscriber_until_an_operator_resubscribes() {
    let mut net = Net::new(1800, notifier_process("n1", 20));
    let mut old = net.notifier.take().expect("running");
    old.shutdown(S, ShutdownReason::Decommission);
    let last = old.poll_transmit().expect("NOTIFY");
    assert_eq!(
        last.subscription_state.as_deref(),
        Some("terminated;reason=noresource")
    );
    net.now = S;
    net.sub.handle_notify(S, &last);
    assert!(net.sub.is_stopped());
    assert!(net.events().iter().any(|e| matches!(
        e,
        SubscriberEvent::Stopped(StopReason::Terminated(r)) if r == "noresource"
    )));
    net.notifier = Some(notifier_process("n2", 40));
    net.run_until(7200 * S);
    assert_eq!(net.subscribes.len(), 1, "no SUBSCRIBE after noresource");
    assert_eq!(net.in_force(), None);
    net.sub.resubscribe(net.now);
    net.pump();
    assert_eq!(net.subscribes.len(), 2);
    assert_eq!(net.in_force().as_deref(), Some("r40"));
    assert!(!net.sub.is_stopped());
}

#[test]
fn resubscribe_cuts_a_wait_short_and_leaves_a_live_dialog_for_a_new_one() {
    let mut net = Net::new(1800, notifier_process("n1", 20));
    let mut old = net.notifier.take().expect("running");
    old.shutdown(0, ShutdownReason::Restart { retry_after_s: 600 });
    net.sub
        .handle_notify(0, &old.poll_transmit().expect("NOTIFY"));
    net.notifier = Some(notifier_process("n2", 40));
    net.run_until(2 * S);
    assert_eq!(net.in_force(), None, "waiting out the retry-after");
    net.sub.resubscribe(net.now);
    net.pump();
    assert_eq!(net.in_force().as_deref(), Some("r40"));
    // On a live dialog: a new one; the policy in force stays until its document replaces it.
    let n2 = net.notifier.as_mut().expect("running");
    assert_eq!(n2.subscriptions(), 1);
    net.sub.resubscribe(net.now);
    assert_eq!(net.in_force().as_deref(), Some("r40"));
    net.pump();
    let n2 = net.notifier.as_mut().expect("running");
    assert_eq!(n2.subscriptions(), 2);
    // The abandoned dialog's next NOTIFY is answered 481 and ends it at the notifier.
    n2.set_policy(net.now + 2 * S, Some(policy_at(41)));
    net.run_until(net.now + 3 * S);
    assert!(net.answers.contains(&481));
    assert_eq!(net.notifier.as_ref().map(Notifier::subscriptions), Some(1));
    assert_eq!(net.in_force().as_deref(), Some("r41"));
}

#[test]
fn a_hard_restart_without_the_dialogs_is_noticed_at_the_refresh() {
    let mut net = Net::new(1800, notifier_process("n1", 20));
    net.run_until(100 * S);
    // SIGKILL: nothing sent. The new process is up 3 s later.
    net.notifier = None;
    net.run_until(103 * S);
    net.notifier = Some(notifier_process("n2", 40));
    // The refresh at 1800 − 60 s gets 481 and a new subscription follows at once.
    let at = net.protected_at("r40", 3600 * S).expect("protected again");
    assert_eq!(at, 1740 * S);
}

#[test]
fn a_hard_restart_with_the_dialogs_deactivates_them_and_protects_at_once() {
    let mut net = Net::new(1800, notifier_process("n1", 20));
    net.run_until(100 * S);
    net.notifier
        .as_mut()
        .expect("running")
        .set_policy(100 * S, Some(policy_at(25)));
    net.run_until(101 * S);
    let saved = net.notifier.as_ref().expect("running").dialogs();
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].cseq, 2, "two NOTIFYs sent");
    assert_eq!(saved[0].expires_at_ns, 1800 * S);
    net.notifier = None;
    net.run_until(104 * S);
    let mut n2 = notifier_process("n2", 40);
    assert_eq!(n2.deactivate(104 * S, &saved), 1);
    net.notifier = Some(n2);
    net.pump();
    assert_eq!(net.in_force().as_deref(), Some("r40"));
    assert_eq!(net.answers[net.answers.len() - 2..], [200, 200]);
    // The subscriber is on the new process's subscription: its refresh is answered 200.
    net.run_until(104 * S + 1800 * S);
    assert_eq!(net.notifier.as_ref().map(Notifier::subscriptions), Some(1));
    assert!(!net.answers.contains(&481));
    // Expired records and live dialogs are skipped.
    let n2 = net.notifier.as_mut().expect("running");
    assert_eq!(n2.deactivate(2000 * S, &saved), 0);
    let live = n2.dialogs();
    assert_eq!(n2.deactivate(net.now, &live), 0);
}

#[test]
fn a_deactivated_dialogs_share_counts_against_the_capacity_until_it_is_answered() {
    let template = policy_at(1)[0].as_ref().clone();
    let sub_of = |edge: &str, call: &str| {
        let mut s = Subscriber::new(
            SubscriberConfig::new(uri(NOTIFIER), uri(edge), call, call),
            Engine::new(EngineConfig::default()),
            0,
        );
        s.poll_transmit().expect("SUBSCRIBE")
    };
    let mut n1 = Notifier::new(NotifierConfig::new(uri(NOTIFIER), "n1", Authorization::Any));
    n1.set_capacity(0, 100.0, template.clone(), AllocatorConfig::default())
        .expect("capacity");
    n1.handle_subscribe(0, &sub_of("sip:a.example.net", "a"));
    let first = n1.poll_transmit().expect("NOTIFY");
    n1.handle_response(0, &Response::to(&first, 200, None));
    let saved = n1.dialogs();
    assert_eq!(saved[0].share, Some(100.0));
    // The new process shares the same 100/s; edge a still enforces 100 until it is told.
    let mut n2 = Notifier::new(NotifierConfig::new(uri(NOTIFIER), "n2", Authorization::Any));
    n2.set_capacity(S, 100.0, template, AllocatorConfig::default())
        .expect("capacity");
    assert_eq!(n2.deactivate(S, &saved), 1);
    let deactivation = n2.poll_transmit().expect("NOTIFY");
    assert_eq!(deactivation.cseq, 2);
    assert_eq!(
        deactivation.subscription_state.as_deref(),
        Some("terminated;reason=deactivated")
    );
    n2.handle_subscribe(S, &sub_of("sip:b.example.net", "b"));
    let to_b = n2.poll_transmit().expect("NOTIFY to b");
    let rate_of = |req: &EventRequest| {
        let doc = policy::read(&req.body, &Limits::default()).expect("document");
        match doc.ruleset.rules().expect("full")[0].accept.limit {
            policy::Limit::Rate(r) => r.per_second(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(rate_of(&to_b), 0.0, "nothing free while a holds 100");
    n2.handle_response(S, &Response::to(&to_b, 200, None));
    // a's answer to the deactivation frees its share: b grows.
    n2.handle_response(2 * S, &Response::to(&deactivation, 200, None));
    n2.handle_timeout(3 * S);
    let grown = n2.poll_transmit().expect("NOTIFY to b");
    assert!(rate_of(&grown) > 0.0, "{grown:?}");
}

#[test]
fn a_notifier_that_deactivates_every_new_subscription_gets_a_backed_off_subscriber() {
    let mut net = Net::new(1800, notifier_process("n1", 20));
    let start = net.subscribes.len();
    // Each new subscription is ended with `deactivated` as soon as its first NOTIFY is answered.
    let mut ended: Vec<String> = Vec::new();
    while net.now < 40 * S && ended.len() < 8 {
        net.run_until(net.now + S / 10);
        let n = net.notifier.as_mut().expect("running");
        // n1 keeps the dialogs ended behind its back: only the newest is the subscriber's.
        let Some(d) = n.dialogs().pop().filter(|d| !ended.contains(&d.call_id)) else {
            continue;
        };
        // Another process's NOTIFY in the same dialog: what a misbehaving notifier sends.
        let mut end = notifier_process("x", 1);
        end.deactivate(net.now, std::slice::from_ref(&d));
        let req = end.poll_transmit().expect("NOTIFY");
        assert_eq!(net.sub.handle_notify(net.now, &req).status, 200);
        ended.push(d.call_id);
    }
    let at: Vec<u64> = net.subscribes[start - 1..].to_vec();
    let gaps: Vec<u64> = at.windows(2).map(|w| (w[1] - w[0]) / (S / 10)).collect();
    // The first end: at once (within the 0.1 s step); then 1 s, 2 s, 4 s … of back-off.
    assert!(gaps.len() >= 4, "{gaps:?}");
    assert!(gaps[0] <= 1, "{gaps:?}");
    for (k, g) in gaps[1..4].iter().enumerate() {
        let want = 10 << k;
        assert!((want..=want + 1).contains(g), "{gaps:?}");
    }
}

#[test]
fn a_deactivation_long_after_the_grant_is_followed_at_once_every_time() {
    let mut net = Net::new(1800, notifier_process("n1", 20));
    for round in 1..=3u64 {
        net.run_until(round * 100 * S);
        let n = net.notifier.as_mut().expect("running");
        let d = n.dialogs().pop().expect("the subscriber's dialog");
        let mut end = notifier_process("x", 1);
        end.deactivate(net.now, &[d]);
        let sent = net.subscribes.len();
        net.sub
            .handle_notify(net.now, &end.poll_transmit().expect("NOTIFY"));
        net.pump();
        assert_eq!(net.subscribes.len(), sent + 1, "round {round}");
        assert_eq!(*net.subscribes.last().expect("sent"), net.now);
    }
}

#[test]
fn short_subscriptions_that_time_out_normally_are_followed_at_once() {
    // 10 s subscriptions whose refreshes never get through: each ends with the notifier's
    // `timeout` at expiry, after half its duration (not young), so the new one follows at once.
    let mut config = NotifierConfig::new(uri(NOTIFIER), "n1", Authorization::Any);
    config.min_expires = 1;
    let mut n = Notifier::new(config);
    n.set_policy(0, Some(policy_at(20)));
    let engine = Engine::new(EngineConfig::default());
    let mut c = SubscriberConfig::new(uri(NOTIFIER), uri("sip:edge.example.net"), "c", "t");
    c.expires = 10;
    let mut sub = Subscriber::new(c, engine, 0);
    let mut now = 0;
    for round in 0..4 {
        let req = sub.poll_transmit().expect("a new SUBSCRIBE at once");
        assert_eq!(req.to.tag, None, "round {round}: a new dialog");
        let resp = n.handle_subscribe(now, &req);
        assert_eq!(resp.expires, Some(10));
        sub.handle_response(now, &resp);
        while let Some(notify) = n.poll_transmit() {
            let answer = sub.handle_notify(now, &notify);
            n.handle_response(now, &answer);
        }
        // The refresh at 5 s is lost; the notifier's expiry at 10 s sends `timeout`.
        now += 5 * S;
        sub.handle_timeout(now);
        assert!(sub.poll_transmit().is_some(), "the refresh");
        now += 5 * S;
        n.handle_timeout(now);
        let end = n.poll_transmit().expect("terminated");
        assert_eq!(
            end.subscription_state.as_deref(),
            Some("terminated;reason=timeout")
        );
        sub.handle_notify(now, &end);
    }
}

#[test]
fn an_unsubscribe_answered_481_ends_the_subscription_without_a_new_one() {
    // RFC 6665 §4.1.2.3: unsubscribing is a SUBSCRIBE with Expires 0; a notifier that lost the
    // dialog (restarted without its state) answers 481, and a subscriber on its way out must
    // not take that for "start a new subscription" (§4.1.2.2), which is right only for a refresh.
    let mut net = Net::new(1800, notifier_process("n1", 20));
    net.run_until(10 * S);
    net.notifier = Some(notifier_process("n2", 20));
    let sent_before = net.subscribes.len();
    net.sub.unsubscribe(net.now);
    net.run_until(60 * S);
    assert_eq!(
        net.subscribes.len(),
        sent_before + 1,
        "only the unsubscribe went out: {:?}",
        net.subscribes
    );
    assert!(
        net.events()
            .iter()
            .any(|e| matches!(e, SubscriberEvent::Stopped(StopReason::Unsubscribed))),
        "the subscription ended as unsubscribed"
    );
}
