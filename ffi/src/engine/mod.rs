//! The engine handle: configuration, policies (publish / apply / withdraw), stats.
//!
//! Each part of the API is a file of its own: `handle` (the handle, its C settings, creation
//! and release), `publish` (publish, apply, withdraw, check), `stats` (totals and per rule)
//! and `rules` (what is enforced: rules, sources' versions and policies, Prometheus).

// cbindgen writes the header's types, constants and functions in the order it meets them: the
// modules below in the order they are declared (one a group, so that rustfmt keeps that
// order), which is the header's.
mod handle;

mod publish;

mod stats;

mod rules;

pub use handle::*;
pub use publish::*;
pub use rules::*;
pub use stats::*;

#[cfg(test)]
mod tests;
