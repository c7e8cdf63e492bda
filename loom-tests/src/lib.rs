//! loom models of loadctl's lock-free pieces.
//!
//! The engine names its atomics, `Arc`, `Mutex` and arc-swap only through `loadctl::sync`;
//! built with `--cfg loadctl_loom` those become loom's model-checked types, and the tests of
//! this crate explore every interleaving (up to loom's preemption bound) of small scenarios:
//!
//! - `tests/models.rs`: GCRA token leases from a shared cell never grant more than the rate
//!   allows and lose none; window slots are never oversold or leaked; a publish while a shard
//!   classifies never shows a torn snapshot, a window slot held across a publish is
//!   returned to the cell that lent it, and statistics read while a shard detaches never go
//!   back and end up counting every request once; two engines publishing the same rule on one
//!   shared cell table at once end up on one cell, counted twice; two copies of one INVITE racing through the
//!   PRSM retransmission detector yield exactly one original.
//! - `tests/mutants.rs`: the same models against deliberately broken engine code (built with
//!   `--cfg loadctl_loom_mutant` as well): each must be caught, which shows the models can fail.
//!
//! Run both (what `make loom`, part of `make test`, does; a separate target directory keeps the
//! normal build's artefacts):
//!
//! ```text
//! RUSTFLAGS="--cfg loadctl_loom" cargo test -p loadctl-loom --release --target-dir target/loom
//! RUSTFLAGS="--cfg loadctl_loom --cfg loadctl_loom_mutant" \
//!     cargo test -p loadctl-loom --release --target-dir target/loom-mutant
//! ```
//!
//! Built without the cfg, the crate holds only the scenario helpers below.

#![forbid(unsafe_code)]

use loadctl::compile::Identities;
use loadctl::policy::{Limits, Ruleset, read};
use loadctl::runtime::{Request, Time, Transport};

const NS: &str = "xmlns=\"urn:ietf:params:xml:ns:common-policy\" \
                  xmlns:lc=\"urn:ietf:params:xml:ns:load-control\"";

/// A full ruleset with one rule `id` matching To numbers under `+1` and accepting `accept`
/// (e.g. `<lc:win>1</lc:win>`).
pub fn one_rule(version: u32, id: &str, accept: &str) -> Ruleset {
    let text = format!(
        "<ruleset {NS} version=\"{version}\" state=\"full\"><rule id=\"{id}\"><conditions>\
         <lc:call-identity><lc:sip><lc:to><many-tel prefix=\"+1\"/></lc:to></lc:sip>\
         </lc:call-identity></conditions><actions><lc:accept>{accept}</lc:accept></actions>\
         </rule></ruleset>"
    );
    match read(text.as_bytes(), &Limits::default()) {
        Ok(doc) => doc.ruleset,
        Err(e) => panic!("scenario policy does not validate: {e}"),
    }
}

/// An initial INVITE to `tel:+1-555-0100` at a fixed time (no clock is read).
pub fn invite() -> Request<'static> {
    Request {
        method: "INVITE",
        identities: Identities {
            to: Some("<tel:+1-555-0100>"),
            ..Identities::default()
        },
        transport: Transport::Udp,
        initial: true,
        event: None,
        time: Some(Time {
            monotonic_ns: 1_000_000_000,
            unix_ns: 1_700_000_000_000_000_000,
        }),
        ..Request::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_policies_validate() {
        assert_eq!(one_rule(3, "w", "<lc:win>1</lc:win>").version(), 3);
        assert_eq!(invite().method, "INVITE");
    }
}
