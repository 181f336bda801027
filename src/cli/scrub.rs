//! `btrfs-lab scrub MOUNT` and `scrub MOUNT --status | --cancel`.

use std::path::PathBuf;

use btrfs_lab::error::{Error, ErrorKind, Result, exit};
use btrfs_lab::model::rate::{duration, format_rate};
use btrfs_lab::model::text::escape_control;
use btrfs_lab::parse::size::parse_size;
use btrfs_lab::scrub::{
    self, DeviceScrub, Outcome, Request, STATE_DIR, ScrubPlan, ScrubRecord, ScrubReport,
    ScrubStatus, StateStore,
};
use btrfs_lab::sys::fs::outfile::{OutputDir, split};
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::fs::target::resolve_held;
use btrfs_lab::sys::{is_root, kernel::signals};
use btrfs_lab::ui::{self, Ui};
use clap::Args;

use super::output::{Output, confirm};
use super::units::UnitArgs;

pub const AFTER_HELP: &str = "\
The kernel scrubs each device in turn of its own thread; the first SIGINT,
SIGTERM or SIGHUP cancels the scrub (what was read stays read), the
command returns once every device's scrub did, and `scrub MOUNT --resume`
continues from where each device stopped (saved in --state-dir/scrub).";

#[derive(Debug, Args)]
pub struct ScrubArgs {
    /// A path inside a mounted btrfs.
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    /// Show the running (or paused, or last) operation and exit.
    #[arg(long, conflicts_with_all = ["cancel", "resume", "dry_run", "limit", "readonly"])]
    status: bool,
    /// Cancel the running operation: what is done stays done (a replace leaves OLD a member).
    #[arg(long, conflicts_with_all = ["resume", "limit", "readonly"])]
    cancel: bool,
    /// Continue the paused or interrupted operation.
    #[arg(long)]
    resume: bool,
    /// Only report errors, repair nothing (btrfs scrub start -r).
    #[arg(long)]
    readonly: bool,
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
    /// Show the plan and do nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(a: ScrubArgs, out: &Output, state_dir: Option<PathBuf>) -> Result<u8> {
    // Until the scrub starts a signal exits at once (nothing was changed).
    signals::install_pausable()?;
    a.units.select();
    let store = StateStore::new(&state_dir.unwrap_or_else(|| PathBuf::from(STATE_DIR)));
    let limit = match a.limit.as_deref() {
        None => None,
        Some(t) => {
            let v = parse_size(t.trim_end_matches("/s"))
                .map_err(|e| Error::usage(format!("invalid --limit {t}: {}", e.message())))?;
            if v == 0 {
                return Err(Error::usage(
                    "--limit must be more than 0 (no limit: leave it out)",
                ));
            }
            Some(v)
        }
    };
    if !is_root() {
        return Err(
            Error::new(ErrorKind::Permission, "scrub needs root (the scrub ioctls)")
                .with_hint("run it as root, e.g. with sudo"),
        );
    }
    // MOUNT is opened once and held (a symbolic link another user planted
    // on the way is refused, as every command does): the plan, the scrub
    // ioctls, --status and --cancel all act on the directory held.
    let (target, held) = resolve_held(&SysRoot::host(), &a.mount)?;
    let mount = a.mount.clone();
    if a.status {
        let st = scrub::status(&held, &store)?;
        out.report(&st, |st| render_status(st, out));
        return Ok(exit::OK);
    }
    if a.cancel {
        if a.dry_run {
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
        return Ok(exit::OK);
    }
    let req = Request {
        readonly: a.readonly,
        limit,
        resume: a.resume,
    };
    let (plan, saved) = scrub::plan(&held, &store, req)?;
    if !a.resume
        && let Some(s) = &saved
        && !s.finished
    {
        out.note(&format!(
            "the last scrub of {} was interrupted; this one starts over (--resume continues it)",
            a.mount.display()
        ));
    }
    ui::emit(out, &ScrubRecord::Plan { plan: plan.clone() });
    out.status(&render_plan(&plan, out));
    if plan.devices.is_empty() {
        return Err(Error::new(
            ErrorKind::State,
            format!("no device of {} to scrub", a.mount.display()),
        ));
    }
    if a.dry_run {
        out.status("(dry run: nothing was done)\n");
        return Ok(exit::OK);
    }
    let question = if plan.readonly {
        "Start the read-only scrub?"
    } else {
        "Start the scrub (it repairs what it can)?"
    };
    confirm(out, question, a.yes)?;
    out.before_change(format!("btrfs-lab scrub {} --status", mount.display()))?;
    // The metrics file says "running" from the start (with the last
    // scrub's figures), and is written again at the end on every path.
    let textfile = match &a.textfile {
        Some(file) => {
            let (dir, name) = split(file)?;
            Some((
                OutputDir::open(&dir)?.allow_untrusted(a.target.allow_untrusted_target),
                name,
                target.mount.mount_point.clone(),
            ))
        }
        None => None,
    };
    let write_metrics = |last: Option<&scrub::SavedScrub>, running: bool| -> Result<()> {
        if let Some((dir, name, mp)) = &textfile {
            dir.write(
                name.clone(),
                scrub::metrics(mp, &plan.fsid, last, running).as_bytes(),
                0o644,
            )?;
        }
        Ok(())
    };
    write_metrics(saved.as_ref(), true)?;
    let signals = signals::begin_operation()?;
    out.started();
    let result = scrub::execute(&held, &plan, saved.clone(), &store, &signals, out);
    let last = store.load(&plan.fsid).ok().flatten().or(saved);
    let written = write_metrics(last.as_ref(), false);
    let report = result?;
    written?;
    let code = report.exit_code();
    out.report_line(
        &ScrubRecord::Result {
            report: report.clone(),
        },
        |_| render_report(&report, out),
    );
    Ok(code)
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
    let head = match r.outcome {
        Outcome::Finished if r.totals.uncorrectable > 0 => p.bad("uncorrectable errors"),
        Outcome::Finished if r.totals.errors > 0 => p.warn("errors found"),
        Outcome::Finished => p.good("no errors"),
        Outcome::Interrupted => p.warn("interrupted"),
    };
    let rate = if r.duration_seconds > 0.0 {
        r.totals.bytes_scrubbed as f64 / r.duration_seconds
    } else {
        0.0
    };
    let mut t = format!(
        "scrub of {m}{}: {head}; {} read in {} ({})\n",
        if r.resumed { " (resumed)" } else { "" },
        out.size(r.totals.bytes_scrubbed),
        duration(r.duration_seconds),
        format_rate(rate)
    );
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
        format!("a scrub runs on {m}:\n")
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
            "last btrfs-lab scrub: {} ({} device{})\n",
            if l.finished {
                "finished"
            } else {
                "interrupted, --resume continues it"
            },
            l.devices.len(),
            if l.devices.len() == 1 { "" } else { "s" }
        ));
        for d in &l.devices {
            t.push_str(&device_line(d, out));
        }
    }
    t
}

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::man::Declared] = &[super::man::Declared {
    words: &["scrub"],
    examples: &[
        ("The plan only.", "btrfs-lab scrub --dry-run /mnt/data"),
        (
            "Scrub at most 200 MB/s per device, without asking.",
            "btrfs-lab scrub --yes --limit 200M /mnt/data",
        ),
        (
            "Where a scrub stands (btrfs scrub start's too).",
            "btrfs-lab scrub --status /mnt/data",
        ),
        (
            "Continue an interrupted scrub.",
            "btrfs-lab scrub --resume --yes /mnt/data",
        ),
    ],
    see_also: &["btrfs-scrub(8)"],
}];
