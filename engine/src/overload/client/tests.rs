use super::*;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

fn client(config: ClientConfig) -> (Client, Hop) {
    let c = Client::new(config, 8).expect("test input");
    let hop = c.hop(hop_key(b"192.0.2.7:5060"), 0).expect("test input");
    (c, hop)
}

#[test]
fn hops_are_found_again_and_the_table_fills() {
    let c = Client::new(ClientConfig::default(), 2).expect("test input");
    let a = c.hop(hop_key(b"a"), 0).expect("test input");
    assert_eq!(c.hop(hop_key(b"a"), 0).expect("test input"), a);
    assert_eq!(c.find(hop_key(b"a")), Some(a));
    let b = c.hop(hop_key(b"b"), 0).expect("test input");
    assert_ne!(a, b);
    assert_eq!(c.find(hop_key(b"zz")), None);
    // Both hops were used within hop_idle: neither cell is given away.
    assert_eq!(
        c.hop(hop_key(b"c"), 299 * S),
        Err(OcError::TableFull { capacity: 2 })
    );
}

/// A rate value that stays in force for an hour, with its oc-seq.
fn hour_of_rate(seq: u64) -> String {
    format!("SIP/2.0/UDP p;oc=100;oc-algo=\"rate\";oc-validity=3600000;oc-seq={seq}")
}

#[test]
fn an_idle_hop_gives_its_cell_to_a_new_one_and_is_forgotten() {
    let c = Client::new(ClientConfig::default(), 2).expect("test input");
    let mut shard = ClientShard::new(&c, 1);
    let a = c.hop(hop_key(b"a"), 0).expect("test input");
    let b = c.hop(hop_key(b"b"), 0).expect("test input");
    c.on_response(b, 0, &hour_of_rate(1)).expect("test input");
    for k in 0..20 {
        shard.decide(&c, b, k * MS, Category::Reducible);
    }
    assert!(c.status(b, S).active.is_some());
    // `a` is used every 10 s; `b` not after its first second.
    for t in (10..=300).step_by(10) {
        shard.decide(&c, a, t * S, Category::Reducible);
    }
    // b's last use was in second 0: at 299 s it has not been idle for 300 s yet.
    assert_eq!(
        c.hop(hop_key(b"c"), 299 * S),
        Err(OcError::TableFull { capacity: 2 })
    );
    let hop_c = c.hop(hop_key(b"c"), 300 * S).expect("b's cell");
    assert_eq!(hop_c, b);
    assert_eq!(c.find(hop_key(b"b")), None);
    assert_eq!(c.find(hop_key(b"a")), Some(a));
    // The cell starts again: no values, no order (oc-seq 1 applies), no counters.
    let st = c.status(hop_c, 300 * S);
    assert_eq!(
        (st.active, st.algorithm, st.seq, st.updates),
        (None, None, None, 0)
    );
    assert_eq!(shard.stats(&c, hop_c), ShardHopStats::default());
    assert_eq!(
        shard.decide(&c, hop_c, 300 * S, Category::Reducible),
        OcVerdict::Forward
    );
    assert_eq!(shard.stats(&c, hop_c).forwarded, 1);
    assert_eq!(
        c.on_response(hop_c, 300 * S, &hour_of_rate(1)),
        Ok(Applied::Updated)
    );
    // `b` comes back: no cell is idle now (a at 300 s, c at 300 s).
    assert_eq!(
        c.hop(hop_key(b"b"), 301 * S),
        Err(OcError::TableFull { capacity: 2 })
    );
}

#[test]
fn hops_in_use_keep_their_cells_and_values_through_a_flood_of_destinations() {
    // 8 next hops used every second, each under values in force for an hour, beside a new
    // destination every 100 ms, each used once (4 h): the used hops are never refused and keep
    // their values; of the destinations, those that find a cell idle for 300 s get it.
    let c = Client::new(ClientConfig::default(), 16).expect("test input");
    let mut shard = ClientShard::new(&c, 1);
    let steady: Vec<Vec<u8>> = (0..8)
        .map(|i| format!("10.0.0.{i}:5060").into_bytes())
        .collect();
    let mut seq = 1;
    let (mut admitted, mut refused) = (0u64, 0u64);
    for tick in 0..4 * 36_000u64 {
        let now = tick * 100 * MS;
        if tick % 10 == 0 {
            for (i, address) in steady.iter().enumerate() {
                let hop = c
                    .hop(hop_key(address), now)
                    .expect("a used hop is never refused");
                if tick % 18_000 == 0 {
                    seq += 1;
                    c.on_response(hop, now, &hour_of_rate(seq))
                        .expect("test input");
                }
                assert_eq!(
                    c.status(hop, now).active,
                    Some((Algorithm::Rate, 100)),
                    "hop {i} at {tick}"
                );
                shard.decide(&c, hop, now, Category::Reducible);
            }
        }
        let one_off = format!("198.51.100.{}:{}", tick % 250, 1024 + tick / 250);
        match c.hop(hop_key(one_off.as_bytes()), now) {
            Ok(hop) => {
                admitted += 1;
                shard.decide(&c, hop, now, Category::Reducible);
            }
            Err(OcError::TableFull { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    // 8 spare cells, each free again 300 s after its last use: 8 per 300 s at most, and the
    // flood gets about that many (the first 8 at once).
    let bound = 8 + 8 * (4 * 3600 / 300);
    assert!(
        admitted <= bound && admitted >= bound - 16,
        "{admitted} destinations got a cell (bound {bound}), {refused} refused"
    );
}

#[test]
fn a_new_hop_that_keeps_asking_gets_a_cell_once_one_is_idle() {
    let c = Client::new(ClientConfig::default(), 4).expect("test input");
    for i in 0..4u64 {
        c.hop(hop_key(&i.to_be_bytes()), i * S).expect("room");
    }
    // Cell of key 0 was last used in second 0: idle for 300 s at 300 s.
    let mut got = None;
    for t in 1..=400 {
        if let Ok(h) = c.hop(hop_key(b"late"), t * S) {
            got = Some(t);
            assert_eq!(c.find(hop_key(&0u64.to_be_bytes())), None);
            assert_eq!(c.find(hop_key(b"late")), Some(h));
            break;
        }
    }
    assert_eq!(got, Some(300));
}

#[test]
fn hop_idle_is_at_least_twice_a_transaction() {
    let config = ClientConfig {
        hop_idle: Duration::from_secs(63),
        ..ClientConfig::default()
    };
    assert!(matches!(
        config.check(),
        Err(OcError::Config {
            field: "hop_idle",
            ..
        })
    ));
    let config = ClientConfig {
        hop_idle: MIN_HOP_IDLE,
        ..ClientConfig::default()
    };
    assert_eq!(config.check(), Ok(()));
}

#[test]
fn uncontrolled_hops_forward_everything() {
    // RFC 7339 §5: "If overload controls are not currently active with this server ...
    // the SIP client sends the SIP message to the server without invoking any overload
    // control algorithm."
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 1);
    for k in 0..1000 {
        assert_eq!(
            shard.decide(&c, hop, k * MS, Category::Reducible),
            OcVerdict::Forward
        );
    }
}

#[test]
fn loss_sheds_the_percentage_converted_onto_the_reducible_category() {
    // RFC 7339 §7.2: "if "oc=10" and 40% of the requests should be included in the first
    // category, then: 10 / 40 * 100 = 25 ... 25% of the requests in the first category
    // can be reduced to get an overall reduction of 10%."
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 7);
    // 40 % reducible, at 10,000 requests/s; the mix does not depend on what is admitted.
    let cat = |k: u64| {
        if k % 5 < 2 {
            Category::Reducible
        } else {
            Category::Priority
        }
    };
    for k in 0..10_000 {
        shard.decide(&c, hop, k * 100_000, cat(k));
    }
    let via = "SIP/2.0/UDP p;branch=z9hG4bK1;oc=10;oc-algo=\"loss\";oc-validity=100000;oc-seq=1.0";
    assert_eq!(c.on_response(hop, S, via), Ok(Applied::Updated));
    // Two seconds for the estimate to settle, then eight counted.
    let mut shed = 0;
    for k in 10_000..100_000u64 {
        let v = shard.decide(&c, hop, k * 100_000, cat(k));
        if k >= 30_000 && v == OcVerdict::Shed(ShedReason::Loss) {
            assert_eq!(cat(k), Category::Reducible);
            shed += 1;
        }
    }
    assert!((shard.reducible_share(&c, hop) - 0.4).abs() < 1e-3);
    // 25 % of the 40 % reducible: 10 % of 70,000, to within a few requests (error diffusion).
    assert!((shed as f64 - 7_000.0).abs() < 20.0, "shed {shed}");
}

#[test]
fn loss_above_the_reducible_share_sheds_into_the_priority_category() {
    // RFC 7339 §7.2: "oc_value > category 1. Reduce 100% of msgs from category 1 and
    // remaining from category 2": oc=90 with an 80/20 mix sheds every reducible request and
    // (90−80)/20 = 50 % of the priority ones.
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 3);
    let via = "SIP/2.0/UDP p;oc=90;oc-algo=\"loss\";oc-validity=10000;oc-seq=5.0";
    c.on_response(hop, 0, via).expect("test input");
    let n = 20_000;
    let mut shed = [0u64; 2];
    let mut offered = [0u64; 2];
    for k in 0..n {
        let cat = if k % 5 < 4 {
            Category::Reducible
        } else {
            Category::Priority
        };
        offered[cat as usize] += 1;
        if let OcVerdict::Shed(ShedReason::Loss) = shard.decide(&c, hop, k * 400_000, cat) {
            shed[cat as usize] += 1;
        }
    }
    assert_eq!(shed[0], offered[0], "every reducible request");
    let p = shed[1] as f64 / offered[1] as f64;
    assert!((p - 0.5).abs() < 0.01, "priority shed share {p}");
}

/// What a client sends to a hop under `oc` (loss) in a call mix: `cps` new INVITEs a second
/// (evenly spaced), each admitted one followed by `followers` requests at `hold` seconds
/// (an ACK at once counts as exempt: `hold` 0 and exempt), for `secs` seconds. Returns the
/// INVITEs admitted per second and (requests offered, forwarded) from second `from` on.
fn call_mix(
    oc: u64,
    cps: u64,
    calls: bool,
    hold: u64,
    secs: u64,
    from: u64,
) -> (Vec<u64>, u64, u64) {
    use std::collections::BinaryHeap;
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 11);
    let via = format!(
        "SIP/2.0/UDP p;oc={oc};oc-algo=\"loss\";oc-validity={};oc-seq=1.0",
        (secs + 1) * 1000
    );
    c.on_response(hop, 0, &via).expect("test input");
    // (time, exempt) of in-dialog requests still to come, earliest first.
    let mut due = BinaryHeap::new();
    let mut admitted = vec![0u64; secs as usize];
    let (mut offered, mut forwarded) = (0u64, 0u64);
    let gap = S / cps;
    for n in 0..secs * cps {
        let now = n * gap + gap / 2;
        while let Some(&std::cmp::Reverse((t, exempt))) = due.peek() {
            if t > now {
                break;
            }
            due.pop();
            let counted = t / S >= from;
            if exempt {
                shard.exempt(&c, hop, t);
                offered += u64::from(counted);
                forwarded += u64::from(counted);
            } else {
                let v = shard.decide(&c, hop, t, Category::Priority);
                offered += u64::from(counted);
                forwarded += u64::from(counted && v == OcVerdict::Forward);
            }
        }
        let counted = now / S >= from;
        offered += u64::from(counted);
        if shard.decide(&c, hop, now, Category::Reducible) == OcVerdict::Forward {
            admitted[(now / S) as usize] += 1;
            forwarded += u64::from(counted);
            if calls {
                due.push(std::cmp::Reverse((now + 1, true))); // the ACK
                due.push(std::cmp::Reverse((now + hold * S + 2, false))); // the BYE
            }
        }
    }
    (admitted, offered, forwarded)
}

#[test]
fn a_hop_with_only_priority_traffic_sheds_oc_of_it() {
    // RFC 7339 §7.2: with no first-category requests, "reduce 100% of msgs from category 1 and
    // remaining from category 2": (oc − cat1) / cat2 = oc of the priority requests.
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 5);
    let mut shed_late = 0u32;
    for k in 0..1_300u64 {
        // 100 emergency calls a second; oc=50 from the third second on.
        let now = k * 10 * MS;
        if k == 300 {
            let via = "SIP/2.0/UDP p;oc=50;oc-algo=\"loss\";oc-validity=60000;oc-seq=1.0";
            c.on_response(hop, now, via).expect("test input");
        }
        let v = shard.decide(&c, hop, now, Category::Priority);
        if k >= 800 {
            shed_late += u32::from(v == OcVerdict::Shed(ShedReason::Loss));
        }
        assert!(shard.reducible_share(&c, hop).is_finite());
    }
    // The last 5 s: 50 % of 500, to within the estimate's approach (k doubles each period).
    assert!((240..=260).contains(&shed_late), "shed {shed_late} of 500");
}

#[test]
fn a_lull_of_new_requests_does_not_shut_them_out_afterwards() {
    // Calls at 50/s under oc=50, each admitted INVITE followed by a BYE a second later (one
    // second-category request per call: (1 − p) / (1 + p) = a third of the INVITEs pass), then
    // 1.5 s without INVITEs but with in-dialog requests (a sample with no reducible request at
    // all), then INVITEs again: in the third second after they resume, about a third pass again.
    use std::collections::VecDeque;
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 9);
    let via = "SIP/2.0/UDP p;oc=50;oc-algo=\"loss\";oc-validity=60000;oc-seq=1.0";
    c.on_response(hop, 0, via).expect("test input");
    let mut byes: VecDeque<u64> = VecDeque::new();
    let mut admitted_third_second = 0;
    for n in 0..600u64 {
        let t = n * S / 50;
        while byes.front().is_some_and(|&b| b <= t) {
            let b = byes.pop_front().expect("a BYE");
            shard.decide(&c, hop, b, Category::Priority);
        }
        if (5 * S..6 * S + 500 * MS).contains(&t) {
            // The lull: no INVITE, but in-dialog requests of calls older than these (40/s).
            if n % 5 < 4 {
                shard.decide(&c, hop, t, Category::Priority);
            }
            continue;
        }
        if shard.decide(&c, hop, t, Category::Reducible) == OcVerdict::Forward {
            byes.push_back(t + S);
            if (8 * S + 500 * MS..9 * S + 500 * MS).contains(&t) {
                admitted_third_second += 1;
            }
        }
    }
    assert!(
        (12..=23).contains(&admitted_third_second),
        "{admitted_third_second} of 50 INVITEs passed in the third second after the lull (expected 16.7)"
    );
}

#[test]
fn loss_reduces_a_call_mix_by_oc_and_admits_steadily() {
    // RFC 7339 §7: the client "redirects or rejects 10% of the traffic originally destined
    // for that server" for oc=10; §7.2 converts oc onto the first category's share of the
    // requests offered. In a call mix the second category (ACK, BYE) follows the INVITEs
    // admitted; the overall reduction must still be oc, and the admissions steady.
    for (oc, hold) in [(50, 0), (50, 3), (50, 30), (80, 0), (80, 3), (20, 3)] {
        let secs = 40 + 2 * hold;
        let from = 5 + hold;
        let (admitted, offered, forwarded) = call_mix(oc, 50, true, hold, secs, from);
        let reduction = 1.0 - forwarded as f64 / offered as f64;
        assert!(
            (reduction - oc as f64 / 100.0).abs() <= 0.03,
            "oc={oc} hold {hold} s: overall reduction {reduction:.3} ({forwarded} of {offered})"
        );
        // Forwarded = (1 − p)·offered with an ACK and a BYE per admitted INVITE:
        // f·(1 + 2f·…)… solved: f = (1 − p) / (1 + 2p) of 50 INVITEs a second.
        let p = oc as f64 / 100.0;
        let expect = 50.0 * (1.0 - p) / (1.0 + 2.0 * p);
        let late = &admitted[from as usize..];
        let lo = late.iter().min().expect("seconds counted");
        let hi = late.iter().max().expect("seconds counted");
        assert!(
            (*lo as f64) >= expect - 3.0 && (*hi as f64) <= expect + 3.0,
            "oc={oc} hold {hold} s: INVITEs admitted per second {late:?}, expected {expect:.1}"
        );
    }
    // INVITE-only: the conversion is oc itself.
    let (admitted, offered, forwarded) = call_mix(50, 50, false, 0, 20, 2);
    assert!(
        (offered - forwarded).abs_diff(offered / 2) <= 2,
        "{forwarded} of {offered}"
    );
    assert!(
        admitted[2..].iter().all(|&a| (24..=26).contains(&a)),
        "{admitted:?}"
    );
}

#[test]
fn control_that_begins_on_a_measured_mix_sheds_the_converted_share_at_once() {
    // A worker's share of a hop's calls (25/s, INVITE and its ACK) without control for 4 s,
    // then oc=50: forwarded = (1 − p)·offered with one ACK per admitted INVITE gives
    // (1 − p) / (1 + p) = a third of the INVITEs, from the first second on — not every INVITE
    // shed until the first sample under control is in.
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 3);
    let mut admitted_first = 0u32;
    let mut acks: Vec<u64> = Vec::new();
    for n in 0..200u64 {
        let now = n * S / 25 + 1;
        if n == 100 {
            let via = "SIP/2.0/UDP p;oc=50;oc-algo=\"loss\";oc-validity=60000;oc-seq=1.0";
            c.on_response(hop, now, via).expect("test input");
        }
        for t in acks.drain(..) {
            shard.exempt(&c, hop, t);
        }
        if shard.decide(&c, hop, now, Category::Reducible) == OcVerdict::Forward {
            acks.push(now + MS);
            if (4 * S..5 * S).contains(&now) {
                admitted_first += 1;
            }
        }
    }
    assert!(
        (6..=11).contains(&admitted_first),
        "{admitted_first} of 25 INVITEs passed in the first second under oc=50 (expected 8.3)"
    );
}

#[test]
fn validity_expires_and_zero_stops() {
    // RFC 7339 §4.3: "After the value specified in the "oc-validity" parameter expires ...
    // overload control is not in effect"; the default is 500 ms.
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 1);
    c.on_response(hop, 0, "SIP/2.0/UDP p;oc=100;oc-algo=\"loss\";oc-seq=1.0")
        .expect("test input");
    assert_eq!(
        shard.decide(&c, hop, 499 * MS, Category::Reducible),
        OcVerdict::Shed(ShedReason::Loss)
    );
    assert_eq!(
        shard.decide(&c, hop, 500 * MS, Category::Reducible),
        OcVerdict::Forward
    );
    // §5.7: "If the value of the "oc-validity" parameter is 0, this indicates to the client
    // that overload control ... is no longer necessary".
    c.on_response(
        hop,
        S,
        "SIP/2.0/UDP p;oc=100;oc-algo=\"loss\";oc-validity=5000;oc-seq=2.0",
    )
    .expect("test input");
    assert!(matches!(
        shard.decide(&c, hop, S + MS, Category::Reducible),
        OcVerdict::Shed(_)
    ));
    c.on_response(
        hop,
        S + 2 * MS,
        "SIP/2.0/UDP p;oc=100;oc-algo=\"loss\";oc-validity=0;oc-seq=3.0",
    )
    .expect("test input");
    assert_eq!(
        shard.decide(&c, hop, S + 3 * MS, Category::Reducible),
        OcVerdict::Forward
    );
    assert_eq!(c.status(hop, S + 3 * MS).active, None);
}

#[test]
fn seq_orders_updates() {
    // RFC 7339 §5.4.
    let (c, hop) = client(ClientConfig::default());
    let v = |oc: u32, seq: &str| {
        format!("SIP/2.0/UDP p;oc={oc};oc-algo=\"loss\";oc-validity=10000;oc-seq={seq}")
    };
    assert_eq!(c.on_response(hop, 0, &v(20, "100.5")), Ok(Applied::Updated));
    assert_eq!(c.on_response(hop, MS, &v(30, "100.5")), Ok(Applied::Same));
    assert_eq!(c.on_response(hop, MS, &v(40, "100.4")), Ok(Applied::Stale));
    assert_eq!(c.status(hop, 2 * MS).active, Some((Algorithm::Loss, 20)));
    assert_eq!(
        c.on_response(hop, 3 * MS, &v(50, "100.6")),
        Ok(Applied::Updated)
    );
    assert_eq!(c.status(hop, 4 * MS).active, Some((Algorithm::Loss, 50)));
    // A much lower value that is not a wrap-around (§4.4: the oc-seq "overflows") is tardy or
    // spoofed: it would otherwise undo any values in force.
    for low in ["3.0", "0.00001", "0.0"] {
        assert_eq!(
            c.on_response(hop, 5 * MS, &v(60, low)),
            Ok(Applied::Stale),
            "{low}"
        );
    }
    assert_eq!(c.status(hop, 6 * MS).active, Some((Algorithm::Loss, 50)));
    // Expired values are reset (§5.4: "MUST be reset to default values once the validity
    // period has expired"): any seq applies afterwards.
    assert_eq!(
        c.on_response(hop, 20 * S, &v(70, "2.0")),
        Ok(Applied::Updated)
    );
}

#[test]
fn a_sequence_that_overflows_applies() {
    // RFC 7339 §4.4: "If the value contained in the "oc-seq" parameter overflows ... then the
    // "oc-seq" parameter MUST be reset to the current timestamp or an appropriate base value"
    // and "If an overflow is detected, then the client should use the overload parameters in
    // the new message, even though the sequence number is lower."
    let (c, hop) = client(ClientConfig::default());
    let v = |oc: u32, seq: &str| {
        format!("SIP/2.0/UDP p;oc={oc};oc-algo=\"loss\";oc-validity=10000;oc-seq={seq}")
    };
    assert_eq!(
        c.on_response(hop, 0, &v(20, "999999999998.5")),
        Ok(Applied::Updated)
    );
    // reset to a timestamp (seconds, as in §6's example) or to a base value
    assert_eq!(
        c.on_response(hop, MS, &v(30, "1282321615.782")),
        Ok(Applied::Updated)
    );
    assert_eq!(c.status(hop, 2 * MS).active, Some((Algorithm::Loss, 30)));
    assert_eq!(
        c.on_response(hop, 3 * MS, &v(40, "1282321615.783")),
        Ok(Applied::Updated)
    );
    c.on_response(hop, 4 * MS, &v(50, "999999999999.0"))
        .expect("test input");
    assert_eq!(
        c.on_response(hop, 5 * MS, &v(60, "1.0")),
        Ok(Applied::Updated)
    );
    assert_eq!(c.status(hop, 6 * MS).active, Some((Algorithm::Loss, 60)));
}

#[test]
fn feedback_without_a_sequence_does_not_displace_ordered_values() {
    // §4.4: oc-seq "MUST be inserted by the SIP server"; values without one cannot be ordered
    // against those in force (a spoofed `oc=0` would end control).
    let (c, hop) = client(ClientConfig::default());
    let ordered = "SIP/2.0/UDP p;oc=50;oc-algo=\"loss\";oc-validity=10000;oc-seq=10.0";
    let unordered = "SIP/2.0/UDP p;oc=0;oc-algo=\"loss\";oc-validity=10000";
    c.on_response(hop, 0, ordered).expect("test input");
    assert_eq!(c.on_response(hop, MS, unordered), Ok(Applied::Stale));
    assert_eq!(c.status(hop, 2 * MS).active, Some((Algorithm::Loss, 50)));
    // Once they have expired, nothing orders: the values apply.
    assert_eq!(c.on_response(hop, 11 * S, unordered), Ok(Applied::Updated));
    assert_eq!(
        c.status(hop, 11 * S + MS).active,
        Some((Algorithm::Loss, 0))
    );
    // Values without a sequence replace each other.
    let more = "SIP/2.0/UDP p;oc=30;oc-algo=\"loss\";oc-validity=10000";
    assert_eq!(c.on_response(hop, 12 * S, more), Ok(Applied::Updated));
    assert_eq!(c.status(hop, 12 * S).active, Some((Algorithm::Loss, 30)));
}

#[test]
fn a_stop_keeps_its_order_for_a_transaction_lifetime() {
    // §5.7 orders a stop like any value; after STOP_ORDER (64·T1) any oc-seq applies again,
    // so a server whose sequence restarted lower is heard.
    let (c, hop) = client(ClientConfig::default());
    let v = |oc: u32, validity: u32, seq: u32| {
        format!("SIP/2.0/UDP p;oc={oc};oc-algo=\"loss\";oc-validity={validity};oc-seq={seq}.0")
    };
    c.on_response(hop, 0, &v(50, 10000, 1000))
        .expect("test input");
    assert_eq!(c.on_response(hop, MS, &v(0, 0, 1001)), Ok(Applied::Updated));
    let last = STOP_ORDER.as_nanos() as u64;
    assert_eq!(
        c.on_response(hop, last, &v(50, 10000, 1000)),
        Ok(Applied::Stale)
    );
    assert_eq!(
        c.on_response(hop, last, &v(50, 10000, 3)),
        Ok(Applied::Stale)
    );
    assert_eq!(c.status(hop, last).active, None);
    assert_eq!(
        c.on_response(hop, last + 2 * MS, &v(40, 10000, 3)),
        Ok(Applied::Updated)
    );
    assert_eq!(
        c.status(hop, last + 3 * MS).active,
        Some((Algorithm::Loss, 40))
    );
}

#[test]
fn validity_zero_stops_control_whatever_the_oc_value() {
    // RFC 7339 §5.7: "If the value of the "oc-validity" parameter is 0, this indicates to the
    // client that overload control ... is no longer necessary ... the client SHOULD disregard
    // the value in the "oc" parameter"; RFC 7415 §4: ""oc" could be any value".
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 3);
    let start = |seq: u32| {
        format!("SIP/2.0/UDP p;oc=100;oc-algo=\"loss\";oc-validity=60000;oc-seq={seq}.0")
    };
    for (seq, stop) in [
        (
            1,
            "SIP/2.0/UDP p;oc=150;oc-algo=\"loss\";oc-validity=0;oc-seq=2.0",
        ),
        (
            3,
            "SIP/2.0/UDP p;oc=1234567890123456789012345;oc-algo=\"rate\";oc-validity=0;oc-seq=4.0",
        ),
        (
            5,
            "SIP/2.0/UDP p;oc=1234567890123456789012345;oc-validity=0;oc-seq=6.0",
        ),
    ] {
        let t = u64::from(seq) * S;
        c.on_response(hop, t, &start(seq)).expect("test input");
        assert!(matches!(
            shard.decide(&c, hop, t + MS, Category::Reducible),
            OcVerdict::Shed(_)
        ));
        assert_eq!(
            c.on_response(hop, t + 2 * MS, stop),
            Ok(Applied::Updated),
            "{stop}"
        );
        assert_eq!(c.status(hop, t + 3 * MS).active, None, "{stop}");
        assert_eq!(
            shard.decide(&c, hop, t + 3 * MS, Category::Reducible),
            OcVerdict::Forward,
            "{stop}"
        );
    }
}

#[test]
fn an_oc_without_oc_algo_keeps_the_selected_algorithm() {
    // RFC 7339 §4.2: "Once the SIP server has chosen a mutually agreeable class of overload
    // control algorithms and communicated it to the client, the selection stays in effect
    // until the algorithm is changed by the server."
    let (c, hop) = client(ClientConfig::default());
    c.on_response(
        hop,
        0,
        "SIP/2.0/UDP p;oc=20;oc-algo=\"rate\";oc-validity=1000;oc-seq=1.0",
    )
    .expect("test input");
    assert_eq!(
        c.on_response(hop, MS, "SIP/2.0/UDP p;oc=150;oc-validity=1000;oc-seq=2.0"),
        Ok(Applied::Updated)
    );
    assert_eq!(c.status(hop, 2 * MS).active, Some((Algorithm::Rate, 150)));
    // also across a stop and the expiry of the values
    c.on_response(hop, 3 * MS, "SIP/2.0/UDP p;oc=0;oc-validity=0;oc-seq=3.0")
        .expect("test input");
    c.on_response(hop, 60 * S, "SIP/2.0/UDP p;oc=20;oc-seq=4.0")
        .expect("test input");
    assert_eq!(c.status(hop, 60 * S).active, Some((Algorithm::Rate, 20)));
    // With loss selected, a value above 100 is out of range (§7.1) and changes nothing.
    c.on_response(
        hop,
        61 * S,
        "SIP/2.0/UDP p;oc=20;oc-algo=\"loss\";oc-validity=1000;oc-seq=5.0",
    )
    .expect("test input");
    assert_eq!(
        c.on_response(
            hop,
            61 * S + MS,
            "SIP/2.0/UDP p;oc=150;oc-validity=1000;oc-seq=6.0"
        ),
        Err(OcError::LossAbove100(150))
    );
    assert_eq!(
        c.status(hop, 61 * S + MS).active,
        Some((Algorithm::Loss, 20))
    );
    // A hop that never had a selection: loss (§4.2's default).
    let (fresh, hop) = client(ClientConfig::default());
    fresh
        .on_response(hop, 0, "SIP/2.0/UDP p;oc=30;oc-seq=1.0")
        .expect("test input");
    assert_eq!(fresh.status(hop, MS).active, Some((Algorithm::Loss, 30)));
}

#[test]
fn bad_feedback_changes_nothing() {
    let (c, hop) = client(ClientConfig::default());
    c.on_response(
        hop,
        0,
        "SIP/2.0/UDP p;oc=20;oc-algo=\"loss\";oc-validity=10000;oc-seq=1.0",
    )
    .expect("test input");
    let before = c.status(hop, MS);
    for bad in [
        "SIP/2.0/UDP p;oc=200;oc-algo=\"loss\";oc-seq=2.0",
        "SIP/2.0/UDP p;oc=x;oc-seq=2.0",
        "SIP/2.0/UDP p;oc=5;oc-algo=\"loss,rate\";oc-seq=2.0",
        "SIP/2.0/UDP p;oc=5;oc-validity=-1;oc-seq=2.0",
    ] {
        assert!(c.on_response(hop, MS, bad).is_err(), "{bad}");
    }
    assert_eq!(c.status(hop, MS), before);
    // A client that offered only loss refuses a rate selection.
    let config = ClientConfig {
        algorithms: Algorithms::Loss,
        ..ClientConfig::default()
    };
    let (c, hop) = client(config);
    assert!(matches!(
        c.on_response(hop, 0, "SIP/2.0/UDP p;oc=5;oc-algo=\"rate\";oc-seq=1.0"),
        Err(OcError::UnknownAlgorithm(_))
    ));
}

/// RFC 7415 §3.5.1's reference algorithm, run as written (X, LCT), for comparison.
fn reference_bucket(arrivals: &[u64], oc: u64, tau_t: f64) -> Vec<bool> {
    let t = 1e9 / oc as f64;
    let tau = tau_t * t;
    let mut x = 0.0; // TAU0 = 0
    let mut lct = arrivals[0] as f64; // "initialized to the first arrival time"
    arrivals
        .iter()
        .map(|&ta| {
            let xp = x - (ta as f64 - lct);
            if xp <= tau {
                x = f64::max(0.0, xp) + t;
                lct = ta as f64;
                true
            } else {
                false
            }
        })
        .collect()
}

#[test]
fn rate_matches_rfc7415_reference_bucket() {
    let config = ClientConfig {
        resonance: false,
        ..ClientConfig::default()
    };
    let (c, hop) = client(config);
    let mut shard = ClientShard::new(&c, 1);
    c.on_response(
        hop,
        0,
        "SIP/2.0/UDP p;oc=100;oc-algo=\"rate\";oc-validity=100000;oc-seq=1.0",
    )
    .expect("test input");
    // Irregular arrivals averaging 4 ms apart (250/s offered against 100/s).
    let mut rng = 99u64;
    let mut t = 0u64;
    let arrivals: Vec<u64> = (0..5000)
        .map(|_| {
            rng = splitmix(rng);
            t += rng % (8 * MS);
            t
        })
        .collect();
    let expect = reference_bucket(&arrivals, 100, 5.0);
    let got: Vec<bool> = arrivals
        .iter()
        .map(|&ta| shard.decide(&c, hop, ta, Category::Reducible) == OcVerdict::Forward)
        .collect();
    let mismatch = expect.iter().zip(&got).filter(|(a, b)| a != b).count();
    assert_eq!(mismatch, 0);
    // The long-term rate stays at most 1/T (§3.5.1 "as long as the long-term rate remains
    // below 1/T"), bursts aside: ≤ 100·span + TAU1/T + 1.
    let span_s = (arrivals[4999] - arrivals[0]) as f64 / 1e9;
    let admitted = got.iter().filter(|&&a| a).count() as f64;
    assert!(admitted <= 100.0 * span_s + 6.0, "{admitted} in {span_s} s");
    assert!(
        admitted >= 100.0 * span_s * 0.97,
        "{admitted} in {span_s} s"
    );
}

#[test]
fn rate_gives_priority_requests_the_larger_tolerance() {
    // RFC 7415 §3.5.2: "Only higher-priority requests would be admitted when the leaky
    // bucket counter is between TAU1 and TAU2."
    let config = ClientConfig {
        resonance: false,
        ..ClientConfig::default()
    };
    let (c, hop) = client(config);
    let mut shard = ClientShard::new(&c, 1);
    c.on_response(
        hop,
        0,
        "SIP/2.0/UDP p;oc=10;oc-algo=\"rate\";oc-validity=100000;oc-seq=1.0",
    )
    .expect("test input");
    // T = 100 ms. At one instant: X' ≤ TAU1 = 5T admits reducible requests while X ≤ 5T,
    // i.e. 6 of them (X' = 0, T, …, 5T); then priority ones until X' > 10T: 5 more.
    let t0 = S;
    let mut reducible = 0;
    while shard.decide(&c, hop, t0, Category::Reducible) == OcVerdict::Forward {
        reducible += 1;
    }
    let mut priority = 0;
    while shard.decide(&c, hop, t0, Category::Priority) == OcVerdict::Forward {
        priority += 1;
    }
    assert_eq!((reducible, priority), (6, 5));
    // oc=0 with a non-zero validity rejects everything (§3.5.1).
    c.on_response(
        hop,
        t0,
        "SIP/2.0/UDP p;oc=0;oc-algo=\"rate\";oc-validity=100000;oc-seq=2.0",
    )
    .expect("test input");
    assert_eq!(
        shard.decide(&c, hop, t0 + 10 * S, Category::Priority),
        OcVerdict::Shed(ShedReason::Rate)
    );
}

#[test]
fn resonance_randomises_an_empty_bucket_within_half_t() {
    // RFC 7415 §3.5.3: "classic gapping where TAU=0 ... the minimum time between admissions
    // is uniformly distributed over [T/2, 3T/2]".
    let config = ClientConfig {
        tau_reducible: 0.0,
        tau_priority: 0.0,
        ..ClientConfig::default()
    };
    let (c, hop) = client(config);
    let mut shard = ClientShard::new(&c, 5);
    c.on_response(
        hop,
        0,
        "SIP/2.0/UDP p;oc=10;oc-algo=\"rate\";oc-validity=1000000;oc-seq=1.0",
    )
    .expect("test input");
    let mut last: Option<u64> = None;
    let mut gaps = Vec::new();
    for k in 0..200_000u64 {
        let now = k * MS;
        if shard.decide(&c, hop, now, Category::Reducible) == OcVerdict::Forward {
            if let Some(l) = last {
                gaps.push(now - l);
            }
            last = Some(now);
        }
    }
    let (lo, hi) = (
        gaps.iter().min().expect("test input"),
        gaps.iter().max().expect("test input"),
    );
    assert!(*lo >= 50 * MS && *hi <= 151 * MS, "gaps {lo}..{hi}");
    assert!(
        *lo < 60 * MS && *hi > 140 * MS,
        "gaps {lo}..{hi} not spread"
    );
}

#[test]
fn repeated_timeouts_suspend_the_hop_until_a_response() {
    // RFC 7339 §5.9.
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 1);
    c.on_timeout(hop, 0);
    c.on_timeout(hop, MS);
    assert_eq!(
        shard.decide(&c, hop, 2 * MS, Category::Reducible),
        OcVerdict::Forward
    );
    c.on_timeout(hop, 3 * MS);
    assert!(c.status(hop, 3 * MS).suspended);
    // Everything is shed, emergency calls too, until the first probe at +1 s.
    assert_eq!(
        shard.decide(&c, hop, 4 * MS, Category::Priority),
        OcVerdict::Shed(ShedReason::Unreachable)
    );
    assert_eq!(
        shard.decide(&c, hop, 3 * MS + S, Category::Reducible),
        OcVerdict::Probe
    );
    assert_eq!(
        shard.decide(&c, hop, 3 * MS + S, Category::Reducible),
        OcVerdict::Shed(ShedReason::Unreachable)
    );
    // The probe times out too: the back-off doubles (2 s).
    c.on_timeout(hop, 5 * S);
    assert_eq!(
        shard.decide(&c, hop, 6 * S, Category::Reducible),
        OcVerdict::Shed(ShedReason::Unreachable)
    );
    assert_eq!(
        shard.decide(&c, hop, 7 * S, Category::Reducible),
        OcVerdict::Probe
    );
    // A response ends the suspension.
    assert_eq!(
        c.on_response(hop, 8 * S, "SIP/2.0/UDP p;branch=z9hG4bK1"),
        Ok(Applied::NoFeedback)
    );
    assert_eq!(
        shard.decide(&c, hop, 8 * S, Category::Reducible),
        OcVerdict::Forward
    );
    assert_eq!(shard.stats(&c, hop).probes, 2);
}

#[test]
fn two_clients_on_one_table_share_feedback_and_the_bucket() {
    // Forked workers attach to the same cells: feedback one applies, the other enforces,
    // and the rate bucket is one (RFC 7415 §3.5.1: at most 1/T over time for the hop).
    let cells: &'static [HopCell] = Box::leak((0..4).map(|_| HopCell::default()).collect());
    let config = ClientConfig {
        resonance: false,
        ..ClientConfig::default()
    };
    let a = Client::shared(config, cells).expect("test input");
    let b = Client::shared(config, cells).expect("test input");
    let hop = a.hop(hop_key(b"192.0.2.7:5060"), 0).expect("test input");
    assert_eq!(b.hop(hop_key(b"192.0.2.7:5060"), 0), Ok(hop));
    a.on_response(
        hop,
        0,
        "SIP/2.0/UDP p;oc=10;oc-algo=\"rate\";oc-validity=100000;oc-seq=1.0",
    )
    .expect("test input");
    let (mut sa, mut sb) = (ClientShard::new(&a, 1), ClientShard::new(&b, 2));
    // Both at one instant: together 6 reducible admissions (X' = 0 … 5T), as one client.
    let mut admitted = 0;
    for _ in 0..10 {
        for (shard, client) in [(&mut sa, &a), (&mut sb, &b)] {
            if shard.decide(client, hop, S, Category::Reducible) == OcVerdict::Forward {
                admitted += 1;
            }
        }
    }
    assert_eq!(admitted, 6);
    assert!(Client::shared(config, &[]).is_err());
}

#[test]
fn only_probe_timeouts_grow_the_back_off() {
    // RFC 7339 §5.9: "conservative in their probing (e.g., using an exponential back-off)":
    // the back-off follows failed probes, not the requests already in flight.
    let (c, hop) = client(ClientConfig::default());
    let mut shard = ClientShard::new(&c, 1);
    for k in 0..100 {
        c.on_timeout(hop, k * 10 * MS);
    }
    // Suspended at the third (20 ms): the first probe 1 s later, whatever came after.
    assert_eq!(
        shard.decide(&c, hop, 1019 * MS, Category::Reducible),
        OcVerdict::Shed(ShedReason::Unreachable)
    );
    assert_eq!(
        shard.decide(&c, hop, 1020 * MS, Category::Reducible),
        OcVerdict::Probe
    );
    // The probe's timeout doubles it; a second timeout without a new probe does not.
    c.on_timeout(hop, 2 * S);
    c.on_timeout(hop, 2 * S + MS);
    assert_eq!(
        shard.decide(&c, hop, 4 * S - MS, Category::Reducible),
        OcVerdict::Shed(ShedReason::Unreachable)
    );
    assert_eq!(
        shard.decide(&c, hop, 4 * S, Category::Reducible),
        OcVerdict::Probe
    );
    assert_eq!(c.status(hop, 4 * S).timeouts, 3);
}

#[test]
fn a_raised_rate_is_not_held_back_by_the_old_backlog() {
    let config = ClientConfig {
        resonance: false,
        ..ClientConfig::default()
    };
    let (c, hop) = client(config);
    let mut shard = ClientShard::new(&c, 1);
    let v = |oc: u64, seq: u32| {
        format!("SIP/2.0/UDP p;oc={oc};oc-algo=\"rate\";oc-validity=100000;oc-seq={seq}.0")
    };
    c.on_response(hop, 0, &v(1, 1)).expect("test input");
    // oc=1: priority requests fill the bucket to TAU2 = 10 s ahead.
    while shard.decide(&c, hop, MS, Category::Priority) == OcVerdict::Forward {}
    c.on_response(hop, 2 * MS, &v(1000, 2)).expect("test input");
    // At 1000/s the backlog is at most TAU2 + T = 11 ms, not 10 s: a reducible request
    // goes within 11 ms + TAU1 (5 ms).
    let first = (2..100)
        .map(|k| k * MS)
        .find(|&t| shard.decide(&c, hop, t, Category::Reducible) == OcVerdict::Forward);
    assert!(first.is_some_and(|t| t <= 14 * MS), "{first:?}");
}

#[test]
fn a_tardy_response_after_a_stop_does_not_restart_control() {
    // §5.7: a stop is a value with its oc-seq like any other; an older one is ignored.
    let (c, hop) = client(ClientConfig::default());
    let v = |oc: u32, validity: u32, seq: u32| {
        format!("SIP/2.0/UDP p;oc={oc};oc-algo=\"loss\";oc-validity={validity};oc-seq={seq}.0")
    };
    assert_eq!(
        c.on_response(hop, 0, &v(50, 10000, 10)),
        Ok(Applied::Updated)
    );
    assert_eq!(c.on_response(hop, MS, &v(0, 0, 11)), Ok(Applied::Updated));
    assert_eq!(
        c.on_response(hop, 2 * MS, &v(50, 10000, 10)),
        Ok(Applied::Stale)
    );
    assert_eq!(c.status(hop, 3 * MS).active, None);
}

#[test]
fn a_lock_left_by_a_dead_writer_is_taken_over() {
    // A forked process killed while applying feedback leaves the cell's lock held.
    let (c, hop) = client(ClientConfig::default());
    let via =
        |seq: u32| format!("SIP/2.0/UDP p;oc=20;oc-algo=\"loss\";oc-validity=10000;oc-seq={seq}.0");
    c.cells[hop.index()]
        .lock
        .store(5 * S + 1, Ordering::Release);
    assert_eq!(
        c.on_response(hop, 5 * S + 500 * MS, &via(1)),
        Ok(Applied::Busy)
    );
    assert_eq!(c.on_response(hop, 6 * S + 2, &via(1)), Ok(Applied::Updated));
    assert_eq!(
        c.cells[hop.index()].lock.load(Ordering::Acquire),
        0,
        "released"
    );
    assert_eq!(c.on_response(hop, 6 * S + 3, &via(2)), Ok(Applied::Updated));
}

#[test]
fn configuration_is_checked() {
    let bad = [
        ClientConfig {
            algorithms: Algorithms::Rate,
            ..ClientConfig::default()
        },
        ClientConfig {
            tau_priority: 1.0,
            ..ClientConfig::default()
        },
        ClientConfig {
            tau0: 7.0,
            ..ClientConfig::default()
        },
        ClientConfig {
            reducible_share: f64::NAN,
            ..ClientConfig::default()
        },
        ClientConfig {
            suspend_after: 0,
            ..ClientConfig::default()
        },
    ];
    for b in bad {
        assert!(
            matches!(Client::new(b, 4), Err(OcError::Config { .. })),
            "{b:?}"
        );
    }
    assert!(Client::new(ClientConfig::default(), 0).is_err());
}
