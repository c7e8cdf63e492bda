//! A fixed-work driver for instruction counts of the overload-control client's decision
//! (`ClientShard::decide`, `engine/src/overload/client/shard.rs`): `N` decisions on one hop, with
//! synthetic time (1 µs apart) and the default mix (one request in five in the priority
//! category), inside one non-inlined function so callgrind can count just that part.
//!
//! `valgrind --tool=callgrind --toggle-collect='*oc_loop*' \
//!   target/release/examples/oc_count loss-30 100000`
//!
//! Modes: `none` (no control in force), `loss-30` (loss-based, `oc=30`), `rate-full`
//! (rate-based, `oc=1`: the bucket is full, every request is shed), `rate-admit` (rate-based,
//! `oc=MAX_RATE`: every request is admitted, one compare-and-swap each), each also as
//! `shared-…` on a `Client::shared` table; `floor` (the loop alone: time, category, a
//! `black_box`). Instructions per decision = Ir / N. Two more, for comparison: `offer-parse`
//! (a server reading a request's offer, `Offer::parse`) and `response-same`
//! (`Client::on_response` with the `oc-seq` in force: parsing the Via, nothing applied).

use std::hint::black_box;

use loadctl::overload::client::{
    Applied, Client, ClientConfig, ClientShard, Hop, HopCell, OcVerdict, hop_key,
};
use loadctl::overload::via::{Feedback, MAX_VALIDITY_MS, Offer};
use loadctl::overload::{Algorithm, Category, MAX_RATE, Seq};

const T0: u64 = 3_600_000_000_000;

fn category(i: u64) -> Category {
    if i % 5 == 4 {
        Category::Priority
    } else {
        Category::Reducible
    }
}

#[inline(never)]
fn decide_oc_loop(shard: &mut ClientShard, client: &Client, hop: Hop, n: u64) -> u64 {
    let mut forwarded = 0u64;
    for i in 1..=n {
        let v = shard.decide(client, hop, T0 + i * 1_000, category(i));
        forwarded += u64::from(v == OcVerdict::Forward);
    }
    forwarded
}

#[inline(never)]
fn response_oc_loop(client: &Client, hop: Hop, via: &str, n: u64) -> u64 {
    let mut same = 0u64;
    for _ in 0..n {
        let a = client.on_response(hop, T0 + 1_000, black_box(via));
        same += u64::from(a == Ok(Applied::Same));
    }
    same
}

#[inline(never)]
fn offer_oc_loop(via: &str, n: u64) -> u64 {
    let mut some = 0u64;
    for _ in 0..n {
        some += u64::from(Offer::parse(black_box(via)).is_some());
    }
    some
}

#[inline(never)]
fn floor_oc_loop(n: u64) -> u64 {
    let mut forwarded = 0u64;
    for i in 1..=n {
        let v = black_box((T0 + i * 1_000, category(i)));
        forwarded += u64::from(v.1 == Category::Reducible);
    }
    forwarded
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "loss-30".into());
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    if which == "offer-parse" {
        let k = offer_oc_loop(
            "SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK776asdhds;received=192.0.2.7;oc;\
             oc-algo=\"loss,rate\"",
            n,
        );
        println!("{which}: {n} parses, {k} offers");
        return;
    }
    if which == "response-same" {
        let client = Client::new(ClientConfig::default(), 64).expect("config");
        let hop = client.hop(hop_key(b"192.0.2.7:5060"), 0).expect("room");
        let via = format!(
            "SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK776asdhds;received=192.0.2.1;oc=30;\
             oc-algo=\"loss\";oc-validity=500;oc-seq={}",
            Seq::from_ns(T0)
        );
        client.on_response(hop, T0, &via).expect("valid");
        let k = response_oc_loop(&client, hop, &via, n);
        println!("{which}: {n} responses, {k} same");
        return;
    }
    if which == "floor" {
        let f = floor_oc_loop(n);
        println!("{which}: {n} iterations, {f} reducible");
        return;
    }
    let (shared, kind) = match which.strip_prefix("shared-") {
        Some(kind) => (true, kind),
        None => (false, which.as_str()),
    };
    let (algorithm, oc) = match kind {
        "none" => (None, 0),
        "loss-30" => (Some(Algorithm::Loss), 30),
        "rate-full" => (Some(Algorithm::Rate), 1),
        "rate-admit" => (Some(Algorithm::Rate), MAX_RATE),
        other => {
            eprintln!("unknown mode {other:?}");
            std::process::exit(2);
        }
    };
    let config = ClientConfig::default();
    let client = if shared {
        let cells: Box<[HopCell]> = (0..64).map(|_| HopCell::default()).collect();
        Client::shared(config, Box::leak(cells))
    } else {
        Client::new(config, 64)
    }
    .expect("config");
    let hop = client.hop(hop_key(b"192.0.2.7:5060"), 0).expect("room");
    client.apply(
        hop,
        T0,
        algorithm.map(|algorithm| Feedback {
            oc,
            algorithm: Some(algorithm),
            validity_ms: MAX_VALIDITY_MS,
            seq: Some(Seq::from_ns(T0)),
        }),
    );
    let mut shard = ClientShard::new(&client, 1);
    let forwarded = decide_oc_loop(&mut shard, &client, hop, n);
    println!("{which}: {n} decisions, {forwarded} forwarded");
}
