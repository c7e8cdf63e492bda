//! # loadctl — SIP load control
//!
//! loadctl is the engine a SIP appliance (proxy, SBC, softswitch) links to enforce RFC 7200
//! load-filtering policies on every core and to schedule its own queue so overload cannot feed
//! itself (PRSM).
//!
//! The crate is sans-I/O: it owns no threads, sockets or clocks. Modules:
//! - [`policy`]: the `application/load-control+xml` document — model, reader, writer, merge.
//! - [`uri`]: SIP / tel URI views and canonical comparison.
//! - [`compile`]: policy → immutable, indexed [`compile::CompiledPolicy`].
//! - [`engine`]: the multi-core runtime — [`engine::Engine`] publishes snapshots (RCU), each
//!   worker's [`engine::Shard`] classifies with its own limiter state; requests, decisions, stats.
//! - [`sip`]: zero-copy scanner for the fields of a raw SIP request.
//! - [`overload`]: feedback overload control, RFC 7339 (loss) and RFC 7415 (rate), client and server.
//! - [`prsm`]: the two-queue priority request scheduler and the retransmission detector.
//! - [`event`]: the sans-I/O `load-control` event package (subscriber, notifier, allocator).
//! - [`clock`]: injected time sources.
//! - [`sync`]: the only module naming atomics and arc-swap (loom shim under `--cfg loadctl_loom`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod compile;
pub mod engine;
pub mod event;
mod hash;
// The limiters' arithmetic (GCRA, percent gate), for the cells and shards and for the bench's
// naive peer: not API.
#[doc(hidden)]
pub mod limit;
pub mod overload;
pub mod policy;
pub mod prsm;
pub mod sip;
pub mod sync;
pub mod uri;
