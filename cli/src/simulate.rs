//! `loadctl simulate`: one run of the SIP-server models (PRSM vs FIFO), or the whole sweep;
//! with `--overload-control`, one run of the chain clients → proxy → server with feedback
//! overload control (`loadctl_sim::chain`), or its sweep (`--overload-sweep`).
//!
//! The models live in `loadctl-sim`; this module only turns flags into a
//! [`loadctl_sim::SimConfig`] (and a [`loadctl_sim::chain::ChainConfig`]) and prints the
//! metrics (one JSON object with `--json`, a readable table otherwise).

use loadctl_sim::chain::{ChainConfig, Control};
use loadctl_sim::{BufferSplit, Model, ScenarioKind, SchedulerKind, SimConfig};

/// The flags of `loadctl simulate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Overload cause (default bulk; steady with --offered).
    #[arg(long, value_name = "bulk|bursty|slowdown|steady")]
    pub scenario: Option<String>,
    /// Steady Poisson arrivals at this multiple of μ (e.g. 3: 3μ calls/s): the scenario's
    /// background rate, `steady` unless --scenario says otherwise.
    #[arg(long, value_name = "X")]
    pub offered: Option<f64>,
    /// How long calls arrive (s); default the scenario's.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Run the chain clients → stateful proxy → server, with this overload control between
    /// proxy and server: none, an RFC 7200 rate rule at μ (static), RFC 7339 loss-based or
    /// RFC 7415 rate-based feedback.
    #[arg(long, value_name = "none|static|loss|rate")]
    pub overload_control: Option<String>,
    /// Queueing discipline of the server.
    #[arg(long, default_value = "prsm", value_name = "fifo|prsm")]
    pub scheduler: String,
    /// Buffer size B in messages.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub buffer: usize,
    /// How PRSM's two queues share B: `even` (⌈B/2⌉ + ⌊B/2⌋, the FIFO's memory) or `each`.
    #[arg(long, default_value = "even", value_name = "even|each")]
    pub split: String,
    /// Service rate μ in messages per second (scenario rates scale with it).
    #[arg(long, default_value_t = 1000.0, value_name = "R")]
    pub mu: f64,
    /// Model: discrete-event simulation or the fluid (cohort) model.
    #[arg(long, default_value = "des", value_name = "des|fluid")]
    pub model: String,
    /// Seed of the arrival process.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
    /// An upstream enforces an RFC 7200 rate rule of this many INVITEs/s, pushed by the server.
    #[arg(long, value_name = "R")]
    pub upstream_rate: Option<f64>,
    /// How long after a capacity change the server's new rate applies upstream (s).
    #[arg(long, default_value_t = 0.25, value_name = "SECONDS")]
    pub notify_delay: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Run every scenario × scheduler × buffer for both models, write CSV and SVG plots.
    #[arg(long)]
    pub sweep: bool,
    /// Where the sweep writes (default: sim-out).
    #[arg(long, value_name = "DIR")]
    pub out: Option<String>,
    /// A reduced sweep (three buffers, shorter scenarios): what CI runs.
    #[arg(long)]
    pub quick: bool,
    /// Sweep the chain: offered load 0.5μ … 5μ × control × scheduler × buffer, plus the
    /// stability traces; CSV and SVG plots into --out.
    #[arg(long)]
    pub overload_sweep: bool,
}

fn parse<T>(what: &str, value: &str, f: impl Fn(&str) -> Option<T>) -> Result<T, String> {
    f(value).ok_or_else(|| format!("unknown {what} '{value}'"))
}

fn config(a: &Args) -> Result<(SimConfig, Model), String> {
    let default = if a.offered.is_some() {
        "steady"
    } else {
        "bulk"
    };
    let name = a.scenario.as_deref().unwrap_or(default);
    let kind = parse("scenario", name, ScenarioKind::parse)?;
    let scheduler = parse("scheduler", &a.scheduler, SchedulerKind::parse)?;
    let mut c = SimConfig::new(kind, scheduler, a.buffer);
    if let Some(x) = a.offered {
        c.scenario.background = x;
    }
    if let Some(d) = a.duration {
        c.scenario.duration = d;
    }
    c.split = parse("split", &a.split, BufferSplit::parse)?;
    c.mu = a.mu;
    c.seed = a.seed;
    c.upstream_rate = a.upstream_rate;
    c.notify_delay = a.notify_delay;
    let model = parse("model", &a.model, Model::parse)?;
    c.validate().map_err(|e| e.to_string())?;
    Ok((c, model))
}

/// Prints `value` as one JSON object; returns the exit code.
fn print_json(value: &impl serde::Serialize) -> u8 {
    match serde_json::to_string(value) {
        Ok(s) => {
            println!("{s}");
            0
        }
        Err(e) => {
            eprintln!("loadctl: simulate: {e}");
            2
        }
    }
}

/// One run of the chain.
fn run_chain(a: &Args, control: &str) -> u8 {
    let chain = config(a).and_then(|(base, _)| {
        let control = parse("overload control", control, Control::parse)?;
        Ok(ChainConfig::new(base, control))
    });
    let result = chain.and_then(|c| loadctl_sim::chain::run(&c).map_err(|e| e.to_string()));
    let m = match result {
        Ok(r) => r.metrics,
        Err(e) => {
            eprintln!("loadctl: simulate: {e}");
            return 2;
        }
    };
    if a.json {
        return print_json(&m);
    }
    println!(
        "chain: {} at {:.2}μ, proxy with {} control, {} server B={} μ={}",
        m.scenario, m.offered, m.control, m.scheduler, m.buffer, m.mu
    );
    let rows = [
        ("calls offered", m.calls),
        ("goodput (calls/s answered within Timer B)", m.goodput),
        ("shed by the proxy (503)", m.shed),
        ("shed per s", m.shed_per_s),
        ("failed (no final answer before Timer B)", m.failed),
        ("failed ratio", m.failed_ratio),
        ("503 from the server", m.server_503),
        ("answered after Timer B", m.answered_late),
        ("mean delay, answered in time (ms)", m.mean_delay_ms),
        ("p95 delay, answered in time (ms)", m.p95_delay_ms),
        ("retransmissions sent by the proxy", m.retransmissions),
        ("messages served", m.served),
        ("redundant messages served", m.redundant_served),
        ("messages dropped", m.dropped),
        ("admitted rate after 5 s, mean (/s)", m.admitted_mean),
        ("admitted rate per 100 ms, CoV", m.admitted_cov),
        ("feedback updates applied", m.feedback_updates),
    ];
    print_rows(&rows);
    0
}

/// Prints named figures, one a line.
fn print_rows(rows: &[(&str, f64)]) {
    for (name, v) in rows {
        println!("  {name:<42} {v:>14.3}");
    }
}

/// Runs the command; returns the exit code.
pub fn run(a: &Args) -> u8 {
    if a.overload_sweep {
        let out = a.out.as_deref().unwrap_or("sim-out");
        let plan = if a.quick {
            loadctl_sim::overload_sweep::Plan::quick()
        } else {
            loadctl_sim::overload_sweep::Plan::full()
        };
        return match loadctl_sim::overload_sweep::run(&plan, std::path::Path::new(out)) {
            Ok(summary) => {
                println!("{summary}");
                0
            }
            Err(e) => {
                eprintln!("loadctl: simulate --overload-sweep: {e}");
                2
            }
        };
    }
    if let Some(control) = &a.overload_control {
        return run_chain(a, control);
    }
    if a.sweep {
        let out = a.out.as_deref().unwrap_or("sim-out");
        let plan = if a.quick {
            loadctl_sim::sweep::Plan::quick()
        } else {
            loadctl_sim::sweep::Plan::full()
        };
        return match loadctl_sim::sweep::run(&plan, std::path::Path::new(out), !a.json) {
            Ok(summary) => {
                println!("{summary}");
                0
            }
            Err(e) => {
                eprintln!("loadctl: simulate --sweep: {e}");
                2
            }
        };
    }
    let (config, model) = match config(a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("loadctl: simulate: {e}");
            return 2;
        }
    };
    match loadctl_sim::simulate(&config, model) {
        Ok(m) if a.json => print_json(&m),
        Ok(m) => {
            println!(
                "{} {} B={} μ={} ({}){}",
                m.scenario,
                m.scheduler,
                m.buffer,
                m.mu,
                m.model,
                if m.upstream_rate > 0.0 {
                    format!(", upstream rate rule {}/s", m.upstream_rate)
                } else {
                    String::new()
                }
            );
            let rows = [
                ("calls offered", m.calls),
                ("failed (no 100 Trying before Timer B)", m.failed),
                ("failed ratio", m.failed_ratio),
                ("rejected upstream (503)", m.rejected_upstream),
                ("mean response delay, all answered (ms)", m.mean_delay_ms),
                ("p99 response delay, all answered (ms)", m.p99_delay_ms),
                ("mean response delay, in time (ms)", m.mean_delay_ok_ms),
                ("p99 response delay, in time (ms)", m.p99_delay_ok_ms),
                ("answered after Timer B", m.answered_late),
                ("retransmissions sent", m.retransmissions),
                ("redundant messages served", m.redundant_served),
                ("messages served", m.served),
                ("messages dropped", m.dropped),
                ("peak primary queue", m.peak_primary),
                ("peak secondary queue", m.peak_secondary),
                ("goodput (calls/s answered in time)", m.goodput),
            ];
            print_rows(&rows);
            0
        }
        Err(e) => {
            eprintln!("loadctl: simulate: {e}");
            2
        }
    }
}
