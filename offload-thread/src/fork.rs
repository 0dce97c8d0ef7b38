//! Whether this process is a child forked from one that was running offload (L9).
//!
//! A forked child has one thread, a copy of the parent's memory and none of its other
//! threads: offload's queues, progress threads and helpers did not survive, and any lock
//! one of them held at the fork stays held forever. So every offload call in such a child
//! must refuse at once (`Error::Forked`) rather than wait for a thread that does not exist.
//!
//! [`started`] registers a `pthread_atfork` child handler (once per load of this library;
//! glibc unregisters it when the library is `dlclose`d, as it does every handler a library
//! registered) and marks the process as running offload. The handler runs in every forked
//! child and only stores an atomic (async-signal-safe), so [`forked`] is one relaxed load.
//! A child forked before offload ever started is not marked: it may start offload itself.

use std::sync::atomic::{AtomicBool, Ordering};

/// This load of the library registered its handler.
static WATCHING: AtomicBool = AtomicBool::new(false);
/// Offload was started in this process (set once, never cleared: a runtime that was shut
/// down may have left threads of its own behind only briefly, but the rule stays simple).
static STARTED: AtomicBool = AtomicBool::new(false);
/// This process is a child forked after offload started.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Runs in the child of every `fork()`: atomic stores only.
extern "C" fn in_child() {
    if STARTED.load(Ordering::Relaxed) {
        FORKED.store(true, Ordering::Relaxed);
    }
}

/// Marks offload as started in this process, registering the fork handler first (once).
///
/// ```
/// offload_thread::fork::started();
/// assert!(!offload_thread::fork::forked()); // this process was not forked since
/// ```
pub fn started() {
    if !WATCHING.swap(true, Ordering::AcqRel) {
        // SAFETY: `in_child` is a plain function of this library that only stores an
        // atomic; glibc removes the registration when the library is unloaded, so it never
        // runs after this code is gone.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            // No handler (ENOMEM): forks go unnoticed, as before offload watched them.
            WATCHING.store(false, Ordering::Release);
        }
    }
    STARTED.store(true, Ordering::Release);
}

/// Whether this process is a child forked after offload started in its parent.
///
/// ```
/// assert!(!offload_thread::fork::forked());
/// ```
#[inline]
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_forked_after_the_start_knows_it() {
        started();
        // SAFETY: the child only reads an atomic and calls `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = if forked() { 0 } else { 1 };
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        assert!(pid > 0, "fork failed");
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a live local.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(!forked(), "the parent is not a forked child");
    }
}
