//! `btrfs-lab device add MOUNT DEVICE...`.

use std::path::{Path, PathBuf};

use btrfs_lab::balance::operation::Finished as BalanceFinished;
use btrfs_lab::balance::report::BalancePlan;
use btrfs_lab::convert::{ConvertPlan, ConvertRequest, Finished};
use btrfs_lab::device::add::operation::{Add, AddBalancePlan, AddThenBalance, AddThenConvert};
use btrfs_lab::device::add::{AddOptions, AddPlan, AddResult, Ceiling, Throughput};
use btrfs_lab::device::remove::operation::Remove;
use btrfs_lab::device::remove::{RemovePlan, RemoveReport, RemoveResult};
use btrfs_lab::device::replace::operation::{Replace, Replaced};
use btrfs_lab::device::replace::{
    self, ReadFrom, ReplaceOptions, ReplacePlan, ReplaceStateName, ReplaceStatusReport,
};
use btrfs_lab::device::started::StartedStore;
use btrfs_lab::error::{Error, ErrorKind, Result, exit};
use btrfs_lab::model::profile::Profile;
use btrfs_lab::operation::{self, DRY_RUN, View};
use btrfs_lab::report::text::fit;
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::kernel::signals;
use btrfs_lab::sys::tools::display_argv;
use clap::{Args, Subcommand};

use super::convert::{render_plan, say_finished};
use super::output::{ConfirmArgs, Output, confirm};
use super::units::{UnitArgs, profiles, size};
use btrfs_lab::ui::Ui;

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
    #[command(flatten)]
    confirm: ConfirmArgs,
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
    #[command(flatten)]
    confirm: ConfirmArgs,
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
    /// Then spread the data that is there over all devices (btrfs-lab
    /// balance), in the same run.
    #[arg(long, conflicts_with = "then_convert")]
    then_balance: bool,
    /// With --then-convert: data profile: single, dup, raid0, raid1, raid1c3, raid1c4, raid10, raid5, raid6.
    #[arg(long, value_parser = profiles(), hide_possible_values = true, value_name = "PROFILE", requires = "then_convert")]
    data: Option<Profile>,
    /// With --then-convert: metadata profile, as --data (system chunks follow it).
    #[arg(long, value_parser = profiles(), hide_possible_values = true, value_name = "PROFILE", requires = "then_convert")]
    metadata: Option<Profile>,
    #[command(flatten)]
    confirm: ConfirmArgs,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(args: DeviceArgs, out: &Output, state_dir: Option<PathBuf>) -> Result<u8> {
    // What replace and remove started is recorded there (a re-run ties
    // "already done" to it).
    let state_dir = state_dir.unwrap_or_else(|| PathBuf::from(btrfs_lab::scrub::STATE_DIR));
    match args.command {
        DeviceCommand::Add(a) => add(a, out),
        DeviceCommand::Replace(a) => replace(a, out, &state_dir),
        DeviceCommand::Remove(a) => remove(a, out, StartedStore::new(&state_dir)),
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
    t.push_str(&usable_line(&plan.usable));
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
            "  fix (converts only those chunks): {}\n",
            display_argv(f)
        ));
    }
}

fn replace(a: ReplaceArgs, out: &Output, state_dir: &Path) -> Result<u8> {
    signals::install_pausable()?;
    a.units.select();
    if a.status {
        return replace_status(&a.mount, out);
    }
    if a.cancel {
        return replace_cancel(&a.mount, a.confirm, out);
    }
    let (Some(old), Some(new)) = (a.old.as_deref(), a.new) else {
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
    let mut op = Replace::new(a.mount, old, new, opts, a.scrub, state_dir);
    operation::run(&mut op, a.confirm.into(), out, &ReplaceText(out))
}

/// `device replace --status`.
fn replace_status(mount: &Path, out: &Output) -> Result<u8> {
    let (fs, state) = replace::open(&SysRoot::host(), mount)?;
    let st = replace::status_of(&fs, &state.mount_point)?;
    out.report(&st, |s| fit(&status_text(s)));
    Ok(exit::OK)
}

fn status_text(s: &ReplaceStatusReport) -> String {
    let m = s.mount_point.display();
    let mut t = format!(
        "replace on {m}: {}",
        match s.state {
            ReplaceStateName::NeverStarted => "none since the mount".to_owned(),
            ReplaceStateName::Running => format!(
                "running, {:.1}% of the old device's size passed",
                s.device_permille as f64 / 10.0
            ),
            ReplaceStateName::Finished => "the last one finished".to_owned(),
            ReplaceStateName::Cancelled => "the last one was cancelled".to_owned(),
            ReplaceStateName::Suspended => "suspended (it continues at the next mount)".to_owned(),
        }
    );
    if let Some(tg) = &s.target {
        t.push_str(&format!(", onto {tg}"));
    }
    t.push('\n');
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if let Some(when) = s.when(now) {
        t.push_str(&format!("  {when}\n"));
    }
    if s.state != ReplaceStateName::NeverStarted {
        t.push_str(&format!(
            "  errors: {} write, {} uncorrectable read{}\n",
            s.write_errors,
            s.uncorrectable_read_errors,
            if s.uncorrectable_read_errors > 0 {
                " (blocks no copy could be read of: their files are damaged)"
            } else {
                ""
            }
        ));
    }
    if s.state == ReplaceStateName::Finished {
        t.push_str(&format!("  next: btrfs-lab scrub {m}\n"));
    }
    t
}

/// `device replace --cancel`: stops the running replace, confirmed.
fn replace_cancel(mount: &Path, ask: ConfirmArgs, out: &Output) -> Result<u8> {
    let (fs, state) = replace::open(&SysRoot::host(), mount)?;
    let st = replace::status_of(&fs, &state.mount_point)?;
    if st.state != ReplaceStateName::Running {
        return Err(Error::new(
            ErrorKind::State,
            format!("no replace is running on {}", state.mount_point.display()),
        ));
    }
    if ask.dry_run {
        out.status(&format!(
            "would cancel the replace on {} (the old device stays a member, unchanged)\n{DRY_RUN}",
            state.mount_point.display()
        ));
        return Ok(exit::OK);
    }
    out.status(&format!(
        "The replace on {} is {:.1}% through; cancelling it throws the copy away (the old device stays a member).\n",
        state.mount_point.display(),
        st.device_permille as f64 / 10.0
    ));
    confirm(out, "Cancel the replace?", ask.yes)?;
    out.before_change(format!(
        "btrfs-lab device replace {} --status",
        state.mount_point.display()
    ))?;
    let was = replace::cancel(&fs, mount)?;
    let st = replace::status_of(&fs, &state.mount_point)?;
    out.report(&st, |_| {
        if was {
            "cancelled: the old device is still a member\n".to_owned()
        } else {
            "nothing to cancel: the replace had ended\n".to_owned()
        }
    });
    Ok(exit::OK)
}

/// replace's plan and result as text.
struct ReplaceText<'a>(&'a Output);

impl View<Replace> for ReplaceText<'_> {
    fn plan(&self, plan: &ReplacePlan) -> String {
        fit(&render_replace(plan, self.0))
    }
    fn result(&self, _plan: &ReplacePlan, done: &Replaced) {
        self.0.status(&fit(&replaced_text(done, self.0)));
    }
}

fn replaced_text(done: &Replaced, out: &Output) -> String {
    let (r, scrubbed) = (done.result(), &done.scrubbed);
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
    if let Some(next) = &r.next {
        t.push_str(&format!("  {next}\n"));
    }
    match &scrubbed {
        Some(Ok(s)) if s.totals.uncorrectable > 0 => t.push_str(&format!(
            "  scrub of the new device failed: {} uncorrectable error(s) of {} found, {} corrected (btrfs-lab scrub {} --status; dmesg names the files)\n",
            s.totals.uncorrectable,
            s.totals.errors,
            s.totals.corrected,
            s.mount_point.display()
        )),
        Some(Ok(s)) if s.totals.errors + s.totals.corrected > 0 => t.push_str(&format!(
            "  scrub of the new device: {} error(s) found, {} corrected\n",
            s.totals.errors, s.totals.corrected
        )),
        Some(Ok(_)) => t.push_str("  scrub of the new device: clean\n"),
        Some(Err(e)) => t.push_str(&format!(
            "  scrub of the new device failed: {}\n",
            e.message()
        )),
        None => t.push_str(&format!(
            "  next: scrub it: {}\n",
            display_argv(&r.scrub_command)
        )),
    }
    t
}

/// Usable data space before and after a plan (`btrfs-lab capacity`'s model).
fn usable_line(u: &btrfs_lab::space::capacity::UsableChange) -> String {
    format!(
        "  usable  {} of data now, {} after (btrfs-lab capacity)\n",
        size(u.before),
        size(u.after)
    )
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
    t.push_str(&usable_line(&plan.usable));
    runs_and_notes(&mut t, &plan.commands, &plan.notes);
    t
}

fn remove(a: RemoveArgs, out: &Output, started: StartedStore) -> Result<u8> {
    signals::install_pausable()?;
    a.units.select();
    let mut op = Remove::new(a.mount, &a.devices, started);
    operation::run(&mut op, a.confirm.into(), out, &RemoveText(out))
}

/// remove's plan and result as text.
struct RemoveText<'a>(&'a Output);

impl View<Remove> for RemoveText<'_> {
    fn plan(&self, plan: &RemovePlan) -> String {
        fit(&render_remove(plan, self.0))
    }
    fn result(&self, _plan: &RemovePlan, report: &RemoveReport) {
        if let Some(r) = &report.result {
            self.0.status(&fit(&removed_text(r, self.0)));
        }
    }
}

fn removed_text(r: &RemoveResult, out: &Output) -> String {
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
    if let Some(next) = &r.next {
        t.push_str(&format!("  {next}\n"));
    }
    t
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
        "  now     {} raw, {} usable: {}\n",
        size(plan.before.raw_bytes),
        size(plan.before.usable_bytes),
        list(&plan.before)
    ));
    t.push_str(&format!(
        "  after   {} raw, {} usable: {}\n",
        size(plan.after.raw_bytes),
        size(plan.after.usable_bytes),
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
    let opts = AddOptions {
        force: a.overwrite,
        nodiscard: a.nodiscard,
    };
    let added = |r: &AddResult| added_text(r, out);
    if a.then_balance {
        let mut op = AddThenBalance::new(a.mount, a.devices, opts, &added);
        return operation::run(&mut op, a.confirm.into(), out, &AddText(out));
    }
    if !a.then_convert {
        let mut op = Add::new(a.mount, a.devices, opts, &added);
        return operation::run(&mut op, a.confirm.into(), out, &AddText(out));
    }
    let convert = ConvertRequest {
        data: a.data,
        metadata: a.metadata,
        force: a.overwrite,
    };
    let mut op = AddThenConvert::new(a.mount, a.devices, opts, convert, &added);
    operation::run(&mut op, a.confirm.into(), out, &AddText(out))
}

fn added_text(r: &AddResult, out: &Output) -> String {
    format!(
        "{} {} device{} now, {} raw\n",
        out.paint.good("added:"),
        r.devices.len(),
        if r.devices.len() == 1 { "" } else { "s" },
        size(r.raw_bytes)
    )
}

/// device add's plans and results as text (the add's result was said
/// when it was done).
struct AddText<'a>(&'a Output);

impl View<Add<'_>> for AddText<'_> {
    fn plan(&self, plan: &AddPlan) -> String {
        fit(&render(plan, self.0))
    }
    fn result(&self, _plan: &AddPlan, _result: &AddResult) {}
}

/// The first line of the summary that ends a long plan, right above its
/// question (the plan's start has scrolled away on a small terminal): what
/// is added, and what the filesystem then has.
fn add_in_short(plan: &AddPlan, out: &Output) -> String {
    let new: Vec<String> = plan
        .devices
        .iter()
        .map(|d| format!("{} ({})", d.path.display(), size(d.size)))
        .collect();
    let wipes: usize = plan
        .devices
        .iter()
        .map(|d| d.wipes.len() + usize::from(!d.partitions.is_empty()))
        .sum();
    format!(
        "{} add {} → {} devices, {} raw{}\n",
        out.paint.bold("In short:"),
        new.join(", "),
        plan.after.devices.len(),
        size(plan.after.raw_bytes),
        if wipes > 0 {
            format!(", destroying what is on them ({wipes} signature(s) or partition tables above)")
        } else {
            String::new()
        }
    )
}

/// The summary's line of the conversion that follows the add.
fn convert_in_short(c: &ConvertPlan) -> String {
    let changes: Vec<String> = c
        .changes
        .iter()
        .filter(|ch| ch.kind != btrfs_lab::model::space::BgType::System)
        .map(|ch| format!("{} to {}", ch.kind.json_name(), ch.to.name()))
        .collect();
    let moved: u64 = c.changes.iter().map(|ch| ch.used_bytes).sum();
    format!(
        "  then convert {}: {} to move{}\n",
        if changes.is_empty() {
            "nothing".to_owned()
        } else {
            changes.join(", ")
        },
        size(moved),
        match c.risks.len() {
            0 => String::new(),
            1 => "; RISK above".to_owned(),
            n => format!("; {n} RISKs above"),
        }
    )
}

impl View<AddThenConvert<'_>> for AddText<'_> {
    fn plan(&self, plan: &AddPlan) -> String {
        let mut t = render(plan, self.0);
        if let Some(c) = &plan.then_convert {
            t.push_str("then:\n");
            t.push_str(&render_plan(c, self.0));
        }
        t.push_str(&add_in_short(plan, self.0));
        if let Some(c) = &plan.then_convert {
            t.push_str(&convert_in_short(c));
        }
        fit(&t)
    }
    fn result(&self, plan: &AddPlan, finished: &Option<Finished>) {
        if let Some(f) = finished {
            say_finished(f, &plan.mount_point, self.0);
        }
    }
}

impl View<AddThenBalance<'_>> for AddText<'_> {
    fn plan(&self, plan: &AddBalancePlan) -> String {
        let mut t = render(&plan.0, self.0);
        if let Some(b) = &plan.1 {
            t.push_str("then:\n");
            t.push_str(&super::balance::render_plan(b, self.0));
        }
        t.push_str(&add_in_short(&plan.0, self.0));
        match &plan.1 {
            Some(b) if !b.steps.is_empty() => t.push_str(&format!(
                "  then balance: relocate {} chunk{}, {} of data{}\n",
                b.chunks,
                if b.chunks == 1 { "" } else { "s" },
                size(b.used_bytes),
                b.estimate.as_ref().map_or(String::new(), |e| format!(
                    ", about {}",
                    btrfs_lab::report::rate::duration(e.seconds)
                ))
            )),
            Some(_) => t.push_str("  then balance: follow or resume the balance above\n"),
            None => {}
        }
        fit(&t)
    }
    fn result(&self, _plan: &AddBalancePlan, done: &Option<(BalancePlan, BalanceFinished)>) {
        if let Some((planned, finished)) = done {
            super::balance::say_finished(finished, planned, self.0);
        }
    }
}

/// device add's examples (btrfs-lab-device(1) shows them too).
const ADD_EXAMPLES: &[(&str, &str)] = &[
    (
        "What adding /dev/nvme2n1 would do.",
        "btrfs-lab device add --dry-run /mnt/data /dev/nvme2n1",
    ),
    (
        "Add it, then spread the data that is there over all devices.",
        "btrfs-lab device add --then-balance /mnt/data /dev/nvme2n1",
    ),
    (
        "Add it, then convert data to RAID0 and metadata to RAID1.",
        "btrfs-lab device add --then-convert --data raid0 --metadata raid1 /mnt/data /dev/nvme2n1",
    ),
];

use super::page::{BAD, NOT_WRITTEN, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[
    super::page::Declared {
        words: &["device"],
        examples: ADD_EXAMPLES,
        see_also: &["btrfs-device(8)", "btrfs-balance(8)"],
        ..super::page::Declared::NONE
    },
    super::page::Declared {
        words: &["device", "add"],
        documents: &[
            "device-add",
            "device-add-nothing",
            "convert-record",
            "balance-record",
            "error",
        ],
        dry_run: true,
        output: super::page::Shape::Document,
        exits: super::convert::EXITS,
        examples: ADD_EXAMPLES,
        see_also: &["btrfs-device(8)", "btrfs-balance(8)"],
    },
    super::page::Declared {
        words: &["device", "replace"],
        documents: &[
            "device-replace",
            "device-replace-status",
            "progress",
            "error",
        ],
        dry_run: true,
        output: super::page::Shape::Lines,
        exits: &[
            row(
                status::OK,
                "replaced and verified (--status, --cancel: reported, cancelled).",
            ),
            row(
                status::NOT_REDUNDANT,
                "replaced, but chunks lack their profile's copies (the report names the \
                 convert that fixes them), blocks no copy could be read of were lost, or the \
                 scrub asked for failed.",
            ),
            row(
                status::ERROR,
                "refused or failed; nothing was changed (OLD is still a member).",
            ),
            BAD,
            NOT_WRITTEN,
            row(
                status::INTERRUPTED,
                "SIGINT, SIGTERM or SIGHUP: the replace goes on in the kernel; --status follows \
                 it, the same command again finishes the steps after it. During --scrub: the \
                 replace is done, the scrub cancelled (btrfs scrub resume continues it).",
            ),
        ],
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
    super::page::Declared {
        words: &["device", "remove"],
        documents: &["device-remove", "progress", "error"],
        dry_run: true,
        output: super::page::Shape::Lines,
        exits: &[
            row(
                status::OK,
                "removed and verified, or nothing to do (an earlier remove of btrfs-lab took \
                 the devices out).",
            ),
            row(
                status::NOT_REDUNDANT,
                "removed, but chunks lack their profile's copies (the report names the convert \
                 that fixes them).",
            ),
            row(
                status::ERROR,
                "refused or failed; what moved stays moved, the device is still a member.",
            ),
            BAD,
            NOT_WRITTEN,
            row(
                status::INTERRUPTED,
                "SIGINT, SIGTERM or SIGHUP: stopped after the chunk in progress; the device is \
                 still a member and the same command again continues.",
            ),
        ],
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
