//! `loadctl check FILE...`: validate documents and summarise them.

use loadctl::policy::{self, Body, Change, Limits};

/// Exit code 0 when all documents are valid, 1 when one is invalid, 2 on an I/O error.
pub fn run(files: &[String]) -> u8 {
    let mut code = 0;
    for file in files {
        let name = if file == "-" {
            "<stdin>"
        } else {
            file.as_str()
        };
        let bytes = match crate::read_input(file) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("loadctl: {name}: {e}");
                code = 2;
                continue;
            }
        };
        match policy::read(&bytes, &Limits::default()) {
            Ok(doc) => {
                crate::policy_file::print_warnings(name, &doc.warnings);
                print!("{}", summary(name, &doc.ruleset));
            }
            Err(e) => {
                eprintln!("{name}:{e}");
                code = code.max(1);
            }
        }
    }
    code
}

/// The summary line and one line per rule (or change).
pub fn summary(name: &str, rs: &policy::Ruleset) -> String {
    let n = rs.len();
    let noun = match (rs.state(), n) {
        (policy::State::Full, 1) => "rule",
        (policy::State::Full, _) => "rules",
        (policy::State::Partial, 1) => "change",
        (policy::State::Partial, _) => "changes",
    };
    let mut out = format!(
        "{name}: version {}, {}, {n} {noun}\n",
        rs.version(),
        rs.state()
    );
    match rs.body() {
        Body::Full(rules) => {
            for r in rules {
                out.push_str(&format!("  {r}\n"));
            }
        }
        Body::Partial(changes) => {
            for c in changes {
                match c {
                    Change::Put(r) => out.push_str(&format!("  put {r}\n")),
                    Change::Delete(id) => out.push_str(&format!("  delete {id}\n")),
                }
            }
        }
    }
    out
}
