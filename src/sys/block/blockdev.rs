//! Facts about a block device that decide whether btrfs-lab may write on
//! it: read only, changing nothing.

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::parse::wipefs::{Signature, parse_wipefs_json};
use crate::sys::fs::root::SysRoot;
use crate::sys::{proc::mountinfo, tools};

/// Everything the device preflight looks at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct BlockDeviceFacts {
    /// The path as given.
    pub given: PathBuf,
    /// The path with symlinks resolved (`/dev/disk/by-id/...` → `/dev/nvme1n1`).
    pub path: PathBuf,
    /// It exists.
    pub exists: bool,
    /// It is a block device.
    pub(crate) is_block: bool,
    /// Kernel name (`nvme1n1`, `loop3`).
    pub name: Option<String>,
    /// `major:minor`.
    pub(crate) devt: Option<(u32, u32)>,
    /// Size in bytes.
    pub size: Option<u64>,
    /// Read-only block device.
    pub read_only: bool,
    /// Partitions on it (`nvme1n1p1`).
    pub partitions: Vec<String>,
    /// Devices stacked on it (device-mapper, md).
    pub(crate) holders: Vec<String>,
    /// Where it (or one of its partitions) is mounted.
    pub(crate) mounted_at: Vec<PathBuf>,
    /// It (or one of its partitions) is active swap.
    pub swap: bool,
    /// Opening it exclusively failed: something in the kernel holds it.
    pub busy: bool,
    /// Signatures found by wipefs.
    pub signatures: Vec<Signature>,
    /// Why the signatures could not be read, if they could not.
    pub(crate) signature_error: Option<String>,
    /// fsid from a btrfs superblock on it.
    pub(crate) btrfs_fsid: Option<String>,
    /// It is a member of that btrfs and the kernel has it open (mounted):
    /// where it is mounted (a member other than the one named at the mount
    /// is not the source of any mount).
    pub(crate) btrfs_mounted_at: Vec<PathBuf>,
    /// A loop device whose backing file a user other than root owns (what
    /// `udisksctl loop-setup` gives): that file and its owner's uid.
    pub(crate) loop_backing_owner: Option<(PathBuf, u32)>,
}

impl BlockDeviceFacts {
    /// Facts about `given` (resolved to `path`) before anything was looked at:
    /// it does not exist, has no size, nothing uses it.
    pub fn unknown(given: &Path, path: &Path) -> Self {
        Self {
            given: given.to_path_buf(),
            path: path.to_path_buf(),
            exists: false,
            is_block: false,
            name: None,
            devt: None,
            size: None,
            read_only: false,
            partitions: Vec::new(),
            holders: Vec::new(),
            mounted_at: Vec::new(),
            swap: false,
            busy: false,
            signatures: Vec::new(),
            signature_error: None,
            btrfs_fsid: None,
            btrfs_mounted_at: Vec::new(),
            loop_backing_owner: None,
        }
    }
}

fn dev_name(root: &SysRoot, major: u32, minor: u32) -> Option<String> {
    let link = fs::read_link(root.sys(&format!("dev/block/{major}:{minor}"))).ok()?;
    link.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// The names in a directory, sorted; empty if it cannot be read.
pub(crate) fn list_dir(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(p)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The fsid in the primary btrfs superblock (64 KiB), if there is one.
fn read_btrfs_fsid(path: &Path) -> Option<String> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let mut buf = vec![0u8; 64 * 1024 + 4096];
    f.read_exact(&mut buf).ok()?;
    let sb = &buf[64 * 1024..];
    if &sb[64..72] != b"_BHRfS_M" {
        return None;
    }
    let id = &sb[32..48];
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

/// Gathers the facts about `given`. Never fails: what cannot be read is
/// recorded as such.
/// The backing file of the loop device held open as `dev` and its owner,
/// when the owner is not root: the file named by
/// `/sys/block/loopN/loop/backing_file`, checked (`lstat`, nothing opened)
/// to be the very inode the device reports (`LOOP_GET_STATUS64`). A file
/// renamed or replaced since is not claimed.
fn loop_backing_owner(
    root: &SysRoot,
    dev: &fs::File,
    name: Option<&str>,
) -> Option<(PathBuf, u32)> {
    let info = crate::sys::kernel::ioctl::loop_get_status64(dev.as_fd()).ok()?;
    let backing = root
        .read_attr(&root.sys(&format!("block/{}/loop/backing_file", name?)))
        .ok()?;
    let backing = PathBuf::from(backing.trim_end_matches('\n'));
    let st = rustix::fs::statat(
        rustix::fs::CWD,
        &backing,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .ok()?;
    let same = crate::sys::block::loopdev::FileIdentity {
        dev: st.st_dev,
        ino: st.st_ino,
    } == crate::sys::block::loopdev::FileIdentity {
        dev: info.lo_device,
        ino: info.lo_inode,
    };
    (same && st.st_uid != 0).then_some((backing, st.st_uid))
}

/// The `major:minor` of the block device at `path` (links followed), if
/// it is one.
pub(crate) fn devt_of(path: &Path) -> Option<(u32, u32)> {
    let meta = fs::metadata(path).ok()?;
    meta.file_type().is_block_device().then(|| {
        let rdev = meta.rdev();
        (rustix::fs::major(rdev), rustix::fs::minor(rdev))
    })
}

/// A `/dev` name with its links (by-id, by-uuid, mapper) resolved, to
/// compare with another or to find its sysfs name; the name as given when
/// it cannot be resolved. Nothing is ever opened through it.
pub(crate) fn resolved(given: &Path) -> std::path::PathBuf {
    fs::canonicalize(given).unwrap_or_else(|_| given.to_path_buf())
}

pub(crate) fn inspect(root: &SysRoot, given: &Path) -> BlockDeviceFacts {
    let path = resolved(given);
    let mut f = BlockDeviceFacts::unknown(given, &path);
    let Ok(meta) = fs::metadata(&path) else {
        return f;
    };
    f.exists = true;
    f.is_block = meta.file_type().is_block_device();
    if !f.is_block {
        return f;
    }
    let rdev = meta.rdev();
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    f.devt = Some((major, minor));
    f.name = dev_name(root, major, minor);
    let sysdir = f
        .name
        .as_ref()
        .map(|n| root.sys(&format!("class/block/{n}")));
    if let Some(dir) = &sysdir {
        f.size = fs::read_to_string(dir.join("size"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|s| s * 512);
        f.read_only = fs::read_to_string(dir.join("ro")).is_ok_and(|s| s.trim() == "1");
        f.holders = list_dir(&dir.join("holders"));
        if let Some(name) = &f.name {
            f.partitions = list_dir(dir)
                .into_iter()
                .filter(|e| e.starts_with(name.as_str()))
                .collect();
        }
    }
    // Mounted: the device or a partition of it is the source of a mount, or
    // its device number is a mount's (non-btrfs filesystems).
    let mut names: Vec<String> = f.partitions.iter().map(|p| format!("/dev/{p}")).collect();
    names.push(path.display().to_string());
    if let Ok(table) = mountinfo::mount_table(root) {
        for m in table {
            let source = fs::canonicalize(&m.source)
                .map(|p| p.display().to_string())
                .unwrap_or(m.source.clone());
            if names.contains(&source) || (m.major, m.minor) == (major, minor) {
                f.mounted_at.push(m.mount_point);
            }
        }
    }
    if let Ok(swaps) = fs::read_to_string(root.proc("swaps")) {
        f.swap = swaps
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .any(|s| {
                let s = fs::canonicalize(s)
                    .map(|p| p.display().to_string())
                    .unwrap_or(s.to_owned());
                names.contains(&s)
            });
    }
    // An exclusive open fails while the kernel holds the device (mounted,
    // swap, md/dm member, another exclusive opener). It changes nothing.
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(file) => {
            if f.size.is_none() {
                f.size = btrfs_uapi::blkdev::device_size(file.as_fd()).ok();
            }
            if f.name.as_deref().is_some_and(|n| n.starts_with("loop")) {
                f.loop_backing_owner = loop_backing_owner(root, &file, f.name.as_deref());
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => f.busy = true,
        Err(_) => {}
    }
    match tools::find("wipefs", "util-linux") {
        Ok(wipefs) => match wipefs.run(&[
            "--no-act".into(),
            "--json".into(),
            path.display().to_string(),
        ]) {
            Ok(out) => match parse_wipefs_json(&out.stdout) {
                Ok(s) => f.signatures = s,
                Err(e) => f.signature_error = Some(e),
            },
            Err(e) => f.signature_error = Some(e.message().to_owned()),
        },
        Err(e) => f.signature_error = Some(e.message().to_owned()),
    }
    f.btrfs_fsid = read_btrfs_fsid(&path);
    if let (Some(fsid), Some(name)) = (&f.btrfs_fsid, &f.name) {
        f.btrfs_mounted_at = btrfs_mounted_at(root, fsid, name);
    }
    f
}

/// Where the btrfs `fsid` is mounted, when the device `name` (`loop3`) is
/// one of the members the kernel has open for it
/// (`/sys/fs/btrfs/FSID/devices/NAME`); the mounts whose source is one of
/// its members, the whole filesystem's (subvolume root `/`) first.
fn btrfs_mounted_at(root: &SysRoot, fsid: &str, name: &str) -> Vec<PathBuf> {
    let devices = root.sys(&format!("fs/btrfs/{fsid}/devices"));
    let members = list_dir(&devices);
    if !members.iter().any(|m| m == name) {
        return Vec::new();
    }
    let mut at: Vec<(bool, PathBuf)> = mountinfo::mount_table(root)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.fs_type == "btrfs")
        .filter(|m| {
            fs::canonicalize(&m.source)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .is_some_and(|n| members.contains(&n))
        })
        .map(|m| (m.root != Path::new("/"), m.mount_point))
        .collect();
    at.sort_by_key(|a| a.0);
    at.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_not_a_block_device() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        fs::write(&p, "x").unwrap();
        let f = inspect(&SysRoot::host(), &p);
        assert!(f.exists);
        assert!(!f.is_block);
        let f = inspect(&SysRoot::host(), &t.path().join("missing"));
        assert!(!f.exists);
    }

    #[test]
    fn finds_a_btrfs_superblock() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("img");
        let mut data = vec![0u8; 80 * 1024];
        data[64 * 1024 + 64..64 * 1024 + 72].copy_from_slice(b"_BHRfS_M");
        for (i, b) in data[64 * 1024 + 32..64 * 1024 + 48].iter_mut().enumerate() {
            *b = i as u8;
        }
        fs::write(&p, &data).unwrap();
        assert_eq!(
            read_btrfs_fsid(&p).as_deref(),
            Some("00010203-0405-0607-0809-0a0b0c0d0e0f")
        );
        fs::write(&p, vec![0u8; 80 * 1024]).unwrap();
        assert_eq!(read_btrfs_fsid(&p), None);
    }
}
