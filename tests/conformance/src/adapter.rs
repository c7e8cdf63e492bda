//! Every use of loadctl's API by the suite, in one place: when an API changes, this module is
//! the one to mend. The runner ([`crate::run`]) sees only bytes, JSON values and the small
//! types below.
//!
//! - Documents: [`check`] does what `loadctl check` does (`policy::read` with the default
//!   limits); [`summary`] lists a document's rules for the notifier expectations.
//! - Classification: [`Classifier`] does what `loadctl classify` does (read the policy, a
//!   one-shard engine from it, one `Shard::classify` per request, the same JSON out); raw SIP
//!   goes through `sip::scan` + `Request::from_sip`.
//! - Exchanges: [`Side`] wraps the sans-IO `Subscriber` or `Notifier`, moving SIP text through
//!   `event::wire` (scan, write_request, write_response) like an appliance's SIP stack would.

use std::collections::BTreeMap;

use loadctl::compile::Identities;
use loadctl::event::notifier::{Authorization, Notifier, NotifierConfig};
use loadctl::event::subscriber::{Subscriber, SubscriberConfig};
use loadctl::event::wire;
use loadctl::policy::{self, Body, Change, Limit, Limits, Uri};
use loadctl::runtime::{Engine, EngineConfig, Request, Shard, Time, Transport, Verdict};
use serde_json::{Value, json};

/// What `loadctl check` decides about a document: its warnings when valid, the error when not.
pub fn check(document: &[u8]) -> Result<Vec<String>, String> {
    policy::read(document, &Limits::default())
        .map(|d| d.warnings.iter().map(ToString::to_string).collect())
        .map_err(|e| e.to_string())
}

/// A document as a peer sees it: version, state, and per rule (or change) its id and limit
/// (`rate=100`, `percent=40`, `win=3`; `none` for a rule without `<accept>`).
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// `version`.
    pub version: u32,
    /// `full` or `partial`.
    pub state: String,
    /// (id, limit) in document order.
    pub rules: Vec<(String, String)>,
}

fn limit_text(limit: &Limit) -> String {
    match limit {
        Limit::Rate(r) => format!("rate={}", r.per_second()),
        Limit::Percent(p) => format!("percent={}", p.value()),
        Limit::Window(w) => format!("win={w}"),
    }
}

/// Reads a document for the expectations on what a notifier sent.
pub fn summary(document: &[u8]) -> Result<Summary, String> {
    let doc = policy::read(document, &Limits::default()).map_err(|e| e.to_string())?;
    let rs = doc.ruleset;
    let rules = match rs.body() {
        Body::Full(rules) => rules
            .iter()
            .map(|r| (r.id.to_string(), limit_text(&r.accept.limit)))
            .collect(),
        Body::Partial(changes) => changes
            .iter()
            .map(|c| match c {
                Change::Put(r) => (r.id.to_string(), limit_text(&r.accept.limit)),
                // loadctl's own deletion form: to an RFC 7200 peer, a rule with no <accept>.
                Change::Delete(id) => (id.to_string(), "none".to_owned()),
            })
            .collect(),
    };
    Ok(Summary {
        version: rs.version(),
        state: rs.state().as_str().to_owned(),
        rules,
    })
}

/// A shard classifying requests, as `loadctl classify` does.
pub struct Classifier {
    shard: Shard,
}

/// The simulated clock of one request: monotonic and wall-clock nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Monotonic nanoseconds since the vector started.
    pub monotonic_ns: u64,
    /// Unix nanoseconds.
    pub unix_ns: i128,
}

fn decision_json(shard: &mut Shard, req: &Request<'_>) -> Value {
    let d = shard.classify(req);
    let mut v = json!({
        "action": d.verdict.as_str(),
        "rule": d.rule.map(|r| r.id().as_str()),
        "status": d.status(),
    });
    if d.verdict == Verdict::Redirect {
        let targets: Vec<&str> = d.targets().iter().map(Uri::as_str).collect();
        v["targets"] = json!(targets);
    }
    // Window tickets are never completed: a window's admissions stay outstanding.
    v
}

impl Classifier {
    /// A one-shard engine enforcing `policy` (a full document), like `loadctl classify`;
    /// `priority_peers` (a list of blocks) and `to_tag_is_dialog` as its
    /// `--priority-peers` and `--to-tag-is-dialog`.
    pub fn new(
        policy_xml: &[u8],
        priority_peers: Option<&str>,
        to_tag_is_dialog: bool,
    ) -> Result<Self, String> {
        let doc = policy::read(policy_xml, &Limits::default()).map_err(|e| e.to_string())?;
        let mut exemptions = loadctl::runtime::Exemptions::default();
        exemptions.to_tag_is_dialog = to_tag_is_dialog;
        exemptions.priority_peers =
            loadctl::runtime::Network::parse_list(priority_peers.unwrap_or(""))
                .map_err(|e| format!("priority-peers: {e}"))?;
        let engine = Engine::from_ruleset(
            doc.ruleset,
            EngineConfig::default()
                .with_shards(1)
                .with_exemptions(exemptions),
        )
        .map_err(|e| e.to_string())?;
        Ok(Self {
            shard: engine.attach(),
        })
    }

    fn of(engine: &Engine) -> Self {
        Self {
            shard: engine.attach(),
        }
    }

    /// Classifies one `loadctl classify` JSON line (`t` is the caller's business: `clock`).
    pub fn classify_json(
        &mut self,
        line: &Value,
        default_transport: &str,
        clock: Clock,
    ) -> Result<Value, String> {
        let text = |k: &str| -> Result<Option<&str>, String> {
            match line.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str())),
                Some(other) => Err(format!("{k:?} must be a string, not {other}")),
            }
        };
        let method = text("method")?.ok_or("a request needs \"method\"")?;
        let transport_name = text("transport")?.unwrap_or(default_transport);
        let transport = Transport::parse(transport_name)
            .ok_or_else(|| format!("unknown transport {transport_name:?}"))?;
        let initial = match line.get("initial") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(format!("\"initial\" must be a boolean, not {other}")),
        };
        let rp = text("resource_priority")?;
        let known_dialog = match line.get("known_dialog") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(format!("\"known_dialog\" must be a boolean, not {other}")),
        };
        let source = match text("source")? {
            None => None,
            Some(a) => Some(
                a.parse::<std::net::IpAddr>()
                    .map_err(|_| format!("\"source\" {a:?} is not an IP address"))?,
            ),
        };
        let request = Request {
            method,
            identities: Identities {
                from: text("from")?,
                to: text("to")?,
                request_uri: text("ruri")?,
                p_asserted_identity: text("pai")?.into(),
                target: text("target")?,
            },
            transport,
            initial,
            known_dialog,
            source,
            event: text("event")?,
            time: Some(Time {
                monotonic_ns: clock.monotonic_ns,
                unix_ns: clock.unix_ns,
            }),
            resource_priority: rp.map_or(loadctl::sip::HeaderValues::NONE, |v| {
                loadctl::sip::HeaderValues::one(v.as_bytes())
            }),
        };
        Ok(decision_json(&mut self.shard, &request))
    }

    /// Classifies a raw SIP request (`sip::scan` + `Request::from_sip`), as an appliance on
    /// the C ABI's `lc_classify_sip` path does. A message the scanner refuses gives
    /// `{"error": "…"}`.
    pub fn classify_sip(
        &mut self,
        message: &[u8],
        transport: &str,
        source: Option<std::net::IpAddr>,
        clock: Clock,
    ) -> Value {
        let Some(transport) = Transport::parse(transport) else {
            return json!({"error": format!("unknown transport {transport:?}")});
        };
        let sip = match loadctl::sip::scan(message) {
            Ok(s) => s,
            Err(e) => return json!({"error": e.to_string()}),
        };
        let request = Request {
            source,
            ..Request::from_sip(
                &sip,
                transport,
                Some(Time {
                    monotonic_ns: clock.monotonic_ns,
                    unix_ns: clock.unix_ns,
                }),
            )
        };
        decision_json(&mut self.shard, &request)
    }
}

/// loadctl's end of an exchange, spoken to in SIP text.
pub trait Side {
    /// Feeds a message from the peer at `now_ns`; returns loadctl's response when the message
    /// was a request. An error when loadctl's wire layer cannot read the message.
    fn receive(&mut self, now_ns: u64, message: &[u8]) -> Result<Option<Vec<u8>>, String>;
    /// The requests loadctl wants to send now, as SIP text.
    fn transmit(&mut self) -> Vec<Vec<u8>>;
    /// When loadctl wants its timers run next.
    fn poll_timeout(&self) -> Option<u64>;
    /// Runs the timers at `now_ns`.
    fn handle_timeout(&mut self, now_ns: u64);
    /// A local action of the operator: `unsubscribe` (subscriber), `set-policy` (notifier,
    /// with a full document or `none`).
    fn local(&mut self, now_ns: u64, action: &str, argument: &str) -> Result<(), String>;
    /// The classifier of the engine the subscriber feeds (none for a notifier).
    fn classifier(&mut self) -> Option<&mut Classifier>;
}

fn key<'a>(keys: &'a BTreeMap<String, String>, k: &str, default: &'a str) -> &'a str {
    keys.get(k).map_or(default, String::as_str)
}

fn uri(s: &str) -> Result<Uri, String> {
    Uri::new(s).map_err(|e| format!("URI {s:?}: {e}"))
}

fn number(keys: &BTreeMap<String, String>, k: &str) -> Result<Option<u64>, String> {
    keys.get(k)
        .map(|v| v.parse().map_err(|_| format!("{k}: {v:?} is not a number")))
        .transpose()
}

/// The host[:port] of a SIP URI, for the Via sent-by.
fn sent_by(contact: &str) -> String {
    let rest = contact
        .trim_start_matches('<')
        .trim_end_matches('>')
        .split_once(':')
        .map_or(contact, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    rest.split([';', '>', '?'])
        .next()
        .unwrap_or(rest)
        .to_owned()
}

fn write_all(
    requests: Vec<loadctl::event::EventRequest>,
    contact: &str,
    branch: &mut u64,
) -> Vec<Vec<u8>> {
    let host = sent_by(contact);
    requests
        .into_iter()
        .map(|req| {
            *branch += 1;
            let b = format!("z9hG4bK-lc-{branch}");
            let mut out = Vec::new();
            wire::write_request(
                &req,
                &wire::Via {
                    transport: "UDP",
                    sent_by: &host,
                    branch: &b,
                },
                contact,
                &mut out,
            );
            out
        })
        .collect()
}

/// loadctl as the subscriber. Keys: `notifier` (the URI subscribed to), `subscriber` (From),
/// `contact` (default: the subscriber URI), `expires`, `trust` (comma-separated).
pub fn subscriber(keys: &BTreeMap<String, String>, now_ns: u64) -> Result<Box<dyn Side>, String> {
    let notifier = uri(key(keys, "notifier", "sip:sbc@192.0.2.20"))?;
    let me = key(keys, "subscriber", "sip:proxy@192.0.2.10");
    let mut config = SubscriberConfig::new(notifier, uri(me)?, "lc-call", "lc-tag");
    if let Some(e) = number(keys, "expires")? {
        config.expires = u32::try_from(e).map_err(|_| "expires too large")?;
    }
    if let Some(t) = keys.get("trust") {
        config.trust = t.split(',').map(|s| s.trim().to_owned()).collect();
    }
    let engine = Engine::new(EngineConfig::default().with_shards(1));
    let classifier = Classifier::of(&engine);
    let subscriber = Subscriber::new(config, engine, now_ns);
    Ok(Box::new(SubscriberSide {
        subscriber,
        classifier,
        contact: key(keys, "contact", me).to_owned(),
        branch: 0,
    }))
}

struct SubscriberSide {
    subscriber: Subscriber,
    classifier: Classifier,
    contact: String,
    branch: u64,
}

fn read_err(e: wire::WireError) -> String {
    format!("loadctl's wire layer refused the message: {e}")
}

impl Side for SubscriberSide {
    fn receive(&mut self, now_ns: u64, message: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let raw = wire::scan(message).map_err(read_err)?;
        if raw.status != 0 {
            let resp = raw.response().map_err(read_err)?;
            self.subscriber.handle_response(now_ns, &resp);
            return Ok(None);
        }
        let req = raw.request().map_err(read_err)?;
        if req.method != loadctl::event::Method::Notify {
            return Err("the subscriber was sent a request other than NOTIFY".into());
        }
        let resp = self.subscriber.handle_notify(now_ns, &req);
        let mut out = Vec::new();
        wire::write_response(&resp, &raw, None, &mut out);
        Ok(Some(out))
    }

    fn transmit(&mut self) -> Vec<Vec<u8>> {
        let reqs: Vec<_> = std::iter::from_fn(|| self.subscriber.poll_transmit()).collect();
        // Events are not part of the wire; drain them so they do not pile up.
        while self.subscriber.poll_event().is_some() {}
        write_all(reqs, &self.contact, &mut self.branch)
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.subscriber.poll_timeout()
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.subscriber.handle_timeout(now_ns);
    }

    fn local(&mut self, now_ns: u64, action: &str, _argument: &str) -> Result<(), String> {
        match action {
            "unsubscribe" => {
                self.subscriber.unsubscribe(now_ns);
                Ok(())
            }
            other => Err(format!("the subscriber has no local action {other:?}")),
        }
    }

    fn classifier(&mut self) -> Option<&mut Classifier> {
        Some(&mut self.classifier)
    }
}

/// loadctl as the notifier. Keys: `uri` (From of NOTIFYs), `contact` (default: `uri`),
/// `authorize` (`any`, or comma-separated hosts/domains), `min-expires`, `max-expires`,
/// `pacing-ms`.
pub fn notifier(keys: &BTreeMap<String, String>) -> Result<Box<dyn Side>, String> {
    let me = key(keys, "uri", "sip:sbc@192.0.2.20");
    let authorization = match key(keys, "authorize", "any") {
        "any" => Authorization::Any,
        list => Authorization::Domains(list.split(',').map(|s| s.trim().to_owned()).collect()),
    };
    let mut config = NotifierConfig::new(uri(me)?, "lc-n", authorization);
    if let Some(v) = number(keys, "min-expires")? {
        config.min_expires = u32::try_from(v).map_err(|_| "min-expires too large")?;
    }
    if let Some(v) = number(keys, "max-expires")? {
        config.max_expires = u32::try_from(v).map_err(|_| "max-expires too large")?;
    }
    if let Some(v) = number(keys, "pacing-ms")? {
        config.pacing = std::time::Duration::from_millis(v);
    }
    Ok(Box::new(NotifierSide {
        notifier: Notifier::new(config),
        contact: key(keys, "contact", me).to_owned(),
        branch: 0,
    }))
}

struct NotifierSide {
    notifier: Notifier,
    contact: String,
    branch: u64,
}

impl Side for NotifierSide {
    fn receive(&mut self, now_ns: u64, message: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let raw = wire::scan(message).map_err(read_err)?;
        if raw.status != 0 {
            let resp = raw.response().map_err(read_err)?;
            self.notifier.handle_response(now_ns, &resp);
            return Ok(None);
        }
        let req = raw.request().map_err(read_err)?;
        if req.method != loadctl::event::Method::Subscribe {
            return Err("the notifier was sent a request other than SUBSCRIBE".into());
        }
        let resp = self.notifier.handle_subscribe(now_ns, &req);
        let contact = resp.is_success().then_some(self.contact.as_str());
        let mut out = Vec::new();
        wire::write_response(&resp, &raw, contact, &mut out);
        Ok(Some(out))
    }

    fn transmit(&mut self) -> Vec<Vec<u8>> {
        let reqs: Vec<_> = std::iter::from_fn(|| self.notifier.poll_transmit()).collect();
        while self.notifier.poll_event().is_some() {}
        write_all(reqs, &self.contact, &mut self.branch)
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.notifier.poll_timeout()
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.notifier.handle_timeout(now_ns);
    }

    fn local(&mut self, now_ns: u64, action: &str, argument: &str) -> Result<(), String> {
        if action != "set-policy" {
            return Err(format!("the notifier has no local action {action:?}"));
        }
        if argument.trim() == "none" {
            self.notifier.set_policy(now_ns, None);
            return Ok(());
        }
        let doc = policy::read(argument.as_bytes(), &Limits::default())
            .map_err(|e| format!("set-policy: {e}"))?;
        let rules = doc
            .ruleset
            .rules()
            .ok_or("set-policy takes a full document")?
            .to_vec();
        self.notifier.set_policy(now_ns, Some(rules));
        Ok(())
    }

    fn classifier(&mut self) -> Option<&mut Classifier> {
        None
    }
}

/// Unix nanoseconds of an `xs:dateTime` with a zone (the `now` key), as `loadctl classify
/// --now` reads it.
pub fn wall_clock(text: &str) -> Result<i128, String> {
    policy::Timestamp::parse(text)
        .map(|t| t.unix_nanos())
        .map_err(|e| format!("now {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sent_by_is_the_host_and_port() {
        assert_eq!(
            super::sent_by("sip:proxy@192.0.2.10:5070"),
            "192.0.2.10:5070"
        );
        assert_eq!(
            super::sent_by("<sip:sbc.example.com;transport=udp>"),
            "sbc.example.com"
        );
    }
}
