//! Real threads: classifiers run while another thread publishes 1,000 new snapshots. No
//! panics, limits hold, and the counters add up to the requests classified.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::{doc, invite, to_rule};
use loadctl::runtime::*;

fn rule(id: &str, prefix: &str, accept: &str) -> String {
    to_rule(id, prefix, accept)
}

const WINDOW: u32 = 16;
const RATE: f64 = 2_000.0;

fn base_rules() -> String {
    let mut rules = rule(
        "rate",
        "+1-900",
        &format!("<lc:accept><lc:rate>{RATE}</lc:rate></lc:accept>"),
    );
    rules.push_str(&rule(
        "win",
        "+1-800",
        &format!("<lc:accept><lc:win>{WINDOW}</lc:win></lc:accept>"),
    ));
    for i in 0..200 {
        rules.push_str(&rule(
            &format!("r{i}"),
            &format!("+44-{:03}", i),
            "<lc:accept><lc:percent>50</lc:percent></lc:accept>",
        ));
    }
    rules
}

#[test]
fn classify_while_publishing_a_thousand_times() {
    let engine = Engine::new(EngineConfig::default().with_shards(2));
    let src = Source::local("notifier");
    engine
        .publish(&src, doc(0, "full", &base_rules()))
        .expect("publish");
    let done = Arc::new(AtomicBool::new(false));
    let window_out = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let engine = engine.clone();
            let done = Arc::clone(&done);
            let window_out = Arc::clone(&window_out);
            std::thread::spawn(move || {
                let mut shard = engine.attach();
                let numbers = [
                    "<tel:+1-900-555-0000>",
                    "<tel:+1-800-555-0000>",
                    "<tel:+44-017-1234>",
                    "<tel:+33-1234>",
                ];
                let mut held: Vec<Ticket> = Vec::new();
                let (mut n, mut rate_admitted) = (0u64, 0u64);
                while !done.load(Ordering::Acquire) || n < 10_000 {
                    let to = numbers[(n as usize + w) % numbers.len()];
                    let req = Request {
                        method: if n % 17 == 0 { "BYE" } else { "INVITE" },
                        ..invite(to)
                    };
                    let d = shard.classify(&req);
                    if d.verdict == Verdict::Accept
                        && d.rule.is_some_and(|r| r.id().as_str() == "rate")
                    {
                        rate_admitted += 1;
                    }
                    if let Some(t) = d.ticket {
                        let out = window_out.fetch_add(1, Ordering::AcqRel) + 1;
                        assert!(out <= u64::from(WINDOW), "{out} window slots outstanding");
                        held.push(t);
                    }
                    if held.len() > 4 || (n % 3 == 0 && !held.is_empty()) {
                        window_out.fetch_sub(1, Ordering::AcqRel);
                        shard.complete(held.remove(0));
                    }
                    n += 1;
                }
                for t in held.drain(..) {
                    window_out.fetch_sub(1, Ordering::AcqRel);
                    shard.complete(t);
                }
                (n, rate_admitted)
            })
        })
        .collect();
    // 1,000 publishes: full republishes, partial updates touching other rules, and a rate
    // change that starts the window rule afresh now and then.
    let mut version = 0u32;
    for i in 0..1_000u32 {
        version += 1;
        if i % 10 == 0 {
            engine
                .publish(&src, doc(version, "full", &base_rules()))
                .expect("full");
        } else {
            let changed = rule(
                &format!("r{}", i % 200),
                &format!("+44-{:03}", i % 200),
                &format!(
                    "<lc:accept><lc:percent>{}</lc:percent></lc:accept>",
                    i % 100
                ),
            );
            engine
                .apply(&src, doc(version, "partial", &changed))
                .expect("partial");
        }
    }
    done.store(true, Ordering::Release);
    let results: Vec<(u64, u64)> = workers
        .into_iter()
        .map(|h| h.join().expect("no panic"))
        .collect();
    let elapsed = start.elapsed();
    let total: u64 = results.iter().map(|r| r.0).sum();
    let rate_admitted: u64 = results.iter().map(|r| r.1).sum();
    assert_eq!(engine.generation(), 1_001);
    // Counters add up: every request is exempt, unmatched or matched by some rule.
    let stats = engine.stats();
    assert_eq!(stats.total(), total, "{stats:?}");
    // The rate limit held over the run: the GCRA bound r·(t + τ) + 1, where the engine's
    // coarse clock may run up to a tick (≤ 10 ms) ahead of this test's precise one.
    let bound = RATE * (elapsed.as_secs_f64() + 0.1 + 0.01) + 1.0;
    assert!(
        (rate_admitted as f64) <= bound,
        "{rate_admitted} admitted in {elapsed:?}, bound {bound}"
    );
    // Every window slot came back.
    let snap = engine.snapshot();
    let win = snap
        .policy()
        .rules()
        .iter()
        .position(|r| r.id().as_str() == "win")
        .expect("win rule");
    assert_eq!(snap.cell(win).map(|c| c.state()), Some(u64::from(WINDOW)));
    assert!(elapsed < Duration::from_secs(120));
}
