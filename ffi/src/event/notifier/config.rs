//! `lc_notifier_config`: the notifier's settings as C passes them, and their conversion to a
//! `NotifierConfig`, which refuses what would contradict itself or refuse every subscriber.

use super::*;

/// Notifier settings for `lc_notifier_new`, read during that call only (they must end up as
/// min ≤ default ≤ max expires, defaults included: a `max_expires` below 3600 needs a
/// `default_expires` too); zero numbers mean the
/// defaults (60 s / 3600 s / 3600 s / 1000 ms).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_notifier_config {
    /// This server's URI (required).
    pub uri: lc_str,
    /// To-tag stem (required).
    pub tag: lc_str,
    /// Space-separated entries naming who may subscribe (RFC 7200 §4.6; others get 403): a SIP
    /// URI (`sip:proxy@192.0.2.7:5060`, compared with the SUBSCRIBE's From URI as RFC 3261
    /// §19.1.4 says), or a host or domain (`p1.example.net`, `example.net`) the From URI's host
    /// is or is inside. Absent: anyone.
    pub authorized: lc_str,
    /// Shortest subscription, seconds.
    pub min_expires: u32,
    /// Longest subscription, seconds.
    pub max_expires: u32,
    /// Duration when a SUBSCRIBE names none, seconds.
    pub default_expires: u32,
    /// Least spacing of NOTIFYs on one subscription, milliseconds.
    pub pacing_ms: u32,
}

/// The notifier configuration `c` describes.
///
/// # Safety
/// Every string of `c` readable or absent.
pub(super) unsafe fn notifier_config(c: &lc_notifier_config) -> Result<NotifierConfig, Code> {
    // SAFETY: by this function's contract.
    let (tag, authorized, uri) = unsafe {
        (
            c.tag.to_str("lc_notifier_config.tag")?,
            text(c.authorized, "lc_notifier_config.authorized")?,
            uri(c.uri, "lc_notifier_config.uri")?,
        )
    };
    let auth = match authorized {
        None => Authorization::Any,
        Some(list) => {
            let entries = words(Some(list));
            if entries.is_empty() {
                return Err(crate::abi::invalid(
                    "lc_notifier_config.authorized",
                    "empty: it would refuse every subscriber; leave it absent (NULL) for anyone",
                ));
            }
            if let Some(bad) = entries.iter().find(|e| !authorized_entry(e)) {
                return Err(crate::abi::invalid(
                    "lc_notifier_config.authorized",
                    format_args!("{bad:?} is neither a SIP URI nor a host or domain"),
                ));
            }
            Authorization::Domains(entries)
        }
    };
    let mut nc = NotifierConfig::new(uri, tag, auth);
    if c.min_expires > 0 {
        nc.min_expires = c.min_expires;
    }
    if c.max_expires > 0 {
        nc.max_expires = c.max_expires;
    }
    if c.default_expires > 0 {
        nc.default_expires = c.default_expires;
    }
    if c.pacing_ms > 0 {
        nc.pacing = std::time::Duration::from_millis(u64::from(c.pacing_ms));
    }
    if !(nc.min_expires <= nc.default_expires && nc.default_expires <= nc.max_expires) {
        return Err(crate::abi::invalid(
            "lc_notifier_config",
            format_args!(
                "min_expires {} ≤ default_expires {} ≤ max_expires {} does not hold (0 means the \
                 default 60 / 3600 / 3600)",
                nc.min_expires, nc.default_expires, nc.max_expires
            ),
        ));
    }
    Ok(nc)
}

/// Whether `entry` of `lc_notifier_config.authorized` is usable: a `sip:`/`sips:` URI, or a
/// host or domain (`p1.example.net`, `*.example.net`, `192.0.2.7`, `[2001:db8::1]`).
fn authorized_entry(entry: &str) -> bool {
    let lower = entry.to_ascii_lowercase();
    if lower.starts_with("sip:") || lower.starts_with("sips:") {
        return Uri::new(entry).is_ok_and(|u| matches!(u.parsed(), loadctl::uri::UriRef::Sip(_)));
    }
    let host = entry.strip_prefix("*.").unwrap_or(entry);
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && !host.starts_with('.')
        && !host.contains("..")
}
