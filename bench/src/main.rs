//! The side-by-side harness: loadctl and its peers on the standard workload, in one run.
//!
//! `cargo run --release -p loadctl-bench -- [--json] [--seconds S] [--threads 1,2]`
//!
//! With `--json` a single JSON object goes to stdout (requests per second unless the key says
//! otherwise); human-readable tables always go to stderr. Each throughput figure runs for
//! `--seconds` (default 2) on the given thread counts, threads pinned to cores.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use governor::{Quota, RateLimiter};
use loadctl::clock::{Clock, SystemClock};
use loadctl::engine::{Engine, EngineConfig, Source, Time};
use loadctl::limit::RateGate;
use loadctl::policy::{self, Change, Limits, Ruleset};
use loadctl_bench::naive::NaiveEvaluator;
use loadctl_bench::peers::{LockedLimiter, floor};
use loadctl_bench::workload::{OwnedRequest, carrier_policy, requests, small_policy};

const WALL: i128 = 1_705_000_000_000_000_000;

struct Options {
    json: bool,
    seconds: f64,
    threads: Vec<usize>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        json: false,
        seconds: 2.0,
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
    let e = Engine::new(EngineConfig {
        shards,
        ..EngineConfig::default()
    });
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
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    eprintln!(
        "loadctl-bench: {cores} cores, {} s per figure, threads {:?}",
        o.seconds, o.threads
    );

    // ---- the workload
    let t = Instant::now();
    let carrier = carrier_policy(10_000, 42);
    let small = small_policy(42);
    let mix = requests(&carrier, 20_000, 7);
    let small_mix = requests(&small, 20_000, 7);
    let huge = carrier_policy(100_000, 42);
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
    while t.elapsed() < Duration::from_secs_f64(o.seconds.min(2.0)) {
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
    while t.elapsed() < Duration::from_secs_f64(o.seconds.min(2.0)) {
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

    // ---- throughput
    let clock = SystemClock::default();
    let keys10k = keys(&engine, &mix);
    let mut p999 = 0;
    for &threads in &o.threads {
        let mut r = run(
            threads,
            o.seconds,
            |_| engine.attach(),
            |s, i| {
                let now = s.now();
                black_box(s.classify(&mix[i % mix.len()].as_request(now)).verdict);
            },
        );
        out.insert(format!("loadctl_{threads}t"), r.rps);
        if threads == 1 {
            p999 = percentile(&mut r.latencies, 0.999);
            out.insert("p50_ns_1t".into(), percentile(&mut r.latencies, 0.5) as f64);
            out.insert(
                "p99_ns_1t".into(),
                percentile(&mut r.latencies, 0.99) as f64,
            );
        } else if threads == 2 {
            out.insert(
                "p999_ns_2t".into(),
                percentile(&mut r.latencies, 0.999) as f64,
            );
        }
    }
    out.insert("p999_ns_1t".into(), p999 as f64);
    // Shared writes: the mix on one shard for the time of one figure.
    {
        let e = engine_with(&carrier, 1);
        let mut s = e.attach();
        let n = 2_000_000usize;
        for i in 0..n {
            let t = Time {
                monotonic_ns: i as u64 * 500,
                unix_ns: WALL,
            };
            black_box(s.classify(&mix[i % mix.len()].as_request(t)).verdict);
        }
        out.insert(
            "shared_writes_per_1k".into(),
            s.shared_writes() as f64 * 1000.0 / n as f64,
        );
    }
    let small_engine = engine_with(&small, 1);
    let r = run(
        1,
        o.seconds,
        |_| small_engine.attach(),
        |s, i| {
            let now = s.now();
            black_box(
                s.classify(&small_mix[i % small_mix.len()].as_request(now))
                    .verdict,
            );
        },
    );
    out.insert("loadctl_small_1t".into(), r.rps);
    for (key, policy, requests) in [
        ("naive_1t", &carrier, &mix),
        ("naive_small_1t", &small, &small_mix),
    ] {
        let naive = NaiveEvaluator::new(policy, Duration::from_millis(100));
        let r = run(
            1,
            o.seconds,
            |_| (),
            |_, i| {
                let t = Time {
                    monotonic_ns: clock.monotonic_ns(),
                    unix_ns: WALL,
                };
                black_box(naive.classify(&requests[i % requests.len()].as_request(t)));
            },
        );
        out.insert(key.into(), r.rps);
    }
    let quota = Quota::per_second(NonZeroU32::new(100_000).expect("non-zero"));
    let direct = RateLimiter::direct(quota);
    let keyed = RateLimiter::keyed(Quota::per_second(NonZeroU32::new(250).expect("non-zero")));
    let locked = LockedLimiter::new(250);
    let rules = engine.snapshot().policy().len();
    for &threads in &o.threads {
        let r = run(
            threads,
            o.seconds,
            |_| (),
            |_, _| {
                black_box(direct.check().is_ok());
            },
        );
        out.insert(format!("governor_direct_{threads}t"), r.rps);
        let r = run(
            threads,
            o.seconds,
            |_| (),
            |_, i| {
                black_box(keyed.check_key(&keys10k[i % keys10k.len()]).is_ok());
            },
        );
        out.insert(format!("governor_keyed_{threads}t"), r.rps);
        let r = run(
            threads,
            o.seconds,
            |_| (),
            |_, i| {
                black_box(locked.check(keys10k[i % keys10k.len()], clock.monotonic_ns()));
            },
        );
        out.insert(format!("locked_{threads}t"), r.rps);
        // Our limiter alone: each shard's own GCRA state per rule, read with the engine clock.
        let r = run(
            threads,
            o.seconds,
            |_| {
                (0..rules)
                    .map(|_| RateGate::new(250.0, Duration::from_millis(100)))
                    .collect::<Vec<_>>()
            },
            |gates, i| {
                let k = keys10k[i % keys10k.len()] as usize;
                black_box(gates[k].try_acquire(clock.monotonic_ns()));
            },
        );
        out.insert(format!("limiter_{threads}t"), r.rps);
    }
    let r = run(
        1,
        o.seconds,
        |_| (),
        |_, i| {
            black_box(floor(&mix[i % mix.len()]));
        },
    );
    out.insert("floor_1t".into(), r.rps);
    let clock_pair = {
        let t = Instant::now();
        for _ in 0..1_000_000 {
            black_box(Instant::now());
        }
        t.elapsed().as_nanos() as f64 / 1_000_000.0
    };
    out.insert("latency_clock_overhead_ns".into(), clock_pair);

    // ---- report
    let get = |k: &str| out.get(k).copied().unwrap_or(f64::NAN);
    eprintln!("\n{:<28} {:>14}", "figure", "value");
    for (k, v) in &out {
        let shown = if (k.ends_with("_1t") || k.ends_with("_2t")) && !k.contains("_ns") {
            format!("{:.3} M/s", v / 1e6)
        } else {
            format!("{v:.1}")
        };
        eprintln!("{k:<28} {shown:>14}");
    }
    let ratios = [
        (
            "loadctl_1t / naive_1t",
            get("loadctl_1t") / get("naive_1t"),
            "≥ 500",
        ),
        (
            "loadctl_small_1t / naive_small_1t",
            get("loadctl_small_1t") / get("naive_small_1t"),
            "≥ 3",
        ),
        (
            "loadctl_2t / loadctl_1t",
            get("loadctl_2t") / get("loadctl_1t"),
            "≥ 1.8",
        ),
        (
            "limiter_2t / limiter_1t",
            get("limiter_2t") / get("limiter_1t"),
            "≥ 1.8",
        ),
        (
            "governor_direct_2t / _1t",
            get("governor_direct_2t") / get("governor_direct_1t"),
            "(peer)",
        ),
        (
            "locked_2t / locked_1t",
            get("locked_2t") / get("locked_1t"),
            "(peer)",
        ),
        (
            "limiter_1t / governor_keyed_1t",
            get("limiter_1t") / get("governor_keyed_1t"),
            "≥ 2",
        ),
        (
            "floor_1t / loadctl_1t",
            get("floor_1t") / get("loadctl_1t"),
            "≤ 4",
        ),
    ];
    eprintln!("\n{:<36} {:>10}  target", "ratio", "value");
    for (name, v, target) in ratios {
        eprintln!("{name:<36} {v:>10.2}  {target}");
    }
    eprintln!("(latency samples include two Instant::now() reads: {clock_pair:.1} ns per read)");
    if o.json {
        let obj: serde_json::Map<String, serde_json::Value> = out
            .into_iter()
            .map(|(k, v)| (k, serde_json::json!(v)))
            .collect();
        println!("{}", serde_json::Value::Object(obj));
    }
}
