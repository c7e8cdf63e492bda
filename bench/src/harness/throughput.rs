//! The throughput figures: loadctl and its peers on the workload, measured in groups whose
//! members are compared with each other, each group in interleaved rounds, with what the rest
//! of the machine took meanwhile.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use governor::{Quota, RateLimiter};
use loadctl::clock::{Clock, SystemClock};
use loadctl::runtime::{Engine, Time};
use loadctl_bench::machine::{CpuTimes, Load};
use loadctl_bench::naive::{NaiveEvaluator, RateGate};
use loadctl_bench::peers::{LockedLimiter, floor};
use loadctl_bench::workload::OwnedRequest;

use super::rounds::{Figure, classify_run, interleave, naive_run, percentile, run};
use super::{BUSY, WALL, Workload, engine_with};

/// What the throughput groups measured.
#[derive(Default)]
pub(crate) struct Throughput {
    /// Per figure (and latency percentile), its value in each round.
    pub(crate) per_round: BTreeMap<String, Vec<f64>>,
    /// Per group: its figures, how long it ran and the CPU share others and steal took.
    pub(crate) group_loads: Vec<serde_json::Value>,
    /// The groups measured while others took at least [`BUSY`] of the CPU time.
    pub(crate) busy_groups: Vec<String>,
    /// What others took over all groups (set by the caller, who knows when they started).
    pub(crate) load: Option<Load>,
}

impl Throughput {
    /// Adds what `other` measured (its `load` aside).
    pub(crate) fn extend(&mut self, other: Throughput) {
        self.per_round.extend(other.per_round);
        self.group_loads.extend(other.group_loads);
        self.busy_groups.extend(other.busy_groups);
    }
}

/// Measures the standard groups on `threads` thread counts in `rounds` rounds of `window`
/// seconds.
pub(crate) fn standard(w: &Workload, threads: &[usize], rounds: usize, window: f64) -> Throughput {
    let clock = SystemClock::default();
    let engine = engine_with(&w.carrier, 2);
    let keys10k = keys(&engine, &w.mix);
    let engine100k = engine_with(&w.huge, 2);
    let small_engine = engine_with(&w.small, 1);
    let naive = NaiveEvaluator::new(&w.carrier, Duration::from_millis(100));
    let naive_small = NaiveEvaluator::new(&w.small, Duration::from_millis(100));
    let quota = Quota::per_second(NonZeroU32::new(100_000).expect("non-zero"));
    let direct = RateLimiter::direct(quota);
    let keyed = RateLimiter::keyed(Quota::per_second(NonZeroU32::new(250).expect("non-zero")));
    let locked = LockedLimiter::new(250);
    let rules = engine.snapshot().policy().len();
    let mix = &w.mix;

    let keyed_run = |threads: usize| {
        let (keyed, keys) = (&keyed, &keys10k);
        move |w: f64| {
            run(
                threads,
                w,
                |_| (),
                |_, i| {
                    black_box(keyed.check_key(&keys[i % keys.len()]).is_ok());
                },
            )
        }
    };
    // Our limiter alone: each shard's own GCRA state per rule, read with the engine clock.
    let limiter_run = |threads: usize| {
        let (keys, clock) = (&keys10k, &clock);
        move |w: f64| {
            run(
                threads,
                w,
                |_| {
                    (0..rules)
                        .map(|_| RateGate::new(250.0, Duration::from_millis(100)))
                        .collect::<Vec<_>>()
                },
                |gates, i| {
                    let k = keys[i % keys.len()] as usize;
                    black_box(gates[k].try_acquire(clock.monotonic_ns()));
                },
            )
        }
    };
    let direct_run = |threads: usize| {
        let direct = &direct;
        move |w: f64| {
            run(
                threads,
                w,
                |_| (),
                |_, _| {
                    black_box(direct.check().is_ok());
                },
            )
        }
    };
    let locked_run = |threads: usize| {
        let (locked, keys, clock) = (&locked, &keys10k, &clock);
        move |w: f64| {
            run(
                threads,
                w,
                |_| (),
                |_, i| {
                    black_box(locked.check(keys[i % keys.len()], clock.monotonic_ns()));
                },
            )
        }
    };

    // Groups: the figures a target compares run in one group. loadctl_1t sits between the floor
    // and its multi-thread runs; carrier-100k and the naive evaluator are one window further.
    let mut groups: Vec<Vec<Figure<'_>>> = Vec::new();
    let mut carrier_group = vec![
        Figure::new("loadctl_100k_1t", classify_run(1, &engine100k, &w.huge_mix)),
        Figure::new("floor_1t", |w| {
            run(
                1,
                w,
                |_| (),
                |_, i| {
                    black_box(floor(&mix[i % mix.len()]));
                },
            )
        }),
    ];
    for &t in threads {
        let figure = Figure::new(format!("loadctl_{t}t"), classify_run(t, &engine, mix));
        carrier_group.push(match t {
            1 => figure
                .with_percentile("p50_ns_1t", 0.5)
                .with_percentile("p99_ns_1t", 0.99)
                .with_percentile("p999_ns_1t", 0.999),
            _ => figure.with_percentile(format!("p999_ns_{t}t"), 0.999),
        });
    }
    carrier_group.push(Figure::new("naive_1t", naive_run(&naive, mix, &clock)));
    groups.push(carrier_group);
    groups.push(vec![
        Figure::new(
            "loadctl_small_1t",
            classify_run(1, &small_engine, &w.small_mix),
        ),
        Figure::new(
            "naive_small_1t",
            naive_run(&naive_small, &w.small_mix, &clock),
        ),
    ]);
    let mut limiter_group = vec![Figure::new("governor_keyed_1t", keyed_run(1))];
    for &t in threads {
        limiter_group.push(Figure::new(format!("limiter_{t}t"), limiter_run(t)));
    }
    for &t in threads.iter().filter(|&&t| t != 1) {
        limiter_group.push(Figure::new(format!("governor_keyed_{t}t"), keyed_run(t)));
    }
    groups.push(limiter_group);
    groups.push(
        threads
            .iter()
            .map(|&t| Figure::new(format!("governor_direct_{t}t"), direct_run(t)))
            .collect(),
    );
    groups.push(
        threads
            .iter()
            .map(|&t| Figure::new(format!("locked_{t}t"), locked_run(t)))
            .collect(),
    );
    measure_groups(&groups, rounds, window)
}

/// Runs each group in its rounds, logging what it measured and how busy the machine was.
pub(crate) fn measure_groups(groups: &[Vec<Figure<'_>>], rounds: usize, window: f64) -> Throughput {
    let mut per_round: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut group_loads = Vec::new();
    let mut busy_groups = Vec::new();
    for group in groups {
        let (t, cpu) = (Instant::now(), CpuTimes::now());
        let runs = interleave(group, rounds, window);
        let load = cpu.zip(CpuTimes::now()).and_then(|(a, b)| b.since(&a));
        let names: Vec<&str> = group.iter().map(|f| f.key.as_str()).collect();
        let seconds = t.elapsed().as_secs_f64();
        eprintln!(
            "measured {} in {seconds:.1} s; {}",
            names.join(", "),
            load.map_or_else(|| "load unknown".to_owned(), |l| l.to_string())
        );
        if let Some(l) = load.filter(|l| l.others + l.steal >= BUSY) {
            busy_groups.push(format!(
                "{} ({:.0} %)",
                names.join(", "),
                (l.others + l.steal) * 100.0
            ));
        }
        group_loads.push(serde_json::json!({
            "figures": names,
            "seconds": seconds,
            "others_cpu_share": load.map(|l| l.others),
            "steal_share": load.map(|l| l.steal),
        }));
        for (figure, runs) in group.iter().zip(runs) {
            let mut runs = runs;
            for (key, p) in &figure.percentiles {
                per_round.insert(
                    key.clone(),
                    runs.iter_mut()
                        .map(|r| percentile(&mut r.latencies, *p) as f64)
                        .collect(),
                );
            }
            for run in &runs {
                for (key, v) in &run.extra {
                    per_round.entry(key.clone()).or_default().push(*v);
                }
            }
            per_round.insert(figure.key.clone(), runs.iter().map(|r| r.rps).collect());
        }
    }
    Throughput {
        per_round,
        group_loads,
        busy_groups,
        load: None,
    }
}

/// The matched rule of each request (the key for the limiter-only peers); requests no rule
/// matches are left out.
fn keys(engine: &Engine, mix: &[OwnedRequest]) -> Vec<u32> {
    let mut shard = engine.attach();
    mix.iter()
        .filter_map(|r| {
            let d = shard.classify(&r.as_request(Time {
                monotonic_ns: 0,
                unix_ns: WALL,
            }));
            let id = d.rule?.id().clone();
            shard
                .snapshot()
                .policy()
                .rules()
                .iter()
                .position(|r| *r.id() == id)
                .map(|i| i as u32)
        })
        .collect()
}
