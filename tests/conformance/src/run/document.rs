//! Policy document vectors: a document is valid, invalid (with the error it must give) or
//! valid with a warning.

use super::{StepError, broken};
use crate::adapter;
use crate::vector::Vector;

pub(super) fn document(v: &Vector) -> Result<(), StepError> {
    let doc = v
        .section("document")
        .ok_or_else(|| broken(v.line, "no --- document section"))?;
    let expect = v.key("expect").unwrap_or("");
    if !matches!(expect, "valid" | "invalid" | "valid-with-warning") {
        return Err(broken(
            v.line,
            "expect: must be valid, invalid or valid-with-warning",
        ));
    }
    let result = adapter::check(doc.text().as_bytes());
    let got = match &result {
        Ok(w) if w.is_empty() => "valid".to_owned(),
        Ok(w) => format!("valid-with-warning: {}", w.join(" | ")),
        Err(e) => format!("invalid: {e}"),
    };
    let verdict_ok = match (&result, expect) {
        (Ok(w), "valid") => w.is_empty(),
        (Ok(w), "valid-with-warning") => {
            !w.is_empty()
                && v.key("warning")
                    .is_none_or(|s| w.iter().any(|m| m.contains(s)))
        }
        (Err(e), "invalid") => v.key("error").is_none_or(|s| e.contains(s)),
        _ => false,
    };
    if verdict_ok {
        return Ok(());
    }
    let mut expected = expect.to_owned();
    if let Some(w) = v.key("warning") {
        expected.push_str(&format!(" (a warning containing {w:?})"));
    }
    if let Some(e) = v.key("error") {
        expected.push_str(&format!(" (an error containing {e:?})"));
    }
    Err(StepError {
        line: doc.line,
        step: "loadctl check".into(),
        expected,
        got,
    })
}
