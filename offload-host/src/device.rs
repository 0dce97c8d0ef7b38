//! The `hal::Device` impl of a CPU device of the host platform ([`HostDevice`], shared.rs): memory,
//! programs and making queues (launches and events are the queue's, queue.rs); and its
//! `hal::Ipc` impl, memory shared between processes as sealed memfds.

use offload_core::hal;
use offload_core::{BackendKind, CompilerId, DeviceInfo, Error, Language, MemKind, Result, Source};

use crate::memory::HostBuffer;
use crate::program::{self, HostModule};
use crate::queue::{HostEvent, HostQueue};
use crate::shared::HostDevice;
use crate::{compiler, stream};

/// What an exportable host allocation's payload says: these bytes, then nothing (the size
/// travels in the handle, the memory as the memfd).
const IPC_PAYLOAD: &[u8; 8] = b"OFHOST01";

fn oom(requested: usize, reason: String) -> Error {
    Error::OutOfMemory {
        backend: BackendKind::Host,
        call: "",
        requested: requested as u64,
        reason,
    }
}

impl hal::Device for HostDevice {
    type Buffer = HostBuffer;
    type Program = HostModule;
    type Queue = HostQueue;
    type Event = HostEvent;

    /// Read from the system once per platform (`/proc/cpuinfo`, `uname`), then copied.
    fn info(&self) -> Result<DeviceInfo> {
        let mut info = self.shared.info().clone();
        info.name = format!("host cpu {} ({})", self.ordinal, info.name);
        Ok(info)
    }

    fn alloc(&self, size: usize, _kind: MemKind) -> Result<HostBuffer> {
        let memory = self.shared.memory();
        if size as u64 > memory {
            return Err(oom(size, format!("the host has {memory} bytes of memory")));
        }
        let buffer =
            HostBuffer::new(size).ok_or_else(|| oom(size, "the allocator refused".into()))?;
        Ok(buffer.counted(self.shared.clone()))
    }

    /// Releases the buffer, or defers the release behind queued work that uses it (Q1). A
    /// mapping of another process's memory is the exception: it is freed when that process
    /// unmaps it, which it must see done, queued work included (I3), so this waits for the
    /// work first.
    fn free(&self, buffer: HostBuffer) -> Result<()> {
        if buffer.is_mapping() {
            buffer.mem.uses.wait();
        }
        drop(buffer);
        Ok(())
    }

    #[inline]
    fn read(&self, buffer: &HostBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        buffer.mem.check(offset, dst.len())?;
        buffer.mem.uses.wait();
        buffer.mem.read(offset, dst)
    }

    #[inline]
    fn write(&self, buffer: &mut HostBuffer, offset: usize, src: &[u8]) -> Result<()> {
        buffer.mem.check(offset, src.len())?;
        buffer.mem.uses.wait();
        buffer.mem.write(offset, src)
    }

    fn fill(&self, buffer: &mut HostBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        buffer.mem.check(offset, len)?;
        buffer.mem.uses.wait();
        buffer.mem.fill(offset, len, &[value])
    }

    #[inline]
    fn copy(
        &self,
        src: &HostBuffer,
        so: usize,
        dst: &mut HostBuffer,
        d: usize,
        len: usize,
    ) -> Result<()> {
        // `Memory::copy_from` checks both ranges before it copies (the caller, offload's
        // core, checked them against the handles already).
        src.mem.uses.wait();
        dst.mem.uses.wait();
        dst.mem.copy_from(d, &src.mem, so, len)
    }

    #[inline]
    fn copy_within(&self, buffer: &mut HostBuffer, so: usize, d: usize, len: usize) -> Result<()> {
        buffer.mem.uses.wait();
        buffer.mem.copy_from(d, &buffer.mem, so, len)
    }

    fn load(&self, image: &[u8]) -> Result<HostModule> {
        program::load(image)
    }

    fn validate(&self, image: &[u8]) -> Result<()> {
        program::validate(image)
    }

    /// C: `$CC`, else `cc` on `PATH` (probed once per compiler and process, and
    /// remembered in the compile cache's directory while the compiler's file is unchanged);
    /// other languages: none.
    fn compiler(&self, language: Language) -> Result<Option<CompilerId>> {
        compiler::compiler(language, self.shared.compile_cache.as_deref())
    }

    /// Runs the C compiler in a private temporary directory (see the crate docs).
    fn compile(&self, source: &Source) -> Result<Vec<u8>> {
        compiler::compile(source, self.shared.compile_cache.as_deref())
    }

    /// Host memory, touched in place; not memory shared with other processes (they could
    /// write it under the slice).
    /// The host pointer of the first byte.
    fn address(&self, buffer: &HostBuffer) -> Result<Option<u64>> {
        Ok(Some(buffer.address()))
    }

    /// Any host memory of this process (the host device's memory is the process's).
    unsafe fn adopt(
        &self,
        address: u64,
        len: usize,
        _kind: MemKind,
        owner: hal::Owner,
    ) -> Result<Option<HostBuffer>> {
        let ptr = std::ptr::NonNull::new(address as *mut u8)
            .ok_or_else(|| Error::invalid("", "the null address is no memory to adopt"))?;
        // SAFETY: the caller's promise (`hal::Device::adopt`), passed on.
        let buffer = unsafe { HostBuffer::adopted(ptr, len, owner) };
        Ok(Some(buffer.counted(self.shared.clone())))
    }

    /// The queued work that uses the buffer: host functions run on the queues' executors,
    /// so that work may wait for user code that uses this very buffer (L7).
    fn pending(&self, buffer: &HostBuffer) -> Option<hal::Pending> {
        buffer.mem.uses.pending()
    }

    fn with_mapped(&self, buffer: &mut HostBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        let bytes = buffer.exclusive_bytes().ok_or_else(|| Error::Unsupported {
            backend: BackendKind::Host,
            call: "",
            reason: "the buffer's memory is shared with other processes (IPC): copy \
                     it with read and write instead"
                .into(),
        })?;
        f(bytes);
        Ok(())
    }

    fn queue(&self) -> Result<HostQueue> {
        Ok(HostQueue {
            stream: stream::Stream::new(self.pool.clone()),
        })
    }
}

/// Memory shared between processes as sealed memfds; the fd travels with the handle.
impl hal::Ipc for HostDevice {
    /// The boot id, its last byte mixed with the device's ordinal: host device `n` is the
    /// same device in every process of this boot.
    fn uuid(&self) -> [u8; 16] {
        let mut uuid = self.shared.boot_id();
        uuid[15] ^= self.ordinal as u8;
        uuid
    }

    fn alloc_exportable(&self, size: usize, _kind: MemKind) -> Result<HostBuffer> {
        let memory = self.shared.memory();
        if size as u64 > memory {
            return Err(oom(size, format!("the host has {memory} bytes of memory")));
        }
        let buffer = HostBuffer::exportable(size)
            .map_err(|e| oom(size, format!("memfd_create/ftruncate/mmap: {e}")))?;
        Ok(buffer.counted(self.shared.clone()))
    }

    fn export(&self, buffer: &HostBuffer) -> Result<hal::Exported> {
        let fd = buffer.memfd().ok_or_else(|| Error::InvalidArgument {
            call: "",
            reason: "host buffer is not exportable (allocate it with alloc_exportable)".into(),
        })?;
        let fd = fd.try_clone().map_err(|e| Error::Driver {
            backend: BackendKind::Host,
            call: "",
            code: i64::from(e.raw_os_error().unwrap_or(0)),
            message: format!("dup of the buffer's memfd: {e}"),
        })?;
        Ok(hal::Exported {
            size: buffer.len() as u64,
            payload: IPC_PAYLOAD.to_vec(),
            fd: Some(fd),
        })
    }

    fn import(&self, exported: hal::Exported) -> Result<HostBuffer> {
        let bad = |reason: &str| Error::InvalidIpcHandle {
            backend: Some(BackendKind::Host),
            call: "",
            reason: reason.into(),
        };
        let Some(fd) = exported.fd else {
            return Err(bad("a host handle needs its memfd"));
        };
        if exported.payload != IPC_PAYLOAD {
            return Err(bad("the payload is not a host allocation's"));
        }
        let size = usize::try_from(exported.size).map_err(|_| bad("size"))?;
        if size == 0 {
            return Err(bad("size 0"));
        }
        let buffer = HostBuffer::import(fd, size)?;
        Ok(buffer.counted(self.shared.clone()))
    }
}
