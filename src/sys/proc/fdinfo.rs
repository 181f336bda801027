//! The files a process has open: `/proc/PID/fd/*` (what they are) and
//! `/proc/PID/fdinfo/*` (`flags:` in octal, `pos:`, `mnt_id:`); each
//! descriptor is looked at through `pidfd_getfd` ([`super::pidfd`]), never
//! by opening `/proc/PID/fd/N`.

use std::fs::{self, File};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::root::SysRoot;
use crate::sys::proc::pidfd::{FdKind, Held, ProcessFds};

/// O_DIRECT as the kernel reports it in `flags:` (0o40000 on x86_64;
/// other architectures differ, libc knows).
pub const O_DIRECT: u32 = libc::O_DIRECT as u32;
/// The access-mode bits of `flags:`.
pub(crate) const O_ACCMODE: u32 = libc::O_ACCMODE as u32;

/// The fields of one `/proc/PID/fdinfo/N` that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FdInfo {
    /// File position.
    pub pos: u64,
    /// Open flags (octal in the file).
    pub flags: u32,
    /// Mount id (matches `/proc/PID/mountinfo`).
    pub(crate) mnt_id: Option<u64>,
}

impl FdInfo {
    /// Opened with O_DIRECT.
    pub fn direct(&self) -> bool {
        self.flags & O_DIRECT != 0
    }

    /// Opened for reading (O_RDONLY or O_RDWR).
    pub fn readable(&self) -> bool {
        matches!(self.flags & O_ACCMODE, 0 | 2)
    }

    /// Opened for writing (O_WRONLY or O_RDWR).
    pub fn writable(&self) -> bool {
        matches!(self.flags & O_ACCMODE, 1 | 2)
    }
}

/// Parses the text of an fdinfo file.
pub(crate) fn parse_fdinfo(text: &str) -> Option<FdInfo> {
    let mut pos = None;
    let mut flags = None;
    let mut mnt_id = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        match k {
            "pos" => pos = v.parse().ok(),
            "flags" => flags = u32::from_str_radix(v, 8).ok(),
            "mnt_id" => mnt_id = v.parse().ok(),
            _ => {}
        }
    }
    Some(FdInfo {
        pos: pos?,
        flags: flags?,
        mnt_id,
    })
}

/// One regular file open in a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenFile {
    /// Descriptor number.
    pub fd: u32,
    /// Where the link in /proc/PID/fd points (may end in " (deleted)").
    pub path: PathBuf,
    /// Device of the file (st_dev).
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// What fdinfo says.
    pub info: FdInfo,
}

fn no_such_process(pid: u32) -> Error {
    Error::new(ErrorKind::NotFound, format!("no process with pid {pid}"))
        .with_hint("give the pid of a running process (see `pgrep NAME`)")
}

fn may_not_look(pid: u32) -> Error {
    Error::new(
        ErrorKind::Permission,
        format!("may not look at the open files of pid {pid}"),
    )
    .with_hint("run as root (sudo); processes of other users cannot be traced otherwise")
}

/// A descriptor of the process that is not a regular file, or an `O_PATH`
/// one: named, never opened, never read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SkippedFd {
    /// Descriptor number.
    pub fd: u32,
    /// Where the link in /proc/PID/fd points (a path, `pipe:[N]`, `socket:[N]`).
    #[serde(serialize_with = "crate::report::text::lossy_path")]
    pub path: PathBuf,
    /// What it is.
    pub kind: FdKind,
}

/// The descriptors of `pid`: its regular files, and the others (skipped,
/// named). Each descriptor is taken with `pidfd_getfd` and only that
/// duplicate is looked at ([`pidfd`](super::pidfd)); `/proc/PID/fd/N` is
/// listed and its link read, never opened nor followed. Descriptors that
/// close while they are listed are left out.
pub fn open_files_and_skipped(root: &SysRoot, pid: u32) -> Result<(Vec<OpenFile>, Vec<SkippedFd>)> {
    let base = root.proc(&pid.to_string());
    if !base.exists() {
        return Err(no_such_process(pid));
    }
    let fd_dir = base.join("fd");
    let entries = fs::read_dir(&fd_dir).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => no_such_process(pid),
        Some(libc::EACCES | libc::EPERM) => may_not_look(pid),
        _ => Error::from_io(&e, "cannot list", &fd_dir),
    })?;
    let mut fds: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .collect();
    fds.sort_unstable();
    // A /proc fixture (BTRFS_LAB_SYSROOT) names no descriptor this process
    // could take: the pid there is not a process here.
    if fds.is_empty() || !root.is_host() {
        return Ok((Vec::new(), Vec::new()));
    }
    let process = ProcessFds::open(pid)?;
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    for fd in fds {
        let Some(held) = process.take(fd)? else {
            continue;
        };
        let link = fd_dir.join(fd.to_string());
        let path = fs::read_link(&link).unwrap_or_default();
        let (dev, ino) = match held {
            Held::Skipped(kind) => {
                skipped.push(SkippedFd { fd, path, kind });
                continue;
            }
            Held::Regular { dev, ino, .. } => (dev, ino),
        };
        let info_path = base.join("fdinfo").join(fd.to_string());
        let Some(info) = root
            .read_text(&info_path, 64 << 10)
            .ok()
            .and_then(|t| parse_fdinfo(&t))
        else {
            continue;
        };
        files.push(OpenFile {
            fd,
            path,
            dev,
            ino,
            info,
        });
    }
    Ok((files, skipped))
}

/// The regular files `pid` has open ([`open_files_and_skipped`]).
pub fn open_files(root: &SysRoot, pid: u32) -> Result<Vec<OpenFile>> {
    open_files_and_skipped(root, pid).map(|(f, _)| f)
}

/// The file behind descriptor `fd` of `pid`, read-only, if it is still the
/// regular file `dev`/`ino` (descriptors can be closed and reused at any
/// time): taken with `pidfd_getfd` and checked on that very descriptor
/// before anything is opened ([`pidfd`](super::pidfd)).
pub(crate) fn reopen(pid: u32, fd: u32, dev: u64, ino: u64) -> Result<File> {
    let changed = || {
        Error::new(
            ErrorKind::State,
            format!("descriptor {fd} of pid {pid} changed while it was looked at"),
        )
    };
    match ProcessFds::open(pid)?.take(fd)? {
        Some(Held::Regular {
            file,
            dev: d,
            ino: i,
        }) if d == dev && i == ino => Ok(file),
        Some(Held::Skipped(FdKind::OPath)) => Err(Error::new(
            ErrorKind::State,
            format!("descriptor {fd} of pid {pid} is now an O_PATH descriptor: not read"),
        )),
        _ => Err(changed()),
    }
}

/// `wchar` (bytes passed to write calls) and `write_bytes` (bytes sent to
/// storage) of `/proc/PID/io`.
pub(crate) fn process_io(root: &SysRoot, pid: u32) -> Option<(u64, u64)> {
    let text = root
        .read_text(&root.proc(&format!("{pid}/io")), 64 << 10)
        .ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("wchar")?, field("write_bytes")?))
}

/// The command name of `pid` (`comm`), or `?`.
pub(crate) fn comm(root: &SysRoot, pid: u32) -> String {
    root.read_attr(&root.proc(&format!("{pid}/comm")))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

/// `major:minor` of a device number.
pub(crate) fn dev_name(dev: u64) -> String {
    format!(
        "{}:{}",
        rustix::fs::major(dev as _),
        rustix::fs::minor(dev as _)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_flags_are_octal() {
        let t = "pos:\t1048576\nflags:\t0140001\nmnt_id:\t85\nino:\t258\n";
        let i = parse_fdinfo(t).unwrap();
        assert_eq!(i.pos, 1 << 20);
        assert_eq!(i.flags, 0o140001);
        assert_eq!(i.mnt_id, Some(85));
        assert!(i.writable());
        #[cfg(target_arch = "x86_64")]
        assert!(i.direct());
        let ro = parse_fdinfo("pos:\t0\nflags:\t02100000\nmnt_id:\t3\n").unwrap();
        assert!(!ro.writable());
        assert!(!ro.direct());
        assert_eq!(parse_fdinfo("flags:\t0100002\n"), None);
    }

    #[test]
    fn process_io_from_a_fixture() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("proc/42")).unwrap();
        fs::write(
            t.path().join("proc/42/io"),
            "rchar: 1\nwchar: 2048\nsyscr: 1\nsyscw: 2\nread_bytes: 0\nwrite_bytes: 4096\ncancelled_write_bytes: 0\n",
        )
        .unwrap();
        let root = SysRoot::new(t.path());
        assert_eq!(process_io(&root, 42), Some((2048, 4096)));
        assert_eq!(process_io(&root, 43), None);
        assert!(matches!(
            open_files(&root, 43).unwrap_err().kind(),
            ErrorKind::NotFound
        ));
    }
}
