//! `btrfs-lab balance MOUNT`: spread the chunks written before a device
//! came (or went) over every device, with the smallest balance that does
//! it; `--status | --pause | --resume | --cancel`.

use std::path::{Path, PathBuf};

use btrfs_lab::balance::operation::{self, Balance, Finished};
use btrfs_lab::balance::plan::{Spread, Step, striped};
use btrfs_lab::balance::report::{BalancePlan, Existing, StatusReport};
use btrfs_lab::balance::run::Outcome;
use btrfs_lab::error::{Result, exit};
use btrfs_lab::operation::{self as driver, View};
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::fs::state::STATE_DIR;
use btrfs_lab::sys::kernel::signals;
use btrfs_lab::ui::Ui;
use clap::Args;

use super::output::{ConfirmArgs, Output};
use super::units::{UnitArgs, size};
use btrfs_lab::report::text::wrap_hanging;

pub const AFTER_HELP: &str = "\
A chunk is as wide as the devices that had room when it was allocated: data
written before a device was added stays on the devices it had, and reading it
uses those alone. balance measures each profile's spread over the devices and
plans the smallest balance that evens it out: for striped profiles (raid0,
raid10, raid5, raid6) the chunks narrower than the array (stripes=1..N-1),
for the others the chunks of a device that holds more than its share
(devid=D,limit=K). The relocation is replayed first: a balance that would run
out of space is refused with the numbers.

Ctrl-C (SIGINT, SIGTERM, SIGHUP) pauses the balance after its current chunk:
nothing is lost, and the same command (or --resume) goes on.";

#[derive(Debug, Args)]
pub struct BalanceArgs {
    /// A path inside a mounted btrfs.
    #[arg(value_name = "MOUNT")]
    mount: PathBuf,
    #[command(flatten)]
    manage: super::convert::ManageArgs,
    #[command(flatten)]
    confirm: ConfirmArgs,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(a: BalanceArgs, out: &Output, state_dir: Option<PathBuf>) -> Result<u8> {
    // Until the balance starts a signal exits at once (nothing was
    // changed); from then on it pauses the balance.
    signals::install_pausable()?;
    a.units.select();
    if a.manage.status {
        let st = operation::status(&a.mount)?;
        out.report(&st, |st| render_status(st, out));
        return Ok(exit::OK);
    }
    if a.manage.pause || a.manage.cancel {
        driver::need_root("balancing needs root")?;
        let root = SysRoot::host();
        let look = |m: &Path| operation::look(m);
        if a.manage.pause {
            return super::convert::pause(&root, &a.mount, "balance", &look, out);
        }
        return super::convert::cancel(
            &root,
            &a.mount,
            a.confirm,
            "cancel the balance: chunks already moved stay where they are now, the rest where they were",
            &look,
            out,
        );
    }
    let state_dir = state_dir.unwrap_or_else(|| PathBuf::from(STATE_DIR));
    let mut op = Balance::new(a.mount, a.manage.resume, Some(&state_dir));
    driver::run(&mut op, a.confirm.into(), out, &Text(out))
}

/// balance's plan and result as text.
struct Text<'a>(&'a Output);

impl View<Balance> for Text<'_> {
    fn plan(&self, plan: &BalancePlan) -> String {
        render_plan(plan, self.0)
    }
    fn result(&self, plan: &BalancePlan, finished: &Finished) {
        say_finished(finished, plan, self.0);
    }
}

/// The stripes a read of the data uses on average, and of how many a
/// full-width chunk has (striped profiles holding data only).
fn reads(s: &Spread) -> Option<(String, u32)> {
    let full = s.full_width?;
    if !striped(s.profile) || s.used_bytes == 0 {
        return None;
    }
    Some((
        format!("{:.1}", s.read_stripes),
        s.profile.data_stripes(full),
    ))
}

/// One type and profile: its chunks, and each device's share now and
/// (when given) after.
/// A line of a plan or status, filled to the width under its indent.
fn item(text: &str) -> String {
    wrap_hanging(text, "  ", "    ")
}

fn render_spread(before: &Spread, after: Option<&Spread>, plan: &BalancePlan) -> String {
    let mut t = format!(
        "  {} {}: {} used in {} chunk{}",
        before.kind.name(),
        before.profile,
        size(before.used_bytes),
        before.chunks,
        if before.chunks == 1 { "" } else { "s" }
    );
    match (reads(before), after.and_then(reads)) {
        (Some((now, _)), Some((then, full))) if now != then => {
            t.push_str(&format!("; reads use {now} → {then} of {full} stripes"));
        }
        (Some((now, full)), _) => t.push_str(&format!("; reads use {now} of {full} stripes")),
        _ => {}
    }
    let mut t = wrap_hanging(t.trim_start(), "  ", "    ");
    let changes = after.is_some_and(|a| a.devices != before.devices);
    if !changes {
        return t;
    }
    t.push_str("    device               now      after\n");
    for d in &before.devices {
        let path = plan
            .devices
            .iter()
            .find(|m| m.devid == d.devid)
            .map_or("", |m| m.path.as_str());
        let then = after
            .and_then(|a| a.devices.iter().find(|x| x.devid == d.devid))
            .map_or(0, |x| x.allocated);
        t.push_str(&format!(
            "    {:>2} {:<14} {:>9}  {:>9}\n",
            d.devid,
            short(path, 14),
            size(d.allocated),
            size(then)
        ));
    }
    t
}

/// Each device's share of a type, on one line (by devid).
fn by_device(s: &Spread) -> String {
    let shares: Vec<String> = s
        .devices
        .iter()
        .map(|d| format!("{} {}", d.devid, size(d.allocated)))
        .collect();
    format!("    by device: {}\n", shares.join(", "))
}

/// `path` in at most `n` characters (its end kept: the device name).
fn short(path: &str, n: usize) -> String {
    let count = path.chars().count();
    if count <= n {
        return path.to_owned();
    }
    let tail: String = path.chars().skip(count - (n - 1)).collect();
    format!("…{tail}")
}

fn step_words(s: &Step) -> String {
    format!(
        "{} {} chunk{} ({}), {} of data",
        s.chunks,
        s.kind.name(),
        if s.chunks == 1 { "" } else { "s" },
        s.filter.describe(),
        size(s.used_bytes)
    )
}

pub fn render_plan(plan: &BalancePlan, out: &Output) -> String {
    let p = out.paint;
    let m = plan.mount_point.display();
    let mut t = wrap_hanging(
        &format!(
            "{} {m} ({} device{})",
            p.bold("Plan: balance"),
            plan.devices.len(),
            if plan.devices.len() == 1 { "" } else { "s" },
        ),
        "",
        "  ",
    );
    match plan.existing {
        Some(Existing::Follow) => {
            t.push_str(&item(
                "a balance is running: follow it until it ends (Ctrl-C pauses it)",
            ));
            return t;
        }
        Some(Existing::Resume) => {
            t.push_str("  a balance is paused: resume it\n");
        }
        None => {}
    }
    for b in &plan.before {
        let after = plan
            .after
            .iter()
            .find(|a| a.kind == b.kind && a.profile == b.profile);
        let moved = plan
            .steps
            .iter()
            .any(|s| s.kind == b.kind && s.profile == b.profile);
        t.push_str(&render_spread(b, after.filter(|_| moved), plan));
    }
    if plan.steps.is_empty() {
        return t;
    }
    let words: Vec<String> = plan.steps.iter().map(step_words).collect();
    t.push_str(&item(&format!("relocates {}", words.join("; "))));
    t.push_str(&item(&match &plan.estimate {
        Some(e) => format!(
            "time: about {} at {}/s, the rate the last balance here ran at",
            btrfs_lab::report::rate::duration(e.seconds),
            size(e.bytes_per_sec as u64)
        ),
        None => "time: not known before it runs (no balance was measured on this array \
                 yet); progress shows the rate and ETA"
            .to_owned(),
    }));
    if !plan.equivalent_command.is_empty() {
        // The command on a line of its own: never broken.
        t.push_str(&format!(
            "  runs the BALANCE_V2 ioctl, as:\n    {}\n",
            btrfs_lab::sys::tools::display_argv(&plan.equivalent_command)
        ));
    }
    t.push_str(&item(
        "Ctrl-C pauses it after the current chunk; the same command resumes it",
    ));
    t
}

/// Says how the balance finished (a cancelled one is the run's error).
pub(super) fn say_finished(finished: &Finished, plan: &BalancePlan, out: &Output) {
    let r = &finished.result;
    let m = plan.mount_point.display();
    match r.outcome {
        Outcome::Completed => {
            let mut t = format!(
                "{} moved {} in {:.0} s; the spread now:\n",
                out.paint.good("done:"),
                size(r.bytes_moved),
                r.seconds
            );
            for s in &r.after {
                t.push_str(&render_spread(s, None, plan));
                t.push_str(&by_device(s));
            }
            out.status(&t);
            if !r.left.is_empty() {
                let words: Vec<String> = r.left.iter().map(step_words).collect();
                out.warning_with_hint(
                    &format!("still uneven: a balance now would relocate {} (written while it ran, or allocated where there was room)", words.join("; ")),
                    &format!("run `btrfs-lab balance {m}` again"),
                );
            }
        }
        Outcome::Paused if r.bytes_remaining == Some(0) => {
            out.warning_with_hint(
                "the balance is paused with nothing left to move (its last chunk finished as it paused); data is intact",
                &format!("let the kernel finish it with: btrfs-lab balance {m} --resume; or cancel it with: btrfs-lab balance {m} --cancel"),
            );
        }
        Outcome::Paused => {
            out.warning_with_hint(
                &format!(
                    "the balance is paused with {} left to move; data is intact",
                    size(r.bytes_remaining.unwrap_or(0))
                ),
                &format!("resume it with: btrfs-lab balance {m} --resume (running the same balance again also resumes it); or cancel it with: btrfs-lab balance {m} --cancel"),
            );
        }
        Outcome::Cancelled => {}
    }
}

fn render_status(st: &StatusReport, out: &Output) -> String {
    let m = st.mount_point.display();
    let mut t = format!("{} {m}: ", out.paint.bold("balance on"));
    match st.balance {
        None => t.push_str("none running\n"),
        Some(b) => {
            t.push_str(if b.running { "running" } else { "paused" });
            if b.data_target.is_some() || b.metadata_target.is_some() {
                t.push_str(&format!(
                    " (a conversion to {}: see btrfs-lab convert {m} --status)",
                    b.targets().describe()
                ));
            }
            t.push_str(&format!(
                "\n  chunks: {} of {} relocated\n",
                b.completed, b.expected
            ));
            if b.paused {
                t.push_str(&format!("  resume with: btrfs-lab balance {m} --resume\n"));
            }
        }
    }
    let plan = BalancePlan {
        mount_point: st.mount_point.clone(),
        devices: Vec::new(),
        existing: None,
        before: Vec::new(),
        after: Vec::new(),
        steps: Vec::new(),
        chunks: 0,
        used_bytes: 0,
        estimate: None,
        equivalent_command: Vec::new(),
        refused: Vec::new(),
    };
    for s in &st.spread {
        t.push_str(&render_spread(s, None, &plan));
        t.push_str(&by_device(s));
    }
    if st.balance.is_none() {
        if st.steps.is_empty() {
            t.push_str("  even: nothing to balance\n");
        } else {
            let words: Vec<String> = st.steps.iter().map(step_words).collect();
            t.push_str(&item(&format!(
                "uneven: `btrfs-lab balance {m}` would relocate {}",
                words.join("; ")
            )));
        }
    }
    t
}

use super::page::{BAD, NOT_WRITTEN, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help.
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["balance"],
    documents: &[
        "balance-record",
        "balance-status",
        "convert-pause",
        "convert-cancel",
        "error",
    ],
    dry_run: true,
    output: super::page::Shape::Lines,
    exits: &[
        row(status::OK, "done, or nothing to balance (already even)."),
        row(
            status::ERROR,
            "refused or failed; nothing was changed: not root, a missing device (replace or \
             remove it first), a conversion under way, not enough space (the numbers are \
             said), or the balance was cancelled by someone else (what was moved stays moved).",
        ),
        BAD,
        NOT_WRITTEN,
        row(
            status::INTERRUPTED,
            "SIGINT, SIGTERM or SIGHUP: the balance is paused, never cancelled; the same \
             command or `balance MOUNT --resume` continues it.",
        ),
    ],
    examples: &[
        (
            "The plan only: the spread now and after, what moves.",
            "btrfs-lab balance --dry-run /mnt/data",
        ),
        (
            "Balance without asking.",
            "btrfs-lab balance --yes /mnt/data",
        ),
        (
            "Where a balance stands, and how even the array is.",
            "btrfs-lab balance --status /mnt/data",
        ),
        (
            "Continue a paused balance.",
            "btrfs-lab balance --resume /mnt/data",
        ),
    ],
    see_also: &[
        "btrfs-lab-device(1)",
        "btrfs-lab-convert(1)",
        "btrfs-balance(8)",
    ],
}];
