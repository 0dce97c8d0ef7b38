//! The IPC progress thread of a runtime generation (I5): progress that needs no call from
//! the application.
//!
//! A receiver is often busy elsewhere — computing, blocked in `read`, asleep, inside MPI —
//! and a sender's `free` must not depend on it calling into offload: the unmap notices it
//! is sent are acted on and answered by this thread (I3), and a sender's quarantined
//! memory is released when the answer or the peer's hang-up arrives, with nobody calling.
//!
//! Why one thread per generation, ticking, rather than one blocked in `poll`: the
//! application's own calls (`recv`, `send`, `wait_answered`) already make progress, spinning
//! on their sockets for the lowest latency; a second thread woken by every message would
//! add a wake-up per message (20–75 µs on the project's VMs, see `endpoint.rs`), more than
//! a whole cached ping-pong (7–8 µs). So the
//! thread wakes every [`TICK`] and makes a round, without waiting, only on the endpoints
//! nobody made progress on since its last tick: an idle receiver answers within about two
//! ticks, a busy one pays nothing but the tick. It is started with the generation's first
//! endpoint and joined by its teardown before the generation's state is taken, so no
//! offload thread outlives a shutdown (L2) and no round can wait on a teardown that waits
//! for it. It is a plain pthread (`offload-thread`): `std::thread` would pin a library
//! embedding offload that is `dlclose`d later (L2).

use crate::sync::{Arc, Condvar, JoinHandle, Mutex, Weak, lock, spawn, wait_timeout};
use std::time::Duration;

use crate::runtime::generation::Generation;

/// How often the thread looks at endpoints nobody else drives. An idle receiver answers an
/// unmap within about two ticks.
pub(crate) const TICK: Duration = Duration::from_millis(4);

#[derive(Default)]
struct Control {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// The thread's handle, kept by the generation's IPC state.
#[derive(Default)]
pub(crate) struct Progress {
    control: Arc<Control>,
    thread: Mutex<Option<JoinHandle>>,
}

impl Progress {
    /// Starts the thread unless it runs or was stopped (a teardown began). A failure to
    /// spawn one is not an error: the application's own calls still make progress, as
    /// they did before this thread existed, and the trace says so.
    pub(crate) fn start(&self, generation: &Arc<Generation>) {
        let mut thread = lock(&self.thread);
        if thread.is_some() || *lock(&self.control.stopped) {
            return;
        }
        let control = self.control.clone();
        let weak = Arc::downgrade(generation);
        match spawn("offload-ipc-progress", move || run(&control, &weak)) {
            Ok(handle) => *thread = Some(handle),
            Err(e) => tracing::warn!(
                target: "offload::ipc",
                error = %e,
                "could not start the IPC progress thread: peers are answered only while \
                 this process calls into its endpoints"
            ),
        }
    }

    /// Stops and joins the thread (idempotent; on the thread itself it is left to end on
    /// its own); none starts after this.
    pub(crate) fn stop(&self) {
        *lock(&self.control.stopped) = true;
        self.control.wake.notify_all();
        let handle = lock(&self.thread).take();
        if let Some(handle) = handle {
            handle.join();
        }
    }
}

fn run(control: &Control, generation: &Weak<Generation>) {
    // (endpoint id, its rounds of progress at the last tick)
    let mut seen: Vec<(u64, u64)> = Vec::new();
    loop {
        {
            let stopped = lock(&control.stopped);
            if *stopped {
                return;
            }
            let (stopped, _) = wait_timeout(&control.wake, stopped, TICK);
            if *stopped {
                return;
            }
        }
        let Some(generation) = generation.upgrade() else {
            return;
        };
        if let Some(ipc) = super::state(&generation) {
            ipc.tick(&mut seen);
        }
    }
}
