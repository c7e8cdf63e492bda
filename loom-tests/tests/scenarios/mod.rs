//! The loom scenarios, shared by `models.rs` (which expects them to hold) and `mutants.rs`
//! (which expects each to catch its deliberately broken engine variant).

use loadctl::runtime::{
    CellTable, CellTableError, Engine, EngineConfig, PublishError, RuleCell, Source, Verdict,
};
use loadctl::sync::{Arc, AtomicU32, Ordering};
use loadctl_loom::{invite, one_rule};
use loom::thread;

/// Interval 1 µs, tolerance 3 µs: a burst of four tokens at t = 0.
const T: u64 = 1_000;
const TOLERANCE: u64 = 3_000;

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(2, f);
}

/// Like [`model`] with another default preemption bound (`LOOM_MAX_PREEMPTIONS` still wins).
fn model_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(bound);
    }
    // How many interleavings were explored, reported so a model that explores nothing shows.
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&runs);
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    eprintln!(
        "loom: {} interleavings explored",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// Two shards lease at the same instant, twice each, asking for more than is left: together
/// they get exactly the burst, and the cell's TAT accounts for every granted token.
pub fn token_leases_grant_exactly_the_burst_and_lose_none() {
    model(|| {
        let cell = Arc::new(RuleCell::rate());
        let lease = |cell: &RuleCell| {
            (0..2)
                .map(|_| cell.lease_tokens(0, T, TOLERANCE, 0, 3).0)
                .sum::<u32>()
        };
        let other = {
            let cell = Arc::clone(&cell);
            thread::spawn(move || lease(&cell))
        };
        let mine = lease(&cell);
        let theirs = other.join().expect("no panic");
        assert_eq!(
            mine + theirs,
            4,
            "granted {mine} + {theirs} of a burst of 4"
        );
        assert_eq!(
            cell.state(),
            4 * T,
            "TAT must account for every granted token"
        );
    });
}

/// Three shards each take a slot of a one-slot window, hold it, and give it back: never two
/// holders at once, and the slot is free again at the end.
pub fn window_slots_are_never_oversold_or_leaked() {
    model(|| {
        let cell = Arc::new(RuleCell::window(1));
        let held = Arc::new(AtomicU32::new(0));
        let work = |cell: &RuleCell, held: &AtomicU32| {
            if cell.lease_slots(1) == 1 {
                let now = held.fetch_add(1, Ordering::AcqRel) + 1;
                assert!(now <= 1, "{now} holders of a one-slot window");
                held.fetch_sub(1, Ordering::AcqRel);
                cell.return_slots(1, 1);
            }
        };
        let others: Vec<_> = (0..2)
            .map(|_| {
                let (cell, held) = (Arc::clone(&cell), Arc::clone(&held));
                thread::spawn(move || work(&cell, &held))
            })
            .collect();
        work(&cell, &held);
        for t in others {
            t.join().expect("no panic");
        }
        assert_eq!(cell.state(), 1, "the slot must be free again");
    });
}

/// A shard classifies on another thread while the policy is published: it sees either policy
/// whole (the empty one accepts; the new one rejects with its rule), and once the publish has
/// returned and the shard is back, the new policy is in force.
///
/// The classifying shard runs on the spawned thread: loom's exploration starts from a schedule
/// that runs the main thread first, and with the roles the other way round it found a single
/// interleaving (the classify entirely before the publish).
pub fn a_shard_sees_a_publish_whole_and_eventually() {
    model(|| {
        let engine = Engine::new(EngineConfig::default().with_shards(1));
        let mut shard = engine.attach();
        let reader = thread::spawn(move || {
            let d = shard.classify(&invite());
            match (d.verdict, d.rule.map(|r| r.id().as_str())) {
                (Verdict::Accept, None) | (Verdict::Reject, Some("zero")) => {}
                other => panic!("torn view of the policy: {other:?}"),
            }
            shard
        });
        engine
            .publish(
                &Source::local("n"),
                one_rule(1, "zero", "<lc:rate>0</lc:rate>"),
            )
            .expect("publishes");
        let mut shard = reader.join().expect("no panic");
        let after = shard.classify(&invite());
        assert_eq!(
            after.verdict,
            Verdict::Reject,
            "the published policy must be in force"
        );
    });
}

/// A shard holds the only slot of a window rule while the policy is republished with the same
/// rule (its cell carries over) and another shard classifies: that shard must not get a slot
/// while the first holds it, and once the ticket is back the slot is free in the cell the new
/// snapshot uses.
pub fn a_window_slot_held_across_a_publish_is_neither_doubled_nor_lost() {
    model(|| {
        let engine = Engine::new(EngineConfig::default().with_shards(2));
        let src = Source::local("n");
        engine
            .publish(&src, one_rule(1, "w", "<lc:win>1</lc:win>"))
            .expect("publishes");
        let mut holder = engine.attach();
        let ticket = holder.classify(&invite()).ticket.expect("the free slot");
        let mut other = engine.attach();
        let contender = thread::spawn(move || {
            let d = other.classify(&invite());
            assert!(d.ticket.is_none(), "a one-slot window lent twice");
            assert_ne!(d.verdict, Verdict::Accept);
            other
        });
        engine
            .publish(&src, one_rule(2, "w", "<lc:win>1</lc:win>"))
            .expect("publishes");
        let mut other = contender.join().expect("no panic");
        holder.complete(ticket);
        let again = other.classify(&invite());
        assert!(again.ticket.is_some(), "the returned slot was lost");
    });
}

/// A shard counts requests on its thread and is then dropped (its counters fold into the
/// engine's totals) while the main thread reads the statistics twice: a later reading never
/// shows fewer requests than an earlier one, and once the shard is gone every request is
/// counted exactly once. Three preemptions: the reading must fall inside the detach.
pub fn statistics_add_up_and_never_go_back_when_a_shard_detaches() {
    model_bounded(3, || {
        let engine = Engine::new(EngineConfig::default().with_shards(1));
        let mut shard = engine.attach();
        let worker = thread::spawn(move || {
            let mut bye = invite();
            bye.method = "BYE";
            for _ in 0..2 {
                let _ = shard.classify(&bye);
            }
            drop(shard);
        });
        let first = engine.stats().total();
        let second = engine.stats().total();
        assert!(
            second >= first,
            "statistics went back from {first} to {second}"
        );
        worker.join().expect("no panic");
        assert_eq!(engine.stats().total(), 2, "every request counted once");
    });
}

/// Two copies of one INVITE reach two threads at the same instant: exactly one of them is the
/// original, and a third look afterwards sees a retransmission.
pub fn one_original_per_transaction_however_copies_race() {
    use loadctl::prsm::{Class, DetectorConfig, RetransmissionDetector, TransactionParts};
    model(|| {
        let detector = Arc::new(
            RetransmissionDetector::new({
                let mut config = DetectorConfig::default();
                config.capacity = 8;
                config.stripes = 2;
                config
            })
            .expect("config"),
        );
        let parts = TransactionParts {
            method: b"INVITE",
            request_uri: b"sip:bob@b.example",
            top_via: b"SIP/2.0/UDP a.example;branch=z9hG4bKrace",
            call_id: b"c",
            cseq: 1,
            from_tag: Some(b"f"),
            to_tag: None,
        };
        let key = detector.key_from_parts(&parts).expect("key");
        let other = Arc::clone(&detector);
        let copy = thread::spawn(move || other.observe(key, 1_000));
        let mine = detector.observe(key, 1_000);
        let theirs = copy.join().expect("no panic");
        let originals = [mine, theirs]
            .iter()
            .filter(|c| **c == Class::Original)
            .count();
        assert_eq!(originals, 1, "copies seen as {mine:?} and {theirs:?}");
        assert_eq!(detector.observe(key, 2_000), Class::Retransmission);
    });
}

/// Two engines — two processes of a forking server — publish the same window rule on one
/// shared cell table with room for one cell, at the same moment: they end up on the same cell,
/// counted twice, so when one engine goes the other still holds it and a third engine's other
/// rule finds the table full; the window's one slot is lent once across both.
pub fn engines_publishing_together_share_one_counted_cell() {
    model(|| {
        // Leaked per run: the table stands for memory that outlives every engine.
        let region: Vec<RuleCell> = (0..2).map(|_| RuleCell::unused()).collect();
        let region: &'static [RuleCell] = Box::leak(region.into_boxed_slice());
        let table = CellTable::format(region).expect("two slots");
        let start = |table: CellTable| {
            let engine = Engine::with_cell_table(EngineConfig::default(), table);
            engine
                .publish(&Source::local("n"), one_rule(0, "w", "<lc:win>1</lc:win>"))
                .expect("one cell is enough for both");
            engine
        };
        let other = thread::spawn(move || start(table));
        let mine = start(table);
        let theirs = other.join().expect("no panic");
        assert_eq!(table.in_use(), 1, "the rule got two cells");
        let mut a = mine.attach();
        let mut b = theirs.attach();
        assert!(a.classify(&invite()).ticket.is_some(), "the free slot");
        assert!(
            b.classify(&invite()).ticket.is_none(),
            "one slot lent twice"
        );
        drop((a, b));
        drop(mine);
        let third = Engine::with_cell_table(EngineConfig::default(), table);
        assert_eq!(
            third.publish(&Source::local("m"), one_rule(0, "x", "<lc:win>1</lc:win>")),
            Err(PublishError::CellTable(CellTableError::Full {
                capacity: 1
            })),
            "a cell still in use was given to another rule"
        );
        drop(theirs);
        assert_eq!(table.in_use(), 0);
    });
}

/// Two responses with different `oc-seq` reach one next hop's cell together while a worker
/// reads it: the values stored always belong to the `oc-seq` stored with them, the newer
/// values win whenever both were applied, and the reader sees one response's values whole.
pub fn overload_feedback_is_stored_whole_with_its_seq() {
    use loadctl::overload::client::{Applied, Client, ClientConfig, hop_key};
    use loadctl::overload::{Algorithm, Seq, via::Feedback};
    model_bounded(3, || {
        let client = Arc::new(Client::new(ClientConfig::default(), 1).expect("config"));
        let hop = client.hop(hop_key(b"192.0.2.7:5060"), 0).expect("a cell");
        let feedback = |oc: u64, seq: u64| Feedback {
            oc,
            algorithm: Some(Algorithm::Loss),
            validity_ms: 10_000,
            seq: Some(Seq(seq)),
        };
        let newer = {
            let client = Arc::clone(&client);
            thread::spawn(move || client.apply(hop, 1_000_000, Some(feedback(20, 2))))
        };
        let reader = {
            let client = Arc::clone(&client);
            thread::spawn(move || client.status(hop, 1_000_000).active)
        };
        let older = client.apply(hop, 1_000_000, Some(feedback(10, 1)));
        let newer = newer.join().expect("no panic");
        let seen = reader.join().expect("no panic");
        assert!(
            matches!(seen, None | Some((Algorithm::Loss, 10 | 20))),
            "a reader saw {seen:?}"
        );
        let end = client.status(hop, 1_000_000);
        let oc = end.active.map(|(_, oc)| oc);
        match end.seq {
            Some(Seq(2)) => assert_eq!(oc, Some(20), "seq 2 stored with {oc:?}"),
            Some(Seq(1)) => assert_eq!(oc, Some(10), "seq 1 stored with {oc:?}"),
            other => panic!("stored seq {other:?} after {older:?} / {newer:?}"),
        }
        if older == Applied::Updated && newer == Applied::Updated {
            assert_eq!(end.seq, Some(Seq(2)), "both applied, the older one last");
        }
    });
}
