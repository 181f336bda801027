//! One way to touch the filesystem as root: every operation is relative to
//! a held directory descriptor whose whole path was checked to be one that
//! no other user can change, and every destructive step compares identities
//! (device, inode) first.
//!
//! A path given by a user (or read from a record) is walked component by
//! component from `/` with `O_NOFOLLOW`; each directory on the way must be
//! owned by root and not writable by group or others, unless it is sticky
//! (a shared temp directory like `/var/tmp`: there others cannot rename or
//! delete root's entries). Symbolic links on the way are followed only if
//! root owns them. The directory at the end must be root's alone. From then
//! on, names inside it are single components opened with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` where the kernel has it,
//! `openat(O_NOFOLLOW)` otherwise: nothing another user does can redirect
//! them, because nobody else can write into a trusted directory.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno as RErrno;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::block::loopdev::FileIdentity;

/// Most symbolic links followed while walking one path (like the kernel's 40).
const MAX_SYMLINKS: u32 = 40;

/// Whether the directory at the end of a path may be a shared sticky one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaf {
    /// Root's alone: owned by root, not writable by group or others.
    Private,
    /// Like a parent: root-owned and either private or sticky (`/var/tmp`);
    /// only for a directory in which we create our own private entry.
    SharedSticky,
}

/// A directory held open, whose path nobody but root can change.
#[derive(Debug)]
pub struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What a removal found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// It was the expected file (or directory) and is gone now.
    Removed,
    /// Nothing of that name was there.
    Absent,
    /// Something else is there (another inode, or another kind of file):
    /// left alone.
    NotOurs,
    /// A directory that still holds entries: left alone.
    NotEmpty,
}

fn errno(e: RErrno) -> nix::errno::Errno {
    crate::sys::kernel::errno::to_nix(e)
}

fn err(e: RErrno, doing: &str, path: &Path) -> Error {
    Error::from_errno(errno(e), doing, path)
}

/// The identity of a `stat` result.
pub(crate) fn identity_of(st: &Stat) -> FileIdentity {
    FileIdentity {
        dev: st.st_dev,
        ino: st.st_ino,
    }
}

/// Checks that `st` (of `path`) is a directory other users cannot change.
pub(crate) fn check_dir(st: &Stat, path: &Path, leaf: Leaf) -> Result<()> {
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not a directory", path.display()),
        ));
    }
    let mode = st.st_mode & 0o7777;
    let writable_by_others = mode & 0o022 != 0;
    let sticky = mode & 0o1000 != 0;
    let me = rustix::process::geteuid().as_raw();
    let owner_ok = st.st_uid == 0 || st.st_uid == me;
    let ok = owner_ok && (!writable_by_others || (sticky && leaf == Leaf::SharedSticky));
    if ok {
        return Ok(());
    }
    let why = if !owner_ok {
        "is not owned by root"
    } else {
        "is writable by other users"
    };
    Err(Error::new(
        ErrorKind::Permission,
        format!(
            "{} {why} (owner uid {}, mode {mode:04o}); as root, btrfs-lab only uses directories no other user can change",
            path.display(),
            st.st_uid
        ),
    )
    .with_hint(
        "use a directory owned by root and writable only by root (install -d -o root -m 0755 DIR), or choose another path",
    ))
}

/// Checks that `name` is one plain path component.
pub(crate) fn component(name: &OsStr) -> Result<&OsStr> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Error::usage(format!(
            "'{}' is not a plain file name",
            name.to_string_lossy()
        )));
    }
    Ok(name)
}

fn open_dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or `openat` with
/// `O_NOFOLLOW` on kernels without openat2 (before 5.6). `name` is a single
/// component, so both resolve the same way.
pub(crate) fn open_beneath(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlags,
    mode: Mode,
) -> rustix::io::Result<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rfs::openat2(
        dir,
        name,
        flags,
        mode,
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(RErrno::NOSYS) => rfs::openat(dir, name, flags, mode),
        other => other,
    }
}

/// Opens the directory `rel` (one or more components, no `..`) below the
/// held directory `dir`, never leaving it and never following a link:
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or, before Linux 5.6,
/// one `openat(O_NOFOLLOW | O_DIRECTORY)` per component. For walks over
/// directories other users own (nocow): nothing they rename or swap in can
/// lead us outside `dir`. An empty `rel` reopens `dir` itself.
pub(crate) fn open_dir_beneath(dir: BorrowedFd<'_>, rel: &Path) -> rustix::io::Result<OwnedFd> {
    let flags = open_dir_flags();
    if rel.as_os_str().is_empty() {
        return rfs::openat(dir, ".", flags, Mode::empty());
    }
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(RErrno::XDEV);
    }
    match rfs::openat2(
        dir,
        rel,
        flags,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(RErrno::NOSYS) => {
            let mut cur: Option<OwnedFd> = None;
            for c in rel.components() {
                let at = cur.as_ref().map_or(dir, |f| f.as_fd());
                cur = Some(rfs::openat(at, c.as_os_str(), flags, Mode::empty())?);
            }
            cur.ok_or(RErrno::NOENT)
        }
        other => other,
    }
}

/// Creates the directory `name` in the held directory `dir` (mode 0777 less
/// the umask) and opens it without following a link. `path` is for
/// messages.
pub(crate) fn mkdir_at(dir: &File, name: &OsStr, path: &Path) -> Result<File> {
    rfs::mkdirat(dir, name, Mode::from_raw_mode(0o777))
        .map_err(|e| err(e, "cannot create", path))?;
    open_dir_at(dir, name, path)
}

/// Creates the btrfs subvolume `name` in the held directory `dir` and opens
/// it.
pub(crate) fn create_subvolume_at(dir: &File, name: &OsStr, path: &Path) -> Result<File> {
    use nix::errno::Errno;
    let c = std::ffi::CString::new(name.as_bytes())
        .map_err(|_| Error::usage(format!("bad subvolume name {}", path.display())))?;
    btrfs_uapi::subvolume::subvolume_create(dir.as_fd(), &c, &[]).map_err(|e| match e {
        Errno::ENOTTY | Errno::EINVAL | Errno::EOPNOTSUPP => Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not on a btrfs filesystem", path.display()),
        ),
        Errno::EEXIST => Error::new(
            ErrorKind::WrongTarget,
            format!("cannot create subvolume {}: it exists", path.display()),
        ),
        e => Error::from_errno(e, "cannot create subvolume", path),
    })?;
    open_dir_at(dir, name, path)
}

/// Opens the directory `name` of the held directory `dir`, never through a
/// link.
pub(crate) fn open_dir_at(dir: &File, name: &OsStr, path: &Path) -> Result<File> {
    open_beneath(dir.as_fd(), name, open_dir_flags(), Mode::empty())
        .map(File::from)
        .map_err(|e| err(e, "cannot open directory", path))
}

impl TrustedDir {
    /// Opens the existing directory `path`, checking every component.
    pub fn open(path: &Path, leaf: Leaf) -> Result<TrustedDir> {
        walk(path, leaf, None).map(|(d, _)| d)
    }

    /// Like [`TrustedDir::open`], creating missing directories (as root,
    /// with exactly `mode`) on the way. Returns whether the last one was
    /// created.
    pub fn create(path: &Path, leaf: Leaf, mode: u32) -> Result<(TrustedDir, bool)> {
        walk(path, leaf, Some(mode))
    }

    /// The path this directory was reached by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The directory as a `File` (a duplicate descriptor), for ioctls.
    pub(crate) fn open_dir_file(&self) -> Result<File> {
        self.fd
            .try_clone()
            .map(File::from)
            .map_err(|e| Error::from_io(&e, "cannot open", &self.path))
    }

    /// The directory's own identity.
    pub fn identity(&self) -> Result<FileIdentity> {
        identity_at(self.fd(), &self.path)
    }

    /// The path of an entry (for messages and records).
    pub fn join(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.path.join(name.as_ref())
    }

    /// `lstat` of an entry; `None` when there is none.
    pub fn stat(&self, name: impl AsRef<OsStr>) -> Result<Option<Stat>> {
        stat_entry(self.fd(), &self.path, name.as_ref())
    }

    /// Opens the subdirectory `name`, which must be root's alone too.
    pub(crate) fn open_dir(&self, name: impl AsRef<OsStr>) -> Result<TrustedDir> {
        let name = component(name.as_ref())?;
        let path = self.join(name);
        let fd = open_beneath(self.fd(), name, open_dir_flags(), Mode::empty())
            .map_err(|e| err(e, "cannot open", &path))?;
        let st = rfs::fstat(&fd).map_err(|e| err(e, "cannot stat", &path))?;
        check_dir(&st, &path, Leaf::Private)?;
        Ok(TrustedDir { fd, path })
    }

    /// Creates the subdirectory `name` with exactly `mode` (umask aside);
    /// fails if anything of that name exists.
    pub fn mkdir(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<TrustedDir> {
        mkdir_beneath(self.fd(), &self.path, name.as_ref(), mode)
    }

    /// Creates a new regular file `name` (`O_CREAT | O_EXCL | O_NOFOLLOW`),
    /// open for reading and writing, with exactly `mode`.
    pub(crate) fn create_file(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<File> {
        let name = component(name.as_ref())?;
        let path = self.join(name);
        let fd = open_beneath(
            self.fd(),
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| err(e, "cannot create", &path))?;
        rfs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| err(e, "cannot chmod", &path))?;
        Ok(File::from(fd))
    }

    /// Opens the existing regular file `name` without following links.
    pub(crate) fn open_file(&self, name: impl AsRef<OsStr>, write: bool) -> Result<File> {
        let name = component(name.as_ref())?;
        let path = self.join(name);
        let flags = if write { OFlags::RDWR } else { OFlags::RDONLY };
        let fd = open_beneath(self.fd(), name, flags | OFlags::NONBLOCK, Mode::empty())
            .map_err(|e| err(e, "cannot open", &path))?;
        let st = rfs::fstat(&fd).map_err(|e| err(e, "cannot stat", &path))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::new(
                ErrorKind::WrongTarget,
                format!("{} is not a regular file", path.display()),
            ));
        }
        Ok(File::from(fd))
    }

    /// Opens `name` as `O_PATH` (no following), for identity and mount checks.
    pub(crate) fn open_path(&self, name: impl AsRef<OsStr>) -> Result<OwnedFd> {
        let name = component(name.as_ref())?;
        open_beneath(self.fd(), name, OFlags::PATH, Mode::empty())
            .map_err(|e| err(e, "cannot open", &self.join(name)))
    }

    /// Deletes the regular file `name` only if it is the file `expected`.
    /// Nobody else can write to a trusted directory, so the entry cannot
    /// change between the check and the unlink.
    pub fn remove_file(&self, name: impl AsRef<OsStr>, expected: FileIdentity) -> Result<Removal> {
        self.remove(name.as_ref(), expected, false)
    }

    /// Removes the empty directory `name` only if it is `expected`.
    pub fn remove_dir(&self, name: impl AsRef<OsStr>, expected: FileIdentity) -> Result<Removal> {
        self.remove(name.as_ref(), expected, true)
    }

    fn remove(&self, name: &OsStr, expected: FileIdentity, dir: bool) -> Result<Removal> {
        let Some(st) = self.stat(name)? else {
            return Ok(Removal::Absent);
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        let right_kind = if dir {
            kind == FileType::Directory
        } else {
            kind == FileType::RegularFile
        };
        if !right_kind || identity_of(&st) != expected {
            return Ok(Removal::NotOurs);
        }
        let path = self.join(name);
        let flags = if dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        match rfs::unlinkat(&self.fd, name, flags) {
            Ok(()) => Ok(Removal::Removed),
            Err(RErrno::NOENT) => Ok(Removal::Absent),
            Err(RErrno::NOTEMPTY | RErrno::EXIST) if dir => Ok(Removal::NotEmpty),
            Err(e) => Err(err(e, "cannot delete", &path)),
        }
    }

    /// Renames `from` to `to` inside this directory, never replacing an
    /// existing `to` (`RENAME_NOREPLACE`).
    pub(crate) fn rename_noreplace(
        &self,
        from: impl AsRef<OsStr>,
        to: impl AsRef<OsStr>,
    ) -> Result<()> {
        let from = component(from.as_ref())?;
        let to = component(to.as_ref())?;
        rfs::renameat_with(&self.fd, from, &self.fd, to, rfs::RenameFlags::NOREPLACE)
            .map_err(|e| err(e, "cannot rename", &self.join(from)))
    }

    /// Renames `from` to `to` inside this directory, replacing `to`.
    pub(crate) fn rename_replace(
        &self,
        from: impl AsRef<OsStr>,
        to: impl AsRef<OsStr>,
    ) -> Result<()> {
        let from = component(from.as_ref())?;
        let to = component(to.as_ref())?;
        rfs::renameat(&self.fd, from, &self.fd, to)
            .map_err(|e| err(e, "cannot rename", &self.join(from)))
    }

    /// Deletes the regular file `name` of this (trusted) directory if there
    /// is one: for files this directory holds for us, such as records.
    pub(crate) fn remove_entry_file(&self, name: impl AsRef<OsStr>) -> Result<()> {
        let name = name.as_ref();
        match self.stat(name)? {
            Some(st) => match self.remove_file(name, identity_of(&st))? {
                Removal::NotOurs => Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!(
                        "{} is not a regular file; left alone",
                        self.join(name).display()
                    ),
                )),
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// True if the directory has no entries.
    pub fn is_empty(&self) -> Result<bool> {
        let fd = rfs::openat(&self.fd, ".", open_dir_flags(), Mode::empty())
            .map_err(|e| err(e, "cannot read", &self.path))?;
        let mut dir = rfs::Dir::read_from(&fd).map_err(|e| err(e, "cannot read", &self.path))?;
        for entry in dir.by_ref() {
            let entry = entry.map_err(|e| err(e, "cannot read", &self.path))?;
            let n = entry.file_name().to_bytes();
            if n != b"." && n != b".." {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The names in this directory (`.` and `..` excluded), sorted.
    pub fn names(&self) -> Result<Vec<OsString>> {
        names_of(self.fd(), &self.path)
    }
}

/// `lstat` of the entry `name` of the directory `dir` (reached as `base`,
/// for messages); `None` when there is none.
fn stat_entry(dir: BorrowedFd<'_>, base: &Path, name: &OsStr) -> Result<Option<Stat>> {
    let name = component(name)?;
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(RErrno::NOENT) => Ok(None),
        Err(e) => Err(err(e, "cannot stat", &base.join(name))),
    }
}

/// The identity of the open directory `dir` (reached as `path`).
fn identity_at(dir: BorrowedFd<'_>, path: &Path) -> Result<FileIdentity> {
    rfs::fstat(dir)
        .map(|st| identity_of(&st))
        .map_err(|e| err(e, "cannot stat", path))
}

/// The names in the directory `dir` (`.` and `..` excluded), sorted.
fn names_of(dir: BorrowedFd<'_>, path: &Path) -> Result<Vec<OsString>> {
    let fd = rfs::openat(dir, ".", open_dir_flags(), Mode::empty())
        .map_err(|e| err(e, "cannot read", path))?;
    let mut d = rfs::Dir::read_from(&fd).map_err(|e| err(e, "cannot read", path))?;
    let mut names = Vec::new();
    for entry in d.by_ref() {
        let entry = entry.map_err(|e| err(e, "cannot read", path))?;
        let n = entry.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    names.sort();
    Ok(names)
}

/// Walks `path` from `/`, checking each directory; creates missing ones with
/// `create` (a mode) when given.
fn walk(path: &Path, leaf: Leaf, create: Option<u32>) -> Result<(TrustedDir, bool)> {
    walk_with(path, Some(leaf), create)
}

/// The walk behind [`TrustedDir`] and [`HeldDir`]: `leaf` `None` checks no
/// directory's owner or mode (a user's directory), only the link rule.
fn walk_with(path: &Path, leaf: Option<Leaf>, create: Option<u32>) -> Result<(TrustedDir, bool)> {
    let abs = std::path::absolute(path)
        .map_err(|e| Error::usage(format!("invalid directory {}: {e}", path.display())))?;
    let mut queue: VecDeque<OsString> = VecDeque::new();
    push_components(&mut queue, &abs, true);
    let root = rfs::open("/", open_dir_flags(), Mode::empty())
        .map_err(|e| err(e, "cannot open", Path::new("/")))?;
    let st = rfs::fstat(&root).map_err(|e| err(e, "cannot stat", Path::new("/")))?;
    let root_leaf = if queue.is_empty() {
        leaf
    } else {
        leaf.map(|_| Leaf::SharedSticky)
    };
    if let Some(root_leaf) = root_leaf {
        check_dir(&st, Path::new("/"), root_leaf)?;
    }
    // The stack of directories walked: `..` pops one.
    let mut stack: Vec<(OwnedFd, PathBuf)> = vec![(root, PathBuf::from("/"))];
    let mut links = 0;
    let mut created = false;
    while let Some(name) = queue.pop_front() {
        if name == "/" {
            stack.truncate(1);
            continue;
        }
        if name == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let (cur, cur_path) = stack.last().expect("root stays");
        let here = cur_path.join(&name);
        let is_last = queue.is_empty();
        let st = match rfs::statat(cur, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(RErrno::NOENT) if create.is_some() => {
                let mode = create.unwrap_or(0o755);
                match rfs::mkdirat(cur, name.as_os_str(), Mode::from_raw_mode(mode)) {
                    Ok(()) => {
                        let fd = open_beneath(cur.as_fd(), &name, open_dir_flags(), Mode::empty())
                            .map_err(|e| err(e, "cannot open", &here))?;
                        rfs::fchmod(&fd, Mode::from_raw_mode(mode))
                            .map_err(|e| err(e, "cannot chmod", &here))?;
                        created = is_last;
                    }
                    Err(RErrno::EXIST) => {}
                    Err(e) => return Err(err(e, "cannot create", &here)),
                }
                queue.push_front(name);
                continue;
            }
            Err(e) => return Err(err(e, "cannot use", &here)),
        };
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            links += 1;
            let me = rustix::process::geteuid().as_raw();
            if (st.st_uid != 0 && st.st_uid != me) || links > MAX_SYMLINKS {
                return Err(Error::new(
                    ErrorKind::Permission,
                    format!(
                        "{} is a symbolic link owned by uid {}; as root, btrfs-lab follows only root's links",
                        here.display(),
                        st.st_uid
                    ),
                )
                .with_hint("give the real path of the directory"));
            }
            let target = rfs::readlinkat(cur, name.as_os_str(), Vec::new())
                .map_err(|e| err(e, "cannot read link", &here))?;
            let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
            let mut front = VecDeque::new();
            push_components(&mut front, &target, target.is_absolute());
            while let Some(c) = front.pop_back() {
                queue.push_front(c);
            }
            continue;
        }
        let fd = open_beneath(cur.as_fd(), &name, open_dir_flags(), Mode::empty())
            .map_err(|e| err(e, "cannot open", &here))?;
        let st = rfs::fstat(&fd).map_err(|e| err(e, "cannot stat", &here))?;
        match leaf {
            Some(leaf) => check_dir(&st, &here, if is_last { leaf } else { Leaf::SharedSticky })?,
            None if FileType::from_raw_mode(st.st_mode) != FileType::Directory => {
                return Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!("{} is not a directory", here.display()),
                ));
            }
            None => {}
        }
        stack.push((fd, here));
    }
    // When the path is `/` itself, the root was checked as the leaf above.
    let (fd, path) = stack.pop().expect("root stays");
    Ok((TrustedDir { fd, path }, created))
}

/// A directory a user named (it may be theirs: bench DIR, probe-dio DIR,
/// nocow DIR), opened once and held. Reached from `/` component by component
/// with `O_NOFOLLOW`, following only symbolic links owned by root (or by the
/// user running btrfs-lab): a link another user planted is refused with the
/// reason, never followed. Its owner and mode are not checked: other users
/// may rename or replace its entries, so everything btrfs-lab does in it goes
/// through a private directory made with [`HeldDir::mkdir_private`] (root's
/// alone, held by descriptor) or through single components opened beneath
/// the descriptor without following links.
#[derive(Debug)]
pub struct HeldDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl HeldDir {
    /// Opens the existing directory `path` (see the type's documentation).
    pub fn open(path: &Path) -> Result<HeldDir> {
        walk_with(path, None, None).map(|(d, _)| HeldDir {
            fd: d.fd,
            path: d.path,
        })
    }

    /// The path it was reached by (for messages; never opened again).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A duplicate descriptor as a `File` (ioctls, fstatfs).
    pub fn file(&self) -> Result<File> {
        self.fd
            .try_clone()
            .map(File::from)
            .map_err(|e| Error::from_io(&e, "cannot open", &self.path))
    }

    /// The directory's own identity.
    pub fn identity(&self) -> Result<FileIdentity> {
        identity_at(self.fd(), &self.path)
    }

    /// A second handle on the same directory (a duplicated descriptor).
    pub(crate) fn try_clone(&self) -> Result<HeldDir> {
        let fd = self
            .fd
            .try_clone()
            .map_err(|e| Error::from_io(&e, "cannot open", &self.path))?;
        Ok(HeldDir {
            fd,
            path: self.path.clone(),
        })
    }

    /// `fstat` of the directory itself.
    pub(crate) fn fstat(&self) -> Result<Stat> {
        rfs::fstat(&self.fd).map_err(|e| err(e, "cannot stat", &self.path))
    }

    /// The path of an entry (for messages).
    pub fn join(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.path.join(name.as_ref())
    }

    /// `lstat` of an entry; `None` when there is none.
    pub fn stat(&self, name: impl AsRef<OsStr>) -> Result<Option<Stat>> {
        stat_entry(self.fd(), &self.path, name.as_ref())
    }

    /// The names in it (`.` and `..` excluded), sorted.
    pub fn names(&self) -> Result<Vec<OsString>> {
        names_of(self.fd(), &self.path)
    }

    /// Creates the directory `name` in it, owned by us with exactly `mode`
    /// (no group or other write bits), and holds it. Fails rather than reuse
    /// anything that exists. Other users may rename the new directory inside
    /// this one, but cannot change what is in it: from now on it is reached
    /// only through the returned descriptor.
    pub(crate) fn mkdir_private(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<TrustedDir> {
        mkdir_beneath(self.fd(), &self.path, name.as_ref(), mode & 0o755)
    }

    /// Creates the new regular file `name` in it (`O_CREAT | O_EXCL |
    /// O_NOFOLLOW`, beneath the descriptor) with `mode`: never an existing
    /// file, never through a link, wherever the directory was moved.
    pub(crate) fn create_new_file(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<File> {
        let name = component(name.as_ref())?;
        let path = self.join(name);
        open_beneath(
            self.fd(),
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(mode),
        )
        .map(File::from)
        .map_err(|e| err(e, "cannot create", &path))
    }

    /// Whether we may create files in it: `Err` with the reason (read-only
    /// filesystem, permission) otherwise.
    pub(crate) fn check_writable(&self) -> Result<()> {
        rfs::accessat(
            self.fd(),
            ".",
            rfs::Access::WRITE_OK | rfs::Access::EXEC_OK,
            AtFlags::EACCESS,
        )
        .map_err(|e| err(e, "cannot write into", &self.path))
    }

    /// Opens the subdirectory `name` without following a link, if it is
    /// root's alone (owned by us, no group or other write bits): then nobody
    /// else can change what is in it, whoever owns this directory.
    pub(crate) fn open_private_subdir(&self, name: impl AsRef<OsStr>) -> Result<TrustedDir> {
        let name = component(name.as_ref())?;
        let path = self.join(name);
        let fd = open_beneath(self.fd(), name, open_dir_flags(), Mode::empty())
            .map_err(|e| err(e, "cannot open", &path))?;
        let st = rfs::fstat(&fd).map_err(|e| err(e, "cannot stat", &path))?;
        check_dir(&st, &path, Leaf::Private)?;
        Ok(TrustedDir { fd, path })
    }

    /// Opens the subdirectory `name` without following a link, and holds it
    /// (any owner).
    pub(crate) fn open_subdir(&self, name: impl AsRef<OsStr>) -> Result<HeldDir> {
        let name = component(name.as_ref())?;
        let path = self.join(name);
        let fd = open_beneath(self.fd(), name, open_dir_flags(), Mode::empty())
            .map_err(|e| err(e, "cannot open", &path))?;
        Ok(HeldDir { fd, path })
    }

    /// Removes the empty directory `name` if it is still `expected` (by
    /// identity, checked just before). Only empty directories can be removed
    /// this way, so a swap in the window between the check and the removal
    /// can at worst remove someone's empty directory, never data.
    pub(crate) fn remove_empty_dir(
        &self,
        name: impl AsRef<OsStr>,
        expected: FileIdentity,
    ) -> Result<Removal> {
        let name = component(name.as_ref())?;
        let Some(st) = self.stat(name)? else {
            return Ok(Removal::Absent);
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory
            || identity_of(&st) != expected
        {
            return Ok(Removal::NotOurs);
        }
        match rfs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
            Ok(()) => Ok(Removal::Removed),
            Err(RErrno::NOENT) => Ok(Removal::Absent),
            Err(RErrno::NOTEMPTY | RErrno::EXIST) => Ok(Removal::NotEmpty),
            // Swapped for a link or a file after the check: not ours.
            Err(RErrno::NOTDIR) => Ok(Removal::NotOurs),
            Err(e) => Err(err(e, "cannot delete", &self.join(name))),
        }
    }

    /// Resolves `path` (a file or a directory a user named) to its parent,
    /// held as [`HeldDir::open`] holds it, and the name of the entry in it,
    /// with the entry's `lstat`. A symbolic link in the last component is
    /// followed only if root (or the running user) owns it; another user's
    /// link is refused with the reason. `path` `/` (or one ending in `..`)
    /// has no parent entry: `Ok(None)`, open it with [`HeldDir::open`].
    /// Nothing that is found is opened yet: open it with
    /// [`HeldDir::open_entry_file`] or [`HeldDir::open_subdir`], which never
    /// follow a link, and compare identities when it matters.
    pub(crate) fn resolve_entry(path: &Path) -> Result<Option<(HeldDir, OsString, Stat)>> {
        // Messages name the path as given until a link is followed.
        let mut shown = path.to_path_buf();
        let mut path = std::path::absolute(path)
            .map_err(|e| Error::usage(format!("invalid path {}: {e}", path.display())))?;
        for _ in 0..MAX_SYMLINKS {
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                return Ok(None);
            };
            if path.ends_with("..") || path.ends_with(".") {
                return Ok(None);
            }
            let dir = HeldDir::open(parent)?;
            let name = name.to_os_string();
            let st = dir
                .stat(&name)?
                .ok_or_else(|| err(RErrno::NOENT, "cannot use", &shown))?;
            if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                return Ok(Some((dir, name, st)));
            }
            path = follow_trusted_link(
                &dir,
                &name,
                &st,
                (&shown, &path),
                dir.path(),
                "give the real path",
            )?;
            shown.clone_from(&path);
        }
        Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{}: too many levels of symbolic links", shown.display()),
        ))
    }

    /// Opens the entry `name` (not a directory: a file, opened with
    /// `flags` plus `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`) without following
    /// a link and without leaving this directory.
    pub(crate) fn open_entry_file(&self, name: impl AsRef<OsStr>, flags: OFlags) -> Result<File> {
        let name = component(name.as_ref())?;
        open_beneath(
            self.fd(),
            name,
            flags | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
        )
        .map(File::from)
        .map_err(|e| err(e, "cannot open", &self.join(name)))
    }

    /// The filesystem it is on, read through the descriptor (fstatvfs); the
    /// mount is the one of `/proc/self/mountinfo` that contains the walk's
    /// path (for its type, source and options; never opened).
    pub fn filesystem(&self, sysroot: &crate::sys::fs::root::SysRoot) -> Result<DirFs> {
        let mount = crate::sys::proc::mountinfo::containing(sysroot, &self.path)?;
        let vfs = rfs::fstatvfs(&self.fd).map_err(|e| err(e, "cannot statvfs", &self.path))?;
        Ok(DirFs {
            read_only: vfs.f_flag.contains(rfs::StatVfsMountFlags::RDONLY) || mount.is_read_only(),
            available_bytes: vfs.f_bavail.saturating_mul(vfs.f_frsize),
            dir: self.path.clone(),
            mount,
        })
    }

    /// The fsid of the btrfs it is on (FS_INFO on the descriptor).
    pub(crate) fn btrfs_fsid(&self) -> Result<String> {
        btrfs_uapi::filesystem::filesystem_info(self.fd())
            .map(|i| i.uuid.as_hyphenated().to_string())
            .map_err(|e| Error::from_errno(e, "cannot query btrfs at", &self.path))
    }

    /// The profiles that hold data on the btrfs it is on (SPACE_INFO on the
    /// descriptor).
    pub(crate) fn btrfs_data_profiles(&self) -> Result<Vec<crate::model::profile::Profile>> {
        use btrfs_uapi::space::BlockGroupFlags;
        let spaces = btrfs_uapi::space::space_info(self.fd())
            .map_err(|e| Error::from_errno(e, "cannot query btrfs at", &self.path))?;
        let mut v: Vec<_> = spaces
            .iter()
            .filter(|s| {
                s.flags.contains(BlockGroupFlags::DATA)
                    && !s.flags.contains(BlockGroupFlags::GLOBAL_RSV)
                    && s.total_bytes > 0
            })
            .map(|s| crate::sys::kernel::btrfs::profile_of(s.flags))
            .collect();
        v.sort();
        v.dedup();
        Ok(v)
    }

    /// Every device of the btrfs it is on (DEV_INFO on the descriptor).
    pub(crate) fn btrfs_devices(&self) -> Result<Vec<btrfs_uapi::device::DeviceInfo>> {
        let info = btrfs_uapi::filesystem::filesystem_info(self.fd())
            .map_err(|e| Error::from_errno(e, "cannot query btrfs at", &self.path))?;
        btrfs_uapi::device::device_info_all(self.fd(), &info)
            .map_err(|e| Error::from_errno(e, "cannot read device info of", &self.path))
    }
}

/// An input file a user named (`df --parse FILE`, `bench --compare FILE`):
/// its bytes, at most `max_bytes`. Only a regular file is read (a FIFO, a
/// device such as /dev/zero or a directory is refused with the reason, and
/// the open never blocks: `O_NONBLOCK`); its directory part is walked like
/// [`HeldDir::open`] and a symbolic link, anywhere, is followed only if root
/// (or the running user) owns it. `what` names the input in messages
/// ("the captured output").
pub(crate) fn read_input_file(path: &Path, max_bytes: u64, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut path = std::path::absolute(path)
        .map_err(|e| Error::usage(format!("invalid file name {}: {e}", path.display())))?;
    for _ in 0..MAX_SYMLINKS {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(Error::new(
                ErrorKind::WrongTarget,
                format!("{} is not a regular file", path.display()),
            ));
        };
        let dir = HeldDir::open(parent)?;
        let name = name.to_os_string();
        let fd = match open_beneath(
            dir.fd(),
            &name,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(RErrno::LOOP) => {
                let st = dir.stat(&name)?.ok_or_else(|| {
                    Error::new(
                        ErrorKind::NotFound,
                        format!("{} does not exist", path.display()),
                    )
                })?;
                path = follow_trusted_link(
                    &dir,
                    &name,
                    &st,
                    (&path, &path),
                    parent,
                    "give the real path of the file",
                )?;
                continue;
            }
            Err(e) => return Err(err(e, "cannot open", &path)),
        };
        let st = rfs::fstat(&fd).map_err(|e| err(e, "cannot stat", &path))?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::RegularFile {
            let is = match kind {
                FileType::Directory => "a directory",
                FileType::Fifo => "a FIFO (named pipe)",
                FileType::CharacterDevice | FileType::BlockDevice => "a device",
                FileType::Socket => "a socket",
                _ => "not a regular file",
            };
            return Err(Error::new(
                ErrorKind::WrongTarget,
                format!("{} is {is}: {what} must be a regular file", path.display()),
            )
            .with_hint("save it to a file first, or pipe it on standard input (-)"));
        }
        if st.st_size as u64 > max_bytes {
            return Err(too_large(&path, max_bytes, what));
        }
        let mut f = File::from(fd);
        let mut buf = Vec::new();
        (&mut f)
            .take(max_bytes + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Error::from_io(&e, "cannot read", &path))?;
        if buf.len() as u64 > max_bytes {
            return Err(too_large(&path, max_bytes, what));
        }
        return Ok(buf);
    }
    Err(Error::new(
        ErrorKind::WrongTarget,
        format!("{}: too many levels of symbolic links", path.display()),
    ))
}

fn too_large(path: &Path, max_bytes: u64, what: &str) -> Error {
    Error::new(
        ErrorKind::Usage,
        format!(
            "{} is larger than {} MiB: too large for {what}",
            path.display(),
            max_bytes >> 20
        ),
    )
    .with_hint("give the file that holds only the captured text")
}

fn push_components(queue: &mut VecDeque<OsString>, path: &Path, absolute: bool) {
    for c in path.components() {
        match c {
            Component::RootDir if absolute => queue.push_back(OsString::from("/")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => queue.push_back(OsString::from("..")),
            Component::Normal(n) => queue.push_back(n.to_os_string()),
        }
    }
}

/// A directory and the filesystem it lives on.
#[derive(Debug, Clone)]
pub struct DirFs {
    /// The directory, canonical.
    pub dir: PathBuf,
    /// The mount that contains it.
    pub mount: crate::parse::mountinfo::MountEntry,
    /// Mounted read-only.
    pub read_only: bool,
    /// Bytes an unprivileged writer may still use (statvfs f_bavail).
    pub available_bytes: u64,
}

/// Creates the subdirectory `name` of the directory `dir` (whose path is
/// `parent`) with exactly `mode` (umask aside), failing if anything of that
/// name exists, and holds it.
fn mkdir_beneath(
    dir: BorrowedFd<'_>,
    parent: &Path,
    name: &OsStr,
    mode: u32,
) -> Result<TrustedDir> {
    let name = component(name)?;
    let path = parent.join(name);
    rfs::mkdirat(dir, name, Mode::from_raw_mode(mode))
        .map_err(|e| err(e, "cannot create", &path))?;
    let fd = open_beneath(dir, name, open_dir_flags(), Mode::empty())
        .map_err(|e| err(e, "cannot open", &path))?;
    rfs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| err(e, "cannot chmod", &path))?;
    let st = rfs::fstat(&fd).map_err(|e| err(e, "cannot stat", &path))?;
    check_dir(&st, &path, Leaf::Private)?;
    Ok(TrustedDir { fd, path })
}

/// Where the symbolic link `name` in `dir` (`st`, its lstat) leads, when
/// root or the running user owns it; another user's link is refused with
/// the reason and `hint`. `(shown, path)`: the link as messages name it and
/// as it was reached; a relative target is taken from `base`.
fn follow_trusted_link(
    dir: &HeldDir,
    name: &OsStr,
    st: &Stat,
    (shown, path): (&Path, &Path),
    base: &Path,
    hint: &str,
) -> Result<PathBuf> {
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != 0 && st.st_uid != me {
        return Err(Error::new(
            ErrorKind::Permission,
            format!(
                "{} is a symbolic link owned by uid {}; as root, btrfs-lab follows only root's links",
                shown.display(),
                st.st_uid
            ),
        )
        .with_hint(hint));
    }
    let target = rfs::readlinkat(dir.fd(), name, Vec::new())
        .map_err(|e| err(e, "cannot read link", path))?;
    let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
    Ok(if target.is_absolute() {
        target
    } else {
        base.join(target)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn component_refuses_paths() {
        for bad in ["", ".", "..", "a/b", "/x"] {
            assert!(component(OsStr::new(bad)).is_err(), "{bad}");
        }
        assert!(component(OsStr::new("dev0.img")).is_ok());
    }

    #[test]
    fn check_dir_rules() {
        let t = tempfile::tempdir().unwrap();
        let mut st = rfs::stat(t.path()).unwrap();
        st.st_uid = 0;
        st.st_mode = (st.st_mode & !0o7777) | 0o755;
        assert!(check_dir(&st, t.path(), Leaf::Private).is_ok());
        st.st_mode = (st.st_mode & !0o7777) | 0o1777;
        assert!(check_dir(&st, t.path(), Leaf::SharedSticky).is_ok());
        let e = check_dir(&st, t.path(), Leaf::Private).unwrap_err();
        assert!(
            e.message()
                .contains("writable by other users (owner uid 0, mode 1777)"),
            "{}",
            e.message()
        );
        st.st_mode = (st.st_mode & !0o7777) | 0o777;
        assert!(check_dir(&st, t.path(), Leaf::SharedSticky).is_err());
        st.st_mode = (st.st_mode & !0o7777) | 0o700;
        st.st_uid = 65534;
        let e = check_dir(&st, t.path(), Leaf::SharedSticky).unwrap_err();
        assert!(
            e.message()
                .contains("is not owned by root (owner uid 65534, mode 0700)"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn input_files_are_regular_files_read_to_a_bound() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("capture.txt");
        std::fs::write(&f, b"Data, single: total=1.00GiB, used=0.00B\n").unwrap();
        assert_eq!(
            read_input_file(&f, 1 << 20, "the captured output").unwrap(),
            std::fs::read(&f).unwrap()
        );
        // Over the bound: refused, not read to the end.
        let e = read_input_file(&f, 8, "the captured output").unwrap_err();
        assert!(e.message().contains("is larger than"), "{}", e.message());
        // A FIFO: refused at once (the open does not block).
        let fifo = t.path().join("fifo");
        rustix::fs::mknodat(
            rfs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = read_input_file(&fifo, 1 << 20, "the captured output").unwrap_err();
        assert!(e.message().contains("a FIFO"), "{}", e.message());
        // A device and a directory: refused with what they are.
        let e = read_input_file(Path::new("/dev/zero"), 1 << 20, "x").unwrap_err();
        assert!(e.message().contains("is a device"), "{}", e.message());
        let e = read_input_file(t.path(), 1 << 20, "x").unwrap_err();
        assert!(e.message().contains("is a directory"), "{}", e.message());
        // Our own link is followed.
        std::os::unix::fs::symlink(&f, t.path().join("link")).unwrap();
        assert!(read_input_file(&t.path().join("link"), 1 << 20, "x").is_ok());
    }

    /// Needs root (ownership checks): ignored when built by a user who is
    /// not root (build.rs), and fails (never passes) when run without root.
    #[test]
    #[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
    fn walk_creates_and_removes_by_identity() {
        assert!(
            crate::sys::is_root(),
            "walk_creates_and_removes_by_identity needs root (run the suite as root: scripts/test.sh)"
        );
        let t = tempfile::tempdir().unwrap();
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (d, created) = TrustedDir::create(&t.path().join("a/b"), Leaf::Private, 0o700).unwrap();
        assert!(created);
        let mode = std::fs::metadata(t.path().join("a/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o700);
        let f = d.create_file("x", 0o600).unwrap();
        let id = FileIdentity::of(&f).unwrap();
        assert!(d.create_file("x", 0o600).is_err(), "O_EXCL");
        std::os::unix::fs::symlink("/etc/passwd", t.path().join("a/b/link")).unwrap();
        assert!(d.open_file("link", false).is_err(), "no symlinks");
        assert_eq!(d.remove_file("link", id).unwrap(), Removal::NotOurs);
        assert_eq!(
            d.remove_file(
                "x",
                FileIdentity {
                    dev: id.dev,
                    ino: id.ino + 1
                }
            )
            .unwrap(),
            Removal::NotOurs
        );
        assert_eq!(d.remove_file("x", id).unwrap(), Removal::Removed);
        assert_eq!(d.remove_file("x", id).unwrap(), Removal::Absent);
        // A root-owned link is followed; a link through `..` too.
        std::os::unix::fs::symlink("a/b", t.path().join("l")).unwrap();
        let via = TrustedDir::open(&t.path().join("l"), Leaf::Private).unwrap();
        assert_eq!(via.identity().unwrap(), d.identity().unwrap());
        // Group-writable: refused.
        std::fs::set_permissions(t.path().join("a"), std::fs::Permissions::from_mode(0o775))
            .unwrap();
        let e = TrustedDir::open(&t.path().join("a/b"), Leaf::Private).unwrap_err();
        assert!(
            e.message().contains("writable by other users"),
            "{}",
            e.message()
        );
    }
}
