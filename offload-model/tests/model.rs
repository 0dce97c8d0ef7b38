//! Runs each scenario of offload-core's model check (its `model` module, compiled with
//! `--cfg offload_model`): `bash scripts/model.sh`, which CI runs as a stage of its own.

#[cfg(offload_model)]
mod scenarios {
    use offload_core::model::{SCENARIOS, Seed, check, check_catches};

    /// Every scenario offload-core has is run by a test below.
    #[test]
    fn every_scenario_has_a_test() {
        let here = [
            "lazy_open_vs_exit_hook",
            "init_init_init",
            "init_vs_shutdown",
            "clone_use_vs_shutdown",
            "exit_hook_vs_clone_and_shutdown",
            "load_vs_shutdown",
            "loads_share_one_slot",
            "loads_share_one_slot_vs_shutdown",
            "callbacks_reenter_during_shutdown",
            "setup_gives_back_the_last_reference",
            "generations",
            "last_reference_on_an_executor",
            "shutdown_vs_shutdown",
            "copies_both_ways_vs_with_mapped",
            "buffer_calls_vs_shutdown",
        ];
        let theirs: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        assert_eq!(theirs, here);
    }

    #[test]
    fn lazy_open_races_the_exit_hook() {
        check("lazy_open_vs_exit_hook");
    }

    #[test]
    fn init_races_init() {
        check("init_init_init");
    }

    #[test]
    fn init_races_shutdown() {
        check("init_vs_shutdown");
    }

    #[test]
    fn clone_and_use_race_shutdown() {
        check("clone_use_vs_shutdown");
    }

    #[test]
    fn exit_hook_races_clone_and_shutdown() {
        check("exit_hook_vs_clone_and_shutdown");
    }

    #[test]
    fn load_races_shutdown() {
        check("load_vs_shutdown");
    }

    #[test]
    fn loads_of_one_program_share_its_slot() {
        check("loads_share_one_slot");
    }

    #[test]
    fn loads_of_one_program_share_its_slot_during_shutdown() {
        check("loads_share_one_slot_vs_shutdown");
    }

    #[test]
    fn callbacks_reenter_the_lifecycle_during_shutdown() {
        check("callbacks_reenter_during_shutdown");
    }

    #[test]
    fn setup_gives_back_the_last_reference() {
        check("setup_gives_back_the_last_reference");
    }

    #[test]
    fn generations() {
        check("generations");
    }

    #[test]
    fn last_reference_on_an_executor() {
        check("last_reference_on_an_executor");
    }

    #[test]
    fn shutdown_races_shutdown() {
        check("shutdown_vs_shutdown");
    }

    /// L7 on the real buffer lock: opposite copies and `with_mapped` never deadlock.
    #[test]
    fn copies_both_ways_race_with_mapped() {
        check("copies_both_ways_vs_with_mapped");
    }

    #[test]
    fn buffer_calls_race_shutdown() {
        check("buffer_calls_vs_shutdown");
    }

    /// The check can fail: with `copy_from` taking its locks in argument order (a planted
    /// bug), some schedule deadlocks and the check says so.
    #[test]
    fn a_planted_lock_order_bug_is_caught() {
        let caught = check_catches(
            "copies_both_ways_vs_with_mapped",
            Seed::CopyLocksInArgumentOrder,
        )
        .expect("the model check missed the planted lock-order bug");
        assert!(caught.contains("deadlock"), "{caught}");
    }
}

/// Without `--cfg offload_model` offload-core runs on std and has no scenarios: say where
/// the model check runs instead (under `CI=true` it must have run as its own stage).
#[cfg(not(offload_model))]
#[test]
fn model_check_runs_in_its_own_build() {
    eprintln!(
        "skipped here: the model check needs offload-core built with --cfg offload_model; \
         run `bash scripts/model.sh` (CI runs it as the `model` stage)"
    );
}
