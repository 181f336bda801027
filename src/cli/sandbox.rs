//! `btrfs-lab sandbox up | down | list`.

use std::path::{Path, PathBuf};

use btrfs_lab::operation::{DRY_RUN, NOTHING_DONE};
use clap::{Args, Subcommand, ValueEnum};

use btrfs_lab::error::{Error, ErrorKind, Result, exit};
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::report::{
    DownDryRun, DownPlan, DownResult, ListReport, UpDryRun, UpReport,
};
use btrfs_lab::sandbox::{
    self, DownOutcome, DownReport, DownRequest, FsKind, Locations, SandboxRecord, SandboxRequest,
    SandboxState, SandboxStatus, StateStore, plan_up,
};
use btrfs_lab::sys::kernel::signals;

use super::output::ConfirmArgs;
use super::output::{Output, confirm};
use super::units::{DATA_HELP, METADATA_HELP, UnitArgs, profiles, size, size_arg};
use btrfs_lab::report::text::wrap_hanging;

#[derive(Debug, Args)]
pub struct SandboxArgs {
    #[command(subcommand)]
    command: SandboxCommand,
}

#[derive(Debug, Subcommand)]
enum SandboxCommand {
    /// Sparse files as loop devices (direct I/O), mkfs, mount.
    Up(UpArgs),
    /// Unmount, detach and delete exactly what `up` made.
    Down(DownArgs),
    /// List the sandboxes and whether they are up.
    List(ListArgs),
}

#[derive(Debug, Args)]
struct ListArgs {
    #[command(flatten)]
    units: UnitArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FsArg {
    Btrfs,
    Ext4,
}

#[derive(Debug, Args)]
struct UpArgs {
    /// Name of the sandbox [default: a random sbx-XXXXXX].
    #[arg(long)]
    name: Option<String>,
    /// Number of loop devices.
    #[arg(long, default_value_t = 1, value_name = "N")]
    devices: u32,
    /// Size of each loop device (a sparse file): 512M, 2G, ...
    #[arg(
        long = "device-size",
        alias = "size",
        default_value = "2G",
        value_parser = size_arg,
        value_name = "SIZE"
    )]
    device_size: u64,
    /// Filesystem to create (ext4 is for comparisons: one device, no profiles).
    #[arg(long, value_enum, default_value = "btrfs")]
    fs: FsArg,
    #[arg(long, value_parser = profiles(), hide_possible_values = true, value_name = "PROFILE", help = DATA_HELP)]
    data: Option<Profile>,
    #[arg(long, value_parser = profiles(), hide_possible_values = true, value_name = "PROFILE", help = METADATA_HELP)]
    metadata: Option<Profile>,
    /// Extra argument for mkfs, passed as is (repeat for several).
    #[arg(long = "mkfs-arg", value_name = "ARG", allow_hyphen_values = true)]
    mkfs_args: Vec<String>,
    /// Directory for the backing files and the mount point [default: /var/tmp/btrfs-lab/NAME].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Show the plan and do nothing.
    #[arg(long)]
    dry_run: bool,
    /// Deprecated, no effect: `up` destroys nothing, so there is nothing to
    /// confirm (hidden; accepted for one release so scripts keep working).
    #[arg(long, hide = true)]
    yes: bool,
    #[command(flatten)]
    units: UnitArgs,
}

#[derive(Debug, Args)]
struct DownArgs {
    /// The sandbox: its mount point, its directory or its name.
    #[arg(
        required_unless_present = "all",
        conflicts_with = "all",
        value_name = "MOUNT|NAME"
    )]
    target: Option<String>,
    /// Remove every sandbox you made (the same user, through sudo too).
    #[arg(long)]
    all: bool,
    /// With --all: every user's sandboxes, and records that do not say who
    /// made them.
    #[arg(long, requires = "all")]
    everyone: bool,
    #[command(flatten)]
    confirm: ConfirmArgs,
    /// Remove only the record of sandbox NAME (one that `down` cannot act
    /// on, e.g. its directory was replaced), after saying what is left in
    /// place: nothing else is unmounted, detached or deleted.
    #[arg(long, conflicts_with = "all", requires = "target")]
    forget: bool,
}

/// The state directory and sandbox root from the global options (and, when
/// not root, the environment); notes about ignored variables go to stderr.
pub fn locations(
    (state_dir, sandbox_root): (Option<PathBuf>, Option<PathBuf>),
    out: &Output,
) -> Locations {
    let l = sandbox::resolve_locations(
        state_dir,
        sandbox_root,
        |v| std::env::var_os(v),
        btrfs_lab::sys::is_root(),
    );
    for n in &l.notes {
        out.note(n);
    }
    l
}

pub fn run(args: SandboxArgs, out: &Output, places: Locations) -> Result<u8> {
    let store = &places.store;
    match args.command {
        SandboxCommand::Up(a) => up(a, store, &places.sandbox_root, out),
        SandboxCommand::Down(a) => down(a, store, out),
        SandboxCommand::List(a) => {
            a.units.select();
            list(store, out)
        }
    }
}

fn up(a: UpArgs, store: &StateStore, root: &Path, out: &Output) -> Result<u8> {
    // First: from here on SIGINT, SIGTERM and SIGHUP stop `up` at its next
    // step, which removes what was made (exit 130).
    if !a.dry_run {
        signals::install()?;
    }
    a.units.select();
    if a.yes {
        out.note("--yes has no effect on `sandbox up` (it destroys nothing) and will be removed");
    }
    let dry_run = a.dry_run;
    let plan = plan_up(&request(a), root, &sandbox::random_name())?;
    if dry_run {
        show_up_plan(plan, out);
        return Ok(exit::OK);
    }
    out.before_change("btrfs-lab sandbox list")?;
    let report = sandbox::bring_up(&plan, store)?;
    out.report(&report, |r| render_up(r, store, out));
    Ok(exit::OK)
}

/// What `up` was asked for.
fn request(a: UpArgs) -> SandboxRequest {
    SandboxRequest {
        name: a.name,
        devices: a.devices,
        size_bytes: a.device_size,
        fs: match a.fs {
            FsArg::Btrfs => FsKind::Btrfs,
            FsArg::Ext4 => FsKind::Ext4,
        },
        data: a.data,
        metadata: a.metadata,
        mkfs_args: a.mkfs_args,
        dir: a.dir,
    }
}

/// `up --dry-run`: the steps it would take.
fn show_up_plan(plan: sandbox::SandboxPlan, out: &Output) {
    let steps = plan.describe();
    let dry = UpDryRun {
        dry_run: true,
        plan,
        steps,
    };
    out.report(&dry, |d| {
        let mut text = format!("{} ({NOTHING_DONE}):\n", out.paint.bold("sandbox up would"));
        for (i, s) in d.steps.iter().enumerate() {
            let n = format!("  {}. ", i + 1);
            text.push_str(&wrap_hanging(s, &n, &" ".repeat(n.len())));
        }
        text
    });
}

fn list_names(p: &[Profile]) -> String {
    p.iter().map(|p| p.name()).collect::<Vec<_>>().join("+")
}

fn render_up(r: &UpReport, store: &StateStore, out: &Output) -> String {
    let n = r.devices.len();
    let mut profile = String::new();
    if r.fs == FsKind::Btrfs {
        profile = format!(
            ", data {}, metadata {}",
            list_names(&r.data_profiles),
            list_names(&r.metadata_profiles)
        );
    }
    let mut text = wrap_hanging(
        &format!(
            "sandbox {} is {}: {} on {n} × {} loop device{} with direct I/O{profile}",
            out.paint.bold(&r.name),
            out.paint.good("up"),
            r.fs.name(),
            size(r.size_bytes),
            if n == 1 { "" } else { "s" },
        ),
        "",
        "  ",
    );
    text.push_str(&format!("  mount point  {}\n", r.mount_point.display()));
    for (i, d) in r.devices.iter().enumerate() {
        let label = if i == 0 { "devices" } else { "" };
        let dev = d
            .loop_device
            .as_ref()
            .map_or("-".into(), |p| p.display().to_string());
        text.push_str(&format!(
            "  {label:<11}  {dev:<12} {}\n",
            out.paint.dim(&d.image.display().to_string())
        ));
    }
    // A command is never broken: a copied line break would run two.
    text.push_str(&format!(
        "remove it with:\n  {}\n",
        store.down_command(&r.mount_point.display().to_string())
    ));
    text
}

/// Finds the records `down` is about: by name, mount point or directory.
/// Valid records; each file that is not one is reported on stderr (and
/// never acted on). Returns the records and how many were bad.
fn load(store: &StateStore, out: &Output) -> Result<(Vec<SandboxRecord>, usize)> {
    let loaded = store.load()?;
    for e in &loaded.bad {
        out.error(e);
    }
    Ok((loaded.records, loaded.bad.len()))
}

/// `down NAME --forget`: removes the record file of NAME (valid or not)
/// and nothing else, after saying what stays.
fn forget(a: &DownArgs, store: &StateStore, out: &Output) -> Result<u8> {
    let name = a.target.as_deref().unwrap_or_default();
    sandbox::plan::validate_name(name).map_err(|_| {
        Error::usage(format!("--forget takes a sandbox name, not '{name}'"))
            .with_hint("btrfs-lab sandbox list shows the names")
    })?;
    let loaded = store.load()?;
    let record = loaded.records.iter().find(|r| r.name == name);
    if record.is_none() && !store.has_record_file(name)? {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("no record of a sandbox named '{name}'"),
        )
        .with_hint("btrfs-lab sandbox list shows the sandboxes"));
    }
    let file = store.record_path(name);
    let left = match record {
        Some(r) => sandbox::forget_leaves(r),
        None => vec![format!(
            "whatever {} describes: it is not a valid record, nothing in it is read",
            file.display()
        )],
    };
    let mut text = format!(
        "sandbox {}: --forget removes only its record {}; it does not unmount, detach or delete anything
",
        out.paint.bold(name),
        file.display()
    );
    if left.is_empty() {
        text.push_str(
            "  nothing of it is left to remove
",
        );
    } else {
        text.push_str(
            "  left in place (remove them by hand if they are yours, in this order):
",
        );
        for l in &left {
            text.push_str(&format!(
                "  - {l}
"
            ));
        }
        if record.is_some() {
            text.push_str(&format!(
                "  or let down remove them all instead of forgetting: {}
",
                store.down_command(name)
            ));
        }
    }
    if a.confirm.dry_run {
        out.report(
            &DownDryRun {
                dry_run: true,
                sandboxes: vec![DownPlan {
                    name: name.to_owned(),
                    steps: vec![format!("delete the record {}", file.display())],
                }],
            },
            |_| format!("{text}{DRY_RUN}"),
        );
        return Ok(exit::OK);
    }
    if !a.confirm.yes {
        out.say(&text);
        confirm(out, &format!("Forget sandbox {name}?"), false)?;
    } else {
        out.text_note(text.trim_end());
    }
    out.before_change("btrfs-lab sandbox list")?;
    store.remove(name)?;
    let result = DownResult {
        removed: vec![DownReport {
            name: name.to_owned(),
            removed: vec![file],
            left,
            ..DownReport::default()
        }],
    };
    out.report(&result, |_| {
        format!(
            "sandbox {} forgotten: its record is removed\n",
            out.paint.bold(name)
        )
    });
    Ok(exit::OK)
}

fn down(a: DownArgs, store: &StateStore, out: &Output) -> Result<u8> {
    if a.everyone && !a.all {
        return Err(Error::usage("--everyone goes with --all")
            .with_hint("btrfs-lab sandbox down --all --everyone removes every user's sandboxes; one is removed by its name"));
    }
    if a.forget {
        return forget(&a, store, out);
    }
    let req = DownRequest {
        target: a.target.as_deref(),
        all: a.all,
        everyone: a.everyone,
        dry_run: a.confirm.dry_run,
        yes: a.confirm.yes,
    };
    let describe = |plans: &[DownPlan]| render_plans(plans, out);
    if !a.confirm.dry_run {
        // Before the question (asked inside `down`): nothing is written
        // on stdout between the two.
        out.before_change("btrfs-lab sandbox list")?;
    }
    let outcome = sandbox::down(store, &req, out, &describe)?;
    Ok(show_down(outcome, out))
}

/// What `down` did (or would do, with --dry-run), and its exit status.
fn show_down(outcome: DownOutcome, out: &Output) -> u8 {
    match outcome {
        DownOutcome::DryRun(dry) => {
            out.report(&dry, |d| {
                if d.sandboxes.is_empty() {
                    "no sandboxes; nothing to do\n".to_owned()
                } else {
                    format!("{}{DRY_RUN}", render_plans(&d.sandboxes, out))
                }
            });
            exit::OK
        }
        DownOutcome::Done {
            result,
            selected,
            status,
        } => {
            out.report(&result, |r| render_down(r, selected, out));
            status
        }
    }
}

/// The plan of `down`, one block per sandbox.
fn render_plans(plans: &[DownPlan], out: &Output) -> String {
    let mut text = String::new();
    for p in plans {
        text.push_str(&format!("sandbox {}:\n", out.paint.bold(&p.name)));
        for s in &p.steps {
            text.push_str(&wrap_hanging(s, "  - ", "    "));
        }
    }
    text
}

/// What `down` removed (of `selected` sandboxes).
fn render_down(result: &DownResult, selected: usize, out: &Output) -> String {
    let mut text = String::new();
    if selected == 0 {
        text.push_str("no sandboxes; nothing to do\n");
    }
    for rep in &result.removed {
        let mut parts = Vec::new();
        if let Some(m) = &rep.unmounted {
            parts.push(format!("unmounted {}", m.display()));
        }
        if !rep.detached.is_empty() {
            let d: Vec<String> = rep
                .detached
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            parts.push(format!("detached {}", d.join(", ")));
        }
        if !rep.removed.is_empty() {
            parts.push(format!(
                "deleted {} files and directories",
                rep.removed.len()
            ));
        }
        let mut line = format!("sandbox {} removed", out.paint.bold(&rep.name));
        if !parts.is_empty() {
            line.push_str(&format!(": {}", parts.join("; ")));
        }
        text.push_str(&wrap_hanging(&line, "", "  "));
        for l in &rep.left {
            text.push_str(&wrap_hanging(l, "  note: ", "    "));
        }
    }
    text
}

fn list(store: &StateStore, out: &Output) -> Result<u8> {
    let (records, bad) = load(store, out)?;
    let statuses: Vec<SandboxStatus> = records.iter().map(sandbox::status).collect();
    let code = if bad > 0 { exit::ERROR } else { exit::OK };
    let report = ListReport {
        sandboxes: statuses,
        bad_records: bad,
    };
    out.report(&report, |r| render_list(&r.sandboxes, out));
    Ok(code)
}

fn render_list(statuses: &[SandboxStatus], out: &Output) -> String {
    if statuses.is_empty() {
        return "no sandboxes\n".to_owned();
    }
    // DEVICES says "2 × 512.00MiB" as `sandbox up` does: the size is each
    // device's, not the filesystem's.
    let name_width = statuses
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut text = format!(
        "{}\n",
        out.paint.bold(&format!(
            "{:<name_width$} {:<8} {:<6} {:<15} {}",
            "NAME", "STATE", "FS", "DEVICES", "MOUNT POINT"
        ))
    );
    for s in statuses {
        let state = match s.state {
            SandboxState::Up => out.paint.good("up      "),
            SandboxState::Partial => out.paint.warn("partial "),
            SandboxState::Down => out.paint.dim("down    "),
        };
        text.push_str(&format!(
            "{:<name_width$} {state} {:<6} {:<15} {}\n",
            s.name,
            s.fs.name(),
            format!("{} × {}", s.devices.len(), size(s.size_bytes)),
            s.mount_point.display()
        ));
    }
    let has = |state| statuses.iter().any(|s| s.state == state);
    let fill = |t: &str| wrap_hanging(t, "", "  ");
    if has(SandboxState::Partial) {
        text.push_str(&fill(
            "partial: only some of it is mounted or attached (an up or down cut short, a \
             reboot, an unmount by hand); btrfs-lab sandbox down NAME removes what is left",
        ));
    }
    if has(SandboxState::Down) {
        text.push_str(&fill(
            "down: nothing of it is mounted or attached, its files remain; btrfs-lab sandbox \
             down NAME deletes them",
        ));
    }
    text
}

use super::page::{BAD, NOT_WRITTEN, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[
    super::page::Declared {
        words: &["sandbox"],
        exits: &[
            row(status::OK, "success."),
            row(
                status::ERROR,
                "refused or failed: a directory other users can change, a loop device someone \
                 else attached, a record file that is corrupt or not written by btrfs-lab.",
            ),
            BAD,
            NOT_WRITTEN,
            row(
                status::INTERRUPTED,
                "interrupted (SIGINT, SIGTERM, SIGHUP); what up had made is removed.",
            ),
        ],
        examples: &[(
            "The sandboxes and whether they are up.",
            "btrfs-lab sandbox list",
        )],
        see_also: &["losetup(8)", "mkfs.btrfs(8)"],
        ..super::page::Declared::NONE
    },
    super::page::Declared {
        words: &["sandbox", "up"],
        documents: &["sandbox-up", "sandbox-up-dry-run"],
        dry_run: true,
        output: super::page::Shape::Document,
        examples: &[
            (
                "Two 1 GiB loop devices, data RAID0, metadata RAID1, mounted at sbx/mnt.",
                "btrfs-lab sandbox up --name space --dir sbx --devices 2 --device-size 1G --data raid0 --metadata raid1",
            ),
            (
                "Show the plan only.",
                "btrfs-lab sandbox up --dry-run --name demo --dir sbx --devices 2 --device-size 512M --data raid0 --metadata raid1",
            ),
            (
                "An ext4 one, to compare.",
                "btrfs-lab sandbox up --name plain --dir e4 --fs ext4 --device-size 256M",
            ),
        ],
        see_also: &["losetup(8)", "mkfs.btrfs(8)"],
        ..super::page::Declared::NONE
    },
    super::page::Declared {
        words: &["sandbox", "down"],
        documents: &["sandbox-down", "sandbox-down-dry-run"],
        dry_run: true,
        output: super::page::Shape::Document,
        examples: &[
            (
                "Remove the sandbox mounted at sbx/mnt.",
                "btrfs-lab sandbox down --yes sbx/mnt",
            ),
            (
                "Remove every sandbox.",
                "btrfs-lab sandbox down --yes --all",
            ),
        ],
        see_also: &["losetup(8)", "mkfs.btrfs(8)"],
        ..super::page::Declared::NONE
    },
    super::page::Declared {
        words: &["sandbox", "list"],
        documents: &["sandbox-list"],
        output: super::page::Shape::Document,
        examples: &[
            ("As text.", "btrfs-lab sandbox list"),
            ("As JSON.", "btrfs-lab sandbox list --json"),
        ],
        see_also: &["losetup(8)", "mkfs.btrfs(8)"],
        ..super::page::Declared::NONE
    },
];
