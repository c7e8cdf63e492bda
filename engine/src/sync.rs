//! The only place that names atomics, `Arc`, `Mutex` and arc-swap.
//!
//! Everything concurrent in the engine imports its primitives from here, so that under
//! `--cfg loadctl_loom` the same code runs on loom's model-checked types. arc-swap keeps
//! thread-local debt lists loom cannot model, so under loom [`ArcSwap`] is a
//! `loom::sync::RwLock<Arc<T>>` with the three methods the engine uses.

#[cfg(not(loadctl_loom))]
pub use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loadctl_loom))]
pub use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(loadctl_loom)]
pub use loom::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
#[cfg(loadctl_loom)]
pub use loom::sync::{Arc, Mutex, MutexGuard};

/// An atomically replaceable `Arc<T>` (RCU): readers never block, old values die with their
/// last reader.
#[cfg(not(loadctl_loom))]
pub struct ArcSwap<T>(arc_swap::ArcSwap<T>);

#[cfg(not(loadctl_loom))]
impl<T> ArcSwap<T> {
    /// Holds `value`.
    pub fn new(value: Arc<T>) -> Self {
        Self(arc_swap::ArcSwap::new(value))
    }

    /// The current value.
    pub fn load_full(&self) -> Arc<T> {
        self.0.load_full()
    }

    /// Replaces the value.
    pub fn store(&self, value: Arc<T>) {
        self.0.store(value);
    }
}

/// Loom stand-in for arc-swap (see the module documentation).
#[cfg(loadctl_loom)]
pub struct ArcSwap<T>(loom::sync::RwLock<Arc<T>>);

#[cfg(loadctl_loom)]
impl<T> ArcSwap<T> {
    /// Holds `value`.
    pub fn new(value: Arc<T>) -> Self {
        Self(loom::sync::RwLock::new(value))
    }

    /// The current value.
    pub fn load_full(&self) -> Arc<T> {
        self.0
            .read()
            .map(|g| Arc::clone(&g))
            .unwrap_or_else(|p| Arc::clone(&p.into_inner()))
    }

    /// Replaces the value.
    pub fn store(&self, value: Arc<T>) {
        match self.0.write() {
            Ok(mut g) => *g = value,
            Err(p) => *p.into_inner() = value,
        }
    }
}

impl<T> std::fmt::Debug for ArcSwap<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArcSwap(..)")
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it: every critical
/// section here leaves its data consistent before anything can panic.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An immutable shared string (source names). Immutable data needs no model checking, so
/// this is the standard `Arc` under loom too (loom's `Arc` cannot hold `str`).
pub type Name = std::sync::Arc<str>;

/// The standard `Arc`, for shared configuration that needs no model checking (the clock
/// trait object: loom's `Arc` cannot hold a `dyn` value).
pub type StdArc<T> = std::sync::Arc<T>;

/// Lets another thread run (a spin loop's back-off; under loom, a scheduling point).
#[cfg(not(loadctl_loom))]
pub fn yield_now() {
    std::thread::yield_now();
}

/// Lets another thread run (a spin loop's back-off; under loom, a scheduling point).
#[cfg(loadctl_loom)]
pub fn yield_now() {
    loom::thread::yield_now();
}
