//! Device memory: one `VkBuffer` bound to its own (dedicated) `VkDeviceMemory` per
//! allocation ([`VulkanBuffer`]): making, importing, exporting and mapping it. Its record
//! and destruction are allocation.rs's, its memory on the way out (`Released`) usage.rs's.
//! The copies in and out of it are the device's (`hal::Device` in device.rs).
//!
//! Where the memory is host-visible and host-coherent it is mapped once, for its whole
//! life, and every copy is a `memcpy`; otherwise copies go through the device's queue
//! ([`crate::transfer`]). Impossible sizes are refused with `Error::OutOfMemory` before the
//! driver is asked. Every access checks its ranges itself, whatever the caller checked: the
//! trait is safe, so the backend must be sound on its own.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ash::vk;
use offload_core::{BackendKind, Error, MemKind, Result, hal::Exported};

use crate::allocation::RawAllocation;
use crate::context::DeviceContext;
use crate::error::{At, map_vk_err, out_of_memory};
use crate::usage::{Released, Usage};

/// What an allocation is for; decides its memory type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// `MemKind::Device`: device-local preferred, mapped if also host-visible and coherent.
    Device,
    /// `MemKind::Host`/`Shared`: host-visible and coherent, system memory preferred.
    Host,
    /// The queue's staging memory: host-visible and coherent, cached preferred (read back).
    Staging,
}

const HOST_MAPPABLE: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::from_raw(
    vk::MemoryPropertyFlags::HOST_VISIBLE.as_raw()
        | vk::MemoryPropertyFlags::HOST_COHERENT.as_raw(),
);

/// Picks a memory type among `allowed` (a `memoryTypeBits` mask) for `placement`, in the
/// driver's own order of preference (the order of its memory types).
pub(crate) fn pick_memory_type(
    memory: &vk::PhysicalDeviceMemoryProperties,
    allowed: u32,
    placement: Placement,
) -> Option<u32> {
    let types = memory.memory_types_as_slice();
    let find = |want: vk::MemoryPropertyFlags, avoid: vk::MemoryPropertyFlags| {
        (0..types.len()).find_map(|i| {
            let flags = types[i].property_flags;
            let ok = allowed & (1 << i) != 0 && flags.contains(want) && !flags.intersects(avoid);
            ok.then(|| u32::try_from(i).ok()).flatten()
        })
    };
    let none = vk::MemoryPropertyFlags::empty();
    match placement {
        Placement::Device => find(vk::MemoryPropertyFlags::DEVICE_LOCAL, none).or(find(none, none)),
        Placement::Host => {
            find(HOST_MAPPABLE, vk::MemoryPropertyFlags::DEVICE_LOCAL).or(find(HOST_MAPPABLE, none))
        }
        Placement::Staging => find(HOST_MAPPABLE | vk::MemoryPropertyFlags::HOST_CACHED, none)
            .or(find(HOST_MAPPABLE, none)),
    }
}

/// Where an allocation's memory comes from.
#[derive(Debug)]
pub(crate) enum Source {
    /// Fresh memory, which no other process can map.
    Fresh,
    /// Fresh memory declared exportable as an `OPAQUE_FD` (IPC).
    Exportable,
    /// Another process's memory: its `OPAQUE_FD`, and the memory type and size it was
    /// allocated with (an `OPAQUE_FD` import must use both as they were).
    Import {
        fd: OwnedFd,
        type_index: u32,
        allocation_size: u64,
    },
}

const EXTERNAL: vk::ExternalMemoryHandleTypeFlags = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;

/// The open file `fd` refers to: device and inode.
fn file_identity(fd: &OwnedFd) -> Option<(u64, u64)> {
    stat(std::os::fd::AsRawFd::as_raw_fd(fd))
}

/// Device and inode of the file descriptor number `fd` has open, or `None` if it is closed.
fn stat(fd: std::os::fd::RawFd) -> Option<(u64, u64)> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only writes the struct we pass, which lives across the call; on a
    // closed descriptor it fails with EBADF and touches nothing.
    let open = unsafe { libc::fstat(fd, &mut st) } == 0;
    open.then_some((st.st_dev, st.st_ino))
}

/// The size of the regular file (a memfd) open as `fd`; `None` for anything else.
fn regular_file_size(fd: std::os::fd::RawFd) -> Option<u64> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only writes the struct we pass, which lives across the call.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    (ok && st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(st.st_size as u64)
}

/// Closes descriptor number `fd`, which a driver may or may not have closed after a failed
/// import, only if it is still open on the file we gave it (`identity`; we still hold
/// another descriptor of that file, so the number cannot have been reused for it by
/// anyone but us). Otherwise the driver closed it, and the number may belong to someone
/// else now: it is left alone.
fn close_if_still(fd: std::os::fd::RawFd, identity: Option<(u64, u64)>) {
    if identity.is_some() && stat(fd) == identity {
        // SAFETY: the number is open on our duplicate (same file, which only we hold), so
        // closing it closes what we made, once.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

/// The first bytes of a Vulkan export payload, and its length.
pub(crate) const PAYLOAD_MAGIC: [u8; 4] = *b"OFVK";
pub(crate) const PAYLOAD_LEN: usize = 24;

/// The payload's check word over the memory type, the allocation size and the buffer's size
/// (FNV-1a over their little-endian bytes): an import must repeat the first two exactly,
/// and a driver given a corrupted one answers out of memory, or maps it. The check catches
/// a corrupted handle before the driver; a forger who holds the descriptor can map the
/// memory anyway, so no secret is needed.
pub(crate) fn payload_check(type_index: u32, allocation_size: u64, size: u64) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let bytes = type_index
        .to_le_bytes()
        .into_iter()
        .chain(allocation_size.to_le_bytes())
        .chain(size.to_le_bytes());
    for b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

impl RawAllocation {
    /// Creates a buffer of `size` (> 0) bytes with dedicated memory for `placement`.
    pub(crate) fn new(
        device: &DeviceContext,
        size: u64,
        placement: Placement,
        source: Source,
    ) -> Result<RawAllocation> {
        let at = |function| At::new(function).bytes(size);
        if size == 0 {
            return Err(Error::invalid("", "zero-size Vulkan allocation"));
        }
        // Refuse what the device can never satisfy before asking the driver.
        let limits = device.limits;
        let largest_heap = device
            .memory
            .memory_heaps_as_slice()
            .iter()
            .map(|h| h.size)
            .max()
            .unwrap_or(0);
        let too_big = [
            (limits.max_allocation_size, "maxMemoryAllocationSize"),
            (limits.max_buffer_size, "maxBufferSize"),
            (largest_heap, "the largest memory heap"),
        ];
        if let Some((max, what)) = too_big.iter().find(|(max, _)| size > *max) {
            return Err(out_of_memory(
                size,
                format!("the device allows at most {max} bytes ({what})"),
            ));
        }
        let count = device.allocations.fetch_add(1, Ordering::SeqCst);
        if count >= limits.max_allocation_count {
            device.allocations.fetch_sub(1, Ordering::SeqCst);
            return Err(out_of_memory(
                size,
                format!(
                    "the device allows {} memory allocations at once (maxMemoryAllocationCount)",
                    limits.max_allocation_count
                ),
            ));
        }
        if !matches!(source, Source::Fresh) && device.external_fd.is_none() {
            return Err(Error::Unsupported {
                backend: BackendKind::Vulkan,
                call: "",
                reason: "the device has no VK_KHR_external_memory_fd: it cannot share memory \
                         with other processes"
                    .into(),
            });
        }
        // SAFETY: `create` cleans up everything it made when it fails (and closes an
        // imported fd the driver did not take), and we give the count back then.
        let made = unsafe { Self::create(device, size, placement, source, at) };
        if made.is_err() {
            device.allocations.fetch_sub(1, Ordering::SeqCst);
        }
        made
    }

    /// # Safety
    /// `device` must be live, with `VK_KHR_external_memory_fd` enabled unless `source` is
    /// `Fresh`. On error nothing created here is left behind.
    unsafe fn create(
        device: &DeviceContext,
        size: u64,
        placement: Placement,
        source: Source,
        at: impl Fn(&'static str) -> At,
    ) -> Result<RawAllocation> {
        let dev = &device.raw;
        let external = !matches!(source, Source::Fresh);
        let mut external_buffer =
            vk::ExternalMemoryBufferCreateInfo::default().handle_types(EXTERNAL);
        let mut info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                // Storage and uniform: any buffer can be a kernel's storage-buffer or
                // uniform-buffer argument.
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::UNIFORM_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        if external {
            info = info.push_next(&mut external_buffer);
        }
        // SAFETY: `info` is valid (non-zero size, no sparse flags; the external-memory
        // structure only where the extension is enabled) and lives across the call.
        let buffer = unsafe { dev.create_buffer(&info, None) }
            .map_err(|e| map_vk_err(at("vkCreateBuffer"), e))?;
        let destroy_buffer = || {
            // SAFETY: `buffer` was made above, is bound to no memory the GPU uses, and is
            // destroyed only on this error path.
            unsafe { dev.destroy_buffer(buffer, None) }
        };
        // SAFETY: `buffer` is a live buffer of `dev`.
        let needs = unsafe { dev.get_buffer_memory_requirements(buffer) };
        let (type_index, allocation_size, import_fd) = match source {
            Source::Import {
                fd,
                type_index,
                allocation_size,
            } => {
                // The exporter's type and size, which must suit this buffer; a forged or
                // foreign handle fails here, before the driver sees the fd.
                let types = device.memory.memory_types_as_slice().len();
                let fits = (type_index as usize) < types
                    && needs.memory_type_bits & (1 << type_index) != 0
                    && allocation_size >= needs.size;
                if !fits {
                    destroy_buffer();
                    return Err(Error::InvalidIpcHandle {
                        backend: Some(BackendKind::Vulkan),
                        call: "",
                        reason: format!(
                            "memory type {type_index} and size {allocation_size} cannot back a \
                             {size}-byte buffer on this device (it needs one of types {:#b}, \
                             {} bytes)",
                            needs.memory_type_bits, needs.size
                        ),
                    });
                }
                (type_index, allocation_size, Some(fd))
            }
            Source::Fresh | Source::Exportable => {
                let Some(type_index) =
                    pick_memory_type(&device.memory, needs.memory_type_bits, placement)
                else {
                    destroy_buffer();
                    return Err(Error::Unsupported {
                        backend: BackendKind::Vulkan,
                        call: "",
                        reason: format!(
                            "the device has no memory type suitable for {placement:?} memory"
                        ),
                    });
                };
                (type_index, needs.size, None)
            }
        };
        let memory_type = device.memory.memory_types_as_slice()[type_index as usize];
        let heap = device.memory.memory_heaps_as_slice()[memory_type.heap_index as usize];
        if needs.size > heap.size {
            destroy_buffer();
            return Err(out_of_memory(
                size,
                format!(
                    "{} bytes needed, the memory heap has {} bytes",
                    needs.size, heap.size
                ),
            ));
        }
        let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(EXTERNAL);
        // The driver gets a duplicate: the spec gives it the fd only on success, but
        // lavapipe (Mesa 22.3) closes it on failure too, so after a failure we close the
        // duplicate only if it is still the file we gave (see `close_if_still`).
        let (import_fd, given) = match import_fd {
            Some(fd) => match fd.try_clone() {
                Ok(dup) => {
                    let identity = file_identity(&fd);
                    (Some(fd), Some((dup.into_raw_fd(), identity)))
                }
                Err(e) => {
                    destroy_buffer();
                    return Err(Error::Driver {
                        backend: BackendKind::Vulkan,
                        call: "",
                        code: i64::from(e.raw_os_error().unwrap_or(0)),
                        message: format!("dup of the imported fd: {e}"),
                    });
                }
            },
            None => (None, None),
        };
        let raw_fd = given.map(|(fd, _)| fd);
        let mut import = vk::ImportMemoryFdInfoKHR::default()
            .handle_type(EXTERNAL)
            .fd(raw_fd.unwrap_or(-1));
        let mut allocate = vk::MemoryAllocateInfo::default()
            .allocation_size(allocation_size)
            .memory_type_index(type_index);
        if device.api >= vk::API_VERSION_1_1 {
            // Core in 1.1: one memory object for this buffer alone (also what an exported
            // buffer's importer gets).
            allocate = allocate.push_next(&mut dedicated);
        }
        if raw_fd.is_some() {
            allocate = allocate.push_next(&mut import);
        } else if external {
            allocate = allocate.push_next(&mut export);
        }
        // SAFETY: `allocate` (and the chained structures naming our live, unbound buffer and,
        // for an import, an fd we own) lives across the call; the type index is one of the
        // device's types (checked for imports, picked from them otherwise).
        let memory = match unsafe { dev.allocate_memory(&allocate, None) } {
            Ok(m) => {
                drop(import_fd); // the driver holds the duplicate now
                m
            }
            Err(e) => {
                destroy_buffer();
                if let Some((fd, identity)) = given {
                    close_if_still(fd, identity);
                }
                drop(import_fd);
                let e = map_vk_err(at("vkAllocateMemory"), e);
                return Err(match (raw_fd, e) {
                    (Some(_), Error::Driver { message, .. }) => Error::InvalidIpcHandle {
                        backend: Some(BackendKind::Vulkan),
                        call: "",
                        reason: format!("the driver refused to import the memory: {message}"),
                    },
                    (_, e) => e,
                });
            }
        };
        let free_both = || {
            destroy_buffer();
            // SAFETY: `memory` was allocated above and is freed only on this error path,
            // after the buffer bound to it was destroyed.
            unsafe { dev.free_memory(memory, None) };
        };
        // SAFETY: buffer and memory are live, unbound, and `memory` was allocated from
        // the buffer's own requirements (size and allowed type), at offset 0.
        if let Err(e) = unsafe { dev.bind_buffer_memory(buffer, memory, 0) } {
            free_both();
            return Err(map_vk_err(at("vkBindBufferMemory"), e));
        }
        let mappable = memory_type.property_flags.contains(HOST_MAPPABLE);
        let map = match placement {
            Placement::Device => mappable && device.map_device_memory,
            Placement::Host | Placement::Staging => mappable,
        };
        let mut mapped = None;
        if map {
            // SAFETY: `memory` is host-visible, not mapped yet, and the whole range is mapped.
            match unsafe { dev.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
            {
                Ok(ptr) => mapped = NonNull::new(ptr.cast::<u8>()),
                Err(e) => {
                    free_both();
                    return Err(map_vk_err(at("vkMapMemory"), e));
                }
            }
            if mapped.is_none() {
                free_both();
                return Err(map_vk_err(
                    at("vkMapMemory"),
                    vk::Result::ERROR_MEMORY_MAP_FAILED,
                ));
            }
        }
        Ok(RawAllocation {
            buffer,
            memory,
            mapped,
            size,
            type_index,
            allocation_size,
        })
    }

    /// A new `OPAQUE_FD` of this (exportable) allocation's memory.
    pub(crate) fn export_fd(&self, device: &DeviceContext) -> Result<OwnedFd> {
        let Some(external) = device.external_fd.as_ref() else {
            return Err(Error::invalid("", "the device cannot export memory"));
        };
        let info = vk::MemoryGetFdInfoKHR::default()
            .memory(self.memory)
            .handle_type(EXTERNAL);
        // SAFETY: `memory` is live memory of this device, allocated with an export structure
        // naming OPAQUE_FD (callers only export exportable allocations); the fd returned is a
        // new one, which we own.
        let fd = unsafe { external.get_memory_fd(&info) }
            .map_err(|e| map_vk_err(At::new("vkGetMemoryFdKHR"), e))?;
        // SAFETY: a successful vkGetMemoryFdKHR returns a new fd owned by the caller.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// An allocation of the Vulkan backend: a buffer on one device.
///
/// It holds its device (and so the instance and the loader) alive: freeing a buffer after
/// its platform's `deinit` is sound, and `deinit` reports such a buffer as leaked.
///
/// ```
/// use offload_core::hal::{Device as _, Platform as _, Program as _};
/// use offload_core::{Config, MemKind};
/// let vk = match offload_vulkan::VulkanPlatform::open(&Config::default()) {
///     Ok(vk) => vk,
///     Err(offload_core::Error::DriverNotFound { .. }) => return Ok(()),
///     Err(e) => return Err(e),
/// };
/// let dev = vk.devices().remove(0);
/// let buf = dev.alloc(3, MemKind::Device)?;
/// assert_eq!(buf.len(), 3);
/// dev.free(buf)?;
/// vk.deinit()?;
/// # Ok::<(), offload_core::Error>(())
/// ```
#[derive(Debug)]
pub struct VulkanBuffer {
    pub(crate) raw: RawAllocation,
    pub(crate) len: usize,
    kind: MemKind,
    /// Whether it may be exported (made by `alloc_exportable`; never an import).
    pub(crate) exportable: bool,
    /// Whether another process may map its memory (exportable, or imported).
    shared: bool,
    device: Arc<DeviceContext>,
    /// The queued work that uses it. Every host access, and freeing it, first submits and
    /// waits for that work: GPU work never sees memory change or disappear under it, and
    /// the host never reads what queued work has not finished writing (Q1).
    usage: Arc<Usage>,
}

// SAFETY: the buffer owns its Vulkan objects exclusively (like a `Box<[u8]>` owns its bytes);
// the mapped pointer points into memory that lives as long as the buffer. Vulkan objects
// may be used from any thread; the queue they are recorded on is behind the device's mutex.
unsafe impl Send for VulkanBuffer {}
// SAFETY: through `&VulkanBuffer` the host only reads the bytes (memcpy out of the mapping,
// or a GPU copy out of the buffer under the queue mutex); every host write needs `&mut`.
// Queued work on `&VulkanBuffer` writes it on the device, not through Rust references, and
// every host access first submits and waits for the work queued before it (`usage`).
unsafe impl Sync for VulkanBuffer {}

impl VulkanBuffer {
    /// Allocates `size` bytes, exportable to other processes or not.
    pub(crate) fn new(
        device: Arc<DeviceContext>,
        size: usize,
        kind: MemKind,
        exportable: bool,
    ) -> Result<Self> {
        let placement = match kind {
            MemKind::Device => Placement::Device,
            _ => Placement::Host,
        };
        let source = if exportable {
            Source::Exportable
        } else {
            Source::Fresh
        };
        let raw = RawAllocation::new(&device, size as u64, placement, source)?;
        Ok(Self::counted(
            device, raw, size, kind, exportable, exportable,
        ))
    }

    /// Maps memory another process exported (the payload is `hal::Ipc::export`'s, device.rs).
    pub(crate) fn import(device: Arc<DeviceContext>, exported: Exported) -> Result<Self> {
        let bad = |reason: &str| Error::InvalidIpcHandle {
            backend: Some(BackendKind::Vulkan),
            call: "",
            reason: reason.into(),
        };
        let Some(fd) = exported.fd else {
            return Err(bad("a Vulkan handle needs its OPAQUE_FD"));
        };
        let payload = exported.payload.as_slice();
        if payload.len() != PAYLOAD_LEN || payload[..4] != PAYLOAD_MAGIC {
            return Err(bad("the payload is not a Vulkan allocation's"));
        }
        let mut type_index = [0u8; 4];
        type_index.copy_from_slice(&payload[4..8]);
        let mut allocation_size = [0u8; 8];
        allocation_size.copy_from_slice(&payload[8..16]);
        let mut check = [0u8; 8];
        check.copy_from_slice(&payload[16..24]);
        if u64::from_le_bytes(check)
            != payload_check(
                u32::from_le_bytes(type_index),
                u64::from_le_bytes(allocation_size),
                exported.size,
            )
        {
            return Err(bad(
                "the payload's check does not match its memory type, allocation size and \
                 buffer size (the handle was corrupted or forged)",
            ));
        }
        let size = usize::try_from(exported.size).map_err(|_| bad("size"))?;
        if size == 0 {
            return Err(bad("size 0"));
        }
        let allocation_size = u64::from_le_bytes(allocation_size);
        if allocation_size < size as u64 {
            return Err(bad("the handle's range is larger than its allocation"));
        }
        // Where the descriptor is a memory file (lavapipe's is a memfd), its size is known:
        // a handle claiming more than it holds is forged (with its check recomputed), and is
        // refused here rather than by the driver (which says `VK_ERROR_OUT_OF_DEVICE_MEMORY`).
        // Other drivers' opaque descriptors are not regular files; the driver checks those.
        if let Some(held) = regular_file_size(fd.as_raw_fd()) {
            if held < allocation_size {
                return Err(bad(&format!(
                    "the handle claims a {allocation_size}-byte allocation, its memory file \
                     holds {held} bytes"
                )));
            }
        }
        let source = Source::Import {
            fd,
            type_index: u32::from_le_bytes(type_index),
            allocation_size,
        };
        // Imported memory is mapped where it is host-visible, like device memory.
        let raw = RawAllocation::new(&device, size as u64, Placement::Device, source)?;
        Ok(Self::counted(
            device,
            raw,
            size,
            MemKind::Device,
            false,
            true,
        ))
    }

    fn counted(
        device: Arc<DeviceContext>,
        raw: RawAllocation,
        len: usize,
        kind: MemKind,
        exportable: bool,
        shared: bool,
    ) -> Self {
        device.platform_live.fetch_add(1, Ordering::SeqCst);
        crate::stats::LIVE_ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        VulkanBuffer {
            raw,
            len,
            kind,
            exportable,
            shared,
            device,
            usage: Arc::default(),
        }
    }

    pub(crate) fn device(&self) -> &Arc<DeviceContext> {
        &self.device
    }

    pub(crate) fn vk_buffer(&self) -> vk::Buffer {
        self.raw.buffer
    }

    /// The queued work that uses this buffer.
    pub(crate) fn usage(&self) -> &Arc<Usage> {
        &self.usage
    }

    /// Submits the queued work that uses this buffer and waits until none runs any more.
    pub(crate) fn wait_unused(&self) -> Result<()> {
        self.usage.wait(&self.device)
    }

    /// Size in bytes.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Program as _};
    /// # use offload_core::{Config, MemKind};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// let buf = dev.alloc(10, MemKind::Host)?;
    /// assert_eq!(buf.len(), 10);
    /// # dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: Vulkan buffers are never empty.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Program as _};
    /// # use offload_core::{Config, MemKind};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// let buf = dev.alloc(1, MemKind::Device)?;
    /// assert!(!buf.is_empty());
    /// # dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory kind it was allocated with.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Program as _};
    /// # use offload_core::{Config, MemKind};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// let buf = dev.alloc(8, MemKind::Shared)?;
    /// assert_eq!(buf.kind(), MemKind::Shared);
    /// # dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn kind(&self) -> MemKind {
        self.kind
    }

    /// Whether the host reaches the bytes directly through a mapping (copies are `memcpy`),
    /// rather than through the device's queue and staging memory.
    ///
    /// ```
    /// # use offload_core::hal::{Device as _, Platform as _, Program as _};
    /// # use offload_core::{Config, MemKind};
    /// # let Ok(vk) = offload_vulkan::VulkanPlatform::open(&Config::default()) else { return Ok(()) };
    /// # let dev = vk.devices().remove(0);
    /// let buf = dev.alloc(8, MemKind::Host)?;
    /// assert!(buf.is_mapped()); // host memory is always mapped
    /// # dev.free(buf)?;
    /// # Ok::<(), offload_core::Error>(())
    /// ```
    pub fn is_mapped(&self) -> bool {
        self.raw.mapped.is_some()
    }

    /// The bytes in place, after the queued work that uses them: memory the host maps,
    /// which no other process can map.
    pub(crate) fn mapped_bytes(&mut self) -> Result<&mut [u8]> {
        let unsupported = |reason: &str| Error::Unsupported {
            backend: BackendKind::Vulkan,
            call: "",
            reason: reason.into(),
        };
        let Some(ptr) = self.raw.mapped else {
            return Err(unsupported(
                "the buffer's memory is not host-visible (allocate MemKind::Host to map it)",
            ));
        };
        if self.shared {
            return Err(unsupported(
                "the buffer's memory is shared with other processes (IPC): copy it with \
                 read and write instead",
            ));
        }
        self.wait_unused()?;
        // SAFETY: the mapping covers the whole allocation (at least `len` bytes) for the
        // buffer's life and is host-coherent; `&mut self` excludes every other host access,
        // no GPU work uses the buffer (waited above, and none can be queued while the
        // borrow lives), and no other process maps it (not exportable, not imported).
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), self.len) })
    }
}

impl Drop for VulkanBuffer {
    fn drop(&mut self) {
        // Queued work that uses it may still run: submit and wait for it (`Device::free`
        // waited already and reported an error; here one can only be ignored, after waiting
        // idle). Work held behind the host function this thread runs may use it too (its
        // free was refused, L6): that queue destroys it once the work has run.
        let released = Released {
            raw: RawAllocation { ..self.raw },
            device: self.device.clone(),
        };
        if let Some(queue) = self.usage.wait_or_idle(&self.device) {
            queue.release_after(released);
            return;
        }
        drop(released);
    }
}
