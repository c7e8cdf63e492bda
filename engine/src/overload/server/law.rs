//! The law, once per period: capacity, target, overload, demand and split (the module
//! documentation's steps 1-5), and the `oc-seq` each period stamps.

use super::Server;
use crate::clock::nanos;
use crate::fair::max_min_fair;
use crate::overload::{Algorithm, Seq};

impl Server {
    /// `oc-seq` as a timestamp in law periods (at least 10 ms, so realtime nanoseconds still
    /// fit the grammar's 12 digits): its integer part rises with every period, so a client
    /// that reads only the part before the "." (Kamailio 5.8+ and 6.x keep a value only if
    /// that integer rose) sees each new value too, and every server on the same clock and
    /// period (the worker processes of one appliance, each with its own law) stamps on one
    /// scale, so a client they all answer keeps the newest value of any of them. A count
    /// of each server's own periods instead would drift apart between servers, and the
    /// client would follow whichever had counted more, ignoring the others for good.
    pub(super) fn period_seq(&self, now_ns: u64) -> Seq {
        let unit = nanos(self.config.period).max(10_000_000);
        let (int, frac) = (now_ns / unit, now_ns % unit);
        let frac = (frac as u128 * Seq::SCALE as u128 / unit as u128) as u64;
        Seq(int
            .saturating_mul(Seq::SCALE)
            .saturating_add(frac)
            .min(Seq::MAX.0))
    }

    pub(super) fn tick(&mut self, now_ns: u64) {
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
            let big_d = c.target_delay.as_secs_f64();
            let h = c.drain.as_secs_f64();
            signal |= self.delay_ns > nanos(c.target_delay);
            self.target = (self.mu * (1.0 - retx) - (d - big_d) * self.mu / h).max(0.0);
        }

        // 4: demands, conformance, newcomers.
        let overloaded = self.overloaded;
        let mut total_demand = 0.0;
        let mut constrained = false;
        let smooth = |s: &mut super::ClientState, offered: f64| {
            s.demand = if s.measured {
                c.alpha * offered + (1.0 - c.alpha) * s.demand
            } else {
                s.measured = true;
                offered
            };
        };
        for s in self.clients.states_mut() {
            if !s.member {
                if s.arrivals >= super::GRADUATE_REQUESTS || !overloaded {
                    s.member = true;
                    s.measured = false;
                }
                s.arrivals = 0;
                continue;
            }
            let seen = s.arrivals as f64 / dt;
            s.arrivals = 0;
            let controlled = super::covered(s, self.last_tick, now_ns) as f64 / 1e9;
            let sent = std::mem::take(&mut s.controlled_arrivals) as f64
                - std::mem::take(&mut s.activations) as f64 * super::ACTIVATION_REQUESTS;
            conformance(s, sent, controlled, overloaded);
            let offered = match s.algorithm {
                None => seen,
                Some(_) if s.nonconforming => seen,
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
            smooth(s, offered);
            total_demand += s.demand;
        }
        let newcomers = self.newcomers.arrivals as f64 / dt;
        self.newcomers.arrivals = 0;
        smooth(&mut self.newcomers, newcomers);
        total_demand += self.newcomers.demand;

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

        // 5: split, over the clients of their own and the newcomers as one.
        if self.overloaded {
            let mut demands: Vec<f64> = self
                .clients
                .states_mut()
                .filter(|s| s.member)
                .map(|s| s.demand)
                .collect();
            demands.push(self.newcomers.demand);
            let mut shares = max_min_fair(self.target, &demands).into_iter();
            let members = self.clients.states_mut().filter(|s| s.member);
            for (s, share) in members
                .chain(std::iter::once(&mut self.newcomers))
                .zip(&mut shares)
            {
                s.allocated = true;
                s.share = share;
                s.loss = if s.demand > 0.0 {
                    (1.0 - share / s.demand).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                s.rate = (share.floor() as u64).clamp(c.min_rate, crate::overload::MAX_RATE);
                s.reject = if s.algorithm.is_none() || s.nonconforming {
                    s.loss
                } else {
                    0.0
                };
            }
        } else {
            for s in self
                .clients
                .states_mut()
                .chain(std::iter::once(&mut self.newcomers))
            {
                s.share = 0.0;
                s.loss = 0.0;
                s.rate = 0;
                s.reject = 0.0;
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
            .retain(|s| now_ns.saturating_sub(s.last_seen) < nanos(c.hold_algorithm));

        self.served = 0;
        self.served_retx = 0;
        self.busy_ns = 0;
        self.queue_reported = false;
        self.arrivals_new = 0;
        self.arrivals_retx = 0;
    }
}

/// A participant's conformance over the period that ended: the `sent` requests that arrived
/// while it was under control, against what it was allowed for the `controlled` seconds it
/// was, in its bucket (the server documentation).
pub(super) fn conformance(
    s: &mut super::ClientState,
    sent: f64,
    controlled: f64,
    overloaded: bool,
) {
    let allowed = match s.algorithm {
        Some(Algorithm::Rate) => s.rate as f64,
        Some(Algorithm::Loss) => s.share,
        None => 0.0,
    };
    if !(overloaded && s.allocated && s.algorithm.is_some()) {
        s.debt = 0.0;
        s.nonconforming = false;
        s.allowed = allowed;
        return;
    }
    let room = allowed.max(s.allowed);
    let limit = (room * super::NONCONFORMING_SECONDS).max(super::NONCONFORMING_REQUESTS);
    s.debt = (s.debt + sent - room * super::CONFORMANCE_SLACK * controlled).clamp(0.0, 2.0 * limit);
    if s.debt > limit {
        s.nonconforming = true;
    } else if s.debt <= limit / 2.0 {
        s.nonconforming = false;
    }
    s.allowed = allowed;
}

/// A loss fraction as RFC 7339's whole percentage, rounded up (the server asks for at least
/// what it needs), at most 99: a client told 100 sends nothing, so it would hear no newer value
/// until this one expired, and then send everything.
pub(super) fn loss_percent(loss: f64) -> u64 {
    ((loss * 100.0 - 1e-9).ceil().max(0.0) as u64).min(99)
}
