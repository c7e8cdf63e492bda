//! The shared per-rule cell that makes a rule's limit global across shards.
//!
//! A cell is one cache line of plain atomics with no pointers inside, so a table of them can
//! live in memory shared between processes (the multi-process appliances the design names).
//! Shards do not touch the cell per request: they lease tokens or window slots from it in
//! batches and spend them locally, so the cell sees one write per lease. A refusal only reads
//! it.
//!
//! - rate: `state` is the GCRA theoretical arrival time (TAT) in monotonic nanoseconds. A lease
//!   of k tokens at time t is granted when the k-th token conforms, i.e.
//!   max(TAT, t) + (k − 1)·T − t ≤ tolerance, and moves TAT to max(TAT, t) + k·T.
//! - window: `state` is the number of free slots not held by any shard.
//! - percent: unused (each shard's deterministic gate is exact on its own, so the aggregate
//!   is exact to within one request per shard).

use crate::sync::{AtomicU64, Ordering};

/// One rule's shared limiter state.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct RuleCell {
    state: AtomicU64,
}

impl RuleCell {
    /// A cell for a rate rule (TAT 0: the full burst is available).
    pub fn rate() -> Self {
        Self {
            state: AtomicU64::new(0),
        }
    }

    /// A cell for a window of `size` slots, all free.
    pub fn window(size: u32) -> Self {
        Self {
            state: AtomicU64::new(u64::from(size)),
        }
    }

    /// A cell that holds nothing (percent rules).
    pub fn unused() -> Self {
        Self {
            state: AtomicU64::new(0),
        }
    }

    /// Leases up to `max` tokens at `now_ns` from a rate cell with emission interval
    /// `interval_ns` and tolerance `tolerance_ns`; returns how many were granted (0 when the
    /// rate is exhausted, without writing).
    #[inline]
    pub fn lease_tokens(&self, now_ns: u64, interval_ns: u64, tolerance_ns: u64, max: u32) -> u32 {
        let mut tat = self.state.load(Ordering::Acquire);
        loop {
            let base = tat.max(now_ns);
            let ahead = base - now_ns;
            if ahead > tolerance_ns {
                return 0;
            }
            let conforming = (tolerance_ns - ahead)
                .checked_div(interval_ns)
                .map_or(u64::from(max), |n| n + 1);
            let k = conforming.min(u64::from(max)) as u32;
            if k == 0 {
                return 0;
            }
            let new = base.saturating_add(u64::from(k) * interval_ns);
            match self
                .state
                .compare_exchange_weak(tat, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return k,
                Err(current) => tat = current,
            }
        }
    }

    /// Leases up to `max` free slots from a window cell; returns how many were granted.
    #[inline]
    pub fn lease_slots(&self, max: u32) -> u32 {
        let mut free = self.state.load(Ordering::Acquire);
        loop {
            if free == 0 {
                return 0;
            }
            let k = free.min(u64::from(max));
            match self.state.compare_exchange_weak(
                free,
                free - k,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return k as u32,
                Err(current) => free = current,
            }
        }
    }

    /// Gives `n` window slots back.
    #[inline]
    pub fn return_slots(&self, n: u32) {
        if n > 0 {
            self.state.fetch_add(u64::from(n), Ordering::AcqRel);
        }
    }

    /// The raw state (TAT or free slots), for tests and diagnostics.
    pub fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }
}

#[cfg(all(test, not(loadctl_loom)))]
mod tests {
    use super::*;

    #[test]
    fn token_leases_follow_gcra() {
        // 1000/s (T = 1 ms), tolerance 9 ms: burst of 10.
        let c = RuleCell::rate();
        let ms = 1_000_000;
        assert_eq!(c.lease_tokens(100 * ms, ms, 9 * ms, 4), 4);
        assert_eq!(c.lease_tokens(100 * ms, ms, 9 * ms, 100), 6);
        assert_eq!(c.lease_tokens(100 * ms, ms, 9 * ms, 100), 0);
        // One more token per millisecond.
        assert_eq!(c.lease_tokens(101 * ms, ms, 9 * ms, 100), 1);
        assert_eq!(c.lease_tokens(105 * ms, ms, 9 * ms, 100), 4);
    }

    #[test]
    fn slot_leases_never_exceed_the_window() {
        let c = RuleCell::window(5);
        assert_eq!(c.lease_slots(3), 3);
        assert_eq!(c.lease_slots(3), 2);
        assert_eq!(c.lease_slots(3), 0);
        c.return_slots(4);
        assert_eq!(c.lease_slots(10), 4);
    }
}
