#!/usr/bin/env bash
# Times `btrfs-lab df MOUNT --json` against `btrfs --format json filesystem df
# MOUNT` in the same run: interleaved rounds of N calls each, and prints the
# median time per call of each and their ratio. Both read the same ioctl, so
# this measures the overhead around it (process start, parsing, output).
# The two alternate which goes first in each round. A round whose btrfs time
# is off the median of btrfs's by more than TOLERANCE (default 0.15) is
# discarded: the VM's disk and caches slow down for a while after GiB of
# memory is freed, and such a round measures that, not the two tools.
#
#   scripts/bench-df.sh [MOUNT] [ROUNDS] [CALLS]
#   LAB=path/to/btrfs-lab scripts/bench-df.sh ...   (default: the dynamic
#   release build; dist/btrfs-lab is the static one)
#
# Without MOUNT (as root) it makes a sandbox btrfs and removes it afterwards.
# It first checks that both tools report the same records.
set -euo pipefail
cd "$(dirname "$0")/.."

mount="${1:-}"
rounds="${2:-7}"
calls="${3:-200}"
lab=${LAB:-./target/release/btrfs-lab}
tolerance=${TOLERANCE:-0.15}
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
    if ((r % 2)); then
        a=$(time_calls "$lab" df --json "$mount")
        b=$(time_calls "$progs" --format json filesystem df "$mount")
    else
        b=$(time_calls "$progs" --format json filesystem df "$mount")
        a=$(time_calls "$lab" df --json "$mount")
    fi
    lab_ns+=("$a") progs_ns+=("$b")
    ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')")
    printf 'round %d: btrfs-lab %6.1f us  btrfs %6.1f us  ratio %s\n' "$r" \
        "$(awk -v n="$a" 'BEGIN { print n / 1000 }')" "$(awk -v n="$b" 'BEGIN { print n / 1000 }')" "${ratios[-1]}"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# Rounds whose reference agrees with the others.
ref=$(median "${progs_ns[@]}")
kept_lab=() kept_progs=() kept_ratios=()
for ((i = 0; i < rounds; i++)); do
    if awk -v b="${progs_ns[$i]}" -v m="$ref" -v t="$tolerance" 'BEGIN { d = b / m - 1; exit !(d < -t || d > t) }'; then
        printf 'round %d discarded: btrfs took %.1f us, %+.0f%% off its median\n' $((i + 1)) \
            "$(awk -v n="${progs_ns[$i]}" 'BEGIN { print n / 1000 }')" \
            "$(awk -v b="${progs_ns[$i]}" -v m="$ref" 'BEGIN { print (b / m - 1) * 100 }')"
    else
        kept_lab+=("${lab_ns[$i]}") kept_progs+=("${progs_ns[$i]}") kept_ratios+=("${ratios[$i]}")
    fi
done
if ((${#kept_ratios[@]} * 2 < rounds)); then
    echo "bench-df: fewer than half the rounds agree: all kept (a busy machine; run it again)"
    kept_lab=("${lab_ns[@]}") kept_progs=("${progs_ns[@]}") kept_ratios=("${ratios[@]}")
fi
printf '\nmedian per call over %d of %d rounds of %d calls: btrfs-lab df --json %.1f us, btrfs --format json filesystem df %.1f us\n' \
    "${#kept_ratios[@]}" "$rounds" "$calls" "$(awk -v n="$(median "${kept_lab[@]}")" 'BEGIN { print n / 1000 }')" \
    "$(awk -v n="$(median "${kept_progs[@]}")" 'BEGIN { print n / 1000 }')"
printf 'time ratio btrfs-lab / btrfs: median %s (min %s, max %s)\n' "$(median "${kept_ratios[@]}")" \
    "$(printf '%s\n' "${kept_ratios[@]}" | sort -g | head -1)" "$(printf '%s\n' "${kept_ratios[@]}" | sort -g | tail -1)"
