//! The peers loadctl is measured against, besides the naive evaluator ([`crate::naive`]).
//!
//! - [`LockedLimiter`]: one `Mutex<HashMap<key, counter>>` with per-second tail-drop counters,
//!   the way Kamailio's ratelimit/pipelimit modules keep their state (one lock per check).
//! - governor's `RateLimiter::direct` (one limiter shared by all threads) and keyed limiter
//!   (DashMap), used directly by the harness.
//! - [`floor`]: only reading the request bytes — one pass over each header value and one hash
//!   of it — the cost below which no classifier can go.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use crate::workload::OwnedRequest;

/// A tail-drop limiter: at most `limit` per key per whole second, all keys behind one lock.
#[derive(Debug)]
pub struct LockedLimiter {
    limit: u64,
    counters: Mutex<HashMap<u32, (u64, u64)>>,
}

impl LockedLimiter {
    /// `limit` requests per key per second.
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            counters: Mutex::new(HashMap::new()),
        }
    }

    /// Admits one request for `key` at `now_ns`.
    pub fn check(&self, key: u32, now_ns: u64) -> bool {
        let second = now_ns / 1_000_000_000;
        let mut map = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(key).or_insert((second, 0));
        if entry.0 != second {
            *entry = (second, 0);
        }
        if entry.1 < self.limit {
            entry.1 += 1;
            true
        } else {
            false
        }
    }
}

/// Reads a request the way any classifier must at least: each header value scanned once (for
/// its `<`, as a URI extraction would) and hashed once. Returns a value so nothing is optimised
/// away.
pub fn floor(r: &OwnedRequest) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let fields = [
        Some(r.method),
        Some(r.from.as_str()),
        Some(r.to.as_str()),
        Some(r.request_uri.as_str()),
        r.p_asserted_identity.as_deref(),
        r.target.as_deref(),
    ];
    let mut acc = 0u64;
    for f in fields.into_iter().flatten() {
        acc += f.bytes().position(|b| b == b'<').unwrap_or(0) as u64;
        f.hash(&mut h);
    }
    acc ^ h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_limiter_is_a_per_second_tail_drop() {
        let l = LockedLimiter::new(3);
        let admitted = (0..10).filter(|_| l.check(7, 500_000_000)).count();
        assert_eq!(admitted, 3);
        assert!(l.check(8, 500_000_000), "other keys have their own counter");
        assert!(l.check(7, 1_000_000_000), "a new second resets");
    }
}
