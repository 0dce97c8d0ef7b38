//! Event pools and events: creation, signalling, waiting, queries and kernel timestamps.

use offload_driver::Failure;

use super::{ContextHandle, DeviceHandle, Driver, EventHandle, PoolHandle, check, sys};

impl Driver {
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
        // SAFETY: events are live while their owners hold them (stream.rs); signalling is
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
}
