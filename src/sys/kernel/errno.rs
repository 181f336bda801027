//! The one place an errno changes type: rustix's (what the system calls
//! return) into nix's (what the nix-typed APIs take), or into its number
//! and meaning, which `crate::error::Error::from_errno` words. The number
//! is the same; only the type differs.

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
