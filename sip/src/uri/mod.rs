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
//! Telephone numbers follow RFC 3966 §4: visual separators (`-` `.` `(` `)`) are removed, a global
//! number keeps its `+` (a `%2B` is not one: RFC 3966 §3 forbids escaping it as a delimiter), and
//! **every parameter is part of the comparison**, in any order and any case:
//! `tel:+1-212-555-1234;isub=1` differs from `tel:+1-212-555-1234`, `phone-context` compares as a
//! domain or digit by digit, `ext` digit by digit. `many-tel` / `except-tel` prefixes are not URI
//! equality: they group *numbers* (RFC 7200 §5.3.1: "'tel' URIs of global numbers can be grouped by
//! prefixes consisting of any number of common leading digits" and local ones "by the value of the
//! \"phone-context\" parameter"), so they look at the digits and the context only and
//! `tel:+1-212-555-1234;isub=1` is within prefix `+1-212`. **A `sip:`/`sips:` URI with `user=phone`
//! is compared as the telephone number in its user part**, so a `tel:` id and a `many-tel` prefix
//! match it whatever its host.
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

mod canonical;
mod escape;
mod numbers;
mod params;
mod parse;
#[cfg(test)]
mod tests;

#[doc(hidden)]
pub use canonical::canonicalize_noting;
pub use canonical::{
    Canonical, Parts, SipRest, canonicalize, canonicalize_parts, canonicalize_with,
};
pub use numbers::{Number, SipUserNumbers, UnknownSipUserNumbers, unread_number};
#[doc(hidden)]
pub use numbers::{is_visual_separator, leading_decimal_digits};
pub use params::{
    CanonicalParam, ENTITY_STRICT_PARAMS, STRICT_PARAMS, canonical_headers, canonical_params,
    params_and_headers_match, params_and_headers_match_with,
};
pub use parse::{HeaderUris, PeekedNumber, header_uris, parse, peek_host, peek_number};

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
