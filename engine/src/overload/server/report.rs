//! What a [`super::Server`] is told (load reports, each request's admission) and what it
//! reports (its status, each client's state).

use std::time::Duration;

use crate::overload::{Algorithm, Seq};

/// A load report (the [server](super) documentation says how each kind is used).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    /// The server's own queue (for PRSM, the primary queue), over the interval since the last
    /// report.
    Queue(QueueLoad),
    /// An appliance's own occupancy signal: `measured` against `target` (same unit, e.g. CPU
    /// utilisation 0.93 against 0.8), measured over the interval since the previous report
    /// (the law scales the rate admitted over that same interval).
    Occupancy {
        /// The measured occupancy.
        measured: f64,
        /// The occupancy to hold.
        target: f64,
    },
}

/// What the queue did over an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLoad {
    /// How long the oldest new request now waiting has waited (zero when none waits).
    pub delay: Duration,
    /// Requests served in the interval, retransmissions included.
    pub served: u64,
    /// Of those, retransmissions.
    pub served_retransmissions: u64,
    /// Time spent serving in the interval.
    pub busy: Duration,
}

/// What the server does with an arriving request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Process it.
    Admit,
    /// Answer 503 without Retry-After: a client that does not take part in overload control,
    /// while the server is in overload (RFC 7339 §5.10.2).
    Reject,
}

/// A client as the server sees it (statistics, RPCs).
#[derive(Clone, Debug, PartialEq)]
pub struct ClientReport {
    /// The client's key as given to [`Server::on_request`](super::Server::on_request) (its
    /// first [`CLIENT_KEY_BYTES`](super::CLIENT_KEY_BYTES) bytes); empty for the newcomers'
    /// aggregate.
    pub key: Vec<u8>,
    /// The algorithm selected for it; `None` for a client that does not take part.
    pub algorithm: Option<Algorithm>,
    /// Its estimated offered rate of new requests, per s.
    pub demand: f64,
    /// Its share of the target, per s.
    pub share: f64,
    /// The `oc` value its responses carry now (0 when not in overload).
    pub oc: u64,
    /// Requests of it the server rejected (while it did not take part, was a newcomer or was
    /// non-conforming).
    pub rejected: u64,
    /// A newcomer: first seen in overload and not yet a client of its own (its requests count
    /// to the newcomers' aggregate, the report with an empty key).
    pub newcomer: bool,
    /// A participant that sent more than it was told beyond the tolerance: treated as not
    /// taking part until it conforms (RFC 7339 §11).
    pub nonconforming: bool,
}

/// The server's state (statistics, RPCs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerStatus {
    /// Whether overload control is in effect.
    pub overloaded: bool,
    /// The target rate of new requests, per s (`λ*`).
    pub target: f64,
    /// The estimated service rate, per s (0 before one is measured).
    pub service_rate: f64,
    /// The last reported queueing delay.
    pub delay: Duration,
    /// Retransmissions' share of the requests that arrived in the last period.
    pub retransmission_share: f64,
    /// The current `oc-seq`.
    pub seq: Seq,
    /// Clients tracked (newcomers with a slot included).
    pub clients: usize,
}
