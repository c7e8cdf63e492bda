//! A worker's decision: each shard's own mix of requests per hop, the loss draw and the rate
//! bucket against the feedback in the shared hop cells.

use super::*;

/// One worker's per-hop counters and category mix.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShardHopStats {
    /// Requests forwarded (probes included).
    pub forwarded: u64,
    /// Liveness probes sent to a suspended hop.
    pub probes: u64,
    /// Shed by the loss-based algorithm.
    pub shed_loss: u64,
    /// Shed by the rate-based bucket.
    pub shed_rate: u64,
    /// Shed because the hop is suspended.
    pub shed_unreachable: u64,
    /// Reducible requests seen.
    pub reducible: u64,
    /// Priority requests seen.
    pub priority: u64,
    /// Requests that overload control never holds back (ACK, CANCEL), seen
    /// ([`ClientShard::exempt`]).
    pub exempt: u64,
}

/// The fewest requests a mix sample is taken from: a sampling period with fewer goes on.
pub const MIX_MIN_SAMPLE: u32 = 20;

/// The smallest step the mix estimate takes toward a new sample (see [`ClientShard`]).
const MIX_MIN_STEP: f64 = 0.1;

/// The largest `(reducible + other) / reducible` the estimate holds (a mix with no reducible
/// request at all).
const SPREAD_MAX: f64 = 1e9;

/// One worker's view of one hop's traffic mix (RFC 7339 §7.2) and its discard state.
#[derive(Clone, Copy, Debug)]
struct Mix {
    /// Reducible requests offered in this sampling period.
    reducible: u32,
    /// Other requests offered in it (priority and exempt).
    other: u32,
    /// Reducible requests forwarded in it.
    forwarded: u32,
    since_ns: u64,
    started: bool,
    /// The estimate of `(reducible + other) / reducible`, the reciprocal of §7.2's `cat1`.
    spread: f64,
    /// Other requests per reducible one forwarded, as last measured (infinite: not yet).
    followers: f64,
    /// The loss fraction in force at the last request counted (0: no loss control).
    p: f64,
    /// This period ends as soon as it holds a sample (the first one under control).
    quick: bool,
    /// Per category: credit toward the next admission, and the random threshold it must reach.
    credit: [f64; 2],
    threshold: [f64; 2],
}

impl Mix {
    fn new(config: &ClientConfig) -> Mix {
        Mix {
            reducible: 0,
            other: 0,
            forwarded: 0,
            since_ns: 0,
            started: false,
            spread: (1.0 / config.reducible_share).min(SPREAD_MAX),
            followers: f64::INFINITY,
            p: 0.0,
            quick: false,
            credit: [0.0; 2],
            threshold: [0.5; 2],
        }
    }
}

/// One worker's side of a [`Client`]: random numbers, the category mix per hop, counters.
/// Owned by one thread; allocates only when created.
///
/// # The loss algorithm's mix
/// RFC 7339 §7.2 converts `oc` onto the reducible share `cat1` of the requests offered to the
/// hop, sampled "every 5-10 seconds". Sampled as it stands, that loop swings: requests of the
/// second category (ACK, BYE, re-INVITE) follow the reducible ones admitted a moment before, so
/// shedding more INVITEs lowers the next sample's second category and the next conversion
/// sheds fewer — with two followers per call at `oc=50` the loop gain is −1 (an oscillation
/// that never dies), above it the loop alternates between shedding every INVITE and too few.
/// Here each worker:
/// - counts every request offered to the hop, ACK and CANCEL too ([`ClientShard::exempt`]):
///   they are not subject to reduction and belong to the second category;
/// - every [`ClientConfig::mix_period`] (extended until it holds [`MIX_MIN_SAMPLE`] requests)
///   measures `k = (reducible + other) / reducible` and `c = other / reducible forwarded` (the
///   second-category requests per admitted reducible one; a period that forwarded none keeps
///   the last `c`), and moves its estimate toward `k` by `1 / (1 + p·c)` of the difference
///   (at least a tenth), `p = oc / 100`. When the second
///   category follows admissions (`other = c · forwarded`), that step lands on the fixed point
///   — forwarded = (1 − p) × offered — in one period; when it does not depend on them, the
///   step is a damped approach to it. Either way no period overshoots;
/// - sheds the converted share `p·k` of the reducible requests (above 1: all of them, and
///   `(p·k − 1) / (k − 1)` of the others) by randomised error diffusion: a credit grows by the
///   share to forward with each request, and a request goes when the credit reaches a
///   threshold drawn anew after each admission. The long-run share is exact and any second's
///   admissions are within one or two of it, where independent draws would scatter them by
///   the binomial's √n; which request goes cannot be foretold by a sender.
#[derive(Debug)]
pub struct ClientShard {
    rng: u64,
    /// The key each cell held when this shard last decided for it: a cell given to another
    /// hop ([`Client::hop`]) starts its mix and counters again.
    keys: Box<[u64]>,
    mix: Box<[Mix]>,
    stats: Box<[ShardHopStats]>,
}

impl ClientShard {
    /// A worker's shard for `client`; `seed` seeds its random numbers (give each worker its
    /// own, e.g. its index, so runs can be repeated).
    pub fn new(client: &Client, seed: u64) -> ClientShard {
        let n = client.cells.len();
        ClientShard {
            rng: splitmix(seed ^ 0x6f63_2d63_6c69_656e),
            keys: vec![0; n].into_boxed_slice(),
            mix: vec![Mix::new(&client.config); n].into_boxed_slice(),
            stats: vec![ShardHopStats::default(); n].into_boxed_slice(),
        }
    }

    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix(self.rng)
    }

    /// This worker's counters for `hop`, since the hop got its cell.
    pub fn stats(&self, client: &Client, hop: Hop) -> ShardHopStats {
        let i = hop.0 % self.stats.len();
        if self.current(client, i) {
            self.stats[i]
        } else {
            ShardHopStats::default()
        }
    }

    /// The reducible share this worker uses for `hop` now (its estimate of RFC 7339 §7.2's
    /// `cat1`; [`ClientConfig::reducible_share`] before the first sample).
    pub fn reducible_share(&self, client: &Client, hop: Hop) -> f64 {
        let i = hop.0 % self.mix.len();
        if self.current(client, i) {
            1.0 / self.mix[i].spread
        } else {
            client.config.reducible_share
        }
    }

    /// Whether this shard's mix and counters for cell `i` are its present hop's.
    fn current(&self, client: &Client, i: usize) -> bool {
        self.keys[i] == client.cells[i].key.load(Ordering::Relaxed)
    }

    /// Whether to send a request of `category` to `hop` at `now_ns` (see the module
    /// documentation). No allocation, no lock; a shared write only when a rate-controlled
    /// request is admitted, or a suspended hop's probe is taken.
    pub fn decide(
        &mut self,
        client: &Client,
        hop: Hop,
        now_ns: u64,
        category: Category,
    ) -> OcVerdict {
        let i = hop.0 % self.mix.len();
        let cell = &client.cells[i];
        let key = cell.key.load(Ordering::Relaxed);
        self.own(client, i, key);
        cell.touch(now_ns);
        let verdict = self.verdict(client, i, now_ns, category);
        if category == Category::Reducible
            && matches!(verdict, OcVerdict::Forward | OcVerdict::Probe)
        {
            let m = &mut self.mix[i];
            m.forwarded = m.forwarded.saturating_add(1);
        }
        let s = &mut self.stats[i];
        match category {
            Category::Reducible => s.reducible += 1,
            Category::Priority => s.priority += 1,
        }
        match verdict {
            OcVerdict::Forward => s.forwarded += 1,
            OcVerdict::Probe => {
                s.forwarded += 1;
                s.probes += 1;
            }
            OcVerdict::Shed(ShedReason::Loss) => s.shed_loss += 1,
            OcVerdict::Shed(ShedReason::Rate) => s.shed_rate += 1,
            OcVerdict::Shed(ShedReason::Unreachable) => s.shed_unreachable += 1,
        }
        verdict
    }

    /// A request sent to `hop` at `now_ns` that overload control never holds back (ACK and
    /// CANCEL: [`super::super::Category::of`] gives none): not decided, but counted in the
    /// mix, where it belongs to the second category (RFC 7339 §7.2: "requests that are not
    /// subject to reduction"). Without these the loss algorithm sheds too much of a call mix.
    pub fn exempt(&mut self, client: &Client, hop: Hop, now_ns: u64) {
        let i = hop.0 % self.mix.len();
        self.own(client, i, client.cells[i].key.load(Ordering::Relaxed));
        let cell = &client.cells[i];
        cell.touch(now_ns);
        let active = State(cell.state.load(Ordering::Acquire)).active(now_ns / 1_000_000);
        self.count_mix(client, i, now_ns, loss_fraction(active), None);
        self.stats[i].exempt += 1;
    }

    /// Starts cell `i`'s mix and counters again when it holds another hop than this shard saw.
    fn own(&mut self, client: &Client, i: usize, key: u64) {
        if self.keys[i] != key {
            self.keys[i] = key;
            self.mix[i] = Mix::new(&client.config);
            self.stats[i] = ShardHopStats::default();
        }
    }

    fn verdict(&mut self, client: &Client, i: usize, now_ns: u64, category: Category) -> OcVerdict {
        let c = &client.config;
        let cell = &client.cells[i];
        let active = State(cell.state.load(Ordering::Acquire)).active(now_ns / 1_000_000);
        self.count_mix(client, i, now_ns, loss_fraction(active), Some(category));

        // RFC 7339 §5.9: a suspended hop gets only its probes.
        let fails = cell.fails.load(Ordering::Acquire);
        if fails as u32 & !PROBE_OUT >= c.suspend_after {
            let at = cell.probe_at.load(Ordering::Acquire);
            if now_ns >= at {
                let exponent = (fails >> 32).min(40) as u32;
                if cell
                    .probe_at
                    .compare_exchange(
                        at,
                        now_ns.saturating_add(backoff(c, exponent)),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    cell.fails.fetch_or(u64::from(PROBE_OUT), Ordering::AcqRel);
                    return OcVerdict::Probe;
                }
            }
            return OcVerdict::Shed(ShedReason::Unreachable);
        }

        match active {
            None => OcVerdict::Forward,
            Some((Algorithm::Loss, oc)) => self.loss(i, oc, category),
            Some((Algorithm::Rate, oc)) => self.rate(c, cell, oc, now_ns, category),
        }
    }

    /// Counts a request in cell `i`'s mix (`None`: exempt), `p` the loss fraction in force,
    /// first closing the sampling period if it is over (see the type's documentation).
    fn count_mix(
        &mut self,
        client: &Client,
        i: usize,
        now_ns: u64,
        p: f64,
        category: Option<Category>,
    ) {
        let m = &mut self.mix[i];
        let n = m.reducible.saturating_add(m.other);
        // A period ends when it is over; one that saw control begin or end ends at once (its
        // counts belong to the other regime), and the first under control as soon as it holds
        // a sample, so that the mix seen without control (whose followers come from every
        // reducible request) is corrected within a fraction of a period.
        let switched = (p > 0.0) != (m.p > 0.0);
        let due = n >= MIX_MIN_SAMPLE
            && (m.quick || now_ns.saturating_sub(m.since_ns) >= client.mix_period_ns);
        if !m.started {
            m.started = true;
            m.since_ns = now_ns;
        } else if due || switched {
            if n >= MIX_MIN_SAMPLE {
                let (r, o) = (f64::from(m.reducible), f64::from(m.other));
                let sample = if m.reducible == 0 {
                    SPREAD_MAX
                } else {
                    ((r + o) / r).min(SPREAD_MAX)
                };
                // Second-category requests per reducible one forwarded; a period that
                // forwarded none (all shed) keeps the last measure.
                if m.forwarded > 0 {
                    m.followers = o / f64::from(m.forwarded);
                }
                // Without loss control nothing follows from shedding: the sample is taken whole
                // (0·∞ would be NaN).
                let step = if m.p > 0.0 {
                    (1.0 / (1.0 + m.p * m.followers)).clamp(MIX_MIN_STEP, 1.0)
                } else {
                    1.0
                };
                // At most doubled per period: a period without reducible requests (a lull,
                // or one filled by a burst of BYEs) does not shed all of them for long after.
                m.spread = (m.spread + step * (sample - m.spread)).min(2.0 * m.spread);
            }
            if switched && p > 0.0 && m.p == 0.0 && m.followers.is_finite() {
                // Control begins on a mix measured with every reducible request forwarded.
                // If `c` second-category requests follow each admitted one, shedding
                // q = p·k of them leaves k = 1 + c·(1 − p·k), so k = (1 + c) / (1 + p·c):
                // start there, not at the uncontrolled 1 + c, which sheds p·(1 + c) — every
                // new request at p = 1 / (1 + c) — until the first period's sample corrects
                // it (with a worker's share of a hop's traffic, most of a second).
                let c = m.followers;
                m.spread = ((1.0 + c) / (1.0 + p * c)).clamp(1.0, SPREAD_MAX);
            }
            m.quick = switched && p > 0.0;
            m.reducible = 0;
            m.other = 0;
            m.forwarded = 0;
            m.since_ns = now_ns;
        }
        m.p = p;
        match category {
            Some(Category::Reducible) => m.reducible = m.reducible.saturating_add(1),
            _ => m.other = m.other.saturating_add(1),
        }
    }

    /// RFC 7339 §7.2's conversion on the estimated mix, and the randomised error diffusion that
    /// sheds the converted share (see the type's documentation).
    fn loss(&mut self, i: usize, oc: u64, category: Category) -> OcVerdict {
        let p = oc.min(100) as f64 / 100.0;
        if p <= 0.0 {
            return OcVerdict::Forward;
        }
        let k = self.mix[i].spread;
        let x = p * k;
        let shed = match category {
            Category::Reducible => x.min(1.0),
            Category::Priority if x <= 1.0 => 0.0,
            Category::Priority => ((x - 1.0) / (k - 1.0)).min(1.0),
        };
        let c = category as usize;
        let m = &mut self.mix[i];
        m.credit[c] += 1.0 - shed;
        if m.credit[c] >= m.threshold[c] {
            m.credit[c] -= 1.0;
            let draw = unit(self.next());
            self.mix[i].threshold[c] = draw;
            OcVerdict::Forward
        } else {
            OcVerdict::Shed(ShedReason::Loss)
        }
    }

    /// RFC 7415 §3.5.2's priority leaky bucket on the shared TAT.
    fn rate(
        &mut self,
        c: &ClientConfig,
        cell: &HopCell,
        oc: u64,
        now_ns: u64,
        category: Category,
    ) -> OcVerdict {
        if oc == 0 {
            return OcVerdict::Shed(ShedReason::Rate);
        }
        let t = interval_ns(oc).ceil();
        let tau = (match category {
            Category::Reducible => c.tau_reducible,
            Category::Priority => c.tau_priority,
        } * t) as u64;
        let t = t as u64;
        // With resonance avoidance, an admission into an empty bucket adds T + u·T.
        let jitter = if c.resonance {
            (uniform_half(self.next()) * t as f64) as i64
        } else {
            0
        };
        let mut tat = cell.tat.load(Ordering::Acquire);
        loop {
            // X' = X − (ta − LCT) = TAT − ta; admitted when X' ≤ TAU.
            if tat > now_ns.saturating_add(tau) {
                return OcVerdict::Shed(ShedReason::Rate);
            }
            // X = max(0, X') + T (+ u·T when the bucket had emptied, §3.5.3).
            let next = if tat <= now_ns {
                now_ns.saturating_add_signed(t as i64 + jitter)
            } else {
                tat.saturating_add(t)
            };
            match cell
                .tat
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return OcVerdict::Forward,
                Err(seen) => tat = seen,
            }
        }
    }
}

/// The share of requests to shed under the values in force (0 without loss control).
fn loss_fraction(active: Option<(Algorithm, u64)>) -> f64 {
    match active {
        Some((Algorithm::Loss, oc)) => oc.min(100) as f64 / 100.0,
        _ => 0.0,
    }
}
