//! The URI parsing and canonicalisation code as it was before the issue-18 fast paths
//! (commit 222b0f5), kept for tests only: property tests compare the fast paths with it on
//! random and adversarial input, so the optimised code provably keeps its behaviour.
#![allow(dead_code, clippy::all)]

use super::{Canonical, Number, Params, SipRest, SipUri, TelUri, UriError, UriRef};

/// `Params::iter` as it was.
pub fn params_iter<'a>(p: Params<'a>) -> impl Iterator<Item = (&'a str, Option<&'a str>)> + 'a {
    let mut rest = p.0;
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

/// `Params::get` as it was.
pub fn params_get<'a>(p: Params<'a>, name: &str) -> Option<Option<&'a str>> {
    params_iter(p)
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
}

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
        out.extend(b.iter().map(u8::to_ascii_lowercase));
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
    for (n, _) in params_iter(params) {
        count += 1;
        sorted &= prev.is_none_or(|p| cmp_ci(p, n) != Ordering::Greater);
        prev = Some(n);
    }
    if sorted || count > MAX_SORTED_TEL_PARAMS {
        for (n, v) in params_iter(params) {
            emit(n, v, buf);
        }
        return context;
    }
    // Selection: the smallest (name, position) after the last one written, `count` times.
    let mut last: Option<(&str, usize)> = None;
    for _ in 0..count {
        let mut next: Option<(&str, Option<&str>, usize)> = None;
        for (i, (n, v)) in params_iter(params).enumerate() {
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
            if params_get(s.params, "user")
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
        // RFC 3966 §4: every parameter counts, in any order; a global number has no context.
        let context = tel_params_into(params, buf).filter(|_| !global);
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

/// `sip::uri_part` as it was.
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
            b';' | b',' if !quoted => break,
            _ => {}
        }
        i += 1;
    }
    if quoted {
        return None;
    }
    std::str::from_utf8(v[..i.min(v.len())].trim_ascii())
        .ok()
        .filter(|s| !s.is_empty())
}

/// `compile::uri_canonical` as it was.
pub fn uri_canonical<'b, 'r>(value: &'r str, buf: &'b mut Vec<u8>) -> Option<Canonical<'b, 'r>> {
    let v = value.trim();
    let text = match v.strip_prefix('<') {
        Some(inner) => inner
            .bytes()
            .position(|b| b == b'>')
            .map_or(inner, |e| &inner[..e]),
        None => v,
    };
    let parsed = parse(text).ok()?;
    Some(canonicalize(parsed, buf))
}

/// `compile::header_canonical` as it was.
pub fn header_canonical<'b, 'r>(
    value: &'r str,
    n: usize,
    buf: &'b mut Vec<u8>,
) -> Option<Canonical<'b, 'r>> {
    let text = header_uris(value).nth(n)?.ok()?;
    let parsed = parse(text).ok()?;
    Some(canonicalize(parsed, buf))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// Pieces adversarial URIs and header values are made of: delimiters, quotes, escapes
    /// (valid and broken), IPv6, upper case, `user=phone` spelt every way, tel parameters,
    /// ASCII and Unicode white space.
    const PIECES: &[&str] = &[
        "sip:",
        "SIPS:",
        "sips:",
        "tel:",
        "Tel:",
        "x-y:",
        "mailto:",
        ":",
        "<",
        ">",
        "\"",
        "\\",
        ",",
        ";",
        "=",
        "@",
        "?",
        "&",
        "[",
        "]",
        "[::1]",
        "[2001:db8::A]",
        "%41",
        "%3b",
        "%3B",
        "%25",
        "%2",
        "%",
        "%zz",
        "%2B",
        "+",
        "+1-212",
        "(555)",
        ".",
        "-",
        "_",
        " ",
        "\t",
        "\r\n",
        "\x0b",
        "\x0c",
        "\u{a0}",
        "\u{2003}",
        "é",
        "a",
        "B",
        "alice",
        "Bob",
        "5060",
        "99999",
        "65536",
        "user=phone",
        "USER=Phone",
        "user=ip",
        "user",
        "user=",
        "users=phone",
        ";user=phone",
        "phone",
        "phone-context=",
        "phone-context=+1-2",
        "ext=1-2",
        "isub=X",
        "transport=tcp",
        "lr",
        "example.COM",
        "gw.example",
        "\"A,b\" ",
        "\"a\\\"b\" ",
        "\x00",
        "\x7f",
        "tag=1",
    ];

    fn adversarial() -> impl Strategy<Value = String> {
        prop_oneof![
            proptest::collection::vec(proptest::sample::select(PIECES), 0..16)
                .prop_map(|v| v.concat()),
            // Realistic shapes with random pieces spliced in.
            (
                proptest::sample::select(
                    &[
                        "\"Alice\" <sip:user1@customers12.example.org;transport=tcp>;tag=9",
                        "<sip:+1-212-555-1234@gw1.carrier.example;user=phone>;tag=1",
                        "\"Bob\" <tel:+1-212-555-0100;isub=1>;tag=2",
                        "sip:+99912345678@core.example;user=phone",
                        "sip:alice@[2001:db8::1]:5060;lr?subject=x%20y",
                        "<sip:pai1@trusted.example>, <tel:+13125550000>",
                        "tel:7042;phone-context=Example.COM;ext=1-2",
                        "SIP:%61lice:pw@AtLanTa.CoM:5061;Transport=TCP;user=PHONE",
                    ][..]
                ),
                any::<proptest::sample::Index>(),
                proptest::collection::vec(proptest::sample::select(PIECES), 0..3),
            )
                .prop_map(|(base, at, ins)| {
                    let mut i = at.index(base.len() + 1);
                    while !base.is_char_boundary(i) {
                        i -= 1;
                    }
                    format!("{}{}{}", &base[..i], ins.concat(), &base[i..])
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

        /// `user=phone` detection agrees with `params.get("user")` on parameter lists made of
        /// near misses.
        #[test]
        fn user_is_phone_agrees_with_get(
            p in proptest::collection::vec(proptest::sample::select(&[
                ";", "=", "user", "USER", "uSeR", "users", "use", "phone", "PHONE", "phon",
                "phones", "x", "user=phone", "user=phone=x", "%75ser=phone", "",
            ][..]), 0..8).prop_map(|v| v.concat()),
        ) {
            let slow = super::params_get(super::Params(&p), "user")
                .flatten()
                .is_some_and(|v| v.eq_ignore_ascii_case("phone"));
            prop_assert_eq!(crate::uri::user_is_phone(super::Params(&p)), slow, "{:?}", p);
        }

        /// The scheme shortcut: near misses of `sip:`, `sips:` and `tel:` (other case, bytes
        /// that equal a letter once 0x20 is set, missing or extra letters) parse as before.
        #[test]
        fn known_schemes_parse_as_before(
            scheme in "[sSiIpPtTeElL3\\x13\\x09\\x10\\x0c\\x1a:]{0,6}",
            rest in "(a@b|a@b;user=phone|\\+1-2|:|)",
        ) {
            let uri = format!("{scheme}{rest}");
            prop_assert_eq!(crate::uri::parse(&uri), super::parse(&uri), "{:?}", uri);
        }

        /// Every fast path agrees with the code it replaced: header splitting, parsing,
        /// canonical forms and the compiler's entry points, results and errors alike.
        #[test]
        fn fast_paths_agree_with_the_reference(s in adversarial()) {
            let fast: Vec<_> = crate::uri::header_uris(&s).take(4).collect();
            let slow: Vec<_> = super::header_uris(&s).take(4).collect();
            prop_assert_eq!(&fast, &slow);
            let mut texts: Vec<&str> = vec![&s, s.trim()];
            texts.extend(fast.iter().flatten().copied());
            for t in texts {
                let p = crate::uri::parse(t);
                prop_assert_eq!(p, super::parse(t), "{:?}", t);
                if let Ok(p) = p {
                    let (mut a, mut b) = (Vec::new(), Vec::new());
                    prop_assert_eq!(
                        crate::uri::canonicalize(p, &mut a),
                        super::canonicalize(p, &mut b),
                        "{:?}", t
                    );
                    // Every part asked of `canonicalize_parts` is the reference's, whatever
                    // else is asked with it.
                    let full = super::canonicalize(p, &mut b);
                    for bits in 0..8u8 {
                        let parts = crate::uri::Parts {
                            key: bits & 1 != 0,
                            host: bits & 2 != 0,
                            number: bits & 4 != 0,
                        };
                        let got = crate::uri::canonicalize_parts(p, &mut a, parts);
                        if parts.key {
                            prop_assert_eq!(got.key, full.key, "{:?} {:?}", t, parts);
                            prop_assert_eq!(got.sip, full.sip, "{:?} {:?}", t, parts);
                        }
                        if parts.host {
                            prop_assert_eq!(got.host, full.host, "{:?} {:?}", t, parts);
                        }
                        if parts.number {
                            prop_assert_eq!(got.number, full.number, "{:?} {:?}", t, parts);
                        }
                    }
                    if let crate::uri::UriRef::Sip(u) = p {
                        prop_assert_eq!(
                            u.params.iter().collect::<Vec<_>>(),
                            super::params_iter(u.params).collect::<Vec<_>>()
                        );
                    }
                }
            }
            prop_assert_eq!(crate::sip::uri_part(s.as_bytes()), super::uri_part(s.as_bytes()));
            let (mut a, mut b) = (Vec::new(), Vec::new());
            prop_assert_eq!(
                crate::compile::uri_canonical(&s, &mut a),
                super::uri_canonical(&s, &mut b)
            );
            for n in 0..2 {
                prop_assert_eq!(
                    crate::compile::header_canonical(&s, n, &mut a),
                    super::header_canonical(&s, n, &mut b)
                );
            }
        }
    }
}
