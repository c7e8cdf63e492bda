//! The C ABI entry points as a C caller would use them, with fuzzed bytes: a policy published
//! through `lc_engine_publish` and checked through `lc_policy_check` (into a buffer that may be
//! too small), then a raw message classified through `lc_classify_sip` and its window ticket
//! given back, and the same message through PRSM: observed twice by `lc_detector_observe_sip`
//! (an original, then a retransmission), scheduled by `lc_scheduler_push` / `lc_scheduler_pop`
//! (originals first) and forgotten by `lc_detector_forget_sip`. Every call returns a result
//! code; none may crash or report a panic. When the first byte is odd the engine's cells live in
//! a small shared cell table (`lc_engine_new_shared`, four cells: a fuzzed policy may not fit),
//! which must have no cell in use once the engine is freed.
//!
//! Every enum-like value a C caller passes is an integer, so the target also draws four from
//! the whole `u32` range (the input's last 16 bytes, little-endian: they overlap the message, so
//! the fuzzer moves them by mutating its tail) and passes them where C code could: as a result
//! code to `lc_result_text` (total: "unknown result code" for an undeclared one), boolean bytes
//! (`lc_request.initial` / `has_time`: 0 or 1, anything else refused), a window ticket that the
//! engine never issued (`lc_complete` ignores it), a transport to
//! `lc_classify_sip` / `lc_classify_sip_opts` (with fuzzed flags), a class to
//! `lc_scheduler_push`, a discipline to `lc_scheduler_new`, a method in an `lc_sip_message`, and
//! exemption flags in an `lc_engine_config`. A declared value behaves as usual; an undeclared
//! one is `LC_RESULT_INVALID_ARGUMENT` and leaves every output untouched. The policy bytes are
//! also a notifier's capacity template (`lc_notifier_set_capacity`) with drawn allocator
//! settings. The message is also a top Via value for overload control (RFC 7339): read by
//! `lc_oc_feedback_parse` and `lc_oc_client_on_response` (values that break the RFC are
//! `LC_RESULT_OC_BAD_FEEDBACK` with nothing written or changed), followed by `lc_oc_decide`
//! with a drawn category, offered to `lc_oc_server_on_request` with a drawn class and rewritten
//! by `lc_oc_server_write_via`; drawn feedback values go through `lc_oc_feedback_write_via`;
//! `lc_oc_via_strip` takes the oc parameters out of it both ways, and what it writes has none
//! left (stripping again finds nothing, and no feedback reads from it).
//!
//! The message is also scanned once (`lc_sip_scan`) for the calls that take the scan: they give
//! what their raw siblings give the same bytes — `lc_classify_scanned` the code of
//! `lc_classify_sip_opts` with the drawn transport and flags, `lc_oc_category_scanned` the
//! category of `lc_oc_category_sip`, `lc_detector_observe_scanned` the classes of
//! `lc_detector_observe_sip` on a detector of its own — and a failed scan or a zeroed struct is
//! `LC_RESULT_INVALID_ARGUMENT` with every output untouched.
//!
//! Calling `extern "C"` functions is `unsafe` in Rust: that is the point of this target, and
//! each call states why its pointers are valid.
#![no_main]

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::ptr;

use libfuzzer_sys::fuzz_target;
use loadctl_ffi::cells::{
    lc_cell_table_bytes, lc_cell_table_format, lc_cell_table_in_use, lc_engine_new_shared,
};
use loadctl_ffi::engine::{
    LC_EXEMPT_EMERGENCY, LC_EXEMPT_TO_TAG, lc_engine, lc_engine_config, lc_engine_config_default, lc_engine_free,
    lc_engine_new, lc_engine_publish, lc_policy_check,
};
use loadctl_ffi::event::{
    LC_METHOD_NOTIFY, LC_METHOD_SUBSCRIBE, lc_allocator_config, lc_allocator_config_default,
    lc_notifier, lc_notifier_config, lc_notifier_free, lc_notifier_handle_subscribe,
    lc_notifier_new, lc_notifier_observe, lc_notifier_set_capacity, lc_notifier_share, lc_share,
    lc_sip_message,
};
use loadctl_ffi::overload::{
    LC_OC_ALGORITHM_LOSS, LC_OC_ALGORITHM_NONE, LC_OC_ALGORITHM_RATE, LC_OC_CATEGORY_PRIORITY,
    LC_OC_CATEGORY_REDUCIBLE,
    LC_OC_VERDICT_FORWARD, LC_OC_VERDICT_SHED_UNREACHABLE, lc_oc_admission, lc_oc_applied, lc_oc_client,
    lc_oc_client_find, lc_oc_client_free, lc_oc_client_hop, lc_oc_client_new, lc_oc_client_on_response,
    LC_OC_CATEGORY_NONE, LC_OC_STRIP_REQUEST, LC_OC_STRIP_RESPONSE, lc_oc_decide, lc_oc_feedback,
    lc_oc_category, lc_oc_category_scanned, lc_oc_category_sip, lc_oc_feedback_parse,
    lc_oc_feedback_write_via, lc_oc_via_strip,
    lc_oc_server_free, lc_oc_server_new, lc_oc_server_on_request, lc_oc_server_write_via,
    lc_oc_shard, lc_oc_shard_free, lc_oc_shard_new, lc_oc_verdict,
};
use loadctl_ffi::prsm::{
    LC_CLASS_ORIGINAL, LC_CLASS_RETRANSMISSION, LC_DISCIPLINE_FIFO, LC_DISCIPLINE_PRIORITY,
    lc_detector, lc_detector_config, lc_detector_forget_scanned, lc_detector_forget_sip,
    lc_detector_free, lc_detector_new, lc_detector_observe_scanned, lc_detector_observe_sip,
    lc_scheduler, lc_scheduler_config, lc_scheduler_counters,
    lc_scheduler_free, lc_scheduler_new, lc_scheduler_pop, lc_scheduler_push, lc_scheduler_stats,
};
use loadctl_ffi::scanned::{lc_scanned_sip, lc_sip_scan};
use loadctl_ffi::worker::{
    LC_IP_NONE, LC_IP_V4, LC_IP_V6, LC_SIP_HAS_TIME, LC_SIP_KNOWN_DIALOG, lc_ip, LC_TRANSPORT_UDP, LC_TRANSPORT_WSS, lc_classify, lc_classify_sip,
    lc_classify_scanned, lc_classify_sip_opts, lc_complete, lc_decision, lc_request,
    lc_sip_options, lc_ticket, lc_worker, lc_worker_attach, lc_worker_free,
};
use loadctl_ffi::*;

/// Every declared result code.
const RESULTS: [lc_result; 30] = [
    LC_RESULT_OK,
    LC_RESULT_NULL_PARAMETER,
    LC_RESULT_PANIC,
    LC_RESULT_INVALID_UTF8,
    LC_RESULT_BUFFER_TOO_SMALL,
    LC_RESULT_INVALID_ARGUMENT,
    LC_RESULT_EMPTY,
    LC_RESULT_INVALID_POLICY,
    LC_RESULT_NOT_FULL,
    LC_RESULT_VERSION_GAP,
    LC_RESULT_NO_BASE,
    LC_RESULT_UNKNOWN_RULE,
    LC_RESULT_TOO_MANY_RULES,
    LC_RESULT_UNKNOWN_SOURCE,
    LC_RESULT_PIN_FAILED,
    LC_RESULT_SIP_TRUNCATED,
    LC_RESULT_SIP_BAD_REQUEST_LINE,
    LC_RESULT_SIP_NOT_A_REQUEST,
    LC_RESULT_SIP_BAD_HEADER,
    LC_RESULT_SIP_MISSING_HEADER,
    LC_RESULT_SIP_BAD_CSEQ,
    LC_RESULT_SIP_MISSING_VIA,
    LC_RESULT_SIP_BAD_VIA,
    LC_RESULT_SIP_OTHER_MESSAGE,
    LC_RESULT_QUEUE_FULL,
    LC_RESULT_CELL_TABLE_INVALID,
    LC_RESULT_CELL_TABLE_FULL,
    LC_RESULT_CELL_TABLE_BUSY,
    LC_RESULT_OC_BAD_FEEDBACK,
    LC_RESULT_OC_TABLE_FULL,
];

/// Four values from the whole `u32` range: the input's last 16 bytes, little-endian (zeros
/// where the input is shorter).
fn values(data: &[u8]) -> [u32; 4] {
    let mut tail = [0u8; 16];
    let n = data.len().min(16);
    tail[16 - n..].copy_from_slice(&data[data.len() - n..]);
    std::array::from_fn(|i| u32::from_le_bytes(tail[i * 4..i * 4 + 4].try_into().unwrap()))
}

/// A `T` filled with a byte pattern no call writes, to tell an untouched output.
fn poisoned<T>() -> MaybeUninit<T> {
    let mut v = MaybeUninit::<T>::uninit();
    // SAFETY: writes `size_of::<T>()` bytes into the place `v` owns.
    unsafe {
        v.as_mut_ptr()
            .cast::<u8>()
            .write_bytes(0xA5, size_of::<T>())
    };
    v
}

/// Whether `v` still holds the pattern of [`poisoned`].
fn untouched<T>(v: &MaybeUninit<T>) -> bool {
    // SAFETY: `v` came from `poisoned`, so every byte is initialised.
    let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), size_of::<T>()) };
    bytes.iter().all(|&b| b == 0xA5)
}

fuzz_target!(|data: &[u8]| {
    // Input: policy bytes, a NUL, then the raw SIP message; the first byte sizes the buffer.
    let Some(split) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let (policy, message) = (&data[..split], &data[split + 1..]);
    let cap = usize::from(data.first().copied().unwrap_or(0));
    let mut buf = vec![0u8; cap];
    let mut written = 0usize;
    // SAFETY: `policy` is readable for its length; `buf` is writable for `cap` bytes (or is
    // an empty allocation with `cap` 0); `written` is a valid place.
    let r = unsafe {
        lc_policy_check(
            policy.as_ptr(),
            policy.len(),
            buf.as_mut_ptr(),
            cap,
            &mut written,
        )
    };
    assert_ne!(r, LC_RESULT_PANIC);

    /// One 64-byte aligned slot of a cell table's region.
    #[repr(C, align(64))]
    #[derive(Clone, Copy)]
    struct Slot([u8; 64]);
    let shared = cap % 2 == 1;
    let table_len = lc_cell_table_bytes(4);
    let mut region = vec![Slot([0; 64]); table_len / 64];
    let mem = region.as_mut_ptr().cast::<std::ffi::c_void>();
    let mut engine: *mut lc_engine = ptr::null_mut();
    if shared {
        // SAFETY: `mem` is 64-byte aligned and writable for `table_len` bytes, and outlives
        // the engine (freed below, before `region`); `engine` is a valid out-pointer.
        unsafe {
            assert_eq!(lc_cell_table_format(mem, table_len), LC_RESULT_OK);
            assert_eq!(
                lc_engine_new_shared(ptr::null(), mem, table_len, &mut engine),
                LC_RESULT_OK
            );
        }
    } else {
        // SAFETY: a NULL config means the defaults; `engine` is a valid out-pointer.
        assert_eq!(
            unsafe { lc_engine_new(ptr::null(), &mut engine) },
            LC_RESULT_OK
        );
    }
    let source = b"fuzz";
    let mut generation = 0u64;
    // SAFETY: `engine` came from lc_engine_new; the source name, the absent notifier and the
    // body are readable for their lengths; `generation` is a valid place.
    let r = unsafe {
        lc_engine_publish(
            engine,
            lc_str {
                ptr: source.as_ptr(),
                len: source.len(),
            },
            lc_str {
                ptr: ptr::null(),
                len: 0,
            },
            policy.as_ptr(),
            policy.len(),
            &mut generation,
        )
    };
    assert_ne!(r, LC_RESULT_PANIC);

    let mut worker: *mut lc_worker = ptr::null_mut();
    // SAFETY: `engine` is live; `worker` is a valid out-pointer.
    assert_eq!(
        unsafe { lc_worker_attach(engine, -1, &mut worker) },
        LC_RESULT_OK
    );
    let mut decision = MaybeUninit::<lc_decision>::uninit();
    // SAFETY: `worker` is live and used by this thread only; `message` is readable for its
    // length; `decision` is writable.
    let r = unsafe {
        lc_classify_sip(
            worker,
            message.as_ptr(),
            message.len(),
            LC_TRANSPORT_UDP,
            decision.as_mut_ptr(),
        )
    };
    assert_ne!(r, LC_RESULT_PANIC);
    let [v0, v1, v2, v3] = values(data);
    transports(worker, message, r, v0, v1);
    scanned(engine, worker, message, r, v0, v1);
    booleans(worker, v2);
    let forged = lc_ticket {
        key: u64::from(v0) << 32 | u64::from(v3),
        hint: u64::from(v1) << 32 | u64::from(v2),
    };
    // SAFETY: `worker` is live; `forged` is readable. Any pair of integers is a valid ticket
    // to pass: one the engine did not issue releases nothing.
    assert_eq!(unsafe { lc_complete(worker, &forged) }, LC_RESULT_OK);
    if r == LC_RESULT_OK {
        let d = decision.as_ptr();
        // SAFETY: on success `has_ticket` and `ticket` are written (only the targets beyond
        // `target_count` are left alone, and they are not read).
        let (has_ticket, ticket) = unsafe { ((*d).has_ticket, (*d).ticket) };
        if has_ticket {
            // SAFETY: `worker` is live; `ticket` is a valid value from this engine.
            assert_eq!(unsafe { lc_complete(worker, &ticket) }, LC_RESULT_OK);
        }
    }
    // SAFETY: both came from their constructors and are freed once.
    unsafe {
        lc_worker_free(worker);
        lc_engine_free(engine);
    }
    if shared {
        let mut in_use = u32::MAX;
        // SAFETY: the region is still alive and formatted; `in_use` is a valid place.
        let r = unsafe { lc_cell_table_in_use(mem, table_len, &mut in_use) };
        assert_eq!(
            (r, in_use),
            (LC_RESULT_OK, 0),
            "a freed engine left cells claimed"
        );
    }
    drop(region);
    prsm(message, v1, v2);
    for v in [v0, v1, v2, v3] {
        result_text(v);
    }
    method(v2);
    exempt_flags(v3);
    priority_peers(policy);
    capacity(policy, [v0, v1, v2, v3]);
    overload(message, cap, [v0, v1, v2, v3]);
});

/// `lc_result_text` is total: a declared code has its own text, any other value the fixed one.
fn result_text(v: u32) {
    let text = lc_result_text(v);
    assert!(!text.is_null());
    // SAFETY: a static NUL-terminated string.
    let text = unsafe { CStr::from_ptr(text) }.to_bytes();
    assert_eq!(text == b"unknown result code", !RESULTS.contains(&v), "{v}");
}

/// The message classified with the drawn transport, and through `lc_classify_sip_opts` with
/// the drawn flags: an undeclared one is refused before the message is read, with the decision
/// untouched; a declared one gets the code UDP got (`udp`).
fn transports(worker: *mut lc_worker, message: &[u8], udp: lc_result, transport: u32, flags: u32) {
    let declared = transport <= LC_TRANSPORT_WSS;
    let mut d = poisoned::<lc_decision>();
    // SAFETY: `worker` is live and used by this thread only; `message` is readable; `d` is
    // writable.
    let r = unsafe {
        lc_classify_sip(
            worker,
            message.as_ptr(),
            message.len(),
            transport,
            d.as_mut_ptr(),
        )
    };
    if declared {
        assert_eq!(r, udp);
    } else {
        assert_eq!(r, LC_RESULT_INVALID_ARGUMENT);
        assert!(untouched(&d), "an output written on a refused call");
    }
    let (options, options_ok) = drawn_options(transport, flags);
    let mut d = poisoned::<lc_decision>();
    // SAFETY: as above; `options` is readable.
    let r = unsafe {
        lc_classify_sip_opts(
            worker,
            message.as_ptr(),
            message.len(),
            &options,
            d.as_mut_ptr(),
        )
    };
    if options_ok {
        assert_eq!(r, udp);
    } else {
        assert_eq!(r, LC_RESULT_INVALID_ARGUMENT);
        assert!(untouched(&d), "an output written on a refused call");
    }
}

/// `lc_sip_options` with the drawn transport and flags, and whether both are declared ones.
fn drawn_options(transport: u32, flags: u32) -> (lc_sip_options, bool) {
    let options = lc_sip_options {
        transport,
        flags,
        monotonic_ns: 1,
        unix_ns: 1,
        target: lc_str {
            ptr: ptr::null(),
            len: 0,
        },
        source: lc_ip::default(),
    };
    let declared =
        transport <= LC_TRANSPORT_WSS && flags & !(LC_SIP_HAS_TIME | LC_SIP_KNOWN_DIALOG) == 0;
    (options, declared)
}

/// The message scanned once, and the calls on the scan against their raw siblings (see the
/// target's documentation); `udp` is what `lc_classify_sip` returned for it.
fn scanned(
    engine: *mut lc_engine,
    worker: *mut lc_worker,
    message: &[u8],
    udp: lc_result,
    transport: u32,
    flags: u32,
) {
    let mut scan = poisoned::<lc_scanned_sip>();
    // SAFETY: `message` is readable and stays unchanged while the scan is used; `scan` is
    // writable.
    let r = unsafe { lc_sip_scan(message.as_ptr(), message.len(), scan.as_mut_ptr()) };
    assert_eq!(r, udp, "the scan fails as lc_classify_sip does");
    let zeroed = lc_scanned_sip { opaque: [0; 64] };
    let (options, options_ok) = drawn_options(transport, flags);
    let mut raw = poisoned::<lc_oc_category>();
    let mut category = poisoned::<lc_oc_category>();
    // SAFETY: `engine` is live; `message`, `options` readable; the scan was written by
    // lc_sip_scan (a failed one too) and its message is unchanged; outputs writable.
    let (raw_r, r) = unsafe {
        (
            lc_oc_category_sip(
                engine,
                message.as_ptr(),
                message.len(),
                &options,
                raw.as_mut_ptr(),
            ),
            lc_oc_category_scanned(engine, scan.as_ptr(), &options, category.as_mut_ptr()),
        )
    };
    if !options_ok {
        let refused = (LC_RESULT_INVALID_ARGUMENT, LC_RESULT_INVALID_ARGUMENT);
        assert_eq!((raw_r, r), refused);
    } else if udp != LC_RESULT_OK {
        let refused = (udp, LC_RESULT_INVALID_ARGUMENT);
        assert_eq!((raw_r, r), refused, "a failed scan is refused");
    } else {
        assert_eq!((raw_r, r), (LC_RESULT_OK, LC_RESULT_OK));
        // SAFETY: both written on success.
        let (raw, category) = unsafe { (raw.assume_init(), category.assume_init()) };
        assert_eq!(raw, category);
    }
    if r != LC_RESULT_OK {
        assert!(untouched(&category), "an output written on a refused call");
    }
    let mut d = poisoned::<lc_decision>();
    // SAFETY: `worker` is live and used by this thread only; as above.
    let r = unsafe { lc_classify_scanned(worker, scan.as_ptr(), &options, d.as_mut_ptr()) };
    if options_ok && udp == LC_RESULT_OK {
        assert_eq!(r, LC_RESULT_OK);
        // SAFETY: written on success.
        let (has_ticket, ticket) = unsafe { ((*d.as_ptr()).has_ticket, (*d.as_ptr()).ticket) };
        if has_ticket {
            // SAFETY: `worker` is live; `ticket` came from this engine.
            assert_eq!(unsafe { lc_complete(worker, &ticket) }, LC_RESULT_OK);
        }
    } else {
        assert_eq!(r, LC_RESULT_INVALID_ARGUMENT);
        assert!(untouched(&d), "an output written on a refused call");
    }
    let mut d = poisoned::<lc_decision>();
    let mut category = poisoned::<lc_oc_category>();
    // SAFETY: as above; `zeroed` is readable.
    let (rc, rk) = unsafe {
        (
            lc_classify_scanned(worker, &zeroed, ptr::null(), d.as_mut_ptr()),
            lc_oc_category_scanned(engine, &zeroed, ptr::null(), category.as_mut_ptr()),
        )
    };
    assert_eq!((rc, rk), (LC_RESULT_INVALID_ARGUMENT, LC_RESULT_INVALID_ARGUMENT));
    assert!(
        untouched(&d) && untouched(&category),
        "an output written on a refused call"
    );
}

/// `lc_request.initial`, `has_time` and `known_dialog` from the drawn value's three low bytes
/// (booleans cross as bytes, 0 or 1) and `source.family` from the fourth (`LC_IP_*`); any other
/// value is refused with the decision untouched.
fn booleans(worker: *mut lc_worker, v: u32) {
    let [initial, has_time, known_dialog, family] = v.to_le_bytes();
    let method = b"INVITE";
    let none = lc_str {
        ptr: ptr::null(),
        len: 0,
    };
    let req = lc_request {
        method: lc_str {
            ptr: method.as_ptr(),
            len: method.len(),
        },
        from: none,
        to: none,
        request_uri: none,
        p_asserted_identity: none,
        target: none,
        event: none,
        transport: LC_TRANSPORT_UDP,
        initial,
        known_dialog,
        source: lc_ip {
            family,
            addr: [192, 0, 2, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        },
        has_time,
        monotonic_ns: 1,
        unix_ns: 1,
        resource_priority: none,
    };
    let mut d = poisoned::<lc_decision>();
    // SAFETY: `worker` is live and used by this thread only; `req` and its strings are
    // readable; `d` is writable.
    let r = unsafe { lc_classify(worker, &req, d.as_mut_ptr()) };
    let family_ok = [LC_IP_NONE, LC_IP_V4, LC_IP_V6].contains(&family);
    if initial <= 1 && has_time <= 1 && known_dialog <= 1 && family_ok {
        assert_eq!(r, LC_RESULT_OK);
        // SAFETY: written on success.
        let (has_ticket, ticket) = unsafe { ((*d.as_ptr()).has_ticket, (*d.as_ptr()).ticket) };
        if has_ticket {
            // SAFETY: `worker` is live; `ticket` came from this engine.
            assert_eq!(unsafe { lc_complete(worker, &ticket) }, LC_RESULT_OK);
        }
    } else {
        assert_eq!(r, LC_RESULT_INVALID_ARGUMENT);
        assert!(untouched(&d), "an output written on a refused call");
    }
}

/// A notifier with the defaults (`sip:n.example`, anyone may subscribe); freed by the caller.
fn notifier() -> *mut lc_notifier {
    let config = lc_notifier_config {
        uri: lc_str {
            ptr: b"sip:n.example".as_ptr(),
            len: 13,
        },
        tag: lc_str {
            ptr: b"t".as_ptr(),
            len: 1,
        },
        authorized: lc_str {
            ptr: ptr::null(),
            len: 0,
        },
        min_expires: 0,
        max_expires: 0,
        default_expires: 0,
        pacing_ms: 0,
    };
    let mut n: *mut lc_notifier = ptr::null_mut();
    // SAFETY: valid places.
    assert_eq!(unsafe { lc_notifier_new(&config, &mut n) }, LC_RESULT_OK);
    n
}

/// A drawn method in an otherwise empty `lc_sip_message`: an undeclared one is refused as an
/// argument out of range, a declared one for the missing Request-URI; no response is written.
fn method(v: u32) {
    let n = notifier();
    // SAFETY: all-zero is a valid lc_sip_message (NULL strings, zero numbers).
    let mut msg: lc_sip_message = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.method = v;
    let mut response = poisoned::<lc_sip_message>();
    // SAFETY: `n` is live; `msg` is valid with absent strings; `response` is writable.
    let r = unsafe { lc_notifier_handle_subscribe(n, 0, &msg, response.as_mut_ptr()) };
    let expected = if v == LC_METHOD_SUBSCRIBE || v == LC_METHOD_NOTIFY {
        LC_RESULT_NULL_PARAMETER
    } else {
        LC_RESULT_INVALID_ARGUMENT
    };
    assert_eq!(r, expected);
    assert!(untouched(&response), "an output written on a refused call");
    // SAFETY: from lc_notifier_new, freed once.
    unsafe { lc_notifier_free(n) };
}

/// The policy bytes as a capacity template, with drawn allocator settings: refused with a
/// clear code (never a panic), and once accepted the notifier answers for its (absent)
/// subscribers without writing a share.
fn capacity(template: &[u8], v: [u32; 4]) {
    let n = notifier();
    let mut ac = MaybeUninit::<lc_allocator_config>::uninit();
    // SAFETY: a writable place.
    assert_eq!(
        unsafe { lc_allocator_config_default(ac.as_mut_ptr()) },
        LC_RESULT_OK
    );
    // SAFETY: written just above.
    let mut ac = unsafe { ac.assume_init() };
    ac.period_ns = u64::from(v[0]) << 8;
    ac.alpha_ppm = v[1];
    ac.busy_ppm = v[2];
    ac.headroom_ppm = v[3] >> 8;
    // SAFETY: `n` is live; `template` is readable for its length; `ac` is a valid place.
    let r = unsafe { lc_notifier_set_capacity(n, 0, template.as_ptr(), template.len(), &ac) };
    assert!(
        [
            LC_RESULT_OK,
            LC_RESULT_INVALID_POLICY,
            LC_RESULT_NOT_FULL,
            LC_RESULT_INVALID_ARGUMENT
        ]
        .contains(&r),
        "lc_notifier_set_capacity: {r}"
    );
    let mut share = poisoned::<lc_share>();
    // SAFETY: `n` is live; `share` is writable.
    assert_eq!(
        unsafe { lc_notifier_share(n, 0, share.as_mut_ptr()) },
        LC_RESULT_EMPTY
    );
    assert!(untouched(&share), "a share written with no subscriber");
    let who = lc_str {
        ptr: b"sip:edge.example".as_ptr(),
        len: 16,
    };
    // SAFETY: `n` is live; `who` is readable.
    assert_eq!(
        unsafe { lc_notifier_observe(n, 1, who, 1) },
        LC_RESULT_UNKNOWN_SOURCE
    );
    // SAFETY: from lc_notifier_new, freed once.
    unsafe { lc_notifier_free(n) };
}

/// Drawn exemption flags in an engine configuration: an undeclared bit is refused with no
/// engine written.
fn exempt_flags(v: u32) {
    let mut config = MaybeUninit::<lc_engine_config>::uninit();
    // SAFETY: a writable place.
    assert_eq!(
        unsafe { lc_engine_config_default(config.as_mut_ptr()) },
        LC_RESULT_OK
    );
    // SAFETY: written by lc_engine_config_default.
    let mut config = unsafe { config.assume_init() };
    config.exempt_flags = v;
    let mut engine = poisoned::<*mut lc_engine>();
    // SAFETY: `config` is valid (its strings static); `engine` is writable.
    let r = unsafe { lc_engine_new(&config, engine.as_mut_ptr()) };
    if v & !(LC_EXEMPT_EMERGENCY | LC_EXEMPT_TO_TAG) == 0 {
        assert_eq!(r, LC_RESULT_OK);
        // SAFETY: written on success; freed once.
        unsafe { lc_engine_free(engine.assume_init()) };
    } else {
        assert_eq!(r, LC_RESULT_INVALID_ARGUMENT);
        assert!(untouched(&engine), "an output written on a refused call");
    }
}

/// Drawn bytes as `priority_peers`: an engine, or a refusal (not UTF-8, not address blocks)
/// with no engine written; never anything else.
fn priority_peers(list: &[u8]) {
    let mut config = MaybeUninit::<lc_engine_config>::uninit();
    // SAFETY: a writable place.
    assert_eq!(
        unsafe { lc_engine_config_default(config.as_mut_ptr()) },
        LC_RESULT_OK
    );
    // SAFETY: written by lc_engine_config_default.
    let mut config = unsafe { config.assume_init() };
    config.priority_peers = lc_str {
        ptr: list.as_ptr(),
        len: list.len(),
    };
    let mut engine = poisoned::<*mut lc_engine>();
    // SAFETY: `config` is valid (`list` readable for the call); `engine` is writable.
    let r = unsafe { lc_engine_new(&config, engine.as_mut_ptr()) };
    let blocks =
        std::str::from_utf8(list).map(|t| loadctl::runtime::Network::parse_list(t).is_ok());
    match blocks {
        Ok(true) => {
            assert_eq!(r, LC_RESULT_OK);
            // SAFETY: written on success; freed once.
            unsafe { lc_engine_free(engine.assume_init()) };
        }
        Ok(false) => assert_eq!(r, LC_RESULT_INVALID_ARGUMENT),
        Err(_) => assert_eq!(r, LC_RESULT_INVALID_UTF8),
    }
    if r != LC_RESULT_OK {
        assert!(untouched(&engine), "an output written on a refused call");
    }
}

/// The message through the detector and the scheduler; a drawn class pushed and a drawn
/// discipline configured on the side.
fn prsm(message: &[u8], class: u32, discipline: u32) {
    let detector_config = lc_detector_config {
        capacity: 64,
        t1_ns: 500_000_000,
        stripes: 2,
    };
    let mut detector: *mut lc_detector = ptr::null_mut();
    // SAFETY: `detector_config` and `detector` are valid places.
    assert_eq!(
        unsafe { lc_detector_new(&detector_config, &mut detector) },
        LC_RESULT_OK
    );
    let config = lc_scheduler_config {
        discipline: LC_DISCIPLINE_PRIORITY,
        primary_capacity: 1,
        secondary_capacity: 1,
    };
    let mut scheduler: *mut lc_scheduler = ptr::null_mut();
    // SAFETY: `config` and `scheduler` are valid places.
    assert_eq!(
        unsafe { lc_scheduler_new(&config, &mut scheduler) },
        LC_RESULT_OK
    );
    let drawn = lc_scheduler_config {
        discipline,
        ..config
    };
    let mut other = poisoned::<*mut lc_scheduler>();
    // SAFETY: `drawn` and `other` are valid places.
    let r = unsafe { lc_scheduler_new(&drawn, other.as_mut_ptr()) };
    if discipline == LC_DISCIPLINE_PRIORITY || discipline == LC_DISCIPLINE_FIFO {
        assert_eq!(r, LC_RESULT_OK);
        // SAFETY: written on success; freed once.
        unsafe { lc_scheduler_free(other.assume_init()) };
    } else {
        assert_eq!(r, LC_RESULT_INVALID_ARGUMENT);
        assert!(untouched(&other), "an output written on a refused call");
    }
    if class != LC_CLASS_ORIGINAL && class != LC_CLASS_RETRANSMISSION {
        // SAFETY: `scheduler` is live.
        let r = unsafe { lc_scheduler_push(scheduler, usize::MAX, class) };
        assert_eq!(r, LC_RESULT_INVALID_ARGUMENT);
        let mut st = MaybeUninit::<lc_scheduler_counters>::uninit();
        // SAFETY: `scheduler` is live; `st` is writable and written on success.
        let st = unsafe {
            assert_eq!(lc_scheduler_stats(scheduler, st.as_mut_ptr()), LC_RESULT_OK);
            st.assume_init()
        };
        assert_eq!(
            (st.primary.len, st.secondary.len),
            (0, 0),
            "a refused push queued"
        );
    }
    // The first copy, and the client's retransmission 500 ms later (the detector's clock is
    // the caller's).
    let mut classes = [u32::MAX; 2];
    for (copy, now_ns) in [0u64, 500_000_000].into_iter().enumerate() {
        // SAFETY: `detector` is live; `message` is readable for its length; the class is a
        // valid place.
        let r = unsafe {
            lc_detector_observe_sip(
                detector,
                message.as_ptr(),
                message.len(),
                now_ns,
                &mut classes[copy],
            )
        };
        assert_ne!(r, LC_RESULT_PANIC);
        if r != LC_RESULT_OK {
            // Malformed: refused the same way both times, nothing written.
            assert_eq!(classes[copy], u32::MAX);
            continue;
        }
        // SAFETY: `scheduler` is live.
        let pushed = unsafe { lc_scheduler_push(scheduler, copy, classes[copy]) };
        assert_eq!(pushed, LC_RESULT_OK, "each queue has room for one");
    }
    if classes[0] != u32::MAX {
        assert_eq!(classes, [LC_CLASS_ORIGINAL, LC_CLASS_RETRANSMISSION]);
        let (mut item, mut class) = (usize::MAX, u32::MAX);
        for expected in [(0, LC_CLASS_ORIGINAL), (1, LC_CLASS_RETRANSMISSION)] {
            // SAFETY: `scheduler` is live; the outputs are valid places.
            let r = unsafe { lc_scheduler_pop(scheduler, &mut item, &mut class) };
            assert_eq!((r, (item, class)), (LC_RESULT_OK, expected));
        }
        let mut forgotten = false;
        // SAFETY: `detector` is live; `message` is readable; `forgotten` is a valid place.
        let r = unsafe {
            lc_detector_forget_sip(detector, message.as_ptr(), message.len(), &mut forgotten)
        };
        assert_eq!((r, forgotten), (LC_RESULT_OK, true));
    } else {
        assert_eq!(classes, [u32::MAX; 2]);
    }
    // The same copies through one scan, on a detector of its own: the same classes.
    let mut scanned_detector: *mut lc_detector = ptr::null_mut();
    let mut scan = poisoned::<lc_scanned_sip>();
    // SAFETY: `config` and the detector are valid places; `message` is readable and unchanged
    // while the scan is used; `scan` is writable.
    let scan_r = unsafe {
        let r = lc_detector_new(&detector_config, &mut scanned_detector);
        assert_eq!(r, LC_RESULT_OK);
        lc_sip_scan(message.as_ptr(), message.len(), scan.as_mut_ptr())
    };
    let mut scanned_classes = [u32::MAX; 2];
    for (copy, now_ns) in [0u64, 500_000_000].into_iter().enumerate() {
        // SAFETY: the detector is live; the scan was written by lc_sip_scan; the class is a
        // valid place.
        let class = &mut scanned_classes[copy];
        let r = unsafe {
            lc_detector_observe_scanned(scanned_detector, scan.as_ptr(), now_ns, class)
        };
        if scan_r != LC_RESULT_OK {
            assert_eq!(r, LC_RESULT_INVALID_ARGUMENT, "a failed scan is refused");
        }
    }
    assert_eq!(scanned_classes, classes);
    if classes[0] != u32::MAX {
        let mut forgotten = false;
        // SAFETY: as above; `forgotten` is a valid place.
        let r = unsafe {
            lc_detector_forget_scanned(scanned_detector, scan.as_ptr(), &mut forgotten)
        };
        assert_eq!((r, forgotten), (LC_RESULT_OK, true));
    }
    // SAFETY: all came from their constructors and are freed once.
    unsafe {
        lc_scheduler_free(scheduler);
        lc_detector_free(detector);
        lc_detector_free(scanned_detector);
    }
}

/// What a function that writes a Via into a buffer may return for any input.
const VIA_WRITTEN: [lc_result; 5] = [
    LC_RESULT_OK,
    LC_RESULT_EMPTY,
    LC_RESULT_BUFFER_TOO_SMALL,
    LC_RESULT_INVALID_UTF8,
    LC_RESULT_SIP_BAD_VIA,
];

/// The message as a response's top Via at an overload-control client and as a request's top
/// Via at a server, with drawn categories, classes and feedback values (see the target's
/// documentation).
fn overload(via_bytes: &[u8], cap: usize, v: [u32; 4]) {
    let via = lc_str {
        ptr: via_bytes.as_ptr(),
        len: via_bytes.len(),
    };
    let mut parsed = poisoned::<lc_oc_feedback>();
    // SAFETY: `via` is readable for its length; `parsed` is writable.
    let r = unsafe { lc_oc_feedback_parse(via, parsed.as_mut_ptr()) };
    assert!(
        [
            LC_RESULT_OK,
            LC_RESULT_EMPTY,
            LC_RESULT_OC_BAD_FEEDBACK,
            LC_RESULT_INVALID_UTF8
        ]
        .contains(&r),
        "lc_oc_feedback_parse: {r}"
    );
    assert_eq!(r == LC_RESULT_OK, !untouched(&parsed), "output written iff OK");

    let mut client: *mut lc_oc_client = ptr::null_mut();
    // SAFETY: defaults; `client` is writable.
    assert_eq!(unsafe { lc_oc_client_new(ptr::null(), 2, &mut client) }, LC_RESULT_OK);
    let mut hop = 0u32;
    let address = lc_str {
        ptr: b"192.0.2.7:5060".as_ptr(),
        len: 14,
    };
    // SAFETY: `client` is live; `address` is readable; `hop` is writable.
    assert_eq!(unsafe { lc_oc_client_hop(client, address, 0, &mut hop) }, LC_RESULT_OK);
    let mut found = u32::MAX;
    // SAFETY: as above.
    assert_eq!(unsafe { lc_oc_client_find(client, address, &mut found) }, LC_RESULT_OK);
    assert_eq!(found, hop);
    let mut applied = poisoned::<lc_oc_applied>();
    // SAFETY: `client` is live; `via` is readable; `applied` is writable.
    let a = unsafe { lc_oc_client_on_response(client, hop, 1, via, applied.as_mut_ptr()) };
    // A Via reads the same at the client as in `lc_oc_feedback_parse` (the client offers both
    // algorithms, so it refuses no selection), no feedback being `LC_OC_APPLIED_NO_FEEDBACK`;
    // except that a value without `oc-algo` is read under the algorithm in force, here none
    // yet, so loss (RFC 7339 §4.2), where a value above 100 breaks §7.1.
    let unnamed_above_100 = r == LC_RESULT_OK && {
        // SAFETY: written, since the call returned OK.
        let f = unsafe { parsed.assume_init() };
        f.algorithm == LC_OC_ALGORITHM_NONE && f.validity_ms > 0 && f.oc > 100
    };
    let expect = match r {
        LC_RESULT_EMPTY => LC_RESULT_OK,
        _ if unnamed_above_100 => LC_RESULT_OC_BAD_FEEDBACK,
        _ => r,
    };
    assert_eq!(a, expect, "lc_oc_client_on_response");
    assert_eq!(a == LC_RESULT_OK, !untouched(&applied));
    let mut shard: *mut lc_oc_shard = ptr::null_mut();
    // SAFETY: `client` is live; `shard` is writable.
    assert_eq!(unsafe { lc_oc_shard_new(client, u64::from(v[0]), &mut shard) }, LC_RESULT_OK);
    let mut verdict = poisoned::<lc_oc_verdict>();
    // SAFETY: `shard` is live, this thread's; `verdict` is writable.
    let d = unsafe { lc_oc_decide(shard, hop, 2, v[1], verdict.as_mut_ptr()) };
    if v[1] == LC_OC_CATEGORY_REDUCIBLE || v[1] == LC_OC_CATEGORY_PRIORITY {
        assert_eq!(d, LC_RESULT_OK);
        // SAFETY: written on success.
        let verdict = unsafe { verdict.assume_init() };
        assert!(verdict < LC_OC_VERDICT_SHED_UNREACHABLE, "no timeout was reported");
    } else if v[1] == LC_OC_CATEGORY_NONE {
        // ACK / CANCEL: counted in the mix, always forwarded.
        assert_eq!(d, LC_RESULT_OK);
        // SAFETY: written on success.
        assert_eq!(unsafe { verdict.assume_init() }, LC_OC_VERDICT_FORWARD);
    } else {
        assert_eq!(d, LC_RESULT_INVALID_ARGUMENT);
        assert!(untouched(&verdict));
    }
    // SAFETY: from lc_oc_shard_new / lc_oc_client_new, freed once.
    unsafe {
        lc_oc_shard_free(shard);
        lc_oc_client_free(client);
    }

    let mut server = ptr::null_mut();
    // SAFETY: defaults; `server` is writable.
    assert_eq!(unsafe { lc_oc_server_new(ptr::null(), &mut server) }, LC_RESULT_OK);
    let mut admission = poisoned::<lc_oc_admission>();
    // SAFETY: `server` is live; the strings are readable; `admission` is writable.
    let o = unsafe {
        lc_oc_server_on_request(server, 0, address, via, v[2], v[3], admission.as_mut_ptr())
    };
    let class_ok = (v[2] == LC_CLASS_ORIGINAL || v[2] == LC_CLASS_RETRANSMISSION)
        && (v[3] == LC_OC_CATEGORY_REDUCIBLE || v[3] == LC_OC_CATEGORY_PRIORITY);
    let utf8 = std::str::from_utf8(via_bytes).is_ok();
    let expect = if !utf8 {
        LC_RESULT_INVALID_UTF8
    } else if !class_ok {
        LC_RESULT_INVALID_ARGUMENT
    } else {
        LC_RESULT_OK
    };
    assert_eq!(o, expect, "lc_oc_server_on_request");
    assert_eq!(o == LC_RESULT_OK, !untouched(&admission));
    let mut buf = vec![0u8; cap];
    let mut written = 0usize;
    // SAFETY: `server` is live; the strings are readable; `buf` is writable for `cap` bytes.
    let w = unsafe {
        lc_oc_server_write_via(server, 0, address, via, buf.as_mut_ptr(), cap, &mut written)
    };
    assert!(VIA_WRITTEN.contains(&w), "lc_oc_server_write_via: {w}");
    if w == LC_RESULT_OK {
        // What the server wrote is feedback a client reads back whole.
        let back = lc_str {
            ptr: buf.as_ptr(),
            len: written,
        };
        let mut f = poisoned::<lc_oc_feedback>();
        // SAFETY: `back` is readable; `f` is writable.
        assert_eq!(unsafe { lc_oc_feedback_parse(back, f.as_mut_ptr()) }, LC_RESULT_OK);
    }
    // SAFETY: from lc_oc_server_new, freed once.
    unsafe { lc_oc_server_free(server) };

    for which in [LC_OC_STRIP_RESPONSE, LC_OC_STRIP_REQUEST] {
        let mut written = 0usize;
        // SAFETY: `via` is readable; `buf` is writable for `cap` bytes.
        let st = unsafe { lc_oc_via_strip(via, which, buf.as_mut_ptr(), cap, &mut written) };
        assert!(VIA_WRITTEN.contains(&st), "lc_oc_via_strip: {st}");
        if st == LC_RESULT_OK {
            let stripped = buf[..written].to_vec();
            let again = lc_str {
                ptr: stripped.as_ptr(),
                len: stripped.len(),
            };
            let mut twice = 0usize;
            // SAFETY: `again` is readable; `buf` is writable for `cap` bytes.
            let st2 = unsafe { lc_oc_via_strip(again, which, buf.as_mut_ptr(), cap, &mut twice) };
            assert_eq!(st2, LC_RESULT_EMPTY, "stripped twice: {:?}", String::from_utf8_lossy(&stripped));
            let mut f = poisoned::<lc_oc_feedback>();
            // SAFETY: `again` is readable; `f` is writable.
            let p = unsafe { lc_oc_feedback_parse(again, f.as_mut_ptr()) };
            assert_eq!(p, LC_RESULT_EMPTY, "feedback left in {:?}", String::from_utf8_lossy(&stripped));
        }
    }

    let drawn = lc_oc_feedback {
        oc: u64::from(v[0]),
        algorithm: v[1],
        validity_ms: u64::from(v[2]),
        seq: u64::from(v[3]) << 20,
        has_seq: (v[3] & 0xff) as u8,
    };
    let mut written = 0usize;
    // SAFETY: `drawn` is readable; `via` is readable; `buf` is writable for `cap` bytes.
    let fw = unsafe {
        lc_oc_feedback_write_via(&drawn, via, buf.as_mut_ptr(), cap, &mut written)
    };
    // RFC 7339 §5.7: with oc-validity=0 the oc value is disregarded, whatever it is.
    let declared = (drawn.algorithm == LC_OC_ALGORITHM_RATE
        || (drawn.algorithm == LC_OC_ALGORITHM_LOSS && (drawn.oc <= 100 || drawn.validity_ms == 0)))
        && drawn.has_seq <= 1;
    if !declared {
        assert_eq!(fw, LC_RESULT_INVALID_ARGUMENT, "drawn feedback {drawn:?}");
    } else {
        assert!(
            [
                LC_RESULT_OK,
                LC_RESULT_BUFFER_TOO_SMALL,
                LC_RESULT_INVALID_UTF8,
                LC_RESULT_SIP_BAD_VIA
            ]
            .contains(&fw),
            "lc_oc_feedback_write_via: {fw}"
        );
    }
}
