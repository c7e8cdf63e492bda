//! Counters: kept per shard without shared writes, summed when read.
//!
//! Each shard owns a [`CounterTable`] (one row per rule of its snapshot: a [`HotRow`] line with
//! the rule's common counters, the shard's limiter state and what deciding needs, plus rarer
//! counters apart). Only that shard writes it, with plain relaxed loads and stores (no
//! read-modify-write, no lock); readers sum all shards' tables. When a shard re-maps to a new snapshot it copies the rows of
//! kept rules into a new table and folds the rows of removed rules into per-source totals, so
//! nothing counted is ever lost: at any time, exempt + unmatched + Σ matched equals the
//! requests classified (up to the few in flight on busy shards).

use std::collections::HashMap;
use std::fmt::Write as _;

use super::cell::CellRef;
use super::{ExemptReason, Inner, LimitParams, RuleStats, Snapshot, SnapshotRule};
use crate::policy::{AltAction, Limit};
use crate::sync::{Arc, ArcSwap, AtomicU32, AtomicU64, Mutex, Name, Ordering, lock};

/// What a shard does with a request its rule does not admit (the rule's alt-action, with the
/// notifier's redirect targets already vetted at compile time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Alt {
    /// 503.
    Reject,
    /// Drop (a 503 on unreliable transports, where a silent drop would only cause
    /// retransmissions).
    Drop,
    /// 3xx to the rule's targets.
    Redirect,
    /// A redirect the configuration refuses: 503, counted as refused.
    RedirectRefused,
}

/// How a shard enforces one rule's limit: the snapshot's [`LimitParams`], copied into the
/// rule's [`HotRow`] so that deciding never reads the snapshot's rule list.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RowLimit {
    /// GCRA with leases (see [`LimitParams::Rate`]); the look-ahead is the engine's lease
    /// period when `lease > 1`, else 0.
    Rate {
        interval_ns: u64,
        tolerance_ns: u64,
        lease: u32,
    },
    /// Rate 0: nothing is admitted.
    Closed,
    /// The percent gate's step ([`crate::limit::percent_step`]); its accumulator is the row's `state`.
    Percent { step: u32 },
    /// A window; `key` goes into the tickets it issues.
    Window { key: u64 },
}

/// One rule on one shard: everything `classify` reads and writes for a matched request, in one
/// cache line — the counters of the two common outcomes (readers sum them), this shard's
/// limiter state, the limit and the alt-action, and the rule's shared cell. Only the owning
/// shard writes it, with relaxed loads and stores (no read-modify-write).
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct HotRow {
    pub(crate) accepted: AtomicU64,
    pub(crate) rejected: AtomicU64,
    /// Rate: the GCRA slot of the next leased token. Percent: the gate's accumulator.
    pub(crate) state: AtomicU64,
    /// Rate: tokens left of the current lease.
    pub(crate) tokens: AtomicU32,
    pub(crate) alt: Alt,
    pub(crate) limit: RowLimit,
    pub(crate) cell: Arc<CellRef>,
}

// A matched request touches one line of the table (loom's atomics are larger).
#[cfg(not(loadctl_loom))]
const _: () = assert!(std::mem::size_of::<HotRow>() == 64);

impl HotRow {
    /// A fresh row for `rule` (limiter state empty, counters from `stats`).
    fn new(rule: &SnapshotRule, alt: Alt, stats: &RuleStats) -> Self {
        let (limit, state) = match rule.limit {
            LimitParams::Rate {
                interval_ns: Some(interval_ns),
                tolerance_ns,
                lease,
                ..
            } => (
                RowLimit::Rate {
                    interval_ns,
                    tolerance_ns,
                    lease,
                },
                0,
            ),
            LimitParams::Rate {
                interval_ns: None, ..
            } => (RowLimit::Closed, 0),
            LimitParams::Percent(p) => (
                RowLimit::Percent {
                    step: crate::limit::percent_step(p),
                },
                0,
            ),
            LimitParams::Window { .. } => (RowLimit::Window { key: rule.key }, 0),
        };
        Self {
            accepted: AtomicU64::new(stats.accepted),
            rejected: AtomicU64::new(stats.rejected),
            state: AtomicU64::new(state),
            tokens: AtomicU32::new(0),
            alt,
            limit,
            cell: Arc::clone(&rule.cell),
        }
    }

    /// Takes over `old`'s limiter state (the same rule in the previous snapshot).
    fn carry_state(&self, old: &HotRow) {
        let same_kind = matches!(
            (self.limit, old.limit),
            (RowLimit::Rate { .. }, RowLimit::Rate { .. })
                | (RowLimit::Percent { .. }, RowLimit::Percent { .. })
        );
        if same_kind {
            self.state
                .store(old.state.load(Ordering::Relaxed), Ordering::Relaxed);
            self.tokens
                .store(old.tokens.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// One rule's rarer counters on one shard (outside the hot row).
#[derive(Debug, Default)]
pub(crate) struct ColdCounters {
    pub(crate) redirected: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) redirect_refused: AtomicU64,
}

impl ColdCounters {
    fn from_stats(s: &RuleStats) -> Self {
        Self {
            redirected: AtomicU64::new(s.redirected),
            dropped: AtomicU64::new(s.dropped),
            redirect_refused: AtomicU64::new(s.redirect_refused),
        }
    }
}

impl RuleStats {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &RuleStats) {
        self.matched += other.matched;
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.redirected += other.redirected;
        self.dropped += other.dropped;
        self.redirect_refused += other.redirect_refused;
    }
}

/// A shard's rows for the rules of one snapshot.
#[derive(Debug)]
pub(crate) struct CounterTable {
    /// The snapshot the rows belong to (rule keys and source names come from it).
    snapshot: Arc<Snapshot>,
    pub(crate) rows: Vec<HotRow>,
    pub(crate) cold: Vec<ColdCounters>,
}

impl CounterTable {
    /// A table for `next`; with `prev` (the old table, where each new rule was in it, and the
    /// shard), rows of kept rules carry their counters and limiter state over and rows of
    /// removed rules are folded into the shard's per-source totals.
    pub(crate) fn for_snapshot(
        next: &Arc<Snapshot>,
        prev: Option<(&Arc<CounterTable>, &[u32], &Arc<ShardCounters>)>,
    ) -> Self {
        let snapshot = Arc::clone(next);
        let policy = next.policy().rules();
        let fresh = |i: usize, stats: &RuleStats| {
            let alt = match (policy.get(i).map(|r| r.alt_action()), policy.get(i)) {
                (Some(AltAction::Drop), _) => Alt::Drop,
                (Some(AltAction::Redirect(_)), Some(r)) if r.redirect_refused() => {
                    Alt::RedirectRefused
                }
                (Some(AltAction::Redirect(_)), _) => Alt::Redirect,
                _ => Alt::Reject,
            };
            HotRow::new(&next.rules[i], alt, stats)
        };
        let Some((old, mapping, shard)) = prev else {
            let zero = RuleStats::default();
            let rows = (0..next.rules.len()).map(|i| fresh(i, &zero)).collect();
            let cold = next.rules.iter().map(|_| ColdCounters::default()).collect();
            return Self {
                snapshot,
                rows,
                cold,
            };
        };
        let mut kept = vec![false; old.rows.len()];
        let mut rows = Vec::with_capacity(mapping.len());
        let mut cold = Vec::with_capacity(mapping.len());
        for (i, &o) in mapping.iter().enumerate() {
            let o = o as usize;
            let stats = if o < old.rows.len() {
                kept[o] = true;
                old.read(o)
            } else {
                RuleStats::default()
            };
            let row = fresh(i, &stats);
            if let Some(prev_row) = old.rows.get(o) {
                row.carry_state(prev_row);
            }
            rows.push(row);
            cold.push(ColdCounters::from_stats(&stats));
        }
        let mut retired = lock(&shard.retired);
        for (i, keep) in kept.iter().enumerate() {
            if !keep {
                retired
                    .entry(old.snapshot.source_name(i))
                    .or_default()
                    .add(&old.read(i));
            }
        }
        Self {
            snapshot,
            rows,
            cold,
        }
    }

    /// The counters of row `i` (zero past the end). `matched` is the sum of the outcomes:
    /// every matched request ends in exactly one of accepted, rejected, redirected, dropped.
    pub(crate) fn read(&self, i: usize) -> RuleStats {
        let (Some(h), Some(c)) = (self.rows.get(i), self.cold.get(i)) else {
            return RuleStats::default();
        };
        let s = RuleStats {
            matched: 0,
            accepted: h.accepted.load(Ordering::Relaxed),
            rejected: h.rejected.load(Ordering::Relaxed),
            redirected: c.redirected.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            redirect_refused: c.redirect_refused.load(Ordering::Relaxed),
        };
        RuleStats {
            matched: s.accepted + s.rejected + s.redirected + s.dropped,
            ..s
        }
    }

    /// (rule key, source name, counters) of each row.
    fn stats_rows(&self) -> impl Iterator<Item = (u64, Name, RuleStats)> + '_ {
        (0..self.rows.len()).map(|i| {
            (
                self.snapshot.key(i),
                self.snapshot.source_name(i),
                self.read(i),
            )
        })
    }
}

/// What a shard shares with readers. Aligned to two cache lines so that two shards' counters
/// never share a line (the adjacent-line prefetcher pulls pairs).
#[derive(Debug)]
#[repr(align(128))]
pub(crate) struct ShardCounters {
    pub(crate) table: ArcSwap<CounterTable>,
    /// Exempt requests per [`ExemptReason::index`].
    pub(crate) exempt: [AtomicU64; 3],
    pub(crate) unmatched: AtomicU64,
    /// Of `unmatched`: see [`EngineStats::unread_numbers`].
    pub(crate) unread_numbers: AtomicU64,
    /// Counters of rules that left the snapshot, by source.
    retired: Mutex<HashMap<Name, RuleStats>>,
}

impl ShardCounters {
    pub(crate) fn new(table: Arc<CounterTable>) -> Self {
        Self {
            table: ArcSwap::new(table),
            exempt: std::array::from_fn(|_| AtomicU64::new(0)),
            unmatched: AtomicU64::new(0),
            unread_numbers: AtomicU64::new(0),
            retired: Mutex::new(HashMap::new()),
        }
    }

    /// Adds one to a counter only this shard writes: a plain load and store, no locked
    /// instruction.
    #[inline]
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

/// Attached shards, and what shards that are gone counted.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(crate) shards: Vec<Arc<ShardCounters>>,
    detached_rules: HashMap<u64, (Name, RuleStats)>,
    detached_sources: HashMap<Name, RuleStats>,
    detached_exempt: ExemptStats,
    detached_unmatched: u64,
    detached_unread_numbers: u64,
}

/// Folds a dropped shard's counters into the engine's totals.
pub(crate) fn detach(inner: &Inner, counters: &Arc<ShardCounters>, _snapshot: &Snapshot) {
    let mut reg = lock(&inner.registry);
    reg.shards.retain(|c| !Arc::ptr_eq(c, counters));
    // Deliberately broken for the loom can-fail check (loom-tests/tests/mutants.rs): the
    // registry is let go between forgetting the shard and folding in its counters, so a
    // reading in between misses them.
    #[cfg(loadctl_loom_mutant)]
    let mut reg = {
        drop(reg);
        lock(&inner.registry)
    };
    let table = counters.table.load_full();
    for (k, src, c) in table.stats_rows() {
        reg.detached_rules
            .entry(k)
            .or_insert_with(|| (Name::clone(&src), RuleStats::default()))
            .1
            .add(&c);
    }
    for (src, stats) in lock(&counters.retired).iter() {
        reg.detached_sources
            .entry(Name::clone(src))
            .or_default()
            .add(stats);
    }
    reg.detached_exempt.add_counters(&counters.exempt);
    reg.detached_unmatched += counters.unmatched.load(Ordering::Relaxed);
    reg.detached_unread_numbers += counters.unread_numbers.load(Ordering::Relaxed);
}

/// One rule of the current snapshot, summed over shards.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleRow {
    /// The source (notifier) it came from.
    pub source: String,
    /// The rule id.
    pub rule: String,
    /// Its limit.
    pub limit: Limit,
    /// Counters.
    pub stats: RuleStats,
}

/// One source, all its rules (current and removed) summed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceRow {
    /// The source name.
    pub source: String,
    /// Counters.
    pub stats: RuleStats,
}

/// A reading of every counter.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineStats {
    /// The snapshot generation the rows describe.
    pub generation: u64,
    /// Per rule of the current snapshot, in the order rules are tried.
    pub rules: Vec<RuleRow>,
    /// Per source, including rules that have since been removed.
    pub sources: Vec<SourceRow>,
    /// Requests let through without trying any rule, all reasons together (the sum of
    /// [`EngineStats::exempt_by_reason`]).
    pub exempt: u64,
    /// The exempt requests per reason.
    pub exempt_by_reason: ExemptStats,
    /// Requests no rule matched.
    pub unmatched: u64,
    /// Of `unmatched`, while the policy compares telephone numbers: requests with a SIP/SIPS
    /// URI, in a field some rule looks at, whose user part looks like a number (digits and
    /// visual separators after an optional `+`) that the engine's
    /// [`crate::uri::SipUserNumbers`] setting did not read as one — calls a `many-tel` rule may
    /// have been meant for (`loadctl explain` names the setting that would match them).
    pub unread_numbers: u64,
}

pub(crate) fn collect(inner: &Inner) -> EngineStats {
    let snapshot = inner.snapshot.load_full();
    let reg = lock(&inner.registry);
    let index: HashMap<u64, usize> = snapshot
        .rules
        .iter()
        .enumerate()
        .map(|(i, r)| (r.key, i))
        .collect();
    let mut rows = vec![RuleStats::default(); snapshot.rules.len()];
    let mut extra: HashMap<Name, RuleStats> = HashMap::new();
    let mut exempt = reg.detached_exempt;
    let mut unmatched = reg.detached_unmatched;
    let mut unread_numbers = reg.detached_unread_numbers;
    let mut add = |key: u64, src: &Name, stats: &RuleStats| match index.get(&key) {
        Some(&i) => rows[i].add(stats),
        None => extra.entry(Name::clone(src)).or_default().add(stats),
    };
    for shard in &reg.shards {
        let table = shard.table.load_full();
        for (k, src, c) in table.stats_rows() {
            add(k, &src, &c);
        }
        exempt.add_counters(&shard.exempt);
        unmatched += shard.unmatched.load(Ordering::Relaxed);
        unread_numbers += shard.unread_numbers.load(Ordering::Relaxed);
    }
    for (k, (src, stats)) in &reg.detached_rules {
        add(*k, src, stats);
    }
    for shard in &reg.shards {
        for (src, stats) in lock(&shard.retired).iter() {
            extra.entry(Name::clone(src)).or_default().add(stats);
        }
    }
    for (src, stats) in &reg.detached_sources {
        extra.entry(Name::clone(src)).or_default().add(stats);
    }
    let rules: Vec<RuleRow> = snapshot
        .policy
        .rules()
        .iter()
        .zip(&rows)
        .enumerate()
        .map(|(i, (r, stats))| RuleRow {
            source: snapshot.source_of(i).to_owned(),
            rule: r.id().to_string(),
            limit: *r.limit(),
            stats: *stats,
        })
        .collect();
    let mut sources: Vec<SourceRow> = Vec::new();
    let mut push =
        |name: &str, stats: &RuleStats| match sources.iter_mut().find(|s| s.source == name) {
            Some(s) => s.stats.add(stats),
            None => sources.push(SourceRow {
                source: name.to_owned(),
                stats: *stats,
            }),
        };
    for row in &rules {
        push(&row.source, &row.stats);
    }
    let mut rest: Vec<(&Name, &RuleStats)> = extra.iter().collect();
    rest.sort_by(|a, b| a.0.cmp(b.0));
    for (src, stats) in rest {
        push(src, stats);
    }
    EngineStats {
        generation: snapshot.generation(),
        rules,
        sources,
        exempt: exempt.total(),
        exempt_by_reason: exempt,
        unmatched,
        unread_numbers,
    }
}

/// Exempt requests per [`ExemptReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExemptStats {
    /// RFC 7200 §5.1: ACK, BYE, CANCEL, in-dialog, load-control SUBSCRIBE.
    pub not_filtered: u64,
    /// Emergency calls (RFC 5031 sos URNs).
    pub emergency: u64,
    /// Exempt Resource-Priority namespaces (RFC 4412).
    pub resource_priority: u64,
}

impl ExemptStats {
    /// The count for `reason`.
    pub fn get(&self, reason: ExemptReason) -> u64 {
        match reason {
            ExemptReason::NotFiltered => self.not_filtered,
            ExemptReason::Emergency => self.emergency,
            ExemptReason::ResourcePriority => self.resource_priority,
        }
    }

    /// All reasons together.
    pub fn total(&self) -> u64 {
        self.not_filtered + self.emergency + self.resource_priority
    }

    fn add_counters(&mut self, counters: &[AtomicU64; 3]) {
        let c = |r: ExemptReason| counters[r.index()].load(Ordering::Relaxed);
        self.not_filtered += c(ExemptReason::NotFiltered);
        self.emergency += c(ExemptReason::Emergency);
        self.resource_priority += c(ExemptReason::ResourcePriority);
    }
}

impl EngineStats {
    /// Every request classified: exempt + unmatched + matched by some rule.
    pub fn total(&self) -> u64 {
        self.exempt + self.unmatched + self.sources.iter().map(|s| s.stats.matched).sum::<u64>()
    }

    /// The counters in the Prometheus text exposition format (version 0.0.4).
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        type Counter = (&'static str, &'static str, fn(&RuleStats) -> u64);
        let counters: [Counter; 6] = [
            ("matched", "Requests the rule matched.", |s| s.matched),
            ("accepted", "Matched requests admitted.", |s| s.accepted),
            ("rejected", "Matched requests answered 503.", |s| s.rejected),
            ("redirected", "Matched requests redirected.", |s| {
                s.redirected
            }),
            ("dropped", "Matched requests dropped.", |s| s.dropped),
            (
                "redirect_refused",
                "Redirects turned into 503 by the allow-list.",
                |s| s.redirect_refused,
            ),
        ];
        for (name, help, get) in counters {
            let _ = writeln!(out, "# HELP loadctl_rule_{name}_total {help}");
            let _ = writeln!(out, "# TYPE loadctl_rule_{name}_total counter");
            for r in &self.rules {
                let _ = writeln!(
                    out,
                    "loadctl_rule_{name}_total{{source=\"{}\",rule=\"{}\"}} {}",
                    escape_label(&r.source),
                    escape_label(&r.rule),
                    get(&r.stats)
                );
            }
            let _ = writeln!(
                out,
                "# HELP loadctl_source_{name}_total {help} Per source, removed rules included."
            );
            let _ = writeln!(out, "# TYPE loadctl_source_{name}_total counter");
            for s in &self.sources {
                let _ = writeln!(
                    out,
                    "loadctl_source_{name}_total{{source=\"{}\"}} {}",
                    escape_label(&s.source),
                    get(&s.stats)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP loadctl_exempt_total Requests let through without trying any rule, every reason (ACK, BYE, CANCEL, in-dialog, load-control SUBSCRIBE, emergency, Resource-Priority)."
        );
        let _ = writeln!(out, "# TYPE loadctl_exempt_total counter");
        let _ = writeln!(out, "loadctl_exempt_total {}", self.exempt);
        let _ = writeln!(
            out,
            "# HELP loadctl_exempt_reason_total Requests let through without trying any rule, per reason (not-filtered: RFC 7200 §5.1; emergency: sos URN; resource-priority: an exempt namespace)."
        );
        let _ = writeln!(out, "# TYPE loadctl_exempt_reason_total counter");
        for reason in ExemptReason::ALL {
            let _ = writeln!(
                out,
                "loadctl_exempt_reason_total{{reason=\"{}\"}} {}",
                reason.as_str(),
                self.exempt_by_reason.get(reason)
            );
        }
        let _ = writeln!(
            out,
            "# HELP loadctl_unmatched_total Requests no rule matched."
        );
        let _ = writeln!(out, "# TYPE loadctl_unmatched_total counter");
        let _ = writeln!(out, "loadctl_unmatched_total {}", self.unmatched);
        let _ = writeln!(
            out,
            "# HELP loadctl_unread_numbers_total Unmatched requests whose SIP user part looks like a telephone number the sip-user-numbers setting did not read as one, while the policy compares numbers."
        );
        let _ = writeln!(out, "# TYPE loadctl_unread_numbers_total counter");
        let _ = writeln!(out, "loadctl_unread_numbers_total {}", self.unread_numbers);
        let _ = writeln!(
            out,
            "# HELP loadctl_policy_generation Generation of the published policy snapshot."
        );
        let _ = writeln!(out, "# TYPE loadctl_policy_generation gauge");
        let _ = writeln!(out, "loadctl_policy_generation {}", self.generation);
        let _ = writeln!(
            out,
            "# HELP loadctl_policy_rules Rules in the published policy."
        );
        let _ = writeln!(out, "# TYPE loadctl_policy_rules gauge");
        let _ = writeln!(out, "loadctl_policy_rules {}", self.rules.len());
        out
    }
}

/// Escapes a Prometheus label value: backslash, double quote and newline.
fn escape_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}
