//! Setup and teardown accounting: every `on_setup`/`on_teardown` run is recorded, so
//! the suite can check each module set up is torn down exactly once, after its setup,
//! while it is still loaded (P3).

use super::*;

/// A global no fixture defines: looking it up tells whether a module is loaded
/// (`SymbolNotFound`) without cloning the module handle.
pub(super) const PROBE: &str = "__offload_conformance_probe__";

/// What one callback saw.
#[derive(Clone, Copy, Debug)]
pub(super) struct CallbackRun {
    /// The module was loaded (the probe answered `SymbolNotFound`); otherwise the error.
    loaded: std::result::Result<(), &'static str>,
    /// Setups of the module completed before this callback began.
    setups_before: usize,
}

/// The setup and the teardown callbacks that ran for one module.
pub(super) type Runs = (Vec<CallbackRun>, Vec<CallbackRun>);

/// Records every setup and teardown callback per module id and what it saw.
#[derive(Default)]
pub(super) struct Tracker {
    runs: Mutex<HashMap<u64, Runs>>,
}

impl Tracker {
    pub(super) fn record(&self, module: &Module, teardown: bool) {
        let loaded = match module.global(PROBE) {
            Ok(_) | Err(Error::SymbolNotFound { .. }) => Ok(()),
            Err(Error::ShutDown { .. }) => Err("Error::ShutDown"),
            Err(Error::InvalidArgument { .. }) => Err("Error::InvalidArgument"),
            Err(_) => Err("another error"),
        };
        let mut runs = lock(&self.runs);
        let (setups, teardowns) = runs.entry(module.id()).or_default();
        let run = CallbackRun {
            loaded,
            setups_before: setups.len(),
        };
        if teardown {
            teardowns.push(run)
        } else {
            setups.push(run)
        }
    }

    pub(super) fn teardowns_of(&self, id: u64) -> usize {
        lock(&self.runs).get(&id).map_or(0, |r| r.1.len())
    }

    pub(super) fn setups_of(&self, id: u64) -> usize {
        lock(&self.runs).get(&id).map_or(0, |r| r.0.len())
    }

    /// Once everything is shut down: every module set up was torn down exactly once, setup
    /// came first, and both saw the module loaded (P3) — also when threads use handles of
    /// a reference they gave back while another thread ends the generation.
    pub(super) fn finish(&self) -> Check {
        for (id, (setups, teardowns)) in lock(&self.runs).iter() {
            ensure!(
                setups.len() == 1 && teardowns.len() == 1,
                "P3: module {id} was set up {} times and torn down {} times by the end \
                 (expected exactly once each, everything having been shut down)",
                setups.len(),
                teardowns.len()
            );
            let (setup, teardown) = (setups[0], teardowns[0]);
            if let Err(e) = setup.loaded {
                return Err(format!(
                    "P3: module {id}: its setup callback ran while it was not loaded ({e})"
                ));
            }
            ensure!(
                teardown.setups_before > 0,
                "P3: module {id}: its teardown callback ran before its setup"
            );
            if let Err(e) = teardown.loaded {
                return Err(format!(
                    "P3: module {id}: its teardown callback ran while it was not loaded ({e})"
                ));
            }
        }
        Ok(())
    }
}

/// A program whose callbacks report to `tracker`.
pub(super) fn tracked_program(image: &[u8], tracker: &Arc<Tracker>) -> Program {
    let (s, t) = (tracker.clone(), tracker.clone());
    Program::new(image)
        .on_setup(move |m| {
            s.record(m, false);
            Ok(())
        })
        .on_teardown(move |m| {
            t.record(m, true);
            Ok(())
        })
}
