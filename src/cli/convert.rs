//! `btrfs-lab convert MOUNT --data P --metadata P` and
//! `convert MOUNT --status | --pause | --resume | --cancel`.

use std::path::{Path, PathBuf};

use btrfs_lab::convert::report::{BalanceKind, CancelReport, ConvertRecord, PlanDoc, StatusReport};
use btrfs_lab::convert::{
    ConvertPlan, ConvertRequest, Finished, Start, Targets, exec, manage, plan_convert_on,
    read_layout,
};
use btrfs_lab::error::{Error, ErrorKind, Result, exit};
use btrfs_lab::model::profile::Profile;
use btrfs_lab::operation::hooks;
use btrfs_lab::operation::state::open_state;
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::kernel::btrfs::FsHandle;
use btrfs_lab::sys::{is_root, kernel::signals};
use clap::Args;

use super::output::{Output, confirm};
use super::units::{DATA_HELP, METADATA_HELP, UnitArgs, profiles, size};
use btrfs_lab::ui::{self, Ui};

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// A path inside a mounted btrfs.
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    #[arg(long, value_parser = profiles(), hide_possible_values = true, value_name = "PROFILE", help = DATA_HELP, conflicts_with_all = ["status", "pause", "resume", "cancel"])]
    data: Option<Profile>,
    #[arg(long, value_parser = profiles(), hide_possible_values = true, value_name = "PROFILE", help = METADATA_HELP, conflicts_with_all = ["status", "pause", "resume", "cancel"])]
    metadata: Option<Profile>,
    /// Allow a metadata profile that protects less: fewer copies than now,
    /// or RAID5/6 (btrfs balance's --force).
    #[arg(long = "allow-weaker-metadata", alias = "force")]
    force: bool,
    /// Show the running (or paused, or last) operation and exit.
    #[arg(long, conflicts_with_all = ["pause", "resume", "cancel"])]
    status: bool,
    /// Pause the running conversion after the current chunk.
    #[arg(long, conflicts_with_all = ["resume", "cancel"])]
    pause: bool,
    /// Continue the paused or interrupted operation.
    #[arg(long, conflicts_with = "cancel")]
    resume: bool,
    /// Cancel the running operation: what is done stays done (a replace leaves OLD a member).
    #[arg(long)]
    cancel: bool,
    /// Show the plan and do nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
    /// Run the conversion detached from the terminal (as `btrfs balance
    /// start --bg`): returns once the balance runs; follow it with --status.
    #[arg(long, conflicts_with_all = ["status", "pause", "cancel", "dry_run"])]
    background: bool,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(a: ConvertArgs, out: &Output) -> Result<u8> {
    // First thing: until the balance starts a signal exits at once (nothing
    // was changed); from then on it pauses the balance.
    signals::install_pausable()?;
    a.units.select();
    let root = SysRoot::host();
    if a.status {
        return status(&root, &a.mount, out);
    }
    if !is_root() {
        return Err(
            Error::new(ErrorKind::Permission, "converting profiles needs root")
                .with_hint("run it as root, e.g. with sudo"),
        );
    }
    if a.pause {
        return pause(&root, &a.mount, out);
    }
    if a.cancel {
        return cancel(&root, &a.mount, a.dry_run, a.yes, out);
    }
    if a.resume {
        return resume(&root, &a.mount, a.dry_run, a.yes, a.background, out);
    }
    let req = ConvertRequest {
        data: a.data,
        metadata: a.metadata,
        force: a.force,
    };
    if req.data.is_none() && req.metadata.is_none() {
        return Err(Error::usage(
            "give --data PROFILE, --metadata PROFILE or both (or --status, --pause, --resume, --cancel)",
        ));
    }
    let (fs, state) = open_state(&root, &a.mount)?;
    let layout = read_layout(&fs, &state);
    let plan = plan_convert_on(&state, &req, layout.as_ref());
    // The plan: a JSON Lines record even when refused; as text only when
    // not (the refusal is the error line).
    ui::emit(out, &plan_record(&plan));
    if plan.blocking(req.force).is_empty() {
        out.status(&render_plan(&plan, out));
    }
    refuse_if_blocked(&plan, req.force)?;
    if plan.nothing_to_do {
        out.status("nothing to convert: every type is already in its target profile\n");
        return Ok(exit::OK);
    }
    if a.dry_run {
        out.status("(dry run: nothing was done)\n");
        return Ok(exit::OK);
    }
    confirm(out, &confirm_question(&plan), a.yes)?;
    hooks::pause_point("convert-confirmed");
    // The plan was shown for the filesystem held open; the path must still
    // lead there, or the user would have confirmed something else.
    fs.check_path_still_here(&a.mount)?;
    out.before_change(look(&state.mount_point))?;
    let detached = match background(a.background, &state.mount_point, out)? {
        Some(Ok(code)) => return Ok(code),
        Some(Err(notice)) => Some(notice),
        None => None,
    };
    let signals = signals::begin_operation()?;
    execute(
        &root,
        &fs,
        &state.mount_point,
        Start::Convert(req, plan.existing),
        req.into(),
        &signals,
        detached,
        out,
    )
}

/// `--background`: `None` without it; in the process the user started,
/// `Some(Ok(exit status))` once the detached one said the balance runs (or
/// ended early); in the detached process `Some(Err(notice))`.
fn background(
    wanted: bool,
    mount_point: &Path,
    out: &Output,
) -> Result<Option<std::result::Result<u8, signals::DetachNotice>>> {
    if !wanted {
        return Ok(None);
    }
    match signals::detach()? {
        signals::Detached::Child(n) => Ok(Some(Err(n))),
        signals::Detached::Parent {
            pid,
            ended_early: Some(code),
        } => {
            let _ = pid;
            Ok(Some(Ok(u8::try_from(code).unwrap_or(exit::ERROR))))
        }
        signals::Detached::Parent {
            pid,
            ended_early: None,
        } => {
            let m = mount_point.display();
            out.started();
            out.report_line(&ConvertRecord::Background { pid }, |_| {
                format!(
                    "the conversion runs in the background (process {pid}); follow it with: btrfs-lab convert {m} --status (pause: --pause, cancel: --cancel)\n"
                )
            });
            Ok(Some(Ok(exit::OK)))
        }
    }
}

fn confirm_question(plan: &ConvertPlan) -> String {
    if plan.risks.is_empty() {
        "Start the conversion?".to_owned()
    } else {
        "Start the conversion, accepting the risk above?".to_owned()
    }
}

/// Refusals as one error line each (all of them), or Ok.
pub fn refuse_if_blocked(plan: &ConvertPlan, force: bool) -> Result<()> {
    plan.check(force)
}

/// The plan's JSON Lines record.
fn plan_record(plan: &ConvertPlan) -> ConvertRecord {
    ConvertRecord::Plan {
        plan: Some(PlanDoc::Convert(Box::new(plan.clone()))),
        resume: None,
    }
}

pub fn render_plan(plan: &ConvertPlan, out: &Output) -> String {
    let p = out.paint;
    let mut t = format!(
        "{} {} ({} device{}, {} raw)\n",
        p.bold("Plan: convert"),
        plan.mount_point.display(),
        plan.devices,
        if plan.devices == 1 { "" } else { "s" },
        size(plan.raw_bytes)
    );
    for c in &plan.changes {
        let from: Vec<&str> = c.from.iter().map(|p| p.name()).collect();
        t.push_str(&format!(
            "  {:<9} {:<12} → {:<8} {} allocated to convert, {} used\n",
            c.kind.json_name(),
            if from.is_empty() {
                "none".to_owned()
            } else {
                from.join("+")
            },
            c.to.name(),
            size(c.bytes_to_convert),
            size(c.used_bytes)
        ));
    }
    t.push_str(&format!(
        "  usable for data: {} now → {} after (estimate from the chunk allocator's rules)\n",
        size(plan.data_capacity_before),
        size(plan.data_capacity_after)
    ));
    t.push_str(&format!(
        "  runs the BALANCE_V2 ioctl, as: {}\n",
        btrfs_lab::sys::tools::display_argv(&plan.equivalent_command)
    ));
    t.push_str("  chunks already in the target profile are skipped (soft), so running it again finishes what is left\n");
    for r in &plan.risks {
        t.push_str(&format!("{} {r}\n", p.bad("RISK:")));
    }
    for w in &plan.warnings {
        t.push_str(&format!("{} {w}\n", p.warn("WARNING:")));
    }
    t
}

/// Runs the conversion job (convert::exec, progress through the
/// Ui) and renders how it finished.
#[allow(clippy::too_many_arguments)]
pub fn execute(
    root: &SysRoot,
    fs: &FsHandle,
    mount_point: &Path,
    start: Start,
    targets: Targets,
    signals: &signals::OperationSignals,
    detached: Option<signals::DetachNotice>,
    out: &Output,
) -> Result<u8> {
    let job = exec::Conversion {
        root,
        fs,
        mount_point,
        start,
        targets,
        signals,
    };
    let finished = exec::execute_with_ui(job, detached, out)?;
    let m = mount_point.display();
    match &finished {
        Finished::Completed(records) => {
            out.status(&format!(
                "{} every type is in its target profile:\n{}",
                out.paint.good("done:"),
                super::df::render_records(records, Default::default())
            ));
            Ok(exit::OK)
        }
        Finished::Paused { bytes_remaining: 0 } => {
            out.warning_with_hint(
                "the conversion is paused with no data left to move (its last chunk finished as it paused); data is intact",
                &format!("let the kernel finish it with: btrfs-lab convert {m} --resume (running the same convert again also resumes it); or cancel it with: btrfs-lab convert {m} --cancel"),
            );
            Ok(exit::INTERRUPTED)
        }
        Finished::Paused { bytes_remaining } => {
            out.warning_with_hint(
                &format!("the conversion is paused with {} left to convert; data is intact", size(*bytes_remaining)),
                &format!("resume it with: btrfs-lab convert {m} --resume (running the same convert again also resumes it); or cancel it with: btrfs-lab convert {m} --cancel"),
            );
            Ok(exit::INTERRUPTED)
        }
        Finished::Cancelled => Err(finished
            .error(mount_point)
            .unwrap_or_else(Error::interrupted)),
    }
}

fn status(root: &SysRoot, mount: &Path, out: &Output) -> Result<u8> {
    let st = manage::status(root, mount)?;
    out.report(&st, |st| render_status(st, out));
    Ok(exit::OK)
}

fn render_status(st: &StatusReport, out: &Output) -> String {
    let names = |v: &[Profile]| v.iter().map(|p| p.name()).collect::<Vec<_>>();
    let (data, meta) = (&st.data_profiles, &st.metadata_profiles);
    let mut t = format!(
        "{} {}: ",
        out.paint.bold("conversion on"),
        st.mount_point.display()
    );
    match st.balance {
        BalanceKind::None => {
            t.push_str("none running\n");
            t.push_str(&format!(
                "  data {}, metadata {}\n",
                names(data).join("+"),
                names(meta).join("+")
            ));
            if data.len() > 1 || meta.len() > 1 {
                t.push_str(&format!(
                    "  {} a conversion did not finish; run the same convert again to complete it (converted chunks are skipped)\n",
                    out.paint.warn("mixed profiles:")
                ));
            }
            for d in &st.device_errors {
                t.push_str(&format!(
                    "  {} device {} ({}) has recorded {} read and {} corruption errors: a conversion stops at the first block it cannot read; scrub first (btrfs scrub start -B {}) and restore or delete the damaged files\n",
                    out.paint.warn("errors:"),
                    d.devid,
                    d.path,
                    d.read,
                    d.corruption,
                    st.mount_point.display()
                ));
            }
        }
        kind => {
            t.push_str(if kind == BalanceKind::Running {
                "running\n"
            } else {
                "paused\n"
            });
            let tg = |p: Option<Profile>| p.map_or("unchanged".to_owned(), |p| p.name().to_owned());
            t.push_str(&format!(
                "  targets: data {}, metadata {}\n",
                tg(st.data_target),
                tg(st.metadata_target)
            ));
            if st.counters_reset {
                t.push_str(
                    "  chunks: counters were reset (the filesystem was remounted while paused)\n",
                );
            } else {
                t.push_str(&format!(
                    "  chunks: {} of {} relocated\n",
                    st.chunks_done.unwrap_or(0),
                    st.chunks_expected.unwrap_or(0)
                ));
            }
            t.push_str(&format!(
                "  remaining: {} not yet in the target profiles\n",
                size(st.bytes_remaining.unwrap_or(0))
            ));
            if kind == BalanceKind::Paused {
                t.push_str(&format!(
                    "  resume with: btrfs-lab convert {} --resume\n",
                    st.mount_point.display()
                ));
            }
        }
    }
    t
}

/// Where a convert's change is seen when its report could not be written.
fn look(mount_point: &Path) -> String {
    format!("btrfs-lab convert {} --status", mount_point.display())
}

fn pause(root: &SysRoot, mount: &Path, out: &Output) -> Result<u8> {
    out.before_change(look(mount))?;
    let (done, state) = manage::pause(root, mount)?;
    let m = state.mount_point.display();
    out.report(&done.report(), |_| {
        let already = if done == manage::Paused::Already {
            "already paused"
        } else {
            "paused"
        };
        format!("{already}; resume with: btrfs-lab convert {m} --resume\n")
    });
    Ok(exit::OK)
}

fn cancel(root: &SysRoot, mount: &Path, dry_run: bool, yes: bool, out: &Output) -> Result<u8> {
    let (fs, _state) = manage::prepare_cancel(root, mount)?;
    let what = "cancel the balance: chunks already converted stay converted, the rest keeps its old profile (mixed profiles until a convert finishes)";
    if dry_run {
        out.text(&format!("would {what}\n(dry run: nothing was done)\n"));
        return Ok(exit::OK);
    }
    out.say(&format!("This will {what}.\n"));
    confirm(out, "Cancel the balance?", yes)?;
    out.before_change(look(mount))?;
    manage::cancel(&fs, mount)?;
    out.report(&CancelReport { cancelled: true }, |_| {
        "cancelled\n".to_owned()
    });
    Ok(exit::OK)
}

fn resume(
    root: &SysRoot,
    mount: &Path,
    dry_run: bool,
    yes: bool,
    bg: bool,
    out: &Output,
) -> Result<u8> {
    let (fs, state, targets, plan) = manage::prepare_resume(root, mount)?;
    let record = ConvertRecord::Plan {
        plan: None,
        resume: Some(plan.clone()),
    };
    out.report_line(&record, |_| {
        format!(
            "Resume the paused balance on {}: {}, {} left to convert\n",
            state.mount_point.display(),
            targets.describe(),
            size(plan.bytes_remaining)
        )
    });
    if dry_run {
        out.status("(dry run: nothing was done)\n");
        return Ok(exit::OK);
    }
    confirm(out, "Resume?", yes)?;
    fs.check_path_still_here(mount)?;
    out.before_change(look(&state.mount_point))?;
    let detached = match background(bg, &state.mount_point, out)? {
        Some(Ok(code)) => return Ok(code),
        Some(Err(notice)) => Some(notice),
        None => None,
    };
    let signals = signals::begin_operation()?;
    execute(
        root,
        &fs,
        &state.mount_point,
        Start::Resume,
        targets,
        &signals,
        detached,
        out,
    )
}

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::decl::Declared] = &[super::decl::Declared {
    words: &["convert"],
    examples: &[
        (
            "The plan only.",
            "btrfs-lab convert --dry-run /mnt/data --data raid0 --metadata raid1",
        ),
        (
            "Convert without asking.",
            "btrfs-lab convert --yes /mnt/data --data raid0 --metadata raid1",
        ),
        (
            "Where a conversion stands.",
            "btrfs-lab convert --status /mnt/data",
        ),
        (
            "Continue a paused conversion.",
            "btrfs-lab convert --resume /mnt/data",
        ),
    ],
    see_also: &["btrfs-balance(8)"],
}];
