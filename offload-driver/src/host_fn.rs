//! Where the vendor backends run host functions (L6): never on a driver's own thread, and
//! never while a stream waits for them.
//!
//! CUDA and HIP call a host function launched on a stream on a thread of the driver, where
//! the driver forbids its own API (`cuLaunchHostFunc`: "must not make any CUDA API calls"),
//! and the stream waits for it meanwhile — which blocks module loads and frees anywhere in
//! the context. So the stream-based backend runs host functions on a thread of their queue
//! ([`HostThread`]) behind a gate of its own (`stream_api/queue.rs`); Level Zero, which has no
//! host functions, runs them on its own threads too ([`run_marked`]).
//!
//! While a function runs, its thread is marked with its stream and its number there
//! ([`running_host_fn`]): a free or unload inside it does not wait for its own stream (that would
//! wait for itself; `Uses::wait`).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};

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

/// Work for a [`HostThread`].
pub type Job = Box<dyn FnOnce() + Send>;

/// The thread of a queue that runs its host functions, started at the first one and
/// joined when this is dropped (no thread outlives its queue, L2).
///
/// ```
/// let thread = offload_driver::HostThread::default();
/// assert_eq!(format!("{thread:?}"), "HostThread(idle)");
/// let (tx, rx) = std::sync::mpsc::channel();
/// thread.post(Box::new(move || tx.send(std::thread::current().id()).unwrap()))?;
/// assert_ne!(rx.recv().unwrap(), std::thread::current().id());
/// drop(thread); // joined
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Default)]
pub struct HostThread {
    started: Mutex<Option<Started>>,
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
    /// Runs `job` on the thread (started if it is not yet), after the jobs posted before
    /// it. Fails only if the thread cannot be started.
    pub fn post(&self, job: Job) -> offload_core::Result<()> {
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        if started.is_none() {
            let id = NEXT.fetch_add(1, Ordering::Relaxed);
            let (jobs, queue) = mpsc::channel::<Job>();
            // A plain pthread: `std::thread` would pin a `dlclose`d library embedding
            // offload (L2; see offload-thread).
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
            *started = Some(Started { jobs, thread, id });
        }
        let Some(s) = started.as_ref() else {
            unreachable!("started just above")
        };
        // The receiver lives as long as the thread, which ends only once `jobs` is dropped
        // (in `Drop`): a send cannot fail while `self` is here.
        s.jobs.send(job).map_err(|_| offload_core::Error::Callback {
            callback: offload_core::hal::HOST_FN_CALLBACK,
            source: "the queue's host-function thread has ended".into(),
        })
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
