//! The `load-control` event package (RFC 6665 + RFC 7200 §4) as deterministic, I/O-free
//! state machines.
//!
//! Both ends work like quinn-proto: the caller feeds parsed SIP messages and the current time
//! (`handle_*`), and takes out the messages to send (`poll_transmit`), what happened
//! (`poll_event`) and when to call back (`poll_timeout` / `handle_timeout`). Nothing here reads
//! a clock, opens a socket or spawns a thread, so every exchange runs in simulated time. A SIP
//! stack — the appliance's own, or the test harness — moves the bytes and runs the transaction
//! layer (retransmissions; a transaction that gets no final response is reported here as a
//! timeout after [`TRANSACTION_TIMEOUT`]).
//!
//! - [`subscriber::Subscriber`]: the upstream server that receives policies and puts them, as
//!   one source, into a [`subscriber::PolicySink`]: an [`crate::runtime::Engine`], or anything
//!   else that keeps policies.
//! - [`notifier::Notifier`]: the overloaded or protected server that pushes policies.
//! - [`allocator`]: max-min fair shares of a capacity among several subscribers.
//! - [`wire`]: the package's messages as SIP text and back, for callers without a SIP stack.
//!
//! # A worked example
//! A notifier and a subscriber wired back to back; in production each side's SIP stack turns
//! the [`EventRequest`]s and [`Response`]s into messages on the wire and back.
//!
//! ```
//! use loadctl::runtime::{Engine, EngineConfig};
//! use loadctl::event::notifier::{Authorization, Notifier, NotifierConfig};
//! use loadctl::event::subscriber::{Subscriber, SubscriberConfig, SubscriberEvent};
//! use loadctl::policy::{self, Uri};
//!
//! let sbc = Uri::new("sip:sbc.example.com").unwrap();
//! let proxy = Uri::new("sip:proxy.example.net").unwrap();
//! let mut notifier = Notifier::new(NotifierConfig::new(sbc.clone(), "n7", Authorization::Any));
//! let body = br#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy" version="0" state="full">
//!   <rule id="hotline"><actions><accept><rate>100</rate></accept></actions></rule></ruleset>"#;
//! let rules = policy::read(body, &Default::default()).unwrap().ruleset;
//! notifier.set_policy(0, rules.rules().map(|r| r.to_vec()));
//!
//! let engine = Engine::new(EngineConfig::default());
//! let config = SubscriberConfig::new(sbc, proxy, "a84b4c76e66710", "1928301774");
//! let mut subscriber = Subscriber::new(config, engine.clone(), 0);
//!
//! let now = 0; // monotonic nanoseconds, from the caller's clock
//! while let Some(subscribe) = subscriber.poll_transmit() {
//!     let answer = notifier.handle_subscribe(now, &subscribe); // 200, Expires: 3600
//!     subscriber.handle_response(now, &answer);
//! }
//! while let Some(notify) = notifier.poll_transmit() {
//!     let answer = subscriber.handle_notify(now, &notify); // applies the policy
//!     notifier.handle_response(now, &answer);
//! }
//! assert!(std::iter::from_fn(|| subscriber.poll_event())
//!     .any(|e| matches!(e, SubscriberEvent::PolicyApplied { version: 0, .. })));
//! assert_eq!(engine.snapshot().policy().len(), 1);
//! // Later: call handle_timeout(now) whenever now reaches poll_timeout() on either side.
//! ```

pub mod allocator;
pub mod notifier;
pub mod subscriber;
pub mod wire;

use crate::policy::Uri;

/// The event package name (`Event` / `Allow-Events`).
pub const EVENT_PACKAGE: &str = "load-control";

/// RFC 3261 Timer F / Timer B: 64·T1 = 32 s without a final response ends a transaction.
pub const TRANSACTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(32);

/// [`TRANSACTION_TIMEOUT`] in the nanoseconds the state machines' instants count.
pub(crate) const TRANSACTION_TIMEOUT_NS: u64 = TRANSACTION_TIMEOUT.as_nanos() as u64;

/// Nanoseconds per second.
pub(crate) const SECOND_NS: u64 = 1_000_000_000;

/// A URI with its tag (From / To).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameAddr {
    /// The address.
    pub uri: Uri,
    /// The `tag` parameter.
    pub tag: Option<String>,
}

/// The two methods of the package.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// SUBSCRIBE.
    Subscribe,
    /// NOTIFY.
    Notify,
}

impl Method {
    /// The method name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Subscribe => "SUBSCRIBE",
            Method::Notify => "NOTIFY",
        }
    }
}

/// A SUBSCRIBE or NOTIFY as the state machines see it: the fields they need, parsed. A SIP
/// stack that parses messages itself builds one with [`EventRequest::new`] and sets the other
/// fields (new ones may be added: the struct is `#[non_exhaustive]`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventRequest {
    /// SUBSCRIBE or NOTIFY.
    pub method: Method,
    /// The Request-URI.
    pub request_uri: Uri,
    /// Call-ID.
    pub call_id: String,
    /// From (with tag).
    pub from: NameAddr,
    /// To (tag once the dialog exists).
    pub to: NameAddr,
    /// CSeq number.
    pub cseq: u32,
    /// Event header value.
    pub event: Option<String>,
    /// Expires (SUBSCRIBE).
    pub expires: Option<u32>,
    /// Accept header value (SUBSCRIBE); `None` when absent.
    pub accept: Option<String>,
    /// Subscription-State header value (NOTIFY), e.g. `active;expires=3599`.
    pub subscription_state: Option<String>,
    /// Content-Type header value.
    pub content_type: Option<String>,
    /// The body.
    pub body: Vec<u8>,
    /// The Contact URI. On a received request: the sender's (SUBSCRIBE and NOTIFY are target
    /// refresh requests, RFC 6665 §3.1–3.2: it becomes the dialog's remote target). The state
    /// machines leave it `None` on what they send: the SIP stack puts its own Contact there
    /// ([`wire::write_request`] takes it as an argument).
    pub contact: Option<Uri>,
    /// Every Record-Route URI of a received request, in the order of the message (RFC 3261
    /// §12.1.1: a dialog-creating request's Record-Route, in order, is the UAS's route set).
    pub record_route: Vec<Uri>,
    /// The Route URIs of a request the machines send: the dialog's route set (RFC 3261
    /// §12.2.1.1), empty outside a dialog or without record-routing proxies. The request goes
    /// to [`EventRequest::next_hop`].
    pub route: Vec<Uri>,
}

impl EventRequest {
    /// A request with the fields every SUBSCRIBE and NOTIFY has (RFC 3261 §8.1.1: Request-URI,
    /// Call-ID, From, To, CSeq) and no others: no Event, Expires, Accept, Subscription-State,
    /// Content-Type, body, Contact, Record-Route or Route.
    pub fn new(
        method: Method,
        request_uri: Uri,
        call_id: &str,
        from: NameAddr,
        to: NameAddr,
        cseq: u32,
    ) -> Self {
        EventRequest {
            method,
            request_uri,
            call_id: call_id.to_owned(),
            from,
            to,
            cseq,
            event: None,
            expires: None,
            accept: None,
            subscription_state: None,
            content_type: None,
            body: Vec::new(),
            contact: None,
            record_route: Vec::new(),
            route: Vec::new(),
        }
    }

    /// Where the request is sent (RFC 3261 §8.1.2): the first Route URI when there is a route
    /// set, else the Request-URI (the remote target). Every route-set entry is treated as a
    /// loose router (`;lr`, RFC 3261 §16.12); the strict-routing rewrite of RFC 2543 is not
    /// done.
    pub fn next_hop(&self) -> &Uri {
        self.route.first().unwrap_or(&self.request_uri)
    }
}

/// A response to a SUBSCRIBE or NOTIFY.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// The request's method.
    pub method: Method,
    /// The request's Call-ID.
    pub call_id: String,
    /// The request's CSeq number.
    pub cseq: u32,
    /// From, as in the request.
    pub from: NameAddr,
    /// To, with the responder's tag.
    pub to: NameAddr,
    /// Expires (2xx to SUBSCRIBE).
    pub expires: Option<u32>,
    /// Min-Expires (423).
    pub min_expires: Option<u32>,
    /// Retry-After, seconds.
    pub retry_after: Option<u32>,
    /// The Contact URI of a received response (a 2xx to SUBSCRIBE carries the notifier's:
    /// the dialog's remote target, RFC 3261 §12.1.2 / §12.2.1.2). `None` on what the machines
    /// produce: the SIP stack adds its own ([`wire::write_response`]).
    pub contact: Option<Uri>,
    /// The Record-Route URIs, in the order of the message (a UAS copies the request's into
    /// its response, RFC 3261 §12.1.1; the UAC's route set is this list reversed, §12.1.2).
    pub record_route: Vec<Uri>,
}

impl Response {
    /// A response to `req` with the given status; `to_tag` is added when the To has none. The
    /// request's Record-Route is copied (RFC 3261 §12.1.1).
    pub fn to(req: &EventRequest, status: u16, to_tag: Option<&str>) -> Self {
        let mut to = req.to.clone();
        if to.tag.is_none() {
            to.tag = to_tag.map(str::to_owned);
        }
        Self {
            status,
            reason: reason_phrase(status).to_owned(),
            method: req.method,
            call_id: req.call_id.clone(),
            cseq: req.cseq,
            from: req.from.clone(),
            to,
            expires: None,
            min_expires: None,
            retry_after: None,
            contact: None,
            record_route: req.record_route.clone(),
        }
    }

    /// 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The reason phrase RFC 3261 / 6665 give a status code.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        403 => "Forbidden",
        406 => "Not Acceptable",
        423 => "Interval Too Brief",
        481 => "Call/Transaction Does Not Exist",
        489 => "Bad Event",
        500 => "Server Internal Error",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// A parsed `Subscription-State` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubscriptionState {
    /// `active;expires=N`.
    Active {
        /// Remaining seconds, if given.
        expires: Option<u32>,
    },
    /// `pending;expires=N`.
    Pending {
        /// Remaining seconds, if given.
        expires: Option<u32>,
    },
    /// `terminated;reason=R;retry-after=N`.
    Terminated {
        /// The reason (deactivated, probation, rejected, timeout, giveup, noresource, …).
        reason: Option<String>,
        /// Seconds before trying again, if given.
        retry_after: Option<u32>,
    },
}

impl SubscriptionState {
    /// Parses a header value; `None` for an unknown state.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.split(';').map(str::trim);
        let state = parts.next()?.to_ascii_lowercase();
        let mut expires = None;
        let mut reason = None;
        let mut retry_after = None;
        for p in parts {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            match k.trim().to_ascii_lowercase().as_str() {
                "expires" => expires = v.trim().parse().ok(),
                "reason" => reason = Some(v.trim().to_ascii_lowercase()),
                "retry-after" => retry_after = v.trim().parse().ok(),
                _ => {}
            }
        }
        match state.as_str() {
            "active" => Some(SubscriptionState::Active { expires }),
            "pending" => Some(SubscriptionState::Pending { expires }),
            "terminated" => Some(SubscriptionState::Terminated {
                reason,
                retry_after,
            }),
            _ => None,
        }
    }

    /// The header value.
    pub fn render(&self) -> String {
        match self {
            SubscriptionState::Active { expires: Some(e) } => format!("active;expires={e}"),
            SubscriptionState::Active { expires: None } => "active".into(),
            SubscriptionState::Pending { expires: Some(e) } => format!("pending;expires={e}"),
            SubscriptionState::Pending { expires: None } => "pending".into(),
            SubscriptionState::Terminated {
                reason,
                retry_after,
            } => {
                let mut s = String::from("terminated");
                if let Some(r) = reason {
                    s.push_str(";reason=");
                    s.push_str(r);
                }
                if let Some(r) = retry_after {
                    s.push_str(&format!(";retry-after={r}"));
                }
                s
            }
        }
    }
}

/// True when an Event header value names the load-control package (parameters ignored).
pub fn is_load_control(event: Option<&str>) -> bool {
    event.is_some_and(|e| {
        e.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case(EVENT_PACKAGE)
    })
}

/// True when a media type is `application/load-control+xml` (parameters ignored).
pub fn is_policy_type(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case(crate::policy::CONTENT_TYPE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_state_round_trip() {
        for v in [
            "active;expires=3599",
            "pending",
            "terminated;reason=timeout",
            "terminated;reason=probation;retry-after=30",
        ] {
            let s = SubscriptionState::parse(v).expect("known");
            assert_eq!(s.render(), v);
        }
        assert_eq!(
            SubscriptionState::parse("Terminated ; Reason=Deactivated"),
            Some(SubscriptionState::Terminated {
                reason: Some("deactivated".into()),
                retry_after: None
            })
        );
        assert_eq!(SubscriptionState::parse("bogus"), None);
    }

    #[test]
    fn package_and_type_checks() {
        assert!(is_load_control(Some("load-control")));
        assert!(is_load_control(Some(" Load-Control ;id=1")));
        assert!(!is_load_control(Some("presence")));
        assert!(!is_load_control(None));
        assert!(is_policy_type(
            "application/load-control+xml; charset=utf-8"
        ));
        assert!(!is_policy_type("application/pidf+xml"));
    }
}
