//! The four overload scenarios and what they realise into: a [`Workload`] (piecewise-constant
//! arrival rates, one-off mass arrivals, service-rate phases) that both models consume, so the
//! discrete-event and fluid models see the same offered load (for `bursty`, the same on/off
//! path of the modulating chain).
//!
//! Every rate is given as a multiple of the service rate μ, so `--mu` scales a scenario without
//! changing its shape.

use crate::rng::Rng;

/// Which overload cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScenarioKind {
    /// A one-off mass arrival on top of a background load below capacity.
    Bulk,
    /// MMPP on/off arrivals: above capacity while on, below while off.
    Bursty,
    /// Arrivals below capacity while the server's service rate drops for an interval.
    Slowdown,
    /// Arrivals below capacity throughout (sanity check: nothing should fail).
    Steady,
}

impl ScenarioKind {
    /// Every scenario, in the order sweeps and plots use.
    pub const ALL: [ScenarioKind; 4] = [
        ScenarioKind::Bulk,
        ScenarioKind::Bursty,
        ScenarioKind::Slowdown,
        ScenarioKind::Steady,
    ];

    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            ScenarioKind::Bulk => "bulk",
            ScenarioKind::Bursty => "bursty",
            ScenarioKind::Slowdown => "slowdown",
            ScenarioKind::Steady => "steady",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// A scenario's parameters (rates as multiples of μ, times in seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Which cause.
    pub kind: ScenarioKind,
    /// Arrivals happen in [0, duration).
    pub duration: f64,
    /// Background Poisson arrival rate (all but `bursty`), × μ.
    pub background: f64,
    /// `bulk`: calls in the mass arrival, × μ (so 10 means ten seconds of service).
    pub bulk_calls: f64,
    /// `bulk`: when the mass arrival starts.
    pub bulk_at: f64,
    /// `bulk`: over how long it arrives (uniformly).
    pub bulk_spread: f64,
    /// `bursty`: arrival rate while on, × μ.
    pub on_rate: f64,
    /// `bursty`: arrival rate while off, × μ.
    pub off_rate: f64,
    /// `bursty`: mean on period (exponential).
    pub mean_on: f64,
    /// `bursty`: mean off period (exponential).
    pub mean_off: f64,
    /// `slowdown`: the interval during which the server is slow.
    pub slow_from: f64,
    /// `slowdown`: end of the slow interval.
    pub slow_until: f64,
    /// `slowdown`: the service rate while slow, × μ.
    pub slow_mu: f64,
}

impl Scenario {
    /// The documented defaults of a scenario (see `sim/README.md`).
    pub fn defaults(kind: ScenarioKind) -> Self {
        let base = Scenario {
            kind,
            duration: 120.0,
            background: 0.5,
            bulk_calls: 0.0,
            bulk_at: 20.0,
            bulk_spread: 1.0,
            on_rate: 0.0,
            off_rate: 0.0,
            mean_on: 0.0,
            mean_off: 0.0,
            slow_from: 20.0,
            slow_until: 30.0,
            slow_mu: 1.0,
        };
        match kind {
            ScenarioKind::Bulk => Scenario {
                duration: 300.0,
                background: 0.8,
                bulk_calls: 2.0,
                ..base
            },
            ScenarioKind::Bursty => Scenario {
                duration: 300.0,
                background: 0.0,
                on_rate: 1.5,
                off_rate: 0.5,
                mean_on: 1.0,
                mean_off: 3.0,
                ..base
            },
            ScenarioKind::Slowdown => Scenario {
                duration: 300.0,
                background: 0.7,
                slow_mu: 0.3,
                ..base
            },
            ScenarioKind::Steady => Scenario {
                background: 0.7,
                ..base
            },
        }
    }

    /// Draws the workload for service rate `mu` (the `bursty` on/off path comes from `seed`).
    pub fn realise(&self, mu: f64, seed: u64) -> Workload {
        let mut segments = Vec::new();
        let mut impulses = Vec::new();
        let mut service = Vec::new();
        match self.kind {
            ScenarioKind::Bursty => {
                let mut rng = Rng::new(seed ^ 0x6d6d_7070);
                let (mut t, mut on) = (0.0, true);
                while t < self.duration {
                    let (mean, rate) = if on {
                        (self.mean_on, self.on_rate)
                    } else {
                        (self.mean_off, self.off_rate)
                    };
                    let end = (t + rng.exp(mean)).min(self.duration);
                    segments.push(Segment {
                        start: t,
                        end,
                        rate: rate * mu,
                    });
                    t = end;
                    on = !on;
                }
            }
            _ => segments.push(Segment {
                start: 0.0,
                end: self.duration,
                rate: self.background * mu,
            }),
        }
        if self.kind == ScenarioKind::Bulk && self.bulk_calls > 0.0 {
            impulses.push(Impulse {
                start: self.bulk_at,
                end: self.bulk_at + self.bulk_spread,
                calls: (self.bulk_calls * mu).round() as u64,
            });
        }
        if self.kind == ScenarioKind::Slowdown {
            service.push(Segment {
                start: self.slow_from,
                end: self.slow_until,
                rate: self.slow_mu * mu,
            });
        }
        Workload {
            segments,
            impulses,
            service,
            mu,
            horizon: self.duration,
        }
    }
}

/// A constant rate over [start, end).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Segment {
    /// Start (s).
    pub start: f64,
    /// End (s).
    pub end: f64,
    /// Calls (or messages) per second.
    pub rate: f64,
}

/// A mass arrival spread uniformly over [start, end).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Impulse {
    /// Start (s).
    pub start: f64,
    /// End (s).
    pub end: f64,
    /// How many calls.
    pub calls: u64,
}

/// The offered load and service rate over time, as both models see them.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Poisson arrival rates, sorted and disjoint.
    pub segments: Vec<Segment>,
    /// Mass arrivals.
    pub impulses: Vec<Impulse>,
    /// Where the service rate differs from `mu`.
    pub service: Vec<Segment>,
    /// The normal service rate (messages/s).
    pub mu: f64,
    /// No new call arrives after this time.
    pub horizon: f64,
}

impl Workload {
    /// The service rate at time `t`.
    pub fn mu_at(&self, t: f64) -> f64 {
        self.service
            .iter()
            .find(|s| s.start <= t && t < s.end)
            .map_or(self.mu, |s| s.rate)
    }

    /// Draws arrival times (sorted): Poisson within each segment, uniform within impulses.
    pub fn arrival_times(&self, seed: u64) -> Vec<f64> {
        let mut rng = Rng::new(seed);
        let mut times = Vec::new();
        for s in &self.segments {
            if s.rate <= 0.0 {
                continue;
            }
            let mut t = s.start;
            loop {
                t += rng.exp(1.0 / s.rate);
                if t >= s.end {
                    break;
                }
                times.push(t);
            }
        }
        for i in &self.impulses {
            for _ in 0..i.calls {
                times.push(i.start + rng.unit() * (i.end - i.start));
            }
        }
        times.sort_by(f64::total_cmp);
        times
    }

    /// Expected number of calls arriving in [a, b): what the fluid model feeds in.
    pub fn expected_arrivals(&self, a: f64, b: f64) -> f64 {
        let overlap = |s: f64, e: f64| (e.min(b) - s.max(a)).max(0.0);
        let poisson: f64 = self
            .segments
            .iter()
            .map(|s| s.rate * overlap(s.start, s.end))
            .sum();
        let mass: f64 = self
            .impulses
            .iter()
            .map(|i| i.calls as f64 * overlap(i.start, i.end) / (i.end - i.start).max(1e-12))
            .sum();
        poisson + mass
    }

    /// Mean offered call rate over the arrival window.
    pub fn mean_rate(&self) -> f64 {
        self.expected_arrivals(0.0, self.horizon) / self.horizon.max(1e-12)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_arrivals_match_the_expected_mass() {
        for kind in ScenarioKind::ALL {
            let w = Scenario::defaults(kind).realise(1000.0, 3);
            let drawn = w.arrival_times(3).len() as f64;
            let expected = w.expected_arrivals(0.0, w.horizon);
            // Poisson: within 5 standard deviations.
            assert!(
                (drawn - expected).abs() < 5.0 * expected.sqrt(),
                "{kind:?}: {drawn} vs {expected}"
            );
        }
    }

    #[test]
    fn bursty_path_alternates_and_covers_the_window() {
        let w = Scenario::defaults(ScenarioKind::Bursty).realise(1000.0, 9);
        assert!(w.segments.len() > 20);
        assert_eq!(w.segments[0].start, 0.0);
        for pair in w.segments.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
            assert_ne!(pair[0].rate, pair[1].rate);
        }
        assert_eq!(w.segments.last().map(|s| s.end), Some(300.0));
        // The same seed gives the same path; another seed another.
        assert_eq!(
            w,
            Scenario::defaults(ScenarioKind::Bursty).realise(1000.0, 9)
        );
        assert_ne!(
            w,
            Scenario::defaults(ScenarioKind::Bursty).realise(1000.0, 10)
        );
    }

    #[test]
    fn slowdown_lowers_mu_only_inside_its_interval() {
        let w = Scenario::defaults(ScenarioKind::Slowdown).realise(1000.0, 1);
        assert_eq!(w.mu_at(10.0), 1000.0);
        assert_eq!(w.mu_at(25.0), 300.0);
        assert_eq!(w.mu_at(30.0), 1000.0);
    }
}
