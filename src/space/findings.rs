//! What the numbers of `df` and `usage` mean: percentages, and findings
//! ranked like `doctor`'s (the shared [`Finding`] type). Pure: it takes the
//! records (kernel or parsed) and, when known, the unallocated space per
//! device, and returns the interpretation. The same code serves `df`,
//! `usage` and both `--parse`.

use serde::{Deserialize, Serialize};

use crate::model::finding::rules::{self, MetadataRoom};
use crate::model::finding::{Code, Finding, Severity, rank};
use crate::model::profile::Profile;
use crate::model::space::{BgProfile, BgType, SpaceRecord, mixed_profiles};
use crate::report::units::{UnitBase, UnitMode, pretty_size};
use crate::sys::tools::display_argv;

/// Metadata this full (used / allocated) is "nearly full" (the catalog's
/// threshold, [`rules::METADATA_FULL_PERCENT`]).
pub(crate) use crate::model::finding::rules::METADATA_FULL_PERCENT;

/// The smallest metadata chunk btrfs allocates (filesystems under 50GiB;
/// larger ones use 1GiB): what a new metadata chunk needs on each device
/// it stripes over, at least.
pub(crate) const METADATA_CHUNK_BYTES: u64 = 256 << 20;

/// What the interpretation is computed from.
#[derive(Debug, Clone, Default)]
pub struct SpaceFacts<'a> {
    /// The `df` records.
    pub records: &'a [SpaceRecord],
    /// Unallocated bytes on each present device, when known (`usage`);
    /// `None` from `df` alone.
    pub unallocated: Option<Vec<i64>>,
    /// Number of devices, when known.
    pub devices: Option<usize>,
    /// The mount point for the commands; `None` gives `MOUNT`.
    pub mount: Option<String>,
    /// The sizes' units could not be decided (old binary or SI).
    pub ambiguous_units: bool,
    /// Devids of missing devices (`usage`), and the device count with them.
    pub missing: Vec<u64>,
    /// Sum of the devices' sizes, when known (`usage`: "Device size").
    pub devices_bytes: Option<u64>,
    /// The kernel, when known (a live filesystem).
    pub kernel: Option<crate::model::kernel::KernelVersion>,
    /// Usage of every data chunk, when read (root, a live filesystem).
    pub data_chunks: Option<Vec<crate::model::reclaim::ChunkUse>>,
    /// A balance that exists (a live filesystem): a paused conversion is
    /// resumed, not started again towards a guessed profile.
    pub balance: Option<crate::model::balance::BalanceInfo>,
}

/// used / total of one record, with the bounds its rounding allows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsedPercent {
    /// Type.
    #[serde(rename = "type")]
    pub bg_type: BgType,
    /// Profile.
    pub profile: BgProfile,
    /// used / total × 100 (0 when total is 0).
    pub used_percent: f64,
    /// The lowest the true figure can be, given the input's rounding.
    pub used_percent_min: f64,
    /// The highest.
    pub used_percent_max: f64,
}

/// Percentages and findings, worst first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Interpretation {
    /// One per record.
    pub percentages: Vec<UsedPercent>,
    /// Ranked worst first.
    pub findings: Vec<Finding>,
}

fn pct(used: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        used as f64 * 100.0 / total as f64
    }
}

fn size(v: u64) -> String {
    pretty_size(v, UnitMode::Human(UnitBase::Binary))
}

/// Devices a new chunk of this profile needs, and raw bytes on each.
/// From the profile's geometry (`model::profile`): its device minimum, and
/// a whole chunk on each (DUP: both copies on one device).
fn chunk_needs(p: BgProfile) -> (usize, u64) {
    let c = METADATA_CHUNK_BYTES;
    match p {
        BgProfile::Known(p) => (
            p.min_devices() as usize,
            c * u64::from(p.geometry().dev_stripes),
        ),
        _ => (1, c),
    }
}

/// The interpretation of `df`/`usage` figures.
pub fn interpret(f: &SpaceFacts<'_>) -> Interpretation {
    let mount = f.mount.clone().unwrap_or_else(|| "MOUNT".to_owned());
    let mut findings = Vec::new();
    findings.extend(missing_devices(f, &mount));
    // With the unallocated space of each device known (`usage`, its
    // `--parse`): the room computation doctor makes too.
    if let Some(unalloc) = &f.unallocated {
        findings.extend(room(f, &mount, unalloc));
    }
    let metadata_full = f
        .unallocated
        .is_none()
        .then(|| metadata_nearly_full(f, &mount))
        .flatten();
    let is_metadata_full = metadata_full.is_some();
    findings.extend(metadata_full);
    findings.extend(reserve_used(f, &mount, is_metadata_full));
    findings.extend(mixed_profiles_finding(f, &mount));
    if let Some(mut bare) = no_redundancy(f) {
        // A conversion under way has its own command: not a second one.
        if !findings
            .iter()
            .any(|x| x.code == Code::UnfinishedConversion)
        {
            bare.command = Some(format!("btrfs-lab convert {mount} --data raid1"));
        }
        findings.push(bare);
    }
    findings.extend(what_to_ask_next(f, &mount, is_metadata_full));
    rank(&mut findings);
    Interpretation {
        percentages: f.records.iter().map(used_percent).collect(),
        findings,
    }
}

/// used / total of one record, with its rounding's bounds.
fn used_percent(r: &SpaceRecord) -> UsedPercent {
    UsedPercent {
        bg_type: r.bg_type,
        profile: r.profile,
        used_percent: pct(r.used_bytes, r.total_bytes),
        used_percent_min: pct(
            r.used_bytes.saturating_sub(r.used_error_bytes),
            r.total_bytes.saturating_add(r.total_error_bytes),
        ),
        used_percent_max: pct(
            r.used_bytes.saturating_add(r.used_error_bytes),
            r.total_bytes.saturating_sub(r.total_error_bytes),
        ),
    }
}

/// The known profiles of the records of these types that hold chunks.
fn known_profiles(records: &[SpaceRecord], kinds: &[BgType]) -> Vec<Profile> {
    records
        .iter()
        .filter(|r| kinds.contains(&r.bg_type) && r.total_bytes > 0)
        .filter_map(|r| match r.profile {
            BgProfile::Known(p) => Some(p),
            BgProfile::Unknown => None,
        })
        .collect()
}

/// The global reserve's record, when there is one.
fn reserve_record<'r>(f: &SpaceFacts<'r>) -> Option<&'r SpaceRecord> {
    f.records
        .iter()
        .find(|r| r.bg_type == BgType::GlobalReserve)
}

/// Missing devices (`usage`): what is lost with them.
fn missing_devices(f: &SpaceFacts<'_>, mount: &str) -> Option<Finding> {
    if f.missing.is_empty() {
        return None;
    }
    let profiles = |kinds: &[BgType]| -> Vec<Profile> {
        let mut v = known_profiles(f.records, kinds);
        v.sort();
        v.dedup();
        v
    };
    let total = f
        .devices
        .map_or(f.missing.len(), |d| d.max(f.missing.len()));
    Some(crate::model::finding::device_missing(
        f.missing.len() as u32,
        &f.missing,
        total as u64,
        &profiles(&[BgType::Data, BgType::DataMetadata]),
        &profiles(&[BgType::Metadata, BgType::DataMetadata]),
        mount,
    ))
}

/// The room for new chunks, from the unallocated space of each device.
fn room(f: &SpaceFacts<'_>, mount: &str, unalloc: &[i64]) -> Vec<Finding> {
    let unalloc: Vec<u64> = unalloc.iter().map(|&u| u.max(0) as u64).collect();
    let totals = |kinds: &[BgType]| -> (u64, u64) {
        f.records
            .iter()
            .filter(|r| kinds.contains(&r.bg_type))
            .fold((0, 0), |(t, u), r| (t + r.total_bytes, u + r.used_bytes))
    };
    let mixed = f.records.iter().any(|r| r.bg_type == BgType::DataMetadata);
    let raw_allocated: u64 = f
        .records
        .iter()
        .filter(|r| r.bg_type != BgType::GlobalReserve)
        .map(|r| match r.profile {
            BgProfile::Known(p) => r.total_bytes.saturating_mul(u64::from(p.copies())),
            BgProfile::Unknown => r.total_bytes,
        })
        .sum();
    super::room::findings(&super::room::RoomFacts {
        mount,
        data_profile: crate::model::alloc::new_chunk_profile(&known_profiles(
            f.records,
            &[BgType::Data, BgType::DataMetadata],
        )),
        metadata_profile: if mixed {
            None
        } else {
            crate::model::alloc::new_chunk_profile(&known_profiles(f.records, &[BgType::Metadata]))
        },
        data: totals(&[BgType::Data, BgType::DataMetadata]),
        metadata: totals(&[BgType::Metadata]),
        reserve: reserve_record(f).map(|r| (r.used_bytes, r.total_bytes)),
        unalloc: &unalloc,
        devices_bytes: f
            .devices_bytes
            .unwrap_or(raw_allocated + unalloc.iter().sum::<u64>()),
        metadata_chunk_bytes: 0,
        kernel: f
            .kernel
            .unwrap_or(crate::model::kernel::KernelVersion::new(6, 18)),
        data_chunks: f.data_chunks.as_deref(),
    })
}

/// The metadata records (mixed block groups included).
fn metadata_records<'r>(f: &SpaceFacts<'r>) -> Vec<&'r SpaceRecord> {
    f.records
        .iter()
        .filter(|r| matches!(r.bg_type, BgType::Metadata | BgType::DataMetadata))
        .collect()
}

/// From `df` alone (no unallocated space): metadata nearly full, with the
/// room for a new chunk unknown.
fn metadata_nearly_full(f: &SpaceFacts<'_>, mount: &str) -> Option<Finding> {
    let meta = metadata_records(f);
    let reserve = reserve_record(f);
    let total: u64 = meta.iter().map(|r| r.total_bytes).sum();
    let used: u64 = meta.iter().map(|r| r.used_bytes).sum();
    let free = total.saturating_sub(used);
    let p = pct(used, total);
    let reserve_total = reserve.map_or(0, |r| r.total_bytes);
    let reserve_eats_rest = reserve.is_some() && free <= reserve_total;
    if meta.is_empty() || total == 0 || !(p >= METADATA_FULL_PERCENT || reserve_eats_rest) {
        return None;
    }
    // The profile new metadata chunks get: the largest one.
    let profile = meta
        .iter()
        .max_by_key(|r| r.total_bytes)
        .map_or(BgProfile::Known(Profile::Single), |r| r.profile);
    let (need_devs, need_each) = chunk_needs(profile);
    let what = if p >= METADATA_FULL_PERCENT {
        format!("metadata is {p:.1}% used")
    } else {
        format!(
            "the global reserve ({}) needs more than the free metadata ({})",
            size(reserve_total),
            size(free)
        )
    };
    let base = |room, title: String| {
        Finding::new(
            Code::MetadataNearlyFull,
            title,
            "btrfs writes metadata (file names, extents, checksums) only into metadata chunks; when they are full and no new chunk can be allocated, writes fail with ENOSPC (No space left on device) while `df` still shows free space",
        )
        .with_evidence(
            "metadata used",
            format!("{:.1}% of {} ({} used)", p, size(total), size(used)),
        )
        .with_evidence("metadata free in its chunks", size(free))
        .with_severity(rules::metadata_allocated_full(room))
    };
    let mut finding = match &f.unallocated {
        Some(unalloc) => {
            let fit = unalloc
                .iter()
                .filter(|&&u| u >= 0 && u as u64 >= need_each)
                .count();
            let list: Vec<String> = unalloc
                .iter()
                .map(|&u| {
                    if u < 0 {
                        format!("-{}", size(u.unsigned_abs()))
                    } else {
                        size(u as u64)
                    }
                })
                .collect();
            if fit < need_devs {
                base(
                    MetadataRoom::NoRoom,
                    format!(
                        "ENOSPC is near: {what} and no device has room for a new {} metadata chunk",
                        profile.progs_name()
                    ),
                )
                .with_evidence("unallocated per device", list.join(", "))
                .with_evidence(
                    "a new metadata chunk needs",
                    format!("{} on {need_devs} device(s)", size(need_each)),
                )
                .with_command(display_argv(&[
                    "btrfs",
                    "balance",
                    "start",
                    "-dusage=10",
                    mount,
                ]))
            } else {
                base(
                    MetadataRoom::Fits,
                    format!("metadata is {p:.1}% used; there is room for new metadata chunks"),
                )
                .with_evidence("unallocated per device", list.join(", "))
            }
        }
        None => base(
            MetadataRoom::Unknown,
            format!(
                "{what}: ENOSPC is near unless there is unallocated space for a new metadata chunk"
            ),
        )
        .with_evidence(
            "a new metadata chunk needs",
            format!(
                "{} unallocated on {need_devs} device(s) ({})",
                size(need_each),
                profile.progs_name()
            ),
        )
        .with_command(display_argv(&["btrfs", "filesystem", "usage", "-T", mount])),
    };
    if reserve_eats_rest {
        finding = finding.with_evidence(
            "global reserve",
            format!(
                "{} must come out of metadata: the free metadata is {}",
                size(reserve_total),
                size(free)
            ),
        );
    }
    let data_slack: u64 = f
        .records
        .iter()
        .filter(|r| r.bg_type == BgType::Data)
        .map(|r| r.total_bytes.saturating_sub(r.used_bytes))
        .sum();
    if data_slack >= 1 << 30 {
        finding = finding.with_evidence(
            "data allocated but unused (a data balance can return it)",
            size(data_slack),
        );
    }
    if finding.severity == Severity::Warning {
        finding.why.push_str(
            "; `btrfs filesystem df` does not show unallocated space: `btrfs filesystem usage -T` shows it per device",
        );
    } else if finding.severity == Severity::Critical {
        finding.why.push_str(
            "; a balance of nearly empty data chunks returns space to unallocated (or add a device: btrfs-lab device add)",
        );
    }
    Some(finding)
}

/// The global reserve in use (`df` alone: room unknown).
fn reserve_used(f: &SpaceFacts<'_>, mount: &str, metadata_full: bool) -> Option<Finding> {
    let r = reserve_record(f).filter(|r| r.used_bytes > 0 && f.unallocated.is_none())?;
    Some(
        Finding::new(
            Code::GlobalReserveUsed,
            format!("the global reserve is in use ({} of {})", size(r.used_bytes), size(r.total_bytes)),
            "btrfs dips into its emergency metadata reserve only when ordinary metadata space ran out; operations that need it next fail with ENOSPC",
        )
        .with_evidence("global reserve used", format!("{} of {}", size(r.used_bytes), size(r.total_bytes)))
        .with_severity(rules::global_reserve_used(r.used_bytes, r.total_bytes, metadata_full))
        .with_command(display_argv(&["btrfs", "filesystem", "usage", "-T", mount])),
    )
}

/// Mixed profiles: an unfinished conversion (or old mkfs leftovers).
fn mixed_profiles_finding(f: &SpaceFacts<'_>, mount: &str) -> Option<Finding> {
    let mixed = mixed_profiles(f.records);
    if mixed.is_empty() {
        return None;
    }
    let names: Vec<String> = mixed
        .iter()
        .map(crate::model::space::describe_mixed)
        .collect();
    if only_mkfs_leftovers(f.records, &mixed) {
        return Some(
            Finding::new(
                Code::EmptyLeftoverChunks,
                format!("empty chunks in a second profile: {}", names.join("; ")),
                "mkfs of old btrfs-progs left small empty single chunks next to the real profile; they hold nothing and a balance with usage=0 removes them",
            )
            .with_evidence("types", names.join("; "))
            .with_command(display_argv(&["btrfs", "balance", "start", "-musage=0", "-dusage=0", mount])),
        );
    }
    let mut finding = match f
        .balance
        .filter(|b| b.data_target.is_some() || b.metadata_target.is_some())
    {
        // The kernel knows where the conversion goes: one suggestion, the
        // one that continues it.
        Some(b) => {
            let targets = b.targets().in_words();
            let (state, words) = if b.running {
                ("running", vec!["btrfs-lab", "convert", "--status", mount])
            } else {
                ("paused", vec!["btrfs-lab", "convert", "--resume", mount])
            };
            Finding::new(
                Code::UnfinishedConversion,
                format!("a conversion ({targets}) is {state}: {}", names.join("; ")),
                "until it finishes, part of the filesystem keeps the old profile's redundancy",
            )
            .with_command(crate::sys::tools::display_argv(&words))
        }
        None => Finding::new(
            Code::UnfinishedConversion,
            format!("more than one profile for one type: {}", names.join("; ")),
            "a conversion (balance with a convert filter) did not finish: part of the data has the old profile's redundancy. The command finishes it towards the profile another type already has alone (or the one every mixed type has), else the one that holds the most; if the conversion was going the other way, give that profile instead",
        )
        .with_command(finish_conversion_command(f.records, &mixed, mount)),
    };
    for m in &mixed {
        for r in f.records.iter().filter(|r| r.bg_type == m.bg_type) {
            finding = finding.with_evidence(
                &format!("{}, {}", r.bg_type.progs_name(), r.profile.progs_name()),
                format!(
                    "{} allocated, {} used",
                    size(r.total_bytes),
                    size(r.used_bytes)
                ),
            );
        }
    }
    Some(finding)
}

/// Empty single chunks next to the real profile: mkfs of btrfs-progs
/// before 3.x left them (`System: total=4.00MB, used=0.00`).
fn only_mkfs_leftovers(
    records: &[SpaceRecord],
    mixed: &[crate::model::space::MixedProfiles],
) -> bool {
    mixed.iter().all(|m| {
        // Old mkfs left them for metadata and system only.
        matches!(m.bg_type, BgType::Metadata | BgType::System)
            && records
                .iter()
                .filter(|r| r.bg_type == m.bg_type)
                .filter(|r| r.used_bytes != 0)
                .count()
                <= 1
            && records.iter().any(|r| {
                r.bg_type == m.bg_type
                    && r.used_bytes == 0
                    && r.exact_or_small()
                    && r.profile == BgProfile::Known(Profile::Single)
            })
    })
}

/// `btrfs-lab convert MOUNT --data P --metadata Q` towards the profiles an
/// unfinished conversion most likely had as its targets.
fn finish_conversion_command(
    records: &[SpaceRecord],
    mixed: &[crate::model::space::MixedProfiles],
    mount: &str,
) -> String {
    let is_mixed = |t: BgType| mixed.iter().any(|m| m.bg_type == t);
    let target_of = |t: BgType| conversion_target(records, mixed, t);
    let data = target_of(BgType::Data)
        .or_else(|| target_of(BgType::DataMetadata))
        .filter(|_| is_mixed(BgType::Data) || is_mixed(BgType::DataMetadata));
    // System chunks convert with metadata.
    let metadata = target_of(BgType::Metadata)
        .filter(|_| is_mixed(BgType::Metadata) || is_mixed(BgType::System));
    let mut words = vec![
        "btrfs-lab".to_owned(),
        "convert".to_owned(),
        mount.to_owned(),
    ];
    if let Some(d) = data {
        words.extend(["--data".to_owned(), d.to_string()]);
    }
    if let Some(m) = metadata {
        words.extend(["--metadata".to_owned(), m.to_string()]);
    }
    display_argv(&words)
}

/// The target of a conversion for one type: a profile that another type
/// already has alone (data converted to match metadata), else the profile
/// that holds the most.
fn conversion_target(
    records: &[SpaceRecord],
    mixed: &[crate::model::space::MixedProfiles],
    t: BgType,
) -> Option<BgProfile> {
    let sole_profiles: Vec<BgProfile> = records
        .iter()
        .filter(|r| r.bg_type != BgType::GlobalReserve)
        .filter(|r| !mixed.iter().any(|m| m.bg_type == r.bg_type))
        .map(|r| r.profile)
        .collect();
    let own: Vec<&SpaceRecord> = records.iter().filter(|r| r.bg_type == t).collect();
    let matching: Vec<BgProfile> = own
        .iter()
        .map(|r| r.profile)
        .filter(|p| sole_profiles.contains(p))
        .collect();
    if own.len() > 1 && matching.len() == 1 {
        return Some(matching[0]);
    }
    // A profile every mixed type has (a convert of all types at once), when
    // only one is.
    let common: Vec<BgProfile> = own
        .iter()
        .map(|r| r.profile)
        .filter(|p| mixed.iter().all(|m| m.profiles.contains(p)))
        .collect();
    if own.len() > 1 && mixed.len() > 1 && common.len() == 1 {
        return Some(common[0]);
    }
    own.iter()
        .max_by_key(|r| (r.total_bytes, r.used_bytes))
        .map(|r| r.profile)
}

/// Data without redundancy on several devices (its command is set by the
/// caller: none when a conversion is under way).
fn no_redundancy(f: &SpaceFacts<'_>) -> Option<Finding> {
    let implied_devices = f
        .records
        .iter()
        .filter(|r| r.bg_type != BgType::GlobalReserve)
        .map(|r| match r.profile {
            BgProfile::Known(p) => p.min_devices() as usize,
            BgProfile::Unknown => 1,
        })
        .max()
        .unwrap_or(1);
    let devices = f.devices.unwrap_or(implied_devices).max(implied_devices);
    let bare: Vec<&SpaceRecord> = f
        .records
        .iter()
        .filter(|r| {
            matches!(r.bg_type, BgType::Data | BgType::DataMetadata)
                && matches!(
                    r.profile,
                    BgProfile::Known(Profile::Single | Profile::Raid0)
                )
                && r.used_bytes > 0
        })
        .collect();
    if devices < 2 || bare.is_empty() {
        return None;
    }
    let total: u64 = bare.iter().map(|r| r.used_bytes).sum();
    Some(
        Finding::new(
            Code::DataNoRedundancy,
            format!("data has no redundancy on a filesystem of {devices} devices"),
            "with single or RAID0 data, losing any one device loses the files with extents on it; with several devices a redundant profile is possible",
        )
        .with_evidence("data without a second copy", size(total))
        .with_evidence(
            "devices",
            if f.devices.is_some() {
                devices.to_string()
            } else {
                format!("at least {devices} (implied by the profiles)")
            },
        ),
    )
}

/// What to ask for next when the paste cannot tell.
fn what_to_ask_next(f: &SpaceFacts<'_>, mount: &str, metadata_full: bool) -> Vec<Finding> {
    let mut findings = Vec::new();
    if f.ambiguous_units {
        findings.push(
            Finding::new(
                Code::AskForRawBytes,
                "the units of this paste are ambiguous (old binary MB/GB or --si)",
                "the figures were read as binary with bounds that cover the decimal reading; raw bytes settle it",
            )
            .with_command(display_argv(&["btrfs", "filesystem", "df", "-b", mount])),
        );
    }
    let data_full = f
        .records
        .iter()
        .filter(|r| r.bg_type == BgType::Data)
        .any(|r| pct(r.used_bytes, r.total_bytes) >= METADATA_FULL_PERCENT);
    if f.unallocated.is_none() && !metadata_records(f).is_empty() && !metadata_full && data_full {
        findings.push(
            Finding::new(
                Code::AskForUsage,
                "data chunks are nearly full; whether new ones fit is not in this output",
                "`btrfs filesystem df` shows only allocated chunks; `btrfs filesystem usage -T` shows the unallocated space per device that new chunks come from",
            )
            .with_command(display_argv(&["btrfs", "filesystem", "usage", "-T", mount])),
        );
    }
    findings
}

trait SmallChunk {
    fn exact_or_small(&self) -> bool;
}

impl SmallChunk for SpaceRecord {
    /// A leftover mkfs chunk: at most 8MiB (give or take the rounding).
    fn exact_or_small(&self) -> bool {
        self.total_bytes <= (8 << 20) + self.total_error_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t: BgType, p: Profile, total: u64, used: u64) -> SpaceRecord {
        SpaceRecord::exact(t, BgProfile::Known(p), total, used, None)
    }

    const G: u64 = 1 << 30;
    const M: u64 = 1 << 20;

    fn codes(i: &Interpretation) -> Vec<(&str, Severity)> {
        i.findings
            .iter()
            .map(|f| (f.code.as_str(), f.severity))
            .collect()
    }

    #[test]
    fn metadata_full_is_critical_only_without_room_for_a_chunk() {
        let records = [
            rec(BgType::Data, Profile::Single, 500 * G, 414 * G),
            rec(BgType::Metadata, Profile::Dup, 6 * G, 5_630 * M),
            rec(BgType::GlobalReserve, Profile::Single, 512 * M, 96 << 10),
        ];
        let df = interpret(&SpaceFacts {
            records: &records,
            ..Default::default()
        });
        // 96KiB of a 512MiB reserve with metadata tight: a warning (the
        // catalog's rule, as doctor's; it was critical here before).
        assert_eq!(
            codes(&df),
            [
                ("metadata-nearly-full", Severity::Warning),
                ("global-reserve-used", Severity::Warning)
            ]
        );
        assert_eq!(
            df.findings[0].command.as_deref(),
            Some("btrfs filesystem usage -T MOUNT")
        );
        let full = interpret(&SpaceFacts {
            records: &records,
            unallocated: Some(vec![M as i64]),
            devices: Some(1),
            mount: Some("/mnt".into()),
            ..Default::default()
        });
        // The room computation doctor makes: no full chunk, 0.5 MiB in a
        // smaller DUP one; the data chunks' usage is not in a paste, so the
        // reclaim's last -dusage value comes from their average (83% used:
        // 90; the evidence adds the chunks the goal needs: 2GiB in 1GiB
        // data chunks, and one more).
        assert_eq!(full.findings[0].code, "metadata-chunk-no-room");
        assert_eq!(full.findings[0].severity, Severity::Critical);
        assert!(full.findings[0].title.contains("no room for a full dup"));
        assert_eq!(
            full.findings[0].command.as_deref(),
            Some("btrfs-lab reclaim /mnt --max-usage 90")
        );
        assert!(
            !full
                .findings
                .iter()
                .any(|f| f.code == "metadata-nearly-full"),
            "one situation, one finding: {:?}",
            codes(&full)
        );
        // 512GiB of devices: metadata chunks of 1GiB, DUP needs 2GiB on one
        // device: 3GiB is enough.
        let room = interpret(&SpaceFacts {
            records: &records,
            unallocated: Some(vec![3 * G as i64]),
            devices: Some(1),
            ..Default::default()
        });
        let m = room
            .findings
            .iter()
            .find(|f| f.code == "metadata-nearly-full")
            .unwrap();
        assert_eq!(m.severity, Severity::Info);
    }

    #[test]
    fn reserve_larger_than_free_metadata_counts_as_full() {
        // btrfs-progs issue 657: 1011.77MiB of 1.00GiB, reserve 132.72MiB.
        let records = [
            rec(BgType::Metadata, Profile::Raid1, G, 1_060_915_000),
            rec(BgType::GlobalReserve, Profile::Single, 139_167_000, 0),
        ];
        let i = interpret(&SpaceFacts {
            records: &records,
            ..Default::default()
        });
        assert_eq!(i.findings[0].code, "metadata-nearly-full");
        assert!((i.percentages[0].used_percent - 98.8).abs() < 0.1);
    }

    #[test]
    fn conversions_leftovers_and_redundancy() {
        let conv = [
            rec(BgType::Data, Profile::Raid10, 4 * G, 3 * G),
            rec(BgType::Data, Profile::Raid5, 3 * G, G / 2),
            rec(BgType::Metadata, Profile::Raid10, G / 2, G / 4),
            rec(BgType::Metadata, Profile::Raid5, 288 * M, 5 * M),
        ];
        let i = interpret(&SpaceFacts {
            records: &conv,
            ..Default::default()
        });
        assert_eq!(codes(&i), [("unfinished-conversion", Severity::Warning)]);
        assert_eq!(
            i.findings[0].command.as_deref(),
            Some("btrfs-lab convert MOUNT --data raid10 --metadata raid10")
        );
        let old = [
            rec(BgType::Data, Profile::Single, 34 * G, 26 * G),
            rec(BgType::System, Profile::Dup, 8 * M, 12 << 10),
            rec(BgType::System, Profile::Single, 4 * M, 0),
            rec(BgType::Metadata, Profile::Dup, 3 * G, 2 * G),
            rec(BgType::Metadata, Profile::Single, 8 * M, 0),
        ];
        let i = interpret(&SpaceFacts {
            records: &old,
            ..Default::default()
        });
        assert_eq!(codes(&i), [("empty-leftover-chunks", Severity::Info)]);
        // A conversion of data whose last single chunk is the empty 8MiB
        // one of mkfs: still a conversion, not an old-mkfs leftover.
        let conv_empty = [
            rec(BgType::Data, Profile::Single, 8 * M, 0),
            rec(BgType::Data, Profile::Raid1, G, G / 2),
            rec(BgType::Metadata, Profile::Raid1, G, G / 10),
        ];
        let i = interpret(&SpaceFacts {
            records: &conv_empty,
            ..Default::default()
        });
        assert_eq!(codes(&i), [("unfinished-conversion", Severity::Warning)]);
        // Metadata is raid1 alone: only data is named.
        assert_eq!(
            i.findings[0].command.as_deref(),
            Some("btrfs-lab convert MOUNT --data raid1")
        );
        // A paused conversion the kernel knows about: resumed, never
        // started again towards a guessed profile.
        let paused = crate::model::balance::BalanceInfo {
            running: false,
            paused: true,
            data_target: Some(Profile::Raid1),
            metadata_target: None,
            cancelling: false,
            expected: 4,
            completed: 3,
        };
        let i = interpret(&SpaceFacts {
            records: &conv_empty,
            balance: Some(paused),
            mount: Some("/mnt".into()),
            ..Default::default()
        });
        assert_eq!(codes(&i), [("unfinished-conversion", Severity::Warning)]);
        assert_eq!(
            i.findings[0].command.as_deref(),
            Some("btrfs-lab convert --resume /mnt")
        );
        assert!(i.findings[0].title.contains("(data to raid1) is paused"));
        let raid0 = [
            rec(BgType::Data, Profile::Raid0, 4 * G, 3 * G),
            rec(BgType::Metadata, Profile::Raid1, G, G / 10),
        ];
        let i = interpret(&SpaceFacts {
            records: &raid0,
            ..Default::default()
        });
        // A deliberate RAID0 is info, as in doctor.
        assert_eq!(codes(&i), [("data-no-redundancy", Severity::Info)]);
        // One device, single data: nothing to say.
        let one = [
            rec(BgType::Data, Profile::Single, 4 * G, 3 * G),
            rec(BgType::Metadata, Profile::Dup, G, G / 10),
        ];
        assert!(
            interpret(&SpaceFacts {
                records: &one,
                devices: Some(1),
                ..Default::default()
            })
            .findings
            .is_empty()
        );
    }
}
