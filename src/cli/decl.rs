//! What each subcommand declares beside its arguments, in its own
//! `cli/<cmd>.rs`, for the pages generated from the definitions (the manual
//! pages' examples and related pages).

/// What a subcommand declares for its manual page beside its arguments
/// (in its own `cli/<cmd>.rs`): real command lines and related pages.
#[derive(Debug)]
pub struct Declared {
    /// The page's words (`["device", "add"]`; `[]` for btrfs-lab(1)).
    pub words: &'static [&'static str],
    /// (what it does, the line).
    pub examples: &'static [(&'static str, &'static str)],
    /// Other manual pages worth reading next to this one.
    pub see_also: &'static [&'static str],
}
