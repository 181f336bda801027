//! Mounting and unmounting (the mount table is [`crate::sys::proc::mountinfo`]).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{AtFlags, StatxAttributes, StatxFlags};
use rustix::mount::{MountFlags, UnmountFlags};

use crate::error::{Error, ErrorKind, Result};
use crate::parse::mountinfo::MountEntry;
use crate::sys::fs::beneath::TrustedDir;
use crate::sys::fs::root::SysRoot;
use crate::sys::proc::mountinfo;

/// Mounts `source` (a block device) of type `fs_type` at `target`.
pub fn mount_device(
    source: &Path,
    target: &Path,
    fs_type: &str,
    options: Option<&str>,
) -> Result<()> {
    let data = options
        .map(std::ffi::CString::new)
        .transpose()
        .map_err(|_| Error::usage(format!("mount options {options:?} hold a NUL byte")))?;
    rustix::mount::mount(
        source,
        target,
        fs_type,
        MountFlags::empty(),
        data.as_deref(),
    )
    .map_err(|e| Error::from_errno(e, &format!("cannot mount {} at", source.display()), target))
}

/// Unmounts `target` (never lazily: a busy mount is reported, not hidden).
pub fn unmount(target: &Path) -> Result<()> {
    match rustix::mount::unmount(target, UnmountFlags::empty()) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::BUSY) => Err(Error::new(
            ErrorKind::Busy,
            format!("{} is busy: a process is using it", target.display()),
        )
        .with_hint(format!("find it with: fuser -vm {}", target.display()))),
        Err(e) => Err(Error::from_errno(e, "cannot unmount", target)),
    }
}

/// Mounts the block device `source` on the directory `name` inside the
/// trusted directory `dir`, `nosuid,nodev`: the target is the descriptor
/// opened without following links (through `/proc/self/fd`), so a path
/// swapped under us cannot redirect the mount.
pub(crate) fn mount_beneath(
    source: &Path,
    dir: &TrustedDir,
    name: &str,
    fs_type: &str,
) -> Result<()> {
    let target = dir.join(name);
    let fd = dir.open_path(name)?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::from_errno(e, "cannot stat", &target))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not a directory", target.display()),
        ));
    }
    let via = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::mount::mount(
        source,
        via.as_str(),
        fs_type,
        MountFlags::NOSUID | MountFlags::NODEV,
        None,
    )
    .map_err(|e| Error::from_errno(e, &format!("cannot mount {} at", source.display()), &target))
}

/// The mount whose root `fd` is, by its mount ID; `None` when `fd` is not
/// the root of a mount.
pub(crate) fn mount_rooted_at(
    root: &SysRoot,
    fd: BorrowedFd<'_>,
    path: &Path,
) -> Result<Option<MountEntry>> {
    let sx = rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::MNT_ID | StatxFlags::BASIC_STATS,
    )
    .map_err(|e| Error::from_errno(e, "cannot stat", path))?;
    let known = sx.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT);
    if known && !sx.stx_attributes.contains(StatxAttributes::MOUNT_ROOT) {
        return Ok(None);
    }
    if sx.stx_mask & StatxFlags::MNT_ID.bits() == 0 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the kernel does not report mount IDs (statx STATX_MNT_ID) for {}",
                path.display()
            ),
        )
        .with_hint("Linux 5.8 or newer is needed"));
    }
    let id = sx.stx_mnt_id;
    let table = mountinfo::mount_table(root)?;
    let entry = mountinfo::by_id(&table, id).cloned();
    Ok(entry.filter(|_| known))
}

/// What [`unmount_beneath`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unmounted {
    /// Nothing is mounted there.
    NotMounted,
    /// This mount was unmounted.
    Unmounted(MountEntry),
}

/// Unmounts what is mounted on `name` inside the trusted directory `dir`,
/// after checking, by the mount ID of the descriptor (not by path), that it
/// is a mount `is_ours` accepts; `UMOUNT_NOFOLLOW`, never lazily.
pub(crate) fn unmount_beneath(
    root: &SysRoot,
    dir: &TrustedDir,
    name: &str,
    is_ours: impl Fn(&MountEntry) -> bool,
) -> Result<Unmounted> {
    let target = dir.join(name);
    let fd = match dir.open_path(name) {
        Ok(fd) => fd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Unmounted::NotMounted),
        Err(e) => return Err(e),
    };
    let Some(entry) = mount_rooted_at(root, fd.as_fd(), &target)? else {
        return Ok(Unmounted::NotMounted);
    };
    // Our own descriptor on the mount's root would keep it busy.
    drop(fd);
    if !is_ours(&entry) {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{} holds {} ({}), which this sandbox did not mount; not touching it",
                target.display(),
                entry.source,
                entry.fs_type
            ),
        ));
    }
    match rustix::mount::unmount(&target, UnmountFlags::NOFOLLOW) {
        Ok(()) => {}
        Err(rustix::io::Errno::BUSY) => {
            return Err(Error::new(
                ErrorKind::Busy,
                format!("{} is busy: a process is using it", target.display()),
            )
            .with_hint(format!("find it with: fuser -vm {}", target.display())));
        }
        Err(e) => return Err(Error::from_errno(e, "cannot unmount", &target)),
    }
    Ok(Unmounted::Unmounted(entry))
}
