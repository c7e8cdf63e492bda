//! The event package on the wire: SIP text to and from the state machines' [`EventRequest`] and
//! [`Response`], for callers without a SIP stack of their own (the example edge, a small
//! notifier, tests with real SIP peers).
//!
//! [`scan`] reads a SUBSCRIBE, a NOTIFY or a response to one into a [`Raw`] view borrowed from
//! the bytes (every header the package uses, all Via values, Contact, every Record-Route and
//! Route element across repeated lines, the body cut at Content-Length); [`Raw::request`] and
//! [`Raw::response`] turn it into the owned types. [`write_request`] puts a request on the
//! wire with the caller's Via (transport, sent-by, branch) and Contact, and the request's
//! route set as Route headers; send it to [`EventRequest::next_hop`]. [`write_response`] answers a
//! scanned request, copying its Via headers as RFC 3261 §8.2.6.2 requires and, in a 2xx, its
//! Record-Route headers (§12.1.1). The transaction layer (retransmitting a request over UDP
//! until a response comes, absorbing retransmitted requests) stays with the caller.
//!
//! These three functions are the whole interface a test needs to drive the subscriber and
//! the notifier with SIP text: `scan(bytes)?.request()?` into `handle_notify` /
//! `handle_subscribe`, `scan(bytes)?.response()?` into `handle_response`, and
//! `write_request` / `write_response` for what they answer and send.

use std::io::Write as _;

use super::{EventRequest, Method, NameAddr, Response, reason_phrase};
use crate::policy::Uri;
use crate::sip::{HeaderLines, SipError, start_line, tag, uri_part};

/// Why bytes were not a message of the event package.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Not a SIP message (see the scanner's error).
    Sip(SipError),
    /// The status line is not `SIP/2.0 NNN reason`.
    BadStatusLine,
    /// A request or response of another method than SUBSCRIBE / NOTIFY.
    OtherMethod(String),
    /// A header the package needs is missing.
    Missing(&'static str),
    /// A header's value cannot be read (named).
    BadValue(&'static str),
    /// Content-Length says more than the message holds.
    TruncatedBody,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Sip(e) => e.fmt(f),
            WireError::BadStatusLine => f.write_str("malformed status line"),
            WireError::OtherMethod(m) => write!(f, "{m} is not a method of the event package"),
            WireError::Missing(h) => write!(f, "missing {h} header"),
            WireError::BadValue(h) => write!(f, "unreadable {h} header"),
            WireError::TruncatedBody => f.write_str("the body is shorter than Content-Length"),
        }
    }
}

impl std::error::Error for WireError {}

impl From<SipError> for WireError {
    fn from(e: SipError) -> Self {
        WireError::Sip(e)
    }
}

/// A scanned SUBSCRIBE, NOTIFY or response to one, borrowed from its bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Raw<'a> {
    /// 0 for a request, else the status code.
    pub status: u16,
    /// The reason phrase (responses).
    pub reason: &'a [u8],
    /// The method (of the request line; for a response, of its CSeq).
    pub method: &'a [u8],
    /// The Request-URI (requests).
    pub request_uri: &'a [u8],
    /// Every Via header value, topmost first, as written (a value may hold several entries).
    pub vias: Vec<&'a [u8]>,
    /// From header value.
    pub from: &'a [u8],
    /// To header value.
    pub to: &'a [u8],
    /// Call-ID.
    pub call_id: &'a [u8],
    /// CSeq number.
    pub cseq: u32,
    /// Contact header value (the first Contact line).
    pub contact: Option<&'a [u8]>,
    /// Every Record-Route element (one `name-addr` each), across lines, in order.
    pub record_route: Vec<&'a [u8]>,
    /// Every Route element, across lines, in order.
    pub route: Vec<&'a [u8]>,
    /// Event header value.
    pub event: Option<&'a [u8]>,
    /// Accept header value.
    pub accept: Option<&'a [u8]>,
    /// Subscription-State header value.
    pub subscription_state: Option<&'a [u8]>,
    /// Content-Type header value.
    pub content_type: Option<&'a [u8]>,
    /// Expires.
    pub expires: Option<u32>,
    /// Min-Expires.
    pub min_expires: Option<u32>,
    /// Retry-After (seconds; comments and parameters ignored).
    pub retry_after: Option<u32>,
    /// The body (cut at Content-Length when given).
    pub body: &'a [u8],
}

fn number(value: &[u8], header: &'static str) -> Result<u32, WireError> {
    let digits = value
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(value.len());
    std::str::from_utf8(&value[..digits])
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or(WireError::BadValue(header))
}

fn method_of(m: &[u8]) -> Result<Method, WireError> {
    match m {
        b"SUBSCRIBE" => Ok(Method::Subscribe),
        b"NOTIFY" => Ok(Method::Notify),
        other => Err(WireError::OtherMethod(
            String::from_utf8_lossy(other).into_owned(),
        )),
    }
}

/// Scans one message of the event package.
pub fn scan(input: &[u8]) -> Result<Raw<'_>, WireError> {
    let (first, at) = start_line(input)?;
    let mut raw = Raw::default();
    if let Some(rest) = first.strip_prefix(b"SIP/2.0 ") {
        let code = rest.get(..3).ok_or(WireError::BadStatusLine)?;
        raw.status = number(code, "status line")
            .ok()
            .filter(|s| (100..700).contains(s) && code.iter().all(u8::is_ascii_digit))
            .and_then(|s| u16::try_from(s).ok())
            .ok_or(WireError::BadStatusLine)?;
        raw.reason = rest.get(4..).unwrap_or(&[]);
    } else {
        let mut parts = first.split(|&b| b == b' ');
        let (Some(method), Some(uri), Some(b"SIP/2.0"), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SipError::BadRequestLine.into());
        };
        method_of(method)?;
        raw.method = method;
        raw.request_uri = uri;
    }
    let mut headers = HeaderLines::new(input, at);
    let mut cseq = None;
    let mut content_length = None;
    for header in headers.by_ref() {
        let (name, value) = header?;
        let is = |long: &str, short: &str| {
            name.eq_ignore_ascii_case(long.as_bytes())
                || (!short.is_empty() && name.eq_ignore_ascii_case(short.as_bytes()))
        };
        if is("via", "v") {
            raw.vias.push(value);
        } else if is("from", "f") {
            raw.from = value;
        } else if is("to", "t") {
            raw.to = value;
        } else if is("call-id", "i") {
            raw.call_id = value;
        } else if is("cseq", "") {
            cseq = Some(value);
        } else if is("record-route", "") {
            raw.record_route
                .extend(crate::sip::HeaderValues::one(value).values());
        } else if is("route", "") {
            raw.route
                .extend(crate::sip::HeaderValues::one(value).values());
        } else if is("contact", "m") {
            raw.contact = raw.contact.or(Some(value));
        } else if is("event", "o") {
            raw.event = raw.event.or(Some(value));
        } else if is("accept", "") {
            raw.accept = raw.accept.or(Some(value));
        } else if is("subscription-state", "") {
            raw.subscription_state = raw.subscription_state.or(Some(value));
        } else if is("content-type", "c") {
            raw.content_type = raw.content_type.or(Some(value));
        } else if is("content-length", "l") {
            content_length = Some(number(value, "Content-Length")? as usize);
        } else if is("expires", "") {
            raw.expires = Some(number(value, "Expires")?);
        } else if is("min-expires", "") {
            raw.min_expires = Some(number(value, "Min-Expires")?);
        } else if is("retry-after", "") {
            raw.retry_after = Some(number(value, "Retry-After")?);
        }
    }
    let body_start = headers.body_start().unwrap_or(input.len());
    let rest = &input[body_start..];
    raw.body = match content_length {
        Some(n) if n > rest.len() => return Err(WireError::TruncatedBody),
        Some(n) => &rest[..n],
        None => rest,
    };
    for (value, name) in [(raw.from, "From"), (raw.to, "To"), (raw.call_id, "Call-ID")] {
        if value.is_empty() {
            return Err(WireError::Missing(name));
        }
    }
    if raw.vias.is_empty() {
        return Err(WireError::Missing("Via"));
    }
    let cseq = cseq.ok_or(WireError::Missing("CSeq"))?;
    let split = cseq
        .iter()
        .position(u8::is_ascii_whitespace)
        .ok_or(WireError::BadValue("CSeq"))?;
    raw.cseq = number(&cseq[..split], "CSeq")?;
    let cseq_method = cseq[split..].trim_ascii();
    if raw.status == 0 {
        if cseq_method != raw.method {
            return Err(WireError::BadValue("CSeq"));
        }
    } else {
        method_of(cseq_method)?;
        raw.method = cseq_method;
    }
    Ok(raw)
}

fn text<'a>(b: &'a [u8], header: &'static str) -> Result<&'a str, WireError> {
    std::str::from_utf8(b).map_err(|_| WireError::BadValue(header))
}

fn name_addr(value: &[u8], header: &'static str) -> Result<NameAddr, WireError> {
    let uri = uri_part(value).ok_or(WireError::BadValue(header))?;
    let uri = uri
        .strip_prefix('<')
        .and_then(|u| u.strip_suffix('>'))
        .unwrap_or(uri);
    Ok(NameAddr {
        uri: Uri::new(uri).map_err(|_| WireError::BadValue(header))?,
        tag: match tag(value) {
            Some(t) => Some(text(t, header)?.to_owned()),
            None => None,
        },
    })
}

/// The URI of a Contact / Route / Record-Route element (`<…>` stripped).
fn addr_uri(value: &[u8], header: &'static str) -> Result<Uri, WireError> {
    let uri = uri_part(value).ok_or(WireError::BadValue(header))?;
    let uri = uri
        .strip_prefix('<')
        .and_then(|u| u.strip_suffix('>'))
        .unwrap_or(uri);
    Uri::new(uri).map_err(|_| WireError::BadValue(header))
}

fn uris(values: &[&[u8]], header: &'static str) -> Result<Vec<Uri>, WireError> {
    values.iter().map(|v| addr_uri(v, header)).collect()
}

/// The URIs of a Route or Record-Route header value (`<sip:p1;lr>, <sip:p2;lr>`: a
/// comma-separated list of name-addrs, in order), for callers that hold the value as text.
pub fn route_list(value: &[u8]) -> Result<Vec<Uri>, WireError> {
    crate::sip::HeaderValues::one(value)
        .values()
        .map(|v| addr_uri(v, "Route"))
        .collect()
}

/// A route set as one Route header value (`<uri>, <uri>`); empty for none.
pub fn route_text(route: &[Uri]) -> String {
    route
        .iter()
        .map(|u| format!("<{}>", u.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn contact(value: Option<&[u8]>) -> Result<Option<Uri>, WireError> {
    // The first element of the first Contact line (`*` is a REGISTER's; not a target).
    match value.and_then(|v| crate::sip::HeaderValues::one(v).values().next()) {
        None | Some(b"*") => Ok(None),
        Some(v) => addr_uri(v, "Contact").map(Some),
    }
}

fn opt_text(v: Option<&[u8]>, header: &'static str) -> Result<Option<String>, WireError> {
    v.map(|b| text(b, header).map(str::to_owned)).transpose()
}

impl Raw<'_> {
    /// The topmost Via's `branch` parameter.
    pub fn top_branch(&self) -> Option<&[u8]> {
        crate::sip::via::ViaParm::top(*self.vias.first()?)
            .ok()?
            .branch()
    }

    /// The request, for the state machines (an error for a response).
    pub fn request(&self) -> Result<EventRequest, WireError> {
        if self.status != 0 {
            return Err(WireError::BadValue("request line"));
        }
        let uri = text(self.request_uri, "Request-URI")?;
        Ok(EventRequest {
            method: method_of(self.method)?,
            request_uri: Uri::new(uri).map_err(|_| WireError::BadValue("Request-URI"))?,
            call_id: text(self.call_id, "Call-ID")?.to_owned(),
            from: name_addr(self.from, "From")?,
            to: name_addr(self.to, "To")?,
            cseq: self.cseq,
            event: opt_text(self.event, "Event")?,
            expires: self.expires,
            accept: opt_text(self.accept, "Accept")?,
            subscription_state: opt_text(self.subscription_state, "Subscription-State")?,
            content_type: opt_text(self.content_type, "Content-Type")?,
            body: self.body.to_vec(),
            contact: contact(self.contact)?,
            record_route: uris(&self.record_route, "Record-Route")?,
            route: uris(&self.route, "Route")?,
        })
    }

    /// The response, for the state machines (an error for a request).
    pub fn response(&self) -> Result<Response, WireError> {
        if self.status == 0 {
            return Err(WireError::BadValue("status line"));
        }
        Ok(Response {
            status: self.status,
            reason: String::from_utf8_lossy(self.reason).into_owned(),
            method: method_of(self.method)?,
            call_id: text(self.call_id, "Call-ID")?.to_owned(),
            cseq: self.cseq,
            from: name_addr(self.from, "From")?,
            to: name_addr(self.to, "To")?,
            expires: self.expires,
            min_expires: self.min_expires,
            retry_after: self.retry_after,
            contact: contact(self.contact)?,
            record_route: uris(&self.record_route, "Record-Route")?,
        })
    }
}

/// This end's transport address for the Via of a request it sends.
#[derive(Clone, Copy, Debug)]
pub struct Via<'a> {
    /// `UDP`, `TCP`, `TLS`, ….
    pub transport: &'a str,
    /// `host[:port]` where responses should come back.
    pub sent_by: &'a str,
    /// The branch (starting with `z9hG4bK`), unique per transaction.
    pub branch: &'a str,
}

fn name_addr_text(out: &mut Vec<u8>, na: &NameAddr) {
    let _ = write!(out, "<{}>", na.uri.as_str());
    if let Some(t) = &na.tag {
        let _ = write!(out, ";tag={t}");
    }
}

fn header(out: &mut Vec<u8>, name: &str, value: &str) {
    let _ = write!(out, "{name}: {value}\r\n");
}

/// Appends `req` as a SIP message: request line, `via`, Max-Forwards 70, one Route header per
/// entry of `req.route`, From, To, Call-ID, CSeq, `contact` (this end's Contact, a name-addr
/// or URI; it takes the place of `req.contact`), the package's headers, Content-Length and the
/// body. Send the bytes to [`EventRequest::next_hop`].
pub fn write_request(req: &EventRequest, via: &Via<'_>, contact: &str, out: &mut Vec<u8>) {
    let method = req.method.as_str();
    let _ = write!(out, "{method} {} SIP/2.0\r\n", req.request_uri.as_str());
    let _ = write!(
        out,
        "Via: SIP/2.0/{} {};branch={}\r\n",
        via.transport, via.sent_by, via.branch
    );
    header(out, "Max-Forwards", "70");
    for r in &req.route {
        let _ = write!(out, "Route: <{}>\r\n", r.as_str());
    }
    out.extend_from_slice(b"From: ");
    name_addr_text(out, &req.from);
    out.extend_from_slice(b"\r\nTo: ");
    name_addr_text(out, &req.to);
    out.extend_from_slice(b"\r\n");
    header(out, "Call-ID", &req.call_id);
    header(out, "CSeq", &format!("{} {method}", req.cseq));
    if contact.starts_with('<') {
        header(out, "Contact", contact);
    } else {
        header(out, "Contact", &format!("<{contact}>"));
    }
    for (name, value) in [
        ("Event", &req.event),
        ("Accept", &req.accept),
        ("Subscription-State", &req.subscription_state),
        ("Content-Type", &req.content_type),
    ] {
        if let Some(v) = value {
            header(out, name, v);
        }
    }
    if let Some(e) = req.expires {
        header(out, "Expires", &e.to_string());
    }
    header(out, "Content-Length", &req.body.len().to_string());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&req.body);
}

/// Appends `resp`, the answer to the scanned `request`: status line, the request's Via
/// headers as they came, in a 2xx the request's Record-Route elements in order (RFC 3261
/// §12.1.1), From, To (with the responder's tag), Call-ID, CSeq, `contact` when given (this
/// end's Contact, for a 2xx to SUBSCRIBE; `resp.contact` is not written), Expires /
/// Min-Expires / Retry-After when set, no body.
pub fn write_response(
    resp: &Response,
    request: &Raw<'_>,
    contact: Option<&str>,
    out: &mut Vec<u8>,
) {
    let reason = if resp.reason.is_empty() {
        reason_phrase(resp.status)
    } else {
        &resp.reason
    };
    let _ = write!(out, "SIP/2.0 {} {reason}\r\n", resp.status);
    for via in &request.vias {
        out.extend_from_slice(b"Via: ");
        out.extend_from_slice(via);
        out.extend_from_slice(b"\r\n");
    }
    if resp.is_success() {
        for rr in &request.record_route {
            out.extend_from_slice(b"Record-Route: ");
            out.extend_from_slice(rr);
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"From: ");
    name_addr_text(out, &resp.from);
    out.extend_from_slice(b"\r\nTo: ");
    name_addr_text(out, &resp.to);
    out.extend_from_slice(b"\r\n");
    header(out, "Call-ID", &resp.call_id);
    header(
        out,
        "CSeq",
        &format!("{} {}", resp.cseq, resp.method.as_str()),
    );
    if let Some(c) = contact {
        if c.starts_with('<') {
            header(out, "Contact", c);
        } else {
            header(out, "Contact", &format!("<{c}>"));
        }
    }
    for (name, value) in [
        ("Expires", resp.expires),
        ("Min-Expires", resp.min_expires),
        ("Retry-After", resp.retry_after),
    ] {
        if let Some(v) = value {
            header(out, name, &v.to_string());
        }
    }
    header(out, "Content-Length", "0");
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::notifier::{Authorization, Notifier, NotifierConfig};
    use crate::event::subscriber::{Subscriber, SubscriberConfig, SubscriberEvent};

    const NOTIFY: &[u8] = b"NOTIFY sip:proxy@192.0.2.10:5070 SIP/2.0\r\n\
        Via: SIP/2.0/UDP 192.0.2.20:5060;branch=z9hG4bKnotify1\r\n\
        v: SIP/2.0/UDP 192.0.2.30;branch=z9hG4bKouter , SIP/2.0/UDP 192.0.2.31\r\n\
        Max-Forwards: 70\r\n\
        f: <sip:sbc@192.0.2.20:5060>;tag=n1\r\n\
        To: \"Proxy\" <sip:proxy@192.0.2.10:5070>;tag=s1\r\n\
        i: call-1\r\n\
        CSeq: 7 NOTIFY\r\n\
        o: load-control\r\n\
        Subscription-State: active;\r\n expires=3599\r\n\
        c: application/load-control+xml\r\n\
        l: 5\r\n\
        \r\n\
        <x/>\ntrailing";

    #[test]
    fn scans_compact_folded_and_content_length() {
        let raw = scan(NOTIFY).expect("scans");
        assert_eq!(raw.status, 0);
        assert_eq!(raw.method, b"NOTIFY");
        assert_eq!(raw.vias.len(), 2);
        assert_eq!(raw.top_branch(), Some(&b"z9hG4bKnotify1"[..]));
        // a quoted comma does not end the top via-parm before its branch (RFC 7339 §9 oc-algo)
        let quoted = String::from_utf8_lossy(NOTIFY).replacen(
            "192.0.2.20:5060;branch",
            "192.0.2.20:5060;oc;oc-algo=\"loss,rate\";branch",
            1,
        );
        let quoted = scan(quoted.as_bytes()).expect("scans");
        assert_eq!(quoted.top_branch(), Some(&b"z9hG4bKnotify1"[..]));
        assert_eq!(raw.cseq, 7);
        assert_eq!(raw.body, b"<x/>\n");
        let req = raw.request().expect("request");
        assert_eq!(req.from.tag.as_deref(), Some("n1"));
        assert_eq!(req.to.uri.as_str(), "sip:proxy@192.0.2.10:5070");
        assert_eq!(
            req.subscription_state
                .as_deref()
                .map(|s| s.replace(['\r', '\n', ' '], "")),
            Some("active;expires=3599".to_owned())
        );
        let mut out = Vec::new();
        let resp = Response::to(&req, 200, None);
        write_response(&resp, &raw, None, &mut out);
        let text = String::from_utf8(out.clone()).expect("utf8");
        assert!(text.starts_with("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 192.0.2.20:5060;branch=z9hG4bKnotify1\r\nVia: SIP/2.0/UDP 192.0.2.30;branch=z9hG4bKouter , SIP/2.0/UDP 192.0.2.31\r\n"), "{text}");
        let back = scan(&out).expect("response scans");
        assert_eq!(back.response().expect("response"), resp);
    }

    #[test]
    fn refuses_what_is_not_the_package() {
        let invite = b"INVITE sip:x@y SIP/2.0\r\nVia: SIP/2.0/UDP h\r\n\r\n";
        assert_eq!(scan(invite), Err(WireError::OtherMethod("INVITE".into())));
        let short = [&NOTIFY[..NOTIFY.len() - 15], b"\r\n\r\n"].concat();
        assert!(scan(&short).is_err());
        let no_via: Vec<u8> = NOTIFY
            .split(|&b| b == b'\n')
            .filter(|l| !l.starts_with(b"Via") && !l.starts_with(b"v:"))
            .flat_map(|l| l.iter().copied().chain(std::iter::once(b'\n')))
            .collect();
        assert_eq!(scan(&no_via), Err(WireError::Missing("Via")));
        let long = String::from_utf8_lossy(NOTIFY).replace("l: 5", "l: 500");
        assert_eq!(scan(long.as_bytes()), Err(WireError::TruncatedBody));
        let bad_cseq = String::from_utf8_lossy(NOTIFY).replace("7 NOTIFY", "7 SUBSCRIBE");
        assert_eq!(scan(bad_cseq.as_bytes()), Err(WireError::BadValue("CSeq")));
        assert!(scan(b"SIP/2.0 2x0 OK\r\n\r\n").is_err());
    }

    /// A subscriber and a notifier that talk only through bytes: every message is written,
    /// scanned and read back on the other side.
    #[test]
    fn a_whole_exchange_through_the_wire() {
        let sbc = Uri::new("sip:sbc@127.0.0.1:5060").expect("uri");
        let proxy = Uri::new("sip:proxy@127.0.0.1:5070").expect("uri");
        let mut notifier =
            Notifier::new(NotifierConfig::new(sbc.clone(), "n7", Authorization::Any));
        let body = br#"<ruleset xmlns="urn:ietf:params:xml:ns:common-policy" version="0" state="full">
          <rule id="hotline"><actions><accept><rate>100</rate></accept></actions></rule></ruleset>"#;
        let rules = crate::policy::read(body, &Default::default())
            .expect("policy")
            .ruleset;
        notifier.set_policy(0, rules.rules().map(|r| r.to_vec()));
        let engine = crate::runtime::Engine::new(crate::runtime::EngineConfig::default());
        let mut sub = Subscriber::new(
            SubscriberConfig::new(sbc, proxy, "cid", "ftag"),
            engine.clone(),
            0,
        );
        let mut branch = 0;
        let mut via = |side: &str| {
            branch += 1;
            format!("z9hG4bK{side}{branch}")
        };
        for _ in 0..3 {
            while let Some(req) = sub.poll_transmit() {
                let b = via("s");
                let mut bytes = Vec::new();
                write_request(
                    &req,
                    &Via {
                        transport: "UDP",
                        sent_by: "127.0.0.1:5070",
                        branch: &b,
                    },
                    "sip:proxy@127.0.0.1:5070",
                    &mut bytes,
                );
                let raw = scan(&bytes).expect("SUBSCRIBE scans");
                let mut expected = req.clone();
                expected.contact = Some(Uri::new("sip:proxy@127.0.0.1:5070").expect("uri"));
                assert_eq!(raw.request().expect("request"), expected);
                let answer = notifier.handle_subscribe(0, &raw.request().expect("request"));
                let mut out = Vec::new();
                write_response(&answer, &raw, Some("sip:sbc@127.0.0.1:5060"), &mut out);
                let back = scan(&out).expect("response scans");
                assert_eq!(back.top_branch(), Some(b.as_bytes()));
                sub.handle_response(0, &back.response().expect("response"));
            }
            while let Some(req) = notifier.poll_transmit() {
                let b = via("n");
                let mut bytes = Vec::new();
                write_request(
                    &req,
                    &Via {
                        transport: "UDP",
                        sent_by: "127.0.0.1:5060",
                        branch: &b,
                    },
                    "<sip:sbc@127.0.0.1:5060>",
                    &mut bytes,
                );
                let raw = scan(&bytes).expect("NOTIFY scans");
                let answer = sub.handle_notify(0, &raw.request().expect("request"));
                let mut out = Vec::new();
                write_response(&answer, &raw, None, &mut out);
                notifier
                    .handle_response(0, &scan(&out).expect("scans").response().expect("response"));
            }
        }
        assert!(
            std::iter::from_fn(|| sub.poll_event())
                .any(|e| matches!(e, SubscriberEvent::PolicyApplied { version: 0, .. }))
        );
        assert_eq!(engine.snapshot().policy().len(), 1);
    }

    /// RFC 3261 §12.1.1 / §12.1.2 / §12.2.1.1 and RFC 6665 §3.1–3.2, §4.4.1 through SIP text:
    /// a record-routing proxy sits between the two ends and the notifier's Contact is not the
    /// URI subscribed to. The notifier's NOTIFYs go to the SUBSCRIBE's Contact with the
    /// Record-Route as Route; the subscriber's refresh goes to the Contact of the NOTIFYs with
    /// the NOTIFY's Record-Route as Route, and a NOTIFY that changes Contact moves it.
    #[test]
    fn in_dialog_requests_go_to_the_remote_target_through_the_route_set() {
        let subscribed = Uri::new("sip:sbc@192.0.2.20").expect("uri");
        let edge = Uri::new("sip:edge@192.0.2.10:5070").expect("uri");
        let mut notifier = Notifier::new(NotifierConfig::new(
            subscribed.clone(),
            "n7",
            Authorization::Any,
        ));
        let engine = crate::runtime::Engine::new(crate::runtime::EngineConfig::default());
        let mut sub = Subscriber::new(
            SubscriberConfig::new(subscribed.clone(), edge.clone(), "cid", "ftag"),
            engine,
            0,
        );
        fn via(branch: &str) -> Via<'_> {
            Via {
                transport: "UDP",
                sent_by: "192.0.2.10:5070",
                branch,
            }
        }
        // The initial SUBSCRIBE goes to the URI subscribed to.
        let first = sub.poll_transmit().expect("SUBSCRIBE");
        assert_eq!(first.next_hop(), &subscribed);
        assert!(first.route.is_empty());
        let mut bytes = Vec::new();
        write_request(
            &first,
            &via("z9hG4bK1"),
            "sip:edge@192.0.2.10:5070",
            &mut bytes,
        );
        // The proxy on the way adds its Record-Route (two lines, one a list).
        let text = String::from_utf8(bytes).expect("utf8").replacen(
            "Max-Forwards: 70\r\n",
            "Max-Forwards: 69\r\nRecord-Route: <sip:p2.example.net;lr>\r\nRecord-Route: <sip:p1.example.net;lr>, <sip:p0.example.net;lr>\r\n",
            1,
        );
        let raw = scan(text.as_bytes()).expect("scans");
        assert_eq!(raw.record_route.len(), 3);
        let req = raw.request().expect("request");
        assert_eq!(req.contact.as_ref(), Some(&edge));
        let answer = notifier.handle_subscribe(0, &req);
        let mut out = Vec::new();
        write_response(
            &answer,
            &raw,
            Some("<sip:notifier@192.0.2.99:5080>"),
            &mut out,
        );
        let back = scan(&out).expect("scans");
        // §12.1.1: the 2xx carries the Record-Route as it came.
        assert_eq!(back.record_route, raw.record_route);
        let resp = back.response().expect("response");
        assert_eq!(
            resp.contact.as_ref().map(Uri::as_str),
            Some("sip:notifier@192.0.2.99:5080")
        );
        sub.handle_response(0, &resp);
        // The notifier's NOTIFY: to the SUBSCRIBE's Contact, Route = Record-Route in order.
        let notify = notifier.poll_transmit().expect("NOTIFY");
        assert_eq!(notify.request_uri, edge);
        let route: Vec<&str> = notify.route.iter().map(Uri::as_str).collect();
        assert_eq!(
            route,
            [
                "sip:p2.example.net;lr",
                "sip:p1.example.net;lr",
                "sip:p0.example.net;lr"
            ]
        );
        assert_eq!(notify.next_hop().as_str(), "sip:p2.example.net;lr");
        let mut nbytes = Vec::new();
        write_request(
            &notify,
            &via("z9hG4bKn1"),
            "<sip:notifier@192.0.2.99:5080>",
            &mut nbytes,
        );
        let ntext = String::from_utf8(nbytes).expect("utf8");
        assert!(
            ntext.contains(
                "\r\nRoute: <sip:p2.example.net;lr>\r\nRoute: <sip:p1.example.net;lr>\r\n"
            ),
            "{ntext}"
        );
        // The proxies pass it on: each removes itself from Route and adds Record-Route
        // (RFC 6665 §4.3: a proxy that record-routed the SUBSCRIBE does so for the NOTIFYs).
        let arrived = ntext
            .replace("Route: <sip:p2.example.net;lr>\r\n", "")
            .replace("Route: <sip:p1.example.net;lr>\r\n", "")
            .replace("Route: <sip:p0.example.net;lr>\r\n", "")
            .replacen(
                "Max-Forwards: 70",
                "Max-Forwards: 67\r\nRecord-Route: <sip:p0.example.net;lr>, <sip:p1.example.net;lr>, <sip:p2.example.net;lr>",
                1,
            );
        let nraw = scan(arrived.as_bytes()).expect("scans");
        let nreq = nraw.request().expect("request");
        assert_eq!(sub.handle_notify(0, &nreq).status, 200);
        // The subscriber's dialog: the Contact of the NOTIFY, the NOTIFY's Record-Route in
        // order (RFC 6665 §4.4.1; the same as the 2xx's reversed).
        assert_eq!(
            sub.remote_target().map(Uri::as_str),
            Some("sip:notifier@192.0.2.99:5080")
        );
        let set: Vec<&str> = sub.route_set().iter().map(Uri::as_str).collect();
        assert_eq!(
            set,
            [
                "sip:p0.example.net;lr",
                "sip:p1.example.net;lr",
                "sip:p2.example.net;lr"
            ]
        );
        sub.unsubscribe(0);
        let bye = sub.poll_transmit().expect("unsubscribe");
        assert_eq!(bye.request_uri.as_str(), "sip:notifier@192.0.2.99:5080");
        assert_eq!(
            bye.to.uri, subscribed,
            "To stays the URI subscribed to (§12.2.1.1)"
        );
        assert_eq!(bye.next_hop().as_str(), "sip:p0.example.net;lr");
        let mut ubytes = Vec::new();
        write_request(
            &bye,
            &via("z9hG4bK2"),
            "sip:edge@192.0.2.10:5070",
            &mut ubytes,
        );
        let utext = String::from_utf8(ubytes).expect("utf8");
        assert!(
            utext.starts_with("SUBSCRIBE sip:notifier@192.0.2.99:5080 SIP/2.0\r\n"),
            "{utext}"
        );
        let uraw = scan(utext.as_bytes()).expect("scans");
        assert_eq!(uraw.request().expect("request").route, bye.route);
    }

    #[test]
    fn route_lists_round_trip() {
        let list =
            route_list(b"<sip:p1.example.net;lr>, \"x, y\" <sip:p2.example.net;lr;transport=tcp>")
                .expect("list");
        let text: Vec<&str> = list.iter().map(Uri::as_str).collect();
        assert_eq!(
            text,
            [
                "sip:p1.example.net;lr",
                "sip:p2.example.net;lr;transport=tcp"
            ]
        );
        assert_eq!(route_list(route_text(&list).as_bytes()), Ok(list));
        assert_eq!(route_list(b""), Ok(Vec::new()));
        assert_eq!(route_text(&[]), "");
        assert!(route_list(b"<sip:ok;lr>, <bad uri>").is_err());
    }

    #[test]
    fn contact_forms() {
        let c = |v: &[u8]| contact(Some(v));
        assert_eq!(
            c(b"\"N\" <sip:n@192.0.2.1:5080;transport=udp>;expires=60").expect("ok"),
            Some(Uri::new("sip:n@192.0.2.1:5080;transport=udp").expect("uri"))
        );
        assert_eq!(
            c(b"sip:n@192.0.2.1, <sip:m@192.0.2.2>").expect("ok"),
            Some(Uri::new("sip:n@192.0.2.1").expect("uri"))
        );
        assert_eq!(c(b"*").expect("ok"), None);
        assert_eq!(c(b"<not a uri>"), Err(WireError::BadValue("Contact")));
        assert_eq!(contact(None), Ok(None));
    }
}
