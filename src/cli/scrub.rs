//! `btrfs-lab scrub MOUNT` and `scrub MOUNT --status | --cancel`.

use std::path::{Path, PathBuf};

use btrfs_lab::error::{Error, Result, exit};
use btrfs_lab::operation::{self, View};
use btrfs_lab::parse::size::parse_size;
use btrfs_lab::report::rate::{duration, format_rate};
use btrfs_lab::report::text::escape_control;
use btrfs_lab::scrub::operation::{Scrub, Textfile};
use btrfs_lab::scrub::{
    self, DeviceScrub, Outcome, Request, STATE_DIR, ScrubPlan, ScrubRecord, ScrubReport,
    ScrubStatus, StateStore,
};
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::fs::target::resolve_held;
use btrfs_lab::sys::kernel::signals;
use btrfs_lab::ui::Ui;
use clap::Args;

use super::output::{ConfirmArgs, Output, ProgsFormat};
use super::units::UnitArgs;

pub const AFTER_HELP: &str = "\
The kernel scrubs each device in turn of its own thread; the first SIGINT,
SIGTERM or SIGHUP cancels the scrub (what was read stays read), the
command returns once every device's scrub did, and `scrub MOUNT --resume`
continues from where each device stopped (saved in --state-dir/scrub).";

#[derive(Debug, Args)]
pub struct ScrubArgs {
    /// A path inside a mounted btrfs.
    #[arg(
        value_name = "MOUNT",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    mount: Option<PathBuf>,
    /// Every mounted btrfs once (by UUID: a filesystem mounted several
    /// times, subvolumes too, is scrubbed once), the longest unscrubbed
    /// first, an interrupted scrub resumed from where it stopped (what
    /// btrfs-lab-scrub.timer runs).
    #[arg(long, conflicts_with_all = ["status", "cancel", "resume", "textfile"])]
    all: bool,
    /// With --all: leave a filesystem whose last complete scrub ended fewer
    /// than DAYS days ago [default: 30].
    #[arg(long, value_name = "DAYS")]
    min_age: Option<u64>,
    /// With --all: scrub at most N filesystems at once (each reads all its
    /// devices at once) [default: 1].
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=64))]
    max_parallel: Option<u16>,
    /// Show the running scrub (also one `btrfs scrub start` began), the last
    /// one btrfs-lab saved (when it started and ended, how long it took) and
    /// the speed limits in force, and exit.
    #[arg(long, conflicts_with_all = ["cancel", "resume", "dry_run", "limit", "readonly"])]
    status: bool,
    /// With --status: output format (`--json` gives the typed report).
    #[arg(long, value_enum, value_name = "FORMAT", requires = "status")]
    format: Option<ProgsFormat>,
    /// Cancel the running scrub (also one `btrfs scrub start` began): what
    /// was read stays read, and --resume continues it.
    #[arg(long, conflicts_with_all = ["resume", "limit", "readonly"])]
    cancel: bool,
    /// Continue the interrupted scrub where each device stopped (saved in
    /// --state-dir/scrub); the report counts the earlier runs too.
    #[arg(long)]
    resume: bool,
    /// Only report errors, repair nothing (btrfs scrub start -r).
    #[arg(long)]
    readonly: bool,
    /// Scrub only this member (its devid, as `show` lists it): one that
    /// came back after it was gone, to rewrite what it missed.
    #[arg(long, value_name = "DEVID", conflicts_with_all = ["all", "status", "cancel"])]
    device: Option<u64>,
    /// Read at most RATE bytes per second per device (e.g. 200M), for this
    /// run (the kernel's scrub_speed_max, 5.14 and later).
    #[arg(long, value_name = "RATE")]
    limit: Option<String>,
    /// Also write the Prometheus metrics to FILE atomically (a temporary file
    /// in its directory, then rename), for node_exporter's textfile collector.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["status", "cancel"])]
    textfile: Option<PathBuf>,
    #[command(flatten)]
    target: super::output::TargetArgs,
    #[command(flatten)]
    confirm: ConfirmArgs,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(a: ScrubArgs, out: &Output, state_dir: Option<PathBuf>) -> Result<u8> {
    // Until the scrub starts a signal exits at once (nothing was changed).
    signals::install_pausable()?;
    a.units.select();
    let state_dir = state_dir.unwrap_or_else(|| PathBuf::from(STATE_DIR));
    let limit = limit_arg(a.limit.as_deref())?;
    if a.all {
        return run_all(&a, limit, out, &state_dir);
    }
    // clap's `requires` counts --all's default (false) as given.
    if a.min_age.is_some() || a.max_parallel.is_some() {
        return Err(Error::usage(
            "--min-age and --max-parallel go with --all (one MOUNT is scrubbed whatever its age)",
        ));
    }
    let mount = a.mount.clone().expect("clap: MOUNT unless --all");
    if a.status || a.cancel {
        return status_or_cancel(&a, &mount, out, &StateStore::new(&state_dir));
    }
    let request = Request {
        readonly: a.readonly,
        limit,
        resume: a.resume,
        device: a.device,
    };
    let textfile = a.textfile.clone().map(|file| Textfile {
        file,
        allow_untrusted: a.target.allow_untrusted_target,
    });
    let mut op = Scrub::new(mount, request, &state_dir, textfile);
    operation::run(&mut op, a.confirm.into(), out, &Text(out))
}

/// `scrub --all`: the plan (every mounted btrfs once), then each chosen
/// filesystem's `scrub MOUNT`, then how each ended.
fn run_all(a: &ScrubArgs, limit: Option<u64>, out: &Output, state_dir: &Path) -> Result<u8> {
    use btrfs_lab::scrub::all::{self, AllEntry, Choice};
    operation::need_root("scrub needs root (the scrub ioctls)")?;
    let store = StateStore::new(state_dir);
    let under = btrfs_lab::hooks::Switch::ScrubAllUnder
        .value()
        .and_then(|v| std::path::absolute(v).ok());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let plan = all::plan_all(
        all::candidates(&store, under.as_deref())?,
        now,
        a.min_age
            .map_or(btrfs_lab::model::finding::rules::SCRUB_MIN_AGE, |d| {
                d.saturating_mul(86_400)
            }),
        usize::from(a.max_parallel.unwrap_or(1)),
    );
    btrfs_lab::ui::emit(out, &ScrubRecord::AllPlan { plan: plan.clone() });
    if !out.json {
        out.say(&render_all_plan(&plan));
    }
    if a.confirm.dry_run {
        out.status("(dry run: nothing was done)\n");
        return Ok(exit::OK);
    }
    let scrub_one = |e: &AllEntry| -> u8 {
        let request = Request {
            readonly: a.readonly || e.read_only,
            limit,
            resume: e.choice == Choice::Resume,
            device: None,
        };
        let mut op = Scrub::new(e.mount_point.clone(), request, state_dir, None);
        let confirm = operation::Confirm {
            dry_run: false,
            yes: true,
        };
        match operation::run(&mut op, confirm, out, &Text(out)) {
            Ok(code) => code,
            Err(err) => {
                out.error(&err);
                err.exit_code()
            }
        }
    };
    let report = all::run(&plan, &scrub_one);
    btrfs_lab::ui::emit(
        out,
        &ScrubRecord::AllResult {
            report: report.clone(),
        },
    );
    if !out.json {
        out.status(&render_all_report(&report));
    }
    Ok(report.exit_code())
}

/// `scrub --all`'s plan as text.
fn render_all_plan(plan: &btrfs_lab::scrub::all::AllPlan) -> String {
    use btrfs_lab::scrub::all::Choice;
    let mut t = format!(
        "Plan: scrub every mounted btrfs once ({} at a time; --min-age {} days):\n",
        plan.max_parallel,
        plan.min_age_seconds / 86_400
    );
    if plan.entries.is_empty() {
        t.push_str("  no btrfs is mounted\n");
    }
    for e in &plan.entries {
        let what = match e.choice {
            Choice::Resume => "resume",
            Choice::Scrub => "scrub",
            Choice::Skip => "skip",
        };
        // The reason hangs under the mount point, as its other mounts do.
        t.push_str(&btrfs_lab::report::text::wrap_hanging(
            &format!(
                "{}: {}",
                escape_control(&e.mount_point.display().to_string()),
                e.reason
            ),
            &format!("  {what:<6} "),
            "         ",
        ));
        if !e.also_mounted_at.is_empty() {
            let others: Vec<String> = e
                .also_mounted_at
                .iter()
                .map(|p| escape_control(&p.display().to_string()).into_owned())
                .collect();
            t.push_str(&format!("         also mounted at {}\n", others.join(", ")));
        }
    }
    t
}

/// How each filesystem's scrub ended, as text.
fn render_all_report(r: &btrfs_lab::scrub::all::AllReport) -> String {
    let ran = r.results.len();
    let skipped = r
        .plan
        .entries
        .iter()
        .filter(|e| e.choice == btrfs_lab::scrub::all::Choice::Skip)
        .count();
    let mut t = format!("scrub --all: {ran} run, {skipped} skipped");
    if !r.not_begun.is_empty() {
        t.push_str(&format!(", {} not begun", r.not_begun.len()));
    }
    t.push('\n');
    for x in &r.results {
        let how = match x.exit_status {
            0 => "clean",
            3 => "errors found and corrected",
            4 => "errors it could not repair (files are damaged)",
            130 => "interrupted (the next run resumes it)",
            _ => "failed (see above)",
        };
        t.push_str(&format!(
            "  {}: {how}\n",
            escape_control(&x.mount_point.display().to_string())
        ));
    }
    for m in &r.not_begun {
        t.push_str(&format!(
            "  {}: not begun (interrupted)\n",
            escape_control(&m.display().to_string())
        ));
    }
    t
}

/// `--limit RATE` (`200M` or `200M/s`): bytes per second, more than 0.
fn limit_arg(text: Option<&str>) -> Result<Option<u64>> {
    let Some(t) = text else {
        return Ok(None);
    };
    let v = parse_size(t.trim_end_matches("/s"))
        .map_err(|e| Error::usage(format!("invalid --limit {t}: {}", e.message())))?;
    if v == 0 {
        return Err(Error::usage(
            "--limit must be more than 0 (no limit: leave it out)",
        ));
    }
    Ok(Some(v))
}

/// `--status` and `--cancel`: on the filesystem held (a symbolic link
/// another user planted on the way is refused, as every command does).
fn status_or_cancel(a: &ScrubArgs, mount: &Path, out: &Output, store: &StateStore) -> Result<u8> {
    operation::need_root("scrub needs root (the scrub ioctls)")?;
    let (_, held) = resolve_held(&SysRoot::host(), mount)?;
    if a.status {
        let progs = ProgsFormat::progs_json(a.format, out)?;
        let st = scrub::status(&held, store)?;
        if progs {
            let now = btrfs_lab::device::started::now_unix();
            let doc = btrfs_lab::report::progs_json::scrub_status(&st, now);
            out.document_text(&btrfs_lab::report::progs_json::to_text(&doc)?);
            return Ok(exit::OK);
        }
        out.report(&st, |st| render_status(st, out));
        return Ok(exit::OK);
    }
    if a.confirm.dry_run {
        out.status("(dry run: would cancel the running scrub)\n");
        return Ok(exit::OK);
    }
    out.before_change(format!("btrfs-lab scrub {} --status", mount.display()))?;
    let c = scrub::cancel(&held)?;
    out.report(&c, |c| {
        format!(
            "scrub of {} cancelled; btrfs-lab scrub {} --resume continues it\n",
            c.mount_point.display(),
            c.mount_point.display()
        )
    });
    Ok(exit::OK)
}

/// scrub's plan and report as text.
struct Text<'a>(&'a Output);

impl View<Scrub> for Text<'_> {
    fn plan(&self, plan: &ScrubPlan) -> String {
        render_plan(plan, self.0)
    }
    fn result(&self, _plan: &ScrubPlan, report: &ScrubReport) {
        self.0.status(&render_report(report, self.0));
    }
}

fn render_plan(plan: &ScrubPlan, out: &Output) -> String {
    let p = out.paint;
    let mut t = format!(
        "{} {} ({}{}):\n",
        p.bold(if plan.resume {
            "Plan: resume the scrub of"
        } else {
            "Plan: scrub"
        }),
        plan.mount_point.display(),
        if plan.readonly {
            "read-only, nothing is repaired"
        } else {
            "repairs from another copy where there is one"
        },
        plan.limit.map_or(String::new(), |l| format!(
            ", at most {} per device",
            format_rate(l as f64)
        )),
    );
    for d in &plan.devices {
        t.push_str(&format!(
            "  devid {} {}: reads {}{}{}\n",
            d.devid,
            d.path,
            out.size(d.bytes_to_read),
            if d.allocated_only {
                " at most (allocated: the usage of its chunks could not be read)"
            } else {
                " (the blocks in use on it)"
            },
            if d.start > 0 {
                format!(", from physical offset {}", out.size(d.start))
            } else {
                String::new()
            }
        ));
        if let (Some(l), Some(f)) = (plan.limit, &d.speed_max_file) {
            t.push_str(&format!(
                "    sets {} to {l} for the run, then back\n",
                f.display()
            ));
        }
        if let (Some(now), Some(f)) = (d.speed_max_now, &d.speed_max_file) {
            t.push_str(&format!(
                "    {}: scrub_speed_max is already {} on it{}\n",
                p.warn("limited"),
                format_rate(now as f64),
                if plan.limit.is_some() {
                    " (--limit replaces it for the run, then puts it back)".to_owned()
                } else {
                    format!(
                        ", so it scrubs at most that fast (echo 0 > {} lifts it)",
                        f.display()
                    )
                }
            ));
        }
    }
    for m in &plan.missing {
        t.push_str(&format!("  devid {m}: missing, not scrubbed\n"));
    }
    t
}

fn device_line(d: &DeviceScrub, out: &Output) -> String {
    format!(
        "  devid {} {}: {} read of {}, {} errors (read {}, csum {}, verify {}, super {}), {} corrected, {} uncorrectable\n",
        d.devid,
        d.path,
        out.size(d.bytes_scrubbed),
        out.size(d.bytes_to_read),
        d.errors(),
        d.read_errors,
        d.csum_errors,
        d.verify_errors,
        d.super_errors,
        d.corrected,
        d.uncorrectable
    )
}

fn render_report(r: &ScrubReport, out: &Output) -> String {
    let p = out.paint;
    let m = r.mount_point.display();
    // A resumed scrub: the whole scrub's figures, and this run's share.
    let resumed = r.resumed && r.runs > 1;
    let (all, secs) = if resumed {
        (&r.scrub_totals, r.scrub_duration_seconds)
    } else {
        (&r.totals, r.duration_seconds)
    };
    let head = match r.outcome {
        Outcome::Finished if all.uncorrectable > 0 => p.bad("uncorrectable errors"),
        Outcome::Finished if all.errors > 0 => p.warn("errors found"),
        Outcome::Finished => p.good("no errors"),
        Outcome::Interrupted => p.warn("interrupted"),
    };
    let rate = if secs > 0.0 {
        all.bytes_scrubbed as f64 / secs
    } else {
        0.0
    };
    let mut t = format!(
        "scrub of {m}: {head}; {} read in {} ({}){}\n",
        out.size(all.bytes_scrubbed),
        duration(secs),
        format_rate(rate),
        if resumed {
            format!(
                " in {} runs; resumed: this run read {} in {}",
                r.runs,
                out.size(r.totals.bytes_scrubbed),
                duration(r.duration_seconds)
            )
        } else if r.resumed {
            " (resumed)".to_owned()
        } else {
            String::new()
        }
    );
    if resumed {
        t.push_str(&read_again(all.bytes_scrubbed, all.bytes_to_read, out));
        t.push_str("this run, per device:\n");
    }
    for d in &r.devices {
        t.push_str(&device_line(d, out));
    }
    for m in &r.missing {
        t.push_str(&format!(
            "  devid {m}: missing, not scrubbed (btrfs-lab device replace brings its copies back)\n"
        ));
    }
    if r.outcome == Outcome::Interrupted {
        t.push_str(&format!("continue it with: btrfs-lab scrub {m} --resume\n"));
    }
    if !r.damaged_files.is_empty() {
        t.push_str(&format!(
            "{} (no good copy of some blocks; restore them from a backup):\n",
            p.bad("damaged files")
        ));
        for f in &r.damaged_files {
            let offsets: Vec<String> = f.offsets.iter().take(8).map(|o| out.size(*o)).collect();
            t.push_str(&format!(
                "  {} (subvolume {}, inode {}): at {}{}\n",
                escape_control(&f.path),
                f.subvolume,
                f.inode,
                offsets.join(", "),
                if f.offsets.len() > 8 {
                    format!(" and {} more", f.offsets.len() - 8)
                } else {
                    String::new()
                }
            ));
        }
    }
    let named: u64 = r.damaged_files.iter().map(|f| f.errors).sum();
    if r.totals.uncorrectable > named {
        t.push_str(&format!(
            "{}: the kernel rate-limits its messages (about 10 in 5 s), so not every damaged file may be named here; btrfs-lab rescue {m} reads every file and copies out the intact ones\n",
            if r.damaged_files.is_empty() {
                "files are damaged".to_owned()
            } else {
                format!("{} uncorrectable errors, {named} named", r.totals.uncorrectable)
            }
        ));
    } else if !r.damaged_files.is_empty() {
        t.push_str(&format!(
            "btrfs-lab rescue {m} copies out the intact files\n"
        ));
    }
    t
}

fn render_status(st: &ScrubStatus, out: &Output) -> String {
    let m = st.mount_point.display();
    let mut t = if st.running {
        format!(
            "a scrub runs on {m}{}:\n",
            st.since()
                .map_or(String::new(), |s| format!(" (btrfs-lab's, {s})"))
        )
    } else {
        format!("no scrub runs on {m}\n")
    };
    for d in &st.devices {
        t.push_str(&device_line(d, out));
    }
    for l in &st.limits {
        t.push_str(&format!(
            "devid {}: scrubs at most {} (scrub_speed_max), set by {}\n",
            l.devid,
            format_rate(l.bytes_per_second as f64),
            l.set_by
                .as_deref()
                .unwrap_or("hand or another tool (no btrfs-lab record)")
        ));
    }
    if let Some(l) = &st.last {
        t.push_str(&format!(
            "last btrfs-lab scrub: {} ({} device{}); {}\n",
            if l.finished {
                "finished"
            } else {
                "interrupted, --resume continues it"
            },
            l.devices.len(),
            if l.devices.len() == 1 { "" } else { "s" },
            l.when()
        ));
        for d in &l.devices {
            t.push_str(&device_line(d, out));
        }
        if l.runs > 1 {
            let all = btrfs_lab::scrub::Totals::of(&l.devices);
            t.push_str(&read_again(all.bytes_scrubbed, all.bytes_to_read, out));
        }
    }
    t
}

/// Why a resumed scrub read more than the blocks in use (a line), or
/// nothing.
fn read_again(read: u64, to_read: u64, out: &Output) -> String {
    if read <= to_read {
        return String::new();
    }
    format!(
        "{} read again: a resume starts over the chunk each device stopped in\n",
        out.size(read - to_read)
    )
}

use super::page::{BAD, NOT_WRITTEN, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["scrub"],
    documents: &["scrub-record", "scrub-status", "scrub-cancel", "error"],
    dry_run: true,
    output: super::page::Shape::Lines,
    exits: &[
        row(
            status::OK,
            "scrubbed, no error found (--status, --cancel, --dry-run: done).",
        ),
        row(
            status::SCRUB_CORRECTED,
            "errors-corrected: errors were found and every one was repaired from another \
             copy (with --readonly: errors were found, none was repaired).",
        ),
        row(
            status::SCRUB_UNCORRECTABLE,
            "errors-uncorrectable: no good copy of some blocks: files are damaged \
             (btrfs-lab rescue copies out the intact ones).",
        ),
        row(
            status::ERROR,
            "refused or failed: not a btrfs, not root, a scrub already runs, --cancel \
             with no scrub running, --resume with nothing to resume.",
        ),
        BAD,
        NOT_WRITTEN,
        row(
            status::INTERRUPTED,
            "SIGINT, SIGTERM or SIGHUP: the scrub was cancelled after every device's scrub \
             returned; its progress is saved and `scrub MOUNT --resume` continues it.",
        ),
    ],
    examples: &[
        ("The plan only.", "btrfs-lab scrub --dry-run /mnt/data"),
        (
            "Scrub at most 200 MB/s per device (a cron line: it does not ask).",
            "btrfs-lab scrub --limit 200M /mnt/data",
        ),
        (
            "Where a scrub stands (btrfs scrub start's too).",
            "btrfs-lab scrub --status /mnt/data",
        ),
        (
            "The same as proposed for btrfs --format json scrub status (#1108).",
            "btrfs-lab scrub --status --format progs-json /mnt/data",
        ),
        (
            "Continue an interrupted scrub.",
            "btrfs-lab scrub --resume /mnt/data",
        ),
        (
            "Resync device 3 after it came back (doctor's device-returned).",
            "btrfs-lab scrub --device 3 /mnt/data",
        ),
        (
            "Every mounted btrfs once, those due (what btrfs-lab-scrub.timer runs).",
            "btrfs-lab scrub --all",
        ),
    ],
    see_also: &["btrfs-scrub(8)"],
}];
