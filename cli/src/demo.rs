//! `loadctl demo`: the README's main job.
//!
//! For now it validates and shows the policy it runs on; driving a request mix through the
//! multi-core runtime comes with the runtime itself.

use loadctl::policy::{self, Limits};

/// Shows the demo policy. Exit codes as for `check`.
pub fn run(policy_file: Option<&str>) -> u8 {
    let (name, bytes) = match policy_file {
        Some(path) => match crate::read_input(path) {
            Ok(b) => (path.to_owned(), b),
            Err(e) => {
                eprintln!("loadctl: {path}: {e}");
                return 2;
            }
        },
        None => (
            "<embedded default policy>".to_owned(),
            crate::DEFAULT_POLICY.as_bytes().to_vec(),
        ),
    };
    match policy::read(&bytes, &Limits::default()) {
        Ok(doc) => {
            print!("{}", crate::check::summary(&name, &doc.ruleset));
            println!("(request classification and the multi-core run are not built yet)");
            0
        }
        Err(e) => {
            eprintln!("{name}:{e}");
            1
        }
    }
}
