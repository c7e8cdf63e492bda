//! The notifier alone: what it refuses, how it paces and coalesces versions, and how its
//! subscriptions end.

use super::*;

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
