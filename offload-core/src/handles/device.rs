//! [`Device`]: a device of a live runtime, what it says about itself, and the check of a
//! program image for it. The calls that make objects on it live with what they make
//! (`Device::alloc` in `buffer`, `Device::queue` in `queue`), so this module names none.

use crate::sync::Arc;
use std::fmt;

use crate::error::Result;
use crate::hal::{BackendKind, DeviceInfo};
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
