//! btrfs state through its ioctls (via the `btrfs-uapi` crate).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use btrfs_uapi::space::BlockGroupFlags;
use nix::errno::Errno;

use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;

fn open_any(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::from_io(&e, "cannot open", path))
}

fn not_btrfs(e: Errno, path: &Path) -> Error {
    match e {
        Errno::ENOTTY | Errno::EINVAL | Errno::EOPNOTSUPP => Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not on a btrfs filesystem", path.display()),
        ),
        e => Error::from_errno(e, "cannot query btrfs at", path),
    }
}

/// The filesystem UUID (fsid) of the btrfs that contains `path`.
pub fn fsid(path: &Path) -> Result<String> {
    let f = open_any(path)?;
    let info =
        btrfs_uapi::filesystem::filesystem_info(f.as_fd()).map_err(|e| not_btrfs(e, path))?;
    Ok(info.uuid.as_hyphenated().to_string())
}

/// The profile encoded in block-group flags.
pub fn profile_of(flags: BlockGroupFlags) -> Profile {
    const TABLE: [(BlockGroupFlags, Profile); 8] = [
        (BlockGroupFlags::RAID0, Profile::Raid0),
        (BlockGroupFlags::RAID1, Profile::Raid1),
        (BlockGroupFlags::DUP, Profile::Dup),
        (BlockGroupFlags::RAID10, Profile::Raid10),
        (BlockGroupFlags::RAID5, Profile::Raid5),
        (BlockGroupFlags::RAID6, Profile::Raid6),
        (BlockGroupFlags::RAID1C3, Profile::Raid1c3),
        (BlockGroupFlags::RAID1C4, Profile::Raid1c4),
    ];
    TABLE
        .iter()
        .find(|(bit, _)| flags.contains(*bit))
        .map_or(Profile::Single, |(_, p)| *p)
}

/// The profiles in use per block-group type (more than one per type while a
/// conversion is unfinished).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockGroupProfiles {
    /// Profiles of data block groups (mixed ones included).
    pub data: Vec<Profile>,
    /// Profiles of metadata block groups (mixed ones included).
    pub metadata: Vec<Profile>,
    /// Profiles of system block groups.
    pub system: Vec<Profile>,
}

/// Reads the profiles from the SPACE_INFO ioctl. Needs no privileges.
pub fn block_group_profiles(path: &Path) -> Result<BlockGroupProfiles> {
    let f = open_any(path)?;
    let spaces = btrfs_uapi::space::space_info(f.as_fd()).map_err(|e| not_btrfs(e, path))?;
    let pick = |kind: BlockGroupFlags| {
        let mut v: Vec<Profile> = spaces
            .iter()
            .filter(|s| s.flags.contains(kind) && !s.flags.contains(BlockGroupFlags::GLOBAL_RSV))
            .filter(|s| s.total_bytes > 0)
            .map(|s| profile_of(s.flags))
            .collect();
        v.sort();
        v.dedup();
        v
    };
    Ok(BlockGroupProfiles {
        data: pick(BlockGroupFlags::DATA),
        metadata: pick(BlockGroupFlags::METADATA),
        system: pick(BlockGroupFlags::SYSTEM),
    })
}

/// The profiles that hold data.
pub fn data_profiles(path: &Path) -> Result<Vec<Profile>> {
    Ok(block_group_profiles(path)?.data)
}

/// Registers a device with the kernel's btrfs scanner so a multi-device
/// filesystem can be mounted by naming one member.
pub fn scan_device(dev: &Path) -> Result<()> {
    let c = CString::new(dev.as_os_str().as_bytes())
        .map_err(|_| Error::usage(format!("bad device path {}", dev.display())))?;
    btrfs_uapi::device::device_scan(&c)
        .map_err(|e| Error::from_errno(e, "cannot scan btrfs device", dev))
}

/// Makes the kernel forget an unmounted device, so a later filesystem on the
/// same loop device number is not confused with this one. Errors are
/// harmless (the device may never have been registered).
pub fn forget_device(dev: &Path) {
    if let Ok(c) = CString::new(dev.as_os_str().as_bytes()) {
        let _ = btrfs_uapi::device::device_forget(Some(&c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_from_flags() {
        assert_eq!(profile_of(BlockGroupFlags::DATA), Profile::Single);
        assert_eq!(
            profile_of(BlockGroupFlags::DATA | BlockGroupFlags::SINGLE),
            Profile::Single
        );
        assert_eq!(
            profile_of(BlockGroupFlags::DATA | BlockGroupFlags::DUP),
            Profile::Dup
        );
        assert_eq!(
            profile_of(BlockGroupFlags::METADATA | BlockGroupFlags::RAID1C3),
            Profile::Raid1c3
        );
        assert_eq!(
            profile_of(BlockGroupFlags::DATA | BlockGroupFlags::RAID10),
            Profile::Raid10
        );
    }
}
