#!/usr/bin/env bash
# Benchmarks `btrfs-lab bench` against bare fio running the same jobs, in the
# same run, on DIR (a directory on the filesystem to measure), and prints
# ratios:
#
#   scripts/bench-bench.sh DIR
#
#   1. btrfs-lab bench --json (TESTS, SIZE, RUNS × DURATION) — its wall time
#      and its medians.
#   2. The same job sections, taken from bench's own job file, run by bare
#      fio RUNS times each on a NOCOW file of the same size filled with
#      incompressible data (dd from /dev/urandom) — wall time of the fill and
#      the runs, and fio's medians.
#      Ratios: bench's figure / fio's (goal ≈ 1: it is fio), and bench's wall
#      time / bare fio's (goal ≤ 1.05).
#   3. The write job of the first test with refill_buffers=1 (fio refills
#      every buffer with random data before each write) against bench's
#      write job (refill_buffers=0): CPU seconds per GiB, usr+sys of fio's
#      own JSON. Ratio bench/refill (goal ≤ 0.5).
#   4. bench's own fill of the test file against fio's [fill] section on a
#      file of the same size, interleaved: MB/s from wall time, fsync
#      included on both sides. Ratio bench/fio (goal ≥ 1.0).
#
#   MODE=metadata: runs scripts/bench-metadata.sh DIR instead (the create
#   phase of `bench --small-files` against a C reference).
#
# Environment: TESTS (SEQ1M-Q8T1,RND4K-Q32T1), SIZE (256M), RUNS (3),
# DURATION (3), BTRFS_LAB (the binary; default target/release/btrfs-lab,
# built if missing). Needs root (NOCOW via chattr is fine as owner, but
# bench's dirtied-page counter and the loop devices of a sandbox want root),
# fio and jq. Writes only inside a fresh directory under DIR, removed at exit.
set -euo pipefail

die() { echo "bench-bench: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 DIR"
DIR=$(realpath "$1")
[ -d "$DIR" ] || die "$DIR is not a directory"
command -v fio >/dev/null || die "fio not found: apt-get install fio"
command -v jq >/dev/null || die "jq not found: apt-get install jq"

TESTS=${TESTS:-SEQ1M-Q8T1,RND4K-Q32T1}
SIZE=${SIZE:-256M}
RUNS=${RUNS:-3}
DURATION=${DURATION:-3}

cd "$(dirname "$0")/.."
BIN=${BTRFS_LAB:-target/release/btrfs-lab}
if [ ! -x "$BIN" ]; then
    echo "bench-bench: building $BIN" >&2
    cargo build --release --quiet
fi

# MODE=metadata: scripts/bench-metadata.sh (the create phase against a C
# reference with the same threads and layout, fresh sandboxes, interleaved).
if [ "${MODE:-suite}" = metadata ]; then
    exec scripts/bench-metadata.sh "$DIR"
fi

TMP=$(mktemp -d)
WORK=$(mktemp -d "$DIR/.bench-bench-XXXXXX")
trap 'rm -rf "$TMP" "$WORK"' EXIT

now() { date +%s.%N; }
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# 1. bench.
t0=$(now)
code=0
"$BIN" bench --json --tests "$TESTS" --file-size "$SIZE" --rounds "$RUNS" --duration "$DURATION" "$DIR" >"$TMP/bench.json" || code=$?
t1=$(now)
[ "$code" -eq 0 ] || [ "$code" -eq 3 ] || die "bench failed ($code)"
bench_wall=$(echo "$t1 - $t0" | bc -l)

# 2. Bare fio on the same jobs.
chattr +C "$WORK" 2>/dev/null || true
FILE="$WORK/bench.dat"
bytes=$(jq .parameters.size_bytes "$TMP/bench.json")
jq -r .job_file "$TMP/bench.json" >"$TMP/suite.fio"
# The [global] section, pointed at our file.
awk '/^\[global\]/{g=1} /^$/{if(g) exit} g' "$TMP/suite.fio" | sed "s#^filename=.*#filename=$FILE#" >"$TMP/global.fio"
t0=$(now)
dd if=/dev/urandom of="$FILE" bs=1M count=$((bytes / 1048576)) oflag=direct status=none
sync
sections=$(grep -o '^\[[A-Z0-9-]*-\(read\|write\)\]' "$TMP/suite.fio" | tr -d '[]')
for s in $sections; do
    { cat "$TMP/global.fio"; echo; awk -v s="[$s]" '$0==s{p=1; print; next} /^\[/{p=0} p && $0!="stonewall" && $0!=""' "$TMP/suite.fio"; } >"$TMP/$s.fio"
    for r in $(seq "$RUNS"); do
        fio --output-format=json --output="$TMP/$s.$r.json" "$TMP/$s.fio"
    done
done
t1=$(now)
fio_wall=$(echo "$t1 - $t0" | bc -l)

printf "%-22s %12s %12s %8s\n" "test" "bench MB/s" "fio MB/s" "ratio"
for s in $sections; do
    dir=${s##*-}
    b=$(jq --arg s "$s" '.results[] | select((.name | gsub(" "; "-")) + "-" + .direction == $s) | .claimed_bytes_per_sec' "$TMP/bench.json")
    f=$(for r in $(seq "$RUNS"); do jq ".jobs[0].$dir.bw_bytes" "$TMP/$s.$r.json"; done | median)
    printf "%-22s %12.1f %12.1f %8.3f\n" "$s" "$(echo "$b / 1000000" | bc -l)" "$(echo "$f / 1000000" | bc -l)" "$(echo "$b / $f" | bc -l)"
done
printf "wall time: bench %.1f s, bare fio (fill + runs) %.1f s, ratio %.3f (goal <= 1.05)\n" \
    "$bench_wall" "$fio_wall" "$(echo "$bench_wall / $fio_wall" | bc -l)"

# 3. CPU per GiB of a write job: bench's buffers vs refill_buffers=1.
w=$(echo "$sections" | grep -- '-write$' | head -1)
sed 's/^refill_buffers=0$/refill_buffers=1/' "$TMP/$w.fio" >"$TMP/refill.fio"
cpu_per_gib() { jq '.jobs[0] | ((.usr_cpu + .sys_cpu) / 100 * .job_runtime / 1000) / (.write.io_bytes / 1073741824)' "$1"; }
ours=$(for r in $(seq "$RUNS"); do fio --output-format=json "$TMP/$w.fio" >"$TMP/o.json"; cpu_per_gib "$TMP/o.json"; done | median)
refill=$(for r in $(seq "$RUNS"); do fio --output-format=json "$TMP/refill.fio" >"$TMP/r.json"; cpu_per_gib "$TMP/r.json"; done | median)
printf "write CPU s/GiB (%s): bench %.4f, refill_buffers=1 %.4f, ratio %.3f (goal <= 0.5)\n" \
    "$w" "$ours" "$refill" "$(echo "$ours / $refill" | bc -l)"

# 4. The fill: bench's own (BLAKE3 data, FILL_WRITERS threads, O_DIRECT,
# then fsync) against fio's [fill] section of bench's job file (1 MiB
# writes, iodepth=8, end_fsync=1) on a fresh NOCOW file of the same size,
# interleaved RUNS times; rates from wall time, fsync included on both
# sides (bench: size / fill_seconds; fio: size / (write runtime)). Goal >= 1.0.
awk '/^\[fill\]/{p=1; print; next} /^\[/{p=0} p && $0!=""' "$TMP/suite.fio" >"$TMP/fill-section.fio"
{ cat "$TMP/global.fio"; echo; cat "$TMP/fill-section.fio"; } >"$TMP/fill.fio"
ours_fill=()
fio_fill=()
for r in $(seq "$RUNS"); do
    "$BIN" bench --json --no-history --tests RND4K-Q1T1 --file-size "$SIZE" --rounds 1 --duration 1 "$DIR" >"$TMP/f.json" || true
    ours_fill+=("$(jq "$bytes / .test_file.fill_seconds" "$TMP/f.json")")
    rm -f "$FILE"
    truncate -s "$bytes" "$FILE"
    t0=$(now)
    fio --output-format=json --output="$TMP/fill.json" "$TMP/fill.fio"
    t1=$(now)
    fio_fill+=("$(echo "$bytes / ($t1 - $t0)" | bc -l)")
done
of=$(printf '%s\n' "${ours_fill[@]}" | median)
ff=$(printf '%s\n' "${fio_fill[@]}" | median)
printf "fill MB/s (%s, %s rounds interleaved): bench %.1f, fio [fill] %.1f, ratio %.3f (goal >= 1.0)\n" \
    "$SIZE" "$RUNS" "$(echo "$of / 1000000" | bc -l)" "$(echo "$ff / 1000000" | bc -l)" "$(echo "$of / $ff" | bc -l)"
