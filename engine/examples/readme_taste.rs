//! The Rust sample of the README: `make test` runs it, and checks that the README shows this file.

use loadctl::{Engine, EngineConfig, Request, Source, Transport, Verdict};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::new(EngineConfig::default()); // Send + Sync, cheap to clone
    let policy =
        br#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy" version="0" state="full">
        <rule id="hotline"><conditions>
          <call-identity><sip><to><many-tel prefix="+1-212"/></to></sip></call-identity>
          <method>INVITE</method></conditions>
        <actions><accept><rate>0</rate></accept></actions></rule></ruleset>"#;
    let doc = loadctl::policy::read(policy, &Default::default())?; // e.g. a NOTIFY body
    engine.apply(&Source::local("operator"), doc.ruleset)?; // full replaces, partial merges

    // On each worker thread: its own shard; no lock, no allocation per request.
    let mut shard = engine.attach(); // or attach_pinned(core)
    let invite = b"INVITE sip:+12125551234@gw.example.com;user=phone SIP/2.0\r\n\
        Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1\r\nFrom: <sip:alice@example.com>;tag=1\r\n\
        To: <tel:+1-212-555-1234>\r\nCall-ID: 1@192.0.2.1\r\nCSeq: 1 INVITE\r\n\r\n";
    let sip = loadctl::sip::scan(invite)?;
    let decision = shard.classify(&Request::from_sip(&sip, Transport::Udp, None));
    assert_eq!(decision.verdict, Verdict::Reject);
    if let Some(ticket) = decision.ticket {
        shard.complete(ticket); // a window rule's slot, given back when the transaction ends
    }
    Ok(())
}
