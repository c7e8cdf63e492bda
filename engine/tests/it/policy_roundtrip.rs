//! Property tests of the document layer: `read(write(r)) == r` for generated rulesets, and the
//! reader never panics on random bytes or on mutations of valid documents.

use loadctl::policy::*;
use proptest::prelude::*;

fn uri() -> impl Strategy<Value = Uri> {
    prop_oneof![
        (
            "(sip|sips)",
            "[a-zA-Z0-9._+-]{1,12}(%2[0-9A-F])?",
            "[a-z0-9-]{1,10}(\\.[a-z]{2,5}){1,2}"
        )
            .prop_map(|(s, u, h)| format!("{s}:{u}@{h}")),
        (
            "[a-z0-9-]{1,10}\\.[a-z]{2,4}",
            "(;transport=tcp|;user=phone|;lr)?"
        )
            .prop_map(|(h, p)| format!("sip:{h}{p}")),
        "\\+?[0-9][0-9.()-]{0,14}".prop_map(|n| format!("tel:{n}")),
        // Characters that need escaping in XML attributes and text.
        "[a-z]{1,5}".prop_map(|u| format!("sip:{u}@x.example;a=1&b='2'?h=%3C&i")),
    ]
    .prop_map(|s| Uri::new(&s).expect("generated URIs are valid"))
}

fn domain() -> impl Strategy<Value = Domain> {
    "[a-z0-9-]{1,10}(\\.[a-z]{2,5}){0,2}".prop_map(|s| Domain::new(&s).expect("domain"))
}

fn prefix() -> impl Strategy<Value = TelPrefix> {
    prop_oneof![
        "\\+[0-9]{1,3}(-[0-9]{1,4}){0,2}",
        "[0-9]{1,6}",
        "[a-z]{2,8}\\.example",
    ]
    .prop_map(|s| TelPrefix::new(&s).expect("prefix"))
}

fn identity() -> impl Strategy<Value = Identity> {
    let except = prop_oneof![
        domain().prop_map(Except::Domain),
        uri().prop_map(Except::Id)
    ];
    let except_tel = prop_oneof![
        prefix().prop_map(ExceptTel::Prefix),
        uri().prop_map(ExceptTel::Id)
    ];
    prop_oneof![
        uri().prop_map(Identity::One),
        (
            proptest::option::of(domain()),
            proptest::collection::vec(except, 0..3)
        )
            .prop_map(|(domain, except)| Identity::Many { domain, except }),
        (
            proptest::option::of(prefix()),
            proptest::collection::vec(except_tel, 0..3)
        )
            .prop_map(|(prefix, except)| Identity::ManyTel { prefix, except }),
    ]
}

fn identity_set() -> impl Strategy<Value = IdentitySet> {
    proptest::collection::vec(identity(), 1..4).prop_map(|v| IdentitySet {
        identities: NonEmpty::new(v).expect("non-empty"),
    })
}

fn sip_identity() -> impl Strategy<Value = SipIdentity> {
    (
        proptest::option::of(identity_set()),
        proptest::option::of(identity_set()),
        proptest::option::of(identity_set()),
        proptest::option::of(identity_set()),
    )
        .prop_filter("a <sip> needs a field", |(a, b, c, d)| {
            a.is_some() || b.is_some() || c.is_some() || d.is_some()
        })
        .prop_map(|(from, to, request_uri, p_asserted_identity)| SipIdentity {
            from,
            to,
            request_uri,
            p_asserted_identity,
        })
}

fn timestamp() -> impl Strategy<Value = Timestamp> {
    (0i64..4_000_000_000, 0u32..3, -56i16..=56).prop_map(|(secs, frac, quarter_hours)| {
        let nanos = [0, 500_000_000, 123_456_789][frac as usize];
        let text = Timestamp::from_unix(secs, nanos).to_string();
        // Re-express in another offset through the parser, so offsets are exercised too.
        let t = Timestamp::parse(&text).expect("own output parses");
        let offset = i64::from(quarter_hours) * 15;
        let local = Timestamp::from_unix(t.unix_seconds() + offset * 60, nanos).to_string();
        let sign = if offset < 0 { '-' } else { '+' };
        let text = format!(
            "{}{sign}{:02}:{:02}",
            local.trim_end_matches('Z'),
            offset.abs() / 60,
            offset.abs() % 60
        );
        Timestamp::parse(&text).expect("offset form parses")
    })
}

fn validity() -> impl Strategy<Value = Validity> {
    proptest::collection::vec((timestamp(), 1i64..1_000_000), 1..3).prop_map(|pairs| {
        let intervals = pairs
            .into_iter()
            .map(|(from, len)| {
                let until = Timestamp::from_unix(from.unix_seconds() + len, from.subsec_nanos());
                Interval::new(from, until).expect("ordered")
            })
            .collect();
        Validity {
            intervals: NonEmpty::new(intervals).expect("non-empty"),
        }
    })
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        Just("INVITE"),
        Just("MESSAGE"),
        Just("REGISTER"),
        Just("SUBSCRIBE"),
        Just("OPTIONS"),
        Just("PUBLISH"),
        Just("FOO-BAR")
    ]
    .prop_map(|m| Method::new(m).expect("method"))
}

fn conditions() -> impl Strategy<Value = Conditions> {
    (
        proptest::option::of(proptest::collection::vec(sip_identity(), 1..3)),
        proptest::option::of(method()),
        proptest::option::of(uri()),
        proptest::option::of(validity()),
        proptest::collection::vec(
            (
                proptest::option::of("urn:example:[a-z]{1,5}"),
                "[a-z][a-z0-9-]{0,6}",
            ),
            0..2,
        ),
    )
        .prop_map(|(sips, method, target, validity, foreign)| Conditions {
            call_identity: sips.map(|s| CallIdentity {
                sip: NonEmpty::new(s).expect("non-empty"),
            }),
            method,
            target_sip_entity: target,
            validity,
            unsupported: foreign
                .into_iter()
                .map(|(ns, name)| ForeignElement::new(ns, name).expect("ncname"))
                .collect(),
        })
}

fn accept() -> impl Strategy<Value = Accept> {
    let limit = prop_oneof![
        (0u32..1_000_000, 0u32..4).prop_map(|(n, d)| Limit::Rate(
            Rate::new(f64::from(n) / 10f64.powi(d as i32)).expect("rate")
        )),
        (0u32..=10_000)
            .prop_map(|n| Limit::Percent(Percent::new(f64::from(n) / 100.0).expect("p"))),
        any::<u32>().prop_map(Limit::Window),
    ];
    let alt = prop_oneof![
        Just(AltAction::Reject),
        Just(AltAction::Drop),
        proptest::collection::vec(uri(), 1..3)
            .prop_map(|t| AltAction::Redirect(NonEmpty::new(t).expect("non-empty"))),
    ];
    (limit, alt).prop_map(|(limit, alt_action)| Accept { limit, alt_action })
}

fn rule_id() -> impl Strategy<Value = RuleId> {
    "[a-zA-Z0-9_&<>\"' -]{0,10}[a-z0-9]".prop_map(|s| RuleId::new(s.trim()).expect("id"))
}

fn rules() -> impl Strategy<Value = Vec<Rule>> {
    proptest::collection::vec((rule_id(), conditions(), accept()), 0..6).prop_map(|v| {
        let mut seen = std::collections::HashSet::new();
        v.into_iter()
            .filter(|(id, _, _)| seen.insert(id.clone()))
            .map(|(id, conditions, accept)| Rule {
                id,
                conditions,
                accept,
            })
            .collect()
    })
}

fn ruleset() -> impl Strategy<Value = Ruleset> {
    prop_oneof![
        (any::<u32>(), rules()).prop_map(|(v, r)| Ruleset::full(v, r).expect("unique")),
        (
            any::<u32>(),
            rules(),
            proptest::collection::vec(any::<bool>(), 6)
        )
            .prop_map(|(v, r, deletes)| {
                let changes = r
                    .into_iter()
                    .zip(deletes)
                    .map(|(rule, delete)| {
                        if delete {
                            Change::Delete(rule.id)
                        } else {
                            Change::Put(rule)
                        }
                    })
                    .collect();
                Ruleset::partial(v, changes).expect("unique")
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn write_then_read_gives_the_same_ruleset(rs in ruleset()) {
        let text = write(&rs);
        let back = read(text.as_bytes(), &Limits::default())
            .unwrap_or_else(|e| panic!("own output rejected: {e}\n{text}"));
        prop_assert_eq!(&back.ruleset, &rs);
        // Writing is canonical: the same ruleset gives the same bytes.
        prop_assert_eq!(write(&back.ruleset), text);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = read(&bytes, &Limits::default());
    }

    #[test]
    fn mutations_of_valid_documents_never_panic(
        rs in ruleset(),
        edits in proptest::collection::vec((any::<proptest::sample::Index>(), 0u8..4, any::<u8>()), 1..8),
    ) {
        let mut bytes = write(&rs).into_bytes();
        for (at, op, byte) in edits {
            if bytes.is_empty() { break; }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => { bytes.remove(i); }
                2 => bytes.insert(i, byte),
                _ => {
                    // Duplicate a slice: repeats elements and attributes.
                    let end = (i + usize::from(byte)).min(bytes.len());
                    let chunk = bytes[i..end].to_vec();
                    bytes.splice(i..i, chunk);
                }
            }
        }
        if let Ok(doc) = read(&bytes, &Limits::default()) {
            // Whatever was accepted must survive a round trip too.
            let text = write(&doc.ruleset);
            let back = read(text.as_bytes(), &Limits::default()).expect("own output is valid");
            prop_assert_eq!(back.ruleset, doc.ruleset);
        }
    }
}

#[test]
fn rfc_examples_round_trip() {
    for doc in [
        include_str!("../data/rfc7200-example1.xml"),
        include_str!("../data/rfc7200-example2.xml"),
        include_str!("../data/rfc7200-example3.xml"),
    ] {
        let rs = read(doc.as_bytes(), &Limits::default())
            .expect("valid")
            .ruleset;
        let back = read(write(&rs).as_bytes(), &Limits::default())
            .expect("valid")
            .ruleset;
        assert_eq!(back, rs);
    }
}
