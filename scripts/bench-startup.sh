#!/usr/bin/env bash
# Start-up cost of btrfs-lab: the static binary vs the dynamic build vs
# `btrfs --version`, and `btrfs-lab df --json MOUNT` vs
# `btrfs --format json filesystem df MOUNT` on a sandbox btrfs this script
# makes (a sparse file on a loop device with direct I/O) and removes on every
# exit path. Rounds are interleaved (every command once per round, the order
# reversed every other round) so drift hits all commands alike; the figure
# per command is the median of its round means. Prints the ratios.
# hyperfine (-N, no shell) when installed, else a timed loop of N runs.
#
#   scripts/bench-startup.sh [STATIC_BINARY [DYNAMIC_BINARY]]
# Defaults: dist/btrfs-lab (scripts/release.sh), target/release/btrfs-lab.
# ROUNDS (default 5) and RUNS per round and command (default 200). As root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

die() { echo "bench-startup: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (it makes a loop device and mounts it)"
static_bin=$(realpath "${1:-dist/btrfs-lab}")
dynamic_bin=$(realpath "${2:-${CARGO_TARGET_DIR:-target}/release/btrfs-lab}")
[ -x "$static_bin" ] || die "no static binary $static_bin (scripts/release.sh builds it)"
[ -x "$dynamic_bin" ] || die "no dynamic binary $dynamic_bin (cargo build --release builds it)"
btrfs=$(command -v btrfs) || die "btrfs-progs is not installed"
rounds=${ROUNDS:-5}
runs=${RUNS:-200}

work=$(mktemp -d /var/tmp/btrfs-lab-bench-startup.XXXXXX)
loop=
mounted=
cleanup() {
    if [ -n "$mounted" ]; then umount "$work/mnt" || true; fi
    if [ -n "$loop" ]; then losetup -d "$loop" || true; fi
    rm -rf --one-file-system -- "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

truncate -s 1G "$work/disk.img"
loop=$(losetup --find --show --direct-io=on "$work/disk.img")
mkfs.btrfs -q "$loop"
mkdir "$work/mnt"
mount "$loop" "$work/mnt"
mounted=1
mnt="$work/mnt"

names=(static-version dynamic-version btrfs-version static-df-json dynamic-df-json btrfs-df-json)
cmds=(
    "$static_bin --version"
    "$dynamic_bin --version"
    "$btrfs --version"
    "$static_bin df --json $mnt"
    "$dynamic_bin df --json $mnt"
    "$btrfs --format json filesystem df $mnt"
)
# Every command must work before it is timed.
for c in "${cmds[@]}"; do $c >/dev/null || die "failed: $c"; done

# Mean seconds per run of one command, RUNS runs.
time_loop() {
    local i t0 t1
    t0=$(date +%s%N)
    for ((i = 0; i < runs; i++)); do $1 >/dev/null; done
    t1=$(date +%s%N)
    echo "scale=9; ($t1 - $t0) / $runs / 1000000000" | bc
}
time_hyperfine() {
    hyperfine -N --style none --warmup 10 --runs "$runs" --export-json "$work/h.json" "$1" \
        >/dev/null 2>"$work/h.err" || { cat "$work/h.err" >&2; return 1; }
    jq -r '.results[0].mean' "$work/h.json"
}
if command -v hyperfine >/dev/null 2>&1; then
    tool=hyperfine timer=time_hyperfine
else
    command -v bc >/dev/null || die "needs hyperfine or bc"
    tool="a loop of $runs runs" timer=time_loop
fi
echo "bench-startup: $rounds interleaved rounds, $runs runs per command and round ($tool)"
echo "bench-startup: kernel $(uname -r), $(nproc) CPUs, $($btrfs --version)"

declare -A samples
for ((r = 1; r <= rounds; r++)); do
    order=$(seq 0 $((${#cmds[@]} - 1)))
    if ((r % 2 == 0)); then order=$(echo "$order" | tac); fi
    for i in $order; do
        samples[$i]+="$($timer "${cmds[$i]}") "
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
declare -A ms
echo "command           median ms  (round means: min-max)"
for i in "${!cmds[@]}"; do
    ms[$i]=$(echo "${samples[$i]}" | median | awk '{printf "%.3f", $1 * 1000}')
    spread=$(echo "${samples[$i]}" | tr ' ' '\n' | grep -v '^$' | sort -g \
        | awk 'NR==1 {lo=$1} {hi=$1} END {printf "%.3f-%.3f", lo * 1000, hi * 1000}')
    printf '%-16s %9s   (%s)   %s\n' "${names[$i]}" "${ms[$i]}" "$spread" "${cmds[$i]}"
done
ratio() { awk -v a="${ms[$1]}" -v b="${ms[$2]}" 'BEGIN {printf "%.2f", a / b}'; }
echo "ratios (median of round means):"
echo "  static --version / dynamic --version       $(ratio 0 1)"
echo "  static --version / btrfs --version         $(ratio 0 2)"
echo "  dynamic --version / btrfs --version        $(ratio 1 2)"
echo "  static df --json / btrfs --format json fi df   $(ratio 3 5)"
echo "  dynamic df --json / btrfs --format json fi df  $(ratio 4 5)"
