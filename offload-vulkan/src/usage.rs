//! What queued GPU work uses a buffer or a module (Q1).
//!
//! Work on a queue is recorded into the queue's open batch and submitted later (see
//! queue.rs), so "the work that uses this buffer" is of two kinds: batches already
//! submitted, summed up by the timeline value of the last of them, and the open batches of
//! some queues, not yet submitted. A host access, a free or an unload first submits those
//! open batches, then waits for the timeline value.
//!
//! Lock order: a queue's lock, then a usage's (recording and submitting take them so);
//! [`Usage::flush`] lets go of the usage's lock before it takes any queue's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use offload_core::Result;

use crate::context::DeviceContext;
use crate::queue::QueueShared;

/// The queued work that uses one buffer or module.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    /// The timeline value of the last submitted batch that uses it (0: none).
    last: AtomicU64,
    /// The queues whose open batch uses it.
    open: Mutex<Vec<Weak<QueueShared>>>,
}

impl Usage {
    fn lock(&self) -> MutexGuard<'_, Vec<Weak<QueueShared>>> {
        // Each step under the lock is one push or removal: never half-done.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that `queue`'s open batch uses this (called with the queue's lock held).
    pub(crate) fn opened_by(&self, queue: &Arc<QueueShared>) {
        let mut open = self.lock();
        if !open
            .iter()
            .any(|q| std::ptr::eq(q.as_ptr(), Arc::as_ptr(queue)))
        {
            open.push(Arc::downgrade(queue));
        }
    }

    /// `queue`'s open batch that used this was submitted with timeline value `value`
    /// (0: it was abandoned, never submitted).
    pub(crate) fn submitted(&self, queue: *const QueueShared, value: u64) {
        // Stamp first: a flush that no longer finds the queue below must see the value.
        self.last.fetch_max(value, Ordering::AcqRel);
        self.lock().retain(|q| !std::ptr::eq(q.as_ptr(), queue));
    }

    /// Submits the open batches that use this; returns the timeline value to wait for.
    pub(crate) fn flush(&self) -> Result<u64> {
        let queues: Vec<Arc<QueueShared>> = self.lock().iter().filter_map(Weak::upgrade).collect();
        for queue in queues {
            queue.flush()?;
        }
        Ok(self.last.load(Ordering::Acquire))
    }

    /// Submits the open batches that use this, then waits until no GPU work uses it.
    pub(crate) fn wait(&self, device: &DeviceContext) -> Result<()> {
        let value = self.flush()?;
        device.wait_for(value)
    }

    /// [`Usage::wait`] for `Drop`s: an error leaves the device waited idle instead.
    pub(crate) fn wait_or_idle(&self, device: &DeviceContext) {
        match self.flush() {
            Ok(value) => {
                // For drops: a lost device is reported by the next call that meets it.
                let _ = device.wait_for_or_idle(value);
            }
            Err(_) => {
                // For drops: a lost device is reported by the next call that meets it.
                let _ = device.wait_idle();
            }
        }
    }
}
