use super::numbers::{self, user_number};
use super::parse::parse_sip;
use super::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    /// The one-pass split of a SIP URI agrees with searching for each delimiter in turn,
    /// parts and errors alike.
    #[test]
    fn one_pass_sip_split_agrees_with_the_general_path(
        scheme in "(sip|SIPS|sips)",
        rest in "[ab1:@;?=%.\\[\\]_F-]{0,18}",
    ) {
        let uri = format!("{scheme}:{rest}");
        let fast = parse(&uri);
        let common = matches!(
            fast,
            Err(UriError::Empty | UriError::BadCharacter | UriError::BadEscape | UriError::NoScheme)
        );
        if !common {
            let general = parse_sip(scheme.len() == 4, &rest).map(UriRef::Sip);
            prop_assert_eq!(fast, general, "{}", uri);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// RFC 3261 §19.1.4 case rules and idempotence of canonical keys: scheme and host
    /// compare case-insensitively, the user part case-sensitively, and a canonical key read
    /// back as a URI canonicalises to itself.
    #[test]
    fn canonical_keys_follow_case_rules_and_are_idempotent(
        user in "[a-zA-Z0-9._~-]{1,10}",
        host in "[a-zA-Z0-9]{1,8}(\\.[a-zA-Z0-9]{1,8}){0,3}",
        port in proptest::option::of(1u16..),
        secure in any::<bool>(),
        number in "\\+?[0-9]{1,4}([-.()]?[0-9]{1,4}){0,4}",
        context in proptest::option::of("[a-z]{1,8}\\.example"),
    ) {
        let scheme = if secure { "sips" } else { "sip" };
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        let uri = format!("{scheme}:{user}@{host}{port};transport=tcp");
        let k = key(&uri);
        let shouted = format!("{}:{user}@{}{port};TRANSPORT=TCP", scheme.to_uppercase(), host.to_uppercase());
        prop_assert_eq!(key(&shouted), k.clone());
        if user.chars().any(|c| c.is_ascii_lowercase()) {
            let other_user = format!("{scheme}:{}@{host}{port}", user.to_uppercase());
            prop_assert_ne!(key(&other_user), k.clone());
        }
        prop_assert_eq!(key(&k), k.clone(), "sip key of {}", uri);

        let tel = match (&context, number.starts_with('+')) {
            (Some(ctx), false) => format!("tel:{number};phone-context={}", ctx.to_uppercase()),
            _ => format!("tel:{number}"),
        };
        let t = key(&tel);
        prop_assert_eq!(key(&t), t.clone(), "tel key of {}", tel);
        // A sip URI with user=phone is that number, whatever its host.
        if context.is_none() {
            let as_sip = format!("sip:{number}@{host};user=phone");
            prop_assert_eq!(key(&as_sip), t);
        }
    }
}

fn key(s: &str) -> String {
    let mut buf = Vec::new();
    let c = canonicalize(parse(s).expect("valid"), &mut buf);
    String::from_utf8_lossy(c.key).into_owned()
}

fn key_with(s: &str, numbers: SipUserNumbers) -> String {
    let mut buf = Vec::new();
    let c = canonicalize_with(parse(s).expect("valid"), &mut buf, Parts::ALL, numbers);
    String::from_utf8_lossy(c.key).into_owned()
}

/// RFC 3261 §19.1.1: "Even without this parameter, recipients of SIP and SIPS URIs MAY
/// interpret the pre-@ part as a telephone number"; RFC 3966 §4: digits compare "after
/// removing all visual separators"; §5.1.5: "Local numbers MUST have a 'phone-context'".
#[test]
fn sip_user_parts_without_user_phone_are_read_as_the_setting_says() {
    use SipUserNumbers::{Digits, Global, UserPhone};
    let cases: [(&str, [&str; 3]); 6] = [
        (
            "sip:+1-212-555-1234@GW.example",
            [
                "sip:+1-212-555-1234@gw.example",
                "tel:+12125551234",
                "tel:+12125551234",
            ],
        ),
        (
            "sips:(212)555.1234@PBX.example:5061",
            [
                "sips:(212)555.1234@pbx.example:5061",
                "sips:(212)555.1234@pbx.example:5061",
                "tel:2125551234;phone-context=pbx.example",
            ],
        ),
        // Parameters or escapes: a user name without user=phone.
        ("sip:+1212;isub=1@gw", ["sip:+1212;isub=1@gw"; 3]),
        ("sip:+1%32@gw", ["sip:+12@gw"; 3]),
        ("sip:alice@gw", ["sip:alice@gw"; 3]),
        // With user=phone, the number whatever the setting.
        ("sip:+1-212@gw;user=phone", ["tel:+1212"; 3]),
    ];
    for (uri, expected) in cases {
        for (n, want) in [UserPhone, Global, Digits].into_iter().zip(expected) {
            assert_eq!(key_with(uri, n), want, "{uri} {n}");
            // Unread: no number read, and a number-like user part.
            let (mut buf, mut unread) = (Vec::new(), false);
            let p = parse(uri).expect("valid");
            let c = canonicalize_noting(p, &mut buf, Parts::ALL, n, &mut unread);
            let number_like = matches!(p, UriRef::Sip(s) if s.user.and_then(user_number).is_some());
            assert_eq!(c.number.is_none() && number_like, unread, "{uri} {n}");
            assert_eq!(unread, unread_number(p, n), "{uri} {n}");
        }
    }
    assert!(unread_number(parse("sip:+1212@gw").expect("ok"), UserPhone));
    assert!(!unread_number(parse("sip:+1212@gw").expect("ok"), Global));
    assert!(unread_number(parse("sip:1212@gw").expect("ok"), Global));
    assert!(!unread_number(parse("sip:1212@gw").expect("ok"), Digits));
    assert!(!unread_number(
        parse("tel:1212;phone-context=x").expect("ok"),
        UserPhone
    ));
}

#[test]
fn header_values_in_every_form() {
    let cases = [
        (
            "\"Alice\" <sip:alice@Example.COM;transport=tcp>;tag=9",
            vec!["sip:alice@Example.COM;transport=tcp"],
        ),
        ("<sip:bob@x.example>", vec!["sip:bob@x.example"]),
        ("sip:carol@x.example;tag=77", vec!["sip:carol@x.example"]),
        (
            "  Dave <tel:+1-212-555-0100>  ",
            vec!["tel:+1-212-555-0100"],
        ),
        ("\"a <quoted> name, too\" <sip:e@x>", vec!["sip:e@x"]),
        ("<sip:f@x>, <tel:+44207>", vec!["sip:f@x", "tel:+44207"]),
        ("\"Q\\\"x\" <sip:g@x>", vec!["sip:g@x"]),
        (
            "\"A long display name, with <brackets>\" <sip:h@x>, \"\" <sip:i@x>",
            vec!["sip:h@x", "sip:i@x"],
        ),
    ];
    for (value, want) in cases {
        let got: Vec<&str> = header_uris(value).map(|r| r.expect("ok")).collect();
        assert_eq!(got, want, "{value}");
    }
    assert_eq!(
        header_uris("<sip:x@y").next(),
        Some(Err(UriError::Unclosed))
    );
    assert_eq!(header_uris("   ").next(), None);
    assert_eq!(
        header_uris("\"no closing quote <sip:x@y>").next(),
        Some(Err(UriError::Unclosed))
    );
}

#[test]
fn sip_parts() {
    let UriRef::Sip(s) =
        parse("sips:al%69ce:pw@[2001:db8::1]:5061;transport=tls;lr?subject=hi&x").expect("valid")
    else {
        panic!("not sip")
    };
    assert!(s.secure);
    assert_eq!(s.user, Some("al%69ce"));
    assert_eq!(s.password, Some("pw"));
    assert_eq!(s.host, "[2001:db8::1]");
    assert_eq!(s.port, Some(5061));
    assert_eq!(s.params.get("TRANSPORT"), Some(Some("tls")));
    assert_eq!(s.params.get("lr"), Some(None));
    assert_eq!(s.headers, "subject=hi&x");
}

#[test]
fn malformed_uris_are_refused() {
    for (s, e) in [
        ("", UriError::Empty),
        ("alice", UriError::NoScheme),
        ("sip:", UriError::NoScheme),
        ("sip:alice@", UriError::NoHost),
        ("sip:alice@exa mple.com", UriError::BadCharacter),
        ("sip:a@b:99999", UriError::BadPort),
        ("sip:a@b:x", UriError::BadPort),
        ("sip:a@b%2", UriError::BadEscape),
        ("sip:a@b!c", UriError::BadHost),
        ("sip:a@[zz]", UriError::BadHost),
        ("tel:;phone-context=x", UriError::NoNumber),
    ] {
        assert_eq!(parse(s), Err(e), "{s}");
    }
}

#[test]
fn canonical_keys_follow_rfc3261() {
    // Scheme and host case-insensitive, user case-sensitive, escapes decoded.
    assert_eq!(key("SIP:alice@Example.COM"), "sip:alice@example.com");
    assert_eq!(key("sip:%61lice@example.com"), "sip:alice@example.com");
    // RFC 3966 §3: "If the reserved characters \"+\", \";\", \"=\", and \"?\" are used as
    // delimiters between components of the \"tel\" URI, they MUST NOT be percent encoded"
    // and only "Characters other than those in the \"reserved\" and \"unsafe\" sets" equal
    // their encoding: `%2B` is not the `+` of a global number; `%2d` is a `-`.
    assert_eq!(key("tel:+1-212%2d555"), "tel:+1212555");
    assert_ne!(key("tel:%2B1-212%2d555"), "tel:+1212555");
    assert_ne!(
        key("sip:%2B1-212@gw;user=phone"),
        key("sip:+1212@other.example;user=phone")
    );
    assert_eq!(
        key("sip:+1%2d212@gw;user=phone"),
        key("sip:+1212@other.example;user=phone")
    );
    assert_ne!(key("sip:Alice@example.com"), key("sip:alice@example.com"));
    // A written port is part of the key.
    assert_eq!(key("sip:a@x.example:5060"), "sip:a@x.example:5060");
    assert_ne!(key("sip:a@x.example:5060"), key("sip:a@x.example"));
    // sips and sip differ.
    assert_eq!(key("sips:a@x"), "sips:a@x");
    // Parameters are not in the key.
    assert_eq!(key("sip:a@x;transport=tcp"), "sip:a@x");
}

#[test]
fn numbers_follow_rfc3966() {
    assert_eq!(key("tel:+1-212-555-1234"), "tel:+12125551234");
    assert_eq!(key("tel:+1(212)555.1234"), "tel:+12125551234");
    assert_eq!(
        key("tel:7042;phone-context=Example.COM"),
        "tel:7042;phone-context=example.com"
    );
    assert_eq!(
        key("tel:7042;phone-context=+1-212"),
        "tel:7042;phone-context=+1212"
    );
    // user=phone SIP URIs are compared as their number, whatever the host.
    assert_eq!(
        key("sip:+1-212-555-1234@gw.example;user=phone"),
        "tel:+12125551234"
    );
    assert_eq!(
        key("sip:5551234;phone-context=+1-212@gw;user=PHONE"),
        "tel:5551234;phone-context=+1212"
    );
    // Without user=phone a numeric user is just a user.
    assert_eq!(key("sip:+12125551234@gw"), "sip:+12125551234@gw");
    let mut buf = Vec::new();
    let c = canonicalize(parse("tel:+44-20-7946-0000").expect("ok"), &mut buf);
    let n = c.number.expect("number");
    assert_eq!(
        (n.digits, n.global, n.context),
        (&b"442079460000"[..], true, None)
    );
    assert_eq!(c.host, None);
}

#[test]
fn parameters_and_headers_compare_per_rfc3261() {
    let policy = |s: &str| match parse(s).expect("ok") {
        UriRef::Sip(u) => (canonical_params(u.params), canonical_headers(u.headers)),
        _ => panic!(),
    };
    let request = |s: &'static str| match parse(s).expect("ok") {
        UriRef::Sip(u) => SipRest {
            params: u.params,
            headers: u.headers,
        },
        _ => panic!(),
    };
    let (p, h) = policy("sip:a@x");
    // Parameters in only one URI are ignored …
    assert!(params_and_headers_match(
        &request("sip:a@x;newparam=5;lr"),
        &p,
        &h
    ));
    // … except user, ttl, method, maddr and transport.
    for strict in [
        "user=ip",
        "ttl=1",
        "method=INVITE",
        "maddr=1.2.3.4",
        "transport=udp",
    ] {
        let r: &'static str = Box::leak(format!("sip:a@x;{strict}").into_boxed_str());
        assert!(!params_and_headers_match(&request(r), &p, &h), "{strict}");
    }
    let (p, h) = policy("sip:a@x;transport=TCP;method=INVITE");
    assert!(params_and_headers_match(
        &request("sip:a@x;transport=tcp;method=invite"),
        &p,
        &h
    ));
    assert!(!params_and_headers_match(
        &request("sip:a@x;transport=udp;method=INVITE"),
        &p,
        &h
    ));
    assert!(!params_and_headers_match(
        &request("sip:a@x;transport=tcp"),
        &p,
        &h
    ));
    // Headers must be present in both.
    let (p, h) = policy("sip:a@x?subject=hello");
    assert!(params_and_headers_match(
        &request("sip:a@x?Subject=hell%6F"),
        &p,
        &h
    ));
    assert!(!params_and_headers_match(&request("sip:a@x"), &p, &h));
    let (p, h) = policy("sip:a@x");
    assert!(!params_and_headers_match(
        &request("sip:a@x?subject=x"),
        &p,
        &h
    ));
}

/// RFC 3261 §19.1.4, with its own example sets. "The URIs within each of the following
/// sets are equivalent" / "… are not equivalent", and "Characters other than those in the
/// \"reserved\" set (see RFC 2396 [5]) are equivalent to their \"\"%\" HEX HEX\" encoding."
fn sip_equal(a: &str, b: &str) -> bool {
    let (mut ba, mut bb) = (Vec::new(), Vec::new());
    let ca = canonicalize(parse(a).expect("valid"), &mut ba);
    let cb = canonicalize(parse(b).expect("valid"), &mut bb);
    let (ra, rb) = (ca.sip.expect("a SIP URI"), cb.sip.expect("a SIP URI"));
    // Symmetric: each side's parameters and headers in canonical form against the other.
    ca.key == cb.key
        && params_and_headers_match(
            &ra,
            &canonical_params(rb.params),
            &canonical_headers(rb.headers),
        )
        && params_and_headers_match(
            &rb,
            &canonical_params(ra.params),
            &canonical_headers(ra.headers),
        )
}

#[test]
fn rfc3261_19_1_4_example_sets() {
    let equivalent: [&[&str]; 4] = [
        &[
            "sip:%61lice@atlanta.com;transport=TCP",
            "sip:alice@AtLanTa.CoM;Transport=tcp",
        ],
        &[
            "sip:carol@chicago.com",
            "sip:carol@chicago.com;newparam=5",
            "sip:carol@chicago.com;security=on",
        ],
        &[
            "sip:biloxi.com;transport=tcp;method=REGISTER?to=sip:bob%40biloxi.com",
            "sip:biloxi.com;method=REGISTER;transport=tcp?to=sip:bob%40biloxi.com",
        ],
        &[
            "sip:alice@atlanta.com?subject=project%20x&priority=urgent",
            "sip:alice@atlanta.com?priority=urgent&subject=project%20x",
        ],
    ];
    for set in equivalent {
        for a in set {
            for b in set {
                assert!(sip_equal(a, b), "{a} = {b}");
            }
        }
    }
    let different = [
        // (different usernames)
        (
            "SIP:ALICE@AtLanTa.CoM;Transport=udp",
            "sip:alice@AtLanTa.CoM;Transport=UDP",
        ),
        // (can resolve to different ports)
        ("sip:bob@biloxi.com", "sip:bob@biloxi.com:5060"),
        // (can resolve to different transports)
        ("sip:bob@biloxi.com", "sip:bob@biloxi.com;transport=udp"),
        // (can resolve to different port and transports)
        (
            "sip:bob@biloxi.com",
            "sip:bob@biloxi.com:6000;transport=tcp",
        ),
        // (different header component)
        (
            "sip:carol@chicago.com",
            "sip:carol@chicago.com?Subject=next%20meeting",
        ),
        // (even though that's what phone21.boxesbybob.com resolves to)
        ("sip:bob@phone21.boxesbybob.com", "sip:bob@192.0.2.4"),
        // "sip:carol@chicago.com;security=on and sip:carol@chicago.com;security=off are
        // not equivalent"
        (
            "sip:carol@chicago.com;security=on",
            "sip:carol@chicago.com;security=off",
        ),
    ];
    for (a, b) in different {
        assert!(!sip_equal(a, b), "{a} != {b}");
        assert!(!sip_equal(b, a), "{b} != {a}");
    }
    // "Note that equality is not transitive": both of these equal sip:carol@chicago.com.
    assert!(sip_equal(
        "sip:carol@chicago.com",
        "sip:carol@chicago.com;security=off"
    ));
}

/// Reserved characters escaped and unescaped differ; unreserved ones equal their escapes.
#[test]
fn only_unreserved_characters_equal_their_escapes() {
    assert_ne!(key("sip:a%3Bb@example.com"), key("sip:a;b@example.com"));
    assert_ne!(key("sip:a%3bb@example.com"), key("sip:a;b@example.com"));
    // Hex case of an escape does not matter ("%3b" and "%3B" are one escape).
    assert_eq!(key("sip:a%3bb@example.com"), key("sip:a%3Bb@example.com"));
    // %25 is an escaped '%': `a%253Bb` is the user `a%3Bb`, not `a;b` escaped.
    assert_ne!(key("sip:a%253Bb@example.com"), key("sip:a%3Bb@example.com"));
    for c in [";", "/", "?", ":", "@", "&", "=", "+", "$", ","] {
        let escaped = format!("sip:x%{:02X}y@example.com", c.as_bytes()[0]);
        let plain = format!("sip:x{c}y@example.com");
        if let Ok(p) = parse(&plain) {
            let mut b = Vec::new();
            let k = String::from_utf8_lossy(canonicalize(p, &mut b).key).into_owned();
            assert_ne!(key(&escaped), k, "{c}");
        }
    }
    // Unreserved: alphanum and mark (RFC 3261 §25.1).
    for c in "aZ9-_.!~*'()".chars() {
        let escaped = format!("sip:x%{:02X}y@example.com", c as u8);
        assert_eq!(key(&escaped), format!("sip:x{c}y@example.com"), "{c}");
    }
    // Parameters and headers follow the same rule.
    let rest = |s: &'static str| match parse(s).expect("ok") {
        UriRef::Sip(u) => SipRest {
            params: u.params,
            headers: u.headers,
        },
        _ => panic!(),
    };
    let policy = match parse("sip:a@x;p=a%3Bb?h=c%26d").expect("ok") {
        UriRef::Sip(u) => (canonical_params(u.params), canonical_headers(u.headers)),
        _ => panic!(),
    };
    assert!(params_and_headers_match(
        &rest("sip:a@x;p=A%3bB?h=c%26d"),
        &policy.0,
        &policy.1
    ));
    assert!(!params_and_headers_match(
        &rest("sip:a@x;p=a%3Bb?h=c%2526d"),
        &policy.0,
        &policy.1
    ));
}

/// RFC 4475 §3.1.1.3 (esc01): "the \"name\" uri-parameter has a value of \"value%41\",
/// which is NOT equivalent to \"valueA\". Per [RFC3986], unescaping URI components is
/// never performed recursively."
#[test]
fn escapes_are_not_decoded_twice() {
    let params = |s: &str| match parse(s).expect("ok") {
        UriRef::Sip(u) => canonical_params(u.params),
        _ => panic!(),
    };
    let esc01 = params("sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31");
    let value_a = params("sip:caller@host5.example.net;lr;name=valueA");
    let written = params("sip:caller@host5.example.net;lr;name=value%2541");
    assert_ne!(esc01, value_a);
    assert_eq!(esc01, written);
    assert_eq!(
        key("sip:cal%6Cer@host5.example.net"),
        "sip:caller@host5.example.net"
    );
}

/// RFC 3966 §4 "URI Comparisons".
#[test]
fn tel_uris_compare_per_rfc3966() {
    // "If one URI has a parameter name not found in the other, the two URIs are not equal."
    assert_ne!(
        key("tel:+1-212-555-1234;isub=1"),
        key("tel:+1-212-555-1234")
    );
    assert_ne!(key("tel:+1-212-555-1234;ext=7"), key("tel:+1-212-555-1234"));
    assert_ne!(key("tel:+1-212-555-1234;foo"), key("tel:+1-212-555-1234"));
    assert_ne!(
        key("tel:+1-212-555-1234;isub=1"),
        key("tel:+1-212-555-1234;isub=2")
    );
    // "Parameters are compared according to 'pname', regardless of the order they
    // appeared in the URI."
    assert_eq!(
        key("tel:7042;phone-context=example.com;foo=bar"),
        key("tel:7042;foo=bar;phone-context=example.com")
    );
    assert_eq!(
        key("tel:+1-212-555-1234;b=2;isub=1;a=1"),
        key("tel:+12125551234;a=1;b=2;isub=1")
    );
    // "URI comparisons are case-insensitive."
    assert_eq!(
        key("tel:+1-212-555-1234;ISUB=AbC"),
        key("tel:+12125551234;isub=aBc")
    );
    // "'extension' … compared … digit by digit … after removing all 'visual-separator'
    // characters" (ext = 1*phonedigit).
    assert_eq!(
        key("tel:+1-212-555-1234;ext=1-2"),
        key("tel:+12125551234;ext=12")
    );
    // phone-context: "as a host name if it is a 'domainname' or digit by digit if it is
    // 'global-number-digits'".
    assert_eq!(
        key("tel:7042;phone-context=+1-212"),
        key("tel:7042;phone-context=+1212")
    );
    assert_ne!(
        key("tel:7042;phone-context=+1-212"),
        key("tel:7042;phone-context=+1-213")
    );
    // "Both must be either a 'local-number' or a 'global-number'".
    assert_ne!(key("tel:+7042"), key("tel:7042;phone-context=+1"));
    // A sip URI with user=phone is its number, parameters of the number included.
    assert_eq!(
        key("sip:+1-212-555-1234;isub=1@gw.example;user=phone"),
        key("tel:+12125551234;isub=1")
    );
    assert_ne!(
        key("sip:+1-212-555-1234;isub=1@gw.example;user=phone"),
        key("tel:+12125551234")
    );
    // The number itself is unchanged by its parameters (prefix conditions look at it).
    let mut buf = Vec::new();
    let c = canonicalize(parse("tel:+1-212-555-1234;isub=1").expect("ok"), &mut buf);
    assert_eq!(c.number.expect("number").digits, b"12125551234");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// RFC 3966 §4: tel parameters compare regardless of order and case; any parameter
    /// in only one URI makes them unequal.
    #[test]
    fn tel_parameters_are_order_free_and_all_count(
        params in proptest::collection::btree_map("[a-z][a-z0-9-]{0,5}", proptest::option::of("[a-z0-9]{1,4}"), 0..5),
        drop in any::<proptest::sample::Index>(),
    ) {
        let render = |items: &[(&String, &Option<String>)], upper: bool| {
            let mut s = String::from("tel:+1-212-555-0100");
            for (n, v) in items {
                let n = if upper { n.to_uppercase() } else { (*n).clone() };
                s.push(';');
                s.push_str(&n);
                if let Some(v) = v {
                    s.push('=');
                    s.push_str(v);
                }
            }
            s
        };
        let items: Vec<_> = params.iter().collect();
        let reversed: Vec<_> = items.iter().rev().copied().collect();
        prop_assert_eq!(key(&render(&items, false)), key(&render(&reversed, true)));
        if !items.is_empty() {
            let mut fewer = items.clone();
            fewer.remove(drop.index(items.len()));
            prop_assert_ne!(key(&render(&items, false)), key(&render(&fewer, false)));
        }
    }

    /// Escaping an unreserved character never changes a SIP URI's key; escaping a
    /// reserved one always does.
    #[test]
    fn escaping_changes_the_key_only_for_reserved_characters(
        user in "[a-zA-Z0-9_.!~*'()-]{1,8}",
        pos in any::<proptest::sample::Index>(),
        reserved in proptest::sample::select(vec!['&', '=', '+', '$', ',', ';', '?', '/']),
    ) {
        let i = pos.index(user.len());
        let c = user.as_bytes()[i];
        let escaped = format!("sip:{}%{:02x}{}@example.com", &user[..i], c, &user[i + 1..]);
        prop_assert_eq!(key(&escaped), key(&format!("sip:{user}@example.com")));
        let plain = format!("sip:{}{reserved}{}@example.com", &user[..i], &user[i..]);
        let esc = format!("sip:{}%{:02X}{}@example.com", &user[..i], reserved as u8, &user[i..]);
        prop_assert_ne!(key(&plain), key(&esc));
    }
}

/// The word-at-a-time digit count agrees with a byte-by-byte one for every pair of byte values
/// side by side in every position (the arithmetic must not carry from one byte to the next).
#[test]
fn leading_decimal_digits_counts_like_bytes() {
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            for split in 0..=8 {
                let mut word = [b'7'; 8];
                if split < 8 {
                    word[split] = a;
                }
                if split + 1 < 8 {
                    word[split + 1] = b;
                }
                let want = word.iter().take_while(|c| c.is_ascii_digit()).count();
                let got = numbers::leading_decimal_digits(u64::from_le_bytes(word));
                assert_eq!(got, want, "{word:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5_000, ..ProptestConfig::default() })]

    /// Appending a number eight bytes at a time gives what normalising it in place gives, up
    /// to its first `;`.
    #[test]
    fn pushed_numbers_are_normalised_numbers(
        prefix in "[a-z:]{0,5}",
        number in "\\+?[0-9a-fA-F*#().;-]{0,40}|[0-9]{0,30}|.{0,20}",
    ) {
        let mut pushed = prefix.clone().into_bytes();
        let (global, end) = numbers::push_number(number.as_bytes(), &mut pushed);
        prop_assert_eq!(end, number.find(';').unwrap_or(number.len()));
        let mut in_place = prefix.clone().into_bytes();
        in_place.extend_from_slice(&number.as_bytes()[..end]);
        prop_assert_eq!(global, numbers::normalize_number(&mut in_place, prefix.len()));
        prop_assert_eq!(pushed, in_place);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5_000, ..ProptestConfig::default() })]

    /// The one-pass `user=phone` test is `Params::get("user")` compared with `phone`, also on
    /// parameters followed by a URI's `?` and headers.
    #[test]
    fn user_is_phone_is_the_first_user_parameter(
        params in proptest::collection::vec(
            "(user|USER|uSeR|usex|users|use|U5ER|x)(=(phone|PHONE|pHoNe|phon|phones|tel|)|)", 0..4,
        ),
        headers in proptest::collection::vec("(user|user=phone|x=1|)", 0..3),
    ) {
        let text = params.join(";");
        let want = Params(&text)
            .get("user")
            .flatten()
            .is_some_and(|v| v.eq_ignore_ascii_case("phone"));
        prop_assert_eq!(numbers::user_is_phone(Params(&text)), want, "{}", text);
        // A URI's parameters not yet cut at the `?` of its headers give the same answer.
        let uncut = format!("{text}?{}", headers.join(";"));
        prop_assert_eq!(numbers::user_is_phone(Params(&uncut)), want, "{}", uncut);
    }
}

/// Lower-casing eight bytes at a time is `to_ascii_lowercase` on each, whatever the neighbours.
#[test]
fn lower_word_lowers_each_byte() {
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            let bytes = [a, b, b, a, a, b, a, b];
            let got = super::escape::lower_word(u64::from_le_bytes(bytes)).to_le_bytes();
            assert_eq!(got, bytes.map(|c| c.to_ascii_lowercase()), "{bytes:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// Appending lower-cased (word by word, the last word overlapping) is appending and then
    /// `make_ascii_lowercase`, for every length.
    #[test]
    fn extend_lower_is_a_lower_cased_copy(
        before in "[A-Za-z]{0,9}",
        text in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let mut out = before.clone().into_bytes();
        super::escape::extend_lower(&text, &mut out);
        let mut want = before.into_bytes();
        want.extend(text.iter().map(u8::to_ascii_lowercase));
        prop_assert_eq!(out, want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    /// A host read without parsing is the canonical host of every SIP URI that parses (and is
    /// read for all of them but IPv6 references).
    #[test]
    fn peeked_hosts_are_canonical_hosts(
        space in "[ \t]{0,1}",
        scheme in "(sip|SIPS|sips|SiP|tel|x)",
        rest in "[aB1:@;?=%.\\[\\]_F-]{0,24}|[a-z0-9+]{1,12}(@[A-Za-z0-9.-]{1,30})?(:[0-9]{1,5})?(;[a-z=]{1,8})?(\\?[a-z=@]{1,6})?",
    ) {
        let text = format!("{space}{scheme}:{rest}{space}");
        let peeked = peek_host(&text);
        if let Some((host, lower)) = peeked {
            prop_assert_eq!(lower, !host.iter().any(u8::is_ascii_uppercase), "{}", text);
        }
        if let Ok(uri @ UriRef::Sip(s)) = parse(&text) {
            prop_assert_eq!(peeked.is_some(), !s.host.starts_with('['), "{}", text);
            let mut buf = Vec::new();
            let c = canonicalize_parts(uri, &mut buf, Parts { host: true, ..Parts::default() });
            if let Some((host, _)) = peeked {
                prop_assert_eq!(Some(&host.to_ascii_lowercase()[..]), c.host, "{}", text);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    /// A number read without parsing is the canonical number of every URI that parses, under
    /// every reading of SIP user parts; "none" means no number and nothing unread.
    #[test]
    fn peeked_numbers_are_canonical_numbers(
        space in "[ \t]{0,1}",
        scheme in "(sip|SIPS|sips|tel|TEL|urn)",
        user in "\\+?[0-9().-]{0,10}|[a-z0-9+%;=:]{0,8}|\\+1%32|\\+1;isub=2",
        host in "@[a-z.]{1,8}|@\\[::1\\]|",
        params in "(;user=phone|;USER=Phone|;user=ip|;x=1|;phone-context=\\+1|)(;lr|)(\\?a=b;user=phone|)",
        numbers in proptest::sample::select(&SipUserNumbers::ALL[..]),
    ) {
        let text = format!("{space}{scheme}:{user}{host}{params}{space}");
        let peeked = peek_number(&text, numbers);
        if let Ok(uri) = parse(&text) {
            let (mut buf, mut unread) = (Vec::new(), false);
            let parts = Parts { number: true, ..Parts::default() };
            let c = canonicalize_noting(uri, &mut buf, parts, numbers, &mut unread);
            match peeked {
                PeekedNumber::None => prop_assert!(c.number.is_none() && !unread, "{}", text),
                PeekedNumber::Global(written) => {
                    let n = c.number.expect("a number");
                    prop_assert!(n.global && !unread, "{}", text);
                    // The digits of what is written before any other byte start the
                    // canonical digits, and are all of them when nothing else comes before
                    // the end or a `;`.
                    let number = written.split(';').next().unwrap_or("");
                    let clean = number
                        .bytes()
                        .position(|b| !b.is_ascii_digit() && !is_visual_separator(b))
                        .unwrap_or(number.len());
                    let digits: Vec<u8> =
                        number[..clean].bytes().filter(u8::is_ascii_digit).collect();
                    prop_assert!(n.digits.starts_with(&digits), "{}", text);
                    if clean == number.len() {
                        prop_assert_eq!(&digits[..], n.digits, "{}", text);
                    }
                }
                PeekedNumber::Unsure => {}
            }
        }
    }
}
