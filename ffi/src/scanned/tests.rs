use std::mem::MaybeUninit;

use super::*;
use crate::engine::{lc_engine, lc_engine_free, lc_engine_new};
use crate::overload::{lc_oc_category, lc_oc_category_scanned, lc_oc_category_sip};
use crate::worker::{
    lc_classify_scanned, lc_classify_sip_opts, lc_decision, lc_sip_options, lc_worker,
    lc_worker_attach, lc_worker_free,
};
use crate::{LC_RESULT_INVALID_ARGUMENT, LC_RESULT_NULL_PARAMETER, LC_RESULT_OK};

const INVITE: &[u8] = b"INVITE urn:service:sos SIP/2.0\r\n\
    Via: SIP/2.0/UDP pc33.a.example;branch=z9hG4bK776asdhds\r\n\
    From: \"Al\" <sip:alice@a.example>;tag=1928301774\r\nTo: <urn:service:sos>\r\n\
    Call-ID: a84b4c76e66710\r\nCSeq: 314159 INVITE\r\n\r\n";

fn scan(msg: &[u8]) -> (lc_result, lc_scanned_sip) {
    let mut out = lc_scanned_sip { opaque: [0; 64] };
    // SAFETY: `msg` readable, `out` writable.
    let r = unsafe { lc_sip_scan(msg.as_ptr(), msg.len(), &mut out) };
    (r, out)
}

/// An engine with the defaults and a worker on it.
fn engine_and_worker() -> (*mut lc_engine, *mut lc_worker) {
    let (mut e, mut w) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: NULL config (the defaults), valid output places; the engine outlives the worker.
    unsafe {
        assert_eq!(lc_engine_new(std::ptr::null(), &mut e), LC_RESULT_OK);
        assert_eq!(lc_worker_attach(e, -1, &mut w), LC_RESULT_OK);
    }
    (e, w)
}

#[test]
fn the_scan_fits_its_struct_and_is_read_back_whole() {
    assert_eq!(size_of::<lc_scanned_sip>(), 512);
    let (r, s) = scan(INVITE);
    assert_eq!(r, LC_RESULT_OK);
    // SAFETY: filled by lc_sip_scan; INVITE is static.
    let back = unsafe { load(&s) }.expect("a successful scan");
    assert_eq!(back.sip, sip::scan(INVITE).expect("scans"));
    assert_eq!(
        (back.from, back.to),
        (Some("<sip:alice@a.example>"), Some("<urn:service:sos>"))
    );
    // A copy is as good as the original.
    let copy = s;
    // SAFETY: as above.
    assert_eq!(unsafe { load(&copy) }.map(|c| c.sip), Ok(back.sip));
}

#[test]
fn a_zeroed_struct_or_a_failed_scan_is_refused() {
    let zeroed = lc_scanned_sip { opaque: [0; 64] };
    // SAFETY: readable structs; NULL is allowed.
    unsafe {
        assert_eq!(load(&zeroed).map(|_| ()), Err(Code::InvalidArgument));
        assert_eq!(load(std::ptr::null()).map(|_| ()), Err(Code::NullParameter));
    }
    // A failed scan over a good one: the good one is not used.
    let (r, mut s) = scan(INVITE);
    assert_eq!(r, LC_RESULT_OK);
    let response = b"SIP/2.0 200 OK\r\n\r\n";
    // SAFETY: readable message, writable struct.
    let r = unsafe { lc_sip_scan(response.as_ptr(), response.len(), &mut s) };
    assert_eq!(r, crate::LC_RESULT_SIP_NOT_A_REQUEST);
    // SAFETY: a readable struct.
    assert_eq!(unsafe { load(&s) }.map(|_| ()), Err(Code::InvalidArgument));
    // NULLs.
    let mut out = lc_scanned_sip { opaque: [0; 64] };
    // SAFETY: NULL pointers are refused before anything is read or written.
    unsafe {
        assert_eq!(
            lc_sip_scan(std::ptr::null(), 0, &mut out),
            LC_RESULT_NULL_PARAMETER
        );
        assert_eq!(
            lc_sip_scan(INVITE.as_ptr(), INVITE.len(), std::ptr::null_mut()),
            LC_RESULT_NULL_PARAMETER
        );
    }
    assert_eq!(out.opaque, [0; 64], "nothing written");
}

#[test]
fn category_and_decision_are_those_of_the_raw_calls() {
    let (e, w) = engine_and_worker();
    let (r, s) = scan(INVITE);
    assert_eq!(r, LC_RESULT_OK);
    let zeroed = lc_scanned_sip { opaque: [0; 64] };
    // SAFETY: zeroed options are valid; a NULL target is allowed.
    let o: lc_sip_options = unsafe { std::mem::zeroed() };
    let (mut raw, mut scanned) = (MaybeUninit::<lc_decision>::uninit(), MaybeUninit::uninit());
    let (mut raw_category, mut category): (lc_oc_category, lc_oc_category) = (99, 99);
    // SAFETY: live handles used by this thread; readable inputs; outputs read after OK.
    unsafe {
        let (msg, len) = (INVITE.as_ptr(), INVITE.len());
        assert_eq!(
            lc_oc_category_sip(e, msg, len, &o, &mut raw_category),
            LC_RESULT_OK
        );
        assert_eq!(
            lc_oc_category_scanned(e, &s, &o, &mut category),
            LC_RESULT_OK
        );
        assert_eq!(
            (raw_category, category),
            (crate::overload::LC_OC_CATEGORY_PRIORITY, raw_category)
        );
        assert_eq!(
            lc_classify_sip_opts(w, msg, len, &o, raw.as_mut_ptr()),
            LC_RESULT_OK
        );
        assert_eq!(
            lc_classify_scanned(w, &s, std::ptr::null(), scanned.as_mut_ptr()),
            LC_RESULT_OK
        );
        let (raw, scanned) = (raw.assume_init(), scanned.assume_init());
        assert_eq!(
            (
                raw.verdict,
                raw.exempt_reason,
                scanned.verdict,
                scanned.exempt_reason
            ),
            (
                crate::worker::LC_VERDICT_ACCEPT,
                crate::worker::LC_EXEMPT_REASON_EMERGENCY,
                raw.verdict,
                raw.exempt_reason
            )
        );
        // The zeroed struct: refused, nothing written.
        category = 99;
        assert_eq!(
            lc_oc_category_scanned(e, &zeroed, &o, &mut category),
            LC_RESULT_INVALID_ARGUMENT
        );
        assert_eq!(category, 99);
        lc_worker_free(w);
        lc_engine_free(e);
    }
}
