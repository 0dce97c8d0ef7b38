#!/usr/bin/env bash
# The GPU kit, part 1 (runs here, no GPU needed): builds in release every test and benchmark
# binary that exercises CUDA through offload, strips them, and puts them with run.sh and a
# manifest into .gpu/ (git-ignored, at most 60 MiB), ready to travel to a machine with an
# NVIDIA GPU and no network, where `bash .gpu/run.sh` runs them against the real driver.
#
#   scripts/gpu/bundle.sh            build the kit into .gpu/
#   scripts/gpu/bundle.sh --check    CI's check: the same binaries in the dev profile (whose
#                                    third-party crates the test build already compiled),
#                                    then its size, contents and a dry run against the fake.
#                                    Not a kit for a GPU (MANIFEST says so): the size limit
#                                    holds the unoptimised binaries, larger than release ones,
#                                    so a kit that passes it fits. OFFLOAD_KIT_PROFILE=release
#                                    checks the release kit itself.
#
# What goes in (each binary's role in .gpu/MANIFEST):
#   offload-cuda tests  fake_backend (conformance and the shared cases), nvrtc_fake (NVRTC
#                       from source), probe; with OFFLOAD_CUDA_REAL=1 they run on the real
#                       libcuda and NVRTC with the same assertions (offload_testing::fake)
#   facade tests        built with the `cuda` feature: every test that lists all devices
#                       then meets the CUDA platform too
#   embed               the dlopen test and liboffload_embed.so beside it (200 cycles)
#   raw_pair            offload against raw driver calls, paired (offload-cuda/benches)
#   babelstream         BabelStream's five f64 kernels, offload against raw driver calls on
#                       the same PTX, paired and verified (offload-cuda/benches)
#   offload-info        with every backend
#   python/offload      the Python package (host and CUDA) and dlpack_gpu.py: DLPack with
#                       CuPy and PyTorch on CUDA memory, both ways
set -euo pipefail
cd "$(dirname "$0")/../.."

check=false
case "${1:-}" in
    --check) check=true ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

KIT=.gpu
LIMIT_MIB=60
profile=release
if $check; then
    profile=${OFFLOAD_KIT_PROFILE:-dev}
fi
profile_args=(--release)
if [[ $profile == dev ]]; then
    profile_args=()
fi
rm -rf "$KIT"
mkdir -p "$KIT/bin"

# Runs `cargo <args> --message-format=json` and prints "<target name> <executable>" for every
# executable it built (tests, benches, bins).
executables() {
    cargo "$@" "${profile_args[@]}" --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"], m["executable"])
'
}

# Builds first with the output shown (so a failure says why), then asks for the paths.
build() {
    cargo "$@" "${profile_args[@]}"
    executables "$@"
}

manifest="$KIT/MANIFEST"
: >"$manifest"

# add <role> <target> <source path> [<file name in the kit>]
add() {
    local role=$1 target=$2 source=$3 name=${4:-$2}
    cp "$source" "$KIT/bin/$name"
    strip "$KIT/bin/$name" 2>/dev/null || true
    printf '%s %s %s\n' "$role" "$name" "$(wc -c <"$KIT/bin/$name")" >>"$manifest"
}

# pick <wanted target names...>: reads "<name> <path>" lines, adds those wanted.
pick() {
    local role=$1 suffix=$2
    shift 2
    local name path
    while read -r name path; do
        for want in "$@"; do
            if [[ $name == "$want" ]]; then
                add "$role" "$name" "$path" "$name$suffix"
            fi
        done
    done
}

echo "== offload-cuda tests (real-driver switch: OFFLOAD_CUDA_REAL=1)"
build test --no-run -p offload-cuda --all-features |
    pick cuda-test "" fake_backend nvrtc_fake probe
echo "== the paired benchmarks against raw driver calls (raw_pair, babelstream)"
build build -p offload-cuda --bench raw_pair --bench babelstream |
    pick bench "" raw_pair babelstream
echo "== facade tests with the cuda feature"
build test --no-run -p offload-rt --features cuda,fixtures \
    --test after_shutdown --test bad_input --test lifecycle_stress --test reinit \
    --test deinit_errors --test ipc_handles |
    pick facade-test "" after_shutdown bad_input lifecycle_stress reinit deinit_errors ipc_handles
echo "== embed: the dlopen test and its library"
build test --no-run -p offload-embed --features offload/cuda | pick embed-test "" dlopen
cargo build "${profile_args[@]}" -p offload-embed --features offload/cuda
out_dir=${CARGO_TARGET_DIR:-target}/release
[[ $profile == dev ]] && out_dir=${CARGO_TARGET_DIR:-target}/debug
add embed-lib liboffload_embed "$out_dir/liboffload_embed.so" liboffload_embed.so
echo "== the Python package (host and CUDA), for the DLPack step with CuPy and PyTorch"
cargo build "${profile_args[@]}" -p offload-python --no-default-features \
    --features pyo3/extension-module
mkdir -p "$KIT/python/offload"
cp python/offload/__init__.py "$KIT/python/offload/"
cp "$out_dir/liboffload_python.so" "$KIT/python/offload/_offload.abi3.so"
strip "$KIT/python/offload/_offload.abi3.so" 2>/dev/null || true
printf '%s %s %s\n' python-ext _offload.abi3.so "$(wc -c <"$KIT/python/offload/_offload.abi3.so")" >>"$manifest"
cp scripts/gpu/dlpack_gpu.py "$KIT/dlpack_gpu.py"
echo "== offload-info"
build build -p offload-rt --bin offload-info --features vulkan,cuda,hip,ze | pick tool "" offload-info

cp scripts/gpu/run.sh "$KIT/run.sh"
# offload's protocol fakes of libcuda and NVRTC, for `run.sh --fake .gpu/fake`: a dry run
# of the kit on a machine without a GPU (it checks the kit, not a GPU).
mkdir -p "$KIT/fake"
cc -shared -fPIC -o "$KIT/fake/libcuda.so.1" offload-driver/fake/fake_cuda.c
cc -shared -fPIC -o "$KIT/fake/libnvrtc.so" offload-driver/fake/fake_nvrtc.c
{
    echo "# offload GPU kit ($profile profile$([[ $profile == dev ]] && echo ': a check build, not for a GPU run')), built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
    echo "# role file bytes"
    cat "$manifest"
} >"$manifest.tmp"
mv "$manifest.tmp" "$manifest"

size_kib=$(du -sk "$KIT" | cut -f1)
echo "== $KIT: $((size_kib / 1024)) MiB ($size_kib KiB), $(grep -vc '^#' "$manifest") files"
cat "$manifest"

if $check; then
    fail=0
    if ((size_kib > LIMIT_MIB * 1024)); then
        echo "CHECK FAILED: the kit is $size_kib KiB, over $LIMIT_MIB MiB" >&2
        fail=1
    fi
    for need in fake_backend nvrtc_fake probe raw_pair babelstream after_shutdown bad_input \
        lifecycle_stress reinit deinit_errors ipc_handles dlopen liboffload_embed.so \
        offload-info; do
        if [[ ! -s $KIT/bin/$need ]]; then
            echo "CHECK FAILED: $need is missing from the kit" >&2
            fail=1
        fi
    done
    # The runner must know every binary the manifest lists (a kit that cannot rot).
    [[ -s $KIT/python/offload/_offload.abi3.so ]] || {
        echo "CHECK FAILED: the Python extension is missing from the kit" >&2
        fail=1
    }
    bash "$KIT/run.sh" --list >/dev/null || fail=1
    # The whole kit, in real-driver mode, against the fakes: the switch changes the driver,
    # not the assertions, so this must pass (compute-sanitizer is absent here).
    # The dry run's Python: the project's virtual environment (python/ci.sh), which has NumPy.
    [[ -x .venv/bin/python ]] && export OFFLOAD_KIT_PYTHON=$PWD/.venv/bin/python
    if ! OUT=$KIT/dry-run FAKE_NVRTC_PTX=$PWD/offload-cuda/fixtures/kernels.ptx \
        bash "$KIT/run.sh" --fake "$KIT/fake" >"$KIT/dry-run.log" 2>&1; then
        tail -40 "$KIT/dry-run.log" >&2
        echo "CHECK FAILED: the dry run against the fake driver (.gpu/dry-run/gpu-logs.txt)" >&2
        fail=1
    else
        tail -3 "$KIT/dry-run.log"
    fi
    ((fail == 0)) && echo "CHECK OK: $((size_kib / 1024)) MiB of at most $LIMIT_MIB"
    exit $fail
fi
