//! A host queue's stream: the in-order executor of its queued work (Q1).
//!
//! Every command a queue gets (launch, write, fill, copy, host function, event record,
//! event wait) is pushed on its stream and numbered; `launch` and the other enqueues return
//! once it is pushed. Commands run one after another, in the order they were pushed, by
//! whichever thread holds the stream's *run token*: the stream's executor thread, or a
//! thread that waits for the stream (`sync`, an event, a host access) and finds the token
//! free — it runs the commands up to the one it waits for itself, as the synchronous
//! queues did, instead of waking a thread and sleeping; up to a host function, which only
//! the executor runs (user code stays on a thread offload owns: see `drain`). A launch of several blocks is
//! handed to the device's worker pool (pool.rs); a thread waiting while another runs it
//! takes blocks too.
//!
//! A command holds what it uses: the memory of its buffers and, for a launch, the loaded
//! image of its kernel, so freeing a buffer or unloading a module while work on it is
//! queued defers the release until that work is done. Buffers and modules remember which
//! streams use them ([`Uses`]): a host access waits for that work first.
//!
//! The executor is started at the stream's first command and sleeps whenever no command
//! is waiting for it; enqueueing wakes it (one system call, only when it sleeps and was not
//! woken already), so work progresses without a `sync`. It is joined when the queue is
//! destroyed, after every command pushed before has run (L4: shutdown drains). Like the
//! pool's workers it is a plain pthread (`offload-thread`) whose body touches no
//! thread-local with a destructor, so a library that embeds offload still unloads (L2).

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use offload_core::hal::HostFn;
use offload_core::{BackendKind, Dims, Error, Result};

use crate::lock;
use crate::memory::Memory;
use crate::pool::{Job, LazyPool};
use crate::program::{KernelFn, Loaded};
use crate::uses::Stream as Ticketed;

std::thread_local! {
    /// Set on a stream's executor thread (a pthread of this backend's own). Const-initialised
    /// and without a destructor, so it pins nothing (L2).
    static ON_EXECUTOR: Cell<bool> = const { Cell::new(false) };
}

/// How long an idle executor, or a thread waiting for one, spins before it sleeps.
pub(crate) const SPIN: Duration = Duration::from_micros(50);

/// One unit of queued work.
pub(crate) enum Command {
    /// A kernel launch; `memory` and `code` keep its buffers and image alive.
    Launch {
        function: KernelFn,
        values: Vec<[u8; 8]>,
        dims: Dims,
        memory: Vec<Arc<Memory>>,
        code: Arc<Loaded>,
    },
    /// Bytes into a buffer.
    Write {
        memory: Arc<Memory>,
        offset: usize,
        data: Vec<u8>,
    },
    /// A pattern repeated over a range.
    Fill {
        memory: Arc<Memory>,
        offset: usize,
        len: usize,
        pattern: Vec<u8>,
    },
    /// A copy between two ranges (of one allocation or two).
    Copy {
        src: Arc<Memory>,
        src_offset: usize,
        dst: Arc<Memory>,
        dst_offset: usize,
        len: usize,
    },
    /// A host function (`olLaunchHostFunction`).
    HostFn(HostFn),
    /// An event: the time the work before it finished.
    Record(Arc<OnceLock<Instant>>),
    /// Waits for command `ticket` of another stream.
    Wait {
        stream: Arc<StreamCore>,
        ticket: u64,
    },
}

#[derive(Default)]
struct Inner {
    commands: VecDeque<Command>,
    /// The executor thread, once started.
    thread: Option<offload_thread::Thread>,
    /// The executor is asleep on `work`.
    sleeping: bool,
    /// The executor was woken and has not looked at the commands since.
    woken: bool,
    /// Set when the queue is destroyed: the executor exits once `commands` is empty.
    shutdown: bool,
    /// What went wrong in a command since the last sync (a host function's panic).
    failure: Option<String>,
}

/// The state a stream shares with its executor, its events and the memory it uses.
pub(crate) struct StreamCore {
    inner: Mutex<Inner>,
    /// The executor sleeps here.
    work: Condvar,
    /// Threads waiting for a command to finish sleep here.
    done: Condvar,
    /// Commands pushed (changed under `inner`'s lock).
    enqueued: AtomicU64,
    /// Commands finished.
    completed: AtomicU64,
    /// Threads asleep on `done`.
    waiters: AtomicUsize,
    /// The pthread id of the thread holding the run token (0: free).
    runner: AtomicU64,
    pool: Arc<LazyPool>,
    /// The launch of several blocks now running, for waiting threads to help with.
    running: Mutex<Option<Arc<Job>>>,
    /// Whether `running` may be set (lets a waiting thread skip the lock).
    helpable: AtomicBool,
}

fn this_thread() -> u64 {
    // SAFETY: pthread_self has no preconditions. pthread_t is an unsigned long on Linux:
    // at most 64 bits.
    unsafe { libc::pthread_self() as u64 }
}

/// The most commands a host queue holds not yet finished. A producer that enqueues faster
/// than the queue runs waits (running commands itself when the queue's run token is free)
/// until the backlog is below it, so a queue nobody syncs cannot grow without bound. A host
/// function enqueuing into its own queue never waits (it would wait for itself).
pub const MAX_QUEUED: u64 = 4096;

impl StreamCore {
    /// Pushes `command`; returns its ticket (the count of commands pushed with it).
    /// Waits while [`MAX_QUEUED`] commands are unfinished (backpressure).
    pub(crate) fn enqueue(self: &Arc<Self>, command: Command) -> Result<u64> {
        let pushed = self.enqueued.load(Ordering::SeqCst);
        if pushed.saturating_sub(self.completed.load(Ordering::SeqCst)) >= MAX_QUEUED
            && !self.on_runner()
        {
            // Wait until this command would be the MAX_QUEUED-th unfinished one.
            self.wait(pushed + 1 - MAX_QUEUED);
        }
        let mut inner = lock(&self.inner);
        if inner.shutdown {
            return Err(Error::invalid("", "the host queue was destroyed"));
        }
        if inner.thread.is_none() {
            inner.thread = Some(spawn_executor(self).ok_or_else(|| Error::Driver {
                backend: BackendKind::Host,
                call: "",
                code: -1,
                message: "pthread_create refused the queue's executor thread".into(),
            })?);
        }
        inner.commands.push_back(command);
        let ticket = self.enqueued.fetch_add(1, Ordering::SeqCst) + 1;
        let backlog = ticket.saturating_sub(self.completed.load(Ordering::SeqCst));
        crate::stats::MOST_QUEUED.fetch_max(backlog, Ordering::Relaxed);
        self.wake_executor(&mut inner);
        Ok(ticket)
    }

    /// Wakes the executor if it sleeps and nobody woke it yet (under `inner`'s lock).
    fn wake_executor(&self, inner: &mut Inner) {
        if inner.sleeping && !inner.woken {
            inner.woken = true;
            self.work.notify_one();
        }
    }

    /// The ticket of the last command pushed.
    pub(crate) fn last(&self) -> u64 {
        self.enqueued.load(Ordering::SeqCst)
    }

    /// Whether command `ticket` has finished.
    pub(crate) fn reached(&self, ticket: u64) -> bool {
        self.completed.load(Ordering::SeqCst) >= ticket
    }

    /// Whether the calling thread holds the run token (it is running one of this stream's
    /// host functions): every command before the running one has finished then.
    pub(crate) fn on_runner(&self) -> bool {
        self.runner.load(Ordering::SeqCst) == this_thread()
    }

    fn try_take_token(&self) -> bool {
        self.runner
            .compare_exchange(0, this_thread(), Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Gives the token back; wakes the executor if commands are left for it.
    fn give_token_back(&self) {
        self.runner.store(0, Ordering::SeqCst);
        let mut inner = lock(&self.inner);
        if !inner.commands.is_empty() {
            self.wake_executor(&mut inner);
        }
    }

    /// With the token: runs commands in order until command `until` has finished (all of
    /// them for `None`) or none is left. A thread other than the executor stops before a
    /// host function and returns `true`: user code runs only on the executor, a thread
    /// offload owns, because a panic there initialises thread-local state with a destructor
    /// (std's panic hook asks for the current thread), which on a caller's thread would pin
    /// a `dlclose`d library that embeds offload (L2, L6; tests/embed).
    fn drain(&self, until: Option<u64>) -> bool {
        let executor = ON_EXECUTOR.with(Cell::get);
        while !until.is_some_and(|t| self.reached(t)) {
            let next = {
                let mut inner = lock(&self.inner);
                if !executor && matches!(inner.commands.front(), Some(Command::HostFn(_))) {
                    return true;
                }
                inner.commands.pop_front()
            };
            match next {
                Some(command) => self.run(command),
                None => break,
            }
        }
        false
    }

    /// Blocks until command `ticket` has finished. Runs the commands up to it itself if
    /// the run token is free; otherwise helps with the running launch, or spins for
    /// [`SPIN`], then sleeps. From the token's holder (a host function) it returns at
    /// once: the commands before the running one are done, and the ones after it cannot
    /// run before it returns.
    pub(crate) fn wait(&self, ticket: u64) {
        let until = Instant::now() + SPIN;
        loop {
            if self.reached(ticket) || self.on_runner() {
                return;
            }
            if self.try_take_token() {
                let for_the_executor = self.drain(Some(ticket));
                self.give_token_back(); // wakes the executor if commands are left
                if for_the_executor {
                    break; // sleep until the executor has run up to our command
                }
                continue;
            }
            if self.helpable.load(Ordering::Acquire) {
                // Take blocks of the running launch rather than compete with it for a core.
                let job = lock(&self.running).clone();
                if let Some(job) = job {
                    job.run_blocks(1);
                    continue;
                }
            }
            if Instant::now() >= until {
                break;
            }
            std::hint::spin_loop();
        }
        // Whoever holds the token runs up to our command (the executor runs everything;
        // another waiter that stops short wakes it when it gives the token back).
        let mut inner = lock(&self.inner);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        while !self.reached(ticket) {
            inner = self
                .done
                .wait(inner)
                .unwrap_or_else(PoisonError::into_inner);
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Waits for everything pushed so far; reports (once) what went wrong in a command
    /// since the last sync. From one of this stream's host functions it is an error: the
    /// function would wait for itself.
    pub(crate) fn sync(&self) -> Result<()> {
        if self.on_runner() && !self.reached(self.last()) {
            return Err(Error::invalid(
                "",
                "a host function cannot wait for its own queue (it would wait for itself)",
            ));
        }
        self.wait(self.last());
        match lock(&self.inner).failure.take() {
            None => Ok(()),
            Some(failure) => Err(Error::Callback {
                callback: offload_core::hal::HOST_FN_CALLBACK,
                source: failure.into(),
            }),
        }
    }

    /// Runs one command, then drops it (releasing what it held) before it counts as done.
    fn run(&self, command: Command) {
        let outcome: std::result::Result<(), String> = match command {
            Command::Launch {
                function,
                values,
                dims,
                memory,
                code,
            } => {
                self.pool.run(function, values, dims, |job| {
                    self.helpable.store(job.is_some(), Ordering::Release);
                    *lock(&self.running) = job;
                });
                drop((memory, code));
                Ok(())
            }
            Command::Write {
                memory,
                offset,
                data,
            } => memory.write(offset, &data).map_err(|e| e.to_string()),
            Command::Fill {
                memory,
                offset,
                len,
                pattern,
            } => memory
                .fill(offset, len, &pattern)
                .map_err(|e| e.to_string()),
            Command::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                len,
            } => dst
                .copy_from(dst_offset, &src, src_offset, len)
                .map_err(|e| e.to_string()),
            Command::HostFn(f) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .map_err(|payload| {
                    format!(
                        "the host function panicked: {}",
                        offload_core::hal::panic_text(&*payload)
                    )
                }),
            Command::Record(time) => {
                // Set once: the first time the queue reached it is the event's time.
                let _ = time.set(Instant::now());
                Ok(())
            }
            Command::Wait { stream, ticket } => {
                stream.wait(ticket);
                Ok(())
            }
        };
        if let Err(e) = outcome {
            // Ranges were checked at enqueue, so only a host function's panic lands here.
            lock(&self.inner).failure.get_or_insert(e);
        }
        self.completed.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _inner = lock(&self.inner);
            self.done.notify_all();
        }
    }

    /// The executor: sleeps until commands wait and the token is free, runs them all,
    /// and exits once the queue is destroyed and nothing is left.
    fn executor_loop(&self) {
        ON_EXECUTOR.with(|e| e.set(true));
        loop {
            {
                let mut inner = lock(&self.inner);
                loop {
                    inner.woken = false;
                    let free = self.runner.load(Ordering::SeqCst) == 0;
                    if !inner.commands.is_empty() && free {
                        break;
                    }
                    if inner.commands.is_empty() && inner.shutdown {
                        return;
                    }
                    // Nothing to run, or a waiting thread runs it (it wakes us when it gives
                    // the token back with commands left).
                    inner.sleeping = true;
                    inner = self
                        .work
                        .wait(inner)
                        .unwrap_or_else(PoisonError::into_inner);
                    inner.sleeping = false;
                }
            }
            if self.try_take_token() {
                self.drain(None);
                self.give_token_back();
            }
        }
    }
}

/// Starts the executor thread of `core`; `None` if the system refuses.
fn spawn_executor(core: &Arc<StreamCore>) -> Option<offload_thread::Thread> {
    static STREAMS: AtomicU64 = AtomicU64::new(0);
    let name = format!("offload-q{}", STREAMS.fetch_add(1, Ordering::Relaxed));
    let core = core.clone();
    // Host functions are caught where they run; nothing else panics (and the thread
    // catches what would).
    offload_thread::spawn(&name, move || core.executor_loop()).ok()
}

/// A queue's stream: drains and joins its executor when dropped.
pub(crate) struct Stream {
    pub(crate) core: Arc<StreamCore>,
}

impl Stream {
    pub(crate) fn new(pool: Arc<LazyPool>) -> Stream {
        Stream {
            core: Arc::new(StreamCore {
                inner: Mutex::default(),
                work: Condvar::new(),
                done: Condvar::new(),
                enqueued: AtomicU64::new(0),
                completed: AtomicU64::new(0),
                waiters: AtomicUsize::new(0),
                runner: AtomicU64::new(0),
                pool,
                running: Mutex::new(None),
                helpable: AtomicBool::new(false),
            }),
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let thread = {
            let mut inner = lock(&self.core.inner);
            inner.shutdown = true;
            self.core.work.notify_one();
            inner.thread.take()
        };
        let Some(thread) = thread else { return };
        if thread.is_current() || self.core.on_runner() {
            // The last handle of the queue was dropped by one of its own host functions:
            // joining would wait for the function's own thread (or for commands only this
            // thread may run). The executor exits once its commands are done: dropping the
            // handle detaches it.
            drop(thread);
        } else {
            thread.join();
        }
    }
}

impl Ticketed for StreamCore {
    fn reached(&self, ticket: u64) -> bool {
        StreamCore::reached(self, ticket)
    }

    fn wait(&self, ticket: u64) {
        StreamCore::wait(self, ticket);
    }

    fn on_runner(&self) -> bool {
        StreamCore::on_runner(self)
    }
}
