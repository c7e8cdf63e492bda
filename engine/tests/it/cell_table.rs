//! Several engines sharing one `CellTable` — as the processes of a forking appliance do —
//! enforce one global limit per rule, in simulated time.

use crate::common::{NS, invite_to};
use loadctl::clock::{Clock, SystemClock};
use loadctl::policy::{Limits, Ruleset, read};
use loadctl::runtime::*;

const SECOND: u64 = 1_000_000_000;
const ENGINES: usize = 4;
const SHARDS: usize = 4;

fn doc(rules: &[(&str, &str, &str)]) -> Ruleset {
    let rules: String = rules
        .iter()
        .map(|(id, prefix, accept)| {
            format!(
                "<rule id=\"{id}\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"{prefix}\"/></lc:to></lc:sip></lc:call-identity></conditions>\
                 <actions><lc:accept>{accept}</lc:accept></actions></rule>"
            )
        })
        .collect();
    let text = format!("<ruleset {NS} version=\"0\" state=\"full\">{rules}</ruleset>");
    read(text.as_bytes(), &Limits::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .ruleset
}

fn region(cells: usize) -> &'static [RuleCell] {
    let v: Vec<RuleCell> = (0..=cells).map(|_| RuleCell::unused()).collect();
    Box::leak(v.into_boxed_slice())
}

fn call(to: &str, monotonic_ns: u64) -> Request<'_> {
    invite_to(to, Transport::Udp, monotonic_ns)
}

/// `ENGINES` engines, each with its own copy of the policy; on one table when `table` is set.
fn engines(table: Option<CellTable>, policy: &Ruleset) -> Vec<Engine> {
    (0..ENGINES)
        .map(|_| {
            let config = EngineConfig::default().with_shards(SHARDS);
            let e = match table {
                Some(t) => Engine::with_cell_table(
                    config,
                    CellTable::attach(t.slots()).expect("must succeed"),
                ),
                None => Engine::new(config),
            };
            e.publish(&Source::local("n"), policy.clone())
                .expect("must succeed");
            e
        })
        .collect()
}

/// Offers 3r for 10 s round-robin over every shard of every engine; returns admissions.
fn offer(engines: &[Engine], rate: f64) -> u64 {
    let mut shards: Vec<Shard> = engines
        .iter()
        .flat_map(|e| (0..SHARDS).map(|_| e.attach()))
        .collect();
    let gap = (1e9 / (3.0 * rate)) as u64;
    let (mut t, mut i, mut admitted) = (0, 0, 0);
    while t < 10 * SECOND {
        let n = shards.len();
        if shards[i % n].classify(&call("<tel:+15550000>", t)).verdict == Verdict::Accept {
            admitted += 1;
        }
        i += 1;
        t += gap;
    }
    admitted
}

#[test]
fn engines_on_one_table_enforce_one_rate() {
    for rate in [50.0, 1_000.0, 20_000.0] {
        let policy = doc(&[("r", "+1", &format!("<lc:rate>{rate}</lc:rate>"))]);
        let table = CellTable::format(region(16)).expect("must succeed");
        let shared = engines(Some(table), &policy);
        let admitted = offer(&shared, rate) as f64;
        let expected = rate * 10.0 + (rate * 0.1).ceil().max(1.0);
        assert!(
            (admitted - expected).abs() <= expected * 0.01,
            "rate {rate}: {admitted} admitted, expected {expected} ± 1 %"
        );
        assert_eq!(table.in_use(), 1);
        // Without the table each engine enforces the rate on its own, and each sees only a
        // quarter of the 3r offered: nearly everything passes.
        let apart = offer(&engines(None, &policy), rate) as f64;
        assert!(apart > 2.5 * rate * 10.0, "rate {rate}: apart {apart}");
    }
}

#[test]
fn a_window_is_shared_and_a_ticket_completes_in_another_engine() {
    let policy = doc(&[("w", "+1", "<lc:win>3</lc:win>")]);
    let table = CellTable::format(region(4)).expect("must succeed");
    let es = engines(Some(table), &policy);
    let mut a = es[0].attach();
    let mut b = es[1].attach();
    let mut tickets = Vec::new();
    for i in 0..3 {
        let shard = if i < 2 { &mut a } else { &mut b };
        let d = shard.classify(&call("<tel:+1555>", 0));
        assert_eq!(d.verdict, Verdict::Accept);
        tickets.push(d.ticket.expect("must succeed"));
    }
    assert_eq!(a.classify(&call("<tel:+1555>", 0)).verdict, Verdict::Reject);
    assert_eq!(b.classify(&call("<tel:+1555>", 0)).verdict, Verdict::Reject);
    // A ticket from engine 0 completed by engine 1's shard frees a slot for everyone.
    b.complete(tickets.remove(0));
    assert_eq!(a.classify(&call("<tel:+1555>", 0)).verdict, Verdict::Accept);
    assert_eq!(b.classify(&call("<tel:+1555>", 0)).verdict, Verdict::Reject);
}

#[test]
fn a_changed_window_gets_its_slots_back_from_another_engine() {
    // The Kamailio case: the process that admitted a call is not the one that sees its final
    // response. Engine 0 takes both slots of a window of 2; every engine changes the window to
    // 3 and back to 2; engine 1 completes the tickets in between. The cell of the first rule
    // is then free again (and released once no engine holds it), not stuck full.
    let two = doc(&[("w", "+1", "<lc:win>2</lc:win>")]);
    let three = doc(&[("w", "+1", "<lc:win>3</lc:win>")]);
    let table = CellTable::format(region(4)).expect("must succeed");
    let es = engines(Some(table), &two);
    let mut a = es[0].attach();
    let mut b = es[1].attach();
    let tickets: Vec<Ticket> = (0..2)
        .map(|_| {
            a.classify(&call("<tel:+1555>", 0))
                .ticket
                .expect("must succeed")
        })
        .collect();
    for e in &es {
        e.publish(&Source::local("n"), three.clone())
            .expect("must succeed");
    }
    for t in tickets {
        assert!(b.complete(t));
    }
    for e in &es {
        e.publish(&Source::local("n"), two.clone())
            .expect("must succeed");
    }
    let admitted = (0..4)
        .filter(|_| a.classify(&call("<tel:+1555>", 0)).verdict == Verdict::Accept)
        .count();
    assert_eq!(admitted, 2, "the window of 2 is stuck");
    // Both rules' cells in use (the window of 3 is retired but still held by old snapshots
    // until the next publish prunes it); never more.
    assert!(table.in_use() <= 2, "{} cells in use", table.in_use());
}

#[test]
fn cells_are_released_when_no_engine_uses_them() {
    let policy = doc(&[
        ("r", "+1", "<lc:rate>10</lc:rate>"),
        ("w", "+2", "<lc:win>5</lc:win>"),
        ("p", "+3", "<lc:percent>50</lc:percent>"),
    ]);
    let table = CellTable::format(region(8)).expect("must succeed");
    let es = engines(Some(table), &policy);
    // Percent rules keep no shared state: two cells, not three.
    assert_eq!(table.in_use(), 2);
    // One engine drops the window rule: the others still use its cell.
    es[0]
        .publish(
            &Source::local("n"),
            doc(&[("r", "+1", "<lc:rate>10</lc:rate>")]),
        )
        .expect("must succeed");
    es[0]
        .publish(
            &Source::local("n"),
            doc(&[("r", "+1", "<lc:rate>10</lc:rate>")]),
        )
        .expect("must succeed");
    assert_eq!(table.in_use(), 2);
    // A changed limit is another rule (another key): a new cell.
    es[1]
        .publish(
            &Source::local("n"),
            doc(&[("r", "+1", "<lc:rate>20</lc:rate>")]),
        )
        .expect("must succeed");
    assert_eq!(table.in_use(), 3);
    // Engine 0 alone is left: it uses only the 10/s rate cell.
    let mut es = es;
    drop(es.split_off(1));
    assert_eq!(table.in_use(), 1);
    drop(es);
    assert_eq!(table.in_use(), 0);
}

/// New rules take never-used slots before the one a rule left, as long as there are any, so
/// that the rule that left finds its limiter when it comes back (the rate case with several
/// engines is `runtime.rs`'s `a_withdrawn_rate_rule_that_returns_on_a_shared_table_…`).
#[test]
fn new_rules_leave_the_slot_of_a_rule_that_left_alone() {
    let table = CellTable::format(region(8)).expect("must succeed");
    let e = Engine::with_cell_table(EngineConfig::default(), table);
    let mut s = e.attach();
    let (n, m) = (Source::local("n"), Source::local("m"));
    let rate = doc(&[("r", "+1", "<lc:rate>100</lc:rate>")]);
    e.publish(&n, rate.clone()).expect("publish");
    // Its whole burst at t = 0 (the GCRA admits at t = 0 up to the tolerance: ⌈r·τ⌉ + 1 at
    // most), then nothing more at that instant.
    let burst = (0..50)
        .filter(|_| s.classify(&call("<tel:+1555>", 0)).verdict == Verdict::Accept)
        .count();
    assert!((10..=11).contains(&burst), "a burst of {burst}");
    e.withdraw(&n.name).expect("withdraw");
    let _ = s.classify(&call("<tel:+3555>", 0));
    e.publish(&m, doc(&[])).expect("publish");
    assert_eq!(table.in_use(), 0);
    // Seven new rules for the seven slots the rule did not use.
    let ids: Vec<String> = (0..7).map(|i| format!("q{i}")).collect();
    let many: Vec<(&str, &str, &str)> = ids
        .iter()
        .map(|id| (id.as_str(), "+2", "<lc:rate>10</lc:rate>"))
        .collect();
    e.publish(&m, doc(&many)).expect("publish");
    assert_eq!(table.in_use(), 7);
    e.publish(&n, rate).expect("publish again");
    let again = (0..50)
        .filter(|_| s.classify(&call("<tel:+1555>", 0)).verdict == Verdict::Accept)
        .count();
    assert_eq!(again, 0, "the rule came back with a second burst");
}

#[test]
fn a_full_table_refuses_the_publish_and_changes_nothing() {
    let table = CellTable::format(region(2)).expect("must succeed");
    let e = Engine::with_cell_table(EngineConfig::default(), table);
    let two = doc(&[
        ("a", "+1", "<lc:rate>10</lc:rate>"),
        ("b", "+2", "<lc:rate>10</lc:rate>"),
    ]);
    let generation = e.publish(&Source::local("n"), two).expect("must succeed");
    let three = doc(&[
        ("a", "+1", "<lc:rate>10</lc:rate>"),
        ("c", "+3", "<lc:win>4</lc:win>"),
        ("d", "+4", "<lc:rate>10</lc:rate>"),
    ]);
    let err = e
        .publish(&Source::local("n"), three)
        .expect_err("must be refused");
    assert_eq!(
        err,
        PublishError::CellTable(CellTableError::Full { capacity: 2 })
    );
    assert!(err.to_string().contains("full"), "{err}");
    assert_eq!(e.generation(), generation);
    assert_eq!(table.in_use(), 2);
    // The published policy still limits: rule b is there.
    let mut s = e.attach();
    let admitted = (0..100)
        .filter(|_| s.classify(&call("<tel:+2555>", 0)).verdict == Verdict::Accept)
        .count();
    assert_eq!(admitted, 1);
}

#[test]
fn system_clocks_agree_across_instances() {
    // Engines in different processes create their clocks at different times; rate cells hold
    // absolute times, so the clocks must count from the same origin.
    let early = SystemClock::default();
    std::thread::sleep(std::time::Duration::from_millis(30));
    let late = SystemClock::default();
    let (a, b) = (early.monotonic_ns(), late.monotonic_ns());
    assert!(a.abs_diff(b) < 20_000_000, "{a} vs {b}");
}
