//! Benchmarks of loadctl: deterministic workload generators shared by the criterion benches
//! and the side-by-side peer harness, the peers themselves, and the machine description the
//! harness prints with every run.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod machine;
pub mod naive;
pub mod peers;
pub mod workload;
