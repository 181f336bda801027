#!/usr/bin/env bash
# Installs what building and running the demo needs (and only that: the
# `demo` set of scripts/install-deps.sh, asking first on a terminal), builds
# btrfs-lab, and runs the demo as root: a sandbox btrfs on a loop device,
# probe-dio on a checksummed and on a NOCOW directory of it, the two verdicts
# side by side, the sandbox removed.
#
#   scripts/demo.sh [--yes] [DEMO OPTIONS]
# --yes installs without asking (so do CI=true and a stdin that is not a
# terminal); the other options go to `btrfs-lab demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
yes=() args=()
for a in "$@"; do
    case $a in
        --yes | -y) yes=(--yes) ;;
        *) args+=("$a") ;;
    esac
done
source scripts/install-deps.sh
BTRFS_LAB_INSTALL_FOR=demo.sh btrfs_lab_install "${yes[@]}" demo || exit 1
cargo build --release --locked
exec ./target/release/btrfs-lab demo "${args[@]}"
