#!/usr/bin/env bash
# Installs what the tests need and runs the whole test suite, as root.
# Tests that touch btrfs make their own loop devices and remove them; with
# CI=true a missing prerequisite fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh
btrfs_lab_install_deps
cargo test --locked --all-targets --features test-hooks "$@"
