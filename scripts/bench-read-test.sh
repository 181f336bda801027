#!/usr/bin/env bash
# Benchmarks `btrfs-lab read-test`'s direct loader against fio on FILE, in
# the same run, and prints ratios.
#
#   scripts/bench-read-test.sh FILE
#
# The reference is the true ceiling for direct's requests: fio with the same
# requests and bytes in flight (io_uring, direct=1, bs=CHUNK,
# iodepth=THREADS) and buffers in huge pages (iomem=mmaphuge), which on a
# virtio disk carry requests 4 KiB-page buffers cannot (docs/decisions.md).
# The huge pages come from the kernel's pool: as root the script reserves
# what is missing for the run (vm.nr_hugepages, said before, put back on
# exit, Ctrl-C included); as another user it needs them free already, and
# says how many. read-test's destination takes them from the same pool when
# they are free (its report says `huge-page-pool`), as fio's do.
#
# Each round runs, with a cold cache before each run:
#   (a) the ceiling job: io_uring, direct=1, bs=CHUNK, iodepth=THREADS,
#       iomem=mmaphuge
#   (b) the same job with ordinary 4 KiB-page buffers (what fio gives
#       without huge pages: for scale)
#   (c) btrfs-lab read-test --methods direct
#   (d) btrfs-lab read-test --methods buffered
#   (a) the ceiling job again.
# (b), (c) and (d) rotate their order from round to round. A round whose two
# ceiling runs differ by more than TOLERANCE percent is discarded (this VM's
# reads slow down for 5-15 s after several GiB of memory is freed); rounds
# go on until ROUNDS are kept or MAX_ROUNDS were run. The buffered run leaves
# the file in the page cache: it is evicted right after, and the next run
# waits SETTLE_AFTER_BUFFERED seconds for the machine to settle. The result:
# median ratios direct/ceiling, direct/buffered and direct/fio-4k with their
# spread, the median GiB/s of each, and CPU seconds per GiB: of the whole
# process (user + system of the command, start-up and buffers included, for
# fio and read-test alike) and of the read alone (fio: its job's usr+sys;
# read-test: getrusage around the pass).
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
HUGE_BEFORE=""
cleanup() {
    if [ -n "$HUGE_BEFORE" ]; then
        echo "$HUGE_BEFORE" >/proc/sys/vm/nr_hugepages \
            && echo "bench-read-test: vm.nr_hugepages put back to $HUGE_BEFORE" >&2
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Huge pages: enough for the largest of fio's buffers (CHUNK × THREADS,
# rounded up, and one page of slack) and read-test's ring (2 × THREADS ×
# CHUNK).
meminfo() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
HUGE_KB=$(meminfo Hugepagesize)
[ -n "$HUGE_KB" ] || die "this kernel has no huge pages (no Hugepagesize in /proc/meminfo): no true ceiling to measure against"
CHUNK_BYTES=$(numfmt --from=iec "$CHUNK")
HUGE_NEED=$(( (2 * THREADS * CHUNK_BYTES + HUGE_KB * 1024 - 1) / (HUGE_KB * 1024) + 1 ))
huge_free() { echo $(( $(meminfo HugePages_Free) - $(meminfo HugePages_Rsvd) )); }
if [ "$(huge_free)" -lt "$HUGE_NEED" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        die "the ceiling needs $HUGE_NEED free huge pages of ${HUGE_KB} KiB and $(huge_free) are free: run as root (the script reserves them for the run and puts the setting back), or reserve them yourself: sysctl vm.nr_hugepages=$(( $(meminfo HugePages_Total) + HUGE_NEED - $(huge_free) ))"
    fi
    before=$(cat /proc/sys/vm/nr_hugepages)
    want=$(( before + HUGE_NEED - $(huge_free) ))
    echo "bench-read-test: reserving huge pages for the run: vm.nr_hugepages $before -> $want (put back on exit)" >&2
    HUGE_BEFORE=$before
    echo "$want" >/proc/sys/vm/nr_hugepages
    [ "$(huge_free)" -ge "$HUGE_NEED" ] \
        || die "the kernel found only $(huge_free) of $HUGE_NEED huge pages (memory too fragmented): try again after freeing memory"
fi

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

# Runs a command with its stdout to the file OUT; prints the user + system
# CPU seconds of it (all its processes and threads) per GiB of FILE.
whole_cpu() {
    local out=$1 t
    shift
    t=$( { TIMEFORMAT='%U %S'; time "$@" >"$out"; } 2>&1 | tail -n1 )
    awk -v u="${t% *}" -v s="${t#* }" -v b="$SIZE" -v g="$GIB" 'BEGIN { print (u + s) / (b / g) }'
}

# fio's job on FILE with bs=CHUNK, iodepth=THREADS; extra arguments added:
# "GiB/s read_cpu_s_per_GiB whole_cpu_s_per_GiB".
fio_job() {
    local out=$TMP/fio.json whole
    cold
    whole=$(whole_cpu /dev/null fio --name=job --filename="$FILE" --readonly --rw=read --bs="$CHUNK" \
        --iodepth="$THREADS" --ioengine=io_uring --direct=1 "$@" \
        --output-format=json --output="$out")
    echo "$(fio_figures "$out") $whole"
}
fio_ceiling() { fio_job --iomem=mmaphuge; }
fio_4k() { fio_job; }

# read-test's own eviction and mincore check run before its read.
read_test() {
    local whole
    cold
    whole=$(whole_cpu "$TMP/rt.json" "$BIN" read-test --json --cache cold --rounds 1 \
        --methods "$1" --threads "$THREADS" --chunk "$CHUNK" "$FILE")
    jq -r --argjson gib "$GIB" --arg whole "$whole" '
        (.destination.backing) as $b
        | .methods[0] |
        if .status == "ok" then
            "\(.rate_bytes_per_sec_median / $gib) \(.cpu_seconds_per_gib_median) \($whole) \($b)"
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
echo "  ceiling: fio io_uring direct bs=$CHUNK iodepth=$THREADS iomem=mmaphuge ($(huge_free) huge pages of ${HUGE_KB} KiB free)"
echo "  fio-4k: the same job with 4 KiB-page buffers"
kept=0
discarded=0
round=0
backing=""
: >"$TMP/kept"
while [ "$kept" -lt "$ROUNDS" ] && [ "$round" -lt "$MAX_ROUNDS" ]; do
    round=$((round + 1))
    read -r c1 c1cpu c1whole < <(fio_ceiling)
    declare -A rate=() cpu=() whole=()
    order=(fio4k direct buffered)
    shift_by=$(( (round - 1) % 3 ))
    order=("${order[@]:$shift_by}" "${order[@]:0:$shift_by}")
    flagged=""
    for step in "${order[@]}"; do
        r="" c="" w="" b=""
        case $step in
            fio4k) read -r r c w < <(fio_4k) ;;
            *) read -r r c w b < <(read_test "$step") ;;
        esac
        if [ "$step" = buffered ]; then
            cold
            sleep "$SETTLE_AFTER_BUFFERED"
        fi
        [ -n "${r:-}" ] || die "the $step run failed"
        if [ "$r" = flagged ]; then flagged="$step: $c $w $b"; r=0; c=0; w=0; fi
        if [ "$step" = direct ] && [ -n "$b" ]; then backing=$b; fi
        rate[$step]=$r
        cpu[$step]=$c
        whole[$step]=$w
    done
    read -r c2 c2cpu c2whole < <(fio_ceiling)
    line=$(printf "round %2d: ceiling %.2f / %.2f GiB/s, fio-4k %.2f, direct %.2f, buffered %.2f  (order: %s)" \
        "$round" "$c1" "$c2" "${rate[fio4k]}" "${rate[direct]}" "${rate[buffered]}" "${order[*]}")
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
        mean() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + b) / 2 }'; }
        echo "$(mean "$c1" "$c2") ${rate[fio4k]} ${rate[direct]} ${rate[buffered]}" \
            "$(mean "$c1cpu" "$c2cpu") ${cpu[fio4k]} ${cpu[direct]} ${cpu[buffered]}" \
            "$(mean "$c1whole" "$c2whole") ${whole[fio4k]} ${whole[direct]} ${whole[buffered]}" >>"$TMP/kept"
    fi
done

echo
echo "result: $kept rounds kept, $discarded discarded; median (min–max) over the kept rounds"
if [ "$kept" -eq 0 ]; then
    die "no round kept: the machine's reads are too unsteady (raise MAX_ROUNDS or SETTLE)"
fi
echo "  read-test's destination: ${backing:-unknown}"
col() { awk -v c="$1" '{ print $c }' "$TMP/kept" | stats; }
ratio() { awk -v a="$1" -v b="$2" '{ if ($b > 0) print $a / $b }' "$TMP/kept" | stats; }
printf "  %-34s %s\n" "direct / fio ceiling (goal >= 1)" "$(ratio 3 1)"
printf "  %-34s %s\n" "direct / buffered" "$(ratio 3 4)"
printf "  %-34s %s\n" "direct / fio-4k" "$(ratio 3 2)"
printf "  %-34s %s\n" "fio-4k / fio ceiling" "$(ratio 2 1)"
printf "  %-34s %s\n" "GiB/s fio ceiling" "$(col 1)"
printf "  %-34s %s\n" "GiB/s fio-4k" "$(col 2)"
printf "  %-34s %s\n" "GiB/s direct" "$(col 3)"
printf "  %-34s %s\n" "GiB/s buffered" "$(col 4)"
printf "  %-34s %s\n" "read CPU s/GiB fio ceiling" "$(col 5)"
printf "  %-34s %s\n" "read CPU s/GiB fio-4k" "$(col 6)"
printf "  %-34s %s\n" "read CPU s/GiB direct" "$(col 7)"
printf "  %-34s %s\n" "read CPU s/GiB buffered" "$(col 8)"
printf "  %-34s %s\n" "process CPU s/GiB fio ceiling" "$(col 9)"
printf "  %-34s %s\n" "process CPU s/GiB fio-4k" "$(col 10)"
printf "  %-34s %s\n" "process CPU s/GiB direct" "$(col 11)"
printf "  %-34s %s\n" "process CPU s/GiB buffered" "$(col 12)"
printf "  %-34s %s\n" "process CPU direct / fio ceiling" "$(ratio 11 9)"
if [ "$kept" -lt "$ROUNDS" ]; then
    die "only $kept of $ROUNDS rounds kept: the figures above are weaker than asked for"
fi
