//! Queues are CUDA streams (non-blocking: they never wait for the legacy default stream),
//! events are CUDA events with timing, host functions go through `cuLaunchHostFunc`.
//!
//! Everything a queue enqueues returns once the driver has it (Q1). A queued write's bytes
//! are copied into memory the queue keeps until it knows the stream has passed them (a
//! sync, or an `is_idle` that finds it idle). A host function runs on a driver thread; its
//! panic is caught there and reported by the next `sync` as `Error::Callback`; it must not
//! call offload (CUDA forbids driver calls from a host function).

use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use offload_core::hal::HostFn;
use offload_core::{BackendKind, Dims, Error, KernelArg, Result};

use offload_driver::{HostCallback, HostFailure, host_trampoline};

use crate::context::{Context, driver_error};
use crate::ffi::calls::Word;
use crate::ffi::sys::{CuEvent, CuStream};
use crate::memory::CudaBuffer;
use crate::program::CudaKernel;

/// What a queue's stream owns besides the stream.
#[derive(Default)]
struct Kept {
    /// Bytes of queued writes, until the stream is known to have passed them.
    data: Vec<Vec<u8>>,
}

/// A stream and what it keeps; shared with the buffers and modules whose work it holds.
pub(crate) struct QueueShared {
    context: Arc<Context>,
    stream: CuStream,
    kept: Mutex<Kept>,
    /// A host function's panic, reported by the next sync.
    failure: HostFailure,
}

// SAFETY: the stream handle may be used from any thread (the driver API is thread-safe);
// it is destroyed only in `Drop`, when no other owner is left.
unsafe impl Send for QueueShared {}
// SAFETY: as above; `&QueueShared` only passes the handle to the driver.
unsafe impl Sync for QueueShared {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl QueueShared {
    /// Waits for everything enqueued so far; then drops what the stream kept.
    pub(crate) fn synchronize(&self, call: &'static str) -> Result<()> {
        self.context.bind(call)?;
        // What was enqueued before the sync (the list grows in submission order).
        let passed = lock(&self.kept).data.len();
        // SAFETY: the stream is live (destroyed only in Drop) and of the bound context.
        unsafe { self.context.driver.stream_synchronize(self.stream) }
            .map_err(driver_error(call))?;
        lock(&self.kept).data.drain(..passed);
        Ok(())
    }
}

impl offload_driver::Stream for QueueShared {
    fn synchronize(&self, call: &'static str) -> Result<()> {
        QueueShared::synchronize(self, call)
    }
}

impl Drop for QueueShared {
    fn drop(&mut self) {
        const CALL: &str = "Queue::destroy";
        if self.context.bind(CALL).is_ok() {
            // SAFETY: the stream is live and of the bound context; it is destroyed once,
            // here, after its work (waited for first: the kept bytes go after).
            unsafe {
                let _ = self.context.driver.stream_synchronize(self.stream);
                let _ = self.context.driver.stream_destroy(self.stream);
            }
        }
        self.context.destroyed();
    }
}

/// A CUDA queue: a non-blocking stream.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::Config;
/// let Ok(cuda) = offload_cuda::CudaPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = cuda.devices().remove(0);
/// let queue = dev.queue()?;
/// dev.sync(&queue)?;
/// dev.destroy_queue(queue)?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct CudaQueue {
    pub(crate) shared: Arc<QueueShared>,
}

impl std::fmt::Debug for CudaQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CudaQueue")
    }
}

/// A CUDA event, recorded on a queue.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _};
/// use offload_core::Config;
/// let Ok(cuda) = offload_cuda::CudaPlatform::open(&Config::default()) else { return Ok(()) };
/// let dev = cuda.devices().remove(0);
/// let queue = dev.queue()?;
/// let (a, b) = (dev.record(&queue)?, dev.record(&queue)?);
/// println!("{:?}", dev.elapsed(&a, &b)?);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub struct CudaEvent {
    context: Arc<Context>,
    raw: CuEvent,
}

// SAFETY: as for `QueueShared`: the handle is usable from any thread, destroyed once.
unsafe impl Send for CudaEvent {}
// SAFETY: as above.
unsafe impl Sync for CudaEvent {}

impl std::fmt::Debug for CudaEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CudaEvent")
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if self.context.bind("Event::destroy").is_ok() {
            // SAFETY: the event is live and of the bound context, destroyed once, here;
            // the driver defers the release of an event still pending.
            let _ = unsafe { self.context.driver.event_destroy(self.raw) };
        }
        self.context.destroyed();
    }
}

fn invalid(call: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        call,
        reason: reason.into(),
    }
}

impl CudaQueue {
    /// A non-blocking stream in `context`.
    pub(crate) fn new(context: &Arc<Context>) -> Result<CudaQueue> {
        const CALL: &str = "Device::queue";
        context.bind(CALL)?;
        let stream = context.driver.stream_create().map_err(driver_error(CALL))?;
        context.made();
        Ok(CudaQueue {
            shared: Arc::new(QueueShared {
                context: context.clone(),
                stream,
                kept: Mutex::default(),
                failure: Arc::default(),
            }),
        })
    }

    fn context(&self, call: &'static str, buffers: &[&CudaBuffer]) -> Result<&Arc<Context>> {
        let context = &self.shared.context;
        if buffers.iter().any(|b| !Arc::ptr_eq(b.context(), context)) {
            return Err(invalid(
                call,
                "the cuda buffer is on another device than the queue",
            ));
        }
        context.bind(call)?;
        Ok(context)
    }

    /// Launches `kernel` on the stream.
    pub(crate) fn launch(
        &self,
        kernel: &CudaKernel,
        dims: &Dims,
        args: &[KernelArg<'_, CudaBuffer>],
    ) -> Result<()> {
        const CALL: &str = "Queue::launch";
        let name = &kernel.name;
        if !Arc::ptr_eq(&kernel.module.context, &self.shared.context) {
            return Err(invalid(
                CALL,
                format!("cuda kernel `{name}` is loaded on another device than the queue"),
            ));
        }
        let (mut values, buffers) = offload_driver::pack_args(
            &format!("cuda kernel `{name}`"),
            &kernel.params,
            args,
            CudaBuffer::ptr,
            CudaBuffer::len,
        )?;
        let limits = &self.shared.context.limits;
        let limits = offload_driver::LaunchLimits {
            max_block_threads: limits.max_block_threads,
            max_block: limits.max_block,
            max_grid: limits.max_grid,
            max_shared_memory: limits.max_shared_memory,
            attributes: (
                "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_*",
                "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_*",
            ),
        };
        limits.check(dims, &format!("cuda kernel `{name}`"))?;
        self.context(CALL, &buffers)?;
        if dims.blocks() == 0 {
            return Ok(()); // no blocks: nothing to run
        }
        let mut pointers: Vec<*mut c_void> =
            values.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        // SAFETY: the kernel is live (it holds its module) and of the bound context; one
        // pointer per declared parameter (count and kinds checked above), each to 8 bytes
        // that hold the value (a parameter is at most 8 bytes), alive across the call; every
        // buffer address is a live allocation of this context, kept alive for the launch by
        // the buffer's `uses` (a free first waits for this stream); geometry checked against
        // the device's limits.
        unsafe {
            self.shared.context.driver.launch_kernel(
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
        buffer: &CudaBuffer,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        const CALL: &str = "Queue::write";
        let dst = buffer.at(CALL, offset, data.len())?;
        self.context(CALL, &[buffer])?;
        if data.is_empty() {
            return Ok(());
        }
        let mut kept = lock(&self.shared.kept);
        // SAFETY: the range lies inside the live allocation (checked) of the bound
        // context, kept alive by its `uses`; `data` is kept by the queue until the stream
        // is known to have passed the copy (a sync), and a Vec's heap bytes do not move
        // when the Vec is moved into the list.
        unsafe {
            self.shared
                .context
                .driver
                .memcpy_htod_async(dst, &data, self.shared.stream)
        }
        .map_err(driver_error(CALL))?;
        kept.data.push(data);
        drop(kept);
        buffer.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a fill: `cuMemsetD8/16/32Async` where the pattern repeats into 1, 2 or 4
    /// bytes at an aligned address, a queued write of the expanded pattern otherwise.
    pub(crate) fn enqueue_fill(
        &self,
        buffer: &CudaBuffer,
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
        self.context(CALL, &[buffer])?;
        if len == 0 {
            return Ok(());
        }
        let word = match pattern.len() {
            1 => Some((Word::W8(pattern[0]), 1)),
            2 if dst % 2 == 0 => Some((Word::W16(u16::from_ne_bytes([pattern[0], pattern[1]])), 2)),
            4 if dst % 4 == 0 => Some((
                Word::W32(u32::from_ne_bytes([
                    pattern[0], pattern[1], pattern[2], pattern[3],
                ])),
                4,
            )),
            _ => None,
        };
        let Some((word, size)) = word else {
            let expanded: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
            return self.enqueue_write(buffer, offset, expanded);
        };
        // SAFETY: the range of `len / size` words lies inside the live allocation (checked)
        // of the bound context, kept alive by its `uses`; `dst` is aligned to the word size
        // (checked above).
        unsafe {
            self.shared
                .context
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
        src: &CudaBuffer,
        src_offset: usize,
        dst: &CudaBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Queue::copy";
        let from = src.at(CALL, src_offset, len)?;
        let to = dst.at(CALL, dst_offset, len)?;
        if from.abs_diff(to) < len as u64 && Arc::ptr_eq(&src.alloc, &dst.alloc) {
            return Err(invalid(CALL, "the ranges of one cuda buffer overlap"));
        }
        self.context(CALL, &[src, dst])?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges lie inside live allocations (checked) of the bound context,
        // kept alive by their `uses`, and do not overlap (checked, for one buffer; two
        // buffers are two allocations).
        unsafe {
            self.shared
                .context
                .driver
                .memcpy_dtod_async(to, from, len, self.shared.stream)
        }
        .map_err(driver_error(CALL))?;
        src.uses().add(&self.shared);
        dst.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a host function (`cuLaunchHostFunc`; before CUDA 10, the stream is synced
    /// and `f` runs on the caller's thread).
    pub(crate) fn enqueue_host_fn(&self, f: HostFn) -> Result<()> {
        const CALL: &str = "Queue::enqueue_host_fn";
        self.context(CALL, &[])?;
        let callback = HostCallback::into_data(f, &self.shared.failure);
        // SAFETY: the stream is live and of the bound context; `host_trampoline` takes the box
        // back and runs it once, making no CUDA call itself (the function's own contract,
        // said in the docs, is not to call offload either).
        let launched = unsafe {
            self.shared.context.driver.launch_host_func(
                self.shared.stream,
                host_trampoline,
                callback,
            )
        };
        match launched {
            Some(Ok(())) => Ok(()),
            Some(Err(failure)) => {
                // SAFETY: not handed to the driver: the box is still ours.
                drop(unsafe { HostCallback::take_back(callback) });
                Err(failure.into_error(BackendKind::Cuda, CALL))
            }
            None => {
                // SAFETY: as above.
                let f = unsafe { HostCallback::take_back(callback) };
                self.shared.synchronize(CALL)?;
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
        self.shared.synchronize(CALL)?;
        match lock(&self.shared.failure).take() {
            None => Ok(()),
            Some(failure) => Err(Error::Callback {
                callback: "Queue::enqueue_host_fn",
                source: failure.into(),
            }),
        }
    }

    /// `cuStreamQuery`.
    pub(crate) fn is_idle(&self) -> Result<bool> {
        const CALL: &str = "Queue::is_idle";
        self.context(CALL, &[])?;
        let passed = lock(&self.shared.kept).data.len();
        // SAFETY: the stream is live and of the bound context.
        let idle = unsafe { self.shared.context.driver.stream_query(self.shared.stream) }
            .map_err(driver_error(CALL))?;
        if idle {
            lock(&self.shared.kept).data.drain(..passed);
        }
        Ok(idle)
    }

    /// Records an event after the work enqueued so far.
    pub(crate) fn record(&self) -> Result<CudaEvent> {
        const CALL: &str = "Queue::record";
        let context = self.context(CALL, &[])?;
        let raw = context.driver.event_create().map_err(driver_error(CALL))?;
        context.made();
        let event = CudaEvent {
            context: context.clone(),
            raw,
        };
        // SAFETY: both are live objects of the bound context.
        unsafe { context.driver.event_record(raw, self.shared.stream) }
            .map_err(driver_error(CALL))?;
        Ok(event)
    }

    /// Makes the stream's later work wait for `event`.
    pub(crate) fn wait_event(&self, event: &CudaEvent) -> Result<()> {
        const CALL: &str = "Queue::wait";
        if !Arc::ptr_eq(&event.context, &self.shared.context) {
            return Err(invalid(
                CALL,
                "the cuda event is of another device than the queue",
            ));
        }
        self.context(CALL, &[])?;
        // SAFETY: both are live objects of the bound context.
        unsafe {
            self.shared
                .context
                .driver
                .stream_wait_event(self.shared.stream, event.raw)
        }
        .map_err(driver_error(CALL))
    }
}

impl CudaEvent {
    /// `cuEventSynchronize`.
    pub(crate) fn sync(&self) -> Result<()> {
        const CALL: &str = "Event::sync";
        self.context.bind(CALL)?;
        // SAFETY: the event is live and of the bound context.
        unsafe { self.context.driver.event_synchronize(self.raw) }.map_err(driver_error(CALL))
    }

    /// `cuEventQuery`.
    pub(crate) fn is_complete(&self) -> Result<bool> {
        const CALL: &str = "Event::is_complete";
        self.context.bind(CALL)?;
        // SAFETY: as above.
        unsafe { self.context.driver.event_query(self.raw) }.map_err(driver_error(CALL))
    }

    /// Device time from `start` to `self`, both waited for first.
    pub(crate) fn since(&self, start: &CudaEvent) -> Result<Duration> {
        const CALL: &str = "Event::elapsed_since";
        if !Arc::ptr_eq(&self.context, &start.context) {
            return Err(invalid(CALL, "the cuda events are of different devices"));
        }
        start.sync()?;
        self.sync()?;
        // SAFETY: both are live, completed (waited) events of the bound context.
        let ms = unsafe { self.context.driver.event_elapsed(start.raw, self.raw) }
            .map_err(driver_error(CALL))?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1000.0))
    }
}
