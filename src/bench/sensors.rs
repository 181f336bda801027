//! What the kernel saw around each fio run: the members' sector counters
//! (/proc/diskstats, read and written), the test file's page-cache
//! residency (mincore), page cache dirtied (the per-bdi counter probe-dio
//! uses), FIEMAP; and, once for the bench, the PCIe ceiling and the NVMe
//! thermal counters. Behind a trait so the measuring loop runs on mocks.

use crate::sys::fs::beneath::HeldDir;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::report::{CeilingInfo, FileLayout, MemberDevice, ThermalInfo};
use crate::error::{Error, Result};
use crate::model::profile::Profile;
use crate::parse::diskstats::SECTOR;
use crate::parse::mountinfo::MountEntry;
use crate::parse::nvme_smart::{SmartThermal, ThermalDelta};
use crate::sys::fs::root::SysRoot;
use crate::sys::proc::counters::{self, CounterChoice, DirtyCounter};
use crate::sys::{kernel::btrfs, kernel::extents, kernel::pagecache, proc::diskstats};

/// The counters the measuring loop reads.
pub(crate) trait Sensors {
    /// Bytes (read, written) by all members so far; `None` when no
    /// device counts this filesystem.
    fn device_bytes(&mut self) -> Result<Option<(u64, u64)>>;
    /// Drops the test file from the page cache.
    fn evict(&mut self) -> Result<()>;
    /// Bytes of the test file in the page cache.
    fn resident(&mut self) -> Result<Option<u64>>;
    /// Page-cache bytes dirtied so far (a running counter).
    fn dirtied(&mut self) -> Result<Option<u64>>;
    /// The test file's layout.
    fn layout(&mut self) -> Result<Option<FileLayout>>;
}

/// (read, written) sectors per `major:minor` from /proc/diskstats text
/// (fields 6 and 10, see Documentation/admin-guide/iostats.rst).
pub(crate) fn parse_io_sectors(text: &str) -> Vec<(u32, u32, u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(5)?.parse().ok()?,
                f.get(9)?.parse().ok()?,
            ))
        })
        .collect()
}

/// The block devices of the filesystem under `dir`: every btrfs member
/// (from /sys/fs/btrfs/<fsid>/devices, no root needed), else the mount's
/// own device. The second list names members diskstats does not show.
pub(crate) fn member_devices(
    root: &SysRoot,
    dir: &HeldDir,
    mount: &MountEntry,
) -> Result<(Vec<MemberDevice>, Vec<String>)> {
    let stats = diskstats::read_stats(root)?;
    let mut found = Vec::new();
    let mut missing = Vec::new();
    if mount.fs_type == "btrfs" {
        let fsid = btrfs::fsid_of(dir.fd(), dir.path())?;
        let devdir = root.sys(&format!("fs/btrfs/{fsid}/devices"));
        let mut names: Vec<String> = fs::read_dir(&devdir)
            .map_err(|e| Error::from_io(&e, "cannot read", &devdir))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let path = format!("/dev/{name}");
            match stats.iter().find(|s| s.name == name) {
                Some(s) => found.push(MemberDevice {
                    path,
                    name,
                    major: s.major,
                    minor: s.minor,
                }),
                None => missing.push(path),
            }
        }
        return Ok((found, missing));
    }
    if let Some(d) = diskstats::by_number(&stats, mount.major, mount.minor) {
        found.push(MemberDevice {
            path: format!("/dev/{}", d.name),
            name: d.name,
            major: d.major,
            minor: d.minor,
        });
    }
    Ok((found, missing))
}

/// The real counters.
pub(crate) struct RealSensors {
    root: SysRoot,
    devices: Vec<MemberDevice>,
    counter: Option<DirtyCounter>,
    /// Why the per-device dirtied counter is not used, if it is not.
    pub(crate) counter_note: Option<String>,
    file: Option<(File, PathBuf, u64)>,
}

impl RealSensors {
    /// Opens the counters for the filesystem under `dir`.
    pub fn open(
        root: &SysRoot,
        dir: &HeldDir,
        mount: &MountEntry,
        devices: &[MemberDevice],
        allow_private_debugfs: bool,
    ) -> Result<Self> {
        let bdi = if mount.fs_type == "btrfs" {
            btrfs::fsid_of(dir.fd(), dir.path())
                .ok()
                .and_then(|f| counters::btrfs_bdi_name(root, &f))
        } else {
            counters::block_bdi_name(root, mount.major, mount.minor)
        };
        let (counter, counter_note) = match counters::open_counter(
            root,
            CounterChoice::Auto,
            bdi.as_deref(),
            allow_private_debugfs,
        ) {
            Ok((c, note)) => (Some(c), note),
            Err(e) => (None, Some(e.message().to_owned())),
        };
        Ok(Self {
            root: root.clone(),
            devices: devices.to_vec(),
            counter,
            counter_note,
            file: None,
        })
    }

    /// The test file, once it exists.
    pub(crate) fn set_file(&mut self, file: File, path: &Path, size: u64) {
        self.file = Some((file, path.to_path_buf(), size));
    }
}

impl Sensors for RealSensors {
    fn device_bytes(&mut self) -> Result<Option<(u64, u64)>> {
        if self.devices.is_empty() {
            return Ok(None);
        }
        let p = self.root.proc("diskstats");
        let text = fs::read_to_string(&p).map_err(|e| Error::from_io(&e, "cannot read", &p))?;
        let io = parse_io_sectors(&text);
        let (mut r, mut w) = (0u64, 0u64);
        for d in &self.devices {
            if let Some(&(_, _, sr, sw)) = io.iter().find(|x| x.0 == d.major && x.1 == d.minor) {
                r += sr * SECTOR;
                w += sw * SECTOR;
            }
        }
        Ok(Some((r, w)))
    }

    fn evict(&mut self) -> Result<()> {
        match &self.file {
            Some((f, p, _)) => pagecache::evict(f, p),
            None => Ok(()),
        }
    }

    fn resident(&mut self) -> Result<Option<u64>> {
        match &self.file {
            Some((f, p, size)) => pagecache::resident_bytes(f, *size, p).map(Some),
            None => Ok(None),
        }
    }

    fn dirtied(&mut self) -> Result<Option<u64>> {
        match self.counter.as_mut() {
            Some(c) => c.read_bytes().map(Some),
            None => Ok(None),
        }
    }

    fn layout(&mut self) -> Result<Option<FileLayout>> {
        let Some((f, _, size)) = &self.file else {
            return Ok(None);
        };
        Ok(extents::layout(f, *size).ok().map(|l| FileLayout {
            extents: l.extents,
            encoded_bytes: l.encoded_bytes,
            unwritten_bytes: l.unwritten_bytes,
            hole_bytes: l.hole_bytes,
            delalloc_bytes: l.delalloc_bytes,
        }))
    }
}

/// The array's ceiling from the members' PCIe links (btrfs only).
pub fn ceiling(
    root: &SysRoot,
    devices: &[MemberDevice],
    profile: Option<Profile>,
) -> Option<CeilingInfo> {
    let profile = profile?;
    let paths: Vec<PathBuf> = devices.iter().map(|d| PathBuf::from(&d.path)).collect();
    let c = crate::hw::array_ceiling_for_block_devices(root, &paths, profile).ok()?;
    Some(CeilingInfo {
        one_reader_bytes_per_sec: c.one_reader.map(|b| b.encoded()),
        many_readers_bytes_per_sec: c.many_readers.map(|b| b.encoded()),
        held_back_by: c.held_back_by,
        without_link_info: c.without_link_info,
        summary: c.summary,
    })
}

/// The NVMe controller of a block device name (`nvme0n1p2` → `nvme0`).
pub(crate) fn nvme_controller(block: &str) -> Option<String> {
    let rest = block.strip_prefix("nvme")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || !rest[digits.len()..].starts_with('n') {
        return None;
    }
    Some(format!("nvme{digits}"))
}

/// Thermal readings of every NVMe member's controller.
pub(crate) fn thermal_read(
    root: &SysRoot,
    devices: &[MemberDevice],
) -> Vec<(String, std::result::Result<SmartThermal, String>)> {
    let mut ctrls: Vec<String> = devices
        .iter()
        .filter_map(|d| nvme_controller(&d.name))
        .collect();
    ctrls.sort();
    ctrls.dedup();
    ctrls
        .into_iter()
        .map(|c| {
            let r = crate::hw::read_thermal(root, &c).map_err(|e| e.message().to_owned());
            (c, r)
        })
        .collect()
}

/// Per drive: what changed between the two readings.
pub(crate) fn thermal_delta(
    before: Vec<(String, std::result::Result<SmartThermal, String>)>,
    after: Vec<(String, std::result::Result<SmartThermal, String>)>,
) -> Vec<ThermalInfo> {
    before
        .into_iter()
        .map(|(c, b)| {
            let a = after.iter().find(|(x, _)| *x == c).map(|(_, r)| r.clone());
            match (b, a) {
                (Ok(b), Some(Ok(a))) => {
                    let d = ThermalDelta::between(&b, &a);
                    ThermalInfo {
                        controller: c,
                        celsius_before: b.temperature_celsius,
                        celsius_after: a.temperature_celsius,
                        tmt1_seconds: d.tmt1.seconds,
                        tmt2_seconds: d.tmt2.seconds,
                        transitions: d.tmt1.transitions.saturating_add(d.tmt2.transitions),
                        error: None,
                    }
                }
                (Err(e), _) | (_, Some(Err(e))) => ThermalInfo {
                    controller: c,
                    celsius_before: None,
                    celsius_after: None,
                    tmt1_seconds: 0,
                    tmt2_seconds: 0,
                    transitions: 0,
                    error: Some(e),
                },
                (Ok(_), None) => ThermalInfo {
                    controller: c,
                    celsius_before: None,
                    celsius_after: None,
                    tmt1_seconds: 0,
                    tmt2_seconds: 0,
                    transitions: 0,
                    error: Some("no reading after the bench".into()),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::nvme_smart::{SmartPageBuilder, decode_smart_log};

    #[test]
    fn io_sectors_from_captured_diskstats() {
        // Captured on the dev VM (Linux 6.18).
        let text = "   7       3 loop3 1128 2 38614 124 4118 16501 3130488 6313 0 1804 6538 26 0 41943044 2 318 98\n";
        assert_eq!(parse_io_sectors(text), vec![(7, 3, 38614, 3130488)]);
        assert!(parse_io_sectors("garbage\n7 3\n").is_empty());
    }

    #[test]
    fn controllers_of_block_devices() {
        assert_eq!(nvme_controller("nvme0n1").as_deref(), Some("nvme0"));
        assert_eq!(nvme_controller("nvme12n1p2").as_deref(), Some("nvme12"));
        assert_eq!(nvme_controller("loop3"), None);
        assert_eq!(nvme_controller("nvme-fabrics"), None);
    }

    #[test]
    fn throttling_during_the_bench_is_reported_per_drive() {
        let before = decode_smart_log(&SmartPageBuilder::default().build()).unwrap();
        let hot = SmartPageBuilder {
            tmt1_transitions: 2,
            tmt1_seconds: 40,
            ..SmartPageBuilder::default()
        };
        let after = decode_smart_log(&hot.build()).unwrap();
        let t = thermal_delta(
            vec![
                ("nvme0".into(), Ok(before.clone())),
                ("nvme1".into(), Err("no SMART".into())),
            ],
            vec![
                ("nvme0".into(), Ok(after)),
                ("nvme1".into(), Err("no SMART".into())),
            ],
        );
        assert_eq!(t[0].tmt1_seconds, 40);
        assert_eq!(t[0].transitions, 2);
        assert_eq!(t[1].error.as_deref(), Some("no SMART"));
    }
}
