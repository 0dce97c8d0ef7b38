//! The queue's side of the WGSL bounds report (`wgsl/report.rs`): the memory a batch's
//! launches record their first out-of-range access in, and the `Error::OutOfBounds` read
//! back from it once the batch has run.
//!
//! Each batch that launches a kernel with a report gets [`Reports`]: host-visible, coherent
//! memory in chunks of [`CHUNK`] slots, one slot per module its launches use (bound at the
//! module's report binding, at the slot's offset). When the batch has run, the queue reads
//! every slot it used ([`Reports::harvest`]), zeroes it and keeps what it found for its next
//! `sync` ([`Found`]); a slot is used again only by a later recording of the batch, after
//! that. So every report is read exactly once, and two batches never share a slot.
//!
//! It also declares what one binding of a launch's descriptor set is ([`Described`]), which
//! batch.rs and queue.rs use.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ash::vk;
use offload_core::{BackendKind, Error, Result};

use crate::allocation::RawAllocation;
use crate::context::DeviceContext;
use crate::memory::{Placement, Source};
use crate::program::ModuleInner;

/// Slots in one chunk of a batch's report memory.
const CHUNK: u64 = 16;

/// Bytes a slot binds: the report's words (`wgsl/report.rs`).
const SLOT_BYTES: u64 = 4 * 6;

/// What one binding of a descriptor set describes: binding number, descriptor type
/// (storage or uniform buffer), buffer, offset, range.
pub(crate) type Described = (u32, vk::DescriptorType, vk::Buffer, u64, u64);

/// The report memory of one batch.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    chunks: Vec<RawAllocation>,
    /// The module each slot in use reports for, in slot order.
    modules: Vec<Arc<ModuleInner>>,
}

/// An out-of-range access read from a report (`Error::OutOfBounds`): the first, with the
/// accesses that followed counted in its `more`.
#[derive(Debug)]
pub(crate) struct Found(Error);

impl Found {
    /// Adds a later report: its first access and those after it count as more.
    pub(crate) fn add(&mut self, later: Found) {
        let extra = match later.0 {
            Error::OutOfBounds { more, .. } => 1 + more,
            _ => 1,
        };
        if let Error::OutOfBounds { more, .. } = &mut self.0 {
            *more += extra;
        }
    }

    /// The error the next sync returns.
    pub(crate) fn into_error(self) -> Error {
        self.0
    }
}

/// Adds `later` to `found`.
pub(crate) fn merge(found: &mut Option<Found>, later: Option<Found>) {
    match (found.as_mut(), later) {
        (Some(f), Some(l)) => f.add(l),
        (None, Some(l)) => *found = Some(l),
        (_, None) => {}
    }
}

impl Reports {
    /// Bytes between slots: a slot's offset must be a multiple of the device's
    /// `minStorageBufferOffsetAlignment`.
    fn stride(device: &DeviceContext) -> u64 {
        SLOT_BYTES.next_multiple_of(device.limits.min_storage_buffer_offset_alignment.max(4))
    }

    /// The binding of `module`'s report for a launch in this batch: its slot, taken now if
    /// the module has none in this batch yet.
    pub(crate) fn slot(
        &mut self,
        device: &DeviceContext,
        module: &Arc<ModuleInner>,
        binding: u32,
    ) -> Result<Described> {
        let stride = Self::stride(device);
        let at = match self.modules.iter().position(|m| Arc::ptr_eq(m, module)) {
            Some(i) => i,
            None => {
                if self.modules.len() as u64 == self.chunks.len() as u64 * CHUNK {
                    self.chunks.push(new_chunk(device, stride)?);
                }
                self.modules.push(module.clone());
                self.modules.len() - 1
            }
        };
        let (chunk, slot) = (at as u64 / CHUNK, at as u64 % CHUNK);
        let buffer = self.chunks[chunk as usize].buffer;
        Ok((
            binding,
            vk::DescriptorType::STORAGE_BUFFER,
            buffer,
            slot * stride,
            SLOT_BYTES,
        ))
    }

    /// Reads the slots the batch used, zeroes them and lets their modules go; returns the
    /// first report found with the rest counted.
    ///
    /// # Safety
    /// The batch's last submission has finished, or it was never submitted.
    pub(crate) unsafe fn harvest(&mut self, device: &DeviceContext) -> Option<Found> {
        let stride = Self::stride(device);
        let mut found = None;
        for (at, module) in self.modules.drain(..).enumerate() {
            let (chunk, slot) = (at as u64 / CHUNK, at as u64 % CHUNK);
            let Some(base) = self.chunks.get(chunk as usize).and_then(|c| c.mapped) else {
                continue;
            };
            // SAFETY: the chunk's mapping holds CHUNK slots of `stride` bytes, each with
            // SLOT_BYTES (≤ stride) of report, u32-aligned (the mapping is aligned to the
            // device's map alignment, at least 64 bytes; `stride` is a multiple of 4); no
            // submission writes it any more (the caller's guarantee) and only this batch
            // (behind its queue's lock) reads or writes it.
            let words: [u32; 6] = unsafe {
                let p = base.as_ptr().add((slot * stride) as usize).cast::<u32>();
                let words = std::array::from_fn(|i| std::ptr::read_volatile(p.add(i)));
                if words[0] != 0 {
                    std::ptr::write_bytes(p, 0, 6);
                }
                words
            };
            if words[0] != 0 {
                merge(&mut found, Some(decode(&module, words)));
            }
        }
        found
    }

    /// Frees the chunks.
    ///
    /// # Safety
    /// As for [`Reports::harvest`]; the reports are not used afterwards.
    pub(crate) unsafe fn destroy(&mut self, device: &DeviceContext) {
        self.modules.clear();
        for chunk in self.chunks.drain(..) {
            // SAFETY: no submission uses it (the caller's guarantee).
            unsafe { chunk.destroy(&device.raw) };
            device.allocations.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A chunk of host-visible memory, zeroed, for [`CHUNK`] slots.
fn new_chunk(device: &DeviceContext, stride: u64) -> Result<RawAllocation> {
    let chunk = RawAllocation::new(device, CHUNK * stride, Placement::Host, Source::Fresh)?;
    let Some(mapped) = chunk.mapped else {
        // SAFETY: used by no command.
        unsafe { chunk.destroy(&device.raw) };
        device.allocations.fetch_sub(1, Ordering::SeqCst);
        return Err(Error::invalid(
            "",
            "the device's host-visible memory is not mappable: no memory for the bounds \
             report (turn it off with OFFLOAD_VULKAN_BOUNDS_REPORT=0)",
        ));
    };
    // SAFETY: the mapping holds the allocation's CHUNK * stride bytes; nothing else uses
    // the fresh allocation.
    unsafe { std::ptr::write_bytes(mapped.as_ptr(), 0, (CHUNK * stride) as usize) };
    Ok(chunk)
}

/// The error a report's words describe (`wgsl/report.rs` has their layout).
fn decode(module: &ModuleInner, words: [u32; 6]) -> Found {
    let [count, entry, binding, index, length, access] = words;
    let (kernel, argument) = module.report_names(entry, binding);
    let access = match access {
        0 => "read",
        1 => "write",
        _ => "atomic",
    };
    Found(Error::OutOfBounds {
        backend: BackendKind::Vulkan,
        call: "",
        kernel,
        argument,
        binding,
        index: u64::from(index),
        length: u64::from(length),
        access,
        more: u64::from(count.saturating_sub(1)),
    })
}
