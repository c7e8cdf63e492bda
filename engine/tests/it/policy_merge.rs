//! Partial updates by rule id, deletion, and the version rules.

use loadctl::policy::*;

fn doc(version: u32, state: &str, rules: &[(&str, &str)]) -> Ruleset {
    let mut text = format!(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"{version}\" state=\"{state}\">"
    );
    for (id, rate) in rules {
        if rate.is_empty() {
            text.push_str(&format!("<rule id=\"{id}\"><actions/></rule>"));
        } else {
            text.push_str(&format!(
                "<rule id=\"{id}\"><actions><accept><rate>{rate}</rate></accept></actions></rule>"
            ));
        }
    }
    text.push_str("</ruleset>");
    read(text.as_bytes(), &Limits::default())
        .expect("valid")
        .ruleset
}

fn summary(rs: &Ruleset) -> Vec<(String, f64)> {
    rs.rules()
        .expect("full")
        .iter()
        .map(|r| match r.accept.limit {
            Limit::Rate(rate) => (r.id.to_string(), rate.per_second()),
            _ => unreachable!("only rates here"),
        })
        .collect()
}

#[test]
fn partial_replaces_in_place_and_appends_new_ids() {
    let base = doc(4, "full", &[("a", "1"), ("b", "2"), ("c", "3")]);
    let update = doc(5, "partial", &[("b", "20"), ("d", "4")]);
    let merged = merge(Some(&base), update, &Limits::default()).expect("applies");
    assert_eq!(merged.version(), 5);
    assert_eq!(merged.state(), State::Full);
    assert_eq!(
        summary(&merged),
        [
            ("a".into(), 1.0),
            ("b".into(), 20.0),
            ("c".into(), 3.0),
            ("d".into(), 4.0)
        ]
    );
}

#[test]
fn rule_without_accept_in_partial_deletes_that_id() {
    let base = doc(0, "full", &[("a", "1"), ("b", "2"), ("c", "3")]);
    let update = doc(1, "partial", &[("b", "")]);
    assert_eq!(
        update.body(),
        &Body::Partial(vec![Change::Delete(RuleId::new("b").expect("id"))])
    );
    let merged = merge(Some(&base), update, &Limits::default()).expect("applies");
    assert_eq!(summary(&merged), [("a".into(), 1.0), ("c".into(), 3.0)]);
}

#[test]
fn deleted_then_re_added_id_goes_to_the_end() {
    let base = doc(0, "full", &[("a", "1"), ("b", "2")]);
    let v1 = merge(
        Some(&base),
        doc(1, "partial", &[("a", "")]),
        &Limits::default(),
    )
    .expect("v1");
    let v2 = merge(
        Some(&v1),
        doc(2, "partial", &[("a", "9")]),
        &Limits::default(),
    )
    .expect("v2");
    assert_eq!(summary(&v2), [("b".into(), 2.0), ("a".into(), 9.0)]);
}

#[test]
fn deleting_an_unknown_id_is_refused() {
    let base = doc(0, "full", &[("a", "1")]);
    let e = merge(
        Some(&base),
        doc(1, "partial", &[("zz", "")]),
        &Limits::default(),
    )
    .expect_err("refused");
    assert_eq!(e, MergeError::UnknownRule(RuleId::new("zz").expect("id")));
}

#[test]
fn partial_needs_exactly_the_next_version() {
    let base = doc(7, "full", &[("a", "1")]);
    for got in [7, 9, 100, 0] {
        let e = merge(
            Some(&base),
            doc(got, "partial", &[("a", "2")]),
            &Limits::default(),
        )
        .expect_err("gap");
        assert_eq!(e, MergeError::VersionGap { expected: 8, got });
    }
    // The base is untouched by a refused merge (it is borrowed, and the result is new).
    assert_eq!(summary(&base), [("a".into(), 1.0)]);
}

#[test]
fn no_partial_after_the_last_version() {
    let base = doc(u32::MAX, "full", &[("a", "1")]);
    let e = merge(Some(&base), doc(0, "partial", &[]), &Limits::default()).expect_err("gap");
    assert_eq!(
        e,
        MergeError::VersionGap {
            expected: 1 << 32,
            got: 0
        }
    );
}

#[test]
fn partial_without_base_is_refused() {
    let e = merge(None, doc(1, "partial", &[("a", "1")]), &Limits::default()).expect_err("no base");
    assert_eq!(e, MergeError::NoBase { got: 1 });
}

#[test]
fn partial_base_is_refused() {
    let base = doc(1, "partial", &[("a", "1")]);
    let e = merge(Some(&base), doc(2, "partial", &[]), &Limits::default()).expect_err("base");
    assert_eq!(e, MergeError::BaseNotFull);
}

#[test]
fn full_replaces_everything_whatever_its_version() {
    let base = doc(10, "full", &[("a", "1"), ("b", "2")]);
    let merged = merge(
        Some(&base),
        doc(3, "full", &[("z", "5")]),
        &Limits::default(),
    )
    .expect("full");
    assert_eq!(merged.version(), 3);
    assert_eq!(summary(&merged), [("z".into(), 5.0)]);
    let first = merge(None, doc(0, "full", &[]), &Limits::default()).expect("full");
    assert!(first.is_empty());
}

#[test]
fn merged_policy_respects_the_rule_limit() {
    let limits = {
        let mut l = Limits::default();
        l.max_rules = 2;
        l
    };
    let base = doc(0, "full", &[("a", "1"), ("b", "2")]);
    let e = merge(Some(&base), doc(1, "partial", &[("c", "3")]), &limits).expect_err("too many");
    assert_eq!(e, MergeError::TooManyRules { max: 2 });
    // Replacing in place stays within the limit.
    merge(Some(&base), doc(1, "partial", &[("a", "3")]), &limits).expect("in place");
}

#[test]
fn version_gap_message_tells_the_subscriber_what_to_do() {
    let e = MergeError::VersionGap {
        expected: 8,
        got: 10,
    };
    assert_eq!(
        e.to_string(),
        "partial document has version 10, expected 8: re-SUBSCRIBE for a full policy"
    );
}
