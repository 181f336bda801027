#!/usr/bin/env bash
# Times `btrfs-lab device remove` and `device replace` against btrfs-progs'
# own commands on the same fixture, in the same interleaved run, and prints
# the ratios and the differences (issue 61). The fixture, made fresh for
# every timed command: three loop devices of 2 GiB (sparse files, direct I/O
# on), data and metadata RAID1, DATA_MIB (1024) MiB of files of random
# bytes, synced; a fourth, empty loop device for replace.
#
#   remove:  btrfs device remove 3 MNT   vs  btrfs-lab device remove --yes MNT 3
#   replace: btrfs replace start -B 3 NEW MNT
#                                        vs  btrfs-lab device replace --yes MNT 3 NEW
#
#   scripts/bench-device.sh [remove] [replace]   (default: both)
#
# Each round: the reference (a), btrfs-lab, the reference again (b); a round
# whose two references differ by more than TOLERANCE percent is discarded
# and reported; a kept round's ratio is btrfs-lab / mean(a, b) and its
# difference btrfs-lab - mean(a, b). The median of the kept rounds is
# printed beside the target (<= 1.05x, or at most 0.15 s more). Every
# btrfs-lab run's --json result is checked (the device gone, or replaced)
# and its own time per phase (plan, kernel, verify) is printed.
#
# Environment: ROUNDS (5 kept rounds per operation), MAX_ROUNDS
# (2 x ROUNDS), TOLERANCE (20), DATA_MIB (1024), BTRFS_LAB (the binary;
# default target/release/btrfs-lab, built first), BENCH_DIR (where the
# backing files go; default a new directory in /var/tmp). As root: makes its
# own loop devices and mount, and removes them on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."

ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(remove replace)
for o in "${ops[@]}"; do
    case $o in remove|replace) ;; *) echo "bench-device: $o: give remove and/or replace" >&2; exit 2 ;; esac
done
ROUNDS=${ROUNDS:-5}
MAX_ROUNDS=${MAX_ROUNDS:-$((ROUNDS * 2))}
TOLERANCE=${TOLERANCE:-20}
DATA_MIB=${DATA_MIB:-1024}
[[ $DATA_MIB =~ ^[0-9]+$ ]] && [ "$DATA_MIB" -gt 0 ] && [ "$DATA_MIB" -le 1536 ] \
    || { echo "bench-device: DATA_MIB=$DATA_MIB: give 1 to 1536 (the array holds 2 GiB per copy)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "bench-device: needs root (loop devices, mounts)" >&2; exit 2; }
for t in btrfs mkfs.btrfs losetup jq; do
    command -v "$t" >/dev/null || { echo "bench-device: $t is not installed" >&2; exit 2; }
done
. scripts/bench-lib.sh
bench_binary

work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/bench-device.XXXXXX")
mnt=$work/mnt
mkdir "$mnt"
loops=()
teardown() {
    if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" || umount -l "$mnt"; fi
    local l
    for l in "${loops[@]}"; do
        btrfs device scan --forget "$l" 2>/dev/null || true
        losetup -d "$l" 2>/dev/null || true
    done
    loops=()
    rm -f "$work"/dev*.img
}
cleanup() {
    teardown
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


# A fresh fixture: loops[0..2] the array, loops[3] the spare.
fixture() {
    teardown
    local i
    for i in 0 1 2 3; do
        truncate -s 2G "$work/dev$i.img"
        loops+=("$(losetup --find --show --direct-io=on "$work/dev$i.img")")
    done
    mkfs.btrfs -q -f -d raid1 -m raid1 "${loops[0]}" "${loops[1]}" "${loops[2]}" > /dev/null
    mount "${loops[0]}" "$mnt"
    local n=$((DATA_MIB / 16)) f
    mkdir "$mnt/data"
    for f in $(seq 1 "$n"); do
        head -c 16M /dev/urandom > "$mnt/data/f$f"
    done
    sync -f "$mnt"
}

# Runs one timed command; sets ns to the nanoseconds it took. (No command
# substitution around the fixture: the loop devices it makes must be known
# to this shell, which removes them.)
timed() {
    local t0 t1
    t0=$(now)
    "$@" > "$work/out.json" 2> "$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
    t1=$(now)
    ns=$((t1 - t0))
}

reference() {
    fixture
    case $1 in
        remove) timed btrfs device remove 3 "$mnt" ;;
        replace) timed btrfs replace start -B 3 "${loops[3]}" "$mnt" ;;
    esac
}

ours() {
    fixture
    case $1 in
        remove) timed "$lab" --json device remove --yes "$mnt" 3 ;;
        replace) timed "$lab" --json device replace --yes "$mnt" 3 "${loops[3]}" ;;
    esac
    # The array after the run: devid 3 gone (remove) or on the spare (replace).
    local shown
    shown=$(btrfs filesystem show "$mnt")
    case $1 in
        remove) ! grep -q "devid *3 " <<< "$shown" || { echo "bench-device: devid 3 is still a member" >&2; exit 1; } ;;
        replace) grep -q "devid *3 .*${loops[3]}" <<< "$shown" || { echo "bench-device: devid 3 is not on ${loops[3]}" >&2; exit 1; } ;;
    esac
    # The phases btrfs-lab reports (the last JSON Lines record with phases).
    jq -sr '[.[] | .. | objects | select(has("phases")) | .phases] | last // {} | to_entries
            | map("\(.key) \(.value * 1000 | floor) ms") | join(", ")' "$work/out.json" \
        > "$work/phases.txt" 2>/dev/null || echo "(no phase times)" > "$work/phases.txt"
}

echo "btrfs-lab: $lab ($("$lab" --version))"
echo "btrfs-progs: $(btrfs --version | head -1); kernel $(uname -r); ${DATA_MIB} MiB on 3 x 2 GiB raid1"
for op in "${ops[@]}"; do
    ratios=()
    diffs=()
    kept=0
    tried=0
    while [ "$kept" -lt "$ROUNDS" ] && [ "$tried" -lt "$MAX_ROUNDS" ]; do
        tried=$((tried + 1))
        reference "$op"; a=$ns
        ours "$op"; l=$ns
        reference "$op"; b=$ns
        spread=$(awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%d", 200 * d / (a + b) }')
        line="$op round $tried: btrfs $(secs "$a") s / btrfs-lab $(secs "$l") s / btrfs $(secs "$b") s"
        if [ "$spread" -gt "$TOLERANCE" ]; then
            echo "$line: discarded (the references differ by $spread%)"
            continue
        fi
        kept=$((kept + 1))
        ratio=$(awk -v a="$a" -v b="$b" -v l="$l" 'BEGIN { printf "%.3f", 2 * l / (a + b) }')
        diff=$(awk -v a="$a" -v b="$b" -v l="$l" 'BEGIN { printf "%.3f", (l - (a + b) / 2) / 1e9 }')
        ratios+=("$ratio")
        diffs+=("$diff")
        echo "$line: ratio $ratio, ${diff} s more; btrfs-lab's phases: $(cat "$work/phases.txt")"
    done
    if [ "$kept" -eq 0 ]; then
        echo "$op: no round kept (the machine is too noisy: raise TOLERANCE or retry)"
        continue
    fi
    med_r=$(printf '%s\n' "${ratios[@]}" | median)
    med_d=$(printf '%s\n' "${diffs[@]}" | median)
    verdict=$(awk -v r="$med_r" -v d="$med_d" 'BEGIN { print (r <= 1.05 || d <= 0.15) ? "within" : "OVER" }')
    echo "$op: median ratio ${med_r}x, median difference ${med_d} s over $kept rounds ($verdict the target: <= 1.05x or <= 0.15 s more)"
done
