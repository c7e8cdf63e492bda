use super::*;

const INVITE: &[u8] = b"INVITE sip:bob@b.example SIP/2.0\r\n\
    Via: SIP/2.0/UDP pc33.a.example;branch=z9hG4bK776asdhds\r\n\
    From: <sip:alice@a.example>;tag=1928301774\r\nTo: <sip:bob@b.example>\r\n\
    Call-ID: a84b4c76e66710\r\nCSeq: 314159 INVITE\r\n\r\n";

fn s(v: &[u8]) -> lc_str {
    lc_str::from_bytes(v)
}

fn new_scheduler(discipline: lc_discipline, primary: usize, secondary: usize) -> *mut lc_scheduler {
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
        // The scanned message makes the same key too.
        let mut scanned = std::mem::MaybeUninit::<lc_scanned_sip>::uninit();
        assert_eq!(
            crate::scanned::lc_sip_scan(msg, len, scanned.as_mut_ptr()),
            crate::LC_RESULT_OK
        );
        assert_eq!(
            lc_detector_observe_scanned(d, scanned.as_ptr(), 3, &mut class),
            crate::LC_RESULT_OK
        );
        assert_eq!(class, LC_CLASS_RETRANSMISSION);
        assert_eq!(
            lc_detector_forget_scanned(d, scanned.as_ptr(), &mut forgotten),
            crate::LC_RESULT_OK
        );
        assert!(forgotten);
        assert_eq!(observe_sip(4, &mut class), crate::LC_RESULT_OK);
        assert_eq!(class, LC_CLASS_ORIGINAL);
        let mut st = lc_detector_counters::default();
        assert_eq!(lc_detector_stats(d, &mut st), crate::LC_RESULT_OK);
        assert_eq!((st.originals, st.retransmissions, st.tracked), (3, 2, 1));
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
            // Scanned: the Via is the detector's business, so only the response fails to scan.
            let mut scanned = std::mem::MaybeUninit::<lc_scanned_sip>::uninit();
            let r = crate::scanned::lc_sip_scan(msg.as_ptr(), msg.len(), scanned.as_mut_ptr());
            if expected == crate::LC_RESULT_SIP_NOT_A_REQUEST {
                assert_eq!(r, expected);
                continue;
            }
            assert_eq!(r, crate::LC_RESULT_OK);
            let r = lc_detector_observe_scanned(d, scanned.as_ptr(), 0, &mut class);
            assert_eq!(r, expected);
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
