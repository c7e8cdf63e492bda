//! The one reader of a Via header value: its first via-parm (RFC 3261 §20.42, grammar in
//! §25.1), for every part of loadctl that needs one — the retransmission detector's
//! transaction key (sent-by, branch), the event package's answers (branch) and overload
//! control's Via parameters (RFC 7339 §4).
//!
//! ```text
//! Via           = ( "Via" / "v" ) HCOLON via-parm *(COMMA via-parm)
//! via-parm      = sent-protocol LWS sent-by *( SEMI via-params )
//! sent-protocol = protocol-name SLASH protocol-version SLASH transport
//! sent-by       = host [ COLON port ]
//! via-params    = via-ttl / via-maddr / via-received / via-branch / via-extension
//! via-extension = generic-param            ; token [ EQUAL gen-value ]
//! gen-value     = token / host / quoted-string
//! ```
//!
//! A comma or a semicolon inside a quoted string (RFC 7339 §9's `oc-algo="loss,rate"`) neither
//! ends the via-parm nor starts a parameter; a via-parm that leaves a quoted string open is
//! malformed ([`ViaError::UnclosedQuote`]). SLASH, SEMI and EQUAL allow white space around
//! them; parameter names compare case-insensitively (§7.3.1: "Unless otherwise stated in the
//! definition of a particular header field, field values, parameter names, and parameter
//! values are case-insensitive"). The reader works on the bytes of a scanned message or on a
//! `&str` alike ([`ViaText`]) and hands back pieces of what it was given. Nothing allocates.
//!
//! ```
//! use loadctl_sip::via::ViaParm;
//!
//! let via = "SIP/2.0/UDP 192.0.2.1:5060;oc;oc-algo=\"loss,rate\";branch=z9hG4bK7, SIP/2.0/TCP p.example";
//! let top = ViaParm::top(via).unwrap();
//! assert_eq!(top.transport(), Some("UDP"));
//! assert_eq!(top.sent_by(), Some("192.0.2.1:5060"));
//! assert_eq!(top.param("oc-algo"), Some(Some("loss,rate")));
//! assert_eq!(top.branch(), Some("z9hG4bK7"));
//! assert_eq!(top.rest(), ", SIP/2.0/TCP p.example");
//! ```

use std::fmt;

mod sealed {
    pub trait Sealed {}
    impl Sealed for &[u8] {}
    impl Sealed for &str {}
}

/// What a Via is read from: the bytes of a scanned message (`&[u8]`) or text (`&str`). The
/// reader finds positions in the bytes and hands back pieces of the caller's own type.
pub trait ViaText<'a>: sealed::Sealed + Copy {
    /// The bytes of the text.
    fn bytes(self) -> &'a [u8];
    /// The piece `from..to`. The reader asks only for pieces that start and end at ASCII
    /// bytes (or the ends), which are character boundaries of a `&str`.
    fn piece(self, from: usize, to: usize) -> Self;
}

impl<'a> ViaText<'a> for &'a [u8] {
    fn bytes(self) -> &'a [u8] {
        self
    }
    fn piece(self, from: usize, to: usize) -> Self {
        self.get(from..to).unwrap_or_default()
    }
}

impl<'a> ViaText<'a> for &'a str {
    fn bytes(self) -> &'a [u8] {
        self.as_bytes()
    }
    fn piece(self, from: usize, to: usize) -> Self {
        self.get(from..to).unwrap_or_default()
    }
}

/// Why a Via value could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViaError {
    /// The first via-parm opens a quoted string it does not close (RFC 3261 §25.1
    /// `quoted-string`): where its parameters end cannot be known.
    UnclosedQuote,
}

impl fmt::Display for ViaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ViaError::UnclosedQuote => {
                f.write_str("the top via-parm of the Via opens a quoted string it does not close")
            }
        }
    }
}

impl std::error::Error for ViaError {}

/// The first via-parm of a Via header value — the hop that sent the message (RFC 3261 §18.2.1:
/// the top Via) — as pieces of the value it was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViaParm<T> {
    value: T,
    /// Where the parameters start (the first `;` outside quotes) or the via-parm's end.
    params_at: usize,
    /// Where the via-parm ends: its comma, or the value's end.
    end: usize,
}

impl<'a, T: ViaText<'a>> ViaParm<T> {
    /// The first via-parm of `value` (a Via header value, or one line of it).
    pub fn top(value: T) -> Result<Self, ViaError> {
        let b = value.bytes();
        let mut quoted = false;
        let mut params_at = None;
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'"' => quoted = !quoted,
                b'\\' if quoted => i += 1,
                b';' if !quoted && params_at.is_none() => params_at = Some(i),
                b',' if !quoted => break,
                _ => {}
            }
            i += 1;
        }
        if quoted {
            return Err(ViaError::UnclosedQuote);
        }
        let end = i.min(b.len());
        Ok(ViaParm {
            value,
            params_at: params_at.unwrap_or(end),
            end,
        })
    }

    /// `sent-protocol LWS sent-by` as written, without the white space around it.
    pub fn head(&self) -> T {
        let (from, to) = trimmed(self.value.bytes(), 0, self.params_at);
        self.value.piece(from, to)
    }

    /// The transport of `SIP/2.0/transport` (as written: `UDP`, `tcp`, `TLS`, `SCTP` …), or
    /// `None` when the via-parm does not start with three tokens joined by `/` followed by a
    /// sent-by.
    pub fn transport(&self) -> Option<T> {
        self.sent().map(|(t, _)| t)
    }

    /// The sent-by (`host[:port]`) as written, or `None` when the via-parm does not start with
    /// `protocol-name/version/transport` and white space before it.
    pub fn sent_by(&self) -> Option<T> {
        self.sent().map(|(_, s)| s)
    }

    fn sent(&self) -> Option<(T, T)> {
        let b = self.value.bytes();
        let (from, to) = trimmed(b, 0, self.params_at);
        // protocol-name SLASH protocol-version SLASH: two tokens, each followed by a slash
        // with optional white space around it
        let mut at = from;
        for _ in 0..2 {
            let token = at;
            while at < to && is_token(b[at]) {
                at += 1;
            }
            if at == token {
                return None;
            }
            at = skip_space(b, at, to);
            if b.get(at) != Some(&b'/') || at >= to {
                return None;
            }
            at = skip_space(b, at + 1, to);
        }
        let transport = at;
        while at < to && is_token(b[at]) {
            at += 1;
        }
        // LWS, then the sent-by (everything up to the parameters)
        if at == transport || at == to || !b[at].is_ascii_whitespace() {
            return None;
        }
        let (sent_by, sent_to) = trimmed(b, at, to);
        if sent_by == sent_to {
            return None;
        }
        Some((
            self.value.piece(transport, at),
            self.value.piece(sent_by, sent_to),
        ))
    }

    /// The via-params in order, `;` separators outside quotes.
    pub fn params(&self) -> ViaParams<T> {
        ViaParams {
            value: self.value,
            at: self.params_at,
            end: self.end,
        }
    }

    /// The first parameter called `name` (case-insensitive): `Some(None)` when it has no
    /// value, `Some(Some(value))` with a quoted value's quotes taken off.
    pub fn param(&self, name: &str) -> Option<Option<T>> {
        self.params()
            .find(|p| p.name.bytes().eq_ignore_ascii_case(name.as_bytes()))
            .map(|p| p.value)
    }

    /// The `branch` parameter's value (RFC 3261 §8.1.1.7); an empty piece for a `branch`
    /// without a value.
    pub fn branch(&self) -> Option<T> {
        self.param("branch")
            .map(|v| v.unwrap_or(self.value.piece(0, 0)))
    }

    /// The via-parm, parameters included, as written.
    pub fn text(&self) -> T {
        self.value.piece(0, self.end)
    }

    /// What follows the via-parm in the value: from its comma on (the further via-parms of
    /// the same line), empty when it is the only one.
    pub fn rest(&self) -> T {
        self.value.piece(self.end, self.value.bytes().len())
    }
}

/// One via-param: `;name[=value]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViaParam<T> {
    /// The name as written, without white space.
    pub name: T,
    /// The value without white space and, when quoted, without its quotes (escapes are left
    /// as written); `None` without `=`.
    pub value: Option<T>,
    /// The parameter as written, its leading `;` included: for copying it elsewhere.
    pub raw: T,
}

/// The via-params of a [`ViaParm`], in order.
#[derive(Clone, Debug)]
pub struct ViaParams<T> {
    value: T,
    /// At a `;` (or `end`).
    at: usize,
    end: usize,
}

impl<'a, T: ViaText<'a>> Iterator for ViaParams<T> {
    type Item = ViaParam<T>;

    fn next(&mut self) -> Option<ViaParam<T>> {
        if self.at >= self.end {
            return None;
        }
        let b = self.value.bytes();
        let start = self.at;
        let mut quoted = false;
        let mut eq = None;
        let mut i = start + 1;
        while i < self.end {
            match b[i] {
                b'"' => quoted = !quoted,
                b'\\' if quoted => i += 1,
                b'=' if !quoted && eq.is_none() => eq = Some(i),
                b';' if !quoted => break,
                _ => {}
            }
            i += 1;
        }
        let stop = i.min(self.end);
        self.at = stop;
        let (name, value) = match eq {
            Some(eq) => {
                let (n0, n1) = trimmed(b, start + 1, eq);
                let (mut v0, mut v1) = trimmed(b, eq + 1, stop);
                if v1 - v0 >= 2 && b[v0] == b'"' && b[v1 - 1] == b'"' {
                    v0 += 1;
                    v1 -= 1;
                }
                (self.value.piece(n0, n1), Some(self.value.piece(v0, v1)))
            }
            None => {
                let (n0, n1) = trimmed(b, start + 1, stop);
                (self.value.piece(n0, n1), None)
            }
        };
        Some(ViaParam {
            name,
            value,
            raw: self.value.piece(start, stop),
        })
    }
}

/// RFC 3261 §25.1 `token` characters.
fn is_token(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&c)
}

fn skip_space(b: &[u8], mut at: usize, to: usize) -> usize {
    while at < to && b[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// `from..to` without the white space at either end.
fn trimmed(b: &[u8], from: usize, to: usize) -> (usize, usize) {
    let from = skip_space(b, from, to);
    let mut to = to;
    while to > from && b[to - 1].is_ascii_whitespace() {
        to -= 1;
    }
    (from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn top(v: &str) -> ViaParm<&str> {
        ViaParm::top(v).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    #[test]
    fn sent_protocol_and_sent_by_per_rfc3261() {
        let v = top("SIP/2.0/UDP pc33.atlanta.com;branch=z9hG4bK776asdhds");
        assert_eq!(
            (v.transport(), v.sent_by()),
            (Some("UDP"), Some("pc33.atlanta.com"))
        );
        // SLASH = SWS "/" SWS, LWS may be a fold: RFC 4475 §3.1.1.1 (wsinv)'s Via
        let v = top("SIP  /   2.0\r\n /UDP\r\n    192.0.2.2;branch=390skdjuw");
        assert_eq!(
            (v.transport(), v.sent_by(), v.branch()),
            (Some("UDP"), Some("192.0.2.2"), Some("390skdjuw"))
        );
        let v = top("SIP / 2.0 / TCP  [2001:db8::9]:5061 ; branch = z9hG4bK1");
        assert_eq!(
            (v.transport(), v.sent_by(), v.branch()),
            (Some("TCP"), Some("[2001:db8::9]:5061"), Some("z9hG4bK1"))
        );
        for bad in [
            "",
            "SIP/2.0/UDP",
            "SIP/2.0/UDP ;branch=x",
            "SIP/2.0 h",
            "//UDP h",
            "SIP/2.0/ h",
            "SIP/2.0/UDPh",
        ] {
            let v = top(bad);
            assert_eq!((v.transport(), v.sent_by()), (None, None), "{bad:?}");
        }
    }

    #[test]
    fn quoted_commas_and_semicolons_stay_inside_their_parameter() {
        // RFC 7339 §9: oc-algo = "oc-algo" EQUAL DQUOTE algo-list *(COMMA algo-list) DQUOTE
        let v = top(
            "SIP/2.0/UDP h;oc-algo=\"loss,rate\";x=\"a;b\";branch=z9hG4bKq, SIP/2.0/UDP g;branch=z9hG4bKg",
        );
        let names: Vec<_> = v.params().map(|p| (p.name, p.value)).collect();
        assert_eq!(
            names,
            [
                ("oc-algo", Some("loss,rate")),
                ("x", Some("a;b")),
                ("branch", Some("z9hG4bKq"))
            ]
        );
        assert_eq!(v.rest(), ", SIP/2.0/UDP g;branch=z9hG4bKg");
        assert_eq!(
            v.text(),
            "SIP/2.0/UDP h;oc-algo=\"loss,rate\";x=\"a;b\";branch=z9hG4bKq"
        );
        // an escaped quote does not close the string
        let v = top("SIP/2.0/UDP h;x=\"a\\\",b\";branch=z9hG4bKe");
        assert_eq!(v.branch(), Some("z9hG4bKe"));
        assert_eq!(
            ViaParm::top("SIP/2.0/UDP h;x=\"open;branch=z9hG4bKx"),
            Err(ViaError::UnclosedQuote)
        );
    }

    #[test]
    fn the_branch_is_the_top_via_parms_only() {
        // a branch in a later via-parm belongs to another hop
        assert_eq!(
            top("SIP/2.0/UDP h;rport, SIP/2.0/UDP g;branch=z9hG4bKg").branch(),
            None
        );
        // names are case-insensitive; the first of two counts; a bare name is an empty value
        assert_eq!(
            top("SIP/2.0/UDP h;BRANCH=z9hG4bK1;branch=z9hG4bK2").branch(),
            Some("z9hG4bK1")
        );
        assert_eq!(top("SIP/2.0/UDP h;branch").branch(), Some(""));
        assert_eq!(top("SIP/2.0/UDP h;branch").param("branch"), Some(None));
    }

    #[test]
    fn raw_parameters_rebuild_the_via_parm() {
        for v in [
            "SIP/2.0/UDP h ;a ; b=1;;c=\"x;y\" ",
            "SIP/2.0/UDP h",
            "SIP/2.0/UDP h;oc , SIP/2.0/UDP g",
        ] {
            let p = top(v);
            let rebuilt: String = std::iter::once(&v[..v.find(';').unwrap_or(p.text().len())])
                .chain(p.params().map(|p| p.raw))
                .collect();
            assert_eq!(rebuilt, p.text(), "{v:?}");
        }
    }

    #[test]
    fn bytes_and_text_read_alike() {
        let v = "SIP/2.0/UDP h:5;branch=z9hG4bKb;oc=20";
        let (s, b) = (top(v), ViaParm::top(v.as_bytes()).expect("balanced"));
        assert_eq!(b.branch(), s.branch().map(str::as_bytes));
        assert_eq!(b.sent_by(), s.sent_by().map(str::as_bytes));
        assert_eq!(b.param("oc"), Some(Some(&b"20"[..])));
    }
}
