//! A fixed-work driver for instruction counts: classifies the harness's small-10, carrier-10k
//! or carrier-100k workload `N` times on one shard, with synthetic time (1 µs apart), inside
//! one non-inlined function so callgrind can count just that part.
//!
//! `valgrind --tool=callgrind --toggle-collect='*classify_loop*' \
//!   target/release/examples/classify_count small 200000`
//! (`small`, `carrier`, `carrier100k` or `floor`; instructions per classification = Ir / N).
//! Under cachegrind the same toggle counts cache misses per classification
//! (`--tool=cachegrind --cache-sim=yes --D1=65536,8,64 --LL=33554432,16,64`, then
//! `cg_annotate` on the functions `classify_loop` calls).

use std::hint::black_box;

use loadctl::runtime::{Engine, EngineConfig, Shard, Source, Time};
use loadctl_bench::peers::floor;
use loadctl_bench::workload::{OwnedRequest, carrier_policy, requests, small_policy};

const WALL: i128 = 1_705_000_000_000_000_000;

#[inline(never)]
fn classify_loop(shard: &mut Shard, mix: &[OwnedRequest], n: usize) -> u64 {
    let mut accepted = 0u64;
    for i in 0..n {
        let t = Time {
            monotonic_ns: i as u64 * 1_000,
            unix_ns: WALL,
        };
        let d = shard.classify(&mix[i % mix.len()].as_request(t));
        accepted += u64::from(d.verdict == loadctl::runtime::Verdict::Accept);
    }
    accepted
}

#[inline(never)]
fn floor_loop(mix: &[OwnedRequest], n: usize) {
    for i in 0..n {
        black_box(floor(&mix[i % mix.len()]));
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "small".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let policy = match which.as_str() {
        "carrier" | "floor" => carrier_policy(10_000, 42),
        "carrier100k" => carrier_policy(100_000, 42),
        _ => small_policy(42),
    };
    let mix = requests(&policy, 20_000, 7);
    if which == "floor" {
        floor_loop(&mix, n);
        return;
    }
    let engine = Engine::new(EngineConfig::default().with_shards(1));
    engine
        .publish(&Source::local("bench"), policy)
        .expect("publish");
    let mut shard = engine.attach();
    // Warm: one pass over the mix outside the counted loop.
    classify_loop(&mut shard, &mix, mix.len());
    let accepted = classify_loop(&mut shard, &mix, n);
    println!("{which}: {n} classifications, {accepted} accepted");
}
