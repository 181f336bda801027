//! `show`: the filesystem and its devices, with their error counters.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::BtrfsTarget;
use crate::error::Result;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs;

/// Exit status of `show` when a device has a non-zero error counter (bit 6,
/// as `btrfs device stats --check`).
pub(crate) const DEVICE_ERRORS: u8 = crate::model::exit::DEVICE_ERRORS.code;
/// Exit status of `show` when a member device is missing (it wins over
/// [`DEVICE_ERRORS`]: the filesystem runs without one of its devices).
pub(crate) const DEVICE_MISSING: u8 = crate::model::exit::DEVICE_MISSING.code;

/// `show --json`: every filesystem asked about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShowReport {
    /// One entry per filesystem.
    pub filesystems: Vec<FsShow>,
}

impl ShowReport {
    /// [`DEVICE_MISSING`] when a filesystem shown misses a member device,
    /// else [`DEVICE_ERRORS`] when any device of any filesystem counted an
    /// error, else 0.
    pub fn exit_status(&self) -> u8 {
        if self.filesystems.iter().any(|f| f.missing_devices() > 0) {
            DEVICE_MISSING
        } else if self
            .filesystems
            .iter()
            .flat_map(|f| &f.devices)
            .any(|d| d.has_errors)
        {
            DEVICE_ERRORS
        } else {
            crate::error::exit::OK
        }
    }
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
/// A device's error counters (`btrfs device stats`).
pub struct ErrorCounters {
    /// Write errors.
    pub write_io_errs: u64,
    /// Read errors.
    pub read_io_errs: u64,
    /// Flush errors.
    pub flush_io_errs: u64,
    /// Checksum or bytenr mismatches.
    pub corruption_errs: u64,
    /// Blocks with an unexpected generation.
    pub generation_errs: u64,
}

impl ErrorCounters {
    /// Sum of all counters, saturating: a counter at UINT64_MAX (invalid,
    /// doctor's `device-stats-invalid`) keeps it there instead of wrapping.
    pub fn total(&self) -> u64 {
        [
            self.write_io_errs,
            self.read_io_errs,
            self.flush_io_errs,
            self.corruption_errs,
            self.generation_errs,
        ]
        .into_iter()
        .fold(0, u64::saturating_add)
    }
}

/// One device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceShow {
    /// btrfs device id.
    pub devid: u64,
    /// Path (empty for a missing device).
    pub path: String,
    /// Missing from the filesystem.
    pub missing: bool,
    /// Its state, as doctor names it: present, missing, vanished (the
    /// kernel still lists it, its block device is gone), stale (its
    /// superblock is behind), returned (back, not resynced by a scrub).
    #[serde(default)]
    pub state: crate::model::member::MemberState,
    /// Size btrfs uses on it.
    pub size_bytes: u64,
    /// Bytes allocated to chunks on it.
    pub used_bytes: u64,
    /// Error counters; `null` if they could not be read.
    pub errors: Option<ErrorCounters>,
    /// Any counter is non-zero.
    pub has_errors: bool,
}

/// One filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FsShow {
    /// Label, `null` if none.
    pub label: Option<String>,
    /// Filesystem UUID.
    pub uuid: String,
    /// A mount point of it.
    pub mount_point: PathBuf,
    /// Current generation (transaction id).
    pub generation: u64,
    /// B-tree node size.
    pub node_size: u32,
    /// Sector size.
    pub sector_size: u32,
    /// Checksum algorithm (`crc32c`, `xxhash64`, `sha256`, `blake2b`).
    pub checksum: Option<String>,
    /// The kernel driver that computes it (`crc32c-intel`).
    pub checksum_driver: Option<String>,
    /// Features enabled on this filesystem (sysfs `features/`).
    pub features: Vec<String>,
    /// Number of devices.
    pub total_devices: u64,
    /// Logical bytes used (sum of SPACE_INFO used, as `btrfs filesystem show`).
    pub fs_bytes_used: u64,
    /// Devices, by devid.
    pub devices: Vec<DeviceShow>,
}

impl FsShow {
    /// Member devices missing: those listed as missing, and those the
    /// superblock counts but the kernel does not list.
    pub fn missing_devices(&self) -> u64 {
        // A member whose block device is gone is missing, whether or not
        // the kernel noticed yet.
        let listed = self
            .devices
            .iter()
            .filter(|d| d.missing || d.state.gone())
            .count() as u64;
        listed + self.total_devices.saturating_sub(self.devices.len() as u64)
    }
}

fn sysfs_text(root: &SysRoot, fsid: &str, name: &str) -> Option<String> {
    root.read_attr(&root.sys(&format!("fs/btrfs/{fsid}/{name}")))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_owned())
}

/// Reads one filesystem; each member's state with the last look's record
/// and scrubs in `state_dir` (read only).
pub fn show_one(root: &SysRoot, target: &BtrfsTarget, state_dir: &Path) -> Result<FsShow> {
    let path: &Path = &target.path;
    let info = btrfs::fs_info(path)?;
    let spaces = btrfs::space_entries(path)?;
    let mut devices = Vec::new();
    for d in btrfs::devices(path)? {
        let errors = btrfs::device_stats(path, d.devid)
            .ok()
            .map(|s| ErrorCounters {
                write_io_errs: s.write_errs,
                read_io_errs: s.read_errs,
                flush_io_errs: s.flush_errs,
                corruption_errs: s.corruption_errs,
                generation_errs: s.generation_errs,
            });
        devices.push(DeviceShow {
            devid: d.devid,
            missing: d.path.is_empty(),
            // Set below, once every member was looked at.
            state: Default::default(),
            path: d.path,
            size_bytes: d.total_bytes,
            used_bytes: d.bytes_used,
            has_errors: errors.is_some_and(|e| e.total() > 0),
            errors,
        });
    }
    let members: Vec<(u64, &str, bool)> = devices
        .iter()
        .map(|d| (d.devid, d.path.as_str(), d.missing))
        .collect();
    let states =
        crate::doctor::members::states(root, &target.fsid, &members, info.generation, state_dir);
    for (d, st) in devices.iter_mut().zip(states) {
        d.state = st;
    }
    let (checksum, checksum_driver) = match sysfs_text(root, &target.fsid, "checksum") {
        Some(text) => match text.split_once(" (") {
            Some((algo, driver)) => (
                Some(algo.to_owned()),
                Some(driver.trim_end_matches(')').to_owned()),
            ),
            None => (Some(text), None),
        },
        None => (None, None),
    };
    let features = super::features(root, &target.fsid);
    Ok(FsShow {
        label: sysfs_text(root, &target.fsid, "label").filter(|l| !l.is_empty()),
        uuid: target.fsid.clone(),
        mount_point: target.mount.mount_point.clone(),
        generation: info.generation,
        node_size: info.nodesize,
        sector_size: info.sectorsize,
        checksum,
        checksum_driver,
        features,
        total_devices: info.num_devices,
        fs_bytes_used: spaces.iter().map(|s| s.used_bytes).sum(),
        devices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum() {
        let e = ErrorCounters {
            write_io_errs: 1,
            corruption_errs: 2,
            ..ErrorCounters::default()
        };
        assert_eq!(e.total(), 3);
        assert_eq!(ErrorCounters::default().total(), 0);
    }

    fn device(devid: u64, missing: bool, has_errors: bool) -> DeviceShow {
        DeviceShow {
            devid,
            path: if missing {
                String::new()
            } else {
                format!("/dev/loop{devid}")
            },
            missing,
            state: if missing {
                crate::model::member::MemberState::Missing
            } else {
                Default::default()
            },
            size_bytes: 1 << 30,
            used_bytes: 0,
            errors: Some(ErrorCounters {
                corruption_errs: u64::from(has_errors),
                ..ErrorCounters::default()
            }),
            has_errors,
        }
    }

    fn fs(total_devices: u64, devices: Vec<DeviceShow>) -> FsShow {
        FsShow {
            label: None,
            uuid: "u".into(),
            mount_point: "/m".into(),
            generation: 1,
            node_size: 16384,
            sector_size: 4096,
            checksum: None,
            checksum_driver: None,
            features: Vec::new(),
            total_devices,
            fs_bytes_used: 0,
            devices,
        }
    }

    #[test]
    fn a_missing_device_wins_over_error_counters() {
        let r = |fss| ShowReport { filesystems: fss }.exit_status();
        let healthy = || fs(2, vec![device(1, false, false), device(2, false, false)]);
        assert_eq!(r(vec![healthy()]), 0);
        let errors = fs(2, vec![device(1, false, true), device(2, false, false)]);
        assert_eq!(r(vec![healthy(), errors.clone()]), DEVICE_ERRORS);
        // Listed as missing, with errors on the other device.
        let listed = fs(2, vec![device(1, false, true), device(2, true, false)]);
        assert_eq!(listed.missing_devices(), 1);
        assert_eq!(r(vec![errors, listed]), DEVICE_MISSING);
        // Counted by the superblock, not listed by the kernel.
        let absent = fs(3, vec![device(1, false, false), device(2, false, false)]);
        assert_eq!(absent.missing_devices(), 1);
        assert_eq!(r(vec![absent]), DEVICE_MISSING);
        assert_ne!(DEVICE_MISSING, 0);
        assert_ne!(DEVICE_MISSING, DEVICE_ERRORS);
    }
}
