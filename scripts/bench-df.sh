#!/usr/bin/env bash
# Times `btrfs-lab df MOUNT --json` against `btrfs --format json filesystem df
# MOUNT` in the same run: interleaved rounds of N calls each, and prints the
# median time per call of each and their ratio. Both read the same ioctl, so
# this measures the overhead around it (process start, parsing, output).
#
#   scripts/bench-df.sh [MOUNT] [ROUNDS] [CALLS]
#
# Without MOUNT (as root) it makes a sandbox btrfs and removes it afterwards.
# It first checks that both tools report the same records.
set -euo pipefail
cd "$(dirname "$0")/.."

mount="${1:-}"
rounds="${2:-7}"
calls="${3:-200}"
lab=./target/release/btrfs-lab
[ -x "$lab" ] || cargo build --release --locked -q
progs=$(command -v btrfs) || { echo "bench-df: btrfs not found (apt-get install btrfs-progs)" >&2; exit 1; }

cleanup() { :; }
if [ -z "$mount" ]; then
    state=$(mktemp -d /var/tmp/bench-df.XXXXXX)
    sbx=(--state-dir "$state/state" --sandbox-root "$state/sandboxes")
    cleanup() { "$lab" "${sbx[@]}" sandbox down --yes --all >/dev/null || true; rm -rf "$state"; }
    trap cleanup EXIT
    mount=$("$lab" "${sbx[@]}" sandbox up --json --devices 3 --device-size 1G --data raid0 --metadata raid1 |
        sed -n 's/^  "mount_point": "\(.*\)",$/\1/p')
fi

# Same answer first: the records of both, as "type profile total used".
ours=$("$lab" df --json "$mount" | "$lab" df --parse -b | sort)
theirs=$("$progs" --format json filesystem df "$mount" | "$lab" df --parse -b | sort)
if [ "$ours" != "$theirs" ]; then
    echo "bench-df: the two disagree:" >&2
    diff <(echo "$ours") <(echo "$theirs") >&2 || true
    exit 1
fi

time_calls() { # prints nanoseconds per call
    local start end i
    start=$(date +%s%N)
    for ((i = 0; i < calls; i++)); do "$@" >/dev/null; done
    end=$(date +%s%N)
    echo $(((end - start) / calls))
}

lab_ns=() progs_ns=() ratios=()
for ((r = 1; r <= rounds; r++)); do
    a=$(time_calls "$lab" df --json "$mount")
    b=$(time_calls "$progs" --format json filesystem df "$mount")
    lab_ns+=("$a") progs_ns+=("$b")
    ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')")
    printf 'round %d: btrfs-lab %6.1f us  btrfs %6.1f us  ratio %s\n' "$r" \
        "$(awk -v n="$a" 'BEGIN { print n / 1000 }')" "$(awk -v n="$b" 'BEGIN { print n / 1000 }')" "${ratios[-1]}"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '\nmedian per call over %d rounds of %d calls: btrfs-lab df --json %.1f us, btrfs --format json filesystem df %.1f us\n' \
    "$rounds" "$calls" "$(awk -v n="$(median "${lab_ns[@]}")" 'BEGIN { print n / 1000 }')" \
    "$(awk -v n="$(median "${progs_ns[@]}")" 'BEGIN { print n / 1000 }')"
printf 'time ratio btrfs-lab / btrfs: median %s (min %s, max %s)\n' "$(median "${ratios[@]}")" \
    "$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)" "$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)"
