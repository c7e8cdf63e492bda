//! Running independent jobs on every core, in a given order, stopping at the first failure
//! (the sweeps' runner).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Runs `job(i)` for every `i` of `order` (indices below `order.len()`), in that order, on
/// [`std::thread::available_parallelism`] threads; `done(i)` after each success. The first
/// failure (an error, or a panic) stops the rest from starting. Returns the results by index,
/// `None` for jobs not run.
pub(crate) fn parallel<R: Send>(
    order: &[usize],
    job: impl Fn(usize) -> Result<R, String> + Sync,
    done: impl Fn(usize) + Sync,
) -> Vec<Option<Result<R, String>>> {
    let results: Mutex<Vec<Option<Result<R, String>>>> =
        Mutex::new((0..order.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(order.len());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        break;
                    };
                    let result = std::panic::catch_unwind(AssertUnwindSafe(|| job(i)))
                        .unwrap_or_else(|_| Err("the model panicked".to_owned()));
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    } else {
                        done(i);
                    }
                    results.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(result);
                }
            });
        }
    });
    results.into_inner().unwrap_or_else(PoisonError::into_inner)
}
