//! The chain: RFC 3261 clients → a transaction-stateful proxy → the FIFO or PRSM server, with
//! feedback overload control (RFC 7339 loss-based, RFC 7415 rate-based) between the proxy and
//! the server, or an RFC 7200 rate rule at the proxy, or nothing.
//!
//! - **Clients (UACs).** Each call's INVITE reaches the proxy at its arrival time. The proxy
//!   answers 100 Trying at once (RFC 3261 §16.2: a stateful proxy "MUST" send one when it
//!   will not answer within 200 ms; §16.7), so no client ever retransmits.
//! - **Proxy.** No capacity limit. For each new INVITE it asks the overload control (below);
//!   a shed call gets a 503 without Retry-After at once (counted as *shed*: a final answer,
//!   neither failed nor goodput). A forwarded call starts an INVITE client transaction
//!   towards the server (`ClientTimers`): Timer A re-sends it at 0.5, 1.5, 3.5, … s until a
//!   response from the server arrives; Timer B (32 s) gives up and the call *fails*.
//!   Retransmissions are the transaction layer's and are not asked.
//! - **Link.** Every message between proxy and server takes `link_delay` (1 ms) plus a
//!   uniform 0–`jitter` (0–1 ms), each way.
//! - **Server.** The `Station` of [`crate::des`] (μ messages/s, every message one slot,
//!   buffer B, tail drop, the engine's FIFO or PRSM [`loadctl::prsm::Scheduler`], the engine's
//!   [`loadctl::prsm::RetransmissionDetector`] classifying every arriving copy — under FIFO
//!   only for the counts the law needs). It answers a call when it finishes serving one of
//!   its copies.
//! - **Overload control** ([`Control`]): `none`; `static`, the RFC 7200 rate rule of
//!   [`crate::filter`] at the proxy (rate μ unless [`SimConfig::upstream_rate`] says
//!   otherwise, re-pushed `notify_delay` after each capacity change); `loss` and `rate`, the
//!   engine's [`loadctl::overload`]: the proxy is a [`Client`] with one next hop and adds
//!   [`Client::request_params`] to every request (`loss` offers `oc-algo="loss"`, `rate`
//!   offers `"loss,rate"` and the server, whose preference is rate, picks rate); each new
//!   INVITE asks [`ClientShard::decide`]; the server calls [`Server::on_request`] for every
//!   arriving message, [`Server::report`]s its queue every `report_every` (10 ms: the delay of
//!   the oldest message in the primary queue — the FIFO queue's head under FIFO —, the
//!   messages and retransmissions served and the busy time), and puts [`Server::feedback`]
//!   into every response's Via ([`Feedback::write_via`]); the proxy applies it when the
//!   response arrives ([`Client::on_response`] on that Via text) and counts a Timer B as a
//!   timeout ([`Client::on_timeout`]).
//!
//! *Admitted* originals are those the server let in (all that reach it, without a feedback
//! server; those [`Server::on_request`] does not reject, with one); the run records them per
//! `trace_bin` (100 ms) with the law's target and the queue's delay ([`TracePoint`]), and
//! reports their mean rate and coefficient of variation after `settle` (5 s).

use std::collections::BinaryHeap;
use std::time::Duration;

use loadctl::overload::client::{Client, ClientConfig, ClientShard, OcVerdict, hop_key};
use loadctl::overload::server::{Admission, Load, QueueLoad, Server, ServerConfig};
use loadctl::overload::via::{Feedback, Offer};
use loadctl::overload::{Algorithms, Category};
use loadctl::prsm::Class;
use serde::Serialize;

use crate::des::{ClientTimers, Station, Timed, call_copy, completes, sooner};
use crate::filter::ScheduledFilter;
use crate::{Delays, ScenarioKind, SchedulerKind, SimConfig, SimError};

/// The overload control between the proxy and the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Control {
    /// None: the proxy forwards everything.
    None,
    /// An RFC 7200 rate rule at the proxy, at the server's capacity ([`crate::filter`]).
    Static,
    /// RFC 7339 loss-based feedback.
    Loss,
    /// RFC 7415 rate-based feedback.
    Rate,
}

impl Control {
    /// Every control, in the order sweeps and tables use.
    pub const ALL: [Control; 4] = [Control::None, Control::Static, Control::Loss, Control::Rate];

    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Control::None => "none",
            Control::Static => "static",
            Control::Loss => "loss",
            Control::Rate => "rate",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// One run of the chain.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainConfig {
    /// The scenario, server, μ, seed, T1, jitter; `upstream_rate` is the `static` rule's rate
    /// (`None`: μ) and `notify_delay` how late it follows a capacity change.
    pub base: SimConfig,
    /// The overload control.
    pub control: Control,
    /// Proxy ↔ server delay each way before jitter (s). Default 1 ms.
    pub link_delay: f64,
    /// How often the server reports its queue to the feedback law (s). Default 10 ms.
    pub report_every: f64,
    /// The admitted-rate trace's bin (s). Default 100 ms.
    pub trace_bin: f64,
    /// The admitted-rate statistics start after this (s). Default 5 s.
    pub settle: f64,
    /// The feedback server's settings. Default [`ServerConfig::default`].
    pub server: ServerConfig,
}

impl ChainConfig {
    /// The defaults around `base`.
    pub fn new(base: SimConfig, control: Control) -> Self {
        Self {
            base,
            control,
            link_delay: 0.001,
            report_every: 0.01,
            trace_bin: 0.1,
            settle: 5.0,
            server: ServerConfig::default(),
        }
    }

    /// Steady Poisson arrivals at `offered`·μ calls/s for `duration` s (μ = 1000).
    pub fn steady(
        offered: f64,
        duration: f64,
        scheduler: SchedulerKind,
        buffer: usize,
        control: Control,
    ) -> Self {
        let mut base = SimConfig::new(ScenarioKind::Steady, scheduler, buffer);
        base.scenario.background = offered;
        base.scenario.duration = duration;
        Self::new(base, control)
    }

    /// Refuses settings the chain cannot run.
    pub fn validate(&self) -> Result<(), SimError> {
        self.base.validate()?;
        let bad = |what: &str| Err(SimError(what.to_owned()));
        if !(self.link_delay.is_finite() && (0.0..=1.0).contains(&self.link_delay)) {
            return bad("the link delay must be between 0 and 1 s");
        }
        if !(self.report_every.is_finite() && self.report_every >= 1e-4 && self.report_every <= 1.0)
        {
            return bad("the report interval must be between 0.1 ms and 1 s");
        }
        if !(self.trace_bin.is_finite() && self.trace_bin >= self.report_every) {
            return bad("the trace bin must be at least the report interval");
        }
        if !(self.settle.is_finite() && self.settle >= 0.0) {
            return bad("the settling time must be 0 or more");
        }
        self.server
            .check()
            .map_err(|e| SimError(format!("feedback server: {e}")))
    }
}

/// What one chain run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChainMetrics {
    /// The scenario's name.
    pub scenario: &'static str,
    /// `fifo` or `prsm`.
    pub scheduler: &'static str,
    /// `none`, `static`, `loss` or `rate`.
    pub control: &'static str,
    /// Buffer size B.
    pub buffer: usize,
    /// Service rate μ (messages/s).
    pub mu: f64,
    /// Mean offered call rate over the arrival window, × μ.
    pub offered: f64,
    /// Calls offered.
    pub calls: f64,
    /// Calls whose server response reached the proxy within Timer B of the call's start, per
    /// second of the arrival window: responses reaching the proxy within the window count, so
    /// the service after arrivals stop (up to B/μ + Timer B more) is not credited to it.
    pub goodput: f64,
    /// The same over the second half of the arrival window, when the first half's transient
    /// (a queue filling up, Timer B's 32 s) has passed.
    pub goodput_steady: f64,
    /// Calls whose server response reached the proxy within Timer B, at any time.
    pub answered: f64,
    /// Calls the proxy answered 503 (shed by the control).
    pub shed: f64,
    /// `shed` per second of the arrival window.
    pub shed_per_s: f64,
    /// Calls with no final answer before Timer B (neither a server response nor a 503).
    pub failed: f64,
    /// `failed / calls`.
    pub failed_ratio: f64,
    /// Calls the server itself answered 503 (RFC 7339 §5.10.2, non-participating clients).
    pub server_503: f64,
    /// Calls whose server response reached the proxy after Timer B.
    pub answered_late: f64,
    /// Mean delay from a call's start to its server response at the proxy, calls answered in
    /// time by a response reaching the proxy within the arrival window (ms).
    pub mean_delay_ms: f64,
    /// 95th percentile of the same (ms, 1 ms resolution).
    pub p95_delay_ms: f64,
    /// INVITE retransmissions the proxy sent (Timer A).
    pub retransmissions: f64,
    /// Messages the server served.
    pub served: f64,
    /// Of those, copies of calls it had answered already.
    pub redundant_served: f64,
    /// Messages dropped at a full queue.
    pub dropped: f64,
    /// Most messages in the primary queue (the only queue under FIFO).
    pub peak_primary: f64,
    /// Most messages in the secondary queue.
    pub peak_secondary: f64,
    /// Mean admitted rate of originals at the server after `settle`, until arrivals stop
    /// (per s).
    pub admitted_mean: f64,
    /// Coefficient of variation of the admitted rate per trace bin over the same span.
    pub admitted_cov: f64,
    /// Feedback updates the proxy applied.
    pub feedback_updates: f64,
    /// When the last event happened (s).
    pub end_s: f64,
}

/// One trace bin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TracePoint {
    /// The bin's start (s).
    pub t: f64,
    /// Originals the server admitted in the bin, per s.
    pub admitted: f64,
    /// The feedback law's target at the bin's last report (per s; 0 when not in overload or
    /// without a feedback server).
    pub target: f64,
    /// The delay of the oldest message in the primary queue at the bin's last report (ms).
    pub delay_ms: f64,
}

/// A finished chain run.
#[derive(Clone, Debug, PartialEq)]
pub struct ChainRun {
    /// What it measured.
    pub metrics: ChainMetrics,
    /// The admitted rate, target and delay per bin, over the arrival window.
    pub trace: Vec<TracePoint>,
}

/// The key the server knows the proxy by (RFC 7339 §5.4: address and port).
const PROXY: &[u8] = b"proxy.example:5060";

/// Where a call stands at the proxy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Answered,
    Failed,
    Shed,
    Rejected,
}

/// A response on its way to the proxy.
#[derive(Clone, Copy)]
struct Response {
    call: usize,
    /// A 503 from the server itself.
    reject: bool,
    feedback: Option<Feedback>,
}

/// The feedback loop's two ends.
struct Loop {
    client: Client,
    shard: ClientShard,
    hop: loadctl::overload::client::Hop,
    server: Server,
    /// The proxy's Via (with `oc` and `oc-algo`), as the server receives it.
    via: String,
    offer: Option<Offer>,
    buf: String,
}

#[derive(Clone, Copy)]
enum Next {
    Arrival,
    Timer(usize),
    ToServer,
    ToProxy,
    Done,
    Report,
}

/// Sends `item` to arrive at `at`.
fn post<T>(heap: &mut BinaryHeap<Timed<T>>, seq: &mut u64, at: f64, item: T) {
    *seq += 1;
    heap.push(Timed {
        at,
        seq: *seq,
        item,
    });
}

fn ns(t: f64) -> u64 {
    (t * 1e9) as u64
}

/// Runs the chain.
pub fn run(config: &ChainConfig) -> Result<ChainRun, SimError> {
    config.validate()?;
    let base = &config.base;
    let workload = base.scenario.realise(base.mu, base.seed);
    let arrivals = workload.arrival_times(base.seed);
    let timer_b = crate::timer_b(base.t1);
    let mut timers = ClientTimers::new(base.t1);
    let mut station = Station::new(base, &arrivals, true)?;
    let oc_err = |e: loadctl::overload::OcError| SimError(format!("overload control: {e}"));
    let mut oc = match config.control {
        Control::Loss | Control::Rate => {
            let algorithms = if config.control == Control::Loss {
                Algorithms::Loss
            } else {
                Algorithms::LossThenRate
            };
            let client = Client::new(
                {
                    let mut config = ClientConfig::default();
                    config.algorithms = algorithms;
                    config
                },
                1,
            )
            .map_err(oc_err)?;
            let hop = client
                .hop(hop_key(b"server.example:5060"), 0)
                .map_err(oc_err)?;
            let shard = ClientShard::new(&client, base.seed);
            let via = format!(
                "SIP/2.0/UDP proxy.example:5060;branch=z9hG4bKproxy{}",
                client.request_params()
            );
            Some(Loop {
                offer: Offer::parse(&via),
                server: Server::new(config.server).map_err(oc_err)?,
                client,
                shard,
                hop,
                via,
                buf: String::with_capacity(256),
            })
        }
        Control::None | Control::Static => None,
    };
    let mut upstream = match config.control {
        Control::Static => {
            let rate = base.upstream_rate.unwrap_or(base.mu);
            Some(ScheduledFilter::new(&workload, rate, base.notify_delay).map_err(SimError)?)
        }
        _ => None,
    };

    let mut m = ChainMetrics::default();
    let mut state = vec![State::Pending; arrivals.len()];
    let mut server_answered = vec![false; arrivals.len()];
    let mut ok = Delays::default();
    let horizon = workload.horizon;
    // Calls answered in time by responses reaching the proxy in the first and the second half
    // of the arrival window.
    let mut in_window = [0.0f64; 2];
    let mut to_server: BinaryHeap<Timed<(usize, usize)>> = BinaryHeap::new();
    let mut to_proxy: BinaryHeap<Timed<Response>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut jitter = crate::rng::Rng::new(base.seed ^ 0x6a69_7474);
    let bins = (workload.horizon / config.trace_bin).ceil() as usize;
    let mut trace: Vec<TracePoint> = (0..bins)
        .map(|i| TracePoint {
            t: i as f64 * config.trace_bin,
            ..TracePoint::default()
        })
        .collect();
    // What the server did since its last report: served, retransmissions served, busy (s).
    let (mut served, mut served_retx, mut busy) = (0u64, 0u64, 0.0f64);
    let mut next_report = config.report_every;
    let mut next_arrival = 0;
    let mut now = 0.0;
    loop {
        let mut next = None;
        let arrival = arrivals.get(next_arrival).copied();
        sooner(&mut next, arrival, Next::Arrival);
        timers.sooner(&mut next, &arrivals, Next::Timer);
        sooner(&mut next, to_server.peek().map(|m| m.at), Next::ToServer);
        sooner(&mut next, to_proxy.peek().map(|m| m.at), Next::ToProxy);
        completes(&mut next, station.done_at(), Next::Done);
        // Reports go on while anything else is left to happen.
        if next.is_some() {
            sooner(&mut next, Some(next_report), Next::Report);
        }
        let Some((t, next)) = next else { break };
        now = t;
        // When a message sent now reaches the other end.
        let mut across = || now + config.link_delay + jitter.unit() * base.jitter;
        match next {
            Next::Arrival => {
                let c = next_arrival;
                next_arrival += 1;
                m.calls += 1.0;
                let forward = match (&mut upstream, &mut oc) {
                    (Some(f), _) => f.admit(now).map_err(SimError)?,
                    (None, Some(o)) => matches!(
                        o.shard
                            .decide(&o.client, o.hop, ns(now), Category::Reducible),
                        OcVerdict::Forward | OcVerdict::Probe
                    ),
                    (None, None) => true,
                };
                if forward {
                    timers.start(c);
                    post(&mut to_server, &mut seq, across(), (c, 0));
                } else {
                    state[c] = State::Shed;
                    m.shed += 1.0;
                }
            }
            Next::Timer(lane) => {
                let c = timers.pop(lane);
                if state[c] != State::Pending {
                    continue;
                }
                if lane == ClientTimers::TIMER_B {
                    state[c] = State::Failed;
                    m.failed += 1.0;
                    if let Some(o) = &oc {
                        o.client.on_timeout(o.hop, ns(now));
                    }
                } else {
                    m.retransmissions += 1.0;
                    post(&mut to_server, &mut seq, across(), (c, lane + 1));
                }
            }
            Next::ToServer => {
                let Some(Timed {
                    item: (c, copy), ..
                }) = to_server.pop()
                else {
                    continue;
                };
                let class = station.classify(c, copy, now);
                let admission = match &mut oc {
                    Some(o) => o.server.on_request(
                        ns(now),
                        PROXY,
                        o.offer,
                        class,
                        loadctl::overload::Category::Reducible,
                    ),
                    None => Admission::Admit,
                };
                if admission == Admission::Reject {
                    m.server_503 += 1.0;
                    let feedback = oc.as_mut().and_then(|o| o.server.feedback(ns(now), PROXY));
                    let r = Response {
                        call: c,
                        reject: true,
                        feedback,
                    };
                    post(&mut to_proxy, &mut seq, across(), r);
                    continue;
                }
                if class == Class::Original
                    && let Some(p) = trace.get_mut((now / config.trace_bin) as usize)
                {
                    p.admitted += 1.0;
                }
                station.deliver(c, copy, class, now, workload.mu_at(now));
            }
            Next::Done => {
                let Some((item, class, service)) = station.finish() else {
                    continue;
                };
                let (c, _) = call_copy(item);
                m.served += 1.0;
                served += 1;
                served_retx += u64::from(class == Class::Retransmission);
                busy += service;
                if server_answered[c] {
                    m.redundant_served += 1.0;
                }
                server_answered[c] = true;
                let feedback = oc.as_mut().and_then(|o| o.server.feedback(ns(now), PROXY));
                let r = Response {
                    call: c,
                    reject: false,
                    feedback,
                };
                post(&mut to_proxy, &mut seq, across(), r);
                station.start(now, workload.mu_at(now));
            }
            Next::ToProxy => {
                let Some(Timed { item: r, .. }) = to_proxy.pop() else {
                    continue;
                };
                if let Some(o) = &mut oc {
                    o.buf.clear();
                    match r.feedback {
                        Some(f) => f.write_via(&o.via, &mut o.buf).map_err(|e| {
                            SimError(format!("the server could not write its feedback: {e}"))
                        })?,
                        None => o.buf.push_str(&o.via),
                    }
                    let applied = o.client.on_response(o.hop, ns(now), &o.buf).map_err(|e| {
                        SimError(format!("the proxy refused the server's feedback: {e}"))
                    })?;
                    if applied == loadctl::overload::client::Applied::Updated {
                        m.feedback_updates += 1.0;
                    }
                }
                let c = r.call;
                match state[c] {
                    State::Pending if r.reject => state[c] = State::Rejected,
                    State::Pending => {
                        state[c] = State::Answered;
                        let delay = now - arrivals[c];
                        if delay <= timer_b {
                            m.answered += 1.0;
                            if now < horizon {
                                ok.add(delay, 1.0);
                                in_window[usize::from(now >= horizon / 2.0)] += 1.0;
                            }
                        } else {
                            m.answered_late += 1.0;
                        }
                    }
                    State::Failed if !r.reject => m.answered_late += 1.0,
                    _ => {}
                }
            }
            Next::Report => {
                next_report += config.report_every;
                let wait = station.oldest_wait(now);
                if let Some(o) = &mut oc {
                    let load = Load::Queue(QueueLoad {
                        delay: Duration::from_nanos(ns(wait)),
                        served,
                        served_retransmissions: served_retx,
                        busy: Duration::from_nanos(ns(busy)),
                    });
                    o.server.report(ns(now), load).map_err(oc_err)?;
                }
                (served, served_retx, busy) = (0, 0, 0.0);
                if let Some(p) = trace.get_mut((now / config.trace_bin) as usize) {
                    p.delay_ms = wait * 1000.0;
                    p.target = oc.as_ref().map_or(0.0, |o| {
                        let s = o.server.status();
                        if s.overloaded { s.target } else { 0.0 }
                    });
                }
            }
        }
    }
    if station.misclassified != 0 {
        return Err(SimError(format!(
            "the retransmission detector misclassified {} copies",
            station.misclassified
        )));
    }
    for p in &mut trace {
        p.admitted /= config.trace_bin;
    }
    let settled: Vec<f64> = trace
        .iter()
        .filter(|p| p.t >= config.settle && p.t + config.trace_bin <= horizon + 1e-9)
        .map(|p| p.admitted)
        .collect();
    if !settled.is_empty() {
        let n = settled.len() as f64;
        let mean = settled.iter().sum::<f64>() / n;
        let var = settled.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        m.admitted_mean = mean;
        m.admitted_cov = if mean > 0.0 { var.sqrt() / mean } else { 0.0 };
    }
    m.scenario = base.scenario.kind.name();
    m.scheduler = base.scheduler.name();
    m.control = config.control.name();
    m.buffer = base.buffer;
    m.mu = base.mu;
    m.offered = workload.mean_rate() / base.mu;
    m.goodput = (in_window[0] + in_window[1]) / horizon;
    m.goodput_steady = in_window[1] / (horizon / 2.0);
    m.shed_per_s = m.shed / horizon;
    m.failed_ratio = if m.calls > 0.0 {
        m.failed / m.calls
    } else {
        0.0
    };
    m.mean_delay_ms = ok.mean_ms();
    m.p95_delay_ms = ok.quantile_ms(0.95);
    m.dropped = station.dropped;
    m.peak_primary = station.peak_primary;
    m.peak_secondary = station.peak_secondary;
    m.end_s = now;
    Ok(ChainRun { metrics: m, trace })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for c in Control::ALL {
            assert_eq!(Control::parse(c.name()), Some(c));
        }
        assert_eq!(Control::parse("fast"), None);
    }

    #[test]
    fn below_capacity_every_call_is_answered_and_nothing_is_shed() {
        // 0.5·μ for 10 s: no overload, so no control acts; the delay is the service (1 ms),
        // the M/D/1 wait at ρ = 0.5 (ρ/(2μ(1−ρ)) = 0.5 ms) and the link both ways (2 × 1.5 ms
        // on average).
        for control in Control::ALL {
            let r = run(&ChainConfig::steady(
                0.5,
                10.0,
                SchedulerKind::Prsm,
                1000,
                control,
            ))
            .expect("runs");
            let m = &r.metrics;
            assert_eq!((m.failed, m.shed, m.server_503), (0.0, 0.0, 0.0), "{m:?}");
            assert_eq!(m.answered, m.calls, "{m:?}");
            assert!((4.0..5.5).contains(&m.mean_delay_ms), "{m:?}");
        }
    }
}
