#!/usr/bin/env bash
# Times `btrfs-lab nocow --check DIR` (the listing, and --json) against
# `lsattr -R DIR` (its listing) on the same
# tree in the same run (interleaved rounds, warm caches for both: what is
# compared is the per-file work, one open, stat, attribute ioctl and close
# for lsattr), and counts the system calls each makes per file (strace -c).
# A round whose reference time differs from the median reference by more
# than 50% (this VM's disk slows now and then) is reported and left out.
#
#   scripts/bench-nocow-check.sh [FILES] [ROUNDS]
#
# As root: makes a sandbox btrfs and removes it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

files="${1:-50000}"
rounds="${2:-7}"
lab=$PWD/target/release/btrfs-lab
cargo build --release --locked -q

state=$(mktemp -d /var/tmp/bench-nocow-check.XXXXXX)
sbx=(--state-dir "$state/state" --sandbox-root "$state/sandboxes")
cleanup() { "$lab" "${sbx[@]}" sandbox down --yes --all >/dev/null || true; rm -rf "$state"; }
trap cleanup EXIT
mnt=$("$lab" "${sbx[@]}" sandbox up --json --device-size 2G |
    sed -n 's/^  "mount_point": "\(.*\)",$/\1/p')

# The tree: FILES small files in directories of 1000, one NOCOW directory.
tree="$mnt/tree"
mkdir "$tree"
python3 - "$tree" "$files" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 1000}")
    if i % 1000 == 0:
        os.mkdir(d)
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        f.write(b"x" * 100)
PY
chattr +C "$tree/d0"
sync -f "$tree"

now() { date +%s%N; }
lab_ns=() ref_ns=() json_ns=()
for ((r = 1; r <= rounds; r++)); do
    t0=$(now); lsattr -R "$tree" >/dev/null; t1=$(now)
    "$lab" nocow --check "$tree" >/dev/null || [ $? -eq 6 ]; t2=$(now)
    "$lab" --json nocow --check "$tree" >/dev/null || [ $? -eq 6 ]; t3=$(now)
    ref_ns+=($((t1 - t0))) lab_ns+=($((t2 - t1))) json_ns+=($((t3 - t2)))
done

median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ref_med=$(median "${ref_ns[@]}")
kept_lab=() kept_ref=() kept_json=()
for ((i = 0; i < rounds; i++)); do
    ref=${ref_ns[i]}
    if ((ref * 2 > ref_med * 3 || ref * 2 < ref_med)); then
        echo "round $((i + 1)): lsattr took ${ref} ns against a median of ${ref_med} ns: left out"
        continue
    fi
    kept_lab+=("${lab_ns[i]}") kept_ref+=("$ref") kept_json+=("${json_ns[i]}")
done
lab_med=$(median "${kept_lab[@]}")
json_med=$(median "${kept_json[@]}")
ref_kept=$(median "${kept_ref[@]}")

calls() { strace -f -c -o "$state/strace.txt" "$@" >/dev/null || true; awk '$NF == "total" {print $4}' "$state/strace.txt"; }
lab_calls=$(calls "$lab" nocow --check "$tree")
ref_calls=$(calls lsattr -R "$tree")

awk -v f="$files" -v l="$lab_med" -v j="$json_med" -v r="$ref_kept" -v lc="$lab_calls" -v rc="$ref_calls" -v k="${#kept_lab[@]}" -v n="$rounds" 'BEGIN {
    printf "files: %d, rounds kept: %d of %d\n", f, k, n
    printf "lsattr -R:           %8.1f ms  %5.2f system calls per file\n", r / 1e6, rc / f
    printf "btrfs-lab nocow --check: %8.1f ms  %5.2f system calls per file\n", l / 1e6, lc / f
    printf "btrfs-lab --json nocow --check: %8.1f ms\n", j / 1e6
    printf "ratio (btrfs-lab / lsattr): %.2fx time (--json %.2fx), %.2fx system calls\n", l / r, j / r, lc / rc
}'
