//! Where offload runs user code, as each thread knows it (L6, docs/contract.md).
//!
//! Offload runs user code in host functions (on a backend's executor, a driver's callback
//! thread or the caller's own thread), in the drop of what a host function captured, in
//! module callbacks (`on_setup`, `on_teardown`), and in the drop of an adopted buffer's
//! owner (`Device::adopt`). An offload call made from there must never
//! wait for something that waits for that very code. This module only keeps the facts the
//! rest of the runtime decides by: how deep this thread is in user code offload runs, and
//! which queue's host function it is running. Two const-initialised `Cell`s with no
//! destructor, so they register nothing that would pin a `dlclose`d library (L2).
//!
//! What is decided by them:
//! - the last reference given back in user code tears down on a helper thread, after the
//!   user code returned (`lifecycle::release`): the teardown drains queues and takes locks
//!   that this very code holds or runs under;
//! - an `init` from user code never waits for a teardown in progress (the teardown may be
//!   waiting for it);
//! - a host function that waits for its own queue, or for an unfinished event of it, gets
//!   `InvalidArgument` at once instead of waiting for itself (`handles::queue`);
//! - a queue dropped inside its own host function is released on a helper thread;
//! - inside `Buffer::with_mapped`'s closure, which runs holding that buffer's memory lock,
//!   every offload call that could wait (a buffer's lock, the generation's state, a queue
//!   or event, hence every sync, copy, launch, allocation and load) is refused at once with
//!   `InvalidArgument` (L7): a wait there could be for a thread that waits for that lock.

use std::cell::Cell;

crate::sync::thread_local! {
    /// How many levels of user code offload is running on this thread.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// The queue whose host function this thread runs: (generation id, queue id), or
    /// (0, 0). Generation ids start at 1.
    static HOST_FN_OF: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// How many `Buffer::with_mapped` closures this thread is inside.
    static MAPPED: Cell<usize> = const { Cell::new(0) };
}

/// This thread runs user code until the scope is dropped.
pub(crate) struct UserCode {
    outer_queue: (u64, u64),
}

/// Marks user code that offload runs (a module callback, or a host function of `queue` =
/// (generation id, queue id) and the drop of what it captured).
pub(crate) fn enter(queue: Option<(u64, u64)>) -> UserCode {
    DEPTH.with(|d| d.set(d.get() + 1));
    let outer_queue = HOST_FN_OF.with(|q| match queue {
        Some(queue) => q.replace(queue),
        None => q.get(),
    });
    UserCode { outer_queue }
}

impl Drop for UserCode {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        HOST_FN_OF.with(|q| q.set(self.outer_queue));
    }
}

/// Whether this thread is running user code that offload called.
pub(crate) fn in_user_code() -> bool {
    DEPTH.with(Cell::get) > 0
}

/// The queue whose host function this thread is running, if any: (generation id, queue id).
pub(crate) fn host_fn_of() -> Option<(u64, u64)> {
    let queue = HOST_FN_OF.with(Cell::get);
    (queue.0 != 0).then_some(queue)
}

/// This thread runs `Buffer::with_mapped`'s closure, holding a buffer's memory lock, until
/// the scope is dropped. It is user code offload runs too (a last reference given back
/// there tears down on a helper thread, which waits for the lock, not the other way round).
pub(crate) struct Mapped {
    _user: UserCode,
}

/// Marks the closure of `Buffer::with_mapped`.
pub(crate) fn enter_mapped() -> Mapped {
    MAPPED.with(|m| m.set(m.get() + 1));
    Mapped { _user: enter(None) }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        MAPPED.with(|m| m.set(m.get().saturating_sub(1)));
    }
}

/// `InvalidArgument` for `call` when this thread is inside `Buffer::with_mapped`'s closure
/// (L7: no wait under a buffer's lock); `Ok` elsewhere.
#[inline]
pub(crate) fn refuse_in_mapped(call: &'static str) -> crate::Result<()> {
    if MAPPED.with(Cell::get) == 0 {
        return Ok(());
    }
    Err(in_mapped(call))
}

#[cold]
#[inline(never)]
fn in_mapped(call: &'static str) -> crate::Error {
    crate::Error::invalid(
        call,
        "called inside Buffer::with_mapped's closure, which holds that buffer's memory: a \
         call that may wait (on a buffer, a queue, an event, the runtime's state) is refused \
         there, since what it waits for could be waiting for that buffer (L7); make the call \
         after with_mapped returns",
    )
}
