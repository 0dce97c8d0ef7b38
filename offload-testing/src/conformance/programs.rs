//! Fixed tests of programs and their callbacks (P2, P3): failing setups, teardown exactly
//! once and in order at shutdown, failing teardowns, and one module for many threads
//! loading one program at once.

#![allow(unsafe_code)]

use super::*;

/// P3: a failing setup is `Error::Callback`, and the load can be retried.
pub(super) fn failing_setup<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let attempts = Arc::new(AtomicUsize::new(0));
    let tracker = Arc::new(Tracker::default());
    let (a, t) = (attempts.clone(), tracker.clone());
    let program = Program::new(&fixtures.image)
        .on_setup(move |m| {
            if a.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err("the first setup fails on purpose".into());
            }
            t.record(m, false);
            Ok(())
        })
        .on_teardown({
            let t = tracker.clone();
            move |m| {
                t.record(m, true);
                Ok(())
            }
        });
    expect_err(
        "Program::load whose setup fails",
        program.load(&dev),
        "Error::Callback",
        |e| matches!(e, Error::Callback { .. }),
    )?;
    let module = ok(
        "Program::load again after a failed setup",
        program.load(&dev),
    )?;
    ensure!(
        attempts.load(Ordering::SeqCst) == 2,
        "setup ran {} times for two loads (expected 2)",
        attempts.load(Ordering::SeqCst)
    );
    let id = module.id();
    let noop = ok("Module::kernel", module.kernel("noop"))?;
    let queue = ok("Device::queue", dev.queue())?;
    // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
    ok("launch after a retried load", unsafe {
        queue.launch(&noop, dims(1, 1), &[])
    })?;
    ok("Queue::sync", queue.sync())?;
    drop((noop, module));
    ensure!(
        tracker.teardowns_of(id) == 0,
        "teardown ran {} times after the module's handles were dropped while its program lives \
         (expected 0: the program keeps its module, P2)",
        tracker.teardowns_of(id)
    );
    drop(program);
    ensure!(
        tracker.teardowns_of(id) == 1,
        "teardown ran {} times after the last handle of the module and its program were \
         dropped (expected 1)",
        tracker.teardowns_of(id)
    );
    drop(queue);
    last(rt)?;
    tracker.finish()
}

/// P3: teardown runs exactly once, with the module loaded, whether by `unload()`, by the
/// last drop, or by shutdown.
pub(super) fn teardown_exactly_once<P: Platforms>(fixtures: &Fixtures) -> Check {
    let tracker = Arc::new(Tracker::default());
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let expect = |how: &str, id: u64, n: usize| -> Check {
        let got = tracker.teardowns_of(id);
        ensure!(got == n, "{how}: teardown ran {got} times, expected {n}");
        Ok(())
    };

    // By unload(), with other handles and a kernel still held.
    let m = ok(
        "Program::load",
        tracked_program(&fixtures.image, &tracker).load(&dev),
    )?;
    let id = m.id();
    ensure!(
        tracker.setups_of(id) == 1,
        "setup ran {} times on load",
        tracker.setups_of(id)
    );
    let (other, kernel) = (m.clone(), ok("Module::kernel", m.kernel("noop"))?);
    expect("before unload()", id, 0)?;
    ok("Module::unload", m.unload())?;
    expect("by unload()", id, 1)?;
    drop((other, kernel));
    expect("by unload(), after dropping the other handles", id, 1)?;

    // By the last drop (the last handle is a kernel).
    let m = ok(
        "Program::load",
        tracked_program(&fixtures.image, &tracker).load(&dev),
    )?;
    let id = m.id();
    let other = m.clone();
    let kernel = ok("Module::kernel", other.kernel("add_one"))?;
    drop(m);
    expect("after dropping one of three handles", id, 0)?;
    drop(other);
    expect("after dropping two of three handles", id, 0)?;
    drop(kernel);
    expect("by the last drop", id, 1)?;

    // P2: the program keeps its module: loads after every handle went find it (no load,
    // no setup); dropping the program lets it go.
    let program = tracked_program(&fixtures.image, &tracker);
    let id = ok("Program::load", program.load(&dev))?.id();
    for round in 0..3 {
        let again = ok("Program::load after every handle went", program.load(&dev))?;
        ensure!(
            again.id() == id,
            "round {round}: a load after every Module handle was dropped loaded a new module \
             (the program keeps its module, P2)"
        );
    }
    ensure!(
        tracker.setups_of(id) == 1,
        "setup ran {} times for 4 loads of one program (expected 1, P2)",
        tracker.setups_of(id)
    );
    expect("while its program lives", id, 0)?;
    drop(program);
    expect("by dropping the program", id, 1)?;

    // By shutdown; using the handles afterwards runs nothing again.
    let m = ok(
        "Program::load",
        tracked_program(&fixtures.image, &tracker).load(&dev),
    )?;
    let id = m.id();
    let kernel = ok("Module::kernel", m.kernel("noop"))?;
    let other = m.clone();
    last(rt)?;
    expect("by shutdown", id, 1)?;
    stale("Module::unload after shutdown", m.unload())?;
    drop((kernel, other));
    expect(
        "by shutdown, after unload() and drops of the old handles",
        id,
        1,
    )?;
    tracker.finish()
}

/// P3/L4: at shutdown, teardowns run newest module first.
pub(super) fn teardown_order_at_shutdown<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut modules = Vec::new();
    for name in ["first", "second", "third"] {
        let o = order.clone();
        let program = Program::new(&fixtures.image).on_teardown(move |_| {
            lock(&o).push(name);
            Ok(())
        });
        modules.push(ok("Program::load", program.load(&dev))?);
    }
    last(rt)?;
    let got = lock(&order).clone();
    ensure!(
        got == ["third", "second", "first"],
        "teardowns at shutdown ran in the order {got:?}, expected newest setup first \
         [\"third\", \"second\", \"first\"]"
    );
    drop(modules);
    ensure!(
        lock(&order).len() == 3,
        "teardown ran again when old handles were dropped"
    );
    Ok(())
}

/// P3/L4: a failing teardown at shutdown is returned, and the rest of shutdown still ran.
pub(super) fn failing_teardown_at_shutdown<P: Platforms>(fixtures: &Fixtures) -> Check {
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let program = Program::new(&fixtures.image).on_teardown(move |_| {
        c.fetch_add(1, Ordering::SeqCst);
        Err("teardown fails on purpose".into())
    });
    let module = ok("Program::load", program.load(&dev))?;
    let buf = ok("Device::alloc", dev.alloc(16, MemKind::Device))?;
    ok("Buffer::write", buf.write(0, &[1; 16]))?;
    let queue = ok("Device::queue", dev.queue())?;
    match rt.shutdown() {
        Ok(_) => {
            return Err(
                "shutdown returned Ok although a teardown callback failed (L4/P3: \
                             its error must be returned)"
                    .into(),
            );
        }
        Err(e) => {
            let e = Error::from(e);
            let callbacks = e
                .iter()
                .filter(|x| matches!(x, Error::Callback { .. }))
                .count();
            ensure!(
                callbacks == 1 && e.iter().count() == 1,
                "shutdown with one failing teardown returned {} (expected exactly that one \
                 Error::Callback)",
                err_text(&e)
            );
        }
    }
    shut_down(
        "Buffer::read after a shutdown whose teardown failed",
        buf.read(0, &mut [0; 4]),
    )?;
    shut_down(
        "Queue::sync after a shutdown whose teardown failed",
        queue.sync(),
    )?;
    drop((module, buf, queue));
    ensure!(
        calls.load(Ordering::SeqCst) == 1,
        "the failing teardown ran {} times (expected once)",
        calls.load(Ordering::SeqCst)
    );
    // The runtime is free and fresh.
    last(init::<P>()?)
}

/// P2/P3: threads loading one program at once get one module, set up once.
pub(super) fn concurrent_load<P: Platforms>(fixtures: &Fixtures) -> Check {
    const THREADS: usize = 32;
    const ROUNDS: usize = 100;
    let rt = init::<P>()?;
    let dev = first_device(&rt)?;
    let tracker = Arc::new(Tracker::default());
    // P2: 32 threads × 100 rounds of (load, launch, drop the module) on one program: one
    // backend load (every backend load is a new module, with a new id) and one setup for
    // the program's lifetime, however often every handle went.
    let program = tracked_program(&fixtures.image, &tracker);
    let barrier = Barrier::new(THREADS);
    let results: Vec<Check<HashSet<u64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let queue = ok("Device::queue", dev.queue())?;
                    let mut ids = HashSet::new();
                    for _ in 0..ROUNDS {
                        barrier.wait();
                        let module = ok("Program::load", program.load(&dev))?;
                        let noop = ok("Module::kernel", module.kernel("noop"))?;
                        // SAFETY: a fixture kernel: it touches only the buffers and counts it is given.
                        ok("Queue::launch", unsafe {
                            queue.launch(&noop, dims(1, 1), &[])
                        })?;
                        ids.insert(module.id());
                    }
                    ok("Queue::sync", queue.sync())?;
                    Ok(ids)
                })
            })
            .collect();
        join_all(handles)
    });
    let mut ids = HashSet::new();
    for r in results {
        ids.extend(r?);
    }
    ensure!(
        ids.len() == 1,
        "{THREADS} threads × {ROUNDS} rounds of (load, launch, drop) on one program got \
         modules {ids:?} (P2: one module per program and device while the program lives)"
    );
    let id = *ids.iter().next().unwrap_or(&0);
    ensure!(
        tracker.setups_of(id) == 1,
        "setup ran {} times for {THREADS} × {ROUNDS} loads of one program (P2, P3: once)",
        tracker.setups_of(id)
    );
    ensure!(
        tracker.teardowns_of(id) == 0,
        "teardown ran while the program lives (P2)"
    );
    drop(program);
    ensure!(
        tracker.teardowns_of(id) == 1,
        "teardown ran {} times after the program and every handle were dropped (expected 1)",
        tracker.teardowns_of(id)
    );
    // Fresh programs loaded at once by 8 threads: one module each, set up once.
    for round in 0..5 {
        let program = tracked_program(&fixtures.image, &tracker);
        let barrier = Barrier::new(8);
        let results: Vec<Check<Module>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        ok("Program::load", program.load(&dev))
                    })
                })
                .collect();
            join_all(handles)
        });
        let modules = results.into_iter().collect::<Check<Vec<Module>>>()?;
        let ids: HashSet<u64> = modules.iter().map(Module::id).collect();
        ensure!(
            ids.len() == 1,
            "round {round}: 8 threads loading one program at once got modules {ids:?} \
             (P2: one module per program and device)"
        );
        let id = modules[0].id();
        ensure!(
            tracker.setups_of(id) == 1,
            "round {round}: setup ran {} times for 8 concurrent loads (P3: once)",
            tracker.setups_of(id)
        );
        drop((modules, program));
        ensure!(
            tracker.teardowns_of(id) == 1,
            "round {round}: teardown ran {} times after every handle and the program were \
             dropped",
            tracker.teardowns_of(id)
        );
    }
    // Different programs loaded at once are different modules.
    let programs: Vec<Program> = (0..4)
        .map(|_| tracked_program(&fixtures.image, &tracker))
        .collect();
    let barrier = Barrier::new(programs.len());
    let results: Vec<Check<Module>> = std::thread::scope(|s| {
        let handles: Vec<_> = programs
            .iter()
            .map(|p| {
                let (barrier, dev) = (&barrier, &dev);
                s.spawn(move || {
                    barrier.wait();
                    ok("Program::load", p.load(dev))
                })
            })
            .collect();
        join_all(handles)
    });
    let modules = results.into_iter().collect::<Check<Vec<Module>>>()?;
    let ids: HashSet<u64> = modules.iter().map(Module::id).collect();
    ensure!(
        ids.len() == programs.len(),
        "{} different programs loaded at once gave only {} distinct modules",
        programs.len(),
        ids.len()
    );
    drop(modules);
    last(rt)?;
    tracker.finish()
}
