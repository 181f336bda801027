#!/usr/bin/env bash
# Times `btrfs-lab nocow --migrate` against doing it by hand, in the same
# interleaved run, and prints the ratio: `cp --sparse=always` into a
# `chattr +C` directory, `sync` of the copies and `cmp` of each with its
# original (what a careful admin types). Both start from fresh reflink clones
# of the same random files, so both read them from the disk. btrfs-lab also
# reads each copy back from the disk where cmp mostly reads the page cache,
# takes a lease on each original (and compares a small file once more under
# it; a large one is copied under it), swaps the copy in atomically, keeps
# owner, times and attributes, and commits the filesystem at the end.
#
#   scripts/bench-nocow.sh [COUNTxSIZE_MIB ...]  (default: 2x1024 200x4 1x1024)
#
# 2x1024 measures the throughput, 200x4 a fixed cost per file, 1x1024 one
# large file alone (no other file to overlap with). Each round:
# the reference (a), btrfs-lab, the reference again (b); a round whose two
# references differ by more than TOLERANCE percent is discarded (this VM's
# disk slows for 5-15 s after several GiB of memory is freed) and reported;
# the ratio of a kept round is btrfs-lab / mean(a, b). Every migrated file
# is checked (NOCOW, same content) in every round.
#
# Environment: ROUNDS (5 kept rounds per configuration), MAX_ROUNDS
# (2 x ROUNDS), TOLERANCE (25), BTRFS_LAB (the binary; default
# target/release/btrfs-lab, built first). As root: makes a sandbox btrfs (single data)
# and removes it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(2x1024 200x4 1x1024)
ROUNDS=${ROUNDS:-5}
MAX_ROUNDS=${MAX_ROUNDS:-$((ROUNDS * 2))}
TOLERANCE=${TOLERANCE:-25}
if [ -n "${BTRFS_LAB:-}" ]; then
    lab=$(realpath "$BTRFS_LAB")
else
    lab=$PWD/target/release/btrfs-lab
    cargo build --release --locked -q
fi

largest=0
for c in "${configs[@]}"; do
    [[ $c =~ ^([0-9]+)x([0-9]+)$ ]] || { echo "bench-nocow: $c: give COUNTxSIZE_MIB, e.g. 2x1024" >&2; exit 2; }
    t=$((BASH_REMATCH[1] * BASH_REMATCH[2]))
    [ "$t" -gt "$largest" ] && largest=$t
done

state=$(mktemp -d /var/tmp/bench-nocow.XXXXXX)
sbx=(--state-dir "$state/state" --sandbox-root "$state/sandboxes")
cleanup() { "$lab" "${sbx[@]}" sandbox down --yes --all >/dev/null || true; rm -rf "$state"; }
trap cleanup EXIT
mnt=$("$lab" "${sbx[@]}" sandbox up --json --device-size $((largest * 4 + 1024))M |
    sed -n 's/^  "mount_point": "\(.*\)",$/\1/p')

now() { date +%s%N; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
secs() { awk -v n="$1" 'BEGIN { printf "%.2f", n / 1e9 }'; }

# The reference, timed: copy, flush, compare; $1: a directory of clones.
reference() {
    local d=$1 f t0 t1
    mkdir "$d/nocow"
    chattr +C "$d/nocow"
    t0=$(now)
    cp --sparse=always "$d"/f* "$d/nocow/"
    sync "$d"/nocow/f*
    for f in "$d"/f*; do cmp "$f" "$d/nocow/${f##*/}"; done
    t1=$(now)
    echo $((t1 - t0))
}

# Fresh reflink clones of the pool in $1 (their own inodes: nothing cached).
clones() {
    mkdir "$1"
    cp --reflink=always "$mnt"/pool/f* "$1/"
    sync -f "$mnt/pool"
}

summary=()
for c in "${configs[@]}"; do
    [[ $c =~ ^([0-9]+)x([0-9]+)$ ]]
    count=${BASH_REMATCH[1]} size_mib=${BASH_REMATCH[2]}
    rm -rf "$mnt/pool"
    mkdir "$mnt/pool"
    for ((i = 1; i <= count; i++)); do
        head -c "${size_mib}M" /dev/urandom >"$mnt/pool/f$i"
    done
    sync -f "$mnt/pool"
    echo "== $count x $size_mib MiB"
    ratios=() labs=() refs=()
    kept=0 ran=0
    while [ "$kept" -lt "$ROUNDS" ] && [ "$ran" -lt "$MAX_ROUNDS" ]; do
        ran=$((ran + 1))
        clones "$mnt/ra"
        a=$(reference "$mnt/ra")
        rm -rf "$mnt/ra"

        clones "$mnt/lab"
        t0=$(now)
        "$lab" nocow --migrate --yes "$mnt/lab" >/dev/null 2>&1
        t1=$(now)
        l=$((t1 - t0))
        for ((i = 1; i <= count; i++)); do
            lsattr "$mnt/lab/f$i" | grep -q '^[^ ]*C' || { echo "bench-nocow: f$i is not NOCOW after the migration" >&2; exit 1; }
            cmp -s "$mnt/pool/f$i" "$mnt/lab/f$i" || { echo "bench-nocow: f$i: content differs" >&2; exit 1; }
        done
        rm -rf "$mnt/lab"

        clones "$mnt/rb"
        b=$(reference "$mnt/rb")
        rm -rf "$mnt/rb"
        sync -f "$mnt/pool"

        spread=$(awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (a > b) ? a : b; printf "%.0f", 100 * d / m }')
        ratio=$(awk -v l="$l" -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", l / ((a + b) / 2) }')
        status=kept
        if [ "$spread" -gt "$TOLERANCE" ]; then
            status="discarded (the references differ by $spread%)"
        else
            kept=$((kept + 1))
            ratios+=("$ratio") labs+=("$l") refs+=("$(((a + b) / 2))")
        fi
        printf 'round %2d: cp+sync+cmp %7s s, btrfs-lab %7s s, cp+sync+cmp %7s s: ratio %s  %s\n' "$ran" \
            "$(secs "$a")" "$(secs "$l")" "$(secs "$b")" "$ratio" "$status"
    done
    [ "$kept" -gt 0 ] || { echo "bench-nocow: $c: every round was discarded" >&2; exit 1; }
    lab_m=$(printf '%s\n' "${labs[@]}" | median)
    ref_m=$(printf '%s\n' "${refs[@]}" | median)
    line=$(printf '%d x %d MiB: kept %d of %d rounds; btrfs-lab %s s, cp+sync+cmp %s s (medians; %.1f ms per file for btrfs-lab); ratio median %s (min %s, max %s)' \
        "$count" "$size_mib" "$kept" "$ran" "$(secs "$lab_m")" "$(secs "$ref_m")" \
        "$(awk -v n="$lab_m" -v c="$count" 'BEGIN { print n / 1e6 / c }')" \
        "$(printf '%s\n' "${ratios[@]}" | median)" \
        "$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)" "$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)")
    echo "$line"
    echo
    summary+=("$line")
done
echo "time ratio btrfs-lab / cp+sync+cmp:"
printf '  %s\n' "${summary[@]}"
