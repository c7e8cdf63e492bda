//! The targets a run is judged by: ratios of two figures taken round by round, or a figure on
//! its own, each with its bound; the bounds some figures obey by construction, shown beside
//! them as information; and how figures are shown.

use std::collections::BTreeMap;
use std::time::Duration;

use super::rounds::{median, spread};

/// What a target asks of its figure.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Bound {
    AtLeast(f64),
    AtMost(f64),
    /// A peer's figure, shown for comparison, no target.
    Peer,
    /// Information, no target: an upper bound the figure obeys by construction (the engine's
    /// arithmetic), shown so that a figure breaking it stands out.
    Obeys(f64),
    /// Information, no target and no bound (how a figure scales).
    Info,
}

impl Bound {
    /// Whether `v` meets the target (`None` when there is none: a peer, information); NaN
    /// never does.
    pub(crate) fn met(self, v: f64) -> Option<bool> {
        match self {
            Self::AtLeast(b) => Some(v >= b),
            Self::AtMost(b) => Some(v <= b),
            Self::Peer | Self::Obeys(_) | Self::Info => None,
        }
    }

    /// For information bounds, whether `v` is within it; NaN never is.
    pub(crate) fn holds(self, v: f64) -> Option<bool> {
        match self {
            Self::Obeys(b) => Some(v <= b),
            _ => None,
        }
    }
}

/// A row of the target table: a ratio of two figures per round, or a figure checked on its own.
pub(crate) struct Check {
    pub(crate) name: String,
    /// Per round, or one value for a figure measured once.
    pub(crate) values: Vec<f64>,
    pub(crate) bound: Bound,
    /// Shown values are divided by this (and followed by `unit`).
    pub(crate) scale: f64,
    pub(crate) unit: &'static str,
}

impl Check {
    pub(crate) fn ratio(
        a: &str,
        b: &str,
        bound: Bound,
        per_round: &BTreeMap<String, Vec<f64>>,
    ) -> Self {
        let values = match (per_round.get(a), per_round.get(b)) {
            (Some(x), Some(y)) => x.iter().zip(y).map(|(x, y)| x / y).collect(),
            _ => Vec::new(),
        };
        Self {
            name: format!("{a} / {b}"),
            values,
            bound,
            scale: 1.0,
            unit: "",
        }
    }

    pub(crate) fn figure(
        name: &str,
        values: Vec<f64>,
        bound: Bound,
        scale: f64,
        unit: &'static str,
    ) -> Self {
        Self {
            name: name.to_owned(),
            values,
            bound,
            scale,
            unit,
        }
    }

    pub(crate) fn median(&self) -> f64 {
        median(&self.values)
    }

    pub(crate) fn shown(&self, v: f64) -> String {
        let v = v / self.scale;
        // Small ratios (writes per admission of a leased rule) keep their first figures.
        let digits = match v.abs() {
            a if a >= 100.0 => 0,
            a if a >= 0.1 || a == 0.0 => 2,
            _ => 4,
        };
        format!("{v:.digits$}{}", self.unit)
    }

    pub(crate) fn target(&self) -> String {
        match self.bound {
            Bound::AtLeast(b) => format!("≥ {}{}", b / self.scale, self.unit),
            Bound::AtMost(b) => format!("≤ {}{}", b / self.scale, self.unit),
            Bound::Peer => "(peer)".to_owned(),
            Bound::Obeys(b) => format!("obeys ≤ {:.1}{} (info)", b / self.scale, self.unit),
            Bound::Info => "(info)".to_owned(),
        }
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        let (lo, hi) = spread(&self.values);
        serde_json::json!({
            "median": self.median(),
            "min": lo,
            "max": hi,
            "per_round": self.values,
            "target": self.target(),
            "met": self.bound.met(self.median()),
            "holds": self.bound.holds(self.median()),
        })
    }
}

/// Whether `key` is a throughput figure (`…_<threads>t`, requests per second).
pub(crate) fn is_throughput(key: &str) -> bool {
    key.strip_suffix('t')
        .and_then(|k| k.rsplit_once('_'))
        .is_some_and(|(name, n)| {
            !name.contains("_ns") && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
        })
}

/// A figure's value for the tables: M/s for throughput figures, whole ones per second below
/// 10,000/s (a slow rule's writes, the naive evaluator).
pub(crate) fn shown(key: &str, v: f64) -> String {
    if is_throughput(key) && v.abs() < 10_000.0 {
        format!("{v:.0} /s")
    } else if is_throughput(key) {
        format!("{:.3} M/s", v / 1e6)
    } else {
        format!("{v:.1}")
    }
}

/// The targets of a run, over the figures `out` holds and the per-round values of the throughput figures; targets whose
/// figures were not measured (a `--threads` list without 2, say) are left out.
pub(crate) fn targets(
    out: &BTreeMap<String, f64>,
    per_round: &BTreeMap<String, Vec<f64>>,
) -> Vec<Check> {
    let once = |k: &str| out.get(k).map(|&v| vec![v]).unwrap_or_default();
    let checks = [
        Check::ratio("loadctl_1t", "naive_1t", Bound::AtLeast(500.0), per_round),
        Check::ratio(
            "loadctl_small_1t",
            "naive_small_1t",
            Bound::AtLeast(3.0),
            per_round,
        ),
        Check::ratio("loadctl_2t", "loadctl_1t", Bound::AtLeast(1.8), per_round),
        Check::ratio("limiter_2t", "limiter_1t", Bound::AtLeast(1.8), per_round),
        Check::ratio(
            "governor_direct_2t",
            "governor_direct_1t",
            Bound::Peer,
            per_round,
        ),
        Check::ratio("locked_2t", "locked_1t", Bound::Peer, per_round),
        Check::ratio(
            "limiter_1t",
            "governor_keyed_1t",
            Bound::AtLeast(2.0),
            per_round,
        ),
        Check::ratio("floor_1t", "loadctl_1t", Bound::AtMost(3.0), per_round),
        // carrier-100k costs at most 1.5 × carrier-10k per classification
        Check::ratio(
            "loadctl_1t",
            "loadctl_100k_1t",
            Bound::AtMost(1.5),
            per_round,
        ),
        Check::figure(
            "p999_ns_1t",
            per_round.get("p999_ns_1t").cloned().unwrap_or_default(),
            Bound::AtMost(5_000.0),
            1_000.0,
            " µs",
        ),
        // Information, not a target: it measured the mix's rules, not a bottleneck.
        Check::figure(
            "shared_writes_per_1k",
            once("shared_writes_per_1k"),
            Bound::Obeys(
                out.get("shared_writes_bound_per_1k")
                    .copied()
                    .unwrap_or(f64::NAN),
            ),
            1.0,
            "",
        ),
        Check::figure(
            "compile_ms_100k",
            once("compile_ms_100k"),
            Bound::AtMost(500.0),
            1.0,
            " ms",
        ),
        Check::figure(
            "memory_bytes_100k",
            once("memory_bytes_100k"),
            Bound::AtMost(64.0 * 1024.0 * 1024.0),
            1024.0 * 1024.0,
            " MiB",
        ),
    ];
    checks
        .into_iter()
        .filter(|c| !c.values.is_empty())
        .collect()
}

/// The most tokens a rate cell of `per_second` can grant, with burst tolerance `tau` and
/// lease period `lease_period` (the engine's configuration), to leases made at engine times
/// within `span_ns` of each other. A lease at time t is granted only while TAT − t ≤ reach, the
/// tolerance L = min(τ, b·T − 1 ns) (b = ⌈r·τ⌉, T = 1/r in whole ns) — for leases of more than
/// one token, L less the lease period plus the lease period looking ahead — so TAT ends at most
/// reach + T past the last lease and starts at or after the first, and each token moves it by
/// T: 1 + ⌊(span + reach)/T⌋, about r·span + b. A lease writes the cell once and holds at
/// least one token, so this bounds the rule's writes too. 0 for a rate that admits nothing;
/// infinite at or above 2·10⁹/s (T = 0: everything passes).
pub(crate) fn rate_tokens_bound(
    per_second: f64,
    tau: Duration,
    lease_period: Duration,
    span_ns: u64,
) -> f64 {
    match loadctl::limit::interval_ns(per_second) {
        None => 0.0,
        Some(0) => f64::INFINITY,
        Some(t) => {
            let l = loadctl::limit::tolerance_ns(t, per_second, tau);
            // As the engine sizes leases (runtime/params.rs): ⌊r·period⌋ tokens, at least 1.
            let lease = (per_second * lease_period.as_secs_f64()).floor();
            let ahead = if lease >= 2.0 {
                u64::try_from(lease_period.as_nanos()).unwrap_or(u64::MAX)
            } else {
                0
            };
            let reach = l.saturating_sub(ahead).saturating_add(ahead);
            (span_ns.saturating_add(reach) / t) as f64 + 1.0
        }
    }
}
