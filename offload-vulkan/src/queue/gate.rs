//! The gate of a Vulkan queue: host functions that never block their caller (Q1, L6).
//!
//! A `VkQueue` has no host callbacks, and a submission that waited on a semaphore the host
//! signals after a host function would stall every offload queue of the device (they share
//! one `VkQueue`, and every batch opens with a barrier against all earlier work), and
//! deadlock when the function waits for another queue's later work. So no submission ever
//! waits for host code: the queue holds its later work in offload instead, as the stream
//! backend does (offload-driver's `stream_api/queue.rs`).
//!
//! Enqueuing a host function submits the open batch and closes the queue's *gate*; the
//! queue's thread ([`HostThread`]) waits for the timeline value of the work before the
//! function, runs it (marked with [`run_marked`], its panic kept for the next `sync` as
//! `Error::Callback`), and opens the gate: the operations [`Held`] behind it — batches
//! closed meanwhile (recording goes on; only submission waits), event records, waits for
//! events, later host functions — are carried out in order, up to the next one that closes
//! it again. An event recorded behind the gate has no timeline value until its batch is
//! submitted ([`Mark`]): its `sync` waits for that, `is_complete` says no. A wait for such an
//! event closes the waiting queue's gate until the event settles; the caller of
//! `wait_event` never blocks.
//!
//! Whatever waits for a queue's held work (a sync, a host access, free or unload of what it
//! uses, an event behind it) from that queue's own running host function gets
//! `InvalidArgument` at once: the work waits for the function (L6).
//!
//! The calls a buffer's or module's usage makes of a queue (`UsingQueue`, usage.rs) are
//! implemented here, with the flushes they make.
//!
//! Lock order: a queue's lock, then a mark's; a queue's lock is never taken under another
//! queue's (a settled event wakes its waiters after its queue's lock is let go).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};

use offload_core::hal::HostFn;
use offload_core::{Error, Result};
use offload_driver::{run_marked, running_host_fn, stream_key};

use super::{Open, QueueInner, QueueShared};
use crate::usage::{Released, UsingQueue};

/// What keeps a gate closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// A host function of the queue waits for the work before it, or runs.
    HostFn,
    /// The first held operation waits for an event whose batch is still held elsewhere.
    Event,
}

/// An operation held behind a closed gate, carried out in order once it opens.
pub(crate) enum Held {
    /// A batch closed while the gate was: submitted when it opens.
    Batch(Box<Open>),
    /// The next batch waits for this event (once it has a value).
    Wait(Arc<Mark>),
    /// An event recorded here: its value is the queue's last once the batches before it
    /// are submitted.
    Settle(Arc<Mark>),
    /// A host function and its number among the queue's host functions.
    HostFn(HostFn, u64),
    /// A buffer freed from the running host function while work held here uses it: it
    /// goes with the last batch submitted before this point.
    Release(Released),
}

/// A queue's gate: open, or closed with the operations held behind it.
#[derive(Default)]
pub(crate) struct Gate {
    pub(crate) blocked: Option<Blocked>,
    pub(crate) held: VecDeque<Held>,
    /// Batches closed so far, and of them those submitted (or dropped on a failure): a
    /// flush waits until the second reaches what the first was.
    pub(crate) closed: u64,
    pub(crate) released: u64,
    /// Host functions enqueued so far.
    host_fns: u64,
    /// The first failure of a held operation (a submission, a wait before a host
    /// function), for the next sync.
    pub(crate) failed: Option<Error>,
}

impl Gate {
    /// Open, with nothing held.
    pub(crate) fn is_quiet(&self) -> bool {
        self.blocked.is_none() && self.held.is_empty()
    }
}

/// Threads that hold a queue to open its gate (a host function's job, a queue that settled
/// an event another queue waits for): the last handle's drop waits until they let it go,
/// so the queue is released there and not on one of them.
#[derive(Default)]
pub(crate) struct Holders {
    count: Mutex<usize>,
    zero: Condvar,
}

impl Holders {
    fn lock(&self) -> MutexGuard<'_, usize> {
        // A count: never half-updated.
        self.count.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn hold(&self) {
        *self.lock() += 1;
    }

    fn let_go(&self) {
        let mut count = self.lock();
        *count = count.saturating_sub(1);
        self.zero.notify_all();
    }

    /// Waits until no thread holds the queue.
    pub(crate) fn wait_none(&self) {
        let mut count = self.lock();
        while *count > 0 {
            count = self
                .zero
                .wait(count)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The timeline value of an event, known once the batch before it is submitted (at once,
/// unless it was recorded behind a closed gate).
pub(crate) struct Mark {
    /// The queue it was recorded on ([`stream_key`]).
    queue: usize,
    state: Mutex<MarkState>,
    settled: Condvar,
}

#[derive(Default)]
struct MarkState {
    value: Option<u64>,
    /// Queues whose held work waits for the value.
    waiters: Vec<Weak<QueueShared>>,
}

impl Mark {
    /// An event of `queue` whose value is not known yet.
    pub(crate) fn new(queue: &QueueShared) -> Mark {
        Mark {
            queue: stream_key(queue),
            state: Mutex::default(),
            settled: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, MarkState> {
        // Each step under the lock is one assignment or push: never half-done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Gives the event its value; returns the queues that waited for it.
    fn settle(&self, value: u64) -> Vec<Weak<QueueShared>> {
        let mut state = self.lock();
        state.value.get_or_insert(value);
        self.settled.notify_all();
        std::mem::take(&mut state.waiters)
    }

    /// The value, if known.
    pub(crate) fn value(&self) -> Option<u64> {
        self.lock().value
    }

    /// The value, if known; otherwise `queue` is told ([`QueueShared::reopen`]) once it is.
    fn value_or_wait(&self, queue: &Arc<QueueShared>) -> Option<u64> {
        let mut state = self.lock();
        if state.value.is_none() {
            state.waiters.push(Arc::downgrade(queue));
        }
        state.value
    }

    /// Waits for the value. From a host function of the event's own queue, an unknown
    /// value would come only after the function returned: `InvalidArgument` (L6).
    pub(crate) fn wait(&self) -> Result<u64> {
        let mut state = self.lock();
        if state.value.is_none() && own(self.queue) {
            return Err(waits_for_itself());
        }
        loop {
            if let Some(value) = state.value {
                return Ok(value);
            }
            state = self
                .settled
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Whether this thread runs a host function of the queue at `key`.
fn own(key: usize) -> bool {
    running_host_fn().is_some_and(|(at, _)| at == key)
}

/// The refusal of a wait that would wait for the host function making it (L6).
pub(crate) fn waits_for_itself() -> Error {
    Error::invalid(
        "",
        "a host function waits for its own queue, whose later work waits for it",
    )
}

/// What an operation left to do once the queue's lock is let go: the queues waiting for an
/// event it settled go on.
#[derive(Default)]
pub(crate) struct After {
    waiters: Vec<Weak<QueueShared>>,
}

impl After {
    /// Settles `mark` at `value`; its waiters go on once [`QueueShared::finish`] runs.
    pub(crate) fn settled(&mut self, mark: &Mark, value: u64) {
        self.waiters.extend(mark.settle(value));
    }
}

impl std::fmt::Debug for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mark")
            .field("value", &self.value())
            .finish_non_exhaustive()
    }
}

/// What the usages of buffers and modules ask of a queue: the calls below.
impl UsingQueue for QueueShared {
    fn flush(&self) -> Result<()> {
        QueueShared::flush(self)
    }

    fn is_own(&self) -> bool {
        QueueShared::is_own(self)
    }

    fn is_gated(&self) -> bool {
        QueueShared::is_gated(self)
    }

    fn release_after(self: Arc<Self>, released: Released) {
        QueueShared::release_after(&self, released);
    }
}

impl QueueShared {
    /// Whether this thread runs one of this queue's host functions.
    pub(crate) fn is_own(&self) -> bool {
        own(stream_key(self))
    }

    /// Whether the gate is closed or holds work.
    pub(crate) fn is_gated(&self) -> bool {
        !self.lock().gate.is_quiet()
    }

    /// Carries `op` out now, or holds it behind the closed gate.
    pub(crate) fn put(
        self: &Arc<Self>,
        inner: &mut QueueInner,
        op: Held,
        after: &mut After,
    ) -> Result<()> {
        if inner.gate.blocked.is_some() {
            inner.gate.held.push_back(op);
            return Ok(());
        }
        self.apply(inner, op, after)
    }

    /// Carries `op` out, the gate open (the queue's lock held, so operations go in the
    /// order they were enqueued); a host function, or a wait for an event not yet
    /// settled, closes the gate.
    fn apply(self: &Arc<Self>, inner: &mut QueueInner, op: Held, after: &mut After) -> Result<()> {
        match op {
            Held::Batch(open) => self.send(inner, *open),
            Held::Wait(mark) => {
                match mark.value_or_wait(self) {
                    Some(value) => inner.wait = inner.wait.max(value),
                    None => {
                        inner.gate.held.push_front(Held::Wait(mark));
                        inner.gate.blocked = Some(Blocked::Event);
                    }
                }
                Ok(())
            }
            Held::Settle(mark) => {
                after.settled(&mark, self.last().max(inner.wait));
                Ok(())
            }
            Held::HostFn(f, number) => {
                // The work before it, and the events this queue was told to wait for.
                let value = self.last().max(inner.wait);
                inner.gate.blocked = Some(Blocked::HostFn);
                self.holders.hold();
                let queue = self.clone();
                let posted = self
                    .host
                    .post(Box::new(move || queue.run_host_fn(f, value, number)));
                if posted.is_err() {
                    inner.gate.blocked = None;
                    self.holders.let_go();
                }
                posted
            }
            Held::Release(released) => {
                match inner.in_flight.back_mut() {
                    Some(batch) => batch.hold_released(released),
                    // Nothing was submitted (a failed submission): no work uses it.
                    None => drop(released),
                }
                Ok(())
            }
        }
    }

    /// Enqueues host function `f`: the open batch is submitted (or held), then the gate
    /// closes behind `f` (module docs).
    pub(crate) fn enqueue_host_fn(self: &Arc<Self>, f: HostFn) -> Result<()> {
        let mut after = After::default();
        let put = {
            let mut inner = self.lock();
            self.submit(&mut inner).and_then(|()| {
                inner.gate.host_fns += 1;
                let number = inner.gate.host_fns;
                self.put(&mut inner, Held::HostFn(f, number), &mut after)
            })
        };
        self.finish(after);
        put
    }

    /// Makes the queue's later work wait for the event `mark` (held until it has a value).
    pub(crate) fn wait_for_mark(self: &Arc<Self>, mark: &Arc<Mark>) -> Result<()> {
        let mut inner = self.lock();
        if let (None, Some(value)) = (inner.gate.blocked, mark.value()) {
            // As before the gate: the next submission waits for it.
            inner.wait = inner.wait.max(value);
            return Ok(());
        }
        // The work recorded before the wait goes first, without it.
        self.submit(&mut inner)?;
        let mut after = After::default();
        let put = self.put(&mut inner, Held::Wait(mark.clone()), &mut after);
        drop(inner);
        self.finish(after);
        put
    }

    /// Settles `mark` after the work enqueued so far (submitting the open batch, or holding
    /// it): the event `record` makes.
    pub(crate) fn settle_after(
        self: &Arc<Self>,
        inner: &mut QueueInner,
        mark: Arc<Mark>,
    ) -> Result<After> {
        let mut after = After::default();
        self.submit(inner)?;
        self.put(inner, Held::Settle(mark), &mut after)?;
        Ok(after)
    }

    /// Frees `released` once the work held here that uses it has run (a buffer freed in
    /// this queue's running host function, L6).
    pub(crate) fn release_after(self: &Arc<Self>, released: Released) {
        let mut inner = self.lock();
        if let Err(e) = self.submit(&mut inner) {
            // The open batch was dropped, not run; the held batches before it may still use
            // the buffer. The failure is the next sync's.
            inner.gate.failed.get_or_insert(e);
        }
        let mut after = After::default();
        // Held: the gate is closed while its host function runs. Were it open, the release
        // would go with the last batch submitted, which is how `apply` handles it.
        if let Err(e) = self.put(&mut inner, Held::Release(released), &mut after) {
            inner.gate.failed.get_or_insert(e);
        }
        drop(inner);
        self.finish(after);
    }

    /// On the queue's thread: waits for the work before the host function (`value`; every
    /// batch after it is held), runs it, and opens the gate (its holder count was taken
    /// when it was posted).
    fn run_host_fn(self: Arc<Self>, f: HostFn, value: u64, number: u64) {
        if let Err(e) = self.device.wait_for(value) {
            self.lock().gate.failed.get_or_insert(e);
        }
        run_marked(stream_key(Arc::as_ptr(&self)), number, f, &self.failure);
        let holders = self.holders.clone();
        self.reopen(Blocked::HostFn);
        holders.let_go();
    }

    /// Opens the gate closed for `reason` and carries out the held operations, up to the
    /// next that closes it again; lets the queue go before it tells the waiters.
    pub(crate) fn reopen(self: Arc<Self>, reason: Blocked) {
        let holders = self.holders.clone();
        let mut after = After::default();
        {
            let mut inner = self.lock();
            if inner.gate.blocked != Some(reason) {
                return;
            }
            holders.hold();
            inner.gate.blocked = None;
            while inner.gate.blocked.is_none() {
                let Some(op) = inner.gate.held.pop_front() else {
                    break;
                };
                if let Err(e) = self.apply(&mut inner, op, &mut after) {
                    inner.gate.failed.get_or_insert(e);
                }
            }
            self.changed.notify_all();
        }
        self.finish(after);
        drop(self);
        holders.let_go();
    }

    /// Tells the queues waiting for an event that it settled (outside any queue's lock).
    pub(crate) fn finish(&self, after: After) {
        for waiter in after.waiters {
            if let Some(queue) = waiter.upgrade() {
                queue.reopen(Blocked::Event);
            }
        }
    }

    /// Submits the open batch (or holds it), then waits until every batch closed so far is
    /// submitted. Refused from this queue's own host function while batches are held (they
    /// wait for it).
    pub(crate) fn flush(&self) -> Result<()> {
        let mut inner = self.lock();
        self.submit(&mut inner)?;
        let target = inner.gate.closed;
        if inner.gate.released < target && self.is_own() {
            return Err(waits_for_itself());
        }
        while inner.gate.released < target {
            inner = self
                .changed
                .wait(inner)
                .unwrap_or_else(PoisonError::into_inner);
        }
        Ok(())
    }

    /// Submits the open batch (or holds it), then waits until the gate is open with nothing
    /// held: every host function enqueued so far has run and every batch is submitted.
    /// Refused from this queue's own host function.
    pub(crate) fn drain(&self) -> Result<()> {
        let mut inner = self.lock();
        self.submit(&mut inner)?;
        if !inner.gate.is_quiet() && self.is_own() {
            return Err(waits_for_itself());
        }
        while !inner.gate.is_quiet() {
            inner = self
                .changed
                .wait(inner)
                .unwrap_or_else(PoisonError::into_inner);
        }
        Ok(())
    }

    /// The first failure of a held operation, once.
    pub(crate) fn take_failed(&self) -> Option<Error> {
        self.lock().gate.failed.take()
    }
}
