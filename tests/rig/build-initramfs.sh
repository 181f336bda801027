#!/usr/bin/env bash
# Builds the rig's initramfs (an uncompressed newc cpio: nothing to inflate
# under TCG) for one fetched kernel:
#
#   tests/rig/build-initramfs.sh KERNEL_DIR BTRFS_LAB OUT.cpio
#
# KERNEL_DIR is what fetch-kernel.sh made (kernel.env, root/). It holds:
#   - busybox (Debian's busybox-static) as /bin/busybox, its applets linked;
#   - the kernel's nvme and btrfs modules with every dependency, soft ones
#     included (crc32c is a softdep of btrfs that modules.dep does not name),
#     and device-mapper's dm-mod and dm-flakey (the power-cut test puts a
#     filesystem on a flakey table), decompressed, in load order
#     (/rig/modules.order);
#   - BTRFS_LAB (stripped), btrfs-progs, fio, chattr/lsattr, wipefs (device
#     add checks a new drive for signatures), dmsetup, with the shared
#     libraries ldd names;
#   - tests/rig/guest-init as /init.
# The scenario is a second cpio the test appends (the kernel unpacks
# concatenated archives in order). Exit 2: bad usage; 4: a tool is missing.
set -euo pipefail
die() { echo "rig: build-initramfs: $1" >&2; exit "${2:-1}"; }
[ $# -eq 3 ] || die "usage: build-initramfs.sh KERNEL_DIR BTRFS_LAB OUT.cpio" 2
kdir=$1 lab=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$PATH:/usr/sbin:/sbin"
for t in cpio modprobe busybox ldd strip; do
    command -v "$t" >/dev/null || die "$t not found (run scripts/install-rig-deps.sh)" 4
done
[ -f "$kdir/kernel.env" ] || die "$kdir/kernel.env missing: fetch the kernel first (tests/rig/fetch-kernel.sh)" 2
# shellcheck source=/dev/null
. "$kdir/kernel.env"
root=$kdir/root
busybox=$(command -v busybox)
file -b "$busybox" 2>/dev/null | grep -q 'statically linked' \
    || [ -x /bin/busybox ] || die "busybox is not static: install busybox-static" 4

stage=$(mktemp -d "${out}.stage.XXXXXX")
trap 'rm -rf -- "$stage"' EXIT
mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,mnt,rig/modules,lib64,lib/x86_64-linux-gnu}
cp "$busybox" "$stage/bin/busybox"

# Modules: modprobe --show-depends follows modules.dep and softdeps, in load
# order ("insmod PATH" lines; "builtin NAME" for what the kernel has built in).
: >"$stage/rig/modules.order"
for m in nvme crc32c crc32c-intel crc32c_generic xxhash64 sha256 blake2b-256 btrfs dm-mod dm-flakey; do
    modprobe -d "$root" -S "$KREL" --show-depends "$m" 2>/dev/null || true
done | awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++' | while read -r path; do
    name=$(basename "$path")
    case $name in
        *.ko.xz) xz -dc "$path" >"$stage/rig/modules/${name%.xz}"; name=${name%.xz} ;;
        *.ko.zst) zstd -qdc "$path" >"$stage/rig/modules/${name%.zst}"; name=${name%.zst} ;;
        *.ko.gz) gzip -dc "$path" >"$stage/rig/modules/${name%.gz}"; name=${name%.gz} ;;
        *) cp "$path" "$stage/rig/modules/$name" ;;
    esac
    echo "$name" >>"$stage/rig/modules.order"
done
grep -q '^btrfs\.ko$' "$stage/rig/modules.order" \
    || grep -q '/btrfs\.ko' "$root/lib/modules/$KREL/modules.builtin" \
    || die "no btrfs module in $PACKAGE $VERSION"
grep -q '^dm-flakey\.ko$' "$stage/rig/modules.order" \
    || grep -q '/dm-flakey\.ko' "$root/lib/modules/$KREL/modules.builtin" \
    || die "no dm-flakey module in $PACKAGE $VERSION"

# Userland: the host's tools and the libraries their loader loads.
copy_with_libs() {
    local src=$1 dst=$2
    cp -L "$src" "$stage$dst"
    ldd "$src" 2>/dev/null | awk '/=>/ { print $3 } /^[ \t]*\// { print $1 }' | while read -r lib; do
        [ -f "$lib" ] || continue
        mkdir -p "$stage$(dirname "$lib")"
        [ -e "$stage$lib" ] || cp -L "$lib" "$stage$lib"
    done
}
strip -o "$stage/usr/bin/btrfs-lab" "$lab" 2>/dev/null || cp "$lab" "$stage/usr/bin/btrfs-lab"
chmod 0755 "$stage/usr/bin/btrfs-lab"
ldd "$lab" 2>/dev/null | awk '/=>/ { print $3 } /^[ \t]*\// { print $1 }' | while read -r lib; do
    [ -f "$lib" ] || continue
    mkdir -p "$stage$(dirname "$lib")"
    [ -e "$stage$lib" ] || cp -L "$lib" "$stage$lib"
done
for tool in btrfs mkfs.btrfs fio chattr lsattr wipefs dmsetup; do
    p=$(command -v "$tool") || die "$tool not found (run scripts/install-rig-deps.sh)" 4
    case $tool in mkfs.* | wipefs | dmsetup) d=/usr/sbin ;; *) d=/usr/bin ;; esac
    copy_with_libs "$p" "$d/$tool"
done

cp "$here/guest-init" "$stage/init"
chmod 0755 "$stage/init"
cat >"$stage/rig/kernel.env" <"$kdir/kernel.env"
ln -s /proc/mounts "$stage/etc/mtab"
echo "root:x:0:0:root:/:/bin/sh" >"$stage/etc/passwd"
echo "root:x:0:" >"$stage/etc/group"
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) >"$out.tmp"
mv "$out.tmp" "$out"
