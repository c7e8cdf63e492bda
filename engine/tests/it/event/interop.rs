//! What notifiers and subscribers of other implementations send and expect: bodyless NOTIFYs
//! (RFC 7200 §4.8), empty and partial documents, the version wrap, authorization, Contact and
//! Record-Route, termination reasons and Min-Expires.

use super::back_to_back::{in_sync, wire_one};
use super::*;

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
