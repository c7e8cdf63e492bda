//! `<actions>` (RFC 7200 §5.4): the `<accept>` element, its limit and what the excess gets.

use super::values::{parse_decimal, parse_integer};
use super::xml::*;
use super::{Reader, Result};
use crate::error::{ErrorKind, NumberProblem};
use crate::model::*;

impl<'i> Reader<'i, '_> {
    pub(super) fn actions(&mut self) -> Result<Option<Accept>> {
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

    pub(super) fn accept(&mut self, e: &Element<'i>) -> Result<Accept> {
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
}
