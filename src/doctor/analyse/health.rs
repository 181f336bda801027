//! Health: the scrub record and the running kernel against the features
//! in use.

use crate::model::finding::{Code, Finding, rules};
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;

use super::{Cx, cmd};

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

/// The scrub and kernel findings. `now` is seconds since the epoch.
pub(super) fn findings(cx: &Cx<'_>, now: u64, out: &mut Vec<Finding>) {
    let f = cx.f;
    // Scrub.
    let scrubbed = f.scrub.iter().filter(|s| s.started > 0);
    let last = scrubbed.clone().map(|s| s.started + s.duration).max();
    let uncorrectable: u64 = f.scrub.iter().map(|s| s.uncorrectable).sum();
    let corrected: u64 = f.scrub.iter().map(|s| s.corrected).sum();
    let found: u64 = f.scrub.iter().map(|s| s.errors_found).sum();
    let ours = f.scrub.iter().any(|s| s.by_btrfs_lab);
    // btrfs-lab scrub follows the run (progress, rate, ETA), holds off
    // suspend and resumes after an interruption.
    let start = cmd(&["btrfs-lab", "scrub"], &cx.m);
    match last {
        None => out.push(
            Finding::new(
                Code::ScrubNeverRun,
                "no scrub on record",
                "a scrub reads every copy and checks it against its checksum: it finds silent corruption while a good copy still exists",
            )
            .with_command(start.clone()),
        ),
        Some(t) if now.saturating_sub(t) > rules::SCRUB_MAX_AGE => out.push(
            Finding::new(
                Code::ScrubOld,
                format!("the last scrub ended {} days ago", now.saturating_sub(t) / 86_400),
                "corruption found late may have spread to the other copy, or to backups; scrub monthly (btrfs-progs ships btrfs-scrub@.timer)",
            )
            .with_evidence("last scrub ended", format!("{t} (seconds since the epoch)"))
            .with_evidence("recorded by", if ours { "btrfs-lab scrub" } else { "btrfs-progs" })
            .with_command(start.clone()),
        ),
        Some(_) => {}
    }
    if uncorrectable > 0 || found > 0 || corrected > 0 {
        let critical = uncorrectable > 0;
        out.push(
            Finding::new(
                Code::ScrubErrors,
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
            .with_evidence("recorded by", if ours { "btrfs-lab scrub" } else { "btrfs-progs" })
            .with_severity(rules::scrub_errors(uncorrectable))
            .with_command(if ours {
                cmd(&["btrfs-lab", "scrub", "--status"], &cx.m)
            } else {
                cmd(&["btrfs", "scrub", "status", "-d"], &cx.m)
            }),
        );
    }
    if f.scrub.iter().any(|s| s.canceled && !s.finished) {
        out.push(
            Finding::new(
                Code::ScrubInterrupted,
                "the last scrub was cancelled or interrupted",
                "part of the filesystem was not checked",
            )
            .with_command(if ours {
                cmd(&["btrfs-lab", "scrub", "--resume"], &cx.m)
            } else {
                cmd(&["btrfs", "scrub", "resume"], &cx.m)
            }),
        );
    }

    // Kernel.
    if let Some(k) = KernelVersion::parse(&f.kernel) {
        let raid56 = cx
            .all_profiles
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
                        Code::KernelTooOld,
                        format!("{feature} is in use on Linux {k}; {floor} or later is needed"),
                        why,
                    )
                    .with_evidence("kernel", k.to_string())
                    .with_evidence("feature", feature),
                );
            }
        }
    }
}
