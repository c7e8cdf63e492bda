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

use loadctl::overload::client::{
    Applied, Client, ClientConfig, ClientShard, Hop, HopCell, HopStatus, ShardHopStats, ShedReason,
    Verdict, hop_key,
};
use loadctl::overload::server::{Admission, Load, QueueLoad, Server, ServerConfig};
use loadctl::overload::via::{Feedback, Offer};
use loadctl::overload::{Algorithm, Algorithms, Category, OcError, Seq};
use loadctl::prsm::Class;
use loadctl::sip;

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
/// Output of `lc_oc_category_sip` only: ACK or CANCEL, sent without asking `lc_oc_decide`.
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
/// An older `oc-seq`: ignored.
pub const LC_OC_APPLIED_STALE: lc_oc_applied = 3;
/// Another thread was applying a response to the hop: dropped (the next response applies).
pub const LC_OC_APPLIED_BUSY: lc_oc_applied = 4;

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
// Client

/// Client settings. Get the defaults (RFC 7415's suggested values) with
/// `lc_oc_client_config_default` and change what you need.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_oc_client_config {
    /// `LC_OC_ALGORITHMS_*` flags offered in requests; must include `LC_OC_ALGORITHMS_LOSS`.
    /// Default loss and rate.
    pub algorithms: lc_oc_algorithms,
    /// `TAU1`, the rate bucket's tolerance for reducible requests, in thousandths of `T = 1/oc`
    /// (default 5,000: 5·T).
    pub tau_reducible_milli: u32,
    /// `TAU2`, for priority requests, thousandths of `T`, at least `tau_reducible_milli`
    /// (default 10,000).
    pub tau_priority_milli: u32,
    /// `TAU0`, the bucket at activation, thousandths of `T`, at most `tau_reducible_milli`
    /// (default 0).
    pub tau0_milli: u32,
    /// 1: randomise the bucket (RFC 7415 §3.5.3, default), 0: do not.
    pub resonance: u8,
    /// How long each shard samples its category mix, ns (default 5 s).
    pub mix_period_ns: u64,
    /// The reducible share assumed before a mix is sampled, ppm (default 800,000).
    pub reducible_share_ppm: u32,
    /// Consecutive timeouts that suspend a hop (default 3).
    pub suspend_after: u32,
    /// First probe interval of a suspended hop, ns (default 1 s).
    pub probe_min_ns: u64,
    /// Longest probe interval, ns (default 64 s).
    pub probe_max_ns: u64,
}

impl lc_oc_client_config {
    fn from_rust(c: &ClientConfig) -> Self {
        let mut algorithms = 0;
        if c.algorithms.loss {
            algorithms |= LC_OC_ALGORITHMS_LOSS;
        }
        if c.algorithms.rate {
            algorithms |= LC_OC_ALGORITHMS_RATE;
        }
        if c.algorithms.prefer_rate {
            algorithms |= LC_OC_ALGORITHMS_PREFER_RATE;
        }
        let m = |x: f64| (x * 1e3).round() as u32;
        Self {
            algorithms,
            tau_reducible_milli: m(c.tau_reducible),
            tau_priority_milli: m(c.tau_priority),
            tau0_milli: m(c.tau0),
            resonance: u8::from(c.resonance),
            mix_period_ns: c.mix_period_ns,
            reducible_share_ppm: ppm(c.reducible_share),
            suspend_after: c.suspend_after,
            probe_min_ns: c.probe_min_ns,
            probe_max_ns: c.probe_max_ns,
        }
    }

    fn to_rust(self) -> Result<ClientConfig, Code> {
        let flags = crate::abi::checked_flags(
            self.algorithms,
            LC_OC_ALGORITHMS_LOSS | LC_OC_ALGORITHMS_RATE | LC_OC_ALGORITHMS_PREFER_RATE,
            "lc_oc_client_config.algorithms",
        )?;
        let rate = flags & LC_OC_ALGORITHMS_RATE != 0;
        let m = |v: u32| f64::from(v) / 1e3;
        Ok(ClientConfig {
            algorithms: Algorithms {
                loss: flags & LC_OC_ALGORITHMS_LOSS != 0,
                rate,
                prefer_rate: rate && flags & LC_OC_ALGORITHMS_PREFER_RATE != 0,
            },
            tau_reducible: m(self.tau_reducible_milli),
            tau_priority: m(self.tau_priority_milli),
            tau0: m(self.tau0_milli),
            resonance: crate::abi::checked_bool(self.resonance, "lc_oc_client_config.resonance")?,
            mix_period_ns: self.mix_period_ns,
            reducible_share: from_ppm(self.reducible_share_ppm),
            suspend_after: self.suspend_after,
            probe_min_ns: self.probe_min_ns,
            probe_max_ns: self.probe_max_ns,
        })
    }
}

/// The client's table of next hops. Thread-safe.
pub struct lc_oc_client {
    client: Arc<Client>,
}

impl lc_oc_client {
    /// The Rust client behind the handle (for Rust code that links the rlib).
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn hop(&self, index: u32) -> Result<Hop, Code> {
        self.client.hop_at(index as usize).ok_or_else(|| {
            crate::abi::invalid("hop", format_args!("{index} is no hop of this client"))
        })
    }
}

/// One worker's side of an `lc_oc_client`. Used by one thread at a time.
pub struct lc_oc_shard {
    client: Arc<Client>,
    shard: ClientShard,
}

/// A hop's state, as `lc_oc_client_status` writes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_oc_hop_status {
    /// 1 when overload control is in effect for the hop now.
    pub active: u8,
    /// The algorithm the hop selected last (`LC_OC_ALGORITHM_NONE` before any feedback).
    pub algorithm: lc_oc_algorithm,
    /// The `oc` value in force (0 when not active).
    pub oc: u64,
    /// Milliseconds until the values in force expire (0 when not active).
    pub remaining_ms: u64,
    /// The stored `oc-seq` in units of 10⁻⁵ (`1282321615.782` is 128,232,161,578,200), 0 if none.
    pub seq: u64,
    /// 1 when a `seq` is stored.
    pub has_seq: u8,
    /// Consecutive timeouts.
    pub timeouts: u32,
    /// 1 when the hop is suspended (probing only, RFC 7339 §5.9).
    pub suspended: u8,
    /// Feedback updates applied.
    pub updates: u64,
}

fn hop_status(s: &HopStatus) -> lc_oc_hop_status {
    lc_oc_hop_status {
        active: u8::from(s.active.is_some()),
        algorithm: algorithm_to_c(s.algorithm),
        oc: s.active.map_or(0, |(_, oc)| oc),
        remaining_ms: s.remaining_ms,
        seq: s.seq.map_or(0, |q| q.0),
        has_seq: u8::from(s.seq.is_some()),
        timeouts: s.timeouts,
        suspended: u8::from(s.suspended),
        updates: s.updates,
    }
}

/// One shard's counters for a hop, as `lc_oc_shard_stats` writes them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_oc_shard_counters {
    /// Requests forwarded (probes included).
    pub forwarded: u64,
    /// Liveness probes.
    pub probes: u64,
    /// Shed by the loss-based algorithm.
    pub shed_loss: u64,
    /// Shed by the rate-based bucket.
    pub shed_rate: u64,
    /// Shed because the hop is suspended.
    pub shed_unreachable: u64,
    /// Reducible requests asked about.
    pub reducible: u64,
    /// Priority requests asked about.
    pub priority: u64,
}

fn shard_counters(s: &ShardHopStats) -> lc_oc_shard_counters {
    lc_oc_shard_counters {
        forwarded: s.forwarded,
        probes: s.probes,
        shed_loss: s.shed_loss,
        shed_rate: s.shed_rate,
        shed_unreachable: s.shed_unreachable,
        reducible: s.reducible,
        priority: s.priority,
    }
}

/// Writes the default client configuration into `*out`.
///
/// # Safety
/// `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_config_default(out: *mut lc_oc_client_config) -> lc_result {
    boundary(|| {
        try_out!(out).write(lc_oc_client_config::from_rust(&ClientConfig::default()));
        Code::Ok
    })
}

/// Creates a client with room for `capacity` next hops (1 to 1,048,576; all memory allocated
/// here) and writes it to `*out`. `config` NULL means the defaults. `LC_RESULT_INVALID_ARGUMENT`
/// names the first field out of range (algorithms without loss, unknown flags, tolerances out
/// of order, a share above 1,000,000 ppm, a zero period, zero `suspend_after`, probe intervals
/// out of order).
///
/// # Safety
/// `config` NULL or readable; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_new(
    config: *const lc_oc_client_config,
    capacity: u32,
    out: *mut *mut lc_oc_client,
) -> lc_result {
    boundary(|| {
        let out = try_out!(out);
        // SAFETY: the caller promises NULL or a valid struct.
        let config = match unsafe { config.as_ref() } {
            None => ClientConfig::default(),
            Some(c) => try_!(c.to_rust()),
        };
        let client = try_!(Client::new(config, capacity as usize).map_err(oc_error));
        out.write(Box::into_raw(Box::new(lc_oc_client {
            client: Arc::new(client),
        })));
        Code::Ok
    })
}

/// Bytes a shared hop table for `capacity` next hops takes (64 per hop; 0 when `capacity` is 0
/// or above 1,048,576), for `lc_oc_client_new_shared`.
#[unsafe(no_mangle)]
pub extern "C" fn lc_oc_table_bytes(capacity: u32) -> usize {
    if capacity == 0 || capacity > 1 << 20 {
        0
    } else {
        capacity as usize * size_of::<HopCell>()
    }
}

/// Creates a client on a hop table in memory the caller owns — typically memory every process
/// of a forking host maps (Kamailio's `shm_malloc`, `mmap(MAP_SHARED)` before `fork`), so that
/// every process sees the same feedback, suspension and rate bucket per next hop — and writes
/// it to `*out`. `mem` must be 64-byte aligned and `len` bytes long (`lc_oc_table_bytes`;
/// whole 64-byte cells count); it must be zeroed once before any client uses it (in the parent,
/// before the fork) and never again while one does. Every process creates its own client on
/// the same memory, with the same configuration, and its own shards; times must come from
/// `CLOCK_MONOTONIC`. `config` NULL means the defaults. `LC_RESULT_INVALID_ARGUMENT` for a NULL
/// or misaligned `mem`, fewer than one or more than 1,048,576 cells, or a configuration out of
/// range.
///
/// # Safety
/// `config` NULL or readable; `mem` NULL or `len` bytes readable and writable by atomic
/// operations, initialised (zeroed), for as long as any client or shard on it exists; `out`
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_new_shared(
    config: *const lc_oc_client_config,
    mem: *mut std::ffi::c_void,
    len: usize,
    out: *mut *mut lc_oc_client,
) -> lc_result {
    boundary(|| {
        let out = try_out!(out);
        // SAFETY: the caller promises NULL or a valid struct.
        let config = match unsafe { config.as_ref() } {
            None => ClientConfig::default(),
            Some(c) => try_!(c.to_rust()),
        };
        let cell = size_of::<HopCell>();
        if mem.is_null() || !(mem as usize).is_multiple_of(cell) {
            return crate::abi::invalid(
                "mem",
                format_args!("{mem:p} is NULL or not aligned to {cell} bytes"),
            );
        }
        let n = len / cell;
        // SAFETY: non-null and aligned to HopCell's alignment (64); the caller promises `len`
        // initialised bytes that stay valid while any client uses them. A HopCell is
        // #[repr(C)] atomics, valid for every bit pattern and only accessed atomically, so
        // other processes writing it concurrently is fine.
        let cells: &'static [HopCell] =
            unsafe { std::slice::from_raw_parts(mem.cast::<HopCell>(), n) };
        let client = try_!(Client::shared(config, cells).map_err(oc_error));
        out.write(Box::into_raw(Box::new(lc_oc_client {
            client: Arc::new(client),
        })));
        Code::Ok
    })
}

/// Frees a client. Shards made from it keep what they need and stay usable until freed.
/// `NULL` is a no-op.
///
/// # Safety
/// `client` NULL or from `lc_oc_client_new`, not used by another thread, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_free(client: *mut lc_oc_client) {
    // SAFETY: NULL or from Box::into_raw in lc_oc_client_new, freed once.
    let _ = boundary(|| unsafe { crate::free_box(client) });
}

/// The parameters to append to the Via you insert into every request to a hop
/// (`;oc;oc-algo="loss,rate"`, RFC 7339 §4.1–4.2), written to `*out`: a static string (valid
/// for the life of the program, not NUL-terminated).
///
/// # Safety
/// `client` from `lc_oc_client_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_request_params(
    client: *const lc_oc_client,
    out: *mut lc_str,
) -> lc_result {
    boundary(|| {
        let c = try_ref!(client);
        let out = try_out!(out);
        out.write(lc_str::from_static(c.client.request_params()));
        Code::Ok
    })
}

/// The hop of a next hop's address (`address`: any bytes that identify it, e.g.
/// `"192.0.2.7:5060"` — RFC 7339 §5.4 scopes overload control to IP and port), added if new,
/// written to `*hop` (an index below the capacity). `LC_RESULT_OC_TABLE_FULL` when the table has
/// no room. Thread-safe; two threads adding the same address get the same hop.
///
/// # Safety
/// `client` from `lc_oc_client_new`; `address` readable; `hop` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_hop(
    client: *const lc_oc_client,
    address: lc_str,
    hop: *mut u32,
) -> lc_result {
    boundary(|| {
        let c = try_ref!(client);
        // SAFETY: readable by contract.
        let Some(address) = (unsafe { address.bytes() }) else {
            return crate::abi::null("address");
        };
        let hop = try_out!(hop);
        let h = try_!(c.client.hop(hop_key(address)).map_err(oc_error));
        hop.write(h.index() as u32);
        Code::Ok
    })
}

/// A response from `hop` arrived at `now_ns`; `top_via` is its topmost Via value. Records that
/// the hop is alive (ending a suspension) and applies the feedback, writing what happened to
/// `*applied`. A feedback value that breaks RFC 7339 (grammar, a loss above 100, several or
/// unoffered algorithms, a parameter twice) or a via-parm that leaves a quoted string open
/// returns `LC_RESULT_OC_BAD_FEEDBACK` with the reason
/// in `lc_last_error` and leaves the values in force unchanged (the liveness is still
/// recorded). `LC_RESULT_INVALID_ARGUMENT` for an unknown hop. Thread-safe.
///
/// # Safety
/// `client` from `lc_oc_client_new`; `top_via` readable; `applied` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_on_response(
    client: *const lc_oc_client,
    hop: u32,
    now_ns: u64,
    top_via: lc_str,
    applied: *mut lc_oc_applied,
) -> lc_result {
    boundary(|| {
        let c = try_ref!(client);
        let h = try_!(c.hop(hop));
        let via = try_str!(top_via);
        let applied = try_out!(applied);
        let a = try_!(c.client.on_response(h, now_ns, via).map_err(oc_error));
        applied.write(match a {
            Applied::NoFeedback => LC_OC_APPLIED_NO_FEEDBACK,
            Applied::Updated => LC_OC_APPLIED_UPDATED,
            Applied::Same => LC_OC_APPLIED_SAME,
            Applied::Stale => LC_OC_APPLIED_STALE,
            Applied::Busy => LC_OC_APPLIED_BUSY,
        });
        Code::Ok
    })
}

/// A request sent to `hop` timed out, or met a fatal transport error (RFC 7339 §5.9).
/// `suspend_after` of these in a row suspend the hop: every request is shed except one probe
/// per back-off interval, until a response arrives. Thread-safe.
///
/// # Safety
/// `client` from `lc_oc_client_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_on_timeout(
    client: *const lc_oc_client,
    hop: u32,
    now_ns: u64,
) -> lc_result {
    boundary(|| {
        let c = try_ref!(client);
        let h = try_!(c.hop(hop));
        c.client.on_timeout(h, now_ns);
        Code::Ok
    })
}

/// Writes `hop`'s state at `now_ns` into `*out`. Thread-safe.
///
/// # Safety
/// `client` from `lc_oc_client_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_status(
    client: *const lc_oc_client,
    hop: u32,
    now_ns: u64,
    out: *mut lc_oc_hop_status,
) -> lc_result {
    boundary(|| {
        let c = try_ref!(client);
        let h = try_!(c.hop(hop));
        try_out!(out).write(hop_status(&c.client.status(h, now_ns)));
        Code::Ok
    })
}

/// Creates a worker's shard of `client` (its memory allocated here) and writes it to `*out`.
/// `seed` seeds its random numbers (give each worker its own). The shard keeps the client
/// alive. Use it from one thread at a time.
///
/// # Safety
/// `client` from `lc_oc_client_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_shard_new(
    client: *const lc_oc_client,
    seed: u64,
    out: *mut *mut lc_oc_shard,
) -> lc_result {
    boundary(|| {
        let c = try_ref!(client);
        let out = try_out!(out);
        let shard = ClientShard::new(&c.client, seed);
        out.write(Box::into_raw(Box::new(lc_oc_shard {
            client: Arc::clone(&c.client),
            shard,
        })));
        Code::Ok
    })
}

/// Frees a shard. `NULL` is a no-op.
///
/// # Safety
/// `shard` NULL or from `lc_oc_shard_new`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_shard_free(shard: *mut lc_oc_shard) {
    // SAFETY: NULL or from Box::into_raw in lc_oc_shard_new, freed once.
    let _ = boundary(|| unsafe { crate::free_box(shard) });
}

/// Whether to send a new request of `category` (`LC_OC_CATEGORY_REDUCIBLE` or
/// `LC_OC_CATEGORY_PRIORITY`) to `hop` at `now_ns`; writes an `LC_OC_VERDICT_*` to `*verdict`.
/// Ask for new requests only (not for retransmissions, ACK or CANCEL). No allocation, no lock.
///
/// # Safety
/// `shard` from `lc_oc_shard_new`, used by this thread only during the call; `verdict`
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_decide(
    shard: *mut lc_oc_shard,
    hop: u32,
    now_ns: u64,
    category: lc_oc_category,
    verdict: *mut lc_oc_verdict,
) -> lc_result {
    boundary(|| {
        let s = try_mut!(shard);
        let category = match try_value!(category, "lc_oc_decide: category") {
            CategoryC::Reducible => Category::Reducible,
            CategoryC::Priority => Category::Priority,
        };
        let Some(h) = s.client.hop_at(hop as usize) else {
            return crate::abi::invalid("hop", format_args!("{hop} is no hop of this client"));
        };
        let verdict = try_out!(verdict);
        verdict.write(match s.shard.decide(&s.client, h, now_ns, category) {
            Verdict::Forward => LC_OC_VERDICT_FORWARD,
            Verdict::Probe => LC_OC_VERDICT_PROBE,
            Verdict::Shed(ShedReason::Loss) => LC_OC_VERDICT_SHED_LOSS,
            Verdict::Shed(ShedReason::Rate) => LC_OC_VERDICT_SHED_RATE,
            Verdict::Shed(ShedReason::Unreachable) => LC_OC_VERDICT_SHED_UNREACHABLE,
        });
        Code::Ok
    })
}

/// Writes this shard's counters for `hop` into `*out`.
///
/// # Safety
/// `shard` from `lc_oc_shard_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_shard_stats(
    shard: *const lc_oc_shard,
    hop: u32,
    out: *mut lc_oc_shard_counters,
) -> lc_result {
    boundary(|| {
        let s = try_ref!(shard);
        let Some(h) = s.client.hop_at(hop as usize) else {
            return crate::abi::invalid("hop", format_args!("{hop} is no hop of this client"));
        };
        try_out!(out).write(shard_counters(&s.shard.stats(h)));
        Code::Ok
    })
}

/// The category of a raw SIP request (`len` bytes) under `engine`'s exemptions, written to
/// `*category`: `LC_OC_CATEGORY_PRIORITY` for in-dialog requests, emergency calls and listed
/// Resource-Priority namespaces (RFC 7339 §5.10.1), `LC_OC_CATEGORY_NONE` for ACK and CANCEL
/// (send them without asking), else `LC_OC_CATEGORY_REDUCIBLE`. Malformed messages get an
/// `LC_RESULT_SIP_*` code.
///
/// # Safety
/// `engine` from `lc_engine_new`; `msg` readable for `len` bytes; `category` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_category_sip(
    engine: *const lc_engine,
    msg: *const u8,
    len: usize,
    category: *mut lc_oc_category,
) -> lc_result {
    boundary(|| {
        let e = try_ref!(engine);
        let bytes = try_slice!(msg, len);
        let category = try_out!(category);
        let scanned = try_!(sip::scan(bytes).map_err(sip_error_detail));
        let request =
            loadctl::engine::Request::from_sip(&scanned, loadctl::engine::Transport::Udp, None);
        category.write(
            match Category::of(&request, &e.engine.config().exemptions) {
                None => LC_OC_CATEGORY_NONE,
                Some(Category::Reducible) => LC_OC_CATEGORY_REDUCIBLE,
                Some(Category::Priority) => LC_OC_CATEGORY_PRIORITY,
            },
        );
        Code::Ok
    })
}

// ---------------------------------------------------------------------------------------------
// Feedback values

/// Overload-control values of a response's top Via (RFC 7339 §4).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_oc_feedback {
    /// `oc`: a loss percentage (0–100) or a rate in requests/s.
    pub oc: u64,
    /// `LC_OC_ALGORITHM_LOSS` or `LC_OC_ALGORITHM_RATE`.
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
        algorithm: algorithm_to_c(Some(f.algorithm)),
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
    if algorithm == Algorithm::Loss && f.oc > 100 {
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
        algorithm,
        validity_ms: f.validity_ms,
        seq: has_seq.then_some(Seq(f.seq)),
    })
}

/// Reads the overload-control values of a response's top Via (`top_via`, its first via-parm
/// counts) into `*out`. `LC_RESULT_EMPTY` when it carries none (no `oc`, or `oc` without a
/// value: the next hop does not do overload control); `LC_RESULT_OC_BAD_FEEDBACK` when a value
/// breaks RFC 7339 or the via-parm leaves a quoted string open (the reason in
/// `lc_last_error`). A missing `oc-validity` reads as 500, a
/// missing `oc-algo` as loss.
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

// ---------------------------------------------------------------------------------------------
// Server

/// Server settings. Get the defaults with `lc_oc_server_config_default`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_oc_server_config {
    /// The algorithm chosen when a client offers both (default `LC_OC_ALGORITHM_RATE`).
    pub preference: lc_oc_algorithm,
    /// `oc-validity` sent in overload, ms; longer than a period, at most a day (default 500).
    pub validity_ms: u64,
    /// How often the law runs, ns, 1 ms to 10 s (default 100 ms).
    pub period_ns: u64,
    /// Target queueing delay of new requests, ns (default 50 ms).
    pub target_delay_ns: u64,
    /// Horizon over which excess backlog is drained, ns, at least a period (default 500 ms).
    pub drain_ns: u64,
    /// Retransmissions' share of arrivals that means overload, ppm (default 50,000).
    pub retransmission_alarm_ppm: u32,
    /// A rate client that used this share of its rate is constrained, ppm (default 950,000).
    pub busy_ppm: u32,
    /// A constrained rate client's demand is seen · (1 + probe), ppm, up to 10,000,000
    /// (default 250,000).
    pub probe_ppm: u32,
    /// An unconstrained rate client's demand is seen · (1 + headroom), ppm (default 100,000).
    pub headroom_ppm: u32,
    /// The least rate told to a client, requests/s (default 1).
    pub min_rate: u64,
    /// Weight of the newest period in smoothed estimates, ppm, 1 to 1,000,000 (default 500,000).
    pub alpha_ppm: u32,
    /// Periods without need before control stops (default 10).
    pub calm_periods: u32,
    /// How long an algorithm selection stays, ns (default 3600 s, RFC 7339 §5.8).
    pub hold_algorithm_ns: u64,
    /// Clients tracked (default 1,024).
    pub max_clients: u32,
}

impl lc_oc_server_config {
    fn from_rust(c: &ServerConfig) -> Self {
        Self {
            preference: algorithm_to_c(Some(c.preference)),
            validity_ms: c.validity_ms,
            period_ns: c.period_ns,
            target_delay_ns: c.target_delay_ns,
            drain_ns: c.drain_ns,
            retransmission_alarm_ppm: ppm(c.retransmission_alarm),
            busy_ppm: ppm(c.busy),
            probe_ppm: ppm(c.probe),
            headroom_ppm: ppm(c.headroom),
            min_rate: c.min_rate,
            alpha_ppm: ppm(c.alpha),
            calm_periods: c.calm_periods,
            hold_algorithm_ns: c.hold_algorithm_ns,
            max_clients: c.max_clients.min(u32::MAX as usize) as u32,
        }
    }

    fn to_rust(self) -> Result<ServerConfig, Code> {
        Ok(ServerConfig {
            preference: algorithm_from_c(crate::abi::checked(
                self.preference,
                "lc_oc_server_config.preference",
            )?),
            validity_ms: self.validity_ms,
            period_ns: self.period_ns,
            target_delay_ns: self.target_delay_ns,
            drain_ns: self.drain_ns,
            retransmission_alarm: from_ppm(self.retransmission_alarm_ppm),
            busy: from_ppm(self.busy_ppm),
            probe: from_ppm(self.probe_ppm),
            headroom: from_ppm(self.headroom_ppm),
            min_rate: self.min_rate,
            alpha: from_ppm(self.alpha_ppm),
            calm_periods: self.calm_periods,
            hold_algorithm_ns: self.hold_algorithm_ns,
            max_clients: self.max_clients as usize,
        })
    }
}

/// What the server's queue did over an interval (`lc_oc_server_report_queue`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_oc_queue_load {
    /// How long the oldest new request now waiting has waited, ns (0 when none waits).
    pub delay_ns: u64,
    /// Requests served in the interval, retransmissions included.
    pub served: u64,
    /// Of those, retransmissions (at most `served`).
    pub served_retransmissions: u64,
    /// Time spent serving in the interval, ns.
    pub busy_ns: u64,
}

/// The server's state, as `lc_oc_server_status` writes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_oc_server_state {
    /// 1 while overload control is in effect.
    pub overloaded: u8,
    /// The target rate of new requests, thousandths of a request per second.
    pub target_milli: u64,
    /// The estimated service rate, thousandths per second (0 before one is measured).
    pub service_rate_milli: u64,
    /// The last reported queueing delay, ns.
    pub delay_ns: u64,
    /// Retransmissions' share of the last period's arrivals, ppm.
    pub retransmission_share_ppm: u32,
    /// The current `oc-seq`, units of 10⁻⁵.
    pub seq: u64,
    /// Clients tracked.
    pub clients: u64,
}

/// The server side. Thread-safe (calls serialise on its lock).
pub struct lc_oc_server {
    server: Mutex<Server>,
}

impl lc_oc_server {
    fn lock(&self) -> std::sync::MutexGuard<'_, Server> {
        self.server
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Writes the default server configuration into `*out`.
///
/// # Safety
/// `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_config_default(out: *mut lc_oc_server_config) -> lc_result {
    boundary(|| {
        try_out!(out).write(lc_oc_server_config::from_rust(&ServerConfig::default()));
        Code::Ok
    })
}

/// Creates a server and writes it to `*out`. `config` NULL means the defaults.
/// `LC_RESULT_INVALID_ARGUMENT` names the first field out of range.
///
/// # Safety
/// `config` NULL or readable; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_new(
    config: *const lc_oc_server_config,
    out: *mut *mut lc_oc_server,
) -> lc_result {
    boundary(|| {
        let out = try_out!(out);
        // SAFETY: the caller promises NULL or a valid struct.
        let config = match unsafe { config.as_ref() } {
            None => ServerConfig::default(),
            Some(c) => try_!(c.to_rust()),
        };
        let server = try_!(Server::new(config).map_err(oc_error));
        out.write(Box::into_raw(Box::new(lc_oc_server {
            server: Mutex::new(server),
        })));
        Code::Ok
    })
}

/// Frees a server. `NULL` is a no-op.
///
/// # Safety
/// `server` NULL or from `lc_oc_server_new`, not used by another thread, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_free(server: *mut lc_oc_server) {
    // SAFETY: NULL or from Box::into_raw in lc_oc_server_new, freed once.
    let _ = boundary(|| unsafe { crate::free_box(server) });
}

/// A request arrived from `client` (its address as bytes, e.g. `"192.0.2.7:5060"`) at
/// `now_ns`, with `top_via` its topmost Via value (absent: read as no offer), its class
/// (`LC_CLASS_ORIGINAL` / `LC_CLASS_RETRANSMISSION`, e.g. from `lc_detector_observe_sip`) and
/// its category (`LC_OC_CATEGORY_REDUCIBLE` / `LC_OC_CATEGORY_PRIORITY`, e.g. from
/// `lc_oc_category_sip`; ACK and CANCEL need not be passed). Writes `LC_OC_ADMISSION_REJECT`
/// for a request the server should answer 503 without Retry-After (a reducible request of a
/// client without `oc` in its Via while the server is in overload, RFC 7339 §5.10.2; priority
/// requests are never rejected), else `LC_OC_ADMISSION_ADMIT`. Call it for every request
/// received.
///
/// # Safety
/// `server` from `lc_oc_server_new`; the strings readable or absent; `admission` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_on_request(
    server: *const lc_oc_server,
    now_ns: u64,
    client: lc_str,
    top_via: lc_str,
    request_class: crate::prsm::lc_class,
    category: lc_oc_category,
    admission: *mut lc_oc_admission,
) -> lc_result {
    boundary(|| {
        let s = try_ref!(server);
        // SAFETY: readable by contract.
        let Some(client) = (unsafe { client.bytes() }) else {
            return crate::abi::null("client");
        };
        // SAFETY: readable or absent by contract.
        let via = try_!(unsafe { top_via.to_opt_str("top_via") });
        let class: Class = try_value!(request_class, "lc_oc_server_on_request: request_class");
        let category = match try_value!(category, "lc_oc_server_on_request: category") {
            CategoryC::Reducible => Category::Reducible,
            CategoryC::Priority => Category::Priority,
        };
        let admission = try_out!(admission);
        let offer = via.and_then(Offer::parse);
        admission.write(
            match s.lock().on_request(now_ns, client, offer, class, category) {
                Admission::Admit => LC_OC_ADMISSION_ADMIT,
                Admission::Reject => LC_OC_ADMISSION_REJECT,
            },
        );
        Code::Ok
    })
}

/// Writes the values a response to `client` carries now into `*out`; `LC_RESULT_EMPTY` when the
/// client does not take part (its requests carry no `oc`) or is unknown.
///
/// # Safety
/// `server` from `lc_oc_server_new`; `client` readable; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_feedback(
    server: *const lc_oc_server,
    now_ns: u64,
    client: lc_str,
    out: *mut lc_oc_feedback,
) -> lc_result {
    boundary(|| {
        let s = try_ref!(server);
        // SAFETY: readable by contract.
        let Some(client) = (unsafe { client.bytes() }) else {
            return crate::abi::null("client");
        };
        let out = try_out!(out);
        match s.lock().feedback(now_ns, client) {
            Some(f) => {
                out.write(feedback_to_c(&f));
                Code::Ok
            }
            None => Code::Empty,
        }
    })
}

/// Writes the top Via of a response to `client` (`top_via`: the request's top Via as received)
/// with the server's current values for that client into `buf` (`cap` bytes, not
/// NUL-terminated), its length to `*written` (RFC 7339 §5.2). `LC_RESULT_EMPTY` (nothing
/// written, `*written` 0) when the client does not take part: send the Via as it was.
/// `LC_RESULT_BUFFER_TOO_SMALL` with the length needed when it does not fit;
/// `LC_RESULT_SIP_BAD_VIA` (`*written` 0) when the Via leaves a quoted string open.
///
/// # Safety
/// `server` from `lc_oc_server_new`; the strings readable; `buf` NULL or writable for `cap`
/// bytes; `written` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_write_via(
    server: *const lc_oc_server,
    now_ns: u64,
    client: lc_str,
    top_via: lc_str,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> lc_result {
    boundary(|| {
        let s = try_ref!(server);
        // SAFETY: readable by contract.
        let Some(client) = (unsafe { client.bytes() }) else {
            return crate::abi::null("client");
        };
        let via = try_str!(top_via);
        let out = try_buf!(buf, cap, written);
        let Some(f) = s.lock().feedback(now_ns, client) else {
            let _ = out.nothing();
            return Code::Empty;
        };
        let mut text = String::with_capacity(via.len() + 64);
        if let Err(e) = f.write_via(via, &mut text) {
            let _ = out.nothing();
            return bad_via(e);
        }
        out.deliver(text.as_bytes())
    })
}

/// Reports what the server's queue did since the last report (for PRSM, the primary queue).
/// Reports within a period add up; the law runs once per period. `LC_RESULT_INVALID_ARGUMENT`
/// when `served_retransmissions` exceeds `served`.
///
/// # Safety
/// `server` from `lc_oc_server_new`; `load` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_report_queue(
    server: *const lc_oc_server,
    now_ns: u64,
    load: *const lc_oc_queue_load,
) -> lc_result {
    boundary(|| {
        let s = try_ref!(server);
        let l = *try_ref!(load);
        try_!(
            s.lock()
                .report(
                    now_ns,
                    Load::Queue(QueueLoad {
                        delay_ns: l.delay_ns,
                        served: l.served,
                        served_retransmissions: l.served_retransmissions,
                        busy_ns: l.busy_ns,
                    }),
                )
                .map_err(oc_error)
        );
        Code::Ok
    })
}

/// Reports an occupancy signal of the appliance's own (CPU, memory, …): `measured_ppm` against
/// `target_ppm` (> 0), parts per million of full occupancy. With such reports the law admits
/// `admitted · target / measured`. `LC_RESULT_INVALID_ARGUMENT` for a zero target.
///
/// # Safety
/// `server` from `lc_oc_server_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_report_occupancy(
    server: *const lc_oc_server,
    now_ns: u64,
    measured_ppm: u32,
    target_ppm: u32,
) -> lc_result {
    boundary(|| {
        let s = try_ref!(server);
        try_!(
            s.lock()
                .report(
                    now_ns,
                    Load::Occupancy {
                        measured: from_ppm(measured_ppm),
                        target: from_ppm(target_ppm),
                    },
                )
                .map_err(oc_error)
        );
        Code::Ok
    })
}

/// Runs the law for every period ended by `now_ns` (the other server calls do this too; call it
/// when no request arrives).
///
/// # Safety
/// `server` from `lc_oc_server_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_tick(server: *const lc_oc_server, now_ns: u64) -> lc_result {
    boundary(|| {
        try_ref!(server).lock().handle_timeout(now_ns);
        Code::Ok
    })
}

/// Writes the server's state into `*out`.
///
/// # Safety
/// `server` from `lc_oc_server_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_status(
    server: *const lc_oc_server,
    out: *mut lc_oc_server_state,
) -> lc_result {
    boundary(|| {
        let s = try_ref!(server).lock().status();
        try_out!(out).write(lc_oc_server_state {
            overloaded: u8::from(s.overloaded),
            target_milli: milli(s.target),
            service_rate_milli: milli(s.service_rate),
            delay_ns: s.delay_ns,
            retransmission_share_ppm: ppm(s.retransmission_share),
            seq: s.seq.0,
            clients: s.clients as u64,
        });
        Code::Ok
    })
}
