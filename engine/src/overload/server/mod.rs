//! The server side of RFC 7339 / RFC 7415: from a load signal to the `oc` values each upstream
//! client's responses carry.
//!
//! RFC 7339 §5.3 leaves the law to the server ("the process by which an overloaded server
//! determines the value of the "oc" parameter is considered out of the scope"), and RFC 7415
//! §3.4 asks only that it "periodically evaluate its overload state and estimate a target SIP
//! request rate beyond which it would become overloaded". This module's law, once per
//! [`ServerConfig::period`]:
//!
//! 1. **Capacity.** From the queue signal ([`Load::Queue`]): the service rate `μ̂ = served /
//!    busy time` (smoothed), less what retransmissions took (`μ̂·(1 − served retransmissions /
//!    served)`): the rate of new requests the server can finish.
//! 2. **Target.** `λ* = μ̂_new − (d − D)·μ̂ / H`, at least 0: with the oldest waiting new
//!    request's delay `d` above the target delay `D` ([`ServerConfig::target_delay`]) the
//!    excess backlog `(d − D)·μ̂` is drained over the horizon `H`
//!    ([`ServerConfig::drain`]); below it, the target rises above `μ̂_new` by the same law.
//!    An appliance with its own signal ([`Load::Occupancy`]: CPU, memory, anything with a
//!    target) gets the occupancy law instead, `λ* = λ_admitted · target / measured`, once per
//!    report (report once per period or less often, each report measured over the time since
//!    the previous one; `λ_admitted` is counted over that same interval).
//! 3. **Overload.** Control starts when `d > D` (or the occupancy is above its target), or when
//!    more than [`ServerConfig::retransmission_alarm`] of the requests arriving are
//!    retransmissions (clients are already timing out), and stops after
//!    [`ServerConfig::calm_periods`] periods in which no client needed any reduction.
//! 4. **Demand.** Each client's offered rate of new requests is estimated from what it sent:
//!    a loss client that was told to shed `p` offered `seen / (1 − p)`; a client that does not
//!    take part offered all it sent; a rate client that used at least
//!    [`ServerConfig::busy`] of its rate is constrained, its demand unknown, estimated at
//!    `seen·(1 + probe)` so its rate grows while capacity is free, else `seen·(1 + headroom)`.
//! 5. **Split.** `λ*` is shared max-min fairly over the demands
//!    (water-filling): a client asking less than an equal split
//!    gets what it asks; per-client values may differ (RFC 7339 §5.3). A rate client is told
//!    its share (at least [`ServerConfig::min_rate`]); a loss client the share it must shed,
//!    `1 − share / demand`, rounded up to a whole percent; a client that does not take part has
//!    its requests rejected by the server with the same probability, 503 without Retry-After
//!    (RFC 7339 §5.10.2: "A SIP server that is in overload and has started to throttle incoming
//!    traffic MUST reject some requests from non-participating clients").
//!
//! Every period under overload gets a new `oc-seq` (a timestamp counted in law periods,
//! strictly increasing, its integer part raised with every value for clients that read only
//! that part, on one scale for every server with the same clock and period), so
//! clients restart their validity period with each update (RFC 7339 §5.4); when control stops
//! the server says so with `oc=0;oc-validity=0` and a new `oc-seq` (§5.7: "the SIP server MUST
//! set the value of the "oc-validity" parameter to 0. The SIP server MUST increment the value of
//! "oc-seq" and SHOULD set the value of the "oc" parameter to 0").
//!
//! # Clients the server cannot trust
//! RFC 7339 §11: "servers should monitor client behavior to determine whether they are
//! complying with overload control policies. If a client is not conforming to such policies,
//! then the server should treat it as a non-supporting client". Between operators the
//! neighbour is not trusted, and an attacker on the path can send from any address:
//! - **A table that floods cannot grow.** Clients live in a table of
//!   [`ServerConfig::max_clients`] slots made when the server is, found by a hash with a
//!   random key within a window of 8 slots: a request costs one bounded probe and never an
//!   allocation, whatever keys arrive. A new key takes a free slot, else one of a newcomer or
//!   of a client silent for a second (and, in overload, not given a share); never the slot of
//!   a client still sending. A key with no slot is not tracked.
//! - **Newcomers share one allocation.** A key first seen in overload, and any key without a
//!   slot, is a newcomer: all newcomers count as one client that does not take part, with one
//!   share of the target (its requests shed by the server, §5.10.2). A newcomer becomes a
//!   client of its own at the end of a period in which it sent at least
//!   [`GRADUATE_REQUESTS`] requests (or when overload ends), and is measured from then on. A
//!   flood of one-off source addresses is therefore one client, however many addresses it
//!   uses.
//! - **Participants that do not reduce are detected.** Each period the server holds what a
//!   participant sent while its values held (from the response that carried them for their
//!   `oc-validity`: after it, §4.3, "overload control is not in effect") against what it was
//!   told to send for that time (a rate client its rate, a loss client its share of the
//!   target, allowing the larger of the last two periods' values, since a client hears a
//!   change a round trip late), in a leaky bucket drained at [`CONFORMANCE_SLACK`] times that
//!   rate, and by [`ACTIVATION_REQUESTS`] each time control begins again after the values
//!   lapsed. A bucket above the larger of
//!   [`NONCONFORMING_REQUESTS`] requests and [`NONCONFORMING_SECONDS`] of the allowed rate
//!   marks it non-conforming: from the next period it is treated as a client that does not
//!   take part (the server sheds its excess itself and its demand is what it sends), until
//!   the bucket is back below half of that. With Poisson traffic at its allowed rate the
//!   bucket of a conforming client exceeds `x` requests with a probability of about
//!   `e^(−0.44·x)` whatever the rate (0.44 solves `e^θ − 1 = 1.25·θ`): about 3·10⁻¹⁰ per
//!   period at 50, once in a decade of periods of 100 ms.
//! - **The identity is the caller's.** The key is what the caller says the client is; give the
//!   transport's source address (IP and port), which a client cannot choose the way it writes
//!   its own Via.
//!
//! The algorithm for a client is chosen at its first contact from what it offers, the
//! configured preference first (§5.1), and kept: it changes only if the client stops offering
//! it or [`ServerConfig::hold_algorithm`] (default one hour, §5.8) has passed and the
//! preference differs.
//!
//! A [`Server`] is owned by one thread (`&mut self`); a multi-threaded server serialises
//! calls or keeps one per worker group.

mod clients;
mod config;
mod law;
mod report;

use std::time::Duration;

use clients::Clients;

pub use config::ServerConfig;
use law::loss_percent;
pub use report::{Admission, ClientReport, Load, QueueLoad, ServerStatus};

use super::via::{Feedback, Offer};
use super::{Algorithm, OcError, Seq};
use crate::clock::nanos;
use crate::prsm::Class;

/// The bytes of a client's key that [`ClientReport::key`] holds (an IPv6 address in brackets
/// with its port is 47): a longer key is still told apart from others.
pub const CLIENT_KEY_BYTES: usize = 48;

/// Requests a newcomer sends in one period to become a client of its own.
pub const GRADUATE_REQUESTS: u64 = 2;

/// The drain rate of a participant's conformance bucket, as a multiple of its allowed rate.
pub const CONFORMANCE_SLACK: f64 = 1.25;

/// Requests a participant may send at once each time control begins again after its values
/// lapsed: RFC 7415 §3.5.1 starts the client's bucket afresh at every activation, and
/// §3.5.2's `TAU2 = 10·T` then lets 11 requests through at once.
pub const ACTIVATION_REQUESTS: f64 = 11.0;

/// The least bucket content (requests) that marks a participant non-conforming.
pub const NONCONFORMING_REQUESTS: f64 = 50.0;

/// The bucket content, in seconds of the allowed rate, that marks a participant non-conforming
/// (when more than [`NONCONFORMING_REQUESTS`]).
pub const NONCONFORMING_SECONDS: f64 = 0.5;

/// How long a client must have been silent before a new key may take its slot: a second, or
/// two periods if longer.
fn idle_ns(config: &ServerConfig) -> u64 {
    nanos(config.period).saturating_mul(2).max(1_000_000_000)
}

#[derive(Clone, Debug)]
struct ClientState {
    /// A client of its own (measured, given a share). A key first seen in overload is a
    /// newcomer until it graduates; its requests count to the newcomers' aggregate.
    member: bool,
    algorithm: Option<Algorithm>,
    selected_at: u64,
    last_seen: u64,
    arrivals: u64,
    demand: f64,
    measured: bool,
    share: f64,
    /// Loss fraction in force (loss clients: what they were told; non-participants: the
    /// server's own rejection probability).
    loss: f64,
    /// Rate told (rate clients).
    rate: u64,
    rejected: u64,
    /// Whether the law gave it a share since overload began (a client that appears during
    /// overload is told nothing binding until the next period has measured it).
    allocated: bool,
    /// What it was told last (algorithm, `oc`, `oc-validity`), and under which `oc-seq`.
    told: Option<(Algorithm, u64, u64)>,
    told_seq: Seq,
    /// The server's own rejection probability for its reducible requests in overload: a
    /// non-participant's share to shed, or a non-conforming participant's excess.
    reject: f64,
    /// Conformance bucket: requests sent beyond what it was allowed.
    debt: f64,
    /// Until when the values it was told last hold at the client (its `oc-validity` from
    /// the response that carried them: RFC 7339 §4.3, after it "overload control is not in
    /// effect"), and since when they have held without a gap.
    controlled_until: u64,
    cover_start: u64,
    /// Time of this period under control in stretches already ended, ns.
    covered_ns: u64,
    /// Requests of this period that arrived while it was under control.
    controlled_arrivals: u64,
    /// Stretches under control that began in this period.
    activations: u64,
    /// The rate it was allowed in the last period, per s.
    allowed: f64,
    /// Marked for sending more than it was told (see the module documentation).
    nonconforming: bool,
}

impl Default for ClientState {
    fn default() -> Self {
        ClientState {
            member: false,
            algorithm: None,
            selected_at: 0,
            last_seen: 0,
            arrivals: 0,
            demand: 0.0,
            measured: false,
            share: 0.0,
            loss: 0.0,
            rate: 0,
            rejected: 0,
            allocated: false,
            told: None,
            told_seq: Seq(0),
            reject: 0.0,
            debt: 0.0,
            controlled_until: 0,
            cover_start: 0,
            covered_ns: 0,
            controlled_arrivals: 0,
            activations: 0,
            allowed: 0.0,
            nonconforming: false,
        }
    }
}

/// The server side (see the module documentation).
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    clients: Clients<ClientState>,
    /// The newcomers as one client that does not take part.
    newcomers: ClientState,
    next_tick: Option<u64>,
    last_tick: u64,
    overloaded: bool,
    calm: u32,
    target: f64,
    mu: f64,
    delay_ns: u64,
    served: u64,
    served_retx: u64,
    busy_ns: u64,
    occupancy: Option<(f64, f64)>,
    /// An occupancy report arrived since the law last used one.
    occupancy_fresh: bool,
    /// The rate admitted over the interval the latest occupancy report measured, per s.
    occupancy_admitted: f64,
    /// When the previous occupancy report arrived (the first: when the server started).
    report_at: u64,
    /// New requests admitted since the previous occupancy report.
    admitted_since_report: u64,
    queue_reported: bool,
    arrivals_retx: u64,
    arrivals_new: u64,
    retx_share: f64,
    seq: Seq,
    rng: u64,
}

impl Server {
    /// A server with `config`.
    pub fn new(config: ServerConfig) -> Result<Server, OcError> {
        config.check()?;
        Ok(Server {
            config,
            clients: Clients::new(config.max_clients),
            newcomers: ClientState {
                member: true,
                ..ClientState::default()
            },
            next_tick: None,
            last_tick: 0,
            overloaded: false,
            calm: 0,
            target: 0.0,
            mu: 0.0,
            delay_ns: 0,
            served: 0,
            served_retx: 0,
            busy_ns: 0,
            occupancy: None,
            occupancy_fresh: false,
            occupancy_admitted: 0.0,
            report_at: 0,
            admitted_since_report: 0,
            queue_reported: false,
            arrivals_retx: 0,
            arrivals_new: 0,
            retx_share: 0.0,
            seq: Seq(0),
            rng: 0x6f63_2d73_6572_7665,
        })
    }

    /// The settings.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// When the law runs next (call [`Server::handle_timeout`] then); `None` before the first
    /// call with a time.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.next_tick
    }

    /// Runs the law for every period that has ended by `now_ns`. The other calls do this too,
    /// so a server that sees steady traffic need not call it.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        match self.next_tick {
            None => {
                self.last_tick = now_ns;
                self.report_at = now_ns;
                self.next_tick = Some(now_ns.saturating_add(nanos(self.config.period)));
                self.seq = self.period_seq(now_ns);
            }
            Some(at) if now_ns >= at => {
                self.tick(now_ns);
                self.last_tick = now_ns;
                self.next_tick = Some(now_ns.saturating_add(nanos(self.config.period)));
            }
            Some(_) => {}
        }
    }

    /// A request arrived from `client` (its transport source address as bytes, e.g.
    /// `"192.0.2.7:5060"`: RFC 7339 §5.4 scopes overload control to IP and port, and a client
    /// cannot choose its source the way it writes its Via), with the overload-control offer in
    /// its top Via (`None`: the client does not take part), its class (a retransmission counts
    /// towards the alarm only) and its category. Call it for every request received, in-dialog
    /// ones too (§5.3: the value applies "to all downstream SIP requests (dialogue forming as
    /// well as in-dialogue)"). Only reducible requests are ever rejected — of a client that
    /// does not take part, of a newcomer, of a non-conforming participant (module
    /// documentation) —; in-dialog, emergency and priority requests pass (§5.10.1, the same
    /// local policy as a client's). Never allocates; one probe of at most 8 slots.
    pub fn on_request(
        &mut self,
        now_ns: u64,
        client: &[u8],
        offer: Option<Offer>,
        class: Class,
        category: super::Category,
    ) -> Admission {
        self.handle_timeout(now_ns);
        if class == Class::Retransmission {
            self.arrivals_retx += 1;
        } else {
            self.arrivals_new += 1;
        }
        let config = self.config;
        let overloaded = self.overloaded;
        let draw = self.draw();
        let shed =
            |reject: f64| overloaded && category == super::Category::Reducible && draw < reject;
        let at = self.slot(now_ns, client);
        if let Some(at) = at {
            let state = self.clients.get_mut(at);
            state.last_seen = now_ns;
            select(state, offer, &config, now_ns);
            if class == Class::Retransmission {
                return Admission::Admit;
            }
            state.arrivals += 1;
            if now_ns <= state.controlled_until {
                state.controlled_arrivals += 1;
            }
            if state.member {
                if shed(state.reject) {
                    state.rejected += 1;
                    return Admission::Reject;
                }
                self.admitted_since_report += 1;
                return Admission::Admit;
            }
        } else if class == Class::Retransmission {
            return Admission::Admit;
        }
        self.newcomers.arrivals += 1;
        if shed(self.newcomers.reject) {
            self.newcomers.rejected += 1;
            if let Some(at) = at {
                self.clients.get_mut(at).rejected += 1;
            }
            return Admission::Reject;
        }
        self.admitted_since_report += 1;
        Admission::Admit
    }

    /// The feedback for a response to `client` now, or `None` if the client does not take part
    /// (never sent an `oc`) or is not known. Write it with [`Feedback::write_via`].
    ///
    /// The `oc-seq` is the period's, and rises beyond it whenever what the client is told
    /// changes within a period (its algorithm, or its share when it is first measured):
    /// RFC 7339 §4.4, values "generated by an overload control algorithm at time t and t+1
    /// MUST have an increasing value in the "oc-seq" parameter", and §5.4, a client ignores
    /// values under the `oc-seq` it holds ("If these values match, the response does not
    /// update the overload control parameters").
    pub fn feedback(&mut self, now_ns: u64, client: &[u8]) -> Option<Feedback> {
        self.handle_timeout(now_ns);
        let (overloaded, period_seq, period_start) = (self.overloaded, self.seq, self.last_tick);
        let validity = u64::try_from(self.config.validity.as_millis()).unwrap_or(u64::MAX);
        let at = self.clients.find(client)?;
        let state = self.clients.get_mut(at);
        let algorithm = state.algorithm?;
        let (oc, validity_ms) = if overloaded && state.allocated {
            let oc = match algorithm {
                Algorithm::Loss => loss_percent(state.loss),
                Algorithm::Rate => state.rate,
            };
            (oc, validity)
        } else {
            // RFC 7339 §5.1: "if the server is currently not in an overload condition, it MUST
            // set the value of the "oc" parameter to be 0 and MAY insert an "oc-validity=0"".
            (0, 0)
        };
        let values = (algorithm, oc, validity_ms);
        let seq = if state.told == Some(values) {
            state.told_seq.max(period_seq)
        } else {
            // A change within the period: one step (10⁻⁵) past what the client holds, below
            // the next period's value (whose integer part is higher).
            period_seq.max(Seq(state.told_seq.0.saturating_add(1)).min(Seq::MAX))
        };
        state.told = Some(values);
        state.told_seq = seq;
        if validity_ms > 0 {
            // A gap since the last values lapsed closes a stretch under control.
            if now_ns > state.controlled_until {
                state.covered_ns += overlap(
                    (period_start, now_ns),
                    (state.cover_start, state.controlled_until),
                );
                state.cover_start = now_ns;
                state.activations += 1;
            }
            state.controlled_until = now_ns.saturating_add(validity_ms.saturating_mul(1_000_000));
        }
        Some(Feedback {
            oc,
            algorithm: Some(algorithm),
            validity_ms,
            seq: Some(seq),
        })
    }

    /// Reports load (see [`Load`]). Queue reports add up over a period (their delay is the
    /// latest); an occupancy report replaces the previous one.
    pub fn report(&mut self, now_ns: u64, load: Load) -> Result<(), OcError> {
        match load {
            Load::Queue(q) => {
                if q.served_retransmissions > q.served {
                    return Err(OcError::Config {
                        field: "served_retransmissions",
                        expected: "at most served",
                    });
                }
                self.handle_timeout(now_ns);
                self.delay_ns = nanos(q.delay);
                self.served += q.served;
                self.served_retx += q.served_retransmissions;
                self.busy_ns = self.busy_ns.saturating_add(nanos(q.busy));
                self.queue_reported = true;
            }
            Load::Occupancy { measured, target } => {
                if !(measured.is_finite() && measured >= 0.0 && target.is_finite() && target > 0.0)
                {
                    return Err(OcError::Config {
                        field: "occupancy",
                        expected: "a measured value ≥ 0 and a target > 0",
                    });
                }
                self.handle_timeout(now_ns);
                // The rate the measurement saw: what was admitted over the same interval. A
                // law period's count instead would set a rate from a fraction of what the
                // occupancy measured (two independent samples: their ratio's noise, not the
                // load, would move the target).
                let dt = now_ns.saturating_sub(self.report_at).max(1) as f64 / 1e9;
                self.occupancy_admitted = self.admitted_since_report as f64 / dt;
                self.admitted_since_report = 0;
                self.report_at = now_ns;
                self.occupancy = Some((measured, target));
                self.occupancy_fresh = true;
            }
        }
        Ok(())
    }

    /// The server's state.
    pub fn status(&self) -> ServerStatus {
        ServerStatus {
            overloaded: self.overloaded,
            target: self.target,
            service_rate: self.mu,
            delay: Duration::from_nanos(self.delay_ns),
            retransmission_share: self.retx_share,
            seq: self.seq,
            clients: self.clients.len(),
        }
    }

    /// Every tracked client, by key, then the newcomers' aggregate (an empty key: every key
    /// first seen in overload that has not become a client of its own, and every key without a
    /// slot).
    pub fn clients(&self) -> Vec<ClientReport> {
        let overloaded = self.overloaded;
        let report = |key: &[u8], s: &ClientState| ClientReport {
            key: key.to_vec(),
            algorithm: s.algorithm,
            demand: s.demand,
            share: s.share,
            oc: match (overloaded && s.allocated, s.algorithm) {
                (false, _) | (_, None) => 0,
                (true, Some(Algorithm::Loss)) => loss_percent(s.loss),
                (true, Some(Algorithm::Rate)) => s.rate,
            },
            rejected: s.rejected,
            newcomer: !s.member,
            nonconforming: s.nonconforming,
        };
        let mut v: Vec<ClientReport> = self.clients.iter().map(|(k, s)| report(k, s)).collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        let mut aggregate = report(b"", &self.newcomers);
        aggregate.newcomer = true;
        v.push(aggregate);
        v
    }

    fn draw(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The slot of `key`: found, or a new one (module documentation), or `None` (not
    /// tracked: a newcomer).
    fn slot(&mut self, now_ns: u64, key: &[u8]) -> Option<usize> {
        if let Some(at) = self.clients.find(key) {
            return Some(at);
        }
        let overloaded = self.overloaded;
        let idle = idle_ns(&self.config);
        let fresh = ClientState {
            member: !overloaded,
            selected_at: now_ns,
            last_seen: now_ns,
            ..ClientState::default()
        };
        self.clients.insert(
            key,
            fresh,
            |s| s.last_seen,
            |s| {
                !s.member
                    || (now_ns.saturating_sub(s.last_seen) >= idle && !(overloaded && s.allocated))
            },
        )
    }
}

/// The length of the overlap of two intervals `[from, to)`, ns.
fn overlap(a: (u64, u64), b: (u64, u64)) -> u64 {
    a.1.min(b.1).saturating_sub(a.0.max(b.0))
}

/// Time of the period `[start, end)` a client was under control, ns; starts the count of the
/// next period.
fn covered(s: &mut ClientState, start: u64, end: u64) -> u64 {
    let now = overlap((start, end), (s.cover_start, s.controlled_until));
    std::mem::take(&mut s.covered_ns) + now
}

/// The algorithm for a client after a request with `offer` (module documentation).
fn select(state: &mut ClientState, offer: Option<Offer>, config: &ServerConfig, now_ns: u64) {
    match offer {
        Some(offer) => {
            let keep = state.algorithm.is_some_and(|a| {
                offer.algorithms.contains(a)
                    && (a == config.preference
                        || !offer.algorithms.contains(config.preference)
                        || now_ns.saturating_sub(state.selected_at) < nanos(config.hold_algorithm))
            });
            if !keep {
                let chosen = if offer.algorithms.contains(config.preference) {
                    config.preference
                } else if offer.algorithms.contains(Algorithm::Loss) {
                    Algorithm::Loss
                } else {
                    Algorithm::Rate
                };
                if state.algorithm != Some(chosen) {
                    state.algorithm = Some(chosen);
                    state.selected_at = now_ns;
                    state.measured = false;
                }
            }
        }
        None => {
            if state.algorithm.is_some() {
                state.algorithm = None;
                state.measured = false;
            }
        }
    }
}

#[cfg(test)]
mod tests;
