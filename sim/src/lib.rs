//! # loadctl-sim — PRSM vs FIFO on a finite-buffer SIP server
//!
//! Two models of one SIP server that serves μ messages per second (every message costs one
//! service slot) from a finite buffer, fed by INVITE clients that follow RFC 3261's timers over
//! UDP (copies at 0, 0.5, 1.5, 3.5, 7.5, 15.5 and 31.5 s until a provisional response arrives;
//! Timer B gives up at 32 s), over a network that adds up to 1 ms of jitter:
//! - [`des`]: a discrete-event simulation, call by call, whose server queue *is* the engine's
//!   [`loadctl::prsm::Scheduler`] and whose PRSM server tells originals from retransmissions
//!   with the engine's [`loadctl::prsm::RetransmissionDetector`];
//! - [`fluid`]: the cohort (time-slot) fluid model of `spec/prsm.md`.
//!
//! [`scenario`] owns the overload causes (bulk, bursty, slowdown, steady) and realises them into
//! one workload both models consume; [`filter`] is an upstream enforcing an RFC 7200 rate rule
//! with the real engine; [`sweep`] runs the grid, writes CSV and draws the SVG plots.
//!
//! [`chain`] puts a transaction-stateful proxy between the clients and the server of [`des`],
//! with RFC 7339 / RFC 7415 feedback overload control (the engine's `loadctl::overload`), an
//! RFC 7200 rate rule, or nothing between them; [`overload_sweep`] sweeps it over the offered
//! load.
//!
//! Metrics ([`Metrics`]) follow the papers: a call *fails* when no 100 Trying reaches it
//! before Timer B; its *response delay* runs from its first INVITE to the first 100 Trying.
//! The server answers every call it eventually serves, also after the client gave up, so
//! [`Metrics::mean_delay_ms`] (every answered call, the papers' figure, which can exceed
//! Timer B) and [`Metrics::mean_delay_ok_ms`] (calls answered in time) are both reported.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod chain;
pub mod des;
pub mod filter;
pub mod fluid;
pub mod overload_sweep;
mod parallel;
mod plot;
pub mod rng;
pub mod scenario;
pub mod sweep;
mod table;

use loadctl::prsm::SchedulerConfig;
use serde::Serialize;

pub use scenario::{Scenario, ScenarioKind, Workload};

/// RFC 3261 T1 (s).
pub const T1: f64 = 0.5;
/// Retransmissions an INVITE client sends before Timer B (copies 1..=6).
pub const RETRANSMISSIONS: usize = 6;

/// When copy `j` (0 = the original) of an INVITE leaves, after the first: (2^j − 1)·T1.
pub fn copy_offset(j: usize, t1: f64) -> f64 {
    ((1u64 << j) - 1) as f64 * t1
}

/// Timer B: 64·T1.
pub fn timer_b(t1: f64) -> f64 {
    64.0 * t1
}

/// The server's queueing discipline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchedulerKind {
    /// One FIFO queue (a conventional SIP server).
    Fifo,
    /// PRSM: originals first, retransmissions only when no original waits.
    Prsm,
}

impl SchedulerKind {
    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            SchedulerKind::Fifo => "fifo",
            SchedulerKind::Prsm => "prsm",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        [SchedulerKind::Fifo, SchedulerKind::Prsm]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// How PRSM's two queues share the buffer of B messages (FIFO always has one queue of B).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferSplit {
    /// Primary ⌈B/2⌉, secondary ⌊B/2⌋ (at least 1): the same memory as the FIFO server.
    Even,
    /// B each.
    Each,
}

impl BufferSplit {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BufferSplit::Even => "even",
            BufferSplit::Each => "each",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        [BufferSplit::Even, BufferSplit::Each]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// Which model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Model {
    /// Discrete-event simulation.
    Des,
    /// Fluid (cohort) model.
    Fluid,
}

impl Model {
    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Model::Des => "des",
            Model::Fluid => "fluid",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        [Model::Des, Model::Fluid]
            .into_iter()
            .find(|k| k.name() == s)
    }
}

/// One simulation run.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// The overload cause and its parameters.
    pub scenario: Scenario,
    /// FIFO or PRSM.
    pub scheduler: SchedulerKind,
    /// Buffer size B in messages.
    pub buffer: usize,
    /// How PRSM splits B.
    pub split: BufferSplit,
    /// Service rate μ (messages/s).
    pub mu: f64,
    /// Seed of the arrival process (and of the `bursty` on/off path).
    pub seed: u64,
    /// RFC 3261 T1 (s).
    pub t1: f64,
    /// An upstream enforcing an RFC 7200 rate rule of this many INVITEs/s at the server's
    /// nominal capacity; the server pushes the rate scaled to its capacity when that changes
    /// (see [`filter`]).
    pub upstream_rate: Option<f64>,
    /// How long after its capacity changes the server's new rate takes effect upstream (s).
    pub notify_delay: f64,
    /// The fluid model's time step Δ (s).
    pub slot: f64,
    /// Network jitter of the discrete-event model: each copy reaches the server after a
    /// uniform delay in [0, jitter] s (responses are immediate). Without it a deterministic
    /// server and exact timers put every copy of a call at the same phase of the service
    /// cycle, so tail drop refuses the same calls copy after copy (see `sim/README.md`).
    pub jitter: f64,
}

impl SimConfig {
    /// The defaults for a scenario: μ = 1000, B = 1000 split evenly, T1 = 500 ms, Δ = 1 ms.
    pub fn new(kind: ScenarioKind, scheduler: SchedulerKind, buffer: usize) -> Self {
        Self {
            scenario: Scenario::defaults(kind),
            scheduler,
            buffer,
            split: BufferSplit::Even,
            mu: 1000.0,
            seed: 1,
            t1: T1,
            upstream_rate: None,
            notify_delay: 0.25,
            slot: 0.001,
            jitter: 0.001,
        }
    }

    /// The server's queue configuration.
    pub fn queues(&self) -> SchedulerConfig {
        match (self.scheduler, self.split) {
            (SchedulerKind::Fifo, _) => SchedulerConfig::fifo(self.buffer),
            (SchedulerKind::Prsm, BufferSplit::Each) => {
                SchedulerConfig::priority(self.buffer, self.buffer)
            }
            (SchedulerKind::Prsm, BufferSplit::Even) => {
                SchedulerConfig::priority(self.buffer.div_ceil(2), (self.buffer / 2).max(1))
            }
        }
    }

    /// Refuses settings no model can run.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |what: &str| Err(SimError(what.to_owned()));
        if self.buffer == 0 || self.buffer > loadctl::prsm::MAX_CAPACITY {
            return bad("--buffer must be between 1 and 268435456 messages");
        }
        if !(self.mu.is_finite() && self.mu > 0.0 && self.mu <= 1e7) {
            return bad("--mu must be a rate above 0 and at most 10,000,000 messages/s");
        }
        if !(self.t1.is_finite() && self.t1 > 0.0) {
            return bad("T1 must be above 0");
        }
        if !(self.slot.is_finite() && self.slot > 0.0 && self.slot <= self.t1 / 4.0) {
            return bad("the fluid time step must be above 0 and at most T1/4");
        }
        if !(self.jitter.is_finite() && (0.0..=self.t1 / 4.0).contains(&self.jitter)) {
            return bad("the network jitter must be between 0 and T1/4");
        }
        if let Some(r) = self.upstream_rate
            && !(r.is_finite() && r > 0.0 && r <= 1e9)
        {
            return bad("the upstream rate must be above 0 and at most 1e9");
        }
        if !(self.notify_delay.is_finite() && (0.0..=3600.0).contains(&self.notify_delay)) {
            return bad("the notify delay must be between 0 and 3600 s");
        }
        let s = &self.scenario;
        if !(s.duration.is_finite() && s.duration > 0.0 && s.duration <= 3600.0) {
            return bad("the scenario duration must be above 0 and at most 3600 s");
        }
        let offered = s.background.max(s.on_rate) + s.bulk_calls / s.bulk_spread.max(1e-9);
        if !(offered.is_finite() && offered * self.mu * s.duration <= 5e7) {
            return bad("the scenario offers more than 50 million calls");
        }
        Ok(())
    }
}

/// A setting no model can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError(pub String);

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

/// What one run measured. Counts are numbers of calls or messages (fractional in the fluid
/// model).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// `des` or `fluid`.
    pub model: &'static str,
    /// The scenario's name.
    pub scenario: &'static str,
    /// `fifo` or `prsm`.
    pub scheduler: &'static str,
    /// Buffer size B.
    pub buffer: usize,
    /// Service rate μ.
    pub mu: f64,
    /// The upstream RFC 7200 rate, 0 when none.
    pub upstream_rate: f64,
    /// Calls offered (first INVITEs sent).
    pub calls: f64,
    /// Calls with no 100 Trying before Timer B.
    pub failed: f64,
    /// `failed / calls`.
    pub failed_ratio: f64,
    /// Calls the upstream answered 503 (not counted as failed: the caller heard at once).
    pub rejected_upstream: f64,
    /// Mean response delay of every answered call, including answers after Timer B (ms).
    pub mean_delay_ms: f64,
    /// 99th percentile of the same (ms, 1 ms resolution).
    pub p99_delay_ms: f64,
    /// Mean response delay of calls answered before Timer B (ms).
    pub mean_delay_ok_ms: f64,
    /// 99th percentile of the same (ms).
    pub p99_delay_ok_ms: f64,
    /// Calls whose first 100 Trying left after their client gave up.
    pub answered_late: f64,
    /// Retransmitted INVITE copies sent by clients.
    pub retransmissions: f64,
    /// Copies served for calls already answered (a slot spent re-sending 100 Trying).
    pub redundant_served: f64,
    /// Messages served.
    pub served: f64,
    /// Messages dropped at a full queue.
    pub dropped: f64,
    /// Most messages in the primary queue (the only queue under FIFO).
    pub peak_primary: f64,
    /// Most messages in the secondary queue.
    pub peak_secondary: f64,
    /// Calls answered in time per second of the arrival window.
    pub goodput: f64,
    /// When the last event happened (s): the server has drained by then.
    pub end_s: f64,
}

/// Response delays: exact sum, and a 1 ms histogram for the percentile.
#[derive(Clone, Debug, Default)]
pub(crate) struct Delays {
    mass: f64,
    sum_s: f64,
    histogram: Vec<f64>,
}

impl Delays {
    pub(crate) fn add(&mut self, delay_s: f64, mass: f64) {
        self.mass += mass;
        self.sum_s += delay_s * mass;
        let bucket = (delay_s * 1000.0).max(0.0) as usize;
        if bucket >= self.histogram.len() {
            self.histogram.resize(bucket + 1, 0.0);
        }
        self.histogram[bucket] += mass;
    }

    pub(crate) fn mean_ms(&self) -> f64 {
        if self.mass > 0.0 {
            self.sum_s / self.mass * 1000.0
        } else {
            0.0
        }
    }

    /// The upper edge of the bucket where the cumulative mass reaches `q`.
    pub(crate) fn quantile_ms(&self, q: f64) -> f64 {
        let target = q * self.mass;
        let mut seen = 0.0;
        for (i, m) in self.histogram.iter().enumerate() {
            seen += m;
            if seen >= target && self.mass > 0.0 {
                return (i + 1) as f64;
            }
        }
        0.0
    }
}

/// Runs one configuration with one model.
pub fn simulate(config: &SimConfig, model: Model) -> Result<Metrics, SimError> {
    config.validate()?;
    let workload = config.scenario.realise(config.mu, config.seed);
    let mut m = match model {
        Model::Des => des::run(config, &workload)?,
        Model::Fluid => fluid::run(config, &workload)?,
    };
    m.model = model.name();
    m.scenario = config.scenario.kind.name();
    m.scheduler = config.scheduler.name();
    m.buffer = config.buffer;
    m.mu = config.mu;
    m.upstream_rate = config.upstream_rate.unwrap_or(0.0);
    m.failed_ratio = if m.calls > 0.0 {
        m.failed / m.calls
    } else {
        0.0
    };
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_leave_on_rfc3261_schedule() {
        let offsets: Vec<f64> = (0..=RETRANSMISSIONS).map(|j| copy_offset(j, T1)).collect();
        assert_eq!(offsets, [0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5]);
        assert_eq!(timer_b(T1), 32.0);
    }

    #[test]
    fn buffer_split() {
        let mut c = SimConfig::new(ScenarioKind::Steady, SchedulerKind::Prsm, 1001);
        assert_eq!(c.queues(), SchedulerConfig::priority(501, 500));
        c.split = BufferSplit::Each;
        assert_eq!(c.queues(), SchedulerConfig::priority(1001, 1001));
        c.buffer = 1;
        c.split = BufferSplit::Even;
        assert_eq!(c.queues(), SchedulerConfig::priority(1, 1));
        c.scheduler = SchedulerKind::Fifo;
        assert_eq!(c.queues(), SchedulerConfig::fifo(1));
    }

    #[test]
    fn bad_settings_are_refused() {
        let ok = SimConfig::new(ScenarioKind::Steady, SchedulerKind::Fifo, 100);
        assert!(ok.validate().is_ok());
        for bad in [
            SimConfig {
                buffer: 0,
                ..ok.clone()
            },
            SimConfig {
                mu: 0.0,
                ..ok.clone()
            },
            SimConfig {
                mu: f64::NAN,
                ..ok.clone()
            },
            SimConfig {
                slot: 0.5,
                ..ok.clone()
            },
            SimConfig {
                upstream_rate: Some(-1.0),
                ..ok.clone()
            },
        ] {
            assert!(simulate(&bad, Model::Des).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn delay_quantiles() {
        let mut d = Delays::default();
        for i in 0..100 {
            d.add(i as f64 / 1000.0 + 0.0005, 1.0);
        }
        assert!((d.mean_ms() - 50.0).abs() < 1e-9);
        assert_eq!(d.quantile_ms(0.99), 99.0);
        assert_eq!(d.quantile_ms(0.5), 50.0);
    }
}
