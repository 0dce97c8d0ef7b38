//! What offload-ze needs to know of a SPIR-V module before Level Zero sees it: that it is a
//! well-formed OpenCL-flavour module (Kernel capability, Physical64 addressing, OpenCL
//! memory model), its kernels with their parameters, and its exported globals. That is
//! offload-spirv's job ([`offload_spirv::kernels`]); this module is the one place that calls
//! it. A malformed or foreign module is `Error::InvalidBinary` naming the reason, and never
//! reaches `zeModuleCreate` (P4).

use offload_core::Result;

pub(crate) use offload_spirv::KernelModule;

/// The SPIR-V magic number, as the first word of a little-endian module.
pub(crate) const MAGIC: [u8; 4] = offload_spirv::MAGIC.to_le_bytes();

/// Validates `image` and reads its kernels and globals.
pub(crate) fn kernels(image: &[u8]) -> Result<KernelModule> {
    offload_spirv::kernels(image)
}
