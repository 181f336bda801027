//! `doctor --deep`: what costs time or writes a little, through the other
//! jobs' public entry points: probe-dio on the directories that matter (its
//! scratch files are removed on every path), the PCIe links of the member
//! drives with their NVMe SMART thermal counters, and the NOCOW audit of the
//! usual VM image and database directories on the filesystem.
//!
//! The directories probed ([`probe_dirs`]): the mount root; the NOCOW
//! directories found at the top of the filesystem and one level down, and
//! among the usual VM image and database directories (at most
//! [`MAX_NOCOW_DIRS`]; a NOCOW directory's own subdirectories are NOCOW
//! too, so it is not descended); and every `--deep-dir`. The mount root
//! says what checksummed files get; once a NOCOW directory (where the
//! advice puts VM images and databases) or a `--deep-dir` is found direct,
//! the mount root's finding ends: the advice was followed
//! ([`probe_findings`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, Result};
use crate::links::{self, LinksOptions};
use crate::model::finding::{Code, Finding};
use crate::probe::{self, EvidenceKind, ProbeOptions, ProbeReport, Verdict};
use crate::sys::fs::beneath::HeldDir;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::signals;
use crate::sys::tools::display_argv;

use super::facts::FsFacts;

/// What the deep checks found out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeepFacts {
    /// probe-dio's verdict on the mount root (`direct`,
    /// `buffered-fallback`, `profile-forced`, `inconclusive`), absent when
    /// the probe could not run there.
    pub probe_verdict: Option<String>,
    /// Why the probe could not run on the mount root.
    pub probe_error: Option<String>,
    /// Every directory probed, the mount root first.
    #[serde(default)]
    pub probes: Vec<DirProbe>,
    /// Why the links could not be read (not NVMe, ...).
    pub(crate) links_error: Option<String>,
    /// The VM image and database directories audited for NOCOW.
    #[serde(default)]
    pub nocow_audited: Vec<PathBuf>,
}

/// Why a directory was probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ProbedFor {
    /// The mount point: what checksummed files get.
    MountRoot,
    /// A NOCOW directory found (top level, one level down, or a usual VM
    /// image or database directory).
    Nocow,
    /// Named with `--deep-dir`.
    Asked,
}

/// probe-dio on one directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DirProbe {
    /// The directory.
    pub path: PathBuf,
    /// Why it was probed.
    pub probed_for: ProbedFor,
    /// probe-dio's verdict there (absent when the probe could not run).
    pub verdict: Option<String>,
    /// What decided it (`tracepoint`, `bdi`, `vmstat`).
    pub evidence: Option<EvidenceKind>,
    /// Why the probe could not run.
    pub error: Option<String>,
}

/// At most this many NOCOW directories found are probed (in path order).
pub const MAX_NOCOW_DIRS: usize = 4;
/// At most this many entries of a directory are looked at for NOCOW
/// subdirectories (in name order): the search stays cheap on a directory
/// of a million files.
const MAX_ENTRIES: usize = 1024;

/// Where VM images and databases usually live (as `nocow --for` advises),
/// relative to `/`; looked for at `/` when that is this filesystem, and
/// under the mount point (a filesystem mounted for `/var/lib` or a chroot).
pub(crate) const USUAL_NOCOW_DIRS: [&str; 4] = [
    "var/lib/libvirt/images",
    "var/lib/postgresql",
    "var/lib/pgsql",
    "var/lib/mysql",
];

/// The usual directories that exist on the filesystem `f`.
pub(crate) fn usual_dirs(f: &FsFacts) -> Vec<std::path::PathBuf> {
    let mut v = Vec::new();
    for rel in USUAL_NOCOW_DIRS {
        for base in [std::path::Path::new("/"), f.mount_point.as_path()] {
            let p = base.join(rel);
            let here = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir())
                && crate::sys::kernel::btrfs::fsid(&p).is_ok_and(|id| id == f.uuid);
            if here && !v.contains(&p) {
                v.push(p);
            }
        }
    }
    v
}

/// Findings of a NOCOW audit (pure).
pub(crate) fn nocow_findings(
    report: &crate::nocow::CheckReport,
    dirs: &[std::path::PathBuf],
) -> Vec<Finding> {
    use crate::nocow::audit::{EntryKind, EntryState};
    let mut out = Vec::new();
    let s = &report.summary;
    let names = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>();
    if s.needs_migration_files + s.blocked_files > 0 {
        let mut argv = vec!["btrfs-lab", "nocow", "--check"];
        argv.extend(names.iter().map(String::as_str));
        out.push(
            Finding::new(
                Code::NocowMissing,
                format!(
                    "{} VM image or database file(s) are copy-on-write",
                    s.needs_migration_files + s.blocked_files
                ),
                "files rewritten in place (VM images, databases) fragment under copy-on-write, and their O_DIRECT writes are buffered (kernels 6.15 to 7.2) or copied through a bounce buffer (7.3 and later); a NOCOW directory and a migration of the files fix both (btrfs-lab nocow DIR)",
            )
            .with_evidence("directories", names.join(", "))
            .with_evidence(
                "bytes to migrate",
                crate::report::units::pretty_size(
                    s.needs_migration_bytes + s.blocked_bytes,
                    crate::report::units::UnitMode::default(),
                ),
            )
            .with_command(display_argv(&argv)),
        );
    }
    // The audited directories themselves, then what is in them: (path,
    // compressed by the property alone).
    let hits: Vec<(&std::path::Path, bool)> = report
        .roots
        .iter()
        .filter(|r| r.is_dir && r.compression_attr == Some(true) && r.nocow != Some(true))
        .map(|r| (r.path.as_path(), r.compression_property.is_some()))
        .chain(
            report
                .entries
                .iter()
                .filter(|e| {
                    e.state == EntryState::Compressed
                        || (e.kind == EntryKind::File && e.nocow && e.compression_attr)
                })
                .map(|e| (e.path.as_path(), e.compression_property.is_some())),
        )
        .collect();
    let compressed: Vec<String> = hits.iter().map(|h| h.0.display().to_string()).collect();
    if !compressed.is_empty() {
        let mut fi = Finding::new(
            Code::NocowWithCompression,
            format!(
                "{} NOCOW or database path(s) carry the compression attribute",
                compressed.len()
            ),
            "compression and NOCOW exclude each other: a NOCOW file is never compressed, and files created in a directory with the compression attribute or property are compressed and copy-on-write (nocow refuses to set NOCOW there)",
        );
        for p in compressed.iter().take(5) {
            fi = fi.with_evidence("path", p.clone());
        }
        out.push(
            fi.with_command(crate::sys::fs::filesystem::uncompress_command(
                hits[0].0, hits[0].1,
            )),
        );
    }
    out
}

/// The catalog code of a probe-dio verdict (none: direct, nothing to say).
pub(crate) fn verdict_code(v: Verdict) -> Option<Code> {
    match v {
        Verdict::Direct => None,
        Verdict::DirectBounced => Some(Code::OdirectBounced),
        Verdict::BufferedFallback => Some(Code::OdirectBufferedFallback),
        Verdict::ProfileForced => Some(Code::OdirectProfileForced),
        Verdict::Inconclusive => Some(Code::OdirectInconclusive),
    }
}

/// The NOCOW directories of the filesystem `f` worth probing: at the top
/// and one level down (a NOCOW directory is not descended: what is created
/// in it is NOCOW too), then the usual VM image and database directories
/// that are NOCOW; on this filesystem only (a subvolume is, another
/// filesystem mounted there is not), never through a symbolic link, at
/// most [`MAX_NOCOW_DIRS`]; none when the mount root is NOCOW itself
/// (what is made in it is). Directories that cannot be read are passed by.
pub(crate) fn nocow_dirs(f: &FsFacts) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    if let Ok(top) = HeldDir::open(&f.mount_point) {
        // A NOCOW mount root: the probe there says what its directories get.
        if is_nocow(&top) {
            return found;
        }
        'top: for dir in subdirs(&top, &f.uuid) {
            if is_nocow(&dir) {
                found.push(dir.path().to_path_buf());
            } else {
                for sub in subdirs(&dir, &f.uuid) {
                    if found.len() == MAX_NOCOW_DIRS {
                        break 'top;
                    }
                    if is_nocow(&sub) {
                        found.push(sub.path().to_path_buf());
                    }
                }
            }
            if found.len() == MAX_NOCOW_DIRS {
                break;
            }
        }
    }
    for p in usual_dirs(f) {
        if found.len() < MAX_NOCOW_DIRS
            && !found.iter().any(|d| p.starts_with(d))
            && HeldDir::open(&p).is_ok_and(|d| is_nocow(&d))
        {
            found.push(p);
        }
    }
    found
}

/// The subdirectories of `dir` on the btrfs `fsid`, opened without
/// following a link, in name order (the first [`MAX_ENTRIES`] entries;
/// btrfs-lab's own work directories left out).
fn subdirs(dir: &HeldDir, fsid: &str) -> Vec<HeldDir> {
    let Ok(names) = dir.names() else {
        return Vec::new();
    };
    names
        .iter()
        .take(MAX_ENTRIES)
        .filter(|n| !n.as_encoded_bytes().starts_with(b".btrfs-lab"))
        .filter(|n| {
            dir.stat(n).ok().flatten().is_some_and(|st| {
                rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
            })
        })
        .filter_map(|n| dir.open_subdir(n).ok())
        .filter(|d| d.btrfs_fsid().is_ok_and(|id| id == fsid))
        .collect()
}

/// The directory carries the NOCOW attribute.
fn is_nocow(dir: &HeldDir) -> bool {
    dir.file()
        .and_then(|f| crate::sys::fs::filesystem::inode_flags_of(&f, dir.path()))
        .is_ok_and(|fl| fl.is_some_and(|fl| fl.intersects(crate::sys::kernel::ioctl::FS_NOCOW_FL)))
}

/// The directories `--deep` probes on the filesystem `f`, each once: the
/// mount root, the NOCOW directories found ([`nocow_dirs`]), then those
/// asked for (`--deep-dir`, already known to be on it).
pub(crate) fn probe_dirs(f: &FsFacts, asked: &[PathBuf]) -> Vec<(PathBuf, ProbedFor)> {
    let mut v = vec![(f.mount_point.clone(), ProbedFor::MountRoot)];
    let found = nocow_dirs(f).into_iter().map(|p| (p, ProbedFor::Nocow));
    let asked = asked.iter().map(|p| (p.clone(), ProbedFor::Asked));
    for (p, why) in found.chain(asked) {
        if !v.iter().any(|(q, _)| q == &p) {
            v.push((p, why));
        }
    }
    v
}

/// The outcome of probe-dio on one directory.
pub(crate) type Probed = (DirProbe, std::result::Result<ProbeReport, String>);

/// The findings of the probes (pure). Each directory whose verdict is not
/// `direct` gets one, naming it, except: the mount root when another
/// directory probed is `direct` (the advice, a NOCOW directory for what
/// writes with O_DIRECT, was followed: checksummed files elsewhere are
/// buffered by design), and `profile-forced` once (the profile decides it
/// for the whole filesystem). A probe that could not run is
/// `deep-probe-failed`.
pub(crate) fn probe_findings(probed: &[Probed]) -> Vec<Finding> {
    let said = reported(
        &probed
            .iter()
            .map(|(d, r)| (d.probed_for, r.as_ref().ok().map(|r| r.verdict)))
            .collect::<Vec<_>>(),
    );
    let mut out: Vec<Finding> = Vec::new();
    for ((d, r), _) in probed.iter().zip(said).filter(|(_, said)| *said) {
        let dir = d.path.display().to_string();
        let command = display_argv(&["btrfs-lab", "probe-dio", &dir]);
        match r {
            Ok(r) => {
                let Some(code) = verdict_code(r.verdict) else {
                    continue;
                };
                let mut fi = Finding::new(code, r.summary.clone(), r.explanation.clone())
                    .with_evidence("directory", dir.clone())
                    .with_evidence("probe-dio verdict", r.verdict.name());
                for reason in &r.reasons {
                    fi = fi.with_evidence("reason", reason.clone());
                }
                if let Some(cost) = r.cost_sentence() {
                    fi = fi.with_evidence("cost", cost);
                }
                if let Some(fix) = &r.fix {
                    fi = fi.with_evidence("what to do", fix.clone());
                }
                out.push(fi.with_command(command));
            }
            Err(e) => out.push(
                Finding::new(
                    Code::DeepProbeFailed,
                    "the O_DIRECT probe could not run",
                    "doctor --deep writes two small test files to find out whether O_DIRECT writes are direct",
                )
                .with_evidence("directory", dir.clone())
                .with_evidence("error", e.clone())
                .with_command(command),
            ),
        }
    }
    out
}

/// Which probes are a finding ([`probe_findings`]'s rule, pure): each
/// verdict that is not `direct` and each probe that could not run (`None`),
/// but the mount root's once another directory is `direct`, and
/// `profile-forced` only the first time.
pub(crate) fn reported(probes: &[(ProbedFor, Option<Verdict>)]) -> Vec<bool> {
    let followed = probes
        .iter()
        .any(|(why, v)| *why != ProbedFor::MountRoot && *v == Some(Verdict::Direct));
    let mut forced = false;
    probes
        .iter()
        .map(|(why, v)| match v {
            None => true,
            Some(v) if verdict_code(*v).is_none() => false,
            Some(_) if *why == ProbedFor::MountRoot && followed => false,
            Some(Verdict::ProfileForced) => !std::mem::replace(&mut forced, true),
            Some(_) => true,
        })
        .collect()
}

/// Runs probe-dio on `dir` as `probe-dio DIR` does, silently: the same
/// evidence (the per-file tracepoint, in a private mount of tracefs when
/// it is not mounted, [`crate::probe::open_trace`]; the per-device counter
/// in a private debugfs), and the same defaults.
fn probe_one(root: &SysRoot, dir: &Path, why: ProbedFor) -> Result<Probed> {
    let mut opts = ProbeOptions::new(dir);
    opts.sysroot = root.clone();
    // doctor runs no thread now (the NOCOW audit's are joined): it may
    // enter a private mount namespace for the moment tracefs and debugfs
    // are opened, as probe-dio does.
    opts.allow_private_mounts = true;
    let mut d = DirProbe {
        path: dir.to_path_buf(),
        probed_for: why,
        verdict: None,
        evidence: None,
        error: None,
    };
    match probe::measure(&opts, &mut |_, _| {}) {
        Ok(r) => {
            d.verdict = Some(r.verdict.name().to_owned());
            d.evidence = Some(r.evidence.source);
            Ok((d, Ok(r)))
        }
        Err(e) if e.kind() == ErrorKind::Interrupted => Err(e),
        Err(e) => {
            d.error = Some(e.to_string());
            Ok((d, Err(e.to_string())))
        }
    }
}

/// Runs the deep checks on one filesystem: findings, and the facts.
/// `asked`: the `--deep-dir` directories on it. A signal (SIGINT, SIGTERM,
/// SIGHUP, with [`crate::sys::kernel::signals::install`]) stops it at the
/// next safe point: the probe removes its test files and its trace
/// instance on the way out, and the error is
/// [`ErrorKind::Interrupted`](crate::error::ErrorKind::Interrupted).
pub fn deep(root: &SysRoot, f: &FsFacts, asked: &[PathBuf]) -> Result<(Vec<Finding>, DeepFacts)> {
    let mut out = Vec::new();
    let mut facts = DeepFacts::default();
    let m = f.mount_point.display().to_string();

    // probe-dio's own defaults: 4 MiB files where the kernel's tracepoints
    // count each file's pages, 64 MiB where only a counter can.
    let mut probed = Vec::new();
    for (dir, why) in probe_dirs(f, asked) {
        signals::check()?;
        probed.push(probe_one(root, &dir, why)?);
    }
    if let Some((d, _)) = probed.first() {
        facts.probe_verdict = d.verdict.clone();
        facts.probe_error = d.error.clone();
    }
    out.extend(probe_findings(&probed));
    facts.probes = probed.into_iter().map(|(d, _)| d).collect();

    signals::check()?;
    let lopts = LinksOptions {
        sysroot: root.clone(),
        targets: vec![m.clone()],
        thermal: true,
    };
    match links::run(&lopts) {
        Ok(r) => out.extend(r.all_findings().map(|l| links::catalog_finding(l, &m))),
        Err(e) => facts.links_error = Some(e.to_string()),
    }
    signals::check()?;
    let dirs = usual_dirs(f);
    if !dirs.is_empty() {
        match crate::nocow::check(root, &dirs) {
            Ok(r) => out.extend(nocow_findings(&r, &dirs)),
            Err(e) if e.kind() == ErrorKind::Interrupted => return Err(e),
            Err(e) => out.push(
                Finding::new(
                    Code::DeepNocowFailed,
                    "the NOCOW audit could not run",
                    "doctor --deep audits the VM image and database directories for NOCOW",
                )
                .with_evidence("error", e.to_string()),
            ),
        }
        facts.nocow_audited = dirs;
    }
    signals::check()?;
    Ok((out, facts))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The advice followed (a NOCOW directory that is direct) ends the
    /// mount root's finding; a directory asked for that is not direct is
    /// still said; the profile once; a probe that failed always.
    #[test]
    fn the_mount_roots_finding_ends_once_a_nocow_directory_is_direct() {
        use ProbedFor::{Asked, MountRoot, Nocow};
        use Verdict::{BufferedFallback, Direct, Inconclusive, ProfileForced};
        assert_eq!(reported(&[(MountRoot, Some(BufferedFallback))]), [true]);
        assert_eq!(reported(&[(MountRoot, Some(Direct))]), [false]);
        assert_eq!(
            reported(&[(MountRoot, Some(BufferedFallback)), (Nocow, Some(Direct))]),
            [false, false]
        );
        // A NOCOW directory that is not direct (the profile) does not end it.
        assert_eq!(
            reported(&[
                (MountRoot, Some(ProfileForced)),
                (Nocow, Some(ProfileForced))
            ]),
            [true, false]
        );
        assert_eq!(
            reported(&[
                (MountRoot, Some(BufferedFallback)),
                (Nocow, Some(Direct)),
                (Asked, Some(BufferedFallback)),
                (Asked, Some(Inconclusive)),
                (Asked, None),
            ]),
            [false, false, true, true, true]
        );
        // An asked directory that is direct is the advice followed too.
        assert_eq!(
            reported(&[(MountRoot, Some(Inconclusive)), (Asked, Some(Direct))]),
            [false, false]
        );
        assert_eq!(reported(&[(MountRoot, None)]), [true]);
    }
}
