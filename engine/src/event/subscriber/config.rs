//! The subscriber's settings: the notifier it subscribes to, the names of its dialogs, the
//! trust domain and the retry delays; plain data the caller fills in and the state machine
//! only reads.

use std::time::Duration;

use crate::policy::Uri;

/// How a subscriber behaves.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SubscriberConfig {
    /// The notifier's URI: Request-URI and To of the SUBSCRIBE, and the source name.
    pub notifier: Uri,
    /// This server's URI (From).
    pub subscriber: Uri,
    /// Call-ID stem: subscription n uses `{call_id}-{n}` (the SIP stack makes it unique).
    pub call_id: String,
    /// From-tag stem: subscription n uses `{tag}-{n}`.
    pub tag: String,
    /// Requested duration in seconds. Default 3600 (RFC 7200 §4).
    pub expires: u32,
    /// Hosts or domains notifiers may be at (a host matches an entry equal to it or a parent
    /// domain of it). Empty: only the configured notifier's host.
    pub trust: Vec<String>,
    /// Scope rules without `target-sip-entity` to the notifier's URI (RFC 7200 §5.3.3: the
    /// subscriber MAY record the originator as the target). Only sensible where every request
    /// is classified with its target entity: a scoped rule never matches a request without
    /// one. Default false: the rules apply whatever the request's target.
    pub scope_to_notifier: bool,
    /// First retry delay after a failure. Default 1 s.
    pub retry_initial: Duration,
    /// Longest retry delay. Default 300 s.
    pub retry_max: Duration,
}

impl SubscriberConfig {
    /// A configuration with the defaults above.
    pub fn new(notifier: Uri, subscriber: Uri, call_id: &str, tag: &str) -> Self {
        Self {
            notifier,
            subscriber,
            call_id: call_id.to_owned(),
            tag: tag.to_owned(),
            expires: 3600,
            trust: Vec::new(),
            scope_to_notifier: false,
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
        }
    }
}
