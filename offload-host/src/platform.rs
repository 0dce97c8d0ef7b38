//! The host platform ([`HostPlatform`]) and its `hal::Platform` impl: opening makes the
//! devices (what they share is shared.rs's), deinit reports what is still alive.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use offload_core::hal;
use offload_core::{BackendKind, Config, Error, Result};

use crate::elf;
use crate::shared::{HostDevice, Shared};
use crate::stats::{DEINITIALISED, OPENED};

/// The host platform: `Config::host_devices` CPU devices.
#[derive(Debug)]
pub struct HostPlatform {
    devices: usize,
    shared: Arc<Shared>,
}

impl HostPlatform {
    /// Allocations of this platform not yet freed.
    ///
    /// ```
    /// use offload_core::hal::Platform;
    /// let host = offload_host::HostPlatform::open(&offload_core::Config::default())?;
    /// assert_eq!(host.live_allocations(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }
}

impl hal::Platform for HostPlatform {
    type Device = HostDevice;
    const KIND: BackendKind = BackendKind::Host;

    fn open(config: &Config) -> Result<Self> {
        OPENED.fetch_add(1, Ordering::SeqCst);
        Ok(HostPlatform {
            devices: config.host_devices,
            shared: Arc::new(Shared::new(config.compile_cache.clone())),
        })
    }

    fn name(&self) -> String {
        "host".into()
    }

    fn devices(&self) -> Vec<HostDevice> {
        (0..self.devices)
            .map(|ordinal| HostDevice {
                ordinal,
                pool: Arc::default(),
                shared: self.shared.clone(),
            })
            .collect()
    }

    fn deinit(&self) -> Result<()> {
        DEINITIALISED.fetch_add(1, Ordering::SeqCst);
        match self.live_allocations() {
            0 => Ok(()),
            n => Err(Error::Driver {
                backend: BackendKind::Host,
                call: "",
                code: n as i64,
                message: format!("{n} host allocations were still live at deinit"),
            }),
        }
    }

    /// Shared objects for this machine (`ImageFormat::Elf` of its own `e_machine`).
    fn may_run(image: &[u8]) -> bool {
        elf::runs_here(image)
    }
}
