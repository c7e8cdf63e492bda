//! What a run prints: the figures with their spread over rounds, the targets and whether each
//! was met, the information bounds and whether they held, how busy the machine was (all on
//! stderr), and with `--json` one JSON object on stdout.

use std::collections::BTreeMap;

use loadctl_bench::machine::Machine;

use super::BUSY;
use super::checks::{Bound, Check, shown};
use super::rounds::spread;
use super::throughput::Throughput;

/// Everything a run measured, for [`print`].
pub(crate) struct Results<'a> {
    pub(crate) machine: &'a Machine,
    /// Every figure: the throughput figures' medians over rounds, the others measured once.
    pub(crate) out: BTreeMap<String, f64>,
    pub(crate) throughput: Throughput,
    pub(crate) checks: Vec<Check>,
    /// What one `Instant::now()` read costs (every latency sample holds two).
    pub(crate) clock_read_ns: f64,
    pub(crate) rounds: usize,
    pub(crate) window: f64,
    pub(crate) run_seconds: f64,
}

/// Prints the tables to stderr and, with `json`, the JSON object to stdout.
pub(crate) fn print(r: Results<'_>, json: bool) {
    let per_round = &r.throughput.per_round;
    let keys = r
        .out
        .keys()
        .map(|k| k.chars().count())
        .max()
        .unwrap_or(0)
        .max(28);
    eprintln!(
        "\n{:<keys$} {:>14}   min – max over {} rounds",
        "figure", "value", r.rounds
    );
    for (k, v) in &r.out {
        let range = per_round.get(k).map_or(String::new(), |v| {
            let (lo, hi) = spread(v);
            format!("{} – {}", shown(k, lo), shown(k, hi))
        });
        eprintln!("{k:<keys$} {:>14}   {range}", shown(k, *v));
    }
    let width = r
        .checks
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(40);
    eprintln!(
        "\n{:<width$} {:>10}  {:<26} target",
        "target", "median", "min – max (rounds met)"
    );
    for c in &r.checks {
        let m = c.median();
        // A target met or missed, or an information bound holding or broken.
        let judged = |v: f64| c.bound.met(v).or(c.bound.holds(v));
        let mark = match judged(m) {
            Some(true) => " ✓",
            Some(false) => " ✗",
            None => "",
        };
        let range = if c.values.len() > 1 {
            let (lo, hi) = spread(&c.values);
            let met = c
                .values
                .iter()
                .filter(|&&v| judged(v) == Some(true))
                .count();
            match c.bound {
                Bound::Peer | Bound::Info => format!("{} – {}", c.shown(lo), c.shown(hi)),
                _ => format!(
                    "{} – {} ({met}/{})",
                    c.shown(lo),
                    c.shown(hi),
                    c.values.len()
                ),
            }
        } else {
            "(measured once)".to_owned()
        };
        eprintln!(
            "{:<width$} {:>10}  {range:<26} {}{mark}",
            c.name,
            c.shown(m),
            c.target()
        );
    }
    eprintln!(
        "(latency samples include two Instant::now() reads: {:.1} ns per read)",
        r.clock_read_ns
    );
    if !r.throughput.busy_groups.is_empty() {
        eprintln!(
            "busy machine: other processes or the hypervisor took ≥ {:.0} % of CPU time while \
             these ran, so their multi-thread figures (and tails) measure what was left: {}",
            BUSY * 100.0,
            r.throughput.busy_groups.join("; ")
        );
    }
    eprintln!("machine: {}", r.machine);
    if let Some(load) = r.throughput.load {
        eprintln!("while the throughput figures ran: {load}");
    }
    eprintln!("run took {:.1} s", r.run_seconds);
    if json {
        let mut obj: serde_json::Map<String, serde_json::Value> = r
            .out
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::json!(v)))
            .collect();
        obj.insert("machine".into(), r.machine.to_json());
        obj.insert("rounds".into(), serde_json::json!(r.rounds));
        obj.insert("round_seconds".into(), serde_json::json!(r.window));
        obj.insert("run_seconds".into(), serde_json::json!(r.run_seconds));
        obj.insert("per_round".into(), serde_json::json!(per_round));
        obj.insert(
            "load".into(),
            serde_json::json!({
                "others_cpu_share": r.throughput.load.map(|l| l.others),
                "steal_share": r.throughput.load.map(|l| l.steal),
                "groups": r.throughput.group_loads,
            }),
        );
        obj.insert(
            "targets".into(),
            serde_json::Value::Object(
                r.checks
                    .iter()
                    .map(|c| (c.name.clone(), c.json()))
                    .collect(),
            ),
        );
        println!("{}", serde_json::Value::Object(obj));
    }
}
