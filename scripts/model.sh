#!/usr/bin/env bash
# The model check: offload-core built with `--cfg offload_model` (its locks, atomics and
# threads become shuttle's, src/sync.rs) and its scenarios (src/model/) run by the
# offload-model crate's tests. A target directory of its own, so the normal build is not
# rebuilt. OFFLOAD_MODEL_ITERATIONS (default 500) sets executions per scheduler.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/model"
RUSTFLAGS="${RUSTFLAGS:-} --cfg offload_model" cargo test -p offload-model --test model -- "$@"
