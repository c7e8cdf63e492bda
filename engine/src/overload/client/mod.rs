//! The client side of RFC 7339 / RFC 7415: per next hop, what the server last asked for, and
//! the decision to forward or shed each request.
//!
//! # State and who writes it
//! A [`Client`] is a table of [`HopCell`]s, one per next hop (RFC 7339 §5.4: "The scope of
//! overload control applies to unique combinations of IP and port values"), found by a 64-bit
//! key of the hop's address ([`hop_key`]). A cell holds, in atomics:
//! - the feedback in force — algorithm, `oc` value and the time it expires — packed in one
//!   word, so a worker reads all three with one load;
//! - the `oc-seq` it came with;
//! - the rate bucket's theoretical arrival time (RFC 7415 §3.5.1's leaky bucket, written in
//!   its equivalent virtual-scheduling form: `TAT = LCT + X`);
//! - consecutive timeouts, and when the next liveness probe may go (RFC 7339 §5.9).
//!
//! Responses update the feedback under a try-lock in the cell: a response that finds another
//! writer at work is dropped (not waited for), which is safe because a server repeats its
//! current values in every response until it changes them — the next one applies them. Readers
//! never take the lock. A rate-controlled hop costs one compare-and-swap on the shared bucket
//! per *admitted* request, so shared writes are bounded by the rate the server asked for;
//! shed requests and loss-based decisions write nothing shared.
//!
//! Each worker thread keeps a [`ClientShard`]: its random numbers, the category mix it has
//! seen per hop (RFC 7339 §7.2), and its counters.
//!
//! # The decisions
//! - **Loss** (RFC 7339 §7.2's default algorithm): the `oc` percentage is converted onto the
//!   reducible category using the shard's estimate of the mix ("if "oc=10" and 40% of the
//!   requests should be included in the first category, then: `10 / 40 * 100 = 25`"), and
//!   that share of the requests is discarded; above the reducible share, every reducible
//!   request and the rest out of the priority category. How the mix is estimated so that the
//!   loop neither swings nor drifts, and how the discard is drawn: [`ClientShard`].
//! - **Rate** (RFC 7415 §3.5.2, priority case): a request is admitted when the bucket's
//!   content `X' = TAT − now` is at most `TAU1` (reducible) or `TAU2` (priority); admitting
//!   adds `T = 1/oc`. With [`ClientConfig::resonance`] (§3.5.3) an admission into an empty
//!   bucket adds `T + u·T`, `u` uniform in [−½, ½], and activation starts the bucket at
//!   `TAU0 + u·T`. `oc=0` with a non-zero validity rejects everything (§3.5.1: "the client
//!   should reject 100% of SIP requests").
//! - **Expiry**: after `oc-validity` the hop is uncontrolled (§4.3: "overload control is not
//!   in effect"); `oc-validity=0` stops control at once (§5.7).
//! - **Order** ([`Client::apply`]): `oc-seq` orders the values while they are in force, and a
//!   stop for [`STOP_ORDER`] after it; within that time an older or missing `oc-seq` changes
//!   nothing, so neither a tardy response nor a spoofed one without a sequence (or with a
//!   small one) undoes what the server said last.
//! - **Self-limiting** (§5.9: "In the event of repeated timeouts or fatal transport errors,
//!   the SIP client MUST stop sending requests to this server. The SIP client SHOULD
//!   periodically probe"): after [`ClientConfig::suspend_after`] consecutive timeouts every
//!   request is shed except one probe per back-off interval (doubling from
//!   [`ClientConfig::probe_min`] to [`ClientConfig::probe_max`]); any response ends it.
//!
//! A shed request is the caller's to place: another next hop that is not overloaded, else a
//! 503 *without* `Retry-After` (§5.10: "it will need to reject these requests with a "503
//! (Service Unavailable)" response without the Retry-After header").

use std::time::Duration;

use super::via::Feedback;
use super::{Algorithm, Algorithms, Category, MAX_RATE, OcError, Seq};
use crate::clock::nanos;
use crate::sync::{AtomicU64, Ordering};

/// Client settings. [`ClientConfig::default`] is RFC 7415's suggested values.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct ClientConfig {
    /// The algorithms offered in requests (must contain loss: RFC 7339 §4.2 "MUST insert at
    /// least the token "loss""). Default `loss,rate`.
    pub algorithms: Algorithms,
    /// `TAU1`, the rate bucket's tolerance for reducible requests, in units of `T = 1/oc`.
    /// Default 5 (RFC 7415 §3.5.2: "TAU1 = 1/2 * TAU2").
    pub tau_reducible: f64,
    /// `TAU2`, the tolerance for priority requests, in units of `T`. Default 10 (§3.5.2:
    /// "TAU2 = 10 * T"). Must be ≥ `tau_reducible`.
    pub tau_priority: f64,
    /// `TAU0`, the bucket's content at activation, in units of `T`. Default 0 (§3.5.2).
    pub tau0: f64,
    /// Randomise the bucket at activation and whenever it empties (RFC 7415 §3.5.3). Default
    /// on.
    pub resonance: bool,
    /// How long each worker samples its category mix between two steps of its estimate (RFC
    /// 7339 §7.2 samples "every 5-10 seconds"; the estimate here is damped, see
    /// [`ClientShard`], so it can follow a changing mix every second). A period with fewer
    /// than [`MIX_MIN_SAMPLE`] requests goes on. Default 1 s.
    pub mix_period: Duration,
    /// The reducible share assumed before a mix is sampled (§7.2's `cat1 := 80.0`). Default 0.8.
    pub reducible_share: f64,
    /// Consecutive timeouts that suspend a hop (RFC 7339 §5.9). Default 3.
    pub suspend_after: u32,
    /// The first probe interval of a suspended hop. Default 1 s.
    pub probe_min: Duration,
    /// The longest probe interval (the back-off doubles up to it). Default 64 s.
    pub probe_max: Duration,
    /// How long a hop must go without requests and responses before its cell may be given to
    /// another next hop (the hop's values, suspension and counters are then forgotten). At
    /// least [`MIN_HOP_IDLE`], so that no hop with a transaction still open is reclaimed.
    /// Default 300 s.
    pub hop_idle: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            algorithms: Algorithms::LossThenRate,
            tau_reducible: 5.0,
            tau_priority: 10.0,
            tau0: 0.0,
            resonance: true,
            mix_period: Duration::from_secs(1),
            reducible_share: 0.8,
            suspend_after: 3,
            probe_min: Duration::from_secs(1),
            probe_max: Duration::from_secs(64),
            hop_idle: Duration::from_secs(300),
        }
    }
}

/// The shortest [`ClientConfig::hop_idle`]: twice the longest a request waits for its response
/// (64·T1, RFC 3261 Timer B and F), so a hop is never reclaimed while a response to it is due,
/// nor while a stop keeps its order ([`STOP_ORDER`]).
pub const MIN_HOP_IDLE: Duration = Duration::from_secs(64);

/// What [`ClientConfig::check`] says `algorithms` must be (a binding that cannot even form a
/// list refuses it in the same words).
#[doc(hidden)]
pub const ALGORITHMS_EXPECTED: &str = "a list containing loss (RFC 7339 §4.2)";

impl ClientConfig {
    /// Checks every field; the error names the first one out of range.
    pub fn check(&self) -> Result<(), OcError> {
        let bad = |field, expected| Err(OcError::Config { field, expected });
        if !self.algorithms.contains(Algorithm::Loss) {
            return bad("algorithms", ALGORITHMS_EXPECTED);
        }
        let tau_ok = |t: f64| t.is_finite() && (0.0..=1e6).contains(&t);
        if !tau_ok(self.tau_reducible) {
            return bad("tau_reducible", "between 0 and 1e6 (units of T)");
        }
        if !tau_ok(self.tau_priority) || self.tau_priority < self.tau_reducible {
            return bad("tau_priority", "between tau_reducible and 1e6 (units of T)");
        }
        if !tau_ok(self.tau0) || self.tau0 > self.tau_reducible {
            return bad("tau0", "between 0 and tau_reducible (RFC 7415 §3.5.1)");
        }
        if self.mix_period.is_zero() {
            return bad("mix_period", "positive");
        }
        if !(self.reducible_share.is_finite() && (0.0..=1.0).contains(&self.reducible_share)) {
            return bad("reducible_share", "between 0 and 1");
        }
        if self.suspend_after == 0 {
            return bad("suspend_after", "at least 1");
        }
        if self.probe_min.is_zero() || self.probe_max < self.probe_min {
            return bad("probe_min / probe_max", "0 < probe_min ≤ probe_max");
        }
        if self.hop_idle < MIN_HOP_IDLE || self.hop_idle.as_secs() > u64::from(u32::MAX / 2) {
            return bad("hop_idle", "between 64 s and 68 years");
        }
        Ok(())
    }
}

/// The key of a next hop's address (for example `"192.0.2.7:5060"`, or the bytes of a socket
/// address): FNV-1a, the same in every process, never 0.
pub fn hop_key(address: &[u8]) -> u64 {
    crate::hash::fnv1a(address).max(1)
}

/// One next hop's shared state: 64 bytes of atomics, no pointers.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct HopCell {
    /// The hop's key ([`hop_key`]); 0 = free.
    key: AtomicU64,
    /// The writers' try-lock: 0 free, else the holder's time + 1.
    lock: AtomicU64,
    /// The feedback in force (see [`State`]).
    state: AtomicU64,
    /// The `oc-seq` stored with it, plus one (0 = none).
    seq: AtomicU64,
    /// The rate bucket: theoretical arrival time, ns.
    tat: AtomicU64,
    /// Consecutive timeouts (low 32 bits) and the probe back-off exponent (high 32 bits).
    fails: AtomicU64,
    /// When a suspended hop may send its next probe, ns.
    probe_at: AtomicU64,
    /// The second of the caller's clock in which the hop was last used (high 32 bits: a
    /// request decided or a response heard, written at most once a second), and the feedback
    /// updates applied (low 32 bits, wrapping; statistics).
    used: AtomicU64,
}

/// The second of the caller's clock (`now_ns`) in [`HopCell`]'s `used` word.
fn second(now_ns: u64) -> u32 {
    (now_ns / 1_000_000_000).min(u64::from(u32::MAX)) as u32
}

impl HopCell {
    /// Records that the hop is used in the second of `now_ns`: one load, and a write only
    /// when the second has moved on (a write lost to a concurrent one is made by the next use).
    fn touch(&self, now_ns: u64) {
        let s = u64::from(second(now_ns));
        let used = self.used.load(Ordering::Relaxed);
        if used >> 32 < s {
            let _ = self.used.compare_exchange(
                used,
                s << 32 | (used & 0xffff_ffff),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Whether the cell's hop has gone unused for `idle_s` seconds at `now_ns`.
    fn idle(&self, now_ns: u64, idle_s: u32) -> bool {
        let last = (self.used.load(Ordering::Relaxed) >> 32) as u32;
        second(now_ns) >= last.saturating_add(idle_s)
    }
}

/// The packed feedback word: algorithm (2 bits: 0 none, 1 loss, 2 rate), stopped (1 bit),
/// `oc` (20 bits), a time in ms of the caller's clock (41 bits: 69 years): when the values
/// expire, or for a stop until when it keeps its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State(u64);

const OC_BITS: u32 = 20;
const EXPIRY_BITS: u32 = 41;
const EXPIRY_MASK: u64 = (1 << EXPIRY_BITS) - 1;
const OC_MASK: u64 = (1 << OC_BITS) - 1;
const STOPPED: u64 = 1 << 61;

impl State {
    fn new(algorithm: Algorithm, oc: u64, expiry_ms: u64) -> State {
        let a = match algorithm {
            Algorithm::Loss => 1,
            Algorithm::Rate => 2,
        };
        State(a << 62 | (oc.min(OC_MASK)) << EXPIRY_BITS | expiry_ms.min(EXPIRY_MASK))
    }

    /// Control stopped by the server (`oc-validity=0`), the selected algorithm kept; the stop
    /// orders what follows until `ordered_until_ms`.
    fn stopped(algorithm: Algorithm, ordered_until_ms: u64) -> State {
        State(Self::new(algorithm, 0, ordered_until_ms).0 | STOPPED)
    }

    fn is_stopped(self) -> bool {
        self.0 & STOPPED != 0
    }

    fn algorithm(self) -> Option<Algorithm> {
        match self.0 >> 62 {
            1 => Some(Algorithm::Loss),
            2 => Some(Algorithm::Rate),
            _ => None,
        }
    }

    fn oc(self) -> u64 {
        (self.0 >> EXPIRY_BITS) & OC_MASK
    }

    fn expiry_ms(self) -> u64 {
        self.0 & EXPIRY_MASK
    }

    /// The algorithm and value in force at `now_ms`, if any.
    fn active(self, now_ms: u64) -> Option<(Algorithm, u64)> {
        let a = self.algorithm()?;
        (!self.is_stopped() && now_ms < self.expiry_ms()).then_some((a, self.oc()))
    }

    /// Whether the stored `oc-seq` orders new feedback at `now_ms`: while the values are in
    /// force, and while a stop keeps its order.
    fn ordered(self, now_ms: u64) -> bool {
        self.algorithm().is_some() && now_ms < self.expiry_ms()
    }
}

/// What [`Client::reclaim`] did.
enum Reclaim {
    /// The cell is the new key's.
    Taken,
    /// Another thread held the cell's lock (the cell's index).
    Busy(usize),
    /// The hop was used meanwhile.
    NotIdle,
}

/// How many cells from its home cell a hop's key may live in ([`Client::hop`]).
pub const HOP_WINDOW: usize = 64;

/// How long a stop (`oc-validity=0`) keeps its `oc-seq`'s order: 64·T1, the time a request's
/// transaction may wait for its response (RFC 3261 Timer B and F), so a response the server
/// sent before the stop and the network delayed cannot restart control. Later, any `oc-seq`
/// applies again (a server that restarted counting from a lower value is heard).
pub const STOP_ORDER: Duration = Duration::from_secs(32);

/// The share of `oc-seq`'s range at each end within which a lower value is a wrap-around and
/// applies (RFC 7339 §4.4: "If the value contained in the "oc-seq" parameter overflows ... the
/// client should use the overload parameters in the new message, even though the sequence
/// number is lower"): from the top 1 % of the range to the bottom 1 %. Any other lower value
/// is tardy (or spoofed) and ignored.
const WRAP_SHARE: u64 = 100;

/// Whether `new`, lower than `stored`, is `oc-seq` wrapping around.
fn wrapped(new: Seq, stored: Seq) -> bool {
    let edge = Seq::MAX.0 / WRAP_SHARE;
    stored.0 >= Seq::MAX.0 - edge && new.0 <= edge
}

const _: () = assert!(MAX_RATE == OC_MASK);

/// A next hop in a [`Client`]'s table (its cell's index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hop(usize);

impl Hop {
    /// The cell index.
    pub fn index(self) -> usize {
        self.0
    }
}

/// What a response did to a hop's feedback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The response carried no feedback (no `oc` value): nothing changed but liveness.
    NoFeedback,
    /// New values are in force (or control stopped, for `oc-validity=0`).
    Updated,
    /// The same `oc-seq` as the values in force: nothing changed (RFC 7339 §5.4: "If these
    /// values match, the response does not update the overload control parameters").
    Same,
    /// An older `oc-seq` than the values in force, or none while the values in force came
    /// with one: ignored (a tardy response, or one that cannot be ordered).
    Stale,
    /// Another response was being applied at that moment; this one was dropped (the server
    /// repeats its values, so the next response applies them).
    Busy,
}

/// What the client does with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OcVerdict {
    /// Send it to the hop.
    Forward,
    /// Send it: it is the suspended hop's liveness probe (RFC 7339 §5.9).
    Probe,
    /// Do not send it to this hop: try another, else answer 503 without Retry-After.
    Shed(ShedReason),
}

/// Why a request was shed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShedReason {
    /// The loss-based algorithm discarded it.
    Loss,
    /// The rate-based bucket was full.
    Rate,
    /// The hop is suspended after repeated timeouts (RFC 7339 §5.9).
    Unreachable,
}

/// A hop's state as read now (for statistics and RPCs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopStatus {
    /// The algorithm and `oc` value in force, if control is active.
    pub active: Option<(Algorithm, u64)>,
    /// The last algorithm the server selected (also when control is not active).
    pub algorithm: Option<Algorithm>,
    /// How long until the values in force expire (zero when not active), to the millisecond
    /// (the resolution of `oc-validity`).
    pub remaining: Duration,
    /// The `oc-seq` stored.
    pub seq: Option<Seq>,
    /// Consecutive timeouts.
    pub timeouts: u32,
    /// Whether the hop is suspended (probing only).
    pub suspended: bool,
    /// Feedback updates applied since the hop was added.
    pub updates: u64,
}

/// Where a [`Client`]'s cells live.
#[derive(Debug)]
enum Cells {
    Owned(Box<[HopCell]>),
    /// A table in memory the host owns, possibly shared by several processes.
    Shared(&'static [HopCell]),
}

impl std::ops::Deref for Cells {
    type Target = [HopCell];

    fn deref(&self) -> &[HopCell] {
        match self {
            Cells::Owned(b) => b,
            Cells::Shared(s) => s,
        }
    }
}

/// The client's table of next hops (see the module documentation). `Sync`: every worker uses
/// the same one, through its own [`ClientShard`].
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    /// `config.mix_period` as the instants count it, converted once: every decision reads it.
    mix_period_ns: u64,
    cells: Cells,
}

impl Client {
    /// A table for up to `capacity` next hops.
    pub fn new(config: ClientConfig, capacity: usize) -> Result<Client, OcError> {
        config.check()?;
        Self::check_capacity(capacity)?;
        Ok(Client {
            mix_period_ns: nanos(config.mix_period),
            config,
            cells: Cells::Owned((0..capacity).map(|_| HopCell::default()).collect()),
        })
    }

    /// A client on a table of cells the host owns: typically memory several processes map
    /// (forked workers), so that all of them see the same feedback, suspension and rate bucket
    /// per next hop. A zeroed table is an empty one; every process attaches to the same memory
    /// with the same configuration (the cells hold no configuration). Times must come from a
    /// clock all the processes share (`CLOCK_MONOTONIC`).
    pub fn shared(config: ClientConfig, cells: &'static [HopCell]) -> Result<Client, OcError> {
        config.check()?;
        Self::check_capacity(cells.len())?;
        Ok(Client {
            mix_period_ns: nanos(config.mix_period),
            config,
            cells: Cells::Shared(cells),
        })
    }

    fn check_capacity(capacity: usize) -> Result<(), OcError> {
        if capacity == 0 || capacity > 1 << 20 {
            return Err(OcError::Config {
                field: "capacity",
                expected: "between 1 and 1,048,576 next hops",
            });
        }
        Ok(())
    }

    /// The settings.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The parameters to add to the Via this client inserts into every request to a hop
    /// ([`super::via::request_params`] of the configured algorithms).
    pub fn request_params(&self) -> &'static str {
        super::via::request_params(self.config.algorithms)
    }

    /// The hop with `key` ([`hop_key`] of its address) at `now_ns`, added if new.
    ///
    /// A key lives in one of the [`HOP_WINDOW`] cells from its home cell (`key` modulo the
    /// capacity), so a lookup reads at most that many keys, without a lock. A new key takes the
    /// first free cell of its window, else the first whose hop has been idle for
    /// [`ClientConfig::hop_idle`] (taken under that cell's writers' lock, its state reset);
    /// [`OcError::TableFull`] only when every cell of the window holds a hop used within that
    /// time. A lookup counts as a use. Two threads adding the same key together get the same
    /// cell.
    ///
    /// A [`Hop`] stays this key's cell while the hop is used; keep it for one request and its
    /// response, and look it up again for the next.
    pub fn hop(&self, key: u64, now_ns: u64) -> Result<Hop, OcError> {
        let key = key.max(1);
        let n = self.cells.len();
        let start = (key as usize) % n;
        let window = || (0..n.min(HOP_WINDOW)).map(move |i| (start + i) % n);
        let idle_s = self.config.hop_idle.as_secs() as u32;
        // A few looks: a claim lost to another thread (or a cell another thread is giving to
        // a key, whose lock is held for a moment) is followed by another.
        for _ in 0..4 {
            let mut reclaimable = None;
            for at in window() {
                let cell = &self.cells[at];
                let k = cell.key.load(Ordering::Acquire);
                if k == key {
                    // A lookup is a use: the holder has hop_idle (≥ 64 s) to finish its
                    // transaction before the cell could go to another key.
                    cell.touch(now_ns);
                    return Ok(Hop(at));
                }
                if k == 0 {
                    // Stamped before it is claimed, so that nobody finds it claimed and idle.
                    cell.touch(now_ns);
                    // Cells are never freed back to 0, so the key is not further on.
                    match cell
                        .key
                        .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(_) => return Ok(Hop(at)),
                        Err(other) if other == key => return Ok(Hop(at)),
                        Err(_) => {
                            reclaimable = None;
                            break;
                        }
                    }
                }
                if reclaimable.is_none() && cell.idle(now_ns, idle_s) {
                    reclaimable = Some((at, k));
                }
            }
            match reclaimable.map(|(at, old)| self.reclaim(at, old, key, now_ns, idle_s)) {
                Some(Reclaim::Taken) => {
                    // Two threads reclaiming different cells for the same key at the same
                    // moment leave it twice in the window: lookups find the first, the other
                    // ages out.
                    if let Some(first) =
                        window().find(|&at| self.cells[at].key.load(Ordering::Acquire) == key)
                    {
                        return Ok(Hop(first));
                    }
                }
                Some(Reclaim::Busy(at)) => {
                    // Another thread is giving that cell to a key (maybe this one): wait for
                    // it to finish, then look again, rather than take another cell.
                    for _ in 0..10_000 {
                        if self.cells[at].lock.load(Ordering::Acquire) == 0 {
                            break;
                        }
                        std::hint::spin_loop();
                    }
                }
                Some(Reclaim::NotIdle) | None => {}
            }
            if reclaimable.is_none() {
                break;
            }
        }
        Err(OcError::TableFull { capacity: n })
    }

    /// Gives cell `at`, holding the idle hop `old`, to `key`: under the cell's writers' lock,
    /// if the hop is still idle.
    fn reclaim(&self, at: usize, old: u64, key: u64, now_ns: u64, idle_s: u32) -> Reclaim {
        let cell = &self.cells[at];
        let stamp = now_ns.saturating_add(1);
        if cell
            .lock
            .compare_exchange(0, stamp, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Reclaim::Busy(at);
        }
        let taken = cell.key.load(Ordering::Acquire) == old && cell.idle(now_ns, idle_s);
        if taken {
            cell.state.store(0, Ordering::Release);
            cell.seq.store(0, Ordering::Release);
            cell.tat.store(0, Ordering::Release);
            cell.fails.store(0, Ordering::Release);
            cell.probe_at.store(0, Ordering::Release);
            cell.used
                .store(u64::from(second(now_ns)) << 32, Ordering::Release);
            // Last: whoever finds the new key finds the cell reset.
            cell.key.store(key, Ordering::Release);
        }
        let _ = cell
            .lock
            .compare_exchange(stamp, 0, Ordering::Release, Ordering::Relaxed);
        if taken {
            Reclaim::Taken
        } else {
            Reclaim::NotIdle
        }
    }

    /// The hop with `key`, if it is in the table (never adds).
    pub fn find(&self, key: u64) -> Option<Hop> {
        let key = key.max(1);
        let n = self.cells.len();
        let start = (key as usize) % n;
        (0..n.min(HOP_WINDOW))
            .map(|i| (start + i) % n)
            .take_while(|&at| self.cells[at].key.load(Ordering::Acquire) != 0)
            .find(|&at| self.cells[at].key.load(Ordering::Acquire) == key)
            .map(Hop)
    }

    /// The hop in cell `index`, if that cell holds one (for callers that keep indexes, like
    /// the C ABI).
    pub fn hop_at(&self, index: usize) -> Option<Hop> {
        let cell = self.cells.get(index)?;
        (cell.key.load(Ordering::Acquire) != 0).then_some(Hop(index))
    }

    /// Cells in the table.
    pub fn capacity(&self) -> usize {
        self.cells.len()
    }

    fn cell(&self, hop: Hop) -> &HopCell {
        &self.cells[hop.0 % self.cells.len()]
    }

    /// A response from `hop` arrived at `now_ns`; `via` is its top Via value. Records that the
    /// hop is alive (ending a suspension, RFC 7339 §5.9: "Once a SIP client has successfully
    /// received a normal response ... the SIP client can resume sending") and applies its
    /// feedback. A bad feedback value is an error and leaves the feedback in force as it was
    /// (the liveness is still recorded: the hop did answer).
    pub fn on_response(&self, hop: Hop, now_ns: u64, via: &str) -> Result<Applied, OcError> {
        self.heard_from(hop);
        let cell = self.cell(hop);
        cell.touch(now_ns);
        let feedback = Feedback::parse(via)?;
        if let Some(f) = &feedback {
            if let Some(a) = f.algorithm
                && !self.config.algorithms.contains(a)
            {
                return Err(OcError::UnknownAlgorithm(a.as_str().to_string()));
            }
            // Without `oc-algo` the value is read under the selection in force.
            let selected = State(cell.state.load(Ordering::Acquire)).algorithm();
            if f.validity_ms > 0
                && f.oc > 100
                && f.algorithm.or(selected).unwrap_or(Algorithm::Loss) == Algorithm::Loss
            {
                return Err(OcError::LossAbove100(f.oc));
            }
        }
        Ok(self.apply(hop, now_ns, feedback))
    }

    /// A response from `hop` arrived: it is alive, which ends a suspension (RFC 7339 §5.9).
    /// [`Client::on_response`] does this itself; call it for a response whose Via cannot be
    /// given as text (not UTF-8), which answers all the same.
    pub fn heard_from(&self, hop: Hop) {
        self.cell(hop).fails.store(0, Ordering::Release);
    }

    /// Applies parsed feedback from `hop` (see [`Client::on_response`], which parses and also
    /// records liveness).
    ///
    /// RFC 7339 §5.4: a larger `oc-seq` than the stored one replaces the values and restarts
    /// the validity period; the same one changes nothing; a smaller one is a tardy response,
    /// ignored — unless `oc-seq` wrapped around (§4.4: "If an overflow is detected, then the
    /// client should use the overload parameters in the new message"), taken as a stored value
    /// in the top 1 % of the grammar's range and a new one in the bottom 1 %. The stored
    /// `oc-seq` orders new feedback while its values are in force, and after a stop
    /// (`oc-validity=0`, §5.7) for [`STOP_ORDER`]; once the values have expired any `oc-seq`
    /// applies ("Stored overload control parameters MUST be reset to default values once the
    /// validity period has expired"). Feedback without `oc-seq` (the server broke §4.4's MUST)
    /// applies only when nothing ordered is stored.
    ///
    /// Feedback without an algorithm keeps the one selected (§4.2), loss if none was; a loss
    /// value above 100 is taken as 100 ([`Client::on_response`] refuses it).
    pub fn apply(&self, hop: Hop, now_ns: u64, feedback: Option<Feedback>) -> Applied {
        let Some(f) = feedback else {
            return Applied::NoFeedback;
        };
        let cell = self.cell(hop);
        #[cfg(loadctl_loom_mutant)]
        {
            return self.apply_unlocked(cell, now_ns, &f);
        }
        #[cfg(not(loadctl_loom_mutant))]
        {
            // The lock word holds its holder's time (+ 1, never 0). A holder that has kept it
            // for more than LOCK_STALE_NS died holding it (a forked process killed in the
            // middle of an update): the next writer takes it over, or the hop's feedback would
            // be refused forever.
            let stamp = now_ns.saturating_add(1);
            if let Err(held) =
                cell.lock
                    .compare_exchange(0, stamp, Ordering::Acquire, Ordering::Relaxed)
            {
                let stale = stamp.saturating_sub(held) > LOCK_STALE_NS;
                if !stale
                    || cell
                        .lock
                        .compare_exchange(held, stamp, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                {
                    return Applied::Busy;
                }
            }
            let outcome = self.apply_locked(cell, now_ns, &f);
            // Released only if still ours (a writer may have taken over a stalled lock).
            let _ = cell
                .lock
                .compare_exchange(stamp, 0, Ordering::Release, Ordering::Relaxed);
            outcome
        }
    }

    /// Deliberately broken (loom mutant): applies feedback without the writers' lock, so two
    /// responses applied together can leave one's values stored with the other's `oc-seq`.
    #[cfg(loadctl_loom_mutant)]
    fn apply_unlocked(&self, cell: &HopCell, now_ns: u64, f: &Feedback) -> Applied {
        self.apply_locked(cell, now_ns, f)
    }

    fn apply_locked(&self, cell: &HopCell, now_ns: u64, f: &Feedback) -> Applied {
        let now_ms = now_ns / 1_000_000;
        let old = State(cell.state.load(Ordering::Acquire));
        let was = old.active(now_ms);
        let stored = cell.seq.load(Ordering::Acquire).checked_sub(1).map(Seq);
        // §5.7: "When the client receives a response with a higher "oc-seq" number than the
        // one it most recently processed"; only expiry resets the order (§5.4).
        if let (Some(stored), true) = (stored, old.ordered(now_ms)) {
            match f.seq {
                Some(new) if new == stored => return Applied::Same,
                Some(new) if new < stored && !wrapped(new, stored) => return Applied::Stale,
                Some(_) => {}
                None => return Applied::Stale,
            }
        }
        let algorithm = f.algorithm.or(old.algorithm()).unwrap_or(Algorithm::Loss);
        let state = if f.validity_ms == 0 {
            // §5.7: "the client SHOULD disregard the value in the "oc" parameter".
            State::stopped(
                algorithm,
                now_ms.saturating_add(STOP_ORDER.as_millis() as u64),
            )
        } else {
            let oc = match algorithm {
                Algorithm::Loss => f.oc.min(100),
                Algorithm::Rate => f.oc,
            };
            State::new(algorithm, oc, now_ms.saturating_add(f.validity_ms))
        };
        let f = Feedback {
            algorithm: Some(algorithm),
            oc: state.oc(),
            ..*f
        };
        if f.algorithm == Some(Algorithm::Rate)
            && f.validity_ms > 0
            && was.is_none_or(|(a, _)| a != Algorithm::Rate)
        {
            // RFC 7415 §3.5.1: "When the first response from the server has been received
            // indicating control activation (oc-validity>0), LCT is set to the time of
            // activation, and the leaky bucket counter is initialized to the parameter TAU0";
            // §3.5.3: "initialize it to TAU0 + uT".
            let t = interval_ns(f.oc);
            let mut x = self.config.tau0 * t;
            if self.config.resonance {
                x += uniform_half(splitmix(now_ns ^ f.oc)) * t;
            }
            cell.tat
                .store(now_ns.saturating_add(x.max(0.0) as u64), Ordering::Release);
        } else if let (Some(Algorithm::Rate), true, Some((Algorithm::Rate, old_oc))) =
            (f.algorithm, f.validity_ms > 0, was)
            && old_oc != f.oc
        {
            // A new rate while rate control goes on: the bucket's backlog, built at T_old,
            // drains at the new rate as that many requests would, X·T_new/T_old, and never
            // holds more than the new TAU2 (else raising the rate would keep a client blocked
            // for the old backlog's time).
            let tat = cell.tat.load(Ordering::Acquire);
            if tat > now_ns {
                let (t_old, t_new) = (interval_ns(old_oc), interval_ns(f.oc));
                let backlog = ((tat - now_ns) as f64 * t_new / t_old)
                    .min(self.config.tau_priority * t_new + t_new);
                // Another writer cannot race this store (the try-lock); a worker's CAS on the
                // old value fails and retries against the new one.
                cell.tat
                    .store(now_ns.saturating_add(backlog as u64), Ordering::Release);
            }
        }
        cell.state.store(state.0, Ordering::Release);
        cell.seq
            .store(f.seq.map_or(0, |s| s.0 + 1), Ordering::Release);
        let _ = cell
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u & !0xffff_ffff | u64::from((u as u32).wrapping_add(1)))
            });
        Applied::Updated
    }

    /// A request sent to `hop` timed out or met a fatal transport error (RFC 7339 §5.9, RFC
    /// 3261 §8.1.3.1: treated as a 408 / 503 generated locally). [`ClientConfig::suspend_after`]
    /// of these in a row suspend the hop. While it is suspended, a timeout doubles the probe
    /// back-off only when a probe went out since the last doubling (it is the probe's, as far
    /// as the client can tell); timeouts of requests sent before the suspension change nothing.
    pub fn on_timeout(&self, hop: Hop, now_ns: u64) {
        let cell = self.cell(hop);
        let c = &self.config;
        let mut f = cell.fails.load(Ordering::Acquire);
        loop {
            let timeouts = f as u32 & !PROBE_OUT;
            let probe_out = f as u32 & PROBE_OUT != 0;
            let mut exponent = (f >> 32) as u32;
            let suspended = timeouts >= c.suspend_after;
            let (next, probe_at) = if suspended {
                if !probe_out {
                    return;
                }
                exponent = exponent.saturating_add(1).min(40);
                (u64::from(exponent) << 32 | u64::from(timeouts), true)
            } else {
                let t = timeouts + 1;
                (
                    u64::from(exponent) << 32 | u64::from(t),
                    t >= c.suspend_after,
                )
            };
            match cell
                .fails
                .compare_exchange_weak(f, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if probe_at {
                        cell.probe_at.store(
                            now_ns.saturating_add(backoff(c, exponent)),
                            Ordering::Release,
                        );
                    }
                    return;
                }
                Err(now) => f = now,
            }
        }
    }

    /// The hop's state at `now_ns`.
    pub fn status(&self, hop: Hop, now_ns: u64) -> HopStatus {
        let cell = self.cell(hop);
        let now_ms = now_ns / 1_000_000;
        let s = State(cell.state.load(Ordering::Acquire));
        let fails = cell.fails.load(Ordering::Acquire);
        let active = s.active(now_ms);
        HopStatus {
            active,
            algorithm: s.algorithm(),
            remaining: Duration::from_millis(if active.is_some() {
                s.expiry_ms() - now_ms
            } else {
                0
            }),
            seq: cell.seq.load(Ordering::Acquire).checked_sub(1).map(Seq),
            timeouts: fails as u32 & !PROBE_OUT,
            suspended: fails as u32 & !PROBE_OUT >= self.config.suspend_after,
            updates: u64::from(cell.used.load(Ordering::Relaxed) as u32),
        }
    }
}

/// `T = 1/oc` in ns (oc = 0: no admission at all, handled by the caller).
fn interval_ns(oc: u64) -> f64 {
    1e9 / oc.max(1) as f64
}

/// How long a writer may hold a hop cell's lock before the next writer takes it over (it died
/// holding it): far longer than an update takes (well under a microsecond).
#[cfg_attr(loadctl_loom_mutant, allow(dead_code))]
const LOCK_STALE_NS: u64 = 1_000_000_000;

/// The bit of [`HopCell`]'s `fails` word (in its timeout half) set while a probe is out.
const PROBE_OUT: u32 = 1 << 31;

/// The probe interval for a back-off exponent.
fn backoff(c: &ClientConfig, exponent: u32) -> u64 {
    nanos(c.probe_min)
        .saturating_mul(1u64 << exponent.min(40))
        .min(nanos(c.probe_max))
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A uniform value in [−½, ½) from 64 random bits.
fn uniform_half(bits: u64) -> f64 {
    unit(bits) - 0.5
}

/// A uniform value in [0, 1) from 64 random bits.
fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

mod shard;

pub use shard::*;

#[cfg(test)]
mod tests;
