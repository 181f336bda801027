//! The file-system calls of `rescue`: the status of what its walk meets,
//! reads that come from the disk (never the page cache), and the target
//! side of a copy: a new file that gets its name only when complete,
//! directories, links, owner, mode and times, the manifest's renames. Every
//! name is resolved in a directory held open ([`HeldDir`]), never through
//! a link.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub use rustix::fs::Stat;
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno as RErrno;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::beneath::HeldDir;
use crate::sys::kernel::direct_io::AlignedBuffer;

/// The sector an `O_DIRECT` read is aligned to (and btrfs checksums).
pub(crate) const SECTOR: u64 = 4096;

fn rerr(e: RErrno, doing: &str, path: &Path) -> Error {
    crate::error::Error::from_errno(e, doing, path)
}

/// What a status is a status of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A directory.
    Directory,
    /// A regular file.
    Regular,
    /// A symbolic link.
    Symlink,
    /// Anything else (a device, a FIFO, a socket).
    Other,
}

/// The kind of file `st` describes.
pub(crate) fn kind(st: &Stat) -> Kind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => Kind::Directory,
        FileType::RegularFile => Kind::Regular,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    }
}

/// The status of the open file `f` (`path` for the error).
pub(crate) fn stat_file(f: &File, path: &Path) -> Result<Stat> {
    rfs::fstat(f).map_err(|e| rerr(e, "cannot stat", path))
}

/// Whether the filesystem of `fd` is mounted read-only.
pub(crate) fn mounted_read_only(fd: BorrowedFd<'_>, path: &Path) -> Result<bool> {
    let vfs = rfs::fstatvfs(fd).map_err(|e| rerr(e, "cannot statvfs", path))?;
    Ok(vfs.f_flag.contains(rfs::StatVfsMountFlags::RDONLY))
}

/// Opens the entry `name` of `dir` for reading (never through a link).
pub(crate) fn open_entry_read(dir: &HeldDir, name: impl AsRef<OsStr>) -> Result<File> {
    dir.open_entry_file(name, OFlags::RDONLY)
}

/// Where the next data at or after `off` begins in `f` (SEEK_DATA): `size`
/// when only a hole follows, `off` when the filesystem cannot tell.
pub(crate) fn next_data(f: &File, off: u64, size: u64) -> u64 {
    match rfs::seek(f, rfs::SeekFrom::Data(off)) {
        Ok(d) => d.min(size),
        Err(RErrno::NXIO) => size,
        Err(_) => off,
    }
}

/// Removes the entry `name` of `dir`, if it is there.
pub(crate) fn unlink_if_there(dir: &HeldDir, name: &str) -> Result<()> {
    match rfs::unlinkat(dir.fd(), name, AtFlags::empty()) {
        Ok(()) | Err(RErrno::NOENT) => Ok(()),
        Err(e) => Err(rerr(e, "cannot delete", &dir.join(name))),
    }
}

/// Renames `from` over `to` in the directory `dir` (`path` for the error),
/// then syncs the directory.
pub(crate) fn rename_synced(dir: impl AsFd, from: &str, to: &str, path: &Path) -> Result<()> {
    rfs::renameat(&dir, from, &dir, to).map_err(|e| rerr(e, "cannot write", path))?;
    let _ = rfs::fsync(&dir);
    Ok(())
}

/// Syncs the directory `dir` (its entries: a new name in it is on the
/// disk when it returns `Ok`).
pub(crate) fn sync_dir(dir: impl AsFd, path: &Path) -> Result<()> {
    rfs::fsync(dir).map_err(|e| rerr(e, "cannot sync", path))
}

/// `dir` opened again, a descriptor of its own.
pub(crate) fn reopen_dir(dir: &HeldDir) -> Result<OwnedFd> {
    rfs::openat(
        dir.fd(),
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| rerr(e, "cannot open", dir.path()))
}

/// A source file's two descriptors and the aligned memory of its direct
/// reads.
pub(crate) struct Reader<'a> {
    src: &'a File,
    direct: Option<&'a File>,
    size: u64,
    block: u64,
    scratch: &'a mut AlignedBuffer,
}

/// What a read from the disk got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Got {
    /// The bytes asked for.
    Data,
    /// EIO: a range that cannot be read (never data).
    Eio,
}

impl<'a> Reader<'a> {
    /// The aligned memory of a reader of at most `block` bytes a read
    /// (made once, lent to every [`Reader::new`]).
    pub(crate) fn scratch(block: u64) -> AlignedBuffer {
        AlignedBuffer::new((block + SECTOR) as usize, SECTOR as usize)
    }

    /// Reads `src` (`size` bytes), through `direct` (the same file opened
    /// `O_DIRECT`) where it can, in reads of at most `block` bytes, into
    /// `scratch` ([`Reader::scratch`] of at least `block`).
    pub(crate) fn new(
        src: &'a File,
        direct: Option<&'a File>,
        size: u64,
        block: u64,
        scratch: &'a mut AlignedBuffer,
    ) -> Self {
        debug_assert!(scratch.as_mut_slice().len() as u64 >= block + SECTOR);
        Reader {
            src,
            direct,
            size,
            block,
            scratch,
        }
    }

    /// [`Reader::read_raw`]: the bytes, EIO, or another error (of `path`).
    pub(crate) fn read_exact_at(&mut self, buf: &mut [u8], at: u64, path: &Path) -> Result<Got> {
        match self.read_raw(buf, at) {
            Ok(()) => Ok(Got::Data),
            Err(RErrno::IO) => Ok(Got::Eio),
            Err(e) => Err(rerr(e, "cannot read", path)),
        }
    }

    /// Fills `buf` with the bytes at `at`, read from the disk: `O_DIRECT`
    /// when the offset is sector-aligned (a tail shorter than a sector is
    /// read whole and cut at EOF), else buffered after dropping the cached
    /// pages of the range. EOF early is EIO (the file shrank: cannot happen
    /// on a read-only mount, never taken for data).
    fn read_raw(&mut self, buf: &mut [u8], at: u64) -> std::result::Result<(), RErrno> {
        if let Some(d) = self.direct
            && at.is_multiple_of(SECTOR)
            && buf.len() as u64 <= self.block
        {
            let want = (buf.len() as u64).div_ceil(SECTOR) * SECTOR;
            let scratch = &mut self.scratch.as_mut_slice()[..want as usize];
            let mut done = 0usize;
            while done < buf.len() {
                match d.read_at(&mut scratch[done..], at + done as u64) {
                    Ok(0) => return Err(RErrno::IO),
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    // btrfs refused O_DIRECT here after all: buffered.
                    Err(e) if e.raw_os_error() == Some(RErrno::INVAL.raw_os_error()) => {
                        self.direct = None;
                        return self.read_raw(buf, at);
                    }
                    Err(e) => {
                        return Err(RErrno::from_raw_os_error(e.raw_os_error().unwrap_or(5)));
                    }
                }
                // A direct read ends at a sector boundary or at EOF.
                if done < buf.len() && !(done as u64).is_multiple_of(SECTOR) {
                    break;
                }
            }
            if done < buf.len() || at + (buf.len() as u64) > self.size {
                return Err(RErrno::IO);
            }
            buf.copy_from_slice(&scratch[..buf.len()]);
            return Ok(());
        }
        // Not from the cache: its pages of this range dropped first.
        let _ = rfs::fadvise(
            self.src,
            at,
            std::num::NonZeroU64::new(buf.len() as u64),
            rfs::Advice::DontNeed,
        );
        let mut done = 0usize;
        let mut at = at;
        while done < buf.len() {
            match self.src.read_at(&mut buf[done..], at) {
                Ok(0) => return Err(RErrno::IO),
                Ok(n) => {
                    done += n;
                    at += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RErrno::from_raw_os_error(e.raw_os_error().unwrap_or(5))),
            }
        }
        Ok(())
    }
}

/// A new file in a target directory that gets its name only when complete.
pub(crate) struct NewFile<'a> {
    dir: &'a HeldDir,
    file: File,
    /// The temporary name, when the target has no O_TMPFILE.
    temp: Option<OsString>,
    path: std::path::PathBuf,
    /// Where the last write ended (no `ftruncate` when that is the size).
    end: u64,
}

impl<'a> NewFile<'a> {
    /// Writes `data` at `offset`.
    pub(crate) fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.file
            .write_all_at(data, offset)
            .map_err(|e| Error::from_io(&e, "cannot write", &self.path))?;
        self.end = self.end.max(offset + data.len() as u64);
        Ok(())
    }

    /// A new anonymous file in `dir`, to become `name`.
    pub(crate) fn create(dir: &'a HeldDir, name: &OsStr) -> Result<NewFile<'a>> {
        let path = dir.join(name);
        match rfs::openat(
            dir.fd(),
            ".",
            OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => Ok(NewFile {
                dir,
                file: File::from(fd),
                temp: None,
                path,
                end: 0,
            }),
            Err(RErrno::OPNOTSUPP | RErrno::ISDIR | RErrno::INVAL | RErrno::NOENT) => {
                let mut t = OsString::from(".");
                t.push(name);
                t.push(".btrfs-lab-rescue.tmp");
                let _ = remove_regular(dir, &t);
                let file = dir.create_new_file(&t, 0o600)?;
                Ok(NewFile {
                    dir,
                    file,
                    temp: Some(t),
                    path,
                    end: 0,
                })
            }
            Err(e) => Err(rerr(e, "cannot create a file in", dir.path())),
        }
    }

    /// Sets the size, owner (as root), mode and times of `st` and links it
    /// as `name`. Not synced: the caller syncs the target filesystem once
    /// for a batch of files ([`sync_filesystem`]) before any manifest line
    /// claims them. An entry already called `name` (an earlier run's, which
    /// no manifest line vouches for) is replaced only when it is a regular
    /// file or a link (never a directory or a device node, never followed);
    /// the name is tried first, so a new name costs no failing lookup.
    pub(crate) fn commit(
        mut self,
        name: &OsStr,
        size: u64,
        st: &Stat,
        as_root: bool,
    ) -> Result<()> {
        let path = self.dir.join(name);
        if self.end != size {
            self.file
                .set_len(size)
                .map_err(|e| Error::from_io(&e, "cannot write", &path))?;
        }
        apply_meta(self.file.as_fd(), st, as_root, &path)?;
        let link = |f: &Self| match &f.temp {
            Some(t) => rfs::renameat_with(
                f.dir.fd(),
                t.as_os_str(),
                f.dir.fd(),
                name,
                rfs::RenameFlags::NOREPLACE,
            ),
            None => link_anonymous(&f.file, f.dir, name),
        };
        let linked = match link(&self) {
            Err(RErrno::EXIST) => {
                remove_regular(self.dir, name)?;
                link(&self)
            }
            other => other,
        };
        linked.map_err(|e| rerr(e, "cannot write", &path))?;
        self.temp = None;
        Ok(())
    }
}

impl Drop for NewFile<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.temp.take() {
            let _ = rfs::unlinkat(self.dir.fd(), t.as_os_str(), AtFlags::empty());
        }
    }
}

/// linkat of an O_TMPFILE (AT_EMPTY_PATH, or /proc/self/fd where that
/// needs a capability we lack).
fn link_anonymous(f: &File, dir: &HeldDir, name: &OsStr) -> rustix::io::Result<()> {
    match rfs::linkat(f, "", dir.fd(), name, AtFlags::EMPTY_PATH) {
        Err(RErrno::NOENT | RErrno::PERM) => {
            let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(f));
            rfs::linkat(
                rfs::CWD,
                proc_path.as_str(),
                dir.fd(),
                name,
                AtFlags::SYMLINK_FOLLOW,
            )
        }
        other => other,
    }
}

/// Removes `name` from `dir` if it is a regular file (or a symlink): what an
/// earlier run left and no manifest line vouches for.
pub(crate) fn remove_regular(dir: &HeldDir, name: &OsStr) -> Result<bool> {
    let Some(st) = dir.stat(name)? else {
        return Ok(false);
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile | FileType::Symlink => {
            match rfs::unlinkat(dir.fd(), name, AtFlags::empty()) {
                Ok(()) | Err(RErrno::NOENT) => Ok(true),
                Err(e) => Err(rerr(e, "cannot delete", &dir.join(name))),
            }
        }
        _ => Ok(false),
    }
}

fn ts(sec: i64, nsec: i64) -> Timespec {
    Timespec {
        tv_sec: sec,
        tv_nsec: nsec as _,
    }
}

fn times(st: &Stat) -> Timestamps {
    Timestamps {
        last_access: ts(st.st_atime, st.st_atime_nsec as i64),
        last_modification: ts(st.st_mtime, st.st_mtime_nsec as i64),
    }
}

/// Owner (as root; before the mode, which a chown would strip of setuid),
/// mode and times of `st` on the open file or directory `fd`.
pub(crate) fn apply_meta(
    fd: std::os::fd::BorrowedFd<'_>,
    st: &Stat,
    as_root: bool,
    path: &Path,
) -> Result<()> {
    if as_root {
        rfs::fchown(
            fd,
            Some(rustix::process::Uid::from_raw(st.st_uid)),
            Some(rustix::process::Gid::from_raw(st.st_gid)),
        )
        .map_err(|e| rerr(e, "cannot set the owner of", path))?;
    }
    rfs::fchmod(fd, Mode::from_raw_mode(st.st_mode & 0o7777))
        .map_err(|e| rerr(e, "cannot set the mode of", path))?;
    rfs::futimens(fd, &times(st)).map_err(|e| rerr(e, "cannot set the times of", path))
}

/// Creates (or opens, when an earlier run made it) the directory `name` in
/// `dst`; never through a link. `true` with it when this call created it
/// (empty: nothing in it to look for or replace).
pub(crate) fn make_dir(dst: &HeldDir, name: &OsStr) -> Result<(HeldDir, bool)> {
    let created = match rfs::mkdirat(dst.fd(), name, Mode::from_raw_mode(0o700)) {
        Ok(()) => true,
        Err(RErrno::EXIST) => false,
        Err(e) => return Err(rerr(e, "cannot create the directory", &dst.join(name))),
    };
    Ok((dst.open_subdir(name)?, created))
}

/// Syncs the whole filesystem `dir` is on (`syncfs`): the data and names of
/// every file written there so far are on the disk when it returns `Ok`
/// (and a write-back error since the last sync is an `Err`, Linux 5.8+).
pub(crate) fn sync_filesystem(dir: &HeldDir) -> Result<()> {
    rfs::syncfs(dir.fd()).map_err(|e| rerr(e, "cannot sync", dir.path()))
}

/// Makes the symbolic link `name` in `dst` pointing where the source's link
/// `name` in `src` points (an existing link or file of that name from an
/// earlier run is replaced), with its owner (as root) and times.
pub(crate) fn copy_symlink(
    src: &HeldDir,
    dst: &HeldDir,
    name: &OsStr,
    st: &Stat,
    as_root: bool,
) -> Result<()> {
    let target = rfs::readlinkat(src.fd(), name, Vec::new())
        .map_err(|e| rerr(e, "cannot read the link", &src.join(name)))?;
    let path = dst.join(name);
    if let Some(old) = dst.stat(name)? {
        if FileType::from_raw_mode(old.st_mode) == FileType::Symlink
            && rfs::readlinkat(dst.fd(), name, Vec::new())
                .is_ok_and(|t| t.as_bytes() == target.as_bytes())
        {
            return Ok(());
        }
        remove_regular(dst, name)?;
    }
    rfs::symlinkat(OsStr::from_bytes(target.as_bytes()), dst.fd(), name)
        .map_err(|e| rerr(e, "cannot create the link", &path))?;
    if as_root {
        let _ = rfs::chownat(
            dst.fd(),
            name,
            Some(rustix::process::Uid::from_raw(st.st_uid)),
            Some(rustix::process::Gid::from_raw(st.st_gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        );
    }
    let _ = rfs::utimensat(dst.fd(), name, &times(st), AtFlags::SYMLINK_NOFOLLOW);
    Ok(())
}

/// The same file opened `O_DIRECT` for reading, when the filesystem allows
/// it and the name still leads to the file `st` is the status of (same
/// device and inode): the walk's status, taken on the read-only mount just
/// before both opens (no second status of the source).
pub(crate) fn open_direct(dir: &HeldDir, name: &OsStr, st: &Stat) -> Option<File> {
    let d = dir
        .open_entry_file(name, OFlags::RDONLY | OFlags::NOATIME | OFlags::DIRECT)
        .or_else(|_| dir.open_entry_file(name, OFlags::RDONLY | OFlags::DIRECT))
        .ok()?;
    let a = rfs::fstat(&d).ok()?;
    (a.st_dev == st.st_dev && a.st_ino == st.st_ino).then_some(d)
}

/// Opens the regular file `name` of `dir` for reading without changing its
/// access time (O_NOATIME; without it where the kernel refuses it).
pub(crate) fn open_source(dir: &HeldDir, name: &OsStr) -> Result<File> {
    match dir.open_entry_file(name, OFlags::RDONLY | OFlags::NOATIME) {
        Err(e) if e.kind() == ErrorKind::Permission => dir.open_entry_file(name, OFlags::RDONLY),
        other => other,
    }
}
