//! Runs every conformance vector (all of them, then fails when any failed).

use std::path::Path;

#[test]
fn rfc_conformance_vectors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors");
    let outcome = loadctl_conformance::run_all(&dir);
    for f in &outcome.failures {
        eprintln!("{f}\n");
    }
    for b in &outcome.broken_files {
        eprintln!("BROKEN FILE {b}\n");
    }
    eprintln!(
        "conformance: {} passed, {} failed, {} broken files",
        outcome.passed,
        outcome.failures.len(),
        outcome.broken_files.len()
    );
    if !outcome.failures.is_empty() {
        eprintln!("failing vectors:");
        for f in &outcome.failures {
            eprintln!("  {} :: {}", f.file, f.vector);
        }
    }
    assert!(outcome.passed > 0, "no vector ran");
    assert!(
        outcome.failures.is_empty() && outcome.broken_files.is_empty(),
        "{} conformance vector(s) failed, {} file(s) broken (see above)",
        outcome.failures.len(),
        outcome.broken_files.len()
    );
}
