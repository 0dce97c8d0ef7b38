//! The model check of offload-core's lifecycle, as a crate of its own so that building it
//! with `--cfg offload_model` (`scripts/model.sh`) compiles offload-core and nothing else
//! that way. The scenarios live in offload-core (`src/model/`), beside the code they run;
//! `tests/model.rs` here runs each one. Without the cfg there is nothing to run, and the
//! test says so.
