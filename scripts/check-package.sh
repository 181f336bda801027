#!/usr/bin/env bash
# Installs the Debian package built by scripts/release.sh, uses it as an
# admin would, and purges it again, checking that every file it installed is
# gone. Refuses to run when btrfs-lab is already installed (it would remove
# someone's installation). As root; CI runs it (.ci/run).
#
#   scripts/check-package.sh dist/btrfs-lab_VERSION_ARCH.deb
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

die() { echo "check-package: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (dpkg -i)"
deb=${1:?usage: scripts/check-package.sh dist/btrfs-lab_VERSION_ARCH.deb}
[ -f "$deb" ] || die "no $deb (scripts/release.sh builds it)"
if dpkg-query -W -f='${Status}' btrfs-lab 2>/dev/null | grep -q "install ok installed"; then
    die "btrfs-lab is already installed here; this check installs and purges it"
fi

files=$(mktemp /var/tmp/btrfs-lab-package-files.XXXXXX)
installed=
cleanup() {
    if [ -n "$installed" ]; then dpkg --purge btrfs-lab >/dev/null 2>&1 || true; fi
    rm -f -- "$files"
}
trap cleanup EXIT

step() { echo "+ $*"; "$@"; }
dpkg-deb -f "$deb" Package Version Architecture Depends Recommends Installed-Size
# Container images often tell dpkg not to install manual pages and docs
# (path-exclude in /etc/dpkg/dpkg.cfg.d); this check is about them, so ours
# are included again (a no-op where nothing is excluded).
step dpkg --path-include='/usr/share/man/man1/btrfs-lab*' \
    --path-include='/usr/share/doc/btrfs-lab/*' -i "$deb"
installed=1
dpkg-query -L btrfs-lab | while read -r f; do [ -d "$f" ] || echo "$f"; done | sort >"$files"
echo "check-package: $(wc -l <"$files") files installed"

[ "$(command -v btrfs-lab)" = /usr/bin/btrfs-lab ] || die "btrfs-lab is not /usr/bin/btrfs-lab"
step btrfs-lab --version
file -b /usr/bin/btrfs-lab | grep -Eq 'statically linked|static-pie linked' || die "/usr/bin/btrfs-lab is not static"

# The manual: found by man through its name, with the sections we promise.
page=$(MANPAGER=cat MANWIDTH=80 man btrfs-lab-df)
echo "$page" | head -n 12
for section in NAME SYNOPSIS OPTIONS "EXIT STATUS" EXAMPLES "SEE ALSO"; do
    grep -qx "$section" <<<"$page" || die "man btrfs-lab-df has no $section section"
done
MANPAGER=cat man -l /usr/share/man/man1/btrfs-lab-sandbox-up.1.gz | grep -q 'btrfs-lab sandbox up' \
    || die "man -l btrfs-lab-sandbox-up.1.gz does not show the page"
n_pages=$(grep -c '^/usr/share/man/man1/btrfs-lab.*\.1\.gz$' "$files")
[ "$n_pages" -ge 19 ] || die "only $n_pages manual pages installed"
echo "check-package: $n_pages manual pages; man btrfs-lab-df and man -l ...sandbox-up.1.gz show them"

# Completions, each accepted by its shell when the shell is here.
for f in /usr/share/bash-completion/completions/btrfs-lab \
         /usr/share/zsh/vendor-completions/_btrfs-lab \
         /usr/share/fish/vendor_completions.d/btrfs-lab.fish; do
    [ -s "$f" ] || die "missing $f"
    case "$f" in
        *.fish) sh=fish ;; */_btrfs-lab) sh=zsh ;; *) sh=bash ;;
    esac
    if command -v "$sh" >/dev/null; then "$sh" -n "$f" || die "$sh -n rejects $f"; fi
    echo "check-package: $f ($(wc -l <"$f") lines, $sh -n ok)"
done
# bash-completion's loader finds it by the command name.
completion=$(bash -c 'source /usr/share/bash-completion/completions/btrfs-lab
    COMP_WORDS=(btrfs-lab sandbox u); COMP_CWORD=2
    _btrfs_lab btrfs-lab u sandbox; echo "${COMPREPLY[*]}"')
[ "$completion" = up ] || die "bash completes 'btrfs-lab sandbox u' as '$completion', not 'up'"
echo "check-package: bash completes 'btrfs-lab sandbox u' -> $completion"
[ -s /usr/share/doc/btrfs-lab/copyright ] && [ -s /usr/share/doc/btrfs-lab/docs/exit-codes.md ] \
    || die "docs missing in /usr/share/doc/btrfs-lab"

# The scrub timer and service, as installed (the manual page they name too),
# shipped but not enabled; the sleep hook executable.
for u in btrfs-lab-scrub.service btrfs-lab-scrub.timer; do
    [ -s "/usr/lib/systemd/system/$u" ] || die "missing /usr/lib/systemd/system/$u"
done
[ -x /usr/lib/systemd/system-sleep/btrfs-lab-scrub ] || die "the sleep hook is not installed executable"
[ ! -e /etc/systemd/system/timers.target.wants/btrfs-lab-scrub.timer ] \
    || die "the package enabled the scrub timer: enabling is the admin's choice"
[ -s /usr/lib/systemd/system/btrfs-lab-members.service ] && [ -s /usr/lib/udev/rules.d/90-btrfs-lab-members.rules ] \
    || die "the member watch (udev rule and its service) is not installed"
if command -v systemd-analyze >/dev/null; then
    step systemd-analyze verify /usr/lib/systemd/system/btrfs-lab-scrub.service \
        /usr/lib/systemd/system/btrfs-lab-scrub.timer /usr/lib/systemd/system/btrfs-lab-members.service
fi

# A real command from the installed binary.
step btrfs-lab df --parse subcommands/df.in/ticket.txt

step dpkg --purge btrfs-lab
installed=
left=$(while read -r f; do [ -e "$f" ] || [ -L "$f" ] && echo "$f"; done <"$files" || true)
[ -z "$left" ] || die "left after purge: $left"
! dpkg-query -W btrfs-lab >/dev/null 2>&1 || dpkg-query -W -f='${Status}\n' btrfs-lab | grep -q "not-installed" \
    || die "dpkg still knows btrfs-lab"
[ ! -e /usr/share/doc/btrfs-lab ] || die "/usr/share/doc/btrfs-lab is left"
echo "check-package: purged; none of the $(wc -l <"$files") files is left"
