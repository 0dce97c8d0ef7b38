//! Tracing: offload's spans and events, printed by `tracing-subscriber`.
//!
//! offload emits [`tracing`](https://docs.rs/tracing) events and installs no subscriber: the
//! application picks one. This example installs `tracing_subscriber::fmt` with an
//! `EnvFilter` that honours `RUST_LOG` (default `offload=debug`), then initialises offload,
//! lists its devices, allocates, loads the host test program, launches `add_one`, syncs,
//! sends a buffer range between two IPC endpoints of this process, and shuts down. Runs on
//! the host backend with no setup:
//!
//! ```text
//! cargo run --example tracing
//! RUST_LOG=offload=trace cargo run --example tracing            # everything
//! RUST_LOG=offload::ipc=debug,offload::init=info cargo run --example tracing
//! ```
//!
//! Targets: `offload::init` (runtime start and shutdown), `offload::load` (program loads),
//! `offload::launch` (kernel launches) and `offload::ipc` (exports, imports, endpoints,
//! deliveries, the sender-side cache, unmaps).

use std::io::IsTerminal;

use offload::{Arg, BackendKind, Dims, Error, MemKind, Offload, Program};
use tracing_subscriber::EnvFilter;

fn main() -> Result<(), Error> {
    // RUST_LOG when it is set (and parses), else offload's debug events.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("offload=debug"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_ansi(std::io::stdout().is_terminal())
        .init();

    let rt = Offload::init()?;
    println!("runtime generation {}", rt.generation());
    for p in rt.platforms()? {
        println!(
            "platform {} ({}): {} device(s)",
            p.backend, p.name, p.devices
        );
    }
    for u in rt.unavailable()? {
        println!("not available: {} ({})", u.backend, u.reason);
    }
    let devices = rt.devices()?;
    for dev in &devices {
        println!("device {}: {}", dev.backend(), dev.info()?.name);
    }
    let Some(dev) = devices.iter().find(|d| d.backend() == BackendKind::Host) else {
        println!("no host device (OFFLOAD_BACKENDS excludes it?): nothing to run");
        rt.shutdown()?;
        return Ok(());
    };

    // Allocate and launch `add_one(buf: u32[], n: u32)` over n words.
    const N: u32 = 1024;
    let buf = dev.alloc(N as usize * 4, MemKind::Device)?;
    buf.fill(0, N as usize * 4, 0)?;
    let add_one = Program::new(offload::host::fixtures::KERNELS)
        .load(dev)?
        .kernel("add_one")?;
    let queue = dev.queue()?;
    // SAFETY: `add_one` writes `n` (= N) u32s of its buffer, and `buf` holds exactly N
    // u32s; nothing else reads or writes `buf` until the queue is synced below.
    unsafe {
        queue.launch(
            &add_one,
            Dims::grid([N / 256, 1, 1]).block([256, 1, 1]),
            &[Arg::buffer(&buf), Arg::scalar(&N)],
        )
    }?;
    queue.sync()?;
    let mut out = vec![0u8; N as usize * 4];
    buf.read(0, &mut out)?;
    assert!(
        out.chunks_exact(4)
            .all(|w| u32::from_ne_bytes(w.try_into().unwrap()) == 1)
    );
    println!("add_one ran over {N} words, verified");

    // IPC: two endpoints of this process stand in for two processes.
    let (a, b) = (rt.ipc_endpoint()?, rt.ipc_endpoint()?);
    let to_b = a.connect(b.name())?;
    let shared = dev.alloc_exportable(4096, MemKind::Device)?;
    shared.write(0, &[7; 4096])?;
    for tag in 0..2u64 {
        // The first send exports and maps the allocation; the second hits the cache.
        a.send(to_b, &shared, 1024 * tag as usize, 1024, tag)?;
        let got = b.recv()?;
        let mut first = [0u8; 1];
        got.buffer().read(0, &mut first)?;
        assert_eq!(first, [7]);
        drop(got);
        a.wait_answered(to_b, std::time::Duration::from_secs(5))?;
    }
    println!("sent two ranges between IPC endpoints");
    // Freeing exported memory unmaps it from the peer first.
    drop(shared);
    drop((a, b));

    let down = rt.shutdown()?;
    println!(
        "shut down generation {} (deinitialised: {})",
        down.generation(),
        down.was_last()
    );
    Ok(())
}
