//! `btrfs-lab nocow DIR`, `nocow --check PATH...`, `nocow --for SERVICE`.

use std::path::{Path, PathBuf};

use clap::Args;

use btrfs_lab::error::{Error, Result, exit};
use btrfs_lab::model::profile::profile_list;
use btrfs_lab::nocow::advice::{Advice, Service, advice};
use btrfs_lab::nocow::audit::{EntryKind, RootInfo, Summary};
use btrfs_lab::nocow::operation::NocowDir;
use btrfs_lab::nocow::plan::{Request, Staying};
use btrfs_lab::nocow::{self, CheckDocument, CheckReport, NocowReport, Outcome};
use btrfs_lab::operation::{self, Confirm, View};
use btrfs_lab::report::text::fit;
use btrfs_lab::report::text::{count, escape_control, escape_path};
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::kernel::signals;

use super::output::{Output, Paint, wrap};
use super::units::{UnitArgs, size};

pub const AFTER_HELP: &str = "\
NOCOW (chattr +C) is ignored on a file that already holds data and is
inherited only by files created afterwards. `nocow DIR` creates DIR if needed,
sets NOCOW on it through the FS_IOC_SETFLAGS ioctl and reads it back; files
already in DIR that are not NOCOW are listed. --migrate copies each of them
into a new NOCOW file in the same directory (holes kept; owner, mode,
timestamps and extended attributes kept; content verified by BLAKE3 read back
from the disk) and renames the copy over the original. Until that rename the
original is untouched; an interrupted run is continued by running it again.

Examples:
  btrfs-lab nocow --subvolume /var/lib/libvirt/images
  btrfs-lab nocow --check /var/lib/postgresql
  btrfs-lab nocow --migrate --dry-run /var/lib/mysql
  btrfs-lab nocow --for postgres

Exit status: 0 done (or nothing to do; --check: every file is NOCOW, or the
filesystem is not btrfs), 1 refused or failed, 2 bad command line,
6 (--check) files that are not NOCOW were found, 130 interrupted.";

/// `nocow --check` found files that are not NOCOW (docs/exit-codes.md).
pub const NOT_NOCOW: u8 = btrfs_lab::model::exit::NOT_NOCOW.code;

#[derive(Debug, Args)]
#[command(override_usage = "btrfs-lab nocow [OPTIONS] <DIR>
       btrfs-lab nocow --check [OPTIONS] <PATH>...
       btrfs-lab nocow --for <SERVICE> [OPTIONS] [DIR]")]
pub struct NocowArgs {
    /// The directory to make NOCOW; with --check, the files and directories to audit.
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Only audit PATHs (recursively): which files are NOCOW, which need migration.
    #[arg(long)]
    check: bool,
    /// Copy the files in DIR that are not NOCOW into NOCOW files and replace them.
    #[arg(long, conflicts_with = "check")]
    migrate: bool,
    /// Create DIR as a btrfs subvolume of its own (kept out of the parent's snapshots).
    #[arg(long, conflicts_with = "check")]
    subvolume: bool,
    /// With --migrate: also migrate files a running process has open (its
    /// later writes to them are lost).
    #[arg(long = "include-open", alias = "force", requires = "migrate")]
    force: bool,
    /// Also print where SERVICE keeps its files and its settings that matter: vm, postgres, mysql.
    #[arg(long = "for", value_name = "SERVICE", value_parser = super::units::named(&["vm", "postgres", "mysql"], service_arg), hide_possible_values = true)]
    service: Option<Service>,
    /// Show the plan and do nothing.
    #[arg(long, conflicts_with = "check")]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long, conflicts_with = "check")]
    yes: bool,
    #[command(flatten)]
    units: UnitArgs,
}

fn service_arg(s: &str) -> std::result::Result<Service, String> {
    s.parse::<Service>()
        .map_err(|e| format!("{} ({})", e.message(), e.hint().unwrap_or_default()))
}

pub fn run(args: NocowArgs, out: &Output) -> Result<u8> {
    // SIGINT, SIGTERM and SIGHUP: stop at the next safe point, clean up,
    // exit 130 (a second one exits at once), on every path of the command.
    signals::install()?;
    args.units.select();
    let advice = args.service.map(advice);
    if args.check {
        return check(&args.paths, advice, out);
    }
    let Some(dir) = one_dir(&args.paths, advice.as_ref(), out)? else {
        return Ok(exit::OK);
    };
    let request = Request {
        dir,
        migrate: args.migrate,
        subvolume: args.subvolume,
        force: args.force,
        dry_run: args.dry_run,
    };
    let confirm = Confirm {
        dry_run: args.dry_run,
        yes: args.yes,
    };
    let mut op = NocowDir::new(request, advice);
    operation::run(&mut op, confirm, out, &Text(out))
}

/// `nocow --check PATH...`: the audit (and `--for`'s advice).
fn check(paths: &[PathBuf], advice: Option<Advice>, out: &Output) -> Result<u8> {
    if paths.is_empty() {
        return Err(Error::usage("--check needs at least one PATH")
            .with_hint("usage: btrfs-lab nocow --check PATH..."));
    }
    // nocow acts on the running system: /proc and /sys are never read under
    // a root prefix (BTRFS_LAB_SYSROOT), which could hide a process that has
    // a file open or a mount inside the directory.
    let doc = CheckDocument {
        check: nocow::check(&SysRoot::host(), paths)?,
        advice,
    };
    out.report(&doc, |d| {
        let mut text = render_check(&d.check, out.paint);
        if let Some(a) = &d.advice {
            text.push_str(&render_advice(a, out.paint));
        }
        fit(&text)
    });
    let s = &doc.check.summary;
    let not_nocow = s.needs_migration_files + s.switchable_files + s.blocked_files;
    Ok(if not_nocow > 0 { NOT_NOCOW } else { exit::OK })
}

/// The one directory of `nocow DIR`; `None` when there is none and
/// `--for`'s advice was the whole answer (said here).
fn one_dir(paths: &[PathBuf], advice: Option<&Advice>, out: &Output) -> Result<Option<PathBuf>> {
    match paths {
        [] => match advice {
            Some(a) => {
                out.report(a, |a| fit(render_advice(a, out.paint).trim_start()));
                Ok(None)
            }
            None => Err(Error::usage("give the directory to make NOCOW").with_hint(
                "usage: btrfs-lab nocow DIR, nocow --check PATH... or nocow --for SERVICE",
            )),
        },
        [one] => Ok(Some(one.clone())),
        _ => Err(Error::usage(
            "nocow prepares one directory at a time (several paths only with --check)",
        )),
    }
}

/// nocow's plan and result as text: the plan on stdout when the run ends
/// there, on stderr before the question; the result as the report.
struct Text<'a>(&'a Output);

impl View<NocowDir> for Text<'_> {
    fn plan(&self, report: &NocowReport) -> String {
        fit(&render_plan(report, self.0.paint))
    }
    fn plan_asked(&self, report: &NocowReport) -> String {
        fit(&render_plan(report, self.0.paint_err))
    }
    fn plan_end(&self, report: &NocowReport) -> String {
        report
            .advice
            .as_ref()
            .map(|a| fit(&render_advice(a, self.0.paint)))
            .unwrap_or_default()
    }
    fn result(&self, planned: &NocowReport, result: &Outcome) {
        let out = self.0;
        let report = NocowReport {
            result: Some(result.clone()),
            ..planned.clone()
        };
        out.report(&report, |report| {
            let mut text = render_result(report, out.paint);
            if let Some(a) = &report.advice {
                text.push_str(&render_advice(a, out.paint));
            }
            fit(&text)
        });
    }
}

fn fs_line(r: &RootInfo) -> String {
    let mut line = format!(
        "{} on {}, mounted at {}",
        r.fs_type,
        r.source,
        escape_path(&r.mount_point)
    );
    if r.is_btrfs() {
        line.push_str(&format!(", data {}", profile_list(&r.data_profiles)));
    }
    if !r.mount_options.is_empty() {
        line.push_str(&format!(", mount options {}", r.mount_options.join(",")));
    }
    line
}

fn bullets(items: &[String], paint: Paint) -> String {
    let mut t = String::new();
    for w in items {
        let wrapped = wrap(&escape_control(w), "    ");
        t.push_str(&format!("  {} {}", paint.warn("-"), &wrapped[4..]));
    }
    t
}

fn staying_lines(staying: &[Staying], paint: Paint) -> String {
    let width = staying
        .iter()
        .map(|s| escape_control(&s.display).len())
        .max()
        .unwrap_or(0);
    let mut t = String::new();
    for s in staying {
        t.push_str(&format!(
            "  {:<width$}  {:>10}  {}\n",
            escape_control(&s.display),
            size(s.size_bytes),
            paint.dim(&escape_control(&s.reason))
        ));
    }
    t
}

/// The plan (also the dry-run and nothing-to-do output).
fn render_plan(r: &NocowReport, paint: Paint) -> String {
    let mut t = format!("{} {}\n", paint.bold("nocow"), escape_path(&r.dir));
    t.push_str(&format!("  filesystem  {}\n", fs_line(&r.filesystem)));
    let p = &r.plan;
    if let Some(why) = &p.nothing_to_do {
        t.push_str(&format!("\nnothing to do: {}\n", escape_control(why)));
        return t;
    }
    if p.steps.is_empty() {
        t.push_str(&format!(
            "\n{} is NOCOW already (read through FS_IOC_GETFLAGS); files created in it inherit it.\n",
            escape_path(&r.dir)
        ));
    } else {
        t.push_str(&format!("\n{}\n", paint.bold("plan")));
        for (i, s) in p.steps.iter().enumerate() {
            t.push_str(&format!("  {}. {}\n", i + 1, escape_control(&s.describe())));
        }
        if p.space_needed_bytes > 0 {
            let copies = if p.parallel_migrations > 1 {
                format!(
                    "{} files copied at once: room for the {} largest copies and a margin",
                    p.parallel_migrations, p.parallel_migrations
                )
            } else {
                "one file copied at a time: room for the largest copy and a margin".to_owned()
            };
            t.push_str(&format!(
                "  free space: {} needed at once ({copies}), {} available\n",
                size(p.space_needed_bytes),
                size(p.space_available_bytes)
            ));
        }
    }
    if !p.staying.is_empty() {
        t.push_str(&format!("\n{}\n", paint.bold("not NOCOW, and staying so")));
        t.push_str(&staying_lines(&p.staying, paint));
        if p.staying.iter().any(|s| s.reason.contains("--migrate")) {
            t.push_str(&format!(
                "  {} run again with --migrate to copy them into NOCOW files\n",
                paint.dim("hint:")
            ));
        }
    }
    t.push_str(&format!("\n{}\n", paint.bold("warnings")));
    t.push_str(&bullets(&p.warnings, paint));
    t
}

fn render_result(r: &NocowReport, paint: Paint) -> String {
    let Some(o) = &r.result else {
        return String::new();
    };
    let mut t = format!("{} {}\n", paint.bold("nocow"), escape_path(&r.dir));
    t.push_str(&format!("  filesystem  {}\n", fs_line(&r.filesystem)));
    t.push_str(&format!("\n{}\n", paint.bold("done")));
    for c in &o.created {
        let what = if o.subvolume.as_ref() == Some(c) {
            "subvolume"
        } else {
            "directory"
        };
        t.push_str(&format!("  created    {what} {}\n", escape_path(c)));
    }
    for d in &o.nocow_set {
        t.push_str(&format!("  NOCOW set  {}\n", escape_path(d)));
    }
    for p in &o.removed_leftovers {
        t.push_str(&format!(
            "  removed    {} (left by an interrupted migration)\n",
            escape_path(p)
        ));
    }
    for p in &o.cleared_markers {
        t.push_str(&format!("  marker     removed from {}\n", escape_path(p)));
    }
    for p in &o.switched {
        t.push_str(&format!("  switched   {} (empty)\n", escape_path(p)));
    }
    for m in &o.migrated {
        let mut line = format!(
            "  migrated   {}: {}, allocated {} before, {} after, content verified (BLAKE3)",
            escape_path(&m.path),
            size(m.size_bytes),
            size(m.allocated_before_bytes),
            size(m.allocated_after_bytes)
        );
        if m.compression_dropped {
            line.push_str(", compression attribute dropped");
        }
        t.push_str(&line);
        t.push('\n');
    }
    t.push_str(&format!(
        "  {}   {} is NOCOW (read back through FS_IOC_GETFLAGS); files created in it from now on inherit it\n",
        paint.good("verified"),
        escape_path(&r.dir)
    ));
    t.push_str(&format!("  summary    {}\n", summary_sentence(&o.after)));
    if !o.not_nocow.is_empty() {
        t.push_str(&format!("\n{}\n", paint.bold("not NOCOW, and staying so")));
        t.push_str(&staying_lines(&o.not_nocow, paint));
    }
    // The warnings were shown with the plan, before the confirmation.
    t
}

fn summary_sentence(s: &Summary) -> String {
    if s.files == 0 && s.directories == 0 && s.leftovers == 0 {
        return "no files".to_owned();
    }
    let mut parts = vec![format!(
        "{}: {} NOCOW ({})",
        count(s.files, "file", "files"),
        s.nocow_files,
        size(s.nocow_bytes)
    )];
    if s.switchable_files > 0 {
        parts.push(format!("{} switchable (empty)", s.switchable_files));
    }
    if s.needs_migration_files > 0 {
        parts.push(format!(
            "{} need{} migration ({})",
            s.needs_migration_files,
            if s.needs_migration_files == 1 {
                "s"
            } else {
                ""
            },
            size(s.needs_migration_bytes)
        ));
    }
    if s.blocked_files > 0 {
        parts.push(format!(
            "{} blocked ({})",
            s.blocked_files,
            size(s.blocked_bytes)
        ));
    }
    let mut text = parts.join(", ");
    if s.directories > 0 {
        text.push_str(&format!(
            "; {} of {} below NOCOW",
            s.nocow_directories,
            count(s.directories, "directory", "directories")
        ));
    }
    if s.leftovers > 0 {
        text.push_str(&format!(
            "; {} left by an interrupted migration",
            count(s.leftovers, "temporary file", "temporary files")
        ));
    }
    text
}

fn render_check(r: &CheckReport, paint: Paint) -> String {
    let mut t = String::new();
    for root in &r.roots {
        t.push_str(&format!(
            "{} {}\n",
            paint.bold("nocow --check"),
            escape_path(&root.path)
        ));
        t.push_str(&format!("  filesystem  {}\n", fs_line(root)));
        if let Some(note) = &root.note {
            t.push_str(&format!("  {}\n", paint.dim(note)));
            continue;
        }
        let yes_no = |b: Option<bool>| if b == Some(true) { "yes" } else { "no" };
        let kind = if root.is_dir { "directory" } else { "file" };
        let mut line = format!(
            "  {kind:<10}  NOCOW {}, compression attribute {}",
            yes_no(root.nocow),
            yes_no(root.compression_attr)
        );
        if root.subvolume {
            line.push_str(", subvolume root");
        }
        t.push_str(&line);
        t.push('\n');
    }
    if !r.entries.is_empty() {
        t.push_str(&format!(
            "\n{}\n",
            paint.bold(&format!(
                "{:<5}  {:>10}  {:>10}  {:<15}  {}",
                "NOCOW", "SIZE", "ALLOCATED", "STATE", "PATH"
            ))
        ));
        // Written straight into the text (one listing line per file of a
        // tree of any size: no String per column).
        use std::fmt::Write as _;
        for e in &r.entries {
            let (sz, alloc) = match e.kind {
                EntryKind::Directory => (
                    std::borrow::Cow::Borrowed("-"),
                    std::borrow::Cow::Borrowed("-"),
                ),
                EntryKind::File => (size(e.size_bytes).into(), size(e.allocated_bytes).into()),
            };
            let state = e.state.label();
            let state = match e.state {
                btrfs_lab::nocow::audit::EntryState::Nocow => paint.good(&format!("{state:<15}")),
                btrfs_lab::nocow::audit::EntryState::Switchable => format!("{state:<15}"),
                _ => paint.warn(&format!("{state:<15}")),
            };
            let _ = write!(
                t,
                "{:<5}  {sz:>10}  {alloc:>10}  {state}  {}{}",
                if e.nocow { "yes" } else { "no" },
                escape_control(&e.display),
                if e.kind == EntryKind::Directory {
                    "/"
                } else {
                    ""
                }
            );
            let mut notes = Vec::new();
            if e.sparse && e.kind == EntryKind::File {
                notes.push("sparse".to_owned());
            }
            for o in &e.open_by {
                notes.push(format!(
                    "open by pid {} ({})",
                    o.pid,
                    escape_control(&o.command)
                ));
            }
            if let Some(why) = &e.reason {
                notes.push(escape_control(why).into_owned());
            }
            if !notes.is_empty() {
                let _ = write!(t, "  {}", paint.dim(&format!("({})", notes.join("; "))));
            }
            t.push('\n');
        }
    }
    if r.roots.iter().any(RootInfo::is_btrfs) {
        t.push_str(&format!(
            "\n{} {}\n",
            paint.bold("summary"),
            summary_sentence(&r.summary)
        ));
        if r.summary.open_files > 0 {
            t.push_str(&format!(
                "        {} open by running processes\n",
                count(r.summary.open_files, "file is", "files are")
            ));
        }
        if r.summary.needs_migration_files + r.summary.switchable_files > 0 {
            let dirs: Vec<String> = r
                .roots
                .iter()
                .filter(|root| root.is_btrfs())
                .map(|root| {
                    let dir = if root.is_dir {
                        root.path.clone()
                    } else {
                        root.path
                            .parent()
                            .filter(|p| !p.as_os_str().is_empty())
                            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
                    };
                    format!("btrfs-lab nocow --migrate {}", escape_path(&dir))
                })
                .collect();
            t.push_str(&format!(
                "{} {} copies the files that need it into NOCOW files \
                 (at least {} free: the largest file's copy, plus a margin)\n",
                paint.dim("hint:"),
                dirs.join(", "),
                size(r.summary.largest_migration_bytes)
            ));
        }
    }
    for s in &r.skipped {
        t.push_str(&format!(
            "{} {}\n",
            paint.dim("skipped:"),
            escape_control(s)
        ));
    }
    for n in &r.notes {
        if !r.roots.iter().any(|root| root.note.as_ref() == Some(n)) {
            t.push_str(&format!("{} {}\n", paint.dim("note:"), escape_control(n)));
        }
    }
    t
}

fn render_advice(a: &Advice, paint: Paint) -> String {
    let mut t = format!("\n{} {}\n", paint.bold("for"), a.name);
    t.push_str(&wrap(&format!("location: {}", a.location), "  "));
    let items: Vec<String> = a.settings.iter().map(|s| (*s).to_owned()).collect();
    t.push_str(&bullets(&items, paint));
    t
}

use super::page::{BAD, INT, NOT_WRITTEN, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["nocow"],
    documents: &["nocow", "nocow-check", "nocow-advice"],
    dry_run: true,
    output: super::page::Shape::Document,
    exits: &[
        row(
            status::OK,
            "done; --check: every file is NOCOW (or nothing applies).",
        ),
        row(
            status::NOT_NOCOW,
            "--check: the audit found files that are not NOCOW (needing migration, empty \
             and switchable, or blocked).",
        ),
        row(
            status::ERROR,
            "refused or failed (--migrate: a file written to while it was migrated is \
             refused after three copies; a re-run continues).",
        ),
        BAD,
        NOT_WRITTEN,
        INT,
    ],
    examples: &[
        (
            "What would be done.",
            "btrfs-lab nocow --dry-run /mnt/data/db",
        ),
        (
            "A NOCOW directory for VM images.",
            "btrfs-lab nocow --yes /mnt/data/vm",
        ),
        ("Audit a directory.", "btrfs-lab nocow --check /mnt/data/db"),
        (
            "Migrate existing files.",
            "btrfs-lab nocow --migrate --yes /mnt/data/db",
        ),
    ],
    see_also: &["chattr(1)", "lsattr(1)"],
}];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_reads_well() {
        let s = Summary {
            files: 3,
            nocow_files: 1,
            nocow_bytes: 1024,
            needs_migration_files: 1,
            needs_migration_bytes: 2048,
            switchable_files: 1,
            directories: 2,
            nocow_directories: 1,
            ..Summary::default()
        };
        assert_eq!(
            summary_sentence(&s),
            "3 files: 1 NOCOW (1.00KiB), 1 switchable (empty), 1 needs migration (2.00KiB); 1 of 2 directories below NOCOW"
        );
    }
}
