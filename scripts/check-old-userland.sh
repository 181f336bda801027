#!/usr/bin/env bash
# Shows that the static binary runs in an old userland and the dynamic build
# does not: makes a Debian 11 (bullseye, glibc 2.31) minbase chroot with
# debootstrap in a temporary directory under /var/tmp, runs in it
#   btrfs-lab --version
#   btrfs-lab df --parse    on a captured `btrfs filesystem df` paste
#   btrfs-lab links --sysroot  on a captured sysfs tree
#   btrfs-lab man df
# with the static binary (each must succeed), then the dynamic build's
# --version (must fail: it needs a newer glibc). Removes the chroot on every
# exit path (and unmounts the /proc it mounted). As root.
#
#   scripts/check-old-userland.sh STATIC_BINARY DYNAMIC_BINARY
# Defaults: dist/btrfs-lab (scripts/release.sh) and target/release/btrfs-lab.
# BTRFS_LAB_DEBIAN_MIRROR overrides the mirror (default deb.debian.org).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

die() { echo "old-userland: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and chroot need it)"
command -v debootstrap >/dev/null || die "debootstrap is not installed (scripts/release.sh installs it: the release set of scripts/install-deps.sh)"

static_bin=${1:-dist/btrfs-lab}
dynamic_bin=${2:-${CARGO_TARGET_DIR:-target}/release/btrfs-lab}
[ -x "$static_bin" ] || die "no $static_bin (run scripts/release.sh first)"
mirror=${BTRFS_LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}

root=$(mktemp -d /var/tmp/btrfs-lab-bullseye.XXXXXX)
proc_mounted=
cleanup() {
    if [ -n "$proc_mounted" ]; then
        umount "$root/proc" || umount -l "$root/proc" || true
    fi
    # Never follow anything out of the chroot: only remove when nothing is
    # mounted below it any more.
    if findmnt -rn -o TARGET | grep -q "^$root/"; then
        echo "old-userland: something is still mounted under $root; left in place" >&2
    else
        rm -rf --one-file-system -- "$root"
    fi
    rm -f -- "$root.log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

echo "old-userland: debootstrap bullseye minbase into $root"
start=$(date +%s)
debootstrap --variant=minbase bullseye "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -n 20 "$root.log" >&2; rm -f "$root.log"; die "debootstrap failed"; }
rm -f "$root.log"
echo "old-userland: debootstrap took $(($(date +%s) - start)) s; $(chroot "$root" ldd --version | head -n1)"
mount -t proc proc "$root/proc"
proc_mounted=1

install -m 0755 "$static_bin" "$root/usr/local/bin/btrfs-lab"
mkdir -p "$root/work"
cp subcommands/df.in/ticket.txt "$root/work/ticket.txt"
# A captured sysfs tree is made of relative symlinks: copy them as links.
cp -a tests/fixtures/links/reference "$root/work/reference"

run() { echo "+ $*"; chroot "$root" "$@"; }
run /usr/local/bin/btrfs-lab --version
run /usr/local/bin/btrfs-lab df --parse /work/ticket.txt
run /usr/local/bin/btrfs-lab links --sysroot /work/reference
lines=$(chroot "$root" /usr/local/bin/btrfs-lab man df | tee "$root/work/df.1" | wc -l)
grep -q '^\.SH "EXIT STATUS"' "$root/work/df.1" || die "man df has no EXIT STATUS section"
echo "+ /usr/local/bin/btrfs-lab man df: $lines roff lines, $(grep -c '^\.SH' "$root/work/df.1") sections"

if [ -x "$dynamic_bin" ]; then
    install -m 0755 "$dynamic_bin" "$root/usr/local/bin/btrfs-lab-dynamic"
    echo "+ /usr/local/bin/btrfs-lab-dynamic --version   (the dynamic build; expected to fail)"
    if chroot "$root" /usr/local/bin/btrfs-lab-dynamic --version; then
        die "the dynamic build ran in bullseye: this check shows nothing"
    else
        echo "old-userland: the dynamic build fails there, as expected (status $?)"
    fi
else
    echo "old-userland: no dynamic build at $dynamic_bin; skipped the before/after"
fi
echo "old-userland: the static binary runs on Debian 11 (total $(($(date +%s) - start)) s)"
