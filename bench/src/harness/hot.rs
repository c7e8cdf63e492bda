//! The hot-rule group: every thread classifies requests that match the same three rules
//! ([`hot_policy`]: a 200,000/s rate leased 100 tokens at a time, a 1,000/s rate leased one
//! token at a time, a window of 256), so all shards meet on the same three shared cells. It
//! measures what contention costs as threads are added, and how often each cell is written.
//! A fourth rule, 100 % (a percent rule: shard-local state, no cell), is the control: what
//! adding threads costs on this machine when nothing is shared.
//!
//! Figures, per thread count t, for five request streams — `hot_local`, `hot_rate`,
//! `hot_slow`, `hot_window` (every request aimed at that rule) and `hot_mix` (each request at
//! one of the three rules with a cell, uniformly):
//! - `{figure}_{t}t`: classifications per second, all threads; `{figure}_per_thread_{t}t`;
//!   `{figure}_p999_ns_{t}t`: the p99.9 of one operation's latency.
//! - `{figure}_writes_per_s_{t}t`: shared-cell writes per second (the shards'
//!   [`Shard::shared_writes`] over the run, its ticket returns included);
//!   `{figure}_admitted_per_s_{t}t`: admissions per second, so writes per admission show.
//! - per rule `{p}_writes_per_s_{t}t` and `{p}_admitted_per_s_{t}t`, where `p` is the figure
//!   for a single-rule stream and `hot_mix_{rate,slow,window}` in the mix; for the rate rules
//!   `{p}_writes_bound_per_s_{t}t`, the most writes GCRA allows in the run
//!   ([`rate_tokens_bound`]) per second.
//!
//! Window tickets are completed: each thread keeps up to [`RING`] transactions in flight and,
//! when it has that many, completes the oldest before classifying a request for the window;
//! what it holds at the end it completes after its loop. So an operation is a classification,
//! plus a ticket's return on a full ring, and a run that ends leaves the window empty.
//!
//! Each figure has an engine of its own, with one shard per thread, so a figure's rounds start
//! from the same state: the window empty and, after the other figures' windows (longer than
//! the 100 ms burst tolerance), each rate rule's full burst — except one round of the figure
//! that ends a round and so also starts the next.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use loadctl::policy::Limit;
use loadctl::runtime::{Engine, Shard, Ticket};
use loadctl_bench::workload::{OwnedRequest, hot_policy, hot_requests, hot_rules};

use super::checks::{Bound, Check, rate_tokens_bound};
use super::engine_with;
use super::rounds::{Figure, Run, median, run_with};

/// Window transactions each thread keeps in flight. 4 per thread on 64 threads is the hot
/// window's size, so that rule never refuses up to 64 threads: its figure measures a take and
/// a return per request, the most its cell can be asked.
pub(crate) const RING: usize = 4;

/// The rules' short names in keys, in [`hot_rules`] order.
const RULES: [&str; 4] = ["rate", "slow", "window", "local"];

/// The window rule's index in [`hot_rules`] (its requests may take a slot).
pub(crate) const WINDOW: usize = 2;

/// The request streams: a figure's name and the rules (indexes into [`hot_rules`]) its
/// requests aim at.
const STREAMS: [(&str, &[usize]); 5] = [
    ("hot_local", &[3]),
    ("hot_rate", &[0]),
    ("hot_slow", &[1]),
    ("hot_window", &[2]),
    ("hot_mix", &[0, 1, 2]),
];

/// Requests per stream: distinct numbers, as a stream of calls has, few enough to stay in
/// cache.
const REQUESTS: usize = 4_096;

/// The hot group's requests and engines, which its figures borrow.
pub(crate) struct Hot {
    /// Per stream (in [`STREAMS`] order), its requests with the rule each aims at.
    requests: Vec<Vec<(usize, OwnedRequest)>>,
    /// Per stream and thread count, the engine its figure runs on.
    engines: Vec<Vec<(usize, Engine)>>,
}

impl Hot {
    /// Each stream's requests and an engine per figure, for the thread counts `threads`.
    pub(crate) fn new(threads: &[usize]) -> Self {
        let policy = hot_policy();
        let requests = STREAMS
            .iter()
            .zip(11..)
            .map(|(&(_, aim), seed)| hot_requests(&policy, aim, REQUESTS, seed))
            .collect();
        let engines = STREAMS
            .iter()
            .map(|_| {
                threads
                    .iter()
                    .map(|&t| (t, engine_with(&policy, t)))
                    .collect()
            })
            .collect();
        Self { requests, engines }
    }

    /// The group's figures: each stream at each thread count, stream by stream.
    pub(crate) fn figures(&self) -> Vec<Figure<'_>> {
        let mut out = Vec::new();
        for (s, &(name, aim)) in STREAMS.iter().enumerate() {
            for (t, engine) in &self.engines[s] {
                let (t, requests) = (*t, &self.requests[s]);
                out.push(
                    Figure::new(format!("{name}_{t}t"), move |w| {
                        hot_run(engine, requests, name, aim, t, w)
                    })
                    .with_percentile(format!("{name}_p999_ns_{t}t"), 0.999),
                );
            }
        }
        out
    }
}

/// One thread's state in a hot figure.
pub(crate) struct HotThread {
    shard: Shard,
    /// Window tickets in flight, oldest at `head`.
    ring: [Option<Ticket>; RING],
    head: usize,
    len: usize,
    /// Shared writes made while classifying a request aimed at each rule.
    writes: [u64; 4],
    /// Where each rule of [`hot_rules`] is in the shard's snapshot (for its counters).
    index: [usize; 4],
}

/// What one thread did, read after its loop: per rule, admissions and shared writes.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) admitted: [u64; 4],
    pub(crate) writes: [u64; 4],
}

impl HotThread {
    /// A thread's state with a shard of its own of `engine` (which has published
    /// [`hot_policy`]).
    pub(crate) fn new(engine: &Engine) -> Self {
        let shard = engine.attach();
        let rules = hot_rules();
        let index = std::array::from_fn(|k| {
            shard
                .snapshot()
                .policy()
                .rules()
                .iter()
                .position(|r| r.id().as_str() == rules[k].0)
                .unwrap_or(usize::MAX)
        });
        Self {
            shard,
            ring: std::array::from_fn(|_| None),
            head: 0,
            len: 0,
            writes: [0; 4],
            index,
        }
    }

    /// Classifies `req` (aimed at rule `k`), first completing the oldest ticket when the
    /// request may take a window slot and the ring is full.
    #[inline]
    pub(crate) fn step(&mut self, k: usize, req: &OwnedRequest) {
        if k == WINDOW && self.len == RING {
            self.complete_oldest();
        }
        let now = self.shard.now();
        let before = self.shard.shared_writes();
        let ticket = self.shard.classify(&req.as_request(now)).ticket;
        self.writes[k] += self.shard.shared_writes() - before;
        if let Some(ticket) = ticket {
            if self.len == RING {
                // Only window rules give tickets and the ring was made room for above; kept
                // so that a ticket is never dropped unreturned.
                self.complete_oldest();
            }
            self.ring[(self.head + self.len) % RING] = Some(ticket);
            self.len += 1;
        }
    }

    /// Returns the oldest ticket held (the ring is not empty).
    fn complete_oldest(&mut self) {
        if let Some(ticket) = self.ring[self.head].take() {
            self.shard.complete(ticket);
        }
        self.head = (self.head + 1) % RING;
        self.len -= 1;
    }

    /// Returns every ticket still held, then reads the shard's counters.
    pub(crate) fn finish(mut self) -> Tally {
        while self.len > 0 {
            self.complete_oldest();
        }
        let mut t = Tally {
            writes: self.writes,
            ..Tally::default()
        };
        // The returns are the window's writes outside classification.
        t.writes[WINDOW] += self.shard.shared_writes() - self.writes.iter().sum::<u64>();
        for (k, &i) in self.index.iter().enumerate() {
            t.admitted[k] = self.shard.rule_stats(i).map_or(0, |s| s.accepted);
        }
        t
    }
}

/// One window of a hot figure: `t` threads classify `requests` for `w` seconds; the run's
/// extra figures are the writes and admissions per second, in all and per rule, and for the
/// rate rules the bound their writes obey.
fn hot_run(
    engine: &Engine,
    requests: &[(usize, OwnedRequest)],
    name: &str,
    aim: &[usize],
    t: usize,
    w: f64,
) -> Run {
    // Every time a shard reads lies between these two readings of the engine's clock.
    let clock = &engine.config().clock;
    let from = clock.monotonic_ns();
    let (mut run, tallies) = run_with(
        t,
        w,
        |_| HotThread::new(engine),
        |s, i| {
            let (k, req) = &requests[i % requests.len()];
            s.step(*k, req);
        },
        HotThread::finish,
    );
    let span_ns = clock.monotonic_ns().saturating_sub(from);
    let per_s = |n: u64| n as f64 / run.seconds;
    let sum = |f: fn(&Tally) -> u64| tallies.iter().map(f).sum::<u64>();
    let mut extra = vec![
        (format!("{name}_per_thread_{t}t"), run.rps / t as f64),
        (
            format!("{name}_writes_per_s_{t}t"),
            per_s(sum(|x| x.writes.iter().sum())),
        ),
        (
            format!("{name}_admitted_per_s_{t}t"),
            per_s(sum(|x| x.admitted.iter().sum())),
        ),
    ];
    let rules = hot_rules();
    let config = engine.config();
    for &k in aim {
        let p = rule_prefix(name, aim, k);
        if aim.len() > 1 {
            let writes: u64 = tallies.iter().map(|x| x.writes[k]).sum();
            let admitted: u64 = tallies.iter().map(|x| x.admitted[k]).sum();
            extra.push((format!("{p}_writes_per_s_{t}t"), per_s(writes)));
            extra.push((format!("{p}_admitted_per_s_{t}t"), per_s(admitted)));
        }
        if let Limit::Rate(r) = rules[k].1 {
            extra.push((
                format!("{p}_writes_bound_per_s_{t}t"),
                rate_tokens_bound(
                    r.per_second(),
                    config.burst_tolerance,
                    config.lease_period,
                    span_ns,
                ) / run.seconds,
            ));
        }
    }
    run.extra = extra;
    run
}

/// The key prefix of rule `k`'s figures in stream `name` aimed at `aim`: the stream's own
/// name when it aims at that rule alone.
fn rule_prefix(name: &str, aim: &[usize], k: usize) -> String {
    if aim.len() == 1 {
        name.to_owned()
    } else {
        format!("{name}_{}", RULES[k])
    }
}

/// A word alone on its cache line, as a rule's cell is.
#[repr(align(64))]
struct Line(AtomicU64);

/// What handing one cache line from one core's write to another's costs on this machine, in
/// ns: two threads, pinned to the first and the last usable core (the farthest pair the
/// harness can name), take turns incrementing one word — each reads it until the other's
/// increment shows, then compares and swaps — so every turn is a write to a line the other
/// core wrote last, as a contended cell's take or return is (the median of five runs of
/// 200,000 turns). `None` with fewer than two cores.
pub(crate) fn line_transfer_ns() -> Option<f64> {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let (&first, &last) = (cores.first()?, cores.last()?);
    if cores.len() < 2 {
        return None;
    }
    const TURNS: u64 = 200_000;
    // A turn takes tens of ns; a core taken by another process makes it a time slice, so a
    // run also ends after 100 ms and counts the turns it had.
    const LIMIT: Duration = Duration::from_millis(100);
    let runs: Vec<f64> = (0..5)
        .map(|_| {
            let (line, stop) = (Line(AtomicU64::new(0)), AtomicBool::new(false));
            // Both threads pinned before the clock starts, so starting them is not timed.
            let ready = Barrier::new(2);
            std::thread::scope(|scope| {
                let turns = [(first, 0), (last, 1)].map(|(core, parity)| {
                    let (line, stop, ready) = (&line, &stop, &ready);
                    scope.spawn(move || {
                        core_affinity::set_for_current(core);
                        ready.wait();
                        let start = Instant::now();
                        let mut next = parity;
                        while next < TURNS {
                            // Reading, not swapping, while it is the other's turn: a failed
                            // swap would take the line away from the thread whose turn it is.
                            while line.0.load(Ordering::Acquire) != next {
                                if stop.load(Ordering::Relaxed) {
                                    return None;
                                }
                                std::hint::spin_loop();
                            }
                            let swapped = line.0.compare_exchange(
                                next,
                                next + 1,
                                Ordering::AcqRel,
                                Ordering::Relaxed,
                            );
                            debug_assert!(swapped.is_ok(), "only this thread moves it on");
                            next += 2;
                            if next % 1024 < 2 && start.elapsed() > LIMIT {
                                stop.store(true, Ordering::Relaxed);
                                break;
                            }
                        }
                        // The first thread's loop spans every turn but the other's last.
                        Some(start.elapsed().as_nanos() as f64 / next.max(1) as f64)
                    })
                });
                let [a, b] = turns.map(|h| h.join().ok().flatten());
                a.or(b).unwrap_or(f64::NAN)
            })
        })
        .collect();
    Some(median(&runs))
}

/// The hot group's information rows (not targets), per thread count in `threads`: the bounds
/// the cells' writes obey — a rate rule's writes per second over its bound (≤ 1: a write grants
/// at least one token and GCRA grants at most r·span + b), a window's writes per admission
/// (≤ 2: one take, at most one return) —, then each stream's per-thread throughput against one
/// thread and against the control at the same count. Rows whose figures were not measured are
/// left out.
pub(crate) fn checks(threads: &[usize], per_round: &BTreeMap<String, Vec<f64>>) -> Vec<Check> {
    let rules = hot_rules();
    let mut out = Vec::new();
    for &(name, aim) in &STREAMS {
        for &t in threads {
            for &k in aim {
                let p = rule_prefix(name, aim, k);
                let writes = format!("{p}_writes_per_s_{t}t");
                let (of, most) = match rules[k].1 {
                    Limit::Window(_) => ("admitted_per_s", 2.0),
                    Limit::Rate(_) => ("writes_bound_per_s", 1.0),
                    // Keeps no shared state: its writes are in the stream's total (0).
                    Limit::Percent(_) => continue,
                };
                out.push(Check::ratio(
                    &writes,
                    &format!("{p}_{of}_{t}t"),
                    Bound::Obeys(most),
                    per_round,
                ));
            }
        }
    }
    // How per-thread throughput moves: against one thread, and against the control (no cell)
    // at the same thread count.
    for &(name, _) in &STREAMS {
        for &t in threads {
            let per_thread = format!("{name}_per_thread_{t}t");
            if t != 1 {
                out.push(Check::ratio(
                    &per_thread,
                    &format!("{name}_per_thread_1t"),
                    Bound::Info,
                    per_round,
                ));
            }
            if name != "hot_local" {
                out.push(Check::ratio(
                    &per_thread,
                    &format!("hot_local_per_thread_{t}t"),
                    Bound::Info,
                    per_round,
                ));
            }
        }
    }
    out.retain(|c| !c.values.is_empty());
    out
}
