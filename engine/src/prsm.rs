//! PRSM: the two-queue priority request scheduler and the retransmission detector.
//!
//! An overloaded SIP server over UDP receives more and more copies of requests it has already
//! queued: an INVITE client retransmits at 0.5, 1.5, 3.5, … s until it hears a provisional
//! response, and every copy served costs a service slot. PRSM (Yavas, Hökelek, Günsel) puts
//! original requests in a **primary** queue and retransmissions in a **secondary** queue and
//! serves the secondary queue only when the primary queue is empty, so retransmissions can no
//! longer crowd out the new work that would end them.
//!
//! This module owns:
//! - [`Scheduler`]: the bounded two-queue scheduler (strict priority, tail drop: a full queue
//!   hands the item back so the caller can count or answer it), safe for many producers and
//!   many consumers (crossbeam's `ArrayQueue`, lock-free), with per-queue counters. The same
//!   type also runs as a conventional single FIFO ([`Discipline::Fifo`]) so a server can switch
//!   PRSM off and a simulation compares the two with the same code.
//! - [`RetransmissionDetector`]: tells an original from a retransmission by its transaction key
//!   (RFC 3261 §17.2.3: top Via `branch` and sent-by, method, CSeq number; the RFC 2543 key
//!   when the branch lacks the `z9hG4bK` cookie), remembering each key for Timer B (64·T1) in a
//!   fixed-size table: bounded memory, no allocation per message.
//!
//! Seams: the caller owns the I/O and the time (`now_ns` on every call, so everything runs in
//! simulated time); [`crate::sip::scan`] supplies the fields of a raw request, or a caller with
//! its own parser fills [`TransactionParts`]. Classification comes first: schedule only what
//! the load filter accepted.
//!
//! ```
//! use loadctl::prsm::{Class, DetectorConfig, RetransmissionDetector, Scheduler, SchedulerConfig};
//!
//! let scheduler = Scheduler::new(SchedulerConfig::priority(1000, 1000))?;
//! let detector = RetransmissionDetector::new(DetectorConfig::default())?;
//! let invite = b"INVITE sip:bob@b.example SIP/2.0\r\n\
//!     Via: SIP/2.0/UDP pc33.a.example;branch=z9hG4bK776asdhds\r\n\
//!     From: <sip:alice@a.example>;tag=1928301774\r\nTo: <sip:bob@b.example>\r\n\
//!     Call-ID: a84b4c76e66710\r\nCSeq: 314159 INVITE\r\n\r\n";
//! let request = loadctl::sip::scan(invite)?;
//! let key = detector.key(&request)?;
//! assert_eq!(detector.observe(key, 0), Class::Original);
//! scheduler.push("first copy", Class::Original).ok();
//! // 500 ms later the client retransmits: same key, secondary queue.
//! assert_eq!(detector.observe(key, 500_000_000), Class::Retransmission);
//! scheduler.push("second copy", Class::Retransmission).ok();
//! assert_eq!(scheduler.pop(), Some(("first copy", Class::Original)));
//! assert_eq!(scheduler.pop(), Some(("second copy", Class::Retransmission)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher, RandomState};

use crossbeam::queue::ArrayQueue;
use crossbeam::utils::CachePadded;

use crate::sip::via::ViaParm;
use crate::sip::{SipRequest, trim};
use crate::sync::{AtomicU64, Mutex, Ordering};

/// Whether a request is the first copy of its transaction seen or a retransmission of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// The first copy: goes to the primary queue.
    Original,
    /// A later copy of a transaction already seen: goes to the secondary queue.
    Retransmission,
}

/// How a [`Scheduler`] orders its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discipline {
    /// PRSM: originals in the primary queue, retransmissions in the secondary queue, the
    /// secondary served only when the primary is empty.
    Priority,
    /// A conventional server: one FIFO queue for everything (the secondary capacity is
    /// ignored). Counters still say which class each item was.
    Fifo,
}

/// Sizes and discipline of a [`Scheduler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// The ordering.
    pub discipline: Discipline,
    /// Capacity of the primary queue (the only queue under [`Discipline::Fifo`]).
    pub primary_capacity: usize,
    /// Capacity of the secondary queue (unused under [`Discipline::Fifo`]).
    pub secondary_capacity: usize,
}

impl SchedulerConfig {
    /// PRSM with the given queue capacities.
    pub fn priority(primary_capacity: usize, secondary_capacity: usize) -> Self {
        Self {
            discipline: Discipline::Priority,
            primary_capacity,
            secondary_capacity,
        }
    }

    /// One FIFO queue of `capacity` items.
    pub fn fifo(capacity: usize) -> Self {
        Self {
            discipline: Discipline::Fifo,
            primary_capacity: capacity,
            secondary_capacity: 0,
        }
    }
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A queue or table that must hold something was given no room.
    ZeroCapacity(&'static str),
    /// A capacity beyond what this build supports.
    TooLarge {
        /// Which setting.
        what: &'static str,
        /// The largest accepted value.
        max: usize,
    },
    /// A duration of zero where time must pass.
    ZeroDuration(&'static str),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::ZeroCapacity(what) => write!(f, "{what} must be at least 1"),
            ConfigError::TooLarge { what, max } => write!(f, "{what} must be at most {max}"),
            ConfigError::ZeroDuration(what) => write!(f, "{what} must be longer than zero"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The largest queue or detector capacity accepted (2^28 items): a typo should fail clearly
/// rather than reserve tens of gigabytes.
pub const MAX_CAPACITY: usize = 1 << 28;

/// An item the scheduler had no room for (tail drop), handed back to the caller.
#[derive(Debug, PartialEq, Eq)]
pub struct Full<T> {
    /// The item.
    pub item: T,
    /// Its class, as pushed.
    pub class: Class,
}

#[derive(Default)]
struct Counters {
    enqueued: AtomicU64,
    dropped: AtomicU64,
    served: AtomicU64,
}

/// Counters and occupancy of one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Capacity (0 for the unused secondary queue of a FIFO scheduler).
    pub capacity: usize,
    /// Items queued now (a snapshot while others push and pop).
    pub len: usize,
    /// Items accepted so far.
    pub enqueued: u64,
    /// Items refused because the queue was full (tail drop).
    pub dropped: u64,
    /// Items handed out by [`Scheduler::pop`].
    pub served: u64,
}

/// Counters of a [`Scheduler`], per queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// The primary queue (originals; everything under FIFO).
    pub primary: QueueStats,
    /// The secondary queue (retransmissions).
    pub secondary: QueueStats,
}

/// The bounded two-queue scheduler (see the module documentation).
///
/// Every method takes `&self`: share it (in an `Arc`) between the threads that receive and
/// the threads that serve. Priority is strict per [`pop`](Self::pop): a pop serves the
/// secondary queue only after finding the primary queue empty; an original pushed by another
/// thread at that very moment is served by the next pop.
pub struct Scheduler<T> {
    discipline: Discipline,
    primary: ArrayQueue<(T, Class)>,
    secondary: Option<ArrayQueue<(T, Class)>>,
    counters: [CachePadded<Counters>; 2],
}

impl<T> std::fmt::Debug for Scheduler<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("discipline", &self.discipline)
            .field("stats", &self.stats())
            .finish()
    }
}

fn check_capacity(what: &'static str, n: usize) -> Result<(), ConfigError> {
    if n == 0 {
        Err(ConfigError::ZeroCapacity(what))
    } else if n > MAX_CAPACITY {
        Err(ConfigError::TooLarge {
            what,
            max: MAX_CAPACITY,
        })
    } else {
        Ok(())
    }
}

impl<T> Scheduler<T> {
    /// A scheduler with empty queues. Both queues are allocated here, once.
    pub fn new(config: SchedulerConfig) -> Result<Self, ConfigError> {
        check_capacity("primary queue capacity", config.primary_capacity)?;
        let secondary = match config.discipline {
            Discipline::Priority => {
                check_capacity("secondary queue capacity", config.secondary_capacity)?;
                Some(ArrayQueue::new(config.secondary_capacity))
            }
            Discipline::Fifo => None,
        };
        Ok(Self {
            discipline: config.discipline,
            primary: ArrayQueue::new(config.primary_capacity),
            secondary,
            counters: Default::default(),
        })
    }

    /// The discipline this scheduler was built with.
    pub fn discipline(&self) -> Discipline {
        self.discipline
    }

    fn lane(&self, class: Class) -> usize {
        match (self.discipline, class) {
            (Discipline::Priority, Class::Retransmission) => 1,
            _ => 0,
        }
    }

    fn queue(&self, lane: usize) -> &ArrayQueue<(T, Class)> {
        match (lane, &self.secondary) {
            (1, Some(q)) => q,
            _ => &self.primary,
        }
    }

    /// Queues `item` (originals in the primary queue, retransmissions in the secondary one
    /// under PRSM). A full queue refuses it: the item comes back in [`Full`] (tail drop).
    pub fn push(&self, item: T, class: Class) -> Result<(), Full<T>> {
        let lane = self.lane(class);
        match self.queue(lane).push((item, class)) {
            Ok(()) => {
                self.counters[lane].enqueued.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err((item, class)) => {
                self.counters[lane].dropped.fetch_add(1, Ordering::Relaxed);
                Err(Full { item, class })
            }
        }
    }

    /// The next item to serve: the head of the primary queue, or when that is empty the head
    /// of the secondary queue; `None` when both are empty.
    pub fn pop(&self) -> Option<(T, Class)> {
        for lane in [0, 1] {
            if lane == 1 && self.secondary.is_none() {
                break;
            }
            if let Some(entry) = self.queue(lane).pop() {
                self.counters[lane].served.fetch_add(1, Ordering::Relaxed);
                return Some(entry);
            }
        }
        None
    }

    /// Items queued in both queues (a snapshot while others push and pop).
    pub fn len(&self) -> usize {
        self.primary.len() + self.secondary.as_ref().map_or(0, ArrayQueue::len)
    }

    /// True when both queues are empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items queued in the queue `class` goes to (a snapshot).
    pub fn len_of(&self, class: Class) -> usize {
        self.queue(self.lane(class)).len()
    }

    /// The counters.
    pub fn stats(&self) -> SchedulerStats {
        let queue = |lane: usize| {
            let c = &self.counters[lane];
            let (capacity, len) = match (lane, &self.secondary) {
                (0, _) => (self.primary.capacity(), self.primary.len()),
                (_, Some(q)) => (q.capacity(), q.len()),
                (_, None) => (0, 0),
            };
            QueueStats {
                capacity,
                len,
                enqueued: c.enqueued.load(Ordering::Relaxed),
                dropped: c.dropped.load(Ordering::Relaxed),
                served: c.served.load(Ordering::Relaxed),
            }
        };
        SchedulerStats {
            primary: queue(0),
            secondary: queue(1),
        }
    }
}

/// The magic cookie that starts an RFC 3261 branch.
pub const BRANCH_COOKIE: &[u8] = b"z9hG4bK";

/// Why no transaction key could be made from a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The request has no Via header (RFC 3261 §8.1.1.7 requires one).
    MissingVia,
    /// The top Via is not `SIP/2.0/transport sent-by;params`.
    BadVia,
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyError::MissingVia => f.write_str("the request has no Via header"),
            KeyError::BadVia => f.write_str("the top Via header is malformed"),
        }
    }
}

impl std::error::Error for KeyError {}

/// The fields a transaction key is made of, for callers that parse SIP themselves (a
/// [`SipRequest`] converts into it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransactionParts<'a> {
    /// The method of the request line.
    pub method: &'a [u8],
    /// The Request-URI (RFC 2543 key only).
    pub request_uri: &'a [u8],
    /// The value of the topmost Via header (its first entry).
    pub top_via: &'a [u8],
    /// Call-ID (RFC 2543 key only).
    pub call_id: &'a [u8],
    /// The CSeq number.
    pub cseq: u32,
    /// The From tag (RFC 2543 key only).
    pub from_tag: Option<&'a [u8]>,
    /// The To tag (RFC 2543 key only).
    pub to_tag: Option<&'a [u8]>,
}

impl<'a> TryFrom<&SipRequest<'a>> for TransactionParts<'a> {
    type Error = KeyError;

    fn try_from(r: &SipRequest<'a>) -> Result<Self, KeyError> {
        Ok(Self {
            method: r.method.as_bytes(),
            request_uri: r.request_uri.as_bytes(),
            top_via: r.via.ok_or(KeyError::MissingVia)?,
            call_id: r.call_id,
            cseq: r.cseq,
            from_tag: crate::sip::tag(r.from),
            to_tag: crate::sip::tag(r.to),
        })
    }
}

/// (sent-by, branch) of the top via-parm of a Via value `SIP / 2.0 / UDP host:port ;branch=…`.
fn via_parts(via: &[u8]) -> Result<(&[u8], Option<&[u8]>), KeyError> {
    let top = ViaParm::top(via).map_err(|_| KeyError::BadVia)?;
    Ok((top.sent_by().ok_or(KeyError::BadVia)?, top.branch()))
}

/// Feeds `bytes` to `h` lower-cased, a stack buffer at a time (no allocation).
fn write_lowercase(h: &mut impl Hasher, bytes: &[u8]) {
    let mut buf = [0u8; 64];
    for chunk in bytes.chunks(buf.len()) {
        let out = &mut buf[..chunk.len()];
        out.copy_from_slice(chunk);
        out.make_ascii_lowercase();
        h.write(out);
    }
}

/// A transaction's identity, as a 64-bit fingerprint under one detector's random hash key.
/// Only meaningful to the [`RetransmissionDetector`] that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransactionKey(u64);

impl TransactionKey {
    /// The fingerprint (never 0).
    pub fn fingerprint(self) -> u64 {
        self.0
    }
}

/// Sizes of a [`RetransmissionDetector`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetectorConfig {
    /// Most transactions remembered at once. When the table is full the oldest entry is
    /// forgotten early (counted in [`DetectorStats::evicted`]). Size it for the new
    /// transactions per second the server can see times Timer B: the default, 262,144, covers
    /// 8,192 new transactions per second for 32 s. Memory is about 48 bytes per entry,
    /// allocated once.
    pub capacity: usize,
    /// RFC 3261 T1 in nanoseconds (default 500 ms). A key is remembered for 64·T1 (Timer B),
    /// after which no client retransmits it.
    pub t1_ns: u64,
    /// Independent locks the table is split into, so threads rarely contend (default 16).
    pub stripes: usize,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        Self {
            capacity: 1 << 18,
            t1_ns: 500_000_000,
            stripes: 16,
        }
    }
}

/// Counters of a [`RetransmissionDetector`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetectorStats {
    /// Keys remembered now.
    pub tracked: u64,
    /// Requests seen as originals.
    pub originals: u64,
    /// Requests seen as retransmissions.
    pub retransmissions: u64,
    /// Keys forgotten before Timer B because the table was full: a retransmission of one of
    /// them is taken for an original. Nonzero means the capacity is too small.
    pub evicted: u64,
}

/// One slot of a stripe's open-addressing index: a fingerprint (0 = empty) and the sequence
/// number of its entry in the stripe's ring.
#[derive(Clone, Copy, Default)]
struct Slot {
    fingerprint: u64,
    seq: u64,
}

/// One stripe: entries in arrival order (so they expire from the front) and a linear-probing
/// index over them with backward-shift deletion (no tombstones, probe chains stay short).
struct Table {
    /// (fingerprint, expiry) in arrival order; `ring[i]` has sequence number `head_seq + i`.
    ring: VecDeque<(u64, u64)>,
    head_seq: u64,
    capacity: usize,
    index: Box<[Slot]>,
    mask: usize,
    originals: u64,
    retransmissions: u64,
    evicted: u64,
}

impl Table {
    fn new(capacity: usize) -> Self {
        let slots = (capacity * 2).next_power_of_two();
        Self {
            ring: VecDeque::with_capacity(capacity),
            head_seq: 0,
            capacity,
            index: vec![Slot::default(); slots].into_boxed_slice(),
            mask: slots - 1,
            originals: 0,
            retransmissions: 0,
            evicted: 0,
        }
    }

    fn home(&self, fingerprint: u64) -> usize {
        // The low bits chose the stripe; the index uses the high ones.
        (fingerprint >> 32) as usize & self.mask
    }

    fn find(&self, fingerprint: u64) -> Option<usize> {
        let mut i = self.home(fingerprint);
        loop {
            let slot = self.index[i];
            if slot.fingerprint == 0 {
                return None;
            }
            if slot.fingerprint == fingerprint {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    fn insert(&mut self, fingerprint: u64, seq: u64) {
        let mut i = self.home(fingerprint);
        while self.index[i].fingerprint != 0 {
            i = (i + 1) & self.mask;
        }
        self.index[i] = Slot { fingerprint, seq };
    }

    /// Empties index slot `hole` and shifts later members of its probe chain back.
    fn remove_at(&mut self, mut hole: usize) {
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let slot = self.index[j];
            if slot.fingerprint == 0 {
                break;
            }
            let home = self.home(slot.fingerprint);
            // `slot` may move into the hole only if its home is not cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.index[hole] = slot;
                hole = j;
            }
        }
        self.index[hole] = Slot::default();
    }

    /// Drops the oldest entry from the ring and the index.
    fn pop_front(&mut self) {
        if let Some((fingerprint, _)) = self.ring.pop_front() {
            let seq = self.head_seq;
            self.head_seq += 1;
            if let Some(at) = self.find(fingerprint)
                && self.index[at].seq == seq
            {
                self.remove_at(at);
            }
        }
    }

    fn observe(&mut self, fingerprint: u64, now: u64, lifetime: u64) -> Class {
        while let Some(&(_, expires)) = self.ring.front() {
            if expires > now {
                break;
            }
            self.pop_front();
        }
        if let Some(at) = self.find(fingerprint) {
            let seq = self.index[at].seq;
            let live = seq
                .checked_sub(self.head_seq)
                .and_then(|i| self.ring.get(i as usize))
                .is_some_and(|&(_, expires)| expires > now);
            if live {
                self.retransmissions += 1;
                return Class::Retransmission;
            }
            // Out of arrival order (times from several threads): expired all the same.
            self.remove_at(at);
        }
        if self.ring.len() == self.capacity {
            self.pop_front();
            self.evicted += 1;
        }
        let seq = self.head_seq + self.ring.len() as u64;
        self.ring
            .push_back((fingerprint, now.saturating_add(lifetime)));
        self.insert(fingerprint, seq);
        self.originals += 1;
        Class::Original
    }

    fn forget(&mut self, fingerprint: u64) -> bool {
        match self.find(fingerprint) {
            Some(at) => {
                // The ring entry stays until it expires; with no index slot it is inert.
                self.remove_at(at);
                true
            }
            None => false,
        }
    }
}

/// Tells originals from retransmissions (see the module documentation).
///
/// All methods take `&self`; the table is split into independently locked stripes chosen by
/// the key, so concurrent threads rarely meet. Keys are 64-bit fingerprints under a random
/// per-detector hash key: two live transactions collide with probability about n/2^64 per
/// lookup (n = keys remembered), and a sender cannot aim at someone else's transaction.
pub struct RetransmissionDetector {
    hasher: RandomState,
    stripes: Box<[CachePadded<Mutex<Table>>]>,
    lifetime_ns: u64,
}

impl std::fmt::Debug for RetransmissionDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetransmissionDetector")
            .field("stripes", &self.stripes.len())
            .field("lifetime_ns", &self.lifetime_ns)
            .field("stats", &self.stats())
            .finish()
    }
}

impl RetransmissionDetector {
    /// A detector with all of its memory allocated up front.
    pub fn new(config: DetectorConfig) -> Result<Self, ConfigError> {
        check_capacity("detector capacity", config.capacity)?;
        check_capacity("detector stripes", config.stripes)?;
        if config.stripes > config.capacity {
            return Err(ConfigError::TooLarge {
                what: "detector stripes",
                max: config.capacity,
            });
        }
        if config.t1_ns == 0 {
            return Err(ConfigError::ZeroDuration("T1"));
        }
        let per_stripe = config.capacity.div_ceil(config.stripes);
        let stripes = (0..config.stripes)
            .map(|_| CachePadded::new(Mutex::new(Table::new(per_stripe))))
            .collect();
        Ok(Self {
            hasher: RandomState::new(),
            stripes,
            lifetime_ns: config.t1_ns.saturating_mul(64),
        })
    }

    /// How long a key is remembered (64·T1).
    pub fn lifetime_ns(&self) -> u64 {
        self.lifetime_ns
    }

    /// The transaction key of a scanned request.
    pub fn key(&self, request: &SipRequest<'_>) -> Result<TransactionKey, KeyError> {
        let via = request.via.ok_or(KeyError::MissingVia)?;
        let (sent_by, branch) = via_parts(via)?;
        match branch {
            // The common case needs neither tag: skip parsing From and To.
            Some(branch) if branch.starts_with(BRANCH_COOKIE) => {
                Ok(self.rfc3261_key(branch, sent_by, request.method.as_bytes(), request.cseq))
            }
            _ => self.key_from_parts(&TransactionParts::try_from(request)?),
        }
    }

    fn rfc3261_key(
        &self,
        branch: &[u8],
        sent_by: &[u8],
        method: &[u8],
        cseq: u32,
    ) -> TransactionKey {
        let mut h = self.hasher.build_hasher();
        h.write_u8(1);
        // One write of the fields laid end to end hashes faster than a write per field.
        let mut buf = [0u8; 192];
        // Three separators and the four bytes of the CSeq number.
        let total = branch.len() + sent_by.len() + method.len() + 7;
        if total <= buf.len() {
            let mut at = 0;
            for (part, lower) in [(branch, false), (sent_by, true), (method, false)] {
                let field = &mut buf[at..at + part.len()];
                field.copy_from_slice(part);
                if lower {
                    field.make_ascii_lowercase();
                }
                at += part.len() + 1;
            }
            buf[at..at + 4].copy_from_slice(&cseq.to_le_bytes());
            h.write(&buf[..at + 4]);
            return TransactionKey(h.finish().max(1));
        }
        h.write(branch);
        h.write_u8(0);
        write_lowercase(&mut h, sent_by);
        Self::finish(h, method, cseq)
    }

    fn finish(mut h: impl Hasher, method: &[u8], cseq: u32) -> TransactionKey {
        h.write_u8(0);
        h.write(method);
        h.write_u8(0);
        h.write_u32(cseq);
        TransactionKey(h.finish().max(1))
    }

    /// The transaction key from its parts: RFC 3261 (branch, sent-by, method, CSeq number)
    /// when the top Via branch starts with `z9hG4bK`, otherwise the RFC 2543 key
    /// (Request-URI, From tag, To tag, Call-ID, CSeq, method and the whole top Via).
    pub fn key_from_parts(&self, parts: &TransactionParts<'_>) -> Result<TransactionKey, KeyError> {
        let (sent_by, branch) = via_parts(parts.top_via)?;
        if let Some(branch) = branch.filter(|b| b.starts_with(BRANCH_COOKIE)) {
            return Ok(self.rfc3261_key(branch, sent_by, parts.method, parts.cseq));
        }
        let mut h = self.hasher.build_hasher();
        h.write_u8(2);
        h.write(parts.request_uri);
        h.write_u8(0);
        for tag in [parts.from_tag, parts.to_tag] {
            match tag {
                Some(t) => {
                    h.write_u8(1);
                    h.write(t);
                }
                None => h.write_u8(0),
            }
            h.write_u8(0);
        }
        h.write(parts.call_id);
        h.write_u8(0);
        h.write(trim(parts.top_via));
        Ok(Self::finish(h, parts.method, parts.cseq))
    }

    fn stripe(&self, key: TransactionKey) -> &Mutex<Table> {
        &self.stripes[(key.0 as usize) % self.stripes.len()]
    }

    fn lock(&self, key: TransactionKey) -> crate::sync::MutexGuard<'_, Table> {
        self.stripe(key)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a request with `key` arriving at `now_ns`: [`Class::Original`] the first time
    /// (or once 64·T1 have passed since), [`Class::Retransmission`] while the key is
    /// remembered. A retransmission does not extend the key's life (Timer B runs from the
    /// first copy).
    pub fn observe(&self, key: TransactionKey, now_ns: u64) -> Class {
        #[cfg(loadctl_loom_mutant)]
        {
            return self.observe_split(key, now_ns);
        }
        #[cfg(not(loadctl_loom_mutant))]
        self.lock(key).observe(key.0, now_ns, self.lifetime_ns)
    }

    /// Deliberately broken (loom mutant): looks the key up under the lock, lets go of it, and
    /// records the key under a second acquisition. Two copies arriving together can then both
    /// be taken for the original (both land in the primary queue).
    #[cfg(loadctl_loom_mutant)]
    fn observe_split(&self, key: TransactionKey, now_ns: u64) -> Class {
        let known = self.lock(key).find(key.0).is_some();
        if known {
            return self.lock(key).observe(key.0, now_ns, self.lifetime_ns);
        }
        let mut table = self.lock(key);
        if table.find(key.0).is_some() {
            // Someone recorded it in between: overwrite the record, as the race would.
            table.forget(key.0);
        }
        table.observe(key.0, now_ns, self.lifetime_ns)
    }

    /// Forgets `key` so its next copy counts as an original (say, when the first copy was
    /// dropped and the caller wants the next one in the primary queue). True when it was
    /// remembered.
    pub fn forget(&self, key: TransactionKey) -> bool {
        self.lock(key).forget(key.0)
    }

    /// The counters, summed over the stripes.
    pub fn stats(&self) -> DetectorStats {
        let mut s = DetectorStats::default();
        for stripe in &self.stripes {
            let t = stripe
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s.tracked += t.index.iter().filter(|x| x.fingerprint != 0).count() as u64;
            s.originals += t.originals;
            s.retransmissions += t.retransmissions;
            s.evicted += t.evicted;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn invite(branch: &str, cseq: u32) -> String {
        format!(
            "INVITE sip:bob@b.example SIP/2.0\r\n\
             Via: SIP/2.0/UDP pc33.a.example:5060;branch={branch};rport\r\n\
             Via: SIP/2.0/UDP proxy.example;branch=z9hG4bKouter\r\n\
             From: Alice <sip:alice@a.example>;tag=1928301774\r\n\
             To: Bob <sip:bob@b.example>\r\n\
             Call-ID: a84b4c76e66710@pc33.a.example\r\n\
             CSeq: {cseq} INVITE\r\n\r\n"
        )
    }

    fn key_of(d: &RetransmissionDetector, msg: &str) -> TransactionKey {
        d.key(&crate::sip::scan(msg.as_bytes()).expect("scan"))
            .expect("key")
    }

    fn detector(capacity: usize, stripes: usize) -> RetransmissionDetector {
        RetransmissionDetector::new(DetectorConfig {
            capacity,
            stripes,
            ..DetectorConfig::default()
        })
        .expect("config")
    }

    #[test]
    fn strict_priority_and_fifo_within_a_queue() {
        let s = Scheduler::new(SchedulerConfig::priority(4, 4)).expect("config");
        s.push(1, Class::Retransmission).expect("room");
        s.push(2, Class::Original).expect("room");
        s.push(3, Class::Retransmission).expect("room");
        s.push(4, Class::Original).expect("room");
        let order: Vec<_> = std::iter::from_fn(|| s.pop()).map(|(x, _)| x).collect();
        assert_eq!(order, [2, 4, 1, 3]);
        let st = s.stats();
        assert_eq!((st.primary.enqueued, st.primary.served), (2, 2));
        assert_eq!((st.secondary.enqueued, st.secondary.served), (2, 2));
    }

    #[test]
    fn tail_drop_hands_the_item_back_and_counts_it() {
        let s = Scheduler::new(SchedulerConfig::priority(2, 1)).expect("config");
        assert!(s.push("a", Class::Original).is_ok());
        assert!(s.push("b", Class::Original).is_ok());
        assert_eq!(
            s.push("c", Class::Original),
            Err(Full {
                item: "c",
                class: Class::Original
            })
        );
        // The secondary queue has its own room.
        assert!(s.push("r", Class::Retransmission).is_ok());
        assert!(s.push("r2", Class::Retransmission).is_err());
        let st = s.stats();
        assert_eq!((st.primary.len, st.primary.dropped), (2, 1));
        assert_eq!((st.secondary.len, st.secondary.dropped), (1, 1));
        assert_eq!(s.len(), 3);
        assert_eq!(s.len_of(Class::Retransmission), 1);
    }

    #[test]
    fn fifo_discipline_keeps_arrival_order_in_one_queue() {
        let s = Scheduler::new(SchedulerConfig::fifo(3)).expect("config");
        s.push(1, Class::Retransmission).expect("room");
        s.push(2, Class::Original).expect("room");
        s.push(3, Class::Retransmission).expect("room");
        assert!(s.push(4, Class::Original).is_err());
        let order: Vec<_> = std::iter::from_fn(|| s.pop()).collect();
        assert_eq!(
            order,
            [
                (1, Class::Retransmission),
                (2, Class::Original),
                (3, Class::Retransmission)
            ]
        );
        let st = s.stats();
        assert_eq!(st.secondary, QueueStats::default());
        assert_eq!((st.primary.enqueued, st.primary.dropped), (3, 1));
    }

    #[test]
    fn bad_configs_are_refused() {
        assert_eq!(
            Scheduler::<u8>::new(SchedulerConfig::priority(0, 1)).err(),
            Some(ConfigError::ZeroCapacity("primary queue capacity"))
        );
        assert_eq!(
            Scheduler::<u8>::new(SchedulerConfig::priority(1, 0)).err(),
            Some(ConfigError::ZeroCapacity("secondary queue capacity"))
        );
        assert!(Scheduler::<u8>::new(SchedulerConfig::fifo(MAX_CAPACITY + 1)).is_err());
        assert!(Scheduler::<u8>::new(SchedulerConfig::fifo(1)).is_ok());
        let bad = |c: DetectorConfig| RetransmissionDetector::new(c).err();
        let d = DetectorConfig::default();
        assert!(bad(DetectorConfig { capacity: 0, ..d }).is_some());
        assert!(bad(DetectorConfig { stripes: 0, ..d }).is_some());
        assert!(
            bad(DetectorConfig {
                capacity: 4,
                stripes: 8,
                ..d
            })
            .is_some()
        );
        assert_eq!(
            bad(DetectorConfig { t1_ns: 0, ..d }),
            Some(ConfigError::ZeroDuration("T1"))
        );
    }

    #[test]
    fn many_producers_and_consumers_lose_nothing() {
        let s = Scheduler::new(SchedulerConfig::priority(64, 64)).expect("config");
        let served = AtomicU64::new(0);
        let dropped = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for p in 0..2u64 {
                let (s, dropped) = (&s, &dropped);
                scope.spawn(move || {
                    for i in 0..20_000u64 {
                        let class = if i % 3 == 0 {
                            Class::Retransmission
                        } else {
                            Class::Original
                        };
                        if s.push(p * 1_000_000 + i, class).is_err() {
                            dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            for _ in 0..2 {
                let (s, served) = (&s, &served);
                scope.spawn(move || {
                    for _ in 0..200_000 {
                        if s.pop().is_some() {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let rest = std::iter::from_fn(|| s.pop()).count() as u64;
        let served = served.load(Ordering::Relaxed) + rest;
        assert_eq!(served + dropped.load(Ordering::Relaxed), 40_000);
        let st = s.stats();
        assert_eq!(st.primary.served + st.secondary.served, served);
        assert_eq!(
            st.primary.dropped + st.secondary.dropped,
            dropped.load(Ordering::Relaxed)
        );
    }

    #[test]
    fn retransmission_is_recognised_until_timer_b() {
        let d = detector(1024, 4);
        let k = key_of(&d, &invite("z9hG4bK776asdhds", 1));
        assert_eq!(d.observe(k, 0), Class::Original);
        for t in [SEC / 2, 3 * SEC / 2, 31 * SEC + SEC / 2] {
            assert_eq!(d.observe(k, t), Class::Retransmission, "at {t}");
        }
        // Timer B (32 s after the first copy) is over: a copy now starts afresh.
        assert_eq!(d.observe(k, 32 * SEC), Class::Original);
        let st = d.stats();
        assert_eq!((st.originals, st.retransmissions, st.evicted), (2, 3, 0));
        assert_eq!(st.tracked, 1);
    }

    #[test]
    fn rfc3261_key_is_branch_sent_by_method_and_cseq() {
        let d = detector(1024, 4);
        let base = key_of(&d, &invite("z9hG4bK1", 1));
        // Other headers change, the key does not: the branch identifies the transaction.
        let other_call_id = invite("z9hG4bK1", 1).replace("a84b4c76e66710", "zzz");
        assert_eq!(key_of(&d, &other_call_id), base);
        // sent-by host compares without case; white space in the protocol is allowed.
        let spaced = invite("z9hG4bK1", 1).replace(
            "SIP/2.0/UDP pc33.a.example:5060",
            "SIP / 2.0 / UDP  PC33.A.example:5060 ",
        );
        assert_eq!(key_of(&d, &spaced), base);
        assert_ne!(key_of(&d, &invite("z9hG4bK2", 1)), base);
        assert_ne!(key_of(&d, &invite("z9hG4bK1", 2)), base);
        let other_host = invite("z9hG4bK1", 1).replace("pc33.a.example:5060", "pc34.a.example");
        assert_ne!(key_of(&d, &other_host), base);
        let ack = invite("z9hG4bK1", 1)
            .replacen("INVITE sip", "ACK sip", 1)
            .replace("1 INVITE", "1 ACK");
        assert_ne!(key_of(&d, &ack), base, "ACK is not a copy of the INVITE");
    }

    #[test]
    fn rfc2543_fallback_uses_the_dialog_fields() {
        let d = detector(1024, 4);
        let old = invite("1234", 7);
        let base = key_of(&d, &old);
        assert_eq!(key_of(&d, &old.clone()), base);
        for changed in [
            old.replace("a84b4c76e66710", "other-call"),
            old.replace("tag=1928301774", "tag=5"),
            old.replace("INVITE sip:bob@b.example", "INVITE sip:carol@b.example"),
            old.replace(";rport", ";received=192.0.2.1"),
            old.replace("7 INVITE", "8 INVITE"),
            old.replace(
                "To: Bob <sip:bob@b.example>",
                "To: Bob <sip:bob@b.example>;tag=9",
            ),
        ] {
            assert_ne!(key_of(&d, &changed), base, "{changed}");
        }
        // No branch at all: also RFC 2543.
        let no_branch = old.replace(";branch=1234", "");
        assert_ne!(key_of(&d, &no_branch), base);
        assert_eq!(key_of(&d, &no_branch), key_of(&d, &no_branch.clone()));
    }

    /// Keys of every size around the one-write buffer's edge (192 bytes) are made without a
    /// panic and stay equal for equal fields (the fuzzer found an off-by-one here).
    #[test]
    fn keys_at_the_buffer_edge() {
        let d = detector(64, 1);
        for extra in 150..200 {
            let branch = format!("z9hG4bK{}", "b".repeat(extra));
            let via = format!("SIP/2.0/UDP host.example:5060;branch={branch}");
            let parts = TransactionParts {
                method: b"INVITE",
                request_uri: b"sip:x",
                top_via: via.as_bytes(),
                call_id: b"c",
                cseq: 1,
                from_tag: None,
                to_tag: None,
            };
            let a = d.key_from_parts(&parts).expect("key");
            assert_eq!(d.key_from_parts(&parts).expect("key"), a);
            let other = TransactionParts { cseq: 2, ..parts };
            assert_ne!(d.key_from_parts(&other).expect("key"), a, "extra {extra}");
        }
    }

    #[test]
    fn malformed_via_is_a_clear_error() {
        let d = detector(16, 1);
        let no_via = invite("z9hG4bK1", 1).replace(
            "Via: SIP/2.0/UDP pc33.a.example:5060;branch=z9hG4bK1;rport\r\n\
             Via: SIP/2.0/UDP proxy.example;branch=z9hG4bKouter\r\n",
            "",
        );
        let r = crate::sip::scan(no_via.as_bytes()).expect("scan");
        assert_eq!(d.key(&r), Err(KeyError::MissingVia));
        for via in [
            &b"garbage"[..],
            b"SIP/2.0/",
            b"SIP/2.0/UDP ;branch=z9hG4bK1",
            b"",
        ] {
            let parts = TransactionParts {
                method: b"INVITE",
                request_uri: b"sip:x",
                top_via: via,
                call_id: b"c",
                cseq: 1,
                from_tag: None,
                to_tag: None,
            };
            assert_eq!(d.key_from_parts(&parts), Err(KeyError::BadVia));
        }
    }

    #[test]
    fn the_key_takes_the_top_via_parms_own_branch() {
        // a `;branch=` inside a quoted value is text, not a parameter; a quote left open
        // leaves the via-parm's end unknown
        let d = detector(16, 1);
        let parts = |top_via: &'static [u8]| TransactionParts {
            method: b"INVITE",
            request_uri: b"sip:x",
            top_via,
            call_id: b"c",
            cseq: 1,
            from_tag: None,
            to_tag: None,
        };
        assert_eq!(
            d.key_from_parts(&parts(
                b"SIP/2.0/UDP h;x=\"a;branch=z9hG4bKfake\";branch=z9hG4bKreal"
            )),
            d.key_from_parts(&parts(b"SIP/2.0/UDP h;branch=z9hG4bKreal"))
        );
        assert_eq!(
            d.key_from_parts(&parts(b"SIP/2.0/UDP h;x=\"a;branch=z9hG4bK1")),
            Err(KeyError::BadVia)
        );
    }

    #[test]
    fn full_table_forgets_the_oldest_and_says_so() {
        let d = detector(8, 1);
        let keys: Vec<_> = (0..12)
            .map(|i| key_of(&d, &invite(&format!("z9hG4bK{i}"), 1)))
            .collect();
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(d.observe(k, i as u64), Class::Original);
        }
        let st = d.stats();
        assert_eq!((st.tracked, st.evicted), (8, 4));
        // The four oldest were forgotten; the eight newest are still known.
        for &k in &keys[4..] {
            assert_eq!(d.observe(k, 100), Class::Retransmission);
        }
        assert_eq!(d.observe(keys[0], 100), Class::Original);
    }

    #[test]
    fn forget_makes_the_next_copy_an_original() {
        let d = detector(64, 2);
        let k = key_of(&d, &invite("z9hG4bKf", 1));
        assert!(!d.forget(k));
        assert_eq!(d.observe(k, 0), Class::Original);
        assert!(d.forget(k));
        assert_eq!(d.observe(k, 1), Class::Original);
        assert_eq!(d.observe(k, 2), Class::Retransmission);
    }

    /// The table against a model (a map of key → expiry) over random traffic, with deletion
    /// from the middle of probe chains (forget) and expiry: a broken backward shift loses keys.
    #[test]
    fn table_agrees_with_a_model() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let lifetime = 1_000;
        // A tiny index so chains are long and wrap around.
        let mut table = Table::new(48);
        // The model: key -> (sequence, expiry) and the arrival-order ring of (key, sequence,
        // expiry); forgotten keys stay in the ring (they still take room) as in the table.
        let mut model: std::collections::HashMap<u64, (u64, u64)> = Default::default();
        let mut ring: VecDeque<(u64, u64, u64)> = VecDeque::new();
        let mut seq = 0;
        let mut now = 0;
        let drop_front = |model: &mut std::collections::HashMap<u64, (u64, u64)>,
                          ring: &mut VecDeque<(u64, u64, u64)>| {
            if let Some((f, s, _)) = ring.pop_front()
                && model.get(&f).is_some_and(|&(ms, _)| ms == s)
            {
                model.remove(&f);
            }
        };
        for step in 0..200_000 {
            now += next() % 8;
            // 64 possible keys with few distinct high bits: many share a home slot.
            let fp = ((next() % 8) << 32) | ((next() % 8) + 1);
            while ring.front().is_some_and(|&(_, _, e)| e <= now) {
                drop_front(&mut model, &mut ring);
            }
            if next() % 10 == 0 {
                let had = model.remove(&fp).is_some();
                assert_eq!(table.forget(fp), had, "step {step}");
                continue;
            }
            let expected = if model.contains_key(&fp) {
                Class::Retransmission
            } else {
                Class::Original
            };
            assert_eq!(table.observe(fp, now, lifetime), expected, "step {step}");
            if expected == Class::Original {
                if ring.len() == 48 {
                    drop_front(&mut model, &mut ring);
                }
                ring.push_back((fp, seq, now + lifetime));
                model.insert(fp, (seq, now + lifetime));
                seq += 1;
            }
        }
        assert!(table.evicted > 0, "the run must exercise eviction");
    }

    #[test]
    fn steady_state_allocates_nothing() {
        let d = detector(4096, 4);
        let msgs: Vec<_> = (0..2048)
            .map(|i| invite(&format!("z9hG4bK{i}"), 1))
            .collect();
        let scanned: Vec<_> = msgs
            .iter()
            .map(|m| crate::sip::scan(m.as_bytes()).expect("scan"))
            .collect();
        let s = Scheduler::new(SchedulerConfig::priority(4096, 4096)).expect("config");
        let mut now = 0;
        let round = |now: &mut u64| {
            for r in &scanned {
                let class = d.observe(d.key(r).expect("key"), *now);
                let _ = s.push(r.cseq, class);
                *now += 1_000_000;
            }
            while s.pop().is_some() {}
        };
        round(&mut now);
        let info = allocation_counter::measure(|| {
            for _ in 0..4 {
                round(&mut now);
            }
        });
        assert_eq!(info.count_total, 0);
    }
}
