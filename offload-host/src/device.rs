//! A CPU device of the host platform ([`HostDevice`]) and its `hal::Device` impl: memory,
//! programs, queues, launches and events; and its `hal::Ipc` impl, memory shared between
//! processes as sealed memfds.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use offload_core::hal::{self, HostFn, KernelOf};
use offload_core::{
    BackendKind, CompilerId, DeviceInfo, Dims, Error, KernelArg, Language, MemKind, ParamKind,
    Result, Source,
};

use crate::memory::{self, HostBuffer};
use crate::platform::Shared;
use crate::program::{self, HostModule};
use crate::queue::{HostEvent, HostQueue};
use crate::{compiler, pool, stream};

/// What an exportable host allocation's payload says: these bytes, then nothing (the size
/// travels in the handle, the memory as the memfd).
const IPC_PAYLOAD: &[u8; 8] = b"OFHOST01";

/// A CPU device of the host platform. Dropping it (after the queues that share its
/// workers) joins its worker threads.
pub struct HostDevice {
    pub(crate) ordinal: usize,
    pub(crate) pool: Arc<pool::LazyPool>,
    pub(crate) shared: Arc<Shared>,
}

impl HostDevice {
    /// Whether this device has started its worker threads (at its first parallel launch).
    ///
    /// ```
    /// use offload_core::{Config, hal::Platform};
    /// let host = offload_host::HostPlatform::open(&Config::default())?;
    /// assert!(!host.devices()[0].workers_started());
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn workers_started(&self) -> bool {
        self.pool.started()
    }
}

impl std::fmt::Debug for HostDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDevice")
            .field("ordinal", &self.ordinal)
            .finish()
    }
}

fn oom(call: &'static str, requested: usize, reason: String) -> Error {
    Error::OutOfMemory {
        backend: BackendKind::Host,
        call,
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
            return Err(oom(
                "Device::alloc",
                size,
                format!("the host has {memory} bytes of memory"),
            ));
        }
        let buffer = HostBuffer::new(size)
            .ok_or_else(|| oom("Device::alloc", size, "the allocator refused".into()))?;
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

    fn read(&self, buffer: &HostBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        buffer.mem.check("Buffer::read", offset, dst.len())?;
        buffer.mem.uses.wait();
        buffer.mem.read(offset, dst)
    }

    fn write(&self, buffer: &mut HostBuffer, offset: usize, src: &[u8]) -> Result<()> {
        buffer.mem.check("Buffer::write", offset, src.len())?;
        buffer.mem.uses.wait();
        buffer.mem.write(offset, src)
    }

    fn fill(&self, buffer: &mut HostBuffer, offset: usize, len: usize, value: u8) -> Result<()> {
        buffer.mem.check("Buffer::fill", offset, len)?;
        buffer.mem.uses.wait();
        buffer.mem.fill(offset, len, &[value])
    }

    fn copy(
        &self,
        src: &HostBuffer,
        so: usize,
        dst: &mut HostBuffer,
        d: usize,
        len: usize,
    ) -> Result<()> {
        src.mem.check("Buffer::copy_from", so, len)?;
        dst.mem.check("Buffer::copy_from", d, len)?;
        src.mem.uses.wait();
        dst.mem.uses.wait();
        dst.mem.copy_from(d, &src.mem, so, len)
    }

    fn copy_within(&self, buffer: &mut HostBuffer, so: usize, d: usize, len: usize) -> Result<()> {
        buffer.mem.check("Buffer::copy_from", so, len)?;
        buffer.mem.check("Buffer::copy_from", d, len)?;
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
    fn with_mapped(&self, buffer: &mut HostBuffer, f: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        let bytes = buffer.exclusive_bytes().ok_or_else(|| Error::Unsupported {
            backend: BackendKind::Host,
            call: "Buffer::with_mapped",
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

    /// Drains the queue's work and joins its executor (L4). From one of the queue's own
    /// host functions it cannot wait; the executor drains it after the function returns.
    fn destroy_queue(&self, queue: HostQueue) -> Result<()> {
        if queue.stream.core.on_runner() {
            drop(queue);
            return Ok(());
        }
        let result = queue.stream.core.sync("Queue::destroy");
        drop(queue);
        result
    }

    // Unverified code runs behind this call: the caller holds the launch contract.
    unsafe fn launch(
        &self,
        queue: &HostQueue,
        kernel: &KernelOf<Self>,
        dims: &Dims,
        args: &[KernelArg<'_, HostBuffer>],
    ) -> Result<()> {
        const CALL: &str = "Queue::launch";
        if dims.shared_memory > program::MAX_SHARED_MEMORY {
            return Err(Error::invalid(
                CALL,
                format!(
                    "{} bytes of shared memory per block; the host allows {} \
                     (DeviceInfo::shared_memory)",
                    dims.shared_memory,
                    program::MAX_SHARED_MEMORY
                ),
            ));
        }
        // Checked again here: the raw API is safe too, and native code trusts these.
        if args.len() != kernel.params.len() {
            return Err(Error::InvalidArgument {
                call: CALL,
                reason: format!(
                    "host kernel takes {} arguments, {} given",
                    kernel.params.len(),
                    args.len()
                ),
            });
        }
        let mut values = Vec::with_capacity(args.len());
        let mut memory = Vec::new();
        for (i, (arg, param)) in args.iter().zip(&kernel.params).enumerate() {
            let mut value = [0u8; 8];
            match (arg, param) {
                (KernelArg::Buffer(b), ParamKind::Buffer) => {
                    value.copy_from_slice(&(b.mem.as_ptr() as usize).to_ne_bytes());
                    memory.push(b.mem.clone());
                }
                (
                    KernelArg::Range {
                        buffer,
                        offset,
                        len,
                    },
                    ParamKind::Buffer,
                ) => {
                    buffer.mem.check(CALL, *offset, *len)?;
                    let address = buffer.mem.as_ptr() as usize + offset;
                    value.copy_from_slice(&address.to_ne_bytes());
                    memory.push(buffer.mem.clone());
                }
                (KernelArg::Scalar(bytes), p)
                    if p.scalar_size() == Some(bytes.len()) && bytes.len() <= 8 =>
                {
                    value[..bytes.len()].copy_from_slice(bytes)
                }
                _ => {
                    return Err(Error::InvalidArgument {
                        call: CALL,
                        reason: format!("host kernel argument {i} should be {param:?}"),
                    });
                }
            }
            values.push(value);
        }
        let core = &queue.stream.core;
        let uses: Vec<Arc<memory::Memory>> = memory.clone();
        let ticket = core.enqueue(
            CALL,
            stream::Command::Launch {
                function: kernel.function,
                values,
                dims: *dims,
                memory,
                code: kernel.loaded.clone(),
            },
        )?;
        for m in &uses {
            m.uses.add(core, ticket);
        }
        kernel.loaded.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_write(
        &self,
        queue: &HostQueue,
        buffer: &HostBuffer,
        offset: usize,
        data: Vec<u8>,
    ) -> Result<()> {
        const CALL: &str = "Queue::write";
        buffer.mem.check(CALL, offset, data.len())?;
        let core = &queue.stream.core;
        let memory = buffer.mem.clone();
        let ticket = core.enqueue(
            CALL,
            stream::Command::Write {
                memory,
                offset,
                data,
            },
        )?;
        buffer.mem.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_fill(
        &self,
        queue: &HostQueue,
        buffer: &HostBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        const CALL: &str = "Queue::fill";
        buffer.mem.check(CALL, offset, len)?;
        if pattern.is_empty() || len % pattern.len() != 0 {
            return Err(Error::invalid(
                CALL,
                format!(
                    "a {}-byte pattern cannot fill {len} bytes exactly",
                    pattern.len()
                ),
            ));
        }
        let core = &queue.stream.core;
        let ticket = core.enqueue(
            CALL,
            stream::Command::Fill {
                memory: buffer.mem.clone(),
                offset,
                len,
                pattern: pattern.to_vec(),
            },
        )?;
        buffer.mem.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_copy(
        &self,
        queue: &HostQueue,
        src: &HostBuffer,
        src_offset: usize,
        dst: &HostBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        const CALL: &str = "Queue::copy";
        src.mem.check(CALL, src_offset, len)?;
        dst.mem.check(CALL, dst_offset, len)?;
        let core = &queue.stream.core;
        let ticket = core.enqueue(
            CALL,
            stream::Command::Copy {
                src: src.mem.clone(),
                src_offset,
                dst: dst.mem.clone(),
                dst_offset,
                len,
            },
        )?;
        src.mem.uses.add(core, ticket);
        dst.mem.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_host_fn(&self, queue: &HostQueue, f: HostFn) -> Result<()> {
        queue
            .stream
            .core
            .enqueue("Queue::enqueue_host_fn", stream::Command::HostFn(f))
            .map(drop)
    }

    fn sync(&self, queue: &HostQueue) -> Result<()> {
        queue.stream.core.sync("Queue::sync")
    }

    fn is_idle(&self, queue: &HostQueue) -> Result<bool> {
        let core = &queue.stream.core;
        Ok(core.reached(core.last()))
    }

    fn record(&self, queue: &HostQueue) -> Result<HostEvent> {
        let core = &queue.stream.core;
        let time = Arc::new(OnceLock::new());
        let last = core.last();
        let ticket = if core.reached(last) {
            // Nothing queued: the event is complete now.
            let _ = time.set(Instant::now());
            last
        } else {
            core.enqueue("Queue::record", stream::Command::Record(time.clone()))?
        };
        Ok(HostEvent {
            stream: core.clone(),
            ticket,
            time,
        })
    }

    fn wait_event(&self, queue: &HostQueue, event: &HostEvent) -> Result<()> {
        let core = &queue.stream.core;
        if Arc::ptr_eq(core, &event.stream) || event.stream.reached(event.ticket) {
            return Ok(()); // in order, or already done
        }
        core.enqueue(
            "Queue::wait",
            stream::Command::Wait {
                stream: event.stream.clone(),
                ticket: event.ticket,
            },
        )
        .map(drop)
    }

    fn sync_event(&self, event: &HostEvent) -> Result<()> {
        event.stream.wait(event.ticket);
        Ok(())
    }

    fn is_complete(&self, event: &HostEvent) -> Result<bool> {
        Ok(event.stream.reached(event.ticket))
    }

    fn elapsed(&self, start: &HostEvent, end: &HostEvent) -> Result<Duration> {
        Ok(end.time()?.saturating_duration_since(start.time()?))
    }

    fn destroy_event(&self, _event: HostEvent) -> Result<()> {
        Ok(())
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
        const CALL: &str = "Device::alloc_exportable";
        let memory = self.shared.memory();
        if size as u64 > memory {
            return Err(oom(
                CALL,
                size,
                format!("the host has {memory} bytes of memory"),
            ));
        }
        let buffer = HostBuffer::exportable(size)
            .map_err(|e| oom(CALL, size, format!("memfd_create/ftruncate/mmap: {e}")))?;
        Ok(buffer.counted(self.shared.clone()))
    }

    fn export(&self, buffer: &HostBuffer) -> Result<hal::Exported> {
        const CALL: &str = "Buffer::export";
        let fd = buffer.memfd().ok_or_else(|| Error::InvalidArgument {
            call: CALL,
            reason: "host buffer is not exportable (allocate it with alloc_exportable)".into(),
        })?;
        let fd = fd.try_clone().map_err(|e| Error::Driver {
            backend: BackendKind::Host,
            call: CALL,
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
            call: "Device::import",
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
