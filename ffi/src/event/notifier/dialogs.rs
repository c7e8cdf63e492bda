//! The dialogs that outlive a process: written as a line-based text document for the next one
//! (`lc_notifier_save_dialogs`), read back and deactivated by it
//! (`lc_notifier_deactivate_saved`).

use super::*;

/// The first line of a saved-dialogs document (`lc_notifier_save_dialogs`).
const DIALOGS_HEADER: &str = "loadctl-dialogs 1";

/// One record as a line of tab-separated fields: Call-ID, subscriber URI, subscriber tag,
/// notifier tag, remote target, route set (space-separated), CSeq, expiry (Unix ms), share.
/// `None` when a field holds a tab, a line break or (URIs) a space, which the format cannot
/// carry (such a dialog is left to the subscriber's refresh).
fn dialog_line(r: &DialogRecord, now_ns: u64, unix_ms: u64) -> Option<String> {
    fn plain(f: &str) -> bool {
        !f.contains(['\t', '\r', '\n'])
    }
    fn uri(u: &Uri) -> Option<&str> {
        Some(u.as_str()).filter(|t| plain(t) && !t.contains(' '))
    }
    let routes = r
        .route_set
        .iter()
        .map(uri)
        .collect::<Option<Vec<_>>>()?
        .join(" ");
    let tag = r.subscriber.tag.as_deref().unwrap_or("");
    if ![r.call_id.as_str(), tag, r.notifier_tag.as_str()]
        .iter()
        .all(|f| plain(f))
    {
        return None;
    }
    let expires = unix_ms.saturating_add(r.expires_at_ns.saturating_sub(now_ns) / 1_000_000);
    let share = r.share.map(|x| x.to_string()).unwrap_or_default();
    Some(format!(
        "{}\t{}\t{tag}\t{}\t{}\t{routes}\t{}\t{expires}\t{share}",
        r.call_id,
        uri(&r.subscriber.uri)?,
        r.notifier_tag,
        uri(&r.remote_target)?,
        r.cseq,
    ))
}

/// The records of a saved-dialogs document in this process's clock; expired ones are left
/// out. The error names the line.
fn read_dialogs(doc: &[u8], now_ns: u64, unix_ms: u64) -> Result<Vec<DialogRecord>, String> {
    let text = std::str::from_utf8(doc).map_err(|_| "not UTF-8".to_owned())?;
    let mut lines = text.lines();
    if lines.next() != Some(DIALOGS_HEADER) {
        return Err(format!("line 1: not {DIALOGS_HEADER:?}"));
    }
    let mut out = Vec::new();
    for (n, line) in lines.enumerate().filter(|(_, l)| !l.is_empty()) {
        let bad = |what: &str| format!("line {}: {what}", n + 2);
        let f: Vec<&str> = line.split('\t').collect();
        let [
            call_id,
            sub,
            tag,
            ntag,
            target,
            routes,
            cseq,
            expires,
            share,
        ] = f[..]
        else {
            return Err(bad("expected 9 tab-separated fields"));
        };
        let uri = |u: &str| Uri::new(u).map_err(|e| bad(&format!("{u:?}: {e}")));
        let route_set = routes
            .split(' ')
            .filter(|r| !r.is_empty())
            .map(uri)
            .collect::<Result<Vec<_>, _>>()?;
        let cseq = cseq.parse().map_err(|_| bad("CSeq"))?;
        let expires: u64 = expires.parse().map_err(|_| bad("expiry"))?;
        let share = match share {
            "" => None,
            s => Some(s.parse::<f64>().map_err(|_| bad("share"))?),
        };
        if call_id.is_empty() || ntag.is_empty() {
            return Err(bad("empty Call-ID or notifier tag"));
        }
        let Some(left_ms) = expires.checked_sub(unix_ms) else {
            continue;
        };
        out.push(DialogRecord {
            call_id: call_id.to_owned(),
            subscriber: NameAddr {
                uri: uri(sub)?,
                tag: (!tag.is_empty()).then(|| tag.to_owned()),
            },
            notifier_tag: ntag.to_owned(),
            remote_target: uri(target)?,
            route_set,
            cseq,
            expires_at_ns: now_ns.saturating_add(left_ms.saturating_mul(1_000_000)),
            share,
        });
    }
    Ok(out)
}

/// Writes the live subscriptions' dialogs as a document for the next process (a file, a
/// database row): what it needs to reach each subscriber after this process dies without
/// `lc_notifier_shutdown` (a crash, SIGKILL), with each expiry in wall-clock time. `now_ns` is
/// this notifier's clock, `unix_ms` the wall clock (CLOCK_REALTIME, milliseconds) at the same
/// moment. The dialogs change with every NOTIFY sent (its CSeq) and every subscription that
/// starts, is refreshed or ends: write it again after those (keep the previous copy until the
/// new one is whole). Text, UTF-8, no NUL. `LC_RESULT_BUFFER_TOO_SMALL` with the needed size in
/// `written` when `cap` is too small.
///
/// # Safety
/// `n` from `lc_notifier_new`; `buf` NULL or writable for `cap` bytes; `written` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_save_dialogs(
    n: *const lc_notifier,
    now_ns: u64,
    unix_ms: u64,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> lc_result {
    boundary(|| {
        let h = try_ref!(n);
        let out = try_buf!(buf, cap, written);
        let mut doc = String::from(DIALOGS_HEADER);
        doc.push('\n');
        for r in h.notifier.dialogs() {
            if let Some(line) = dialog_line(&r, now_ns, unix_ms) {
                doc.push_str(&line);
                doc.push('\n');
            }
        }
        out.deliver(doc.as_bytes())
    })
}

/// Ends the dialogs of an earlier process (a document its `lc_notifier_save_dialogs` wrote)
/// with `terminated;reason=deactivated` NOTIFYs, queued for `lc_notifier_poll_transmit`: each
/// subscriber withdraws that process's rules and subscribes again at once (RFC 6665 §4.1.3:
/// "SHOULD retry immediately with a new subscription"), to this notifier. Call it once, after
/// `lc_notifier_new` and the policy, with this clock's `now_ns` and the wall clock `unix_ms`.
/// Expired dialogs and live ones of this notifier are skipped; `queued` gets how many NOTIFYs
/// were queued. Under a shared capacity each dialog's share counts until its NOTIFY is
/// answered. A document that is not one (its line named in the last error) is
/// `LC_RESULT_INVALID_ARGUMENT` and queues nothing.
///
/// # Safety
/// `n` from `lc_notifier_new`; `doc` readable for `len` bytes; `queued` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_notifier_deactivate_saved(
    n: *mut lc_notifier,
    now_ns: u64,
    unix_ms: u64,
    doc: *const u8,
    len: usize,
    queued: *mut usize,
) -> lc_result {
    boundary(|| {
        let h = try_mut!(n);
        let doc = try_slice!(doc, len);
        let queued = try_out!(queued);
        let records = match read_dialogs(doc, now_ns, unix_ms) {
            Ok(r) => r,
            Err(e) => return crate::abi::invalid("doc", e),
        };
        queued.write(h.notifier.deactivate(now_ns, &records));
        Code::Ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(call_id: &str, route: &[&str]) -> DialogRecord {
        let uri = |u: &str| Uri::new(u).expect("uri");
        DialogRecord {
            call_id: call_id.into(),
            subscriber: NameAddr {
                uri: uri("sip:edge@192.0.2.7:5070"),
                tag: Some("t1".into()),
            },
            notifier_tag: "n-1".into(),
            remote_target: uri("sip:edge@192.0.2.7:5070;transport=udp"),
            route_set: route.iter().map(|r| uri(r)).collect(),
            cseq: 41,
            expires_at_ns: 600_000_000_000,
            share: Some(12.25),
        }
    }

    #[test]
    fn saved_dialogs_round_trip_in_the_next_processs_clock() {
        let r = record("c@h", &["sip:p1.example.net;lr", "sip:p2.example.net;lr"]);
        // Saved at 100 s (500 s left), read 20 s later at 3 s of the next process.
        let line = dialog_line(&r, 100_000_000_000, 1_000_000).expect("representable");
        let doc = format!("{DIALOGS_HEADER}\n{line}\n\n");
        let back = read_dialogs(doc.as_bytes(), 3_000_000_000, 1_020_000).expect("valid");
        assert_eq!(
            back,
            vec![DialogRecord {
                expires_at_ns: 483_000_000_000,
                ..r.clone()
            }]
        );
        let none = DialogRecord {
            share: None,
            subscriber: NameAddr {
                tag: None,
                ..r.subscriber.clone()
            },
            route_set: Vec::new(),
            ..r.clone()
        };
        let line = dialog_line(&none, 100_000_000_000, 1_000_000).expect("representable");
        let doc = format!("{DIALOGS_HEADER}\n{line}\n");
        let back = read_dialogs(doc.as_bytes(), 100_000_000_000, 1_000_000).expect("valid");
        assert_eq!(back, vec![none]);
        // Expired: left out.
        assert_eq!(
            read_dialogs(doc.as_bytes(), 0, 1_000_000 + 500_001),
            Ok(Vec::new())
        );
        // A Call-ID the format cannot carry is not written.
        assert!(dialog_line(&record("a\tb", &[]), 0, 0).is_none());
    }

    #[test]
    fn damaged_saved_dialogs_are_refused_with_the_line() {
        let good = dialog_line(&record("c", &[]), 0, 0).expect("line");
        for (doc, what) in [
            (String::new(), "line 1"),
            ("loadctl-dialogs 2\n".into(), "line 1"),
            (format!("{DIALOGS_HEADER}\n{good}\nx\ty\n"), "line 3"),
            (
                format!("{DIALOGS_HEADER}\n{}", good.replace("\t41\t", "\t-1\t")),
                "CSeq",
            ),
            (
                format!(
                    "{DIALOGS_HEADER}\n{}",
                    good.replace("sip:edge", "not a uri")
                ),
                "line 2",
            ),
            (
                format!("{DIALOGS_HEADER}\n{}", good.replace("12.25", "many")),
                "share",
            ),
            (format!("{DIALOGS_HEADER}\n\t{}", &good[2..]), "line 2"),
        ] {
            let e = read_dialogs(doc.as_bytes(), 0, 0).expect_err(&doc);
            assert!(e.contains(what), "{doc:?}: {e}");
        }
        assert!(read_dialogs(&[0xff, 0xfe], 0, 0).is_err());
    }
}
