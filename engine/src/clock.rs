//! Time sources. The engine never reads a clock on its own: a [`Clock`] is injected through the
//! engine configuration (or a time comes with each request), so every time-dependent behaviour
//! runs in simulated time in tests.

use std::fmt::Debug;
use std::time::Duration;

/// A duration in the nanoseconds the engine's instants count, saturating (at 584 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Where shards get the time when a request carries none.
pub trait Clock: Send + Sync + Debug {
    /// Monotonic nanoseconds (any origin, never decreasing). Called once per request, so it
    /// must be cheap.
    fn monotonic_ns(&self) -> u64;

    /// Wall-clock nanoseconds since the Unix epoch. Called rarely (shards derive the wall time
    /// from the monotonic clock and re-synchronise about once a second).
    fn unix_ns(&self) -> i128;
}

/// The default clock: `CLOCK_MONOTONIC_COARSE` (a few nanoseconds per read, resolution of a
/// few milliseconds) and the system's real-time clock. Never the TSC.
///
/// Its monotonic time counts from the host's boot, not from the clock's creation, so engines
/// in different processes read the same time — which engines sharing a [`crate::runtime::CellTable`]
/// need (their rate cells hold absolute times).
#[derive(Debug, Default)]
pub struct SystemClock {
    _private: (),
}

impl Clock for SystemClock {
    fn monotonic_ns(&self) -> u64 {
        coarsetime::Instant::now_without_cache_update()
            .duration_since(coarsetime::Instant::from_ticks(0))
            .as_nanos()
    }

    fn unix_ns(&self) -> i128 {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        }
    }
}

/// A clock that only moves when told to: for tests and simulations.
#[derive(Debug, Default)]
pub struct ManualClock {
    monotonic: crate::sync::AtomicU64,
    unix_offset: crate::sync::AtomicI64,
}

impl ManualClock {
    /// A clock at monotonic 0 and wall time `unix_ns`.
    pub fn new(unix_ns: i128) -> Self {
        Self {
            monotonic: crate::sync::AtomicU64::new(0),
            unix_offset: crate::sync::AtomicI64::new(i64::try_from(unix_ns).unwrap_or(i64::MAX)),
        }
    }

    /// Moves time forward by `ns`.
    pub fn advance(&self, ns: u64) {
        self.monotonic.fetch_add(ns, crate::sync::Ordering::Relaxed);
    }

    /// Sets the monotonic time (must not go backwards).
    pub fn set(&self, monotonic_ns: u64) {
        self.monotonic
            .fetch_max(monotonic_ns, crate::sync::Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn monotonic_ns(&self) -> u64 {
        self.monotonic.load(crate::sync::Ordering::Relaxed)
    }

    fn unix_ns(&self) -> i128 {
        i128::from(self.unix_offset.load(crate::sync::Ordering::Relaxed))
            + i128::from(self.monotonic_ns())
    }
}
