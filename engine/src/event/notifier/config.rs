//! The notifier's settings: who may subscribe (RFC 7200 §4.6) and the durations and pacing it
//! grants: plain data the caller fills in and the state machine only reads.

use std::time::Duration;

use super::uri_key;
use crate::policy::Uri;

/// Who may subscribe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authorization {
    /// Anyone (only inside a trust domain that authenticates at the SIP layer).
    Any,
    /// Subscribers whose From URI matches an entry: a SIP or SIPS URI entry matches that URI
    /// (compared as RFC 3261 §19.1.4 says, e.g. `sip:proxy@p1.example.net`); any other entry
    /// is a host or a domain (`p1.example.net`, `example.net`, `*.example.net`) and matches a
    /// SIP URI whose host is that host or inside that domain.
    Domains(Vec<String>),
}

impl Authorization {
    /// True when `subscriber` (a SUBSCRIBE's From URI) may subscribe.
    pub fn allows(&self, subscriber: &Uri) -> bool {
        let Authorization::Domains(list) = self else {
            return true;
        };
        let crate::uri::UriRef::Sip(s) = subscriber.parsed() else {
            return false;
        };
        let host = s.host.to_ascii_lowercase();
        let key = uri_key(subscriber);
        list.iter().any(|e| {
            let e = e.trim();
            if let Some(entry) = Uri::new(e)
                .ok()
                .filter(|u| matches!(u.parsed(), crate::uri::UriRef::Sip(_)))
            {
                return uri_key(&entry) == key;
            }
            let e = e.trim_start_matches("*.").to_ascii_lowercase();
            host == e
                || host
                    .strip_suffix(e.as_str())
                    .is_some_and(|r| r.ends_with('.'))
        })
    }
}

/// How a notifier behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NotifierConfig {
    /// This server's URI (From of the NOTIFYs).
    pub uri: Uri,
    /// To-tag stem: subscription n gets `{tag}-{n}`.
    pub tag: String,
    /// Who may subscribe.
    pub authorization: Authorization,
    /// Shortest subscription accepted, seconds (423 below). Default 60.
    pub min_expires: u32,
    /// Longest subscription granted, seconds. Default 3600.
    pub max_expires: u32,
    /// Duration when a SUBSCRIBE names none, seconds. Default 3600 (RFC 7200 §4).
    pub default_expires: u32,
    /// Minimum spacing of NOTIFYs on one subscription. Default 1 s (§4.10).
    pub pacing: Duration,
    /// The version of the first document of each subscription. Default 0 (tests of the
    /// version wrap start close to 4294967295).
    pub first_version: u32,
}

impl NotifierConfig {
    /// A configuration with the defaults above.
    pub fn new(uri: Uri, tag: &str, authorization: Authorization) -> Self {
        Self {
            uri,
            tag: tag.to_owned(),
            authorization,
            min_expires: 60,
            max_expires: 3600,
            default_expires: 3600,
            pacing: Duration::from_secs(1),
            first_version: 0,
        }
    }
}
