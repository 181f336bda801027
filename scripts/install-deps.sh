#!/usr/bin/env bash
# Installs what btrfs-lab needs to build, run and test, on Debian or Ubuntu,
# as root: btrfs-progs, e2fsprogs, util-linux, fio, jq (benchmarks), python3
# (the tests' unprivileged racer, run as uid 65534), chromium (the
# bench HTML report test renders it headless), prometheus (promtool checks
# the doctor metrics and alerting rules), ansible-core (the playbooks in
# contrib/ansible are run against localhost), libclang (for the
# bindgen build of btrfs-uapi), man-db, zsh and fish (the man pages and
# completion scripts are checked with man and the shells), debootstrap
# (scripts/check-old-userland.sh), lintian (scripts/release.sh lints the
# .deb), hyperfine (scripts/bench-startup.sh), file, the QEMU rig's tools
# (qemu-system-x86, busybox-static, cpio, kmod, binutils, xz-utils, zstd:
# docs/rig.md; scripts/install-rig-deps.sh installs them alone), and a Rust
# toolchain if there is none.
# Run it directly, or source it (scripts/demo.sh and scripts/test.sh do) so
# that a freshly installed cargo is on PATH afterwards.

btrfs_lab_install_deps() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: run as root (for example: sudo $0)" >&2
        return 1
    fi
    # mkfs.btrfs, losetup and friends live in sbin.
    export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

    local packages=(btrfs-progs e2fsprogs util-linux fio jq python3 chromium prometheus ansible-core libclang-dev gcc libc6-dev ca-certificates curl man-db zsh fish debootstrap lintian hyperfine file bc qemu-system-x86 busybox-static cpio kmod binutils xz-utils zstd)
    local missing=() p
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "install-deps: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi

    if ! command -v cargo >/dev/null 2>&1; then
        if [ -x "$HOME/.cargo/bin/cargo" ]; then
            export PATH="$HOME/.cargo/bin:$PATH"
        else
            echo "install-deps: no Rust toolchain; installing one with rustup"
            curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
            export PATH="$HOME/.cargo/bin:$PATH"
        fi
    fi

    # Loop devices: the driver may be a module.
    [ -e /dev/loop-control ] || modprobe loop
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    btrfs_lab_install_deps
fi
