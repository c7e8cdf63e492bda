//! Who may subscribe (RFC 7200 §4.6): the `--allow` / `--allow-file` entries and the
//! notifier's [`Authorization`] built from them.

use loadctl::event::notifier::Authorization;
use loadctl::policy::Uri;

use super::Options;

/// Checks one allow-list entry: a SIP or SIPS URI, or a host / domain name / IP address
/// (optionally `*.` before a domain). Returns it as the notifier compares it.
pub(super) fn allow_entry(entry: &str) -> Result<String, String> {
    let e = entry.trim();
    if e.is_empty() {
        return Err("empty entry".into());
    }
    let lower = e.to_ascii_lowercase();
    if lower.starts_with("sip:") || lower.starts_with("sips:") {
        return Uri::new(e)
            .map(|_| e.to_owned())
            .map_err(|why| format!("{e:?} is not a SIP URI: {why}"));
    }
    let host = e.strip_prefix("*.").unwrap_or(e);
    let ipv6 = host.starts_with('[') && host.ends_with(']') && host.len() > 2;
    let name = !host.is_empty()
        && !host.starts_with('.')
        && !host.ends_with('.')
        && !host.contains("..")
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if ipv6
        && host[1..host.len() - 1]
            .parse::<std::net::Ipv6Addr>()
            .is_ok()
        || name
    {
        Ok(e.to_owned())
    } else {
        Err(format!(
            "{e:?} is neither a sip: URI nor a host or domain name"
        ))
    }
}

/// Reads an allow-list file: one entry per line; `#` starts a comment; blank lines skipped.
/// The error names the line.
pub(super) fn read_allow_file(path: &str, text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        out.push(allow_entry(line).map_err(|e| format!("{path}:{}: {e}", n + 1))?);
    }
    Ok(out)
}

/// The notifier's [`Authorization`] from the options, or the exit code after saying why not.
pub(super) fn authorization(o: &Options<'_>) -> Result<Authorization, u8> {
    let mut entries = Vec::new();
    for a in o.allow {
        match allow_entry(a) {
            Ok(e) => entries.push(e),
            Err(e) => {
                eprintln!("loadctl notifier: --allow {e}");
                return Err(2);
            }
        }
    }
    for path in o.allow_files {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("loadctl notifier: {path}: {e}");
                return Err(2);
            }
        };
        match read_allow_file(path, &text) {
            Ok(more) => entries.extend(more),
            Err(e) => {
                eprintln!("loadctl notifier: {e}");
                return Err(2);
            }
        }
    }
    match (o.allow_any, entries.is_empty()) {
        (true, true) => Ok(Authorization::Any),
        (true, false) => {
            eprintln!("loadctl notifier: --allow-any and an allow-list exclude each other");
            Err(2)
        }
        (false, true) if o.allow.is_empty() && o.allow_files.is_empty() => {
            eprintln!(
                "loadctl notifier: say who may subscribe: --allow ENTRY, --allow-file FILE, or --allow-any (RFC 7200 §4.6: others get 403)"
            );
            Err(2)
        }
        // Files with no entry: nobody may subscribe (every SUBSCRIBE gets 403).
        (false, _) => Ok(Authorization::Domains(entries)),
    }
}
