//! Who a policy came from ([`Origin`]), under which name, and how its rules are scoped ([`Source`]).

use crate::policy::Uri;

/// Where a source's policy came from: who wrote it, which decides how far it is trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Loaded by the operator (a policy file, an RPC or API publish): trusted, its redirect
    /// targets are never refused.
    Local,
    /// Received from a notifier with this URI (RFC 7200 §4): its redirect targets must lie in
    /// the notifier's own domain or in the operator's allow-list
    /// ([`CompileConfig::redirect_allow`](crate::compile::CompileConfig::redirect_allow), RFC 7200 §7).
    Notifier(Uri),
}

/// Who a policy came from (its [`Origin`]), under which name, and which target entity its rules
/// without `target-sip-entity` are scoped to.
///
/// The origin and the scope are separate: by default a rule without `target-sip-entity` applies
/// **whatever the request's target** (RFC 7200 §5.3.3 only lets a subscriber *record* the
/// originator as the target, a MAY); [`Source::scoped`] opts into scoping, which only makes
/// sense where every caller passes the request's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// A stable name (typically the notifier's URI, or "local").
    pub name: String,
    /// Who wrote the policy.
    pub origin: Origin,
    /// When set, rules without `target-sip-entity` only match requests whose target entity is
    /// this URI (and never requests without a target). `None`: they match whatever the target.
    pub scope: Option<Uri>,
}

impl AsRef<str> for Source {
    /// The source's name, which identifies it ([`Engine::withdraw`](super::Engine::withdraw), [`Engine::source_policy`](super::Engine::source_policy)).
    fn as_ref(&self) -> &str {
        &self.name
    }
}

impl Source {
    /// A policy the operator loaded (file, RPC, API): trusted, unscoped.
    pub fn local(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            origin: Origin::Local,
            scope: None,
        }
    }

    /// A notifier's policy, named by its URI: its redirect targets are checked against the
    /// notifier's own domain (RFC 7200 §7); its rules apply whatever the request's target.
    pub fn notifier(notifier: Uri) -> Self {
        Self {
            name: notifier.as_str().to_owned(),
            origin: Origin::Notifier(notifier),
            scope: None,
        }
    }

    /// This source with its rules without `target-sip-entity` scoped to `target` (RFC 7200
    /// §5.3.3: the subscriber MAY record the policy's originator as its target).
    pub fn scoped(mut self, target: Uri) -> Self {
        self.scope = Some(target);
        self
    }

    /// This source scoped to its notifier's URI (unchanged for a local source).
    pub fn scoped_to_notifier(self) -> Self {
        match &self.origin {
            Origin::Notifier(uri) => {
                let uri = uri.clone();
                self.scoped(uri)
            }
            Origin::Local => self,
        }
    }

    /// The notifier's URI when the policy came from one.
    pub fn notifier_uri(&self) -> Option<&Uri> {
        match &self.origin {
            Origin::Notifier(uri) => Some(uri),
            Origin::Local => None,
        }
    }
}
