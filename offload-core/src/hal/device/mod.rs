//! The device trait: one device's memory, its queues' creation and program loading; and,
//! as a child, the trait of its queues ([`Queue`]), which is generic over the device (a
//! queue launches the device's kernels on the device's buffers) while the device names
//! its queue type: one idea, a device and its queues, in two files.

use crate::error::Result;

use super::{CompilerId, DeviceInfo, Event, Language, MemKind, Program, Source};

mod queue;
pub use queue::{Queue, check_fill};

/// What keeps adopted memory alive ([`Device::adopt`]): dropped when the buffer over it is
/// released.
pub type Owner = Box<dyn std::any::Any + Send + Sync>;

/// A wait for the queued work that uses a buffer, taken out of the buffer
/// ([`Device::pending`]) so that it runs with no lock of the buffer's held. It holds what
/// the wait itself needs (its queues' state), never the buffer, and keeps no driver object
/// alive past its platform's deinit in a way the backend does not handle.
pub type Pending = Box<dyn FnOnce() -> crate::Result<()> + Send>;

/// One device: its memory, the queues it makes and the images loaded on it.
///
/// Buffers, queues, events and programs are associated types; the device's methods act on
/// its memory (as wgpu-hal's `Device::create_buffer` / `destroy_buffer` do), and the
/// queue's and event's own traits ([`Queue`], [`Event`]) act on those. Mutation of a buffer
/// takes `&mut`: the borrow checker proves exclusive access, so a backend needs no lock of
/// its own for it.
///
/// The runtime's ordering contract: a program's `unload` comes after every launch of its
/// kernels returned; a queue's `destroy` after its `sync`; everything before the platform's
/// `deinit`. A backend validates images before its driver sees them (P4).
///
/// ```
/// use offload_core::hal::{Device, Platform};
/// use offload_core::{Config, MemKind, reference::Reference};
/// let platform = Reference::open(&Config::default())?;
/// let dev = platform.devices().remove(0);
/// let mut buf = dev.alloc(16, MemKind::Device)?;
/// dev.fill(&mut buf, 0, 16, 1)?;
/// dev.write(&mut buf, 12, &[9, 9, 9, 9])?;
/// let mut out = [0u8; 4];
/// dev.read(&buf, 12, &mut out)?;
/// assert_eq!(out, [9; 4]);
/// dev.validate(b"not an image").unwrap_err();
/// dev.free(buf)?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub trait Device: Send + Sync + Sized + 'static {
    /// An allocation on this device.
    type Buffer: Send + Sync + 'static;
    /// An image loaded on this device.
    type Program: Program;
    /// An in-order stream of work on this device.
    type Queue: Queue<Self>;
    /// A point in a queue's work, with a timestamp.
    type Event: Event;

    /// Describes the device.
    fn info(&self) -> Result<DeviceInfo>;

    /// Allocates `size` (> 0) bytes. An impossible size is `Error::OutOfMemory`.
    fn alloc(&self, size: usize, kind: MemKind) -> Result<Self::Buffer>;

    /// Releases an allocation.
    fn free(&self, buffer: Self::Buffer) -> Result<()>;

    /// Copies `dst.len()` bytes at `offset` of `buffer` to `dst`.
    fn read(&self, buffer: &Self::Buffer, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Copies `src` to `buffer` at `offset`.
    fn write(&self, buffer: &mut Self::Buffer, offset: usize, src: &[u8]) -> Result<()>;

    /// Sets `len` bytes at `offset` to `value`.
    fn fill(&self, buffer: &mut Self::Buffer, offset: usize, len: usize, value: u8) -> Result<()>;

    /// Copies `len` bytes from `src` to another buffer `dst` of this device.
    fn copy(
        &self,
        src: &Self::Buffer,
        src_offset: usize,
        dst: &mut Self::Buffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;

    /// Copies `len` bytes inside one buffer; the ranges may overlap (memmove semantics).
    fn copy_within(
        &self,
        buffer: &mut Self::Buffer,
        src_offset: usize,
        dst_offset: usize,
        len: usize,
    ) -> Result<()>;

    /// Runs `f` on the buffer's bytes in place, where the host can touch them directly
    /// (host memory, or memory the driver maps), after the queued work that uses the
    /// buffer; `Error::Unsupported` where it cannot (unmappable device memory, or memory
    /// another process may write). Nothing else can use the buffer meanwhile (`&mut`).
    fn with_mapped(&self, buffer: &mut Self::Buffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()>;

    /// The queued work that uses `buffer` and may not have finished, as a wait to run
    /// without the buffer ([`Pending`]); `None` when there is none (the default: a backend
    /// whose queued work never waits for host code).
    ///
    /// The runtime asks before every host access and copy, holding the buffer's lock; when
    /// the answer is `Some` it lets the lock go, waits, and asks again. A host function
    /// queued before that work may be waiting to use the buffer itself, so waiting under
    /// the lock could close a cycle (L7). A backend whose queued work can wait for host
    /// code (host functions run asynchronously) answers here, and then finds nothing to
    /// wait for in its own read, write, fill, copy or `with_mapped` (no new work can use
    /// the buffer while its lock is held: launches and queued copies take it too).
    fn pending(&self, buffer: &Self::Buffer) -> Option<Pending> {
        let _ = buffer;
        None
    }

    /// The address of `buffer`'s memory as this device's driver and the other libraries of
    /// the process name it (a `CUdeviceptr`, a host pointer), for handing the memory to one
    /// of them (DLPack). `Ok(None)`, the default, where the backend has no such address.
    fn address(&self, buffer: &Self::Buffer) -> Result<Option<u64>> {
        let _ = buffer;
        Ok(None)
    }

    /// Adopts `len` (> 0) bytes at `address` that another library of this process
    /// allocated on this device, as a buffer that never frees them: `owner` is dropped when
    /// the buffer's memory is released (after the queued work that uses it), and with it
    /// whatever keeps the memory alive. `Ok(None)`, the default, where the backend cannot
    /// adopt memory (then `owner` is dropped at once).
    ///
    /// # Safety
    /// `address..address + len` is memory of `kind` that this device's kernels and driver
    /// can read and write, and stays so until `owner` is dropped; nothing else uses it in a
    /// way that races the buffer's uses.
    #[allow(unsafe_code)]
    unsafe fn adopt(
        &self,
        address: u64,
        len: usize,
        kind: MemKind,
        owner: Owner,
    ) -> Result<Option<Self::Buffer>> {
        let _ = (address, len, kind, owner);
        Ok(None)
    }

    /// Validates `image` and loads it. A corrupt or foreign image is
    /// `Error::InvalidBinary` and never reaches the driver.
    fn load(&self, image: &[u8]) -> Result<Self::Program>;

    /// Checks that `image` is a program this device could load, without loading it
    /// (liboffload's `olIsValidBinary`): `Ok`, or `Error::InvalidBinary` saying why.
    fn validate(&self, image: &[u8]) -> Result<()>;

    /// The compiler this device uses for `language`: its identity and target, which the
    /// compile cache keys on. `Ok(None)` (the default) when the backend compiles no such
    /// source; `Error::Compile` when it would but its compiler is missing.
    fn compiler(&self, language: Language) -> Result<Option<CompilerId>> {
        let _ = language;
        Ok(None)
    }

    /// Compiles `source` into an image [`Device::load`] accepts, with the compiler
    /// [`Device::compiler`] named. Diagnostics are `Error::Compile` with the compiler's
    /// log. The core calls it once per (program, compiler, target) and caches the result;
    /// only for a language `compiler` answered `Some` for.
    fn compile(&self, source: &Source) -> Result<Vec<u8>> {
        Err(crate::Error::invalid(
            "Program::load",
            format!("this device has no {} compiler", source.language()),
        ))
    }

    /// Creates a queue.
    fn queue(&self) -> Result<Self::Queue>;
}
