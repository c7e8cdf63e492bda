//! The harness's parts: its command line (`options`), how a figure is measured in rounds
//! (`rounds`), the figures measured once (`once`), the standard throughput groups
//! (`throughput`), the hot-rule group (`hot`), the targets and information bounds (`checks`)
//! and what a run prints (`report`); `main.rs` reads the options and runs the groups asked for.

pub(crate) mod checks;
pub(crate) mod hot;
pub(crate) mod once;
pub(crate) mod options;
pub(crate) mod report;
pub(crate) mod rounds;
pub(crate) mod throughput;

#[cfg(test)]
mod tests;

use loadctl::policy::Ruleset;
use loadctl::runtime::{Engine, EngineConfig, Source};
use loadctl_bench::workload::{OwnedRequest, carrier_policy, requests, small_policy};

/// The wall-clock time every request carries (Unix ns: 11 January 2024).
pub(crate) const WALL: i128 = 1_705_000_000_000_000_000;

/// The share of all CPUs' time taken by other processes (and steal) above which a group's
/// figures are flagged as measured on a busy machine.
pub(crate) const BUSY: f64 = 0.10;

/// The standard workload: carrier-10k, small-10 and carrier-100k, each with a mix of 20,000
/// requests, from fixed seeds.
pub(crate) struct Workload {
    pub(crate) carrier: Ruleset,
    pub(crate) small: Ruleset,
    pub(crate) huge: Ruleset,
    pub(crate) mix: Vec<OwnedRequest>,
    pub(crate) small_mix: Vec<OwnedRequest>,
    pub(crate) huge_mix: Vec<OwnedRequest>,
}

impl Workload {
    /// Generates the workload.
    pub(crate) fn generate() -> Self {
        let carrier = carrier_policy(10_000, 42);
        let small = small_policy(42);
        let huge = carrier_policy(100_000, 42);
        Workload {
            mix: requests(&carrier, 20_000, 7),
            small_mix: requests(&small, 20_000, 7),
            huge_mix: requests(&huge, 20_000, 7),
            carrier,
            small,
            huge,
        }
    }
}

/// An engine with `policy` published as a local source, for `shards` workers.
pub(crate) fn engine_with(policy: &Ruleset, shards: usize) -> Engine {
    let e = Engine::new(EngineConfig::default().with_shards(shards));
    e.publish(&Source::local("bench"), policy.clone())
        .expect("publish");
    e
}
