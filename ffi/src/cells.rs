//! Shared cell tables: one global limit per rule across the processes of a forking appliance.
//!
//! The host allocates a region in memory every process sees (Kamailio's `shm_malloc`,
//! `mmap(MAP_SHARED | MAP_ANONYMOUS)` before `fork`, a POSIX shm object), 64-byte aligned and
//! `lc_cell_table_bytes(capacity)` long, formats it once with `lc_cell_table_format`, and then
//! each process (after the fork) creates its engine with `lc_engine_new_shared` on the same
//! region. Every process publishes the same policy to its own engine; the rate and window
//! rules' limiter cells live in the region, so the limits are global. Engines sharing a table
//! must read one clock: leave `lc_request.has_time` false, or pass `CLOCK_MONOTONIC`
//! nanoseconds.

use std::ffi::c_void;

use loadctl::runtime::{CellTable, CellTableError, Engine, RuleCell};

use crate::engine::{lc_engine, lc_engine_config, new_engine};
use crate::{Code, boundary, lc_result};

/// The result code of a cell-table error, with its message as the call's error detail.
pub(crate) fn table_error(e: CellTableError) -> Code {
    crate::error::detail(e);
    match e {
        CellTableError::TooSmall { .. } | CellTableError::NotFormatted => Code::CellTableInvalid,
        CellTableError::Full { .. } => Code::CellTableFull,
        CellTableError::Busy => Code::CellTableBusy,
    }
}

/// `mem` may hold a table: non-NULL (else `NullParameter`, the header's rule for a required
/// pointer) and 64-byte aligned.
fn usable(mem: *mut c_void) -> Result<(), Code> {
    if mem.is_null() {
        Err(crate::abi::null("mem"))
    } else if !(mem as usize).is_multiple_of(CellTable::SLOT_BYTES) {
        Err(crate::error::fail(
            Code::CellTableInvalid,
            format_args!(
                "cell table region {mem:p}: not aligned to {} bytes",
                CellTable::SLOT_BYTES
            ),
        ))
    } else {
        Ok(())
    }
}

/// The region `mem`/`len` as table slots (whole slots; bytes past the last are ignored).
///
/// # Safety
/// `mem` must be NULL or point to `len` bytes readable and writable by atomic operations for
/// as long as any engine uses the table (the rest of the process's life, in practice), and
/// initialised (zeroes will do) unless the caller overwrites them first.
unsafe fn slots(mem: *mut c_void, len: usize) -> Result<&'static [RuleCell], Code> {
    usable(mem)?;
    let n = len / CellTable::SLOT_BYTES;
    if n < 2 {
        return Err(table_error(CellTableError::TooSmall { slots: n }));
    }
    // SAFETY: non-null and aligned to 64 (RuleCell's size; its alignment is 8); the caller
    // promises `len` bytes that stay valid and initialised for the rest of the program. A
    // RuleCell is #[repr(C)] atomics and integers, valid for every bit pattern, and only ever
    // accessed through atomic operations, so other processes writing it concurrently is fine.
    Ok(unsafe { std::slice::from_raw_parts(mem.cast::<RuleCell>(), n) })
}

/// The formatted table at `mem`/`len`.
///
/// # Safety
/// As for [`slots`], and formatted by `lc_cell_table_format` (or NULL).
unsafe fn attach(mem: *mut c_void, len: usize) -> Result<CellTable, Code> {
    // SAFETY: by the caller's contract.
    CellTable::attach(unsafe { slots(mem, len) }?).map_err(table_error)
}

/// Bytes a cell table with room for `capacity` cells needs (one cell per rate or window rule
/// in the policy; percent rules need none), header included: 64 × (capacity + 1). Give it
/// head room: a rule that changes its limit needs a second cell until every process has
/// moved on. 0 when `capacity` is 0.
#[unsafe(no_mangle)]
pub extern "C" fn lc_cell_table_bytes(capacity: u32) -> usize {
    if capacity == 0 {
        0
    } else {
        CellTable::bytes_for(capacity as usize)
    }
}

/// Formats the region `mem`/`len` as an empty cell table. Do it once, before any engine uses
/// the region (in a forking host: in the parent, before the fork); formatting a table in use
/// breaks every engine's limits. The region may be uninitialised memory.
///
/// Errors: `LC_RESULT_NULL_PARAMETER` when `mem` is NULL; `LC_RESULT_CELL_TABLE_INVALID` when
/// it is not 64-byte aligned, or `len` is below `lc_cell_table_bytes(1)`.
///
/// # Safety
/// `mem` must be NULL or point to `len` writable bytes that stay valid as long as any engine
/// uses them, and no engine may use the region yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_cell_table_format(mem: *mut c_void, len: usize) -> lc_result {
    boundary(|| {
        try_!(usable(mem));
        // SAFETY: non-null, and the caller promises `len` writable bytes nobody uses yet; the
        // zeroes make every slot a valid RuleCell before `slots` views them as cells.
        unsafe { std::ptr::write_bytes(mem.cast::<u8>(), 0, len) };
        // SAFETY: as above; now initialised.
        let s = try_!(unsafe { slots(mem, len) });
        try_!(CellTable::format(s).map_err(table_error));
        Code::Ok
    })
}

/// Writes to `*out` how many cells of the table at `mem`/`len` some engine is using (a racy
/// count, for statistics).
///
/// Errors: `LC_RESULT_NULL_PARAMETER` when `mem` is NULL; `LC_RESULT_CELL_TABLE_INVALID` when
/// the region is misaligned or not a table formatted with this `len`.
///
/// # Safety
/// `mem`/`len` must be a region formatted by `lc_cell_table_format` (or NULL); `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_cell_table_in_use(
    mem: *mut c_void,
    len: usize,
    out: *mut u32,
) -> lc_result {
    boundary(|| {
        let out = try_out!(out);
        // SAFETY: the caller promises a formatted region (so, initialised) or NULL.
        let table = try_!(unsafe { attach(mem, len) });
        out.write(u32::try_from(table.in_use()).unwrap_or(u32::MAX));
        Code::Ok
    })
}

/// Creates an engine (as `lc_engine_new`) whose rate and window rules keep their limiter
/// state in the shared cell table at `mem`/`len`, formatted earlier by `lc_cell_table_format`:
/// every engine on the table that publishes the same policy enforces the same global limits.
/// Create it in the process that will use it (after any fork). A publish that needs more
/// cells than are free fails with `LC_RESULT_CELL_TABLE_FULL` and changes nothing.
///
/// Errors: `LC_RESULT_NULL_PARAMETER` when `mem` is NULL; `LC_RESULT_CELL_TABLE_INVALID` when
/// the region is misaligned or not a table formatted with this `len`; the errors of
/// `lc_engine_new`.
///
/// # Safety
/// `config` must be NULL or valid; `mem`/`len` a formatted region that stays mapped (at the
/// same size) for as long as the engine and its workers live; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_engine_new_shared(
    config: *const lc_engine_config,
    mem: *mut c_void,
    len: usize,
    out: *mut *mut lc_engine,
) -> lc_result {
    // SAFETY: `config` and `out` forwarded from the caller; the caller promises a formatted
    // (so, initialised) region that outlives the engine.
    boundary(|| unsafe {
        new_engine(config, out, |c| {
            Ok(Engine::with_cell_table(c, attach(mem, len)?))
        })
    })
}
