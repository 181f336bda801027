//! The documents `sandbox up`, `down` and `list` print with `--json`
//! (docs/json.md), and the pure parts of `down`: which records a target
//! names and what removing each would do.

use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;

use super::plan::{FsKind, SandboxPlan};
use super::state::SandboxRecord;

/// `sandbox up`: what was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UpReport {
    /// Name.
    pub name: String,
    /// Filesystem.
    pub fs: FsKind,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The sandbox directory.
    pub dir: PathBuf,
    /// Size of each device.
    pub size_bytes: u64,
    /// The loop devices.
    pub devices: Vec<UpDevice>,
    /// Data profiles read back from the kernel (btrfs; empty for ext4).
    pub data_profiles: Vec<Profile>,
    /// Metadata profiles read back from the kernel.
    pub metadata_profiles: Vec<Profile>,
    /// The record `down` reads.
    pub state_file: PathBuf,
}

/// One device of an [`UpReport`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UpDevice {
    /// The loop device.
    pub loop_device: Option<PathBuf>,
    /// Its backing file.
    pub image: PathBuf,
    /// Attached with direct I/O (always: `up` checks it).
    pub direct_io: bool,
}

impl UpReport {
    /// The report for a sandbox that is up, with the profiles read back.
    pub fn new(
        record: &SandboxRecord,
        state_file: PathBuf,
        data_profiles: Vec<Profile>,
        metadata_profiles: Vec<Profile>,
    ) -> Self {
        Self {
            name: record.name.clone(),
            fs: record.fs,
            mount_point: record.mount_point.clone(),
            dir: record.dir.clone(),
            size_bytes: record.size_bytes,
            devices: record
                .devices
                .iter()
                .map(|d| UpDevice {
                    loop_device: d.loop_device.clone(),
                    image: d.image.clone(),
                    direct_io: true,
                })
                .collect(),
            data_profiles,
            metadata_profiles,
            state_file,
        }
    }
}

/// `sandbox up --dry-run`: the plan and its steps in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UpDryRun {
    /// Always true.
    pub dry_run: bool,
    /// The plan as computed.
    pub plan: SandboxPlan,
    /// What would be done, in order.
    pub steps: Vec<String>,
}

/// What `down` would do to one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DownPlan {
    /// Sandbox name.
    pub name: String,
    /// The steps, in words.
    pub steps: Vec<String>,
}

/// `sandbox down --dry-run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DownDryRun {
    /// Always true.
    pub dry_run: bool,
    /// One plan per sandbox.
    pub sandboxes: Vec<DownPlan>,
}

/// `sandbox down`: what was removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DownResult {
    /// One report per sandbox removed.
    pub removed: Vec<DownReport>,
}

/// `sandbox list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ListReport {
    /// Every valid record, with how it looks now.
    pub sandboxes: Vec<SandboxStatus>,
    /// Record files that are not valid records (reported, never acted on).
    pub bad_records: usize,
}

/// The records `down TARGET` is about: by name, mount point or directory;
/// all of them with `all`.
pub fn select(
    records: Vec<SandboxRecord>,
    target: Option<&str>,
    all: bool,
) -> Result<Vec<SandboxRecord>> {
    if all {
        return Ok(records);
    }
    let target = target.unwrap_or_default();
    let as_path = fs::canonicalize(target).ok();
    let abs = std::path::absolute(target).ok();
    let found: Vec<SandboxRecord> = records
        .into_iter()
        .filter(|r| {
            r.name == target
                || [as_path.as_ref(), abs.as_ref()]
                    .into_iter()
                    .flatten()
                    .any(|p| {
                        p == &r.mount_point
                            || p == &r.dir
                            || fs::canonicalize(&r.mount_point).is_ok_and(|m| &m == p)
                    })
        })
        .collect();
    if found.is_empty() {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("no sandbox at or named '{target}'"),
        )
        .with_hint("btrfs-lab sandbox list shows the sandboxes"));
    }
    Ok(found)
}

/// What removing the sandbox of `r` (looking like `s` now) would do.
pub(crate) fn down_plan(s: &SandboxStatus, r: &SandboxRecord) -> DownPlan {
    let mut steps = Vec::new();
    if s.mounted {
        steps.push(format!(
            "unmount {} (everything stored in the sandbox is lost)",
            r.mount_point.display()
        ));
    }
    for d in &s.devices {
        if let Some(l) = &d.loop_device {
            steps.push(format!(
                "detach {} (backing file {})",
                l.display(),
                d.image.display()
            ));
        }
    }
    for d in &s.extra_devices {
        if let Some(l) = &d.loop_device {
            steps.push(format!(
                "detach {} (backing file {}, made in the sandbox's directory after up)",
                l.display(),
                d.image.display()
            ));
        }
    }
    for d in r
        .devices
        .iter()
        .map(|d| &d.image)
        .chain(s.extra_devices.iter().map(|d| &d.image))
    {
        if d.exists() {
            steps.push(format!("delete {}", d.display()));
        }
    }
    if r.mount_point_created {
        steps.push(format!(
            "remove directory {} if empty",
            r.mount_point.display()
        ));
    }
    if r.dir_created {
        steps.push(format!("remove directory {} if empty", r.dir.display()));
    }
    DownPlan {
        name: r.name.clone(),
        steps,
    }
}
/// What `down` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DownReport {
    /// Sandbox name.
    pub name: String,
    /// The mount point, if it was unmounted.
    pub unmounted: Option<PathBuf>,
    /// Loop devices detached.
    pub detached: Vec<PathBuf>,
    /// Files and directories deleted.
    pub removed: Vec<PathBuf>,
    /// Things deliberately left alone, with the reason.
    pub left: Vec<String>,
}

/// Whether a sandbox is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    /// Mounted, every device attached.
    Up,
    /// Some of it is attached or mounted.
    Partial,
    /// Nothing attached or mounted; only files remain.
    Down,
}

/// How a recorded sandbox looks right now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxStatus {
    /// Name.
    pub name: String,
    /// `up` (mounted, all devices attached), `partial`, or `down` (nothing
    /// attached or mounted; only files remain, e.g. after a reboot).
    pub state: SandboxState,
    /// Filesystem.
    pub fs: FsKind,
    /// Mount point.
    pub mount_point: PathBuf,
    /// Whether it is mounted now.
    pub mounted: bool,
    /// Devices and whether each is attached to our image now.
    pub devices: Vec<DeviceStatus>,
    /// Size of each device.
    pub size_bytes: u64,
    /// Requested data profile.
    pub data: Option<Profile>,
    /// Requested metadata profile.
    pub metadata: Option<Profile>,
    /// Who made it (`null`: a record of an earlier version).
    pub made_by: Option<super::state::Maker>,
    /// Loop devices bound to other files in the sandbox's directory (made
    /// there to rehearse `device add` or `replace`): `down` detaches them
    /// and deletes their files too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_devices: Vec<DeviceStatus>,
}

/// One device of a [`SandboxStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceStatus {
    /// Backing file.
    pub image: PathBuf,
    /// Loop device bound to it now, if any.
    pub loop_device: Option<PathBuf>,
}
