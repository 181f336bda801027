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
use crate::error::Error;
use crate::error::Result;

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
        Err(e) => Err(Error::from_errno(e, doing, path)),
    }
}

/// Opens the directory `rel` below `root` without leaving it and without
/// following a link ([`super::beneath::open_dir_beneath`]); `None` when
/// what is there now is not that directory (a link, another mount, gone).
pub(crate) fn open_dir_beneath(root: &File, rel: &Path, shown: &Path) -> Result<Option<OwnedFd>> {
    match super::beneath::open_dir_beneath(root.as_fd(), rel) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::LOOP | Errno::XDEV | Errno::NOTDIR | Errno::NOENT) => Ok(None),
        Err(e) => Err(Error::from_errno(e, "cannot open directory", shown)),
    }
}

/// The names in the directory `dir` (`.` and `..` left out), each with its
/// kind as the directory tells it (d_type: no stat per entry); `None`
/// where the filesystem does not tell ([`kind_at`]).
pub(crate) fn names_and_kinds(dir: &File, path: &Path) -> Result<Vec<(OsString, Option<Kind>)>> {
    let listing =
        rfs::Dir::read_from(dir).map_err(|e| Error::from_errno(e, "cannot list", path))?;
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

// nocow --migrate's calls on the files it copies and swaps.

/// An errno, as the lease calls (`sys::kernel::lease`) return it.
pub(crate) use nix::errno::Errno as MigrateErrno;
/// A file's status as the migration compares it before and after.
pub(crate) use nix::sys::stat::FileStat;

/// An exclusive lock on an open directory (flock: it goes with the
/// process, SIGKILL included).
pub(crate) type DirLock = nix::fcntl::Flock<File>;

/// Locks the directory `f` (`path`) exclusively, without waiting: `None`
/// when another process holds it.
pub(crate) fn try_lock_dir(f: File, path: &Path) -> Result<Option<DirLock>> {
    use nix::fcntl::{Flock, FlockArg};
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(Some(l)),
        Err((_, MigrateErrno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(crate::error::Error::from_errno(
            e,
            "cannot lock directory",
            path,
        )),
    }
}

/// The status of the entry `name` of `dir` (not through a link).
pub(crate) fn stat_at(dir: &File, name: &OsStr, path: &Path) -> Result<FileStat> {
    nix::sys::stat::fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| crate::error::Error::from_errno(e, "cannot stat", path))
}

/// The status of the open file `f` (`path`, for the error).
pub(crate) fn stat_of(f: &File, path: &Path) -> Result<FileStat> {
    nix::sys::stat::fstat(f.as_fd())
        .map_err(|e| crate::error::Error::from_errno(e, "cannot stat", path))
}

/// Opens the entry `name` of `dir` for reading, not through a link, without
/// blocking, and without changing its access time (O_NOATIME, which only
/// the owner or CAP_FOWNER may ask for: without it otherwise).
pub(crate) fn open_keeping_atime(dir: &File, name: &OsStr, path: &Path) -> Result<File> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    match rfs::openat(dir.as_fd(), name, flags | OFlags::NOATIME, Mode::empty()) {
        Err(Errno::PERM) => rfs::openat(dir.as_fd(), name, flags, Mode::empty()),
        other => other,
    }
    .map(File::from)
    .map_err(|e| Error::from_errno(e, "cannot open", path))
}

/// Removes the file `name` of `dir` (`doing` and `path` for the error).
pub(crate) fn unlink_file(dir: &File, name: &OsStr, doing: &str, path: &Path) -> Result<()> {
    rfs::unlinkat(dir.as_fd(), name, AtFlags::empty())
        .map_err(|e| Error::from_errno(e, doing, path))
}

/// Sets the access and modification times of `f` to those of `st`.
pub(crate) fn set_times_of(f: &File, st: &FileStat, doing: &str, path: &Path) -> Result<()> {
    use nix::sys::time::TimeSpec;
    nix::sys::stat::futimens(
        f.as_fd(),
        &TimeSpec::new(st.st_atime, st.st_atime_nsec),
        &TimeSpec::new(st.st_mtime, st.st_mtime_nsec),
    )
    .map_err(|e| crate::error::Error::from_errno(e, doing, path))
}

/// Exchanges the entries `a` and `b` of `dir` at once (RENAME_EXCHANGE).
pub(crate) fn exchange(dir: &File, a: &OsStr, b: &OsStr, doing: &str, path: &Path) -> Result<()> {
    rfs::renameat_with(dir, a, dir, b, rfs::RenameFlags::EXCHANGE)
        .map_err(|e| Error::from_errno(e, doing, path))
}
