//! A device buffer (host backend) passed around a ring of MPI ranks and verified.
//!
//! ```sh
//! cargo build -p offload-mpi --example mpi_ring
//! mpiexec -n 4 target/debug/examples/mpi_ring
//! OFFLOAD_MPI_STAGED=1 mpiexec -n 4 target/debug/examples/mpi_ring   # through MPI instead
//! ```
//!
//! Rank 0 fills a buffer and sends it to rank 1; every rank copies what it received into
//! its own buffer and sends that on; rank 0 checks what comes back. Ranks on one node pass
//! the memory through offload's IPC endpoints (no copy on the way, one export per buffer);
//! offload shuts down inside `MPI_Finalize`, when the `Universe` is dropped.

use offload_core::{MemKind, Offload, PlatformEntry, Platforms, Ready};
use offload_mpi::Ranks;

struct Host;

impl Platforms for Host {
    fn platforms() -> Vec<PlatformEntry> {
        vec![offload_host::platform()]
    }
}

fn main() -> Result<(), offload_core::Error> {
    let universe = mpi::initialize().expect("run under mpiexec; MPI initialises once");
    let world = universe.world();
    let rt = Offload::<Ready, Host>::init()?;
    let dev = rt.devices()?.remove(0);
    offload_mpi::attach(&universe, rt.clone())?;
    let ranks = Ranks::new(&rt, &world, &dev)?;
    drop(rt);
    let (me, n) = (ranks.rank(), ranks.size());
    if n < 2 {
        eprintln!(
            "run with at least 2 ranks: mpiexec -n 4 {}",
            std::env::args().next().unwrap_or_default()
        );
        return Ok(());
    }
    let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
    const LEN: usize = 1 << 20;
    let buf = dev.alloc_exportable(LEN, MemKind::Device)?;
    for round in 0..10u8 {
        if me == 0 {
            let data: Vec<u8> = (0..LEN).map(|i| (i as u8) ^ round).collect();
            buf.write(0, &data)?;
            ranks.send(&buf, 0..LEN, next, 0)?;
            let back = ranks.recv(prev, 0)?;
            let mut out = vec![0; LEN];
            back.read(0, &mut out)?;
            assert_eq!(out, data, "round {round}: the ring changed the data");
            drop(back);
            ranks.wait_sent(next)?;
        } else {
            let got = ranks.recv(prev, 0)?;
            buf.copy_from(0, &got, 0, LEN)?;
            drop(got);
            ranks.send(&buf, 0..LEN, next, 0)?;
            ranks.wait_sent(next)?;
        }
    }
    println!(
        "rank {me}: 10 rounds of {LEN} bytes around the ring of {n} ({:?}), verified",
        ranks.route(next)
    );
    drop(ranks);
    drop(world);
    drop(universe); // MPI_Finalize: offload shuts down inside it
    let report = offload_mpi::finalize_report();
    println!("rank {me}: offload shut down in MPI_Finalize: {report:?}");
    Ok(())
}
