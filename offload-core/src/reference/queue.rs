//! The reference backend's queues: work is recorded when it is enqueued and runs later, at
//! the first thing that needs it — a sync, an event's sync, a wait on another queue's
//! event, or a host access to the device's memory (which runs every queue of the device
//! first). So the ordering properties of the conformance suite hold on it for the right
//! reason, and [`Unordered`](super::Unordered), which skips the last step, shows that the
//! suite catches a backend that breaks them.

use crate::sync::{Arc, AtomicBool, Mutex, OnceLock, Ordering, Weak, lock};
use std::collections::VecDeque;
use std::time::Instant;

/// One command, checked when it was enqueued.
pub(crate) type Work = Box<dyn FnOnce() + Send>;

/// The recorded work of one queue.
#[derive(Default)]
pub(crate) struct Pending {
    work: Mutex<VecDeque<Work>>,
    /// Held while this queue's work runs, so that a second flush waits for the first
    /// (work taken out of `work` is still running).
    running: Mutex<()>,
    /// A command taken out of `work` is running (set and read under `work`'s lock).
    busy: AtomicBool,
}

impl Pending {
    pub(crate) fn push(&self, work: Work) {
        lock(&self.work).push_back(work);
    }

    /// Runs the recorded work, in order, until none is left.
    pub(crate) fn flush(&self) {
        let _running = lock(&self.running);
        loop {
            let next = {
                let mut work = lock(&self.work);
                let next = work.pop_front();
                self.busy.store(next.is_some(), Ordering::SeqCst);
                next
            };
            match next {
                Some(work) => work(),
                None => break,
            }
        }
    }

    /// Whether no work is recorded or running.
    pub(crate) fn is_idle(&self) -> bool {
        let work = lock(&self.work);
        work.is_empty() && !self.busy.load(Ordering::SeqCst)
    }
}

/// The queues of one device, for host accesses to run first.
#[derive(Default)]
pub(crate) struct Queues(Mutex<Vec<Weak<Pending>>>);

impl Queues {
    pub(crate) fn add(&self, queue: &Arc<Pending>) {
        let mut queues = lock(&self.0);
        queues.retain(|q| q.strong_count() > 0);
        queues.push(Arc::downgrade(queue));
    }

    /// Whether no queue has work recorded or running.
    pub(crate) fn all_idle(&self) -> bool {
        let queues: Vec<Arc<Pending>> = lock(&self.0).iter().filter_map(Weak::upgrade).collect();
        queues.iter().all(|q| q.is_idle())
    }

    /// Runs every queue's recorded work.
    pub(crate) fn flush_all(&self) {
        let queues: Vec<Arc<Pending>> = lock(&self.0).iter().filter_map(Weak::upgrade).collect();
        for queue in queues {
            queue.flush();
        }
    }
}

/// A reference queue: its recorded work.
pub struct RefQueue {
    pub(crate) pending: Arc<Pending>,
}

impl std::fmt::Debug for RefQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefQueue")
            .field("idle", &self.pending.is_idle())
            .finish()
    }
}

/// A reference event: the time the work before it ran, once it has.
#[derive(Debug)]
pub struct RefEvent {
    pub(crate) at: Arc<OnceLock<Instant>>,
    pub(crate) queue: Weak<Pending>,
}

impl RefEvent {
    /// Runs the work before the event, then gives its time.
    pub(crate) fn sync(&self) -> Instant {
        if let Some(at) = self.at.get() {
            return *at;
        }
        if let Some(queue) = self.queue.upgrade() {
            queue.flush();
        }
        // A destroyed queue ran its work when it was destroyed.
        *self.at.get_or_init(Instant::now)
    }
}
