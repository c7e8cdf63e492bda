//! The document's structure: `<ruleset>` and its version and state, each `<rule>`, its
//! `<conditions>` and `<validity>` (RFC 4745 §7.4) and unknown elements there.

use std::collections::HashMap;

use super::values::parse_integer;
use super::xml::*;
use super::{Reader, Result};
use crate::error::{ErrorKind, Limit as LimitKind, PolicyError};
use crate::model::*;
use crate::time::Timestamp;

impl<'i> Reader<'i, '_> {
    // ---- the document ----

    pub(super) fn document(&mut self) -> Result<Ruleset> {
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

    pub(super) fn ruleset(&mut self, e: &Element<'i>) -> Result<Ruleset> {
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

    pub(super) fn rule(&mut self, e: &Element<'i>) -> Result<(RuleId, Conditions, Option<Accept>)> {
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

    pub(super) fn duplicate(
        &self,
        e: &Element<'_>,
        element: &'static str,
        parent: &'static str,
    ) -> PolicyError {
        self.error_at(e.offset, ErrorKind::DuplicateElement { element, parent })
    }

    pub(super) fn conditions(&mut self) -> Result<Conditions> {
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
    pub(super) fn unsupported(
        &mut self,
        e: Element<'_>,
        into: &mut Vec<ForeignElement>,
    ) -> Result<()> {
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

    pub(super) fn validity(&mut self, e: &Element<'_>) -> Result<Validity> {
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
}
