//! `loadctl classify` and `loadctl explain` end to end, including the three RFC 7200
//! Appendix D.1 examples.

use std::process::Output;

use crate::common::{data, loadctl};

use serde_json::Value;

/// Runs classify on `lines` and returns the parsed output lines.
fn classify(policy: &str, extra: &[&str], lines: &[Value]) -> (Vec<Value>, Output) {
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let mut args = vec!["classify", "--policy", policy];
    args.extend_from_slice(extra);
    let out = loadctl(&args, &input);
    let parsed = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON output"))
        .collect();
    (parsed, out)
}

fn invite(t: f64, from: &str, to: &str) -> Value {
    serde_json::json!({"t": t, "method": "INVITE", "from": from, "to": to})
}

fn count(decisions: &[Value], action: &str) -> usize {
    decisions.iter().filter(|d| d["action"] == action).count()
}

#[test]
fn rfc_example_1_hotline_rate_inside_its_validity() {
    let policy = data("rfc7200-example1.xml");
    // 300 calls in one second to the hotline, inside the three-hour window.
    let lines: Vec<Value> = (0..300)
        .map(|i| {
            invite(
                f64::from(i) / 300.0,
                "<sip:fan@elsewhere.example>;tag=1",
                "\"Hotline\" <sip:alice@hotline.example.com>",
            )
        })
        .collect();
    let (d, out) = classify(&policy, &["--now", "2008-05-31T17:30:00Z"], &lines);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(d.len(), 300);
    let accepted = count(&d, "accept");
    // 100/s with a 100 ms burst tolerance: at most 100·1.1 + 1 in the first second.
    assert!((100..=111).contains(&accepted), "{accepted}");
    assert_eq!(count(&d, "reject"), 300 - accepted);
    assert!(d.iter().all(|x| x["rule"] == "f3g44k1"));
    assert!(
        d.iter()
            .filter(|x| x["action"] == "reject")
            .all(|x| x["status"] == 503)
    );
    assert!(
        d.iter()
            .filter(|x| x["action"] == "accept")
            .all(|x| x["status"].is_null())
    );
    // The tel id matches written with or without separators, and as a user=phone SIP URI.
    for to in [
        "<tel:+12125551234>",
        "<sip:+1-212-555-1234@gw.example;user=phone>",
    ] {
        let (d, _) = classify(
            &policy,
            &["--now", "2008-05-31T17:30:00Z"],
            &[invite(0.0, "<sip:a@b>", to)],
        );
        assert_eq!(d[0]["rule"], "f3g44k1", "{to}");
    }
    // Outside the window no rule applies.
    let (d, _) = classify(&policy, &["--now", "2008-05-31T20:00:00Z"], &lines[..5]);
    assert!(
        d.iter()
            .all(|x| x["action"] == "accept" && x["rule"].is_null())
    );
    // Other methods are not covered by this INVITE rule.
    let (d, _) = classify(
        &policy,
        &["--now", "2008-05-31T17:30:00Z"],
        &[
            serde_json::json!({"t": 0, "method": "MESSAGE", "to": "<sip:alice@hotline.example.com>"}),
        ],
    );
    assert!(d[0]["rule"].is_null());
}

#[test]
fn rfc_example_2_hurricane_redirects_excess_except_rescue_domains() {
    let policy = data("rfc7200-example2.xml");
    let now = ["--now", "2012-10-26T12:00:00+01:00"];
    let mut lines: Vec<Value> = (0..400)
        .map(|i| {
            invite(
                f64::from(i) / 400.0,
                "<sip:worried@family.example>",
                "<sip:kin@sandy.example.com>",
            )
        })
        .collect();
    lines.push(invite(
        1.0,
        "<sip:team@rescue.example.com>",
        "<sip:kin@sandy.example.com>",
    ));
    lines.push(invite(
        1.0,
        "<sip:local@sandy.example.com>",
        "<tel:+1-212-555-7777>",
    ));
    lines.push(invite(
        1.0,
        "<sip:worried@family.example>",
        "<tel:+1-212-555-7777>",
    ));
    lines.push(invite(
        1.0,
        "<sip:worried@family.example>",
        "<tel:+1-312-555-7777>",
    ));
    let (d, out) = classify(&policy, &now, &lines);
    assert_eq!(out.status.code(), Some(0));
    let first: Vec<&Value> = d[..400].iter().collect();
    assert!(first.iter().all(|x| x["rule"] == "f3g44k2"));
    let redirected: Vec<&&Value> = first.iter().filter(|x| x["action"] == "redirect").collect();
    assert!(redirected.len() >= 280, "{}", redirected.len());
    assert!(redirected.iter().all(|x| x["status"] == 302
        && x["targets"] == serde_json::json!(["sip:sandy@update.example.com"])));
    // Excepted source domains are not filtered; the +1-212 prefix is.
    assert!(d[400]["rule"].is_null());
    assert!(d[401]["rule"].is_null());
    assert_eq!(d[402]["rule"], "f3g44k2");
    assert!(d[403]["rule"].is_null());
}

#[test]
fn rfc_example_3_first_match_wins() {
    let policy = data("rfc7200-example3.xml");
    let lines = [
        invite(0.0, "\"Alice\" <sip:alice@example.com>;tag=a", "<sip:x@y>"),
        invite(0.1, "<sip:bob@EXAMPLE.com>", "<sip:x@y>"),
        invite(0.2, "<sip:alice@other.example>", "<sip:x@y>"),
    ];
    let (d, _) = classify(&policy, &[], &lines);
    assert_eq!(
        d[0],
        serde_json::json!({"action": "reject", "rule": "f3g44k3", "status": 503})
    );
    assert_eq!(
        d[1],
        serde_json::json!({"action": "reject", "rule": "f3g44k3", "status": 503})
    );
    assert_eq!(
        d[2],
        serde_json::json!({"action": "accept", "rule": null, "status": null})
    );
}

fn policy_file(name: &str, accept: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("loadctl-cli-test-{name}.xml"));
    let doc = format!(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">\
         <rule id=\"{name}\"><conditions><method>INVITE</method></conditions><actions>{accept}</actions></rule></ruleset>"
    );
    std::fs::write(&path, doc).expect("write policy");
    path.to_string_lossy().into_owned()
}

#[test]
fn window_rule_releases_slots_after_hold() {
    let policy = policy_file("win", "<accept><win>2</win></accept>");
    let lines = [
        serde_json::json!({"t": 0.0, "method": "INVITE", "hold": 1.0}),
        serde_json::json!({"t": 0.1, "method": "INVITE", "hold": 1.0}),
        serde_json::json!({"t": 0.2, "method": "INVITE", "hold": 1.0}),
        serde_json::json!({"t": 1.05, "method": "INVITE"}),
        serde_json::json!({"t": 1.2, "method": "INVITE"}),
        serde_json::json!({"t": 9.0, "method": "INVITE"}),
    ];
    let (d, _) = classify(&policy, &[], &lines);
    let actions: Vec<&str> = d
        .iter()
        .map(|x| x["action"].as_str().expect("action"))
        .collect();
    // Slot 1 frees at 1.0, slot 2 at 1.1; the request at 1.05 never completes (no hold).
    assert_eq!(
        actions,
        ["accept", "accept", "reject", "accept", "accept", "reject"]
    );
}

#[test]
fn drop_depends_on_transport() {
    let policy = policy_file(
        "drop",
        "<accept alt-action=\"drop\"><rate>0</rate></accept>",
    );
    let lines = [
        serde_json::json!({"t": 0, "method": "INVITE"}),
        serde_json::json!({"t": 0, "method": "INVITE", "transport": "tcp"}),
        serde_json::json!({"t": 0, "method": "INVITE", "transport": "udp"}),
    ];
    let (d, _) = classify(&policy, &[], &lines);
    assert_eq!(
        d[0],
        serde_json::json!({"action": "reject", "rule": "drop", "status": 503})
    );
    assert_eq!(
        d[1],
        serde_json::json!({"action": "drop", "rule": "drop", "status": null})
    );
    assert_eq!(d[2]["action"], "reject");
    let (d, _) = classify(&policy, &["--transport", "tls"], &lines);
    assert_eq!(d[0]["action"], "drop");
    assert_eq!(d[2]["action"], "reject");
}

#[test]
fn exempt_requests_pass() {
    let policy = policy_file("all", "<accept><rate>0</rate></accept>");
    let lines = [
        serde_json::json!({"t": 0, "method": "INVITE", "initial": false, "known_dialog": true}),
        serde_json::json!({"t": 0, "method": "INVITE"}),
        // A To tag alone (anyone can write one) is no dialog...
        serde_json::json!({"t": 0, "method": "INVITE", "initial": false}),
    ];
    let (d, _) = classify(&policy, &[], &lines);
    assert_eq!(
        d[0],
        serde_json::json!({"action": "accept", "rule": null, "status": null})
    );
    assert_eq!(d[1]["action"], "reject");
    assert_eq!(d[2]["action"], "reject");
    // ...unless the operator says it is.
    let (d, _) = classify(&policy, &["--to-tag-is-dialog"], &lines);
    assert_eq!(d[2]["action"], "accept");
}

#[test]
fn bad_lines_are_reported_and_the_rest_processed() {
    let policy = data("rfc7200-example3.xml");
    let input = "{\"t\": 0, \"method\": \"INVITE\"}\nnot json\n{\"method\": \"INVITE\"}\n\n{\"t\": 1, \"method\": \"INVITE\", \"transport\": \"pigeon\"}\n{\"t\": 0.5, \"method\": \"INVITE\"}\n{\"t\": 2, \"method\": \"INVITE\"}\n{\"t\": 1.5, \"method\": \"INVITE\"}\n";
    let out = loadctl(&["classify", "--policy", &policy], input);
    assert_eq!(out.status.code(), Some(1));
    // Lines 1, 6 and 7 are requests (line 6 follows line 1 in time: line 5 was refused).
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 8: \"t\" goes backwards"), "{stderr}");
    for n in [2, 3, 5, 8] {
        assert!(
            stderr.contains(&format!("line {n}:")),
            "line {n} in {stderr}"
        );
    }
    assert!(
        !stderr.contains("line 4:"),
        "blank lines are skipped: {stderr}"
    );
}

#[test]
fn classify_usage_and_policy_errors() {
    let out = loadctl(&["classify", "--policy", "/nonexistent.xml"], "");
    assert_eq!(out.status.code(), Some(2));
    let out = loadctl(
        &[
            "classify",
            "--policy",
            &data("rfc7200-example1.xml"),
            "--transport",
            "carrier-pigeon",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    let out = loadctl(
        &[
            "classify",
            "--policy",
            &data("rfc7200-example1.xml"),
            "--now",
            "yesterday",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    let bad = policy_file("bad", "<accept><rate>-1</rate></accept>");
    let out = loadctl(&["classify", "--policy", &bad], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is negative"));
}

#[test]
fn explain_shows_canonical_forms_reasons_and_decision() {
    let out = loadctl(
        &[
            "explain",
            "--policy",
            &data("rfc7200-example2.xml"),
            "--method",
            "INVITE",
            "--from",
            "\"Team\" <sip:team@Rescue.Example.COM>;tag=5",
            "--to",
            "<sip:+1-212-555-0000@gw.example;user=phone>",
            "--now",
            "2012-10-26T12:00:00Z",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("canonical: sip:team@rescue.example.com"),
        "{text}"
    );
    assert!(
        text.contains("canonical: tel:+12125550000 (number +12125550000) host gw.example"),
        "{text}"
    );
    assert!(text.contains("1. f3g44k2: no - no <sip> block of its call-identity matches (<sip> #1: from does not match, to matches)"), "{text}");
    assert!(
        text.contains("decision: accept (no rule matches)"),
        "{text}"
    );
    let out = loadctl(
        &[
            "explain",
            "--policy",
            &data("rfc7200-example3.xml"),
            "--method",
            "INVITE",
            "--from",
            "<sip:alice@example.com>",
        ],
        "",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1. f3g44k3: MATCH -> accept rate 0/s, else reject (503)"),
        "{text}"
    );
    assert!(text.contains("(1 later rule is not evaluated)"), "{text}");
    assert!(
        text.contains("decision: reject (503) by rule f3g44k3"),
        "{text}"
    );
    let out = loadctl(
        &[
            "explain",
            "--policy",
            &data("rfc7200-example3.xml"),
            "--method",
            "BYE",
            "--from",
            "<sip:alice@example.com>",
        ],
        "",
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("decision: accept (exempt)"));
}

/// RFC 7200 §4.8: the subscriber "SHOULD honor the local policy for prioritizing SIP requests
/// relating to emergency calls as identified by the sos URN [RFC5031]" and "… based on the
/// content of the Resource-Priority header (RPH, [RFC4412])". RFC 5031 §4.2 names
/// `urn:service:sos` and sub-services such as `urn:service:sos.fire`; RFC 4412 §3.1 gives
/// `r-value = namespace "." r-priority` with case-insensitive namespaces, comma lists.
#[test]
fn emergency_and_priority_requests_are_exempt() {
    let policy = policy_file("rp", "<accept><rate>0</rate></accept>");
    let exempt = serde_json::json!({"action": "accept", "rule": null, "status": null});
    let lines = [
        serde_json::json!({"t": 0, "method": "INVITE", "ruri": "urn:service:sos"}),
        serde_json::json!({"t": 0, "method": "INVITE", "ruri": "sip:psap@example.com", "to": "<urn:service:sos.fire>"}),
        serde_json::json!({"t": 0, "method": "INVITE", "resource_priority": "ets.0, wps.2", "source": "192.0.2.7"}),
        serde_json::json!({"t": 0, "method": "INVITE", "resource_priority": "dsn.flash,WPS.1", "source": "192.0.2.8"}),
        serde_json::json!({"t": 0, "method": "INVITE", "resource_priority": "dsn.flash", "source": "192.0.2.7"}),
        serde_json::json!({"t": 0, "method": "INVITE", "ruri": "urn:service:counseling"}),
    ];
    let peers = ["--priority-peers", "192.0.2.0/24"];
    // RFC 4412 §11.3: Resource-Priority counts only from the peers listed.
    let (d, _) = classify(&policy, &[], &lines);
    let actions: Vec<&str> = d
        .iter()
        .map(|x| x["action"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        actions,
        ["accept", "accept", "reject", "reject", "reject", "reject"]
    );
    let (d, out) = classify(&policy, &peers, &lines);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        d[..4],
        [
            exempt.clone(),
            exempt.clone(),
            exempt.clone(),
            exempt.clone()
        ]
    );
    assert_eq!(d[4]["action"], "reject");
    assert_eq!(d[5]["action"], "reject");
    // Emergency exemption off; a namespace list that replaces ets and wps.
    let (d, _) = classify(
        &policy,
        &[
            "--no-emergency-exempt",
            "--priority-namespaces",
            "DSN",
            "--priority-peers",
            "192.0.2.0/24",
        ],
        &lines,
    );
    let actions: Vec<&str> = d
        .iter()
        .map(|x| x["action"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        actions,
        ["reject", "reject", "reject", "accept", "accept", "reject"]
    );
    // No namespaces at all.
    let (d, _) = classify(
        &policy,
        &[
            "--priority-namespaces",
            "",
            "--priority-peers",
            "192.0.2.0/24",
        ],
        &lines[2..3],
    );
    assert_eq!(d[0]["action"], "reject");
    // A block that is not one.
    let out = loadctl(
        &[
            "classify",
            "--policy",
            &policy,
            "--priority-peers",
            "192.0.2.1/24",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--priority-peers"));
    // A namespace cannot hold a dot (RFC 4412 §3.1 token-nodot).
    let out = loadctl(
        &[
            "classify",
            "--policy",
            &policy,
            "--priority-namespaces",
            "ets.0",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--priority-namespaces"));
}

#[test]
fn explain_says_why_a_request_is_exempt() {
    let policy = policy_file("rpx", "<accept><rate>0</rate></accept>");
    let explain = |extra: &[&str]| {
        let mut args = vec!["explain", "--policy", &policy, "--method", "INVITE"];
        args.extend_from_slice(extra);
        let out = loadctl(&args, "");
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = explain(&[
        "--resource-priority",
        "dsn.flash",
        "--resource-priority",
        "ets.0",
        "--source",
        "192.0.2.7",
        "--priority-peers",
        "192.0.2.0/24",
    ]);
    assert!(
        text.contains("resource-priority: dsn.flash, ets.0"),
        "{text}"
    );
    assert!(text.contains("exempt (resource-priority):"), "{text}");
    assert!(text.contains("decision: accept (exempt)"), "{text}");
    let text = explain(&["--ruri", "URN:service:SOS.police"]);
    assert!(text.contains("exempt (emergency):"), "{text}");
    assert!(text.contains("decision: accept (exempt)"), "{text}");
    let text = explain(&["--ruri", "urn:service:sos", "--no-emergency-exempt"]);
    assert!(
        text.contains("decision: reject (503) by rule rpx"),
        "{text}"
    );
    let text = explain(&[
        "--resource-priority",
        "ets.0",
        "--priority-namespaces",
        "wps",
        "--source",
        "192.0.2.7",
        "--priority-peers",
        "192.0.2.0/24",
    ]);
    assert!(
        text.contains("decision: reject (503) by rule rpx"),
        "{text}"
    );
    // From a peer not listed, the marking counts for nothing.
    let text = explain(&[
        "--resource-priority",
        "ets.0",
        "--source",
        "203.0.113.9",
        "--priority-peers",
        "192.0.2.0/24",
    ]);
    assert!(
        text.contains("decision: reject (503) by rule rpx"),
        "{text}"
    );
}

/// Two P-Asserted-Identity lines (RFC 3325 §9.1: "one sip or sips URI and one tel URI") are
/// one list (RFC 3261 §7.3.1): `explain --pai` may be repeated.
#[test]
fn explain_takes_two_p_asserted_identities() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("loadctl-cli-test-pai.xml");
    std::fs::write(
        &path,
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">\
         <rule id=\"tel\"><conditions><lc:call-identity><lc:sip><lc:p-asserted-identity><many-tel prefix=\"+1-212\"/></lc:p-asserted-identity></lc:sip></lc:call-identity></conditions>\
         <actions><lc:accept><lc:rate>0</lc:rate></lc:accept></actions></rule></ruleset>",
    )
    .expect("write policy");
    let policy = path.to_string_lossy().into_owned();
    let out = loadctl(
        &[
            "explain",
            "--policy",
            &policy,
            "--method",
            "INVITE",
            "--pai",
            "<sip:alice@atlanta.example.com>",
            "--pai",
            "<tel:+1-212-555-0000>",
        ],
        "",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("canonical: sip:alice@atlanta.example.com | tel:+12125550000"),
        "{text}"
    );
    assert!(
        text.contains("decision: reject (503) by rule tel"),
        "{text}"
    );
}

/// A policy with a `many-tel prefix="+1555"` rate rule on the Request-URI and one on a
/// `pbx.example.com` context on To.
fn tel_policy() -> String {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("loadctl-cli-test-tel.xml");
    let doc = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">\
        <rule id=\"p1555\"><conditions><lc:call-identity><lc:sip><lc:request-uri><many-tel prefix=\"+1555\"/></lc:request-uri></lc:sip></lc:call-identity></conditions>\
        <actions><lc:accept alt-action=\"reject\"><lc:rate>10</lc:rate></lc:accept></actions></rule>\
        <rule id=\"pbx\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"pbx.example.com\"/></lc:to></lc:sip></lc:call-identity></conditions>\
        <actions><lc:accept alt-action=\"reject\"><lc:rate>10</lc:rate></lc:accept></actions></rule></ruleset>";
    std::fs::write(&path, doc).expect("write policy");
    path.to_string_lossy().into_owned()
}

/// RFC 3261 §19.1.1: without `user=phone`, recipients "MAY interpret the pre-@ part as a
/// telephone number". 30 calls in one second to `sip:+1555…@gw` without it: a rate of 10/s
/// with a 100 ms burst tolerance admits at most 10·1.1 + 1 = 12 under `global` (the default)
/// and `digits`; under `user-phone` no rule matches and all 30 pass.
#[test]
fn sip_user_numbers_decides_whether_a_plain_sip_user_is_a_number() {
    let policy = tel_policy();
    let lines: Vec<Value> = (0..30)
        .map(|i| {
            let mut l = invite(
                f64::from(i) / 30.0,
                "<sip:a@x.example>;tag=1",
                "<sip:+15550001234@gw.example>",
            );
            l["ruri"] = "sip:+15550001234@gw.example".into();
            l
        })
        .collect();
    for (extra, limited) in [
        (&[][..], true),
        (&["--sip-user-numbers", "global"][..], true),
        (&["--sip-user-numbers", "digits"][..], true),
        (&["--sip-user-numbers", "user-phone"][..], false),
    ] {
        let (d, out) = classify(&policy, extra, &lines);
        assert_eq!(out.status.code(), Some(0), "{extra:?}");
        let accepted = count(&d, "accept");
        if limited {
            assert!((10..=12).contains(&accepted), "{extra:?}: {accepted}");
            assert!(d.iter().all(|x| x["rule"] == "p1555"), "{extra:?}");
        } else {
            assert_eq!(accepted, 30, "{extra:?}");
            assert!(d.iter().all(|x| x["rule"].is_null()), "{extra:?}");
        }
    }
    let (_, out) = classify(&policy, &["--sip-user-numbers", "phone"], &lines);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("user-phone, global or digits"));
}

#[test]
fn explain_names_the_setting_that_would_read_a_number() {
    let policy = tel_policy();
    let explain = |extra: &[&str]| {
        let mut args = vec![
            "explain",
            "--policy",
            &policy,
            "--method",
            "INVITE",
            "--ruri",
            "sip:+15550001234@gw.example",
            "--to",
            "\"PBX\" <sip:7042@PBX.example.com>;tag=2",
        ];
        args.extend_from_slice(extra);
        let out = loadctl(&args, "");
        assert_eq!(out.status.code(), Some(0), "{extra:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = explain(&["--sip-user-numbers", "user-phone"]);
    assert!(
        text.contains("note: the user part of to, request-uri looks like a telephone number, not read as one under --sip-user-numbers user-phone"),
        "{text}"
    );
    assert!(
        text.contains("under --sip-user-numbers global: p1555 would match too; the first match would be rule p1555 (now: no rule)"),
        "{text}"
    );
    assert!(
        text.contains("under --sip-user-numbers digits: p1555, pbx would match too"),
        "{text}"
    );
    assert!(
        text.contains("decision: accept (no rule matches)"),
        "{text}"
    );
    // The default reads the global number, not the local one.
    let text = explain(&[]);
    assert!(text.contains("canonical: tel:+15550001234"), "{text}");
    assert!(
        text.contains("note: the user part of to looks like a telephone number"),
        "{text}"
    );
    assert!(
        text.contains("under --sip-user-numbers digits: pbx would match too; the first match would be rule p1555 (now: rule p1555)"),
        "{text}"
    );
    // Under digits nothing number-like is left unread.
    let text = explain(&["--sip-user-numbers", "digits"]);
    assert!(!text.contains("note:"), "{text}");
    assert!(
        text.contains("canonical: tel:7042;phone-context=pbx.example.com"),
        "{text}"
    );
}
