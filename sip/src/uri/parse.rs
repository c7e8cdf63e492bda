//! Reading URI text: one pass over the bytes of a SIP URI, the general path for the rest,
//! and the URIs of a header value.

use super::escape::has_escape;
use super::numbers::{SipUserNumbers, UserNumber, user_is_phone, user_number};
use super::{Params, SipUri, TelUri, UriError, UriRef, split_byte};

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

/// The host of the SIP or SIPS URI `text` as written, read without parsing `text`, and whether
/// it holds no upper-case letter: when [`parse`] accepts `text`, this host lower-cased is the
/// host of its canonical form ([`super::Canonical::host`]). `None` for other schemes and IPv6
/// references: parse instead. A caller that only looks hosts up can tell a host it does not
/// know from this alone, and parse (validate) only the URIs whose host it knows.
///
/// Why it agrees with [`parse`]: the host starts after the first `@` (after the scheme's colon
/// when there is none; no `@` may appear unescaped in the user part, and an escape's two hex
/// digits are no delimiter) and ends at the first `:`, `;` or `?` after that, or with the URI;
/// a host that parses holds no `%` and no byte from `:` to `?`, so lower-casing is all that
/// canonicalisation does to it.
pub fn peek_host(text: &str) -> Option<(&[u8], bool)> {
    let b = text.trim_ascii().as_bytes();
    let Some((colon, Scheme::Sip | Scheme::Sips)) = known_scheme(b) else {
        return None;
    };
    let rest = &b[colon + 1..];
    let host = &rest[first_of(rest, b'@', b'@').map_or(0, |at| at + 1)..];
    if host.first() == Some(&b'[') {
        return None;
    }
    // Eight bytes a step: where the first byte from `:` to `?` is, and whether an upper-case
    // letter comes before it (byte-wise sums on the low seven bits, which never carry).
    let mut upper = 0;
    let mut words = host.chunks_exact(8);
    let mut i = 0;
    for word in &mut words {
        let w = u64::from_le_bytes([
            word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7],
        ]);
        let low = w & !HIGH;
        let at_least = |n: u64| low + (0x80 - n) * ONES;
        let stop = at_least(u64::from(b':')) & !at_least(u64::from(b'?') + 1) & !w & HIGH;
        let caps = at_least(u64::from(b'A')) & !at_least(u64::from(b'Z') + 1) & !w & HIGH;
        if stop != 0 {
            let below_stop = (stop & stop.wrapping_neg()) - 1;
            upper |= caps & below_stop;
            i += (stop.trailing_zeros() / 8) as usize;
            return Some((&host[..i], upper == 0));
        }
        upper |= caps;
        i += 8;
    }
    for &c in words.remainder() {
        if matches!(c, b':'..=b'?') {
            break;
        }
        upper |= u64::from(c.is_ascii_uppercase());
        i += 1;
    }
    Some((&host[..i], upper == 0))
}

/// What [`peek_number`] tells of a URI without parsing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeekedNumber<'a> {
    /// If [`parse`] accepts the URI, its canonical form holds no number (and it is no
    /// [`super::unread_number`]).
    None,
    /// If [`parse`] accepts the URI, its canonical number is global, written here after its
    /// `+`: as long as these bytes hold nothing but digits and RFC 3966 visual separators, the
    /// canonical digits are those digits, up to the end or a `;` (where parameters begin). Any
    /// other byte may be an escape that decoding turns into a digit, or a password: a reader
    /// learns nothing from it or what follows.
    Global(&'a str),
    /// It takes parsing to tell (a local number, an IPv6 reference, a user part the setting
    /// leaves unread, another scheme).
    Unsure,
}

/// The telephone number of the URI `text` as [`super::canonicalize_with`] reads it with
/// `numbers`, found without parsing `text`. Like [`peek_host`], for a caller that only looks
/// global numbers up: it parses only the URIs whose number it knows.
///
/// Why it agrees with [`parse`] and the canonical form: a `tel:` number runs to the first `;`;
/// a SIP URI's user part (up to a `:` before its first `@`) is a number when the URI
/// parameters (from the first `;` after the `@` to a `?`) hold `user=phone` (then up to its
/// own first `;`), or when `numbers` reads it as one; every other URI of these schemes holds
/// none.
pub fn peek_number(text: &str, numbers: SipUserNumbers) -> PeekedNumber<'_> {
    let text = text.trim_ascii();
    let (colon, scheme) = match known_scheme(text.as_bytes()) {
        Some(known) => known,
        None => return PeekedNumber::Unsure,
    };
    let rest = &text[colon + 1..];
    let number = match scheme {
        Scheme::Tel => rest,
        Scheme::Sip | Scheme::Sips => {
            let Some(at) = first_of(rest.as_bytes(), b'@', b'@') else {
                // No user part: no number.
                return PeekedNumber::None;
            };
            let userinfo = &rest[..at];
            let hostpart = &rest[at + 1..];
            if hostpart.starts_with('[') {
                return PeekedNumber::Unsure;
            }
            // The URI parameters start at the first `;` unless a `?` comes first (user_is_phone
            // stops at the `?` that ends them).
            let params = match first_of(hostpart.as_bytes(), b';', b'?') {
                Some(i) if hostpart.as_bytes()[i] == b';' => &hostpart[i + 1..],
                _ => "",
            };
            if user_is_phone(Params(params)) {
                // A password's `:` ends what a reader may read.
                userinfo
            } else {
                let user = split_byte(userinfo, b':').map_or(userinfo, |(u, _)| u);
                match user_number(user) {
                    None => return PeekedNumber::None,
                    Some(UserNumber::Global) if numbers.reads(UserNumber::Global) => user,
                    Some(_) => return PeekedNumber::Unsure,
                }
            }
        }
        Scheme::Other => return PeekedNumber::Unsure,
    };
    match number.strip_prefix('+') {
        Some(written) => PeekedNumber::Global(written),
        None => PeekedNumber::Unsure,
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Where the first `x` or `y` (ASCII) of `b` is: eight bytes a step (a zero byte of
/// `word ^ x…` is an `x`; the borrow of the subtraction only ever marks bytes above the first
/// zero, so the lowest mark is exact), then byte by byte.
#[inline]
fn first_of(b: &[u8], x: u8, y: u8) -> Option<usize> {
    let zeros = |w: u64| w.wrapping_sub(ONES) & !w & HIGH;
    let mut words = b.chunks_exact(8);
    let mut i = 0;
    for word in &mut words {
        let w = u64::from_le_bytes([
            word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7],
        ]);
        let found = zeros(w ^ (u64::from(x) * ONES)) | zeros(w ^ (u64::from(y) * ONES));
        if found != 0 {
            return Some(i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == x || c == y)
        .map(|k| i + k)
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
pub(super) fn parse_sip(secure: bool, rest: &str) -> Result<SipUri<'_>, UriError> {
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
        // A quoted display name without a backslash is passed eight bytes at a time to its
        // closing quote.
        if b[0] == b'"'
            && let Some(q) = first_of(&b[1..], b'"', b'\\')
            && b[1 + q] == b'"'
        {
            i = q + 2;
        }
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
