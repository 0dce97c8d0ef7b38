//! Queues are asynchronous immediate command lists; events order their work; host functions
//! run on threads of the queue.
//!
//! Level Zero runs the commands of a list in no promised order: offload chains them with
//! events. Each queue has a pool of [`POOL`] host-visible events; every command it appends
//! signals one and waits for the one the previous command signalled, so the queue is an
//! in-order stream (Q1: each call returns once appended). When the pool runs out, and at
//! every `sync`, the queue waits for its last event, then resets the events for reuse
//! (nothing pending waits on them any more).
//!
//! - `record` makes an event of its own (a one-event pool with kernel timestamps), signalled
//!   by a barrier after the queue's work so far; `elapsed` reads the two events' timestamps
//!   (`zeEventQueryKernelTimestamp`, ticks of `timerResolution` nanoseconds). An event
//!   waits for its barrier before it is destroyed.
//! - `wait_event` appends a barrier that waits for the queue's last event and the other
//!   queue's event; the queue keeps that event alive until it has passed the barrier.
//! - Host functions: Level Zero has none. `enqueue_host_fn` appends a barrier that signals
//!   event A after the work so far, takes an event B that only the host signals, and makes
//!   B the event the next command waits for; a thread of the queue waits for A
//!   (`zeEventHostSynchronize`), runs `f` (a panic is caught and reported by the next sync
//!   as `Error::Callback`), then signals B (`zeEventHostSignal`). The threads are joined by
//!   `sync` and when the queue is destroyed: none outlives its queue (L2). `f` may enqueue on
//!   its own queue, record events there and free what it used (L6): a sync waits without
//!   the queue's lock, and `f` is marked as running on this queue (`run_marked`), so a free
//!   inside it does not wait for it; only a function that appends more commands than the
//!   queue has free events gets an error (the events come back after it returns).
//! - Queued writes copy their bytes into memory the queue keeps until it knows the list has
//!   passed them (a sync or a recycle).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use offload_core::hal::{self, HostFn};
use offload_core::{BackendKind, Dims, Error, KernelArg, Result};
use offload_driver::{Failure, HostFailure as PanicText};

/// What went wrong on a queue's host-function thread, reported by the next sync: the
/// function's panic (`Error::Callback`) or a failed driver call (`Error::Driver`).
type HostFailure = Arc<Mutex<Option<Error>>>;

use crate::ZeDevice;
use crate::ffi::{EventHandle, ListHandle, PoolHandle};
use crate::memory::ZeBuffer;
use crate::platform::{DeviceShared, driver_error};
use crate::program::ZeKernel;

/// Events per queue.
const POOL: u32 = 64;

/// What a queue's lock guards.
#[derive(Default)]
struct State {
    /// Events no pending command waits on or signals (reset).
    free: Vec<EventHandle>,
    /// Events appended since the last recycle, in order.
    used: Vec<EventHandle>,
    /// The event the next command waits for.
    last: Option<EventHandle>,
    /// Bytes of queued writes.
    kept: Vec<Vec<u8>>,
    /// Host-function threads not yet joined.
    threads: Vec<JoinHandle<()>>,
    /// Events of `record` and `wait_event` that pending commands signal or wait on.
    held: Vec<Arc<EventInner>>,
    /// Changes whenever something is appended or recycled: a drain recycles only if nothing
    /// was appended while it waited.
    epoch: u64,
    /// Drains waiting without the lock: the events they wait on must not be reset under
    /// them, so only the last one out recycles.
    waiters: usize,
}

/// A queue: its command list, its events, and what it keeps; shared with the buffers,
/// modules and kernels whose work it holds.
pub(crate) struct QueueShared {
    device: Arc<DeviceShared>,
    list: ListHandle,
    pool: PoolHandle,
    /// Every event of the pool (destroyed with the queue).
    events: Vec<EventHandle>,
    state: Mutex<State>,
    /// A host function's panic, reported by the next sync.
    failure: HostFailure,
    /// Operations appended so far (`Stream::enqueued`).
    ops: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `zeEventHostSynchronize`, tried once more when it fails: the frees and destroys that
/// wait for work must not give up (and leak) on one failed call; a driver whose waits keep
/// failing has lost its device, and the second failure is returned.
fn wait_for(driver: &crate::ffi::Driver, event: EventHandle) -> std::result::Result<(), Failure> {
    driver
        .event_wait(event)
        .or_else(|_| driver.event_wait(event))
}

impl QueueShared {
    /// Numbers an operation (under the state's lock, in list order).
    fn count(&self, state: &mut State) -> u64 {
        state.epoch += 1;
        self.ops.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Waits for the last command of a snapshot and the barriers of its held events.
    fn wait_all(&self, last: Option<EventHandle>, held: &[Arc<EventInner>]) -> Result<()> {
        let driver = self.device.driver();
        if let Some(last) = last {
            wait_for(driver, last).map_err(driver_error)?;
        }
        // The events of `record`: their barriers come after `last`'s command, but nothing
        // orders them before it; wait for them too, so no pending barrier waits on an event
        // reset by a recycle.
        for event in held {
            wait_for(driver, event.raw).map_err(driver_error)?;
        }
        Ok(())
    }

    /// With everything in `state` run: joins the host-function threads, drops the kept
    /// bytes and resets the used events for reuse.
    fn recycle(&self, state: &mut State) -> Result<()> {
        let driver = self.device.driver();
        state.held.clear();
        for thread in state.threads.drain(..) {
            // Finished: its gate, at or before `last`, was signalled. The function's panic
            // is caught inside the thread (`run_host_fn`).
            let _ = thread.join();
        }
        state.kept.clear();
        state.last = None;
        state.epoch += 1;
        while let Some(&event) = state.used.last() {
            // SAFETY: every command appended so far has run (its last event, and the
            // barriers of the held events, waited for): none waits on or signals it.
            unsafe { driver.event_reset(event) }.map_err(driver_error)?;
            state.used.pop();
            state.free.push(event);
        }
        Ok(())
    }

    /// Waits for everything appended before the call, then recycles if nothing was appended
    /// meanwhile. The lock is not held while waiting: a host function of this queue, which
    /// the wait may be waiting for, may append to it (L6). From inside such a function it
    /// is refused: it would wait for itself.
    fn drain(&self) -> Result<()> {
        if offload_driver::running_host_fn()
            .is_some_and(|(at, _)| at == offload_driver::stream_key(self))
        {
            return Err(Error::invalid(
                "",
                "a host function waits for its own Level Zero queue (more commands appended \
                 from it than the queue has free events?): it would wait for itself",
            ));
        }
        let (last, held, epoch) = {
            let mut state = lock(&self.state);
            state.waiters += 1;
            (state.last, state.held.clone(), state.epoch)
        };
        let waited = self.wait_all(last, &held);
        drop(held);
        let mut state = lock(&self.state);
        state.waiters -= 1;
        waited?;
        if state.epoch == epoch && state.waiters == 0 {
            self.recycle(&mut state)?;
        }
        Ok(())
    }

    /// Locks the state with at least `events` free events, draining as needed.
    fn with_free(&self, events: usize) -> Result<MutexGuard<'_, State>> {
        let mut state = lock(&self.state);
        while state.free.len() < events {
            drop(state);
            self.drain()?;
            state = lock(&self.state);
        }
        Ok(state)
    }

    /// Appends one command through `append(list, signal, waits)`: it signals a fresh event
    /// and waits for the previous command's (and `extra`).
    fn append(
        &self,
        extra: Option<EventHandle>,
        append: impl FnOnce(ListHandle, EventHandle, &[EventHandle]) -> std::result::Result<(), Failure>,
    ) -> Result<()> {
        let mut state = self.with_free(1)?;
        let Some(signal) = state.free.pop() else {
            return Err(driver_error(Failure::new("", 0, "no free event")));
        };
        let waits: Vec<EventHandle> = state.last.into_iter().chain(extra).collect();
        if let Err(failure) = append(self.list, signal, &waits) {
            state.free.push(signal);
            return Err(driver_error(failure));
        }
        state.used.push(signal);
        state.last = Some(signal);
        self.count(&mut state);
        Ok(())
    }
}

impl offload_driver::Stream for QueueShared {
    /// Waits for everything enqueued so far.
    fn synchronize(&self) -> Result<()> {
        self.drain()
    }

    fn enqueued(&self) -> u64 {
        self.ops.load(Ordering::Acquire)
    }
}

impl Drop for QueueShared {
    fn drop(&mut self) {
        let mut state =
            std::mem::take(self.state.get_mut().unwrap_or_else(PoisonError::into_inner));
        // A drain that fails once (a reset refused) is tried again before the queue is
        // given up.
        let settle = |state: &mut State| {
            let held = state.held.clone();
            self.wait_all(state.last, &held)
                .and_then(|()| self.recycle(state))
                .is_ok()
        };
        let drained = settle(&mut state) || settle(&mut state);
        let driver = self.device.driver();
        if drained {
            // SAFETY: the list is live, destroyed once, here, after its work (drained).
            let _ = unsafe { driver.list_destroy(self.list) };
            let mut all = true;
            for &event in &self.events {
                // SAFETY: each event is live, destroyed once; no pending command uses it.
                all &= unsafe { driver.event_destroy(event) }.is_ok();
            }
            if all {
                // SAFETY: the pool is live, destroyed once, its events gone (a pool whose
                // event the driver would not destroy is left to it).
                let _ = unsafe { driver.pool_destroy(self.pool) };
            }
        }
        // A queue whose work cannot be waited for (a lost device) is leaked rather than
        // destroyed under that work.
        self.device.destroyed();
    }
}

/// A Level Zero queue: an asynchronous immediate command list whose commands are chained
/// by events.
///
/// ```
/// use offload_core::hal::{Device as _, Event as _, Platform as _, Queue as _};
/// use offload_core::Config;
/// let Ok(ze) = offload_ze::ZePlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = ze.devices().remove(0);
/// let queue = dev.queue()?;
/// queue.sync()?;
/// queue.destroy()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct ZeQueue {
    pub(crate) shared: Arc<QueueShared>,
}

impl std::fmt::Debug for ZeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZeQueue")
    }
}

/// An event of its own pool (with kernel timestamps), signalled by a barrier; destroyed
/// once that barrier has run.
pub(crate) struct EventInner {
    device: Arc<DeviceShared>,
    pool: PoolHandle,
    pub(crate) raw: EventHandle,
}

impl Drop for EventInner {
    fn drop(&mut self) {
        let driver = self.device.driver();
        // The barrier that signals it must have run before it goes.
        if wait_for(driver, self.raw).is_ok() {
            // SAFETY: live, destroyed once, here; its barrier has run, and the queues that
            // wait on it hold this record until they have passed it.
            unsafe {
                if driver.event_destroy(self.raw).is_ok() {
                    // A drop has no caller: a pool the driver refuses to destroy stays leaked.
                    let _ = driver.pool_destroy(self.pool);
                }
            }
        }
        self.device.destroyed();
    }
}

/// A Level Zero event, recorded on a queue.
///
/// ```
/// use offload_core::hal::{Device as _, Event as _, Platform as _, Queue as _};
/// use offload_core::Config;
/// let Ok(ze) = offload_ze::ZePlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = ze.devices().remove(0);
/// let queue = dev.queue()?;
/// let (a, b) = (queue.record()?, queue.record()?);
/// println!("{:?}", b.elapsed_since(&a)?);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct ZeEvent {
    inner: Arc<EventInner>,
}

impl std::fmt::Debug for ZeEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ZeEvent")
    }
}

/// Runs a host function on its thread: after the work before it (`after`), then lets the
/// work after it go (`gate`). It is operation `number` of the queue at `at`.
fn run_host_fn(
    device: Arc<DeviceShared>,
    (after, gate): (EventHandle, EventHandle),
    (at, number): (usize, u64),
    f: HostFn,
    failure: HostFailure,
) {
    let driver = device.driver();
    let waited = wait_for(driver, after);
    if let Err(e) = waited {
        lock(&failure).get_or_insert(driver_error(e));
    } else {
        let panic = PanicText::default();
        offload_driver::run_marked(at, number, f, &panic);
        if let Some(message) = lock(&panic).take() {
            lock(&failure).get_or_insert(Error::Callback {
                callback: offload_core::hal::HOST_FN_CALLBACK,
                source: message.into(),
            });
        }
    }
    // Whatever happened, the work after it must not wait forever: a failed signal is
    // tried again (a driver that never signals has lost its device, and its waits fail).
    let mut last = None;
    for _ in 0..3 {
        match driver.event_signal(gate) {
            Ok(()) => return,
            Err(e) => last = Some(e),
        }
    }
    if let Some(e) = last {
        lock(&failure).get_or_insert(driver_error(e));
    }
}

impl ZeQueue {
    /// An asynchronous immediate command list and its events on `device`.
    pub(crate) fn new(device: &Arc<DeviceShared>) -> Result<ZeQueue> {
        let driver = device.driver();
        let failed = driver_error;
        let list = driver
            .list_create(device.context(), device.handle, false)
            .map_err(&failed)?;
        let pool = match driver.pool_create(device.context(), device.handle, POOL, false) {
            Ok(pool) => pool,
            Err(e) => {
                // SAFETY: made just above, nothing appended.
                let _ = unsafe { driver.list_destroy(list) };
                return Err(failed(e));
            }
        };
        let mut events = Vec::with_capacity(POOL as usize);
        for index in 0..POOL {
            match driver.event_create(pool, index) {
                Ok(event) => events.push(event),
                Err(e) => {
                    // SAFETY: all made just above, none used.
                    unsafe {
                        let mut all = true;
                        for &event in &events {
                            all &= driver.event_destroy(event).is_ok();
                        }
                        if all {
                            // Cleanup on an error path: the first error is what is returned.
                            let _ = driver.pool_destroy(pool);
                        }
                        // Cleanup on an error path: the first error is what is returned.
                        let _ = driver.list_destroy(list);
                    }
                    return Err(failed(e));
                }
            }
        }
        device.made();
        Ok(ZeQueue {
            shared: Arc::new(QueueShared {
                device: device.clone(),
                list,
                pool,
                state: Mutex::new(State {
                    free: events.iter().rev().copied().collect(),
                    ..State::default()
                }),
                events,
                failure: HostFailure::default(),
                ops: AtomicU64::new(0),
            }),
        })
    }

    fn device(&self) -> &Arc<DeviceShared> {
        &self.shared.device
    }

    /// Checks that `buffers` are on the queue's device.
    fn check(&self, buffers: &[&ZeBuffer]) -> Result<()> {
        if buffers
            .iter()
            .any(|b| !Arc::ptr_eq(b.device(), self.device()))
        {
            return Err(Error::invalid(
                "",
                "the ze buffer is on another device than the queue",
            ));
        }
        Ok(())
    }
}

impl hal::Queue<ZeDevice> for ZeQueue {
    /// Launches `kernel` on the queue: group size `dims.block`, `dims.grid` groups.
    /// Unverified code runs behind it: the caller holds the launch contract.
    unsafe fn launch(
        &self,
        kernel: &ZeKernel,
        dims: &Dims,
        args: &[KernelArg<'_, ZeBuffer>],
    ) -> Result<()> {
        let name = &kernel.name;
        if !Arc::ptr_eq(&kernel.module.device, self.device()) {
            return Err(Error::invalid(
                "",
                format!("ze kernel `{name}` is loaded on another device than the queue"),
            ));
        }
        let kernel_name = format!("ze kernel `{name}`");
        let (values, buffers) = offload_driver::pack_args(
            &kernel_name,
            &kernel.params,
            args,
            ZeBuffer::address,
            ZeBuffer::len,
        )?;
        if dims.shared_memory > 0 {
            return Err(Error::Unsupported {
                backend: BackendKind::Ze,
                call: "",
                reason: "dynamic work-group memory is not offered on Level Zero".into(),
            });
        }
        self.device().limits.check(dims, &kernel_name)?;
        self.check(&buffers)?;
        if dims.blocks() == 0 {
            return Ok(()); // no groups: nothing to run
        }
        let driver = self.device().driver();
        // The kernel's arguments and group size are state of the kernel object: set and
        // appended under its lock (the driver captures them at the append).
        let raw = kernel.lock();
        // SAFETY: the kernel is live (it holds its module) and used by no other thread (its
        // lock); one value per parameter of the parameter's size (count and kinds checked
        // above, from the SPIR-V's reflection); every buffer address is a live allocation
        // of this device, kept alive for the launch by the buffer's `uses` (a free first
        // waits for this queue); geometry checked against the device's limits.
        unsafe {
            driver
                .set_group_size(*raw, dims.block)
                .map_err(driver_error)?;
            for (i, (value, param)) in values.iter().zip(&kernel.params).enumerate() {
                let size = param.scalar_size().unwrap_or(8);
                driver
                    .set_argument(*raw, i as u32, &value[..size])
                    .map_err(driver_error)?;
            }
        }
        self.shared.append(None, |list, signal, waits| {
            // SAFETY: as above; the list is used under the queue's lock.
            unsafe { driver.append_launch(list, *raw, dims.grid, Some(signal), waits) }
        })?;
        drop(raw);
        for b in buffers {
            b.uses().add(&self.shared);
        }
        kernel.uses.add(&self.shared);
        kernel.module.uses.add(&self.shared);
        Ok(())
    }

    /// Queues a copy of `data` into `buffer` at `offset`.
    fn enqueue_write(&self, buffer: &ZeBuffer, offset: usize, data: Vec<u8>) -> Result<()> {
        let dst = buffer.at(offset, data.len())?;
        self.check(&[buffer])?;
        if data.is_empty() {
            return Ok(());
        }
        let driver = self.device().driver();
        let src = data.as_ptr();
        let len = data.len();
        self.shared.append(None, |list, signal, waits| {
            // SAFETY: the range lies inside the live allocation (checked), kept alive by
            // its `uses`; `data` is kept by the queue until the list has passed the copy (a
            // Vec's heap bytes do not move when the Vec is moved into the list).
            unsafe { driver.append_copy(list, dst, src.cast(), len, Some(signal), waits) }
        })?;
        lock(&self.shared.state).kept.push(data);
        buffer.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a fill: `zeCommandListAppendMemoryFill` for a pattern of 1, 2, 4, … 128 bytes,
    /// a queued write of the expanded pattern otherwise.
    fn enqueue_fill(
        &self,
        buffer: &ZeBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        let dst = buffer.at(offset, len)?;
        if pattern.is_empty() || len % pattern.len() != 0 {
            return Err(Error::invalid(
                "",
                format!(
                    "a {}-byte pattern cannot fill {len} bytes exactly",
                    pattern.len()
                ),
            ));
        }
        self.check(&[buffer])?;
        if len == 0 {
            return Ok(());
        }
        if !pattern.len().is_power_of_two() || pattern.len() > 128 {
            let expanded: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
            return self.enqueue_write(buffer, offset, expanded);
        }
        let driver = self.device().driver();
        self.shared.append(None, |list, signal, waits| {
            // SAFETY: the range lies inside the live allocation (checked), kept alive by
            // its `uses`; the driver copies the pattern during the call.
            unsafe { driver.append_fill(list, dst, pattern, len, Some(signal), waits) }
        })?;
        buffer.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a device-to-device copy (ranges of one buffer must not overlap).
    fn enqueue_copy(
        &self,
        src: &ZeBuffer,
        src_offset: usize,
        dst: &ZeBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let from = src.at(src_offset, len)?;
        let to = dst.at(dst_offset, len)?;
        if (from as usize).abs_diff(to as usize) < len {
            return Err(Error::invalid("", "the ranges of one ze buffer overlap"));
        }
        self.check(&[src, dst])?;
        if len == 0 {
            return Ok(());
        }
        let driver = self.device().driver();
        self.shared.append(None, |list, signal, waits| {
            // SAFETY: both ranges lie inside live allocations (checked), kept alive by
            // their `uses`, and do not overlap (checked).
            unsafe { driver.append_copy(list, to, from, len, Some(signal), waits) }
        })?;
        src.uses().add(&self.shared);
        dst.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a host function on a thread of the queue (see the module's docs).
    fn enqueue_host_fn(&self, f: HostFn) -> Result<()> {
        let driver = self.device().driver();
        let shared = &self.shared;
        // Two events: A after the work so far, B the gate the later work waits for.
        let mut state = shared.with_free(2)?;
        let (Some(after), Some(gate)) = (state.free.pop(), state.free.pop()) else {
            return Err(driver_error(Failure::new("", 0, "no free event")));
        };
        let waits: Vec<EventHandle> = state.last.into_iter().collect();
        // SAFETY: the list is used under the queue's lock; the events are live and reset.
        if let Err(e) = unsafe { driver.append_barrier(shared.list, Some(after), &waits) } {
            state.free.extend([gate, after]);
            return Err(driver_error(e));
        }
        state.used.extend([after, gate]);
        let number = shared.count(&mut state);
        let at = offload_driver::stream_key(Arc::as_ptr(shared));
        let device = shared.device.clone();
        let failure = shared.failure.clone();
        let spawned = std::thread::Builder::new()
            .name("offload-ze-host-fn".into())
            .spawn(move || run_host_fn(device, (after, gate), (at, number), f, failure));
        match spawned {
            Ok(thread) => {
                state.threads.push(thread);
                state.last = Some(gate);
                Ok(())
            }
            Err(e) => {
                // The barrier is appended and `after` will be signalled; `gate` never is, so
                // nothing may wait on it: the queue goes on after `after`.
                state.last = Some(after);
                Err(Error::Callback {
                    callback: offload_core::hal::HOST_FN_CALLBACK,
                    source: format!("cannot start the host function's thread: {e}").into(),
                })
            }
        }
    }

    /// Waits for the queue; reports (once) a host function's panic.
    fn sync(&self) -> Result<()> {
        offload_driver::Stream::synchronize(&*self.shared)?;
        match lock(&self.shared.failure).take() {
            None => Ok(()),
            Some(failure) => Err(failure),
        }
    }

    /// Whether the last command appended has run (`zeEventQueryStatus`).
    fn is_idle(&self) -> Result<bool> {
        let state = lock(&self.shared.state);
        let Some(last) = state.last else {
            return Ok(true);
        };
        self.device()
            .driver()
            .event_done(last)
            .map_err(driver_error)
    }

    /// Records an event after the work enqueued so far.
    fn record(&self) -> Result<ZeEvent> {
        let device = self.device();
        let driver = device.driver();
        let failed = driver_error;
        let pool = driver
            .pool_create(device.context(), device.handle, 1, true)
            .map_err(&failed)?;
        let raw = match driver.event_create(pool, 0) {
            Ok(raw) => raw,
            Err(e) => {
                // SAFETY: made just above, no event in it.
                let _ = unsafe { driver.pool_destroy(pool) };
                return Err(failed(e));
            }
        };
        let mut state = lock(&self.shared.state);
        let waits: Vec<EventHandle> = state.last.into_iter().collect();
        // SAFETY: the list is used under the queue's lock; the events are live.
        let appended = unsafe { driver.append_barrier(self.shared.list, Some(raw), &waits) };
        if let Err(e) = appended {
            // SAFETY: made just above; nothing was appended that uses them.
            unsafe {
                if driver.event_destroy(raw).is_ok() {
                    // Cleanup on an error path: the first error is what is returned.
                    let _ = driver.pool_destroy(pool);
                }
            }
            return Err(failed(e));
        }
        device.made();
        let inner = Arc::new(EventInner {
            device: device.clone(),
            pool,
            raw,
        });
        state.held.push(inner.clone());
        self.shared.count(&mut state);
        Ok(ZeEvent { inner })
    }

    /// Makes the queue's later work wait for `event`.
    fn wait_event(&self, event: &ZeEvent) -> Result<()> {
        if !Arc::ptr_eq(&event.inner.device, self.device()) {
            return Err(Error::invalid(
                "",
                "the ze event is of another device than the queue",
            ));
        }
        let driver = self.device().driver();
        self.shared
            .append(Some(event.inner.raw), |list, signal, waits| {
                // SAFETY: the list is used under the queue's lock; the events are live, and
                // the other one stays alive until this queue has passed the barrier (held).
                unsafe { driver.append_barrier(list, Some(signal), waits) }
            })?;
        lock(&self.shared.state).held.push(event.inner.clone());
        Ok(())
    }

    /// Waits for the queue's work, then destroys it (L4).
    fn destroy(self) -> Result<()> {
        let synced = hal::Queue::sync(&self);
        drop(self);
        synced
    }
}

impl hal::Event for ZeEvent {
    /// `zeEventHostSynchronize`.
    fn sync(&self) -> Result<()> {
        let device = &self.inner.device;
        device
            .driver()
            .event_wait(self.inner.raw)
            .map_err(driver_error)
    }

    /// `zeEventQueryStatus`.
    fn is_complete(&self) -> Result<bool> {
        let device = &self.inner.device;
        device
            .driver()
            .event_done(self.inner.raw)
            .map_err(driver_error)
    }

    /// Device time from `start` to `self`, both waited for first: the difference of their
    /// global end timestamps.
    fn elapsed_since(&self, start: &ZeEvent) -> Result<Duration> {
        let device = &self.inner.device;
        if !Arc::ptr_eq(device, &start.inner.device) {
            return Err(Error::invalid("", "the ze events are of different devices"));
        }
        start.sync()?;
        self.sync()?;
        let driver = device.driver();
        let failed = driver_error;
        let [_, begin] = driver.event_timestamps(start.inner.raw).map_err(&failed)?;
        let [_, end] = driver.event_timestamps(self.inner.raw).map_err(&failed)?;
        let ticks = end.saturating_sub(begin);
        Ok(Duration::from_nanos(ticks.saturating_mul(device.timer_ns)))
    }

    /// Drops the event (it waits for its barrier first: `EventInner`'s drop).
    fn destroy(self) -> Result<()> {
        drop(self);
        Ok(())
    }
}
