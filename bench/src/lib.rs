//! Benchmarks of loadctl: deterministic workload generators shared by the criterion benches
//! and (later) the side-by-side peer harness.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod naive;
pub mod peers;
pub mod workload;
