//! The limiters' arithmetic — GCRA for rates, the percent gate — as pure functions of the
//! state they are given: the shared rule cells and the shards' hot rows hold the state (in
//! atomics) and call these. Time is an input (monotonic nanoseconds), so every decision is
//! deterministic.
//!
//! # Rate: GCRA, not a per-second counter
//! A rule with `<rate>r</rate>` admits on average r requests per second with a burst
//! tolerance τ (engine configuration, default 100 ms): the generic cell rate algorithm keeps a
//! theoretical arrival time (TAT) and admits a request at time t when TAT − t ≤ L, where
//! T = 1/r is the emission interval, b = max(1, ⌈r·τ⌉) the burst and L = min(τ, b·T − 1 ns)
//! the tolerance; an admitted request moves TAT to max(TAT, t) + T. So at most
//! 1 + ⌊L/T⌋ = b requests pass at once and never more than 1 + (W + L)/T ≤ r·(W + τ) + 1 in
//! any window of length W. L is τ itself, not (b − 1)·T: below 1/τ requests a second b is 1,
//! and a tolerance of (b − 1)·T = 0 would refuse every request that comes a moment early —
//! random (Poisson) arrivals at the rate would get about half of it through (measured: a
//! 9.8/s rule offered 9.8/s admitted 5.05/s, a 5/s rule offered 15/s admitted 3.79/s). A tail-drop counter that resets every
//! second (as many proxies' rate-limit modules do) lets the whole second's quota through in its
//! first milliseconds and then refuses everything; GCRA spreads admissions evenly, which is
//! what the overloaded server downstream needs.
//!
//! T is kept in whole nanoseconds, so the achieved rate is off by at most 0.5 ns / T relative
//! (0.005 % at 100,000 requests/s). A rate of 0 admits nothing; a rate at or above 2·10⁹/s
//! admits everything.

use std::time::Duration;

/// The emission interval T = 1/r in whole nanoseconds (0 at or above 2·10⁹/s: everything
/// passes), or `None` for a rate that admits nothing (0, negative, not a number).
pub fn interval_ns(per_second: f64) -> Option<u64> {
    if per_second > 0.0 && per_second.is_finite() {
        Some((1e9 / per_second).round() as u64)
    } else {
        None
    }
}

/// L = min(τ, b·T − 1 ns): how far ahead of now the TAT may be for a request to pass
/// (`interval_ns` = T ≥ 1, b from [`burst`]).
pub fn tolerance_ns(interval_ns: u64, per_second: f64, tolerance: Duration) -> u64 {
    let b = burst(per_second, tolerance);
    let tau = u64::try_from(tolerance.as_nanos()).unwrap_or(u64::MAX);
    tau.min(interval_ns.saturating_mul(b).saturating_sub(1))
}

/// b = max(1, ⌈r·τ⌉): how many requests may pass at once.
pub fn burst(per_second: f64, tolerance: Duration) -> u64 {
    let b = (per_second * tolerance.as_secs_f64()).ceil();
    if b.is_finite() && b >= 1.0 {
        b as u64
    } else {
        1
    }
}

/// A GCRA lease of up to `max` tokens at `now_ns` from theoretical arrival time `tat_ns`
/// (emission interval `interval_ns`, tolerance `tolerance_ns`), looking `ahead_ns` into the
/// future: a token is granted when its slot s satisfies s − tolerance ≤ now + ahead. Returns
/// how many were granted, the slot of the first (the others follow one interval apart) and
/// the TAT after them; `(0, _, tat_ns)` when none. With `max` 1 and no look-ahead this is
/// GCRA's single decision: admit when TAT − now ≤ L, then TAT = max(TAT, now) + T.
#[inline]
pub fn gcra_lease(
    tat_ns: u64,
    now_ns: u64,
    interval_ns: u64,
    tolerance_ns: u64,
    ahead_ns: u64,
    max: u32,
) -> (u32, u64, u64) {
    let reach = tolerance_ns.saturating_add(ahead_ns);
    let base = tat_ns.max(now_ns);
    let behind = base - now_ns;
    if behind > reach {
        return (0, base, tat_ns);
    }
    let conforming = (reach - behind)
        .checked_div(interval_ns)
        .map_or(u64::from(max), |n| n + 1);
    let k = conforming.min(u64::from(max)) as u32;
    (k, base, base.saturating_add(u64::from(k) * interval_ns))
}

/// The share of requests a percent gate accepts, in units of 10⁻⁴ % (1,000,000 is 100 %):
/// `percent` clamped to 0..=100.
pub fn percent_step(percent: f64) -> u32 {
    (percent.clamp(0.0, 100.0) * 10_000.0).round() as u32
}

const PERCENT_SCALE: u32 = 1_000_000;

/// One decision of a percent gate with `step` ([`percent_step`]) whose accumulator holds
/// `accumulator`: whether the request is accepted, and the accumulator after it. From a zero
/// accumulator, after n requests ⌊p·n/100⌋ were accepted, evenly spread.
#[inline]
pub fn percent_advance(step: u32, accumulator: u32) -> (bool, u32) {
    let acc = accumulator.saturating_add(step.min(PERCENT_SCALE));
    if acc >= PERCENT_SCALE {
        (true, acc - PERCENT_SCALE)
    } else {
        (false, acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    /// One owner's GCRA over the functions above: `try_acquire` is a lease of one token.
    struct Gate {
        interval: Option<u64>,
        tolerance: u64,
        tat: u64,
    }

    impl Gate {
        fn new(per_second: f64, tau: Duration) -> Self {
            let interval = interval_ns(per_second);
            Gate {
                interval,
                tolerance: interval.map_or(0, |t| tolerance_ns(t, per_second, tau)),
                tat: 0,
            }
        }

        fn try_acquire(&mut self, now: u64) -> bool {
            let Some(t) = self.interval else {
                return false;
            };
            let (k, _, tat) = gcra_lease(self.tat, now, t, self.tolerance, 0, 1);
            self.tat = tat;
            k == 1
        }
    }

    #[test]
    fn burst_is_bounded_by_rate_times_tolerance() {
        let mut g = Gate::new(100.0, Duration::from_millis(100));
        let at_once = (0..1000).filter(|_| g.try_acquire(5 * S)).count();
        assert_eq!(at_once, 10);
        // Rate below 1/τ: one at a time.
        let mut g = Gate::new(2.0, Duration::from_millis(100));
        assert_eq!((0..10).filter(|_| g.try_acquire(0)).count(), 1);
    }

    #[test]
    fn zero_rate_admits_nothing_and_huge_rate_everything() {
        let mut g = Gate::new(0.0, Duration::from_millis(100));
        assert!((0..100).all(|i| !g.try_acquire(i * S)));
        let mut g = Gate::new(1e12, Duration::from_millis(100));
        assert!((0..10_000).all(|_| g.try_acquire(7)));
    }

    #[test]
    fn gcra_spreads_admissions() {
        // 10 requests/s (T = 100 ms, b = 1, L = 100 ms − 1 ns) offered one every 1 ms: the
        // first at 0 (TAT → 100 ms), the next at 1 ms (TAT − t = 99 ms ≤ L; TAT → 200 ms),
        // then whenever TAT − t ≤ L, i.e. t > TAT − 100 ms: 101 ms, 201 ms, … one every
        // 100 ms. 31 in 3 s, within r·(W + τ) + 1 = 32.
        let mut g = Gate::new(10.0, Duration::from_millis(100));
        let admitted: Vec<u64> = (0..3000)
            .map(|i| i * MS)
            .filter(|&t| g.try_acquire(t))
            .collect();
        assert_eq!(admitted[..3], [0, MS, 101 * MS]);
        assert_eq!(admitted.len(), 31);
        for w in admitted[1..].windows(2) {
            assert_eq!(w[1] - w[0], 100 * MS);
        }
    }

    #[test]
    fn a_request_a_moment_early_passes() {
        // 5/s (T = 200 ms) with τ = 100 ms: b = 1, yet a request up to 100 ms ahead of its
        // slot passes (a tolerance of (b − 1)·T = 0 would refuse it, and random arrivals at
        // the rate would get about half of it through).
        let mut g = Gate::new(5.0, Duration::from_millis(100));
        assert!(g.try_acquire(0));
        assert!(
            !g.try_acquire(99 * MS),
            "101 ms ahead of its slot at 200 ms"
        );
        assert!(g.try_acquire(100 * MS), "exactly τ before its slot");
        assert!(!g.try_acquire(100 * MS), "never two at once at b = 1");
    }

    #[test]
    fn a_lease_grants_what_single_decisions_would() {
        // 1000/s (T = 1 ms), τ = 10 ms (b = 10, L = 10 ms − 1 ns): from an empty cell a lease
        // of 32 looking 5 ms ahead grants the slots s with s − L ≤ now + 5 ms: 0, 1, … 14 ms
        let (k, first, tat) = gcra_lease(0, 0, MS, 10 * MS - 1, 5 * MS, 32);
        assert_eq!((k, first, tat), (15, 0, 15 * MS));
        // nothing more until now + 5 ms reaches the next slot's 15 ms − L
        assert_eq!(gcra_lease(tat, 0, MS, 10 * MS - 1, 5 * MS, 32).0, 0);
        assert_eq!(gcra_lease(tat, 1, MS, 10 * MS - 1, 5 * MS, 32).0, 1);
    }

    #[test]
    fn percent_is_exact_and_even() {
        let run = |p: f64, n: usize| {
            let mut acc = 0;
            (0..n)
                .map(|_| {
                    let (admit, next) = percent_advance(percent_step(p), acc);
                    acc = next;
                    admit
                })
                .collect::<Vec<bool>>()
        };
        assert_eq!(
            run(40.0, 10),
            [
                false, false, true, false, true, false, false, true, false, true
            ]
        );
        assert_eq!(run(33.3, 100_000).iter().filter(|&&a| a).count(), 33_300);
        assert!(run(100.0, 100).iter().all(|&a| a));
        assert!(run(0.0, 100).iter().all(|&a| !a));
        assert_eq!(percent_step(250.0), 1_000_000);
    }
}
