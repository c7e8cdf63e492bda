//! The policy reader: RFC 7200 Appendix D.1 examples, every rejection with its position, the
//! extensibility rules of RFC 4745, and limits.

use loadctl::policy::*;

const EXAMPLE1: &str = include_str!("../data/rfc7200-example1.xml");
const EXAMPLE2: &str = include_str!("../data/rfc7200-example2.xml");
const EXAMPLE3: &str = include_str!("../data/rfc7200-example3.xml");

fn ok(doc: &str) -> Document {
    match read(doc.as_bytes(), &Limits::default()) {
        Ok(d) => d,
        Err(e) => panic!("expected a valid document, got {e}\n{doc}"),
    }
}

fn err(doc: &str) -> PolicyError {
    err_with(doc, &Limits::default())
}

fn err_with(doc: &str, limits: &Limits) -> PolicyError {
    match read(doc.as_bytes(), limits) {
        Ok(d) => panic!("expected an error, got {:?}\n{doc}", d.ruleset),
        Err(e) => e,
    }
}

fn pos(line: u32, column: u32) -> Position {
    Position { line, column }
}

/// A one-rule full document; `conditions` and `actions` are the inner XML of the rule.
fn rule_doc(conditions: &str, actions: &str) -> String {
    format!(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\"\n\
         \x20        xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\">\n\
         <rule id=\"r1\">\n\
         <conditions>{conditions}</conditions>\n\
         <actions>{actions}</actions>\n\
         </rule>\n\
         </ruleset>\n"
    )
}

const RATE: &str = "<lc:accept><lc:rate>10</lc:rate></lc:accept>";

fn accept_doc(accept: &str) -> String {
    rule_doc("", accept)
}

// ---------------------------------------------------------------- RFC examples

#[test]
fn rfc_example_1_hotline() {
    let d = ok(EXAMPLE1);
    let rs = d.ruleset;
    assert_eq!((rs.version(), rs.state()), (0, State::Full));
    let rules = rs.rules().expect("full");
    assert_eq!(rules.len(), 1);
    let r = &rules[0];
    assert_eq!(r.id.as_str(), "f3g44k1");
    let ci = r.conditions.call_identity.as_ref().expect("call-identity");
    let to = ci.sip.first().to.as_ref().expect("to");
    let ids: Vec<_> = to
        .identities
        .iter()
        .map(|i| match i {
            Identity::One(u) => u.as_str().to_owned(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        ids,
        ["sip:alice@hotline.example.com", "tel:+1-212-555-1234"]
    );
    assert_eq!(r.conditions.method, Some(Method::Invite));
    let v = r.conditions.validity.as_ref().expect("validity");
    assert_eq!(v.intervals.len(), 1);
    assert_eq!(
        v.intervals[0].from().to_string(),
        "2008-05-31T12:00:00-05:00"
    );
    assert_eq!(
        v.intervals[0].until().unix_seconds() - v.intervals[0].from().unix_seconds(),
        3 * 3600
    );
    assert_eq!(r.accept.limit, Limit::Rate(Rate::new(100.0).expect("rate")));
    assert_eq!(r.accept.alt_action, AltAction::Reject);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
}

#[test]
fn rfc_example_2_hurricane() {
    let rs = ok(EXAMPLE2).ruleset;
    assert_eq!((rs.version(), rs.state()), (1, State::Full));
    let r = &rs.rules().expect("full")[0];
    let sip = r.conditions.call_identity.as_ref().expect("ci").sip.first();
    let to = &sip.to.as_ref().expect("to").identities;
    assert_eq!(
        to[0],
        Identity::Many {
            domain: Some(Domain::new("sandy.example.com").expect("domain")),
            except: vec![]
        }
    );
    assert_eq!(
        to[1],
        Identity::ManyTel {
            prefix: Some(TelPrefix::new("+1-212").expect("prefix")),
            except: vec![]
        }
    );
    let from = &sip.from.as_ref().expect("from").identities;
    assert_eq!(
        from[0],
        Identity::Many {
            domain: None,
            except: vec![
                Except::Domain(Domain::new("sandy.example.com").expect("d")),
                Except::Domain(Domain::new("rescue.example.com").expect("d")),
            ]
        }
    );
    assert_eq!(
        r.accept.alt_action,
        AltAction::Redirect(NonEmpty::one(
            Uri::new("sip:sandy@update.example.com").expect("uri")
        ))
    );
}

#[test]
fn rfc_example_3_first_match_wins_order_kept() {
    let rs = ok(EXAMPLE3).ruleset;
    let ids: Vec<_> = rs
        .rules()
        .expect("full")
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(ids, ["f3g44k3", "f3g44k4"]);
    let r = &rs.rules().expect("full")[0];
    assert_eq!(r.accept.limit, Limit::Rate(Rate::new(0.0).expect("rate")));
}

#[test]
fn elements_accepted_from_either_namespace() {
    // Everything in the load-control namespace (as the RFC's schema has it) …
    let lc = r#"<lc:ruleset xmlns:lc="urn:ietf:params:xml:ns:load-control" version="3" state="full">
      <lc:rule id="a"><lc:conditions><lc:call-identity><lc:sip><lc:to><lc:many-tel prefix="+33"/></lc:to></lc:sip></lc:call-identity><lc:method>MESSAGE</lc:method></lc:conditions>
      <lc:actions><lc:accept><lc:percent>12.5</lc:percent></lc:accept></lc:actions></lc:rule></lc:ruleset>"#;
    // … and everything in common-policy (default namespace, as some examples have it).
    let cp = r#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy" version="3" state="full">
      <rule id="a"><conditions><call-identity><sip><to><many-tel prefix="+33"/></to></sip></call-identity><method>MESSAGE</method></conditions>
      <actions><accept><percent>12.5</percent></accept></actions></rule></ruleset>"#;
    let a = ok(lc).ruleset;
    let b = ok(cp).ruleset;
    assert_eq!(a, b);
    assert_eq!(
        a.rules().expect("full")[0].accept.limit,
        Limit::Percent(Percent::new(12.5).expect("p"))
    );
}

#[test]
fn xml_declaration_comments_cdata_entities_and_bom() {
    let doc = "\u{feff}<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!-- policy -->\n\
        <ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">\
        <rule id=\"a&amp;b\"><conditions><method><![CDATA[INVITE]]></method>\
        <target-sip-entity>sip:proxy.example.com;x=1&amp;y</target-sip-entity></conditions>\
        <actions><accept><win>&#52;2</win></accept></actions></rule></ruleset>";
    let rs = ok(doc).ruleset;
    let r = &rs.rules().expect("full")[0];
    assert_eq!(r.id.as_str(), "a&b");
    assert_eq!(r.conditions.method, Some(Method::Invite));
    assert_eq!(
        r.conditions.target_sip_entity.as_ref().map(Uri::as_str),
        Some("sip:proxy.example.com;x=1&y")
    );
    assert_eq!(r.accept.limit, Limit::Window(42));
}

#[test]
fn several_validity_intervals_and_many_tel_excepts() {
    let doc = rule_doc(
        r#"<lc:call-identity><lc:sip><lc:to><many-tel prefix="+1-800"><except-tel prefix="+1-800-555"/><except-tel id="tel:+18001234567"/></many-tel></lc:to>
           <lc:request-uri><one id="sip:vote@tv.example.com"/></lc:request-uri></lc:sip>
           <lc:sip><lc:p-asserted-identity><many domain="example.net"><except id="sip:boss@example.net"/></many></lc:p-asserted-identity></lc:sip></lc:call-identity>
           <validity><from>2026-1-2T10:00:00Z</from><until>2026-01-02T11:00:00Z</until><from>2026-01-03T10:00:00.5+02:00</from><until>2026-01-03T11:00:00+02:00</until></validity>"#,
        r#"<lc:accept alt-action="drop"><lc:win>5</lc:win></lc:accept>"#,
    );
    let rs = ok(&doc).ruleset;
    let r = &rs.rules().expect("full")[0];
    let ci = r.conditions.call_identity.as_ref().expect("ci");
    assert_eq!(ci.sip.len(), 2);
    match &ci.sip[0].to.as_ref().expect("to").identities[0] {
        Identity::ManyTel { prefix, except } => {
            assert_eq!(
                prefix.as_ref().and_then(TelPrefix::digits).as_deref(),
                Some("+1800")
            );
            assert_eq!(except.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    assert!(ci.sip[0].request_uri.is_some());
    assert!(ci.sip[1].p_asserted_identity.is_some());
    assert_eq!(
        r.conditions.validity.as_ref().expect("v").intervals.len(),
        2
    );
    assert_eq!(r.accept.alt_action, AltAction::Drop);
}

// ------------------------------------------------ RFC 4745 extensibility

#[test]
fn unknown_namespace_condition_makes_rule_never_match_without_failing() {
    let doc = rule_doc(
        r#"<x:geo xmlns:x="urn:example:geo"><x:area>51</x:area></x:geo><method>INVITE</method>"#,
        RATE,
    );
    let d = ok(&doc);
    let r = &d.ruleset.rules().expect("full")[0];
    assert!(r.conditions.never_matches());
    assert_eq!(
        r.conditions.unsupported[0].namespace(),
        Some("urn:example:geo")
    );
    assert_eq!(r.conditions.unsupported[0].name(), "geo");
    assert_eq!(d.warnings.len(), 1);
    assert_eq!(d.warnings[0].position, pos(4, 13));
    assert_eq!(d.warnings[0].rule.as_deref(), Some("r1"));
}

/// Found by the `policy_read` fuzz target: a foreign namespace whose declaration held `<` and
/// `>` was kept as written, the writer escaped it, and reading that back gave another name.
#[test]
fn namespace_names_are_unescaped_and_lt_in_attributes_refused() {
    let crash = include_bytes!("../data/fuzz/policy_read-round-trip-1.bin");
    let e = read(crash, &Limits::default()).expect_err("'<' in an attribute value");
    assert!(matches!(e.kind, ErrorKind::Xml(_)), "{e}");
    let e = err(&rule_doc(
        r#"<x:geo xmlns:x="urn:a<b"/><method>INVITE</method>"#,
        RATE,
    ));
    assert!(matches!(e.kind, ErrorKind::Xml(_)), "{e}");
    let e = err(&rule_doc(r#"<geo xmlns:="urn:x"/>"#, RATE));
    assert!(matches!(e.kind, ErrorKind::Xml(_)), "{e}");
    // A namespace name written with references is the name they stand for, and survives a
    // write and a read.
    let d = ok(&rule_doc(
        r#"<x:geo xmlns:x="urn:a&amp;b&#x3e;c"/><method>INVITE</method>"#,
        RATE,
    ));
    let r = &d.ruleset.rules().expect("full")[0];
    assert_eq!(r.conditions.unsupported[0].namespace(), Some("urn:a&b>c"));
    let again = read(write(&d.ruleset).as_bytes(), &Limits::default()).expect("reads back");
    assert_eq!(again.ruleset, d.ruleset);
    // The known namespaces are recognised however they are written.
    let d = ok(&rule_doc(
        r#"<method xmlns="urn:ietf:params:xml:ns:common&#45;policy">INVITE</method>"#,
        RATE,
    ));
    assert!(
        !d.ruleset.rules().expect("full")[0]
            .conditions
            .never_matches()
    );
}

#[test]
fn unknown_condition_inside_sip_block_also_never_matches() {
    let doc = rule_doc(
        r#"<lc:call-identity><lc:sip><x:via xmlns:x="urn:example:x" host="a"/></lc:sip></lc:call-identity>"#,
        RATE,
    );
    let d = ok(&doc);
    let r = &d.ruleset.rules().expect("full")[0];
    assert!(r.conditions.never_matches());
    assert!(r.conditions.call_identity.is_none());
}

#[test]
fn unknown_elements_under_actions_are_ignored() {
    let doc = accept_doc(
        r#"<x:log xmlns:x="urn:example:x" level="9"/><lc:accept><lc:rate>5</lc:rate><y:note xmlns:y="urn:example:y"/></lc:accept><lc:future-action/>"#,
    );
    let d = ok(&doc);
    let r = &d.ruleset.rules().expect("full")[0];
    assert_eq!(r.accept.limit, Limit::Rate(Rate::new(5.0).expect("r")));
    assert!(!r.conditions.never_matches());
    assert_eq!(d.warnings.len(), 3);
    let positions: Vec<Position> = d.warnings.iter().map(|w| w.position).collect();
    assert_eq!(positions, [pos(5, 10), pos(5, 83), pos(5, 128)]);
}

#[test]
fn warnings_on_many_lines_get_their_own_positions() {
    let mut doc = String::from(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">\n",
    );
    for i in 0..50 {
        doc.push_str(&format!(
            "<rule id=\"r{i}\"><conditions>\n  <x:c xmlns:x=\"urn:x\"/></conditions><actions><accept><rate>1</rate></accept></actions></rule>\n"
        ));
    }
    doc.push_str("</ruleset>");
    let d = ok(&doc);
    assert_eq!(d.warnings.len(), 50);
    for (i, w) in d.warnings.iter().enumerate() {
        assert_eq!(w.position, pos(3 + 2 * i as u32, 3), "{w}");
        assert_eq!(w.rule.as_deref(), Some(format!("r{i}").as_str()));
    }
}

#[test]
fn unknown_element_in_a_known_namespace_is_a_typo() {
    let e = err(&rule_doc("<lc:methd>INVITE</lc:methd>", RATE));
    assert!(
        matches!(e.kind, ErrorKind::UnexpectedElement { ref found, parent: "conditions", .. } if found == "lc:methd"),
        "{e}"
    );
    assert_eq!(e.position, pos(4, 13));
    assert_eq!(e.rule.as_deref(), Some("r1"));
}

// ---------------------------------------------------------------- rejections

#[test]
fn rejects_not_well_formed() {
    let e = err(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">\n<rule id=\"a\">\n</ruleset>",
    );
    assert!(matches!(e.kind, ErrorKind::Xml(_)), "{e}");
    assert_eq!(e.position.line, 3);
}

#[test]
fn rejects_truncated_document() {
    let e = err(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">\n<rule id=\"a\">",
    );
    assert!(
        matches!(e.kind, ErrorKind::Xml(_) | ErrorKind::Structure(_)),
        "{e}"
    );
}

#[test]
fn rejects_unbound_prefix() {
    let e = err(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">\n  <zz:rule id=\"a\"/></ruleset>",
    );
    assert_eq!(e.kind, ErrorKind::UnboundPrefix("zz".into()));
    assert_eq!(e.position, pos(2, 3));
}

#[test]
fn rejects_invalid_utf8() {
    let mut bytes = b"<ruleset version=\"0\"\n state=\"".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    let e = read(&bytes, &Limits::default()).expect_err("not utf-8");
    assert_eq!(e.kind, ErrorKind::NotUtf8);
    assert_eq!(e.position, pos(2, 9));
}

#[test]
fn rejects_other_encodings() {
    let e = err("<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><ruleset/>");
    assert_eq!(e.kind, ErrorKind::UnsupportedEncoding("ISO-8859-1".into()));
}

#[test]
fn rejects_wrong_root() {
    let e = err(
        "\n  <policy xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\"/>",
    );
    assert!(matches!(e.kind, ErrorKind::WrongRoot { .. }), "{e}");
    assert_eq!(e.position, pos(2, 3));
    // The right name in no namespace is still the wrong root.
    let e = err("<ruleset version=\"0\" state=\"full\"/>");
    assert_eq!(
        e.kind,
        ErrorKind::WrongRoot {
            found: "ruleset".into()
        }
    );
    // … and in a foreign namespace.
    let e = err("<ruleset xmlns=\"urn:example\" version=\"0\" state=\"full\"/>");
    assert_eq!(
        e.kind,
        ErrorKind::WrongRoot {
            found: "{urn:example}ruleset".into()
        }
    );
}

#[test]
fn rejects_empty_input() {
    let e = err("  \n");
    assert!(matches!(e.kind, ErrorKind::Structure(_)), "{e}");
}

#[test]
fn rejects_content_after_root() {
    let e = err(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\"/>\n<ruleset/>",
    );
    assert!(matches!(e.kind, ErrorKind::Structure(_)), "{e}");
    assert_eq!(e.position, pos(2, 1));
}

fn root(attrs: &str) -> String {
    format!("<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" {attrs}/>")
}

#[test]
fn rejects_missing_version() {
    let e = err(&root("state=\"full\""));
    assert_eq!(
        e.kind,
        ErrorKind::MissingAttribute {
            element: "ruleset",
            attribute: "version"
        }
    );
    assert_eq!(e.position, pos(1, 1));
}

#[test]
fn rejects_negative_version() {
    let e = err(&root("version=\"-1\" state=\"full\""));
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidVersion {
                problem: NumberProblem::Negative,
                ..
            }
        ),
        "{e}"
    );
    // Points at the attribute.
    assert_eq!(e.position, pos(1, 55));
}

#[test]
fn rejects_non_integer_version() {
    for v in ["1.5", "abc", "", "1e3", "0x10", " "] {
        let e = err(&root(&format!("version=\"{v}\" state=\"full\"")));
        assert!(
            matches!(
                e.kind,
                ErrorKind::InvalidVersion {
                    problem: NumberProblem::NotAnInteger | NumberProblem::NotANumber,
                    ..
                } | ErrorKind::EmptyAttribute {
                    attribute: "version",
                    ..
                }
            ),
            "{v:?}: {e}"
        );
    }
    let e = err(&root("version=\"1.5\" state=\"full\""));
    assert!(matches!(
        e.kind,
        ErrorKind::InvalidVersion {
            problem: NumberProblem::NotAnInteger,
            ..
        }
    ));
}

#[test]
fn rejects_version_over_u32() {
    let e = err(&root("version=\"4294967296\" state=\"full\""));
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidVersion {
                problem: NumberProblem::TooLarge,
                ..
            }
        ),
        "{e}"
    );
    // The largest one is fine, as are leading zeros and '+'.
    assert_eq!(
        ok(&root("version=\"4294967295\" state=\"full\""))
            .ruleset
            .version(),
        u32::MAX
    );
    assert_eq!(
        ok(&root("version=\"+007\" state=\"full\""))
            .ruleset
            .version(),
        7
    );
}

#[test]
fn rejects_missing_state() {
    let e = err(&root("version=\"0\""));
    assert_eq!(
        e.kind,
        ErrorKind::MissingAttribute {
            element: "ruleset",
            attribute: "state"
        }
    );
}

#[test]
fn rejects_unknown_state() {
    let e = err(&root("version=\"0\" state=\"complete\""));
    assert_eq!(e.kind, ErrorKind::InvalidState("complete".into()));
    assert_eq!(e.position, pos(1, 67));
}

#[test]
fn rejects_rule_without_id() {
    let doc = rule_doc("", RATE).replace("<rule id=\"r1\">", "<rule>");
    let e = err(&doc);
    assert_eq!(
        e.kind,
        ErrorKind::MissingAttribute {
            element: "rule",
            attribute: "id"
        }
    );
    assert_eq!(e.position, pos(3, 1));
    let e = err(&rule_doc("", RATE).replace("<rule id=\"r1\">", "<rule id=\" \">"));
    assert_eq!(
        e.kind,
        ErrorKind::EmptyAttribute {
            element: "rule",
            attribute: "id"
        }
    );
}

#[test]
fn rejects_duplicate_rule_ids() {
    let doc = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\">\n\
        <rule id=\"x\"><actions><accept><rate>1</rate></accept></actions></rule>\n\
        <rule id=\"x\"><actions><accept><rate>2</rate></accept></actions></rule>\n\
        </ruleset>";
    let e = err(doc);
    assert_eq!(e.kind, ErrorKind::DuplicateRuleId { first: pos(2, 1) });
    assert_eq!(e.position, pos(3, 1));
    assert_eq!(e.rule.as_deref(), Some("x"));
}

#[test]
fn rejects_accept_without_limit() {
    let e = err(&accept_doc("<lc:accept alt-action=\"reject\"/>"));
    assert_eq!(e.kind, ErrorKind::AcceptNeedsOneLimit { found: 0 });
    assert_eq!(e.position, pos(5, 10));
    assert_eq!(e.rule.as_deref(), Some("r1"));
}

#[test]
fn rejects_accept_with_two_limits() {
    let e = err(&accept_doc(
        "<lc:accept><lc:rate>1</lc:rate><lc:win>3</lc:win><lc:percent>5</lc:percent></lc:accept>",
    ));
    assert_eq!(e.kind, ErrorKind::AcceptNeedsOneLimit { found: 3 });
    // Points at the second limit.
    assert_eq!(e.position, pos(5, 41));
}

#[test]
fn rejects_negative_rate() {
    let e = err(&accept_doc("<lc:accept><lc:rate>-5</lc:rate></lc:accept>"));
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidRate {
                problem: NumberProblem::Negative,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.position, pos(5, 30));
}

#[test]
fn rejects_non_numeric_rate() {
    for v in ["fast", "1e3", "", "1,5", "NaN", "inf", "."] {
        let e = err(&accept_doc(&format!(
            "<lc:accept><lc:rate>{v}</lc:rate></lc:accept>"
        )));
        assert!(
            matches!(
                e.kind,
                ErrorKind::InvalidRate {
                    problem: NumberProblem::NotANumber,
                    ..
                }
            ),
            "{v:?}: {e}"
        );
    }
    // Decimals and white space are fine.
    let rs = ok(&accept_doc(
        "<lc:accept><lc:rate> 0.25 </lc:rate></lc:accept>",
    ))
    .ruleset;
    assert_eq!(
        rs.rules().expect("full")[0].accept.limit,
        Limit::Rate(Rate::new(0.25).expect("r"))
    );
}

#[test]
fn rejects_percent_out_of_range() {
    let e = err(&accept_doc(
        "<lc:accept><lc:percent>100.5</lc:percent></lc:accept>",
    ));
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidPercent {
                problem: NumberProblem::TooLarge,
                ..
            }
        ),
        "{e}"
    );
    let e = err(&accept_doc(
        "<lc:accept><lc:percent>-1</lc:percent></lc:accept>",
    ));
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidPercent {
                problem: NumberProblem::Negative,
                ..
            }
        ),
        "{e}"
    );
    for good in ["0", "100", "33.3"] {
        ok(&accept_doc(&format!(
            "<lc:accept><lc:percent>{good}</lc:percent></lc:accept>"
        )));
    }
}

#[test]
fn rejects_non_integer_or_negative_window() {
    let e = err(&accept_doc("<lc:accept><lc:win>2.5</lc:win></lc:accept>"));
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidWindow {
                problem: NumberProblem::NotAnInteger,
                ..
            }
        ),
        "{e}"
    );
    let e = err(&accept_doc("<lc:accept><lc:win>-3</lc:win></lc:accept>"));
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidWindow {
                problem: NumberProblem::Negative,
                ..
            }
        ),
        "{e}"
    );
    let e = err(&accept_doc(
        "<lc:accept><lc:win>99999999999</lc:win></lc:accept>",
    ));
    assert!(
        matches!(
            e.kind,
            ErrorKind::InvalidWindow {
                problem: NumberProblem::TooLarge,
                ..
            }
        ),
        "{e}"
    );
    ok(&accept_doc("<lc:accept><lc:win>0</lc:win></lc:accept>"));
}

#[test]
fn rejects_unknown_alt_action() {
    let e = err(&accept_doc(
        "<lc:accept alt-action=\"throttle\"><lc:rate>1</lc:rate></lc:accept>",
    ));
    assert_eq!(e.kind, ErrorKind::UnknownAltAction("throttle".into()));
    assert_eq!(e.position, pos(5, 21));
}

#[test]
fn rejects_redirect_without_target() {
    for attrs in [
        "alt-action=\"redirect\"",
        "alt-action=\"redirect\" alt-target=\"  \"",
    ] {
        let e = err(&accept_doc(&format!(
            "<lc:accept {attrs}><lc:rate>1</lc:rate></lc:accept>"
        )));
        assert_eq!(e.kind, ErrorKind::RedirectWithoutTarget, "{attrs}");
        assert_eq!(e.position, pos(5, 21));
    }
}

#[test]
fn redirect_targets_are_split_and_checked() {
    let rs = ok(&accept_doc(
        "<lc:accept alt-action=\"redirect\" alt-target=\"sip:a@x.example  sip:b@y.example\"><lc:rate>1</lc:rate></lc:accept>",
    ))
    .ruleset;
    match &rs.rules().expect("full")[0].accept.alt_action {
        AltAction::Redirect(t) => assert_eq!(t.len(), 2),
        other => panic!("{other:?}"),
    }
    let e = err(&accept_doc(
        "<lc:accept alt-action=\"redirect\" alt-target=\"sip:a@x.example nouri\"><lc:rate>1</lc:rate></lc:accept>",
    ));
    assert!(
        matches!(e.kind, ErrorKind::InvalidUri { ref value, .. } if value == "nouri"),
        "{e}"
    );
}

#[test]
fn many_tel_prefix_is_optional_but_checked() {
    // RFC 7200 §6: <xs:attribute name="prefix" use="optional" type="xs:string"/>, and
    // §5.3.1's own example writes <many-tel> with only an <except-tel>: any number.
    let doc = ok(&rule_doc(
        "<lc:call-identity><lc:sip><lc:to><many-tel/></lc:to></lc:sip></lc:call-identity>",
        RATE,
    ));
    let rules = doc.ruleset.rules().expect("full");
    let ci = rules[0].conditions.call_identity.as_ref().expect("ci");
    assert!(matches!(
        ci.sip[0].to.as_ref().expect("to").identities[0],
        Identity::ManyTel { prefix: None, .. }
    ));
    let e = err(&rule_doc(
        "<lc:call-identity><lc:sip><lc:to><many-tel prefix=\"+1-x\"/></lc:to></lc:sip></lc:call-identity>",
        RATE,
    ));
    assert!(matches!(e.kind, ErrorKind::InvalidPrefix { .. }), "{e}");
}

#[test]
fn rejects_doctype_and_entity_declarations() {
    let bomb = "<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;\">]>\n\
        <ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"&lol2;\"/>";
    let e = err(bomb);
    assert_eq!(e.kind, ErrorKind::Doctype);
    assert_eq!(e.position, pos(2, 1));
    let e = err(&root("version=\"0\" state=\"&custom;\""));
    assert_eq!(e.kind, ErrorKind::UnknownEntity("custom".into()));
}

#[test]
fn rejects_bad_identities() {
    let cases = [
        ("<one/>", "missing id"),
        ("<one id=\"alice\"/>", "uri without scheme"),
        ("<one id=\"sip:\"/>", "uri without rest"),
        ("<many domain=\"\"/>", "empty domain"),
        ("<many domain=\"a b\"/>", "domain with space"),
        ("<many><except/></many>", "except without attribute"),
        (
            "<many><except domain=\"a\" id=\"sip:b@a\"/></many>",
            "except with both",
        ),
        (
            "<many-tel prefix=\"+1\"><except-tel/></many-tel>",
            "except-tel without attribute",
        ),
        (
            "<many-tel prefix=\"+1\"><except domain=\"x\"/></many-tel>",
            "except in many-tel",
        ),
        ("", "empty to"),
        ("<lc:sip/>", "sip inside to"),
    ];
    for (inner, what) in cases {
        let doc = rule_doc(
            &format!(
                "<lc:call-identity><lc:sip><lc:to>{inner}</lc:to></lc:sip></lc:call-identity>"
            ),
            RATE,
        );
        let e = err(&doc);
        assert_eq!(e.rule.as_deref(), Some("r1"), "{what}");
        assert_eq!(e.position.line, 4, "{what}: {e}");
    }
}

#[test]
fn rejects_empty_call_identity_and_sip() {
    let e = err(&rule_doc("<lc:call-identity/>", RATE));
    assert_eq!(
        e.kind,
        ErrorKind::MissingElement {
            expected: "at least one <sip>",
            parent: "call-identity"
        }
    );
    let e = err(&rule_doc(
        "<lc:call-identity><lc:sip/></lc:call-identity>",
        RATE,
    ));
    assert!(
        matches!(e.kind, ErrorKind::MissingElement { parent: "sip", .. }),
        "{e}"
    );
}

#[test]
fn rejects_duplicate_elements() {
    let e = err(&rule_doc(
        "<method>INVITE</method><method>MESSAGE</method>",
        RATE,
    ));
    assert_eq!(
        e.kind,
        ErrorKind::DuplicateElement {
            element: "method",
            parent: "conditions"
        }
    );
    assert_eq!(e.position, pos(4, 36));
    let e = err(&rule_doc(
        "<lc:call-identity><lc:sip><lc:to><many/></lc:to><lc:to><many/></lc:to></lc:sip></lc:call-identity>",
        RATE,
    ));
    assert_eq!(
        e.kind,
        ErrorKind::DuplicateElement {
            element: "to",
            parent: "sip"
        }
    );
    let e = err(&accept_doc(&format!("{RATE}{RATE}")));
    assert_eq!(
        e.kind,
        ErrorKind::DuplicateElement {
            element: "accept",
            parent: "actions"
        }
    );
}

#[test]
fn rejects_bad_method() {
    let e = err(&rule_doc("<method>IN VITE</method>", RATE));
    assert!(matches!(e.kind, ErrorKind::InvalidMethod { .. }), "{e}");
    assert_eq!(e.position, pos(4, 21));
}

#[test]
fn rejects_bad_validity() {
    // Not an xs:dateTime at all (no seconds; hour 25): refused, with the value's position.
    let e = err(&rule_doc(
        "<validity><from>2008-05-31T12:00</from><until>2008-05-31T15:00:00Z</until></validity>",
        RATE,
    ));
    assert!(matches!(e.kind, ErrorKind::InvalidDateTime { .. }), "{e}");
    assert_eq!(e.position, pos(4, 29));
    let e = err(&rule_doc(
        "<validity><from>2008-05-31T12:00:00Z</from><until>2008-05-31T25:00:00Z</until></validity>",
        RATE,
    ));
    assert!(matches!(e.kind, ErrorKind::InvalidDateTime { .. }), "{e}");
    let e = err(&rule_doc(
        "<validity><from>2008-05-31T12:00:00Z</from></validity>",
        RATE,
    ));
    assert!(
        matches!(
            e.kind,
            ErrorKind::MissingElement {
                parent: "validity",
                ..
            }
        ),
        "{e}"
    );
    let e = err(&rule_doc(
        "<validity><until>2008-05-31T12:00:00Z</until></validity>",
        RATE,
    ));
    assert!(
        matches!(
            e.kind,
            ErrorKind::MissingElement {
                parent: "validity",
                ..
            }
        ),
        "{e}"
    );
    let e = err(&rule_doc("<validity/>", RATE));
    assert!(
        matches!(
            e.kind,
            ErrorKind::MissingElement {
                parent: "validity",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn rejects_text_in_element_only_content() {
    let e = err(&rule_doc("  stray ", RATE));
    assert_eq!(
        e.kind,
        ErrorKind::UnexpectedText {
            parent: "conditions"
        }
    );
    assert_eq!(e.position, pos(4, 15));
}

#[test]
fn rejects_rule_without_accept_in_full_document() {
    let e = err(&rule_doc("", ""));
    assert!(
        matches!(e.kind, ErrorKind::MissingElement { parent: "rule", .. }),
        "{e}"
    );
    assert_eq!(e.rule.as_deref(), Some("r1"));
}

// ---------------------------------------------------------------- limits

#[test]
fn limit_body_bytes() {
    let limits = {
        let mut l = Limits::default();
        l.max_body_bytes = 100;
        l
    };
    let e = err_with(EXAMPLE1, &limits);
    assert_eq!(
        e.kind,
        ErrorKind::LimitExceeded {
            limit: LimitKind::BodyBytes,
            max: 100
        }
    );
}

#[test]
fn limit_rules() {
    let limits = {
        let mut l = Limits::default();
        l.max_rules = 1;
        l
    };
    ok(EXAMPLE1);
    let e = err_with(EXAMPLE3, &limits);
    assert_eq!(
        e.kind,
        ErrorKind::LimitExceeded {
            limit: LimitKind::Rules,
            max: 1
        }
    );
    assert_eq!(e.position, pos(20, 5));
}

#[test]
fn limit_depth() {
    let mut doc = String::from(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\"><rule id=\"a\"><conditions>",
    );
    doc.push_str(&"<x:a xmlns:x=\"urn:x\">".repeat(100));
    doc.push_str(&"</x:a>".repeat(100));
    doc.push_str("</conditions></rule></ruleset>");
    let e = err(&doc);
    assert_eq!(
        e.kind,
        ErrorKind::LimitExceeded {
            limit: LimitKind::Depth,
            max: 32
        }
    );
}

#[test]
fn limit_identities_per_rule() {
    let limits = {
        let mut l = Limits::default();
        l.max_identities_per_rule = 3;
        l
    };
    let ids = "<one id=\"sip:a@b\"/>".repeat(3);
    let doc = rule_doc(
        &format!(
            "<lc:call-identity><lc:sip><lc:to>{ids}</lc:to><lc:from><many><except domain=\"x\"/></many></lc:from></lc:sip></lc:call-identity>"
        ),
        RATE,
    );
    let e = err_with(&doc, &limits);
    assert_eq!(
        e.kind,
        ErrorKind::LimitExceeded {
            limit: LimitKind::IdentitiesPerRule,
            max: 3
        }
    );
    assert_eq!(e.rule.as_deref(), Some("r1"));
}

#[test]
fn limit_value_length() {
    let limits = {
        let mut l = Limits::default();
        l.max_value_len = 64;
        l
    };
    let long = format!("sip:{}@example.com", "a".repeat(100));
    let doc = rule_doc(
        &format!(
            "<lc:call-identity><lc:sip><lc:to><one id=\"{long}\"/></lc:to></lc:sip></lc:call-identity>"
        ),
        RATE,
    );
    let e = err_with(&doc, &limits);
    assert_eq!(
        e.kind,
        ErrorKind::LimitExceeded {
            limit: LimitKind::ValueLength,
            max: 64
        }
    );
    let doc = rule_doc(
        &format!("<lc:target-sip-entity>{long}</lc:target-sip-entity>"),
        RATE,
    );
    let e = err_with(&doc, &limits);
    assert_eq!(
        e.kind,
        ErrorKind::LimitExceeded {
            limit: LimitKind::ValueLength,
            max: 64
        }
    );
}

/// `max_alt_targets` is a soft limit: the schema's alt-target is an `xs:list` of any length,
/// so a longer list keeps its first URIs and the reader warns.
#[test]
fn alt_targets_over_the_soft_limit_keep_the_first_ones_with_a_warning() {
    let limits = {
        let mut l = Limits::default();
        l.max_alt_targets = 2;
        l
    };
    let doc = accept_doc(
        "<lc:accept alt-action=\"redirect\" alt-target=\"sip:a@x sip:b@x sip:c@x\"><lc:rate>1</lc:rate></lc:accept>",
    );
    let d = read(doc.as_bytes(), &limits).expect("schema-valid: read, not refused");
    let rule = &d.ruleset.rules().expect("full")[0];
    let AltAction::Redirect(targets) = &rule.accept.alt_action else {
        panic!("redirect expected: {rule:?}");
    };
    let kept: Vec<&str> = targets.iter().map(Uri::as_str).collect();
    assert_eq!(kept, ["sip:a@x", "sip:b@x"]);
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    let w = &d.warnings[0];
    assert_eq!(w.rule.as_deref(), Some("r1"));
    assert_eq!(w.position, pos(5, 43));
    assert!(
        w.message.contains("3 URIs") && w.message.contains("first 2"),
        "{}",
        w.message
    );
    // At the limit: no warning.
    let d = read(
        accept_doc(
            "<lc:accept alt-action=\"redirect\" alt-target=\"sip:a@x sip:b@x\"><lc:rate>1</lc:rate></lc:accept>",
        )
        .as_bytes(),
        &limits,
    )
    .expect("valid");
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    // Every listed URI is still checked, also those past the limit.
    let e = err_with(
        &accept_doc(
            "<lc:accept alt-action=\"redirect\" alt-target=\"sip:a@x sip:b@x sip:@\"><lc:rate>1</lc:rate></lc:accept>",
        ),
        &limits,
    );
    assert!(matches!(e.kind, ErrorKind::InvalidUri { .. }), "{e}");
}

// ------------------------------------------- schema-valid documents are read, with warnings

fn validity_doc(pairs: &str) -> String {
    rule_doc(&format!("<validity>{pairs}</validity>"), RATE)
}

fn intervals(d: &Document) -> Vec<Interval> {
    d.ruleset.rules().expect("full")[0]
        .conditions
        .validity
        .as_ref()
        .expect("validity")
        .intervals
        .to_vec()
}

fn at(s: &str) -> Timestamp {
    Timestamp::parse(s).expect("valid timestamp")
}

/// XML Schema 1.0 Part 2 §3.2.7 lets an xs:dateTime omit its zone; RFC 4745 erratum 1455
/// makes the zone mandatory. loadctl reads such a value as UTC and warns.
#[test]
fn a_date_time_without_a_zone_is_read_as_utc_with_a_warning() {
    let d = ok(&validity_doc(
        "<from>2008-05-31T12:00:00</from><until>2008-05-31T15:00:00-05:00</until>",
    ));
    let iv = intervals(&d);
    assert_eq!(iv.len(), 1);
    assert_eq!(*iv[0].from(), at("2008-05-31T12:00:00Z"));
    assert_eq!(*iv[0].until(), at("2008-05-31T15:00:00-05:00"));
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    let w = &d.warnings[0];
    assert_eq!((w.position, w.rule.as_deref()), (pos(4, 29), Some("r1")));
    assert!(
        w.message.contains("no time zone") && w.message.contains("UTC"),
        "{}",
        w.message
    );
    // Both values zone-less: two warnings, in document order.
    let d = ok(&validity_doc(
        "<from>2008-05-31T12:00:00</from><until>2008-05-31T15:00:00.5</until>",
    ));
    assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
    assert!(d.warnings[0].position < d.warnings[1].position);
    assert_eq!(*intervals(&d)[0].until(), at("2008-05-31T15:00:00.5Z"));
}

/// RFC 4745 §7.4: validity is "TRUE if the current time is greater than or equal to at least
/// one <from> child, but less than the <until> child after it". With `from` = `until` no time
/// qualifies: the interval is empty, the document valid, the rule never in force in it.
#[test]
fn from_equal_to_until_is_an_empty_interval_with_a_warning() {
    let d = ok(&validity_doc(
        "<from>2008-05-31T12:00:00Z</from><until>2008-05-31T07:00:00-05:00</until>",
    ));
    let iv = intervals(&d);
    assert_eq!(iv.len(), 1);
    assert!(iv[0].is_empty());
    for t in [
        "2008-05-31T11:59:59Z",
        "2008-05-31T12:00:00Z",
        "2008-05-31T12:00:01Z",
    ] {
        assert!(!iv[0].contains(&at(t)), "{t}");
    }
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    let w = &d.warnings[0];
    assert_eq!((w.position, w.rule.as_deref()), (pos(4, 56), Some("r1")));
    assert!(w.message.contains("equals"), "{}", w.message);
    assert!(w.message.contains("never in force"), "{}", w.message);
    // `loadctl check` shows the rule with its empty interval marked.
    let shown = d.ruleset.rules().expect("full")[0].to_string();
    assert!(shown.contains("(empty)"), "{shown}");
}

/// `until` before `from` is schema-valid too (the schema does not order them) and, by the same
/// §7.4 sentence, contains no instant: the same treatment, a different message.
#[test]
fn until_before_from_is_an_empty_interval_with_a_warning() {
    let d = ok(&validity_doc(
        "<from>2008-05-31T12:00:00Z</from><until>2008-05-31T11:00:00Z</until>\
         <from>2008-06-01T00:00:00Z</from><until>2008-06-02T00:00:00Z</until>",
    ));
    let iv = intervals(&d);
    assert_eq!(iv.len(), 2);
    assert!(iv[0].is_empty() && !iv[1].is_empty());
    let v = Validity {
        intervals: NonEmpty::new(iv).expect("two"),
    };
    assert!(!v.contains(&at("2008-05-31T11:30:00Z")));
    assert!(!v.contains(&at("2008-05-31T12:00:00Z")));
    assert!(
        v.contains(&at("2008-06-01T12:00:00Z")),
        "the other pair still counts"
    );
    assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    assert!(
        d.warnings[0].message.contains("is before"),
        "{}",
        d.warnings[0].message
    );
}

/// What the reader accepted with warnings writes back and reads again to the same ruleset.
#[test]
fn documents_read_with_warnings_round_trip() {
    let limits = {
        let mut l = Limits::default();
        l.max_alt_targets = 1;
        l
    };
    let doc = rule_doc(
        "<validity><from>2008-05-31T12:00:00</from><until>2008-05-31T12:00:00Z</until></validity>",
        "<lc:accept alt-action=\"redirect\" alt-target=\"sip:a@x sip:b@x\"><lc:rate>1</lc:rate></lc:accept>",
    );
    let first = read(doc.as_bytes(), &limits).expect("valid");
    assert_eq!(first.warnings.len(), 3, "{:?}", first.warnings);
    let written = write(&first.ruleset);
    let second = read(written.as_bytes(), &limits).expect("own output reads");
    assert_eq!(second.ruleset, first.ruleset);
    // Written with its zone now; only the empty interval is still worth a warning.
    assert_eq!(second.warnings.len(), 1, "{:?}", second.warnings);
}

#[test]
fn error_display_names_position_and_rule() {
    let e = err(&accept_doc("<lc:accept><lc:rate>-5</lc:rate></lc:accept>"));
    assert_eq!(
        e.to_string(),
        "5:30: in rule \"r1\": <rate> \"-5\" is negative: expected a decimal number of requests per second, 0 or more"
    );
}
