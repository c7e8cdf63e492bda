//! The server side of RFC 7339 / RFC 7415: from a load signal to the `oc` values each upstream
//! client's responses carry.
//!
//! RFC 7339 §5.3 leaves the law to the server ("the process by which an overloaded server
//! determines the value of the "oc" parameter is considered out of the scope"), and RFC 7415
//! §3.4 asks only that it "periodically evaluate its overload state and estimate a target SIP
//! request rate beyond which it would become overloaded". This module's law, once per
//! [`ServerConfig::period_ns`]:
//!
//! 1. **Capacity.** From the queue signal ([`Load::Queue`]): the service rate `μ̂ = served /
//!    busy time` (smoothed), less what retransmissions took (`μ̂·(1 − served retransmissions /
//!    served)`): the rate of new requests the server can finish.
//! 2. **Target.** `λ* = μ̂_new − (d − D)·μ̂ / H`, at least 0: with the oldest waiting new
//!    request's delay `d` above the target delay `D` ([`ServerConfig::target_delay_ns`]) the
//!    excess backlog `(d − D)·μ̂` is drained over the horizon `H`
//!    ([`ServerConfig::drain_ns`]); below it, the target rises above `μ̂_new` by the same law.
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
//!    ([`crate::fair::max_min_fair`]): a client asking less than an equal split
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
//! The algorithm for a client is chosen at its first contact from what it offers, the
//! configured preference first (§5.1), and kept: it changes only if the client stops offering
//! it or [`ServerConfig::hold_algorithm_ns`] (default one hour, §5.8) has passed and the
//! preference differs.
//!
//! A [`Server`] is owned by one thread (`&mut self`); a multi-threaded server serialises
//! calls or keeps one per worker group.

use std::collections::HashMap;

use super::via::{Feedback, Offer};
use super::{Algorithm, OcError, Seq};
use crate::fair::max_min_fair;
use crate::prsm::Class;

/// Server settings.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The algorithm chosen when a client offers both. Default rate (it tells a client a
    /// number it can enforce exactly, RFC 7415 §3.4).
    pub preference: Algorithm,
    /// `oc-validity` sent under overload, ms. Default 500 (RFC 7339 §4.3's default). Must be
    /// more than a period.
    pub validity_ms: u64,
    /// How often the law runs. Default 100 ms. `oc-seq` counts periods of at least 10 ms on
    /// the caller's clock: servers that answer the same client (the workers of one appliance)
    /// use the same period and clock, so their values order by time at that client.
    pub period_ns: u64,
    /// `D`: the queueing delay of new requests the law aims at. Default 50 ms (a tenth of
    /// RFC 3261's T1, so INVITE clients do not retransmit).
    pub target_delay_ns: u64,
    /// `H`: the horizon over which excess backlog is drained. Default 500 ms.
    pub drain_ns: u64,
    /// Retransmissions' share of arriving requests above which the server is in overload.
    /// Default 0.05.
    pub retransmission_alarm: f64,
    /// A rate client that used this share of its rate is constrained. Default 0.95.
    pub busy: f64,
    /// A constrained rate client's demand is estimated at `seen·(1 + probe)`. Default 0.25.
    pub probe: f64,
    /// An unconstrained rate client's demand is estimated at `seen·(1 + headroom)`.
    /// Default 0.1.
    pub headroom: f64,
    /// The smallest rate told to a client, requests/s. Default 1.
    pub min_rate: u64,
    /// Weight of the newest period in the smoothed estimates (μ̂, demands), in (0, 1].
    /// Default 0.5.
    pub alpha: f64,
    /// Periods without need before control stops. Default 10.
    pub calm_periods: u32,
    /// How long an algorithm selection stays (RFC 7339 §5.8: "at least 3600 seconds").
    pub hold_algorithm_ns: u64,
    /// Clients tracked; the least recently seen is forgotten for a new one. Default 1024.
    pub max_clients: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            preference: Algorithm::Rate,
            validity_ms: 500,
            period_ns: 100_000_000,
            target_delay_ns: 50_000_000,
            drain_ns: 500_000_000,
            retransmission_alarm: 0.05,
            busy: 0.95,
            probe: 0.25,
            headroom: 0.1,
            min_rate: 1,
            alpha: 0.5,
            calm_periods: 10,
            hold_algorithm_ns: 3_600_000_000_000,
            max_clients: 1024,
        }
    }
}

impl ServerConfig {
    /// Checks every field; the error names the first one out of range.
    pub fn check(&self) -> Result<(), OcError> {
        let bad = |field, expected| Err(OcError::Config { field, expected });
        let frac = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        if self.period_ns < 1_000_000 || self.period_ns > 10_000_000_000 {
            return bad("period_ns", "between 1 ms and 10 s");
        }
        if self.validity_ms == 0
            || self.validity_ms > super::via::MAX_VALIDITY_MS
            || self.validity_ms * 1_000_000 <= self.period_ns
        {
            return bad("validity_ms", "longer than a period and at most a day");
        }
        if self.target_delay_ns == 0 {
            return bad("target_delay_ns", "positive");
        }
        if self.drain_ns < self.period_ns {
            return bad("drain_ns", "at least one period");
        }
        if !frac(self.retransmission_alarm) {
            return bad("retransmission_alarm", "between 0 and 1");
        }
        if !(self.busy.is_finite() && self.busy > 0.0 && self.busy <= 1.0) {
            return bad("busy", "in (0, 1]");
        }
        if !(self.probe.is_finite() && self.probe > 0.0 && self.probe <= 10.0) {
            return bad("probe", "in (0, 10]");
        }
        if !(self.headroom.is_finite() && (0.0..=10.0).contains(&self.headroom)) {
            return bad("headroom", "between 0 and 10");
        }
        if self.min_rate > super::MAX_RATE {
            return bad("min_rate", "at most MAX_RATE");
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0 && self.alpha <= 1.0) {
            return bad("alpha", "in (0, 1]");
        }
        if self.calm_periods == 0 {
            return bad("calm_periods", "at least 1");
        }
        if self.max_clients == 0 || self.max_clients > 1 << 20 {
            return bad("max_clients", "between 1 and 1,048,576");
        }
        Ok(())
    }
}

/// A load report (see the module documentation for how each kind is used).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// The server's own queue (for PRSM, the primary queue), over the interval since the last
    /// report.
    Queue(QueueLoad),
    /// An appliance's own occupancy signal: `measured` against `target` (same unit, e.g. CPU
    /// utilisation 0.93 against 0.8), measured over the interval since the previous report
    /// (the law scales the rate admitted over that same interval).
    Occupancy {
        /// The measured occupancy.
        measured: f64,
        /// The occupancy to hold.
        target: f64,
    },
}

/// What the queue did over an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLoad {
    /// How long the oldest new request now waiting has waited, ns (0 when none waits).
    pub delay_ns: u64,
    /// Requests served in the interval, retransmissions included.
    pub served: u64,
    /// Of those, retransmissions.
    pub served_retransmissions: u64,
    /// Time spent serving in the interval, ns.
    pub busy_ns: u64,
}

/// What the server does with an arriving request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Process it.
    Admit,
    /// Answer 503 without Retry-After: a client that does not take part in overload control,
    /// while the server is in overload (RFC 7339 §5.10.2).
    Reject,
}

/// A client as the server sees it (statistics, RPCs).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientReport {
    /// The client's key as given to [`Server::on_request`].
    pub key: Vec<u8>,
    /// The algorithm selected for it; `None` for a client that does not take part.
    pub algorithm: Option<Algorithm>,
    /// Its estimated offered rate of new requests, per s.
    pub demand: f64,
    /// Its share of the target, per s.
    pub share: f64,
    /// The `oc` value its responses carry now (0 when not in overload).
    pub oc: u64,
    /// Requests of it the server rejected (non-participants only).
    pub rejected: u64,
}

/// The server's state (statistics, RPCs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerStatus {
    /// Whether overload control is in effect.
    pub overloaded: bool,
    /// The target rate of new requests, per s (`λ*`).
    pub target: f64,
    /// The estimated service rate, per s (0 before one is measured).
    pub service_rate: f64,
    /// The last reported queueing delay, ns.
    pub delay_ns: u64,
    /// Retransmissions' share of the requests that arrived in the last period.
    pub retransmission_share: f64,
    /// The current `oc-seq`.
    pub seq: Seq,
    /// Clients tracked.
    pub clients: usize,
}

#[derive(Clone, Debug)]
struct ClientState {
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
}

/// The server side (see the module documentation).
#[derive(Debug)]
pub struct Server {
    config: ServerConfig,
    clients: HashMap<Box<[u8]>, ClientState>,
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
            clients: HashMap::with_capacity(config.max_clients.min(1024)),
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
                self.next_tick = Some(now_ns.saturating_add(self.config.period_ns));
                self.seq = self.period_seq(now_ns);
            }
            Some(at) if now_ns >= at => {
                self.tick(now_ns);
                self.last_tick = now_ns;
                self.next_tick = Some(now_ns.saturating_add(self.config.period_ns));
            }
            Some(_) => {}
        }
    }

    /// A request arrived from `client` (its address as bytes, e.g. `"192.0.2.7:5060"`: RFC
    /// 7339 §5.4 scopes overload control to IP and port), with the overload-control offer in
    /// its top Via (`None`: the client does not take part), its class (a retransmission
    /// counts towards the alarm only) and its category. Call it for every request received,
    /// in-dialog ones too (§5.3: the value applies "to all downstream SIP requests (dialogue
    /// forming as well as in-dialogue)"). Only reducible requests of a client that does not
    /// take part are ever rejected: its in-dialog, emergency and priority requests pass
    /// (§5.10.1, the same local policy as a client's). Allocates only for a client not seen
    /// before.
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
        let state = self.client(now_ns, client);
        state.last_seen = now_ns;
        match offer {
            Some(offer) => {
                let keep = state.algorithm.is_some_and(|a| {
                    offer.algorithms.contains(a)
                        && (a == config.preference
                            || !offer.algorithms.contains(config.preference)
                            || now_ns.saturating_sub(state.selected_at) < config.hold_algorithm_ns)
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
        if class == Class::Retransmission {
            return Admission::Admit;
        }
        state.arrivals += 1;
        if overloaded
            && state.algorithm.is_none()
            && category == super::Category::Reducible
            && draw < state.loss
        {
            state.rejected += 1;
            return Admission::Reject;
        }
        self.admitted_since_report += 1;
        Admission::Admit
    }

    /// The feedback for a response to `client` now, or `None` if the client does not take part
    /// (never sent an `oc`) or is not known. Write it with [`Feedback::write_via`].
    pub fn feedback(&mut self, now_ns: u64, client: &[u8]) -> Option<Feedback> {
        self.handle_timeout(now_ns);
        let state = self.clients.get(client)?;
        let algorithm = state.algorithm?;
        Some(if self.overloaded && state.allocated {
            Feedback {
                oc: match algorithm {
                    Algorithm::Loss => loss_percent(state.loss),
                    Algorithm::Rate => state.rate,
                },
                algorithm,
                validity_ms: self.config.validity_ms,
                seq: Some(self.seq),
            }
        } else {
            // RFC 7339 §5.1: "if the server is currently not in an overload condition, it MUST
            // set the value of the "oc" parameter to be 0 and MAY insert an "oc-validity=0"".
            Feedback {
                oc: 0,
                algorithm,
                validity_ms: 0,
                seq: Some(self.seq),
            }
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
                self.delay_ns = q.delay_ns;
                self.served += q.served;
                self.served_retx += q.served_retransmissions;
                self.busy_ns += q.busy_ns;
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
            delay_ns: self.delay_ns,
            retransmission_share: self.retx_share,
            seq: self.seq,
            clients: self.clients.len(),
        }
    }

    /// Every tracked client, by key.
    pub fn clients(&self) -> Vec<ClientReport> {
        let mut v: Vec<ClientReport> = self
            .clients
            .iter()
            .map(|(k, s)| ClientReport {
                key: k.to_vec(),
                algorithm: s.algorithm,
                demand: s.demand,
                share: s.share,
                oc: match (self.overloaded && s.allocated, s.algorithm) {
                    (false, _) | (_, None) => 0,
                    (true, Some(Algorithm::Loss)) => loss_percent(s.loss),
                    (true, Some(Algorithm::Rate)) => s.rate,
                },
                rejected: s.rejected,
            })
            .collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    fn draw(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn client(&mut self, now_ns: u64, key: &[u8]) -> &mut ClientState {
        if !self.clients.contains_key(key) {
            if self.clients.len() >= self.config.max_clients
                && let Some(oldest) = self
                    .clients
                    .iter()
                    .min_by_key(|(_, s)| s.last_seen)
                    .map(|(k, _)| k.clone())
            {
                self.clients.remove(&oldest);
            }
            self.clients.insert(
                key.into(),
                ClientState {
                    algorithm: None,
                    selected_at: now_ns,
                    last_seen: now_ns,
                    arrivals: 0,
                    demand: 0.0,
                    measured: false,
                    share: 0.0,
                    loss: 0.0,
                    rate: 0,
                    rejected: 0,
                    allocated: false,
                },
            );
        }
        // Inserted above when missing.
        self.clients.get_mut(key).expect("present")
    }

    /// `oc-seq` as a timestamp in law periods (at least 10 ms, so realtime nanoseconds still
    /// fit the grammar's 12 digits): its integer part rises with every period, so a client
    /// that reads only the part before the "." (Kamailio 5.8+ and 6.x keep a value only if
    /// that integer rose) sees each new value too, and every server on the same clock and
    /// period (the worker processes of one appliance, each with its own law) stamps on one
    /// scale, so a client they all answer keeps the newest value of any of them. A count
    /// of each server's own periods instead would drift apart between servers, and the
    /// client would follow whichever had counted more, ignoring the others for good.
    fn period_seq(&self, now_ns: u64) -> Seq {
        let unit = self.config.period_ns.max(10_000_000);
        let (int, frac) = (now_ns / unit, now_ns % unit);
        let frac = (frac as u128 * Seq::SCALE as u128 / unit as u128) as u64;
        Seq(int
            .saturating_mul(Seq::SCALE)
            .saturating_add(frac)
            .min(Seq::MAX.0))
    }

    fn tick(&mut self, now_ns: u64) {
        let c = self.config;
        let dt = (now_ns - self.last_tick).max(1) as f64 / 1e9;
        let arrivals = self.arrivals_new + self.arrivals_retx;
        self.retx_share = if arrivals > 0 {
            self.arrivals_retx as f64 / arrivals as f64
        } else {
            0.0
        };

        // 1–2: capacity and target.
        let mut signal = self.retx_share > c.retransmission_alarm;
        if let Some((measured, target)) = self.occupancy {
            signal |= measured > target;
            // Once per report: a measurement scales the rate it was taken at once; applying it
            // again every period until the next report would compound it.
            if self.occupancy_fresh {
                self.occupancy_fresh = false;
                let admitted = self.occupancy_admitted;
                self.target = if measured > 0.0 {
                    admitted * target / measured
                } else {
                    self.target.max(admitted * 2.0)
                };
            }
        } else if self.queue_reported {
            let busy = self.busy_ns as f64 / 1e9;
            if self.served > 0 && busy >= 0.1 * dt {
                let sample = self.served as f64 / busy;
                self.mu = if self.mu > 0.0 {
                    c.alpha * sample + (1.0 - c.alpha) * self.mu
                } else {
                    sample
                };
            }
            let retx = if self.served > 0 {
                self.served_retx as f64 / self.served as f64
            } else {
                0.0
            };
            let d = self.delay_ns as f64 / 1e9;
            let big_d = c.target_delay_ns as f64 / 1e9;
            let h = c.drain_ns as f64 / 1e9;
            signal |= self.delay_ns > c.target_delay_ns;
            self.target = (self.mu * (1.0 - retx) - (d - big_d) * self.mu / h).max(0.0);
        }

        // 4: demands.
        let overloaded = self.overloaded;
        let mut total_demand = 0.0;
        let mut constrained = false;
        for s in self.clients.values_mut() {
            let seen = s.arrivals as f64 / dt;
            s.arrivals = 0;
            let offered = match s.algorithm {
                None => seen,
                Some(Algorithm::Loss) if overloaded => {
                    if s.loss < 0.99 {
                        seen / (1.0 - s.loss)
                    } else {
                        s.demand.max(seen)
                    }
                }
                Some(Algorithm::Rate) if overloaded => {
                    if seen >= c.busy * s.rate as f64 {
                        constrained = true;
                        seen.max(s.rate as f64) * (1.0 + c.probe)
                    } else {
                        seen * (1.0 + c.headroom)
                    }
                }
                Some(_) => seen,
            };
            s.demand = if s.measured {
                c.alpha * offered + (1.0 - c.alpha) * s.demand
            } else {
                s.measured = true;
                offered
            };
            total_demand += s.demand;
        }

        // 3: overload state.
        let was = self.overloaded;
        if !self.overloaded {
            if signal && total_demand > 0.0 {
                self.overloaded = true;
                self.calm = 0;
            }
        } else if !signal && !constrained && total_demand <= self.target {
            self.calm += 1;
            if self.calm >= c.calm_periods {
                self.overloaded = false;
            }
        } else {
            self.calm = 0;
        }

        // 5: split.
        if self.overloaded {
            let mut keys: Vec<&Box<[u8]>> = self.clients.keys().collect();
            keys.sort();
            let keys: Vec<Box<[u8]>> = keys.into_iter().cloned().collect();
            let demands: Vec<f64> = keys.iter().map(|k| self.clients[k].demand).collect();
            let shares = max_min_fair(self.target, &demands);
            for (k, share) in keys.iter().zip(shares) {
                if let Some(s) = self.clients.get_mut(k) {
                    s.allocated = true;
                    s.share = share;
                    s.loss = if s.demand > 0.0 {
                        (1.0 - share / s.demand).clamp(0.0, 1.0)
                    } else {
                        0.0
                    };
                    s.rate = (share.floor() as u64).clamp(c.min_rate, super::MAX_RATE);
                }
            }
        } else {
            for s in self.clients.values_mut() {
                s.share = 0.0;
                s.loss = 0.0;
                s.rate = 0;
                s.allocated = false;
            }
        }
        if self.overloaded || was {
            self.seq = self
                .period_seq(now_ns)
                .max(Seq(self.seq.0 + 1))
                .min(Seq::MAX);
        }

        // Forget clients not heard from for the hold time (§5.1: "a client the server has
        // not heard from in a long time" chooses afresh).
        self.clients
            .retain(|_, s| now_ns.saturating_sub(s.last_seen) < c.hold_algorithm_ns);

        self.served = 0;
        self.served_retx = 0;
        self.busy_ns = 0;
        self.queue_reported = false;
        self.arrivals_new = 0;
        self.arrivals_retx = 0;
    }
}

/// A loss fraction as RFC 7339's whole percentage, rounded up (the server asks for at least
/// what it needs), at most 99: a client told 100 sends nothing, so it would hear no newer value
/// until this one expired, and then send everything.
fn loss_percent(loss: f64) -> u64 {
    ((loss * 100.0 - 1e-9).ceil().max(0.0) as u64).min(99)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overload::{Algorithms, Category};

    const MS: u64 = 1_000_000;

    fn offer(a: Algorithms) -> Option<Offer> {
        Some(Offer { algorithms: a })
    }

    #[test]
    fn not_overloaded_answers_zero_with_validity_zero() {
        // RFC 7339 §5.1: "if the server is currently not in an overload condition, it MUST set
        // the value of the "oc" parameter to be 0"; "It MUST put the chosen algorithm as the
        // sole parameter value in the "oc-algo" parameter".
        let mut s = Server::new(ServerConfig::default()).expect("test input");
        s.on_request(
            0,
            b"a",
            offer(Algorithms::LossThenRate),
            Class::Original,
            Category::Reducible,
        );
        let f = s.feedback(0, b"a").expect("test input");
        assert_eq!((f.oc, f.algorithm, f.validity_ms), (0, Algorithm::Rate, 0));
        assert!(f.seq.is_some(), "§4.4: oc-seq MUST be inserted");
        s.on_request(
            0,
            b"b",
            offer(Algorithms::Loss),
            Class::Original,
            Category::Reducible,
        );
        assert_eq!(
            s.feedback(0, b"b").expect("test input").algorithm,
            Algorithm::Loss
        );
        s.on_request(0, b"c", None, Class::Original, Category::Reducible);
        assert_eq!(s.feedback(0, b"c"), None);
    }

    #[test]
    fn the_algorithm_stays_for_the_hold_time() {
        // RFC 7339 §5.8: "the algorithm SHOULD NOT change ... for at least 3600 seconds".
        let config = ServerConfig {
            preference: Algorithm::Loss,
            ..ServerConfig::default()
        };
        let mut s = Server::new(config).expect("test input");
        let rate_only = Algorithms::Rate;
        s.on_request(
            0,
            b"a",
            offer(rate_only),
            Class::Original,
            Category::Reducible,
        );
        assert_eq!(
            s.feedback(0, b"a").expect("test input").algorithm,
            Algorithm::Rate
        );
        // The client now offers both: rate stays within the hour, loss (preferred) after.
        s.on_request(
            1000 * MS,
            b"a",
            offer(Algorithms::LossThenRate),
            Class::Original,
            Category::Reducible,
        );
        assert_eq!(
            s.feedback(1000 * MS, b"a").expect("test input").algorithm,
            Algorithm::Rate
        );
        let later = 3_600_000 * MS + 1;
        s.on_request(
            later,
            b"a",
            offer(Algorithms::LossThenRate),
            Class::Original,
            Category::Reducible,
        );
        assert_eq!(
            s.feedback(later, b"a").expect("test input").algorithm,
            Algorithm::Loss
        );
    }

    /// A server of capacity `mu`/s with a queue: clients offer `offered[i]`/s, apply the
    /// feedback they get (loss: thin their stream; rate: cap it), every period. Returns
    /// the admitted rates in the last second and the server.
    fn run_fluid(
        mu: f64,
        offered: &[(f64, Option<Algorithms>)],
        seconds: u64,
    ) -> (Vec<f64>, Server) {
        let mut s = Server::new(ServerConfig::default()).expect("test input");
        let dt = 10 * MS;
        let mut backlog = 0.0f64;
        let keys: Vec<Vec<u8>> = (0..offered.len()).map(|i| vec![b'c', i as u8]).collect();
        let mut carry = vec![0.0f64; offered.len()];
        let mut admitted = vec![0.0f64; offered.len()];
        let steps = seconds * 1_000_000_000 / dt;
        for k in 0..steps {
            let now = k * dt;
            let mut arriving = 0.0;
            for (i, &(rate, alg)) in offered.iter().enumerate() {
                let fb = s.feedback(now, &keys[i]);
                let send = match fb {
                    Some(f) if f.validity_ms > 0 && f.algorithm == Algorithm::Loss => {
                        rate * (1.0 - f.oc as f64 / 100.0)
                    }
                    Some(f) if f.validity_ms > 0 => rate.min(f.oc as f64),
                    _ => rate,
                };
                carry[i] += send * dt as f64 / 1e9;
                while carry[i] >= 1.0 {
                    carry[i] -= 1.0;
                    let adm = s.on_request(
                        now,
                        &keys[i],
                        alg.map(|a| Offer { algorithms: a }),
                        Class::Original,
                        Category::Reducible,
                    );
                    if adm == Admission::Admit {
                        arriving += 1.0;
                        if k >= steps - 100 {
                            admitted[i] += 1.0;
                        }
                    }
                }
            }
            backlog += arriving;
            let can = mu * dt as f64 / 1e9;
            let served = backlog.min(can);
            backlog -= served;
            let busy = (served / mu * 1e9) as u64;
            s.report(
                now,
                Load::Queue(QueueLoad {
                    delay_ns: (backlog / mu * 1e9) as u64,
                    served: served.round() as u64,
                    served_retransmissions: 0,
                    busy_ns: busy,
                }),
            )
            .expect("test input");
        }
        (admitted, s)
    }

    #[test]
    fn the_law_holds_three_times_capacity_at_capacity() {
        // Physics: a server of μ = 1000/s offered 3000/s can take no more than 1000/s; the law
        // should take at least 95 % of it with the queue delay near the target.
        let (admitted, s) = run_fluid(
            1000.0,
            &[
                (1500.0, Some(Algorithms::LossThenRate)),
                (1500.0, Some(Algorithms::Loss)),
            ],
            30,
        );
        let total: f64 = admitted.iter().sum();
        assert!(s.status().overloaded);
        assert!(
            (950.0..=1050.0).contains(&total),
            "admitted {total}/s: {admitted:?}"
        );
        assert!(
            s.status().delay_ns < 200 * MS,
            "delay {} ms",
            s.status().delay_ns / MS
        );
        // Equal demands, max-min fair: equal halves within 10 %.
        assert!(
            (admitted[0] - admitted[1]).abs() < 0.1 * total,
            "{admitted:?}"
        );
    }

    #[test]
    fn a_small_client_is_not_cut_and_a_non_participant_gets_no_advantage() {
        // Max-min fairness: 100/s asks less than an equal third of 1000/s, so it keeps it; the
        // non-participant (RFC 7339 §5.10.2) ends up with what the participating big client
        // gets.
        let (admitted, s) = run_fluid(
            1000.0,
            &[
                (100.0, Some(Algorithms::LossThenRate)),
                (2000.0, Some(Algorithms::LossThenRate)),
                (2000.0, None),
            ],
            30,
        );
        assert!((admitted[0] - 100.0).abs() < 10.0, "{admitted:?}");
        assert!(
            (admitted[1] - admitted[2]).abs() < 0.1 * 900.0,
            "{admitted:?}"
        );
        assert!(s.clients().iter().any(|c| c.rejected > 0));
    }

    #[test]
    fn control_stops_with_validity_zero_and_a_new_seq_when_load_falls() {
        // RFC 7339 §5.7: "the SIP server MUST set the value of the "oc-validity" parameter to
        // 0. The SIP server MUST increment the value of "oc-seq"".
        let (_, mut s) = run_fluid(1000.0, &[(3000.0, Some(Algorithms::LossThenRate))], 10);
        let before = s.feedback(10_000 * MS, b"c\0").expect("test input");
        assert!(before.validity_ms > 0);
        // Load falls to half the capacity.
        let mut now = 10_000 * MS;
        for _ in 0..300 {
            now += 10 * MS;
            for _ in 0..5 {
                s.on_request(
                    now,
                    b"c\0",
                    offer(Algorithms::LossThenRate),
                    Class::Original,
                    Category::Reducible,
                );
            }
            s.report(
                now,
                Load::Queue(QueueLoad {
                    delay_ns: 0,
                    served: 5,
                    served_retransmissions: 0,
                    busy_ns: 5 * MS,
                }),
            )
            .expect("test input");
        }
        let after = s.feedback(now, b"c\0").expect("test input");
        assert_eq!((after.oc, after.validity_ms), (0, 0));
        assert!(after.seq > before.seq);
    }

    #[test]
    fn every_new_value_raises_the_integer_part_of_oc_seq() {
        // RFC 7339 §4.4: values "generated ... at time t and t+1 MUST have an increasing value
        // in the "oc-seq" parameter". A client that compares only the integer before the "."
        // (Kamailio's core Via parser) must see each of them increase too: here the period is
        // 100 ms, so ten values a second.
        let (_, mut s) = run_fluid(1000.0, &[(3000.0, Some(Algorithms::LossThenRate))], 10);
        let mut now = 10_000 * MS;
        let seq_of = |s: &mut Server, now| {
            s.feedback(now, b"c\0")
                .and_then(|f| f.seq)
                .expect("test input")
        };
        let mut last = seq_of(&mut s, now);
        let mut rises = 0;
        for _ in 0..20 {
            now += 100 * MS;
            for _ in 0..300 {
                s.on_request(
                    now,
                    b"c\0",
                    offer(Algorithms::LossThenRate),
                    Class::Original,
                    Category::Reducible,
                );
            }
            s.report(
                now,
                Load::Queue(QueueLoad {
                    delay_ns: 400 * MS,
                    served: 100,
                    served_retransmissions: 0,
                    busy_ns: 100 * MS,
                }),
            )
            .expect("test input");
            let seq = seq_of(&mut s, now);
            if seq != last {
                assert!(
                    seq.0 / Seq::SCALE > last.0 / Seq::SCALE,
                    "{last} then {seq}: the integer part did not rise"
                );
                rises += 1;
            }
            last = seq;
        }
        assert!(
            rises >= 19,
            "a new value every period under overload: {rises} of 20"
        );
    }

    fn occupancy(measured: f64, target: f64) -> Load {
        Load::Occupancy { measured, target }
    }

    #[test]
    fn occupancy_signal_scales_the_admitted_rate() {
        // The occupancy law: admitted 1000/s at 100 % CPU against a target of 80 % → 800/s.
        let mut s = Server::new(ServerConfig::default()).expect("test input");
        let mut now = 0;
        for _ in 0..3 {
            for k in 0..100 {
                s.on_request(
                    now + k * MS,
                    b"a",
                    offer(Algorithms::LossThenRate),
                    Class::Original,
                    Category::Reducible,
                );
            }
            now += 100 * MS;
            s.report(now - 1, occupancy(1.0, 0.8)).expect("test input");
        }
        s.handle_timeout(now + 1);
        assert!(s.status().overloaded);
        assert!((s.status().target - 800.0).abs() < 20.0, "{:?}", s.status());
        assert!(s.report(now, occupancy(f64::NAN, 0.8)).is_err());
    }

    #[test]
    fn the_occupancy_law_counts_admissions_over_the_measured_interval() {
        // Reports every 200 ms, twice the law's period, of traffic that arrives in the first
        // half of each report's interval only (200 requests, then 100 ms of silence): the
        // measurement covers 1000/s, so 100 % against a target of 80 % means 800/s. A count
        // over the law's last period alone would read 0/s or 2000/s.
        let mut s = Server::new(ServerConfig::default()).expect("test input");
        s.handle_timeout(0);
        let mut now = 0;
        for _ in 0..5 {
            for k in 0..200 {
                s.on_request(
                    now + k * MS / 2,
                    b"a",
                    offer(Algorithms::LossThenRate),
                    Class::Original,
                    Category::Reducible,
                );
            }
            now += 200 * MS;
            s.report(now, occupancy(1.0, 0.8)).expect("test input");
            s.handle_timeout(now + 100 * MS);
            let target = s.status().target;
            assert!((target - 800.0).abs() < 1e-6, "{:?}", s.status());
        }
    }

    #[test]
    fn servers_on_one_clock_order_their_values_by_time() {
        // RFC 7339 §4.4: values "generated ... at time t and t+1 MUST have an increasing value
        // in the "oc-seq" parameter". Two workers of one appliance, each with its own law,
        // answer the same client: a busy one runs its law every period, a quiet one every
        // 500 ms. The value the quiet one makes last is the newest, so it must carry the
        // higher oc-seq, or the client would keep following the busy one.
        let load = |s: &mut Server, now: u64| {
            s.on_request(
                now,
                b"c",
                offer(Algorithms::Loss),
                Class::Original,
                Category::Reducible,
            );
            s.report(
                now,
                Load::Queue(QueueLoad {
                    delay_ns: 400 * MS,
                    served: 10,
                    served_retransmissions: 0,
                    busy_ns: 10 * MS,
                }),
            )
            .expect("test input");
        };
        let (mut busy, mut quiet) = (
            Server::new(ServerConfig::default()).expect("test input"),
            Server::new(ServerConfig::default()).expect("test input"),
        );
        let t0 = 7_000 * MS;
        for k in 0..=300 {
            load(&mut busy, t0 + k * 10 * MS);
            if k % 50 == 0 && k < 300 {
                load(&mut quiet, t0 + k * 10 * MS);
            }
        }
        quiet.handle_timeout(t0 + 3_150 * MS);
        let (b, q) = (busy.status(), quiet.status());
        assert!(b.overloaded && q.overloaded, "{b:?} {q:?}");
        assert!(q.seq > b.seq, "the later value {} after {}", q.seq, b.seq);
        assert!(
            q.seq.0 / Seq::SCALE > b.seq.0 / Seq::SCALE,
            "{} after {}",
            q.seq,
            b.seq
        );
    }

    #[test]
    fn retransmissions_raise_the_alarm() {
        let mut s = Server::new(ServerConfig::default()).expect("test input");
        for k in 0..100 {
            let class = if k % 10 == 0 {
                Class::Retransmission
            } else {
                Class::Original
            };
            s.on_request(
                k * MS,
                b"a",
                offer(Algorithms::Loss),
                class,
                Category::Reducible,
            );
        }
        s.handle_timeout(101 * MS);
        assert!(s.status().overloaded, "10 % retransmissions > 5 %");
    }

    #[test]
    fn a_client_arriving_in_overload_is_measured_before_it_is_bound() {
        // RFC 7415 §3.5.1: "when the "oc" parameter is 0 with a non-zero "oc-validity", then the
        // client should reject 100% of SIP requests": a newcomer must not be told oc=0 before
        // the law has measured it, or it could never be measured.
        let (_, mut s) = run_fluid(1000.0, &[(3000.0, Some(Algorithms::LossThenRate))], 5);
        assert!(s.status().overloaded);
        let now = 5_000 * MS;
        s.on_request(
            now,
            b"newcomer",
            offer(Algorithms::LossThenRate),
            Class::Original,
            Category::Reducible,
        );
        let f = s.feedback(now, b"newcomer").expect("takes part");
        assert_eq!(f.validity_ms, 0, "no binding value yet: {f:?}");
        // Its in-dialog requests are never rejected, even without oc (§5.10.1).
        for k in 0..100 {
            assert_eq!(
                s.on_request(now + k, b"plain", None, Class::Original, Category::Priority),
                Admission::Admit
            );
        }
    }

    #[test]
    fn loss_percent_rounds_up() {
        assert_eq!(loss_percent(0.0), 0);
        assert_eq!(loss_percent(0.101), 11);
        assert_eq!(loss_percent(0.1), 10);
        assert_eq!(loss_percent(1.0), 99);
    }
}
