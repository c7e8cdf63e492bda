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
//! the allow-list (RFC 7200 §7, [`CompileConfig`]); the operator's local policies are trusted.
//! Withdrawing a source removes exactly its rules.

mod cell;
mod request;
mod shard;
mod stats;
mod table;

use std::time::Duration;

use cell::CellRef;
pub use cell::RuleCell;
pub use request::*;
pub use shard::Shard;
pub use stats::{EngineStats, ExemptStats, RuleRow, SourceRow};
use table::CellInit;
pub use table::{CellTable, CellTableError};

use crate::clock::{Clock, SystemClock};
use crate::compile::{
    CompileConfig, CompiledPolicy, FxHashMap, SourcedRule, compile_after, compile_sources,
};
use crate::policy::{self, Limit, Limits, MergeError, Rule, Ruleset, State, Uri};
use crate::sync::{Arc, ArcSwap, AtomicU64, Mutex, Name, Ordering, StdArc, lock};

/// How an [`Engine`] behaves. Start from `EngineConfig::default()` and change what you need
/// with the `with_*` methods (or the fields); new settings may be added, so the struct is
/// `#[non_exhaustive]`:
///
/// ```
/// use std::time::Duration;
/// use loadctl::{Engine, EngineConfig};
///
/// let engine = Engine::new(
///     EngineConfig::default()
///         .with_shards(4)
///         .with_burst_tolerance(Duration::from_millis(50)),
/// );
/// assert_eq!(engine.config().shards, 4);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EngineConfig {
    /// How many shards (worker threads) are expected. Default: the number of cores.
    pub shards: usize,
    /// Where shards read the time when a request carries none.
    pub clock: StdArc<dyn Clock>,
    /// Redirect allow-list and other compile options.
    pub compile: CompileConfig,
    /// Requests let through before any rule is tried (emergency, priority).
    pub exemptions: Exemptions,
    /// Input limits for documents and merged policies.
    pub limits: Limits,
    /// GCRA burst tolerance τ of rate rules: a request may come up to τ ahead of its slot, at
    /// most max(1, ⌈r·τ⌉) pass at the same instant (see [`crate::limit`]).
    pub burst_tolerance: Duration,
    /// How far ahead a shard may lease rate tokens, which sizes leases (⌊r·period⌋ tokens, at
    /// least 1): one shared write buys that many admissions. Tokens a shard leased and then
    /// had no traffic for are lost to the others, at most ⌊r·period⌋ each time load moves
    /// away from a shard, so short periods keep the aggregate exact; long ones mean fewer
    /// shared writes. Default 0.5 ms.
    pub lease_period: Duration,
}

impl EngineConfig {
    /// With [`EngineConfig::shards`] set.
    pub fn with_shards(mut self, shards: usize) -> Self {
        self.shards = shards;
        self
    }

    /// With [`EngineConfig::clock`] set.
    pub fn with_clock(mut self, clock: StdArc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// With [`EngineConfig::compile`] set.
    pub fn with_compile(mut self, compile: CompileConfig) -> Self {
        self.compile = compile;
        self
    }

    /// With [`EngineConfig::exemptions`] set.
    pub fn with_exemptions(mut self, exemptions: Exemptions) -> Self {
        self.exemptions = exemptions;
        self
    }

    /// With [`EngineConfig::limits`] set.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// With [`EngineConfig::burst_tolerance`] set.
    pub fn with_burst_tolerance(mut self, burst_tolerance: Duration) -> Self {
        self.burst_tolerance = burst_tolerance;
        self
    }

    /// With [`EngineConfig::lease_period`] set.
    pub fn with_lease_period(mut self, lease_period: Duration) -> Self {
        self.lease_period = lease_period;
        self
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            shards: std::thread::available_parallelism().map_or(1, usize::from),
            clock: StdArc::new(SystemClock::default()),
            compile: CompileConfig::default(),
            exemptions: Exemptions::default(),
            limits: Limits::default(),
            burst_tolerance: Duration::from_millis(100),
            lease_period: Duration::from_micros(500),
        }
    }
}

/// Where a source's policy came from: who wrote it, which decides how far it is trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Loaded by the operator (a policy file, an RPC or API publish): trusted, its redirect
    /// targets are never refused.
    Local,
    /// Received from a notifier with this URI (RFC 7200 §4): its redirect targets must lie in
    /// the notifier's own domain or in the operator's allow-list
    /// ([`CompileConfig::redirect_allow`], RFC 7200 §7).
    Notifier(Uri),
}

/// Who a policy came from (its [`Origin`]), under which name, and which target entity its rules
/// without `target-sip-entity` are scoped to.
///
/// The origin and the scope are separate: by default a rule without `target-sip-entity` applies
/// **whatever the request's target** (RFC 7200 §5.3.3 only lets a subscriber *record* the
/// originator as the target, a MAY); [`Source::scoped`] opts into scoping, which only makes
/// sense where every caller passes the request's target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// A stable name (typically the notifier's URI, or "local").
    pub name: String,
    /// Who wrote the policy.
    pub origin: Origin,
    /// When set, rules without `target-sip-entity` only match requests whose target entity is
    /// this URI (and never requests without a target). `None`: they match whatever the target.
    pub scope: Option<Uri>,
}

impl AsRef<str> for Source {
    /// The source's name, which identifies it ([`Engine::withdraw`], [`Engine::source_policy`]).
    fn as_ref(&self) -> &str {
        &self.name
    }
}

impl Source {
    /// A policy the operator loaded (file, RPC, API): trusted, unscoped.
    pub fn local(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            origin: Origin::Local,
            scope: None,
        }
    }

    /// A notifier's policy, named by its URI: its redirect targets are checked against the
    /// notifier's own domain (RFC 7200 §7); its rules apply whatever the request's target.
    pub fn notifier(notifier: Uri) -> Self {
        Self {
            name: notifier.as_str().to_owned(),
            origin: Origin::Notifier(notifier),
            scope: None,
        }
    }

    /// This source with its rules without `target-sip-entity` scoped to `target` (RFC 7200
    /// §5.3.3: the subscriber MAY record the policy's originator as its target).
    pub fn scoped(mut self, target: Uri) -> Self {
        self.scope = Some(target);
        self
    }

    /// This source scoped to its notifier's URI (unchanged for a local source).
    pub fn scoped_to_notifier(self) -> Self {
        match &self.origin {
            Origin::Notifier(uri) => {
                let uri = uri.clone();
                self.scoped(uri)
            }
            Origin::Local => self,
        }
    }

    /// The notifier's URI when the policy came from one.
    pub fn notifier_uri(&self) -> Option<&Uri> {
        match &self.origin {
            Origin::Notifier(uri) => Some(uri),
            Origin::Local => None,
        }
    }
}

/// Why a policy change was refused (nothing was changed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// `publish` takes full documents; use `apply` for partial ones.
    NotFull,
    /// The partial document does not apply to the source's current policy.
    Merge(MergeError),
    /// All sources together would exceed [`Limits::max_rules`].
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
    fn new(limit: &Limit, config: &EngineConfig) -> Self {
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
    fn new_cell(
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

/// [`Snapshot::previous`] entry of a rule that was not in the previous snapshot.
pub(crate) const NOT_CARRIED: u32 = u32::MAX;

/// What a snapshot knows about each rule beyond the compiled matcher.
#[derive(Debug)]
pub(crate) struct SnapshotRule {
    pub(crate) key: u64,
    pub(crate) cell: Arc<CellRef>,
    pub(crate) limit: LimitParams,
}

/// One published state: the merged compiled policy plus per-rule keys and shared cells.
#[derive(Debug)]
pub struct Snapshot {
    generation: u64,
    policy: CompiledPolicy,
    rules: Vec<SnapshotRule>,
    /// For each rule, its index in the previous generation's snapshot ([`NOT_CARRIED`] when
    /// new), so shards that follow every publish re-map without hashing.
    pub(crate) previous: Vec<u32>,
    sources: Vec<Name>,
    /// The version of each source's policy, indexed like `sources`.
    source_versions: Vec<u32>,
}

/// One rule of a published [`Snapshot`], as [`Snapshot::rules`] lists it: the rule as it is
/// enforced, with the source that published it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PublishedRule<'a> {
    /// The name of the source that published the rule.
    pub source: &'a str,
    /// The version (RFC 7200: the `version` attribute of `<ruleset>`) of that source's policy
    /// in this snapshot: that of the last document applied to it, full or partial.
    pub source_version: u32,
    /// The rule, with the source's partial documents merged in.
    pub rule: &'a Rule,
}

impl Snapshot {
    /// Increases by one per publish; 0 is the empty policy the engine starts with.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The merged, compiled policy.
    pub fn policy(&self) -> &CompiledPolicy {
        &self.policy
    }

    /// Source names, indexed by [`crate::compile::CompiledRule::source`].
    pub fn sources(&self) -> &[Name] {
        &self.sources
    }

    /// The shared name of the source rule `i` came from.
    pub(crate) fn source_name(&self, i: usize) -> Name {
        self.policy
            .rules()
            .get(i)
            .and_then(|r| self.sources.get(r.source() as usize))
            .cloned()
            .unwrap_or_else(|| Name::from(""))
    }

    /// The name of the source rule `i` came from.
    pub fn source_of(&self, i: usize) -> &str {
        self.policy
            .rules()
            .get(i)
            .and_then(|r| self.sources.get(r.source() as usize))
            .map_or("", |s| s)
    }

    /// The rules in the order they are tried (the first match wins), each with its source and
    /// the version of the source's policy. The snapshot is immutable: a later publish makes a
    /// new one and leaves this list as it is.
    pub fn rules(&self) -> impl ExactSizeIterator<Item = PublishedRule<'_>> + '_ {
        self.policy.rules().iter().map(|r| {
            let s = r.source() as usize;
            PublishedRule {
                source: self.sources.get(s).map_or("", |n| n),
                source_version: self.source_versions.get(s).copied().unwrap_or(0),
                rule: r.rule(),
            }
        })
    }

    /// The version (RFC 7200: the `version` attribute of `<ruleset>`) of `source`'s policy in
    /// this snapshot: that of the last document applied to it, full or partial. `None` when
    /// the source has no policy here. A source whose policy holds no rule has a version too.
    pub fn source_version(&self, source: &str) -> Option<u32> {
        let i = self.sources.iter().position(|s| &**s == source)?;
        self.source_versions.get(i).copied()
    }

    /// Rule `i`'s shared cell.
    pub fn cell(&self, i: usize) -> Option<&RuleCell> {
        self.rules.get(i).map(|r| &**r.cell)
    }

    /// Rule `i`'s key: a stable hash of (source, rule id, action).
    pub fn key(&self, i: usize) -> u64 {
        self.rules.get(i).map_or(0, |r| r.key)
    }
}

/// A stable 64-bit key for (source, rule id, action): FNV-1a, identical in every process.
fn rule_key(source: &str, rule: &Rule) -> u64 {
    let mut h = crate::hash::Fnv1a::OFFSET;
    h.bytes(source.as_bytes());
    h.bytes(b"\0");
    h.bytes(rule.id.as_str().as_bytes());
    h.bytes(b"\0");
    // The action's canonical text, hashed as it is formatted (no allocation).
    let _ = std::fmt::Write::write_fmt(&mut h, format_args!("{}", rule.accept));
    h.0.max(1)
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
    /// [`SystemClock`] does (monotonic time since boot).
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
mod tests {
    use super::*;

    fn doc(version: u32, state: &str, rules: &str) -> Ruleset {
        let text = format!(
            "<ruleset xmlns=\"urn:ietf:params:xml:ns:common-policy\" \
             xmlns:lc=\"urn:ietf:params:xml:ns:load-control\" version=\"{version}\" \
             state=\"{state}\">{rules}</ruleset>"
        );
        policy::read(text.as_bytes(), &Limits::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .ruleset
    }

    fn rule(id: &str, accept: &str) -> String {
        format!("<rule id=\"{id}\"><actions>{accept}</actions></rule>")
    }

    /// (source, version, rule id, limit) of each published rule.
    fn listed(snapshot: &Snapshot) -> Vec<(String, u32, String, Limit)> {
        snapshot
            .rules()
            .map(|r| {
                (
                    r.source.to_owned(),
                    r.source_version,
                    r.rule.id.to_string(),
                    r.rule.accept.limit,
                )
            })
            .collect()
    }

    #[test]
    fn a_snapshot_lists_its_rules_with_their_sources_and_versions() {
        let e = Engine::new(EngineConfig::default());
        assert_eq!(e.snapshot().rules().len(), 0);
        assert_eq!(e.snapshot().source_version("a"), None);
        let rate = |r: f64| Limit::Rate(policy::Rate::new(r).expect("rate"));
        e.publish(
            &Source::local("a"),
            doc(
                7,
                "full",
                &(rule("r1", "<lc:accept><lc:rate>20</lc:rate></lc:accept>")
                    + &rule("r2", "<lc:accept><lc:win>5</lc:win></lc:accept>")),
            ),
        )
        .expect("a");
        e.publish(&Source::local("empty"), doc(3, "full", ""))
            .expect("empty");
        e.publish(
            &Source::local("b"),
            doc(
                0,
                "full",
                &rule("r1", "<lc:accept><lc:rate>1</lc:rate></lc:accept>"),
            ),
        )
        .expect("b");
        let before = e.snapshot();
        // A partial document: r1 retuned in place, r3 appended, the version is the partial's.
        e.apply(
            &Source::local("a"),
            doc(
                8,
                "partial",
                &(rule("r1", "<lc:accept><lc:rate>30</lc:rate></lc:accept>")
                    + &rule("r3", "<lc:accept><lc:percent>40</lc:percent></lc:accept>")),
            ),
        )
        .expect("partial");
        let s = e.snapshot();
        let row = |src: &str, v: u32, id: &str, l: Limit| (src.to_owned(), v, id.to_owned(), l);
        assert_eq!(
            listed(&s),
            [
                row("a", 8, "r1", rate(30.0)),
                row("a", 8, "r2", Limit::Window(5)),
                row(
                    "a",
                    8,
                    "r3",
                    Limit::Percent(policy::Percent::new(40.0).expect("percent"))
                ),
                row("b", 0, "r1", rate(1.0)),
            ]
        );
        // The rows are the snapshot's: in the order rules are tried, with source_of's names.
        for (i, r) in s.rules().enumerate() {
            assert_eq!(r.source, s.source_of(i));
            assert_eq!(r.rule.id, *s.policy().rules()[i].id());
        }
        assert_eq!(s.source_version("a"), Some(8));
        assert_eq!(s.source_version("empty"), Some(3));
        assert_eq!(s.source_version("b"), Some(0));
        assert_eq!(s.source_version("c"), None);
        assert_eq!(
            s.source_version("a"),
            e.source_policy("a").map(|p| p.version())
        );
        // An older snapshot keeps what it had.
        assert_eq!(before.source_version("a"), Some(7));
        assert_eq!(listed(&before)[0], row("a", 7, "r1", rate(20.0)));
        e.withdraw("empty").expect("withdraw");
        assert_eq!(e.snapshot().source_version("empty"), None);
        assert_eq!(e.snapshot().source_version("b"), Some(0));
    }
}
