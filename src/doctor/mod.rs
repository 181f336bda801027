//! `doctor`: one read-only look at each mounted btrfs that ranks what is
//! wrong, worst first, with the numbers, why it matters and the command to
//! run. Facts are read once ([`gather`]), findings computed by pure code
//! ([`analyse::analyse`]), and the report rendered as text, JSON or
//! Prometheus metrics ([`prometheus`]).

pub mod analyse;
pub mod deep;
pub mod facts;
pub mod leftovers;
pub mod prometheus;
pub mod scrub;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::model::envelope::{hostname, rfc3339_seconds};
use crate::model::finding::{Finding, Severity};
use crate::space::{self, BtrfsTarget};
use crate::sys::fs::outfile;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::{self, bg_type_of, profile_of};

pub use facts::FsFacts;

/// Exit status: no warning or critical finding.
pub const EXIT_OK: u8 = crate::model::exit::HEALTHY.code;
/// Exit status: the worst finding is a warning.
pub const EXIT_WARNING: u8 = crate::model::exit::WARNING.code;
/// Exit status: a critical finding.
pub const EXIT_CRITICAL: u8 = crate::model::exit::CRITICAL.code;
/// Exit status: doctor could not look (not a btrfs, not root, ...), as
/// monitoring plugins' UNKNOWN.
pub const EXIT_UNKNOWN: u8 = crate::model::exit::UNKNOWN.code;

/// One filesystem: what was read, and what was found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FsDiagnosis {
    /// Mount point.
    pub mount_point: PathBuf,
    /// Filesystem UUID.
    pub uuid: String,
    /// The worst finding's severity (none: no finding at all).
    pub worst: Option<Severity>,
    /// Findings, worst first.
    pub findings: Vec<Finding>,
    /// What the findings were computed from.
    pub facts: FsFacts,
    /// What `--deep` found out (absent without it).
    #[serde(default)]
    pub deep: Option<deep::DeepFacts>,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DoctorReport {
    /// `btrfs-lab`.
    pub tool: String,
    /// Its version.
    pub version: String,
    /// The host examined.
    pub hostname: String,
    /// When, UTC (RFC 3339).
    pub timestamp: String,
    /// When, seconds since the epoch.
    pub timestamp_unix: u64,
    /// Each filesystem examined.
    pub filesystems: Vec<FsDiagnosis>,
    /// The worst finding over all filesystems.
    pub worst: Option<Severity>,
    /// The exit status: 0 ok (or info only), 1 warning, 2 critical.
    pub exit_status: u8,
}

/// The exit status for a worst severity.
pub fn exit_status(worst: Option<Severity>) -> u8 {
    match worst {
        Some(Severity::Critical) => EXIT_CRITICAL,
        Some(Severity::Warning) => EXIT_WARNING,
        _ => EXIT_OK,
    }
}

/// Diagnoses one filesystem from its facts.
pub fn diagnose(facts: FsFacts, now: u64) -> FsDiagnosis {
    let findings = analyse::analyse(&facts, now);
    FsDiagnosis {
        mount_point: facts.mount_point.clone(),
        uuid: facts.uuid.clone(),
        worst: findings.iter().map(|f| f.severity).min(),
        findings,
        facts,
        deep: None,
    }
}

/// Adds the `--deep` findings to a diagnosis.
pub fn add_deep(d: &mut FsDiagnosis, findings: Vec<Finding>, facts: deep::DeepFacts) {
    add_findings(d, findings);
    d.deep = Some(facts);
}

/// Adds findings to a diagnosis, keeping it ranked.
pub fn add_findings(d: &mut FsDiagnosis, findings: Vec<Finding>) {
    d.findings.extend(findings);
    crate::model::finding::rank(&mut d.findings);
    d.worst = d.findings.iter().map(|f| f.severity).min();
}

/// Builds the report from diagnoses.
pub fn report(filesystems: Vec<FsDiagnosis>, hostname: String, now: u64) -> DoctorReport {
    let worst = filesystems.iter().filter_map(|f| f.worst).min();
    DoctorReport {
        tool: "btrfs-lab".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        hostname,
        timestamp: rfc3339_seconds(now),
        timestamp_unix: now,
        filesystems,
        worst,
        exit_status: exit_status(worst),
    }
}

/// Examines the filesystems at `mounts` (every mounted btrfs when empty);
/// `deep` adds the checks that cost time or write a little ([`deep`]).
pub fn examine(root: &SysRoot, mounts: &[PathBuf], deep: bool) -> Result<DoctorReport> {
    // Without root the error counters and the balance state cannot be read:
    // a report would call a corrupted filesystem healthy.
    if !crate::sys::is_root() {
        return Err(crate::error::Error::new(
            crate::error::ErrorKind::Permission,
            "doctor needs root: the device error counters and the balance state are root-only ioctls",
        )
        .with_hint("run it as root (sudo btrfs-lab doctor), as the systemd unit and the playbooks do"));
    }
    let targets = if mounts.is_empty() {
        space::mounted_btrfs(root)?
    } else {
        mounts
            .iter()
            .map(|m| space::resolve(root, m))
            .collect::<Result<Vec<_>>>()?
    };
    let now = now_unix();
    let mut out = Vec::new();
    for t in &targets {
        let mut d = diagnose(gather(root, t)?, now);
        // Work directories of dead bench runs: at the top level and in the
        // VM image and database directories doctor looks at.
        let mut places = vec![d.facts.mount_point.clone()];
        places.extend(deep::usual_dirs(&d.facts));
        add_findings(&mut d, leftovers::findings(&leftovers::scan(&places)));
        if deep {
            crate::sys::kernel::signals::check()?;
            let (findings, facts) = deep::deep(root, &d.facts)?;
            add_deep(&mut d, findings, facts);
        }
        out.push(d);
    }
    Ok(report(out, hostname(), now))
}

/// Reads the facts of one mounted btrfs (ioctls, sysfs, the scrub record).
pub fn gather(root: &SysRoot, target: &BtrfsTarget) -> Result<FsFacts> {
    let state = crate::admin::state::read_state(root, &target.path)?;
    let info = btrfs::fs_info(&target.path)?;
    let devices = state
        .devices
        .iter()
        .map(|d| {
            let missing = d.path.is_empty();
            facts::DeviceFacts {
                devid: d.devid,
                path: if missing {
                    "missing".to_owned()
                } else {
                    d.path.clone()
                },
                missing,
                size_bytes: d.size,
                allocated_bytes: d.allocated,
                errors: state
                    .device_errors
                    .iter()
                    .find(|e| e.devid == d.devid)
                    .map(|e| facts::ErrorCounts {
                        write: e.write,
                        read: e.read,
                        flush: e.flush,
                        corruption: e.corruption,
                        generation: e.generation,
                    }),
            }
        })
        .collect::<Vec<_>>();
    let spaces = state
        .spaces
        .iter()
        .map(|s| facts::SpaceUse {
            bg_type: bg_type_of(s.flags),
            profile: profile_of(s.flags),
            total_bytes: s.total_bytes,
            used_bytes: s.used_bytes,
        })
        .collect();
    let sysfs = |rel: &str| {
        root.read_attr(&root.sys(&format!("fs/btrfs/{}/{rel}", target.fsid)))
            .ok()
            .map(|s| s.trim().to_owned())
    };
    let raw: u64 = devices.iter().map(|d| d.size_bytes).sum();
    let metadata_chunk_bytes = sysfs("allocation/metadata/chunk_size")
        .and_then(|s| s.parse().ok())
        .unwrap_or(if raw > 50 << 30 { 1 << 30 } else { 256 << 20 })
        // The allocator caps a chunk at 10% of the writable space.
        .min(raw / 10)
        .max(1 << 20);
    let scrub_file = root
        .prefix()
        .join(format!("var/lib/btrfs/scrub.status.{}", target.fsid));
    let scrub = root
        .read_text(&scrub_file, 1 << 20)
        .map(|t| scrub::parse_status(&t, &target.fsid))
        .unwrap_or_default();
    Ok(FsFacts {
        mount_point: target.mount.mount_point.clone(),
        uuid: target.fsid.clone(),
        label: sysfs("label").filter(|l| !l.is_empty()),
        // The VFS options, then btrfs' own (`degraded`, `space_cache=v2`, ...).
        mount_options: target.mount.options_text(),
        kernel: state.kernel.to_string(),
        features: state.features.clone(),
        total_devices: info.num_devices,
        devices,
        spaces,
        metadata_chunk_bytes,
        balance: state.balance.map(|b| facts::BalanceFacts {
            running: b.running,
            data_target: b.data_target,
            metadata_target: b.metadata_target,
            expected: b.expected,
            completed: b.completed,
        }),
        scrub,
    })
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The hint of a `--textfile` that cannot be written.
const TEXTFILE_HINT: &str = "the directory must exist and be writable, with space left (node_exporter's --collector.textfile.directory)";

/// Writes `text` to the `--textfile` `path` atomically for a collector that
/// may read at any moment ([`crate::sys::fs::outfile`]): the directory is held
/// by descriptor (a link another user planted in it is refused), the new
/// content is a file unique to this run, synced, renamed over `path`.
/// Temporary files that killed runs left are removed first.
pub fn write_textfile(path: &Path, text: &str) -> Result<()> {
    let (dir, name) = outfile::split(path)?;
    let dir = outfile::OutputDir::open(&dir).map_err(|e| e.with_hint(TEXTFILE_HINT))?;
    let _ = dir.remove_stale_temps(&name);
    dir.write(&name, text.as_bytes(), 0o644)
        .map(|_| ())
        .map_err(|e| e.with_hint(TEXTFILE_HINT))
}

/// What a failed `--textfile` holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextfileState {
    /// Replaced by `btrfs_lab_doctor_success 0` (a new file).
    MarkedFailed,
    /// `btrfs_lab_doctor_success 0` written into the old file in place: a
    /// new file could not be made (a full filesystem).
    MarkedFailedInPlace,
    /// Neither worked: the file still holds an earlier run's metrics.
    Stale(String),
}

/// After a failure, makes the `--textfile` say `btrfs_lab_doctor_success 0`:
/// a new file if one can be made, else the old one rewritten in place, so
/// that monitoring does not keep reading an earlier run's healthy metrics.
pub fn mark_textfile_failed(path: &Path, now: u64) -> TextfileState {
    let text = prometheus::render_failure(now);
    let attempt = || -> Result<TextfileState> {
        let (dir, name) = outfile::split(path)?;
        let dir = outfile::OutputDir::open(&dir)?;
        let _ = dir.remove_stale_temps(&name);
        match dir.write(&name, text.as_bytes(), 0o644) {
            Ok(_) => Ok(TextfileState::MarkedFailed),
            Err(first) => match dir.rewrite_in_place(&name, text.as_bytes()) {
                Ok(_) => Ok(TextfileState::MarkedFailedInPlace),
                Err(e) if e.kind() == crate::error::ErrorKind::NotFound => {
                    Ok(TextfileState::Stale(first.message().to_owned()))
                }
                Err(e) => Ok(TextfileState::Stale(e.message().to_owned())),
            },
        }
    };
    attempt().unwrap_or_else(|e| TextfileState::Stale(e.message().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_follows_the_worst() {
        assert_eq!(exit_status(None), 0);
        assert_eq!(exit_status(Some(Severity::Info)), 0);
        assert_eq!(exit_status(Some(Severity::Warning)), 1);
        assert_eq!(exit_status(Some(Severity::Critical)), 2);
    }

    #[test]
    fn textfile_is_replaced_atomically_and_temp_removed() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let p = dir.join("btrfs.prom");
        write_textfile(&p, "a 1\n").unwrap();
        write_textfile(&p, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a 2\n");
        let names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let e = write_textfile(&dir.join("nope/x.prom"), "").unwrap_err();
        assert!(e.hint().is_some_and(|h| h.contains("textfile")));
        assert_eq!(mark_textfile_failed(&p, 7), TextfileState::MarkedFailed);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains("btrfs_lab_doctor_success 0\n"), "{text}");
        assert!(matches!(
            mark_textfile_failed(&dir.join("nope/x.prom"), 7),
            TextfileState::Stale(_)
        ));
    }
}
