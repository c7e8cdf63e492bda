//! The two figures per scenario of a buffer sweep: failed ratio and mean delay against the
//! buffer size, one line per series and model.

use std::ops::Range;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::{Outcome, Plan, Series};
use crate::plot::{Axes, Line, Look, draw, log_range};
use crate::{Metrics, Model, Scenario, SchedulerKind};

/// The x axis of the buffer sweeps.
fn buffer_axes<'a>(y_desc: &'a str, y_format: &'a dyn Fn(&f64) -> String) -> Axes<'a> {
    Axes {
        x_desc: "buffer size B (messages, log scale)",
        y_desc,
        x_format: &|v| format!("{v:.0}"),
        y_format,
    }
}

fn color(series: &Series) -> RGBColor {
    match (series.scheduler, series.upstream_factor.is_some()) {
        (SchedulerKind::Fifo, false) => RGBColor(214, 39, 40),
        (SchedulerKind::Prsm, false) => RGBColor(31, 119, 180),
        (SchedulerKind::Fifo, true) => RGBColor(44, 160, 44),
        (SchedulerKind::Prsm, true) => RGBColor(148, 103, 189),
    }
}

/// One line per series of the plan, `y` of each run of `outcomes` (one scenario) by buffer.
fn lines(plan: &Plan, outcomes: &[&Outcome], y: impl Fn(&Metrics) -> f64) -> Vec<Line> {
    plan.series
        .iter()
        .map(|series| {
            let mut points: Vec<(f64, f64)> = outcomes
                .iter()
                .filter(|o| o.run.series == *series)
                .map(|o| (o.run.config.buffer as f64, y(&o.metrics)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Line {
                label: series.label(),
                color: color(series),
                look: match (series.model, series.upstream_factor) {
                    (Model::Fluid, _) => Look::Dashed,
                    (Model::Des, None) => Look::Solid,
                    (Model::Des, Some(_)) => Look::SolidSquares,
                },
                points,
            }
        })
        .collect()
}

fn buffer_range(plan: &Plan) -> Range<f64> {
    let lo = plan.buffers.iter().copied().min().unwrap_or(1) as f64;
    let hi = plan.buffers.iter().copied().max().unwrap_or(1) as f64;
    lo / 1.5..hi * 1.5
}

fn title(plan: &Plan, scenario: &Scenario, what: &str) -> String {
    format!(
        "{}: {what} (μ = {} msg/s, {} s of arrivals)",
        scenario.kind.name(),
        plan.mu,
        scenario.duration
    )
}

pub(super) fn plot_failed(
    out: &Path,
    plan: &Plan,
    scenario: &Scenario,
    outcomes: &[&Outcome],
) -> Result<PathBuf, String> {
    let path = out.join(format!("{}-failed.svg", scenario.kind.name()));
    let lines = lines(plan, outcomes, |m| m.failed_ratio);
    draw(
        &path,
        &title(plan, scenario, "failed calls vs buffer"),
        buffer_range(plan).log_scale(),
        0.0..1.0,
        &buffer_axes("failed call ratio (no 100 Trying before Timer B)", &|v| {
            format!("{v:.1}")
        }),
        &lines,
    )?;
    Ok(path)
}

pub(super) fn plot_delay(
    out: &Path,
    plan: &Plan,
    scenario: &Scenario,
    outcomes: &[&Outcome],
) -> Result<PathBuf, String> {
    let path = out.join(format!("{}-delay.svg", scenario.kind.name()));
    let mut lines = lines(plan, outcomes, |m| m.mean_delay_ms);
    // A log axis has no room for 0 (a run that answered nothing).
    for l in &mut lines {
        l.points.retain(|p| p.1 > 0.0);
    }
    draw(
        &path,
        &title(plan, scenario, "mean response delay vs buffer"),
        buffer_range(plan).log_scale(),
        log_range(&lines).log_scale(),
        &buffer_axes("mean response delay to 100 Trying (ms)", &|v| {
            format!("{v}")
        }),
        &lines,
    )?;
    Ok(path)
}
