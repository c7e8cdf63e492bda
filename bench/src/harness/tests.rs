use std::cell::RefCell;
use std::collections::BTreeMap;

use super::checks::{Bound, Check, is_throughput};
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
