//! The one place an errno changes type: rustix's (what the system calls
//! return) into nix's (what [`Error::from_errno`] and the nix-typed APIs
//! take) or into the crate's [`Error`]. The number is the same; only the
//! type differs.

use std::path::Path;

use crate::error::Error;

/// A system call's errno as the crate's error: `doing` reads like "cannot
/// stat", `path` is what it was done to (see [`Error::from_errno`]).
pub(crate) fn to_error(e: rustix::io::Errno, doing: &str, path: &Path) -> Error {
    Error::from_errno(e, doing, path)
}

/// rustix's errno as nix's, for the functions whose error type is nix's.
pub(crate) fn to_nix(e: rustix::io::Errno) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(e.raw_os_error())
}

/// The errno of an I/O error, `EIO` when it carries none.
pub(crate) fn of_io(e: &std::io::Error) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

/// An errno as its number, whichever type it came as (nix's, rustix's, a
/// raw `i32` from `std::io::Error`): what [`Error::from_errno`] takes.
pub(crate) trait RawErrno {
    /// The number.
    fn raw(self) -> i32;
}

impl RawErrno for nix::errno::Errno {
    fn raw(self) -> i32 {
        self as i32
    }
}

impl RawErrno for rustix::io::Errno {
    fn raw(self) -> i32 {
        self.raw_os_error()
    }
}

impl RawErrno for i32 {
    fn raw(self) -> i32 {
        self
    }
}

/// What an errno means to btrfs-lab's messages ([`Error::from_errno`]
/// words each); `Other` carries the C library's description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Meaning {
    NotFound,
    Permission,
    ReadOnly,
    NoSpace,
    Busy,
    NotDirectory,
    IsDirectory,
    SymbolicLink,
    Interrupted,
    Other(&'static str),
}

impl Meaning {
    /// The meaning of errno `raw`.
    pub(crate) fn of(raw: i32) -> Self {
        use nix::errno::Errno;
        match Errno::from_raw(raw) {
            Errno::ENOENT => Self::NotFound,
            Errno::EACCES | Errno::EPERM => Self::Permission,
            Errno::EROFS => Self::ReadOnly,
            Errno::ENOSPC | Errno::EDQUOT => Self::NoSpace,
            Errno::EBUSY => Self::Busy,
            Errno::ENOTDIR => Self::NotDirectory,
            Errno::EISDIR => Self::IsDirectory,
            Errno::ELOOP => Self::SymbolicLink,
            Errno::EINTR => Self::Interrupted,
            other => Self::Other(other.desc()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn the_number_and_the_sentence_survive() {
        assert_eq!(to_nix(rustix::io::Errno::NOSPC), nix::errno::Errno::ENOSPC);
        let e = to_error(rustix::io::Errno::ROFS, "cannot write", Path::new("/x"));
        assert_eq!(e.kind(), ErrorKind::ReadOnly);
        assert_eq!(e.message(), "cannot write /x: read-only filesystem");
        assert_eq!(
            of_io(&std::io::Error::from_raw_os_error(libc::EBUSY)),
            nix::errno::Errno::EBUSY
        );
        assert_eq!(of_io(&std::io::Error::other("x")), nix::errno::Errno::EIO);
    }

    #[test]
    fn errno_mapping_gives_kind_and_hint() {
        let e = Error::from_errno(
            nix::errno::Errno::EROFS,
            "cannot create a file in",
            Path::new("/x"),
        );
        assert_eq!(e.kind(), ErrorKind::ReadOnly);
        assert_eq!(
            e.message(),
            "cannot create a file in /x: read-only filesystem"
        );
        assert!(e.hint().is_some());
        assert_eq!(e.exit_code(), crate::error::exit::ERROR);
        assert_eq!(
            Meaning::of(libc::EIO),
            Meaning::Other(nix::errno::Errno::EIO.desc())
        );
        let e = Error::from_errno(rustix::io::Errno::NOENT, "cannot open", Path::new("/x"));
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }
}
