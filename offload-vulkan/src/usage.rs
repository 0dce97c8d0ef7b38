//! What queued GPU work uses a buffer or a module (Q1).
//!
//! Work on a queue is recorded into the queue's open batch and submitted later (see
//! queue.rs), so "the work that uses this buffer" is of two kinds: batches already
//! submitted, summed up by the timeline value of the last of them, and the open batches of
//! some queues, not yet submitted. A host access, a free or an unload first submits those
//! open batches, then waits for the timeline value. A queue whose gate is closed behind a
//! host function (queue/gate.rs) submits them only once the function has run: the flush waits
//! for that, except from that function itself, which gets `InvalidArgument` (L6).
//!
//! A usage names its queues through [`UsingQueue`] (the queue's state implements it), so
//! this module sits below memory and programs, which hold usages, and below the queues. It
//! also owns a buffer's memory on its way out ([`Released`]): destroyed once no work uses
//! it, by the buffer's drop or by the queue that holds work using it.
//!
//! Lock order: a queue's lock, then a usage's (recording and submitting take them so);
//! [`Usage::flush`] lets go of the usage's lock before it takes any queue's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use offload_core::Result;

use crate::allocation::RawAllocation;
use crate::context::DeviceContext;

/// A queue as the usages that name it see it: what they ask of its open and held batches.
/// The queue's state (`QueueShared`, queue/mod.rs, with these calls in queue/gate.rs) implements it;
/// it is a trait so that usages, below memory and programs, need not name the queues above
/// them.
pub(crate) trait UsingQueue: Send + Sync {
    /// Submits the open batch (or holds it), then waits until every batch closed so far is
    /// submitted; refused from the queue's own host function while batches are held.
    fn flush(&self) -> Result<()>;
    /// Whether this thread runs one of the queue's host functions.
    fn is_own(&self) -> bool;
    /// Whether the queue's gate is closed or holds work.
    fn is_gated(&self) -> bool;
    /// Frees `released` once the work held in the queue that uses it has run.
    fn release_after(self: Arc<Self>, released: Released);
}

/// The queues whose unsubmitted batches use something, each with how many of them do (one
/// open batch, and those held behind a host function).
type Open = Vec<(Weak<dyn UsingQueue>, usize)>;

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
    pub(crate) fn opened_by<Q: UsingQueue + 'static>(&self, queue: &Arc<Q>) {
        let mut open = self.lock();
        match open
            .iter_mut()
            .find(|(q, _)| std::ptr::addr_eq(q.as_ptr(), Arc::as_ptr(queue)))
        {
            Some((_, batches)) => *batches += 1,
            None => open.push((Arc::downgrade(queue) as Weak<dyn UsingQueue>, 1)),
        }
    }

    /// A batch of `queue` that used this was submitted with timeline value `value` (0: it
    /// was abandoned, never submitted).
    pub(crate) fn submitted<Q>(&self, queue: *const Q, value: u64) {
        // Stamp first: a flush that no longer finds the queue below must see the value.
        self.last.fetch_max(value, Ordering::AcqRel);
        let mut open = self.lock();
        if let Some((_, batches)) = open
            .iter_mut()
            .find(|(q, _)| std::ptr::addr_eq(q.as_ptr(), queue))
        {
            *batches = batches.saturating_sub(1);
        }
        open.retain(|(_, batches)| *batches > 0);
    }

    /// The queues whose open (or held) batches use this.
    fn queues(&self) -> Vec<Arc<dyn UsingQueue>> {
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
    /// must keep what is dropped until the work has run ([`UsingQueue::release_after`]);
    /// the other queues' work was waited for.
    pub(crate) fn wait_or_idle(&self, device: &DeviceContext) -> Option<Arc<dyn UsingQueue>> {
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

/// A buffer's memory on its way out: destroyed when this is dropped, once no GPU work
/// uses it (a buffer's drop waits for that first, or hands this to the batch after which
/// none does, batch.rs).
#[derive(Debug)]
pub(crate) struct Released {
    pub(crate) raw: RawAllocation,
    pub(crate) device: Arc<DeviceContext>,
}

// SAFETY: as for `VulkanBuffer` (memory.rs), whose memory this owns from its drop on: the mapped
// pointer is never used again, and Vulkan objects may be destroyed from any thread.
unsafe impl Send for Released {}

impl Drop for Released {
    fn drop(&mut self) {
        // SAFETY: the buffer was made on `self.device`, which is alive (we hold it); every
        // transfer that used it completed before its call returned, and every launch that
        // used it has finished (its drop waited, or the batch holding this has run), so no
        // GPU work on it is pending; it is destroyed exactly once, here (the
        // `VulkanBuffer` it came from destroys nothing).
        unsafe { self.raw.destroy(&self.device.raw) };
        self.device.allocations.fetch_sub(1, Ordering::SeqCst);
        self.device.platform_live.fetch_sub(1, Ordering::SeqCst);
        crate::stats::LIVE_ALLOCATIONS.fetch_sub(1, Ordering::SeqCst);
    }
}
