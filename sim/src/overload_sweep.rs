//! The chain's sweep (`loadctl simulate --overload-sweep`): steady Poisson load from 0.5μ to
//! 5μ × overload control (none, RFC 7200 static, RFC 7339 loss, RFC 7415 rate) × server
//! (FIFO, PRSM) × buffer, each run one call of [`crate::chain::run`], in parallel.
//!
//! Files written into the output directory:
//! - `overload.csv`: one row per run, every [`ChainMetrics`] field;
//! - `overload-goodput-B<b>.svg` and `overload-delay-B<b>.svg` per buffer: goodput and mean
//!   delay against the offered load, one line per control and server;
//! - `stability.csv` and `stability.svg`: the admitted rate of originals at the server per
//!   100 ms over time, with the law's target, for the plan's stability runs (3μ, PRSM,
//!   B = 10,000, loss and rate).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;

use crate::SchedulerKind;
use crate::chain::{ChainConfig, ChainMetrics, ChainRun, Control, TracePoint};
use crate::parallel::parallel;
use crate::plot::{Axes, Line, Look, draw, log_range};
use crate::table::csv_table;

/// Offered loads of the full sweep, × μ.
pub const OFFERED: [f64; 7] = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0];

/// Buffers of the full sweep: B/μ = 1 s, 10 s (below Timer B) and 50 s (above it).
pub const BUFFERS: [usize; 3] = [1000, 10_000, 50_000];

/// The stability plot shows the first this many seconds (the CSV has the whole window).
const STABILITY_PLOT_S: f64 = 30.0;

/// What the sweep runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Offered loads, × μ.
    pub offered: Vec<f64>,
    /// The controls.
    pub controls: Vec<Control>,
    /// The servers.
    pub schedulers: Vec<SchedulerKind>,
    /// Buffer sizes B.
    pub buffers: Vec<usize>,
    /// Arrival window of every run (s).
    pub duration: f64,
    /// The runs whose traces make the stability figure: (offered, scheduler, buffer), for
    /// the controls `loss` and `rate`.
    pub stability: (f64, SchedulerKind, usize),
}

impl Plan {
    /// The full grid: [`OFFERED`] × every control × FIFO, PRSM × [`BUFFERS`], 120 s each
    /// (168 runs); stability at 3μ, PRSM, B = 10,000.
    pub fn full() -> Self {
        Self {
            offered: OFFERED.to_vec(),
            controls: Control::ALL.to_vec(),
            schedulers: vec![SchedulerKind::Fifo, SchedulerKind::Prsm],
            buffers: BUFFERS.to_vec(),
            duration: 120.0,
            stability: (3.0, SchedulerKind::Prsm, 10_000),
        }
    }

    /// A reduced grid: offered 1μ, 3μ, 5μ and B = 10,000 only (24 runs).
    pub fn quick() -> Self {
        Self {
            offered: vec![1.0, 3.0, 5.0],
            buffers: vec![10_000],
            ..Self::full()
        }
    }

    /// Every run, in plan order: buffer, control, scheduler, offered.
    pub fn runs(&self) -> Vec<ChainConfig> {
        let mut runs = Vec::new();
        for &b in &self.buffers {
            for &c in &self.controls {
                for &s in &self.schedulers {
                    for &x in &self.offered {
                        runs.push(ChainConfig::steady(x, self.duration, s, b, c));
                    }
                }
            }
        }
        runs
    }
}

/// Runs every run of `plan` in parallel (the heaviest first); the runs in plan order.
pub fn execute(plan: &Plan) -> Result<Vec<(ChainConfig, ChainRun)>, String> {
    let runs = plan.runs();
    if runs.is_empty() {
        return Err("the plan has no runs".to_owned());
    }
    let name = |c: &ChainConfig| {
        format!(
            "{} {} B={} at {}μ",
            c.control.name(),
            c.base.scheduler.name(),
            c.base.buffer,
            c.base.scenario.background
        )
    };
    for r in &runs {
        r.validate().map_err(|e| format!("{}: {e}", name(r)))?;
    }
    // Cost grows with the load and, without control, with the retransmissions a big buffer
    // lets through.
    let cost = |c: &ChainConfig| {
        let none = if c.control == Control::None { 4.0 } else { 1.0 };
        c.base.scenario.background * none
    };
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| cost(&runs[b]).total_cmp(&cost(&runs[a])).then(a.cmp(&b)));
    let results = parallel(
        &order,
        |i| crate::chain::run(&runs[i]).map_err(|e| e.to_string()),
        |_| {},
    );
    runs.into_iter()
        .zip(results)
        .map(|(config, r)| match r {
            Some(Ok(run)) => Ok((config, run)),
            Some(Err(e)) => Err(format!("{}: {e}", name(&config))),
            None => Err(format!("{}: did not run", name(&config))),
        })
        .collect()
}

/// Runs `plan`, writes its files into `out` and returns a plain-text summary: per buffer the
/// table at 3μ (or the plan's highest load below it), the stability figures, the wall time
/// and the files.
pub fn run(plan: &Plan, out: &Path) -> Result<String, String> {
    let started = Instant::now();
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let outcomes = execute(plan)?;
    let files = write(plan, &outcomes, out)?;
    let mut s = summary(plan, &outcomes);
    let _ = writeln!(
        s,
        "{} runs in {:.1} s wall time",
        outcomes.len(),
        started.elapsed().as_secs_f64()
    );
    let _ = write!(s, "files:   {}", files.join("\n         "));
    Ok(s)
}

fn write(
    plan: &Plan,
    outcomes: &[(ChainConfig, ChainRun)],
    out: &Path,
) -> Result<Vec<String>, String> {
    let mut files = Vec::new();
    let mut put = |name: String, text: String| -> Result<(), String> {
        let path = out.join(&name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        files.push(path.display().to_string());
        Ok(())
    };
    put(
        "overload.csv".into(),
        csv_table(
            None,
            outcomes.iter().map(|(_, r)| (String::new(), &r.metrics)),
        )?,
    )?;
    let (x, scheduler, buffer) = plan.stability;
    let traces: Vec<(Control, &[TracePoint])> = [Control::Loss, Control::Rate]
        .into_iter()
        .filter_map(|c| {
            outcomes
                .iter()
                .find(|(k, _)| {
                    k.control == c
                        && k.base.scheduler == scheduler
                        && k.base.buffer == buffer
                        && k.base.scenario.background == x
                })
                .map(|(_, r)| (c, r.trace.as_slice()))
        })
        .collect();
    if !traces.is_empty() {
        let mut csv = String::from("t_s");
        for (c, _) in &traces {
            let _ = write!(csv, ",{0}_admitted,{0}_target,{0}_delay_ms", c.name());
        }
        csv.push('\n');
        for i in 0..traces[0].1.len() {
            let _ = write!(csv, "{:.1}", traces[0].1[i].t);
            for (_, t) in &traces {
                if let Some(p) = t.get(i) {
                    let _ = write!(csv, ",{},{:.1},{:.1}", p.admitted, p.target, p.delay_ms);
                }
            }
            csv.push('\n');
        }
        put("stability.csv".into(), csv)?;
    }
    let mut plots = Vec::new();
    for &b in &plan.buffers {
        plots.push(plot(plan, outcomes, b, out, Plot::Goodput)?);
        plots.push(plot(plan, outcomes, b, out, Plot::Delay)?);
    }
    if !traces.is_empty() {
        plots.push(plot_stability(plan, &traces, out)?);
    }
    files.extend(plots);
    Ok(files)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Plot {
    Goodput,
    Delay,
}

fn color(control: Control) -> RGBColor {
    match control {
        Control::None => RGBColor(214, 39, 40),
        Control::Static => RGBColor(44, 160, 44),
        Control::Loss => RGBColor(255, 127, 14),
        Control::Rate => RGBColor(31, 119, 180),
    }
}

fn label(control: Control, scheduler: SchedulerKind) -> String {
    let c = match control {
        Control::None => "no control",
        Control::Static => "RFC 7200 static",
        Control::Loss => "RFC 7339 loss",
        Control::Rate => "RFC 7415 rate",
    };
    format!("{c}, {}", scheduler.name().to_uppercase())
}

fn plot(
    plan: &Plan,
    outcomes: &[(ChainConfig, ChainRun)],
    buffer: usize,
    out: &Path,
    what: Plot,
) -> Result<String, String> {
    let mut lines = Vec::new();
    for &c in &plan.controls {
        for &s in &plan.schedulers {
            let mut points: Vec<(f64, f64)> = outcomes
                .iter()
                .filter(|(k, _)| k.control == c && k.base.scheduler == s && k.base.buffer == buffer)
                .map(|(k, r)| {
                    let y = match what {
                        Plot::Goodput => r.metrics.goodput_steady,
                        Plot::Delay => r.metrics.mean_delay_ms,
                    };
                    (k.base.scenario.background, y)
                })
                .filter(|p| what == Plot::Goodput || p.1 > 0.0)
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            lines.push(Line {
                label: label(c, s),
                color: color(c),
                look: match s {
                    SchedulerKind::Prsm => Look::Solid,
                    SchedulerKind::Fifo => Look::Dashed,
                },
                points,
            });
        }
    }
    let x_hi = plan.offered.iter().copied().fold(1.0, f64::max) + 0.25;
    let x_format = |v: &f64| format!("{v:.1}μ");
    let title = |what: &str| {
        format!(
            "chain, B = {buffer}: {what} vs offered load (μ = 1000/s, {} s)",
            plan.duration
        )
    };
    match what {
        Plot::Goodput => {
            let path = out.join(format!("overload-goodput-B{buffer}.svg"));
            let y_hi = lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| p.1))
                .fold(1000.0, f64::max)
                * 1.15;
            draw(
                &path,
                &title("goodput"),
                0.0..x_hi,
                0.0..y_hi,
                &Axes {
                    x_desc: "offered load (× μ)",
                    y_desc: "goodput, calls/s answered within Timer B (2nd half of the window)",
                    x_format: &x_format,
                    y_format: &|v| format!("{v:.0}"),
                },
                &lines,
            )?;
            Ok(path.display().to_string())
        }
        Plot::Delay => {
            let path = out.join(format!("overload-delay-B{buffer}.svg"));
            draw(
                &path,
                &title("mean delay"),
                0.0..x_hi,
                log_range(&lines).log_scale(),
                &Axes {
                    x_desc: "offered load (× μ)",
                    y_desc: "mean delay of calls answered in time (ms, log scale)",
                    x_format: &x_format,
                    y_format: &|v| format!("{v}"),
                },
                &lines,
            )?;
            Ok(path.display().to_string())
        }
    }
}

fn plot_stability(
    plan: &Plan,
    traces: &[(Control, &[TracePoint])],
    out: &Path,
) -> Result<String, String> {
    let path = out.join("stability.svg");
    let mut lines = Vec::new();
    for &(c, t) in traces {
        lines.push(Line {
            label: format!("{} admitted per 100 ms", label(c, plan.stability.1)),
            color: color(c),
            look: Look::Plain,
            points: t
                .iter()
                .filter(|p| p.t < STABILITY_PLOT_S)
                .map(|p| (p.t, p.admitted))
                .collect(),
        });
    }
    let end = traces
        .iter()
        .flat_map(|(_, t)| t.iter().map(|p| p.t + 0.1))
        .fold(0.0, f64::max)
        .min(STABILITY_PLOT_S);
    lines.push(Line {
        label: "μ".into(),
        color: BLACK,
        look: Look::Plain,
        points: vec![(0.0, 1000.0), (end, 1000.0)],
    });
    let hi = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(1000.0, f64::max)
        * 1.1;
    draw(
        &path,
        &format!(
            "admitted rate at the server, {}μ offered, {} B = {}",
            plan.stability.0,
            plan.stability.1.name().to_uppercase(),
            plan.stability.2
        ),
        0.0..end,
        0.0..hi,
        &Axes {
            x_desc: "time (s)",
            y_desc: "originals admitted (per s, 100 ms bins)",
            x_format: &|v| format!("{v:.0}"),
            y_format: &|v| format!("{v:.0}"),
        },
        &lines,
    )?;
    Ok(path.display().to_string())
}

/// The table: per buffer, every control × scheduler at the load nearest 3μ.
fn summary(plan: &Plan, outcomes: &[(ChainConfig, ChainRun)]) -> String {
    let mut s = String::new();
    let x = plan
        .offered
        .iter()
        .copied()
        .min_by(|a, b| (a - 3.0).abs().total_cmp(&(b - 3.0).abs()))
        .unwrap_or(3.0);
    for &b in &plan.buffers {
        let _ = writeln!(
            s,
            "B = {b}, offered {x}μ (μ = 1000/s, {} s):",
            plan.duration
        );
        let _ = writeln!(
            s,
            "  {:<8} {:<5} | {:>8} | {:>8} | {:>7} | {:>8} | {:>10} | {:>10} | {:>9} | {:>8}",
            "control",
            "queue",
            "goodput",
            "steady",
            "shed/s",
            "failed",
            "mean delay",
            "p95 delay",
            "retrans.",
            "adm. CoV"
        );
        for (k, r) in outcomes
            .iter()
            .filter(|(k, _)| k.base.buffer == b && k.base.scenario.background == x)
        {
            let m: &ChainMetrics = &r.metrics;
            let _ = writeln!(
                s,
                "  {:<8} {:<5} | {:>8.1} | {:>8.1} | {:>7.1} | {:>7.2}% | {:>10} | {:>10} | {:>9} | {:>8.4}",
                k.control.name(),
                k.base.scheduler.name(),
                m.goodput,
                m.goodput_steady,
                m.shed_per_s,
                100.0 * m.failed_ratio,
                ms(m.mean_delay_ms),
                ms(m.p95_delay_ms),
                m.retransmissions,
                m.admitted_cov
            );
        }
    }
    s
}

fn ms(v: f64) -> String {
    if v < 1000.0 {
        format!("{v:.1} ms")
    } else {
        format!("{:.2} s", v / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        assert_eq!(Plan::full().runs().len(), 7 * 4 * 2 * 3);
        let quick = Plan::quick().runs();
        assert_eq!(quick.len(), 3 * 4 * 2);
        assert!(quick.iter().all(|r| r.base.buffer == 10_000));
    }
}
