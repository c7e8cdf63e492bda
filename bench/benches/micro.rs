//! The micro-level pieces, each beside what it replaces or competes with, so the ratios come
//! from one run:
//!
//! - `trie`: finding every stored prefix of a number in the packed digit trie vs probing a
//!   hash map once per prefix length (the obvious alternative), on 8,000 carrier prefixes.
//! - `canonicalise`: header value → canonical identity (name-addr extraction, URI parse,
//!   canonical key) for the header shapes of the standard mix, beside the bench floor (one
//!   byte search and one hash of the same value).
//! - `limiter`: the shard-local GCRA gate, the shared cell's lease (one CAS, uncontended) and
//!   governor's direct limiter, one decision each.
//! - `publish`: compiling carrier-10k; publishing it when its conditions differ from the
//!   current policy's (alternating two seeds: everything is compiled) and when they are the
//!   same (the matcher is reused); a partial update that retunes one rule's rate.
//!
//! - `prsm`: the per-message cost of PRSM on a raw INVITE: scanning it, making its transaction
//!   key and observing it in the retransmission detector (a first copy and a retransmission),
//!   beside a `HashMap` lookup-and-insert of the same key (the table it replaces); a push and a
//!   pop through the two-queue scheduler beside a `Mutex<VecDeque>` (the obvious queue).
//!
//! `cargo bench -p loadctl-bench --bench micro`

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use loadctl::compile::trie::TrieBuilder;
use loadctl::compile::{CompileConfig, compile};
use loadctl::policy::{Change, Limit, Rate, Ruleset};
use loadctl::runtime::{Engine, EngineConfig, RuleCell, Source};
use loadctl::uri;
use loadctl_bench::naive::RateGate;
use loadctl_bench::workload::{Rng, carrier_policy};

fn bench_trie(c: &mut Criterion) {
    let mut rng = Rng::new(0x5eed);
    let countries: Vec<String> = (0..60)
        .map(|_| {
            let len = 1 + rng.below(3) as usize;
            rng.digits(len)
        })
        .collect();
    let prefixes: Vec<Vec<u8>> = (0..8_000)
        .map(|_| {
            let more = 2 + rng.below(6) as usize;
            format!("{}{}", rng.pick(&countries), rng.digits(more)).into_bytes()
        })
        .collect();
    let mut builder = TrieBuilder::default();
    let mut by_prefix: HashMap<&[u8], Vec<u32>> = HashMap::new();
    for (i, p) in prefixes.iter().enumerate() {
        builder.insert(p, i as u32);
        by_prefix.entry(p.as_slice()).or_default().push(i as u32);
    }
    let trie = builder.build();
    // Half the numbers extend a stored prefix, half are random.
    let numbers: Vec<Vec<u8>> = (0..1024)
        .map(|i| {
            let mut n = if i % 2 == 0 {
                rng.pick(&prefixes).clone()
            } else {
                Vec::new()
            };
            let fill = 12usize.saturating_sub(n.len());
            n.extend(rng.digits(fill).into_bytes());
            n
        })
        .collect();
    let mut group = c.benchmark_group("trie");
    group.throughput(Throughput::Elements(1));
    let mut k = 0;
    group.bench_function("walk/8k-prefixes", |b| {
        b.iter(|| {
            k = (k + 1) % numbers.len();
            let mut found = 0;
            trie.walk(black_box(&numbers[k]), |e| found += e.len());
            found
        })
    });
    group.bench_function("hash-per-length/8k-prefixes", |b| {
        b.iter(|| {
            k = (k + 1) % numbers.len();
            let n = black_box(&numbers[k]);
            (1..=n.len())
                .filter_map(|len| by_prefix.get(&n[..len]))
                .map(Vec::len)
                .sum::<usize>()
        })
    });
    group.finish();
}

/// Header values in the shapes the standard mix uses.
const HEADERS: [(&str, &str); 4] = [
    (
        "from-name-addr",
        "\"Bob Smith\" <sip:user12345@customers17.example.org;transport=tcp>;tag=5ae3b1c9d02e4f11",
    ),
    (
        "to-user-phone",
        "<sip:+49(301)2345678901@gw2.carrier.example;user=phone>",
    ),
    ("to-tel", "<tel:+1-212-555-0123>;tag=77"),
    ("local-tel", "<tel:7042;phone-context=Example.COM>"),
];

fn bench_canonicalise(c: &mut Criterion) {
    let mut group = c.benchmark_group("canonicalise");
    group.throughput(Throughput::Elements(1));
    let mut buf = Vec::new();
    for (name, value) in HEADERS {
        group.bench_function(format!("canonical/{name}"), |b| {
            b.iter(|| {
                let text = uri::header_uris(black_box(value)).next()?.ok()?;
                let parsed = uri::parse(text).ok()?;
                Some(uri::canonicalize(parsed, &mut buf).key.len())
            })
        });
        group.bench_function(format!("floor/{name}"), |b| {
            b.iter(|| {
                let v = black_box(value);
                let mut h = std::collections::hash_map::DefaultHasher::new();
                v.hash(&mut h);
                v.bytes().position(|b| b == b'<').unwrap_or(0) as u64 ^ h.finish()
            })
        });
    }
    group.finish();
}

fn bench_limiter(c: &mut Criterion) {
    let mut group = c.benchmark_group("limiter");
    group.throughput(Throughput::Elements(1));
    // Our gates take the time as an argument (a shard reads its coarse clock once per
    // request): simulated time advancing 1 µs per decision, at a 1 M/s limit (all admitted).
    let mut t = 0u64;
    let mut gate = RateGate::new(1e6, Duration::from_millis(100));
    group.bench_function("shard-gate", |b| {
        b.iter(|| {
            t += 1_000;
            gate.try_acquire(black_box(t))
        })
    });
    let cell = RuleCell::rate();
    // T = 1 µs, 100 ms tolerance, one token per lease (the worst case: a slow rule).
    let mut t = 0u64;
    group.bench_function("shared-cell-lease", |b| {
        b.iter(|| {
            t += 1_000;
            cell.lease_tokens(black_box(t), 1_000, 100_000_000, 0, 1)
        })
    });
    // governor reads its own (TSC) clock inside `check`.
    let direct = RateLimiter::direct(Quota::per_second(NonZeroU32::new(1_000_000).expect("1M")));
    group.bench_function("governor-direct", |b| b.iter(|| direct.check().is_ok()));
    group.finish();
}

fn bench_publish(c: &mut Criterion) {
    let mut group = c.benchmark_group("publish");
    group.sample_size(20);
    let policy = carrier_policy(10_000, 42);
    group.bench_function("compile/carrier-10k", |b| {
        b.iter(|| compile(black_box(&policy), &CompileConfig::default()).map(|p| p.len()))
    });
    let other = carrier_policy(10_000, 43);
    let source = Source::local("bench");
    let engine = Engine::new(EngineConfig::default());
    let mut flip = false;
    group.bench_function("full-new-conditions/carrier-10k", |b| {
        b.iter(|| {
            flip = !flip;
            let next = if flip { &other } else { &policy };
            engine.publish(&source, next.clone()).expect("publishes")
        })
    });
    engine.publish(&source, policy.clone()).expect("publishes");
    group.bench_function("full-same-conditions/carrier-10k", |b| {
        b.iter(|| engine.publish(&source, policy.clone()).expect("publishes"))
    });
    // Retune one rate rule by a partial update: the matcher is reused, cells carried over.
    engine.publish(&source, policy.clone()).expect("publishes");
    let template = policy
        .rules()
        .and_then(|rules| {
            rules
                .iter()
                .find(|r| matches!(r.accept.limit, Limit::Rate(_)))
        })
        .map(|r| (**r).clone())
        .expect("a rate rule");
    let mut version = policy.version();
    group.bench_function("retune-one/carrier-10k", |b| {
        b.iter(|| {
            version += 1;
            let mut rule = template.clone();
            rule.accept.limit =
                Limit::Rate(Rate::new(f64::from(version % 1000 + 1)).expect("rate"));
            let update = Ruleset::partial(version, vec![Change::Put(rule)]).expect("partial");
            engine.apply(&source, update).expect("applies")
        })
    });
    group.finish();
}

fn bench_prsm(c: &mut Criterion) {
    use loadctl::prsm::{
        Class, DetectorConfig, RetransmissionDetector, Scheduler, SchedulerConfig,
    };
    let mut group = c.benchmark_group("prsm");
    group.throughput(Throughput::Elements(1));
    // 100,000 distinct INVITEs, as a server receives them.
    let messages: Vec<Vec<u8>> = (0..100_000u32)
        .map(|i| {
            format!(
                "INVITE sip:+1555{i:07}@carrier.example SIP/2.0\r\n\
                 Via: SIP/2.0/UDP 192.0.2.{}:5060;branch=z9hG4bK{i:x}a7c;rport\r\n\
                 Max-Forwards: 70\r\n\
                 From: <sip:alice@a.example>;tag={i:x}\r\n\
                 To: <sip:+1555{i:07}@carrier.example>\r\n\
                 Call-ID: {i:x}-4d2c@a.example\r\nCSeq: 1 INVITE\r\n\
                 Contact: <sip:alice@192.0.2.1>\r\nContent-Length: 0\r\n\r\n",
                i % 250
            )
            .into_bytes()
        })
        .collect();
    group.bench_function("scan", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % messages.len();
            loadctl::sip::scan(black_box(&messages[i])).map(|r| r.cseq)
        })
    });
    let detector = RetransmissionDetector::new(DetectorConfig::default()).expect("config");
    let scanned: Vec<_> = messages
        .iter()
        .map(|m| loadctl::sip::scan(m).expect("scans"))
        .collect();
    group.bench_function("key", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % scanned.len();
            detector
                .key(black_box(&scanned[i]))
                .map(|k| k.fingerprint())
        })
    });
    let keys: Vec<_> = scanned
        .iter()
        .map(|r| detector.key(r).expect("key"))
        .collect();
    // Simulated time: 100,000 new transactions every 50 ms of the 32 s lifetime would overflow
    // the table, so time steps 20 µs per message (50,000 new transactions/s): each key is new
    // again after its 64·T1 expired — a first copy on every call.
    let mut now = 0u64;
    let mut i = 0;
    group.bench_function("observe-original", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            now += 400_000;
            detector.observe(black_box(keys[i]), now)
        })
    });
    group.bench_function("observe-retransmission", |b| {
        let key = keys[0];
        detector.observe(key, now);
        b.iter(|| detector.observe(black_box(key), now))
    });
    let mut map: HashMap<u64, u64> = HashMap::with_capacity(1 << 18);
    let mut i = 0;
    group.bench_function("hashmap-lookup-insert", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            now += 400_000;
            let k = keys[i].fingerprint();
            match map.get(&k) {
                Some(&e) if e > now => Class::Retransmission,
                _ => {
                    map.insert(k, now + 32_000_000_000);
                    Class::Original
                }
            }
        })
    });
    let scheduler = Scheduler::new(SchedulerConfig::priority(1024, 1024)).expect("config");
    group.bench_function("scheduler-push-pop", |b| {
        b.iter(|| {
            let _ = scheduler.push(black_box(7usize), Class::Original);
            scheduler.pop()
        })
    });
    let queue = std::sync::Mutex::new(std::collections::VecDeque::with_capacity(1024));
    group.bench_function("mutex-vecdeque-push-pop", |b| {
        b.iter(|| {
            let mut q = queue.lock().expect("not poisoned");
            q.push_back(black_box(7usize));
            q.pop_front()
        })
    });
    group.finish();
}

criterion_group!(
    micro,
    bench_trie,
    bench_canonicalise,
    bench_limiter,
    bench_publish,
    bench_prsm
);
criterion_main!(micro);
