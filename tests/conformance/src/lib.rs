//! RFC-derived conformance vectors for loadctl (see `README.md` beside this file).
//!
//! Each file in `vectors/` holds the vectors of one RFC section; each vector quotes the
//! sentence it checks. [`run_all`] runs every vector of every file and returns the failures;
//! the test in `tests/vectors.rs` prints them (file, vector, citation, expected, got) and fails
//! when there is any.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod adapter;
pub mod message;
pub mod run;
pub mod vector;

use std::path::Path;

/// The outcome of a run.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Vectors that behaved as their RFC text says.
    pub passed: usize,
    /// Those that did not.
    pub failures: Vec<run::Failure>,
    /// Files that could not be read or parsed.
    pub broken_files: Vec<String>,
}

/// Runs every `*.vec` file in `dir`, in name order, every vector in each.
pub fn run_all(dir: &Path) -> Outcome {
    let mut outcome = Outcome::default();
    let mut files: Vec<_> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "vec"))
            .collect(),
        Err(e) => {
            outcome.broken_files.push(format!("{}: {e}", dir.display()));
            return outcome;
        }
    };
    files.sort();
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let vectors = match std::fs::read_to_string(&path)
            .map_err(|e| format!("{name}: {e}"))
            .and_then(|text| vector::parse(&name, &text))
        {
            Ok(v) => v,
            Err(e) => {
                outcome.broken_files.push(e);
                continue;
            }
        };
        for v in &vectors {
            match run::run(v) {
                Ok(()) => outcome.passed += 1,
                Err(f) => outcome.failures.push(*f),
            }
        }
    }
    outcome
}
