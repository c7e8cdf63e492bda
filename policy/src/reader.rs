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

use std::borrow::Cow;
use std::collections::HashMap;

use quick_xml::NsReader;
use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::ResolveResult;

use super::error::{ErrorKind, Limit as LimitKind, NumberProblem, PolicyError, Position, Warning};
use super::model::*;
use super::time::Timestamp;
use super::{COMMON_POLICY_NS, LOAD_CONTROL_NS, Limits};

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

/// Which namespace an element is in.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ns {
    /// common-policy or load-control: both are accepted for every element.
    Known,
    /// Another namespace, or none.
    Foreign(Option<String>),
}

/// An element start with its resolved namespace and byte offset.
struct Element<'i> {
    ns: Ns,
    start: BytesStart<'i>,
    offset: usize,
}

impl Element<'_> {
    /// The local name when the element is in a known namespace.
    fn known(&self) -> Option<&str> {
        match self.ns {
            Ns::Known => Some(self.start.local_name().into_inner()),
            Ns::Foreign(_) => None,
        }
    }

    /// The name as written (with its prefix).
    fn written(&self) -> String {
        self.start.name().as_ref().to_owned()
    }

    fn namespace(&self) -> Option<String> {
        match &self.ns {
            Ns::Foreign(ns) => ns.clone(),
            Ns::Known => None,
        }
    }

    fn local(&self) -> String {
        self.start.local_name().into_inner().to_owned()
    }

    /// `{namespace}local` for messages.
    fn expanded(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{{{ns}}}{}", self.local()),
            None => self.local(),
        }
    }
}

enum Node<'i> {
    Open(Element<'i>),
    Close,
    Text { text: Cow<'i, str>, offset: usize },
    Eof,
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

type Result<T> = std::result::Result<T, PolicyError>;

/// Attributes of one element, read once (duplicates are a well-formedness error).
struct Attrs<'a> {
    list: Vec<(&'a str, Cow<'a, str>)>,
}

impl<'a> Attrs<'a> {
    fn get(&self, name: &str) -> Option<&str> {
        self.list
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_ref())
    }
}

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

    // ---- errors, warnings, positions ----

    fn position(&self, offset: usize) -> Position {
        Position::of_offset(self.input.as_bytes(), offset)
    }

    fn error_at(&self, offset: usize, kind: ErrorKind) -> PolicyError {
        PolicyError {
            kind,
            position: self.position(offset),
            rule: self.rule.clone(),
        }
    }

    /// Records a warning; its position is worked out in [`Reader::finish_warnings`], in one
    /// pass over the input, so many warnings do not cost a scan each.
    fn warn(&mut self, offset: usize, message: String) {
        self.warnings.push((offset, self.rule.clone(), message));
    }

    fn finish_warnings(&mut self) -> Vec<Warning> {
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.sort_by_key(|w| w.0);
        let bytes = self.input.as_bytes();
        let (mut line, mut line_start, mut scanned) = (1u32, 0usize, 0usize);
        warnings
            .into_iter()
            .map(|(offset, rule, message)| {
                let offset = offset.min(bytes.len());
                for (i, &b) in bytes[scanned..offset].iter().enumerate() {
                    if b == b'\n' {
                        line += 1;
                        line_start = scanned + i + 1;
                    }
                }
                scanned = offset;
                let column = Position::of_offset(&bytes[line_start..], offset - line_start).column;
                Warning {
                    position: Position { line, column },
                    rule,
                    message,
                }
            })
            .collect()
    }

    /// The offset of attribute `name` inside the start tag of `e` (or of the tag itself).
    fn attr_offset(&self, e: &Element<'_>, name: &str) -> usize {
        let tag = &self.input[e.offset..];
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        let mut from = 0;
        while let Some(i) = tag[from..].find(name) {
            let at = from + i;
            let before_ok = tag[..at].ends_with(|c: char| c.is_ascii_whitespace());
            let after_ok = tag[at + name.len()..].trim_start().starts_with('=');
            if before_ok && after_ok {
                return e.offset + at;
            }
            from = at + name.len();
        }
        e.offset
    }

    // ---- events ----

    fn next(&mut self) -> Result<Node<'i>> {
        if self.pending_close {
            self.pending_close = false;
            self.depth -= 1;
            return Ok(Node::Close);
        }
        loop {
            let offset = self.base + usize::try_from(self.xml.buffer_position()).unwrap_or(0);
            let (resolved, event) = match self.xml.read_resolved_event() {
                Ok(pair) => pair,
                Err(e) => {
                    let at = self.base + usize::try_from(self.xml.error_position()).unwrap_or(0);
                    return Err(self.error_at(at, xml_error_kind(&e)));
                }
            };
            let ns = match resolved {
                // The namespace name is the declaring attribute's value with its references
                // replaced (the parser hands it over as written).
                ResolveResult::Bound(ns) => match quick_xml::escape::unescape(ns.as_ref()) {
                    Ok(name) if name == COMMON_POLICY_NS || name == LOAD_CONTROL_NS => Ns::Known,
                    Ok(name) => Ns::Foreign(Some(name.into_owned())),
                    Err(e) => return Err(self.error_at(offset, ErrorKind::Xml(e.to_string()))),
                },
                ResolveResult::Unbound => Ns::Foreign(None),
                ResolveResult::Unknown(prefix) => {
                    return Err(self.error_at(offset, ErrorKind::UnboundPrefix(prefix)));
                }
            };
            match event {
                Event::Start(start) => return self.open(ns, start, offset, false),
                Event::Empty(start) => return self.open(ns, start, offset, true),
                Event::End(_) => {
                    self.depth -= 1;
                    return Ok(Node::Close);
                }
                Event::Text(t) => {
                    return Ok(Node::Text {
                        text: t.xml10_content(),
                        offset,
                    });
                }
                Event::CData(c) => {
                    let text = c.xml10_content();
                    return Ok(Node::Text { text, offset });
                }
                Event::GeneralRef(r) => {
                    let resolved = match r.resolve_char_ref() {
                        Ok(Some(c)) => Cow::Owned(c.to_string()),
                        Ok(None) => {
                            let name = r.xml10_content();
                            match quick_xml::escape::resolve_predefined_entity(&name) {
                                Some(s) => Cow::Borrowed(s),
                                None => {
                                    return Err(self.error_at(
                                        offset,
                                        ErrorKind::UnknownEntity(name.into_owned()),
                                    ));
                                }
                            }
                        }
                        Err(e) => return Err(self.error_at(offset, xml_error_kind(&e))),
                    };
                    return Ok(Node::Text {
                        text: resolved,
                        offset,
                    });
                }
                Event::Decl(decl) => {
                    if let Some(Ok(enc)) = decl.encoding() {
                        let enc = String::from_utf8_lossy(enc.as_bytes()).into_owned();
                        if !enc.eq_ignore_ascii_case("utf-8") && !enc.eq_ignore_ascii_case("utf8") {
                            return Err(self.error_at(offset, ErrorKind::UnsupportedEncoding(enc)));
                        }
                    }
                }
                Event::DocType(_) => return Err(self.error_at(offset, ErrorKind::Doctype)),
                Event::Comment(_) | Event::PI(_) => {}
                Event::Eof => return Ok(Node::Eof),
            }
        }
    }

    fn open(
        &mut self,
        ns: Ns,
        start: BytesStart<'i>,
        offset: usize,
        empty: bool,
    ) -> Result<Node<'i>> {
        self.depth += 1;
        if self.depth > self.limits.max_depth {
            return Err(self.error_at(
                offset,
                ErrorKind::LimitExceeded {
                    limit: LimitKind::Depth,
                    max: self.limits.max_depth,
                },
            ));
        }
        // What the parser lets through but XML 1.0 and Namespaces do not: `<` in an attribute
        // value, and a namespace declaration with an empty prefix (`xmlns:=`).
        for attr in start.attributes().with_checks(false).flatten() {
            let key = attr.key.into_inner();
            if key == "xmlns:" || attr.value.contains('<') {
                let what = if key == "xmlns:" {
                    "a namespace prefix declared with an empty name"
                } else {
                    "'<' in an attribute value"
                };
                return Err(self.error_at(offset, ErrorKind::Xml(what.into())));
            }
        }
        self.pending_close = empty;
        Ok(Node::Open(Element { ns, start, offset }))
    }

    /// Reads all attributes of `e`, unescaped; `xmlns` declarations are left out.
    fn attrs<'e>(&self, e: &'e Element<'i>) -> Result<Attrs<'e>> {
        let mut list = Vec::new();
        for attr in e.start.attributes() {
            let attr =
                attr.map_err(|err| self.error_at(e.offset, ErrorKind::Xml(err.to_string())))?;
            let key = attr.key.into_inner();
            if key == "xmlns" || key.starts_with("xmlns:") {
                continue;
            }
            let name = key;
            let value = attr
                .normalized_value(XmlVersion::Implicit1_0)
                .map_err(|err| self.error_at(self.attr_offset(e, name), xml_error_kind(&err)))?;
            if value.len() > self.limits.max_value_len {
                return Err(self.error_at(
                    self.attr_offset(e, name),
                    ErrorKind::LimitExceeded {
                        limit: LimitKind::ValueLength,
                        max: self.limits.max_value_len,
                    },
                ));
            }
            list.push((key, value));
        }
        Ok(Attrs { list })
    }

    /// A required attribute, trimmed, non-empty.
    fn required<'a>(
        &self,
        e: &Element<'_>,
        attrs: &'a Attrs<'_>,
        element: &'static str,
        attribute: &'static str,
    ) -> Result<&'a str> {
        match attrs.get(attribute).map(str::trim) {
            None => {
                Err(self.error_at(e.offset, ErrorKind::MissingAttribute { element, attribute }))
            }
            Some("") => Err(self.error_at(
                self.attr_offset(e, attribute),
                ErrorKind::EmptyAttribute { element, attribute },
            )),
            Some(v) => Ok(v),
        }
    }

    /// Skips the rest of an element already opened.
    fn skip(&mut self) -> Result<()> {
        let mut depth = 0usize;
        loop {
            match self.next()? {
                Node::Open(_) => depth += 1,
                Node::Close if depth == 0 => return Ok(()),
                Node::Close => depth -= 1,
                Node::Text { .. } => {}
                Node::Eof => return Err(self.eof_inside()),
            }
        }
    }

    fn eof_inside(&self) -> PolicyError {
        self.error_at(
            self.input.len(),
            ErrorKind::Structure("the document ends inside an element"),
        )
    }

    /// Walks the children of an element with element-only content: `child` is called for each
    /// child element (and must consume it); non-blank text is an error.
    fn children(
        &mut self,
        parent: &'static str,
        mut child: impl FnMut(&mut Self, Element<'i>) -> Result<()>,
    ) -> Result<()> {
        loop {
            match self.next()? {
                Node::Open(e) => child(self, e)?,
                Node::Close => return Ok(()),
                Node::Text { text, offset } => {
                    if let Some(skip) = text.find(|c: char| !is_xml_space(c)) {
                        return Err(
                            self.error_at(offset + skip, ErrorKind::UnexpectedText { parent })
                        );
                    }
                }
                Node::Eof => return Err(self.eof_inside()),
            }
        }
    }

    /// The text content of a simple element, trimmed, with its offset. Child elements in a
    /// foreign namespace are ignored (with a warning); others are an error.
    fn text(&mut self, parent: &'static str, e: &Element<'_>) -> Result<(String, usize)> {
        let mut out = String::new();
        let mut first = None;
        loop {
            match self.next()? {
                Node::Text { text, offset } => {
                    if first.is_none()
                        && let Some(i) = text.find(|c: char| !is_xml_space(c))
                    {
                        first = Some(offset + i);
                    }
                    out.push_str(&text);
                    if out.len() > self.limits.max_value_len {
                        return Err(self.error_at(
                            offset,
                            ErrorKind::LimitExceeded {
                                limit: LimitKind::ValueLength,
                                max: self.limits.max_value_len,
                            },
                        ));
                    }
                }
                Node::Open(child) => self.unexpected_or_ignored(parent, "text", child)?,
                Node::Close => break,
                Node::Eof => return Err(self.eof_inside()),
            }
        }
        let trimmed = out.trim_matches(is_xml_space);
        Ok((trimmed.to_owned(), first.unwrap_or(e.offset)))
    }

    /// A child that does not belong: refused when in a known namespace, skipped with a warning
    /// otherwise (RFC 4745 extensibility).
    fn unexpected_or_ignored(
        &mut self,
        parent: &'static str,
        expected: &'static str,
        child: Element<'_>,
    ) -> Result<()> {
        if child.known().is_some() {
            return Err(self.error_at(
                child.offset,
                ErrorKind::UnexpectedElement {
                    found: child.written(),
                    parent,
                    expected,
                },
            ));
        }
        self.warn(
            child.offset,
            format!(
                "ignored <{}> ({}) in <{parent}>",
                child.written(),
                child.expanded()
            ),
        );
        self.skip()
    }

    fn count_identity(&mut self, offset: usize) -> Result<()> {
        self.identities += 1;
        if self.identities > self.limits.max_identities_per_rule {
            return Err(self.error_at(
                offset,
                ErrorKind::LimitExceeded {
                    limit: LimitKind::IdentitiesPerRule,
                    max: self.limits.max_identities_per_rule,
                },
            ));
        }
        Ok(())
    }

    // ---- the document ----

    fn document(&mut self) -> Result<Ruleset> {
        let mut ruleset = None;
        loop {
            match self.next()? {
                Node::Open(e) if ruleset.is_none() => {
                    if e.known() != Some("ruleset") {
                        let found = e.expanded();
                        return Err(self.error_at(e.offset, ErrorKind::WrongRoot { found }));
                    }
                    ruleset = Some(self.ruleset(&e)?);
                }
                Node::Open(e) => {
                    return Err(self.error_at(
                        e.offset,
                        ErrorKind::Structure("a second element after the document element"),
                    ));
                }
                Node::Text { text, offset } => {
                    if let Some(i) = text.find(|c: char| !is_xml_space(c)) {
                        return Err(self.error_at(
                            offset + i,
                            ErrorKind::Structure("text outside the document element"),
                        ));
                    }
                }
                Node::Close => {
                    return Err(
                        self.error_at(self.input.len(), ErrorKind::Structure("unbalanced end tag"))
                    );
                }
                Node::Eof => break,
            }
        }
        ruleset.ok_or_else(|| {
            self.error_at(
                self.input.len(),
                ErrorKind::Structure("the document holds no element: expected <ruleset>"),
            )
        })
    }

    fn ruleset(&mut self, e: &Element<'i>) -> Result<Ruleset> {
        let attrs = self.attrs(e)?;
        let version_text = self.required(e, &attrs, "ruleset", "version")?;
        let version = parse_integer(version_text).map_err(|problem| {
            self.error_at(
                self.attr_offset(e, "version"),
                ErrorKind::InvalidVersion {
                    value: version_text.to_owned(),
                    problem,
                },
            )
        })?;
        let state = match self.required(e, &attrs, "ruleset", "state")? {
            "full" => State::Full,
            "partial" => State::Partial,
            other => {
                return Err(self.error_at(
                    self.attr_offset(e, "state"),
                    ErrorKind::InvalidState(other.to_owned()),
                ));
            }
        };
        // Rule id → byte offset of its <rule> (positions are computed only for errors).
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut rules = Vec::new();
        let mut changes = Vec::new();
        self.children("ruleset", |r, child| {
            if child.known() != Some("rule") {
                return r.unexpected_or_ignored("ruleset", "<rule>", child);
            }
            if seen.len() >= r.limits.max_rules {
                return Err(r.error_at(
                    child.offset,
                    ErrorKind::LimitExceeded {
                        limit: LimitKind::Rules,
                        max: r.limits.max_rules,
                    },
                ));
            }
            let (rule_id, conditions, accept) = r.rule(&child)?;
            if let Some(&first) = seen.get(rule_id.as_str()) {
                return Err(PolicyError {
                    kind: ErrorKind::DuplicateRuleId {
                        first: r.position(first),
                    },
                    position: r.position(child.offset),
                    rule: Some(rule_id.as_str().to_owned()),
                });
            }
            seen.insert(rule_id.as_str().to_owned(), child.offset);
            match (state, accept) {
                (State::Full, Some(accept)) => rules.push(Rule {
                    id: rule_id,
                    conditions,
                    accept,
                }),
                (State::Partial, Some(accept)) => changes.push(Change::Put(Rule {
                    id: rule_id,
                    conditions,
                    accept,
                })),
                (State::Partial, None) => changes.push(Change::Delete(rule_id)),
                (State::Full, None) => {
                    return Err(PolicyError {
                        kind: ErrorKind::MissingElement {
                            expected: "an <accept> in <actions> (a rule without one deletes \
                                       that id, which only a state=\"partial\" document may do)",
                            parent: "rule",
                        },
                        position: r.position(child.offset),
                        rule: Some(rule_id.as_str().to_owned()),
                    });
                }
            }
            Ok(())
        })?;
        // Ids were checked above; the constructors cannot fail here.
        let built = match state {
            State::Full => Ruleset::full(version, rules),
            State::Partial => Ruleset::partial(version, changes),
        };
        built.map_err(|dup| {
            self.error_at(
                e.offset,
                ErrorKind::DuplicateRuleId {
                    first: self.position(e.offset),
                },
            )
            .in_rule(dup.0.as_str())
        })
    }

    fn rule(&mut self, e: &Element<'i>) -> Result<(RuleId, Conditions, Option<Accept>)> {
        let attrs = self.attrs(e)?;
        self.rule = None;
        let id_text = self.required(e, &attrs, "rule", "id")?;
        let id = RuleId::new(id_text).map_err(|reason| {
            self.error_at(
                self.attr_offset(e, "id"),
                ErrorKind::InvalidRuleId {
                    value: id_text.to_owned(),
                    reason: reason.reason(),
                },
            )
        })?;
        self.rule = Some(id.as_str().to_owned());
        self.identities = 0;
        let mut conditions: Option<Conditions> = None;
        let mut actions: Option<Option<Accept>> = None;
        self.children("rule", |r, child| {
            match child.known() {
                Some("conditions") => {
                    if conditions.is_some() {
                        return Err(r.duplicate(&child, "conditions", "rule"));
                    }
                    conditions = Some(r.conditions()?);
                }
                Some("actions") => {
                    if actions.is_some() {
                        return Err(r.duplicate(&child, "actions", "rule"));
                    }
                    actions = Some(r.actions()?);
                }
                Some("transformations") => {
                    r.warn(
                        child.offset,
                        "ignored <transformations>: load control defines none".to_owned(),
                    );
                    r.skip()?;
                }
                _ => r.unexpected_or_ignored(
                    "rule",
                    "<conditions>, <actions> or <transformations>",
                    child,
                )?,
            }
            Ok(())
        })?;
        self.rule = None;
        Ok((id, conditions.unwrap_or_default(), actions.flatten()))
    }

    fn duplicate(
        &self,
        e: &Element<'_>,
        element: &'static str,
        parent: &'static str,
    ) -> PolicyError {
        self.error_at(e.offset, ErrorKind::DuplicateElement { element, parent })
    }

    fn conditions(&mut self) -> Result<Conditions> {
        let mut c = Conditions::default();
        self.children("conditions", |r, child| {
            match child.known() {
                Some("call-identity") => {
                    if c.call_identity.is_some() {
                        return Err(r.duplicate(&child, "call-identity", "conditions"));
                    }
                    c.call_identity = r.call_identity(&child, &mut c.unsupported)?;
                }
                Some("method") => {
                    if c.method.is_some() {
                        return Err(r.duplicate(&child, "method", "conditions"));
                    }
                    let (text, at) = r.text("method", &child)?;
                    c.method = Some(Method::new(&text).map_err(|reason| {
                        r.error_at(at, ErrorKind::InvalidMethod { value: text.clone(), reason: reason.reason() })
                    })?);
                }
                Some("target-sip-entity") => {
                    if c.target_sip_entity.is_some() {
                        return Err(r.duplicate(&child, "target-sip-entity", "conditions"));
                    }
                    let (text, at) = r.text("target-sip-entity", &child)?;
                    c.target_sip_entity = Some(r.uri(&text, at)?);
                }
                Some("validity") => {
                    if c.validity.is_some() {
                        return Err(r.duplicate(&child, "validity", "conditions"));
                    }
                    c.validity = Some(r.validity(&child)?);
                }
                Some("identity" | "sphere") => r.unsupported(child, &mut c.unsupported)?,
                Some(_) => {
                    return Err(r.error_at(
                        child.offset,
                        ErrorKind::UnexpectedElement {
                            found: child.written(),
                            parent: "conditions",
                            expected: "<call-identity>, <method>, <target-sip-entity> or <validity>",
                        },
                    ));
                }
                None => r.unsupported(child, &mut c.unsupported)?,
            }
            Ok(())
        })?;
        Ok(c)
    }

    /// A condition this reader does not implement: the rule never matches (RFC 4745 §7).
    fn unsupported(&mut self, e: Element<'_>, into: &mut Vec<ForeignElement>) -> Result<()> {
        self.warn(
            e.offset,
            format!(
                "condition <{}> ({}) is not supported: this rule never matches (RFC 4745 §7)",
                e.written(),
                e.expanded()
            ),
        );
        // A name that came out of the XML parser is always an NCName.
        into.extend(ForeignElement::new(e.namespace(), e.local()).ok());
        self.skip()
    }

    fn call_identity(
        &mut self,
        e: &Element<'_>,
        unsupported: &mut Vec<ForeignElement>,
    ) -> Result<Option<CallIdentity>> {
        let mut sips = Vec::new();
        let mut foreign = false;
        self.children("call-identity", |r, child| {
            match child.known() {
                Some("sip") => {
                    if let Some(sip) = r.sip(&child, unsupported)? {
                        sips.push(sip);
                    }
                }
                Some(_) => {
                    return Err(r.error_at(
                        child.offset,
                        ErrorKind::UnexpectedElement {
                            found: child.written(),
                            parent: "call-identity",
                            expected: "<sip>",
                        },
                    ));
                }
                None => {
                    foreign = true;
                    r.unsupported(child, unsupported)?;
                }
            }
            Ok(())
        })?;
        match NonEmpty::new(sips) {
            Ok(sip) => Ok(Some(CallIdentity { sip })),
            Err(_) if foreign || !unsupported.is_empty() => Ok(None),
            Err(_) => Err(self.error_at(
                e.offset,
                ErrorKind::MissingElement {
                    expected: "at least one <sip>",
                    parent: "call-identity",
                },
            )),
        }
    }

    fn sip(
        &mut self,
        e: &Element<'_>,
        unsupported: &mut Vec<ForeignElement>,
    ) -> Result<Option<SipIdentity>> {
        let mut sip = SipIdentity::default();
        let mut foreign = false;
        self.children("sip", |r, child| {
            let (slot, name) = match child.known() {
                Some("from") => (&mut sip.from, "from"),
                Some("to") => (&mut sip.to, "to"),
                Some("request-uri") => (&mut sip.request_uri, "request-uri"),
                Some("p-asserted-identity") => {
                    (&mut sip.p_asserted_identity, "p-asserted-identity")
                }
                Some(_) => {
                    return Err(r.error_at(
                        child.offset,
                        ErrorKind::UnexpectedElement {
                            found: child.written(),
                            parent: "sip",
                            expected: "<from>, <to>, <request-uri> or <p-asserted-identity>",
                        },
                    ));
                }
                None => {
                    foreign = true;
                    return r.unsupported(child, unsupported);
                }
            };
            if slot.is_some() {
                return Err(r.duplicate(&child, name, "sip"));
            }
            match r.identity_set(&child, name, unsupported)? {
                Some(set) => *slot = Some(set),
                None => foreign = true,
            }
            Ok(())
        })?;
        if sip.fields().next().is_none() {
            if foreign {
                return Ok(None);
            }
            return Err(self.error_at(
                e.offset,
                ErrorKind::MissingElement {
                    expected: "at least one of <from>, <to>, <request-uri> or <p-asserted-identity>",
                    parent: "sip",
                },
            ));
        }
        Ok(Some(sip))
    }

    fn identity_set(
        &mut self,
        e: &Element<'_>,
        parent: &'static str,
        unsupported: &mut Vec<ForeignElement>,
    ) -> Result<Option<IdentitySet>> {
        let mut identities = Vec::new();
        let mut foreign = false;
        self.children(parent, |r, child| {
            r.count_identity(child.offset)?;
            match child.known() {
                Some("one") => {
                    let attrs = r.attrs(&child)?;
                    let id = r.required(&child, &attrs, "one", "id")?;
                    let uri = r.uri(id, r.attr_offset(&child, "id"))?;
                    drop(attrs);
                    r.ignore_children("one")?;
                    identities.push(Identity::One(uri));
                }
                Some("many") => {
                    let attrs = r.attrs(&child)?;
                    let domain = match attrs.get("domain").map(|d| d.trim()) {
                        None => None,
                        Some(d) => Some(r.domain(d, r.attr_offset(&child, "domain"))?),
                    };
                    drop(attrs);
                    let except =
                        r.excepts("many", "except", ["domain", "id"], |r, attr, value, at| {
                            match attr {
                                "domain" => Ok(Except::Domain(r.domain(value, at)?)),
                                _ => Ok(Except::Id(r.uri(value, at)?)),
                            }
                        })?;
                    identities.push(Identity::Many { domain, except });
                }
                Some("many-tel") => {
                    let attrs = r.attrs(&child)?;
                    // `prefix` is optional in the schema (RFC 7200 §6): without it, any number.
                    let prefix = match attrs.get("prefix").map(str::trim) {
                        None => None,
                        Some(p) => Some(r.prefix(p, r.attr_offset(&child, "prefix"))?),
                    };
                    drop(attrs);
                    let except = r.excepts(
                        "many-tel",
                        "except-tel",
                        ["prefix", "id"],
                        |r, attr, value, at| match attr {
                            "prefix" => Ok(ExceptTel::Prefix(r.prefix(value, at)?)),
                            _ => Ok(ExceptTel::Id(r.uri(value, at)?)),
                        },
                    )?;
                    identities.push(Identity::ManyTel { prefix, except });
                }
                Some(_) => {
                    return Err(r.error_at(
                        child.offset,
                        ErrorKind::UnexpectedElement {
                            found: child.written(),
                            parent,
                            expected: "<one>, <many> or <many-tel>",
                        },
                    ));
                }
                None => {
                    foreign = true;
                    r.unsupported(child, unsupported)?;
                }
            }
            Ok(())
        })?;
        match NonEmpty::new(identities) {
            Ok(identities) => Ok(Some(IdentitySet { identities })),
            Err(_) if foreign => Ok(None),
            Err(_) => Err(self.error_at(
                e.offset,
                ErrorKind::MissingElement {
                    expected: "at least one of <one>, <many> or <many-tel>",
                    parent,
                },
            )),
        }
    }

    /// The `<except>` / `<except-tel>` children of `<many>` / `<many-tel>`; each carries
    /// exactly one of `attributes`, turned into a value by `make`.
    fn excepts<T>(
        &mut self,
        parent: &'static str,
        element: &'static str,
        attributes: [&'static str; 2],
        mut make: impl FnMut(&Self, &str, &str, usize) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.children(parent, |r, child| {
            if child.known() != Some(element) {
                return r.unexpected_or_ignored(
                    parent,
                    if element == "except" {
                        "<except>"
                    } else {
                        "<except-tel>"
                    },
                    child,
                );
            }
            r.count_identity(child.offset)?;
            let attrs = r.attrs(&child)?;
            let present: Vec<&str> = attributes
                .iter()
                .copied()
                .filter(|a| attrs.get(a).is_some())
                .collect();
            let [attr] = present[..] else {
                return Err(r.error_at(
                    child.offset,
                    ErrorKind::ExceptNeedsOneOf {
                        element,
                        attributes,
                    },
                ));
            };
            let value = r.required(&child, &attrs, element, attr)?;
            let item = make(r, attr, value, r.attr_offset(&child, attr))?;
            drop(attrs);
            r.ignore_children(element)?;
            out.push(item);
            Ok(())
        })?;
        Ok(out)
    }

    /// The children of an element that defines none: foreign ones are skipped with a warning.
    fn ignore_children(&mut self, parent: &'static str) -> Result<()> {
        self.children(parent, |r, child| {
            r.unexpected_or_ignored(parent, "no child element", child)
        })
    }

    fn validity(&mut self, e: &Element<'_>) -> Result<Validity> {
        let mut intervals = Vec::new();
        let mut open: Option<(Timestamp, usize)> = None;
        self.children("validity", |r, child| {
            let which = match child.known() {
                Some("from") => "from",
                Some("until") => "until",
                _ => return r.unexpected_or_ignored("validity", "<from> and <until> pairs", child),
            };
            let (text, at) = r.text(which, &child)?;
            let (t, zoned) = Timestamp::parse_assuming_utc(&text).map_err(|reason| {
                r.error_at(
                    at,
                    ErrorKind::InvalidDateTime {
                        value: text.clone(),
                        reason: reason.reason(),
                    },
                )
            })?;
            if !zoned {
                r.warn(
                    at,
                    format!(
                        "<{which}> {text:?} has no time zone: read as UTC ({}Z); RFC 4745 \
                         (erratum 1455) requires one",
                        t.to_string().trim_end_matches('Z')
                    ),
                );
            }
            match (which, open.take()) {
                ("from", None) => open = Some((t, child.offset)),
                ("until", Some((from, _))) => {
                    let interval = Interval::pair(from, t);
                    if interval.is_empty() {
                        let how = if from.instant_cmp(&t) == std::cmp::Ordering::Equal {
                            "equals"
                        } else {
                            "is before"
                        };
                        r.warn(
                            child.offset,
                            format!(
                                "<until> {t} {how} <from> {from}: an empty interval, the rule is \
                                 never in force in it (RFC 4745 §7.4)"
                            ),
                        );
                    }
                    if intervals.len() >= r.limits.max_intervals_per_rule {
                        return Err(r.error_at(
                            child.offset,
                            ErrorKind::LimitExceeded {
                                limit: LimitKind::IntervalsPerRule,
                                max: r.limits.max_intervals_per_rule,
                            },
                        ));
                    }
                    intervals.push(interval);
                }
                _ => {
                    return Err(r.error_at(
                        child.offset,
                        ErrorKind::MissingElement {
                            expected: "<from> and <until> in pairs (each <from> followed by its <until>)",
                            parent: "validity",
                        },
                    ));
                }
            }
            Ok(())
        })?;
        if let Some((_, at)) = open {
            return Err(self.error_at(
                at,
                ErrorKind::MissingElement {
                    expected: "an <until> after each <from>",
                    parent: "validity",
                },
            ));
        }
        let intervals = NonEmpty::new(intervals).map_err(|_| {
            self.error_at(
                e.offset,
                ErrorKind::MissingElement {
                    expected: "at least one <from>/<until> pair",
                    parent: "validity",
                },
            )
        })?;
        Ok(Validity { intervals })
    }

    fn actions(&mut self) -> Result<Option<Accept>> {
        let mut accept = None;
        self.children("actions", |r, child| {
            if child.known() != Some("accept") {
                r.warn(
                    child.offset,
                    format!(
                        "ignored action <{}>: not a load-control action",
                        child.written()
                    ),
                );
                return r.skip();
            }
            if accept.is_some() {
                return Err(r.duplicate(&child, "accept", "actions"));
            }
            accept = Some(r.accept(&child)?);
            Ok(())
        })?;
        Ok(accept)
    }

    fn accept(&mut self, e: &Element<'i>) -> Result<Accept> {
        let attrs = self.attrs(e)?;
        let action = attrs
            .get("alt-action")
            .map(|a| a.trim())
            .unwrap_or("reject");
        let targets_text = attrs
            .get("alt-target")
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let targets = match targets_text {
            None => Vec::new(),
            Some(text) => {
                let at = self.attr_offset(e, "alt-target");
                let mut targets = Vec::new();
                let mut listed = 0usize;
                for t in text.split_ascii_whitespace() {
                    // Every URI is checked; only the first max_alt_targets are kept.
                    let uri = self.uri(t, at)?;
                    listed += 1;
                    if targets.len() < self.limits.max_alt_targets {
                        targets.push(uri);
                    }
                }
                if listed > targets.len() {
                    self.warn(
                        at,
                        format!(
                            "alt-target lists {listed} URIs: only the first {} are kept \
                             (max_alt_targets)",
                            targets.len()
                        ),
                    );
                }
                targets
            }
        };
        let alt_action = match action {
            "reject" => AltAction::Reject,
            "drop" => AltAction::Drop,
            "redirect" => AltAction::Redirect(NonEmpty::new(targets.clone()).map_err(|_| {
                self.error_at(
                    self.attr_offset(e, "alt-action"),
                    ErrorKind::RedirectWithoutTarget,
                )
            })?),
            other => {
                return Err(self.error_at(
                    self.attr_offset(e, "alt-action"),
                    ErrorKind::UnknownAltAction(other.to_owned()),
                ));
            }
        };
        if !targets.is_empty() && !matches!(alt_action, AltAction::Redirect(_)) {
            let at = self.attr_offset(e, "alt-target");
            self.warn(
                at,
                format!(
                    "alt-target is ignored with alt-action=\"{}\"",
                    alt_action.as_str()
                ),
            );
        }
        drop(attrs);
        let mut limits: Vec<(Limit, usize)> = Vec::new();
        let mut count = 0usize;
        let mut second_at = None;
        self.children("accept", |r, child| {
            let which = match child.known() {
                Some("rate") => "rate",
                Some("percent") => "percent",
                Some("win") => "win",
                _ => {
                    return r.unexpected_or_ignored(
                        "accept",
                        "one of <rate>, <percent> or <win>",
                        child,
                    );
                }
            };
            count += 1;
            if count == 2 {
                second_at = Some(child.offset);
            }
            let (text, at) = r.text(which, &child)?;
            let limit = match which {
                "rate" => parse_decimal(&text)
                    .and_then(|v| Rate::new(v).map_err(|_| NumberProblem::TooLarge))
                    .map(Limit::Rate)
                    .map_err(|problem| ErrorKind::InvalidRate {
                        value: text.clone(),
                        problem,
                    }),
                "percent" => parse_decimal(&text)
                    .and_then(|v| Percent::new(v).map_err(|_| NumberProblem::TooLarge))
                    .map(Limit::Percent)
                    .map_err(|problem| ErrorKind::InvalidPercent {
                        value: text.clone(),
                        problem,
                    }),
                _ => parse_integer(&text).map(Limit::Window).map_err(|problem| {
                    ErrorKind::InvalidWindow {
                        value: text.clone(),
                        problem,
                    }
                }),
            }
            .map_err(|kind| r.error_at(at, kind))?;
            limits.push((limit, at));
            Ok(())
        })?;
        match (limits.as_slice(), second_at) {
            ([(limit, _)], None) => Ok(Accept {
                limit: *limit,
                alt_action,
            }),
            _ => Err(self.error_at(
                second_at.unwrap_or(e.offset),
                ErrorKind::AcceptNeedsOneLimit { found: count },
            )),
        }
    }

    // ---- values ----

    fn uri(&self, value: &str, at: usize) -> Result<Uri> {
        Uri::new(value).map_err(|reason| {
            self.error_at(
                at,
                ErrorKind::InvalidUri {
                    value: value.to_owned(),
                    reason: reason.reason(),
                },
            )
        })
    }

    fn domain(&self, value: &str, at: usize) -> Result<Domain> {
        Domain::new(value).map_err(|reason| {
            self.error_at(
                at,
                ErrorKind::InvalidDomain {
                    value: value.to_owned(),
                    reason: reason.reason(),
                },
            )
        })
    }

    fn prefix(&self, value: &str, at: usize) -> Result<TelPrefix> {
        TelPrefix::new(value).map_err(|reason| {
            self.error_at(
                at,
                ErrorKind::InvalidPrefix {
                    value: value.to_owned(),
                    reason: reason.reason(),
                },
            )
        })
    }
}

impl PolicyError {
    fn in_rule(mut self, id: &str) -> Self {
        self.rule = Some(id.to_owned());
        self
    }
}

fn is_xml_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn xml_error_kind(e: &quick_xml::Error) -> ErrorKind {
    use quick_xml::escape::EscapeError;
    match e {
        quick_xml::Error::Escape(EscapeError::UnrecognizedEntity(_, name)) => {
            ErrorKind::UnknownEntity(name.clone())
        }
        other => ErrorKind::Xml(other.to_string()),
    }
}

/// An `xs:integer` that must fit `u32` (leading `+`, leading zeros and `-0` allowed).
pub(crate) fn parse_integer(text: &str) -> std::result::Result<u32, NumberProblem> {
    let t = text.trim_matches(is_xml_space);
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(
            if parse_decimal(t).is_ok() || (negative && parse_decimal(digits).is_ok()) {
                if negative && parse_decimal(digits).is_ok_and(|v| v > 0.0) {
                    NumberProblem::Negative
                } else {
                    NumberProblem::NotAnInteger
                }
            } else {
                NumberProblem::NotANumber
            },
        );
    }
    let significant = digits.trim_start_matches('0');
    if negative && !significant.is_empty() {
        return Err(NumberProblem::Negative);
    }
    if significant.len() > 10 {
        return Err(NumberProblem::TooLarge);
    }
    let value: u64 = significant.parse().unwrap_or(0);
    u32::try_from(value).map_err(|_| NumberProblem::TooLarge)
}

/// An `xs:decimal` that must be ≥ 0 (no exponent; `-0` is zero).
pub(crate) fn parse_decimal(text: &str) -> std::result::Result<f64, NumberProblem> {
    let t = text.trim_matches(is_xml_space);
    let (negative, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits_ok(int) || !digits_ok(frac) {
        return Err(NumberProblem::NotANumber);
    }
    let value: f64 = body.parse().map_err(|_| NumberProblem::NotANumber)?;
    if !value.is_finite() {
        return Err(NumberProblem::TooLarge);
    }
    if negative && value != 0.0 {
        return Err(NumberProblem::Negative);
    }
    Ok(value)
}
