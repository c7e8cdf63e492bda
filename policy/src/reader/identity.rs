//! `<call-identity>` (RFC 7200 §5.3.1): the `<sip>` blocks, their header fields and the
//! identity sets in them (`one`, `many`, `many-tel` and their excepts).

use super::xml::*;
use super::{Reader, Result};
use crate::error::ErrorKind;
use crate::model::*;

impl<'i> Reader<'i, '_> {
    pub(super) fn call_identity(
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

    pub(super) fn sip(
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

    pub(super) fn identity_set(
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
    pub(super) fn excepts<T>(
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
    pub(super) fn ignore_children(&mut self, parent: &'static str) -> Result<()> {
        self.children(parent, |r, child| {
            r.unexpected_or_ignored(parent, "no child element", child)
        })
    }
}
