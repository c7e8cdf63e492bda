//! A NOTIFY's body put to the engine: the document read, its version checked against the last
//! one (RFC 7200 §4.11, serial arithmetic), applied or withdrawn as this notifier's source,
//! and the rules whose redirect the engine refuses reported once.

use super::{IgnoreReason, PolicySink, Subscriber, SubscriberEvent};
use crate::event::{EventRequest, is_policy_type};
use crate::policy::{self, Body, MergeError, State};
use crate::runtime::PublishError;

impl<S: PolicySink> Subscriber<S> {
    pub(super) fn withdraw(&mut self) {
        if self.applied_any && self.sink.withdraw(&self.source).is_ok() {
            self.stats.withdrawn += 1;
            self.events.push_back(SubscriberEvent::PolicyWithdrawn);
        }
        self.applied_any = false;
    }

    pub(super) fn handle_body(&mut self, now_ns: u64, req: &EventRequest) {
        let content_type = req.content_type.as_deref().unwrap_or("");
        if req.body.is_empty() {
            // RFC 7200 §4.8: "A NOTIFY request without a body indicates that no load-filtering
            // policies need to be updated." The policy in force stays.
            self.stats.bodyless += 1;
            self.events.push_back(SubscriberEvent::NothingToUpdate);
            return;
        }
        if !is_policy_type(content_type) {
            self.events.push_back(SubscriberEvent::UnknownBody {
                content_type: content_type.to_owned(),
            });
            return;
        }
        let notifier = req.from.uri.to_string();
        let doc = match policy::read(&req.body, self.sink.limits()) {
            Ok(d) => d,
            Err(e) => {
                self.stats.refused += 1;
                self.events.push_back(SubscriberEvent::InvalidDocument {
                    notifier,
                    version: claimed_version(&req.body),
                    error: e.to_string(),
                });
                return;
            }
        };
        let version = doc.ruleset.version();
        if let Some(last) = self.dialog.last_version {
            // 32-bit serial arithmetic (RFC 1982): 0 follows 4294967295.
            let ahead = version.wrapping_sub(last);
            if ahead == 0 || ahead >= 1 << 31 {
                self.stats.ignored += 1;
                self.events.push_back(SubscriberEvent::DocumentIgnored {
                    version,
                    reason: IgnoreReason::Stale { last },
                });
                return;
            }
            // A gap matters only for a partial document, which needs the versions before it;
            // a full one is the whole state (after a re-SUBSCRIBE it carries the notifier's
            // current version, past the gap).
            if ahead > 1 && doc.ruleset.state() != State::Full {
                let expected = u64::from(last) + 1;
                self.stats.ignored += 1;
                self.events.push_back(SubscriberEvent::DocumentIgnored {
                    version,
                    reason: IgnoreReason::Gap { expected },
                });
                self.refetch(now_ns);
                return;
            }
        }
        let refused = self.refused_redirects(&doc.ruleset);
        let state = doc.ruleset.state();
        let warnings: Vec<String> = doc.warnings.iter().map(ToString::to_string).collect();
        match self.sink.apply(&self.source, doc.ruleset) {
            Ok(generation) => {
                self.report_redirects(refused);
                self.dialog.last_version = Some(version);
                self.applied_any = true;
                self.stats.applied += 1;
                if !warnings.is_empty() {
                    self.stats.warned += 1;
                    self.events.push_back(SubscriberEvent::DocumentWarnings {
                        notifier,
                        version,
                        warnings,
                    });
                }
                self.events.push_back(SubscriberEvent::PolicyApplied {
                    version,
                    state,
                    generation,
                });
            }
            Err(PublishError::Merge(MergeError::NoBase { .. } | MergeError::VersionGap { .. })) => {
                // A partial document with no base: none applied yet on this subscription, or
                // one across the version wrap (the merge wants last + 1 in 64 bits).
                let expected = self.dialog.last_version.map_or(0, |l| u64::from(l) + 1);
                self.stats.ignored += 1;
                self.events.push_back(SubscriberEvent::DocumentIgnored {
                    version,
                    reason: IgnoreReason::Gap { expected },
                });
                self.refetch(now_ns);
            }
            Err(error) => {
                self.stats.refused += 1;
                self.events.push_back(SubscriberEvent::ApplyFailed {
                    notifier,
                    version,
                    error,
                });
            }
        }
    }

    /// Whether `ruleset` is full, and (rule id, refused) for every rule it puts — refused when
    /// the engine will reject instead of redirecting (RFC 7200 §7) — and every id it deletes.
    fn refused_redirects(&self, ruleset: &policy::Ruleset) -> (bool, Vec<(String, bool)>) {
        let check = |r: &policy::Rule| {
            (
                r.id.to_string(),
                self.sink.redirect_refused(r, &self.source),
            )
        };
        match ruleset.body() {
            Body::Full(rules) => (true, rules.iter().map(|r| check(r)).collect()),
            Body::Partial(changes) => (
                false,
                changes
                    .iter()
                    .map(|c| match c {
                        policy::Change::Put(r) => check(r),
                        policy::Change::Delete(id) => (id.to_string(), false),
                    })
                    .collect(),
            ),
        }
    }

    /// Reports the rules newly refused by an applied document, once each while they stay
    /// refused (a full document replaces the whole set, a partial one updates its rules).
    fn report_redirects(&mut self, (full, checked): (bool, Vec<(String, bool)>)) {
        if full {
            self.refused_redirects
                .retain(|id| checked.iter().any(|(c, refused)| *refused && c == id));
        }
        let mut fresh = Vec::new();
        for (id, refused) in checked {
            let known = self.refused_redirects.iter().position(|r| *r == id);
            match (refused, known) {
                (true, None) => {
                    fresh.push(id.clone());
                    self.refused_redirects.push(id);
                }
                (false, Some(i)) => {
                    self.refused_redirects.swap_remove(i);
                }
                _ => {}
            }
        }
        if !fresh.is_empty() {
            self.events
                .push_back(SubscriberEvent::RedirectOutsideAllowList { rules: fresh });
        }
    }
}

/// The `version` attribute of a document's root element, read without validating anything
/// else: what an invalid document claims to be, for the report that refuses it.
fn claimed_version(body: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(body).ok()?;
    let mut rest = text;
    // The root element: the first `<` not starting a declaration, comment or PI.
    let root = loop {
        let at = rest.find('<')?;
        rest = &rest[at + 1..];
        if !rest.starts_with(['?', '!']) {
            break &rest[..rest.find('>')?];
        }
    };
    let mut attrs = root;
    while let Some(at) = attrs.find("version") {
        let before = attrs[..at].chars().next_back();
        let after = attrs[at + "version".len()..].trim_start();
        attrs = &attrs[at + "version".len()..];
        if !before.is_some_and(char::is_whitespace) {
            continue;
        }
        let Some(value) = after.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        let quote = value.chars().next()?;
        if quote != '"' && quote != '\'' {
            return None;
        }
        let inner = &value[1..];
        return inner[..inner.find(quote)?].trim().parse().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::claimed_version;

    #[test]
    fn claimed_versions() {
        let v = |s: &str| claimed_version(s.as_bytes());
        assert_eq!(
            v(r#"<?xml version="1.0"?><ruleset xmlns="x" version="7" state="full">"#),
            Some(7)
        );
        assert_eq!(v("<!-- c --><ruleset version = '42'><rule/>"), Some(42));
        assert_eq!(v(r#"<ruleset xversion="3" state="full"/>"#), None);
        assert_eq!(v(r#"<ruleset version="-1"/>"#), None);
        assert_eq!(v(r#"<ruleset version="4294967295"/>"#), Some(u32::MAX));
        assert_eq!(v("no markup"), None);
        assert_eq!(v(r#"<ruleset version="1"#), None);
    }
}
