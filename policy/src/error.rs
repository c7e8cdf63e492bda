//! Errors and warnings of the policy reader: what went wrong, where (line:column) and in
//! which rule.

use std::fmt;

/// A place in the document: 1-based line and column (columns count characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1, in characters.
    pub column: u32,
}

impl Position {
    /// The position of byte `offset` in `input` (clamped to the input's length; an offset
    /// inside a multi-byte character counts that character).
    pub fn of_offset(input: &[u8], offset: usize) -> Self {
        let before = &input[..offset.min(input.len())];
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        // Count characters, not bytes: every byte that is not a UTF-8 continuation byte.
        let column = before[line_start..]
            .iter()
            .filter(|&&b| (b & 0xC0) != 0x80)
            .count()
            + 1;
        Self {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Why a number attribute or element was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumberProblem {
    /// Not an xs:integer / xs:decimal at all.
    NotANumber,
    /// Has a fractional part where an integer is required.
    NotAnInteger,
    /// Below zero.
    Negative,
    /// Above the largest allowed value.
    TooLarge,
}

impl fmt::Display for NumberProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NumberProblem::NotANumber => "not a number",
            NumberProblem::NotAnInteger => "not an integer",
            NumberProblem::Negative => "negative",
            NumberProblem::TooLarge => "too large",
        })
    }
}

/// A configured input limit (see [`super::Limits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `max_body_bytes`.
    BodyBytes,
    /// `max_rules`.
    Rules,
    /// `max_depth`.
    Depth,
    /// `max_identities_per_rule`.
    IdentitiesPerRule,
    /// `max_value_len`.
    ValueLength,
    /// `max_intervals_per_rule`.
    IntervalsPerRule,
}

impl Limit {
    /// The name of the [`super::Limits`] field.
    pub fn name(self) -> &'static str {
        match self {
            Limit::BodyBytes => "max_body_bytes",
            Limit::Rules => "max_rules",
            Limit::Depth => "max_depth",
            Limit::IdentitiesPerRule => "max_identities_per_rule",
            Limit::ValueLength => "max_value_len",
            Limit::IntervalsPerRule => "max_intervals_per_rule",
        }
    }
}

/// What is wrong with a document.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input is not UTF-8.
    NotUtf8,
    /// The XML declaration names an encoding other than UTF-8.
    UnsupportedEncoding(String),
    /// Not well-formed XML (the parser's message).
    Xml(String),
    /// A `<!DOCTYPE …>` (and with it any entity declaration): refused to rule out entity bombs.
    Doctype,
    /// A reference to an entity that is not one of XML's five predefined ones.
    UnknownEntity(String),
    /// The document element is not `<ruleset>` in the common-policy or load-control namespace.
    WrongRoot {
        /// The element found, as `{namespace}name`.
        found: String,
    },
    /// A required attribute is missing.
    MissingAttribute {
        /// Element name.
        element: &'static str,
        /// Attribute name.
        attribute: &'static str,
    },
    /// An attribute value is empty where a value is required.
    EmptyAttribute {
        /// Element name.
        element: &'static str,
        /// Attribute name.
        attribute: &'static str,
    },
    /// `version` is not an integer in 0..=4294967295.
    InvalidVersion {
        /// The value as written.
        value: String,
        /// Why.
        problem: NumberProblem,
    },
    /// `state` is neither `full` nor `partial`.
    InvalidState(String),
    /// A rule id that cannot be kept as written.
    InvalidRuleId {
        /// The value as written.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// Two rules share an id.
    DuplicateRuleId {
        /// Where the first rule with that id is.
        first: Position,
    },
    /// `<accept>` holds none of rate / percent / win, or more than one.
    AcceptNeedsOneLimit {
        /// How many it holds.
        found: usize,
    },
    /// `<rate>` is not a decimal ≥ 0 (within [`super::Rate::MAX`]).
    InvalidRate {
        /// The value as written.
        value: String,
        /// Why.
        problem: NumberProblem,
    },
    /// `<percent>` is not a decimal in 0..=100.
    InvalidPercent {
        /// The value as written.
        value: String,
        /// Why.
        problem: NumberProblem,
    },
    /// `<win>` is not an integer in 0..=4294967295.
    InvalidWindow {
        /// The value as written.
        value: String,
        /// Why.
        problem: NumberProblem,
    },
    /// `alt-action` is not `reject`, `redirect` or `drop`.
    UnknownAltAction(String),
    /// `alt-action="redirect"` without any `alt-target`.
    RedirectWithoutTarget,
    /// A URI value is malformed.
    InvalidUri {
        /// The value as written.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// A domain value is malformed.
    InvalidDomain {
        /// The value as written.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// A tel prefix is malformed.
    InvalidPrefix {
        /// The value as written.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// `<method>` is not a SIP token.
    InvalidMethod {
        /// The value as written.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// A `<from>` / `<until>` is not an `xs:dateTime`.
    InvalidDateTime {
        /// The value as written.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// `<except>` / `<except-tel>` needs exactly one of its two attributes.
    ExceptNeedsOneOf {
        /// Element name.
        element: &'static str,
        /// The two attributes, one of which is required.
        attributes: [&'static str; 2],
    },
    /// An element that does not belong where it is.
    UnexpectedElement {
        /// The element found.
        found: String,
        /// Its parent.
        parent: &'static str,
        /// What may appear there.
        expected: &'static str,
    },
    /// An element that may appear once appears again.
    DuplicateElement {
        /// The element.
        element: &'static str,
        /// Its parent.
        parent: &'static str,
    },
    /// A required child element is missing.
    MissingElement {
        /// What is missing.
        expected: &'static str,
        /// In which element.
        parent: &'static str,
    },
    /// Character data where only elements may appear.
    UnexpectedText {
        /// The element holding it.
        parent: &'static str,
    },
    /// An element prefix that no `xmlns` declaration binds.
    UnboundPrefix(String),
    /// Something after the document element, or the input ended inside it.
    Structure(&'static str),
    /// A configured limit was exceeded.
    LimitExceeded {
        /// Which limit.
        limit: Limit,
        /// Its value.
        max: usize,
    },
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind::*;
        match self {
            NotUtf8 => f.write_str("the document is not valid UTF-8"),
            UnsupportedEncoding(e) => write!(f, "unsupported encoding {e:?}: expected UTF-8"),
            Xml(msg) => write!(f, "not well-formed XML: {msg}"),
            Doctype => f.write_str(
                "DOCTYPE and entity declarations are not allowed in a load-control document",
            ),
            UnknownEntity(name) => write!(
                f,
                "unknown entity &{name};: expected one of &amp; &lt; &gt; &quot; &apos; or a character reference"
            ),
            WrongRoot { found } => {
                let unqualified = if found.starts_with('{') {
                    ""
                } else {
                    " in no namespace"
                };
                write!(
                    f,
                    "the document element is <{found}>{unqualified}: expected <ruleset> in the \
                     common-policy or load-control namespace"
                )
            }
            MissingAttribute { element, attribute } => {
                write!(f, "<{element}> lacks the required attribute {attribute:?}")
            }
            EmptyAttribute { element, attribute } => {
                write!(
                    f,
                    "<{element}> attribute {attribute:?} is empty: expected a value"
                )
            }
            InvalidVersion { value, problem } => write!(
                f,
                "version {value:?} is {problem}: expected an integer from 0 to 4294967295"
            ),
            InvalidState(v) => write!(f, "state {v:?}: expected \"full\" or \"partial\""),
            InvalidRuleId { value, reason } => write!(f, "invalid rule id {value:?}: {reason}"),
            DuplicateRuleId { first } => {
                write!(
                    f,
                    "duplicate rule id (first used at {first}): rule ids must be unique"
                )
            }
            AcceptNeedsOneLimit { found: 0 } => {
                f.write_str("<accept> needs exactly one of <rate>, <percent> or <win>; found none")
            }
            AcceptNeedsOneLimit { found } => write!(
                f,
                "<accept> needs exactly one of <rate>, <percent> or <win>; found {found}"
            ),
            InvalidRate { value, problem } => write!(
                f,
                "<rate> {value:?} is {problem}: expected a decimal number of requests per second, 0 or more"
            ),
            InvalidPercent { value, problem } => write!(
                f,
                "<percent> {value:?} is {problem}: expected a decimal from 0 to 100"
            ),
            InvalidWindow { value, problem } => write!(
                f,
                "<win> {value:?} is {problem}: expected an integer from 0 to 4294967295"
            ),
            UnknownAltAction(v) => write!(
                f,
                "alt-action {v:?}: expected \"reject\", \"redirect\" or \"drop\""
            ),
            RedirectWithoutTarget => f.write_str(
                "alt-action=\"redirect\" needs an alt-target attribute with at least one URI",
            ),
            InvalidUri { value, reason } => write!(f, "invalid URI {value:?}: {reason}"),
            InvalidDomain { value, reason } => write!(f, "invalid domain {value:?}: {reason}"),
            InvalidPrefix { value, reason } => write!(f, "invalid prefix {value:?}: {reason}"),
            InvalidMethod { value, reason } => write!(f, "invalid method {value:?}: {reason}"),
            InvalidDateTime { value, reason } => write!(
                f,
                "invalid date-time {value:?}: {reason} (expected e.g. 2008-05-31T12:00:00-05:00)"
            ),
            ExceptNeedsOneOf {
                element,
                attributes: [a, b],
            } => {
                write!(
                    f,
                    "<{element}> needs exactly one of the attributes {a:?} or {b:?}"
                )
            }
            UnexpectedElement {
                found,
                parent,
                expected,
            } => {
                write!(f, "unexpected <{found}> in <{parent}>: expected {expected}")
            }
            DuplicateElement { element, parent } => {
                write!(f, "<{element}> appears more than once in <{parent}>")
            }
            MissingElement { expected, parent } => write!(f, "<{parent}> needs {expected}"),
            UnexpectedText { parent } => {
                write!(f, "unexpected text in <{parent}>: expected only elements")
            }
            UnboundPrefix(p) => write!(f, "the prefix {p:?} is not bound to a namespace"),
            Structure(msg) => f.write_str(msg),
            LimitExceeded { limit, max } => {
                write!(f, "input exceeds the limit {} = {max}", limit.name())
            }
        }
    }
}

/// A value refused by its constructor ([`crate::Uri::new`], [`crate::RuleId::new`],
/// [`crate::Rate::new`] …): what the value must be. The same reason the reader gives for
/// it in a document ([`ErrorKind`]). A `std::error::Error`, so `?` carries it into any error
/// type that takes one:
///
/// ```
/// use loadctl_policy::{Domain, Rate, RuleId, Uri};
///
/// fn values() -> Result<(), Box<dyn std::error::Error>> {
///     let _id = RuleId::new("r1")?;
///     let _uri = Uri::new("sip:ivr@example.net")?;
///     let _domain = Domain::new("example.net")?;
///     let _rate = Rate::new(20.0)?;
///     Ok(())
/// }
/// values().unwrap();
/// assert_eq!(RuleId::new("").unwrap_err().reason(), "a rule id is not empty");
/// assert!(Rate::new(-1.0).is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueError {
    reason: &'static str,
}

impl ValueError {
    pub(crate) fn new(reason: &'static str) -> Self {
        ValueError { reason }
    }

    /// Why the value was refused, as a sentence fragment ("a rule id is not empty").
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason)
    }
}

impl std::error::Error for ValueError {}

/// A rejected document: what, where, and in which rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// What is wrong.
    pub kind: ErrorKind,
    /// Where (line:column of the offending element, attribute or text).
    pub position: Position,
    /// The id of the enclosing rule, when the problem is inside one whose id is known.
    pub rule: Option<String>,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.position)?;
        if let Some(rule) = &self.rule {
            write!(f, "in rule {rule:?}: ")?;
        }
        write!(f, "{}", self.kind)
    }
}

impl std::error::Error for PolicyError {}

/// Something the reader accepted but a person should know about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// Where.
    pub position: Position,
    /// The enclosing rule's id, if any.
    pub rule: Option<String>,
    /// What was noticed.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.position)?;
        if let Some(rule) = &self.rule {
            write!(f, "in rule {rule:?}: ")?;
        }
        f.write_str(&self.message)
    }
}
