//! Demand-aware sharing of a notifier's capacity among its subscribers (beyond RFC 7200).
//!
//! RFC 7200 §3 lets a server that can take R requests/s of some class give each upstream
//! subscriber a part of it ("CPa1 may allocate the received total acceptable call rate among
//! its neighbors"), but says nothing of how. Splitting R equally wastes the shares of quiet
//! edges while a busy one rejects calls. This module splits it by demand, in the spirit of
//! distributed rate limiting (Raghavan et al., "Cloud Control with Distributed Rate Limiting",
//! SIGCOMM 2007, flow-proportional share): the notifier cannot see an edge's demand, only what
//! the edge lets through, so
//!
//! - an edge whose admitted rate reaches its share ([`AllocatorConfig::busy`] of it) is
//!   **constrained**: its real demand is unknown, so it is estimated above what it has
//!   ([`AllocatorConfig::probe`]) and the share grows period by period while capacity is free;
//! - an edge below its share **donates** the rest: its demand is its smoothed admitted rate
//!   plus a little [`AllocatorConfig::headroom`] for growth;
//! - an edge not yet measured counts as constrained with unknown demand.
//!
//! Shares are max-min fair over these estimates (water-filling): every edge
//! asking for less than an equal split gets what it asks, the others split the rest equally;
//! capacity nobody asks for goes to the constrained edges (equally to all when none is). Every
//! edge keeps at least [`AllocatorConfig::min_share`] (never more than R / n in all), so an
//! edge that starts sending again is seen at all. Targets are recomputed once per
//! [`AllocatorConfig::period`] (RFC 7200 §4.10: "not generate notifications at a rate higher
//! than once per second") and change only when the change is material
//! ([`AllocatorConfig::hysteresis`]), so measurement noise does not become a NOTIFY storm.
//!
//! The targets always add up to at most R. What the [`super::notifier::Notifier`] actually sends
//! keeps a stronger promise: the shares that subscribers may be enforcing (the last one each
//! acknowledged, and any still in flight) never add up to more than R. A share that grows is
//! sent only out of capacity that is free in that sense, so it waits until the decreases that
//! free it have been answered with a 2xx; a new subscriber's first NOTIFY carries what is free
//! at that moment (possibly 0, then its full share from its next NOTIFY on).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::nanos;
use crate::fair::water_fill;
use crate::policy::{Accept, Limit, Rate, Rule};

/// How the allocator measures and shares.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct AllocatorConfig {
    /// How often demand is measured and shares recomputed. Default 1 s.
    pub period: Duration,
    /// Weight of the newest period's rate in the smoothed demand, 0 < α ≤ 1. Default 1: a
    /// period's rate is already an average over the period, and shares settle within two
    /// periods of a change; lower it where traffic is bursty at low rates (Poisson arrivals at
    /// 10/s vary by ±30 % from one second to the next), at the cost of slower settling. (A
    /// period without any request sets the demand to 0 at once.)
    pub alpha: f64,
    /// An edge admitting at least this fraction of its share is constrained, 0 < b ≤ 1.
    /// Default 0.97. A rate-limited edge admits its share, but measured over two periods at
    /// a few requests a second (the limiter's spacing, the arrivals' jitter) it may look a few
    /// percent short of it; it then counts as a donor, whose share (its rate × 1 + headroom)
    /// still grows, only more slowly than a probe.
    pub busy: f64,
    /// A constrained edge's demand is estimated at its share times 1 + probe, > 0. Default 0.5
    /// (a starved edge's share grows by half each period while capacity is free).
    pub probe: f64,
    /// A donating edge keeps its rate times 1 + headroom, above 1 / busy − 1 (or it would
    /// count as constrained at its own demand) and at most 1. Default 0.15: a donor at 10/s
    /// keeps 11.5/s, room to grow, and its rate is 87 % of its share, far enough below `busy`
    /// that measurement noise does not make it look constrained.
    pub headroom: f64,
    /// A target moves only by more than this fraction of the larger of old and new, 0 ≤ h < 1
    /// (a constrained subscriber's target rises by more than a tenth of it: capacity left to
    /// nobody would be lost). Default 0.1: a donor at 10 jittered requests a second measures
    /// within ±5 % from one period to the next.
    pub hysteresis: f64,
    /// The least share of an edge, requests/s, ≥ 0 (at most R / n is given). Default 1.
    pub min_share: f64,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(1),
            alpha: 1.0,
            busy: 0.97,
            probe: 0.5,
            headroom: 0.15,
            hysteresis: 0.1,
            min_share: 1.0,
        }
    }
}

/// Why an allocation was refused (nothing was changed).
#[derive(Clone, Debug, PartialEq)]
pub enum AllocatorError {
    /// The capacity is not a rate 0 ≤ R ≤ [`Rate::MAX`].
    Capacity(f64),
    /// A configuration value is out of range.
    Config {
        /// The [`AllocatorConfig`] field.
        field: &'static str,
        /// Its value.
        value: f64,
        /// The range it must be in.
        expected: &'static str,
    },
}

impl std::fmt::Display for AllocatorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Capacity(c) => write!(f, "capacity {c}: expected 0 to {} requests/s", Rate::MAX),
            Self::Config {
                field,
                value,
                expected,
            } => write!(f, "allocator {field} {value}: expected {expected}"),
        }
    }
}

impl std::error::Error for AllocatorError {}

impl AllocatorConfig {
    /// Checks every field's range.
    pub fn check(&self) -> Result<(), AllocatorError> {
        let bad = |field, value, expected| {
            Err(AllocatorError::Config {
                field,
                value,
                expected,
            })
        };
        if self.period.is_zero() {
            return bad("period", 0.0, "> 0");
        }
        if !(self.alpha > 0.0 && self.alpha <= 1.0) {
            return bad("alpha", self.alpha, "0 < alpha <= 1");
        }
        if !(self.busy > 0.0 && self.busy <= 1.0) {
            return bad("busy", self.busy, "0 < busy <= 1");
        }
        if !(self.probe > 0.0 && self.probe <= 100.0) {
            return bad("probe", self.probe, "0 < probe <= 100");
        }
        if !((1.0 + self.headroom) * self.busy > 1.0 && self.headroom <= 1.0) {
            return bad("headroom", self.headroom, "1 / busy - 1 < headroom <= 1");
        }
        if !(self.hysteresis >= 0.0 && self.hysteresis < 1.0) {
            return bad("hysteresis", self.hysteresis, "0 <= hysteresis < 1");
        }
        if !(self.min_share >= 0.0 && self.min_share <= Rate::MAX) {
            return bad("min_share", self.min_share, "0 <= min_share <= Rate::MAX");
        }
        Ok(())
    }
}

/// One subscriber as the allocator sees it (for RPCs and logs).
#[derive(Clone, Debug, PartialEq)]
pub struct ShareReport {
    /// The subscriber's URI (its SUBSCRIBE's From).
    pub subscriber: String,
    /// Smoothed admitted rate, requests/s; `None` before the first full period.
    pub usage: Option<f64>,
    /// Its last measurement reached its share (its real demand is unknown).
    pub constrained: bool,
    /// The share the allocator wants it to have, requests/s.
    pub target: f64,
    /// The share it has acknowledged (its NOTIFY was answered 2xx), requests/s; `None` before.
    pub in_force: Option<f64>,
}

#[derive(Clone, Debug)]
struct Member {
    display: String,
    /// Requests observed in this period, and when the last of them was reported.
    count: u64,
    last: u64,
    /// This period's first observation: when, and how many it counted (they arrived before
    /// it).
    first: Option<(u64, u64)>,
    /// When the last observation before this period was made (or the subscriber joined):
    /// this period's requests arrived after it.
    anchor: u64,
    /// The period before this one, when requests came in it: their count, the anchor it
    /// started from, the least share enforced in it.
    previous: Option<(u64, u64, Option<f64>)>,
    usage: Option<f64>,
    constrained: bool,
    target: f64,
    /// The share the subscriber last acknowledged, and the least one it acknowledged during
    /// this period (what its admissions are compared with).
    in_force: Option<f64>,
    least_in_force: Option<f64>,
}

/// The state of one capacity being shared: the class of requests (a template rule), R, and
/// per subscriber its measured demand and target share. Owned by a
/// [`super::notifier::Notifier`] (see [`super::notifier::Notifier::set_capacity`]).
#[derive(Clone, Debug)]
pub struct Allocation {
    capacity: f64,
    template: Rule,
    config: AllocatorConfig,
    members: BTreeMap<String, Member>,
    next_tick: u64,
    /// Some observation has arrived: until then nobody is measured (a notifier that gets no
    /// reports splits blindly, equally, instead of taking everyone for idle).
    observed: bool,
}

/// `x` rounded down to a thousandth (what a `<rate>` carries here), so rounded shares never
/// add up to more than the capacity; 0 for NaN.
pub(crate) fn round_share(x: f64) -> f64 {
    let r = ((x * 1000.0).floor() / 1000.0).clamp(0.0, Rate::MAX);
    if r.is_nan() { 0.0 } else { r }
}

impl Allocation {
    /// Shares `capacity` requests/s of the requests `template` matches; each subscriber's
    /// policy is `template` with its share as `<rate>` (its alt-action kept).
    pub fn new(
        capacity: f64,
        template: Rule,
        config: AllocatorConfig,
        now_ns: u64,
    ) -> Result<Self, AllocatorError> {
        if Rate::new(capacity).is_err() {
            return Err(AllocatorError::Capacity(capacity));
        }
        config.check()?;
        Ok(Self {
            capacity,
            template,
            config,
            members: BTreeMap::new(),
            next_tick: now_ns.saturating_add(nanos(config.period)),
            observed: false,
        })
    }

    /// R, requests/s.
    pub fn capacity(&self) -> f64 {
        self.capacity
    }

    /// The configuration.
    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// The rule each subscriber's share is written into.
    pub fn template(&self) -> &Rule {
        &self.template
    }

    /// The subscribers taking part (their keys: canonical URIs).
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.members.keys()
    }

    /// Changes R and re-splits at once (no hysteresis).
    pub fn set_capacity(&mut self, capacity: f64) -> Result<(), AllocatorError> {
        if Rate::new(capacity).is_err() {
            return Err(AllocatorError::Capacity(capacity));
        }
        self.capacity = capacity;
        self.resplit(false);
        Ok(())
    }

    /// When [`Allocation::tick`] is next due.
    pub fn next_tick(&self) -> u64 {
        self.next_tick
    }

    /// Adds a subscriber (keyed by its canonical URI) and re-splits at once. A subscriber
    /// already present keeps its measurements.
    pub fn join(&mut self, key: &str, display: &str, now_ns: u64) {
        if self.members.contains_key(key) {
            return;
        }
        self.members.insert(
            key.to_owned(),
            Member {
                display: display.to_owned(),
                count: 0,
                last: now_ns,
                first: None,
                anchor: now_ns,
                previous: None,
                usage: None,
                constrained: true,
                target: 0.0,
                in_force: None,
                least_in_force: None,
            },
        );
        self.resplit(false);
    }

    /// Removes a subscriber and re-splits at once.
    pub fn leave(&mut self, key: &str) {
        if self.members.remove(key).is_some() {
            self.resplit(false);
        }
    }

    /// Whether `key` takes part.
    pub fn contains(&self, key: &str) -> bool {
        self.members.contains_key(key)
    }

    /// Counts `count` requests of the class from subscriber `key` (what it let through) that
    /// arrived since its previous observation, the last of them at `now_ns`. One call per
    /// request (count 1) or one per report (the count since the previous report) both give
    /// exact rates for evenly spaced traffic (see [`Allocation::tick`]). False for a
    /// subscriber that does not take part.
    pub fn observe(&mut self, key: &str, count: u64, now_ns: u64) -> bool {
        let Some(m) = self.members.get_mut(key) else {
            return false;
        };
        if count > 0 {
            m.first.get_or_insert((now_ns, count));
            m.count = m.count.saturating_add(count);
            m.last = m.last.max(now_ns);
            self.observed = true;
        }
        true
    }

    /// Records that subscriber `key` acknowledged a NOTIFY carrying `share` (it enforces it).
    pub fn acknowledged(&mut self, key: &str, share: f64) {
        if let Some(m) = self.members.get_mut(key) {
            m.in_force = Some(share);
            m.least_in_force = Some(m.least_in_force.map_or(share, |l| l.min(share)));
        }
    }

    /// Ends a measurement period when one is due and recomputes the targets (with
    /// hysteresis); returns whether a target changed.
    ///
    /// A subscriber's rate is its count over this period and the one before over the time
    /// those requests span: from the observation before them to the last one, or to now less
    /// one mean gap when it went quiet since (so evenly spaced requests measure exactly, and a
    /// subscriber that stopped is not credited with its old pace). A period with none is a
    /// rate of 0 (idle is unambiguous: its share is reclaimed at once). Its
    /// smoothed rate is compared with the least share it enforced during the period: reaching
    /// [`AllocatorConfig::busy`] of it makes it constrained. A subscriber measured over less
    /// than half a period waits for the next one. Until the first observation arrives nobody is
    /// measured: without reports every subscriber counts as constrained with unknown demand,
    /// and the split is equal.
    pub fn tick(&mut self, now_ns: u64) -> bool {
        if now_ns < self.next_tick {
            return false;
        }
        let c = self.config;
        for m in self.members.values_mut() {
            if !self.observed {
                // Nothing arrived up to now, from anyone.
                m.anchor = now_ns;
                continue;
            }
            let window = now_ns.saturating_sub(m.anchor);
            if window < nanos(c.period) / 2 {
                continue;
            }
            // The requests the rate was measured over, and from when (kept for the next
            // period's two-period measurement).
            let mut used = (m.count, m.anchor);
            let rate = if m.count == 0 {
                0.0
            } else {
                // Over this period and the one before it (half the noise of one, and a change
                // of demand shows in full one period later).
                // After a period without requests (or the first one), from this period's first
                // observation on: the time before it was not all busy.
                let (count, start) = match (m.previous, m.first) {
                    (Some((n, anchor, _)), _) => (m.count.saturating_add(n), anchor),
                    (None, Some((at, n))) if m.count > n && at > m.anchor => (m.count - n, at),
                    (None, _) => (m.count, m.anchor),
                };
                used = (count, start);
                let span = m.last.saturating_sub(start) as f64;
                let gap = span / count as f64;
                let effective = span.max(now_ns.saturating_sub(start) as f64 - gap);
                if effective <= 0.0 {
                    continue;
                }
                count as f64 * 1e9 / effective
            };
            let usage = match m.usage {
                // Idle is unambiguous: its share is reclaimed at once.
                _ if rate == 0.0 => 0.0,
                Some(u) => c.alpha * rate + (1.0 - c.alpha) * u,
                None => rate,
            };
            let reference = match (m.least_in_force, m.in_force) {
                (Some(l), _) => l,
                (None, Some(f)) => f,
                (None, None) => m.target,
            };
            // The least share it enforced over the periods measured.
            let reference = match m.previous {
                Some((_, _, Some(p))) if m.count > 0 => reference.min(p),
                _ => reference,
            };
            m.constrained = usage >= c.busy * reference;
            m.usage = Some(usage);
            // This period's part of the measurement, for the next one: after an idle period
            // it starts at the first observation, not at the idle anchor.
            let (this_count, this_start) = match m.previous {
                Some((n, _, _)) => (used.0.saturating_sub(n), m.anchor),
                None => used,
            };
            m.previous = (m.count > 0).then_some((this_count, this_start, m.least_in_force));
            // Nothing arrived up to now: the next requests come after it.
            m.anchor = if m.count > 0 { m.last } else { now_ns };
            m.count = 0;
            m.first = None;
            m.least_in_force = m.in_force;
        }
        // Periods are counted from the last tick, not from when it was due: a late tick
        // measures a longer period, never two at once.
        self.next_tick = now_ns.saturating_add(nanos(c.period));
        self.resplit(true)
    }

    /// The demand each member is estimated to have, requests/s.
    fn estimate(&self, m: &Member) -> f64 {
        let c = &self.config;
        match m.usage {
            None => f64::INFINITY,
            Some(u) if m.constrained => u.max(m.target).max(c.min_share) * (1.0 + c.probe),
            Some(u) => u * (1.0 + c.headroom),
        }
    }

    /// Recomputes the targets; with `hysteresis`, a target moves only materially (and small
    /// decreases are still taken when the kept targets would add up to more than R). Returns
    /// whether a target changed.
    fn resplit(&mut self, hysteresis: bool) -> bool {
        let n = self.members.len();
        if n == 0 {
            return false;
        }
        let floor = self.config.min_share.min(self.capacity / n as f64);
        let demands: Vec<f64> = self
            .members
            .values()
            .map(|m| self.estimate(m).max(floor))
            .collect();
        // What nobody asks for goes to the constrained (they are the ones who may use it; a
        // donor already has its headroom, an idle one needs none), or to everyone when none is.
        let (mut fresh, remaining) = water_fill(self.capacity, &demands);
        let constrained = self.members.values().filter(|m| m.constrained).count();
        for (f, m) in fresh.iter_mut().zip(self.members.values()) {
            if constrained == 0 {
                *f += remaining / n as f64;
            } else if m.constrained {
                *f += remaining / constrained as f64;
            }
        }
        let fresh: Vec<f64> = fresh.into_iter().map(round_share).collect();
        let h = if hysteresis {
            self.config.hysteresis
        } else {
            0.0
        };
        let old: Vec<f64> = self.members.values().map(|m| m.target).collect();
        let keep = |o: f64, f: f64| if (f - o).abs() > h * o.max(f) { f } else { o };
        let mut next: Vec<f64> = old.iter().zip(&fresh).map(|(&o, &f)| keep(o, f)).collect();
        if constrained > 0 {
            // The constrained split what the others' targets (as kept) leave, so a change too
            // small to send to a donor never leaves capacity to nobody.
            let others: f64 = self
                .members
                .values()
                .zip(&next)
                .filter(|(m, _)| !m.constrained)
                .map(|(_, t)| t)
                .sum();
            let wants: Vec<f64> = self
                .members
                .values()
                .zip(&demands)
                .filter(|(m, _)| m.constrained)
                .map(|(_, &d)| d)
                .collect();
            let (mut split, left) = water_fill(self.capacity - others, &wants);
            for x in &mut split {
                *x = round_share(*x + left / constrained as f64);
            }
            let mut split = split.into_iter();
            for ((m, t), &o) in self.members.values().zip(&mut next).zip(&old) {
                if m.constrained {
                    let f = split.next().unwrap_or(o);
                    // An increase of a tenth of the hysteresis (capacity is waiting), a
                    // decrease only materially.
                    *t = if f > o * (1.0 + h / 10.0) {
                        f
                    } else {
                        keep(o, f)
                    };
                }
            }
        }
        // Kept targets may add up to more than R: take the small decreases too, largest
        // first, until they do not (all of them give Σ fresh ≤ R).
        let mut total: f64 = next.iter().sum();
        if total > self.capacity {
            let mut kept: Vec<usize> = (0..n).filter(|&i| next[i] > fresh[i]).collect();
            kept.sort_by(|&a, &b| (next[b] - fresh[b]).total_cmp(&(next[a] - fresh[a])));
            for i in kept {
                if total <= self.capacity {
                    break;
                }
                total -= next[i] - fresh[i];
                next[i] = fresh[i];
            }
        }
        let mut changed = false;
        for (m, t) in self.members.values_mut().zip(next) {
            changed |= m.target != t;
            m.target = t;
        }
        changed
    }

    /// Subscriber `key`'s target share, requests/s.
    pub fn target(&self, key: &str) -> Option<f64> {
        self.members.get(key).map(|m| m.target)
    }

    /// The policy that gives a subscriber `share` requests/s: the template rule with
    /// `<rate>` `share` rounded down to a thousandth.
    pub fn rules(&self, share: f64) -> Vec<Arc<Rule>> {
        let mut rule = self.template.clone();
        rule.accept = Accept {
            limit: Limit::Rate(Rate::new(round_share(share)).unwrap_or(Rate::ZERO)),
            alt_action: self.template.accept.alt_action.clone(),
        };
        vec![Arc::new(rule)]
    }

    /// Every subscriber's demand and shares, in key order.
    pub fn reports(&self) -> Vec<ShareReport> {
        self.members
            .values()
            .map(|m| ShareReport {
                subscriber: m.display.clone(),
                usage: m.usage,
                constrained: m.constrained,
                target: m.target,
                in_force: m.in_force,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configurations_are_refused_with_the_field() {
        let rule = Rule {
            id: crate::policy::RuleId::new("r").expect("id"),
            conditions: Default::default(),
            accept: Accept {
                limit: Limit::Rate(Rate::ZERO),
                alt_action: crate::policy::AltAction::Reject,
            },
        };
        let bad = [
            AllocatorConfig {
                period: Duration::ZERO,
                ..Default::default()
            },
            AllocatorConfig {
                alpha: 0.0,
                ..Default::default()
            },
            AllocatorConfig {
                busy: f64::NAN,
                ..Default::default()
            },
            AllocatorConfig {
                probe: -1.0,
                ..Default::default()
            },
            // (1 + 0.01) · 0.97 ≤ 1: a donor at its own demand would look constrained.
            AllocatorConfig {
                headroom: 0.01,
                ..Default::default()
            },
            AllocatorConfig {
                hysteresis: 1.0,
                ..Default::default()
            },
            AllocatorConfig {
                min_share: f64::INFINITY,
                ..Default::default()
            },
        ];
        for c in bad {
            let e = Allocation::new(10.0, rule.clone(), c, 0).expect_err("refused");
            assert!(matches!(e, AllocatorError::Config { .. }), "{e}");
        }
        for cap in [-1.0, f64::NAN, f64::INFINITY, 2e12] {
            let e = Allocation::new(cap, rule.clone(), AllocatorConfig::default(), 0);
            assert!(matches!(e, Err(AllocatorError::Capacity(_))), "{cap}");
        }
    }
}
