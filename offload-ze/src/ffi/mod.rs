//! The Level Zero loader, loaded at run time: the library guard and its symbol table
//! ([`Driver`]), and every Level Zero call offload makes, each returning `Result` (cudarc's
//! `result` layer).
//!
//! This module (with [`sys`], the raw table) holds the calls; calls whose soundness depends
//! on what the caller passes (addresses, live handles) are `unsafe fn`s whose `# Safety`
//! says what, and the modules that own the objects (memory.rs, queue.rs, program.rs,
//! ipc.rs) call them with their `SAFETY` argument. It decides nothing: which failures mean
//! "no Level Zero here" is the platform's call, and how a failure reads as an offload error
//! is `offload_driver::Failure`'s.

pub(crate) mod sys;

use std::ffi::{CStr, c_char, c_void};

use offload_driver::{Failure, LoadError, Loaded, text_of};

pub(crate) use sys::{ZE_RESULT_ERROR_UNINITIALIZED, ZeResult};

/// Declares a handle type: an opaque pointer the driver owns, `Send` and `Sync` because the
/// Level Zero calls offload makes with it are free-threaded, except those on command lists
/// and kernels, which offload serialises itself (queue.rs and program.rs hold a lock around
/// them).
macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) struct $name(pub(crate) *mut c_void);
        // SAFETY: an opaque identifier, valid in every thread until it is destroyed; see the
        // macro's comment for which calls offload serialises.
        unsafe impl Send for $name {}
        // SAFETY: as for `Send`.
        unsafe impl Sync for $name {}
    )*};
}

handles! {
    /// A context (`ze_context_handle_t`).
    ContextHandle;
    /// An immediate command list.
    ListHandle;
    /// An event pool.
    PoolHandle;
    /// An event.
    EventHandle;
    /// A module.
    ModuleHandle;
    /// A kernel.
    KernelHandle;
}

/// The library the backend opens: the Level Zero loader, which finds the drivers.
pub(crate) const LIBRARY: &str = "libze_loader.so.1";

/// A driver found by the loader. Level Zero handles are opaque pointers the driver owns
/// for the life of the process (there is no counterpart to `zeInit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DriverHandle(sys::ZeDriverHandle);

/// A device of a driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DeviceHandle(sys::ZeDeviceHandle);

// SAFETY: a handle is an opaque identifier, valid in every thread for the life of the
// process; the calls made with it here (zeDeviceGet, zeDeviceGetProperties,
// zeDeviceGetMemoryProperties, zeDriverGetApiVersion) are free-threaded in the Level Zero
// specification ("the application may call this function from simultaneous threads").
unsafe impl Send for DriverHandle {}
// SAFETY: as for `Send`: shared use only passes the identifier to free-threaded calls.
unsafe impl Sync for DriverHandle {}
// SAFETY: as for `DriverHandle`.
unsafe impl Send for DeviceHandle {}
// SAFETY: as for `DriverHandle`.
unsafe impl Sync for DeviceHandle {}

/// What a device says about itself, read from its property structures.
#[derive(Clone, Debug)]
pub(crate) struct DeviceDescription {
    /// `ze_device_properties_t::name`.
    pub(crate) name: String,
    /// `ze_device_properties_t::vendorId` (PCI vendor id).
    pub(crate) vendor_id: u32,
    /// Execution units: slices × sub-slices per slice × EUs per sub-slice.
    pub(crate) execution_units: u64,
    /// `ze_device_properties_t::uuid`.
    pub(crate) uuid: [u8; 16],
    /// `ze_device_properties_t::coreClockRate` (MHz).
    pub(crate) clock_mhz: u32,
    /// `ze_device_properties_t::maxMemAllocSize`.
    pub(crate) max_alloc: u64,
    /// `ze_device_properties_t::timerResolution`: nanoseconds per timestamp tick.
    pub(crate) timer_ns: u64,
}

/// What a device's compute properties say about launches.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ComputeLimits {
    pub(crate) max_group_threads: u32,
    pub(crate) max_group: [u32; 3],
    pub(crate) max_groups: [u32; 3],
    pub(crate) shared_memory: u32,
}

/// Where an allocation lives, as `zeMemAllocDevice`/`Host`/`Shared` made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoryKind {
    Device,
    Host,
    Shared,
}

/// What a module build gave: the module, or the failure and the build log.
pub(crate) type Built = Result<ModuleHandle, (Failure, String)>;

/// The opened loader and its entry points. Whatever calls Level Zero holds this in an
/// `Arc`, so the table never outlives the library it points into.
pub(crate) struct Driver {
    functions: Loaded<sys::Functions>,
}

impl Driver {
    /// Opens [`LIBRARY`] and reads its entry points.
    pub(crate) fn open() -> Result<Driver, LoadError> {
        // SAFETY: dlopen runs the loader's initialisers, which only set up its own state and
        // are sound to run at any time (it stays mapped, and so do the drivers it loads:
        // `RTLD_NODELETE`, as the drivers' threads may still run their code). Every address
        // comes from the loader for a name `sys` declares with the signature `ze_api.h`
        // gives it.
        let functions = unsafe { Loaded::open(&[LIBRARY]) }?;
        Ok(Driver { functions })
    }

    /// The name the loader was found under.
    pub(crate) fn library(&self) -> &'static str {
        self.functions.library().name()
    }

    /// `zeInit(0)`: every driver type.
    pub(crate) fn init(&self) -> Result<(), Failure> {
        // SAFETY: zeInit takes its flags by value; 0 is the documented default.
        let code = unsafe { (self.functions.ze_init)(0) };
        check("zeInit", code)
    }

    /// `zeDriverGet`: every driver the loader initialised.
    pub(crate) fn drivers(&self) -> Result<Vec<DriverHandle>, Failure> {
        let get = self.functions.ze_driver_get;
        // SAFETY: `get` is zeDriverGet, whose contract is the count-then-fill one
        // `enumerate` follows.
        let handles = unsafe { enumerate("zeDriverGet", |count, out| get(count, out)) }?;
        Ok(handles.into_iter().map(DriverHandle).collect())
    }

    /// `zeDeviceGet`: the devices of `driver`.
    pub(crate) fn devices(&self, driver: DriverHandle) -> Result<Vec<DeviceHandle>, Failure> {
        let get = self.functions.ze_device_get;
        // SAFETY: `get` is zeDeviceGet on a handle zeDriverGet gave, whose contract is the
        // count-then-fill one `enumerate` follows.
        let handles = unsafe { enumerate("zeDeviceGet", |count, out| get(driver.0, count, out)) }?;
        Ok(handles.into_iter().map(DeviceHandle).collect())
    }

    /// `zeDeviceGetProperties`.
    pub(crate) fn describe(&self, device: DeviceHandle) -> Result<DeviceDescription, Failure> {
        let mut properties = sys::DeviceProperties::new();
        // SAFETY: `device` came from zeDeviceGet; `properties` is a writable structure of
        // the header's layout (checked at compile time in `sys`) with its stype set and a
        // null pNext, so the driver writes only inside it.
        let code = unsafe { (self.functions.ze_device_get_properties)(device.0, &mut properties) };
        check("zeDeviceGetProperties", code)?;
        let execution_units = u64::from(properties.num_slices)
            * u64::from(properties.num_subslices_per_slice)
            * u64::from(properties.num_eus_per_subslice);
        Ok(DeviceDescription {
            name: text_of(&properties.name),
            vendor_id: properties.vendor_id,
            execution_units,
            uuid: properties.uuid,
            clock_mhz: properties.core_clock_rate,
            max_alloc: properties.max_mem_alloc_size,
            timer_ns: properties.timer_resolution,
        })
    }

    /// `zeDeviceGetComputeProperties`.
    pub(crate) fn compute(&self, device: DeviceHandle) -> Result<ComputeLimits, Failure> {
        let mut p = sys::DeviceComputeProperties::new();
        // SAFETY: `device` came from zeDeviceGet; `p` is a writable structure of the
        // header's layout (checked in `sys`) with its stype set and a null pNext.
        let code = unsafe { (self.functions.ze_device_get_compute_properties)(device.0, &mut p) };
        check("zeDeviceGetComputeProperties", code)?;
        Ok(ComputeLimits {
            max_group_threads: p.max_total_group_size,
            max_group: p.max_group_size,
            max_groups: p.max_group_count,
            shared_memory: p.max_shared_local_memory,
        })
    }

    /// `zeContextCreate`: one context for `driver`.
    pub(crate) fn context_create(&self, driver: DriverHandle) -> Result<ContextHandle, Failure> {
        let desc = sys::ContextDesc {
            stype: sys::ZE_STRUCTURE_TYPE_CONTEXT_DESC,
            p_next: std::ptr::null(),
            flags: 0,
        };
        let mut context = std::ptr::null_mut();
        // SAFETY: `driver` came from zeDriverGet; `desc` is a valid descriptor and `context`
        // a writable handle, both alive across the call.
        let code = unsafe { (self.functions.ze_context_create)(driver.0, &desc, &mut context) };
        check("zeContextCreate", code).map(|()| ContextHandle(context))
    }

    /// `zeContextDestroy`.
    ///
    /// # Safety
    ///
    /// `context` is live, destroyed once, and nothing made in it is used afterwards.
    pub(crate) unsafe fn context_destroy(&self, context: ContextHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeContextDestroy", unsafe {
            (self.functions.ze_context_destroy)(context.0)
        })
    }

    /// `zeMemAllocDevice`, `zeMemAllocHost` or `zeMemAllocShared` of `size` bytes.
    pub(crate) fn alloc(
        &self,
        context: ContextHandle,
        device: DeviceHandle,
        kind: MemoryKind,
        size: usize,
    ) -> Result<*mut c_void, Failure> {
        let device_desc = sys::DeviceMemAllocDesc {
            stype: sys::ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC,
            p_next: std::ptr::null(),
            flags: 0,
            ordinal: 0,
        };
        let host_desc = sys::HostMemAllocDesc {
            stype: sys::ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC,
            p_next: std::ptr::null(),
            flags: 0,
        };
        // 64-byte alignment: every scalar and vector type of OpenCL C.
        const ALIGN: usize = 64;
        let mut ptr = std::ptr::null_mut();
        let f = &self.functions;
        // SAFETY: `context` and `device` are live handles of one driver (the platform made
        // both); the descriptors are valid, with null pNext; `ptr` is writable; a bad size
        // is an error code, not undefined behaviour.
        let (function, code) = unsafe {
            match kind {
                MemoryKind::Device => (
                    "zeMemAllocDevice",
                    (f.ze_mem_alloc_device)(
                        context.0,
                        &device_desc,
                        size,
                        ALIGN,
                        device.0,
                        &mut ptr,
                    ),
                ),
                MemoryKind::Host => (
                    "zeMemAllocHost",
                    (f.ze_mem_alloc_host)(context.0, &host_desc, size, ALIGN, &mut ptr),
                ),
                MemoryKind::Shared => (
                    "zeMemAllocShared",
                    (f.ze_mem_alloc_shared)(
                        context.0,
                        &device_desc,
                        &host_desc,
                        size,
                        ALIGN,
                        device.0,
                        &mut ptr,
                    ),
                ),
            }
        };
        check(function, code)?;
        if ptr.is_null() {
            return Err(Failure::new(function, 0, "a null allocation").hex());
        }
        Ok(ptr)
    }

    /// `zeMemFree`.
    ///
    /// # Safety
    ///
    /// `ptr` is a live allocation of `context`, freed once, with no work on it pending.
    pub(crate) unsafe fn free(
        &self,
        context: ContextHandle,
        ptr: *mut c_void,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeMemFree", unsafe {
            (self.functions.ze_mem_free)(context.0, ptr)
        })
    }

    /// `zeMemGetAllocProperties(...).id`: the driver's identity of the allocation at `ptr`.
    pub(crate) fn alloc_id(
        &self,
        context: ContextHandle,
        ptr: *const c_void,
    ) -> Result<u64, Failure> {
        let mut p = sys::MemoryAllocationProperties {
            stype: sys::ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES,
            p_next: std::ptr::null_mut(),
            memory_type: 0,
            id: 0,
            page_size: 0,
        };
        let mut device = std::ptr::null_mut();
        // SAFETY: the call only reads the driver's records for `ptr` (any pointer is
        // allowed: an unknown one is ZE_MEMORY_TYPE_UNKNOWN); `p` and `device` are writable.
        let code = unsafe {
            (self.functions.ze_mem_get_alloc_properties)(context.0, ptr, &mut p, &mut device)
        };
        check("zeMemGetAllocProperties", code).map(|()| p.id)
    }

    /// `zeMemGetAddressRange`: the base and size of the allocation holding `ptr`.
    pub(crate) fn address_range(
        &self,
        context: ContextHandle,
        ptr: *const c_void,
    ) -> Result<(u64, usize), Failure> {
        let mut base = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: a query of the driver's records; `base` and `size` are writable.
        let code = unsafe {
            (self.functions.ze_mem_get_address_range)(context.0, ptr, &mut base, &mut size)
        };
        check("zeMemGetAddressRange", code).map(|()| (base as u64, size))
    }

    /// `zeMemGetIpcHandle`.
    ///
    /// # Safety
    ///
    /// `ptr` is the base of a live device allocation of `context`.
    pub(crate) unsafe fn ipc_get(
        &self,
        context: ContextHandle,
        ptr: *const c_void,
    ) -> Result<sys::IpcMemHandle, Failure> {
        let mut handle = sys::IpcMemHandle {
            data: [0; sys::ZE_MAX_IPC_HANDLE_SIZE],
        };
        // SAFETY: the caller's promise; `handle` is writable.
        let code = unsafe { (self.functions.ze_mem_get_ipc_handle)(context.0, ptr, &mut handle) };
        check("zeMemGetIpcHandle", code).map(|()| handle)
    }

    /// `zeMemPutIpcHandle`, where the loader has it (`None` where it does not: the driver
    /// then releases the handle with its allocation).
    pub(crate) fn ipc_put(
        &self,
        context: ContextHandle,
        handle: sys::IpcMemHandle,
    ) -> Option<Result<(), Failure>> {
        let put = self.functions.ze_mem_put_ipc_handle?;
        // SAFETY: the handle is passed by value; a handle the driver does not know is an
        // error code.
        Some(check("zeMemPutIpcHandle", unsafe {
            put(context.0, handle)
        }))
    }

    /// `zeMemOpenIpcHandle`: maps another process's allocation.
    ///
    /// # Safety
    ///
    /// `handle` holds, where the driver keeps its file descriptor, a descriptor open in
    /// this process for the duration of the call.
    pub(crate) unsafe fn ipc_open(
        &self,
        context: ContextHandle,
        device: DeviceHandle,
        handle: sys::IpcMemHandle,
    ) -> Result<*mut c_void, Failure> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the caller's promise; `ptr` is writable; the handles are live.
        let code = unsafe {
            (self.functions.ze_mem_open_ipc_handle)(context.0, device.0, handle, 0, &mut ptr)
        };
        check("zeMemOpenIpcHandle", code)?;
        if ptr.is_null() {
            return Err(Failure::new("zeMemOpenIpcHandle", 0, "a null mapping").hex());
        }
        Ok(ptr)
    }

    /// `zeMemCloseIpcHandle`.
    ///
    /// # Safety
    ///
    /// `ptr` came from `zeMemOpenIpcHandle` in `context`, is closed once, with no work on it
    /// pending.
    pub(crate) unsafe fn ipc_close(
        &self,
        context: ContextHandle,
        ptr: *mut c_void,
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeMemCloseIpcHandle", unsafe {
            (self.functions.ze_mem_close_ipc_handle)(context.0, ptr)
        })
    }

    /// `zeCommandListCreateImmediate` on the device's first queue group, synchronous or
    /// asynchronous.
    pub(crate) fn list_create(
        &self,
        context: ContextHandle,
        device: DeviceHandle,
        synchronous: bool,
    ) -> Result<ListHandle, Failure> {
        let desc = sys::CommandQueueDesc {
            stype: sys::ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC,
            p_next: std::ptr::null(),
            ordinal: 0,
            index: 0,
            flags: 0,
            mode: if synchronous {
                sys::ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS
            } else {
                sys::ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS
            },
            priority: 0,
        };
        let mut list = std::ptr::null_mut();
        // SAFETY: live handles of one driver; a valid descriptor; `list` is writable.
        let code = unsafe {
            (self.functions.ze_command_list_create_immediate)(context.0, device.0, &desc, &mut list)
        };
        check("zeCommandListCreateImmediate", code).map(|()| ListHandle(list))
    }

    /// `zeCommandListDestroy`.
    ///
    /// # Safety
    ///
    /// `list` is live, destroyed once, with no work on it pending.
    pub(crate) unsafe fn list_destroy(&self, list: ListHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeCommandListDestroy", unsafe {
            (self.functions.ze_command_list_destroy)(list.0)
        })
    }

    /// `zeCommandListAppendMemoryCopy`.
    ///
    /// # Safety
    ///
    /// `list` is live and used by no other thread during the call; `dst` and `src` are
    /// `len` bytes of memory the device can reach (allocations of the list's context, or,
    /// on a synchronous list, host memory), alive and not otherwise accessed until the copy
    /// has run; `signal` (or null) and `waits` are live events.
    pub(crate) unsafe fn append_copy(
        &self,
        list: ListHandle,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
        signal: Option<EventHandle>,
        waits: &[EventHandle],
    ) -> Result<(), Failure> {
        let mut waits: Vec<*mut c_void> = waits.iter().map(|e| e.0).collect();
        // SAFETY: the caller's promise; `waits` lives across the call.
        let code = unsafe {
            (self.functions.ze_command_list_append_memory_copy)(
                list.0,
                dst,
                src,
                len,
                signal.map_or(std::ptr::null_mut(), |e| e.0),
                waits.len() as u32,
                waits_ptr(&mut waits),
            )
        };
        check("zeCommandListAppendMemoryCopy", code)
    }

    /// `zeCommandListAppendMemoryFill` of `len` bytes with `pattern` (1, 2, 4, … 128 bytes).
    ///
    /// # Safety
    ///
    /// As [`Driver::append_copy`], for the destination.
    pub(crate) unsafe fn append_fill(
        &self,
        list: ListHandle,
        dst: *mut c_void,
        pattern: &[u8],
        len: usize,
        signal: Option<EventHandle>,
        waits: &[EventHandle],
    ) -> Result<(), Failure> {
        let mut waits: Vec<*mut c_void> = waits.iter().map(|e| e.0).collect();
        // SAFETY: the caller's promise; the driver copies the pattern during the call.
        let code = unsafe {
            (self.functions.ze_command_list_append_memory_fill)(
                list.0,
                dst,
                pattern.as_ptr().cast(),
                pattern.len(),
                len,
                signal.map_or(std::ptr::null_mut(), |e| e.0),
                waits.len() as u32,
                waits_ptr(&mut waits),
            )
        };
        check("zeCommandListAppendMemoryFill", code)
    }

    /// `zeCommandListAppendBarrier`.
    ///
    /// # Safety
    ///
    /// `list` is live and used by no other thread during the call; the events are live.
    pub(crate) unsafe fn append_barrier(
        &self,
        list: ListHandle,
        signal: Option<EventHandle>,
        waits: &[EventHandle],
    ) -> Result<(), Failure> {
        let mut waits: Vec<*mut c_void> = waits.iter().map(|e| e.0).collect();
        // SAFETY: the caller's promise.
        let code = unsafe {
            (self.functions.ze_command_list_append_barrier)(
                list.0,
                signal.map_or(std::ptr::null_mut(), |e| e.0),
                waits.len() as u32,
                waits_ptr(&mut waits),
            )
        };
        check("zeCommandListAppendBarrier", code)
    }

    /// `zeCommandListAppendLaunchKernel` with `groups` work-groups.
    ///
    /// # Safety
    ///
    /// As [`Driver::append_barrier`]; `kernel` is live, its arguments and group size set,
    /// and every address among them memory the kernel may touch until it has run.
    pub(crate) unsafe fn append_launch(
        &self,
        list: ListHandle,
        kernel: KernelHandle,
        groups: [u32; 3],
        signal: Option<EventHandle>,
        waits: &[EventHandle],
    ) -> Result<(), Failure> {
        let mut waits: Vec<*mut c_void> = waits.iter().map(|e| e.0).collect();
        let count = sys::GroupCount {
            x: groups[0],
            y: groups[1],
            z: groups[2],
        };
        // SAFETY: the caller's promise; `count` lives across the call.
        let code = unsafe {
            (self.functions.ze_command_list_append_launch_kernel)(
                list.0,
                kernel.0,
                &count,
                signal.map_or(std::ptr::null_mut(), |e| e.0),
                waits.len() as u32,
                waits_ptr(&mut waits),
            )
        };
        check("zeCommandListAppendLaunchKernel", code)
    }

    /// `zeEventPoolCreate` of `count` host-visible events for `device` (with kernel
    /// timestamps when `timestamps`).
    pub(crate) fn pool_create(
        &self,
        context: ContextHandle,
        device: DeviceHandle,
        count: u32,
        timestamps: bool,
    ) -> Result<PoolHandle, Failure> {
        let desc = sys::EventPoolDesc {
            stype: sys::ZE_STRUCTURE_TYPE_EVENT_POOL_DESC,
            p_next: std::ptr::null(),
            flags: sys::ZE_EVENT_POOL_FLAG_HOST_VISIBLE
                | if timestamps {
                    sys::ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP
                } else {
                    0
                },
            count,
        };
        let mut devices = [device.0];
        let mut pool = std::ptr::null_mut();
        // SAFETY: live handles; a valid descriptor; one device in a live array; `pool` is
        // writable.
        let code = unsafe {
            (self.functions.ze_event_pool_create)(
                context.0,
                &desc,
                1,
                devices.as_mut_ptr(),
                &mut pool,
            )
        };
        check("zeEventPoolCreate", code).map(|()| PoolHandle(pool))
    }

    /// `zeEventPoolDestroy`.
    ///
    /// # Safety
    ///
    /// `pool` is live, destroyed once, with no event of it left.
    pub(crate) unsafe fn pool_destroy(&self, pool: PoolHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeEventPoolDestroy", unsafe {
            (self.functions.ze_event_pool_destroy)(pool.0)
        })
    }

    /// `zeEventCreate` at `index` of `pool`, signalled and waited for with host scope.
    pub(crate) fn event_create(
        &self,
        pool: PoolHandle,
        index: u32,
    ) -> Result<EventHandle, Failure> {
        let desc = sys::EventDesc {
            stype: sys::ZE_STRUCTURE_TYPE_EVENT_DESC,
            p_next: std::ptr::null(),
            index,
            signal: sys::ZE_EVENT_SCOPE_FLAG_HOST,
            wait: sys::ZE_EVENT_SCOPE_FLAG_HOST,
        };
        let mut event = std::ptr::null_mut();
        // SAFETY: a live pool (its owner holds it); a valid descriptor (an index out of
        // range is an error code); `event` is writable.
        let code = unsafe { (self.functions.ze_event_create)(pool.0, &desc, &mut event) };
        check("zeEventCreate", code).map(|()| EventHandle(event))
    }

    /// `zeEventDestroy`.
    ///
    /// # Safety
    ///
    /// `event` is live, destroyed once, and no pending work waits on or signals it.
    pub(crate) unsafe fn event_destroy(&self, event: EventHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeEventDestroy", unsafe {
            (self.functions.ze_event_destroy)(event.0)
        })
    }

    /// `zeEventHostSignal`.
    pub(crate) fn event_signal(&self, event: EventHandle) -> Result<(), Failure> {
        // SAFETY: events are live while their owners hold them (queue.rs); signalling is
        // free-threaded.
        check("zeEventHostSignal", unsafe {
            (self.functions.ze_event_host_signal)(event.0)
        })
    }

    /// `zeEventHostSynchronize` without a time limit.
    pub(crate) fn event_wait(&self, event: EventHandle) -> Result<(), Failure> {
        // SAFETY: as in `event_signal`.
        check("zeEventHostSynchronize", unsafe {
            (self.functions.ze_event_host_synchronize)(event.0, u64::MAX)
        })
    }

    /// `zeEventQueryStatus`: whether the event is signalled.
    pub(crate) fn event_done(&self, event: EventHandle) -> Result<bool, Failure> {
        // SAFETY: as in `event_signal`.
        let code = unsafe { (self.functions.ze_event_query_status)(event.0) };
        if code == sys::ZE_RESULT_NOT_READY {
            return Ok(false);
        }
        check("zeEventQueryStatus", code).map(|()| true)
    }

    /// `zeEventHostReset`.
    ///
    /// # Safety
    ///
    /// No pending work waits on or signals `event`.
    pub(crate) unsafe fn event_reset(&self, event: EventHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeEventHostReset", unsafe {
            (self.functions.ze_event_host_reset)(event.0)
        })
    }

    /// `zeEventQueryKernelTimestamp`: the global (start, end) ticks of a signalled event of
    /// a timestamp pool.
    pub(crate) fn event_timestamps(&self, event: EventHandle) -> Result<[u64; 2], Failure> {
        let mut result = sys::KernelTimestampResult::default();
        // SAFETY: as in `event_signal`; `result` is writable, of the header's layout.
        let code =
            unsafe { (self.functions.ze_event_query_kernel_timestamp)(event.0, &mut result) };
        check("zeEventQueryKernelTimestamp", code).map(|()| result.global)
    }

    /// `zeModuleCreate` from `image` (SPIR-V or a native binary), reading and destroying
    /// the build log.
    ///
    /// # Safety
    ///
    /// `image` was validated as a module of `format` (the driver parses it).
    pub(crate) unsafe fn module_create(
        &self,
        context: ContextHandle,
        device: DeviceHandle,
        image: &[u8],
        native: bool,
    ) -> Result<Built, Failure> {
        let desc = sys::ModuleDesc {
            stype: sys::ZE_STRUCTURE_TYPE_MODULE_DESC,
            p_next: std::ptr::null(),
            format: if native {
                sys::ZE_MODULE_FORMAT_NATIVE
            } else {
                sys::ZE_MODULE_FORMAT_IL_SPIRV
            },
            input_size: image.len(),
            input: image.as_ptr(),
            build_flags: c"".as_ptr(),
            constants: std::ptr::null(),
        };
        let mut module = std::ptr::null_mut();
        let mut log = std::ptr::null_mut();
        // SAFETY: the caller's promise for the image, which lives across the call; live
        // handles; `module` and `log` are writable.
        let code = unsafe {
            (self.functions.ze_module_create)(context.0, device.0, &desc, &mut module, &mut log)
        };
        let text = if log.is_null() {
            String::new()
        } else {
            // SAFETY: `log` came from this zeModuleCreate; it is read, then destroyed once.
            let text = unsafe { self.build_log(log) };
            // SAFETY: as above.
            let _ = unsafe { (self.functions.ze_module_build_log_destroy)(log) };
            text
        };
        match check("zeModuleCreate", code) {
            Ok(()) => Ok(Ok(ModuleHandle(module))),
            Err(failure)
                if [
                    sys::ZE_RESULT_ERROR_MODULE_BUILD_FAILURE,
                    sys::ZE_RESULT_ERROR_INVALID_NATIVE_BINARY,
                ]
                .iter()
                .any(|&c| i64::from(c) == failure.code) =>
            {
                Ok(Err((failure, text)))
            }
            Err(failure) => Err(failure),
        }
    }

    /// The text of a build log (empty where it cannot be read).
    ///
    /// # Safety
    ///
    /// `log` is a live build log.
    unsafe fn build_log(&self, log: sys::ZeBuildLog) -> String {
        let get = self.functions.ze_module_build_log_get_string;
        let mut size = 0usize;
        // SAFETY: the caller's promise; with a null buffer only the size is written.
        if unsafe { get(log, &mut size, std::ptr::null_mut()) } != sys::ZE_RESULT_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut text = vec![0 as c_char; size];
        // SAFETY: `text` holds `size` writable bytes, as the driver asked.
        if unsafe { get(log, &mut size, text.as_mut_ptr()) } != sys::ZE_RESULT_SUCCESS {
            return String::new();
        }
        text_of(&text)
    }

    /// `zeModuleDestroy`.
    ///
    /// # Safety
    ///
    /// `module` is live, destroyed once, with no kernel of it left and no launch pending.
    pub(crate) unsafe fn module_destroy(&self, module: ModuleHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeModuleDestroy", unsafe {
            (self.functions.ze_module_destroy)(module.0)
        })
    }

    /// `zeModuleGetKernelNames`.
    ///
    /// # Safety
    ///
    /// `module` is live.
    pub(crate) unsafe fn kernel_names(&self, module: ModuleHandle) -> Result<Vec<String>, Failure> {
        let get = self.functions.ze_module_get_kernel_names;
        let mut count = 0u32;
        // SAFETY: the caller's promise; a null array asks for the count.
        check("zeModuleGetKernelNames", unsafe {
            get(module.0, &mut count, std::ptr::null_mut())
        })?;
        let mut names = vec![std::ptr::null::<c_char>(); count as usize];
        if count > 0 {
            // SAFETY: `names` holds `count` writable pointers.
            check("zeModuleGetKernelNames", unsafe {
                get(module.0, &mut count, names.as_mut_ptr())
            })?;
        }
        names.truncate(count as usize);
        Ok(names
            .into_iter()
            .filter(|p| !p.is_null())
            // SAFETY: the driver's names are NUL-terminated strings owned by the live module.
            .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .collect())
    }

    /// `zeModuleGetGlobalPointer`: the address and size of global `name`.
    ///
    /// # Safety
    ///
    /// `module` is live.
    pub(crate) unsafe fn global(
        &self,
        module: ModuleHandle,
        name: &CStr,
    ) -> Result<(*mut c_void, usize), Failure> {
        let mut size = 0usize;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the caller's promise; `name` is NUL-terminated; outputs writable.
        let code = unsafe {
            (self.functions.ze_module_get_global_pointer)(
                module.0,
                name.as_ptr(),
                &mut size,
                &mut ptr,
            )
        };
        check("zeModuleGetGlobalPointer", code).map(|()| (ptr, size))
    }

    /// `zeKernelCreate`.
    ///
    /// # Safety
    ///
    /// `module` is live.
    pub(crate) unsafe fn kernel_create(
        &self,
        module: ModuleHandle,
        name: &CStr,
    ) -> Result<KernelHandle, Failure> {
        let desc = sys::KernelDesc {
            stype: sys::ZE_STRUCTURE_TYPE_KERNEL_DESC,
            p_next: std::ptr::null(),
            flags: 0,
            name: name.as_ptr(),
        };
        let mut kernel = std::ptr::null_mut();
        // SAFETY: the caller's promise; a valid descriptor; `kernel` writable.
        let code = unsafe { (self.functions.ze_kernel_create)(module.0, &desc, &mut kernel) };
        check("zeKernelCreate", code).map(|()| KernelHandle(kernel))
    }

    /// `zeKernelDestroy`.
    ///
    /// # Safety
    ///
    /// `kernel` is live, destroyed once (before its module), with no launch pending.
    pub(crate) unsafe fn kernel_destroy(&self, kernel: KernelHandle) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeKernelDestroy", unsafe {
            (self.functions.ze_kernel_destroy)(kernel.0)
        })
    }

    /// `zeKernelSetGroupSize`.
    ///
    /// # Safety
    ///
    /// `kernel` is live and used by no other thread during the call.
    pub(crate) unsafe fn set_group_size(
        &self,
        kernel: KernelHandle,
        size: [u32; 3],
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise.
        check("zeKernelSetGroupSize", unsafe {
            (self.functions.ze_kernel_set_group_size)(kernel.0, size[0], size[1], size[2])
        })
    }

    /// `zeKernelSetArgumentValue` of argument `index` to `value` (its bytes).
    ///
    /// # Safety
    ///
    /// As [`Driver::set_group_size`]; `value` has the parameter's size.
    pub(crate) unsafe fn set_argument(
        &self,
        kernel: KernelHandle,
        index: u32,
        value: &[u8],
    ) -> Result<(), Failure> {
        // SAFETY: the caller's promise; the driver copies the value during the call.
        check("zeKernelSetArgumentValue", unsafe {
            (self.functions.ze_kernel_set_argument_value)(
                kernel.0,
                index,
                value.len(),
                value.as_ptr().cast(),
            )
        })
    }

    /// `zeDeviceGetMemoryProperties`: the sum of the sizes of the device's memories.
    pub(crate) fn total_memory(&self, device: DeviceHandle) -> Result<u64, Failure> {
        let get = self.functions.ze_device_get_memory_properties;
        let mut count: u32 = 0;
        // SAFETY: with a null array the call only writes the count into `count`.
        let code = unsafe { get(device.0, &mut count, std::ptr::null_mut()) };
        check("zeDeviceGetMemoryProperties", code)?;
        let mut memories = vec![sys::DeviceMemoryProperties::new(); count as usize];
        // SAFETY: `memories` holds `count` writable structures of the header's layout, each
        // with its stype set and a null pNext; the driver fills at most `count` of them and
        // writes back how many it did.
        let code = unsafe { get(device.0, &mut count, memories.as_mut_ptr()) };
        check("zeDeviceGetMemoryProperties", code)?;
        memories.truncate(count as usize);
        Ok(memories
            .iter()
            .fold(0u64, |sum, m| sum.saturating_add(m.total_size)))
    }

    /// `zeDriverGetApiVersion` as `(major, minor)`, where the loader has it.
    pub(crate) fn api_version(&self, driver: DriverHandle) -> Option<(u32, u32)> {
        let get = self.functions.ze_driver_get_api_version?;
        let mut version: sys::ZeApiVersion = 0;
        // SAFETY: `driver` came from zeDriverGet; `version` is a valid, writable u32.
        let code = unsafe { get(driver.0, &mut version) };
        (code == sys::ZE_RESULT_SUCCESS).then_some((version >> 16, version & 0xffff))
    }
}

/// Runs a count-then-fill enumeration: `get(&mut count, null)` for the count, then
/// `get(&mut count, array)` for the handles.
///
/// # Safety
///
/// `get` must call a Level Zero enumeration with that contract: given a null array it writes
/// only the count; given an array of `count` handles it writes at most `count` of them and
/// sets `count` to how many it wrote.
unsafe fn enumerate(
    function: &'static str,
    mut get: impl FnMut(*mut u32, *mut *mut c_void) -> ZeResult,
) -> Result<Vec<*mut c_void>, Failure> {
    let mut count: u32 = 0;
    check(function, get(&mut count, std::ptr::null_mut()))?;
    let mut handles = vec![std::ptr::null_mut(); count as usize];
    if count > 0 {
        check(function, get(&mut count, handles.as_mut_ptr()))?;
    }
    handles.truncate(count as usize);
    Ok(handles)
}

/// The wait list as the driver takes it: null when empty.
fn waits_ptr(waits: &mut [*mut c_void]) -> *mut sys::ZeEvent {
    if waits.is_empty() {
        std::ptr::null_mut()
    } else {
        waits.as_mut_ptr()
    }
}

/// `Ok` for `ZE_RESULT_SUCCESS`, else the failure.
pub(crate) fn check(function: &'static str, code: ZeResult) -> Result<(), Failure> {
    if code == sys::ZE_RESULT_SUCCESS {
        Ok(())
    } else {
        let name = sys::RESULTS
            .iter()
            .find(|(known, _)| *known == code)
            .map_or("unknown ze_result_t", |(_, name)| name);
        Err(Failure::new(function, code, name).hex())
    }
}
