//! # loadctl-policy — load-filtering policy documents
//!
//! The `application/load-control+xml` document of RFC 7200 §5–6. Most programs use it through
//! the `loadctl` crate, which re-exports it as `loadctl::policy`.
//!
//! This crate owns the document layer: the model ([`Ruleset`] and friends), the reader
//! ([`read`]: namespace-aware, validating, with line:column errors), the writer ([`write()`]:
//! canonical form, `read(write(r)) == r`) and the partial-update merge ([`merge`]).
//! It knows nothing of requests or limiters; `compile` turns a full [`Ruleset`] into the
//! matching structure.
//!
//! # Example
//! A full document, then a partial one that replaces its rule (RFC 7200 §4.11: the subscriber
//! "associates the partial updates to the particular policy by matching the appropriate rule
//! id"), merged, and written back:
//! ```
//! use loadctl_policy::{Limit, Limits, merge, read, write};
//!
//! let ns = r#"xmlns="urn:ietf:params:xml:ns:common-policy"
//!     xmlns:lc="urn:ietf:params:xml:ns:load-control""#;
//! let full = format!(
//!     r#"<ruleset {ns} version="0" state="full"><rule id="r1"><conditions>
//!     <lc:call-identity><lc:sip><lc:to><many-tel prefix="+1212"/></lc:to></lc:sip>
//!     </lc:call-identity></conditions>
//!     <actions><lc:accept><lc:rate>100</lc:rate></lc:accept></actions></rule></ruleset>"#
//! );
//! let limits = Limits::default();
//! let base = read(full.as_bytes(), &limits)?.ruleset;
//! let partial = format!(
//!     r#"<ruleset {ns} version="1" state="partial"><rule id="r1">
//!     <actions><lc:accept><lc:rate>40</lc:rate></lc:accept></actions></rule></ruleset>"#
//! );
//! let update = read(partial.as_bytes(), &limits)?.ruleset;
//! let merged = merge(Some(&base), update, &limits)?; // version 1 follows 0
//! let rules = merged.rules().expect("a merge yields a full document");
//! assert!(matches!(rules[0].accept.limit, Limit::Rate(r) if r.per_second() == 40.0));
//! assert_eq!(read(write(&merged).as_bytes(), &limits)?.ruleset, merged);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Deletion in partial documents
//! RFC 7200 says a `state="partial"` document updates the previous one "by matching rule id"
//! but defines no way to remove a rule. loadctl's choice: **in a partial document, a rule whose
//! `<actions>` holds no `<accept>` (for example `<rule id="r1"><actions/></rule>`) deletes the
//! rule with that id.** Its conditions, if any, are ignored. In a full document such a rule is an
//! error, since it could only mean a typo. Deleting an id the current policy does not have is an
//! error too (the subscriber's copy has drifted from the notifier's and should re-SUBSCRIBE).
//!
//! # Versions
//! A full document replaces everything, whatever its version (a subscriber decides whether to
//! take it; see the event package). A partial document applies only to version `v` when it
//! carries `v + 1`; anything else is [`MergeError::VersionGap`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod display;
mod error;
mod merge;
mod model;
mod reader;
mod time;
mod writer;

pub use error::{
    ErrorKind, Limit as LimitKind, NumberProblem, PolicyError, Position, ValueError, Warning,
};
pub use merge::{MergeError, merge};
pub use model::*;
pub use reader::{Document, read};
pub use time::Timestamp;
pub use writer::write;

/// RFC 4745 common-policy namespace.
pub const COMMON_POLICY_NS: &str = "urn:ietf:params:xml:ns:common-policy";
/// RFC 7200 load-control namespace.
pub const LOAD_CONTROL_NS: &str = "urn:ietf:params:xml:ns:load-control";
/// The body type of a load-control NOTIFY.
pub const CONTENT_TYPE: &str = "application/load-control+xml";

/// Input limits of the reader and the merge. A document over any of them is rejected whole,
/// except `max_alt_targets`, a soft limit (the first ones are kept, with a warning).
///
/// The defaults fit a carrier-scale policy (100,000 rules of a few hundred bytes each) while
/// bounding the memory and time one NOTIFY can cost. Start from [`Limits::default`] and set
/// the fields to change (`#[non_exhaustive]`: a limit added later breaks no caller).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest body, in bytes. Default 64 MiB.
    pub max_body_bytes: usize,
    /// Most rules in one document, and in the policy a merge produces. Default 100,000.
    pub max_rules: usize,
    /// Deepest element nesting (the schema needs 8). Default 32.
    pub max_depth: usize,
    /// Most identity conditions (`one`, `many`, `many-tel`, `except`, `except-tel`) in one
    /// rule. Default 1,000.
    pub max_identities_per_rule: usize,
    /// Longest attribute value or element text, in bytes. Default 4,096.
    pub max_value_len: usize,
    /// Most URIs kept from one `alt-target`. Default 16. A soft limit: the schema allows any
    /// number (`xs:list` of `xs:anyURI`), so a longer list keeps its first `max_alt_targets`
    /// URIs and the reader warns; the attribute's length is bounded by `max_value_len`.
    pub max_alt_targets: usize,
    /// Most `<from>`/`<until>` pairs in one `<validity>`. Default 64.
    pub max_intervals_per_rule: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 64 << 20,
            max_rules: 100_000,
            max_depth: 32,
            max_identities_per_rule: 1_000,
            max_value_len: 4_096,
            max_alt_targets: 16,
            max_intervals_per_rule: 64,
        }
    }
}
