//! The program trait: an image loaded on one device.

use crate::error::Result;

use super::{GlobalInfo, ParamKind};

/// An image loaded on one device: its kernels, their parameters, its globals.
///
/// ```
/// use offload_core::hal::{Device, Platform, Program};
/// use offload_core::{Config, ParamKind, ScalarType::U32, reference::{self, RefModule, Reference}};
/// let platform = Reference::open(&Config::default())?;
/// let program = platform.devices()[0].load(&reference::fixture_image())?;
/// let fill = program.kernel("fill")?;
/// assert_eq!(RefModule::params(&fill), [ParamKind::Buffer, ParamKind::Typed(U32), ParamKind::Typed(U32)]);
/// program.write_global("g", 0, &7u32.to_ne_bytes())?;
/// assert_eq!(program.global("g")?.size, 4);
/// drop(fill);
/// program.unload()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
pub trait Program: Send + Sync + Sized + 'static {
    /// An entry point of this program.
    type Kernel: Send + Sync + 'static;

    /// Looks up a kernel; a missing one is `Error::SymbolNotFound`.
    fn kernel(&self, name: &str) -> Result<Self::Kernel>;

    /// Whether every kernel of this program is proven to access memory only inside the
    /// buffers it is given, whatever the arguments that pass the core's checks and the
    /// backend's launch checks (e.g. WGSL compiled with bounds-checked indices, launched with
    /// buffers at least their bindings' minimum size). Such kernels may be launched
    /// without `unsafe` ([`Queue::run`](crate::Queue::run)). The default, `false`, is the
    /// only honest answer for native code and for device code offload did not compile.
    fn verified(&self) -> bool {
        false
    }

    /// The kernel's parameters, in order, as the image declares them.
    fn params(kernel: &Self::Kernel) -> &[ParamKind];

    /// The workgroup (block) size the kernel declares, where its language declares one
    /// (WGSL's `@workgroup_size`, SPIR-V's `LocalSize`): the size the safe
    /// [`Queue::run`](crate::Queue::run) launches it with (S1). `None`, the default, where
    /// the launch chooses.
    fn workgroup_size(kernel: &Self::Kernel) -> Option<[u32; 3]> {
        let _ = kernel;
        None
    }

    /// The names of the program's kernels, in the image's order.
    fn kernels(&self) -> Vec<String>;

    /// The names of the program's globals the host can reach, in the image's order.
    fn globals(&self) -> Vec<String>;

    /// Address and size of a global variable; a missing one is `Error::SymbolNotFound`.
    fn global(&self, name: &str) -> Result<GlobalInfo>;

    /// Copies bytes out of a global variable (the range is already checked).
    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Copies bytes into a global variable (the range is already checked).
    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()>;

    /// Unloads the image. Kernels looked up from it are gone by then.
    fn unload(self) -> Result<()>;
}
