//! `device replace`'s documents: its progress, the status, the result,
//! the report.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::device::redundancy::RedundancyCheck;
use crate::error::{Error, ErrorKind, Result};
use crate::sys::kernel::btrfs::{DevExtent, FsHandle};

use super::*;

/// Where the replace is, as a share of the data to copy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceProgress {
    /// Bytes of OLD's chunks to copy.
    pub bytes_total: u64,
    /// Bytes of them copied.
    pub bytes_done: u64,
    /// The kernel's own figure: the share of OLD's size passed, in ‰.
    pub device_permille: u64,
    /// Bytes per second over the last moves (20 s window); 0 while the
    /// rate is measured or stalled.
    pub rate_bytes_per_sec: f64,
    /// Seconds left at that rate; `null` until the estimate is stable.
    pub eta_seconds: Option<f64>,
    /// What the copy is doing, as far as the counts tell.
    #[serde(default = "crate::report::progress::running")]
    pub pace: crate::report::progress::Pace,
}

impl ReplaceProgress {
    /// As the one progress renderer reads it.
    pub fn reading(&self) -> crate::report::progress::Reading {
        crate::report::progress::Reading {
            done_bytes: self.bytes_done,
            total_bytes: self.bytes_total,
            rate_bytes_per_sec: (self.rate_bytes_per_sec > 0.0).then_some(self.rate_bytes_per_sec),
            eta_seconds: self.eta_seconds,
            pace: self.pace,
            idle_seconds: 0.0,
        }
    }
}

/// The bytes of `extents` (OLD's, by offset) below `cursor`: what the
/// replace has copied when the kernel's cursor is there (pure).
pub(crate) fn copied_below(extents: &[DevExtent], cursor: u64) -> u64 {
    extents
        .iter()
        .map(|e| cursor.saturating_sub(e.offset).min(e.length))
        .sum()
}

/// The state the kernel reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReplaceStateName {
    /// None ever ran since the mount.
    NeverStarted,
    /// Running.
    Running,
    /// The last one finished.
    Finished,
    /// The last one was cancelled.
    Cancelled,
    /// Suspended (the filesystem was unmounted while it ran; it continues
    /// at the next mount).
    Suspended,
}

impl From<btrfs_uapi::replace::ReplaceState> for ReplaceStateName {
    fn from(s: btrfs_uapi::replace::ReplaceState) -> Self {
        use btrfs_uapi::replace::ReplaceState as S;
        match s {
            S::NeverStarted => Self::NeverStarted,
            S::Started => Self::Running,
            S::Finished => Self::Finished,
            S::Canceled => Self::Cancelled,
            S::Suspended => Self::Suspended,
        }
    }
}

/// `device replace --status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceStatusReport {
    /// Mount point.
    pub mount_point: PathBuf,
    /// State.
    pub state: ReplaceStateName,
    /// The target while it runs (devid 0).
    pub target: Option<String>,
    /// The kernel's progress: share of the source device's size, in ‰.
    pub device_permille: u64,
    /// Write errors on the target so far.
    pub write_errors: u64,
    /// Blocks no copy could be read of (lost).
    pub uncorrectable_read_errors: u64,
    /// Seconds since the epoch when it began.
    pub started_at: Option<u64>,
    /// Seconds since the epoch when it stopped.
    pub stopped_at: Option<u64>,
}

impl ReplaceStatusReport {
    /// When it began and stopped, and how long it ran (`started
    /// 2026-12-07T15:00:00Z, finished 2026-12-07T15:00:12Z, took 0m12s`);
    /// `now` (seconds since the epoch) for one still running. `None`
    /// when the kernel has no start time (none since the mount).
    pub fn when(&self, now: u64) -> Option<String> {
        use crate::report::envelope::rfc3339_seconds;
        let started = self.started_at?;
        let took = |end: u64| crate::report::rate::duration(end.saturating_sub(started) as f64);
        let how = match self.state {
            ReplaceStateName::Finished => "finished",
            ReplaceStateName::Cancelled => "cancelled",
            ReplaceStateName::Suspended => "stopped",
            ReplaceStateName::Running | ReplaceStateName::NeverStarted => {
                return Some(format!(
                    "started {}, running for {}",
                    rfc3339_seconds(started),
                    took(now)
                ));
            }
        };
        Some(match self.stopped_at {
            Some(end) => format!(
                "started {}, {how} {}, took {}",
                rfc3339_seconds(started),
                rfc3339_seconds(end),
                took(end)
            ),
            None => format!("started {}", rfc3339_seconds(started)),
        })
    }
}

fn epoch(t: Option<std::time::SystemTime>) -> Option<u64> {
    t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
}

/// Reads the replace status (root only).
pub fn status_of(fs: &FsHandle, mount_point: &Path) -> Result<ReplaceStatusReport> {
    if !crate::sys::is_root() {
        return Err(
            Error::new(ErrorKind::Permission, "the replace status needs root")
                .with_hint("run it as root"),
        );
    }
    let s = fs.replace_status()?;
    let target = fs.replace_target()?.map(|t| t.path);
    Ok(ReplaceStatusReport {
        mount_point: mount_point.to_path_buf(),
        state: s.state.into(),
        target,
        device_permille: s.progress_1000,
        write_errors: s.num_write_errors,
        uncorrectable_read_errors: s.num_uncorrectable_read_errors,
        started_at: epoch(s.time_started),
        stopped_at: epoch(s.time_stopped),
    })
}

/// What the replace did, verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceResult {
    /// The devid NEW now has (OLD's).
    pub devid: u64,
    /// NEW's path as the kernel lists it.
    pub path: String,
    /// Size btrfs uses on it now.
    pub size: u64,
    /// Write errors on NEW during the copy.
    pub write_errors: u64,
    /// Blocks that no copy could be read of: lost (the files that hold
    /// them are damaged).
    pub uncorrectable_read_errors: u64,
    /// Every chunk's redundancy after it.
    pub redundancy: RedundancyCheck,
    /// The scrub offered after it (`btrfs-lab scrub MOUNT`: it reads every
    /// device, the new one too).
    pub scrub_command: Vec<String>,
    /// Seconds the copy took (this run's share, when it followed).
    pub seconds: f64,
    /// What to do next, read from the filesystem after it (`btrfs-lab
    /// balance` when a balance would spread the data better over the new
    /// device; absent: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Where the time went: the kernel's copy (and the resize after it)
    /// beside btrfs-lab's own work before and after it.
    #[serde(default)]
    pub phases: crate::operation::state::Phases,
}

/// `device replace --json`: the plan, and what was done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceReport {
    /// The plan.
    pub plan: ReplacePlan,
    /// What was done and verified (absent with `--dry-run`, a refusal, or
    /// when a signal detached the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ReplaceResult>,
    /// A signal detached the run: the replace goes on in the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detached: Option<ReplaceDetached>,
}

/// A run that a signal detached from the replace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceDetached {
    /// `SIGINT`, `SIGTERM`, `SIGHUP`.
    pub signal: String,
    /// Where it was.
    pub progress: Option<ReplaceProgress>,
}

impl ReplaceReport {
    /// The plan alone: its record before anything is done.
    pub fn planned(plan: &ReplacePlan) -> Self {
        ReplaceReport {
            plan: plan.clone(),
            result: None,
            detached: None,
        }
    }
}
