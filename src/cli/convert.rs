//! `btrfs-lab convert MOUNT --data P --metadata P` and
//! `convert MOUNT --status | --pause | --resume | --cancel`.

use std::path::{Path, PathBuf};

use btrfs_lab::convert::operation::{Convert, Resumable, Resume, look};
use btrfs_lab::convert::report::{BalanceKind, CancelReport, StatusReport};
use btrfs_lab::convert::{ConvertPlan, ConvertRequest, Finished, manage};
use btrfs_lab::error::{Result, exit};
use btrfs_lab::model::profile::Profile;
use btrfs_lab::operation::{self, DRY_RUN, View};
use btrfs_lab::report::text::fit;
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::kernel::signals;
use btrfs_lab::ui::Ui;
use clap::Args;

use super::output::{ConfirmArgs, Output, confirm};
use super::units::{DATA_HELP, METADATA_HELP, UnitArgs, profiles, size};

/// `--status`, `--pause`, `--resume`, `--cancel` of a balance (convert's,
/// balance's): one meaning each.
#[derive(Debug, Args)]
pub struct ManageArgs {
    /// Show the running (or paused, or last) operation and exit.
    #[arg(long, conflicts_with_all = ["pause", "resume", "cancel"])]
    pub status: bool,
    /// Pause the running balance after the current chunk.
    #[arg(long, conflicts_with_all = ["resume", "cancel"])]
    pub pause: bool,
    /// Continue the paused or interrupted operation.
    #[arg(long, conflicts_with = "cancel")]
    pub resume: bool,
    /// Cancel the running operation: what is done stays done (a replace leaves OLD a member).
    #[arg(long)]
    pub cancel: bool,
}

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
    #[command(flatten)]
    manage: ManageArgs,
    #[command(flatten)]
    confirm: ConfirmArgs,
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
    if a.manage.status || a.manage.pause || a.manage.cancel {
        return manage_running(&a, out);
    }
    let confirm = a.confirm.into();
    if a.manage.resume {
        let mut op = Resume::new(a.mount, a.background);
        return operation::run(&mut op, confirm, out, &Text(out));
    }
    let req = ConvertRequest {
        data: a.data,
        metadata: a.metadata,
        force: a.force,
    };
    let mut op = Convert::new(a.mount, req, a.background);
    operation::run(&mut op, confirm, out, &Text(out))
}

/// `--status`, `--pause` and `--cancel`: on the filesystem held.
fn manage_running(a: &ConvertArgs, out: &Output) -> Result<u8> {
    let root = SysRoot::host();
    if a.manage.status {
        let st = manage::status(&root, &a.mount)?;
        out.report(&st, |st| render_status(st, out));
        return Ok(exit::OK);
    }
    operation::need_root("converting profiles needs root")?;
    if a.manage.pause {
        return pause(&root, &a.mount, "convert", &look, out);
    }
    cancel(
        &root,
        &a.mount,
        a.confirm,
        "cancel the balance: chunks already converted stay converted, the rest keeps its old profile (mixed profiles until a convert finishes)",
        &look,
        out,
    )
}

/// convert's plans and results as text.
struct Text<'a>(&'a Output);

impl View<Convert> for Text<'_> {
    fn plan(&self, plan: &ConvertPlan) -> String {
        render_plan(plan, self.0)
    }
    fn result(&self, plan: &ConvertPlan, finished: &Finished) {
        say_finished(finished, &plan.mount_point, self.0);
    }
}

impl View<Resume> for Text<'_> {
    fn plan(&self, plan: &Resumable) -> String {
        fit(&format!(
            "Resume the paused balance on {}: {}, {} left to convert\n",
            plan.mount_point.display(),
            plan.targets.describe(),
            size(plan.plan.bytes_remaining)
        ))
    }
    fn result(&self, plan: &Resumable, finished: &Finished) {
        say_finished(finished, &plan.mount_point, self.0);
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
            "  {:<9} {:<7} → {:<7} {} allocated, {} used\n",
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
    // The command on a line of its own: never broken.
    t.push_str(&format!(
        "  runs the BALANCE_V2 ioctl, as:\n    {}\n",
        btrfs_lab::sys::tools::display_argv(&plan.equivalent_command)
    ));
    t.push_str("  chunks already in the target profile are skipped (soft), so running it again finishes what is left\n");
    for r in &plan.risks {
        t.push_str(&format!("{} {r}\n", p.bad("RISK:")));
    }
    for w in &plan.warnings {
        t.push_str(&format!("{} {w}\n", p.warn("WARNING:")));
    }
    fit(&t)
}

/// Says how a conversion finished (a cancelled one is the run's error).
pub fn say_finished(finished: &Finished, mount_point: &Path, out: &Output) {
    let m = mount_point.display();
    match finished {
        Finished::Completed {
            records,
            bytes,
            elapsed,
        } => {
            out.status(&fit(&format!(
                "{} {} converted in {:.0} s; every type is in its target profile:\n{}",
                out.paint.good("done:"),
                size(*bytes),
                elapsed.as_secs_f64(),
                super::df::render_records(records, Default::default())
            )));
        }
        Finished::Paused { bytes_remaining: 0 } => {
            out.warning_with_hint(
                "the conversion is paused with no data left to move (its last chunk finished as it paused); data is intact",
                &format!("let the kernel finish it with: btrfs-lab convert {m} --resume (running the same convert again also resumes it); or cancel it with: btrfs-lab convert {m} --cancel"),
            );
        }
        Finished::Paused { bytes_remaining } => {
            out.warning_with_hint(
                &format!("the conversion is paused with {} left to convert; data is intact", size(*bytes_remaining)),
                &format!("resume it with: btrfs-lab convert {m} --resume (running the same convert again also resumes it); or cancel it with: btrfs-lab convert {m} --cancel"),
            );
        }
        Finished::Cancelled => {}
    }
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
                    "  resume with:\n    btrfs-lab convert {} --resume\n",
                    st.mount_point.display()
                ));
            }
        }
    }
    fit(&t)
}

/// `--pause` of `command` (`convert`, `balance`): the running balance
/// paused after its current chunk; `look` says where it is seen.
pub fn pause(
    root: &SysRoot,
    mount: &Path,
    command: &str,
    look: &dyn Fn(&Path) -> String,
    out: &Output,
) -> Result<u8> {
    out.before_change(look(mount))?;
    let (done, state) = manage::pause(root, mount)?;
    let m = state.mount_point.display();
    out.report(&done.report(), |_| {
        let already = if done == manage::Paused::Already {
            "already paused"
        } else {
            "paused"
        };
        format!("{already}; resume with:\n  btrfs-lab {command} {m} --resume\n")
    });
    Ok(exit::OK)
}

/// `--cancel` (convert's, balance's), asked first: `what` it does.
pub fn cancel(
    root: &SysRoot,
    mount: &Path,
    ask: ConfirmArgs,
    what: &str,
    look: &dyn Fn(&Path) -> String,
    out: &Output,
) -> Result<u8> {
    let (fs, _state) = manage::prepare_cancel(root, mount)?;
    if ask.dry_run {
        out.text(&format!("would {what}\n{DRY_RUN}"));
        return Ok(exit::OK);
    }
    out.say(&format!("This will {what}.\n"));
    confirm(out, "Cancel the balance?", ask.yes)?;
    out.before_change(look(mount))?;
    manage::cancel(&fs, mount)?;
    out.report(&CancelReport { cancelled: true }, |_| {
        "cancelled\n".to_owned()
    });
    Ok(exit::OK)
}

use super::page::{BAD, NOT_WRITTEN, Row, row};
use btrfs_lab::model::exit as status;

/// Its exit statuses (device add --then-convert shares them).
pub const EXITS: &[Row] = &[
    row(
        status::OK,
        "done (--background: the detached balance runs).",
    ),
    row(
        status::ERROR,
        "refused or failed; nothing was changed (a path that leads to another filesystem than \
         the one planned on is refused).",
    ),
    BAD,
    NOT_WRITTEN,
    row(
        status::INTERRUPTED,
        "SIGINT, SIGTERM or SIGHUP: the balance is paused, never cancelled; `convert MOUNT \
         --resume` continues it.",
    ),
];

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["convert"],
    documents: &[
        "convert-record",
        "convert-status",
        "convert-pause",
        "convert-cancel",
        "error",
    ],
    dry_run: true,
    output: super::page::Shape::Lines,
    exits: EXITS,
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
