//! MPI program for tests/mpiexec.rs (the job cache): every rank installs offload's job-wide
//! compile cache, with a disk cache of its own (`DIR/cache-N`), loads C programs from
//! source on the host backend, launches them and checks what they wrote; it records its
//! compile counters and the job cache's in `DIR/rank-N.txt` (and stdout).
//!
//! - `same`: every rank loads the same three programs, from two threads at once: the job
//!   compiles each once.
//! - `same-in-finalize`: the same, but the ranks other than 0 leave their cache open, and
//!   their finalize hook closes it (rank 0's close waits for them).
//! - `different`: each rank loads two programs of its own and one all ranks share: nobody
//!   gets another's image.
//! - `kill-holder`: rank 1 starts compiling a slow program for the job; once the others
//!   wait for it, it SIGKILLs itself. The others compile it alone, then load two more
//!   programs through the cache (still served, by rank 0) and finalize.
//! - `kill-server`: the same with rank 0, the server: the others compile alone from then
//!   on.
//! - `serialized`: MPI initialised with `MPI_THREAD_SERIALIZED`: the job cache refuses to
//!   start, typed; before `attach`, and a second time, too.
//!
//! `mpiexec -n 4 target/debug/offload-mpi-job-cache DIR same`; the modes with a death run as
//! `offload-mpi-killed` does (see tests/mpiexec.rs).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Host, Rt, fail, say};
use mpi::point_to_point::Source as _;
use mpi::traits::*;
use offload_core::{Device, Offload, Source, Uninit};
use offload_mpi::JobCache;

/// How long a survivor waits for `MPI_Finalize` to return after offload's hook ran.
const GRACE: Duration = Duration::from_secs(3);
/// A rank still running after this ends itself.
const WATCHDOG: Duration = Duration::from_secs(150);
/// World tags of the test's own messages: "I compile the slow program", "die now".
const HOLDING: i32 = 77;
const DIE: i32 = 78;
/// Functions in the slow program (about 1–2 s of `cc -O3` here).
const SLOW_FUNCTIONS: usize = 200;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(mode)) = (args.next(), args.next()) else {
        fail(-1, "usage: DIR same|different|kill-holder|kill-server");
    };
    let dir = PathBuf::from(dir);
    common::watchdog(WATCHDOG);
    if mode == "serialized" {
        return serialized(&dir);
    }
    let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Multiple)
        .unwrap_or_else(|| fail(-1, "MPI initialises once"));
    let world = universe.world();
    let (me, n) = (world.rank(), world.size());
    common::log_to(me, dir.join(format!("rank-{me}.txt")));
    let rt: Rt = Offload::<Uninit, Host>::builder()
        .compile_cache(Some(dir.join(format!("cache-{me}"))))
        .start()
        .unwrap_or_else(|e| fail(me, e));
    let dev = rt.devices().unwrap_or_else(|e| fail(me, e)).remove(0);
    // Refused before `attach` (nothing would close it) and a second time: before any
    // collective call, so every rank gets the same answer and nothing else happens.
    let refused = |what: &str| match JobCache::install(&universe) {
        Err(offload_core::Error::InvalidArgument { reason, .. }) => {
            say(format!("{what}: Error::InvalidArgument ({reason})"))
        }
        other => fail(me, format!("{what}: {other:?}")),
    };
    refused("installed before attach");
    offload_mpi::attach(&universe, rt.clone()).unwrap_or_else(|e| fail(me, e));
    let cache = JobCache::install(&universe).unwrap_or_else(|e| fail(me, e));
    refused("installed a second time");
    drop(rt);
    world.barrier();

    match mode.as_str() {
        "same" | "same-in-finalize" => {
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        for i in 0..3 {
                            run(&dev, &put(&format!("shared {i}"), 100 + i), 100 + i);
                        }
                    });
                }
            });
            say("loaded and launched the same 3 programs from 2 threads, values verified");
        }
        "different" => {
            for i in 0..2 {
                let value = 1000 * me as u32 + i;
                run(&dev, &put(&format!("rank {me} own {i}"), value), value);
            }
            run(&dev, &put("all ranks", 5), 5);
            say("loaded and launched 2 programs of its own and 1 shared, values verified");
        }
        "kill-holder" | "kill-server" => {
            let victim = if mode == "kill-holder" { 1 } else { 0 };
            if n < 3 {
                fail(me, "run on 3 ranks or more");
            }
            killing(&world, &cache, &dev, victim);
        }
        other => fail(me, format!("unknown mode {other}")),
    }
    if !mode.starts_with("kill") {
        world.barrier(); // rank 0's counters then include every other rank's asks
    }
    report(&cache);
    // Closed before MPI_Finalize (the borrow of `universe` makes sure of it): on rank 0
    // this waits until every other rank closed its own.
    if mode == "same-in-finalize" && me != 0 {
        // Left open: the finalize hook closes it (a client's close has no thread to stop,
        // so it is as safe inside MPI_Finalize as before it).
        std::mem::forget(cache);
    } else {
        let closing = Instant::now();
        drop(cache);
        say(format!(
            "closed the job cache ({:.2} s)",
            closing.elapsed().as_secs_f64()
        ));
    }
    drop(world);
    common::finalize(universe, GRACE);
}

/// The job cache's refusals: too little MPI threading, no finalize hook, a second cache.
fn serialized(dir: &std::path::Path) {
    let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Serialized)
        .unwrap_or_else(|| fail(-1, "MPI initialises once"));
    let me = universe.world().rank();
    common::log_to(me, dir.join(format!("rank-{me}.txt")));
    match JobCache::install(&universe) {
        Err(offload_core::Error::Ipc { call, reason }) => say(format!(
            "with {threading:?} threading: Error::Ipc {{ call: {call:?}, reason: {reason:?} }}"
        )),
        other => fail(
            me,
            format!("the job cache started with {threading:?}: {other:?}"),
        ),
    }
    drop(universe);
}

/// Prints this rank's counters: the test sums them over the job.
fn report(cache: &JobCache) {
    let c = offload_core::compile_stats();
    let j = cache.stats();
    say(format!(
        "compile stats: compiles {} shared_hits {} disk_hits {} disk_writes {}; job cache: \
         fetched {} compiled_for_job {} compiled_alone {} served {} images {}",
        c.compiles,
        c.shared_hits,
        c.disk_hits,
        c.disk_writes,
        j.fetched,
        j.compiled_for_job,
        j.compiled_alone,
        j.served,
        j.images
    ));
}

/// A rank dies while it holds the slow program's lease and the others wait for it.
fn killing(world: &mpi::topology::SimpleCommunicator, cache: &JobCache, dev: &Device, victim: i32) {
    let me = world.rank();
    let n = world.size();
    let slow = slow(77);
    if me == victim {
        // A watcher: once this rank compiles, the others may ask; once they all wait
        // (the server says so, or sees it: it is the server), SIGKILL.
        std::thread::scope(|s| {
            s.spawn(|| {
                let waited = Instant::now();
                while offload_core::compile_stats().most_in_flight == 0 {
                    if waited.elapsed() > Duration::from_secs(60) {
                        fail(me, "the slow compile did not start");
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                say("compiling the slow program for the job");
                for r in (0..n).filter(|&r| r != me) {
                    world.process_at_rank(r).send_with_tag(&[1u8][..], HOLDING);
                }
                if me == 0 {
                    wait_for_waiters(cache, n - 1);
                } else {
                    let _ = world.process_at_rank(0).receive_vec_with_tag::<u8>(DIE);
                }
                say("SIGKILL to myself");
                let pid = std::process::id().to_string();
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid])
                    .status();
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
            run(dev, &slow, 77);
            fail(me, "the victim's slow load returned");
        });
        return;
    }
    let _ = world
        .process_at_rank(victim)
        .receive_vec_with_tag::<u8>(HOLDING);
    say(format!(
        "rank {victim} compiles the slow program: asking for it"
    ));
    std::thread::scope(|s| {
        if me == 0 {
            // The server tells the victim to die once every survivor waits.
            s.spawn(|| {
                wait_for_waiters(cache, n - 1);
                world.process_at_rank(victim).send_with_tag(&[1u8][..], DIE);
            });
        }
        let started = Instant::now();
        run(dev, &slow, 77);
        say(format!(
            "the slow program loaded and launched, value verified ({:.1} s)",
            started.elapsed().as_secs_f64()
        ));
    });
    for i in 0..2 {
        run(dev, &put(&format!("after {i}"), 200 + i), 200 + i);
    }
    say("2 more programs loaded and launched, values verified");
}

/// Waits (on the server) until `count` asks wait for a compile.
fn wait_for_waiters(cache: &JobCache, count: i32) {
    let waited = Instant::now();
    while cache.stats().waiting < count as u64 {
        if waited.elapsed() > Duration::from_secs(60) {
            fail(cache.rank(), format!("{count} ranks did not come to wait"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    say(format!("{count} asks wait for the slow program"));
}

/// A program whose kernel `put` writes `value` to the first n elements; `name` makes its
/// text (and key) its own.
fn put(name: &str, value: u32) -> Source {
    Source::c(format!(
        "#include \"offload_host.h\"\n/* job cache test: {name} */\n{}",
        common::put_kernel(value)
    ))
}

/// `put` with `SLOW_FUNCTIONS` functions around it that `cc -O3` takes a while over.
fn slow(value: u32) -> Source {
    let mut text = String::from("#include \"offload_host.h\"\n/* job cache test: slow */\n");
    for i in 0..SLOW_FUNCTIONS {
        text.push_str(&format!(
            "unsigned slow_{i}(unsigned x) {{ for (int k = 0; k < {}; k++) x = x * {}u + (x >> {}); return x; }}\n",
            i % 7 + 3,
            i + 3,
            i % 13 + 1
        ));
    }
    text.push_str(&common::put_kernel(value));
    Source::c(text)
}

/// Loads `source`, launches `put` over 64 elements and checks it wrote `value`.
fn run(dev: &Device, source: &Source, value: u32) {
    let me = mpi::topology::SimpleCommunicator::world().rank();
    common::launch_put(dev, source.clone(), value, me);
}
