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

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::{BufferSplit, Metrics, Model, Scenario, ScenarioKind, SchedulerKind, SimConfig};

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

/// Runs `job(i)` for every `i` of `order` (indices below `order.len()`), in that order, on
/// [`std::thread::available_parallelism`] threads; `done(i)` after each success. The first
/// failure (an error, or a panic) stops the rest from starting. Returns the results by index,
/// `None` for jobs not run.
pub(crate) fn parallel<R: Send>(
    order: &[usize],
    job: impl Fn(usize) -> Result<R, String> + Sync,
    done: impl Fn(usize) + Sync,
) -> Vec<Option<Result<R, String>>> {
    let results: Mutex<Vec<Option<Result<R, String>>>> =
        Mutex::new((0..order.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(order.len());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let result = std::panic::catch_unwind(AssertUnwindSafe(|| job(i)))
                        .unwrap_or_else(|_| Err("the model panicked".to_owned()));
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    } else {
                        done(i);
                    }
                    results.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(result);
                }
            });
        }
    });
    results.into_inner().unwrap_or_else(PoisonError::into_inner)
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

// ---------------------------------------------------------------------------------------------
// CSV

/// A JSON object's members in the order they were written (`serde_json::Value` sorts them).
struct Fields(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Fields(members))
            }
        }
        d.deserialize_map(Members)
    }
}

/// Every field of `m`, named, in declaration order (through its `Serialize`, so a field added
/// to [`Metrics`] gets a column without touching this module).
pub(crate) fn fields(
    m: &impl serde::Serialize,
) -> Result<Vec<(String, serde_json::Value)>, String> {
    let json = serde_json::to_string(m).map_err(|e| format!("metrics to CSV: {e}"))?;
    let Fields(members) =
        serde_json::from_str(&json).map_err(|e| format!("metrics to CSV: {e}"))?;
    Ok(members)
}

/// One CSV cell (RFC 4180 quoting when needed).
pub(crate) fn cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn csv_text(outcomes: &[Outcome]) -> Result<String, String> {
    csv_table(
        Some("series"),
        outcomes.iter().map(|o| (o.run.series.name(), &o.metrics)),
    )
}

/// A CSV table: a header of `lead` (when given) and every field of `T` in declaration order,
/// then a row per item: its lead cell (when `lead` is given), then its fields.
pub(crate) fn csv_table<'a, T: serde::Serialize + Default + 'a>(
    lead: Option<&str>,
    rows: impl IntoIterator<Item = (String, &'a T)>,
) -> Result<String, String> {
    let header = fields(&T::default())?;
    let mut text = String::new();
    let names = lead
        .into_iter()
        .chain(header.iter().map(|(n, _)| n.as_str()));
    text.push_str(&names.map(cell).collect::<Vec<_>>().join(","));
    text.push('\n');
    for (first, row) in rows {
        let mut cells: Vec<String> = lead.map(|_| cell(&first)).into_iter().collect();
        for (_, value) in fields(row)? {
            cells.push(match value {
                serde_json::Value::String(s) => cell(&s),
                serde_json::Value::Null => String::new(),
                v => cell(&v.to_string()),
            });
        }
        text.push_str(&cells.join(","));
        text.push('\n');
    }
    Ok(text)
}

// ---------------------------------------------------------------------------------------------
// Plots

/// How a line is drawn: the fluid model's dashed with triangles, the DES's solid with circles,
/// or with hollow squares behind an upstream (hollow markers let a line drawn under another show).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// Dashed, with triangles.
    Dashed,
    /// Solid, with filled circles.
    Solid,
    /// Solid, with hollow squares.
    SolidSquares,
    /// Solid, no markers (a time series).
    Plain,
}

/// One plotted line.
pub(crate) struct Line {
    /// The legend label.
    pub label: String,
    /// The colour.
    pub color: RGBColor,
    /// How the line and its markers are drawn.
    pub look: Look,
    /// The points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A plot's axis descriptions and label formats.
pub(crate) struct Axes<'a> {
    /// The x axis description.
    pub x_desc: &'a str,
    /// The y axis description.
    pub y_desc: &'a str,
    /// How x labels are written.
    pub x_format: &'a dyn Fn(&f64) -> String,
    /// How y labels are written.
    pub y_format: &'a dyn Fn(&f64) -> String,
}

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

fn plot_failed(
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

fn plot_delay(
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

/// A log axis's range around every (positive) point of `lines`: a factor of 2 beyond the
/// extremes.
pub(crate) fn log_range(lines: &[Line]) -> Range<f64> {
    let ys = || lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
    let lo = ys().fold(f64::INFINITY, f64::min);
    let hi = ys().fold(0.0, f64::max);
    if lo.is_finite() && hi > 0.0 {
        lo / 2.0..hi * 2.0
    } else {
        1.0..1000.0
    }
}

/// Draws `lines` into an SVG at `path`.
pub(crate) fn draw<X, Y>(
    path: &Path,
    title: &str,
    x: X,
    y: Y,
    axes: &Axes<'_>,
    lines: &[Line],
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(x, y)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_label_formatter(axes.x_format)
        .y_label_formatter(axes.y_format)
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| fail(&e))?;
    for line in lines {
        let color = line.color;
        let style = color.stroke_width(2);
        let points = || line.points.iter().copied();
        // Legend sample: a 24-pixel stretch of the line with a marker in the middle.
        let sample =
            move |at| EmptyElement::at(at) + PathElement::new(vec![(0, 0), (24, 0)], style);
        match line.look {
            Look::Dashed => {
                chart
                    .draw_series(DashedLineSeries::new(points(), 8, 5, style))
                    .map_err(|e| fail(&e))?
                    .label(&line.label)
                    .legend(move |at| {
                        EmptyElement::at(at)
                            + DashedPathElement::new(vec![(0, 0), (24, 0)], 6, 4, style)
                            + TriangleMarker::new((12, 0), 5, style)
                    });
                chart
                    .draw_series(points().map(|p| TriangleMarker::new(p, 5, style)))
                    .map_err(|e| fail(&e))?;
            }
            Look::Solid => {
                chart
                    .draw_series(LineSeries::new(points(), style))
                    .map_err(|e| fail(&e))?
                    .label(&line.label)
                    .legend(move |at| sample(at) + Circle::new((12, 0), 3, color.filled()));
                chart
                    .draw_series(points().map(|p| Circle::new(p, 3, color.filled())))
                    .map_err(|e| fail(&e))?;
            }
            Look::Plain => {
                chart
                    .draw_series(LineSeries::new(points(), color.stroke_width(1)))
                    .map_err(|e| fail(&e))?
                    .label(&line.label)
                    .legend(sample);
            }
            Look::SolidSquares => {
                let square = move || Rectangle::new([(-5, -5), (5, 5)], style);
                chart
                    .draw_series(LineSeries::new(points(), style))
                    .map_err(|e| fail(&e))?
                    .label(&line.label)
                    .legend(move |at| sample(at) + Rectangle::new([(7, -5), (17, 5)], style));
                chart
                    .draw_series(points().map(|p| EmptyElement::at(p) + square()))
                    .map_err(|e| fail(&e))?;
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Summary

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

fn summary(plan: &Plan, outcomes: &[Outcome], wall: Duration, files: &Files) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        let full = Plan::full();
        assert_eq!(full.runs().len(), 4 * 7 * 5);
        let quick = Plan::quick();
        let runs = quick.runs();
        assert_eq!(runs.len(), 4 * 3 * 5);
        assert!(
            runs.iter()
                .all(|r| r.config.scenario.duration <= QUICK_DURATION)
        );
        let filtered: Vec<&Run> = runs
            .iter()
            .filter(|r| r.series.upstream_factor.is_some())
            .collect();
        assert_eq!(filtered.len(), 4 * 3);
        for r in filtered {
            assert_eq!(r.series.model, Model::Des);
            assert_eq!(r.config.scheduler, SchedulerKind::Fifo);
            let rate = r.config.upstream_rate.unwrap_or(0.0);
            assert!((rate - 0.9 * r.config.mu).abs() < 1e-9, "{rate}");
        }
        // Plan order: scenario, series, buffer.
        assert_eq!(runs[0].name(), "bulk fifo B=100 (des)");
        assert_eq!(runs[1].name(), "bulk fifo B=1000 (des)");
        assert_eq!(runs[3].name(), "bulk prsm B=100 (des)");
        assert_eq!(runs[14].name(), "bulk fifo+rfc7200 B=10000 (des)");
        assert_eq!(runs[15].name(), "bursty fifo B=100 (des)");
    }

    #[test]
    fn series_names_and_labels() {
        let s = Series::new(Model::Fluid, SchedulerKind::Prsm);
        assert_eq!(
            (s.name(), s.label()),
            ("prsm".into(), "PRSM (fluid)".into())
        );
        let s = Series::new(Model::Des, SchedulerKind::Fifo).with_upstream(0.9);
        assert_eq!(
            (s.name(), s.label()),
            ("fifo+rfc7200".into(), "FIFO+RFC 7200 (DES)".into())
        );
    }

    #[test]
    fn csv_columns_follow_the_metrics_fields() {
        let header = fields(&Metrics::default()).unwrap_or_default();
        let names: Vec<&str> = header.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(&names[..3], ["model", "scenario", "scheduler"]);
        assert_eq!(names.last(), Some(&"end_s"));
        assert_eq!(cell("a,b"), "\"a,b\"");
        assert_eq!(cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(cell("fifo+rfc7200"), "fifo+rfc7200");
    }

    #[test]
    fn a_failing_run_is_named() {
        let mut plan = Plan::quick();
        plan.scenarios.truncate(1);
        plan.buffers = vec![1000, 0];
        let e = execute(&plan, false).err().unwrap_or_default();
        assert!(e.contains("bulk fifo B=0 (des)"), "{e}");
        plan.buffers.clear();
        assert!(execute(&plan, false).is_err());
        let mut plan = Plan::quick();
        plan.scenarios.push(plan.scenarios[0].clone());
        let e = execute(&plan, false).err().unwrap_or_default();
        assert!(e.contains("scenario bulk twice"), "{e}");
    }

    /// The files from made-up outcomes (no model runs): every series is plotted, and a run
    /// that answered nothing (delay 0) is left off the log axis instead of breaking it.
    #[test]
    fn files_from_outcomes() {
        let mut plan = Plan::quick();
        plan.scenarios.truncate(2);
        let outcomes: Vec<Outcome> = plan
            .runs()
            .into_iter()
            .enumerate()
            .map(|(i, run)| {
                let metrics = Metrics {
                    model: run.series.model.name(),
                    scenario: run.config.scenario.kind.name(),
                    scheduler: run.config.scheduler.name(),
                    buffer: run.config.buffer,
                    calls: 1000.0,
                    failed_ratio: (i % 7) as f64 / 10.0,
                    mean_delay_ms: (i % 5) as f64 * 1000.0,
                    ..Metrics::default()
                };
                Outcome {
                    run,
                    metrics,
                    seconds: 0.0,
                }
            })
            .collect();
        let dir = std::env::temp_dir().join(format!(
            "loadctl-sweep-unit-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let files = write(&plan, &outcomes, &dir);
        let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap_or_default();
        let svg = std::fs::read_to_string(dir.join("bursty-delay.svg")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        let files = files.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(files.plots.len(), 4);
        assert_eq!(csv.lines().count(), 1 + outcomes.len());
        assert!(csv.starts_with("series,model,scenario,scheduler,buffer,"));
        assert!(svg.starts_with("<svg"));
        for series in &plan.series {
            assert!(svg.contains(&series.label()), "{}", series.label());
        }
        let text = summary(&plan, &outcomes, Duration::from_secs(1), &files);
        assert!(text.contains("fluid vs DES, largest gaps"), "{text}");
        assert!(text.contains("30 runs (18 DES, 12 fluid)"), "{text}");
    }
}
