//! The audit model: what each file and directory is, from facts already
//! read. Pure: the walk that gathers the facts is in `scan.rs`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::model::profile::Profile;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::kernel::ioctl::{FS_APPEND_FL, FS_COMPR_FL, FS_IMMUTABLE_FL, FS_NOCOW_FL, IFlags};
use crate::sys::proc::procs::Opener;

/// A file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
}

/// What an entry needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EntryState {
    /// Carries NOCOW.
    Nocow,
    /// An empty file without NOCOW: the flag can still be set in place.
    Switchable,
    /// A file with data and without NOCOW: only a copy into a new NOCOW file helps.
    NeedsMigration,
    /// Needs migration, but cannot be replaced safely (see `reason`).
    Blocked,
    /// A temporary file left by an interrupted migration (btrfs-lab's marker).
    Leftover,
    /// A directory without NOCOW: files created in it will not be NOCOW.
    NotNocow,
    /// A directory with the compression attribute, which excludes NOCOW.
    Compressed,
}

impl EntryState {
    /// The words in the text table.
    pub fn label(self) -> &'static str {
        match self {
            EntryState::Nocow => "nocow",
            EntryState::Switchable => "switchable",
            EntryState::NeedsMigration => "needs migration",
            EntryState::Blocked => "blocked",
            EntryState::Leftover => "leftover",
            EntryState::NotNocow => "not nocow",
            EntryState::Compressed => "compressed",
        }
    }
}

/// The facts about one file or directory that the audit decides from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    /// File or directory.
    pub kind: EntryKind,
    /// Inode flags (FS_IOC_GETFLAGS).
    pub flags: IFlags,
    /// `st_size`.
    pub size_bytes: u64,
    /// `st_nlink`.
    pub links: u64,
    /// The name starts with btrfs-lab's temporary prefix.
    pub(crate) temp_name: bool,
    /// btrfs-lab's marker attribute is set.
    pub marker: bool,
}

/// Decides what an entry needs, and why when it cannot get it.
pub(crate) fn classify(f: &Facts) -> (EntryState, Option<String>) {
    let nocow = f.flags.intersects(FS_NOCOW_FL);
    if f.kind == EntryKind::Directory {
        return match (nocow, f.flags.intersects(FS_COMPR_FL)) {
            (true, _) => (EntryState::Nocow, None),
            (false, true) => (
                EntryState::Compressed,
                Some("the compression attribute excludes NOCOW (chattr -c removes it)".to_owned()),
            ),
            (false, false) => (EntryState::NotNocow, None),
        };
    }
    if f.temp_name && f.marker {
        return (
            EntryState::Leftover,
            Some("left by an interrupted migration; the original is intact".to_owned()),
        );
    }
    let note = f.temp_name.then(|| {
        "named like a btrfs-lab temporary file but without its marker: not ours, left alone"
            .to_owned()
    });
    if nocow {
        return (EntryState::Nocow, note);
    }
    if f.size_bytes == 0 {
        return (EntryState::Switchable, note);
    }
    if f.flags.intersects(FS_IMMUTABLE_FL | FS_APPEND_FL) {
        return (
            EntryState::Blocked,
            Some(
                "immutable or append-only (lsattr shows i or a): it cannot be replaced".to_owned(),
            ),
        );
    }
    if f.links > 1 {
        return (
            EntryState::Blocked,
            Some(format!(
                "has {} hard links: a copy would separate them",
                f.links
            )),
        );
    }
    (EntryState::NeedsMigration, note)
}

/// One audited file or directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Entry {
    /// Absolute path.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// The exact bytes of `path` (an array of 0-255), present only when
    /// they are not UTF-8 (`path` then shows U+FFFD in their place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
    /// As shown to the user: the path given plus the part below it.
    #[serde(skip)]
    pub display: String,
    /// File or directory.
    pub kind: EntryKind,
    /// What it needs.
    pub state: EntryState,
    /// Carries NOCOW.
    pub nocow: bool,
    /// Carries the compression attribute (`chattr +c`), or for a directory
    /// the `btrfs.compression` property (`btrfs property set`).
    pub compression_attr: bool,
    /// A directory's `btrfs.compression` property (the algorithm), when it
    /// is set without the attribute (which sets it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_property: Option<String>,
    /// `st_size` (0 for directories).
    pub size_bytes: u64,
    /// Bytes allocated (`st_blocks` × 512; 0 for directories).
    pub allocated_bytes: u64,
    /// Has holes: fewer bytes allocated than its size.
    pub sparse: bool,
    /// Hard links.
    pub links: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Permission bits (with setuid, setgid, sticky).
    pub mode: u32,
    /// Processes that have it open.
    pub open_by: Vec<Opener>,
    /// Why it is blocked, or a note.
    pub reason: Option<String>,
    /// btrfs-lab's marker attribute is set (on a file that is not a leftover:
    /// a migration that was interrupted just after its rename).
    pub marker: bool,
    /// Device and inode.
    #[serde(skip)]
    pub id: FileIdentity,
    /// Device and inode of the directory it is in.
    #[serde(skip)]
    pub(crate) dir_id: FileIdentity,
    /// Inode flags.
    #[serde(skip, default = "IFlags::empty")]
    pub flags: IFlags,
}

/// The filesystem an audited path is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RootInfo {
    /// As given.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// Canonical.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub dir: PathBuf,
    /// A directory (else a single file).
    pub is_dir: bool,
    /// Filesystem type.
    pub fs_type: String,
    /// Its mount point.
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub mount_point: PathBuf,
    /// Its source device.
    pub source: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// Data profiles (btrfs; empty elsewhere).
    pub data_profiles: Vec<Profile>,
    /// Mount options that change how data is written: nodatacow, nodatasum,
    /// compress, compress-force.
    pub mount_options: Vec<String>,
    /// The path itself carries NOCOW (null when not btrfs).
    pub nocow: Option<bool>,
    /// The path carries the compression attribute (or, a directory, the
    /// `btrfs.compression` property).
    pub compression_attr: Option<bool>,
    /// A directory's `btrfs.compression` property, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_property: Option<String>,
    /// The root of a btrfs subvolume.
    pub subvolume: bool,
    /// Bytes free for new data (statvfs f_bavail; an estimate on btrfs).
    pub available_bytes: u64,
    /// Why nothing was looked at below it (not btrfs).
    pub note: Option<String>,
}

impl RootInfo {
    /// NOCOW means something here.
    pub fn is_btrfs(&self) -> bool {
        self.fs_type == "btrfs"
    }

    /// The data profiles that keep more than one copy of data.
    pub(crate) fn duplicating_profiles(&self) -> Vec<Profile> {
        self.data_profiles
            .iter()
            .copied()
            .filter(|p| p.duplicates_data())
            .collect()
    }
}

/// Counts and bytes over the audited entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    /// Regular files (leftovers not counted).
    pub files: u64,
    /// Of which NOCOW.
    pub nocow_files: u64,
    /// Their size.
    pub nocow_bytes: u64,
    /// Empty files without NOCOW.
    pub switchable_files: u64,
    /// Files with data without NOCOW that can be migrated.
    pub needs_migration_files: u64,
    /// Their size.
    pub needs_migration_bytes: u64,
    /// Files without NOCOW that cannot be migrated.
    pub blocked_files: u64,
    /// Their size.
    pub blocked_bytes: u64,
    /// Files (any state) that a process has open.
    pub open_files: u64,
    /// Temporary files left by interrupted migrations.
    pub leftovers: u64,
    /// Directories below the audited paths.
    pub directories: u64,
    /// Of which NOCOW.
    pub nocow_directories: u64,
    /// The most space one migration needs: the largest allocation among the
    /// files that need migration.
    pub largest_migration_bytes: u64,
}

/// Adds up the entries.
pub(crate) fn summarize(entries: &[Entry]) -> Summary {
    let mut s = Summary::default();
    for e in entries {
        if e.kind == EntryKind::Directory {
            s.directories += 1;
            s.nocow_directories += u64::from(e.state == EntryState::Nocow);
            continue;
        }
        if e.state == EntryState::Leftover {
            s.leftovers += 1;
            continue;
        }
        s.files += 1;
        s.open_files += u64::from(!e.open_by.is_empty());
        match e.state {
            EntryState::Nocow => {
                s.nocow_files += 1;
                s.nocow_bytes += e.size_bytes;
            }
            EntryState::Switchable => s.switchable_files += 1,
            EntryState::NeedsMigration => {
                s.needs_migration_files += 1;
                s.needs_migration_bytes += e.size_bytes;
                s.largest_migration_bytes = s.largest_migration_bytes.max(e.allocated_bytes);
            }
            EntryState::Blocked => {
                s.blocked_files += 1;
                s.blocked_bytes += e.size_bytes;
            }
            _ => {}
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(flags: IFlags, size: u64, links: u64) -> Facts {
        Facts {
            kind: EntryKind::File,
            flags,
            size_bytes: size,
            links,
            temp_name: false,
            marker: false,
        }
    }

    #[test]
    fn files_are_classified() {
        assert_eq!(classify(&file(FS_NOCOW_FL, 10, 1)).0, EntryState::Nocow);
        assert_eq!(
            classify(&file(IFlags::empty(), 0, 1)).0,
            EntryState::Switchable
        );
        assert_eq!(classify(&file(FS_COMPR_FL, 0, 1)).0, EntryState::Switchable);
        assert_eq!(
            classify(&file(IFlags::empty(), 1, 1)).0,
            EntryState::NeedsMigration
        );
        let (s, why) = classify(&file(IFlags::empty(), 1, 3));
        assert_eq!(s, EntryState::Blocked);
        assert!(why.unwrap().contains("3 hard links"));
        assert_eq!(
            classify(&file(FS_IMMUTABLE_FL, 5, 1)).0,
            EntryState::Blocked
        );
        // NOCOW wins over links: nothing to do for it.
        assert_eq!(classify(&file(FS_NOCOW_FL, 5, 2)).0, EntryState::Nocow);
    }

    #[test]
    fn leftovers_need_name_and_marker() {
        let mut f = file(FS_NOCOW_FL, 5, 1);
        f.temp_name = true;
        let (s, why) = classify(&f);
        assert_eq!(s, EntryState::Nocow);
        assert!(why.unwrap().contains("not ours"));
        f.marker = true;
        assert_eq!(classify(&f).0, EntryState::Leftover);
        f.temp_name = false;
        assert_eq!(classify(&f).0, EntryState::Nocow);
    }

    #[test]
    fn directories_are_classified() {
        let d = |flags| Facts {
            kind: EntryKind::Directory,
            flags,
            size_bytes: 0,
            links: 2,
            temp_name: false,
            marker: false,
        };
        assert_eq!(classify(&d(FS_NOCOW_FL)).0, EntryState::Nocow);
        assert_eq!(classify(&d(IFlags::empty())).0, EntryState::NotNocow);
        assert_eq!(classify(&d(FS_COMPR_FL)).0, EntryState::Compressed);
    }

    #[test]
    fn summary_adds_up() {
        let e = |state, size, alloc, kind| Entry {
            path: PathBuf::from("/x"),
            path_bytes: None,
            display: "x".into(),
            kind,
            state,
            nocow: state == EntryState::Nocow,
            compression_attr: false,
            compression_property: None,
            size_bytes: size,
            allocated_bytes: alloc,
            sparse: alloc < size,
            links: 1,
            uid: 0,
            gid: 0,
            mode: 0o644,
            open_by: Vec::new(),
            reason: None,
            marker: false,
            id: FileIdentity { dev: 1, ino: 2 },
            dir_id: FileIdentity { dev: 1, ino: 1 },
            flags: IFlags::empty(),
        };
        let s = summarize(&[
            e(EntryState::Nocow, 10, 10, EntryKind::File),
            e(EntryState::NeedsMigration, 100, 40, EntryKind::File),
            e(EntryState::NeedsMigration, 50, 50, EntryKind::File),
            e(EntryState::Switchable, 0, 0, EntryKind::File),
            e(EntryState::Blocked, 7, 8, EntryKind::File),
            e(EntryState::Leftover, 7, 8, EntryKind::File),
            e(EntryState::NotNocow, 0, 0, EntryKind::Directory),
            e(EntryState::Nocow, 0, 0, EntryKind::Directory),
        ]);
        assert_eq!(s.files, 5);
        assert_eq!(s.nocow_files, 1);
        assert_eq!(s.nocow_bytes, 10);
        assert_eq!(s.needs_migration_files, 2);
        assert_eq!(s.needs_migration_bytes, 150);
        assert_eq!(s.largest_migration_bytes, 50);
        assert_eq!(s.switchable_files, 1);
        assert_eq!(s.blocked_files, 1);
        assert_eq!(s.leftovers, 1);
        assert_eq!(s.directories, 2);
        assert_eq!(s.nocow_directories, 1);
    }
}
