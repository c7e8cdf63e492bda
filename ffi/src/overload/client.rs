//! `lc_oc_client` (one per proxy: the next hops' feedback) and `lc_oc_shard` (one per worker:
//! the decision), RFC 7339 / RFC 7415's client.

use super::*;
use crate::scanned::Scan;

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
    /// How long each shard samples its category mix between two steps of its estimate, ns
    /// (default 1 s; a period with fewer than 20 requests goes on).
    pub mix_period_ns: u64,
    /// The reducible share assumed before a mix is sampled, ppm (default 800,000).
    pub reducible_share_ppm: u32,
    /// Consecutive timeouts that suspend a hop (default 3).
    pub suspend_after: u32,
    /// First probe interval of a suspended hop, ns (default 1 s).
    pub probe_min_ns: u64,
    /// Longest probe interval, ns (default 64 s).
    pub probe_max_ns: u64,
    /// How long a hop must go without requests (`lc_oc_decide`) and responses before its
    /// cell may be given to another address, ns: at least 64 s (twice a transaction's
    /// longest life); default 300 s. The hop's values, suspension and counters go with it.
    pub hop_idle_ns: u64,
}

impl lc_oc_client_config {
    fn from_rust(c: &ClientConfig) -> Self {
        let algorithms = match c.algorithms {
            Algorithms::Loss => LC_OC_ALGORITHMS_LOSS,
            Algorithms::Rate => LC_OC_ALGORITHMS_RATE,
            Algorithms::LossThenRate => LC_OC_ALGORITHMS_LOSS | LC_OC_ALGORITHMS_RATE,
            Algorithms::RateThenLoss => {
                LC_OC_ALGORITHMS_LOSS | LC_OC_ALGORITHMS_RATE | LC_OC_ALGORITHMS_PREFER_RATE
            }
        };
        let m = |x: f64| (x * 1e3).round() as u32;
        Self {
            algorithms,
            tau_reducible_milli: m(c.tau_reducible),
            tau_priority_milli: m(c.tau_priority),
            tau0_milli: m(c.tau0),
            resonance: u8::from(c.resonance),
            mix_period_ns: nanos(c.mix_period),
            reducible_share_ppm: ppm(c.reducible_share),
            suspend_after: c.suspend_after,
            probe_min_ns: nanos(c.probe_min),
            probe_max_ns: nanos(c.probe_max),
            hop_idle_ns: nanos(c.hop_idle),
        }
    }

    fn to_rust(self) -> Result<ClientConfig, Code> {
        let flags = crate::abi::checked_flags(
            self.algorithms,
            LC_OC_ALGORITHMS_LOSS | LC_OC_ALGORITHMS_RATE | LC_OC_ALGORITHMS_PREFER_RATE,
            "lc_oc_client_config.algorithms",
        )?;
        // PREFER_RATE orders a list holding both; alone with either it changes nothing.
        let algorithms = match (
            flags & LC_OC_ALGORITHMS_LOSS != 0,
            flags & LC_OC_ALGORITHMS_RATE != 0,
        ) {
            (true, false) => Algorithms::Loss,
            (false, true) => Algorithms::Rate,
            (true, true) if flags & LC_OC_ALGORITHMS_PREFER_RATE != 0 => Algorithms::RateThenLoss,
            (true, true) => Algorithms::LossThenRate,
            (false, false) => {
                return Err(oc_error(OcError::Config {
                    field: "algorithms",
                    expected: loadctl::overload::client::ALGORITHMS_EXPECTED,
                }));
            }
        };
        let m = |v: u32| f64::from(v) / 1e3;
        Ok({
            let mut config = ClientConfig::default();
            config.algorithms = algorithms;
            config.tau_reducible = m(self.tau_reducible_milli);
            config.tau_priority = m(self.tau_priority_milli);
            config.tau0 = m(self.tau0_milli);
            config.resonance =
                crate::abi::checked_bool(self.resonance, "lc_oc_client_config.resonance")?;
            config.mix_period = Duration::from_nanos(self.mix_period_ns);
            config.reducible_share = from_ppm(self.reducible_share_ppm);
            config.suspend_after = self.suspend_after;
            config.probe_min = Duration::from_nanos(self.probe_min_ns);
            config.probe_max = Duration::from_nanos(self.probe_max_ns);
            config.hop_idle = Duration::from_nanos(self.hop_idle_ns);
            config
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
        remaining_ms: millis(s.remaining),
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
    /// ACK and CANCEL counted (`LC_OC_CATEGORY_NONE`).
    pub exempt: u64,
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
        exempt: s.exempt,
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
/// `CLOCK_MONOTONIC`. `config` NULL means the defaults. `LC_RESULT_NULL_PARAMETER` for a NULL
/// `mem`; `LC_RESULT_INVALID_ARGUMENT` for a misaligned `mem`, fewer than one or more than
/// 1,048,576 cells, or a configuration out of range.
///
/// # Safety
/// `config` NULL or readable; `mem` `len` bytes readable and writable by atomic
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
        if mem.is_null() {
            return crate::abi::null("mem");
        }
        if !(mem as usize).is_multiple_of(cell) {
            return crate::abi::invalid(
                "mem",
                format_args!("{mem:p} is not aligned to {cell} bytes"),
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

/// The hop of a next hop's address at `now_ns` (`address`: any bytes that identify it, e.g.
/// `"192.0.2.7:5060"` — RFC 7339 §5.4 scopes overload control to IP and port), added if new,
/// written to `*hop` (an index below the capacity). A lookup reads at most 64 cells and takes no
/// lock. A new address takes a free cell near its hash, else the cell of a hop idle for
/// `hop_idle_ns` (that hop is forgotten); `LC_RESULT_OC_TABLE_FULL` when the 64 cells it may
/// use all hold hops used within that time (size the table at about twice the next hops used
/// at once). A lookup counts as a use. Thread-safe; two threads adding the same address get the
/// same hop.
///
/// A hop index stays this address's while the hop is used: keep it for a request and its
/// response (`lc_oc_decide`, `lc_oc_client_on_response`, `lc_oc_client_on_timeout`), and look
/// the address up again for the next request.
///
/// # Safety
/// `client` from `lc_oc_client_new`; `address` readable; `hop` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_hop(
    client: *const lc_oc_client,
    address: lc_str,
    now_ns: u64,
    hop: *mut u32,
) -> lc_result {
    boundary(|| {
        let c = try_ref!(client);
        // SAFETY: readable by contract.
        let key = try_!(unsafe { address_key(address) });
        let hop = try_out!(hop);
        let h = try_!(c.client.hop(key, now_ns).map_err(oc_error));
        hop.write(h.index() as u32);
        Code::Ok
    })
}

/// The hop of `address` if the table holds it, written to `*hop`; `LC_OC_NO_HOP` when it does
/// not (never adds). For a response or a timeout: a response from an address the client never
/// sent to (a stray or spoofed one) must not take a cell. Lock-free, reads at most 64 cells.
///
/// # Safety
/// `client` from `lc_oc_client_new`; `address` readable; `hop` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_client_find(
    client: *const lc_oc_client,
    address: lc_str,
    hop: *mut u32,
) -> lc_result {
    boundary(|| {
        let c = try_ref!(client);
        // SAFETY: readable by contract.
        let key = try_!(unsafe { address_key(address) });
        let hop = try_out!(hop);
        let found = c.client.find(key);
        hop.write(found.map_or(LC_OC_NO_HOP, |h| h.index() as u32));
        Code::Ok
    })
}

/// The hop key of a next hop's `address` (`LC_RESULT_NULL_PARAMETER` when it is absent).
///
/// # Safety
/// `address` NULL or readable.
unsafe fn address_key(address: lc_str) -> Result<u64, Code> {
    // SAFETY: forwarded from the caller.
    match unsafe { address.bytes() } {
        Some(a) => Ok(hop_key(a)),
        None => Err(crate::abi::null("address")),
    }
}

/// What `lc_oc_client_find` writes for an address the table does not hold.
pub const LC_OC_NO_HOP: u32 = u32::MAX;

/// A response from `hop` arrived at `now_ns`; `top_via` is its topmost Via value. Records that
/// the hop is alive (ending a suspension) and applies the feedback, writing what happened to
/// `*applied`. The feedback is read as `lc_oc_feedback_parse` reads it (what it accepts beyond
/// RFC 7339's grammar is listed there); without `oc-algo` the algorithm in force stays. A value
/// that breaks RFC 7339 (grammar, a loss above 100, several or unoffered algorithms, a
/// parameter twice) or a via-parm that leaves a quoted string open returns
/// `LC_RESULT_OC_BAD_FEEDBACK` with the reason in `lc_last_error`, and a `top_via` that is not
/// UTF-8 `LC_RESULT_INVALID_UTF8`; either leaves the values in force unchanged, but the
/// liveness is recorded (the hop did answer). `LC_OC_APPLIED_STALE` for an older `oc-seq`
/// than the values in force, or none while those came with one (RFC 7339 §4.4: a lower one
/// applies only as a wrap-around, from the top 1 % of the range to the bottom 1 %); a stop
/// (`oc-validity=0`) orders what follows for 32 s. `LC_RESULT_INVALID_ARGUMENT` for an unknown
/// hop. Thread-safe.
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
        let applied = try_out!(applied);
        // SAFETY: the caller promises a readable string or NULL.
        let via = match unsafe { top_via.to_str("top_via") } {
            Ok(via) => via,
            Err(code) => {
                // A Via that is not text still came in a response: the hop answered.
                if code == Code::InvalidUtf8 {
                    c.client.heard_from(h);
                }
                return code;
            }
        };
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
/// Ask once per new request (not for retransmissions). No allocation, no lock. A request shed
/// (`LC_OC_VERDICT_SHED_*`) is the caller's to place: another next hop that is not overloaded,
/// else a 503 *without* Retry-After (RFC 7339 §5.10: "it will need to reject these requests
/// with a "503 (Service Unavailable)" response without the Retry-After header").
///
/// Also call it with `LC_OC_CATEGORY_NONE` for every ACK and CANCEL sent to the hop: always
/// `LC_OC_VERDICT_FORWARD`, but counted in the traffic mix the loss algorithm converts `oc`
/// with (they are requests "not subject to reduction", RFC 7339 §7.2). A caller that leaves
/// them out makes the loss algorithm shed more than `oc` of a call mix.
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
        let category = if category == LC_OC_CATEGORY_NONE {
            None
        } else {
            Some(match try_value!(category, "lc_oc_decide: category") {
                CategoryC::Reducible => Category::Reducible,
                CategoryC::Priority => Category::Priority,
            })
        };
        let Some(h) = s.client.hop_at(hop as usize) else {
            return crate::abi::invalid("hop", format_args!("{hop} is no hop of this client"));
        };
        let verdict = try_out!(verdict);
        let Some(category) = category else {
            s.shard.exempt(&s.client, h, now_ns);
            verdict.write(LC_OC_VERDICT_FORWARD);
            return Code::Ok;
        };
        verdict.write(match s.shard.decide(&s.client, h, now_ns, category) {
            OcVerdict::Forward => LC_OC_VERDICT_FORWARD,
            OcVerdict::Probe => LC_OC_VERDICT_PROBE,
            OcVerdict::Shed(ShedReason::Loss) => LC_OC_VERDICT_SHED_LOSS,
            OcVerdict::Shed(ShedReason::Rate) => LC_OC_VERDICT_SHED_RATE,
            OcVerdict::Shed(ShedReason::Unreachable) => LC_OC_VERDICT_SHED_UNREACHABLE,
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
        try_out!(out).write(shard_counters(&s.shard.stats(&s.client, h)));
        Code::Ok
    })
}

/// The category of a raw SIP request (`len` bytes) under `engine`'s exemptions, written to
/// `*category`: `LC_OC_CATEGORY_PRIORITY` for requests in a dialog the caller keeps
/// (`LC_SIP_KNOWN_DIALOG`), emergency calls, and listed Resource-Priority namespaces from a
/// peer in `lc_engine_config.priority_peers` (RFC 7339 §5.10.1, the same local policy as
/// filtering), `LC_OC_CATEGORY_NONE` for ACK and CANCEL (pass them to `lc_oc_decide` as
/// such), else `LC_OC_CATEGORY_REDUCIBLE`. `options` gives the request's origin (`source`,
/// `flags`; its time and target are not read) as for `lc_classify_sip_opts`; NULL: unknown, so
/// no Resource-Priority counts and a To tag makes no dialog (unless `LC_EXEMPT_TO_TAG`); BYE,
/// emergency calls and `load-control` SUBSCRIBEs are priority all the same.
/// Malformed messages get an `LC_RESULT_SIP_*` code; bad options `LC_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
/// `engine` from `lc_engine_new`; `msg` readable for `len` bytes; `options` NULL or readable;
/// `category` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_category_sip(
    engine: *const lc_engine,
    msg: *const u8,
    len: usize,
    options: *const crate::worker::lc_sip_options,
    category: *mut lc_oc_category,
) -> lc_result {
    boundary(|| {
        let e = try_ref!(engine);
        let bytes = try_slice!(msg, len);
        // SAFETY: NULL or readable by contract.
        let origin = try_!(crate::worker::Peer::of_options(unsafe { options.as_ref() }));
        let category = try_out!(category);
        let scanned = try_!(sip::scan(bytes).map_err(sip_error_detail));
        category.write(category_of(e, &Scan::new(scanned), origin));
        Code::Ok
    })
}

/// The category of a request `lc_sip_scan` scanned, written to `*category`: the same as
/// `lc_oc_category_sip` gives the same message with the same `options` (NULL: an unknown
/// origin), without scanning it again. Bad options get `LC_RESULT_INVALID_ARGUMENT`, and so
/// does a `scanned` that holds no successful scan (zeroed, or its `lc_sip_scan` failed).
///
/// # Safety
/// `engine` from `lc_engine_new`; `scanned` filled by `lc_sip_scan`, its message unchanged and
/// readable (see `lc_scanned_sip`); `options` NULL or readable; `category` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_category_scanned(
    engine: *const lc_engine,
    scanned: *const crate::scanned::lc_scanned_sip,
    options: *const crate::worker::lc_sip_options,
    category: *mut lc_oc_category,
) -> lc_result {
    boundary(|| {
        let e = try_ref!(engine);
        // SAFETY: NULL or readable by contract.
        let origin = try_!(crate::worker::Peer::of_options(unsafe { options.as_ref() }));
        let category = try_out!(category);
        // SAFETY: NULL or filled by lc_sip_scan, its message kept, by contract.
        let scan = try_!(unsafe { crate::scanned::load(scanned) });
        category.write(category_of(e, &scan, origin));
        Code::Ok
    })
}

/// The `LC_OC_CATEGORY_*` of a scanned request from `origin` (the checked options) under
/// `engine`'s exemptions.
fn category_of(
    engine: &lc_engine,
    scanned: &Scan<'_>,
    (peer, transport): (crate::worker::Peer, loadctl::runtime::Transport),
) -> lc_oc_category {
    let request = peer.apply(scanned.request(transport, None));
    match Category::of(&request, &engine.engine.config().exemptions) {
        None => LC_OC_CATEGORY_NONE,
        Some(Category::Reducible) => LC_OC_CATEGORY_REDUCIBLE,
        Some(Category::Priority) => LC_OC_CATEGORY_PRIORITY,
    }
}
