//! PRSM through the C ABI: the two-queue request scheduler (`lc_scheduler`) and the
//! retransmission detector (`lc_detector`) of `loadctl::prsm`.
//!
//! Per request received, classification comes first: run it through `lc_classify_sip`; only if
//! it is accepted ask the detector whether it is an original or a retransmission
//! (`lc_detector_observe_sip`, or `lc_detector_observe` with the fields of your own parser) and
//! push it with that class (`lc_scheduler_push`). The serving threads take work out with
//! `lc_scheduler_pop`: originals first, retransmissions only when no original waits. When a push
//! finds its queue full (`LC_RESULT_QUEUE_FULL`, tail drop) the caller answers or discards the
//! request, and may `lc_detector_forget_sip` it so that the client's next copy counts as an
//! original again.
//!
//! Both handles are thread-safe and every call takes a `const` handle: any thread may push,
//! pop, observe and forget at the same time as any other (the scheduler is a lock-free
//! multi-producer, multi-consumer queue pair; the detector's table is split into independently
//! locked stripes). The library never reads a clock: `now_ns` is monotonic nanoseconds from any
//! fixed origin, the same for every call on one detector.
//!
//! Scheduler items are `uintptr_t` tokens the library never looks into: a pointer to the
//! caller's request, or an index into its own table. Items still queued when the scheduler is
//! freed are forgotten (drain it first if they own memory).
//!
//! `lc_class` and `lc_discipline` are integers with named constants, as every enum-like value
//! of the ABI (the crate documentation's integer-and-check rule): an unknown one is refused
//! with `LC_RESULT_INVALID_ARGUMENT`.

use loadctl::prsm::{
    Class, ConfigError, DetectorConfig, DetectorStats, Discipline, KeyError, QueueStats,
    RetransmissionDetector, Scheduler, SchedulerConfig, SchedulerStats, TransactionKey,
    TransactionParts,
};
use loadctl::sip;

// cbindgen writes the header in the order it meets the modules: scheduler first (one a group,
// so that rustfmt keeps that order).
mod scheduler;

mod detector;

#[cfg(test)]
mod tests;

pub use detector::*;
pub use scheduler::*;

use crate::abi::FromC;
use crate::scanned::lc_scanned_sip;
use crate::worker::sip_error_detail;
use crate::{Code, boundary, lc_result, lc_str};

/// A scheduler item: an integer as wide as a pointer (`uintptr_t` in the header), opaque to the
/// library.
pub type lc_uintptr = usize;

/// Whether a request is the first copy of its transaction seen or a retransmission of it:
/// `LC_CLASS_ORIGINAL` or `LC_CLASS_RETRANSMISSION`.
pub type lc_class = u32;
/// The first copy of a transaction: served from the primary queue.
pub const LC_CLASS_ORIGINAL: lc_class = 0;
/// A later copy of a transaction already seen: served only when no original waits.
pub const LC_CLASS_RETRANSMISSION: lc_class = 1;

/// How a scheduler orders its work: `LC_DISCIPLINE_PRIORITY` or `LC_DISCIPLINE_FIFO`.
pub type lc_discipline = u32;
/// PRSM: originals in the primary queue, retransmissions in the secondary queue, which is
/// served only when the primary queue is empty.
pub const LC_DISCIPLINE_PRIORITY: lc_discipline = 0;
/// A conventional server: one FIFO queue of `primary_capacity` for everything
/// (`secondary_capacity` is ignored); the counters still tell the classes apart.
pub const LC_DISCIPLINE_FIFO: lc_discipline = 1;

impl FromC for Class {
    const C_NAMES: &'static str = "LC_CLASS_*";

    fn from_c(value: u32) -> Option<Self> {
        match value {
            LC_CLASS_ORIGINAL => Some(Class::Original),
            LC_CLASS_RETRANSMISSION => Some(Class::Retransmission),
            _ => None,
        }
    }
}

impl FromC for Discipline {
    const C_NAMES: &'static str = "LC_DISCIPLINE_*";

    fn from_c(value: u32) -> Option<Self> {
        match value {
            LC_DISCIPLINE_PRIORITY => Some(Discipline::Priority),
            LC_DISCIPLINE_FIFO => Some(Discipline::Fifo),
            _ => None,
        }
    }
}

fn class_to_c(class: Class) -> lc_class {
    match class {
        Class::Original => LC_CLASS_ORIGINAL,
        Class::Retransmission => LC_CLASS_RETRANSMISSION,
    }
}

/// Every refused configuration is an argument out of range (zero or too large a capacity, a
/// zero T1, more stripes than capacity).
fn config_error(e: ConfigError) -> Code {
    crate::error::fail(Code::InvalidArgument, e)
}

/// The result code of a refused top Via, with its message as the call's error detail.
fn key_error(e: KeyError) -> Code {
    crate::error::detail(format_args!("SIP: {e}"));
    match e {
        KeyError::MissingVia => Code::SipMissingVia,
        KeyError::BadVia => Code::SipBadVia,
    }
}
