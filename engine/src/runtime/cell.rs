//! The shared per-rule cell that makes a rule's limit global across shards.
//!
//! A cell is 64 bytes of plain atomics and padding with no pointers inside, so a table of them
//! can live in memory shared between processes (the multi-process appliances the design names),
//! one cache line per cell: a [`CellTable`], whose slots also use two padding words (the owning
//! rule's key, the number of engines using it). In-process cells are allocated one by one without
//! 64-byte alignment — over-aligned allocations cost ~2.3× the memory at 100,000 rules — and the
//! 64-byte size alone keeps any two cells' state words on different cache lines.
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

use super::table::CellTable;
use crate::sync::{AtomicU64, Ordering};

/// One rule's shared limiter state.
#[derive(Debug)]
#[repr(C)]
pub struct RuleCell {
    state: AtomicU64,
    /// In a shared [`super::CellTable`]: the key of the rule owning the slot (0: never used).
    owner: AtomicU64,
    /// In a shared [`super::CellTable`]: how many engines use the slot.
    refs: AtomicU64,
    /// Makes the cell 64 bytes: no other cell's state word is within a cache line of this one.
    _pad: [u64; 5],
}

impl RuleCell {
    /// A cell for a rate rule (TAT 0: the full burst is available).
    pub fn rate() -> Self {
        Self {
            state: AtomicU64::new(0),
            owner: AtomicU64::new(0),
            refs: AtomicU64::new(0),
            _pad: [0; 5],
        }
    }

    /// A cell for a window of `size` slots, all free.
    pub fn window(size: u32) -> Self {
        Self {
            state: AtomicU64::new(u64::from(size)),
            owner: AtomicU64::new(0),
            refs: AtomicU64::new(0),
            _pad: [0; 5],
        }
    }

    /// A cell that holds nothing (percent rules, which all share one).
    pub fn unused() -> Self {
        Self {
            state: AtomicU64::new(0),
            owner: AtomicU64::new(0),
            refs: AtomicU64::new(0),
            _pad: [0; 5],
        }
    }

    /// Leases up to `max` tokens at `now_ns` from a rate cell with emission interval
    /// `interval_ns` and tolerance `tolerance_ns`, looking `ahead_ns` into the future: a token
    /// is granted when its slot s satisfies s − tolerance ≤ now + ahead. Returns how many were
    /// granted and the slot of the first (the others follow one interval apart); `(0, _)` when
    /// none, without writing. A token may be spent from `slot − tolerance` on.
    #[inline]
    pub fn lease_tokens(
        &self,
        now_ns: u64,
        interval_ns: u64,
        tolerance_ns: u64,
        ahead_ns: u64,
        max: u32,
    ) -> (u32, u64) {
        let mut tat = self.state.load(Ordering::Acquire);
        loop {
            let (k, base, new) =
                crate::limit::gcra_lease(tat, now_ns, interval_ns, tolerance_ns, ahead_ns, max);
            if k == 0 {
                return (0, base);
            }
            match self.replace(tat, new) {
                Ok(_) => return (k, base),
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
            match self.replace(free, free - k) {
                Ok(_) => return k as u32,
                Err(current) => free = current,
            }
        }
    }

    /// Replaces the state with `new` if it still holds `current` (else returns what it holds).
    #[cfg(not(loadctl_loom_mutant))]
    #[inline]
    fn replace(&self, current: u64, new: u64) -> Result<u64, u64> {
        self.state
            .compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire)
    }

    /// Deliberately broken for the loom can-fail check (loom-tests/tests/mutants.rs): a plain
    /// store, so a lease made concurrently is overwritten.
    #[cfg(loadctl_loom_mutant)]
    fn replace(&self, current: u64, new: u64) -> Result<u64, u64> {
        self.state.store(new, Ordering::Release);
        Ok(current)
    }

    /// Gives `n` window slots back, never above the window's `size`: a ticket completed twice
    /// (or forged) cannot make the window larger than its size for good.
    #[inline]
    pub fn return_slots(&self, n: u32, size: u32) {
        let mut free = self.state.load(Ordering::Acquire);
        loop {
            let next = (free + u64::from(n)).min(u64::from(size));
            if next == free {
                return;
            }
            match self.replace(free, next) {
                Ok(_) => return,
                Err(current) => free = current,
            }
        }
    }

    /// Slots of a window cell of `size` that are taken now (a snapshot).
    pub fn slots_in_use(&self, size: u32) -> u32 {
        let free = self.state.load(Ordering::Acquire);
        u32::try_from(u64::from(size).saturating_sub(free)).unwrap_or(0)
    }

    /// The raw state (TAT or free slots), for tests and diagnostics.
    pub fn state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }

    /// The state word (a shared table's header keeps its lock here).
    pub(crate) fn state_word(&self) -> &AtomicU64 {
        &self.state
    }

    /// The owner word (a shared table's header keeps its magic number here).
    pub(crate) fn owner_word(&self) -> &AtomicU64 {
        &self.owner
    }

    /// The user count (a shared table's header keeps its capacity here).
    pub(crate) fn refs_word(&self) -> &AtomicU64 {
        &self.refs
    }

    /// Makes a shared table's slot never used.
    pub(crate) fn reset_slot(&self) {
        self.state.store(0, Ordering::Relaxed);
        self.owner.store(0, Ordering::Relaxed);
        self.refs.store(0, Ordering::Relaxed);
    }

    /// Starts a shared table's slot afresh for a rule (called under the table lock).
    pub(crate) fn init_state(&self, init: super::table::CellInit) {
        let v = match init {
            super::table::CellInit::Rate => 0,
            super::table::CellInit::Window(size) => u64::from(size),
        };
        self.state.store(v, Ordering::Release);
    }
}

/// A rule's cell as snapshots and shards hold it: the engine's own, or a slot of a shared
/// [`CellTable`] (released, one user fewer, when the last holder in this engine drops it).
#[derive(Debug)]
pub(crate) enum CellRef {
    /// Allocated by this engine.
    Own(RuleCell),
    /// Slot `index` of a shared table.
    Table {
        table: CellTable,
        index: usize,
        cell: &'static RuleCell,
    },
}

impl CellRef {
    /// Slot `index` of `table`, already claimed.
    pub(crate) fn in_table(table: CellTable, index: usize) -> Self {
        CellRef::Table {
            table,
            index,
            cell: table.cell(index),
        }
    }

    /// True for a slot of a shared table.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, CellRef::Table { .. })
    }
}

impl std::ops::Deref for CellRef {
    type Target = RuleCell;
    #[inline]
    fn deref(&self) -> &RuleCell {
        match self {
            CellRef::Own(c) => c,
            CellRef::Table { cell, .. } => cell,
        }
    }
}

impl Drop for CellRef {
    fn drop(&mut self) {
        if let CellRef::Table { table, index, .. } = self {
            table.release(*index);
        }
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
        assert_eq!(c.lease_tokens(100 * ms, ms, 9 * ms, 0, 4), (4, 100 * ms));
        assert_eq!(c.lease_tokens(100 * ms, ms, 9 * ms, 0, 100), (6, 104 * ms));
        assert_eq!(c.lease_tokens(100 * ms, ms, 9 * ms, 0, 100).0, 0);
        // One more token per millisecond.
        assert_eq!(c.lease_tokens(101 * ms, ms, 9 * ms, 0, 100), (1, 110 * ms));
        assert_eq!(c.lease_tokens(105 * ms, ms, 9 * ms, 0, 100), (4, 111 * ms));
        // Looking 3 ms ahead grants 3 more, whose slots lie in the future.
        assert_eq!(
            c.lease_tokens(105 * ms, ms, 9 * ms, 3 * ms, 100),
            (3, 115 * ms)
        );
    }

    #[test]
    fn slot_leases_never_exceed_the_window() {
        let c = RuleCell::window(5);
        assert_eq!(c.lease_slots(3), 3);
        assert_eq!(c.lease_slots(3), 2);
        assert_eq!(c.lease_slots(3), 0);
        c.return_slots(4, 5);
        assert_eq!(c.lease_slots(10), 4);
        // Never more free slots than the window's size, however many come back.
        c.return_slots(9, 5);
        assert_eq!(c.slots_in_use(5), 0);
        assert_eq!(c.lease_slots(10), 5);
    }
}
