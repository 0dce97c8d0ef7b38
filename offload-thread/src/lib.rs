//! Plain OS threads for a library that must really unload when it is `dlclose`d (offload's
//! lifecycle rule L2).
//!
//! `std::thread::spawn` is the obvious tool and the wrong one here: it reads a thread-local
//! with a destructor on the *calling* thread (its spawn hooks), and glibc pins the shared
//! library that registered a thread-local destructor until that thread exits. An
//! application thread that made an IPC endpoint would keep a plugin embedding offload
//! loaded forever. `std::thread::current()` on a thread std did not start registers such a
//! destructor too (and one that runs after an unload crashes). [`spawn`] goes to
//! `pthread_create` directly and touches no thread-local on either side; [`Thread::join`]
//! and [`Thread::is_current`] likewise.
//!
//! The body runs inside `catch_unwind` (a panic never unwinds into C). What it does is its
//! own business: a thread that is joined before the library unloads may use thread-locals
//! freely, since their destructors run when it exits.
//!
//! [`fork`] tells a process forked from one running offload that it is such a child (its
//! offload threads did not survive the fork, so every call refuses at once, L9).
//!
//! This is the one crate besides the backends with `unsafe` code (the core is
//! `#![deny(unsafe_code)]` and depends on it for its helper threads); every block carries
//! its `// SAFETY:` argument. It keeps no concurrency primitive of its own.

pub mod fork;

use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A thread started by [`spawn`]. Join it (dropping it detaches the thread).
///
/// ```
/// let t = offload_thread::spawn("example", || {})?;
/// t.join();
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Thread {
    id: libc::pthread_t,
    finished: Arc<AtomicBool>,
    joined: bool,
}

struct Start {
    body: Box<dyn FnOnce() + Send>,
    finished: Arc<AtomicBool>,
    /// The name the thread gives itself first (at most 15 bytes).
    name: Option<CString>,
}

extern "C" fn start(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the `Box<Start>` leaked by `spawn` for this thread alone; it is
    // taken back exactly once, here.
    let start = unsafe { Box::from_raw(arg.cast::<Start>()) };
    let Start {
        body,
        finished,
        name,
    } = *start;
    if let Some(name) = name {
        // Named by itself: glibc then uses `prctl(PR_SET_NAME)`, where naming it from the
        // parent opens and writes `/proc/self/task/<tid>/comm` on the caller's path (tens
        // of µs on a first launch, measured by the fresh-process benchmark).
        // SAFETY: the calling thread names itself; `name` is NUL-terminated and at most 15
        // bytes plus NUL (a longer one only fails the call).
        unsafe { libc::pthread_setname_np(libc::pthread_self(), name.as_ptr()) };
    }
    // A panic must not unwind out of a pthread start routine; every body offload runs
    // catches and reports its own user code's panics before this.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    finished.store(true, Ordering::Release);
    std::ptr::null_mut()
}

/// Starts a thread running `body`, named `name` (Linux keeps the first 15 bytes).
///
/// ```
/// let (tx, rx) = std::sync::mpsc::channel();
/// let t = offload_thread::spawn("example", move || tx.send(7).unwrap())?;
/// assert_eq!(rx.recv().unwrap(), 7);
/// t.join();
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> std::io::Result<Thread> {
    let finished = Arc::new(AtomicBool::new(false));
    let short: String = name.chars().take(15).collect();
    let arg = Box::into_raw(Box::new(Start {
        body: Box::new(body),
        finished: finished.clone(),
        name: CString::new(short).ok(),
    }))
    .cast::<c_void>();
    let mut id: libc::pthread_t = 0;
    // SAFETY: `id` is a valid out-pointer; default attributes (null); `start` has the
    // signature pthread expects and takes ownership of `arg`.
    let rc = unsafe { libc::pthread_create(&mut id, std::ptr::null(), start, arg) };
    if rc != 0 {
        // SAFETY: the thread was not created, so `arg` is still ours to free.
        drop(unsafe { Box::from_raw(arg.cast::<Start>()) });
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(Thread {
        id,
        finished,
        joined: false,
    })
}

impl Thread {
    /// Waits for the thread to end. Joining the calling thread itself would deadlock: it
    /// is detached instead (it ends on its own).
    ///
    /// ```
    /// offload_thread::spawn("example", || {})?.join();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn join(mut self) {
        self.joined = true;
        if self.is_current() {
            // SAFETY: `id` is our thread, neither joined nor detached yet.
            unsafe { libc::pthread_detach(self.id) };
            return;
        }
        // SAFETY: `id` is a joinable thread we created, joined exactly once (`self` is
        // consumed and `joined` keeps `Drop` from detaching it).
        unsafe { libc::pthread_join(self.id, std::ptr::null_mut()) };
    }

    /// Whether the calling thread is this one (no thread-local is touched).
    ///
    /// ```
    /// let t = offload_thread::spawn("example", || {})?;
    /// assert!(!t.is_current());
    /// t.join();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_current(&self) -> bool {
        // SAFETY: both are thread ids; `pthread_equal` only compares them.
        unsafe { libc::pthread_equal(self.id, libc::pthread_self()) != 0 }
    }

    /// Whether the body has returned (joining then returns at once).
    ///
    /// ```
    /// let t = offload_thread::spawn("example", || {})?;
    /// while !t.is_finished() {
    ///     std::thread::yield_now();
    /// }
    /// t.join();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }
}

impl Drop for Thread {
    fn drop(&mut self) {
        if !self.joined {
            // SAFETY: `id` is our thread, neither joined nor detached yet.
            unsafe { libc::pthread_detach(self.id) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_names_and_joins() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = spawn("offload-test-thread-long-name", move || {
            let name = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
            tx.send(name).unwrap();
        })
        .unwrap();
        let name = rx.recv().unwrap();
        t.join();
        // Named by itself before its body runs; Linux keeps 15 bytes.
        assert_eq!(name.trim(), "offload-test-th");
    }

    #[test]
    fn a_panic_stays_in_the_thread() {
        let t = spawn("panics", || panic!("inside")).unwrap();
        while !t.is_finished() {
            std::thread::yield_now();
        }
        t.join();
    }

    #[test]
    fn joining_itself_detaches() {
        let (tx, rx) = std::sync::mpsc::channel::<Thread>();
        let t = spawn("self-join", move || rx.recv().unwrap().join()).unwrap();
        let finished = t.finished.clone();
        tx.send(t).unwrap();
        while !finished.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }
}
