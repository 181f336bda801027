//! File leases (`fcntl(F_SETLEASE)`): the kernel's own notice that another
//! process opens a file.
//!
//! A read lease can be taken only while nobody has the file open for
//! writing; from then on, any open for writing (or truncate) by another
//! process *breaks* it: the kernel marks the lease as being broken, sends
//! the holder a signal (SIGIO) and makes the opener wait in `open()` until
//! the holder lets the lease go (or `/proc/sys/fs/lease-break-time` passes).
//! A write lease is broken by any open at all. So a process that holds a
//! lease and sees it intact knows nobody has opened the file (for writing,
//! or at all) since it was taken, and a process that sees it broken knows
//! an opener is waiting and has not written yet.
//!
//! The holder must own the file or have CAP_LEASE (root has it). SIGIO is
//! caught (its default action would end the process); whether a lease is
//! intact is read with `F_GETLEASE`, never inferred from the signal.
//!
//! This module uses `unsafe` for the `fcntl` calls, which neither nix nor
//! rustix wrap.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;

use nix::errno::Errno;

/// What a lease guards against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseKind {
    /// Broken by another open for writing. Needs a descriptor opened
    /// read-only, and nobody else writing.
    Read,
    /// Broken by any other open. Needs nobody else to have the file open.
    Write,
}

impl LeaseKind {
    fn raw(self) -> libc::c_int {
        match self {
            LeaseKind::Read => libc::F_RDLCK,
            LeaseKind::Write => libc::F_WRLCK,
        }
    }
}

/// A lease on an open file, released when dropped (or when the file is
/// closed, whichever comes first).
#[derive(Debug)]
pub(crate) struct Lease<'a> {
    file: &'a File,
    kind: LeaseKind,
}

/// Takes a lease of `kind` on `file`. `EAGAIN` when it conflicts with an
/// open the file has now (someone writing; for a write lease, anyone),
/// `EACCES` when not the owner and not CAP_LEASE, `EINVAL` where leases are
/// not supported (or disabled: `/proc/sys/fs/leases-enable`).
pub fn take(file: &File, kind: LeaseKind) -> Result<Lease<'_>, Errno> {
    super::signals::catch_lease_breaks()?;
    // SAFETY: F_SETLEASE takes an int argument and only changes the lease
    // state of the open file description behind this valid descriptor.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, kind.raw()) };
    Errno::result(r)?;
    Ok(Lease { file, kind })
}

impl Lease<'_> {
    /// True while nobody has opened the file in a way that breaks it:
    /// `F_GETLEASE` still shows the lease as taken. During a break it shows
    /// what the lease must become (none, for a read lease), and after the
    /// break time nothing.
    pub fn intact(&self) -> bool {
        // SAFETY: F_GETLEASE takes no argument and only reads the lease
        // state of this valid descriptor.
        let r = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_GETLEASE) };
        r == self.kind.raw()
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `take`; F_UNLCK removes this description's lease,
        // which lets a waiting opener go on.
        let _ = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn a_read_lease_breaks_when_someone_opens_for_writing() {
        let t = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = t.path().join("f");
        std::fs::write(&p, "x").unwrap();
        let reader = File::open(&p).unwrap();
        let lease = match take(&reader, LeaseKind::Read) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("leases not available here ({e}): skipped");
                return;
            }
        };
        assert!(lease.intact());
        // Another reader does not break it.
        let other = File::open(&p).unwrap();
        assert!(lease.intact());
        drop(other);
        // A writer does: it waits in open() (O_NONBLOCK makes it fail with
        // EWOULDBLOCK instead, and still starts the break).
        let w = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p);
        assert_eq!(w.unwrap_err().raw_os_error(), Some(libc::EWOULDBLOCK));
        assert!(!lease.intact());
        drop(lease);
        // While a writer has it open, no read lease can be taken.
        let w = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        assert_eq!(take(&reader, LeaseKind::Read).unwrap_err(), Errno::EAGAIN);
        drop(w);
        assert!(take(&reader, LeaseKind::Read).is_ok());
    }
}
