//! The queue trait: an in-order stream of work on one device.

use crate::error::Result;

use super::Device;
use crate::hal::{Dims, HostFn, KernelArg, KernelOf};

/// An in-order stream of work on device `D`: launches, queued copies and fills, host
/// functions, and the events recorded between them.
///
/// Generic over its device so that [`Never`](crate::hal::Never) is the queue of every device
/// that has none. A queue keeps what it needs of its device alive. The runtime calls
/// [`Queue::destroy`] once, after its last use; nothing enqueued is dropped (L4).
///
/// ```
/// use offload_core::hal::{Device, Event, Platform, Program, Queue};
/// use offload_core::{Config, Dims, KernelArg, MemKind, reference::{self, Reference}};
/// let platform = Reference::open(&Config::default())?;
/// let dev = platform.devices().remove(0);
/// let program = dev.load(&reference::fixture_image())?;
/// let add_one = program.kernel("add_one")?;
/// let buf = dev.alloc(16, MemKind::Device)?;
/// let queue = dev.queue()?;
/// let n = 4u32.to_ne_bytes();
/// let dims = Dims::grid([1, 1, 1]).block([4, 1, 1]);
/// // SAFETY: the reference add_one touches the first n u32s of its 16-byte buffer.
/// unsafe { queue.launch(&add_one, &dims, &[KernelArg::Buffer(&buf), KernelArg::Scalar(&n)])? };
/// let done = queue.record()?;
/// queue.sync()?;
/// assert!(done.is_complete()?);
/// let mut out = [0u8; 4];
/// dev.read(&buf, 12, &mut out)?;
/// assert_eq!(u32::from_ne_bytes(out), 1);
/// done.destroy()?;
/// queue.destroy()?;
/// dev.free(buf)?;
/// drop(add_one);
/// program.unload()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub trait Queue<D: Device>: Send + Sync + Sized + 'static {
    /// Enqueues a kernel launch. Arguments match [`Program::params`](super::Program::params)
    /// (checked by the core), and the kernel and every buffer belong to this queue's device
    /// (checked by the core; a backend whose soundness depends on it checks again).
    ///
    /// # Safety
    ///
    /// This hands control to the kernel's code, which nothing verified: the caller takes
    /// on the contract of [`Queue::launch`](crate::Queue::launch) — the kernel accesses
    /// only its arguments, within their bounds, and (on the host) returns without
    /// unwinding. Implementations check what they can and rely on the rest.
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        kernel: &KernelOf<D>,
        dims: &Dims,
        args: &[KernelArg<'_, D::Buffer>],
    ) -> Result<()>;

    /// Enqueues a copy of `data` into `buffer` at `offset` (the range is checked), after the
    /// work enqueued so far. Returns once enqueued (Q1).
    fn enqueue_write(&self, buffer: &D::Buffer, offset: usize, data: Vec<u8>) -> Result<()>;

    /// Enqueues filling `len` bytes of `buffer` at `offset` with `pattern` repeated (`len` is
    /// a multiple of the pattern's length, which is not zero; checked).
    fn enqueue_fill(
        &self,
        buffer: &D::Buffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()>;

    /// Enqueues a copy of `len` bytes between two buffers of the device (or two
    /// non-overlapping ranges of one; checked).
    fn enqueue_copy(
        &self,
        src: &D::Buffer,
        src_offset: usize,
        dst: &D::Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;

    /// Enqueues a host function: it runs once the work enqueued before it has finished, and
    /// the work enqueued after it waits for it (liboffload's `olLaunchHostFunction`).
    fn enqueue_host_fn(&self, f: HostFn) -> Result<()>;

    /// Waits until all work enqueued so far has finished.
    fn sync(&self) -> Result<()>;

    /// Whether all work enqueued so far has finished, without waiting.
    fn is_idle(&self) -> Result<bool>;

    /// Records an event after the work enqueued so far.
    fn record(&self) -> Result<D::Event>;

    /// Makes later work on this queue wait for `event` (of any queue of the device).
    fn wait_event(&self, event: &D::Event) -> Result<()>;

    /// Destroys the queue once the work enqueued on it has finished: it waits for that
    /// work, or defers the destruction behind it (L4: nothing enqueued is dropped). An
    /// error of that work not yet reported (a host function's panic) is returned here.
    fn destroy(self) -> Result<()>;
}

/// Checks a fill's pattern as [`Queue::enqueue_fill`] requires it: not empty, and repeating
/// into `len` bytes exactly (`InvalidArgument` otherwise). The core checks it before a
/// backend is called; a backend checks it again where its soundness depends on it.
///
/// ```
/// assert!(offload_core::hal::check_fill(8, &[1, 2]).is_ok());
/// assert!(offload_core::hal::check_fill(8, &[1, 2, 3]).is_err());
/// assert!(offload_core::hal::check_fill(8, &[]).is_err());
/// ```
pub fn check_fill(len: usize, pattern: &[u8]) -> Result<()> {
    if pattern.is_empty() || len % pattern.len() != 0 {
        return Err(crate::error::Error::invalid(
            "",
            format!(
                "a {}-byte pattern cannot fill {len} bytes exactly",
                pattern.len()
            ),
        ));
    }
    Ok(())
}
