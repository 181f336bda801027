//! `capacity`: usable space for devices one has or plans to have, from the
//! allocator model of [`crate::model::alloc`] (the kernel's rules, chunk by
//! chunk) over the profile table of [`crate::model::profile`]. Pure: the
//! devices, profiles, metadata share and kernel come in, a report comes
//! out. `device add`, `device remove`, `device replace` and `convert` show
//! their usable space before and after with [`usable`].
//!
//! How a filesystem fills, as the model replays it: the first 1 MiB of each
//! device is never allocated (`BTRFS_DEVICE_RANGE_RESERVED`); mkfs makes a
//! system chunk and a metadata chunk in the metadata profile; then data
//! chunks are allocated one by one, each on the devices with the most
//! unallocated space, and metadata chunks whenever the metadata share of
//! the data stored so far outgrows the metadata chunks. What no chunk of
//! the data profile can take any more is not usable.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::alloc::{self, ChunkKind};
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::operation::state::{FsState, read_state};
use crate::parse::size::format_iec;
use crate::sys::fs::root::SysRoot;
use std::path::Path;

/// Bytes at the start of each device btrfs never allocates.
pub const DEVICE_RESERVED: u64 = 1 << 20;
/// The metadata share assumed without a filesystem to measure: metadata as
/// a fraction of data (1%: checksums and trees of large files take less,
/// millions of small files more).
pub const DEFAULT_METADATA_SHARE: f64 = 0.01;

/// One device of the layout planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlannedDevice {
    /// btrfs device id (`null`: a device given by size or one to add).
    pub devid: Option<u64>,
    /// Size in bytes.
    pub size: u64,
    /// Where it comes from.
    pub origin: Origin,
}

/// Where a planned device comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Given by its size on the command line.
    Given,
    /// A member of the filesystem (`--from`).
    Member,
    /// Added (`--add`).
    Added,
    /// Replacing a member (`--replace DEVID=SIZE`): the devid stays.
    Replacement,
}

/// How much metadata the data needs, and where that figure comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MetadataShare {
    /// Metadata bytes per data byte (0.01: 1%).
    pub ratio: f64,
    /// `filesystem` (measured with --from), `option` (--metadata-share)
    /// or `default` ([`DEFAULT_METADATA_SHARE`]).
    pub source: String,
}

/// What to plan.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityRequest {
    /// The devices.
    pub devices: Vec<PlannedDevice>,
    /// Data profiles to compare.
    pub data: Vec<Profile>,
    /// Metadata profiles to compare (each with each data profile).
    pub metadata: Vec<Profile>,
    /// Metadata's share of the data.
    pub share: MetadataShare,
    /// The kernel whose rules apply.
    pub kernel: KernelVersion,
    /// The filesystem's chunks (`--from` without `--remove`).
    pub existing: Option<Existing>,
}

/// The report of `capacity`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CapacityReport {
    /// The filesystem measured (`--from`), if any.
    pub from: Option<std::path::PathBuf>,
    /// The devices planned, in order.
    pub devices: Vec<PlannedDevice>,
    /// Members taken out (`--remove`).
    pub removed: Vec<u64>,
    /// Their sizes summed.
    pub raw_bytes: u64,
    /// The kernel whose allocator rules were replayed.
    pub kernel: KernelVersion,
    /// Metadata's share of the data.
    pub metadata_share: MetadataShare,
    /// One row per data and metadata profile pair.
    pub options: Vec<CapacityOption>,
}

/// What one pair of profiles gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CapacityOption {
    /// Data profile.
    pub data: Profile,
    /// Metadata (and system) profile.
    pub metadata: Profile,
    /// Why this pair cannot be made on these devices (`null`: it can).
    pub impossible: Option<String>,
    /// Bytes of data the filesystem can store (its data chunks).
    pub usable_data_bytes: u64,
    /// Logical bytes of metadata chunks at that point.
    pub metadata_bytes: u64,
    /// Logical bytes of system chunks.
    pub system_bytes: u64,
    /// Raw bytes no chunk can use, all devices.
    pub unusable_bytes: u64,
    /// Raw bytes no chunk can use, per device (in the order of `devices`).
    pub unusable_per_device: Vec<u64>,
    /// Why that space cannot be used (`null`: none worth saying).
    pub unusable_reason: Option<String>,
    /// Device failures the filesystem survives: the lower of data's and
    /// metadata's.
    pub failures_survived: u32,
    /// Devices a large read spreads over (data chunks: first, last).
    pub read_width: Width,
    /// Devices a large write goes to (data chunks: first, last).
    pub write_width: Width,
    /// The largest data chunk (logical bytes): how far a real filesystem
    /// may differ (mkfs makes its first chunks by its own rules).
    pub data_chunk_bytes: u64,
    /// What the figures start from.
    pub basis: Basis,
}

/// What a capacity starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// A filesystem made anew on the devices: mkfs.btrfs's first chunks,
    /// then the kernel's.
    New,
    /// The chunks of the filesystem of --from as they are (its profiles,
    /// no device removed), then the kernel's chunks on what is unallocated.
    Filesystem,
}

/// A filesystem's chunks as they are, for [`Basis::Filesystem`].
#[derive(Debug, Clone, PartialEq)]
pub struct Existing {
    /// Unallocated bytes of each planned device (less the reserved MiB).
    pub free: Vec<u64>,
    /// Logical bytes of its data chunks.
    pub data_bytes: u64,
    /// Of its metadata chunks.
    pub metadata_bytes: u64,
    /// Of its system chunks.
    pub system_bytes: u64,
    /// The profile of its new data chunks.
    pub data: Profile,
    /// Of its new metadata chunks.
    pub metadata: Profile,
}

/// A width over the data chunks: the first ones, made while every device
/// has room, and the last ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Width {
    /// Of the first data chunk.
    pub first: u32,
    /// Of the last data chunk.
    pub last: u32,
}

/// Plans every pair of profiles of `req`.
pub fn plan(
    req: &CapacityRequest,
    from: Option<std::path::PathBuf>,
    removed: Vec<u64>,
) -> CapacityReport {
    let sizes: Vec<u64> = req.devices.iter().map(|d| d.size).collect();
    let mut options = Vec::new();
    for &data in &req.data {
        for &metadata in &req.metadata {
            options.push(option_from(
                &sizes,
                data,
                metadata,
                req.share.ratio,
                req.kernel,
                req.existing.as_ref(),
            ));
        }
    }
    CapacityReport {
        from,
        devices: req.devices.clone(),
        removed,
        raw_bytes: sizes.iter().sum(),
        kernel: req.kernel,
        metadata_share: req.share.clone(),
        options,
    }
}

/// Usable data bytes of devices of `sizes` with these profiles and
/// metadata share: what the planners of `device` and `convert` show.
pub fn usable(
    sizes: &[u64],
    data: Profile,
    metadata: Profile,
    share: f64,
    kernel: KernelVersion,
) -> u64 {
    option(sizes, data, metadata, share, kernel).usable_data_bytes
}

/// Metadata's share of data on a filesystem using `data` and `metadata`
/// bytes (logical): the default when it holds too little to tell.
pub fn measured_share(data_used: u64, metadata_used: u64) -> Option<f64> {
    (data_used >= 1 << 30).then(|| metadata_used as f64 / data_used as f64)
}

/// Why a profile cannot be allocated at all on `n` devices.
fn impossible(p: Profile, what: &str, n: usize, kernel: KernelVersion) -> Option<String> {
    if !p.supported_on(kernel) {
        return Some(format!(
            "{what} {p} needs Linux 5.5 or later (kernel {kernel})"
        ));
    }
    let min = p.min_devices_on(kernel) as usize;
    (n < min).then(|| format!("{what} {p} needs {min} devices, {n} given"))
}

fn option(
    sizes: &[u64],
    data: Profile,
    metadata: Profile,
    share: f64,
    kernel: KernelVersion,
) -> CapacityOption {
    option_from(sizes, data, metadata, share, kernel, None)
}

/// [`option`] on a filesystem's chunks as they are (`existing`, when its
/// profiles are these), else on a filesystem made anew.
fn option_from(
    sizes: &[u64],
    data: Profile,
    metadata: Profile,
    share: f64,
    kernel: KernelVersion,
    existing: Option<&Existing>,
) -> CapacityOption {
    let total: u64 = sizes.iter().sum();
    let existing = existing
        .filter(|e| e.data == data && e.metadata == metadata && e.free.len() == sizes.len());
    let mut free: Vec<u64> = match existing {
        Some(e) => e.free.clone(),
        None => sizes
            .iter()
            .map(|s| s.saturating_sub(DEVICE_RESERVED))
            .collect(),
    };
    let mut o = CapacityOption {
        data,
        metadata,
        impossible: impossible(data, "data", sizes.len(), kernel)
            .or_else(|| impossible(metadata, "metadata", sizes.len(), kernel)),
        usable_data_bytes: 0,
        metadata_bytes: 0,
        system_bytes: 0,
        unusable_bytes: 0,
        unusable_per_device: vec![0; sizes.len()],
        unusable_reason: None,
        failures_survived: data.tolerated_failures().min(metadata.tolerated_failures()),
        read_width: Width { first: 0, last: 0 },
        write_width: Width { first: 0, last: 0 },
        data_chunk_bytes: 0,
        basis: if existing.is_some() {
            Basis::Filesystem
        } else {
            Basis::New
        },
    };
    if o.impossible.is_some() {
        return o;
    }
    let grab = |free: &mut Vec<u64>, p: Profile, kind: ChunkKind| {
        let c = alloc::next_chunk(free, p, kind, total, kernel)?;
        alloc::take(free, &c, p);
        Some(c)
    };
    // mkfs: the system chunk, the first metadata and data chunks, by its
    // own rules.
    let mkfs = |free: &mut Vec<u64>, p: Profile, kind: ChunkKind| {
        let c = alloc::mkfs_chunk(free, p, kind, total)?;
        alloc::take(free, &c, p);
        Some(c)
    };
    let mut first = true;
    if let Some(e) = existing {
        // The chunks there are: their data space is usable as it is.
        o.system_bytes = e.system_bytes;
        o.metadata_bytes = e.metadata_bytes;
        o.usable_data_bytes = e.data_bytes;
    } else {
        let (Some(sys), Some(meta), Some(first_data)) = (
            mkfs(&mut free, metadata, ChunkKind::System),
            mkfs(&mut free, metadata, ChunkKind::Metadata),
            mkfs(&mut free, data, ChunkKind::Data),
        ) else {
            o.impossible =
                Some("the devices are too small for mkfs.btrfs's first chunks".to_owned());
            return o;
        };
        o.system_bytes = sys.length;
        o.metadata_bytes = meta.length;
        o.usable_data_bytes = first_data.length;
        o.data_chunk_bytes = first_data.length;
        o.read_width = Width {
            first: data.data_stripes(first_data.num_stripes),
            last: data.data_stripes(first_data.num_stripes),
        };
        o.write_width = Width {
            first: first_data.num_stripes / data.geometry().dev_stripes,
            last: first_data.num_stripes / data.geometry().dev_stripes,
        };
        first = false;
    }
    while let Some(c) = grab(&mut free, data, ChunkKind::Data) {
        o.usable_data_bytes += c.length;
        o.data_chunk_bytes = o.data_chunk_bytes.max(c.length);
        let read = data.data_stripes(c.num_stripes);
        let write = c.num_stripes / data.geometry().dev_stripes;
        if first {
            o.read_width.first = read;
            o.write_width.first = write;
            first = false;
        }
        o.read_width.last = read;
        o.write_width.last = write;
        // Metadata grows with the data it describes.
        let mut starved = false;
        while (o.metadata_bytes as f64) < share * o.usable_data_bytes as f64 {
            match grab(&mut free, metadata, ChunkKind::Metadata) {
                Some(m) => o.metadata_bytes += m.length,
                None => {
                    starved = true;
                    break;
                }
            }
        }
        if starved {
            // No more metadata: the data stored is what it can describe.
            o.usable_data_bytes = o
                .usable_data_bytes
                .min((o.metadata_bytes as f64 / share) as u64);
            o.unusable_per_device = free.clone();
            o.unusable_bytes = free.iter().sum();
            o.unusable_reason = Some(format!(
                "{} left that metadata {metadata} cannot use: no room for another metadata chunk, and data needs {:.1}% of itself as metadata",
                format_iec(o.unusable_bytes),
                share * 100.0
            ));
            return o;
        }
    }
    o.unusable_per_device = free.clone();
    o.unusable_bytes = free.iter().sum();
    o.unusable_reason = reason(data, sizes, &free, kernel);
    o
}

/// Why raw space `left` is left that `p` cannot use.
fn reason(p: Profile, sizes: &[u64], left: &[u64], kernel: KernelVersion) -> Option<String> {
    let sum: u64 = left.iter().sum();
    // Below a stripe per device: rounding, not worth a word.
    if sum < (left.len() as u64).max(1) * (4 << 20) {
        return None;
    }
    let with_room: Vec<usize> = (0..left.len()).filter(|&i| left[i] >= 4 << 20).collect();
    let min = p.min_devices_on(kernel) as usize;
    let g = p.geometry();
    let on = |v: &[usize]| {
        v.iter()
            .map(|i| format!("device {}", i + 1))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if with_room.len() < min {
        let mirrored = g.ncopies > 1 && g.dev_stripes == 1 && !p.is_parity();
        let what = if mirrored {
            format!("{} keeps {} copies on distinct devices", p, g.ncopies)
        } else {
            format!("{p} needs {min} devices with room for each chunk")
        };
        let largest = (0..sizes.len()).max_by_key(|&i| (sizes[i], usize::MAX - i));
        let biggest = match largest_dominates(sizes) {
            Some((max, rest)) if with_room.len() == 1 && largest == Some(with_room[0]) => format!(
                " (the largest device, {}, is larger than the others together, {})",
                format_iec(max),
                format_iec(rest)
            ),
            _ if with_room.len() == 1 && largest == Some(with_room[0]) => {
                " (the largest device outlasts the others)".to_owned()
            }
            _ => String::new(),
        };
        return Some(format!(
            "{} left on {} only: {what}{biggest}",
            format_iec(sum),
            on(&with_room)
        ));
    }
    Some(format!(
        "{} left in pieces smaller than a {p} chunk can use",
        format_iec(sum)
    ))
}

/// The largest device is larger than the others together (mirrored
/// profiles leave the difference unused).
pub fn largest_dominates(sizes: &[u64]) -> Option<(u64, u64)> {
    let max = *sizes.iter().max()?;
    let rest: u64 = sizes.iter().sum::<u64>() - max;
    (max > rest).then_some((max, rest))
}

/// Changes to a filesystem's devices (`--add`, `--remove`, `--replace`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Sizes of devices to add.
    pub add: Vec<u64>,
    /// Devids to take out.
    pub remove: Vec<u64>,
    /// (devid, size of the device replacing it).
    pub replace: Vec<(u64, u64)>,
}

/// What a mounted filesystem gives the planner.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Its mount point.
    pub mount_point: std::path::PathBuf,
    /// The devices after the changes.
    pub devices: Vec<PlannedDevice>,
    /// Devids taken out.
    pub removed: Vec<u64>,
    /// Metadata's share of its data (`None`: too little data to tell).
    pub share: Option<f64>,
    /// Its kernel.
    pub kernel: KernelVersion,
    /// The profile its new data chunks get.
    pub data: Option<Profile>,
    /// The profile its new metadata chunks get.
    pub metadata: Option<Profile>,
    /// Its chunks, when no device is removed.
    pub existing: Option<Existing>,
}

/// The filesystem of `fs` with `changes` applied (pure). A devid that is
/// not a member is a usage error.
pub fn from_state(fs: &FsState, changes: &Changes) -> Result<Measured> {
    let member = |devid: u64| {
        fs.devices
            .iter()
            .any(|d| d.devid == devid)
            .then_some(())
            .ok_or_else(|| {
                let ids: Vec<String> = fs.devices.iter().map(|d| d.devid.to_string()).collect();
                Error::usage(format!(
                    "{} has no device {devid}",
                    fs.mount_point.display()
                ))
                .with_hint(format!("its devids are {}", ids.join(", ")))
            })
    };
    for &d in changes
        .remove
        .iter()
        .chain(changes.replace.iter().map(|(d, _)| d))
    {
        member(d)?;
    }
    let mut devices: Vec<PlannedDevice> = fs
        .devices
        .iter()
        .filter(|d| !changes.remove.contains(&d.devid))
        .map(
            |d| match changes.replace.iter().find(|(id, _)| *id == d.devid) {
                Some(&(_, size)) => PlannedDevice {
                    devid: Some(d.devid),
                    size,
                    origin: Origin::Replacement,
                },
                None => PlannedDevice {
                    devid: Some(d.devid),
                    size: d.size,
                    origin: Origin::Member,
                },
            },
        )
        .collect();
    devices.extend(changes.add.iter().map(|&size| PlannedDevice {
        devid: None,
        size,
        origin: Origin::Added,
    }));
    let existing = existing(fs, changes);
    Ok(Measured {
        existing,
        mount_point: fs.mount_point.clone(),
        devices,
        removed: changes.remove.clone(),
        share: measured_share(fs.used(BgType::Data), fs.used(BgType::Metadata)),
        kernel: fs.kernel,
        data: alloc::new_chunk_profile(&fs.profiles(BgType::Data)),
        metadata: alloc::new_chunk_profile(&fs.profiles(BgType::Metadata)),
    })
}

/// Logical bytes of `fs`'s chunks of `kind`.
fn chunk_bytes(fs: &FsState, kind: BgType) -> u64 {
    fs.spaces
        .iter()
        .filter(|s| {
            crate::operation::state::matches_kind(
                crate::sys::kernel::btrfs::bg_type_of(s.flags),
                kind,
            )
        })
        .map(|s| s.total_bytes)
        .sum()
}

/// `fs`'s chunks with `changes` (none removed): what stays allocated, the
/// room of replaced and added devices.
fn existing(fs: &FsState, changes: &Changes) -> Option<Existing> {
    if !changes.remove.is_empty() {
        return None;
    }
    let mut free: Vec<u64> = fs
        .devices
        .iter()
        .map(|d| {
            let size = changes
                .replace
                .iter()
                .find(|(id, _)| *id == d.devid)
                .map_or(d.size, |&(_, s)| s);
            size.saturating_sub(d.allocated)
                .saturating_sub(DEVICE_RESERVED)
        })
        .collect();
    free.extend(
        changes
            .add
            .iter()
            .map(|s| s.saturating_sub(DEVICE_RESERVED)),
    );
    Some(Existing {
        free,
        data_bytes: chunk_bytes(fs, BgType::Data),
        metadata_bytes: chunk_bytes(fs, BgType::Metadata),
        system_bytes: chunk_bytes(fs, BgType::System),
        data: alloc::new_chunk_profile(&fs.profiles(BgType::Data))?,
        metadata: alloc::new_chunk_profile(&fs.profiles(BgType::Metadata))?,
    })
}

/// Reads the mounted btrfs at `path` and applies `changes`.
pub fn read(root: &SysRoot, path: &Path, changes: &Changes) -> Result<Measured> {
    from_state(&read_state(root, path)?, changes)
}

/// Usable data bytes of `fs`'s devices resized to `sizes`, in its current
/// profiles (or `data`/`metadata` when given) and metadata share: the
/// figure the plans of `device add/remove/replace` and `convert` show.
pub fn usable_for(
    fs: &FsState,
    sizes: &[u64],
    data: Option<Profile>,
    metadata: Option<Profile>,
) -> u64 {
    let data = data
        .or_else(|| alloc::new_chunk_profile(&fs.profiles(BgType::Data)))
        .unwrap_or(Profile::Single);
    let metadata = metadata
        .or_else(|| alloc::new_chunk_profile(&fs.profiles(BgType::Metadata)))
        .unwrap_or(Profile::Dup);
    let share = measured_share(fs.used(BgType::Data), fs.used(BgType::Metadata))
        .unwrap_or(DEFAULT_METADATA_SHARE);
    usable(sizes, data, metadata, share, fs.kernel)
}

/// Usable data capacity before and after a change of devices, in the
/// filesystem's profiles ([`usable_for`]).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct UsableChange {
    /// Now.
    pub before: u64,
    /// After the change.
    pub after: u64,
}

/// [`UsableChange`] of `fs` with `changes`: from its chunks as they are
/// ([`Basis::Filesystem`]) when no device is removed, else both as if
/// made anew on the devices before and after.
pub fn usable_change(fs: &FsState, changes: &Changes) -> UsableChange {
    let Ok(m) = from_state(fs, changes) else {
        return UsableChange::default();
    };
    let now: Vec<u64> = fs.devices.iter().map(|d| d.size).collect();
    let after: Vec<u64> = m.devices.iter().map(|d| d.size).collect();
    let (Some(data), Some(metadata)) = (m.data, m.metadata) else {
        return UsableChange {
            before: usable_for(fs, &now, None, None),
            after: usable_for(fs, &after, None, None),
        };
    };
    let share = m.share.unwrap_or(DEFAULT_METADATA_SHARE);
    let on = |sizes: &[u64], e: Option<&Existing>| {
        option_from(sizes, data, metadata, share, fs.kernel, e).usable_data_bytes
    };
    match m.existing {
        Some(e) => UsableChange {
            before: on(&now, existing(fs, &Changes::default()).as_ref()),
            after: on(&after, Some(&e)),
        },
        None => UsableChange {
            before: on(&now, None),
            after: on(&after, None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: KernelVersion = KernelVersion::new(6, 18);
    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;

    fn one(sizes: &[u64], d: Profile, m: Profile) -> CapacityOption {
        option(sizes, d, m, DEFAULT_METADATA_SHARE, K)
    }

    #[test]
    fn raid1_two_two_four() {
        // 2 + 2 + 4 TiB in RAID1: 4 TiB of mirrors less metadata.
        let o = one(&[2 * TIB, 2 * TIB, 4 * TIB], Profile::Raid1, Profile::Raid1);
        let copies = o.usable_data_bytes + o.metadata_bytes + o.system_bytes;
        assert!(copies <= 4 * TIB && copies > 4 * TIB - 10 * GIB, "{o:?}");
        assert!(o.metadata_bytes >= o.usable_data_bytes / 100);
        assert!(o.unusable_bytes < 3 * GIB, "{o:?}");
        assert_eq!(o.failures_survived, 1);
        assert_eq!((o.read_width.first, o.write_width.first), (1, 2));
    }

    #[test]
    fn raid1_largest_dominates() {
        // 1 + 1 + 4 TiB: the 4 TiB device can mirror only 2 TiB.
        let o = one(&[TIB, TIB, 4 * TIB], Profile::Raid1, Profile::Raid1);
        assert!(o.usable_data_bytes <= 2 * TIB && o.usable_data_bytes > 2 * TIB - 40 * GIB);
        assert!(o.unusable_bytes >= 2 * TIB - GIB, "{o:?}");
        assert!(o.unusable_per_device[2] >= 2 * TIB - GIB);
        let why = o.unusable_reason.unwrap();
        assert!(
            why.contains("device 3 only") && why.contains("largest"),
            "{why}"
        );
        assert_eq!(
            largest_dominates(&[TIB, TIB, 4 * TIB]),
            Some((4 * TIB, 2 * TIB))
        );
    }

    #[test]
    fn raid0_widths_narrow_as_devices_fill() {
        // DUP metadata: it grows on the last device as the data does.
        let o = one(&[TIB, 2 * TIB, 3 * TIB], Profile::Raid0, Profile::Dup);
        assert_eq!((o.write_width.first, o.write_width.last), (3, 1));
        assert!(o.unusable_bytes < GIB, "{o:?}");
        // RAID1 metadata needs two devices: the last one's room is lost.
        let o = one(&[TIB, 2 * TIB, 3 * TIB], Profile::Raid0, Profile::Raid1);
        assert!(
            o.unusable_reason
                .unwrap()
                .contains("metadata raid1 cannot use")
        );
    }

    #[test]
    fn parity_and_copies() {
        let sizes = [TIB; 4];
        let r5 = one(&sizes, Profile::Raid5, Profile::Raid1);
        let r6 = one(&sizes, Profile::Raid6, Profile::Raid1c3);
        let c4 = one(&sizes, Profile::Raid1c4, Profile::Raid1c4);
        let near = |a: u64, b: u64| a.abs_diff(b) < 60 * GIB;
        assert!(near(r5.usable_data_bytes, 3 * TIB), "{r5:?}");
        assert!(near(r6.usable_data_bytes, 2 * TIB), "{r6:?}");
        assert!(near(c4.usable_data_bytes, TIB), "{c4:?}");
        assert_eq!((r5.read_width.first, r5.write_width.first), (3, 4));
        assert_eq!(r6.failures_survived, 2);
        assert_eq!(c4.failures_survived, 3);
        let dup = one(&[TIB], Profile::Dup, Profile::Dup);
        assert!(near(dup.usable_data_bytes, TIB / 2), "{dup:?}");
        assert_eq!(dup.write_width.first, 1);
    }

    #[test]
    fn impossible_pairs_say_why() {
        let o = one(&[TIB, TIB], Profile::Raid1c3, Profile::Raid1);
        assert_eq!(
            o.impossible.as_deref(),
            Some("data raid1c3 needs 3 devices, 2 given")
        );
        let old = option(
            &[TIB; 3],
            Profile::Raid1,
            Profile::Raid1c3,
            0.01,
            KernelVersion::new(5, 4),
        );
        assert!(old.impossible.unwrap().contains("5.5"));
    }

    #[test]
    fn the_first_mib_and_the_metadata_are_not_data() {
        // Single on one device: everything but the reserved MiB, the
        // system and metadata chunks.
        let o = one(&[10 * GIB], Profile::Single, Profile::Dup);
        let raw =
            o.usable_data_bytes + 2 * o.metadata_bytes + 2 * o.system_bytes + o.unusable_bytes;
        assert_eq!(raw, 10 * GIB - DEVICE_RESERVED);
    }

    #[test]
    fn metadata_share_takes_room() {
        let sizes = [TIB, TIB];
        let low = option(&sizes, Profile::Raid1, Profile::Raid1, 0.0, K);
        let high = option(&sizes, Profile::Raid1, Profile::Raid1, 0.10, K);
        assert!(high.usable_data_bytes < low.usable_data_bytes - 80 * GIB);
        assert!(high.metadata_bytes * 10 >= high.usable_data_bytes - 2 * GIB);
    }
}
