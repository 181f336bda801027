//! The scrub ioctls as btrfs-lab's scrub uses them, on the filesystem held:
//! one device's scrub (blocking, from a start offset), its progress, the
//! cancel; errors as the crate's, naming the mount point.

use std::os::fd::BorrowedFd;
use std::path::Path;

use btrfs_uapi::scrub::ScrubProgress;
use nix::errno::Errno;

use super::btrfs::FsHandle;
use crate::error::{Error, Result};

/// Scrubs device `devid` of `fs` from physical byte `start` to its end;
/// blocks until it is done or cancelled: the counters, and whether it was
/// cancelled. For a worker thread of its own (`fs` a clone of the handle).
pub fn device(
    fs: &FsHandle,
    devid: u64,
    start: u64,
    readonly: bool,
) -> Result<(ScrubProgress, bool)> {
    fs.held_fd_errno()
        .and_then(|fd| super::ioctl::scrub_device(fd, devid, start, readonly))
        .map_err(|e| Error::from_errno(e, &format!("cannot scrub device {devid} of"), fs.path()))
}

/// Device `devid`'s counters while a scrub runs on it (`None`: none runs).
pub fn progress(fd: BorrowedFd<'_>, devid: u64, mount: &Path) -> Result<Option<ScrubProgress>> {
    btrfs_uapi::scrub::scrub_progress(fd, devid)
        .map_err(|e| Error::from_errno(e, "cannot read the scrub progress of", mount))
}

/// Cancels the running scrub (the kernel keeps `last_physical`): `false`
/// when none runs (ENOTCONN).
pub fn cancel(fd: BorrowedFd<'_>, mount: &Path) -> Result<bool> {
    match btrfs_uapi::scrub::scrub_cancel(fd) {
        Ok(()) => Ok(true),
        Err(Errno::ENOTCONN) => Ok(false),
        Err(e) => Err(Error::from_errno(e, "cannot cancel the scrub of", mount)),
    }
}
