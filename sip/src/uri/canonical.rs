//! The canonical form of a URI: the comparison key and its parts, written into a reused buffer.

use super::escape::{decode_into, decode_lower_into, extend_lower};
use super::numbers::{
    Number, SipUserNumbers, UserNumber, normalize_number, push_number, tel_params_into,
    user_is_phone, user_number,
};
use super::{Params, UriRef};

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

/// The canonical form of `uri` with SIP user parts read as `numbers` says, building only the parts
/// `parts` asks for: each part asked for is exactly what all of them give; the others are left
/// empty (`key` `b""`, `host`, `number` and `sip` `None`) and must not be read, since "empty" then
/// does not mean "the URI has none". A part may come for free with another (a number's key, a SIP
/// URI's host inside its key) and is then filled in too, with the same value.
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

/// [`canonicalize_with`], also setting `*unread` when `uri` is an
/// [`unread_number`](super::unread_number) (only looked at when `parts` asks for the key or the
/// number): what classification counts, found on the way at no extra cost.
pub fn canonicalize_noting<'b, 'a>(
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
    // (number as written, followed in a user part by its `;` parameters; the parameters when
    // the URI holds them apart; the host that is a local number's context).
    let tel_parts: Option<(&str, Option<Params<'_>>, Option<&str>)> = match uri {
        _ if !parts.key && !parts.number => None,
        UriRef::Tel(t) => Some((t.number, Some(t.params), None)),
        UriRef::Sip(s) if user_is_phone(s.params) => s.user.map(|u| (u, None, None)),
        UriRef::Sip(s) => match s.user.and_then(|u| Some((u, user_number(u)?))) {
            Some((u, kind)) if numbers.reads(kind) => Some((
                u,
                Some(Params("")),
                (kind == UserNumber::Local).then_some(s.host),
            )),
            Some(_) => {
                *unread = true;
                None
            }
            None => None,
        },
        _ => None,
    };
    if let Some((text, params, host_context)) = tel_parts {
        // Work area after the key: decoded number, then digits, then context.
        buf.extend_from_slice(b"tel:");
        let digits_start = buf.len();
        // The number ends at the first `;` (only a user part has one).
        let (global, end) = if escaped {
            let end = text.bytes().position(|c| c == b';').unwrap_or(text.len());
            decode_into(&text[..end], buf);
            (normalize_number(buf, digits_start), end)
        } else {
            push_number(text.as_bytes(), buf)
        };
        let params = params.unwrap_or(Params(text.get(end + 1..).unwrap_or("")));
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
