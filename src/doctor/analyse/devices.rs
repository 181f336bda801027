//! Devices: missing members, a degraded mount, error counters.

use crate::doctor::facts::DeviceFacts;
use crate::model::finding::{Code, Finding};
use crate::model::kernel::{self, KernelVersion};

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

    // Read-only under a read-write mount: the kernel made the superblock
    // read-only after an error (an aborted transaction; on 7.1 and later
    // also a shutdown after a member's surprise removal). mountinfo's
    // per-mount options say rw, the superblock's ro.
    let opts: Vec<&str> = f.mount_options.split(',').collect();
    if opts.contains(&"rw") && opts.contains(&"ro") {
        out.push(
            Finding::new(
                Code::ForcedReadonly,
                "forced read-only after an error: every write fails",
                "the kernel stopped writing to protect what is on disk (an aborted transaction, damaged metadata, a member lost with no copy left); the kernel log says why; copy out what matters before anything else, then unmount; do not remount it read-write before the cause is found",
            )
            .with_evidence("mount options", f.mount_options.clone())
            .with_command(format!(
                "{}  (it names the cause: errno, device, the damaged tree)",
                crate::sys::tools::display_argv(&["journalctl", "-k", "-g", "BTRFS"])
            )),
        );
    }
    member_states(cx, now, out);

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

/// Members that vanished, came back stale or returned (the states of
/// [`crate::doctor::members`]), and error counters rising since the last
/// look: what each means for this array's profiles and what to do.
fn member_states(cx: &Cx<'_>, now: u64, out: &mut Vec<Finding>) {
    use crate::doctor::members::MemberState;
    use crate::sys::tools::display_argv;
    let f = cx.f;
    let m = cx.m.as_str();
    let lossy = cx
        .data
        .iter()
        .chain(&cx.meta)
        .any(|p| p.geometry().tolerated_failures == 0);
    let since = |d: &DeviceFacts| {
        d.state_since
            .map(crate::report::envelope::rfc3339_seconds)
            .unwrap_or_default()
    };
    let resync = |d: &DeviceFacts| {
        display_argv(&["btrfs-lab", "scrub", m, "--device", &d.devid.to_string()])
    };
    let profiles = |fi: Finding| {
        let mut fi = fi;
        for (kind, list) in [("data", &cx.data), ("metadata", &cx.meta)] {
            for p in list.iter() {
                fi = fi.with_evidence(&format!("{kind} {}", p.name()), p.loss_when_missing(1));
            }
        }
        fi
    };
    for d in &f.devices {
        match d.state {
            MemberState::Vanished => {
                let why = if lossy {
                    "the kernel notices only when it next writes to it; a profile in use has no other copy of what it held: stop writing, unmount, mount the others read-only (mount -o degraded,ro) and copy out what is intact with btrfs-lab rescue; put the drive back (reseat it, check its link) before anything else"
                } else {
                    "the kernel notices only when it next writes to it; every byte still has a copy on the others, but what is written from now on has none: put the drive back (reseat it, check its link) and scrub it, or replace it; never put degraded in fstab"
                };
                let fi = Finding::new(
                    Code::DeviceVanished,
                    format!(
                        "device {} ({}) is gone: the kernel still counts it a member",
                        d.devid, d.path
                    ),
                    why,
                )
                .with_evidence("devid", d.devid.to_string())
                .with_evidence("block device", format!("{} (no longer there)", d.path))
                .with_evidence("seen gone since", since(d));
                out.push(profiles(fi).with_command(if lossy {
                    display_argv(&["btrfs-lab", "rescue", m, "--copy-to", "DIR"])
                } else {
                    format!(
                        "{}  (or, once it is back: {})",
                        display_argv(&[
                            "btrfs-lab",
                            "device",
                            "replace",
                            m,
                            &d.devid.to_string(),
                            "NEW"
                        ]),
                        resync(d)
                    )
                }));
            }
            MemberState::Stale | MemberState::Returned => {
                let stale = d.state == MemberState::Stale;
                let title = if stale {
                    format!(
                        "device {} ({}) is {} transactions behind the filesystem: it missed writes",
                        d.devid,
                        d.path,
                        f.generation
                            .zip(d.generation)
                            .map_or(0, |(fs, g)| fs.saturating_sub(g))
                    )
                } else {
                    format!(
                        "device {} ({}) is back after it was gone, and not resynced",
                        d.devid, d.path
                    )
                };
                let why = if lossy {
                    "it was away while the others were written: checksummed blocks it holds in old versions are caught and repaired from another copy where the profile keeps one; a profile without copies (single, RAID0) has none: scrub it to learn what is damaged, and never mount it alone or with -o degraded"
                } else {
                    "it was away while the others were written: its copies of those blocks are old until a scrub of it rewrites them from the good ones; reads that land on it are repaired when checksummed, but NOCOW files have no checksums and may read the old copy; never mount it alone or with -o degraded"
                };
                let mut fi = Finding::new(
                    if stale {
                        Code::DeviceStale
                    } else {
                        Code::DeviceReturned
                    },
                    title,
                    why,
                )
                .with_evidence("devid", d.devid.to_string());
                if let (Some(g), Some(fs)) = (d.generation, f.generation) {
                    fi = fi
                        .with_evidence("its superblock's generation", g.to_string())
                        .with_evidence("the filesystem's generation", fs.to_string());
                }
                fi = fi.with_evidence(
                    if stale {
                        "seen stale since"
                    } else {
                        "back since"
                    },
                    since(d),
                );
                out.push(fi.with_command(resync(d)));
            }
            MemberState::Present | MemberState::Missing => {}
        }
        let rising = crate::doctor::members::rising(d.errors, d.errors_before);
        if rising.is_empty() {
            continue;
        }
        let Some(last) = &f.last_look else { continue };
        // Counted by a scrub since the last look that repaired everything
        // (the resync of a member that came back): device-errors-repaired
        // says what is left to do.
        if repaired_by_scrub(f, d.devid, now).is_some_and(|s| s.started + s.duration >= last.at) {
            continue;
        }
        let then = KernelVersion::parse(&last.kernel);
        let running = KernelVersion::parse(&f.kernel);
        let across = matches!((then, running), (Some(b), Some(n)) if b < kernel::COUNTS_EVERY_BIO_ERROR && n >= kernel::COUNTS_EVERY_BIO_ERROR);
        let mut fi = Finding::new(
            Code::DeviceErrorsRising,
            format!(
                "device {} ({}): errors rose since the last look ({})",
                d.devid,
                d.path,
                rising
                    .iter()
                    .map(|(k, n)| format!("{k} +{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            if across {
                "the kernel changed since the last look, from one older than 7.1 to 7.1 or later, which counts every failed bio in these counters (fc3d53288158): a jump across the upgrade is the new counting; errors that keep rising are not: scrub, and check the drive"
            } else {
                "new errors since the last look: the drive, its cable or controller is failing now, or a member went away; scrub to repair from the good copies, and check the drive"
            },
        )
        .with_severity(crate::model::finding::rules::errors_rising(across))
        .with_evidence("devid", d.devid.to_string())
        .with_evidence(
            "last look",
            crate::report::envelope::rfc3339_seconds(last.at),
        )
        .with_evidence("kernel then", last.kernel.clone())
        .with_evidence("kernel now", f.kernel.clone());
        for (k, n) in &rising {
            fi = fi.with_evidence(&format!("{k} errors since"), format!("+{n}"));
        }
        out.push(fi.with_command(format!(
            "{}  (check the drive: {})",
            display_argv(&["btrfs-lab", "scrub", m]),
            smartctl(d)
        )));
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
