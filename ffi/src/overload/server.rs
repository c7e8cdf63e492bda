//! `lc_oc_server`: RFC 7339's server, from its load reports to the feedback it writes.

use std::time::Duration;

use super::*;
use crate::abi::{millis, nanos};

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
            validity_ms: millis(c.validity),
            period_ns: nanos(c.period),
            target_delay_ns: nanos(c.target_delay),
            drain_ns: nanos(c.drain),
            retransmission_alarm_ppm: ppm(c.retransmission_alarm),
            busy_ppm: ppm(c.busy),
            probe_ppm: ppm(c.probe),
            headroom_ppm: ppm(c.headroom),
            min_rate: c.min_rate,
            alpha_ppm: ppm(c.alpha),
            calm_periods: c.calm_periods,
            hold_algorithm_ns: nanos(c.hold_algorithm),
            max_clients: c.max_clients.min(u32::MAX as usize) as u32,
        }
    }

    fn to_rust(self) -> Result<ServerConfig, Code> {
        Ok({
            let mut config = ServerConfig::default();
            config.preference = algorithm_from_c(crate::abi::checked(
                self.preference,
                "lc_oc_server_config.preference",
            )?);
            config.validity = Duration::from_millis(self.validity_ms);
            config.period = Duration::from_nanos(self.period_ns);
            config.target_delay = Duration::from_nanos(self.target_delay_ns);
            config.drain = Duration::from_nanos(self.drain_ns);
            config.retransmission_alarm = from_ppm(self.retransmission_alarm_ppm);
            config.busy = from_ppm(self.busy_ppm);
            config.probe = from_ppm(self.probe_ppm);
            config.headroom = from_ppm(self.headroom_ppm);
            config.min_rate = self.min_rate;
            config.alpha = from_ppm(self.alpha_ppm);
            config.calm_periods = self.calm_periods;
            config.hold_algorithm = Duration::from_nanos(self.hold_algorithm_ns);
            config.max_clients = self.max_clients as usize;
            config
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
                        delay: Duration::from_nanos(l.delay_ns),
                        served: l.served,
                        served_retransmissions: l.served_retransmissions,
                        busy: Duration::from_nanos(l.busy_ns),
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
            delay_ns: nanos(s.delay),
            retransmission_share_ppm: ppm(s.retransmission_share),
            seq: s.seq.0,
            clients: s.clients as u64,
        });
        Code::Ok
    })
}

/// The bytes of a client's key `lc_oc_server_client` reports (an IPv6 address in brackets with
/// its port is 47).
pub const LC_OC_CLIENT_KEY_BYTES: usize = 48;
const _: () = assert!(LC_OC_CLIENT_KEY_BYTES == loadctl::overload::server::CLIENT_KEY_BYTES);

/// One client as the server sees it, as `lc_oc_server_client` writes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_oc_server_client_state {
    /// The key given to `lc_oc_server_on_request` (its first `LC_OC_CLIENT_KEY_BYTES` bytes),
    /// not NUL-terminated; `key_len` 0 for the newcomers' aggregate.
    pub key: [u8; LC_OC_CLIENT_KEY_BYTES],
    /// Bytes of `key` used.
    pub key_len: u32,
    /// The algorithm selected for it; `LC_OC_ALGORITHM_NONE` for a client that does not take
    /// part (and for the aggregate).
    pub algorithm: lc_oc_algorithm,
    /// Its estimated offered rate of new requests, thousandths per second.
    pub demand_milli: u64,
    /// Its share of the target, thousandths per second.
    pub share_milli: u64,
    /// The `oc` value its responses carry now (0 when not in overload).
    pub oc: u64,
    /// Requests of it the server rejected.
    pub rejected: u64,
    /// 1 for a newcomer (first seen in overload, counted in the aggregate) and for the
    /// aggregate.
    pub newcomer: u8,
    /// 1 for a participant that sent more than it was told: treated as not taking part until
    /// it conforms (RFC 7339 §11).
    pub nonconforming: u8,
}

/// Writes client number `index` (0, 1, …: the tracked clients in the order of their keys,
/// then the newcomers' aggregate) into `*out`; `LC_RESULT_EMPTY` past the last. For
/// statistics: each call takes a snapshot, so a loop over the clients while requests arrive may
/// see one twice or miss one. The aggregate counts every key first seen in overload that has
/// not become a client of its own, and every key the table had no slot for.
///
/// # Safety
/// `server` from `lc_oc_server_new`; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_oc_server_client(
    server: *const lc_oc_server,
    index: u32,
    out: *mut lc_oc_server_client_state,
) -> lc_result {
    boundary(|| {
        let s = try_ref!(server);
        let out = try_out!(out);
        let clients = s.lock().clients();
        let Some(c) = clients.get(index as usize) else {
            return Code::Empty;
        };
        let mut key = [0; LC_OC_CLIENT_KEY_BYTES];
        let len = c.key.len().min(LC_OC_CLIENT_KEY_BYTES);
        key[..len].copy_from_slice(&c.key[..len]);
        out.write(lc_oc_server_client_state {
            key,
            key_len: len as u32,
            algorithm: algorithm_to_c(c.algorithm),
            demand_milli: milli(c.demand),
            share_milli: milli(c.share),
            oc: c.oc,
            rejected: c.rejected,
            newcomer: u8::from(c.newcomer),
            nonconforming: u8::from(c.nonconforming),
        });
        Code::Ok
    })
}
