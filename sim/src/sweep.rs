//! The sweep: every scenario × buffer size × series, run in parallel, written out as one CSV
//! and two SVG plots per scenario, and summed up as a plain-text table.
//!
//! This module owns what a sweep runs ([`Plan`], [`Series`], [`Run`]; the built-in grids are
//! [`Plan::full`] and CI's [`Plan::quick`]), how the runs are spread over threads and how their
//! progress is shown ([`execute`]), and what comes out of them ([`write()`]: `results.csv`,
//! `<scenario>-failed.svg`, `<scenario>-delay.svg`; and the summary [`run`] returns). It owns
//! no model: every run is one call of [`crate::simulate`], so the discrete-event model
//! ([`crate::des`]), the fluid model ([`crate::fluid`]), the scenarios ([`crate::scenario`]) and
//! the RFC 7200 upstream ([`crate::filter`]) are reached only through [`SimConfig`] and
//! [`Metrics`]; a field added to [`Metrics`] becomes a CSV column by itself. Its seams:
//! - in: a [`Plan`] (its fields are public, so a caller can build its own grid);
//! - the CLI (`loadctl simulate --sweep [--quick] [--out DIR]`) calls [`Plan::full`] or
//!   [`Plan::quick`] and [`run`], and prints the summary [`run`] returns;
//! - out: the files [`write()`] leaves in the output directory, and [`execute`]'s
//!   [`Outcome`]s for a caller that wants the numbers without the files.
//!
//! Plots are drawn with `plotters`' SVG backend and no font backend: SVG text is written as
//! `<text>` elements that the viewer renders with its own fonts, and plotters lays labels out
//! with its built-in width estimate, so no font file, fontconfig or freetype is needed.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

mod figures;
mod summary;

use crate::parallel::parallel;
use crate::table::csv_table;
use crate::{BufferSplit, Metrics, Model, Scenario, ScenarioKind, SchedulerKind, SimConfig};
use figures::{plot_delay, plot_failed};
use summary::summary;

/// Buffer sizes (messages) of the full sweep.
pub const FULL_BUFFERS: [usize; 7] = [100, 500, 1000, 5000, 10000, 50000, 200000];

/// Buffer sizes (messages) of the quick sweep.
pub const QUICK_BUFFERS: [usize; 3] = [100, 1000, 10000];

/// The quick sweep's scenario duration (s): arrivals stop after two minutes instead of five.
/// Every overload event of the default scenarios (the bulk arrival at 20 s, the slowdown from
/// 20 to 30 s, the bursty on/off periods of seconds) still happens well inside it.
pub const QUICK_DURATION: f64 = 120.0;

/// The RFC 7200 rate rule the overloaded server pushes upstream, as a multiple of μ: 0.9·μ
/// INVITEs per second.
pub const RFC7200_RATE_FACTOR: f64 = 0.9;

/// One line of a plot: a model and a server configuration, run at every buffer size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Series {
    /// Which model runs it.
    pub model: Model,
    /// The server's queueing discipline.
    pub scheduler: SchedulerKind,
    /// An upstream enforcing an RFC 7200 rate rule of this multiple of μ INVITEs/s (see
    /// [`crate::filter`]); `None` for no upstream.
    pub upstream_factor: Option<f64>,
}

impl Series {
    /// A series with no upstream.
    pub const fn new(model: Model, scheduler: SchedulerKind) -> Self {
        Self {
            model,
            scheduler,
            upstream_factor: None,
        }
    }

    /// The same series behind an upstream enforcing `factor`·μ INVITEs/s.
    pub const fn with_upstream(self, factor: f64) -> Self {
        Self {
            upstream_factor: Some(factor),
            ..self
        }
    }

    /// The `series` column of `results.csv`: the scheduler, `+rfc7200` with an upstream
    /// (`fifo`, `prsm`, `fifo+rfc7200`). The model has its own column.
    pub fn name(&self) -> String {
        match self.upstream_factor {
            None => self.scheduler.name().to_owned(),
            Some(_) => format!("{}+rfc7200", self.scheduler.name()),
        }
    }

    /// The legend label: `FIFO (DES)`, `PRSM (fluid)`, `FIFO+RFC 7200 (DES)`.
    pub fn label(&self) -> String {
        let model = match self.model {
            Model::Des => "DES",
            Model::Fluid => "fluid",
        };
        let upstream = if self.upstream_factor.is_some() {
            "+RFC 7200"
        } else {
            ""
        };
        format!(
            "{}{upstream} ({model})",
            self.scheduler.name().to_uppercase()
        )
    }
}

/// What a sweep runs: every scenario × buffer × series, with the settings shared by all runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The scenarios, with their parameters: at most one per [`ScenarioKind`], since files,
    /// plots and the summary are named by the kind.
    pub scenarios: Vec<Scenario>,
    /// Buffer sizes B (messages), the plots' x axis.
    pub buffers: Vec<usize>,
    /// The series run for every scenario and buffer.
    pub series: Vec<Series>,
    /// Service rate μ (messages/s).
    pub mu: f64,
    /// Seed of every run's arrival process.
    pub seed: u64,
    /// How PRSM splits B between its two queues.
    pub split: BufferSplit,
    /// The fluid model's time step Δ (s).
    pub slot: f64,
}

impl Plan {
    /// The series of both built-in plans: FIFO and PRSM in both models, and FIFO behind an
    /// upstream enforcing the RFC 7200 rate rule 0.9·μ (DES), the scenario that combines the
    /// two halves of loadctl.
    pub fn default_series() -> Vec<Series> {
        vec![
            Series::new(Model::Des, SchedulerKind::Fifo),
            Series::new(Model::Des, SchedulerKind::Prsm),
            Series::new(Model::Fluid, SchedulerKind::Fifo),
            Series::new(Model::Fluid, SchedulerKind::Prsm),
            Series::new(Model::Des, SchedulerKind::Fifo).with_upstream(RFC7200_RATE_FACTOR),
        ]
    }

    /// Everything: the four scenarios with their documented defaults, the buffers
    /// [`FULL_BUFFERS`], the [`Plan::default_series`]; μ = 1000, seed 1, even split, Δ = 1 ms
    /// (the [`SimConfig::new`] defaults). 140 runs.
    pub fn full() -> Self {
        let defaults = SimConfig::new(ScenarioKind::Steady, SchedulerKind::Fifo, 1);
        Self {
            scenarios: ScenarioKind::ALL.map(Scenario::defaults).to_vec(),
            buffers: FULL_BUFFERS.to_vec(),
            series: Self::default_series(),
            mu: defaults.mu,
            seed: defaults.seed,
            split: defaults.split,
            slot: defaults.slot,
        }
    }

    /// CI's reduced sweep: [`Plan::full`] with the buffers [`QUICK_BUFFERS`] and every
    /// scenario's duration cut to [`QUICK_DURATION`] (120 s instead of 300 s; `steady` is
    /// 120 s anyway). 60 runs.
    pub fn quick() -> Self {
        let mut plan = Self::full();
        plan.buffers = QUICK_BUFFERS.to_vec();
        for s in &mut plan.scenarios {
            s.duration = s.duration.min(QUICK_DURATION);
        }
        plan
    }

    /// Every run, in plan order: scenario, then series, then buffer.
    pub fn runs(&self) -> Vec<Run> {
        let mut runs = Vec::new();
        for scenario in &self.scenarios {
            for series in &self.series {
                for &buffer in &self.buffers {
                    let mut config = SimConfig::new(scenario.kind, series.scheduler, buffer);
                    config.scenario = scenario.clone();
                    config.mu = self.mu;
                    config.seed = self.seed;
                    config.split = self.split;
                    config.slot = self.slot;
                    config.upstream_rate = series.upstream_factor.map(|f| f * self.mu);
                    runs.push(Run {
                        series: *series,
                        config,
                    });
                }
            }
        }
        runs
    }
}

/// One run of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The series it belongs to (model, scheduler, upstream).
    pub series: Series,
    /// The configuration [`crate::simulate`] gets.
    pub config: SimConfig,
}

impl Run {
    /// How messages name the run: `bulk fifo+rfc7200 B=1000 (des)`.
    pub fn name(&self) -> String {
        format!(
            "{} {} B={} ({})",
            self.config.scenario.kind.name(),
            self.series.name(),
            self.config.buffer,
            self.series.model.name()
        )
    }

    /// A rough relative cost, to start the longest runs first. Measured (μ = 1000, release
    /// build) every run takes 0.1–0.3 s, DES or fluid, growing with the calls offered; a FIFO
    /// behind a big buffer serves more retransmissions, so the buffer breaks ties.
    fn cost(&self) -> f64 {
        let c = &self.config;
        let calls = c
            .scenario
            .realise(c.mu, c.seed)
            .expected_arrivals(0.0, c.scenario.duration);
        calls * (1.0 + 0.1 * (c.buffer as f64).log10())
    }
}

/// A finished run.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// What ran.
    pub run: Run,
    /// What it measured.
    pub metrics: Metrics,
    /// How long it took (wall clock, s).
    pub seconds: f64,
}

/// How the runs report progress.
enum Reporter {
    /// Nothing.
    Quiet,
    /// An `indicatif` bar on stderr (a terminal).
    Bar(indicatif::ProgressBar),
    /// A line on stderr as each scenario finishes (stderr is not a terminal).
    Lines {
        /// Runs still to finish, per scenario of the plan.
        left: Vec<AtomicUsize>,
        started: Instant,
    },
}

impl Reporter {
    fn new(plan: &Plan, runs: usize, progress: bool) -> Self {
        if !progress {
            return Reporter::Quiet;
        }
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(runs as u64),
                indicatif::ProgressDrawTarget::stderr(),
            );
            let style = indicatif::ProgressStyle::with_template(
                "{elapsed:>4} [{wide_bar}] {pos}/{len} runs, ETA {eta} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style.progress_chars("=> "));
            return Reporter::Bar(bar);
        }
        let per_scenario = plan.series.len() * plan.buffers.len();
        Reporter::Lines {
            left: plan
                .scenarios
                .iter()
                .map(|_| AtomicUsize::new(per_scenario))
                .collect(),
            started: Instant::now(),
        }
    }

    /// Run `run` (of scenario number `scenario`) finished.
    fn finished(&self, scenario: usize, run: &Run) {
        match self {
            Reporter::Quiet => {}
            Reporter::Bar(bar) => {
                bar.set_message(run.name());
                bar.inc(1);
            }
            Reporter::Lines { left, started } => {
                if left[scenario].fetch_sub(1, Ordering::AcqRel) == 1 {
                    eprintln!(
                        "sweep: {} done ({:.1} s)",
                        run.config.scenario.kind.name(),
                        started.elapsed().as_secs_f64()
                    );
                }
            }
        }
    }

    fn done(&self) {
        if let Reporter::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Runs every run of `plan` on [`std::thread::available_parallelism`] threads, the longest
/// first, and returns the outcomes in plan order ([`Plan::runs`]). With `progress`, shows a
/// progress bar on stderr when it is a terminal, and a line per finished scenario otherwise.
///
/// The first run that fails (an error, or a panic) stops the sweep: runs not yet started are
/// not started, and the error names the run.
pub fn execute(plan: &Plan, progress: bool) -> Result<Vec<Outcome>, String> {
    let runs = plan.runs();
    if runs.is_empty() {
        return Err("the plan has no runs (no scenario, buffer or series)".to_owned());
    }
    for (i, s) in plan.scenarios.iter().enumerate() {
        if plan.scenarios[..i].iter().any(|t| t.kind == s.kind) {
            return Err(format!("the plan has scenario {} twice", s.kind.name()));
        }
    }
    for r in &runs {
        r.config
            .validate()
            .map_err(|e| format!("{}: {e}", r.name()))?;
    }
    let per_scenario = plan.series.len() * plan.buffers.len();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    let costs: Vec<f64> = runs.iter().map(Run::cost).collect();
    order.sort_by(|&a, &b| costs[b].total_cmp(&costs[a]).then(a.cmp(&b)));

    let reporter = Reporter::new(plan, runs.len(), progress);
    let results = parallel(
        &order,
        |i| {
            let run = &runs[i];
            let started = Instant::now();
            crate::simulate(&run.config, run.series.model)
                .map(|m| (m, started.elapsed().as_secs_f64()))
                .map_err(|e| e.to_string())
        },
        |i| reporter.finished(i / per_scenario, &runs[i]),
    );
    reporter.done();

    let errors: Vec<String> = results
        .iter()
        .zip(&runs)
        .filter_map(|(r, run)| match r {
            Some(Err(e)) => Some(format!("{}: {e}", run.name())),
            _ => None,
        })
        .collect();
    if let Some(first) = errors.first() {
        return Err(match errors.len() {
            1 => first.clone(),
            n => format!("{first} (and {} other failed runs)", n - 1),
        });
    }
    results
        .into_iter()
        .zip(runs)
        .map(|(r, run)| match r {
            Some(Ok((metrics, seconds))) => Ok(Outcome {
                run,
                metrics,
                seconds,
            }),
            _ => Err(format!("{}: did not run", run.name())),
        })
        .collect()
}

/// Runs `plan` (see [`execute`]), writes its files into `out` (see [`write()`]) and returns a
/// plain-text summary: per scenario, a table of the DES results (failed ratios of FIFO, PRSM
/// and FIFO behind the RFC 7200 upstream, the share the upstream rejected, mean delays), the
/// largest disagreement between the fluid and the DES model, then the wall time and the files
/// written.
pub fn run(plan: &Plan, out: &Path, progress: bool) -> Result<String, String> {
    let started = Instant::now();
    // Fail on an unusable directory before spending the runs.
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let outcomes = execute(plan, progress)?;
    let files = write(plan, &outcomes, out)?;
    Ok(summary(plan, &outcomes, started.elapsed(), &files))
}

/// The files a sweep wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Files {
    /// `results.csv`.
    pub csv: PathBuf,
    /// The plots, two per scenario in plan order: `<scenario>-failed.svg`, then
    /// `<scenario>-delay.svg`.
    pub plots: Vec<PathBuf>,
}

/// Writes the outcomes of `plan` into `out` (created if missing):
/// - `results.csv`: a header row, then one row per outcome in the order given: the `series`
///   column ([`Series::name`]), then every [`Metrics`] field in declaration order (the model
///   is the `model` column);
/// - per scenario, `<scenario>-failed.svg` (failed call ratio vs buffer size, log x) and
///   `<scenario>-delay.svg` (mean response delay in ms vs buffer size, log x and y), one line
///   per series of the plan: DES solid, fluid dashed.
pub fn write(plan: &Plan, outcomes: &[Outcome], out: &Path) -> Result<Files, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let csv = out.join("results.csv");
    std::fs::write(&csv, csv_text(outcomes)?)
        .map_err(|e| format!("cannot write {}: {e}", csv.display()))?;
    let mut plots = Vec::new();
    for scenario in &plan.scenarios {
        let mine: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.run.config.scenario.kind == scenario.kind)
            .collect();
        plots.push(plot_failed(out, plan, scenario, &mine)?);
        plots.push(plot_delay(out, plan, scenario, &mine)?);
    }
    Ok(Files { csv, plots })
}

fn csv_text(outcomes: &[Outcome]) -> Result<String, String> {
    csv_table(
        Some("series"),
        outcomes.iter().map(|o| (o.run.series.name(), &o.metrics)),
    )
}

#[cfg(test)]
mod tests;
