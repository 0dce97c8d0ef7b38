//! [`Never`], the object a backend cannot make, and [`no_compute!`](crate::no_compute),
//! which writes a memory-only device's missing methods.

use std::time::Duration;

use crate::error::Result;

use super::{
    Device, DeviceInfo, Dims, Event, Exported, GlobalInfo, HostFn, Ipc, KernelArg, KernelOf,
    MemKind, ParamKind, Program, Queue,
};

/// A type with no values: the object a backend cannot make. A platform without devices
/// uses it as its `Device`; a memory-only device (a backend still under construction) as
/// its `Program`, `Queue` and `Event`, with [`no_compute!`](crate::no_compute) writing the methods.
/// Everything that would take one is unreachable.
///
/// ```
/// use offload_core::hal::{Never, Platform};
/// use offload_core::{BackendKind, Config, Result};
/// /// A platform that finds no device.
/// struct Empty;
/// impl Platform for Empty {
///     type Device = Never;
///     const KIND: BackendKind = BackendKind::Reference;
///     fn open(_: &Config) -> Result<Self> { Ok(Empty) }
///     fn name(&self) -> String { "empty".into() }
///     fn devices(&self) -> Vec<Never> { Vec::new() }
///     fn deinit(&self) -> Result<()> { Ok(()) }
/// }
/// assert!(Empty::open(&Config::default())?.devices().is_empty());
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Never {}

impl Never {
    /// Whatever holds a `Never` is unreachable code.
    ///
    /// ```
    /// fn unreachable(n: &offload_core::hal::Never) -> ! {
    ///     n.absurd()
    /// }
    /// ```
    pub fn absurd(&self) -> ! {
        match *self {}
    }
}

impl Device for Never {
    type Buffer = Never;
    type Program = Never;
    type Queue = Never;
    type Event = Never;

    fn info(&self) -> Result<DeviceInfo> {
        self.absurd()
    }
    fn alloc(&self, _: usize, _: MemKind) -> Result<Never> {
        self.absurd()
    }
    fn free(&self, _: Never) -> Result<()> {
        self.absurd()
    }
    fn read(&self, _: &Never, _: usize, _: &mut [u8]) -> Result<()> {
        self.absurd()
    }
    fn write(&self, _: &mut Never, _: usize, _: &[u8]) -> Result<()> {
        self.absurd()
    }
    fn fill(&self, _: &mut Never, _: usize, _: usize, _: u8) -> Result<()> {
        self.absurd()
    }
    fn copy(&self, _: &Never, _: usize, _: &mut Never, _: usize, _: usize) -> Result<()> {
        self.absurd()
    }
    fn copy_within(&self, _: &mut Never, _: usize, _: usize, _: usize) -> Result<()> {
        self.absurd()
    }
    fn with_mapped(&self, _: &mut Never, _: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        self.absurd()
    }
    fn load(&self, _: &[u8]) -> Result<Never> {
        self.absurd()
    }
    fn validate(&self, _: &[u8]) -> Result<()> {
        self.absurd()
    }
    fn queue(&self) -> Result<Never> {
        self.absurd()
    }
}

/// The queue of every device that has none.
impl<D: Device> Queue<D> for Never {
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        _: &KernelOf<D>,
        _: &Dims,
        _: &[KernelArg<'_, D::Buffer>],
    ) -> Result<()> {
        self.absurd()
    }
    fn enqueue_write(&self, _: &D::Buffer, _: usize, _: Vec<u8>) -> Result<()> {
        self.absurd()
    }
    fn enqueue_fill(&self, _: &D::Buffer, _: usize, _: usize, _: &[u8]) -> Result<()> {
        self.absurd()
    }
    fn enqueue_copy(
        &self,
        _: &D::Buffer,
        _: usize,
        _: &D::Buffer,
        _: usize,
        _: usize,
    ) -> Result<()> {
        self.absurd()
    }
    fn enqueue_host_fn(&self, _: HostFn) -> Result<()> {
        self.absurd()
    }
    fn sync(&self) -> Result<()> {
        self.absurd()
    }
    fn is_idle(&self) -> Result<bool> {
        self.absurd()
    }
    fn record(&self) -> Result<D::Event> {
        self.absurd()
    }
    fn wait_event(&self, _: &D::Event) -> Result<()> {
        self.absurd()
    }
    fn destroy(self) -> Result<()> {
        self.absurd()
    }
}

/// The event of every device that has no queues.
impl Event for Never {
    fn sync(&self) -> Result<()> {
        self.absurd()
    }
    fn is_complete(&self) -> Result<bool> {
        self.absurd()
    }
    fn elapsed_since(&self, _: &Never) -> Result<Duration> {
        self.absurd()
    }
    fn destroy(self) -> Result<()> {
        self.absurd()
    }
}

impl Ipc for Never {
    fn uuid(&self) -> [u8; 16] {
        self.absurd()
    }
    fn alloc_exportable(&self, _: usize, _: MemKind) -> Result<Never> {
        self.absurd()
    }
    fn export(&self, _: &Never) -> Result<Exported> {
        self.absurd()
    }
    fn import(&self, _: Exported) -> Result<Never> {
        self.absurd()
    }
}

impl Program for Never {
    type Kernel = Never;

    fn kernel(&self, _: &str) -> Result<Never> {
        self.absurd()
    }
    fn params(kernel: &Never) -> &[ParamKind] {
        kernel.absurd()
    }
    fn kernels(&self) -> Vec<String> {
        self.absurd()
    }
    fn globals(&self) -> Vec<String> {
        self.absurd()
    }
    fn global(&self, _: &str) -> Result<GlobalInfo> {
        self.absurd()
    }
    fn read_global(&self, _: &str, _: usize, _: &mut [u8]) -> Result<()> {
        self.absurd()
    }
    fn write_global(&self, _: &str, _: usize, _: &[u8]) -> Result<()> {
        self.absurd()
    }
    fn unload(self) -> Result<()> {
        self.absurd()
    }
}

/// Writes `queue` for a [`Device`] whose `Queue` and `Event` are
/// [`Never`](crate::hal::Never): it answers `Error::Unsupported` naming the backend (the
/// queue and event methods of `Never` are unreachable). With `load` too (answering `Unsupported`) when the device's
/// `Program` is `Never` as well: `no_compute!(kind, load)`.
///
/// ```
/// use offload_core::hal::{Device, Never};
/// use offload_core::{BackendKind, DeviceInfo, MemKind, Result, no_compute};
/// /// A device with memory but no programs or queues yet.
/// struct Bytes;
/// impl Device for Bytes {
///     type Buffer = Vec<u8>;
///     type Program = Never;
///     type Queue = Never;
///     type Event = Never;
///     fn info(&self) -> Result<DeviceInfo> {
///         Ok(DeviceInfo::new("bytes", "example", BackendKind::Reference, 1 << 20, 1))
///     }
///     fn alloc(&self, size: usize, _: MemKind) -> Result<Vec<u8>> { Ok(vec![0; size]) }
///     fn free(&self, _: Vec<u8>) -> Result<()> { Ok(()) }
///     fn read(&self, b: &Vec<u8>, o: usize, dst: &mut [u8]) -> Result<()> {
///         dst.copy_from_slice(&b[o..o + dst.len()]); Ok(())
///     }
///     fn write(&self, b: &mut Vec<u8>, o: usize, src: &[u8]) -> Result<()> {
///         b[o..o + src.len()].copy_from_slice(src); Ok(())
///     }
///     fn fill(&self, b: &mut Vec<u8>, o: usize, len: usize, v: u8) -> Result<()> {
///         b[o..o + len].fill(v); Ok(())
///     }
///     fn copy(&self, s: &Vec<u8>, so: usize, d: &mut Vec<u8>, o: usize, len: usize) -> Result<()> {
///         d[o..o + len].copy_from_slice(&s[so..so + len]); Ok(())
///     }
///     fn copy_within(&self, b: &mut Vec<u8>, so: usize, o: usize, len: usize) -> Result<()> {
///         b.copy_within(so..so + len, o); Ok(())
///     }
///     fn with_mapped(&self, b: &mut Vec<u8>, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
///         f(b); Ok(())
///     }
///     no_compute!(BackendKind::Reference, load);
/// }
/// assert!(matches!(Bytes.queue(), Err(offload_core::Error::Unsupported { .. })));
/// assert!(matches!(Bytes.load(b"x"), Err(offload_core::Error::Unsupported { .. })));
/// ```
#[macro_export]
macro_rules! no_compute {
    ($kind:expr, load) => {
        fn load(&self, _image: &[u8]) -> $crate::Result<$crate::hal::Never> {
            Err($crate::Error::Unsupported {
                backend: $kind,
                call: "Program::load",
                reason: "this backend has no programs yet".into(),
            })
        }
        fn validate(&self, _image: &[u8]) -> $crate::Result<()> {
            Err($crate::Error::Unsupported {
                backend: $kind,
                call: "Device::validate",
                reason: "this backend has no programs yet".into(),
            })
        }
        $crate::no_compute!($kind);
    };
    ($kind:expr) => {
        fn queue(&self) -> $crate::Result<$crate::hal::Never> {
            Err($crate::Error::Unsupported {
                backend: $kind,
                call: "Device::queue",
                reason: "this backend has no queues yet".into(),
            })
        }
    };
}
