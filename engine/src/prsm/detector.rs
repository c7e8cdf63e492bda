//! The retransmission detector: transaction keys (RFC 3261 §17.2.3, the RFC 2543 fallback) in
//! a striped, fixed-size table remembered for Timer B.

use super::*;

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
#[non_exhaustive]
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
pub(super) struct Table {
    /// (fingerprint, expiry) in arrival order; `ring[i]` has sequence number `head_seq + i`.
    ring: VecDeque<(u64, u64)>,
    head_seq: u64,
    capacity: usize,
    index: Box<[Slot]>,
    mask: usize,
    originals: u64,
    retransmissions: u64,
    pub(super) evicted: u64,
}

impl Table {
    pub(super) fn new(capacity: usize) -> Self {
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

    pub(super) fn observe(&mut self, fingerprint: u64, now: u64, lifetime: u64) -> Class {
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

    pub(super) fn forget(&mut self, fingerprint: u64) -> bool {
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
