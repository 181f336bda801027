#!/usr/bin/env bash
# Benchmarks `btrfs-lab read-test`'s direct loader against fio on FILE, in
# the same run, and prints ratios.
#
#   scripts/bench-read-test.sh FILE
#
# Each round runs, with a cold cache before each run:
#   (a) fio's ceiling job: io_uring, direct=1, bs=1M, iodepth=32
#   (b) a fio job matched to direct's bytes in flight: io_uring, direct=1,
#       bs=CHUNK, iodepth=THREADS: the same requests, the same sequential
#       pattern, as many bytes in flight as direct's THREADS × CHUNK
#   (c) btrfs-lab read-test --methods direct
#   (d) btrfs-lab read-test --methods buffered
#   (a) the ceiling job again.
# (b), (c) and (d) rotate their order from round to round. A round whose two
# ceiling runs differ by more than TOLERANCE percent is discarded (this VM's
# reads slow down for 5-15 s after several GiB of memory is freed); rounds
# go on until ROUNDS are kept or MAX_ROUNDS were run. The buffered run leaves
# the file in the page cache: it is evicted right after, and the next run
# waits SETTLE_AFTER_BUFFERED seconds for the machine to settle. The result: median
# ratios direct/fio-ceiling and direct/buffered (and direct/fio-matched) with
# their spread, the median GiB/s of each, and CPU seconds per GiB of each
# (fio: its own usr+sys per job; read-test: getrusage around the read).
#
# Environment: ROUNDS (5), MAX_ROUNDS (3 × ROUNDS), TOLERANCE (10),
# THREADS (4), CHUNK (8M), SETTLE_AFTER_BUFFERED (15), SETTLE (seconds to
# wait after every cold-cache eviction, 0), BTRFS_LAB (the binary; default target/release/btrfs-lab,
# built if missing). Needs fio and jq; reads FILE, never writes it.
set -euo pipefail

die() { echo "bench-read-test: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 FILE"
FILE=$1
[ -f "$FILE" ] || die "$FILE is not a regular file"
[ -r "$FILE" ] || die "cannot read $FILE"
command -v fio >/dev/null || die "fio not found: apt-get install fio"
command -v jq >/dev/null || die "jq not found: apt-get install jq"

ROUNDS=${ROUNDS:-5}
MAX_ROUNDS=${MAX_ROUNDS:-$((ROUNDS * 3))}
TOLERANCE=${TOLERANCE:-10}
THREADS=${THREADS:-4}
CHUNK=${CHUNK:-8M}
SETTLE=${SETTLE:-0}
SETTLE_AFTER_BUFFERED=${SETTLE_AFTER_BUFFERED:-15}
[ "$ROUNDS" -ge 5 ] || die "ROUNDS must be at least 5"

cd "$(dirname "$0")/.."
BIN=${BTRFS_LAB:-target/release/btrfs-lab}
if [ ! -x "$BIN" ]; then
    echo "bench-read-test: building $BIN" >&2
    cargo build --release --quiet
fi

SIZE=$(stat -L -c %s "$FILE")
GIB=1073741824
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Drops FILE's pages from the page cache (GNU dd: posix_fadvise DONTNEED
# on the whole file); fio's default invalidate=1 does it again.
cold() {
    dd if="$FILE" iflag=nocache count=0 status=none
    if [ "$SETTLE" -gt 0 ]; then sleep "$SETTLE"; fi
}

# fio JSON -> "GiB/s cpu_s_per_GiB": bytes over the longest job, CPU summed
# over jobs (usr_cpu and sys_cpu are percent of each job's runtime).
fio_figures() {
    jq -r --argjson gib "$GIB" '
        ([.jobs[].read.io_bytes] | add) as $bytes
        | ([.jobs[].job_runtime] | max) as $ms
        | ([.jobs[] | (.usr_cpu + .sys_cpu) / 100 * .job_runtime / 1000] | add) as $cpu
        | "\($bytes / $ms * 1000 / $gib) \($cpu / ($bytes / $gib))"' "$1"
}

fio_ceiling() {
    cold
    fio --name=ceiling --filename="$FILE" --readonly --rw=read --bs=1M \
        --iodepth=32 --ioengine=io_uring --direct=1 \
        --output-format=json --output="$TMP/ceiling.json" >/dev/null
    fio_figures "$TMP/ceiling.json"
}

fio_matched() {
    cold
    fio --name=matched --filename="$FILE" --readonly --rw=read --bs="$CHUNK" \
        --iodepth="$THREADS" --ioengine=io_uring --direct=1 \
        --output-format=json --output="$TMP/matched.json" >/dev/null
    fio_figures "$TMP/matched.json"
}

# read-test's own eviction and mincore check run before its read.
read_test() {
    cold
    "$BIN" read-test --json --cache cold --rounds 1 --methods "$1" \
        --threads "$THREADS" --chunk "$CHUNK" "$FILE" >"$TMP/rt.json"
    jq -r --argjson gib "$GIB" '.methods[0] |
        if .status == "ok" then
            "\(.rate_bytes_per_sec_median / $gib) \(.cpu_seconds_per_gib_median)"
        else "flagged \(.reason)" end' "$TMP/rt.json"
}

# Median and spread of the numbers on stdin: "median  (min–max)".
stats() {
    sort -g | awk '{ a[NR] = $1 }
        END {
            if (NR == 0) { print "-"; exit }
            m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
            printf "%.3f  (%.3f–%.3f)\n", m, a[1], a[NR]
        }'
}

echo "bench-read-test: $FILE ($(numfmt --to=iec --suffix=iB "$SIZE")), $THREADS threads × $CHUNK"
echo "  $(uname -r); $ROUNDS rounds to keep (at most $MAX_ROUNDS); ceilings must agree within $TOLERANCE%"
echo "  ceiling: fio io_uring direct bs=1M iodepth=32; matched: fio io_uring direct bs=$CHUNK iodepth=$THREADS"
kept=0
discarded=0
round=0
: >"$TMP/kept"
while [ "$kept" -lt "$ROUNDS" ] && [ "$round" -lt "$MAX_ROUNDS" ]; do
    round=$((round + 1))
    read -r c1 c1cpu < <(fio_ceiling)
    declare -A rate=() cpu=()
    order=(matched direct buffered)
    shift_by=$(( (round - 1) % 3 ))
    order=("${order[@]:$shift_by}" "${order[@]:0:$shift_by}")
    flagged=""
    for step in "${order[@]}"; do
        case $step in
            matched) read -r r c < <(fio_matched) ;;
            *) read -r r c < <(read_test "$step") ;;
        esac
        if [ "$step" = buffered ]; then
            cold
            sleep "$SETTLE_AFTER_BUFFERED"
        fi
        [ -n "${r:-}" ] || die "the $step run failed"
        if [ "$r" = flagged ]; then flagged="$step: $c"; r=0; c=0; fi
        rate[$step]=$r
        cpu[$step]=$c
    done
    read -r c2 c2cpu < <(fio_ceiling)
    line=$(printf "round %2d: ceiling %.2f / %.2f GiB/s, matched %.2f, direct %.2f, buffered %.2f  (order: %s)" \
        "$round" "$c1" "$c2" "${rate[matched]}" "${rate[direct]}" "${rate[buffered]}" "${order[*]}")
    apart=$(awk -v a="$c1" -v b="$c2" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.1f", 100 * d / ((a + b) / 2) }')
    if [ -n "$flagged" ]; then
        discarded=$((discarded + 1))
        echo "$line  discarded: read-test flagged $flagged"
    elif awk -v p="$apart" -v t="$TOLERANCE" 'BEGIN { exit !(p > t) }'; then
        discarded=$((discarded + 1))
        echo "$line  discarded: ceilings differ by $apart%"
    else
        kept=$((kept + 1))
        echo "$line  kept"
        ceiling=$(awk -v a="$c1" -v b="$c2" 'BEGIN { print (a + b) / 2 }')
        ceiling_cpu=$(awk -v a="$c1cpu" -v b="$c2cpu" 'BEGIN { print (a + b) / 2 }')
        echo "$ceiling ${rate[matched]} ${rate[direct]} ${rate[buffered]} $ceiling_cpu ${cpu[matched]} ${cpu[direct]} ${cpu[buffered]}" >>"$TMP/kept"
    fi
done

echo
echo "result: $kept rounds kept, $discarded discarded; median (min–max) over the kept rounds"
if [ "$kept" -eq 0 ]; then
    die "no round kept: the machine's reads are too unsteady (raise MAX_ROUNDS or SETTLE)"
fi
col() { awk -v c="$1" '{ print $c }' "$TMP/kept" | stats; }
ratio() { awk -v a="$1" -v b="$2" '{ if ($b > 0) print $a / $b }' "$TMP/kept" | stats; }
printf "  %-22s %s\n" "direct / fio ceiling" "$(ratio 3 1)"
printf "  %-22s %s\n" "direct / buffered" "$(ratio 3 4)"
printf "  %-22s %s\n" "direct / fio matched" "$(ratio 3 2)"
printf "  %-22s %s\n" "GiB/s fio ceiling" "$(col 1)"
printf "  %-22s %s\n" "GiB/s fio matched" "$(col 2)"
printf "  %-22s %s\n" "GiB/s direct" "$(col 3)"
printf "  %-22s %s\n" "GiB/s buffered" "$(col 4)"
printf "  %-22s %s\n" "CPU s/GiB fio ceiling" "$(col 5)"
printf "  %-22s %s\n" "CPU s/GiB fio matched" "$(col 6)"
printf "  %-22s %s\n" "CPU s/GiB direct" "$(col 7)"
printf "  %-22s %s\n" "CPU s/GiB buffered" "$(col 8)"
if [ "$kept" -lt "$ROUNDS" ]; then
    die "only $kept of $ROUNDS rounds kept: the figures above are weaker than asked for"
fi
