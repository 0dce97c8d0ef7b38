//! The in-process watchdog of the workspace's tests: a test that could hang (a lock, a
//! wait) holds one, so a hang fails the run instead of stalling it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Aborts the test process naming what it watches unless dropped in time ([`watchdog`]).
pub struct Watchdog(Arc<AtomicBool>);

/// Aborts the test process naming `what` unless the returned guard is dropped within
/// `limit`.
///
/// ```
/// use std::time::Duration;
/// let dog = offload_testing::watchdog(Duration::from_secs(60), "a quick step");
/// drop(dog); // in time: nothing happens
/// ```
pub fn watchdog(limit: Duration, what: impl Into<String>) -> Watchdog {
    let what = what.into();
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let until = Instant::now() + limit;
        while !flag.load(Ordering::Acquire) {
            if Instant::now() > until {
                eprintln!("watchdog: {what} did not finish within {limit:?} (a hang)");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}
