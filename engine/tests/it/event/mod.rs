//! The load-control event package in simulated time: scripted exchanges for each rule of the
//! subscriber (subscriber.rs) and the notifier (notifier.rs), both wired back to back through
//! in-memory channels with loss and reordering (back_to_back.rs), and what other
//! implementations send and expect (interop.rs). Here: what they share, and RFC 7200 Appendix D.2.

mod back_to_back;
mod interop;
mod notifier;
mod subscriber;

use std::sync::Arc;

use crate::common::NS;
use loadctl::compile::Identities;
use loadctl::event::notifier::{
    Authorization, Notifier, NotifierConfig, NotifierEvent, ShutdownReason,
};
use loadctl::event::subscriber::{
    IgnoreReason, PolicySink, StopReason, Subscriber, SubscriberConfig, SubscriberEvent,
};
use loadctl::event::*;
use loadctl::policy::{self, Limits, Rule, Ruleset, State, Uri};
use loadctl::runtime::{Engine, EngineConfig, PublishError, Request, Source, Time, Transport};

const S: u64 = 1_000_000_000;

fn uri(s: &str) -> Uri {
    Uri::new(s).expect("uri")
}

fn rule_xml(id: &str, prefix: &str, rate: u32) -> String {
    format!(
        "<rule id=\"{id}\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"{prefix}\"/></lc:to></lc:sip></lc:call-identity></conditions>\
         <actions><lc:accept><lc:rate>{rate}</lc:rate></lc:accept></actions></rule>"
    )
}

fn body(version: u32, state: &str, rules: &str) -> Vec<u8> {
    format!("<ruleset {NS} version=\"{version}\" state=\"{state}\">{rules}</ruleset>").into_bytes()
}

fn rules(xml: &str) -> Vec<Arc<Rule>> {
    let doc = body(0, "full", xml);
    policy::read(&doc, &Limits::default())
        .expect("valid")
        .ruleset
        .rules()
        .expect("full")
        .to_vec()
}

fn subscriber(engine: &Engine) -> Subscriber {
    let mut c = SubscriberConfig::new(
        uri("sip:sbc.example.com"),
        uri("sip:proxy.upstream.example"),
        "cid",
        "up",
    );
    c.scope_to_notifier = false;
    Subscriber::new(c, engine.clone(), 0)
}

fn engine() -> Engine {
    Engine::new(EngineConfig::default().with_shards(1))
}

fn events(s: &mut Subscriber) -> Vec<SubscriberEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

/// A NOTIFY inside `s`'s current subscription (the SUBSCRIBE `sub` it answers).
fn notify(
    sub: &EventRequest,
    cseq: u32,
    state: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> EventRequest {
    let mut r = EventRequest::new(
        Method::Notify,
        sub.from.uri.clone(),
        &sub.call_id,
        NameAddr {
            uri: uri("sip:sbc.example.com"),
            tag: Some("n1".into()),
        },
        sub.from.clone(),
        cseq,
    );
    r.event = Some("load-control".into());
    r.subscription_state = Some(state.into());
    r.content_type = content_type.map(str::to_owned);
    r.body = body;
    r.contact = Some(uri("sip:sbc.example.com"));
    r
}

fn ok(req: &EventRequest, expires: u32) -> Response {
    let mut r = Response::to(req, 200, Some("n1"));
    r.expires = Some(expires);
    r
}

fn classify_to(engine: &Engine, to: &str, unix_s: i128) -> Option<String> {
    let mut shard = engine.attach();
    let req = Request {
        method: "INVITE",
        identities: Identities {
            to: Some(to),
            ..Identities::default()
        },
        transport: Transport::Tcp,
        initial: true,
        event: None,
        time: Some(Time {
            monotonic_ns: 0,
            unix_ns: unix_s * 1_000_000_000,
        }),
        ..loadctl::runtime::Request::default()
    };
    shard.classify(&req).rule.map(|r| r.id().to_string())
}

const CT: Option<&str> = Some("application/load-control+xml");

fn sub_req(call_id: &str, from: &str, expires: Option<u32>, accept: Option<&str>) -> EventRequest {
    let mut r = EventRequest::new(
        Method::Subscribe,
        uri("sip:sbc.example.com"),
        call_id,
        NameAddr {
            uri: uri(from),
            tag: Some(format!("t-{call_id}")),
        },
        NameAddr {
            uri: uri("sip:sbc.example.com"),
            tag: None,
        },
        1,
    );
    r.event = Some("load-control".into());
    r.expires = expires;
    r.accept = accept.map(str::to_owned);
    r.contact = Some(uri(from));
    r
}

fn notifier() -> Notifier {
    Notifier::new(NotifierConfig::new(
        uri("sip:sbc.example.com"),
        "n",
        Authorization::Domains(vec!["upstream.example".into()]),
    ))
}

fn answer(n: &mut Notifier, now: u64, req: &EventRequest) {
    n.handle_response(now, &Response::to(req, 200, None));
}

fn version_of(req: &EventRequest) -> (u32, State, usize) {
    let rs = policy::read(&req.body, &Limits::default())
        .expect("valid")
        .ruleset;
    (rs.version(), rs.state(), rs.len())
}

fn subscribed() -> (Engine, Subscriber, EventRequest) {
    let e = engine();
    let mut s = subscriber(&e);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    s.handle_response(0, &ok(&sub, 3600));
    events(&mut s);
    (e, s, sub)
}

// ------------------------------------------------------------------ Appendix D.2

#[test]
fn appendix_d2_flow() {
    let e = engine();
    let mut s = subscriber(&e);
    let sub = s.poll_transmit().expect("SUBSCRIBE");
    assert_eq!(sub.method, Method::Subscribe);
    assert_eq!(sub.event.as_deref(), Some("load-control"));
    assert_eq!(sub.accept.as_deref(), Some("application/load-control+xml"));
    assert_eq!(sub.expires, Some(3600));
    assert!(sub.body.is_empty());
    let mut notifier = Notifier::new(NotifierConfig::new(
        uri("sip:sbc.example.com"),
        "n",
        Authorization::Any,
    ));
    notifier.set_policy(0, Some(rules(&rule_xml("f3g44k1", "+1-212", 100))));
    let resp = notifier.handle_subscribe(0, &sub);
    assert_eq!((resp.status, resp.expires), (200, Some(3600)));
    s.handle_response(0, &resp);
    let n = notifier.poll_transmit().expect("NOTIFY");
    assert_eq!(n.event.as_deref(), Some("load-control"));
    assert_eq!(n.subscription_state.as_deref(), Some("active;expires=3600"));
    assert_eq!(
        n.content_type.as_deref(),
        Some("application/load-control+xml")
    );
    let doc = policy::read(&n.body, &Limits::default())
        .expect("valid body")
        .ruleset;
    assert_eq!((doc.version(), doc.state()), (0, State::Full));
    let r = s.handle_notify(0, &n);
    assert_eq!(r.status, 200);
    notifier.handle_response(0, &r);
    let ev = events(&mut s);
    assert!(
        ev.contains(&SubscriberEvent::Subscribed { expires: 3600 }),
        "{ev:?}"
    );
    assert!(
        ev.iter().any(|e| matches!(
            e,
            SubscriberEvent::PolicyApplied {
                version: 0,
                state: State::Full,
                ..
            }
        )),
        "{ev:?}"
    );
    assert_eq!(
        classify_to(&e, "<tel:+1-212-555-0000>", 0).as_deref(),
        Some("f3g44k1")
    );
}
