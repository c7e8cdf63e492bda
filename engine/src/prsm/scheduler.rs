//! The scheduler: two bounded lock-free queues, originals before retransmissions (PRSM).

use super::*;

/// How a [`Scheduler`] orders its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discipline {
    /// PRSM: originals in the primary queue, retransmissions in the secondary queue, the
    /// secondary served only when the primary is empty.
    Priority,
    /// A conventional server: one FIFO queue for everything (the secondary capacity is
    /// ignored). Counters still say which class each item was.
    Fifo,
}

/// Sizes and discipline of a [`Scheduler`]: start from [`SchedulerConfig::priority`] or
/// [`SchedulerConfig::fifo`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// The ordering.
    pub discipline: Discipline,
    /// Capacity of the primary queue (the only queue under [`Discipline::Fifo`]).
    pub primary_capacity: usize,
    /// Capacity of the secondary queue (unused under [`Discipline::Fifo`]).
    pub secondary_capacity: usize,
}

impl SchedulerConfig {
    /// PRSM with the given queue capacities.
    pub fn priority(primary_capacity: usize, secondary_capacity: usize) -> Self {
        Self {
            discipline: Discipline::Priority,
            primary_capacity,
            secondary_capacity,
        }
    }

    /// One FIFO queue of `capacity` items.
    pub fn fifo(capacity: usize) -> Self {
        Self {
            discipline: Discipline::Fifo,
            primary_capacity: capacity,
            secondary_capacity: 0,
        }
    }
}

/// An item the scheduler had no room for (tail drop), handed back to the caller.
#[derive(Debug, PartialEq, Eq)]
pub struct Full<T> {
    /// The item.
    pub item: T,
    /// Its class, as pushed.
    pub class: Class,
}

#[derive(Default)]
struct Counters {
    enqueued: AtomicU64,
    dropped: AtomicU64,
    served: AtomicU64,
}

/// Counters and occupancy of one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Capacity (0 for the unused secondary queue of a FIFO scheduler).
    pub capacity: usize,
    /// Items queued now (a snapshot while others push and pop).
    pub len: usize,
    /// Items accepted so far.
    pub enqueued: u64,
    /// Items refused because the queue was full (tail drop).
    pub dropped: u64,
    /// Items handed out by [`Scheduler::pop`].
    pub served: u64,
}

/// Counters of a [`Scheduler`], per queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// The primary queue (originals; everything under FIFO).
    pub primary: QueueStats,
    /// The secondary queue (retransmissions).
    pub secondary: QueueStats,
}

/// The bounded two-queue scheduler (see the module documentation).
///
/// Every method takes `&self`: share it (in an `Arc`) between the threads that receive and
/// the threads that serve. Priority is strict per [`pop`](Self::pop): a pop serves the
/// secondary queue only after finding the primary queue empty; an original pushed by another
/// thread at that very moment is served by the next pop.
pub struct Scheduler<T> {
    discipline: Discipline,
    primary: ArrayQueue<(T, Class)>,
    secondary: Option<ArrayQueue<(T, Class)>>,
    counters: [CachePadded<Counters>; 2],
}

impl<T> std::fmt::Debug for Scheduler<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("discipline", &self.discipline)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<T> Scheduler<T> {
    /// A scheduler with empty queues. Both queues are allocated here, once.
    pub fn new(config: SchedulerConfig) -> Result<Self, ConfigError> {
        check_capacity("primary queue capacity", config.primary_capacity)?;
        let secondary = match config.discipline {
            Discipline::Priority => {
                check_capacity("secondary queue capacity", config.secondary_capacity)?;
                Some(ArrayQueue::new(config.secondary_capacity))
            }
            Discipline::Fifo => None,
        };
        Ok(Self {
            discipline: config.discipline,
            primary: ArrayQueue::new(config.primary_capacity),
            secondary,
            counters: Default::default(),
        })
    }

    /// The discipline this scheduler was built with.
    pub fn discipline(&self) -> Discipline {
        self.discipline
    }

    fn lane(&self, class: Class) -> usize {
        match (self.discipline, class) {
            (Discipline::Priority, Class::Retransmission) => 1,
            _ => 0,
        }
    }

    fn queue(&self, lane: usize) -> &ArrayQueue<(T, Class)> {
        match (lane, &self.secondary) {
            (1, Some(q)) => q,
            _ => &self.primary,
        }
    }

    /// Queues `item` (originals in the primary queue, retransmissions in the secondary one
    /// under PRSM). A full queue refuses it: the item comes back in [`Full`] (tail drop).
    pub fn push(&self, item: T, class: Class) -> Result<(), Full<T>> {
        let lane = self.lane(class);
        match self.queue(lane).push((item, class)) {
            Ok(()) => {
                self.counters[lane].enqueued.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err((item, class)) => {
                self.counters[lane].dropped.fetch_add(1, Ordering::Relaxed);
                Err(Full { item, class })
            }
        }
    }

    /// The next item to serve: the head of the primary queue, or when that is empty the head
    /// of the secondary queue; `None` when both are empty.
    pub fn pop(&self) -> Option<(T, Class)> {
        for lane in [0, 1] {
            if lane == 1 && self.secondary.is_none() {
                break;
            }
            if let Some(entry) = self.queue(lane).pop() {
                self.counters[lane].served.fetch_add(1, Ordering::Relaxed);
                return Some(entry);
            }
        }
        None
    }

    /// Items queued in both queues (a snapshot while others push and pop).
    pub fn len(&self) -> usize {
        self.primary.len() + self.secondary.as_ref().map_or(0, ArrayQueue::len)
    }

    /// True when both queues are empty (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Items queued in the queue `class` goes to (a snapshot).
    pub fn len_of(&self, class: Class) -> usize {
        self.queue(self.lane(class)).len()
    }

    /// The counters.
    pub fn stats(&self) -> SchedulerStats {
        let queue = |lane: usize| {
            let c = &self.counters[lane];
            let (capacity, len) = match (lane, &self.secondary) {
                (0, _) => (self.primary.capacity(), self.primary.len()),
                (_, Some(q)) => (q.capacity(), q.len()),
                (_, None) => (0, 0),
            };
            QueueStats {
                capacity,
                len,
                enqueued: c.enqueued.load(Ordering::Relaxed),
                dropped: c.dropped.load(Ordering::Relaxed),
                served: c.served.load(Ordering::Relaxed),
            }
        };
        SchedulerStats {
            primary: queue(0),
            secondary: queue(1),
        }
    }
}
