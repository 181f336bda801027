#!/usr/bin/env bash
# Installs what the QEMU rig (docs/rig.md, tests/it/rig/) needs on a Debian
# machine, as root: the `rig` set of scripts/install-deps.sh (asks first on a
# terminal; --yes, CI=true or no terminal go ahead): qemu-system-x86 (the
# emulator), busybox-static (the guest's userland), cpio (the initramfs),
# kmod (depmod/modprobe resolve the kernel modules and their soft
# dependencies), binutils (strip), util-linux (flock), e2fsprogs (chattr),
# btrfs-progs, fio and dmsetup (copied into the guest with their libraries;
# dmsetup switches the power-cut test's device-mapper tables), xz-utils and
# zstd (compressed modules). The Debian kernels themselves are fetched
# by the tests (tests/rig/fetch-kernel.sh) into their own cache.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh
BTRFS_LAB_INSTALL_FOR=install-rig-deps btrfs_lab_install "$@" rig
echo "install-rig-deps: $(qemu-system-x86_64 --version | head -n1); busybox $(busybox 2>&1 | head -n1 | awk '{print $2}')"
