//! `btrfs-lab df MOUNT` and `btrfs-lab df --parse [FILE|-]`.

use std::path::PathBuf;

use clap::Args;

use btrfs_lab::error::{Result, exit};
use btrfs_lab::model::finding::Severity;
use btrfs_lab::parse::fi_df::{ParseOptions, UnitBasis};
use btrfs_lab::report::units::{UnitMode, pretty_size};
use btrfs_lab::space::findings::Interpretation;
use btrfs_lab::space::{self, DfReport};
use btrfs_lab::sys::fs::root::SysRoot;

use super::output::Output;
use super::units::UnitArgs;

#[derive(Debug, Args)]
#[command(
    override_usage = "btrfs-lab df [OPTIONS] <MOUNT>\n       btrfs-lab df --parse [OPTIONS] [FILE]"
)]
pub struct DfArgs {
    /// A path inside a mounted btrfs; with --parse, the file to parse
    /// (`-` or nothing: stdin).
    #[arg(required_unless_present = "parse", value_name = "MOUNT|FILE")]
    path: Option<String>,
    /// Parse captured `btrfs filesystem df` output (any unit form, or its
    /// JSON) instead of reading a mounted filesystem.
    #[arg(long)]
    parse: bool,
    /// With --parse: accept only exact btrfs-progs output (no prompts,
    /// quotes or other text around the rows).
    #[arg(long, requires = "parse")]
    strict: bool,
    #[command(flatten)]
    units: UnitArgs,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
}

pub fn run(args: DfArgs, out: &Output) -> Result<u8> {
    let report = read(&args, out)?;
    let mode = args.units.mode();
    out.report(&report, |r| {
        let mut text = render(r, mode);
        // A mounted filesystem's rows stay byte for byte btrfs-progs'
        // (findings go to stderr); a parsed paste gets its reading here.
        if args.parse {
            text.push('\n');
            text.push_str(&render_interpretation(&r.interpretation));
        }
        text
    });
    say_reading(&report, out);
    out.aside(args.parse, |out| {
        findings_to_stderr(out, &report.interpretation)
    });
    for row in &report.inconsistencies {
        out.warning_with_hint(
            &format!("{row}: the input is inconsistent"),
            "check that the capture was not edited or cut; the figures of this row mean nothing",
        );
    }
    Ok(exit::OK)
}

/// The report: parsed from a capture (`--parse`) or read from the kernel.
fn read(args: &DfArgs, out: &Output) -> Result<DfReport> {
    if args.parse {
        let input = args.path.as_deref().unwrap_or("-");
        return space::df_from_text(
            &space::read_input(input, "btrfs filesystem df")?,
            input,
            ParseOptions {
                strict: args.strict,
            },
        );
    }
    let mount = PathBuf::from(args.path.as_deref().unwrap_or_default());
    space::df_from_kernel(&SysRoot::from_option(args.sysroot.as_deref(), out), &mount)
}

/// How the input was read: rows skipped, text removed around them, the
/// units' rule, rounding.
fn say_reading(report: &DfReport, out: &Output) {
    for s in &report.skipped {
        if s.damaged {
            out.warning_with_hint(
                &format!("line {}: {} ('{}')", s.line, s.reason, s.text),
                "that row's figures are missing from the result; ask for the output again (`btrfs filesystem df -b PATH`)",
            );
        } else {
            out.note(&format!(
                "line {} skipped: {} ('{}')",
                s.line, s.reason, s.text
            ));
        }
    }
    if !report.unwrapped.is_empty() {
        out.note(&format!(
            "removed around the rows: {}",
            report.unwrapped.join(", ")
        ));
    }
    if let Some(u) = report
        .units
        .as_ref()
        .filter(|u| !matches!(u.basis, UnitBasis::Bytes | UnitBasis::Iec))
    {
        out.note(&format!("units: {}", u.rule));
    }
    if report.records.iter().any(|r| !r.exact) {
        out.text_note(
            "the input was rounded (human-readable units); --json gives each value's error bound",
        );
    }
}

/// Warnings and critical findings as stderr warnings (the command as the
/// hint); the text of `--parse` shows them all on stdout instead.
pub fn findings_to_stderr(out: &Output, i: &Interpretation) {
    for f in i.findings.iter().filter(|f| f.severity != Severity::Info) {
        let label = if f.severity == Severity::Critical {
            "critical: "
        } else {
            ""
        };
        let hint = match &f.command {
            Some(c) => format!("{}; run: {c}", f.why),
            None => f.why.clone(),
        };
        out.warning_with_hint(&format!("{label}{}", f.title), &hint);
    }
}

/// Percentages and findings, for a person.
pub fn render_interpretation(i: &Interpretation) -> String {
    let mut t = String::from("Used:\n");
    for p in &i.percentages {
        let (lo, hi) = (
            format!("{:.1}", p.used_percent_min),
            format!("{:.1}", p.used_percent_max),
        );
        let bounds = if lo != hi {
            format!(" ({lo}%..{hi}% given the rounding)")
        } else {
            String::new()
        };
        t.push_str(&format!(
            "  {}, {}: {:.1}%{bounds}\n",
            p.bg_type.progs_name(),
            p.profile.progs_name(),
            p.used_percent
        ));
    }
    if i.findings.is_empty() {
        t.push_str("Findings: none\n");
        return t;
    }
    t.push_str("Findings:\n");
    for f in &i.findings {
        t.push_str(&format!(
            "  [{}] {}: {}\n",
            f.severity.name(),
            f.code,
            f.title
        ));
        for e in &f.evidence {
            t.push_str(&format!("      {}: {}\n", e.name, e.value));
        }
        t.push_str(&format!("      why: {}\n", f.why));
        if let Some(c) = &f.command {
            t.push_str(&format!("      run: {c}\n"));
        }
    }
    t
}

/// The records in `btrfs filesystem df` format.
pub fn render(report: &DfReport, mode: UnitMode) -> String {
    render_records(&report.records, mode)
}

/// Records as `btrfs filesystem df` prints them.
pub fn render_records(records: &[btrfs_lab::model::space::SpaceRecord], mode: UnitMode) -> String {
    let mut text = String::new();
    for r in records {
        text.push_str(&format!(
            "{}, {}: total={}, used={}",
            r.bg_type.progs_name(),
            r.profile.progs_name(),
            pretty_size(r.total_bytes, mode),
            pretty_size(r.used_bytes, mode)
        ));
        if let Some(z) = r.zone_unusable_bytes {
            text.push_str(&format!(", zone_unusable={}", pretty_size(z, mode)));
        }
        text.push('\n');
    }
    text
}

use super::page::{Row, row};
use btrfs_lab::model::exit as status;

/// Its exit statuses (df --parse and usage --parse share them).
pub const EXITS: &[Row] = &[
    row(
        status::OK,
        "success; with --parse: rows were found, whatever the findings say.",
    ),
    row(
        status::ERROR,
        "error; with --parse: nothing in the input is a row (or, df --strict, a line that is \
         not exact btrfs-progs output).",
    ),
    row(
        status::USAGE,
        "bad command line (two unit modes, -b with --iec/--si, --strict without --parse).",
    ),
];

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["df"],
    documents: &["df"],
    output: super::page::Shape::Document,
    exits: EXITS,
    examples: &[
        ("Space of a mounted btrfs.", "btrfs-lab df /mnt/data"),
        ("In bytes.", "btrfs-lab df -b /mnt/data"),
        (
            "Read `btrfs filesystem df` output pasted into a ticket.",
            "btrfs-lab df --parse ticket.txt",
        ),
        ("As JSON.", "btrfs-lab df --json /mnt/data"),
    ],
    see_also: &["btrfs-filesystem(8)"],
    ..super::page::Declared::NONE
}];
