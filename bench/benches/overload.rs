//! Feedback overload control (RFC 7339 / RFC 7415, `engine/src/overload`), one call each:
//!
//! - `oc-decide`: the client's decision ([`ClientShard::decide`]), which sits on the request
//!   path next to classification, on a hop with no control in force, under loss control
//!   (`oc=30`), under rate control with a full bucket (`oc=1`: every request shed, the
//!   read-only path) and with a bucket that admits every request (`oc=MAX_RATE`, 1 µs between
//!   requests: one compare-and-swap on the shared bucket per call). Each on a table the
//!   client owns (`owned/…`) and on a [`Client::shared`] table of host memory (`shared/…`, a
//!   leaked `Box`), which must cost the same.
//! - `oc-response`: [`Client::on_response`] with a Via carrying loss feedback, the same
//!   `oc-seq` as the values in force (the common case: a server repeats its values in every
//!   response of a period) and a new `oc-seq` in every response (the values are applied).
//! - `oc-server`: [`Server::on_request`] for a client that takes part and for one that does
//!   not (while the server is in overload), reading a request's offer ([`Offer::parse`]), and
//!   a response's feedback ([`Server::feedback`] + [`Feedback::write_via`] into a reused
//!   `String`).
//!
//! Time is simulated: a counter advancing 1 µs per call. Requests follow the default mix, one
//! in five in the priority category (RFC 7339 §7.2's `cat1 = 80 %`).
//!
//! `cargo bench -p loadctl-bench --bench overload`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use loadctl::overload::client::{
    Applied, Client, ClientConfig, ClientShard, Hop, HopCell, OcVerdict, hop_key,
};
use loadctl::overload::server::{Admission, Load, Server, ServerConfig};
use loadctl::overload::via::{Feedback, MAX_VALIDITY_MS, Offer};
use loadctl::overload::{Algorithm, Category, MAX_RATE, Seq};
use loadctl::prsm::Class;

const HOP: &[u8] = b"192.0.2.7:5060";
/// 1 µs between requests.
const STEP: u64 = 1_000;
/// Where simulated time starts (an hour in, so nothing sits at 0).
const T0: u64 = 3_600_000_000_000;

/// The category of the `i`-th request: one in five is priority.
fn category(i: u64) -> Category {
    if i % 5 == 4 {
        Category::Priority
    } else {
        Category::Reducible
    }
}

/// The feedback a hop is put under: `None` for no control.
fn feedback(kind: &str) -> Option<Feedback> {
    let (algorithm, oc) = match kind {
        "none" => return None,
        "loss-30" => (Algorithm::Loss, 30),
        "rate-full" => (Algorithm::Rate, 1),
        _ => (Algorithm::Rate, MAX_RATE),
    };
    // Valid for a day: the simulated time of a whole bench run stays inside it.
    Some(Feedback {
        oc,
        algorithm: Some(algorithm),
        validity_ms: MAX_VALIDITY_MS,
        seq: Some(Seq::from_ns(T0)),
    })
}

/// A client on `cells` (a shared table) or on its own table, with the hop under `kind`.
fn client(kind: &str, cells: Option<&'static [HopCell]>) -> (Client, Hop) {
    let config = ClientConfig::default();
    let client = match cells {
        Some(cells) => Client::shared(config, cells),
        None => Client::new(config, 64),
    }
    .expect("config");
    let hop = client.hop(hop_key(HOP), T0).expect("room");
    let applied = client.apply(hop, T0, feedback(kind));
    assert_eq!(
        applied,
        if kind == "none" {
            Applied::NoFeedback
        } else {
            Applied::Updated
        }
    );
    (client, hop)
}

fn bench_decide(c: &mut Criterion) {
    let mut group = c.benchmark_group("oc-decide");
    group.throughput(Throughput::Elements(1));
    for table in ["owned", "shared"] {
        for kind in ["none", "loss-30", "rate-full", "rate-admit"] {
            let cells = (table == "shared").then(|| {
                let cells: Box<[HopCell]> = (0..64).map(|_| HopCell::default()).collect();
                &*Box::leak(cells)
            });
            let (client, hop) = client(kind, cells);
            let mut shard = ClientShard::new(&client, 1);
            let mut i = 0u64;
            // Check that the path is the one named: the verdicts of the first 100,000.
            let mut forwarded = 0u64;
            for _ in 0..100_000 {
                i += 1;
                let v = shard.decide(&client, hop, T0 + i * STEP, category(i));
                forwarded += u64::from(v == OcVerdict::Forward);
            }
            match kind {
                "none" | "rate-admit" => assert_eq!(forwarded, 100_000, "{kind}"),
                // 30 % of the requests shed, out of the reducible ones.
                "loss-30" => assert!((69_000..71_000).contains(&forwarded), "{forwarded}"),
                // oc=1: the bucket's first admissions, then one per simulated second.
                _ => assert!(forwarded < 20, "{forwarded}"),
            }
            group.bench_function(format!("{table}/{kind}"), |b| {
                b.iter(|| {
                    i += 1;
                    shard.decide(&client, black_box(hop), T0 + i * STEP, category(i))
                })
            });
        }
    }
    group.finish();
}

/// The top Via of a response from a server giving loss feedback with `oc-seq` `seq`.
fn response_via(seq: Seq) -> String {
    format!(
        "SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK776asdhds;received=192.0.2.1;oc=30;\
         oc-algo=\"loss\";oc-validity=500;oc-seq={seq}"
    )
}

fn bench_response(c: &mut Criterion) {
    let mut group = c.benchmark_group("oc-response");
    group.throughput(Throughput::Elements(1));

    // The same oc-seq as the values in force: the response changes nothing. Its arrival time
    // stays inside the validity (500 ms) of the values it applied first.
    let client = Client::new(ClientConfig::default(), 64).expect("config");
    let hop = client.hop(hop_key(HOP), T0).expect("room");
    let via = response_via(Seq::from_ns(T0));
    assert_eq!(client.on_response(hop, T0, &via), Ok(Applied::Updated));
    assert_eq!(client.on_response(hop, T0 + 1_000, &via), Ok(Applied::Same));
    group.bench_function("same-seq", |b| {
        b.iter(|| client.on_response(black_box(hop), T0 + 1_000, black_box(&via)))
    });

    // A new oc-seq in every response: the values are applied each time. The Via texts are
    // made outside the timing (criterion's batches), and dropped outside it.
    let client = Client::new(ClientConfig::default(), 64).expect("config");
    let hop = client.hop(hop_key(HOP), T0).expect("room");
    let mut t = T0;
    group.bench_function("new-seq", |b| {
        b.iter_batched_ref(
            || {
                t += STEP;
                (t, response_via(Seq::from_ns(t)))
            },
            |(t, via)| {
                let applied = client.on_response(hop, *t, via);
                debug_assert_eq!(applied, Ok(Applied::Updated));
                applied
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// The top Via of a request from a client that takes part, as the server received it.
const REQUEST_VIA: &str = "SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK776asdhds;received=192.0.2.7;oc;oc-algo=\"loss,rate\"";
const OTHER: &[u8] = b"192.0.2.9:5060";

fn bench_server(c: &mut Criterion) {
    let mut group = c.benchmark_group("oc-server");
    group.throughput(Throughput::Elements(1));
    let offer = Offer::parse(REQUEST_VIA);
    assert!(offer.is_some());
    // A server in overload (an occupancy above its target, which stays reported), with the
    // client known and told a rate, and a client that does not take part.
    let mut server = Server::new(ServerConfig::default()).expect("config");
    let mut t = T0;
    for i in 0..2_000u64 {
        t += 100_000;
        server.on_request(t, HOP, offer, Class::Original, category(i));
        server.on_request(t, OTHER, None, Class::Original, category(i));
        if i % 500 == 0 {
            server
                .report(
                    t,
                    Load::Occupancy {
                        measured: 1.2,
                        target: 0.8,
                    },
                )
                .expect("valid");
        }
    }
    assert!(server.status().overloaded);
    let rejected = (0..1_000u64)
        .filter(|&i| {
            t += STEP;
            server.on_request(t, OTHER, None, Class::Original, category(i)) == Admission::Reject
        })
        .count();
    assert!(
        rejected > 0,
        "the server rejects some of a non-participant's requests"
    );
    let fb = server.feedback(t, HOP).expect("takes part");
    assert_eq!(fb.algorithm, Some(Algorithm::Rate));
    assert!(fb.validity_ms > 0 && fb.oc > 0, "{fb:?}");

    let mut i = 0u64;
    group.bench_function("offer-parse", |b| {
        b.iter(|| Offer::parse(black_box(REQUEST_VIA)))
    });
    group.bench_function("on-request/participant", |b| {
        b.iter(|| {
            i += 1;
            t += STEP;
            server.on_request(
                t,
                black_box(HOP),
                black_box(offer),
                Class::Original,
                category(i),
            )
        })
    });
    group.bench_function("on-request/non-participant", |b| {
        b.iter(|| {
            i += 1;
            t += STEP;
            server.on_request(t, black_box(OTHER), None, Class::Original, category(i))
        })
    });
    let mut out = String::with_capacity(256);
    group.bench_function("feedback+write-via", |b| {
        b.iter(|| {
            t += STEP;
            out.clear();
            let f = server.feedback(t, black_box(HOP))?;
            f.write_via(black_box(REQUEST_VIA), &mut out).ok()?;
            Some(out.len())
        })
    });
    assert!(out.contains(";oc-algo=\"rate\""), "{out}");
    group.finish();
}

criterion_group!(overload, bench_decide, bench_response, bench_server);
criterion_main!(overload);
