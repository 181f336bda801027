//! `btrfs-lab device add MOUNT DEVICE...`.

use std::path::PathBuf;

use btrfs_lab::admin::add::{self, AddOptions, AddPlan, AddResult};
use btrfs_lab::admin::convert::{ConvertRequest, Start};
use btrfs_lab::admin::hooks;
use btrfs_lab::admin::report::{AddReport, Ceiling, ConvertRecord, PlanDoc, Throughput};
use btrfs_lab::error::{Error, ErrorKind, Result, exit};
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::kernel::signals;
use btrfs_lab::sys::tools::display_argv;
use clap::{Args, Subcommand};

use super::convert::{execute, refuse_if_blocked, render_plan};
use super::output::{Output, confirm};
use super::units::{UnitArgs, profile_arg, size};
use btrfs_lab::ui::{self, Ui};

#[derive(Debug, Args)]
pub struct DeviceArgs {
    #[command(subcommand)]
    command: DeviceCommand,
}

#[derive(Debug, Subcommand)]
enum DeviceCommand {
    /// Add devices to a mounted btrfs, after checking they are safe to overwrite.
    Add(AddArgs),
}

#[derive(Debug, Args)]
struct AddArgs {
    /// A path inside the mounted btrfs.
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    /// Block devices to add.
    #[arg(value_name = "DEVICE", required = true)]
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
    #[arg(long, value_parser = profile_arg, value_name = "PROFILE", requires = "then_convert")]
    data: Option<Profile>,
    /// With --then-convert: metadata profile, as --data (system chunks follow it).
    #[arg(long, value_parser = profile_arg, value_name = "PROFILE", requires = "then_convert")]
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

pub fn run(args: DeviceArgs, out: &Output) -> Result<u8> {
    match args.command {
        DeviceCommand::Add(a) => add(a, out),
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
    let list = |l: &btrfs_lab::admin::add::Layout| {
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
        let mut messages: Vec<String> = plan.refusals.iter().map(|r| r.message.clone()).collect();
        let first = messages.remove(0);
        let mut e = Error::new(ErrorKind::Refused, format!("cannot add: {first}"));
        if !messages.is_empty() {
            e = e.with_hint(format!("also: {}", messages.join("; also: ")));
        } else if plan.refusals[0].force_overrides {
            e = e.with_hint("--overwrite overwrites it");
        }
        return Err(e);
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
