//! The multi-core runtime: an [`Engine`] that publishes policy snapshots, and the [`Shard`]s
//! that classify on each worker thread.
//!
//! # Seams
//! - Writers (`publish`, `apply`, `withdraw`) serialise on one mutex, merge the sources'
//!   policies, compile a new [`Snapshot`] and swap it in (RCU, arc-swap). They never block
//!   readers; an error leaves the published snapshot untouched.
//! - A [`Shard`] caches the snapshot and checks one shared generation counter per request (a
//!   read of a line written once per publish). When it changes, the shard re-maps its per-rule
//!   state by rule *key* — source, rule id and action — so a rule kept across publishes keeps
//!   its limiter state and counters on every shard.
//! - Limits are global: each rule has one shared [`RuleCell`] (carried across publishes by
//!   key) from which shards lease tokens and window slots in batches.
//!
//! # Several sources
//! Policies from different notifiers are kept apart and merged into one snapshot. **Rules are
//! tried source by source, in the order the sources were first published, and within a source
//! in document order**; the first match wins across the whole list. A rule without a
//! `target-sip-entity` applies whatever the request's target (RFC 7200 §5.3.3), unless its
//! [`Source`] was explicitly [scoped](Source::scoped) to a target. Each source records its
//! [`Origin`]: a notifier's redirect targets are checked against the notifier's own domain and
//! the allow-list (RFC 7200 §7, [`CompileConfig`](crate::compile::CompileConfig)); the operator's local policies are trusted.
//! Withdrawing a source removes exactly its rules.

mod cell;
mod config;
mod network;
mod params;
mod request;
mod shard;
mod snapshot;
mod source;
mod stats;
mod table;

use cell::CellRef;
pub use cell::RuleCell;
pub use config::EngineConfig;
pub use network::Network;
pub(crate) use params::{LimitParams, lease_ahead_ns};
pub use request::*;
pub use shard::Shard;
pub(crate) use snapshot::{NOT_CARRIED, SnapshotRule, rule_key};
pub use snapshot::{PublishedRule, Snapshot};
pub use source::{Origin, Source};
pub use stats::{EngineStats, ExemptStats, RuleRow, SourceRow};
use table::CellInit;
pub use table::{CellTable, CellTableError};

use crate::compile::{FxHashMap, SourcedRule, compile_after, compile_sources};
use crate::policy::{self, MergeError, Ruleset, State};
use crate::sync::{Arc, ArcSwap, AtomicU64, Mutex, Name, Ordering, StdArc, lock};

/// Why a policy change was refused (nothing was changed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// `publish` takes full documents; use `apply` for partial ones.
    NotFull,
    /// The partial document does not apply to the source's current policy.
    Merge(MergeError),
    /// All sources together would exceed [`Limits::max_rules`](crate::policy::Limits::max_rules).
    TooManyRules {
        /// The limit.
        max: usize,
    },
    /// `withdraw` named a source that has no policy.
    UnknownSource(String),
    /// The engine's shared [`CellTable`] could not give the new rules their cells.
    CellTable(CellTableError),
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PublishError::NotFull => {
                f.write_str("publish needs a full document; use apply for a partial one")
            }
            PublishError::Merge(e) => write!(f, "{e}"),
            PublishError::TooManyRules { max } => {
                write!(f, "all sources together would have more than {max} rules")
            }
            PublishError::UnknownSource(s) => write!(f, "no policy from source {s:?}"),
            PublishError::CellTable(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PublishError {}

impl From<MergeError> for PublishError {
    fn from(e: MergeError) -> Self {
        PublishError::Merge(e)
    }
}

struct SourceState {
    source: Source,
    policy: Ruleset,
}

struct Writer {
    sources: Vec<SourceState>,
    /// What a commit changes besides the snapshot.
    state: WriterCells,
}

/// The writer's cells and the snapshots it drops itself ([`Engine::commit`] changes them).
#[derive(Default)]
struct WriterCells {
    /// Snapshots replaced but perhaps still held by a shard. Kept here so that the last
    /// reference is dropped by a writer, never by a worker thread in the middle of classifying
    /// (dropping a 10,000-rule policy takes milliseconds).
    graveyard: Vec<Arc<Snapshot>>,
    /// The cell and snapshot index of every rule key in the published snapshot.
    cells: FxHashMap<u64, (Arc<CellRef>, u32)>,
    /// Shared-table cells no longer in the published snapshot but perhaps still held by an old
    /// snapshot or a shard's outstanding window tickets: kept so that the writer, not a worker,
    /// releases them (which takes the table's lock).
    released: Vec<Arc<CellRef>>,
    /// Cells of rate rules that left the published snapshot, by rule key (at most
    /// [`RESTING_MAX`]; own cells only, shared ones rest in their table): the same rule published again
    /// continues its limiter instead of starting with a full burst. A notifier's `terminated` NOTIFY withdraws a policy (RFC 7200
    /// §4.8) and the re-subscription's first NOTIFY brings the same rules back moments later;
    /// with fresh cells every such round trip admitted up to r·τ + 1 more than the rule allows
    /// in that second.
    /// With the generation that withdrew it: the oldest go first when there are too many (a
    /// notifier that changes rates often parks a cell per old rate).
    resting: FxHashMap<u64, (Arc<CellRef>, u64)>,
}

/// How many cells of withdrawn rate rules the writer keeps for their rules' return.
const RESTING_MAX: usize = 4096;

/// A value alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

pub(crate) struct Inner {
    pub(crate) config: EngineConfig,
    pub(crate) snapshot: ArcSwap<Snapshot>,
    /// Read by every shard on every request; on a line of its own.
    pub(crate) generation: Padded<AtomicU64>,
    writer: Mutex<Writer>,
    /// The one cell every percent rule points at (they keep no shared state).
    unused_cell: Arc<CellRef>,
    /// Where rate and window rules get their cells when several engines share them.
    cell_table: Option<CellTable>,
    pub(crate) registry: Mutex<stats::Registry>,
    /// Cells of window rules that left the published snapshot, by rule key, with the window
    /// size: tickets still out release into them on any shard (a shard that finds a ticket's
    /// key in no snapshot looks here). Filled and pruned by the writer in `commit`: an entry
    /// goes once no slot is taken and no snapshot a shard may hold still has the cell; a rule
    /// published again with the same key takes its cell back.
    pub(crate) retired_windows: Mutex<FxHashMap<u64, (Arc<CellRef>, u32)>>,
}

/// The engine: owns the published policy and hands out [`Shard`]s. Cheap to clone; `Send` and
/// `Sync`.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("generation", &self.generation())
            .finish()
    }
}

impl Engine {
    /// An engine with no policy (every request is accepted).
    pub fn new(config: EngineConfig) -> Self {
        Self::build(config, None)
    }

    /// An engine whose rate and window rules take their cells from a shared [`CellTable`]:
    /// engines in several processes (or several engines in one) that share the table and
    /// publish the same policy enforce one global limit per rule. Attach the table after any
    /// `fork` (see [`CellTable`]). Engines sharing a table must read one clock: the default
    /// [`SystemClock`](crate::clock::SystemClock) does (monotonic time since boot).
    pub fn with_cell_table(config: EngineConfig, table: CellTable) -> Self {
        Self::build(config, Some(table))
    }

    fn build(mut config: EngineConfig, cell_table: Option<CellTable>) -> Self {
        // Normalised once here, so the per-request exemption check compares without allocating.
        config.exemptions = config.exemptions.normalized();
        let empty = Snapshot {
            generation: 0,
            policy: compile_sources(0, std::iter::empty(), &config.compile),
            rules: Vec::new(),
            previous: Vec::new(),
            sources: Vec::new(),
            source_versions: Vec::new(),
        };
        Self {
            inner: Arc::new(Inner {
                config,
                snapshot: ArcSwap::new(Arc::new(empty)),
                generation: Padded(AtomicU64::new(0)),
                writer: Mutex::new(Writer {
                    sources: Vec::new(),
                    state: WriterCells::default(),
                }),
                unused_cell: Arc::new(CellRef::Own(RuleCell::unused())),
                cell_table,
                registry: Mutex::new(stats::Registry::default()),
                retired_windows: Mutex::new(FxHashMap::default()),
            }),
        }
    }

    /// An engine enforcing one full ruleset (published as source `local`).
    pub fn from_ruleset(ruleset: Ruleset, config: EngineConfig) -> Result<Self, PublishError> {
        let engine = Self::new(config);
        engine.publish(&Source::local("local"), ruleset)?;
        Ok(engine)
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The generation of the published snapshot.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// The published snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.snapshot.load_full()
    }

    /// A shard for the calling worker thread (one per thread; it is `Send`, not `Sync`).
    pub fn attach(&self) -> Shard {
        Shard::new(Arc::clone(&self.inner))
    }

    /// Like [`Engine::attach`], and pins the calling thread to core `core` (an index into the
    /// cores this process may use). Fails when the core does not exist or pinning is refused.
    pub fn attach_pinned(&self, core: usize) -> Result<Shard, PinError> {
        let cores = core_affinity::get_core_ids().ok_or(PinError { core })?;
        let id = cores.get(core).copied().ok_or(PinError { core })?;
        if !core_affinity::set_for_current(id) {
            return Err(PinError { core });
        }
        Ok(self.attach())
    }

    /// Replaces `source`'s policy with a full document.
    pub fn publish(&self, source: &Source, ruleset: Ruleset) -> Result<u64, PublishError> {
        if ruleset.state() != State::Full {
            return Err(PublishError::NotFull);
        }
        self.apply(source, ruleset)
    }

    /// Applies a document from `source` the way a NOTIFY body is applied: a full one replaces
    /// the source's policy, a partial one is merged into it by rule id (and must carry the
    /// next version). Returns the new generation.
    pub fn apply(&self, source: &Source, document: Ruleset) -> Result<u64, PublishError> {
        let mut guard = lock(&self.inner.writer);
        let w = &mut *guard;
        let current = w.sources.iter().position(|s| s.source.name == source.name);
        let base = current.map(|i| &w.sources[i].policy);
        let merged = policy::merge(base, document, &self.inner.config.limits)?;
        let mut next: Vec<(Source, &Ruleset)> = w
            .sources
            .iter()
            .map(|s| (s.source.clone(), &s.policy))
            .collect();
        match current {
            Some(i) => next[i] = (source.clone(), &merged),
            None => next.push((source.clone(), &merged)),
        }
        let generation = self.commit(&mut w.state, &next)?;
        drop(next);
        match current {
            Some(i) => {
                w.sources[i] = SourceState {
                    source: source.clone(),
                    policy: merged,
                }
            }
            None => w.sources.push(SourceState {
                source: source.clone(),
                policy: merged,
            }),
        }
        Ok(generation)
    }

    /// Removes every rule `source` published (its subscription ended). A source is known by its
    /// name: pass the [`Source`] that published (as [`Engine::apply`] takes it) or its name.
    pub fn withdraw(&self, source: impl AsRef<str>) -> Result<u64, PublishError> {
        let source = source.as_ref();
        let mut guard = lock(&self.inner.writer);
        let w = &mut *guard;
        let i = w
            .sources
            .iter()
            .position(|s| s.source.name == source)
            .ok_or_else(|| PublishError::UnknownSource(source.to_owned()))?;
        let next: Vec<(Source, &Ruleset)> = w
            .sources
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, s)| (s.source.clone(), &s.policy))
            .collect();
        let generation = self.commit(&mut w.state, &next)?;
        drop(next);
        w.sources.remove(i);
        Ok(generation)
    }

    /// The current policy of `source` (a [`Source`] or its name), if it has one.
    pub fn source_policy(&self, source: impl AsRef<str>) -> Option<Ruleset> {
        let source = source.as_ref();
        lock(&self.inner.writer)
            .sources
            .iter()
            .find(|s| s.source.name == source)
            .map(|s| s.policy.clone())
    }

    /// Builds and publishes the snapshot for `sources`; on error nothing changes.
    fn commit(
        &self,
        state: &mut WriterCells,
        sources: &[(Source, &Ruleset)],
    ) -> Result<u64, PublishError> {
        let WriterCells {
            graveyard,
            cells,
            released,
            resting,
        } = state;
        let config = &self.inner.config;
        let total: usize = sources.iter().map(|(_, r)| r.len()).sum();
        if total > config.limits.max_rules {
            return Err(PublishError::TooManyRules {
                max: config.limits.max_rules,
            });
        }
        let generation = self.inner.generation.load(Ordering::Acquire) + 1;
        let mut retired = lock(&self.inner.retired_windows);
        let mut rules = Vec::with_capacity(total);
        let mut meta = Vec::with_capacity(total);
        let mut previous = Vec::with_capacity(total);
        let mut next_cells = FxHashMap::with_capacity_and_hasher(total, Default::default());
        for (si, (source, ruleset)) in sources.iter().enumerate() {
            for rule in ruleset.rules().unwrap_or(&[]) {
                let key = rule_key(&source.name, rule);
                let limit = LimitParams::new(&rule.accept.limit, config);
                // Deliberately broken for the loom can-fail check (loom-tests/tests/mutants.rs):
                // no rule keeps its cell across a publish.
                #[cfg(loadctl_loom_mutant)]
                let cells = &FxHashMap::<u64, (Arc<CellRef>, u32)>::default();
                // On an error the cells claimed so far drop with `next_cells`: nothing changed.
                // A window rule that comes back takes back the cell its tickets release into, a
                // rate rule the cell that holds its limiter's state.
                let kept = cells
                    .get(&key)
                    .map(|(cell, i)| (cell, *i))
                    .or_else(|| retired.get(&key).map(|(cell, _)| (cell, NOT_CARRIED)))
                    .or_else(|| resting.get(&key).map(|(cell, _)| (cell, NOT_CARRIED)));
                let (cell, before) = match kept {
                    Some((cell, i)) => (Arc::clone(cell), i),
                    None => (
                        limit
                            .new_cell(key, &self.inner.unused_cell, self.inner.cell_table)
                            .map_err(PublishError::CellTable)?,
                        NOT_CARRIED,
                    ),
                };
                next_cells.insert(key, (Arc::clone(&cell), meta.len() as u32));
                previous.push(before);
                meta.push(SnapshotRule { key, cell, limit });
                rules.push(SourcedRule {
                    source: si as u32,
                    rule: StdArc::clone(rule),
                    scope: source.scope.clone(),
                    notifier: source.notifier_uri().cloned(),
                });
            }
        }
        let old = self.inner.snapshot.load_full();
        let policy = compile_after(generation as u32, rules, &config.compile, Some(&old.policy));
        let snapshot = Snapshot {
            generation,
            policy,
            rules: meta,
            previous,
            sources: sources
                .iter()
                .map(|(s, _)| Name::from(s.name.as_str()))
                .collect(),
            source_versions: sources.iter().map(|(_, r)| r.version()).collect(),
        };
        let old_cells = std::mem::replace(cells, next_cells);
        retired.retain(|key, _| !cells.contains_key(key));
        resting.retain(|key, _| !cells.contains_key(key));
        for (key, (cell, i)) in old_cells {
            if cells.contains_key(&key) {
                continue;
            }
            match old.rules.get(i as usize).map(|r| r.limit) {
                Some(LimitParams::Window { size }) => {
                    retired.insert(key, (cell, size));
                }
                // Not a shared-table cell: it would hold a slot of a table sized for the rules
                // in force. A shared cell rests in the table instead (its slot keeps its key
                // and state until another rule needs it, see `table.rs`).
                Some(LimitParams::Rate { .. }) if !cell.is_shared() => {
                    resting.insert(key, (cell, generation));
                }
                _ if cell.is_shared() => released.push(cell),
                _ => {}
            }
        }
        if resting.len() > RESTING_MAX {
            let mut by_age: Vec<(u64, u64)> = resting.iter().map(|(k, (_, g))| (*g, *k)).collect();
            by_age.sort_unstable();
            for (_, key) in by_age.iter().take(resting.len() - RESTING_MAX) {
                resting.remove(key);
            }
        }
        self.inner.snapshot.store(Arc::new(snapshot));
        // Deliberately broken for the loom can-fail check (loom-tests/tests/mutants.rs): the
        // new generation is never announced, so shards keep the snapshot they have.
        #[cfg(not(loadctl_loom_mutant))]
        self.inner.generation.store(generation, Ordering::Release);
        graveyard.retain(|s| Arc::strong_count(s) > 1);
        released.retain(|c| Arc::strong_count(c) > 1);
        graveyard.push(old);
        // Dropped here, by the writer (a shared cell's release takes the table's lock): no
        // slot taken, and no snapshot other than the retired entry holds the cell any more.
        retired
            .retain(|_, (cell, size)| cell.slots_in_use(*size) > 0 || Arc::strong_count(cell) > 1);
        Ok(generation)
    }

    /// Counters summed over every shard (attached or gone), per rule of the current snapshot
    /// and per source. Shards write their own counters without sharing, so a reading may be a
    /// few requests behind a busy shard.
    pub fn stats(&self) -> EngineStats {
        stats::collect(&self.inner)
    }
}

/// Pinning a shard's thread failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinError {
    /// The core asked for.
    pub core: usize,
}

impl std::fmt::Display for PinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot pin this thread to core {}", self.core)
    }
}

impl std::error::Error for PinError {}

#[cfg(test)]
mod tests;
