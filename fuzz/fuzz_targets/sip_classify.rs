//! Any bytes as a raw SIP message, scanned and classified against a policy that looks at every
//! header field: never a panic, and a decision is always one of the documented verdicts with
//! a status that matches it.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use loadctl::runtime::{Engine, EngineConfig, Request, Time, Transport, Verdict};
use loadctl::policy::{Limits, read};
use loadctl::sip::scan;

const POLICY: &str = r#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy" xmlns:lc="urn:ietf:params:xml:ns:load-control" version="0" state="full">
<rule id="tel"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix="+1"><except-tel prefix="+1-800"/></many-tel></lc:to></lc:sip></lc:call-identity></conditions>
<actions><lc:accept alt-action="redirect" alt-target="sip:ivr@example.com"><lc:rate>2</lc:rate></lc:accept></actions></rule>
<rule id="dom"><conditions><lc:call-identity><lc:sip><lc:from><many domain="example.com"><except id="sip:vip@example.com"/></many></lc:from><lc:p-asserted-identity><many/></lc:p-asserted-identity></lc:sip></lc:call-identity></conditions>
<actions><lc:accept><lc:win>3</lc:win></lc:accept></actions></rule>
<rule id="ruri"><conditions><lc:call-identity><lc:sip><lc:request-uri><one id="sip:vote@tv.example;transport=udp"/></lc:request-uri></lc:sip></lc:call-identity><method>MESSAGE</method></conditions>
<actions><lc:accept alt-action="drop"><lc:percent>50</lc:percent></lc:accept></actions></rule>
</ruleset>"#;

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let doc = read(POLICY.as_bytes(), &Limits::default()).expect("the fuzz policy reads");
        Engine::from_ruleset(
            doc.ruleset,
            EngineConfig::default().with_shards(1),
        )
        .expect("the fuzz policy publishes")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(sip) = scan(data) else {
        return;
    };
    let time = Time {
        monotonic_ns: 1_000_000_000,
        unix_ns: 1_700_000_000_000_000_000,
    };
    let request = Request::from_sip(&sip, Transport::Udp, Some(time));
    let mut shard = engine().attach();
    let d = shard.classify(&request);
    match d.verdict {
        Verdict::Accept => assert_eq!(d.status(), None),
        Verdict::Reject => assert_eq!(d.status(), Some(503)),
        Verdict::Redirect => assert!(!d.targets().is_empty()),
        Verdict::Drop => {}
    }
    if let Some(t) = d.ticket {
        shard.complete(t);
    }
});
