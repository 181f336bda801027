//! The small by-descriptor steps of the jobs that leave or read entries in a
//! directory a user named: the probe's scratch files and what killed probes
//! left, doctor's walk of dead bench runs' work directories, read-test's
//! file (its kind, its O_DIRECT reopen, its flags). Entries are never
//! followed through a link.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

pub(crate) use rustix::fs::Stat;

/// What an entry is, from its `lstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// Anything else (link, device, FIFO, socket).
    Other,
}

/// The kind of the entry `st` describes.
pub(crate) fn kind_of(st: &Stat) -> EntryKind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        _ => EntryKind::Other,
    }
}

/// Bytes allocated to the entry `st` describes.
pub(crate) fn allocated_bytes(st: &Stat) -> u64 {
    (st.st_blocks as u64).saturating_mul(512)
}

/// `lstat` of `name` in `dir` (not followed through a link).
pub(crate) fn stat_at(dir: impl AsFd, name: &OsStr) -> io::Result<Stat> {
    rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(Into::into)
}

/// `fstat` of an open file or directory.
pub(crate) fn stat_fd(fd: impl AsFd) -> io::Result<Stat> {
    rfs::fstat(fd).map_err(Into::into)
}

/// Unlinks the non-directory `name` in `dir`.
pub(crate) fn unlink_at(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    rfs::unlinkat(dir, name, AtFlags::empty()).map_err(Into::into)
}

/// Removes the empty directory `name` in `dir`.
pub(crate) fn rmdir_at(dir: impl AsFd, name: &OsStr) -> io::Result<()> {
    rfs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(Into::into)
}

/// Opens the directory `dir` again (its own descriptor, for a walk).
pub(crate) fn reopen_dir(dir: impl AsFd) -> io::Result<OwnedFd> {
    rfs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(Into::into)
}

/// Opens the directory `name` in `dir`, not following a link.
pub(crate) fn open_subdir_nofollow(dir: impl AsFd, name: &OsStr) -> io::Result<File> {
    rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map(File::from)
    .map_err(Into::into)
}

/// The names in the directory `dir` (without `.` and `..`), in the
/// kernel's order; an entry that cannot be read is an `Err` item.
pub(crate) fn entry_names(
    dir: impl AsFd,
) -> io::Result<impl Iterator<Item = io::Result<OsString>>> {
    let d = rfs::Dir::read_from(dir)?;
    Ok(d.filter_map(|e| match e {
        Ok(e) => {
            let n = e.file_name().to_bytes();
            (n != b"." && n != b"..").then(|| Ok(OsStr::from_bytes(n).to_owned()))
        }
        Err(e) => Some(Err(e.into())),
    }))
}

/// True when a process `pid` exists (or may: EPERM means it does).
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(p),
        Err(rustix::io::Errno::SRCH)
    )
}

/// The major and minor numbers of a device number.
pub(crate) fn major_minor(dev: u64) -> (u32, u32) {
    (rfs::major(dev), rfs::minor(dev))
}

/// Opens `name` in the held directory `dir` read-only (O_NONBLOCK and
/// O_NOCTTY added by [`crate::sys::fs::beneath::HeldDir::open_entry_file`]).
pub(crate) fn open_read_entry(
    dir: &crate::sys::fs::beneath::HeldDir,
    name: &OsStr,
) -> crate::error::Result<File> {
    dir.open_entry_file(name, OFlags::RDONLY)
}

/// Clears the status flags of `file` (O_NONBLOCK after the open).
pub(crate) fn clear_status_flags(file: &File) -> rustix::io::Result<()> {
    rfs::fcntl_setfl(file, OFlags::empty())
}

/// Sets O_DIRECT as the only status flag of `file`.
pub(crate) fn set_direct_flag(file: &File) -> rustix::io::Result<()> {
    rfs::fcntl_setfl(file, OFlags::DIRECT)
}

/// Opens the same open file again through `/proc/self/fd` (no name is
/// resolved again) with O_DIRECT, O_NONBLOCK and O_NOCTTY.
pub(crate) fn reopen_direct(file: &File) -> io::Result<File> {
    let again = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&again)
}

/// True when `name` in `dir` may be written by the effective user
/// (`faccessat(W_OK, AT_EACCESS)`, not following a link).
pub(crate) fn may_write_at(dir: impl AsFd, name: &OsStr) -> bool {
    rfs::accessat(
        dir,
        name,
        rfs::Access::WRITE_OK,
        AtFlags::EACCESS | AtFlags::SYMLINK_NOFOLLOW,
    )
    .is_ok()
}

/// True for EINVAL (an O_DIRECT open or read the filesystem refuses).
pub(crate) fn is_invalid(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// True for EOPNOTSUPP or EINVAL (a read flag the kernel lacks).
pub(crate) fn is_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
}
