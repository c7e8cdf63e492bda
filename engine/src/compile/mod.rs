//! Policy → immutable [`CompiledPolicy`]: canonical identities, indexes, and the rule checks.
//!
//! This module owns *matching*: deciding which rule, if any, a request falls under. It knows
//! nothing of limiter state (a [`crate::runtime::Shard`] owns that), so one compiled policy is
//! shared read-only by every shard.
//!
//! # How a request finds its rule
//! Every `<sip>` block of every rule picks one *anchor* field whose identities are all
//! indexable (`one` → exact canonical key, `many@domain` → host, `many-tel` → digit trie or
//! phone-context). A request looks its canonical From / To / Request-URI / P-Asserted-Identity
//! up in those indexes, which yields the few rules that *might* match; rules that cannot be
//! indexed (no call-identity, or only `<many/>` everywhere in a block) are always candidates.
//! Candidates are then checked in document order with the full conditions and the first that
//! holds wins (RFC 7200 Appendix D.1), so the index changes the cost, never the answer. Lookup
//! cost grows with the length of the request's URIs, not with the number of rules.
//!
//! Each used field is parsed (validated) in full, but only the parts of its canonical form the
//! policy reads on every request are written ([`crate::uri::Parts`]: the key when the field has
//! exact ids in its index, the host when a `many` looks at it, the number when a `many-tel`
//! does); the key a candidate's `one` or `except id` compares is built when first compared.
//! A field that only `many` read and whose index finds rules by host alone is first looked up
//! by its host, read without parsing the URI ([`crate::uri::peek_host`]); one that only
//! `many-tel` (and `one` with ids that are no number) read and whose index holds no local
//! prefix, by its number ([`crate::uri::peek_number`]). A URI its index cannot find a rule for
//! that way brings no candidate and is not parsed; one whose number finds candidates is parsed
//! only to tell that they stand. Either is canonicalised only when a candidate's check reads
//! the field. [`CompiledPolicy::view`] (for `explain` and [`CompiledPolicy::check`]) builds
//! everything.
//!
//! P-Asserted-Identity is a list that may span several header lines (RFC 3261 §7.3.1; RFC
//! 3325 §9.1 allows one sip/sips and one tel identity): the view takes its first two values
//! across all lines ([`Identities::p_asserted_identity`]) and a field test holds when either
//! matches. URIs compare as [`crate::uri`] describes (RFC 3261 §19.1.4, RFC 3966 §4); a
//! `target-sip-entity` compares as an entity, so a `transport` parameter on only one side does
//! not count there (RFC 7200 §5.3.3 "the next-hop SIP entity").

mod find;
mod identity;
mod index;
mod matcher;
mod redirect;
// The digit trie, for the bench's micro benchmarks: not API.
#[doc(hidden)]
pub mod trie;
mod view;

use std::sync::Arc;

pub(crate) use crate::hash::FxHashMap;
use crate::policy::{AltAction, Limit, Rule, RuleId, Ruleset, Uri};
use crate::uri::SipUserNumbers;
pub use find::describe_canonical;
use matcher::Matcher;
pub use redirect::redirect_refused;
pub use view::{Identities, Miss, RequestView, Scratch};

/// Methods a rule without `<method>` applies to (RFC 7200 §5.2).
pub const DEFAULT_METHODS: [&str; 6] = [
    "INVITE",
    "MESSAGE",
    "REGISTER",
    "SUBSCRIBE",
    "OPTIONS",
    "PUBLISH",
];

/// How policies are compiled. Start from `CompileConfig::default()` and change what you need
/// with the `with_*` methods (or the fields); new options may be added, so the struct is
/// `#[non_exhaustive]`.
///
/// # Redirect targets (RFC 7200 §7)
/// RFC 7200 §7 (an attacker spoofing the policy server tells proxies "to redirect all calls to
/// victim@outside-of-trust-domain.com"): "this specification requires that a Trust Domain
/// agrees on what types of calls can be affected as well as on the destinations to which calls
/// may be redirected, as in Section 3.4" — §3.4: "SIP entities in the Trust Domain agree on the
/// destinations to which calls may be redirected … For example, the URI might have to match a
/// given set of domains." So the agreement is on by default. A rule's redirect is *refused* — its excess is rejected (503) instead and
/// counted as `redirect_refused` — when its policy came from a notifier and any of its
/// targets is outside both
/// - **the notifier's own domain**: the host of the notifier's URI (as the source records it,
///   [`Origin::Notifier`](crate::runtime::Origin::Notifier)) and every subdomain of it, compared case-insensitively and
///   without a trailing dot. A notifier `sip:sbc.example.com` may redirect to
///   `sip:ivr@sbc.example.com` and `sip:x@a.sbc.example.com`, not to `sip:x@example.com` nor
///   `sip:x@sbc2.example.com`. An IP-literal host (IPv4, `[IPv6]`) is its own domain alone.
///   Parent domains are never included: without the public-suffix list, "one label up" of
///   `example.co.uk` is `co.uk`, a whole country's registrations; and
/// - [`CompileConfig::redirect_allow`], the operator's explicit additions.
///
/// `tel:` and other non-SIP targets have no host and are refused unless the list holds `*`.
/// Policies the operator loaded (no notifier: a policy file, an RPC or API publish) are
/// trusted and never refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompileConfig {
    /// Hosts and domains a notifier's redirect targets may point at besides the notifier's own
    /// domain (RFC 7200 §7: agreed in advance). A target host matches an entry when it equals
    /// it or is a subdomain of it (case-insensitive; a leading `*.` is ignored; an IP-literal
    /// entry or host matches only itself). The entry `*` allows every target (the behaviour
    /// before redirect targets were checked by default). `None` and an empty list both mean
    /// "the notifier's own domain only".
    pub redirect_allow: Option<Vec<String>>,
    /// How the user part of a SIP/SIPS URI without `user=phone` is read, on both sides of
    /// every comparison of From, To, Request-URI and P-Asserted-Identity (policy ids and
    /// request fields alike); see [`SipUserNumbers`]. Default
    /// [`SipUserNumbers::Global`]. `target-sip-entity` compares entities, not numbers, and
    /// always reads strictly.
    pub sip_user_numbers: SipUserNumbers,
}

impl CompileConfig {
    /// With [`CompileConfig::redirect_allow`] set to `allow`.
    pub fn with_redirect_allow(mut self, allow: Option<Vec<String>>) -> Self {
        self.redirect_allow = allow;
        self
    }

    /// With [`CompileConfig::sip_user_numbers`] set to `numbers`.
    pub fn with_sip_user_numbers(mut self, numbers: SipUserNumbers) -> Self {
        self.sip_user_numbers = numbers;
        self
    }
}

/// Why a full ruleset could not be compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompileError {
    /// Only a full ruleset describes a policy; merge partial ones first.
    NotFull,
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompileError::NotFull => {
                f.write_str("only a full ruleset can be compiled; merge partial updates first")
            }
        }
    }
}

impl std::error::Error for CompileError {}

/// A policy ready for classification: rules in order plus the indexes that find candidates.
#[derive(Debug)]
pub struct CompiledPolicy {
    version: u32,
    rules: Vec<CompiledRule>,
    /// Everything derived from the rules' conditions. Shared with the policy this one was
    /// compiled after when no condition changed (a NOTIFY that only retunes rates), so such a
    /// publish neither rebuilds nor evicts from cache the structures classification walks.
    matcher: Arc<Matcher>,
}

/// One rule, compiled.
#[derive(Debug)]
pub struct CompiledRule {
    rule: Arc<Rule>,
    source: u32,
    redirect_refused: bool,
}

impl CompiledRule {
    /// Index of the source the rule came from, in the order the engine merges its sources
    /// ([`Snapshot::sources`](crate::runtime::Snapshot::sources)); 0 for [`compile`].
    pub fn source(&self) -> u32 {
        self.source
    }

    /// The rule id.
    pub fn id(&self) -> &RuleId {
        &self.rule.id
    }

    /// The rule as written.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// The accepted amount.
    pub fn limit(&self) -> &Limit {
        &self.rule.accept.limit
    }

    /// What the excess gets.
    pub fn alt_action(&self) -> &AltAction {
        &self.rule.accept.alt_action
    }

    /// The redirect targets (empty unless the alt-action is redirect).
    pub fn redirect_targets(&self) -> &[Uri] {
        match &self.rule.accept.alt_action {
            AltAction::Redirect(t) => t.as_slice(),
            _ => &[],
        }
    }

    /// True when the rule redirects but a target lies outside the configured allow-list, so
    /// its excess is rejected instead.
    pub fn redirect_refused(&self) -> bool {
        self.redirect_refused
    }
}

/// Compiles a full ruleset.
pub fn compile(ruleset: &Ruleset, config: &CompileConfig) -> Result<CompiledPolicy, CompileError> {
    let rules = ruleset.rules().ok_or(CompileError::NotFull)?;
    Ok(compile_rules(
        ruleset.version(),
        rules.iter().cloned(),
        config,
    ))
}

/// Compiles rules given in order, all from one source.
pub(crate) fn compile_rules(
    version: u32,
    rules: impl IntoIterator<Item = Arc<Rule>>,
    config: &CompileConfig,
) -> CompiledPolicy {
    compile_sources(
        version,
        rules.into_iter().map(|r| SourcedRule {
            source: 0,
            rule: r,
            scope: None,
            notifier: None,
        }),
        config,
    )
}

/// A rule with where it came from, for [`compile_sources`].
#[derive(Clone, Debug)]
pub(crate) struct SourcedRule {
    /// Index of its source (see [`CompiledRule::source`]).
    pub source: u32,
    /// The rule (shared, not copied).
    pub rule: Arc<Rule>,
    /// The target entity the rule is scoped to when it names none; `None` (the default): the
    /// rule applies whatever the request's target (RFC 7200 §5.3.3).
    pub scope: Option<Uri>,
    /// The notifier whose policy holds the rule; `None` for a policy the operator loaded
    /// (trusted). Decides which redirect targets are refused (see [`CompileConfig`]).
    pub notifier: Option<Uri>,
}

/// Compiles rules from several sources in the order they are tried (the engine merges the
/// notifiers' policies this way).
pub(crate) fn compile_sources(
    version: u32,
    rules: impl IntoIterator<Item = SourcedRule>,
    config: &CompileConfig,
) -> CompiledPolicy {
    compile_after(version, rules, config, None)
}

/// Like [`compile_sources`], reusing `previous`'s matching structures when every rule's
/// conditions (and scope) are the same, in the same order — the common NOTIFY that only
/// changes limits or actions.
pub(crate) fn compile_after(
    version: u32,
    rules: impl IntoIterator<Item = SourcedRule>,
    config: &CompileConfig,
    previous: Option<&CompiledPolicy>,
) -> CompiledPolicy {
    let rules: Vec<SourcedRule> = rules.into_iter().collect();
    let compiled: Vec<CompiledRule> = rules
        .iter()
        .map(|r| CompiledRule {
            source: r.source,
            redirect_refused: redirect_refused(&r.rule, r.notifier.as_ref(), config),
            rule: Arc::clone(&r.rule),
        })
        .collect();
    let reusable = previous.filter(|p| {
        let m = &p.matcher;
        m.numbers == config.sip_user_numbers
            && m.conditions.len() == rules.len()
            && m.conditions.iter().zip(&rules).all(|(old, new)| {
                m.extra(old).and_then(|x| x.scope.as_ref()) == new.scope.as_ref()
                    && (Arc::ptr_eq(&old.from, &new.rule)
                        || old.from.conditions == new.rule.conditions)
            })
    });
    let matcher = match reusable {
        Some(p) => Arc::clone(&p.matcher),
        None => Arc::new(Matcher::new(&rules, config.sip_user_numbers)),
    };
    CompiledPolicy {
        version,
        rules: compiled,
        matcher,
    }
}

impl CompiledPolicy {
    /// The version of the document this was compiled from.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// True when `self` and `other` share their matching structures: the engine compiles a
    /// publish that changes no rule's conditions (a NOTIFY that only retunes limits or actions)
    /// onto the previous policy's indexes instead of rebuilding them.
    pub fn shares_matcher_with(&self, other: &CompiledPolicy) -> bool {
        Arc::ptr_eq(&self.matcher, &other.matcher)
    }

    /// The rules, in the order they are tried.
    pub fn rules(&self) -> &[CompiledRule] {
        &self.rules
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// How this policy reads SIP user parts without `user=phone` (its compile option).
    pub fn sip_user_numbers(&self) -> SipUserNumbers {
        self.matcher.numbers
    }

    /// Some rule compares telephone numbers (a `many-tel`, or a `one` / `except id` that is a
    /// number under this policy's [`SipUserNumbers`] setting).
    pub fn compares_numbers(&self) -> bool {
        self.matcher.compares_numbers
    }
}

/// Shared ownership of a compiled policy (what shards hold).
pub type SharedPolicy = Arc<CompiledPolicy>;
