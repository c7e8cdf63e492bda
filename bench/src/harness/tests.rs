use std::cell::RefCell;
use std::collections::BTreeMap;

use super::checks::{Bound, Check, is_throughput, rate_tokens_bound, shown};
use super::rounds::{Figure, Run, interleave, median, spread};

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
                seconds: w,
                extra: Vec::new(),
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

#[test]
fn rate_tokens_bound_is_r_span_plus_b() {
    use std::time::Duration;
    let (tau, period) = (Duration::from_millis(100), Duration::from_micros(500));
    const S: u64 = 1_000_000_000;
    // 1,000/s: T = 1 ms, b = 100, L = 100 ms − 1 ns, leases of one token (no look-ahead).
    assert_eq!(rate_tokens_bound(1_000.0, tau, period, S), 1_100.0);
    // No time at all: the burst alone.
    assert_eq!(rate_tokens_bound(1_000.0, tau, period, 0), 100.0);
    // 200,000/s: T = 5 µs, b = 20,000; the look-ahead taken off L is added back.
    assert_eq!(rate_tokens_bound(200_000.0, tau, period, S), 220_000.0);
    assert_eq!(rate_tokens_bound(200_000.0, tau, period, S / 2), 120_000.0);
    // A tolerance shorter than the lease period: the look-ahead alone is the reach
    // (0.5 ms / 5 µs + 1), more than the burst of 20.
    assert_eq!(
        rate_tokens_bound(200_000.0, Duration::from_micros(100), period, 0),
        101.0
    );
    assert_eq!(rate_tokens_bound(0.0, tau, period, S), 0.0);
    assert!(rate_tokens_bound(3e9, tau, period, S).is_infinite());
}

/// Drives `shards` shards of one engine with requests for `rule` of the hot policy, taking
/// turns request by request, `n` requests `step_ns` apart, the time read through a clock of
/// resolution `tick_ns`; returns (admitted, writes, span of the times read).
fn simulate(rule: usize, shards: usize, n: u64, step_ns: u64, tick_ns: u64) -> (u64, u64, u64) {
    use loadctl::runtime::{Time, Verdict};
    use loadctl_bench::workload::{hot_policy, hot_requests};
    let policy = hot_policy();
    let engine = super::engine_with(&policy, shards);
    let requests = hot_requests(&policy, &[rule], 64, 5);
    let mut s: Vec<_> = (0..shards).map(|_| engine.attach()).collect();
    let (mut admitted, mut last) = (0, 0);
    for i in 0..n {
        last = i * step_ns / tick_ns * tick_ns;
        let t = Time {
            monotonic_ns: last,
            unix_ns: super::WALL,
        };
        let request = requests[i as usize % requests.len()].1.as_request(t);
        let d = s[i as usize % shards].classify(&request);
        admitted += u64::from(d.verdict == Verdict::Accept);
    }
    (admitted, s.iter().map(|x| x.shared_writes()).sum(), last)
}

/// 400,000 requests 500 ns apart (0.2 s at 2,000,000/s, ten times the fast rule's rate).
const N: u64 = 400_000;
const STEP: u64 = 500;
/// CLOCK_MONOTONIC_COARSE's resolution at HZ = 250, and a clock of 1 ns.
const COARSE: u64 = 4_000_000;
const FINE: u64 = 1;

fn bound(r: f64, span: u64) -> f64 {
    use std::time::Duration;
    rate_tokens_bound(
        r,
        Duration::from_millis(100),
        Duration::from_micros(500),
        span,
    )
}

#[test]
fn overloaded_rate_rules_obey_the_bound_and_use_it() {
    use loadctl_bench::workload::{HOT_RATE, HOT_SLOW};
    for (rule, r, lease) in [(0, HOT_RATE, 100.0), (1, HOT_SLOW, 1.0)] {
        for tick in [COARSE, FINE] {
            for shards in [1, 64] {
                let (admitted, writes, span) = simulate(rule, shards, N, STEP, tick);
                let most = bound(r, span);
                let case = format!(
                    "rule {rule}, tick {tick}, {shards} shards: {admitted} admitted, {writes} writes, bound {most}"
                );
                assert!(admitted as f64 <= most && writes as f64 <= most, "{case}");
                // All of it but what the shards hold when the run ends (a lease each at most).
                assert!(
                    admitted as f64 >= most - shards as f64 * lease - 1.0,
                    "{case}"
                );
            }
        }
    }
}

/// What grows with the number of shards on an overloaded rate rule: nothing on the coarse
/// clock, the writes on a fine one. `-- --nocapture` prints the counts.
#[test]
fn leases_stay_full_under_overload_on_the_coarse_clock() {
    let mut writes = Vec::new();
    for tick in [COARSE, FINE] {
        for shards in [1, 2, 4, 16, 64] {
            let (a, w, _) = simulate(0, shards, N, STEP, tick);
            println!("tick {tick} ns, {shards} shards: {a} admitted, {w} writes");
            writes.push(w);
        }
    }
    // Coarse: each 4 ms step frees 800 tokens, taken in leases of 100 by whichever shards ask
    // first; however many shards there are, about one write per 100 admissions.
    assert!(writes[..5].iter().all(|&w| w == writes[0]), "{writes:?}");
    assert!((580..=620).contains(&writes[0]), "{writes:?}");
    // Fine, one shard: the look-ahead keeps the leases full. More shards: a shard that is out
    // of tokens takes the next one as soon as it conforms, and the others' leases shrink.
    assert!((580..=620).contains(&writes[5]), "{writes:?}");
    assert!(writes[9] > 10 * writes[5], "{writes:?}");
}

#[test]
fn hot_window_threads_return_every_slot() {
    use super::hot::{HotThread, RING, WINDOW};
    use loadctl_bench::workload::{HOT_WINDOW, hot_policy, hot_requests};
    let policy = hot_policy();
    let engine = super::engine_with(&policy, 2);
    let requests = hot_requests(&policy, &[WINDOW], 64, 3);
    let mut a = HotThread::new(&engine);
    for (k, r) in &requests {
        a.step(*k, r);
    }
    let tally = a.finish();
    // Each request was admitted (RING in flight, far below the window) and wrote twice: its
    // take and, from the ring or at the end, its return.
    assert_eq!(tally.admitted[WINDOW], requests.len() as u64);
    assert_eq!(tally.writes[WINDOW], 2 * requests.len() as u64);
    assert!(RING * 64 <= HOT_WINDOW as usize);
    // The window is empty again: a shard that holds every ticket gets exactly its size.
    let mut b = engine.attach();
    let request = requests[0].1.as_request(b.now());
    let mut held = Vec::new();
    for _ in 0..=HOT_WINDOW {
        held.extend(b.classify(&request).ticket);
    }
    assert_eq!(held.len(), HOT_WINDOW as usize);
    for t in held {
        assert!(b.complete(t));
    }
}

#[test]
fn hot_checks_are_information_on_measured_figures() {
    let per_round = BTreeMap::from([
        (
            "hot_rate_writes_per_s_2t".to_owned(),
            vec![2_000.0, 3_000.0],
        ),
        (
            "hot_rate_writes_bound_per_s_2t".to_owned(),
            vec![250_000.0, 250_000.0],
        ),
        ("hot_window_writes_per_s_2t".to_owned(), vec![20.0, 30.0]),
        ("hot_window_admitted_per_s_2t".to_owned(), vec![10.0, 10.0]),
    ]);
    let checks = super::hot::checks(&[1, 2], &per_round);
    let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "hot_rate_writes_per_s_2t / hot_rate_writes_bound_per_s_2t",
            "hot_window_writes_per_s_2t / hot_window_admitted_per_s_2t",
        ]
    );
    assert_eq!(checks[0].values, [0.008, 0.012]);
    assert_eq!(checks[0].bound.holds(checks[0].median()), Some(true));
    assert_eq!(checks[0].bound.met(checks[0].median()), None);
    // Three writes per admission in a round breaks the window's bound.
    assert_eq!(checks[1].values, [2.0, 3.0]);
    assert_eq!(checks[1].bound.holds(3.0), Some(false));
    assert_eq!(checks[1].target(), "obeys ≤ 2.0 (info)");
    assert_eq!(checks[0].shown(0.008), "0.0080");
}

#[test]
fn options_threads_and_groups() {
    use super::options::{Group, parse};
    let args = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let o = parse(args(""), 2).expect("defaults");
    assert_eq!(o.threads, [1, 2]);
    assert_eq!(o.groups, [Group::Standard, Group::Hot]);
    // The default's 2 threads are dropped on a 1-core machine; a list asked for is not.
    assert_eq!(parse(args(""), 1).expect("defaults").threads, [1]);
    let o = parse(args("--threads 1,2,4 --groups hot --json"), 4).expect("valid");
    assert_eq!(
        (o.threads, o.groups, o.json),
        (vec![1, 2, 4], vec![Group::Hot], true)
    );
    for bad in ["3", "0", "1,1", "1,x", "", "1,,2"] {
        let e = parse(args(&format!("--threads {bad}")), 2).expect_err(bad);
        assert!(e.contains("--threads"), "{bad}: {e}");
    }
    assert!(
        parse(args("--threads 3"), 2)
            .expect_err("3 > 2")
            .contains("2 usable cores")
    );
    for bad in ["warm", "hot,hot", ""] {
        let e = parse(args(&format!("--groups {bad}")), 2).expect_err(bad);
        assert!(e.contains("--groups"), "{bad}: {e}");
    }
    assert!(parse(args("--threads"), 2).is_err());
    assert!(parse(args("--frobnicate"), 2).is_err());
}

#[test]
fn small_rates_are_shown_per_second() {
    assert_eq!(shown("hot_slow_writes_per_s_2t", 1_099.6), "1100 /s");
    assert_eq!(shown("hot_rate_2t", 11_345_000.0), "11.345 M/s");
    assert_eq!(shown("hot_rate_p999_ns_2t", 551.0), "551.0");
}

#[test]
fn a_line_transfer_takes_some_time() {
    let cores = core_affinity::get_core_ids().unwrap_or_default().len();
    match super::hot::line_transfer_ns() {
        Some(ns) => assert!(cores >= 2 && ns > 0.0 && ns.is_finite(), "{ns}"),
        None => assert!(cores < 2),
    }
}
