//! `btrfs-lab device add MOUNT DEVICE...`.

use std::path::PathBuf;

use btrfs_lab::convert::report::{ConvertRecord, PlanDoc};
use btrfs_lab::convert::{ConvertRequest, Start};
use btrfs_lab::device::add::{self, AddOptions, AddPlan, AddResult};
use btrfs_lab::device::add::{AddReport, Ceiling, Throughput};
use btrfs_lab::device::remove::{
    self, RemoveEnd, RemovePlan, RemoveReport, RemoveSpec, RemoveStopped,
};
use btrfs_lab::device::replace::{
    self, OldSpec, ReadFrom, ReplaceDetached, ReplaceEnd, ReplaceOptions, ReplacePlan,
    ReplaceReport, ReplaceStateName, ScrubAfter,
};
use btrfs_lab::device::started::StartedStore;
use btrfs_lab::error::{Error, ErrorKind, Result, exit};
use btrfs_lab::model::profile::Profile;
use btrfs_lab::operation::hooks;
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::kernel::signals;
use btrfs_lab::sys::tools::display_argv;
use clap::{Args, Subcommand};

use super::convert::{execute, refuse_if_blocked, render_plan};
use super::output::{Output, confirm};
use super::units::{UnitArgs, profiles, size};
use btrfs_lab::ui::{self, Ui};

/// Done, but chunks lack their redundancy or blocks were lost.
const NOT_REDUNDANT: u8 = btrfs_lab::model::exit::NOT_REDUNDANT.code;

#[derive(Debug, Args)]
pub struct DeviceArgs {
    #[command(subcommand)]
    command: DeviceCommand,
}

#[derive(Debug, Subcommand)]
enum DeviceCommand {
    /// Add devices to a mounted btrfs, once they are checked safe to use.
    Add(AddArgs),
    /// Replace a failing, missing or old member by a new device.
    Replace(ReplaceArgs),
    /// Remove members, moving their data to the devices that stay.
    Remove(RemoveArgs),
}

/// A device named on the command line: never empty (an empty argument,
/// as from an unset shell variable, is a usage error, not a device).
fn named(s: &str) -> std::result::Result<String, String> {
    if s.is_empty() {
        Err("an empty name is not a device: give a path (/dev/...) or a devid".to_owned())
    } else {
        Ok(s.to_owned())
    }
}

fn named_path(s: &str) -> std::result::Result<PathBuf, String> {
    if s.is_empty() {
        Err("an empty name is not a device: give its path (/dev/...)".to_owned())
    } else {
        Ok(PathBuf::from(s))
    }
}

#[derive(Debug, Args)]
struct ReplaceArgs {
    /// A path inside the mounted btrfs.
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    /// The member to replace: its devid (the only way to name a missing one) or its path.
    #[arg(value_name = "OLD", required_unless_present_any = ["status", "cancel"], value_parser = named)]
    old: Option<String>,
    /// The new block device (at least OLD's size).
    #[arg(value_name = "NEW", required_unless_present_any = ["status", "cancel"], value_parser = named_path)]
    new: Option<PathBuf>,
    /// Overwrite devices that carry filesystem or partition-table signatures
    /// (the plan names what is destroyed).
    #[arg(long, alias = "force")]
    overwrite: bool,
    /// Where the copy reads from: auto (other copies when OLD has read errors), others, old.
    #[arg(long, value_enum, default_value_t = ReadFromArg::Auto, value_name = "WHERE")]
    read_from: ReadFromArg,
    /// Leave NEW at OLD's size instead of growing it to its own.
    #[arg(long)]
    no_resize: bool,
    /// After the replace, scrub the new device (reads every block it holds against its checksum).
    #[arg(long)]
    scrub: bool,
    /// Show the running (or paused, or last) operation and exit.
    #[arg(long, conflicts_with_all = ["cancel", "old", "new", "dry_run"])]
    status: bool,
    /// Cancel the running operation: what is done stays done (a replace leaves OLD a member).
    #[arg(long, conflicts_with_all = ["old", "new"])]
    cancel: bool,
    /// Show the plan and do nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    units: UnitArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ReadFromArg {
    Auto,
    Others,
    Old,
}

#[derive(Debug, Args)]
struct RemoveArgs {
    /// A path inside the mounted btrfs.
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    /// Members to remove: devids, paths, or `missing` (the devices that are not there).
    #[arg(value_name = "DEV", required = true, value_parser = named)]
    devices: Vec<String>,
    /// Show the plan and do nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    units: UnitArgs,
}

#[derive(Debug, Args)]
struct AddArgs {
    /// A path inside the mounted btrfs.
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    /// Block devices to add.
    #[arg(value_name = "DEVICE", required = true, value_parser = named_path)]
    devices: Vec<PathBuf>,
    /// Overwrite devices that carry filesystem or partition-table signatures
    /// (the plan names what is destroyed).
    #[arg(long, alias = "force")]
    overwrite: bool,
    /// Do not TRIM the new devices.
    #[arg(long)]
    nodiscard: bool,
    /// Then convert profiles (needs --data and/or --metadata).
    #[arg(long)]
    then_convert: bool,
    /// With --then-convert: data profile: single, dup, raid0, raid1, raid1c3, raid1c4, raid10, raid5, raid6.
    #[arg(long, value_parser = profiles(), hide_possible_values = true, value_name = "PROFILE", requires = "then_convert")]
    data: Option<Profile>,
    /// With --then-convert: metadata profile, as --data (system chunks follow it).
    #[arg(long, value_parser = profiles(), hide_possible_values = true, value_name = "PROFILE", requires = "then_convert")]
    metadata: Option<Profile>,
    /// Show the plan and do nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(args: DeviceArgs, out: &Output, state_dir: Option<PathBuf>) -> Result<u8> {
    // What replace and remove started is recorded there (a re-run ties
    // "already done" to it).
    let started =
        StartedStore::new(&state_dir.unwrap_or_else(|| PathBuf::from(btrfs_lab::scrub::STATE_DIR)));
    match args.command {
        DeviceCommand::Add(a) => add(a, out),
        DeviceCommand::Replace(a) => replace(a, out, &started),
        DeviceCommand::Remove(a) => remove(a, out, &started),
    }
}

/// Every reason at once. Each reason `--overwrite` lifts says so itself;
/// when another reason stands anyway, that offer is left out (it would not
/// help) and the hint says what `--overwrite` cannot lift.
fn refused(what: &str, refusals: &[btrfs_lab::device::preflight::Reason]) -> Error {
    let all_liftable = refusals.iter().all(|r| r.force_overrides);
    let mut messages: Vec<String> = refusals
        .iter()
        .map(|r| {
            if all_liftable || !r.force_overrides {
                r.message.clone()
            } else {
                without_overwrite_offer(&r.message)
            }
        })
        .collect();
    let first = messages.remove(0);
    let mut e = Error::new(ErrorKind::Refused, format!("cannot {what}: {first}"));
    let mut hint: Vec<String> = messages.iter().map(|m| format!("also: {m}")).collect();
    if !all_liftable && refusals.iter().any(|r| r.force_overrides) {
        let stands: Vec<&str> = refusals
            .iter()
            .filter(|r| !r.force_overrides)
            .map(|r| r.code.as_ref())
            .collect();
        hint.push(format!(
            "--overwrite would not help: it never lifts {}",
            stands.join(", ")
        ));
    }
    if !hint.is_empty() {
        e = e.with_hint(hint.join("; "));
    }
    e
}

/// A reason's sentence without its "; --overwrite ..." offer.
fn without_overwrite_offer(message: &str) -> String {
    match message
        .find("; --overwrite")
        .or_else(|| message.find(", or --overwrite"))
    {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

fn render_replace(plan: &ReplacePlan, out: &Output) -> String {
    let p = out.paint;
    let mut t = String::new();
    match (&plan.old, &plan.new) {
        (Some(o), Some(n)) => t.push_str(&format!(
            "{} device {} ({}, {}) with {} ({}) on {}\n",
            p.bold(if plan.following {
                "Follow: replace of"
            } else {
                "Plan: replace"
            }),
            o.devid,
            if o.missing {
                "missing".to_owned()
            } else {
                o.path.clone()
            },
            size(o.size),
            n.path.display(),
            size(n.size),
            plan.mount_point.display()
        )),
        _ => t.push_str(&format!(
            "{} on {}\n",
            p.bold("Plan: replace"),
            plan.mount_point.display()
        )),
    }
    t.push_str(&format!(
        "  copies  {} of chunks{}\n",
        size(plan.bytes_to_copy),
        if plan.read_from_others {
            ", read from the other copies where they exist (-r)"
        } else {
            ""
        }
    ));
    for h in &plan.on_old {
        t.push_str(&format!(
            "          {} {} {}{}\n",
            size(h.bytes),
            h.kind.json_name(),
            h.profile.name(),
            if h.other_copy {
                ""
            } else {
                "  (no other copy)"
            }
        ));
    }
    if let Some(n) = &plan.new {
        for s in &n.wipes {
            t.push_str(&format!(
                "  {} {} signature on {} at {}\n",
                p.bad("destroys"),
                s.kind,
                n.path.display(),
                s.offset
            ));
        }
    }
    runs_and_notes(&mut t, &plan.commands, &plan.notes);
    t
}

/// A plan's commands (`runs:`) and notes, as every device plan shows them.
fn runs_and_notes(t: &mut String, commands: &[Vec<String>], notes: &[String]) {
    if !commands.is_empty() {
        t.push_str("  runs:\n");
        for c in commands {
            t.push_str(&format!("    {}\n", display_argv(c)));
        }
    }
    for note in notes {
        t.push_str(&format!("  - {note}\n"));
    }
}

/// The redundancy verdict after a replace or remove.
fn render_redundancy(
    t: &mut String,
    r: &btrfs_lab::device::redundancy::RedundancyCheck,
    out: &Output,
) {
    let p = out.paint;
    if r.ok {
        t.push_str("  verified: every chunk has its profile's copies, on devices that are there\n");
        return;
    }
    for w in &r.weak {
        t.push_str(&format!(
            "  {} {} {} chunk(s) of {} ({}) {}\n",
            p.bad("not redundant:"),
            w.chunks,
            w.kind.json_name(),
            w.profile.name(),
            size(w.bytes),
            if w.reason == "missing-device" {
                "have a stripe on a missing device"
            } else {
                "have fewer copies than the rest of their type (written while degraded?)"
            }
        ));
    }
    if let Some(f) = &r.fix {
        t.push_str(&format!(
            "  fix: {} (converts only those chunks)\n",
            display_argv(f)
        ));
    }
}

fn replace(a: ReplaceArgs, out: &Output, started: &StartedStore) -> Result<u8> {
    signals::install_pausable()?;
    a.units.select();
    let root = SysRoot::host();
    if a.status {
        let (fs, state) = replace::open(&root, &a.mount)?;
        let st = replace::status_of(&fs, &state.mount_point)?;
        out.report(&st, |s| {
            let mut t = format!("replace on {}: {}", s.mount_point.display(), match s.state {
                ReplaceStateName::NeverStarted => "none since the mount".to_owned(),
                ReplaceStateName::Running => format!("running, {:.1}% of the old device's size passed", s.device_permille as f64 / 10.0),
                ReplaceStateName::Finished => "the last one finished".to_owned(),
                ReplaceStateName::Cancelled => "the last one was cancelled".to_owned(),
                ReplaceStateName::Suspended => "suspended (it continues at the next mount)".to_owned(),
            });
            if let Some(tg) = &s.target {
                t.push_str(&format!(", onto {tg}"));
            }
            t.push('\n');
            if s.write_errors + s.uncorrectable_read_errors > 0 {
                t.push_str(&format!(
                    "  errors: {} write, {} uncorrectable read (blocks no copy could be read of: their files are damaged)\n",
                    s.write_errors, s.uncorrectable_read_errors
                ));
            }
            t
        });
        return Ok(exit::OK);
    }
    if a.cancel {
        let (fs, state) = replace::open(&root, &a.mount)?;
        let st = replace::status_of(&fs, &state.mount_point)?;
        if st.state != ReplaceStateName::Running {
            return Err(Error::new(
                ErrorKind::State,
                format!("no replace is running on {}", state.mount_point.display()),
            ));
        }
        if a.dry_run {
            out.status(&format!(
                "would cancel the replace on {} (the old device stays a member, unchanged)\n(dry run: nothing was done)\n",
                state.mount_point.display()
            ));
            return Ok(exit::OK);
        }
        out.status(&format!(
            "The replace on {} is {:.1}% through; cancelling it throws the copy away (the old device stays a member).\n",
            state.mount_point.display(),
            st.device_permille as f64 / 10.0
        ));
        confirm(out, "Cancel the replace?", a.yes)?;
        out.before_change(format!(
            "btrfs-lab device replace {} --status",
            state.mount_point.display()
        ))?;
        let was = replace::cancel(&fs, &a.mount)?;
        let st = replace::status_of(&fs, &state.mount_point)?;
        out.report(&st, |_| {
            if was {
                "cancelled: the old device is still a member\n".to_owned()
            } else {
                "nothing to cancel: the replace had ended\n".to_owned()
            }
        });
        return Ok(exit::OK);
    }
    let (Some(old), Some(new)) = (a.old.as_deref(), a.new.as_deref()) else {
        return Err(Error::usage("give OLD and NEW (or --status, --cancel)"));
    };
    let opts = ReplaceOptions {
        overwrite: a.overwrite,
        read_from: match a.read_from {
            ReadFromArg::Auto => ReadFrom::Auto,
            ReadFromArg::Others => ReadFrom::Others,
            ReadFromArg::Old => ReadFrom::Old,
        },
        no_resize: a.no_resize,
    };
    let (fs, _state, plan) =
        replace::prepare(&root, &a.mount, &OldSpec::parse(old), new, opts, started)?;
    let doc = ReplaceReport {
        plan: plan.clone(),
        result: None,
        detached: None,
    };
    if !plan.refusals.is_empty() {
        out.report(&doc, |_| String::new());
        return Err(refused("replace", &plan.refusals));
    }
    if a.dry_run {
        out.report(&doc, |p| render_replace(&p.plan, out));
        out.status("(dry run: nothing was done)\n");
        return Ok(exit::OK);
    }
    out.status(&render_replace(&plan, out));
    if !plan.following {
        confirm(out, "Replace the device?", a.yes)?;
    }
    hooks::pause_point("device-replace-confirmed");
    fs.check_path_still_here(&a.mount)?;
    out.before_change(format!("btrfs-lab show {}", plan.mount_point.display()))?;
    let signals = signals::begin_operation()?;
    out.started();
    let mut track = btrfs_lab::ui::Track::new(out, "device-replace", "replacing");
    let end = replace::execute_replace(&fs, &plan, started, &signals, &mut |p| {
        track.show(&p.reading(), None);
    });
    track.finish();
    match end? {
        ReplaceEnd::Detached { signal, progress } => {
            let m = plan.mount_point.display();
            let done = ReplaceReport {
                plan: plan.clone(),
                result: None,
                detached: Some(ReplaceDetached {
                    signal: signal.to_owned(),
                    progress,
                }),
            };
            out.report_line(&done, |_| String::new());
            Err(Error::new(
                ErrorKind::Interrupted,
                format!("{signal}: left the replace running in the kernel{}", progress.map_or(String::new(), |p| format!(" ({} of {} copied)", size(p.bytes_done), size(p.bytes_total)))),
            )
            .with_hint(format!(
                "follow it: btrfs-lab device replace {m} --status; stop it: --cancel; the same command again follows it and then resizes and verifies"
            )))
        }
        ReplaceEnd::Done(r) => {
            let mut code = exit::OK;
            let mut scrubbed = None;
            let done = ReplaceReport {
                plan: plan.clone(),
                result: Some(r.clone()),
                detached: None,
            };
            if a.scrub && !r.path.is_empty() {
                out.say(&format!(
                    "scrubbing the new device: {}\n",
                    display_argv(&r.scrub_command)
                ));
                hooks::pause_point("device-replace-scrubbing");
                scrubbed = Some(match replace::scrub_new(&r, &signals)? {
                    ScrubAfter::Clean => Ok(()),
                    ScrubAfter::Failed(e) => Err(e),
                    ScrubAfter::Interrupted(signal) => {
                        out.report_line(&done, |_| String::new());
                        return Err(scrub_interrupted(signal, &r));
                    }
                });
            }
            out.report_line(&done, |_| {
                let p = out.paint;
                let mut t = format!(
                    "{} device {} is now {} ({}), in {:.0} s\n",
                    p.good("replaced:"),
                    r.devid,
                    r.path,
                    size(r.size),
                    r.seconds
                );
                if r.write_errors + r.uncorrectable_read_errors > 0 {
                    t.push_str(&format!(
                        "  {} {} write error(s), {} block(s) no copy could be read of: the files holding them are damaged (dmesg names them)\n",
                        p.bad("errors:"),
                        r.write_errors,
                        r.uncorrectable_read_errors
                    ));
                }
                render_redundancy(&mut t, &r.redundancy, out);
                match &scrubbed {
                    Some(Ok(())) => t.push_str("  scrub of the new device: clean\n"),
                    Some(Err(e)) => t.push_str(&format!("  scrub of the new device failed: {}\n", e.message())),
                    None => t.push_str(&format!("  next: scrub the new device: {}\n", display_argv(&r.scrub_command))),
                }
                t
            });
            if !r.redundancy.ok
                || r.uncorrectable_read_errors > 0
                || matches!(scrubbed, Some(Err(_)))
            {
                code = NOT_REDUNDANT;
            }
            Ok(code)
        }
    }
}

/// A signal during `--scrub`: the replace is done and verified, the scrub
/// was cancelled; how to run it again.
fn scrub_interrupted(signal: &str, r: &btrfs_lab::device::replace::ReplaceResult) -> Error {
    Error::new(
        ErrorKind::Interrupted,
        format!(
            "{signal}: the replace is done (device {} is now {}, verified); the scrub of it was cancelled",
            r.devid, r.path
        ),
    )
    .with_hint(format!(
        "continue the scrub where it stopped: btrfs scrub resume -B {}; or scrub it anew: {}",
        r.path,
        display_argv(&r.scrub_command)
    ))
}

fn render_remove(plan: &RemovePlan, out: &Output) -> String {
    let p = out.paint;
    let mut t = format!(
        "{} {} device{} from {}\n",
        p.bold("Plan: remove"),
        plan.devices.len(),
        if plan.devices.len() == 1 { "" } else { "s" },
        plan.mount_point.display()
    );
    for (i, d) in plan.devices.iter().enumerate() {
        t.push_str(&format!(
            "  {}. device {} ({}): {} on it, about {} to move\n",
            i + 1,
            d.devid,
            if d.path.is_empty() {
                "missing"
            } else {
                &d.path
            },
            size(d.allocated),
            size(d.expected_move)
        ));
    }
    t.push_str(&format!(
        "  stay: device{} {}\n",
        if plan.remaining.len() == 1 { "" } else { "s" },
        plan.remaining
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    runs_and_notes(&mut t, &plan.commands, &plan.notes);
    t
}

fn remove(a: RemoveArgs, out: &Output, started: &StartedStore) -> Result<u8> {
    signals::install_pausable()?;
    a.units.select();
    let root = SysRoot::host();
    let specs: Vec<RemoveSpec> = a.devices.iter().map(|d| RemoveSpec::parse(d)).collect();
    let (fs, _state, plan) = remove::prepare(&root, &a.mount, &specs, started)?;
    let doc = RemoveReport {
        plan: plan.clone(),
        result: None,
        stopped: None,
    };
    if !plan.refusals.is_empty() {
        out.report(&doc, |_| String::new());
        return Err(refused("remove", &plan.refusals));
    }
    if let Some(done) = plan.nothing_to_do() {
        out.report(&doc, |_| format!("{done}\n"));
        return Ok(exit::OK);
    }
    if a.dry_run {
        out.report(&doc, |p| render_remove(&p.plan, out));
        out.status("(dry run: nothing was done)\n");
        return Ok(exit::OK);
    }
    out.status(&render_remove(&plan, out));
    confirm(
        out,
        if plan.devices.len() == 1 {
            "Remove the device?"
        } else {
            "Remove the devices?"
        },
        a.yes,
    )?;
    hooks::pause_point("device-remove-confirmed");
    fs.check_path_still_here(&a.mount)?;
    out.before_change(format!("btrfs-lab show {}", plan.mount_point.display()))?;
    let signals = signals::begin_operation()?;
    out.started();
    let mut track = btrfs_lab::ui::Track::new(out, "device-remove", "removing");
    let end = remove::execute_remove(&fs, &plan, started, &signals, &mut |p| {
        track.show(&p.reading(), Some(&p.step()));
    });
    track.finish();
    match end? {
        RemoveEnd::Stopped {
            signal,
            removed,
            devid,
            bytes_left,
        } => {
            let done = RemoveReport {
                plan: plan.clone(),
                result: None,
                stopped: Some(RemoveStopped {
                    signal: signal.to_owned(),
                    removed: removed.clone(),
                    devid,
                    bytes_left,
                }),
            };
            out.report_line(&done, |_| String::new());
            Err(Error::new(
                ErrorKind::Interrupted,
                format!(
                    "{signal}: stopped; device {devid} is still a member ({} left on it){}",
                    size(bytes_left),
                    if removed.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; removed before it: {}",
                            removed
                                .iter()
                                .map(|r| r.devid.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                ),
            )
            .with_hint("the filesystem is consistent; the same command again continues"))
        }
        RemoveEnd::Done(r) => {
            let done = RemoveReport {
                plan: plan.clone(),
                result: Some(r.clone()),
                stopped: None,
            };
            out.report_line(&done, |_| {
                let p = out.paint;
                let mut t = String::new();
                for d in &r.removed {
                    t.push_str(&format!(
                        "{} device {} ({}), {} moved in {:.0} s\n",
                        p.good("removed:"),
                        d.devid,
                        if d.path.is_empty() {
                            "missing"
                        } else {
                            &d.path
                        },
                        size(d.bytes_moved),
                        d.seconds
                    ));
                }
                t.push_str(&format!(
                    "  {} device{} now: {}\n",
                    r.devices.len(),
                    if r.devices.len() == 1 { "" } else { "s" },
                    r.devices
                        .iter()
                        .map(|d| format!("{} {}", d.devid, d.path))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                render_redundancy(&mut t, &r.redundancy, out);
                t
            });
            Ok(if r.redundancy.ok {
                exit::OK
            } else {
                NOT_REDUNDANT
            })
        }
    }
}

fn render(plan: &AddPlan, out: &Output) -> String {
    let p = out.paint;
    let n = plan.devices.len();
    let mut t = format!(
        "{} {n} device{} to {}\n",
        p.bold("Plan: add"),
        if n == 1 { "" } else { "s" },
        plan.mount_point.display()
    );
    let list = |l: &btrfs_lab::device::add::Layout| {
        l.devices
            .iter()
            .map(|d| {
                format!(
                    "{} {}{}",
                    d.path,
                    size(d.size),
                    if d.new { " (new)" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    t.push_str(&format!(
        "  now     {} raw: {}\n",
        size(plan.before.raw_bytes),
        list(&plan.before)
    ));
    t.push_str(&format!(
        "  after   {} raw: {}\n",
        size(plan.after.raw_bytes),
        list(&plan.after)
    ));
    for d in &plan.devices {
        for s in &d.wipes {
            t.push_str(&format!(
                "  {} {} signature on {} at {}{}\n",
                p.bad("destroys"),
                s.kind,
                d.path.display(),
                s.offset,
                s.label
                    .as_ref()
                    .map_or(String::new(), |l| format!(" (label {l})"))
            ));
        }
        if !d.partitions.is_empty() {
            t.push_str(&format!(
                "  {} the partition table of {} ({})\n",
                p.bad("destroys"),
                d.path.display(),
                d.partitions.join(", ")
            ));
        }
    }
    t.push_str("  runs:\n");
    for c in &plan.commands {
        t.push_str(&format!("    {}\n", display_argv(c)));
    }
    t.push_str(&format!(
        "  throughput ceiling: {}\n",
        plan.throughput.as_ref().map_or(
            "unknown (no PCIe link information for these devices)".to_owned(),
            ceiling_text
        )
    ));
    for note in &plan.notes {
        t.push_str(&format!("  - {note}\n"));
    }
    t
}

fn ceiling_text(v: &Throughput) -> String {
    let gbps = |c: &Ceiling| {
        c.one_reader.map_or("unknown".to_owned(), |r| {
            format!("{:.1} GB/s", r.practical_high_bytes_per_sec as f64 / 1e9)
        })
    };
    let mut t = format!(
        "{} ({}) → {} ({}), practical, one reader",
        gbps(&v.before),
        v.before.profile.name(),
        gbps(&v.after),
        v.after.profile.name()
    );
    if !v.after.held_back_by.is_empty() {
        t.push_str(&format!(
            "; held back by {}",
            v.after.held_back_by.join(", ")
        ));
    }
    t
}

fn add(a: AddArgs, out: &Output) -> Result<u8> {
    // First thing: until the add starts a signal exits at once.
    signals::install_pausable()?;
    a.units.select();
    let root = SysRoot::host();
    if a.then_convert && a.data.is_none() && a.metadata.is_none() {
        return Err(Error::usage(
            "--then-convert needs --data PROFILE, --metadata PROFILE or both",
        ));
    }
    let convert = a.then_convert.then_some(ConvertRequest {
        data: a.data,
        metadata: a.metadata,
        force: a.overwrite,
    });
    let opts = AddOptions {
        force: a.overwrite,
        nodiscard: a.nodiscard,
    };
    let (fs, state, plan) = add::prepare(&root, &a.mount, &a.devices, opts, convert)?;
    // Every device is already a member: what was asked for is there.
    if !a.then_convert
        && let Some(none) = add::nothing_to_add(&state, &plan)
    {
        out.report(&none, |n| {
            n.already_members
                .iter()
                .map(|m| {
                    format!(
                        "nothing to do: {} is already device {} of this filesystem\n",
                        m.path.display(),
                        m.devid
                    )
                })
                .collect()
        });
        return Ok(exit::OK);
    }
    let plan_text = || {
        let mut t = render(&plan, out);
        if let Some(c) = &plan.then_convert {
            t.push_str("then:\n");
            t.push_str(&render_plan(c, out));
        }
        t
    };
    // The plan: a JSON Lines record with --then-convert; otherwise a
    // document now only if the run ends here (a dry run, a refusal); as
    // text unless refused (the refusal is the error line).
    let doc = AddReport {
        plan: plan.clone(),
        result: None,
    };
    if a.then_convert {
        ui::emit(
            out,
            &ConvertRecord::Plan {
                plan: Some(PlanDoc::Add(Box::new(plan.clone()))),
                resume: None,
            },
        );
        if plan.refusals.is_empty() {
            out.status(&plan_text());
        }
    } else if !plan.refusals.is_empty() {
        out.report(&doc, |_| String::new());
    } else if a.dry_run {
        out.report(&doc, |_| plan_text());
    } else {
        out.status(&plan_text());
    }
    if !plan.refusals.is_empty() {
        return Err(refused("add", &plan.refusals));
    }
    if let Some(c) = &plan.then_convert {
        refuse_if_blocked(c, a.overwrite)?;
    }
    if a.dry_run {
        out.status("(dry run: nothing was done)\n");
        return Ok(exit::OK);
    }
    let risky = plan
        .then_convert
        .as_ref()
        .is_some_and(|c| !c.risks.is_empty());
    confirm(
        out,
        if risky {
            "Add the devices and convert, accepting the risk above?"
        } else if a.then_convert {
            "Add the devices and convert?"
        } else {
            "Add the devices?"
        },
        a.yes,
    )?;
    hooks::pause_point("device-add-confirmed");
    fs.check_path_still_here(&a.mount)?;
    out.before_change(format!("btrfs-lab show {}", state.mount_point.display()))?;
    let signals = signals::begin_operation()?;
    out.started();
    let added_text = |r: &AddResult| {
        format!(
            "{} {} device{} now, {} raw\n",
            out.paint.good("added:"),
            r.devices.len(),
            if r.devices.len() == 1 { "" } else { "s" },
            size(r.raw_bytes)
        )
    };
    let replanned = add::add_then_replan(
        &root,
        &fs,
        &state.mount_point,
        &plan,
        convert.as_ref(),
        &signals,
        &mut |result| {
            if a.then_convert {
                out.report_line(
                    &ConvertRecord::Added {
                        result: result.clone(),
                    },
                    |_| added_text(result),
                );
            } else {
                let done = AddReport {
                    plan: plan.clone(),
                    result: Some(result.clone()),
                };
                out.report(&done, |_| added_text(result));
            }
        },
    )?;
    let (Some(req), Some(plan)) = (convert, replanned) else {
        return Ok(exit::OK);
    };
    execute(
        &root,
        &fs,
        &state.mount_point,
        Start::Convert(req, plan.existing),
        req.into(),
        &signals,
        None,
        out,
    )
}

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::man::Declared] = &[
    super::man::Declared {
        words: &["device"],
        examples: &[
            (
                "What adding /dev/nvme2n1 would do.",
                "btrfs-lab device add --dry-run /mnt/data /dev/nvme2n1",
            ),
            (
                "Add it, then convert data to RAID0 and metadata to RAID1.",
                "btrfs-lab device add --then-convert --data raid0 --metadata raid1 /mnt/data /dev/nvme2n1",
            ),
        ],
        see_also: &["btrfs-device(8)", "btrfs-balance(8)"],
    },
    super::man::Declared {
        words: &["device", "add"],
        examples: &[
            (
                "What adding /dev/nvme2n1 would do.",
                "btrfs-lab device add --dry-run /mnt/data /dev/nvme2n1",
            ),
            (
                "Add it, then convert data to RAID0 and metadata to RAID1.",
                "btrfs-lab device add --then-convert --data raid0 --metadata raid1 /mnt/data /dev/nvme2n1",
            ),
        ],
        see_also: &["btrfs-device(8)", "btrfs-balance(8)"],
    },
    super::man::Declared {
        words: &["device", "replace"],
        examples: &[
            (
                "The plan for replacing device 2 (failing, or missing) by /dev/nvme3n1.",
                "btrfs-lab device replace --dry-run /mnt/data 2 /dev/nvme3n1",
            ),
            (
                "Replace it, then scrub the new device; Ctrl-C leaves it running.",
                "btrfs-lab device replace --scrub /mnt/data 2 /dev/nvme3n1",
            ),
            (
                "Where it is.",
                "btrfs-lab device replace /mnt/data --status",
            ),
        ],
        see_also: &["btrfs-device(8)", "btrfs-balance(8)"],
    },
    super::man::Declared {
        words: &["device", "remove"],
        examples: &[
            (
                "The plan (order, space, what moves) for removing two devices.",
                "btrfs-lab device remove --dry-run /mnt/data 3 /dev/nvme4n1",
            ),
            (
                "Drop a device that is gone, on a filesystem mounted -o degraded.",
                "btrfs-lab device remove /mnt/data missing",
            ),
        ],
        see_also: &["btrfs-device(8)", "btrfs-balance(8)"],
    },
];
