//! Mounting and unmounting, and the mount table.

use std::fs;
use std::path::Path;

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};

use super::root::SysRoot;
use crate::error::{Error, ErrorKind, Result};
use crate::parse::mountinfo::{MountEntry, parse_mountinfo};

/// The mount table of this process.
pub fn mount_table(root: &SysRoot) -> Result<Vec<MountEntry>> {
    let p = root.proc("self/mountinfo");
    let text = fs::read_to_string(&p).map_err(|e| Error::from_io(&e, "cannot read", &p))?;
    Ok(parse_mountinfo(&text))
}

/// Mounts `source` (a block device) of type `fs_type` at `target`.
pub fn mount_device(
    source: &Path,
    target: &Path,
    fs_type: &str,
    options: Option<&str>,
) -> Result<()> {
    mount(
        Some(source),
        target,
        Some(fs_type),
        MsFlags::empty(),
        options,
    )
    .map_err(|e| Error::from_errno(e, &format!("cannot mount {} at", source.display()), target))
}

/// Unmounts `target` (never lazily: a busy mount is reported, not hidden).
pub fn unmount(target: &Path) -> Result<()> {
    match umount2(target, MntFlags::empty()) {
        Ok(()) => Ok(()),
        Err(Errno::EBUSY) => Err(Error::new(
            ErrorKind::Busy,
            format!("{} is busy: a process is using it", target.display()),
        )
        .with_hint(format!("find it with: fuser -vm {}", target.display()))),
        Err(e) => Err(Error::from_errno(e, "cannot unmount", target)),
    }
}
