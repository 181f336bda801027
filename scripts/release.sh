#!/usr/bin/env bash
# Builds the release artifacts into dist/ (gitignored), as root:
#   dist/btrfs-lab                         the static binary (static glibc)
#   dist/btrfs-lab_VERSION_ARCH.deb        the Debian package
# and checks them: `file` must say statically linked, `ldd` must list no
# library, and the binary must run in an EMPTY chroot (a directory holding
# only the binary and a fixture: no libc, no loader, no /etc, no network).
# Then lints the package with lintian when it is installed.
#
#   scripts/release.sh            install what it needs (the `release` set of
#                                 scripts/install-deps.sh: asks first on a
#                                 terminal, not with --yes, CI=true or no
#                                 terminal), build, check, package
#   scripts/release.sh --yes ...  the same without asking
#   scripts/release.sh --no-build package the binary already in the target dir
#   scripts/release.sh --build-only
#       only build the static binary (the same target and RUSTFLAGS, so a
#       later full run reuses the build), check that `file` says static and
#       print its path on the last line of stdout; dist/ is not touched.
#       scripts/test.sh runs it for the QEMU rig (docs/rig.md), which boots
#       this binary, not the debug test build. Needs no root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

die() { echo "release: $*" >&2; exit 1; }
yes=()
if [ "${1:-}" = --yes ] || [ "${1:-}" = -y ]; then
    yes=(--yes)
    shift
fi
mode=${1:-}
case $mode in
    "" | --no-build | --build-only) ;;
    *) echo "release: unknown option '$mode': use --no-build or --build-only (or nothing), after an optional --yes" >&2; exit 2 ;;
esac
[ "$mode" = --build-only ] || [ "$(id -u)" -eq 0 ] \
    || die "run as root (the empty-chroot check and root-owned package files need it)"
# What the release needs (the `release` set of scripts/install-deps.sh,
# asking first on a terminal); --build-only installs nothing (scripts/test.sh
# runs it after installing the test set).
if [ "$mode" != --build-only ]; then
    source scripts/install-deps.sh
    BTRFS_LAB_INSTALL_FOR=release.sh btrfs_lab_install "${yes[@]}" release || exit 1
fi

target=x86_64-unknown-linux-gnu
arch=$(dpkg --print-architecture)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || die "no version in Cargo.toml"
target_dir=${CARGO_TARGET_DIR:-target}

# 1. The static binary. crt-static links glibc statically: glibc's memcpy and
# malloc (this is an I/O tool), and a target every Rust toolchain has
# (musl needs `rustup target add`, which CI machines may not reach).
if [ "$mode" != "--no-build" ]; then
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
        cargo build --locked --release --target "$target"
fi
if [ "$mode" = --build-only ]; then
    built=$(realpath "$target_dir/$target/release/btrfs-lab")
    kind=$(file -b "$built")
    grep -Eq 'statically linked|static-pie linked' <<<"$kind" \
        || die "$built is not statically linked: $kind"
    echo "release: built $built ($kind)" >&2
    echo "$built"
    exit 0
fi
rm -rf dist
mkdir -p dist
install -m 0755 "$target_dir/$target/release/btrfs-lab" dist/btrfs-lab

echo "release: file: $(file -b dist/btrfs-lab)"
file -b dist/btrfs-lab | grep -Eq 'statically linked|static-pie linked' \
    || die "dist/btrfs-lab is not statically linked"
ldd_out=$(ldd dist/btrfs-lab 2>&1 || true)
echo "release: ldd: $ldd_out"
# glibc's ldd says "not a dynamic executable" for a static binary and
# "statically linked" for a static-pie one (what crt-static gives: ASLR for a
# tool run as root); either way no library may be listed.
if grep -q '=>' <<<"$ldd_out" || ! grep -Eq 'not a dynamic executable|statically linked' <<<"$ldd_out"; then
    die "ldd lists dynamic dependencies of dist/btrfs-lab"
fi

# 2. It runs where there is nothing else: an empty directory as /.
empty=$(mktemp -d /var/tmp/btrfs-lab-empty.XXXXXX)
cleanup() { rm -rf -- "$empty" "${stage:-/nonexistent}"; }
trap cleanup EXIT
install -m 0755 dist/btrfs-lab "$empty/btrfs-lab"
cp subcommands/df.in/ticket.txt "$empty/df.txt"
echo "release: in an empty chroot ($(find "$empty" -mindepth 1 | wc -l) files: $(cd "$empty" && echo *)):"
chroot "$empty" /btrfs-lab --version
chroot "$empty" /btrfs-lab df --parse /df.txt
chroot "$empty" /btrfs-lab man df | grep -q '^\.SH "EXIT STATUS"' || die "man df in the empty chroot has no EXIT STATUS"
echo "release: man df in the empty chroot: $(chroot "$empty" /btrfs-lab man df | wc -l) roff lines"

# 3. The Debian package, with dpkg-deb (no cargo-deb to install).
stage=$(mktemp -d /var/tmp/btrfs-lab-deb.XXXXXX)
chmod 0755 "$stage"
install -d -m 0755 "$stage/DEBIAN" "$stage/usr/bin" "$stage/usr/share/man/man1" \
    "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
    "$stage/usr/share/fish/vendor_completions.d" "$stage/usr/share/doc/btrfs-lab/docs" \
    "$stage/usr/share/lintian/overrides"
install -m 0755 dist/btrfs-lab "$stage/usr/bin/btrfs-lab"
dist/btrfs-lab man --out-dir "$stage/usr/share/man/man1" >/dev/null
gzip -9n "$stage"/usr/share/man/man1/*.1
dist/btrfs-lab completions bash >"$stage/usr/share/bash-completion/completions/btrfs-lab"
dist/btrfs-lab completions zsh >"$stage/usr/share/zsh/vendor-completions/_btrfs-lab"
dist/btrfs-lab completions fish >"$stage/usr/share/fish/vendor_completions.d/btrfs-lab.fish"
install -m 0644 README.md "$stage/usr/share/doc/btrfs-lab/README.md"
install -m 0644 docs/*.md "$stage/usr/share/doc/btrfs-lab/docs/"
install -m 0644 packaging/copyright "$stage/usr/share/doc/btrfs-lab/copyright"
install -D -m 0644 packaging/lintian-overrides "$stage/usr/share/lintian/overrides/btrfs-lab"
# The scrub timer, its service and the sleep hook (contrib/systemd): shipped,
# not enabled (systemctl enable --now btrfs-lab-scrub.timer; docs/fleet.md).
install -D -m 0644 -t "$stage/usr/lib/systemd/system" \
    contrib/systemd/btrfs-lab-scrub.service contrib/systemd/btrfs-lab-scrub.timer
# The member watch: a udev rule that starts doctor when a btrfs member's
# block device comes or goes (active once installed: it only looks).
install -D -m 0644 -t "$stage/usr/lib/systemd/system" contrib/systemd/btrfs-lab-members.service
install -D -m 0644 -t "$stage/usr/lib/udev/rules.d" contrib/systemd/90-btrfs-lab-members.rules
install -D -m 0755 contrib/systemd/btrfs-lab-scrub.sleep \
    "$stage/usr/lib/systemd/system-sleep/btrfs-lab-scrub"
sed -e "s/@VERSION@/$version/" -e "s/@DATE@/$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")/" \
    packaging/changelog.in | gzip -9n >"$stage/usr/share/doc/btrfs-lab/changelog.gz"
find "$stage/usr" -type f -exec chmod 0644 {} + && chmod 0755 "$stage/usr/bin/btrfs-lab" \
    "$stage/usr/lib/systemd/system-sleep/btrfs-lab-scrub"
find "$stage/usr" -type d -exec chmod 0755 {} +
installed_size=$(du -sk --apparent-size "$stage/usr" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@INSTALLED_SIZE@/$installed_size/" \
    packaging/control.in >"$stage/DEBIAN/control"
(cd "$stage" && find usr -type f -printf '%P\n' | sort | sed 's|^|usr/|' | xargs md5sum) >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"
deb="dist/btrfs-lab_${version}_${arch}.deb"
dpkg-deb --build --root-owner-group "$stage" "$deb" >/dev/null
echo "release: $deb ($(du -k "$deb" | cut -f1) KiB, $(dpkg-deb -c "$deb" | grep -vc '/$') files)"

if command -v lintian >/dev/null 2>&1; then
    echo "release: lintian $deb (profile debian; report only):"
    lintian --tag-display-limit 0 "$deb" || true
fi
echo "release: done: dist/btrfs-lab, $deb"
