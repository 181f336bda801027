//! Devices: missing members, a degraded mount, error counters.

use crate::doctor::facts::DeviceFacts;
use crate::model::finding::{Code, Finding};

use super::{Cx, cmd};

/// The device findings. `now` is seconds since the epoch.
pub(super) fn findings(cx: &Cx<'_>, now: u64, out: &mut Vec<Finding>) {
    let f = cx.f;
    let m = &cx.m;
    // Missing devices, degraded mount.
    let missing = cx.missing;
    if missing > 0 {
        let devids: Vec<u64> = f
            .devices
            .iter()
            .filter(|d| d.missing)
            .map(|d| d.devid)
            .collect();
        out.push(crate::model::finding::device_missing(
            missing as u32,
            &devids,
            f.total_devices,
            &cx.data,
            &cx.meta,
            m,
        ));
    }
    if f.mount_options.split(',').any(|o| o == "degraded") {
        out.push(
            Finding::new(
                Code::MountDegraded,
                "mounted with -o degraded",
                "a degraded mount writes new chunks without their usual redundancy (single) and hides a missing device; repair the array, then remount without `degraded`",
            )
            .with_evidence("mount options", f.mount_options.clone())
            .with_command(cmd(&["btrfs", "filesystem", "show"], &cx.m)),
        );
    }

    // Device error counters.
    for d in &f.devices {
        let Some(e) = d.errors else { continue };
        let invalid = e.invalid_kinds();
        if !invalid.is_empty() {
            out.push(
                Finding::new(
                    Code::DeviceStatsInvalid,
                    format!(
                        "device {} ({}): its {} counter{} 18446744073709551615, not a count",
                        d.devid,
                        d.path,
                        invalid.join(" and "),
                        if invalid.len() == 1 { " reads" } else { "s read" }
                    ),
                    "UINT64_MAX is no number of errors a device reaches: the counter item on disk is damaged or was written wrongly; it is left out of the error counts and the metrics; scrub to learn whether there are real errors, then reset the counters",
                )
                .with_evidence("invalid counters", invalid.join(", "))
                .with_command(format!(
                    "{}  (then {})",
                    cmd(&["btrfs-lab", "scrub"], &cx.m),
                    cmd(&["btrfs", "device", "stats", "-z"], m)
                )),
            );
        }
        if e.total() == 0 {
            continue;
        }
        let damaging = e.sum_of(&["read", "write", "corruption", "generation"]);
        let unrepairable = damaging > 0 && !cx.without_redundancy.is_empty();
        let repaired = repaired_by_scrub(f, d.devid, now);
        let mut fi = if repaired.is_some() {
            // The advice (scrub) was followed: what is left is the reset.
            Finding::new(
                Code::DeviceErrorsRepaired,
                format!(
                    "device {} ({}) has errors, repaired: reset the counters",
                    d.devid, d.path
                ),
                "the last scrub read every copy on this device and left nothing unrepaired: the errors counted were repaired by it, or before it by reads that found a good copy (read-repair); the counters only grow, so reset them for a new error to stand out; errors that come back point at the drive or its cabling",
            )
            .with_command(format!(
                "{}  (if errors come back: {})",
                cmd(&["btrfs", "device", "stats", "-z"], m),
                smartctl(d)
            ))
        } else if unrepairable {
            Finding::new(
                Code::DeviceErrorsNoRedundancy,
                format!(
                    "device {} ({}) has errors on a filesystem with {} chunks",
                    d.devid,
                    d.path,
                    cx.without_redundancy
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join("/")
                ),
                "a block in a chunk without redundancy has no good copy: scrub cannot repair it; the files it names in the kernel log are damaged and must be restored from a backup, and the drive checked",
            )
            .with_command(format!(
                "{}  (it names the damaged files; {} once dealt with)",
                cmd(&["btrfs-lab", "scrub"], &cx.m),
                cmd(&["btrfs", "device", "stats", "-z"], m)
            ))
        } else {
            Finding::new(
                Code::DeviceErrors,
                format!("device {} ({}) has errors", d.devid, d.path),
                "the counters only grow: a drive, cable or controller problem, or silent corruption; on a redundant profile scrub repairs bad copies from the good ones",
            )
            .with_command(format!(
                "{}  (then {}; check the {}: {})",
                cmd(&["btrfs-lab", "scrub"], &cx.m),
                cmd(&["btrfs", "device", "stats", "-z"], m),
                if d.drives.len() > 1 { "drives" } else { "drive" },
                smartctl(d)
            ))
        };
        for (kind, n) in e.valid_kinds() {
            if n > 0 {
                fi = fi.with_evidence(&format!("{kind} errors"), n.to_string());
            }
        }
        if let Some(s) = repaired {
            let sum = |n: fn(&crate::doctor::scrub::ScrubDevice) -> u64| {
                f.scrub.iter().map(n).sum::<u64>().to_string()
            };
            fi = fi
                .with_evidence(
                    "last scrub ended",
                    crate::report::envelope::rfc3339_seconds(s.started + s.duration),
                )
                .with_evidence("scrub errors found", sum(|s| s.errors_found))
                .with_evidence("scrub errors corrected", sum(|s| s.corrected));
        }
        out.push(fi);
    }
}

/// The last scrub's record of device `devid` when it shows the errors
/// counted so far are repaired: that scrub ran to its end on the device,
/// ended at most 31 days ago (older, errors since are likelier than not),
/// and left nothing unrepaired on any device (no uncorrectable error, and
/// no error found by a read-only scrub, which repairs nothing). The
/// counters have no dates: errors counted after it are not told apart, so
/// the finding asks for the reset that makes new ones stand out.
fn repaired_by_scrub(
    f: &crate::doctor::facts::FsFacts,
    devid: u64,
    now: u64,
) -> Option<&crate::doctor::scrub::ScrubDevice> {
    let s = f
        .scrub
        .iter()
        .find(|s| s.devid == devid && s.started > 0 && s.finished && !s.canceled)?;
    let recent =
        now.saturating_sub(s.started + s.duration) <= crate::model::finding::rules::SCRUB_MAX_AGE;
    let clean = f
        .scrub
        .iter()
        .all(|s| s.uncorrectable == 0 && !(s.readonly && s.errors_found > 0));
    (recent && clean).then_some(s)
}

/// `smartctl -a` on the drives behind `d` (the disk behind a loop device,
/// the controller of an NVMe namespace), or on `d` itself when they are not
/// known.
fn smartctl(d: &DeviceFacts) -> String {
    let drives: Vec<&str> = if d.drives.is_empty() {
        vec![d.path.as_str()]
    } else {
        d.drives.iter().map(String::as_str).collect()
    };
    drives
        .iter()
        .map(|p| crate::sys::tools::display_argv(&["smartctl", "-a", p]))
        .collect::<Vec<_>>()
        .join("; ")
}
