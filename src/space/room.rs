//! Room to grow: the one computation of `data-nearly-full`,
//! `metadata-chunk-no-room`, `metadata-nearly-full` and
//! `global-reserve-used` wherever the unallocated space of each device is
//! known (`usage`, `usage --parse`, `doctor`), so each situation gets the
//! same finding, code and severity from every command. Pure: figures in,
//! findings out.
//!
//! What the kernel does, and the rules follow: a new chunk takes the
//! devices with the most room and stripes as large as the smallest of them
//! allows, down to 64 KiB (`decide_stripe_size_regular`), so "no room for a
//! full-size metadata chunk" is not "no room": [`alloc::capacity`] counts
//! the smaller chunks too. Severities come from used metadata (with the
//! global reserve) against what metadata can still grow to, and from the
//! reserve's real use (a few KiB during a commit are normal). Every
//! command given changes the situation: a `-dusage` value computed from the
//! data chunks' usage ([`reclaim`]), or adding a device when no balance can
//! free enough.

use crate::model::alloc::{self, ChunkKind};
use crate::model::finding::{Code, Finding, Severity, rules};
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;
use crate::model::reclaim::{self, ChunkUse};
use crate::report::units::{UnitBase, UnitMode, pretty_size};
use crate::sys::tools::display_argv;

/// The figures the findings are computed from.
#[derive(Debug, Clone)]
pub(crate) struct RoomFacts<'a> {
    /// The mount point for the commands (`MOUNT` when unknown).
    pub(crate) mount: &'a str,
    /// The profile new data chunks get (a conversion's target first).
    pub(crate) data_profile: Option<Profile>,
    /// The profile new metadata chunks get; `None` for mixed block groups.
    pub(crate) metadata_profile: Option<Profile>,
    /// Data (allocated, used), logical bytes.
    pub(crate) data: (u64, u64),
    /// Metadata (allocated, used), logical bytes.
    pub(crate) metadata: (u64, u64),
    /// The global reserve (used, size), when reported.
    pub(crate) reserve: Option<(u64, u64)>,
    /// Unallocated bytes of each present device.
    pub(crate) unalloc: &'a [u64],
    /// Sum of the devices' sizes (the allocator's `total_rw_bytes`).
    pub(crate) devices_bytes: u64,
    /// Size of a full metadata chunk (sysfs `chunk_size`, capped at 10%);
    /// 0: the kernel's rule from the devices' size.
    pub(crate) metadata_chunk_bytes: u64,
    /// The running kernel (a recent one for a paste).
    pub(crate) kernel: KernelVersion,
    /// Usage of every data chunk (the block group items), when read.
    pub(crate) data_chunks: Option<&'a [ChunkUse]>,
}

fn size(v: u64) -> String {
    pretty_size(v, UnitMode::Human(UnitBase::Binary))
}

fn pct(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

fn ratio(used: u64, capacity: u64) -> f64 {
    if capacity == 0 {
        if used == 0 { 0.0 } else { 1.0 }
    } else {
        used as f64 / capacity as f64
    }
}

/// The suggestion that makes `goal_raw` raw bytes of room: the smallest
/// `-dusage` value that frees enough, else a device to add. `(command,
/// evidence)`.
/// `btrfs-lab reclaim MOUNT --max-usage N`: the filtered data balances up
/// to the `-dusage` value the chunks' usage says frees enough, stopping as
/// soon as a metadata chunk fits (planned, confirmed, resumable), instead
/// of a hand-run `btrfs balance`.
fn reclaim_command(mount: &str, usage: u8) -> String {
    display_argv(&[
        "btrfs-lab",
        "reclaim",
        mount,
        "--max-usage",
        &usage.max(1).to_string(),
    ])
}

fn make_room(f: &RoomFacts<'_>, goal_raw: u64) -> (String, Vec<(String, String)>) {
    let add = (
        display_argv(&["btrfs-lab", "device", "add", f.mount, "NEW_DEVICE"]),
        Vec::new(),
    );
    let Some(dp) = f.data_profile else {
        return add;
    };
    let r = alloc::raw_per_logical(dp, f.unalloc.len(), f.kernel);
    let goal = (goal_raw as f64 / r).ceil() as u64;
    let (alloc, used) = f.data;
    match f.data_chunks {
        Some(chunks) => match reclaim::first_reaching(chunks, goal) {
            Some(s) => (
                reclaim_command(f.mount, s.usage),
                vec![(
                    format!("-dusage={} (from each data chunk's usage)", s.usage),
                    format!(
                        "relocates {} chunk{}, moves {}, frees about {} of data chunks",
                        s.chunks,
                        if s.chunks == 1 { "" } else { "s" },
                        size(s.moves_bytes),
                        size(s.frees_bytes)
                    ),
                )],
            ),
            None => {
                let mut a = add;
                a.1.push((
                    "a filtered data balance".to_owned(),
                    format!(
                        "frees less than the {} needed at every -dusage up to {} (the data chunks are full)",
                        size(goal),
                        reclaim::USAGE_STEPS[reclaim::USAGE_STEPS.len() - 1]
                    ),
                ));
                a
            }
        },
        None => {
            // Without the chunks' usage (a paste): the average says at
            // least one chunk is that full or less.
            let slack = alloc.saturating_sub(used);
            if slack < goal {
                let mut a = add;
                a.1.push((
                    "data allocated but unused".to_owned(),
                    format!(
                        "{}: less than the {} needed, no balance can free it",
                        size(slack),
                        size(goal)
                    ),
                ));
                return a;
            }
            let avg = (ratio(used, alloc) * 100.0).ceil() as u8;
            let n = reclaim::USAGE_STEPS
                .iter()
                .copied()
                .find(|&s| s > avg)
                .unwrap_or(90);
            // As many chunks as the goal needs, and one more: each
            // relocated chunk is freed whole while the others' free space
            // takes its data (the slack covers the goal).
            let lim = alloc::chunk_limits(ChunkKind::Data, f.devices_bytes, f.kernel);
            let n_dev = u32::try_from(f.unalloc.len()).unwrap_or(u32::MAX);
            let stripes = dp.stripes_on(n_dev, f.kernel).unwrap_or(1);
            let chunk = (lim.max_stripe * u64::from(dp.data_stripes(stripes)))
                .min(lim.max_chunk)
                .max(1 << 20);
            let limit = goal.div_ceil(chunk) + 1;
            (
                reclaim_command(f.mount, n),
                vec![(
                    format!("-dusage={n},limit={limit} (from the average data chunk)"),
                    format!(
                        "data chunks are {} used on average, so some are below {n}%; {limit} of them (up to {} each) free about {} while {} allocated but unused takes their data",
                        pct(ratio(used, alloc)),
                        size(chunk),
                        size(goal),
                        size(slack)
                    ),
                )],
            )
        }
    }
}

/// Whether a finding names a reclaim (a `-dusage` balance) that each data chunk's
/// usage would make exact: the callers read the block group items (one
/// lookup per data chunk) only then, so `df` and `doctor` stay cheap.
pub(crate) fn wants_chunk_usage(findings: &[Finding]) -> bool {
    findings.iter().any(|f| {
        f.command
            .as_deref()
            .is_some_and(|c| c.starts_with("btrfs-lab reclaim "))
    })
}

/// The room findings, unranked.
pub(crate) fn findings(f: &RoomFacts<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(data_nearly_full(f));
    let (metadata, tight) = match f.metadata_profile {
        Some(p) => metadata(f, p),
        None => (None, false),
    };
    // The metadata finding's command makes room: not a second one.
    let metadata_command = metadata.as_ref().is_some_and(|x| x.command.is_some());
    out.extend(metadata);
    out.extend(reserve_in_use(f, tight, metadata_command));
    out
}

/// Data against what it can grow to.
fn data_nearly_full(f: &RoomFacts<'_>) -> Option<Finding> {
    let p = f.data_profile?;
    {
        let (alloc, used) = f.data;
        let grow = alloc::growth(p, f.unalloc);
        let fill = ratio(used, alloc + grow);
        if alloc + grow > 0
            && let Some(severity) = rules::capacity_full(false, fill)
        {
            return Some(
                Finding::new(
                    Code::DataNearlyFull,
                    format!("data is {} full", pct(fill)),
                    "new writes fail with ENOSPC when data is full; delete files (and snapshots holding them) or add a device (a balance cannot help: free space in data chunks is already usable)",
                )
                .with_evidence("data used", size(used))
                .with_evidence("data allocated", size(alloc))
                .with_evidence(&format!("room for new {p} chunks"), size(grow))
                .with_severity(severity)
                .with_command(display_argv(&[
                    "btrfs-lab",
                    "device",
                    "add",
                    f.mount,
                    "NEW_DEVICE",
                ])),
            );
        }
    }
    None
}

/// Metadata: a full-size chunk, smaller ones, what it can grow to. With
/// whether metadata is tight (the global reserve's severity depends on it).
fn metadata(f: &RoomFacts<'_>, p: Profile) -> (Option<Finding>, bool) {
    let (reserve_used, reserve_total) = f.reserve.unwrap_or((0, 0));
    let mut tight = false;
    let mut found = None;
    {
        let (alloc, used) = f.metadata;
        let grow = alloc::growth(p, f.unalloc);
        let need_bytes = used + reserve_total;
        let fill = ratio(need_bytes, alloc + grow);
        let alloc_fill = ratio(need_bytes, alloc);
        let chunk = if f.metadata_chunk_bytes > 0 {
            f.metadata_chunk_bytes
        } else {
            alloc::chunk_limits(ChunkKind::Metadata, f.devices_bytes, f.kernel).max_chunk
        }
        .max(1 << 20);
        let (need, have, per) = alloc::chunk_room(p, chunk, f.unalloc);
        let list = f
            .unalloc
            .iter()
            .map(|&u| size(u))
            .collect::<Vec<_>>()
            .join(", ");
        let mut finding = if have < need {
            let severity = rules::metadata_no_room(fill, reserve_used, reserve_total);
            let why = if severity == Severity::Info {
                if grow >= 1 << 20 {
                    format!(
                        "the kernel allocates a smaller chunk when less than a full one is free (about {} more metadata here), and {} of the allocated metadata is free: nothing to do now (a filesystem whose data took every byte, as one filled with large files, looks like this)",
                        size(grow),
                        pct(1.0 - alloc_fill.min(1.0))
                    )
                } else {
                    format!(
                        "metadata cannot grow, but {} of its allocated space is free: nothing to do now (a filesystem whose data took every byte, as one filled with large files, looks like this); it matters from {} used",
                        pct(1.0 - alloc_fill.min(1.0)),
                        pct(rules::NO_ROOM_WARNING_FILL)
                    )
                }
            } else {
                format!(
                    "metadata is {} used of what it can grow to ({} allocated{}): when it is full every write (even a delete) fails with ENOSPC; freeing data chunks or adding a device makes room",
                    pct(fill),
                    size(alloc),
                    if grow > 0 {
                        format!(", about {} more in smaller chunks", size(grow))
                    } else {
                        String::new()
                    }
                )
            };
            Some(
                Finding::new(
                    Code::MetadataChunkNoRoom,
                    format!(
                        "no room for a full {p} metadata chunk: it needs {need} device(s) with {} unallocated, {have} have it",
                        size(per)
                    ),
                    why,
                )
                .with_severity(severity)
                .with_evidence("room for smaller metadata chunks", size(grow)),
            )
        } else if let Some(severity) = rules::capacity_full(true, fill) {
            Some(
                Finding::new(
                    Code::MetadataNearlyFull,
                    format!("metadata is {} full", pct(fill)),
                    "when metadata is full every change fails with ENOSPC, even deleting files; make room now",
                )
                .with_severity(severity)
                .with_evidence(&format!("room for new {p} chunks"), size(grow)),
            )
        } else if alloc_fill * 100.0 >= rules::METADATA_FULL_PERCENT {
            Some(
                Finding::new(
                    Code::MetadataNearlyFull,
                    format!(
                        "metadata chunks are {} used; there is room for new ones",
                        pct(alloc_fill)
                    ),
                    "full metadata chunks are normal while the kernel can allocate new ones",
                )
                .with_severity(rules::metadata_allocated_full(rules::MetadataRoom::Fits))
                .with_evidence(&format!("room for new {p} chunks"), size(grow)),
            )
        } else {
            None
        };
        if let Some(x) = finding.take() {
            let mut x = x
                .with_evidence("metadata profile", p.name())
                .with_evidence(
                    "metadata used",
                    format!(
                        "{} of {} allocated ({})",
                        size(used),
                        size(alloc),
                        pct(ratio(used, alloc))
                    ),
                )
                .with_evidence(
                    "with the global reserve",
                    format!(
                        "{} of {} metadata can grow to ({})",
                        size(need_bytes),
                        size(alloc + grow),
                        pct(fill)
                    ),
                )
                .with_evidence("unallocated per device", list);
            tight = x.severity != Severity::Info;
            if tight {
                let (command, evidence) = make_room(f, need as u64 * per);
                for (n, v) in evidence {
                    x = x.with_evidence(&n, v);
                }
                x = x.with_command(command);
            }
            found = Some(x);
        }
        tight |= fill >= rules::FULL_WARNING;
    }
    (found, tight)
}

/// The global reserve in use.
fn reserve_in_use(f: &RoomFacts<'_>, tight: bool, metadata_command: bool) -> Option<Finding> {
    let (reserve_used, reserve_total) = f.reserve.unwrap_or((0, 0));
    if reserve_used > 0 {
        let severity = rules::global_reserve_used(reserve_used, reserve_total, tight);
        let mut x = Finding::new(
            Code::GlobalReserveUsed,
            format!(
                "the global reserve is in use: {} of {}",
                size(reserve_used),
                size(reserve_total)
            ),
            if severity == Severity::Info {
                "a few KiB of the emergency metadata reserve taken during a commit (a scrub, a balance, a burst of writes) are normal; it is given back when the transaction ends"
            } else {
                "btrfs takes from its emergency reserve when ordinary metadata space runs out; when it is gone, every write fails with ENOSPC"
            },
        )
        .with_evidence("global reserve used", size(reserve_used))
        .with_evidence("global reserve size", size(reserve_total))
        .with_severity(severity);
        if severity != Severity::Info && !metadata_command {
            let (command, evidence) = make_room(f, reserve_total.max(1 << 20));
            for (n, v) in evidence {
                x = x.with_evidence(&n, v);
            }
            x = x.with_command(command);
        }
        return Some(x);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;
    const K: KernelVersion = KernelVersion::new(6, 18);

    fn facts<'a>(unalloc: &'a [u64], data: (u64, u64), meta: (u64, u64)) -> RoomFacts<'a> {
        RoomFacts {
            mount: "/mnt",
            data_profile: Some(Profile::Raid1),
            metadata_profile: Some(Profile::Raid1),
            data,
            metadata: meta,
            reserve: Some((0, 5 * M + M / 2)),
            unalloc,
            devices_bytes: 2 * G,
            metadata_chunk_bytes: 0,
            kernel: K,
            data_chunks: None,
        }
    }

    fn codes(v: &[Finding]) -> Vec<(&str, Severity)> {
        v.iter().map(|f| (f.code.as_str(), f.severity)).collect()
    }

    #[test]
    fn a_healthy_raid1_whose_data_took_the_space_is_info() {
        // The case: 2 × 1 GiB RAID1, one 600 MiB file, scrubbed:
        // data 600 of 892 MiB, metadata 800 KiB of 102 MiB, 16 KiB of the
        // reserve in use, about 2 MiB unallocated per device.
        let un = [2 * M, 2 * M];
        let mut f = facts(&un, (892 * M, 600 * M), (102 * M, 800 << 10));
        f.reserve = Some((16 << 10, 5 * M + M / 2));
        let v = findings(&f);
        assert!(
            v.iter().all(|x| x.severity == Severity::Info),
            "{:?}",
            codes(&v)
        );
        assert!(v.iter().all(|x| x.command.is_none()), "{v:?}");
    }

    #[test]
    fn full_data_chunks_and_nearly_empty_metadata_do_not_warn() {
        // A RAID0 filled with large files: data chunks took everything.
        let un = [0, 0, 0];
        let mut f = facts(&un, (3 * G - 300 * M, 3 * G - 301 * M), (256 * M, 3 * M));
        f.data_profile = Some(Profile::Raid0);
        f.devices_bytes = 3 * G;
        let v = findings(&f);
        let c = codes(&v);
        assert!(
            c.contains(&("metadata-chunk-no-room", Severity::Info)),
            "{c:?}"
        );
        assert!(
            c.contains(&("data-nearly-full", Severity::Critical)),
            "{c:?}"
        );
        let data = v.iter().find(|x| x.code == Code::DataNearlyFull).unwrap();
        assert_eq!(
            data.command.as_deref(),
            Some("btrfs-lab device add /mnt NEW_DEVICE"),
            "a full filesystem needs room, not a usage report"
        );
    }

    #[test]
    fn starved_metadata_is_critical_and_names_the_balance_that_frees_a_chunk() {
        let un = [0, 0];
        let mut f = facts(&un, (1600 * M, 900 * M), (200 * M, 190 * M));
        let g = 256 * M;
        let chunks: Vec<ChunkUse> = [0.9, 0.9, 0.1, 0.95, 0.5, 0.2, 0.9]
            .iter()
            .map(|&u| ChunkUse {
                length: g,
                used: (g as f64 * u) as u64,
            })
            .collect();
        f.data_chunks = Some(&chunks);
        let v = findings(&f);
        let x = v
            .iter()
            .find(|x| x.code == Code::MetadataChunkNoRoom)
            .unwrap();
        assert_eq!(x.severity, Severity::Critical);
        // A full RAID1 metadata chunk (10% of 2 GiB: 204.8 MiB) on each of
        // two devices: relocating the 10% and 20% chunks moves 77 MiB into
        // one new chunk and frees at least 256 MiB of data chunks;
        // -dusage=15 would move the 10% one only, into a chunk of its own.
        assert_eq!(
            x.command.as_deref(),
            Some("btrfs-lab reclaim /mnt --max-usage 30"),
            "{x:?}"
        );
        // The reserve finding does not repeat the command.
        f.reserve = Some((2 * M, 5 * M + M / 2));
        let v = findings(&f);
        let r = v
            .iter()
            .find(|x| x.code == Code::GlobalReserveUsed)
            .unwrap();
        assert_eq!(r.severity, Severity::Warning, "2 MiB is over a quarter");
        assert!(r.command.is_none());
    }

    #[test]
    fn full_data_chunks_cannot_make_room_for_metadata() {
        let un = [0, 0];
        let mut f = facts(&un, (1600 * M, 1599 * M), (200 * M, 190 * M));
        let chunks = vec![
            ChunkUse {
                length: 256 * M,
                used: 256 * M - (100 << 10)
            };
            6
        ];
        f.data_chunks = Some(&chunks);
        let v = findings(&f);
        let x = v
            .iter()
            .find(|x| x.code == Code::MetadataChunkNoRoom)
            .unwrap();
        assert_eq!(
            x.command.as_deref(),
            Some("btrfs-lab device add /mnt NEW_DEVICE")
        );
        // A paste (no chunk usage): the same from the totals.
        f.data_chunks = None;
        let v = findings(&f);
        let x = v
            .iter()
            .find(|x| x.code == Code::MetadataChunkNoRoom)
            .unwrap();
        assert_eq!(
            x.command.as_deref(),
            Some("btrfs-lab device add /mnt NEW_DEVICE")
        );
    }

    #[test]
    fn smaller_chunks_count_as_room() {
        // 100 MiB per device: no full 208 MiB chunk, but the kernel makes a
        // 100 MiB one; metadata 60% of its chunks is then 30% of what it
        // can grow to.
        let un = [100 * M, 100 * M];
        let f = facts(&un, (1500 * M, 1400 * M), (100 * M, 55 * M));
        let v = findings(&f);
        let x = v
            .iter()
            .find(|x| x.code == Code::MetadataChunkNoRoom)
            .unwrap();
        assert_eq!(x.severity, Severity::Info, "{x:?}");
        assert!(x.why.contains("smaller chunk"), "{}", x.why);
    }
}
