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
//! Calling `extern "C"` functions is `unsafe` in Rust: that is the point of this target, and
//! each call states why its pointers are valid.
#![no_main]

use std::mem::MaybeUninit;
use std::ptr;

use libfuzzer_sys::fuzz_target;
use loadctl_ffi::cells::{
    lc_cell_table_bytes, lc_cell_table_format, lc_cell_table_in_use, lc_engine_new_shared,
};
use loadctl_ffi::engine::{
    lc_engine, lc_engine_free, lc_engine_new, lc_engine_publish, lc_policy_check,
};
use loadctl_ffi::lc_result;
use loadctl_ffi::lc_str;
use loadctl_ffi::prsm::{
    LC_CLASS_ORIGINAL, LC_CLASS_RETRANSMISSION, LC_DISCIPLINE_PRIORITY, lc_detector,
    lc_detector_config, lc_detector_forget_sip, lc_detector_free, lc_detector_new,
    lc_detector_observe_sip, lc_scheduler, lc_scheduler_config, lc_scheduler_free,
    lc_scheduler_new, lc_scheduler_pop, lc_scheduler_push,
};
use loadctl_ffi::worker::{
    lc_classify_sip, lc_complete, lc_decision, lc_transport, lc_worker, lc_worker_attach,
    lc_worker_free,
};

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
    assert_ne!(r, lc_result::Panic);

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
            assert_eq!(lc_cell_table_format(mem, table_len), lc_result::Ok);
            assert_eq!(
                lc_engine_new_shared(ptr::null(), mem, table_len, &mut engine),
                lc_result::Ok
            );
        }
    } else {
        // SAFETY: a NULL config means the defaults; `engine` is a valid out-pointer.
        assert_eq!(
            unsafe { lc_engine_new(ptr::null(), &mut engine) },
            lc_result::Ok
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
    assert_ne!(r, lc_result::Panic);

    let mut worker: *mut lc_worker = ptr::null_mut();
    // SAFETY: `engine` is live; `worker` is a valid out-pointer.
    assert_eq!(
        unsafe { lc_worker_attach(engine, -1, &mut worker) },
        lc_result::Ok
    );
    let mut decision = MaybeUninit::<lc_decision>::uninit();
    // SAFETY: `worker` is live and used by this thread only; `message` is readable for its
    // length; `decision` is writable.
    let r = unsafe {
        lc_classify_sip(
            worker,
            message.as_ptr(),
            message.len(),
            lc_transport::Udp,
            decision.as_mut_ptr(),
        )
    };
    assert_ne!(r, lc_result::Panic);
    if r == lc_result::Ok {
        let d = decision.as_ptr();
        // SAFETY: on success `has_ticket` and `ticket` are written (only the targets beyond
        // `target_count` are left alone, and they are not read).
        let (has_ticket, ticket) = unsafe { ((*d).has_ticket, (*d).ticket) };
        if has_ticket {
            // SAFETY: `worker` is live; `ticket` is a valid value from this engine.
            assert_eq!(unsafe { lc_complete(worker, &ticket) }, lc_result::Ok);
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
            (lc_result::Ok, 0),
            "a freed engine left cells claimed"
        );
    }
    drop(region);
    prsm(message);
});

/// The message through the detector and the scheduler.
fn prsm(message: &[u8]) {
    let config = lc_detector_config {
        capacity: 64,
        t1_ns: 500_000_000,
        stripes: 2,
    };
    let mut detector: *mut lc_detector = ptr::null_mut();
    // SAFETY: `config` and `detector` are valid places.
    assert_eq!(
        unsafe { lc_detector_new(&config, &mut detector) },
        lc_result::Ok
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
        lc_result::Ok
    );
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
        assert_ne!(r, lc_result::Panic);
        if r != lc_result::Ok {
            // Malformed: refused the same way both times, nothing written.
            assert_eq!(classes[copy], u32::MAX);
            continue;
        }
        // SAFETY: `scheduler` is live.
        let pushed = unsafe { lc_scheduler_push(scheduler, copy, classes[copy]) };
        assert_eq!(pushed, lc_result::Ok, "each queue has room for one");
    }
    if classes[0] != u32::MAX {
        assert_eq!(classes, [LC_CLASS_ORIGINAL, LC_CLASS_RETRANSMISSION]);
        let (mut item, mut class) = (usize::MAX, u32::MAX);
        for expected in [(0, LC_CLASS_ORIGINAL), (1, LC_CLASS_RETRANSMISSION)] {
            // SAFETY: `scheduler` is live; the outputs are valid places.
            let r = unsafe { lc_scheduler_pop(scheduler, &mut item, &mut class) };
            assert_eq!((r, (item, class)), (lc_result::Ok, expected));
        }
        let mut forgotten = false;
        // SAFETY: `detector` is live; `message` is readable; `forgotten` is a valid place.
        let r = unsafe {
            lc_detector_forget_sip(detector, message.as_ptr(), message.len(), &mut forgotten)
        };
        assert_eq!((r, forgotten), (lc_result::Ok, true));
    } else {
        assert_eq!(classes, [u32::MAX; 2]);
    }
    // SAFETY: both came from their constructors and are freed once.
    unsafe {
        lc_scheduler_free(scheduler);
        lc_detector_free(detector);
    }
}
