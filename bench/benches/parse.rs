//! Reading and validating policy documents of 10, 10,000 and 100,000 rules.
//!
//! `cargo bench -p loadctl-bench --bench parse` — throughput is reported in bytes; rules per
//! second is the rule count divided by the median time.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loadctl::policy::{Limits, read, write};
use loadctl_bench::workload::carrier_policy;

fn parse(c: &mut Criterion) {
    let mut group = c.benchmark_group("policy_read");
    for rules in [10usize, 10_000, 100_000] {
        let text = write(&carrier_policy(rules, 42));
        group.throughput(Throughput::Bytes(text.len() as u64));
        if rules >= 100_000 {
            group.sample_size(10);
        }
        group.bench_function(format!("carrier-{rules}"), |b| {
            b.iter(|| read(text.as_bytes(), &Limits::default()).expect("valid"))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("policy_write");
    let rs = carrier_policy(10_000, 42);
    group.bench_function("carrier-10000", |b| b.iter(|| write(&rs)));
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
