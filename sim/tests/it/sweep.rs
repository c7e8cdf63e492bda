//! The quick sweep end to end: `sweep::run(&Plan::quick(), dir, false)` into a fresh temporary
//! directory, then the files it wrote (CSV shape, SVG plots with their legends) and the papers'
//! claims on the numbers in the CSV, for both models.

use std::collections::HashMap;
use std::path::PathBuf;

use loadctl_sim::sweep::{self, Plan};
use loadctl_sim::{Metrics, ScenarioKind};

/// A directory under the system temp dir, removed when dropped (also when the test fails).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("loadctl-sweep-test-{}-{nanos}", std::process::id()));
        assert!(!dir.exists(), "{} exists already", dir.display());
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The CSV, by (model, series, scenario, buffer): the failed ratio and the mean delay (ms).
struct Results {
    rows: HashMap<(String, String, String, usize), (f64, f64)>,
}

impl Results {
    fn get(&self, model: &str, series: &str, scenario: &str, buffer: usize) -> (f64, f64) {
        *self
            .rows
            .get(&(model.into(), series.into(), scenario.into(), buffer))
            .unwrap_or_else(|| panic!("no row for {model} {series} {scenario} B={buffer}"))
    }

    fn failed(&self, model: &str, series: &str, scenario: &str, buffer: usize) -> f64 {
        self.get(model, series, scenario, buffer).0
    }

    fn delay_ms(&self, model: &str, series: &str, scenario: &str, buffer: usize) -> f64 {
        self.get(model, series, scenario, buffer).1
    }
}

#[test]
fn quick_sweep_writes_csv_and_plots_and_the_papers_claims_hold() {
    let plan = Plan::quick();
    let dir = TempDir::new();
    let summary = match sweep::run(&plan, &dir.0, false) {
        Ok(s) => s,
        Err(e) => panic!("the quick sweep failed: {e}"),
    };
    println!("{summary}");
    assert!(summary.contains("results.csv"), "{summary}");

    // results.csv: a header, then one row per run; `series` then every Metrics field.
    let csv = std::fs::read_to_string(dir.0.join("results.csv")).expect("results.csv");
    let lines: Vec<&str> = csv.lines().collect();
    let runs = plan.scenarios.len() * plan.buffers.len() * plan.series.len();
    assert_eq!(runs, 60);
    assert_eq!(lines.len(), 1 + runs, "header + one row per run");
    let metrics_fields = match serde_json::to_value(Metrics::default()) {
        Ok(serde_json::Value::Object(o)) => o.len(),
        other => panic!("Metrics does not serialise to an object: {other:?}"),
    };
    let header: Vec<&str> = lines[0].split(',').collect();
    assert_eq!(header.len(), 1 + metrics_fields, "{}", lines[0]);
    assert_eq!(header[0], "series");
    for line in &lines[1..] {
        assert_eq!(line.split(',').count(), header.len(), "{line}");
    }
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    let (series, model, scenario, buffer, failed, delay) = (
        col("series"),
        col("model"),
        col("scenario"),
        col("buffer"),
        col("failed_ratio"),
        col("mean_delay_ms"),
    );
    let mut results = Results {
        rows: HashMap::new(),
    };
    for line in &lines[1..] {
        let cells: Vec<&str> = line.split(',').collect();
        let number = |i: usize| -> f64 {
            cells[i]
                .parse()
                .unwrap_or_else(|_| panic!("not a number in column {}: {line}", header[i]))
        };
        let key = (
            cells[model].to_owned(),
            cells[series].to_owned(),
            cells[scenario].to_owned(),
            number(buffer) as usize,
        );
        assert!(
            results
                .rows
                .insert(key, (number(failed), number(delay)))
                .is_none(),
            "duplicate row {line}"
        );
    }
    let mut seen: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split(',').next().unwrap_or(""))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen, ["fifo", "fifo+rfc7200", "prsm"]);

    // Two plots per scenario, with every series in the legend.
    let labels = [
        "FIFO (DES)",
        "PRSM (DES)",
        "FIFO (fluid)",
        "PRSM (fluid)",
        "FIFO+RFC 7200 (DES)",
    ];
    for kind in ScenarioKind::ALL {
        for (plot, axis) in [
            ("failed", "failed call ratio"),
            ("delay", "mean response delay"),
        ] {
            let path = dir.0.join(format!("{}-{plot}.svg", kind.name()));
            let svg = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                svg.starts_with("<svg") || svg.starts_with("<?xml"),
                "{}",
                path.display()
            );
            assert!(svg.trim_end().ends_with("</svg>"), "{}", path.display());
            for text in
                labels
                    .iter()
                    .chain(&[axis, "buffer size B (messages", kind.name(), "μ = 1000"])
            {
                assert!(svg.contains(text), "{} lacks '{text}'", path.display());
            }
        }
    }

    // The papers' claims, in both models. Overload scenarios: PRSM keeps (almost) every call
    // for buffers of 1000 and more; FIFO's failures grow with the buffer and dwarf PRSM's, and
    // its delay runs into seconds while PRSM's stays low.
    for model in ["des", "fluid"] {
        for scenario in ["bulk", "bursty", "slowdown"] {
            let ctx = format!("{scenario} ({model})");
            for &b in plan.buffers.iter().filter(|&&b| b >= 1000) {
                let p = results.failed(model, "prsm", scenario, b);
                assert!(p <= 0.01, "{ctx}: PRSM failed ratio {p} at B={b}");
            }
            let fifo_10k = results.failed(model, "fifo", scenario, 10000);
            let fifo_1k = results.failed(model, "fifo", scenario, 1000);
            let prsm_10k = results.failed(model, "prsm", scenario, 10000);
            assert!(
                fifo_10k > 10.0 * prsm_10k,
                "{ctx}: FIFO {fifo_10k} vs PRSM {prsm_10k} at B=10000"
            );
            assert!(
                fifo_10k > fifo_1k,
                "{ctx}: FIFO {fifo_10k} at B=10000, {fifo_1k} at B=1000"
            );
            let fifo_delay = results.delay_ms(model, "fifo", scenario, 10000);
            let prsm_delay = results.delay_ms(model, "prsm", scenario, 10000);
            assert!(
                fifo_delay > 5000.0,
                "{ctx}: FIFO mean delay {fifo_delay} ms at B=10000"
            );
            assert!(
                prsm_delay < 2000.0,
                "{ctx}: PRSM mean delay {prsm_delay} ms at B=10000"
            );
        }
        // Steady load below capacity: nothing fails, whatever the server.
        for series in ["fifo", "prsm"] {
            for &b in &plan.buffers {
                let f = results.failed(model, series, "steady", b);
                assert_eq!(f, 0.0, "steady {series} ({model}) B={b}: failed ratio {f}");
            }
        }
    }
    for &b in &plan.buffers {
        let f = results.failed("des", "fifo+rfc7200", "steady", b);
        assert_eq!(f, 0.0, "steady fifo+rfc7200 B={b}: failed ratio {f}");
    }
    // The two halves of loadctl together: the server's RFC 7200 rate rule, enforced upstream,
    // keeps even a FIFO server's failures at 1% or less, in every scenario and buffer.
    for kind in ScenarioKind::ALL {
        for &b in &plan.buffers {
            let f = results.failed("des", "fifo+rfc7200", kind.name(), b);
            assert!(
                f <= 0.01,
                "{} fifo+rfc7200 B={b}: failed ratio {f}",
                kind.name()
            );
        }
    }
}
