#!/usr/bin/env bash
# The soak runs, in release: long init/work/shutdown and IPC cycles with RSS and
# fd checks, and the conformance state machine with 60,000 cases on the host backend
# (each case 1 to 4 threads of 0 to 32 random operations: about two million in all).
# OFFLOAD_SOAK=N multiplies the cycle counts.
set -euo pipefail
cd "$(dirname "$0")/.."
export OFFLOAD_SOAK="${OFFLOAD_SOAK:-1}"
# With Vulkan: the 64-thread soak runs on the host device and on lavapipe.
cargo test --release --features vulkan --test soak -- --nocapture --test-threads=1
OFFLOAD_CONFORMANCE_CASES="${OFFLOAD_CONFORMANCE_CASES:-60000}" \
    cargo test --release -p offload-host --test conformance -- --nocapture
# The fuzz soak (tests/fuzz_corpus.rs): every parser of untrusted bytes (host ELF,
# SPIR-V, PTX/cubin/fatbin, AMD code objects, the IPC wire) over its corpus (fuzz/corpus/)
# and 1,000,000 mutated inputs each (OFFLOAD_SOAK is set; OFFLOAD_FUZZ_CASES=N overrides).
# The deadlock matrix (tests/deadlock_matrix.rs) with 10,000 rounds a cell in both tables
# (CI runs 1,000 and, for a shutdown beside each operation, 300).
cargo test --release --test fuzz_corpus -- --nocapture
cargo test --release --all-features --test deadlock_matrix -- --nocapture
