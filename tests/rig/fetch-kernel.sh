#!/usr/bin/env bash
# Fetches one Debian kernel (linux-image-*-amd64 of SUITE) with apt into
# CACHE/SUITE/, using a private apt state directory and its own sources file:
# the machine's apt configuration, lists and cache are never read or written.
#
#   tests/rig/fetch-kernel.sh SUITE CACHE
#
# SUITE: bookworm | bookworm-backports | trixie | trixie-backports | sid
# On success CACHE/SUITE/ holds:
#   kernel.env   PACKAGE=, VERSION= (the exact Debian version), KREL= (uname -r),
#                PACKAGES= (every package fetched, NAME=VERSION), VMLINUZ=
#                (the image, relative to root/)
#   root/        the unpacked packages (the image, lib/modules/KREL)
# Re-running with kernel.env present does nothing (the cache); delete the
# directory to fetch again. Exit 2: bad usage; 3: the package is not found;
# 1: anything else (apt's own message is printed).
set -euo pipefail
die() { echo "rig: fetch-kernel: $1" >&2; exit "${2:-1}"; }
[ $# -eq 2 ] || die "usage: fetch-kernel.sh SUITE CACHE" 2
suite=$1 cache=$2
case $suite in
    bookworm | bookworm-backports | trixie | trixie-backports | sid) ;;
    *) die "unknown suite '$suite': use bookworm, bookworm-backports, trixie, trixie-backports or sid" 2 ;;
esac
out=$cache/$suite
mkdir -p "$cache"
# One fetch of a cache at a time (tests run in parallel, the matrix script too).
exec 9>"$cache/.lock"
flock 9
# A cache made by an older version of this script (no VMLINUZ=) is fetched anew.
[ -s "$out/kernel.env" ] && [ -d "$out/root" ] && grep -q '^VMLINUZ=' "$out/kernel.env" && exit 0

mkdir -p "$out"
apt_dir=$out/apt
rm -rf -- "$apt_dir" "$out/root" "$out/debs"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/etc/preferences.d" "$apt_dir/etc/apt.conf.d" "$out/debs"
: >"$apt_dir/status"
# The archive the machine already reaches (its own sources file names it).
uri=$(sed -n 's/^URIs: *\(.*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
uri=${uri:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
{
    echo "Types: deb"
    echo "URIs: $uri"
    echo "Suites: $suite"
    echo "Components: main"
    echo "Signed-By: $keyring"
} >"$apt_dir/etc/rig.sources"
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
    -o "Acquire::Languages=none"
    -o "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
    -o "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false"
    -o "Debug::NoLocking=1"
)
mkdir -p "$apt_dir/etc/sources.d"
mv "$apt_dir/etc/rig.sources" "$apt_dir/etc/sources.d/rig.sources"
apt-get "${apt_opts[@]}" -q update >"$apt_dir/update.log" 2>&1 \
    || { cat "$apt_dir/update.log" >&2; die "apt-get update for $suite failed (see above)"; }
# linux-image-amd64 is the metapackage; the versioned image it depends on is
# the kernel. In the backports suites the metapackage is in the suite too.
image=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 2>/dev/null \
    | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\(-unsigned\)\?\)$/\1/p' | head -n1)
[ -n "$image" ] || die "no linux-image-amd64 in $suite at $uri (apt-cache found no kernel)" 3
version=$(apt-cache "${apt_opts[@]}" show "$image" 2>/dev/null | sed -n 's/^Version: //p' | head -n1)
[ -n "$version" ] || die "package $image not found in $suite" 3
chmod 0755 "$out/debs"
# Newer kernels (7.x) split the image: linux-image-X depends on
# linux-binary-X (vmlinuz) and linux-modules-X (lib/modules): fetch those too.
pkgs=("$image=$version")
while read -r dep; do
    pkgs+=("$dep=$version")
done < <(apt-cache "${apt_opts[@]}" depends "$image=$version" 2>/dev/null \
    | sed -n 's/^ *Depends: \(linux-\(binary\|modules\)-[^ <>]*\)$/\1/p' | sort -u)
(cd "$out/debs" && apt-get "${apt_opts[@]}" -q download "${pkgs[@]}" >"$apt_dir/download.log" 2>&1) \
    || { cat "$apt_dir/download.log" >&2; die "apt-get download ${pkgs[*]} failed"; }
mkdir -p "$out/root.tmp"
for deb in "$out/debs"/*.deb; do
    dpkg-deb -x "$deb" "$out/root.tmp"
done
deb="${pkgs[*]}"
# bookworm ships lib/modules, trixie and later usr/lib/modules (merged /usr).
moddir=lib/modules
[ -d "$out/root.tmp/$moddir" ] || moddir=usr/lib/modules
krel=$(ls "$out/root.tmp/$moddir" 2>/dev/null | head -n1 || true)
[ -n "$krel" ] || die "$deb holds no lib/modules/*"
# The image: boot/vmlinuz-KREL, or (7.x packages) lib/modules/KREL/vmlinuz.
vmlinuz=boot/vmlinuz-$krel
[ -f "$out/root.tmp/$vmlinuz" ] || vmlinuz=$moddir/$krel/vmlinuz
[ -f "$out/root.tmp/$vmlinuz" ] || die "$deb holds no boot/vmlinuz-$krel nor $moddir/$krel/vmlinuz"
[ "$moddir" = lib/modules ] || { mkdir -p "$out/root.tmp/lib"; ln -s ../usr/lib/modules "$out/root.tmp/lib/modules"; }
# modules.dep is made by depmod at install time (a postinst step): make it here.
depmod -b "$out/root.tmp" "$krel" 2>/dev/null || /usr/sbin/depmod -b "$out/root.tmp" "$krel"
rm -f -- "$out/debs"/*.deb
mv "$out/root.tmp" "$out/root"
printf 'PACKAGE=%s\nVERSION=%s\nKREL=%s\nSUITE=%s\nPACKAGES='\''%s'\''\nVMLINUZ=%s\n' "$image" "$version" "$krel" "$suite" "${pkgs[*]}" "$vmlinuz" >"$out/kernel.env.tmp"
mv "$out/kernel.env.tmp" "$out/kernel.env"
cat "$out/kernel.env"
