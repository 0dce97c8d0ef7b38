#!/usr/bin/env bash
# The tests, as README.md's second command runs them, on a fresh Debian 12 machine that has
# Rust and gcc: first the Debian packages the tests need (listed once, in
# scripts/packages.txt, with what needs each), installed when this runs as root, else named
# in the one `sudo apt-get install` line to run, and the script stops; then
# `cargo test --workspace --all-features` with any arguments passed on.
#
#   bash scripts/test.sh                  packages, then the whole test suite
#   bash scripts/test.sh --packages-only  only the packages (CI's first stage)
#   bash scripts/test.sh -- --no-fail-fast  arguments after `--` go to cargo test
set -euo pipefail
cd "$(dirname "$0")/.."

packages_only=false
if [[ "${1:-}" == --packages-only ]]; then
    packages_only=true
    shift
fi
if [[ "${1:-}" == -- ]]; then
    shift
fi

mapfile -t packages < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' scripts/packages.txt | awk '{print $1}')
missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "scripts/test.sh: the tests need these Debian packages, and this machine has no" >&2
        echo "apt-get: ${missing[*]} (scripts/packages.txt says what needs each)" >&2
        exit 1
    fi
    if [[ $(id -u) != 0 ]]; then
        echo "scripts/test.sh: the tests need Debian packages this machine lacks (what needs" >&2
        echo "each: scripts/packages.txt). Install them, then run this again:" >&2
        echo "  sudo apt-get install --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
    echo "scripts/test.sh: installing what the tests need: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if $packages_only; then
    exit 0
fi
# The Vulkan tests on lavapipe alone, unless the caller chose drivers (the file says why).
source scripts/lavapipe-only.sh
exec cargo test --workspace --all-features "$@"
