//! A host device's worker threads, which run the blocks of a launch in parallel.
//!
//! Launches are synchronous: `launch` returns when every block has run, so a host queue
//! has no work in flight and `sync` has nothing to wait for. A one-block launch (or one
//! that finds the workers busy with another queue's launch) runs on the caller's thread. A
//! larger one is posted to the workers and the caller takes blocks too; blocks are handed
//! out with one atomic counter. Idle workers spin briefly before they sleep, because a
//! wake-up through the kernel costs 20–75 µs on the VMs this was measured on.
//!
//! Workers start at the first parallel launch and are joined when the device is dropped
//! (runtime shutdown drops devices before it deinitialises the platform).
//!
//! Workers are plain pthreads (`offload-thread`), not `std::thread`s: `std::thread::spawn`
//! registers a thread-local destructor on the *calling* thread (its spawn hooks), and such
//! a destructor pins a `dlclose`d library until that thread exits (L2: a library embedding
//! offload must really unload). The worker body touches no thread-local with a destructor
//! either.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use offload_core::Dims;

use crate::program::{KernelFn, Launch};

/// A contiguous run of block indices, on a cache line of its own so participants taking
/// blocks from different ranges do not contend.
#[repr(align(64))]
struct Range {
    next: AtomicU64,
    end: u64,
}

/// One launch, shared by the caller and the workers.
///
/// The grid is split into one contiguous range per participant (the caller is 0, worker
/// `i` is `i + 1`), so each thread works on the same part of the buffers launch after
/// launch and keeps it in its cache; a participant that finishes its own range takes
/// blocks from the others' (so a worker that wakes late costs nothing but its share).
/// Handing out single blocks from one shared counter instead measured 0.96x on two cores
/// for 1,024 blocks: the blocks, and the cache lines under them, changed cores each launch.
pub(crate) struct Job {
    function: KernelFn,
    /// `args[i]` of the kernel ABI: addresses into `values`.
    pointers: Vec<usize>,
    /// Keeps the argument values alive (and at stable addresses) for the job.
    _values: Vec<[u8; 8]>,
    dims: Dims,
    total: u64,
    ranges: Vec<Range>,
    finished: Finished,
}

#[repr(align(64))]
struct Finished(AtomicU64);

/// 64 bytes, 64-byte aligned: the unit of a block's shared memory.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

impl Job {
    fn new(function: KernelFn, values: Vec<[u8; 8]>, dims: Dims, participants: usize) -> Job {
        let total = dims.blocks();
        let parts = participants.max(1) as u64;
        let ranges = (0..parts)
            .map(|k| Range {
                next: AtomicU64::new(total * k / parts),
                end: total * (k + 1) / parts,
            })
            .collect();
        Job {
            function,
            pointers: values.iter().map(|v| v.as_ptr() as usize).collect(),
            _values: values,
            dims,
            total,
            ranges,
            finished: Finished(AtomicU64::new(0)),
        }
    }

    /// Runs block `index` with `scratch` as its shared memory (at least
    /// `dims.shared_memory` bytes, or empty when that is 0).
    fn run_block(&self, index: u64, scratch: &mut [Line]) {
        let grid = self.dims.grid;
        let (gx, gy) = (u64::from(grid[0]), u64::from(grid[1]));
        let launch = Launch {
            grid,
            block: self.dims.block,
            // The quotients fit: each is below its u32 grid dimension.
            block_id: [
                (index % gx) as u32,
                ((index / gx) % gy) as u32,
                (index / (gx * gy)) as u32,
            ],
            shared_size: self.dims.shared_memory,
            shared: if scratch.is_empty() {
                std::ptr::null_mut()
            } else {
                scratch.as_mut_ptr().cast()
            },
        };
        // SAFETY: the kernel ABI (include/offload_host.h): `pointers` holds one valid
        // pointer per declared parameter (the count and kinds were checked against the
        // kernel's `offload_params_` string), each to 8 bytes owned by this job, which
        // outlives the call; `launch` is a valid `offload_launch` whose `shared` points to
        // `shared_size` bytes this thread alone uses during the call. The kernel's code
        // stays mapped: the caller holds the kernel, which holds its library.
        unsafe { (self.function)(self.pointers.as_ptr() as *const *mut c_void, &launch) };
    }

    /// Runs participant `me`'s range (any index: it is taken modulo the participants),
    /// then whatever is left of the others'. A thread waiting for the launch (a queue's
    /// `sync`) helps this way too.
    pub(crate) fn run_blocks(&self, me: usize) {
        let parts = self.ranges.len();
        let mut ran = 0;
        // This thread's shared memory, reused by every block it runs.
        let lines = (self.dims.shared_memory as usize).div_ceil(64);
        let mut scratch = vec![Line([0; 64]); lines];
        for k in 0..parts {
            let range = &self.ranges[(me + k) % parts];
            loop {
                let index = range.next.fetch_add(1, Ordering::Relaxed);
                if index >= range.end {
                    break;
                }
                self.run_block(index, &mut scratch);
                ran += 1;
            }
        }
        self.finished.0.fetch_add(ran, Ordering::Release);
    }

    fn done(&self) -> bool {
        self.finished.0.load(Ordering::Acquire) >= self.total
    }
}

#[derive(Default)]
struct State {
    job: Option<Arc<Job>>,
    /// Bumped for every posted job, so a worker takes each job once.
    epoch: u64,
    shutdown: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// The epoch, readable without the lock, for spinning workers.
    epoch: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long an idle worker spins before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

fn worker(shared: Arc<Shared>, me: usize) {
    let mut seen = 0u64;
    loop {
        let spin_until = Instant::now() + SPIN;
        while shared.epoch.load(Ordering::Acquire) == seen && Instant::now() < spin_until {
            std::hint::spin_loop();
        }
        let job = {
            let mut state = lock(&shared.state);
            while state.epoch == seen && !state.shutdown {
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.shutdown {
                return;
            }
            seen = state.epoch;
            state.job.clone()
        };
        if let Some(job) = job {
            job.run_blocks(me);
        }
    }
}

/// Starts worker thread number `me` (participant `me`; the caller is 0); `None` if the
/// system refuses.
fn spawn_worker(shared: &Arc<Shared>, me: usize) -> Option<offload_thread::Thread> {
    let shared = shared.clone();
    offload_thread::spawn(&format!("offload-host-{}", me - 1), move || {
        worker(shared, me)
    })
    .ok()
}

/// The workers of one device.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<offload_thread::Thread>,
    /// Held by the launch that is using the workers.
    busy: Mutex<()>,
}

impl Pool {
    fn start(count: usize) -> Pool {
        let shared = Arc::new(Shared::default());
        let workers = (0..count)
            .filter_map(|i| spawn_worker(&shared, i + 1))
            .collect();
        Pool {
            shared,
            workers,
            busy: Mutex::new(()),
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        lock(&self.shared.state).shutdown = true;
        // Only workers wait on it (a notification is a system call).
        if !self.workers.is_empty() {
            self.shared.wake.notify_all();
        }
        for thread in self.workers.drain(..) {
            thread.join();
        }
    }
}

/// A device's pool, started on first use.
#[derive(Default)]
pub(crate) struct LazyPool(Mutex<Option<Arc<Pool>>>);

impl LazyPool {
    /// Workers besides the caller: one fewer than the cores available.
    fn get(&self) -> Option<Arc<Pool>> {
        let mut pool = lock(&self.0);
        if pool.is_none() {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            if cores < 2 {
                return None;
            }
            *pool = Some(Arc::new(Pool::start(cores - 1)));
        }
        pool.clone()
    }

    /// Whether worker threads exist (for tests).
    pub(crate) fn started(&self) -> bool {
        lock(&self.0).is_some()
    }

    /// Runs a launch to completion. A launch of several blocks is shown to `publish`
    /// while it runs (then `None`), so that threads waiting for it can take blocks too.
    pub(crate) fn run(
        &self,
        function: KernelFn,
        values: Vec<[u8; 8]>,
        dims: Dims,
        publish: impl Fn(Option<Arc<Job>>),
    ) {
        let total = dims.blocks();
        if total == 0 {
            return;
        }
        let pool = if total > 1 { self.get() } else { None };
        let Some(pool) = pool else {
            Job::new(function, values, dims, 1).run_blocks(0);
            return;
        };
        let alone = |values| {
            let job = Arc::new(Job::new(function, values, dims, 2));
            publish(Some(job.clone()));
            job.run_blocks(0);
            wait_done(&job);
            publish(None);
        };
        // Another queue's launch has the workers: run this one here rather than wait.
        let Ok(_busy) = pool.busy.try_lock() else {
            alone(values);
            return;
        };
        let job = Arc::new(Job::new(function, values, dims, pool.workers.len() + 1));
        publish(Some(job.clone()));
        {
            let mut state = lock(&pool.shared.state);
            state.job = Some(job.clone());
            state.epoch += 1;
            pool.shared.epoch.store(state.epoch, Ordering::Release);
        }
        pool.shared.wake.notify_all();
        job.run_blocks(0);
        wait_done(&job);
        publish(None);
        lock(&pool.shared.state).job = None;
    }
}

/// Waits until every block of `job` has run (workers or helpers may still be running
/// their last ones); yields, so a helper that lost its core gets it back.
fn wait_done(job: &Job) {
    while !job.done() {
        std::hint::spin_loop();
        std::thread::yield_now();
    }
}
