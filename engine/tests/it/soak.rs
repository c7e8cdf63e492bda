//! Soak: real threads classify for a bounded time while policies are published, partially
//! updated, and a second source is withdrawn and brought back; window tickets are completed
//! out of order and on the other worker. Memory stays flat, the counters add up, no window is
//! ever oversold and no ticket is lost.
//!
//! Ignored by `cargo test` (it runs for a minute); `make soak` runs it in release mode with
//! `SOAK_SECONDS` (default 60; longer by setting it).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{doc, invite};
use loadctl::policy::Ruleset;
use loadctl::runtime::*;

const WIN_A: i64 = 8;
const WIN_B: i64 = 4;

fn rule(id: &str, prefix: &str, limit: &str) -> String {
    format!(
        "<rule id=\"{id}\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"{prefix}\"/></lc:to></lc:sip></lc:call-identity></conditions>\
         <actions><lc:accept>{limit}</lc:accept></actions></rule>"
    )
}

fn source_a(version: u32) -> Ruleset {
    let mut rules = rule("win", "+1-800", &format!("<lc:win>{WIN_A}</lc:win>"));
    rules.push_str(&rule("rate", "+1-900", "<lc:rate>2000</lc:rate>"));
    for i in 0..200 {
        rules.push_str(&rule(
            &format!("p{i}"),
            &format!("+44-{i:03}"),
            "<lc:percent>50</lc:percent>",
        ));
    }
    doc(version, "full", &rules)
}

fn source_b(version: u32) -> Ruleset {
    doc(
        version,
        "full",
        &rule("bwin", "+1-700", &format!("<lc:win>{WIN_B}</lc:win>")),
    )
}

/// Resident set size in bytes (Linux `/proc/self/statm`).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("statm resident field");
    pages * 4096
}

/// Outstanding tickets per window rule, checked against the window on every admission.
#[derive(Default)]
struct Outstanding {
    a: AtomicI64,
    b: AtomicI64,
}

impl Outstanding {
    fn counter(&self, rule: &str) -> Option<(&AtomicI64, i64)> {
        match rule {
            "win" => Some((&self.a, WIN_A)),
            "bwin" => Some((&self.b, WIN_B)),
            _ => None,
        }
    }
}

#[test]
#[ignore = "a bounded soak (SOAK_SECONDS, default 60); run by `make soak`"]
fn soak_classify_publish_withdraw_and_complete_out_of_order() {
    let seconds: u64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let run_for = Duration::from_secs(seconds);
    let engine = Engine::new(EngineConfig::default().with_shards(2));
    let (a, b) = (Source::local("a"), Source::local("b"));
    engine.publish(&a, source_a(0)).expect("a");
    engine.publish(&b, source_b(0)).expect("b");

    let done = Arc::new(AtomicBool::new(false));
    let outstanding = Arc::new(Outstanding::default());
    // Each worker sends some of its tickets to the other one to complete.
    let (to_0, from_1) = mpsc::channel::<(Ticket, &'static str)>();
    let (to_1, from_0) = mpsc::channel::<(Ticket, &'static str)>();
    let channels = vec![(to_1, from_1), (to_0, from_0)];
    let workers: Vec<_> = channels
        .into_iter()
        .enumerate()
        .map(|(w, (to_other, inbox))| {
            let engine = engine.clone();
            let done = Arc::clone(&done);
            let outstanding = Arc::clone(&outstanding);
            std::thread::spawn(move || {
                let mut shard = engine.attach();
                let numbers = [
                    "<tel:+1-800-555-0000>",
                    "<tel:+1-900-555-0000>",
                    "<tel:+1-700-555-0000>",
                    "<tel:+44-017-1234>",
                    "<tel:+33-1234>",
                ];
                let mut held: VecDeque<(Ticket, &'static str)> = VecDeque::new();
                let complete = |shard: &mut Shard, (t, rule): (Ticket, &'static str)| {
                    if let Some((c, _)) = outstanding.counter(rule) {
                        c.fetch_sub(1, Ordering::AcqRel);
                    }
                    shard.complete(t);
                };
                let mut n = 0u64;
                let mut sent_open = true;
                while !done.load(Ordering::Acquire) {
                    let to = numbers[(n as usize * 7 + w) % numbers.len()];
                    let d = shard.classify(&invite(to));
                    let rule: Option<&'static str> = match d.rule.map(|r| r.id().as_str()) {
                        Some("win") => Some("win"),
                        Some("bwin") => Some("bwin"),
                        _ => None,
                    };
                    if let Some(t) = d.ticket {
                        let rule = rule.expect("tickets come from window rules");
                        let (c, w) = outstanding.counter(rule).expect("window rule");
                        let out = c.fetch_add(1, Ordering::AcqRel) + 1;
                        assert!(out <= w, "{out} slots of {rule} (window {w}) outstanding");
                        held.push_back((t, rule));
                    }
                    // Out of order: sometimes the newest, sometimes the oldest, sometimes one
                    // handed to the other worker.
                    match n % 5 {
                        0 => {
                            if let Some(t) = held.pop_back() {
                                complete(&mut shard, t);
                            }
                        }
                        1 | 2 if held.len() > 3 => {
                            if let Some(t) = held.pop_front() {
                                complete(&mut shard, t);
                            }
                        }
                        3 if sent_open => {
                            if let Some(t) = held.pop_front()
                                && let Err(mpsc::SendError(t)) = to_other.send(t)
                            {
                                sent_open = false;
                                complete(&mut shard, t);
                            }
                        }
                        _ => {}
                    }
                    while let Ok(t) = inbox.try_recv() {
                        complete(&mut shard, t);
                    }
                    n += 1;
                }
                drop(to_other);
                for t in held.drain(..) {
                    complete(&mut shard, t);
                }
                (shard, inbox, n)
            })
        })
        .collect();

    // The publisher: partial updates to `a` all the time, a full republish now and then, and
    // `b` withdrawn and brought back.
    let start = Instant::now();
    let (mut va, mut vb, mut b_published) = (0u32, 0u32, true);
    let mut samples: Vec<(Duration, u64)> = Vec::new();
    let mut i = 0u64;
    while start.elapsed() < run_for {
        i += 1;
        va += 1;
        if i.is_multiple_of(100) {
            engine.publish(&a, source_a(va)).expect("full a");
        } else {
            let changed = rule(
                &format!("p{}", i % 200),
                &format!("+44-{:03}", i % 200),
                &format!("<lc:percent>{}</lc:percent>", i % 100),
            );
            engine
                .apply(&a, doc(va, "partial", &changed))
                .expect("partial a");
        }
        if i.is_multiple_of(50) {
            if b_published {
                engine.withdraw("b").expect("withdraw b");
            } else {
                vb += 1;
                engine.publish(&b, source_b(vb)).expect("b again");
            }
            b_published = !b_published;
        }
        if samples
            .last()
            .is_none_or(|(t, _)| start.elapsed() - *t >= Duration::from_secs(1))
        {
            samples.push((start.elapsed(), rss()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    done.store(true, Ordering::Release);
    let mut total = 0;
    let mut leftovers = Vec::new();
    for h in workers {
        let (shard, inbox, n) = h.join().expect("no panic");
        total += n;
        leftovers.push((shard, inbox));
    }
    // Tickets still in flight between the workers.
    for (shard, inbox) in &mut leftovers {
        while let Ok((t, rule)) = inbox.try_recv() {
            if let Some((c, _)) = outstanding.counter(rule) {
                c.fetch_sub(1, Ordering::AcqRel);
            }
            shard.complete(t);
        }
    }
    drop(leftovers);

    // Counters add up.
    let stats = engine.stats();
    assert_eq!(stats.total(), total, "{stats:?}");
    assert_eq!(outstanding.a.load(Ordering::Acquire), 0);
    assert_eq!(outstanding.b.load(Ordering::Acquire), 0);
    // No ticket lost: the window cells of the current snapshot are whole again.
    let snap = engine.snapshot();
    for (id, w) in [("win", WIN_A), ("bwin", WIN_B)] {
        if let Some(i) = snap
            .policy()
            .rules()
            .iter()
            .position(|r| r.id().as_str() == id)
        {
            assert_eq!(snap.cell(i).map(|c| c.state()), Some(w as u64), "{id}");
        }
    }
    // Memory stays flat: after a warm-up quarter, the resident set grows by less than 16 MiB.
    let quarter = run_for / 4;
    let warm = samples
        .iter()
        .filter(|(t, _)| *t <= quarter)
        .map(|s| s.1)
        .max()
        .expect("samples in the first quarter");
    let late = samples.iter().map(|s| s.1).max().expect("samples");
    eprintln!(
        "soak: {seconds} s, {total} requests, {i} publishes, RSS after warm-up {:.1} MiB, max {:.1} MiB",
        warm as f64 / 1048576.0,
        late as f64 / 1048576.0
    );
    assert!(
        late < warm + 16 * 1024 * 1024,
        "RSS grew from {warm} to {late} bytes: {samples:?}"
    );
}
