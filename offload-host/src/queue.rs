//! The host's queues and events ([`HostQueue`], [`HostEvent`]) and their `hal::Queue` and
//! `hal::Event` impls: a queue is an in-order stream run by its own executor thread (see
//! stream.rs) that launches kernels and runs queued copies; an event is a ticket of one.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use offload_core::hal::{self, HostFn, KernelOf};
use offload_core::{BackendKind, Dims, Error, KernelArg, ParamKind, Result};

use crate::memory::{self, HostBuffer};
use crate::shared::HostDevice;
use crate::{program, stream};

/// A host queue: an in-order stream run by its own executor thread (see stream.rs);
/// `launch` and the other enqueues return once the work is queued.
pub struct HostQueue {
    pub(crate) stream: stream::Stream,
}

impl std::fmt::Debug for HostQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostQueue")
    }
}

/// A host event: completes when the work queued before it has finished, and holds the time
/// it did.
pub struct HostEvent {
    pub(crate) stream: Arc<stream::StreamCore>,
    pub(crate) ticket: u64,
    pub(crate) time: Arc<OnceLock<Instant>>,
}

impl std::fmt::Debug for HostEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostEvent")
            .field("ticket", &self.ticket)
            .field("complete", &self.stream.reached(self.ticket))
            .finish()
    }
}

impl HostEvent {
    /// When the work before the event finished; waits for it first.
    pub(crate) fn time(&self) -> Result<Instant> {
        self.stream.wait(self.ticket);
        self.time.get().copied().ok_or_else(|| Error::Driver {
            backend: BackendKind::Host,
            call: "",
            code: -1,
            message: "the event completed without a time (its queue was destroyed first)".into(),
        })
    }
}

impl hal::Queue<HostDevice> for HostQueue {
    /// Drains the queue's work and joins its executor (L4). From one of the queue's own
    /// host functions it cannot wait; the executor drains it after the function returns.
    fn destroy(self) -> Result<()> {
        if self.stream.core.on_runner() {
            drop(self);
            return Ok(());
        }
        let result = self.stream.core.sync();
        drop(self);
        result
    }

    // Unverified code runs behind this call: the caller holds the launch contract.
    unsafe fn launch(
        &self,
        kernel: &KernelOf<HostDevice>,
        dims: &Dims,
        args: &[KernelArg<'_, HostBuffer>],
    ) -> Result<()> {
        if dims.shared_memory > program::MAX_SHARED_MEMORY {
            return Err(Error::invalid(
                "",
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
                call: "",
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
                    buffer.mem.check(*offset, *len)?;
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
                        call: "",
                        reason: format!("host kernel argument {i} should be {param:?}"),
                    });
                }
            }
            values.push(value);
        }
        let core = &self.stream.core;
        let uses: Vec<Arc<memory::Memory>> = memory.clone();
        let ticket = core.enqueue(stream::Command::Launch {
            function: kernel.function,
            values,
            dims: *dims,
            memory,
            code: kernel.loaded.clone(),
        })?;
        for m in &uses {
            m.uses.add(core, ticket);
        }
        kernel.loaded.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_write(&self, buffer: &HostBuffer, offset: usize, data: Vec<u8>) -> Result<()> {
        buffer.mem.check(offset, data.len())?;
        let core = &self.stream.core;
        let memory = buffer.mem.clone();
        let ticket = core.enqueue(stream::Command::Write {
            memory,
            offset,
            data,
        })?;
        buffer.mem.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_fill(
        &self,
        buffer: &HostBuffer,
        offset: usize,
        len: usize,
        pattern: &[u8],
    ) -> Result<()> {
        buffer.mem.check(offset, len)?;
        offload_core::hal::check_fill(len, pattern)?;
        let core = &self.stream.core;
        let ticket = core.enqueue(stream::Command::Fill {
            memory: buffer.mem.clone(),
            offset,
            len,
            pattern: pattern.to_vec(),
        })?;
        buffer.mem.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_copy(
        &self,
        src: &HostBuffer,
        src_offset: usize,
        dst: &HostBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        src.mem.check(src_offset, len)?;
        dst.mem.check(dst_offset, len)?;
        let core = &self.stream.core;
        let ticket = core.enqueue(stream::Command::Copy {
            src: src.mem.clone(),
            src_offset,
            dst: dst.mem.clone(),
            dst_offset,
            len,
        })?;
        src.mem.uses.add(core, ticket);
        dst.mem.uses.add(core, ticket);
        Ok(())
    }

    fn enqueue_host_fn(&self, f: HostFn) -> Result<()> {
        self.stream
            .core
            .enqueue(stream::Command::HostFn(f))
            .map(drop)
    }

    fn sync(&self) -> Result<()> {
        self.stream.core.sync()
    }

    fn is_idle(&self) -> Result<bool> {
        let core = &self.stream.core;
        Ok(core.reached(core.last()))
    }

    fn record(&self) -> Result<HostEvent> {
        let core = &self.stream.core;
        let time = Arc::new(OnceLock::new());
        let last = core.last();
        let ticket = if core.reached(last) {
            // Nothing queued: the event is complete now.
            let _ = time.set(Instant::now());
            last
        } else {
            core.enqueue(stream::Command::Record(time.clone()))?
        };
        Ok(HostEvent {
            stream: core.clone(),
            ticket,
            time,
        })
    }

    fn wait_event(&self, event: &HostEvent) -> Result<()> {
        let core = &self.stream.core;
        if Arc::ptr_eq(core, &event.stream) || event.stream.reached(event.ticket) {
            return Ok(()); // in order, or already done
        }
        core.enqueue(stream::Command::Wait {
            stream: event.stream.clone(),
            ticket: event.ticket,
        })
        .map(drop)
    }
}

impl hal::Event for HostEvent {
    fn sync(&self) -> Result<()> {
        self.stream.wait(self.ticket);
        Ok(())
    }

    fn is_complete(&self) -> Result<bool> {
        Ok(self.stream.reached(self.ticket))
    }

    fn elapsed_since(&self, start: &Self) -> Result<Duration> {
        Ok(self.time()?.saturating_duration_since(start.time()?))
    }

    fn destroy(self) -> Result<()> {
        Ok(())
    }
}
