//! PRSM through the C ABI: the two-queue request scheduler (`lc_scheduler`) and the
//! retransmission detector (`lc_detector`) of `loadctl::prsm`.
//!
//! Per request received, classification comes first: run it through `lc_classify_sip`; only if
//! it is accepted ask the detector whether it is an original or a retransmission
//! (`lc_detector_observe_sip`, or `lc_detector_observe` with the fields of your own parser) and
//! push it with that class (`lc_scheduler_push`). The serving threads take work out with
//! `lc_scheduler_pop`: originals first, retransmissions only when no original waits. When a push
//! finds its queue full (`LC_RESULT_QUEUE_FULL`, tail drop) the caller answers or discards the
//! request, and may `lc_detector_forget_sip` it so that the client's next copy counts as an
//! original again.
//!
//! Both handles are thread-safe and every call takes a `const` handle: any thread may push,
//! pop, observe and forget at the same time as any other (the scheduler is a lock-free
//! multi-producer, multi-consumer queue pair; the detector's table is split into independently
//! locked stripes). The library never reads a clock: `now_ns` is monotonic nanoseconds from any
//! fixed origin, the same for every call on one detector.
//!
//! Scheduler items are `uintptr_t` tokens the library never looks into: a pointer to the
//! caller's request, or an index into its own table. Items still queued when the scheduler is
//! freed are forgotten (drain it first if they own memory).
//!
//! `lc_class` and `lc_discipline` are integers with named constants, as every enum-like value
//! of the ABI (the crate documentation's integer-and-check rule): an unknown one is refused
//! with `LC_RESULT_INVALID_ARGUMENT`.

use loadctl::prsm::{
    Class, ConfigError, DetectorConfig, DetectorStats, Discipline, KeyError, QueueStats,
    RetransmissionDetector, Scheduler, SchedulerConfig, SchedulerStats, TransactionKey,
    TransactionParts,
};
use loadctl::sip;

use crate::abi::FromC;
use crate::worker::sip_error_detail;
use crate::{Code, boundary, lc_result, lc_str};

/// A scheduler item: an integer as wide as a pointer (`uintptr_t` in the header), opaque to the
/// library.
pub type lc_uintptr = usize;

/// Whether a request is the first copy of its transaction seen or a retransmission of it:
/// `LC_CLASS_ORIGINAL` or `LC_CLASS_RETRANSMISSION`.
pub type lc_class = u32;
/// The first copy of a transaction: served from the primary queue.
pub const LC_CLASS_ORIGINAL: lc_class = 0;
/// A later copy of a transaction already seen: served only when no original waits.
pub const LC_CLASS_RETRANSMISSION: lc_class = 1;

/// How a scheduler orders its work: `LC_DISCIPLINE_PRIORITY` or `LC_DISCIPLINE_FIFO`.
pub type lc_discipline = u32;
/// PRSM: originals in the primary queue, retransmissions in the secondary queue, which is
/// served only when the primary queue is empty.
pub const LC_DISCIPLINE_PRIORITY: lc_discipline = 0;
/// A conventional server: one FIFO queue of `primary_capacity` for everything
/// (`secondary_capacity` is ignored); the counters still tell the classes apart.
pub const LC_DISCIPLINE_FIFO: lc_discipline = 1;

impl FromC for Class {
    const C_NAMES: &'static str = "LC_CLASS_*";

    fn from_c(value: u32) -> Option<Self> {
        match value {
            LC_CLASS_ORIGINAL => Some(Class::Original),
            LC_CLASS_RETRANSMISSION => Some(Class::Retransmission),
            _ => None,
        }
    }
}

impl FromC for Discipline {
    const C_NAMES: &'static str = "LC_DISCIPLINE_*";

    fn from_c(value: u32) -> Option<Self> {
        match value {
            LC_DISCIPLINE_PRIORITY => Some(Discipline::Priority),
            LC_DISCIPLINE_FIFO => Some(Discipline::Fifo),
            _ => None,
        }
    }
}

fn class_to_c(class: Class) -> lc_class {
    match class {
        Class::Original => LC_CLASS_ORIGINAL,
        Class::Retransmission => LC_CLASS_RETRANSMISSION,
    }
}

/// Every refused configuration is an argument out of range (zero or too large a capacity, a
/// zero T1, more stripes than capacity).
fn config_error(e: ConfigError) -> Code {
    crate::error::fail(Code::InvalidArgument, e)
}

/// The result code of a refused top Via, with its message as the call's error detail.
fn key_error(e: KeyError) -> Code {
    crate::error::detail(format_args!("SIP: {e}"));
    match e {
        KeyError::MissingVia => Code::SipMissingVia,
        KeyError::BadVia => Code::SipBadVia,
    }
}

/// The two-queue scheduler. Thread-safe: any thread may push and pop concurrently.
pub struct lc_scheduler {
    scheduler: Scheduler<lc_uintptr>,
}

impl lc_scheduler {
    /// The Rust scheduler behind the handle (for Rust code that links the rlib).
    pub fn scheduler(&self) -> &Scheduler<lc_uintptr> {
        &self.scheduler
    }
}

/// Scheduler settings.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_scheduler_config {
    /// `LC_DISCIPLINE_PRIORITY` (PRSM) or `LC_DISCIPLINE_FIFO`.
    pub discipline: lc_discipline,
    /// Items the primary queue holds (originals; everything under FIFO). 1 to 2^28.
    pub primary_capacity: usize,
    /// Items the secondary queue holds (retransmissions). 1 to 2^28 under PRSM; ignored under
    /// FIFO.
    pub secondary_capacity: usize,
}

/// Counters and occupancy of one scheduler queue.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_queue_counters {
    /// Capacity (0 for the unused secondary queue of a FIFO scheduler).
    pub capacity: usize,
    /// Items queued now (a snapshot while other threads push and pop).
    pub len: usize,
    /// Items accepted so far.
    pub enqueued: u64,
    /// Items refused because the queue was full (`LC_RESULT_QUEUE_FULL`).
    pub dropped: u64,
    /// Items handed out by `lc_scheduler_pop`.
    pub served: u64,
}

/// Counters of a scheduler, per queue, as `lc_scheduler_stats` writes them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_scheduler_counters {
    /// The primary queue (originals; everything under FIFO).
    pub primary: lc_queue_counters,
    /// The secondary queue (retransmissions).
    pub secondary: lc_queue_counters,
}

fn queue_stats(q: &QueueStats) -> lc_queue_counters {
    lc_queue_counters {
        capacity: q.capacity,
        len: q.len,
        enqueued: q.enqueued,
        dropped: q.dropped,
        served: q.served,
    }
}

fn scheduler_stats(s: &SchedulerStats) -> lc_scheduler_counters {
    lc_scheduler_counters {
        primary: queue_stats(&s.primary),
        secondary: queue_stats(&s.secondary),
    }
}

/// Creates a scheduler with empty queues (all of its memory is allocated here) and writes it
/// to `*out`. `LC_RESULT_INVALID_ARGUMENT` for an unknown discipline or a capacity of 0 or
/// above 2^28.
///
/// # Safety
/// `config` must be valid for reads; `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_new(
    config: *const lc_scheduler_config,
    out: *mut *mut lc_scheduler,
) -> lc_result {
    boundary(|| {
        let c = *try_ref!(config);
        let out = try_out!(out);
        let scheduler = try_!(
            Scheduler::new(
                match try_value!(c.discipline, "lc_scheduler_config.discipline") {
                    Discipline::Priority =>
                        SchedulerConfig::priority(c.primary_capacity, c.secondary_capacity),
                    Discipline::Fifo => SchedulerConfig::fifo(c.primary_capacity),
                }
            )
            .map_err(config_error)
        );
        out.write(Box::into_raw(Box::new(lc_scheduler { scheduler })));
        Code::Ok
    })
}

/// Frees a scheduler; items still queued are forgotten (they are only tokens: drain the
/// scheduler first if they own memory). `NULL` is a no-op.
///
/// # Safety
/// `scheduler` must be NULL or come from `lc_scheduler_new`, with no other thread using it,
/// and not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_free(scheduler: *mut lc_scheduler) {
    // SAFETY: NULL or from Box::into_raw in lc_scheduler_new, freed once.
    let _ = boundary(|| unsafe { crate::free_box(scheduler) });
}

/// Queues `item` with its class: originals to the primary queue, retransmissions to the
/// secondary queue (everything to the one queue under FIFO). When that queue is full the item
/// is not queued and the call returns `LC_RESULT_QUEUE_FULL` (tail drop, counted in `dropped`):
/// the caller still owns it and answers or discards the request.
/// `LC_RESULT_INVALID_ARGUMENT` for an unknown class. Any thread may call this concurrently
/// with pushes and pops on other threads.
///
/// # Safety
/// `scheduler` from `lc_scheduler_new`, alive during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_push(
    scheduler: *const lc_scheduler,
    item: lc_uintptr,
    item_class: lc_class,
) -> lc_result {
    boundary(|| {
        // Shared use is fine: the scheduler is Sync.
        let s = &try_ref!(scheduler).scheduler;
        let class = try_value!(item_class, "lc_scheduler_push: item_class");
        match s.push(item, class) {
            Ok(()) => Code::Ok,
            Err(_) => Code::QueueFull,
        }
    })
}

/// Takes the next item to serve — the head of the primary queue, or when that is empty the
/// head of the secondary queue — and writes it and its class (as pushed). `LC_RESULT_EMPTY`
/// when both queues are empty. Any thread may call this concurrently with pushes and pops on
/// other threads.
///
/// # Safety
/// `scheduler` from `lc_scheduler_new`, alive during the call; `item` and `item_class` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_pop(
    scheduler: *const lc_scheduler,
    item: *mut lc_uintptr,
    item_class: *mut lc_class,
) -> lc_result {
    boundary(|| {
        let s = &try_ref!(scheduler).scheduler;
        // Checked before popping: an item taken out must reach the caller.
        let (item, item_class) = (try_out!(item), try_out!(item_class));
        match s.pop() {
            Some((token, c)) => {
                item.write(token);
                item_class.write(class_to_c(c));
                Code::Ok
            }
            None => Code::Empty,
        }
    })
}

/// Writes the scheduler's counters and queue lengths into `*out` (a snapshot while other
/// threads push and pop).
///
/// # Safety
/// `scheduler` from `lc_scheduler_new`, alive during the call; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_stats(
    scheduler: *const lc_scheduler,
    out: *mut lc_scheduler_counters,
) -> lc_result {
    boundary(|| {
        let s = &try_ref!(scheduler).scheduler;
        try_out!(out).write(scheduler_stats(&s.stats()));
        Code::Ok
    })
}

/// The retransmission detector. Thread-safe: any thread may observe and forget concurrently.
pub struct lc_detector {
    detector: RetransmissionDetector,
}

impl lc_detector {
    /// The Rust detector behind the handle (for Rust code that links the rlib).
    pub fn detector(&self) -> &RetransmissionDetector {
        &self.detector
    }
}

/// Detector settings. Get the defaults with `lc_detector_config_default` and change what you
/// need.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_detector_config {
    /// Most transactions remembered at once (about 48 bytes each, allocated up front). When the
    /// table is full the oldest is forgotten early (counted in `evicted`). Size it as new
    /// transactions per second times 64·T1. Default 262,144 (8,192 per second for 32 s).
    pub capacity: usize,
    /// RFC 3261 T1 in nanoseconds; a transaction is remembered for 64·T1 (Timer B) from its
    /// first copy. Default 500,000,000 (500 ms).
    pub t1_ns: u64,
    /// Independently locked parts of the table, so threads rarely contend; at most `capacity`.
    /// Default 16.
    pub stripes: usize,
}

/// Counters of a detector, as `lc_detector_stats` writes them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_detector_counters {
    /// Transactions remembered now.
    pub tracked: u64,
    /// Requests seen as originals.
    pub originals: u64,
    /// Requests seen as retransmissions.
    pub retransmissions: u64,
    /// Transactions forgotten before Timer B because the table was full (a retransmission of
    /// one of them counts as an original). Nonzero means `capacity` is too small.
    pub evicted: u64,
}

fn detector_stats(s: &DetectorStats) -> lc_detector_counters {
    lc_detector_counters {
        tracked: s.tracked,
        originals: s.originals,
        retransmissions: s.retransmissions,
        evicted: s.evicted,
    }
}

/// The fields of a request's transaction key, for callers that parse SIP themselves. The
/// RFC 3261 key (top Via branch starting with `z9hG4bK`, sent-by, method, CSeq number) is used
/// when the branch has the cookie; otherwise the RFC 2543 key, which also takes the
/// Request-URI, Call-ID and tags. `method`, `request_uri`, `top_via` and `call_id` are
/// required (a NULL `ptr` is `LC_RESULT_NULL_PARAMETER`); a NULL tag means the header has
/// none.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_transaction_parts {
    /// The method of the request line, e.g. `INVITE`.
    pub method: lc_str,
    /// The Request-URI.
    pub request_uri: lc_str,
    /// The value of the topmost Via header, its first entry only
    /// (`SIP/2.0/UDP host:port;branch=…`).
    pub top_via: lc_str,
    /// The Call-ID header value.
    pub call_id: lc_str,
    /// The CSeq number.
    pub cseq: u32,
    /// The From tag, or absent.
    pub from_tag: lc_str,
    /// The To tag, or absent.
    pub to_tag: lc_str,
}

/// Writes the default detector configuration into `*out`.
///
/// # Safety
/// `out` must be NULL or point to writable memory for one `lc_detector_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_config_default(out: *mut lc_detector_config) -> lc_result {
    boundary(|| {
        let d = DetectorConfig::default();
        try_out!(out).write(lc_detector_config {
            capacity: d.capacity,
            t1_ns: d.t1_ns,
            stripes: d.stripes,
        });
        Code::Ok
    })
}

/// Creates a detector (its whole table is allocated here) and writes it to `*out`. `config`
/// NULL means the defaults. `LC_RESULT_INVALID_ARGUMENT` for a capacity or stripe count of 0 or
/// above 2^28, more stripes than capacity, or a T1 of 0.
///
/// # Safety
/// `config` must be NULL or valid for reads; `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_new(
    config: *const lc_detector_config,
    out: *mut *mut lc_detector,
) -> lc_result {
    boundary(|| {
        let out = try_out!(out);
        // SAFETY: the caller promises NULL or a valid struct.
        let c = unsafe { config.as_ref() }.map_or_else(DetectorConfig::default, |c| {
            let mut config = DetectorConfig::default();
            config.capacity = c.capacity;
            config.t1_ns = c.t1_ns;
            config.stripes = c.stripes;
            config
        });
        let detector = try_!(RetransmissionDetector::new(c).map_err(config_error));
        out.write(Box::into_raw(Box::new(lc_detector { detector })));
        Code::Ok
    })
}

/// Frees a detector. `NULL` is a no-op.
///
/// # Safety
/// `detector` must be NULL or come from `lc_detector_new`, with no other thread using it, and
/// not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_free(detector: *mut lc_detector) {
    // SAFETY: NULL or from Box::into_raw in lc_detector_new, freed once.
    let _ = boundary(|| unsafe { crate::free_box(detector) });
}

/// The transaction key of a raw request: scan errors get their `LC_RESULT_SIP_*` code, a
/// request without a usable top Via `LC_RESULT_SIP_MISSING_VIA` / `LC_RESULT_SIP_BAD_VIA`.
fn key_of_sip(d: &RetransmissionDetector, msg: &[u8]) -> Result<TransactionKey, Code> {
    let request = sip::scan(msg).map_err(sip_error_detail)?;
    d.key(&request).map_err(key_error)
}

/// The transaction key of a caller-parsed request.
///
/// # Safety
/// Every string of `p` readable or absent (NULL `ptr`).
unsafe fn key_of_parts(
    d: &RetransmissionDetector,
    p: &lc_transaction_parts,
) -> Result<TransactionKey, Code> {
    // SAFETY: the caller promises readable strings.
    let (method, request_uri, top_via, call_id, from_tag, to_tag) = unsafe {
        (
            p.method.bytes(),
            p.request_uri.bytes(),
            p.top_via.bytes(),
            p.call_id.bytes(),
            p.from_tag.bytes(),
            p.to_tag.bytes(),
        )
    };
    let parts = TransactionParts {
        method: method.ok_or_else(|| crate::abi::null("lc_transaction_parts.method"))?,
        request_uri: request_uri
            .ok_or_else(|| crate::abi::null("lc_transaction_parts.request_uri"))?,
        top_via: top_via.ok_or_else(|| crate::abi::null("lc_transaction_parts.top_via"))?,
        call_id: call_id.ok_or_else(|| crate::abi::null("lc_transaction_parts.call_id"))?,
        cseq: p.cseq,
        from_tag,
        to_tag,
    };
    d.key_from_parts(&parts).map_err(key_error)
}

/// Scans a raw SIP request (`len` bytes: request line and headers; a body is ignored), records
/// its transaction as seen at `now_ns` and writes whether it is an original (the first copy, or
/// the first since 64·T1 passed) or a retransmission. A retransmission does not extend the
/// transaction's life. Malformed messages get an `LC_RESULT_SIP_*` code (a missing top Via
/// `LC_RESULT_SIP_MISSING_VIA`, a malformed one `LC_RESULT_SIP_BAD_VIA`) and are not recorded.
///
/// # Safety
/// `detector` from `lc_detector_new`, alive during the call; `msg` readable for `len` bytes;
/// `request_class` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_observe_sip(
    detector: *const lc_detector,
    msg: *const u8,
    len: usize,
    now_ns: u64,
    request_class: *mut lc_class,
) -> lc_result {
    boundary(|| {
        // Shared use is fine: the detector is Sync.
        let d = &try_ref!(detector).detector;
        let bytes = try_slice!(msg, len);
        let request_class = try_out!(request_class);
        let key = try_!(key_of_sip(d, bytes));
        request_class.write(class_to_c(d.observe(key, now_ns)));
        Code::Ok
    })
}

/// As `lc_detector_observe_sip`, from the fields of the caller's own parser (see
/// `lc_transaction_parts`). A `top_via` that is not `SIP/2.0/transport sent-by;params` gets
/// `LC_RESULT_SIP_BAD_VIA`.
///
/// # Safety
/// `detector` from `lc_detector_new`, alive during the call; `parts` valid with readable (or
/// absent) strings; `request_class` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_observe(
    detector: *const lc_detector,
    parts: *const lc_transaction_parts,
    now_ns: u64,
    request_class: *mut lc_class,
) -> lc_result {
    boundary(|| {
        let d = &try_ref!(detector).detector;
        let parts = try_ref!(parts);
        let request_class = try_out!(request_class);
        // SAFETY: readable strings by contract.
        let key = try_!(unsafe { key_of_parts(d, parts) });
        request_class.write(class_to_c(d.observe(key, now_ns)));
        Code::Ok
    })
}

/// Forgets the transaction of a raw SIP request, so that its next copy counts as an original
/// (typically after `lc_scheduler_push` returned `LC_RESULT_QUEUE_FULL` for it: the client's
/// retransmission then competes in the primary queue). Writes whether the transaction was
/// remembered. Errors as for `lc_detector_observe_sip`.
///
/// # Safety
/// `detector` from `lc_detector_new`, alive during the call; `msg` readable for `len` bytes;
/// `forgotten` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_forget_sip(
    detector: *const lc_detector,
    msg: *const u8,
    len: usize,
    forgotten: *mut bool,
) -> lc_result {
    boundary(|| {
        let d = &try_ref!(detector).detector;
        let bytes = try_slice!(msg, len);
        let forgotten = try_out!(forgotten);
        let key = try_!(key_of_sip(d, bytes));
        forgotten.write(d.forget(key));
        Code::Ok
    })
}

/// As `lc_detector_forget_sip`, from the fields of the caller's own parser.
///
/// # Safety
/// `detector` from `lc_detector_new`, alive during the call; `parts` valid with readable (or
/// absent) strings; `forgotten` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_forget(
    detector: *const lc_detector,
    parts: *const lc_transaction_parts,
    forgotten: *mut bool,
) -> lc_result {
    boundary(|| {
        let d = &try_ref!(detector).detector;
        let parts = try_ref!(parts);
        let forgotten = try_out!(forgotten);
        // SAFETY: readable strings by contract.
        let key = try_!(unsafe { key_of_parts(d, parts) });
        forgotten.write(d.forget(key));
        Code::Ok
    })
}

/// Writes the detector's counters (summed over its stripes) into `*out`.
///
/// # Safety
/// `detector` from `lc_detector_new`, alive during the call; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_stats(
    detector: *const lc_detector,
    out: *mut lc_detector_counters,
) -> lc_result {
    boundary(|| {
        let d = &try_ref!(detector).detector;
        try_out!(out).write(detector_stats(&d.stats()));
        Code::Ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &[u8] = b"INVITE sip:bob@b.example SIP/2.0\r\n\
        Via: SIP/2.0/UDP pc33.a.example;branch=z9hG4bK776asdhds\r\n\
        From: <sip:alice@a.example>;tag=1928301774\r\nTo: <sip:bob@b.example>\r\n\
        Call-ID: a84b4c76e66710\r\nCSeq: 314159 INVITE\r\n\r\n";

    fn s(v: &[u8]) -> lc_str {
        lc_str::from_bytes(v)
    }

    fn new_scheduler(
        discipline: lc_discipline,
        primary: usize,
        secondary: usize,
    ) -> *mut lc_scheduler {
        let config = lc_scheduler_config {
            discipline,
            primary_capacity: primary,
            secondary_capacity: secondary,
        };
        let mut out = std::ptr::null_mut();
        // SAFETY: both pointers are valid for the call.
        assert_eq!(
            unsafe { lc_scheduler_new(&config, &mut out) },
            crate::LC_RESULT_OK
        );
        out
    }

    fn new_detector() -> *mut lc_detector {
        let config = lc_detector_config {
            capacity: 64,
            t1_ns: 500_000_000,
            stripes: 2,
        };
        let mut out = std::ptr::null_mut();
        // SAFETY: both pointers are valid for the call.
        assert_eq!(
            unsafe { lc_detector_new(&config, &mut out) },
            crate::LC_RESULT_OK
        );
        out
    }

    #[test]
    fn unknown_class_and_discipline_values_are_refused() {
        let config = lc_scheduler_config {
            discipline: 2,
            primary_capacity: 1,
            secondary_capacity: 1,
        };
        let mut out = std::ptr::null_mut();
        // SAFETY: valid pointers.
        let r = unsafe { lc_scheduler_new(&config, &mut out) };
        assert_eq!(
            (r, out.is_null()),
            (crate::LC_RESULT_INVALID_ARGUMENT, true)
        );
        let sched = new_scheduler(LC_DISCIPLINE_PRIORITY, 1, 1);
        // SAFETY: `sched` is live; outputs are valid places.
        unsafe {
            assert_eq!(
                lc_scheduler_push(sched, 1, 2),
                crate::LC_RESULT_INVALID_ARGUMENT
            );
            assert_eq!(
                lc_scheduler_push(sched, 1, u32::MAX),
                crate::LC_RESULT_INVALID_ARGUMENT
            );
            assert_eq!((*sched).scheduler().len(), 0);
            assert_eq!(
                lc_scheduler_push(sched, 7, LC_CLASS_RETRANSMISSION),
                crate::LC_RESULT_OK
            );
            assert_eq!(
                lc_scheduler_push(sched, 8, LC_CLASS_RETRANSMISSION),
                crate::LC_RESULT_QUEUE_FULL
            );
            let (mut item, mut class) = (0usize, LC_CLASS_ORIGINAL);
            // A NULL output must not cost the item.
            assert_eq!(
                lc_scheduler_pop(sched, std::ptr::null_mut(), &mut class),
                crate::LC_RESULT_NULL_PARAMETER
            );
            assert_eq!(
                lc_scheduler_pop(sched, &mut item, &mut class),
                crate::LC_RESULT_OK
            );
            assert_eq!((item, class), (7, LC_CLASS_RETRANSMISSION));
            assert_eq!(
                lc_scheduler_pop(sched, &mut item, &mut class),
                crate::LC_RESULT_EMPTY
            );
            let mut st = lc_scheduler_counters::default();
            assert_eq!(lc_scheduler_stats(sched, &mut st), crate::LC_RESULT_OK);
            assert_eq!(
                (
                    st.secondary.enqueued,
                    st.secondary.dropped,
                    st.secondary.served
                ),
                (1, 1, 1)
            );
            lc_scheduler_free(sched);
        }
    }

    #[test]
    fn raw_sip_and_parts_make_the_same_key() {
        let d = new_detector();
        let parts = lc_transaction_parts {
            method: s(b"INVITE"),
            request_uri: s(b"sip:bob@b.example"),
            top_via: s(b"SIP/2.0/UDP pc33.a.example;branch=z9hG4bK776asdhds"),
            call_id: s(b"a84b4c76e66710"),
            cseq: 314159,
            from_tag: s(b"1928301774"),
            to_tag: lc_str::NONE,
        };
        let mut class = u32::MAX;
        let mut forgotten = false;
        // SAFETY: `d` is live; the message, parts and outputs are valid for each call.
        unsafe {
            let observe_sip = |now, class: &mut lc_class| {
                lc_detector_observe_sip(d, INVITE.as_ptr(), INVITE.len(), now, class)
            };
            assert_eq!(observe_sip(0, &mut class), crate::LC_RESULT_OK);
            assert_eq!(class, LC_CLASS_ORIGINAL);
            assert_eq!(
                lc_detector_observe(d, &parts, 1, &mut class),
                crate::LC_RESULT_OK
            );
            assert_eq!(class, LC_CLASS_RETRANSMISSION);
            assert_eq!(
                lc_detector_forget(d, &parts, &mut forgotten),
                crate::LC_RESULT_OK
            );
            assert!(forgotten);
            let (msg, len) = (INVITE.as_ptr(), INVITE.len());
            assert_eq!(
                lc_detector_forget_sip(d, msg, len, &mut forgotten),
                crate::LC_RESULT_OK
            );
            assert!(!forgotten);
            assert_eq!(observe_sip(2, &mut class), crate::LC_RESULT_OK);
            assert_eq!(class, LC_CLASS_ORIGINAL);
            let mut st = lc_detector_counters::default();
            assert_eq!(lc_detector_stats(d, &mut st), crate::LC_RESULT_OK);
            assert_eq!((st.originals, st.retransmissions, st.tracked), (2, 1, 1));
            lc_detector_free(d);
        }
    }

    #[test]
    fn via_errors_have_their_own_codes() {
        let d = new_detector();
        let no_via = b"INVITE sip:b@b SIP/2.0\r\nf: <sip:a@a>;tag=1\r\nt: <sip:b@b>\r\n\
            i: 1\r\nCSeq: 1 INVITE\r\n\r\n";
        let bad_via = b"INVITE sip:b@b SIP/2.0\r\nv: nonsense\r\nf: <sip:a@a>;tag=1\r\n\
            t: <sip:b@b>\r\ni: 1\r\nCSeq: 1 INVITE\r\n\r\n";
        let mut class = u32::MAX;
        // SAFETY: `d` is live; messages and outputs are valid for each call.
        unsafe {
            for (msg, expected) in [
                (&no_via[..], crate::LC_RESULT_SIP_MISSING_VIA),
                (&bad_via[..], crate::LC_RESULT_SIP_BAD_VIA),
                (
                    b"SIP/2.0 200 OK\r\n\r\n",
                    crate::LC_RESULT_SIP_NOT_A_REQUEST,
                ),
            ] {
                let r = lc_detector_observe_sip(d, msg.as_ptr(), msg.len(), 0, &mut class);
                assert_eq!(r, expected);
                let text = std::ffi::CStr::from_ptr(crate::lc_result_text(r));
                assert!(!text.to_bytes().is_empty());
            }
            assert_eq!(class, u32::MAX, "no output on error");
            lc_detector_free(d);
        }
    }

    #[test]
    fn config_default_matches_the_engine() {
        let mut c = lc_detector_config {
            capacity: 0,
            t1_ns: 0,
            stripes: 0,
        };
        // SAFETY: a valid place.
        assert_eq!(
            unsafe { lc_detector_config_default(&mut c) },
            crate::LC_RESULT_OK
        );
        let d = DetectorConfig::default();
        assert_eq!(
            (c.capacity, c.t1_ns, c.stripes),
            (d.capacity, d.t1_ns, d.stripes)
        );
    }
}
