//! The Rust fragments of docs/overload-control.md, in functions that give them their inputs:
//! `make example` compiles and runs this, and tests/docs/samples.py checks that the guide shows
//! each fragment as it stands here.

use std::error::Error;
use std::time::Duration;

use loadctl::prsm::Class;

const INVITE: &[u8] = b"INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/UDP 192.0.2.4:5060;branch=z9hG4bK74bf9\r\n\
From: <sip:alice@example.net>;tag=9fxced76sl\r\n\
To: <sip:bob@example.com>\r\n\
Call-ID: 3848276298220188511@example.net\r\n\
CSeq: 1 INVITE\r\n\
Content-Length: 0\r\n\r\n";

/// PRSM: the detector and the scheduler.
fn prsm(bytes: &[u8], now_ns: u64) -> Result<(), Box<dyn Error>> {
    use loadctl::prsm::{DetectorConfig, RetransmissionDetector, Scheduler, SchedulerConfig};

    let scheduler = Scheduler::new(SchedulerConfig::priority(5_000, 5_000))?;
    let detector = RetransmissionDetector::new(DetectorConfig::default())?;
    // `bytes`: a raw request off the socket; `now_ns`: the caller's monotonic clock.
    let request = loadctl::sip::scan(bytes)?;
    // … shard.classify(&Request::from_sip(&request, transport, time)) accepted it …
    let class = detector.observe(detector.key(&request)?, now_ns);
    if scheduler.push(bytes.to_vec(), class).is_err() {
        // Tail drop: count it, or answer 503 (an original) / ignore it (a retransmission).
    }
    // Workers: while let Some((message, class)) = scheduler.pop() { … send 100 Trying … }
    Ok(())
}

/// RFC 7339 / 7415: a client shard's decision, the client and the server on a response.
fn overload(
    worker_index: u64,
    now_ns: u64,
    top_via: &str,
    class: Class,
    category: loadctl::overload::Category,
    (delay, served, served_retransmissions, busy): (Duration, u64, u64, Duration),
) -> Result<String, Box<dyn Error>> {
    let mut via_out = String::new();
    use loadctl::overload::{Category, client::*, server::*, via::*};

    let client = Client::new(ClientConfig::default(), 64)?; // per proxy, Sync
    let mut shard = ClientShard::new(&client, worker_index); // per worker thread
    let hop = client.hop(hop_key(b"192.0.2.7:5060"), now_ns)?;
    // Sending a new request: ask, then add client.request_params() to the Via you insert.
    match shard.decide(&client, hop, now_ns, Category::Reducible) {
        OcVerdict::Forward | OcVerdict::Probe => { /* send it */ }
        OcVerdict::Shed(_) => { /* another next hop, else 503 without Retry-After */ }
    }
    // A response from that hop (looked up by its source; never added): its top Via.
    if let Some(hop) = client.find(hop_key(b"192.0.2.7:5060")) {
        client.on_response(hop, now_ns, top_via)?;
    }
    // Server: per request, per response, and a load report per period.
    let mut server = Server::new(ServerConfig::default())?;
    server.on_request(
        now_ns,
        b"198.51.100.4:5060",
        Offer::parse(top_via),
        class,
        category,
    );
    if let Some(f) = server.feedback(now_ns, b"198.51.100.4:5060") {
        f.write_via(top_via, &mut via_out)?;
    }
    server.report(
        now_ns,
        Load::Queue(QueueLoad {
            delay,
            served,
            served_retransmissions,
            busy,
        }),
    )?;
    Ok(via_out)
}

fn main() -> Result<(), Box<dyn Error>> {
    prsm(INVITE, 1_000_000)?;
    let via = "SIP/2.0/UDP 198.51.100.4:5060;branch=z9hG4bK1;oc;oc-algo=\"loss,rate\"";
    let written = overload(
        0,
        1_000_000,
        via,
        Class::Original,
        loadctl::overload::Category::Reducible,
        (Duration::ZERO, 10, 0, Duration::from_millis(1)),
    )?;
    assert!(written.is_empty() || written.starts_with("SIP/2.0/UDP 198.51.100.4:5060"));
    Ok(())
}
