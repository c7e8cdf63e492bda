//! The figures measured once per run, outside the interleaved rounds: compile time, the
//! compiled policy's memory, XML parse and SIP scan speed, publish-to-visible latency, and the
//! shared writes per request with the bound they obey.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use loadctl::policy::{self, Change, Limits, Ruleset};
use loadctl::runtime::{Source, Time};
use loadctl_bench::workload::carrier_policy;

use super::checks::rate_tokens_bound;
use super::rounds::percentile;
use super::{WALL, Workload, engine_with};

/// Measures every figure of this module into `out`; the speed figures run for `seconds` (at
/// most 1 s each).
pub(crate) fn measure(w: &Workload, seconds: f64, out: &mut BTreeMap<String, f64>) {
    compile(w, out);
    out.insert("memory_bytes_100k".into(), memory());
    parse_and_scan(w, Duration::from_secs_f64(seconds.min(1.0)), out);
    out.insert("publish_to_visible_ms".into(), publish_to_visible(w));
    shared_writes(w, out);
}

/// Compile time of carrier-10k and carrier-100k: the best of three.
fn compile(w: &Workload, out: &mut BTreeMap<String, f64>) {
    for (name, policy) in [("10k", &w.carrier), ("100k", &w.huge)] {
        let best = (0..3)
            .map(|_| {
                let t = Instant::now();
                let e = engine_with(policy, 1);
                let ms = t.elapsed().as_secs_f64() * 1e3;
                drop(e);
                ms
            })
            .fold(f64::INFINITY, f64::min);
        out.insert(format!("compile_ms_{name}"), best);
    }
}

/// Compiled-policy memory: resident growth when a fresh process compiles carrier-100k (the
/// rules themselves, generated before the measurement, are not counted), measured by this
/// executable run with `--measure-memory` ([`memory_child`]), so freed memory of earlier work
/// does not hide the policy's footprint.
fn memory() -> f64 {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            std::process::Command::new(exe)
                .arg("--measure-memory")
                .output()
                .ok()
        })
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(f64::NAN)
}

/// The child side of [`memory`]: prints the resident growth of compiling carrier-100k.
pub(crate) fn memory_child() {
    let policy = carrier_policy(100_000, 42);
    let before = rss();
    let engine = engine_with(&policy, 1);
    println!("{}", rss().saturating_sub(before));
    drop(engine);
}

/// Resident set size in bytes (Linux), for memory deltas.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// XML parse speed of carrier-10k's document and SIP scan speed of the mix as wire messages,
/// each for `time`.
fn parse_and_scan(w: &Workload, time: Duration, out: &mut BTreeMap<String, f64>) {
    let xml = policy::write(&w.carrier);
    let t = Instant::now();
    let mut parsed = 0;
    while t.elapsed() < time {
        parsed += policy::read(xml.as_bytes(), &Limits::default()).map_or(0, |d| d.ruleset.len());
    }
    let parse_s = t.elapsed().as_secs_f64();
    out.insert(
        "xml_parse_mb_s".into(),
        (parsed / w.carrier.len()) as f64 * xml.len() as f64 / parse_s / 1e6,
    );
    let wire: Vec<Vec<u8>> = w.mix.iter().enumerate().map(|(i, r)| r.to_sip(i)).collect();
    let t = Instant::now();
    let (mut bytes, mut k) = (0usize, 0usize);
    while t.elapsed() < time {
        for _ in 0..1024 {
            let m = &wire[k % wire.len()];
            k += 1;
            bytes += black_box(loadctl::sip::scan(m)).map_or(0, |_| m.len());
        }
    }
    out.insert(
        "sip_scan_mb_s".into(),
        bytes as f64 / t.elapsed().as_secs_f64() / 1e6,
    );
}

/// Publish to visible, in ms (median of 20): a one-rule partial update of carrier-10k until a
/// shard classifies with it.
fn publish_to_visible(w: &Workload) -> f64 {
    let engine = engine_with(&w.carrier, 2);
    let mut shard = engine.attach();
    let rule = w.carrier.rules().expect("full")[0].as_ref().clone();
    let mut samples = Vec::new();
    for v in 1..=20u32 {
        let mut changed = rule.clone();
        if let policy::Limit::Rate(r) = changed.accept.limit {
            changed.accept.limit = policy::Limit::Rate(
                policy::Rate::new(r.per_second() + f64::from(v)).expect("rate"),
            );
        }
        let t = Instant::now();
        engine
            .apply(
                &Source::local("bench"),
                Ruleset::partial(v, vec![Change::Put(changed)]).expect("partial"),
            )
            .expect("apply");
        black_box(
            shard
                .classify(&w.mix[0].as_request(Time {
                    monotonic_ns: 0,
                    unix_ns: WALL,
                }))
                .verdict,
        );
        samples.push(t.elapsed().as_nanos() as u64);
    }
    percentile(&mut samples, 0.5) as f64 / 1e6
}

/// Shared writes: the mix on one shard for 1 s of simulated time (2,000,000 requests, 500 ns
/// apart), per 1,000 requests, in all and split by the matched rule's limit (rate leases,
/// window slots taken); and the bound the total obeys (`shared_writes_bound_per_1k`): per rule,
/// at most its matched requests, and at most [`rate_tokens_bound`] over the second for a rate
/// rule, its size for a window (tickets are not completed here), nothing for a percent rule.
fn shared_writes(w: &Workload, out: &mut BTreeMap<String, f64>) {
    let e = engine_with(&w.carrier, 1);
    let mut s = e.attach();
    let n = 2_000_000usize;
    let (mut rate, mut window) = (0u64, 0u64);
    for i in 0..n {
        let t = Time {
            monotonic_ns: i as u64 * 500,
            unix_ns: WALL,
        };
        let before = s.shared_writes();
        let d = s.classify(&w.mix[i % w.mix.len()].as_request(t));
        let is_window = matches!(d.rule.map(|r| r.limit()), Some(policy::Limit::Window(_)));
        let wrote = s.shared_writes() - before;
        if is_window {
            window += wrote;
        } else {
            rate += wrote;
        }
    }
    let span_ns = (n as u64 - 1) * 500;
    let config = e.config();
    let bound: f64 = s
        .snapshot()
        .policy()
        .rules()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let matched = s.rule_stats(i).map_or(0, |st| st.matched) as f64;
            let most = match *r.limit() {
                policy::Limit::Rate(r) => rate_tokens_bound(
                    r.per_second(),
                    config.burst_tolerance,
                    config.lease_period,
                    span_ns,
                ),
                policy::Limit::Window(size) => f64::from(size),
                policy::Limit::Percent(_) => 0.0,
            };
            matched.min(most)
        })
        .sum();
    let per_1k = |w: f64| w * 1000.0 / n as f64;
    out.insert(
        "shared_writes_per_1k".into(),
        per_1k(s.shared_writes() as f64),
    );
    out.insert("shared_writes_rate_per_1k".into(), per_1k(rate as f64));
    out.insert("shared_writes_window_per_1k".into(), per_1k(window as f64));
    out.insert("shared_writes_bound_per_1k".into(), per_1k(bound));
}
