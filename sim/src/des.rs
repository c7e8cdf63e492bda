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

use std::collections::VecDeque;
use std::io::Write as _;

use loadctl::prsm::{Class, DetectorConfig, RetransmissionDetector, Scheduler, TransactionParts};

use crate::filter::UpstreamFilter;
use crate::{Delays, Metrics, RETRANSMISSIONS, SchedulerKind, SimConfig, SimError, Workload};

/// Most calls arriving within any `window` seconds (sorted `times`).
fn most_within(times: &[f64], window: f64) -> usize {
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

/// What the server knows of a call.
#[derive(Clone, Copy, Default)]
struct Call {
    /// When its first 100 Trying left (NaN: not yet).
    answered: f64,
}

/// The events the model can take next.
#[derive(Clone, Copy)]
enum Next {
    Arrival,
    Lane(usize),
    Transit,
    Done,
}

/// A copy on its way to the server: (arrival time, call, copy number), earliest first.
#[derive(Clone, Copy, PartialEq)]
struct InTransit(f64, u32, u8);

impl Eq for InTransit {}

impl PartialOrd for InTransit {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InTransit {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap is a max-heap.
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| other.1.cmp(&self.1))
            .then_with(|| other.2.cmp(&self.2))
    }
}

struct Server<'a> {
    scheduler: Scheduler<u64>,
    detector: Option<RetransmissionDetector>,
    workload: &'a Workload,
    arrivals: &'a [f64],
    busy: Option<(f64, u64)>,
    m: Metrics,
    /// Classifications that disagreed with the copy number (must stay 0).
    misclassified: u64,
}

impl Server<'_> {
    fn classify(&self, call: usize, copy: usize, now: f64) -> Class {
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
        match detector.key_from_parts(&parts) {
            Ok(key) => detector.observe(key, (now * 1e9) as u64),
            Err(_) => truth,
        }
    }

    fn deliver(&mut self, call: usize, copy: usize, now: f64) {
        let class = self.classify(call, copy, now);
        if (class == Class::Original) != (copy == 0) {
            self.misclassified += 1;
        }
        match self
            .scheduler
            .push(((call as u64) << 3) | copy as u64, class)
        {
            Ok(()) => {
                let len = self.scheduler.len_of(class) as f64;
                let peak = match (self.scheduler.discipline(), class) {
                    (loadctl::prsm::Discipline::Priority, Class::Retransmission) => {
                        &mut self.m.peak_secondary
                    }
                    _ => &mut self.m.peak_primary,
                };
                *peak = peak.max(len);
            }
            Err(_) => self.m.dropped += 1.0,
        }
        if self.busy.is_none() {
            self.start(now);
        }
    }

    fn start(&mut self, now: f64) {
        self.busy = self
            .scheduler
            .pop()
            .map(|(item, _)| (now + 1.0 / self.workload.mu_at(now), item));
    }
}

/// Runs the discrete-event model.
pub fn run(config: &SimConfig, workload: &Workload) -> Result<Metrics, SimError> {
    let arrivals = workload.arrival_times(config.seed);
    let t1 = config.t1;
    let timer_b = crate::timer_b(t1);
    // Lanes 0..6: copies 1..=6; lane 6: Timer B.
    let mut offsets = [0.0; RETRANSMISSIONS + 1];
    for (j, o) in offsets.iter_mut().enumerate().take(RETRANSMISSIONS) {
        *o = crate::copy_offset(j + 1, t1);
    }
    offsets[RETRANSMISSIONS] = timer_b;
    let scheduler = Scheduler::new(config.queues()).map_err(|e| SimError(e.to_string()))?;
    let detector = match config.scheduler {
        SchedulerKind::Fifo => None,
        SchedulerKind::Prsm => Some(
            RetransmissionDetector::new(DetectorConfig {
                // Every call alive at once, so nothing is forgotten before Timer B.
                capacity: most_within(&arrivals, timer_b).max(1),
                t1_ns: (t1 * 1e9) as u64,
                stripes: 1,
            })
            .map_err(|e| SimError(e.to_string()))?,
        ),
    };
    let mut upstream = config
        .upstream_rate
        .map(UpstreamFilter::new)
        .transpose()
        .map_err(SimError)?;
    let mut calls = vec![Call { answered: f64::NAN }; arrivals.len()];
    let mut lanes: [VecDeque<u32>; RETRANSMISSIONS + 1] = Default::default();
    let mut server = Server {
        scheduler,
        detector,
        workload,
        arrivals: &arrivals,
        busy: None,
        m: Metrics::default(),
        misclassified: 0,
    };
    let (mut all, mut ok) = (Delays::default(), Delays::default());
    let schedule = config.upstream_rate.map_or_else(Vec::new, |r| {
        crate::filter::rate_schedule(workload, r, config.notify_delay)
    });
    // The first entry is the initial rate the filter starts with.
    let mut next_change = 1;
    let mut transit = std::collections::BinaryHeap::new();
    let mut jitter = crate::rng::Rng::new(config.seed ^ 0x6a69_7474);
    let mut next_arrival = 0;
    let mut now = 0.0;
    loop {
        let mut t = f64::INFINITY;
        let mut next = None;
        if let Some(&a) = arrivals.get(next_arrival) {
            (t, next) = (a, Some(Next::Arrival));
        }
        for (l, lane) in lanes.iter().enumerate() {
            if let Some(&c) = lane.front() {
                let at = arrivals[c as usize] + offsets[l];
                if at < t {
                    (t, next) = (at, Some(Next::Lane(l)));
                }
            }
        }
        if let Some(&InTransit(at, _, _)) = transit.peek()
            && at < t
        {
            (t, next) = (at, Some(Next::Transit));
        }
        if let Some((done, _)) = server.busy
            && done <= t
        {
            (t, next) = (done, Some(Next::Done));
        }
        let Some(next) = next else { break };
        now = t;
        while let Some(&(at, rate)) = schedule.get(next_change)
            && at <= now
        {
            if let Some(f) = &mut upstream {
                f.set_rate(rate).map_err(SimError)?;
            }
            next_change += 1;
        }
        match next {
            Next::Arrival => {
                let c = next_arrival;
                next_arrival += 1;
                server.m.calls += 1.0;
                if let Some(f) = &mut upstream
                    && !f.admit(now)
                {
                    server.m.rejected_upstream += 1.0;
                    continue;
                }
                for lane in &mut lanes {
                    lane.push_back(c as u32);
                }
                transit.push(InTransit(now + jitter.unit() * config.jitter, c as u32, 0));
            }
            Next::Lane(l) => {
                let c = lanes[l].pop_front().map_or(0, |c| c as usize);
                if !calls[c].answered.is_nan() {
                    continue;
                }
                if l == RETRANSMISSIONS {
                    server.m.failed += 1.0;
                } else {
                    server.m.retransmissions += 1.0;
                    let at = now + jitter.unit() * config.jitter;
                    transit.push(InTransit(at, c as u32, (l + 1) as u8));
                }
            }
            Next::Transit => {
                if let Some(InTransit(_, c, copy)) = transit.pop() {
                    server.deliver(c as usize, copy as usize, now);
                }
            }
            Next::Done => {
                let item = server.busy.map_or(0, |(_, item)| item);
                let c = (item >> 3) as usize;
                server.m.served += 1.0;
                if calls[c].answered.is_nan() {
                    calls[c].answered = now;
                    let delay = now - server.arrivals[c];
                    all.add(delay, 1.0);
                    // Timer B fires at exactly `timer_b`; an answer at that instant is served
                    // first (completions win ties), so it is in time.
                    if delay <= timer_b {
                        ok.add(delay, 1.0);
                    } else {
                        server.m.answered_late += 1.0;
                    }
                } else {
                    server.m.redundant_served += 1.0;
                }
                server.start(now);
            }
        }
    }
    if server.misclassified != 0 {
        return Err(SimError(format!(
            "the retransmission detector misclassified {} copies",
            server.misclassified
        )));
    }
    let mut m = server.m;
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
