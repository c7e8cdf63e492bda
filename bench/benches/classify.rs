//! Classifying one request of the standard mix: the engine against 10 and 10,000 rules, and
//! the literal rule-by-rule evaluator (the baseline peer) against the same policies.
//!
//! `cargo bench -p loadctl-bench --bench classify`

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loadctl::runtime::{Engine, EngineConfig, Time};
use loadctl_bench::naive::NaiveEvaluator;
use loadctl_bench::workload::{OwnedRequest, carrier_policy, requests};

const WALL: i128 = 1_705_000_000_000_000_000;

fn bench_classify(c: &mut Criterion) {
    let mut group = c.benchmark_group("classify");
    group.throughput(Throughput::Elements(1));
    for (name, rules) in [("small-10", 10usize), ("carrier-10k", 10_000)] {
        let policy = carrier_policy(rules, 42);
        let reqs: Vec<OwnedRequest> = requests(&policy, 10_000, 7);
        let engine = Engine::from_ruleset(policy.clone(), EngineConfig::default().with_shards(1))
            .expect("publishes");
        let mut shard = engine.attach();
        let mut i = 0usize;
        group.bench_function(format!("loadctl/{name}"), |b| {
            b.iter(|| {
                let r = &reqs[i % reqs.len()];
                i += 1;
                let time = Time {
                    monotonic_ns: i as u64 * 1_000,
                    unix_ns: WALL,
                };
                let d = shard.classify(&r.as_request(time));
                black_box(d.verdict);
            })
        });
        let naive = NaiveEvaluator::new(&policy, Duration::from_millis(100));
        let mut j = 0usize;
        if rules > 100 {
            group.sample_size(10);
            group.measurement_time(Duration::from_secs(10));
        }
        group.bench_function(format!("naive/{name}"), |b| {
            b.iter(|| {
                let r = &reqs[j % reqs.len()];
                j += 1;
                let time = Time {
                    monotonic_ns: j as u64 * 1_000,
                    unix_ns: WALL,
                };
                black_box(naive.classify(&r.as_request(time)));
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_classify);
criterion_main!(benches);
