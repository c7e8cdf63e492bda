//! The load-control event package in simulated time: scripted exchanges for each rule of the
//! subscriber and the notifier, and both wired back to back through in-memory channels with
//! loss and reordering.

use std::sync::Arc;

use crate::common::NS;
use loadctl::compile::Identities;
use loadctl::event::notifier::{
    Authorization, Notifier, NotifierConfig, NotifierEvent, ShutdownReason,
};
use loadctl::event::subscriber::{
    IgnoreReason, PolicySink, StopReason, Subscriber, SubscriberConfig, SubscriberEvent,
};
use loadctl::event::*;
use loadctl::policy::{self, Limits, Rule, Ruleset, State, Uri};
use loadctl::runtime::{Engine, EngineConfig, PublishError, Request, Source, Time, Transport};

const S: u64 = 1_000_000_000;

fn uri(s: &str) -> Uri {
    Uri::new(s).expect("uri")
}

fn rule_xml(id: &str, prefix: &str, rate: u32) -> String {
    format!(
        "<rule id=\"{id}\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"{prefix}\"/></lc:to></lc:sip></lc:call-identity></conditions>\
         <actions><lc:accept><lc:rate>{rate}</lc:rate></lc:accept></actions></rule>"
    )
}

fn body(version: u32, state: &str, rules: &str) -> Vec<u8> {
    format!("<ruleset {NS} version=\"{version}\" state=\"{state}\">{rules}</ruleset>").into_bytes()
}

fn rules(xml: &str) -> Vec<Arc<Rule>> {
    let doc = body(0, "full", xml);
    policy::read(&doc, &Limits::default())
        .expect("valid")
        .ruleset
        .rules()
        .expect("full")
        .to_vec()
}

fn subscriber(engine: &Engine) -> Subscriber {
    let mut c = SubscriberConfig::new(
        uri("sip:sbc.example.com"),
        uri("sip:proxy.upstream.example"),
        "cid",
        "up",
    );
    c.scope_to_notifier = false;
    Subscriber::new(c, engine.clone(), 0)
}

fn engine() -> Engine {
    Engine::new(EngineConfig::default().with_shards(1))
}

fn events(s: &mut Subscriber) -> Vec<SubscriberEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

/// A NOTIFY inside `s`'s current subscription (the SUBSCRIBE `sub` it answers).
fn notify(
    sub: &EventRequest,
    cseq: u32,
    state: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> EventRequest {
    let mut r = EventRequest::new(
        Method::Notify,
        sub.from.uri.clone(),
        &sub.call_id,
        NameAddr {
            uri: uri("sip:sbc.example.com"),
            tag: Some("n1".into()),
        },
        sub.from.clone(),
        cseq,
    );
    r.event = Some("load-control".into());
    r.subscription_state = Some(state.into());
    r.content_type = content_type.map(str::to_owned);
    r.body = body;
    r.contact = Some(uri("sip:sbc.example.com"));
    r
}

fn ok(req: &EventRequest, expires: u32) -> Response {
    let mut r = Response::to(req, 200, Some("n1"));
    r.expires = Some(expires);
    r
}

fn classify_to(engine: &Engine, to: &str, unix_s: i128) -> Option<String> {
    let mut shard = engine.attach();
    let req = Request {
        method: "INVITE",
        identities: Identities {
            to: Some(to),
            ..Identities::default()
        },
        transport: Transport::Tcp,
        initial: true,
        event: None,
        time: Some(Time {
            monotonic_ns: 0,
            unix_ns: unix_s * 1_000_000_000,
        }),
        ..loadctl::runtime::Request::default()
    };
    shard.classify(&req).rule.map(|r| r.id().to_string())
}

const CT: Option<&str> = Some("application/load-control+xml");

// ------------------------------------------------------------------ Appendix D.2

#[test]
fn appendix_d2_flow() {
    let e = engine();
    let mut s = subscriber(&e);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    assert_eq!(sub.method, Method::Subscribe);
    assert_eq!(sub.event.as_deref(), Some("load-control"));
    assert_eq!(sub.accept.as_deref(), Some("application/load-control+xml"));
    assert_eq!(sub.expires, Some(3600));
    assert!(sub.body.is_empty());
    let mut notifier = Notifier::new(NotifierConfig::new(
        uri("sip:sbc.example.com"),
        "n",
        Authorization::Any,
    ));
    notifier.set_policy(0, Some(rules(&rule_xml("f3g44k1", "+1-212", 100))));
    let resp = notifier.handle_subscribe(0, &sub);
    assert_eq!((resp.status, resp.expires), (200, Some(3600)));
    s.handle_response(0, &resp);
    let n = notifier.poll_transmit().expect("NOTIFY");
    assert_eq!(n.event.as_deref(), Some("load-control"));
    assert_eq!(n.subscription_state.as_deref(), Some("active;expires=3600"));
    assert_eq!(
        n.content_type.as_deref(),
        Some("application/load-control+xml")
    );
    let doc = policy::read(&n.body, &Limits::default())
        .expect("valid body")
        .ruleset;
    assert_eq!((doc.version(), doc.state()), (0, State::Full));
    let r = s.handle_notify(0, &n);
    assert_eq!(r.status, 200);
    notifier.handle_response(0, &r);
    let ev = events(&mut s);
    assert!(
        ev.contains(&SubscriberEvent::Subscribed { expires: 3600 }),
        "{ev:?}"
    );
    assert!(
        ev.iter().any(|e| matches!(
            e,
            SubscriberEvent::PolicyApplied {
                version: 0,
                state: State::Full,
                ..
            }
        )),
        "{ev:?}"
    );
    assert_eq!(
        classify_to(&e, "<tel:+1-212-555-0000>", 0).as_deref(),
        Some("f3g44k1")
    );
}

// ------------------------------------------------------------------ subscriber: responses

#[test]
fn subscriber_stops_on_403_and_489() {
    for (status, why) in [(403, StopReason::Forbidden), (489, StopReason::BadEvent)] {
        let e = engine();
        let mut s = subscriber(&e);
        let sub = s.poll_transmit().expect("SUBSCRIBE");
        s.handle_response(0, &Response::to(&sub, status, Some("n1")));
        assert!(s.is_stopped());
        assert_eq!(events(&mut s), [SubscriberEvent::Stopped(why)]);
        assert_eq!(s.poll_timeout(), None);
    }
}

#[test]
fn subscriber_retries_423_with_min_expires() {
    let e = engine();
    let mut s = subscriber(&e);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    let mut r = Response::to(&sub, 423, Some("n1"));
    r.min_expires = Some(7200);
    s.handle_response(0, &r);
    let again = s.poll_transmit().expect("retried at once");
    assert_eq!(
        (again.expires, again.cseq, again.call_id.as_str()),
        (Some(7200), 2, sub.call_id.as_str())
    );
}

#[test]
fn subscriber_backs_off_and_honours_retry_after() {
    let e = engine();
    let mut s = subscriber(&e);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    let mut r = Response::to(&sub, 503, Some("n1"));
    r.retry_after = Some(30);
    s.handle_response(0, &r);
    assert_eq!(s.poll_timeout(), Some(30 * S));
    s.handle_timeout(30 * S);
    let second = s.poll_transmit().expect("retry");
    assert_ne!(second.call_id, sub.call_id, "a new subscription");
    // No answer at all: 32 s transaction timeout, then 1 s, 2 s, 4 s back-off.
    let mut t = 30 * S;
    let mut delays = Vec::new();
    for _ in 0..3 {
        let timeout = s.poll_timeout().expect("txn timer");
        assert_eq!(timeout, t + TRANSACTION_TIMEOUT.as_nanos() as u64);
        s.handle_timeout(timeout);
        let retry = s.poll_timeout().expect("retry timer");
        delays.push((retry - timeout) / S);
        s.handle_timeout(retry);
        assert!(s.poll_transmit().is_some());
        t = retry;
    }
    assert_eq!(delays, [1, 2, 4]);
}

#[test]
fn subscriber_refreshes_before_expiry_and_restarts_on_481() {
    let e = engine();
    let mut s = subscriber(&e);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    s.handle_response(0, &ok(&sub, 600));
    // Refresh at expiry − 60 s, inside the dialog.
    assert_eq!(s.poll_timeout(), Some(540 * S));
    s.handle_timeout(540 * S);
    let refresh = s.poll_transmit().expect("refresh");
    assert_eq!(
        (
            refresh.call_id.as_str(),
            refresh.to.tag.as_deref(),
            refresh.cseq
        ),
        (sub.call_id.as_str(), Some("n1"), 2)
    );
    s.handle_response(540 * S, &Response::to(&refresh, 481, None));
    let fresh = s.poll_transmit().expect("new subscription");
    assert_ne!(fresh.call_id, sub.call_id);
    assert_eq!(fresh.to.tag, None);
}

// ------------------------------------------------------------------ subscriber: NOTIFY

fn subscribed() -> (Engine, Subscriber, EventRequest) {
    let e = engine();
    let mut s = subscriber(&e);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    s.handle_response(0, &ok(&sub, 3600));
    events(&mut s);
    (e, s, sub)
}

/// A NOTIFY storm: 10,000 NOTIFYs in the same instant. Repeats of the version in force are
/// answered and change nothing (one publish); a run of new full versions is applied in order,
/// each one a publish, and the last one is in force.
#[test]
fn notify_storm_repeats_publish_once_and_new_versions_apply_in_order() {
    let (e, mut s, sub) = subscribed();
    let before = e.generation();
    let doc = body(4, "full", &rule_xml("a", "+1", 5));
    for cseq in 1..=10_000 {
        let r = s.handle_notify(0, &notify(&sub, cseq, "active", CT, doc.clone()));
        assert_eq!(r.status, 200, "NOTIFY {cseq}");
    }
    assert_eq!(
        e.generation(),
        before + 1,
        "repeats of one version published once"
    );
    for (i, cseq) in (10_001..10_101).enumerate() {
        let version = 5 + i as u32;
        let rate = 1 + i as u32;
        let r = s.handle_notify(
            0,
            &notify(
                &sub,
                cseq,
                "active",
                CT,
                body(version, "full", &rule_xml("a", "+1", rate)),
            ),
        );
        assert_eq!(r.status, 200);
    }
    assert_eq!(e.generation(), before + 101);
    assert_eq!(
        e.source_policy("sip:sbc.example.com").map(|r| r.version()),
        Some(104)
    );
}

#[test]
fn notify_checks_trust_dialog_and_package() {
    let (e, mut s, sub) = subscribed();
    let good = body(0, "full", &rule_xml("r", "+1", 5));
    let mut stranger = notify(&sub, 1, "active", CT, good.clone());
    stranger.from.uri = uri("sip:evil.example.net");
    assert_eq!(s.handle_notify(0, &stranger).status, 481);
    let mut outside = notify(&sub, 1, "active", CT, good.clone());
    outside.call_id = "other".into();
    assert_eq!(s.handle_notify(0, &outside).status, 481);
    let mut other_event = notify(&sub, 1, "active", CT, good.clone());
    other_event.event = Some("presence".into());
    assert_eq!(s.handle_notify(0, &other_event).status, 489);
    assert!(
        e.source_policy("sip:sbc.example.com").is_none(),
        "nothing applied"
    );
    // Forking: the first dialog-creating NOTIFY wins.
    assert_eq!(
        s.handle_notify(0, &notify(&sub, 1, "active", CT, good.clone()))
            .status,
        200
    );
    let mut forked = notify(&sub, 1, "active", CT, good);
    forked.from.tag = Some("n2".into());
    assert_eq!(s.handle_notify(0, &forked).status, 481);
    // A trusted domain other than the notifier's host is accepted.
    let mut c = SubscriberConfig::new(
        uri("sip:sbc.example.com"),
        uri("sip:up.example"),
        "c2",
        "t2",
    );
    c.trust = vec!["example.com".into()];
    let mut s2 = Subscriber::new(c, engine(), 0);
    let sub2 = s2.poll_transmit().expect("SUBSCRIBE");
    let mut sibling = notify(&sub2, 1, "active", CT, body(0, "full", ""));
    sibling.from.uri = uri("sip:sbc2.example.com");
    assert_eq!(s2.handle_notify(0, &sibling).status, 200);
}

#[test]
fn versions_repeats_gaps_invalid_and_unknown_bodies() {
    let (e, mut s, sub) = subscribed();
    let src = "sip:sbc.example.com";
    assert_eq!(
        s.handle_notify(
            0,
            &notify(
                &sub,
                1,
                "active",
                CT,
                body(4, "full", &rule_xml("a", "+1", 5))
            )
        )
        .status,
        200
    );
    assert_eq!(e.source_policy(src).map(|r| r.version()), Some(4));
    // A partial with the next version merges.
    s.handle_notify(
        0,
        &notify(
            &sub,
            2,
            "active",
            CT,
            body(5, "partial", &rule_xml("b", "+44", 5)),
        ),
    );
    assert_eq!(e.source_policy(src).map(|r| r.len()), Some(2));
    events(&mut s);
    // Repeated and older versions are ignored.
    s.handle_notify(0, &notify(&sub, 3, "active", CT, body(5, "full", "")));
    s.handle_notify(0, &notify(&sub, 4, "active", CT, body(3, "full", "")));
    assert_eq!(
        events(&mut s),
        [
            SubscriberEvent::DocumentIgnored {
                version: 5,
                reason: IgnoreReason::Stale { last: 5 }
            },
            SubscriberEvent::DocumentIgnored {
                version: 3,
                reason: IgnoreReason::Stale { last: 5 }
            },
        ]
    );
    // A gap: ignored, and a re-SUBSCRIBE asks for the full state.
    s.handle_notify(
        0,
        &notify(
            &sub,
            5,
            "active",
            CT,
            body(7, "partial", &rule_xml("c", "+33", 5)),
        ),
    );
    assert_eq!(
        events(&mut s),
        [SubscriberEvent::DocumentIgnored {
            version: 7,
            reason: IgnoreReason::Gap { expected: 6 }
        }]
    );
    let resub = s.poll_transmit().expect("re-SUBSCRIBE");
    assert_eq!(
        (resub.call_id.as_str(), resub.to.tag.as_deref()),
        (sub.call_id.as_str(), Some("n1"))
    );
    assert_eq!(e.source_policy(src).map(|r| r.len()), Some(2));
    // The notifier answers the re-SUBSCRIBE with its whole state under its current version
    // (8, past the gap): a full document needs no earlier version and applies.
    s.handle_response(0, &Response::to(&resub, 200, Some("n1")));
    s.handle_notify(
        0,
        &notify(
            &sub,
            6,
            "active",
            CT,
            body(8, "full", &rule_xml("c", "+33", 5)),
        ),
    );
    assert!(
        matches!(
            &events(&mut s)[..],
            [.., SubscriberEvent::PolicyApplied { version: 8, .. }]
        ),
        "a full document after a gap applies"
    );
    assert_eq!(e.source_policy(src).map(|r| r.version()), Some(8));
    // An invalid document is answered 200, reported, and changes nothing.
    let r = s.handle_notify(
        0,
        &notify(
            &sub,
            7,
            "active",
            CT,
            body(
                9,
                "full",
                "<rule id=\"x\"><actions><accept><rate>-1</rate></accept></actions></rule>",
            ),
        ),
    );
    assert_eq!(r.status, 200);
    // The report names the notifier and the version the document claims.
    assert!(
        matches!(&events(&mut s)[..], [SubscriberEvent::InvalidDocument { notifier, version: Some(9), error }]
            if error.contains("negative") && notifier == "sip:sbc.example.com")
    );
    assert_eq!(e.source_policy(src).map(|r| r.version()), Some(8));
    // Another body type is discarded.
    s.handle_notify(
        0,
        &notify(
            &sub,
            8,
            "active",
            Some("application/pidf+xml"),
            b"<presence/>".to_vec(),
        ),
    );
    assert_eq!(
        events(&mut s),
        [SubscriberEvent::UnknownBody {
            content_type: "application/pidf+xml".into()
        }]
    );
    // RFC 7200 §4.8: "A NOTIFY request without a body indicates that no load-filtering
    // policies need to be updated." The policy in force stays.
    s.handle_notify(0, &notify(&sub, 9, "active", CT, Vec::new()));
    assert_eq!(events(&mut s), [SubscriberEvent::NothingToUpdate]);
    assert_eq!(e.source_policy(src).map(|r| r.version()), Some(8));
    let stats = s.stats();
    assert_eq!(
        (stats.notifies, stats.bodyless, stats.refused, stats.ignored),
        (9, 1, 1, 3)
    );
}

#[test]
fn terminated_withdraws_the_notifiers_rules_and_reasons_decide_what_next() {
    for (reason, stops, new_dialog) in [
        ("deactivated", false, true),
        ("timeout", false, true),
        ("probation;retry-after=20", false, false),
        ("rejected", true, false),
        ("noresource", true, false),
    ] {
        let (e, mut s, sub) = subscribed();
        s.handle_notify(
            0,
            &notify(
                &sub,
                1,
                "active",
                CT,
                body(0, "full", &rule_xml("a", "+1", 5)),
            ),
        );
        assert!(e.source_policy("sip:sbc.example.com").is_some());
        s.handle_notify(
            S,
            &notify(
                &sub,
                2,
                &format!("terminated;reason={reason}"),
                CT,
                Vec::new(),
            ),
        );
        assert!(e.source_policy("sip:sbc.example.com").is_none(), "{reason}");
        assert!(classify_to(&e, "<tel:+1555>", 0).is_none());
        assert_eq!(s.is_stopped(), stops, "{reason}");
        assert_eq!(s.poll_transmit().is_some(), new_dialog, "{reason}");
        if reason.starts_with("probation") {
            assert_eq!(s.poll_timeout(), Some(21 * S));
        }
    }
}

/// What a subscriber asked of the sink it was given.
#[derive(Debug, Default)]
struct RecordingSink {
    limits: Limits,
    calls: std::sync::Mutex<Vec<String>>,
}

impl PolicySink for RecordingSink {
    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn apply(&self, source: &Source, document: Ruleset) -> Result<u64, PublishError> {
        let mut calls = self.calls.lock().expect("lock");
        calls.push(format!("apply {} v{}", source.name, document.version()));
        Ok(calls.len() as u64)
    }

    fn withdraw(&self, source: &Source) -> Result<u64, PublishError> {
        let mut calls = self.calls.lock().expect("lock");
        calls.push(format!("withdraw {}", source.name));
        Ok(calls.len() as u64)
    }

    fn redirect_refused(&self, _rule: &Rule, _source: &Source) -> bool {
        false
    }
}

/// The subscriber keeps no policy itself: it reads each document under its sink's limits,
/// hands what it accepts to the sink as the notifier's source, and withdraws that source when
/// the subscription is terminated (RFC 7200 §4.8: "subscribers MUST also terminate previously
/// received load-filtering policies from that notifier") — with any sink, not only an Engine.
#[test]
fn a_subscriber_puts_policies_into_the_sink_it_is_given() {
    let mut sink = RecordingSink::default();
    sink.limits.max_rules = 1;
    let config = SubscriberConfig::new(
        uri("sip:sbc.example.com"),
        uri("sip:proxy.upstream.example"),
        "cid",
        "up",
    );
    let mut s = Subscriber::new(config, sink, 0);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    s.handle_response(0, &ok(&sub, 3600));
    let one = body(0, "full", &rule_xml("a", "+1", 5));
    assert_eq!(
        s.handle_notify(0, &notify(&sub, 1, "active", CT, one))
            .status,
        200
    );
    let two = body(
        1,
        "full",
        &format!("{}{}", rule_xml("a", "+1", 5), rule_xml("b", "+2", 5)),
    );
    s.handle_notify(0, &notify(&sub, 2, "active", CT, two));
    assert!(
        std::iter::from_fn(|| s.poll_event()).any(|e| matches!(
            e,
            SubscriberEvent::InvalidDocument {
                version: Some(1),
                ..
            }
        )),
        "two rules are over the sink's limit of one"
    );
    s.handle_notify(
        S,
        &notify(&sub, 3, "terminated;reason=noresource", CT, Vec::new()),
    );
    let calls = s.sink().calls.lock().expect("lock").clone();
    assert_eq!(
        calls,
        [
            "apply sip:sbc.example.com v0",
            "withdraw sip:sbc.example.com"
        ]
    );
}

#[test]
fn future_rules_are_enforced_when_they_start_even_if_refreshes_failed() {
    let (e, mut s, sub) = subscribed();
    // Valid from one hour after "now" (wall clock 1,700,000,000 s).
    let starts = policy::Timestamp::from_unix(1_700_003_600, 0);
    let ends = policy::Timestamp::from_unix(1_700_010_800, 0);
    let rule = format!(
        "<rule id=\"later\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"+1\"/></lc:to></lc:sip></lc:call-identity>\
         <validity><from>{starts}</from><until>{ends}</until></validity></conditions><actions><lc:accept><lc:rate>1</lc:rate></lc:accept></actions></rule>"
    );
    s.handle_notify(0, &notify(&sub, 1, "active", CT, body(0, "full", &rule)));
    assert!(classify_to(&e, "<tel:+1555>", 1_700_000_000).is_none());
    // Every refresh from now on fails; the subscription lapses.
    let mut now = 0;
    while now < 7_200 * S {
        let Some(t) = s.poll_timeout() else { break };
        now = t;
        s.handle_timeout(now);
        while s.poll_transmit().is_some() {}
    }
    assert!(events(&mut s).contains(&SubscriberEvent::Lapsed));
    assert_eq!(
        classify_to(&e, "<tel:+1555>", 1_700_003_700).as_deref(),
        Some("later")
    );
}

// ------------------------------------------------------------------ notifier

fn sub_req(call_id: &str, from: &str, expires: Option<u32>, accept: Option<&str>) -> EventRequest {
    let mut r = EventRequest::new(
        Method::Subscribe,
        uri("sip:sbc.example.com"),
        call_id,
        NameAddr {
            uri: uri(from),
            tag: Some(format!("t-{call_id}")),
        },
        NameAddr {
            uri: uri("sip:sbc.example.com"),
            tag: None,
        },
        1,
    );
    r.event = Some("load-control".into());
    r.expires = expires;
    r.accept = accept.map(str::to_owned);
    r.contact = Some(uri(from));
    r
}

fn notifier() -> Notifier {
    Notifier::new(NotifierConfig::new(
        uri("sip:sbc.example.com"),
        "n",
        Authorization::Domains(vec!["upstream.example".into()]),
    ))
}

#[test]
fn notifier_refuses_what_it_must() {
    let mut n = notifier();
    assert_eq!(
        n.handle_subscribe(0, &sub_req("a", "sip:x@evil.example", None, None))
            .status,
        403
    );
    assert_eq!(
        n.handle_subscribe(
            0,
            &sub_req(
                "b",
                "sip:p1.upstream.example",
                None,
                Some("application/pidf+xml")
            )
        )
        .status,
        406
    );
    let mut wrong = sub_req("c", "sip:p1.upstream.example", None, None);
    wrong.event = Some("presence".into());
    assert_eq!(n.handle_subscribe(0, &wrong).status, 489);
    let r = n.handle_subscribe(0, &sub_req("d", "sip:p1.upstream.example", Some(10), None));
    assert_eq!((r.status, r.min_expires), (423, Some(60)));
    let r = n.handle_subscribe(
        0,
        &sub_req("e", "sip:p1.upstream.example", Some(86_400), Some("*/*")),
    );
    assert_eq!((r.status, r.expires), (200, Some(3600)));
    assert_eq!(n.subscriptions(), 1);
    // No policy: a NOTIFY without body, Content-Type still set.
    let first = n.poll_transmit().expect("NOTIFY");
    assert!(first.body.is_empty());
    assert_eq!(
        first.content_type.as_deref(),
        Some("application/load-control+xml")
    );
}

fn answer(n: &mut Notifier, now: u64, req: &EventRequest) {
    n.handle_response(now, &Response::to(req, 200, None));
}

fn version_of(req: &EventRequest) -> (u32, State, usize) {
    let rs = policy::read(&req.body, &Limits::default())
        .expect("valid")
        .ruleset;
    (rs.version(), rs.state(), rs.len())
}

#[test]
fn notifier_paces_coalesces_versions_and_sends_partials() {
    let mut n = notifier();
    let base: String = (0..5)
        .map(|i| rule_xml(&format!("r{i}"), &format!("+4{i}"), 10))
        .collect();
    n.set_policy(0, Some(rules(&base)));
    let sub = sub_req("a", "sip:p1.upstream.example", None, None);
    let r = n.handle_subscribe(0, &sub);
    let first = n.poll_transmit().expect("initial NOTIFY");
    assert_eq!(version_of(&first), (0, State::Full, 5));
    answer(&mut n, 0, &first);
    // 100 changes within one second: one NOTIFY at the 1 s mark carrying the final state.
    for k in 0..100u32 {
        let t = S / 2 + u64::from(k) * S / 250;
        let changed: String = (0..5)
            .map(|i| {
                rule_xml(
                    &format!("r{i}"),
                    &format!("+4{i}"),
                    if i == 2 { 100 + k } else { 10 },
                )
            })
            .collect();
        n.set_policy(t, Some(rules(&changed)));
        assert!(n.poll_transmit().is_none(), "paced");
    }
    assert_eq!(n.poll_timeout(), Some(S));
    n.handle_timeout(S);
    let second = n.poll_transmit().expect("coalesced NOTIFY");
    assert!(n.poll_transmit().is_none());
    // Only r2 changed: a partial document, version 1.
    assert_eq!(version_of(&second), (1, State::Partial, 1));
    assert!(String::from_utf8_lossy(&second.body).contains("<lc:rate>199</lc:rate>"));
    answer(&mut n, S, &second);
    // A refresh gets the full state, version 2, at once.
    let mut refresh = sub.clone();
    refresh.to.tag = r.to.tag.clone();
    refresh.cseq = 2;
    assert_eq!(n.handle_subscribe(S + 1, &refresh).status, 200);
    let third = n.poll_transmit().expect("NOTIFY after refresh");
    assert_eq!(version_of(&third), (2, State::Full, 5));
    answer(&mut n, S + 1, &third);
    // Replacing most rules sends a full document; so does removing one.
    n.set_policy(3 * S, Some(rules(&rule_xml("z", "+1", 1))));
    let fourth = n.poll_transmit().expect("NOTIFY");
    assert_eq!(version_of(&fourth), (3, State::Full, 1));
    answer(&mut n, 3 * S, &fourth);
    let zyx = format!(
        "{}{}{}",
        rule_xml("z", "+1", 1),
        rule_xml("y", "+2", 1),
        rule_xml("x", "+3", 1)
    );
    n.set_policy(5 * S, Some(rules(&zyx)));
    let fifth = n.poll_transmit().expect("NOTIFY");
    // Two new rules appended to one: a partial document.
    assert_eq!(version_of(&fifth), (4, State::Partial, 2));
    answer(&mut n, 5 * S, &fifth);
    n.set_policy(
        7 * S,
        Some(rules(&format!(
            "{}{}",
            rule_xml("y", "+2", 1),
            rule_xml("x", "+3", 1)
        ))),
    );
    // A rule disappeared: a full document (RFC 7200 §4.11 — a partial document only adds or
    // replaces rules by id, so a removal cannot be said with one to every subscriber).
    let del = n.poll_transmit().expect("NOTIFY");
    assert_eq!(version_of(&del), (5, State::Full, 2));
    assert!(!String::from_utf8_lossy(&del.body).contains("<rule id=\"z\">"));
    answer(&mut n, 7 * S, &del);
    // A new order cannot be expressed by a partial document: full.
    n.set_policy(
        9 * S,
        Some(rules(&format!(
            "{}{}",
            rule_xml("x", "+3", 1),
            rule_xml("y", "+2", 1)
        ))),
    );
    let reorder = n.poll_transmit().expect("NOTIFY");
    assert_eq!(version_of(&reorder), (6, State::Full, 2));
}

#[test]
fn notifier_expires_fails_and_shuts_down_subscriptions() {
    let mut n = notifier();
    n.handle_subscribe(0, &sub_req("a", "sip:p1.upstream.example", Some(120), None));
    n.handle_subscribe(
        0,
        &sub_req("b", "sip:p2.upstream.example", Some(3600), None),
    );
    n.handle_subscribe(
        0,
        &sub_req("c", "sip:p3.upstream.example", Some(3600), None),
    );
    let notifies: Vec<EventRequest> = std::iter::from_fn(|| n.poll_transmit()).collect();
    answer(&mut n, 0, &notifies[0]);
    answer(&mut n, 0, &notifies[1]);
    // c never answers: after 32 s its subscription ends.
    n.handle_timeout(33 * S);
    assert_eq!(n.subscriptions(), 2);
    // a expires at 120 s: terminated;reason=timeout.
    n.handle_timeout(120 * S);
    let last = n.poll_transmit().expect("final NOTIFY");
    assert_eq!(
        (last.call_id.as_str(), last.subscription_state.as_deref()),
        ("a", Some("terminated;reason=timeout"))
    );
    assert_eq!(n.subscriptions(), 1);
    n.shutdown(200 * S, ShutdownReason::Decommission);
    let last = n.poll_transmit().expect("final NOTIFY");
    assert_eq!(
        last.subscription_state.as_deref(),
        Some("terminated;reason=noresource")
    );
    assert_eq!(n.subscriptions(), 0);
    let ended: Vec<NotifierEvent> = std::iter::from_fn(|| n.poll_event())
        .filter(|e| matches!(e, NotifierEvent::Ended { .. }))
        .collect();
    assert_eq!(ended.len(), 3);
}

// ------------------------------------------------------------------ back to back

/// Moves messages between a notifier and one subscriber; `lose` lists NOTIFYs (by count) to
/// drop, `delay` NOTIFYs to deliver that much later (after later messages).
struct Wire {
    notifier: Notifier,
    subs: Vec<(Subscriber, Engine)>,
    now: u64,
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

    fn run_until(&mut self, t: u64) {
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

fn wire_one(lose: Vec<usize>, delay: Vec<(usize, u64)>) -> Wire {
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

fn in_sync(w: &Wire, expected: &[Arc<Rule>]) -> bool {
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

// ------------------------------------------------------------------ third-party notifiers

/// RFC 7200 §4.8: "A NOTIFY request without a body indicates that no load-filtering policies
/// need to be updated." A third-party notifier that refreshes with a bodyless NOTIFY leaves
/// the protection in force — also when it is the first NOTIFY of a new subscription.
#[test]
fn a_bodyless_notify_keeps_the_policy_in_force() {
    let (e, mut s, sub) = subscribed();
    s.handle_notify(
        0,
        &notify(
            &sub,
            1,
            "active",
            CT,
            body(3, "full", &rule_xml("a", "+1", 5)),
        ),
    );
    for (cseq, ct) in [(2, CT), (3, None), (4, Some("application/pidf+xml"))] {
        assert_eq!(
            s.handle_notify(
                S,
                &notify(&sub, cseq, "active;expires=3000", ct, Vec::new())
            )
            .status,
            200
        );
        assert_eq!(
            classify_to(&e, "<tel:+1555>", 0).as_deref(),
            Some("a"),
            "{ct:?}"
        );
    }
    assert!(
        events(&mut s)
            .iter()
            .all(|ev| !matches!(ev, SubscriberEvent::PolicyWithdrawn))
    );
    // A new subscription (the notifier lost ours: 481 to the refresh) whose first NOTIFY has
    // no body: still nothing to update.
    s.handle_timeout(3540 * S);
    let refresh = s.poll_transmit().expect("refresh");
    s.handle_response(3540 * S, &Response::to(&refresh, 481, None));
    let fresh = s.poll_transmit().expect("new subscription");
    assert_ne!(fresh.call_id, sub.call_id);
    s.handle_response(3540 * S, &ok(&fresh, 3600));
    s.handle_notify(3540 * S, &notify(&fresh, 1, "active", CT, Vec::new()));
    assert_eq!(classify_to(&e, "<tel:+1555>", 0).as_deref(), Some("a"));
    assert_eq!(s.stats().bodyless, 4);
    // `terminated` still withdraws (§4.8: "MUST also terminate previously received
    // load-filtering policies from that notifier").
    s.handle_notify(
        3541 * S,
        &notify(&fresh, 2, "terminated;reason=noresource", CT, Vec::new()),
    );
    assert_eq!(classify_to(&e, "<tel:+1555>", 0), None);
    assert_eq!(s.stats().withdrawn, 1);
}

/// The notifier never uses a bodyless NOTIFY to remove rules. The initial NOTIFY without a
/// policy has no body and keeps its Content-Type (§4.7: "The content-type header field of this
/// NOTIFY request MUST indicate the correct body format as if the body were present"); once a
/// subscriber holds a document, clearing the policy sends a full document with no rules.
#[test]
fn clearing_a_policy_sends_a_full_document_with_no_rules() {
    let mut n = notifier();
    let sub = sub_req("a", "sip:p1.upstream.example", None, None);
    let r = n.handle_subscribe(0, &sub);
    let first = n.poll_transmit().expect("initial NOTIFY");
    assert!(first.body.is_empty());
    assert_eq!(
        first.content_type.as_deref(),
        Some("application/load-control+xml")
    );
    answer(&mut n, 0, &first);
    // Clearing what was never sent sends nothing.
    n.set_policy(2 * S, None);
    assert!(n.poll_transmit().is_none());
    n.set_policy(4 * S, Some(rules(&rule_xml("a", "+1", 5))));
    let second = n.poll_transmit().expect("policy");
    assert_eq!(version_of(&second), (0, State::Full, 1));
    answer(&mut n, 4 * S, &second);
    n.set_policy(6 * S, None);
    let cleared = n.poll_transmit().expect("clearing NOTIFY");
    assert!(!cleared.body.is_empty(), "not a bodyless NOTIFY");
    assert_eq!(version_of(&cleared), (1, State::Full, 0));
    answer(&mut n, 6 * S, &cleared);
    // A refresh now gets the (empty) full state again, not a bodyless NOTIFY.
    let mut refresh = sub.clone();
    refresh.to.tag = r.to.tag.clone();
    refresh.cseq = 2;
    n.handle_subscribe(7 * S, &refresh);
    let again = n.poll_transmit().expect("NOTIFY after refresh");
    assert_eq!(version_of(&again), (2, State::Full, 0));
    // The subscriber side: the empty full document removes the rules.
    let (e, mut s, sub) = subscribed();
    s.handle_notify(0, &notify(&sub, 1, "active", CT, second.body.clone()));
    assert_eq!(classify_to(&e, "<tel:+1555>", 0).as_deref(), Some("a"));
    s.handle_notify(0, &notify(&sub, 2, "active", CT, cleared.body.clone()));
    assert_eq!(classify_to(&e, "<tel:+1555>", 0), None);
}

/// §4.11: partial documents only add or replace rules by id; the subscriber keeps accepting
/// the deletion form (a partial rule with no `<accept>`) from peers that send it.
#[test]
fn partials_only_add_or_replace_and_the_deletion_form_is_still_read() {
    let mut n = notifier();
    let two = format!("{}{}", rule_xml("a", "+1", 1), rule_xml("b", "+2", 1));
    let three = format!("{two}{}", rule_xml("c", "+3", 1));
    n.set_policy(0, Some(rules(&three)));
    n.handle_subscribe(0, &sub_req("a", "sip:p1.upstream.example", None, None));
    let first = n.poll_transmit().expect("NOTIFY");
    answer(&mut n, 0, &first);
    let changed = format!(
        "{}{}{}",
        rule_xml("a", "+1", 1),
        rule_xml("b", "+2", 9),
        rule_xml("c", "+3", 1)
    );
    n.set_policy(2 * S, Some(rules(&changed)));
    let put = n.poll_transmit().expect("NOTIFY");
    assert_eq!(version_of(&put), (1, State::Partial, 1));
    let doc = policy::read(&put.body, &Limits::default()).expect("valid");
    assert!(
        matches!(doc.ruleset.body(), policy::Body::Partial(ch) if ch.iter().all(|c| matches!(c, policy::Change::Put(_))))
    );
    answer(&mut n, 2 * S, &put);
    n.set_policy(4 * S, Some(rules(&two)));
    let removal = n.poll_transmit().expect("NOTIFY");
    assert_eq!(version_of(&removal), (2, State::Full, 2));
    // A peer's deletion form is applied.
    let (e, mut s, sub) = subscribed();
    s.handle_notify(0, &notify(&sub, 1, "active", CT, body(0, "full", &two)));
    let delete_a = "<rule id=\"a\"><actions/></rule>";
    s.handle_notify(
        0,
        &notify(&sub, 2, "active", CT, body(1, "partial", delete_a)),
    );
    let left: Vec<String> = e
        .source_policy("sip:sbc.example.com")
        .and_then(|r| {
            r.rules()
                .map(|r| r.iter().map(|x| x.id.to_string()).collect())
        })
        .unwrap_or_default();
    assert_eq!(left, ["b"]);
}

/// Version wrap. §4.11: "For each NOTIFY transaction in a subscription, a
/// version number that increases by exactly one MUST be included"; none follows 4294967295,
/// so loadctl's notifier ends the subscription with `terminated;reason=deactivated` (RFC 6665
/// §4.1.3: the subscriber "SHOULD retry immediately with a new subscription") and the new
/// subscription starts again. Back to back the subscriber follows and ends in sync.
#[test]
fn versions_end_the_dialog_before_they_wrap_and_the_subscriber_follows() {
    let mut w = wire_one(vec![], vec![]);
    w.notifier = {
        let mut c = NotifierConfig::new(
            uri("sip:sbc.example.com"),
            "n",
            Authorization::Domains(vec!["upstream.example".into()]),
        );
        c.first_version = u32::MAX - 1;
        Notifier::new(c)
    };
    let mut seen = Vec::new();
    for k in 0..4u32 {
        let last = rules(&rule_xml("a", "+1", 1 + k));
        w.notifier.set_policy(w.now, Some(last.clone()));
        w.run_until(w.now + 2 * S);
        while let Some(ev) = w.notifier.poll_event() {
            seen.push(ev);
        }
        assert!(in_sync(&w, &last), "change {k}");
    }
    assert!(
        seen.iter().any(|e| matches!(
            e,
            NotifierEvent::Ended {
                reason: "versions-exhausted",
                ..
            }
        )),
        "{seen:?}"
    );
    let sub_events = events(&mut w.subs[0].0);
    let applied: Vec<u32> = sub_events
        .iter()
        .filter_map(|e| match e {
            SubscriberEvent::PolicyApplied { version, .. } => Some(*version),
            _ => None,
        })
        .collect();
    // v(MAX-1), v(MAX), then a new dialog starting at MAX-1 again, and its next version.
    assert_eq!(
        applied,
        [u32::MAX - 1, u32::MAX, u32::MAX - 1, u32::MAX],
        "{sub_events:?}"
    );
    assert_eq!(w.notifier.subscriptions(), 1);
}

/// The subscriber reads versions in 32-bit serial arithmetic: a third-party notifier that
/// wraps inside the dialog with a full document (version 0 after 4294967295) is followed, a
/// partial document across the wrap is answered with a re-SUBSCRIBE, and an older version
/// after the wrap is still stale.
#[test]
fn a_third_party_full_document_after_the_wrap_applies() {
    let (e, mut s, sub) = subscribed();
    let src = "sip:sbc.example.com";
    s.handle_notify(
        0,
        &notify(
            &sub,
            1,
            "active",
            CT,
            body(u32::MAX, "full", &rule_xml("a", "+1", 1)),
        ),
    );
    events(&mut s);
    // A partial 0 after MAX: no base for it (the merge wants MAX + 1) → re-SUBSCRIBE.
    s.handle_notify(
        0,
        &notify(
            &sub,
            2,
            "active",
            CT,
            body(0, "partial", &rule_xml("b", "+2", 1)),
        ),
    );
    assert!(matches!(
        &events(&mut s)[..],
        [SubscriberEvent::DocumentIgnored {
            version: 0,
            reason: IgnoreReason::Gap { .. }
        }]
    ));
    let resub = s.poll_transmit().expect("re-SUBSCRIBE");
    assert_eq!(resub.call_id, sub.call_id);
    s.handle_response(0, &ok(&resub, 3600));
    // The full state after the wrap applies.
    s.handle_notify(
        0,
        &notify(
            &sub,
            3,
            "active",
            CT,
            body(0, "full", &rule_xml("c", "+3", 1)),
        ),
    );
    assert_eq!(e.source_policy(src).map(|r| r.version()), Some(0));
    assert_eq!(classify_to(&e, "<tel:+3555>", 0).as_deref(), Some("c"));
    // And continues: 1 partial; an old MAX - 1 is stale.
    s.handle_notify(
        0,
        &notify(
            &sub,
            4,
            "active",
            CT,
            body(1, "partial", &rule_xml("d", "+4", 1)),
        ),
    );
    assert_eq!(e.source_policy(src).map(|r| r.version()), Some(1));
    events(&mut s);
    s.handle_notify(
        0,
        &notify(&sub, 5, "active", CT, body(u32::MAX - 1, "full", "")),
    );
    assert_eq!(
        events(&mut s),
        [SubscriberEvent::DocumentIgnored {
            version: u32::MAX - 1,
            reason: IgnoreReason::Stale { last: 1 }
        }]
    );
}

/// §4.6: "If the identity of the subscriber sending the SUBSCRIBE request is not allowed to
/// receive load-filtering policies, the notifier MUST return a 403". Entries are hosts,
/// domains or SIP URIs (compared as RFC 3261 §19.1.4 says).
#[test]
fn authorization_by_host_domain_or_uri() {
    let auth = Authorization::Domains(vec![
        "p1.example.net".into(),
        "*.trusted.example".into(),
        "sip:edge@192.0.2.7:5070".into(),
    ]);
    for (from, allowed) in [
        ("sip:proxy@p1.example.net", true),
        ("sip:proxy@P1.Example.NET:5062", true),
        ("sip:x@p2.example.net", false),
        ("sip:x@a.b.trusted.example", true),
        ("sip:x@nottrusted.example", false),
        ("sip:edge@192.0.2.7:5070", true),
        ("sip:EDGE@192.0.2.7:5070", false),
        ("sip:edge@192.0.2.7:5071", false),
        ("sip:other@192.0.2.7:5070", false),
        ("tel:+15551234", false),
    ] {
        assert_eq!(auth.allows(&uri(from)), allowed, "{from}");
    }
    assert!(Authorization::Any.allows(&uri("sip:anyone@anywhere.example")));
    let mut n = Notifier::new(NotifierConfig::new(uri("sip:sbc.example.com"), "n", auth));
    assert_eq!(
        n.handle_subscribe(0, &sub_req("a", "sip:x@p2.example.net", None, None))
            .status,
        403
    );
    assert_eq!(
        n.handle_subscribe(0, &sub_req("b", "sip:edge@192.0.2.7:5070", None, None))
            .status,
        200
    );
}

/// RFC 3261 §12.2.1.1 on the notifier side: NOTIFYs go to the SUBSCRIBE's Contact (not its
/// From), a refresh with another Contact moves them (RFC 6665 §3.1: a target refresh request),
/// and the Record-Route of the initial SUBSCRIBE is their Route.
#[test]
fn notifies_go_to_the_subscribers_contact_and_follow_refreshes() {
    let mut n = notifier();
    let mut sub = sub_req("a", "sip:proxy@p1.upstream.example", None, None);
    sub.contact = Some(uri("sip:proxy@192.0.2.10:5070;transport=udp"));
    sub.record_route = vec![uri("sip:rr.upstream.example;lr")];
    let r = n.handle_subscribe(0, &sub);
    assert_eq!(
        r.record_route, sub.record_route,
        "§12.1.1: copied into the 2xx"
    );
    let first = n.poll_transmit().expect("NOTIFY");
    assert_eq!(
        first.request_uri.as_str(),
        "sip:proxy@192.0.2.10:5070;transport=udp"
    );
    assert_eq!(first.to.uri.as_str(), "sip:proxy@p1.upstream.example");
    assert_eq!(first.next_hop().as_str(), "sip:rr.upstream.example;lr");
    answer(&mut n, 0, &first);
    let mut refresh = sub.clone();
    refresh.to.tag = r.to.tag.clone();
    refresh.cseq = 2;
    refresh.contact = Some(uri("sip:proxy@192.0.2.11:5070"));
    refresh.record_route = vec![uri("sip:other.example;lr")];
    n.handle_subscribe(S, &refresh);
    let second = n.poll_transmit().expect("NOTIFY");
    assert_eq!(second.request_uri.as_str(), "sip:proxy@192.0.2.11:5070");
    let route: Vec<&str> = second.route.iter().map(Uri::as_str).collect();
    assert_eq!(
        route,
        ["sip:rr.upstream.example;lr"],
        "the route set stays (RFC 6665 §4.3)"
    );
}

/// The subscriber side of §12.2.1.1: the refresh after a version gap goes to the Contact the
/// 200 and the NOTIFYs carried, not to the URI subscribed to; a NOTIFY with another Contact
/// moves the target; a new subscription starts from the configured URI again.
#[test]
fn refreshes_go_to_the_notifiers_contact() {
    let e = engine();
    let mut s = subscriber(&e);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    let mut resp = ok(&sub, 3600);
    resp.contact = Some(uri("sip:notifier@192.0.2.20:5080"));
    resp.record_route = vec![uri("sip:p2.example;lr"), uri("sip:p1.example;lr")];
    s.handle_response(0, &resp);
    assert_eq!(
        s.remote_target().map(Uri::as_str),
        Some("sip:notifier@192.0.2.20:5080")
    );
    // §12.1.2: the UAC's route set is the 2xx's Record-Route reversed ...
    let set: Vec<&str> = s.route_set().iter().map(Uri::as_str).collect();
    assert_eq!(set, ["sip:p1.example;lr", "sip:p2.example;lr"]);
    // ... until the dialog-creating NOTIFY brings its own (RFC 6665 §4.4.1).
    let mut n1 = notify(
        &sub,
        1,
        "active",
        CT,
        body(0, "full", &rule_xml("a", "+1", 1)),
    );
    n1.contact = Some(uri("sip:notifier@192.0.2.20:5080"));
    n1.record_route = vec![uri("sip:p1.example;lr"), uri("sip:p9.example;lr")];
    s.handle_notify(0, &n1);
    let set: Vec<&str> = s.route_set().iter().map(Uri::as_str).collect();
    assert_eq!(set, ["sip:p1.example;lr", "sip:p9.example;lr"]);
    // A gap: the re-SUBSCRIBE goes to the remote target through the route set.
    let mut gap = notify(
        &sub,
        2,
        "active",
        CT,
        body(5, "partial", &rule_xml("b", "+2", 1)),
    );
    gap.contact = Some(uri("sip:notifier@192.0.2.21:5080"));
    gap.record_route = vec![uri("sip:ignored.example;lr")];
    s.handle_notify(0, &gap);
    let resub = s.poll_transmit().expect("re-SUBSCRIBE");
    assert_eq!(resub.request_uri.as_str(), "sip:notifier@192.0.2.21:5080");
    assert_eq!(resub.to.uri.as_str(), "sip:sbc.example.com");
    let route: Vec<&str> = resub.route.iter().map(Uri::as_str).collect();
    assert_eq!(route, ["sip:p1.example;lr", "sip:p9.example;lr"]);
    assert_eq!(resub.next_hop().as_str(), "sip:p1.example;lr");
    // The 2xx to the refresh moves the target again (§12.2.1.2).
    let mut r2 = ok(&resub, 3600);
    r2.contact = Some(uri("sip:notifier@192.0.2.22:5080"));
    s.handle_response(0, &r2);
    s.unsubscribe(S);
    let bye = s.poll_transmit().expect("unsubscribe");
    assert_eq!(bye.request_uri.as_str(), "sip:notifier@192.0.2.22:5080");
    assert_eq!(bye.expires, Some(0));
    // A new subscription: back to the configured URI, no route set.
    let (_, mut s2, sub2) = subscribed();
    let mut t = notify(&sub2, 1, "terminated;reason=deactivated", CT, Vec::new());
    t.contact = Some(uri("sip:notifier@192.0.2.30:5080"));
    s2.handle_notify(0, &t);
    let fresh = s2.poll_transmit().expect("new subscription");
    assert_eq!(fresh.request_uri.as_str(), "sip:sbc.example.com");
    assert!(fresh.route.is_empty());
}

/// A schema-valid document with reader warnings is applied and the warnings
/// reported; a refused document is counted and reported with the notifier and the version.
#[test]
fn warnings_are_reported_and_refusals_name_the_notifier_and_version() {
    let (e, mut s, sub) = subscribed();
    let warned = "<rule id=\"w\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"+1\"/></lc:to></lc:sip></lc:call-identity></conditions>\
         <actions><lc:accept><lc:rate>5</lc:rate></lc:accept></actions><transformations/></rule>";
    s.handle_notify(0, &notify(&sub, 1, "active", CT, body(3, "full", warned)));
    let ev = events(&mut s);
    assert!(
        matches!(&ev[..], [SubscriberEvent::DocumentWarnings { notifier, version: 3, warnings }, SubscriberEvent::PolicyApplied { version: 3, .. }]
            if notifier == "sip:sbc.example.com" && warnings.len() == 1 && warnings[0].contains("transformations")),
        "{ev:?}"
    );
    assert_eq!(classify_to(&e, "<tel:+1555>", 0).as_deref(), Some("w"));
    let engine_small = Engine::new(EngineConfig::default().with_shards(1).with_limits({
        let mut l = Limits::default();
        l.max_rules = 1;
        l
    }));
    let mut s2 = subscriber(&engine_small);
    let sub2 = s2.poll_transmit().expect("SUBSCRIBE");
    let two = format!("{}{}", rule_xml("a", "+1", 1), rule_xml("b", "+2", 1));
    s2.handle_notify(0, &notify(&sub2, 1, "active", CT, body(7, "full", &two)));
    let ev = events(&mut s2);
    assert!(
        ev.iter().any(|e| matches!(e, SubscriberEvent::InvalidDocument { notifier, version: Some(7), .. } | SubscriberEvent::ApplyFailed { notifier, version: 7, .. } if notifier == "sip:sbc.example.com")),
        "{ev:?}"
    );
    assert_eq!((s.stats().warned, s.stats().applied), (1, 1));
    assert_eq!(s2.stats().refused, 1);
}

/// RFC 6665 §4.1.3: "invariant" stops; "If no reason code or an unknown reason code is present,
/// the client MAY attempt to re-subscribe at any time (unless a "retry-after" parameter is
/// present, in which case the client SHOULD NOT attempt re-subscription until after the number
/// of seconds specified by the "retry-after" parameter)."
#[test]
fn terminated_invariant_unknown_and_missing_reasons() {
    for (state, stops, at_once, retry_at) in [
        (
            "terminated;reason=invariant;retry-after=60",
            true,
            false,
            None,
        ),
        ("terminated;retry-after=20", false, false, Some(21 * S)),
        (
            "terminated;reason=gone-fishing;retry-after=20",
            false,
            false,
            Some(21 * S),
        ),
        ("terminated;reason=gone-fishing", false, true, None),
        ("terminated", false, true, None),
    ] {
        let (e, mut s, sub) = subscribed();
        s.handle_notify(
            0,
            &notify(
                &sub,
                1,
                "active",
                CT,
                body(0, "full", &rule_xml("a", "+1", 5)),
            ),
        );
        s.handle_notify(S, &notify(&sub, 2, state, CT, Vec::new()));
        assert!(e.source_policy("sip:sbc.example.com").is_none(), "{state}");
        assert_eq!(s.is_stopped(), stops, "{state}");
        assert_eq!(s.poll_transmit().is_some(), at_once, "{state}");
        if let Some(at) = retry_at {
            assert_eq!(s.poll_timeout(), Some(at), "{state}");
            s.handle_timeout(at - 1);
            assert!(
                s.poll_transmit().is_none(),
                "{state}: not before retry-after"
            );
            s.handle_timeout(at);
            assert!(s.poll_transmit().is_some(), "{state}: after retry-after");
        }
    }
}

/// RFC 6665 §4.2.1.1: 423 "if and only if the expiration interval is greater than zero AND
/// smaller than one hour AND less than a notifier-configured minimum".
#[test]
fn no_423_for_an_hour_or_more() {
    let mut c = NotifierConfig::new(uri("sip:sbc.example.com"), "n", Authorization::Any);
    c.min_expires = 7200;
    c.max_expires = 7200;
    let mut n = Notifier::new(c);
    let r = n.handle_subscribe(
        0,
        &sub_req("a", "sip:p1.upstream.example", Some(3600), None),
    );
    assert_eq!((r.status, r.expires), (200, Some(3600)));
    let r = n.handle_subscribe(
        0,
        &sub_req("b", "sip:p1.upstream.example", Some(3599), None),
    );
    assert_eq!((r.status, r.min_expires), (423, Some(7200)));
}

/// RFC 3261 §12.1.2: the UAC's route set is the 2xx's Record-Route reversed; a dialog-creating
/// NOTIFY without Record-Route leaves it so (RFC 6665 §4.3: a proxy that record-routed the
/// SUBSCRIBE also record-routes the NOTIFYs, so a NOTIFY without one brings no other route).
#[test]
fn a_notify_without_record_route_keeps_the_2xx_route_set() {
    let e = engine();
    let mut s = subscriber(&e);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    let mut resp = ok(&sub, 3600);
    resp.contact = Some(uri("sip:notifier@192.0.2.21:5070"));
    resp.record_route = vec![
        uri("sip:p2.example.net;lr"),
        uri("sip:p1.example.net;lr;x=1"),
    ];
    s.handle_response(0, &resp);
    let mut n = notify(
        &sub,
        1,
        "active",
        CT,
        body(0, "full", &rule_xml("a", "+1", 1)),
    );
    n.contact = Some(uri("sip:notifier@192.0.2.21:5070"));
    s.handle_notify(0, &n);
    // A later NOTIFY's Record-Route cannot change it (RFC 6665 §4.3).
    let mut later = notify(&sub, 2, "active", CT, Vec::new());
    later.record_route = vec![uri("sip:other.example.net;lr")];
    later.contact = None;
    s.handle_notify(0, &later);
    s.unsubscribe(S);
    let bye = s.poll_transmit().expect("unsubscribe");
    let route: Vec<&str> = bye.route.iter().map(Uri::as_str).collect();
    assert_eq!(
        route,
        ["sip:p1.example.net;lr;x=1", "sip:p2.example.net;lr"]
    );
    assert_eq!(bye.request_uri.as_str(), "sip:notifier@192.0.2.21:5070");
}
