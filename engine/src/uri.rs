//! SIP, SIPS and tel URI views and the canonical forms used to compare them.
//!
//! This module owns URI syntax: pulling the URI out of a header value as a SIP stack holds it
//! (`"Alice" <sip:alice@Example.COM;transport=tcp>;tag=9`), splitting it into borrowed parts
//! without allocating, and writing the canonical comparison key into a caller-owned, reused
//! buffer. The compiler uses the same functions for the URIs in a policy, so both sides of every
//! comparison are canonicalised by one piece of code.
//!
//! Canonical comparison follows RFC 3261 §19.1.4: scheme and host compare case-insensitively,
//! user and password case-sensitively, %-escapes are decoded first, a port written out never
//! equals an omitted one, and URI parameters present in only one URI are ignored except `user`,
//! `ttl`, `method` and `maddr`; header components must match both ways.
//!
//! Telephone numbers follow RFC 3966: visual separators (`-` `.` `(` `)`) are removed, a global
//! number keeps its `+`, a local number keeps its `phone-context`. **A `sip:`/`sips:` URI with
//! `user=phone` is compared as the telephone number in its user part**, so a `tel:` id and a
//! `many-tel` prefix match it whatever its host. A SIP URI without `user=phone` is never taken
//! as a number, even when its user part looks like one (RFC 3261 §19.1.1).

/// Why a URI could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UriError {
    /// Nothing there.
    Empty,
    /// No `scheme:`.
    NoScheme,
    /// A SIP URI without a host.
    NoHost,
    /// A host with characters a host cannot have.
    BadHost,
    /// A port that is not a number in 0..=65535.
    BadPort,
    /// A `%` not followed by two hexadecimal digits.
    BadEscape,
    /// White space, control characters, `<`, `>` or `"` inside the URI.
    BadCharacter,
    /// A tel URI without a number.
    NoNumber,
    /// A `<` without its `>` in a header value.
    Unclosed,
}

impl UriError {
    /// What is wrong, for a person.
    pub fn message(self) -> &'static str {
        match self {
            UriError::Empty => "the URI is empty",
            UriError::NoScheme => "a URI needs a scheme followed by ':' (e.g. sip:, tel:)",
            UriError::NoHost => "a SIP URI needs a host",
            UriError::BadHost => "the host is not a domain name, IPv4 address or [IPv6] reference",
            UriError::BadPort => "the port is not a number from 0 to 65535",
            UriError::BadEscape => "a '%' must be followed by two hexadecimal digits",
            UriError::BadCharacter => {
                "a URI holds no white space, control characters, '<', '>' or '\"'"
            }
            UriError::NoNumber => "a tel URI needs a number",
            UriError::Unclosed => "a '<' without its '>'",
        }
    }
}

impl std::fmt::Display for UriError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for UriError {}

/// A parsed URI, borrowing the text it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UriRef<'a> {
    /// `sip:` or `sips:`.
    Sip(SipUri<'a>),
    /// `tel:`.
    Tel(TelUri<'a>),
    /// Any other scheme: compared as lower-case scheme plus the rest verbatim.
    Other {
        /// The scheme as written.
        scheme: &'a str,
        /// Everything after the colon.
        rest: &'a str,
    },
}

/// The parts of a `sip:`/`sips:` URI, as written (still %-escaped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SipUri<'a> {
    /// `sips:` rather than `sip:`.
    pub secure: bool,
    /// The user part (may hold telephone-subscriber parameters after a `;`).
    pub user: Option<&'a str>,
    /// The password after `user:`.
    pub password: Option<&'a str>,
    /// The host (a domain name, IPv4 address or `[IPv6]` reference).
    pub host: &'a str,
    /// The port, when written.
    pub port: Option<u16>,
    /// URI parameters after the host, without the leading `;`.
    pub params: Params<'a>,
    /// Header components after `?`, without the `?`.
    pub headers: &'a str,
    /// The URI holds %-escapes (without any, canonical forms are plain copies).
    pub escaped: bool,
}

/// The parts of a `tel:` URI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TelUri<'a> {
    /// The number as written (with visual separators).
    pub number: &'a str,
    /// Parameters after the number, without the leading `;`.
    pub params: Params<'a>,
    /// The URI holds %-escapes.
    pub escaped: bool,
}

/// `;`-separated `name[=value]` parameters, iterated without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Params<'a>(pub &'a str);

impl<'a> Params<'a> {
    /// Each parameter as `(name, value)`; the value is `None` for a bare name.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, Option<&'a str>)> + 'a {
        let mut rest = self.0;
        std::iter::from_fn(move || {
            loop {
                if rest.is_empty() {
                    return None;
                }
                let (param, tail) = split_byte(rest, b';').unwrap_or((rest, ""));
                rest = tail;
                if param.is_empty() {
                    continue;
                }
                return Some(match split_byte(param, b'=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (param, None),
                });
            }
        })
    }

    /// The value of the first parameter named `name` (case-insensitive); `Some(None)` for a
    /// bare name.
    pub fn get(&self, name: &str) -> Option<Option<&'a str>> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}

/// Splits at the first `b` (an ASCII byte), scanning bytes: the URIs here are short, and a
/// plain loop beats the generic `char` searcher on them.
#[inline]
fn split_byte(s: &str, b: u8) -> Option<(&str, &str)> {
    let i = s.as_bytes().iter().position(|&c| c == b)?;
    // `b` is ASCII, so `i` and `i + 1` are character boundaries.
    Some((&s[..i], &s[i + 1..]))
}

const PLAIN: u8 = 0;
const BAD: u8 = 1;
const PERCENT: u8 = 2;
const COLON: u8 = 3;
const AT: u8 = 4;
const SEMI: u8 = 5;
const QUEST: u8 = 6;

/// How [`parse`] treats each byte: white space, control characters, `<`, `>` and `"` are
/// refused; `%` starts an escape; `:` `@` `;` `?` delimit the parts of a SIP URI.
static BYTE_CLASS: [u8; 256] = {
    let mut t = [PLAIN; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        if b.is_ascii_whitespace() || b.is_ascii_control() || b == b'<' || b == b'>' || b == b'"' {
            t[c] = BAD;
        }
        c += 1;
    }
    t[b'%' as usize] = PERCENT;
    t[b':' as usize] = COLON;
    t[b'@' as usize] = AT;
    t[b';' as usize] = SEMI;
    t[b'?' as usize] = QUEST;
    t
};

/// Bytes allowed in a host name or IPv4 address.
static HOST_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        t[c] = b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_';
        c += 1;
    }
    t
};

/// Where the delimiters of a URI are, found in [`parse`]'s one pass. Positions are byte
/// offsets into the trimmed URI; `usize::MAX` means absent.
struct Delimiters {
    /// The scheme's colon.
    scheme: usize,
    /// The first `;` after the scheme (a tel URI's parameters).
    first_semi: usize,
    /// The first `@` after the scheme.
    at: usize,
    /// The first `:` between the scheme and the `@` (a password).
    user_colon: usize,
    /// The first `:`, `;` and `?` after the `@` (after the scheme when there is no `@`).
    colon: usize,
    semi: usize,
    quest: usize,
    /// A `%` appeared.
    escaped: bool,
}

const ABSENT: usize = usize::MAX;

/// Parses a URI (no surrounding `<>`, no header parameters).
pub fn parse(s: &str) -> Result<UriRef<'_>, UriError> {
    let s = s.trim_ascii();
    if s.is_empty() {
        return Err(UriError::Empty);
    }
    // One pass: refuse bad characters, check escapes, find the scheme's colon and the
    // delimiters of a SIP URI. Most bytes are plain, so a table lookup and one rarely-taken
    // branch per byte.
    let b = s.as_bytes();
    let mut d = Delimiters {
        scheme: ABSENT,
        first_semi: ABSENT,
        at: ABSENT,
        user_colon: ABSENT,
        colon: ABSENT,
        semi: ABSENT,
        quest: ABSENT,
        escaped: false,
    };
    let mut i = 0;
    loop {
        // Plain bytes in a tight loop of their own, so the dispatch below (which the compiler
        // makes a jump table) runs only at delimiters.
        while i < b.len() && BYTE_CLASS[usize::from(b[i])] == PLAIN {
            i += 1;
        }
        let Some(&byte) = b.get(i) else {
            break;
        };
        match BYTE_CLASS[usize::from(byte)] {
            BAD => return Err(UriError::BadCharacter),
            PERCENT => {
                let ok =
                    b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit();
                if !ok {
                    return Err(if d.scheme != ABSENT {
                        UriError::BadEscape
                    } else {
                        UriError::NoScheme
                    });
                }
                d.escaped = true;
                i += 3;
                continue;
            }
            // Before the scheme's colon only the colon matters (the scheme check refuses the
            // rest).
            COLON if d.scheme == ABSENT => d.scheme = i,
            _ if d.scheme == ABSENT => {}
            COLON if d.colon == ABSENT => d.colon = i,
            SEMI => {
                if d.first_semi == ABSENT {
                    d.first_semi = i;
                }
                if d.semi == ABSENT {
                    d.semi = i;
                }
            }
            QUEST if d.quest == ABSENT => d.quest = i,
            AT if d.at == ABSENT => {
                // What came before belongs to the user info: start over for the host part.
                d.at = i;
                d.user_colon = d.colon;
                d.colon = ABSENT;
                d.semi = ABSENT;
                d.quest = ABSENT;
            }
            _ => {}
        }
        i += 1;
    }
    if d.scheme == ABSENT {
        return Err(UriError::NoScheme);
    }
    let (scheme, rest) = (&s[..d.scheme], &s[d.scheme + 1..]);
    let scheme_ok = scheme
        .bytes()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'));
    if !scheme_ok || rest.is_empty() {
        return Err(UriError::NoScheme);
    }
    if scheme.eq_ignore_ascii_case("sip") || scheme.eq_ignore_ascii_case("sips") {
        sip_from_delimiters(s, scheme.len() == 4, &d).map(UriRef::Sip)
    } else if scheme.eq_ignore_ascii_case("tel") {
        let (number, params) = match d.first_semi {
            ABSENT => (rest, ""),
            semi => (&s[d.scheme + 1..semi], &s[semi + 1..]),
        };
        if number.is_empty() {
            return Err(UriError::NoNumber);
        }
        Ok(UriRef::Tel(TelUri {
            number,
            params: Params(params),
            escaped: d.escaped,
        }))
    } else {
        Ok(UriRef::Other { scheme, rest })
    }
}

/// Splits a SIP URI at the delimiters [`parse`] found, without scanning it again. An IPv6
/// reference (whose colons are not a port's) takes [`parse_sip`].
fn sip_from_delimiters<'a>(
    s: &'a str,
    secure: bool,
    d: &Delimiters,
) -> Result<SipUri<'a>, UriError> {
    let host_start = if d.at == ABSENT {
        d.scheme + 1
    } else {
        d.at + 1
    };
    if s.as_bytes().get(host_start) == Some(&b'[') {
        return parse_sip(secure, &s[d.scheme + 1..]);
    }
    let (user, password) = match (d.at, d.user_colon) {
        (ABSENT, _) => (None, None),
        (at, ABSENT) => (Some(&s[d.scheme + 1..at]), None),
        (at, c) => (Some(&s[d.scheme + 1..c]), Some(&s[c + 1..at])),
    };
    let hostpart_end = d.quest.min(s.len());
    let headers = if d.quest == ABSENT {
        ""
    } else {
        &s[d.quest + 1..]
    };
    let (hostport_end, params) = if d.semi < hostpart_end {
        (d.semi, &s[d.semi + 1..hostpart_end])
    } else {
        (hostpart_end, "")
    };
    let (host, port) = if d.colon < hostport_end {
        (&s[host_start..d.colon], Some(&s[d.colon + 1..hostport_end]))
    } else {
        (&s[host_start..hostport_end], None)
    };
    if host.is_empty() {
        return Err(UriError::NoHost);
    }
    if !host.bytes().all(|b| HOST_BYTE[usize::from(b)]) {
        return Err(UriError::BadHost);
    }
    Ok(SipUri {
        secure,
        user: user.filter(|u| !u.is_empty()),
        password,
        host,
        port: parse_port(port)?,
        params: Params(params),
        headers,
        escaped: d.escaped,
    })
}

fn parse_port(port: Option<&str>) -> Result<Option<u16>, UriError> {
    match port {
        None => Ok(None),
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(Some(p.parse::<u16>().map_err(|_| UriError::BadPort)?))
        }
        Some(_) => Err(UriError::BadPort),
    }
}

/// Splits the part of a SIP URI after the scheme by searching it for each delimiter in turn:
/// the general path, taken for IPv6 references (and the reference the one-pass split is
/// tested against).
fn parse_sip(secure: bool, rest: &str) -> Result<SipUri<'_>, UriError> {
    // No '@' may appear unescaped after the userinfo, so the first one ends it.
    let (userinfo, hostpart) = match split_byte(rest, b'@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let (user, password) = match userinfo {
        Some(u) => match split_byte(u, b':') {
            Some((user, pw)) => (Some(user), Some(pw)),
            None => (Some(u), None),
        },
        None => (None, None),
    };
    let (hostpart, headers) = split_byte(hostpart, b'?').unwrap_or((hostpart, ""));
    let (hostport, params) = split_byte(hostpart, b';').unwrap_or((hostpart, ""));
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let end = v6.find(']').ok_or(UriError::BadHost)?;
        let host = &hostport[..end + 2];
        let after = &v6[end + 1..];
        let ok = v6[..end]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        if !ok || end == 0 {
            return Err(UriError::BadHost);
        }
        match after {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':').ok_or(UriError::BadPort)?)),
        }
    } else {
        match split_byte(hostport, b':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err(UriError::NoHost);
    }
    if !host.starts_with('[') && !host.bytes().all(|b| HOST_BYTE[usize::from(b)]) {
        return Err(UriError::BadHost);
    }
    Ok(SipUri {
        secure,
        user: user.filter(|u| !u.is_empty()),
        password,
        host,
        port: parse_port(port)?,
        params: Params(params),
        headers,
        escaped: has_escape(rest.as_bytes()),
    })
}

/// The URIs in a header value as a SIP stack holds it: `name-addr` (`"Bob" <sip:b@x>;tag=1`)
/// or `addr-spec` (`sip:b@x;tag=1`, where everything after the first `;` is a header
/// parameter, RFC 3261 §20.10), possibly several separated by commas (P-Asserted-Identity).
/// Yields each URI's text; an unclosed `<` yields an error and ends the iteration.
pub fn header_uris(value: &str) -> HeaderUris<'_> {
    HeaderUris {
        rest: value,
        in_params: false,
    }
}

/// Iterator returned by [`header_uris`].
#[derive(Clone, Debug)]
pub struct HeaderUris<'a> {
    rest: &'a str,
    /// `rest` starts with the header parameters of the URI last returned (skipped lazily, so
    /// taking only the first URI never scans its parameters).
    in_params: bool,
}

impl<'a> Iterator for HeaderUris<'a> {
    type Item = Result<&'a str, UriError>;

    fn next(&mut self) -> Option<Self::Item> {
        if std::mem::take(&mut self.in_params) {
            // Skip header parameters up to the next top-level comma.
            self.rest = split_byte(self.rest, b',').map_or("", |(_, tail)| tail);
        }
        let skip = self
            .rest
            .bytes()
            .position(|c| c != b',' && !c.is_ascii_whitespace())
            .unwrap_or(self.rest.len());
        let s = &self.rest[skip..];
        if s.is_empty() {
            self.rest = s;
            return None;
        }
        let b = s.as_bytes();
        let mut i = 0;
        let mut in_quotes = false;
        // Find a '<' outside a quoted display name, or the end of this value.
        while i < b.len() {
            match b[i] {
                b'\\' if in_quotes => i += 1,
                b'"' => in_quotes = !in_quotes,
                b'<' if !in_quotes => {
                    let Some((uri, after)) = split_byte(&s[i + 1..], b'>') else {
                        self.rest = "";
                        return Some(Err(UriError::Unclosed));
                    };
                    self.rest = after;
                    self.in_params = true;
                    return Some(Ok(uri.trim_ascii()));
                }
                b',' if !in_quotes => break,
                _ => {}
            }
            i += 1;
        }
        if in_quotes {
            self.rest = "";
            return Some(Err(UriError::Unclosed));
        }
        // addr-spec: up to the first ';' (header parameters) or the comma.
        let value = &s[..i];
        self.rest = &s[i..];
        let uri = split_byte(value, b';')
            .map_or(value, |(u, _)| u)
            .trim_ascii();
        Some(if uri.is_empty() {
            Err(UriError::Empty)
        } else {
            Ok(uri)
        })
    }
}

/// The value of hex digit `b`.
fn hex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

/// `b` holds a `%`. A plain loop, not `contains`: its out-of-line memchr call costs more than
/// scanning the short strings of a URI (measured: ~7% of a classification).
#[inline]
#[allow(clippy::manual_contains)]
fn has_escape(b: &[u8]) -> bool {
    b.iter().any(|&c| c == b'%')
}

/// Appends `raw` with %-escapes decoded (escapes were validated by [`parse`]).
#[inline]
pub fn decode_into(raw: &str, out: &mut Vec<u8>) {
    let b = raw.as_bytes();
    if !has_escape(b) {
        out.extend_from_slice(b);
        return;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(hex(b[i + 1]) << 4 | hex(b[i + 2]));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
}

/// Decoded bytes of `raw`, one at a time, lower-cased.
fn decoded_lower(raw: &str) -> impl Iterator<Item = u8> + '_ {
    let b = raw.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= b.len() {
            return None;
        }
        let c = if b[i] == b'%' && i + 2 < b.len() {
            i += 3;
            hex(b[i - 2]) << 4 | hex(b[i - 1])
        } else {
            i += 1;
            b[i - 1]
        };
        Some(c.to_ascii_lowercase())
    })
}

/// `raw` (%-escaped) equals `canonical` (decoded, lower-case), ignoring ASCII case.
pub fn eq_decoded_ci(raw: &str, canonical: &[u8]) -> bool {
    decoded_lower(raw).eq(canonical.iter().copied())
}

/// Appends `raw`, decoded and lower-cased.
#[inline]
pub fn decode_lower_into(raw: &str, out: &mut Vec<u8>) {
    let b = raw.as_bytes();
    if !has_escape(b) {
        out.extend(b.iter().map(u8::to_ascii_lowercase));
        return;
    }
    let start = out.len();
    decode_into(raw, out);
    out[start..].make_ascii_lowercase();
}

/// RFC 3966 visual separators.
pub fn is_visual_separator(b: u8) -> bool {
    matches!(b, b'-' | b'.' | b'(' | b')')
}

/// Normalises the telephone number in `buf[start..]` in place: visual separators removed,
/// hex digits upper-cased, a leading `+` kept. Returns whether the number is global (`+`).
pub fn normalize_number(buf: &mut Vec<u8>, start: usize) -> bool {
    let global = buf.get(start) == Some(&b'+');
    let first_digit = start + usize::from(global);
    let mut w = first_digit;
    for r in first_digit..buf.len() {
        let b = buf[r];
        if !is_visual_separator(b) {
            buf[w] = b.to_ascii_uppercase();
            w += 1;
        }
    }
    buf.truncate(w);
    global
}

/// The canonical form of one URI, with its parts as slices of one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Canonical<'b, 'a> {
    /// The exact-match key: `sip:user@host[:port]` (user decoded, host lower-case) for SIP,
    /// `tel:+digits` or `tel:digits;phone-context=ctx` for numbers (including SIP URIs with
    /// `user=phone`), `scheme:rest` otherwise.
    pub key: &'b [u8],
    /// The host, lower-case (SIP and SIPS URIs).
    pub host: Option<&'b [u8]>,
    /// The telephone number (tel URIs and SIP URIs with `user=phone`).
    pub number: Option<Number<'b>>,
    /// The parameters and headers of a SIP URI compared as a SIP URI (not as a number), for
    /// the comparison of exact matches; `None` for everything else.
    pub sip: Option<SipRest<'a>>,
}

/// What of a SIP URI its canonical key leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SipRest<'a> {
    /// URI parameters, as written.
    pub params: Params<'a>,
    /// Header components, as written.
    pub headers: &'a str,
}

/// A canonical telephone number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Number<'b> {
    /// Digits without separators (and without the `+` of a global number).
    pub digits: &'b [u8],
    /// Starts with `+`.
    pub global: bool,
    /// `phone-context` of a local number, canonical: `+digits` or a lower-case domain.
    pub context: Option<&'b [u8]>,
}

/// Appends the canonical form of a `phone-context` value.
fn context_into(raw: &str, out: &mut Vec<u8>) {
    let start = out.len();
    decode_into(raw, out);
    if out.get(start) == Some(&b'+') {
        normalize_number(out, start);
    } else {
        out[start..].make_ascii_lowercase();
    }
}

/// Writes the canonical form of `uri` into `buf` (cleared first) and returns views into it.
/// `buf` keeps its capacity between calls, so a reused buffer does not allocate.
pub fn canonicalize<'b, 'a>(uri: UriRef<'a>, buf: &'b mut Vec<u8>) -> Canonical<'b, 'a> {
    buf.clear();
    type R = std::ops::Range<usize>;
    let mut host: Option<R> = None;
    let mut number: Option<(R, bool, Option<R>)> = None;
    let key: R;
    // A number's parts: (digits as written, parameters holding phone-context).
    let escaped = match uri {
        UriRef::Sip(s) => s.escaped,
        UriRef::Tel(t) => t.escaped,
        UriRef::Other { .. } => true,
    };
    // Without escapes, decoding is a copy.
    let append = |raw: &str, buf: &mut Vec<u8>| match escaped {
        true => decode_into(raw, buf),
        false => buf.extend_from_slice(raw.as_bytes()),
    };
    let append_lower = |raw: &str, buf: &mut Vec<u8>| match escaped {
        true => decode_lower_into(raw, buf),
        false => buf.extend(raw.bytes().map(|b| b.to_ascii_lowercase())),
    };
    let tel_parts: Option<(&str, Params<'_>)> = match uri {
        UriRef::Tel(t) => Some((t.number, t.params)),
        UriRef::Sip(s)
            if s.params
                .get("user")
                .flatten()
                .is_some_and(|v| v.eq_ignore_ascii_case("phone")) =>
        {
            s.user.map(|u| {
                let (n, p) = split_byte(u, b';').unwrap_or((u, ""));
                (n, Params(p))
            })
        }
        _ => None,
    };
    if let Some((raw_number, params)) = tel_parts {
        // Work area after the key: decoded number, then digits, then context.
        buf.extend_from_slice(b"tel:");
        let digits_start = buf.len();
        append(raw_number, buf);
        let global = normalize_number(buf, digits_start);
        let digits = digits_start + usize::from(global)..buf.len();
        let mut context = None;
        if !global && let Some(Some(ctx)) = params.get("phone-context") {
            buf.extend_from_slice(b";phone-context=");
            let s = buf.len();
            context_into(ctx, buf);
            context = Some(s..buf.len());
        }
        key = 0..buf.len();
        number = Some((digits, global, context));
        if let UriRef::Sip(s) = uri {
            let s0 = buf.len();
            append_lower(s.host, buf);
            host = Some(s0..buf.len());
        }
    } else {
        match uri {
            UriRef::Sip(s) => {
                buf.extend_from_slice(if s.secure { b"sips:" } else { b"sip:" });
                if let Some(user) = s.user {
                    append(user, buf);
                    if let Some(pw) = s.password {
                        buf.push(b':');
                        append(pw, buf);
                    }
                    buf.push(b'@');
                }
                let h = buf.len();
                append_lower(s.host, buf);
                host = Some(h..buf.len());
                if let Some(port) = s.port {
                    buf.push(b':');
                    push_decimal(buf, port);
                }
                key = 0..buf.len();
            }
            UriRef::Other { scheme, rest } => {
                buf.extend(scheme.bytes().map(|b| b.to_ascii_lowercase()));
                buf.push(b':');
                buf.extend_from_slice(rest.as_bytes());
                key = 0..buf.len();
            }
            UriRef::Tel(_) => unreachable!("tel URIs take the number branch above"),
        }
    }
    let sip = match uri {
        UriRef::Sip(s) if number.is_none() => Some(SipRest {
            params: s.params,
            headers: s.headers,
        }),
        _ => None,
    };
    let buf: &'b [u8] = buf;
    Canonical {
        key: &buf[key],
        host: host.map(|r| &buf[r]),
        number: number.map(|(d, global, ctx)| Number {
            digits: &buf[d],
            global,
            context: ctx.map(|r| &buf[r]),
        }),
        sip,
    }
}

fn push_decimal(buf: &mut Vec<u8>, mut n: u16) {
    let mut tmp = [0u8; 5];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&tmp[i..]);
}

/// URI parameters that never match when present in only one of two URIs (RFC 3261 §19.1.4).
const STRICT_PARAMS: [&str; 4] = ["user", "ttl", "method", "maddr"];

/// A canonical URI parameter or header: lower-case name and decoded, lower-case value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CanonicalParam {
    /// Name, decoded and lower-case.
    pub name: Box<[u8]>,
    /// Value, decoded and lower-case; `None` for a bare name.
    pub value: Option<Box<[u8]>>,
}

/// The parameters of `params` in canonical form (for the policy side of a comparison).
pub fn canonical_params(params: Params<'_>) -> Vec<CanonicalParam> {
    params
        .iter()
        .map(|(n, v)| CanonicalParam {
            name: decoded_lower(n).collect(),
            value: v.map(|v| decoded_lower(v).collect()),
        })
        .collect()
}

/// The header components of a SIP URI (`a=b&c=d`) in canonical form.
pub fn canonical_headers(headers: &str) -> Vec<CanonicalParam> {
    canonical_params_sep(headers, '&')
}

fn canonical_params_sep(s: &str, sep: char) -> Vec<CanonicalParam> {
    s.split(sep)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (n, v) = match p.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (p, None),
            };
            CanonicalParam {
                name: decoded_lower(n).collect(),
                value: v.map(|v| decoded_lower(v).collect()),
            }
        })
        .collect()
}

fn value_eq(raw: Option<&str>, canon: &Option<Box<[u8]>>) -> bool {
    match (raw, canon) {
        (None, None) => true,
        (Some(r), Some(c)) => eq_decoded_ci(r, c),
        _ => false,
    }
}

/// RFC 3261 §19.1.4 for the parts the key leaves out: do the parameters and headers of a
/// request's SIP URI agree with a policy URI's canonical ones?
pub fn params_and_headers_match(
    request: &SipRest<'_>,
    policy_params: &[CanonicalParam],
    policy_headers: &[CanonicalParam],
) -> bool {
    for (name, value) in request.params.iter() {
        match policy_params.iter().find(|p| eq_decoded_ci(name, &p.name)) {
            Some(p) => {
                if !value_eq(value, &p.value) {
                    return false;
                }
            }
            None => {
                if STRICT_PARAMS
                    .iter()
                    .any(|s| eq_decoded_ci(name, s.as_bytes()))
                {
                    return false;
                }
            }
        }
    }
    for p in policy_params {
        let strict = STRICT_PARAMS.iter().any(|s| s.as_bytes() == &*p.name);
        if strict
            && !request
                .params
                .iter()
                .any(|(n, _)| eq_decoded_ci(n, &p.name))
        {
            return false;
        }
    }
    let request_headers = request.headers.split('&').filter(|h| !h.is_empty());
    if request_headers.clone().count() != policy_headers.len() {
        return false;
    }
    request_headers.into_iter().all(|h| {
        let (n, v) = match h.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (h, None),
        };
        policy_headers
            .iter()
            .any(|p| eq_decoded_ci(n, &p.name) && value_eq(v, &p.value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

        /// The one-pass split of a SIP URI agrees with searching for each delimiter in turn,
        /// parts and errors alike.
        #[test]
        fn one_pass_sip_split_agrees_with_the_general_path(
            scheme in "(sip|SIPS|sips)",
            rest in "[ab1:@;?=%.\\[\\]_F-]{0,18}",
        ) {
            let uri = format!("{scheme}:{rest}");
            let fast = parse(&uri);
            let common = matches!(
                fast,
                Err(UriError::Empty | UriError::BadCharacter | UriError::BadEscape | UriError::NoScheme)
            );
            if !common {
                let general = parse_sip(scheme.len() == 4, &rest).map(UriRef::Sip);
                prop_assert_eq!(fast, general, "{}", uri);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        /// RFC 3261 §19.1.4 case rules and idempotence of canonical keys: scheme and host
        /// compare case-insensitively, the user part case-sensitively, and a canonical key read
        /// back as a URI canonicalises to itself.
        #[test]
        fn canonical_keys_follow_case_rules_and_are_idempotent(
            user in "[a-zA-Z0-9._~-]{1,10}",
            host in "[a-zA-Z0-9]{1,8}(\\.[a-zA-Z0-9]{1,8}){0,3}",
            port in proptest::option::of(1u16..),
            secure in any::<bool>(),
            number in "\\+?[0-9]{1,4}([-.()]?[0-9]{1,4}){0,4}",
            context in proptest::option::of("[a-z]{1,8}\\.example"),
        ) {
            let scheme = if secure { "sips" } else { "sip" };
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            let uri = format!("{scheme}:{user}@{host}{port};transport=tcp");
            let k = key(&uri);
            let shouted = format!("{}:{user}@{}{port};TRANSPORT=TCP", scheme.to_uppercase(), host.to_uppercase());
            prop_assert_eq!(key(&shouted), k.clone());
            if user.chars().any(|c| c.is_ascii_lowercase()) {
                let other_user = format!("{scheme}:{}@{host}{port}", user.to_uppercase());
                prop_assert_ne!(key(&other_user), k.clone());
            }
            prop_assert_eq!(key(&k), k.clone(), "sip key of {}", uri);

            let tel = match (&context, number.starts_with('+')) {
                (Some(ctx), false) => format!("tel:{number};phone-context={}", ctx.to_uppercase()),
                _ => format!("tel:{number}"),
            };
            let t = key(&tel);
            prop_assert_eq!(key(&t), t.clone(), "tel key of {}", tel);
            // A sip URI with user=phone is that number, whatever its host.
            if context.is_none() {
                let as_sip = format!("sip:{number}@{host};user=phone");
                prop_assert_eq!(key(&as_sip), t);
            }
        }
    }

    fn key(s: &str) -> String {
        let mut buf = Vec::new();
        let c = canonicalize(parse(s).expect("valid"), &mut buf);
        String::from_utf8_lossy(c.key).into_owned()
    }

    #[test]
    fn header_values_in_every_form() {
        let cases = [
            (
                "\"Alice\" <sip:alice@Example.COM;transport=tcp>;tag=9",
                vec!["sip:alice@Example.COM;transport=tcp"],
            ),
            ("<sip:bob@x.example>", vec!["sip:bob@x.example"]),
            ("sip:carol@x.example;tag=77", vec!["sip:carol@x.example"]),
            (
                "  Dave <tel:+1-212-555-0100>  ",
                vec!["tel:+1-212-555-0100"],
            ),
            ("\"a <quoted> name, too\" <sip:e@x>", vec!["sip:e@x"]),
            ("<sip:f@x>, <tel:+44207>", vec!["sip:f@x", "tel:+44207"]),
            ("\"Q\\\"x\" <sip:g@x>", vec!["sip:g@x"]),
        ];
        for (value, want) in cases {
            let got: Vec<&str> = header_uris(value).map(|r| r.expect("ok")).collect();
            assert_eq!(got, want, "{value}");
        }
        assert_eq!(
            header_uris("<sip:x@y").next(),
            Some(Err(UriError::Unclosed))
        );
        assert_eq!(header_uris("   ").next(), None);
    }

    #[test]
    fn sip_parts() {
        let UriRef::Sip(s) =
            parse("sips:al%69ce:pw@[2001:db8::1]:5061;transport=tls;lr?subject=hi&x")
                .expect("valid")
        else {
            panic!("not sip")
        };
        assert!(s.secure);
        assert_eq!(s.user, Some("al%69ce"));
        assert_eq!(s.password, Some("pw"));
        assert_eq!(s.host, "[2001:db8::1]");
        assert_eq!(s.port, Some(5061));
        assert_eq!(s.params.get("TRANSPORT"), Some(Some("tls")));
        assert_eq!(s.params.get("lr"), Some(None));
        assert_eq!(s.headers, "subject=hi&x");
    }

    #[test]
    fn malformed_uris_are_refused() {
        for (s, e) in [
            ("", UriError::Empty),
            ("alice", UriError::NoScheme),
            ("sip:", UriError::NoScheme),
            ("sip:alice@", UriError::NoHost),
            ("sip:alice@exa mple.com", UriError::BadCharacter),
            ("sip:a@b:99999", UriError::BadPort),
            ("sip:a@b:x", UriError::BadPort),
            ("sip:a@b%2", UriError::BadEscape),
            ("sip:a@b!c", UriError::BadHost),
            ("sip:a@[zz]", UriError::BadHost),
            ("tel:;phone-context=x", UriError::NoNumber),
        ] {
            assert_eq!(parse(s), Err(e), "{s}");
        }
    }

    #[test]
    fn canonical_keys_follow_rfc3261() {
        // Scheme and host case-insensitive, user case-sensitive, escapes decoded.
        assert_eq!(key("SIP:alice@Example.COM"), "sip:alice@example.com");
        assert_eq!(key("sip:%61lice@example.com"), "sip:alice@example.com");
        assert_eq!(key("tel:%2B1-212%2d555"), "tel:+1212555");
        assert_eq!(
            key("sip:%2B1-212@gw;user=phone"),
            key("sip:+1212@other.example;user=phone")
        );
        assert_ne!(key("sip:Alice@example.com"), key("sip:alice@example.com"));
        // A written port is part of the key.
        assert_eq!(key("sip:a@x.example:5060"), "sip:a@x.example:5060");
        assert_ne!(key("sip:a@x.example:5060"), key("sip:a@x.example"));
        // sips and sip differ.
        assert_eq!(key("sips:a@x"), "sips:a@x");
        // Parameters are not in the key.
        assert_eq!(key("sip:a@x;transport=tcp"), "sip:a@x");
    }

    #[test]
    fn numbers_follow_rfc3966() {
        assert_eq!(key("tel:+1-212-555-1234"), "tel:+12125551234");
        assert_eq!(key("tel:+1(212)555.1234"), "tel:+12125551234");
        assert_eq!(
            key("tel:7042;phone-context=Example.COM"),
            "tel:7042;phone-context=example.com"
        );
        assert_eq!(
            key("tel:7042;phone-context=+1-212"),
            "tel:7042;phone-context=+1212"
        );
        // user=phone SIP URIs are compared as their number, whatever the host.
        assert_eq!(
            key("sip:+1-212-555-1234@gw.example;user=phone"),
            "tel:+12125551234"
        );
        assert_eq!(
            key("sip:5551234;phone-context=+1-212@gw;user=PHONE"),
            "tel:5551234;phone-context=+1212"
        );
        // Without user=phone a numeric user is just a user.
        assert_eq!(key("sip:+12125551234@gw"), "sip:+12125551234@gw");
        let mut buf = Vec::new();
        let c = canonicalize(parse("tel:+44-20-7946-0000").expect("ok"), &mut buf);
        let n = c.number.expect("number");
        assert_eq!(
            (n.digits, n.global, n.context),
            (&b"442079460000"[..], true, None)
        );
        assert_eq!(c.host, None);
    }

    #[test]
    fn parameters_and_headers_compare_per_rfc3261() {
        let policy = |s: &str| match parse(s).expect("ok") {
            UriRef::Sip(u) => (canonical_params(u.params), canonical_headers(u.headers)),
            _ => panic!(),
        };
        let request = |s: &'static str| match parse(s).expect("ok") {
            UriRef::Sip(u) => SipRest {
                params: u.params,
                headers: u.headers,
            },
            _ => panic!(),
        };
        let (p, h) = policy("sip:a@x");
        // Parameters in only one URI are ignored …
        assert!(params_and_headers_match(
            &request("sip:a@x;transport=tcp;lr"),
            &p,
            &h
        ));
        // … except user, ttl, method and maddr.
        for strict in ["user=ip", "ttl=1", "method=INVITE", "maddr=1.2.3.4"] {
            let r: &'static str = Box::leak(format!("sip:a@x;{strict}").into_boxed_str());
            assert!(!params_and_headers_match(&request(r), &p, &h), "{strict}");
        }
        let (p, h) = policy("sip:a@x;transport=TCP;method=INVITE");
        assert!(params_and_headers_match(
            &request("sip:a@x;transport=tcp;method=invite"),
            &p,
            &h
        ));
        assert!(!params_and_headers_match(
            &request("sip:a@x;transport=udp;method=INVITE"),
            &p,
            &h
        ));
        assert!(!params_and_headers_match(
            &request("sip:a@x;transport=tcp"),
            &p,
            &h
        ));
        // Headers must be present in both.
        let (p, h) = policy("sip:a@x?subject=hello");
        assert!(params_and_headers_match(
            &request("sip:a@x?Subject=hell%6F"),
            &p,
            &h
        ));
        assert!(!params_and_headers_match(&request("sip:a@x"), &p, &h));
        let (p, h) = policy("sip:a@x");
        assert!(!params_and_headers_match(
            &request("sip:a@x?subject=x"),
            &p,
            &h
        ));
    }
}
