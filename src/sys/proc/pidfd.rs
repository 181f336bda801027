//! Another process's open files, exactly as it holds them: `pidfd_open(2)`
//! and `pidfd_getfd(2)` duplicate descriptor N of the process into this one,
//! and only that very descriptor is looked at (`fcntl(F_GETFL)`, `fstat`).
//! `/proc/PID/fd/N` is never opened: a process can swap descriptor N for a
//! FIFO or a device node between a check and the open (root would block on
//! the FIFO or open `/dev/watchdog`), or hold an `O_PATH` descriptor to a
//! file it may not read (root would read it). An `O_PATH` descriptor is
//! reported as such and nothing of its file is read, not even its size; a
//! FIFO, a device, a socket is named and skipped. A regular file is opened
//! again for reading through this process's own duplicate
//! (`/proc/self/fd/M`, a new open file description, so reads never move the
//! process's file position nor inherit its `O_DIRECT`): that duplicate is a
//! held, checked regular file, which cannot change under it.
//!
//! Without `pidfd_getfd` (Linux < 5.6) or without the ptrace access it
//! needs, there is one clear error and no fallback to opening the link.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// What a skipped descriptor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FdKind {
    /// Opened with `O_PATH`: it names a file without giving access to its
    /// contents, so nothing of the file is read.
    OPath,
    /// A named or anonymous pipe.
    Fifo,
    /// A character device.
    CharacterDevice,
    /// A block device.
    BlockDevice,
    /// A socket.
    Socket,
    /// A directory.
    Directory,
    /// Anything else (an anonymous inode: eventfd, epoll, ...).
    Other,
}

impl FdKind {
    /// Words for messages.
    pub fn describe(self) -> &'static str {
        match self {
            FdKind::OPath => "an O_PATH descriptor (not read)",
            FdKind::Fifo => "a FIFO",
            FdKind::CharacterDevice => "a character device",
            FdKind::BlockDevice => "a block device",
            FdKind::Socket => "a socket",
            FdKind::Directory => "a directory",
            FdKind::Other => "not a regular file",
        }
    }
}

/// A descriptor of the process, as taken.
pub(crate) enum Held {
    /// A regular file: its device and inode, and a read-only handle of
    /// this process's own (a new open file description).
    Regular {
        /// The file, opened again through the duplicate.
        file: File,
        /// `st_dev`.
        dev: u64,
        /// `st_ino`.
        ino: u64,
    },
    /// Not a regular file, or an `O_PATH` descriptor: not opened, not read.
    Skipped(FdKind),
}

/// A process, held by a pidfd (a later pid reuse cannot redirect it).
pub(crate) struct ProcessFds {
    pid: u32,
    pidfd: OwnedFd,
}

fn unsupported(pid: u32, call: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "cannot take the open files of pid {pid}: this kernel has no {call} (Linux 5.6 or later is needed; the files are never reopened by name)"
        ),
    )
}

fn no_such_process(pid: u32) -> Error {
    Error::new(ErrorKind::NotFound, format!("no process with pid {pid}"))
        .with_hint("give the pid of a running process (see `pgrep NAME`)")
}

fn not_allowed(pid: u32) -> Error {
    Error::new(
        ErrorKind::Permission,
        format!(
            "may not take the open files of pid {pid}: pidfd_getfd needs ptrace access to the process (EPERM); its files are never reopened by name"
        ),
    )
    .with_hint("run as root, or as the process's user where ptrace is allowed (kernel.yama.ptrace_scope)")
}

fn fail(e: Errno, doing: &str, what: String) -> Error {
    Error::from_errno(
        nix::errno::Errno::from_raw(e.raw_os_error()),
        doing,
        std::path::Path::new(&what),
    )
}

impl ProcessFds {
    /// Holds `pid`.
    pub(crate) fn open(pid: u32) -> Result<Self> {
        let p = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| no_such_process(pid))?;
        let pidfd = rustix::process::pidfd_open(p, PidfdFlags::empty()).map_err(|e| match e {
            Errno::NOSYS => unsupported(pid, "pidfd_open"),
            Errno::SRCH | Errno::INVAL => no_such_process(pid),
            e => fail(e, "cannot hold", format!("pid {pid}")),
        })?;
        Ok(Self { pid, pidfd })
    }

    /// Descriptor `fd` of the process, or `None` when it is closed (now).
    pub(crate) fn take(&self, fd: u32) -> Result<Option<Held>> {
        let pid = self.pid;
        let Ok(target) = i32::try_from(fd) else {
            return Ok(None);
        };
        let dup = match rustix::process::pidfd_getfd(&self.pidfd, target, PidfdGetfdFlags::empty())
        {
            Ok(d) => d,
            Err(Errno::BADF) => return Ok(None),
            Err(Errno::NOSYS) => return Err(unsupported(pid, "pidfd_getfd")),
            Err(Errno::PERM | Errno::ACCESS) => return Err(not_allowed(pid)),
            Err(Errno::SRCH) => return Err(no_such_process(pid)),
            Err(e) => {
                return Err(fail(
                    e,
                    "cannot take",
                    format!("descriptor {fd} of pid {pid}"),
                ));
            }
        };
        let flags = rustix::fs::fcntl_getfl(&dup)
            .map_err(|e| fail(e, "cannot read the flags of", format!("fd {fd}")))?;
        if flags.contains(OFlags::PATH) {
            return Ok(Some(Held::Skipped(FdKind::OPath)));
        }
        let st = rustix::fs::fstat(&dup).map_err(|e| fail(e, "cannot stat", format!("fd {fd}")))?;
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => None,
            FileType::Fifo => Some(FdKind::Fifo),
            FileType::CharacterDevice => Some(FdKind::CharacterDevice),
            FileType::BlockDevice => Some(FdKind::BlockDevice),
            FileType::Socket => Some(FdKind::Socket),
            FileType::Directory => Some(FdKind::Directory),
            _ => Some(FdKind::Other),
        };
        if let Some(k) = kind {
            return Ok(Some(Held::Skipped(k)));
        }
        // The duplicate is a held regular file: opening it again through
        // this process's own descriptor reaches that inode and nothing else.
        let own = format!("/proc/self/fd/{}", dup.as_raw_fd());
        let file = rustix::fs::open(
            own.as_str(),
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| fail(e, "cannot read", format!("descriptor {fd} of pid {pid}")))?;
        Ok(Some(Held::Regular {
            file: File::from(file),
            dev: st.st_dev,
            ino: st.st_ino,
        }))
    }
}

/// Opens the file a magic link (`/proc/PID/map_files/...`) names only if
/// it is a regular file: the link is opened with `O_PATH` (no device's
/// `open` runs, no FIFO blocks), that descriptor is checked, and only then
/// opened again for reading through `/proc/self/fd/M`. `Ok(None)`: not a
/// regular file (or gone).
pub(crate) fn open_regular_via(link: &std::path::Path) -> Result<Option<(File, u64, u64)>> {
    let held = match rustix::fs::open(link, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) {
        Ok(h) => h,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(fail(e, "cannot open", link.display().to_string())),
    };
    let st =
        rustix::fs::fstat(&held).map_err(|e| fail(e, "cannot stat", link.display().to_string()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    let own = format!("/proc/self/fd/{}", held.as_raw_fd());
    let file = rustix::fs::open(
        own.as_str(),
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fail(e, "cannot read", link.display().to_string()))?;
    Ok(Some((File::from(file), st.st_dev, st.st_ino)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn own_descriptors_are_taken_as_held() {
        let me = ProcessFds::open(std::process::id()).unwrap();
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        let f = File::open(&p).unwrap();
        match me.take(f.as_raw_fd() as u32).unwrap() {
            Some(Held::Regular { file, ino, .. }) => {
                assert_eq!(ino, f.metadata().unwrap().ino());
                assert_eq!(file.metadata().unwrap().len(), 3);
            }
            _ => panic!("a regular file"),
        }
        let o_path = rustix::fs::open(&p, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
        assert!(matches!(
            me.take(o_path.as_raw_fd() as u32).unwrap(),
            Some(Held::Skipped(FdKind::OPath))
        ));
        let (r, _w) = rustix::pipe::pipe().unwrap();
        assert!(matches!(
            me.take(r.as_raw_fd() as u32).unwrap(),
            Some(Held::Skipped(FdKind::Fifo))
        ));
        assert!(me.take(1 << 20).unwrap().is_none());
    }
}
