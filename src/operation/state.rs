//! What the administration planners know about a mounted btrfs: read once,
//! then planned on by pure code.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::model::balance::BalanceInfo;
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::sys::fs::root::SysRoot;
use crate::sys::fs::target::{self, BtrfsTarget};
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::btrfs::{SpaceEntry, bg_type_of, profile_of};
use crate::sys::kernel_release;

/// Where a device operation's time went, in seconds: the kernel's work
/// beside what btrfs-lab adds before (reading the filesystem, planning) and
/// after it (reading it back, checking every chunk's redundancy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Phases {
    /// Reading the filesystem and making the plan.
    pub plan: f64,
    /// The kernel's work (the relocation or the copy), as btrfs-lab waited
    /// for it.
    pub kernel: f64,
    /// Reading the result back and checking it.
    pub verify: f64,
}

/// A member device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct MemberDevice {
    /// btrfs device id.
    pub devid: u64,
    /// Path (empty if missing).
    pub path: String,
    /// Size btrfs uses.
    pub size: u64,
    /// Bytes allocated to chunks on it.
    pub allocated: u64,
}

impl MemberDevice {
    /// Bytes not allocated to any chunk.
    pub fn unallocated(&self) -> u64 {
        self.size.saturating_sub(self.allocated)
    }
}

/// The filesystem, as the planners see it.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FsState {
    /// The path given, canonical.
    pub path: PathBuf,
    /// Mount point.
    pub mount_point: PathBuf,
    /// Filesystem UUID.
    pub fsid: String,
    /// Member devices by devid.
    pub devices: Vec<MemberDevice>,
    /// SPACE_INFO.
    #[serde(skip)]
    pub spaces: Vec<SpaceEntry>,
    /// The exclusive operation running (`none`, `balance`, `balance paused`,
    /// `device add`, `replace`, `resize`, ...), from sysfs.
    pub(crate) exclusive_operation: Option<String>,
    /// A balance that exists.
    pub balance: Option<BalanceInfo>,
    /// Running kernel.
    pub kernel: KernelVersion,
    /// Enabled features (sysfs).
    pub features: Vec<String>,
    /// Error counters of each device (GET_DEV_STATS; empty without root).
    pub device_errors: Vec<DeviceErrors>,
}

/// An error counter at this value is invalid, not a count: UINT64_MAX, as
/// one operator's exporter showed for a corruption counter. Reports name
/// it as invalid and leave it out of every sum and rate.
pub const INVALID_COUNT: u64 = u64::MAX;

/// The error counters of one device (what `btrfs device stats` shows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct DeviceErrors {
    /// btrfs device id.
    pub devid: u64,
    /// Path (empty if missing).
    pub path: String,
    /// The device's UUID (DEV_INFO; node_exporter's `btrfs_dev_uuid`).
    #[serde(default)]
    pub dev_uuid: String,
    /// Read I/O errors.
    pub read: u64,
    /// Write I/O errors.
    pub write: u64,
    /// Flush I/O errors.
    pub flush: u64,
    /// Checksum or bytenr mismatches found on read.
    pub corruption: u64,
    /// Blocks not of the expected generation.
    pub generation: u64,
}

impl DeviceErrors {
    /// Errors that make reading every chunk (what a balance does) fail:
    /// read and corruption errors.
    pub(crate) fn unreadable(&self) -> u64 {
        [self.read, self.corruption]
            .into_iter()
            .filter(|n| *n != INVALID_COUNT)
            .fold(0, u64::saturating_add)
    }
}

impl FsState {
    /// Profiles in use for a type (data includes mixed block groups).
    pub fn profiles(&self, kind: BgType) -> Vec<Profile> {
        let mut v: Vec<Profile> = self
            .spaces
            .iter()
            .filter(|s| s.total_bytes > 0 && matches_kind(bg_type_of(s.flags), kind))
            .map(|s| profile_of(s.flags))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Logical bytes used for a type.
    pub fn used(&self, kind: BgType) -> u64 {
        self.spaces
            .iter()
            .filter(|s| matches_kind(bg_type_of(s.flags), kind))
            .map(|s| s.used_bytes)
            .sum()
    }

    /// Logical bytes allocated to block groups of a type that are not in
    /// `target` (what a soft conversion to `target` relocates).
    pub(crate) fn allocated_outside(&self, kind: BgType, target: Profile) -> u64 {
        self.spaces
            .iter()
            .filter(|s| matches_kind(bg_type_of(s.flags), kind) && profile_of(s.flags) != target)
            .map(|s| s.total_bytes)
            .sum()
    }

    /// Sum of device sizes.
    pub(crate) fn raw_size(&self) -> u64 {
        self.devices.iter().map(|d| d.size).sum()
    }

    /// Mixed block groups (data and metadata share chunks).
    pub(crate) fn mixed_block_groups(&self) -> bool {
        self.spaces
            .iter()
            .any(|s| bg_type_of(s.flags) == BgType::DataMetadata)
    }
}

/// A space entry's type counts for `kind` (mixed block groups count for both).
pub(crate) fn matches_kind(t: BgType, kind: BgType) -> bool {
    t == kind || (t == BgType::DataMetadata && matches!(kind, BgType::Data | BgType::Metadata))
}

/// `/sys/fs/btrfs/FSID/NAME`, trimmed.
pub(crate) fn read_sysfs(root: &SysRoot, fsid: &str, name: &str) -> Option<String> {
    root.read_attr(&root.sys(&format!("fs/btrfs/{fsid}/{name}")))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Reads the state of the btrfs at `path` (read-only callers: doctor).
pub(crate) fn read_state(root: &SysRoot, path: &Path) -> Result<FsState> {
    Ok(open_state(root, path)?.1)
}

/// Resolves `path` once, opens the mounted filesystem there (a descriptor
/// every later ioctl goes through) and reads its state through it.
pub fn open_state(root: &SysRoot, path: &Path) -> Result<(FsHandle, FsState)> {
    // Opened once and held: a symbolic link another user planted on the
    // way is refused, and the plan is for the filesystem held.
    let (target, handle): (BtrfsTarget, FsHandle) = target::resolve_held(root, path)?;
    if handle.fsid() != target.fsid {
        return Err(crate::error::Error::new(
            crate::error::ErrorKind::State,
            format!(
                "{} changed while it was being read (filesystem {} then {})",
                path.display(),
                target.fsid,
                handle.fsid()
            ),
        )
        .with_hint("something is replacing the path (a symlink or a mount); check it"));
    }
    let state = read_state_at(root, &handle, &target.mount.mount_point)?;
    Ok((handle, state))
}

/// Reads the state again through an open handle (never through a path).
pub(crate) fn read_state_at(root: &SysRoot, h: &FsHandle, mount_point: &Path) -> Result<FsState> {
    let fsid = h.fsid().to_owned();
    let infos = h.devices()?;
    let devices = infos
        .iter()
        .map(|d| MemberDevice {
            devid: d.devid,
            path: d.path.clone(),
            size: d.total_bytes,
            allocated: d.bytes_used,
        })
        .collect();
    let spaces = h.space_entries()?;
    let root_user = crate::sys::is_root();
    let balance = if root_user {
        h.balance_status()?.as_ref().map(BalanceInfo::from_status)
    } else {
        None
    };
    let device_errors = if root_user {
        infos
            .iter()
            .filter_map(|d| {
                h.device_stats(d.devid).ok().map(|s| DeviceErrors {
                    devid: d.devid,
                    path: d.path.clone(),
                    dev_uuid: d.uuid.as_hyphenated().to_string(),
                    read: s.read_errs,
                    write: s.write_errs,
                    flush: s.flush_errs,
                    corruption: s.corruption_errs,
                    generation: s.generation_errs,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let features = target::features(root, &fsid);
    Ok(FsState {
        exclusive_operation: read_sysfs(root, &fsid, "exclusive_operation"),
        mount_point: mount_point.to_path_buf(),
        path: h.path().to_path_buf(),
        fsid,
        devices,
        spaces,
        balance,
        kernel: KernelVersion::parse(&kernel_release()).unwrap_or(KernelVersion::new(0, 0)),
        features,
        device_errors,
    })
}
