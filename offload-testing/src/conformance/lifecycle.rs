//! Fixed tests of the lifecycle: init/shutdown cycles, concurrent init (L1), the fixture
//! kernels' results, and the handles of an ended generation (L3).

#![allow(unsafe_code)]

use super::*;

pub(super) fn init<P: Platforms>() -> Check<Offload<Ready, P>> {
    ok("Offload::init", Offload::<Ready, P>::init())
}

pub(super) fn first_device<P>(rt: &Offload<Ready, P>) -> Check<Device> {
    let devices = ok("Offload::devices", rt.devices())?;
    devices
        .into_iter()
        .next()
        .ok_or_else(|| "the runtime has no device: the conformance suite needs one".to_string())
}

/// Shuts down a reference that must be the last one.
pub(super) fn last<P>(rt: Offload<Ready, P>) -> Check {
    let down = ok("Offload::shutdown", rt.shutdown())?;
    ensure!(
        down.was_last(),
        "shutdown of the only reference this test took was not the last: something else holds \
         the runtime (run the conformance suite alone in its test binary)"
    );
    Ok(())
}

/// Nothing else holds the runtime (the suite needs it to itself).
pub(super) fn runtime_is_free<P: Platforms>(_: &Fixtures) -> Check {
    take_unreported_errors();
    last(init::<P>()?)
}

/// L1/L2: 100 cycles, each a fresh generation that works.
pub(super) fn init_shutdown_cycles<P: Platforms>(_: &Fixtures) -> Check {
    let mut seen = HashSet::new();
    for cycle in 0..100 {
        let rt = init::<P>()?;
        ensure!(
            seen.insert(rt.generation()),
            "cycle {cycle}: init gave generation {} again after a full shutdown (expected a \
             fresh generation)",
            rt.generation()
        );
        let dev = first_device(&rt)?;
        let buf = ok("Device::alloc", dev.alloc(4, MemKind::Device))?;
        ok("Buffer::write", buf.write(0, &[cycle as u8; 4]))?;
        same_bytes(
            "Buffer::read",
            &read_all("Buffer::read", &buf)?,
            &[cycle as u8; 4],
        )?;
        last(rt).map_err(|e| format!("cycle {cycle}: {e}"))?;
        shut_down(
            "Buffer::read after the last shutdown",
            buf.read(0, &mut [0; 4]),
        )?;
    }
    Ok(())
}

/// L1: concurrent inits share one generation; exactly one shutdown is the last.
pub(super) fn concurrent_init<P: Platforms>(_: &Fixtures) -> Check {
    const THREADS: usize = 4;
    for round in 0..20 {
        let barrier = Barrier::new(THREADS);
        let results: Vec<Check<(u64, bool)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let rt = init::<P>()?;
                        let generation = rt.generation();
                        barrier.wait(); // all hold a reference before any gives it back
                        let down = ok("Offload::shutdown", rt.shutdown())?;
                        Ok((generation, down.was_last()))
                    })
                })
                .collect();
            join_all(handles)
        });
        let results = results.into_iter().collect::<Check<Vec<_>>>()?;
        let generations: HashSet<u64> = results.iter().map(|r| r.0).collect();
        ensure!(
            generations.len() == 1,
            "round {round}: {THREADS} threads holding the runtime at once got different \
             generations {generations:?} (L1: they must share one)"
        );
        let lasts = results.iter().filter(|r| r.1).count();
        ensure!(
            lasts == 1,
            "round {round}: {lasts} of {THREADS} shutdowns said they were the last (expected 1)"
        );
    }
    Ok(())
}

pub(super) fn join_all<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, Check<T>>>,
) -> Vec<Check<T>> {
    handles
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            h.join()
                .unwrap_or_else(|p| Err(format!("thread {i} panicked: {}", panic_text(&*p))))
        })
        .collect()
}

/// The fixture kernels exist with the right parameters and compute what the model says.
pub(super) fn fixture_kernels<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let module = ok(
        "Program::load of the fixture image",
        Program::new(&fixtures.image).load(&dev),
    )?;
    let mut kernels = Vec::new();
    for kind in KernelKind::ALL {
        let k = ok(
            format!("Module::kernel({:?})", kind.name()),
            module.kernel(kind.name()),
        )?;
        ensure!(
            kind.declared_by(k.params()),
            "fixture kernel `{}` declares parameters {:?}, expected {:?}",
            kind.name(),
            k.params(),
            kind.params()
        );
        kernels.push(k);
    }
    let [add_one, fill, noop] = [&kernels[0], &kernels[1], &kernels[2]];
    let queue = ok("Device::queue", dev.queue())?;
    let buf = ok("Device::alloc", dev.alloc(256, MemKind::Device))?;
    ok("Buffer::fill", buf.fill(0, 256, 0))?;
    let mut model = vec![0u8; 256];
    let steps = [
        (fill, KernelKind::Fill, 7, 40, (2, 16)),
        (add_one, KernelKind::AddOne, 0, 64, (4, 16)),
        (add_one, KernelKind::AddOne, 0, 10, (1, 64)),
        (fill, KernelKind::Fill, u32::MAX, 3, (3, 1)),
        (add_one, KernelKind::AddOne, 0, 5, (1, 5)),
    ];
    for (k, kind, value, n, geometry) in steps {
        let what = format!(
            "launch of {}(value {value}, n {n}) on {geometry:?}",
            kind.name()
        );
        launch_checked(&what, &queue, k, kind, &buf, &mut model, value, n, geometry)?;
    }
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    ok("launch of noop", unsafe {
        queue.launch(noop, dims(1, 1), &[])
    })?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "after fill/add_one launches",
        &read_all("Buffer::read", &buf)?,
        &model,
    )?;

    // A buffer whose size is not a multiple of 4: the bytes past the last word stay.
    let odd = ok("Device::alloc", dev.alloc(10, MemKind::Device))?;
    ok("Buffer::write", odd.write(0, &[9; 10]))?;
    let mut odd_model = vec![9u8; 10];
    launch_checked(
        "add_one n=2",
        &queue,
        add_one,
        KernelKind::AddOne,
        &odd,
        &mut odd_model,
        0,
        2,
        (1, 4),
    )?;
    ok("Queue::sync", queue.sync())?;
    same_bytes(
        "10-byte buffer after add_one",
        &read_all("Buffer::read", &odd)?,
        &odd_model,
    )?;
    drop((kernels, module, queue, buf, odd));
    last(rt)
}

/// L3: every handle of generation N answers `ShutDown` in generation N+1; dropping is a no-op.
pub(super) fn handles_of_an_ended_generation<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let old_generation = rt.generation();
    let dev = first_device(&rt)?;
    let queue = ok("Device::queue", dev.queue())?;
    let buf = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    let program = Program::new(&fixtures.image);
    let module = ok("Program::load", program.load(&dev))?;
    let kernel = ok("Module::kernel", module.kernel("add_one"))?;
    let event = ok("Queue::record", queue.record())?;
    last(rt)?;

    let rt2 = init::<P>()?;
    ensure!(
        rt2.generation() != old_generation,
        "init after the last shutdown gave the same generation {old_generation}"
    );
    let dev2 = first_device(&rt2)?;
    let queue2 = ok("Device::queue (new generation)", dev2.queue())?;
    let buf2 = ok(
        "Device::alloc (new generation)",
        dev2.alloc(16, MemKind::Device),
    )?;
    let module2 = ok("Program::load (new generation)", program.load(&dev2))?;
    ensure!(
        module2.id() != module.id(),
        "loading the program in a new generation gave the old generation's module {}",
        module.id()
    );
    let kernel2 = ok("Module::kernel (new generation)", module2.kernel("add_one"))?;
    let n = 4u32;

    let old = "a handle of the previous generation";
    shut_down(format!("Buffer::read on {old}"), buf.read(0, &mut [0; 4]))?;
    shut_down(format!("Buffer::write on {old}"), buf.write(0, &[1; 4]))?;
    shut_down(format!("Buffer::fill on {old}"), buf.fill(0, 4, 1))?;
    shut_down(
        format!("Device::alloc on {old}"),
        dev.alloc(4, MemKind::Device),
    )?;
    shut_down(format!("Device::queue on {old}"), dev.queue())?;
    shut_down(format!("Device::info on {old}"), dev.info())?;
    shut_down(format!("Program::load on {old}"), program.load(&dev))?;
    shut_down(format!("Module::kernel on {old}"), module.kernel("noop"))?;
    shut_down(format!("Queue::sync on {old}"), queue.sync())?;
    shut_down(format!("Queue::record on {old}"), queue.record())?;
    shut_down(format!("Event::sync on {old}"), event.sync())?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    shut_down(format!("Queue::launch with everything of {old}"), unsafe {
        queue.launch(&kernel, dims(1, 4), &[Arg::buffer(&buf), Arg::scalar(&n)])
    })?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    shut_down(format!("Queue::launch of a kernel of {old}"), unsafe {
        queue2.launch(&kernel, dims(1, 4), &[Arg::buffer(&buf2), Arg::scalar(&n)])
    })?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    shut_down(format!("Queue::launch with a buffer of {old}"), unsafe {
        queue2.launch(&kernel2, dims(1, 4), &[Arg::buffer(&buf), Arg::scalar(&n)])
    })?;
    shut_down(
        format!("Buffer::copy_from from {old}"),
        buf2.copy_from(0, &buf, 0, 4),
    )?;
    // Teardown already ran and the module is gone: unloading again may say ShutDown or Ok.
    stale("Module::unload", module.unload())?;
    shut_down(format!("Buffer::free on {old}"), buf.free())?;
    drop((kernel, event, queue, dev));

    // The new generation is unaffected.
    ok("Buffer::fill", buf2.fill(0, 16, 0))?;
    let mut model = vec![0u8; 16];
    launch_checked(
        "launch in the new generation",
        &queue2,
        &kernel2,
        KernelKind::AddOne,
        &buf2,
        &mut model,
        0,
        n,
        (1, 4),
    )?;
    ok("Queue::sync", queue2.sync())?;
    same_bytes(
        "new generation after add_one",
        &read_all("Buffer::read", &buf2)?,
        &model,
    )?;
    drop((kernel2, module2, queue2, buf2));
    last(rt2)
}
