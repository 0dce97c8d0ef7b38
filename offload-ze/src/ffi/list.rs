//! Immediate command lists and what offload appends to them: copies, fills, barriers and
//! launches.

use std::ffi::c_void;

use offload_driver::Failure;

use super::{
    ContextHandle, DeviceHandle, Driver, EventHandle, KernelHandle, ListHandle, check, sys,
    waits_ptr,
};

impl Driver {
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
}
