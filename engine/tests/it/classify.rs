//! Classification semantics (RFC 7200 §5): which requests are filtered, how conditions combine,
//! canonical comparison, first match wins, limiters and alt-actions.

use std::time::Duration;

use crate::common::ruleset;
use loadctl::compile::{CompileConfig, Identities};
use loadctl::policy::{Limits, Ruleset, read};
use loadctl::runtime::*;

/// A shard of a one-shard engine enforcing `rs`.
fn shard_for(rs: Ruleset, config: EngineConfig) -> Shard {
    Engine::from_ruleset(rs, config.with_shards(1))
        .expect("publishes")
        .attach()
}

fn shard(rules: &str) -> Shard {
    shard_for(ruleset(rules), EngineConfig::default())
}

/// Settings that trust the Resource-Priority markings of peers in 192.0.2.0/24.
fn trusting_192_0_2() -> EngineConfig {
    EngineConfig::default().with_exemptions({
        let mut e = Exemptions::default();
        e.priority_peers = vec![Network::parse("192.0.2.0/24").expect("test input")];
        e
    })
}

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().expect("test input")
}

/// A rule with the given conditions and `<accept>` body.
fn rule(id: &str, conditions: &str, accept: &str) -> String {
    format!(
        "<rule id=\"{id}\"><conditions>{conditions}</conditions><actions>{accept}</actions></rule>"
    )
}

fn ci(fields: &str) -> String {
    format!("<lc:call-identity><lc:sip>{fields}</lc:sip></lc:call-identity>")
}

const REJECT_ALL: &str = "<lc:accept><lc:rate>0</lc:rate></lc:accept>";
const ACCEPT_ALL: &str = "<lc:accept><lc:percent>100</lc:percent></lc:accept>";

fn invite<'a>(from: &'a str, to: &'a str) -> Request<'a> {
    Request {
        method: "INVITE",
        identities: Identities {
            from: Some(from),
            to: Some(to),
            request_uri: Some(to_uri(to)),
            ..Identities::default()
        },
        transport: Transport::Udp,
        initial: true,
        event: None,
        time: Some(Time {
            monotonic_ns: 1_000_000_000,
            unix_ns: 1_700_000_000_000_000_000,
        }),
        ..Request::default()
    }
}

/// The Request-URI for a To value (the URI inside the brackets).
fn to_uri(to: &str) -> &str {
    loadctl::uri::header_uris(to)
        .next()
        .and_then(Result::ok)
        .unwrap_or(to)
}

/// Matched rule id (or "-") for a request.
fn matched(s: &mut Shard, r: &Request<'_>) -> String {
    s.classify(r)
        .rule
        .map_or("-".into(), |r| r.id().to_string())
}

// ------------------------------------------------------------------ which requests

/// RFC 7200 §5.1 filters initial requests; a request built from `Request::default()` with a
/// method and a Request-URI is one, so a rule refusing everything refuses it.
#[test]
fn a_request_from_default_is_initial_and_filtered() {
    let mut s = shard(&rule("all", "", REJECT_ALL));
    let r = Request {
        method: "INVITE",
        identities: Identities {
            request_uri: Some("sip:b@y.example"),
            ..Identities::default()
        },
        ..Request::default()
    };
    assert!(r.initial);
    let d = s.classify(&r);
    assert_eq!(
        (d.verdict, d.exempt, d.rule.map(|r| r.id().to_string())),
        (Verdict::Reject, None, Some("all".to_string()))
    );
}

#[test]
fn only_initial_requests_are_filtered() {
    let mut s = shard(&rule("all", "", REJECT_ALL));
    let base = invite("<sip:a@x.example>", "<sip:b@y.example>");
    for method in ["ACK", "BYE", "CANCEL"] {
        let d = s.classify(&Request { method, ..base });
        assert_eq!(
            (d.verdict, d.exempt, d.rule.is_none()),
            (Verdict::Accept, Some(ExemptReason::NotFiltered), true),
            "{method}"
        );
    }
    // A To tag is something any sender writes: it makes no dialog by itself. A dialog the
    // caller keeps does (RFC 7200 §4.8: "requests associated with existing sessions").
    let tagged = Request {
        initial: false,
        ..base
    };
    assert_eq!(
        (s.classify(&tagged).verdict, s.classify(&tagged).exempt),
        (Verdict::Reject, None)
    );
    let known = Request {
        known_dialog: true,
        ..tagged
    };
    assert_eq!(s.classify(&known).exempt, Some(ExemptReason::NotFiltered));
    // An operator whose callers keep no dialogs and whose peers it trusts can say a To tag is
    // enough.
    let mut trusting = shard_for(
        ruleset(&rule("all", "", REJECT_ALL)),
        EngineConfig::default().with_exemptions({
            let mut e = Exemptions::default();
            e.to_tag_is_dialog = true;
            e
        }),
    );
    assert_eq!(
        trusting.classify(&tagged).exempt,
        Some(ExemptReason::NotFiltered)
    );
    assert_eq!(trusting.classify(&base).exempt, None);
    for event in ["load-control", "load-control;id=7", " Load-Control "] {
        let d = s.classify(&Request {
            method: "SUBSCRIBE",
            event: Some(event),
            ..base
        });
        assert_eq!(d.exempt, Some(ExemptReason::NotFiltered), "{event}");
    }
    // A SUBSCRIBE for another package is filtered.
    let d = s.classify(&Request {
        method: "SUBSCRIBE",
        event: Some("presence"),
        ..base
    });
    assert_eq!((d.verdict, d.exempt), (Verdict::Reject, None));
    assert_eq!(s.exempt_count(), 7);
}

#[test]
fn rule_without_method_covers_the_default_set_only() {
    let mut s = shard(&rule("all", "", REJECT_ALL));
    let base = invite("<sip:a@x.example>", "<sip:b@y.example>");
    for method in [
        "INVITE",
        "MESSAGE",
        "REGISTER",
        "SUBSCRIBE",
        "OPTIONS",
        "PUBLISH",
    ] {
        assert_eq!(
            s.classify(&Request { method, ..base }).verdict,
            Verdict::Reject,
            "{method}"
        );
    }
    for method in ["NOTIFY", "INFO", "REFER", "UPDATE", "PRACK", "invite"] {
        let d = s.classify(&Request { method, ..base });
        assert_eq!(
            (d.verdict, d.rule.is_none()),
            (Verdict::Accept, true),
            "{method}"
        );
    }
    // An explicit method is exactly that method.
    let mut s = shard(&rule("notify", "<method>NOTIFY</method>", REJECT_ALL));
    assert_eq!(
        s.classify(&Request {
            method: "NOTIFY",
            ..base
        })
        .verdict,
        Verdict::Reject
    );
    assert_eq!(
        s.classify(&Request {
            method: "INVITE",
            ..base
        })
        .verdict,
        Verdict::Accept
    );
}

/// The same for rules found through the index (a call-identity to anchor on): their entries
/// carry the method test, and must give the default set for a rule without
/// `<method>`, exactly one method for a well-known one, and the full check for an extension.
#[test]
fn indexed_rules_test_methods_like_scanned_ones() {
    let to = ci("<lc:to><many domain=\"y.example\"/></lc:to>");
    let mut s = shard(&format!(
        "{}{}{}",
        rule("default", &to, REJECT_ALL),
        rule(
            "notify",
            &format!("{to}<method>NOTIFY</method>"),
            REJECT_ALL
        ),
        rule("foo", &format!("{to}<method>FOO</method>"), REJECT_ALL),
    ));
    let base = invite("<sip:a@x.example>", "<sip:b@y.example>");
    for (method, want) in [
        ("INVITE", "default"),
        ("MESSAGE", "default"),
        ("REGISTER", "default"),
        ("SUBSCRIBE", "default"),
        ("OPTIONS", "default"),
        ("PUBLISH", "default"),
        ("NOTIFY", "notify"),
        ("FOO", "foo"),
        ("INFO", "-"),
        ("REFER", "-"),
        ("UPDATE", "-"),
        ("PRACK", "-"),
        ("invite", "-"),
        ("foo", "-"),
    ] {
        assert_eq!(
            matched(&mut s, &Request { method, ..base }),
            want,
            "{method}"
        );
    }
}

// ------------------------------------------------------------------ combining conditions

#[test]
fn sip_blocks_or_fields_and_identities_or_excepts_subtract() {
    let conditions = "<lc:call-identity>\
        <lc:sip><lc:from><many domain=\"a.example\"><except id=\"sip:boss@a.example\"/></many></lc:from>\
                <lc:to><one id=\"sip:hot@line.example\"/><many-tel prefix=\"+1-900\"/></lc:to></lc:sip>\
        <lc:sip><lc:p-asserted-identity><many domain=\"b.example\"/></lc:p-asserted-identity></lc:sip>\
        </lc:call-identity>";
    let mut s = shard(&rule("r", conditions, REJECT_ALL));
    let m = |s: &mut Shard, from: &str, to: &str, pai: Option<&str>| {
        let mut r = invite(from, to);
        r.identities.p_asserted_identity = pai.into();
        matched(s, &r)
    };
    // First block: from a.example AND (to hot line OR to +1900…).
    assert_eq!(
        m(&mut s, "<sip:x@a.example>", "<sip:hot@line.example>", None),
        "r"
    );
    assert_eq!(
        m(&mut s, "<sip:x@a.example>", "<tel:+1-900-555-0000>", None),
        "r"
    );
    assert_eq!(
        m(&mut s, "<sip:x@a.example>", "<sip:cold@line.example>", None),
        "-"
    );
    assert_eq!(
        m(&mut s, "<sip:x@c.example>", "<sip:hot@line.example>", None),
        "-"
    );
    // The except subtracts from the first block…
    assert_eq!(
        m(
            &mut s,
            "<sip:boss@a.example>",
            "<sip:hot@line.example>",
            None
        ),
        "-"
    );
    // …but the second block ORs in.
    assert_eq!(
        m(
            &mut s,
            "<sip:boss@a.example>",
            "<sip:cold@line.example>",
            Some("<sip:z@b.example>")
        ),
        "r"
    );
    // Two P-Asserted-Identity values: either may match.
    assert_eq!(
        m(
            &mut s,
            "<sip:q@q>",
            "<sip:q@q>",
            Some("<tel:+4420>, <sip:z@b.example>")
        ),
        "r"
    );
    assert_eq!(m(&mut s, "<sip:q@q>", "<sip:q@q>", None), "-");
}

#[test]
fn first_match_wins_and_later_limiters_are_untouched() {
    // RFC 7200 Appendix D.1 example 3.
    let doc = include_str!("../data/rfc7200-example3.xml");
    let rs = read(doc.as_bytes(), &Limits::default())
        .expect("valid")
        .ruleset;
    let mut s = shard_for(rs, EngineConfig::default());
    let d = s.classify(&invite(
        "\"Alice\" <sip:alice@example.com>;tag=1",
        "<sip:bob@elsewhere.example>",
    ));
    assert_eq!(
        (d.verdict, d.rule.map(|r| r.id().as_str())),
        (Verdict::Reject, Some("f3g44k3"))
    );
    assert_eq!(s.rule_stats(1).expect("rule 2").matched, 0);
    // Order decides even when the later rule is "more specific".
    let mut s = shard(&format!(
        "{}{}",
        rule(
            "broad",
            &ci("<lc:to><many-tel prefix=\"+1\"/></lc:to>"),
            ACCEPT_ALL
        ),
        rule(
            "narrow",
            &ci("<lc:to><many-tel prefix=\"+1-212\"/></lc:to>"),
            REJECT_ALL
        )
    ));
    assert_eq!(
        matched(&mut s, &invite("<sip:a@b>", "<tel:+12125550000>")),
        "broad"
    );
    let mut s = shard(&format!(
        "{}{}",
        rule(
            "narrow",
            &ci("<lc:to><many-tel prefix=\"+1-212\"/></lc:to>"),
            REJECT_ALL
        ),
        rule(
            "broad",
            &ci("<lc:to><many-tel prefix=\"+1\"/></lc:to>"),
            ACCEPT_ALL
        )
    ));
    assert_eq!(
        matched(&mut s, &invite("<sip:a@b>", "<tel:+12125550000>")),
        "narrow"
    );
    assert_eq!(
        matched(&mut s, &invite("<sip:a@b>", "<tel:+13125550000>")),
        "broad"
    );
}

// ------------------------------------------------------------------ canonical comparison

#[test]
fn one_compares_canonical_uris() {
    let mut s = shard(&rule(
        "r",
        &ci("<lc:from><one id=\"sip:alice@example.com\"/></lc:from>"),
        REJECT_ALL,
    ));
    let hit = |s: &mut Shard, from: &str| matched(s, &invite(from, "<sip:b@y>")) == "r";
    // Display names, tags, header params and brackets are stripped; host case-insensitive.
    assert!(hit(
        &mut s,
        "\"Alice\" <sip:alice@Example.COM;newparam=5>;tag=9"
    ));
    assert!(hit(&mut s, "sip:alice@example.com;tag=9"));
    assert!(hit(&mut s, "<SIP:alice@EXAMPLE.com>"));
    assert!(hit(&mut s, "<sip:%61lice@example.com>"));
    // User is case-sensitive; a written port is not an omitted one; sips is not sip.
    assert!(!hit(&mut s, "<sip:Alice@example.com>"));
    assert!(!hit(&mut s, "<sip:alice@example.com:5060>"));
    assert!(!hit(&mut s, "<sips:alice@example.com>"));
    // user / ttl / method / maddr / transport present in only one URI never match (RFC 3261
    // §19.1.4: "sip:bob@biloxi.com" and "sip:bob@biloxi.com;transport=udp" are "not
    // equivalent").
    assert!(!hit(&mut s, "<sip:alice@example.com;maddr=10.0.0.1>"));
    assert!(!hit(&mut s, "<sip:alice@example.com;transport=tcp>"));
    assert!(!hit(&mut s, "<sip:alice@example.com;user=ip>"));
    // Malformed or absent values match nothing.
    assert!(!hit(&mut s, "<sip:alice@example.com"));
    assert!(!hit(&mut s, ""));
}

#[test]
fn tel_numbers_and_user_phone() {
    let mut s = shard(&format!(
        "{}{}{}",
        rule(
            "one-tel",
            &ci("<lc:to><one id=\"tel:+1-212-555-1234\"/></lc:to>"),
            REJECT_ALL
        ),
        rule(
            "prefix",
            &ci(
                "<lc:to><many-tel prefix=\"+44-20\"><except-tel prefix=\"+44-20-7946\"/><except-tel id=\"tel:+442012345678\"/></many-tel></lc:to>"
            ),
            REJECT_ALL
        ),
        rule(
            "local",
            &ci("<lc:to><many-tel prefix=\"example.com\"/><many-tel prefix=\"+33-1\"/></lc:to>"),
            REJECT_ALL
        ),
    ));
    let m = |s: &mut Shard, to: &str| matched(s, &invite("<sip:a@b>", to));
    // Visual separators are ignored on both sides.
    assert_eq!(m(&mut s, "<tel:+12125551234>"), "one-tel");
    assert_eq!(m(&mut s, "<tel:+1(212)555.1234>"), "one-tel");
    // A sip URI with user=phone is its number, whatever the host.
    assert_eq!(
        m(&mut s, "<sip:+1-212-555-1234@gw.example;user=phone>"),
        "one-tel"
    );
    // Without user=phone, a global number is read as one by default (RFC 3261 §19.1.1 MAY;
    // `sip_user_numbers.rs` covers every setting).
    assert_eq!(m(&mut s, "<sip:+12125551234@gw.example>"), "one-tel");
    // Prefixes with excepts.
    assert_eq!(m(&mut s, "<tel:+44-20-1111-2222>"), "prefix");
    assert_eq!(m(&mut s, "<sip:+442011112222@gw;user=phone>"), "prefix");
    assert_eq!(m(&mut s, "<tel:+44-20-7946-0000>"), "-");
    assert_eq!(m(&mut s, "<tel:+442012345678>"), "-");
    assert_eq!(m(&mut s, "<tel:+4421>"), "-");
    // Local numbers: the phone-context equals the prefix.
    assert_eq!(m(&mut s, "<tel:7042;phone-context=Example.COM>"), "local");
    assert_eq!(m(&mut s, "<tel:7042;phone-context=+33-1>"), "local");
    assert_eq!(
        m(
            &mut s,
            "<sip:7042;phone-context=example.com@pbx;user=phone>"
        ),
        "local"
    );
    assert_eq!(m(&mut s, "<tel:7042;phone-context=other.example>"), "-");
    // A global number does not match a phone-context prefix by its digits alone.
    assert_eq!(m(&mut s, "<tel:+3311234>"), "local");
    assert_eq!(m(&mut s, "<tel:+3321234>"), "-");
}

#[test]
fn many_domain_and_many_anyone() {
    let mut s = shard(&format!(
        "{}{}",
        rule(
            "dom",
            &ci("<lc:request-uri><many domain=\"Shop.Example\"/></lc:request-uri>"),
            REJECT_ALL
        ),
        rule(
            "any-pai",
            &ci("<lc:p-asserted-identity><many/></lc:p-asserted-identity>"),
            REJECT_ALL
        ),
    ));
    let mut r = invite("<sip:a@b>", "<sip:tickets@shop.example>");
    assert_eq!(matched(&mut s, &r), "dom");
    r.identities.request_uri = Some("sip:tickets@SHOP.example;transport=tcp");
    assert_eq!(matched(&mut s, &r), "dom");
    r.identities.request_uri = Some("sip:tickets@sub.shop.example");
    assert_eq!(matched(&mut s, &r), "-");
    // <many/> matches any identity with a domain part, but not an absent header, and not a
    // 'tel' URI: RFC 7200 §5.3.1 groups those with <many-tel> ("The 'domain' attribute works
    // well for SIP URIs. A URI identifying a SIP user, however, can also be a 'tel' URI.
    // Therefore, a similar way to match a group of 'tel' URIs is needed."), and its example
    // ORs <many><except domain=…/></many> with <many-tel><except-tel prefix=…/></many-tel> to
    // mean "not calling from a "+1-212" prefix or a SIP From URI domain of …".
    assert_eq!(matched(&mut s, &r), "-");
    r.identities.p_asserted_identity = "<sip:alice@a.example>".into();
    assert_eq!(matched(&mut s, &r), "any-pai");
    r.identities.p_asserted_identity = "<tel:+15551234>".into();
    assert_eq!(matched(&mut s, &r), "-");
}

#[test]
fn target_sip_entity_scopes_a_rule() {
    let mut s = shard(&rule(
        "t",
        "<lc:target-sip-entity>sip:sbc1.example.com</lc:target-sip-entity>",
        REJECT_ALL,
    ));
    let mut r = invite("<sip:a@b>", "<sip:c@d>");
    assert_eq!(matched(&mut s, &r), "-");
    r.identities.target = Some("sip:SBC1.example.com;transport=udp");
    assert_eq!(matched(&mut s, &r), "t");
    // The target is an entity (RFC 7200 §5.3.3 "the next-hop SIP entity"): the transport to
    // it does not count, other strict parameters (RFC 3261 §19.1.4) do.
    r.identities.target = Some("sip:sbc1.example.com;maddr=192.0.2.1");
    assert_eq!(matched(&mut s, &r), "-");
    r.identities.target = Some("<sip:sbc1.example.com>");
    assert_eq!(matched(&mut s, &r), "t");
    r.identities.target = Some("sip:sbc2.example.com");
    assert_eq!(matched(&mut s, &r), "-");
}

#[test]
fn validity_uses_the_injected_wall_clock() {
    // RFC example 1: 2008-05-31 12:00–15:00 at -05:00 (17:00–20:00Z).
    let rs = read(
        include_bytes!("../data/rfc7200-example1.xml"),
        &Limits::default(),
    )
    .expect("valid")
    .ruleset;
    let mut s = shard_for(rs, EngineConfig::default());
    let start = 1_212_253_200i128 * 1_000_000_000;
    let mut r = invite("<sip:a@b>", "\"Hotline\" <sip:alice@hotline.example.com>");
    for (offset_s, inside) in [
        (-1i128, false),
        (0, true),
        (3 * 3600 - 1, true),
        (3 * 3600, false),
    ] {
        let t = r.time.as_mut().expect("timed");
        t.unix_ns = start + offset_s * 1_000_000_000;
        t.monotonic_ns += 1_000_000_000;
        assert_eq!(s.classify(&r).rule.is_some(), inside, "offset {offset_s}s");
    }
}

#[test]
fn unsupported_condition_never_matches() {
    let mut s = shard(&format!(
        "{}{}",
        rule("geo", "<g:area xmlns:g=\"urn:example:geo\"/>", REJECT_ALL),
        rule("next", "", ACCEPT_ALL)
    ));
    assert_eq!(matched(&mut s, &invite("<sip:a@b>", "<sip:c@d>")), "next");
}

// ------------------------------------------------------------------ actions

#[test]
fn drop_over_udp_is_reject_and_redirect_carries_targets() {
    let mut s = shard(&format!(
        "{}{}",
        rule(
            "drop",
            &ci("<lc:to><many domain=\"d.example\"/></lc:to>"),
            "<lc:accept alt-action=\"drop\"><lc:rate>0</lc:rate></lc:accept>"
        ),
        rule(
            "redir",
            &ci("<lc:to><many domain=\"r.example\"/></lc:to>"),
            "<lc:accept alt-action=\"redirect\" alt-target=\"sip:ivr@info.example sip:backup@info.example\"><lc:rate>0</lc:rate></lc:accept>"
        ),
    ));
    let udp = invite("<sip:a@b>", "<sip:x@d.example>");
    let d = s.classify(&udp);
    assert_eq!((d.verdict, d.status()), (Verdict::Reject, Some(503)));
    let d = s.classify(&Request {
        transport: Transport::Tcp,
        ..udp
    });
    assert_eq!((d.verdict, d.status()), (Verdict::Drop, None));
    for t in [
        Transport::Tls,
        Transport::Sctp,
        Transport::Ws,
        Transport::Wss,
    ] {
        assert_eq!(
            s.classify(&Request {
                transport: t,
                ..udp
            })
            .verdict,
            Verdict::Drop
        );
    }
    let d = s.classify(&invite("<sip:a@b>", "<sip:x@r.example>"));
    assert_eq!((d.verdict, d.status()), (Verdict::Redirect, Some(302)));
    let targets: Vec<&str> = d.targets().iter().map(|t| t.as_str()).collect();
    assert_eq!(targets, ["sip:ivr@info.example", "sip:backup@info.example"]);
    let stats = s.rule_stats(0).expect("drop");
    assert_eq!((stats.matched, stats.rejected, stats.dropped), (6, 1, 5));
}

/// A shard over `rules` published by the notifier `notifier` (not a local, trusted policy).
fn notifier_shard(notifier: &str, rules: &str, compile: CompileConfig) -> Shard {
    let e = Engine::new(EngineConfig::default().with_shards(1).with_compile(compile));
    let source = Source::notifier(loadctl::policy::Uri::new(notifier).expect("uri"));
    e.publish(&source, ruleset(rules)).expect("publishes");
    e.attach()
}

/// RFC 7200 §7: "this specification requires that a Trust Domain agrees on ... the
/// destinations to which calls may be redirected, as in Section 3.4" (§3.4: "For example, the
/// URI might have to match a given set of domains"). A notifier's redirect outside its own
/// domain and the operator's allow-list is answered as a reject and counted.
#[test]
fn redirect_outside_the_allow_list_becomes_reject_and_is_counted() {
    let rules = format!(
        "{}{}",
        rule(
            "ok",
            &ci("<lc:to><many domain=\"a.example\"/></lc:to>"),
            "<lc:accept alt-action=\"redirect\" alt-target=\"sip:x@ivr.trusted.example\"><lc:rate>0</lc:rate></lc:accept>"
        ),
        rule(
            "evil",
            &ci("<lc:to><many domain=\"b.example\"/></lc:to>"),
            "<lc:accept alt-action=\"redirect\" alt-target=\"sip:x@ivr.trusted.example sip:victim@target.example\"><lc:rate>0</lc:rate></lc:accept>"
        ),
    );
    let config = CompileConfig::default().with_redirect_allow(Some(vec!["trusted.example".into()]));
    let mut s = notifier_shard("sip:sbc.notifier.example", &rules, config);
    assert_eq!(
        s.classify(&invite("<sip:a@b>", "<sip:x@a.example>"))
            .verdict,
        Verdict::Redirect
    );
    let d = s.classify(&invite("<sip:a@b>", "<sip:x@b.example>"));
    assert_eq!((d.verdict, d.targets().len()), (Verdict::Reject, 0));
    let stats = s.rule_stats(1).expect("evil");
    assert_eq!((stats.rejected, stats.redirect_refused), (1, 1));
    // Without an allow-list only the notifier's own domain is agreed: both are refused.
    let mut s = notifier_shard("sip:sbc.notifier.example", &rules, CompileConfig::default());
    for to in ["<sip:x@a.example>", "<sip:x@b.example>"] {
        assert_eq!(
            s.classify(&invite("<sip:a@b>", to)).verdict,
            Verdict::Reject
        );
    }
    // `*` allows every target (an explicit opt-out).
    let mut s = notifier_shard(
        "sip:sbc.notifier.example",
        &rules,
        CompileConfig::default().with_redirect_allow(Some(vec!["*".into()])),
    );
    assert_eq!(
        s.classify(&invite("<sip:a@b>", "<sip:x@b.example>"))
            .verdict,
        Verdict::Redirect
    );
    // The operator's own policy (a local source: file, RPC, API) is trusted.
    let mut s = shard(&rules);
    assert_eq!(
        s.classify(&invite("<sip:a@b>", "<sip:x@b.example>"))
            .verdict,
        Verdict::Redirect
    );
}

/// The notifier's own domain (see `CompileConfig`): its URI's host and every subdomain, never a
/// parent domain; an IP literal is itself only.
#[test]
fn a_notifier_may_redirect_within_its_own_domain() {
    let redirect = |target: &str| {
        rule(
            "r",
            "",
            &format!(
                "<lc:accept alt-action=\"redirect\" alt-target=\"{target}\"><lc:rate>0</lc:rate></lc:accept>"
            ),
        )
    };
    for (notifier, target, redirects) in [
        ("sip:sbc.example.com", "sip:ivr@sbc.example.com", true),
        ("sip:sbc.example.com", "sip:ivr@SBC.Example.COM.", true),
        (
            "sip:sbc.example.com",
            "sips:ivr@a.b.sbc.example.com:5061",
            true,
        ),
        (
            "sip:notifier@sbc.example.com:5070",
            "sip:ivr@sbc.example.com",
            true,
        ),
        ("sip:sbc.example.com", "sip:ivr@example.com", false),
        ("sip:sbc.example.com", "sip:ivr@sbc2.example.com", false),
        ("sip:sbc.example.com", "sip:ivr@xsbc.example.com", false),
        (
            "sip:sbc.example.com",
            "sip:sbc.example.com@evil.example",
            false,
        ),
        ("sip:sbc.example.com", "tel:+15551234", false),
        ("sip:example.co.uk", "sip:ivr@victim.co.uk", false),
        ("sip:192.0.2.1", "sip:ivr@192.0.2.1:5070", true),
        ("sip:192.0.2.1", "sip:ivr@10.192.0.2.1", false),
        ("sip:192.0.2.1", "sip:ivr@192.0.2.10", false),
        ("sip:[2001:db8::1]", "sip:ivr@[2001:db8::1]", true),
        ("sip:[2001:db8::1]", "sip:ivr@[2001:db8::2]", false),
    ] {
        let mut s = notifier_shard(notifier, &redirect(target), CompileConfig::default());
        let d = s.classify(&invite("<sip:a@b>", "<sip:c@d>"));
        let expected = if redirects {
            Verdict::Redirect
        } else {
            Verdict::Reject
        };
        assert_eq!(d.verdict, expected, "{notifier} → {target}");
    }
}

#[test]
fn window_tickets_release_slots() {
    let mut s = shard(&rule("w", "", "<lc:accept><lc:win>2</lc:win></lc:accept>"));
    let r = invite("<sip:a@b>", "<sip:c@d>");
    let t1 = s.classify(&r).ticket.expect("admitted");
    let t2 = s.classify(&r).ticket.expect("admitted");
    let d = s.classify(&r);
    assert_eq!((d.verdict, d.ticket.is_none()), (Verdict::Reject, true));
    s.complete(t1);
    let t3 = s.classify(&r).ticket.expect("slot freed");
    assert_eq!(s.classify(&r).verdict, Verdict::Reject);
    s.complete(t2);
    s.complete(t3);
    assert!(s.classify(&r).ticket.is_some());
    // Rate and percent admissions carry no ticket.
    let mut s = shard(&rule(
        "r",
        "",
        "<lc:accept><lc:rate>10</lc:rate></lc:accept>",
    ));
    assert!(s.classify(&r).ticket.is_none());
}

#[test]
fn percent_rule_accepts_its_share() {
    let mut s = shard(&rule(
        "p",
        "",
        "<lc:accept><lc:percent>25</lc:percent></lc:accept>",
    ));
    let r = invite("<sip:a@b>", "<sip:c@d>");
    let accepted = (0..10_000)
        .filter(|_| s.classify(&r).verdict == Verdict::Accept)
        .count();
    assert_eq!(accepted, 2_500);
}

#[test]
fn burst_tolerance_is_configurable() {
    let rules = rule("r", "", "<lc:accept><lc:rate>1000</lc:rate></lc:accept>");
    for (tau_ms, burst) in [(100u64, 100usize), (10, 10), (0, 1)] {
        let config = EngineConfig::default().with_burst_tolerance(Duration::from_millis(tau_ms));
        let mut s = shard_for(ruleset(&rules), config);
        let r = invite("<sip:a@b>", "<sip:c@d>");
        let at_once = (0..1000)
            .filter(|_| s.classify(&r).verdict == Verdict::Accept)
            .count();
        assert_eq!(at_once, burst, "tau {tau_ms} ms");
    }
}

#[test]
fn raw_sip_requests_classify_like_parsed_ones() {
    let mut s = shard(&format!(
        "{}{}",
        rule(
            "hot",
            &ci("<lc:to><many-tel prefix=\"+1-212\"/></lc:to>"),
            REJECT_ALL
        ),
        rule("msg", "<method>MESSAGE</method>", REJECT_ALL)
    ));
    let invite = b"INVITE sip:+12125551234@gw.example.com;user=phone SIP/2.0\r\n\
Via: SIP/2.0/UDP a.example;branch=z9hG4bK1\r\nTo: \"Hotline\" <tel:+1-212-555-1234>\r\n\
From: \"J\xf6rg\" <sip:j@a.example>;tag=1\r\nCall-ID: x@a\r\nCSeq: 1 INVITE\r\n\r\n";
    let sip = loadctl::sip::scan(invite).expect("valid");
    let d = s.classify(&Request::from_sip(&sip, Transport::Udp, None));
    assert_eq!(
        (d.verdict, d.rule.map(|r| r.id().as_str())),
        (Verdict::Reject, Some("hot"))
    );
    // In-dialog (to-tag) and ACK are exempt.
    let bye = b"BYE sip:x@y SIP/2.0\r\nt: <tel:+12125551234>;tag=9\r\nf: <sip:j@a.example>;tag=1\r\ni: x@a\r\nCSeq: 2 BYE\r\n\r\n";
    let sip = loadctl::sip::scan(bye).expect("valid");
    assert_eq!(
        s.classify(&Request::from_sip(&sip, Transport::Udp, None))
            .exempt,
        Some(ExemptReason::NotFiltered)
    );
    let msg = b"MESSAGE sip:x@y SIP/2.0\r\nt: <sip:x@y>\r\nf: <sip:j@a.example>;tag=1\r\ni: m@a\r\nCSeq: 1 MESSAGE\r\n\r\n";
    let sip = loadctl::sip::scan(msg).expect("valid");
    assert_eq!(
        s.classify(&Request::from_sip(&sip, Transport::Tcp, None))
            .rule
            .map(|r| r.id().to_string())
            .as_deref(),
        Some("msg")
    );
}

/// RFC 3966 §4: "If one URI has a parameter name not found in the other, the two URIs are not
/// equal", while a `many-tel` prefix groups numbers (RFC 7200 §5.3.1: "'tel' URIs of global
/// numbers can be grouped by prefixes consisting of any number of common leading digits"),
/// so a parameter does not take a number out of its prefix.
#[test]
fn tel_parameters_count_for_one_but_not_for_prefixes() {
    let mut s = shard(&format!(
        "{}{}",
        rule(
            "one",
            &ci("<lc:to><one id=\"tel:+1-212-555-1234\"/></lc:to>"),
            REJECT_ALL
        ),
        rule(
            "prefix",
            &ci("<lc:to><many-tel prefix=\"+1-212\"/></lc:to>"),
            REJECT_ALL
        ),
    ));
    let m = |s: &mut Shard, to: &str| matched(s, &invite("<sip:a@b>", to));
    assert_eq!(m(&mut s, "<tel:+1-212-555-1234>"), "one");
    assert_eq!(m(&mut s, "<tel:+1.212.555.1234>"), "one");
    assert_eq!(m(&mut s, "<tel:+1-212-555-1234;isub=1>"), "prefix");
    assert_eq!(m(&mut s, "<tel:+1-212-555-1234;ext=22>"), "prefix");
    assert_eq!(
        m(&mut s, "<sip:+1-212-555-1234;isub=1@gw.example;user=phone>"),
        "prefix"
    );
    assert_eq!(
        m(&mut s, "<sip:+1-212-555-1234@gw.example;user=phone>"),
        "one"
    );
    assert_eq!(m(&mut s, "<tel:+1-213-555-1234;isub=1>"), "-");
}

/// RFC 3261 §19.1.4: "Characters other than those in the \"reserved\" set (see RFC 2396 [5])
/// are equivalent to their \"\"%\" HEX HEX\" encoding" — so `;` escaped is not `;`.
#[test]
fn reserved_escapes_do_not_match_their_characters() {
    let mut s = shard(&rule(
        "r",
        &ci("<lc:from><one id=\"sip:a;b@example.com\"/></lc:from>"),
        REJECT_ALL,
    ));
    let hit = |s: &mut Shard, from: &str| matched(s, &invite(from, "<sip:b@y>")) == "r";
    assert!(hit(&mut s, "<sip:a;b@example.com>"));
    assert!(hit(&mut s, "<sip:%61;b@example.com>"));
    assert!(!hit(&mut s, "<sip:a%3Bb@example.com>"));
    assert!(!hit(&mut s, "<sip:a%3bb@example.com>"));
}

// ------------------------------------------------------------------ emergency and priority

/// RFC 7200 §4.8: "The subscriber SHOULD honor the local policy for prioritizing SIP requests
/// relating to emergency calls as identified by the sos URN [RFC5031]". RFC 5031 §4.2 lists
/// `urn:service:sos` and its sub-services (`urn:service:sos.fire`, `urn:service:sos.police`,
/// …), and §3: "'service' identifiers are compared according to case-insensitive string
/// equality".
#[test]
fn emergency_calls_are_never_throttled() {
    let mut s = shard(&rule("all", "", REJECT_ALL));
    let call = |ruri: &'static str, to: &'static str| Request {
        identities: Identities {
            from: Some("<sip:caller@x.example>"),
            to: Some(to),
            request_uri: Some(ruri),
            ..Identities::default()
        },
        ..invite("<sip:caller@x.example>", "<sip:b@y.example>")
    };
    for (ruri, to) in [
        ("urn:service:sos", "<urn:service:sos>"),
        ("urn:service:sos.fire", "<sip:b@y.example>"),
        ("urn:service:sos.animal-control", "<sip:b@y.example>"),
        ("URN:Service:SOS.Police", "<sip:b@y.example>"),
        ("<urn:service:sos.marine>", "<sip:b@y.example>"),
        // The Request-URI is not a URN (a PSAP's URI after routing): the To decides.
        ("sip:psap@example.com", "<urn:service:sos.ambulance>"),
        (
            "sip:psap@example.com",
            "\"Emergency\" <urn:service:sos>;tag=1x",
        ),
        ("sip:psap@example.com", "urn:service:sos"),
    ] {
        let d = s.classify(&call(ruri, to));
        assert_eq!(
            (d.verdict, d.exempt),
            (Verdict::Accept, Some(ExemptReason::Emergency)),
            "{ruri} / {to}"
        );
    }
    for (ruri, to) in [
        // Not the sos service: counseling (RFC 5031 §4.3) or another top-level service.
        ("urn:service:counseling", "<sip:b@y.example>"),
        ("urn:service:sosfoo", "<sip:b@y.example>"),
        ("urn:service:sos.", "<sip:b@y.example>"),
        ("urn:service:police", "<sip:b@y.example>"),
        // A URN Request-URI decides alone, even with an sos To.
        ("urn:service:counseling", "<urn:service:sos>"),
        // sip:sos@… and tel:911 are not service URNs (RFC 5031 Appendix A, "Alternative
        // Approaches Considered", sets them aside).
        ("sip:sos@example.com", "<sip:sos@example.com>"),
        ("tel:911;phone-context=+1", "<tel:911;phone-context=+1>"),
    ] {
        let d = s.classify(&call(ruri, to));
        assert_eq!(
            (d.verdict, d.exempt),
            (Verdict::Reject, None),
            "{ruri} / {to}"
        );
    }
    // Switched off: filtered like any other call.
    let mut off = shard_for(
        ruleset(&rule("all", "", REJECT_ALL)),
        EngineConfig::default().with_exemptions({
            let mut e = Exemptions::default();
            e.emergency = false;
            e
        }),
    );
    let d = off.classify(&call("urn:service:sos", "<urn:service:sos>"));
    assert_eq!((d.verdict, d.exempt), (Verdict::Reject, None));
}

/// RFC 7200 §4.8: the subscriber "SHOULD honor the local policy for prioritizing SIP requests
/// based on the content of the Resource-Priority header". RFC 4412 §3.1: `r-value = namespace
/// "." r-priority`; "Namespaces and priorities are case-insensitive ASCII tokens"; values
/// "may be expressed equivalently as either comma-separated lists within a single header
/// field, as multiple header fields, or as some combination".
#[test]
fn priority_namespaces_are_never_throttled() {
    let mut s = shard_for(ruleset(&rule("all", "", REJECT_ALL)), trusting_192_0_2());
    let base = Request {
        source: Some(ip("192.0.2.7")),
        ..invite("<sip:a@x.example>", "<sip:b@y.example>")
    };
    let with = |rp: &'static str| Request {
        resource_priority: rp.into(),
        ..base
    };
    for rp in [
        "ets.0",
        "wps.2",
        "WPS.1",
        "dsn.flash, ets.1",
        "q735.3,wps.4",
        " Ets . 0 ",
    ] {
        let d = s.classify(&with(rp));
        assert_eq!(
            (d.verdict, d.exempt),
            (Verdict::Accept, Some(ExemptReason::ResourcePriority)),
            "{rp}"
        );
    }
    for rp in [
        "dsn.flash",
        "drsn.routine, q735.0",
        "ets",
        "etsx.1",
        "",
        "wps",
    ] {
        let d = s.classify(&with(rp));
        assert_eq!((d.verdict, d.exempt), (Verdict::Reject, None), "{rp:?}");
    }
    // Two header lines, the namespace on the second (raw SIP).
    let msg = b"INVITE sip:b@y.example SIP/2.0\r\nTo: <sip:b@y.example>\r\nFrom: <sip:a@x.example>;tag=1\r\n\
Resource-Priority: dsn.flash\r\nCall-ID: rp@x\r\nCSeq: 1 INVITE\r\nresource-priority: q735.1,\r\n  WPS.3\r\n\r\n";
    let sip = loadctl::sip::scan(msg).expect("valid");
    let raw = Request {
        source: Some(ip("192.0.2.8")),
        ..Request::from_sip(&sip, Transport::Udp, None)
    };
    assert_eq!(
        s.classify(&raw).exempt,
        Some(ExemptReason::ResourcePriority)
    );
    // RFC 4412 §11.3: "Only SIP elements within the same administrative trust domain ... will
    // trust a Resource-Priority header field that is not appropriately signed": from a peer
    // not listed, or one whose address is unknown, the marking counts for nothing.
    for source in [Some(ip("203.0.113.9")), Some(ip("2001:db8::7")), None] {
        let d = s.classify(&Request {
            source,
            ..with("ets.0")
        });
        assert_eq!((d.verdict, d.exempt), (Verdict::Reject, None), "{source:?}");
    }
    let mut default = shard(&rule("all", "", REJECT_ALL));
    assert_eq!(
        default.classify(&with("ets.0")).exempt,
        None,
        "no peer is trusted by default"
    );
    // A configured list replaces the default; entries compare case-insensitively.
    let mut dsn = shard_for(
        ruleset(&rule("all", "", REJECT_ALL)),
        trusting_192_0_2().with_exemptions({
            let mut e = trusting_192_0_2().exemptions;
            e.resource_priority = vec![" DSN ".into()];
            e
        }),
    );
    assert_eq!(
        dsn.classify(&with("dsn.flash")).exempt,
        Some(ExemptReason::ResourcePriority)
    );
    assert_eq!(dsn.classify(&with("ets.0")).exempt, None);
    let mut none = shard_for(
        ruleset(&rule("all", "", REJECT_ALL)),
        EngineConfig::default().with_exemptions(Exemptions::none()),
    );
    assert_eq!(none.classify(&with("ets.0")).verdict, Verdict::Reject);
}

/// Exempt requests are counted per reason; the total and the invariant exempt + unmatched +
/// Σ matched = total still hold.
#[test]
fn exempt_requests_are_counted_per_reason() {
    let engine = Engine::from_ruleset(
        ruleset(&rule(
            "r",
            &ci("<lc:to><one id=\"sip:b@y.example\"/></lc:to>"),
            REJECT_ALL,
        )),
        trusting_192_0_2().with_shards(1),
    )
    .expect("publishes");
    let mut s = engine.attach();
    let base = Request {
        source: Some(ip("192.0.2.7")),
        ..invite("<sip:a@x.example>", "<sip:b@y.example>")
    };
    let _ = s.classify(&Request {
        method: "BYE",
        ..base
    });
    for _ in 0..2 {
        let _ = s.classify(&Request {
            identities: Identities {
                request_uri: Some("urn:service:sos"),
                ..base.identities
            },
            ..base
        });
    }
    for _ in 0..3 {
        let _ = s.classify(&Request {
            resource_priority: "ets.1".into(),
            ..base
        });
    }
    let _ = s.classify(&base);
    let _ = s.classify(&invite("<sip:a@x.example>", "<sip:other@y.example>"));
    assert_eq!(s.exempt_count(), 6);
    assert_eq!(s.exempt_count_for(ExemptReason::Emergency), 2);
    let st = engine.stats();
    assert_eq!(
        (
            st.exempt,
            st.exempt_by_reason,
            st.unmatched,
            st.rules[0].stats.matched
        ),
        (
            6,
            ExemptStats {
                not_filtered: 1,
                emergency: 2,
                resource_priority: 3
            },
            1,
            1
        )
    );
    assert_eq!(st.total(), 8);
    let text = st.prometheus();
    for line in [
        "loadctl_exempt_total 6",
        "loadctl_exempt_reason_total{reason=\"not-filtered\"} 1",
        "loadctl_exempt_reason_total{reason=\"emergency\"} 2",
        "loadctl_exempt_reason_total{reason=\"resource-priority\"} 3",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // A dropped shard's counters stay in the totals.
    drop(s);
    assert_eq!(engine.stats().exempt_by_reason.resource_priority, 3);
}

/// RFC 3325 §9.1 allows a P-Asserted-Identity with "one sip or sips URI and one tel URI",
/// and RFC 3261 §7.3.1 makes two header lines one list: a request matches on either.
#[test]
fn two_p_asserted_identity_lines_match_on_either() {
    let mut s = shard(&format!(
        "{}{}",
        rule(
            "tel",
            &ci("<lc:p-asserted-identity><many-tel prefix=\"+1-212\"/></lc:p-asserted-identity>"),
            REJECT_ALL
        ),
        rule(
            "sip",
            &ci(
                "<lc:p-asserted-identity><one id=\"sip:alice@atlanta.example.com\"/></lc:p-asserted-identity>"
            ),
            REJECT_ALL
        ),
    ));
    let msg = |pai: &str| {
        format!(
            "INVITE sip:b@y.example SIP/2.0\r\nTo: <sip:b@y.example>\r\nFrom: <sip:a@x.example>;tag=1\r\n\
Call-ID: p@x\r\nCSeq: 1 INVITE\r\n{pai}\r\n"
        )
    };
    for (pai, want) in [
        // Two lines: sip first, tel second; the tel identity is the one the first rule needs.
        (
            "P-Asserted-Identity: \"Alice\" <sip:alice@atlanta.example.com>\r\nMax-Forwards: 70\r\np-asserted-identity: tel:+1-212-555-0000\r\n",
            "tel",
        ),
        // One line with both.
        (
            "P-Asserted-Identity: <sip:alice@atlanta.example.com>, <tel:+1-212-555-0000>\r\n",
            "tel",
        ),
        // Two lines, the second folded.
        (
            "P-Asserted-Identity: <tel:+1-303-555-0000>\r\nP-Asserted-Identity:\r\n  <sip:alice@atlanta.example.com>\r\n",
            "sip",
        ),
        ("P-Asserted-Identity: <tel:+1-303-555-0000>\r\n", "-"),
    ] {
        let text = msg(pai);
        let sip = loadctl::sip::scan(text.as_bytes()).expect("valid");
        assert_eq!(
            matched(&mut s, &Request::from_sip(&sip, Transport::Udp, None)),
            want,
            "{pai}"
        );
    }
}

#[test]
fn a_ticket_completed_twice_or_forged_never_enlarges_a_window_for_good() {
    let mut s = shard(&rule("w", "", "<lc:accept><lc:win>1</lc:win></lc:accept>"));
    let r = invite("<sip:a@b>", "<sip:c@d>");
    let t = s.classify(&r).ticket.expect("admitted");
    let (key, hint) = t.to_parts();
    assert!(s.complete(t));
    // The same ticket again, and the rule's key with made-up hints: the free slots stay at
    // the window's size (1), so at most one request is in at a time afterwards.
    assert!(s.complete(Ticket::from_parts(key, hint)));
    for h in 0..10 {
        assert!(s.complete(Ticket::from_parts(key, hint ^ (h << 7))));
    }
    let admitted = (0..5)
        .filter(|_| s.classify(&r).verdict == Verdict::Accept)
        .count();
    assert_eq!(
        admitted, 1,
        "a window of 1 admitted {admitted} without completions"
    );
    // A ticket with a key no rule has releases nothing and says so.
    assert!(!s.complete(Ticket::from_parts(key ^ 1, hint)));
}

#[test]
fn tickets_of_a_changed_window_complete_on_another_shard() {
    // Shard a takes both slots of a window of 2; the window is changed to 3 (another rule key)
    // and back to 2 (the first key again); shard b completes a's two tickets in between. The
    // slots come back to the first rule's cell: after the change back, 2 are free again.
    let engine = Engine::new(EngineConfig::default());
    let win = |n: u32| {
        ruleset(&rule(
            "w",
            "",
            &format!("<lc:accept><lc:win>{n}</lc:win></lc:accept>"),
        ))
    };
    let src = Source::local("op");
    engine.publish(&src, win(2)).expect("publishes");
    let mut a = engine.attach();
    let mut b = engine.attach();
    let r = invite("<sip:a@b>", "<sip:c@d>");
    let tickets: Vec<Ticket> = (0..2)
        .map(|_| a.classify(&r).ticket.expect("admitted"))
        .collect();
    assert_eq!(a.classify(&r).verdict, Verdict::Reject);
    engine.publish(&src, win(3)).expect("publishes");
    for t in tickets {
        assert!(
            b.complete(t),
            "the ticket's rule left the snapshot but its cell did not"
        );
    }
    engine.publish(&src, win(2)).expect("publishes");
    let admitted = (0..4)
        .filter(|_| a.classify(&r).verdict == Verdict::Accept)
        .count();
    assert_eq!(admitted, 2);
}
