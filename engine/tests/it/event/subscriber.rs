//! The subscriber alone: its responses to SUBSCRIBE outcomes and its checks of NOTIFYs.

use super::*;

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
