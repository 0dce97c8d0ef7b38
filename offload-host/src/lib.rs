#![doc = include_str!("../docs/manual.md")]
#![warn(missing_docs)]

// The C compiler behind programs from source, and its identity for the compile cache.
mod compiler;
// This machine's CPU, which host programs are compiled for.
mod cpu;
// The device and its `hal::Device` and `hal::Ipc` impls.
mod device;
// Public only for the fuzz targets (`fuzz/`) and the image tests, which reach the parser
// of untrusted bytes as an ordinary dependency; not part of the API.
#[doc(hidden)]
pub mod elf;
// Host memory: buffers, exportable memfds, imports.
mod memory;
// The platform, what its devices share, and its `hal::Platform` impl.
mod platform;
// The device's launch workers, started at its first parallel launch.
mod pool;
// Programs: images validated, loaded from a memfd, their kernels and globals.
mod program;
// Queues and events, over the streams below.
mod queue;
// What a platform's objects hold: its shared record and the device.
mod shared;
// The process-wide counters.
mod stats;
// In-order streams, each run by its own executor thread.
mod stream;
// Which streams' queued work uses a buffer or a module.
mod uses;

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use offload_core::PlatformEntry;

pub use memory::{ALIGNMENT, HostBuffer, MEMFD_NAME};
pub use platform::HostPlatform;
pub use program::{HostKernel, HostModule, MAX_SHARED_MEMORY, PARAMS_PREFIX};
pub use queue::{HostEvent, HostQueue};
pub use shared::HostDevice;
pub use stats::{HostStats, stats};

/// Locks, ignoring poison: no critical section of this crate leaves its data half-changed
/// on a panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
pub use stream::MAX_QUEUED;

/// The C header of the host kernel ABI (`include/offload_host.h`): `OFFLOAD_KERNEL`,
/// `OFFLOAD_BUFFER`, `OFFLOAD_SCALAR`, the `offload_launch` struct.
///
/// A program from source ([`Program::from_source`](offload_core::Program::from_source))
/// has it on its include path already. A crate that compiles its own host kernels in its
/// build script finds the file with [`include_dir`] (or `DEP_OFFLOAD_HOST_INCLUDE`), or
/// writes this text next to them, so it compiles them without a path into offload's
/// sources:
///
/// ```no_run
/// // build.rs, with `offload-host` as a build-dependency
/// use std::{env, fs, path::PathBuf, process::Command};
///
/// let out = PathBuf::from(env::var("OUT_DIR").unwrap());
/// fs::write(out.join("offload_host.h"), offload_host::HEADER).unwrap();
/// let status = Command::new("cc")
///     .args(["-shared", "-fPIC", "-O3"])
///     .arg("-I")
///     .arg(&out)
///     .arg("kernels/saxpy.c")
///     .arg("-o")
///     .arg(out.join("saxpy.so"))
///     .status()
///     .unwrap();
/// assert!(status.success());
/// println!("cargo:rerun-if-changed=kernels/saxpy.c");
/// // src/main.rs then embeds it: include_bytes!(concat!(env!("OUT_DIR"), "/saxpy.so"))
/// ```
///
/// ```
/// assert!(offload_host::HEADER.contains("#define OFFLOAD_KERNEL(name, params)"));
/// ```
pub const HEADER: &str = include_str!("../include/offload_host.h");

/// The directory that holds `offload_host.h` ([`HEADER`]): `include/` in offload-host's
/// sources where this crate was built. It is for build scripts, which run where the crate
/// was built; a program that runs elsewhere writes [`HEADER`] out instead.
///
/// Cargo also gives it to the build script of every crate with `offload-host` in its
/// `[dependencies]`, as `DEP_OFFLOAD_HOST_INCLUDE` (offload-host declares
/// `links = "offload_host"` for that; it links no native library):
///
/// ```no_run
/// // build.rs of a crate with offload-host in [dependencies]
/// use std::{env, path::PathBuf, process::Command};
///
/// let include = env::var("DEP_OFFLOAD_HOST_INCLUDE").expect("offload-host says where");
/// let out = PathBuf::from(env::var("OUT_DIR").unwrap());
/// let status = Command::new("cc")
///     .args(["-shared", "-fPIC", "-O3", "-I", &include, "kernels/saxpy.c", "-o"])
///     .arg(out.join("saxpy.so"))
///     .status()
///     .unwrap();
/// assert!(status.success());
/// println!("cargo:rerun-if-changed=kernels/saxpy.c");
/// ```
///
/// ```
/// let dir = offload_host::include_dir();
/// let text = std::fs::read_to_string(dir.join("offload_host.h")).unwrap();
/// assert_eq!(text, offload_host::HEADER);
/// ```
pub fn include_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/include"))
}

/// Test kernels compiled from `fixtures/kernels.c` (feature `fixtures`): `add_one`, `fill`,
/// `noop`, `read_global`, a writable global `g` and a const `read_only_constant`.
#[cfg(feature = "fixtures")]
pub mod fixtures {
    /// The kernels, with `add_one` adding 1.
    pub const KERNELS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kernels.so"));
    /// The same kernels with `add_one` adding 2 (to tell two images apart).
    pub const KERNELS_STEP2: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kernels_step2.so"));
}

/// The entry the facade registers for the `host` feature.
///
/// ```
/// assert_eq!(offload_host::platform().kind(), offload_core::BackendKind::Host);
/// ```
pub fn platform() -> PlatformEntry {
    PlatformEntry::with_ipc::<HostPlatform>()
}
