//! The measuring jobs' file calls: stat kinds and times, O_DIRECT opens
//! beneath a held directory, preallocation; each a small safe function so
//! the jobs name no syscall crate.

use std::fs::File;
use std::os::fd::BorrowedFd;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, Stat};

use crate::error::{Error, Result};

/// A directory?
pub(crate) fn is_dir(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::Directory
}

/// A regular file?
pub(crate) fn is_regular(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
}

/// `fstat` of an open file.
pub(crate) fn fstat(file: &File, path: &Path) -> Result<Stat> {
    rustix::fs::fstat(file).map_err(|e| Error::from_io(&e.into(), "cannot stat", path))
}

/// The modification time (seconds, nanoseconds) of a stat.
pub(crate) fn mtime(st: &Stat) -> (i64, i64) {
    (st.st_mtime, st.st_mtime_nsec as i64)
}

/// Allocates `size` bytes of `file` from offset 0 (never written).
pub(crate) fn fallocate(file: &File, size: u64, path: &Path) -> Result<()> {
    rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, size)
        .map_err(|e| crate::error::Error::from_errno(e, "cannot fallocate", path))
}

/// What [`open_direct`] found.
pub(crate) enum DirectOpen {
    /// Open with O_DIRECT.
    Direct(File),
    /// The filesystem refuses O_DIRECT (EINVAL).
    Unsupported,
}

/// Opens `name` in `dir` with O_DIRECT (no link followed), for reading or
/// writing.
pub(crate) fn open_direct(
    dir: BorrowedFd<'_>,
    name: &str,
    write: bool,
    path: &Path,
) -> Result<DirectOpen> {
    match rustix::fs::openat(dir, name, access(write) | OFlags::DIRECT, Mode::empty()) {
        Ok(fd) => Ok(DirectOpen::Direct(File::from(fd))),
        Err(rustix::io::Errno::INVAL) => Ok(DirectOpen::Unsupported),
        Err(e) => Err(Error::from_io(&e.into(), "cannot open", path)),
    }
}

/// Opens `name` in `dir` for writing (no link followed): O_DIRECT where the
/// filesystem allows it, else buffered.
pub(crate) fn open_for_writing_direct_if_possible(
    dir: BorrowedFd<'_>,
    name: &str,
    path: &Path,
) -> Result<File> {
    let open = |flags| rustix::fs::openat(dir, name, flags, Mode::empty());
    open(access(true) | OFlags::DIRECT)
        .or_else(|_| open(access(true)))
        .map(File::from)
        .map_err(|e| Error::from_io(&e.into(), "cannot open", path))
}

fn access(write: bool) -> OFlags {
    let rw = if write {
        OFlags::WRONLY
    } else {
        OFlags::RDONLY
    };
    rw | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// The filesystem magic number (`statfs` f_type) of the one `file` is on.
// f_type's width differs between architectures.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn fs_magic(file: &File) -> Option<i64> {
    rustix::fs::fstatfs(file).ok().map(|st| st.f_type as i64)
}

/// A device number's (major, minor).
pub(crate) fn dev_numbers(dev: u64) -> (u32, u32) {
    (rustix::fs::major(dev as _), rustix::fs::minor(dev as _))
}

/// EFAULT: what reading a mapping past the end of its file gives.
pub(crate) fn is_bad_address(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::FAULT.raw_os_error())
}
