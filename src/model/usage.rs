//! What `btrfs filesystem usage` shows, as types: read from the kernel by
//! `usage MOUNT`, parsed from pasted text by `usage --parse`, and read by
//! `doctor`.

use serde::{Deserialize, Serialize};

use crate::model::space::{BgProfile, BgType};

/// Space on one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceShare {
    /// btrfs device id.
    pub devid: u64,
    /// Path.
    pub path: String,
    /// Bytes (may be negative for unallocated on a shrunk device).
    pub bytes: i64,
}

/// The "Overall" block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Overall {
    /// Sum of the sizes btrfs uses on its devices.
    pub device_size: u64,
    /// Raw bytes allocated to chunks.
    pub device_allocated: u64,
    /// Raw bytes not allocated (negative if the devices shrank).
    pub device_unallocated: i64,
    /// Size of missing devices.
    pub device_missing: u64,
    /// Device bytes btrfs does not use (block device larger than btrfs' size).
    pub device_slack: u64,
    /// Raw bytes used.
    pub used: u64,
    /// Estimated free bytes for data.
    pub free_estimated: u64,
    /// The same at the highest replication factor.
    pub free_estimated_min: u64,
    /// What `df` (statfs) says is available.
    pub free_statfs: u64,
    /// Raw / logical for data.
    pub data_ratio: f64,
    /// Raw / logical for metadata.
    pub metadata_ratio: f64,
    /// Global reserve size.
    pub global_reserve: u64,
    /// Global reserve used.
    pub global_reserve_used: u64,
    /// More than one profile for some type.
    pub multiple_profiles: bool,
    /// The types with several profiles (`data`, `metadata`, ...).
    pub multiple_profile_types: Vec<BgType>,
}

/// One block-group type and profile with its per-device split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BlockGroupUsage {
    /// Type.
    #[serde(rename = "type")]
    pub bg_type: BgType,
    /// Profile.
    pub profile: BgProfile,
    /// Logical size.
    pub size_bytes: u64,
    /// Logical bytes used.
    pub used_bytes: u64,
    /// used / size in percent, as btrfs-progs rounds it.
    pub used_percent: f64,
    /// Raw bytes on each device; `null` without the chunk tree (root).
    pub devices: Option<Vec<DeviceShare>>,
}

/// One member device's size (the Total and Slack columns of `usage -T`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageDevice {
    /// btrfs device id.
    pub devid: u64,
    /// Its state, as doctor and `show` name it (`null` when parsed from
    /// text).
    #[serde(default)]
    pub state: Option<crate::model::member::MemberState>,
    /// Path (`missing` for a missing device).
    pub path: String,
    /// Bytes btrfs uses on it.
    pub size_bytes: u64,
    /// Bytes of the block device beyond what btrfs uses (0 when unknown, as
    /// btrfs-progs counts it).
    pub slack_bytes: u64,
    /// Size of the block device itself; `null` when it could not be read
    /// (a missing device) or the report was parsed from text.
    #[serde(default)]
    pub device_size_bytes: Option<u64>,
    /// The chunks on it by type, profile and stripe count, as `btrfs device
    /// usage` lists them; `null` without the chunk tree (root) or when
    /// parsed from text.
    #[serde(default)]
    pub chunks: Option<Vec<DeviceChunks>>,
}

/// The chunks of one type, profile and stripe count on one device (a line
/// of `btrfs device usage`: `Data,RAID6/3:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceChunks {
    /// Type.
    #[serde(rename = "type")]
    pub bg_type: BgType,
    /// Profile.
    pub profile: BgProfile,
    /// Stripes of each such chunk (devices it spans).
    pub num_stripes: u16,
    /// Raw bytes they take on this device.
    pub size_bytes: u64,
}

/// Everything `usage` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageReport {
    /// Totals; `null` when they cannot be computed (RAID5/6 without root).
    pub overall: Option<Overall>,
    /// Per type and profile.
    pub block_groups: Vec<BlockGroupUsage>,
    /// Unallocated per device; `null` without the chunk tree.
    pub unallocated: Option<Vec<DeviceShare>>,
    /// Whether the chunk tree could be read (it needs root).
    pub chunk_tree_readable: bool,
    /// What could not be shown, and why.
    pub notes: Vec<String>,
    /// The member devices by devid; empty when parsed from text that does
    /// not list their sizes.
    #[serde(default)]
    pub devices: Vec<UsageDevice>,
}
