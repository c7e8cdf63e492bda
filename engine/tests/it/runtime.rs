//! The multi-core runtime in simulated time: 64 virtual shards driven from one thread, so
//! many-core behaviour is checked deterministically on a small machine.

use crate::common::{doc, invite_to, to_rule};
use loadctl::policy::{Limits, Uri};
use loadctl::runtime::*;

const SECOND: u64 = 1_000_000_000;
const SHARDS: usize = 64;

fn rule(id: &str, prefix: &str, accept: &str) -> String {
    to_rule(id, prefix, accept)
}

fn engine(config: EngineConfig) -> Engine {
    Engine::new(config.with_shards(SHARDS))
}

fn shards(engine: &Engine) -> Vec<Shard> {
    (0..SHARDS).map(|_| engine.attach()).collect()
}

fn call(to: &str, monotonic_ns: u64) -> Request<'_> {
    invite_to(to, Transport::Tcp, monotonic_ns)
}

/// Offers 3r for 10 s, choosing the shard with `pick(i, t)`; returns admissions.
fn offer_rate(rate: f64, pick: impl Fn(u64, u64) -> usize) -> (u64, u64) {
    let e = engine(EngineConfig::default());
    e.publish(
        &Source::local("n"),
        doc(
            0,
            "full",
            &rule(
                "r",
                "+1",
                &format!("<lc:accept><lc:rate>{rate}</lc:rate></lc:accept>"),
            ),
        ),
    )
    .expect("publish");
    let mut s = shards(&e);
    let gap = (1e9 / (3.0 * rate)) as u64;
    let mut admitted = 0;
    let mut offered = 0;
    let mut t = 0;
    while t < 10 * SECOND {
        let shard = &mut s[pick(offered, t) % SHARDS];
        if shard.classify(&call("<tel:+15550000>", t)).verdict == Verdict::Accept {
            admitted += 1;
        }
        offered += 1;
        t += gap;
    }
    let writes = s.iter().map(Shard::shared_writes).sum();
    (admitted, writes)
}

fn assert_rate(rate: f64, admitted: u64, what: &str) {
    let burst = (rate * 0.1).ceil().max(1.0);
    let expected = rate * 10.0 + burst;
    let got = admitted as f64;
    assert!(
        (got - expected).abs() <= expected * 0.01,
        "{what}: rate {rate}: admitted {got}, expected {expected} ± 1 %"
    );
}

#[test]
fn rate_is_global_under_uniform_load_over_64_shards() {
    for rate in [50.0, 1_000.0, 20_000.0] {
        let (admitted, _) = offer_rate(rate, |i, _| i as usize);
        assert_rate(rate, admitted, "uniform");
    }
}

#[test]
fn rate_is_global_with_all_load_on_one_shard() {
    for rate in [50.0, 1_000.0, 20_000.0] {
        let (admitted, writes) = offer_rate(rate, |_, _| 7);
        assert_rate(rate, admitted, "one shard");
        // Leases batch ⌊r · 0.5 ms⌋ tokens: one shard spends whole leases.
        let lease = ((rate / 2000.0).floor() as u64).max(1);
        assert!(
            writes <= admitted / lease + 2,
            "rate {rate}: {writes} writes for {admitted} admissions"
        );
    }
}

#[test]
fn rate_is_global_when_load_moves_between_shards_every_100ms() {
    for rate in [50.0, 1_000.0, 20_000.0] {
        let (admitted, _) = offer_rate(rate, |_, t| (t / (SECOND / 10)) as usize * 13);
        assert_rate(rate, admitted, "moving");
    }
}

#[test]
fn window_is_global_and_loses_no_slot() {
    let w = 40u32;
    let e = engine(EngineConfig::default());
    e.publish(
        &Source::local("n"),
        doc(
            0,
            "full",
            &rule(
                "w",
                "+1",
                &format!("<lc:accept><lc:win>{w}</lc:win></lc:accept>"),
            ),
        ),
    )
    .expect("publish");
    let mut s = shards(&e);
    // (completion time, shard, ticket), released in time order; some on another shard.
    let mut pending: Vec<(u64, usize, Ticket)> = Vec::new();
    let mut state = 0x9e37_79b9_u64;
    let mut max_out = 0usize;
    for i in 0..20_000u64 {
        let t = i * 100_000;
        pending.sort_by_key(|p| std::cmp::Reverse(p.0));
        while pending.last().is_some_and(|p| p.0 <= t) {
            let (_, shard, ticket) = pending.pop().expect("due");
            s[shard].complete(ticket);
        }
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let shard = (state % SHARDS as u64) as usize;
        let d = s[shard].classify(&call("<tel:+1555>", t));
        if let Some(ticket) = d.ticket {
            let hold = 1_000_000 + state % 20_000_000;
            let completer = if state.is_multiple_of(5) {
                (shard + 1) % SHARDS
            } else {
                shard
            };
            pending.push((t + hold, completer, ticket));
        }
        max_out = max_out.max(pending.len());
        assert!(
            pending.len() <= w as usize,
            "{} outstanding > {w}",
            pending.len()
        );
    }
    assert_eq!(
        max_out, w as usize,
        "the window was saturated at some point"
    );
    for (_, shard, ticket) in pending.drain(..) {
        s[shard].complete(ticket);
    }
    // No slot lost: w new requests are admitted, spread over every shard.
    let mut admitted = Vec::new();
    for i in 0..(2 * w as usize) {
        let d = s[i % SHARDS].classify(&call("<tel:+1555>", 3 * SECOND));
        if let Some(t) = d.ticket {
            admitted.push(t);
        }
    }
    assert_eq!(admitted.len(), w as usize);
}

#[test]
fn percent_aggregate_is_exact_over_shards() {
    let e = engine(EngineConfig::default());
    e.publish(
        &Source::local("n"),
        doc(
            0,
            "full",
            &rule(
                "p",
                "+1",
                "<lc:accept><lc:percent>37.5</lc:percent></lc:accept>",
            ),
        ),
    )
    .expect("publish");
    let mut s = shards(&e);
    let mut state = 12345u64;
    let mut accepted = 0u64;
    let n = 100_000u64;
    for i in 0..n {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let shard = (state >> 33) as usize % SHARDS;
        if s[shard].classify(&call("<tel:+1555>", i)).verdict == Verdict::Accept {
            accepted += 1;
        }
    }
    let expected = 0.375 * n as f64;
    assert!(
        (accepted as f64 - expected).abs() <= expected * 0.01,
        "{accepted} vs {expected}"
    );
    // Each shard's gate is exact to one request.
    assert!((accepted as f64 - expected).abs() <= SHARDS as f64);
}

// ------------------------------------------------------------------ publishing

#[test]
fn republishing_the_same_rules_keeps_limiter_state() {
    // A NOTIFY every 100 ms with an unchanged rule must not reset the limit.
    let e = engine(EngineConfig::default());
    let rules = rule("r", "+1", "<lc:accept><lc:rate>100</lc:rate></lc:accept>");
    let src = Source::local("notifier");
    e.publish(&src, doc(0, "full", &rules)).expect("publish");
    let mut s = shards(&e);
    let mut admitted = 0u64;
    let mut version = 0;
    for i in 0..30_000u64 {
        let t = i * SECOND / 3_000;
        if i % 300 == 0 && i > 0 {
            version += 1;
            e.publish(&src, doc(version, "full", &rules))
                .expect("republish");
        }
        if s[i as usize % SHARDS]
            .classify(&call("<tel:+1555>", t))
            .verdict
            == Verdict::Accept
        {
            admitted += 1;
        }
    }
    assert_eq!(e.generation(), 100);
    assert_rate(100.0, admitted, "republished");
    // Counters carried over too: one row, all requests counted.
    let stats = e.stats();
    assert_eq!(stats.rules.len(), 1);
    assert_eq!(stats.rules[0].stats.matched, 30_000);
    assert_eq!(stats.rules[0].stats.accepted, admitted);
}

/// 3r offered for 2 s to a rule of r = 100/s in `engines` (round-robin over one shard of each),
/// while every 250 ms `withdraw_and_return` takes the rule out of every engine and brings it
/// back; the admission times.
fn offer_while_withdrawn_and_returned(
    engines: &[Engine],
    shards: &mut [Shard],
    mut withdraw_and_return: impl FnMut(u64, &mut [Shard]),
) -> Vec<u64> {
    assert_eq!(engines.len(), shards.len());
    let mut admitted = Vec::new();
    for i in 0..600u64 {
        let t = i * SECOND / 300;
        if i % 75 == 74 {
            withdraw_and_return(t, shards);
        }
        let k = i as usize % shards.len();
        if shards[k].classify(&call("<tel:+1555>", t)).verdict == Verdict::Accept {
            admitted.push(t);
        }
    }
    admitted
}

/// The GCRA's bound for one limiter of 100/s over those 2 s: r·(W + τ) + 1 in any window W
/// (τ = 100 ms, the default burst), so 211 in the 2 s and 111 in any second; a limiter that
/// started again after a withdrawal hands out a second burst and breaks it.
fn assert_one_limiter_at_100_per_s(admitted: &[u64]) {
    assert!(
        admitted.len() <= 211,
        "{} admitted in 2 s at 100/s",
        admitted.len()
    );
    let most = (0..admitted.len())
        .map(|i| {
            admitted[i..]
                .iter()
                .take_while(|&&t| t < admitted[i] + SECOND)
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(most <= 111, "{most} admitted in one second at 100/s");
}

/// A policy withdrawn (a `terminated` NOTIFY, RFC 7200 §4.8) and published again with the same
/// rule (the re-subscription's first NOTIFY) continues the rule's limiter (see
/// [`assert_one_limiter_at_100_per_s`]). A rule with another rate is another limit and starts
/// afresh.
#[test]
fn a_withdrawn_rate_rule_that_returns_keeps_its_limiter() {
    let e = engine(EngineConfig::default());
    let rules = rule("r", "+1", "<lc:accept><lc:rate>100</lc:rate></lc:accept>");
    let src = Source::local("sip:notifier@example.net");
    e.publish(&src, doc(0, "full", &rules)).expect("publish");
    let mut s = vec![e.attach()];
    let admitted = offer_while_withdrawn_and_returned(std::slice::from_ref(&e), &mut s, |_, _| {
        e.withdraw(&src.name).expect("withdraw");
        e.publish(&src, doc(0, "full", &rules))
            .expect("publish again");
    });
    assert_one_limiter_at_100_per_s(&admitted);
    // Another rate for the same id is another limit: it starts with its own burst, b = ⌈r·τ⌉ =
    // 5 at one instant for 50/s (the saturated 100/s cell would admit at most 1).
    let t = 2 * SECOND;
    e.withdraw(&src.name).expect("withdraw");
    let other = rule("r", "+1", "<lc:accept><lc:rate>50</lc:rate></lc:accept>");
    e.publish(&src, doc(0, "full", &other))
        .expect("publish another rate");
    let burst = (0..6)
        .filter(|_| s[0].classify(&call("<tel:+1555>", t)).verdict == Verdict::Accept)
        .count();
    assert_eq!(burst, 5, "a new limit's first burst");
}

/// The same on a cell table several engines share (processes: the Kamailio module), when
/// every engine has let the rule's cell go before the rule returns (the workers went on
/// classifying other calls and another source published in between).
#[test]
fn a_withdrawn_rate_rule_that_returns_on_a_shared_table_keeps_its_limiter() {
    let region: Vec<RuleCell> = (0..=16).map(|_| RuleCell::unused()).collect();
    let table = CellTable::format(Box::leak(region.into_boxed_slice())).expect("a table");
    let rules = rule("r", "+1", "<lc:accept><lc:rate>100</lc:rate></lc:accept>");
    let other = rule("o", "+2", "<lc:accept><lc:rate>10</lc:rate></lc:accept>");
    let (n, m) = (Source::local("n"), Source::local("m"));
    let es: Vec<Engine> = (0..4)
        .map(|_| {
            let e = Engine::with_cell_table(EngineConfig::default(), table);
            e.publish(&n, doc(0, "full", &rules)).expect("publish");
            e
        })
        .collect();
    let mut s: Vec<Shard> = es.iter().map(Engine::attach).collect();
    let admitted = offer_while_withdrawn_and_returned(&es, &mut s, |t, shards| {
        for e in &es {
            e.withdraw(&n.name).expect("withdraw");
        }
        for s in shards.iter_mut() {
            let _ = s.classify(&call("<tel:+3555>", t));
        }
        for e in &es {
            e.publish(&m, doc(0, "full", &other)).expect("publish");
        }
        assert_eq!(table.in_use(), 1, "only the other source's rule is in use");
        for e in &es {
            e.publish(&n, doc(0, "full", &rules))
                .expect("publish again");
        }
    });
    assert_one_limiter_at_100_per_s(&admitted);
}

/// The cells of withdrawn rate rules are kept for a bounded number of rules (4,096), and the
/// oldest go first: a notifier that changed rates thousands of times (a cell parked per old
/// rate) does not push out the cells of rules withdrawn after them.
#[test]
fn the_most_recently_withdrawn_rules_keep_their_limiters() {
    let e = engine(EngineConfig::default());
    let mut s = shards(&e);
    let busy = Source::local("sip:allocator@example.net");
    let park = |from: u32, n: u32| {
        for k in from..from + n {
            let r = rule(
                "share",
                "+2",
                &format!("<lc:accept><lc:rate>{k}</lc:rate></lc:accept>"),
            );
            e.publish(&busy, doc(0, "full", &r)).expect("publish");
        }
    };
    park(10, 5_000);
    // 100 rules, each burst spent at t = 0 (b = ⌈100 · 0.1⌉ = 10 at one instant), withdrawn.
    let src = Source::local("sip:notifier@example.net");
    let rules: String = (0..100)
        .map(|k| {
            rule(
                &format!("r{k}"),
                &format!("+1{k:03}"),
                "<lc:accept><lc:rate>100</lc:rate></lc:accept>",
            )
        })
        .collect();
    e.publish(&src, doc(0, "full", &rules)).expect("publish");
    for k in 0..100 {
        let to = format!("<tel:+1{k:03}555>");
        let spent = (0..20)
            .filter(|_| s[0].classify(&call(&to, 0)).verdict == Verdict::Accept)
            .count();
        assert_eq!(spent, 10, "rule {k}");
    }
    e.withdraw(&src.name).expect("withdraw");
    // 3,996 more parked after them: with 4,096 kept, what goes is the 5,000 parked before.
    park(10_000, 3_996);
    e.publish(&src, doc(0, "full", &rules))
        .expect("publish again");
    let fresh = (0..100)
        .filter(|k| {
            s[0].classify(&call(&format!("<tel:+1{k:03}555>"), 0))
                .verdict
                == Verdict::Accept
        })
        .count();
    assert_eq!(fresh, 0, "rules that came back with a fresh limiter");
}

/// A rate rule's tolerance is min(τ, b·T − 1) less the look-ahead a lease may reach, and the shard
/// must look ahead by that same amount. A lease period past `u64` nanoseconds (584 years) is
/// read as `LimitParams` reads it (`as_nanos() as u64`, here 1 ms): a shard that derived
/// its look-ahead another way (a saturating conversion) would lease 65,536 tokens for one
/// burst, move the shared TAT 65 s ahead, and leave the other shards nothing a second later.
#[test]
fn a_shards_look_ahead_is_the_one_the_tolerance_was_reduced_by() {
    let lease_period =
        std::time::Duration::from_nanos(u64::MAX) + std::time::Duration::from_nanos(1_000_001);
    let e = Engine::new(
        EngineConfig::default()
            .with_shards(2)
            .with_lease_period(lease_period),
    );
    e.publish(
        &Source::local("n"),
        doc(
            0,
            "full",
            &rule("r", "+1", "<lc:accept><lc:rate>1000</lc:rate></lc:accept>"),
        ),
    )
    .expect("publish");
    let (mut a, mut b) = (e.attach(), e.attach());
    let burst = |s: &mut Shard, t: u64| {
        (0..200)
            .filter(|_| s.classify(&call("<tel:+1555>", t)).verdict == Verdict::Accept)
            .count()
    };
    let first = burst(&mut a, SECOND);
    let second = burst(&mut b, 2 * SECOND);
    // τ = 100 ms at 1000/s: a burst of 100, less the one token the look-ahead keeps leased.
    assert_eq!(first, 99);
    assert_eq!(
        second, first,
        "a second later the other shard gets the full burst"
    );
}

#[test]
fn a_changed_action_starts_fresh() {
    let e = engine(EngineConfig::default());
    let src = Source::local("n");
    e.publish(
        &src,
        doc(
            0,
            "full",
            &rule("r", "+1", "<lc:accept><lc:rate>10</lc:rate></lc:accept>"),
        ),
    )
    .expect("publish");
    let mut s = e.attach();
    let admitted = |s: &mut Shard, t: u64| {
        (0..100)
            .filter(|_| s.classify(&call("<tel:+1555>", t)).verdict == Verdict::Accept)
            .count()
    };
    assert_eq!(admitted(&mut s, SECOND), 1);
    // Same action: no new burst.
    e.publish(
        &src,
        doc(
            1,
            "full",
            &rule("r", "+1", "<lc:accept><lc:rate>10</lc:rate></lc:accept>"),
        ),
    )
    .expect("publish");
    assert_eq!(admitted(&mut s, SECOND), 0);
    // New rate: fresh limiter, burst of ⌈20 · 0.1⌉ = 2.
    e.publish(
        &src,
        doc(
            2,
            "full",
            &rule("r", "+1", "<lc:accept><lc:rate>20</lc:rate></lc:accept>"),
        ),
    )
    .expect("publish");
    assert_eq!(admitted(&mut s, SECOND), 2);
    // A new alt-action is a new action too.
    e.publish(
        &src,
        doc(
            3,
            "full",
            &rule(
                "r",
                "+1",
                "<lc:accept alt-action=\"drop\"><lc:rate>20</lc:rate></lc:accept>",
            ),
        ),
    )
    .expect("publish");
    assert_eq!(admitted(&mut s, SECOND), 2);
}

#[test]
fn window_tickets_from_an_old_snapshot_are_released() {
    let e = engine(EngineConfig::default());
    let src = Source::local("n");
    let win = rule("w", "+1", "<lc:accept><lc:win>3</lc:win></lc:accept>");
    let other = rule("o", "+44", "<lc:accept><lc:rate>5</lc:rate></lc:accept>");
    e.publish(&src, doc(0, "full", &format!("{win}{other}")))
        .expect("publish");
    let mut a = e.attach();
    let mut b = e.attach();
    let t1 = a.classify(&call("<tel:+1555>", 0)).ticket.expect("slot");
    let t2 = b.classify(&call("<tel:+1555>", 0)).ticket.expect("slot");
    let t3 = a.classify(&call("<tel:+1555>", 0)).ticket.expect("slot");
    assert!(b.classify(&call("<tel:+1555>", 0)).ticket.is_none());
    // Another rule changes: the window rule keeps its key and cell.
    e.publish(
        &src,
        doc(
            1,
            "full",
            &format!(
                "{win}{}",
                rule("o", "+44", "<lc:accept><lc:rate>6</lc:rate></lc:accept>")
            ),
        ),
    )
    .expect("publish");
    a.complete(t1);
    assert!(b.classify(&call("<tel:+1555>", 0)).ticket.is_some_and(|t| {
        b.complete(t);
        true
    }));
    // The window rule is removed while t2 and t3 are out: they release into its old cell.
    e.publish(&src, doc(2, "full", &other)).expect("publish");
    assert!(a.classify(&call("<tel:+1555>", 0)).rule.is_none());
    b.complete(t2);
    a.complete(t3);
    // Put back (same key): a fresh cell, all 3 slots.
    e.publish(&src, doc(3, "full", &format!("{win}{other}")))
        .expect("publish");
    let got = (0..5)
        .filter_map(|_| a.classify(&call("<tel:+1555>", 0)).ticket)
        .count();
    assert_eq!(got, 3);
}

#[test]
fn removed_window_rule_cell_gets_its_slots_back() {
    let e = engine(EngineConfig::default());
    let src = Source::local("n");
    e.publish(
        &src,
        doc(
            0,
            "full",
            &rule("w", "+1", "<lc:accept><lc:win>2</lc:win></lc:accept>"),
        ),
    )
    .expect("publish");
    let mut a = e.attach();
    let t = a.classify(&call("<tel:+1555>", 0)).ticket.expect("slot");
    let old = e.snapshot();
    e.publish(&src, doc(1, "full", "")).expect("publish");
    assert!(a.classify(&call("<tel:+1555>", 0)).rule.is_none());
    let cell_free = |s: &Snapshot| s.cell(0).map(|c| c.state());
    assert_eq!(cell_free(&old), Some(1));
    a.complete(t);
    assert_eq!(cell_free(&old), Some(2));
}

// ------------------------------------------------------------------ sources

#[test]
fn sources_are_kept_apart_ordered_scoped_and_withdrawn() {
    let e = engine(EngineConfig::default());
    // Scoping is explicit (RFC 7200 §5.3.3: the server "MAY still record the URI of the
    // load-filtering policy's originator as the <target-sip-entity> information").
    let east =
        Source::notifier(Uri::new("sip:east.example.com").expect("uri")).scoped_to_notifier();
    let west =
        Source::notifier(Uri::new("sip:west.example.com").expect("uri")).scoped_to_notifier();
    let local = Source::local("static");
    let reject = "<lc:accept><lc:rate>0</lc:rate></lc:accept>";
    e.publish(&east, doc(0, "full", &rule("a", "+1", reject)))
        .expect("east");
    e.publish(&west, doc(0, "full", &rule("a", "+1", reject)))
        .expect("west");
    e.publish(&local, doc(0, "full", &rule("s", "+1", reject)))
        .expect("local");
    let mut s = e.attach();
    let towards = |s: &mut Shard, target: Option<&str>| {
        let mut r = call("<tel:+1555>", 0);
        r.identities.target = target;
        let d = s.classify(&r);
        d.rule.map(|r| (r.source(), r.id().to_string()))
    };
    // Rules without a target are scoped to their notifier when asked; sources are tried in
    // the order they were first published.
    assert_eq!(
        towards(&mut s, Some("sip:east.example.com")),
        Some((0, "a".into()))
    );
    assert_eq!(
        towards(&mut s, Some("sip:west.example.com;transport=tcp")),
        Some((1, "a".into()))
    );
    assert_eq!(
        towards(&mut s, Some("sip:elsewhere.example.com")),
        Some((2, "s".into()))
    );
    assert_eq!(towards(&mut s, None), Some((2, "s".into())));
    let snap = e.snapshot();
    assert_eq!(&*snap.sources()[0], "sip:east.example.com");
    assert_eq!(snap.source_of(2), "static");
    // Withdrawing east removes exactly its rule; republishing a source keeps its place.
    e.withdraw("sip:east.example.com").expect("withdraw");
    assert_eq!(
        towards(&mut s, Some("sip:east.example.com")),
        Some((1, "s".into()))
    );
    e.publish(&west, doc(1, "full", &rule("b", "+1", reject)))
        .expect("west again");
    assert_eq!(
        towards(&mut s, Some("sip:west.example.com")),
        Some((0, "b".into()))
    );
    assert_eq!(
        e.withdraw("sip:nobody"),
        Err(PublishError::UnknownSource("sip:nobody".into()))
    );
    // The Source that published withdraws as its name does.
    assert!(e.source_policy(&west).is_some());
    e.withdraw(&west).expect("withdraw west by its Source");
    assert_eq!(e.source_policy(&west), None);
    assert_eq!(
        e.withdraw(&west),
        Err(PublishError::UnknownSource("sip:west.example.com".into()))
    );
}

/// RFC 7200 §5.3.3: recording the originator as the target is a MAY ("If the load-filtering
/// server receives a load-filtering policy that does not contain a <target-sip-entity>
/// element, it MAY still record the URI of the load-filtering policy's originator"). By default
/// loadctl does not: a notifier's rule without `target-sip-entity` applies whatever the
/// request's target, including none — the same at every layer.
#[test]
fn a_notifiers_rule_without_target_applies_whatever_the_target() {
    let e = engine(EngineConfig::default());
    let east = Source::notifier(Uri::new("sip:east.example.com").expect("uri"));
    assert_eq!(east.scope, None);
    let reject = "<lc:accept><lc:rate>0</lc:rate></lc:accept>";
    e.publish(&east, doc(0, "full", &rule("a", "+1", reject)))
        .expect("east");
    let mut s = e.attach();
    for target in [
        None,
        Some("sip:east.example.com"),
        Some("sip:elsewhere.example.com"),
    ] {
        let mut r = call("<tel:+1555>", 0);
        r.identities.target = target;
        let d = s.classify(&r);
        assert_eq!(
            (d.verdict, d.rule.map(|r| r.id().to_string())),
            (Verdict::Reject, Some("a".into())),
            "target {target:?}"
        );
    }
}

#[test]
fn partial_documents_merge_and_errors_change_nothing() {
    let e = engine(EngineConfig::default());
    let src = Source::local("n");
    let g1 = e
        .apply(
            &src,
            doc(
                5,
                "full",
                &format!(
                    "{}{}",
                    rule("a", "+1", "<accept><rate>1</rate></accept>"),
                    rule("b", "+44", "<accept><rate>2</rate></accept>")
                ),
            ),
        )
        .expect("full");
    assert_eq!(g1, 1);
    // A partial update replaces b, deletes a, adds c.
    let g2 = e
        .apply(
            &src,
            doc(
                6,
                "partial",
                &format!(
                    "<rule id=\"a\"><actions/></rule>{}{}",
                    rule("b", "+44", "<accept><rate>3</rate></accept>"),
                    rule("c", "+33", "<accept><win>1</win></accept>")
                ),
            ),
        )
        .expect("partial");
    assert_eq!(g2, 2);
    let ids: Vec<String> = e
        .snapshot()
        .policy()
        .rules()
        .iter()
        .map(|r| r.id().to_string())
        .collect();
    assert_eq!(ids, ["b", "c"]);
    // A version gap is refused and nothing changes.
    let err = e
        .apply(
            &src,
            doc(
                8,
                "partial",
                &rule("d", "+49", "<accept><rate>1</rate></accept>"),
            ),
        )
        .expect_err("gap");
    assert_eq!(
        err,
        PublishError::Merge(loadctl::policy::MergeError::VersionGap {
            expected: 7,
            got: 8
        })
    );
    assert_eq!(e.generation(), 2);
    assert_eq!(e.source_policy("n").map(|r| r.version()), Some(6));
    // publish refuses partial documents; a partial for an unknown source has no base.
    assert_eq!(
        e.publish(&src, doc(7, "partial", "")),
        Err(PublishError::NotFull)
    );
    assert!(matches!(
        e.apply(&Source::local("new"), doc(1, "partial", "")),
        Err(PublishError::Merge(_))
    ));
    // All sources together respect the rule limit.
    let small = engine(EngineConfig::default().with_limits({
        let mut l = Limits::default();
        l.max_rules = 2;
        l
    }));
    small
        .publish(
            &Source::local("x"),
            doc(
                0,
                "full",
                &rule("a", "+1", "<accept><rate>1</rate></accept>"),
            ),
        )
        .expect("one");
    small
        .publish(
            &Source::local("y"),
            doc(
                0,
                "full",
                &rule("a", "+1", "<accept><rate>1</rate></accept>"),
            ),
        )
        .expect("two");
    let err = small
        .publish(
            &Source::local("z"),
            doc(
                0,
                "full",
                &rule("a", "+1", "<accept><rate>1</rate></accept>"),
            ),
        )
        .expect_err("three");
    assert_eq!(err, PublishError::TooManyRules { max: 2 });
    assert_eq!(small.generation(), 2);
}

// ------------------------------------------------------------------ stats

#[test]
fn stats_add_up_per_rule_and_source_including_removed_rules_and_dropped_shards() {
    let e = engine(EngineConfig::default());
    let a = Source::local("a");
    let b = Source::local("b");
    e.publish(
        &a,
        doc(
            0,
            "full",
            &rule("r1", "+1", "<lc:accept><lc:rate>0</lc:rate></lc:accept>"),
        ),
    )
    .expect("a");
    e.publish(&b, doc(0, "full", &rule("r2", "+44", "<lc:accept alt-action=\"redirect\" alt-target=\"sip:ivr@x.example\"><lc:percent>50</lc:percent></lc:accept>")))
        .expect("b");
    let mut s1 = e.attach();
    let mut s2 = e.attach();
    for i in 0..100u64 {
        let s = if i % 2 == 0 { &mut s1 } else { &mut s2 };
        let to = ["<tel:+1555>", "<tel:+44207>", "<tel:+33>"][i as usize % 3];
        let _ = s.classify(&call(to, i));
    }
    let _ = s1.classify(&Request {
        method: "BYE",
        ..call("<tel:+1555>", 0)
    });
    let st = e.stats();
    assert_eq!(st.total(), 101);
    assert_eq!((st.exempt, st.unmatched), (1, 33));
    assert_eq!(st.rules[0].stats.matched, 34);
    assert_eq!(st.rules[0].stats.rejected, 34);
    assert_eq!(st.rules[1].stats.matched, 33);
    assert_eq!(
        st.rules[1].stats.accepted + st.rules[1].stats.redirected,
        33
    );
    // Remove r1 and drop a shard: nothing counted disappears.
    e.publish(&a, doc(1, "full", "")).expect("a empty");
    let _ = s1.classify(&call("<tel:+1555>", 200));
    drop(s2);
    let st = e.stats();
    assert_eq!(st.total(), 102);
    assert_eq!(st.rules.len(), 1);
    let a_row = st
        .sources
        .iter()
        .find(|r| r.source == "a")
        .expect("source a kept");
    assert_eq!(a_row.stats.matched, 34);
    let text = st.prometheus();
    assert!(
        text.contains("# TYPE loadctl_rule_matched_total counter"),
        "{text}"
    );
    assert!(
        text.contains("loadctl_rule_matched_total{source=\"b\",rule=\"r2\"} 33"),
        "{text}"
    );
    assert!(
        text.contains("loadctl_source_rejected_total{source=\"a\"} 34"),
        "{text}"
    );
    assert!(text.contains("loadctl_exempt_total 1"), "{text}");
    assert!(text.contains("loadctl_unmatched_total 34"), "{text}");
}

#[test]
fn engine_clock_is_used_when_requests_carry_no_time() {
    let clock = std::sync::Arc::new(loadctl::clock::ManualClock::new(1_700_000_000_000_000_000));
    let e = Engine::new(
        EngineConfig::default()
            .with_clock(clock.clone())
            .with_shards(1),
    );
    e.publish(
        &Source::local("n"),
        doc(
            0,
            "full",
            &rule("r", "+1", "<lc:accept><lc:rate>1</lc:rate></lc:accept>"),
        ),
    )
    .expect("publish");
    let mut s = e.attach();
    let untimed = Request {
        time: None,
        ..call("<tel:+1555>", 0)
    };
    assert_eq!(s.classify(&untimed).verdict, Verdict::Accept);
    assert_eq!(s.classify(&untimed).verdict, Verdict::Reject);
    clock.advance(SECOND);
    assert_eq!(s.classify(&untimed).verdict, Verdict::Accept);
    assert_eq!(s.now().unix_ns, 1_700_000_001_000_000_000);
}

#[test]
fn shared_writes_per_thousand_classifications_on_the_standard_mix_are_reported() {
    // The standard mix at 3× each rule's rate: most matched requests are refused, which only
    // reads the shared cell. Figures in BENCHMARKS.md come from the bench harness.
    let e = engine(EngineConfig::default());
    let mut rules = String::new();
    for i in 0..100 {
        let accept = match i % 10 {
            0 => "<lc:accept><lc:win>20</lc:win></lc:accept>".to_string(),
            1 | 2 => "<lc:accept><lc:percent>30</lc:percent></lc:accept>".to_string(),
            _ => format!("<lc:accept><lc:rate>{}</lc:rate></lc:accept>", 10 + i * 5),
        };
        rules.push_str(&rule(
            &format!("r{i}"),
            &format!("+1-{:03}", 200 + i),
            &accept,
        ));
    }
    e.publish(&Source::local("n"), doc(0, "full", &rules))
        .expect("publish");
    let mut s = shards(&e);
    let numbers: Vec<String> = (0..100)
        .map(|i| format!("<tel:+1{:03}5550000>", 200 + i))
        .collect();
    let n = 300_000u64;
    for i in 0..n {
        let t = i * 10_000; // 100,000 requests/s for 3 s: ~1,000/s per rule.
        let _ = s[i as usize % SHARDS].classify(&call(&numbers[i as usize % 100], t));
    }
    let writes: u64 = s.iter().map(Shard::shared_writes).sum();
    let per_thousand = writes as f64 * 1000.0 / n as f64;
    eprintln!("shared writes per 1,000 classifications: {per_thousand:.1}");
    assert!(per_thousand < 400.0, "{per_thousand}");
}

#[test]
fn a_publish_that_only_changes_actions_reuses_the_matcher() {
    let e = engine(EngineConfig::default());
    let src = Source::local("n");
    let two = |a: &str, b: &str| format!("{}{}", rule("a", "+1", a), rule("b", "+44", b));
    e.publish(
        &src,
        doc(
            0,
            "full",
            &two(
                "<accept><rate>5</rate></accept>",
                "<accept><win>2</win></accept>",
            ),
        ),
    )
    .expect("v0");
    let s0 = e.snapshot();
    // New rates and alt-actions, same conditions: the matching structures are shared.
    e.apply(
        &src,
        doc(
            1,
            "partial",
            &rule(
                "a",
                "+1",
                "<accept alt-action=\"drop\"><rate>7</rate></accept>",
            ),
        ),
    )
    .expect("v1");
    let s1 = e.snapshot();
    assert!(s1.policy().shares_matcher_with(s0.policy()));
    let mut s = e.attach();
    let d = s.classify(&call("<tel:+1555>", 0));
    assert_eq!(
        d.rule.map(|r| r.limit().to_string()),
        Some("rate 7/s".into())
    );
    // A changed condition rebuilds them, and the new condition is in force.
    e.apply(
        &src,
        doc(
            2,
            "partial",
            &rule(
                "a",
                "+33",
                "<accept alt-action=\"drop\"><rate>7</rate></accept>",
            ),
        ),
    )
    .expect("v2");
    let s2 = e.snapshot();
    assert!(!s2.policy().shares_matcher_with(s1.policy()));
    assert!(s.classify(&call("<tel:+1555>", 0)).rule.is_none());
    assert_eq!(
        s.classify(&call("<tel:+33555>", 0))
            .rule
            .map(|r| r.id().to_string()),
        Some("a".into())
    );
    // A reorder (delete and re-add moves a rule to the end) rebuilds too.
    e.apply(&src, doc(3, "partial", "<rule id=\"a\"><actions/></rule>"))
        .expect("v3");
    e.apply(
        &src,
        doc(
            4,
            "partial",
            &rule("a", "+33", "<accept><rate>1</rate></accept>"),
        ),
    )
    .expect("v4");
    let ids: Vec<String> = e
        .snapshot()
        .policy()
        .rules()
        .iter()
        .map(|r| r.id().to_string())
        .collect();
    assert_eq!(ids, ["b", "a"]);
}
