//! What the suites share: running the `loadctl` binary, the policies under engine/tests/data.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs `loadctl` with `args`, `stdin` as its input.
pub fn loadctl(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_loadctl"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("loadctl runs");
    let mut input = child.stdin.take().expect("stdin");
    // A run refused on its arguments exits without reading its input: the pipe may be closed
    // before (or while) this writes.
    if let Err(e) = input.write_all(stdin.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    drop(input);
    child.wait_with_output().expect("loadctl finishes")
}

/// The path of a policy file of the engine's tests.
pub fn data(name: &str) -> String {
    format!("{}/../engine/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}
