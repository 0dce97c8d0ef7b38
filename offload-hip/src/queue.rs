//! Queues are HIP streams (`hipStreamCreateWithFlags(hipStreamNonBlocking)`: they never
//! wait for the null stream), events are HIP events with timing, host functions go through
//! `hipLaunchHostFunc`.
//!
//! Everything a queue enqueues returns once the runtime has it (Q1). A queued write's bytes
//! are copied into memory the queue keeps until it knows the stream has passed them (a
//! sync, or an `is_idle` that finds it idle). A host function runs on a runtime thread; its
//! panic is caught there and reported by the next `sync` as `Error::Callback`; it must not
//! call offload (HIP forbids runtime calls from a host function).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use offload_core::hal::HostFn;
use offload_core::{BackendKind, Dims, Error, KernelArg, Result};
use offload_driver::{HostCallback, HostFailure, host_trampoline};

use crate::ffi::{HipEvent as RawEvent, HipStream, Word};
use crate::memory::HipBuffer;
use crate::platform::{DeviceShared, driver_error};
use crate::program::HipKernel;

/// A stream and what it keeps; shared with the buffers whose work it holds.
pub(crate) struct QueueShared {
    device: Arc<DeviceShared>,
    stream: HipStream,
    /// Bytes of queued writes, until the stream is known to have passed them.
    kept: Mutex<Vec<Vec<u8>>>,
    /// A host function's panic, reported by the next sync.
    failure: HostFailure,
}

// SAFETY: the stream handle may be used from any thread (the runtime is thread-safe; the
// device is made current before each call); it is destroyed only in `Drop`, when no other
// owner is left.
unsafe impl Send for QueueShared {}
// SAFETY: as above; `&QueueShared` only passes the handle to the runtime.
unsafe impl Sync for QueueShared {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl offload_driver::Stream for QueueShared {
    /// Waits for everything enqueued so far; then drops what the stream kept.
    fn synchronize(&self, call: &'static str) -> Result<()> {
        self.device.bind(call)?;
        // What was enqueued before the sync (the list grows in submission order).
        let passed = lock(&self.kept).len();
        // SAFETY: the stream is live (destroyed only in Drop).
        unsafe { self.device.driver.stream_synchronize(self.stream) }
            .map_err(driver_error(call))?;
        lock(&self.kept).drain(..passed);
        Ok(())
    }
}

impl Drop for QueueShared {
    fn drop(&mut self) {
        const CALL: &str = "Queue::destroy";
        if self.device.bind(CALL).is_ok() {
            // SAFETY: the stream is live; it is destroyed once, here, after its work
            // (waited for first: the kept bytes go after).
            unsafe {
                let _ = self.device.driver.stream_synchronize(self.stream);
                let _ = self.device.driver.stream_destroy(self.stream);
            }
        }
        self.device.destroyed();
    }
}

/// A HIP queue: a non-blocking stream.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::Config;
/// let Ok(hip) = offload_hip::HipPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = hip.devices().remove(0);
/// let queue = dev.queue()?;
/// dev.sync(&queue)?;
/// dev.destroy_queue(queue)?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct HipQueue {
    pub(crate) shared: Arc<QueueShared>,
}

impl std::fmt::Debug for HipQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HipQueue")
    }
}

/// A HIP event, recorded on a queue.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::Config;
/// let Ok(hip) = offload_hip::HipPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = hip.devices().remove(0);
/// let queue = dev.queue()?;
/// let (a, b) = (dev.record(&queue)?, dev.record(&queue)?);
/// println!("{:?}", dev.elapsed(&a, &b)?);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct HipEvent {
    device: Arc<DeviceShared>,
    raw: RawEvent,
}

// SAFETY: as for `QueueShared`: the handle is usable from any thread, destroyed once.
unsafe impl Send for HipEvent {}
// SAFETY: as above.
unsafe impl Sync for HipEvent {}

impl std::fmt::Debug for HipEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HipEvent")
    }
}

impl Drop for HipEvent {
    fn drop(&mut self) {
        if self.device.bind("Event::destroy").is_ok() {
            // SAFETY: the event is live, destroyed once, here; the runtime defers the
            // release of an event still pending.
            let _ = unsafe { self.device.driver.event_destroy(self.raw) };
        }
        self.device.destroyed();
    }
}

fn invalid(call: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        call,
        reason: reason.into(),
    }
}

impl HipQueue {
    /// A non-blocking stream on `device`.
    pub(crate) fn new(device: &Arc<DeviceShared>) -> Result<HipQueue> {
        const CALL: &str = "Device::queue";
        device.bind(CALL)?;
        let stream = device.driver.stream_create().map_err(driver_error(CALL))?;
        device.made();
        Ok(HipQueue {
            shared: Arc::new(QueueShared {
                device: device.clone(),
                stream,
                kept: Mutex::default(),
                failure: HostFailure::default(),
            }),
        })
    }

    /// Binds the queue's device, after checking that `buffers` are on it.
    fn bind(&self, call: &'static str, buffers: &[&HipBuffer]) -> Result<&Arc<DeviceShared>> {
        let device = &self.shared.device;
        if buffers.iter().any(|b| !Arc::ptr_eq(b.device(), device)) {
            return Err(invalid(
                call,
                "the hip buffer is on another device than the queue",
            ));
        }
        device.bind(call)?;
        Ok(device)
    }

    /// Launches `kernel` on the stream.
    pub(crate) fn launch(
        &self,
        kernel: &HipKernel,
        dims: &Dims,
        args: &[KernelArg<'_, HipBuffer>],
    ) -> Result<()> {
        const CALL: &str = "Queue::launch";
        let name = &kernel.name;
        if !Arc::ptr_eq(&kernel.module.device, &self.shared.device) {
            return Err(invalid(
                CALL,
                format!("hip kernel `{name}` is loaded on another device than the queue"),
            ));
        }
        let kernel_name = format!("hip kernel `{name}`");
        let (mut values, buffers) = offload_driver::pack_args(
            &kernel_name,
            &kernel.params,
            args,
            HipBuffer::address,
            HipBuffer::len,
        )?;
        self.shared.device.limits.check(dims, &kernel_name)?;
        let device = self.bind(CALL, &buffers)?;
        if dims.blocks() == 0 {
            return Ok(()); // no blocks: nothing to run
        }
        let mut pointers: Vec<*mut std::ffi::c_void> =
            values.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        // SAFETY: the kernel is live (it holds its module) and of the bound device; one
        // pointer per explicit parameter (count and kinds checked above, from the code
        // object's metadata), each to 8 bytes that hold the value (a parameter is at most 8
        // bytes), alive across the call; every buffer address is a live allocation of this
        // device, kept alive for the launch by the buffer's `uses` (a free first waits for
        // this stream); geometry checked against the device's limits.
        unsafe {
            device.driver.launch_kernel(
                kernel.function,
                dims.grid,
                dims.block,
                dims.shared_memory,
                self.shared.stream,
                &mut pointers,
            )
        }
        .map_err(driver_error(CALL))?;
        for b in buffers {
            b.uses().add(&self.shared);
        }
        kernel.module.uses.add(&self.shared);
        Ok(())
    }

    /// Queues a copy of `data` into `buffer` at `offset`.
    pub(crate) fn enqueue_write(
        &self,
        buffer: &HipBuffer,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        const CALL: &str = "Queue::write";
        let dst = buffer.at(CALL, offset, data.len())?;
        let device = self.bind(CALL, &[buffer])?;
        if data.is_empty() {
            return Ok(());
        }
        let mut kept = lock(&self.shared.kept);
        // SAFETY: the range lies inside the live allocation (checked), kept alive by its
        // `uses`; `data` is kept by the queue until the stream is known to have passed the
        // copy, and a Vec's heap bytes do not move when the Vec is moved into the list.
        unsafe {
            device
                .driver
                .memcpy_htod_async(dst, &data, self.shared.stream)
        }
        .map_err(driver_error(CALL))?;
        kept.push(data);
        drop(kept);
        buffer.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a fill: `hipMemsetAsync`/`D16`/`D32` where the pattern repeats into 1, 2 or 4
    /// bytes at an aligned address, a queued write of the expanded pattern otherwise.
    pub(crate) fn enqueue_fill(
        &self,
        buffer: &HipBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        const CALL: &str = "Queue::fill";
        let dst = buffer.at(CALL, offset, len)?;
        if pattern.is_empty() || len % pattern.len() != 0 {
            return Err(invalid(
                CALL,
                format!(
                    "a {}-byte pattern cannot fill {len} bytes exactly",
                    pattern.len()
                ),
            ));
        }
        let device = self.bind(CALL, &[buffer])?;
        if len == 0 {
            return Ok(());
        }
        let address = dst as usize;
        let word = match *pattern {
            [b] => Some((Word::W8(b), 1)),
            [a, b] if address % 2 == 0 => Some((Word::W16(u16::from_ne_bytes([a, b])), 2)),
            [a, b, c, d] if address % 4 == 0 => {
                Some((Word::W32(u32::from_ne_bytes([a, b, c, d])), 4))
            }
            _ => None,
        };
        let Some((word, size)) = word else {
            let expanded: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
            return self.enqueue_write(buffer, offset, expanded);
        };
        // SAFETY: the range of `len / size` words lies inside the live allocation (checked),
        // kept alive by its `uses`; `dst` is aligned to the word size (checked above).
        unsafe {
            device
                .driver
                .memset_async(dst, word, len / size, self.shared.stream)
        }
        .map_err(driver_error(CALL))?;
        buffer.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a device-to-device copy (ranges of one buffer must not overlap).
    pub(crate) fn enqueue_copy(
        &self,
        src: &HipBuffer,
        src_offset: usize,
        dst: &HipBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Queue::copy";
        let from = src.at(CALL, src_offset, len)?;
        let to = dst.at(CALL, dst_offset, len)?;
        if (from as usize).abs_diff(to as usize) < len {
            return Err(invalid(CALL, "the ranges of one hip buffer overlap"));
        }
        let device = self.bind(CALL, &[src, dst])?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges lie inside live allocations (checked), kept alive by their
        // `uses`, and do not overlap (checked, for one buffer; two buffers are two
        // allocations).
        unsafe {
            device
                .driver
                .memcpy_dtod_async(to, from, len, self.shared.stream)
        }
        .map_err(driver_error(CALL))?;
        src.uses().add(&self.shared);
        dst.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a host function (`hipLaunchHostFunc`; where the runtime lacks it, the stream
    /// is synced and `f` runs on the caller's thread).
    pub(crate) fn enqueue_host_fn(&self, f: HostFn) -> Result<()> {
        const CALL: &str = "Queue::enqueue_host_fn";
        let device = self.bind(CALL, &[])?;
        let callback = HostCallback::into_data(f, &self.shared.failure);
        // SAFETY: the stream is live; `host_trampoline` takes the box back and runs it once,
        // making no HIP call itself (the function's own contract, said in the docs, is not
        // to call offload either).
        let launched = unsafe {
            device
                .driver
                .launch_host_func(self.shared.stream, host_trampoline, callback)
        };
        match launched {
            Some(Ok(())) => Ok(()),
            Some(Err(failure)) => {
                // SAFETY: not handed to the runtime: the box is still ours.
                drop(unsafe { HostCallback::take_back(callback) });
                Err(failure.into_error(BackendKind::Hip, CALL))
            }
            None => {
                // SAFETY: as above.
                let f = unsafe { HostCallback::take_back(callback) };
                offload_driver::Stream::synchronize(&*self.shared, CALL)?;
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| {
                    Error::Callback {
                        callback: CALL,
                        source: "the host function panicked".into(),
                    }
                })
            }
        }
    }

    /// Waits for the stream; reports (once) a host function's panic.
    pub(crate) fn sync(&self) -> Result<()> {
        const CALL: &str = "Queue::sync";
        offload_driver::Stream::synchronize(&*self.shared, CALL)?;
        match lock(&self.shared.failure).take() {
            None => Ok(()),
            Some(failure) => Err(Error::Callback {
                callback: "Queue::enqueue_host_fn",
                source: failure.into(),
            }),
        }
    }

    /// `hipStreamQuery`.
    pub(crate) fn is_idle(&self) -> Result<bool> {
        const CALL: &str = "Queue::is_idle";
        let device = self.bind(CALL, &[])?;
        let passed = lock(&self.shared.kept).len();
        // SAFETY: the stream is live.
        let idle = unsafe { device.driver.stream_query(self.shared.stream) }
            .map_err(driver_error(CALL))?;
        if idle {
            lock(&self.shared.kept).drain(..passed);
        }
        Ok(idle)
    }

    /// Records an event after the work enqueued so far.
    pub(crate) fn record(&self) -> Result<HipEvent> {
        const CALL: &str = "Queue::record";
        let device = self.bind(CALL, &[])?;
        let raw = device.driver.event_create().map_err(driver_error(CALL))?;
        device.made();
        let event = HipEvent {
            device: device.clone(),
            raw,
        };
        // SAFETY: both are live objects of the bound device.
        unsafe { device.driver.event_record(raw, self.shared.stream) }
            .map_err(driver_error(CALL))?;
        Ok(event)
    }

    /// Makes the stream's later work wait for `event`.
    pub(crate) fn wait_event(&self, event: &HipEvent) -> Result<()> {
        const CALL: &str = "Queue::wait";
        if !Arc::ptr_eq(&event.device, &self.shared.device) {
            return Err(invalid(
                CALL,
                "the hip event is of another device than the queue",
            ));
        }
        let device = self.bind(CALL, &[])?;
        // SAFETY: both are live objects of the bound device.
        unsafe {
            device
                .driver
                .stream_wait_event(self.shared.stream, event.raw)
        }
        .map_err(driver_error(CALL))
    }
}

impl HipEvent {
    /// `hipEventSynchronize`.
    pub(crate) fn sync(&self) -> Result<()> {
        const CALL: &str = "Event::sync";
        self.device.bind(CALL)?;
        // SAFETY: the event is live.
        unsafe { self.device.driver.event_synchronize(self.raw) }.map_err(driver_error(CALL))
    }

    /// `hipEventQuery`.
    pub(crate) fn is_complete(&self) -> Result<bool> {
        const CALL: &str = "Event::is_complete";
        self.device.bind(CALL)?;
        // SAFETY: as above.
        unsafe { self.device.driver.event_query(self.raw) }.map_err(driver_error(CALL))
    }

    /// Device time from `start` to `self`, both waited for first.
    pub(crate) fn since(&self, start: &HipEvent) -> Result<Duration> {
        const CALL: &str = "Event::elapsed_since";
        if !Arc::ptr_eq(&self.device, &start.device) {
            return Err(invalid(CALL, "the hip events are of different devices"));
        }
        start.sync()?;
        self.sync()?;
        // SAFETY: both are live, completed (waited) events.
        let ms = unsafe { self.device.driver.event_elapsed(start.raw, self.raw) }
            .map_err(driver_error(CALL))?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1000.0))
    }
}
