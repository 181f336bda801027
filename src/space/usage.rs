//! `usage`: what `btrfs filesystem usage` shows, computed the way
//! btrfs-progs computes it (cmds/filesystem-usage.c), from the kernel's
//! SPACE_INFO, DEV_INFO and chunk tree. The computation is pure: it takes
//! what was read and returns the report.

use std::cmp::Ordering;

use btrfs_uapi::space::BlockGroupFlags;
use serde::{Deserialize, Serialize};

use crate::model::profile::Profile;
use crate::model::space::{BgProfile, BgType, mixed_profiles};
use crate::sys::kernel::btrfs::{ChunkInfo, SpaceEntry, bg_type_of, profile_of};

/// One device as the computation needs it.
/// `usage --json`: the report with the filesystem it is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageDocument {
    /// The path as given.
    pub path: std::path::PathBuf,
    /// Its mount point.
    pub mount_point: std::path::PathBuf,
    /// The filesystem's UUID.
    pub uuid: String,
    /// The figures.
    #[serde(flatten)]
    pub report: UsageReport,
    /// What the figures mean: percentages and findings, worst first (the
    /// same as `df`'s and `doctor`'s).
    #[serde(default)]
    pub interpretation: Option<super::findings::Interpretation>,
}

/// One member device as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceFacts {
    /// btrfs device id.
    pub devid: u64,
    /// Path (`missing` for a missing device).
    pub path: String,
    /// Size btrfs uses on it (DEV_INFO total_bytes).
    pub size: u64,
    /// Size of the block device itself; `None` if it could not be read.
    pub device_size: Option<u64>,
    /// The device is missing from the filesystem.
    pub missing: bool,
    /// Its state, as doctor names it (absent: not looked at).
    pub state: Option<crate::model::member::MemberState>,
}

/// What `usage` reads from the system.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UsageInput {
    /// SPACE_INFO entries.
    pub spaces: Vec<SpaceEntry>,
    /// Devices, any order.
    pub devices: Vec<DeviceFacts>,
    /// The chunk tree summary; `None` without root.
    pub chunks: Option<Vec<ChunkInfo>>,
    /// statvfs f_bavail × f_bsize.
    pub(crate) statfs_free: u64,
}

pub use crate::model::usage::{BlockGroupUsage, DeviceShare, Overall, UsageReport};

const MIN_UNALLOCATED_THRESH: u64 = 16 << 20;

fn profile_bits(f: BlockGroupFlags) -> u64 {
    (f & (BlockGroupFlags::RAID0
        | BlockGroupFlags::RAID1
        | BlockGroupFlags::DUP
        | BlockGroupFlags::RAID10
        | BlockGroupFlags::RAID5
        | BlockGroupFlags::RAID6
        | BlockGroupFlags::RAID1C3
        | BlockGroupFlags::RAID1C4))
        .bits()
}

fn type_bits(f: BlockGroupFlags) -> u64 {
    (f & (BlockGroupFlags::DATA | BlockGroupFlags::SYSTEM | BlockGroupFlags::METADATA)).bits()
}

/// btrfs-progs' `cmp_chunk_block_group`: data, then metadata, system last;
/// within a type by profile bits.
fn cmp_block_group(a: BlockGroupFlags, b: BlockGroupFlags) -> Ordering {
    if type_bits(a) == type_bits(b) {
        profile_bits(a).cmp(&profile_bits(b))
    } else if b.contains(BlockGroupFlags::SYSTEM) {
        Ordering::Less
    } else if a.contains(BlockGroupFlags::SYSTEM) {
        Ordering::Greater
    } else {
        type_bits(a).cmp(&type_bits(b))
    }
}

/// Raw bytes a chunk summary occupies on its device (`calc_chunk_size`).
pub(crate) fn chunk_size_on_device(c: &ChunkInfo) -> u64 {
    profile_of(c.flags).stripe_length(c.size, u32::from(c.num_stripes))
}

struct Raw {
    data_chunks: u64,
    data_used: u64,
    metadata_chunks: u64,
    metadata_used: u64,
    system_chunks: u64,
    system_used: u64,
    max_data_ratio: f64,
}

/// RAID5/6 chunks: raw size from the chunk tree (`get_raid56_space_info`).
fn raid56_raw(spaces: &[SpaceEntry], chunks: &[ChunkInfo], raw: &mut Raw) {
    let ratio_for = |parity: Profile, kind: BlockGroupFlags| -> f64 {
        let (mut used, mut total) = (0u64, 0u64);
        for s in spaces.iter().filter(|s| profile_of(s.flags) == parity) {
            let t = bg_type_of(s.flags);
            let matches = match kind {
                k if k == BlockGroupFlags::DATA => s.flags.contains(BlockGroupFlags::DATA),
                k if k == BlockGroupFlags::METADATA => {
                    !s.flags.contains(BlockGroupFlags::DATA)
                        && s.flags.contains(BlockGroupFlags::METADATA)
                }
                _ => t == BgType::System,
            };
            if matches {
                used += s.used_bytes;
                total += s.total_bytes;
            }
        }
        if total > 0 {
            used as f64 / total as f64
        } else {
            -1.0
        }
    };
    for c in chunks {
        let p = profile_of(c.flags);
        if !p.is_parity() {
            continue;
        }
        let data_stripes = u64::from(p.data_stripes(u32::from(c.num_stripes)));
        let rt = f64::from(c.num_stripes) / data_stripes as f64;
        if rt > raw.max_data_ratio {
            raw.max_data_ratio = rt;
        }
        let size = c.size / data_stripes;
        let add = |chunks: &mut u64, used: &mut u64, ratio: f64| {
            *chunks += size;
            *used = (*used as f64 + size as f64 * ratio.max(0.0)) as u64;
        };
        if c.flags.contains(BlockGroupFlags::DATA) {
            add(
                &mut raw.data_chunks,
                &mut raw.data_used,
                ratio_for(p, BlockGroupFlags::DATA),
            );
        } else if c.flags.contains(BlockGroupFlags::METADATA) {
            add(
                &mut raw.metadata_chunks,
                &mut raw.metadata_used,
                ratio_for(p, BlockGroupFlags::METADATA),
            );
        } else if c.flags.contains(BlockGroupFlags::SYSTEM) {
            add(
                &mut raw.system_chunks,
                &mut raw.system_used,
                ratio_for(p, BlockGroupFlags::SYSTEM),
            );
        }
    }
}

fn overall(
    input: &UsageInput,
    devices: &[DeviceFacts],
    notes: &mut Vec<String>,
) -> Option<Overall> {
    let total_size: u64 = devices.iter().map(|d| d.size).sum();
    let slack: u64 = devices
        .iter()
        .map(|d| d.device_size.map_or(0, |bd| bd.saturating_sub(d.size)))
        .sum();
    let missing: u64 = devices.iter().filter(|d| d.missing).map(|d| d.size).sum();
    let chunks = input.chunks.as_deref().unwrap_or(&[]);
    let mut raw = Raw {
        data_chunks: 0,
        data_used: 0,
        metadata_chunks: 0,
        metadata_used: 0,
        system_chunks: 0,
        system_used: 0,
        max_data_ratio: 1.0,
    };
    raid56_raw(&input.spaces, chunks, &mut raw);
    let (mut l_data_chunks, mut l_metadata_chunks) = (0u64, 0u64);
    let (mut reserve, mut reserve_used) = (0u64, 0u64);
    let mut mixed = false;
    let mut raid56 = false;
    for s in &input.spaces {
        let p = profile_of(s.flags);
        let mut ratio = u64::from(p.copies());
        if p.is_parity() {
            ratio = 0;
            raid56 = true;
        }
        if ratio as f64 > raw.max_data_ratio {
            raw.max_data_ratio = ratio as f64;
        }
        if s.flags.contains(BlockGroupFlags::GLOBAL_RSV) {
            reserve = s.total_bytes;
            reserve_used = s.used_bytes;
        }
        if s.flags
            .contains(BlockGroupFlags::DATA | BlockGroupFlags::METADATA)
        {
            mixed = true;
        }
        if s.flags.contains(BlockGroupFlags::DATA) {
            raw.data_used += s.used_bytes * ratio;
            raw.data_chunks += s.total_bytes * ratio;
            l_data_chunks += s.total_bytes;
        }
        if s.flags.contains(BlockGroupFlags::METADATA) {
            raw.metadata_used += s.used_bytes * ratio;
            raw.metadata_chunks += s.total_bytes * ratio;
            l_metadata_chunks += s.total_bytes;
        }
        if s.flags.contains(BlockGroupFlags::SYSTEM) {
            raw.system_used += s.used_bytes * ratio;
            raw.system_chunks += s.total_bytes * ratio;
        }
    }
    if raid56 && input.chunks.is_none() {
        notes
            .push("RAID5/6 found: the overall figures need the chunk tree; run as root".to_owned());
        return None;
    }
    let mut total_chunks = raw.data_chunks + raw.system_chunks;
    let mut total_used = raw.data_used + raw.system_used;
    if !mixed {
        total_chunks += raw.metadata_chunks;
        total_used += raw.metadata_used;
    }
    let unallocated = total_size as i64 - total_chunks as i64;
    let data_ratio = raw.data_chunks as f64 / l_data_chunks as f64;
    let metadata_ratio = if mixed {
        data_ratio
    } else {
        raw.metadata_chunks as f64 / l_metadata_chunks as f64
    };
    let mut free_estimated =
        (raw.data_chunks.saturating_sub(raw.data_used) as f64 / data_ratio) as u64;
    if mixed {
        free_estimated = free_estimated.saturating_sub(reserve - reserve_used.min(reserve));
    }
    let mut free_min = free_estimated;
    if unallocated >= MIN_UNALLOCATED_THRESH as i64 {
        free_estimated += (unallocated as f64 / data_ratio) as u64;
        free_min += (unallocated as f64 / raw.max_data_ratio) as u64;
    }
    let types: Vec<BgType> =
        mixed_profiles(&crate::sys::kernel::btrfs::space_records(&input.spaces))
            .into_iter()
            .map(|m| m.bg_type)
            .collect();
    Some(Overall {
        device_size: total_size,
        device_allocated: total_chunks,
        device_unallocated: unallocated,
        device_missing: missing,
        device_slack: slack,
        used: total_used,
        free_estimated,
        free_estimated_min: free_min,
        free_statfs: input.statfs_free,
        data_ratio: finite(data_ratio),
        metadata_ratio: finite(metadata_ratio),
        global_reserve: reserve,
        global_reserve_used: reserve_used,
        multiple_profiles: !types.is_empty(),
        multiple_profile_types: types,
    })
}

fn finite(v: f64) -> f64 {
    if v.is_finite() { v } else { 0.0 }
}

/// The chunks on device `devid` by type, profile and stripe count, in
/// btrfs-progs' order (`cmp_chunk_info`: data, metadata, system; by
/// profile), as `btrfs device usage` lists them.
fn device_chunks(chunks: &[ChunkInfo], devid: u64) -> Vec<crate::model::usage::DeviceChunks> {
    let mut mine: Vec<&ChunkInfo> = chunks.iter().filter(|c| c.devid == devid).collect();
    mine.sort_by(|a, b| cmp_block_group(a.flags, b.flags));
    mine.into_iter()
        .map(|c| crate::model::usage::DeviceChunks {
            bg_type: bg_type_of(c.flags),
            profile: BgProfile::Known(profile_of(c.flags)),
            num_stripes: c.num_stripes,
            size_bytes: chunk_size_on_device(c),
        })
        .collect()
}

/// Computes the whole report.
pub(crate) fn compute(input: &UsageInput) -> UsageReport {
    let mut notes = Vec::new();
    let mut devices = input.devices.clone();
    devices.sort_by_key(|d| d.devid);
    let overall = overall(input, &devices, &mut notes);
    if input.chunks.is_none() {
        notes
            .push("the per-device split needs the chunk tree, which only root may read".to_owned());
    }
    let mut spaces: Vec<SpaceEntry> = input.spaces.clone();
    spaces.sort_by(|a, b| cmp_block_group(a.flags, b.flags));
    let share = |devid: u64, path: &str, bytes: i64| DeviceShare {
        devid,
        path: path.to_owned(),
        bytes,
    };
    let block_groups = spaces
        .iter()
        .filter(|s| !s.flags.contains(BlockGroupFlags::GLOBAL_RSV))
        .map(|s| BlockGroupUsage {
            bg_type: bg_type_of(s.flags),
            profile: BgProfile::Known(profile_of(s.flags)),
            size_bytes: s.total_bytes,
            used_bytes: s.used_bytes,
            used_percent: f64::from(100.0f32 * s.used_bytes as f32 / (s.total_bytes as f32 + 1.0)),
            devices: input.chunks.as_ref().map(|chunks| {
                devices
                    .iter()
                    .filter_map(|d| {
                        let total: u64 = chunks
                            .iter()
                            .filter(|c| c.flags == s.flags && c.devid == d.devid)
                            .map(chunk_size_on_device)
                            .sum();
                        (total > 0).then(|| share(d.devid, &d.path, total as i64))
                    })
                    .collect()
            }),
        })
        .collect();
    let unallocated = input
        .chunks
        .as_ref()
        .filter(|c| !c.is_empty())
        .map(|chunks| {
            devices
                .iter()
                .map(|d| {
                    let allocated: u64 = chunks
                        .iter()
                        .filter(|c| c.devid == d.devid)
                        .map(chunk_size_on_device)
                        .sum();
                    share(d.devid, &d.path, d.size as i64 - allocated as i64)
                })
                .collect()
        });
    UsageReport {
        overall,
        block_groups,
        unallocated,
        chunk_tree_readable: input.chunks.is_some(),
        notes,
        devices: devices
            .iter()
            .map(|d| crate::model::usage::UsageDevice {
                devid: d.devid,
                state: d.state,
                path: d.path.clone(),
                size_bytes: d.size,
                slack_bytes: d.device_size.map_or(0, |s| s.saturating_sub(d.size)),
                device_size_bytes: d.device_size,
                chunks: input
                    .chunks
                    .as_ref()
                    .map(|chunks| device_chunks(chunks, d.devid)),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(flags: BlockGroupFlags, total: u64, used: u64) -> SpaceEntry {
        SpaceEntry {
            flags,
            total_bytes: total,
            used_bytes: used,
        }
    }

    fn dev(devid: u64, size: u64) -> DeviceFacts {
        DeviceFacts {
            devid,
            path: format!("/dev/loop{}", devid - 1),
            size,
            device_size: Some(size),
            missing: false,
            state: None,
        }
    }

    fn c(flags: BlockGroupFlags, devid: u64, num_stripes: u16, size: u64) -> ChunkInfo {
        ChunkInfo {
            flags,
            devid,
            num_stripes,
            size,
        }
    }

    /// The 3-device RAID0/RAID1 sandbox whose `btrfs filesystem usage -b`
    /// (btrfs-progs 6.2) is quoted in the expected values.
    fn sandbox() -> UsageInput {
        use BlockGroupFlags as F;
        UsageInput {
            spaces: vec![
                e(F::DATA | F::RAID0, 322_043_904, 104_857_600),
                e(F::SYSTEM | F::RAID1, 8_388_608, 16_384),
                e(F::METADATA | F::RAID1, 268_435_456, 245_760),
                e(F::GLOBAL_RSV, 5_767_168, 0),
            ],
            devices: vec![dev(3, 1 << 30), dev(1, 1 << 30), dev(2, 1 << 30)],
            chunks: Some(vec![
                c(F::DATA | F::RAID0, 1, 3, 322_043_904),
                c(F::DATA | F::RAID0, 2, 3, 322_043_904),
                c(F::DATA | F::RAID0, 3, 3, 322_043_904),
                c(F::METADATA | F::RAID1, 2, 2, 268_435_456),
                c(F::METADATA | F::RAID1, 3, 2, 268_435_456),
                c(F::SYSTEM | F::RAID1, 2, 2, 8_388_608),
                c(F::SYSTEM | F::RAID1, 3, 2, 8_388_608),
            ]),
            statfs_free: 2_559_574_016,
        }
    }

    #[test]
    fn matches_btrfs_progs_on_raid0_raid1() {
        let r = compute(&sandbox());
        let o = r.overall.unwrap();
        assert_eq!(o.device_size, 3_221_225_472);
        assert_eq!(o.device_allocated, 875_692_032);
        assert_eq!(o.device_unallocated, 2_345_533_440);
        assert_eq!(o.used, 105_381_888);
        assert_eq!(o.free_estimated, 2_562_719_744);
        assert_eq!(o.free_estimated_min, 1_389_953_024);
        assert_eq!(o.data_ratio, 1.0);
        assert_eq!(o.metadata_ratio, 2.0);
        assert_eq!(o.global_reserve, 5_767_168);
        assert!(!o.multiple_profiles);
        let names: Vec<String> = r
            .block_groups
            .iter()
            .map(|b| format!("{},{}", b.bg_type.progs_name(), b.profile.progs_name()))
            .collect();
        assert_eq!(names, ["Data,RAID0", "Metadata,RAID1", "System,RAID1"]);
        assert_eq!(format!("{:.2}", r.block_groups[0].used_percent), "32.56");
        let data_devs: Vec<i64> = r.block_groups[0]
            .devices
            .as_ref()
            .unwrap()
            .iter()
            .map(|d| d.bytes)
            .collect();
        assert_eq!(data_devs, [107_347_968; 3]);
        let meta_devs: Vec<u64> = r.block_groups[1]
            .devices
            .as_ref()
            .unwrap()
            .iter()
            .map(|d| d.devid)
            .collect();
        assert_eq!(meta_devs, [2, 3]);
        let unalloc: Vec<i64> = r.unallocated.unwrap().iter().map(|d| d.bytes).collect();
        assert_eq!(unalloc, [966_393_856, 689_569_792, 689_569_792]);
    }

    #[test]
    fn without_root_shows_what_it_can() {
        let mut input = sandbox();
        input.chunks = None;
        let r = compute(&input);
        assert!(r.overall.is_some());
        assert!(r.unallocated.is_none());
        assert!(r.block_groups.iter().all(|b| b.devices.is_none()));
        assert!(!r.chunk_tree_readable);
        assert!(r.notes[0].contains("root"));
    }

    #[test]
    fn raid5_without_root_has_no_overall() {
        use BlockGroupFlags as F;
        let input = UsageInput {
            spaces: vec![
                e(F::DATA | F::RAID5, 1 << 30, 1 << 29),
                e(F::METADATA | F::RAID1, 1 << 28, 1 << 20),
            ],
            devices: vec![dev(1, 1 << 32), dev(2, 1 << 32), dev(3, 1 << 32)],
            chunks: None,
            statfs_free: 0,
        };
        let r = compute(&input);
        assert!(r.overall.is_none());
        assert!(r.notes.iter().any(|n| n.contains("RAID5/6")));
    }

    #[test]
    fn raid5_with_chunks_counts_parity() {
        use BlockGroupFlags as F;
        let input = UsageInput {
            spaces: vec![
                e(F::DATA | F::RAID5, 2 << 30, 1 << 30),
                e(F::METADATA | F::RAID1, 1 << 28, 1 << 20),
            ],
            devices: vec![dev(1, 1 << 32), dev(2, 1 << 32), dev(3, 1 << 32)],
            chunks: Some(vec![
                c(F::DATA | F::RAID5, 1, 3, 2 << 30),
                c(F::DATA | F::RAID5, 2, 3, 2 << 30),
                c(F::DATA | F::RAID5, 3, 3, 2 << 30),
            ]),
            statfs_free: 0,
        };
        let o = compute(&input).overall.unwrap();
        // Three 1 GiB stripes hold 2 GiB of data: 1.5× raw.
        assert_eq!(o.data_ratio, 1.5);
        assert_eq!(
            chunk_size_on_device(&input.chunks.as_ref().unwrap()[0]),
            1 << 30
        );
    }

    #[test]
    fn mixed_profiles_are_reported() {
        use BlockGroupFlags as F;
        let mut input = sandbox();
        input.spaces.push(e(F::DATA, 1 << 30, 1 << 29));
        let o = compute(&input).overall.unwrap();
        assert!(o.multiple_profiles);
        assert_eq!(o.multiple_profile_types, vec![BgType::Data]);
    }

    #[test]
    fn block_group_order_matches_btrfs_progs() {
        use BlockGroupFlags as F;
        let mut v = [
            F::SYSTEM | F::DUP,
            F::METADATA | F::DUP,
            F::DATA | F::RAID0,
            F::DATA,
            F::METADATA | F::RAID1C3,
        ];
        v.sort_by(|a, b| cmp_block_group(*a, *b));
        assert_eq!(
            v,
            [
                F::DATA,
                F::DATA | F::RAID0,
                F::METADATA | F::DUP,
                F::METADATA | F::RAID1C3,
                F::SYSTEM | F::DUP
            ]
        );
    }
}
