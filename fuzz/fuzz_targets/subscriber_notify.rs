//! The subscriber state machine driven by an arbitrary sequence of NOTIFYs (any subscription
//! state, content type, CSeq, version, full or partial body, or raw bytes as the body), SIP
//! responses to its own requests, and timer expiries. Never a panic; every NOTIFY gets a final
//! answer; and whatever the subscriber publishes, the engine's policy for the notifier is a
//! full ruleset whose version the subscriber last accepted.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use loadctl::event::subscriber::{Subscriber, SubscriberConfig};
use loadctl::event::{EventRequest, Method, NameAddr, Response};
use loadctl::policy::Uri;
use loadctl::runtime::{Engine, EngineConfig};

const NS: &str = "xmlns=\"urn:ietf:params:xml:ns:common-policy\" xmlns:lc=\"urn:ietf:params:xml:ns:load-control\"";

#[derive(Arbitrary, Debug)]
enum Body {
    Rules {
        version: u8,
        partial: bool,
        rules: Vec<(u8, u8, bool)>,
    },
    Raw(Vec<u8>),
    Empty,
}

#[derive(Arbitrary, Debug)]
enum Step {
    Notify {
        cseq: u8,
        state: u8,
        content_type: u8,
        body: Body,
        other_dialog: bool,
    },
    Answer {
        status: u16,
        expires: Option<u16>,
    },
    Wait {
        seconds: u16,
    },
}

fn uri(s: &str) -> Uri {
    Uri::new(s).expect("a valid URI")
}

fn body(b: Body) -> Vec<u8> {
    match b {
        Body::Raw(bytes) => bytes,
        Body::Empty => Vec::new(),
        Body::Rules {
            version,
            partial,
            rules,
        } => {
            let mut xml = format!(
                "<ruleset {NS} version=\"{version}\" state=\"{}\">",
                if partial { "partial" } else { "full" }
            );
            for (id, rate, delete) in rules.into_iter().take(8) {
                let id = id % 6;
                if delete {
                    xml.push_str(&format!(
                        "<rule id=\"r{id}\"><conditions/><actions/></rule>"
                    ));
                } else {
                    xml.push_str(&format!(
                        "<rule id=\"r{id}\"><conditions><lc:call-identity><lc:sip><lc:to>\
                         <many-tel prefix=\"+{id}\"/></lc:to></lc:sip></lc:call-identity>\
                         </conditions><actions><lc:accept><lc:rate>{rate}</lc:rate></lc:accept>\
                         </actions></rule>"
                    ));
                }
            }
            xml.push_str("</ruleset>");
            xml.into_bytes()
        }
    }
}

fuzz_target!(|steps: Vec<Step>| {
    let engine = Engine::new(EngineConfig::default().with_shards(1));
    let mut config = SubscriberConfig::new(
        uri("sip:sbc.example.com"),
        uri("sip:proxy.upstream.example"),
        "cid",
        "up",
    );
    config.scope_to_notifier = false;
    let mut s = Subscriber::new(config, engine.clone(), 0);
    let mut now = 0u64;
    let mut last_sent: Option<EventRequest> = None;
    for step in steps.into_iter().take(64) {
        while let Some(req) = s.poll_transmit() {
            last_sent = Some(req);
        }
        while s.poll_event().is_some() {}
        match step {
            Step::Notify {
                cseq,
                state,
                content_type,
                body: b,
                other_dialog,
            } => {
                let Some(sub) = &last_sent else { continue };
                let state = match state % 5 {
                    0 => "active;expires=600",
                    1 => "pending",
                    2 => "terminated;reason=timeout",
                    3 => "terminated;reason=rejected",
                    _ => "active",
                };
                let content_type = match content_type % 3 {
                    0 => Some("application/load-control+xml".to_owned()),
                    1 => Some("text/plain".to_owned()),
                    _ => None,
                };
                let mut notify = EventRequest::new(
                    Method::Notify,
                    sub.from.uri.clone(),
                    if other_dialog { "other" } else { &sub.call_id },
                    NameAddr {
                        uri: uri("sip:sbc.example.com"),
                        tag: Some("n1".into()),
                    },
                    sub.from.clone(),
                    u32::from(cseq),
                );
                notify.event = Some("load-control".into());
                notify.subscription_state = Some(state.into());
                notify.content_type = content_type;
                notify.body = body(b);
                let r = s.handle_notify(now, &notify);
                assert!((200..700).contains(&r.status), "status {}", r.status);
            }
            Step::Answer { status, expires } => {
                if let Some(sub) = &last_sent {
                    let mut r = Response::to(sub, 100 + status % 600, Some("n1"));
                    r.expires = expires.map(u32::from);
                    s.handle_response(now, &r);
                }
            }
            Step::Wait { seconds } => {
                now += u64::from(seconds) * 1_000_000_000;
                s.handle_timeout(now);
            }
        }
        if let Some(p) = engine.source_policy("sip:sbc.example.com") {
            assert!(p.rules().is_some(), "the engine holds a full policy");
        }
    }
});
