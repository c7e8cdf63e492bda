//! The multi-core runtime, measured in one run so the ratios are side by side:
//! throughput of 1 and 2 worker threads on the standard mix against the 10,000-rule carrier
//! policy, the same with a policy published every 10 ms alongside, the same again with the
//! rules' cells in a shared `CellTable` (as engines in forked processes use them), and sampled
//! classify latency (p50 / p99 / p99.9).
//!
//! `cargo bench -p loadctl-bench --bench runtime` (`-- --seconds S --rounds N` to change the
//! run length; defaults 2 s and 3 rounds).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use loadctl::policy::{Change, Limit, Rate, Ruleset};
use loadctl::runtime::{CellTable, Engine, EngineConfig, RuleCell, Source};
use loadctl_bench::workload::{OwnedRequest, carrier_policy, requests};

struct Run {
    /// Requests per second, all threads.
    throughput: f64,
    /// Sampled single-classify latencies, nanoseconds.
    latencies: Vec<u64>,
    publishes: u64,
}

fn run(
    threads: usize,
    publish_every: Option<Duration>,
    shared_table: bool,
    seconds: f64,
    policy: &Ruleset,
    mix: &Arc<Vec<OwnedRequest>>,
) -> Run {
    let config = EngineConfig::default().with_shards(threads);
    let engine = if shared_table {
        // Room for every rule four times over (a retuned rule takes a new cell until the old
        // snapshot is gone). Leaked: it stands for memory mapped for the process's life.
        let cells = 4 * policy.len() + 1;
        let region: Vec<RuleCell> = (0..=cells).map(|_| RuleCell::unused()).collect();
        let table = CellTable::format(Box::leak(region.into_boxed_slice())).expect("table");
        Engine::with_cell_table(config, table)
    } else {
        Engine::new(config)
    };
    let source = Source::local("bench");
    engine.publish(&source, policy.clone()).expect("publish");
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (engine, stop, mix) = (engine.clone(), Arc::clone(&stop), Arc::clone(mix));
            std::thread::spawn(move || {
                let mut shard = engine.attach_pinned(t).unwrap_or_else(|_| engine.attach());
                let mut latencies = Vec::with_capacity(1 << 20);
                let mut i = t * 7919;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for k in 0..128 {
                        let now = shard.now();
                        let req = mix[i % mix.len()].as_request(now);
                        i += 1;
                        if k == 0 && latencies.len() < latencies.capacity() {
                            let t0 = Instant::now();
                            black_box(shard.classify(&req).verdict);
                            latencies.push(t0.elapsed().as_nanos() as u64);
                        } else {
                            black_box(shard.classify(&req).verdict);
                        }
                    }
                    n += 128;
                }
                (n, latencies)
            })
        })
        .collect();
    let mut publishes = 0;
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut version = policy.version();
    while Instant::now() < deadline {
        match publish_every {
            Some(every) => {
                std::thread::sleep(every);
                version = version.wrapping_add(1);
                // A NOTIFY-sized change: one rule's rate, as a partial document.
                let rule = &policy.rules().expect("full")[(publishes % 100) as usize];
                let mut changed = rule.as_ref().clone();
                if let Limit::Rate(r) = changed.accept.limit {
                    changed.accept.limit = Limit::Rate(
                        Rate::new(r.per_second() + (publishes % 2) as f64).expect("rate"),
                    );
                }
                let partial =
                    Ruleset::partial(version, vec![Change::Put(changed)]).expect("partial");
                engine.apply(&source, partial).expect("apply");
                publishes += 1;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    stop.store(true, Ordering::Release);
    let elapsed = start.elapsed().as_secs_f64();
    let mut total = 0;
    let mut latencies = Vec::new();
    for w in workers {
        let (n, l) = w.join().expect("worker");
        total += n;
        latencies.extend(l);
    }
    Run {
        throughput: total as f64 / elapsed,
        latencies,
        publishes,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: f64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let seconds = arg("--seconds", 2.0);
    let rounds = arg("--rounds", 3.0) as usize;
    let policy = carrier_policy(10_000, 42);
    let mix = Arc::new(requests(&policy, 20_000, 7));
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "runtime bench: carrier-10k, standard mix, {cores} cores, {rounds} rounds of {seconds} s per configuration"
    );
    let every = Some(Duration::from_millis(10));
    let configs: [(&str, usize, Option<Duration>, bool); 7] = [
        ("1 thread", 1, None, false),
        ("2 threads", 2, None, false),
        ("1 thread, publish every 10 ms", 1, every, false),
        ("2 threads, publish every 10 ms", 2, every, false),
        ("1 thread, shared cell table", 1, None, true),
        ("2 threads, shared cell table", 2, None, true),
        (
            "2 threads, shared cell table, publish every 10 ms",
            2,
            every,
            true,
        ),
    ];
    let mut results: Vec<Vec<Run>> = configs.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (c, (_, threads, every, shared)) in configs.iter().enumerate() {
            results[c].push(run(*threads, *every, *shared, seconds, &policy, &mix));
        }
    }
    println!("| configuration | median throughput | publishes/s | p50 | p99 | p99.9 |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut medians = Vec::new();
    for ((name, _, _, _), runs) in configs.iter().zip(&results) {
        let m = median(runs.iter().map(|r| r.throughput).collect());
        medians.push(m);
        let mut lat: Vec<u64> = runs
            .iter()
            .flat_map(|r| r.latencies.iter().copied())
            .collect();
        lat.sort_unstable();
        let pubs = median(runs.iter().map(|r| r.publishes as f64 / seconds).collect());
        println!(
            "| {name} | {:.2} M/s | {pubs:.0} | {} ns | {} ns | {} ns |",
            m / 1e6,
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            percentile(&lat, 0.999)
        );
    }
    println!("2 threads / 1 thread: {:.2}x", medians[1] / medians[0]);
    println!(
        "1 thread with publishes / without: {:.2}x",
        medians[2] / medians[0]
    );
    println!(
        "2 threads with publishes / without: {:.2}x",
        medians[3] / medians[1]
    );
    println!(
        "shared cell table / own cells: 1 thread {:.2}x, 2 threads {:.2}x, 2 threads with publishes {:.2}x",
        medians[4] / medians[0],
        medians[5] / medians[1],
        medians[6] / medians[3]
    );
}
