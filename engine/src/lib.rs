//! # loadctl — SIP load control
//!
//! loadctl is the engine a SIP appliance (proxy, SBC, softswitch) links to enforce RFC 7200
//! load-filtering policies on every core and to schedule its own queue so overload cannot feed
//! itself (PRSM).
//!
//! The crate is sans-I/O: it owns no threads, sockets or clocks. Modules:
//! - [`policy`]: the `application/load-control+xml` document — model, reader, writer, merge
//!   (the `loadctl-policy` crate).
//! - [`uri`]: SIP / tel URI views and canonical comparison (from the `loadctl-sip` crate).
//! - [`compile`]: policy → immutable, indexed [`compile::CompiledPolicy`].
//! - [`runtime`]: the multi-core runtime — [`Engine`] publishes snapshots (RCU), each
//!   worker's [`Shard`] classifies with its own limiter state; requests, decisions, stats.
//! - [`sip`]: zero-copy scanner for the fields of a raw SIP request, and the Via reader (the
//!   `loadctl-sip` crate).
//! - [`overload`]: feedback overload control, RFC 7339 (loss) and RFC 7415 (rate), client and server.
//! - [`prsm`]: the two-queue priority request scheduler and the retransmission detector.
//! - [`event`]: the sans-I/O `load-control` event package (subscriber, notifier, allocator).
//! - [`clock`]: injected time sources.
//!
//! The types a first program needs are re-exported at the root: [`Engine`], [`EngineConfig`],
//! [`Shard`], [`Request`], [`Identities`], [`Decision`], [`Verdict`], [`Source`], [`Time`],
//! [`Transport`], [`Ruleset`] and the errors [`PublishError`] and [`PolicyError`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The types a first program uses, at the root: an engine, its shards, the request and the
// decision, a policy's source and document (see README.md's Rust sample).
pub use compile::Identities;
pub use policy::{PolicyError, Ruleset};
pub use runtime::{
    Decision, Engine, EngineConfig, PublishError, Request, Shard, Source, Time, Transport, Verdict,
};

pub mod clock;
pub mod compile;
pub mod event;
mod fair;
mod hash;
pub mod runtime;
// The limiters' arithmetic (GCRA, percent gate), for the cells and shards and for the bench's
// naive peer: not API.
#[doc(hidden)]
pub mod limit;
pub mod overload;
#[doc(inline)]
pub use loadctl_policy as policy;
pub mod prsm;
#[doc(inline)]
pub use loadctl_sip as sip;
// The only module naming atomics and arc-swap (a loom shim under `--cfg loadctl_loom`); the
// loom models (loom-tests/) build on it: not API.
#[doc(hidden)]
pub mod sync;
#[doc(inline)]
pub use loadctl_sip::uri;
