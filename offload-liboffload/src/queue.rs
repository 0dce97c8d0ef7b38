//! Queues, events and host functions: `olCreateQueue`, `olDestroyQueue`, `olSyncQueue`,
//! `olGetQueueInfo`, `olWaitEvents`, `olLaunchHostFunction`, `olCreateEvent`,
//! `olDestroyEvent`, `olSyncEvent` and `olGetEventInfo`, over offload's `Queue` and
//! `Event`.
//!
//! A call on a queue or event looks its handle up without the state's lock, so a sync
//! waits without holding what another thread's call needs. A host function runs the
//! caller's callback on offload's host-function thread; a call of this library from inside
//! it (which `OffloadAPI.h` forbids) is refused with `OL_ERRC_INVALID_ARGUMENT` at once,
//! never waited for: a sync holding the queue the callback runs on cannot deadlock with it.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

use offload_handles::Taken;

use crate::abi::*;
use crate::info;
use crate::objects::{self, EventObj, QueueObj};
use crate::result::{Res, stat};
use crate::state::{self, DevKind, device_handle, device_index, fail, listed};

thread_local! {
    /// Whether this thread runs a host function's callback now (no destructor: `dlclose`
    /// stays possible).
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
}

/// Callbacks running now, on any thread: while none runs, no call can come from one, and
/// the thread-local flag (a `__tls_get_addr` call in a shared library) is not read. A
/// thread inside a callback counted itself before entering it, so it always sees a count
/// above 0 (program order): the pre-check never hides its own callback.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Whether this thread runs an `olLaunchHostFunction` callback now.
#[inline]
pub(crate) fn inside_host_fn() -> bool {
    RUNNING.load(Ordering::Relaxed) != 0 && IN_HOST_FN.with(Cell::get)
}

entry! {
    /// A queue on one of offload's devices.
    olCreateQueue / olCreateQueueWithCodeLoc (Device: ol_device_handle_t, Queue: *mut ol_queue_handle_t) {
        state::with_state(|st| {
            let live = listed(st)?;
            let index = device_index(live, Device)?;
            if Queue.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olCreateQueue: Queue is NULL").into());
            }
            let DevKind::Offload(dev) = &live.devices[index].kind else {
                return Err(stat!(
                    OL_ERRC_UNSUPPORTED,
                    "olCreateQueue: the HOST platform's device is only a memcpy endpoint for host pointers (as in liboffload); make the queue on one of offload's devices"
                ).into());
            };
            let queue = dev.0.queue().map_err(|e| fail("olCreateQueue", e))?;
            let queue = queue.for_caller(offload::Caller::Liboffload);
            let handle = objects::insert_at(objects::epoch(), QueueObj { queue, device: index })?;
            // SAFETY: non-null (checked above); the caller promises a writable handle.
            unsafe { Queue.write(objects::as_handle(handle)) };
            Ok(())
        })
    }
}

entry! {
    /// Destroys a queue; the work enqueued on it still runs, and its events stay valid.
    olDestroyQueue / olDestroyQueueWithCodeLoc (Queue: ol_queue_handle_t) {
        // Dropped here, without the state's lock; a call of another thread that still
        // holds it drops it when it returns.
        state::finish(objects::take::<QueueObj>(Queue).map(drop))
    }
}

entry! {
    /// Waits for the work enqueued on a queue.
    olSyncQueue / olSyncQueueWithCodeLoc (Queue: ol_queue_handle_t) {
        let done = objects::get::<QueueObj>(Queue)
            .and_then(|q| q.queue.sync().map_err(|e| fail("olSyncQueue", e)));
        state::finish(done)
    }
}

fn queue_value(queue: ol_queue_handle_t, prop: ol_queue_info_t) -> Res<info::Value> {
    let q = objects::get::<QueueObj>(queue)?;
    Ok(match prop {
        ol_queue_info_t::OL_QUEUE_INFO_DEVICE => {
            let epoch = state::with_live(|live| Ok(live.epoch))?;
            info::Value::Word(device_handle(epoch, q.device).addr())
        }
        ol_queue_info_t::OL_QUEUE_INFO_EMPTY => {
            info::Value::Bool(q.queue.is_idle().map_err(|e| fail("olGetQueueInfo", e))?)
        }
        _ => return Err(info::bad_enum()),
    })
}

entry! {
    /// Work enqueued on `Queue` from now on waits for every event of `Events`.
    olWaitEvents / olWaitEventsWithCodeLoc (Queue: ol_queue_handle_t, Events: *mut ol_event_handle_t, NumEvents: usize) {
        let waited = objects::get::<QueueObj>(Queue).and_then(|q| {
            if Events.is_null() {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olWaitEvents: Events is NULL").into());
            }
            // SAFETY: the caller promises NumEvents handles at Events.
            let events = unsafe { std::slice::from_raw_parts(Events, NumEvents) };
            // Every handle is checked before anything is enqueued.
            let events = events
                .iter()
                .map(|&e| objects::get::<EventObj>(e))
                .collect::<Res<Vec<_>>>()?;
            for e in &events {
                q.queue.wait(&e.event).map_err(|err| fail("olWaitEvents", err))?;
            }
            Ok(())
        });
        state::finish(waited)
    }
}

/// The caller's callback and its data, run on offload's host-function thread.
struct HostCall {
    callback: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
}

// SAFETY: liboffload runs a host function's callback on a thread of its own with the
// caller's data: a caller of olLaunchHostFunction hands both over to another thread, as
// OffloadAPI.h documents; offload only carries the pointer there.
unsafe impl Send for HostCall {}

impl HostCall {
    fn run(self) {
        RUNNING.fetch_add(1, Ordering::Relaxed);
        IN_HOST_FN.with(|f| f.set(true));
        // SAFETY: the caller's function with the caller's data, called as the header
        // documents, once the queue's earlier work finished.
        unsafe { (self.callback)(self.data) };
        IN_HOST_FN.with(|f| f.set(false));
        RUNNING.fetch_sub(1, Ordering::Relaxed);
    }
}

entry! {
    /// Enqueues a call of `Callback(UserData)` on the host, after the queue's earlier work
    /// and before its later work.
    olLaunchHostFunction / olLaunchHostFunctionWithCodeLoc (Queue: ol_queue_handle_t, Callback: ol_host_function_cb_t, UserData: *mut c_void) {
        let enqueued = objects::get::<QueueObj>(Queue).and_then(|q| {
            let Some(callback) = Callback else {
                return Err(stat!(OL_ERRC_INVALID_NULL_POINTER, "olLaunchHostFunction: Callback is NULL").into());
            };
            let call = HostCall { callback, data: UserData };
            q.queue.enqueue_host_fn(move || call.run()).map_err(|e| fail("olLaunchHostFunction", e))
        });
        state::finish(enqueued)
    }
}

entry! {
    /// An event, complete once the work enqueued on `Queue` so far has finished.
    olCreateEvent / olCreateEventWithCodeLoc (Queue: ol_queue_handle_t, Event: *mut ol_event_handle_t) {
        let q = match objects::get::<QueueObj>(Queue) {
            Ok(q) => q,
            Err(f) => return state::finish(Err(f)),
        };
        if Event.is_null() {
            return Err(&stat!(OL_ERRC_INVALID_NULL_POINTER, "olCreateEvent: Event is NULL").0);
        }
        let event = match q.queue.record() {
            Ok(e) => e,
            Err(e) => return state::finish(Err(fail("olCreateEvent", e))),
        };
        let queue = Queue.addr() as u64;
        let kept = objects::insert_from::<QueueObj, _>(queue, EventObj { event, queue }).map(|handle| {
            // SAFETY: non-null (checked above); the caller promises a writable handle.
            unsafe { Event.write(objects::as_handle(handle)) };
        });
        state::finish(kept)
    }
}

entry! {
    /// Destroys an event.
    olDestroyEvent / olDestroyEventWithCodeLoc (Event: ol_event_handle_t) {
        state::finish(objects::take::<EventObj>(Event).map(|taken| match taken {
            Taken::Owned(e) => drop(e),
            Taken::InUse(held) => drop(held),
        }))
    }
}

entry! {
    /// Waits for an event.
    olSyncEvent / olSyncEventWithCodeLoc (Event: ol_event_handle_t) {
        let done = objects::get::<EventObj>(Event)
            .and_then(|e| e.event.sync().map_err(|err| fail("olSyncEvent", err)));
        state::finish(done)
    }
}

fn event_value(event: ol_event_handle_t, prop: ol_event_info_t) -> Res<info::Value> {
    let e = objects::get::<EventObj>(event)?;
    Ok(match prop {
        ol_event_info_t::OL_EVENT_INFO_QUEUE => info::Value::Word(e.queue as usize),
        ol_event_info_t::OL_EVENT_INFO_IS_COMPLETE => info::Value::Bool(
            e.event
                .is_complete()
                .map_err(|err| fail("olGetEventInfo", err))?,
        ),
        _ => return Err(info::bad_enum()),
    })
}

info_query!("queue", olGetQueueInfo / olGetQueueInfoWithCodeLoc, olGetQueueInfoSize / olGetQueueInfoSizeWithCodeLoc, Queue: ol_queue_handle_t, ol_queue_info_t, queue_value);
info_query!("event", olGetEventInfo / olGetEventInfoWithCodeLoc, olGetEventInfoSize / olGetEventInfoSizeWithCodeLoc, Event: ol_event_handle_t, ol_event_info_t, event_value);
