//! The in-order stream under a Level Zero queue ([`QueueShared`]): an asynchronous immediate
//! command list, its pool of events and what it keeps for its pending work; the events of
//! `record` ([`EventInner`]); and [`Uses`], the queues whose queued work uses a buffer, a
//! module or a kernel. Buffers, programs and queues all hold these, so they sit below them;
//! the `hal::Queue` and `hal::Event` impls are queue.rs's.
//!
//! Level Zero runs the commands of a list in no promised order: offload chains them with
//! events. Each queue has a pool of [`POOL`] host-visible events; every command it appends
//! signals one and waits for the one the previous command signalled, so the queue is an
//! in-order stream (Q1: each call returns once appended). When the pool runs out, and at
//! every `sync`, the queue waits for its last event, then resets the events for reuse
//! (nothing pending waits on them any more).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use offload_core::{Error, Result};
use offload_driver::Failure;

use crate::ffi::{self, EventHandle, ListHandle, PoolHandle};
use crate::shared::{DeviceShared, driver_error};

/// The queues whose queued work uses a buffer, a module or a kernel.
pub(crate) type Uses = offload_driver::Uses<QueueShared>;

/// What went wrong on a queue's host-function thread, reported by the next sync: the
/// function's panic (`Error::Callback`) or a failed driver call (`Error::Driver`).
pub(crate) type HostFailure = Arc<Mutex<Option<Error>>>;

/// Events per queue.
const POOL: u32 = 64;

/// What a queue's lock guards.
#[derive(Default)]
pub(crate) struct State {
    /// Events no pending command waits on or signals (reset).
    pub(crate) free: Vec<EventHandle>,
    /// Events appended since the last recycle, in order.
    pub(crate) used: Vec<EventHandle>,
    /// The event the next command waits for.
    pub(crate) last: Option<EventHandle>,
    /// Bytes of queued writes.
    pub(crate) kept: Vec<Vec<u8>>,
    /// Host-function threads not yet joined.
    pub(crate) threads: Vec<JoinHandle<()>>,
    /// Events of `record` and `wait_event` that pending commands signal or wait on.
    pub(crate) held: Vec<Arc<EventInner>>,
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
    pub(crate) device: Arc<DeviceShared>,
    pub(crate) list: ListHandle,
    pool: PoolHandle,
    /// Every event of the pool (destroyed with the queue).
    events: Vec<EventHandle>,
    pub(crate) state: Mutex<State>,
    /// A host function's panic, reported by the next sync.
    pub(crate) failure: HostFailure,
    /// Operations appended so far (`Stream::enqueued`).
    ops: AtomicU64,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `zeEventHostSynchronize`, tried once more when it fails: the frees and destroys that
/// wait for work must not give up (and leak) on one failed call; a driver whose waits keep
/// failing has lost its device, and the second failure is returned.
pub(crate) fn wait_for(
    driver: &ffi::Driver,
    event: EventHandle,
) -> std::result::Result<(), Failure> {
    driver
        .event_wait(event)
        .or_else(|_| driver.event_wait(event))
}

impl QueueShared {
    /// An asynchronous immediate command list and its pool of events on `device`.
    pub(crate) fn new(device: &Arc<DeviceShared>) -> Result<QueueShared> {
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
        Ok(QueueShared {
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
        })
    }

    /// Numbers an operation (under the state's lock, in list order).
    pub(crate) fn count(&self, state: &mut State) -> u64 {
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
    pub(crate) fn with_free(&self, events: usize) -> Result<MutexGuard<'_, State>> {
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
    pub(crate) fn append(
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

/// An event of its own pool (with kernel timestamps), signalled by a barrier; destroyed
/// once that barrier has run.
pub(crate) struct EventInner {
    pub(crate) device: Arc<DeviceShared>,
    pub(crate) pool: PoolHandle,
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
