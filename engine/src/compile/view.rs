//! A request as the rule checks read it: its header values, cut out and canonicalised only
//! when a candidate rule asks for them (the view), and the scratch space they are written to.

use super::index::{FieldIndex, Peeked, Probe};
use crate::sip::HeaderValues;
use crate::uri::{self, Canonical, Parts, SipUserNumbers};

/// A rule condition that did not hold, the first one found (cheapest checks first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// The rule holds a condition this reader does not support (never matches).
    Unsupported,
    /// The request's method is not the rule's (or not in the default set).
    Method,
    /// The time is outside every validity interval.
    Validity,
    /// The rule names a target and the request has none.
    NoTarget,
    /// The request's target is another entity.
    Target,
    /// No `<sip>` block matched.
    CallIdentity,
}

impl Miss {
    /// A short explanation for `loadctl explain`.
    pub fn describe(self) -> &'static str {
        match self {
            Miss::Unsupported => {
                "holds a condition this engine does not support, so it never matches"
            }
            Miss::Method => "the method does not match",
            Miss::Validity => "outside its validity period",
            Miss::NoTarget => "the rule names a target-sip-entity and the request has no target",
            Miss::Target => "the request's target is another entity",
            Miss::CallIdentity => "no <sip> block of its call-identity matches",
        }
    }
}

/// The canonical forms of a request's identities, borrowed from shard scratch buffers.
#[derive(Debug, Default)]
pub struct RequestView<'b, 'r> {
    /// From, To, Request-URI, P-Asserted-Identity (up to two values each).
    pub fields: [[Option<Canonical<'b, 'r>>; 2]; 4],
    /// The target entity.
    pub target: Option<Canonical<'b, 'r>>,
}

/// A request's target entity for the checks: canonicalised on first use, since most
/// requests meet no candidate rule that names a target.
pub(super) enum LazyTarget<'b, 'r> {
    Ready(Option<Canonical<'b, 'r>>),
    Pending {
        raw: Option<&'r str>,
        buf: &'b mut Vec<u8>,
    },
}

impl<'b, 'r> LazyTarget<'b, 'r> {
    #[inline]
    pub(super) fn get(&mut self) -> Option<&Canonical<'b, 'r>> {
        if matches!(self, LazyTarget::Pending { .. }) {
            *self = match std::mem::replace(self, LazyTarget::Ready(None)) {
                LazyTarget::Pending { raw, buf } => {
                    LazyTarget::Ready(raw.and_then(|v| uri_canonical(v, buf)))
                }
                ready => ready,
            };
        }
        match self {
            LazyTarget::Ready(t) => t.as_ref(),
            LazyTarget::Pending { .. } => None,
        }
    }
}

/// How to get the key (and parameters) of one request URI, for `one` and `except id`.
pub(super) enum LazyKey<'b, 'r> {
    /// The view's canonical form holds it.
    InView,
    /// Not built yet: the URI's text (it parsed when the view was built) and where to build
    /// its canonical form, which then replaces the view's.
    Pending { text: &'r str, buf: &'b mut Vec<u8> },
    /// The URI itself is not read yet ([`field`] found what the field's index finds for it
    /// without parsing it): its text and where its parts and key go.
    Unread {
        text: &'r str,
        parts: Parts,
        buf: &'b mut Vec<u8>,
        key_buf: &'b mut Vec<u8>,
    },
}

/// One value of a request field as an identity test reads it.
pub(super) struct Value<'v, 'b, 'r> {
    /// The parts of its canonical form built when the view was (`Matcher::parts`).
    pub(super) parts: Canonical<'b, 'r>,
    /// The view's entry for it: where a canonical form built on demand goes.
    pub(super) entry: &'v mut Option<Canonical<'b, 'r>>,
    pub(super) key: &'v mut LazyKey<'b, 'r>,
    /// How the key reads SIP user parts (the policy's setting).
    pub(super) numbers: SipUserNumbers,
}

impl<'b, 'r> Value<'_, 'b, 'r> {
    /// The canonical form holding the key, built on first use.
    #[inline]
    pub(super) fn key(&mut self) -> Option<&Canonical<'b, 'r>> {
        if let LazyKey::Pending { text, buf } = std::mem::replace(self.key, LazyKey::InView) {
            *self.entry = build_full(text, buf, self.numbers);
        }
        self.entry.as_ref()
    }
}

/// The full canonical form of the URI `text` in `buf`. Out of line: a candidate rarely needs
/// it.
#[inline(never)]
pub(super) fn build_full<'b, 'r>(
    text: &'r str,
    buf: &'b mut Vec<u8>,
    numbers: SipUserNumbers,
) -> Option<Canonical<'b, 'r>> {
    uri::parse(text)
        .ok()
        .map(|u| uri::canonicalize_with(u, buf, Parts::ALL, numbers))
}

/// Per request URI (From, To, Request-URI, two P-Asserted-Identity: `Keys[slot + n]` for
/// the `n`th value of field `slot`), how to get its key.
pub(super) type Keys<'b, 'r> = [LazyKey<'b, 'r>; 5];

/// Keys when the view holds them all (built by [`CompiledPolicy::view`]).
pub(super) const IN_VIEW: Keys<'static, 'static> = [
    LazyKey::InView,
    LazyKey::InView,
    LazyKey::InView,
    LazyKey::InView,
    LazyKey::InView,
];

/// The header fields of a view.
pub(super) type Fields<'b, 'r> = [[Option<Canonical<'b, 'r>>; 2]; 4];

/// Reused buffers for [`RequestView`]s: after warm-up, building a view does not allocate.
#[derive(Debug, Default)]
pub struct Scratch {
    pub(super) bufs: [Vec<u8>; 6],
    /// Where keys built on demand go (From, To, Request-URI, two P-Asserted-Identity).
    pub(super) keys: [Vec<u8>; 5],
    pub(super) candidates: Vec<u32>,
    /// Set by [`CompiledPolicy::find_with`]: see [`Scratch::unread_number`].
    pub(super) unread_number: bool,
}

impl Scratch {
    /// After a [`super::CompiledPolicy::find_with`] that found no rule in a policy that compares
    /// telephone numbers: some field a rule looks at was a SIP URI whose user part looks like
    /// a number (digits and visual separators after an optional `+`) that the policy's
    /// [`SipUserNumbers`] setting did not read as one. False after a match.
    pub fn unread_number(&self) -> bool {
        self.unread_number
    }
}

/// The raw inputs a view is built from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Identities<'r> {
    /// From header value.
    pub from: Option<&'r str>,
    /// To header value.
    pub to: Option<&'r str>,
    /// The Request-URI (a URI, not a header value: its `;` parameters belong to it).
    pub request_uri: Option<&'r str>,
    /// P-Asserted-Identity values, across every line of the header (RFC 3261 §7.3.1): the
    /// first two are used (RFC 3325 §9.1 allows at most two, a sip/sips and a tel URI).
    pub p_asserted_identity: HeaderValues<'r>,
    /// The target entity (URI or `<URI>`).
    pub target: Option<&'r str>,
}

/// The text of the `n`th URI of a header value.
#[inline]
pub(super) fn header_text(value: &str, n: usize) -> Option<&str> {
    uri::header_uris(value).nth(n)?.ok()
}

/// The text of the URI of one element of a list header (`"name" <uri>;params` or
/// `uri;params`).
#[inline]
pub(super) fn element_text(value: &[u8]) -> Option<&str> {
    let part = crate::sip::uri_part(value)?;
    // A name-addr's part runs from its '<' to the first '>' after it: the URI is what lies
    // between, without searching for the '>' again.
    Some(match part.strip_prefix('<') {
        Some(inner) => inner.strip_suffix('>').unwrap_or(inner),
        None => bare_text(part),
    })
}

/// `s.trim()` (Unicode white space), without decoding characters when both ends are ASCII
/// and not white space, as a URI's ends nearly always are.
#[inline]
pub(super) fn trim_unicode(s: &str) -> &str {
    // `char::is_whitespace` of an ASCII byte: '\t' '\n' VT FF '\r' and ' ' (VT is not
    // `is_ascii_whitespace`); a byte from 0x80 may end a Unicode space.
    let plain_end = |b: u8| b < 0x80 && !matches!(b, b'\t'..=b'\r' | b' ');
    match s.as_bytes() {
        [first, .., last] if plain_end(*first) && plain_end(*last) => s,
        [only] if plain_end(*only) => s,
        _ => s.trim(),
    }
}

/// The text of a URI, or of a `<URI>` (anything after its `>` ignored).
#[inline]
pub(super) fn bare_text(value: &str) -> &str {
    let v = trim_unicode(value);
    match v.strip_prefix('<') {
        Some(inner) => memchr::memchr(b'>', inner.as_bytes()).map_or(inner, |e| &inner[..e]),
        None => v,
    }
}

/// A URI, or a `<URI>` (anything after its `>` ignored), canonicalised.
pub(crate) fn uri_canonical<'b, 'r>(
    value: &'r str,
    buf: &'b mut Vec<u8>,
) -> Option<Canonical<'b, 'r>> {
    let parsed = uri::parse(bare_text(value)).ok()?;
    Some(uri::canonicalize(parsed, buf))
}

/// The URI `text`, when it parses: `parts` of its canonical form built into `buf`, and its
/// key left to build into `key_buf` on first use (`key` says how) when `parts` does not hold
/// it and there is a `key_buf`. `*unread` is set when the URI is a [`uri::unread_number`]
/// (looked at when `parts` has the key or the number).
///
/// With `probe` (the field's index, how, and the candidates) and a `key_buf` (a lazy view),
/// what the probe reads of the URI without parsing it is looked up first
/// ([`FieldIndex::peek`]): a URI that brings no candidate that way is not parsed, and one whose
/// candidates were found that way is only parsed to tell they stand; either is left for a
/// check that reads the field ([`read_unread`]), `key` saying how, and the view holds nothing
/// for it, so the field is not looked up again.
#[inline]
pub(super) fn field<'b, 'r>(
    text: Option<&'r str>,
    (parts, numbers, unread): (Parts, SipUserNumbers, &mut bool),
    buf: &'b mut Vec<u8>,
    key_buf: Option<&'b mut Vec<u8>>,
    key: &mut LazyKey<'b, 'r>,
    probe: Option<(&FieldIndex, Probe, &mut Vec<u32>)>,
) -> Option<Canonical<'b, 'r>> {
    let text = text?;
    let key_buf = match (probe, key_buf) {
        (Some((index, probe, candidates)), Some(key_buf)) => {
            let before = candidates.len();
            match index.peek(probe, text, numbers, buf, candidates) {
                Peeked::Parse => Some(key_buf),
                Peeked::Found if uri::parse(text).is_err() => {
                    candidates.truncate(before);
                    return None;
                }
                Peeked::Nothing | Peeked::Found => {
                    *key = LazyKey::Unread {
                        text,
                        parts,
                        buf,
                        key_buf,
                    };
                    return None;
                }
            }
        }
        (_, key_buf) => key_buf,
    };
    let parsed = uri::parse(text).ok()?;
    if !parts.key
        && let Some(buf) = key_buf
    {
        *key = LazyKey::Pending { text, buf };
    }
    Some(uri::canonicalize_noting(
        parsed, buf, parts, numbers, unread,
    ))
}

/// Reads a URI [`field`] left unread, for a check that asks for the field: `entry` gets what
/// `field` would have built, `key` how to get its key. Out of line: checks rarely read such a
/// field.
#[inline(never)]
pub(super) fn read_unread<'b, 'r>(
    entry: &mut Option<Canonical<'b, 'r>>,
    key: &mut LazyKey<'b, 'r>,
    numbers: SipUserNumbers,
) {
    if let LazyKey::Unread {
        text,
        parts,
        buf,
        key_buf,
    } = std::mem::replace(key, LazyKey::InView)
    {
        // A URI that would note an unread number is never left unread.
        *entry = field(
            Some(text),
            (parts, numbers, &mut false),
            buf,
            Some(key_buf),
            key,
            None,
        );
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 5_000, ..ProptestConfig::default() })]

        /// The ASCII shortcut of `trim_unicode` is `str::trim`: ends made of ASCII and
        /// Unicode white space (VT and NBSP included), letters and multi-byte characters.
        #[test]
        fn trim_unicode_is_trim(
            s in proptest::collection::vec(proptest::sample::select(&[
                " ", "\t", "\n", "\x0b", "\x0c", "\r", "\u{a0}", "\u{2003}", "\u{3000}", "a",
                "<", ">", "é", "\u{1f600}", "\x00", "\x1f",
            ][..]), 0..6).prop_map(|v| v.concat()),
        ) {
            prop_assert_eq!(super::trim_unicode(&s), s.trim());
        }
    }
}
