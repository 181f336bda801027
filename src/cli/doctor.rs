//! `btrfs-lab doctor [MOUNT...]`: what is wrong with each btrfs, worst first.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use btrfs_lab::doctor::{self, DoctorOptions, DoctorReport, FsDiagnosis, prometheus};
use btrfs_lab::error::{Error, Result};
use btrfs_lab::model::finding::Severity;
use btrfs_lab::report::text::escape_control as esc;
use btrfs_lab::sys::fs::root::SysRoot;

use btrfs_lab::report::text::{width, wrap_hanging};

use super::output::{Output, Paint, wrap};

pub const AFTER_HELP: &str = "\
Read-only unless --deep: no writes, no probes. Findings have stable codes
(docs/findings.md lists them). On failure the --textfile says
btrfs_lab_doctor_success 0 (rewritten in place if no new file can be made).

Exit status (as monitoring plugins):
  0  no finding worse than info
  1  the worst finding is a warning
  2  a critical finding
  3  doctor could not look (not a btrfs, not root, ...), could not look
     at one of the filesystems given (the others are still examined), or
     could not write its output or the textfile, with nothing worse to report (a
     warning or critical finding keeps 1 or 2; the textfile then says
     btrfs_lab_doctor_success 0); a bad command line (monitoring plugins'
     usage errors are UNKNOWN, where the 2 of other commands is CRITICAL:
     an unknown option, a --before-upgrade that is not a kernel version)
  130 --deep interrupted (SIGINT, SIGTERM, SIGHUP): test files removed";

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Findings for a person, worst first.
    Text,
    /// Prometheus text format (node_exporter's textfile collector).
    Prometheus,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Paths inside mounted btrfs filesystems [default: every mounted btrfs].
    #[arg(value_name = "MOUNT")]
    mounts: Vec<PathBuf>,
    /// Output format (`--json` gives the typed report).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also write the Prometheus metrics to FILE atomically (a temporary file
    /// in its directory, then rename), for node_exporter's textfile collector.
    #[arg(long, value_name = "FILE")]
    textfile: Option<PathBuf>,
    #[command(flatten)]
    target: super::output::TargetArgs,
    /// Also run what costs time or writes a little: probe-dio (two small
    /// test files, removed) on the mount root and on the NOCOW directories
    /// found at the top and one level down (at most 4), the PCIe links and
    /// NVMe SMART thermal counters of its drives.
    #[arg(long)]
    deep: bool,
    /// Also probe DIR with --deep (where VM images or databases live; may be
    /// repeated; implies --deep).
    #[arg(long, value_name = "DIR")]
    deep_dir: Vec<PathBuf>,
    /// Audit this fstab instead of /etc/fstab (entries of the filesystems
    /// examined: device names instead of UUID, degraded, no device timeout
    /// for a multi-device root).
    #[arg(long, value_name = "FILE")]
    fstab: Option<PathBuf>,
    /// Also say what changes for each filesystem when this machine boots
    /// Linux VERSION (7.3, 7.3.4): removed mount options, the v1 space
    /// cache, O_DIRECT per profile, error counters, features it lacks.
    #[arg(long, value_name = "VERSION", value_parser = version_arg)]
    before_upgrade: Option<String>,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
    /// Tell at once a member's new state (missing, vanished, stale,
    /// returned) and error counters that rose since the last look: `journal`
    /// (the systemd journal, a MESSAGE_ID per code), or a program root owns,
    /// run with CODE SEVERITY FSID MOUNT DEVID TITLE.
    #[arg(long, value_name = "journal|PROGRAM")]
    notify: Option<String>,
}

/// clap value parser for `--before-upgrade`.
fn version_arg(s: &str) -> std::result::Result<String, String> {
    btrfs_lab::model::kernel::parse_version_arg(s)
        .map(|_| s.to_owned())
        .ok_or_else(|| {
            format!("'{s}' is not a kernel version: give it as 7.3, 7.3.4 or as uname -r prints it")
        })
}

pub fn run(args: DoctorArgs, out: &Output, state_dir: Option<std::path::PathBuf>) -> Result<u8> {
    if out.json && args.format == Format::Prometheus {
        // A bad command line: UNKNOWN, as monitoring plugins say it.
        out.error(
            &Error::usage("--json and --format prometheus exclude each other").with_hint(
                "pick one: --json for the typed report, --format prometheus for metrics",
            ),
        );
        return Ok(super::page::usage_status(&["doctor"]).code);
    }
    let format = args.format;
    let notify = match args.notify.as_deref().map(doctor::notify::Notify::parse) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(e)) => {
            out.error(&e);
            return Ok(super::page::usage_status(&["doctor"]).code);
        }
    };
    let Some((report, textfile_failed)) =
        doctor::run_on_ui(&options(args, out, state_dir, notify), out)?
    else {
        return Ok(doctor::EXIT_UNKNOWN);
    };
    match format {
        // Metrics verbatim: a line filled to the width is no metric (and
        // --json with them was refused above).
        Format::Prometheus => out.text(&prometheus::render(&report)),
        Format::Text => out.report(&report, |r| render(r, out.paint)),
    }
    let could_not_write = textfile_failed | unwritable(out);
    Ok(doctor::status_with_failure(
        report.exit_status,
        could_not_write,
    ))
}

fn options(
    args: DoctorArgs,
    out: &Output,
    state_dir: Option<PathBuf>,
    notify: Option<doctor::notify::Notify>,
) -> DoctorOptions {
    DoctorOptions {
        sysroot: SysRoot::from_option(args.sysroot.as_deref(), out),
        mounts: args.mounts,
        deep: args.deep,
        deep_dirs: args.deep_dir,
        textfile: args.textfile,
        allow_untrusted_target: args.target.allow_untrusted_target,
        fstab: args.fstab,
        state_dir,
        notify,
        before_upgrade: args.before_upgrade,
    }
}

/// Output that cannot be written is UNKNOWN to monitoring (3), not the
/// generic error 1 that a plugin reads as WARNING: flushed now, and said.
fn unwritable(out: &Output) -> bool {
    let e = out.flush_now();
    e.iter().for_each(|e| out.error(e));
    e.is_some()
}

fn label(s: Severity, paint: Paint) -> String {
    let name = format!("{:<8}", s.name().to_ascii_uppercase());
    match s {
        Severity::Critical => paint.bad(&name),
        Severity::Warning => paint.warn(&name),
        Severity::Info => paint.dim(&name),
    }
}

/// The findings of every filesystem, worst first.
pub fn render(r: &DoctorReport, paint: Paint) -> String {
    if r.filesystems.is_empty() && r.not_examined.is_empty() {
        return "no mounted btrfs\n".to_owned();
    }
    let mut t = String::new();
    let mut fss: Vec<&FsDiagnosis> = r.filesystems.iter().collect();
    fss.sort_by_key(|f| f.worst.unwrap_or(Severity::Info));
    for (i, f) in fss.iter().enumerate() {
        if i > 0 {
            t.push('\n');
        }
        let count = |s: Severity| f.findings.iter().filter(|x| x.severity == s).count();
        t.push_str(&paint.bold(&format!(
            "{}: {} critical, {} warning, {} info",
            esc(&f.mount_point.display().to_string()),
            count(Severity::Critical),
            count(Severity::Warning),
            count(Severity::Info)
        )));
        t.push_str(&format!("\n  uuid {}\n", esc(&f.uuid)));
        if let Some(u) = f.before_upgrade.as_ref().filter(|u| u.changes.is_empty()) {
            t.push_str(&format!(
                "  on Linux {}: nothing changes for this filesystem\n",
                esc(&u.target)
            ));
        }
        if f.findings.is_empty() {
            t.push_str("  nothing to report\n");
        }
        // Titles, evidence and commands may carry what a user chose (a
        // label, a path): control characters never reach the terminal raw.
        for x in &f.findings {
            t.push_str(&finding(x, paint));
        }
        if let Some(deep) = &f.deep {
            t.push_str(&probed(deep));
        }
    }
    for n in &r.not_examined {
        t.push('\n');
        t.push_str(&paint.bold(&format!(
            "{}: not examined",
            esc(&n.path.display().to_string())
        )));
        t.push('\n');
        t.push_str(&wrap(&esc(&n.error), "  "));
    }
    let worst = r.worst.filter(|w| *w != Severity::Info);
    t.push_str(&format!(
        "\n{}\n",
        match worst {
            Some(w) => format!(
                "worst: {} (exit status {})",
                label(w, paint).trim_end(),
                r.exit_status
            ),
            None if r.exit_status == doctor::EXIT_OK => "no warning (exit status 0)".to_owned(),
            None => format!(
                "no warning, but not every filesystem was examined (exit status {})",
                r.exit_status
            ),
        }
    ));
    t
}

/// Where a finding's evidence, why and command begin.
const INDENT: &str = "           ";
/// Where their continuation lines begin.
const MORE: &str = "             ";

/// One finding, filled to the output's width: its severity, code and
/// title; its evidence; why; the command to run, whole (on a line of its
/// own when it does not fit beside `run:`).
fn finding(x: &btrfs_lab::model::finding::Finding, paint: Paint) -> String {
    let plain = format!("  {:<8} ", x.severity.name().to_ascii_uppercase());
    let head = wrap_hanging(
        &format!("{}: {}", esc(x.code.as_str()), esc(&x.title)),
        &plain,
        INDENT,
    );
    let mut t = head.replacen(&plain, &format!("  {} ", label(x.severity, paint)), 1);
    for e in &x.evidence {
        t.push_str(&wrap_hanging(
            &format!("{}: {}", esc(&e.name), esc(&e.value)),
            INDENT,
            MORE,
        ));
    }
    t.push_str(&wrap_hanging(
        &format!("why: {}", esc(&x.why)),
        INDENT,
        MORE,
    ));
    if let Some(c) = &x.command {
        let one = format!("{INDENT}run: {}", esc(c));
        if one.chars().count() <= width() {
            t.push_str(&one);
            t.push('\n');
        } else {
            t.push_str(&format!("{INDENT}run:\n{MORE}{}\n", esc(c)));
        }
    }
    t
}

/// The directories `--deep` probed, one line each: the verdict (or why
/// the probe could not run), the directory and why it was probed.
fn probed(deep: &doctor::deep::DeepFacts) -> String {
    use doctor::deep::ProbedFor;
    let mut t = String::new();
    for p in &deep.probes {
        let why = match p.probed_for {
            ProbedFor::MountRoot => "mount root",
            ProbedFor::Nocow => "NOCOW",
            ProbedFor::Asked => "--deep-dir",
        };
        t.push_str(&wrap_hanging(
            &format!(
                "{} {} ({why})",
                p.verdict.as_deref().unwrap_or("failed"),
                esc(&p.path.display().to_string())
            ),
            "  probe-dio: ",
            MORE,
        ));
    }
    t
}

use super::page::row;
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["doctor"],
    documents: &["doctor"],
    output: super::page::Shape::Document,
    exits: &[
        row(
            status::HEALTHY,
            "no finding worse than info (a healthy filesystem).",
        ),
        row(status::WARNING, "the worst finding is a warning."),
        row(status::CRITICAL, "a critical finding."),
        row(
            status::UNKNOWN,
            "doctor could not look (UNKNOWN): not a mounted btrfs, no root for the ioctls; \
             or one of the filesystems given could not be examined (the others are, and \
             are reported; the path is in not_examined), or its output or --textfile \
             could not be written, and no finding is worse than info; or a bad command \
             line (an unknown option, --json with --format prometheus, a --before-upgrade \
             VERSION that is not a kernel version such as 7.3 or 7.3.4: monitoring plugins' \
             usage errors are UNKNOWN, not the 2 of other commands).",
        ),
        row(
            status::INTERRUPTED,
            "--deep interrupted by SIGINT, SIGTERM or SIGHUP: the probe's test files and its \
             trace instance are removed, nothing is reported.",
        ),
    ],
    examples: &[
        (
            "What is wrong with /mnt/data.",
            "btrfs-lab doctor /mnt/data",
        ),
        (
            "For Prometheus' node_exporter textfile collector.",
            "btrfs-lab doctor --format prometheus /mnt/data",
        ),
        (
            "What btrfs-lab-members.service runs when a member's drive comes or goes: \
             a new member state told once in the journal.",
            "btrfs-lab doctor --notify journal --textfile /var/lib/prometheus/node-exporter/btrfs-lab.prom",
        ),
        (
            "Before booting Linux 7.3: what changes for each filesystem (removed mount \
             options in fstab, the v1 space cache, O_DIRECT, error counters).",
            "btrfs-lab doctor --before-upgrade 7.3",
        ),
    ],
    see_also: &[],
    ..super::page::Declared::NONE
}];
