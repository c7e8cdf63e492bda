//! The `application/load-control+xml` reader: quick-xml events → validated [`Ruleset`].
//!
//! A recursive descent over namespace-resolved events. Every element of the document is
//! accepted from either the common-policy or the load-control namespace (RFC 7200's schema and
//! examples disagree). Elements in other namespaces follow RFC 4745's extensibility rules:
//! under `<conditions>` they make the rule never match, elsewhere they are ignored; both cases
//! produce a [`Warning`]. An unknown element in one of the two known namespaces is a typo and
//! is refused.
//!
//! A schema-valid document is not refused whole for values this reader would rather not see;
//! it is read, and each such value gets a [`Warning`]:
//! - a `<from>` / `<until>` without a time zone is read as UTC (see [`Timestamp`]);
//! - a `<from>`/`<until>` pair whose `until` is not after its `from` (equal, or earlier) is an
//!   empty interval: RFC 4745 §7.4 makes validity "TRUE if the current time is greater than or
//!   equal to at least one `<from>` child, but less than the `<until>` child after it", which no
//!   instant satisfies, so the rule is never in force in it (other pairs still count);
//! - an `alt-target` with more URIs than [`Limits::max_alt_targets`] keeps the first ones.
//!
//! Nothing is built half-way: the reader either returns a whole [`Document`] or the first
//! error with its line:column and rule id.

mod actions;
mod identity;
mod rules;
mod values;
mod xml;

use quick_xml::NsReader;

use super::Limits;
use super::error::{ErrorKind, Limit as LimitKind, PolicyError, Position, Warning};
use super::model::*;

/// A document the reader accepted, with what it noticed on the way.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The validated ruleset.
    pub ruleset: Ruleset,
    /// Things a person should know (ignored elements, rules that can never match, …).
    pub warnings: Vec<Warning>,
}

/// Reads and validates one load-control document.
///
/// `input` is the NOTIFY body (UTF-8). On success every rule is valid and ids are unique; on
/// failure the error names line:column, the rule id when inside a rule, and what was expected.
pub fn read(input: &[u8], limits: &Limits) -> std::result::Result<Document, PolicyError> {
    if input.len() > limits.max_body_bytes {
        return Err(PolicyError {
            kind: ErrorKind::LimitExceeded {
                limit: LimitKind::BodyBytes,
                max: limits.max_body_bytes,
            },
            position: Position { line: 1, column: 1 },
            rule: None,
        });
    }
    let text = std::str::from_utf8(input).map_err(|e| PolicyError {
        kind: ErrorKind::NotUtf8,
        position: Position::of_offset(input, e.valid_up_to()),
        rule: None,
    })?;
    let bom = if text.starts_with('\u{feff}') { 3 } else { 0 };
    let mut reader = Reader::new(text, bom, limits);
    let ruleset = reader.document()?;
    Ok(Document {
        ruleset,
        warnings: reader.finish_warnings(),
    })
}

struct Reader<'i, 'l> {
    xml: NsReader<&'i [u8]>,
    /// The whole input, for positions (offsets include the BOM).
    input: &'i str,
    /// Bytes before what quick-xml reads (a UTF-8 BOM).
    base: usize,
    limits: &'l Limits,
    depth: usize,
    /// An `<x/>` was returned as an open element; its close is next.
    pending_close: bool,
    /// (byte offset, rule id, message) of each warning.
    warnings: Vec<(usize, Option<String>, String)>,
    /// Id of the rule being read, for error context.
    rule: Option<String>,
    /// Identity conditions counted in the current rule.
    identities: usize,
}

pub(super) type Result<T> = std::result::Result<T, PolicyError>;

impl<'i, 'l> Reader<'i, 'l> {
    fn new(text: &'i str, base: usize, limits: &'l Limits) -> Self {
        let mut xml = NsReader::from_str(&text[base..]);
        let config = xml.config_mut();
        config.trim_text(false);
        config.expand_empty_elements = false;
        config.check_end_names = true;
        config.check_comments = true;
        Self {
            xml,
            input: text,
            base,
            limits,
            depth: 0,
            pending_close: false,
            warnings: Vec::new(),
            rule: None,
            identities: 0,
        }
    }
}
