//! The races of the model check: each spawns 2–3 model threads over the real lifecycle and
//! handles, and asserts what must hold whichever way the race goes.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use super::backend::{LIVE_PROGRAMS, LOADS, OPENS};
use super::{DEINITS, Rt, Scenario, seen};
use crate::error::{Error, Result};
use crate::hal::BackendKind;
use crate::handles::{Device, Module, Program};
use crate::runtime::generation::{Generation, Kind, Resource};
use crate::runtime::lifecycle::shutdown_at_exit;
use crate::runtime::reentry;
use crate::sync::{Arc, Condvar, Mutex, lock, wait};

pub(super) const ALL: &[Scenario] = &[
    Scenario {
        name: "lazy_open_vs_exit_hook",
        run: lazy_open_vs_exit_hook,
        must_see: &[
            "lazy: opened once by the first uses",
            "lazy: the exit hook came first",
            "use: ok",
        ],
    },
    Scenario {
        name: "init_init_init",
        run: init_init_init,
        must_see: &[
            "init: one generation shared by all",
            "init: a later generation after a last shutdown",
        ],
    },
    Scenario {
        name: "init_vs_shutdown",
        run: init_vs_shutdown,
        must_see: &[
            "init: joined the live generation",
            "init: fresh generation after the teardown",
        ],
    },
    Scenario {
        name: "clone_use_vs_shutdown",
        run: clone_use_vs_shutdown,
        must_see: &["use: ok", "use: ShutDown"],
    },
    Scenario {
        name: "exit_hook_vs_clone_and_shutdown",
        run: exit_hook_vs_clone_and_shutdown,
        must_see: &[
            "exit hook: found a live runtime",
            "use: ok",
            "use: ShutDown",
        ],
    },
    Scenario {
        name: "load_vs_shutdown",
        run: load_vs_shutdown,
        must_see: &["load: loaded", "load: ShutDown", "unload: done"],
    },
    Scenario {
        name: "loads_share_one_slot",
        run: loads_share_one_slot,
        must_see: &["load slot: another load began during setup"],
    },
    Scenario {
        name: "loads_share_one_slot_vs_shutdown",
        run: loads_share_one_slot_vs_shutdown,
        must_see: &[
            "load: loaded",
            "load: ShutDown",
            "load slot: another load began during setup",
        ],
    },
    Scenario {
        name: "callbacks_reenter_during_shutdown",
        run: callbacks_reenter_during_shutdown,
        must_see: &[
            "setup callback: shared its live runtime",
            "setup callback: fresh runtime, its own shutting down",
            "teardown callback: fresh runtime",
        ],
    },
    Scenario {
        name: "setup_gives_back_the_last_reference",
        run: setup_gives_back_the_last_reference,
        must_see: &[
            "setup: ended the runtime inside its load",
            "use: ok",
            "use: ShutDown",
        ],
    },
    Scenario {
        name: "generations",
        run: generations,
        must_see: &[
            "generations: old device refused in a new generation",
            "use: ok",
            "use: ShutDown",
        ],
    },
    Scenario {
        name: "last_reference_on_an_executor",
        run: last_reference_on_an_executor,
        must_see: &[
            "executor: init shared the live runtime",
            "executor: init got a fresh runtime",
            "teardown callback: fresh runtime",
        ],
    },
    Scenario {
        name: "shutdown_vs_shutdown",
        run: shutdown_vs_shutdown,
        must_see: &[],
    },
    Scenario {
        name: "copies_both_ways_vs_with_mapped",
        run: copies_both_ways_vs_with_mapped,
        must_see: &["copy: ok", "with_mapped: a call inside refused"],
    },
    Scenario {
        name: "buffer_calls_vs_shutdown",
        run: buffer_calls_vs_shutdown,
        must_see: &["copy: ok", "copy: ShutDown", "free: ok"],
    },
];

/// The image the model backend loads (it looks at none).
const IMAGE: &[u8] = b"model image";

fn spawn(f: impl FnOnce() + Send + 'static) -> shuttle::thread::JoinHandle<()> {
    shuttle::thread::spawn(f)
}

fn join(threads: Vec<shuttle::thread::JoinHandle<()>>) {
    for t in threads {
        t.join().expect("a model thread panicked");
    }
}

/// Lets the other model threads run: under PCT each yield lowers this thread's priority.
fn yield_times(n: usize) {
    for _ in 0..n {
        shuttle::thread::yield_now();
    }
}

fn is_shut_down<T>(r: &Result<T>) -> bool {
    matches!(r, Err(Error::ShutDown { .. }))
}

/// A use of a device: succeeds while its generation runs, `ShutDown` after (L3), never
/// anything else.
fn use_device(device: &Device) -> bool {
    match device.info() {
        Ok(_) => {
            seen("use: ok");
            true
        }
        Err(Error::ShutDown { .. }) => {
            seen("use: ShutDown");
            false
        }
        Err(e) => panic!("use of a device answered {e:?}, not Ok or ShutDown"),
    }
}

/// What a module callback may do: take a runtime reference of its own, use it, and give
/// it back. A teardown callback run by a shutdown must get a fresh runtime, never the one
/// being torn down.
fn reenter(callback: &'static str, generation: &Generation) {
    let closing = generation.is_closing();
    let rt = Rt::init().expect("init from a callback");
    let same = rt.generation() == generation.id;
    seen(match (callback, same) {
        ("setup", true) => "setup callback: shared its live runtime",
        ("setup", false) => "setup callback: fresh runtime, its own shutting down",
        (_, true) if closing => panic!("a teardown callback got the runtime being torn down"),
        (_, true) => "teardown callback: shared its live runtime (unloaded before shutdown)",
        (_, false) => "teardown callback: fresh runtime",
    });
    let _ = rt.devices().map(|d| use_device(&d[0]));
    let other = rt.clone();
    drop(other);
    drop(rt);
}

/// A program whose setup runs `setup`, and whose setup and teardown callbacks call into the
/// lifecycle ([`reenter`]) when `reenters`.
fn program(reenters: bool, setup: impl FnOnce() + Send + 'static) -> Program {
    let setup = Mutex::new(Some(setup));
    let program = Program::new(IMAGE).on_setup(move |module| {
        // Setup callbacks run with the load still counted in flight.
        shuttle::thread::yield_now();
        if reenters {
            reenter("setup", module.generation());
        }
        if let Some(setup) = lock(&setup).take() {
            setup();
        }
        Ok(())
    });
    if reenters {
        program.on_teardown(|module| {
            reenter("teardown", module.generation());
            Ok(())
        })
    } else {
        program
    }
}

fn load(device: &Device) -> Result<Module> {
    program(false, || ()).load(device)
}

/// L1: three first `init`s race; one opens the platforms, the others wait for it and share
/// that generation or start a later one; each uses a device, then shuts down. Thread `i`
/// yields `i` times first: PCT lowers a yielding thread's priority, so some schedules run
/// a whole init-use-shutdown before the next `init` (the random scheduler, which switches
/// at every one of the dozens of steps, almost never does).
fn init_init_init() {
    let threads = (0..3)
        .map(|i| {
            spawn(move || {
                yield_times(i);
                let rt = Rt::init().expect("init");
                let device = rt.devices().expect("devices").remove(0);
                assert!(use_device(&device), "a device of a held runtime works");
                rt.shutdown().expect("shutdown");
                // Ok while another thread still holds the generation, `ShutDown` after.
                let _ = use_device(&device);
            })
        })
        .collect();
    join(threads);
    seen(if OPENS.load(SeqCst) == 1 {
        "init: one generation shared by all"
    } else {
        "init: a later generation after a last shutdown"
    });
}

/// L1/L2: a last shutdown races an init (which must either share the generation before it
/// ends or start a fresh one after) and an implicit shutdown by drop.
fn init_vs_shutdown() {
    let rt = Rt::init().expect("init");
    let dropped = rt.clone();
    let first = rt.generation();
    let a = spawn(move || {
        rt.shutdown().expect("shutdown");
    });
    let b = spawn(move || {
        let rt = Rt::init().expect("init while another shuts down");
        assert!(rt.generation() >= first);
        seen(if rt.generation() == first {
            "init: joined the live generation"
        } else {
            "init: fresh generation after the teardown"
        });
        let device = rt.devices().expect("devices").remove(0);
        assert!(use_device(&device), "the runtime init returned is live");
        drop(rt);
        let _ = use_device(&device);
    });
    let c = spawn(move || drop(dropped));
    join(vec![a, b, c]);
}

/// L3: handles used and the runtime cloned while the last reference shuts down; a use is
/// `Ok` before and `ShutDown` after, never a panic or a use of a deinitialised driver.
fn clone_use_vs_shutdown() {
    let rt = Rt::init().expect("init");
    let other = rt.clone();
    let device = rt.devices().expect("devices").remove(0);
    let d2 = device.clone();
    let a = spawn(move || {
        let down = rt.shutdown().expect("shutdown");
        let _ = down.was_last();
    });
    let b = spawn(move || {
        let third = other.clone();
        drop(other);
        let mut gone = false;
        for _ in 0..2 {
            let works = use_device(&d2);
            assert!(!(gone && works), "a device worked again after ShutDown");
            gone |= !works;
        }
        let _ = third.devices().map(|d| d.len());
        third.shutdown().expect("shutdown");
    });
    let c = spawn(move || {
        let works = use_device(&device);
        let after = use_device(&device);
        assert!(works || !after, "ShutDown, then Ok");
    });
    join(vec![a, b, c]);
}

/// L1 with the exit hook: it shuts the generation down while references are still held,
/// cloned and given back.
fn exit_hook_vs_clone_and_shutdown() {
    let rt = Rt::init().expect("init");
    let other = rt.clone();
    let device = rt.devices().expect("devices").remove(0);
    let a = spawn(move || {
        let live = if OPENS.load(SeqCst) > DEINITS.load(SeqCst) {
            "exit hook: found a live runtime"
        } else {
            "exit hook: nothing live"
        };
        shutdown_at_exit();
        seen(live);
    });
    let b = spawn(move || {
        let third = other.clone();
        let _ = use_device(&device);
        drop(third);
        other.shutdown().expect("shutdown");
    });
    let c = spawn(move || {
        let _ = rt.devices();
        drop(rt);
    });
    join(vec![a, b, c]);
}

/// L4/P2/P3: loads race the last shutdown: a load either completes before teardown (which
/// then unloads its module, after the load's setup and before the platform's deinit) or
/// gets `ShutDown`; an explicit unload races the teardown's.
fn load_vs_shutdown() {
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let d2 = device.clone();
    let a = spawn(move || {
        rt.shutdown().expect("shutdown");
    });
    let b = spawn(move || match load(&device) {
        Ok(module) => {
            seen("load: loaded");
            match module.unload() {
                Ok(()) => seen("unload: done"),
                Err(Error::ShutDown { .. }) => seen("unload: left to the teardown"),
                Err(e) => panic!("unload answered {e:?}"),
            }
        }
        Err(e) => {
            assert!(matches!(e, Error::ShutDown { .. }), "load answered {e:?}");
            seen("load: ShutDown");
        }
    });
    let c = spawn(move || {
        // A module kept to the end of the thread: its drop or the teardown unloads it.
        let kept = load(&d2);
        assert!(
            kept.is_ok() || is_shut_down(&kept),
            "load answered {:?}",
            kept.err()
        );
    });
    join(vec![a, b, c]);
}

/// A program whose setup counts its runs and yields three times before it finishes, so
/// other loads can arrive while it is in progress.
struct Counted {
    program: Program,
    /// Loads begun.
    started: Arc<AtomicUsize>,
    /// Setups run.
    setups: Arc<AtomicUsize>,
    /// Set when the setup finished.
    ready: Arc<AtomicBool>,
}

fn counted() -> Counted {
    let started = Arc::new(AtomicUsize::new(0));
    let setups = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(AtomicBool::new(false));
    let program = Program::new(IMAGE).on_setup({
        let (started, setups, ready) = (started.clone(), setups.clone(), ready.clone());
        move |_| {
            setups.fetch_add(1, SeqCst);
            yield_times(3);
            if started.load(SeqCst) > 1 {
                seen("load slot: another load began during setup");
            }
            ready.store(true, SeqCst);
            Ok(())
        }
    });
    Counted {
        program,
        started,
        setups,
        ready,
    }
}

/// One load of a [`Counted`] program: the module it returns has finished its setup (P3).
fn load_counted(c: &Counted, device: &Device) -> Result<Module> {
    c.started.fetch_add(1, SeqCst);
    let loaded = c.program.load(device);
    if let Ok(module) = &loaded {
        assert!(
            c.ready.load(SeqCst),
            "a load returned module {} before its setup finished (P3)",
            module.id()
        );
    }
    loaded
}

/// P2: three threads load one program on one device at once. It is loaded once, its setup
/// runs once, and every load gets that one module, after its setup (P3).
fn loads_share_one_slot() {
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let c = Arc::new(counted());
    let ids = Arc::new(Mutex::new(Vec::new()));
    let threads = (0..3)
        .map(|_| {
            let (c, ids, device) = (c.clone(), ids.clone(), device.clone());
            spawn(move || {
                let module = load_counted(&c, &device).expect("load");
                lock(&ids).push(module.id());
            })
        })
        .collect();
    join(threads);
    let ids = lock(&ids).clone();
    assert!(
        ids.iter().all(|&id| id == ids[0]),
        "one program on one device became several modules: {ids:?} (P2)"
    );
    assert_eq!(c.setups.load(SeqCst), 1, "setup ran more than once (P2)");
    assert_eq!(
        LOADS.load(SeqCst),
        1,
        "the backend loaded the program twice (P2)"
    );
    drop(rt);
}

/// P2 against the last shutdown: two loads of one program on one device race it. Each
/// gets the one module (after its setup) or `ShutDown`; the backend loads it at most once
/// and the teardown unloads it.
fn loads_share_one_slot_vs_shutdown() {
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let c = Arc::new(counted());
    let loaders = (0..2)
        .map(|_| {
            let (c, device) = (c.clone(), device.clone());
            spawn(move || match load_counted(&c, &device) {
                Ok(_) => seen("load: loaded"),
                Err(e) => {
                    assert!(matches!(e, Error::ShutDown { .. }), "load answered {e:?}");
                    seen("load: ShutDown");
                }
            })
        })
        .collect();
    let down = spawn(move || {
        rt.shutdown().expect("shutdown");
    });
    join(loaders);
    join(vec![down]);
    assert!(c.setups.load(SeqCst) <= 1, "setup ran more than once (P2)");
    assert!(
        LOADS.load(SeqCst) <= 1,
        "the backend loaded the program twice (P2)"
    );
    assert_eq!(
        LIVE_PROGRAMS.load(SeqCst),
        0,
        "the teardown left a module loaded"
    );
}

/// Callbacks that call into the lifecycle while the last reference shuts down: a setup
/// (of a load in flight, which the shutdown waits for) and a teardown callback (which the
/// shutdown runs) each take and give back a runtime reference of their own. Neither may
/// deadlock; the runtime they get is live.
fn callbacks_reenter_during_shutdown() {
    let rt = Rt::init().expect("init");
    let other = rt.clone();
    let device = rt.devices().expect("devices").remove(0);
    // Kept past the shutdown (the program keeps its module): the teardown runs its
    // teardown callback.
    let reentering = program(true, || ());
    let a = spawn(move || {
        let loaded = reentering.load(&device);
        assert!(
            loaded.is_ok() || is_shut_down(&loaded),
            "load answered {:?}",
            loaded.err()
        );
        // The module goes with the last handle, the program's: unloaded here (its teardown
        // callback re-entering a live or a fresh runtime) or by the shutdown's teardown.
        drop(loaded);
        drop(reentering);
    });
    // The shutdown side yields first, so PCT also runs a whole load and setup before it
    // (see `init_init_init`).
    let b = spawn(move || {
        yield_times(3);
        rt.shutdown().expect("shutdown");
    });
    let c = spawn(move || {
        yield_times(3);
        drop(other);
    });
    join(vec![a, b, c]);
}

/// A setup callback gives back the last reference of its own runtime while another thread
/// uses a device: the teardown runs inside the load, so it must not wait for that load.
fn setup_gives_back_the_last_reference() {
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let d2 = device.clone();
    let held = Arc::new(Mutex::new(Some(rt)));
    let a = spawn(move || {
        let loaded = program(false, move || drop(lock(&held).take())).load(&device);
        if let Ok(module) = loaded {
            let _ = module.unload();
        }
        seen(if device.generation().is_live() {
            "setup: runtime still live"
        } else {
            "setup: ended the runtime inside its load"
        });
    });
    let b = spawn(move || {
        let works = use_device(&d2);
        // Yields let PCT run the load, its setup and the teardown on the helper between
        // the two uses (see `init_init_init`).
        yield_times(3);
        let after = use_device(&d2);
        assert!(works || !after, "ShutDown, then Ok");
    });
    join(vec![a, b]);
}

/// L2/L3: generations. Devices of generation N are refused (`ShutDown`) in generation
/// N+1, while N+1 runs and its own devices work.
fn generations() {
    let rt = Rt::init().expect("init");
    let old = rt.devices().expect("devices").remove(0);
    let first = rt.generation();
    let a = spawn(move || {
        let last = rt.shutdown().expect("shutdown").was_last();
        let rt = Rt::init().expect("re-init");
        if last {
            assert!(
                rt.generation() > first,
                "a new generation after the last shutdown"
            );
        }
        assert!(rt.generation() >= first);
        let new = rt.devices().expect("devices").remove(0);
        assert!(use_device(&new));
        rt.shutdown().expect("shutdown");
    });
    let b = spawn(move || {
        let rt = Rt::init().expect("init");
        let works = use_device(&old);
        if rt.generation() != first {
            // L6: a new generation may start while the old one still drains (its teardown's
            // first phase runs user code that may itself need `init`); the old devices then
            // work until it releases them, and never reach a deinitialised driver (the
            // model backend panics if they do).
            seen(if works {
                "generations: old device used while its generation drained"
            } else {
                "generations: old device refused in a new generation"
            });
        }
        let new = rt.devices().expect("devices").remove(0);
        assert!(use_device(&new));
        drop(rt);
        let _ = load(&old).map(Module::unload);
    });
    join(vec![a, b]);
}

/// A queue as teardown sees it: its `prepare` drains it, which waits until the host
/// function its executor runs has returned (what the real queue's sync does).
struct ModelQueue {
    returned: Arc<(Mutex<bool>, Condvar)>,
}

impl Resource for ModelQueue {
    fn prepare(self: Arc<Self>, _generation: &Arc<Generation>) -> Result<()> {
        let (returned, told) = &*self.returned;
        let mut done = lock(returned);
        while !*done {
            done = wait(told, done);
        }
        Ok(())
    }

    fn release(self: Arc<Self>) -> Result<()> {
        Ok(())
    }
}

/// L6: a host function gives back the last reference on the executor thread its queue's
/// drain waits for, while another thread inits and uses a device. The teardown must not
/// run on the executor (it would wait for itself): it runs on a helper thread once the
/// function returned, and its module's teardown callback calls `init` there (a fresh
/// runtime: the one being torn down is not handed out).
fn last_reference_on_an_executor() {
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let generation = device.generation().id;
    // Kept loaded (the program keeps its module): the teardown runs its callback, which
    // calls `init`.
    let reentering = program(true, || ());
    let _module = reentering.load(&device).expect("load");
    let returned = Arc::new((Mutex::new(false), Condvar::new()));
    device
        .generation()
        .with_live(|live| {
            live.register(Kind::Queue, |_| {
                Arc::new(ModelQueue {
                    returned: returned.clone(),
                })
            })
        })
        .expect("queue");
    let executor = spawn(move || {
        // What the core's host-function wrapper does around the user's function.
        let user = reentry::enter(Some((generation, 1)));
        drop(rt);
        drop(user);
        let (done, told) = &*returned;
        *lock(done) = true;
        told.notify_all();
    });
    let other = spawn(move || {
        let rt = Rt::init().expect("init beside the teardown");
        seen(if rt.generation() == generation {
            "executor: init shared the live runtime"
        } else {
            "executor: init got a fresh runtime"
        });
        let d = rt.devices().expect("devices").remove(0);
        assert!(use_device(&d));
        drop(rt);
    });
    join(vec![executor, other]);
    // The helper's teardown ends on its own (the harness waits for it, as the exit hook
    // would).
    drop(reentering);
}

/// L1: three references shut down at once: exactly one is the last, and it deinitialises.
fn shutdown_vs_shutdown() {
    let rt = Rt::init().expect("init");
    let counted = Arc::new(AtomicUsize::new(0));
    let refs = [rt.clone(), rt.clone(), rt];
    let threads = refs
        .into_iter()
        .map(|rt| {
            let counted = counted.clone();
            spawn(move || {
                if rt.shutdown().expect("shutdown").was_last() {
                    counted.fetch_add(1, SeqCst);
                }
            })
        })
        .collect();
    join(threads);
    assert_eq!(counted.load(SeqCst), 1, "exactly one shutdown is the last");
}

/// Lazy platforms: two first uses (`device(kind)`, `devices()`) race each other and the
/// exit hook (which tears down whoever holds references). The platform opens at most once
/// in the generation, never after teardown took its state (the backend would count an open
/// that is never deinitialised, and the end-of-execution check fails), and each use gets a
/// working device or `ShutDown`.
fn lazy_open_vs_exit_hook() {
    let rt = Rt::init().expect("init");
    assert_eq!(
        OPENS.load(SeqCst),
        0,
        "init opened a platform nobody asked for"
    );
    let users: Vec<_> = (0..2)
        .map(|i| {
            let rt = rt.clone();
            spawn(move || {
                let device = if i == 0 {
                    rt.device(BackendKind::Reference)
                } else {
                    rt.devices().map(|mut all| all.remove(0))
                };
                drop(rt);
                match device {
                    Ok(device) => {
                        let _ = use_device(&device);
                    }
                    Err(e) => assert!(
                        matches!(e, Error::ShutDown { .. }),
                        "a first use answered {e:?}, not a device or ShutDown"
                    ),
                }
            })
        })
        .collect();
    drop(rt);
    let hook = spawn(shutdown_at_exit);
    join(users);
    join(vec![hook]);
    let opens = OPENS.load(SeqCst);
    assert!(
        opens <= 1,
        "one generation opened its platform {opens} times"
    );
    seen(if opens == 1 {
        "lazy: opened once by the first uses"
    } else {
        "lazy: the exit hook came first"
    });
}

/// L7 on the real buffer lock (`RwLock`, shuttle's here): two threads copy between two
/// buffers in opposite directions while a third runs `with_mapped` on one and calls the
/// other from inside (refused at once); a fourth frees a third buffer. No schedule may
/// deadlock (shuttle fails an execution whose threads all block).
fn copies_both_ways_vs_with_mapped() {
    use crate::hal::MemKind;
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let a = Arc::new(device.alloc(8, MemKind::Host).expect("alloc"));
    let b = Arc::new(device.alloc(8, MemKind::Host).expect("alloc"));
    let c = device.alloc(8, MemKind::Host).expect("alloc");
    let (a1, b1, a2, b2, a3, b3) = (a.clone(), b.clone(), a.clone(), b.clone(), a, b);
    let t1 = spawn(move || {
        b1.copy_from(0, &a1, 0, 8).expect("copy a into b");
        seen("copy: ok");
    });
    let t2 = spawn(move || {
        a2.copy_from(0, &b2, 0, 8).expect("copy b into a");
        seen("copy: ok");
    });
    let t3 = spawn(move || {
        let inside = b3
            .with_mapped(|bytes| a3.read(0, &mut bytes[..4]))
            .expect("with_mapped");
        match inside {
            Err(Error::InvalidArgument { .. }) => seen("with_mapped: a call inside refused"),
            other => panic!("a call inside with_mapped answered {other:?}"),
        }
    });
    let t4 = spawn(move || c.free().expect("free"));
    join(vec![t1, t2, t3, t4]);
    rt.shutdown().expect("shutdown");
}

/// L3/L4 on the real buffer lock: copies and a free race the last shutdown; each answers
/// done or `ShutDown`, and the shutdown frees every buffer after the calls in flight
/// (the backend panics on a call after its deinit; the end-of-execution check counts
/// live buffers).
fn buffer_calls_vs_shutdown() {
    use crate::hal::MemKind;
    let rt = Rt::init().expect("init");
    let device = rt.devices().expect("devices").remove(0);
    let a = device.alloc(8, MemKind::Host).expect("alloc");
    let b = device.alloc(8, MemKind::Host).expect("alloc");
    let c = device.alloc(8, MemKind::Host).expect("alloc");
    let t1 = spawn(move || {
        for _ in 0..2 {
            match b.copy_from(0, &a, 0, 8) {
                Ok(()) => seen("copy: ok"),
                Err(Error::ShutDown { .. }) => seen("copy: ShutDown"),
                Err(e) => panic!("a copy beside a shutdown answered {e:?}"),
            }
        }
    });
    let t2 = spawn(move || match c.free() {
        Ok(()) => seen("free: ok"),
        Err(Error::ShutDown { .. }) => seen("free: ShutDown"),
        Err(e) => panic!("a free beside a shutdown answered {e:?}"),
    });
    let t3 = spawn(move || {
        rt.shutdown().expect("shutdown");
    });
    join(vec![t1, t2, t3]);
}
