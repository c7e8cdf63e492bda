//! Applying a partial document to the current full policy of one notifier (by rule id).
//!
//! The merge is all-or-nothing: it builds the new rule list aside and returns it, or an error
//! and nothing changed.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::Limits;
use super::model::{Body, Change, Rule, RuleId, Ruleset};

/// Why a document could not be applied to the current policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MergeError {
    /// A partial document must carry the current version + 1 (RFC 7200 §4.11). A subscriber
    /// seeing this ignores the document and re-SUBSCRIBEs for a full one.
    VersionGap {
        /// The version that would apply (current + 1; 2^32 when the current one is the last).
        expected: u64,
        /// The version the document carries.
        got: u32,
    },
    /// A partial document arrived with no full policy to apply it to.
    NoBase {
        /// The version the document carries.
        got: u32,
    },
    /// The base handed to the merge is itself a partial document.
    BaseNotFull,
    /// A deletion names an id the current policy does not have.
    UnknownRule(RuleId),
    /// The merged policy would exceed [`Limits::max_rules`].
    TooManyRules {
        /// The limit.
        max: usize,
    },
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MergeError::VersionGap { expected, got } => write!(
                f,
                "partial document has version {got}, expected {expected}: re-SUBSCRIBE for a full policy"
            ),
            MergeError::NoBase { got } => write!(
                f,
                "partial document (version {got}) but no full policy to apply it to"
            ),
            MergeError::BaseNotFull => f.write_str("the base of a merge must be a full policy"),
            MergeError::UnknownRule(id) => {
                write!(
                    f,
                    "partial document deletes rule {:?}, which does not exist",
                    id.as_str()
                )
            }
            MergeError::TooManyRules { max } => {
                write!(f, "the merged policy would have more than {max} rules")
            }
        }
    }
}

impl std::error::Error for MergeError {}

/// Applies `update` to `current` (the notifier's full policy, if it has one) and returns the
/// new full policy.
///
/// - a full `update` replaces everything and is returned as is;
/// - a partial `update` needs `current` at version `update.version() - 1`; each
///   [`Change::Put`] replaces the rule with the same id in place or appends it, each
///   [`Change::Delete`] removes an existing id; the result carries `update`'s version.
pub fn merge(
    current: Option<&Ruleset>,
    update: Ruleset,
    limits: &Limits,
) -> Result<Ruleset, MergeError> {
    let version = update.version();
    let changes = match update.into_body() {
        Body::Full(rules) => {
            if rules.len() > limits.max_rules {
                return Err(MergeError::TooManyRules {
                    max: limits.max_rules,
                });
            }
            // Ids were unique in `update`, so this cannot fail.
            return Ruleset::full_shared(version, rules).map_err(|d| MergeError::UnknownRule(d.0));
        }
        Body::Partial(changes) => changes,
    };
    let base = current.ok_or(MergeError::NoBase { got: version })?;
    let expected = u64::from(base.version()) + 1;
    if u64::from(version) != expected {
        return Err(MergeError::VersionGap {
            expected,
            got: version,
        });
    }
    let base_rules = base.rules().ok_or(MergeError::BaseNotFull)?;
    // Unchanged rules are shared with the base, not copied.
    let mut slots: Vec<Option<Arc<Rule>>> = base_rules.iter().cloned().map(Some).collect();
    let mut index: HashMap<RuleId, usize> = base_rules
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id.clone(), i))
        .collect();
    for change in changes {
        match change {
            Change::Put(rule) => match index.get(&rule.id) {
                Some(&i) => slots[i] = Some(Arc::new(rule)),
                None => {
                    index.insert(rule.id.clone(), slots.len());
                    slots.push(Some(Arc::new(rule)));
                }
            },
            Change::Delete(id) => match index.remove(&id) {
                Some(i) => slots[i] = None,
                None => return Err(MergeError::UnknownRule(id)),
            },
        }
    }
    let rules: Vec<Arc<Rule>> = slots.into_iter().flatten().collect();
    if rules.len() > limits.max_rules {
        return Err(MergeError::TooManyRules {
            max: limits.max_rules,
        });
    }
    Ruleset::full_shared(version, rules).map_err(|d| MergeError::UnknownRule(d.0))
}
