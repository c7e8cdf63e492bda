//! The models can fail: built with `--cfg loadctl_loom_mutant`, the engine has deliberately
//! broken variants (marked "Deliberately broken" in its source), and each scenario must catch
//! its variant. A scenario that passes against broken code is a model that proves nothing.
//!
//! - `RuleCell::replace` stores instead of compare-and-swapping: a concurrent lease is lost,
//!   so shards get more tokens than the burst, or a window slot twice.
//! - A publish gives every rule a fresh cell instead of carrying its cell over: a slot held
//!   across the publish is lent again.
//! - A dropped shard's counters are folded into the totals after the registry has been let go
//!   once: a reading in between misses them, and the statistics go back.
//! - The retransmission detector looks a key up and records it under two lock acquisitions:
//!   two copies arriving together are both taken for the original.
//! - A shared cell table claims cells without taking its lock: two engines publishing the
//!   same rule together both count it once, and a cell still in use is given away.
//! - Overload-control feedback is applied without the hop cell's writers' lock: one
//!   response's values end up stored with the other's `oc-seq`.
//! - A publish never announces its generation: shards keep their snapshot. (Reordering the
//!   announcement before the snapshot store is *not* a bug here — a shard compares the engine's
//!   generation with its snapshot's own and looks again — so that is not used as a mutant.)
#![cfg(all(loadctl_loom, loadctl_loom_mutant))]

mod scenarios;

use std::panic::{AssertUnwindSafe, catch_unwind};

fn caught(scenario: fn(), what: &str) {
    let outcome = catch_unwind(AssertUnwindSafe(scenario));
    assert!(
        outcome.is_err(),
        "the model did not catch the mutant: {what}"
    );
}

#[test]
fn token_model_catches_a_lost_lease() {
    caught(
        scenarios::token_leases_grant_exactly_the_burst_and_lose_none,
        "a lease that overwrites another",
    );
}

#[test]
fn window_model_catches_an_oversold_slot() {
    caught(
        scenarios::window_slots_are_never_oversold_or_leaked,
        "a slot lease that overwrites another",
    );
}

#[test]
fn carry_over_model_catches_a_fresh_cell() {
    caught(
        scenarios::a_window_slot_held_across_a_publish_is_neither_doubled_nor_lost,
        "cells not carried across a publish",
    );
}

#[test]
fn statistics_model_catches_a_gap_in_detaching() {
    caught(
        scenarios::statistics_add_up_and_never_go_back_when_a_shard_detaches,
        "counters folded in outside the registry lock",
    );
}

#[test]
fn publish_model_catches_an_unannounced_snapshot() {
    caught(
        scenarios::a_shard_sees_a_publish_whole_and_eventually,
        "a publish whose generation is never announced",
    );
}

#[test]
fn detector_model_catches_a_split_lookup() {
    caught(
        scenarios::one_original_per_transaction_however_copies_race,
        "a detector that looks up and records under two locks",
    );
}

#[test]
fn cell_table_model_catches_an_unlocked_claim() {
    caught(
        scenarios::engines_publishing_together_share_one_counted_cell,
        "claims without the table lock",
    );
}

#[test]
fn overload_model_catches_an_unlocked_writer() {
    caught(
        scenarios::overload_feedback_is_stored_whole_with_its_seq,
        "overload feedback applied without the writers' lock",
    );
}
