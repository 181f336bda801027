//! `btrfs-lab reclaim MOUNT`: give little-used data chunks back to the
//! unallocated pool, step by step, plan first.

use std::path::PathBuf;

use btrfs_lab::error::{Error, Result};
use btrfs_lab::operation::{self, View};
use btrfs_lab::reclaim::operation::Reclaim;
use btrfs_lab::reclaim::{Goal, ReclaimOutcome, ReclaimPlan, ReclaimRequest, ReclaimResult};
use btrfs_lab::sys::fs::state::STATE_DIR;
use btrfs_lab::sys::kernel::signals;
use btrfs_lab::ui::Ui;
use clap::Args;

use super::output::{ConfirmArgs, Output};
use super::units::{UnitArgs, size, size_arg};
use btrfs_lab::report::text::fit;

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
    #[command(flatten)]
    confirm: ConfirmArgs,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(a: ReclaimArgs, out: &Output, state_dir: Option<PathBuf>) -> Result<u8> {
    // Until the first balance starts a signal exits at once (nothing was
    // changed); from then on it cancels the running step.
    signals::install_pausable()?;
    a.units.select();
    if a.goal == Some(0) {
        return Err(Error::usage("--goal must be larger than 0"));
    }
    let request = ReclaimRequest {
        goal_bytes: a.goal,
        max_usage: a.max_usage,
        metadata: a.metadata,
    };
    let state_dir = state_dir.unwrap_or_else(|| PathBuf::from(STATE_DIR));
    let mut op = Reclaim::new(a.mount, request, &state_dir);
    operation::run(&mut op, a.confirm.into(), out, &Text(out))
}

/// reclaim's plan and result as text.
struct Text<'a>(&'a Output);

impl View<Reclaim> for Text<'_> {
    fn plan(&self, plan: &ReclaimPlan) -> String {
        fit(&render_plan(plan, self.0))
    }
    fn result(&self, plan: &ReclaimPlan, result: &ReclaimResult) {
        render_result(result, plan, self.0);
    }
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
        // The command on a line of its own: never broken.
        t.push_str(&format!(
            "  - {} chunk{} {}: {} to move → about {} unallocated\n    {}\n",
            s.chunks,
            if s.chunks == 1 { "" } else { "s" },
            if s.usage == 0 {
                "empty".to_owned()
            } else {
                format!("below {}%", s.usage)
            },
            size(s.moves_bytes),
            size(plan.unallocated_bytes + s.frees_raw_bytes),
            btrfs_lab::sys::tools::display_argv(&s.command),
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

fn render_result(r: &ReclaimResult, plan: &ReclaimPlan, out: &Output) {
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
            out.status(&fit(&format!(
                "{} {summary}: the goal is reached ({})\n",
                out.paint.good("done:"),
                goal_words(&r.goal)
            )));
        }
        ReclaimOutcome::NotReached => {
            out.warning_with_hint(
                &format!("{summary}: every step ran and the goal ({}) is not reached", goal_words(&r.goal)),
                &format!("add a device (btrfs-lab device add {m} NEW_DEVICE), delete files and the snapshots that hold them, or allow fuller chunks (--max-usage)"),
            );
        }
        ReclaimOutcome::NoSpace => {
            out.warning_with_hint(
                &format!("{summary}: a step ran out of space (ENOSPC) while relocating; what was relocated stays relocated, data is intact"),
                &format!("add a device (btrfs-lab device add {m} NEW_DEVICE) or delete files, then run the same reclaim again"),
            );
        }
        ReclaimOutcome::Interrupted => {
            out.warning_with_hint(
                &format!("{summary}: stopped after the current chunk; data is intact"),
                &format!(
                    "run the same command again to go on: btrfs-lab reclaim {m}{}",
                    reclaim_args(plan)
                ),
            );
        }
        ReclaimOutcome::Cancelled => {
            out.warning_with_hint(
                &format!("{summary}: the balance was cancelled by someone else; data is intact"),
                &format!(
                    "run the same command again to go on: btrfs-lab reclaim {m}{}",
                    reclaim_args(plan)
                ),
            );
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

use super::page::{BAD, NOT_WRITTEN, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["reclaim"],
    documents: &["reclaim-record", "error"],
    dry_run: true,
    output: super::page::Shape::Lines,
    exits: &[
        row(
            status::OK,
            "the goal is reached (or was already): the unallocated space the plan showed.",
        ),
        row(
            status::ERROR,
            "refused or failed: not root, not a btrfs, read-only, a missing device, a \
             balance or another exclusive operation running; nothing was changed (a \
             kernel failure mid-way: what was relocated stays relocated).",
        ),
        BAD,
        NOT_WRITTEN,
        row(
            status::GOAL_NOT_REACHED,
            "goal-not-reached: every step ran, a step ran out of space, or no chunk is \
             used little enough; what was freed stays freed; add a device or delete files.",
        ),
        row(
            status::INTERRUPTED,
            "interrupted by SIGINT, SIGTERM or SIGHUP: the balance was cancelled after its \
             current chunk; what was freed stays freed; the same command goes on.",
        ),
    ],
    examples: &[
        (
            "The plan only: each step, the data it moves, the room it leaves.",
            "btrfs-lab reclaim --dry-run /mnt/data",
        ),
        (
            "Make room for a metadata chunk without asking.",
            "btrfs-lab reclaim --yes /mnt/data",
        ),
        (
            "Free 20 GiB of unallocated space, relocating chunks up to 50% used.",
            "btrfs-lab reclaim --yes /mnt/data --goal 20G --max-usage 50",
        ),
    ],
    see_also: &["btrfs-balance(8)"],
}];
