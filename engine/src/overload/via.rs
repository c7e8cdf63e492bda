//! The four overload-control Via parameters (RFC 7339 §4, ABNF in §9; RFC 7415 §5 adds
//! `"rate"`): reading them from a Via header value, and writing them.
//!
//! ```text
//! via-params  =/ oc / oc-validity / oc-seq / oc-algo
//! oc          = "oc" [EQUAL oc-num]
//! oc-num      = 1*DIGIT
//! oc-validity = "oc-validity" [EQUAL delta-ms]
//! oc-seq      = "oc-seq" EQUAL 1*12DIGIT "." 1*5DIGIT
//! oc-algo     = "oc-algo" EQUAL DQUOTE algo-list *(COMMA algo-list) DQUOTE
//! ```
//!
//! Everything here works on one `via-parm` (`SIP/2.0/UDP host:port;param;param=value`): the
//! topmost one of a header line that holds several, as [`crate::sip::via`] reads it (a comma
//! outside quotes ends it; the commas inside `oc-algo="loss,rate"` do not; parameter names are
//! case-insensitive). Nothing allocates but what [`Feedback::write_via`] writes.

use std::fmt::{self, Write as _};

use crate::sip::via::ViaParm;

use super::{Algorithm, Algorithms, OcError, Seq};

/// The parameters an overload-control client adds to the Via it inserts into every request
/// (RFC 7339 §4.1: "A SIP client MUST add an "oc" parameter to the topmost Via header it
/// inserts into every SIP request ... There MUST NOT be a value"; §4.2: "MUST insert at least
/// the token "loss""). `algorithms` must contain [`Algorithm::Loss`]; the order is the
/// client's preference.
pub fn request_params(algorithms: Algorithms) -> &'static str {
    match algorithms {
        Algorithms::RateThenLoss => ";oc;oc-algo=\"rate,loss\"",
        Algorithms::LossThenRate => ";oc;oc-algo=\"loss,rate\"",
        Algorithms::Loss | Algorithms::Rate => ";oc;oc-algo=\"loss\"",
    }
}

fn is_oc_param(name: &str) -> bool {
    ["oc", "oc-algo", "oc-validity", "oc-seq"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// Which overload-control parameters [`strip`] removes from Via headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strip {
    /// `oc`, `oc-validity` and `oc-seq`, from the Via headers of a response below the topmost
    /// (RFC 7339 §5.4: "A SIP client SHOULD remove the "oc", "oc-validity", and "oc-seq"
    /// parameters from all Via headers of a response received, except for the topmost Via
    /// header. This prevents overload control parameters that were accidentally or
    /// maliciously inserted into Via headers by a downstream SIP server from traveling
    /// upstream").
    Response,
    /// All four, from the Via a client inserted into a request, before a proxy forwards it
    /// (§5.6: "a SIP proxy SHOULD strip the overload control parameters inserted by the client
    /// before proxying the request further downstream").
    Request,
}

impl Strip {
    fn removes(self, name: &str) -> bool {
        match self {
            Strip::Request => is_oc_param(name),
            Strip::Response => ["oc", "oc-validity", "oc-seq"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n)),
        }
    }
}

/// Writes the Via header value `via` (one via-parm or several, comma-separated) to `out`
/// without the overload-control parameters `which` names, every via-parm of it; returns
/// whether there were any (when not, nothing is written: the value can go as it came).
/// Other parameters stay as written, in order; the via-parms are joined by `", "`. A via-parm
/// that leaves a quoted string open (where its parameters end cannot be known) is refused,
/// with nothing written.
pub fn strip(via: &str, which: Strip, out: &mut String) -> Result<bool, OcError> {
    let start = out.len();
    let mut removed = false;
    let mut rest = via;
    loop {
        let Ok(top) = ViaParm::top(rest) else {
            out.truncate(start);
            return Err(OcError::BadValue {
                param: "Via",
                value: clip(via),
            });
        };
        if out.len() > start {
            out.push_str(", ");
        }
        out.push_str(top.head());
        for p in top.params() {
            if which.removes(p.name) {
                removed = true;
            } else {
                out.push_str(p.raw.trim_end());
            }
        }
        match top.rest().strip_prefix(',') {
            Some(next) if !next.trim().is_empty() => rest = next,
            _ => break,
        }
    }
    if !removed {
        out.truncate(start);
    }
    Ok(removed)
}

/// What a client offered in the Via of a request (RFC 7339 §5.1), as a server reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The algorithms the client listed that this implementation knows (`loss`, `rate`), in the
    /// client's order of preference.
    pub algorithms: Algorithms,
}

impl Offer {
    /// The client's offer in the top via-parm of a request's Via value, or `None` when it has
    /// no `oc` parameter (a client that does not support overload control, RFC 7339 §5.10.2)
    /// or lists no algorithm this implementation knows, or its via-parm leaves a quoted string
    /// open (malformed). An `oc` without `oc-algo` offers
    /// `loss` (§4.2: "with a default value of "loss""). A value on the request's `oc` (which
    /// "MUST NOT" be there, §4.1) is ignored.
    pub fn parse(via: &str) -> Option<Offer> {
        let top = ViaParm::top(via).ok()?;
        let mut oc = false;
        let mut algos: Option<&str> = None;
        for p in top.params() {
            if p.name.eq_ignore_ascii_case("oc") {
                oc = true;
            } else if p.name.eq_ignore_ascii_case("oc-algo") {
                algos = p.value;
            }
        }
        if !oc {
            return None;
        }
        let Some(list) = algos else {
            return Some(Offer {
                algorithms: Algorithms::Loss,
            });
        };
        let mut loss_at = None;
        let mut rate_at = None;
        for (i, token) in list.split(',').map(str::trim).enumerate() {
            if token.eq_ignore_ascii_case("loss") && loss_at.is_none() {
                loss_at = Some(i);
            } else if token.eq_ignore_ascii_case("rate") && rate_at.is_none() {
                rate_at = Some(i);
            }
        }
        Some(Offer {
            algorithms: Algorithms::from_positions(loss_at, rate_at)?,
        })
    }
}

/// The overload-control values a server put into the top Via of a response (RFC 7339 §5.2),
/// as a client reads them, or as a server writes them ([`Feedback::write_via`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feedback {
    /// The `oc` value: a percentage to shed (loss, 0–100) or a rate in requests/s (rate); 0
    /// when `validity_ms` is 0 (RFC 7339 §5.7: "the client SHOULD disregard the value in the
    /// "oc" parameter").
    pub oc: u64,
    /// The algorithm the server selected (a single token), or `None` when the response names
    /// none: the selection in force stays (RFC 7339 §4.2: "the selection stays in effect until
    /// the algorithm is changed by the server"), and is loss when there was none (§4.2's
    /// default).
    pub algorithm: Option<Algorithm>,
    /// `oc-validity` in milliseconds (default 500; 0 = no overload control in effect).
    pub validity_ms: u64,
    /// `oc-seq`, when present.
    pub seq: Option<Seq>,
}

/// The largest `oc-validity` taken as given; longer ones are cut to this (a day).
pub const MAX_VALIDITY_MS: u64 = 86_400_000;

impl Feedback {
    /// The default `oc-validity` (RFC 7339 §4.3: "The default value of the "oc-validity"
    /// parameter is 500 (milliseconds)").
    pub const DEFAULT_VALIDITY_MS: u64 = 500;

    /// Reads the overload-control parameters of the top via-parm of a response's Via value.
    ///
    /// - `Ok(None)`: the server gave no feedback: no `oc` parameter, or one without a value
    ///   (RFC 7339 §6: "Had P2 not supported overload control, it would have left the "oc" and
    ///   "oc-algo" parameters unchanged"). A non-zero `oc-validity` without an `oc` value is
    ///   discarded (§4.3: "A SIP client MUST discard a non-zero value of the "oc-validity"
    ///   parameter if the client receives it in a response without the corresponding "oc"
    ///   parameter").
    /// - `Ok(Some(_))`: the values; a missing `oc-validity` is 500 (§4.3), a missing `oc-algo`
    ///   is `None` (the selection in force stays, §4.2), a missing `oc-seq` is `None` (the
    ///   server broke §4.4's MUST; such values apply only while no ordered ones are in force,
    ///   see [`super::client::Client::apply`]). With `oc-validity=0` the `oc` value is
    ///   disregarded and read as 0, whatever it is (§5.7; RFC 7415 §4: ""oc" could be any value
    ///   as "oc" is ignored when "oc-validity=0"").
    /// - `Err`: a via-parm that leaves a quoted string open, or a value that breaks the
    ///   grammar or the ranges: an `oc` that is not `1*DIGIT`, a loss percentage above 100
    ///   while control is in effect (§7.1: "This value MUST be in the range of [0, 100]"), more
    ///   than one algorithm (§4.2: the server "MUST return the single selected algorithm"), an
    ///   algorithm this implementation does not know, a bad `oc-validity` or `oc-seq`, or a
    ///   parameter given twice. Numbers of any length are read (`1*DIGIT` has no bound): rate
    ///   values above [`super::MAX_RATE`] are cut to it, validities above [`MAX_VALIDITY_MS`]
    ///   to it.
    ///
    /// Read beyond the grammar, because they are unambiguous and servers send them: an
    /// `oc-algo` token without quotes (`oc-algo=loss`), an `oc-seq` without a fraction
    /// (`oc-seq=17`, read as `17.0`), and letter case in parameter names and tokens.
    pub fn parse(via: &str) -> Result<Option<Feedback>, OcError> {
        let top = ViaParm::top(via).map_err(|_| OcError::BadValue {
            param: "Via",
            value: clip(via),
        })?;
        let mut oc: Option<Option<&str>> = None;
        let mut algo: Option<&str> = None;
        let mut validity: Option<&str> = None;
        let mut seq: Option<&str> = None;
        let mut twice = None;
        for p in top.params() {
            let slot = if p.name.eq_ignore_ascii_case("oc") {
                if oc.is_some() {
                    twice = twice.or(Some("oc"));
                }
                oc = Some(p.value);
                continue;
            } else if p.name.eq_ignore_ascii_case("oc-algo") {
                (&mut algo, "oc-algo")
            } else if p.name.eq_ignore_ascii_case("oc-validity") {
                (&mut validity, "oc-validity")
            } else if p.name.eq_ignore_ascii_case("oc-seq") {
                (&mut seq, "oc-seq")
            } else {
                continue;
            };
            if slot.0.is_some() {
                twice = twice.or(Some(slot.1));
            }
            *slot.0 = Some(p.value.unwrap_or(""));
        }
        // Without an oc value there is no feedback, whatever else the via-parm holds.
        let Some(Some(oc_text)) = oc else {
            return Ok(None);
        };
        if let Some(name) = twice {
            return Err(OcError::Duplicate(name));
        }
        let oc = saturating_digits(oc_text).ok_or_else(|| OcError::BadValue {
            param: "oc",
            value: clip(oc_text),
        })?;
        let algorithm = match algo {
            None => None,
            Some(a) => {
                let a = a.trim();
                if a.contains(',') {
                    return Err(OcError::SeveralAlgorithms);
                }
                Some(Algorithm::parse(a).ok_or_else(|| OcError::UnknownAlgorithm(clip(a)))?)
            }
        };
        let validity_ms = match validity {
            None | Some("") => Self::DEFAULT_VALIDITY_MS,
            Some(v) => saturating_digits(v)
                .ok_or_else(|| OcError::BadValue {
                    param: "oc-validity",
                    value: clip(v),
                })?
                .min(MAX_VALIDITY_MS),
        };
        let seq = match seq {
            None => None,
            Some(s) => Some(Seq::parse(s).ok_or_else(|| OcError::BadValue {
                param: "oc-seq",
                value: clip(s),
            })?),
        };
        let oc = match algorithm {
            _ if validity_ms == 0 => 0,
            Some(Algorithm::Rate) => oc.min(super::MAX_RATE),
            // Loss, named or not: a percentage whichever algorithm the client has in force,
            // which only the client knows (it cuts a rate to MAX_RATE itself).
            _ if oc > 100 && algorithm.is_some() => return Err(OcError::LossAbove100(oc)),
            _ => oc.min(super::MAX_RATE),
        };
        Ok(Some(Feedback {
            oc,
            algorithm,
            validity_ms,
            seq,
        }))
    }

    /// Writes `via` (a request's via-parm as the server received it) with this feedback in
    /// place of the client's `oc` / `oc-algo` and any earlier `oc-validity` / `oc-seq`
    /// (RFC 7339 §5.2: the server provides "a value for the "oc" parameter to the topmost Via
    /// header field of a SIP response, that is, the Via header added by the client"). Other
    /// parameters and any further via-parms of the same line are kept as they were. An empty
    /// via-parm is no client's Via, a via-parm
    /// that leaves a quoted string open cannot carry parameters after it, and a server names
    /// the algorithm (§4.2: it "MUST return the single selected algorithm"): either refused,
    /// with nothing written.
    pub fn write_via(&self, via: &str, out: &mut String) -> Result<(), OcError> {
        if self.algorithm.is_none() {
            return Err(OcError::Config {
                field: "algorithm",
                expected: "the selected algorithm (RFC 7339 §4.2)",
            });
        }
        let top = ViaParm::top(via)
            .ok()
            .filter(|top| !top.head().trim().is_empty())
            .ok_or_else(|| OcError::BadValue {
                param: "Via",
                value: clip(via),
            })?;
        out.push_str(top.head());
        for p in top.params() {
            if !is_oc_param(p.name) {
                out.push_str(p.raw.trim_end());
            }
        }
        let _ = write!(out, "{self}");
        out.push_str(top.rest());
        Ok(())
    }
}

impl fmt::Display for Feedback {
    /// `;oc=N;oc-algo="loss";oc-validity=V[;oc-seq=S]`, as a server appends it (no `oc-algo`
    /// when `algorithm` is `None`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, ";oc={}", self.oc)?;
        if let Some(a) = self.algorithm {
            write!(f, ";oc-algo=\"{}\"", a.as_str())?;
        }
        write!(f, ";oc-validity={}", self.validity_ms)?;
        if let Some(seq) = self.seq {
            write!(f, ";oc-seq={seq}")?;
        }
        Ok(())
    }
}

/// `1*DIGIT` of at most `max` digits as a number, or `None`.
pub(super) fn digits(s: &str, max: usize) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || s.len() > max || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `1*DIGIT` of any length as a number, saturating at `u64::MAX`, or `None`.
fn saturating_digits(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// At most 40 bytes of a bad value, for an error message.
fn clip(s: &str) -> String {
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7339_section6_example_response_reads() {
        // RFC 7339 §6: "It sends the following SIP message indicating that P1 should decrease
        // the messages arriving to P2 by 20% for 0.5 seconds."
        let via = "SIP/2.0/TLS p1.example.net;\r\n branch=z9hG4bK2d4790.3;received=192.0.2.111;\r\n oc=20;oc-algo=\"loss\";oc-validity=500;\r\n oc-seq=1282321615.782";
        let f = Feedback::parse(via)
            .expect("test input")
            .expect("test input");
        assert_eq!(f.oc, 20);
        assert_eq!(f.algorithm, Some(Algorithm::Loss));
        assert_eq!(f.validity_ms, 500);
        assert_eq!(f.seq, Seq::parse("1282321615.782"));
    }

    #[test]
    fn unfilled_oc_is_no_feedback() {
        // RFC 7339 §6: a server without support leaves "oc" and "oc-algo" unchanged.
        let via = "SIP/2.0/UDP p1.example.net;branch=z9hG4bK1;oc;oc-algo=\"loss,rate\"";
        assert_eq!(Feedback::parse(via), Ok(None));
        assert_eq!(
            Feedback::parse("SIP/2.0/UDP p1;branch=z9hG4bK1;oc-validity=500"),
            Ok(None)
        );
    }

    #[test]
    fn defaults_and_errors() {
        let f = Feedback::parse("SIP/2.0/UDP h;OC=10")
            .expect("test input")
            .expect("test input");
        // §4.3: "behave as if it had received "oc-validity=500""; no oc-algo: the selection
        // in force stays (§4.2), which only the client knows.
        assert_eq!(
            (f.oc, f.algorithm, f.validity_ms, f.seq),
            (10, None, 500, None)
        );
        assert_eq!(
            Feedback::parse("SIP/2.0/UDP h;oc=101;oc-algo=\"loss\""),
            Err(OcError::LossAbove100(101))
        );
        assert_eq!(
            Feedback::parse("SIP/2.0/UDP h;oc=5;oc-algo=\"loss,rate\""),
            Err(OcError::SeveralAlgorithms)
        );
        assert!(matches!(
            Feedback::parse("SIP/2.0/UDP h;oc=5;oc-algo=\"A\""),
            Err(OcError::UnknownAlgorithm(_))
        ));
        assert!(matches!(
            Feedback::parse("SIP/2.0/UDP h;oc=-5"),
            Err(OcError::BadValue { param: "oc", .. })
        ));
        assert!(matches!(
            Feedback::parse("SIP/2.0/UDP h;oc=5;oc-seq=1.123456"),
            Err(OcError::BadValue {
                param: "oc-seq",
                ..
            })
        ));
        assert_eq!(
            Feedback::parse("SIP/2.0/UDP h;oc=5;oc=6"),
            Err(OcError::Duplicate("oc"))
        );
        assert_eq!(
            Feedback::parse("SIP/2.0/UDP h;oc=5;oc-algo=\"loss\";OC-ALGO=\"loss\""),
            Err(OcError::Duplicate("oc-algo"))
        );
        // No oc value, no feedback: the rest is not looked at (a client's offer, say).
        assert_eq!(
            Feedback::parse("SIP/2.0/UDP h;oc-algo=\"loss\";oc-algo=\"loss\""),
            Ok(None)
        );
        // a quote left open: where the parameters end cannot be known
        assert!(matches!(
            Feedback::parse("SIP/2.0/UDP h;oc=5;x=\"open"),
            Err(OcError::BadValue { param: "Via", .. })
        ));
        let f = Feedback::parse("SIP/2.0/UDP h;oc=99999999;oc-algo=rate;oc-validity=2000")
            .expect("test input")
            .expect("test input");
        assert_eq!(
            (f.oc, f.algorithm, f.validity_ms),
            (super::super::MAX_RATE, Some(Algorithm::Rate), 2000)
        );
    }

    #[test]
    fn validity_zero_disregards_any_oc_value() {
        // RFC 7339 §5.7: "when the value of the "oc-validity" parameter is 0, the client
        // SHOULD disregard the value in the "oc" parameter"; RFC 7415 §4: ""oc" could be any
        // value as "oc" is ignored when "oc-validity=0"".
        for via in [
            "SIP/2.0/UDP h;oc=150;oc-algo=\"loss\";oc-validity=0;oc-seq=2.0",
            "SIP/2.0/UDP h;oc=1234567890123456789012345;oc-algo=\"rate\";oc-validity=0;oc-seq=2.0",
            "SIP/2.0/UDP h;oc=1234567890123456789012345;oc-validity=0;oc-seq=2.0",
        ] {
            let f = Feedback::parse(via).expect(via).expect(via);
            assert_eq!((f.oc, f.validity_ms), (0, 0), "{via}");
        }
    }

    #[test]
    fn numbers_of_any_length_are_in_the_grammar() {
        // §9: oc-num = 1*DIGIT, delta-ms (RFC 3261) = 1*DIGIT: no bound on the length.
        let f = Feedback::parse(
            "SIP/2.0/UDP h;oc=0000000000000000000000001;oc-algo=\"loss\";oc-validity=00000000000000000000000500",
        )
        .expect("test input")
        .expect("test input");
        assert_eq!((f.oc, f.validity_ms), (1, 500));
        let f = Feedback::parse(
            "SIP/2.0/UDP h;oc=1234567890123456789012345;oc-algo=\"rate\";oc-validity=99999999999999999999999",
        )
        .expect("test input")
        .expect("test input");
        assert_eq!(
            (f.oc, f.validity_ms),
            (super::super::MAX_RATE, MAX_VALIDITY_MS)
        );
        assert_eq!(
            Feedback::parse("SIP/2.0/UDP h;oc=1234567890123456789012345;oc-algo=\"loss\""),
            Err(OcError::LossAbove100(u64::MAX))
        );
    }

    #[test]
    fn only_the_first_via_parm_counts() {
        let via = "SIP/2.0/UDP a;branch=z9hG4bK1;oc-algo=\"loss,rate\";oc, SIP/2.0/UDP b;oc=50";
        assert_eq!(Feedback::parse(via), Ok(None));
        let offer = Offer::parse(via).expect("test input");
        assert_eq!(offer.algorithms, Algorithms::LossThenRate);
    }

    #[test]
    fn offers() {
        assert_eq!(Offer::parse("SIP/2.0/UDP a;branch=z9hG4bK1"), None);
        assert_eq!(
            Offer::parse("SIP/2.0/UDP a;oc").map(|o| o.algorithms),
            Some(Algorithms::Loss)
        );
        // RFC 7339 §6's client offers "loss" and an algorithm "A" this implementation does not
        // know: it is offering loss.
        assert_eq!(
            Offer::parse("SIP/2.0/TLS p1.example.net;branch=z9hG4bK2d4790.1;oc;oc-algo=\"loss,A\"")
                .map(|o| o.algorithms),
            Some(Algorithms::Loss)
        );
        let o = Offer::parse("SIP/2.0/UDP a;oc;oc-algo=\"rate,loss\"").expect("test input");
        assert_eq!(o.algorithms, Algorithms::RateThenLoss);
        assert_eq!(Offer::parse("SIP/2.0/UDP a;oc;oc-algo=\"A\""), None);
    }

    #[test]
    fn a_server_rewrites_the_clients_via() {
        // RFC 7415 §4's exchange: the request's Via, then the response's.
        let request = "SIP/2.0/TLS p1.example.net;branch=z9hG4bK2d4790.1;received=192.0.2.111;oc;oc-algo=\"loss,rate\"";
        let f = Feedback {
            oc: 150,
            algorithm: Some(Algorithm::Rate),
            validity_ms: 1000,
            seq: Seq::parse("1282321615.782"),
        };
        let mut out = String::new();
        f.write_via(request, &mut out).expect("well-formed");
        assert_eq!(
            out,
            "SIP/2.0/TLS p1.example.net;branch=z9hG4bK2d4790.1;received=192.0.2.111;oc=150;oc-algo=\"rate\";oc-validity=1000;oc-seq=1282321615.78200"
        );
        assert_eq!(Feedback::parse(&out), Ok(Some(f)));
        // §4.2: the server "MUST return the single selected algorithm".
        let mut out = String::new();
        let unnamed = Feedback {
            algorithm: None,
            ..f
        };
        assert!(unnamed.write_via(request, &mut out).is_err());
        assert!(out.is_empty());
        // An empty Via is no client's: nothing to put the values on.
        for empty in ["", "  ", ";oc", ", SIP/2.0/UDP b"] {
            assert!(f.write_via(empty, &mut out).is_err(), "{empty:?}");
            assert!(out.is_empty());
        }
        // Further via-parms on the same line stay.
        let mut out = String::new();
        f.write_via("SIP/2.0/UDP a;oc, SIP/2.0/UDP b;branch=z9hG4bK2", &mut out)
            .expect("well-formed");
        assert!(
            out.ends_with("oc-seq=1282321615.78200, SIP/2.0/UDP b;branch=z9hG4bK2"),
            "{out}"
        );
    }

    #[test]
    fn what_a_downstream_server_inserted_does_not_travel_upstream() {
        // RFC 7339 §5.4: "remove the "oc", "oc-validity", and "oc-seq" parameters from all Via
        // headers of a response received, except for the topmost"; "oc-algo" is not named.
        let mut out = String::new();
        let lower = "SIP/2.0/UDP a:5060;branch=z9hG4bK1;OC=90;oc-validity=60000;oc-algo=\"loss\";oc-seq=9.0;received=192.0.2.1 , SIP/2.0/TCP b;oc=5;x=\"q;oc=1\"";
        assert_eq!(strip(lower, Strip::Response, &mut out), Ok(true));
        assert_eq!(
            out,
            "SIP/2.0/UDP a:5060;branch=z9hG4bK1;oc-algo=\"loss\";received=192.0.2.1, SIP/2.0/TCP b;x=\"q;oc=1\""
        );
        // §5.6: the client's own parameters, oc-algo included, before forwarding a request.
        out.clear();
        let offer = "SIP/2.0/UDP c;branch=z9hG4bK2;oc;oc-algo=\"loss,rate\";rport";
        assert_eq!(strip(offer, Strip::Request, &mut out), Ok(true));
        assert_eq!(out, "SIP/2.0/UDP c;branch=z9hG4bK2;rport");
        // Nothing to remove: nothing written.
        out.clear();
        assert_eq!(
            strip(
                "SIP/2.0/UDP c;branch=z9hG4bK3;oc-algo=\"loss\"",
                Strip::Response,
                &mut out
            ),
            Ok(false)
        );
        assert!(out.is_empty());
        assert!(strip("SIP/2.0/UDP c;oc=5;x=\"open", Strip::Response, &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn request_params_always_offer_loss() {
        assert_eq!(request_params(Algorithms::Loss), ";oc;oc-algo=\"loss\"");
        assert_eq!(
            request_params(Algorithms::LossThenRate),
            ";oc;oc-algo=\"loss,rate\""
        );
        for p in [Algorithms::Loss, Algorithms::LossThenRate] {
            let offer = Offer::parse(&format!(
                "SIP/2.0/UDP a;branch=z9hG4bK1{}",
                request_params(p)
            ))
            .expect("test input");
            assert_eq!(offer.algorithms, p);
        }
    }
}
