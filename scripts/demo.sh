#!/usr/bin/env bash
# Installs what btrfs-lab needs, builds it, and runs the demo as root: a
# sandbox btrfs on a loop device, probe-dio on a checksummed and on a NOCOW
# directory of it, the two verdicts side by side, the sandbox removed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh
btrfs_lab_install_deps
cargo build --release --locked
exec ./target/release/btrfs-lab demo "$@"
