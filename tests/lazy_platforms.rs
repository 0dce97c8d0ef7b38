//! Platforms open when first needed, once per generation: a program that uses
//! only the host device never opens Vulkan, CUDA, HIP or Level Zero, however often it
//! initialises; `rt.device(kind)` opens only that backend; `rt.devices_for(..)` opens only
//! the platforms whose format can match. Counted with `offload::platform_open_attempts`
//! (every try, successful or not) and the backends' own open counters.

mod common;

use std::sync::{Arc, Barrier};

use offload::{BackendKind, Error, MemKind, Offload, Program, platform_open_attempts};

/// Every backend's attempt count.
fn attempts() -> Vec<(BackendKind, u64)> {
    BackendKind::ALL
        .iter()
        .map(|&k| (k, platform_open_attempts(k)))
        .collect()
}

/// The backends whose attempt count grew since `before`, with how much.
fn opened_since(before: &[(BackendKind, u64)]) -> Vec<(BackendKind, u64)> {
    before
        .iter()
        .filter_map(|&(k, n)| {
            let now = platform_open_attempts(k);
            (now > n).then_some((k, now - n))
        })
        .collect()
}

/// Whether lavapipe (or another Vulkan driver) is here; a skip is printed, and fails CI.
fn vulkan_here() -> bool {
    if !cfg!(feature = "vulkan") {
        eprintln!("SKIPPED: the `vulkan` feature is off");
        return false;
    }
    let rt = Offload::init().unwrap();
    let here = rt.device(BackendKind::Vulkan).is_ok();
    if !here {
        let why = rt.unavailable().unwrap();
        assert!(!common::in_ci(), "CI=true: no Vulkan device ({why:?})");
        eprintln!("SKIPPED vulkan: no Vulkan device ({why:?})");
    }
    rt.shutdown().unwrap();
    here
}

#[test]
fn init_opens_nothing_and_a_host_program_opens_only_the_host() {
    let _serial = common::serial();
    let before = attempts();
    let rt = Offload::init().unwrap();
    assert!(
        rt.opened_platforms().unwrap().is_empty(),
        "init opened something"
    );
    assert_eq!(opened_since(&before), vec![]);
    let dev = rt.device(BackendKind::Host).unwrap();
    let buf = dev.alloc(64, MemKind::Device).unwrap();
    buf.free().unwrap();
    assert_eq!(opened_since(&before), vec![(BackendKind::Host, 1)]);
    let opened = rt.opened_platforms().unwrap();
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].backend, BackendKind::Host);
    rt.shutdown().unwrap();
}

#[test]
fn sixteen_threads_of_host_only_cycles_never_open_another_backend() {
    let _serial = common::serial();
    const THREADS: usize = 16;
    const CYCLES: usize = 1_000;
    let before = attempts();
    let vulkan_before = vulkan_opens();
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let mut errors = 0usize;
                for _ in 0..CYCLES {
                    let cycle = || -> offload::Result<()> {
                        let rt = Offload::init()?;
                        let dev = rt.device(BackendKind::Host)?;
                        dev.alloc(256, MemKind::Device)?.free()?;
                        rt.shutdown()?;
                        Ok(())
                    };
                    if let Err(e) = cycle() {
                        eprintln!("cycle failed: {e}");
                        errors += 1;
                    }
                }
                errors
            })
        })
        .collect();
    let errors: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(errors, 0);
    let grew = opened_since(&before);
    assert!(
        grew.iter().all(|&(k, _)| k == BackendKind::Host),
        "a host-only program opened {grew:?}"
    );
    assert_eq!(vulkan_opens(), vulkan_before, "Vulkan was opened");
    assert!(offload::take_unreported_errors().is_empty());
}

/// Vulkan's own count of instances opened (0 without the feature).
fn vulkan_opens() -> usize {
    #[cfg(feature = "vulkan")]
    return offload::vulkan::stats().opened;
    #[cfg(not(feature = "vulkan"))]
    0
}

#[test]
fn a_backend_opens_once_per_generation_on_first_use() {
    let _serial = common::serial();
    if !vulkan_here() {
        return;
    }
    for _generation in 0..2 {
        let before = attempts();
        let rt = Offload::init().unwrap();
        // Eight first uses at once open it once.
        let barrier = Arc::new(Barrier::new(8));
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (rt, barrier) = (&rt, barrier.clone());
                s.spawn(move || {
                    barrier.wait();
                    let dev = rt.device(BackendKind::Vulkan).unwrap();
                    assert_eq!(dev.backend(), BackendKind::Vulkan);
                });
            }
        });
        assert_eq!(opened_since(&before), vec![(BackendKind::Vulkan, 1)]);
        // Listing every device opens the others, never Vulkan again.
        let all = rt.devices().unwrap();
        assert!(all.iter().any(|d| d.backend() == BackendKind::Host));
        assert!(
            opened_since(&before)
                .iter()
                .all(|&(k, n)| n == 1 || k != BackendKind::Vulkan),
            "{:?}",
            opened_since(&before)
        );
        rt.shutdown().unwrap();
    }
    #[cfg(feature = "vulkan")]
    {
        let s = offload::vulkan::stats();
        assert_eq!(
            s.opened, s.deinitialised,
            "every opened instance was deinitialised"
        );
    }
}

#[test]
fn a_backend_that_cannot_open_is_reported_where_it_was_needed() {
    let _serial = common::serial();
    if !cfg!(feature = "cuda") {
        eprintln!("SKIPPED: the `cuda` feature is off");
        return;
    }
    let rt = Offload::init().unwrap();
    let Err(e) = rt.device(BackendKind::Cuda) else {
        eprintln!("SKIPPED: a CUDA driver and device are here");
        return;
    };
    assert!(
        matches!(
            e,
            Error::Unsupported {
                backend: BackendKind::Cuda,
                ..
            }
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("Offload::device"), "{text}");
    assert!(text.contains("cuda platform is unavailable"), "{text}");
    // Tried once: the failure is kept for the generation, and listed.
    let before = platform_open_attempts(BackendKind::Cuda);
    assert!(rt.device(BackendKind::Cuda).is_err());
    assert_eq!(platform_open_attempts(BackendKind::Cuda), before);
    let unavailable = rt.unavailable().unwrap();
    assert!(
        unavailable.iter().any(|u| u.backend == BackendKind::Cuda),
        "{unavailable:?}"
    );
    rt.shutdown().unwrap();
}

/// (what, the image, the backends whose devices run it, the backends that may be tried)
type Case = (&'static str, Vec<u8>, Vec<BackendKind>, Vec<BackendKind>);

#[test]
fn devices_for_opens_only_the_platforms_whose_format_can_match() {
    let _serial = common::serial();
    let vulkan = vulkan_here();
    let mut cases: Vec<Case> = vec![(
        "host fixture",
        offload::host::fixtures::KERNELS.to_vec(),
        vec![BackendKind::Host],
        vec![BackendKind::Host],
    )];
    #[cfg(feature = "vulkan")]
    cases.push((
        "SPIR-V",
        offload::vulkan::fixtures::KERNELS.to_vec(),
        if vulkan {
            vec![BackendKind::Vulkan]
        } else {
            vec![]
        },
        // Level Zero takes SPIR-V too (its loader may be installed without a GPU).
        vec![BackendKind::Vulkan, BackendKind::Ze],
    ));
    #[cfg(feature = "cuda")]
    cases.push((
        "PTX",
        offload::cuda::fixtures::KERNELS.to_vec(),
        vec![],
        vec![BackendKind::Cuda],
    ));
    #[cfg(feature = "hip")]
    cases.push((
        "AMD GPU code object",
        offload::hip::fixtures::KERNELS.to_vec(),
        vec![],
        vec![BackendKind::Hip],
    ));
    let mut rng = common::Rng::new(24);
    let random: Vec<u8> = (0..256).map(|_| rng.next() as u8).collect();
    cases.push(("random bytes", random, vec![], vec![]));
    let _ = vulkan;
    for (what, image, runs_on, may_try) in cases {
        let before = attempts();
        let rt = Offload::init().unwrap();
        let devices = rt.devices_for(&Program::new(&image)).unwrap();
        let tried = opened_since(&before);
        for (kind, _) in &tried {
            assert!(
                may_try.contains(kind),
                "{what}: {kind} was opened, but it cannot take this format (opened: {tried:?})"
            );
        }
        let mut backends: Vec<BackendKind> = devices.iter().map(|d| d.backend()).collect();
        backends.dedup();
        assert_eq!(backends, runs_on, "{what}");
        // Each device it named can load it.
        for dev in &devices {
            dev.validate(&image).unwrap();
        }
        // The image form gives the same answer.
        assert_eq!(rt.devices_for_image(&image).unwrap().len(), devices.len());
        rt.shutdown().unwrap();
    }
}
