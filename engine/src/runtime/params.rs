//! How each rule's limit is enforced across shards: the parameters the engine derives from a
//! rule and its configuration once per publish, and the cell each rule starts with.

use super::{CellInit, CellRef, CellTable, CellTableError, EngineConfig, RuleCell};
use crate::policy::Limit;
use crate::sync::Arc;

/// How a rule's limit is enforced across shards.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LimitParams {
    /// GCRA with leases.
    Rate {
        /// Emission interval T; `None` for rate 0.
        interval_ns: Option<u64>,
        /// min(τ, b·T − 1) ([`crate::limit::tolerance_ns`]), less the look-ahead
        /// (so leased tokens never widen the burst).
        tolerance_ns: u64,
        /// Tokens per lease. A lease of more than one token may reach the engine's lease
        /// period ahead of now (stale leases expire after as long); one of one token, not.
        lease: u32,
    },
    /// A per-shard deterministic gate.
    Percent(f64),
    /// A global window: one slot per admission, taken from and returned to the shared cell.
    Window {
        /// Window size.
        size: u32,
    },
}

impl LimitParams {
    pub(crate) fn new(limit: &Limit, config: &EngineConfig) -> Self {
        match *limit {
            Limit::Rate(r) => {
                let r = r.per_second();
                let Some(interval) = crate::limit::interval_ns(r) else {
                    return LimitParams::Rate {
                        interval_ns: None,
                        tolerance_ns: 0,
                        lease: 1,
                    };
                };
                let tolerance = crate::limit::tolerance_ns(interval, r, config.burst_tolerance);
                let lease = ((r * config.lease_period.as_secs_f64()).floor() as u64)
                    .clamp(1, 1 << 16) as u32;
                // With one token per lease there is nothing to look ahead for.
                let ahead = if lease > 1 { lease_ahead_ns(config) } else { 0 };
                LimitParams::Rate {
                    interval_ns: Some(interval),
                    tolerance_ns: tolerance.saturating_sub(ahead),
                    lease,
                }
            }
            Limit::Percent(p) => LimitParams::Percent(p.value()),
            Limit::Window(w) => LimitParams::Window { size: w },
        }
    }

    /// A fresh cell for rule `key` with these limits — claimed in `table` when the engine
    /// has one; percent rules share `unused` (they keep no shared state).
    pub(crate) fn new_cell(
        &self,
        key: u64,
        unused: &Arc<CellRef>,
        table: Option<CellTable>,
    ) -> Result<Arc<CellRef>, CellTableError> {
        let init = match *self {
            LimitParams::Rate { .. } => CellInit::Rate,
            LimitParams::Percent(_) => return Ok(Arc::clone(unused)),
            LimitParams::Window { size, .. } => CellInit::Window(size),
        };
        Ok(Arc::new(match table {
            Some(t) => CellRef::in_table(t, t.claim(key, init)?),
            None => CellRef::Own(match init {
                CellInit::Rate => RuleCell::rate(),
                CellInit::Window(size) => RuleCell::window(size),
            }),
        }))
    }
}

/// How far ahead of now a lease of more than one token may reach: the engine's lease period
/// in nanoseconds. [`LimitParams::Rate`]'s tolerance is reduced by exactly this, and shards
/// look ahead by exactly this (the one definition for both; a period past `u64` nanoseconds,
/// 584 years, keeps the low 64 bits, as it always has).
pub(crate) fn lease_ahead_ns(config: &EngineConfig) -> u64 {
    config.lease_period.as_nanos() as u64
}
