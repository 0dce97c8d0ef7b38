#!/usr/bin/env bash
# Checks that every crate a user needs can be published, in dependency order, and that a
# user's build works from the packages alone:
# 1. `cargo publish --workspace --dry-run --no-verify`: packages each publishable crate
#    (offload-thread, offload-core, … offload-rt last) with crates.io's metadata checks,
#    the other workspace packages standing in for crates.io (nothing is uploaded).
# 2. Unpacks the packages and builds a user crate depending on `offload-rt` with the
#    `fixtures` feature (the test kernels are compiled from C by offload-host's build
#    script, from the files its package ships) and every backend and `mpi`, so every
#    published crate is compiled from its package alone, every crates.io dependency of
#    theirs resolved as a user's would be. That build is the verification: cargo's own
#    (one build per crate, in a target directory of its own) compiled everything a second
#    time, which CI's time budget has no room for. It shares the workspace's target
#    directory, so third-party crates the tests already built are not built again.
# Network: crates.io for the third-party dependencies (offline with a warm cache:
# OFFLOAD_PUBLISH_OFFLINE=1 passes --offline).
set -euo pipefail
cd "$(dirname "$0")/.."

offline=()
if [[ "${OFFLOAD_PUBLISH_OFFLINE:-0}" == 1 ]]; then
    offline=(--offline)
fi
# Never published: the benchmark helper, the dlopen test fixture, the test machinery, the
# MPI test programs, the C API (built from a checkout: docs/c-api.md), the liboffload-compatible
# library (the same: docs/liboffload.md) and the Python package (built by maturin).
exclude=(--exclude offload-bench --exclude offload-embed --exclude offload-testing
    --exclude offload-mpi-programs --exclude offload-capi --exclude offload-liboffload --exclude offload-handles
    --exclude offload-python)

# The dry run unpacks each package into cargo's registry sources under its name and version;
# a copy left there by an earlier run of the same version would be built instead of this
# tree's (a stale offload-core failed offload-driver's verification that way).
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
for name in $(cargo metadata --format-version 1 --no-deps "${offline[@]}" |
    python3 -c 'import json,sys; print(" ".join(p["name"] + "-" + p["version"] for p in json.load(sys.stdin)["packages"]))'); do
    rm -rf "$cargo_home"/registry/src/*/"$name" "$cargo_home"/registry/cache/*/"$name.crate"
done

cargo publish --workspace --dry-run --no-verify --allow-dirty "${exclude[@]}" "${offline[@]}"

# The packages themselves (`publish --dry-run` leaves none behind on a fresh clone).
cargo package --workspace --no-verify --allow-dirty "${exclude[@]}" "${offline[@]}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
version=$(cargo metadata --format-version 1 --no-deps "${offline[@]}" |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "offload-rt"))')
patches=""
for crate in target/package/*-"$version".crate; do
    tar -xzf "$crate" -C "$work"
    name=$(basename "$crate" "-$version.crate")
    patches+="$name = { path = \"../$name-$version\" }"$'\n'
done
mkdir -p "$work/user/src"
cat > "$work/user/Cargo.toml" <<TOML
[package]
name = "offload-user"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
offload = { package = "offload-rt", version = "$version", features = ["fixtures", "vulkan", "cuda", "hip", "ze", "mpi"] }

[patch.crates-io]
$patches
# The workspace's debug profile, so the third-party crates its build compiled are reused.
[profile.dev]
debug = false

[profile.dev.package."*"]
debug = false

[profile.dev.package.sha2]
opt-level = 3
TOML
cat > "$work/user/src/main.rs" <<'RS'
// The launches chapter's first example (docs/launches.md) needs the `fixtures` kernels: they must build from the package.
fn main() {
    assert!(!offload::host::fixtures::KERNELS.is_empty());
}
RS
CARGO_TARGET_DIR="$PWD/target" cargo run "${offline[@]}" --quiet \
    --manifest-path "$work/user/Cargo.toml"
echo "publish dry run: every crate packaged; offload-rt with fixtures, every backend and mpi builds from the packages"
