//! Per-name calls relative to a held directory descriptor, for `bench
//! --small-files`' storm: made, stat'ed and removed by name beneath the
//! work directory, never through a link, errors as [`Error`] naming the
//! path. The per-file calls take a C string (no allocation per file).

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::error::{Error, Result};

/// Makes the directory `name` (mode 0700) in `dir`.
pub(crate) fn make_private_dir(dir: &OwnedFd, name: &str, path: &Path) -> Result<()> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))
        .map_err(|e| Error::from_io(&e.into(), "cannot create", &path.join(name)))
}

/// Removes the empty directory `name` from `dir`.
pub(crate) fn remove_dir(dir: &OwnedFd, name: &str, path: &Path) -> Result<()> {
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
        .map_err(|e| Error::from_io(&e.into(), "cannot remove", &path.join(name)))
}

/// Opens the directory `name` in `dir` (no link followed).
pub(crate) fn open_dir(dir: &OwnedFd, name: &str, path: &Path) -> Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| Error::from_io(&e.into(), "cannot open", &path.join(name)))
}

/// Creates the empty file `name` (mode 0600, O_EXCL, no link followed) in
/// `dir` and closes it.
pub(crate) fn create_empty(dir: &OwnedFd, name: &CStr) -> std::io::Result<()> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o600),
    )
    .map(drop)
    .map_err(std::io::Error::from)
}

/// Stats `name` in `dir` (no link followed), for the inode it brings in.
pub(crate) fn stat(dir: &OwnedFd, name: &CStr) -> std::io::Result<()> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map(drop)
        .map_err(std::io::Error::from)
}

/// Removes the file `name` from `dir`.
pub(crate) fn unlink(dir: &OwnedFd, name: &CStr) -> std::io::Result<()> {
    rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(std::io::Error::from)
}

/// `syncfs` of the filesystem under `dir`; returns the seconds it took.
pub(crate) fn timed_syncfs(dir: &OwnedFd, path: &Path) -> Result<f64> {
    let t = Instant::now();
    rustix::fs::syncfs(dir.as_fd()).map_err(|e| Error::from_io(&e.into(), "cannot sync", path))?;
    Ok(t.elapsed().as_secs_f64())
}
