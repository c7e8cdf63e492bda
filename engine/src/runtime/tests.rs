use super::*;
use crate::policy::{Limit, Limits};

fn doc(version: u32, state: &str, rules: &str) -> Ruleset {
    let text = format!(
        "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" \
         xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"{version}\" \
         state=\"{state}\">{rules}</ruleset>"
    );
    policy::read(text.as_bytes(), &Limits::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .ruleset
}

fn rule(id: &str, accept: &str) -> String {
    format!("<rule id=\"{id}\"><actions>{accept}</actions></rule>")
}

/// (source, version, rule id, limit) of each published rule.
fn listed(snapshot: &Snapshot) -> Vec<(String, u32, String, Limit)> {
    snapshot
        .rules()
        .map(|r| {
            (
                r.source.to_owned(),
                r.source_version,
                r.rule.id.to_string(),
                r.rule.accept.limit,
            )
        })
        .collect()
}

#[test]
fn a_snapshot_lists_its_rules_with_their_sources_and_versions() {
    let e = Engine::new(EngineConfig::default());
    assert_eq!(e.snapshot().rules().len(), 0);
    assert_eq!(e.snapshot().source_version("a"), None);
    let rate = |r: f64| Limit::Rate(policy::Rate::new(r).expect("rate"));
    e.publish(
        &Source::local("a"),
        doc(
            7,
            "full",
            &(rule("r1", "<lc:accept><lc:rate>20</lc:rate></lc:accept>")
                + &rule("r2", "<lc:accept><lc:win>5</lc:win></lc:accept>")),
        ),
    )
    .expect("a");
    e.publish(&Source::local("empty"), doc(3, "full", ""))
        .expect("empty");
    e.publish(
        &Source::local("b"),
        doc(
            0,
            "full",
            &rule("r1", "<lc:accept><lc:rate>1</lc:rate></lc:accept>"),
        ),
    )
    .expect("b");
    let before = e.snapshot();
    // A partial document: r1 retuned in place, r3 appended, the version is the partial's.
    e.apply(
        &Source::local("a"),
        doc(
            8,
            "partial",
            &(rule("r1", "<lc:accept><lc:rate>30</lc:rate></lc:accept>")
                + &rule("r3", "<lc:accept><lc:percent>40</lc:percent></lc:accept>")),
        ),
    )
    .expect("partial");
    let s = e.snapshot();
    let row = |src: &str, v: u32, id: &str, l: Limit| (src.to_owned(), v, id.to_owned(), l);
    assert_eq!(
        listed(&s),
        [
            row("a", 8, "r1", rate(30.0)),
            row("a", 8, "r2", Limit::Window(5)),
            row(
                "a",
                8,
                "r3",
                Limit::Percent(policy::Percent::new(40.0).expect("percent"))
            ),
            row("b", 0, "r1", rate(1.0)),
        ]
    );
    // The rows are the snapshot's: in the order rules are tried, with source_of's names.
    for (i, r) in s.rules().enumerate() {
        assert_eq!(r.source, s.source_of(i));
        assert_eq!(r.rule.id, *s.policy().rules()[i].id());
    }
    assert_eq!(s.source_version("a"), Some(8));
    assert_eq!(s.source_version("empty"), Some(3));
    assert_eq!(s.source_version("b"), Some(0));
    assert_eq!(s.source_version("c"), None);
    assert_eq!(
        s.source_version("a"),
        e.source_policy("a").map(|p| p.version())
    );
    // An older snapshot keeps what it had.
    assert_eq!(before.source_version("a"), Some(7));
    assert_eq!(listed(&before)[0], row("a", 7, "r1", rate(20.0)));
    e.withdraw("empty").expect("withdraw");
    assert_eq!(e.snapshot().source_version("empty"), None);
    assert_eq!(e.snapshot().source_version("b"), Some(0));
}
