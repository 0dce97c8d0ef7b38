//! The job cache's server, on rank 0 of the cache's communicator: the board (the
//! directory, the answers it owes and the asks of rank 0's own threads, which go through it
//! without MPI) and the service that receives the other ranks' messages and sends their
//! answers. The service runs on its own thread until the finalize hook stops it, and then
//! on the hook's thread until every live rank said `Bye` ([`Server::finish`]). Owns the
//! sends it started until MPI completed them; never blocks in MPI (it polls), and never
//! sends to a rank seen dead.

use std::collections::{BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mpi::traits::*;
use offload_core::CompileKey;

use super::directory::{Answer, Asker, Directory, Owed};
use super::wire::Msg;
use super::{BYE_TAG, REQUEST_TAG};
use crate::comm::{self, Comm, LIVENESS_POLL, Lost, Staged, lock};

/// How often the service looks for messages within `BUSY` of the last one.
const BUSY_POLL: Duration = Duration::from_micros(200);
/// How long after a message the service keeps polling at `BUSY_POLL`.
const BUSY: Duration = Duration::from_millis(100);
/// How often an idle service looks for messages.
const IDLE_POLL: Duration = Duration::from_millis(2);
/// Messages received in one step at most, so answers go out in between.
const BATCH: usize = 64;

/// The directory and what it owes, shared by the service and rank 0's own asks.
#[derive(Default)]
pub(crate) struct Board {
    state: Mutex<State>,
    answered: Condvar,
}

#[derive(Default)]
struct State {
    dir: Directory,
    /// Answers owed to other ranks, for the service to send.
    outbox: Vec<Owed>,
    /// Answers to rank 0's own asks, by ticket.
    answers: HashMap<u64, Answer>,
    next_ticket: u64,
    /// Images sent or handed out.
    served: u64,
}

impl Board {
    /// Files `owed`: answers to rank 0's threads are theirs at once, the others go out with
    /// the service's next step.
    fn deliver(&self, state: &mut State, owed: Vec<Owed>) {
        let mut woke = false;
        for o in owed {
            match o.to {
                Asker::Local(ticket) => {
                    if matches!(o.answer, Answer::Image(_)) {
                        state.served += 1;
                    }
                    state.answers.insert(ticket, o.answer);
                    woke = true;
                }
                Asker::Remote { .. } => state.outbox.push(o),
            }
        }
        if woke {
            self.answered.notify_all();
        }
    }

    /// An ask of rank 0 itself: the image, the lease (`Compile`), or `Local` when no answer
    /// came within `timeout` (or `gone()` says the service stopped).
    pub(crate) fn ask_here(
        &self,
        key: CompileKey,
        timeout: Duration,
        gone: impl Fn() -> bool,
    ) -> Answer {
        let mut state = lock(&self.state);
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        if let Some(answer) = state.dir.ask(key, Asker::Local(ticket), 0, Instant::now()) {
            if matches!(answer, Answer::Image(_)) {
                state.served += 1;
            }
            return answer;
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(answer) = state.answers.remove(&ticket) {
                return answer;
            }
            let now = Instant::now();
            if now >= deadline || gone() {
                state.dir.cancel(key, Asker::Local(ticket));
                return Answer::Local;
            }
            let slice = LIVENESS_POLL.min(deadline - now);
            state = self
                .answered
                .wait_timeout(state, slice)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// `rank` compiled `key`: the image is kept and owed to its waiters.
    pub(crate) fn put(&self, key: CompileKey, image: Arc<[u8]>) {
        let mut state = lock(&self.state);
        let owed = state.dir.put(key, image);
        self.deliver(&mut state, owed);
    }

    /// `rank` failed to compile `key` (its lease): the waiters compile it themselves.
    pub(crate) fn failed(&self, key: CompileKey, rank: i32) {
        let mut state = lock(&self.state);
        let owed = state.dir.failed(key, rank);
        self.deliver(&mut state, owed);
    }

    fn ask_remote(&self, key: CompileKey, rank: i32, tag: i32) {
        let mut state = lock(&self.state);
        let to = Asker::Remote { rank, tag };
        if let Some(answer) = state.dir.ask(key, to, rank, Instant::now()) {
            state.outbox.push(Owed { to, key, answer });
        }
    }

    fn cancel(&self, key: CompileKey, rank: i32, tag: i32) {
        lock(&self.state)
            .dir
            .cancel(key, Asker::Remote { rank, tag });
    }

    fn release(&self, lost: impl FnMut(i32, Instant) -> bool) {
        let mut state = lock(&self.state);
        let owed = state.dir.release(lost);
        self.deliver(&mut state, owed);
    }

    fn close(&self) {
        let mut state = lock(&self.state);
        let owed = state.dir.close();
        self.deliver(&mut state, owed);
    }

    fn take_outbox(&self) -> Vec<Owed> {
        std::mem::take(&mut lock(&self.state).outbox)
    }

    /// (images served, asks waiting, images held).
    pub(crate) fn counts(&self) -> (u64, u64, u64) {
        let state = lock(&self.state);
        let (images, _) = state.dir.images();
        (state.served, state.dir.waiting() as u64, images as u64)
    }
}

/// The service's side of MPI: the communicator, the sends in flight, who said `Bye`.
pub(crate) struct Server {
    comm: Arc<Comm>,
    board: Arc<Board>,
    pending: Vec<Staged>,
    byes: BTreeSet<i32>,
    looked: Instant,
    /// A lease held longer than this is freed (its holder may have died unseen).
    timeout: Duration,
}

/// The service thread: it gives its `Server` back when stopped (and why it stopped early,
/// if a step panicked).
pub(crate) type Service = JoinHandle<(Server, Option<String>)>;

impl Server {
    pub(crate) fn new(comm: Arc<Comm>, board: Arc<Board>, timeout: Duration) -> Server {
        Server {
            comm,
            board,
            pending: Vec::new(),
            byes: BTreeSet::new(),
            looked: Instant::now(),
            timeout,
        }
    }

    /// Runs the service on a thread of its own until `stop`.
    pub(crate) fn spawn(mut self, stop: Arc<AtomicBool>) -> std::io::Result<Service> {
        std::thread::Builder::new()
            .name("offload-mpi-job-cache".into())
            .spawn(move || {
                let mut last = Instant::now();
                while !stop.load(Ordering::Acquire) {
                    match catch_unwind(AssertUnwindSafe(|| self.step())) {
                        Ok(true) => last = Instant::now(),
                        Ok(false) if last.elapsed() < BUSY => std::thread::sleep(BUSY_POLL),
                        Ok(false) => std::thread::sleep(IDLE_POLL),
                        Err(panic) => {
                            let what = panic
                                .downcast_ref::<&str>()
                                .map(|s| s.to_string())
                                .or_else(|| panic.downcast_ref::<String>().cloned())
                                .unwrap_or_else(|| "a panic".into());
                            return (
                                self,
                                Some(format!("the job cache's service panicked: {what}")),
                            );
                        }
                    }
                }
                (self, None)
            })
    }

    /// One round: receives what arrived (up to `BATCH` messages), sends what is owed, and
    /// every `LIVENESS_POLL` completes sends and frees the leases of dead ranks (or held
    /// longer than the timeout). Whether anything arrived.
    fn step(&mut self) -> bool {
        let mut arrived = false;
        for _ in 0..BATCH {
            let probed = self
                .comm
                .get()
                .any_process()
                .immediate_matched_probe_with_tag(REQUEST_TAG);
            let Some((msg, status)) = probed else {
                break;
            };
            arrived = true;
            let bytes = comm::receive_bytes(msg, &status);
            self.handle(status.source_rank(), &bytes);
        }
        self.flush();
        if self.looked.elapsed() >= LIVENESS_POLL {
            self.looked = Instant::now();
            let (comm, timeout) = (&self.comm, self.timeout);
            self.board
                .release(|by, since| by != 0 && comm.is_dead(by) || since.elapsed() > timeout);
            self.flush();
            let mut left = Vec::new();
            for mut s in std::mem::take(&mut self.pending) {
                if s.is_done() {
                    continue;
                }
                if self.comm.is_dead(s.to()) {
                    s.abandon();
                } else {
                    left.push(s);
                }
            }
            self.pending = left;
        }
        arrived
    }

    fn handle(&mut self, from: i32, bytes: &[u8]) {
        // A message that does not decode is dropped: its sender's wait ends by its own
        // timeout (an image that was corrupted is never kept or passed on).
        match Msg::decode(bytes) {
            Ok(Msg::Ask { key, tag }) => self.board.ask_remote(key, from, tag),
            Ok(Msg::Put { key, image }) => self.board.put(key, Arc::from(image)),
            Ok(Msg::Failed { key }) => self.board.failed(key, from),
            Ok(Msg::Cancel { key, tag }) => self.board.cancel(key, from, tag),
            Ok(Msg::Bye) => {
                // A rank that says bye holds no lease any more (one it was granted after it
                // stopped waiting is given back), and the ack is the last message to it.
                self.board.release(|by, _| by == from);
                self.flush();
                self.byes.insert(from);
                let ack = Msg::ByeAck.encode();
                self.pending
                    .push(Staged::start(self.comm.get(), from, BYE_TAG, ack));
            }
            Ok(_) | Err(_) => {}
        }
    }

    /// Sends the answers owed to other ranks: none to a rank seen dead, nor to one that
    /// said `Bye` (it receives nothing after its `ByeAck`: a message then would be left in
    /// MPI at finalize).
    fn flush(&mut self) {
        for o in self.board.take_outbox() {
            let Asker::Remote { rank, tag } = o.to else {
                continue;
            };
            if self.byes.contains(&rank) || self.comm.is_dead(rank) {
                continue;
            }
            let msg = match o.answer {
                Answer::Image(image) => {
                    lock(&self.board.state).served += 1;
                    Msg::Image {
                        key: o.key,
                        image: image.to_vec(),
                    }
                }
                Answer::Compile => Msg::Compile { key: o.key },
                Answer::Local => Msg::Local { key: o.key },
            };
            self.pending
                .push(Staged::start(self.comm.get(), rank, tag, msg.encode()));
        }
    }

    /// Closes the service (on the finalize hook's thread, the service thread stopped): it
    /// keeps answering until every other rank said `Bye`, is dead, or did not within
    /// `timeout` (recorded in `lost`); then tells any asker still waiting to compile alone
    /// and completes its sends (abandoning those to lost ranks). Returns how many sends it
    /// abandoned.
    pub(crate) fn finish(mut self, lost: &mut Lost, timeout: Duration) -> usize {
        let size = self.comm.get().size();
        let deadline = Instant::now() + timeout;
        let mut looked = Instant::now();
        loop {
            let arrived = self.step();
            let now = Instant::now();
            let look = now.duration_since(looked) >= LIVENESS_POLL;
            if look {
                looked = now;
            }
            let mut waiting = Vec::new();
            for r in 1..size {
                let world = self.comm.procs.world(r);
                if self.byes.contains(&r) || lost.contains(world) {
                    continue;
                }
                if look && self.comm.is_dead(r) {
                    lost.dead.insert(world);
                    continue;
                }
                waiting.push(world);
            }
            if waiting.is_empty() {
                break;
            }
            if now >= deadline {
                lost.unresponsive.extend(waiting);
                break;
            }
            if !arrived {
                std::thread::sleep(BUSY_POLL);
            }
        }
        self.board.close();
        self.flush();
        let sends = std::mem::take(&mut self.pending);
        comm::settle(&self.comm, sends, Instant::now() + timeout, lost)
    }
}
