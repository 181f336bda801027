#!/usr/bin/env bash
# Installs what the QEMU rig (docs/rig.md, tests/it/rig/) needs on a Debian
# machine, as root: qemu-system-x86 (the emulator), busybox-static (the
# guest's userland), cpio (the initramfs), kmod (depmod/modprobe resolve
# the kernel modules and their soft dependencies), binutils (strip),
# util-linux (flock), e2fsprogs (chattr), btrfs-progs and fio (copied into
# the guest with their libraries). The Debian kernels themselves are fetched
# by the tests (tests/rig/fetch-kernel.sh) into their own cache.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "install-rig-deps: run as root" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
pkgs=(qemu-system-x86 busybox-static cpio kmod binutils util-linux e2fsprogs btrfs-progs fio xz-utils zstd)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "install-rig-deps: $(qemu-system-x86_64 --version | head -n1); busybox $(busybox 2>&1 | head -n1 | awk '{print $2}')"
