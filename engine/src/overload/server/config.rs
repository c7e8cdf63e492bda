//! How a [`super::Server`] is configured: the law's periods and targets, the algorithm it
//! prefers, how many clients it remembers.

use std::time::Duration;

use crate::overload::{Algorithm, OcError};

/// Server settings.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The algorithm chosen when a client offers both. Default rate (it tells a client a
    /// number it can enforce exactly, RFC 7415 §3.4).
    pub preference: Algorithm,
    /// `oc-validity` sent under overload (in whole milliseconds, rounded down). Default 500 ms
    /// (RFC 7339 §4.3's default). Must be more than a period.
    pub validity: Duration,
    /// How often the law runs. Default 100 ms. `oc-seq` counts periods of at least 10 ms on
    /// the caller's clock: servers that answer the same client (the workers of one appliance)
    /// use the same period and clock, so their values order by time at that client.
    pub period: Duration,
    /// `D`: the queueing delay of new requests the law aims at. Default 50 ms (a tenth of
    /// RFC 3261's T1, so INVITE clients do not retransmit).
    pub target_delay: Duration,
    /// `H`: the horizon over which excess backlog is drained. Default 500 ms.
    pub drain: Duration,
    /// Retransmissions' share of arriving requests above which the server is in overload.
    /// Default 0.05.
    pub retransmission_alarm: f64,
    /// A rate client that used this share of its rate is constrained. Default 0.95.
    pub busy: f64,
    /// A constrained rate client's demand is estimated at `seen·(1 + probe)`. Default 0.25.
    pub probe: f64,
    /// An unconstrained rate client's demand is estimated at `seen·(1 + headroom)`.
    /// Default 0.1.
    pub headroom: f64,
    /// The smallest rate told to a client, requests/s. Default 1.
    pub min_rate: u64,
    /// Weight of the newest period in the smoothed estimates (μ̂, demands), in (0, 1].
    /// Default 0.5.
    pub alpha: f64,
    /// Periods without need before control stops. Default 10.
    pub calm_periods: u32,
    /// How long an algorithm selection stays (RFC 7339 §5.8: "at least 3600 seconds").
    /// Default one hour.
    pub hold_algorithm: Duration,
    /// Clients tracked; the least recently seen is forgotten for a new one. Default 1024.
    pub max_clients: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            preference: Algorithm::Rate,
            validity: Duration::from_millis(500),
            period: Duration::from_millis(100),
            target_delay: Duration::from_millis(50),
            drain: Duration::from_millis(500),
            retransmission_alarm: 0.05,
            busy: 0.95,
            probe: 0.25,
            headroom: 0.1,
            min_rate: 1,
            alpha: 0.5,
            calm_periods: 10,
            hold_algorithm: Duration::from_secs(3600),
            max_clients: 1024,
        }
    }
}

impl ServerConfig {
    /// Checks every field; the error names the first one out of range.
    pub fn check(&self) -> Result<(), OcError> {
        let bad = |field, expected| Err(OcError::Config { field, expected });
        let frac = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        if self.period < Duration::from_millis(1) || self.period > Duration::from_secs(10) {
            return bad("period", "between 1 ms and 10 s");
        }
        if self.validity <= self.period
            || self.validity > Duration::from_millis(crate::overload::via::MAX_VALIDITY_MS)
        {
            return bad("validity", "longer than a period and at most a day");
        }
        if self.target_delay.is_zero() {
            return bad("target_delay", "positive");
        }
        if self.drain < self.period {
            return bad("drain", "at least one period");
        }
        if !frac(self.retransmission_alarm) {
            return bad("retransmission_alarm", "between 0 and 1");
        }
        if !(self.busy.is_finite() && self.busy > 0.0 && self.busy <= 1.0) {
            return bad("busy", "in (0, 1]");
        }
        if !(self.probe.is_finite() && self.probe > 0.0 && self.probe <= 10.0) {
            return bad("probe", "in (0, 10]");
        }
        if !(self.headroom.is_finite() && (0.0..=10.0).contains(&self.headroom)) {
            return bad("headroom", "between 0 and 10");
        }
        if self.min_rate > crate::overload::MAX_RATE {
            return bad("min_rate", "at most MAX_RATE");
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0 && self.alpha <= 1.0) {
            return bad("alpha", "in (0, 1]");
        }
        if self.calm_periods == 0 {
            return bad("calm_periods", "at least 1");
        }
        if self.max_clients == 0 || self.max_clients > 1 << 20 {
            return bad("max_clients", "between 1 and 1,048,576");
        }
        Ok(())
    }
}
