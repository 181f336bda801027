//! What a subcommand's page declares beside its arguments, in its own
//! `cli/<cmd>.rs` (its `PAGES`): the types and the rows every command
//! shares. The registry of every page, and what is generated from it, is
//! [`super::decl`].

use btrfs_lab::model::exit::{self as registry, Status};

/// What a subcommand declares beside its arguments (in its own
/// `cli/<cmd>.rs`).
#[derive(Debug)]
pub struct Declared {
    /// The page's words (`["device", "add"]`; `[]` for btrfs-lab(1)).
    pub words: &'static [&'static str],
    /// (what it does, the line).
    pub examples: &'static [(&'static str, &'static str)],
    /// Other manual pages worth reading next to this one.
    pub see_also: &'static [&'static str],
    /// Its exit statuses, in the order its tables list them; empty: its
    /// parent's (`sandbox up` has `sandbox`'s) or [`DEFAULT`].
    pub exits: &'static [Row],
    /// The JSON documents it writes (names of `btrfs_lab::schema`'s list).
    #[cfg_attr(not(test), allow(dead_code))] // checked by the tests
    pub documents: &'static [&'static str],
    /// Whether it takes `--dry-run`.
    #[cfg_attr(not(test), allow(dead_code))] // checked by the tests
    pub dry_run: bool,
    /// What its output is.
    #[cfg_attr(not(test), allow(dead_code))] // checked by the tests
    pub output: Shape,
}

impl Declared {
    /// Nothing declared: what a declaration's fields it does not name
    /// are (`..Declared::NONE`).
    pub const NONE: Self = Self {
        words: &[],
        examples: &[],
        see_also: &[],
        exits: &[],
        documents: &[],
        dry_run: false,
        output: Shape::Text,
    };
}

/// What a subcommand prints on stdout with `--json` (text without it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Text only: no `--json`.
    Text,
    /// One JSON document.
    Document,
    /// JSON Lines: a record per line.
    Lines,
}

/// One line of a command's EXIT STATUS table: a status of the registry and
/// what it means for this command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// The status.
    pub status: Status,
    /// What it means for this command.
    pub meaning: &'static str,
}

/// A [`Row`].
pub const fn row(status: Status, meaning: &'static str) -> Row {
    Row { status, meaning }
}

/// A bad command line, as for every command.
pub const BAD: Row = row(
    registry::USAGE,
    "bad command line (unknown option, invalid value).",
);
/// The status a bad command line of the command `words` exits with:
/// UNKNOWN (3) for `doctor`, as monitoring plugins (Nagios, Icinga, Sensu)
/// read a usage error, where 2 would page as CRITICAL; [`registry::USAGE`]
/// (2) for every other command.
pub fn usage_status(words: &[&str]) -> Status {
    match words {
        ["doctor", ..] => registry::UNKNOWN,
        _ => registry::USAGE,
    }
}

/// Interrupted, as for every command.
pub const INT: Row = row(
    registry::INTERRUPTED,
    "interrupted by SIGINT or SIGTERM; clean-up was done (a second signal exits at once).",
);
/// The row of every command that changes the system.
pub const NOT_WRITTEN: Row = row(
    registry::REPORT_NOT_WRITTEN,
    "report-not-written: the change was made, but the report could not be written \
     (stdout became full or unwritable after it; an unwritable stdout before it refuses \
     with 1); the error line says where to see what was done. It takes the place of the \
     command's own status.",
);
/// Failed or refused, nothing changed.
pub const FAIL: Row = row(
    registry::ERROR,
    "error: the operation failed or was refused; nothing was changed, or what was begun \
     was rolled back.",
);

/// The statuses of a command that declares none of its own.
pub const DEFAULT: &[Row] = &[row(registry::OK, "success."), FAIL, BAD, INT];
