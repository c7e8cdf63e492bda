//! The `--state-file`: the live subscriptions' dialogs, kept across a hard stop so the next
//! process can end them at once (RFC 6665 §4.1.3).

use std::time::{SystemTime, UNIX_EPOCH};

use loadctl::event::NameAddr;
use loadctl::event::notifier::DialogRecord;
use loadctl::policy::Uri;
use serde::{Deserialize, Serialize};

/// The `--state-file` document: the dialogs of the live subscriptions, with wall-clock expiry
/// (the monotonic clock of one process means nothing to the next).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct StateFile {
    /// The format (1).
    pub(super) format: u32,
    pub(super) dialogs: Vec<SavedDialog>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct SavedDialog {
    pub(super) call_id: String,
    pub(super) subscriber: String,
    pub(super) subscriber_tag: Option<String>,
    pub(super) notifier_tag: String,
    pub(super) remote_target: String,
    pub(super) route_set: Vec<String>,
    pub(super) cseq: u32,
    pub(super) expires_unix_ms: u64,
    pub(super) share: Option<f64>,
}

pub(super) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl SavedDialog {
    pub(super) fn from_record(r: &DialogRecord, now_ns: u64, now_unix_ms: u64) -> Self {
        Self {
            call_id: r.call_id.clone(),
            subscriber: r.subscriber.uri.to_string(),
            subscriber_tag: r.subscriber.tag.clone(),
            notifier_tag: r.notifier_tag.clone(),
            remote_target: r.remote_target.to_string(),
            route_set: r.route_set.iter().map(ToString::to_string).collect(),
            cseq: r.cseq,
            expires_unix_ms: now_unix_ms + r.expires_at_ns.saturating_sub(now_ns) / 1_000_000,
            share: r.share,
        }
    }

    /// The record in a new process's clock; `None` when it expired or holds a bad URI.
    pub(super) fn to_record(&self, now_ns: u64, now_unix_ms: u64) -> Option<DialogRecord> {
        let left_ms = self.expires_unix_ms.checked_sub(now_unix_ms)?;
        let route_set = self
            .route_set
            .iter()
            .map(|u| Uri::new(u).ok())
            .collect::<Option<Vec<_>>>()?;
        Some(DialogRecord {
            call_id: self.call_id.clone(),
            subscriber: NameAddr {
                uri: Uri::new(&self.subscriber).ok()?,
                tag: self.subscriber_tag.clone(),
            },
            notifier_tag: self.notifier_tag.clone(),
            remote_target: Uri::new(&self.remote_target).ok()?,
            route_set,
            cseq: self.cseq,
            expires_at_ns: now_ns.saturating_add(left_ms.saturating_mul(1_000_000)),
            share: self.share,
        })
    }
}

/// Reads a state file; a missing one is empty, an unreadable or invalid one is said and
/// ignored (its subscribers come back at their refresh).
pub(super) fn read_state(path: &str) -> StateFile {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            eprintln!("loadctl notifier: {path}: not a state file ({e}); ignored");
            StateFile::default()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => StateFile::default(),
        Err(e) => {
            eprintln!("loadctl notifier: {path}: {e}; ignored");
            StateFile::default()
        }
    }
}

/// Writes the state file whole (a temporary file renamed over it: a process killed mid-write
/// leaves the previous one).
pub(super) fn write_state(path: &str, state: &StateFile) -> std::io::Result<()> {
    let tmp = format!("{path}.tmp");
    let text = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}
