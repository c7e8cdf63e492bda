//! # loadctl — SIP load control
//!
//! loadctl is the engine a SIP appliance (proxy, SBC, softswitch) links to enforce RFC 7200
//! load-filtering policies on every core and to schedule its own queue so overload cannot feed
//! itself (PRSM).
//!
//! The crate is sans-I/O: it owns no threads, sockets or clocks. Modules:
//! - [`policy`]: the `application/load-control+xml` document — model, reader, writer, merge.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod policy;
pub mod uri;
