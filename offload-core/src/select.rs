//! Which devices can run a program ([`Offload::devices_for`]), decided without loading it
//! and without opening a platform that cannot take it.
//!
//! For an image, each platform entry is asked first, by the image's container alone
//! ([`crate::hal::Platform::may_run`]), whether its devices may run it; only those that may
//! are opened (once per generation, as any first use), and their devices' `validate` —
//! the checks `load` makes, without loading — decides. For source, the devices with a
//! compiler for its language: whether a device compiles it is known only once its platform
//! is open, so every platform opens.

use crate::error::Result;
use crate::handles::{Device, Program};
use crate::typestate::{Offload, Ready};

impl<P> Offload<Ready, P> {
    /// The devices that can run `program`, in platform order: for an image, the devices
    /// whose backend may take its container and whose `validate` accepts it (no platform of
    /// another format is opened, nothing is loaded); for a program from source, the devices
    /// with a compiler for its language.
    ///
    /// ```
    /// use offload::{BackendKind, Offload, Program};
    /// let rt = Offload::init()?;
    /// let program = Program::new(offload::host::fixtures::KERNELS);
    /// let devices = rt.devices_for(&program)?;
    /// assert_eq!(devices.len(), 1);
    /// assert_eq!(devices[0].backend(), BackendKind::Host);
    /// // Bytes of no known format: no device, and no platform opened to find out.
    /// assert!(rt.devices_for(&Program::new(b"random bytes"))?.is_empty());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn devices_for(&self, program: &Program) -> Result<Vec<Device>> {
        match program.source() {
            Some(source) => {
                let language = source.language();
                self.select(|_| true, |raw| raw.compiler(language).is_ok())
            }
            None => self.devices_for_image(program.image()),
        }
    }

    /// The devices that can run `image` (see [`devices_for`](Offload::devices_for)).
    ///
    /// ```
    /// use offload::Offload;
    /// let rt = Offload::init()?;
    /// assert_eq!(rt.devices_for_image(&offload::host::fixtures::KERNELS)?.len(), 1);
    /// assert!(rt.devices_for_image(&[0xde, 0xad])?.is_empty());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn devices_for_image(&self, image: &[u8]) -> Result<Vec<Device>> {
        self.select(
            |slot| slot.may_run(image),
            |raw| raw.validate(image).is_ok(),
        )
    }

    /// The devices of the platforms `platform` admits (opening them) that `device` admits.
    fn select(
        &self,
        platform: impl Fn(&crate::runtime::platforms::PlatformSlot) -> bool,
        device: impl Fn(&dyn crate::erased::DynDevice) -> bool,
    ) -> Result<Vec<Device>> {
        let generation = self.held();
        generation.with_live(|live| {
            Ok(live
                .platforms
                .iter()
                .enumerate()
                .filter(|(_, slot)| platform(slot))
                .flat_map(|(index, _)| live.devices_of(index, &generation.config))
                .filter(|(_, raw)| device(raw.as_ref()))
                .map(|(key, _)| Device::new(generation.clone(), key, live.backend(key)))
                .collect())
        })
    }
}
