//! `loadctl check` as a user runs it: output format and exit codes.

use crate::common::{data, loadctl};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn rfc_examples_are_valid_and_summarised() {
    let files: Vec<String> = (1..=3)
        .map(|i| data(&format!("rfc7200-example{i}.xml")))
        .collect();
    let args: Vec<&str> = std::iter::once("check")
        .chain(files.iter().map(String::as_str))
        .collect();
    let out = loadctl(&args, "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3 + 4, "{stdout}");
    assert!(
        lines[0].ends_with("rfc7200-example1.xml: version 0, full, 1 rule"),
        "{stdout}"
    );
    assert_eq!(
        lines[1],
        "  f3g44k1: to in {sip:alice@hotline.example.com, tel:+1-212-555-1234}; method INVITE; \
         valid 2008-05-31T12:00:00-05:00/2008-05-31T15:00:00-05:00 -> accept rate 100/s, else reject (503)"
    );
    assert!(lines[2].ends_with("rfc7200-example2.xml: version 1, full, 1 rule"));
    assert!(
        lines[3].contains("else redirect to sip:sandy@update.example.com"),
        "{}",
        lines[3]
    );
    assert!(lines[4].ends_with("rfc7200-example3.xml: version 2, full, 2 rules"));
    assert!(
        lines[5].starts_with("  f3g44k3: from in {any@example.com}"),
        "{}",
        lines[5]
    );
    assert!(
        lines[6].starts_with("  f3g44k4: from in {sip:alice@example.com}"),
        "{}",
        lines[6]
    );
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn invalid_document_reports_file_line_column_and_exits_1() {
    let doc = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"1\" state=\"full\">\n\
               <rule id=\"hot\"><actions><accept><rate>-3</rate></accept></actions></rule>\n</ruleset>\n";
    let out = loadctl(&["check", "-"], doc);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        "<stdin>:2:39: in rule \"hot\": <rate> \"-3\" is negative: expected a decimal number of \
         requests per second, 0 or more\n"
    );
}

#[test]
fn valid_document_on_stdin() {
    let out = loadctl(
        &["check", "-"],
        include_str!("../../../engine/tests/data/rfc7200-example3.xml"),
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("<stdin>: version 2, full, 2 rules\n"));
}

#[test]
fn partial_document_lists_changes() {
    let doc = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"5\" state=\"partial\">\
               <rule id=\"a\"><actions><accept><win>3</win></accept></actions></rule>\
               <rule id=\"b\"><actions/></rule></ruleset>";
    let out = loadctl(&["check", "-"], doc);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "<stdin>: version 5, partial, 2 changes\n  put a: method INVITE|MESSAGE|REGISTER|SUBSCRIBE|OPTIONS|PUBLISH -> accept window 3, else reject (503)\n  delete b\n"
    );
}

#[test]
fn warnings_go_to_stderr_and_do_not_fail() {
    let doc = "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"1\" state=\"full\">\n\
               <rule id=\"g\"><conditions><g:area xmlns:g=\"urn:example:geo\"/></conditions>\
               <actions><accept><rate>1</rate></accept></actions></rule></ruleset>";
    let out = loadctl(&["check", "-"], doc);
    assert_eq!(out.status.code(), Some(0));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("<stdin>:2:26: warning: in rule \"g\": condition <g:area>"),
        "{stderr}"
    );
    assert!(stderr.contains("never matches"), "{stderr}");
    assert!(
        text(&out.stdout).contains("never matches (unsupported condition {urn:example:geo}area)")
    );
}

#[test]
fn mixed_valid_and_invalid_exits_1_and_still_summarises_the_valid_one() {
    let good = data("rfc7200-example1.xml");
    let out = loadctl(&["check", &good, "-"], "<ruleset");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("version 0, full, 1 rule"));
    assert!(
        text(&out.stderr).starts_with("<stdin>:1:1: not well-formed XML"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn io_errors_and_usage_errors_exit_2() {
    let out = loadctl(&["check", "/nonexistent/policy.xml"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("loadctl: /nonexistent/policy.xml: "));
    // An I/O error outranks an invalid document.
    let out = loadctl(&["check", "-", "/nonexistent/policy.xml"], "<x/>");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(loadctl(&["check"], "").status.code(), Some(2));
    assert_eq!(loadctl(&["frobnicate"], "").status.code(), Some(2));
}

#[test]
fn demo_runs_the_embedded_policy_on_several_threads() {
    let out = loadctl(&["demo", "--duration", "0.6", "--threads", "2"], "");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("loadctl demo: embedded default policy, 4 rules, 2 worker thread(s)"),
        "{stdout}"
    );
    for rule in [
        "televote-hotline",
        "ticket-sales",
        "partner-domain",
        "media-trunk",
    ] {
        let rows = stdout
            .lines()
            .filter(|l| l.starts_with(&format!("  {rule} ")))
            .count();
        assert_eq!(rows, 2, "{rule} in both halves: {stdout}");
    }
    assert!(stdout.contains("half-way: applied a partial update (version 1) setting rule televote-hotline to rate 100/s"), "{stdout}");
    assert!(stdout.contains("rate 100/s"), "{stdout}");
    // The percent gate is exact on each shard, so the aggregate shows 40 %.
    assert!(stdout.contains("40.0%"), "{stdout}");
    assert!(stdout.contains("throughput:"), "{stdout}");
    // The figures come with the machine they were taken on (the harness's machine line).
    let machine = stdout
        .lines()
        .find_map(|l| l.strip_prefix("machine: "))
        .unwrap_or_else(|| panic!("no machine line: {stdout}"));
    assert!(
        machine.contains("CPUs online") && machine.contains("THP"),
        "{machine}"
    );
    // Bad options are usage errors.
    assert_eq!(
        loadctl(&["demo", "--duration", "-1"], "").status.code(),
        Some(2)
    );
    assert_eq!(
        loadctl(&["demo", "--policy", "/nonexistent.xml"], "")
            .status
            .code(),
        Some(2)
    );
}
