//! The one reader of a file a user could have named or placed (`doctor
//! --fstab FILE`, scrub's state files under `--state-dir`): root reads it
//! without being turned against itself.
//!
//! - The directories on the way are walked from `/` as
//!   [`HeldDir`] does: a symbolic link is followed only if root (or the
//!   running user) owns it.
//! - The file itself is opened beneath the held directory with
//!   `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY` (a FIFO cannot block the open, a
//!   terminal is never acquired); a symbolic link at the name is followed
//!   only when root (or the running user) owns it, and never more than
//!   [`MAX_LINKS`] times.
//! - `fstat` of the held descriptor: anything but a regular file (a FIFO, a
//!   device node such as `/dev/zero`, a socket, a directory) is refused
//!   before a byte is read; so is a size over the caller's bound, and at
//!   most bound + 1 bytes are ever read (a file that grows is refused too).

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno as RErrno;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::beneath::{HeldDir, open_beneath};
use crate::sys::fs::outfile::{kind_name, split};

/// Links followed at the last component before giving up.
pub const MAX_LINKS: usize = 8;

fn err(e: RErrno, doing: &str, path: &Path) -> Error {
    crate::error::Error::from_errno(e, doing, path)
}

/// Reads the file `path` as the module documentation says: at most `cap`
/// bytes (a larger file is an error). A missing file is a
/// [`ErrorKind::NotFound`] error.
pub fn read_user_file(path: &Path, cap: u64) -> Result<Vec<u8>> {
    let (fd, size) = open_user_file(path)?;
    let too_big = || {
        Error::new(
            ErrorKind::WrongTarget,
            format!(
                "not reading {}: it is larger than {cap} bytes",
                path.display()
            ),
        )
    };
    if size > cap {
        return Err(too_big());
    }
    let mut out = Vec::with_capacity(size as usize);
    File::from(fd)
        .take(cap + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::from_io(&e, "cannot read", path))?;
    if out.len() as u64 > cap {
        return Err(too_big());
    }
    Ok(out)
}

/// The last `tail` bytes of the file `path`, opened as [`read_user_file`]
/// opens it (a log of any size); with `same_as` (device, inode), only if
/// the file opened is that one (another process's log named by its
/// descriptor's link: a file put at that name since is refused).
pub fn read_user_tail(path: &Path, tail: u64, same_as: Option<(u64, u64)>) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let (fd, size) = open_user_file(path)?;
    if let Some((dev, ino)) = same_as {
        let st = rfs::fstat(&fd).map_err(|e| err(e, "cannot stat", path))?;
        if st.st_dev != dev || st.st_ino != ino {
            return Err(Error::new(
                ErrorKind::State,
                format!("{} is not the file it was: not read", path.display()),
            ));
        }
    }
    let start = size.saturating_sub(tail);
    let mut out = vec![0u8; (size - start) as usize];
    let n = File::from(fd)
        .read_at(&mut out, start)
        .map_err(|e| Error::from_io(&e, "cannot read", path))?;
    out.truncate(n);
    Ok(out)
}

/// Opens `path` as the module documentation says: the held descriptor of a
/// regular file and its size.
fn open_user_file(path: &Path) -> Result<(rustix::fd::OwnedFd, u64)> {
    let mut path = path.to_path_buf();
    for _ in 0..=MAX_LINKS {
        let (dir, name) = split(&path)?;
        let dir = HeldDir::open(&dir)?;
        match open_file(&dir, &name, &path)? {
            Opened::File(fd, size) => return Ok((fd, size)),
            Opened::Link(target) => {
                path = if target.is_absolute() {
                    target
                } else {
                    dir.path().join(target)
                };
            }
        }
    }
    Err(Error::new(
        ErrorKind::WrongTarget,
        format!("{}: more than {MAX_LINKS} symbolic links", path.display()),
    ))
}

/// [`read_user_file`] as text (invalid UTF-8 replaced).
pub fn read_user_text(path: &Path, cap: u64) -> Result<String> {
    let bytes = read_user_file(path, cap)?;
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

enum Opened {
    /// A regular file, held, and its size.
    File(rustix::fd::OwnedFd, u64),
    /// A link we may follow: its target.
    Link(PathBuf),
}

fn open_file(dir: &HeldDir, name: &OsStr, path: &Path) -> Result<Opened> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = match open_beneath(dir.fd(), name, flags, Mode::empty()) {
        Ok(fd) => fd,
        // ELOOP: a symbolic link (O_NOFOLLOW / RESOLVE_NO_SYMLINKS).
        Err(RErrno::LOOP) => {
            let st = rfs::statat(dir.fd(), name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| err(e, "cannot stat", path))?;
            let me = rustix::process::geteuid().as_raw();
            if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                return Err(err(RErrno::LOOP, "cannot open", path));
            }
            if st.st_uid != 0 && st.st_uid != me {
                return Err(Error::new(
                    ErrorKind::Permission,
                    format!(
                        "not reading {}: it is a symbolic link owned by uid {}; as root, btrfs-lab follows only root's links",
                        path.display(),
                        st.st_uid
                    ),
                )
                .with_hint("give the real path of the file"));
            }
            let target = rfs::readlinkat(dir.fd(), name, Vec::new())
                .map_err(|e| err(e, "cannot read link", path))?;
            return Ok(Opened::Link(PathBuf::from(OsStr::from_bytes(
                target.as_bytes(),
            ))));
        }
        Err(e) => return Err(err(e, "cannot open", path)),
    };
    let st = rfs::fstat(&fd).map_err(|e| err(e, "cannot stat", path))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!(
                "not reading {}: it is {}, not a regular file",
                path.display(),
                kind_name(kind)
            ),
        ));
    }
    Ok(Opened::File(fd, st.st_size as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bounded_regular_files_only() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("fstab");
        std::fs::write(&f, "UUID=x / btrfs defaults 0 0\n").unwrap();
        assert_eq!(
            read_user_text(&f, 1024).unwrap(),
            "UUID=x / btrfs defaults 0 0\n"
        );
        // Our own link is followed, relative or absolute.
        std::os::unix::fs::symlink("fstab", t.path().join("rel")).unwrap();
        std::os::unix::fs::symlink(&f, t.path().join("abs")).unwrap();
        for l in ["rel", "abs"] {
            assert!(read_user_file(&t.path().join(l), 1024).is_ok(), "{l}");
        }
        // Over the bound.
        let e = read_user_file(&f, 10).unwrap_err();
        assert!(
            e.message().contains("larger than 10 bytes"),
            "{}",
            e.message()
        );
        // A FIFO: refused at once (O_NONBLOCK, fstat), never blocks.
        let fifo = t.path().join("fifo");
        rfs::mknodat(
            rfs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = read_user_file(&fifo, 1024).unwrap_err();
        assert!(
            e.message().contains("it is a FIFO, not a regular file"),
            "{}",
            e.message()
        );
        // A device, through a link: refused.
        std::os::unix::fs::symlink("/dev/zero", t.path().join("zero")).unwrap();
        let e = read_user_file(&t.path().join("zero"), 1024).unwrap_err();
        assert!(
            e.message().contains("it is a character device"),
            "{}",
            e.message()
        );
        // A directory; a loop of links; nothing.
        assert!(read_user_file(t.path(), 1024).is_err());
        std::os::unix::fs::symlink("loop", t.path().join("loop")).unwrap();
        assert!(read_user_file(&t.path().join("loop"), 1024).is_err());
        let e = read_user_file(&t.path().join("none"), 1024).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }
}
