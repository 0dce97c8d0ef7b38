#!/usr/bin/env bash
# Builds offload's C API in release mode and installs the header, both libraries and the
# pkg-config file under PREFIX (default /usr/local):
#   bash offload-capi/install.sh [PREFIX]
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
cargo build --release -p offload-capi
target=${CARGO_TARGET_DIR:-target}/release
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
install -d "$prefix/include" "$prefix/lib/pkgconfig"
install -m 644 offload-capi/include/offload.h "$prefix/include/"
install -m 755 "$target/liboffload_capi.so" "$prefix/lib/"
install -m 644 "$target/liboffload_capi.a" "$prefix/lib/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" offload-capi/offload.pc.in \
    >"$prefix/lib/pkgconfig/offload.pc"
echo "installed offload's C API under $prefix (pkg-config: offload)"
