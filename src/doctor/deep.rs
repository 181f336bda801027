//! `doctor --deep`: what costs time or writes a little, through the other
//! jobs' public entry points: probe-dio on the filesystem (its scratch files
//! are removed on every path), the PCIe links of the member drives with
//! their NVMe SMART thermal counters, and the NOCOW audit of the usual VM
//! image and database directories on the filesystem.

use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, Result};
use crate::links::{self, LinksOptions};
use crate::model::finding::{Code, Finding};
use crate::probe::{self, ProbeOptions, Verdict};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::signals;
use crate::sys::tools::display_argv;

use super::facts::FsFacts;

/// What the deep checks found out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeepFacts {
    /// probe-dio's verdict (`direct`, `buffered-fallback`, `profile-forced`,
    /// `inconclusive`), absent when the probe could not run.
    pub probe_verdict: Option<String>,
    /// Why the probe could not run.
    pub probe_error: Option<String>,
    /// Why the links could not be read (not NVMe, ...).
    pub(crate) links_error: Option<String>,
    /// The VM image and database directories audited for NOCOW.
    #[serde(default)]
    pub nocow_audited: Vec<std::path::PathBuf>,
}

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

/// Runs the deep checks on one filesystem: findings, and the facts. A
/// signal (SIGINT, SIGTERM, SIGHUP, with [`crate::sys::kernel::signals::install`])
/// stops it at the next safe point: the probe removes its test files and
/// its trace instance on the way out, and the error is
/// [`ErrorKind::Interrupted`](crate::error::ErrorKind::Interrupted).
pub fn deep(root: &SysRoot, f: &FsFacts) -> Result<(Vec<Finding>, DeepFacts)> {
    let mut out = Vec::new();
    let mut facts = DeepFacts::default();
    let m = f.mount_point.display().to_string();

    // probe-dio's own defaults: 4 MiB files where the kernel's tracepoints
    // count each file's pages, 64 MiB where only a counter can.
    let mut opts = ProbeOptions::new(&f.mount_point);
    opts.sysroot = root.clone();
    match probe::measure(&opts, &mut |_, _| {}) {
        Ok(r) => {
            facts.probe_verdict = Some(r.verdict.name().to_owned());
            if let Some(code) = verdict_code(r.verdict) {
                let mut fi = Finding::new(code, r.summary.clone(), r.explanation.clone())
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
                out.push(fi.with_command(display_argv(&["btrfs-lab", "probe-dio", &m])));
            }
        }
        Err(e) if e.kind() == ErrorKind::Interrupted => return Err(e),
        Err(e) => {
            facts.probe_error = Some(e.to_string());
            out.push(
                Finding::new(
                    Code::DeepProbeFailed,
                    "the O_DIRECT probe could not run",
                    "doctor --deep writes two small test files to find out whether O_DIRECT writes are direct",
                )
                .with_evidence("error", e.to_string())
                .with_command(display_argv(&["btrfs-lab", "probe-dio", &m])),
            );
        }
    }

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
