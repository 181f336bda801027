//! `balance MOUNT` as an [`Operation`]: the filesystem held and its chunks
//! read, the smallest balance planned ([`super::plan`]) with its refusals
//! (a missing device, a conversion under way, no room), the balance run by
//! the one run loop ([`super::run`]) with its progress, Ctrl-C pausing it,
//! and the chunks read again after it: the spread it left.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::plan::{self, Filter, Kind, Member as PlanMember, Planned, Step};
use super::rate::{Estimate, RateStore};
use super::report::{BalancePlan, BalanceRecord, BalanceResult, Existing, Member, StatusReport};
use super::run::{self as balance_run, Begin, Job, Outcome, Sink, Words};
use crate::error::{Error, ErrorKind, Result, exit};
use crate::model::relocate::Layout;
use crate::operation::layout::{balance_in_flux, read_layout};
use crate::operation::reason::Reason;
use crate::operation::state::{FsState, open_state, read_state_at};
use crate::operation::{Operation, Verdict};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::{self, FsHandle};
use crate::sys::kernel::ioctl::{BalanceArgs, BalanceStatus, TypeFilter};
use crate::sys::kernel::signals::OperationSignals;
use crate::ui::Ui;

/// Where a balance's change is seen.
pub fn look(mount_point: &Path) -> String {
    format!("btrfs-lab balance {} --status", mount_point.display())
}

/// The members as the planner takes them.
fn members(state: &FsState) -> Vec<PlanMember> {
    PlanMember::of_state(state)
}

/// A balance that exists and is not a conversion's: what a run does with
/// it. `Err`: a conversion's (convert finishes it).
fn existing(state: &FsState) -> std::result::Result<Option<Existing>, Reason> {
    let Some(b) = state.balance else {
        return Ok(None);
    };
    if b.data_target.is_some() || b.metadata_target.is_some() {
        let m = state.mount_point.display();
        return Err(Reason::general(
            "conversion-under-way",
            format!(
                "a conversion to {} is {} on {m}: finish it first (btrfs-lab convert {m} --resume, or --cancel it)",
                b.targets().describe(),
                if b.running { "running" } else { "paused" }
            ),
            false,
        ));
    }
    Ok(Some(if b.running || b.cancelling {
        Existing::Follow
    } else {
        Existing::Resume
    }))
}

/// A step's kernel filter (one type; system takes metadata's).
fn filter_of(step: &Step) -> TypeFilter {
    let mut f = TypeFilter {
        profiles: Some(btrfs::convert_target_bits(step.profile)),
        ..TypeFilter::default()
    };
    match step.filter {
        Filter::Stripes { min, max } => f.stripes = Some((min, max)),
        Filter::Devid { devid, limit } => {
            f.devid = Some(devid);
            f.limit = Some(limit);
        }
    }
    f
}

/// The balance the steps ask of the kernel.
pub fn args_of(steps: &[Step]) -> BalanceArgs {
    let of = |k: Kind| steps.iter().find(|s| s.kind == k).map(filter_of);
    BalanceArgs {
        data: of(Kind::Data),
        metadata: of(Kind::Metadata),
        system: of(Kind::Metadata),
        force: false,
    }
}

/// The btrfs-progs command that runs the same balance (it sends
/// metadata's filters for system too).
pub fn equivalent_command(steps: &[Step], mount_point: &Path) -> Vec<String> {
    let mut cmd: Vec<String> = vec!["btrfs".into(), "balance".into(), "start".into()];
    for (flag, kind) in [("-d", Kind::Data), ("-m", Kind::Metadata)] {
        if let Some(s) = steps.iter().find(|s| s.kind == kind) {
            cmd.push(format!(
                "{flag}profiles={},{}",
                s.profile.name(),
                s.filter.describe()
            ));
        }
    }
    cmd.push(mount_point.display().to_string());
    cmd
}

/// The plan on `state` and its chunks (`None`: unreadable), pure: the
/// steps and spreads, the refusals. `resume`: `--resume` was asked for.
pub fn plan_on(
    state: &FsState,
    layout: Option<&Layout>,
    resume: bool,
) -> (BalancePlan, Option<Planned>) {
    let m = state.mount_point.display();
    let members = members(state);
    let mut refused = Vec::new();
    for d in state.devices.iter().filter(|d| d.path.is_empty()) {
        refused.push(Reason::general(
            "missing-device",
            format!(
                "device {} is missing: replace it (btrfs-lab device replace {m} {} NEW_DEVICE) or remove it (btrfs-lab device remove {m} missing) first",
                d.devid, d.devid
            ),
            false,
        ));
    }
    let existing = match existing(state) {
        Ok(e) => e,
        Err(r) => {
            refused.push(r);
            None
        }
    };
    if resume && existing != Some(Existing::Resume) && refused.is_empty() {
        refused.push(Reason::general(
            "nothing-paused",
            format!(
                "no paused balance to resume on {m}{}",
                if existing == Some(Existing::Follow) {
                    " (one is running)"
                } else {
                    ""
                }
            ),
            false,
        ));
    }
    let mut planned = None;
    match layout {
        Some(l) => match plan::plan(l, &members) {
            Ok(p) => planned = Some(p),
            Err(s) => refused.push(Reason::general(
                "no-space-during-balance",
                format!(
                    "not enough space to balance: relocating chunk {} of {} ({} {} at {}), {}; the kernel's balance would stop there with ENOSPC (no space left on device); add a device (btrfs-lab device add) or delete data first",
                    s.step,
                    s.steps,
                    s.kind.name(),
                    s.from,
                    s.logical,
                    s.why("")
                ),
                false,
            )),
        },
        // While a balance runs its chunks are in flux: following it needs
        // no plan.
        None if existing == Some(Existing::Follow) => {}
        None => refused.push(Reason::general(
            "chunks-unreadable",
            format!(
                "cannot read the chunks of {m} (mixed block groups, or a balance being cancelled): nothing to plan on"
            ),
            false,
        )),
    }
    let (before, after, steps) = match &planned {
        Some(p) => (p.before.clone(), p.after.clone(), p.steps.clone()),
        None => Default::default(),
    };
    let plan = BalancePlan {
        mount_point: state.mount_point.clone(),
        devices: state
            .devices
            .iter()
            .map(|d| Member {
                devid: d.devid,
                path: d.path.clone(),
                size: d.size,
                missing: d.path.is_empty(),
            })
            .collect(),
        existing,
        chunks: steps.iter().map(|s| s.chunks).sum(),
        used_bytes: steps.iter().map(|s| s.used_bytes).sum(),
        estimate: None,
        equivalent_command: if existing.is_none() && !steps.is_empty() {
            equivalent_command(&steps, &state.mount_point)
        } else {
            Vec::new()
        },
        before,
        after,
        steps,
        refused,
    };
    (plan, planned)
}

/// The error of a refused plan (`None`: it may go ahead); `doing` starts
/// its line (`cannot balance`).
pub fn refusal(plan: &BalancePlan, doing: &str) -> Option<Error> {
    let first = plan.refused.first()?;
    let kind = if first.code == "no-space-during-balance" {
        ErrorKind::NoSpace
    } else {
        ErrorKind::Refused
    };
    let mut e = Error::new(kind, format!("{doing}: {}", first.message));
    if plan.refused.len() > 1 {
        let rest: Vec<&str> = plan.refused[1..]
            .iter()
            .map(|r| r.message.as_str())
            .collect();
        e = e.with_hint(format!("also: {}", rest.join("; also: ")));
    }
    Some(e)
}

/// Nothing to relocate and no balance to resume or follow.
pub fn nothing_to_do(plan: &BalancePlan) -> bool {
    plan.existing.is_none() && plan.steps.is_empty()
}

/// What a plan with nothing to do says.
pub fn nothing_to_balance(plan: &BalancePlan) -> String {
    crate::report::text::wrap_hanging(
        &format!(
            "nothing to balance: every profile's chunks are as wide as the array and \
             evenly spread over its {} devices",
            plan.devices.len()
        ),
        "",
        "  ",
    )
}

/// The balance planned on `state` as it will be once `new` devices (path,
/// size) are added (pure): `device add --then-balance`'s plan.
pub fn plan_after_add(
    state: &FsState,
    layout: Option<&Layout>,
    new: &[(String, u64)],
) -> BalancePlan {
    let mut future = state.clone();
    let next_id = state.devices.iter().map(|d| d.devid).max().unwrap_or(0);
    let mut layout = layout.cloned();
    for (i, (path, size)) in new.iter().enumerate() {
        future.devices.push(crate::operation::state::MemberDevice {
            devid: next_id + 1 + i as u64,
            path: path.clone(),
            size: *size,
            allocated: 0,
        });
        if let Some(l) = layout.as_mut() {
            // The first MiB of a device is never allocated.
            l.free.push(size.saturating_sub(1 << 20));
            l.total_bytes += size;
        }
    }
    plan_on(&future, layout.as_ref(), false).0
}

/// Logical bytes of the chunks a balance relocates, by logical start.
fn selected_used(layout: &Layout, planned: &Planned) -> BTreeMap<u64, u64> {
    layout
        .chunks
        .iter()
        .filter(|c| planned.selected.contains(&c.logical))
        .map(|c| (c.logical, c.used))
        .collect()
}

/// The balance as the run loop sees it: what it relocates and what of
/// that is still where it was (a relocated chunk gets a new logical start).
struct Spreading<'a> {
    root: &'a SysRoot,
    mount_point: &'a Path,
    args: BalanceArgs,
    selected: BTreeMap<u64, u64>,
}

impl Spreading<'_> {
    fn left_of(&self, h: &FsHandle) -> Option<u64> {
        let chunks = h.chunk_records().ok()??;
        Some(
            chunks
                .iter()
                .filter_map(|c| self.selected.get(&c.logical))
                .sum(),
        )
    }
}

impl Job for Spreading<'_> {
    fn args(&self) -> BalanceArgs {
        self.args
    }

    fn remaining(&self, h: &FsHandle) -> u64 {
        self.left_of(h)
            .unwrap_or_else(|| self.selected.values().sum())
    }

    fn is_mine(&self, s: &BalanceStatus) -> bool {
        s.data_target.is_none() && s.meta_target.is_none()
    }

    fn replan(&mut self, h: &FsHandle) -> Result<Option<Outcome>> {
        h.sync()?;
        let state = read_state_at(self.root, h, self.mount_point)?;
        let layout = read_layout(h, &state);
        let (plan, planned) = plan_on(&state, layout.as_ref(), false);
        if let Some(first) = plan.refused.first() {
            return Err(Error::new(
                ErrorKind::Refused,
                format!("cannot balance: {}", first.message),
            )
            .with_hint(
                "the balance that was running ended without finishing; nothing else was started",
            ));
        }
        let (Some(layout), Some(planned)) = (layout, planned) else {
            return Ok(Some(Outcome::Cancelled));
        };
        if planned.steps.is_empty() {
            return Ok(Some(Outcome::Completed));
        }
        self.args = args_of(&planned.steps);
        self.selected = selected_used(&layout, &planned);
        Ok(None)
    }

    fn words(&self) -> Words {
        Words {
            command: "balance",
            job: "balance",
            done: "moved",
        }
    }
}

/// What a balance acts on, held from the plan to the end.
struct Held {
    fs: FsHandle,
    mount_point: PathBuf,
    layout: Option<Layout>,
    planned: Option<Planned>,
}

/// `balance MOUNT` (`resume`: `--resume`).
pub struct Balance {
    mount: PathBuf,
    resume: bool,
    rates: Option<RateStore>,
    held: Option<Held>,
}

impl Balance {
    /// Evens out the btrfs at `mount` (as the user named it); the rate it
    /// runs at is kept under `state_dir` (`None`: not kept).
    pub fn new(mount: PathBuf, resume: bool, state_dir: Option<&Path>) -> Self {
        Balance {
            mount,
            resume,
            rates: state_dir.map(RateStore::new),
            held: None,
        }
    }

    /// The plan's time at the rate measured here before (a store that
    /// cannot be read is said, and the plan has none).
    fn estimate(&self, plan: &mut BalancePlan, fsid: &str, ui: &dyn Ui) {
        let Some(rates) = &self.rates else {
            return;
        };
        match rates.load(fsid) {
            Ok(Some(m)) if plan.used_bytes > 0 => {
                plan.estimate = Some(Estimate::of(plan.used_bytes, &m));
            }
            Ok(_) => {}
            Err(e) => ui.warn(
                &format!("{}: the plan has no time estimate", e.message()),
                e.hint().unwrap_or(""),
            ),
        }
    }

    fn held(&self) -> &Held {
        self.held.as_ref().expect("balance: planned before it runs")
    }

    /// The balance of the filesystem held as `fs` at `mount_point`, planned
    /// on it as it is now (`device add --then-balance`, once the add is
    /// done).
    pub fn held_by(fs: FsHandle, mount_point: &Path) -> Result<(Self, BalancePlan)> {
        let state = read_state_at(&SysRoot::host(), &fs, mount_point)?;
        let layout = read_layout(&fs, &state);
        let (plan, planned) = plan_on(&state, layout.as_ref(), false);
        let op = Balance {
            mount: mount_point.to_path_buf(),
            resume: false,
            rates: None,
            held: Some(Held {
                fs,
                mount_point: state.mount_point,
                layout,
                planned,
            }),
        };
        Ok((op, plan))
    }
}

/// How a balance run ended, read again from the kernel.
#[derive(Debug)]
pub struct Finished {
    /// Its record.
    pub result: BalanceResult,
}

impl Operation for Balance {
    type Plan = BalancePlan;
    type Result = Finished;
    type Record = BalanceRecord;

    fn needs_root(&self) -> &'static str {
        "balancing needs root"
    }

    fn plan(&mut self, ui: &dyn Ui) -> Result<BalancePlan> {
        let (fs, state) = open_state(&SysRoot::host(), &self.mount)?;
        // Committed first: the block groups' usage then counts what was
        // written just before (a file not yet in a transaction counts 0).
        fs.sync()?;
        let state = read_state_at(&SysRoot::host(), &fs, &state.mount_point)?;
        let layout = read_layout(&fs, &state);
        let (mut plan, planned) = plan_on(&state, layout.as_ref(), self.resume);
        self.estimate(&mut plan, &state.fsid, ui);
        self.held = Some(Held {
            fs,
            mount_point: state.mount_point,
            layout,
            planned,
        });
        Ok(plan)
    }

    fn plan_record(&self, plan: &BalancePlan) -> BalanceRecord {
        BalanceRecord::Plan {
            plan: Some(Box::new(plan.clone())),
            add: None,
        }
    }

    fn verdict(&self, plan: &BalancePlan) -> Verdict {
        if let Some(e) = refusal(plan, "cannot balance") {
            return Verdict::Refused(e);
        }
        if nothing_to_do(plan) {
            return Verdict::NothingToDo(nothing_to_balance(plan));
        }
        Verdict::Go
    }

    fn question(&self, plan: &BalancePlan) -> String {
        match plan.existing {
            Some(Existing::Resume) => "Resume the paused balance?".to_owned(),
            _ => "Start the balance?".to_owned(),
        }
    }

    fn ask(&self, plan: &BalancePlan) -> bool {
        plan.existing != Some(Existing::Follow)
    }

    fn confirmed_pause(&self) -> Option<&'static str> {
        Some("balance-confirmed")
    }

    fn recheck(&self) -> Result<()> {
        self.held().fs.check_path_still_here(&self.mount)
    }

    fn look(&self, plan: &BalancePlan) -> String {
        look(&plan.mount_point)
    }

    fn execute(
        &mut self,
        plan: &BalancePlan,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<Finished> {
        let root = SysRoot::host();
        let held = self.held();
        let m = held.mount_point.display();
        let mut job = Spreading {
            root: &root,
            mount_point: &held.mount_point,
            args: args_of(&plan.steps),
            selected: match (&held.layout, &held.planned) {
                (Some(l), Some(p)) => selected_used(l, p),
                _ => BTreeMap::new(),
            },
        };
        ui.started();
        let mut sink: Sink<'_, BalanceRecord> = Sink::new(ui, None, "balance", "balancing");
        let mut begin = match plan.existing {
            Some(Existing::Resume) => {
                sink.event(balance_run::Event::Notice(format!(
                    "a paused balance exists on {m}: resuming it"
                )));
                Begin::Resume
            }
            Some(Existing::Follow) => {
                sink.event(balance_run::Event::Notice(format!(
                    "a balance is already running on {m}: following it until it ends"
                )));
                Begin::Follow
            }
            None => Begin::New,
        };
        let started = Instant::now();
        let mut moved = 0u64;
        let outcome = loop {
            let left_before = job.remaining(&held.fs);
            let outcome = balance_run::run_balance(&held.fs, &mut job, begin, signals, &mut |e| {
                let running = e == balance_run::Event::Running;
                sink.event(e);
                if running {
                    crate::operation::hooks::pause_point("balance-running");
                }
            });
            let outcome = match outcome {
                Ok(o) => o,
                Err(e) => {
                    sink.finish();
                    return Err(e);
                }
            };
            moved += left_before.saturating_sub(job.remaining(&held.fs));
            // A resumed or followed balance ran with its own filters, and
            // the kernel's resume does not always relocate every chunk
            // they select (measured on 6.x: a raid0 chunk left 3 wide of
            // 4 after a pause and a resume, by btrfs-progs' resume too):
            // what is left is planned again and balanced now.
            if outcome == Outcome::Completed
                && begin != Begin::New
                && job.replan(&held.fs)?.is_none()
            {
                sink.event(balance_run::Event::Notice(format!(
                    "the resumed balance left chunks to even out on {m}: balancing them now"
                )));
                begin = Begin::New;
                continue;
            }
            break outcome;
        };
        sink.finish();
        let remaining = job.remaining(&held.fs);
        let seconds = started.elapsed().as_secs_f64();
        if outcome == Outcome::Cancelled {
            return Err(Error::new(
                ErrorKind::State,
                format!("the balance on {m} was cancelled by someone else"),
            )
            .with_hint(format!(
                "run `btrfs-lab balance {m}` again to finish it: what was moved stays moved"
            )));
        }
        // Read again: what the kernel left (committed first, so the block
        // groups' usage counts what the balance freed).
        held.fs.sync()?;
        let state = read_state_at(&root, &held.fs, &held.mount_point)?;
        let layout = if balance_in_flux(&state) {
            None
        } else {
            read_layout(&held.fs, &state)
        };
        let (now, _) = plan_on(&state, layout.as_ref(), false);
        let after = match &layout {
            Some(l) => plan::spread(l, &members(&state)),
            None => Vec::new(),
        };
        Ok(Finished {
            result: BalanceResult {
                outcome,
                after,
                left: now.steps,
                bytes_remaining: (outcome == Outcome::Paused).then_some(remaining),
                bytes_moved: moved,
                seconds,
            },
        })
    }

    fn verify(&mut self, _plan: &BalancePlan, finished: &Finished, ui: &dyn Ui) -> Result<()> {
        let Some(rates) = &self.rates else {
            return Ok(());
        };
        let r = &finished.result;
        if let Err(e) = rates.keep(self.held().fs.fsid(), r.bytes_moved, r.seconds) {
            ui.warn(
                &format!("{}: the next plan has no time estimate", e.message()),
                e.hint().unwrap_or(""),
            );
        }
        Ok(())
    }

    fn result_record(&self, finished: &Finished) -> Option<BalanceRecord> {
        Some(BalanceRecord::Result(finished.result.clone()))
    }

    fn status(&self, finished: &Finished) -> u8 {
        status_of(finished)
    }
}

/// The step after a change of the devices (replace, remove), read from the
/// filesystem as it is now: `btrfs-lab balance MOUNT` when a balance
/// planned now would relocate something; `None` when the array is even,
/// or its chunks cannot be read.
pub fn next_step(fs: &FsHandle, mount_point: &Path) -> Option<String> {
    let state = read_state_at(&SysRoot::host(), fs, mount_point).ok()?;
    let layout = read_layout(fs, &state)?;
    let (plan, _) = plan_on(&state, Some(&layout), false);
    if !plan.refused.is_empty() || plan.steps.is_empty() {
        return None;
    }
    Some(format!(
        "next, to spread the data that is there over all devices ({} chunk{}, {} to move): btrfs-lab balance {}",
        plan.chunks,
        if plan.chunks == 1 { "" } else { "s" },
        crate::parse::size::format_iec(plan.used_bytes),
        state.mount_point.display()
    ))
}

/// The exit status of how a balance ended.
pub fn status_of(finished: &Finished) -> u8 {
    match finished.result.outcome {
        Outcome::Completed => exit::OK,
        Outcome::Paused => exit::INTERRUPTED,
        Outcome::Cancelled => exit::ERROR,
    }
}

/// `balance MOUNT --status`: the balance that exists and how even the
/// array is (root: the chunk tree).
pub fn status(mount: &Path) -> Result<StatusReport> {
    crate::operation::need_root("reading the chunks needs root")?;
    let (fs, state) = open_state(&SysRoot::host(), mount)?;
    let layout = read_layout(&fs, &state);
    let (plan, _) = plan_on(&state, layout.as_ref(), false);
    Ok(StatusReport {
        mount_point: state.mount_point.clone(),
        balance: state.balance,
        spread: plan.before,
        steps: plan.steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::Profile;

    #[test]
    fn the_kernel_gets_each_steps_filter_and_system_takes_metadatas() {
        let steps = vec![
            Step {
                kind: Kind::Data,
                profile: Profile::Raid0,
                filter: Filter::Stripes { min: 1, max: 3 },
                chunks: 2,
                used_bytes: 10,
            },
            Step {
                kind: Kind::Metadata,
                profile: Profile::Raid1,
                filter: Filter::Devid { devid: 2, limit: 3 },
                chunks: 3,
                used_bytes: 5,
            },
        ];
        let a = args_of(&steps);
        let d = a.data.unwrap();
        assert_eq!(d.stripes, Some((1, 3)));
        assert_eq!(d.profiles, Some(btrfs::convert_target_bits(Profile::Raid0)));
        assert_eq!((d.devid, d.limit, d.convert), (None, None, None));
        let m = a.metadata.unwrap();
        assert_eq!((m.devid, m.limit, m.stripes), (Some(2), Some(3), None));
        assert_eq!(a.system, a.metadata);
        assert!(!a.force);
        assert_eq!(
            equivalent_command(&steps, Path::new("/mnt/a b")).join(" "),
            "btrfs balance start -dprofiles=raid0,stripes=1..3 -mprofiles=raid1,devid=2,limit=3 /mnt/a b"
        );
    }
}
