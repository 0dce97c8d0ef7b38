//! The `dyn` erasure of [`crate::hal`], so one runtime holds platforms of different
//! backends: [`DynPlatform`], [`DynDevice`], [`DynBuffer`], [`DynProgram`], [`DynKernel`],
//! [`DynQueue`] and [`DynEvent`] mirror the family, and [`PlatformEntry`] is how the runtime
//! opens a platform. Nothing here holds state of its own or calls a driver.

mod entry;
mod objects;

pub use entry::{NoPlatforms, PlatformEntry, Platforms};
pub(crate) use objects::{
    DynBuffer, DynDevice, DynEvent, DynKernel, DynPlatform, DynProgram, DynQueue,
};
