use std::time::Duration;

use super::*;
use crate::table::{cell, fields};

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
