#!/usr/bin/env bash
# Installs what the tests need and runs the whole test suite, as root.
# Tests that touch btrfs make their own loop devices and remove them.
# Run by a user who is not root, it installs nothing (that needs root: a
# note says so) and runs the tests anyway: the tests that need root are then
# built as ignored and the summary counts them as such (docs/testing.md).
# Built by root (or with CI=true), a missing prerequisite fails a root test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh
if [ "$(id -u)" -eq 0 ]; then
    btrfs_lab_install_deps
else
    echo "test.sh: not root: installing nothing (scripts/install-deps.sh needs root);" \
        "the tests that need root are reported as ignored" >&2
    export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
fi
# The QEMU rig (docs/rig.md) boots the static release binary, not the debug
# test build: build it first (scripts/release.sh --build-only; .ci/run's
# later full release reuses the build) and name it to the rig tests. Only as
# root: for anyone else the rig tests are ignored.
if [ "$(id -u)" -eq 0 ]; then
    BTRFS_LAB_RIG_BINARY=$(scripts/release.sh --build-only | tail -n1)
    export BTRFS_LAB_RIG_BINARY
fi
cargo test --locked --all-targets --features test-hooks "$@"
