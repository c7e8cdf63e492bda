//! A fixed-work driver for instruction counts of the library's part of the edge's path per
//! request (edge/handle.c): the retransmission detector (not for ACK and CANCEL), overload
//! control's category and classification, through the C ABI, on the harness's carrier-10k
//! policy and request mix as raw SIP messages. The counted loops are non-inlined functions
//! named `edge_loop*`, so callgrind can count just them.
//!
//! `valgrind --tool=callgrind --toggle-collect='*edge_loop*' \
//!   target/release/examples/edge_path_count MODE 100000`
//!
//! Modes: `three` (`lc_detector_observe_sip`, `lc_oc_category_sip`, `lc_classify_sip_opts`:
//! each scans the message), `scanned` (`lc_sip_scan` once, then `lc_detector_observe_scanned`,
//! `lc_oc_category_scanned`, `lc_classify_scanned`), `scan` (`lc_sip_scan` alone). Instructions
//! per request = Ir / (N + 20,000): one warm pass over the 20,000 messages is counted too, as in
//! `classify_count`. `check` runs `three` and `scanned` on two libraries set up alike and fails
//! unless every request gets the same class, category and decision from both.
//!
//! The detector remembers a transaction for 64·T1 with T1 = 100 µs, 6,400 requests of the
//! driver's time (1 µs apart): each message is an original when it comes round again, and every
//! observation also expires one old transaction, as at a server in its steady state.

use std::mem::MaybeUninit;

use loadctl_bench::workload::{carrier_policy, requests};
use loadctl_ffi::engine::{lc_engine, lc_engine_free, lc_engine_new, lc_engine_publish};
use loadctl_ffi::overload::{lc_oc_category, lc_oc_category_scanned, lc_oc_category_sip};
use loadctl_ffi::prsm::{
    lc_class, lc_detector, lc_detector_config, lc_detector_config_default, lc_detector_free,
    lc_detector_new, lc_detector_observe_scanned, lc_detector_observe_sip,
};
use loadctl_ffi::scanned::{lc_scanned_sip, lc_sip_scan};
use loadctl_ffi::worker::{
    LC_IP_V4, LC_SIP_HAS_TIME, LC_SIP_KNOWN_DIALOG, LC_TRANSPORT_TCP, LC_TRANSPORT_UDP,
    lc_classify_scanned, lc_classify_sip_opts, lc_decision, lc_ip, lc_sip_options, lc_worker,
    lc_worker_attach, lc_worker_free,
};
use loadctl_ffi::{LC_RESULT_OK, lc_result, lc_str};

const WALL: i64 = 1_705_000_000_000_000_000;
/// Where the edge forwards every request: its `--next-hop` as the target entity.
const NEXT_HOP: &str = "sip:192.0.2.254:5060";

/// One request as the edge has it when it calls the library: the raw message and what it knows
/// of its origin.
struct Message {
    bytes: Vec<u8>,
    /// ACK and CANCEL are not shown to the detector.
    ack_or_cancel: bool,
    transport: u32,
    /// The edge keeps the dialogs it saw set up; the harness's in-dialog requests stand for them.
    known_dialog: bool,
    target: Option<String>,
    source: [u8; 4],
}

/// The library's handles, as the edge holds them.
struct Library {
    engine: *mut lc_engine,
    worker: *mut lc_worker,
    detector: *mut lc_detector,
}

/// What the library said about one request: the detector's class (or its error), the category
/// (or its error), the decision's verdict, status and whether it matched a rule (or the error).
type Outcome = (
    Result<lc_class, lc_result>,
    Result<lc_oc_category, lc_result>,
    Result<(u32, u16, bool), lc_result>,
);

impl Library {
    /// An engine with the carrier-10k policy, a worker, and a detector with T1 = 100 µs.
    fn new() -> Self {
        let body = loadctl::policy::write(&carrier_policy(10_000, 42));
        let mut lib = Library {
            engine: std::ptr::null_mut(),
            worker: std::ptr::null_mut(),
            detector: std::ptr::null_mut(),
        };
        let mut config = MaybeUninit::<lc_detector_config>::uninit();
        let mut generation = 0u64;
        let no_notifier = lc_str {
            ptr: std::ptr::null(),
            len: 0,
        };
        // SAFETY: valid pointers to locals; `config` is read after the call that wrote it.
        unsafe {
            assert_eq!(
                lc_engine_new(std::ptr::null(), &mut lib.engine),
                LC_RESULT_OK
            );
            let r = lc_engine_publish(
                lib.engine,
                s("bench"),
                no_notifier,
                body.as_ptr(),
                body.len(),
                &mut generation,
            );
            assert_eq!(r, LC_RESULT_OK);
            assert_eq!(
                lc_worker_attach(lib.engine, -1, &mut lib.worker),
                LC_RESULT_OK
            );
            assert_eq!(
                lc_detector_config_default(config.as_mut_ptr()),
                LC_RESULT_OK
            );
            let mut config = config.assume_init();
            config.t1_ns = 100_000;
            assert_eq!(lc_detector_new(&config, &mut lib.detector), LC_RESULT_OK);
        }
        lib
    }

    fn free(self) {
        // SAFETY: created in `new`, freed once, not used afterwards.
        unsafe {
            lc_detector_free(self.detector);
            lc_worker_free(self.worker);
            lc_engine_free(self.engine);
        }
    }
}

fn s(v: &str) -> lc_str {
    lc_str {
        ptr: v.as_ptr(),
        len: v.len(),
    }
}

fn ok<T>(r: lc_result, v: impl FnOnce() -> T) -> Result<T, lc_result> {
    if r == LC_RESULT_OK { Ok(v()) } else { Err(r) }
}

fn options(m: &Message, i: usize) -> lc_sip_options {
    let mut source = lc_ip {
        family: LC_IP_V4,
        addr: [0; 16],
    };
    source.addr[..4].copy_from_slice(&m.source);
    lc_sip_options {
        transport: m.transport,
        flags: LC_SIP_HAS_TIME
            | if m.known_dialog {
                LC_SIP_KNOWN_DIALOG
            } else {
                0
            },
        monotonic_ns: i as u64 * 1_000,
        unix_ns: WALL,
        target: s(m.target.as_deref().unwrap_or(NEXT_HOP)),
        source,
    }
}

/// The edge's three calls, each scanning the message.
fn three(lib: &Library, m: &Message, i: usize) -> Outcome {
    let o = options(m, i);
    let mut cls = MaybeUninit::<lc_class>::uninit();
    let mut cat = MaybeUninit::<lc_oc_category>::uninit();
    let mut d = MaybeUninit::<lc_decision>::uninit();
    let (msg, len) = (m.bytes.as_ptr(), m.bytes.len());
    // SAFETY: live handles used by this thread only; `msg` readable for `len` bytes; `o` and
    // its target live for the calls; the outputs are read only after a call returned OK, which
    // wrote them.
    unsafe {
        let class = if m.ack_or_cancel {
            Err(LC_RESULT_OK)
        } else {
            let r =
                lc_detector_observe_sip(lib.detector, msg, len, o.monotonic_ns, cls.as_mut_ptr());
            ok(r, || cls.assume_init())
        };
        let r = lc_oc_category_sip(lib.engine, msg, len, &o, cat.as_mut_ptr());
        let category = ok(r, || cat.assume_init());
        let r = lc_classify_sip_opts(lib.worker, msg, len, &o, d.as_mut_ptr());
        let decision = ok(r, || {
            let d = d.assume_init();
            (d.verdict, d.status, d.matched)
        });
        (class, category, decision)
    }
}

/// One scan, then the three calls on it.
fn scanned(lib: &Library, m: &Message, i: usize) -> Outcome {
    let o = options(m, i);
    let mut scan = MaybeUninit::<lc_scanned_sip>::uninit();
    let mut cls = MaybeUninit::<lc_class>::uninit();
    let mut cat = MaybeUninit::<lc_oc_category>::uninit();
    let mut d = MaybeUninit::<lc_decision>::uninit();
    // SAFETY: as in `three`; the scan is used while `m.bytes` lives unchanged.
    unsafe {
        let r = lc_sip_scan(m.bytes.as_ptr(), m.bytes.len(), scan.as_mut_ptr());
        if r != LC_RESULT_OK {
            // What the three calls give a message that does not scan.
            return (
                if m.ack_or_cancel {
                    Err(LC_RESULT_OK)
                } else {
                    Err(r)
                },
                Err(r),
                Err(r),
            );
        }
        let scan = scan.as_ptr();
        let class = if m.ack_or_cancel {
            Err(LC_RESULT_OK)
        } else {
            let r =
                lc_detector_observe_scanned(lib.detector, scan, o.monotonic_ns, cls.as_mut_ptr());
            ok(r, || cls.assume_init())
        };
        let r = lc_oc_category_scanned(lib.engine, scan, &o, cat.as_mut_ptr());
        let category = ok(r, || cat.assume_init());
        let r = lc_classify_scanned(lib.worker, scan, &o, d.as_mut_ptr());
        let decision = ok(r, || {
            let d = d.assume_init();
            (d.verdict, d.status, d.matched)
        });
        (class, category, decision)
    }
}

/// Requests `from..from + n` of the mix (round and round) through `path`; how many it accepted.
#[inline(never)]
fn edge_loop(
    path: fn(&Library, &Message, usize) -> Outcome,
    lib: &Library,
    mix: &[Message],
    from: usize,
    n: usize,
) -> u64 {
    let mut accepted = 0u64;
    for i in from..from + n {
        let (_, _, d) = path(lib, &mix[i % mix.len()], i);
        accepted += u64::from(matches!(d, Ok((0, _, _))));
    }
    accepted
}

#[inline(never)]
fn edge_loop_scan(mix: &[Message], from: usize, n: usize) -> u64 {
    let mut scanned = 0u64;
    let mut scan = MaybeUninit::<lc_scanned_sip>::uninit();
    for i in from..from + n {
        let m = &mix[i % mix.len()];
        // SAFETY: `m.bytes` readable; `scan` writable.
        let r = unsafe { lc_sip_scan(m.bytes.as_ptr(), m.bytes.len(), scan.as_mut_ptr()) };
        scanned += u64::from(r == LC_RESULT_OK);
    }
    scanned
}

/// Runs the warm pass of both paths on two libraries set up alike (each its own limiter state
/// and detector) and checks that every request got the same outcome from both.
fn same_outcomes(mix: &[Message]) {
    let (a, b) = (Library::new(), Library::new());
    for (i, m) in mix.iter().enumerate() {
        assert_eq!(three(&a, m, i), scanned(&b, m, i), "request {i}");
    }
    a.free();
    b.free();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "three".into());
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let policy = carrier_policy(10_000, 42);
    let mix: Vec<Message> = requests(&policy, 20_000, 7)
        .iter()
        .enumerate()
        .map(|(i, r)| Message {
            bytes: r.to_sip(i),
            ack_or_cancel: matches!(r.method, "ACK" | "CANCEL"),
            transport: if r.transport.is_reliable() {
                LC_TRANSPORT_TCP
            } else {
                LC_TRANSPORT_UDP
            },
            known_dialog: !r.initial,
            target: r.target.clone(),
            source: [192, 0, 2, (i % 250) as u8],
        })
        .collect();
    let lib = Library::new();
    let w = mix.len();
    let done = match mode.as_str() {
        "three" | "scanned" => {
            let path = if mode == "three" { three } else { scanned };
            edge_loop(path, &lib, &mix, 0, w);
            edge_loop(path, &lib, &mix, w, n)
        }
        "scan" => {
            edge_loop_scan(&mix, 0, w);
            edge_loop_scan(&mix, w, n)
        }
        "check" => {
            same_outcomes(&mix);
            0
        }
        other => panic!("unknown mode {other}: three, scanned, scan or check"),
    };
    println!("{mode}: {n} requests, {done} accepted (scan: scanned)");
    lib.free();
}
