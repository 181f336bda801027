//! `btrfs-lab explain [FILE|-]`: what the btrfs-progs outputs and kernel
//! lines pasted into a ticket mean together.

use clap::Args;

use btrfs_lab::error::{Result, exit};
use btrfs_lab::explain::{self, ExplainReport, Span};
use btrfs_lab::report::text::{escape_control, wrap_hanging};

use super::output::Output;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The pasted text: a ticket, a mail, a forum post (`-` or nothing:
    /// stdin).
    #[arg(value_name = "FILE")]
    file: Option<String>,
}

pub fn run(args: ExplainArgs, out: &Output) -> Result<u8> {
    let name = args.file.as_deref().unwrap_or("-");
    let report = explain::explain_input(&explain::read_paste(name)?, name)?;
    out.report(&report, render);
    Ok(exit::OK)
}

fn lines(s: &Span) -> String {
    if s.first == s.last {
        format!("line {}", s.first)
    } else {
        format!("lines {}-{}", s.first, s.last)
    }
}

/// The report for a person: what was found where, the findings with the
/// lines they come from, and what the paste cannot tell. Pasted text is
/// escaped (control characters never reach the terminal).
pub fn render(r: &ExplainReport) -> String {
    let mut t = format!("Found in {}:\n", escape_control(&r.input));
    for o in &r.outputs {
        t.push_str(&wrap_hanging(
            &escape_control(&format!("{}: {}: {}", lines(&o.lines), o.format, o.summary)),
            "  ",
            "      ",
        ));
    }
    if r.outputs_left_out > 0 {
        t.push_str(&format!(
            "  ({} more outputs not listed)\n",
            r.outputs_left_out
        ));
    }
    if r.events_left_out > 0 {
        t.push_str(&format!(
            "  ({} more kernel lines not listed)\n",
            r.events_left_out
        ));
    }
    if r.findings.is_empty() {
        t.push_str("Findings: none\n");
    } else {
        t.push_str("Findings:\n");
        for e in &r.findings {
            let f = &e.finding;
            t.push_str(&wrap_hanging(
                &escape_control(&format!("[{}] {}: {}", f.severity.name(), f.code, f.title)),
                "  ",
                "      ",
            ));
            let from: Vec<String> = e.from.iter().map(lines).collect();
            t.push_str(&wrap_hanging(
                &format!("from: {}", from.join(", ")),
                "      ",
                "        ",
            ));
            for ev in &f.evidence {
                t.push_str(&wrap_hanging(
                    &escape_control(&format!("{}: {}", ev.name, ev.value)),
                    "      ",
                    "        ",
                ));
            }
            t.push_str(&wrap_hanging(
                &format!("why: {}", f.why),
                "      ",
                "        ",
            ));
            if let Some(c) = &f.command {
                t.push_str(&format!("      run: {}\n", escape_control(c)));
            }
        }
    }
    if !r.cannot_tell.is_empty() {
        t.push_str("Cannot tell without the machine:\n");
        for c in &r.cannot_tell {
            t.push_str(&wrap_hanging(c, "  - ", "    "));
        }
    }
    t
}

use super::page::{Row, row};
use btrfs_lab::model::exit as status;

/// Its exit statuses.
pub const EXITS: &[Row] = &[
    row(
        status::OK,
        "success: outputs were found, whatever the findings say.",
    ),
    row(
        status::ERROR,
        "error: nothing in the input is btrfs-progs output or a BTRFS kernel line, or it \
         cannot be read (more than 16MiB, not a regular file).",
    ),
    row(status::USAGE, "bad command line."),
];

/// What the manual page adds to clap's help (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["explain"],
    documents: &["explain"],
    output: super::page::Shape::Document,
    exits: EXITS,
    examples: &[
        (
            "What a ticket's pasted outputs and kernel lines mean together.",
            "btrfs-lab explain ticket.txt",
        ),
        ("From stdin: paste, then Ctrl-D.", "btrfs-lab explain"),
        ("As JSON.", "btrfs-lab explain --json ticket.txt"),
    ],
    see_also: &["btrfs-lab-doctor(1)", "btrfs-device(8)", "btrfs-scrub(8)"],
    ..super::page::Declared::NONE
}];
