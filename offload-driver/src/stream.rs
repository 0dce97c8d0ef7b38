//! What the vendor backends (CUDA, HIP, Level Zero) share about queued work: which streams
//! use a buffer or a module, and up to which of their operations ([`Uses`]).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use offload_core::{Error, Result};

/// A driver stream that can be waited for, whose operations are numbered.
pub trait Stream: Send + Sync + 'static {
    /// Waits for everything enqueued on the stream so far.
    fn synchronize(&self) -> Result<()>;
    /// How many operations were enqueued on the stream so far (numbered from 1): a queue
    /// numbers each after the driver has it, except a host function, numbered before (its
    /// function may run before the enqueue returns), so an operation numbered below a
    /// host function's was enqueued before it.
    fn enqueued(&self) -> u64;
}

/// The streams whose queued work uses a buffer or a module, each with the number of its
/// latest operation that does: a host access, a free or an unload first waits for them
/// ([`Uses::wait`]).
///
/// ```
/// use offload_driver::{Stream, Uses};
/// struct Idle;
/// impl Stream for Idle {
///     fn synchronize(&self) -> offload_core::Result<()> { Ok(()) }
///     fn enqueued(&self) -> u64 { 1 }
/// }
/// let stream = std::sync::Arc::new(Idle);
/// let uses = Uses::<Idle>::default();
/// uses.add(&stream);
/// uses.add(&stream); // once per stream
/// assert_eq!(format!("{uses:?}"), "Uses(1)");
/// uses.wait()?;
/// assert_eq!(format!("{uses:?}"), "Uses(0)");
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct Uses<S>(Arc<Entries<S>>);

/// Each stream that used it (weakly) with the number of its latest operation that did.
type Entries<S> = Mutex<Vec<(Weak<S>, u64)>>;

impl<S> Default for Uses<S> {
    fn default() -> Self {
        Uses(Arc::default())
    }
}

fn lock<S>(entries: &Entries<S>) -> MutexGuard<'_, Vec<(Weak<S>, u64)>> {
    entries.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: Stream> Uses<S> {
    /// Notes that `stream`'s operations so far include work that uses this.
    pub fn add(&self, stream: &Arc<S>) {
        let number = stream.enqueued();
        let mut streams = lock(&self.0);
        streams.retain(|(q, _)| q.strong_count() > 0);
        match streams
            .iter_mut()
            .find(|(q, _)| std::ptr::eq(q.as_ptr(), Arc::as_ptr(stream)))
        {
            Some((_, latest)) => *latest = (*latest).max(number),
            None => streams.push((Arc::downgrade(stream), number)),
        }
    }

    /// Waits for the work queued so far on every stream that used this.
    ///
    /// From inside a host function (L6), its own stream is not waited for: the work
    /// enqueued before the function has run; work enqueued after it cannot run before the
    /// function returns, so a use by such work is refused (`InvalidArgument`) rather than
    /// waited for forever.
    pub fn wait(&self) -> Result<()> {
        wait_for(&self.0)
    }

    /// The work [`Uses::wait`] would wait for, as a wait that holds only this bookkeeping
    /// (the streams weakly), not what uses it: `None` when there is none (every stream that
    /// used this is gone, or only earlier work of the host function this thread runs).
    /// The runtime runs it with no lock of the buffer held (`hal::Device::pending`).
    pub fn pending(&self) -> Option<offload_core::hal::Pending> {
        let running = crate::running_host_fn();
        let left = lock(&self.0).iter().any(|(stream, latest)| {
            stream.strong_count() > 0
                && !matches!(running, Some((at, number))
                    if at == crate::stream_key(stream.as_ptr()) && *latest < number)
        });
        if !left {
            return None;
        }
        let entries = self.0.clone();
        Some(Box::new(move || wait_for(&entries)))
    }
}

/// [`Uses::wait`] over `entries`.
fn wait_for<S: Stream>(entries: &Entries<S>) -> Result<()> {
    // Read, not taken: a use is forgotten only once its stream was waited for, so a
    // second thread waiting meanwhile also waits (it found the list emptied by the
    // first, and read bytes a queued write had not yet written: a flaky state-machine
    // case under deferred streams).
    let seen: Vec<(Weak<S>, u64)> = lock(entries).clone();
    let running = crate::running_host_fn();
    for (stream, latest) in &seen {
        if let Some((at, number)) = running
            && at == crate::stream_key(stream.as_ptr())
        {
            if *latest < number {
                continue;
            }
            return Err(Error::InvalidArgument {
                call: "",
                reason: "work enqueued on its queue after the running host function uses \
                         it: waiting for that work from the host function would wait for \
                         the function itself"
                    .into(),
            });
        }
        if let Some(stream) = stream.upgrade() {
            stream.synchronize()?;
        }
    }
    // Forget what was waited for (or had run before the host function); a use added
    // meanwhile has a higher number and stays.
    lock(entries).retain(|(stream, latest)| {
        stream.strong_count() > 0
            && !seen
                .iter()
                .any(|(done, upto)| Weak::ptr_eq(done, stream) && latest <= upto)
    });
    Ok(())
}

impl<S: Stream> std::fmt::Debug for Uses<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Uses({})", lock(&self.0).len())
    }
}
