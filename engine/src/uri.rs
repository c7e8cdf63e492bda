//! SIP, SIPS and tel URI views and the canonical forms used to compare them.
//!
//! This module owns URI syntax: pulling the URI out of a header value as a SIP stack holds it
//! (`"Alice" <sip:alice@Example.COM;transport=tcp>;tag=9`), splitting it into borrowed parts
//! without allocating, and writing the canonical comparison key into a caller-owned, reused
//! buffer. The compiler uses the same functions for the URIs in a policy, so both sides of every
//! comparison are canonicalised by one piece of code.
//!
//! Canonical comparison follows RFC 3261 §19.1.4: scheme and host compare case-insensitively,
//! user and password case-sensitively, a port written out never equals an omitted one, and URI
//! parameters present in only one URI are ignored except `user`, `ttl`, `method`, `maddr` and
//! `transport` (the section's own examples make `;transport=udp` differ from no transport);
//! header components must match both ways. **Only characters outside RFC 2396's reserved set
//! equal their %-escape** (§19.1.4): the canonical form decodes `%61` to `a` but keeps `%3B`
//! as `%3B`, so `sip:a%3Bb@example.com` and `sip:a;b@example.com` differ; `%25` stays escaped
//! too, and escapes are never decoded twice (RFC 4475 §3.1.1.3).
//!
//! Telephone numbers follow RFC 3966 §4: visual separators (`-` `.` `(` `)`) are removed, a
//! global number keeps its `+` (a `%2B` is not one: RFC 3966 §3 forbids escaping it as a
//! delimiter), and **every parameter is part of the comparison**, in any order and any case:
//! `tel:+1-212-555-1234;isub=1` differs from `tel:+1-212-555-1234`, `phone-context` compares
//! as a domain or digit by digit, `ext` digit by digit. `many-tel` / `except-tel` prefixes are
//! not URI equality: they group *numbers* (RFC 7200 §5.3.1: "'tel' URIs of global numbers can
//! be grouped by prefixes consisting of any number of common leading digits" and local ones
//! "by the value of the \"phone-context\" parameter"), so they look at the digits and the
//! context only and `tel:+1-212-555-1234;isub=1` is within prefix `+1-212`. **A `sip:`/`sips:` URI with
//! `user=phone` is compared as the telephone number in its user part**, so a `tel:` id and a
//! `many-tel` prefix match it whatever its host.
//!
//! # SIP user parts without `user=phone`
//! RFC 3261 §19.1.1: "If the user string contains a telephone number formatted as a
//! telephone-subscriber, the user parameter value \"phone\" SHOULD be present. Even without
//! this parameter, recipients of SIP and SIPS URIs MAY interpret the pre-@ part as a telephone
//! number if local restrictions on the name space for user name allow it." Many networks omit
//! the parameter, so how far a recipient reads is a local choice, [`SipUserNumbers`]:
//! - [`SipUserNumbers::UserPhone`]: only `user=phone` URIs are numbers (the strict reading);
//! - [`SipUserNumbers::Global`] (the default): also a user part that is a global number, `+`
//!   followed by digits and visual separators and nothing else (`sip:+1-212-555-1234@gw` is
//!   `tel:+12125551234`). RFC 3966 §5.1.4 makes global numbers unambiguous ("Globally unique
//!   numbers are identified by the leading \"+\" character"), and no user name that
//!   plausibly names a person starts with `+` and holds only digits;
//! - [`SipUserNumbers::Digits`]: also a user part of digits and visual separators alone, read
//!   as a local number whose `phone-context` is the URI's host (`sip:5551234@pbx.example` is
//!   `tel:5551234;phone-context=pbx.example`). RFC 3966 §5.1.5: "Local numbers MUST have a
//!   'phone-context' parameter that identifies the scope of their validity", and the host is
//!   the name space §19.1.1's "local restrictions" speak of; so the same digits at two hosts
//!   stay two numbers.
//!
//! Without `user=phone`, a user part read as a number holds no parameters (no `;`) and no
//! %-escapes: anything else stays a user name. Both sides of a comparison are read the same
//! way, so under `Global` a policy's `sip:+12125551234@gw` id is that number too.

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
// The scan ORs classes together: only PLAIN may be 0.
const _: () = assert!(PLAIN == 0);
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

/// Every byte of `h` is a [`HOST_BYTE`]: eight at a time without a branch per byte (hosts are
/// a few dozen bytes; the table ORs to 0 only when all are host bytes), then the rest.
#[inline]
fn is_host_name(h: &[u8]) -> bool {
    let mut chunks = h.chunks_exact(8);
    let mut bad = 0u8;
    for c in &mut chunks {
        bad |= c.iter().fold(0, |a, &x| a | NOT_HOST_BYTE[usize::from(x)]);
    }
    for &x in chunks.remainder() {
        bad |= NOT_HOST_BYTE[usize::from(x)];
    }
    bad == 0
}

/// 1 for the bytes [`HOST_BYTE`] refuses, 0 for the others.
static NOT_HOST_BYTE: [u8; 256] = {
    let mut t = [0; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = !HOST_BYTE[c] as u8;
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

/// The schemes [`parse`] tells apart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Sip,
    Sips,
    Tel,
    Other,
}

/// `sip:`, `sips:` or `tel:` at the start of `b`, any case: the scheme's colon and which.
/// (`| 0x20` folds exactly the upper-case letter onto the lower-case one for letters.)
#[inline]
fn known_scheme(b: &[u8]) -> Option<(usize, Scheme)> {
    match *b {
        [x, y, z, b':', ..] => match [x | 0x20, y | 0x20, z | 0x20] {
            [b's', b'i', b'p'] => Some((3, Scheme::Sip)),
            [b't', b'e', b'l'] => Some((3, Scheme::Tel)),
            _ => None,
        },
        [x, y, z, w, b':', ..] if [x | 0x20, y | 0x20, z | 0x20, w | 0x20] == *b"sips" => {
            Some((4, Scheme::Sips))
        }
        _ => None,
    }
}

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
    // `sip:`, `sips:` and `tel:` in any case (nearly every URI): the scheme is known without
    // scanning or checking it (its letters are plain bytes, which the scan passes over).
    let known = known_scheme(b);
    if let Some((colon, _)) = known {
        d.scheme = colon;
    }
    let mut i = known.map_or(0, |(colon, _)| colon + 1);
    loop {
        // Plain bytes in a tight loop of their own, so the dispatch below (which the compiler
        // makes a jump table) runs only at delimiters: eight at a time while eight remain (one
        // bounds check and one branch per eight; PLAIN is 0, so the classes OR to 0 only when
        // all eight are plain), then byte by byte up to the delimiter.
        while let Some(chunk) = b.get(i..i + 8).and_then(|c| <&[u8; 8]>::try_from(c).ok()) {
            let any = chunk
                .iter()
                .fold(PLAIN, |any, &c| any | BYTE_CLASS[usize::from(c)]);
            if any != PLAIN {
                break;
            }
            i += 8;
        }
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
    let kind = match known {
        Some((_, kind)) => kind,
        None => {
            let scheme_ok = scheme
                .bytes()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'));
            if !scheme_ok {
                return Err(UriError::NoScheme);
            }
            if scheme.eq_ignore_ascii_case("sip") {
                Scheme::Sip
            } else if scheme.eq_ignore_ascii_case("sips") {
                Scheme::Sips
            } else if scheme.eq_ignore_ascii_case("tel") {
                Scheme::Tel
            } else {
                Scheme::Other
            }
        }
    };
    if rest.is_empty() {
        return Err(UriError::NoScheme);
    }
    if let Scheme::Sip | Scheme::Sips = kind {
        sip_from_delimiters(s, kind == Scheme::Sips, &d).map(UriRef::Sip)
    } else if kind == Scheme::Tel {
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
    if !is_host_name(host.as_bytes()) {
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
            self.rest =
                memchr::memchr(b',', self.rest.as_bytes()).map_or("", |e| &self.rest[e + 1..]);
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
        // Find a '<' outside a quoted display name, or the end of this value: a plain loop,
        // display names being a few bytes (memchr3 costs more on them, measured). The URI
        // after the '<' is longer: memchr finds its '>'.
        while i < b.len() {
            match b[i] {
                b'\\' if in_quotes => i += 1,
                b'"' => in_quotes = !in_quotes,
                b'<' if !in_quotes => {
                    let Some(gt) = memchr::memchr(b'>', &b[i + 1..]) else {
                        self.rest = "";
                        return Some(Err(UriError::Unclosed));
                    };
                    let (uri, after) = (&s[i + 1..i + 1 + gt], &s[i + 2 + gt..]);
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

/// Characters that differ from their %-escape: RFC 3261 §19.1.4 "Characters other than
/// those in the \"reserved\" set (see RFC 2396 [5]) are equivalent to their \"\"%\" HEX HEX\"
/// encoding", with RFC 2396's `reserved = ";" | "/" | "?" | ":" | "@" | "&" | "=" | "+" |
/// "$" | ","` (RFC 3966 §3 says the same of tel URIs). `%` is kept escaped too: a literal `%`
/// never appears in a URI, so a canonical `%` always starts an escape and `a%253Bb` (user
/// `a%3Bb`) stays apart from `a%3Bb` (user `a;b`, escaped).
#[inline]
fn keeps_escape(b: u8) -> bool {
    matches!(
        b,
        b';' | b'/' | b'?' | b':' | b'@' | b'&' | b'=' | b'+' | b'$' | b',' | b'%'
    )
}

const UPPER_HEX: &[u8; 16] = b"0123456789ABCDEF";

/// The canonical bytes of `raw` (escapes validated by [`parse`]): a %-escape of a character
/// outside [`keeps_escape`]'s set is decoded, the others are kept as `%` and two upper-case
/// hex digits; everything else is copied. Two URI components are equal under RFC 3261
/// §19.1.4 exactly when their canonical bytes are.
fn canonical_bytes(raw: &str) -> impl Iterator<Item = u8> + '_ {
    let b = raw.as_bytes();
    let mut i = 0;
    // Hex digits still to yield after the `%` of a kept escape.
    let mut pending: [u8; 2] = [0; 2];
    let mut left = 0usize;
    std::iter::from_fn(move || {
        if left > 0 {
            left -= 1;
            return Some(pending[1 - left]);
        }
        let &c = b.get(i)?;
        if c == b'%' && i + 2 < b.len() {
            let v = hex(b[i + 1]) << 4 | hex(b[i + 2]);
            i += 3;
            if keeps_escape(v) {
                pending = [
                    UPPER_HEX[usize::from(v >> 4)],
                    UPPER_HEX[usize::from(v & 15)],
                ];
                left = 2;
                return Some(b'%');
            }
            return Some(v);
        }
        i += 1;
        Some(c)
    })
}

/// Appends the canonical form of `raw` (see `canonical_bytes`): unreserved escapes decoded,
/// reserved ones kept. Without a `%`, a copy.
#[inline]
pub fn decode_into(raw: &str, out: &mut Vec<u8>) {
    let b = raw.as_bytes();
    if !has_escape(b) {
        out.extend_from_slice(b);
        return;
    }
    extend_canonical(raw, out);
}

/// The escaped path of [`decode_into`], out of line: callers stay small enough to inline.
#[inline(never)]
fn extend_canonical(raw: &str, out: &mut Vec<u8>) {
    out.extend(canonical_bytes(raw));
}

/// Canonical bytes of `raw`, lower-cased (for the components RFC 3261 §19.1.4 compares
/// case-insensitively).
fn decoded_lower(raw: &str) -> impl Iterator<Item = u8> + '_ {
    canonical_bytes(raw).map(|c| c.to_ascii_lowercase())
}

/// `raw` (%-escaped) equals `canonical` (canonical bytes, lower-case), ignoring ASCII case.
pub fn eq_decoded_ci(raw: &str, canonical: &[u8]) -> bool {
    decoded_lower(raw).eq(canonical.iter().copied())
}

/// Appends `raw`, canonical and lower-cased.
#[inline]
pub fn decode_lower_into(raw: &str, out: &mut Vec<u8>) {
    let b = raw.as_bytes();
    if !has_escape(b) {
        extend_lower(b, out);
        return;
    }
    extend_canonical_lower(raw, out);
}

/// The escaped path of [`decode_lower_into`], out of line (see [`extend_canonical`]).
#[inline(never)]
fn extend_canonical_lower(raw: &str, out: &mut Vec<u8>) {
    out.extend(decoded_lower(raw));
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
    /// The telephone number (tel URIs, SIP URIs with `user=phone`, and SIP URIs whose user
    /// part the [`SipUserNumbers`] setting reads as a number).
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

/// ASCII-case-insensitive order of two parameter names.
fn cmp_ci(a: &str, b: &str) -> std::cmp::Ordering {
    a.bytes()
        .map(|c| c.to_ascii_lowercase())
        .cmp(b.bytes().map(|c| c.to_ascii_lowercase()))
}

/// Parameters of a number sorted by the selection in [`tel_params_into`] at most this many;
/// beyond, an unsorted list is written as it comes (bounded work on hostile input).
const MAX_SORTED_TEL_PARAMS: usize = 32;

/// Appends the parameters of a telephone number in canonical form (RFC 3966 §4): each as
/// `;name[=value]`, sorted by name, names lower-case; `phone-context` compared "as a host
/// name if it is a 'domainname' or digit by digit if it is 'global-number-digits'" (see
/// [`context_into`]), `ext` digit by digit without visual separators, every other value
/// case-insensitively ("URI comparisons are case-insensitive"). Escapes follow
/// [`canonical_bytes`]. Returns where the first `phone-context` value is. No allocation:
/// parameters already in order (RFC 3966 §3 asks for "lexicographical order" after isub, ext
/// and the context) take one pass, others a selection over the few there are.
fn tel_params_into(params: Params<'_>, buf: &mut Vec<u8>) -> Option<std::ops::Range<usize>> {
    use std::cmp::Ordering;
    // Most numbers have no parameters: nothing to write, no context.
    if params.0.is_empty() {
        return None;
    }
    let mut context = None;
    let mut emit = |name: &str, value: Option<&str>, buf: &mut Vec<u8>| {
        buf.push(b';');
        decode_lower_into(name, buf);
        let Some(v) = value else {
            return;
        };
        buf.push(b'=');
        let start = buf.len();
        if name.eq_ignore_ascii_case("phone-context") {
            context_into(v, buf);
            context.get_or_insert(start..buf.len());
        } else if name.eq_ignore_ascii_case("ext") {
            decode_into(v, buf);
            normalize_number(buf, start);
        } else {
            decode_lower_into(v, buf);
        }
    };
    let mut count = 0usize;
    let mut sorted = true;
    let mut prev: Option<&str> = None;
    for (n, _) in params.iter() {
        count += 1;
        sorted &= prev.is_none_or(|p| cmp_ci(p, n) != Ordering::Greater);
        prev = Some(n);
    }
    if sorted || count > MAX_SORTED_TEL_PARAMS {
        for (n, v) in params.iter() {
            emit(n, v, buf);
        }
        return context;
    }
    // Selection: the smallest (name, position) after the last one written, `count` times.
    let mut last: Option<(&str, usize)> = None;
    for _ in 0..count {
        let mut next: Option<(&str, Option<&str>, usize)> = None;
        for (i, (n, v)) in params.iter().enumerate() {
            let after_last = last.is_none_or(|(ln, li)| match cmp_ci(n, ln) {
                Ordering::Greater => true,
                Ordering::Equal => i > li,
                Ordering::Less => false,
            });
            let before_next = next.is_none_or(|(bn, _, bi)| match cmp_ci(n, bn) {
                Ordering::Less => true,
                Ordering::Equal => i < bi,
                Ordering::Greater => false,
            });
            if after_last && before_next {
                next = Some((n, v, i));
            }
        }
        let Some((n, v, i)) = next else {
            break;
        };
        last = Some((n, i));
        emit(n, v, buf);
    }
    context
}

/// Appends `b` lower-cased: a copy, then lower-casing the copy in place (a loop the compiler
/// vectorises, where mapping byte by byte into `extend` pushes one at a time).
#[inline]
fn extend_lower(b: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(b);
    out[start..].make_ascii_lowercase();
}

/// The first parameter named `user` (any case) has the value `phone` (any case): RFC 3261
/// §19.1.1's telephone-subscriber marker, as `params.get("user")` compares it, in one pass
/// that looks at the first bytes of each parameter and skips to the next `;`.
#[inline]
fn user_is_phone(params: Params<'_>) -> bool {
    let mut rest = params.0.as_bytes();
    loop {
        if let Some((name, after)) = rest.split_first_chunk::<4>()
            && name.eq_ignore_ascii_case(b"user")
        {
            match after.first() {
                // A bare `user` is the first one: no value, not a number.
                None | Some(b';') => return false,
                Some(b'=') => {
                    let value = &after[1..];
                    let end = value.iter().position(|&c| c == b';').unwrap_or(value.len());
                    return value[..end].eq_ignore_ascii_case(b"phone");
                }
                // `userx…`: another parameter.
                _ => {}
            }
        }
        match rest.iter().position(|&c| c == b';') {
            Some(i) => rest = &rest[i + 1..],
            None => return false,
        }
    }
}

/// How the user part of a `sip:`/`sips:` URI **without `user=phone`** is read (see the
/// [module documentation](self)): RFC 3261 §19.1.1 lets a recipient "interpret the pre-@ part
/// as a telephone number if local restrictions on the name space for user name allow it".
/// A URI with `user=phone` is a number under every setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SipUserNumbers {
    /// Only `user=phone` makes a number (the strict reading).
    UserPhone,
    /// Also a global number: `+`, then digits and visual separators only (`+1-212-555-1234`).
    #[default]
    Global,
    /// Also digits and visual separators only (`5551234`), a local number in the context of
    /// the URI's host; global numbers as [`SipUserNumbers::Global`].
    Digits,
}

impl SipUserNumbers {
    /// Every setting, strictest first.
    pub const ALL: [SipUserNumbers; 3] = [
        SipUserNumbers::UserPhone,
        SipUserNumbers::Global,
        SipUserNumbers::Digits,
    ];

    /// The setting's name in configuration and on command lines: `user-phone`, `global` or
    /// `digits`.
    pub fn name(self) -> &'static str {
        match self {
            SipUserNumbers::UserPhone => "user-phone",
            SipUserNumbers::Global => "global",
            SipUserNumbers::Digits => "digits",
        }
    }

    /// Whether a user part of `kind` is read as a number.
    #[inline]
    fn reads(self, kind: UserNumber) -> bool {
        match self {
            SipUserNumbers::UserPhone => false,
            SipUserNumbers::Global => kind == UserNumber::Global,
            SipUserNumbers::Digits => true,
        }
    }
}

impl std::fmt::Display for SipUserNumbers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A [`SipUserNumbers`] name that is none of the settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownSipUserNumbers(pub String);

impl std::fmt::Display for UnknownSipUserNumbers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} is not a way to read SIP user parts as numbers (user-phone, global or digits)",
            self.0
        )
    }
}

impl std::error::Error for UnknownSipUserNumbers {}

impl std::str::FromStr for SipUserNumbers {
    type Err = UnknownSipUserNumbers;

    /// Parses [`SipUserNumbers::name`] (exactly, lower case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|n| n.name() == s)
            .ok_or_else(|| UnknownSipUserNumbers(s.to_owned()))
    }
}

/// What a SIP user part without `user=phone` looks like as a telephone number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UserNumber {
    /// `+`, then digits and visual separators, at least one digit (RFC 3966
    /// `global-number-digits`, without parameters).
    Global,
    /// Digits and visual separators, at least one digit.
    Local,
}

/// What the user part `user` (as written) looks like as a number, if it looks like one: only
/// digits and RFC 3966 visual separators after an optional `+`, at least one digit. A `;`
/// (parameters) or `%` (escapes) makes it a user name. Most user names fail on the first byte.
#[inline]
fn user_number(user: &str) -> Option<UserNumber> {
    let b = user.as_bytes();
    let (kind, digits) = match b.split_first() {
        Some((b'+', rest)) => (UserNumber::Global, rest),
        Some((c, _)) if c.is_ascii_digit() || is_visual_separator(*c) => (UserNumber::Local, b),
        _ => return None,
    };
    let mut any_digit = false;
    for &c in digits {
        if c.is_ascii_digit() {
            any_digit = true;
        } else if !is_visual_separator(c) {
            return None;
        }
    }
    any_digit.then_some(kind)
}

/// `uri` is a SIP URI without `user=phone` whose user part looks like a telephone number
/// (digits and visual separators after an optional `+`, nothing else) that `numbers` does not
/// read as one: a number a more lenient [`SipUserNumbers`] setting would read.
pub fn unread_number(uri: UriRef<'_>, numbers: SipUserNumbers) -> bool {
    match uri {
        UriRef::Sip(s) if !user_is_phone(s.params) => s
            .user
            .and_then(user_number)
            .is_some_and(|kind| !numbers.reads(kind)),
        _ => false,
    }
}

/// Which parts of a [`Canonical`] a caller reads: [`canonicalize_parts`] builds only those.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Parts {
    /// [`Canonical::key`] and [`Canonical::sip`] (what comparing whole URIs reads).
    pub key: bool,
    /// [`Canonical::host`].
    pub host: bool,
    /// [`Canonical::number`].
    pub number: bool,
}

impl Parts {
    /// Every part: the full canonical form.
    pub const ALL: Parts = Parts {
        key: true,
        host: true,
        number: true,
    };
}

/// Writes the canonical form of `uri` into `buf` (cleared first) and returns views into it,
/// with the strict reading of SIP user parts ([`SipUserNumbers::UserPhone`]; for another,
/// [`canonicalize_with`]). `buf` keeps its capacity between calls, so a reused buffer does not
/// allocate.
pub fn canonicalize<'b, 'a>(uri: UriRef<'a>, buf: &'b mut Vec<u8>) -> Canonical<'b, 'a> {
    canonicalize_with(uri, buf, Parts::ALL, SipUserNumbers::UserPhone)
}

/// [`canonicalize_with`] with the strict reading of SIP user parts
/// ([`SipUserNumbers::UserPhone`]).
pub fn canonicalize_parts<'b, 'a>(
    uri: UriRef<'a>,
    buf: &'b mut Vec<u8>,
    parts: Parts,
) -> Canonical<'b, 'a> {
    canonicalize_with(uri, buf, parts, SipUserNumbers::UserPhone)
}

/// The canonical form of `uri` with SIP user parts read as `numbers` says, building only the
/// parts `parts` asks for: each part asked for is exactly what all of them give; the others
/// are left empty (`key` `b""`, `host`, `number` and `sip` `None`) and must not be read, since "empty" then does not mean "the URI has none". A part may come for
/// free with another (a number's key, a SIP URI's host inside its key) and is then filled in
/// too, with the same value.
///
/// What is skipped: without `key` and `number`, whether the URI is a number is not even
/// looked at and only the host is written; without `host`, the host of a SIP URI read as a
/// number is not written; without `key`, a SIP URI that is not a number writes no key.
pub fn canonicalize_with<'b, 'a>(
    uri: UriRef<'a>,
    buf: &'b mut Vec<u8>,
    parts: Parts,
    numbers: SipUserNumbers,
) -> Canonical<'b, 'a> {
    canonicalize_noting(uri, buf, parts, numbers, &mut false)
}

/// [`canonicalize_with`], also setting `*unread` when `uri` is an [`unread_number`] (only
/// looked at when `parts` asks for the key or the number): what classification counts, found
/// on the way at no extra cost.
#[inline]
pub(crate) fn canonicalize_noting<'b, 'a>(
    uri: UriRef<'a>,
    buf: &'b mut Vec<u8>,
    parts: Parts,
    numbers: SipUserNumbers,
    unread: &mut bool,
) -> Canonical<'b, 'a> {
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
        false => extend_lower(raw.as_bytes(), buf),
    };
    // (number as written, its parameters, the host that is a local number's context).
    let tel_parts: Option<(&str, Params<'_>, Option<&str>)> = match uri {
        _ if !parts.key && !parts.number => None,
        UriRef::Tel(t) => Some((t.number, t.params, None)),
        UriRef::Sip(s) if user_is_phone(s.params) => s.user.map(|u| {
            let (n, p) = split_byte(u, b';').unwrap_or((u, ""));
            (n, Params(p), None)
        }),
        UriRef::Sip(s) => match s.user.and_then(|u| Some((u, user_number(u)?))) {
            Some((u, kind)) if numbers.reads(kind) => {
                Some((u, Params(""), (kind == UserNumber::Local).then_some(s.host)))
            }
            Some(_) => {
                *unread = true;
                None
            }
            None => None,
        },
        _ => None,
    };
    if let Some((raw_number, params, host_context)) = tel_parts {
        // Work area after the key: decoded number, then digits, then context.
        buf.extend_from_slice(b"tel:");
        let digits_start = buf.len();
        append(raw_number, buf);
        let global = normalize_number(buf, digits_start);
        let digits = digits_start + usize::from(global)..buf.len();
        // RFC 3966 §4: every parameter counts, in any order; a global number has no context.
        let mut context = tel_params_into(params, buf).filter(|_| !global);
        if let Some(h) = host_context {
            // A user part read as a local number has no parameters: the host is its only one.
            buf.extend_from_slice(b";phone-context=");
            let c0 = buf.len();
            append_lower(h, buf);
            context = Some(c0..buf.len());
        }
        key = 0..buf.len();
        number = Some((digits, global, context));
        if let UriRef::Sip(s) = uri
            && parts.host
        {
            let s0 = buf.len();
            append_lower(s.host, buf);
            host = Some(s0..buf.len());
        }
    } else if !parts.key {
        // Not a number (or not asked whether it is one), and no key: at most the host.
        if let UriRef::Sip(s) = uri
            && parts.host
        {
            append_lower(s.host, buf);
            host = Some(0..buf.len());
        }
        key = 0..0;
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
                extend_lower(scheme.as_bytes(), buf);
                buf.push(b':');
                buf.extend_from_slice(rest.as_bytes());
                key = 0..buf.len();
            }
            // Not taken (tel URIs take the number branch above); written out instead of
            // `unreachable!` so classification has no panic path.
            UriRef::Tel(t) => {
                buf.extend_from_slice(b"tel:");
                buf.extend_from_slice(t.number.as_bytes());
                key = 0..buf.len();
            }
        }
    }
    let sip = match uri {
        UriRef::Sip(s) if number.is_none() && parts.key => Some(SipRest {
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

/// URI parameters that never match when present in only one of two URIs (RFC 3261 §19.1.4):
/// "A user, ttl, or method uri-parameter appearing in only one URI never matches", "A URI
/// that includes an maddr parameter will not match a URI that contains no maddr parameter",
/// and "A URI omitting any component with a default value will not match a URI explicitly
/// containing that component with its default value. […] The same is true for the
/// transport-parameter" — which the section's examples confirm: `sip:bob@biloxi.com` and
/// `sip:bob@biloxi.com;transport=udp` are "not equivalent".
pub const STRICT_PARAMS: [&str; 5] = ["user", "ttl", "method", "maddr", "transport"];

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
    params_and_headers_match_with(request, policy_params, policy_headers, &STRICT_PARAMS)
}

/// URI parameters that never match when present in only one URI when comparing *entities*
/// (a rule's `target-sip-entity` with a request's next hop): [`STRICT_PARAMS`] but
/// `transport`, since RFC 7200 §5.3.3 names "the next-hop SIP entity" and the transport a
/// request travels over to it does not make it another entity.
pub const ENTITY_STRICT_PARAMS: [&str; 4] = ["user", "ttl", "method", "maddr"];

/// [`params_and_headers_match`] with another list of parameters that must be present in both
/// URIs or neither.
pub fn params_and_headers_match_with(
    request: &SipRest<'_>,
    policy_params: &[CanonicalParam],
    policy_headers: &[CanonicalParam],
    strict_params: &[&str],
) -> bool {
    for (name, value) in request.params.iter() {
        match policy_params.iter().find(|p| eq_decoded_ci(name, &p.name)) {
            Some(p) => {
                if !value_eq(value, &p.value) {
                    return false;
                }
            }
            None => {
                if strict_params
                    .iter()
                    .any(|s| eq_decoded_ci(name, s.as_bytes()))
                {
                    return false;
                }
            }
        }
    }
    for p in policy_params {
        let strict = strict_params.iter().any(|s| s.as_bytes() == &*p.name);
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

    fn key_with(s: &str, numbers: SipUserNumbers) -> String {
        let mut buf = Vec::new();
        let c = canonicalize_with(parse(s).expect("valid"), &mut buf, Parts::ALL, numbers);
        String::from_utf8_lossy(c.key).into_owned()
    }

    /// RFC 3261 §19.1.1: "Even without this parameter, recipients of SIP and SIPS URIs MAY
    /// interpret the pre-@ part as a telephone number"; RFC 3966 §4: digits compare "after
    /// removing all visual separators"; §5.1.5: "Local numbers MUST have a 'phone-context'".
    #[test]
    fn sip_user_parts_without_user_phone_are_read_as_the_setting_says() {
        use SipUserNumbers::{Digits, Global, UserPhone};
        let cases: [(&str, [&str; 3]); 6] = [
            (
                "sip:+1-212-555-1234@GW.example",
                [
                    "sip:+1-212-555-1234@gw.example",
                    "tel:+12125551234",
                    "tel:+12125551234",
                ],
            ),
            (
                "sips:(212)555.1234@PBX.example:5061",
                [
                    "sips:(212)555.1234@pbx.example:5061",
                    "sips:(212)555.1234@pbx.example:5061",
                    "tel:2125551234;phone-context=pbx.example",
                ],
            ),
            // Parameters or escapes: a user name without user=phone.
            ("sip:+1212;isub=1@gw", ["sip:+1212;isub=1@gw"; 3]),
            ("sip:+1%32@gw", ["sip:+12@gw"; 3]),
            ("sip:alice@gw", ["sip:alice@gw"; 3]),
            // With user=phone, the number whatever the setting.
            ("sip:+1-212@gw;user=phone", ["tel:+1212"; 3]),
        ];
        for (uri, expected) in cases {
            for (n, want) in [UserPhone, Global, Digits].into_iter().zip(expected) {
                assert_eq!(key_with(uri, n), want, "{uri} {n}");
                // Unread: no number read, and a number-like user part.
                let (mut buf, mut unread) = (Vec::new(), false);
                let p = parse(uri).expect("valid");
                let c = canonicalize_noting(p, &mut buf, Parts::ALL, n, &mut unread);
                let number_like =
                    matches!(p, UriRef::Sip(s) if s.user.and_then(user_number).is_some());
                assert_eq!(c.number.is_none() && number_like, unread, "{uri} {n}");
                assert_eq!(unread, unread_number(p, n), "{uri} {n}");
            }
        }
        assert!(unread_number(parse("sip:+1212@gw").expect("ok"), UserPhone));
        assert!(!unread_number(parse("sip:+1212@gw").expect("ok"), Global));
        assert!(unread_number(parse("sip:1212@gw").expect("ok"), Global));
        assert!(!unread_number(parse("sip:1212@gw").expect("ok"), Digits));
        assert!(!unread_number(
            parse("tel:1212;phone-context=x").expect("ok"),
            UserPhone
        ));
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
        // RFC 3966 §3: "If the reserved characters \"+\", \";\", \"=\", and \"?\" are used as
        // delimiters between components of the \"tel\" URI, they MUST NOT be percent encoded"
        // and only "Characters other than those in the \"reserved\" and \"unsafe\" sets" equal
        // their encoding: `%2B` is not the `+` of a global number; `%2d` is a `-`.
        assert_eq!(key("tel:+1-212%2d555"), "tel:+1212555");
        assert_ne!(key("tel:%2B1-212%2d555"), "tel:+1212555");
        assert_ne!(
            key("sip:%2B1-212@gw;user=phone"),
            key("sip:+1212@other.example;user=phone")
        );
        assert_eq!(
            key("sip:+1%2d212@gw;user=phone"),
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
            &request("sip:a@x;newparam=5;lr"),
            &p,
            &h
        ));
        // … except user, ttl, method, maddr and transport.
        for strict in [
            "user=ip",
            "ttl=1",
            "method=INVITE",
            "maddr=1.2.3.4",
            "transport=udp",
        ] {
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

    /// RFC 3261 §19.1.4, with its own example sets. "The URIs within each of the following
    /// sets are equivalent" / "… are not equivalent", and "Characters other than those in the
    /// \"reserved\" set (see RFC 2396 [5]) are equivalent to their \"\"%\" HEX HEX\" encoding."
    fn sip_equal(a: &str, b: &str) -> bool {
        let (mut ba, mut bb) = (Vec::new(), Vec::new());
        let ca = canonicalize(parse(a).expect("valid"), &mut ba);
        let cb = canonicalize(parse(b).expect("valid"), &mut bb);
        let (ra, rb) = (ca.sip.expect("a SIP URI"), cb.sip.expect("a SIP URI"));
        // Symmetric: each side's parameters and headers in canonical form against the other.
        ca.key == cb.key
            && params_and_headers_match(
                &ra,
                &canonical_params(rb.params),
                &canonical_headers(rb.headers),
            )
            && params_and_headers_match(
                &rb,
                &canonical_params(ra.params),
                &canonical_headers(ra.headers),
            )
    }

    #[test]
    fn rfc3261_19_1_4_example_sets() {
        let equivalent: [&[&str]; 4] = [
            &[
                "sip:%61lice@atlanta.com;transport=TCP",
                "sip:alice@AtLanTa.CoM;Transport=tcp",
            ],
            &[
                "sip:carol@chicago.com",
                "sip:carol@chicago.com;newparam=5",
                "sip:carol@chicago.com;security=on",
            ],
            &[
                "sip:biloxi.com;transport=tcp;method=REGISTER?to=sip:bob%40biloxi.com",
                "sip:biloxi.com;method=REGISTER;transport=tcp?to=sip:bob%40biloxi.com",
            ],
            &[
                "sip:alice@atlanta.com?subject=project%20x&priority=urgent",
                "sip:alice@atlanta.com?priority=urgent&subject=project%20x",
            ],
        ];
        for set in equivalent {
            for a in set {
                for b in set {
                    assert!(sip_equal(a, b), "{a} = {b}");
                }
            }
        }
        let different = [
            // (different usernames)
            (
                "SIP:ALICE@AtLanTa.CoM;Transport=udp",
                "sip:alice@AtLanTa.CoM;Transport=UDP",
            ),
            // (can resolve to different ports)
            ("sip:bob@biloxi.com", "sip:bob@biloxi.com:5060"),
            // (can resolve to different transports)
            ("sip:bob@biloxi.com", "sip:bob@biloxi.com;transport=udp"),
            // (can resolve to different port and transports)
            (
                "sip:bob@biloxi.com",
                "sip:bob@biloxi.com:6000;transport=tcp",
            ),
            // (different header component)
            (
                "sip:carol@chicago.com",
                "sip:carol@chicago.com?Subject=next%20meeting",
            ),
            // (even though that's what phone21.boxesbybob.com resolves to)
            ("sip:bob@phone21.boxesbybob.com", "sip:bob@192.0.2.4"),
            // "sip:carol@chicago.com;security=on and sip:carol@chicago.com;security=off are
            // not equivalent"
            (
                "sip:carol@chicago.com;security=on",
                "sip:carol@chicago.com;security=off",
            ),
        ];
        for (a, b) in different {
            assert!(!sip_equal(a, b), "{a} != {b}");
            assert!(!sip_equal(b, a), "{b} != {a}");
        }
        // "Note that equality is not transitive": both of these equal sip:carol@chicago.com.
        assert!(sip_equal(
            "sip:carol@chicago.com",
            "sip:carol@chicago.com;security=off"
        ));
    }

    /// Reserved characters escaped and unescaped differ; unreserved ones equal their escapes.
    #[test]
    fn only_unreserved_characters_equal_their_escapes() {
        assert_ne!(key("sip:a%3Bb@example.com"), key("sip:a;b@example.com"));
        assert_ne!(key("sip:a%3bb@example.com"), key("sip:a;b@example.com"));
        // Hex case of an escape does not matter ("%3b" and "%3B" are one escape).
        assert_eq!(key("sip:a%3bb@example.com"), key("sip:a%3Bb@example.com"));
        // %25 is an escaped '%': `a%253Bb` is the user `a%3Bb`, not `a;b` escaped.
        assert_ne!(key("sip:a%253Bb@example.com"), key("sip:a%3Bb@example.com"));
        for c in [";", "/", "?", ":", "@", "&", "=", "+", "$", ","] {
            let escaped = format!("sip:x%{:02X}y@example.com", c.as_bytes()[0]);
            let plain = format!("sip:x{c}y@example.com");
            if let Ok(p) = parse(&plain) {
                let mut b = Vec::new();
                let k = String::from_utf8_lossy(canonicalize(p, &mut b).key).into_owned();
                assert_ne!(key(&escaped), k, "{c}");
            }
        }
        // Unreserved: alphanum and mark (RFC 3261 §25.1).
        for c in "aZ9-_.!~*'()".chars() {
            let escaped = format!("sip:x%{:02X}y@example.com", c as u8);
            assert_eq!(key(&escaped), format!("sip:x{c}y@example.com"), "{c}");
        }
        // Parameters and headers follow the same rule.
        let rest = |s: &'static str| match parse(s).expect("ok") {
            UriRef::Sip(u) => SipRest {
                params: u.params,
                headers: u.headers,
            },
            _ => panic!(),
        };
        let policy = match parse("sip:a@x;p=a%3Bb?h=c%26d").expect("ok") {
            UriRef::Sip(u) => (canonical_params(u.params), canonical_headers(u.headers)),
            _ => panic!(),
        };
        assert!(params_and_headers_match(
            &rest("sip:a@x;p=A%3bB?h=c%26d"),
            &policy.0,
            &policy.1
        ));
        assert!(!params_and_headers_match(
            &rest("sip:a@x;p=a%3Bb?h=c%2526d"),
            &policy.0,
            &policy.1
        ));
    }

    /// RFC 4475 §3.1.1.3 (esc01): "the \"name\" uri-parameter has a value of \"value%41\",
    /// which is NOT equivalent to \"valueA\". Per [RFC3986], unescaping URI components is
    /// never performed recursively."
    #[test]
    fn escapes_are_not_decoded_twice() {
        let params = |s: &str| match parse(s).expect("ok") {
            UriRef::Sip(u) => canonical_params(u.params),
            _ => panic!(),
        };
        let esc01 = params("sip:cal%6Cer@host5.example.net;%6C%72;n%61me=v%61lue%25%34%31");
        let value_a = params("sip:caller@host5.example.net;lr;name=valueA");
        let written = params("sip:caller@host5.example.net;lr;name=value%2541");
        assert_ne!(esc01, value_a);
        assert_eq!(esc01, written);
        assert_eq!(
            key("sip:cal%6Cer@host5.example.net"),
            "sip:caller@host5.example.net"
        );
    }

    /// RFC 3966 §4 "URI Comparisons".
    #[test]
    fn tel_uris_compare_per_rfc3966() {
        // "If one URI has a parameter name not found in the other, the two URIs are not equal."
        assert_ne!(
            key("tel:+1-212-555-1234;isub=1"),
            key("tel:+1-212-555-1234")
        );
        assert_ne!(key("tel:+1-212-555-1234;ext=7"), key("tel:+1-212-555-1234"));
        assert_ne!(key("tel:+1-212-555-1234;foo"), key("tel:+1-212-555-1234"));
        assert_ne!(
            key("tel:+1-212-555-1234;isub=1"),
            key("tel:+1-212-555-1234;isub=2")
        );
        // "Parameters are compared according to 'pname', regardless of the order they
        // appeared in the URI."
        assert_eq!(
            key("tel:7042;phone-context=example.com;foo=bar"),
            key("tel:7042;foo=bar;phone-context=example.com")
        );
        assert_eq!(
            key("tel:+1-212-555-1234;b=2;isub=1;a=1"),
            key("tel:+12125551234;a=1;b=2;isub=1")
        );
        // "URI comparisons are case-insensitive."
        assert_eq!(
            key("tel:+1-212-555-1234;ISUB=AbC"),
            key("tel:+12125551234;isub=aBc")
        );
        // "'extension' … compared … digit by digit … after removing all 'visual-separator'
        // characters" (ext = 1*phonedigit).
        assert_eq!(
            key("tel:+1-212-555-1234;ext=1-2"),
            key("tel:+12125551234;ext=12")
        );
        // phone-context: "as a host name if it is a 'domainname' or digit by digit if it is
        // 'global-number-digits'".
        assert_eq!(
            key("tel:7042;phone-context=+1-212"),
            key("tel:7042;phone-context=+1212")
        );
        assert_ne!(
            key("tel:7042;phone-context=+1-212"),
            key("tel:7042;phone-context=+1-213")
        );
        // "Both must be either a 'local-number' or a 'global-number'".
        assert_ne!(key("tel:+7042"), key("tel:7042;phone-context=+1"));
        // A sip URI with user=phone is its number, parameters of the number included.
        assert_eq!(
            key("sip:+1-212-555-1234;isub=1@gw.example;user=phone"),
            key("tel:+12125551234;isub=1")
        );
        assert_ne!(
            key("sip:+1-212-555-1234;isub=1@gw.example;user=phone"),
            key("tel:+12125551234")
        );
        // The number itself is unchanged by its parameters (prefix conditions look at it).
        let mut buf = Vec::new();
        let c = canonicalize(parse("tel:+1-212-555-1234;isub=1").expect("ok"), &mut buf);
        assert_eq!(c.number.expect("number").digits, b"12125551234");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// RFC 3966 §4: tel parameters compare regardless of order and case; any parameter
        /// in only one URI makes them unequal.
        #[test]
        fn tel_parameters_are_order_free_and_all_count(
            params in proptest::collection::btree_map("[a-z][a-z0-9-]{0,5}", proptest::option::of("[a-z0-9]{1,4}"), 0..5),
            drop in any::<proptest::sample::Index>(),
        ) {
            let render = |items: &[(&String, &Option<String>)], upper: bool| {
                let mut s = String::from("tel:+1-212-555-0100");
                for (n, v) in items {
                    let n = if upper { n.to_uppercase() } else { (*n).clone() };
                    s.push(';');
                    s.push_str(&n);
                    if let Some(v) = v {
                        s.push('=');
                        s.push_str(v);
                    }
                }
                s
            };
            let items: Vec<_> = params.iter().collect();
            let reversed: Vec<_> = items.iter().rev().copied().collect();
            prop_assert_eq!(key(&render(&items, false)), key(&render(&reversed, true)));
            if !items.is_empty() {
                let mut fewer = items.clone();
                fewer.remove(drop.index(items.len()));
                prop_assert_ne!(key(&render(&items, false)), key(&render(&fewer, false)));
            }
        }

        /// Escaping an unreserved character never changes a SIP URI's key; escaping a
        /// reserved one always does.
        #[test]
        fn escaping_changes_the_key_only_for_reserved_characters(
            user in "[a-zA-Z0-9_.!~*'()-]{1,8}",
            pos in any::<proptest::sample::Index>(),
            reserved in proptest::sample::select(vec!['&', '=', '+', '$', ',', ';', '?', '/']),
        ) {
            let i = pos.index(user.len());
            let c = user.as_bytes()[i];
            let escaped = format!("sip:{}%{:02x}{}@example.com", &user[..i], c, &user[i + 1..]);
            prop_assert_eq!(key(&escaped), key(&format!("sip:{user}@example.com")));
            let plain = format!("sip:{}{reserved}{}@example.com", &user[..i], &user[i..]);
            let esc = format!("sip:{}%{:02X}{}@example.com", &user[..i], reserved as u8, &user[i..]);
            prop_assert_ne!(key(&plain), key(&esc));
        }
    }
}
