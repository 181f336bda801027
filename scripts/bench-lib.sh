# Shared by the scripts/bench-*.sh that time btrfs-lab against a reference
# in interleaved rounds: source it after `cd` to the repository.
#
#   bench_binary      sets $lab: $BTRFS_LAB, else the release build (built)
#   now               nanoseconds since the epoch
#   median            the median of the numbers on stdin, one a line
#   secs NS           NS nanoseconds as seconds, two decimals

bench_binary() {
    if [ -n "${BTRFS_LAB:-}" ]; then
        lab=$(realpath "$BTRFS_LAB")
    else
        lab=$PWD/target/release/btrfs-lab
        cargo build --release --locked -q
    fi
}

now() { date +%s%N; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
secs() { awk -v n="$1" 'BEGIN { printf "%.2f", n / 1e9 }'; }
