//! SPIR-V reading for offload, shared by the backends that load SPIR-V (contract P4: an
//! image is validated before the driver sees a byte).
//!
//! - [`module`] (`src/module.rs`): the flavour-independent reader — header, instructions
//!   and their word counts, id bounds, module structure, and the tables of types,
//!   constants, decorations, entry points, execution modes, globals and functions that a
//!   reflection reads. The Vulkan backend's `GLCompute` reflection (offload-vulkan
//!   `src/spirv.rs`) stands on it.
//! - [`kernel`] (`src/kernel.rs`): the OpenCL-kernel reflection for Level Zero —
//!   [`kernels`] validates an OpenCL-flavour module and gives its kernels' parameters and
//!   its exported globals.
//!
//! Every error is `offload_core::Error::InvalidBinary` with the reason, naming the backend
//! and call the caller gave (a backend gives none: the handle of the user's call names it);
//! nothing here panics on any input, and nothing here talks to a driver.
//!
//! ```
//! let image = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../offload-ze/fixtures/kernels.spv")).unwrap();
//! let module = offload_spirv::kernels(&image).unwrap();
//! assert!(module.kernels.iter().any(|k| k.name == "add_one"));
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod kernel;
pub mod module;

pub use kernel::{GlobalVar, KernelEntry, KernelModule, kernels, kernels_for};
pub use module::{
    Constant, Context, Decorations, EntryDecl, Function, HEADER_WORDS, Header, Inst, MAGIC,
    MAX_BOUND, Mode, Module, Type, Version, model_name,
};
