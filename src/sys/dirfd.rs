//! Creating directories and subvolumes relative to a held directory
//! descriptor, so that no path is resolved again between the check and the
//! change.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, mkdirat};

use crate::error::{Error, ErrorKind, Result};

/// Creates the directory `name` in `dir` (mode 0777 less the umask) and
/// opens it without following a link. `path` is for messages.
pub fn mkdir_at(dir: &File, name: &OsStr, path: &Path) -> Result<File> {
    mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(0o777))
        .map_err(|e| Error::from_errno(e, "cannot create", path))?;
    open_dir_at(dir, name, path)
}

/// Creates the btrfs subvolume `name` in `dir` and opens it.
pub fn create_subvolume_at(dir: &File, name: &OsStr, path: &Path) -> Result<File> {
    let c = CString::new(name.as_bytes())
        .map_err(|_| Error::usage(format!("bad subvolume name {}", path.display())))?;
    btrfs_uapi::subvolume::subvolume_create(dir.as_fd(), &c, &[]).map_err(|e| match e {
        Errno::ENOTTY | Errno::EINVAL | Errno::EOPNOTSUPP => Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not on a btrfs filesystem", path.display()),
        ),
        Errno::EEXIST => Error::new(
            ErrorKind::WrongTarget,
            format!("cannot create subvolume {}: it exists", path.display()),
        ),
        e => Error::from_errno(e, "cannot create subvolume", path),
    })?;
    open_dir_at(dir, name, path)
}

/// Opens the directory `name` of `dir`, never through a link.
pub(crate) fn open_dir_at(dir: &File, name: &OsStr, path: &Path) -> Result<File> {
    openat(
        dir.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
    .map_err(|e| Error::from_errno(e, "cannot open directory", path))
}
