//! The mount table: the one reader of `/proc/<pid>/mountinfo` (under the
//! [`SysRoot`] prefix, through [`SysRoot::read_table`]: a regular file, at
//! most [`crate::sys::fs::root::TABLE_CAP`] bytes, no link followed in the
//! last component). The text is parsed by [`crate::parse::mountinfo`]; the
//! lookups every caller needs (by mount ID, by mount point, the first mount
//! of a type, the mount containing a path) are the pure functions below.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::parse::mountinfo::{MountEntry, mount_containing, parse_mountinfo};
use crate::sys::fs::root::SysRoot;

/// Whose mount table: this process's (`/proc/self/mountinfo`) or another
/// process's (`/proc/PID/mountinfo`: what that process sees, in its own
/// mount namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Of {
    /// `/proc/self/mountinfo`.
    This,
    /// `/proc/PID/mountinfo`.
    Pid(u32),
}

/// The path of the table `of` under `root`.
pub(crate) fn table_path(root: &SysRoot, of: Of) -> PathBuf {
    match of {
        Of::This => root.proc("self/mountinfo"),
        Of::Pid(pid) => root.proc(&format!("{pid}/mountinfo")),
    }
}

/// The mount table of this process (`<prefix>/proc/self/mountinfo`).
pub(crate) fn mount_table(root: &SysRoot) -> Result<Vec<MountEntry>> {
    mount_table_of(root, Of::This)
}

/// The mount table `of` (see [`Of`]); an unreadable table is an error that
/// names it.
pub(crate) fn mount_table_of(root: &SysRoot, of: Of) -> Result<Vec<MountEntry>> {
    let p = table_path(root, of);
    let text = root
        .read_table(&p)
        .map_err(|e| Error::from_io(&e, "cannot read", &p))?;
    Ok(parse_mountinfo(&text))
}

/// The mount with mount ID `id` (statx `STATX_MNT_ID`, fdinfo `mnt_id`).
pub(crate) fn by_id(table: &[MountEntry], id: u64) -> Option<&MountEntry> {
    table.iter().find(|m| u64::from(m.id) == id)
}

/// The mount on `mount_point` (the last one listed: the one on top when
/// mounts are stacked).
pub(crate) fn at_mount_point<'a>(
    table: &'a [MountEntry],
    mount_point: &Path,
) -> Option<&'a MountEntry> {
    table.iter().rev().find(|m| m.mount_point == mount_point)
}

/// Where the first mount of type `fs_type` (`debugfs`, `tracefs`) is.
pub(crate) fn first_of_type(table: &[MountEntry], fs_type: &str) -> Option<PathBuf> {
    table
        .iter()
        .find(|m| m.fs_type == fs_type)
        .map(|m| m.mount_point.clone())
}

/// Where a filesystem of type `fs_type` is mounted in this process's view,
/// if anywhere (an unreadable table counts as none).
pub(crate) fn find_type(root: &SysRoot, fs_type: &str) -> Option<PathBuf> {
    first_of_type(&mount_table(root).ok()?, fs_type)
}

/// The mount of this process's table that contains `path` (the deepest
/// mount point above it), or an error naming the path.
pub(crate) fn containing(root: &SysRoot, path: &Path) -> Result<MountEntry> {
    let table = mount_table(root)?;
    mount_containing(&table, path).cloned().ok_or_else(|| {
        Error::new(
            crate::error::ErrorKind::State,
            format!("no mount contains {}", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
25 1 0:7 / /sys/kernel/debug rw - debugfs debugfs rw
26 1 0:12 / /sys/kernel/tracing rw - tracefs tracefs rw
30 1 7:3 / /mnt/a rw - btrfs /dev/loop3 rw,space_cache=v2
31 30 7:4 / /mnt/a rw - ext4 /dev/loop4 rw
40 1 7:5 / /mnt/a/b rw - btrfs /dev/loop5 rw
";

    #[test]
    fn lookups() {
        let t = parse_mountinfo(TABLE);
        assert_eq!(by_id(&t, 40).unwrap().source, "/dev/loop5");
        assert!(by_id(&t, 41).is_none());
        // Stacked mounts: the one on top (listed last) answers.
        assert_eq!(
            at_mount_point(&t, Path::new("/mnt/a")).unwrap().fs_type,
            "ext4"
        );
        assert!(at_mount_point(&t, Path::new("/mnt")).is_none());
        assert_eq!(
            first_of_type(&t, "tracefs"),
            Some(PathBuf::from("/sys/kernel/tracing"))
        );
        assert_eq!(
            first_of_type(&t, "debugfs"),
            Some(PathBuf::from("/sys/kernel/debug"))
        );
        assert_eq!(first_of_type(&t, "nfs"), None);
    }

    #[test]
    fn reads_the_table_of_self_or_of_a_pid_under_the_prefix() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc/self")).unwrap();
        std::fs::create_dir_all(t.path().join("proc/77")).unwrap();
        std::fs::write(t.path().join("proc/self/mountinfo"), TABLE).unwrap();
        std::fs::write(
            t.path().join("proc/77/mountinfo"),
            "50 1 7:9 / / rw - xfs /dev/loop9 rw\n",
        )
        .unwrap();
        let root = SysRoot::new(t.path());
        assert_eq!(mount_table(&root).unwrap().len(), 6);
        let other = mount_table_of(&root, Of::Pid(77)).unwrap();
        assert_eq!(other.len(), 1);
        assert_eq!(other[0].fs_type, "xfs");
        assert_eq!(
            find_type(&root, "tracefs"),
            Some(PathBuf::from("/sys/kernel/tracing"))
        );
        assert_eq!(
            containing(&root, Path::new("/mnt/a/b/c")).unwrap().source,
            "/dev/loop5"
        );
        let e = mount_table_of(&root, Of::Pid(78)).unwrap_err();
        assert!(e.message().contains("proc/78/mountinfo"), "{}", e.message());
        // A table that is not a regular file is refused, not read.
        std::fs::create_dir_all(t.path().join("proc/79/mountinfo")).unwrap();
        assert!(mount_table_of(&root, Of::Pid(79)).is_err());
        assert_eq!(
            find_type(&SysRoot::new(t.path().join("none")), "tracefs"),
            None
        );
    }
}
