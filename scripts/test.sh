#!/usr/bin/env bash
# Installs what the tests need (the `test` set of scripts/install-deps.sh,
# asking first on a terminal) and runs the whole test suite, as root.
# Tests that touch btrfs make their own loop devices and remove them.
# Run by a user who is not root, it installs nothing (that needs root: it
# says what is missing and how to install it) and runs the tests anyway: the
# tests that need root are then built as ignored and the summary counts them
# as such (docs/testing.md). Built by root (or with CI=true), a missing
# prerequisite fails a root test.
#
#   scripts/test.sh [--yes] [CARGO TEST ARGUMENTS]
# --yes installs without asking (so do CI=true and a stdin that is not a
# terminal).
set -euo pipefail
cd "$(dirname "$0")/.."
yes=()
if [ "${1:-}" = --yes ] || [ "${1:-}" = -y ]; then
    yes=(--yes)
    shift
fi
source scripts/install-deps.sh
if [ "$(id -u)" -eq 0 ]; then
    BTRFS_LAB_INSTALL_FOR=test.sh btrfs_lab_install "${yes[@]}" test || exit 1
    btrfs_lab_install_loaders "${yes[*]}" || exit 1
else
    BTRFS_LAB_INSTALL_FOR=test.sh btrfs_lab_install test \
        || echo "test.sh: not root: installing nothing; the tests that need root are reported as ignored" >&2
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
