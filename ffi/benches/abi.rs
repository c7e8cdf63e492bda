//! The cost of the C ABI, side by side in one run: classify through `lc_classify` against the
//! Rust API on the same requests and policy, and `lc_classify_sip` on raw INVITEs of the
//! standard mix (requests/s per core, bytes/s).
//!
//! `cargo bench -p loadctl-ffi --bench abi`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loadctl::runtime::Time;
use loadctl_bench::workload::{OwnedRequest, carrier_policy, requests};
use loadctl_ffi::engine::{lc_engine, lc_engine_free, lc_engine_new, lc_engine_publish};
use loadctl_ffi::worker::*;
use loadctl_ffi::{LC_RESULT_OK, lc_str};

const WALL: i128 = 1_705_000_000_000_000_000;

fn s(v: &str) -> lc_str {
    lc_str {
        ptr: v.as_ptr(),
        len: v.len(),
    }
}

fn opt(v: Option<&str>) -> lc_str {
    v.map_or(
        lc_str {
            ptr: std::ptr::null(),
            len: 0,
        },
        s,
    )
}

fn c_request(r: &OwnedRequest, time: Time) -> lc_request {
    lc_request {
        method: s(r.method),
        from: s(&r.from),
        to: s(&r.to),
        request_uri: s(&r.request_uri),
        p_asserted_identity: opt(r.p_asserted_identity.as_deref()),
        target: opt(r.target.as_deref()),
        event: opt(None),
        transport: if r.transport.is_reliable() {
            LC_TRANSPORT_TCP
        } else {
            LC_TRANSPORT_UDP
        },
        initial: u8::from(r.initial),
        // The harness's in-dialog requests stand for dialogs the caller keeps.
        known_dialog: u8::from(!r.initial),
        source: loadctl_ffi::worker::lc_ip::default(),
        has_time: 1,
        monotonic_ns: time.monotonic_ns,
        unix_ns: time.unix_ns as i64,
        resource_priority: opt(None),
    }
}

fn bench(c: &mut Criterion) {
    let policy = carrier_policy(10_000, 42);
    let reqs = requests(&policy, 10_000, 7);
    let wire: Vec<Vec<u8>> = reqs.iter().enumerate().map(|(i, r)| r.to_sip(i)).collect();
    let mean_len = wire.iter().map(Vec::len).sum::<usize>() / wire.len();
    let body = loadctl::policy::write(&policy);

    let mut e: *mut lc_engine = std::ptr::null_mut();
    let mut w: *mut lc_worker = std::ptr::null_mut();
    let mut generation = 0u64;
    // SAFETY: valid pointers to locals; the engine outlives the worker below.
    unsafe {
        assert_eq!(lc_engine_new(std::ptr::null(), &mut e), LC_RESULT_OK);
        assert_eq!(
            lc_engine_publish(
                e,
                s("bench"),
                opt(None),
                body.as_ptr(),
                body.len(),
                &mut generation
            ),
            LC_RESULT_OK
        );
        assert_eq!(lc_worker_attach(e, -1, &mut w), LC_RESULT_OK);
    }
    // The Rust API on an identical engine of its own (sharing one would share the limiters'
    // state between the two measurements).
    let mut rust_engine: *mut lc_engine = std::ptr::null_mut();
    // SAFETY: valid pointers to locals; freed at the end.
    unsafe {
        assert_eq!(
            lc_engine_new(std::ptr::null(), &mut rust_engine),
            LC_RESULT_OK
        );
        assert_eq!(
            lc_engine_publish(
                rust_engine,
                s("bench"),
                opt(None),
                body.as_ptr(),
                body.len(),
                &mut generation
            ),
            LC_RESULT_OK
        );
    }
    // SAFETY: `rust_engine` is live until the end of this function.
    let mut shard = unsafe { &*rust_engine }.engine().attach();
    let mut decision = std::mem::MaybeUninit::<lc_decision>::uninit();

    let mut group = c.benchmark_group("abi");
    group.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    group.bench_function("rust-api", |b| {
        b.iter(|| {
            let r = &reqs[i % reqs.len()];
            i += 1;
            let d = shard.classify(&r.as_request(Time {
                monotonic_ns: i as u64 * 1_000,
                unix_ns: WALL,
            }));
            black_box(d.verdict);
        })
    });
    let mut j = 0usize;
    group.bench_function("lc_classify", |b| {
        b.iter(|| {
            let r = &reqs[j % reqs.len()];
            j += 1;
            let req = c_request(
                r,
                Time {
                    monotonic_ns: j as u64 * 1_000,
                    unix_ns: WALL,
                },
            );
            // SAFETY: `w` is a live worker used by this thread only; `req` borrows live strings.
            let res = unsafe { lc_classify(w, &req, decision.as_mut_ptr()) };
            black_box(res);
        })
    });
    group.throughput(Throughput::Bytes(mean_len as u64));
    let mut k = 0usize;
    group.bench_function("lc_classify_sip", |b| {
        b.iter(|| {
            let m = &wire[k % wire.len()];
            k += 1;
            // SAFETY: as above; `m` is a live buffer.
            let res = unsafe {
                lc_classify_sip(
                    w,
                    m.as_ptr(),
                    m.len(),
                    LC_TRANSPORT_UDP,
                    decision.as_mut_ptr(),
                )
            };
            black_box(res);
        })
    });
    group.finish();
    // SAFETY: created above, freed once.
    unsafe {
        lc_worker_free(w);
        lc_engine_free(e);
        drop(shard);
        lc_engine_free(rust_engine);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
