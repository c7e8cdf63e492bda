//! A worker's classifier: the cached snapshot plus this worker's limiter state and counters.
//!
//! `classify` first lets exempt requests through without trying any rule and counts them per
//! reason ([`Request::is_exempt`]: RFC 7200 §5.1 requests, emergency calls to a
//! `urn:service:sos` URN, Resource-Priority namespaces such as `ets` and `wps`, as the
//! engine's [`super::Exemptions`] say — a prefix check on the Request-URI or To, and the
//! Resource-Priority values only when the header is present). Then it reads one shared word
//! per request (the engine's generation), finds the first
//! matching rule through the snapshot's indexes and decides with the rule's local state,
//! touching the rule's shared cell only when a lease runs out. It does not allocate once warm,
//! takes no lock and makes no system call (time comes with the request or from a coarse clock).

use std::collections::HashMap;

use super::stats::{Alt, CounterTable, HotRow, RowLimit, ShardCounters};
use super::{Decision, ExemptReason, Request, RuleStats, Ticket, Time, Verdict};
use super::{Inner, LimitParams, NOT_CARRIED, Snapshot};
use crate::compile::Scratch;
use crate::sync::{Arc, Ordering, lock};

/// Wall-clock time derived from the monotonic clock, re-synchronised about once a second.
#[derive(Debug, Default)]
struct WallSync {
    offset: i128,
    synced_at: Option<u64>,
}

const WALL_RESYNC_NS: u64 = 1_000_000_000;

/// One worker's classifier. Create it with [`super::Engine::attach`] on the thread that uses
/// it; drop it when the worker ends (its counters stay in the engine's totals).
pub struct Shard {
    inner: Arc<Inner>,
    snapshot: Arc<Snapshot>,
    /// Rule key → index, built only when a ticket from an older snapshot comes back.
    by_key: Option<HashMap<u64, u32>>,
    counters: Arc<ShardCounters>,
    table: Arc<CounterTable>,
    scratch: Scratch,
    wall: WallSync,
    shared_writes: u64,
    /// How far ahead of now a lease of more than one token reaches ([`super::lease_ahead_ns`]:
    /// the look-ahead [`LimitParams::Rate`]'s tolerance was reduced by).
    lease_period_ns: u64,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("generation", &self.snapshot.generation())
            .finish()
    }
}

impl Shard {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        let snapshot = inner.snapshot.load_full();
        let table = Arc::new(CounterTable::for_snapshot(&snapshot, None));
        let counters = Arc::new(ShardCounters::new(Arc::clone(&table)));
        lock(&inner.registry).shards.push(Arc::clone(&counters));
        let by_key = None;
        let lease_period_ns = super::lease_ahead_ns(&inner.config);
        Self {
            lease_period_ns,
            inner,
            snapshot,
            by_key,
            counters,
            table,
            scratch: Scratch::default(),
            wall: WallSync::default(),
            shared_writes: 0,
        }
    }

    /// The snapshot this shard currently enforces.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// How many times this shard wrote a shared cell (a lease or a return).
    pub fn shared_writes(&self) -> u64 {
        self.shared_writes
    }

    /// The time now, from the engine's clock.
    pub fn now(&mut self) -> Time {
        let clock = &self.inner.config.clock;
        let mono = clock.monotonic_ns();
        let stale = self
            .wall
            .synced_at
            .is_none_or(|at| mono.saturating_sub(at) >= WALL_RESYNC_NS);
        if stale {
            self.wall.offset = clock.unix_ns() - i128::from(mono);
            self.wall.synced_at = Some(mono);
        }
        Time {
            monotonic_ns: mono,
            unix_ns: self.wall.offset + i128::from(mono),
        }
    }

    /// Picks up a newly published snapshot, carrying state over by rule key.
    #[inline]
    fn refresh(&mut self) {
        if self.inner.generation.load(Ordering::Acquire) != self.snapshot.generation() {
            self.remap(self.inner.snapshot.load_full());
        }
    }

    fn remap(&mut self, next: Arc<Snapshot>) {
        // Where each new rule was in the snapshot this shard had: precomputed by the engine
        // when this shard followed every publish, otherwise matched by key.
        let mapping: Vec<u32> = if next.generation() == self.snapshot.generation() + 1 {
            next.previous.clone()
        } else {
            let old: HashMap<u64, u32> = self
                .snapshot
                .rules
                .iter()
                .enumerate()
                .map(|(i, r)| (r.key, i as u32))
                .collect();
            next.rules
                .iter()
                .map(|r| old.get(&r.key).copied().unwrap_or(NOT_CARRIED))
                .collect()
        };
        let table = Arc::new(CounterTable::for_snapshot(
            &next,
            Some((&self.table, &mapping, &self.counters)),
        ));
        self.counters.table.store(Arc::clone(&table));
        self.table = table;
        self.by_key = None;
        self.snapshot = next;
    }

    /// The index of the rule with `key` in the current snapshot.
    fn index_of(&mut self, key: u64) -> Option<usize> {
        let snapshot = &self.snapshot;
        let map = self.by_key.get_or_insert_with(|| {
            snapshot
                .rules
                .iter()
                .enumerate()
                .map(|(i, r)| (r.key, i as u32))
                .collect()
        });
        map.get(&key).map(|&i| i as usize)
    }

    /// Decides one request.
    pub fn classify(&mut self, req: &Request<'_>) -> Decision<'_> {
        self.refresh();
        let time = match req.time {
            Some(t) => t,
            None => self.now(),
        };
        if let Some(reason) = req.is_exempt(&self.inner.config.exemptions) {
            ShardCounters::bump(&self.counters.exempt[reason.index()]);
            return Decision {
                verdict: Verdict::Accept,
                rule: None,
                exempt: Some(reason),
                ticket: None,
            };
        }
        let snapshot = &self.snapshot;
        // Everything deciding needs is in the matched rule's row of this shard's table: one
        // line. (The table has a row per rule of the snapshot it was built for, so a match
        // always has one.)
        let matched = snapshot
            .policy
            .find_with(req.method, time.unix_ns, &req.identities, &mut self.scratch)
            .and_then(|i| Some((i, self.table.rows.get(i)?)));
        let Some((i, row)) = matched else {
            ShardCounters::bump(&self.counters.unmatched);
            if self.scratch.unread_number() {
                ShardCounters::bump(&self.counters.unread_numbers);
            }
            return Decision {
                verdict: Verdict::Accept,
                rule: None,
                exempt: None,
                ticket: None,
            };
        };
        let rule = snapshot.policy.rules().get(i);
        let (admitted, wrote) = acquire(row, time.monotonic_ns, self.lease_period_ns);
        self.shared_writes += u64::from(wrote);
        if admitted {
            ShardCounters::bump(&row.accepted);
            let ticket = match row.limit {
                RowLimit::Window { key } => Some(Ticket {
                    key,
                    index: i as u32,
                    generation: snapshot.generation(),
                }),
                _ => None,
            };
            return Decision {
                verdict: Verdict::Accept,
                rule,
                exempt: None,
                ticket,
            };
        }
        let cold = self.table.cold.get(i);
        let verdict = match row.alt {
            Alt::Reject => Verdict::Reject,
            Alt::Drop if req.transport.is_reliable() => Verdict::Drop,
            Alt::Drop => Verdict::Reject,
            Alt::RedirectRefused => {
                if let Some(c) = cold {
                    ShardCounters::bump(&c.redirect_refused);
                }
                Verdict::Reject
            }
            Alt::Redirect => Verdict::Redirect,
        };
        match (verdict, cold) {
            (Verdict::Reject, _) => ShardCounters::bump(&row.rejected),
            (Verdict::Redirect, Some(c)) => ShardCounters::bump(&c.redirected),
            (Verdict::Drop, Some(c)) => ShardCounters::bump(&c.dropped),
            _ => {}
        }
        Decision {
            verdict,
            rule,
            exempt: None,
            ticket: None,
        }
    }

    /// Releases the window slot a request took, when its transaction completes — also after
    /// the rule changed or disappeared in a later publish, and also on another shard of the
    /// same engine than the one that admitted it. Returns whether a window rule was found for
    /// the ticket (its slot returned; a window never holds more free slots than its size, so a
    /// ticket completed twice or forged cannot enlarge it for good). A ticket of a rule that
    /// left the snapshot takes a short lock (the engine's retired windows); others take none.
    pub fn complete(&mut self, ticket: Ticket) -> bool {
        self.refresh();
        let index = if ticket.generation == self.snapshot.generation()
            && self
                .snapshot
                .rules
                .get(ticket.index as usize)
                .is_some_and(|r| r.key == ticket.key)
        {
            Some(ticket.index as usize)
        } else {
            self.index_of(ticket.key)
        };
        if let Some(i) = index {
            let rule = &self.snapshot.rules[i];
            if let LimitParams::Window { size } = rule.limit {
                rule.cell.return_slots(1, size);
                self.shared_writes += 1;
                return true;
            }
            return false;
        }
        let retired = lock(&self.inner.retired_windows);
        match retired.get(&ticket.key) {
            Some((cell, size)) => {
                cell.return_slots(1, *size);
                self.shared_writes += 1;
                true
            }
            None => false,
        }
    }

    /// This shard's counters for rule `i` of its snapshot.
    pub fn rule_stats(&self, i: usize) -> Option<RuleStats> {
        (i < self.table.rows.len()).then(|| self.table.read(i))
    }

    /// Requests this shard let through as exempt, for every reason.
    pub fn exempt_count(&self) -> u64 {
        self.counters
            .exempt
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Requests this shard let through as exempt for `reason`.
    pub fn exempt_count_for(&self, reason: ExemptReason) -> u64 {
        self.counters.exempt[reason.index()].load(Ordering::Relaxed)
    }

    /// Requests no rule matched on this shard.
    pub fn unmatched_count(&self) -> u64 {
        self.counters.unmatched.load(Ordering::Relaxed)
    }

    /// Of the unmatched requests on this shard, those with a number-like SIP user part left
    /// unread (see [`super::EngineStats::unread_numbers`]).
    pub fn unread_numbers_count(&self) -> u64 {
        self.counters.unread_numbers.load(Ordering::Relaxed)
    }
}

/// Asks a rule's limiter (its row on this shard); returns (admitted, wrote the shared cell).
#[inline]
fn acquire(row: &HotRow, now: u64, lease_period_ns: u64) -> (bool, bool) {
    match row.limit {
        RowLimit::Percent { step } => {
            let acc = u32::try_from(row.state.load(Ordering::Relaxed)).unwrap_or(0);
            let (admit, next) = crate::limit::percent_advance(step, acc);
            row.state.store(u64::from(next), Ordering::Relaxed);
            (admit, false)
        }
        RowLimit::Closed => (false, false),
        RowLimit::Rate {
            interval_ns: interval,
            tolerance_ns,
            lease,
        } => {
            // With one token per lease there is nothing to look ahead for.
            let ahead_ns = if lease > 1 { lease_period_ns } else { 0 };
            let mut tokens = row.tokens.load(Ordering::Relaxed);
            let mut next_slot = row.state.load(Ordering::Relaxed);
            let mut wrote = false;
            if tokens == 0 || next_slot.saturating_add(ahead_ns) < now {
                // None left, or the ones left are stale: lease afresh.
                let (k, first) =
                    row.cell
                        .lease_tokens(now, interval, tolerance_ns, ahead_ns, lease);
                if k == 0 {
                    row.tokens.store(0, Ordering::Relaxed);
                    return (false, false);
                }
                tokens = k;
                next_slot = first;
                wrote = true;
            }
            // A token may be spent from its slot minus the tolerance on (GCRA conformance).
            let admit = next_slot <= now.saturating_add(tolerance_ns);
            if admit {
                tokens -= 1;
                next_slot = next_slot.saturating_add(interval);
            }
            row.tokens.store(tokens, Ordering::Relaxed);
            row.state.store(next_slot, Ordering::Relaxed);
            (admit, wrote)
        }
        RowLimit::Window { .. } => {
            // One slot per admission, straight from the shared cell: a window is exact across
            // shards and a ticket can be completed on any shard.
            if row.cell.lease_slots(1) == 0 {
                return (false, false);
            }
            (true, true)
        }
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        // Window slots stay taken: their tickets may still be completed on another shard.
        super::stats::detach(&self.inner, &self.counters, &self.snapshot);
    }
}
