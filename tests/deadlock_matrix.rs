//! L7 by exhaustion: no pair of documented buffer operations deadlocks, whichever threads
//! allocated the buffers.
//!
//! A cell is (operation on thread 1, operation on thread 2, who allocated the two buffers
//! `a` and `b`: one of the two threads, each its own, or a third thread that has ended). Both
//! threads run their operation [`ROUNDS`] times at once on the same two buffers; each cell
//! runs under a watchdog that aborts the process naming the cell, so a hang fails the test
//! instead of hanging it. The operations: reads, writes and fills; `copy_from` both ways;
//! `with_mapped` on one buffer calling the other's operations (read, write, a launch and a
//! sync: each answers at once, refused or done); launches over both buffers in both argument
//! orders; queued copies both ways; a launch and a sync; an allocation and a free. A second
//! table shuts the runtime down on one thread while the other runs each operation (300
//! rounds each in CI, 10,000 in the soak), and a third has a host function use a buffer while another thread
//! accesses it behind a launch queued after the function.
//!
//! It failed before the buffer lock was a standard `RwLock`: with the biased lock, thread A
//! (which allocated `a`) copying `a` into `b` while thread B (which allocated `b`) ran
//! `b.with_mapped(|m| a.read(..))` hung (the owner's shared guard was exclusive, so the
//! address order of `copy_from` no longer prevented a cycle).

mod common;

use common::watchdog;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use offload::{
    Arg, BackendKind, Buffer, Device, Dims, Error, Kernel, MemKind, Offload, Program, Queue,
};

/// Rounds per cell of the pairs' table: 1,000, 10,000 under `OFFLOAD_SOAK`
/// (scripts/soak.sh); `OFFLOAD_MATRIX_ROUNDS` sets both tables' rounds (e.g. 10 for a quick
/// look).
fn rounds() -> usize {
    matrix_rounds(1000)
}

/// Rounds per cell of the shutdown table, each a whole runtime started and shut down (a
/// debug build's cycle takes about half a millisecond): 300 in CI, 10,000 under
/// `OFFLOAD_SOAK`.
fn shutdown_rounds() -> usize {
    matrix_rounds(300)
}

fn matrix_rounds(ci: usize) -> usize {
    if let Some(n) = std::env::var("OFFLOAD_MATRIX_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return n;
    }
    match std::env::var_os("OFFLOAD_SOAK") {
        Some(_) => 10_000,
        None => ci,
    }
}

/// How long one cell may take before it counts as hung.
const CELL_LIMIT: Duration = Duration::from_secs(30);

const WORDS: usize = 64;
const BYTES: usize = WORDS * 4;

/// A kernel over two buffers: `mix(x, y, n)` adds `y[i]` to `x[i]`.
fn mix_kernel(dev: &Device) -> Kernel {
    let source = offload::Source::c(
        "#include \"offload_host.h\"\n\
         OFFLOAD_KERNEL(mix, \"bbI\") {\n\
             uint32_t *x = OFFLOAD_BUFFER(uint32_t, 0);\n\
             const uint32_t *y = OFFLOAD_BUFFER(uint32_t, 1);\n\
             uint32_t n = OFFLOAD_SCALAR(uint32_t, 2);\n\
             for (uint32_t t = 0; t < launch->block[0]; t++) {\n\
                 uint64_t i = OFFLOAD_INDEX_X(t);\n\
                 if (i < n) x[i] += y[i];\n\
             }\n\
         }\n",
    );
    Program::from_source(source)
        .load(dev)
        .and_then(|m| m.kernel("mix"))
        .expect("the mix kernel compiles and loads (needs a C compiler)")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    ReadA,
    WriteA,
    FillB,
    CopyAIntoB,
    CopyBIntoA,
    MapAReadB,
    MapAWriteB,
    MapBReadA,
    MapBLaunchASync,
    LaunchAB,
    LaunchBA,
    QueuedCopyAB,
    QueuedCopyBA,
    LaunchSync,
    AllocFree,
}

const OPS: [Op; 15] = [
    Op::ReadA,
    Op::WriteA,
    Op::FillB,
    Op::CopyAIntoB,
    Op::CopyBIntoA,
    Op::MapAReadB,
    Op::MapAWriteB,
    Op::MapBReadA,
    Op::MapBLaunchASync,
    Op::LaunchAB,
    Op::LaunchBA,
    Op::QueuedCopyAB,
    Op::QueuedCopyBA,
    Op::LaunchSync,
    Op::AllocFree,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owners {
    /// Thread 1 allocated both.
    One,
    /// Thread 1 allocated `a`, thread 2 `b`.
    Each,
    /// A third thread allocated both and has ended.
    Third,
}

const OWNERS: [Owners; 3] = [Owners::One, Owners::Each, Owners::Third];

struct Pair {
    dev: Device,
    a: Buffer,
    b: Buffer,
    mix: Kernel,
}

/// Runs `op` once with `queue`; the error of a call made inside `with_mapped`'s closure is
/// returned beside (refused at once or done: either is fine, a wait is not).
fn run_op(op: Op, p: &Pair, queue: &Queue) -> offload::Result<()> {
    let mut out = [0u8; BYTES];
    match op {
        Op::ReadA => p.a.read(0, &mut out),
        Op::WriteA => p.a.write(0, &[1; BYTES]),
        Op::FillB => p.b.fill(0, BYTES, 2),
        Op::CopyAIntoB => p.b.copy_from(0, &p.a, 0, BYTES),
        Op::CopyBIntoA => p.a.copy_from(0, &p.b, 0, BYTES),
        Op::MapAReadB => p.a.with_mapped(|m| inner(p.b.read(0, &mut m[..BYTES]))),
        Op::MapAWriteB => p.a.with_mapped(|m| inner(p.b.write(0, &m[..BYTES]))),
        Op::MapBReadA => p.b.with_mapped(|m| inner(p.a.read(0, &mut m[..BYTES]))),
        Op::MapBLaunchASync => p.b.with_mapped(|_| {
            inner(mix(queue, p, &p.a, &p.a));
            inner(queue.sync());
        }),
        Op::LaunchAB => mix(queue, p, &p.a, &p.b),
        Op::LaunchBA => mix(queue, p, &p.b, &p.a),
        Op::QueuedCopyAB => queue.copy(&p.a, 0, &p.b, 0, BYTES),
        Op::QueuedCopyBA => queue.copy(&p.b, 0, &p.a, 0, BYTES),
        Op::LaunchSync => mix(queue, p, &p.a, &p.b).and_then(|()| queue.sync()),
        Op::AllocFree => p.dev.alloc(64, MemKind::Host).and_then(Buffer::free),
    }
    .map(drop)
}

/// Queues `mix(x, y, WORDS)`: `x[i] += y[i]` over the first `WORDS` u32s.
fn mix(queue: &Queue, p: &Pair, x: &Buffer, y: &Buffer) -> offload::Result<()> {
    let n = WORDS as u32;
    let dims = Dims::grid([1, 1, 1]).block([n, 1, 1]);
    // SAFETY: `mix` touches the first `n` u32s of both buffers, which hold `WORDS` u32s.
    unsafe {
        queue.launch(
            &p.mix,
            dims,
            &[Arg::buffer(x), Arg::buffer(y), Arg::scalar(&n)],
        )
    }
}

/// A call made inside `with_mapped`'s closure: done, or refused at once with
/// `InvalidArgument` (L7), or `ShutDown` beside a shutdown; anything else fails the test.
fn inner<T>(r: offload::Result<T>) {
    match r {
        Ok(_) | Err(Error::InvalidArgument { .. } | Error::ShutDown { .. }) => {}
        Err(e) => panic!("a call inside with_mapped: {e:?}"),
    }
}

fn alloc_pair(dev: &Device) -> (Buffer, Buffer) {
    (
        dev.alloc(BYTES, MemKind::Host).unwrap().label("a"),
        dev.alloc(BYTES, MemKind::Host).unwrap().label("b"),
    )
}

/// One cell: thread 1 runs `op1`, thread 2 `op2`, `rounds` times each, at once.
fn cell(dev: &Device, mix: &Kernel, op1: Op, op2: Op, owners: Owners, rounds: usize) {
    // Buffers in an `Arc<Mutex<Option<..>>>` so the thread that allocates them can hand
    // them over; the pair is built before the threads start their rounds.
    let slot: Arc<Mutex<Option<Buffer>>> = Arc::default();
    let (a, b) = match owners {
        Owners::One => alloc_pair(dev),
        Owners::Third => {
            let d = dev.clone();
            std::thread::spawn(move || alloc_pair(&d)).join().unwrap()
        }
        Owners::Each => {
            let d = dev.clone();
            let s = slot.clone();
            // `b` from another thread that has ended; `a` from this (thread 1's) one below.
            std::thread::spawn(move || {
                *s.lock().unwrap() = Some(d.alloc(BYTES, MemKind::Host).unwrap().label("b"))
            })
            .join()
            .unwrap();
            (
                dev.alloc(BYTES, MemKind::Host).unwrap().label("a"),
                slot.lock().unwrap().take().unwrap(),
            )
        }
    };
    let pair = Pair {
        dev: dev.clone(),
        a,
        b,
        mix: mix.clone(),
    };
    let go = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for op in [op1, op2] {
            let (pair, go) = (&pair, &go);
            s.spawn(move || {
                let queue = pair.dev.queue().unwrap();
                go.wait();
                for _ in 0..rounds {
                    if let Err(e) = run_op(op, pair, &queue) {
                        panic!("{op:?}: {e:?}");
                    }
                }
                queue.sync().unwrap();
            });
        }
    });
    drop(pair);
}

#[test]
fn no_pair_of_buffer_operations_deadlocks() {
    let _serial = common::serial();
    let rounds = rounds();
    let rt = Offload::init().unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    let mix = mix_kernel(&dev);
    let started = Instant::now();
    let mut cells = 0;
    for (i, &op1) in OPS.iter().enumerate() {
        for &op2 in &OPS[i..] {
            for owners in OWNERS {
                let what = format!("{op1:?} x {op2:?} ({owners:?})");
                let _dog = watchdog(CELL_LIMIT, what);
                cell(&dev, &mix, op1, op2, owners, rounds);
                cells += 1;
            }
        }
    }
    eprintln!(
        "deadlock matrix: {cells} cells x {rounds} rounds, 0 hangs, {:.1?}",
        started.elapsed()
    );
    drop((mix, dev));
    rt.shutdown().unwrap();
}

/// Each operation runs on one thread while another shuts the runtime down: every call
/// completes or answers `ShutDown`, and the shutdown completes.
#[test]
fn a_shutdown_beside_any_buffer_operation_completes() {
    let _serial = common::serial();
    let rounds = shutdown_rounds();
    let started = Instant::now();
    for op in OPS {
        for owners in OWNERS {
            let what = format!("shutdown beside {op:?} ({owners:?})");
            let _dog = watchdog(CELL_LIMIT, what);
            for _ in 0..rounds.max(1) {
                shutdown_beside(op, owners);
            }
        }
    }
    eprintln!(
        "deadlock matrix: shutdown beside {} operations x {} owners x {rounds} rounds, 0 \
         hangs, {:.1?}",
        OPS.len(),
        OWNERS.len(),
        started.elapsed()
    );
}

/// A kernel of a runtime that has ended, for the pairs whose operation launches nothing.
fn stale_kernel() -> Kernel {
    static STALE: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
    STALE
        .get_or_init(|| {
            let rt = Offload::init().unwrap();
            let kernel = mix_kernel(&rt.device(BackendKind::Host).unwrap());
            drop(rt);
            kernel
        })
        .clone()
}

fn shutdown_beside(op: Op, owners: Owners) {
    let rt = Offload::init().unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    // The kernel only where the operation launches it (a load per round costs most of a
    // round otherwise); the others get a kernel of the previous runtime, never launched.
    let launches = matches!(
        op,
        Op::MapBLaunchASync | Op::LaunchAB | Op::LaunchBA | Op::LaunchSync
    );
    let mix = if launches {
        mix_kernel(&dev)
    } else {
        stale_kernel()
    };
    let (a, b) = match owners {
        Owners::Third => {
            let d = dev.clone();
            std::thread::spawn(move || alloc_pair(&d)).join().unwrap()
        }
        _ => alloc_pair(&dev),
    };
    let pair = Pair { dev, a, b, mix };
    let go = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let (pair, go) = (&pair, &go);
        s.spawn(move || {
            let Ok(queue) = pair.dev.queue() else { return };
            go.wait();
            for _ in 0..20 {
                match run_op(op, pair, &queue) {
                    Ok(()) => {}
                    Err(Error::ShutDown { .. }) => break,
                    Err(e) => panic!("{op:?} beside a shutdown: {e:?}"),
                }
            }
        });
        go.wait();
        rt.shutdown().unwrap();
    });
}
/// What a thread does to `a` while a host function, queued before a launch that uses `a`,
/// uses `a` too.
#[derive(Clone, Copy, Debug)]
enum Access {
    Read,
    Write,
    Fill,
    Map,
    CopyInto,
    CopyOutOf,
}

/// A host function uses `a` while another thread accesses `a`, which a launch queued after
/// the function uses: the access waits for the launch, the launch for the function; the
/// function must not wait for the access (L7: the access waits for queued work with no
/// lock of `a` held). It hung before (a read holding `a` shared waited for the launch while
/// the host function's write waited for `a`).
#[test]
fn a_host_function_using_a_buffer_a_later_launch_uses_beside_host_accesses() {
    let _serial = common::serial();
    let rt = Offload::init().unwrap();
    let dev = rt.device(BackendKind::Host).unwrap();
    let mix_k = mix_kernel(&dev);
    let (a, b) = alloc_pair(&dev);
    let pair = Arc::new(Pair {
        dev: dev.clone(),
        a,
        b,
        mix: mix_k,
    });
    let queue = dev.queue().unwrap();
    for access in [
        Access::Read,
        Access::Write,
        Access::Fill,
        Access::Map,
        Access::CopyInto,
        Access::CopyOutOf,
    ] {
        for host_fn_writes in [true, false] {
            let _dog = watchdog(
                CELL_LIMIT,
                format!("{access:?} beside a host function (writes: {host_fn_writes})"),
            );
            for _ in 0..100 {
                let p = pair.clone();
                let (started, go) = std::sync::mpsc::channel();
                queue
                    .enqueue_host_fn(move || {
                        started.send(()).unwrap();
                        std::thread::sleep(Duration::from_micros(200));
                        let mut out = [0u8; BYTES];
                        if host_fn_writes {
                            p.a.write(0, &[3; BYTES]).unwrap();
                        } else {
                            p.a.read(0, &mut out).unwrap();
                        }
                    })
                    .unwrap();
                mix(&queue, &pair, &pair.a, &pair.b).unwrap();
                go.recv().unwrap();
                let mut out = [0u8; BYTES];
                match access {
                    Access::Read => pair.a.read(0, &mut out),
                    Access::Write => pair.a.write(0, &out),
                    Access::Fill => pair.a.fill(0, BYTES, 1),
                    Access::Map => pair.a.with_mapped(|m| m[0] = 1),
                    Access::CopyInto => pair.a.copy_from(0, &pair.b, 0, BYTES),
                    Access::CopyOutOf => pair.b.copy_from(0, &pair.a, 0, BYTES),
                }
                .unwrap();
                queue.sync().unwrap();
            }
        }
    }
    drop(pair);
    drop(queue);
    rt.shutdown().unwrap();
}
