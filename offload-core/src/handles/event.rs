//! [`Event`]: a point in a queue's work, with a timestamp — wait for it, ask whether it
//! completed, measure the time between two, make another queue wait for it.

use crate::sync::Arc;
use std::fmt;
use std::time::Duration;

use crate::erased::DynEvent;
use crate::error::{Error, Result};
use crate::runtime::generation::{Generation, Kind, ResourceKey};
use crate::runtime::reentry;

use super::entry::{Entry, forget};

/// A point in a queue's work. Completed when the work before it has finished.
///
/// ```
/// # let rt = offload::Offload::init()?;
/// let q = rt.devices()?[0].queue()?;
/// let e = q.record()?;
/// e.sync()?;
/// # Ok::<(), offload::Error>(())
/// ```
pub struct Event {
    pub(super) generation: Arc<Generation>,
    pub(super) key: ResourceKey,
    pub(super) entry: Arc<Entry<dyn DynEvent>>,
    /// The queue it was recorded on ([`Queue::id`](crate::Queue::id)).
    pub(super) queue: u64,
    /// Recorded by a host function of its own queue: that function may never wait for it
    /// (on some backends it would complete early, on others never; L6 wants one answer).
    pub(super) in_own_host_fn: bool,
}

impl Event {
    /// Blocks until the event has completed.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// rt.devices()?[0].queue()?.record()?.sync()?;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        if reentry::host_fn_of() == Some((self.generation.id, self.queue))
            && (self.in_own_host_fn || !self.is_complete()?)
        {
            return Err(Error::invalid(
                "Event::sync",
                format!(
                    "a host function of the queue that recorded {self:?} waits for it, and \
                     it cannot complete before the function returns (L6)"
                ),
            ));
        }
        self.entry.with("Event::sync", |e| e.sync())
    }

    /// Whether the work before the event has finished, without waiting.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// let e = q.record()?;
    /// e.sync()?;
    /// assert!(e.is_complete()?);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn is_complete(&self) -> Result<bool> {
        self.entry.with("Event::is_complete", |e| e.is_complete())
    }

    /// The id of the queue the event was recorded on ([`Queue::id`](crate::Queue::id)).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// assert_eq!(q.record()?.queue_id(), q.id());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn queue_id(&self) -> u64 {
        self.queue
    }

    /// Device time from `start` to this event (both completed).
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let q = rt.devices()?[0].queue()?;
    /// let (a, b) = (q.record()?, q.record()?);
    /// b.sync()?;
    /// let _took = b.elapsed_since(&a)?;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn elapsed_since(&self, start: &Event) -> Result<Duration> {
        const CALL: &str = "Event::elapsed_since";
        start.entry.with(CALL, |s| {
            self.entry.with(CALL, |e| {
                if start.entry.device != self.entry.device
                    || !Arc::ptr_eq(&start.generation, &self.generation)
                {
                    return Err(Error::invalid(
                        "Event::elapsed_since",
                        "the events are of different devices",
                    ));
                }
                e.elapsed_since(s)
            })
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // In a forked child the handle is forgotten, its event with it (L9).
        if crate::runtime::fork::forget_in_child(&self.generation) {
            crate::runtime::fork::forget_in_child(&self.entry);
            return;
        }
        forget(&self.generation, Kind::Event, self.key, self.entry.clone());
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.entry, f)
    }
}
