//! Queues of a stream-based vendor API are its streams (non-blocking: they never wait for
//! the legacy default stream), events are its events with timing, host functions go
//! through its host-function launch ([`StreamQueue`], [`StreamEvent`]).
//!
//! Everything a queue enqueues returns once the vendor has it (Q1). A queued write's bytes
//! are copied into memory the queue keeps until it knows the stream has passed them (a
//! sync, or an `is_idle` that finds it idle). A host function runs on the queue's own thread,
//! the vendor's callback waiting for it (`HostThread`: CUDA and HIP forbid their calls on
//! the vendor's thread, and a host function may call offload, L6); its panic is caught
//! there and reported by the next `sync` as `Error::Callback`.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use offload_core::hal::{self, HostFn};
use offload_core::{Dims, Error, KernelArg, Result};

use super::device::{DeviceCore, StreamDevice};
use super::{StreamApi, StreamBuffer, StreamKernel, Word, driver_error};
use crate::{HostCallback, HostFailure, HostThread, host_trampoline};

/// The bytes of queued writes in submission order, numbered, so that two threads syncing
/// the stream at once each drop only what was enqueued before their own wait (a drain by
/// position dropped bytes still in flight, or panicked, when another sync had drained
/// first: found when teardown began to sync on a helper thread, L6).
#[derive(Default)]
pub(crate) struct Kept {
    /// The number of the first entry of `bytes`.
    first: u64,
    bytes: std::collections::VecDeque<Vec<u8>>,
}

impl Kept {
    /// The number the next pushed entry gets: what a wait that starts now covers.
    fn end(&self) -> u64 {
        self.first + self.bytes.len() as u64
    }

    fn push(&mut self, data: Vec<u8>) {
        self.bytes.push_back(data);
    }

    /// Drops the entries numbered below `end` that are still here.
    fn release_before(&mut self, end: u64) {
        while self.first < end && self.bytes.pop_front().is_some() {
            self.first += 1;
        }
    }
}

/// A stream and what it keeps; shared with the buffers and modules whose work it holds.
pub(crate) struct QueueShared<A: StreamApi> {
    core: Arc<DeviceCore<A>>,
    stream: A::Stream,
    /// Bytes of queued writes, until the stream is known to have passed them.
    kept: Mutex<Kept>,
    /// A host function's panic, reported by the next sync.
    failure: HostFailure,
    /// Operations enqueued so far (`Stream::enqueued`).
    ops: AtomicU64,
    /// Where its host functions run; joined after the stream is destroyed.
    host: HostThread,
}

impl<A: StreamApi> QueueShared<A> {
    /// Numbers an operation the vendor has taken.
    fn count(&self) -> u64 {
        self.ops.fetch_add(1, Ordering::AcqRel) + 1
    }
}

// SAFETY: the stream handle may be used from any thread (`StreamApi`'s contract: the
// vendor API is thread-safe); it is destroyed only in `Drop`, when no other owner is left.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Send for QueueShared<A> {}
// SAFETY: as above; `&QueueShared` only passes the handle to the vendor.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Sync for QueueShared<A> {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<A: StreamApi> crate::Stream for QueueShared<A> {
    /// Waits for everything enqueued so far; then drops what the stream kept.
    #[allow(unsafe_code)]
    fn synchronize(&self) -> Result<()> {
        self.core.bind()?;
        self.core.settle();
        // What was enqueued before the sync (the list grows in submission order).
        let passed = lock(&self.kept).end();
        // SAFETY: the stream is live (destroyed only in Drop) and of the bound device.
        unsafe { self.core.api().stream_synchronize(Some(self.stream)) }
            .map_err(driver_error::<A>)?;
        lock(&self.kept).release_before(passed);
        Ok(())
    }

    fn enqueued(&self) -> u64 {
        self.ops.load(Ordering::Acquire)
    }
}

impl<A: StreamApi> Drop for QueueShared<A> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.core.bind_to_release().is_ok() {
            let api = self.core.api();
            // SAFETY: the stream is live and of the bound device; it is destroyed once,
            // here, after its work (waited for first: the kept bytes go after).
            unsafe {
                let _ = api.stream_synchronize(Some(self.stream));
                let _ = api.stream_destroy(self.stream);
            }
        }
        self.core.destroyed();
    }
}

/// A queue of a stream-based vendor backend: a non-blocking stream (`CudaQueue`,
/// `HipQueue`).
///
/// ```
/// fn show<A: offload_driver::StreamApi>(q: &offload_driver::StreamQueue<A>) -> String {
///     format!("{q:?}")
/// }
/// ```
pub struct StreamQueue<A: StreamApi> {
    pub(crate) shared: Arc<QueueShared<A>>,
}

impl<A: StreamApi> std::fmt::Debug for StreamQueue<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}Queue", A::WORDS.prefix)
    }
}

/// An event of a stream-based vendor backend, recorded on a queue (`CudaEvent`,
/// `HipEvent`).
///
/// ```
/// fn show<A: offload_driver::StreamApi>(e: &offload_driver::StreamEvent<A>) -> String {
///     format!("{e:?}")
/// }
/// ```
pub struct StreamEvent<A: StreamApi> {
    core: Arc<DeviceCore<A>>,
    raw: A::Event,
}

// SAFETY: as for `QueueShared`: the handle is usable from any thread, destroyed once.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Send for StreamEvent<A> {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Sync for StreamEvent<A> {}

impl<A: StreamApi> std::fmt::Debug for StreamEvent<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}Event", A::WORDS.prefix)
    }
}

impl<A: StreamApi> Drop for StreamEvent<A> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.core.bind_to_release().is_ok() {
            // SAFETY: the event is live and of the bound device, destroyed once, here; the
            // vendor defers the release of an event still pending.
            let _ = unsafe { self.core.api().event_destroy(self.raw) };
        }
        self.core.destroyed();
    }
}

impl<A: StreamApi> StreamQueue<A> {
    /// A non-blocking stream on `core`'s device.
    pub(crate) fn new(core: &Arc<DeviceCore<A>>) -> Result<StreamQueue<A>> {
        core.bind()?;
        let stream = core.api().stream_create().map_err(driver_error::<A>)?;
        core.made();
        Ok(StreamQueue {
            shared: Arc::new(QueueShared {
                core: core.clone(),
                stream,
                kept: Mutex::default(),
                failure: HostFailure::default(),
                ops: AtomicU64::new(0),
                host: HostThread::counting(core.host_fns.clone()),
            }),
        })
    }

    /// Binds the queue's device, after checking that `buffers` are on it.
    fn bind(&self, buffers: &[&StreamBuffer<A>]) -> Result<&A> {
        let core = &self.shared.core;
        if buffers.iter().any(|b| !Arc::ptr_eq(b.core(), core)) {
            return Err(Error::invalid(
                "",
                format!(
                    "the {} buffer is on another device than the queue",
                    A::WORDS.name
                ),
            ));
        }
        core.bind()?;
        Ok(core.api())
    }

    fn synchronize(&self) -> Result<()> {
        crate::Stream::synchronize(&*self.shared)
    }
}

impl<A: StreamApi> hal::Queue<StreamDevice<A>> for StreamQueue<A> {
    /// Launches `kernel` on the stream. Unverified code runs behind it: the caller holds
    /// the launch contract.
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        kernel: &StreamKernel<A>,
        dims: &Dims,
        args: &[KernelArg<'_, StreamBuffer<A>>],
    ) -> Result<()> {
        let name = &kernel.name;
        if !Arc::ptr_eq(&kernel.module.core, &self.shared.core) {
            return Err(Error::invalid(
                "",
                format!(
                    "{} kernel `{name}` is loaded on another device than the queue",
                    A::WORDS.name
                ),
            ));
        }
        let kernel_name = format!("{} kernel `{name}`", A::WORDS.name);
        let (mut values, buffers) = crate::pack_args(
            &kernel_name,
            &kernel.params,
            args,
            StreamBuffer::ptr,
            StreamBuffer::len,
        )?;
        self.shared.core.limits().check(dims, &kernel_name)?;
        let api = self.bind(&buffers)?;
        if dims.blocks() == 0 {
            return Ok(()); // no blocks: nothing to run
        }
        let mut pointers: Vec<*mut c_void> =
            values.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        // SAFETY: the kernel is live (it holds its module) and of the bound device; one
        // pointer per declared parameter (count and kinds checked above against the
        // image's, `StreamApi::kernel_params`), each to 8 bytes that hold the value (a
        // parameter is at most 8 bytes), alive across the call; every buffer address is a
        // live allocation of this device, kept alive for the launch by the buffer's `uses`
        // (a free first waits for this stream); geometry checked against the device's
        // limits.
        unsafe {
            api.launch_kernel(
                kernel.function,
                dims.grid,
                dims.block,
                dims.shared_memory,
                self.shared.stream,
                &mut pointers,
            )
        }
        .map_err(driver_error::<A>)?;
        self.shared.count();
        for b in buffers {
            b.uses().add(&self.shared);
        }
        kernel.module.uses.add(&self.shared);
        Ok(())
    }

    /// Queues a copy of `data` into `buffer` at `offset`.
    #[allow(unsafe_code)]
    fn enqueue_write(&self, buffer: &StreamBuffer<A>, offset: usize, data: Vec<u8>) -> Result<()> {
        let dst = buffer.at(offset, data.len())?;
        let api = self.bind(&[buffer])?;
        if data.is_empty() {
            return Ok(());
        }
        let mut kept = lock(&self.shared.kept);
        // SAFETY: the range lies inside the live allocation (checked) of the bound device,
        // kept alive by its `uses`; `data` is kept by the queue until the stream is known
        // to have passed the copy (a sync), and a Vec's heap bytes do not move when the
        // Vec is moved into the list.
        unsafe { api.memcpy_htod_async(dst, &data, self.shared.stream) }
            .map_err(driver_error::<A>)?;
        self.shared.count();
        kept.push(data);
        drop(kept);
        buffer.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a fill: the vendor's 8-, 16- or 32-bit fill where the pattern repeats into
    /// 1, 2 or 4 bytes at an aligned address, a queued write of the expanded pattern
    /// otherwise.
    #[allow(unsafe_code)]
    fn enqueue_fill(
        &self,
        buffer: &StreamBuffer<A>,
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
        let api = self.bind(&[buffer])?;
        if len == 0 {
            return Ok(());
        }
        let word = match *pattern {
            [b] => Some((Word::W8(b), 1)),
            [a, b] if dst % 2 == 0 => Some((Word::W16(u16::from_ne_bytes([a, b])), 2)),
            [a, b, c, d] if dst % 4 == 0 => Some((Word::W32(u32::from_ne_bytes([a, b, c, d])), 4)),
            _ => None,
        };
        let Some((word, size)) = word else {
            let expanded: Vec<u8> = pattern.iter().copied().cycle().take(len).collect();
            return self.enqueue_write(buffer, offset, expanded);
        };
        // SAFETY: the range of `len / size` words lies inside the live allocation (checked)
        // of the bound device, kept alive by its `uses`; `dst` is aligned to the word size
        // (checked above).
        unsafe { api.memset_async(dst, word, len / size, self.shared.stream) }
            .map_err(driver_error::<A>)?;
        self.shared.count();
        buffer.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a device-to-device copy (ranges of one buffer must not overlap).
    #[allow(unsafe_code)]
    fn enqueue_copy(
        &self,
        src: &StreamBuffer<A>,
        src_offset: usize,
        dst: &StreamBuffer<A>,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let from = src.at(src_offset, len)?;
        let to = dst.at(dst_offset, len)?;
        if from.abs_diff(to) < len as u64 && Arc::ptr_eq(&src.alloc, &dst.alloc) {
            return Err(Error::invalid(
                "",
                format!("the ranges of one {} buffer overlap", A::WORDS.name),
            ));
        }
        let api = self.bind(&[src, dst])?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges lie inside live allocations (checked) of the bound device,
        // kept alive by their `uses`, and do not overlap (checked, for one buffer; two
        // buffers are two allocations).
        unsafe { api.memcpy_dtod_async(to, from, len, self.shared.stream) }
            .map_err(driver_error::<A>)?;
        self.shared.count();
        src.uses().add(&self.shared);
        dst.uses().add(&self.shared);
        Ok(())
    }

    /// Queues a host function, run on the queue's thread (where the vendor lacks the
    /// launch, the stream is synced and `f` runs on the caller's thread).
    #[allow(unsafe_code)]
    fn enqueue_host_fn(&self, f: HostFn) -> Result<()> {
        let api = self.bind(&[])?;
        let shared = &self.shared;
        // Numbered before the launch: the function may run before the launch returns.
        let number = shared.count();
        let at = crate::stream_key(Arc::as_ptr(shared));
        let callback = HostCallback::into_data(f, &shared.failure, &shared.host, at, number)?;
        // SAFETY: the stream is live and of the bound device; `host_trampoline` takes the
        // box back and runs it once, on the queue's thread, making no vendor call on the
        // vendor's thread itself.
        let launched = unsafe { api.launch_host_func(shared.stream, host_trampoline, callback) };
        match launched {
            Some(Ok(())) => Ok(()),
            Some(Err(failure)) => {
                // SAFETY: not handed to the vendor: the box is still ours.
                drop(unsafe { HostCallback::take_back(callback) });
                Err(driver_error::<A>(failure))
            }
            None => {
                // SAFETY: as above.
                let f = unsafe { HostCallback::take_back(callback) };
                self.synchronize()?;
                // Its own panic only: an earlier function's stays for the next sync.
                let failure = HostFailure::default();
                crate::run_marked(at, number, f, &failure);
                match lock(&failure).take() {
                    None => Ok(()),
                    Some(failure) => Err(Error::Callback {
                        callback: offload_core::hal::HOST_FN_CALLBACK,
                        source: failure.into(),
                    }),
                }
            }
        }
    }

    /// Waits for the stream; reports (once) a host function's panic.
    fn sync(&self) -> Result<()> {
        self.synchronize()?;
        match lock(&self.shared.failure).take() {
            None => Ok(()),
            Some(failure) => Err(Error::Callback {
                callback: offload_core::hal::HOST_FN_CALLBACK,
                source: failure.into(),
            }),
        }
    }

    /// Whether the stream is idle (`cuStreamQuery`, `hipStreamQuery`).
    #[allow(unsafe_code)]
    fn is_idle(&self) -> Result<bool> {
        let api = self.bind(&[])?;
        let passed = lock(&self.shared.kept).end();
        // SAFETY: the stream is live and of the bound device.
        let idle = unsafe { api.stream_query(self.shared.stream) }.map_err(driver_error::<A>)?;
        if idle {
            lock(&self.shared.kept).release_before(passed);
        }
        Ok(idle)
    }

    /// Records an event after the work enqueued so far.
    #[allow(unsafe_code)]
    fn record(&self) -> Result<StreamEvent<A>> {
        let api = self.bind(&[])?;
        let raw = api.event_create().map_err(driver_error::<A>)?;
        let core = &self.shared.core;
        core.made();
        let event = StreamEvent {
            core: core.clone(),
            raw,
        };
        // SAFETY: both are live objects of the bound device.
        unsafe { api.event_record(raw, self.shared.stream) }.map_err(driver_error::<A>)?;
        self.shared.count();
        Ok(event)
    }

    /// Makes the stream's later work wait for `event`.
    #[allow(unsafe_code)]
    fn wait_event(&self, event: &StreamEvent<A>) -> Result<()> {
        if !Arc::ptr_eq(&event.core, &self.shared.core) {
            return Err(Error::invalid(
                "",
                format!(
                    "the {} event is of another device than the queue",
                    A::WORDS.name
                ),
            ));
        }
        let api = self.bind(&[])?;
        // SAFETY: both are live objects of the bound device.
        unsafe { api.stream_wait_event(self.shared.stream, event.raw) }
            .map_err(driver_error::<A>)?;
        self.shared.count();
        Ok(())
    }

    /// Waits for the stream, then destroys it (L4).
    fn destroy(self) -> Result<()> {
        let synced = hal::Queue::sync(&self);
        drop(self);
        synced
    }
}

impl<A: StreamApi> hal::Event for StreamEvent<A> {
    /// Waits for the event.
    #[allow(unsafe_code)]
    fn sync(&self) -> Result<()> {
        self.core.bind()?;
        self.core.settle();
        // SAFETY: the event is live and of the bound device.
        unsafe { self.core.api().event_synchronize(self.raw) }.map_err(driver_error::<A>)
    }

    /// Whether the work before the event has finished.
    #[allow(unsafe_code)]
    fn is_complete(&self) -> Result<bool> {
        self.core.bind()?;
        // SAFETY: as above.
        unsafe { self.core.api().event_query(self.raw) }.map_err(driver_error::<A>)
    }

    /// Device time from `start` to `self`, both waited for first.
    #[allow(unsafe_code)]
    fn elapsed_since(&self, start: &StreamEvent<A>) -> Result<Duration> {
        if !Arc::ptr_eq(&self.core, &start.core) {
            return Err(Error::invalid(
                "",
                format!("the {} events are of different devices", A::WORDS.name),
            ));
        }
        start.sync()?;
        self.sync()?;
        // SAFETY: both are live, completed (waited) events of the bound device.
        let ms = unsafe { self.core.api().event_elapsed(start.raw, self.raw) }
            .map_err(driver_error::<A>)?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1000.0))
    }

    fn destroy(self) -> Result<()> {
        drop(self);
        Ok(())
    }
}
