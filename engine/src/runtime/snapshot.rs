//! One published state: the merged compiled policy, each rule's key, cell and limit, and the
//! sources it came from.

use super::{CellRef, LimitParams, RuleCell};
use crate::compile::CompiledPolicy;
use crate::policy::Rule;
use crate::sync::{Arc, Name};

/// [`Snapshot::previous`] entry of a rule that was not in the previous snapshot.
pub(crate) const NOT_CARRIED: u32 = u32::MAX;

/// What a snapshot knows about each rule beyond the compiled matcher.
#[derive(Debug)]
pub(crate) struct SnapshotRule {
    pub(crate) key: u64,
    pub(crate) cell: Arc<CellRef>,
    pub(crate) limit: LimitParams,
}

/// One published state: the merged compiled policy plus per-rule keys and shared cells.
#[derive(Debug)]
pub struct Snapshot {
    pub(super) generation: u64,
    pub(super) policy: CompiledPolicy,
    pub(super) rules: Vec<SnapshotRule>,
    /// For each rule, its index in the previous generation's snapshot ([`NOT_CARRIED`] when
    /// new), so shards that follow every publish re-map without hashing.
    pub(crate) previous: Vec<u32>,
    pub(super) sources: Vec<Name>,
    /// The version of each source's policy, indexed like `sources`.
    pub(super) source_versions: Vec<u32>,
}

/// One rule of a published [`Snapshot`], as [`Snapshot::rules`] lists it: the rule as it is
/// enforced, with the source that published it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PublishedRule<'a> {
    /// The name of the source that published the rule.
    pub source: &'a str,
    /// The version (RFC 7200: the `version` attribute of `<ruleset>`) of that source's policy
    /// in this snapshot: that of the last document applied to it, full or partial.
    pub source_version: u32,
    /// The rule, with the source's partial documents merged in.
    pub rule: &'a Rule,
}

impl Snapshot {
    /// Increases by one per publish; 0 is the empty policy the engine starts with.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The merged, compiled policy.
    pub fn policy(&self) -> &CompiledPolicy {
        &self.policy
    }

    /// Source names, indexed by [`crate::compile::CompiledRule::source`].
    pub fn sources(&self) -> &[Name] {
        &self.sources
    }

    /// The shared name of the source rule `i` came from.
    pub(crate) fn source_name(&self, i: usize) -> Name {
        self.policy
            .rules()
            .get(i)
            .and_then(|r| self.sources.get(r.source() as usize))
            .cloned()
            .unwrap_or_else(|| Name::from(""))
    }

    /// The name of the source rule `i` came from.
    pub fn source_of(&self, i: usize) -> &str {
        self.policy
            .rules()
            .get(i)
            .and_then(|r| self.sources.get(r.source() as usize))
            .map_or("", |s| s)
    }

    /// The rules in the order they are tried (the first match wins), each with its source and
    /// the version of the source's policy. The snapshot is immutable: a later publish makes a
    /// new one and leaves this list as it is.
    pub fn rules(&self) -> impl ExactSizeIterator<Item = PublishedRule<'_>> + '_ {
        self.policy.rules().iter().map(|r| {
            let s = r.source() as usize;
            PublishedRule {
                source: self.sources.get(s).map_or("", |n| n),
                source_version: self.source_versions.get(s).copied().unwrap_or(0),
                rule: r.rule(),
            }
        })
    }

    /// The version (RFC 7200: the `version` attribute of `<ruleset>`) of `source`'s policy in
    /// this snapshot: that of the last document applied to it, full or partial. `None` when
    /// the source has no policy here. A source whose policy holds no rule has a version too.
    pub fn source_version(&self, source: &str) -> Option<u32> {
        let i = self.sources.iter().position(|s| &**s == source)?;
        self.source_versions.get(i).copied()
    }

    /// Rule `i`'s shared cell.
    pub fn cell(&self, i: usize) -> Option<&RuleCell> {
        self.rules.get(i).map(|r| &**r.cell)
    }

    /// Rule `i`'s key: a stable hash of (source, rule id, action).
    pub fn key(&self, i: usize) -> u64 {
        self.rules.get(i).map_or(0, |r| r.key)
    }
}

/// A stable 64-bit key for (source, rule id, action): FNV-1a, identical in every process.
pub(crate) fn rule_key(source: &str, rule: &Rule) -> u64 {
    let mut h = crate::hash::Fnv1a::OFFSET;
    h.bytes(source.as_bytes());
    h.bytes(b"\0");
    h.bytes(rule.id.as_str().as_bytes());
    h.bytes(b"\0");
    // The action's canonical text, hashed as it is formatted (no allocation).
    let _ = std::fmt::Write::write_fmt(&mut h, format_args!("{}", rule.accept));
    h.0.max(1)
}
