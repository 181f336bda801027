//! One error type for the whole library: a user-facing sentence, an optional
//! hint, and a kind that decides the exit status.
//!
//! Messages are written where the context is known ("cannot create a file in
//! /mnt/x: permission denied"), so the CLI only prints them.

use std::fmt;
use std::path::Path;

use crate::sys::kernel::errno::{Meaning, RawErrno};

/// The exit statuses shared by every command, as numbers (the registry
/// is [`crate::model::exit`]).
pub mod exit {
    use crate::model::exit as registry;
    /// Success (for verdict commands: the good verdict).
    pub const OK: u8 = registry::OK.code;
    /// The operation failed or was refused; nothing was changed.
    pub const ERROR: u8 = registry::ERROR.code;
    /// Bad command line.
    pub const USAGE: u8 = registry::USAGE.code;
    /// Interrupted by SIGINT or SIGTERM; clean-up was done.
    pub const INTERRUPTED: u8 = registry::INTERRUPTED.code;
}

/// What went wrong, coarsely: enough to pick an exit status and a hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad arguments or bad input text.
    Usage,
    /// A path or device does not exist.
    NotFound,
    /// Not allowed (not root, no write permission).
    Permission,
    /// The target is not what the command needs (not btrfs, not a directory).
    WrongTarget,
    /// The kernel or filesystem cannot do this (O_DIRECT on tmpfs, ...).
    Unsupported,
    /// Something else holds the resource.
    Busy,
    /// No space left.
    NoSpace,
    /// Read-only filesystem.
    ReadOnly,
    /// A program we ran (mkfs.btrfs, ...) failed, or is missing.
    Tool,
    /// Recorded state does not match reality.
    State,
    /// The user declined, or a confirmation could not be asked for.
    Refused,
    /// Input text (a capture, a file) does not parse.
    Parse,
    /// The user interrupted us.
    Interrupted,
    /// Any other I/O error.
    Io,
}

/// The library's error: one line for the user, maybe a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    hint: Option<String>,
}

/// Library result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with a one-line `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            hint: None,
        }
    }

    /// Adds (or replaces) the hint: what the user can do about it.
    #[must_use]
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Usage error.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message)
    }

    /// The operation was interrupted by a signal.
    pub fn interrupted() -> Self {
        Self::new(ErrorKind::Interrupted, "interrupted; clean-up done")
    }

    /// Turns an errno from an operation on `path` into a user sentence.
    /// `doing` reads like "cannot create a file in".
    pub(crate) fn from_errno(errno: impl RawErrno, doing: &str, path: &Path) -> Self {
        let what = format!("{doing} {}", path.display());
        let (kind, reason, hint) = match Meaning::of(errno.raw()) {
            Meaning::NotFound => (ErrorKind::NotFound, "no such file or directory", None),
            Meaning::Permission => (
                ErrorKind::Permission,
                "permission denied",
                Some("run as root, or choose a path you may write to"),
            ),
            Meaning::ReadOnly => (
                ErrorKind::ReadOnly,
                "read-only filesystem",
                Some("remount it read-write or choose another path"),
            ),
            Meaning::NoSpace => (
                ErrorKind::NoSpace,
                "no space left on the filesystem",
                Some("free some space, or test with less data (--file-size, --device-size)"),
            ),
            Meaning::Busy => (ErrorKind::Busy, "device or resource busy", None),
            Meaning::NotDirectory => (ErrorKind::WrongTarget, "not a directory", None),
            Meaning::IsDirectory => (ErrorKind::WrongTarget, "is a directory", None),
            Meaning::SymbolicLink => (
                ErrorKind::WrongTarget,
                "is a symbolic link, which btrfs-lab does not follow here",
                None,
            ),
            Meaning::Interrupted => return Self::interrupted(),
            Meaning::Other(desc) => (ErrorKind::Io, desc, None),
        };
        let mut e = Self::new(kind, format!("{what}: {reason}"));
        if let Some(h) = hint {
            e = e.with_hint(h);
        }
        e
    }

    /// Same as [`Error::from_errno`] for a `std::io::Error`.
    pub(crate) fn from_io(err: &std::io::Error, doing: &str, path: &Path) -> Self {
        match err.raw_os_error() {
            Some(code) => Self::from_errno(code, doing, path),
            None => Self::new(ErrorKind::Io, format!("{doing} {}: {err}", path.display())),
        }
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The one-line message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The hint, if any.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The registry's status for this error: a usage error is
    /// [`crate::model::exit::USAGE`], an interruption
    /// [`crate::model::exit::INTERRUPTED`], anything else
    /// [`crate::model::exit::ERROR`].
    pub fn status(&self) -> crate::model::exit::Status {
        use crate::model::exit;
        match self.kind {
            ErrorKind::Usage => exit::USAGE,
            ErrorKind::Interrupted => exit::INTERRUPTED,
            _ => exit::ERROR,
        }
    }

    /// The documented exit status for this error ([`Error::status`]).
    pub fn exit_code(&self) -> u8 {
        self.status().code
    }
}

/// The last record of a JSON Lines stream that failed after its operation
/// had started (docs/json.md): `{"event":"error","error":{...}}`.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct ErrorEvent {
    /// Always `error`.
    #[schemars(extend("const" = "error"))]
    pub event: String,
    /// What went wrong.
    pub error: ErrorDocument,
}

/// An error as JSON.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct ErrorDocument {
    /// The one-line message.
    pub message: String,
    /// What to do, when there is something to say.
    pub hint: Option<String>,
    /// The exit status that goes with it.
    pub exit_code: u8,
}

impl ErrorEvent {
    /// The record for `e`.
    pub fn new(e: &Error) -> Self {
        Self {
            event: "error".to_owned(),
            error: ErrorDocument {
                message: e.message().to_owned(),
                hint: e.hint().map(str::to_owned),
                exit_code: e.exit_code(),
            },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errno conversions of sys::kernel::errno, worded here.
    mod errno {
        use super::super::*;
        use crate::sys::kernel::errno::{Meaning, of_io, to_nix};

        #[test]
        fn the_number_and_the_sentence_survive() {
            assert_eq!(to_nix(rustix::io::Errno::NOSPC), nix::errno::Errno::ENOSPC);
            let e = Error::from_errno(rustix::io::Errno::ROFS, "cannot write", Path::new("/x"));
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

    #[test]
    fn kinds_give_exit_statuses() {
        assert_eq!(Error::interrupted().exit_code(), exit::INTERRUPTED);
        assert_eq!(Error::usage("bad").exit_code(), exit::USAGE);
    }
}
