use loadctl::event::NameAddr;

use super::access::{allow_entry, read_allow_file};
use super::server::{address_of, parse_report};
use super::state::{SavedDialog, StateFile, write_state};
use super::*;

#[test]
fn demand_reports() {
    let (u, n) = parse_report("  sip:edge1@192.0.2.7:5060 42 ")
        .expect("valid")
        .expect("a report");
    assert_eq!((u.as_str(), n), ("sip:edge1@192.0.2.7:5060", 42));
    assert_eq!(parse_report(""), Ok(None));
    assert_eq!(parse_report("# comment"), Ok(None));
    for bad in [
        "sip:edge1.example.net",
        "sip:edge1.example.net 4 2",
        "sip:edge1.example.net -1",
        "sip:edge1.example.net 1.5",
        "sip:edge1.example.net 18446744073709551616",
        "not-a-uri 3",
    ] {
        let e = parse_report(bad).expect_err(bad);
        assert!(e.contains(bad.trim()), "{e}");
    }
}

#[test]
fn allow_entries_and_files() {
    for ok in [
        "sip:edge@127.0.0.1:5070",
        "SIPS:proxy@example.net",
        "p1.example.net",
        "*.example.net",
        "192.0.2.7",
        "[2001:db8::1]",
        "localhost",
    ] {
        assert!(allow_entry(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "sip:",
        "sip:a@",
        "tel:+1555",
        "user@example.net",
        "example..net",
        ".example.net",
        "host name",
        "[not-v6]",
        "example.net:5060",
    ] {
        assert!(allow_entry(bad).is_err(), "{bad}");
    }
    let text = "# who may subscribe

sip:edge@127.0.0.1:5070   # the edge
  *.trusted.example
";
    assert_eq!(
        read_allow_file("f", text),
        Ok(vec![
            "sip:edge@127.0.0.1:5070".to_owned(),
            "*.trusted.example".to_owned()
        ])
    );
    assert_eq!(
        read_allow_file(
            "f",
            "ok.example
user@bad
"
        ),
        Err("f:2: \"user@bad\" is neither a sip: URI nor a host or domain name".to_owned())
    );
}

#[test]
fn state_file_round_trip_keeps_the_expiry_in_wall_clock_time() {
    let record = DialogRecord {
        call_id: "c-1".into(),
        subscriber: NameAddr {
            uri: Uri::new("sip:edge@127.0.0.1:5070").expect("uri"),
            tag: Some("t1".into()),
        },
        notifier_tag: "lcn1-1".into(),
        remote_target: Uri::new("sip:edge@127.0.0.1:5070").expect("uri"),
        route_set: vec![Uri::new("sip:p1.example.net;lr").expect("uri")],
        cseq: 7,
        expires_at_ns: 1_000_000_000_000, // 1000 s in the old process's clock
        share: Some(12.5),
    };
    // Saved at 400 s of the old process (600 s left), read 100 s later at 5 s of the new one.
    let saved = SavedDialog::from_record(&record, 400_000_000_000, 1_700_000_000_000);
    assert_eq!(saved.expires_unix_ms, 1_700_000_600_000);
    let dir = std::env::temp_dir().join(format!("loadctl-state-{}", std::process::id()));
    let path = dir.to_string_lossy().into_owned();
    let state = StateFile {
        format: 1,
        dialogs: vec![saved],
    };
    write_state(&path, &state).expect("written");
    let back = read_state(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(back, state);
    let restored = back.dialogs[0]
        .to_record(5_000_000_000, 1_700_000_100_000)
        .expect("not expired");
    assert_eq!(restored.expires_at_ns, 505_000_000_000);
    assert_eq!(
        DialogRecord {
            expires_at_ns: record.expires_at_ns,
            ..restored
        },
        record
    );
    // Expired by the time it is read: skipped.
    assert!(back.dialogs[0].to_record(0, 1_700_000_600_001).is_none());
    // A damaged file is ignored, not fatal.
    std::fs::write(&path, b"{not json").expect("written");
    assert_eq!(read_state(&path), StateFile::default());
    let _ = std::fs::remove_file(&path);
    assert_eq!(read_state(&path), StateFile::default());
}

#[test]
fn addresses_of_uris() {
    let a = |s: &str| address_of(&Uri::new(s).expect("uri"));
    assert_eq!(a("sip:edge@127.0.0.1:5070"), "127.0.0.1:5070".parse().ok());
    assert_eq!(a("sip:127.0.0.1"), "127.0.0.1:5060".parse().ok());
    assert_eq!(
        a("sip:e@127.0.0.1:5071;transport=udp"),
        "127.0.0.1:5071".parse().ok()
    );
}
