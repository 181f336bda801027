//! Audits: the fstab entries of the filesystem, its mount options, and the
//! oldest kernel that can mount it. Each finding says what is wrong, the
//! line or option that shows it, and what to change.

use crate::model::finding::{Code, Finding};
use crate::model::kernel::{self, KernelVersion};

use super::Cx;

/// A kernel device name, as opposed to a stable link or a mapper name.
fn kernel_device_name(spec: &str) -> bool {
    spec.starts_with("/dev/")
        && !spec.starts_with("/dev/disk/")
        && !spec.starts_with("/dev/mapper/")
        && !spec.starts_with("/dev/md/")
}

/// The audit findings.
pub(super) fn findings(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    fstab(cx, out);
    mount_options(cx, out);
    read_policy(cx, out);
    discard_unsupported(cx, out);
    oldest_kernel(cx, out);
}

/// The fstab entries of the filesystem.
fn fstab(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let f = cx.f;
    let devices = f.total_devices.max(f.devices.len() as u64);
    if let Some(tab) = &f.fstab {
        for e in &tab.entries {
            let at = format!("{} line {}", tab.path, e.line);
            if kernel_device_name(&e.spec) {
                let fixed = e.text.replacen(&e.spec, &format!("UUID={}", f.uuid), 1);
                out.push(
                    Finding::new(
                        Code::FstabDeviceName,
                        format!("fstab mounts {} by its device name {}", e.file, e.spec),
                        if devices > 1 {
                            "kernel device names follow probe order and change between boots; on a multi-device filesystem systemd also waits for that one member only (systemd issue 6605: a two-device btrfs named by one component timed out at boot); the UUID names the whole filesystem"
                        } else {
                            "kernel device names follow probe order and change between boots (another disk added, an NVMe namespace probed first): the UUID always names this filesystem"
                        },
                    )
                    .with_evidence(&at, e.text.trim())
                    .with_evidence("write instead", fixed.trim()),
                );
            }
            if e.option("degraded").is_some() {
                let mut opts: Vec<&str> = e
                    .options
                    .iter()
                    .map(String::as_str)
                    .filter(|o| *o != "degraded")
                    .collect();
                if opts.is_empty() {
                    opts.push("defaults");
                }
                out.push(
                    Finding::new(
                        Code::FstabDegraded,
                        format!("fstab mounts {} with degraded", e.file),
                        "with a member missing the filesystem then mounts silently, writes new chunks as single (no second copy), and a returning device must be scrubbed back (btrfs-progs issue 524); mount degraded by hand when a drive has failed, not on every boot",
                    )
                    .with_evidence(&at, e.text.trim())
                    .with_evidence("options without it", opts.join(",")),
                );
            }
            if devices > 1 && e.file == "/" && e.option("x-systemd.device-timeout").is_none() {
                out.push(
                    Finding::new(
                        Code::FstabNoDeviceTimeout,
                        "the multi-device root has no x-systemd.device-timeout",
                        "systemd's btrfs udev rule holds the root until every member is present: with one missing, boot waits for it (systemd issues 795, 36886); a timeout, with a rescue plan for a degraded mount, bounds the wait",
                    )
                    .with_evidence(&at, e.text.trim())
                    .with_evidence("devices", devices.to_string())
                    .with_evidence("add to the options", "x-systemd.device-timeout=90s"),
                );
            }
        }
    }
}

/// Mount options, as the kernel shows them.
fn mount_options(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let f = cx.f;
    let opts: Vec<&str> = f.mount_options.split(',').collect();
    let has = |o: &str| {
        opts.iter()
            .any(|x| *x == o || x.starts_with(&format!("{o}=")))
    };
    // Synchronous discard (the kernel shows it as `discard`) with an fstrim
    // timer: every free is trimmed at once, and fstrim trims again. Not
    // for discard=async: btrfs marks the ranges async discard trimmed and
    // fstrim skips them (only the first fstrim after a mount trims all free
    // space again), so that pair is no double work worth a finding.
    if opts.iter().any(|x| *x == "discard" || *x == "discard=sync") && f.fstrim_timer {
        out.push(
            Finding::new(
                Code::DiscardTwice,
                "mounted with synchronous discard and fstrim.timer enabled",
                "with synchronous discard every delete waits for its trim, and the weekly fstrim trims the free space again; discard=async (the default for SSDs since Linux 6.2) batches the trims in the background and fstrim skips what it trimmed. Mount with discard=async, or nodiscard and keep the timer",
            )
            .with_evidence("mount options", f.mount_options.clone())
            .with_evidence("timer", "fstrim.timer is enabled")
            .with_command(crate::sys::tools::display_argv(&[
                "mount",
                "-o",
                "remount,discard=async",
                &f.mount_point.display().to_string(),
            ])),
        );
    }
    if has("ssd_spread") {
        out.push(
            Finding::new(
                Code::SsdSpread,
                "mounted with ssd_spread",
                "ssd_spread allocates only into wholly free areas, meant for low-end SSDs; on NVMe it buys nothing and a fuller filesystem reaches ENOSPC sooner (more partly used chunks). The default `ssd` is enough",
            )
            .with_evidence("mount options", f.mount_options.clone()),
        );
    }
    if opts
        .iter()
        .any(|x| *x == "space_cache" || *x == "space_cache=v1")
    {
        // From 7.3 (545e560a5b0f) no option selects v1: a kernel that
        // still shows it loads the cache it found on disk.
        let disabled =
            KernelVersion::parse(&f.kernel).is_some_and(|k| k >= kernel::V1_CACHE_DISABLED);
        out.push(
            Finding::new(
                Code::SpaceCacheV1,
                "the free space cache v1 is in use",
                if disabled {
                    "this kernel disabled the v1 cache (Linux 7.3, 545e560a5b0f): space_cache and space_cache=v1 now mean no cache at all, it only loads the v1 cache it finds on disk, and the change after it (fab81e9b9326) drops that too, leaving every block group's free space to be found by scanning the extent tree. The free space tree (v2) replaces it: unmount, then mount once with clear_cache,space_cache=v2 (it stays v2 from then on), and take space_cache out of fstab"
                } else {
                    "v1 is deprecated, slow to load and write on large filesystems, and disabled from Linux 7.3 (545e560a5b0f: the filesystem then mounts with no free space cache; doctor --before-upgrade 7.3 says more); the free space tree (v2, the default since btrfs-progs 5.15) replaces it. Unmount, then mount once with clear_cache,space_cache=v2 (it stays v2 from then on)"
                },
            )
            .with_evidence("mount options", f.mount_options.clone())
            .with_command(crate::doctor::upgrade::convert_command(f)),
        );
    }
}

/// RAID1 reads: the kernel's default picks the mirror by pid, so one
/// reading thread stays on one device.
fn read_policy(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let f = cx.f;
    let mirrored = cx.data.iter().any(|p| {
        matches!(
            p,
            crate::model::profile::Profile::Raid1
                | crate::model::profile::Profile::Raid1c3
                | crate::model::profile::Profile::Raid1c4
                | crate::model::profile::Profile::Raid10
        )
    });
    if let Some(policy) = f.read_policy.as_deref()
        && mirrored
        && policy.split_whitespace().any(|w| w == "[pid]")
    {
        let others: Vec<&str> = policy
            .split_whitespace()
            .filter(|w| !w.starts_with('['))
            .map(|w| w.split(':').next().unwrap_or(w))
            .collect();
        let mut fi = Finding::new(
            Code::Raid1ReadPolicy,
            "RAID1 reads choose the mirror by process id (read_policy pid)",
            if others.contains(&"round-robin") {
                "one process reads from one mirror only: a single-threaded loader gets one device's bandwidth; round-robin (this kernel has it) spreads its reads over the mirrors. It lasts until the next mount"
            } else {
                "one process reads from one mirror only: a single-threaded loader gets one device's bandwidth; this kernel has no other policy (round-robin needs Linux 6.15 built with CONFIG_BTRFS_EXPERIMENTAL): read with several threads (read-test --threads) or use RAID0 for a scratch copy"
            },
        )
        .with_evidence("read_policy", policy);
        if others.contains(&"round-robin") {
            fi = fi.with_evidence(
                "to change it (as root)",
                format!("write round-robin to /sys/fs/btrfs/{}/read_policy", f.uuid),
            );
        }
        out.push(fi);
    }
}

/// discard on members that take none.
fn discard_unsupported(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let f = cx.f;
    if f.mount_options.split(',').any(|x| x.starts_with("discard")) {
        let none: Vec<&str> = f
            .present()
            .filter(|d| d.discard_max_bytes == Some(0))
            .map(|d| d.path.as_str())
            .collect();
        if !none.is_empty() {
            out.push(
                Finding::new(
                    Code::DiscardUnsupported,
                    format!(
                        "{} {} not support discard",
                        none.join(", "),
                        if none.len() == 1 { "does" } else { "do" }
                    ),
                    "the discard option does nothing on a device that takes no discard (its queue says discard_max_bytes 0); the others are trimmed as usual",
                )
                .with_evidence("mount options", f.mount_options.clone())
                .with_evidence("without discard", none.join(", ")),
            );
        }
    }
}

/// The oldest kernel that mounts it (a rescue stick's).
fn oldest_kernel(cx: &Cx<'_>, out: &mut Vec<Finding>) {
    let f = cx.f;
    let (rw, why) = kernel::oldest_read_write(&f.features);
    if rw > kernel::RESCUE_KERNEL {
        let ro = kernel::oldest_read_only(&f.features);
        let mut fi = Finding::new(
            Code::OldestKernel,
            format!("mounting this filesystem needs Linux {rw} or later"),
            format!(
                "a rescue system older than that (a {} live image, an old installer) cannot mount it{}: keep one at least as new",
                kernel::RESCUE_KERNEL,
                if ro < rw {
                    format!(" read-write (Linux {ro} mounts it read-only)")
                } else {
                    String::new()
                }
            ),
        )
        .with_evidence("features that need it", why.join(", "));
        if let Some(k) = KernelVersion::parse(&f.kernel) {
            fi = fi.with_evidence("running kernel", k.to_string());
        }
        out.push(fi);
    }
}
