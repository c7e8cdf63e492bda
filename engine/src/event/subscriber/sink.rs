//! Where a subscriber puts what it receives. The subscriber is a state machine over SIP
//! messages; keeping the policies is someone else's job, so it reaches them through this
//! trait, which the runtime's [`Engine`] implements (and a test or a relay can too).

use crate::policy::{Limits, Rule, Ruleset};
use crate::runtime::{Engine, PublishError, Source};

/// The keeper of the policies a [`Subscriber`](super::Subscriber) receives, one source per
/// notifier. Methods take `&self`: a sink is shared (an [`Engine`] is a handle several
/// subscribers and the workers hold).
pub trait PolicySink {
    /// The input limits a NOTIFY's document is read under.
    fn limits(&self) -> &Limits;

    /// Applies a document (full: replaces the source's rules, partial: merges into them) as
    /// `source`; the generation published. A refused document changes nothing.
    fn apply(&self, source: &Source, document: Ruleset) -> Result<u64, PublishError>;

    /// Removes every rule of `source` (its subscription ended).
    fn withdraw(&self, source: &Source) -> Result<u64, PublishError>;

    /// Whether the sink will reject instead of redirecting for `rule` from `source` (RFC 7200
    /// §7: a redirect target the subscriber has not agreed to), so the subscriber can say so.
    fn redirect_refused(&self, rule: &Rule, source: &Source) -> bool;
}

impl PolicySink for Engine {
    fn limits(&self) -> &Limits {
        &self.config().limits
    }

    fn apply(&self, source: &Source, document: Ruleset) -> Result<u64, PublishError> {
        Engine::apply(self, source, document)
    }

    fn withdraw(&self, source: &Source) -> Result<u64, PublishError> {
        Engine::withdraw(self, source)
    }

    fn redirect_refused(&self, rule: &Rule, source: &Source) -> bool {
        crate::compile::redirect_refused(rule, source.notifier_uri(), &self.config().compile)
    }
}
