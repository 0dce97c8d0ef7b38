//! Every lock, atomic, condition variable, thread-local and helper thread of offload-core,
//! named in one place (tokio's `loom` shim, applied to `shuttle`).
//!
//! Each module of the crate takes its synchronisation from here, never from `std::sync` or
//! `std::thread` directly. In the library these are std's, with poison-tolerant helpers:
//! a poisoned lock (a backend panicked while holding it) is still usable, because every
//! structure behind these locks stays consistent between statements, and library code must
//! not turn someone else's panic into its own.
//!
//! Built with `--cfg offload_model` (only `scripts/model.sh` does, for the `offload-model`
//! crate), the same names are `shuttle`'s, so the model check runs the crate's own code —
//! lifecycle, generations, handles, the load slot of each program (P2) — under a scheduler
//! that decides every interleaving. No cargo feature switches this: a normal build, with
//! any features, always uses std.
//!
//! `Arc`, `Weak` and `OnceLock` are std's in both builds (shuttle has no `OnceLock`; every
//! `OnceLock` of the crate is set under a lock that the model does schedule).

pub(crate) use std::sync::{Arc, OnceLock, PoisonError, Weak};

#[cfg(not(offload_model))]
pub(crate) use std::{
    sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    sync::{
        Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, WaitTimeoutResult,
    },
    thread_local,
};

#[cfg(offload_model)]
pub(crate) use shuttle::{
    sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    sync::{
        Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, WaitTimeoutResult,
    },
    thread_local,
};

/// Ordering bugs the model check must catch, planted in the crate's own code (model builds
/// only; `model::check_catches` plants one): the proof that a scenario can fail. Here, at
/// the bottom of the crate, so the code that reads a seed imports nothing above it.
#[cfg(offload_model)]
pub(crate) mod seed {
    use std::sync::atomic::{AtomicU8, Ordering::SeqCst};

    /// A planted bug.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(u8)]
    pub enum Seed {
        /// Nothing planted.
        None = 0,
        /// `Buffer::copy_from` takes its two buffers' locks in argument order (source,
        /// then destination) instead of by address: two opposite copies can deadlock.
        CopyLocksInArgumentOrder = 1,
    }

    /// The planted bug (a std atomic: reading it adds no scheduling point).
    static PLANTED: AtomicU8 = AtomicU8::new(0);

    /// Plants `seed` (`Seed::None` removes it).
    pub(crate) fn plant(seed: Seed) {
        PLANTED.store(seed as u8, SeqCst);
    }

    /// Whether `seed` is planted now.
    pub(crate) fn planted(seed: Seed) -> bool {
        PLANTED.load(SeqCst) == seed as u8
    }
}

/// Locks `m`, poisoned or not.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Read-locks `l`, poisoned or not.
pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

/// Write-locks `l`, poisoned or not.
pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar`, releasing `guard` meanwhile; poison-tolerant like [`lock`].
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar` for at most `timeout`; poison-tolerant like [`lock`].
pub(crate) fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: std::time::Duration,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    condvar
        .wait_timeout(guard, timeout)
        .unwrap_or_else(PoisonError::into_inner)
}

/// Declares process-wide statics. In the library they are plain const-initialised statics
/// (L2: nothing runs to create them, nothing to destroy them); in the model each execution
/// gets its own (shuttle creates them on first use and drops them when the execution
/// ends), so every execution starts from the state a freshly loaded library has.
#[cfg(not(offload_model))]
macro_rules! statics {
    ($($(#[$meta:meta])* $vis:vis static $name:ident: $ty:ty = $init:expr;)*) => {
        $($(#[$meta])* $vis static $name: $ty = $init;)*
    };
}

#[cfg(offload_model)]
macro_rules! statics {
    ($($(#[$meta:meta])* $vis:vis static $name:ident: $ty:ty = $init:expr;)*) => {
        $(
            // A `lazy_static` of shuttle's, spelled out (its macro takes no `$vis`).
            $(#[$meta])*
            #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
            $vis struct $name {
                _private: (),
            }
            $vis static $name: $name = $name { _private: () };
            impl std::ops::Deref for $name {
                type Target = $ty;
                fn deref(&self) -> &$ty {
                    fn init() -> $ty {
                        $init
                    }
                    static LAZY: shuttle::lazy_static::Lazy<$ty> =
                        shuttle::lazy_static::Lazy::new(init);
                    LAZY.get()
                }
            }
        )*
    };
}
pub(crate) use statics;

/// Lets another thread run while this one waits for it (teardown waiting for the loads in
/// flight): a short sleep; in the model, a yield to the scheduler.
pub(crate) fn backoff() {
    #[cfg(not(offload_model))]
    std::thread::sleep(std::time::Duration::from_micros(100));
    #[cfg(offload_model)]
    shuttle::thread::yield_now();
}

/// One of the runtime's helper threads: a plain pthread (`offload-thread`), so starting one
/// never pins a library that is `dlclose`d later (L2); a shuttle thread in the model.
pub(crate) struct JoinHandle {
    #[cfg(not(offload_model))]
    thread: offload_thread::Thread,
    #[cfg(offload_model)]
    thread: shuttle::thread::JoinHandle<()>,
}

/// Starts a helper thread named `name` (the IPC progress thread, the compile pool, a
/// teardown that cannot run on the thread that decided it, L6). Whoever starts one joins it,
/// so none outlives the runtime or a `dlclose` (L2).
pub(crate) fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle> {
    #[cfg(not(offload_model))]
    let thread = offload_thread::spawn(name, f)?;
    #[cfg(offload_model)]
    let thread = shuttle::thread::Builder::new().name(name.into()).spawn(f)?;
    Ok(JoinHandle { thread })
}

impl JoinHandle {
    /// Waits for the thread to end (one that panicked has nothing more to report). On the
    /// thread itself it returns at once, leaving the thread to end on its own.
    pub(crate) fn join(self) {
        #[cfg(not(offload_model))]
        self.thread.join();
        #[cfg(offload_model)]
        if !self.is_current() {
            // The model's helper thread returns nothing; its panic already failed the run.
            let _ = self.thread.join();
        }
    }

    /// Whether it has finished (so joining it returns at once).
    /// (In the model: never, as shuttle's handles cannot tell; the next `init` or the
    /// exit hook joins it.)
    pub(crate) fn is_finished(&self) -> bool {
        #[cfg(not(offload_model))]
        return self.thread.is_finished();
        #[cfg(offload_model)]
        return false;
    }

    /// Whether it is the calling thread (which must not join itself).
    pub(crate) fn is_current(&self) -> bool {
        #[cfg(not(offload_model))]
        return self.thread.is_current();
        #[cfg(offload_model)]
        return self.thread.thread().id() == shuttle::thread::current().id();
    }
}
