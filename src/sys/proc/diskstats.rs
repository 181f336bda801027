//! Which block devices hold a file, and how many bytes they have read
//! (`/proc/diskstats`), so a read figure can be checked against what the
//! devices really moved.

use std::fs;
use std::path::{Path, PathBuf};

use rustix::fs::{major, minor, stat};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::parse::diskstats::{DiskStat, parse_diskstats};
use crate::sys::fs::root::SysRoot;

/// A block device whose reads are counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BlockDevice {
    /// Kernel name in /proc/diskstats (`loop3`, `nvme0n1p2`).
    pub name: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// The path the filesystem knows it by (btrfs members), if any.
    pub path: Option<String>,
}

/// The current `/proc/diskstats`.
pub(crate) fn read_stats(root: &SysRoot) -> Result<Vec<DiskStat>> {
    let p = root.proc("diskstats");
    let text = root
        .read_table(&p)
        .map_err(|e| Error::from_io(&e, "cannot read", &p))?;
    Ok(parse_diskstats(&text))
}

/// The device `major:minor`, if diskstats counts it.
pub(crate) fn by_number(stats: &[DiskStat], maj: u32, min: u32) -> Option<BlockDevice> {
    stats
        .iter()
        .find(|s| s.major == maj && s.minor == min)
        .map(|s| BlockDevice {
            name: s.name.clone(),
            major: s.major,
            minor: s.minor,
            path: None,
        })
}

/// The diskstats entry of a device node path (`/dev/loop3`,
/// `/dev/mapper/x`): by its device number, else by its kernel name.
pub(crate) fn by_path(stats: &[DiskStat], path: &Path) -> Option<BlockDevice> {
    let found = match stat(path) {
        Ok(st) if st.st_rdev != 0 => by_number(stats, major(st.st_rdev), minor(st.st_rdev)),
        _ => None,
    }
    .or_else(|| {
        // Not visible here (another mount namespace): match the name the
        // kernel uses, following /dev/mapper-style links when they exist.
        let real = fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path));
        let name = real.file_name()?.to_string_lossy().into_owned();
        stats.iter().find(|s| s.name == name).map(|s| BlockDevice {
            name: s.name.clone(),
            major: s.major,
            minor: s.minor,
            path: None,
        })
    });
    found.map(|d| BlockDevice {
        path: Some(path.display().to_string()),
        ..d
    })
}

/// Bytes read so far by `devices`, summed.
pub fn bytes_read(root: &SysRoot, devices: &[BlockDevice]) -> Result<u64> {
    let stats = read_stats(root)?;
    Ok(devices
        .iter()
        .filter_map(|d| {
            stats
                .iter()
                .find(|s| s.major == d.major && s.minor == d.minor)
        })
        .map(DiskStat::bytes_read)
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_devices_by_number_and_name() {
        let stats = parse_diskstats(
            "   7       3 loop3 1 0 8 0 0 0 0 0 0 0 0\n 254 0 vda 1 0 16 0 0 0 0 0 0 0 0\n",
        );
        let d = by_number(&stats, 7, 3).unwrap();
        assert_eq!(d.name, "loop3");
        assert!(by_number(&stats, 7, 9).is_none());
        // A path that does not exist here is matched by its kernel name.
        let d = by_path(&stats, Path::new("/nonexistent/dev/vda")).unwrap();
        assert_eq!((d.major, d.minor), (254, 0));
        assert_eq!(d.path.as_deref(), Some("/nonexistent/dev/vda"));
        assert!(by_path(&stats, Path::new("/nonexistent/sdz")).is_none());
    }

    #[test]
    fn sums_bytes_read_from_a_fixture() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("proc")).unwrap();
        fs::write(
            t.path().join("proc/diskstats"),
            "   7 3 loop3 1 0 8 0 0 0 0 0 0 0 0\n   7 4 loop4 1 0 2 0 0 0 0 0 0 0 0\n",
        )
        .unwrap();
        let root = SysRoot::new(t.path());
        let stats = read_stats(&root).unwrap();
        let devs: Vec<BlockDevice> = [(7, 3), (7, 4)]
            .iter()
            .filter_map(|&(a, b)| by_number(&stats, a, b))
            .collect();
        assert_eq!(bytes_read(&root, &devs).unwrap(), 10 * 512);
    }
}
