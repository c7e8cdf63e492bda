//! The load-filtering policy document model (RFC 7200 §5–6 on top of RFC 4745).
//!
//! Every type here is owned and already validated: a value of these types is a document the
//! reader would accept. Invariants the RFC states in prose are carried by the types
//! (`NonEmpty` lists, `AltAction::Redirect` always holding targets, `Limit` being exactly one of
//! rate / percent / window, a full document holding no deletions). The few that types cannot
//! express (unique rule ids) are checked by the constructors, so the fields that would allow
//! breaking them are private.

use std::fmt;
use std::sync::Arc;

use super::error::ValueError;
use super::time::Timestamp;

/// A non-empty list, in document order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonEmpty<T>(Vec<T>);

impl<T> NonEmpty<T> {
    /// Wraps `items`; an error when the list is empty.
    pub fn new(items: Vec<T>) -> Result<Self, ValueError> {
        if items.is_empty() {
            Err(ValueError::new("the list holds at least one item"))
        } else {
            Ok(Self(items))
        }
    }

    /// A list of one item.
    pub fn one(item: T) -> Self {
        Self(vec![item])
    }

    /// The first item (there always is one).
    pub fn first(&self) -> &T {
        &self.0[0]
    }

    /// The items as a slice (never empty).
    pub fn as_slice(&self) -> &[T] {
        &self.0
    }

    /// The items, by value.
    pub fn into_vec(self) -> Vec<T> {
        self.0
    }
}

impl<T> std::ops::Deref for NonEmpty<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<'a, T> IntoIterator for &'a NonEmpty<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Whether a document replaces the notifier's whole policy or updates it by rule id (§5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// `state="full"`: the complete policy; replaces whatever the subscriber had.
    Full,
    /// `state="partial"`: changes to apply, by rule id, to the previous version.
    Partial,
}

impl State {
    /// The attribute value (`full` / `partial`).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Full => "full",
            State::Partial => "partial",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A load-control `<ruleset>`: a version and either a full policy or a list of changes.
///
/// Rule ids are unique within a ruleset; the constructors check it, which is why the fields
/// are private.
#[derive(Clone, Debug, PartialEq)]
pub struct Ruleset {
    version: u32,
    body: Body,
}

/// What a ruleset carries, by state. Rules are immutable and shared (`Arc`), so copying a
/// policy, merging a partial update into it or compiling it never copies a rule.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// A full policy: the rules, in the order they are tried (first match wins).
    Full(Vec<Arc<Rule>>),
    /// A partial update: changes applied in document order to the previous version.
    Partial(Vec<Change>),
}

/// One entry of a partial document.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Replace the rule with this id in place, or append it when the id is new.
    Put(Rule),
    /// Remove the rule with this id. Written as a rule whose `<actions>` holds no `<accept>`
    /// (this project's choice: RFC 7200 defines no deletion).
    Delete(RuleId),
}

impl Change {
    /// The rule id the change is about.
    pub fn id(&self) -> &RuleId {
        match self {
            Change::Put(rule) => &rule.id,
            Change::Delete(id) => id,
        }
    }
}

/// A constructor was given two entries with the same rule id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateRuleId(pub RuleId);

impl fmt::Display for DuplicateRuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "duplicate rule id {:?}", self.0.as_str())
    }
}

impl std::error::Error for DuplicateRuleId {}

fn first_duplicate<'a>(ids: impl Iterator<Item = &'a RuleId>) -> Option<&'a RuleId> {
    let mut seen = std::collections::HashSet::new();
    ids.into_iter().find(|id| !seen.insert(id.as_str()))
}

impl Ruleset {
    /// A full policy. Fails when two rules share an id.
    pub fn full(version: u32, rules: Vec<Rule>) -> Result<Self, DuplicateRuleId> {
        Self::full_shared(version, rules.into_iter().map(Arc::new).collect())
    }

    /// A full policy of shared rules. Fails when two rules share an id.
    pub fn full_shared(version: u32, rules: Vec<Arc<Rule>>) -> Result<Self, DuplicateRuleId> {
        if let Some(id) = first_duplicate(rules.iter().map(|r| &r.id)) {
            return Err(DuplicateRuleId(id.clone()));
        }
        Ok(Self {
            version,
            body: Body::Full(rules),
        })
    }

    /// A partial update. Fails when two changes name the same id.
    pub fn partial(version: u32, changes: Vec<Change>) -> Result<Self, DuplicateRuleId> {
        if let Some(id) = first_duplicate(changes.iter().map(Change::id)) {
            return Err(DuplicateRuleId(id.clone()));
        }
        Ok(Self {
            version,
            body: Body::Partial(changes),
        })
    }

    /// The document version (§4.11: increases by one per NOTIFY, starts at 0).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Full or partial.
    pub fn state(&self) -> State {
        match self.body {
            Body::Full(_) => State::Full,
            Body::Partial(_) => State::Partial,
        }
    }

    /// The rules or changes.
    pub fn body(&self) -> &Body {
        &self.body
    }

    /// The rules of a full document, in order; `None` for a partial one.
    pub fn rules(&self) -> Option<&[Arc<Rule>]> {
        match &self.body {
            Body::Full(rules) => Some(rules),
            Body::Partial(_) => None,
        }
    }

    /// Number of rules (full) or changes (partial).
    pub fn len(&self) -> usize {
        match &self.body {
            Body::Full(rules) => rules.len(),
            Body::Partial(changes) => changes.len(),
        }
    }

    /// True when the document holds no rule or change.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the body out.
    pub fn into_body(self) -> Body {
        self.body
    }
}

/// A rule id (`<rule id="…">`): non-empty; compared byte for byte.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(Box<str>);

impl RuleId {
    /// A rule id: non-empty, no control characters, no white space at either end (XML
    /// attribute normalisation would not keep it). The error says why not.
    pub fn new(id: &str) -> Result<Self, ValueError> {
        if id.is_empty() {
            return Err(ValueError::new("a rule id is not empty"));
        }
        if id.chars().any(char::is_control) {
            return Err(ValueError::new("a rule id holds no control characters"));
        }
        if id.trim() != id {
            return Err(ValueError::new("a rule id has no white space at its ends"));
        }
        Ok(Self(id.into()))
    }

    /// The id as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RuleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One `<rule>`: when its conditions all hold, its action decides the request.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// Unique id; partial updates address rules by it.
    pub id: RuleId,
    /// What the request must look like (all present conditions AND).
    pub conditions: Conditions,
    /// How much to accept and what to do with the rest.
    pub accept: Accept,
}

/// `<conditions>`: every present condition must hold. No condition at all matches every
/// request the rule's method set covers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conditions {
    /// `<call-identity>`: the request's identities.
    pub call_identity: Option<CallIdentity>,
    /// `<method>`: absent means INVITE, MESSAGE, REGISTER, SUBSCRIBE, OPTIONS and PUBLISH.
    pub method: Option<Method>,
    /// `<target-sip-entity>`: the overloaded entity the rule protects.
    pub target_sip_entity: Option<Uri>,
    /// `<validity>`: when the rule applies.
    pub validity: Option<Validity>,
    /// Conditions this reader does not understand. RFC 4745 §7: each evaluates to FALSE, so a
    /// rule with any of them never matches (the document stays valid).
    pub unsupported: Vec<ForeignElement>,
}

impl Conditions {
    /// True when the rule can never match because of a condition this reader does not know.
    pub fn never_matches(&self) -> bool {
        !self.unsupported.is_empty()
    }
}

/// An element in a namespace (or with a name) this reader does not implement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignElement {
    namespace: Option<String>,
    name: String,
}

impl ForeignElement {
    /// An element named `name` (an XML NCName: no colon) in `namespace` (`None`: no
    /// namespace). An error when `name` is not an NCName, so the writer always writes
    /// well-formed XML.
    pub fn new(namespace: Option<String>, name: String) -> Result<Self, ValueError> {
        let mut chars = name.chars();
        let start_ok = chars.next().is_some_and(|c| c.is_alphabetic() || c == '_');
        let rest_ok = chars.all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if start_ok && rest_ok {
            Ok(Self { namespace, name })
        } else {
            Err(ValueError::new(
                "an element name is an XML NCName (a letter or '_', then letters, digits, '_', '-', '.')",
            ))
        }
    }

    /// Namespace URI; `None` for an element in no namespace.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// Local name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for ForeignElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{{{ns}}}{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// `<call-identity>`: one or more `<sip>` blocks, OR-ed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallIdentity {
    /// The `<sip>` blocks; any one matching is enough.
    pub sip: NonEmpty<SipIdentity>,
}

/// `<sip>`: header-field conditions, AND-ed. The reader refuses a block with none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SipIdentity {
    /// `<from>`: the From header's URI.
    pub from: Option<IdentitySet>,
    /// `<to>`: the To header's URI.
    pub to: Option<IdentitySet>,
    /// `<request-uri>`: the Request-URI.
    pub request_uri: Option<IdentitySet>,
    /// `<p-asserted-identity>`: the P-Asserted-Identity header's URI.
    pub p_asserted_identity: Option<IdentitySet>,
}

impl SipIdentity {
    /// The present header conditions with their element names, in schema order.
    pub fn fields(&self) -> impl Iterator<Item = (Field, &IdentitySet)> {
        [
            (Field::From, &self.from),
            (Field::To, &self.to),
            (Field::RequestUri, &self.request_uri),
            (Field::PAssertedIdentity, &self.p_asserted_identity),
        ]
        .into_iter()
        .filter_map(|(field, set)| set.as_ref().map(|s| (field, s)))
    }
}

/// A header field a `<sip>` block can test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// From.
    From,
    /// To.
    To,
    /// Request-URI.
    RequestUri,
    /// P-Asserted-Identity.
    PAssertedIdentity,
}

impl Field {
    /// The element name in the document.
    pub fn element(self) -> &'static str {
        match self {
            Field::From => "from",
            Field::To => "to",
            Field::RequestUri => "request-uri",
            Field::PAssertedIdentity => "p-asserted-identity",
        }
    }
}

/// The identities of one header condition, OR-ed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentitySet {
    /// `<one>`, `<many>`, `<many-tel>` in document order.
    pub identities: NonEmpty<Identity>,
}

/// One identity condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// `<one id="URI"/>`: exactly this URI (canonical comparison).
    One(Uri),
    /// `<many domain="…">` (or any identity without a domain), minus the excepts.
    Many {
        /// The domain; `None` matches any identity.
        domain: Option<Domain>,
        /// `<except>` entries subtracted from the set.
        except: Vec<Except>,
    },
    /// `<many-tel prefix="…">`: telephone numbers starting with the prefix, minus the excepts.
    /// Without a prefix (the schema makes it optional; RFC 7200 §5.3.1's own example omits
    /// it), every telephone number: a `tel` URI or a SIP URI with `user=phone`.
    ManyTel {
        /// Digits (with visual separators, as written) or, for local numbers, a phone-context;
        /// `None`: any number.
        prefix: Option<TelPrefix>,
        /// `<except-tel>` entries subtracted from the set.
        except: Vec<ExceptTel>,
    },
}

/// `<except>` inside `<many>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Except {
    /// `<except domain="…"/>`: every identity in that domain.
    Domain(Domain),
    /// `<except id="URI"/>`: one identity.
    Id(Uri),
}

/// `<except-tel>` inside `<many-tel>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExceptTel {
    /// `<except-tel prefix="…"/>`: numbers with that (longer) prefix.
    Prefix(TelPrefix),
    /// `<except-tel id="URI"/>`: one number.
    Id(Uri),
}

macro_rules! text_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub struct $name(Box<str>);

        impl $name {
            /// The value as written in the document.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_newtype!(
    /// A URI as written in the document: a scheme, a colon and a non-empty rest, with no
    /// white space or control characters. Canonicalisation happens at compile time.
    Uri
);
text_newtype!(
    /// A domain name (`many@domain`, `except@domain`): no white space, `@`, `<`, `>` or `/`.
    Domain
);
text_newtype!(
    /// A `many-tel` / `except-tel` prefix: a global number prefix (`+1-212`) whose digits may be
    /// broken up by visual separators, or a phone-context for local numbers.
    TelPrefix
);

impl Uri {
    /// A URI, checked: `sip:`, `sips:` and `tel:` URIs must parse as such (host, port,
    /// escapes), any other scheme needs a non-empty rest; no white space, control characters,
    /// `<`, `>` or `"` anywhere. The error says why not.
    pub fn new(s: &str) -> Result<Self, ValueError> {
        if s.trim() != s {
            return Err(ValueError::new(
                loadctl_sip::uri::UriError::BadCharacter.message(),
            ));
        }
        loadctl_sip::uri::parse(s).map_err(|e| ValueError::new(e.message()))?;
        Ok(Self(s.into()))
    }

    /// The parsed form.
    pub fn parsed(&self) -> loadctl_sip::uri::UriRef<'_> {
        // Checked by the constructor.
        loadctl_sip::uri::parse(&self.0).unwrap_or(loadctl_sip::uri::UriRef::Other {
            scheme: "",
            rest: &self.0,
        })
    }

    /// The scheme, as written.
    pub fn scheme(&self) -> &str {
        self.0.split_once(':').map_or("", |(scheme, _)| scheme)
    }
}

impl Domain {
    /// A domain, checked for the lexical shape described on the type.
    pub fn new(s: &str) -> Result<Self, ValueError> {
        if s.is_empty() {
            return Err(ValueError::new("the domain is empty"));
        }
        if s.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '@' | '<' | '>' | '/' | ';' | '?')
        }) {
            return Err(ValueError::new(
                "a domain holds no white space, control characters or any of @ < > / ; ?",
            ));
        }
        Ok(Self(s.into()))
    }
}

impl TelPrefix {
    /// A prefix, checked: a global prefix (`+` then digits and visual separators, at least one
    /// digit), a run of digits and separators, or a phone-context domain name.
    pub fn new(s: &str) -> Result<Self, ValueError> {
        if s.is_empty() {
            return Err(ValueError::new("the prefix is empty"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ValueError::new(
                "a prefix holds no white space or control characters",
            ));
        }
        let digits_part = s.strip_prefix('+').unwrap_or(s);
        let numeric = digits_part
            .bytes()
            .all(|c| c.is_ascii_digit() || loadctl_sip::uri::is_visual_separator(c));
        if numeric {
            if !digits_part.chars().any(|c| c.is_ascii_digit()) {
                return Err(ValueError::new("a number prefix needs at least one digit"));
            }
        } else if s.starts_with('+') {
            return Err(ValueError::new(
                "a global number prefix holds only digits and - . ( ) after the '+'",
            ));
        } else if Domain::new(s).is_err() {
            return Err(ValueError::new(
                "a phone-context prefix must be a domain name",
            ));
        }
        Ok(Self(s.into()))
    }

    /// The digits of a numeric prefix with separators removed (keeping a leading `+`), or
    /// `None` when the prefix is a phone-context domain.
    pub fn digits(&self) -> Option<String> {
        let rest = self.0.strip_prefix('+').unwrap_or(&self.0);
        if !rest
            .bytes()
            .all(|c| c.is_ascii_digit() || loadctl_sip::uri::is_visual_separator(c))
        {
            return None;
        }
        let mut out = String::with_capacity(self.0.len());
        if self.0.starts_with('+') {
            out.push('+');
        }
        out.extend(rest.chars().filter(char::is_ascii_digit));
        Some(out)
    }
}

/// A SIP method name (RFC 3261 `Method`, case-sensitive).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// INVITE.
    Invite,
    /// ACK.
    Ack,
    /// BYE.
    Bye,
    /// CANCEL.
    Cancel,
    /// REGISTER.
    Register,
    /// OPTIONS.
    Options,
    /// MESSAGE.
    Message,
    /// SUBSCRIBE.
    Subscribe,
    /// NOTIFY.
    Notify,
    /// PUBLISH.
    Publish,
    /// INFO.
    Info,
    /// PRACK.
    Prack,
    /// UPDATE.
    Update,
    /// REFER.
    Refer,
    /// Any other token.
    Other(Box<str>),
}

impl Method {
    const KNOWN: [(Method, &'static str); 14] = [
        (Method::Invite, "INVITE"),
        (Method::Ack, "ACK"),
        (Method::Bye, "BYE"),
        (Method::Cancel, "CANCEL"),
        (Method::Register, "REGISTER"),
        (Method::Options, "OPTIONS"),
        (Method::Message, "MESSAGE"),
        (Method::Subscribe, "SUBSCRIBE"),
        (Method::Notify, "NOTIFY"),
        (Method::Publish, "PUBLISH"),
        (Method::Info, "INFO"),
        (Method::Prack, "PRACK"),
        (Method::Update, "UPDATE"),
        (Method::Refer, "REFER"),
    ];

    /// Parses an RFC 3261 token. Method names are case-sensitive, so `invite` is an extension
    /// method, not INVITE.
    pub fn new(s: &str) -> Result<Self, ValueError> {
        if s.is_empty() {
            return Err(ValueError::new("the method is empty"));
        }
        let is_token_char = |c: char| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    '-' | '.' | '!' | '%' | '*' | '_' | '+' | '`' | '\'' | '~'
                )
        };
        if !s.chars().all(is_token_char) {
            return Err(ValueError::new(
                "a method is a SIP token (letters, digits and - . ! % * _ + ` ' ~)",
            ));
        }
        Ok(Self::KNOWN
            .iter()
            .find(|(_, name)| *name == s)
            .map_or_else(|| Method::Other(s.into()), |(m, _)| m.clone()))
    }

    /// The method name.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Other(name) => name,
            known => Self::KNOWN
                .iter()
                .find(|(m, _)| m == known)
                .map_or("", |(_, name)| name),
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `<validity>`: the rule applies inside any of these intervals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validity {
    /// The intervals, OR-ed.
    pub intervals: NonEmpty<Interval>,
}

impl Validity {
    /// True when `t` lies inside one of the intervals.
    pub fn contains(&self, t: &Timestamp) -> bool {
        self.intervals.iter().any(|i| i.contains(t))
    }
}

/// A `<from>` / `<until>` pair: `from` ≤ t < `until` (RFC 4745 §7.4: "TRUE if the current
/// time is greater than or equal to at least one `<from>` child, but less than the `<until>` child
/// after it").
///
/// A pair whose `until` is not after its `from` is schema-valid and contains no instant: it is
/// kept as written (so the document reads back the same) and [`Interval::is_empty`] says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    from: Timestamp,
    until: Timestamp,
}

impl Interval {
    /// An interval; an error unless `from` is strictly before `until` ([`Interval::pair`]
    /// keeps an empty pair as written).
    pub fn new(from: Timestamp, until: Timestamp) -> Result<Self, ValueError> {
        if from.instant_cmp(&until) == std::cmp::Ordering::Less {
            Ok(Self { from, until })
        } else {
            Err(ValueError::new("an interval's from is before its until"))
        }
    }

    /// The pair as written, in any order: empty (never containing any instant) when `until` is
    /// not after `from`.
    pub fn pair(from: Timestamp, until: Timestamp) -> Self {
        Self { from, until }
    }

    /// True when no instant lies inside (`until` ≤ `from`).
    pub fn is_empty(&self) -> bool {
        self.from.instant_cmp(&self.until) != std::cmp::Ordering::Less
    }

    /// Start (inclusive).
    pub fn from(&self) -> &Timestamp {
        &self.from
    }

    /// End (exclusive).
    pub fn until(&self) -> &Timestamp {
        &self.until
    }

    /// `from` ≤ t < `until`.
    pub fn contains(&self, t: &Timestamp) -> bool {
        use std::cmp::Ordering::*;
        self.from.instant_cmp(t) != Greater && t.instant_cmp(&self.until) == Less
    }
}

/// `<accept>`: how much to let through and what happens to the rest.
#[derive(Clone, Debug, PartialEq)]
pub struct Accept {
    /// Exactly one of rate, percent or window.
    pub limit: Limit,
    /// What the excess gets.
    pub alt_action: AltAction,
}

/// The amount a rule accepts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// `<rate>`: requests per second.
    Rate(Rate),
    /// `<percent>`: percentage of matching requests to accept.
    Percent(Percent),
    /// `<win>`: accepted requests that may be outstanding at once.
    Window(u32),
}

/// A rate in requests per second: finite and ≥ 0.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Rate(f64);

impl Rate {
    /// Upper bound accepted by the reader (requests per second).
    pub const MAX: f64 = 1e12;

    /// No request at all.
    pub const ZERO: Rate = Rate(0.0);

    /// A rate; refused unless 0 ≤ `per_second` ≤ [`Rate::MAX`].
    pub fn new(per_second: f64) -> Result<Self, ValueError> {
        (per_second.is_finite() && (0.0..=Self::MAX).contains(&per_second))
            .then_some(Self(per_second + 0.0))
            .ok_or(ValueError::new(
                "a rate is a number of requests per second from 0 to 10^12",
            ))
    }

    /// Requests per second.
    pub fn per_second(self) -> f64 {
        self.0
    }
}

/// A percentage of matching requests to accept: 0 ≤ p ≤ 100.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Percent(f64);

impl Percent {
    /// A percentage; refused outside 0..=100.
    pub fn new(value: f64) -> Result<Self, ValueError> {
        (value.is_finite() && (0.0..=100.0).contains(&value))
            .then_some(Self(value + 0.0))
            .ok_or(ValueError::new("a percentage is a number from 0 to 100"))
    }

    /// The percentage.
    pub fn value(self) -> f64 {
        self.0
    }
}

/// What happens to a request over the limit (`alt-action`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AltAction {
    /// 503 Service Unavailable (the default).
    Reject,
    /// A 3xx response listing the targets (`alt-target`, at least one).
    Redirect(NonEmpty<Uri>),
    /// No response; over an unreliable transport it is treated as reject (§5.3).
    Drop,
}

impl AltAction {
    /// The attribute value.
    pub fn as_str(&self) -> &'static str {
        match self {
            AltAction::Reject => "reject",
            AltAction::Redirect(_) => "redirect",
            AltAction::Drop => "drop",
        }
    }
}
