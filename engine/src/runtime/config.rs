//! How an [`super::Engine`] is configured.

use std::time::Duration;

use super::Exemptions;
use crate::clock::{Clock, SystemClock};
use crate::compile::CompileConfig;
use crate::policy::Limits;
use crate::sync::StdArc;

/// How an [`Engine`](super::Engine) behaves. Start from `EngineConfig::default()` and change what you need
/// with the `with_*` methods (or the fields); new settings may be added, so the struct is
/// `#[non_exhaustive]`:
///
/// ```
/// use std::time::Duration;
/// use loadctl::{Engine, EngineConfig};
///
/// let engine = Engine::new(
///     EngineConfig::default()
///         .with_shards(4)
///         .with_burst_tolerance(Duration::from_millis(50)),
/// );
/// assert_eq!(engine.config().shards, 4);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EngineConfig {
    /// How many shards (worker threads) are expected. Default: the number of cores.
    pub shards: usize,
    /// Where shards read the time when a request carries none.
    pub clock: StdArc<dyn Clock>,
    /// Redirect allow-list and other compile options.
    pub compile: CompileConfig,
    /// Requests let through before any rule is tried (emergency, priority).
    pub exemptions: Exemptions,
    /// Input limits for documents and merged policies.
    pub limits: Limits,
    /// GCRA burst tolerance τ of rate rules: a request may come up to τ ahead of its slot, at
    /// most max(1, ⌈r·τ⌉) pass at the same instant (see [`crate::limit`]).
    pub burst_tolerance: Duration,
    /// How far ahead a shard may lease rate tokens, which sizes leases (⌊r·period⌋ tokens, at
    /// least 1): one shared write buys that many admissions. Tokens a shard leased and then
    /// had no traffic for are lost to the others, at most ⌊r·period⌋ each time load moves
    /// away from a shard, so short periods keep the aggregate exact; long ones mean fewer
    /// shared writes. Default 0.5 ms.
    pub lease_period: Duration,
}

impl EngineConfig {
    /// With [`EngineConfig::shards`] set.
    pub fn with_shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// With [`EngineConfig::clock`] set.
    pub fn with_clock(mut self, clock: StdArc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// With [`EngineConfig::compile`] set.
    pub fn with_compile(mut self, compile: CompileConfig) -> Self {
        self.compile = compile;
        self
    }

    /// With [`EngineConfig::exemptions`] set.
    pub fn with_exemptions(mut self, exemptions: Exemptions) -> Self {
        self.exemptions = exemptions;
        self
    }

    /// With [`EngineConfig::limits`] set.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// With [`EngineConfig::burst_tolerance`] set.
    pub fn with_burst_tolerance(mut self, burst_tolerance: Duration) -> Self {
        self.burst_tolerance = burst_tolerance;
        self
    }

    /// With [`EngineConfig::lease_period`] set.
    pub fn with_lease_period(mut self, lease_period: Duration) -> Self {
        self.lease_period = lease_period;
        self
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            shards: std::thread::available_parallelism().map_or(1, usize::from),
            clock: StdArc::new(SystemClock::default()),
            compile: CompileConfig::default(),
            exemptions: Exemptions::default(),
            limits: Limits::default(),
            burst_tolerance: Duration::from_millis(100),
            lease_period: Duration::from_micros(500),
        }
    }
}
