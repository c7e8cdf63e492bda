//! `loadctl demo`: the README's main job.
//!
//! Runs the engine for real: one shard per worker thread (pinned to a core when possible),
//! each classifying the standard synthetic request mix as fast as it can for a few seconds
//! against the embedded default policy (or `--policy FILE`). Half-way it applies a partial
//! update through the same path a NOTIFY body takes (bytes → `policy::read` →
//! `Engine::apply`). At the end it prints a per-rule table (achieved against configured rate)
//! and the throughput per core.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use loadctl::policy::{self, Change, Limit, Limits, Rate, Rule, Ruleset};
use loadctl::runtime::{Engine, EngineConfig, EngineStats, RuleRow, Source, Ticket, Time};
use loadctl_bench::workload::requests;

/// Options of the demo.
pub struct Options<'a> {
    /// Policy file instead of the embedded one.
    pub policy: Option<&'a str>,
    /// How long to run.
    pub duration: Duration,
    /// Worker threads (default: one per core).
    pub threads: Option<usize>,
    /// How SIP user parts without `user=phone` are read.
    pub numbers: loadctl::uri::SipUserNumbers,
}

/// How long a window admission stays outstanding (its transaction's duration).
const HOLD: Duration = Duration::from_millis(20);

/// Runs the demo; returns the exit code.
pub fn run(opts: &Options<'_>) -> u8 {
    let (name, bytes) = match opts.policy {
        Some(path) => match crate::read_input(path) {
            Ok(b) => (path.to_owned(), b),
            Err(e) => {
                eprintln!("loadctl: {path}: {e}");
                return 2;
            }
        },
        None => (
            "embedded default policy".to_owned(),
            crate::DEFAULT_POLICY.as_bytes().to_vec(),
        ),
    };
    let ruleset = match policy::read(&bytes, &Limits::default()) {
        Ok(doc) => doc.ruleset,
        Err(e) => {
            eprintln!("{name}:{e}");
            return 1;
        }
    };
    if ruleset.rules().is_none() {
        eprintln!("{name}: the demo needs a full policy (state=\"full\")");
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = opts.threads.unwrap_or(cores).max(1);
    let engine = Engine::new(
        EngineConfig::default()
            .with_shards(threads)
            .with_compile(crate::policy_file::compile_config(opts.numbers)),
    );
    let source = Source::local("demo-notifier");
    if let Err(e) = engine.publish(&source, ruleset.clone()) {
        eprintln!("loadctl: {e}");
        return 1;
    }
    println!(
        "loadctl demo: {name}, {} rules, {threads} worker thread(s) on {cores} core(s), {:?}",
        ruleset.len(),
        opts.duration
    );
    let mix = Arc::new(requests(&ruleset, 20_000, 0x5eed));
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|w| {
            let (engine, mix, stop, counts) = (
                engine.clone(),
                Arc::clone(&mix),
                Arc::clone(&stop),
                Arc::clone(&counts),
            );
            std::thread::spawn(move || worker(w, &engine, &mix, &stop, &counts[w]))
        })
        .collect();
    let half = opts.duration / 2;
    let mut updated = None;
    let mut first_half: Option<(EngineStats, f64)> = None;
    while started.elapsed() < opts.duration {
        std::thread::sleep(
            (opts.duration / 8)
                .min(Duration::from_millis(250))
                .min(opts.duration.saturating_sub(started.elapsed())),
        );
        if updated.is_none() && started.elapsed() >= half {
            first_half = Some((engine.stats(), started.elapsed().as_secs_f64()));
            updated = Some(apply_update(&engine, &source, &ruleset));
        }
        let done: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let secs = started.elapsed().as_secs_f64();
        eprint!(
            "\r  {secs:5.1} s  {:>12} requests  {:>7.2} M/s  policy generation {}   ",
            done,
            done as f64 / secs / 1e6,
            engine.generation()
        );
        let _ = std::io::stderr().flush();
    }
    stop.store(true, Ordering::Release);
    let pinned: Vec<bool> = workers
        .into_iter()
        .map(|h| h.join().unwrap_or(false))
        .collect();
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!();
    let last = engine.stats();
    match &first_half {
        Some((before, t1)) => {
            println!(
                "first half ({t1:.1} s, policy generation {}):",
                before.generation
            );
            print_table(&before.rules, None, *t1);
            if let Some(Some(msg)) = &updated {
                println!("half-way: {msg}");
            }
            println!(
                "second half ({:.1} s, policy generation {}):",
                elapsed - t1,
                last.generation
            );
            print_table(&last.rules, Some(&before.rules), elapsed - t1);
        }
        None => print_table(&last.rules, None, elapsed),
    }
    println!(
        "exempt {}, unmatched {}, total {} requests (a rate rule admits its rate plus a burst of rate × 100 ms)",
        last.exempt,
        last.unmatched,
        last.total()
    );
    let total: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    println!(
        "throughput: {:.2} M requests/s in total, {:.2} M/s per worker thread ({} pinned to a core)",
        total as f64 / elapsed / 1e6,
        total as f64 / elapsed / 1e6 / threads as f64,
        pinned.iter().filter(|p| **p).count()
    );
    // Throughput depends on the machine: say which one, as the benchmark harness does.
    println!("machine: {}", loadctl_bench::machine::Machine::probe());
    0
}

/// One worker: classifies the mix in a loop; window admissions complete after [`HOLD`].
/// Returns whether the thread was pinned.
fn worker(
    index: usize,
    engine: &Engine,
    mix: &[loadctl_bench::workload::OwnedRequest],
    stop: &AtomicBool,
    count: &AtomicU64,
) -> bool {
    let (mut shard, pinned) = match engine.attach_pinned(index) {
        Ok(s) => (s, true),
        Err(_) => (engine.attach(), false),
    };
    let mut held: VecDeque<(u64, Ticket)> = VecDeque::new();
    let hold_ns = HOLD.as_nanos() as u64;
    let mut i = index * 7919;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..256 {
            let now: Time = shard.now();
            while held
                .front()
                .is_some_and(|(due, _)| *due <= now.monotonic_ns)
            {
                if let Some((_, t)) = held.pop_front() {
                    shard.complete(t);
                }
            }
            let req = mix[i % mix.len()].as_request(now);
            i += 1;
            let d = shard.classify(&req);
            if let Some(t) = d.ticket {
                held.push_back((now.monotonic_ns + hold_ns, t));
            }
        }
        n += 256;
        count.store(n, Ordering::Relaxed);
    }
    for (_, t) in held.drain(..) {
        shard.complete(t);
    }
    pinned
}

/// Half-way update: the first rate rule's rate is halved, sent as a partial document through
/// the NOTIFY path. Returns what was done.
fn apply_update(engine: &Engine, source: &Source, original: &Ruleset) -> Option<String> {
    let rule: &Rule = original
        .rules()?
        .iter()
        .find(|r| matches!(r.accept.limit, Limit::Rate(_)))?;
    let Limit::Rate(rate) = rule.accept.limit else {
        return None;
    };
    let mut changed = rule.clone();
    changed.accept.limit = Limit::Rate(Rate::new(rate.per_second() / 2.0).ok()?);
    let partial = Ruleset::partial(
        original.version().wrapping_add(1),
        vec![Change::Put(changed)],
    )
    .ok()?;
    let body = policy::write(&partial);
    let msg = match policy::read(body.as_bytes(), &Limits::default())
        .map(|d| engine.apply(source, d.ruleset))
    {
        Ok(Ok(g)) => format!(
            "applied a partial update (version {}) setting rule {} to rate {}/s; now at generation {g}",
            partial.version(),
            rule.id,
            rate.per_second() / 2.0
        ),
        Ok(Err(e)) => format!("the partial update was refused: {e}"),
        Err(e) => format!("the partial update did not parse: {e}"),
    };
    Some(msg)
}

/// Prints one row per rule: counters (minus `before`'s row for the same rule and limit, so
/// a rule kept across the update shows only this period) and accepted/s over `secs`.
fn print_table(rows: &[RuleRow], before: Option<&[RuleRow]>, secs: f64) {
    println!(
        "  {:<20} {:<12} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11} {:>11}",
        "rule",
        "limit",
        "matched",
        "accepted",
        "rejected",
        "redirected",
        "dropped",
        "accepted/s",
        "configured"
    );
    for row in rows {
        let mut s = row.stats;
        if let Some(prev) = before.and_then(|b| {
            b.iter()
                .find(|p| p.source == row.source && p.rule == row.rule && p.limit == row.limit)
        }) {
            s.matched -= prev.stats.matched;
            s.accepted -= prev.stats.accepted;
            s.rejected -= prev.stats.rejected;
            s.redirected -= prev.stats.redirected;
            s.dropped -= prev.stats.dropped;
        }
        let configured = match row.limit {
            Limit::Rate(r) => format!("{}/s", r.per_second()),
            Limit::Percent(p) => format!("{}%", p.value()),
            Limit::Window(w) => format!("{w} open"),
        };
        let achieved = match row.limit {
            Limit::Percent(_) if s.matched > 0 => {
                format!("{:.1}%", s.accepted as f64 * 100.0 / s.matched as f64)
            }
            _ => format!("{:.1}", s.accepted as f64 / secs),
        };
        println!(
            "  {:<20} {:<12} {:>10} {:>10} {:>10} {:>10} {:>9} {:>11} {:>11}",
            row.rule,
            row.limit.to_string(),
            s.matched,
            s.accepted,
            s.rejected,
            s.redirected,
            s.dropped,
            achieved,
            configured
        );
    }
}
