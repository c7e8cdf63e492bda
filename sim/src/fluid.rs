//! The fluid (cohort) model of `spec/prsm.md`: the same server and clients as [`crate::des`],
//! with calls as continuous mass moving through time slots of Δ instead of one by one.
//!
//! Originals arriving in slot k form cohort k; `unanswered[k]` is the mass of its calls with no
//! 100 Trying yet. Copy j of cohort k leaves in slot k + (2^j − 1)·T1/Δ carrying the cohort's
//! unanswered mass at that moment. Queues hold chunks (cohort, mass, unanswered mass when the
//! chunk was sent); admission takes up to the free space and drops the rest; each slot serves
//! μ(t)·Δ of mass, from the primary queue first under PRSM. When a chunk is served, the share of
//! it that still finds its call unanswered is `unanswered[k] now / unanswered[k] at send` (the
//! chunk's calls are a random sample of the cohort's unanswered calls, independent of which
//! other copies got in): that share answers calls (its delay is recorded), the rest is
//! redundant work. At k + 64·T1/Δ what is still unanswered fails.
//!
//! The offered load is the [`Workload`]'s expected mass per slot (for `bursty`, the same on/off
//! path the discrete-event model draws its Poisson arrivals from). An upstream RFC 7200 rate
//! rule is a token bucket of rate r and depth max(1, r·τ) with the engine's default τ = 100 ms
//! (the fluid limit of its GCRA), following the same [`crate::filter::rate_schedule`].

use std::collections::VecDeque;

use crate::{Delays, Metrics, RETRANSMISSIONS, SchedulerKind, SimConfig, SimError, Workload};

/// Masses below this are treated as nothing (rounding noise).
const EPS: f64 = 1e-9;

/// Burst tolerance of the upstream rate rule (the engine's default).
const UPSTREAM_TAU: f64 = 0.1;

/// A chunk of queued copies of one cohort.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    cohort: u32,
    mass: f64,
    /// The cohort's unanswered mass that the chunk's calls were a sample of. Kept so that
    /// `unanswered / basis` stays the share of the chunk whose calls are still unanswered.
    basis: f64,
}

/// A finite queue of chunks.
#[derive(Default)]
struct Queue {
    chunks: VecDeque<Chunk>,
    mass: f64,
    capacity: f64,
    peak: f64,
}

impl Queue {
    /// Admits the chunks that arrive in one slot, all with the same share of the free space
    /// (arrivals within a slot interleave at random); returns the mass dropped.
    fn admit(&mut self, arriving: &[Chunk]) -> f64 {
        let offered: f64 = arriving.iter().map(|c| c.mass).sum();
        if offered <= EPS {
            return 0.0;
        }
        let free = (self.capacity - self.mass).max(0.0);
        let share = (free / offered).min(1.0);
        for c in arriving {
            let taken = c.mass * share;
            if taken > EPS {
                self.chunks.push_back(Chunk { mass: taken, ..*c });
                self.mass += taken;
            }
        }
        self.peak = self.peak.max(self.mass);
        offered * (1.0 - share)
    }
}

struct Cohorts {
    unanswered: Vec<f64>,
    timed_out: Vec<bool>,
}

/// Answers what finished service: each piece's share of still-unanswered calls answers them
/// (their delay is recorded), the rest was redundant work.
struct Completion<'a> {
    cohorts: &'a mut Cohorts,
    all: &'a mut Delays,
    ok: &'a mut Delays,
    m: &'a mut Metrics,
}

impl Completion<'_> {
    /// Completes `pieces` at the start of `slot`.
    fn complete(&mut self, pieces: &[Chunk], slot: usize, dt: f64) {
        for p in pieces {
            let k = p.cohort as usize;
            let u = self.cohorts.unanswered[k];
            let share = if p.basis > EPS {
                (u / p.basis).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let useful = (p.mass * share).min(u);
            self.cohorts.unanswered[k] = u - useful;
            self.m.redundant_served += p.mass - useful;
            if useful > 0.0 {
                // Cohort k arrived around the middle of slot k.
                let delay = (slot as f64 - k as f64 - 0.5) * dt;
                self.all.add(delay, useful);
                if self.cohorts.timed_out[k] {
                    self.m.answered_late += useful;
                } else {
                    self.ok.add(delay, useful);
                }
            }
        }
    }
}

/// Takes up to `budget` mass from the head of `q` into service (`pieces`); returns the budget
/// left. A piece keeps its chunk's basis; the rest of the chunk gives up the piece's share of
/// it, so both still say the same share of their calls is unanswered.
fn serve(q: &mut Queue, mut budget: f64, pieces: &mut Vec<Chunk>) -> f64 {
    while budget > EPS {
        let Some(head) = q.chunks.front_mut() else {
            break;
        };
        let x = head.mass.min(budget);
        pieces.push(Chunk { mass: x, ..*head });
        head.mass -= x;
        head.basis = (head.basis - x).max(0.0);
        q.mass -= x;
        budget -= x;
        if head.mass <= EPS {
            q.chunks.pop_front();
        }
    }
    if q.chunks.is_empty() {
        q.mass = 0.0;
    }
    budget
}

/// Runs the fluid model.
pub fn run(config: &SimConfig, workload: &Workload) -> Result<Metrics, SimError> {
    let dt = config.slot;
    let steps = |seconds: f64| (seconds / dt).round() as usize;
    let cohorts_n = (workload.horizon / dt).ceil() as usize;
    if cohorts_n >= u32::MAX as usize {
        return Err(SimError("too many fluid time slots".into()));
    }
    let offsets: Vec<usize> = (1..=RETRANSMISSIONS)
        .map(|j| steps(crate::copy_offset(j, config.t1)))
        .collect();
    let timer_b = steps(crate::timer_b(config.t1));
    let queues = config.queues();
    let (mut primary, mut secondary) = (Queue::default(), Queue::default());
    primary.capacity = queues.primary_capacity as f64;
    secondary.capacity = queues.secondary_capacity as f64;
    let prsm = config.scheduler == SchedulerKind::Prsm;
    let mut cohorts = Cohorts {
        unanswered: vec![0.0; cohorts_n],
        timed_out: vec![false; cohorts_n],
    };
    let mut m = Metrics::default();
    let (mut all, mut ok) = (Delays::default(), Delays::default());
    let schedule = config.upstream_rate.map_or_else(Vec::new, |r| {
        crate::filter::rate_schedule(workload, r, config.notify_delay)
    });
    let mut tokens = config.upstream_rate.map(|r| (r * UPSTREAM_TAU).max(1.0));
    // The chunks arriving in the current slot, per queue.
    let (mut to_primary, mut to_secondary) = (Vec::new(), Vec::new());
    // Pieces in service, by the parity of the slot they were taken in.
    let mut in_service: [Vec<Chunk>; 2] = Default::default();
    let mut slot = 0;
    loop {
        let t = slot as f64 * dt;
        // What was taken into service two slots ago completes now.
        let done = std::mem::take(&mut in_service[slot % 2]);
        Completion {
            cohorts: &mut cohorts,
            all: &mut all,
            ok: &mut ok,
            m: &mut m,
        }
        .complete(&done, slot, dt);
        in_service[slot % 2] = done;
        in_service[slot % 2].clear();
        let busy =
            primary.mass > EPS || secondary.mass > EPS || in_service.iter().any(|p| !p.is_empty());
        if slot >= cohorts_n + timer_b && !busy {
            break;
        }
        // Timer B of the cohort that arrived 64·T1 ago.
        if let Some(k) = slot.checked_sub(timer_b)
            && k < cohorts_n
        {
            m.failed += cohorts.unanswered[k];
            cohorts.timed_out[k] = true;
        }
        // New originals.
        if slot < cohorts_n {
            let offered = workload.expected_arrivals(t, t + dt);
            m.calls += offered;
            let rate = schedule
                .iter()
                .take_while(|(at, _)| *at <= t)
                .last()
                .map(|&(_, r)| r);
            let admitted = match (&mut tokens, rate) {
                (Some(bucket), Some(r)) => {
                    *bucket = (*bucket + r * dt).min((r * UPSTREAM_TAU).max(1.0));
                    let a = offered.min(*bucket);
                    *bucket -= a;
                    a
                }
                _ => offered,
            };
            m.rejected_upstream += offered - admitted;
            cohorts.unanswered[slot] = admitted;
            if admitted > EPS {
                to_primary.push(Chunk {
                    cohort: slot as u32,
                    mass: admitted,
                    basis: admitted,
                });
            }
        }
        // Retransmissions of cohorts still waiting.
        for &off in &offsets {
            if let Some(k) = slot.checked_sub(off)
                && k < cohorts_n
            {
                let u = cohorts.unanswered[k];
                if u > EPS {
                    m.retransmissions += u;
                    let chunk = Chunk {
                        cohort: k as u32,
                        mass: u,
                        basis: u,
                    };
                    if prsm {
                        to_secondary.push(chunk);
                    } else {
                        to_primary.push(chunk);
                    }
                }
            }
        }
        m.dropped += primary.admit(&to_primary) + secondary.admit(&to_secondary);
        to_primary.clear();
        to_secondary.clear();
        // Service: what is taken now completes one service time later, at the start of
        // slot + 2 (as in the discrete model, a message admitted behind n others waits for the
        // one in service, the n, and its own service).
        let taken = &mut in_service[slot % 2];
        let left = serve(&mut primary, workload.mu_at(t) * dt, taken);
        if prsm {
            serve(&mut secondary, left, taken);
        }
        m.served += taken.iter().map(|c| c.mass).sum::<f64>();
        slot += 1;
    }
    m.peak_primary = primary.peak;
    m.peak_secondary = secondary.peak;
    m.mean_delay_ms = all.mean_ms();
    m.p99_delay_ms = all.quantile_ms(0.99);
    m.mean_delay_ok_ms = ok.mean_ms();
    m.p99_delay_ok_ms = ok.quantile_ms(0.99);
    m.goodput = ok.mass / workload.horizon;
    m.end_s = slot as f64 * dt;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Model, ScenarioKind, simulate};

    fn both(kind: ScenarioKind, s: SchedulerKind, buffer: usize) -> (Metrics, Metrics) {
        let c = SimConfig::new(kind, s, buffer);
        (
            simulate(&c, Model::Des).expect("des"),
            simulate(&c, Model::Fluid).expect("fluid"),
        )
    }

    #[test]
    fn conservation() {
        for s in [SchedulerKind::Fifo, SchedulerKind::Prsm] {
            let (_, m) = both(ScenarioKind::Bulk, s, 5000);
            let sent = m.calls + m.retransmissions;
            assert!((sent - m.served - m.dropped).abs() < 1e-6 * sent, "{m:?}");
            let answered = m.served - m.redundant_served;
            // Every call is answered, or failed and never answered.
            let unanswered_failed = m.failed - m.answered_late;
            assert!(
                (answered + unanswered_failed - m.calls).abs() < 1e-6 * m.calls,
                "{m:?}"
            );
        }
    }

    #[test]
    fn steady_load_has_no_failures_and_tiny_delay() {
        for s in [SchedulerKind::Fifo, SchedulerKind::Prsm] {
            let (_, m) = both(ScenarioKind::Steady, s, 1000);
            assert!(m.failed < 1e-6, "{m:?}");
            assert!(m.retransmissions < 1e-6, "{m:?}");
            // The fluid server has no queueing at ρ < 1: one slot of service.
            assert!(m.mean_delay_ms < 2.0, "{m:?}");
        }
    }

    /// The check that the two models agree, on the paper's headline cases: failed ratio within
    /// 0.02 absolute, mean delay within 20 % or 20 ms, whichever is larger.
    #[test]
    fn fluid_agrees_with_des() {
        for kind in [ScenarioKind::Bulk, ScenarioKind::Slowdown] {
            for s in [SchedulerKind::Fifo, SchedulerKind::Prsm] {
                for buffer in [1000, 10_000] {
                    let (d, f) = both(kind, s, buffer);
                    let why = format!("{kind:?} {s:?} B={buffer}\n des {d:?}\n fluid {f:?}");
                    assert!((d.failed_ratio - f.failed_ratio).abs() < 0.02, "{why}");
                    let tol = (0.2 * d.mean_delay_ms).max(20.0);
                    assert!((d.mean_delay_ms - f.mean_delay_ms).abs() < tol, "{why}");
                }
            }
        }
    }
}
