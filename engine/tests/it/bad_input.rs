//! Bad input the other suites do not already cover (RELIABILITY.md lists every case and where
//! it is tested): NUL bytes, a million rules, prefixes longer than the digit trie keeps. Each
//! is refused with an error value or handled exactly, and nothing is applied half-way.

use crate::common::{NS, invite};
use loadctl::policy::{Limits, PolicyError, read};
use loadctl::runtime::*;
use loadctl::sip::scan;

fn document(rules: &str) -> String {
    format!("<ruleset {NS} version=\"1\" state=\"full\">{rules}</ruleset>")
}

fn tel_rule(id: &str, prefix: &str) -> String {
    format!(
        "<rule id=\"{id}\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"{prefix}\"/>\
         </lc:to></lc:sip></lc:call-identity></conditions><actions><lc:accept><lc:rate>0</lc:rate>\
         </lc:accept></actions></rule>"
    )
}

fn read_err(doc: &[u8], limits: &Limits) -> PolicyError {
    match read(doc, limits) {
        Ok(_) => panic!("accepted: {}", String::from_utf8_lossy(doc)),
        Err(e) => e,
    }
}

#[test]
fn nul_bytes_in_a_policy_are_refused_with_a_position() {
    let good = document(&tel_rule("a", "+1"));
    for at in ["+1\"", "rule id=\"a", "</ruleset"] {
        let i = good.find(at).expect("marker") + 1;
        let mut bad = good.clone().into_bytes();
        bad.insert(i, 0);
        let e = read_err(&bad, &Limits::default());
        assert!(
            e.position.line >= 1,
            "no position for a NUL after {at:?}: {e}"
        );
    }
}

#[test]
fn a_policy_that_fails_to_read_changes_nothing() {
    let engine = Engine::from_ruleset(
        read(
            document(&tel_rule("a", "+1")).as_bytes(),
            &Limits::default(),
        )
        .expect("valid")
        .ruleset,
        EngineConfig::default(),
    )
    .expect("publishes");
    let generation = engine.generation();
    let mut bad = document(&tel_rule("b", "+2")).into_bytes();
    bad.insert(10, 0);
    assert!(read(&bad, &Limits::default()).is_err());
    // Nothing reached the engine: same generation, same rules.
    assert_eq!(engine.generation(), generation);
    let snap = engine.snapshot();
    let ids: Vec<&str> = snap
        .policy()
        .rules()
        .iter()
        .map(|r| r.id().as_str())
        .collect();
    assert_eq!(ids, ["a"]);
}

#[test]
fn nul_bytes_in_sip_messages_never_panic() {
    let message = b"INVITE sip:+12125551234@gw.example SIP/2.0\r\n\
Via: SIP/2.0/UDP h;branch=z9hG4bK1\r\nTo: <tel:+1-212-555-1234>\r\n\
From: <sip:a@example.com>;tag=1\r\nCall-ID: 1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
    let engine = Engine::from_ruleset(
        read(
            document(&tel_rule("a", "+1")).as_bytes(),
            &Limits::default(),
        )
        .expect("valid")
        .ruleset,
        EngineConfig::default(),
    )
    .expect("publishes");
    let mut shard = engine.attach();
    for i in 0..message.len() {
        let mut m = message.to_vec();
        m[i] = 0;
        if let Ok(sip) = scan(&m) {
            let _ = shard.classify(&Request::from_sip(&sip, Transport::Udp, None));
        }
    }
}

#[test]
fn a_million_rules_are_refused_before_anything_is_built() {
    let rule = tel_rule("r", "+1");
    let mut doc = String::with_capacity(1_000_000 * (rule.len() + 8));
    doc.push_str(&format!("<ruleset {NS} version=\"1\" state=\"full\">"));
    for i in 0..1_000_000 {
        doc.push_str(&tel_rule(&format!("r{i}"), "+1"));
    }
    doc.push_str("</ruleset>");
    // Over the body limit (64 MiB) …
    let e = read_err(doc.as_bytes(), &Limits::default());
    assert!(e.to_string().contains("bytes"), "{e}");
    // … and with the body limit lifted, over the rule limit (100,000).
    let limits = {
        let mut l = Limits::default();
        l.max_body_bytes = usize::MAX;
        l
    };
    let e = read_err(doc.as_bytes(), &limits);
    assert!(
        e.to_string().contains("100000") || e.to_string().contains("100,000"),
        "{e}"
    );
}

#[test]
fn prefixes_longer_than_the_trie_keeps_match_on_every_digit() {
    // The digit trie keeps 255 digits of a prefix; a longer prefix must still be compared in
    // full: a number that shares its first 280 digits but not the 290th does not match.
    let prefix: String = (0..300)
        .map(|i| char::from(b'0' + (i % 10) as u8))
        .collect();
    let engine = Engine::from_ruleset(
        read(
            document(&tel_rule("long", &format!("+{prefix}"))).as_bytes(),
            &Limits::default(),
        )
        .expect("a 301-byte prefix is within the 4,096-byte value limit")
        .ruleset,
        EngineConfig::default(),
    )
    .expect("publishes");
    let mut shard = engine.attach();
    let mut classify = |number: &str| {
        let to = format!("<tel:+{number}>");
        let d = shard.classify(&invite(&to));
        d.rule.map(|r| r.id().as_str().to_owned())
    };
    assert_eq!(classify(&format!("{prefix}42")), Some("long".to_owned()));
    let mut differs = prefix.clone().into_bytes();
    differs[290] = if differs[290] == b'9' { b'8' } else { b'9' };
    let differs = String::from_utf8(differs).expect("digits");
    assert_eq!(classify(&format!("{differs}42")), None);
    assert_eq!(classify(&prefix[..280]), None);
}
