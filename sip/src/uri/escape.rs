//! %-escapes (RFC 3261 §19.1.4: which characters equal their escape) and case folding.

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
pub(super) fn has_escape(b: &[u8]) -> bool {
    b.iter().any(|&c| c == b'%')
}

/// Characters that differ from their %-escape: RFC 3261 §19.1.4 "Characters other than
/// those in the \"reserved\" set (see RFC 2396 \[5\]) are equivalent to their \"\"%\" HEX HEX\"
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

/// The canonical bytes of `raw` (escapes validated by [`parse`](super::parse)): a %-escape of a
/// character outside [`keeps_escape`]'s set is decoded, the others are kept as `%` and two
/// upper-case hex digits; everything else is copied. Two URI components are equal under RFC 3261
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
pub(super) fn decode_into(raw: &str, out: &mut Vec<u8>) {
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
pub(super) fn decoded_lower(raw: &str) -> impl Iterator<Item = u8> + '_ {
    canonical_bytes(raw).map(|c| c.to_ascii_lowercase())
}

/// `raw` (%-escaped) equals `canonical` (canonical bytes, lower-case), ignoring ASCII case.
pub(super) fn eq_decoded_ci(raw: &str, canonical: &[u8]) -> bool {
    decoded_lower(raw).eq(canonical.iter().copied())
}

/// Appends `raw`, canonical and lower-cased.
#[inline]
pub(super) fn decode_lower_into(raw: &str, out: &mut Vec<u8>) {
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

/// Appends `b` lower-cased: a copy, then lower-casing the copy in place eight bytes at a time
/// (where mapping byte by byte into `extend` pushes one at a time). A copy of eight bytes or
/// more ends with a word that overlaps the one before it instead of a byte loop: lower-casing a
/// byte twice changes nothing.
#[inline]
pub(super) fn extend_lower(b: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(b);
    let copy = &mut out[start..];
    let Some(last) = copy.len().checked_sub(8) else {
        copy.make_ascii_lowercase();
        return;
    };
    let mut lower_at = |i: usize| {
        if let Some(w) = copy.get_mut(i..i + 8) {
            let word = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            w.copy_from_slice(&lower_word(word).to_le_bytes());
        }
    };
    let mut i = 0;
    while i < last {
        lower_at(i);
        i += 8;
    }
    lower_at(last);
}

/// `word`'s eight bytes lower-cased (ASCII `A`–`Z` only, as `make_ascii_lowercase`): bit 7 of
/// each byte marks the upper-case letters, and moved to bit 5 it adds 0x20 to exactly them.
/// Byte-wise arithmetic on the low seven bits, which never carries into the next byte (each
/// sum stays below 0x100); bytes from 0x80 are left alone.
#[inline]
pub(super) fn lower_word(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let low = word & !HIGH;
    let from_a = low + (0x80 - u64::from(b'A')) * ONES;
    let past_z = low + (0x80 - u64::from(b'Z') - 1) * ONES;
    let upper = from_a & !past_z & !word & HIGH;
    word | upper >> 2
}
