//! What the notifier pushes: one policy file for all, or a template with the allocator's
//! share of a capacity for each subscriber; read again on SIGHUP or a change of the file.

use std::sync::Arc;
use std::time::SystemTime;

use loadctl::event::allocator::AllocatorConfig;
use loadctl::event::notifier::Notifier;
use loadctl::policy::{Limits, Rule};

/// The rules of a policy file, or the exit code and what to say: 2 when it cannot be read, 1
/// when it is not a full policy (the reader's error carries `line:column`).
pub(super) fn read_rules(path: &str) -> Result<Vec<Arc<Rule>>, (u8, String)> {
    let bytes = crate::read_input(path).map_err(|e| (2u8, format!("{path}: {e}")))?;
    let doc = loadctl::policy::read(&bytes, &Limits::default())
        .map_err(|e| (1u8, format!("{path}:{e}")))?;
    crate::policy_file::print_warnings(path, &doc.warnings);
    doc.ruleset.rules().map(<[_]>::to_vec).ok_or_else(|| {
        (
            1u8,
            format!("{path}: a partial document cannot be pushed as a policy"),
        )
    })
}

/// What the notifier pushes, and the file it comes from (read again on SIGHUP).
pub(super) enum PolicySource<'a> {
    /// `--policy FILE`: one policy for everyone.
    Policy(&'a str),
    /// `--capacity R --template FILE`: the template's first rule with each one's share.
    Capacity(f64, &'a str),
}

impl PolicySource<'_> {
    pub(super) fn path(&self) -> &str {
        match self {
            PolicySource::Policy(p) | PolicySource::Capacity(_, p) => p,
        }
    }

    /// What `--watch` compares: the file's modification time and size.
    pub(super) fn stamp(&self) -> Option<(SystemTime, u64)> {
        let m = std::fs::metadata(self.path()).ok()?;
        Some((m.modified().ok()?, m.len()))
    }

    /// Reads the file again (SIGHUP, `--watch`) and says what came of it.
    pub(super) fn reload(&self, notifier: &mut Notifier, now: u64, why: &str) {
        if self.path() == "-" {
            eprintln!(
                "loadctl notifier: {why}: the policy came from standard input; nothing to re-read"
            );
            return;
        }
        match self.load(notifier, now) {
            Ok(()) => eprintln!("loadctl notifier: {why}: {} reloaded", self.path()),
            Err((_, e)) => {
                eprintln!("loadctl notifier: {why}: reload refused, the policy in force stays: {e}")
            }
        }
    }

    /// Reads the file and hands its policy to the notifier; nothing changes on an error.
    pub(super) fn load(&self, notifier: &mut Notifier, now: u64) -> Result<(), (u8, String)> {
        let rules = read_rules(self.path())?;
        match self {
            PolicySource::Policy(_) => notifier.set_policy(now, Some(rules)),
            PolicySource::Capacity(capacity, path) => {
                let Some(rule) = rules.first() else {
                    return Err((1, format!("{path}: the template has no rule")));
                };
                notifier
                    .set_capacity(now, *capacity, (**rule).clone(), AllocatorConfig::default())
                    .map_err(|e| (2, format!("--capacity: {e}")))?;
            }
        }
        Ok(())
    }
}
