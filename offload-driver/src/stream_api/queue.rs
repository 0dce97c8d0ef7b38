//! Queues of a stream-based vendor API are its streams (non-blocking: they never wait for
//! the legacy default stream), events are its events with timing ([`StreamQueue`],
//! [`StreamEvent`]), and their `hal::Queue` and `hal::Event` impls: launches, queued
//! writes, fills and copies, host functions and events, each an operation handed to the
//! queue's stream (the stream, its gate and what it holds are stream.rs's).
//!
//! Everything a queue enqueues returns once it is enqueued (Q1). A queued write's bytes are
//! copied into memory the queue keeps until it knows the stream has passed them (a sync, or
//! an `is_idle` that finds it idle).
//!
//! A host function closes the queue's gate: the queue's later work waits for it in offload,
//! never on the stream (stream.rs's docs say why and how).

use std::sync::Arc;
use std::time::Duration;

use offload_core::hal::{self, HostFn};
use offload_core::{Dims, Error, KernelArg, Result};

use super::memory::StreamBuffer;
use super::program::StreamKernel;
use super::shared::{DeviceCore, StreamDevice};
use super::stream::{EventInner, Held, Op, QueueShared, lock};
use super::{StreamApi, Word, driver_error};

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

impl<A: StreamApi> Drop for StreamQueue<A> {
    /// Waits until no thread holds the queue to run its host functions or open its gate,
    /// so the last handle releases the stream here. (A host function never drops its own
    /// queue here: the runtime releases such a queue on a helper thread, L6; if it did,
    /// the wait is refused and the job releases the stream.)
    fn drop(&mut self) {
        let _ = self.shared.wait_quiet();
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
    pub(crate) inner: Arc<EventInner<A>>,
}

impl<A: StreamApi> std::fmt::Debug for StreamEvent<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}Event", A::WORDS.prefix)
    }
}

impl<A: StreamApi> StreamQueue<A> {
    /// A non-blocking stream on `core`'s device.
    pub(crate) fn new(core: &Arc<DeviceCore<A>>) -> Result<StreamQueue<A>> {
        core.bind()?;
        let stream = core.api().stream_create().map_err(driver_error::<A>)?;
        core.made();
        Ok(StreamQueue {
            shared: Arc::new(QueueShared::new(core.clone(), stream)),
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

    /// Numbers an operation on `buffers` and enqueues it.
    fn enqueue(&self, op: Op<A>, buffers: &[&StreamBuffer<A>]) -> Result<()> {
        let shared = &self.shared;
        shared.count();
        for b in buffers {
            b.uses().add(shared);
        }
        shared.enqueue(op)
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
        let (values, buffers) = crate::pack_args(
            &kernel_name,
            &kernel.params,
            args,
            StreamBuffer::ptr,
            StreamBuffer::len,
        )?;
        self.shared.core.limits().check(dims, &kernel_name)?;
        self.bind(&buffers)?;
        if dims.blocks() == 0 {
            return Ok(()); // no blocks: nothing to run
        }
        let op = Op::Launch {
            function: kernel.function,
            grid: dims.grid,
            block: dims.block,
            shared_memory: dims.shared_memory,
            values,
            _module: kernel.module.clone(),
            _buffers: buffers
                .iter()
                .map(|b| -> Held { b.alloc.clone() })
                .collect(),
        };
        self.enqueue(op, &buffers)?;
        kernel.module.uses.add(&self.shared);
        Ok(())
    }

    /// Queues a copy of `data` into `buffer` at `offset`.
    fn enqueue_write(&self, buffer: &StreamBuffer<A>, offset: usize, data: Vec<u8>) -> Result<()> {
        let dst = buffer.at(offset, data.len())?;
        self.bind(&[buffer])?;
        if data.is_empty() {
            return Ok(());
        }
        let op = Op::Write {
            dst,
            data,
            _buffer: buffer.alloc.clone(),
        };
        self.enqueue(op, &[buffer])
    }

    /// Queues a fill: the vendor's 8-, 16- or 32-bit fill where the pattern repeats into
    /// 1, 2 or 4 bytes at an aligned address, a queued write of the expanded pattern
    /// otherwise.
    fn enqueue_fill(
        &self,
        buffer: &StreamBuffer<A>,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        let dst = buffer.at(offset, len)?;
        offload_core::hal::check_fill(len, pattern)?;
        self.bind(&[buffer])?;
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
        let op = Op::Fill {
            dst,
            word,
            count: len / size,
            _buffer: buffer.alloc.clone(),
        };
        self.enqueue(op, &[buffer])
    }

    /// Queues a device-to-device copy (ranges of one buffer must not overlap).
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
        self.bind(&[src, dst])?;
        if len == 0 {
            return Ok(());
        }
        let op = Op::Copy {
            to,
            from,
            len,
            _buffers: [src.alloc.clone(), dst.alloc.clone()],
        };
        self.enqueue(op, &[src, dst])
    }

    /// Queues a host function, run on the queue's thread once the work before it has
    /// finished; the queue's later work waits for it in offload, not on the stream (module
    /// docs).
    fn enqueue_host_fn(&self, f: HostFn) -> Result<()> {
        self.bind(&[])?;
        // Numbered before it is enqueued: the function may run before `enqueue` returns.
        let number = self.shared.count();
        self.shared.enqueue(Op::HostFn { f, number })
    }

    /// Waits for the stream; reports (once) a held operation's failure, then a host
    /// function's panic.
    fn sync(&self) -> Result<()> {
        self.synchronize()?;
        if let Some(failed) = self.shared.take_failed() {
            return Err(failed);
        }
        match lock(&self.shared.failure).take() {
            None => Ok(()),
            Some(failure) => Err(Error::Callback {
                callback: offload_core::hal::HOST_FN_CALLBACK,
                source: failure.into(),
            }),
        }
    }

    /// Whether the queue is idle: nothing held behind its gate, and the stream idle
    /// (`cuStreamQuery`, `hipStreamQuery`).
    #[allow(unsafe_code)]
    fn is_idle(&self) -> Result<bool> {
        let api = self.bind(&[])?;
        if self.shared.gate_closed() {
            return Ok(false);
        }
        let passed = lock(&self.shared.kept).end();
        // SAFETY: the stream is live and of the bound device.
        let idle = unsafe { api.stream_query(self.shared.stream) }.map_err(driver_error::<A>)?;
        if idle {
            lock(&self.shared.kept).release_before(passed);
        }
        Ok(idle)
    }

    /// Records an event after the work enqueued so far.
    fn record(&self) -> Result<StreamEvent<A>> {
        let api = self.bind(&[])?;
        let raw = api.event_create().map_err(driver_error::<A>)?;
        let core = &self.shared.core;
        core.made();
        let inner = Arc::new(EventInner::new(core.clone(), raw));
        self.enqueue(Op::Record(inner.clone()), &[])?;
        Ok(StreamEvent { inner })
    }

    /// Makes the stream's later work wait for `event`.
    fn wait_event(&self, event: &StreamEvent<A>) -> Result<()> {
        if !Arc::ptr_eq(&event.inner.core, &self.shared.core) {
            return Err(Error::invalid(
                "",
                format!(
                    "the {} event is of another device than the queue",
                    A::WORDS.name
                ),
            ));
        }
        self.bind(&[])?;
        self.enqueue(Op::Wait(event.inner.clone()), &[])
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
        let inner = &self.inner;
        inner.core.bind()?;
        inner.core.settle();
        // A record still held behind its queue's gate reaches the vendor first (a wait
        // for an event the vendor has not seen recorded would return at once).
        inner.wait_settled()?;
        // SAFETY: the event is live and of the bound device.
        unsafe { inner.core.api().event_synchronize(inner.raw) }.map_err(driver_error::<A>)
    }

    /// Whether the work before the event has finished.
    #[allow(unsafe_code)]
    fn is_complete(&self) -> Result<bool> {
        let inner = &self.inner;
        inner.core.bind()?;
        match inner.settled_now() {
            None => return Ok(false),
            Some(recorded) => recorded?,
        }
        // SAFETY: as above.
        unsafe { inner.core.api().event_query(inner.raw) }.map_err(driver_error::<A>)
    }

    /// Device time from `start` to `self`, both waited for first.
    #[allow(unsafe_code)]
    fn elapsed_since(&self, start: &StreamEvent<A>) -> Result<Duration> {
        if !Arc::ptr_eq(&self.inner.core, &start.inner.core) {
            return Err(Error::invalid(
                "",
                format!("the {} events are of different devices", A::WORDS.name),
            ));
        }
        start.sync()?;
        self.sync()?;
        // SAFETY: both are live, completed (waited) events of the bound device.
        let ms = unsafe { (self.inner.core.api()).event_elapsed(start.inner.raw, self.inner.raw) }
            .map_err(driver_error::<A>)?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1000.0))
    }

    fn destroy(self) -> Result<()> {
        drop(self);
        Ok(())
    }
}
