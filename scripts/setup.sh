#!/bin/bash
# Install the system packages ext4lazy's build, tests and benchmarks use, then
# build the release binary. Idempotent; needs root for apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(fuse3 fuse2fs e2fsprogs xfsprogs attr acl python3-matplotlib jq bc)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q ' installed$' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest
modprobe fuse 2>/dev/null || true
[[ -e /dev/fuse ]] || { echo "setup: /dev/fuse is missing: FUSE is not available on this machine" >&2; exit 1; }
# FUSE over io_uring (Linux 6.14+) is off until this switch is set; ext4lazy
# uses it when it is on (`ext4lazy install` sets it too, and keeps it set).
if [[ -w /sys/module/fuse/parameters/enable_uring ]]; then
  echo Y > /sys/module/fuse/parameters/enable_uring
else
  echo "setup: this kernel has no FUSE over io_uring; ext4lazy will serve requests through /dev/fuse"
fi
command -v cargo >/dev/null || { echo "setup: cargo (Rust) is not installed" >&2; exit 1; }
# tests/run.sh checks the style with both (rustfmt.toml, clippy -D warnings).
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done
cargo build --release --quiet --workspace
# The fuzz targets (fuzz/, libFuzzer through cargo-fuzz) need the nightly
# toolchain; tests/run.sh runs each briefly.
if ! cargo +nightly --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal
fi
command -v cargo-fuzz >/dev/null || cargo install --quiet --locked cargo-fuzz
echo "setup: built $(pwd)/target/release/ext4lazy (and arc-cd, dbfs-sqlite)"
# The field's own test suites (fsx, fsstress, xfstests, pjdfstest), shipped beside
# the repository in ../shared/tools where this project is developed and tested.
if [[ -d ../shared/tools ]]; then
  bash ../shared/tools/xfstests.sh build
  bash ../shared/tools/pjdfstest.sh build
else
  echo "setup: ../shared/tools not found: the fsx/fsstress/pjdfstest/xfstests system tests will be skipped"
fi
