//! Measuring a throughput figure: runs of an operation on pinned threads for a window, the
//! interleaved rounds a group of figures is measured in, and the statistics over rounds
//! (median, spread, latency percentiles).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use loadctl::clock::{Clock, SystemClock};
use loadctl::runtime::{Engine, Time};
use loadctl_bench::naive::NaiveEvaluator;
use loadctl_bench::workload::OwnedRequest;

use super::WALL;

/// A throughput run: total operations per second, sampled single-operation latencies, and
/// whatever else the figure derived from its threads' state when they stopped.
pub(crate) struct Run {
    pub(crate) rps: f64,
    pub(crate) latencies: Vec<u64>,
    /// How long the run took, threads' start and join included (the `rps` denominator).
    pub(crate) seconds: f64,
    /// More figures of this run under their own keys (the hot group's writes and admissions
    /// per second); empty for the others.
    pub(crate) extra: Vec<(String, f64)>,
}

/// Runs `op` on `threads` pinned threads for `seconds`; `state` makes each thread's state.
/// One operation in 128 is timed on its own (two `Instant::now()` reads, whose cost the
/// report states).
pub(crate) fn run<S>(
    threads: usize,
    seconds: f64,
    state: impl Fn(usize) -> S + Sync,
    op: impl Fn(&mut S, usize) + Sync,
) -> Run {
    run_with(threads, seconds, state, op, |_| ()).0
}

/// [`run`], and then `finish` on each thread's state once its loop has stopped (outside the
/// timed loop, so it costs the operations nothing), returning what it gave per thread.
pub(crate) fn run_with<S, X: Send + Default>(
    threads: usize,
    seconds: f64,
    state: impl Fn(usize) -> S + Sync,
    op: impl Fn(&mut S, usize) + Sync,
    finish: impl Fn(S) -> X + Sync,
) -> (Run, Vec<X>) {
    let stop = AtomicBool::new(false);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let start = Instant::now();
    let results: Vec<(u64, Vec<u64>, X)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, state, op, finish, cores) = (&stop, &state, &op, &finish, &cores);
                scope.spawn(move || {
                    if let Some(core) = cores.get(t % cores.len().max(1)) {
                        core_affinity::set_for_current(*core);
                    }
                    let mut s = state(t);
                    let mut latencies = Vec::with_capacity(1 << 16);
                    let mut i = t * 7919;
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let t0 = Instant::now();
                        op(&mut s, i);
                        if latencies.len() < latencies.capacity() {
                            latencies.push(t0.elapsed().as_nanos() as u64);
                        }
                        i += 1;
                        for _ in 0..127 {
                            op(&mut s, i);
                            i += 1;
                        }
                        n += 128;
                    }
                    (n, latencies, finish(s))
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Release);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let total: u64 = results.iter().map(|r| r.0).sum();
    let mut latencies = Vec::new();
    let mut finished = Vec::with_capacity(threads);
    for (_, l, x) in results {
        latencies.extend(l);
        finished.push(x);
    }
    (
        Run {
            rps: total as f64 / elapsed,
            latencies,
            seconds: elapsed,
            extra: Vec::new(),
        },
        finished,
    )
}

/// The value at quantile `p` (0..=1, nearest rank) of `v`, which it sorts; 0 when empty.
pub(crate) fn percentile(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// A throughput figure of the harness: its key, how to measure it for one window, and the
/// latency percentiles reported from its runs.
pub(crate) struct Figure<'a> {
    pub(crate) key: String,
    pub(crate) measure: Box<dyn Fn(f64) -> Run + 'a>,
    /// (key, quantile): each round's latency percentile is reported under the key.
    pub(crate) percentiles: Vec<(String, f64)>,
}

impl<'a> Figure<'a> {
    pub(crate) fn new(key: impl Into<String>, measure: impl Fn(f64) -> Run + 'a) -> Self {
        Self {
            key: key.into(),
            measure: Box::new(measure),
            percentiles: Vec::new(),
        }
    }

    /// With the latency quantile `p` of every round reported under `key`.
    pub(crate) fn with_percentile(mut self, key: impl Into<String>, p: f64) -> Self {
        self.percentiles.push((key.into(), p));
        self
    }
}

/// Measures the figures of `group` in `rounds` interleaved rounds of `window` seconds each:
/// A B C, C B A, A B C, … (every other round reversed, so no figure always runs first or always
/// after the same neighbour). Returns each figure's runs in round order.
pub(crate) fn interleave(group: &[Figure<'_>], rounds: usize, window: f64) -> Vec<Vec<Run>> {
    let mut runs: Vec<Vec<Run>> = group.iter().map(|_| Vec::with_capacity(rounds)).collect();
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..group.len()).collect()
        } else {
            (0..group.len()).rev().collect()
        };
        for i in order {
            runs[i].push((group[i].measure)(window));
        }
    }
    runs
}

/// loadctl classifying `mix` on `threads` shards of `engine`, reading the engine's clock.
pub(crate) fn classify_run<'a>(
    threads: usize,
    engine: &'a Engine,
    mix: &'a [OwnedRequest],
) -> impl Fn(f64) -> Run + 'a {
    move |w| {
        run(
            threads,
            w,
            |_| engine.attach(),
            |s, i| {
                let now = s.now();
                black_box(s.classify(&mix[i % mix.len()].as_request(now)).verdict);
            },
        )
    }
}

/// The naive evaluator classifying `mix` on one thread.
pub(crate) fn naive_run<'a>(
    naive: &'a NaiveEvaluator,
    mix: &'a [OwnedRequest],
    clock: &'a SystemClock,
) -> impl Fn(f64) -> Run + 'a {
    move |w| {
        run(
            1,
            w,
            |_| (),
            |_, i| {
                let t = Time {
                    monotonic_ns: clock.monotonic_ns(),
                    unix_ns: WALL,
                };
                black_box(naive.classify(&mix[i % mix.len()].as_request(t)));
            },
        )
    }
}

/// The median of `v` (the mean of the two middle values for an even count); NaN when empty or
/// when any value is NaN.
pub(crate) fn median(v: &[f64]) -> f64 {
    if v.is_empty() || v.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let mid = s.len() / 2;
    if s.len() % 2 == 1 {
        s[mid]
    } else {
        (s[mid - 1] + s[mid]) / 2.0
    }
}

/// The smallest and largest of `v` (NaN, NaN when empty).
pub(crate) fn spread(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// What one `Instant::now()` read costs, in ns (every latency sample includes two).
pub(crate) fn clock_read_ns() -> f64 {
    let t = Instant::now();
    for _ in 0..1_000_000 {
        black_box(Instant::now());
    }
    t.elapsed().as_nanos() as f64 / 1_000_000.0
}
