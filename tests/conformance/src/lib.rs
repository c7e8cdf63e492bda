//! RFC-derived conformance vectors for loadctl (see `README.md` beside this file).
//!
//! Each file in `vectors/` holds the vectors of one RFC section; each vector quotes the
//! sentence it checks. [`run_all`] runs every vector of every file and returns the failures;
//! the test in `tests/it/vectors.rs` prints them (file, vector, citation, expected, got) and fails
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The runner reports a vector whose expectation is not met (it can fail).
    #[test]
    fn a_wrong_expectation_fails_and_names_the_vector() {
        let text = "=== wrong on purpose\nkind: document\nrfc: RFC 7200 §6\nquote: q\nexpect: invalid\n--- document\n<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" version=\"0\" state=\"full\"/>\n";
        let v = vector::parse("self.vec", text).expect("parses");
        let f = run::run(&v[0]).expect_err("a valid document is not invalid");
        assert_eq!(
            (f.file.as_str(), f.vector.as_str()),
            ("self.vec", "wrong on purpose")
        );
        assert_eq!((f.expected.as_str(), f.got.as_str()), ("invalid", "valid"));
        let text = "=== classify\nkind: classify\nrfc: R\nquote: q\n--- policy\n<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"0\" state=\"full\"><rule id=\"r\"><actions><lc:accept><lc:rate>0</lc:rate></lc:accept></actions></rule></ruleset>\n--- requests\n{\"method\": \"INVITE\"} => {\"action\": \"accept\", \"rule\": null, \"status\": null}\n{\"method\": \"INVITE\"} => {\"action\": \"reject\", \"rule\": \"r\", \"status\": 503}\n";
        let v = vector::parse("self.vec", text).expect("parses");
        let f = run::run(&v[0]).expect_err("rate 0 rejects");
        assert!(f.step.starts_with("1 of the requests"), "{}", f.step);
    }

    /// An exchange step that is not met fails: a notifier that was sent nothing sends nothing.
    #[test]
    fn an_exchange_expecting_a_message_that_never_comes_fails() {
        let text =
            "=== nothing\nkind: exchange\nrole: notifier\nrfc: R\nquote: q\n--- expect\nNOTIFY *\n";
        let v = vector::parse("self.vec", text).expect("parses");
        let f = run::run(&v[0]).expect_err("nothing was sent");
        assert_eq!(f.got, "loadctl sent nothing");
    }

    /// Every file in vectors/ is named `<rfc>-<section>.vec`.
    #[test]
    fn vector_files_are_named_by_rfc_and_section() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).expect("vectors/").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let stem = name
                .strip_suffix(".vec")
                .unwrap_or_else(|| panic!("{name}: not .vec"));
            let (rfc, section) = stem.split_once('-').unwrap_or((stem, ""));
            assert!(
                rfc.strip_prefix("rfc")
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                    && !section.is_empty(),
                "{name}: expected rfcNNNN-SECTION.vec"
            );
            n += 1;
        }
        assert!(n > 0);
    }
}
