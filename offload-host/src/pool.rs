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
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use offload_core::Dims;

use crate::lock;
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
///
/// Blocks are taken [`Job::chunk`] at a time, and a participant walks its block indices
/// by counting, not dividing: with blocks of 256 threads, a launch over 2^25 elements has
/// 131,072 blocks, and an atomic and three 64-bit divisions per block cost as much as a
/// fifth of a streaming kernel's time.
pub(crate) struct Job {
    function: KernelFn,
    /// `args[i]` of the kernel ABI: addresses into `values`.
    pointers: Vec<usize>,
    /// Keeps the argument values alive (and at stable addresses) for the job.
    _values: Vec<[u8; 8]>,
    dims: Dims,
    total: u64,
    /// Blocks taken per claim: enough for [`CLAIM_THREADS`] threads, at most an eighth of
    /// a participant's range (so others can still take a share of it), at least one.
    chunk: u64,
    ranges: Vec<Range>,
    finished: Finished,
}

#[repr(align(64))]
struct Finished(AtomicU64);

/// 64 bytes, 64-byte aligned: the unit of a block's shared memory.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// The threads (kernel loop iterations) a participant takes per claim at the least, where
/// the range allows: 16,384, a few microseconds of a streaming kernel.
const CLAIM_THREADS: u64 = 16 << 10;

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
        let per_block = dims.threads_per_block().max(1);
        let chunk = (CLAIM_THREADS / per_block).min(total / parts / 8).max(1);
        Job {
            function,
            pointers: values.iter().map(|v| v.as_ptr() as usize).collect(),
            _values: values,
            dims,
            total,
            chunk,
            ranges,
            finished: Finished(AtomicU64::new(0)),
        }
    }

    /// Runs blocks `first..end` in grid order, with `launch` (whose `shared` is this
    /// thread's scratch) telling each which it is.
    fn run_range(&self, first: u64, end: u64, launch: &mut Launch) {
        let [gx, gy, _] = self.dims.grid.map(u64::from);
        // The quotients fit: each is below its u32 grid dimension.
        let mut id = [
            (first % gx) as u32,
            ((first / gx) % gy) as u32,
            (first / (gx * gy)) as u32,
        ];
        for _ in first..end {
            launch.block_id = id;
            // SAFETY: the kernel ABI (include/offload_host.h): `pointers` holds one valid
            // pointer per declared parameter (the count and kinds were checked against the
            // kernel's `offload_params_` string), each to 8 bytes owned by this job, which
            // outlives the call; `launch` is a valid `offload_launch` whose `shared` points
            // to `shared_size` bytes this thread alone uses during the call. The kernel's
            // code stays mapped: the caller holds the kernel, which holds its library.
            unsafe { (self.function)(self.pointers.as_ptr() as *const *mut c_void, launch) };
            // The next block in grid order: x fastest, then y, then z.
            id[0] += 1;
            if id[0] == self.dims.grid[0] {
                id[0] = 0;
                id[1] += 1;
                if id[1] == self.dims.grid[1] {
                    id[1] = 0;
                    id[2] += 1;
                }
            }
        }
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
        let mut launch = Launch {
            grid: self.dims.grid,
            block: self.dims.block,
            block_id: [0; 3],
            shared_size: self.dims.shared_memory,
            shared: if scratch.is_empty() {
                std::ptr::null_mut()
            } else {
                scratch.as_mut_ptr().cast()
            },
        };
        for k in 0..parts {
            let range = &self.ranges[(me + k) % parts];
            loop {
                let first = range.next.fetch_add(self.chunk, Ordering::Relaxed);
                if first >= range.end {
                    break;
                }
                let end = range.end.min(first + self.chunk);
                self.run_range(first, end, &mut launch);
                ran += end - first;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// A kernel that counts each call in `counts[linear block id]` (argument 0 holds the
    /// counters' address) and marks an id outside the grid in the last counter.
    unsafe extern "C" fn count_blocks(args: *const *mut c_void, launch: *const Launch) {
        // SAFETY: the test passes one argument, the address of `total + 1` counters that
        // outlive the launch; `launch` is the pool's valid launch description.
        unsafe {
            let counts = *(*args as *const *const AtomicU32);
            let l = &*launch;
            let [gx, gy, gz] = l.grid.map(u64::from);
            let [x, y, z] = l.block_id.map(u64::from);
            let index = if x < gx && y < gy && z < gz {
                x + gx * (y + gy * z)
            } else {
                gx * gy * gz
            };
            (*counts.add(index as usize)).fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every block of every grid runs exactly once, with its own id, whatever the chunk
    /// (one block, thousands, a 3-D grid walked by counting).
    #[test]
    fn every_block_runs_once_with_its_own_id() {
        let pool = LazyPool::default();
        let grids = [
            ([1, 1, 1], [1, 1, 1]),
            ([7, 5, 3], [1, 1, 1]),
            ([100_000, 1, 1], [1, 1, 1]),
            ([3, 1_000, 2], [64, 1, 1]),
            ([1, 1, 4_099], [256, 1, 1]),
            ([4_096, 2, 1], [65_536, 1, 1]),
        ];
        for (grid, block) in grids {
            let dims = Dims::grid(grid).block(block);
            let total = dims.blocks() as usize;
            let counts: Vec<AtomicU32> = (0..=total).map(|_| AtomicU32::new(0)).collect();
            let address = counts.as_ptr() as usize;
            pool.run(count_blocks, vec![address.to_ne_bytes()], dims, |_| {});
            let wrong: Vec<_> = counts
                .iter()
                .enumerate()
                .filter(|(i, c)| c.load(Ordering::Relaxed) != u32::from(*i < total))
                .map(|(i, c)| (i, c.load(Ordering::Relaxed)))
                .take(5)
                .collect();
            assert!(wrong.is_empty(), "grid {grid:?}: (block, runs) {wrong:?}");
        }
    }
}
