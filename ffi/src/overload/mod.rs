//! Feedback overload control through the C ABI: RFC 7339 (loss-based) and RFC 7415
//! (rate-based), both roles, from `loadctl::overload`.
//!
//! **Client** (a proxy toward its next hops): `lc_oc_client` is the table of next hops and what
//! each asked for; it is thread-safe. Each worker thread makes its own `lc_oc_shard` (random
//! numbers, the category mix, counters) and asks `lc_oc_decide` for every new request it is
//! about to send to a hop, next to classification: no allocation, no lock. Per request sent:
//! add `lc_oc_client_request_params` to the Via you insert. Per response received from a hop:
//! `lc_oc_client_on_response` with its top Via. Per transaction that timed out (or a fatal
//! transport error): `lc_oc_client_on_timeout`. A shed request (`LC_OC_VERDICT_SHED_*`) goes to
//! another next hop that is not overloaded, else is answered 503 *without* Retry-After (RFC
//! 7339 §5.10). `lc_oc_category_sip` says which category a request is in, with the engine's
//! exemptions (in-dialog requests, emergency calls, listed Resource-Priority namespaces are
//! `LC_OC_CATEGORY_PRIORITY`).
//!
//! **Server** (an overloaded element toward its upstream clients): `lc_oc_server` counts what
//! each client sends (`lc_oc_server_on_request`, which also rejects a share of the requests of
//! clients that do not take part while in overload: answer those 503 without Retry-After),
//! takes the load signal (`lc_oc_server_report_queue` from the server's own queue, e.g. the
//! PRSM scheduler; or `lc_oc_server_report_occupancy` for any signal with a target: CPU,
//! memory), and writes each response's top Via with the values for its client
//! (`lc_oc_server_write_via`). It is thread-safe (calls take its lock for well under a
//! microsecond).
//!
//! Times are monotonic nanoseconds (`CLOCK_MONOTONIC`), the same clock for every call on a
//! handle. Fractions cross as parts per million, rates as thousandths of a request per second:
//! integers only.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use loadctl::overload::client::{
    Applied, Client, ClientConfig, ClientShard, Hop, HopCell, HopStatus, OcVerdict, ShardHopStats,
    ShedReason, hop_key,
};
use loadctl::overload::server::{Admission, Load, QueueLoad, Server, ServerConfig};
use loadctl::overload::via::{Feedback, Offer, Strip};
use loadctl::overload::{Algorithm, Algorithms, Category, OcError, Seq};
use loadctl::prsm::Class;
use loadctl::sip;

use crate::abi::{millis, nanos};
use crate::engine::lc_engine;
use crate::worker::sip_error_detail;
use crate::{Code, boundary, lc_result, lc_str};

/// An overload-control algorithm: `LC_OC_ALGORITHM_LOSS` or `LC_OC_ALGORITHM_RATE`
/// (`LC_OC_ALGORITHM_NONE` only in outputs).
pub type lc_oc_algorithm = u32;
/// No algorithm (outputs only: no feedback, or a client that does not take part).
pub const LC_OC_ALGORITHM_NONE: lc_oc_algorithm = 0;
/// `loss`: `oc` is the percentage of requests to shed (RFC 7339 §7).
pub const LC_OC_ALGORITHM_LOSS: lc_oc_algorithm = 1;
/// `rate`: `oc` is the most requests per second to send (RFC 7415).
pub const LC_OC_ALGORITHM_RATE: lc_oc_algorithm = 2;

/// A set of algorithms a client offers (flags).
pub type lc_oc_algorithms = u32;
/// `loss` (required: RFC 7339 §4.2).
pub const LC_OC_ALGORITHMS_LOSS: lc_oc_algorithms = 1;
/// `rate`.
pub const LC_OC_ALGORITHMS_RATE: lc_oc_algorithms = 2;
/// List `rate` before `loss` (the client's preference).
pub const LC_OC_ALGORITHMS_PREFER_RATE: lc_oc_algorithms = 4;

/// RFC 7339 §7.2's two categories of requests.
pub type lc_oc_category = u32;
/// Candidates for reduction.
pub const LC_OC_CATEGORY_REDUCIBLE: lc_oc_category = 0;
/// Reduced only when nothing reducible is left (in-dialog, emergency, priority namespaces).
pub const LC_OC_CATEGORY_PRIORITY: lc_oc_category = 1;
/// ACK or CANCEL (from `lc_oc_category_sip`): never held back; pass it to `lc_oc_decide`,
/// which counts it in the traffic mix and always says forward.
pub const LC_OC_CATEGORY_NONE: lc_oc_category = 2;

/// What `lc_oc_decide` says about a request.
pub type lc_oc_verdict = u32;
/// Send it.
pub const LC_OC_VERDICT_FORWARD: lc_oc_verdict = 0;
/// Send it: it is a suspended hop's liveness probe (RFC 7339 §5.9).
pub const LC_OC_VERDICT_PROBE: lc_oc_verdict = 1;
/// Shed by the loss-based algorithm.
pub const LC_OC_VERDICT_SHED_LOSS: lc_oc_verdict = 2;
/// Shed by the rate-based bucket.
pub const LC_OC_VERDICT_SHED_RATE: lc_oc_verdict = 3;
/// Shed: the hop is suspended after repeated timeouts.
pub const LC_OC_VERDICT_SHED_UNREACHABLE: lc_oc_verdict = 4;

/// What a response did to a hop's state (`lc_oc_client_on_response`).
pub type lc_oc_applied = u32;
/// No feedback in the Via (the hop does not do overload control, or left `oc` unfilled).
pub const LC_OC_APPLIED_NO_FEEDBACK: lc_oc_applied = 0;
/// New values are in force (or control stopped: `oc-validity=0`).
pub const LC_OC_APPLIED_UPDATED: lc_oc_applied = 1;
/// The same `oc-seq` as the values in force: nothing changed.
pub const LC_OC_APPLIED_SAME: lc_oc_applied = 2;
/// An older `oc-seq` than the values in force, or none while they came with one: ignored.
pub const LC_OC_APPLIED_STALE: lc_oc_applied = 3;
/// Another thread was applying a response to the hop: dropped (the next response applies).
pub const LC_OC_APPLIED_BUSY: lc_oc_applied = 4;

/// Which overload-control parameters `lc_oc_via_strip` removes.
pub type lc_oc_strip = u32;
/// `oc`, `oc-validity` and `oc-seq`: from every Via of a response below the topmost (RFC 7339
/// §5.4), before a proxy relays the response upstream.
pub const LC_OC_STRIP_RESPONSE: lc_oc_strip = 0;
/// All four (`oc-algo` too): from the Via a client inserted into a request, before a proxy
/// forwards it downstream (RFC 7339 §5.6).
pub const LC_OC_STRIP_REQUEST: lc_oc_strip = 1;

/// What the server does with a request (`lc_oc_server_on_request`).
pub type lc_oc_admission = u32;
/// Process it.
pub const LC_OC_ADMISSION_ADMIT: lc_oc_admission = 0;
/// Answer 503 without Retry-After (a non-participating client, in overload: RFC 7339 §5.10.2).
pub const LC_OC_ADMISSION_REJECT: lc_oc_admission = 1;

c_enum! {
    enum CategoryC: lc_oc_category {
        Reducible = LC_OC_CATEGORY_REDUCIBLE,
        Priority = LC_OC_CATEGORY_PRIORITY,
    }
}

c_enum! {
    enum StripC: lc_oc_strip {
        Response = LC_OC_STRIP_RESPONSE,
        Request = LC_OC_STRIP_REQUEST,
    }
}

c_enum! {
    enum AlgorithmC: lc_oc_algorithm {
        Loss = LC_OC_ALGORITHM_LOSS,
        Rate = LC_OC_ALGORITHM_RATE,
    }
}

fn algorithm_to_c(a: Option<Algorithm>) -> lc_oc_algorithm {
    match a {
        None => LC_OC_ALGORITHM_NONE,
        Some(Algorithm::Loss) => LC_OC_ALGORITHM_LOSS,
        Some(Algorithm::Rate) => LC_OC_ALGORITHM_RATE,
    }
}

fn algorithm_from_c(a: AlgorithmC) -> Algorithm {
    match a {
        AlgorithmC::Loss => Algorithm::Loss,
        AlgorithmC::Rate => Algorithm::Rate,
    }
}

fn oc_error(e: OcError) -> Code {
    match e {
        OcError::Config { .. } => crate::error::fail(Code::InvalidArgument, e),
        OcError::TableFull { .. } => crate::error::fail(Code::OcTableFull, e),
        _ => crate::error::fail(Code::OcBadFeedback, e),
    }
}

/// A request's Via that cannot carry feedback (a quoted string left open).
fn bad_via(e: OcError) -> Code {
    crate::error::fail(Code::SipBadVia, format_args!("SIP: {e}"))
}

const PPM: f64 = 1e6;

fn ppm(x: f64) -> u32 {
    (x * PPM).round().clamp(0.0, u32::MAX as f64) as u32
}

fn from_ppm(v: u32) -> f64 {
    f64::from(v) / PPM
}

fn milli(x: f64) -> u64 {
    (x * 1e3).round().clamp(0.0, u64::MAX as f64) as u64
}

// ---------------------------------------------------------------------------------------------
// Feedback values

/// Overload-control values of a response's top Via (RFC 7339 §4).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_oc_feedback {
    /// `oc`: a loss percentage (0–100) or a rate in requests/s; 0 when `validity_ms` is 0
    /// (RFC 7339 §5.7: the value is disregarded).
    pub oc: u64,
    /// `LC_OC_ALGORITHM_LOSS` or `LC_OC_ALGORITHM_RATE`; from `lc_oc_feedback_parse` also
    /// `LC_OC_ALGORITHM_NONE` when the response names none (the selection in force stays, RFC
    /// 7339 §4.2; loss when there was none).
    pub algorithm: lc_oc_algorithm,
    /// `oc-validity`, ms (0: no overload control in effect).
    pub validity_ms: u64,
    /// `oc-seq` in units of 10⁻⁵ (see `lc_oc_hop_status.seq`).
    pub seq: u64,
    /// 1 when `seq` is present.
    pub has_seq: u8,
}

fn feedback_to_c(f: &Feedback) -> lc_oc_feedback {
    lc_oc_feedback {
        oc: f.oc,
        algorithm: algorithm_to_c(f.algorithm),
        validity_ms: f.validity_ms,
        seq: f.seq.map_or(0, |s| s.0),
        has_seq: u8::from(f.seq.is_some()),
    }
}

fn feedback_from_c(f: &lc_oc_feedback) -> Result<Feedback, Code> {
    let algorithm = algorithm_from_c(crate::abi::checked(
        f.algorithm,
        "lc_oc_feedback.algorithm",
    )?);
    let has_seq = crate::abi::checked_bool(f.has_seq, "lc_oc_feedback.has_seq")?;
    if algorithm == Algorithm::Loss && f.oc > 100 && f.validity_ms > 0 {
        return Err(crate::abi::invalid("lc_oc_feedback.oc", "a loss above 100"));
    }
    if f.seq > Seq::MAX.0 {
        return Err(crate::abi::invalid(
            "lc_oc_feedback.seq",
            "beyond 999999999999.99999",
        ));
    }
    Ok(Feedback {
        oc: f.oc,
        algorithm: Some(algorithm),
        validity_ms: f.validity_ms,
        seq: has_seq.then_some(Seq(f.seq)),
    })
}

/// Reads the overload-control values of a response's top Via (`top_via`, its first via-parm
/// counts) into `*out`. `LC_RESULT_EMPTY` when it carries none (no `oc`, or `oc` without a
/// value: the next hop does not do overload control); `LC_RESULT_OC_BAD_FEEDBACK` when a value
/// breaks RFC 7339 or the via-parm leaves a quoted string open (the reason in
/// `lc_last_error`). A missing `oc-validity` reads as 500, a missing `oc-algo` as
/// `LC_OC_ALGORITHM_NONE` (the selection in force stays), and with `oc-validity=0` `oc` reads
/// as 0 whatever it was (RFC 7339 §5.7). Numbers of any length are read: a rate above
/// 1,048,575 as that, a validity above a day as a day. Read beyond RFC 7339's grammar because
/// they are unambiguous: an unquoted `oc-algo=loss`, an `oc-seq` without a fraction (`17`
/// reads as `17.0`), any letter case in names and tokens.
///
/// # Safety
/// `top_via` readable; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_feedback_parse(
    top_via: lc_str,
    out: *mut lc_oc_feedback,
) -> lc_result {
    boundary(|| {
        let via = try_str!(top_via);
        let out = try_out!(out);
        match try_!(Feedback::parse(via).map_err(oc_error)) {
            Some(f) => {
                out.write(feedback_to_c(&f));
                Code::Ok
            }
            None => Code::Empty,
        }
    })
}

/// Writes `top_via` (a request's top Via as received) with `feedback` in place of the
/// client's `oc` / `oc-algo` (and any `oc-validity` / `oc-seq`) into `buf` (`cap` bytes, not
/// NUL-terminated), its length to `*written`; `LC_RESULT_BUFFER_TOO_SMALL` with the length
/// needed when it does not fit; `LC_RESULT_SIP_BAD_VIA` when the Via leaves a quoted string
/// open. For servers with their own law; `lc_oc_server_write_via` does this with the server's
/// values.
///
/// # Safety
/// `feedback` readable; `top_via` readable; `buf` NULL or writable for `cap` bytes;
/// `written` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_feedback_write_via(
    feedback: *const lc_oc_feedback,
    top_via: lc_str,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> lc_result {
    boundary(|| {
        let f = try_!(feedback_from_c(try_ref!(feedback)));
        let via = try_str!(top_via);
        let out = try_buf!(buf, cap, written);
        let mut s = String::with_capacity(via.len() + 64);
        try_!(f.write_via(via, &mut s).map_err(bad_via));
        out.deliver(s.as_bytes())
    })
}

mod client;
mod server;

pub use client::*;
pub use server::*;

/// Writes the Via header value `via` (one via-parm or several, comma-separated) without the
/// overload-control parameters `which` names (`LC_OC_STRIP_*`), from every via-parm of it,
/// into `buf` (`cap` bytes, not NUL-terminated), its length to `*written`. Other parameters
/// stay as written, in order; via-parms are joined by `", "`. `LC_RESULT_EMPTY` (nothing
/// written, `*written` 0) when there was nothing to remove: the value can go as it came;
/// `LC_RESULT_BUFFER_TOO_SMALL` with the length needed when it does not fit;
/// `LC_RESULT_SIP_BAD_VIA` when a via-parm leaves a quoted string open.
///
/// A proxy taking part in overload control calls it on every Via header of a response below
/// its own before relaying it (RFC 7339 §5.4: so that values "accidentally or maliciously
/// inserted into Via headers by a downstream SIP server" do not travel upstream; then it
/// writes its own values for its client, `lc_oc_server_write_via`), and on the Via the client
/// inserted into a request before forwarding it (§5.6).
///
/// # Safety
/// `via` readable; `buf` NULL or writable for `cap` bytes; `written` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_via_strip(
    via: lc_str,
    which: lc_oc_strip,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> lc_result {
    boundary(|| {
        let via = try_str!(via);
        let which = match try_value!(which, "which") {
            StripC::Response => Strip::Response,
            StripC::Request => Strip::Request,
        };
        let out = try_buf!(buf, cap, written);
        let mut s = String::with_capacity(via.len());
        if !try_!(loadctl::overload::via::strip(via, which, &mut s).map_err(bad_via)) {
            out.nothing();
            return Code::Empty;
        }
        out.deliver(s.as_bytes())
    })
}
