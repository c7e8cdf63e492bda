//! Property: the same arrivals, spread over N shards at random, are admitted in the same total
//! as on one shard, within the documented bounds: rate within 1 % of the one-shard count (plus
//! one lease look-ahead per shard), windows exactly, percent within one request per shard.
//! Simulated time throughout.

use std::collections::VecDeque;

use crate::common::{NS, invite_to};
use loadctl::policy::{Limits, Ruleset, read};
use loadctl::runtime::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn policy(limit: &str) -> Ruleset {
    let text = format!(
        "<ruleset {NS} version=\"0\" state=\"full\"><rule id=\"r\"><conditions><lc:call-identity>\
         <lc:sip><lc:to><many-tel prefix=\"+1\"/></lc:to></lc:sip></lc:call-identity></conditions>\
         <actions><lc:accept>{limit}</lc:accept></actions></rule></ruleset>"
    );
    read(text.as_bytes(), &Limits::default())
        .expect("valid")
        .ruleset
}

/// Offers `arrivals` (time, shard choice) to `n` shards; window tickets are completed
/// `hold_ns` after their admission on the shard that got them. Returns admissions.
fn admitted(n: usize, limit: &str, arrivals: &[(u64, usize)], hold_ns: u64) -> u64 {
    let engine = Engine::from_ruleset(policy(limit), EngineConfig::default().with_shards(n))
        .expect("publishes");
    let mut shards: Vec<Shard> = (0..n).map(|_| engine.attach()).collect();
    let mut held: VecDeque<(u64, usize, Ticket)> = VecDeque::new();
    let mut count = 0;
    for &(t, choice) in arrivals {
        while held.front().is_some_and(|(due, _, _)| *due <= t) {
            let (_, s, ticket) = held.pop_front().expect("front");
            shards[s].complete(ticket);
        }
        let s = choice % n;
        let d = shards[s].classify(&invite_to("<tel:+1-555-0100>", Transport::Udp, t));
        if d.verdict == Verdict::Accept {
            count += 1;
        }
        if let Some(ticket) = d.ticket {
            held.push_back((t + hold_ns, s, ticket));
        }
    }
    for (_, s, ticket) in held {
        shards[s].complete(ticket);
    }
    count
}

/// Arrivals at about `per_second` over two seconds, with random gaps and shard choices.
fn arrivals(per_second: u64) -> impl Strategy<Value = Vec<(u64, usize)>> {
    let n = (2 * per_second) as usize;
    let mean_gap = 1_000_000_000 / per_second;
    proptest::collection::vec((0..2 * mean_gap, any::<usize>()), n).prop_map(|gaps| {
        let mut t = 0;
        gaps.into_iter()
            .map(|(gap, choice)| {
                t += gap;
                (t, choice)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn rate_totals_match_one_shard(n in 2usize..16, arrivals in arrivals(3_000)) {
        let limit = "<lc:rate>1000</lc:rate>";
        let one = admitted(1, limit, &arrivals, 0) as f64;
        let many = admitted(n, limit, &arrivals, 0) as f64;
        // Leases look ahead ⌊r · 0.5 ms⌋ tokens (none below 2,000/s): 1 % plus one per shard.
        let bound = one * 0.01 + n as f64;
        prop_assert!((many - one).abs() <= bound, "{n} shards: {many} vs {one} (±{bound})");
    }

    #[test]
    fn window_totals_match_one_shard_exactly(n in 2usize..16, arrivals in arrivals(2_000), hold_ms in 1u64..20) {
        let limit = "<lc:win>5</lc:win>";
        let one = admitted(1, limit, &arrivals, hold_ms * MS);
        let many = admitted(n, limit, &arrivals, hold_ms * MS);
        prop_assert_eq!(many, one, "{} shards", n);
    }

    #[test]
    fn percent_totals_match_one_shard_within_one_per_shard(n in 2usize..16, arrivals in arrivals(2_000), p in 1u32..100) {
        let limit = format!("<lc:percent>{p}</lc:percent>");
        let one = admitted(1, &limit, &arrivals, 0) as i64;
        let many = admitted(n, &limit, &arrivals, 0) as i64;
        prop_assert!((many - one).abs() <= n as i64, "{n} shards at {p} %: {many} vs {one}");
    }
}
