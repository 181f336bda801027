#!/usr/bin/env bash
# Runs the QEMU rig's scenarios (tests/it/rig/, docs/rig.md) on every kernel
# of the matrix, one kernel after the other (a TCG guest takes both cores):
#
#   scripts/rig-matrix.sh        bookworm bookworm-backports trixie trixie-backports sid
#   scripts/rig-matrix.sh sid trixie       only these suites
#
# As root, after scripts/install-rig-deps.sh. The kernels are cached in
# $BTRFS_LAB_RIG_CACHE (default /var/tmp/btrfs-lab-rig-cache). Each suite's
# test output goes to $BTRFS_LAB_RIG_LOGS/SUITE.log (default
# target/rig-matrix/); the summary at the end lists the rig: lines (kernel
# versions, boot times, probe-dio verdicts) and which suites failed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
[ "$(id -u)" -eq 0 ] || { echo "rig-matrix: run as root" >&2; exit 1; }
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm bookworm-backports trixie trixie-backports sid)
logs=${BTRFS_LAB_RIG_LOGS:-${CARGO_TARGET_DIR:-target}/rig-matrix}
mkdir -p "$logs"
# Build once (the tests, and the static binary the guests run: scripts/
# release.sh --build-only), then run the rig tests per suite.
cargo test --locked --features test-hooks --test it --no-run
BTRFS_LAB_RIG_BINARY=$(scripts/release.sh --build-only | tail -n1)
export BTRFS_LAB_RIG_BINARY
echo "rig-matrix: the guests run $BTRFS_LAB_RIG_BINARY"
failed=()
for s in "${suites[@]}"; do
    echo "rig-matrix: $s"
    t0=$(date +%s)
    if BTRFS_LAB_RIG_KERNELS=$s cargo test --locked --features test-hooks --test it rig:: \
        -- --test-threads=1 --nocapture >"$logs/$s.log" 2>&1; then
        echo "rig-matrix: $s passed"
    else
        echo "rig-matrix: $s FAILED (see $logs/$s.log)"
        failed+=("$s")
    fi
    echo "rig-matrix: $s took $(($(date +%s) - t0)) s"
    grep -E '^rig: |^test .* (ok|FAILED|ignored)$' "$logs/$s.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "rig-matrix: failed on: ${failed[*]}" >&2
    exit 1
fi
echo "rig-matrix: all of ${suites[*]} passed"
