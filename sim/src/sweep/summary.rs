//! The plain-text summary of a sweep: per scenario a table of the DES results, the largest
//! disagreement between the fluid and the DES model, the wall time and the files written.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Files, Outcome, Plan, RFC7200_RATE_FACTOR, Series};
use crate::{Metrics, Model, ScenarioKind, SchedulerKind};

/// A delay for people: `51.6 ms`, `143.28 s`.
fn delay(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

fn percent(x: f64) -> String {
    format!("{:.2}%", 100.0 * x)
}

pub(super) fn summary(plan: &Plan, outcomes: &[Outcome], wall: Duration, files: &Files) -> String {
    let mut s = String::new();
    let find = |kind: ScenarioKind, series: &Series, buffer: usize| {
        outcomes
            .iter()
            .find(|o| {
                o.run.config.scenario.kind == kind
                    && o.run.series == *series
                    && o.run.config.buffer == buffer
            })
            .map(|o| &o.metrics)
    };
    let fifo = Series::new(Model::Des, SchedulerKind::Fifo);
    let prsm = Series::new(Model::Des, SchedulerKind::Prsm);
    let filtered = plan
        .series
        .iter()
        .find(|x| {
            x.model == Model::Des
                && x.scheduler == SchedulerKind::Fifo
                && x.upstream_factor.is_some()
        })
        .copied()
        .unwrap_or(fifo.with_upstream(RFC7200_RATE_FACTOR));
    let or_dash = |m: Option<&Metrics>, f: &dyn Fn(&Metrics) -> String| m.map_or("-".into(), f);
    for scenario in &plan.scenarios {
        let kind = scenario.kind;
        let _ = writeln!(
            s,
            "{} ({} s of arrivals, μ = {} msg/s), DES:",
            kind.name(),
            scenario.duration,
            plan.mu
        );
        let _ = writeln!(
            s,
            "  {:>7} | {:>11} | {:>11} | {:>19} | {:>8} | {:>10} | {:>10}",
            "buffer",
            "fifo failed",
            "prsm failed",
            "fifo+rfc7200 failed",
            "rejected",
            "fifo delay",
            "prsm delay"
        );
        for &b in &plan.buffers {
            let (f, p, r) = (
                find(kind, &fifo, b),
                find(kind, &prsm, b),
                find(kind, &filtered, b),
            );
            let _ = writeln!(
                s,
                "  {:>7} | {:>11} | {:>11} | {:>19} | {:>8} | {:>10} | {:>10}",
                b,
                or_dash(f, &|m| percent(m.failed_ratio)),
                or_dash(p, &|m| percent(m.failed_ratio)),
                or_dash(r, &|m| percent(m.failed_ratio)),
                or_dash(r, &|m| percent(if m.calls > 0.0 {
                    m.rejected_upstream / m.calls
                } else {
                    0.0
                })),
                or_dash(f, &|m| delay(m.mean_delay_ms)),
                or_dash(p, &|m| delay(m.mean_delay_ms)),
            );
        }
        let _ = writeln!(s, "  {}", disagreement(plan, outcomes, kind));
    }
    let des = outcomes
        .iter()
        .filter(|o| o.run.series.model == Model::Des)
        .count();
    let _ = writeln!(
        s,
        "{} runs ({des} DES, {} fluid) in {:.1} s wall time",
        outcomes.len(),
        outcomes.len() - des,
        wall.as_secs_f64()
    );
    let _ = writeln!(s, "results: {}", files.csv.display());
    let _ = write!(
        s,
        "plots:   {}",
        files
            .plots
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join("\n         ")
    );
    s
}

/// The largest disagreement between the fluid and the DES run of the same series and buffer
/// in one scenario, in failed ratio and in mean delay.
fn disagreement(plan: &Plan, outcomes: &[Outcome], kind: ScenarioKind) -> String {
    let mut failed: Option<(f64, &Outcome)> = None;
    let mut delay_gap: Option<(f64, &Outcome, f64, f64)> = None;
    for fl in outcomes
        .iter()
        .filter(|o| o.run.config.scenario.kind == kind && o.run.series.model == Model::Fluid)
    {
        let twin = Series {
            model: Model::Des,
            ..fl.run.series
        };
        let Some(de) = outcomes.iter().find(|o| {
            o.run.config.scenario.kind == kind
                && o.run.series == twin
                && o.run.config.buffer == fl.run.config.buffer
        }) else {
            continue;
        };
        let df = (fl.metrics.failed_ratio - de.metrics.failed_ratio).abs();
        if failed.is_none_or(|(d, _)| df > d) {
            failed = Some((df, fl));
        }
        let dd = (fl.metrics.mean_delay_ms - de.metrics.mean_delay_ms).abs();
        if delay_gap.is_none_or(|(d, ..)| dd > d) {
            delay_gap = Some((dd, fl, fl.metrics.mean_delay_ms, de.metrics.mean_delay_ms));
        }
    }
    let at = |o: &Outcome| format!("{} B={}", o.run.series.name(), o.run.config.buffer);
    match (failed, delay_gap) {
        (Some((df, fo)), Some((dd, dob, fluid_ms, des_ms))) => format!(
            "fluid vs DES, largest gaps: failed ratio {:.2} points ({}); mean delay {} ({}: fluid {}, DES {})",
            100.0 * df,
            at(fo),
            delay(dd),
            at(dob),
            delay(fluid_ms),
            delay(des_ms)
        ),
        _ if plan.series.iter().any(|x| x.model == Model::Fluid) => {
            "fluid vs DES: no series run in both models".to_owned()
        }
        _ => "fluid vs DES: the plan runs no fluid series".to_owned(),
    }
}
