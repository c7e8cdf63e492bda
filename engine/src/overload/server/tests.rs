use std::collections::HashMap;
use std::time::Duration;

use super::*;
use crate::overload::{Algorithms, Category};

const MS: u64 = 1_000_000;

fn offer(a: Algorithms) -> Option<Offer> {
    Some(Offer { algorithms: a })
}

#[test]
fn not_overloaded_answers_zero_with_validity_zero() {
    // RFC 7339 §5.1: "if the server is currently not in an overload condition, it MUST set
    // the value of the "oc" parameter to be 0"; "It MUST put the chosen algorithm as the
    // sole parameter value in the "oc-algo" parameter".
    let mut s = Server::new(ServerConfig::default()).expect("test input");
    s.on_request(
        0,
        b"a",
        offer(Algorithms::LossThenRate),
        Class::Original,
        Category::Reducible,
    );
    let f = s.feedback(0, b"a").expect("test input");
    assert_eq!(
        (f.oc, f.algorithm, f.validity_ms),
        (0, Some(Algorithm::Rate), 0)
    );
    assert!(f.seq.is_some(), "§4.4: oc-seq MUST be inserted");
    s.on_request(
        0,
        b"b",
        offer(Algorithms::Loss),
        Class::Original,
        Category::Reducible,
    );
    assert_eq!(
        s.feedback(0, b"b").expect("test input").algorithm,
        Some(Algorithm::Loss)
    );
    s.on_request(0, b"c", None, Class::Original, Category::Reducible);
    assert_eq!(s.feedback(0, b"c"), None);
}

#[test]
fn the_algorithm_stays_for_the_hold_time() {
    // RFC 7339 §5.8: "the algorithm SHOULD NOT change ... for at least 3600 seconds".
    let config = ServerConfig {
        preference: Algorithm::Loss,
        ..ServerConfig::default()
    };
    let mut s = Server::new(config).expect("test input");
    let rate_only = Algorithms::Rate;
    s.on_request(
        0,
        b"a",
        offer(rate_only),
        Class::Original,
        Category::Reducible,
    );
    assert_eq!(
        s.feedback(0, b"a").expect("test input").algorithm,
        Some(Algorithm::Rate)
    );
    // The client now offers both: rate stays within the hour, loss (preferred) after.
    s.on_request(
        1000 * MS,
        b"a",
        offer(Algorithms::LossThenRate),
        Class::Original,
        Category::Reducible,
    );
    assert_eq!(
        s.feedback(1000 * MS, b"a").expect("test input").algorithm,
        Some(Algorithm::Rate)
    );
    let later = 3_600_000 * MS + 1;
    s.on_request(
        later,
        b"a",
        offer(Algorithms::LossThenRate),
        Class::Original,
        Category::Reducible,
    );
    assert_eq!(
        s.feedback(later, b"a").expect("test input").algorithm,
        Some(Algorithm::Loss)
    );
}

/// How a simulated client sends.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sends {
    /// Applies the feedback it gets (loss: thins its stream; rate: caps it).
    Honestly,
    /// Offers overload control but sends its whole rate whatever it is told (RFC 7339 §11's
    /// client that "is not conforming").
    Regardless,
    /// From a new source address for every request (a spoofed flood).
    FromNewAddresses,
}

/// A server of capacity `mu`/s with a queue: clients offer `offered[i]`/s, apply the
/// feedback they get (loss: thin their stream; rate: cap it), every period. Returns
/// the admitted rates in the last second and the server.
fn run_fluid(mu: f64, offered: &[(f64, Option<Algorithms>)], seconds: u64) -> (Vec<f64>, Server) {
    let streams: Vec<_> = offered
        .iter()
        .map(|&(rate, alg)| (rate, alg, Sends::Honestly))
        .collect();
    run_streams(mu, &streams, seconds, |_, _| {})
}

/// As [`run_fluid`], each stream sending as its [`Sends`] says; `watch(server, now)` runs
/// every step.
fn run_streams(
    mu: f64,
    streams: &[(f64, Option<Algorithms>, Sends)],
    seconds: u64,
    mut watch: impl FnMut(&mut Server, u64),
) -> (Vec<f64>, Server) {
    let mut s = Server::new(ServerConfig::default()).expect("test input");
    let dt = 10 * MS;
    let mut backlog = 0.0f64;
    let keys: Vec<Vec<u8>> = (0..streams.len()).map(|i| vec![b'c', i as u8]).collect();
    let mut carry = vec![0.0f64; streams.len()];
    let mut admitted = vec![0.0f64; streams.len()];
    let mut fresh = 0u64;
    let steps = seconds * 1_000_000_000 / dt;
    for k in 0..steps {
        let now = k * dt;
        let mut arriving = 0.0;
        for (i, &(rate, alg, sends)) in streams.iter().enumerate() {
            let fb = s.feedback(now, &keys[i]);
            let send = match fb {
                _ if sends != Sends::Honestly => rate,
                Some(f) if f.validity_ms > 0 && f.algorithm == Some(Algorithm::Loss) => {
                    rate * (1.0 - f.oc as f64 / 100.0)
                }
                Some(f) if f.validity_ms > 0 => rate.min(f.oc as f64),
                _ => rate,
            };
            carry[i] += send * dt as f64 / 1e9;
            while carry[i] >= 1.0 {
                carry[i] -= 1.0;
                let key = if sends == Sends::FromNewAddresses {
                    fresh += 1;
                    format!("198.51.100.{}:{}", fresh % 256, 1024 + fresh / 256).into_bytes()
                } else {
                    keys[i].clone()
                };
                let adm = s.on_request(
                    now,
                    &key,
                    alg.map(|a| Offer { algorithms: a }),
                    Class::Original,
                    Category::Reducible,
                );
                if adm == Admission::Admit {
                    arriving += 1.0;
                    if k >= steps - 100 {
                        admitted[i] += 1.0;
                    }
                }
            }
        }
        backlog += arriving;
        let can = mu * dt as f64 / 1e9;
        let served = backlog.min(can);
        backlog -= served;
        let busy = (served / mu * 1e9) as u64;
        s.report(
            now,
            Load::Queue(QueueLoad {
                delay: Duration::from_secs_f64(backlog / mu),
                served: served.round() as u64,
                served_retransmissions: 0,
                busy: Duration::from_nanos(busy),
            }),
        )
        .expect("test input");
        watch(&mut s, now);
    }
    (admitted, s)
}

#[test]
fn the_law_holds_three_times_capacity_at_capacity() {
    // Physics: a server of μ = 1000/s offered 3000/s can take no more than 1000/s; the law
    // should take at least 95 % of it with the queue delay near the target.
    let (admitted, s) = run_fluid(
        1000.0,
        &[
            (1500.0, Some(Algorithms::LossThenRate)),
            (1500.0, Some(Algorithms::Loss)),
        ],
        30,
    );
    let total: f64 = admitted.iter().sum();
    assert!(s.status().overloaded);
    assert!(
        (950.0..=1050.0).contains(&total),
        "admitted {total}/s: {admitted:?}"
    );
    assert!(
        s.status().delay < Duration::from_millis(200),
        "delay {} ms",
        s.status().delay.as_millis()
    );
    // Equal demands, max-min fair: equal halves within 10 %.
    assert!(
        (admitted[0] - admitted[1]).abs() < 0.1 * total,
        "{admitted:?}"
    );
}

#[test]
fn a_small_client_is_not_cut_and_a_non_participant_gets_no_advantage() {
    // Max-min fairness: 100/s asks less than an equal third of 1000/s, so it keeps it; the
    // non-participant (RFC 7339 §5.10.2) ends up with what the participating big client
    // gets.
    let (admitted, s) = run_fluid(
        1000.0,
        &[
            (100.0, Some(Algorithms::LossThenRate)),
            (2000.0, Some(Algorithms::LossThenRate)),
            (2000.0, None),
        ],
        30,
    );
    assert!((admitted[0] - 100.0).abs() < 10.0, "{admitted:?}");
    assert!(
        (admitted[1] - admitted[2]).abs() < 0.1 * 900.0,
        "{admitted:?}"
    );
    assert!(s.clients().iter().any(|c| c.rejected > 0));
}

#[test]
fn control_stops_with_validity_zero_and_a_new_seq_when_load_falls() {
    // RFC 7339 §5.7: "the SIP server MUST set the value of the "oc-validity" parameter to
    // 0. The SIP server MUST increment the value of "oc-seq"".
    let (_, mut s) = run_fluid(1000.0, &[(3000.0, Some(Algorithms::LossThenRate))], 10);
    let before = s.feedback(10_000 * MS, b"c\0").expect("test input");
    assert!(before.validity_ms > 0);
    // Load falls to half the capacity.
    let mut now = 10_000 * MS;
    for _ in 0..300 {
        now += 10 * MS;
        for _ in 0..5 {
            s.on_request(
                now,
                b"c\0",
                offer(Algorithms::LossThenRate),
                Class::Original,
                Category::Reducible,
            );
        }
        s.report(
            now,
            Load::Queue(QueueLoad {
                delay: Duration::ZERO,
                served: 5,
                served_retransmissions: 0,
                busy: Duration::from_millis(5),
            }),
        )
        .expect("test input");
    }
    let after = s.feedback(now, b"c\0").expect("test input");
    assert_eq!((after.oc, after.validity_ms), (0, 0));
    assert!(after.seq > before.seq);
}

#[test]
fn every_new_value_raises_the_integer_part_of_oc_seq() {
    // RFC 7339 §4.4: values "generated ... at time t and t+1 MUST have an increasing value
    // in the "oc-seq" parameter". A client that compares only the integer before the "."
    // (Kamailio's core Via parser) must see each of them increase too: here the period is
    // 100 ms, so ten values a second.
    let (_, mut s) = run_fluid(1000.0, &[(3000.0, Some(Algorithms::LossThenRate))], 10);
    let mut now = 10_000 * MS;
    let seq_of = |s: &mut Server, now| {
        s.feedback(now, b"c\0")
            .and_then(|f| f.seq)
            .expect("test input")
    };
    let mut last = seq_of(&mut s, now);
    let mut rises = 0;
    for _ in 0..20 {
        now += 100 * MS;
        for _ in 0..300 {
            s.on_request(
                now,
                b"c\0",
                offer(Algorithms::LossThenRate),
                Class::Original,
                Category::Reducible,
            );
        }
        s.report(
            now,
            Load::Queue(QueueLoad {
                delay: Duration::from_millis(400),
                served: 100,
                served_retransmissions: 0,
                busy: Duration::from_millis(100),
            }),
        )
        .expect("test input");
        let seq = seq_of(&mut s, now);
        if seq != last {
            assert!(
                seq.0 / Seq::SCALE > last.0 / Seq::SCALE,
                "{last} then {seq}: the integer part did not rise"
            );
            rises += 1;
        }
        last = seq;
    }
    assert!(
        rises >= 19,
        "a new value every period under overload: {rises} of 20"
    );
}

fn occupancy(measured: f64, target: f64) -> Load {
    Load::Occupancy { measured, target }
}

#[test]
fn occupancy_signal_scales_the_admitted_rate() {
    // The occupancy law: admitted 1000/s at 100 % CPU against a target of 80 % → 800/s.
    let mut s = Server::new(ServerConfig::default()).expect("test input");
    let mut now = 0;
    for _ in 0..3 {
        for k in 0..100 {
            s.on_request(
                now + k * MS,
                b"a",
                offer(Algorithms::LossThenRate),
                Class::Original,
                Category::Reducible,
            );
        }
        now += 100 * MS;
        s.report(now - 1, occupancy(1.0, 0.8)).expect("test input");
    }
    s.handle_timeout(now + 1);
    assert!(s.status().overloaded);
    assert!((s.status().target - 800.0).abs() < 20.0, "{:?}", s.status());
    assert!(s.report(now, occupancy(f64::NAN, 0.8)).is_err());
}

#[test]
fn the_occupancy_law_counts_admissions_over_the_measured_interval() {
    // Reports every 200 ms, twice the law's period, of traffic that arrives in the first
    // half of each report's interval only (200 requests, then 100 ms of silence): the
    // measurement covers 1000/s, so 100 % against a target of 80 % means 800/s. A count
    // over the law's last period alone would read 0/s or 2000/s.
    let mut s = Server::new(ServerConfig::default()).expect("test input");
    s.handle_timeout(0);
    let mut now = 0;
    for _ in 0..5 {
        for k in 0..200 {
            s.on_request(
                now + k * MS / 2,
                b"a",
                offer(Algorithms::LossThenRate),
                Class::Original,
                Category::Reducible,
            );
        }
        now += 200 * MS;
        s.report(now, occupancy(1.0, 0.8)).expect("test input");
        s.handle_timeout(now + 100 * MS);
        let target = s.status().target;
        assert!((target - 800.0).abs() < 1e-6, "{:?}", s.status());
    }
}

#[test]
fn servers_on_one_clock_order_their_values_by_time() {
    // RFC 7339 §4.4: values "generated ... at time t and t+1 MUST have an increasing value
    // in the "oc-seq" parameter". Two workers of one appliance, each with its own law,
    // answer the same client: a busy one runs its law every period, a quiet one every
    // 500 ms. The value the quiet one makes last is the newest, so it must carry the
    // higher oc-seq, or the client would keep following the busy one.
    let load = |s: &mut Server, now: u64| {
        s.on_request(
            now,
            b"c",
            offer(Algorithms::Loss),
            Class::Original,
            Category::Reducible,
        );
        s.report(
            now,
            Load::Queue(QueueLoad {
                delay: Duration::from_millis(400),
                served: 10,
                served_retransmissions: 0,
                busy: Duration::from_millis(10),
            }),
        )
        .expect("test input");
    };
    let (mut busy, mut quiet) = (
        Server::new(ServerConfig::default()).expect("test input"),
        Server::new(ServerConfig::default()).expect("test input"),
    );
    let t0 = 7_000 * MS;
    for k in 0..=300 {
        load(&mut busy, t0 + k * 10 * MS);
        if k % 50 == 0 && k < 300 {
            load(&mut quiet, t0 + k * 10 * MS);
        }
    }
    quiet.handle_timeout(t0 + 3_150 * MS);
    let (b, q) = (busy.status(), quiet.status());
    assert!(b.overloaded && q.overloaded, "{b:?} {q:?}");
    assert!(q.seq > b.seq, "the later value {} after {}", q.seq, b.seq);
    assert!(
        q.seq.0 / Seq::SCALE > b.seq.0 / Seq::SCALE,
        "{} after {}",
        q.seq,
        b.seq
    );
}

#[test]
fn retransmissions_raise_the_alarm() {
    let mut s = Server::new(ServerConfig::default()).expect("test input");
    for k in 0..100 {
        let class = if k % 10 == 0 {
            Class::Retransmission
        } else {
            Class::Original
        };
        s.on_request(
            k * MS,
            b"a",
            offer(Algorithms::Loss),
            class,
            Category::Reducible,
        );
    }
    s.handle_timeout(101 * MS);
    assert!(s.status().overloaded, "10 % retransmissions > 5 %");
}

#[test]
fn a_client_arriving_in_overload_is_measured_before_it_is_bound() {
    // RFC 7415 §3.5.1: "when the "oc" parameter is 0 with a non-zero "oc-validity", then the
    // client should reject 100% of SIP requests": a newcomer must not be told oc=0 before
    // the law has measured it, or it could never be measured.
    let (_, mut s) = run_fluid(1000.0, &[(3000.0, Some(Algorithms::LossThenRate))], 5);
    assert!(s.status().overloaded);
    let now = 5_000 * MS;
    s.on_request(
        now,
        b"newcomer",
        offer(Algorithms::LossThenRate),
        Class::Original,
        Category::Reducible,
    );
    let f = s.feedback(now, b"newcomer").expect("takes part");
    assert_eq!(f.validity_ms, 0, "no binding value yet: {f:?}");
    // Its in-dialog requests are never rejected, even without oc (§5.10.1).
    for k in 0..100 {
        assert_eq!(
            s.on_request(now + k, b"plain", None, Class::Original, Category::Priority),
            Admission::Admit
        );
    }
}

#[test]
fn loss_percent_rounds_up() {
    assert_eq!(loss_percent(0.0), 0);
    assert_eq!(loss_percent(0.101), 11);
    assert_eq!(loss_percent(0.1), 10);
    assert_eq!(loss_percent(1.0), 99);
}

#[test]
fn a_change_within_a_period_reaches_the_client() {
    // RFC 7339 §4.4: values "generated by an overload control algorithm at time t and t+1
    // MUST have an increasing value in the "oc-seq" parameter"; §5.4: under the oc-seq it
    // holds, a client keeps what it has ("If these values match, the response does not update
    // the overload control parameters"). Here the client stops offering rate within the
    // period in which it was told rate: what it is told next must reach it.
    use crate::overload::client::{Applied, Client, ClientConfig, hop_key};
    let (_, mut s) = run_fluid(1000.0, &[(3000.0, Some(Algorithms::LossThenRate))], 10);
    let key = b"c\0";
    let now = 10_000 * MS;
    let client = Client::new(ClientConfig::default(), 4).expect("test input");
    let hop = client.hop(hop_key(b"server"), now).expect("test input");
    let apply = |s: &mut Server, now: u64| {
        let f = s.feedback(now, key).expect("a participant");
        let mut via = String::new();
        f.write_via(
            "SIP/2.0/UDP client;branch=z9hG4bK1;oc;oc-algo=\"loss,rate\"",
            &mut via,
        )
        .expect("test input");
        (f, client.on_response(hop, now, &via).expect("well-formed"))
    };
    let (rate, applied) = apply(&mut s, now);
    assert_eq!(rate.algorithm, Some(Algorithm::Rate), "{rate:?}");
    assert!(rate.validity_ms > 0, "in overload: {rate:?}");
    assert_eq!(applied, Applied::Updated);
    // The same period: the client now offers loss only.
    s.on_request(
        now + MS,
        key,
        offer(Algorithms::Loss),
        Class::Original,
        Category::Reducible,
    );
    let (loss, applied) = apply(&mut s, now + 2 * MS);
    assert_eq!(loss.algorithm, Some(Algorithm::Loss), "{loss:?}");
    assert!(loss.seq > rate.seq, "{loss:?} after {rate:?}");
    assert_eq!(applied, Applied::Updated);
    assert_eq!(
        client.status(hop, now + 2 * MS).active.map(|(a, _)| a),
        Some(Algorithm::Loss)
    );
    // Told the same again: the same oc-seq, nothing to update.
    let (again, applied) = apply(&mut s, now + 3 * MS);
    assert_eq!((again.seq, applied), (loss.seq, Applied::Same));
}

#[test]
fn oc_seq_never_falls_and_rises_with_every_change() {
    // The property behind §4.4 and §5.4, over random traffic: for each client, consecutive
    // feedback never has a lower oc-seq, and different values always a higher one.
    let mut s = Server::new(ServerConfig::default()).expect("test input");
    let offers = [
        offer(Algorithms::Loss),
        offer(Algorithms::LossThenRate),
        offer(Algorithms::RateThenLoss),
        None,
    ];
    let mut last: HashMap<u8, Feedback> = HashMap::new();
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for step in 0..200_000u64 {
        let now = step * MS / 10;
        let r = next();
        let key = [(r % 6) as u8];
        s.on_request(
            now,
            &key,
            offers[(r >> 8) as usize % offers.len()],
            Class::Original,
            Category::Reducible,
        );
        if step % 50 == 0 {
            s.report(
                now,
                Load::Queue(QueueLoad {
                    delay: Duration::from_millis((r >> 16) % 600),
                    served: 40,
                    served_retransmissions: 0,
                    busy: Duration::from_millis(5),
                }),
            )
            .expect("test input");
        }
        if let Some(f) = s.feedback(now, &key) {
            if let Some(before) = last.get(&key[0]) {
                assert!(f.seq >= before.seq, "{f:?} after {before:?}");
                if (f.algorithm, f.oc, f.validity_ms)
                    != (before.algorithm, before.oc, before.validity_ms)
                {
                    assert!(f.seq > before.seq, "{f:?} after {before:?} at {now}");
                }
            }
            last.insert(key[0], f);
        }
    }
    assert!(last.len() >= 4, "{last:?}");
}

#[test]
fn a_flood_from_new_addresses_is_one_client_and_costs_a_participant_nothing() {
    // RFC 7339 §11: false overload control and exhaustion from an attacker who can send from
    // any address. Physics: a server of 1,000/s shared max-min fairly between one participant
    // asking 600/s and a flood of 3,000/s from one-off addresses counted as one client gives
    // each about 500/s; the participant is never forgotten nor told to stop while the server
    // is in overload, and the table never holds more than its slots.
    let mut told_stop_in_overload = 0;
    let (admitted, s) = run_streams(
        1000.0,
        &[
            (600.0, Some(Algorithms::LossThenRate), Sends::Honestly),
            (3000.0, None, Sends::FromNewAddresses),
        ],
        20,
        |s, now| {
            if s.status().overloaded && s.feedback(now, b"c\0").is_some_and(|f| f.validity_ms == 0)
            {
                told_stop_in_overload += 1;
            }
        },
    );
    let (participant, flood) = (admitted[0], admitted[1]);
    assert!(
        participant >= 450.0,
        "participant admitted {participant}/s, flood {flood}/s"
    );
    assert!(
        flood <= 600.0,
        "flood admitted {flood}/s, participant {participant}/s"
    );
    assert!(participant + flood <= 1100.0, "{participant} + {flood}");
    // Told "stop" only in its first period of overload, before the law has measured it.
    assert!(
        told_stop_in_overload <= 10,
        "{told_stop_in_overload} steps told oc-validity=0"
    );
    let status = s.status();
    assert!(status.overloaded);
    assert!(status.clients <= 1024, "{status:?}");
    let clients = s.clients();
    let p = clients
        .iter()
        .find(|c| c.key == b"c\0")
        .expect("the participant stays");
    assert!(!p.newcomer && !p.nonconforming && p.oc > 0, "{p:?}");
    let aggregate = clients.last().expect("the newcomers' row");
    assert!(
        aggregate.key.is_empty() && aggregate.newcomer && aggregate.rejected > 10_000,
        "{aggregate:?}"
    );
}

#[test]
fn a_participant_that_does_not_reduce_is_treated_as_not_taking_part() {
    // RFC 7339 §11: "If a client is not conforming to such policies, then the server should
    // treat it as a non-supporting client (see Section 5.10.2)". Physics: two clients asking
    // 1,000/s each of a server of 1,000/s get about 500/s each, whatever the second one does
    // with what it is told.
    for algorithms in [Algorithms::Loss, Algorithms::RateThenLoss] {
        let (admitted, s) = run_streams(
            1000.0,
            &[
                (1000.0, Some(algorithms), Sends::Honestly),
                (1000.0, Some(algorithms), Sends::Regardless),
            ],
            20,
            |_, _| {},
        );
        let (honest, cheat) = (admitted[0], admitted[1]);
        assert!(
            honest >= 400.0,
            "{algorithms:?}: honest {honest}/s, cheat {cheat}/s"
        );
        assert!(
            cheat <= 600.0,
            "{algorithms:?}: cheat {cheat}/s, honest {honest}/s"
        );
        let clients = s.clients();
        let report = |k: &[u8]| {
            clients
                .iter()
                .find(|c| c.key == k)
                .expect("tracked")
                .clone()
        };
        assert!(report(b"c\x01").nonconforming, "{:?}", report(b"c\x01"));
        assert!(!report(b"c\0").nonconforming, "{:?}", report(b"c\0"));
    }
}

#[test]
fn a_conforming_participant_is_not_marked() {
    // The tolerance against chance: a participant sending Poisson traffic at exactly its
    // allowed rate, for 100,000 periods of 100 ms at each of 10, 100 and 1,000 requests/s.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut uniform = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    for allowed in [10.0, 100.0, 1000.0] {
        let mut state = ClientState {
            member: true,
            algorithm: Some(Algorithm::Rate),
            allocated: true,
            rate: allowed as u64,
            ..ClientState::default()
        };
        let mean = allowed * 0.1;
        let mut marked = 0;
        for _ in 0..100_000 {
            // Poisson(mean) by counting exponential gaps in one period.
            let (mut sent, mut t) = (0.0, -uniform().ln() / mean);
            while t < 1.0 {
                sent += 1.0;
                t += -uniform().ln() / mean;
            }
            law::conformance(&mut state, sent, 0.1, true);
            marked += u32::from(state.nonconforming);
        }
        assert_eq!(marked, 0, "at {allowed}/s");
    }
    // and the same client sending 1.5 times its rate is marked within seconds
    let mut state = ClientState {
        member: true,
        algorithm: Some(Algorithm::Rate),
        allocated: true,
        rate: 100,
        ..ClientState::default()
    };
    let periods = (0..100)
        .position(|_| {
            law::conformance(&mut state, 15.0, 0.1, true);
            state.nonconforming
        })
        .expect("marked");
    assert!(periods <= 25, "marked after {periods} periods");
}
