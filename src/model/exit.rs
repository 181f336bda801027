//! The one registry of exit statuses: every status a command returns is a
//! [`Status`] here (its number, a stable name, the commands that return it
//! and what it means), and every place that returns one takes it from here
//! (error kinds map into it: [`crate::error::Error::exit_code`]).
//!
//! Generated from it: `--help`'s EXIT STATUS table ([`help_table`]), the
//! man pages' EXIT STATUS section ([`page`]) and the tables of
//! `docs/exit-codes.md` ([`markdown`];
//! `BTRFS_LAB_WRITE_EXIT_CODES=1 cargo test --features test-hooks --lib model::exit::`
//! rewrites them, a test fails when they are stale).
//!
//! The numbers are fixed: scripts and monitoring depend on them.

/// One documented exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The number the process exits with.
    pub code: u8,
    /// A stable name (`buffered-fallback`), as the docs and reports say it.
    pub name: &'static str,
    /// The commands that return it; empty for every command.
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
pub(crate) const DIRECT: Status = Status {
    code: 0,
    name: "direct",
    commands: "probe-dio",
    meaning: "O_DIRECT writes are direct",
};
/// `probe-dio`: the O_DIRECT writes bypassed the page cache through a
/// bounce buffer (a copy paid, checksums kept).
pub(crate) const DIRECT_BOUNCED: Status = Status {
    code: 6,
    name: "direct-bounced",
    commands: "probe-dio",
    meaning: "direct-bounced: not through the page cache, but copied through a bounce buffer",
};
/// `probe-dio`: the kernel turned the O_DIRECT writes buffered.
pub(crate) const BUFFERED_FALLBACK: Status = Status {
    code: 3,
    name: "buffered-fallback",
    commands: "probe-dio",
    meaning: "buffered-fallback",
};
/// `probe-dio`: the data profile makes every O_DIRECT write buffered.
pub(crate) const PROFILE_FORCED: Status = Status {
    code: 4,
    name: "profile-forced",
    commands: "probe-dio",
    meaning: "profile-forced",
};
/// `probe-dio`: the measurement cannot tell.
pub(crate) const INCONCLUSIVE: Status = Status {
    code: 5,
    name: "inconclusive",
    commands: "probe-dio",
    meaning: "inconclusive",
};
/// `read-test`: the methods read different bytes.
pub(crate) const CHECKSUM_MISMATCH: Status = Status {
    code: 3,
    name: "checksum-mismatch",
    commands: "read-test",
    meaning: "the methods read different bytes",
};
/// `bench`: at least one figure is flagged.
pub(crate) const FLAGGED: Status = Status {
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
pub(crate) const DEVICE_ERRORS: Status = Status {
    code: 64,
    name: "device-errors",
    commands: "show",
    meaning: "a device's error counters are not all zero",
};
/// `doctor`: no finding worse than info (monitoring plugins' OK).
pub(crate) const HEALTHY: Status = Status {
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
    HEALTHY,
    WARNING,
    CRITICAL,
    UNKNOWN,
    FILES_LOST,
    GOAL_NOT_REACHED,
    SCRUB_CORRECTED,
    SCRUB_UNCORRECTABLE,
];

/// One line of a command's table: a status and what it means there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// The status.
    pub status: Status,
    /// What it means for this command.
    pub meaning: &'static str,
}

const fn row(status: Status, meaning: &'static str) -> Row {
    Row { status, meaning }
}

/// The statuses of one command (a man page, a table of the docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// The command as typed after `btrfs-lab` (`device add`); empty for
    /// btrfs-lab itself (every command).
    pub command: &'static str,
    /// Its statuses, in the order they are listed.
    pub rows: &'static [Row],
}

const BAD: Row = row(USAGE, "bad command line (unknown option, invalid value).");
const INT: Row = row(
    INTERRUPTED,
    "interrupted by SIGINT or SIGTERM; clean-up was done (a second signal exits at once).",
);
/// The row of every command that changes the system.
const NOT_WRITTEN: Row = row(
    REPORT_NOT_WRITTEN,
    "report-not-written: the change was made, but the report could not be written \
     (stdout became full or unwritable after it; an unwritable stdout before it refuses \
     with 1); the error line says where to see what was done. It takes the place of the \
     command's own status.",
);
const FAIL: Row = row(
    ERROR,
    "error: the operation failed or was refused; nothing was changed, or what was begun \
     was rolled back.",
);

/// The commands that have statuses of their own; any other has
/// [`DEFAULT`]'s, and btrfs-lab itself lists them all ([`summary`]).
pub(crate) const PAGES: &[Page] = &[
    Page {
        command: "probe-dio",
        rows: &[
            row(
                DIRECT,
                "direct: the O_DIRECT writes bypassed the page cache.",
            ),
            row(
                BUFFERED_FALLBACK,
                "buffered-fallback: the kernel turned the writes buffered (btrfs: data \
                 checksums; the NOCOW control was direct); with --pid: a file the process \
                 opened with O_DIRECT dirtied page-cache folios.",
            ),
            row(
                PROFILE_FORCED,
                "profile-forced: the data profile (DUP, RAID1, RAID1C3/4, RAID10, RAID5/6) \
                 makes every O_DIRECT write buffered, NOCOW files included.",
            ),
            row(
                INCONCLUSIVE,
                "inconclusive: background writes or an in-between ratio made the measurement \
                 unreliable; the report says why.",
            ),
            row(
                DIRECT_BOUNCED,
                "direct-bounced: the writes bypassed the page cache, but the kernel copied each \
                 through a bounce buffer (7.3 and later: checksummed files, profiles with \
                 copies); with --pid: a file's writes were bounced and none fell back.",
            ),
            FAIL,
            BAD,
            INT,
        ],
    },
    Page {
        command: "device replace",
        rows: &[
            row(
                OK,
                "replaced and verified (--status, --cancel: reported, cancelled).",
            ),
            row(
                NOT_REDUNDANT,
                "replaced, but chunks lack their profile's copies (the report names the \
                 convert that fixes them), blocks no copy could be read of were lost, or the \
                 scrub asked for failed.",
            ),
            row(
                ERROR,
                "refused or failed; nothing was changed (OLD is still a member).",
            ),
            BAD,
            NOT_WRITTEN,
            row(
                INTERRUPTED,
                "SIGINT, SIGTERM or SIGHUP: the replace goes on in the kernel; --status follows \
                 it, the same command again finishes the steps after it. During --scrub: the \
                 replace is done, the scrub cancelled (btrfs scrub resume continues it).",
            ),
        ],
    },
    Page {
        command: "device remove",
        rows: &[
            row(
                OK,
                "removed and verified, or nothing to do (an earlier remove of btrfs-lab took \
                 the devices out).",
            ),
            row(
                NOT_REDUNDANT,
                "removed, but chunks lack their profile's copies (the report names the convert \
                 that fixes them).",
            ),
            row(
                ERROR,
                "refused or failed; what moved stays moved, the device is still a member.",
            ),
            BAD,
            NOT_WRITTEN,
            row(
                INTERRUPTED,
                "SIGINT, SIGTERM or SIGHUP: stopped after the chunk in progress; the device is \
                 still a member and the same command again continues.",
            ),
        ],
    },
    Page {
        command: "show",
        rows: &[
            row(OK, "every device's error counters are zero."),
            row(
                DEVICE_ERRORS,
                "a device of a filesystem shown has a non-zero error counter (has_errors in \
                 JSON).",
            ),
            FAIL,
            BAD,
        ],
    },
    Page {
        command: "links",
        rows: &[
            row(
                OK,
                "the links were reported, whatever they show (a capped link is a warning in the \
                 report).",
            ),
            row(
                ERROR,
                "cannot report: neither a mounted btrfs nor a device, an unreadable tree, \
                 --thermal without root.",
            ),
            BAD,
        ],
    },
    Page {
        command: "df",
        rows: DF_USAGE,
    },
    Page {
        command: "usage",
        rows: DF_USAGE,
    },
    Page {
        command: "read-test",
        rows: &[
            row(OK, "measured (read the report for flagged methods)."),
            row(
                CHECKSUM_MISMATCH,
                "the methods read different bytes (checksum mismatch): no figure means \
                 anything until that is explained.",
            ),
            row(
                ERROR,
                "refused or failed (a warm cache that cannot be made or proven, a file that \
                 cannot be read).",
            ),
            BAD,
            INT,
        ],
    },
    Page {
        command: "bench",
        rows: &[
            row(
                OK,
                "every figure checked out against the devices, the page cache and the file's \
                 extents (--sustained: whatever shape the series shows, once it adds up to \
                 the bytes written; --compare: the files are bench reports).",
            ),
            row(
                FLAGGED,
                "at least one figure is flagged (results[].status = flagged, the reasons in \
                 checks; --sustained: the series does not add up to the bytes written or the \
                 members' counters, series_check.reason): it is not a result.",
            ),
            row(
                ERROR,
                "refused or failed (tmpfs, read-only, not enough free space for --file-size + \
                 margin, fio missing or failing); the test directory is removed.",
            ),
            row(
                USAGE,
                "bad command line (--sustained SIZE under 256 MiB, --fill outside 1-95, ...).",
            ),
            NOT_WRITTEN,
            row(
                INTERRUPTED,
                "interrupted by SIGINT, SIGTERM or SIGHUP: fio is killed and the test directory \
                 removed.",
            ),
        ],
    },
    Page {
        command: "doctor",
        rows: &[
            row(
                HEALTHY,
                "no finding worse than info (a healthy filesystem).",
            ),
            row(WARNING, "the worst finding is a warning."),
            row(
                CRITICAL,
                "a critical finding (or a bad command line, as for every command).",
            ),
            row(
                UNKNOWN,
                "doctor could not look (UNKNOWN): not a mounted btrfs, no root for the ioctls; \
                 or one of the filesystems given could not be examined (the others are, and \
                 are reported; the path is in not_examined), or its output or --textfile \
                 could not be written, and no finding is worse than info.",
            ),
            row(
                INTERRUPTED,
                "--deep interrupted by SIGINT, SIGTERM or SIGHUP: the probe's test files and its \
                 trace instance are removed, nothing is reported.",
            ),
        ],
    },
    Page {
        command: "nocow",
        rows: &[
            row(
                OK,
                "done; --check: every file is NOCOW (or nothing applies).",
            ),
            row(
                NOT_NOCOW,
                "--check: the audit found files that are not NOCOW (needing migration, empty \
                 and switchable, or blocked).",
            ),
            row(
                ERROR,
                "refused or failed (--migrate: a file written to while it was migrated is \
                 refused after three copies; a re-run continues).",
            ),
            BAD,
            NOT_WRITTEN,
            INT,
        ],
    },
    Page {
        command: "convert",
        rows: CONVERT,
    },
    Page {
        command: "device add",
        rows: CONVERT,
    },
    Page {
        command: "sandbox",
        rows: &[
            row(OK, "success."),
            row(
                ERROR,
                "refused or failed: a directory other users can change, a loop device someone \
                 else attached, a record file that is corrupt or not written by btrfs-lab.",
            ),
            BAD,
            NOT_WRITTEN,
            row(
                INTERRUPTED,
                "interrupted (SIGINT, SIGTERM, SIGHUP); what up had made is removed.",
            ),
        ],
    },
    Page {
        command: "rescue",
        rows: &[
            row(
                OK,
                "every file is intact (and, with --copy-to, copied and verified).",
            ),
            row(
                ERROR,
                "refused or failed: not root, not a read-only btrfs, a target directory on the \
                 same filesystem or not empty, or that another user owns or can write (or a \
                 directory on its path; without --allow-untrusted-target); a target where no \
                 directory can be made (what was saved is in the manifest: the same command \
                 resumes).",
            ),
            BAD,
            NOT_WRITTEN,
            row(
                FILES_LOST,
                "files-lost: some files are damaged (bytes on a missing device), unknown or \
                 failed (read errors), or did not fit in the target (named at the end, the copy \
                 went on past them); the report lists them.",
            ),
            row(
                INTERRUPTED,
                "interrupted by SIGINT, SIGTERM or SIGHUP: stopped after the current file, the \
                 manifest is consistent, the same command resumes (a second signal stops at \
                 once; the file being copied had no name yet).",
            ),
        ],
    },
    Page {
        command: "reclaim",
        rows: &[
            row(
                OK,
                "the goal is reached (or was already): the unallocated space the plan showed.",
            ),
            row(
                ERROR,
                "refused or failed: not root, not a btrfs, read-only, a missing device, a \
                 balance or another exclusive operation running; nothing was changed (a \
                 kernel failure mid-way: what was relocated stays relocated).",
            ),
            BAD,
            NOT_WRITTEN,
            row(
                GOAL_NOT_REACHED,
                "goal-not-reached: every step ran, a step ran out of space, or no chunk is \
                 used little enough; what was freed stays freed; add a device or delete files.",
            ),
            row(
                INTERRUPTED,
                "interrupted by SIGINT, SIGTERM or SIGHUP: the balance was cancelled after its \
                 current chunk; what was freed stays freed; the same command goes on.",
            ),
        ],
    },
    Page {
        command: "scrub",
        rows: &[
            row(
                OK,
                "scrubbed, no error found (--status, --cancel, --dry-run: done).",
            ),
            row(
                SCRUB_CORRECTED,
                "errors-corrected: errors were found and every one was repaired from another \
                 copy (with --readonly: errors were found, none was repaired).",
            ),
            row(
                SCRUB_UNCORRECTABLE,
                "errors-uncorrectable: no good copy of some blocks: files are damaged \
                 (btrfs-lab rescue copies out the intact ones).",
            ),
            row(
                ERROR,
                "refused or failed: not a btrfs, not root, a scrub already runs, --cancel \
                 with no scrub running, --resume with nothing to resume.",
            ),
            BAD,
            NOT_WRITTEN,
            row(
                INTERRUPTED,
                "SIGINT, SIGTERM or SIGHUP: the scrub was cancelled after every device's scrub \
                 returned; its progress is saved and `scrub MOUNT --resume` continues it.",
            ),
        ],
    },
    Page {
        command: "man",
        rows: &[
            row(OK, "the page was printed or the pages written."),
            row(ERROR, "DIR cannot be created or written."),
            row(
                USAGE,
                "bad command line (a subcommand that has no page, --json).",
            ),
        ],
    },
    Page {
        command: "completions",
        rows: &[
            row(OK, "the script was printed."),
            row(USAGE, "bad command line (an unknown shell, --json)."),
        ],
    },
];

const DF_USAGE: &[Row] = &[
    row(
        OK,
        "success; with --parse: rows were found, whatever the findings say.",
    ),
    row(
        ERROR,
        "error; with --parse: nothing in the input is a row (or, df --strict, a line that is \
         not exact btrfs-progs output).",
    ),
    row(
        USAGE,
        "bad command line (two unit modes, -b with --iec/--si, --strict without --parse).",
    ),
];

const CONVERT: &[Row] = &[
    row(OK, "done (--background: the detached balance runs)."),
    row(
        ERROR,
        "refused or failed; nothing was changed (a path that leads to another filesystem than \
         the one planned on is refused).",
    ),
    BAD,
    NOT_WRITTEN,
    row(
        INTERRUPTED,
        "SIGINT, SIGTERM or SIGHUP: the balance is paused, never cancelled; `convert MOUNT \
         --resume` continues it.",
    ),
];

/// The statuses of a command without a page of its own.
pub(crate) const DEFAULT: Page = Page {
    command: "*",
    rows: &[row(OK, "success."), FAIL, BAD, INT],
};

/// The page of the command `words` (`["sandbox", "up"]`; `[]` for
/// btrfs-lab itself): its own, its parent's (`sandbox up` has
/// `sandbox`'s), or [`DEFAULT`].
pub fn page(words: &[&str]) -> &'static Page {
    let typed = words.join(" ");
    PAGES
        .iter()
        .find(|p| p.command == typed)
        .or_else(|| {
            // A subcommand of a page's command (sandbox up), not of
            // btrfs-lab itself and not a page's own parent (device).
            PAGES
                .iter()
                .filter(|p| p.command == "sandbox")
                .find(|p| typed.starts_with(&format!("{} ", p.command)))
        })
        .unwrap_or(&DEFAULT)
}

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

/// Where the generated part of `docs/exit-codes.md` begins.
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) const DOC_BEGIN: &str = "<!-- BEGIN generated from src/model/exit.rs: \
BTRFS_LAB_WRITE_EXIT_CODES=1 cargo test --features test-hooks --lib model::exit:: \
rewrites it; edit the registry, not this -->";
/// Where it ends.
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) const DOC_END: &str = "<!-- END generated -->";

/// The generated part of `docs/exit-codes.md`, markers included: every
/// status, then each command's table.
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) fn markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = format!("{DOC_BEGIN}\n\n## Every status\n\n");
    out.push_str("| status | name | commands | meaning |\n|---|---|---|---|\n");
    for s in ALL {
        let commands = if s.commands.is_empty() {
            "every command".to_owned()
        } else {
            format!("`{}`", s.commands)
        };
        out.push_str(&format!(
            "| {} | `{}` | {} | {} |\n",
            s.code,
            s.name,
            commands,
            cell(s.meaning)
        ));
    }
    for p in PAGES.iter().chain(std::iter::once(&DEFAULT)) {
        let heading = match p.command {
            "*" => "any other command".to_owned(),
            c => format!("`{c}`"),
        };
        out.push_str(&format!(
            "\n## {heading}\n\n| status | name | meaning |\n|---|---|---|\n"
        ));
        for r in p.rows {
            out.push_str(&format!(
                "| {} | `{}` | {} |\n",
                r.status.code,
                r.status.name,
                cell(r.meaning)
            ));
        }
    }
    out.push('\n');
    out.push_str(DOC_END);
    out
}

/// `doc` with its generated part replaced by [`markdown`] (or put first,
/// after the title, when it has none).
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) fn with_generated(doc: &str) -> String {
    match (doc.find(DOC_BEGIN), doc.find(DOC_END)) {
        (Some(b), Some(e)) if e > b => {
            format!("{}{}{}", &doc[..b], markdown(), &doc[e + DOC_END.len()..])
        }
        _ => {
            let (title, rest) = doc.split_once('\n').unwrap_or((doc, ""));
            format!("{title}\n\n{}\n{rest}", markdown())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc_path() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/exit-codes.md")
    }

    /// docs/exit-codes.md carries the registry's tables as they are now.
    #[test]
    fn docs_exit_codes_are_current() {
        let path = doc_path();
        let doc = std::fs::read_to_string(&path).unwrap();
        if std::env::var_os("BTRFS_LAB_WRITE_EXIT_CODES").is_some() {
            std::fs::write(&path, with_generated(&doc)).unwrap();
        }
        let doc = std::fs::read_to_string(&path).unwrap();
        assert!(
            doc.contains(&markdown()),
            "docs/exit-codes.md differs from src/model/exit.rs; regenerate with: \
             BTRFS_LAB_WRITE_EXIT_CODES=1 cargo test --features test-hooks --lib model::exit::"
        );
    }

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

    /// Every status is on the page of each command that returns it, and
    /// every number of the registry is in `--help`'s table; each page's
    /// rows are statuses of the registry.
    #[test]
    fn help_and_pages_list_every_status() {
        let help = help_table();
        for s in ALL {
            let line = help
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{} ", s.code)))
                .unwrap_or_else(|| panic!("--help has no line for {}:\n{help}", s.code));
            assert!(line.len() <= 78, "{line}");
            if !s.commands.is_empty() {
                let words: Vec<&str> = s
                    .commands
                    .split(' ')
                    .take_while(|w| !w.starts_with('-'))
                    .collect();
                let p = page(&words);
                assert!(
                    p.rows.iter().any(|r| r.status == *s),
                    "{}'s page lacks {} ({})",
                    s.commands,
                    s.code,
                    s.name
                );
            }
        }
        for p in PAGES.iter().chain(std::iter::once(&DEFAULT)) {
            for r in p.rows {
                assert!(ALL.contains(&r.status), "{}: {:?}", p.command, r.status);
            }
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
    fn pages_are_found_by_command() {
        assert_eq!(page(&[]).command, "*");
        assert_eq!(page(&["sandbox", "up"]).command, "sandbox");
        assert_eq!(page(&["device", "add"]).command, "device add");
        assert_eq!(page(&["device", "remove"]).command, "device remove");
        assert_eq!(page(&["sandbox", "list"]).command, "sandbox");
        assert_eq!(page(&["usage"]).rows, page(&["df"]).rows);
        assert!(page(&["show"]).rows.iter().any(|r| r.status.code == 64));
    }

    #[test]
    fn wrap_breaks_at_words() {
        let w = wrap("  3    ", "aaa bbb ccc", 13);
        assert_eq!(w, "  3    aaa\n       bbb\n       ccc");
    }
}
