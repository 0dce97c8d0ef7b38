//! What queued work uses a buffer's memory or a module ([`Uses`]): the streams that queued
//! it, each with the ticket of its last command that does, so a host access waits for that
//! work first (Q1) and a release waits for it (L4). A stream is anything that numbers its
//! commands and can be waited for ([`Stream`]; stream.rs's executor), so memory and
//! programs, which the streams' commands hold, sit below the streams.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::lock;

/// A stream of numbered commands (stream.rs's `StreamCore`).
pub(crate) trait Stream: Send + Sync {
    /// Whether command `ticket` has run.
    fn reached(&self, ticket: u64) -> bool;
    /// Waits until command `ticket` has run.
    fn wait(&self, ticket: u64);
    /// Whether the calling thread is running this stream's commands now.
    fn on_runner(&self) -> bool;
}

/// The streams whose queued work uses some memory or a module, with the ticket of the last
/// command of each that does.
#[derive(Default)]
pub(crate) struct Uses {
    streams: Mutex<Vec<(Weak<dyn Stream>, u64)>>,
    /// Whether `streams` may be non-empty (lets the common case skip the lock).
    any: AtomicBool,
}

impl std::fmt::Debug for Uses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uses")
            .field("streams", &lock(&self.streams).len())
            .finish()
    }
}

impl Uses {
    /// Records that command `ticket` of `stream` uses this.
    pub(crate) fn add<S: Stream + 'static>(&self, stream: &Arc<S>, ticket: u64) {
        let mut streams = lock(&self.streams);
        streams.retain(|(s, t)| s.upgrade().is_some_and(|s| !s.reached(*t)));
        match streams
            .iter_mut()
            .find(|(s, _)| std::ptr::addr_eq(s.as_ptr(), Arc::as_ptr(stream)))
        {
            Some((_, t)) => *t = (*t).max(ticket),
            None => {
                let stream: Weak<dyn Stream> = Arc::downgrade(stream) as Weak<dyn Stream>;
                streams.push((stream, ticket))
            }
        }
        self.any.store(true, Ordering::SeqCst);
    }

    /// Waits until the queued work recorded so far has finished. Inlined: every copy and
    /// access of host memory asks, and nearly always nothing is queued (one load).
    #[inline]
    pub(crate) fn wait(&self) {
        if self.any.load(Ordering::SeqCst) {
            self.wait_for_streams();
        }
    }

    /// The recorded work that has not run yet, as a wait that holds the streams weakly and
    /// not this: `None` when there is none, or only work of the stream this thread runs (a
    /// host function does not wait for its own queue, as [`Uses::wait`] does not).
    pub(crate) fn pending(&self) -> Option<offload_core::hal::Pending> {
        if !self.any.load(Ordering::SeqCst) {
            return None;
        }
        let left: Vec<(Weak<dyn Stream>, u64)> = lock(&self.streams)
            .iter()
            .filter(|(s, t)| {
                s.upgrade()
                    .is_some_and(|s| !s.reached(*t) && !s.on_runner())
            })
            .cloned()
            .collect();
        if left.is_empty() {
            return None;
        }
        Some(Box::new(move || {
            for (stream, ticket) in left {
                if let Some(stream) = stream.upgrade() {
                    stream.wait(ticket);
                }
            }
            Ok(())
        }))
    }

    #[cold]
    fn wait_for_streams(&self) {
        let pending: Vec<(Weak<dyn Stream>, u64)> = lock(&self.streams).clone();
        for (stream, ticket) in pending {
            if let Some(stream) = stream.upgrade() {
                stream.wait(ticket);
            }
        }
        let mut streams = lock(&self.streams);
        streams.retain(|(s, t)| s.upgrade().is_some_and(|s| !s.reached(*t)));
        if streams.is_empty() {
            self.any.store(false, Ordering::SeqCst);
        }
    }
}
