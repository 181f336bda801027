//! Planning a scrub: the devices to read, from where (a resume), the
//! limits in force.

use std::path::{Path, PathBuf};

use super::{PlannedDevice, SavedScrub, ScrubPlan, StateStore};
use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs;

/// What the user asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Request {
    /// Report only (`btrfs scrub start -r`).
    pub readonly: bool,
    /// Bytes per second per device.
    pub limit: Option<u64>,
    /// Continue an interrupted scrub.
    pub resume: bool,
    /// Only this member (`--device DEVID`): the one that came back, to
    /// resync it.
    pub device: Option<u64>,
}

/// One device as the planner takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInput {
    /// The btrfs device id.
    pub devid: u64,
    /// Its block device (empty when missing).
    pub path: String,
    /// Its allocated bytes (DEV_INFO).
    pub allocated: u64,
    /// What a scrub reads on it (chunk usage), when it could be read.
    pub used: Option<u64>,
    /// Its scrub_speed_max file.
    pub speed_max_file: Option<PathBuf>,
    /// Its scrub_speed_max now (None or 0: no limit).
    pub speed_max_now: Option<u64>,
}

/// Pure: the plan from the devices and the saved state.
pub fn plan_from(
    mount_point: &Path,
    fsid: &str,
    devices: &[DeviceInput],
    saved: Option<&SavedScrub>,
    req: Request,
) -> Result<ScrubPlan> {
    let resumable = saved.filter(|s| !s.finished && s.fsid == fsid);
    if req.resume && resumable.is_none() {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "no interrupted scrub of {} to resume",
                mount_point.display()
            ),
        )
        .with_hint("start one without --resume"));
    }
    let resume = req.resume;
    let mut planned = Vec::new();
    let mut missing = Vec::new();
    if let Some(id) = req.device {
        match devices.iter().find(|d| d.devid == id) {
            None => {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!(
                        "{} has no device {id} (its devids: {})",
                        mount_point.display(),
                        devices
                            .iter()
                            .map(|d| d.devid.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .with_hint("btrfs-lab show MOUNT lists each member's devid"));
            }
            Some(d) if d.path.is_empty() => {
                return Err(Error::new(
                    ErrorKind::State,
                    format!(
                        "device {id} of {} is missing: there is nothing to read",
                        mount_point.display()
                    ),
                )
                .with_hint(
                    "put it back and mount again, or replace it (btrfs-lab device replace)",
                ));
            }
            Some(_) => {}
        }
    }
    for d in devices
        .iter()
        .filter(|d| req.device.is_none_or(|id| id == d.devid))
    {
        if d.path.is_empty() {
            missing.push(d.devid);
            continue;
        }
        let prior = if resume {
            resumable.and_then(|s| s.device(d.devid))
        } else {
            None
        };
        if prior.is_some_and(|p| p.finished) {
            continue;
        }
        planned.push(PlannedDevice {
            devid: d.devid,
            path: d.path.clone(),
            bytes_to_read: d.used.unwrap_or(d.allocated),
            allocated_only: d.used.is_none(),
            start: prior.map_or(0, |p| p.last_physical),
            speed_max_file: d.speed_max_file.clone(),
            speed_max_now: d.speed_max_now.filter(|v| *v > 0),
        });
    }
    Ok(ScrubPlan {
        mount_point: mount_point.to_path_buf(),
        fsid: fsid.to_owned(),
        readonly: req.readonly,
        resume,
        limit: req.limit,
        devices: planned,
        missing,
    })
}

/// Reads the filesystem and the saved state and plans the run.
pub fn plan(
    fs: &btrfs::FsHandle,
    store: &StateStore,
    req: Request,
) -> Result<(ScrubPlan, Option<SavedScrub>)> {
    let mount = fs.path();
    let fsid = fs.fsid().to_owned();
    if !req.readonly && fs.read_only() {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{} is mounted read-only: a scrub that repairs cannot write the good copies back",
                mount.display()
            ),
        )
        .with_hint("add --readonly to only find the errors, or remount it read-write (mount -o remount,rw)"));
    }
    let used = bytes_to_read(fs)?;
    let devs: Vec<_> = fs
        .devices()?
        .into_iter()
        .map(|d| DeviceInput {
            devid: d.devid,
            speed_max_file: btrfs::scrub_speed_max_file(&fsid, d.devid),
            speed_max_now: btrfs::scrub_speed_max(&SysRoot::host(), &fsid, d.devid),
            used: used
                .as_ref()
                .map(|u| u.iter().find(|(id, _)| *id == d.devid).map_or(0, |x| x.1)),
            path: d.path,
            allocated: d.bytes_used,
        })
        .collect();
    let saved = store.load(&fsid)?;
    let p = plan_from(mount, &fsid, &devs, saved.as_ref(), req)?;
    Ok((p, saved))
}

/// What a scrub reads on each device of the filesystem held (by devid),
/// when the chunk tree can be read.
pub(super) fn bytes_to_read(fs: &btrfs::FsHandle) -> Result<Option<Vec<(u64, u64)>>> {
    let bgt = crate::sys::fs::target::features(&SysRoot::host(), fs.fsid())
        .iter()
        .any(|x| x == "block_group_tree");
    btrfs::scrub_bytes_per_device_of(fs.held_fd()?, bgt, fs.path())
}
