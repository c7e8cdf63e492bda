//! Feedback overload control: RFC 7339 (loss-based) and RFC 7415 (rate-based), both ends.
//!
//! RFC 7200 filtering is decided in advance; this is the reactive complement (RFC 7339 §8:
//! "The overload control mechanism described in this document is reactive in nature"). An
//! overloaded server tells each upstream neighbour, hop by hop, in the top `Via` of its
//! responses, how much to send: a percentage to shed (`oc-algo="loss"`) or a rate in requests
//! per second (`oc-algo="rate"`), valid for `oc-validity` milliseconds, ordered by `oc-seq`.
//!
//! - [`via`]: the four Via parameters — what a client adds to its requests
//!   ([`via::request_params`]), what a server reads from them ([`via::Offer`]), what a client
//!   reads from responses and a server writes into them ([`via::Feedback`]).
//! - [`client`]: the client side, per next hop. Its state lives in 64-byte cells of atomics
//!   ([`client::HopCell`], no pointers, so a table of them can sit in memory several processes
//!   share) that every worker reads without locks; each worker keeps its own
//!   [`client::ClientShard`] (random numbers, the category mix, counters). The decision
//!   ([`client::ClientShard::decide`]) sits next to classification: no allocation, no lock,
//!   no system call, and a shared write only when a rate-controlled request is admitted.
//! - [`server`]: the server side. It counts what each upstream client sends, takes a load
//!   signal (the PRSM queue's delay and service, or an appliance's own occupancy figure),
//!   computes once per period how many new requests per second it can take, splits that over
//!   its clients (max-min fair over their estimated demand) and says what each client's
//!   responses carry; clients that do not take part get the same reduction as 503s from the
//!   server itself (RFC 7339 §5.10.2).
//!
//! Everything takes the time from the caller (`now_ns`, monotonic nanoseconds), so every
//! behaviour runs in simulated time.
//!
//! # Example
//! A client whose next hop answers `oc=50` with the loss algorithm, in simulated time: after
//! its first sample of the category mix (5 s) it sheds half of the new requests, all of them
//! in the reducible category (RFC 7339 §7.2 converts `oc` onto that category's share), and no
//! request of the category shed last.
//! ```
//! use loadctl::overload::Category;
//! use loadctl::overload::client::{Client, ClientConfig, ClientShard, OcVerdict, hop_key};
//!
//! let client = Client::new(ClientConfig::default(), 64)?; // one per proxy, Sync
//! let mut shard = ClientShard::new(&client, 0); // one per worker thread
//! let hop = client.hop(hop_key(b"192.0.2.7:5060"), 0)?;
//! let ms = 1_000_000; // now_ns counts nanoseconds
//! // A response from that hop; its top Via, as the server wrote it.
//! client.on_response(hop, ms,
//!     "SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1;oc=50;oc-algo=\"loss\";oc-validity=20000;oc-seq=1")?;
//! let mut shed = 0;
//! for k in 0..10_000u64 {
//!     let now = ms + k * ms; // a new INVITE every millisecond, for 10 s
//!     let verdict = shard.decide(&client, hop, now, Category::Reducible);
//!     if k >= 5_000 && matches!(verdict, OcVerdict::Shed(_)) {
//!         shed += 1;
//!     }
//! }
//! assert!((2_250..=2_750).contains(&shed), "{shed} of 5,000 shed"); // 50 % ± 5 %
//! assert!(matches!(shard.decide(&client, hop, 10_001 * ms, Category::Priority), OcVerdict::Forward));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod client;
pub mod server;
pub mod via;

use std::fmt;

/// The largest rate (requests/s) a rate-based `oc` is taken as; larger values are cut to it.
/// (2²⁰ − 1: the field of a [`client::HopCell`] that holds it.)
pub const MAX_RATE: u64 = (1 << 20) - 1;

/// An overload-control algorithm class (RFC 7339 §4.2 `oc-algo` tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `loss`: the `oc` value is the percentage of requests to shed (RFC 7339 §7).
    Loss,
    /// `rate`: the `oc` value is the most requests per second to send (RFC 7415).
    Rate,
}

impl Algorithm {
    /// The `oc-algo` token.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Loss => "loss",
            Algorithm::Rate => "rate",
        }
    }

    /// The algorithm a token names (case-insensitive), if this implementation knows it.
    pub fn parse(token: &str) -> Option<Algorithm> {
        if token.eq_ignore_ascii_case("loss") {
            Some(Algorithm::Loss)
        } else if token.eq_ignore_ascii_case("rate") {
            Some(Algorithm::Rate)
        } else {
            None
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The algorithms of an `oc-algo` list that this implementation knows, in the list's order of
/// preference: every list that names at least one of them is one of these four.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithms {
    /// `loss` alone (RFC 7339 §4.2's default when `oc-algo` is absent).
    Loss,
    /// `rate` alone (a client must also offer `loss`, §4.2; a server may meet such a list).
    Rate,
    /// `loss,rate`.
    LossThenRate,
    /// `rate,loss`.
    RateThenLoss,
}

impl Algorithms {
    /// Whether `a` is in the list.
    pub fn contains(self, a: Algorithm) -> bool {
        match a {
            Algorithm::Loss => self != Algorithms::Rate,
            Algorithm::Rate => self != Algorithms::Loss,
        }
    }

    /// The list's first algorithm.
    pub fn preferred(self) -> Algorithm {
        match self {
            Algorithms::Loss | Algorithms::LossThenRate => Algorithm::Loss,
            Algorithms::Rate | Algorithms::RateThenLoss => Algorithm::Rate,
        }
    }

    /// The list of `loss` and `rate` at these positions of an `oc-algo` list (a smaller
    /// position is preferred), or `None` when it names neither.
    pub fn from_positions(loss: Option<usize>, rate: Option<usize>) -> Option<Algorithms> {
        Some(match (loss, rate) {
            (Some(_), None) => Algorithms::Loss,
            (None, Some(_)) => Algorithms::Rate,
            (Some(l), Some(r)) if r < l => Algorithms::RateThenLoss,
            (Some(_), Some(_)) => Algorithms::LossThenRate,
            (None, None) => return None,
        })
    }
}

/// An `oc-seq` value (`1*12DIGIT "." 1*5DIGIT`) as one number: the integer part times 10⁵
/// plus the fraction scaled to five digits, so `1282321615.782` < `1282321615.7821` compare
/// as decimals do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq(pub u64);

impl Seq {
    /// Units of the fraction per integer step.
    pub const SCALE: u64 = 100_000;
    /// The largest value the grammar allows (12 nines, 5 nines).
    pub const MAX: Seq = Seq(999_999_999_999 * Self::SCALE + 99_999);

    /// Parses `1*12DIGIT "." 1*5DIGIT`. An integer without a fraction (`oc-seq=17`) is taken
    /// too (as `17.0`): some servers send one, and it is unambiguous.
    pub fn parse(s: &str) -> Option<Seq> {
        let s = s.trim();
        if !s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return None;
        }
        let (int, frac) = match s.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (s, None),
        };
        let int = via::digits(int, 12)?;
        let frac = match frac {
            None => 0,
            Some(f) => {
                let v = via::digits(f, 5)?;
                v * 10u64.pow(5 - f.len() as u32)
            }
        };
        Some(Seq(int * Self::SCALE + frac))
    }

    /// The sequence value for a time: seconds and 10-µs units of `now_ns` (RFC 7339 §4.4:
    /// "A timestamp can be used as a value of the "oc-seq" parameter"), within the grammar.
    pub fn from_ns(now_ns: u64) -> Seq {
        Seq((now_ns / 10_000).min(Self::MAX.0))
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:05}", self.0 / Self::SCALE, self.0 % Self::SCALE)
    }
}

/// How a request counts for overload control at a client (RFC 7339 §7.2's two categories).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// "requests that are candidates for reduction".
    Reducible,
    /// "requests that are not subject to reduction except when all messages in the first
    /// category have been rejected and further reduction is still needed" (§5.10.1: requests
    /// of existing sessions, emergency calls, prioritised Resource-Priority namespaces).
    Priority,
}

impl Category {
    /// The category of a request under the same local policy as load filtering: requests
    /// [`crate::runtime::Request::is_exempt`] lets through (in-dialog requests, emergency
    /// calls, listed Resource-Priority namespaces) are [`Category::Priority`], the rest
    /// [`Category::Reducible`]. `None` for ACK and CANCEL: they belong to a transaction
    /// already sent to that hop and are forwarded without asking.
    pub fn of(
        request: &crate::runtime::Request<'_>,
        exemptions: &crate::runtime::Exemptions,
    ) -> Option<Category> {
        if matches!(request.method, "ACK" | "CANCEL") {
            return None;
        }
        Some(match request.is_exempt(exemptions) {
            Some(_) => Category::Priority,
            None => Category::Reducible,
        })
    }
}

/// Why overload-control input was refused. State is never changed by input that is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OcError {
    /// A parameter value breaks RFC 7339 §9's grammar.
    BadValue {
        /// `oc`, `oc-validity` or `oc-seq`.
        param: &'static str,
        /// The value (at most 40 bytes of it).
        value: String,
    },
    /// A loss percentage above 100 (RFC 7339 §7.1: "This value MUST be in the range of [0,
    /// 100], inclusive").
    LossAbove100(u64),
    /// A response's `oc-algo` lists several algorithms (RFC 7339 §4.2: the server "MUST
    /// return the single selected algorithm").
    SeveralAlgorithms,
    /// A response selects an algorithm this client did not offer.
    UnknownAlgorithm(String),
    /// A parameter appears twice in one Via.
    Duplicate(&'static str),
    /// The hop table has no free cell for another next hop.
    TableFull {
        /// Cells in the table.
        capacity: usize,
    },
    /// A configuration value is out of range.
    Config {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
}

impl fmt::Display for OcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OcError::BadValue { param, value } => {
                write!(f, "bad {param} value {value:?} (RFC 7339 §9)")
            }
            OcError::LossAbove100(v) => write!(
                f,
                "loss-based oc={v} is above 100 (RFC 7339 §7.1: the value MUST be in [0, 100])"
            ),
            OcError::SeveralAlgorithms => f.write_str(
                "the response's oc-algo lists several algorithms; a server MUST return the single selected one (RFC 7339 §4.2)",
            ),
            OcError::UnknownAlgorithm(a) => {
                write!(f, "the response selects oc-algo {a:?}, which this client did not offer")
            }
            OcError::Duplicate(p) => write!(f, "the Via carries {p} twice"),
            OcError::TableFull { capacity } => {
                write!(f, "the overload-control hop table is full ({capacity} next hops)")
            }
            OcError::Config { field, expected } => {
                write!(f, "overload-control configuration: {field} must be {expected}")
            }
        }
    }
}

impl std::error::Error for OcError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_orders_as_decimals() {
        // RFC 7339 §4.4: "oc" values "generated ... at time t and t+1 MUST have an increasing
        // value in the "oc-seq" parameter"; §6's two values are ordered.
        let a = Seq::parse("1282321615.782").expect("test input");
        let b = Seq::parse("1282321892.439").expect("test input");
        assert!(a < b);
        assert!(
            Seq::parse("1.5").expect("test input") > Seq::parse("1.49999").expect("test input")
        );
        assert_eq!(Seq::parse("1.5"), Seq::parse("1.50000"));
        assert_eq!(Seq::parse("7"), Seq::parse("7.0"));
        assert_eq!(Seq::parse("1234567890123.1"), None, "13 integer digits");
        assert_eq!(Seq::parse("1.123456"), None, "6 fraction digits");
        assert_eq!(Seq::parse("1."), None);
        assert_eq!(Seq::parse(".5"), None);
        // No blank inside (the ABNF has none; it once reached a subtraction that overflowed).
        assert_eq!(Seq::parse("1. 12345"), None);
        assert_eq!(Seq::parse("1 .5"), None);
        assert_eq!(Seq::MAX.to_string(), "999999999999.99999");
        assert_eq!(Seq::from_ns(1_500_000_000).to_string(), "1.50000");
    }
}
