//! Level Zero queues and events ([`ZeQueue`], [`ZeEvent`]) and their `hal::Queue` and
//! `hal::Event` impls: launches, queued copies and fills, events and host functions, each
//! appended to the queue's in-order stream of commands chained by events (the stream, its
//! event pool and its recycling are stream.rs's).
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

use std::sync::Arc;
use std::time::Duration;

use offload_core::hal::{self, HostFn};
use offload_core::{BackendKind, Dims, Error, KernelArg, Result};
use offload_driver::{Failure, HostFailure as PanicText};

use crate::ffi::EventHandle;
use crate::memory::ZeBuffer;
use crate::program::ZeKernel;
use crate::shared::{DeviceShared, ZeDevice, driver_error};
use crate::stream::{EventInner, HostFailure, QueueShared, lock, wait_for};

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
        Ok(ZeQueue {
            shared: Arc::new(QueueShared::new(device)?),
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
        offload_core::hal::check_fill(len, pattern)?;
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
