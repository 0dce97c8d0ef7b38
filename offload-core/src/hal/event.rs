//! The event trait: a point in a queue's work, with a timestamp.

use std::time::Duration;

use crate::error::Result;

/// A point in a queue's work ([`Queue::record`](super::Queue::record)): complete once the
/// work enqueued before it has finished, when it also takes its time.
///
/// ```
/// use offload_core::hal::{Device, Event, Platform, Queue};
/// use offload_core::{Config, reference::Reference};
/// let platform = Reference::open(&Config::default())?;
/// let dev = platform.devices().remove(0);
/// let queue = dev.queue()?;
/// let start = queue.record()?;
/// let end = queue.record()?;
/// end.sync()?;
/// assert!(start.is_complete()? && end.is_complete()?);
/// assert!(end.elapsed_since(&start)? >= std::time::Duration::ZERO);
/// start.destroy()?;
/// end.destroy()?;
/// queue.destroy()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub trait Event: Send + Sync + Sized + 'static {
    /// Blocks until the event has completed.
    fn sync(&self) -> Result<()>;

    /// Whether the event has completed, without waiting.
    fn is_complete(&self) -> Result<bool>;

    /// Time from `start` to this event, both completed (of queues of one device).
    fn elapsed_since(&self, start: &Self) -> Result<Duration>;

    /// Destroys the event.
    fn destroy(self) -> Result<()>;
}
