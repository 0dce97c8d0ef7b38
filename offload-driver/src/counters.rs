//! A backend's process-wide counts of platforms opened and deinitialised ([`Counters`],
//! kept in a `static` of the backend; [`Stats`], what `stats()` reads of them). Owns no
//! state of its own: each backend owns its `static`.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Process-wide counts of what a backend did, kept in a `static` of the backend.
///
/// ```
/// static COUNTERS: offload_driver::Counters = offload_driver::Counters::new();
/// assert_eq!(COUNTERS.stats().opened, 0);
/// ```
#[derive(Debug, Default)]
pub struct Counters {
    opened: AtomicUsize,
    deinitialised: AtomicUsize,
}

impl Counters {
    /// Both counts at zero.
    ///
    /// ```
    /// let c = offload_driver::Counters::new();
    /// assert_eq!(c.stats().deinitialised, 0);
    /// ```
    pub const fn new() -> Self {
        Counters {
            opened: AtomicUsize::new(0),
            deinitialised: AtomicUsize::new(0),
        }
    }

    /// Counts a platform opened.
    ///
    /// ```
    /// let c = offload_driver::Counters::new();
    /// c.opened();
    /// assert_eq!(c.stats().opened, 1);
    /// ```
    pub fn opened(&self) {
        self.opened.fetch_add(1, Ordering::SeqCst);
    }

    /// Counts a platform deinitialised.
    ///
    /// ```
    /// let c = offload_driver::Counters::new();
    /// c.deinitialised();
    /// assert_eq!(c.stats().deinitialised, 1);
    /// ```
    pub fn deinitialised(&self) {
        self.deinitialised.fetch_add(1, Ordering::SeqCst);
    }

    /// Reads the counts.
    ///
    /// ```
    /// let s = offload_driver::Counters::new().stats();
    /// assert!(s.opened >= s.deinitialised);
    /// ```
    pub fn stats(&self) -> Stats {
        Stats {
            opened: self.opened.load(Ordering::SeqCst),
            deinitialised: self.deinitialised.load(Ordering::SeqCst),
        }
    }
}

/// Process-wide counts of what a backend did.
///
/// ```
/// let s = offload_driver::Counters::new().stats();
/// assert_eq!((s.opened, s.deinitialised), (0, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Platforms opened (drivers found with at least one device).
    pub opened: usize,
    /// Platforms deinitialised.
    pub deinitialised: usize,
}
