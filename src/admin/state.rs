//! What the administration planners know about a mounted btrfs: read once,
//! then planned on by pure code.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Result;
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::space::{self, BtrfsTarget};
use crate::sys::btrfs::{self, SpaceEntry, bg_type_of, profile_of, profile_of_target};
use crate::sys::ioctl::BalanceStatus;
use crate::sys::kernel_release;
use crate::sys::root::SysRoot;

/// A member device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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

/// A balance that exists (running or paused), as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BalanceInfo {
    /// Running now.
    pub running: bool,
    /// Paused (exists, not running).
    pub paused: bool,
    /// Data convert target.
    pub data_target: Option<Profile>,
    /// Metadata convert target.
    pub metadata_target: Option<Profile>,
    /// Chunks expected (0 after a remount of a paused balance).
    pub expected: u64,
    /// Chunks relocated.
    pub completed: u64,
}

impl BalanceInfo {
    /// From the kernel's report.
    pub fn from_status(s: &BalanceStatus) -> Self {
        Self {
            running: s.state & 1 != 0,
            paused: s.state & 1 == 0,
            data_target: s.data_target.map(profile_of_target),
            metadata_target: s.meta_target.map(profile_of_target),
            expected: s.expected,
            completed: s.completed,
        }
    }
}

/// The filesystem, as the planners see it.
#[derive(Debug, Clone, Serialize)]
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
    pub exclusive_operation: Option<String>,
    /// A balance that exists.
    pub balance: Option<BalanceInfo>,
    /// Running kernel.
    pub kernel: KernelVersion,
    /// Enabled features (sysfs).
    pub features: Vec<String>,
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
    pub fn allocated_outside(&self, kind: BgType, target: Profile) -> u64 {
        self.spaces
            .iter()
            .filter(|s| matches_kind(bg_type_of(s.flags), kind) && profile_of(s.flags) != target)
            .map(|s| s.total_bytes)
            .sum()
    }

    /// Logical bytes used in block groups of a type that are not in
    /// `target`: the data a conversion still has to move.
    pub fn used_outside(&self, kind: BgType, target: Profile) -> u64 {
        self.spaces
            .iter()
            .filter(|s| matches_kind(bg_type_of(s.flags), kind) && profile_of(s.flags) != target)
            .map(|s| s.used_bytes)
            .sum()
    }

    /// Sum of device sizes.
    pub fn raw_size(&self) -> u64 {
        self.devices.iter().map(|d| d.size).sum()
    }

    /// Mixed block groups (data and metadata share chunks).
    pub fn mixed_block_groups(&self) -> bool {
        self.spaces
            .iter()
            .any(|s| bg_type_of(s.flags) == BgType::DataMetadata)
    }
}

/// A space entry's type counts for `kind` (mixed block groups count for both).
pub(crate) fn matches_kind(t: BgType, kind: BgType) -> bool {
    t == kind || (t == BgType::DataMetadata && matches!(kind, BgType::Data | BgType::Metadata))
}

fn read_sysfs(root: &SysRoot, fsid: &str, name: &str) -> Option<String> {
    fs::read_to_string(root.sys(&format!("fs/btrfs/{fsid}/{name}")))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Reads the state of the btrfs at `path`.
pub fn read_state(root: &SysRoot, path: &Path) -> Result<FsState> {
    let target: BtrfsTarget = space::resolve(root, path)?;
    let devices = btrfs::devices(&target.path)?
        .into_iter()
        .map(|d| MemberDevice {
            devid: d.devid,
            path: d.path,
            size: d.total_bytes,
            allocated: d.bytes_used,
        })
        .collect();
    let spaces = btrfs::space_entries(&target.path)?;
    let balance = if crate::sys::is_root() {
        btrfs::balance_status(&target.path)?
            .as_ref()
            .map(BalanceInfo::from_status)
    } else {
        None
    };
    let features = space::features(root, &target.fsid);
    Ok(FsState {
        exclusive_operation: read_sysfs(root, &target.fsid, "exclusive_operation"),
        mount_point: target.mount.mount_point.clone(),
        path: target.path,
        fsid: target.fsid,
        devices,
        spaces,
        balance,
        kernel: KernelVersion::parse(&kernel_release()).unwrap_or(KernelVersion::new(0, 0)),
        features,
    })
}
