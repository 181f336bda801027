//! The one registry of exit statuses: every status a command returns is a
//! [`Status`] here (its number, a stable name, the commands that return it
//! and what it means), and every place that returns one takes it from here
//! (error kinds map into it: [`crate::error::Error::exit_code`]).
//!
//! Generated from it: `--help`'s EXIT STATUS table ([`help_table`]) and
//! btrfs-lab(1)'s. What each status means for each command is declared
//! beside the command (the binary's `cli/<cmd>.rs`, `PAGES`), which its man
//! page and `docs/exit-codes.md` are generated from (`cli::decl`).
//!
//! The numbers are fixed: scripts and monitoring depend on them.

/// One documented exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The number the process exits with.
    pub code: u8,
    /// A stable name (`buffered-fallback`), as the docs and reports say it.
    pub name: &'static str,
    /// The commands `--help`'s summary says return it; empty for every
    /// command (a test of the binary checks each one named declares it).
    pub commands: &'static str,
    /// What it means, in a few words.
    pub meaning: &'static str,
}

/// Success (for verdict commands: the good verdict).
pub const OK: Status = Status {
    code: 0,
    name: "ok",
    commands: "",
    meaning: "success",
};
/// The operation failed or was refused; nothing was changed.
pub const ERROR: Status = Status {
    code: 1,
    name: "error",
    commands: "",
    meaning: "error: the operation failed or was refused; nothing was changed",
};
/// Bad command line (and, for `--parse`, nothing of that kind).
pub const USAGE: Status = Status {
    code: 2,
    name: "usage",
    commands: "",
    meaning: "bad command line",
};
/// Interrupted by SIGINT, SIGTERM (or SIGHUP); clean-up was done.
pub const INTERRUPTED: Status = Status {
    code: 130,
    name: "interrupted",
    commands: "",
    meaning: "interrupted (SIGINT or SIGTERM); clean-up was done (convert: the balance is paused)",
};
/// `probe-dio`: the O_DIRECT writes bypassed the page cache.
pub const DIRECT: Status = Status {
    code: 0,
    name: "direct",
    commands: "probe-dio",
    meaning: "O_DIRECT writes are direct",
};
/// `probe-dio`: the O_DIRECT writes bypassed the page cache through a
/// bounce buffer (a copy paid, checksums kept).
pub const DIRECT_BOUNCED: Status = Status {
    code: 6,
    name: "direct-bounced",
    commands: "probe-dio",
    meaning: "direct-bounced: not through the page cache, but copied through a bounce buffer",
};
/// `probe-dio`: the kernel turned the O_DIRECT writes buffered.
pub const BUFFERED_FALLBACK: Status = Status {
    code: 3,
    name: "buffered-fallback",
    commands: "probe-dio",
    meaning: "buffered-fallback",
};
/// `probe-dio`: the data profile makes every O_DIRECT write buffered.
pub const PROFILE_FORCED: Status = Status {
    code: 4,
    name: "profile-forced",
    commands: "probe-dio",
    meaning: "profile-forced",
};
/// `probe-dio`: the measurement cannot tell.
pub const INCONCLUSIVE: Status = Status {
    code: 5,
    name: "inconclusive",
    commands: "probe-dio",
    meaning: "inconclusive",
};
/// `read-test`: the methods read different bytes.
pub const CHECKSUM_MISMATCH: Status = Status {
    code: 3,
    name: "checksum-mismatch",
    commands: "read-test",
    meaning: "the methods read different bytes",
};
/// `bench`: at least one figure is flagged.
pub const FLAGGED: Status = Status {
    code: 3,
    name: "flagged",
    commands: "bench",
    meaning: "a figure is flagged",
};
/// `nocow --check`: files that are not NOCOW.
pub const NOT_NOCOW: Status = Status {
    code: 6,
    name: "not-nocow",
    commands: "nocow --check",
    meaning: "files that are not NOCOW",
};
/// `device replace`, `device remove`: done, but some chunks lack their
/// profile's redundancy, or blocks could not be read (their files are
/// damaged); the report says which and how to fix it.
pub const NOT_REDUNDANT: Status = Status {
    code: 4,
    name: "not-redundant",
    commands: "device replace",
    meaning: "done, but chunks lack their redundancy or blocks were lost",
};
/// `show`: a device's error counters are not all zero (bit 6, as
/// `btrfs device stats --check`).
pub const DEVICE_ERRORS: Status = Status {
    code: 64,
    name: "device-errors",
    commands: "show",
    meaning: "a device's error counters are not all zero",
};
/// `show`: a member device of a filesystem shown is missing (it wins over
/// [`DEVICE_ERRORS`]).
pub const DEVICE_MISSING: Status = Status {
    code: 3,
    name: "device-missing",
    commands: "show",
    meaning: "a member device is missing",
};
/// `doctor`: no finding worse than info (monitoring plugins' OK).
pub const HEALTHY: Status = Status {
    code: 0,
    name: "healthy",
    commands: "doctor",
    meaning: "no finding worse than info",
};
/// `doctor`: the worst finding is a warning (monitoring plugins' WARNING).
pub const WARNING: Status = Status {
    code: 1,
    name: "warning",
    commands: "doctor",
    meaning: "the worst finding is a warning",
};
/// `doctor`: a critical finding (monitoring plugins' CRITICAL).
pub const CRITICAL: Status = Status {
    code: 2,
    name: "critical",
    commands: "doctor",
    meaning: "a critical finding",
};
/// `doctor`: it could not look (monitoring plugins' UNKNOWN).
pub const UNKNOWN: Status = Status {
    code: 3,
    name: "unknown",
    commands: "doctor",
    meaning: "it could not look (UNKNOWN)",
};

/// `rescue`: a file is damaged, unknown or failed (or could not be read):
/// not everything could be rescued.
pub const FILES_LOST: Status = Status {
    code: 3,
    name: "files-lost",
    commands: "rescue",
    meaning: "some files are damaged or lost",
};

/// `reclaim`: the steps ran (or none could help) and the goal is not
/// reached; what was freed stays freed.
pub const GOAL_NOT_REACHED: Status = Status {
    code: 3,
    name: "goal-not-reached",
    commands: "reclaim",
    meaning: "the goal was not reached: add a device or delete files",
};

/// `scrub`: errors were found and every one was corrected.
pub const SCRUB_CORRECTED: Status = Status {
    code: 3,
    name: "errors-corrected",
    commands: "scrub",
    meaning: "errors were found, all corrected",
};

/// `scrub`: errors no good copy was found for (damaged files).
pub const SCRUB_UNCORRECTABLE: Status = Status {
    code: 4,
    name: "errors-uncorrectable",
    commands: "scrub",
    meaning: "uncorrectable errors: files are damaged",
};

/// A command that changes the system made its change, and then its report
/// could not be written (stdout full or unwritable after the change): not
/// [`ERROR`], which says nothing was changed. As sysexits' `EX_IOERR`.
/// Before a change the output is checked (an unwritable stdout refuses
/// with [`ERROR`] while nothing was changed); this status is what a write
/// error after it gives, in place of the command's own.
pub const REPORT_NOT_WRITTEN: Status = Status {
    code: 74,
    name: "report-not-written",
    commands: "",
    meaning: "done (a command that changes the system made its change), but its report could \
              not be written (stdout full or unwritable)",
};

/// Every status, the shared ones first.
pub const ALL: &[Status] = &[
    OK,
    ERROR,
    USAGE,
    INTERRUPTED,
    REPORT_NOT_WRITTEN,
    DIRECT,
    BUFFERED_FALLBACK,
    PROFILE_FORCED,
    INCONCLUSIVE,
    DIRECT_BOUNCED,
    CHECKSUM_MISMATCH,
    FLAGGED,
    NOT_NOCOW,
    NOT_REDUNDANT,
    DEVICE_ERRORS,
    DEVICE_MISSING,
    HEALTHY,
    WARNING,
    CRITICAL,
    UNKNOWN,
    FILES_LOST,
    GOAL_NOT_REACHED,
    SCRUB_CORRECTED,
    SCRUB_UNCORRECTABLE,
];

/// The statuses a number stands for, in registry order.
pub fn named(code: u8) -> impl Iterator<Item = &'static Status> {
    ALL.iter().filter(move |s| s.code == code)
}

/// Each number once, with what it means for every command and then per
/// command: `--help`'s table and btrfs-lab(1)'s EXIT STATUS.
pub fn summary() -> Vec<(u8, String)> {
    let mut codes: Vec<u8> = ALL.iter().map(|s| s.code).collect();
    codes.sort_unstable();
    codes.dedup();
    codes
        .into_iter()
        .map(|code| {
            let (common, by_command): (Vec<&Status>, Vec<&Status>) =
                named(code).partition(|s| s.commands.is_empty());
            let common: Vec<&str> = common.iter().map(|s| s.meaning).collect();
            let by_command: Vec<String> = by_command
                .iter()
                .map(|s| format!("{}: {}", s.commands, s.meaning))
                .collect();
            let text = match (common.is_empty(), by_command.is_empty()) {
                (false, false) => format!("{} ({})", common.join("; "), by_command.join("; ")),
                (false, true) => common.join("; "),
                _ => by_command.join("; "),
            };
            (code, text)
        })
        .collect()
}

/// `--help`'s closing table ([`summary`]), wrapped to 78 columns.
pub fn help_table() -> String {
    let mut out = String::from("Exit status:");
    for (code, text) in summary() {
        out.push('\n');
        out.push_str(&wrap(&format!("  {code:<4} "), &text, 78));
    }
    out
}

/// `text` after `lead`, wrapped to `width` columns, further lines
/// indented as far as `lead` (no newline at the end).
fn wrap(lead: &str, text: &str, width: usize) -> String {
    let indent = " ".repeat(lead.chars().count());
    let filled = crate::report::text::fill(text, width, lead, &indent);
    filled.strip_suffix('\n').unwrap_or(&filled).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers users' scripts depend on, name by name.
    #[test]
    fn numbers_stay_as_documented() {
        let numbers: Vec<(&str, &str, u8)> =
            ALL.iter().map(|s| (s.commands, s.name, s.code)).collect();
        assert_eq!(
            numbers,
            [
                ("", "ok", 0),
                ("", "error", 1),
                ("", "usage", 2),
                ("", "interrupted", 130),
                ("", "report-not-written", 74),
                ("probe-dio", "direct", 0),
                ("probe-dio", "buffered-fallback", 3),
                ("probe-dio", "profile-forced", 4),
                ("probe-dio", "inconclusive", 5),
                ("probe-dio", "direct-bounced", 6),
                ("read-test", "checksum-mismatch", 3),
                ("bench", "flagged", 3),
                ("nocow --check", "not-nocow", 6),
                ("device replace", "not-redundant", 4),
                ("show", "device-errors", 64),
                ("show", "device-missing", 3),
                ("doctor", "healthy", 0),
                ("doctor", "warning", 1),
                ("doctor", "critical", 2),
                ("doctor", "unknown", 3),
                ("rescue", "files-lost", 3),
                ("reclaim", "goal-not-reached", 3),
                ("scrub", "errors-corrected", 3),
                ("scrub", "errors-uncorrectable", 4),
            ]
        );
        // One name means one status.
        let mut keys: Vec<(&str, &str)> = ALL.iter().map(|s| (s.commands, s.name)).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), ALL.len());
    }

    /// Every number of the registry is in `--help`'s table, within 78
    /// columns (each command's own table is the binary's: cli::decl).
    #[test]
    fn help_lists_every_status() {
        let help = help_table();
        for s in ALL {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{} ", s.code)))
                .unwrap_or_else(|| panic!("--help has no line for {}:\n{help}", s.code));
            assert!(line.len() <= 78, "{line}");
        }
        // The statuses the old hand-written table missed.
        let mut blocks: Vec<(String, String)> = Vec::new();
        for line in help.lines().skip(1) {
            match line.split_whitespace().next() {
                Some(first) if !line.starts_with("       ") => {
                    blocks.push((first.to_owned(), line.to_owned()));
                }
                _ => blocks.last_mut().unwrap().1.push_str(line),
            }
        }
        for (code, what) in [
            ("3", "bench"),
            ("6", "nocow"),
            ("64", "show"),
            ("3", "doctor"),
        ] {
            let block = &blocks.iter().find(|(c, _)| c == code).unwrap().1;
            assert!(
                block.contains(what),
                "--help's {code} lacks {what}:\n{help}"
            );
        }
        for code in ["0", "1", "2"] {
            let block = &blocks.iter().find(|(c, _)| c == code).unwrap().1;
            assert!(
                block.contains("doctor"),
                "--help's {code} lacks doctor:\n{help}"
            );
        }
    }

    #[test]
    fn wrap_breaks_at_words() {
        let w = wrap("  3    ", "aaa bbb ccc", 13);
        assert_eq!(w, "  3    aaa\n       bbb\n       ccc");
    }
}
