//! The conformance vectors and the RFC 4475 torture messages, one test binary.

mod rfc4475;
mod vectors;
