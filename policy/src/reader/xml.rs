//! The event layer under the reader: namespace-resolved elements, text and their positions,
//! attributes read once, and how errors and warnings name where they are.

use std::borrow::Cow;

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};
use quick_xml::name::ResolveResult;

use super::{Reader, Result};
use crate::error::{ErrorKind, Limit as LimitKind, PolicyError, Position, Warning};
use crate::{COMMON_POLICY_NS, LOAD_CONTROL_NS};

/// Which namespace an element is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Ns {
    /// common-policy or load-control: both are accepted for every element.
    Known,
    /// Another namespace, or none.
    Foreign(Option<String>),
}

/// An element start with its resolved namespace and byte offset.
pub(super) struct Element<'i> {
    pub(super) ns: Ns,
    pub(super) start: BytesStart<'i>,
    pub(super) offset: usize,
}

impl Element<'_> {
    /// The local name when the element is in a known namespace.
    pub(super) fn known(&self) -> Option<&str> {
        match self.ns {
            Ns::Known => Some(self.start.local_name().into_inner()),
            Ns::Foreign(_) => None,
        }
    }

    /// The name as written (with its prefix).
    pub(super) fn written(&self) -> String {
        self.start.name().as_ref().to_owned()
    }

    pub(super) fn namespace(&self) -> Option<String> {
        match &self.ns {
            Ns::Foreign(ns) => ns.clone(),
            Ns::Known => None,
        }
    }

    pub(super) fn local(&self) -> String {
        self.start.local_name().into_inner().to_owned()
    }

    /// `{namespace}local` for messages.
    pub(super) fn expanded(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{{{ns}}}{}", self.local()),
            None => self.local(),
        }
    }
}

pub(super) enum Node<'i> {
    Open(Element<'i>),
    Close,
    Text { text: Cow<'i, str>, offset: usize },
    Eof,
}

/// Attributes of one element, read once (duplicates are a well-formedness error).
pub(super) struct Attrs<'a> {
    pub(super) list: Vec<(&'a str, Cow<'a, str>)>,
}

impl<'a> Attrs<'a> {
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.list
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_ref())
    }
}

impl<'i> Reader<'i, '_> {
    // ---- errors, warnings, positions ----

    pub(super) fn position(&self, offset: usize) -> Position {
        Position::of_offset(self.input.as_bytes(), offset)
    }

    pub(super) fn error_at(&self, offset: usize, kind: ErrorKind) -> PolicyError {
        PolicyError {
            kind,
            position: self.position(offset),
            rule: self.rule.clone(),
        }
    }

    /// Records a warning; its position is worked out in [`Reader::finish_warnings`], in one
    /// pass over the input, so many warnings do not cost a scan each.
    pub(super) fn warn(&mut self, offset: usize, message: String) {
        self.warnings.push((offset, self.rule.clone(), message));
    }

    pub(super) fn finish_warnings(&mut self) -> Vec<Warning> {
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
    pub(super) fn attr_offset(&self, e: &Element<'_>, name: &str) -> usize {
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

    pub(super) fn next(&mut self) -> Result<Node<'i>> {
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

    pub(super) fn open(
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
    pub(super) fn attrs<'e>(&self, e: &'e Element<'i>) -> Result<Attrs<'e>> {
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
    pub(super) fn required<'a>(
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
    pub(super) fn skip(&mut self) -> Result<()> {
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

    pub(super) fn eof_inside(&self) -> PolicyError {
        self.error_at(
            self.input.len(),
            ErrorKind::Structure("the document ends inside an element"),
        )
    }

    /// Walks the children of an element with element-only content: `child` is called for each
    /// child element (and must consume it); non-blank text is an error.
    pub(super) fn children(
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
    pub(super) fn text(
        &mut self,
        parent: &'static str,
        e: &Element<'_>,
    ) -> Result<(String, usize)> {
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
    pub(super) fn unexpected_or_ignored(
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

    pub(super) fn count_identity(&mut self, offset: usize) -> Result<()> {
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
}

impl PolicyError {
    pub(super) fn in_rule(mut self, id: &str) -> Self {
        self.rule = Some(id.to_owned());
        self
    }
}

pub(super) fn is_xml_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

pub(super) fn xml_error_kind(e: &quick_xml::Error) -> ErrorKind {
    use quick_xml::escape::EscapeError;
    match e {
        quick_xml::Error::Escape(EscapeError::UnrecognizedEntity(_, name)) => {
            ErrorKind::UnknownEntity(name.clone())
        }
        other => ErrorKind::Xml(other.to_string()),
    }
}
