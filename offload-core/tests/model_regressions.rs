//! Regression tests, on the real handles and the reference backend, for the deadlocks the
//! lifecycle model check (`src/model/`) found: user code that the last shutdown runs
//! or waits for (an `on_teardown` callback, the `on_setup` of a load in flight) calling
//! `init`, `clone` or dropping a runtime hung, because the teardown ran under the
//! lifecycle lock, and a setup callback that gave back the last reference made the
//! teardown wait for its own load. Each body runs under a watchdog, so a regression fails instead of
//! hanging the suite.

use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use offload_core::reference::{Offload, fixture_image};
use offload_core::{Error, Program};

/// Runs `body` on its own thread and fails if it has not finished within a minute.
fn within_a_minute(what: &str, body: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        body();
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => worker.join().expect("the test body panicked"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            worker.join().expect("the test body panicked");
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after 60 s (deadlock)")
        }
    }
}

// Serialised (`serial()`): each test wants to be the only runtime in the process.
use offload_testing::serial;

#[test]
fn a_teardown_callback_may_init_and_drop_a_runtime_during_the_last_shutdown() {
    let _serial = serial();
    within_a_minute("init from on_teardown", || {
        let rt = Offload::init().unwrap();
        let first = rt.generation();
        let dev = rt.devices().unwrap().remove(0);
        let seen = Arc::new(Mutex::new(None));
        let seen_in_callback = seen.clone();
        let _module = Program::new(fixture_image())
            .on_teardown(move |_| {
                // The runtime this callback belongs to is going away: it gets a fresh one.
                let own = Offload::init()?;
                *seen_in_callback.lock().unwrap() = Some(own.generation());
                let other = own.clone();
                drop(other);
                own.shutdown()?;
                Ok(())
            })
            .load(&dev)
            .unwrap();
        let down = rt.shutdown().expect("shutdown");
        assert!(down.was_last());
        let inner = seen.lock().unwrap().expect("the teardown callback ran");
        assert!(inner > first, "the callback got a fresh generation");
        assert!(matches!(dev.info(), Err(Error::ShutDown { .. })));
        // Nothing is left live.
        let again = Offload::init().unwrap();
        assert!(again.generation() > inner);
        assert!(again.shutdown().unwrap().was_last());
    });
}

#[test]
fn a_setup_callback_may_init_while_another_thread_shuts_down() {
    let _serial = serial();
    within_a_minute("init from on_setup during a shutdown", || {
        let rt = Offload::init().unwrap();
        let dev = rt.devices().unwrap().remove(0);
        let in_setup = Arc::new(Barrier::new(2));
        let setup_barrier = in_setup.clone();
        let loader = std::thread::spawn(move || {
            Program::new(fixture_image())
                .on_setup(move |_| {
                    setup_barrier.wait();
                    // Let the shutdown begin and wait for this load.
                    std::thread::sleep(Duration::from_millis(100));
                    let own = Offload::init()?;
                    drop(own);
                    Ok(())
                })
                .load(&dev)
                .map(drop)
        });
        in_setup.wait();
        let down = rt.shutdown().expect("shutdown");
        assert!(down.was_last());
        let loaded = loader.join().expect("loader");
        assert!(
            loaded.is_ok() || matches!(loaded, Err(Error::ShutDown { .. })),
            "{loaded:?}"
        );
        let again = Offload::init().unwrap();
        assert!(again.shutdown().unwrap().was_last());
    });
}

#[test]
fn a_setup_callback_may_give_back_the_last_reference() {
    let _serial = serial();
    within_a_minute("the last reference given back by on_setup", || {
        let rt = Offload::init().unwrap();
        let dev = rt.devices().unwrap().remove(0);
        let held = Arc::new(Mutex::new(Some(rt)));
        let in_setup = held.clone();
        let loaded = Program::new(fixture_image())
            .on_setup(move |_| {
                drop(in_setup.lock().unwrap().take());
                Ok(())
            })
            .load(&dev);
        // L6: the teardown runs on a helper thread once the setup returned (it waits for the
        // load), so the load completes or, if the teardown came first, is refused: never a
        // hang.
        assert!(
            loaded.is_ok() || matches!(loaded, Err(Error::ShutDown { .. })),
            "{loaded:?}"
        );
        drop(loaded);
        assert!(held.lock().unwrap().is_none());
        let again = Offload::init().unwrap();
        assert!(again.shutdown().unwrap().was_last());
    });
}
