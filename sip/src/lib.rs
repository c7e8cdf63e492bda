//! # loadctl-sip — the SIP text layer of loadctl
//!
//! What loadctl reads of SIP text, with no knowledge of policies or limiters: the request
//! scanner (this page), the one reader of a Via header's top via-parm ([`via`]), and SIP /
//! tel URIs with their canonical comparison ([`uri`]). Most programs use it through the
//! `loadctl` crate, which re-exports it as `loadctl::sip` (and `loadctl::uri`).
//!
//! # The request scanner
//! A zero-copy scanner that pulls from a raw SIP request the fields classification needs.
//!
//! It reads the request line and the header section only — no body, no full RFC 3261 parse —
//! and allocates nothing: every field is a slice of the input. Header names are matched
//! case-insensitively, in long or compact form (`f` From, `t` To, `i` Call-ID, `v` Via, `o`
//! Event); folded lines (a line starting with white space continues the previous one) belong to
//! the header they fold. A request whose To header has no `tag` parameter is initial; one with
//! a to-tag is inside a dialog. Lines may end in CRLF or a bare LF.
//!
//! White space may stand between a header's name and its colon (`TO :`, RFC 3261 HCOLON).
//!
//! Headers that are comma-separated lists (P-Asserted-Identity, Resource-Priority) may come on
//! several lines, which RFC 3261 §7.3.1 makes one list: [`HeaderValues`] holds the first line
//! and finds the others lazily, still without copying. Via keeps its topmost value (the first
//! value of the first line). A header that holds one value (From, To, Call-ID, CSeq) on two
//! lines is refused ([`SipError::RepeatedHeader`], RFC 4475 §3.3.8). Event keeps its first.
//!
//! Header values keep their display names and parameters; [`uri_part`] cuts the URI out of one
//! at the byte level, so a display name in a legacy 8-bit charset never stops classification.
//!
//! # Example
//! ```
//! use loadctl_sip::{scan, tag, uri_part, via::ViaParm};
//!
//! let msg = b"INVITE sip:+12125551234@gw.example.com;user=phone SIP/2.0\r\n\
//!     v: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK776asdhds, SIP/2.0/UDP 10.0.0.1\r\n\
//!     From: \"Alice\" <sip:alice@example.com>;tag=1928301774\r\n\
//!     To: <tel:+1-212-555-1234>\r\n\
//!     Call-ID: a84b4c76e66710@192.0.2.1\r\nCSeq: 314159 INVITE\r\n\r\n";
//! let req = scan(msg)?;
//! assert_eq!(req.method, "INVITE");
//! assert!(req.initial); // no To tag: not inside a dialog
//! assert_eq!(uri_part(req.from), Some("<sip:alice@example.com>")); // display name skipped
//! assert_eq!(tag(req.from), Some(&b"1928301774"[..]));
//! let top = ViaParm::top(req.via.expect("a Via"))?; // the first via-parm only
//! assert_eq!(top.branch(), Some(&b"z9hG4bK776asdhds"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod uri;
pub mod via;

/// Why a message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SipError {
    /// The input ends before the empty line that closes the headers.
    Truncated,
    /// The first line is not `METHOD SP Request-URI SP SIP/2.0`.
    BadRequestLine,
    /// A response (status line) where a request was expected.
    NotARequest,
    /// A header line without a colon, or a fold before the first header.
    BadHeader,
    /// A header the request must have (From, To, Call-ID, CSeq) is missing.
    MissingHeader(&'static str),
    /// The CSeq header is not `number SP method`.
    BadCSeq,
    /// A header that holds one value (From, To, Call-ID, CSeq) appears more than once (RFC
    /// 4475 §3.3.8: "An element receiving this request would respond with a 400 Bad Request
    /// error"). Classifying by the first while a later element routes by another would let a
    /// request choose which rule it meets.
    RepeatedHeader(&'static str),
}

impl std::fmt::Display for SipError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SipError::Truncated => f.write_str("the message ends inside its header section"),
            SipError::BadRequestLine => f.write_str("malformed request line"),
            SipError::NotARequest => f.write_str("a response, not a request"),
            SipError::BadHeader => f.write_str("malformed header line"),
            SipError::MissingHeader(h) => write!(f, "missing {h} header"),
            SipError::BadCSeq => f.write_str("malformed CSeq header"),
            SipError::RepeatedHeader(h) => write!(f, "more than one {h} header"),
        }
    }
}

impl std::error::Error for SipError {}

/// The fields of a SIP request classification needs, borrowed from the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SipRequest<'a> {
    /// The method, from the request line.
    pub method: &'a str,
    /// The Request-URI.
    pub request_uri: &'a str,
    /// From header value.
    pub from: &'a [u8],
    /// To header value.
    pub to: &'a [u8],
    /// Every P-Asserted-Identity value, across repeated lines (RFC 3325 §9.1 allows one
    /// sip/sips and one tel identity, usually on two lines).
    pub p_asserted_identity: HeaderValues<'a>,
    /// The Event header value, if any.
    pub event: Option<&'a [u8]>,
    /// Call-ID.
    pub call_id: &'a [u8],
    /// CSeq number.
    pub cseq: u32,
    /// CSeq method.
    pub cseq_method: &'a [u8],
    /// The topmost Via header value (up to the first comma), if any.
    pub via: Option<&'a [u8]>,
    /// Every `Resource-Priority` value (RFC 4412), across repeated lines.
    pub resource_priority: HeaderValues<'a>,
    /// True when To has no tag: the request is outside a dialog.
    pub initial: bool,
}

/// The values of a header that may be repeated on several lines or hold a comma-separated
/// list: RFC 3261 §7.3.1 makes `H: a, b` and `H: a` + `H: b` the same list. Borrowed, no
/// allocation; [`HeaderValues::values`] yields every element, across lines, in order.
///
/// From [`scan`], it holds the first line's value and the header lines after it: later lines
/// of the same header (long or compact name, any case, folded or not) are found by scanning
/// those again when [`HeaderValues::values`] gets past the first line, so a request whose
/// header has one line (nearly all) pays nothing for the others.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderValues<'a> {
    /// The first line's value (folds included), or the one value a caller passed.
    first: Option<&'a [u8]>,
    /// The header lines after the first one's, up to and including the empty line that ends
    /// the header section; empty for [`HeaderValues::one`].
    rest: &'a [u8],
    /// Which header's lines to look for in `rest`.
    name: Known,
}

impl<'a> HeaderValues<'a> {
    /// No such header.
    pub const NONE: HeaderValues<'static> = HeaderValues {
        first: None,
        rest: &[],
        name: Known::Other,
    };

    /// One header value (itself possibly a comma-separated list), as a caller that already
    /// joined the lines holds it.
    pub fn one(value: &'a [u8]) -> Self {
        Self {
            first: Some(value),
            rest: &[],
            name: Known::Other,
        }
    }

    /// True when the header is absent.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// The value of each line of the header (folds included, trimmed), in order.
    pub fn lines(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let name = self.name;
        let later = HeaderLines::new(self.rest, 0)
            .map_while(Result::ok)
            .filter(move |(n, _)| name != Known::Other && known(n) == name)
            .map(|(_, v)| v);
        self.first.map(trim).into_iter().chain(later)
    }

    /// Every comma-separated element of every line, trimmed, in order (commas inside quotes
    /// and `<>` do not split).
    pub fn values(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.lines().flat_map(elements)
    }
}

impl<'a> From<&'a [u8]> for HeaderValues<'a> {
    fn from(value: &'a [u8]) -> Self {
        Self::one(value)
    }
}

impl<'a> From<&'a str> for HeaderValues<'a> {
    fn from(value: &'a str) -> Self {
        Self::one(value.as_bytes())
    }
}

impl<'a, T: Into<HeaderValues<'a>>> From<Option<T>> for HeaderValues<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(HeaderValues::NONE, Into::into)
    }
}

/// The comma-separated elements of one header value, trimmed, empty ones skipped.
fn elements(mut rest: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        loop {
            if rest.is_empty() {
                return None;
            }
            let v = top_value(rest);
            rest = rest.get(v.len() + 1..).unwrap_or(&[]);
            let v = trim(v);
            if !v.is_empty() {
                return Some(v);
            }
        }
    })
}

/// `b` without leading and trailing ASCII white space.
#[doc(hidden)]
pub fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

/// The next line of `input` from `at`: (line without its end, offset after it), or `None` at
/// the end of the input without a line end.
fn line(input: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = &input[at..];
    // Vectorised: a byte loop here was half of a scan's instructions.
    let lf = memchr::memchr(b'\n', rest)?;
    let content = &rest[..lf];
    let content = content.strip_suffix(b"\r").unwrap_or(content);
    Some((content, at + lf + 1))
}

/// The header a name stands for (any case, long or compact form).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Known {
    From,
    To,
    Pai,
    Event,
    CallId,
    CSeq,
    Via,
    ResourcePriority,
    #[default]
    Other,
}

fn known(name: &[u8]) -> Known {
    // By length first: each header line costs one comparison, not up to sixteen.
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    match name.len() {
        1 => match name[0].to_ascii_lowercase() {
            b'f' => Known::From,
            b't' => Known::To,
            b'o' => Known::Event,
            b'i' => Known::CallId,
            b'v' => Known::Via,
            _ => Known::Other,
        },
        2 if is("to") => Known::To,
        3 if is("via") => Known::Via,
        4 if is("from") => Known::From,
        4 if is("cseq") => Known::CSeq,
        5 if is("event") => Known::Event,
        7 if is("call-id") => Known::CallId,
        17 if is("resource-priority") => Known::ResourcePriority,
        19 if is("p-asserted-identity") => Known::Pai,
        _ => Known::Other,
    }
}

/// Scans a raw SIP request.
pub fn scan<'a>(input: &'a [u8]) -> Result<SipRequest<'a>, SipError> {
    // Leading empty lines are allowed before a message on a stream (RFC 3261 §7.5).
    let mut at = 0;
    let request_line = loop {
        let (l, next) = line(input, at).ok_or(SipError::Truncated)?;
        at = next;
        if !l.is_empty() {
            break l;
        }
    };
    if request_line.starts_with(b"SIP/") {
        return Err(SipError::NotARequest);
    }
    // `METHOD SP Request-URI SP SIP/2.0`, split as bytes (a `str` split cost a tenth of the
    // scan); the method is a token and the version ASCII, so only the URI needs a UTF-8 check.
    let split = |b: &'a [u8]| memchr::memchr(b' ', b).map(|sp| (&b[..sp], &b[sp + 1..]));
    let (method, rest) = split(request_line).ok_or(SipError::BadRequestLine)?;
    let (request_uri, version) = split(rest).ok_or(SipError::BadRequestLine)?;
    let method_ok = !method.is_empty()
        && method
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(b));
    if !method_ok || request_uri.is_empty() || !version.eq_ignore_ascii_case(b"SIP/2.0") {
        return Err(SipError::BadRequestLine);
    }
    let (Ok(method), Ok(request_uri)) = (
        std::str::from_utf8(method),
        std::str::from_utf8(request_uri),
    ) else {
        return Err(SipError::BadRequestLine);
    };
    // Per known header: the first line's value and where the line after it starts.
    let mut fields: [Option<(&[u8], usize)>; 8] = [None; 8];
    // The header being read, to extend over folds: (field slot, value start, value end, end
    // of its last line). Unknown headers have no slot but still take their folds.
    let mut current: Option<(Option<usize>, usize, usize, usize)> = None;
    fn commit<'a>(
        fields: &mut [Option<(&'a [u8], usize)>; 8],
        current: Option<(Option<usize>, usize, usize, usize)>,
        input: &'a [u8],
    ) -> Result<(), SipError> {
        let Some((Some(slot), start, end, after)) = current else {
            return Ok(());
        };
        if fields[slot].is_none() {
            fields[slot] = Some((trim(&input[start..end]), after));
            return Ok(());
        }
        // Single-valued headers (RFC 3261 §7.3.1 allows repeats only for comma lists).
        match slot {
            0 => Err(SipError::RepeatedHeader("From")),
            1 => Err(SipError::RepeatedHeader("To")),
            4 => Err(SipError::RepeatedHeader("Call-ID")),
            5 => Err(SipError::RepeatedHeader("CSeq")),
            _ => Ok(()),
        }
    }
    let body = loop {
        let (l, next) = line(input, at).ok_or(SipError::Truncated)?;
        if l.is_empty() {
            commit(&mut fields, current, input)?;
            break next;
        }
        if l[0] == b' ' || l[0] == b'\t' {
            // A fold: the value goes on (RFC 3261 §7.3.1), whatever the header.
            match &mut current {
                Some((_, _, end, after)) => (*end, *after) = (at + l.len(), next),
                None => return Err(SipError::BadHeader),
            }
            at = next;
            continue;
        }
        commit(&mut fields, current, input)?;
        // A plain loop: the colon comes after a few bytes, before memchr's set-up would pay off.
        let colon = l
            .iter()
            .position(|&b| b == b':')
            .ok_or(SipError::BadHeader)?;
        // White space may separate the name from the colon (HCOLON, RFC 3261 §25.1).
        let name = trim(&l[..colon]);
        let kind = known(name);
        // A known name is neither empty nor holds white space: only the others are looked at.
        if kind == Known::Other && (name.is_empty() || name.iter().any(u8::is_ascii_whitespace)) {
            return Err(SipError::BadHeader);
        }
        let slot = match kind {
            Known::From => Some(0),
            Known::To => Some(1),
            Known::Pai => Some(2),
            Known::Event => Some(3),
            Known::CallId => Some(4),
            Known::CSeq => Some(5),
            Known::Via => Some(6),
            Known::ResourcePriority => Some(7),
            Known::Other => None,
        };
        current = Some((slot, at + colon + 1, at + l.len(), next));
        at = next;
    };
    // A list header: its first line, and the lines after it to look for more.
    let list = |field: Option<(&'a [u8], usize)>, name: Known| match field {
        None => HeaderValues::NONE,
        Some((first, after)) => HeaderValues {
            first: Some(first),
            rest: &input[after..body],
            name,
        },
    };
    let pai = list(fields[2], Known::Pai);
    let rp = list(fields[7], Known::ResourcePriority);
    let [from, to, _, event, call_id, cseq, via, _] = fields.map(|f| f.map(|(v, _)| v));
    let from = from.ok_or(SipError::MissingHeader("From"))?;
    let to = to.ok_or(SipError::MissingHeader("To"))?;
    let call_id = call_id.ok_or(SipError::MissingHeader("Call-ID"))?;
    let cseq = cseq.ok_or(SipError::MissingHeader("CSeq"))?;
    let split = cseq
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .ok_or(SipError::BadCSeq)?;
    let number = std::str::from_utf8(&cseq[..split])
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or(SipError::BadCSeq)?;
    let cseq_method = trim(&cseq[split..]);
    if cseq_method.is_empty() {
        return Err(SipError::BadCSeq);
    }
    let via = via.map(|v| trim(top_value(v)));
    Ok(SipRequest {
        method,
        request_uri,
        from,
        to,
        p_asserted_identity: pai,
        event,
        call_id,
        cseq: number,
        cseq_method,
        via,
        resource_priority: rp,
        initial: !has_tag(to),
    })
}

/// The first line of a message (leading empty lines skipped, RFC 3261 §7.5) and where the
/// header section starts.
pub fn start_line(input: &[u8]) -> Result<(&[u8], usize), SipError> {
    let mut at = 0;
    loop {
        let (l, next) = line(input, at).ok_or(SipError::Truncated)?;
        at = next;
        if !l.is_empty() {
            return Ok((l, at));
        }
    }
}

/// The header lines of a message from `at` (where [`start_line`] left off): each item is a
/// (name, value) pair, both trimmed, the value running over folded lines. After the last
/// header, [`HeaderLines::body_start`] says where the body begins.
#[derive(Clone, Debug)]
pub struct HeaderLines<'a> {
    input: &'a [u8],
    at: usize,
    body: Option<usize>,
}

impl<'a> HeaderLines<'a> {
    /// The headers of `input` starting at offset `at`.
    pub fn new(input: &'a [u8], at: usize) -> Self {
        Self {
            input,
            at,
            body: None,
        }
    }

    /// Where the body starts, once the empty line after the headers has been read.
    pub fn body_start(&self) -> Option<usize> {
        self.body
    }
}

impl<'a> Iterator for HeaderLines<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), SipError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.body.is_some() {
            return None;
        }
        let Some((l, next)) = line(self.input, self.at) else {
            self.body = Some(self.input.len());
            return Some(Err(SipError::Truncated));
        };
        if l.is_empty() {
            self.body = Some(next);
            return None;
        }
        if l[0] == b' ' || l[0] == b'\t' {
            self.body = Some(self.input.len());
            return Some(Err(SipError::BadHeader));
        }
        let Some(colon) = l.iter().position(|&b| b == b':') else {
            self.body = Some(self.input.len());
            return Some(Err(SipError::BadHeader));
        };
        let name = trim(&l[..colon]);
        if name.is_empty() || name.iter().any(|b| b.is_ascii_whitespace()) {
            self.body = Some(self.input.len());
            return Some(Err(SipError::BadHeader));
        }
        let start = self.at + colon + 1;
        let mut end = self.at + l.len();
        self.at = next;
        // Folded continuation lines belong to this value.
        while let Some((f, after)) = line(self.input, self.at) {
            if f.first().is_some_and(|&b| b == b' ' || b == b'\t') {
                end = self.at + f.len();
                self.at = after;
            } else {
                break;
            }
        }
        Some(Ok((name, trim(&self.input[start..end]))))
    }
}

/// The part of a comma-separated header value before the first comma outside quotes and `<>`.
fn top_value(v: &[u8]) -> &[u8] {
    // Most values (a Via with one via-parm) hold no comma at all: one search settles them.
    if memchr::memchr(b',', v).is_none() {
        return v;
    }
    let (mut quoted, mut angle) = (false, false);
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            b'<' if !quoted => angle = true,
            b'>' if !quoted => angle = false,
            b',' if !quoted && !angle => return &v[..i],
            _ => {}
        }
        i += 1;
    }
    v
}

/// Where the header parameters of a name-addr / addr-spec value start: after the `>` of a
/// name-addr, or at the first `;` of an addr-spec.
fn params_start(v: &[u8]) -> usize {
    let mut quoted = false;
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            // Display names are a few bytes, the URI is longer: memchr finds its end.
            b'<' if !quoted => {
                return memchr::memchr(b'>', &v[i..]).map_or(v.len(), |e| i + e + 1);
            }
            b';' if !quoted => return i,
            _ => {}
        }
        i += 1;
    }
    v.len()
}

/// True when a From/To value has a `tag` header parameter.
pub fn has_tag(value: &[u8]) -> bool {
    tag(value).is_some()
}

/// The value of the `tag` header parameter of a From/To value (empty for a bare `;tag`),
/// `None` when there is none.
pub fn tag(value: &[u8]) -> Option<&[u8]> {
    value[params_start(value)..]
        .split(|&b| b == b';')
        .find_map(|p| {
            let mut kv = p.splitn(2, |&b| b == b'=');
            let name = kv.next().unwrap_or(&[]);
            trim(name)
                .eq_ignore_ascii_case(b"tag")
                .then(|| trim(kv.next().unwrap_or(&[])))
        })
}

/// The URI of a header value (`<…>` included for a name-addr, the addr-spec without its
/// header parameters otherwise), as text; `None` when it is not UTF-8. One pass that stops at
/// the URI: display names are skipped, not validated.
pub fn uri_part(value: &[u8]) -> Option<&str> {
    let start = value.iter().position(|c| !c.is_ascii_whitespace())?;
    let v = &value[start..];
    let mut quoted = false;
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            b'<' if !quoted => {
                let end = v[i..].iter().position(|&b| b == b'>')?;
                return std::str::from_utf8(&v[i..=i + end]).ok();
            }
            // An addr-spec ends at its header parameters or at the next value.
            b';' | b',' if !quoted => break,
            _ => {}
        }
        i += 1;
    }
    if quoted {
        return None;
    }
    std::str::from_utf8(trim(&v[..i.min(v.len())]))
        .ok()
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &[u8] = b"INVITE sip:+12125551234@gw.example.com;user=phone SIP/2.0\r\n\
Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds, SIP/2.0/UDP proxy.example;branch=z9hG4bKx\r\n\
Max-Forwards: 70\r\n\
To: \"Hotline\" <tel:+1-212-555-1234>\r\n\
From: \"Alice\" <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
P-Asserted-Identity: <sip:alice@atlanta.example.com>, <tel:+13125550000>\r\n\
Call-ID: a84b4c76e66710@pc33.atlanta.example.com\r\n\
CSeq: 314159 INVITE\r\n\
Content-Type: application/sdp\r\n\
Content-Length: 4\r\n\
\r\n\
v=0\n";

    #[test]
    fn scans_a_realistic_invite() {
        let r = scan(INVITE).expect("valid");
        assert_eq!(r.method, "INVITE");
        assert_eq!(r.request_uri, "sip:+12125551234@gw.example.com;user=phone");
        assert_eq!(r.to, b"\"Hotline\" <tel:+1-212-555-1234>");
        assert_eq!(
            r.from,
            b"\"Alice\" <sip:alice@atlanta.example.com>;tag=1928301774"
        );
        assert_eq!(
            r.p_asserted_identity.values().collect::<Vec<_>>(),
            [
                &b"<sip:alice@atlanta.example.com>"[..],
                b"<tel:+13125550000>"
            ]
        );
        assert_eq!(r.call_id, b"a84b4c76e66710@pc33.atlanta.example.com");
        assert_eq!((r.cseq, r.cseq_method), (314_159, &b"INVITE"[..]));
        assert_eq!(
            r.via,
            Some(&b"SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds"[..])
        );
        assert!(r.initial);
        assert_eq!(uri_part(r.to), Some("<tel:+1-212-555-1234>"));
        assert_eq!(uri_part(r.from), Some("<sip:alice@atlanta.example.com>"));
    }

    #[test]
    fn compact_forms_folds_case_and_bare_lf() {
        let msg = b"MESSAGE sip:bob@b.example SIP/2.0\n\
v: SIP/2.0/TCP a.example;branch=z9hG4bK1\n\
t: <sip:bob@b.example>;TAG=x9\n\
f: \"Al\n  ice\" <sip:alice@a.example>\n\
\t;tag=77\n\
i: 1@a\n\
CSEQ: 2 MESSAGE\n\
o: presence;id=1\n\
\n";
        let r = scan(msg).expect("valid");
        assert_eq!(r.method, "MESSAGE");
        assert!(!r.initial, "To has a tag");
        assert_eq!(uri_part(r.from), Some("<sip:alice@a.example>"));
        assert!(has_tag(r.from));
        assert_eq!(r.event, Some(&b"presence;id=1"[..]));
        assert_eq!(r.call_id, b"1@a");
    }

    #[test]
    fn tags_inside_uris_and_quotes_do_not_count() {
        assert!(!has_tag(b"<sip:bob@b.example;tag=x>"));
        assert!(!has_tag(b"\"tag=1;\" <sip:bob@b.example>"));
        assert!(has_tag(b"sip:bob@b.example;tag=1"));
        assert!(has_tag(b"<sip:bob@b.example> ; tag = 1"));
        assert_eq!(
            uri_part(b"sip:bob@b.example;tag=1"),
            Some("sip:bob@b.example")
        );
        // An 8-bit display name does not hide the URI.
        assert_eq!(
            uri_part(b"\"J\xf6rg\" <sip:j@x.example>"),
            Some("<sip:j@x.example>")
        );
    }

    #[test]
    fn refuses_malformed_messages() {
        let cases: [(&[u8], SipError); 8] = [
            (b"", SipError::Truncated),
            (b"INVITE sip:a@b SIP/2.0\r\nFrom: <sip:x@y>\r\n", SipError::Truncated),
            (b"SIP/2.0 200 OK\r\n\r\n", SipError::NotARequest),
            (b"INVITE sip:a@b\r\n\r\n", SipError::BadRequestLine),
            (b"INVITE  sip:a@b SIP/2.0\r\n\r\n", SipError::BadRequestLine),
            (b"INVITE sip:a@b SIP/2.0\r\nno colon here\r\n\r\n", SipError::BadHeader),
            (b"INVITE sip:a@b SIP/2.0\r\nFrom: <sip:x@y>\r\nTo: <sip:a@b>\r\nCall-ID: 1\r\n\r\n", SipError::MissingHeader("CSeq")),
            (b"INVITE sip:a@b SIP/2.0\r\nFrom: <sip:x@y>\r\nTo: <sip:a@b>\r\nCall-ID: 1\r\nCSeq: x INVITE\r\n\r\n", SipError::BadCSeq),
        ];
        for (msg, err) in cases {
            assert_eq!(scan(msg), Err(err), "{}", String::from_utf8_lossy(msg));
        }
        assert_eq!(scan(b" folded: x\r\n"), Err(SipError::BadRequestLine));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for len in 0..2000 {
            let mut msg = INVITE.to_vec();
            for _ in 0..(len % 7 + 1) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let i = (state as usize) % msg.len();
                msg[i] = (state >> 32) as u8;
            }
            msg.truncate(len % (INVITE.len() + 1));
            if let Ok(r) = scan(&msg) {
                let _ = (uri_part(r.from), uri_part(r.to), has_tag(r.to));
            }
        }
    }

    /// RFC 3261 §7.3.1: "Multiple header field rows with the same field-name MAY be present
    /// in a message if and only if the entire field-value for that header field is defined as
    /// a comma-separated list" and "It MUST be possible to combine the multiple header field
    /// rows into one \"field-name: field-value\" pair, without changing the semantics of the
    /// message".
    #[test]
    fn repeated_lines_are_one_list() {
        let msg = b"INVITE sip:b@y SIP/2.0\r\n\
P-Asserted-Identity: \"A, B\" <sip:a@x.example>\r\n\
To: <sip:b@y>\r\n\
Resource-Priority: dsn.flash\r\n\
From: <sip:a@x>;tag=1\r\n\
p-asserted-identity:\r\n <tel:+1-212-555-0000>,\r\n\t<sip:c@z>\r\n\
Call-ID: 1@x\r\n\
RESOURCE-PRIORITY : wps.3 , ets.0\r\n\
CSeq: 1 INVITE\r\n\
X-P-Asserted-Identity: <sip:not@this>\r\n\
\r\n\
P-Asserted-Identity: <sip:in@body>\r\n";
        let r = scan(msg).expect("valid");
        let pai: Vec<&[u8]> = r.p_asserted_identity.values().collect();
        assert_eq!(
            pai,
            [
                &b"\"A, B\" <sip:a@x.example>"[..],
                b"<tel:+1-212-555-0000>",
                b"<sip:c@z>"
            ]
        );
        assert_eq!(r.p_asserted_identity.lines().count(), 2);
        let rp: Vec<&[u8]> = r.resource_priority.values().collect();
        assert_eq!(rp, [&b"dsn.flash"[..], b"wps.3", b"ets.0"]);
        // One value a caller passed: no other lines.
        let one = HeaderValues::one(b"a, b");
        assert_eq!(one.values().collect::<Vec<_>>(), [&b"a"[..], b"b"]);
        assert!(HeaderValues::NONE.is_empty() && HeaderValues::NONE.values().next().is_none());
        assert!(scan(INVITE).expect("valid").resource_priority.is_empty());
    }

    #[test]
    fn single_valued_headers_may_not_repeat() {
        for (name, line) in [
            ("From", "f: <sip:other@x>"),
            ("To", "To: <sip:other@y>"),
            ("Call-ID", "i: 2@x"),
            ("CSeq", "CSeq: 2 INVITE"),
        ] {
            let msg = format!(
                "INVITE sip:b@y SIP/2.0\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:b@y>\r\nCall-ID: 1@x\r\nCSeq: 1 INVITE\r\n{line}\r\n\r\n"
            );
            assert_eq!(
                scan(msg.as_bytes()),
                Err(SipError::RepeatedHeader(name)),
                "{line}"
            );
        }
    }

    /// Folds continue whatever header they follow, known or not (RFC 3261 §7.3.1).
    #[test]
    fn folds_after_unknown_headers() {
        let msg = b"OPTIONS sip:b@y SIP/2.0\r\nAccept: a/b,\r\n    c/d\r\nTo : <sip:b@y>\r\nFrom: <sip:a@x>;tag=1\r\nCall-ID: 1@x\r\nCSeq: 1 OPTIONS\r\n\r\n";
        let r = scan(msg).expect("valid");
        assert_eq!(uri_part(r.to), Some("<sip:b@y>"));
    }
}
