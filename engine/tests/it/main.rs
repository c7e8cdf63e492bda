//! The engine crate's integration tests, one binary (linked once): each module is one area,
//! through the public API only.

mod allocation;
mod bad_input;
mod cell_table;
mod classify;
mod classify_properties;
mod common;
mod event;
mod policy_merge;
mod policy_reader;
mod policy_roundtrip;
mod restart;
mod runtime;
mod shards_vs_one;
mod sip_user_numbers;
mod soak;
mod stress;
