//! The stream under a queue of a stream-based vendor API ([`QueueShared`]): the vendor's
//! non-blocking stream, the bytes it keeps for queued writes, its gate and the operations
//! held behind it ([`Op`]), and the events of `record` ([`EventInner`]); and [`Uses`], the
//! queues whose queued work uses a buffer or a module. Buffers, modules and queues all hold
//! these, so they sit below them (an operation holds its buffers and module by type only,
//! [`Held`]); the `hal::Queue` and `hal::Event` impls are queue.rs's.
//!
//! # Host functions: a gate in offload, never a waiting stream
//!
//! A host function may call offload (L6), and CUDA's module load and unload, `cuMemFree`
//! and `cuMemFreeHost` wait until no stream of the context has unfinished work: measured
//! on an H200 (driver 580), they never return while a stream waits, whether it waits inside
//! a `cuLaunchHostFunc` callback or on `cuStreamWaitValue32`. So no stream ever waits for a
//! host function. The queue holds its later work itself instead: enqueuing a host function
//! closes the queue's *gate*; the queue's own thread (`HostThread`) synchronises the stream
//! (which then holds exactly the work before the function), runs the function there (its
//! panic caught and reported by the next `sync` as `Error::Callback`), and opens the gate,
//! handing the held operations to the vendor in order, up to the next host function. A
//! wait for an event whose record is itself still held closes the gate the same way until
//! that record reaches the vendor. Held operations were checked when they were enqueued; a
//! vendor failure when one is handed over later is reported by the next `sync`.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};

use offload_core::hal::HostFn;
use offload_core::{Error, Result};

use super::shared::DeviceCore;
use super::{StreamApi, Word, driver_error};
use crate::{HostFailure, HostThread, run_marked};

/// The queues whose queued work uses a buffer or a module.
pub(crate) type Uses<A> = crate::Uses<QueueShared<A>>;

/// The bytes of queued writes in submission order, numbered, so that two threads syncing
/// the stream at once each drop only what was enqueued before their own wait (a drain by
/// position dropped bytes still in flight, or panicked, when another sync had drained
/// first: found when teardown began to sync on a helper thread, L6).
#[derive(Default)]
pub(crate) struct Kept {
    /// The number of the first entry of `bytes`.
    first: u64,
    bytes: std::collections::VecDeque<Vec<u8>>,
}

impl Kept {
    /// The number the next pushed entry gets: what a wait that starts now covers.
    pub(crate) fn end(&self) -> u64 {
        self.first + self.bytes.len() as u64
    }

    fn push(&mut self, data: Vec<u8>) {
        self.bytes.push_back(data);
    }

    /// Drops the entries numbered below `end` that are still here.
    pub(crate) fn release_before(&mut self, end: u64) {
        while self.first < end && self.bytes.pop_front().is_some() {
            self.first += 1;
        }
    }
}

/// What an operation holds alive for its vendor call: its buffers' allocations
/// (memory.rs's), its kernel's module (program.rs's). Held by type only, to be dropped with
/// the operation: memory and modules sit above the queue's stream, since they name [`Uses`].
pub(crate) type Held = Arc<dyn Send + Sync>;

/// One operation of a queue, made (and checked) when it was enqueued, and handed to the
/// vendor then or, behind the gate, later. It holds what the vendor call needs alive.
pub(crate) enum Op<A: StreamApi> {
    Launch {
        function: A::Function,
        grid: [u32; 3],
        block: [u32; 3],
        shared_memory: u32,
        values: Vec<[u8; 8]>,
        _module: Held,
        _buffers: Vec<Held>,
    },
    Write {
        dst: u64,
        data: Vec<u8>,
        _buffer: Held,
    },
    Fill {
        dst: u64,
        word: Word,
        count: usize,
        _buffer: Held,
    },
    Copy {
        to: u64,
        from: u64,
        len: usize,
        _buffers: [Held; 2],
    },
    Record(Arc<EventInner<A>>),
    Wait(Arc<EventInner<A>>),
    /// A host function, operation `number` of the queue.
    HostFn {
        f: HostFn,
        number: u64,
    },
}

/// What keeps the gate closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Blocked {
    /// A host function of the queue is waiting for the stream, or running.
    HostFn,
    /// The head of the held operations waits for an event whose record is still held on
    /// another queue.
    Event,
}

/// The queue's gate (module docs): open, or closed with the operations held behind it.
struct Gate<A: StreamApi> {
    blocked: Option<Blocked>,
    held: VecDeque<Op<A>>,
    /// The first vendor failure of a held operation, for the next sync.
    failed: Option<Error>,
    /// Threads that hold the queue to open its gate (a host function's job, a queue
    /// letting it go after an event's record): the queue is quiet once they let it go.
    in_flight: usize,
}

/// The gate and its signal, apart from the queue: a job signals after it let the queue go,
/// so that whoever drops the last handle of the queue releases it (not the job, later:
/// the device would count it as alive at deinit).
struct GateCell<A: StreamApi> {
    state: Mutex<Gate<A>>,
    /// Told when the gate opens or a thread lets the queue go.
    quiet: Condvar,
}

impl<A: StreamApi> GateCell<A> {
    /// Gives back one `in_flight` count and tells the waiters.
    fn let_go(&self) {
        lock(&self.state).in_flight -= 1;
        self.quiet.notify_all();
    }
}

/// What an operation handed to the vendor leaves to do once the gate's lock is released:
/// the queues waiting for an event it recorded, to be let go; the objects it kept alive, to
/// be given back (their release may wait for this very queue).
struct After<A: StreamApi> {
    waiters: Vec<Weak<QueueShared<A>>>,
    kept: Vec<Op<A>>,
}

/// Operations given back, kept for a later release of the objects they hold alive.
struct Spent<A: StreamApi>(#[allow(dead_code, reason = "kept for its drop")] Vec<Op<A>>);

// SAFETY: the operations' vendor handles (functions) may be moved to any thread
// (`StreamApi`'s contract); the rest of them is `Send`.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Send for Spent<A> {}

impl<A: StreamApi> Default for After<A> {
    fn default() -> Self {
        After {
            waiters: Vec::new(),
            kept: Vec::new(),
        }
    }
}

/// A stream and what it keeps; shared with the buffers and modules whose work it holds.
pub(crate) struct QueueShared<A: StreamApi> {
    pub(crate) core: Arc<DeviceCore<A>>,
    pub(crate) stream: A::Stream,
    /// Bytes of queued writes, until the stream is known to have passed them.
    pub(crate) kept: Mutex<Kept>,
    /// A host function's panic, reported by the next sync.
    pub(crate) failure: HostFailure,
    /// Operations enqueued so far (`Stream::enqueued`).
    ops: AtomicU64,
    /// Where its host functions run; joined after the stream is destroyed.
    host: HostThread,
    gate: Arc<GateCell<A>>,
}

impl<A: StreamApi> QueueShared<A> {
    /// The queue over `stream`, a new stream of `core`'s device, its gate open.
    pub(crate) fn new(core: Arc<DeviceCore<A>>, stream: A::Stream) -> QueueShared<A> {
        QueueShared {
            core,
            stream,
            kept: Mutex::default(),
            failure: HostFailure::default(),
            ops: AtomicU64::new(0),
            host: HostThread::default(),
            gate: Arc::new(GateCell {
                state: Mutex::new(Gate {
                    blocked: None,
                    held: VecDeque::new(),
                    failed: None,
                    in_flight: 0,
                }),
                quiet: Condvar::new(),
            }),
        }
    }

    /// Numbers an operation enqueued.
    pub(crate) fn count(&self) -> u64 {
        self.ops.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Hands `op` to the vendor now (the device bound by the caller), or holds it behind
    /// the closed gate.
    pub(crate) fn enqueue(self: &Arc<Self>, op: Op<A>) -> Result<()> {
        let mut after = After::default();
        let result = {
            let mut gate = lock(&self.gate.state);
            if gate.blocked.is_some() {
                gate.held.push_back(op);
                Ok(())
            } else {
                self.submit(&mut gate, op, &mut after)
            }
        };
        self.finish(after, false);
        result
    }

    /// Hands `op` to the vendor, under the gate's lock (so operations reach it in the order
    /// they were enqueued); a host function, or a wait for an event not yet recorded,
    /// closes the gate instead.
    #[allow(unsafe_code)]
    fn submit(self: &Arc<Self>, gate: &mut Gate<A>, op: Op<A>, after: &mut After<A>) -> Result<()> {
        let api = self.core.api();
        let stream = self.stream;
        let submitted = match &op {
            Op::Launch {
                function,
                grid,
                block,
                shared_memory,
                values,
                ..
            } => {
                let mut values = values.clone();
                let mut pointers: Vec<*mut c_void> =
                    values.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
                // SAFETY: the kernel is live (the operation holds its module) and of the
                // bound device; one pointer per declared parameter (count and kinds checked
                // at enqueue against the image's, `StreamApi::kernel_params`), each to 8
                // bytes that hold the value (a parameter is at most 8 bytes), alive across
                // the call; every buffer address is a live allocation of this device, held
                // by the operation and kept for the launch by the buffer's `uses` (a free
                // first waits for this stream); geometry checked against the device's
                // limits at enqueue.
                unsafe {
                    api.launch_kernel(
                        *function,
                        *grid,
                        *block,
                        *shared_memory,
                        stream,
                        &mut pointers,
                    )
                }
            }
            Op::Write { dst, data, .. } => {
                // SAFETY: the range lies inside the live allocation (checked at enqueue) of
                // the bound device, held by the operation and kept by its `uses`; the bytes
                // go to `kept` below, where the queue keeps them until the stream is known
                // to have passed the copy (a Vec's heap bytes do not move with the Vec).
                unsafe { api.memcpy_htod_async(*dst, data, stream) }
            }
            Op::Fill {
                dst, word, count, ..
            } => {
                // SAFETY: `count` words at `dst` lie inside the live allocation (checked at
                // enqueue) of the bound device, held by the operation; `dst` is aligned to
                // the word size (checked at enqueue).
                unsafe { api.memset_async(*dst, *word, *count, stream) }
            }
            Op::Copy { to, from, len, .. } => {
                // SAFETY: both ranges lie inside live allocations (checked at enqueue) of
                // the bound device, held by the operation, and do not overlap (checked).
                unsafe { api.memcpy_dtod_async(*to, *from, *len, stream) }
            }
            Op::Record(event) => {
                // SAFETY: both are live objects of the bound device (the operation holds
                // the event).
                let recorded = unsafe { api.event_record(event.raw, stream) };
                // Recorded or failed, the event is settled: its waiters go on; a failed
                // record is this queue's error and the event's (the vendor never saw it
                // recorded, so waits and timings on it would mean nothing).
                after
                    .waiters
                    .extend(event.settle(recorded.as_ref().err().cloned()));
                recorded
            }
            Op::Wait(event) => {
                match event.settled_or_wait(self) {
                    None => {
                        gate.held.push_front(op);
                        gate.blocked = Some(Blocked::Event);
                        return Ok(());
                    }
                    // Never recorded: nothing to wait for (its queue reports the failure).
                    Some(false) => return Ok(()),
                    Some(true) => {}
                }
                // SAFETY: both are live objects of the bound device (the operation holds
                // the event).
                unsafe { api.stream_wait_event(stream, event.raw) }
            }
            Op::HostFn { .. } => {
                let Op::HostFn { f, number } = op else {
                    unreachable!()
                };
                let queue = self.clone();
                gate.blocked = Some(Blocked::HostFn);
                gate.in_flight += 1;
                return self
                    .host
                    .post(Box::new(move || queue.run_host_fn(f, number)))
                    .inspect_err(|_| {
                        gate.blocked = None;
                        gate.in_flight -= 1;
                    });
            }
        };
        let mut op = op;
        if let (Ok(()), Op::Write { data, .. }) = (&submitted, &mut op) {
            lock(&self.kept).push(std::mem::take(data));
        }
        // Not dropped here: the last hold on an allocation frees it, which waits for this
        // queue, under whose gate lock this runs.
        after.kept.push(op);
        submitted.map_err(driver_error::<A>)
    }

    /// On the queue's thread: waits for the work before the host function (the stream
    /// holds nothing else: later work is held behind the gate), runs it, and opens the
    /// gate (its `in_flight` count was taken when it was posted).
    #[allow(unsafe_code)]
    fn run_host_fn(self: Arc<Self>, f: HostFn, number: u64) {
        let reached = self.core.bind().and_then(|()| {
            // SAFETY: the stream is live (this job holds the queue) and of the bound device.
            unsafe { self.core.api().stream_synchronize(Some(self.stream)) }
                .map_err(driver_error::<A>)
        });
        if let Err(e) = reached {
            lock(&self.gate.state).failed.get_or_insert(e);
        }
        self.core.host_fns.fetch_add(1, Ordering::AcqRel);
        run_marked(
            crate::stream_key(Arc::as_ptr(&self)),
            number,
            f,
            &self.failure,
        );
        self.core.host_fns.fetch_sub(1, Ordering::AcqRel);
        let gate = self.gate.clone();
        self.reopen(Blocked::HostFn);
        gate.let_go();
    }

    /// Opens the gate closed for `reason` and hands the held operations to the vendor, up
    /// to the next that closes it again; lets the queue go before it tells the waiters.
    fn reopen(self: Arc<Self>, reason: Blocked) {
        let mut after = After::default();
        let cell = self.gate.clone();
        {
            let mut gate = lock(&cell.state);
            if gate.blocked != Some(reason) {
                return;
            }
            gate.in_flight += 1;
            gate.blocked = None;
            if let Err(e) = self.core.bind() {
                gate.failed.get_or_insert(e);
            }
            while gate.blocked.is_none() {
                let Some(op) = gate.held.pop_front() else {
                    break;
                };
                if let Err(e) = self.submit(&mut gate, op, &mut after) {
                    gate.failed.get_or_insert(e);
                }
            }
        }
        self.finish(after, true);
        drop(self);
        cell.let_go();
    }

    /// What an operation left to do, outside the gate's lock: first the queues waiting for
    /// an event it recorded go on (a release below may wait for them); then what it kept
    /// alive is given back — later (the device's next settle) on a thread that opens a
    /// gate or in a host function, where a release could wait for a host function queued
    /// behind this very thread.
    fn finish(&self, after: After<A>, opening: bool) {
        let After { waiters, kept } = after;
        for waiter in waiters {
            if let Some(queue) = waiter.upgrade() {
                queue.reopen(Blocked::Event);
            }
        }
        if !kept.is_empty() {
            if opening {
                self.core.keep(Spent(kept));
            } else {
                self.core.keep_if_in_host_fn(Spent(kept));
            }
        }
    }

    /// Waits until the queue is quiet: its gate open (every held operation with the
    /// vendor) and no other thread holding it to open it.
    pub(crate) fn wait_quiet(&self) -> Result<()> {
        let mut gate = lock(&self.gate.state);
        let quiet = |g: &Gate<A>| g.blocked.is_none() && g.in_flight == 0;
        if !quiet(&gate)
            && crate::running_host_fn().map(|(at, _)| at) == Some(crate::stream_key(self))
        {
            return Err(Error::invalid(
                "",
                "a host function waits for its own queue, whose later work waits for it",
            ));
        }
        while !quiet(&gate) {
            gate = self
                .gate
                .quiet
                .wait(gate)
                .unwrap_or_else(PoisonError::into_inner);
        }
        Ok(())
    }

    /// The first failure of a held operation, once.
    pub(crate) fn take_failed(&self) -> Option<Error> {
        lock(&self.gate.state).failed.take()
    }

    /// Whether the gate is closed (operations may be held behind it).
    pub(crate) fn gate_closed(&self) -> bool {
        lock(&self.gate.state).blocked.is_some()
    }
}

// SAFETY: the stream handle may be used from any thread (`StreamApi`'s contract: the
// vendor API is thread-safe); it is destroyed only in `Drop`, when no other owner is left.
// The held operations' handles (functions) are as movable, by the same contract.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Send for QueueShared<A> {}
// SAFETY: as above; `&QueueShared` only passes the handles to the vendor, and the held
// operations are behind the gate's lock.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Sync for QueueShared<A> {}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<A: StreamApi> crate::Stream for QueueShared<A> {
    /// Waits for everything enqueued so far (the held operations handed over first); then
    /// drops what the stream kept.
    #[allow(unsafe_code)]
    fn synchronize(&self) -> Result<()> {
        self.core.bind()?;
        self.core.settle();
        self.wait_quiet()?;
        // What was enqueued before the sync (the list grows in submission order).
        let passed = lock(&self.kept).end();
        // SAFETY: the stream is live (destroyed only in Drop) and of the bound device.
        unsafe { self.core.api().stream_synchronize(Some(self.stream)) }
            .map_err(driver_error::<A>)?;
        lock(&self.kept).release_before(passed);
        Ok(())
    }

    fn enqueued(&self) -> u64 {
        self.ops.load(Ordering::Acquire)
    }
}

impl<A: StreamApi> Drop for QueueShared<A> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // No host function is pending (its job holds the queue); operations still held
        // behind a wait for an event that was never recorded go unsubmitted.
        let held = std::mem::take(&mut lock(&self.gate.state).held);
        self.core.keep_if_in_host_fn(Spent(held.into()));
        if self.core.bind_to_release().is_ok() {
            let api = self.core.api();
            // SAFETY: the stream is live and of the bound device; it is destroyed once,
            // here, after its work (waited for first: the kept bytes go after). A drop has
            // no caller: a failure shows in the next call that meets the device.
            unsafe {
                let _ = api.stream_synchronize(Some(self.stream));
                let _ = api.stream_destroy(self.stream);
            }
        }
        self.core.destroyed();
    }
}

/// An event and whether its record reached the vendor (it may be held behind its queue's
/// gate), with the queues waiting for that.
pub(crate) struct EventInner<A: StreamApi> {
    pub(crate) core: Arc<DeviceCore<A>>,
    pub(crate) raw: A::Event,
    state: Mutex<EventState<A>>,
    settled: Condvar,
}

struct EventState<A: StreamApi> {
    /// Its record reached the vendor (or failed there).
    settled: bool,
    /// Why the vendor refused its record.
    failed: Option<crate::Failure>,
    /// Queues whose held work waits for that.
    waiters: Vec<Weak<QueueShared<A>>>,
}

impl<A: StreamApi> EventInner<A> {
    /// The event `raw` of `core`'s device, its record not yet with the vendor.
    pub(crate) fn new(core: Arc<DeviceCore<A>>, raw: A::Event) -> EventInner<A> {
        EventInner {
            core,
            raw,
            state: Mutex::new(EventState {
                settled: false,
                failed: None,
                waiters: Vec::new(),
            }),
            settled: Condvar::new(),
        }
    }

    /// Marks the record as with the vendor (or refused by it, `failed`); gives the queues
    /// that waited for that.
    fn settle(&self, failed: Option<crate::Failure>) -> Vec<Weak<QueueShared<A>>> {
        let mut state = lock(&self.state);
        state.settled = true;
        state.failed = failed;
        self.settled.notify_all();
        std::mem::take(&mut state.waiters)
    }

    /// `Some(recorded)` once the record went to the vendor; `None` while it is held, and
    /// `queue` is let go when it is settled.
    fn settled_or_wait(&self, queue: &Arc<QueueShared<A>>) -> Option<bool> {
        let mut state = lock(&self.state);
        if !state.settled {
            state.waiters.push(Arc::downgrade(queue));
            return None;
        }
        Some(state.failed.is_none())
    }

    /// Waits until the record is with the vendor; the vendor's refusal of it, if it did.
    pub(crate) fn wait_settled(&self) -> Result<()> {
        let mut state = lock(&self.state);
        while !state.settled {
            state = self
                .settled
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        Self::recorded(&state)
    }

    /// `Some` once settled: whether it was recorded (the vendor's refusal, if not).
    pub(crate) fn settled_now(&self) -> Option<Result<()>> {
        let state = lock(&self.state);
        state.settled.then(|| Self::recorded(&state))
    }

    fn recorded(state: &EventState<A>) -> Result<()> {
        match &state.failed {
            None => Ok(()),
            Some(failure) => Err(driver_error::<A>(failure.clone())),
        }
    }
}

// SAFETY: as for `QueueShared`: the handle is usable from any thread, destroyed once.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Send for EventInner<A> {}
// SAFETY: as above; the rest is behind its lock.
#[allow(unsafe_code)]
unsafe impl<A: StreamApi> Sync for EventInner<A> {}

impl<A: StreamApi> Drop for EventInner<A> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.core.bind_to_release().is_ok() {
            // SAFETY: the event is live and of the bound device, destroyed once, here; the
            // vendor defers the release of an event still pending.
            let _ = unsafe { self.core.api().event_destroy(self.raw) };
        }
        self.core.destroyed();
    }
}
