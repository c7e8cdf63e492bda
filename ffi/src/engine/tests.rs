use std::ffi::c_void;

use super::*;
use crate::worker::{LC_VERDICT_DROP, LC_VERDICT_REDIRECT, LC_VERDICT_REJECT, lc_verdict};
use crate::{Code, lc_result, lc_str};

/// A rate rule (20/s, reject), a percent rule with redirect, a window rule with drop, at
/// version 7.
const FULL_7: &str = r#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
    xmlns:lc="urn:ietf:params:xml:ns:load-control" version="7" state="full">
  <rule id="calls"><conditions><lc:call-identity><lc:sip><lc:to>
      <one id="tel:+1-212-555-1234"/></lc:to></lc:sip></lc:call-identity>
      <method>INVITE</method></conditions>
    <actions><lc:accept alt-action="reject"><lc:rate>20</lc:rate></lc:accept></actions></rule>
  <rule id="messages"><conditions><method>MESSAGE</method></conditions>
    <actions><lc:accept alt-action="redirect"
        alt-target="sip:a@alt.example.com sip:b@alt.example.com"><lc:percent>30</lc:percent>
      </lc:accept></actions></rule>
  <rule id="registrations"><conditions><method>REGISTER</method></conditions>
    <actions><lc:accept alt-action="drop"><lc:win>5</lc:win></lc:accept></actions></rule>
</ruleset>"#;

/// Version 8: `calls` retuned to 12.5/s.
const PARTIAL_8: &str = r#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
    xmlns:lc="urn:ietf:params:xml:ns:load-control" version="8" state="partial">
  <rule id="calls"><conditions><lc:call-identity><lc:sip><lc:to>
      <one id="tel:+1-212-555-1234"/></lc:to></lc:sip></lc:call-identity>
      <method>INVITE</method></conditions>
    <actions><lc:accept alt-action="reject"><lc:rate>12.5</lc:rate></lc:accept></actions></rule>
</ruleset>"#;

/// A full document of no rules at version 3.
const EMPTY_3: &str = r#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
    version="3" state="full"/>"#;

fn s(v: &str) -> lc_str {
    lc_str::from_bytes(v.as_bytes())
}

/// An engine with the defaults.
fn new_engine() -> *mut lc_engine {
    let mut e = std::ptr::null_mut();
    // SAFETY: NULL config (the defaults), a valid output place.
    assert_eq!(
        unsafe { lc_engine_new(std::ptr::null(), &mut e) },
        crate::LC_RESULT_OK
    );
    e
}

/// `lc_engine_publish` (`full`) or `lc_engine_apply` of `doc` from the local source `source`.
fn put(e: *const lc_engine, source: &str, doc: &str, full: bool) -> lc_result {
    let mut generation = 0;
    let f = if full {
        lc_engine_publish
    } else {
        lc_engine_apply
    };
    // SAFETY: `e` is live; the strings and the body are readable for the call.
    unsafe {
        f(
            e,
            s(source),
            lc_str::NONE,
            doc.as_ptr(),
            doc.len(),
            &mut generation,
        )
    }
}

/// An `lc_rule_info` row, copied out of the callback.
#[derive(Debug, PartialEq)]
struct Row {
    index: usize,
    source: String,
    rule: String,
    text: String,
    source_version: u32,
    limit_kind: lc_limit_kind,
    limit: f64,
    alt_targets: String,
    alt_action: lc_verdict,
}

/// The row `lc_engine_rules_each` expects from this test's documents (`text` left empty).
fn row(
    index: usize,
    source: &str,
    rule: &str,
    source_version: u32,
    (limit_kind, limit): (lc_limit_kind, f64),
    (alt_action, alt_targets): (lc_verdict, &str),
) -> Row {
    Row {
        index,
        source: source.into(),
        rule: rule.into(),
        text: String::new(),
        source_version,
        limit_kind,
        limit,
        alt_targets: alt_targets.into(),
        alt_action,
    }
}

/// The string a row's `lc_str` holds.
///
/// # Safety
/// `v` readable (during the callback).
unsafe fn text_of(v: lc_str) -> String {
    // SAFETY: by the caller's contract.
    let bytes = unsafe { v.bytes() }.expect("a row's strings are never NULL");
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// What the callbacks collect into (`userdata`); `publish` is published to `engine` from
/// the first callback.
struct Collected {
    rows: Vec<Row>,
    engine: *const lc_engine,
    publish: Option<&'static str>,
}

unsafe extern "C" fn collect(userdata: *mut c_void, row: *const lc_rule_info) {
    // SAFETY: the tests pass a `Collected` as userdata; `row` is valid during the call.
    let (c, row) = unsafe { (&mut *userdata.cast::<Collected>(), &*row) };
    // SAFETY: the row's strings are valid during the callback.
    let (source, rule, text, alt_targets) = unsafe {
        (
            text_of(row.source),
            text_of(row.rule),
            text_of(row.text),
            text_of(row.alt_targets),
        )
    };
    c.rows.push(Row {
        index: row.index,
        source,
        rule,
        text,
        source_version: row.source_version,
        limit_kind: row.limit_kind,
        limit: row.limit,
        alt_targets,
        alt_action: row.alt_action,
    });
    if let Some(doc) = c.publish.take() {
        assert_eq!(put(c.engine, "b", doc, true), crate::LC_RESULT_OK);
    }
}

/// The rows of `e`'s published policy, each `text` checked to start with its rule id and
/// then left out (it is for people); with `publish`, published from the first callback.
fn rules_of(e: *const lc_engine, publish: Option<&'static str>) -> Vec<Row> {
    let mut c = Collected {
        rows: Vec::new(),
        engine: e,
        publish,
    };
    // SAFETY: `e` is live; `collect` never unwinds (a panic in an `extern "C"` function
    // aborts); `c` outlives the call.
    let r = unsafe { lc_engine_rules_each(e, Some(collect), (&raw mut c).cast()) };
    assert_eq!(r, crate::LC_RESULT_OK);
    for r in &mut c.rows {
        assert!(r.text.starts_with(&format!("{}: ", r.rule)), "{}", r.text);
        r.text.clear();
    }
    c.rows
}

fn version_of(e: *const lc_engine, source: &str) -> (lc_result, u32) {
    let mut v = u32::MAX;
    // SAFETY: `e` live, `source` readable, `v` writable.
    let r = unsafe { lc_engine_source_version(e, s(source), &mut v) };
    (r, v)
}

#[test]
fn rules_each_describes_every_rule_and_source_version_follows_partial_documents() {
    let e = new_engine();
    assert_eq!(rules_of(e, None), []);
    assert_eq!(
        version_of(e, "a"),
        (crate::LC_RESULT_UNKNOWN_SOURCE, u32::MAX)
    );
    assert_eq!(put(e, "a", FULL_7, true), crate::LC_RESULT_OK);
    let redirect = (
        LC_VERDICT_REDIRECT,
        "sip:a@alt.example.com sip:b@alt.example.com",
    );
    let at = |v: u32, rate: f64| {
        vec![
            row(
                0,
                "a",
                "calls",
                v,
                (LC_LIMIT_RATE, rate),
                (LC_VERDICT_REJECT, ""),
            ),
            row(1, "a", "messages", v, (LC_LIMIT_PERCENT, 30.0), redirect),
            row(
                2,
                "a",
                "registrations",
                v,
                (LC_LIMIT_WINDOW, 5.0),
                (LC_VERDICT_DROP, ""),
            ),
        ]
    };
    assert_eq!(rules_of(e, None), at(7, 20.0));
    assert_eq!(version_of(e, "a"), (crate::LC_RESULT_OK, 7));
    assert_eq!(put(e, "a", PARTIAL_8, false), crate::LC_RESULT_OK);
    assert_eq!(rules_of(e, None), at(8, 12.5));
    assert_eq!(version_of(e, "a"), (crate::LC_RESULT_OK, 8));
    // A source without rules has a version and no row.
    assert_eq!(put(e, "empty", EMPTY_3, true), crate::LC_RESULT_OK);
    assert_eq!(rules_of(e, None).len(), 3);
    assert_eq!(version_of(e, "empty"), (crate::LC_RESULT_OK, 3));
    // Publishing from the callback: the remaining rows are still the old snapshot's.
    assert_eq!(rules_of(e, Some(FULL_7)), at(8, 12.5));
    let mut now = at(8, 12.5);
    now.extend(at(7, 20.0).into_iter().map(|r| Row {
        index: r.index + 3,
        source: "b".into(),
        ..r
    }));
    assert_eq!(rules_of(e, None), now);
    // Withdrawn: unknown again.
    let mut g = 0;
    // SAFETY: `e` live, `g` writable.
    assert_eq!(
        unsafe { lc_engine_withdraw(e, s("empty"), &mut g) },
        crate::LC_RESULT_OK
    );
    assert_eq!(
        version_of(e, "empty"),
        (crate::LC_RESULT_UNKNOWN_SOURCE, u32::MAX)
    );
    // SAFETY: from lc_engine_new, freed once.
    unsafe { lc_engine_free(e) };
}

#[test]
fn rules_each_and_source_version_check_their_arguments() {
    let e = new_engine();
    assert_eq!(put(e, "a", FULL_7, true), crate::LC_RESULT_OK);
    let mut v = u32::MAX;
    // SAFETY: every non-NULL pointer is valid; NULL ones are refused before use.
    unsafe {
        assert_eq!(
            lc_engine_rules_each(e, None, std::ptr::null_mut()),
            crate::LC_RESULT_NULL_PARAMETER
        );
        assert_eq!(
            lc_engine_rules_each(std::ptr::null(), Some(collect), std::ptr::null_mut()),
            crate::LC_RESULT_NULL_PARAMETER
        );
        assert_eq!(
            lc_engine_source_version(std::ptr::null(), s("a"), &mut v),
            crate::LC_RESULT_NULL_PARAMETER
        );
        assert_eq!(
            lc_engine_source_version(e, s("a"), std::ptr::null_mut()),
            crate::LC_RESULT_NULL_PARAMETER
        );
        assert_eq!(
            lc_engine_source_version(e, lc_str::NONE, &mut v),
            crate::LC_RESULT_NULL_PARAMETER
        );
        let bad = [b'a', 0xff];
        assert_eq!(
            lc_engine_source_version(e, lc_str::from_bytes(&bad), &mut v),
            crate::LC_RESULT_INVALID_UTF8
        );
        assert_eq!(
            lc_engine_source_version(e, s("A"), &mut v),
            crate::LC_RESULT_UNKNOWN_SOURCE
        );
        assert_eq!(v, u32::MAX, "a failing call writes no output");
        lc_engine_free(e);
    }
}

#[test]
fn a_rows_text_is_the_rules_display() {
    let e = new_engine();
    assert_eq!(put(e, "a", FULL_7, true), crate::LC_RESULT_OK);
    let mut c = Collected {
        rows: Vec::new(),
        engine: e,
        publish: None,
    };
    // SAFETY: as in `rules_of`.
    let r = unsafe { lc_engine_rules_each(e, Some(collect), (&raw mut c).cast()) };
    assert_eq!(r, crate::LC_RESULT_OK);
    // SAFETY: `e` is live.
    let snapshot = unsafe { &*e }.engine().snapshot();
    let texts: Vec<String> = snapshot.rules().map(|r| r.rule.to_string()).collect();
    let got: Vec<&str> = c.rows.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(got, texts);
    assert!(got[0].contains("rate 20/s"), "{}", got[0]);
    // SAFETY: from lc_engine_new, freed once.
    unsafe { lc_engine_free(e) };
}

#[test]
fn the_default_namespaces_are_the_engines() {
    assert_eq!(
        namespaces(DEFAULT_NAMESPACES.as_bytes()),
        Ok(loadctl::runtime::Exemptions::default().resource_priority)
    );
}

#[test]
fn namespace_lists_are_checked() {
    assert_eq!(
        namespaces(b" ETS,wps ,, q735 "),
        Ok(vec!["ets".into(), "wps".into(), "q735".into()])
    );
    assert_eq!(namespaces(b""), Ok(Vec::new()));
    assert_eq!(namespaces(b"ets.0"), Err(Code::InvalidArgument));
    assert_eq!(namespaces(b"ets;x"), Err(Code::InvalidArgument));
    assert_eq!(namespaces(b"\xff"), Err(Code::InvalidUtf8));
}
