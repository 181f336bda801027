#!/usr/bin/env bash
# Start-up cost of btrfs-lab: the static binary vs the dynamic build vs
# `btrfs --version`, and `btrfs-lab df --json MOUNT` vs
# `btrfs --format json filesystem df MOUNT` on a sandbox btrfs this script
# makes (a sparse file on a loop device with direct I/O) and removes on every
# exit path. Rounds are interleaved (every command once per round, the order
# reversed every other round) so drift hits all commands alike. A round
# whose references (btrfs --version, btrfs fi df) are off their medians by
# more than TOLERANCE is discarded: the VM's disk and caches slow down for a
# while after GiB of memory is freed, and such a round measures that. The
# figure per command is the median of its kept round means; each ratio is
# the median of the kept rounds' ratios (both sides from the same round).
# hyperfine (-N, no shell) when installed, else a timed loop of N runs.
#
#   scripts/bench-startup.sh [STATIC_BINARY [DYNAMIC_BINARY]]
# Defaults: dist/btrfs-lab (scripts/release.sh), target/release/btrfs-lab.
# ROUNDS (default 7), RUNS per round and command (default 200), TOLERANCE
# (default 0.15: 15 %). As root.
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
rounds=${ROUNDS:-7}
runs=${RUNS:-200}
tolerance=${TOLERANCE:-0.15}

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

# Mean seconds per run of one command, RUNS runs: wall clock, then CPU
# (user + system; "-" without hyperfine). On a busy machine the wall clock
# includes waiting for a CPU; the CPU time is the process's own cost.
time_loop() {
    local i t0 t1
    t0=$(date +%s%N)
    for ((i = 0; i < runs; i++)); do $1 >/dev/null; done
    t1=$(date +%s%N)
    echo "$(echo "scale=9; ($t1 - $t0) / $runs / 1000000000" | bc) -"
}
time_hyperfine() {
    hyperfine -N --style none --warmup 10 --runs "$runs" --export-json "$work/h.json" "$1" \
        >/dev/null 2>"$work/h.err" || { cat "$work/h.err" >&2; return 1; }
    jq -r '.results[0] | "\(.mean) \(.user + .system)"' "$work/h.json"
}
if command -v hyperfine >/dev/null 2>&1; then
    tool=hyperfine timer=time_hyperfine
else
    command -v bc >/dev/null || die "needs hyperfine or bc"
    tool="a loop of $runs runs" timer=time_loop
fi
echo "bench-startup: $rounds interleaved rounds, $runs runs per command and round ($tool)"
echo "bench-startup: kernel $(uname -r), $(nproc) CPUs, $($btrfs --version)"

# One line per round and command: ROUND INDEX WALL CPU (seconds).
: >"$work/samples"
for ((r = 1; r <= rounds; r++)); do
    order=$(seq 0 $((${#cmds[@]} - 1)))
    if ((r % 2 == 0)); then order=$(echo "$order" | tac); fi
    for i in $order; do
        echo "$r $i $($timer "${cmds[$i]}")" >>"$work/samples"
    done
done

# The references are commands 2 (btrfs --version) and 5 (btrfs fi df).
awk -v tol="$tolerance" -v n="${#cmds[@]}" -v names="${names[*]}" -v cmdlist="$(printf '%s\t' "${cmds[@]}")" '
function median(a, k,   i, j, t) {
    for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
function fig(i,   r, k, v) { k = 0; for (r = 1; r <= R; r++) if (keep[r]) v[++k] = s[r, i]; return median(v, k) }
function ratio(x, y,   r, k, v) { k = 0; for (r = 1; r <= R; r++) if (keep[r]) v[++k] = s[r, x] / s[r, y]; return median(v, k) }
function span(i,   r, lo, hi) {
    lo = ""; hi = ""
    for (r = 1; r <= R; r++) if (keep[r]) { if (lo == "" || s[r, i] < lo) lo = s[r, i]; if (hi == "" || s[r, i] > hi) hi = s[r, i] }
    return sprintf("%.3f-%.3f", lo * 1000, hi * 1000)
}
{ s[$1, $2] = $3; c[$1, $2] = $4; if ($4 == "-") nocpu = 1; if ($1 > R) R = $1 }
END {
    split(names, name, " "); split(cmdlist, cmd, "\t")
    for (r = 1; r <= R; r++) keep[r] = 1
    m2 = fig(2); m5 = fig(5)
    kept = 0
    for (r = 1; r <= R; r++) {
        off2 = s[r, 2] / m2 - 1; off5 = s[r, 5] / m5 - 1
        if (off2 < -tol || off2 > tol || off5 < -tol || off5 > tol) {
            printf "round %d discarded: references off their medians by %+.0f%% and %+.0f%%\n", r, off2 * 100, off5 * 100
            drop[r] = 1
        } else kept++
    }
    if (kept * 2 < R) print "bench-startup: fewer than half the rounds agree: all kept (a busy machine; run it again)"
    else for (r = 1; r <= R; r++) if (drop[r]) keep[r] = 0
    printf "rounds kept: %d of %d (tolerance %d%%)\n", (kept * 2 < R) ? R : kept, R, tol * 100
    print "command           median ms  (kept round means: min-max)"
    for (i = 0; i < n; i++) printf "%-16s %9.3f   (%s)   %s\n", name[i + 1], fig(i) * 1000, span(i), cmd[i + 1]
    print "ratios (median of the ratios of the kept rounds):"
    printf "  static --version / dynamic --version       %.2f\n", ratio(0, 1)
    printf "  static --version / btrfs --version         %.2f\n", ratio(0, 2)
    printf "  dynamic --version / btrfs --version        %.2f\n", ratio(1, 2)
    printf "  static df --json / btrfs --format json fi df   %.2f\n", ratio(3, 5)
    printf "  dynamic df --json / btrfs --format json fi df  %.2f\n", ratio(4, 5)
    if (nocpu) exit
    for (r = 1; r <= R; r++) for (i = 0; i < n; i++) s[r, i] = c[r, i]
    print "CPU (user + system) per run, median ms of the kept rounds:"
    for (i = 0; i < n; i++) printf "%-16s %9.3f\n", name[i + 1], fig(i) * 1000
    print "CPU ratios (median of the ratios of the kept rounds):"
    printf "  static --version / btrfs --version         %.2f\n", ratio(0, 2)
    printf "  dynamic --version / btrfs --version        %.2f\n", ratio(1, 2)
    printf "  static df --json / btrfs --format json fi df   %.2f\n", ratio(3, 5)
    printf "  dynamic df --json / btrfs --format json fi df  %.2f\n", ratio(4, 5)
}' "$work/samples"
