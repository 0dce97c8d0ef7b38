//! Host programs: ELF shared objects loaded from memory.
//!
//! The image is validated (elf.rs), written to a memfd and opened with
//! `dlopen("/proc/self/fd/N")`. The memfd stays open until the `dlclose`: glibc matches an
//! already-loaded library by its path string, so if the fd number could be reused while the
//! old image is loaded, the next `dlopen` of that path would silently return the old code.
//! Nothing is ever written to the file system.
//!
//! Kernels hold the loaded image (an `Arc`), so a function pointer can never outlive its
//! code, even through the raw backend API.

use std::ffi::c_void;
use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use offload_core::hal;
use offload_core::{BackendKind, Error, GlobalInfo, ParamKind, Result, ScalarType};

use crate::elf::{self, SymbolKind};
use crate::uses::Uses;

/// The C signature of a host kernel (see include/offload_host.h).
pub(crate) type KernelFn = unsafe extern "C" fn(args: *const *mut c_void, launch: *const Launch);

/// `offload_launch` of include/offload_host.h (ABI version 2).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Launch {
    pub(crate) grid: [u32; 3],
    pub(crate) block: [u32; 3],
    pub(crate) block_id: [u32; 3],
    pub(crate) shared_size: u32,
    pub(crate) shared: *mut c_void,
}

/// The most dynamic shared memory a host launch may ask for, per block (each thread that
/// runs blocks has one such scratch area per launch).
pub const MAX_SHARED_MEMORY: u32 = 1 << 20;

/// Prefix of the symbol that declares a kernel's parameters.
pub const PARAMS_PREFIX: &str = "offload_params_";

/// A dlopen'ed image and the memfd it was opened from. Field order is drop order: the
/// library is closed before its memfd.
pub(crate) struct Loaded {
    library: libloading::os::unix::Library,
    _memfd: File,
    image: elf::Image,
    /// Queued launches of its kernels: global reads and writes wait for them.
    pub(crate) uses: Uses,
}

impl Drop for Loaded {
    fn drop(&mut self) {
        crate::stats::UNLOADS.fetch_add(1, Ordering::SeqCst);
    }
}

/// A program loaded on a host device.
pub struct HostModule {
    pub(crate) loaded: Arc<Loaded>,
}

impl std::fmt::Debug for HostModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostModule")
            .field("symbols", &self.loaded.image.symbols.len())
            .finish()
    }
}

/// A kernel of a host module.
pub struct HostKernel {
    pub(crate) function: KernelFn,
    pub(crate) params: Vec<ParamKind>,
    /// Keeps the code mapped while the kernel exists (and while launches of it are queued).
    pub(crate) loaded: Arc<Loaded>,
}

impl std::fmt::Debug for HostKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKernel")
            .field("params", &self.params)
            .finish()
    }
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidBinary {
        backend: BackendKind::Host,
        call: "",
        reason: reason.into(),
    }
}

fn not_found(symbol: &str) -> Error {
    Error::SymbolNotFound {
        backend: BackendKind::Host,
        call: "",
        symbol: symbol.to_string(),
        hint: String::new(),
    }
}

fn io(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Driver {
        backend: BackendKind::Host,
        call: "",
        code: -1,
        message: format!("{what}: {e}"),
    }
}

/// Checks that `image` is a loadable host program, without loading it.
pub(crate) fn validate(image: &[u8]) -> Result<()> {
    elf::validate(image)
        .map(drop)
        .map_err(|reason| Error::InvalidBinary {
            backend: BackendKind::Host,
            call: "",
            reason,
        })
}

pub(crate) fn load(image: &[u8]) -> Result<HostModule> {
    let parsed = elf::validate(image).map_err(invalid)?;
    let fd = rustix::fs::memfd_create("offload-module", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| io("memfd_create", e))?;
    let mut file = File::from(fd);
    file.write_all(image)
        .map_err(|e| io("writing the memfd", e))?;
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
    let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL;
    // SAFETY: the image was validated as a shared object for this machine whose headers and
    // segments lie inside it; running its initialisers is what loading a program means (the
    // user chose to run this native code). The path names our own memfd, kept open for the
    // library's whole life (see the module comment).
    let library = unsafe { libloading::os::unix::Library::open(Some(&path), flags) }
        .map_err(|e| invalid(format!("the dynamic loader refused it: {e}")))?;
    crate::stats::LOADS.fetch_add(1, Ordering::SeqCst);
    Ok(HostModule {
        loaded: Arc::new(Loaded {
            library,
            _memfd: file,
            image: parsed,
            uses: Uses::default(),
        }),
    })
}

impl Loaded {
    /// Address of a defined symbol.
    fn address(&self, name: &str) -> Result<*mut c_void> {
        let mut cname = name.as_bytes().to_vec();
        if cname.contains(&0) {
            return Err(not_found(name));
        }
        cname.push(0);
        // SAFETY: we only take the symbol's address (as a raw pointer type); nothing is
        // called or read through it here.
        let symbol =
            unsafe { self.library.get::<*mut c_void>(&cname) }.map_err(|_| not_found(name))?;
        Ok(*symbol)
    }

    /// Bytes of a read-only data symbol, e.g. a kernel's parameter string.
    fn data(&self, name: &str) -> Result<&[u8]> {
        let symbol = self
            .image
            .symbol(name)
            .filter(|s| s.kind == SymbolKind::Object)
            .ok_or_else(|| not_found(name))?;
        let address = self.address(name)?;
        let len = usize::try_from(symbol.size)
            .map_err(|_| invalid(format!("symbol `{name}` is too large")))?;
        // SAFETY: the ELF symbol table says `name` is a data object of `len` bytes, and the
        // library that maps it lives as long as `self`, which the returned slice borrows.
        // Nothing writes to a parameter string.
        Ok(unsafe { std::slice::from_raw_parts(address.cast::<u8>(), len) })
    }
}

fn parse_params(kernel: &str, bytes: &[u8]) -> Result<Vec<ParamKind>> {
    let text = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
    text.iter()
        .map(|c| match c {
            b'b' => Ok(ParamKind::Buffer),
            b'c' => Ok(ParamKind::Typed(ScalarType::I8)),
            b'C' => Ok(ParamKind::Typed(ScalarType::U8)),
            b'h' => Ok(ParamKind::Typed(ScalarType::I16)),
            b'H' => Ok(ParamKind::Typed(ScalarType::U16)),
            b'i' => Ok(ParamKind::Typed(ScalarType::I32)),
            b'I' => Ok(ParamKind::Typed(ScalarType::U32)),
            b'q' => Ok(ParamKind::Typed(ScalarType::I64)),
            b'Q' => Ok(ParamKind::Typed(ScalarType::U64)),
            b'f' => Ok(ParamKind::Typed(ScalarType::F32)),
            b'd' => Ok(ParamKind::Typed(ScalarType::F64)),
            b'1' => Ok(ParamKind::Scalar(1)),
            b'2' => Ok(ParamKind::Scalar(2)),
            b'4' => Ok(ParamKind::Scalar(4)),
            b'8' => Ok(ParamKind::Scalar(8)),
            other => Err(invalid(format!(
                "`{PARAMS_PREFIX}{kernel}` has `{}`; expected 'b' (buffer), a type letter \
                 (c C h H i I q Q f d) or a size ('1', '2', '4', '8')",
                char::from(*other)
            ))),
        })
        .collect()
}

impl hal::Program for HostModule {
    type Kernel = HostKernel;

    fn kernel(&self, name: &str) -> Result<HostKernel> {
        let loaded = &self.loaded;
        loaded
            .image
            .symbol(name)
            .filter(|s| s.kind == SymbolKind::Function)
            .ok_or_else(|| not_found(name))?;
        let params_symbol = format!("{PARAMS_PREFIX}{name}");
        let declared = loaded
            .data(&params_symbol)
            .map_err(|_| Error::SymbolNotFound {
                backend: BackendKind::Host,
                call: "",
                symbol: name.to_string(),
                hint: format!(
                    "the image exports a function `{name}` but not `{params_symbol}`, its \
                 parameter declaration: define the kernel with OFFLOAD_KERNEL({name}, \"...\") \
                 from offload_host.h"
                ),
            })?;
        let params = parse_params(name, declared)?;
        let address = loaded.address(name)?;
        // SAFETY: the symbol is a function (ELF type STT_FUNC) exported under the host
        // kernel ABI, which the image declares by exporting `offload_params_<name>`.
        let function = unsafe { std::mem::transmute::<*mut c_void, KernelFn>(address) };
        Ok(HostKernel {
            function,
            params,
            loaded: loaded.clone(),
        })
    }

    fn params(kernel: &HostKernel) -> &[ParamKind] {
        &kernel.params
    }

    /// Exported functions that declare their parameters (`offload_params_<name>`).
    fn kernels(&self) -> Vec<String> {
        let symbols = &self.loaded.image.symbols;
        symbols
            .iter()
            .filter(|s| s.kind == SymbolKind::Function)
            .filter(|s| {
                let declared = format!("{PARAMS_PREFIX}{}", s.name);
                symbols
                    .iter()
                    .any(|p| p.kind == SymbolKind::Object && p.name == declared)
            })
            .map(|s| s.name.clone())
            .collect()
    }

    /// Exported data objects other than the parameter declarations.
    fn globals(&self) -> Vec<String> {
        self.loaded
            .image
            .symbols
            .iter()
            .filter(|s| s.kind == SymbolKind::Object && !s.name.starts_with(PARAMS_PREFIX))
            .map(|s| s.name.clone())
            .collect()
    }

    fn global(&self, name: &str) -> Result<GlobalInfo> {
        let (address, size, _) = self.writable_global(name)?;
        Ok(GlobalInfo {
            address: address as u64,
            size,
        })
    }

    fn read_global(&self, name: &str, offset: usize, dst: &mut [u8]) -> Result<()> {
        let (address, size, _) = self.writable_global(name)?;
        check(name, size, offset, dst.len())?;
        self.loaded.uses.wait();
        // SAFETY: the range lies inside the symbol's `size` bytes (checked), which stay mapped
        // while the module is loaded (`&self`).
        unsafe { std::ptr::copy_nonoverlapping(address.add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn write_global(&self, name: &str, offset: usize, src: &[u8]) -> Result<()> {
        let (address, size, writable) = self.writable_global(name)?;
        if !writable {
            return Err(Error::InvalidArgument {
                call: "",
                reason: format!("host global `{name}` is read-only (const data)"),
            });
        }
        check(name, size, offset, src.len())?;
        self.loaded.uses.wait();
        // SAFETY: the range lies inside the symbol's bytes (checked), in a writable section
        // (checked), mapped while the module is loaded.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), address.add(offset), src.len()) };
        Ok(())
    }

    /// Closes the image (`dlclose`, then its memfd) once its kernels are gone too.
    fn unload(self) -> Result<()> {
        drop(self);
        Ok(())
    }
}

impl HostModule {
    fn writable_global(&self, name: &str) -> Result<(*mut u8, usize, bool)> {
        let symbol = self
            .loaded
            .image
            .symbol(name)
            .filter(|s| s.kind == SymbolKind::Object)
            .ok_or_else(|| not_found(name))?;
        let size = usize::try_from(symbol.size).map_err(|_| not_found(name))?;
        Ok((self.loaded.address(name)?.cast(), size, symbol.writable))
    }
}

fn check(name: &str, size: usize, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::InvalidArgument {
            call: "",
            reason: format!(
                "range {offset}..+{len} is outside host global `{name}` ({size} bytes)"
            ),
        }),
    }
}
