//! Telephone numbers: RFC 3966 §4 canonical digits and parameters, and which SIP user parts
//! are read as numbers (RFC 3261 §19.1.1, [`SipUserNumbers`]).

use super::escape::{decode_into, decode_lower_into};
use super::{Params, UriRef};

/// RFC 3966 visual separators.
pub fn is_visual_separator(b: u8) -> bool {
    matches!(b, b'-' | b'.' | b'(' | b')')
}

/// Normalises the telephone number in `buf[start..]` in place: visual separators removed,
/// hex digits upper-cased, a leading `+` kept. Returns whether the number is global (`+`).
pub(super) fn normalize_number(buf: &mut Vec<u8>, start: usize) -> bool {
    let global = buf.get(start) == Some(&b'+');
    let first_digit = start + usize::from(global);
    let mut w = first_digit;
    for r in first_digit..buf.len() {
        if let Some(c) = number_byte(buf[r]) {
            buf[w] = c;
            w += 1;
        }
    }
    buf.truncate(w);
    global
}

/// A byte of a telephone number in canonical form: none for a visual separator, others
/// upper-cased.
#[inline]
fn number_byte(b: u8) -> Option<u8> {
    (!is_visual_separator(b)).then_some(b.to_ascii_uppercase())
}

/// Appends the telephone number at the start of `raw` (without %-escapes), which ends at the
/// first `;` or with `raw`, to `buf` as [`normalize_number`] leaves it; returns whether it is
/// global and where it ends. Numbers are mostly runs of decimal digits, which move eight at a
/// time: a word is copied whole and as many of its bytes kept as lead with digits (the output
/// is a separate slice, so what is copied past them is only overwritten).
#[inline]
pub(super) fn push_number(raw: &[u8], buf: &mut Vec<u8>) -> (bool, usize) {
    let start = buf.len();
    // Room for the number: the output is never longer than `raw`.
    buf.extend_from_slice(raw);
    let out = &mut buf[start..];
    let global = raw.first() == Some(&b'+');
    let (mut r, mut w) = (usize::from(global), usize::from(global));
    loop {
        if let Some(word) = raw.get(r..r + 8).and_then(|c| <[u8; 8]>::try_from(c).ok()) {
            out[w..w + 8].copy_from_slice(&word);
            let digits = leading_decimal_digits(u64::from_le_bytes(word));
            r += digits;
            w += digits;
            if digits == 8 {
                continue;
            }
        }
        let Some(&c) = raw.get(r).filter(|&&c| c != b';') else {
            break;
        };
        r += 1;
        if let Some(c) = number_byte(c) {
            out[w] = c;
            w += 1;
        }
    }
    buf.truncate(start + w);
    (global, r)
}

/// How many of the bytes of `word` (little-endian) are decimal digits before the first one
/// that is not (8 when all are). Byte-wise arithmetic that never carries into the next byte:
/// `x = byte ^ '0'` is below 10 exactly for a digit, and `(x & 0x7f) + 0x76` reaches bit 7
/// from 10 on (at most 0xf5); `x`'s own bit 7 catches the bytes from 0x80.
#[inline]
pub fn leading_decimal_digits(word: u64) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let x = word ^ (u64::from(b'0') * ONES);
    let not_digit = (((x & (0x7f * ONES)) + 0x76 * ONES) | x) & (0x80 * ONES);
    (not_digit.trailing_zeros() / 8) as usize
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
/// `escape::canonical_bytes`. Returns where the first `phone-context` value is. No allocation:
/// parameters already in order (RFC 3966 §3 asks for "lexicographical order" after isub, ext
/// and the context) take one pass, others a selection over the few there are.
pub(super) fn tel_params_into(
    params: Params<'_>,
    buf: &mut Vec<u8>,
) -> Option<std::ops::Range<usize>> {
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

/// The first parameter named `user` (any case) has the value `phone` (any case): RFC 3261
/// §19.1.1's telephone-subscriber marker, as `params.get("user")` compares it, in one pass
/// that looks at the first bytes of each parameter and skips to the next `;`. A `?` ends the
/// parameters as their end does (parameters never hold one: there a SIP URI's headers begin),
/// so the parameters of a URI not yet split at its `?` give the same answer.
#[inline]
pub(super) fn user_is_phone(params: Params<'_>) -> bool {
    // `| 0x20` folds exactly the upper-case letter onto each lower-case one, so on letters
    // a word compare is `eq_ignore_ascii_case`.
    let letters = |b: [u8; 4], word: &[u8; 4]| {
        u32::from_le_bytes(b) | 0x2020_2020 == u32::from_le_bytes(*word)
    };
    let mut rest = params.0.as_bytes();
    loop {
        if let Some((name, after)) = rest.split_first_chunk::<4>()
            && letters(*name, b"user")
        {
            match after.first() {
                // A bare `user` is the first one: no value, not a number.
                None | Some(b';' | b'?') => return false,
                Some(b'=') => {
                    return match after[1..].split_first_chunk::<5>() {
                        Some(([p, h, o, n, e], end)) => {
                            letters([*p, *h, *o, *n], b"phon")
                                && *e | 0x20 == b'e'
                                && matches!(end.first(), None | Some(b';' | b'?'))
                        }
                        None => false,
                    };
                }
                // `userx…`: another parameter.
                _ => {}
            }
        }
        match rest.iter().position(|&c| c == b';' || c == b'?') {
            Some(i) if rest[i] == b';' => rest = &rest[i + 1..],
            _ => return false,
        }
    }
}

/// How the user part of a `sip:`/`sips:` URI **without `user=phone`** is read (see the [module
/// documentation](crate::uri)): RFC 3261 §19.1.1 lets a recipient "interpret the pre-@ part as a
/// telephone number if local restrictions on the name space for user name allow it". A URI with
/// `user=phone` is a number under every setting.
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
    pub(super) fn reads(self, kind: UserNumber) -> bool {
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
pub(super) enum UserNumber {
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
pub(super) fn user_number(user: &str) -> Option<UserNumber> {
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
