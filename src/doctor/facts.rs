//! What doctor reads about one mounted btrfs: plain data, so the analysis
//! is pure code tested without a filesystem.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::scrub::ScrubDevice;
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::operation::state::INVALID_COUNT;

/// The error counters of one device (`btrfs device stats`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct ErrorCounts {
    /// Write I/O errors.
    pub write: u64,
    /// Read I/O errors.
    pub read: u64,
    /// Flush I/O errors.
    pub flush: u64,
    /// Checksum or bytenr mismatches.
    pub corruption: u64,
    /// Blocks of an unexpected generation.
    pub generation: u64,
}

impl ErrorCounts {
    /// All counters, with their `btrfs device stats` names.
    pub fn kinds(&self) -> [(&'static str, u64); 5] {
        [
            ("write", self.write),
            ("read", self.read),
            ("flush", self.flush),
            ("corruption", self.corruption),
            ("generation", self.generation),
        ]
    }

    /// The counters with a valid value (not [`INVALID_COUNT`]).
    pub fn valid_kinds(&self) -> Vec<(&'static str, u64)> {
        self.kinds()
            .into_iter()
            .filter(|(_, n)| *n != INVALID_COUNT)
            .collect()
    }

    /// The counters at [`INVALID_COUNT`].
    pub fn invalid_kinds(&self) -> Vec<&'static str> {
        self.kinds()
            .into_iter()
            .filter(|(_, n)| *n == INVALID_COUNT)
            .map(|(k, _)| k)
            .collect()
    }

    /// Sum of the valid counters.
    pub fn total(&self) -> u64 {
        self.valid_kinds()
            .iter()
            .fold(0, |s, (_, n)| s.saturating_add(*n))
    }

    /// Sum of the valid counters of these kinds.
    pub fn sum_of(&self, kinds: &[&str]) -> u64 {
        self.valid_kinds()
            .iter()
            .filter(|(k, _)| kinds.contains(k))
            .fold(0, |s, (_, n)| s.saturating_add(*n))
    }
}

/// One member device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceFacts {
    /// btrfs device id.
    pub devid: u64,
    /// Path (`missing` when the device is not there).
    pub path: String,
    /// The device is missing.
    pub missing: bool,
    /// Bytes btrfs uses on it.
    pub size_bytes: u64,
    /// Bytes allocated to chunks.
    pub allocated_bytes: u64,
    /// Error counters (absent when they could not be read).
    pub errors: Option<ErrorCounts>,
    /// The device's UUID (node_exporter's `btrfs_dev_uuid`; absent when
    /// not read).
    #[serde(default)]
    pub dev_uuid: Option<String>,
    /// The drives it rests on, the ones to check with `smartctl`: the NVMe
    /// controller (`/dev/nvme0`), the whole disk of a partition, the disk
    /// that holds a loop device's backing file. Empty when not known.
    #[serde(default)]
    pub drives: Vec<String>,
    /// The largest discard the device takes (sysfs `queue/discard_max_bytes`;
    /// 0: it does not support discard; absent when not known).
    #[serde(default)]
    pub discard_max_bytes: Option<u64>,
    /// Its scrub speed limit (sysfs `devinfo/DEVID/scrub_speed_max`, bytes
    /// per second; 0: none; absent when the kernel has no such file).
    #[serde(default)]
    pub scrub_speed_max: Option<u64>,
    /// The btrfs-lab run that set that limit, when the settings ledger
    /// holds its record (none: set by hand, or by another tool).
    #[serde(default)]
    pub scrub_speed_max_by: Option<SettingLeft>,
    /// Its state: present, missing, vanished, stale or returned
    /// ([`super::members`]).
    #[serde(default)]
    pub state: super::members::MemberState,
    /// Since when it has been in that state (seconds since the epoch), as
    /// doctor's looks tell (absent: not recorded).
    #[serde(default)]
    pub state_since: Option<u64>,
    /// That state began at this look (a state other than present is then
    /// told by `--notify`).
    #[serde(default)]
    pub state_new: bool,
    /// The generation in its own superblock (absent: not read).
    #[serde(default)]
    pub generation: Option<u64>,
    /// Its error counters at doctor's last look (absent: no earlier look).
    #[serde(default)]
    pub errors_before: Option<ErrorCounts>,
}

/// A kernel setting a btrfs-lab run changed, as the settings ledger
/// (`STATE/settings`) records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SettingLeft {
    /// The command that changed it (`scrub`, `bench`).
    pub command: String,
    /// Its pid.
    pub pid: u32,
    /// It is still running.
    pub running: bool,
    /// The value before it.
    pub before: u64,
    /// The value it set.
    pub set: u64,
}

impl DeviceFacts {
    /// Bytes not allocated to any chunk.
    pub(crate) fn unallocated_bytes(&self) -> u64 {
        if self.missing {
            0
        } else {
            self.size_bytes.saturating_sub(self.allocated_bytes)
        }
    }
}

/// Space of one block-group type and profile (`btrfs filesystem df`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpaceUse {
    /// Type.
    pub bg_type: BgType,
    /// Profile.
    pub profile: Profile,
    /// Logical bytes allocated.
    pub total_bytes: u64,
    /// Logical bytes used.
    pub used_bytes: u64,
}

/// A balance that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BalanceFacts {
    /// Running now (else paused).
    pub running: bool,
    /// Data convert target.
    pub data_target: Option<Profile>,
    /// Metadata convert target.
    pub metadata_target: Option<Profile>,
    /// Chunks expected (0 after a remount of a paused balance).
    pub expected: u64,
    /// Chunks relocated.
    pub completed: u64,
}

/// Everything doctor read about one filesystem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FsFacts {
    /// Mount point.
    pub mount_point: PathBuf,
    /// Filesystem UUID.
    pub uuid: String,
    /// Label.
    pub label: Option<String>,
    /// Mount options, the VFS ones then btrfs' own, each once (`rw,relatime,degraded,...`).
    pub mount_options: String,
    /// Running kernel (`6.1`).
    pub kernel: String,
    /// Enabled features (sysfs).
    pub features: Vec<String>,
    /// Devices the filesystem has (the superblock's count).
    pub total_devices: u64,
    /// Member devices the kernel lists.
    pub devices: Vec<DeviceFacts>,
    /// Space per type and profile, GlobalReserve included.
    pub spaces: Vec<SpaceUse>,
    /// Size of a new metadata chunk (logical bytes): sysfs `chunk_size`,
    /// capped at 10% of the devices' size as the allocator does.
    pub(crate) metadata_chunk_bytes: u64,
    /// A balance that exists.
    pub balance: Option<BalanceFacts>,
    /// The last scrub of each device (empty: never scrubbed, or the record is gone).
    pub scrub: Vec<ScrubDevice>,
    /// Length and used bytes of every data chunk (block group items: root
    /// only), for the `-dusage` value a suggestion names.
    #[serde(default)]
    pub data_chunks: Option<Vec<crate::model::reclaim::ChunkUse>>,
    /// The fstab entries of this filesystem (`None`: no fstab read).
    #[serde(default)]
    pub fstab: Option<super::fstab::FstabFacts>,
    /// An fstrim timer is enabled (systemd's `fstrim.timer`).
    #[serde(default)]
    pub fstrim_timer: bool,
    /// A scrub that runs now (btrfs-lab's or btrfs-progs'): bytes read so
    /// far by this run and bytes it reads in all, summed over the devices.
    #[serde(default)]
    pub scrub_running: Option<(u64, u64)>,
    /// btrfs-lab's scrub timer (`btrfs-lab-scrub.timer`): enabled or not
    /// on a host that runs systemd; `None` without systemd.
    #[serde(default)]
    pub scrub_timer: Option<bool>,
    /// How RAID1 mirrors are chosen for reads (sysfs `read_policy`, as the
    /// kernel writes it: `[pid] round-robin devid:1`).
    #[serde(default)]
    pub read_policy: Option<String>,
    /// The exclusive operation running (sysfs `exclusive_operation`, 5.10
    /// and later: `none`, `balance`, `balance paused`, `device add`,
    /// `device remove`, `device replace`, `resize`, `swap activate`).
    #[serde(default)]
    pub exclusive_operation: Option<String>,
    /// `vm.nr_hugepages` raised by a btrfs-lab bench whose record is in the
    /// settings ledger, with its value now (a setting of the machine: every
    /// filesystem's report names it).
    #[serde(default)]
    pub hugepages_left: Option<(SettingLeft, u64)>,
    /// Striped data in chunks narrower than the array, when there is some a
    /// balance would widen (read from the chunk tree: root only).
    #[serde(default)]
    pub narrow_data: Option<super::widths::NarrowData>,
    /// The filesystem's generation (the transaction it is at).
    #[serde(default)]
    pub generation: Option<u64>,
    /// Doctor's last look at its members (when and under which kernel),
    /// from its record in the state directory.
    #[serde(default)]
    pub last_look: Option<LastLook>,
}

/// Doctor's last look at a filesystem's members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LastLook {
    /// When (seconds since the epoch).
    pub at: u64,
    /// The kernel running then.
    pub kernel: String,
}

impl FsFacts {
    /// Profiles in use for a type (mixed block groups count for data and metadata).
    pub fn profiles(&self, kind: BgType) -> Vec<Profile> {
        let mut v: Vec<Profile> = self
            .spaces
            .iter()
            .filter(|s| s.total_bytes > 0 && counts_for(s.bg_type, kind))
            .map(|s| s.profile)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// (allocated, used) logical bytes of a type.
    pub fn totals(&self, kind: BgType) -> (u64, u64) {
        self.spaces
            .iter()
            .filter(|s| counts_for(s.bg_type, kind))
            .fold((0, 0), |(t, u), s| (t + s.total_bytes, u + s.used_bytes))
    }

    /// Devices present (not missing).
    pub fn present(&self) -> impl Iterator<Item = &DeviceFacts> {
        self.devices.iter().filter(|d| !d.missing)
    }

    /// Missing devices: listed as missing, plus those the superblock counts
    /// but the kernel does not list.
    pub(crate) fn missing_count(&self) -> u64 {
        let listed = self.devices.iter().filter(|d| d.missing).count() as u64;
        let absent = self.total_devices.saturating_sub(self.devices.len() as u64);
        listed + absent
    }
}

fn counts_for(t: BgType, kind: BgType) -> bool {
    t == kind || (t == BgType::DataMetadata && matches!(kind, BgType::Data | BgType::Metadata))
}
