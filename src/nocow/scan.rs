//! The walk that gathers the audit's facts: inode flags through the ioctl,
//! sizes and allocation from stat, btrfs-lab's marker attribute, and which
//! processes have the files open. Symbolic links are never followed and
//! other mounts are not entered.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::audit::{Entry, EntryKind, Facts, RootInfo, classify};
use super::{MARKER_XATTR, TEMP_PREFIX};
use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs as sysfs;
use crate::sys::ioctl::{FS_COMPR_FL, FS_NOCOW_FL};
use crate::sys::loopdev::FileIdentity;
use crate::sys::root::SysRoot;
use crate::sys::{btrfs, mounts, procs, xattrs};

/// What the walk found below one path.
#[derive(Debug, Clone)]
pub struct Scan {
    /// The path and its filesystem.
    pub root: RootInfo,
    /// Files and directories below it (the path itself when it is a file),
    /// in path order.
    pub entries: Vec<Entry>,
    /// What was not looked at, and why.
    pub skipped: Vec<String>,
    /// Processes whose open files could not be read (not root).
    pub unreadable_processes: usize,
}

/// Looks at an existing path and the filesystem it is on.
pub fn inspect_root(sysroot: &SysRoot, path: &Path) -> Result<RootInfo> {
    let meta = fs::metadata(path).map_err(|e| Error::from_io(&e, "cannot use", path))?;
    let (info, canonical) = if meta.is_dir() {
        let info = sysfs::inspect_dir(sysroot, path)?;
        let dir = info.dir.clone();
        (info, dir)
    } else if meta.is_file() {
        let canonical =
            fs::canonicalize(path).map_err(|e| Error::from_io(&e, "cannot resolve", path))?;
        let parent = canonical.parent().unwrap_or(Path::new("/"));
        (sysfs::inspect_dir(sysroot, parent)?, canonical)
    } else {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is neither a file nor a directory", path.display()),
        ));
    };
    let is_btrfs = info.mount.fs_type == "btrfs";
    let (data_profiles, flags) = if is_btrfs {
        (
            btrfs::data_profiles(&canonical)?,
            sysfs::inode_flags(&canonical)?,
        )
    } else {
        (Vec::new(), None)
    };
    let note = (!is_btrfs).then(|| {
        format!(
            "{} is on {}, not btrfs: it does not copy on write, so there is nothing to do",
            path.display(),
            info.mount.fs_type
        )
    });
    Ok(RootInfo {
        path: path.to_path_buf(),
        is_dir: meta.is_dir(),
        fs_type: info.mount.fs_type.clone(),
        mount_point: info.mount.mount_point.clone(),
        source: info.mount.source.clone(),
        read_only: info.read_only,
        data_profiles,
        mount_options: crate::probe::relevant_mount_options(info.mount.options()),
        nocow: flags.map(|f| f & FS_NOCOW_FL != 0),
        compression_attr: flags.map(|f| f & FS_COMPR_FL != 0),
        subvolume: is_btrfs && btrfs::is_subvolume_root(&meta),
        available_bytes: info.available_bytes,
        note,
        dir: canonical,
    })
}

/// Audits `path` (a directory, recursively, or one file).
pub fn scan(sysroot: &SysRoot, path: &Path) -> Result<Scan> {
    let root = inspect_root(sysroot, path)?;
    let mut scan = Scan {
        root,
        entries: Vec::new(),
        skipped: Vec::new(),
        unreadable_processes: 0,
    };
    if !scan.root.is_btrfs() {
        return Ok(scan);
    }
    let shown = path.display().to_string();
    if scan.root.is_dir {
        let mount_points: HashSet<PathBuf> = mounts::mount_table(sysroot)?
            .into_iter()
            .map(|m| m.mount_point)
            .collect();
        let dir = scan.root.dir.clone();
        walk(&dir, &shown, &mount_points, &mut scan);
    } else {
        let dir = scan.root.dir.clone();
        let meta =
            fs::symlink_metadata(&dir).map_err(|e| Error::from_io(&e, "cannot use", &dir))?;
        let entry = look_at(&dir, shown, &meta)?;
        scan.entries.extend(entry);
    }
    let targets: Vec<(FileIdentity, PathBuf)> = scan
        .entries
        .iter()
        .filter(|e| e.kind == EntryKind::File)
        .map(|e| (e.id, e.path.clone()))
        .collect();
    let open = procs::open_files(&targets);
    scan.unreadable_processes = open.unreadable;
    for e in &mut scan.entries {
        e.open_by = open.openers(e.id).to_vec();
    }
    Ok(scan)
}

fn walk(dir: &Path, shown: &str, mount_points: &HashSet<PathBuf>, scan: &mut Scan) {
    let mut names: Vec<_> = match fs::read_dir(dir) {
        Ok(rd) => rd.flatten().map(|e| e.file_name()).collect(),
        Err(e) => {
            let err = Error::from_io(&e, "cannot list", dir);
            scan.skipped.push(err.message().to_owned());
            return;
        }
    };
    names.sort();
    let mut others = 0;
    for name in names {
        let path = dir.join(&name);
        let display = format!("{shown}/{}", name.to_string_lossy());
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue; // removed meanwhile
        };
        if meta.is_dir() && mount_points.contains(&path) {
            scan.skipped.push(format!(
                "{}: another filesystem is mounted there",
                path.display()
            ));
            continue;
        }
        if !meta.is_dir() && !meta.is_file() {
            others += 1;
            continue;
        }
        match look_at(&path, display.clone(), &meta) {
            Ok(Some(entry)) => {
                let is_dir = entry.kind == EntryKind::Directory;
                scan.entries.push(entry);
                if is_dir {
                    walk(&path, &display, mount_points, scan);
                }
            }
            Ok(None) => {}
            Err(e) => scan.skipped.push(e.message().to_owned()),
        }
    }
    if others > 0 {
        scan.skipped.push(format!(
            "{}: {others} symbolic links, sockets, pipes or devices (not files; left alone)",
            dir.display()
        ));
    }
}

/// Opens one file or directory (never following a link) and reads its facts.
/// `None` when it changed into something else meanwhile.
fn look_at(path: &Path, display: String, meta: &fs::Metadata) -> Result<Option<Entry>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file: File = match file {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(Error::from_io(&e, "cannot open", path)),
    };
    let m = file
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat", path))?;
    if m.ino() != meta.ino() || m.dev() != meta.dev() || !(m.is_dir() || m.is_file()) {
        return Ok(None);
    }
    let kind = if m.is_dir() {
        EntryKind::Directory
    } else {
        EntryKind::File
    };
    let flags = sysfs::inode_flags_of(&file, path)?.unwrap_or(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let marker = kind == EntryKind::File && xattrs::get(&file, path, MARKER_XATTR)?.is_some();
    let size = if kind == EntryKind::File { m.len() } else { 0 };
    let allocated = if kind == EntryKind::File {
        m.blocks() * 512
    } else {
        0
    };
    let facts = Facts {
        kind,
        flags,
        size_bytes: size,
        links: m.nlink(),
        temp_name: name.is_some_and(|n| n.starts_with(TEMP_PREFIX)),
        marker,
    };
    let (state, reason) = classify(&facts);
    Ok(Some(Entry {
        path: path.to_path_buf(),
        display,
        kind,
        state,
        nocow: flags & FS_NOCOW_FL != 0,
        compression_attr: flags & FS_COMPR_FL != 0,
        size_bytes: size,
        allocated_bytes: allocated,
        sparse: kind == EntryKind::File && allocated < size.div_ceil(4096) * 4096,
        links: m.nlink(),
        uid: m.uid(),
        gid: m.gid(),
        mode: m.mode() & 0o7777,
        open_by: Vec::new(),
        reason,
        marker,
        id: FileIdentity {
            dev: m.dev(),
            ino: m.ino(),
        },
        flags,
    }))
}
