//! Two documents in one input (split at the first NUL byte): the first as the current policy,
//! the second as an update. Merging never panics; a merge that succeeds yields a full policy
//! with the update's version and unique rule ids, and a failed one leaves nothing to apply.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadctl::policy::{Limits, merge, read};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let (first, second) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => return,
    };
    let current = read(first, &limits).ok().map(|d| d.ruleset);
    let Ok(update) = read(second, &limits) else {
        return;
    };
    let version = update.ruleset.version();
    if let Ok(merged) = merge(current.as_ref(), update.ruleset, &limits) {
        assert_eq!(merged.version(), version);
        let rules = merged.rules().expect("a merge result is a full policy");
        let mut ids: Vec<&str> = rules.iter().map(|r| r.id.as_str()).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "duplicate rule ids after a merge");
    }
});
