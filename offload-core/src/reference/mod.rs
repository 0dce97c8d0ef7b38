//! The reference backend: safe, simple, in-memory.
//!
//! Like wgpu-hal's `noop` backend it really performs its commands (on `Vec<u8>`s), so it is
//! the oracle that tests and the conformance model compare real backends with, and the
//! backend the core's own documentation runs on. It is never registered by default.
//!
//! Its programs are a small text format that names built-in kernels and globals:
//!
//! ```text
//! OFFLOAD-REFERENCE 1
//! kernel add_one      # (buffer of u32, n: u32): buf[i] += 1 for i < n
//! kernel fill         # (buffer of u32, value: u32, n: u32): buf[i] = value for i < n
//! kernel noop         # ()
//! kernel read_global  # (buffer): copies global `g` to the start of the buffer
//! global g 4          # a global of 4 zeroed bytes
//! ```
//!
//! Thread `i` of a launch is `block_id.x * block.x + thread.x` (one dimension).
//!
//! Queued work is recorded and runs later (queue.rs): at a sync, an event, or a host access
//! to the device's memory or globals.

mod queue;

use crate::sync::{
    Arc, AtomicU64, AtomicUsize, Mutex, OnceLock, Ordering, RwLock, RwLockWriteGuard, Weak, lock,
    read, statics, write,
};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::erased::{PlatformEntry, Platforms};
use crate::error::{Error, Result};
use crate::hal::{
    self, BackendKind, DeviceInfo, Dims, Exported, GlobalInfo, KernelArg, KernelOf, MemKind,
    ParamKind, ScalarType,
};

use queue::{Pending, Queues, Work};
pub use queue::{RefEvent, RefQueue};

/// Memory each reference device claims to have: 1 GiB.
pub const DEVICE_MEMORY: u64 = 1 << 30;

/// The reference platform: `config.host_devices` devices of [`DEVICE_MEMORY`] bytes.
///
/// ```
/// use offload_core::hal::{Device, Platform};
/// use offload_core::{Config, MemKind, reference::Reference};
/// let platform = Reference::open(&Config::default())?;
/// let dev = platform.devices().remove(0);
/// let mut buf = dev.alloc(4, MemKind::Device)?;
/// dev.write(&mut buf, 0, &[1, 2, 3, 4])?;
/// dev.free(buf)?;
/// assert_eq!(platform.live_allocations(), 0);
/// platform.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Reference {
    devices: usize,
    /// Allocations not yet freed, shared with the devices.
    live: Arc<AtomicUsize>,
    /// Whether host accesses run the queued work first (only [`Unordered`] says no).
    ordered: bool,
}

/// A reference device.
pub struct RefDevice {
    ordinal: usize,
    live: Arc<AtomicUsize>,
    queues: Arc<Queues>,
    ordered: bool,
}

impl std::fmt::Debug for RefDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefDevice")
            .field("ordinal", &self.ordinal)
            .field("ordered", &self.ordered)
            .finish()
    }
}

impl RefBuffer {
    fn len(&self) -> usize {
        read(&self.bytes).len()
    }
}

/// A reference allocation: its bytes, shared with the buffers that imported it in this
/// process.
#[derive(Debug)]
pub struct RefBuffer {
    bytes: Arc<Bytes>,
    /// Its id in [`EXPORTABLE`] if it was allocated exportable (and is not an import).
    exportable: Option<u64>,
}

statics! {
    /// The exportable allocations of this process, by id: the reference backend shares memory
    /// only within one process (an import looks its id up here), so a handle from another
    /// process, or a forged one, is `InvalidIpcHandle`.
    static EXPORTABLE: Mutex<Vec<(u64, Weak<Bytes>)>> = Mutex::new(Vec::new());
}

/// A reference allocation's bytes.
type Bytes = RwLock<Vec<u8>>;
statics! {
    static NEXT_EXPORTABLE: AtomicU64 = AtomicU64::new(1);
}

fn invalid_handle(reason: impl Into<String>) -> Error {
    Error::InvalidIpcHandle {
        backend: Some(BackendKind::Reference),
        call: "",
        reason: reason.into(),
    }
}

impl Reference {
    /// Allocations not yet freed.
    ///
    /// ```
    /// use offload_core::{Config, hal::Platform, reference::Reference};
    /// assert_eq!(Reference::open(&Config::default())?.live_allocations(), 0);
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn live_allocations(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

fn range(size: usize, offset: usize, len: usize) -> Result<std::ops::Range<usize>> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(offset..end),
        _ => Err(Error::invalid(
            "",
            "reference backend: range outside buffer",
        )),
    }
}

impl hal::Platform for Reference {
    type Device = RefDevice;
    const KIND: BackendKind = BackendKind::Reference;

    fn open(config: &Config) -> Result<Self> {
        Ok(Reference {
            devices: config.host_devices,
            live: Arc::new(AtomicUsize::new(0)),
            ordered: true,
        })
    }

    fn name(&self) -> String {
        "reference".into()
    }

    fn devices(&self) -> Vec<RefDevice> {
        (0..self.devices)
            .map(|ordinal| RefDevice {
                ordinal,
                live: self.live.clone(),
                queues: Arc::default(),
                ordered: self.ordered,
            })
            .collect()
    }

    fn deinit(&self) -> Result<()> {
        match self.live_allocations() {
            0 => Ok(()),
            n => Err(Error::Driver {
                backend: BackendKind::Reference,
                call: "",
                code: n as i64,
                message: format!("{n} allocations were never freed"),
            }),
        }
    }

    /// Only its own text format ([`MAGIC`]).
    fn may_run(image: &[u8]) -> bool {
        hal::ImageFormat::of(image) == hal::ImageFormat::Reference
    }
}

impl hal::Device for RefDevice {
    type Buffer = RefBuffer;
    type Program = RefModule;
    type Queue = RefQueue;
    type Event = RefEvent;

    fn info(&self) -> Result<DeviceInfo> {
        let mut info = DeviceInfo::new(
            format!("reference device {}", self.ordinal),
            "offload",
            BackendKind::Reference,
            DEVICE_MEMORY,
            1,
        );
        info.driver_version = Some(env!("CARGO_PKG_VERSION").into());
        info.max_grid = Some([u32::MAX; 3]);
        info.max_alloc = Some(DEVICE_MEMORY);
        Ok(info)
    }

    fn alloc(&self, size: usize, _kind: MemKind) -> Result<RefBuffer> {
        if size as u64 > DEVICE_MEMORY {
            return Err(Error::OutOfMemory {
                backend: BackendKind::Reference,
                call: "",
                requested: size as u64,
                reason: format!("the device has {DEVICE_MEMORY} bytes"),
            });
        }
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(size)
            .map_err(|e| Error::OutOfMemory {
                backend: BackendKind::Reference,
                call: "",
                requested: size as u64,
                reason: e.to_string(),
            })?;
        bytes.resize(size, 0);
        self.live.fetch_add(1, Ordering::SeqCst);
        Ok(RefBuffer {
            bytes: Arc::new(RwLock::new(bytes)),
            exportable: None,
        })
    }

    fn free(&self, buffer: RefBuffer) -> Result<()> {
        if let Some(id) = buffer.exportable {
            lock(&EXPORTABLE).retain(|(e, _)| *e != id);
        }
        self.live.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn read(&self, buffer: &RefBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        let bytes = read(&buffer.bytes);
        let r = range(bytes.len(), offset, dst.len())?;
        dst.copy_from_slice(&bytes[r]);
        Ok(())
    }

    fn write(&self, buffer: &mut RefBuffer, offset: usize, src: &[u8]) -> Result<()> {
        let mut bytes = bytes_mut(buffer);
        let r = range(bytes.len(), offset, src.len())?;
        bytes[r].copy_from_slice(src);
        Ok(())
    }

    fn fill(&self, buffer: &mut RefBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        let mut bytes = bytes_mut(buffer);
        let r = range(bytes.len(), offset, len)?;
        bytes[r].fill(value);
        Ok(())
    }

    fn copy(
        &self,
        src: &RefBuffer,
        so: usize,
        dst: &mut RefBuffer,
        d: usize,
        len: usize,
    ) -> Result<()> {
        if Arc::ptr_eq(&src.bytes, &dst.bytes) {
            // An import of the same memory: one lock, overlapping ranges allowed.
            return self.copy_within(dst, so, d, len);
        }
        let src = read(&src.bytes);
        let mut dst = bytes_mut(dst);
        let s = range(src.len(), so, len)?;
        let t = range(dst.len(), d, len)?;
        dst[t].copy_from_slice(&src[s]);
        Ok(())
    }

    fn copy_within(&self, buffer: &mut RefBuffer, so: usize, d: usize, len: usize) -> Result<()> {
        let mut bytes = bytes_mut(buffer);
        let s = range(bytes.len(), so, len)?;
        range(bytes.len(), d, len)?;
        bytes.copy_within(s, d);
        Ok(())
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        parse(image).map(drop)
    }

    /// A host access runs the device's queued work first (unless [`Unordered`]): here, as
    /// a wait the runtime runs with no lock of the buffer held, since that work may hold
    /// host functions that use this very buffer (L7). The accesses themselves run none.
    fn pending(&self, _: &RefBuffer) -> Option<hal::Pending> {
        if !self.ordered || self.queues.all_idle() {
            return None;
        }
        let queues = self.queues.clone();
        Some(Box::new(move || {
            queues.flush_all();
            Ok(())
        }))
    }

    /// The bytes are host memory: always mappable (an exportable or imported buffer
    /// too: the reference backend shares memory only within this process, under its lock).
    fn with_mapped(&self, buffer: &mut RefBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        f(&mut bytes_mut(buffer));
        Ok(())
    }

    fn load(&self, image: &[u8]) -> Result<RefModule> {
        let mut module = parse(image)?;
        module.queues = self.ordered.then(|| self.queues.clone());
        Ok(module)
    }

    fn queue(&self) -> Result<RefQueue> {
        let pending = Arc::new(Pending::default());
        self.queues.add(&pending);
        Ok(RefQueue { pending })
    }
}

fn bytes_mut(buffer: &mut RefBuffer) -> RwLockWriteGuard<'_, Vec<u8>> {
    write(&buffer.bytes)
}

impl hal::Queue<RefDevice> for RefQueue {
    /// Runs the queue's recorded work (L4: destroying a queue drains it).
    fn destroy(self) -> Result<()> {
        self.pending.flush();
        Ok(())
    }

    // Unverified code runs behind this call: the caller holds the launch contract.
    #[allow(unsafe_code)]
    unsafe fn launch(
        &self,
        kernel: &KernelOf<RefDevice>,
        dims: &Dims,
        args: &[KernelArg<'_, RefBuffer>],
    ) -> Result<()> {
        self.pending.push(prepare(kernel, dims, args)?);
        Ok(())
    }

    fn enqueue_write(&self, buffer: &RefBuffer, offset: usize, data: Vec<u8>) -> Result<()> {
        let r = range(buffer.len(), offset, data.len())?;
        let bytes = buffer.bytes.clone();
        self.pending
            .push(Box::new(move || write(&bytes)[r].copy_from_slice(&data)));
        Ok(())
    }

    fn enqueue_fill(
        &self,
        buffer: &RefBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        let r = range(buffer.len(), offset, len)?;
        if pattern.is_empty() || len % pattern.len() != 0 {
            return Err(Error::invalid(
                "",
                "the pattern's length must divide the length filled",
            ));
        }
        let (bytes, pattern) = (buffer.bytes.clone(), pattern.to_vec());
        self.pending.push(Box::new(move || {
            for (byte, p) in write(&bytes)[r].iter_mut().zip(pattern.iter().cycle()) {
                *byte = *p;
            }
        }));
        Ok(())
    }

    fn enqueue_copy(
        &self,
        src: &RefBuffer,
        src_offset: usize,
        dst: &RefBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let s = range(src.len(), src_offset, len)?;
        let t = range(dst.len(), dst_offset, len)?;
        let (from, to) = (src.bytes.clone(), dst.bytes.clone());
        self.pending.push(Box::new(move || {
            if Arc::ptr_eq(&from, &to) {
                write(&to).copy_within(s, t.start);
            } else {
                let from = read(&from);
                write(&to)[t].copy_from_slice(&from[s]);
            }
        }));
        Ok(())
    }

    fn enqueue_host_fn(&self, f: hal::HostFn) -> Result<()> {
        self.pending.push(f);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.pending.flush();
        Ok(())
    }

    fn is_idle(&self) -> Result<bool> {
        Ok(self.pending.is_idle())
    }

    fn record(&self) -> Result<RefEvent> {
        let at = Arc::new(OnceLock::new());
        let mark = at.clone();
        self.pending.push(Box::new(move || {
            // Set once: the first time the work ran is the event's time.
            let _ = mark.set(Instant::now());
        }));
        Ok(RefEvent {
            at,
            queue: Arc::downgrade(&self.pending),
        })
    }

    /// Runs the event's queue up to (and past) the event now: running earlier work early
    /// keeps every order.
    fn wait_event(&self, event: &RefEvent) -> Result<()> {
        event.sync();
        Ok(())
    }
}

impl hal::Event for RefEvent {
    fn sync(&self) -> Result<()> {
        RefEvent::sync(self);
        Ok(())
    }

    fn is_complete(&self) -> Result<bool> {
        Ok(self.at.get().is_some())
    }

    fn elapsed_since(&self, start: &Self) -> Result<Duration> {
        let (start, end) = (start.sync(), RefEvent::sync(self));
        Ok(end.saturating_duration_since(start))
    }

    fn destroy(self) -> Result<()> {
        Ok(())
    }
}

/// Memory shared within this process: an exportable allocation's id travels in the payload.
impl hal::Ipc for RefDevice {
    fn uuid(&self) -> [u8; 16] {
        let mut uuid = *b"offload-ref-dev\0";
        uuid[15] = self.ordinal as u8;
        uuid
    }

    fn alloc_exportable(&self, size: usize, kind: MemKind) -> Result<RefBuffer> {
        let mut buffer = hal::Device::alloc(self, size, kind)?;
        let id = NEXT_EXPORTABLE.fetch_add(1, Ordering::Relaxed);
        lock(&EXPORTABLE).push((id, Arc::downgrade(&buffer.bytes)));
        buffer.exportable = Some(id);
        Ok(buffer)
    }

    fn export(&self, buffer: &RefBuffer) -> Result<Exported> {
        let id = buffer.exportable.ok_or_else(|| {
            Error::invalid(
                "",
                "reference buffer was not allocated exportable (Device::alloc_exportable)",
            )
        })?;
        Ok(Exported {
            size: read(&buffer.bytes).len() as u64,
            payload: id.to_le_bytes().to_vec(),
            fd: None,
        })
    }

    fn import(&self, exported: Exported) -> Result<RefBuffer> {
        if exported.fd.is_some() {
            return Err(invalid_handle(
                "a reference handle carries no file descriptor",
            ));
        }
        let id = <[u8; 8]>::try_from(exported.payload.as_slice())
            .map(u64::from_le_bytes)
            .map_err(|_| invalid_handle("the payload is not a reference allocation id"))?;
        let bytes = lock(&EXPORTABLE)
            .iter()
            .find(|(e, _)| *e == id)
            .and_then(|(_, bytes)| bytes.upgrade())
            .ok_or_else(|| {
                invalid_handle(format!(
                    "no live exportable allocation {id} in this process (the reference \
                     backend shares memory only within one process)"
                ))
            })?;
        if read(&bytes).len() as u64 != exported.size {
            return Err(invalid_handle(format!(
                "allocation {id} has {} bytes, the handle says {}",
                read(&bytes).len(),
                exported.size
            )));
        }
        self.live.fetch_add(1, Ordering::SeqCst);
        Ok(RefBuffer {
            bytes,
            exportable: None,
        })
    }
}

/// The header line of a reference program.
pub const MAGIC: &str = crate::hal::REFERENCE_MAGIC;

/// The built-in kernels and their parameters.
const KERNELS: [(&str, &[ParamKind]); 4] = [
    (
        "add_one",
        &[ParamKind::Buffer, ParamKind::Typed(ScalarType::U32)],
    ),
    (
        "fill",
        &[
            ParamKind::Buffer,
            ParamKind::Typed(ScalarType::U32),
            ParamKind::Typed(ScalarType::U32),
        ],
    ),
    ("noop", &[]),
    ("read_global", &[ParamKind::Buffer]),
];

/// A program with every built-in kernel and a 4-byte global `g`: the fixture the core's
/// documentation and the conformance suite use.
///
/// ```
/// let image = offload_core::reference::fixture_image();
/// assert!(image.starts_with(b"OFFLOAD-REFERENCE 1"));
/// ```
pub fn fixture_image() -> Vec<u8> {
    let mut text = String::from(MAGIC);
    for (name, _) in KERNELS {
        text.push_str("\nkernel ");
        text.push_str(name);
    }
    text.push_str("\nglobal g 4\n");
    text.into_bytes()
}

/// A loaded reference program.
pub struct RefModule {
    kernels: Vec<String>,
    globals: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    /// The device's queues, run before a global is read or written (queued `read_global`
    /// launches read them); `None` when [`Unordered`].
    queues: Option<Arc<Queues>>,
}

impl std::fmt::Debug for RefModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefModule")
            .field("kernels", &self.kernels)
            .finish()
    }
}

impl RefModule {
    fn host_access(&self) {
        if let Some(queues) = &self.queues {
            queues.flush_all();
        }
    }
}

/// A kernel of a reference program.
#[derive(Debug)]
pub struct RefKernel {
    name: String,
    params: &'static [ParamKind],
    /// The module's globals, for `read_global`.
    globals: Arc<Mutex<HashMap<String, Vec<u8>>>>,
}

fn invalid_binary(reason: impl Into<String>) -> Error {
    Error::InvalidBinary {
        backend: BackendKind::Reference,
        call: "",
        reason: reason.into(),
    }
}

fn parse(image: &[u8]) -> Result<RefModule> {
    let text = std::str::from_utf8(image).map_err(|_| invalid_binary("not UTF-8 text"))?;
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(invalid_binary(format!("does not start with `{MAGIC}`")));
    }
    let mut kernels = Vec::new();
    let mut globals = HashMap::new();
    for line in lines {
        let line = line.split('#').next().unwrap_or("").trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [] => {}
            ["kernel", name] if KERNELS.iter().any(|(k, _)| k == name) => {
                kernels.push((*name).to_string())
            }
            ["global", name, size] => {
                let size: usize = size
                    .parse()
                    .ok()
                    .filter(|&n| n > 0 && n <= 1 << 20)
                    .ok_or_else(|| invalid_binary(format!("bad global size in `{line}`")))?;
                globals.insert((*name).to_string(), vec![0; size]);
            }
            _ => return Err(invalid_binary(format!("cannot read `{line}`"))),
        }
    }
    Ok(RefModule {
        kernels,
        globals: Arc::new(Mutex::new(globals)),
        queues: None,
    })
}

fn symbol(name: &str) -> Error {
    Error::SymbolNotFound {
        backend: BackendKind::Reference,
        call: "",
        symbol: name.to_string(),
        hint: String::new(),
    }
}

fn u32_at(bytes: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[..4]);
    u32::from_ne_bytes(b)
}

impl hal::Program for RefModule {
    type Kernel = RefKernel;

    fn kernel(&self, name: &str) -> Result<RefKernel> {
        if !self.kernels.iter().any(|k| k == name) {
            return Err(symbol(name));
        }
        let params = KERNELS
            .iter()
            .find(|(k, _)| *k == name)
            .map_or(&[][..], |(_, p)| p);
        Ok(RefKernel {
            name: name.to_string(),
            params,
            globals: self.globals.clone(),
        })
    }

    fn params(kernel: &RefKernel) -> &[ParamKind] {
        kernel.params
    }

    fn kernels(&self) -> Vec<String> {
        self.kernels.clone()
    }

    fn globals(&self) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.globals).keys().cloned().collect();
        names.sort();
        names
    }

    fn global(&self, name: &str) -> Result<GlobalInfo> {
        let globals = lock(&self.globals);
        let g = globals.get(name).ok_or_else(|| symbol(name))?;
        Ok(GlobalInfo {
            address: g.as_ptr() as u64,
            size: g.len(),
        })
    }

    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.host_access();
        let globals = lock(&self.globals);
        let g = globals.get(name).ok_or_else(|| symbol(name))?;
        let r = range(g.len(), offset, dst.len())?;
        dst.copy_from_slice(&g[r]);
        Ok(())
    }

    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        self.host_access();
        let mut globals = lock(&self.globals);
        let g = globals.get_mut(name).ok_or_else(|| symbol(name))?;
        let r = range(g.len(), offset, src.len())?;
        g[r].copy_from_slice(src);
        Ok(())
    }

    fn unload(self) -> Result<()> {
        Ok(())
    }
}

/// A launch of a built-in kernel, checked now, to run when its queue runs.
fn prepare(kernel: &RefKernel, dims: &Dims, args: &[KernelArg<'_, RefBuffer>]) -> Result<Work> {
    if dims.shared_memory > 0 {
        return Err(Error::Unsupported {
            backend: BackendKind::Reference,
            call: "",
            reason: "the reference kernels use no dynamic shared memory".into(),
        });
    }
    let threads = u64::from(dims.grid[0]) * u64::from(dims.block[0]);
    let scalar = |i: usize| match args.get(i) {
        Some(KernelArg::Scalar(b)) if b.len() == 4 => Ok(u32_at(b)),
        _ => Err(Error::invalid("", format!("argument {i} is not a u32"))),
    };
    let buffer = |i: usize| match args.get(i) {
        Some(KernelArg::Buffer(b)) => Ok((b.bytes.clone(), 0..usize::MAX)),
        Some(KernelArg::Range {
            buffer,
            offset,
            len,
        }) => Ok((buffer.bytes.clone(), *offset..offset + len)),
        _ => Err(Error::invalid("", format!("argument {i} is not a buffer"))),
    };
    match kernel.name.as_str() {
        "noop" => Ok(Box::new(|| {})),
        "add_one" | "fill" => {
            let (buf, range) = buffer(0)?;
            let (value, n) = if kernel.name == "fill" {
                (Some(scalar(1)?), scalar(2)?)
            } else {
                (None, scalar(1)?)
            };
            Ok(Box::new(move || {
                let mut all = write(&buf);
                let end = range.end.min(all.len());
                let bytes = &mut all[range.start..end];
                let count = u64::from(n).min(threads).min((bytes.len() / 4) as u64) as usize;
                for word in bytes.chunks_exact_mut(4).take(count) {
                    let v = value.unwrap_or_else(|| u32_at(word).wrapping_add(1));
                    word.copy_from_slice(&v.to_ne_bytes());
                }
            }))
        }
        "read_global" => {
            let (buf, range) = buffer(0)?;
            let globals = kernel.globals.clone();
            Ok(Box::new(move || {
                let g = lock(&globals).get("g").cloned().unwrap_or_default();
                let mut all = write(&buf);
                let end = range.end.min(all.len());
                let bytes = &mut all[range.start..end];
                let n = g.len().min(bytes.len());
                bytes[..n].copy_from_slice(&g[..n]);
            }))
        }
        other => Err(symbol(other)),
    }
}

/// Default platforms of [`Offload`]: the reference backend only.
#[derive(Debug)]
pub struct Only;

impl Platforms for Only {
    fn platforms() -> Vec<PlatformEntry> {
        vec![PlatformEntry::with_ipc::<Reference>()]
    }
}

/// A runtime type whose default platform is the reference backend (for tests and docs).
///
/// ```
/// let rt = offload_core::reference::Offload::init()?;
/// assert_eq!(rt.devices()?.len(), 1);
/// # Ok::<(), offload_core::Error>(())
/// ```
pub type Offload<S = crate::Ready> = crate::Offload<S, Only>;

/// The reference backend with one ordering deliberately broken: host reads and writes do
/// not wait for queued work. It exists to show that the conformance suite catches a backend
/// that breaks Q1 (offload-core's conformance test runs the suite on it and expects a
/// failure); never use it for anything else.
///
/// ```
/// use offload_core::hal::{Device, Platform, Queue};
/// use offload_core::{Config, MemKind, reference::Unordered};
/// let platform = Unordered::open(&Config::default())?;
/// let dev = platform.devices().remove(0);
/// let mut buf = dev.alloc(4, MemKind::Device)?;
/// let q = dev.queue()?;
/// q.enqueue_write(&buf, 0, vec![7; 4])?;
/// let mut out = [0u8; 4];
/// dev.read(&buf, 0, &mut out)?;
/// assert_eq!(out, [0; 4]); // the queued write has not run: the broken ordering
/// q.destroy()?;
/// # dev.free(buf)?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Unordered(Reference);

impl hal::Platform for Unordered {
    type Device = RefDevice;
    const KIND: BackendKind = BackendKind::Reference;

    fn open(config: &Config) -> Result<Self> {
        let mut reference = Reference::open(config)?;
        reference.ordered = false;
        Ok(Unordered(reference))
    }

    fn name(&self) -> String {
        "reference-unordered".into()
    }

    fn devices(&self) -> Vec<RefDevice> {
        self.0.devices()
    }

    fn deinit(&self) -> Result<()> {
        self.0.deinit()
    }

    fn may_run(image: &[u8]) -> bool {
        Reference::may_run(image)
    }
}

/// Platforms of the broken-ordering runtime: [`Unordered`] only.
#[derive(Debug)]
pub struct UnorderedOnly;

impl Platforms for UnorderedOnly {
    fn platforms() -> Vec<PlatformEntry> {
        vec![PlatformEntry::of::<Unordered>()]
    }
}
