//! A notifier and subscribers back to back through an in-memory wire that can lose and
//! delay NOTIFYs.

use super::*;

/// Moves messages between a notifier and one subscriber; `lose` lists NOTIFYs (by count) to
/// drop, `delay` NOTIFYs to deliver that much later (after later messages).
pub(super) struct Wire {
    pub(super) notifier: Notifier,
    pub(super) subs: Vec<(Subscriber, Engine)>,
    pub(super) now: u64,
    notifies: usize,
    lose: Vec<usize>,
    delay: Vec<(usize, u64)>,
    held: Vec<(u64, EventRequest)>,
    late_answers: Vec<u16>,
}

impl Wire {
    fn pump(&mut self) {
        for _ in 0..100 {
            let mut moved = false;
            for (s, _) in &mut self.subs {
                while let Some(req) = s.poll_transmit() {
                    moved = true;
                    let resp = self.notifier.handle_subscribe(self.now, &req);
                    s.handle_response(self.now, &resp);
                }
            }
            while let Some(n) = self.notifier.poll_transmit() {
                moved = true;
                self.notifies += 1;
                let k = self.notifies;
                if self.lose.contains(&k) {
                    continue;
                }
                if let Some(&(_, d)) = self.delay.iter().find(|(n, _)| *n == k) {
                    self.held.push((self.now + d, n));
                    continue;
                }
                let resp = self.subs[0].0.handle_notify(self.now, &n);
                self.notifier.handle_response(self.now, &resp);
            }
            let now = self.now;
            let due: Vec<EventRequest> = self
                .held
                .iter()
                .filter(|(at, _)| *at <= now)
                .map(|(_, r)| r.clone())
                .collect();
            self.held.retain(|(at, _)| *at > now);
            for late in due {
                moved = true;
                let resp = self.subs[0].0.handle_notify(self.now, &late);
                self.late_answers.push(resp.status);
                self.notifier.handle_response(self.now, &resp);
            }
            if !moved {
                return;
            }
        }
    }

    pub(super) fn run_until(&mut self, t: u64) {
        loop {
            self.pump();
            let next = self
                .subs
                .iter()
                .filter_map(|(s, _)| s.poll_timeout())
                .chain(self.notifier.poll_timeout())
                .chain(self.held.iter().map(|(at, _)| *at))
                .min();
            match next {
                Some(n) if n <= t => {
                    self.now = self.now.max(n);
                    for (s, _) in &mut self.subs {
                        s.handle_timeout(self.now);
                    }
                    self.notifier.handle_timeout(self.now);
                }
                _ => {
                    self.now = t;
                    self.pump();
                    return;
                }
            }
        }
    }
}

pub(super) fn wire_one(lose: Vec<usize>, delay: Vec<(usize, u64)>) -> Wire {
    let e = engine();
    let mut c = SubscriberConfig::new(
        uri("sip:sbc.example.com"),
        uri("sip:proxy.upstream.example"),
        "cid",
        "up",
    );
    c.scope_to_notifier = false;
    c.expires = 600;
    let s = Subscriber::new(c, e.clone(), 0);
    Wire {
        notifier: notifier(),
        subs: vec![(s, e)],
        now: 0,
        notifies: 0,
        lose,
        delay,
        held: Vec::new(),
        late_answers: Vec::new(),
    }
}

pub(super) fn in_sync(w: &Wire, expected: &[Arc<Rule>]) -> bool {
    let got = w.subs[0].1.source_policy("sip:sbc.example.com");
    got.as_ref()
        .and_then(Ruleset::rules)
        .is_some_and(|r| r.iter().map(|x| &**x).eq(expected.iter().map(|x| &**x)))
}

#[test]
fn back_to_back_changes_arrive_and_stay_in_sync() {
    let mut w = wire_one(vec![], vec![]);
    let mut current = Vec::new();
    for k in 0..30u32 {
        let xml: String = (0..4)
            .map(|i| rule_xml(&format!("r{i}"), &format!("+4{i}"), 10 + (k + i) % 7))
            .collect();
        current = rules(&xml);
        w.notifier.set_policy(w.now, Some(current.clone()));
        w.run_until(w.now + S / 3);
    }
    w.run_until(w.now + 2 * S);
    assert!(in_sync(&w, &current));
    // The subscription is refreshed across an hour.
    w.run_until(3_600 * S);
    assert!(in_sync(&w, &current));
    assert_eq!(w.notifier.subscriptions(), 1);
}

#[test]
fn a_lost_notify_ends_the_subscription_and_the_subscriber_recovers() {
    // NOTIFY 2 is lost: the notifier's transaction times out, it ends the subscription; the
    // subscriber's refresh gets 481 and a new subscription brings the full state.
    let mut w = wire_one(vec![2], vec![]);
    w.notifier
        .set_policy(0, Some(rules(&rule_xml("a", "+1", 1))));
    w.run_until(2 * S);
    let latest = rules(&format!(
        "{}{}",
        rule_xml("a", "+1", 2),
        rule_xml("b", "+2", 2)
    ));
    w.notifier.set_policy(w.now, Some(latest.clone()));
    w.run_until(40 * S);
    assert_eq!(w.notifier.subscriptions(), 0);
    w.run_until(700 * S);
    assert_eq!(w.notifier.subscriptions(), 1);
    assert!(in_sync(&w, &latest));
}

#[test]
fn a_late_notify_from_an_ended_subscription_cannot_roll_the_policy_back() {
    // NOTIFY 2 (version 1) is delayed by ten minutes: the notifier gives up on it after 32 s,
    // the subscriber's refresh gets 481, a new subscription delivers the latest state, and
    // when the stale NOTIFY finally arrives it is refused (481) and changes nothing.
    let mut w = wire_one(vec![], vec![(2, 600 * S)]);
    w.notifier
        .set_policy(0, Some(rules(&rule_xml("a", "+1", 1))));
    w.run_until(2 * S);
    w.notifier.set_policy(
        w.now,
        Some(rules(&format!(
            "{}{}",
            rule_xml("a", "+1", 1),
            rule_xml("b", "+2", 1)
        ))),
    );
    w.run_until(4 * S);
    let latest = rules(&format!(
        "{}{}",
        rule_xml("a", "+1", 7),
        rule_xml("c", "+3", 7)
    ));
    w.notifier.set_policy(w.now, Some(latest.clone()));
    w.run_until(590 * S);
    assert!(in_sync(&w, &latest));
    w.run_until(700 * S);
    assert_eq!(w.late_answers, [481]);
    assert!(in_sync(&w, &latest));
}

#[test]
fn a_burst_after_a_quiet_period_gives_two_notifies_the_last_with_the_final_state() {
    let mut n = notifier();
    n.set_policy(0, Some(rules(&rule_xml("r", "+1", 1))));
    n.handle_subscribe(0, &sub_req("a", "sip:p1.upstream.example", None, None));
    let first = n.poll_transmit().expect("initial");
    answer(&mut n, 0, &first);
    let mut sent = Vec::new();
    for k in 0..100u32 {
        let t = 10 * S + u64::from(k) * S / 200;
        n.set_policy(t, Some(rules(&rule_xml("r", "+1", 2 + k))));
        while let Some(m) = n.poll_transmit() {
            answer(&mut n, t, &m);
            sent.push(m);
        }
        if let Some(due) = n.poll_timeout().filter(|&d| d <= t) {
            n.handle_timeout(due);
        }
    }
    n.handle_timeout(12 * S);
    while let Some(m) = n.poll_transmit() {
        sent.push(m);
    }
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(String::from_utf8_lossy(&sent[0].body).contains("<lc:rate>2</lc:rate>"));
    assert!(String::from_utf8_lossy(&sent[1].body).contains("<lc:rate>101</lc:rate>"));
    assert_eq!((version_of(&sent[0]).0, version_of(&sent[1]).0), (1, 2));
}

/// RFC 7200 §7: "this specification requires that a Trust Domain agrees on ... the
/// destinations to which calls may be redirected". With no allow-list the agreement is the
/// notifier's own domain (`sbc.example.com` and its subdomains); the operator's list
/// (`CompileConfig::redirect_allow`) adds to it. The engine rejects instead of redirecting, and
/// the subscriber reports each refused rule once.
#[test]
fn redirect_targets_are_checked_against_the_agreed_list() {
    let redirect = |id: &str, target: &str| {
        format!(
            "<rule id=\"{id}\"><actions><lc:accept alt-action=\"redirect\" alt-target=\"{target}\"><lc:rate>0</lc:rate></lc:accept></actions></rule>"
        )
    };
    let doc = format!(
        "{}{}{}",
        redirect("own", "sip:info@ivr.sbc.example.com"),
        redirect("listed", "sip:info@ivr.partner.example"),
        redirect("victim", "sip:victim@bank.example")
    );
    for (allow, refused) in [
        (None, vec!["listed", "victim"]),
        (Some(vec!["partner.example".to_owned()]), vec!["victim"]),
    ] {
        let e = Engine::new(EngineConfig::default().with_shards(1).with_compile(
            loadctl::compile::CompileConfig::default().with_redirect_allow(allow.clone()),
        ));
        let mut s = subscriber(&e);
        let sub = s.poll_transmit().expect("SUBSCRIBE");
        s.handle_notify(0, &notify(&sub, 1, "active", CT, body(0, "full", &doc)));
        let ev = events(&mut s);
        let reported: Vec<&SubscriberEvent> = ev
            .iter()
            .filter(|e| matches!(e, SubscriberEvent::RedirectOutsideAllowList { .. }))
            .collect();
        assert_eq!(
            reported,
            vec![&SubscriberEvent::RedirectOutsideAllowList {
                rules: refused.iter().map(|r| r.to_string()).collect()
            }],
            "allow-list {allow:?}"
        );
        let snap = e.snapshot();
        let flags: Vec<(String, bool)> = snap
            .policy()
            .rules()
            .iter()
            .map(|r| (r.id().to_string(), r.redirect_refused()))
            .collect();
        for (id, is_refused) in flags {
            assert_eq!(is_refused, refused.contains(&id.as_str()), "{id} {allow:?}");
        }
        // The same document again (a refresh): nothing new to report.
        s.handle_notify(0, &notify(&sub, 2, "active", CT, body(1, "full", &doc)));
        assert!(
            !events(&mut s)
                .iter()
                .any(|e| matches!(e, SubscriberEvent::RedirectOutsideAllowList { .. })),
            "reported twice"
        );
    }
}

#[test]
fn several_subscribers_feed_one_engine_as_separate_sources() {
    let e = engine();
    let mut subs: Vec<(Subscriber, EventRequest)> =
        ["sip:east.example.com", "sip:west.example.com"]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut c = SubscriberConfig::new(
                    uri(n),
                    uri("sip:proxy.upstream.example"),
                    &format!("c{i}"),
                    &format!("t{i}"),
                );
                // Scoping is an explicit option (RFC 7200 §5.3.3 MAY); the default is off.
                assert!(!c.scope_to_notifier);
                c.scope_to_notifier = true;
                let mut s = Subscriber::new(c, e.clone(), 0);
                let sub = s.poll_transmit().expect("SUBSCRIBE");
                (s, sub)
            })
            .collect();
    for (i, (s, sub)) in subs.iter_mut().enumerate() {
        let mut n = notify(
            sub,
            1,
            "active",
            CT,
            body(0, "full", &rule_xml(&format!("r{i}"), "+1", 0)),
        );
        n.from.uri = sub.request_uri.clone();
        assert_eq!(s.handle_notify(0, &n).status, 200);
    }
    // Each notifier's rules are scoped to it, as asked.
    let towards = |target: &str| {
        let mut shard = e.attach();
        let req = Request {
            method: "INVITE",
            identities: Identities {
                to: Some("<tel:+1555>"),
                target: Some(target),
                ..Identities::default()
            },
            transport: Transport::Tcp,
            initial: true,
            event: None,
            time: Some(Time {
                monotonic_ns: 0,
                unix_ns: 0,
            }),
            ..loadctl::runtime::Request::default()
        };
        shard.classify(&req).rule.map(|r| r.id().to_string())
    };
    assert_eq!(towards("sip:east.example.com").as_deref(), Some("r0"));
    assert_eq!(towards("sip:west.example.com").as_deref(), Some("r1"));
    // East terminates: only its rules go.
    let (s, sub) = &mut subs[0];
    let mut t = notify(sub, 2, "terminated;reason=rejected", CT, Vec::new());
    t.from.uri = sub.request_uri.clone();
    s.handle_notify(S, &t);
    assert_eq!(towards("sip:east.example.com"), None);
    assert_eq!(towards("sip:west.example.com").as_deref(), Some("r1"));
}
