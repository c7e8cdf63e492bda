//! A table of rule cells in memory several engines share — typically several *processes*
//! (Kamailio, OpenSIPS and other appliances that fork their workers), each with its own engine
//! compiling the same policy, so that all of them enforce one global limit per rule.
//!
//! The table is a slice of 64-byte [`RuleCell`]s with no pointers inside, so it can live in a
//! region the host maps into every process (`mmap(MAP_SHARED)`, the host's shared memory).
//! Slot 0 is the header: a magic word, the capacity, and the table's lock word. The other slots
//! are cells owned by a rule *key* (a hash of source, rule id and action: the same in every
//! process that publishes the same policy), with a reference count of the engines using them.
//!
//! # Seams
//! - The host formats the region once ([`CellTable::format`], before it forks), then every
//!   engine attaches ([`CellTable::attach`], after the fork: an engine's references are counted
//!   per engine, and a forked copy of an engine would hold references nobody counted).
//! - Engines claim and release cells only when they publish (never per request): under the
//!   table's lock, a spin lock in slot 0 held for one probe of the table. A claim finds the
//!   key's slot or takes the first free one on its probe path, so two engines publishing the
//!   same rule at the same moment get the same cell. A slot whose count drops to zero stays
//!   owned by its key until another key needs it (a new key takes a never-used slot on its
//!   probe path before one a rule left): a rate rule that comes back — a policy withdrawn by a
//!   `terminated` NOTIFY and brought back by the re-subscription — continues its limiter
//!   (its TAT) instead of starting with a second burst; a window rule that comes back starts
//!   with every slot free (its tickets all came back before its last user let it go).
//! - Keys are placed by linear probing; a probe stops at a never-used slot. Slots never return
//!   to never-used, so probe paths stay intact; after much churn a miss scans the whole table,
//!   which costs microseconds per claim and happens only at publish.
//! - Engines sharing a table must share a clock: the default [`crate::clock::SystemClock`] reads
//!   `CLOCK_MONOTONIC_COARSE` since boot, the same in every process of the host; C callers
//!   that pass their own times must use `CLOCK_MONOTONIC` nanoseconds.
//! - A process that dies while holding the lock (a window of a few hundred nanoseconds) leaves
//!   it held: claims then fail with [`CellTableError::Busy`] after two seconds (the table's
//!   patience) instead of hanging. The patience is real time, not the engine's clock: it
//!   bounds a wait for another process, not a limit.

use super::cell::RuleCell;
use crate::sync::Ordering;

/// "lccells" + layout version 1.
const MAGIC: u64 = 0x6c63_6365_6c6c_7301;

/// How long a claim waits for the table lock before giving up, by default.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a table could not be formatted, attached or used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellTableError {
    /// The region holds fewer than two slots (a header and one cell).
    TooSmall {
        /// Slots the region holds.
        slots: usize,
    },
    /// The region was not formatted by [`CellTable::format`] (wrong magic word or layout
    /// version), or its recorded capacity does not match its size.
    NotFormatted,
    /// Every cell is in use by some rule: the policy needs more cells than the table has.
    Full {
        /// Cells in the table (slots minus the header).
        capacity: usize,
    },
    /// The table's lock stayed held for the table's patience, two seconds by default (a
    /// process died while holding it?).
    Busy,
}

impl std::fmt::Display for CellTableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CellTableError::TooSmall { slots } => write!(
                f,
                "a shared cell table needs at least 2 slots of 64 bytes; the region holds {slots}"
            ),
            CellTableError::NotFormatted => f.write_str(
                "the region is not a formatted cell table (format it once before attaching)",
            ),
            CellTableError::Full { capacity } => write!(
                f,
                "the shared cell table is full: all {capacity} cells are used by rules"
            ),
            CellTableError::Busy => f.write_str(
                "the shared cell table's lock stayed held (did a process die holding it?)",
            ),
        }
    }
}

impl std::error::Error for CellTableError {}

/// How a claimed cell starts when nobody was using it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CellInit {
    /// A rate cell: the full burst available.
    Rate,
    /// A window cell with all `size` slots free.
    Window(u32),
}

/// A cell table in shared memory (see the module documentation). Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct CellTable {
    slots: &'static [RuleCell],
    // Loom runs have no clock to be patient with.
    #[cfg_attr(loadctl_loom, allow(dead_code))]
    patience: std::time::Duration,
}

impl CellTable {
    /// Bytes of one slot; the region must be aligned to this too.
    pub const SLOT_BYTES: usize = std::mem::size_of::<RuleCell>();

    /// The size of a region with room for `capacity` cells (plus the header slot).
    pub fn bytes_for(capacity: usize) -> usize {
        capacity.saturating_add(1).saturating_mul(Self::SLOT_BYTES)
    }

    /// Formats `slots` as an empty table: every cell free. Do this once, before any engine
    /// attaches; formatting a table in use corrupts every engine's limits.
    pub fn format(slots: &'static [RuleCell]) -> Result<Self, CellTableError> {
        if slots.len() < 2 {
            return Err(CellTableError::TooSmall { slots: slots.len() });
        }
        for s in &slots[1..] {
            s.reset_slot();
        }
        let header = &slots[0];
        header.state_word().store(0, Ordering::Relaxed);
        header
            .refs_word()
            .store((slots.len() - 1) as u64, Ordering::Relaxed);
        header.owner_word().store(MAGIC, Ordering::Release);
        Ok(Self {
            slots,
            patience: LOCK_PATIENCE,
        })
    }

    /// Attaches to a table [`CellTable::format`] prepared (in this process or another).
    pub fn attach(slots: &'static [RuleCell]) -> Result<Self, CellTableError> {
        if slots.len() < 2 {
            return Err(CellTableError::TooSmall { slots: slots.len() });
        }
        let header = &slots[0];
        if header.owner_word().load(Ordering::Acquire) != MAGIC
            || header.refs_word().load(Ordering::Relaxed) != (slots.len() - 1) as u64
        {
            return Err(CellTableError::NotFormatted);
        }
        Ok(Self {
            slots,
            patience: LOCK_PATIENCE,
        })
    }

    /// The same table, giving up on a held lock after `patience` instead of two seconds.
    pub fn with_patience(self, patience: std::time::Duration) -> Self {
        Self { patience, ..self }
    }

    /// The table's slots (the header first), e.g. to attach another engine to the same table.
    pub fn slots(&self) -> &'static [RuleCell] {
        self.slots
    }

    /// Cells in the table.
    pub fn capacity(&self) -> usize {
        self.slots.len() - 1
    }

    /// Cells some engine is using now (a racy count, for diagnostics).
    pub fn in_use(&self) -> usize {
        self.slots[1..]
            .iter()
            .filter(|s| s.refs_word().load(Ordering::Relaxed) > 0)
            .count()
    }

    /// The cell in slot `index` (1-based; slot 0 is the header).
    pub(crate) fn cell(&self, index: usize) -> &'static RuleCell {
        &self.slots[index]
    }

    /// Claims the cell of rule `key` (one more user); returns its slot index. A window cell
    /// nobody was using starts with every slot free; a rate cell its rule left continues its
    /// limiter (see the module documentation), a new one starts with the full burst.
    pub(crate) fn claim(&self, key: u64, init: CellInit) -> Result<usize, CellTableError> {
        let _lock = self.lock()?;
        let capacity = self.capacity();
        let home = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17) as usize % capacity;
        // The first slot on the probe path no engine uses that was never used, else the
        // first one another rule left (whose limiter state a return of that rule would find).
        let mut never_used = None;
        let mut left = None;
        for step in 0..capacity {
            let i = 1 + (home + step) % capacity;
            let s = &self.slots[i];
            let owner = s.owner_word().load(Ordering::Relaxed);
            let refs = s.refs_word().load(Ordering::Relaxed);
            if owner == key {
                if refs == 0 && matches!(init, CellInit::Window(_)) {
                    s.init_state(init);
                }
                s.refs_word().store(refs + 1, Ordering::Relaxed);
                return Ok(i);
            }
            if owner == 0 {
                never_used = Some(i);
                break;
            }
            if refs == 0 && left.is_none() {
                left = Some(i);
            }
        }
        let i = never_used
            .or(left)
            .ok_or(CellTableError::Full { capacity })?;
        let s = &self.slots[i];
        s.owner_word().store(key, Ordering::Relaxed);
        s.init_state(init);
        s.refs_word().store(1, Ordering::Relaxed);
        Ok(i)
    }

    /// One user fewer of the cell in slot `index`. When the lock cannot be had the count is
    /// left as it is: the cell stays claimed (a leak) rather than risk two rules sharing it.
    pub(crate) fn release(&self, index: usize) {
        if let Ok(_lock) = self.lock() {
            let refs = self.slots[index].refs_word();
            let n = refs.load(Ordering::Relaxed);
            refs.store(n.saturating_sub(1), Ordering::Relaxed);
        }
    }

    fn lock(&self) -> Result<TableLock<'_>, CellTableError> {
        let word = self.slots[0].state_word();
        // Deliberately broken for the loom can-fail check (loom-tests/tests/mutants.rs): no
        // lock at all, so two engines' claims interleave.
        if cfg!(loadctl_loom_mutant) {
            return Ok(TableLock { word });
        }
        #[cfg(not(loadctl_loom))]
        let start = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            if word
                .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(TableLock { word });
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                #[cfg(not(loadctl_loom))]
                if start.elapsed() > self.patience {
                    return Err(CellTableError::Busy);
                }
                crate::sync::yield_now();
            } else {
                std::hint::spin_loop();
            }
            #[cfg(loadctl_loom)]
            crate::sync::yield_now();
        }
    }
}

/// The held table lock; released on drop.
struct TableLock<'a> {
    word: &'a crate::sync::AtomicU64,
}

impl Drop for TableLock<'_> {
    fn drop(&mut self) {
        self.word.store(0, Ordering::Release);
    }
}

#[cfg(all(test, not(loadctl_loom)))]
mod tests {
    use super::*;

    fn region(slots: usize) -> &'static [RuleCell] {
        let v: Vec<RuleCell> = (0..slots).map(|_| RuleCell::unused()).collect();
        Box::leak(v.into_boxed_slice())
    }

    #[test]
    fn format_then_attach_and_refuse_garbage() {
        let r = region(9);
        assert_eq!(
            CellTable::attach(r).expect_err("must be refused"),
            CellTableError::NotFormatted
        );
        let t = CellTable::format(r).expect("must succeed");
        assert_eq!(t.capacity(), 8);
        assert_eq!(CellTable::attach(r).expect("must succeed").capacity(), 8);
        // A region of another size than the one formatted is refused.
        assert_eq!(
            CellTable::attach(&r[..5]).expect_err("must be refused"),
            CellTableError::NotFormatted
        );
        assert_eq!(
            CellTable::format(&r[..1]).expect_err("must be refused"),
            CellTableError::TooSmall { slots: 1 }
        );
        assert_eq!(CellTable::bytes_for(8), 9 * 64);
        assert_eq!(CellTable::SLOT_BYTES, 64);
    }

    #[test]
    fn same_key_same_cell_counted_and_reinitialised_when_idle() {
        let t = CellTable::format(region(5)).expect("must succeed");
        let a = t.claim(42, CellInit::Window(3)).expect("must succeed");
        assert_eq!(t.claim(42, CellInit::Window(3)).expect("must succeed"), a);
        assert_eq!(t.cell(a).lease_slots(10), 3);
        let b = t.claim(43, CellInit::Rate).expect("must succeed");
        assert_ne!(a, b);
        assert_eq!(t.in_use(), 2);
        t.release(a);
        // Still one user: the state is kept.
        assert_eq!(t.claim(42, CellInit::Window(3)).expect("must succeed"), a);
        assert_eq!(t.cell(a).lease_slots(10), 0);
        t.release(a);
        t.release(a);
        assert_eq!(t.in_use(), 1);
        // Idle, claimed again by its key: fresh state in the same slot.
        assert_eq!(t.claim(42, CellInit::Window(3)).expect("must succeed"), a);
        assert_eq!(t.cell(a).lease_slots(10), 3);
    }

    #[test]
    fn full_table_is_an_error_and_idle_cells_are_reused() {
        let t = CellTable::format(region(4)).expect("must succeed");
        let cells: Vec<usize> = (1..=3)
            .map(|k| t.claim(k, CellInit::Rate).expect("must succeed"))
            .collect();
        assert_eq!(
            t.claim(99, CellInit::Rate).expect_err("must be refused"),
            CellTableError::Full { capacity: 3 }
        );
        t.release(cells[1]);
        let reused = t.claim(99, CellInit::Window(7)).expect("must succeed");
        assert_eq!(reused, cells[1]);
        assert_eq!(t.cell(reused).state(), 7);
        // Keys past a reused slot are still found (probe paths stay intact).
        for (k, &i) in [1u64, 3].iter().zip([cells[0], cells[2]].iter()) {
            assert_eq!(t.claim(*k, CellInit::Rate).expect("must succeed"), i);
        }
    }

    #[test]
    fn a_held_lock_times_out_as_busy() {
        let r = region(3);
        let t = CellTable::format(r)
            .expect("must succeed")
            .with_patience(std::time::Duration::from_millis(20));
        r[0].state_word().store(1, Ordering::Release);
        assert_eq!(
            t.claim(5, CellInit::Rate).expect_err("must be refused"),
            CellTableError::Busy
        );
        r[0].state_word().store(0, Ordering::Release);
        assert!(t.claim(5, CellInit::Rate).is_ok());
    }

    #[test]
    fn threads_claiming_the_same_keys_share_cells() {
        let t = CellTable::format(region(65)).expect("must succeed");
        let got: Vec<Vec<usize>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (1..=32u64)
                            .map(|k| t.claim(k, CellInit::Rate).expect("must succeed"))
                            .collect()
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("must succeed"))
                .collect()
        });
        assert!(got.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(t.in_use(), 32);
        for &i in &got[0] {
            assert_eq!(t.slots[i].refs_word().load(Ordering::Relaxed), 4);
        }
    }
}
