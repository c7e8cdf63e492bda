//! The values in a document: URIs, domains and telephone prefixes, `xs:integer` and
//! `xs:decimal`.

use super::xml::is_xml_space;
use super::{Reader, Result};
use crate::error::{ErrorKind, NumberProblem};
use crate::model::*;

impl Reader<'_, '_> {
    // ---- values ----

    pub(super) fn uri(&self, value: &str, at: usize) -> Result<Uri> {
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

    pub(super) fn domain(&self, value: &str, at: usize) -> Result<Domain> {
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

    pub(super) fn prefix(&self, value: &str, at: usize) -> Result<TelPrefix> {
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

/// An `xs:integer` that must fit `u32` (leading `+`, leading zeros and `-0` allowed).
pub(super) fn parse_integer(text: &str) -> std::result::Result<u32, NumberProblem> {
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
pub(super) fn parse_decimal(text: &str) -> std::result::Result<f64, NumberProblem> {
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
