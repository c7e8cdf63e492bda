//! `loadctl`: the command-line face of the engine.
//!
//! Subcommands: `check` validates policy documents; `demo` runs the embedded default policy.
//! Exit codes: 0 success, 1 an invalid document, 2 usage or I/O errors.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod check;
mod demo;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The policy `loadctl demo` uses when given none.
pub const DEFAULT_POLICY: &str = include_str!("default-policy.xml");

#[derive(Parser)]
#[command(
    name = "loadctl",
    version,
    about = "SIP load control (RFC 7200) engine tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate load-control policy documents; `-` reads standard input.
    Check {
        /// Documents to check.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
    },
    /// Run the demo on the embedded default policy (or --policy FILE).
    Demo {
        /// A policy document to use instead of the embedded one.
        #[arg(long, value_name = "FILE")]
        policy: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Check { files } => check::run(&files),
        Command::Demo { policy } => demo::run(policy.as_deref()),
    };
    ExitCode::from(code)
}

/// Reads a file, or standard input for `-`.
pub fn read_input(path: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    if path == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(path)
    }
}
