//! Quickstart: initialise offload, list what it found, allocate on every device, copy,
//! load a program and run a kernel, verify, shut down, and do it all again to show the
//! runtime re-initialises with fresh state. Runs on the host backend with no setup:
//!
//! ```text
//! cargo run --release --example quickstart
//! ```

use offload::{Arg, BackendKind, Dims, Error, MemKind, Offload, Program};

/// A program for `backend`, with kernels `add_one(buf: u32[], n: u32)` and friends.
/// The host one is a shared object built from offload-host/fixtures/kernels.c; the Vulkan
/// one is SPIR-V compiled from offload-vulkan/tests/fixtures/kernels.wgsl.
fn program_for(backend: BackendKind) -> Option<Program> {
    match backend {
        BackendKind::Host => Some(Program::new(offload::host::fixtures::KERNELS)),
        #[cfg(feature = "vulkan")]
        BackendKind::Vulkan => Some(Program::new(offload::vulkan::fixtures::KERNELS)),
        _ => None,
    }
}

fn round(round: u32) -> Result<(), Error> {
    let rt = Offload::init()?;
    println!("round {round}: runtime generation {}", rt.generation());
    for p in rt.platforms()? {
        println!(
            "  platform {} ({}): {} device(s)",
            p.backend, p.name, p.devices
        );
    }
    for u in rt.unavailable()? {
        println!("  not available: {} ({})", u.backend, u.reason);
    }

    let devices = rt.devices()?;
    for dev in &devices {
        let info = dev.info()?;
        println!(
            "  device {}: {} by {}, {} MiB, {} compute units",
            dev.backend(),
            info.name,
            info.vendor,
            info.memory >> 20,
            info.compute_units
        );
        const N: usize = 1 << 20;
        let src = dev.alloc(N, MemKind::Device)?;
        let dst = dev.alloc(N, MemKind::Device)?;
        let data: Vec<u8> = (0..N).map(|i| (i % 251) as u8).collect();
        src.write(0, &data)?;
        dst.copy_from(0, &src, 0, N)?;
        dst.fill(0, 16, 0xFF)?;
        let mut back = vec![0u8; N];
        dst.read(0, &mut back)?;
        assert!(back[..16].iter().all(|&b| b == 0xFF));
        assert_eq!(&back[16..], &data[16..]);
        println!("  wrote, copied, filled and verified {} KiB", N >> 10);

        let Some(program) = program_for(dev.backend()) else {
            println!("  (no example program for {} yet)", dev.backend());
            continue;
        };
        let add_one = program.load(dev)?.kernel("add_one")?;
        let words = (N / 4) as u32;
        let queue = dev.queue()?;
        let start = queue.record()?;
        // SAFETY: add_one increments `words` u32s of its buffer argument, and `dst` holds
        // exactly `words` of them.
        unsafe {
            queue.launch(
                &add_one,
                Dims::grid([words / 256, 1, 1]).block([256, 1, 1]),
                &[Arg::buffer(&dst), Arg::scalar(&words)],
            )
        }?;
        let end = queue.record()?;
        queue.read(&dst, 0, &mut back)?;
        for (i, word) in back.chunks_exact(4).enumerate() {
            let before = u32::from_ne_bytes(data[i * 4..i * 4 + 4].try_into().unwrap());
            let expected = if i < 4 { u32::MAX } else { before }.wrapping_add(1);
            assert_eq!(u32::from_ne_bytes(word.try_into().unwrap()), expected);
        }
        println!(
            "  ran add_one over {words} words in {} blocks: {:?}, verified",
            words / 256,
            end.elapsed_since(&start)?
        );
    }

    let kept = devices
        .first()
        .map(|d| d.alloc(64, MemKind::Device))
        .transpose()?;
    let down = rt.shutdown()?;
    println!(
        "  shut down generation {} (deinitialised: {})",
        down.generation(),
        down.was_last()
    );
    if let Some(buf) = kept {
        match buf.write(0, &[0; 64]) {
            Err(e @ Error::ShutDown { .. }) => println!("  a buffer kept past shutdown says: {e}"),
            other => panic!("expected ShutDown, got {other:?}"),
        }
    }
    Ok(())
}

fn main() -> Result<(), Error> {
    round(1)?;
    round(2)?;
    println!("ok");
    Ok(())
}
