#!/usr/bin/env bash
# Times `btrfs-lab rescue --copy-to` against what an admin would type, in
# the same interleaved run, and prints the ratio (issue 61). The array: three
# loop devices of 2 GiB, data RAID0, metadata RAID1C3, COUNT files of 4-60
# KiB of random bytes (100 per directory); device 3 is then lost (unmounted,
# detached, forgotten) and the rest mounted `-o degraded,ro`. The reference
# is handed rescue's own list of intact files for free (`rescue --list`,
# timed once and printed): `cp -a --parents` of those files, `sync -f` of
# the target, `sha256sum` of the sources and `sha256sum -c` of the copies.
# btrfs-lab reads every byte from the disk (O_DIRECT), checks it against the
# checksum tree, writes and links the copies, syncs them in batches and
# keeps a manifest. Page caches are dropped before every timed command.
#
#   scripts/bench-rescue.sh [COUNT ...]  (default: 1000 10000; 50000 too
#                                         when asked)
#
# Each round: the reference (a), btrfs-lab, the reference again (b); a round
# whose two references differ by more than TOLERANCE percent is discarded
# and reported; the ratio of a kept round is btrfs-lab / mean(a, b). Every
# round checks that btrfs-lab copied exactly the reference's files, with the
# same bytes.
#
# Environment: ROUNDS (3 kept rounds per count), MAX_ROUNDS (2 x ROUNDS),
# TOLERANCE (25), BTRFS_LAB (the binary; default target/release/btrfs-lab,
# built first), BENCH_DIR (where the backing files and targets go; default
# a new directory in /var/tmp). As root: makes its own loop devices and
# mount, and removes them on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."

counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1000 10000)
ROUNDS=${ROUNDS:-3}
MAX_ROUNDS=${MAX_ROUNDS:-$((ROUNDS * 2))}
TOLERANCE=${TOLERANCE:-25}
for c in "${counts[@]}"; do
    [[ $c =~ ^[0-9]+$ ]] && [ "$c" -gt 0 ] || { echo "bench-rescue: $c: give a number of files, e.g. 10000" >&2; exit 2; }
done
[ "$(id -u)" -eq 0 ] || { echo "bench-rescue: needs root (loop devices, mounts)" >&2; exit 2; }
. scripts/bench-lib.sh
bench_binary

work=$(mktemp -d "${BENCH_DIR:-/var/tmp}/bench-rescue.XXXXXX")
mnt=$work/mnt
loops=()
cleanup() {
    if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt" || umount -l "$mnt"; fi
    forget_loops
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# The degraded array with $1 files, mounted read-only at $mnt.
fixture() {
    local count=$1 i
    cleanup_fixture
    mkdir -p "$mnt"
    loops=()
    for i in 1 2 3; do
        truncate -s 2G "$work/dev$i"
        loops+=("$(losetup -f --show "$work/dev$i")")
    done
    mkfs.btrfs -q -f -d raid0 -m raid1c3 "${loops[@]}" >/dev/null
    mount "${loops[0]}" "$mnt"
    python3 - "$mnt" "$count" <<'EOF'
import os, random, sys
root, count = sys.argv[1], int(sys.argv[2])
rnd = random.Random(61)
for i in range(count):
    d = os.path.join(root, "d%03d" % (i // 100))
    if i % 100 == 0:
        os.mkdir(d)
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(os.urandom(rnd.randint(4096, 60 * 1024)))
EOF
    umount "$mnt"
    btrfs device scan --forget "${loops[2]}" >/dev/null 2>&1 || true
    losetup -d "${loops[2]}"
    loops=("${loops[0]}" "${loops[1]}") # never detach a number reused since
    mount -o degraded,ro "${loops[0]}" "$mnt"
}
# Our loop devices (only ours) forgotten by btrfs and detached.
forget_loops() {
    local l
    for l in "${loops[@]}"; do
        btrfs device scan --forget "$l" >/dev/null 2>&1 || true
        losetup -d "$l" 2>/dev/null || true
    done
    loops=()
}
cleanup_fixture() {
    if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt"; fi
    forget_loops
    rm -f "$work"/dev?
}

# The reference, timed: copy the intact files, flush, hash both sides.
reference() {
    local out=$work/ref t0 t1
    rm -rf "$out" && mkdir "$out"
    drop_caches
    t0=$(now)
    (cd "$mnt" && xargs -0 -a "$work/intact" cp -a --parents -t "$out")
    sync -f "$out"
    (cd "$mnt" && xargs -0 -a "$work/intact" sha256sum) >"$work/sums"
    (cd "$out" && sha256sum --quiet -c "$work/sums")
    t1=$(now)
    echo $((t1 - t0))
}

summary=()
for count in "${counts[@]}"; do
    echo "== $count files"
    fixture "$count"
    drop_caches
    t0=$(now)
    "$lab" --json rescue --list "$mnt" >"$work/list" || [ $? -eq 3 ]
    t1=$(now)
    jq -j 'select(.state? == "intact") | .path + "\u0000"' "$work/list" >"$work/intact"
    intact=$(tr -cd '\0' <"$work/intact" | wc -c)
    echo "rescue --list: $(secs $((t1 - t0))) s; $intact of $count files intact"
    ratios=() labs=() refs=()
    kept=0 ran=0
    while [ "$kept" -lt "$ROUNDS" ] && [ "$ran" -lt "$MAX_ROUNDS" ]; do
        ran=$((ran + 1))
        a=$(reference)

        rm -rf "$work/lab" "$work/state"
        drop_caches
        t0=$(now)
        "$lab" --state-dir "$work/state" --json rescue --copy-to "$work/lab" "$mnt" >"$work/lab.json" || [ $? -eq 3 ]
        t1=$(now)
        l=$((t1 - t0))
        copied=$(jq -r 'select(.copy?.copied != null) | .copy.copied' "$work/lab.json" | tail -1)
        [ "$copied" -eq "$intact" ] || { echo "bench-rescue: btrfs-lab copied $copied files, $intact are intact" >&2; exit 1; }
        (cd "$work/lab" && sha256sum --quiet -c "$work/sums") || { echo "bench-rescue: btrfs-lab's copies differ" >&2; exit 1; }

        b=$(reference)
        spread=$(awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (a > b) ? a : b; printf "%.0f", 100 * d / m }')
        ratio=$(awk -v l="$l" -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", l / ((a + b) / 2) }')
        status=kept
        if [ "$spread" -gt "$TOLERANCE" ]; then
            status="discarded (the references differ by $spread%)"
        else
            kept=$((kept + 1))
            ratios+=("$ratio") labs+=("$l") refs+=("$(((a + b) / 2))")
        fi
        printf 'round %2d: reference %7s s, btrfs-lab %7s s, reference %7s s: ratio %s  %s\n' "$ran" \
            "$(secs "$a")" "$(secs "$l")" "$(secs "$b")" "$ratio" "$status"
    done
    [ "$kept" -gt 0 ] || { echo "bench-rescue: $count: every round was discarded" >&2; exit 1; }
    lab_m=$(printf '%s\n' "${labs[@]}" | median)
    ref_m=$(printf '%s\n' "${refs[@]}" | median)
    line=$(printf '%d files (%d intact): kept %d of %d rounds; btrfs-lab %s s, reference %s s (medians; %.2f ms per copied file for btrfs-lab); ratio median %s (min %s, max %s)' \
        "$count" "$intact" "$kept" "$ran" "$(secs "$lab_m")" "$(secs "$ref_m")" \
        "$(awk -v n="$lab_m" -v c="$intact" 'BEGIN { print n / 1e6 / c }')" \
        "$(printf '%s\n' "${ratios[@]}" | median)" \
        "$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)" "$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)")
    echo "$line"
    echo
    summary+=("$line")
done
echo "time ratio btrfs-lab / (cp -a --parents + sync -f + sha256sum + sha256sum -c):"
printf '  %s\n' "${summary[@]}"
