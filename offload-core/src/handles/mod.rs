//! The handles users hold: [`Device`], [`Buffer`], [`Program`], [`Module`], [`Kernel`],
//! [`Queue`] and [`Event`].
//!
//! A handle is an owning, non-`Copy` wrapper: a reference to the runtime generation that
//! made it plus its entry there (a generational key, or the shared state the generation
//! lists). It never holds a driver object that could outlive its generation: those are
//! listed as the generation's resources and released by its teardown, so a handle that
//! outlives its runtime only ever sees `Error::ShutDown` (L3), and dropping it then does
//! nothing. Handles check everything a backend must not see wrong before they call it.
//!
//! The modules build on one another in one order, bottom first: `fixes`, `device`,
//! `buffer`, `background`, `module`, `kernel`, `program`, `args`, `typed`, `entry`, `event`,
//! `queue`; each uses only modules before it (`scripts/circles.sh`). A call that makes a
//! handle of a later module is an `impl` block in that module (`Device::alloc` in `buffer`,
//! `Device::queue` in `queue`, `Module::kernel` in `kernel`, `Module::program` in
//! `program`).

mod args;
pub(crate) mod background;
mod buffer;
mod device;
mod entry;
mod event;
mod fixes;
mod kernel;
mod module;
mod program;
mod queue;
mod typed;

pub use args::{Arg, Scalar};
pub(crate) use background::compile_pool;
pub use buffer::{Buffer, STAGING_CHUNK};
pub(crate) use buffer::{BufferEntry, Origin, SharedMemory, ViewOwner};
pub use device::Device;
pub use event::Event;
pub use kernel::Kernel;
pub use module::CallbackError;
pub use module::Module;
pub use program::Program;
pub use queue::Queue;
pub use typed::{BufferView, TypedBuffer};
