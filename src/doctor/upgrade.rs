//! `doctor --before-upgrade VERSION`: what changes for a filesystem when
//! this machine boots Linux VERSION, as findings. Pure: the facts doctor
//! read, the running kernel's release and the kernel command line in, the
//! findings out. The kernel facts are [`crate::model::kernel`]'s (the same
//! feature table as `oldest-kernel`) and, for O_DIRECT, probe-dio's
//! per-kernel table ([`crate::probe::expect`]); docs/kernels.md lists
//! every change with its commit.

use serde::{Deserialize, Serialize};

use crate::model::finding::{Code, Finding, rules};
use crate::model::kernel::{self, KernelVersion};
use crate::model::space::BgType;
use crate::probe::verdict::Verdict;
use crate::sys::tools::display_argv;

use super::facts::FsFacts;

/// What `--before-upgrade` compared, in each filesystem's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BeforeUpgrade {
    /// The kernel asked about, as given (`7.3`, `7.3.4`).
    pub target: String,
    /// The running kernel's release (`uname -r`).
    pub running: String,
    /// The codes of the findings that say what changes on the target;
    /// empty: nothing changes for this filesystem.
    pub changes: Vec<Code>,
}

/// The machine's side of the comparison.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Upgrade<'a> {
    /// The kernel asked about, as given (validated by
    /// [`kernel::parse_version_arg`]).
    pub target: &'a str,
    /// The running kernel's release.
    pub running: &'a str,
    /// The kernel command line of this boot (`/proc/cmdline`), when read.
    pub cmdline: Option<&'a str>,
}

/// The options of a mount source: fstab lines and `rootflags=`.
struct Source {
    /// Where (`/etc/fstab line 3`, `kernel command line (rootflags=)`).
    at: String,
    /// The line or word as written.
    text: String,
    options: Vec<String>,
}

impl Source {
    fn has(&self, o: &str) -> bool {
        self.options.iter().any(|x| x == o)
    }
}

/// The options 7.3 rejects or ignores: the plain `usebackuproot`
/// (removed) and the v1 cache's (no cache at all).
const GONE_IN_7_3: [&str; 3] = ["usebackuproot", "space_cache", "space_cache=v1"];

/// A source's options without those 7.3 rejects or ignores: what to
/// write instead (both findings give the same line, so that fixing one
/// does not leave the other).
fn options_for_7_3(s: &Source) -> String {
    let kept: Vec<&str> = s
        .options
        .iter()
        .map(String::as_str)
        .filter(|o| !GONE_IN_7_3.contains(o))
        .collect();
    if kept.is_empty() {
        "defaults".to_owned()
    } else {
        kept.join(",")
    }
}

/// The fstab entries of the filesystem, and `rootflags=` of the kernel
/// command line when it is mounted at `/`.
fn sources(f: &FsFacts, cmdline: Option<&str>) -> Vec<Source> {
    let mut v: Vec<Source> = f
        .fstab
        .iter()
        .flat_map(|t| {
            t.entries.iter().map(|e| Source {
                at: format!("{} line {}", t.path, e.line),
                text: e.text.trim().to_owned(),
                options: e.options.clone(),
            })
        })
        .collect();
    if f.mount_point.as_os_str() == "/"
        && let Some(line) = cmdline
    {
        for word in line.split_whitespace() {
            if let Some(flags) = word.strip_prefix("rootflags=") {
                v.push(Source {
                    at: "kernel command line (/proc/cmdline)".to_owned(),
                    text: word.to_owned(),
                    options: flags.split(',').map(str::to_owned).collect(),
                });
            }
        }
    }
    v
}

/// Every finding of what changes on `u.target`, worst first.
pub(crate) fn findings(f: &FsFacts, u: &Upgrade<'_>) -> Vec<Finding> {
    let Some(target) = kernel::parse_version_arg(u.target) else {
        return Vec::new();
    };
    let running = KernelVersion::parse(u.running).or_else(|| KernelVersion::parse(&f.kernel));
    let src = sources(f, u.cmdline);
    let mut out = Vec::new();
    cannot_mount(f, u, target, &mut out);
    usebackuproot(f, u, target, &src, &mut out);
    space_cache(f, u, target, running, &src, &mut out);
    odirect(f, u, &mut out);
    error_counters(f, u, target, running, &mut out);
    crate::model::finding::rank(&mut out);
    out
}

/// The features this kernel does not know: it cannot mount the filesystem,
/// or only read-only.
fn cannot_mount(f: &FsFacts, u: &Upgrade<'_>, target: KernelVersion, out: &mut Vec<Finding>) {
    let newer: Vec<(&str, KernelVersion, bool)> = kernel::floors(&f.features)
        .into_iter()
        .filter(|(_, k, _)| *k > target)
        .collect();
    if newer.is_empty() {
        return;
    }
    let read_only = newer.iter().all(|(_, _, ro)| *ro);
    let (rw, _) = kernel::oldest_read_write(&f.features);
    let list = newer
        .iter()
        .map(|(name, k, _)| format!("{name} ({k})"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut fi = Finding::new(
        Code::UpgradeCannotMount,
        if read_only {
            format!("Linux {} mounts this filesystem read-only only", u.target)
        } else {
            format!("Linux {} cannot mount this filesystem", u.target)
        },
        format!(
            "its on-disk features need Linux {rw} or later to mount read-write{}; a kernel that \
             old (a downgrade, a rescue system) {}. Keep a kernel at least as new to boot from",
            if read_only { "" } else { " and at all" },
            if read_only {
                "refuses to write to it"
            } else {
                "refuses to mount it"
            }
        ),
    )
    .with_severity(rules::upgrade_cannot_mount(read_only))
    .with_evidence("features that need a newer kernel", list);
    if !u.running.is_empty() {
        fi = fi.with_evidence("running kernel", u.running);
    }
    out.push(fi);
}

/// The plain `usebackuproot` option, which Linux 7.3 removed.
fn usebackuproot(
    f: &FsFacts,
    u: &Upgrade<'_>,
    target: KernelVersion,
    src: &[Source],
    out: &mut Vec<Finding>,
) {
    if target < kernel::PLAIN_USEBACKUPROOT_REMOVED {
        return;
    }
    let given: Vec<&Source> = src.iter().filter(|s| s.has("usebackuproot")).collect();
    let mounted = f.mount_options.split(',').any(|o| o == "usebackuproot");
    if given.is_empty() && !mounted {
        return;
    }
    let mut fi = Finding::new(
        Code::UpgradeUsebackuproot,
        format!(
            "the usebackuproot option will fail to mount {} on Linux {}",
            f.mount_point.display(),
            u.target
        ),
        "Linux 7.3 removed the plain usebackuproot mount option (ee2851074b4a): a mount that \
         gives it fails with an unknown option, and a root filesystem that gives it does not \
         boot. It is a one-time repair: take it out; for a repair, mount by hand with \
         ro,rescue=usebackuproot (from 7.3 every rescue option needs ro, ce5d6709ebfa)",
    );
    for s in &given {
        fi = fi
            .with_evidence(&s.at, s.text.clone())
            .with_evidence("options for 7.3", options_for_7_3(s));
    }
    if mounted {
        fi = fi.with_evidence("mount options", f.mount_options.clone());
    }
    out.push(fi);
}

/// Whether the filesystem uses the v1 space cache now: the kernel shows
/// `space_cache` (or `space_cache=v1`) when it is active; without the free
/// space tree and without `nospace_cache` it is the older kernels' default.
pub(crate) fn v1_cache_in_use(f: &FsFacts) -> bool {
    let opts: Vec<&str> = f.mount_options.split(',').collect();
    let shown = opts
        .iter()
        .any(|o| *o == "space_cache" || *o == "space_cache=v1");
    let fst = f.features.iter().any(|x| x == "free_space_tree");
    let off = opts
        .iter()
        .any(|o| *o == "nospace_cache" || *o == "space_cache=v2");
    shown || (!fst && !off && !f.features.is_empty())
}

/// What `clear_cache,space_cache=v2` does, and the command, for the
/// filesystem: unmount, mount once with it.
pub(crate) fn convert_command(f: &FsFacts) -> String {
    let member = f
        .present()
        .next()
        .map_or("DEVICE".to_owned(), |d| d.path.clone());
    display_argv(&[
        "mount",
        "-o",
        "clear_cache,space_cache=v2",
        &member,
        &f.mount_point.display().to_string(),
    ])
}

/// The v1 space cache, which Linux 7.3 disables.
fn space_cache(
    f: &FsFacts,
    u: &Upgrade<'_>,
    target: KernelVersion,
    running: Option<KernelVersion>,
    src: &[Source],
    out: &mut Vec<Finding>,
) {
    let already = running.is_some_and(|r| r >= kernel::V1_CACHE_DISABLED);
    if target < kernel::V1_CACHE_DISABLED || already || !v1_cache_in_use(f) {
        return;
    }
    let asked: Vec<&Source> = src
        .iter()
        .filter(|s| s.has("space_cache") || s.has("space_cache=v1"))
        .collect();
    let (title, why) = if asked.is_empty() {
        (
            format!(
                "Linux {} disables the v1 space cache this filesystem uses",
                u.target
            ),
            "Linux 7.3 disables the v1 space cache (545e560a5b0f): it neither converts the \
             filesystem to the free space tree nor refuses it. No option can select v1 any \
             more; 7.3 still loads the v1 cache it finds on disk, and the change after it \
             (fab81e9b9326) drops that cache at mount, leaving no cache at all: every block \
             group's free space is then found by scanning the extent tree when it is first \
             used (slow mounts and first writes on a large filesystem). Convert to the free \
             space tree now: unmount, mount once with clear_cache,space_cache=v2 (or run \
             btrfstune --convert-to-free-space-tree on the unmounted devices, btrfs-progs \
             6.3.1 and later); it stays v2 from then on",
        )
    } else {
        (
            format!(
                "on Linux {} the space_cache option mounts {} with no free space cache",
                u.target,
                f.mount_point.display()
            ),
            "Linux 7.3 disables the v1 space cache (545e560a5b0f): space_cache and \
             space_cache=v1 fall back to nospace_cache. The filesystem is neither converted \
             to the free space tree nor refused: it mounts with no cache, and every block \
             group's free space is found by scanning the extent tree when it is first used \
             (slow mounts and first writes on a large filesystem). Convert to the free space \
             tree now: unmount, mount once with clear_cache,space_cache=v2 (or run btrfstune \
             --convert-to-free-space-tree on the unmounted devices, btrfs-progs 6.3.1 and \
             later), and take the option out",
        )
    };
    let mut fi = Finding::new(Code::UpgradeSpaceCacheV1, title, why)
        .with_evidence("mount options", f.mount_options.clone());
    for s in &asked {
        fi = fi
            .with_evidence(&s.at, s.text.clone())
            .with_evidence("options for 7.3", options_for_7_3(s));
    }
    out.push(fi.with_command(convert_command(f)));
}

/// O_DIRECT on the data profile: what each kernel's source says.
fn odirect(f: &FsFacts, u: &Upgrade<'_>, out: &mut Vec<Finding>) {
    let data = f.profiles(BgType::Data);
    if data.is_empty() || u.running.is_empty() {
        return;
    }
    let guess = |release: &str, nocow: bool| {
        crate::probe::expect::expect(release, "btrfs", &data, nocow, Verdict::Inconclusive)
    };
    let mut changed = Vec::new();
    for (what, nocow) in [("checksummed files", false), ("NOCOW files", true)] {
        let now = guess(u.running, nocow);
        let then = guess(u.target, nocow);
        if let (Some(a), Some(b)) = (now.verdict, then.verdict)
            && a != b
        {
            changed.push((what, a, b, then.basis));
        }
    }
    if changed.is_empty() {
        return;
    }
    let names: Vec<&str> = data.iter().map(|p| p.name()).collect();
    let mut fi = Finding::new(
        Code::UpgradeOdirect,
        format!(
            "O_DIRECT writes on {} data are expected to change on Linux {}",
            names.join(", "),
            u.target
        ),
        "expected from the kernels' source, not measured (probe-dio's table, docs/rig.md): \
         a distribution may backport or patch either way. After the upgrade, measure with \
         btrfs-lab probe-dio (or doctor --deep)",
    );
    let mut bases: Vec<String> = Vec::new();
    for (what, a, b, basis) in changed {
        fi = fi.with_evidence(
            what,
            format!(
                "{} on {} → {} on {}",
                a.name(),
                u.running,
                b.name(),
                u.target
            ),
        );
        if !bases.contains(&basis) {
            bases.push(basis);
        }
    }
    for basis in bases {
        fi = fi.with_evidence("basis", basis);
    }
    out.push(fi);
}

/// The device error counters count every bio error from 7.1 on.
fn error_counters(
    f: &FsFacts,
    u: &Upgrade<'_>,
    target: KernelVersion,
    running: Option<KernelVersion>,
    out: &mut Vec<Finding>,
) {
    let crosses = running.is_some_and(|r| r < kernel::COUNTS_EVERY_BIO_ERROR)
        && target >= kernel::COUNTS_EVERY_BIO_ERROR;
    if !crosses {
        return;
    }
    let now: u64 = f
        .devices
        .iter()
        .filter_map(|d| d.errors.as_ref())
        .map(|e| e.write + e.read + e.flush + e.corruption + e.generation)
        .sum();
    out.push(
        Finding::new(
            Code::UpgradeErrorCounters,
            format!(
                "on Linux {} the device error counters count every bio error",
                u.target
            ),
            "from Linux 7.1 (fc3d53288158) every failed bio is counted, where older kernels \
             counted only some (I/O and target errors, and no failed readahead): the counters \
             can jump after the upgrade with nothing new going wrong. Note them now (btrfs \
             device stats), compare after, and judge new errors by scrub and the kernel log, \
             not the jump alone (doctor's device-errors-rising is info for a rise across \
             that change)",
        )
        .with_evidence("errors counted now", now.to_string())
        .with_evidence("running kernel", u.running),
    );
}

#[cfg(test)]
mod tests;
