//! Where the vendor backends run host functions (L6): never on a driver's own thread.
//!
//! CUDA and HIP call a host function on a thread of the driver, where the driver forbids
//! its own API (`cuLaunchHostFunc`: "must not make any CUDA API calls"), so user code there
//! could neither enqueue, free nor tear down. The C callback ([`host_trampoline`]) therefore
//! only hands the function to a thread of the queue ([`HostThread`]) and waits for it to
//! return: the stream still waits for the function (its later work runs after it), and the
//! function runs where every offload call is allowed. Level Zero, which has no host
//! functions, runs them on its own threads the same way ([`run_marked`]).
//!
//! While a function runs, its thread is marked with its stream and its number there
//! ([`running_host_fn`]): a free or unload inside it does not wait for its own stream (that would
//! wait for itself; `Uses::wait`).

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use offload_core::hal::{HostFn, panic_text};

/// Where a queue's host-function panics go: the first is kept for the next sync.
pub type HostFailure = Arc<Mutex<Option<String>>>;

thread_local! {
    /// The host function this thread runs: (its stream's address, its number there).
    static RUNNING: Cell<Option<(usize, u64)>> = const { Cell::new(None) };
    /// The [`HostThread`] this thread is (its id), or 0.
    static THREAD_OF: Cell<usize> = const { Cell::new(0) };
}

/// The key that names a stream in [`running_host_fn`] and [`run_marked`]: its address.
///
/// ```
/// let stream = 7u32;
/// assert_eq!(offload_driver::stream_key(&stream), &stream as *const u32 as usize);
/// ```
pub fn stream_key<S>(stream: *const S) -> usize {
    stream.cast::<()>() as usize
}

/// The host function the calling thread is running, if any: its stream's address and its
/// number among the stream's operations ([`crate::Stream::enqueued`]).
///
/// ```
/// use offload_driver::{HostFailure, run_marked, running_host_fn};
/// assert_eq!(running_host_fn(), None);
/// run_marked(0x1000, 7, Box::new(|| assert_eq!(running_host_fn(), Some((0x1000, 7)))),
///            &HostFailure::default());
/// ```
pub fn running_host_fn() -> Option<(usize, u64)> {
    RUNNING.get()
}

/// Runs host function `f`, operation `number` of the stream at `stream`, marking the thread
/// while it runs; a panic is caught into `failure` (the first one is kept).
///
/// ```
/// use offload_driver::{HostFailure, run_marked};
/// let failure = HostFailure::default();
/// run_marked(0x1000, 1, Box::new(|| panic!("boom")), &failure);
/// assert_eq!(failure.lock().unwrap().as_deref(), Some("the host function panicked: boom"));
/// ```
pub fn run_marked(stream: usize, number: u64, f: HostFn, failure: &HostFailure) {
    let outer = RUNNING.replace(Some((stream, number)));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    RUNNING.set(outer);
    if let Err(payload) = caught {
        failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(format!(
                "the host function panicked: {}",
                panic_text(&*payload)
            ));
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The thread of a queue that runs its host functions, started at the first one and
/// joined when this is dropped (no thread outlives its queue, L2).
///
/// ```
/// use offload_driver::{HostCallback, HostFailure, HostThread, host_trampoline};
/// let thread = HostThread::default();
/// let failure = HostFailure::default();
/// let (tx, rx) = std::sync::mpsc::channel();
/// let f = Box::new(move || tx.send(std::thread::current().id()).unwrap());
/// let data = HostCallback::into_data(f, &failure, &thread, 0x1000, 1)?;
/// // SAFETY: `data` was made just above and is run once (here, as a driver would).
/// unsafe { host_trampoline(data) };
/// assert_ne!(rx.recv().unwrap(), std::thread::current().id());
/// drop(thread); // joined
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Default)]
pub struct HostThread {
    started: Mutex<Option<Started>>,
    /// Host functions running now (of every queue that shares the counter).
    busy: Arc<AtomicUsize>,
}

struct Started {
    jobs: mpsc::Sender<Job>,
    thread: offload_thread::Thread,
    id: usize,
}

impl std::fmt::Debug for HostThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let started = self
            .started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        write!(
            f,
            "HostThread({})",
            if started { "started" } else { "idle" }
        )
    }
}

impl HostThread {
    /// A thread that counts its running functions in `busy` (shared by the queues of one
    /// device: what a device-wide synchronisation would wait for).
    ///
    /// ```
    /// use std::sync::{Arc, atomic::AtomicUsize};
    /// let busy = Arc::new(AtomicUsize::new(0));
    /// let thread = offload_driver::HostThread::counting(busy.clone());
    /// assert_eq!(format!("{thread:?}"), "HostThread(idle)");
    /// ```
    pub fn counting(busy: Arc<AtomicUsize>) -> HostThread {
        HostThread {
            started: Mutex::default(),
            busy,
        }
    }

    /// Where jobs go (the thread started if it is not yet), and the thread's id.
    fn jobs(&self) -> offload_core::Result<(mpsc::Sender<Job>, usize, Arc<AtomicUsize>)> {
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = started.as_ref() {
            return Ok((s.jobs.clone(), s.id, self.busy.clone()));
        }
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let (jobs, queue) = mpsc::channel::<Job>();
        // A plain pthread: `std::thread` would pin a `dlclose`d library embedding offload
        // (L2; see offload-thread).
        let thread = offload_thread::spawn("offload-host-fn", move || {
            THREAD_OF.set(id);
            while let Ok(job) = queue.recv() {
                job();
            }
        })
        .map_err(|e| offload_core::Error::Callback {
            callback: offload_core::hal::HOST_FN_CALLBACK,
            source: format!("cannot start the queue's host-function thread: {e}").into(),
        })?;
        *started = Some(Started {
            jobs: jobs.clone(),
            thread,
            id,
        });
        Ok((jobs, id, self.busy.clone()))
    }
}

impl Drop for HostThread {
    fn drop(&mut self) {
        let started = self
            .started
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(Started { jobs, thread, id }) = started {
            drop(jobs); // the thread's loop ends when its queue of jobs is empty
            // Never from the thread itself: it would wait for itself (it ends by itself).
            if THREAD_OF.get() != id {
                thread.join();
            }
        }
    }
}

/// A host function on its way through a driver: the function, where its panic goes, the
/// thread that runs it and its place in its stream. The driver gets it as the `void *` of a
/// C callback ([`host_trampoline`]).
pub struct HostCallback {
    f: HostFn,
    failure: HostFailure,
    jobs: mpsc::Sender<Job>,
    thread: usize,
    busy: Arc<AtomicUsize>,
    stream: usize,
    number: u64,
}

/// Told when a job has finished, even by a job that unwinds.
struct Done(Arc<(Mutex<bool>, Condvar)>);

impl Drop for Done {
    fn drop(&mut self) {
        let (finished, told) = &*self.0;
        *finished.lock().unwrap_or_else(PoisonError::into_inner) = true;
        told.notify_all();
    }
}

#[allow(unsafe_code)]
impl HostCallback {
    /// Boxes `f`, operation `number` of the stream at `stream`, to run on `thread`: the
    /// pointer goes to [`host_trampoline`] once, or back through
    /// [`HostCallback::take_back`] if the driver refused it. Fails only if the thread cannot
    /// be started.
    pub fn into_data(
        f: HostFn,
        failure: &HostFailure,
        thread: &HostThread,
        stream: usize,
        number: u64,
    ) -> offload_core::Result<*mut c_void> {
        let (jobs, thread, busy) = thread.jobs()?;
        Ok(Box::into_raw(Box::new(HostCallback {
            f,
            failure: failure.clone(),
            jobs,
            thread,
            busy,
            stream,
            number,
        }))
        .cast())
    }

    /// The function of a callback the driver never took.
    ///
    /// # Safety
    ///
    /// `data` comes from [`HostCallback::into_data`] and was neither run nor taken back.
    ///
    /// ```
    /// use offload_driver::{HostCallback, HostFailure, HostThread};
    /// let thread = HostThread::default();
    /// let data = HostCallback::into_data(Box::new(|| ()), &HostFailure::default(), &thread, 1, 1)?;
    /// // SAFETY: made just above, never handed to a driver.
    /// let f = unsafe { HostCallback::take_back(data) };
    /// f();
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub unsafe fn take_back(data: *mut c_void) -> HostFn {
        // SAFETY: the caller's promise: the box is still ours, taken once.
        unsafe { Box::from_raw(data.cast::<HostCallback>()) }.f
    }
}

/// The C callback of every host function (`CUhostFn`, `hipHostFn_t`): hands the function to
/// its queue's [`HostThread`] and returns when it has run (its panic caught into its
/// queue's [`HostFailure`]). Called on that thread itself, it runs the function there.
///
/// # Safety
///
/// `data` comes from [`HostCallback::into_data`] and is passed here exactly once (drivers
/// call each host function once).
#[allow(unsafe_code)]
pub unsafe extern "C" fn host_trampoline(data: *mut c_void) {
    // SAFETY: the caller's promise: the box is taken back exactly once, here.
    let callback = unsafe { Box::from_raw(data.cast::<HostCallback>()) };
    let HostCallback {
        f,
        failure,
        jobs,
        thread,
        busy,
        stream,
        number,
    } = *callback;
    // Counted from now until it has run: its stream waits for it meanwhile.
    busy.fetch_add(1, Ordering::AcqRel);
    let job = move || {
        run_marked(stream, number, f, &failure);
        busy.fetch_sub(1, Ordering::AcqRel);
    };
    if THREAD_OF.get() == thread {
        return job();
    }
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let signal = Done(done.clone());
    let sent = jobs.send(Box::new(move || {
        let _signal = signal;
        job();
    }));
    if let Err(mpsc::SendError(job)) = sent {
        // The thread is gone (its queue is being destroyed): run it here rather than never.
        return job();
    }
    let (finished, told) = &*done;
    let mut finished = finished.lock().unwrap_or_else(PoisonError::into_inner);
    while !*finished {
        finished = told.wait(finished).unwrap_or_else(PoisonError::into_inner);
    }
}
