#!/usr/bin/env bash
# Benchmarks the create phase of `btrfs-lab bench --small-files` against a C
# reference doing the same work, in the same run, and prints the median
# ratio with its spread:
#
#   scripts/bench-metadata.sh [DIR]
#
# The reference (built here with cc) is the ceiling for this work: the same
# layout (FILES_PER_DIR files a directory, named d%06d/f%09d), the same
# threads (each takes the next directory, opens it once and creates its
# files relative to that descriptor: openat(dfd, name,
# O_CREAT|O_EXCL|O_WRONLY|O_CLOEXEC|O_NOFOLLOW, 0600) + close, nothing else
# per file), the directories made first, the same clock (first mkdir to the
# last close, the syncfs apart).
#
# Every run gets a fresh sandbox (one 2 GiB loop device with direct I/O,
# btrfs with mkfs's defaults), made under DIR (default /var/tmp) with
# `btrfs-lab sandbox up` and removed after the run. A round is, per thread
# count: reference, bench, reference (each on its own fresh sandbox), the
# ratio being bench / mean of the two references. This VM's disk slows for
# 5-15 s after several GiB of memory is freed (the sandboxes' teardown does
# that): a round whose two reference runs differ by more than 10% is
# discarded, and counted.
#
# The reference then does the rest of bench's run too (drop the caches, stat
# every file, delete them, syncfs): the whole run's CPU time (user + system,
# bash's `time`) gives a second ratio, reference / bench, that the load of
# the machine hardly moves: does bench spend more per file?
#
# Every run starts the same way: the three sandboxes of a round made first,
# then per run `sync`, drop_caches and SETTLE seconds; the reference and bench both at
# nice NICE (the VM's two cores are shared with builds: at nice 0 the
# reference alone varied 16,000-40,000 files/s between runs).
#
# Environment: FILES (30000), THREADS ("1 4"), ROUNDS (11), SETTLE (3), NICE
# (-20), BTRFS_LAB (the
# binary; default target/release/btrfs-lab, built if missing). Needs root,
# jq, cc. Prints one line per run and a summary per thread count.
set -euo pipefail

die() { echo "bench-metadata: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (loop devices)"
command -v jq >/dev/null || die "jq not found: apt-get install jq"
command -v cc >/dev/null || die "cc not found: apt-get install gcc"
PARENT=$(realpath "${1:-/var/tmp}")
[ -d "$PARENT" ] || die "$PARENT is not a directory"

FILES=${FILES:-30000}
THREADS=${THREADS:-1 4}
ROUNDS=${ROUNDS:-11}
SETTLE=${SETTLE:-3}
NICE=${NICE:--20}

cd "$(dirname "$0")/.."
BIN=$(realpath "${BTRFS_LAB:-target/release/btrfs-lab}")
if [ ! -x "$BIN" ]; then
    echo "bench-metadata: building $BIN" >&2
    cargo build --release --quiet
fi

WORK=$(mktemp -d "$PARENT/.bench-metadata-XXXXXX")
LAB=("$BIN" --state-dir "$WORK/state" --sandbox-root "$WORK/sandboxes")
cleanup() {
    # Every sandbox this script made, then its directory.
    for n in $(ls "$WORK/state" 2>/dev/null | sed -n 's/\.json$//p'); do
        "${LAB[@]}" sandbox down --yes "$n" >/dev/null 2>&1 || echo "bench-metadata: could not remove sandbox $n" >&2
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

cat >"$WORK/create.c" <<'C'
/* The reference: see scripts/bench-metadata.sh. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PER_DIR 1000
static long files, dirs;
static int root;
static atomic_long next_dir;
static atomic_int failed;
static int op; /* 0 create, 1 stat, 2 unlink */

static void *worker(void *arg) {
    (void)arg;
    char name[32];
    struct stat st;
    for (;;) {
        long d = atomic_fetch_add(&next_dir, 1);
        if (d >= dirs || atomic_load(&failed)) return NULL;
        snprintf(name, sizeof name, "d%06ld", d);
        int dfd = openat(root, name, O_DIRECTORY | O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (dfd < 0) { perror("openat dir"); atomic_store(&failed, 1); return NULL; }
        long hi = (d + 1) * PER_DIR < files ? (d + 1) * PER_DIR : files;
        for (long i = d * PER_DIR; i < hi; i++) {
            snprintf(name, sizeof name, "f%09ld", i);
            if (op == 0) {
                int fd = openat(dfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (fd < 0) { perror("openat"); atomic_store(&failed, 1); break; }
                close(fd);
            } else if (op == 1 ? fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) : unlinkat(dfd, name, 0)) {
                perror("stat/unlink"); atomic_store(&failed, 1); break;
            }
        }
        close(dfd);
    }
}

static double secs(struct timespec a, struct timespec b) {
    return (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
}

/* One phase over all the files by the threads. */
static void phase(int which, int threads) {
    pthread_t t[256];
    op = which;
    atomic_store(&next_dir, 0);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: create DIR FILES THREADS\n"); return 2; }
    files = atol(argv[2]);
    int threads = atoi(argv[3]);
    dirs = (files + PER_DIR - 1) / PER_DIR;
    int parent = open(argv[1], O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (parent < 0) { perror("open"); return 1; }
    if (mkdirat(parent, "ref", 0700)) { perror("mkdirat"); return 1; }
    root = openat(parent, "ref", O_DIRECTORY | O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct timespec a, b, c;
    clock_gettime(CLOCK_MONOTONIC, &a);
    char name[32];
    for (long d = 0; d < dirs; d++) {
        snprintf(name, sizeof name, "d%06ld", d);
        if (mkdirat(root, name, 0700)) { perror("mkdirat"); return 1; }
    }
    phase(0, threads);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (atomic_load(&failed)) return 1;
    syncfs(root);
    clock_gettime(CLOCK_MONOTONIC, &c);
    printf("%.1f %.4f\n", files / secs(a, b), secs(b, c));
    fflush(stdout);
    /* The rest of bench's run, for the CPU comparison: caches dropped, a
       cold stat, the deletes and their sync. */
    int dc = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
    if (dc >= 0) { sync(); if (write(dc, "3", 1) != 1) perror("drop_caches"); close(dc); }
    phase(1, threads);
    phase(2, threads);
    for (long d = 0; d < dirs; d++) {
        snprintf(name, sizeof name, "d%06ld", d);
        if (unlinkat(root, name, AT_REMOVEDIR)) { perror("rmdir"); return 1; }
    }
    syncfs(root);
    return atomic_load(&failed);
}
C
cc -O2 -pthread -o "$WORK/create" "$WORK/create.c"

# A fresh sandbox; prints its mount point.
fresh() {
    "${LAB[@]}" sandbox up --json --name "r$1" --size 2G | jq -r .mount_point
}
# Removes it; a loop device can be held for a moment by udev or another
# process's `btrfs device scan`: try again.
gone() {
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        "${LAB[@]}" sandbox down --yes "r$1" >/dev/null 2>&1 && return 0
        sleep 1
    done
    "${LAB[@]}" sandbox down --yes "r$1" >/dev/null
}
# The same start for every run: everything written back, the caches
# dropped (so the drop each run does before its cold stat costs the same
# to both), then SETTLE seconds for the disk to recover from the freed
# memory.
# Both run at the same nice level, above the builds that share this VM.
settle() { sync; echo 3 >/proc/sys/vm/drop_caches; sleep "$SETTLE"; }
# Each prints "files/s-of-the-creates cpu-seconds-of-the-whole-run" (user +
# system of the process: create, sync, cold stat, delete, sync; bench's
# start-up included).
TIMEFORMAT='%U %S'
cpu() { awk '{print $1 + $2}' "$WORK/time"; }
ref_run() { # MOUNT THREADS
    settle
    local f
    { time nice -n "$NICE" "$WORK/create" "$1" "$FILES" "$2" >"$WORK/out"; } 2>"$WORK/time"
    f=$(cut -d' ' -f1 "$WORK/out")
    echo "$f $(cpu)"
}
bench_run() { # MOUNT THREADS
    settle
    local f
    { time nice -n "$NICE" "${LAB[@]}" bench --json --small-files --files "$FILES" --threads "$2" "$1" >"$WORK/out"; } 2>"$WORK/time"
    f=$(jq '.phases[0].files_per_sec' "$WORK/out")
    echo "$f $(cpu)"
}

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

id=0
for t in $THREADS; do
    : >"$WORK/ratios.$t"; : >"$WORK/cpu.$t"
    discarded=0
    for r in $(seq "$ROUNDS"); do
        id=$((id + 1))
        # Three fresh sandboxes first, so the three runs follow each other.
        ma=$(fresh "$id-a"); mb=$(fresh "$id-b"); mc=$(fresh "$id-c")
        read -r a ca <<<"$(ref_run "$ma" "$t")"
        read -r b cb <<<"$(bench_run "$mb" "$t")"
        read -r c cc <<<"$(ref_run "$mc" "$t")"
        gone "$id-a"; gone "$id-b"; gone "$id-c"
        # CPU: the references' mean over bench's (>= 1: bench spends no more).
        echo "$ca $cb $cc" | awk '{print (($1+$3)/2)/$2}' >>"$WORK/cpu.$t"
        spread=$(echo "$a $c" | awk '{d=$1-$2; if (d<0) d=-d; print d/(($1+$2)/2)}')
        ratio=$(echo "$a $b $c" | awk '{print $2/(($1+$3)/2)}')
        if awk -v s="$spread" 'BEGIN {exit !(s > 0.10)}'; then
            discarded=$((discarded + 1))
            printf "threads %s round %s: reference %.0f / %.0f files/s (differ %.0f%%), bench %.0f: discarded; CPU s reference %.3f / %.3f, bench %.3f\n" "$t" "$r" "$a" "$c" "$(echo "$spread * 100" | bc -l)" "$b" "$ca" "$cc" "$cb"
        else
            echo "$ratio" >>"$WORK/ratios.$t"
            printf "threads %s round %s: reference %.0f / %.0f files/s, bench %.0f, ratio %.3f; CPU s reference %.3f / %.3f, bench %.3f\n" "$t" "$r" "$a" "$c" "$b" "$ratio" "$ca" "$cc" "$cb"
        fi
    done
    kept=$(wc -l <"$WORK/ratios.$t")
    if [ "$kept" -eq 0 ]; then
        echo "threads $t: every round discarded ($discarded of $ROUNDS): the machine was not steady"
        continue
    fi
    med=$(median <"$WORK/ratios.$t")
    lo=$(sort -g "$WORK/ratios.$t" | head -1)
    hi=$(sort -g "$WORK/ratios.$t" | tail -1)
    printf "threads %s: create ratio bench/reference median %.3f (min %.3f, max %.3f) over %s rounds, %s discarded; %s files, 1000 a directory\n" \
        "$t" "$med" "$lo" "$hi" "$kept" "$discarded" "$FILES"
    printf "threads %s: CPU ratio reference/bench (whole run, every round) median %.3f (min %.3f, max %.3f)\n" \
        "$t" "$(median <"$WORK/cpu.$t")" "$(sort -g "$WORK/cpu.$t" | head -1)" "$(sort -g "$WORK/cpu.$t" | tail -1)"
done
