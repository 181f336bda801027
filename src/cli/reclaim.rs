//! `btrfs-lab reclaim MOUNT`: give little-used data chunks back to the
//! unallocated pool, step by step, plan first.

use std::path::PathBuf;

use btrfs_lab::error::{Error, ErrorKind, Result, exit};
use btrfs_lab::model::exit::GOAL_NOT_REACHED;
use btrfs_lab::reclaim::{
    self, Goal, MemoryStore, ReclaimOutcome, ReclaimPlan, ReclaimRecord, ReclaimRequest,
    ReclaimResult,
};
use btrfs_lab::scrub::STATE_DIR;
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::{is_root, kernel::signals};
use btrfs_lab::ui::{self, Ui};
use clap::Args;

use super::output::{Output, confirm};
use super::units::{UnitArgs, size, size_arg};

pub const AFTER_HELP: &str = "\
When metadata cannot get a new chunk (every byte is allocated, much of it to
data chunks that are partly empty), every write can fail with ENOSPC although
`df` shows free space. reclaim relocates the least-used data chunks first
(-dusage=0, 5, 10, ... up to --max-usage) and stops as soon as the goal is
reached: by default room for one full metadata chunk, or --goal SIZE of
unallocated space. Each step is planned from every chunk's usage, with the
space it should free; a step with no chunk below its value is skipped.

Metadata chunks are relocated only with --with-metadata.

Ctrl-C (SIGINT, SIGTERM, SIGHUP) cancels the running step after its current
chunk: what was freed stays freed, and running the same command again goes on.";

#[derive(Debug, Args)]
pub struct ReclaimArgs {
    /// A path inside a mounted btrfs.
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    /// Stop once the devices have this much unallocated space in all
    /// (e.g. 2G) [default: room for one full metadata chunk].
    #[arg(long, value_parser = size_arg, value_name = "SIZE")]
    goal: Option<u64>,
    /// The last -dusage value tried (percent, 1-100): chunks used this much
    /// or more are never moved.
    #[arg(long, value_name = "PERCENT", default_value_t = 90, value_parser = clap::value_parser!(u8).range(1..=100))]
    max_usage: u8,
    /// Relocate metadata chunks too (-musage), after data, if data alone
    /// does not reach the goal.
    #[arg(long = "with-metadata")]
    metadata: bool,
    /// Show the plan and do nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(a: ReclaimArgs, out: &Output, state_dir: Option<PathBuf>) -> Result<u8> {
    // Until the first balance starts a signal exits at once (nothing was
    // changed); from then on it cancels the running step.
    signals::install_pausable()?;
    a.units.select();
    if !is_root() {
        return Err(
            Error::new(ErrorKind::Permission, "reclaiming space needs root")
                .with_hint("run it as root, e.g. with sudo"),
        );
    }
    if a.goal == Some(0) {
        return Err(Error::usage("--goal must be larger than 0"));
    }
    let root = SysRoot::host();
    let req = ReclaimRequest {
        goal_bytes: a.goal,
        max_usage: a.max_usage,
        metadata: a.metadata,
    };
    let (fs, mut facts) = reclaim::open(&root, &a.mount, a.metadata)?;
    let memory = MemoryStore::new(&state_dir.unwrap_or_else(|| PathBuf::from(STATE_DIR)));
    match memory.load(&facts.state.fsid) {
        Ok(m) => facts.fruitless = m.fruitless,
        Err(e) => out.warning_with_hint(
            &format!("{}: planning as if reclaim had never run here", e.message()),
            e.hint().unwrap_or(""),
        ),
    }
    let plan = reclaim::plan(&facts, &req);
    ui::emit(out, &ReclaimRecord::Plan { plan: plan.clone() });
    out.status(&render_plan(&plan, out));
    if plan.goal_reached {
        out.status("nothing to do: the goal is reached already\n");
        return Ok(exit::OK);
    }
    if plan.steps.is_empty() {
        out.warning_with_hint(
            &format!(
                "no balance up to -dusage={1} is estimated to free space on {0}: the data chunks are fuller, or moving their data takes as much room as it frees; nothing was changed",
                plan.mount_point.display(),
                plan.max_usage
            ),
            &format!(
                "add a device (btrfs-lab device add {} NEW_DEVICE) or delete files and the snapshots that hold them",
                plan.mount_point.display()
            ),
        );
        return Ok(GOAL_NOT_REACHED.code);
    }
    if a.dry_run {
        out.status("(dry run: nothing was done)\n");
        return Ok(exit::OK);
    }
    confirm(out, "Relocate these chunks?", a.yes)?;
    fs.check_path_still_here(&a.mount)?;
    // The plan must have reached the user (and stdout be writable) before
    // anything is changed.
    out.before_change(format!("btrfs-lab usage {}", plan.mount_point.display()))?;
    let signals = signals::begin_operation()?;
    let result = reclaim::execute_with_ui(&fs, &facts, &plan, &signals, out)?;
    if let Err(e) = reclaim::remember(&memory, &plan.fsid, &result) {
        out.warning_with_hint(
            &format!(
                "{}: the next run may plan the same fruitless steps again",
                e.message()
            ),
            e.hint().unwrap_or(""),
        );
    }
    Ok(render_result(&result, &plan, out))
}

fn goal_words(g: &Goal) -> String {
    match g {
        Goal::MetadataChunk {
            profile,
            devices,
            bytes_per_device,
        } => format!(
            "room for a full {profile} metadata chunk ({devices} device{} with {} unallocated)",
            if *devices == 1 { "" } else { "s" },
            size(*bytes_per_device)
        ),
        Goal::Unallocated { bytes } => format!("{} unallocated over all devices", size(*bytes)),
    }
}

fn render_plan(plan: &ReclaimPlan, out: &Output) -> String {
    let p = out.paint;
    let mut t = format!(
        "{} {} (data {}, metadata {})\n",
        p.bold("Plan: reclaim"),
        plan.mount_point.display(),
        plan.data_profile.map_or("none", |p| p.name()),
        plan.metadata_profile.map_or("none", |p| p.name()),
    );
    let devices: Vec<String> = plan
        .devices
        .iter()
        .map(|d| format!("{} {}", d.path, size(d.unallocated_bytes)))
        .collect();
    t.push_str(&format!(
        "  unallocated: {} ({})\n  goal: {}{}\n",
        size(plan.unallocated_bytes),
        devices.join(", "),
        goal_words(&plan.goal),
        if plan.goal_reached { " (reached)" } else { "" }
    ));
    if !plan.steps.is_empty() {
        t.push_str("  steps (each counts the chunks of the steps before it):\n");
    }
    for s in &plan.steps {
        t.push_str(&format!(
            "  {}  {} chunk{} {}, {} of data to move → about {} unallocated\n",
            btrfs_lab::sys::tools::display_argv(&s.command),
            s.chunks,
            if s.chunks == 1 { "" } else { "s" },
            if s.usage == 0 {
                "empty".to_owned()
            } else {
                format!("below {}%", s.usage)
            },
            size(s.moves_bytes),
            size(plan.unallocated_bytes + s.frees_raw_bytes)
        ));
    }
    if !plan.steps.is_empty() {
        t.push_str(&format!(
            "  runs each as the BALANCE_V2 ioctl, stopping as soon as the goal is reached (predicted: about {} unallocated{})\n",
            size(plan.predicted_unallocated_bytes),
            if plan.predicted_to_reach_goal {
                ", goal reached"
            } else {
                ", short of the goal"
            }
        ));
    }
    for n in &plan.notes {
        t.push_str(&format!("  note: {n}\n"));
    }
    t
}

fn render_result(r: &ReclaimResult, plan: &ReclaimPlan, out: &Output) -> u8 {
    let m = plan.mount_point.display();
    let gained = r.unallocated_after as i128 - r.unallocated_before as i128;
    let summary = format!(
        "unallocated {} → {} ({}{})",
        size(r.unallocated_before),
        size(r.unallocated_after),
        if gained < 0 { "-" } else { "+" },
        size(gained.unsigned_abs() as u64)
    );
    match r.outcome {
        ReclaimOutcome::Reached => {
            out.status(&format!(
                "{} {summary}: the goal is reached ({})\n",
                out.paint.good("done:"),
                goal_words(&r.goal)
            ));
            exit::OK
        }
        ReclaimOutcome::NotReached => {
            out.warning_with_hint(
                &format!("{summary}: every step ran and the goal ({}) is not reached", goal_words(&r.goal)),
                &format!("add a device (btrfs-lab device add {m} NEW_DEVICE), delete files and the snapshots that hold them, or allow fuller chunks (--max-usage)"),
            );
            GOAL_NOT_REACHED.code
        }
        ReclaimOutcome::NoSpace => {
            out.warning_with_hint(
                &format!("{summary}: a step ran out of space (ENOSPC) while relocating; what was relocated stays relocated, data is intact"),
                &format!("add a device (btrfs-lab device add {m} NEW_DEVICE) or delete files, then run the same reclaim again"),
            );
            GOAL_NOT_REACHED.code
        }
        ReclaimOutcome::Interrupted => {
            out.warning_with_hint(
                &format!("{summary}: stopped after the current chunk; data is intact"),
                &format!(
                    "run the same command again to go on: btrfs-lab reclaim {m}{}",
                    reclaim_args(plan)
                ),
            );
            exit::INTERRUPTED
        }
        ReclaimOutcome::Cancelled => {
            out.warning_with_hint(
                &format!("{summary}: the balance was cancelled by someone else; data is intact"),
                &format!(
                    "run the same command again to go on: btrfs-lab reclaim {m}{}",
                    reclaim_args(plan)
                ),
            );
            exit::ERROR
        }
    }
}

/// The options that make the same run again.
fn reclaim_args(plan: &ReclaimPlan) -> String {
    let mut s = String::new();
    if let Goal::Unallocated { bytes } = plan.goal {
        s.push_str(&format!(" --goal {bytes}"));
    }
    if plan.max_usage != 90 {
        s.push_str(&format!(" --max-usage {}", plan.max_usage));
    }
    if plan.metadata {
        s.push_str(" --with-metadata");
    }
    s
}
