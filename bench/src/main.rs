//! The side-by-side harness: loadctl and its peers on the standard workload, in one run.
//!
//! `cargo run --release -p loadctl-bench -- [--json] [--seconds S] [--rounds N] [--threads 1,2]`
//!
//! With `--json` a single JSON object goes to stdout (requests per second unless the key says
//! otherwise); human-readable tables always go to stderr. Every run starts with the machine
//! line (CPU model, online CPUs, cache sizes, transparent huge page mode; JSON key `machine`).
//!
//! Throughput figures are measured in groups whose members are compared with each other (a
//! ratio target's two figures are always in one group). A group runs in `--rounds` interleaved
//! rounds (default 5), A B C, C B A, A B C, …, each figure for a window of `--seconds / --rounds`
//! (default 2 s in all, so 0.4 s windows) on the given thread counts, threads pinned to cores.
//! A figure is the median over its rounds; a ratio is the median of the per-round ratios, shown
//! with its spread (min – max), so a neighbour's burst that slows one window moves one round,
//! not the figure. Latency percentiles are taken per round and reported as medians the same way.
//! Each group's line names the share of CPU time other processes (and the hypervisor, as steal)
//! took while it ran (JSON key `load`), so a run on a busy machine says so.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use governor::{Quota, RateLimiter};
use loadctl::clock::{Clock, SystemClock};
use loadctl::policy::{self, Change, Limits, Ruleset};
use loadctl::runtime::{Engine, EngineConfig, Source, Time};
use loadctl_bench::machine::{CpuTimes, Machine};
use loadctl_bench::naive::NaiveEvaluator;
use loadctl_bench::naive::RateGate;
use loadctl_bench::peers::{LockedLimiter, floor};
use loadctl_bench::workload::{OwnedRequest, carrier_policy, requests, small_policy};

const WALL: i128 = 1_705_000_000_000_000_000;

/// The share of all CPUs' time taken by other processes (and steal) above which a group's
/// figures are flagged as measured on a busy machine.
const BUSY: f64 = 0.10;

struct Options {
    json: bool,
    seconds: f64,
    rounds: usize,
    threads: Vec<usize>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        json: false,
        seconds: 2.0,
        rounds: 5,
        threads: vec![1, 2],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => o.json = true,
            "--seconds" => {
                o.seconds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|s: &f64| *s > 0.0)
                    .ok_or("--seconds needs a positive number")?
            }
            "--rounds" => {
                o.rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n: &usize| *n > 0)
                    .ok_or("--rounds needs a positive whole number")?
            }
            "--threads" => {
                o.threads = args
                    .next()
                    .ok_or("--threads needs a list like 1,2")?
                    .split(',')
                    .map(|t| t.parse().ok().filter(|n: &usize| *n > 0))
                    .collect::<Option<Vec<usize>>>()
                    .ok_or("--threads needs a list like 1,2")?
            }
            "--bench" => {} // passed by `cargo bench`; ignored
            "--measure-memory" => {
                // Internal: run in a fresh child process so freed memory of earlier work does
                // not hide the policy's footprint.
                let policy = carrier_policy(100_000, 42);
                let before = rss();
                let engine = engine_with(&policy, 1);
                println!("{}", rss().saturating_sub(before));
                drop(engine);
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// A throughput run: total operations per second and sampled single-operation latencies.
struct Run {
    rps: f64,
    latencies: Vec<u64>,
}

/// Runs `op` on `threads` pinned threads for `seconds`; `state` makes each thread's state.
/// One operation in 128 is timed on its own (two `Instant::now()` reads, whose cost the
/// report states).
fn run<S>(
    threads: usize,
    seconds: f64,
    state: impl Fn(usize) -> S + Sync,
    op: impl Fn(&mut S, usize) + Sync,
) -> Run {
    let stop = AtomicBool::new(false);
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let start = Instant::now();
    let results: Vec<(u64, Vec<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, state, op, cores) = (&stop, &state, &op, &cores);
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
                    (n, latencies)
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
    Run {
        rps: total as f64 / elapsed,
        latencies: results.into_iter().flat_map(|r| r.1).collect(),
    }
}

fn percentile(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// A throughput figure of the harness: its key and how to measure it for one window.
struct Figure<'a> {
    key: String,
    measure: Box<dyn Fn(f64) -> Run + 'a>,
}

impl<'a> Figure<'a> {
    fn new(key: impl Into<String>, measure: impl Fn(f64) -> Run + 'a) -> Self {
        Self {
            key: key.into(),
            measure: Box::new(measure),
        }
    }
}

/// Measures the figures of `group` in `rounds` interleaved rounds of `window` seconds each:
/// A B C, C B A, A B C, … (every other round reversed, so no figure always runs first or always
/// after the same neighbour). Returns each figure's runs in round order.
fn interleave(group: &[Figure<'_>], rounds: usize, window: f64) -> Vec<Vec<Run>> {
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
fn classify_run<'a>(
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
fn naive_run<'a>(
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
fn median(v: &[f64]) -> f64 {
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
fn spread(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// What a target asks of its figure.
#[derive(Clone, Copy, Debug)]
enum Bound {
    AtLeast(f64),
    AtMost(f64),
    /// A peer's figure, shown for comparison, no target.
    Peer,
}

impl Bound {
    /// Whether `v` meets the bound (`None` for a peer); NaN never does.
    fn met(self, v: f64) -> Option<bool> {
        match self {
            Self::AtLeast(b) => Some(v >= b),
            Self::AtMost(b) => Some(v <= b),
            Self::Peer => None,
        }
    }
}

/// A row of the target table: a ratio of two figures per round, or a figure checked on its own.
struct Check {
    name: String,
    /// Per round, or one value for a figure measured once.
    values: Vec<f64>,
    bound: Bound,
    /// Shown values are divided by this (and followed by `unit`).
    scale: f64,
    unit: &'static str,
}

impl Check {
    fn ratio(a: &str, b: &str, bound: Bound, per_round: &BTreeMap<String, Vec<f64>>) -> Self {
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

    fn figure(name: &str, values: Vec<f64>, bound: Bound, scale: f64, unit: &'static str) -> Self {
        Self {
            name: name.to_owned(),
            values,
            bound,
            scale,
            unit,
        }
    }

    fn median(&self) -> f64 {
        median(&self.values)
    }

    fn shown(&self, v: f64) -> String {
        let v = v / self.scale;
        let digits = if v.abs() >= 100.0 { 0 } else { 2 };
        format!("{v:.digits$}{}", self.unit)
    }

    fn target(&self) -> String {
        match self.bound {
            Bound::AtLeast(b) => format!("≥ {}{}", b / self.scale, self.unit),
            Bound::AtMost(b) => format!("≤ {}{}", b / self.scale, self.unit),
            Bound::Peer => "(peer)".to_owned(),
        }
    }

    fn json(&self) -> serde_json::Value {
        let (lo, hi) = spread(&self.values);
        serde_json::json!({
            "median": self.median(),
            "min": lo,
            "max": hi,
            "per_round": self.values,
            "target": self.target(),
            "met": self.bound.met(self.median()),
        })
    }
}

/// Whether `key` is a throughput figure (`…_<threads>t`, requests per second).
fn is_throughput(key: &str) -> bool {
    key.strip_suffix('t')
        .and_then(|k| k.rsplit_once('_'))
        .is_some_and(|(name, n)| {
            !name.contains("_ns") && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
        })
}

/// A figure's value for the tables: M/s for throughput figures.
fn shown(key: &str, v: f64) -> String {
    if is_throughput(key) {
        format!("{:.3} M/s", v / 1e6)
    } else {
        format!("{v:.1}")
    }
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

fn engine_with(policy: &Ruleset, shards: usize) -> Engine {
    let e = Engine::new(EngineConfig::default().with_shards(shards));
    e.publish(&Source::local("bench"), policy.clone())
        .expect("publish");
    e
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

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("loadctl-bench: {e}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    let machine = Machine::probe();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let window = o.seconds / o.rounds as f64;
    eprintln!("machine: {machine}");
    eprintln!(
        "loadctl-bench: {cores} usable cores, {} s per figure in {} interleaved rounds of {window:.2} s, threads {:?}",
        o.seconds, o.rounds, o.threads
    );

    // ---- the workload
    let t = Instant::now();
    let carrier = carrier_policy(10_000, 42);
    let small = small_policy(42);
    let mix = requests(&carrier, 20_000, 7);
    let small_mix = requests(&small, 20_000, 7);
    let huge = carrier_policy(100_000, 42);
    let huge_mix = requests(&huge, 20_000, 7);
    eprintln!("workload generated in {:.1} s", t.elapsed().as_secs_f64());

    // ---- compile time, memory, parse and scan speed
    for (name, policy) in [("10k", &carrier), ("100k", &huge)] {
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
    // Compiled-policy memory: resident growth when a fresh process compiles carrier-100k (the
    // rules themselves, generated before the measurement, are not counted).
    let memory = std::env::current_exe()
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
        .unwrap_or(f64::NAN);
    out.insert("memory_bytes_100k".into(), memory);
    let xml = policy::write(&carrier);
    let t = Instant::now();
    let mut parsed = 0;
    while t.elapsed() < Duration::from_secs_f64(o.seconds.min(1.0)) {
        parsed += policy::read(xml.as_bytes(), &Limits::default()).map_or(0, |d| d.ruleset.len());
    }
    let parse_s = t.elapsed().as_secs_f64();
    out.insert(
        "xml_parse_mb_s".into(),
        (parsed / carrier.len()) as f64 * xml.len() as f64 / parse_s / 1e6,
    );
    let wire: Vec<Vec<u8>> = mix.iter().enumerate().map(|(i, r)| r.to_sip(i)).collect();
    let t = Instant::now();
    let (mut bytes, mut k) = (0usize, 0usize);
    while t.elapsed() < Duration::from_secs_f64(o.seconds.min(1.0)) {
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

    // ---- publish to visible: a one-rule partial update until a shard classifies with it
    let engine = engine_with(&carrier, 2);
    let mut shard = engine.attach();
    let rule = carrier.rules().expect("full")[0].as_ref().clone();
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
                .classify(&mix[0].as_request(Time {
                    monotonic_ns: 0,
                    unix_ns: WALL,
                }))
                .verdict,
        );
        samples.push(t.elapsed().as_nanos() as u64);
    }
    out.insert(
        "publish_to_visible_ms".into(),
        percentile(&mut samples, 0.5) as f64 / 1e6,
    );
    drop(shard);

    // ---- shared writes: the mix on one shard for 1 s of simulated time (2,000,000 requests,
    // 500 ns apart), split by the matched rule's limit: rate leases, window slots taken
    {
        let e = engine_with(&carrier, 1);
        let mut s = e.attach();
        let n = 2_000_000usize;
        let (mut rate, mut window) = (0u64, 0u64);
        for i in 0..n {
            let t = Time {
                monotonic_ns: i as u64 * 500,
                unix_ns: WALL,
            };
            let before = s.shared_writes();
            let d = s.classify(&mix[i % mix.len()].as_request(t));
            let is_window = matches!(d.rule.map(|r| r.limit()), Some(policy::Limit::Window(_)));
            let wrote = s.shared_writes() - before;
            if is_window {
                window += wrote;
            } else {
                rate += wrote;
            }
        }
        let per_1k = |w: u64| w as f64 * 1000.0 / n as f64;
        out.insert("shared_writes_per_1k".into(), per_1k(s.shared_writes()));
        out.insert("shared_writes_rate_per_1k".into(), per_1k(rate));
        out.insert("shared_writes_window_per_1k".into(), per_1k(window));
    }

    // ---- throughput, in interleaved rounds
    let clock = SystemClock::default();
    let keys10k = keys(&engine, &mix);
    let engine100k = engine_with(&huge, 2);
    let small_engine = engine_with(&small, 1);
    let naive = NaiveEvaluator::new(&carrier, Duration::from_millis(100));
    let naive_small = NaiveEvaluator::new(&small, Duration::from_millis(100));
    let quota = Quota::per_second(NonZeroU32::new(100_000).expect("non-zero"));
    let direct = RateLimiter::direct(quota);
    let keyed = RateLimiter::keyed(Quota::per_second(NonZeroU32::new(250).expect("non-zero")));
    let locked = LockedLimiter::new(250);
    let rules = engine.snapshot().policy().len();

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
        Figure::new("loadctl_100k_1t", classify_run(1, &engine100k, &huge_mix)),
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
    for &t in &o.threads {
        carrier_group.push(Figure::new(
            format!("loadctl_{t}t"),
            classify_run(t, &engine, &mix),
        ));
    }
    carrier_group.push(Figure::new("naive_1t", naive_run(&naive, &mix, &clock)));
    groups.push(carrier_group);
    groups.push(vec![
        Figure::new(
            "loadctl_small_1t",
            classify_run(1, &small_engine, &small_mix),
        ),
        Figure::new(
            "naive_small_1t",
            naive_run(&naive_small, &small_mix, &clock),
        ),
    ]);
    let mut limiter_group = vec![Figure::new("governor_keyed_1t", keyed_run(1))];
    for &t in &o.threads {
        limiter_group.push(Figure::new(format!("limiter_{t}t"), limiter_run(t)));
    }
    for &t in o.threads.iter().filter(|&&t| t != 1) {
        limiter_group.push(Figure::new(format!("governor_keyed_{t}t"), keyed_run(t)));
    }
    groups.push(limiter_group);
    groups.push(
        o.threads
            .iter()
            .map(|&t| Figure::new(format!("governor_direct_{t}t"), direct_run(t)))
            .collect(),
    );
    groups.push(
        o.threads
            .iter()
            .map(|&t| Figure::new(format!("locked_{t}t"), locked_run(t)))
            .collect(),
    );

    let mut per_round: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    // What the rest of the machine did meanwhile, per group and over all of them.
    let mut group_loads = Vec::new();
    let mut busy_groups = Vec::new();
    let throughput_start = CpuTimes::now();
    for group in &groups {
        let (t, cpu) = (Instant::now(), CpuTimes::now());
        let runs = interleave(group, o.rounds, window);
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
            let mut latency = |key: &str, p: f64, runs: &mut [Run]| {
                per_round.insert(
                    key.to_owned(),
                    runs.iter_mut()
                        .map(|r| percentile(&mut r.latencies, p) as f64)
                        .collect(),
                );
            };
            let mut runs = runs;
            match figure.key.as_str() {
                "loadctl_1t" => {
                    latency("p50_ns_1t", 0.5, &mut runs);
                    latency("p99_ns_1t", 0.99, &mut runs);
                    latency("p999_ns_1t", 0.999, &mut runs);
                }
                "loadctl_2t" => latency("p999_ns_2t", 0.999, &mut runs),
                _ => {}
            }
            per_round.insert(figure.key.clone(), runs.iter().map(|r| r.rps).collect());
        }
    }
    drop(groups);
    let throughput_load = throughput_start
        .zip(CpuTimes::now())
        .and_then(|(a, b)| b.since(&a));
    for (k, v) in &per_round {
        out.insert(k.clone(), median(v));
    }
    let clock_pair = {
        let t = Instant::now();
        for _ in 0..1_000_000 {
            black_box(Instant::now());
        }
        t.elapsed().as_nanos() as f64 / 1_000_000.0
    };
    out.insert("latency_clock_overhead_ns".into(), clock_pair);

    // ---- report
    let run_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "\n{:<28} {:>14}   min – max over {} rounds",
        "figure", "value", o.rounds
    );
    for (k, v) in &out {
        let range = per_round.get(k).map_or(String::new(), |r| {
            let (lo, hi) = spread(r);
            format!("{} – {}", shown(k, lo), shown(k, hi))
        });
        eprintln!("{k:<28} {:>14}   {range}", shown(k, *v));
    }
    let get = |k: &str| out.get(k).copied().unwrap_or(f64::NAN);
    let once = |k: &str| vec![get(k)];
    let checks = [
        Check::ratio("loadctl_1t", "naive_1t", Bound::AtLeast(500.0), &per_round),
        Check::ratio(
            "loadctl_small_1t",
            "naive_small_1t",
            Bound::AtLeast(3.0),
            &per_round,
        ),
        Check::ratio("loadctl_2t", "loadctl_1t", Bound::AtLeast(1.8), &per_round),
        Check::ratio("limiter_2t", "limiter_1t", Bound::AtLeast(1.8), &per_round),
        Check::ratio(
            "governor_direct_2t",
            "governor_direct_1t",
            Bound::Peer,
            &per_round,
        ),
        Check::ratio("locked_2t", "locked_1t", Bound::Peer, &per_round),
        Check::ratio(
            "limiter_1t",
            "governor_keyed_1t",
            Bound::AtLeast(2.0),
            &per_round,
        ),
        Check::ratio("floor_1t", "loadctl_1t", Bound::AtMost(3.0), &per_round),
        // carrier-100k costs at most 1.5 × carrier-10k per classification
        Check::ratio(
            "loadctl_1t",
            "loadctl_100k_1t",
            Bound::AtMost(1.5),
            &per_round,
        ),
        Check::figure(
            "p999_ns_1t",
            per_round.get("p999_ns_1t").cloned().unwrap_or_default(),
            Bound::AtMost(5_000.0),
            1_000.0,
            " µs",
        ),
        Check::figure(
            "shared_writes_per_1k",
            once("shared_writes_per_1k"),
            Bound::AtMost(10.0),
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
    let checks: Vec<Check> = checks
        .into_iter()
        .filter(|c| !c.values.is_empty())
        .collect();
    eprintln!(
        "\n{:<40} {:>10}  {:<26} target",
        "target", "median", "min – max (rounds met)"
    );
    for c in &checks {
        let m = c.median();
        let mark = match c.bound.met(m) {
            Some(true) => " ✓",
            Some(false) => " ✗",
            None => "",
        };
        let range = if c.values.len() > 1 {
            let (lo, hi) = spread(&c.values);
            let met = c
                .values
                .iter()
                .filter(|&&v| c.bound.met(v) == Some(true))
                .count();
            match c.bound {
                Bound::Peer => format!("{} – {}", c.shown(lo), c.shown(hi)),
                _ => format!(
                    "{} – {} ({met}/{})",
                    c.shown(lo),
                    c.shown(hi),
                    c.values.len()
                ),
            }
        } else {
            "(measured once)".to_owned()
        };
        eprintln!(
            "{:<40} {:>10}  {range:<26} {}{mark}",
            c.name,
            c.shown(m),
            c.target()
        );
    }
    eprintln!("(latency samples include two Instant::now() reads: {clock_pair:.1} ns per read)");
    if !busy_groups.is_empty() {
        eprintln!(
            "busy machine: other processes or the hypervisor took ≥ {:.0} % of CPU time while \
             these ran, so their multi-thread figures (and tails) measure what was left: {}",
            BUSY * 100.0,
            busy_groups.join("; ")
        );
    }
    eprintln!("machine: {machine}");
    if let Some(load) = throughput_load {
        eprintln!("while the throughput figures ran: {load}");
    }
    eprintln!("run took {run_seconds:.1} s");
    if o.json {
        let mut obj: serde_json::Map<String, serde_json::Value> = out
            .into_iter()
            .map(|(k, v)| (k, serde_json::json!(v)))
            .collect();
        obj.insert("machine".into(), machine.to_json());
        obj.insert("rounds".into(), serde_json::json!(o.rounds));
        obj.insert("round_seconds".into(), serde_json::json!(window));
        obj.insert("run_seconds".into(), serde_json::json!(run_seconds));
        obj.insert("per_round".into(), serde_json::json!(per_round));
        obj.insert(
            "load".into(),
            serde_json::json!({
                "others_cpu_share": throughput_load.map(|l| l.others),
                "steal_share": throughput_load.map(|l| l.steal),
                "groups": group_loads,
            }),
        );
        obj.insert(
            "targets".into(),
            serde_json::Value::Object(checks.iter().map(|c| (c.name.clone(), c.json())).collect()),
        );
        println!("{}", serde_json::Value::Object(obj));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
        assert!(median(&[1.0, f64::NAN, 2.0]).is_nan());
        // One noisy round moves the median by nothing; the mean would move by a fifth.
        assert_eq!(median(&[1.0, 1.1, 0.2, 0.9, 1.05]), 1.0);
    }

    #[test]
    fn spread_is_min_and_max() {
        assert_eq!(spread(&[2.0, 5.0, 1.0, 3.0]), (1.0, 5.0));
        let (lo, hi) = spread(&[]);
        assert!(lo.is_nan() && hi.is_nan());
    }

    #[test]
    fn rounds_alternate_direction() {
        let log = RefCell::new(Vec::new());
        let figure = |key: &'static str| {
            let log = &log;
            Figure::new(key, move |w| {
                log.borrow_mut().push((key, w));
                Run {
                    rps: key.len() as f64,
                    latencies: Vec::new(),
                }
            })
        };
        let group = [figure("a"), figure("bb"), figure("ccc")];
        let runs = interleave(&group, 3, 0.25);
        let order: Vec<&str> = log.borrow().iter().map(|(k, _)| *k).collect();
        assert_eq!(
            order,
            ["a", "bb", "ccc", "ccc", "bb", "a", "a", "bb", "ccc"]
        );
        assert!(log.borrow().iter().all(|&(_, w)| w == 0.25));
        // Each figure's runs, in round order, under its own index.
        assert_eq!(runs.len(), 3);
        for (i, r) in runs.iter().enumerate() {
            assert_eq!(r.len(), 3);
            assert!(r.iter().all(|run| run.rps == (i + 1) as f64));
        }
    }

    #[test]
    fn ratios_are_taken_round_by_round() {
        let per_round = BTreeMap::from([
            ("a".to_owned(), vec![10.0, 4.0, 9.0]),
            ("b".to_owned(), vec![5.0, 1.0, 3.0]),
        ]);
        let c = Check::ratio("a", "b", Bound::AtMost(3.0), &per_round);
        assert_eq!(c.values, [2.0, 4.0, 3.0]);
        // The median of the per-round ratios, not the ratio of the medians (9 / 3).
        assert_eq!(c.median(), 3.0);
        assert_eq!(c.bound.met(c.median()), Some(true));
        assert_eq!(c.name, "a / b");
        let missing = Check::ratio("a", "zz", Bound::AtLeast(1.0), &per_round);
        assert!(missing.values.is_empty());
    }

    #[test]
    fn bounds() {
        assert_eq!(Bound::AtMost(3.0).met(3.0), Some(true));
        assert_eq!(Bound::AtMost(3.0).met(3.01), Some(false));
        assert_eq!(Bound::AtLeast(1.8).met(1.79), Some(false));
        assert_eq!(Bound::AtLeast(1.8).met(f64::NAN), Some(false));
        assert_eq!(Bound::AtMost(1.5).met(f64::NAN), Some(false));
        assert_eq!(Bound::Peer.met(1.0), None);
        let memory = Check::figure(
            "memory_bytes_100k",
            vec![50_348_032.0],
            Bound::AtMost(64.0 * 1024.0 * 1024.0),
            1024.0 * 1024.0,
            " MiB",
        );
        assert_eq!(memory.target(), "≤ 64 MiB");
        assert_eq!(memory.shown(50_348_032.0), "48.02 MiB");
    }

    #[test]
    fn throughput_keys() {
        for k in [
            "loadctl_1t",
            "loadctl_100k_1t",
            "governor_direct_2t",
            "limiter_16t",
        ] {
            assert!(is_throughput(k), "{k}");
        }
        for k in [
            "p999_ns_1t",
            "p50_ns_1t",
            "compile_ms_100k",
            "rounds",
            "_t",
            "x_t",
        ] {
            assert!(!is_throughput(k), "{k}");
        }
    }
}
