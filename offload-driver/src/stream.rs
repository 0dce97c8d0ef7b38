//! What the stream-based backends (CUDA, HIP) share about queued work: which streams use a
//! buffer or a module ([`Uses`]), and host functions handed to a driver thread
//! ([`HostCallback`], with [`host_trampoline`] as the C callback).

use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use offload_core::Result;
use offload_core::hal::HostFn;

/// A driver stream that can be waited for.
pub trait Stream: Send + Sync + 'static {
    /// Waits for everything enqueued on the stream so far, for `call`.
    fn synchronize(&self, call: &'static str) -> Result<()>;
}

/// The streams whose queued work uses a buffer or a module: a host access, a free or an
/// unload first waits for them ([`Uses::wait`]).
///
/// ```
/// use offload_driver::{Stream, Uses};
/// struct Idle;
/// impl Stream for Idle {
///     fn synchronize(&self, _: &'static str) -> offload_core::Result<()> { Ok(()) }
/// }
/// let stream = std::sync::Arc::new(Idle);
/// let uses = Uses::<Idle>::default();
/// uses.add(&stream);
/// uses.add(&stream); // once per stream
/// assert_eq!(format!("{uses:?}"), "Uses(1)");
/// uses.wait("Buffer::free")?;
/// assert_eq!(format!("{uses:?}"), "Uses(0)");
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct Uses<S>(Mutex<Vec<Weak<S>>>);

impl<S> Default for Uses<S> {
    fn default() -> Self {
        Uses(Mutex::default())
    }
}

impl<S: Stream> Uses<S> {
    fn lock(&self) -> MutexGuard<'_, Vec<Weak<S>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that `stream` has work that uses this.
    pub fn add(&self, stream: &Arc<S>) {
        let mut streams = self.lock();
        streams.retain(|q| q.strong_count() > 0);
        if !streams
            .iter()
            .any(|q| std::ptr::eq(q.as_ptr(), Arc::as_ptr(stream)))
        {
            streams.push(Arc::downgrade(stream));
        }
    }

    /// Waits for the work queued so far on every stream that used this.
    pub fn wait(&self, call: &'static str) -> Result<()> {
        let streams: Vec<Arc<S>> = self.lock().drain(..).filter_map(|q| q.upgrade()).collect();
        for stream in streams {
            stream.synchronize(call)?;
        }
        Ok(())
    }
}

impl<S: Stream> std::fmt::Debug for Uses<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Uses({})", self.lock().len())
    }
}

/// Where a queue's host-function panics go: the first is kept for the next sync.
pub type HostFailure = Arc<Mutex<Option<String>>>;

/// A host function and where its panic goes, handed to a driver thread as the `void *` of
/// a C callback ([`host_trampoline`]).
///
/// ```
/// use offload_driver::{HostCallback, HostFailure, host_trampoline};
/// let failure = HostFailure::default();
/// let data = HostCallback::into_data(Box::new(|| panic!("boom")), &failure);
/// // SAFETY: `data` was made just above and is run once.
/// unsafe { host_trampoline(data) };
/// let message = failure.lock().unwrap().take().unwrap();
/// assert_eq!(message, "the host function panicked: boom");
/// ```
pub struct HostCallback {
    f: HostFn,
    failure: HostFailure,
}

#[allow(unsafe_code)]
impl HostCallback {
    /// Boxes `f` for a driver: the pointer goes to [`host_trampoline`] once, or back through
    /// [`HostCallback::take_back`] if the driver refused it.
    pub fn into_data(f: HostFn, failure: &HostFailure) -> *mut c_void {
        Box::into_raw(Box::new(HostCallback {
            f,
            failure: failure.clone(),
        }))
        .cast()
    }

    /// The function of a callback the driver never took.
    ///
    /// # Safety
    ///
    /// `data` comes from [`HostCallback::into_data`] and was neither run nor taken back.
    ///
    /// ```
    /// use offload_driver::{HostCallback, HostFailure};
    /// let data = HostCallback::into_data(Box::new(|| ()), &HostFailure::default());
    /// // SAFETY: made just above, never handed to a driver.
    /// let f = unsafe { HostCallback::take_back(data) };
    /// f();
    /// ```
    pub unsafe fn take_back(data: *mut c_void) -> HostFn {
        // SAFETY: the caller's promise: the box is still ours, taken once.
        unsafe { Box::from_raw(data.cast::<HostCallback>()) }.f
    }
}

/// The C callback of every host function (`CUhostFn`, `hipHostFn_t`): runs it once,
/// catching a panic into its queue's [`HostFailure`].
///
/// # Safety
///
/// `data` comes from [`HostCallback::into_data`] and is passed here exactly once (drivers
/// call each host function once).
#[allow(unsafe_code)]
pub unsafe extern "C" fn host_trampoline(data: *mut c_void) {
    // SAFETY: the caller's promise: the box is taken back exactly once, here.
    let callback = unsafe { Box::from_raw(data.cast::<HostCallback>()) };
    let HostCallback { f, failure } = *callback;
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".into());
        failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(format!("the host function panicked: {message}"));
    }
}
