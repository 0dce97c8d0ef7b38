//! What queued GPU work uses a buffer or a module (Q1).
//!
//! Work on a queue is recorded into the queue's open batch and submitted later (see
//! queue.rs), so "the work that uses this buffer" is of two kinds: batches already
//! submitted, summed up by the timeline value of the last of them, and the open batches of
//! some queues, not yet submitted. A host access, a free or an unload first submits those
//! open batches, then waits for the timeline value. A queue whose gate is closed behind a
//! host function (gate.rs) submits them only once the function has run: the flush waits
//! for that, except from that function itself, which gets `InvalidArgument` (L6).
//!
//! Lock order: a queue's lock, then a usage's (recording and submitting take them so);
//! [`Usage::flush`] lets go of the usage's lock before it takes any queue's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use offload_core::Result;

use crate::context::DeviceContext;
use crate::queue::QueueShared;

/// The queues whose unsubmitted batches use something, each with how many of them do (one
/// open batch, and those held behind a host function).
type Open = Vec<(Weak<QueueShared>, usize)>;

/// The queued work that uses one buffer or module.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    /// The timeline value of the last submitted batch that uses it (0: none).
    last: AtomicU64,
    /// The queues whose unsubmitted batches use it.
    open: Mutex<Open>,
}

impl Usage {
    fn lock(&self) -> MutexGuard<'_, Open> {
        // Each step under the lock is one push, count or removal: never half-done.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that `queue`'s open batch uses this: once per batch (called with the queue's
    /// lock held).
    pub(crate) fn opened_by(&self, queue: &Arc<QueueShared>) {
        let mut open = self.lock();
        match open
            .iter_mut()
            .find(|(q, _)| std::ptr::eq(q.as_ptr(), Arc::as_ptr(queue)))
        {
            Some((_, batches)) => *batches += 1,
            None => open.push((Arc::downgrade(queue), 1)),
        }
    }

    /// A batch of `queue` that used this was submitted with timeline value `value` (0: it
    /// was abandoned, never submitted).
    pub(crate) fn submitted(&self, queue: *const QueueShared, value: u64) {
        // Stamp first: a flush that no longer finds the queue below must see the value.
        self.last.fetch_max(value, Ordering::AcqRel);
        let mut open = self.lock();
        if let Some((_, batches)) = open
            .iter_mut()
            .find(|(q, _)| std::ptr::eq(q.as_ptr(), queue))
        {
            *batches = batches.saturating_sub(1);
        }
        open.retain(|(_, batches)| *batches > 0);
    }

    /// The queues whose open (or held) batches use this.
    fn queues(&self) -> Vec<Arc<QueueShared>> {
        self.lock()
            .iter()
            .filter_map(|(q, _)| q.upgrade())
            .collect()
    }

    /// Submits the open batches that use this; returns the timeline value to wait for.
    /// Every queue but the one whose host function this thread runs is flushed even when
    /// that one refuses (its refusal comes last).
    pub(crate) fn flush(&self) -> Result<u64> {
        let mut refused = None;
        for queue in self.queues() {
            if let Err(e) = queue.flush() {
                if !queue.is_own() {
                    return Err(e);
                }
                refused = Some(e);
            }
        }
        match refused {
            Some(e) => Err(e),
            None => Ok(self.last.load(Ordering::Acquire)),
        }
    }

    /// Whether work held behind a host function uses this: a host access must wait for
    /// it with no lock of the buffer held (`hal::Device::pending`, L7).
    pub(crate) fn is_held(&self) -> bool {
        self.queues().iter().any(|q| q.is_gated())
    }

    /// Submits the open batches that use this, then waits until no GPU work uses it.
    pub(crate) fn wait(&self, device: &DeviceContext) -> Result<()> {
        let value = self.flush()?;
        device.wait_for(value)
    }

    /// [`Usage::wait`] for `Drop`s: an error leaves the device waited idle instead. From
    /// a host function whose queue holds work that uses this, returns that queue, which
    /// must keep what is dropped until the work has run (`QueueShared::release_after`);
    /// the other queues' work was waited for.
    pub(crate) fn wait_or_idle(&self, device: &DeviceContext) -> Option<Arc<QueueShared>> {
        match self.flush() {
            Ok(value) => {
                // For drops: a lost device is reported by the next call that meets it.
                let _ = device.wait_for_or_idle(value);
                None
            }
            Err(_) => {
                if let Some(own) = self.queues().into_iter().find(|q| q.is_own()) {
                    // For drops: as above.
                    let _ = device.wait_for_or_idle(self.last.load(Ordering::Acquire));
                    return Some(own);
                }
                // For drops: a lost device is reported by the next call that meets it.
                let _ = device.wait_idle();
                None
            }
        }
    }
}
