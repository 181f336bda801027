#!/usr/bin/env bash
# Benchmarks how fast `btrfs-lab probe-dio` reaches an exact verdict, next to
# fio writing the very same bytes the same way, in the same run, and prints
# ratios:
#
#   scripts/bench-probe-dio.sh DIR        (as root; DIR on btrfs)
#
# Each round runs:
#   (a) fio, the reference: the probe's writes without the probe: for each of
#       its ROUNDS_PROBE rounds a SIZE file in DIR and one in a NOCOW
#       directory beside it, written sequentially with O_DIRECT in 1M
#       requests (psync, iodepth 1, no preallocation, as the probe writes),
#       fsync at the end, in one fio process;
#   (b) btrfs-lab probe-dio --json DIR (default size: 32M per file when its
#       per-file tracepoints measure);
#   (c) with BUSY=1, (b) again while fio writes buffered (4 jobs, 1M,
#       unthrottled, 64M files rewritten) into another directory of the same filesystem: the
#       verdict must not change (the tracepoints see only the probe's files
#       and its own thread);
#   (a) the reference again.
# A round whose two references differ by more than TOLERANCE percent is
# discarded (this VM's disk slows for 5-15 s after several GiB of memory is
# freed); rounds go on until ROUNDS are kept or MAX_ROUNDS were run. The
# result: per round the probe's wall time (its own `effort.seconds`: start to
# verdict, idle windows and trace set-up included), bytes written, the
# verdict and evidence, and fio's I/O time for the same bytes (the sum of its
# jobs' runtimes: the cost of the writing itself); then the median probe/fio
# time ratio (the probe's overhead over just writing the bytes) and the median seconds to a verdict, idle and
# busy. The goal (issue 28): the right verdict in <= 0.5 s writing <= 32 MiB
# per file on an idle NVMe-class device, the same verdict under a buffered
# writer.
#
# Environment: ROUNDS (5), MAX_ROUNDS (3 x ROUNDS), TOLERANCE (15), BUSY (1),
# SIZE (32M, the probe's default when traced), BTRFS_LAB (the binary; default
# target/release/btrfs-lab, built if missing). Needs fio and jq. Writes only
# its own files under DIR (removed on exit) and the probe's.
set -euo pipefail

die() { echo "bench-probe-dio: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 DIR"
DIR=$1
[ -d "$DIR" ] || die "$DIR is not a directory"
[ "$(id -u)" -eq 0 ] || die "run as root: the per-file tracepoints need tracefs"
case "$DIR" in
*[:,\ \\\$\;\#]*) die "$DIR: fio cannot take a directory name with : , space \\ \$ ; or #" ;;
esac
[ "$(stat -f -c %T "$DIR")" = btrfs ] || die "$DIR is not on btrfs"
command -v fio >/dev/null || die "fio not found: apt-get install fio"
command -v jq >/dev/null || die "jq not found: apt-get install jq"

ROUNDS=${ROUNDS:-5}
MAX_ROUNDS=${MAX_ROUNDS:-$((ROUNDS * 3))}
TOLERANCE=${TOLERANCE:-15}
BUSY=${BUSY:-1}
SIZE=${SIZE:-32M}
ROUNDS_PROBE=3

cd "$(dirname "$0")/.."
BIN=${BTRFS_LAB:-target/release/btrfs-lab}
if [ ! -x "$BIN" ]; then
    echo "bench-probe-dio: building $BIN" >&2
    cargo build --release --quiet
fi

WORK=$(mktemp -d "$DIR/.bench-probe-dio.XXXXXX")
TMP=$(mktemp -d)
BUSY_PID=
cleanup() {
    [ -n "$BUSY_PID" ] && kill "$BUSY_PID" 2>/dev/null && wait "$BUSY_PID" 2>/dev/null
    rm -rf -- "$WORK" "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
mkdir "$WORK/csum" "$WORK/nocow" "$WORK/noise"
chattr +C "$WORK/nocow"

# (a): the same files, sizes and requests as the probe, one after another,
# in one fio process (its start-up paid once, as the probe's).
reference() {
    local start end r d args=(--rw=write --bs=1M --size="$SIZE" --direct=1 --ioengine=psync
        --end_fsync=1 --fallocate=none --output-format=json)
    for r in $(seq 1 "$ROUNDS_PROBE"); do
        for d in csum nocow; do
            args+=(--name="r$r-$d" --directory="$WORK/$d" --filename="r$r" --stonewall)
        done
    done
    # fio's own I/O time (the jobs' runtimes, fsync included): its wall
    # time is mostly its start-up and the status thread, not the writing.
    fio "${args[@]}" | jq '[.jobs[].job_runtime] | add / 1000'
    rm -f -- "$WORK"/csum/r* "$WORK"/nocow/r*
}

probe() { # $1: output file
    local rc=0
    "$BIN" probe-dio --json --file-size "$SIZE" "$WORK/csum" >"$1" || rc=$?
    case $rc in
    0 | 3 | 4 | 5 | 6) ;;
    *) die "probe-dio failed (exit $rc)" ;;
    esac
}

start_busy() {
    fio --name=noise --directory="$WORK/noise" --rw=write --bs=1M --size=64M \
        --numjobs=4 --direct=0 --ioengine=psync --time_based --runtime=600 \
        --output-format=json >/dev/null 2>&1 &
    BUSY_PID=$!
    sleep 1
}

stop_busy() {
    kill "$BUSY_PID" 2>/dev/null || true
    wait "$BUSY_PID" 2>/dev/null || true
    BUSY_PID=
    rm -f -- "$WORK"/noise/*
    sync -f "$WORK"
}

kept=0
ran=0
: >"$TMP/ratios"
: >"$TMP/idle_s"
: >"$TMP/busy_s"
printf '%-6s %-9s %-9s %-8s %-18s %-11s %-9s %s\n' round fio-a probe fio-b verdict evidence "busy" "probe/fio"
while [ "$kept" -lt "$ROUNDS" ] && [ "$ran" -lt "$MAX_ROUNDS" ]; do
    ran=$((ran + 1))
    a=$(reference)
    probe "$TMP/idle.json"
    busy_verdict=-
    if [ "$BUSY" = 1 ]; then
        start_busy
        probe "$TMP/busy.json"
        stop_busy
        busy_verdict=$(jq -r .verdict "$TMP/busy.json")
    fi
    b=$(reference)
    idle_s=$(jq -r .effort.seconds "$TMP/idle.json")
    verdict=$(jq -r .verdict "$TMP/idle.json")
    evidence=$(jq -r .evidence.source "$TMP/idle.json")
    bytes=$(jq -r .effort.bytes_written "$TMP/idle.json")
    spread=$(awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (a > b) ? a : b; printf "%.3f\n", 100 * d / m }')
    ratio=$(awk -v p="$idle_s" -v a="$a" -v b="$b" 'BEGIN { printf "%.4f\n", p / ((a + b) / 2) }')
    status=""
    if awk -v s="$spread" -v t="$TOLERANCE" 'BEGIN { exit !(s > t) }'; then
        status=" (discarded: the references differ by $(printf %.0f "$spread")%)"
    else
        kept=$((kept + 1))
        echo "$ratio" >>"$TMP/ratios"
        echo "$idle_s" >>"$TMP/idle_s"
        [ "$BUSY" = 1 ] && jq -r .effort.seconds "$TMP/busy.json" >>"$TMP/busy_s"
    fi
    printf '%-6s %-9.3f %-9.3f %-8.3f %-18s %-11s %-9s %.2f%s\n' "$ran" "$a" "$idle_s" "$b" \
        "$verdict" "$evidence" "$busy_verdict" "$ratio" "$status"
    if [ "$BUSY" = 1 ] && [ "$busy_verdict" != "$verdict" ]; then
        echo "bench-probe-dio: round $ran: the verdict changed under a buffered writer: $verdict idle, $busy_verdict busy" >&2
        jq '{verdict, reasons, evidence, test, control}' "$TMP/busy.json" >&2
        exit 1
    fi
done
[ "$kept" -gt 0 ] || die "no round kept in $ran: the references never agreed within $TOLERANCE%"
median() { sort -g "$1" | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
echo
echo "kept $kept of $ran rounds; the probe wrote $bytes bytes per run ($(numfmt --to=iec "$bytes")) in $ROUNDS_PROBE rounds of $SIZE per file"
echo "seconds to a verdict, idle: median $(median "$TMP/idle_s")"
[ "$BUSY" = 1 ] && echo "seconds to a verdict, under a buffered writer on the same filesystem: median $(median "$TMP/busy_s") (same verdict every round)"
echo "probe / fio writing the same bytes: median $(printf %.2f "$(median "$TMP/ratios")")x"
