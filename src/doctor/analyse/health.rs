//! Health: the scrub record and the running kernel against the features
//! in use.

use crate::model::finding::{Code, Finding, rules};
use crate::model::kernel::KernelVersion;
use crate::model::profile::Profile;

use super::{Cx, cmd};
use crate::doctor::facts::SettingLeft;

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
    // The last complete scrub: every device read to its end (an
    // interrupted one is its own finding).
    let scrubbed = f.scrub.iter().filter(|s| s.started > 0);
    let complete = !f.scrub.is_empty() && f.scrub.iter().all(|s| s.finished);
    let last = scrubbed
        .clone()
        .map(|s| s.started + s.duration)
        .max()
        .filter(|_| complete);
    let ever = scrubbed.clone().next().is_some();
    let uncorrectable: u64 = f.scrub.iter().map(|s| s.uncorrectable).sum();
    let corrected: u64 = f.scrub.iter().map(|s| s.corrected).sum();
    let found: u64 = f.scrub.iter().map(|s| s.errors_found).sum();
    let ours = f.scrub.iter().any(|s| s.by_btrfs_lab);
    // btrfs-lab scrub follows the run (progress, rate, ETA), holds off
    // suspend and resumes after an interruption.
    // What keeps scrubs coming: the timer where systemd runs (enabled, or
    // started now when it is and the scrub is still due), else a scrub of
    // this filesystem.
    let schedule = match f.scrub_timer {
        Some(false) => format!("systemctl enable --now {}", crate::scrub::all::TIMER),
        Some(true) => format!("systemctl start {}", crate::scrub::all::SERVICE),
        None => cmd(&["btrfs-lab", "scrub"], &cx.m),
    };
    match last {
        None if ever => {}
        None => out.push(
            Finding::new(
                Code::ScrubNeverRun,
                "no scrub on record",
                "a scrub reads every copy and checks it against its checksum: it finds silent corruption while a good copy still exists",
            )
            .with_command(schedule.clone()),
        ),
        Some(t) if now.saturating_sub(t) > rules::SCRUB_MAX_AGE => out.push(
            Finding::new(
                Code::ScrubOld,
                format!(
                    "the last complete scrub ended {} days ago",
                    now.saturating_sub(t) / 86_400
                ),
                "corruption found late may have spread to the other copy, or to backups; btrfs-lab-scrub.timer scrubs each filesystem once every 30 days",
            )
            .with_evidence("last complete scrub ended", format!("{t} (seconds since the epoch)"))
            .with_evidence("recorded by", if ours { "btrfs-lab scrub" } else { "btrfs-progs" })
            .with_command(schedule.clone()),
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

    settings(cx, out);

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

/// Who set a setting, in words (`a btrfs-lab scrub (pid 12) that was
/// killed`).
fn by(b: &SettingLeft) -> String {
    format!(
        "a btrfs-lab {} (pid {}){}",
        b.command,
        b.pid,
        if b.running {
            ", running now"
        } else {
            " that was killed"
        }
    )
}

/// Kernel settings that differ from the kernel's defaults: a device's scrub
/// speed limit (with or without btrfs-lab's record of it), and huge pages
/// a btrfs-lab bench reserved (its record).
fn settings(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let f = cx.f;
    for d in &cx.present {
        let Some(limit) = d.scrub_speed_max.filter(|v| *v > 0) else {
            continue;
        };
        let file = format!(
            "/sys/fs/btrfs/{}/devinfo/{}/scrub_speed_max",
            f.uuid, d.devid
        );
        let left = d.scrub_speed_max_by.as_ref();
        let why = match left {
            Some(b) if b.running => format!(
                "{} set it for its run; it is put back to {} when the run ends",
                by(b),
                b.before
            ),
            Some(b) => format!(
                "{} set it and it was not put back: every scrub of this device runs throttled (the next btrfs-lab command run as root puts it back)",
                by(b)
            ),
            None => "set by hand or by another tool; it lasts until the filesystem is unmounted, and every scrub of this device (btrfs scrub too) runs at most this fast".to_owned(),
        };
        let mut fi = Finding::new(
            Code::ScrubSpeedLimited,
            format!(
                "device {} ({}) scrubs at most {}/s (scrub_speed_max)",
                d.devid,
                d.path,
                super::size(limit)
            ),
            why,
        )
        .with_severity(rules::scrub_speed_limited(left.is_some_and(|b| !b.running)))
        .with_evidence("scrub_speed_max", format!("{limit} bytes per second"))
        .with_evidence(
            "set by",
            left.map_or_else(|| "not btrfs-lab (no record)".to_owned(), by),
        );
        if !left.is_some_and(|b| b.running) {
            let back = left.map_or(0, |b| b.before);
            fi = fi.with_command(format!("echo {back} > {file}"));
        }
        out.push(fi);
    }
    if let Some((b, now)) = &f.hugepages_left {
        out.push(
            Finding::new(
                Code::HugepagesLeft,
                format!(
                    "vm.nr_hugepages is {now}, raised from {} by {}",
                    b.before,
                    by(b)
                ),
                if b.running {
                    "the bench reserved huge pages for its buffers and gives them back when it ends; until then that memory is not available to anything else"
                } else {
                    "the bench was killed before it gave the huge pages back: that memory stays reserved (unusable for anything else) until vm.nr_hugepages is put back"
                },
            )
            .with_severity(rules::hugepages_left(!b.running))
            .with_evidence("vm.nr_hugepages before", b.before.to_string())
            .with_evidence("set by the bench", b.set.to_string())
            .with_evidence("now", now.to_string())
            .with_command(format!("sysctl vm.nr_hugepages={}", b.before)),
        );
    }
}
