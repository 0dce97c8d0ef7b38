#!/usr/bin/env bash
# The Python package's check: a virtual environment (.venv at the repository root, reused
# when present), NumPy, pytest and mypy installed by name, the package installed as a user
# installs it, `pip install ./python` (PEP 517 through maturin; release, or debug with
# OFFLOAD_PY_DEBUG=1), the pytest suite, then the overhead benchmark (python/bench/bench.py;
# it reports, and fails the run only with OFFLOAD_BENCH_CHECK=1, since a shared machine's
# timings vary).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${OFFLOAD_VENV:-$root/.venv}"

if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check numpy pytest mypy

# Release by default (what a user builds); OFFLOAD_PY_DEBUG=1 builds the debug profile,
# which shares most of its dependencies with `cargo test` (CI uses it to stay in its time).
if [[ "${OFFLOAD_PY_DEBUG:-0}" == 1 ]]; then
    export MATURIN_PEP517_ARGS="--profile dev"
fi
# An extension `maturin develop` left in the source folder would shadow the installed one.
rm -f "$root"/python/offload/*.so
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
    --no-deps "$root/python"

# The Vulkan tests on lavapipe alone, unless the caller chose drivers (the file says why).
source "$root/scripts/lavapipe-only.sh"
cd "$root/python"
# The installed package, never the source folder beside the tests: the current directory
# stays off sys.path, in the tests' own interpreters and in the scripts they start.
export PYTHONSAFEPATH=1
# Rust backtraces would be printed by nothing here, but keep the output of the tests that
# check stderr identical to a user's.
export RUST_BACKTRACE=0
"$venv/bin/python" -m pytest -q tests
# The type stubs (offload/__init__.pyi, shipped with py.typed) against the built module:
# every name, signature and property, both ways.
"$venv/bin/python" -m mypy.stubtest offload

if [[ "${OFFLOAD_PY_DEBUG:-0}" == 1 ]]; then
    echo "python/ci.sh: debug build: the overhead benchmark is skipped (run it on a release build)"
elif [[ "${OFFLOAD_BENCH_CHECK:-0}" == 1 ]]; then
    "$venv/bin/python" bench/bench.py --check
else
    "$venv/bin/python" bench/bench.py
fi
