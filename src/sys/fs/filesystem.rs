//! What filesystem a path is on, and inode flags (NOCOW, compression).

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::errno::Errno;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::ioctl::{self, IFlags};
use crate::sys::proc::mountinfo;

pub use crate::sys::fs::beneath::DirFs;

/// Filesystems that keep file data in memory: O_DIRECT means nothing there
/// (tmpfs accepts the flag since Linux 6.6 and copies into page cache).
pub(crate) fn is_memory_backed(fs_type: &str) -> bool {
    matches!(
        fs_type,
        "tmpfs" | "ramfs" | "hugetlbfs" | "devtmpfs" | "proc" | "sysfs"
    )
}

/// Resolves `path`, checks it is a directory, and finds its filesystem.
pub(crate) fn inspect_dir(root: &SysRoot, path: &Path) -> Result<DirFs> {
    let meta = fs::metadata(path).map_err(|e| Error::from_io(&e, "cannot use", path))?;
    if !meta.is_dir() {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not a directory", path.display()),
        )
        .with_hint("give a directory on the filesystem to test"));
    }
    let dir = fs::canonicalize(path).map_err(|e| Error::from_io(&e, "cannot resolve", path))?;
    let mount = mountinfo::containing(root, &dir)?;
    let vfs = rustix::fs::statvfs(&dir)
        .map_err(|e| crate::error::Error::from_errno(e, "cannot statvfs", &dir))?;
    Ok(DirFs {
        read_only: vfs.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)
            || mount.is_read_only(),
        available_bytes: vfs.f_bavail.saturating_mul(vfs.f_frsize),
        dir,
        mount,
    })
}

/// [`inspect_dir`] of a directory held open (`sys::fs::beneath::HeldDir`):
/// its real path is read from the descriptor, its free space with
/// `fstatvfs`, so a path swapped after the open changes nothing.
pub(crate) fn inspect_held(
    root: &SysRoot,
    dir: &crate::sys::fs::beneath::HeldDir,
) -> Result<DirFs> {
    let real = fs::read_link(format!("/proc/self/fd/{}", dir.fd().as_raw_fd()))
        .map_err(|e| Error::from_io(&e, "cannot resolve", dir.path()))?;
    let mount = mountinfo::containing(root, &real)?;
    let vfs = rustix::fs::fstatvfs(dir.fd())
        .map_err(|e| crate::error::Error::from_errno(e, "cannot statvfs", &real))?;
    Ok(DirFs {
        read_only: vfs.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)
            || mount.is_read_only(),
        available_bytes: vfs.f_bavail.saturating_mul(vfs.f_frsize),
        dir: real,
        mount,
    })
}

/// Opens a directory without following a symbolic link in its last component.
pub(crate) fn open_dir(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::from_io(&e, "cannot open directory", path))
}

/// Inode flags of a file or directory; `None` if the filesystem has none.
pub fn inode_flags(path: &Path) -> Result<Option<IFlags>> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::from_io(&e, "cannot open", path))?;
    inode_flags_of(&f, path)
}

/// Inode flags of an open file or directory; `None` if the filesystem has none.
pub fn inode_flags_of(file: &File, path: &Path) -> Result<Option<IFlags>> {
    match ioctl::get_inode_flags(file.as_fd()) {
        Ok(flags) => Ok(Some(flags)),
        Err(Errno::ENOTTY | Errno::EOPNOTSUPP | Errno::EINVAL) => Ok(None),
        Err(e) => Err(Error::from_errno(e, "cannot read inode flags of", path)),
    }
}

/// Replaces the inode flags of an open file or directory.
pub fn set_inode_flags_of(file: &File, path: &Path, flags: IFlags) -> Result<()> {
    ioctl::set_inode_flags(file.as_fd(), flags).map_err(|e| match e {
        Errno::ENOTTY | Errno::EOPNOTSUPP => Error::new(
            ErrorKind::Unsupported,
            format!(
                "the filesystem of {} has no NOCOW attribute",
                path.display()
            ),
        ),
        e => Error::from_errno(e, "cannot set inode flags on", path),
    })
}

/// Sets NOCOW on a directory (files created in it afterwards inherit it) and
/// reads it back. The compression attribute excludes NOCOW: with
/// `clear_compression` it is dropped (for directories btrfs-lab just made),
/// otherwise it is an error.
pub fn set_nocow_dir(path: &Path, clear_compression: bool) -> Result<()> {
    set_nocow(&open_dir(path)?, path, clear_compression)
}

/// Sets NOCOW on an open directory or empty file and reads it back. btrfs
/// silently ignores the flag on a file that already holds data; the read-back
/// turns that into an error.
pub(crate) fn set_nocow(file: &File, path: &Path, clear_compression: bool) -> Result<()> {
    let mut flags = ioctl::get_inode_flags(file.as_fd())
        .map_err(|e| Error::from_errno(e, "cannot read inode flags of", path))?;
    if clear_compression {
        flags &= !ioctl::FS_COMPR_FL;
    }
    if flags.intersects(ioctl::FS_COMPR_FL) {
        return Err(compression_conflict(path, false));
    }
    // The property alone (a directory made in one with it inherits it; the
    // attribute, checked above, sets it too).
    let is_dir = file
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat", path))?
        .is_dir();
    if is_dir && compression_property_of(file, path)?.is_some() {
        if !clear_compression {
            return Err(compression_conflict(path, true));
        }
        crate::sys::kernel::xattrs::remove(file, path, "btrfs.compression")?;
    }
    set_inode_flags_of(file, path, flags | ioctl::FS_NOCOW_FL).map_err(|e| {
        if e.kind() == ErrorKind::Unsupported {
            e
        } else {
            Error::new(e.kind(), e.message().replace("inode flags", "NOCOW"))
                .with_hint(e.hint().unwrap_or_default())
        }
    })?;
    let back = ioctl::get_inode_flags(file.as_fd())
        .map_err(|e| Error::from_errno(e, "cannot read inode flags of", path))?;
    if !back.intersects(ioctl::FS_NOCOW_FL) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the filesystem of {} ignored the NOCOW attribute",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// The error for a path with the compression attribute, which btrfs does not
/// combine with NOCOW.
pub(crate) fn compression_conflict(path: &Path, property: bool) -> Error {
    Error::new(
        ErrorKind::WrongTarget,
        format!(
            "{} has the compression {}, which cannot be combined with NOCOW",
            path.display(),
            if property { "property" } else { "attribute" }
        ),
    )
    .with_hint(format!(
        "remove it first: {}",
        uncompress_command(path, property)
    ))
}

/// The command that takes compression off `path`: `chattr -c PATH`, or for
/// the `btrfs.compression` property `btrfs property set PATH compression ''`.
pub(crate) fn uncompress_command(path: &Path, property: bool) -> String {
    let p = path.display().to_string();
    if property {
        crate::report::text::display_argv(&["btrfs", "property", "set", &p, "compression", ""])
    } else {
        crate::report::text::display_argv(&["chattr", "-c", &p])
    }
}

/// The `btrfs.compression` property of an open file or directory (`btrfs
/// property set PATH compression ALGO`): the algorithm, `None` when it is
/// not set or says no compression (`no`, `none`).
pub fn compression_property_of(file: &File, path: &Path) -> Result<Option<String>> {
    let v = crate::sys::kernel::xattrs::get(file, path, "btrfs.compression")?;
    Ok(v.map(|b| {
        String::from_utf8_lossy(&b)
            .trim_end_matches('\0')
            .trim()
            .to_owned()
    })
    .filter(|s| !s.is_empty() && s != "no" && s != "none"))
}

/// A file mode (`st_mode`) of a directory.
pub(crate) fn is_directory_mode(mode: u32) -> bool {
    rustix::fs::FileType::from_raw_mode(mode) == rustix::fs::FileType::Directory
}

/// A file mode (`st_mode`) of a regular file.
pub(crate) fn is_regular_mode(mode: u32) -> bool {
    rustix::fs::FileType::from_raw_mode(mode) == rustix::fs::FileType::RegularFile
}

/// The owner (uid) and mode of an open file.
pub(crate) fn owner_and_mode(f: &File, path: &Path) -> Result<(u32, u32)> {
    let st = rustix::fs::fstat(f)
        .map_err(|e| crate::error::Error::from_errno(e, "cannot stat", path))?;
    Ok((st.st_uid, st.st_mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_backed_filesystems() {
        assert!(is_memory_backed("tmpfs"));
        assert!(is_memory_backed("ramfs"));
        assert!(!is_memory_backed("btrfs"));
        assert!(!is_memory_backed("ext4"));
    }

    #[test]
    fn inspect_dir_rejects_files_and_missing_paths() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        fs::write(&f, "x").unwrap();
        let e = inspect_dir(&SysRoot::host(), &f).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WrongTarget);
        let e = inspect_dir(&SysRoot::host(), &t.path().join("missing")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let ok = inspect_dir(&SysRoot::host(), t.path()).unwrap();
        assert!(ok.dir.is_absolute());
    }
}

/// Where a file or directory a program names (a VM image, a data
/// directory) lives: its mount, and on btrfs its fsid, data profiles and
/// NOCOW flag. Read through held descriptors: the directory reached as
/// [`crate::sys::fs::beneath::HeldDir`] does (a symbolic link another user
/// owns is refused), a file opened beneath it without following a link at
/// its name, regular files only; every query goes to the descriptors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathFacts {
    /// The mount that holds it.
    pub mount: Option<crate::parse::mountinfo::MountEntry>,
    /// btrfs fsid.
    pub fsid: Option<String>,
    /// btrfs data profiles.
    pub data_profiles: Vec<crate::model::profile::Profile>,
    /// Its inode flags (None: the filesystem has none).
    pub flags: Option<IFlags>,
}

/// [`PathFacts`] of `path`.
pub fn describe(root: &SysRoot, path: &Path) -> Result<PathFacts> {
    use crate::sys::fs::beneath::{HeldDir, open_beneath};
    use rustix::fs::{Mode, OFlags};
    let (dir, file) = match HeldDir::open(path) {
        Ok(d) => {
            let f = d.file()?;
            (d, f)
        }
        Err(e) if e.kind() == ErrorKind::WrongTarget => {
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let name = path.file_name().ok_or_else(|| {
                Error::new(
                    ErrorKind::WrongTarget,
                    format!("{}: no file name", path.display()),
                )
            })?;
            let d = HeldDir::open(parent)?;
            let fd = open_beneath(
                d.fd(),
                name,
                OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| Error::from_errno(e, "cannot open", path))?;
            let f = File::from(fd);
            let meta = f
                .metadata()
                .map_err(|e| Error::from_io(&e, "cannot stat", path))?;
            if !meta.is_file() {
                return Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!("{} is not a regular file", path.display()),
                ));
            }
            (d, f)
        }
        Err(e) => return Err(e),
    };
    let info = inspect_held(root, &dir)?;
    let mut facts = PathFacts {
        flags: inode_flags_of(&file, path)?,
        ..PathFacts::default()
    };
    if info.mount.fs_type == "btrfs" {
        let via = std::path::PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        facts.fsid = crate::sys::kernel::btrfs::fsid(&via).ok();
        facts.data_profiles = crate::sys::kernel::btrfs::data_profiles(&via).unwrap_or_default();
    }
    facts.mount = Some(info.mount);
    Ok(facts)
}
