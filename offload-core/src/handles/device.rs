//! [`Device`]: a device of a live runtime, and the calls that make objects on it.

use crate::sync::Arc;
use std::fmt;

use crate::error::Result;
use crate::hal::{BackendKind, DeviceInfo, MemKind};
use crate::handles::{Buffer, Queue};
use crate::runtime::generation::{DeviceKey, Generation};

/// A device of a live runtime. Cheap to clone; all clones name the same device.
///
/// ```
/// use offload::{BackendKind, MemKind, Offload};
/// let rt = Offload::init()?;
/// let dev = rt.devices()?.remove(0);
/// assert_eq!(dev.backend(), BackendKind::Host);
/// let buf = dev.alloc(16, MemKind::Device)?;
/// assert_eq!(buf.len(), 16);
/// # Ok::<(), offload::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    generation: Arc<Generation>,
    key: DeviceKey,
    backend: BackendKind,
}

impl Device {
    pub(crate) fn new(generation: Arc<Generation>, key: DeviceKey, backend: BackendKind) -> Self {
        Device {
            generation,
            key,
            backend,
        }
    }

    pub(crate) fn generation(&self) -> &Arc<Generation> {
        &self.generation
    }

    pub(crate) fn key(&self) -> DeviceKey {
        self.key
    }

    /// The key as a number, for thread-local records of what this thread is doing.
    pub(crate) fn key_bits(&self) -> u64 {
        self.key.bits()
    }

    /// The backend that drives this device. Works after shutdown too (it is identity, not
    /// state).
    ///
    /// ```
    /// let rt = offload::Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// assert_eq!(dev.backend().name(), "host");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// Its position among its platform's devices, in discovery order: on CUDA and HIP the
    /// driver's device ordinal (the platform lists every device the driver has), which
    /// other libraries (DLPack's `device_id`) name the device by.
    ///
    /// ```
    /// use offload::{BackendKind, Offload};
    /// let rt = Offload::init()?;
    /// let host = rt.device(BackendKind::Host)?;
    /// assert_eq!(host.index(), 0);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn index(&self) -> u32 {
        self.key.index()
    }

    /// What the device says about itself.
    ///
    /// ```
    /// let rt = offload::Offload::init()?;
    /// let info = rt.devices()?[0].info()?;
    /// assert!(info.memory > 0);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn info(&self) -> Result<DeviceInfo> {
        self.generation
            .with_live(|live| live.device(self.key)?.info())
            .map_err(|e| e.on("Device::info", self))
    }

    /// Allocates `size` bytes of `kind` memory. A zero size is `InvalidArgument`; more
    /// than the device has is `OutOfMemory`.
    ///
    /// ```
    /// use offload::{Error, MemKind};
    /// let rt = offload::Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// assert!(matches!(dev.alloc(0, MemKind::Device), Err(Error::InvalidArgument { .. })));
    /// assert!(matches!(dev.alloc(1 << 62, MemKind::Device), Err(Error::OutOfMemory { .. })));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn alloc(&self, size: usize, kind: MemKind) -> Result<Buffer> {
        Buffer::alloc(self, size, kind, false).map_err(|e| e.on("Device::alloc", self))
    }

    /// Allocates `size` bytes that other processes can map: [`Buffer::export`] describes
    /// them, and `Device::import` (or an IPC endpoint) maps them elsewhere. Asked for at
    /// allocation because Vulkan must declare exportable memory then, and on the host such
    /// memory is a memfd (several system calls) rather than a heap block. A backend without
    /// IPC answers `Error::Unsupported`.
    ///
    /// ```
    /// use offload::{MemKind, Offload};
    /// let rt = Offload::init()?;
    /// let buf = rt.devices()?[0].alloc_exportable(4096, MemKind::Device)?;
    /// let handle = buf.export()?;
    /// assert_eq!(handle.size(), 4096);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<Buffer> {
        Buffer::alloc(self, size, kind, true).map_err(|e| e.on("Device::alloc_exportable", self))
    }

    /// Adopts `len` bytes at `address` that another library of this process allocated on
    /// this device (a NumPy array's data, a CuPy or PyTorch tensor's `CUdeviceptr`, as
    /// DLPack hands them over) as a buffer of this runtime, without copying: reads, writes,
    /// copies and launches use that memory. offload never frees it: `owner`, whatever keeps
    /// the memory alive (the other library's handle of it), is dropped when the buffer is
    /// released — the last handle dropped, or its runtime shut down — after the queued work
    /// that uses it. `Error::Unsupported` where the backend cannot adopt memory (Vulkan);
    /// see [`Buffer::address`] for the other direction.
    ///
    /// # Safety
    /// `address..address + len` must be memory of `kind` that this device's kernels and
    /// driver can read and write (host memory for the host device, device memory of this
    /// device for CUDA and HIP), and stay so until `owner` is dropped; nothing else may use
    /// it in a way that races this buffer's uses.
    ///
    /// ```
    /// use offload::{MemKind, Offload};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// // Memory another library allocated: here a boxed slice whose box is the owner.
    /// let mut theirs = vec![7u8; 64].into_boxed_slice();
    /// let address = theirs.as_mut_ptr() as u64;
    /// // SAFETY: 64 bytes of host memory, alive until the owner (the box) is dropped, and
    /// // not touched through `theirs` any more (it moved into the buffer).
    /// let buf = unsafe { dev.adopt(address, 64, MemKind::Host, theirs) }?;
    /// buf.fill(0, 8, 1)?;
    /// let mut back = [0u8; 9];
    /// buf.read(0, &mut back)?;
    /// assert_eq!(back, [1, 1, 1, 1, 1, 1, 1, 1, 7]);
    /// assert_eq!(buf.address()?, address);
    /// # Ok::<(), offload::Error>(())
    /// ```
    #[allow(unsafe_code)]
    pub unsafe fn adopt(
        &self,
        address: u64,
        len: usize,
        kind: MemKind,
        owner: impl std::any::Any + Send + Sync,
    ) -> Result<Buffer> {
        // SAFETY: the caller's promise, passed on.
        unsafe { Buffer::adopt(self, address, len, kind, Box::new(owner)) }
            .map_err(|e| e.on("Device::adopt", self))
    }

    /// Checks that `image` is a program this device could load, without loading it
    /// (liboffload's `olIsValidBinary`): `Ok`, or `Error::InvalidBinary` saying why
    /// (`Error::Unsupported` on a backend without programs).
    ///
    /// ```
    /// use offload::{Error, Offload};
    /// let rt = Offload::init()?;
    /// let dev = rt.devices()?.remove(0);
    /// dev.validate(offload::host::fixtures::KERNELS)?;
    /// assert!(matches!(dev.validate(b"junk"), Err(Error::InvalidBinary { .. })));
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn validate(&self, image: &[u8]) -> Result<()> {
        self.generation
            .with_live(|live| live.device(self.key)?.validate(image))
            .map_err(|e| e.on("Device::validate", self))
    }

    /// Creates a queue on this device.
    ///
    /// ```
    /// # let rt = offload::Offload::init()?;
    /// let queue = rt.devices()?[0].queue()?;
    /// queue.sync()?;
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn queue(&self) -> Result<Queue> {
        Queue::create(self).map_err(|e| e.on("Device::queue", self))
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.generation, &other.generation) && self.key == other.key
    }
}

impl Eq for Device {}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Its position among its platform's devices, in discovery order.
        write!(f, "{} device {}", self.backend, self.key.index())
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
