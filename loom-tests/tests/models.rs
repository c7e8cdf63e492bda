//! loom models of the engine's lock-free pieces (see the crate documentation). Each runs in
//! `loom::model`, which repeats the scenario for every interleaving of its threads' atomic
//! operations up to the preemption bound (`LOOM_MAX_PREEMPTIONS`, default 2 here).
#![cfg(all(loadctl_loom, not(loadctl_loom_mutant)))]

mod scenarios;

#[test]
fn token_leases_grant_exactly_the_burst_and_lose_none() {
    scenarios::token_leases_grant_exactly_the_burst_and_lose_none();
}

#[test]
fn window_slots_are_never_oversold_or_leaked() {
    scenarios::window_slots_are_never_oversold_or_leaked();
}

#[test]
fn a_shard_sees_a_publish_whole_and_eventually() {
    scenarios::a_shard_sees_a_publish_whole_and_eventually();
}

#[test]
fn a_window_slot_held_across_a_publish_is_neither_doubled_nor_lost() {
    scenarios::a_window_slot_held_across_a_publish_is_neither_doubled_nor_lost();
}

#[test]
fn statistics_add_up_and_never_go_back_when_a_shard_detaches() {
    scenarios::statistics_add_up_and_never_go_back_when_a_shard_detaches();
}

#[test]
fn one_original_per_transaction_however_copies_race() {
    scenarios::one_original_per_transaction_however_copies_race();
}

#[test]
fn engines_publishing_together_share_one_counted_cell() {
    scenarios::engines_publishing_together_share_one_counted_cell();
}

#[test]
fn overload_feedback_is_stored_whole_with_its_seq() {
    scenarios::overload_feedback_is_stored_whole_with_its_seq();
}
