//! The model's backend: one platform with one device that loads programs and has host-memory
//! buffers (no queues). Every driver call yields to the scheduler and panics if it comes
//! after its platform's `deinit` (what a real driver answers with undefined behaviour, L4).
//! It counts opens, deinits, live programs and live buffers for the end-of-execution
//! checks.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use crate::config::Config;
use crate::erased::{PlatformEntry, Platforms};
use crate::error::{Error, Result};
use crate::hal::{self, BackendKind, DeviceInfo, GlobalInfo, MemKind, ParamKind};
use crate::sync::Arc;

// Per-execution counters (reset by the harness; shuttle runs one model thread at a time,
// so std atomics are exact and add no scheduling points of their own).
pub(super) static OPENS: AtomicUsize = AtomicUsize::new(0);
pub(super) static DEINITS: AtomicUsize = AtomicUsize::new(0);
pub(super) static LIVE_PROGRAMS: AtomicUsize = AtomicUsize::new(0);
/// Backend loads (a program loaded twice on one device counts twice).
pub(super) static LOADS: AtomicUsize = AtomicUsize::new(0);
pub(super) static LIVE_BUFFERS: AtomicUsize = AtomicUsize::new(0);

/// Sets the counters to zero, at the start of an execution.
pub(super) fn reset() {
    for counter in [&OPENS, &DEINITS, &LIVE_PROGRAMS, &LOADS, &LIVE_BUFFERS] {
        counter.store(0, SeqCst);
    }
}

/// One platform instance (one generation's driver).
pub(super) struct ModelPlatform {
    deinitialised: Arc<AtomicBool>,
}

pub(super) struct ModelDevice {
    deinitialised: Arc<AtomicBool>,
}

pub(super) struct ModelProgram {
    deinitialised: Arc<AtomicBool>,
}

/// Host memory; its accesses are driver calls (they yield and check the deinit).
pub(super) struct ModelBuffer {
    bytes: Vec<u8>,
}

fn in_range(b: &ModelBuffer, offset: usize, len: usize) -> Result<std::ops::Range<usize>> {
    match offset.checked_add(len) {
        Some(end) if end <= b.bytes.len() => Ok(offset..end),
        _ => Err(Error::invalid("", "out of range")),
    }
}

/// A preemption point inside every driver call, and the check that the driver is still
/// initialised.
fn driver_call(deinitialised: &AtomicBool, call: &str) {
    shuttle::thread::yield_now();
    assert!(
        !deinitialised.load(SeqCst),
        "{call} after the platform's deinit (L4: everything before deinit)"
    );
}

impl hal::Platform for ModelPlatform {
    type Device = ModelDevice;
    const KIND: BackendKind = BackendKind::Reference;

    fn open(_: &Config) -> Result<Self> {
        shuttle::thread::yield_now();
        OPENS.fetch_add(1, SeqCst);
        Ok(ModelPlatform {
            deinitialised: Arc::default(),
        })
    }

    fn name(&self) -> String {
        "model".into()
    }

    fn devices(&self) -> Vec<ModelDevice> {
        vec![ModelDevice {
            deinitialised: self.deinitialised.clone(),
        }]
    }

    fn deinit(&self) -> Result<()> {
        shuttle::thread::yield_now();
        assert!(
            !self.deinitialised.swap(true, SeqCst),
            "platform deinitialised twice (L1: once per init)"
        );
        DEINITS.fetch_add(1, SeqCst);
        Ok(())
    }
}

impl hal::Device for ModelDevice {
    type Buffer = ModelBuffer;
    type Program = ModelProgram;
    type Queue = hal::Never;
    type Event = hal::Never;

    fn info(&self) -> Result<DeviceInfo> {
        driver_call(&self.deinitialised, "Device::info");
        Ok(DeviceInfo::new(
            "model",
            "model",
            BackendKind::Reference,
            1 << 20,
            1,
        ))
    }
    fn alloc(&self, size: usize, _: MemKind) -> Result<ModelBuffer> {
        driver_call(&self.deinitialised, "Device::alloc");
        LIVE_BUFFERS.fetch_add(1, SeqCst);
        Ok(ModelBuffer {
            bytes: vec![0; size],
        })
    }
    fn free(&self, _: ModelBuffer) -> Result<()> {
        driver_call(&self.deinitialised, "Device::free");
        LIVE_BUFFERS.fetch_sub(1, SeqCst);
        Ok(())
    }
    fn read(&self, b: &ModelBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        driver_call(&self.deinitialised, "Device::read");
        dst.copy_from_slice(&b.bytes[in_range(b, offset, dst.len())?]);
        Ok(())
    }
    fn write(&self, b: &mut ModelBuffer, offset: usize, src: &[u8]) -> Result<()> {
        driver_call(&self.deinitialised, "Device::write");
        let range = in_range(b, offset, src.len())?;
        b.bytes[range].copy_from_slice(src);
        Ok(())
    }
    fn fill(&self, b: &mut ModelBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        driver_call(&self.deinitialised, "Device::fill");
        let range = in_range(b, offset, len)?;
        b.bytes[range].fill(value);
        Ok(())
    }
    fn copy(
        &self,
        src: &ModelBuffer,
        so: usize,
        dst: &mut ModelBuffer,
        d: usize,
        len: usize,
    ) -> Result<()> {
        driver_call(&self.deinitialised, "Device::copy");
        let (from, to) = (in_range(src, so, len)?, in_range(dst, d, len)?);
        dst.bytes[to].copy_from_slice(&src.bytes[from]);
        Ok(())
    }
    fn copy_within(&self, b: &mut ModelBuffer, so: usize, d: usize, len: usize) -> Result<()> {
        driver_call(&self.deinitialised, "Device::copy_within");
        let from = in_range(b, so, len)?;
        in_range(b, d, len)?;
        b.bytes.copy_within(from, d);
        Ok(())
    }
    fn with_mapped(&self, b: &mut ModelBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        driver_call(&self.deinitialised, "Device::with_mapped");
        f(&mut b.bytes);
        Ok(())
    }
    fn load(&self, _image: &[u8]) -> Result<ModelProgram> {
        driver_call(&self.deinitialised, "Device::load");
        LIVE_PROGRAMS.fetch_add(1, SeqCst);
        LOADS.fetch_add(1, SeqCst);
        Ok(ModelProgram {
            deinitialised: self.deinitialised.clone(),
        })
    }
    fn validate(&self, _image: &[u8]) -> Result<()> {
        Ok(())
    }
    crate::no_compute!(BackendKind::Reference);
}

impl hal::Program for ModelProgram {
    type Kernel = hal::Never;

    fn kernel(&self, name: &str) -> Result<hal::Never> {
        Err(Error::invalid(
            "Module::kernel",
            format!("no kernel {name} in the model"),
        ))
    }
    fn params(kernel: &hal::Never) -> &[ParamKind] {
        kernel.absurd()
    }
    fn kernels(&self) -> Vec<String> {
        Vec::new()
    }
    fn globals(&self) -> Vec<String> {
        Vec::new()
    }
    fn global(&self, name: &str) -> Result<GlobalInfo> {
        Err(Error::invalid(
            "Module::global",
            format!("no global {name} in the model"),
        ))
    }
    fn read_global(&self, _: &str, _: usize, _: &mut [u8]) -> Result<()> {
        Ok(())
    }
    fn write_global(&self, _: &str, _: usize, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn unload(self) -> Result<()> {
        driver_call(&self.deinitialised, "Program::unload");
        LIVE_PROGRAMS.fetch_sub(1, SeqCst);
        Ok(())
    }
}

/// The model's platforms: the model platform alone.
pub(super) struct Model;

impl Platforms for Model {
    fn platforms() -> Vec<PlatformEntry> {
        vec![PlatformEntry::of::<ModelPlatform>()]
    }
}
