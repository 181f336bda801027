//! Which mounted btrfs a path is on, and every mounted btrfs: what each job
//! resolves its MOUNT argument with (space, admin, doctor).

use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::parse::mountinfo::MountEntry;
use crate::sys::fs::beneath::HeldDir;
use crate::sys::fs::root::SysRoot;
use crate::sys::{fs::filesystem, kernel::btrfs, proc::mountinfo};

/// A mounted btrfs that a command was pointed at.
#[derive(Debug, Clone)]
pub struct BtrfsTarget {
    /// The path given, canonical.
    pub path: PathBuf,
    /// The mount that contains it.
    pub mount: MountEntry,
    /// Filesystem UUID.
    pub fsid: String,
}

/// Resolves `path` to a mounted btrfs, or says clearly why not
/// ([`resolve_held`], the handle dropped).
pub fn resolve(root: &SysRoot, path: &Path) -> Result<BtrfsTarget> {
    resolve_held(root, path).map(|(t, _)| t)
}

/// Opens `path` once and holds it ([`HeldDir::open`]: reached from `/`
/// without following a symbolic link another user owns; such a link is
/// refused with the reason), then finds its mount and fsid from that
/// descriptor: the plan and every ioctl are for the filesystem held, never
/// for a name resolved again. A file inside the filesystem is fine too (its
/// directory is held).
pub fn resolve_held(root: &SysRoot, path: &Path) -> Result<(BtrfsTarget, btrfs::FsHandle)> {
    let held = HeldDir::open(path).or_else(|e| {
        // A file inside the filesystem is fine too.
        if e.kind() == ErrorKind::WrongTarget {
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            HeldDir::open(parent)
        } else {
            Err(e)
        }
    })?;
    let info = filesystem::inspect_held(root, &held)?;
    if info.mount.fs_type != "btrfs" {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not on a btrfs filesystem (it is on {}, mounted at {})", path.display(), info.mount.fs_type, info.mount.mount_point.display()),
        )
        .with_hint("give a path inside a mounted btrfs (its mount point or any directory in it; findmnt -t btrfs lists them)"));
    }
    let handle = btrfs::FsHandle::from_held(held.file()?, &info.dir)?;
    Ok((
        BtrfsTarget {
            path: info.dir,
            mount: info.mount,
            fsid: handle.fsid().to_owned(),
        },
        handle,
    ))
}

/// Features enabled on a mounted btrfs (`/sys/fs/btrfs/<fsid>/features/`), sorted.
pub fn features(root: &SysRoot, fsid: &str) -> Vec<String> {
    crate::sys::block::blockdev::list_dir(&root.sys(&format!("fs/btrfs/{fsid}/features")))
}

/// Every mounted btrfs, one entry per filesystem (the first mount of each).
pub fn mounted_btrfs(root: &SysRoot) -> Result<Vec<BtrfsTarget>> {
    Ok(btrfs_mounts(root)?
        .into_iter()
        .filter_map(|(fsid, mounts)| {
            let m = mounts.into_iter().next()?;
            Some(BtrfsTarget {
                path: m.mount_point.clone(),
                mount: m,
                fsid,
            })
        })
        .collect())
}

/// Every mounted btrfs with all its mounts (a subvolume mounted on its
/// own, a bind mount), in the mount table's order, by filesystem UUID.
pub fn btrfs_mounts(root: &SysRoot) -> Result<Vec<(String, Vec<MountEntry>)>> {
    let mut seen: Vec<(String, Vec<MountEntry>)> = Vec::new();
    for m in mountinfo::mount_table(root)?
        .into_iter()
        .filter(|m| m.fs_type == "btrfs")
    {
        let Ok(fsid) = btrfs::fsid(&m.mount_point) else {
            continue;
        };
        match seen.iter_mut().find(|(f, _)| *f == fsid) {
            Some((_, mounts)) => mounts.push(m),
            None => seen.push((fsid, vec![m])),
        }
    }
    Ok(seen)
}
