#!/usr/bin/env bash
# Installs, on Debian or Ubuntu, what one job needs and nothing more. The
# sets (README.md, "What each script installs", gives their sizes):
#   demo     build btrfs-lab and run `btrfs-lab demo` (scripts/demo.sh):
#            btrfs-progs (mkfs.btrfs), util-linux, and the build's own needs:
#            gcc and libc6-dev (rusqlite's bundled SQLite), libclang-dev (the
#            bindgen build of btrfs-uapi), ca-certificates (crates.io), and
#            a Rust toolchain with rustup (and curl) if there is none.
#   test     the whole test suite (scripts/test.sh): demo's, and e2fsprogs
#            (mkfs.ext4, chattr, lsattr, filefrag), fio, python3 (the tests'
#            unprivileged racer, run as uid 65534), chromium (the bench HTML
#            report rendered headless), prometheus (promtool checks the doctor
#            metrics and alerting rules), ansible-core (contrib/ansible's
#            playbooks run against localhost), man-db, zsh and fish (the
#            manual pages and completion scripts), file, systemd
#            (systemd-analyze verifies contrib/systemd's units), python3-venv,
#            and the rig's set; then (btrfs_lab_install_loaders) a Python
#            venv in /var/tmp/btrfs-lab-py with safetensors and numpy from
#            PyPI, pinned: the real loader read-test --pid's tests watch.
#   release  the static binary and the .deb (scripts/release.sh, then
#            scripts/check-package.sh and scripts/check-old-userland.sh, as
#            .ci/run does): the build's needs, file, man-db, lintian and
#            debootstrap.
#   rig      the QEMU rig (docs/rig.md; scripts/install-rig-deps.sh):
#            qemu-system-x86, busybox-static, cpio, kmod, binutils, xz-utils,
#            zstd, util-linux, e2fsprogs, btrfs-progs, fio, dmsetup.
#   bench    the scripts/bench-*.sh comparisons: fio, jq, bc, hyperfine,
#            btrfs-progs.
#
#   scripts/install-deps.sh [--yes] SET...
#
# Only what is missing is installed. On a terminal it asks first; with no
# terminal on stdin, with CI=true, or with --yes it goes ahead. Run by a user
# who is not root it installs nothing: it says what is missing and how to
# install it, and fails. Source it (scripts/demo.sh, test.sh and release.sh
# do) and call `btrfs_lab_install [--yes] SET...` so that a freshly installed
# cargo is on PATH afterwards.

btrfs_lab_packages() {
    local build=(gcc libc6-dev libclang-dev ca-certificates)
    local rig=(qemu-system-x86 busybox-static cpio kmod binutils xz-utils zstd util-linux e2fsprogs btrfs-progs fio dmsetup)
    case $1 in
        demo) echo "${build[*]} btrfs-progs util-linux" ;;
        test) echo "$(btrfs_lab_packages demo) e2fsprogs fio python3 python3-venv chromium prometheus ansible-core man-db zsh fish file systemd ${rig[*]}" ;;
        release) echo "${build[*]} file man-db lintian debootstrap" ;;
        rig) echo "${rig[*]}" ;;
        bench) echo "fio jq bc hyperfine btrfs-progs" ;;
        *) return 1 ;;
    esac
}

btrfs_lab_in_ci() {
    case ${CI:-} in "" | 0 | false) return 1 ;; *) return 0 ;; esac
}

# btrfs_lab_install [--yes] SET...: installs what the sets need and this
# machine lacks; returns non-zero when something stays missing.
btrfs_lab_install() {
    local yes= sets=() s p
    for s in "$@"; do
        case $s in
            --yes | -y) yes=1 ;;
            *) sets+=("$s") ;;
        esac
    done
    local who=${BTRFS_LAB_INSTALL_FOR:-scripts/install-deps.sh ${sets[*]}}
    # mkfs.btrfs, losetup and friends live in sbin.
    export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
    if ! command -v cargo >/dev/null 2>&1 && [ -x "${HOME:-/nonexistent}/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi

    local wanted=() more=() needs_rust=
    for s in "${sets[@]}"; do
        local list
        list=$(btrfs_lab_packages "$s") || {
            echo "install-deps: unknown set '$s': use demo, test, release, rig or bench" >&2
            return 2
        }
        read -r -a more <<<"$list"
        wanted+=("${more[@]}")
        case $s in demo | test | release) needs_rust=1 ;; esac
    done
    local rustup=
    if [ -n "$needs_rust" ] && ! command -v cargo >/dev/null 2>&1; then
        rustup=1
        wanted+=(curl)
    fi

    if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
        echo "$who: this is not Debian or Ubuntu: installing nothing; it needs (Debian's names):" \
            "$(printf '%s\n' "${wanted[@]}" | sort -u | tr '\n' ' ')" >&2
        return 0
    fi
    local missing=()
    for p in $(printf '%s\n' "${wanted[@]}" | sort -u); do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ] && [ -z "$rustup" ]; then
        [ -e /dev/loop-control ] || modprobe loop 2>/dev/null || true
        return 0
    fi

    local what="" how=()
    if [ "${#missing[@]}" -gt 0 ]; then
        what="${#missing[@]} Debian package(s): ${missing[*]}"
        how+=("apt-get install --no-install-recommends ${missing[*]}")
    fi
    if [ -n "$rustup" ]; then
        what="${what:+$what; and }a Rust toolchain (rustup, into ~/.cargo; curl fetches it)"
        how+=("curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal")
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "$who: missing $what" >&2
        echo "$who: as root, run this script again, or install them yourself:" >&2
        printf '    %s\n' "${how[@]}" >&2
        return 1
    fi
    echo "$who: needs $what (their sizes: README.md, \"What each script installs\")" >&2
    if [ -z "$yes" ] && ! btrfs_lab_in_ci && [ -t 0 ]; then
        local answer=
        read -r -p "Install them now? [y/N] " answer || true
        case $answer in
            y | Y | yes | YES) ;;
            *)
                echo "$who: installed nothing; run it again with --yes, or install them yourself:" >&2
                printf '    %s\n' "${how[@]}" >&2
                return 1
                ;;
        esac
    fi

    if [ "${#missing[@]}" -gt 0 ]; then
        echo "$who: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
    if [ -n "$rustup" ]; then
        echo "$who: installing a Rust toolchain with rustup" >&2
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    # Loop devices: the driver may be a module.
    [ -e /dev/loop-control ] || modprobe loop 2>/dev/null || true
}

# The real loader of read-test --pid's tests (tests/it/read_test_pid.rs):
# safetensors (its Rust extension maps the file, as vLLM's default loader
# does) in a venv of Debian's python3, from PyPI, pinned. Nothing else on
# the machine changes; `rm -r /var/tmp/btrfs-lab-py` removes it.
BTRFS_LAB_LOADERS_VENV=/var/tmp/btrfs-lab-py
btrfs_lab_install_loaders() {
    local yes=${1:-} venv=$BTRFS_LAB_LOADERS_VENV
    local want=(safetensors==0.8.0 numpy==2.4.6)
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import safetensors, numpy' 2>/dev/null; then
        return 0
    fi
    if [ -z "$yes" ] && ! btrfs_lab_in_ci && [ -t 0 ]; then
        local answer=
        read -r -p "Make $venv with ${want[*]} from PyPI (read-test --pid's real loader)? [y/N] " answer || true
        case $answer in y | Y | yes | YES) ;; *) return 1 ;; esac
    fi
    echo "install-deps: making $venv with ${want[*]}" >&2
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${want[@]}"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    if [ "$#" -eq 0 ] || { [ "$#" -eq 1 ] && [[ $1 == --yes || $1 == -y ]]; }; then
        echo "usage: scripts/install-deps.sh [--yes] SET... (SET: demo, test, release, rig, bench)" >&2
        exit 2
    fi
    btrfs_lab_install "$@"
fi
