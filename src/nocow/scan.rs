//! The walk that gathers the audit's facts: inode flags through the ioctl,
//! sizes and allocation from stat, btrfs-lab's marker attribute, and which
//! processes have the files open. Symbolic links are never followed and
//! other mounts are not entered.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::audit::{Entry, EntryKind, EntryState, Facts, RootInfo, classify};
use super::{MARKER_XATTR, TEMP_PREFIX};
use crate::error::{Error, ErrorKind, Result};
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::beneath::{self, HeldDir};
use crate::sys::fs::filesystem;
use crate::sys::fs::migrate as fsm;
use crate::sys::fs::rescue::{self as fsr, Kind};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::ioctl::{FS_COMPR_FL, FS_NOCOW_FL, IFlags};
use crate::sys::{kernel::btrfs, kernel::xattrs, proc::procs};

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
    pub(crate) unreadable_processes: usize,
    /// The directory walked, held open (a directory root only).
    pub root_dir: Option<std::sync::Arc<DirHandle>>,
}

/// What a path a user named leads to, held by descriptor: reached from `/`
/// following only root's symbolic links ([`HeldDir`]), so a link another
/// user planted on the way is refused before anything is read or done.
#[derive(Debug)]
pub enum Held {
    /// A directory, held.
    Dir(HeldDir),
    /// A regular file: its directory, held, and its name there.
    File {
        /// The directory that holds it.
        parent: HeldDir,
        /// Its name in `parent`.
        name: OsString,
    },
}

impl Held {
    /// The canonical path (the walk's, for messages and the report).
    pub(crate) fn canonical(&self) -> PathBuf {
        match self {
            Held::Dir(d) => d.path().to_path_buf(),
            Held::File { parent, name } => parent.join(name),
        }
    }
}

/// Opens `path` once (see [`Held`]); a directory or a regular file.
pub fn hold(path: &Path) -> Result<Held> {
    let Some((parent, name, st)) = HeldDir::resolve_entry(path)? else {
        return Ok(Held::Dir(HeldDir::open(path)?));
    };
    match fsr::kind(&st) {
        Kind::Directory => {
            let dir = parent.open_subdir(&name)?;
            if dir.identity()? != beneath::identity_of(&st) {
                return Err(Error::new(
                    ErrorKind::State,
                    format!("{} was replaced while it was opened", path.display()),
                )
                .with_hint("run the command again"));
            }
            Ok(Held::Dir(dir))
        }
        Kind::Regular => Ok(Held::File { parent, name }),
        _ => Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is neither a file nor a directory", path.display()),
        )),
    }
}

/// Looks at a held path and the filesystem it is on, through the
/// descriptors only (the mount is looked up by the walk's path, for its
/// name and options).
pub(crate) fn inspect_held(sysroot: &SysRoot, path: &Path, held: &Held) -> Result<RootInfo> {
    let canonical = held.canonical();
    let (dir, target) = match held {
        Held::Dir(d) => (d, d.file()?),
        Held::File { parent, name } => (parent, fsr::open_entry_read(parent, name)?),
    };
    let meta = target
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat", &canonical))?;
    if matches!(held, Held::File { .. }) && !meta.is_file() {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is neither a file nor a directory", path.display()),
        ));
    }
    let info = dir.filesystem(sysroot)?;
    let (mount, read_only, available_bytes) = (info.mount, info.read_only, info.available_bytes);
    let is_btrfs = mount.fs_type == "btrfs";
    let (data_profiles, flags) = if is_btrfs {
        (
            dir.btrfs_data_profiles()?,
            filesystem::inode_flags_of(&target, &canonical)?,
        )
    } else {
        (Vec::new(), None)
    };
    // The property alone (the attribute sets it too: chattr -c removes both).
    let property = if is_btrfs && meta.is_dir() && !flags.is_some_and(|f| f.intersects(FS_COMPR_FL))
    {
        filesystem::compression_property_of(&target, &canonical)?
    } else {
        None
    };
    let note = (!is_btrfs).then(|| {
        format!(
            "{} is on {}, not btrfs: it does not copy on write, so there is nothing to do",
            path.display(),
            mount.fs_type
        )
    });
    Ok(RootInfo {
        path: path.to_path_buf(),
        is_dir: meta.is_dir(),
        fs_type: mount.fs_type.clone(),
        mount_point: mount.mount_point.clone(),
        source: mount.source.clone(),
        read_only,
        data_profiles,
        mount_options: crate::parse::mountinfo::relevant_mount_options(mount.options()),
        nocow: flags.map(|f| f.intersects(FS_NOCOW_FL)),
        compression_attr: flags.map(|f| f.intersects(FS_COMPR_FL) || property.is_some()),
        compression_property: property,
        subvolume: is_btrfs && btrfs::is_subvolume_root(&meta),
        available_bytes,
        note,
        dir: canonical,
    })
}

/// Audits `path` (a directory, recursively, or one file).
///
/// The path is opened once ([`hold`]: a link another user planted on the
/// way is refused before anything is read), and every subdirectory is
/// opened from its parent's descriptor without following a link, so
/// swapping a directory for a link while the walk runs cannot lead it
/// outside. Each entry records its (dev, inode) and its directory's, so
/// that a plan made from it can check it acts on the same ones.
pub fn scan(sysroot: &SysRoot, path: &Path) -> Result<Scan> {
    let held = hold(path)?;
    scan_held(sysroot, path, held)
}

impl Scan {
    /// Nothing found yet below `root`.
    fn of(root: RootInfo) -> Self {
        Scan {
            root,
            entries: Vec::new(),
            skipped: Vec::new(),
            unreadable_processes: 0,
            root_dir: None,
        }
    }
}

/// [`scan`] of a path already held.
pub(crate) fn scan_held(sysroot: &SysRoot, path: &Path, held: Held) -> Result<Scan> {
    let root = inspect_held(sysroot, path, &held)?;
    let mut scan = Scan::of(root);
    if !scan.root.is_btrfs() {
        return Ok(scan);
    }
    let shown = path.display().to_string();
    match held {
        Held::Dir(d) => {
            let file = d.file()?;
            let id = identity_of(&file, d.path())?;
            let handle = DirHandle { file, id };
            walk_held(sysroot, &handle, &scan.root.dir.clone(), &shown, &mut scan)?;
            scan.root_dir = Some(std::sync::Arc::new(handle));
        }
        Held::File { parent, name } => {
            let file = parent.file()?;
            let id = identity_of(&file, parent.path())?;
            let dir = scan.root.dir.clone();
            if let Some(entry) = look_at(&file, id, &name, &dir, shown)? {
                scan.entries.push(entry);
            }
        }
    }
    crate::sys::kernel::signals::check()?;
    find_openers(&mut scan);
    Ok(scan)
}

/// The entries below a directory held open (after a change, to verify it):
/// walked as [`scan`] walks, with the processes that have them open.
pub(crate) fn rescan_dir(
    sysroot: &SysRoot,
    handle: &DirHandle,
    dir: &Path,
    shown: &str,
    root: RootInfo,
) -> Result<Scan> {
    let mut scan = Scan::of(root);
    walk_held(sysroot, handle, dir, shown, &mut scan)?;
    crate::sys::kernel::signals::check()?;
    find_openers(&mut scan);
    Ok(scan)
}

fn walk_held(
    sysroot: &SysRoot,
    handle: &DirHandle,
    dir: &Path,
    shown: &str,
    scan: &mut Scan,
) -> Result<()> {
    let mount_points: HashSet<PathBuf> = crate::sys::proc::mountinfo::mount_table(sysroot)?
        .into_iter()
        .map(|m| m.mount_point)
        .collect();
    walk(&handle.file, handle.id, dir, shown, &mount_points, scan);
    Ok(())
}

fn find_openers(scan: &mut Scan) {
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
}

/// A directory held open, and its identity.
#[derive(Debug)]
pub struct DirHandle {
    /// The open directory.
    pub file: File,
    /// Its (dev, inode).
    pub id: FileIdentity,
}

fn identity_of(file: &File, path: &Path) -> Result<FileIdentity> {
    FileIdentity::of(file).map_err(|e| Error::from_io(&e, "cannot stat", path))
}

/// Opens `rel` below the held `root` without leaving it and without
/// following any link (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), and
/// checks it is still the directory `want` found by the walk.
pub(crate) fn open_beneath(
    root: &DirHandle,
    rel: &Path,
    want: FileIdentity,
    shown: &Path,
) -> Result<File> {
    let file = if rel.as_os_str().is_empty() {
        root.file
            .try_clone()
            .map_err(|e| Error::from_io(&e, "cannot open directory", shown))?
    } else {
        match fsm::open_dir_beneath(&root.file, rel, shown)? {
            Some(fd) => File::from(fd),
            None => return Err(dir_changed(shown)),
        }
    };
    if identity_of(&file, shown)? != want {
        return Err(dir_changed(shown));
    }
    Ok(file)
}

fn dir_changed(shown: &Path) -> Error {
    Error::new(
        ErrorKind::State,
        format!(
            "{} is no longer the directory that was planned (moved, or replaced by a link); it was left as it is",
            shown.display()
        ),
    )
    .with_hint("run the command again to plan with what is there now")
}

fn walk(
    dir: &File,
    dir_id: FileIdentity,
    dir_path: &Path,
    shown: &str,
    mount_points: &HashSet<PathBuf>,
    scan: &mut Scan,
) {
    // With each name its type from the directory itself (d_type): no stat
    // per entry to tell files, directories and the rest apart.
    let mut names = match fsm::names_and_kinds(dir, dir_path) {
        Ok(n) => n,
        Err(err) => {
            scan.skipped.push(err.message().to_owned());
            return;
        }
    };
    names.sort_by(|a, b| a.0.cmp(&b.0));
    // btrfs-lab's marker is read only where a migration left a temporary
    // name (a copy, or an original swapped out beside the marked copy):
    // elsewhere a file is opened, stat'ed and its flags read, as lsattr does.
    let markers = names
        .iter()
        .any(|(n, _)| n.as_encoded_bytes().starts_with(TEMP_PREFIX.as_bytes()));
    let mut others = 0;
    // Copies (by the inode they were made of), and files under a temporary
    // name that is their own inode: an original swapped out by a migration
    // killed between the exchange and the removal.
    let mut copies: std::collections::HashMap<u64, (u64, (i64, i64))> =
        std::collections::HashMap::new();
    let mut swapped_out: Vec<(usize, u64, Seen)> = Vec::new();
    for (name, d_type) in names {
        if crate::sys::kernel::signals::interrupted() {
            return; // scan_held reports it
        }
        let path = dir_path.join(&name);
        let display = format!("{shown}/{}", name.to_string_lossy());
        // A filesystem without d_type (btrfs always has it): its status.
        let Some(kind) = d_type.or_else(|| fsm::kind_at(dir, &name)) else {
            continue; // removed meanwhile
        };
        if kind == Kind::Directory && mount_points.contains(&path) {
            scan.skipped.push(format!(
                "{}: another filesystem is mounted there",
                path.display()
            ));
            continue;
        }
        if kind != Kind::Directory && kind != Kind::Regular {
            others += 1;
            continue;
        }
        match look_at_seen(dir, dir_id, &name, &path, display.clone(), markers) {
            Ok(Some((entry, seen))) => {
                if let Some(n) = seen.copy_of {
                    copies.insert(n, (seen.size, seen.mtime));
                }
                if entry.kind == EntryKind::File
                    && !entry.marker
                    && temp_name_ino(&name) == Some(entry.id.ino)
                {
                    swapped_out.push((scan.entries.len(), entry.id.ino, seen));
                }
                if entry.kind == EntryKind::Directory {
                    let id = entry.id;
                    scan.entries.push(entry);
                    match open_child_dir(dir, &name, &path, id) {
                        Ok(Some(sub)) => walk(&sub, id, &path, &display, mount_points, scan),
                        Ok(None) => {}
                        Err(e) => scan.skipped.push(e.message().to_owned()),
                    }
                } else {
                    scan.entries.push(entry);
                }
            }
            Ok(None) => {}
            Err(e) => scan.skipped.push(e.message().to_owned()),
        }
    }
    for (i, ino, seen) in swapped_out {
        // Its copy is in place under the file's name, with the same size
        // and modification time (the copy got the original's; a write to
        // the original since would have changed it): the original is what
        // was copied and verified, so a re-run removes it.
        if copies.get(&ino) == Some(&(seen.size, seen.mtime)) {
            let e = &mut scan.entries[i];
            e.state = EntryState::Leftover;
            e.reason = Some(
                "the original of a finished NOCOW copy, swapped out by an interrupted migration (the copy is in place under the file's name)"
                    .to_owned(),
            );
        }
    }
    if others > 0 {
        scan.skipped.push(format!(
            "{}: {others} symbolic links, sockets, pipes or devices (not files; left alone)",
            dir_path.display()
        ));
    }
}

/// Opens the subdirectory `name` of `dir` (never through a link) if it is
/// still the one looked at.
fn open_child_dir(dir: &File, name: &OsStr, path: &Path, id: FileIdentity) -> Result<Option<File>> {
    let Some(file) = fsm::open_entry(dir, name, true, path)? else {
        return Ok(None);
    };
    Ok((identity_of(&file, path)? == id).then_some(file))
}

/// What [`look_at`] saw besides the entry: the inode the marker says the
/// file is a copy of, and the file's size and modification time.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    copy_of: Option<u64>,
    size: u64,
    mtime: (i64, i64),
}

/// The inode number a marker value names (`... copy of inode N by pid P`).
fn copy_of(marker: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(marker).ok()?;
    let rest = s.split_once("copy of inode ")?.1;
    rest.split(' ').next()?.parse().ok()
}

/// The inode number in a temporary name (`<prefix><ino>-<nonce>`).
pub(crate) fn temp_name_ino(name: &OsStr) -> Option<u64> {
    let rest = name.to_str()?.strip_prefix(TEMP_PREFIX)?;
    let (ino, nonce) = rest.split_once('-')?;
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    ino.parse().ok()
}

/// Opens one file or directory of `dir` (never following a link) and reads
/// its facts. `None` when it is gone or not a file or directory.
fn look_at(
    dir: &File,
    dir_id: FileIdentity,
    name: &OsStr,
    path: &Path,
    display: String,
) -> Result<Option<Entry>> {
    look_at_seen(dir, dir_id, name, path, display, true).map(|o| o.map(|(e, _)| e))
}

/// [`look_at`], with what else it saw; `markers`: read btrfs-lab's marker
/// attribute of a file (else it is taken as absent).
fn look_at_seen(
    dir: &File,
    dir_id: FileIdentity,
    name: &OsStr,
    path: &Path,
    display: String,
    markers: bool,
) -> Result<Option<(Entry, Seen)>> {
    let Some(file) = fsm::open_entry(dir, name, false, path)? else {
        return Ok(None);
    };
    let m = file
        .metadata()
        .map_err(|e| Error::from_io(&e, "cannot stat", path))?;
    if !(m.is_dir() || m.is_file()) {
        return Ok(None);
    }
    let kind = if m.is_dir() {
        EntryKind::Directory
    } else {
        EntryKind::File
    };
    let mut flags = filesystem::inode_flags_of(&file, path)?.unwrap_or(IFlags::empty());
    // A directory's compression property is inherited by the files made in
    // it as the attribute is: the audit takes it as the attribute (one more
    // system call per directory, none per file).
    let property = if kind == EntryKind::Directory && !flags.intersects(FS_COMPR_FL) {
        filesystem::compression_property_of(&file, path)?
    } else {
        None
    };
    if property.is_some() {
        flags |= FS_COMPR_FL;
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let marker_value = if kind == EntryKind::File && markers {
        xattrs::get(&file, path, MARKER_XATTR)?
    } else {
        None
    };
    let marker = marker_value.is_some();
    let seen = Seen {
        copy_of: marker_value.as_deref().and_then(copy_of),
        size: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
    };
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
    Ok(Some((
        Entry {
            path: path.to_path_buf(),
            path_bytes: crate::report::text::non_utf8_bytes(path),
            display,
            kind,
            state,
            nocow: flags.intersects(FS_NOCOW_FL),
            compression_attr: flags.intersects(FS_COMPR_FL),
            compression_property: property,
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
            dir_id,
            flags,
        },
        seen,
    )))
}
