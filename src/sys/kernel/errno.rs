//! The one place an errno changes type: rustix's (what the system calls
//! return) into nix's (what [`Error::from_errno`] and the nix-typed APIs
//! take) or into the crate's [`Error`]. The number is the same; only the
//! type differs.

use std::path::Path;

use crate::error::Error;

/// A system call's errno as the crate's error: `doing` reads like "cannot
/// stat", `path` is what it was done to (see [`Error::from_errno`]).
pub(crate) fn to_error(e: rustix::io::Errno, doing: &str, path: &Path) -> Error {
    Error::from_errno(to_nix(e), doing, path)
}

/// rustix's errno as nix's, for the functions whose error type is nix's.
pub(crate) fn to_nix(e: rustix::io::Errno) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(e.raw_os_error())
}

/// The errno of an I/O error, `EIO` when it carries none.
pub(crate) fn of_io(e: &std::io::Error) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
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
}
