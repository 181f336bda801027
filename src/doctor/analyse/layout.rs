//! Layout: balances and conversions, mixed profiles, redundancy of data and
//! metadata for the number of devices.

use crate::model::finding::{Code, Finding};
use crate::model::profile::Profile;
use crate::model::space::BgType;

use super::space::alloc_profile;
use super::{Cx, cmd, size};
use crate::doctor::widths::NarrowData;

/// The layout findings.
pub(super) fn findings(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let f = cx.f;
    // Conversions and balances.
    if let Some(b) = f.balance {
        let targets = crate::convert::Targets {
            data: b.data_target,
            metadata: b.metadata_target,
        }
        .in_words();
        let what = if targets.is_empty() {
            "a balance".to_owned()
        } else {
            format!("a conversion ({targets})")
        };
        let fi = if b.running {
            Finding::new(
                Code::BalanceRunning,
                format!("{what} is running"),
                "it relocates chunks; throughput is lower until it ends",
            )
            .with_command(cmd(&["btrfs-lab", "convert", "--status"], &cx.m))
        } else {
            Finding::new(
                Code::BalancePaused,
                format!("{what} is paused"),
                "until it finishes, part of the filesystem keeps the old profiles (and their redundancy); a paused balance resumes at the next mount unless skip_balance is given",
            )
            .with_command(cmd(&["btrfs-lab", "convert", "--resume"], &cx.m))
        };
        let mut fi = fi.with_evidence(
            "chunks relocated",
            format!("{} of {}", b.completed, b.expected),
        );
        // The profiles it leaves mixed are this situation: their figures
        // here, no second finding with another command.
        for (kind, target) in [
            (BgType::Data, b.data_target),
            (BgType::Metadata, b.metadata_target),
            (BgType::System, b.metadata_target),
        ] {
            if target.is_some() && f.profiles(kind).len() > 1 {
                for s in f.spaces.iter().filter(|s| s.bg_type == kind) {
                    fi = fi.with_evidence(
                        &format!("{} {}", kind.json_name(), s.profile),
                        format!("{} used of {}", size(s.used_bytes), size(s.total_bytes)),
                    );
                }
            }
        }
        out.push(fi);
    }
    // A type the balance converts is covered by its finding.
    let converting = |kind: BgType| {
        f.balance.is_some_and(|b| match kind {
            BgType::Data => b.data_target.is_some(),
            _ => b.metadata_target.is_some(),
        })
    };
    for (kind, profiles) in [
        (BgType::Data, &cx.data),
        (BgType::Metadata, &cx.meta),
        (BgType::System, &f.profiles(BgType::System)),
    ] {
        if profiles.len() < 2 || converting(kind) {
            continue;
        }
        let names: Vec<&str> = profiles.iter().map(|p| p.name()).collect();
        let mut fi = Finding::new(
            Code::MixedProfiles,
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
            cmd(&["btrfs-lab", "convert", "--status"], &cx.m)
        } else {
            cmd(&["btrfs-lab", "convert", flag, target.name()], &cx.m)
        }));
    }

    // Layout.
    let devices = cx.present.len() as u64 + cx.missing;
    if devices >= 2 {
        for p in cx
            .meta
            .iter()
            .filter(|p| matches!(p, Profile::Single | Profile::Dup))
        {
            let better = if devices >= 3 { "raid1c3" } else { "raid1" };
            out.push(
                Finding::new(
                    Code::MetadataOneDevice,
                    format!("metadata is {p} on a filesystem of {devices} devices"),
                    "each metadata chunk lives on one device: losing any one device loses the whole filesystem, not only the data on it",
                )
                .with_evidence("metadata profile", p.name())
                .with_evidence("devices", devices.to_string())
                .with_command(cmd(&["btrfs-lab", "convert", "--metadata", better], &cx.m)),
            );
        }
        for p in cx
            .data
            .iter()
            .filter(|p| matches!(p, Profile::Single | Profile::Raid0))
        {
            out.push(
                Finding::new(
                    Code::DataNoRedundancy,
                    format!("data is {p} over {devices} devices"),
                    "one copy of each block: a device failure loses the files with blocks on it, and scrub can detect but not repair corruption; fine for a scratch or cache array with backups",
                )
                .with_evidence("data profile", p.name()),
            );
        }
    }
    if let Some(n) = &f.narrow_data
        && f.balance.is_none()
    {
        out.push(narrow_chunks(n, &cx.m));
    }
    for p in cx
        .meta
        .iter()
        .filter(|p| matches!(p, Profile::Raid5 | Profile::Raid6))
    {
        out.push(
            Finding::new(
                Code::MetadataRaid56,
                format!("metadata is {p}"),
                "the btrfs developers advise against RAID5/6 for metadata (write hole, slow scrub and rebuild); use raid1 or raid1c3",
            )
            .with_evidence("metadata profile", p.name())
            .with_command(cmd(&["btrfs-lab", "convert", "--metadata", "raid1c3"], &cx.m)),
        );
    }
}

/// `data-narrow-chunks`: striped data in chunks narrower than the array.
pub(super) fn narrow_chunks(n: &NarrowData, mount: &str) -> Finding {
    let s = &n.spread;
    let (bytes, chunks) = n.narrow();
    let narrow = n.narrow_read_stripes();
    let full = n.full_read_stripes();
    let width = |w: f64| {
        if (w - w.round()).abs() < 0.05 {
            format!("{w:.0}")
        } else {
            format!("{w:.1}")
        }
    };
    let mut fi = Finding::new(
        Code::DataNarrowChunks,
        format!(
            "{} of {} data is read from {} devices, not {}",
            size(bytes),
            s.profile,
            width(narrow),
            full
        ),
        "a chunk is as wide as the devices that had room when it was allocated: data written before a device was added stays on the devices it had, and reads of it use those alone (new data is striped over every device); a balance of the narrow chunks restripes it",
    )
    .with_evidence(
        "data in narrow chunks",
        format!(
            "{} of {} used ({chunks} chunk{})",
            size(bytes),
            size(s.used_bytes),
            if chunks == 1 { "" } else { "s" }
        ),
    );
    for w in s.widths.iter().filter(|w| Some(w.stripes) < s.full_width) {
        fi = fi.with_evidence(
            &format!("chunks of {} stripes", w.stripes),
            format!("{} used in {}", size(w.used_bytes), w.chunks),
        );
    }
    fi = fi
        .with_evidence(
            "read width",
            format!("{} devices, {full} at full width", width(narrow)),
        )
        .with_evidence(
            &format!("all {} data", s.profile),
            format!("read from {} devices on average", width(s.read_stripes)),
        );
    let ratio = narrow / f64::from(full.max(1));
    fi = fi.with_evidence(
        "read ceiling",
        match n.full_ceiling_bytes_per_sec {
            Some(c) => format!(
                "one reader: {} at most, {} at full width",
                crate::report::rate::format_both(c as f64 * ratio),
                crate::report::rate::format_both(c as f64)
            ),
            None => format!(
                "{:.0}% of the full width's at most (no PCIe link figures)",
                ratio * 100.0
            ),
        },
    );
    if let Some(after) = n.read_stripes_after {
        fi = fi.with_evidence(
            "after the balance",
            format!("read from {} devices on average", width(after)),
        );
    }
    fi.with_command(cmd(&["btrfs-lab", "balance"], mount))
}
