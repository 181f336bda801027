//! The findings of one filesystem, from its facts: pure code, so every rule
//! is tested on numbers without a filesystem.

use crate::model::finding::{Finding, Severity, rank};
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::model::units::{UnitMode, pretty_size};
use crate::sys::tools::display_argv;

use super::facts::FsFacts;

/// A scrub older than this is a warning (seconds: 31 days).
pub const SCRUB_MAX_AGE: u64 = 31 * 86_400;

/// Data used above this fraction of what it can grow to: warning.
pub const FULL_WARNING: f64 = 0.90;
/// Data used at or above this: critical.
pub const DATA_FULL_CRITICAL: f64 = 0.98;
/// Metadata (with the global reserve) used at or above this: critical.
pub const METADATA_FULL_CRITICAL: f64 = 0.95;

fn size(b: u64) -> String {
    pretty_size(b, UnitMode::default())
}

fn pct(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

fn cmd(words: &[&str], mount: &str) -> String {
    let mut v: Vec<&str> = words.to_vec();
    v.push(mount);
    display_argv(&v)
}

/// The profile the kernel gives new chunks of a type: a convert target
/// when a balance exists, else the most redundant profile in use (as
/// `btrfs_reduce_alloc_profile`).
pub fn alloc_profile(f: &FsFacts, kind: BgType) -> Option<Profile> {
    let target = f.balance.and_then(|b| match kind {
        BgType::Data => b.data_target,
        BgType::Metadata => b.metadata_target,
        _ => None,
    });
    if target.is_some() {
        return target;
    }
    let used = f.profiles(kind);
    use Profile::*;
    [
        Raid6, Raid1c4, Raid5, Raid1c3, Raid10, Raid1, Dup, Raid0, Single,
    ]
    .into_iter()
    .find(|p| used.contains(p))
}

/// Mirrored copies on distinct devices: the largest logical size that fits
/// `unalloc` (no device holds two copies of a chunk).
fn mirrored(unalloc: &[u64], copies: usize) -> u64 {
    let mut v = unalloc.to_vec();
    v.sort_unstable_by(|a, b| b.cmp(a));
    let sum: u64 = v.iter().sum();
    let mut best = sum / copies as u64;
    for j in 1..copies {
        let rest: u64 = v.iter().skip(j).sum();
        best = best.min(rest / (copies - j) as u64);
    }
    if v.len() < copies { 0 } else { best }
}

/// Logical bytes new chunks of `p` can still get from the unallocated space
/// of the devices (an estimate, as `btrfs filesystem usage` makes).
pub fn growth(p: Profile, unalloc: &[u64]) -> u64 {
    let sum: u64 = unalloc.iter().sum();
    let n = unalloc.iter().filter(|&&u| u >= 1 << 20).count() as u64;
    match p {
        Profile::Single | Profile::Raid0 => sum,
        Profile::Dup => unalloc.iter().map(|u| u / 2).sum(),
        Profile::Raid1 | Profile::Raid10 => mirrored(unalloc, 2),
        Profile::Raid1c3 => mirrored(unalloc, 3),
        Profile::Raid1c4 => mirrored(unalloc, 4),
        Profile::Raid5 if n >= 2 => sum / n * (n - 1),
        Profile::Raid6 if n >= 3 => sum / n * (n - 2),
        Profile::Raid5 | Profile::Raid6 => 0,
    }
}

/// Devices (and bytes on each) a full-size chunk of `p` of `chunk` logical
/// bytes needs, given the devices' unallocated bytes: `(needed, have)`.
pub fn chunk_room(p: Profile, chunk: u64, unalloc: &[u64]) -> (usize, usize, u64) {
    let count = |need: u64| unalloc.iter().filter(|&&u| u >= need).count();
    match p {
        Profile::Single => (1, count(chunk), chunk),
        Profile::Dup => (1, count(chunk * 2), chunk * 2),
        Profile::Raid1 => (2, count(chunk), chunk),
        Profile::Raid1c3 => (3, count(chunk), chunk),
        Profile::Raid1c4 => (4, count(chunk), chunk),
        Profile::Raid0 | Profile::Raid10 | Profile::Raid5 | Profile::Raid6 => {
            let n = count(1 << 20).max(1) as u64;
            let data_stripes = match p {
                Profile::Raid10 => (n / 2).max(1),
                Profile::Raid5 => n.saturating_sub(1).max(1),
                Profile::Raid6 => n.saturating_sub(2).max(1),
                _ => n,
            };
            let per = chunk.div_ceil(data_stripes);
            (p.min_devices() as usize, count(per), per)
        }
    }
}

fn redundant(p: Profile) -> bool {
    !matches!(p, Profile::Single | Profile::Raid0)
}

/// Kernel versions below which a feature in use is known to be risky.
const KERNEL_FLOORS: [(&str, KernelVersion, &str); 3] = [
    (
        "raid56",
        KernelVersion::new(6, 2),
        "RAID5/6 before Linux 6.2 can return or write back corrupted data during a read-modify-write after a device error (the RMW rework of 6.2 verifies checksums first)",
    ),
    (
        "raid1c34",
        KernelVersion::new(5, 5),
        "RAID1C3/4 needs Linux 5.5; an older kernel cannot mount this filesystem",
    ),
    (
        "block_group_tree",
        KernelVersion::new(6, 1),
        "the block group tree needs Linux 6.1; an older kernel cannot mount this filesystem",
    ),
];

/// Every finding about one filesystem, worst first. `now` is seconds since
/// the epoch.
pub fn analyse(f: &FsFacts, now: u64) -> Vec<Finding> {
    let mut out = Vec::new();
    let m = f.mount_point.display().to_string();
    let present: Vec<_> = f.present().collect();
    let unalloc: Vec<u64> = present.iter().map(|d| d.unallocated_bytes()).collect();
    let data = f.profiles(BgType::Data);
    let meta = f.profiles(BgType::Metadata);
    let all_profiles: Vec<Profile> = data
        .iter()
        .chain(&meta)
        .chain(&f.profiles(BgType::System))
        .copied()
        .collect();
    let without_redundancy: Vec<Profile> = {
        let mut v: Vec<Profile> = all_profiles
            .iter()
            .copied()
            .filter(|p| !redundant(*p))
            .collect();
        v.sort();
        v.dedup();
        v
    };

    // Missing devices, degraded mount.
    let missing = f.missing_count();
    if missing > 0 {
        let mut fi = Finding::new(
            "device-missing",
            Severity::Critical,
            format!("{missing} device(s) of {} missing", f.total_devices),
            "every chunk that had a copy on the missing device now has one copy fewer (none, on profiles without redundancy); another failure loses data",
        )
        .with_evidence("devices", format!("{} of {}", present.len(), f.total_devices))
        .with_command(format!(
            "btrfs replace start <missing devid> <new device> {m}  (or: btrfs device add <new device> {m}; btrfs device remove missing {m})"
        ));
        for d in f.devices.iter().filter(|d| d.missing) {
            fi = fi.with_evidence("missing devid", d.devid.to_string());
        }
        out.push(fi);
    }
    if f.mount_options.split(',').any(|o| o == "degraded") {
        out.push(
            Finding::new(
                "mount-degraded",
                Severity::Critical,
                "mounted with -o degraded",
                "a degraded mount writes new chunks without their usual redundancy (single) and hides a missing device; repair the array, then remount without `degraded`",
            )
            .with_evidence("mount options", f.mount_options.clone())
            .with_command(cmd(&["btrfs", "filesystem", "show"], &m)),
        );
    }

    // Device error counters.
    for d in &f.devices {
        let Some(e) = d.errors else { continue };
        if e.total() == 0 {
            continue;
        }
        let damaging = e.read + e.write + e.corruption + e.generation;
        let unrepairable = damaging > 0 && !without_redundancy.is_empty();
        let mut fi = if unrepairable {
            Finding::new(
                "device-errors-no-redundancy",
                Severity::Critical,
                format!(
                    "device {} ({}) has errors on a filesystem with {} chunks",
                    d.devid,
                    d.path,
                    without_redundancy
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join("/")
                ),
                "a block in a chunk without redundancy has no good copy: scrub cannot repair it; the files it names in the kernel log are damaged and must be restored from a backup, and the drive checked",
            )
            .with_command(format!(
                "{}  (then dmesg | grep -i 'checksum error' names the files; btrfs device stats -z {m} once dealt with)",
                cmd(&["btrfs", "scrub", "start", "-Bd"], &m)
            ))
        } else {
            Finding::new(
                "device-errors",
                Severity::Warning,
                format!("device {} ({}) has errors", d.devid, d.path),
                "the counters only grow: a drive, cable or controller problem, or silent corruption; on a redundant profile scrub repairs bad copies from the good ones",
            )
            .with_command(format!(
                "{}  (then btrfs device stats -z {m}; check the drive: smartctl -a {})",
                cmd(&["btrfs", "scrub", "start", "-Bd"], &m),
                d.path
            ))
        };
        for (kind, n) in e.kinds() {
            if n > 0 {
                fi = fi.with_evidence(&format!("{kind} errors"), n.to_string());
            }
        }
        out.push(fi);
    }

    // Room for a new metadata chunk, per metadata profile in use (and a
    // conversion's target).
    let gr = f
        .spaces
        .iter()
        .find(|s| s.bg_type == BgType::GlobalReserve)
        .copied();
    let (meta_total, meta_used) = f.totals(BgType::Metadata);
    let meta_fill = if meta_total > 0 {
        (meta_used + gr.map_or(0, |g| g.total_bytes)) as f64 / meta_total as f64
    } else {
        0.0
    };
    let mut check: Vec<Profile> = meta.clone();
    if let Some(t) = f.balance.and_then(|b| b.metadata_target)
        && !check.contains(&t)
    {
        check.push(t);
    }
    if !f.profiles(BgType::DataMetadata).is_empty() {
        check.clear(); // mixed block groups: the data+metadata fullness covers it
    }
    for p in check {
        let (need, have, per) = chunk_room(p, f.metadata_chunk_bytes, &unalloc);
        if have >= need {
            continue;
        }
        let critical = meta_fill >= 0.80 || gr.is_some_and(|g| g.used_bytes > 0);
        out.push(
            Finding::new(
                "metadata-chunk-no-room",
                if critical {
                    Severity::Critical
                } else {
                    Severity::Warning
                },
                format!(
                    "no room for a new {p} metadata chunk: it needs {need} device(s) with {} unallocated, {have} have it",
                    size(per)
                ),
                "when the allocated metadata fills up, btrfs cannot allocate more and every write (even a delete) fails with ENOSPC; freeing data chunks (a filtered balance) or adding a device makes room",
            )
            .with_evidence("metadata profile", p.name())
            .with_evidence("metadata chunk size", size(f.metadata_chunk_bytes))
            .with_evidence(
                "unallocated per device",
                present
                    .iter()
                    .map(|d| format!("devid {} {}", d.devid, size(d.unallocated_bytes())))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
            .with_evidence("metadata used (with global reserve)", pct(meta_fill))
            .with_command(cmd(&["btrfs", "balance", "start", "-dusage=10"], &m)),
        );
    }

    // Fullness of data and metadata against what they can grow to.
    for (kind, critical_at) in [
        (BgType::Data, DATA_FULL_CRITICAL),
        (BgType::Metadata, METADATA_FULL_CRITICAL),
    ] {
        if kind == BgType::Metadata && !f.profiles(BgType::DataMetadata).is_empty() {
            continue;
        }
        let (total, used) = f.totals(kind);
        let Some(p) = alloc_profile(f, kind) else {
            continue;
        };
        let reserve = if kind == BgType::Metadata {
            gr.map_or(0, |g| g.total_bytes)
        } else {
            0
        };
        let capacity = total + growth(p, &unalloc);
        if capacity == 0 {
            continue;
        }
        let fill = (used + reserve) as f64 / capacity as f64;
        if fill <= FULL_WARNING {
            continue;
        }
        let name = kind.json_name();
        out.push(
            Finding::new(
                &format!("{name}-nearly-full"),
                if fill >= critical_at {
                    Severity::Critical
                } else {
                    Severity::Warning
                },
                format!("{name} is {} full", pct(fill)),
                if kind == BgType::Data {
                    "new writes fail with ENOSPC when data is full; delete files (and snapshots holding them) or add a device"
                } else {
                    "when metadata is full every change fails with ENOSPC, even deleting files; free space now"
                },
            )
            .with_evidence(&format!("{name} used"), size(used))
            .with_evidence(&format!("{name} allocated"), size(total))
            .with_evidence(
                &format!("room for new {p} chunks"),
                size(capacity - total),
            )
            .with_command(cmd(&["btrfs", "filesystem", "usage"], &m)),
        );
    }

    if let Some(g) = gr
        && g.used_bytes > 0
    {
        // A few KiB taken during a commit (a scrub, a balance) are normal;
        // a quarter of it, or any of it with metadata tight, is not.
        let tight = meta_fill >= FULL_WARNING
            || out
                .iter()
                .any(|x: &Finding| x.code == "metadata-chunk-no-room");
        let severity = if g.used_bytes * 2 >= g.total_bytes {
            Severity::Critical
        } else if g.used_bytes * 4 >= g.total_bytes || tight {
            Severity::Warning
        } else {
            Severity::Info
        };
        out.push(
            Finding::new(
                "global-reserve-used",
                severity,
                format!(
                    "the global reserve is in use: {} of {}",
                    size(g.used_bytes),
                    size(g.total_bytes)
                ),
                "btrfs takes from its emergency reserve only when metadata ran out; the next step is ENOSPC on every write",
            )
            .with_evidence("global reserve used", size(g.used_bytes))
            .with_evidence("global reserve size", size(g.total_bytes))
            .with_command(cmd(&["btrfs", "balance", "start", "-dusage=10"], &m)),
        );
    }

    // Conversions and balances.
    if let Some(b) = f.balance {
        let targets = [
            b.data_target.map(|p| format!("data to {p}")),
            b.metadata_target.map(|p| format!("metadata to {p}")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ");
        let what = if targets.is_empty() {
            "a balance".to_owned()
        } else {
            format!("a conversion ({targets})")
        };
        let fi = if b.running {
            Finding::new(
                "balance-running",
                Severity::Info,
                format!("{what} is running"),
                "it relocates chunks; throughput is lower until it ends",
            )
            .with_command(cmd(&["btrfs-lab", "convert", "--status"], &m))
        } else {
            Finding::new(
                "balance-paused",
                Severity::Warning,
                format!("{what} is paused"),
                "until it finishes, part of the filesystem keeps the old profiles (and their redundancy); a paused balance resumes at the next mount unless skip_balance is given",
            )
            .with_command(cmd(&["btrfs-lab", "convert", "--resume"], &m))
        };
        out.push(fi.with_evidence(
            "chunks relocated",
            format!("{} of {}", b.completed, b.expected),
        ));
    }
    for (kind, profiles) in [
        (BgType::Data, &data),
        (BgType::Metadata, &meta),
        (BgType::System, &f.profiles(BgType::System)),
    ] {
        if profiles.len() < 2 {
            continue;
        }
        let names: Vec<&str> = profiles.iter().map(|p| p.name()).collect();
        let mut fi = Finding::new(
            "mixed-profiles",
            Severity::Warning,
            format!(
                "{} has several profiles: {}",
                kind.json_name(),
                names.join(", ")
            ),
            "an unfinished conversion: the redundancy is that of the weakest profile, and new chunks may go to either",
        );
        for s in f.spaces.iter().filter(|s| s.bg_type == kind) {
            fi = fi.with_evidence(
                &format!("{} {}", kind.json_name(), s.profile),
                format!("{} used of {}", size(s.used_bytes), size(s.total_bytes)),
            );
        }
        let target = alloc_profile(f, kind).unwrap_or(Profile::Single);
        let flag = match kind {
            BgType::Data => "--data",
            _ => "--metadata",
        };
        out.push(fi.with_command(if f.balance.is_some() {
            cmd(&["btrfs-lab", "convert", "--status"], &m)
        } else {
            cmd(&["btrfs-lab", "convert", flag, target.name()], &m)
        }));
    }

    // Layout.
    let devices = present.len() as u64 + missing;
    if devices >= 2 {
        for p in meta
            .iter()
            .filter(|p| matches!(p, Profile::Single | Profile::Dup))
        {
            let better = if devices >= 3 { "raid1c3" } else { "raid1" };
            out.push(
                Finding::new(
                    "metadata-one-device",
                    Severity::Warning,
                    format!("metadata is {p} on a filesystem of {devices} devices"),
                    "each metadata chunk lives on one device: losing any one device loses the whole filesystem, not only the data on it",
                )
                .with_evidence("metadata profile", p.name())
                .with_evidence("devices", devices.to_string())
                .with_command(cmd(&["btrfs-lab", "convert", "--metadata", better], &m)),
            );
        }
        for p in data
            .iter()
            .filter(|p| matches!(p, Profile::Single | Profile::Raid0))
        {
            out.push(
                Finding::new(
                    "data-no-redundancy",
                    Severity::Info,
                    format!("data is {p} over {devices} devices"),
                    "one copy of each block: a device failure loses the files with blocks on it, and scrub can detect but not repair corruption; fine for a scratch or cache array with backups",
                )
                .with_evidence("data profile", p.name()),
            );
        }
    }
    for p in meta
        .iter()
        .filter(|p| matches!(p, Profile::Raid5 | Profile::Raid6))
    {
        out.push(
            Finding::new(
                "metadata-raid56",
                Severity::Warning,
                format!("metadata is {p}"),
                "the btrfs developers advise against RAID5/6 for metadata (write hole, slow scrub and rebuild); use raid1 or raid1c3",
            )
            .with_evidence("metadata profile", p.name())
            .with_command(cmd(&["btrfs-lab", "convert", "--metadata", "raid1c3"], &m)),
        );
    }

    // Scrub.
    let scrubbed = f.scrub.iter().filter(|s| s.started > 0);
    let last = scrubbed.clone().map(|s| s.started + s.duration).max();
    let uncorrectable: u64 = f.scrub.iter().map(|s| s.uncorrectable).sum();
    let corrected: u64 = f.scrub.iter().map(|s| s.corrected).sum();
    let found: u64 = f.scrub.iter().map(|s| s.errors_found).sum();
    match last {
        None => out.push(
            Finding::new(
                "scrub-never-run",
                Severity::Info,
                "no scrub on record",
                "a scrub reads every copy and checks it against its checksum: it finds silent corruption while a good copy still exists",
            )
            .with_command(cmd(&["btrfs", "scrub", "start"], &m)),
        ),
        Some(t) if now.saturating_sub(t) > SCRUB_MAX_AGE => out.push(
            Finding::new(
                "scrub-old",
                Severity::Warning,
                format!("the last scrub ended {} days ago", now.saturating_sub(t) / 86_400),
                "corruption found late may have spread to the other copy, or to backups; scrub monthly (btrfs-progs ships btrfs-scrub@.timer)",
            )
            .with_evidence("last scrub ended", format!("{t} (seconds since the epoch)"))
            .with_command(cmd(&["btrfs", "scrub", "start"], &m)),
        ),
        Some(_) => {}
    }
    if uncorrectable > 0 || found > 0 || corrected > 0 {
        let critical = uncorrectable > 0;
        out.push(
            Finding::new(
                "scrub-errors",
                if critical {
                    Severity::Critical
                } else {
                    Severity::Warning
                },
                if critical {
                    format!("the last scrub found {uncorrectable} error(s) it could not repair")
                } else {
                    format!("the last scrub found and repaired {} error(s)", corrected.max(found))
                },
                if critical {
                    "blocks without a good copy: the files the kernel log names (dmesg) are damaged; restore them from a backup"
                } else {
                    "a good copy repaired them; errors that come back point at the drive or its cabling"
                },
            )
            .with_evidence("errors found", found.to_string())
            .with_evidence("corrected", corrected.to_string())
            .with_evidence("uncorrectable", uncorrectable.to_string())
            .with_command(cmd(&["btrfs", "scrub", "status", "-d"], &m)),
        );
    }
    if f.scrub.iter().any(|s| s.canceled && !s.finished) {
        out.push(
            Finding::new(
                "scrub-interrupted",
                Severity::Info,
                "the last scrub was cancelled or interrupted",
                "part of the filesystem was not checked",
            )
            .with_command(cmd(&["btrfs", "scrub", "resume"], &m)),
        );
    }

    // Kernel.
    if let Some(k) = KernelVersion::parse(&f.kernel) {
        let raid56 = all_profiles
            .iter()
            .any(|p| matches!(p, Profile::Raid5 | Profile::Raid6));
        for (feature, floor, why) in KERNEL_FLOORS {
            let in_use = if feature == "raid56" {
                raid56
            } else {
                f.features.iter().any(|x| x == feature)
            };
            if in_use && k < floor {
                out.push(
                    Finding::new(
                        "kernel-too-old",
                        Severity::Warning,
                        format!("{feature} is in use on Linux {k}; {floor} or later is needed"),
                        why,
                    )
                    .with_evidence("kernel", k.to_string())
                    .with_evidence("feature", feature),
                );
            }
        }
    }

    rank(&mut out);
    out
}

#[cfg(test)]
mod tests;
