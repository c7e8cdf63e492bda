//! The conditions of every rule of a policy, compiled into flat vectors, and the indexes that
//! find a request's candidate rules (built once per set of conditions, see
//! [`super::compile_after`]).

use std::sync::Arc;

use super::SourcedRule;
use super::identity::*;
use super::index::*;
use crate::policy::{self, Field, Rule, Uri};
use crate::uri::{Parts, SipUserNumbers};

/// The conditions of every rule, compiled, and the indexes over them.
///
/// Sized for 100,000-rule policies: the call-identities of all rules live in three flat
/// vectors (`sips` → `fields` → `identities`, linked by index ranges) instead of nested
/// per-rule vectors, and what few rules have (validity, target, scope, an extension method)
/// sits in `extras`, so a typical rule costs a few dozen bytes and no allocation of its own
/// beyond its canonical key.
#[derive(Debug)]
pub(super) struct Matcher {
    /// Per rule: the rule its conditions were compiled from (to decide reuse) and where its
    /// compiled conditions are.
    pub(super) conditions: Vec<RuleMatch>,
    /// Every `<sip>` block: a range of `fields`.
    pub(super) sips: Vec<Span>,
    /// Every field test of every block: the field and a range of `identities`.
    pub(super) fields: Vec<(Field, Span)>,
    pub(super) identities: Vec<CompiledIdentity>,
    /// The uncommon conditions, for rules that have any.
    pub(super) extras: Vec<RuleExtra>,
    /// The hot part of each rule, dense, so checking a candidate touches one small entry.
    pub(super) meta: Vec<RuleMeta>,
    pub(super) index: [FieldIndex; 4],
    /// Rules checked for every request (not reachable through an index), ascending.
    pub(super) always: Vec<u32>,
    /// Which request fields some rule looks at (others are not canonicalised).
    pub(super) uses: [bool; 4],
    /// Per field, the parts of its canonical form read on every request: the key when the
    /// exact index has entries, the host when a `many` (or its `except domain`) looks at the
    /// field, the number when a `many-tel` does. Other parts are not built; the key that a
    /// candidate's `one` or `except id` compares is built when first compared.
    pub(super) parts: [Parts; 4],
    /// Per field, how its URIs are looked at before they are parsed.
    pub(super) probe: [Probe; 4],
    pub(super) uses_target: bool,
    /// How SIP user parts are read (the compile option this matcher was built with).
    pub(super) numbers: SipUserNumbers,
    /// Some rule compares telephone numbers (a `many-tel`, or a `one` / `except id` that is a
    /// number): only then is a number-like user part left unread worth counting.
    pub(super) compares_numbers: bool,
}

/// A range of one of the [`Matcher`]'s flat vectors.
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    pub(super) start: u32,
    pub(super) end: u32,
}

impl Span {
    pub(super) fn of<T>(items: &[T]) -> Self {
        let n = items.len() as u32;
        Span { start: n, end: n }
    }

    pub(super) fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// No [`RuleExtra`].
pub(super) const NO_EXTRA: u32 = u32::MAX;

/// One rule's conditions, compiled.
#[derive(Debug)]
pub(super) struct RuleMatch {
    pub(super) from: Arc<Rule>,
    /// Its `<sip>` blocks (a range of [`Matcher::sips`]; empty without a call-identity).
    pub(super) sips: Span,
    /// Index in [`Matcher::extras`], or [`NO_EXTRA`].
    pub(super) extra: u32,
}

/// The conditions few rules have.
#[derive(Debug)]
pub(super) struct RuleExtra {
    /// The target entity the rule was scoped to by its source (for reuse decisions).
    pub(super) scope: Option<Uri>,
    /// The method, kept only when it is an extension method (compared as a string).
    pub(super) method: Option<policy::Method>,
    pub(super) target: Option<CompiledUri>,
    /// (from, until) in Unix nanoseconds; empty when the rule has no `<validity>`.
    pub(super) validity: Vec<(i128, i128)>,
}

impl Matcher {
    pub(super) fn new(rules: &[SourcedRule], numbers: SipUserNumbers) -> Self {
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
            probe: [Probe::Parse; 4],
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
        for ((probe, &parts), index) in m.probe.iter_mut().zip(&m.parts).zip(&m.index) {
            *probe = index.probe(parts);
        }
        m.sips.shrink_to_fit();
        m.fields.shrink_to_fit();
        m.identities.shrink_to_fit();
        m
    }

    pub(super) fn extra(&self, r: &RuleMatch) -> Option<&RuleExtra> {
        self.extras.get(r.extra as usize)
    }
}
