//! Max-min fair sharing of a notifier's capacity among its subscribers (beyond RFC 7200).
//!
//! A notifier that can take C requests/s of some class (say INVITEs to `+1-212`) and sees each
//! upstream subscriber send d_i requests/s of it gives each a rate: every subscriber gets its
//! demand if it is below the fair share, the others split what is left equally (water-filling),
//! and capacity nobody demands is spread equally as headroom, so the shares always add up to
//! C. Pushed to the subscribers as `<rate>` rules, the cluster enforces one global limit.
//! Demands are smoothed (exponentially weighted per NOTIFY period), so shares follow a shift in
//! demand within a few periods without chasing noise.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::policy::{Accept, Limit, Rate, Rule};

/// Max-min fair shares of `capacity` for `demands` (same order), adding up to `capacity`.
pub fn max_min_fair(capacity: f64, demands: &[f64]) -> Vec<f64> {
    let n = demands.len();
    if n == 0 {
        return Vec::new();
    }
    let capacity = capacity.max(0.0);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| demands[a].total_cmp(&demands[b]));
    let mut shares = vec![0.0; n];
    let mut remaining = capacity;
    for (k, &i) in order.iter().enumerate() {
        let fair = remaining / (n - k) as f64;
        let give = demands[i].max(0.0).min(fair);
        shares[i] = give;
        remaining -= give;
    }
    // What nobody asked for is headroom for everyone.
    let extra = remaining / n as f64;
    for s in &mut shares {
        *s += extra;
    }
    shares
}

/// Shares one class of traffic among subscribers and writes their rules.
#[derive(Clone, Debug)]
pub struct Allocator {
    capacity: f64,
    template: Rule,
    alpha: f64,
    demand: BTreeMap<String, f64>,
}

impl Allocator {
    /// `capacity` requests/s for the requests `template`'s conditions match; each subscriber's
    /// rule is `template` with its share as `<rate>` (the template's alt-action is kept).
    /// `alpha` (0 < α ≤ 1) weighs the newest demand sample; 0.5 settles within a few periods.
    pub fn new(capacity: f64, template: Rule, alpha: f64) -> Self {
        Self {
            capacity,
            template,
            alpha: alpha.clamp(0.01, 1.0),
            demand: BTreeMap::new(),
        }
    }

    /// Records the rate (requests/s) observed from `subscriber` over the last period.
    pub fn observe(&mut self, subscriber: &str, rate: f64) {
        let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
        let alpha = self.alpha;
        self.demand
            .entry(subscriber.to_owned())
            .and_modify(|d| *d = alpha * rate + (1.0 - alpha) * *d)
            .or_insert(rate);
    }

    /// Forgets a subscriber (its subscription ended).
    pub fn remove(&mut self, subscriber: &str) {
        self.demand.remove(subscriber);
    }

    /// Changes the capacity.
    pub fn set_capacity(&mut self, capacity: f64) {
        self.capacity = capacity;
    }

    /// Each subscriber's share, requests/s.
    pub fn shares(&self) -> Vec<(String, f64)> {
        let demands: Vec<f64> = self.demand.values().copied().collect();
        self.demand
            .keys()
            .cloned()
            .zip(max_min_fair(self.capacity, &demands))
            .collect()
    }

    /// Each subscriber's policy: the template rule limited to its share (to a thousandth of a
    /// request per second, rounded down so the shares never add up to more than the capacity).
    pub fn policies(&self) -> Vec<(String, Vec<Arc<Rule>>)> {
        self.shares()
            .into_iter()
            .filter_map(|(sub, share)| {
                let rate = Rate::new(((share * 1000.0).floor() / 1000.0).clamp(0.0, Rate::MAX))?;
                let mut rule = self.template.clone();
                rule.accept = Accept {
                    limit: Limit::Rate(rate),
                    alt_action: self.template.accept.alt_action.clone(),
                };
                Some((sub, vec![Arc::new(rule)]))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn water_filling() {
        // Everyone over the fair share: equal split.
        assert!(close(
            &max_min_fair(300.0, &[500.0, 400.0, 1000.0]),
            &[100.0, 100.0, 100.0]
        ));
        // A small demand keeps its demand, the rest is redistributed.
        assert!(close(
            &max_min_fair(300.0, &[20.0, 400.0, 1000.0]),
            &[20.0, 140.0, 140.0]
        ));
        // Demand below capacity: everyone gets its demand plus equal headroom.
        assert!(close(
            &max_min_fair(300.0, &[20.0, 40.0, 60.0]),
            &[80.0, 100.0, 120.0]
        ));
        assert!(max_min_fair(10.0, &[]).is_empty());
        for d in [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1e9, 5.0, 7.0]] {
            let s: f64 = max_min_fair(123.0, &d).iter().sum();
            assert!((s - 123.0).abs() < 1e-6);
        }
    }
}
