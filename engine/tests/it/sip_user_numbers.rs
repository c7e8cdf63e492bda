//! How SIP/SIPS user parts without `user=phone` are read ([`SipUserNumbers`]), on every field
//! rules match and on both sides of a comparison, and the count of number-like user parts left
//! unread.
//!
//! The expectations come from RFC 3261 §19.1.1: "If the user string contains a telephone
//! number formatted as a telephone-subscriber, the user parameter value "phone" SHOULD be
//! present. Even without this parameter, recipients of SIP and SIPS URIs MAY interpret the
//! pre-@ part as a telephone number if local restrictions on the name space for user name
//! allow it." — and from RFC 3966: "Globally unique numbers are identified by the leading "+"
//! character" (§5.1.4), "Local numbers MUST have a 'phone-context' parameter that identifies
//! the scope of their validity" (§5.1.5), and §4: "The 'global-number-digits' and the
//! 'local-number-digits' must be equal, after removing all visual separators" (§3:
//! `visual-separator = "-" / "." / "(" / ")"`).

use crate::common::ruleset;
use loadctl::compile::{CompileConfig, Identities};
use loadctl::runtime::*;
use loadctl::uri::SipUserNumbers::{self, Digits, Global, UserPhone};

const REJECT_ALL: &str = "<lc:accept><lc:rate>0</lc:rate></lc:accept>";

/// One rule `id` whose `<sip>` block tests `field` with `identity`.
fn rule(id: &str, field: &str, identity: &str) -> String {
    format!(
        "<rule id=\"{id}\"><conditions><lc:call-identity><lc:sip><lc:{field}>{identity}</lc:{field}></lc:sip></lc:call-identity></conditions><actions>{REJECT_ALL}</actions></rule>"
    )
}

fn engine(rules: &str, numbers: SipUserNumbers) -> Engine {
    Engine::from_ruleset(
        ruleset(rules),
        EngineConfig::default()
            .with_shards(1)
            .with_compile(CompileConfig::default().with_sip_user_numbers(numbers)),
    )
    .expect("publishes")
}

/// An INVITE whose `field` (from, to, request-uri, p-asserted-identity) holds `uri`; the
/// other fields hold a plain user name.
fn request<'a>(field: &str, uri: &'a str, bracketed: &'a str) -> Request<'a> {
    let other = "<sip:alice@a.example>";
    let mut ids = Identities {
        from: Some(other),
        to: Some(other),
        request_uri: Some("sip:alice@a.example"),
        ..Identities::default()
    };
    match field {
        "from" => ids.from = Some(bracketed),
        "to" => ids.to = Some(bracketed),
        "request-uri" => ids.request_uri = Some(uri),
        _ => ids.p_asserted_identity = bracketed.into(),
    }
    Request {
        method: "INVITE",
        identities: ids,
        transport: Transport::Udp,
        initial: true,
        time: Some(Time {
            monotonic_ns: 1_000_000_000,
            unix_ns: 1_700_000_000_000_000_000,
        }),
        ..Request::default()
    }
}

/// The rule `uri` in `field` matches under `numbers` ("-" for none), and how many requests
/// were counted as number-like but unread.
fn classify(rules: &str, numbers: SipUserNumbers, field: &str, uri: &str) -> (String, u64) {
    let e = engine(rules, numbers);
    let mut s = e.attach();
    let bracketed = format!("<{uri}>");
    let rule = s
        .classify(&request(field, uri, &bracketed))
        .rule
        .map_or("-".into(), |r| r.id().to_string());
    (rule, e.stats().unread_numbers)
}

const FIELDS: [&str; 4] = ["from", "to", "request-uri", "p-asserted-identity"];

#[test]
fn the_default_reads_global_numbers() {
    assert_eq!(CompileConfig::default().sip_user_numbers, Global);
    assert_eq!(EngineConfig::default().compile.sip_user_numbers, Global);
}

#[test]
fn a_global_number_without_user_phone_is_read_unless_strict_on_every_field() {
    for field in FIELDS {
        let rules = rule("p1555", field, "<many-tel prefix=\"+1555\"/>");
        let uri = "sip:+15551234567@sbc.example.com";
        // Strict: only "the user parameter value "phone"" makes a telephone-subscriber.
        assert_eq!(
            classify(&rules, UserPhone, field, uri),
            ("-".into(), 1),
            "{field}"
        );
        // The MAY: `+` and digits are a global number (RFC 3966 §5.1.4).
        assert_eq!(classify(&rules, Global, field, uri), ("p1555".into(), 0));
        assert_eq!(classify(&rules, Digits, field, uri), ("p1555".into(), 0));
        // With user=phone it is a number under every setting.
        for n in SipUserNumbers::ALL {
            let (r, unread) = classify(&rules, n, field, &format!("{uri};user=phone"));
            assert_eq!((r.as_str(), unread), ("p1555", 0), "{field} {n}");
        }
        // Another prefix: read, but not this rule's; nothing unread to count.
        let other = "sip:+15561234567@sbc.example.com";
        assert_eq!(classify(&rules, Global, field, other), ("-".into(), 0));
    }
}

#[test]
fn visual_separators_are_ignored_and_tel_ids_compare_by_number() {
    let rules = rule("one", "to", "<one id=\"tel:+1-212-555-1234\"/>");
    // RFC 3966 visual-separator = "-" / "." / "(" / ")".
    for uri in [
        "sip:+1(212)555.1234@gw.example",
        "sip:+12125551234@other.example",
    ] {
        assert_eq!(classify(&rules, Global, "to", uri).0, "one", "{uri}");
        assert_eq!(classify(&rules, UserPhone, "to", uri).0, "-", "{uri}");
    }
    // The policy side is read the same way: a SIP id holding a global number is that number,
    // whatever its host, under Global; under the strict reading it stays a SIP URI.
    let rules = rule("sip-id", "to", "<one id=\"sip:+12125551234@a.example\"/>");
    let uri = "sip:+1-212-555-1234@b.example";
    assert_eq!(classify(&rules, Global, "to", uri).0, "sip-id");
    assert_eq!(classify(&rules, UserPhone, "to", uri).0, "-");
    assert_eq!(
        classify(&rules, UserPhone, "to", "sip:+12125551234@a.example").0,
        "sip-id"
    );
}

#[test]
fn digits_are_a_local_number_in_the_context_of_the_host() {
    // RFC 3966 §5.1.5: a local number needs a phone-context; the host gives it.
    let rules = format!(
        "{}{}",
        rule(
            "pbx",
            "request-uri",
            "<many-tel prefix=\"pbx.example.com\"/>"
        ),
        rule("ext", "to", "<many-tel prefix=\"70\"/>"),
    );
    let uri = "sip:7042@PBX.example.com";
    assert_eq!(
        classify(&rules, Digits, "request-uri", uri),
        ("pbx".into(), 0)
    );
    // Global and strict leave it a user name, and count it: a tel rule exists.
    assert_eq!(
        classify(&rules, Global, "request-uri", uri),
        ("-".into(), 1)
    );
    assert_eq!(
        classify(&rules, UserPhone, "request-uri", uri),
        ("-".into(), 1)
    );
    // A local digit prefix groups local numbers by their leading digits (RFC 7200 §5.3.1).
    assert_eq!(
        classify(&rules, Digits, "to", "sip:70-42@x.example").0,
        "ext"
    );
    assert_eq!(classify(&rules, Global, "to", "sip:70-42@x.example").0, "-");
    // The same digits at two hosts are two numbers: their contexts differ.
    let rules = rule(
        "one",
        "to",
        "<one id=\"tel:7042;phone-context=pbx.example.com\"/>",
    );
    assert_eq!(
        classify(&rules, Digits, "to", "sip:7042@pbx.example.com").0,
        "one"
    );
    assert_eq!(
        classify(&rules, Digits, "to", "sip:7042@other.example").0,
        "-"
    );
    // A global number under Digits is still global, not in the host's context.
    let rules = rule("p1555", "to", "<many-tel prefix=\"+1555\"/>");
    assert_eq!(
        classify(&rules, Digits, "to", "sip:+15550000@pbx.example.com").0,
        "p1555"
    );
}

#[test]
fn only_digits_and_separators_make_a_number_without_user_phone() {
    let rules = format!(
        "{}{}",
        rule("any", "to", "<many-tel/>"),
        rule("dom", "to", "<many domain=\"gw.example\"/>"),
    );
    // Parameters, escapes, letters or no digit at all: a user name under every setting, and
    // not number-like (nothing counted).
    for uri in [
        "sip:+1555;isub=2@gw.example",
        "sip:+1%35%35@gw.example",
        "sip:+1555abc@gw.example",
        "sip:+@gw.example",
        "sip:-().@gw.example",
        "sip:alice@gw.example",
        "sip:gw.example",
    ] {
        for n in SipUserNumbers::ALL {
            assert_eq!(
                classify(&rules, n, "to", uri),
                ("dom".into(), 0),
                "{uri} {n}"
            );
        }
    }
    // A number is not a user of the domain: `<many>` groups SIP URIs by domain, `<many-tel>`
    // numbers (RFC 7200 §5.3.1), so a read number falls to the tel rule.
    assert_eq!(
        classify(&rules, Global, "to", "sip:+1555@gw.example").0,
        "any"
    );
    assert_eq!(
        classify(&rules, UserPhone, "to", "sip:+1555@gw.example").0,
        "dom"
    );
}

#[test]
fn unread_numbers_are_counted_only_when_nothing_matched_and_numbers_are_compared() {
    let uri = "sip:+15551234567@sbc.example.com";
    // No rule compares numbers: nothing to count.
    let rules = rule("dom", "to", "<many domain=\"other.example\"/>");
    assert_eq!(classify(&rules, UserPhone, "to", uri), ("-".into(), 0));
    // A request that matched is not counted, even with a number-like field left unread.
    let rules = format!(
        "{}{}",
        rule("p1555", "to", "<many-tel prefix=\"+1555\"/>"),
        rule("dom", "from", "<many domain=\"sbc.example.com\"/>"),
    );
    let e = engine(&rules, UserPhone);
    let mut s = e.attach();
    let mut r = request("to", uri, "<sip:+15551234567@sbc.example.com>");
    r.identities.from = Some("<sip:+15551234567@sbc.example.com>");
    assert_eq!(
        s.classify(&r).rule.map(|r| r.id().to_string()),
        Some("dom".into())
    );
    let r = request("to", uri, "<sip:+15551234567@sbc.example.com>");
    assert!(s.classify(&r).rule.is_none());
    assert!(s.classify(&r).rule.is_none());
    assert_eq!((s.unread_numbers_count(), s.unmatched_count()), (2, 2));
    let stats = e.stats();
    assert_eq!((stats.unread_numbers, stats.unmatched), (2, 2));
    assert!(
        stats
            .prometheus()
            .contains("\nloadctl_unread_numbers_total 2\n")
    );
}

#[test]
fn names_parse_and_print() {
    for (name, n) in [
        ("user-phone", UserPhone),
        ("global", Global),
        ("digits", Digits),
    ] {
        assert_eq!(name.parse::<SipUserNumbers>(), Ok(n));
        assert_eq!(n.to_string(), name);
    }
    for bad in ["", "Global", "phone", "user=phone"] {
        let e = bad.parse::<SipUserNumbers>().expect_err(bad);
        assert!(
            e.to_string().contains("user-phone, global or digits"),
            "{e}"
        );
    }
}
