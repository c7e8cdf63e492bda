//! PRSM: the two-queue priority request scheduler and the retransmission detector.
//!
//! An overloaded SIP server over UDP receives more and more copies of requests it has already
//! queued: an INVITE client retransmits at 0.5, 1.5, 3.5, … s until it hears a provisional
//! response, and every copy served costs a service slot. PRSM (Yavas, Hökelek, Günsel) puts
//! original requests in a **primary** queue and retransmissions in a **secondary** queue and
//! serves the secondary queue only when the primary queue is empty, so retransmissions can no
//! longer crowd out the new work that would end them.
//!
//! This module owns:
//! - [`Scheduler`]: the bounded two-queue scheduler (strict priority, tail drop: a full queue
//!   hands the item back so the caller can count or answer it), safe for many producers and
//!   many consumers (crossbeam's `ArrayQueue`, lock-free), with per-queue counters. The same
//!   type also runs as a conventional single FIFO ([`Discipline::Fifo`]) so a server can switch
//!   PRSM off and a simulation compares the two with the same code.
//! - [`RetransmissionDetector`]: tells an original from a retransmission by its transaction key
//!   (RFC 3261 §17.2.3: top Via `branch` and sent-by, method, CSeq number; the RFC 2543 key
//!   when the branch lacks the `z9hG4bK` cookie), remembering each key for Timer B (64·T1) in a
//!   fixed-size table: bounded memory, no allocation per message.
//!
//! Seams: the caller owns the I/O and the time (`now_ns` on every call, so everything runs in
//! simulated time); [`crate::sip::scan`] supplies the fields of a raw request, or a caller with
//! its own parser fills [`TransactionParts`]. Classification comes first: schedule only what
//! the load filter accepted.
//!
//! ```
//! use loadctl::prsm::{Class, DetectorConfig, RetransmissionDetector, Scheduler, SchedulerConfig};
//!
//! let scheduler = Scheduler::new(SchedulerConfig::priority(1000, 1000))?;
//! let detector = RetransmissionDetector::new(DetectorConfig::default())?;
//! let invite = b"INVITE sip:bob@b.example SIP/2.0\r\n\
//!     Via: SIP/2.0/UDP pc33.a.example;branch=z9hG4bK776asdhds\r\n\
//!     From: <sip:alice@a.example>;tag=1928301774\r\nTo: <sip:bob@b.example>\r\n\
//!     Call-ID: a84b4c76e66710\r\nCSeq: 314159 INVITE\r\n\r\n";
//! let request = loadctl::sip::scan(invite)?;
//! let key = detector.key(&request)?;
//! assert_eq!(detector.observe(key, 0), Class::Original);
//! scheduler.push("first copy", Class::Original).ok();
//! // 500 ms later the client retransmits: same key, secondary queue.
//! assert_eq!(detector.observe(key, 500_000_000), Class::Retransmission);
//! scheduler.push("second copy", Class::Retransmission).ok();
//! assert_eq!(scheduler.pop(), Some(("first copy", Class::Original)));
//! assert_eq!(scheduler.pop(), Some(("second copy", Class::Retransmission)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher, RandomState};

use crossbeam::queue::ArrayQueue;
use crossbeam::utils::CachePadded;

use crate::sip::via::ViaParm;
use crate::sip::{SipRequest, trim};
use crate::sync::{AtomicU64, Mutex, Ordering};

/// Whether a request is the first copy of its transaction seen or a retransmission of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// The first copy: goes to the primary queue.
    Original,
    /// A later copy of a transaction already seen: goes to the secondary queue.
    Retransmission,
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A queue or table that must hold something was given no room.
    ZeroCapacity(&'static str),
    /// A capacity beyond what this build supports.
    TooLarge {
        /// Which setting.
        what: &'static str,
        /// The largest accepted value.
        max: usize,
    },
    /// A duration of zero where time must pass.
    ZeroDuration(&'static str),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::ZeroCapacity(what) => write!(f, "{what} must be at least 1"),
            ConfigError::TooLarge { what, max } => write!(f, "{what} must be at most {max}"),
            ConfigError::ZeroDuration(what) => write!(f, "{what} must be longer than zero"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The largest queue or detector capacity accepted (2^28 items): a typo should fail clearly
/// rather than reserve tens of gigabytes.
pub const MAX_CAPACITY: usize = 1 << 28;

fn check_capacity(what: &'static str, n: usize) -> Result<(), ConfigError> {
    if n == 0 {
        Err(ConfigError::ZeroCapacity(what))
    } else if n > MAX_CAPACITY {
        Err(ConfigError::TooLarge {
            what,
            max: MAX_CAPACITY,
        })
    } else {
        Ok(())
    }
}

mod detector;
mod scheduler;

pub use detector::*;
pub use scheduler::*;

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn invite(branch: &str, cseq: u32) -> String {
        format!(
            "INVITE sip:bob@b.example SIP/2.0\r\n\
             Via: SIP/2.0/UDP pc33.a.example:5060;branch={branch};rport\r\n\
             Via: SIP/2.0/UDP proxy.example;branch=z9hG4bKouter\r\n\
             From: Alice <sip:alice@a.example>;tag=1928301774\r\n\
             To: Bob <sip:bob@b.example>\r\n\
             Call-ID: a84b4c76e66710@pc33.a.example\r\n\
             CSeq: {cseq} INVITE\r\n\r\n"
        )
    }

    fn key_of(d: &RetransmissionDetector, msg: &str) -> TransactionKey {
        d.key(&crate::sip::scan(msg.as_bytes()).expect("scan"))
            .expect("key")
    }

    fn detector(capacity: usize, stripes: usize) -> RetransmissionDetector {
        RetransmissionDetector::new(DetectorConfig {
            capacity,
            stripes,
            ..DetectorConfig::default()
        })
        .expect("config")
    }

    #[test]
    fn strict_priority_and_fifo_within_a_queue() {
        let s = Scheduler::new(SchedulerConfig::priority(4, 4)).expect("config");
        s.push(1, Class::Retransmission).expect("room");
        s.push(2, Class::Original).expect("room");
        s.push(3, Class::Retransmission).expect("room");
        s.push(4, Class::Original).expect("room");
        let order: Vec<_> = std::iter::from_fn(|| s.pop()).map(|(x, _)| x).collect();
        assert_eq!(order, [2, 4, 1, 3]);
        let st = s.stats();
        assert_eq!((st.primary.enqueued, st.primary.served), (2, 2));
        assert_eq!((st.secondary.enqueued, st.secondary.served), (2, 2));
    }

    #[test]
    fn tail_drop_hands_the_item_back_and_counts_it() {
        let s = Scheduler::new(SchedulerConfig::priority(2, 1)).expect("config");
        assert!(s.push("a", Class::Original).is_ok());
        assert!(s.push("b", Class::Original).is_ok());
        assert_eq!(
            s.push("c", Class::Original),
            Err(Full {
                item: "c",
                class: Class::Original
            })
        );
        // The secondary queue has its own room.
        assert!(s.push("r", Class::Retransmission).is_ok());
        assert!(s.push("r2", Class::Retransmission).is_err());
        let st = s.stats();
        assert_eq!((st.primary.len, st.primary.dropped), (2, 1));
        assert_eq!((st.secondary.len, st.secondary.dropped), (1, 1));
        assert_eq!(s.len(), 3);
        assert_eq!(s.len_of(Class::Retransmission), 1);
    }

    #[test]
    fn fifo_discipline_keeps_arrival_order_in_one_queue() {
        let s = Scheduler::new(SchedulerConfig::fifo(3)).expect("config");
        s.push(1, Class::Retransmission).expect("room");
        s.push(2, Class::Original).expect("room");
        s.push(3, Class::Retransmission).expect("room");
        assert!(s.push(4, Class::Original).is_err());
        let order: Vec<_> = std::iter::from_fn(|| s.pop()).collect();
        assert_eq!(
            order,
            [
                (1, Class::Retransmission),
                (2, Class::Original),
                (3, Class::Retransmission)
            ]
        );
        let st = s.stats();
        assert_eq!(st.secondary, QueueStats::default());
        assert_eq!((st.primary.enqueued, st.primary.dropped), (3, 1));
    }

    #[test]
    fn bad_configs_are_refused() {
        assert_eq!(
            Scheduler::<u8>::new(SchedulerConfig::priority(0, 1)).err(),
            Some(ConfigError::ZeroCapacity("primary queue capacity"))
        );
        assert_eq!(
            Scheduler::<u8>::new(SchedulerConfig::priority(1, 0)).err(),
            Some(ConfigError::ZeroCapacity("secondary queue capacity"))
        );
        assert!(Scheduler::<u8>::new(SchedulerConfig::fifo(MAX_CAPACITY + 1)).is_err());
        assert!(Scheduler::<u8>::new(SchedulerConfig::fifo(1)).is_ok());
        let bad = |c: DetectorConfig| RetransmissionDetector::new(c).err();
        let d = DetectorConfig::default();
        assert!(bad(DetectorConfig { capacity: 0, ..d }).is_some());
        assert!(bad(DetectorConfig { stripes: 0, ..d }).is_some());
        assert!(
            bad(DetectorConfig {
                capacity: 4,
                stripes: 8,
                ..d
            })
            .is_some()
        );
        assert_eq!(
            bad(DetectorConfig { t1_ns: 0, ..d }),
            Some(ConfigError::ZeroDuration("T1"))
        );
    }

    #[test]
    fn many_producers_and_consumers_lose_nothing() {
        let s = Scheduler::new(SchedulerConfig::priority(64, 64)).expect("config");
        let served = AtomicU64::new(0);
        let dropped = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for p in 0..2u64 {
                let (s, dropped) = (&s, &dropped);
                scope.spawn(move || {
                    for i in 0..20_000u64 {
                        let class = if i % 3 == 0 {
                            Class::Retransmission
                        } else {
                            Class::Original
                        };
                        if s.push(p * 1_000_000 + i, class).is_err() {
                            dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            for _ in 0..2 {
                let (s, served) = (&s, &served);
                scope.spawn(move || {
                    for _ in 0..200_000 {
                        if s.pop().is_some() {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let rest = std::iter::from_fn(|| s.pop()).count() as u64;
        let served = served.load(Ordering::Relaxed) + rest;
        assert_eq!(served + dropped.load(Ordering::Relaxed), 40_000);
        let st = s.stats();
        assert_eq!(st.primary.served + st.secondary.served, served);
        assert_eq!(
            st.primary.dropped + st.secondary.dropped,
            dropped.load(Ordering::Relaxed)
        );
    }

    #[test]
    fn retransmission_is_recognised_until_timer_b() {
        let d = detector(1024, 4);
        let k = key_of(&d, &invite("z9hG4bK776asdhds", 1));
        assert_eq!(d.observe(k, 0), Class::Original);
        for t in [SEC / 2, 3 * SEC / 2, 31 * SEC + SEC / 2] {
            assert_eq!(d.observe(k, t), Class::Retransmission, "at {t}");
        }
        // Timer B (32 s after the first copy) is over: a copy now starts afresh.
        assert_eq!(d.observe(k, 32 * SEC), Class::Original);
        let st = d.stats();
        assert_eq!((st.originals, st.retransmissions, st.evicted), (2, 3, 0));
        assert_eq!(st.tracked, 1);
    }

    #[test]
    fn rfc3261_key_is_branch_sent_by_method_and_cseq() {
        let d = detector(1024, 4);
        let base = key_of(&d, &invite("z9hG4bK1", 1));
        // Other headers change, the key does not: the branch identifies the transaction.
        let other_call_id = invite("z9hG4bK1", 1).replace("a84b4c76e66710", "zzz");
        assert_eq!(key_of(&d, &other_call_id), base);
        // sent-by host compares without case; white space in the protocol is allowed.
        let spaced = invite("z9hG4bK1", 1).replace(
            "SIP/2.0/UDP pc33.a.example:5060",
            "SIP / 2.0 / UDP  PC33.A.example:5060 ",
        );
        assert_eq!(key_of(&d, &spaced), base);
        assert_ne!(key_of(&d, &invite("z9hG4bK2", 1)), base);
        assert_ne!(key_of(&d, &invite("z9hG4bK1", 2)), base);
        let other_host = invite("z9hG4bK1", 1).replace("pc33.a.example:5060", "pc34.a.example");
        assert_ne!(key_of(&d, &other_host), base);
        let ack = invite("z9hG4bK1", 1)
            .replacen("INVITE sip", "ACK sip", 1)
            .replace("1 INVITE", "1 ACK");
        assert_ne!(key_of(&d, &ack), base, "ACK is not a copy of the INVITE");
    }

    #[test]
    fn rfc2543_fallback_uses_the_dialog_fields() {
        let d = detector(1024, 4);
        let old = invite("1234", 7);
        let base = key_of(&d, &old);
        assert_eq!(key_of(&d, &old.clone()), base);
        for changed in [
            old.replace("a84b4c76e66710", "other-call"),
            old.replace("tag=1928301774", "tag=5"),
            old.replace("INVITE sip:bob@b.example", "INVITE sip:carol@b.example"),
            old.replace(";rport", ";received=192.0.2.1"),
            old.replace("7 INVITE", "8 INVITE"),
            old.replace(
                "To: Bob <sip:bob@b.example>",
                "To: Bob <sip:bob@b.example>;tag=9",
            ),
        ] {
            assert_ne!(key_of(&d, &changed), base, "{changed}");
        }
        // No branch at all: also RFC 2543.
        let no_branch = old.replace(";branch=1234", "");
        assert_ne!(key_of(&d, &no_branch), base);
        assert_eq!(key_of(&d, &no_branch), key_of(&d, &no_branch.clone()));
    }

    /// Keys of every size around the one-write buffer's edge (192 bytes) are made without a
    /// panic and stay equal for equal fields (the fuzzer found an off-by-one here).
    #[test]
    fn keys_at_the_buffer_edge() {
        let d = detector(64, 1);
        for extra in 150..200 {
            let branch = format!("z9hG4bK{}", "b".repeat(extra));
            let via = format!("SIP/2.0/UDP host.example:5060;branch={branch}");
            let parts = TransactionParts {
                method: b"INVITE",
                request_uri: b"sip:x",
                top_via: via.as_bytes(),
                call_id: b"c",
                cseq: 1,
                from_tag: None,
                to_tag: None,
            };
            let a = d.key_from_parts(&parts).expect("key");
            assert_eq!(d.key_from_parts(&parts).expect("key"), a);
            let other = TransactionParts { cseq: 2, ..parts };
            assert_ne!(d.key_from_parts(&other).expect("key"), a, "extra {extra}");
        }
    }

    #[test]
    fn malformed_via_is_a_clear_error() {
        let d = detector(16, 1);
        let no_via = invite("z9hG4bK1", 1).replace(
            "Via: SIP/2.0/UDP pc33.a.example:5060;branch=z9hG4bK1;rport\r\n\
             Via: SIP/2.0/UDP proxy.example;branch=z9hG4bKouter\r\n",
            "",
        );
        let r = crate::sip::scan(no_via.as_bytes()).expect("scan");
        assert_eq!(d.key(&r), Err(KeyError::MissingVia));
        for via in [
            &b"garbage"[..],
            b"SIP/2.0/",
            b"SIP/2.0/UDP ;branch=z9hG4bK1",
            b"",
        ] {
            let parts = TransactionParts {
                method: b"INVITE",
                request_uri: b"sip:x",
                top_via: via,
                call_id: b"c",
                cseq: 1,
                from_tag: None,
                to_tag: None,
            };
            assert_eq!(d.key_from_parts(&parts), Err(KeyError::BadVia));
        }
    }

    #[test]
    fn the_key_takes_the_top_via_parms_own_branch() {
        // a `;branch=` inside a quoted value is text, not a parameter; a quote left open
        // leaves the via-parm's end unknown
        let d = detector(16, 1);
        let parts = |top_via: &'static [u8]| TransactionParts {
            method: b"INVITE",
            request_uri: b"sip:x",
            top_via,
            call_id: b"c",
            cseq: 1,
            from_tag: None,
            to_tag: None,
        };
        assert_eq!(
            d.key_from_parts(&parts(
                b"SIP/2.0/UDP h;x=\"a;branch=z9hG4bKfake\";branch=z9hG4bKreal"
            )),
            d.key_from_parts(&parts(b"SIP/2.0/UDP h;branch=z9hG4bKreal"))
        );
        assert_eq!(
            d.key_from_parts(&parts(b"SIP/2.0/UDP h;x=\"a;branch=z9hG4bK1")),
            Err(KeyError::BadVia)
        );
    }

    #[test]
    fn full_table_forgets_the_oldest_and_says_so() {
        let d = detector(8, 1);
        let keys: Vec<_> = (0..12)
            .map(|i| key_of(&d, &invite(&format!("z9hG4bK{i}"), 1)))
            .collect();
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(d.observe(k, i as u64), Class::Original);
        }
        let st = d.stats();
        assert_eq!((st.tracked, st.evicted), (8, 4));
        // The four oldest were forgotten; the eight newest are still known.
        for &k in &keys[4..] {
            assert_eq!(d.observe(k, 100), Class::Retransmission);
        }
        assert_eq!(d.observe(keys[0], 100), Class::Original);
    }

    #[test]
    fn forget_makes_the_next_copy_an_original() {
        let d = detector(64, 2);
        let k = key_of(&d, &invite("z9hG4bKf", 1));
        assert!(!d.forget(k));
        assert_eq!(d.observe(k, 0), Class::Original);
        assert!(d.forget(k));
        assert_eq!(d.observe(k, 1), Class::Original);
        assert_eq!(d.observe(k, 2), Class::Retransmission);
    }

    /// The table against a model (a map of key → expiry) over random traffic, with deletion
    /// from the middle of probe chains (forget) and expiry: a broken backward shift loses keys.
    #[test]
    fn table_agrees_with_a_model() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let lifetime = 1_000;
        // A tiny index so chains are long and wrap around.
        let mut table = detector::Table::new(48);
        // The model: key -> (sequence, expiry) and the arrival-order ring of (key, sequence,
        // expiry); forgotten keys stay in the ring (they still take room) as in the table.
        let mut model: std::collections::HashMap<u64, (u64, u64)> = Default::default();
        let mut ring: VecDeque<(u64, u64, u64)> = VecDeque::new();
        let mut seq = 0;
        let mut now = 0;
        let drop_front = |model: &mut std::collections::HashMap<u64, (u64, u64)>,
                          ring: &mut VecDeque<(u64, u64, u64)>| {
            if let Some((f, s, _)) = ring.pop_front()
                && model.get(&f).is_some_and(|&(ms, _)| ms == s)
            {
                model.remove(&f);
            }
        };
        for step in 0..200_000 {
            now += next() % 8;
            // 64 possible keys with few distinct high bits: many share a home slot.
            let fp = ((next() % 8) << 32) | ((next() % 8) + 1);
            while ring.front().is_some_and(|&(_, _, e)| e <= now) {
                drop_front(&mut model, &mut ring);
            }
            if next() % 10 == 0 {
                let had = model.remove(&fp).is_some();
                assert_eq!(table.forget(fp), had, "step {step}");
                continue;
            }
            let expected = if model.contains_key(&fp) {
                Class::Retransmission
            } else {
                Class::Original
            };
            assert_eq!(table.observe(fp, now, lifetime), expected, "step {step}");
            if expected == Class::Original {
                if ring.len() == 48 {
                    drop_front(&mut model, &mut ring);
                }
                ring.push_back((fp, seq, now + lifetime));
                model.insert(fp, (seq, now + lifetime));
                seq += 1;
            }
        }
        assert!(table.evicted > 0, "the run must exercise eviction");
    }

    #[test]
    fn steady_state_allocates_nothing() {
        let d = detector(4096, 4);
        let msgs: Vec<_> = (0..2048)
            .map(|i| invite(&format!("z9hG4bK{i}"), 1))
            .collect();
        let scanned: Vec<_> = msgs
            .iter()
            .map(|m| crate::sip::scan(m.as_bytes()).expect("scan"))
            .collect();
        let s = Scheduler::new(SchedulerConfig::priority(4096, 4096)).expect("config");
        let mut now = 0;
        let round = |now: &mut u64| {
            for r in &scanned {
                let class = d.observe(d.key(r).expect("key"), *now);
                let _ = s.push(r.cseq, class);
                *now += 1_000_000;
            }
            while s.pop().is_some() {}
        };
        round(&mut now);
        let info = allocation_counter::measure(|| {
            for _ in 0..4 {
                round(&mut now);
            }
        });
        assert_eq!(info.count_total, 0);
    }
}
