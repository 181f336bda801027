//! Space: room for a new metadata chunk, fullness against what data and
//! metadata can grow to, the global reserve.

use crate::model::finding::{Code, Finding, rules};
use crate::model::profile::Profile;
use crate::model::space::BgType;

use super::{Cx, cmd, pct, size};
use crate::doctor::facts::FsFacts;

/// The profile the kernel gives new chunks of a type: a convert target
/// when a balance exists, else the most redundant profile in use (as
/// `btrfs_reduce_alloc_profile`).
pub(crate) fn alloc_profile(f: &FsFacts, kind: BgType) -> Option<Profile> {
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
/// of the devices (an estimate, as `btrfs filesystem usage` makes), from the
/// profile's geometry (`model::profile`).
pub(crate) fn growth(p: Profile, unalloc: &[u64]) -> u64 {
    let g = p.geometry();
    let sum: u64 = unalloc.iter().sum();
    if p.is_parity() {
        let n = unalloc.iter().filter(|&&u| u >= 1 << 20).count() as u64;
        if n < u64::from(p.min_devices()) {
            return 0;
        }
        return sum / n * (n - u64::from(g.nparity));
    }
    if g.dev_stripes > 1 {
        return unalloc.iter().map(|u| u / u64::from(g.dev_stripes)).sum();
    }
    if g.ncopies > 1 {
        return mirrored(unalloc, g.ncopies as usize);
    }
    sum
}

/// Devices (and bytes on each) a full-size chunk of `p` of `chunk` logical
/// bytes needs, given the devices' unallocated bytes: `(needed, have)`.
pub(crate) fn chunk_room(p: Profile, chunk: u64, unalloc: &[u64]) -> (usize, usize, u64) {
    let g = p.geometry();
    let count = |need: u64| unalloc.iter().filter(|&&u| u >= need).count();
    if g.devs_max != 0 {
        // A fixed number of stripes (single, DUP, RAID1*): each a whole
        // copy of the chunk, DUP's two on one device.
        let per = chunk * u64::from(g.dev_stripes);
        return (p.min_devices() as usize, count(per), per);
    }
    // Striped over every device with room (RAID0/10/5/6).
    let n = count(1 << 20).max(1) as u32;
    let per = chunk.div_ceil(u64::from(p.data_stripes(n)));
    (p.min_devices() as usize, count(per), per)
}

/// The space findings.
pub(super) fn findings(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let f = cx.f;
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
    let mut check: Vec<Profile> = cx.meta.clone();
    if let Some(t) = f.balance.and_then(|b| b.metadata_target)
        && !check.contains(&t)
    {
        check.push(t);
    }
    if !f.profiles(BgType::DataMetadata).is_empty() {
        check.clear(); // mixed block groups: the data+metadata fullness covers it
    }
    for p in check {
        let (need, have, per) = chunk_room(p, f.metadata_chunk_bytes, &cx.unalloc);
        if have >= need {
            continue;
        }
        let severity = rules::metadata_no_room(meta_fill, gr.is_some_and(|g| g.used_bytes > 0));
        out.push(
            Finding::new(
                Code::MetadataChunkNoRoom,
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
                cx.present
                    .iter()
                    .map(|d| format!("devid {} {}", d.devid, size(d.unallocated_bytes())))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
            .with_evidence("metadata used (with global reserve)", pct(meta_fill))
            .with_severity(severity)
            .with_command(cmd(&["btrfs", "balance", "start", "-dusage=10"], &cx.m)),
        );
    }

    // Fullness of data and metadata against what they can grow to.
    for (kind, code) in [
        (BgType::Data, Code::DataNearlyFull),
        (BgType::Metadata, Code::MetadataNearlyFull),
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
        let capacity = total + growth(p, &cx.unalloc);
        if capacity == 0 {
            continue;
        }
        let fill = (used + reserve) as f64 / capacity as f64;
        let Some(severity) = rules::capacity_full(kind == BgType::Metadata, fill) else {
            continue;
        };
        let name = kind.json_name();
        out.push(
            Finding::new(
                code,
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
            .with_severity(severity)
            .with_command(cmd(&["btrfs", "filesystem", "usage"], &cx.m)),
        );
    }

    if let Some(g) = gr
        && g.used_bytes > 0
    {
        let tight = meta_fill >= rules::FULL_WARNING
            || out.iter().any(|x| x.code == Code::MetadataChunkNoRoom);
        out.push(
            Finding::new(
                Code::GlobalReserveUsed,
                format!(
                    "the global reserve is in use: {} of {}",
                    size(g.used_bytes),
                    size(g.total_bytes)
                ),
                "btrfs takes from its emergency reserve only when metadata ran out; the next step is ENOSPC on every write",
            )
            .with_evidence("global reserve used", size(g.used_bytes))
            .with_evidence("global reserve size", size(g.total_bytes))
            .with_severity(rules::global_reserve_used(g.used_bytes, g.total_bytes, tight))
            .with_command(cmd(&["btrfs", "balance", "start", "-dusage=10"], &cx.m)),
        );
    }
}
