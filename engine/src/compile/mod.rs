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
//! [`CompiledPolicy::view`] (for `explain` and [`CompiledPolicy::check`]) builds everything.
//!
//! P-Asserted-Identity is a list that may span several header lines (RFC 3261 §7.3.1; RFC
//! 3325 §9.1 allows one sip/sips and one tel identity): the view takes its first two values
//! across all lines ([`Identities::p_asserted_identity`]) and a field test holds when either
//! matches. URIs compare as [`crate::uri`] describes (RFC 3261 §19.1.4, RFC 3966 §4); a
//! `target-sip-entity` compares as an entity, so a `transport` parameter on only one side does
//! not count there (RFC 7200 §5.3.3 "the next-hop SIP entity").

mod index;
mod redirect;
pub mod trie;
mod view;

use std::sync::Arc;

pub(crate) use crate::hash::FxHashMap;
use crate::policy::{
    self, AltAction, Except, ExceptTel, Field, Identity, Limit, Rule, RuleId, Ruleset, TelPrefix,
    Uri,
};
use crate::sip::HeaderValues;
use crate::uri::{self, Canonical, CanonicalParam, Number, Parts, SipUserNumbers};
use index::*;
pub use redirect::{in_own_domain, redirect_refused};
use trie::{DigitTrie, TrieBuilder};
use view::*;
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

/// How policies are compiled.
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
///   [`SourcedRule::notifier`]) and every subdomain of it, compared case-insensitively and
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

/// The conditions of every rule, compiled, and the indexes over them.
///
/// Sized for 100,000-rule policies: the call-identities of all rules live in three flat
/// vectors (`sips` → `fields` → `identities`, linked by index ranges) instead of nested
/// per-rule vectors, and what few rules have (validity, target, scope, an extension method)
/// sits in `extras`, so a typical rule costs a few dozen bytes and no allocation of its own
/// beyond its canonical key.
#[derive(Debug)]
struct Matcher {
    /// Per rule: the rule its conditions were compiled from (to decide reuse) and where its
    /// compiled conditions are.
    conditions: Vec<RuleMatch>,
    /// Every `<sip>` block: a range of `fields`.
    sips: Vec<Span>,
    /// Every field test of every block: the field and a range of `identities`.
    fields: Vec<(Field, Span)>,
    identities: Vec<CompiledIdentity>,
    /// The uncommon conditions, for rules that have any.
    extras: Vec<RuleExtra>,
    /// The hot part of each rule, dense, so checking a candidate touches one small entry.
    meta: Vec<RuleMeta>,
    index: [FieldIndex; 4],
    /// Rules checked for every request (not reachable through an index), ascending.
    always: Vec<u32>,
    /// Which request fields some rule looks at (others are not canonicalised).
    uses: [bool; 4],
    /// Per field, the parts of its canonical form read on every request: the key when the
    /// exact index has entries, the host when a `many` (or its `except domain`) looks at the
    /// field, the number when a `many-tel` does. Other parts are not built; the key that a
    /// candidate's `one` or `except id` compares is built when first compared.
    parts: [Parts; 4],
    uses_target: bool,
    /// How SIP user parts are read (the compile option this matcher was built with).
    numbers: SipUserNumbers,
    /// Some rule compares telephone numbers (a `many-tel`, or a `one` / `except id` that is a
    /// number): only then is a number-like user part left unread worth counting.
    compares_numbers: bool,
}

/// A range of one of the [`Matcher`]'s flat vectors.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    fn of<T>(items: &[T]) -> Self {
        let n = items.len() as u32;
        Span { start: n, end: n }
    }

    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// No [`RuleExtra`].
const NO_EXTRA: u32 = u32::MAX;

/// One rule's conditions, compiled.
#[derive(Debug)]
struct RuleMatch {
    from: Arc<Rule>,
    /// Its `<sip>` blocks (a range of [`Matcher::sips`]; empty without a call-identity).
    sips: Span,
    /// Index in [`Matcher::extras`], or [`NO_EXTRA`].
    extra: u32,
}

/// The conditions few rules have.
#[derive(Debug)]
struct RuleExtra {
    /// The target entity the rule was scoped to by its source (for reuse decisions).
    scope: Option<Uri>,
    /// The method, kept only when it is an extension method (compared as a string).
    method: Option<policy::Method>,
    target: Option<CompiledUri>,
    /// (from, until) in Unix nanoseconds; empty when the rule has no `<validity>`.
    validity: Vec<(i128, i128)>,
}

/// One rule, compiled.
#[derive(Debug)]
pub struct CompiledRule {
    rule: Arc<Rule>,
    source: u32,
    redirect_refused: bool,
}

impl CompiledRule {
    /// Index of the source (notifier) the rule came from, in the order given to
    /// [`compile_sources`]; 0 for [`compile`] and [`compile_rules`].
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

#[derive(Debug)]
enum CompiledIdentity {
    One(CompiledUri),
    Many {
        domain: Option<Box<[u8]>>,
        except: Vec<CompiledExcept>,
    },
    ManyTel {
        /// `None`: any number.
        prefix: Option<TelMatch>,
        except: Vec<CompiledExceptTel>,
    },
}

#[derive(Debug)]
enum CompiledExcept {
    Domain(Box<[u8]>),
    Id(CompiledUri),
}

#[derive(Debug)]
enum CompiledExceptTel {
    Prefix(TelMatch),
    Id(CompiledUri),
}

/// A policy URI in canonical form.
#[derive(Debug)]
struct CompiledUri {
    key: Box<[u8]>,
    /// Parameters and headers of a SIP URI not compared as a number.
    sip: Option<(Vec<CanonicalParam>, Vec<CanonicalParam>)>,
}

impl CompiledUri {
    fn new(uri: &Uri, numbers: SipUserNumbers) -> Self {
        let mut buf = Vec::new();
        let c = uri::canonicalize_with(uri.parsed(), &mut buf, Parts::ALL, numbers);
        let sip = c.sip.map(|s| {
            (
                uri::canonical_params(s.params),
                uri::canonical_headers(s.headers),
            )
        });
        Self {
            key: c.key.into(),
            sip,
        }
    }

    /// RFC 3261 §19.1.4 equality (an identity).
    #[inline]
    fn matches(&self, c: &Canonical<'_, '_>) -> bool {
        self.matches_with(c, &uri::STRICT_PARAMS)
    }

    /// The same entity (a target): as [`CompiledUri::matches`] but a transport parameter in
    /// only one URI does not count (see [`uri::ENTITY_STRICT_PARAMS`]).
    #[inline]
    fn matches_entity(&self, c: &Canonical<'_, '_>) -> bool {
        self.matches_with(c, &uri::ENTITY_STRICT_PARAMS)
    }

    #[inline]
    fn matches_with(&self, c: &Canonical<'_, '_>, strict: &[&str]) -> bool {
        if *self.key != *c.key {
            return false;
        }
        match (&self.sip, &c.sip) {
            (Some((params, headers)), Some(s)) => {
                uri::params_and_headers_match_with(s, params, headers, strict)
            }
            _ => true,
        }
    }
}

/// A `many-tel` / `except-tel` prefix in canonical form.
#[derive(Debug)]
struct TelMatch {
    /// The prefix as a canonical phone-context: `+digits` / `digits` for a numeric prefix, a
    /// lower-case domain otherwise.
    context: Box<[u8]>,
    numeric: bool,
    global: bool,
}

impl TelMatch {
    fn new(prefix: &TelPrefix) -> Self {
        match prefix.digits() {
            Some(d) => Self {
                global: d.starts_with('+'),
                numeric: true,
                context: d.into_bytes().into(),
            },
            None => Self {
                numeric: false,
                global: false,
                context: prefix.as_str().to_ascii_lowercase().into_bytes().into(),
            },
        }
    }

    /// Decimal digits of a numeric prefix (without the `+` of a global one).
    #[inline]
    fn digits(&self) -> Option<&[u8]> {
        self.numeric
            .then(|| &self.context[usize::from(self.global)..])
    }

    /// A global number starting with the prefix digits; a local number whose phone-context is
    /// the prefix, or (for a prefix without `+`) whose digits start with it.
    #[inline]
    fn matches(&self, n: &Number<'_>) -> bool {
        if n.global {
            return self.global && self.digits().is_some_and(|d| n.digits.starts_with(d));
        }
        n.context == Some(&self.context[..])
            || (!self.global && self.digits().is_some_and(|d| n.digits.starts_with(d)))
    }
}

impl CompiledIdentity {
    fn new(identity: &Identity, numbers: SipUserNumbers) -> Self {
        let uri = |u| CompiledUri::new(u, numbers);
        match identity {
            Identity::One(u) => CompiledIdentity::One(uri(u)),
            Identity::Many { domain, except } => CompiledIdentity::Many {
                domain: domain.as_ref().map(|d| lower(d.as_str())),
                except: except
                    .iter()
                    .map(|e| match e {
                        Except::Domain(d) => CompiledExcept::Domain(lower(d.as_str())),
                        Except::Id(u) => CompiledExcept::Id(uri(u)),
                    })
                    .collect(),
            },
            Identity::ManyTel { prefix, except } => CompiledIdentity::ManyTel {
                prefix: prefix.as_ref().map(TelMatch::new),
                except: except
                    .iter()
                    .map(|e| match e {
                        ExceptTel::Prefix(p) => CompiledExceptTel::Prefix(TelMatch::new(p)),
                        ExceptTel::Id(u) => CompiledExceptTel::Id(uri(u)),
                    })
                    .collect(),
            },
        }
    }

    /// Whether the identity matches a request URI: `v.parts` holds the parts the policy reads
    /// on every request for this field ([`Matcher::parts`]: the host where a `many` or
    /// `except domain` may look, the number where a `many-tel` may); `v.key()` gives the key
    /// (and parameters) that `one` and `except id` compare, built on first use.
    #[inline]
    fn matches(&self, v: &mut Value<'_, '_, '_>) -> bool {
        let c = v.parts;
        match self {
            CompiledIdentity::One(u) => v.key().is_some_and(|k| u.matches(k)),
            CompiledIdentity::Many { domain, except } => {
                // `<many>` groups identities by their domain part (RFC 7200 §5.3.1: "The
                // 'domain' attribute works well for SIP URIs"; 'tel' URIs are grouped by
                // `<many-tel>`), so even without a domain it matches only identities that
                // have one: the section's own example ORs `<many>` and `<many-tel>` to mean
                // "SIP URIs outside a domain or numbers outside a prefix".
                let in_domain = match domain {
                    None => c.host.is_some(),
                    Some(d) => c.host == Some(&d[..]),
                };
                in_domain
                    && !except.iter().any(|e| match e {
                        CompiledExcept::Domain(d) => c.host == Some(&d[..]),
                        CompiledExcept::Id(u) => v.key().is_some_and(|k| u.matches(k)),
                    })
            }
            CompiledIdentity::ManyTel { prefix, except } => {
                c.number
                    .is_some_and(|n| prefix.as_ref().is_none_or(|p| p.matches(&n)))
                    && !except.iter().any(|e| match e {
                        CompiledExceptTel::Prefix(p) => c.number.is_some_and(|n| p.matches(&n)),
                        CompiledExceptTel::Id(u) => v.key().is_some_and(|k| u.matches(k)),
                    })
            }
        }
    }

    /// An index hit on this identity proves it matches: nothing left to compare.
    fn hit_suffices(&self) -> bool {
        match self {
            CompiledIdentity::One(u) => u.sip.is_none(),
            CompiledIdentity::Many { domain, except } => domain.is_some() && except.is_empty(),
            // The trie keeps 255 digits of a prefix: a longer one is checked in full.
            CompiledIdentity::ManyTel { except, prefix } => {
                except.is_empty() && prefix.as_ref().is_some_and(|p| p.context.len() <= 255)
            }
        }
    }

    /// The parts of a request URI [`CompiledIdentity::matches`] reads in `c` (the key it
    /// reads through [`Value::key`], on demand).
    fn parts(&self) -> Parts {
        match self {
            CompiledIdentity::One(_) => Parts::default(),
            CompiledIdentity::Many { .. } => Parts {
                host: true,
                ..Parts::default()
            },
            CompiledIdentity::ManyTel { .. } => Parts {
                number: true,
                ..Parts::default()
            },
        }
    }

    /// The identity compares telephone numbers.
    fn compares_numbers(&self) -> bool {
        let number = |u: &CompiledUri| u.key.starts_with(b"tel:");
        match self {
            CompiledIdentity::One(u) => number(u),
            CompiledIdentity::Many { except, .. } => except.iter().any(|e| match e {
                CompiledExcept::Id(u) => number(u),
                CompiledExcept::Domain(_) => false,
            }),
            CompiledIdentity::ManyTel { .. } => true,
        }
    }

    fn indexable(&self) -> bool {
        !matches!(
            self,
            CompiledIdentity::Many { domain: None, .. }
                | CompiledIdentity::ManyTel { prefix: None, .. }
        )
    }
}

fn lower(s: &str) -> Box<[u8]> {
    s.to_ascii_lowercase().into_bytes().into()
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
pub fn compile_rules(
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
pub struct SourcedRule {
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
pub fn compile_sources(
    version: u32,
    rules: impl IntoIterator<Item = SourcedRule>,
    config: &CompileConfig,
) -> CompiledPolicy {
    compile_after(version, rules, config, None)
}

/// Like [`compile_sources`], reusing `previous`'s matching structures when every rule's
/// conditions (and scope) are the same, in the same order — the common NOTIFY that only
/// changes limits or actions.
pub fn compile_after(
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

impl Matcher {
    fn new(rules: &[SourcedRule], numbers: SipUserNumbers) -> Self {
        let mut index: [FieldIndexBuilder; 4] = Default::default();
        let mut m = Matcher {
            conditions: Vec::with_capacity(rules.len()),
            sips: Vec::with_capacity(rules.len()),
            fields: Vec::with_capacity(rules.len()),
            identities: Vec::with_capacity(rules.len()),
            extras: Vec::new(),
            meta: Vec::with_capacity(rules.len()),
            index: Default::default(),
            always: Vec::new(),
            uses: [false; 4],
            parts: [Parts::default(); 4],
            uses_target: false,
            numbers,
            compares_numbers: false,
        };
        for (i, SourcedRule { rule, scope, .. }) in rules.iter().enumerate() {
            let i = i as u32;
            let c = &rule.conditions;
            let target = c.target_sip_entity.as_ref().or(scope.as_ref());
            let mut sips = Span::of(&m.sips);
            for sip in c.call_identity.iter().flat_map(|ci| ci.sip.iter()) {
                let mut fields = Span::of(&m.fields);
                for (f, set) in sip.fields() {
                    let mut ids = Span::of(&m.identities);
                    m.identities.extend(
                        set.identities
                            .iter()
                            .map(|id| CompiledIdentity::new(id, numbers)),
                    );
                    ids.end = m.identities.len() as u32;
                    m.fields.push((f, ids));
                }
                fields.end = m.fields.len() as u32;
                m.sips.push(fields);
            }
            sips.end = m.sips.len() as u32;
            let never = c.never_matches();
            let (methods, other_method) = match &c.method {
                None => (DEFAULT_METHOD_BITS, false),
                Some(name) => match method_code(name.as_str()) {
                    Some(code) => (1 << code, false),
                    None => (0, true),
                },
            };
            let meta = RuleMeta {
                methods,
                other_method,
                never,
                slow: c.validity.is_some() || target.is_some(),
            };
            m.meta.push(meta);
            if !never {
                if sips.start == sips.end || i > ENTRY_MAX_RULE {
                    m.always.push(i);
                }
                for &block in &m.sips[sips.range()] {
                    let fields = &m.fields[block.range()];
                    for (f, _) in fields {
                        m.uses[field_slot(*f)] = true;
                    }
                    // The anchor: the indexable field with the fewest identities.
                    let anchor = fields
                        .iter()
                        .map(|&(f, ids)| (f, &m.identities[ids.range()]))
                        .filter(|(_, ids)| ids.iter().all(CompiledIdentity::indexable))
                        .min_by_key(|(_, ids)| ids.len());
                    let single_field = fields.len() == 1;
                    match anchor {
                        Some((f, ids)) if i <= ENTRY_MAX_RULE => ids.iter().for_each(|id| {
                            let sufficient = single_field && id.hit_suffices();
                            index[field_slot(f)].insert(id, entry(i, &meta, sufficient))
                        }),
                        _ => {
                            if m.always.last() != Some(&i) {
                                m.always.push(i);
                            }
                        }
                    }
                }
                m.uses_target |= target.is_some();
            }
            let extra =
                if scope.is_some() || other_method || c.validity.is_some() || target.is_some() {
                    m.extras.push(RuleExtra {
                        scope: scope.clone(),
                        method: if other_method { c.method.clone() } else { None },
                        target: target.map(|t| CompiledUri::new(t, SipUserNumbers::UserPhone)),
                        validity: c
                            .validity
                            .iter()
                            .flat_map(|v| v.intervals.iter())
                            .map(|iv| (iv.from().unix_nanos(), iv.until().unix_nanos()))
                            .collect(),
                    });
                    m.extras.len() as u32 - 1
                } else {
                    NO_EXTRA
                };
            m.conditions.push(RuleMatch {
                from: Arc::clone(rule),
                sips,
                extra,
            });
        }
        m.index = index.map(FieldIndexBuilder::build);
        for &(f, ids) in &m.fields {
            let p = &mut m.parts[field_slot(f)];
            for id in &m.identities[ids.range()] {
                let q = id.parts();
                p.host |= q.host;
                p.number |= q.number;
                m.compares_numbers |= id.compares_numbers();
            }
        }
        for (p, index) in m.parts.iter_mut().zip(&m.index) {
            p.key = !index.exact.is_empty();
        }
        m.sips.shrink_to_fit();
        m.fields.shrink_to_fit();
        m.identities.shrink_to_fit();
        m
    }

    fn extra(&self, r: &RuleMatch) -> Option<&RuleExtra> {
        self.extras.get(r.extra as usize)
    }
}

impl CompiledPolicy {
    /// The version of the document this was compiled from.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// True when `self` and `other` share their matching structures (see [`compile_after`]).
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

    /// Canonicalises the fields some rule uses into `scratch`, every part of them (for
    /// [`CompiledPolicy::check`], [`CompiledPolicy::find`] and `explain`).
    pub fn view<'b, 'r>(
        &self,
        ids: &Identities<'r>,
        scratch: &'b mut Scratch,
    ) -> RequestView<'b, 'r> {
        let [f0, t0, r0, p0, p1, tg] = &mut scratch.bufs;
        let mut view = self.fields_view(ids, [f0, t0, r0, p0, p1], None, &mut false);
        if self.matcher.uses_target {
            view.target = ids.target.and_then(|v| uri_canonical(v, tg));
        }
        view
    }

    /// Canonicalises the header fields some rule uses into `bufs` (a view without target).
    /// With `lazy` (where keys built on demand go, and how to get each), only the parts the
    /// policy reads on every request are built ([`Matcher::parts`]); without, all of them.
    /// `*unread` is set when some field is a [`uri::unread_number`].
    #[inline]
    fn fields_view<'b, 'r>(
        &self,
        ids: &Identities<'r>,
        [f0, t0, r0, p0, p1]: [&'b mut Vec<u8>; 5],
        lazy: Option<(&'b mut [Vec<u8>; 5], &mut Keys<'b, 'r>)>,
        unread: &mut bool,
    ) -> RequestView<'b, 'r> {
        let m = &self.matcher;
        let mut view = RequestView::default();
        let mut unused: Keys<'b, 'r> = IN_VIEW;
        let (parts, [kf, kt, kr, kp0, kp1], keys) = match lazy {
            Some((bufs, keys)) => (m.parts, bufs.each_mut().map(Some), keys),
            None => ([Parts::ALL; 4], [None, None, None, None, None], &mut unused),
        };
        let [lf, lt, lr, lp0, lp1] = keys;
        if m.uses[0] {
            let text = ids.from.and_then(|v| header_text(v, 0));
            view.fields[0][0] = field(text, (parts[0], m.numbers, &mut *unread), f0, kf, lf);
        }
        if m.uses[1] {
            let text = ids.to.and_then(|v| header_text(v, 0));
            view.fields[1][0] = field(text, (parts[1], m.numbers, &mut *unread), t0, kt, lt);
        }
        if m.uses[2] {
            let text = ids.request_uri.map(bare_text);
            view.fields[2][0] = field(text, (parts[2], m.numbers, &mut *unread), r0, kr, lr);
        }
        if m.uses[3] {
            let mut values = ids.p_asserted_identity.values();
            let text = values.next().and_then(element_text);
            view.fields[3][0] = field(text, (parts[3], m.numbers, &mut *unread), p0, kp0, lp0);
            let text = values.next().and_then(element_text);
            view.fields[3][1] = field(text, (parts[3], m.numbers, &mut *unread), p1, kp1, lp1);
        }
        view
    }

    /// Checks rule `i` against a request: `Ok` when every condition holds.
    #[inline]
    pub fn check(
        &self,
        i: usize,
        method: &str,
        unix_nanos: i128,
        view: &RequestView<'_, '_>,
    ) -> Result<(), Miss> {
        let mut target = LazyTarget::Ready(view.target);
        self.check_conditions(i, method, method_code(method), unix_nanos, &mut target)?;
        if self.identity_matches(i, &mut { view.fields }, &mut { IN_VIEW }) {
            Ok(())
        } else {
            Err(Miss::CallIdentity)
        }
    }

    /// Every condition but the call-identity, cheapest first, mostly from the dense meta.
    #[inline]
    fn check_conditions(
        &self,
        i: usize,
        method: &str,
        code: Option<u8>,
        unix_nanos: i128,
        target: &mut LazyTarget<'_, '_>,
    ) -> Result<(), Miss> {
        let meta = self.matcher.meta[i];
        if meta.never {
            return Err(Miss::Unsupported);
        }
        let m = &self.matcher;
        let method_ok = if meta.other_method {
            m.extra(&m.conditions[i])
                .and_then(|x| x.method.as_ref())
                .is_some_and(|m| m.as_str() == method)
        } else {
            code.is_some_and(|c| meta.methods & (1 << c) != 0)
        };
        if !method_ok {
            return Err(Miss::Method);
        }
        if !meta.slow {
            return Ok(());
        }
        let Some(r) = m.extra(&m.conditions[i]) else {
            return Ok(());
        };
        if !r.validity.is_empty()
            && !r
                .validity
                .iter()
                .any(|&(f, u)| f <= unix_nanos && unix_nanos < u)
        {
            return Err(Miss::Validity);
        }
        if let Some(t) = &r.target {
            match target.get() {
                None => return Err(Miss::NoTarget),
                Some(c) if !t.matches_entity(c) => return Err(Miss::Target),
                Some(_) => {}
            }
        }
        Ok(())
    }

    #[inline]
    fn identity_matches<'b, 'r>(
        &self,
        i: usize,
        fields: &mut Fields<'b, 'r>,
        keys: &mut Keys<'b, 'r>,
    ) -> bool {
        let m = &self.matcher;
        let sips = &m.sips[m.conditions[i].sips.range()];
        sips.is_empty() || sips.iter().any(|&sip| self.sip_matches(sip, fields, keys))
    }

    #[inline]
    fn sip_matches<'b, 'r>(
        &self,
        sip: Span,
        fields: &mut Fields<'b, 'r>,
        keys: &mut Keys<'b, 'r>,
    ) -> bool {
        let m = &self.matcher;
        m.fields[sip.range()].iter().all(|&(f, ids)| {
            Self::field_matches(
                &m.identities[ids.range()],
                fields,
                keys,
                (field_slot(f), m.numbers),
            )
        })
    }

    /// Some value of field `slot` matches some identity of `ids`.
    #[inline]
    fn field_matches<'b, 'r>(
        ids: &[CompiledIdentity],
        fields: &mut Fields<'b, 'r>,
        keys: &mut Keys<'b, 'r>,
        (slot, numbers): (usize, SipUserNumbers),
    ) -> bool {
        // Only P-Asserted-Identity has a second value.
        let mut spare = LazyKey::InView;
        let [from, to, ruri, pai0, pai1] = keys;
        let keys = match slot {
            0 => [from, &mut spare],
            1 => [to, &mut spare],
            2 => [ruri, &mut spare],
            _ => [pai0, pai1],
        };
        fields[slot].iter_mut().zip(keys).any(|(entry, key)| {
            let Some(parts) = *entry else {
                return false;
            };
            let mut v = Value {
                parts,
                entry,
                key,
                numbers,
            };
            ids.iter().any(|id| id.matches(&mut v))
        })
    }

    /// The first rule (document order) whose conditions all hold, found through the indexes.
    /// `candidates` is scratch space (cleared here).
    #[inline]
    pub fn find(
        &self,
        method: &str,
        unix_nanos: i128,
        view: &RequestView<'_, '_>,
        candidates: &mut Vec<u32>,
    ) -> Option<usize> {
        let mut target = LazyTarget::Ready(view.target);
        let mut keys = IN_VIEW;
        let mut fields = view.fields;
        self.find_in(
            method,
            unix_nanos,
            &mut fields,
            &mut keys,
            &mut target,
            candidates,
        )
    }

    #[inline]
    fn find_in<'b, 'r>(
        &self,
        method: &str,
        unix_nanos: i128,
        fields: &mut Fields<'b, 'r>,
        keys: &mut Keys<'b, 'r>,
        target: &mut LazyTarget<'_, '_>,
        candidates: &mut Vec<u32>,
    ) -> Option<usize> {
        candidates.clear();
        for (slot, values) in fields.iter().enumerate() {
            if !self.matcher.uses[slot] {
                continue;
            }
            for c in values.iter().flatten() {
                self.matcher.index[slot].lookup(c, candidates);
            }
        }
        // Entries are `rule << ENTRY_RULE_SHIFT | method << 1 | sufficient` ([`entry`]):
        // sorting orders by rule; `dedup_by` folds hits on one rule into the first, keeping
        // `sufficient` if any of them had it (the method code is the rule's, the same in all).
        candidates.sort_unstable();
        candidates.dedup_by(|later, earlier| {
            let same = *later >> ENTRY_RULE_SHIFT == *earlier >> ENTRY_RULE_SHIFT;
            if same {
                *earlier |= *later & 1;
            }
            same
        });
        let code = method_code(method);
        // Merge with the always-checked rules (ascending); the first rule that holds wins.
        let (mut a, mut b) = (0, 0);
        let (cands, always) = (&candidates[..], &self.matcher.always[..]);
        loop {
            let split = |e: u32| (e >> ENTRY_RULE_SHIFT, (e >> 1) & 0xf, e & 1 == 1);
            let (rule, method_code, sufficient) =
                match (cands.get(a).map(|&e| split(e)), always.get(b)) {
                    (None, None) => return None,
                    (Some(x), None) => {
                        a += 1;
                        x
                    }
                    (None, Some(&y)) => {
                        b += 1;
                        (y, ENTRY_CHECK, false)
                    }
                    (Some(x), Some(&y)) => {
                        if x.0 <= y {
                            a += 1;
                            if x.0 == y {
                                b += 1;
                            }
                            x
                        } else {
                            b += 1;
                            (y, ENTRY_CHECK, false)
                        }
                    }
                };
            let i = rule as usize;
            // A plain rule's method test is in its entry; others read the rule.
            let conditions_ok = match entry_method_ok(method_code, code) {
                Some(ok) => ok,
                None => self
                    .check_conditions(i, method, code, unix_nanos, target)
                    .is_ok(),
            };
            if conditions_ok && (sufficient || self.identity_matches(i, fields, keys)) {
                return Some(i);
            }
        }
    }

    /// Like [`CompiledPolicy::find`] using `scratch` for both the view and candidates.
    pub fn find_with(
        &self,
        method: &str,
        unix_nanos: i128,
        ids: &Identities<'_>,
        scratch: &mut Scratch,
    ) -> Option<usize> {
        let Scratch {
            bufs,
            keys,
            candidates,
            unread_number,
        } = scratch;
        let [f0, t0, r0, p0, p1, tg] = bufs;
        let mut lazy_keys: Keys<'_, '_> = IN_VIEW;
        let mut unread = false;
        let mut view = self.fields_view(
            ids,
            [f0, t0, r0, p0, p1],
            Some((keys, &mut lazy_keys)),
            &mut unread,
        );
        // The target is canonicalised only if a candidate rule names one.
        let mut target = match self.matcher.uses_target {
            true => LazyTarget::Pending {
                raw: ids.target,
                buf: tg,
            },
            false => LazyTarget::Ready(None),
        };
        let found = self.find_in(
            method,
            unix_nanos,
            &mut view.fields,
            &mut lazy_keys,
            &mut target,
            candidates,
        );
        *unread_number = unread && found.is_none() && self.matcher.compares_numbers;
        found
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

    /// For `explain`: per `<sip>` block of rule `i`, per field, whether it matched.
    pub fn explain_rule(&self, i: usize, view: &RequestView<'_, '_>) -> Vec<Vec<(Field, bool)>> {
        let m = &self.matcher;

        m.sips[m.conditions[i].sips.range()]
            .iter()
            .map(|sip| {
                m.fields[sip.range()]
                    .iter()
                    .map(|&(f, ids)| {
                        let ids = &m.identities[ids.range()];
                        let (mut fields, mut keys) = (view.fields, IN_VIEW);
                        (
                            f,
                            Self::field_matches(
                                ids,
                                &mut fields,
                                &mut keys,
                                (field_slot(f), m.numbers),
                            ),
                        )
                    })
                    .collect()
            })
            .collect()
    }
}

/// Shared ownership of a compiled policy (what shards hold).
pub type SharedPolicy = Arc<CompiledPolicy>;

/// Display of a canonical form for people (`explain`).
pub fn describe_canonical(c: &Canonical<'_, '_>) -> String {
    let mut s = String::from_utf8_lossy(c.key).into_owned();
    if let Some(n) = c.number {
        s.push_str(&format!(
            " (number {}{}{})",
            if n.global { "+" } else { "" },
            String::from_utf8_lossy(n.digits),
            n.context
                .map(|x| format!(", phone-context {}", String::from_utf8_lossy(x)))
                .unwrap_or_default()
        ));
    }
    if let Some(h) = c.host
        && c.number.is_some()
    {
        s.push_str(&format!(" host {}", String::from_utf8_lossy(h)));
    }
    s
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 5_000, ..ProptestConfig::default() })]

        /// The ASCII shortcut of `trim_unicode` is `str::trim`: ends made of ASCII and
        /// Unicode white space (VT and NBSP included), letters and multi-byte characters.
        #[test]
        fn trim_unicode_is_trim(
            s in proptest::collection::vec(proptest::sample::select(&[
                " ", "\t", "\n", "\x0b", "\x0c", "\r", "\u{a0}", "\u{2003}", "\u{3000}", "a",
                "<", ">", "é", "\u{1f600}", "\x00", "\x1f",
            ][..]), 0..6).prop_map(|v| v.concat()),
        ) {
            prop_assert_eq!(super::trim_unicode(&s), s.trim());
        }
    }
}
