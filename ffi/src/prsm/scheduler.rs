//! `lc_scheduler`: the two-queue request scheduler (originals before retransmissions).

use super::*;

/// The two-queue scheduler. Thread-safe: any thread may push and pop concurrently.
pub struct lc_scheduler {
    scheduler: Scheduler<lc_uintptr>,
}

impl lc_scheduler {
    /// The Rust scheduler behind the handle (for Rust code that links the rlib).
    pub fn scheduler(&self) -> &Scheduler<lc_uintptr> {
        &self.scheduler
    }
}

/// Scheduler settings.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_scheduler_config {
    /// `LC_DISCIPLINE_PRIORITY` (PRSM) or `LC_DISCIPLINE_FIFO`.
    pub discipline: lc_discipline,
    /// Items the primary queue holds (originals; everything under FIFO). 1 to 2^28.
    pub primary_capacity: usize,
    /// Items the secondary queue holds (retransmissions). 1 to 2^28 under PRSM; ignored under
    /// FIFO.
    pub secondary_capacity: usize,
}

/// Counters and occupancy of one scheduler queue.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_queue_counters {
    /// Capacity (0 for the unused secondary queue of a FIFO scheduler).
    pub capacity: usize,
    /// Items queued now (a snapshot while other threads push and pop).
    pub len: usize,
    /// Items accepted so far.
    pub enqueued: u64,
    /// Items refused because the queue was full (`LC_RESULT_QUEUE_FULL`).
    pub dropped: u64,
    /// Items handed out by `lc_scheduler_pop`.
    pub served: u64,
}

/// Counters of a scheduler, per queue, as `lc_scheduler_stats` writes them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct lc_scheduler_counters {
    /// The primary queue (originals; everything under FIFO).
    pub primary: lc_queue_counters,
    /// The secondary queue (retransmissions).
    pub secondary: lc_queue_counters,
}

fn queue_stats(q: &QueueStats) -> lc_queue_counters {
    lc_queue_counters {
        capacity: q.capacity,
        len: q.len,
        enqueued: q.enqueued,
        dropped: q.dropped,
        served: q.served,
    }
}

fn scheduler_stats(s: &SchedulerStats) -> lc_scheduler_counters {
    lc_scheduler_counters {
        primary: queue_stats(&s.primary),
        secondary: queue_stats(&s.secondary),
    }
}

/// Creates a scheduler with empty queues (all of its memory is allocated here) and writes it
/// to `*out`. `LC_RESULT_INVALID_ARGUMENT` for an unknown discipline or a capacity of 0 or
/// above 2^28.
///
/// # Safety
/// `config` must be valid for reads; `out` must be writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_new(
    config: *const lc_scheduler_config,
    out: *mut *mut lc_scheduler,
) -> lc_result {
    boundary(|| {
        let c = *try_ref!(config);
        let out = try_out!(out);
        let scheduler = try_!(
            Scheduler::new(
                match try_value!(c.discipline, "lc_scheduler_config.discipline") {
                    Discipline::Priority =>
                        SchedulerConfig::priority(c.primary_capacity, c.secondary_capacity),
                    Discipline::Fifo => SchedulerConfig::fifo(c.primary_capacity),
                }
            )
            .map_err(config_error)
        );
        out.write(Box::into_raw(Box::new(lc_scheduler { scheduler })));
        Code::Ok
    })
}

/// Frees a scheduler; items still queued are forgotten (they are only tokens: drain the
/// scheduler first if they own memory). `NULL` is a no-op.
///
/// # Safety
/// `scheduler` must be NULL or come from `lc_scheduler_new`, with no other thread using it,
/// and not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_free(scheduler: *mut lc_scheduler) {
    // SAFETY: NULL or from Box::into_raw in lc_scheduler_new, freed once.
    let _ = boundary(|| unsafe { crate::free_box(scheduler) });
}

/// Queues `item` with its class: originals to the primary queue, retransmissions to the
/// secondary queue (everything to the one queue under FIFO). When that queue is full the item
/// is not queued and the call returns `LC_RESULT_QUEUE_FULL` (tail drop, counted in `dropped`):
/// the caller still owns it and answers or discards the request.
/// `LC_RESULT_INVALID_ARGUMENT` for an unknown class. Any thread may call this concurrently
/// with pushes and pops on other threads.
///
/// # Safety
/// `scheduler` from `lc_scheduler_new`, alive during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_push(
    scheduler: *const lc_scheduler,
    item: lc_uintptr,
    item_class: lc_class,
) -> lc_result {
    boundary(|| {
        // Shared use is fine: the scheduler is Sync.
        let s = &try_ref!(scheduler).scheduler;
        let class = try_value!(item_class, "lc_scheduler_push: item_class");
        match s.push(item, class) {
            Ok(()) => Code::Ok,
            Err(_) => Code::QueueFull,
        }
    })
}

/// Takes the next item to serve — the head of the primary queue, or when that is empty the
/// head of the secondary queue — and writes it and its class (as pushed). `LC_RESULT_EMPTY`
/// when both queues are empty. Any thread may call this concurrently with pushes and pops on
/// other threads.
///
/// # Safety
/// `scheduler` from `lc_scheduler_new`, alive during the call; `item` and `item_class` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_pop(
    scheduler: *const lc_scheduler,
    item: *mut lc_uintptr,
    item_class: *mut lc_class,
) -> lc_result {
    boundary(|| {
        let s = &try_ref!(scheduler).scheduler;
        // Checked before popping: an item taken out must reach the caller.
        let (item, item_class) = (try_out!(item), try_out!(item_class));
        match s.pop() {
            Some((token, c)) => {
                item.write(token);
                item_class.write(class_to_c(c));
                Code::Ok
            }
            None => Code::Empty,
        }
    })
}

/// Writes the scheduler's counters and queue lengths into `*out` (a snapshot while other
/// threads push and pop).
///
/// # Safety
/// `scheduler` from `lc_scheduler_new`, alive during the call; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_scheduler_stats(
    scheduler: *const lc_scheduler,
    out: *mut lc_scheduler_counters,
) -> lc_result {
    boundary(|| {
        let s = &try_ref!(scheduler).scheduler;
        try_out!(out).write(scheduler_stats(&s.stats()));
        Code::Ok
    })
}
