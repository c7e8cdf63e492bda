//! `loadctl simulate` as a user (or an external check) runs it: the JSON contract and bad flags.

use std::process::{Command, Output};

fn loadctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loadctl"))
        .args(args)
        .output()
        .expect("loadctl runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = loadctl(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn json_has_the_contract_keys_and_prsm_beats_fifo() {
    let run = |scheduler: &str, model: &str| {
        json(&[
            "simulate",
            "--scenario",
            "slowdown",
            "--scheduler",
            scheduler,
            "--buffer",
            "10000",
            "--model",
            model,
            "--seed",
            "3",
            "--json",
        ])
    };
    for model in ["des", "fluid"] {
        let (fifo, prsm) = (run("fifo", model), run("prsm", model));
        for m in [&fifo, &prsm] {
            for key in [
                "calls",
                "failed",
                "failed_ratio",
                "mean_delay_ms",
                "p99_delay_ms",
                "retransmissions",
                "redundant_served",
            ] {
                assert!(m[key].is_number(), "{key} missing in {m}");
            }
        }
        let ratio = |m: &serde_json::Value| m["failed_ratio"].as_f64().unwrap_or(f64::NAN);
        assert!(ratio(&prsm) < 0.01, "{prsm}");
        assert!(ratio(&fifo) > 0.05, "{fifo}");
    }
}

#[test]
fn bad_flags_are_usage_errors() {
    for args in [
        &["simulate", "--scenario", "flood"][..],
        &["simulate", "--scheduler", "lifo"],
        &["simulate", "--buffer", "0"],
        &["simulate", "--mu=-5"],
        &["simulate", "--model", "petri"],
        &["simulate", "--upstream-rate", "0"],
        &["simulate", "--split", "thirds"],
    ] {
        let out = loadctl(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("loadctl: simulate"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
