//! `lc_detector`: the retransmission detector (is this request the first copy of its
//! transaction?).

use super::*;

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

/// The transaction key of a raw request: scan errors get their `LC_RESULT_SIP_*` code, then
/// as [`key_of_scanned`].
fn key_of_sip(d: &RetransmissionDetector, msg: &[u8]) -> Result<TransactionKey, Code> {
    key_of_scanned(d, &sip::scan(msg).map_err(sip_error_detail)?)
}

/// The transaction key of a scanned request: one without a usable top Via gets
/// `LC_RESULT_SIP_MISSING_VIA` / `LC_RESULT_SIP_BAD_VIA`.
fn key_of_scanned(
    d: &RetransmissionDetector,
    request: &sip::SipRequest<'_>,
) -> Result<TransactionKey, Code> {
    d.key(request).map_err(key_error)
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

/// As `lc_detector_observe_sip`, on a request `lc_sip_scan` scanned (the same key, class and
/// errors for the same message, without scanning it again). `LC_RESULT_INVALID_ARGUMENT` for a
/// `scanned` that holds no successful scan (zeroed, or its `lc_sip_scan` failed); nothing is
/// recorded then.
///
/// # Safety
/// `detector` from `lc_detector_new`, alive during the call; `scanned` filled by
/// `lc_sip_scan`, its message unchanged and readable (see `lc_scanned_sip`); `request_class`
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_observe_scanned(
    detector: *const lc_detector,
    scanned: *const lc_scanned_sip,
    now_ns: u64,
    request_class: *mut lc_class,
) -> lc_result {
    boundary(|| {
        let d = &try_ref!(detector).detector;
        let request_class = try_out!(request_class);
        // SAFETY: NULL or filled by lc_sip_scan, its message kept, by contract.
        let scan = try_!(unsafe { crate::scanned::load(scanned) });
        let key = try_!(key_of_scanned(d, &scan.sip));
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

/// As `lc_detector_forget_sip`, on a request `lc_sip_scan` scanned. Errors as for
/// `lc_detector_observe_scanned`.
///
/// # Safety
/// `detector` from `lc_detector_new`, alive during the call; `scanned` filled by
/// `lc_sip_scan`, its message unchanged and readable (see `lc_scanned_sip`); `forgotten`
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_detector_forget_scanned(
    detector: *const lc_detector,
    scanned: *const lc_scanned_sip,
    forgotten: *mut bool,
) -> lc_result {
    boundary(|| {
        let d = &try_ref!(detector).detector;
        let forgotten = try_out!(forgotten);
        // SAFETY: NULL or filled by lc_sip_scan, its message kept, by contract.
        let scan = try_!(unsafe { crate::scanned::load(scanned) });
        let key = try_!(key_of_scanned(d, &scan.sip));
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
