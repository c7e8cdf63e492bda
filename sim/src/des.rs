//! The discrete-event model: every call and every copy of its INVITE, one server.
//!
//! Clients send their INVITE at the arrival time and copies at (2^j − 1)·T1 (j = 1..6) until
//! the server's 100 Trying reaches them (zero network delay); Timer B (64·T1) ends an
//! unanswered call as failed. The server takes the next message from the engine's
//! [`Scheduler`] (FIFO or PRSM), spends 1/μ(t) on it and answers its call with 100 Trying at
//! the end of the service; a copy of a call already answered costs its slot all the same. Under
//! PRSM the engine's [`RetransmissionDetector`] classifies every arriving copy by its
//! transaction key, as a real server would; the model checks that it agrees with the copy
//! number it knows.
//!
//! Events come from a handful of time-ordered streams (arrivals, one lane per retransmission
//! number, Timer B, the service completion), so picking the next one costs a few comparisons
//! and no heap: copy j of every call leaves a fixed offset after the call's arrival, so each
//! lane is already sorted.
//!
//! The pieces [`crate::chain`] reuses live here too: the server (`Station`: the engine's
//! scheduler and detector, one service at a time), the INVITE client transactions' timers
//! (`ClientTimers`) and the messages in flight (`Timed`).

use std::collections::{BinaryHeap, VecDeque};
use std::io::Write as _;

use loadctl::prsm::{
    Class, DetectorConfig, Discipline, RetransmissionDetector, Scheduler, TransactionParts,
};

use crate::filter::ScheduledFilter;
use crate::{Delays, Metrics, RETRANSMISSIONS, SchedulerKind, SimConfig, SimError, Workload};

/// Most calls arriving within any `window` seconds (sorted `times`).
pub(crate) fn most_within(times: &[f64], window: f64) -> usize {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= window {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// Something due at a time, in a [`BinaryHeap`] that pops the earliest first; ties go to the
/// smaller `seq`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timed<T> {
    /// When it is due (s).
    pub at: f64,
    /// The tie-breaker.
    pub seq: u64,
    /// What is due.
    pub item: T,
}

impl<T> PartialEq for Timed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl<T> Eq for Timed<T> {}

impl<T> PartialOrd for Timed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Timed<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap is a max-heap.
        other
            .at
            .total_cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// A copy of a call's INVITE as the queues hold it: the call and the copy number (0 = the
/// original).
pub(crate) fn item(call: usize, copy: usize) -> u64 {
    ((call as u64) << 3) | copy as u64
}

/// The call and copy number of an [`item`].
pub(crate) fn call_copy(item: u64) -> (usize, usize) {
    ((item >> 3) as usize, (item & 7) as usize)
}

/// The INVITE client transactions' timers of every call started (RFC 3261 §17.1.1.2): Timer A
/// sends copy j at (2^j − 1)·T1 after the start, Timer B gives up at 64·T1. One lane per
/// copy number and one for Timer B, each sorted by start time, so the next timer is the
/// earliest lane head.
#[derive(Debug)]
pub(crate) struct ClientTimers {
    /// Lanes 0..6: copies 1..=6; lane 6: Timer B.
    lanes: [VecDeque<u32>; RETRANSMISSIONS + 1],
    offsets: [f64; RETRANSMISSIONS + 1],
}

impl ClientTimers {
    /// The lane of Timer B.
    pub const TIMER_B: usize = RETRANSMISSIONS;

    pub(crate) fn new(t1: f64) -> Self {
        let mut offsets = [0.0; RETRANSMISSIONS + 1];
        for (j, o) in offsets.iter_mut().enumerate().take(RETRANSMISSIONS) {
            *o = crate::copy_offset(j + 1, t1);
        }
        offsets[RETRANSMISSIONS] = crate::timer_b(t1);
        Self {
            lanes: Default::default(),
            offsets,
        }
    }

    /// Starts the timers of `call` (calls must start in the order of `starts`).
    pub(crate) fn start(&mut self, call: usize) {
        for lane in &mut self.lanes {
            lane.push_back(call as u32);
        }
    }

    /// The earliest timer due, as (time, lane), given each call's start time.
    pub(crate) fn next(&self, starts: &[f64]) -> Option<(f64, usize)> {
        let mut best: Option<(f64, usize)> = None;
        for (l, lane) in self.lanes.iter().enumerate() {
            if let Some(&c) = lane.front() {
                let at = starts[c as usize] + self.offsets[l];
                if best.is_none_or(|(t, _)| at < t) {
                    best = Some((at, l));
                }
            }
        }
        best
    }

    /// [`sooner`] for the earliest timer: `event(lane)`.
    pub(crate) fn sooner<N>(
        &self,
        next: &mut Option<(f64, N)>,
        starts: &[f64],
        event: impl Fn(usize) -> N,
    ) {
        if let Some((at, lane)) = self.next(starts) {
            sooner(next, Some(at), event(lane));
        }
    }

    /// Takes the head of `lane`: the call whose timer fired (lane j < 6 sends copy j + 1).
    pub(crate) fn pop(&mut self, lane: usize) -> usize {
        self.lanes[lane].pop_front().map_or(0, |c| c as usize)
    }
}

/// The server: the engine's [`Scheduler`] (FIFO or PRSM) with its buffer, one message in
/// service at a time, and the engine's [`RetransmissionDetector`] when it classifies.
pub(crate) struct Station {
    scheduler: Scheduler<u64>,
    detector: Option<RetransmissionDetector>,
    /// The message in service: (done at, item, class, service time).
    busy: Option<(f64, u64, Class, f64)>,
    /// When each message in the primary queue (the only one under FIFO) arrived, oldest first.
    primary_since: VecDeque<f64>,
    /// Messages dropped at a full queue.
    pub dropped: f64,
    /// Most messages in the primary queue (the only queue under FIFO).
    pub peak_primary: f64,
    /// Most messages in the secondary queue.
    pub peak_secondary: f64,
    /// Classifications that disagreed with the copy number (must stay 0).
    pub misclassified: u64,
}

impl Station {
    /// A server with `config`'s queues; `detect` adds a detector sized for every call of
    /// `arrivals` alive at once (so nothing is forgotten before Timer B).
    pub(crate) fn new(
        config: &SimConfig,
        arrivals: &[f64],
        detect: bool,
    ) -> Result<Self, SimError> {
        let scheduler = Scheduler::new(config.queues()).map_err(|e| SimError(e.to_string()))?;
        let detector = if detect {
            Some(
                RetransmissionDetector::new({
                    let mut d = DetectorConfig::default();
                    d.capacity = most_within(arrivals, crate::timer_b(config.t1)).max(1);
                    d.t1_ns = (config.t1 * 1e9) as u64;
                    d.stripes = 1;
                    d
                })
                .map_err(|e| SimError(e.to_string()))?,
            )
        } else {
            None
        };
        Ok(Self {
            scheduler,
            detector,
            busy: None,
            primary_since: VecDeque::new(),
            dropped: 0.0,
            peak_primary: 0.0,
            peak_secondary: 0.0,
            misclassified: 0,
        })
    }

    /// The class of copy `copy` of `call` arriving at `now`: the detector's verdict from the
    /// transaction key, checked against the copy number; the copy number without a detector.
    pub(crate) fn classify(&mut self, call: usize, copy: usize, now: f64) -> Class {
        let truth = if copy == 0 {
            Class::Original
        } else {
            Class::Retransmission
        };
        let Some(detector) = &self.detector else {
            return truth;
        };
        // The client keeps one branch for every copy of its INVITE.
        let mut via = [0u8; 80];
        let len = {
            let mut w = &mut via[..];
            let _ = write!(w, "SIP/2.0/UDP client.example:5060;branch=z9hG4bK{call:x}");
            80 - w.len()
        };
        let parts = TransactionParts {
            method: b"INVITE",
            request_uri: b"sip:service@server.example",
            top_via: &via[..len],
            call_id: b"",
            cseq: 1,
            from_tag: None,
            to_tag: None,
        };
        let class = match detector.key_from_parts(&parts) {
            Ok(key) => detector.observe(key, (now * 1e9) as u64),
            Err(_) => truth,
        };
        if class != truth {
            self.misclassified += 1;
        }
        class
    }

    /// Whether `class` goes to the primary queue (every message under FIFO).
    fn primary(&self, class: Class) -> bool {
        self.scheduler.discipline() == Discipline::Fifo || class == Class::Original
    }

    /// Queues copy `copy` of `call` (tail drop when its queue is full) and starts serving if
    /// idle, at service rate `mu`.
    pub(crate) fn deliver(&mut self, call: usize, copy: usize, class: Class, now: f64, mu: f64) {
        match self.scheduler.push(item(call, copy), class) {
            Ok(()) => {
                let len = self.scheduler.len_of(class) as f64;
                let peak = if self.primary(class) {
                    self.primary_since.push_back(now);
                    &mut self.peak_primary
                } else {
                    &mut self.peak_secondary
                };
                *peak = peak.max(len);
            }
            Err(_) => self.dropped += 1.0,
        }
        if self.busy.is_none() {
            self.start(now, mu);
        }
    }

    /// Takes the next message into service at rate `mu`, if one waits.
    pub(crate) fn start(&mut self, now: f64, mu: f64) {
        self.busy = self.scheduler.pop().map(|(item, class)| {
            if self.primary(class) {
                self.primary_since.pop_front();
            }
            (now + 1.0 / mu, item, class, 1.0 / mu)
        });
    }

    /// When the message in service completes.
    pub(crate) fn done_at(&self) -> Option<f64> {
        self.busy.map(|(at, ..)| at)
    }

    /// Completes the message in service: (item, class, service time). Call [`Station::start`]
    /// next.
    pub(crate) fn finish(&mut self) -> Option<(u64, Class, f64)> {
        self.busy.take().map(|(_, item, class, s)| (item, class, s))
    }

    /// How long the oldest message of the primary queue has waited at `now` (0 when empty).
    pub(crate) fn oldest_wait(&self, now: f64) -> f64 {
        self.primary_since.front().map_or(0.0, |&t| now - t)
    }
}

/// Takes `event`, due `at`, as the next one when it is due before the one chosen so far.
pub(crate) fn sooner<N>(next: &mut Option<(f64, N)>, at: Option<f64>, event: N) {
    if let Some(at) = at
        && next.as_ref().is_none_or(|(t, _)| at < *t)
    {
        *next = Some((at, event));
    }
}

/// [`sooner`] for a service completion, which wins ties (an answer at the instant Timer B
/// fires is in time).
pub(crate) fn completes<N>(next: &mut Option<(f64, N)>, at: Option<f64>, event: N) {
    if let Some(at) = at
        && next.as_ref().is_none_or(|(t, _)| at <= *t)
    {
        *next = Some((at, event));
    }
}

/// The events the model can take next.
#[derive(Clone, Copy)]
enum Next {
    Arrival,
    Lane(usize),
    Transit,
    Done,
}

/// Runs the discrete-event model.
pub fn run(config: &SimConfig, workload: &Workload) -> Result<Metrics, SimError> {
    let arrivals = workload.arrival_times(config.seed);
    let timer_b = crate::timer_b(config.t1);
    let mut timers = ClientTimers::new(config.t1);
    let mut server = Station::new(config, &arrivals, config.scheduler == SchedulerKind::Prsm)?;
    let mut m = Metrics::default();
    let mut upstream = config
        .upstream_rate
        .map(|r| ScheduledFilter::new(workload, r, config.notify_delay))
        .transpose()
        .map_err(SimError)?;
    let mut answered = vec![f64::NAN; arrivals.len()];
    let (mut all, mut ok) = (Delays::default(), Delays::default());
    let mut transit: BinaryHeap<Timed<(usize, usize)>> = BinaryHeap::new();
    let mut jitter = crate::rng::Rng::new(config.seed ^ 0x6a69_7474);
    let mut next_arrival = 0;
    let mut now = 0.0;
    loop {
        let mut next = None;
        let arrival = arrivals.get(next_arrival).copied();
        sooner(&mut next, arrival, Next::Arrival);
        timers.sooner(&mut next, &arrivals, Next::Lane);
        sooner(&mut next, transit.peek().map(|m| m.at), Next::Transit);
        completes(&mut next, server.done_at(), Next::Done);
        let Some((t, next)) = next else { break };
        now = t;
        match next {
            Next::Arrival => {
                let c = next_arrival;
                next_arrival += 1;
                m.calls += 1.0;
                if let Some(f) = &mut upstream
                    && !f.admit(now).map_err(SimError)?
                {
                    m.rejected_upstream += 1.0;
                    continue;
                }
                timers.start(c);
                let at = now + jitter.unit() * config.jitter;
                transit.push(Timed {
                    at,
                    seq: item(c, 0),
                    item: (c, 0),
                });
            }
            Next::Lane(l) => {
                let c = timers.pop(l);
                if !answered[c].is_nan() {
                    continue;
                }
                if l == ClientTimers::TIMER_B {
                    m.failed += 1.0;
                } else {
                    m.retransmissions += 1.0;
                    let at = now + jitter.unit() * config.jitter;
                    transit.push(Timed {
                        at,
                        seq: item(c, l + 1),
                        item: (c, l + 1),
                    });
                }
            }
            Next::Transit => {
                if let Some(Timed {
                    item: (c, copy), ..
                }) = transit.pop()
                {
                    let class = server.classify(c, copy, now);
                    server.deliver(c, copy, class, now, workload.mu_at(now));
                }
            }
            Next::Done => {
                let (c, _) = server.finish().map_or((0, 0), |(item, ..)| call_copy(item));
                m.served += 1.0;
                if answered[c].is_nan() {
                    answered[c] = now;
                    let delay = now - arrivals[c];
                    all.add(delay, 1.0);
                    // Timer B fires at exactly `timer_b`; an answer at that instant is served
                    // first (completions win ties), so it is in time.
                    if delay <= timer_b {
                        ok.add(delay, 1.0);
                    } else {
                        m.answered_late += 1.0;
                    }
                } else {
                    m.redundant_served += 1.0;
                }
                server.start(now, workload.mu_at(now));
            }
        }
    }
    if server.misclassified != 0 {
        return Err(SimError(format!(
            "the retransmission detector misclassified {} copies",
            server.misclassified
        )));
    }
    m.dropped = server.dropped;
    m.peak_primary = server.peak_primary;
    m.peak_secondary = server.peak_secondary;
    m.mean_delay_ms = all.mean_ms();
    m.p99_delay_ms = all.quantile_ms(0.99);
    m.mean_delay_ok_ms = ok.mean_ms();
    m.p99_delay_ok_ms = ok.quantile_ms(0.99);
    m.goodput = ok.mass / workload.horizon;
    m.end_s = now;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Model, ScenarioKind, simulate};

    fn run(kind: ScenarioKind, scheduler: SchedulerKind, buffer: usize) -> Metrics {
        simulate(&SimConfig::new(kind, scheduler, buffer), Model::Des).expect("runs")
    }

    #[test]
    fn window_count() {
        assert_eq!(most_within(&[0.0, 1.0, 1.5, 2.0, 10.0], 1.01), 3);
        assert_eq!(most_within(&[], 1.0), 0);
    }

    #[test]
    fn steady_load_below_capacity_loses_nothing() {
        for s in [SchedulerKind::Fifo, SchedulerKind::Prsm] {
            let m = run(ScenarioKind::Steady, s, 1000);
            assert_eq!(m.failed, 0.0, "{m:?}");
            assert_eq!(m.dropped, 0.0, "{m:?}");
            // M/D/1 at ρ = 0.7: mean wait ρ/(2μ(1−ρ)) ≈ 1.17 ms plus 1 ms of service.
            assert!((1.8..2.8).contains(&m.mean_delay_ms), "{m:?}");
            assert!(m.retransmissions < 1.0, "{m:?}");
            assert_eq!(m.served, m.calls);
        }
    }

    #[test]
    fn conservation() {
        for s in [SchedulerKind::Fifo, SchedulerKind::Prsm] {
            let m = run(ScenarioKind::Bulk, s, 5000);
            // Every message sent was served or dropped; every call answered or failed (or both,
            // when answered late).
            assert_eq!(m.calls + m.retransmissions, m.served + m.dropped, "{m:?}");
            let answered = m.served - m.redundant_served;
            assert!(
                answered + m.failed - m.answered_late <= m.calls + 1e-9,
                "{m:?}"
            );
            assert!(answered >= m.calls - m.failed, "{m:?}");
        }
    }

    #[test]
    fn prsm_beats_fifo_in_overload() {
        let fifo = run(ScenarioKind::Bulk, SchedulerKind::Fifo, 50_000);
        let prsm = run(ScenarioKind::Bulk, SchedulerKind::Prsm, 50_000);
        assert!(prsm.failed_ratio < 0.01, "{prsm:?}");
        assert!(
            fifo.failed_ratio > 10.0 * prsm.failed_ratio.max(0.001),
            "{fifo:?}"
        );
        assert!(
            fifo.redundant_served > 3.0 * prsm.redundant_served,
            "{fifo:?} {prsm:?}"
        );
    }

    #[test]
    fn same_seed_same_result() {
        let a = run(ScenarioKind::Bursty, SchedulerKind::Prsm, 1000);
        let b = run(ScenarioKind::Bursty, SchedulerKind::Prsm, 1000);
        assert_eq!(a, b);
    }
}
