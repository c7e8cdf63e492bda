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
}

#[derive(Clone, Copy, Debug, Default)]
struct Mix {
    reducible: u32,
    priority: u32,
    /// The reducible share in use (< 0: none sampled yet).
    share: f64,
    since_ns: u64,
    started: bool,
}

/// One worker's side of a [`Client`]: random numbers, the category mix per hop, counters.
/// Owned by one thread; allocates only when created.
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
            mix: vec![
                Mix {
                    share: -1.0,
                    ..Mix::default()
                };
                n
            ]
            .into_boxed_slice(),
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

    /// The reducible share this worker uses for `hop` now (the last sampled period's, or
    /// [`ClientConfig::reducible_share`] before one is complete).
    pub fn reducible_share(&self, client: &Client, hop: Hop) -> f64 {
        let i = hop.0 % self.mix.len();
        let m = &self.mix[i];
        if m.share < 0.0 || !self.current(client, i) {
            client.config.reducible_share
        } else {
            m.share
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
        if self.keys[i] != key {
            self.keys[i] = key;
            self.mix[i] = Mix {
                share: -1.0,
                ..Mix::default()
            };
            self.stats[i] = ShardHopStats::default();
        }
        cell.touch(now_ns);
        let verdict = self.verdict(client, i, now_ns, category);
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

    fn verdict(&mut self, client: &Client, i: usize, now_ns: u64, category: Category) -> OcVerdict {
        let c = &client.config;
        let cell = &client.cells[i];
        self.count_mix(client.mix_period_ns, i, now_ns, category);

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

        let state = State(cell.state.load(Ordering::Acquire));
        match state.active(now_ns / 1_000_000) {
            None => OcVerdict::Forward,
            Some((Algorithm::Loss, oc)) => self.loss(c, i, oc, category),
            Some((Algorithm::Rate, oc)) => self.rate(c, cell, oc, now_ns, category),
        }
    }

    fn count_mix(&mut self, mix_period_ns: u64, i: usize, now_ns: u64, category: Category) {
        let m = &mut self.mix[i];
        if !m.started {
            m.started = true;
            m.since_ns = now_ns;
        } else if now_ns.saturating_sub(m.since_ns) >= mix_period_ns {
            let total = u64::from(m.reducible) + u64::from(m.priority);
            if total > 0 {
                m.share = f64::from(m.reducible) / total as f64;
            }
            m.reducible = 0;
            m.priority = 0;
            m.since_ns = now_ns;
        }
        match category {
            Category::Reducible => m.reducible = m.reducible.saturating_add(1),
            Category::Priority => m.priority = m.priority.saturating_add(1),
        }
    }

    /// RFC 7339 §7.2's reference algorithm, with the draw in [0, 1) instead of 1..100.
    fn loss(&mut self, c: &ClientConfig, i: usize, oc: u64, category: Category) -> OcVerdict {
        let p = oc.min(100) as f64 / 100.0;
        if p <= 0.0 {
            return OcVerdict::Forward;
        }
        let m = &self.mix[i];
        let cat1 = if m.share < 0.0 {
            c.reducible_share
        } else {
            m.share
        };
        let r = unit(self.next());
        let drop = if p <= cat1 {
            category == Category::Reducible && r < p / cat1
        } else {
            match category {
                Category::Reducible => true,
                Category::Priority => r < (p - cat1) / (1.0 - cat1),
            }
        };
        if drop {
            OcVerdict::Shed(ShedReason::Loss)
        } else {
            OcVerdict::Forward
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
