//! The side-by-side harness: loadctl and its peers on the standard workload, and loadctl's
//! shared cells under contention, in one run.
//!
//! `cargo run --release -p loadctl-bench -- [--json] [--seconds S] [--rounds N]
//! [--threads 1,2] [--groups standard,hot]`
//!
//! With `--json` a single JSON object goes to stdout (requests per second unless the key says
//! otherwise); human-readable tables always go to stderr. Every run starts with the machine
//! line (CPU model, online CPUs, cache sizes, transparent huge page mode; JSON key `machine`).
//!
//! `--groups` chooses what is measured (default both): `standard`, the figures measured once
//! (compile time, memory, parse and scan speed, publish-to-visible, shared writes of the mix)
//! and the throughput groups of loadctl and its peers on the standard workload; `hot`, the
//! hot-rule group (`harness/hot.rs`: all threads on the same three rules, a fast rate, a slow
//! rate and a window, with their cells' writes per second). `--threads` is the list of thread
//! counts the multi-thread figures run at (default 1,2): each from 1 to the usable cores (more
//! would put two pinned threads on one core), none twice; anything else is refused with a
//! message and exit status 2.
//!
//! Throughput figures are measured in groups whose members are compared with each other (a
//! ratio target's two figures are always in one group). A group runs in `--rounds` interleaved
//! rounds (default 5), A B C, C B A, A B C, …, each figure for a window of `--seconds / --rounds`
//! (default 2 s in all, so 0.4 s windows) on the given thread counts, threads pinned to cores.
//! A figure is the median over its rounds; a ratio is the median of the per-round ratios, shown
//! with its spread (min – max), so a neighbour's burst that slows one window moves one round,
//! not the figure. Latency percentiles are taken per round and reported as medians the same way.
//! Each group's line names the share of CPU time other processes (and the hypervisor, as steal)
//! took while it ran (JSON key `load`), so a run on a busy machine says so. Besides the targets,
//! some figures are shown beside a bound they obey by construction (information, `obeys`: the
//! shared-cell writes), so that a figure breaking it stands out.
#![forbid(unsafe_code)]

mod harness;

use std::collections::BTreeMap;
use std::time::Instant;

use harness::options::{self, Group};
use harness::report::{self, Results};
use harness::throughput::{self, Throughput};
use harness::{Workload, checks, hot, once, rounds};
use loadctl_bench::machine::{CpuTimes, Machine};

fn main() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let o = match options::parse(std::env::args().skip(1), cores) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("loadctl-bench: {e}");
            std::process::exit(2);
        }
    };
    if o.measure_memory {
        // Internal: the child process that measures the compiled policy's memory.
        once::memory_child();
        return;
    }
    let started = Instant::now();
    let machine = Machine::probe();
    let window = o.seconds / o.rounds as f64;
    eprintln!("machine: {machine}");
    eprintln!(
        "loadctl-bench: {cores} usable cores, {} s per figure in {} interleaved rounds of {window:.2} s, threads {:?}, groups {:?}",
        o.seconds, o.rounds, o.threads, o.groups
    );

    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    let mut throughput = Throughput::default();
    let mut cpu = None;
    for &group in &o.groups {
        match group {
            Group::Standard => {
                let t = Instant::now();
                let workload = Workload::generate();
                eprintln!("workload generated in {:.1} s", t.elapsed().as_secs_f64());
                once::measure(&workload, o.seconds, &mut out);
                cpu = cpu.or_else(CpuTimes::now);
                throughput.extend(throughput::standard(
                    &workload, &o.threads, o.rounds, window,
                ));
            }
            Group::Hot => {
                if let Some(ns) = hot::line_transfer_ns() {
                    out.insert("hot_line_transfer_ns".into(), ns);
                }
                let hot = hot::Hot::new(&o.threads);
                cpu = cpu.or_else(CpuTimes::now);
                throughput.extend(throughput::measure_groups(
                    &[hot.figures()],
                    o.rounds,
                    window,
                ));
            }
        }
    }
    // Over the throughput groups (and, when both groups run, the hot group's set-up between).
    throughput.load = cpu.zip(CpuTimes::now()).and_then(|(a, b)| b.since(&a));
    for (k, v) in &throughput.per_round {
        out.insert(k.clone(), rounds::median(v));
    }
    let clock_read_ns = rounds::clock_read_ns();
    out.insert("latency_clock_overhead_ns".into(), clock_read_ns);
    let mut checks = checks::targets(&out, &throughput.per_round);
    checks.extend(hot::checks(&o.threads, &throughput.per_round));
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
