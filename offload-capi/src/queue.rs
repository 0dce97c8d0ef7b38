//! Queues and events: in-order asynchronous work (Q1) — queued copies, fills, launches,
//! host functions — and the events that order and time it.

use std::ffi::c_void;
use std::time::Duration;

use offload::{Buffer, Device, Event, Queue};

use crate::ffi::{bytes, bytes_mut, out};
use crate::memory::offload_buffer_t;
use crate::runtime::offload_device_t;
use crate::status::{Fail, guard, offload_status_t};
use crate::table;
use offload::Error;

/// An in-order queue of a device.
#[allow(non_camel_case_types)]
pub type offload_queue_t = u64;
/// A point in a queue's work.
#[allow(non_camel_case_types)]
pub type offload_event_t = u64;

/// A host function: called with its `user_data` once the work enqueued before it has
/// finished, on a thread of offload's choosing (never a driver's, L6). It may call the
/// C API, except wait for its own queue (`OFFLOAD_ERROR_INVALID_ARGUMENT`, L6).
#[allow(non_camel_case_types)]
pub type offload_host_fn_t = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// A pointer the caller promises may be used from any thread (its `# Safety`).
#[derive(Clone, Copy)]
pub(crate) struct UserData(pub(crate) *mut c_void);
// SAFETY: the C caller promises, per function, that its user data may be used from any
// thread while offload holds it; offload only passes it back.
unsafe impl Send for UserData {}
// SAFETY: as above; offload never reads through it.
unsafe impl Sync for UserData {}

/// Not part of the C API: runs `f` on the Rust [`Queue`] behind the C handle `queue`, held
/// for the length of `f` as any call holds it; `None` if the handle names no live queue.
/// For Rust code of the same process that must use one queue through both APIs — the
/// overhead benchmark times the C and Rust launch on the same queue with it, so that the
/// two sides differ by the API alone.
///
/// ```
/// use offload_capi::queue::{offload_queue_create, with_queue};
/// use offload_capi::runtime::{offload_device_of, offload_init, offload_shutdown};
/// let (mut rt, mut dev, mut q) = (0, 0, 0);
/// // SAFETY: every output pointer is a live local; a null config and `was_last` are allowed.
/// unsafe {
///     offload_init(std::ptr::null(), &mut rt);
///     offload_device_of(rt, 0, &mut dev);
///     offload_queue_create(dev, &mut q);
/// }
/// assert_eq!(with_queue(q, |queue| queue.sync().is_ok()), Some(true));
/// assert_eq!(with_queue(0, |_| ()), None);
/// // SAFETY: as above.
/// unsafe { offload_shutdown(rt, std::ptr::null_mut()) };
/// ```
#[doc(hidden)]
pub fn with_queue<R>(queue: offload_queue_t, f: impl FnOnce(&Queue) -> R) -> Option<R> {
    let q = table::get::<Queue>("with_queue", queue).ok()?;
    Some(f(&q))
}

/// Makes a queue on `device` (liboffload's `olCreateQueue`).
///
/// # Safety
/// `queue` must point to a writable `offload_queue_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_queue_create(
    device: offload_device_t,
    queue: *mut offload_queue_t,
) -> offload_status_t {
    const CALL: &str = "offload_queue_create";
    guard(CALL, || {
        let o = out(CALL, "queue", queue)?;
        // The fixes its launch refusals suggest are written in C.
        let q = table::get::<Device>(CALL, device)?
            .queue()?
            .for_caller(offload::Caller::C);
        o.set(table::insert(CALL, table::epoch_of(device), q)?);
        Ok(())
    })
}

/// Destroys a queue once its work has finished (liboffload's `olDestroyQueue`); its handle
/// is dead from now on.
#[unsafe(no_mangle)]
pub extern "C" fn offload_queue_destroy(queue: offload_queue_t) -> offload_status_t {
    const CALL: &str = "offload_queue_destroy";
    guard(CALL, || {
        drop(table::remove::<Queue>(CALL, queue)?);
        Ok(())
    })
}

/// Waits until the queue's work has finished (liboffload's `olSyncQueue`); returns a host
/// function's failure once (L6).
#[unsafe(no_mangle)]
pub extern "C" fn offload_queue_sync(queue: offload_queue_t) -> offload_status_t {
    const CALL: &str = "offload_queue_sync";
    guard(CALL, || {
        table::get::<Queue>(CALL, queue)?.sync()?;
        Ok(())
    })
}

/// Whether the queue's work has finished, without waiting.
///
/// # Safety
/// `idle` must point to a writable `bool` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_queue_is_idle(
    queue: offload_queue_t,
    idle: *mut bool,
) -> offload_status_t {
    const CALL: &str = "offload_queue_is_idle";
    guard(CALL, || {
        let o = out(CALL, "idle", idle)?;
        o.set(table::get::<Queue>(CALL, queue)?.is_idle()?);
        Ok(())
    })
}

/// Enqueues a copy of `len` bytes of `src` into `buffer` at `offset`; `src` is copied
/// before this returns (Q1).
///
/// # Safety
/// `src` must point to `len` readable bytes (null is refused unless `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_queue_write(
    queue: offload_queue_t,
    buffer: offload_buffer_t,
    offset: usize,
    src: *const u8,
    len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_queue_write";
    guard(CALL, || {
        // SAFETY: the caller promises `len` readable bytes at `src`.
        let src = unsafe { bytes(CALL, "src", src, len) }?;
        let q = table::get::<Queue>(CALL, queue)?;
        q.write(&*table::get::<Buffer>(CALL, buffer)?, offset, src)?;
        Ok(())
    })
}

/// Copies `len` bytes of `buffer` at `offset` into `dst` once the queue's earlier work has
/// finished: it waits (a queued read into memory the caller gets back at once could not
/// be sound).
///
/// # Safety
/// `dst` must point to `len` writable bytes (null is refused unless `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_queue_read(
    queue: offload_queue_t,
    buffer: offload_buffer_t,
    offset: usize,
    dst: *mut u8,
    len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_queue_read";
    guard(CALL, || {
        // SAFETY: the caller promises `len` writable bytes at `dst`.
        let dst = unsafe { bytes_mut(CALL, "dst", dst, len) }?;
        let q = table::get::<Queue>(CALL, queue)?;
        q.read(&*table::get::<Buffer>(CALL, buffer)?, offset, dst)?;
        Ok(())
    })
}

/// Enqueues filling `len` bytes of `buffer` at `offset` with the `pattern_len` bytes of
/// `pattern` repeated (liboffload's `olMemFill`): `pattern_len` must divide `len`.
///
/// # Safety
/// `pattern` must point to `pattern_len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_queue_fill(
    queue: offload_queue_t,
    buffer: offload_buffer_t,
    offset: usize,
    len: usize,
    pattern: *const u8,
    pattern_len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_queue_fill";
    guard(CALL, || {
        // SAFETY: the caller promises `pattern_len` readable bytes at `pattern`.
        let pattern = unsafe { bytes(CALL, "pattern", pattern, pattern_len) }?;
        let q = table::get::<Queue>(CALL, queue)?;
        q.fill(&*table::get::<Buffer>(CALL, buffer)?, offset, len, pattern)?;
        Ok(())
    })
}

/// Enqueues a copy of `len` bytes of `src` at `src_offset` into `dst` at `dst_offset`
/// (liboffload's `olMemcpy` with a queue).
#[unsafe(no_mangle)]
pub extern "C" fn offload_queue_copy(
    queue: offload_queue_t,
    src: offload_buffer_t,
    src_offset: usize,
    dst: offload_buffer_t,
    dst_offset: usize,
    len: usize,
) -> offload_status_t {
    const CALL: &str = "offload_queue_copy";
    guard(CALL, || {
        let q = table::get::<Queue>(CALL, queue)?;
        let s = table::get::<Buffer>(CALL, src)?;
        let d = table::get::<Buffer>(CALL, dst)?;
        q.copy(&s, src_offset, &d, dst_offset, len)?;
        Ok(())
    })
}

/// Enqueues the host function `f` with `user_data` (liboffload's `olLaunchHostFunction`):
/// it runs once the work enqueued before it has finished, and later work waits for it.
///
/// # Safety
/// `f` must be safe to call with `user_data` once, from any thread, until the queue's next
/// sync returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_queue_host_fn(
    queue: offload_queue_t,
    f: offload_host_fn_t,
    user_data: *mut c_void,
) -> offload_status_t {
    const CALL: &str = "offload_queue_host_fn";
    guard(CALL, || {
        let Some(f) = f else {
            return Err(Fail::from(Error::invalid(CALL, "`f` is a null pointer")));
        };
        let user = UserData(user_data);
        let q = table::get::<Queue>(CALL, queue)?;
        q.enqueue_host_fn(move || {
            let user = user;
            // SAFETY: the caller promised `f` may be called with `user_data` once, here.
            unsafe { f(user.0) }
        })?;
        Ok(())
    })
}

/// Records an event after the work enqueued so far (liboffload's `olCreateEvent`).
///
/// # Safety
/// `event` must point to a writable `offload_event_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_queue_record(
    queue: offload_queue_t,
    event: *mut offload_event_t,
) -> offload_status_t {
    const CALL: &str = "offload_queue_record";
    guard(CALL, || {
        let o = out(CALL, "event", event)?;
        let e = table::get::<Queue>(CALL, queue)?.record()?;
        o.set(table::insert(CALL, table::epoch_of(queue), e)?);
        Ok(())
    })
}

/// Makes later work on `queue` wait until `event` has completed (liboffload's
/// `olWaitEvents`, one event at a time).
#[unsafe(no_mangle)]
pub extern "C" fn offload_queue_wait_event(
    queue: offload_queue_t,
    event: offload_event_t,
) -> offload_status_t {
    const CALL: &str = "offload_queue_wait_event";
    guard(CALL, || {
        let q = table::get::<Queue>(CALL, queue)?;
        q.wait(&*table::get::<Event>(CALL, event)?)?;
        Ok(())
    })
}

/// Waits until the event has completed (liboffload's `olSyncEvent`).
#[unsafe(no_mangle)]
pub extern "C" fn offload_event_sync(event: offload_event_t) -> offload_status_t {
    const CALL: &str = "offload_event_sync";
    guard(CALL, || {
        table::get::<Event>(CALL, event)?.sync()?;
        Ok(())
    })
}

/// Whether the event has completed, without waiting.
///
/// # Safety
/// `complete` must point to a writable `bool` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_event_is_complete(
    event: offload_event_t,
    complete: *mut bool,
) -> offload_status_t {
    const CALL: &str = "offload_event_is_complete";
    guard(CALL, || {
        let o = out(CALL, "complete", complete)?;
        o.set(table::get::<Event>(CALL, event)?.is_complete()?);
        Ok(())
    })
}

/// Nanoseconds between `start` and `end` (both complete, on the same queue).
///
/// # Safety
/// `nanoseconds` must point to a writable `uint64_t` (null is refused).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_event_elapsed(
    start: offload_event_t,
    end: offload_event_t,
    nanoseconds: *mut u64,
) -> offload_status_t {
    const CALL: &str = "offload_event_elapsed";
    guard(CALL, || {
        let o = out(CALL, "nanoseconds", nanoseconds)?;
        let s = table::get::<Event>(CALL, start)?;
        let took: Duration = table::get::<Event>(CALL, end)?.elapsed_since(&s)?;
        o.set(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
        Ok(())
    })
}

/// Destroys an event (liboffload's `olDestroyEvent`); its handle is dead from now on.
#[unsafe(no_mangle)]
pub extern "C" fn offload_event_destroy(event: offload_event_t) -> offload_status_t {
    const CALL: &str = "offload_event_destroy";
    guard(CALL, || {
        drop(table::remove::<Event>(CALL, event)?);
        Ok(())
    })
}
