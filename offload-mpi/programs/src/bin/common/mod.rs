//! What the MPI programs of src/bin share: a runtime with only the host backend, failing a
//! rank, one step of a ring exchange, the `put` kernel of the job-cache programs, and for the programs where a rank dies: each rank's
//! record of what it did (a file as well as stdout), a watchdog, and a finalize that does
//! not wait for MPI's own part forever.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use offload_core::{Buffer, Device, Dims, MemKind, PlatformEntry, Platforms, Program, Source};
use offload_mpi::Ranks;

/// The host backend only.
pub struct Host;

impl Platforms for Host {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_host::platform()]
    }
}

/// The runtime of these programs.
pub type Rt = offload_core::Offload<offload_core::Ready, Host>;

/// Prints a failure of rank `rank` and exits non-zero (mpiexec then fails the job).
pub fn fail(rank: i32, what: impl std::fmt::Display) -> ! {
    eprintln!("rank {rank}: FAIL: {what}");
    std::process::exit(1)
}

/// One step of a ring: this rank sends `len` bytes of its number to `next` (tag 7) and
/// checks the `len` bytes of `prev`'s number it receives; returns the buffer it sent.
#[allow(dead_code)] // not every program of src/bin runs a ring
pub fn ring_step(ranks: &Ranks, dev: &Device, len: usize, next: i32, prev: i32) -> Buffer {
    let me = ranks.rank();
    let buf = dev
        .alloc_exportable(len, MemKind::Device)
        .unwrap_or_else(|e| fail(me, e));
    buf.write(0, &vec![me as u8; len])
        .unwrap_or_else(|e| fail(me, e));
    ranks
        .send(&buf, 0..len, next, 7)
        .unwrap_or_else(|e| fail(me, e));
    let got = ranks.recv(prev, 7).unwrap_or_else(|e| fail(me, e));
    let mut bytes = vec![0u8; len];
    got.read(0, &mut bytes).unwrap_or_else(|e| fail(me, e));
    if bytes.iter().any(|&b| b != prev as u8) {
        fail(me, format!("data from rank {prev} is wrong"));
    }
    buf
}

static LOG: Mutex<Option<(i32, PathBuf)>> = Mutex::new(None);

/// From now on, [`say`] records the lines of rank `rank` in the file `path` too: MPICH's
/// process manager may lose what ranks print once one died.
#[allow(dead_code)] // not every program of src/bin records its lines
pub fn log_to(rank: i32, path: PathBuf) {
    *LOG.lock().unwrap_or_else(|e| e.into_inner()) = Some((rank, path));
}

/// Prints a line of this rank (`rank N: ...`) and records it in its file ([`log_to`]).
#[allow(dead_code)]
pub fn say(what: impl std::fmt::Display) {
    let log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    let Some((rank, path)) = &*log else {
        return;
    };
    let line = format!("rank {rank}: {what}\n");
    print!("{line}");
    let _ = std::io::stdout().flush();
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Ends this process if it still runs after `limit` (no rank outlives a killed `mpiexec`).
#[allow(dead_code)]
pub fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        say("watchdog: still running, exiting");
        std::process::exit(3);
    });
}

/// `MPI_Finalize` (the drop of `universe`), recording offload's finalize report as soon as
/// the hook ran: before MPI's own part of `MPI_Finalize`, which in MPICH 4.0 waits for a
/// dead rank and never returns. The process then ends itself after `grace`.
#[allow(dead_code)]
pub fn finalize(universe: mpi::environment::Universe, grace: Duration) {
    let finalizing = Instant::now();
    let (returned, finalized) = std::sync::mpsc::channel::<()>();
    let watcher = std::thread::spawn(move || {
        let report = loop {
            if let Some(report) = offload_mpi::finalize_report() {
                break report;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let hook = Instant::now();
        say(format!(
            "offload's finalize hook completed: shut_down {} was_last {} dead {:?} \
             unresponsive {:?} abandoned {} errors {:?} ({:.1} s)",
            report.shut_down,
            report.was_last,
            report.dead,
            report.unresponsive,
            report.abandoned,
            report.errors,
            hook.duration_since(finalizing).as_secs_f64()
        ));
        let left = grace.saturating_sub(hook.elapsed());
        if finalized.recv_timeout(left).is_err() {
            say(format!(
                "MPI_Finalize did not return within {} s (MPICH waits for the missing rank); exiting",
                grace.as_secs()
            ));
            std::process::exit(0);
        }
    });
    drop(universe); // MPI_Finalize, and nothing else
    let _ = returned.send(());
    let _ = watcher.join();
    say("MPI_Finalize returned");
}

/// The C text of a kernel `put(buf, n)` that writes `value` to the first `n` elements.
#[allow(dead_code)] // the job-cache programs only
pub fn put_kernel(value: u32) -> String {
    format!(
        "OFFLOAD_KERNEL(put, \"bI\") {{\n\
             uint32_t *buf = OFFLOAD_BUFFER(uint32_t, 0);\n\
             uint32_t n = OFFLOAD_SCALAR(uint32_t, 1);\n\
             for (uint32_t t = 0; t < launch->block[0]; t++) {{\n\
                 uint64_t i = OFFLOAD_INDEX_X(t);\n\
                 if (i < n) buf[i] = {value};\n\
             }}\n\
         }}\n"
    )
}

/// Loads `source` (a program with [`put_kernel`]), launches `put` over 64 elements, syncs
/// and checks it wrote `value`; rank `me` fails otherwise.
#[allow(dead_code)] // the job-cache programs only
pub fn launch_put(dev: &Device, source: Source, value: u32, me: i32) {
    let put = Program::from_source(source)
        .load(dev)
        .and_then(|m| m.kernel("put"))
        .unwrap_or_else(|e| fail(me, e));
    let buf = dev.alloc_zeros::<u32>(64).unwrap_or_else(|e| fail(me, e));
    let queue = dev.queue().unwrap_or_else(|e| fail(me, e));
    // SAFETY: `put` writes the first n u32s of its buffer (n = 64, the buffer's length).
    unsafe {
        queue.launch(
            &put,
            Dims::for_num_elems(64),
            &offload_core::args![&buf, 64u32],
        )
    }
    .unwrap_or_else(|e| fail(me, e));
    queue.sync().unwrap_or_else(|e| fail(me, e));
    let got = buf.to_vec().unwrap_or_else(|e| fail(me, e));
    if got != vec![value; 64] {
        fail(me, format!("put wrote {:?}, not {value}", &got[..4]));
    }
}
