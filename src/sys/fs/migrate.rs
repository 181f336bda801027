//! The file-system calls of `nocow`'s walk: entries opened in the
//! directory the walk holds, never through a link, and a directory's
//! names with their kinds (d_type).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::rescue::{Kind, kind};
use crate::error::Result;
use crate::sys::kernel::errno::to_error;

/// Opens the entry `name` of `dir` (never through a link): the directory
/// with `directory`, otherwise whatever it is, without blocking (a FIFO);
/// `None` when it is gone, or is a link (or, for a directory, is not one).
pub(crate) fn open_entry(
    dir: &File,
    name: &OsStr,
    directory: bool,
    path: &Path,
) -> Result<Option<File>> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let (flags, doing) = if directory {
        (flags | OFlags::DIRECTORY, "cannot open directory")
    } else {
        (flags | OFlags::NONBLOCK, "cannot open")
    };
    match rfs::openat(dir.as_fd(), name, flags, Mode::empty()) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(Errno::NOENT | Errno::LOOP) => Ok(None),
        Err(Errno::NOTDIR) if directory => Ok(None),
        Err(e) => Err(to_error(e, doing, path)),
    }
}

/// Opens the directory `rel` below `root` without leaving it and without
/// following a link ([`super::beneath::open_dir_beneath`]); `None` when
/// what is there now is not that directory (a link, another mount, gone).
pub(crate) fn open_dir_beneath(root: &File, rel: &Path, shown: &Path) -> Result<Option<OwnedFd>> {
    match super::beneath::open_dir_beneath(root.as_fd(), rel) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::LOOP | Errno::XDEV | Errno::NOTDIR | Errno::NOENT) => Ok(None),
        Err(e) => Err(to_error(e, "cannot open directory", shown)),
    }
}

/// The names in the directory `dir` (`.` and `..` left out), each with its
/// kind as the directory tells it (d_type: no stat per entry); `None`
/// where the filesystem does not tell ([`kind_at`]).
pub(crate) fn names_and_kinds(dir: &File, path: &Path) -> Result<Vec<(OsString, Option<Kind>)>> {
    let listing = rfs::Dir::read_from(dir).map_err(|e| to_error(e, "cannot list", path))?;
    Ok(listing
        .filter_map(|e| e.ok())
        .map(|e| {
            let kind = match e.file_type() {
                FileType::Directory => Some(Kind::Directory),
                FileType::RegularFile => Some(Kind::Regular),
                FileType::Symlink => Some(Kind::Symlink),
                FileType::Unknown => None,
                _ => Some(Kind::Other),
            };
            (OsString::from_vec(e.file_name().to_bytes().to_vec()), kind)
        })
        .filter(|(n, _)| n != "." && n != "..")
        .collect())
}

/// The kind of the entry `name` of `dir`, from its status (not through a
/// link); `None` when it is gone.
pub(crate) fn kind_at(dir: &File, name: &OsStr) -> Option<Kind> {
    rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .ok()
        .map(|st| kind(&st))
}
