//! The side-by-side harness: loadctl and its peers on the standard workload, in one run.
//!
//! `cargo run --release -p loadctl-bench -- [--json] [--seconds S] [--rounds N] [--threads 1,2]`
//!
//! With `--json` a single JSON object goes to stdout (requests per second unless the key says
//! otherwise); human-readable tables always go to stderr. Every run starts with the machine
//! line (CPU model, online CPUs, cache sizes, transparent huge page mode; JSON key `machine`).
//!
//! Throughput figures are measured in groups whose members are compared with each other (a
//! ratio target's two figures are always in one group). A group runs in `--rounds` interleaved
//! rounds (default 5), A B C, C B A, A B C, …, each figure for a window of `--seconds / --rounds`
//! (default 2 s in all, so 0.4 s windows) on the given thread counts, threads pinned to cores.
//! A figure is the median over its rounds; a ratio is the median of the per-round ratios, shown
//! with its spread (min – max), so a neighbour's burst that slows one window moves one round,
//! not the figure. Latency percentiles are taken per round and reported as medians the same way.
//! Each group's line names the share of CPU time other processes (and the hypervisor, as steal)
//! took while it ran (JSON key `load`), so a run on a busy machine says so.
#![forbid(unsafe_code)]

mod harness;

use std::collections::BTreeMap;
use std::time::Instant;

use harness::report::{self, Results};
use harness::{Workload, checks, once, rounds, throughput};
use loadctl_bench::machine::Machine;

struct Options {
    json: bool,
    seconds: f64,
    rounds: usize,
    threads: Vec<usize>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        json: false,
        seconds: 2.0,
        rounds: 5,
        threads: vec![1, 2],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => o.json = true,
            "--seconds" => {
                o.seconds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|s: &f64| *s > 0.0)
                    .ok_or("--seconds needs a positive number")?
            }
            "--rounds" => {
                o.rounds = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|n: &usize| *n > 0)
                    .ok_or("--rounds needs a positive whole number")?
            }
            "--threads" => {
                o.threads = args
                    .next()
                    .ok_or("--threads needs a list like 1,2")?
                    .split(',')
                    .map(|t| t.parse().ok().filter(|n: &usize| *n > 0))
                    .collect::<Option<Vec<usize>>>()
                    .ok_or("--threads needs a list like 1,2")?
            }
            "--bench" => {} // passed by `cargo bench`; ignored
            "--measure-memory" => {
                // Internal: the child process that measures the compiled policy's memory.
                harness::once::memory_child();
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("loadctl-bench: {e}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let machine = Machine::probe();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let window = o.seconds / o.rounds as f64;
    eprintln!("machine: {machine}");
    eprintln!(
        "loadctl-bench: {cores} usable cores, {} s per figure in {} interleaved rounds of {window:.2} s, threads {:?}",
        o.seconds, o.rounds, o.threads
    );

    let t = Instant::now();
    let workload = Workload::generate();
    eprintln!("workload generated in {:.1} s", t.elapsed().as_secs_f64());

    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    once::measure(&workload, o.seconds, &mut out);
    let throughput = throughput::measure(&workload, &o.threads, o.rounds, window);
    for (k, v) in &throughput.per_round {
        out.insert(k.clone(), rounds::median(v));
    }
    let clock_read_ns = rounds::clock_read_ns();
    out.insert("latency_clock_overhead_ns".into(), clock_read_ns);
    let checks = checks::targets(&out, &throughput.per_round);
    report::print(
        Results {
            machine: &machine,
            out,
            throughput,
            checks,
            clock_read_ns,
            rounds: o.rounds,
            window,
            run_seconds: started.elapsed().as_secs_f64(),
        },
        o.json,
    );
}
