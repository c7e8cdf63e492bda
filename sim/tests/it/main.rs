//! The simulator crate's integration tests, one binary: the overload-control chain's claims and
//! the sweep end to end.

mod overload;
mod sweep;
