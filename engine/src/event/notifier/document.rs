//! Which document brings a subscriber from the rules it was sent to its policy: full, partial
//! (RFC 7200 §4.11) or none: a pure function of the two rule lists, which the state machine
//! only calls.

use std::sync::Arc;

use crate::policy::{self, Change, Limits, Rule, Ruleset};

/// True when two policies hold the same rules in the same order.
pub(super) fn same(a: &[Arc<Rule>], b: &[Arc<Rule>]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| Arc::ptr_eq(x, y) || **x == **y)
}

/// The document that brings a subscriber from `sent` (or nothing) to `target` with version
/// `version`: partial when rules were only added or changed (a partial document adds or
/// replaces rules by id, RFC 7200 §4.11: no rule disappears through one), that reproduces
/// `target` exactly and changes fewer rules than it holds; full otherwise; `None` when nothing
/// changed.
pub(super) fn document(
    version: u32,
    sent: Option<&Vec<Arc<Rule>>>,
    target: &[Arc<Rule>],
) -> Option<Ruleset> {
    let full = || Ruleset::full_shared(version, target.to_vec()).ok();
    let Some(sent) = sent else { return full() };
    if sent
        .iter()
        .any(|old| !target.iter().any(|r| r.id == old.id))
    {
        // A rule disappeared: only a full document says so to every subscriber.
        return full();
    }
    let mut changes = Vec::new();
    for new in target {
        match sent.iter().find(|r| r.id == new.id) {
            Some(old) if Arc::ptr_eq(old, new) || **old == **new => {}
            _ => changes.push(Change::Put((**new).clone())),
        }
    }
    if changes.is_empty() {
        // Same rules; a new order needs a full document.
        let same_order = sent.iter().map(|r| &r.id).eq(target.iter().map(|r| &r.id));
        return if same_order { None } else { full() };
    }
    if changes.len() >= target.len() {
        return full();
    }
    let partial = Ruleset::partial(version, changes).ok()?;
    let base = Ruleset::full_shared(version.wrapping_sub(1), sent.clone()).ok()?;
    let mut limits = Limits::default();
    limits.max_rules = usize::MAX;
    match policy::merge(Some(&base), partial.clone(), &limits) {
        Ok(merged)
            if merged
                .rules()
                .is_some_and(|m| m.iter().map(|r| &**r).eq(target.iter().map(|r| &**r))) =>
        {
            Some(partial)
        }
        _ => full(),
    }
}
