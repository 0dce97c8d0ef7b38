//! The host's queues and events ([`HostQueue`], [`HostEvent`]): a queue is an in-order
//! stream run by its own executor thread (see stream.rs); an event is a ticket of one.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use offload_core::{BackendKind, Error, Result};

use crate::stream;

/// A host queue: an in-order stream run by its own executor thread (see stream.rs);
/// `launch` and the other enqueues return once the work is queued.
pub struct HostQueue {
    pub(crate) stream: stream::Stream,
}

impl std::fmt::Debug for HostQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostQueue")
    }
}

/// A host event: completes when the work queued before it has finished, and holds the time
/// it did.
pub struct HostEvent {
    pub(crate) stream: Arc<stream::StreamCore>,
    pub(crate) ticket: u64,
    pub(crate) time: Arc<OnceLock<Instant>>,
}

impl std::fmt::Debug for HostEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostEvent")
            .field("ticket", &self.ticket)
            .field("complete", &self.stream.reached(self.ticket))
            .finish()
    }
}

impl HostEvent {
    /// When the work before the event finished; waits for it first.
    pub(crate) fn time(&self) -> Result<Instant> {
        self.stream.wait(self.ticket);
        self.time.get().copied().ok_or_else(|| Error::Driver {
            backend: BackendKind::Host,
            call: "Event::elapsed_since",
            code: -1,
            message: "the event completed without a time (its queue was destroyed first)".into(),
        })
    }
}
