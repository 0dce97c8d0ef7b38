//! A queue or event as its generation lists it ([`Entry`]): the backend object until it is
//! released, its name for messages, and a queue's host-function panics not yet delivered
//! (L8); and its release ([`forget`]). Below both `queue` and `event`, which hold entries,
//! so that an event names its entry, not its queue.

use crate::sync::{Arc, RwLock, lock, read};
use std::fmt;

use crate::erased::{DynEvent, DynQueue};
use crate::error::{Error, Result};
use crate::hal::BackendKind;
use crate::runtime::generation::{DeviceKey, Generation, Kind, Resource, ResourceKey};
use crate::runtime::reentry;

/// A queue or event as its generation lists it: the backend object, until released.
pub(crate) struct Entry<T: ?Sized> {
    pub(super) device: DeviceKey,
    pub(super) backend: BackendKind,
    /// `"queue"` or `"event"`, for messages.
    pub(super) what: &'static str,
    /// The user's name for it ([`Queue::label`](crate::Queue::label)).
    pub(super) label: RwLock<Option<Arc<str>>>,
    pub(super) state: RwLock<Option<Box<T>>>,
    /// What a queue's host functions panicked with, until delivered (L8): to the queue's
    /// next `sync`; else, when the queue is dropped, to the runtime's next `shutdown`; else
    /// to the teardown that drains it (an implicit one's errors go to
    /// `take_unreported_errors`). Empty for events.
    pub(super) panics: Arc<crate::sync::Mutex<Panics>>,
}

/// A queue's undelivered host-function panics.
#[derive(Default)]
pub(super) struct Panics {
    pub(super) texts: Vec<String>,
    /// The queue was released and its panics taken: a later one (a captured value dropped
    /// after the queue's work was done) goes straight to the generation, for its next
    /// shutdown (L8).
    pub(super) released: bool,
}

impl<T: ?Sized> Entry<T> {
    pub(super) fn new(
        device: DeviceKey,
        backend: BackendKind,
        what: &'static str,
        raw: Box<T>,
    ) -> Arc<Self> {
        Arc::new(Entry {
            device,
            backend,
            what,
            label: RwLock::new(None),
            state: RwLock::new(Some(raw)),
            panics: Arc::default(),
        })
    }

    /// The host functions' panics not yet delivered, as one `Callback` error, taken;
    /// `released`: the queue goes, and later ones go to the generation.
    pub(super) fn take_panics(&self, released: bool) -> Result<()> {
        let panics = {
            let mut panics = lock(&self.panics);
            panics.released |= released;
            std::mem::take(&mut panics.texts)
        };
        if panics.is_empty() {
            return Ok(());
        }
        Err(host_fn_panicked(&self.to_string(), &panics))
    }

    /// Runs `f` on the backend object for the user's `call`, which names the errors that
    /// name no call ([`Error::in_call`]).
    pub(super) fn with<R>(&self, call: &'static str, f: impl FnOnce(&T) -> Result<R>) -> Result<R> {
        // A queue's work may wait for a buffer (L7): nothing of it inside `with_mapped`.
        crate::runtime::fork::refuse(call)?;
        reentry::refuse_in_mapped(call)?;
        let guard = read(&self.state);
        let raw = guard.as_ref().ok_or_else(|| Error::ShutDown {
            call: "",
            object: self.to_string(),
            caller: crate::Caller::Rust,
        })?;
        f(raw).map_err(|e| e.in_call(call))
    }
}

/// `queue "uploads" (vulkan)` when labelled, else `a vulkan queue`.
impl<T: ?Sized> fmt::Display for Entry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match read(&self.label).as_deref() {
            Some(label) => write!(f, "{} \"{label}\" ({})", self.what, self.backend),
            None => write!(f, "a {} {}", self.backend, self.what),
        }
    }
}

impl<T: ?Sized> Entry<T> {
    /// The backend object, taken once (waits for calls in flight on it).
    pub(super) fn take(&self) -> Option<Box<T>> {
        crate::sync::write(&self.state).take()
    }
}

impl Resource for Entry<dyn DynQueue> {
    /// L4's first step: drain.
    /// Drains the queue for the teardown, which returns what its host functions panicked
    /// with that nobody synced (L8).
    fn prepare(self: Arc<Self>, _generation: &Arc<Generation>) -> Result<()> {
        let drained = match read(&self.state).as_ref() {
            Some(queue) => queue.sync().map_err(|e| e.in_call("Queue::sync")),
            None => Ok(()),
        };
        Error::join(
            [drained.err(), self.take_panics(false).err()]
                .into_iter()
                .flatten()
                .collect(),
        )
    }

    /// Destroys the queue (after its work); returns what its host functions panicked with
    /// that nobody synced (L8: a drop's error goes to the next shutdown).
    fn release(self: Arc<Self>) -> Result<()> {
        let destroyed = self.take().map_or(Ok(()), |queue| queue.destroy());
        let destroyed = destroyed.map_err(|e| e.in_call("Queue::drop"));
        Error::join(
            [destroyed.err(), self.take_panics(true).err()]
                .into_iter()
                .flatten()
                .collect(),
        )
    }
}

impl Resource for Entry<dyn DynEvent> {
    fn release(self: Arc<Self>) -> Result<()> {
        let destroyed = self.take().map_or(Ok(()), |event| event.destroy());
        destroyed.map_err(|e| e.in_call("Event::drop"))
    }
}

/// Forgets a queue or event in its generation, then releases it (holding the generation so
/// teardown cannot deinitialise the platform meanwhile; after teardown, it released it).
pub(super) fn forget<T: ?Sized>(
    generation: &Generation,
    kind: Kind,
    key: ResourceKey,
    entry: Arc<Entry<T>>,
) where
    Entry<T>: Resource,
{
    // Deferred while the state is held: a teardown waiting for it then finds the error
    // (L8; released after the lock, it could land once the shutdown had returned).
    let _ = generation.with_live(|live| {
        live.forget(kind, key);
        generation.defer(entry.release());
        Ok(())
    });
}

/// The `Callback` error of a queue's host functions that panicked with `texts`.
pub(super) fn host_fn_panicked(queue: &str, texts: &[String]) -> Error {
    Error::Callback {
        callback: "Queue::enqueue_host_fn",
        source: format!("{queue}: {}", texts.join("; ")).into(),
    }
}
