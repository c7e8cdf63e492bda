//! Running vectors: the failure report and the dispatch to each kind's runner —
//! policy documents (document.rs), classification of request lines and of SIP text
//! (classify.rs), and message exchanges with the subscriber and the notifier (exchange.rs).

mod classify;
mod document;
mod exchange;

use std::fmt;

use crate::vector::Vector;

/// A vector that did not behave as its RFC text says.
#[derive(Clone, Debug)]
pub struct Failure {
    /// File name.
    pub file: String,
    /// Vector name.
    pub vector: String,
    /// Line of the vector (or of the failing step) in the file.
    pub line: usize,
    /// `rfc` and `quote`.
    pub citation: String,
    /// Which step, when the vector has several.
    pub step: String,
    /// What the RFC says should happen.
    pub expected: String,
    /// What happened.
    pub got: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "FAIL {}:{}: {}", self.file, self.line, self.vector)?;
        writeln!(f, "  cites:    {}", self.citation)?;
        if !self.step.is_empty() {
            writeln!(f, "  step:     {}", self.step)?;
        }
        writeln!(
            f,
            "  expected: {}",
            self.expected.replace('\n', "\n            ")
        )?;
        write!(
            f,
            "  got:      {}",
            self.got.replace('\n', "\n            ")
        )
    }
}

/// Why one step failed: (step, expected, got), or a vector that cannot run.
struct StepError {
    line: usize,
    step: String,
    expected: String,
    got: String,
}

fn broken(line: usize, why: impl Into<String>) -> StepError {
    StepError {
        line,
        step: "the vector itself".into(),
        expected: "a well-formed vector".into(),
        got: why.into(),
    }
}

/// Runs one vector.
pub fn run(v: &Vector) -> Result<(), Box<Failure>> {
    let result = match v.key("kind").unwrap_or("") {
        "document" => document::document(v),
        "classify" => classify::classify(v),
        "sip" => classify::sip(v),
        "exchange" => exchange::exchange(v),
        other => Err(broken(v.line, format!("unknown kind {other:?}"))),
    };
    result.map_err(|e| {
        Box::new(Failure {
            file: v.file.clone(),
            vector: v.name.clone(),
            line: e.line,
            citation: v.citation(),
            step: e.step,
            expected: e.expected,
            got: e.got,
        })
    })
}
