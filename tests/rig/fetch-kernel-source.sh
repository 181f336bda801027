#!/usr/bin/env bash
# Fetches the btrfs source of one kernel the rig boots: Debian's
# linux-source-X.Y package of the same version as the kernel in
# CACHE/SUITE/kernel.env (fetch-kernel.sh first), with the same private apt
# state (CACHE/SUITE/apt: never the machine's apt configuration), and keeps
# only what decides what an O_DIRECT write on btrfs does and what can be
# traced of it: fs/btrfs/, fs/iomap/, mm/page-writeback.c and the trace
# event headers include/trace/events/{btrfs,writeback,filemap}.h with
# include/linux/iomap.h (Debian's
# patches applied, as Debian builds the kernel):
#
#   tests/rig/fetch-kernel-source.sh SUITE CACHE
#
# On success CACHE/SUITE/src/ holds those files and SOURCE.env (PACKAGE=,
# VERSION=). Used to check the rig's expected probe-dio verdicts
# (tests/it/rig/scenarios.rs, docs/rig.md); not run by the tests.
# Exit 2: bad usage; 3: no linux-source of that version; 1: anything else.
set -euo pipefail
die() { echo "rig: fetch-kernel-source: $1" >&2; exit "${2:-1}"; }
[ $# -eq 2 ] || die "usage: fetch-kernel-source.sh SUITE CACHE" 2
suite=$1 cache=$2
out=$cache/$suite
[ -s "$out/kernel.env" ] || die "$out/kernel.env missing: run tests/rig/fetch-kernel.sh $suite $cache first" 2
version=$(sed -n 's/^VERSION=//p' "$out/kernel.env")
krel=$(sed -n 's/^KREL=//p' "$out/kernel.env")
series=$(sed -E 's/^([0-9]+\.[0-9]+).*/\1/' <<<"$krel")
apt_dir=$out/apt
apt_opts=(
    -o "Dir::Etc::SourceList=/dev/null"
    -o "Dir::Etc::SourceParts=$apt_dir/etc/sources.d"
    -o "Dir::Etc::Preferences=/dev/null"
    -o "Dir::Etc::PreferencesParts=$apt_dir/etc/preferences.d"
    -o "Dir::Etc::Parts=$apt_dir/etc/apt.conf.d"
    -o "Dir::State=$apt_dir"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::State::status=$apt_dir/status"
    -o "Dir::Cache=$apt_dir"
    -o "Dir::Cache::Archives=$apt_dir/archives"
    -o "APT::Architecture=amd64"
    -o "APT::Architectures::=amd64"
    -o "Debug::NoLocking=1"
)
pkg=linux-source-$series
apt-cache "${apt_opts[@]}" show "$pkg=$version" >/dev/null 2>&1 \
    || die "no $pkg=$version in $suite's package lists ($apt_dir/lists)" 3
rm -rf -- "$out/src"
mkdir -p "$out/src.tmp"
chmod 0755 "$out/src.tmp"
# A download an interrupted run left is used again.
deb=$(ls "$out/src.tmp"/"${pkg}_"*.deb 2>/dev/null | head -n1 || true)
if [ -z "$deb" ]; then
    (cd "$out/src.tmp" && apt-get "${apt_opts[@]}" -q download "$pkg=$version" >download.log 2>&1) \
        || { cat "$out/src.tmp/download.log" >&2; die "apt-get download $pkg=$version failed"; }
    deb=$(ls "$out/src.tmp"/"${pkg}_"*.deb)
fi
rm -rf -- "$out/src.tmp/fs" "$out/src.tmp/mm" "$out/src.tmp/include"
dpkg-deb --fsys-tarfile "$deb" | tar -xO --wildcards '*usr/src/linux-source-*.tar.*' \
    | tar -xJ -C "$out/src.tmp" --wildcards --strip-components=1 \
        '*/fs/btrfs/*' '*/fs/iomap/*' '*/mm/page-writeback.c' \
        '*/include/trace/events/btrfs.h' '*/include/trace/events/writeback.h' \
        '*/include/trace/events/filemap.h' '*/include/linux/iomap.h'
rm -f -- "$deb" "$out/src.tmp/download.log"
printf 'PACKAGE=%s\nVERSION=%s\n' "$pkg" "$version" >"$out/src.tmp/SOURCE.env"
mv "$out/src.tmp" "$out/src"
echo "rig: $suite: $pkg $version: $(find "$out/src/fs/btrfs" -name '*.c' | wc -l) files in $out/src/fs/btrfs"
