#!/usr/bin/env bash
# Times `btrfs-lab nocow --migrate` of one file against doing it by hand in
# the same run: `cp --sparse=always` into a `chattr +C` directory, `sync` of
# the copy and `cmp` with the original (what a careful admin types). Both
# start from a fresh reflink clone of the same random file, so both read it
# from the disk. btrfs-lab also drops the copy's cached pages before it
# hashes it, so its verification reads the copy back from the disk where cmp
# mostly reads the page cache; and it keeps owner, times and attributes.
# Rounds are interleaved; a round whose reference time differs from the
# median reference by more than 50% (the VM's disk slows down now and then)
# is reported and left out of the ratio.
#
#   scripts/bench-nocow.sh [SIZE_MIB] [ROUNDS]
#
# As root: makes a sandbox btrfs (single data) and removes it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

size_mib="${1:-1024}"
rounds="${2:-5}"
lab=$PWD/target/release/btrfs-lab
cargo build --release --locked -q

state=$(mktemp -d /var/tmp/bench-nocow.XXXXXX)
sbx=(--state-dir "$state/state" --sandbox-root "$state/sandboxes")
cleanup() { "$lab" "${sbx[@]}" sandbox down --yes --all >/dev/null || true; rm -rf "$state"; }
trap cleanup EXIT
mnt=$("$lab" "${sbx[@]}" sandbox up --json --device-size $((size_mib * 4 + 1024))M |
    sed -n 's/^  "mount_point": "\(.*\)",$/\1/p')

mkdir "$mnt/pool"
dd if=/dev/urandom of="$mnt/pool/orig.img" bs=1M count="$size_mib" status=none
sync -f "$mnt/pool/orig.img"

now() { date +%s%N; }
lab_ns=() ref_ns=()
for ((r = 1; r <= rounds; r++)); do
    # By hand: a NOCOW directory, a copy, flushed, compared.
    mkdir "$mnt/ref$r" "$mnt/ref$r/nocow"
    chattr +C "$mnt/ref$r/nocow"
    cp --reflink=always "$mnt/pool/orig.img" "$mnt/ref$r/disk.img"
    sync -f "$mnt/pool"
    t0=$(now)
    cp --sparse=always "$mnt/ref$r/disk.img" "$mnt/ref$r/nocow/disk.img"
    sync "$mnt/ref$r/nocow/disk.img"
    cmp "$mnt/ref$r/disk.img" "$mnt/ref$r/nocow/disk.img"
    t1=$(now)
    ref_ns+=($((t1 - t0)))
    rm -rf "$mnt/ref$r"

    # btrfs-lab: the same file migrated in place.
    mkdir "$mnt/lab$r"
    cp --reflink=always "$mnt/pool/orig.img" "$mnt/lab$r/disk.img"
    sync -f "$mnt/pool"
    t0=$(now)
    "$lab" nocow --migrate --yes "$mnt/lab$r" >/dev/null 2>&1
    t1=$(now)
    lab_ns+=($((t1 - t0)))
    lsattr "$mnt/lab$r/disk.img" | grep -q '^[^ ]*C' || { echo "bench-nocow: not NOCOW after the migration" >&2; exit 1; }
    cmp -s "$mnt/pool/orig.img" "$mnt/lab$r/disk.img" || { echo "bench-nocow: content differs" >&2; exit 1; }
    rm -rf "$mnt/lab$r"
    sync -f "$mnt/pool"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ref_median=$(median "${ref_ns[@]}")
ratios=()
for ((i = 0; i < rounds; i++)); do
    a=${lab_ns[$i]} b=${ref_ns[$i]}
    verdict=$(awk -v b="$b" -v m="$ref_median" 'BEGIN { d = b / m; print (d > 1.5 || d < 0.67) ? "discarded (reference off the median)" : "kept" }')
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')
    printf 'round %d: btrfs-lab %6.2f s  cp+sync+cmp %6.2f s  ratio %s  %s\n' $((i + 1)) \
        "$(awk -v n="$a" 'BEGIN { print n / 1e9 }')" "$(awk -v n="$b" 'BEGIN { print n / 1e9 }')" "$ratio" "$verdict"
    [ "$verdict" = kept ] && ratios+=("$ratio")
done
[ ${#ratios[@]} -gt 0 ] || { echo "bench-nocow: every round was discarded" >&2; exit 1; }
printf '\n%d MiB file, %d rounds (%d kept): median btrfs-lab %.2f s (%.0f MiB/s), cp+sync+cmp %.2f s (%.0f MiB/s)\n' \
    "$size_mib" "$rounds" "${#ratios[@]}" \
    "$(awk -v n="$(median "${lab_ns[@]}")" 'BEGIN { print n / 1e9 }')" \
    "$(awk -v n="$(median "${lab_ns[@]}")" -v s="$size_mib" 'BEGIN { print s / (n / 1e9) }')" \
    "$(awk -v n="$ref_median" 'BEGIN { print n / 1e9 }')" \
    "$(awk -v n="$ref_median" -v s="$size_mib" 'BEGIN { print s / (n / 1e9) }')"
printf 'time ratio btrfs-lab / cp+sync+cmp over kept rounds: median %s (min %s, max %s)\n' "$(median "${ratios[@]}")" \
    "$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)" "$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)"
