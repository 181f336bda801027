//! `reclaim MOUNT`: gives allocated but little-used data chunks back to the
//! unallocated pool, for the ENOSPC where metadata cannot get a new chunk
//! while data chunks hold free space. A filtered balance raised step by
//! step (`-dusage=0`, 5, 10, … up to `--max-usage`), as
//! btrfs-balance-least-used and btrfsmaintenance do by hand, stopping as
//! soon as the goal is reached: by default room for one full metadata
//! chunk (what the kernel needs to grow metadata), or `--goal SIZE` of
//! unallocated space.
//!
//! The plan comes first ([`plan`], pure: [`model::reclaim`]'s estimate
//! of what each step frees, from every chunk's block group item); each
//! step is planned again from the chunks as they are when it starts, so a
//! step that would relocate nothing is skipped, and running reclaim again
//! after an interruption goes on where it stopped (what was freed stays
//! freed). Metadata is balanced only with `--with-metadata`: metadata chunks'
//! free space is where new metadata goes, and relocating them needs
//! metadata space itself.
//!
//! On SIGINT/SIGTERM/SIGHUP the running step is cancelled after its
//! current chunk (BALANCE_CTL CANCEL) and the process waits until the
//! kernel has stopped: it never exits while the balance ioctl runs in it.

pub mod operation;

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::alloc;
use crate::model::profile::Profile;
use crate::model::reclaim::{self, ChunkUse};
use crate::model::space::BgType;
use crate::operation::state::{FsState, open_state};
use crate::parse::size::format_iec;
use crate::sys::fs::root::SysRoot;
use crate::sys::fs::state::StateRoom;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::ioctl::{BalanceEnd, BalanceState, UsageBalanceEnd};
use crate::sys::kernel::signals::{OperationSignals, Received};
use crate::sys::tools::display_argv;

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReclaimRequest {
    /// `--goal SIZE`: unallocated bytes (all devices) to reach; `None`:
    /// room for a full metadata chunk.
    pub goal_bytes: Option<u64>,
    /// `--max-usage N`: the last `-dusage` value tried.
    pub max_usage: u8,
    /// `--with-metadata`: metadata chunks too, after data, when data alone does
    /// not reach the goal.
    pub metadata: bool,
}

/// The chunk type a step relocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    /// `-dusage=N`.
    Data,
    /// `-musage=N` (system chunks go with it).
    Metadata,
}

impl StepKind {
    fn flag(self) -> &'static str {
        match self {
            StepKind::Data => "-dusage",
            StepKind::Metadata => "-musage",
        }
    }
}

/// What the run stops at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Goal {
    /// Room for one full metadata chunk: `devices` devices with
    /// `bytes_per_device` unallocated each.
    MetadataChunk {
        /// The metadata profile.
        profile: Profile,
        /// Devices a chunk needs.
        devices: usize,
        /// Unallocated bytes each of them needs.
        bytes_per_device: u64,
    },
    /// `--goal`: this much unallocated space over all devices.
    Unallocated {
        /// Bytes.
        bytes: u64,
    },
}

impl Goal {
    /// Whether the devices' unallocated space reaches it.
    pub fn reached(&self, unalloc: &[u64]) -> bool {
        match self {
            Goal::MetadataChunk {
                devices,
                bytes_per_device,
                ..
            } => unalloc.iter().filter(|&&u| u >= *bytes_per_device).count() >= *devices,
            Goal::Unallocated { bytes } => unalloc.iter().sum::<u64>() >= *bytes,
        }
    }

    /// Raw bytes the devices need to gain, at least (a sum: where the
    /// freed chunks lie decides the rest).
    fn missing_raw(&self, unalloc: &[u64]) -> u64 {
        match self {
            Goal::MetadataChunk {
                devices,
                bytes_per_device,
                ..
            } => {
                let mut v = unalloc.to_vec();
                v.sort_unstable_by(|a, b| b.cmp(a));
                v.iter()
                    .take(*devices)
                    .map(|&u| bytes_per_device.saturating_sub(u))
                    .sum()
            }
            Goal::Unallocated { bytes } => bytes.saturating_sub(unalloc.iter().sum()),
        }
    }
}

/// One device's unallocated space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceRoom {
    /// btrfs device id.
    pub devid: u64,
    /// Path.
    pub path: String,
    /// Bytes not allocated to any chunk.
    pub unallocated_bytes: u64,
}

/// One planned step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlannedStep {
    /// Data or metadata.
    pub kind: StepKind,
    /// The filter's value (percent): chunks used below it are relocated.
    pub usage: u8,
    /// Chunks it relocates (with the steps before it).
    pub chunks: usize,
    /// Used bytes it moves (logical, with the steps before).
    pub moves_bytes: u64,
    /// Raw bytes it gives back to the unallocated pool (with the steps
    /// before), as [`reclaim::step`] estimates it.
    pub frees_raw_bytes: u64,
    /// What it runs, as the btrfs-progs command that does the same.
    pub command: Vec<String>,
}

/// The plan of a reclaim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReclaimPlan {
    /// Mount point.
    pub mount_point: PathBuf,
    /// Filesystem UUID.
    pub fsid: String,
    /// Data profile (of new data chunks).
    pub data_profile: Option<Profile>,
    /// Metadata profile.
    pub metadata_profile: Option<Profile>,
    /// Each device's unallocated space now.
    pub devices: Vec<DeviceRoom>,
    /// Their sum.
    pub unallocated_bytes: u64,
    /// What the run stops at.
    pub goal: Goal,
    /// It is reached already: nothing to do.
    pub goal_reached: bool,
    /// The last `-dusage` value tried.
    pub max_usage: u8,
    /// Metadata chunks are relocated too (`--with-metadata`).
    pub metadata: bool,
    /// The steps, in order.
    pub steps: Vec<PlannedStep>,
    /// The unallocated space the steps give, as estimated.
    pub predicted_unallocated_bytes: u64,
    /// The prediction reaches the goal.
    pub predicted_to_reach_goal: bool,
    /// What the plan adds in words (why not metadata, what else would help).
    pub notes: Vec<String>,
    /// Steps an earlier run ran on these very chunks for nothing: their
    /// chunks count as full in this plan (not moved again for nothing).
    #[serde(default)]
    pub set_aside: Vec<FruitlessStep>,
}

/// One step as it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepRun {
    /// Data or metadata.
    pub kind: StepKind,
    /// The filter's value.
    pub usage: u8,
    /// Chunks the kernel relocated (its counter); 0 when skipped.
    pub chunks_relocated: u64,
    /// No chunk was below the value when the step came: not run.
    pub skipped: bool,
    /// Unallocated bytes before it (all devices).
    pub unallocated_before: u64,
    /// After it.
    pub unallocated_after: u64,
}

/// How a reclaim ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReclaimOutcome {
    /// The goal is reached.
    Reached,
    /// Every step ran and the goal is not reached.
    NotReached,
    /// A step ran out of space (ENOSPC): what it moved stays moved.
    NoSpace,
    /// Stopped by a signal after the current chunk; run it again to go on.
    Interrupted,
    /// Someone else cancelled the balance.
    Cancelled,
}

/// The result of a reclaim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReclaimResult {
    /// How it ended.
    pub outcome: ReclaimOutcome,
    /// The goal.
    pub goal: Goal,
    /// The steps that were reached, in order.
    pub steps: Vec<StepRun>,
    /// Unallocated bytes (all devices) before the run.
    pub unallocated_before: u64,
    /// After it.
    pub unallocated_after: u64,
    /// Each device after it.
    pub devices: Vec<DeviceRoom>,
    /// The steps that ran to their end and freed nothing: remembered in
    /// the state directory, so the next run does not move the same data
    /// again for nothing ([`ReclaimPlan::set_aside`]).
    #[serde(default)]
    pub fruitless: Vec<FruitlessStep>,
}

/// One JSON Lines record of `reclaim --json`, tagged by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum ReclaimRecord {
    /// The plan (the only record of `--dry-run`).
    Plan {
        /// The plan.
        plan: ReclaimPlan,
    },
    /// A step starts.
    Step {
        /// Data or metadata.
        kind: StepKind,
        /// The filter's value.
        usage: u8,
        /// Chunks below it now.
        chunks: usize,
    },
    /// About twice a second while a step runs.
    Progress {
        /// The filter's value.
        usage: u8,
        /// Chunks the kernel expects to relocate in this step.
        chunks_expected: u64,
        /// Chunks relocated.
        chunks_done: u64,
        /// Logical bytes of the chunks to relocate (estimated from the
        /// lengths of those below the value).
        bytes_expected: u64,
        /// Of the chunks relocated.
        bytes_done: u64,
    },
    /// A step ended.
    StepDone {
        /// How it went.
        step: StepRun,
    },
    /// A signal arrived: stopping after the current chunk.
    Stopping,
    /// The last record.
    Result {
        /// The result.
        result: ReclaimResult,
    },
}

/// Everything the plan is made from, read from the held filesystem.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The state read (devices, spaces, balance, kernel, features).
    pub state: FsState,
    /// Data chunks' usage.
    pub data_chunks: Vec<ChunkUse>,
    /// Metadata chunks' usage (read with `--with-metadata` only).
    pub metadata_chunks: Vec<ChunkUse>,
    /// sysfs' metadata chunk size.
    pub metadata_chunk_sysfs: Option<u64>,
    /// Steps an earlier run ran here for nothing ([`Memory`]): set by the
    /// caller from the state directory, empty when there is none.
    pub fruitless: Vec<FruitlessStep>,
}

/// A step that ran to its end and gave nothing back to the unallocated
/// pool (the moved data took new chunks as large as those it left:
/// typically large extents that fit no other chunk's holes). Remembered
/// in the state directory so that the next run does not move the same
/// data again for nothing while the chunks are as it left them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FruitlessStep {
    /// Data or metadata.
    pub kind: StepKind,
    /// The filter's value.
    pub usage: u8,
    /// Chunks it relocated.
    pub chunks_relocated: u64,
    /// Unallocated bytes (all devices) it gained: 0 or less.
    pub gained_bytes: i64,
    /// The chunks below `usage` right after it (length and used bytes,
    /// sorted): the next run recognizes them by these.
    pub chunks_after: Vec<ChunkUse>,
    /// When it ended (seconds since the epoch).
    pub at: u64,
}

/// What `reclaim` remembers of a filesystem between runs (in the state
/// directory's `reclaim/FSID.json`): the steps of the last run that freed
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Memory {
    /// Filesystem UUID.
    pub fsid: String,
    /// The last run's fruitless steps.
    pub fruitless: Vec<FruitlessStep>,
}

/// Where [`Memory`] is kept: `STATE_DIR/reclaim/FSID.json` (a
/// [`StateRoom`]).
pub struct MemoryStore {
    room: StateRoom,
}

impl MemoryStore {
    /// `state_dir`/reclaim.
    pub fn new(state_dir: &std::path::Path) -> Self {
        MemoryStore {
            room: StateRoom::new(state_dir, "reclaim"),
        }
    }

    fn name(fsid: &str) -> String {
        format!("{fsid}.json")
    }

    /// What was remembered of `fsid` (nothing when there is no file); a
    /// file that is not a memory of `fsid` is an error the caller warns of.
    pub fn load(&self, fsid: &str) -> Result<Memory> {
        let name = Self::name(fsid);
        let not_ours = || {
            Error::new(
                ErrorKind::Parse,
                format!(
                    "{} is not a reclaim memory of {fsid}",
                    self.room.file(&name).display()
                ),
            )
            .with_hint("remove it; the next reclaim plans as if it had never run")
        };
        match self.room.load::<Memory>(&name) {
            Ok(Some(m)) if m.fsid == fsid => Ok(m),
            Ok(Some(_)) => Err(not_ours()),
            Err(e) if e.kind() == ErrorKind::Parse => Err(not_ours()),
            Ok(None) => Ok(Memory {
                fsid: fsid.to_owned(),
                fruitless: Vec::new(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Replaces what is remembered of `m.fsid` atomically.
    pub fn save(&self, m: &Memory) -> Result<()> {
        self.room.save(&Self::name(&m.fsid), m)
    }
}

/// The chunks below `usage`, sorted: what a [`FruitlessStep`] is
/// recognized by.
fn below_sorted(chunks: &[ChunkUse], usage: u8) -> Vec<ChunkUse> {
    let mut v: Vec<ChunkUse> = chunks
        .iter()
        .filter(|c| reclaim::step(std::slice::from_ref(c), usage).chunks == 1)
        .copied()
        .collect();
    v.sort_unstable_by_key(|c| (c.length, c.used));
    v
}

/// The step of `run` remembered as fruitless, given the chunks after it
/// (pure): one that ran to its end and gained nothing. A step stopped by a
/// signal, cancelled or out of space is not judged.
pub fn fruitless(
    run: &StepRun,
    ended_normally: bool,
    chunks_after: &[ChunkUse],
    at: u64,
) -> Option<FruitlessStep> {
    let gained = run.unallocated_after as i128 - run.unallocated_before as i128;
    (ended_normally && !run.skipped && run.chunks_relocated > 0 && gained <= 0).then(|| {
        FruitlessStep {
            kind: run.kind,
            usage: run.usage,
            chunks_relocated: run.chunks_relocated,
            gained_bytes: gained.clamp(i128::from(i64::MIN), 0) as i64,
            chunks_after: below_sorted(chunks_after, run.usage),
            at,
        }
    })
}

/// The chunks as the estimate takes them: those of a remembered fruitless
/// step count as full while they are exactly as it left them (the same
/// chunks below its value), so no step is planned for them alone and no
/// step counts on them to free space. Returns the steps that applied.
fn set_aside(
    chunks: &[ChunkUse],
    kind: StepKind,
    fruitless: &[FruitlessStep],
) -> (Vec<ChunkUse>, Vec<FruitlessStep>) {
    let mut out = chunks.to_vec();
    let mut applied = Vec::new();
    for f in fruitless.iter().filter(|f| f.kind == kind) {
        if f.chunks_after.is_empty() || below_sorted(chunks, f.usage) != f.chunks_after {
            continue;
        }
        for c in out
            .iter_mut()
            .filter(|c| reclaim::step(std::slice::from_ref(*c), f.usage).chunks == 1)
        {
            c.used = c.length;
        }
        applied.push(f.clone());
    }
    (out, applied)
}

fn unallocated(state: &FsState) -> Vec<u64> {
    state
        .devices
        .iter()
        .filter(|d| !d.path.is_empty())
        .map(|d| d.unallocated())
        .collect()
}

fn rooms(state: &FsState) -> Vec<DeviceRoom> {
    state
        .devices
        .iter()
        .filter(|d| !d.path.is_empty())
        .map(|d| DeviceRoom {
            devid: d.devid,
            path: d.path.clone(),
            unallocated_bytes: d.unallocated(),
        })
        .collect()
}

fn chunk_usage(fs: &FsHandle, state: &FsState, metadata: bool) -> Result<Vec<ChunkUse>> {
    let bgt = state.features.iter().any(|f| f == "block_group_tree");
    fs.chunk_usage(bgt, metadata)?.ok_or_else(|| {
        Error::new(
            ErrorKind::Permission,
            format!(
                "cannot read the block groups of {}: reclaim needs root",
                state.mount_point.display()
            ),
        )
        .with_hint("run it as root, e.g. with sudo")
    })
}

/// Opens the filesystem and reads what the plan needs; refuses (changing
/// nothing) when a balance or another exclusive operation exists, or the
/// filesystem is read-only or degraded.
pub fn open(root: &SysRoot, path: &std::path::Path, metadata: bool) -> Result<(FsHandle, Facts)> {
    let (fs, state) = open_state(root, path)?;
    let m = state.mount_point.display().to_string();
    if fs.read_only() {
        return Err(Error::new(
            ErrorKind::State,
            format!("{m} is mounted read-only: a balance cannot run"),
        )
        .with_hint(format!(
            "remount it read-write (mount -o remount,rw {m}) first"
        )));
    }
    if let Some(b) = state.balance {
        let what = if b.data_target.is_some() || b.metadata_target.is_some() {
            format!("a conversion ({})", b.targets().describe())
        } else {
            "a balance".to_owned()
        };
        return Err(Error::new(
            ErrorKind::Busy,
            format!(
                "{what} is {} on {m}: reclaim runs a balance of its own",
                if b.running { "running" } else { "paused" }
            ),
        )
        .with_hint(format!(
            "let it finish (btrfs-lab convert {m} --status), or cancel it (btrfs-lab convert {m} --cancel), then run reclaim again"
        )));
    }
    if let Some(op) = state
        .exclusive_operation
        .as_deref()
        .filter(|o| *o != "none" && !o.is_empty())
    {
        return Err(Error::new(
            ErrorKind::Busy,
            format!("another exclusive operation ({op}) is running on {m}"),
        )
        .with_hint("wait until it ends, then run reclaim again"));
    }
    if state.devices.iter().any(|d| d.path.is_empty()) {
        return Err(Error::new(
            ErrorKind::Refused,
            format!("{m} has a missing device: relocating chunks now could leave them without their copies"),
        )
        .with_hint(format!("replace the missing device first: btrfs-lab device replace {m} MISSING NEW_DEVICE")));
    }
    let data_chunks = chunk_usage(&fs, &state, false)?;
    let metadata_chunks = if metadata {
        chunk_usage(&fs, &state, true)?
    } else {
        Vec::new()
    };
    let metadata_chunk_sysfs = root
        .read_attr(&root.sys(&format!(
            "fs/btrfs/{}/allocation/metadata/chunk_size",
            state.fsid
        )))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Ok((
        fs,
        Facts {
            state,
            data_chunks,
            metadata_chunks,
            metadata_chunk_sysfs,
            fruitless: Vec::new(),
        },
    ))
}

fn step_command(kind: StepKind, usage: u8, mount: &str) -> Vec<String> {
    vec![
        "btrfs".into(),
        "balance".into(),
        "start".into(),
        format!("{}={usage}", kind.flag()),
        mount.into(),
    ]
}

/// The goal for `req` on `facts`.
fn goal(facts: &Facts, req: &ReclaimRequest, metadata_profile: Option<Profile>) -> Goal {
    if let Some(bytes) = req.goal_bytes {
        return Goal::Unallocated { bytes };
    }
    let unalloc = unallocated(&facts.state);
    let devices_bytes: u64 = facts
        .state
        .devices
        .iter()
        .filter(|d| !d.path.is_empty())
        .map(|d| d.size)
        .sum();
    let p = metadata_profile.unwrap_or(Profile::Single);
    let chunk = alloc::metadata_chunk_size(facts.metadata_chunk_sysfs, devices_bytes);
    let (devices, _, per) = alloc::chunk_room(p, chunk, &unalloc);
    Goal::MetadataChunk {
        profile: p,
        devices,
        bytes_per_device: per,
    }
}

/// The plan (pure).
pub fn plan(facts: &Facts, req: &ReclaimRequest) -> ReclaimPlan {
    let s = &facts.state;
    let m = s.mount_point.display().to_string();
    let data_profile = alloc::new_chunk_profile(&s.profiles(BgType::Data));
    let metadata_profile = alloc::new_chunk_profile(&s.profiles(BgType::Metadata));
    let goal = goal(facts, req, metadata_profile);
    let unalloc = unallocated(s);
    let now: u64 = unalloc.iter().sum();
    let goal_reached = goal.reached(&unalloc);
    let missing = goal.missing_raw(&unalloc);
    let n = unalloc.len();
    let mut steps = Vec::new();
    let mut notes = Vec::new();
    let mut freed = 0u64;
    let (data_chunks, mut set_aside_steps) =
        set_aside(&facts.data_chunks, StepKind::Data, &facts.fruitless);
    let (metadata_chunks, applied) =
        set_aside(&facts.metadata_chunks, StepKind::Metadata, &facts.fruitless);
    set_aside_steps.extend(applied);
    if !goal_reached {
        if let Some(dp) = data_profile {
            let r = alloc::raw_per_logical(dp, n, s.kernel);
            for st in reclaim::plan_steps(&data_chunks, req.max_usage, r, missing) {
                freed = reclaim::raw_of(st.frees_bytes, r);
                steps.push(PlannedStep {
                    kind: StepKind::Data,
                    usage: st.usage,
                    chunks: st.chunks,
                    moves_bytes: st.moves_bytes,
                    frees_raw_bytes: freed,
                    command: step_command(StepKind::Data, st.usage, &m),
                });
            }
        }
        if req.metadata && freed < missing {
            if let Some(mp) = metadata_profile {
                let r = alloc::raw_per_logical(mp, n, s.kernel);
                let before = freed;
                for st in reclaim::plan_steps(&metadata_chunks, req.max_usage, r, missing - before)
                {
                    freed = before + reclaim::raw_of(st.frees_bytes, r);
                    steps.push(PlannedStep {
                        kind: StepKind::Metadata,
                        usage: st.usage,
                        chunks: st.chunks,
                        moves_bytes: st.moves_bytes,
                        frees_raw_bytes: freed,
                        command: step_command(StepKind::Metadata, st.usage, &m),
                    });
                }
            }
        } else if !req.metadata {
            notes.push("metadata chunks are left alone (--with-metadata relocates them too): their free space is where new metadata goes, relocating them needs metadata space itself, and the kernel allocates new ones soon after".to_owned());
        }
    }
    if !goal_reached {
        for f in &set_aside_steps {
            notes.push(format!(
                "{}={} ran here before and freed nothing ({} chunk{} relocated, their data took new chunks as large): its {} chunk{} are as it left them and count as full in this plan (moved again only by a higher step)",
                f.kind.flag(),
                f.usage,
                f.chunks_relocated,
                if f.chunks_relocated == 1 { "" } else { "s" },
                f.chunks_after.len(),
                if f.chunks_after.len() == 1 { "" } else { "s" },
            ));
        }
    }
    let predicted_to_reach_goal = goal_reached || freed >= missing;
    if !goal_reached && !predicted_to_reach_goal {
        let add = display_argv(&["btrfs-lab", "device", "add", &m, "NEW_DEVICE"]);
        // No step at all: the run's warning says so (and what to do),
        // once; a note would only repeat it.
        if !steps.is_empty() {
            notes.push(format!(
                "the steps free about {} of the {} the goal needs (an estimate that counts moved data against the space freed: they may free more); if they fall short, add a device ({add}) or delete files",
                format_iec(freed),
                format_iec(missing)
            ));
        }
    }
    ReclaimPlan {
        mount_point: s.mount_point.clone(),
        fsid: s.fsid.clone(),
        data_profile,
        metadata_profile,
        devices: rooms(s),
        unallocated_bytes: now,
        goal,
        goal_reached,
        max_usage: req.max_usage,
        metadata: req.metadata,
        steps,
        predicted_unallocated_bytes: now + freed,
        predicted_to_reach_goal,
        notes,
        set_aside: if goal_reached {
            Vec::new()
        } else {
            set_aside_steps
        },
    }
}

/// What happens while the reclaim runs.
#[derive(Debug, Clone)]
pub enum Event {
    /// A record for JSON Lines (and the text renderer).
    Record(ReclaimRecord),
    /// A second (or later) signal: still waiting for the kernel.
    StillStopping,
    /// The signal that stops it.
    Stopping(Option<Received>),
}

/// How one balance step ended.
enum StepEnd {
    Done(u64),
    Cancelled { asked: bool, done: u64 },
    NoSpace,
}

/// Runs one usage-filtered balance on a thread of its own, polling for
/// signals and progress; cancels after the current chunk on the first
/// signal and waits until the kernel has stopped.
fn run_step(
    fs: &FsHandle,
    kind: StepKind,
    usage: u8,
    chunk_len: u64,
    signals: &OperationSignals,
    stopping: &mut bool,
    on_event: &mut dyn FnMut(Event),
) -> Result<StepEnd> {
    let canceller = crate::convert::run::Pauser::with(fs, false)?;
    let wh = fs.try_clone()?;
    let (tx, rx) = mpsc::channel();
    let (d, m) = match kind {
        StepKind::Data => (Some(usage), None),
        StepKind::Metadata => (None, Some(usage)),
    };
    let worker = thread::spawn(move || {
        let _ = tx.send(UsageBalanceEnd::of(
            wh.balance(Some(&crate::sys::kernel::btrfs::usage_args(d, m))),
        ));
    });
    if *stopping {
        canceller.pause();
    }
    let mut last = Instant::now();
    let mut done = 0u64;
    let ended = loop {
        match rx.try_recv() {
            Ok(r) => break r,
            Err(mpsc::TryRecvError::Disconnected) => break UsageBalanceEnd::lost(),
            Err(mpsc::TryRecvError::Empty) => {}
        }
        let (n, which) = signals.wait(Duration::from_millis(100));
        if n > 0 {
            if *stopping {
                on_event(Event::StillStopping);
            } else {
                *stopping = true;
                canceller.pause();
                on_event(Event::Stopping(which));
                if n > 1 {
                    on_event(Event::StillStopping);
                }
            }
        }
        if last.elapsed() >= Duration::from_millis(500) {
            last = Instant::now();
            if let Ok(Some(s)) = fs.balance_status()
                && s.state.contains(BalanceState::RUNNING)
            {
                let expected = s.expected.max(s.completed);
                done = s.completed;
                on_event(Event::Record(ReclaimRecord::Progress {
                    usage,
                    chunks_expected: expected,
                    chunks_done: s.completed,
                    bytes_expected: expected * chunk_len,
                    bytes_done: s.completed * chunk_len,
                }));
            }
        }
    };
    let _ = worker.join();
    let _ = canceller.finish();
    if let UsageBalanceEnd::Ended(BalanceEnd::Finished { completed, .. }) = ended {
        // The log ends with the last state.
        on_event(Event::Record(ReclaimRecord::Progress {
            usage,
            chunks_expected: completed,
            chunks_done: completed,
            bytes_expected: completed * chunk_len,
            bytes_done: completed * chunk_len,
        }));
    }
    let m = fs.path().display();
    match ended {
        UsageBalanceEnd::Ended(BalanceEnd::Finished { completed, .. }) => {
            Ok(StepEnd::Done(completed))
        }
        UsageBalanceEnd::Ended(BalanceEnd::BtrfsError(code)) => Err(Error::new(
            ErrorKind::Busy,
            format!(
                "the kernel refused to start the balance on {m}: another exclusive operation (device add or remove, replace, resize) is running (btrfs error {code})"
            ),
        )
        .with_hint("wait until it ends, then run reclaim again")),
        UsageBalanceEnd::Cancelled => Ok(StepEnd::Cancelled {
            asked: *stopping,
            done,
        }),
        UsageBalanceEnd::NoSpace => Ok(StepEnd::NoSpace),
        UsageBalanceEnd::AnotherBalance => Err(Error::new(
            ErrorKind::Busy,
            format!("another balance started on {m} at the same moment"),
        )
        .with_hint(format!(
            "let it finish (btrfs-lab convert {m} --status), then run reclaim again"
        ))),
        UsageBalanceEnd::Failed(e) => Err(crate::convert::run::kernel_failure(fs, e, "reclaim")),
    }
}

/// The devices' unallocated space now, from the kernel.
fn unallocated_now(fs: &FsHandle) -> Result<(Vec<u64>, Vec<DeviceRoom>)> {
    let devices = fs.devices()?;
    let rooms: Vec<DeviceRoom> = devices
        .iter()
        .filter(|d| !d.path.is_empty())
        .map(|d| DeviceRoom {
            devid: d.devid,
            path: d.path.clone(),
            unallocated_bytes: d.total_bytes.saturating_sub(d.bytes_used),
        })
        .collect();
    Ok((rooms.iter().map(|r| r.unallocated_bytes).collect(), rooms))
}

/// Runs the plan's steps on the held filesystem until the goal is
/// reached; each step is checked again against the chunks as they are
/// then (skipped when none is below its value).
pub fn execute(
    fs: &FsHandle,
    facts: &Facts,
    plan: &ReclaimPlan,
    signals: &OperationSignals,
    on_event: &mut dyn FnMut(Event),
) -> Result<ReclaimResult> {
    let (start, _) = unallocated_now(fs)?;
    let before_all: u64 = start.iter().sum();
    let mut runs = Vec::new();
    let mut fruitless_steps = Vec::new();
    let mut stopping = false;
    let mut outcome = if plan.goal.reached(&start) {
        ReclaimOutcome::Reached
    } else {
        ReclaimOutcome::NotReached
    };
    if outcome == ReclaimOutcome::NotReached {
        for (i, st) in plan.steps.iter().enumerate() {
            if i > 0 {
                crate::operation::hooks::pause_point("reclaim-stepped");
                if signals.wait(Duration::from_millis(1)).0 > 0 && !stopping {
                    stopping = true;
                    on_event(Event::Stopping(None));
                }
            }
            if stopping {
                outcome = ReclaimOutcome::Interrupted;
                break;
            }
            let (u, _) = unallocated_now(fs)?;
            let before: u64 = u.iter().sum();
            let now = chunk_usage(fs, &facts.state, st.kind == StepKind::Metadata)?;
            let below = reclaim::step(&now, st.usage).chunks;
            let len: u64 = now
                .iter()
                .filter(|c| reclaim::step(std::slice::from_ref(c), st.usage).chunks == 1)
                .map(|c| c.length)
                .sum();
            let chunk_len = len / below.max(1) as u64;
            if below == 0 {
                let run = StepRun {
                    kind: st.kind,
                    usage: st.usage,
                    chunks_relocated: 0,
                    skipped: true,
                    unallocated_before: before,
                    unallocated_after: before,
                };
                on_event(Event::Record(ReclaimRecord::StepDone { step: run.clone() }));
                runs.push(run);
                continue;
            }
            on_event(Event::Record(ReclaimRecord::Step {
                kind: st.kind,
                usage: st.usage,
                chunks: below,
            }));
            let end = run_step(
                fs,
                st.kind,
                st.usage,
                chunk_len,
                signals,
                &mut stopping,
                on_event,
            )?;
            let (u, _) = unallocated_now(fs)?;
            let after: u64 = u.iter().sum();
            // A cancelled balance's counters are gone with it: the last
            // ones seen.
            let relocated = match end {
                StepEnd::Done(n) | StepEnd::Cancelled { done: n, .. } => n,
                StepEnd::NoSpace => 0,
            };
            let run = StepRun {
                kind: st.kind,
                usage: st.usage,
                chunks_relocated: relocated,
                skipped: false,
                unallocated_before: before,
                unallocated_after: after,
            };
            on_event(Event::Record(ReclaimRecord::StepDone { step: run.clone() }));
            let ended_normally = matches!(end, StepEnd::Done(_)) && !stopping;
            if ended_normally && after <= before {
                let chunks_after = chunk_usage(fs, &facts.state, st.kind == StepKind::Metadata)?;
                fruitless_steps.extend(fruitless(&run, true, &chunks_after, epoch_now()));
            }
            runs.push(run);
            if plan.goal.reached(&u) {
                outcome = ReclaimOutcome::Reached;
                break;
            }
            match end {
                StepEnd::Done(_) if stopping => {
                    outcome = ReclaimOutcome::Interrupted;
                    break;
                }
                StepEnd::Done(_) => {}
                StepEnd::Cancelled { asked: true, .. } => {
                    outcome = ReclaimOutcome::Interrupted;
                    break;
                }
                StepEnd::Cancelled { asked: false, .. } => {
                    outcome = ReclaimOutcome::Cancelled;
                    break;
                }
                StepEnd::NoSpace => {
                    outcome = ReclaimOutcome::NoSpace;
                    break;
                }
            }
        }
    }
    fs.check_path_still_here(fs.path())?;
    let (u, devices) = unallocated_now(fs)?;
    if plan.goal.reached(&u) {
        outcome = ReclaimOutcome::Reached;
    }
    Ok(ReclaimResult {
        outcome,
        goal: plan.goal.clone(),
        steps: runs,
        unallocated_before: before_all,
        unallocated_after: u.iter().sum(),
        devices,
        fruitless: fruitless_steps,
    })
}

fn epoch_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Remembers `result`'s fruitless steps for the next run (replacing what
/// was remembered: an earlier run's steps were planned again by this one).
/// An interrupted run remembers what it had learnt and keeps nothing older.
pub fn remember(store: &MemoryStore, fsid: &str, result: &ReclaimResult) -> Result<()> {
    store.save(&Memory {
        fsid: fsid.to_owned(),
        fruitless: result.fruitless.clone(),
    })
}

/// Runs [`execute`] and tells `ui` how it goes: each step, progress (a bar
/// on a terminal, a line every few seconds otherwise, JSON Lines records
/// with `--json`), stopping, and the result as the last record.
pub fn execute_with_ui(
    fs: &FsHandle,
    facts: &Facts,
    plan: &ReclaimPlan,
    signals: &OperationSignals,
    ui: &dyn crate::ui::Ui,
) -> Result<ReclaimResult> {
    use crate::report::progress;
    use crate::ui;
    ui.started();
    // One progress line (or bar) per step, ended before the step's result.
    let mut track: Option<ui::Track<'_>> = None;
    let mut meter = progress::Meter::new();
    let say = |track: &Option<ui::Track<'_>>, line: &str| match track {
        Some(t) => t.println(line),
        None => ui.say(&format!("{line}\n")),
    };
    let result = execute(fs, facts, plan, signals, &mut |e| match e {
        Event::Record(r) => {
            ui::emit(ui, &r);
            match &r {
                ReclaimRecord::Step {
                    kind,
                    usage,
                    chunks,
                } => {
                    let what = match kind {
                        StepKind::Data => "data",
                        StepKind::Metadata => "metadata",
                    };
                    let s = if *chunks == 1 { "" } else { "s" };
                    say(
                        &track,
                        &if *usage == 0 {
                            format!("{}=0: {chunks} empty {what} chunk{s}", kind.flag())
                        } else {
                            format!(
                                "{}={usage}: {chunks} {what} chunk{s} used below {usage}%",
                                kind.flag()
                            )
                        },
                    );
                    meter = progress::Meter::new();
                    track = Some(ui::Track::new(ui, "reclaim", "relocating").records(false));
                }
                ReclaimRecord::Progress {
                    usage,
                    chunks_expected,
                    chunks_done,
                    bytes_expected,
                    bytes_done,
                } => {
                    let reading = meter.observe(*bytes_done, *bytes_expected);
                    if let Some(t) = track.as_mut() {
                        t.show(
                            &reading,
                            Some(&format!(
                                "usage={usage}: chunk {chunks_done} of {chunks_expected}"
                            )),
                        );
                    }
                }
                ReclaimRecord::StepDone { step } => {
                    if let Some(t) = track.take() {
                        t.finish();
                    }
                    let line = if step.skipped {
                        format!(
                            "{}={}: skipped, no chunk is used below {}% now",
                            step.kind.flag(),
                            step.usage,
                            step.usage
                        )
                    } else {
                        let gained =
                            step.unallocated_after as i128 - step.unallocated_before as i128;
                        format!(
                            "{}={}: {} chunk{} relocated, unallocated {} → {} ({}{})",
                            step.kind.flag(),
                            step.usage,
                            step.chunks_relocated,
                            if step.chunks_relocated == 1 { "" } else { "s" },
                            ui.size(step.unallocated_before),
                            ui.size(step.unallocated_after),
                            if gained < 0 { "-" } else { "+" },
                            ui.size(gained.unsigned_abs() as u64)
                        )
                    };
                    say(&track, &line);
                }
                _ => {}
            }
        }
        Event::Stopping(which) => {
            meter.pausing();
            ui::emit(ui, &ReclaimRecord::Stopping);
            let why = match which {
                Some(Received::Hangup) => "the terminal went away (SIGHUP)",
                Some(Received::Terminate) => "terminated (SIGTERM)",
                _ => "interrupted",
            };
            say(
                &track,
                &format!(
                    "{why}: stopping after the current chunk (this waits until the kernel has stopped; what was freed stays freed)"
                ),
            );
        }
        Event::StillStopping => {
            say(
                &track,
                "stopping, please wait: the kernel finishes the current chunk first",
            );
        }
    });
    if let Some(t) = track.take() {
        t.finish();
    }
    let result = result?;
    ui::emit(
        ui,
        &ReclaimRecord::Result {
            result: result.clone(),
        },
    );
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::KernelVersion;
    use crate::operation::state::MemberDevice;

    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;

    fn facts(unalloc: &[u64], data: Vec<ChunkUse>) -> Facts {
        let devices = unalloc
            .iter()
            .enumerate()
            .map(|(i, &u)| MemberDevice {
                devid: i as u64 + 1,
                path: format!("/dev/loop{i}"),
                size: 10 * G,
                allocated: 10 * G - u,
            })
            .collect();
        let flags = |t: u64, p: u64| btrfs_uapi::space::BlockGroupFlags::from_bits_retain(t | p);
        use btrfs_uapi::raw::*;
        let spaces = vec![
            crate::sys::kernel::btrfs::SpaceEntry {
                flags: flags(
                    u64::from(BTRFS_BLOCK_GROUP_DATA),
                    u64::from(BTRFS_BLOCK_GROUP_RAID1),
                ),
                total_bytes: data.iter().map(|c| c.length).sum(),
                used_bytes: data.iter().map(|c| c.used).sum(),
            },
            crate::sys::kernel::btrfs::SpaceEntry {
                flags: flags(
                    u64::from(BTRFS_BLOCK_GROUP_METADATA),
                    u64::from(BTRFS_BLOCK_GROUP_RAID1),
                ),
                total_bytes: 256 * M,
                used_bytes: 200 * M,
            },
        ];
        Facts {
            state: FsState {
                path: "/mnt".into(),
                mount_point: "/mnt".into(),
                fsid: "f".into(),
                devices,
                spaces,
                exclusive_operation: None,
                balance: None,
                kernel: KernelVersion::new(6, 12),
                features: vec![],
                device_errors: vec![],
            },
            data_chunks: data,
            metadata_chunks: vec![],
            metadata_chunk_sysfs: Some(256 * M),
            fruitless: vec![],
        }
    }

    fn req() -> ReclaimRequest {
        ReclaimRequest {
            goal_bytes: None,
            max_usage: 90,
            metadata: false,
        }
    }

    #[test]
    fn the_default_goal_is_room_for_a_metadata_chunk_and_steps_stop_there() {
        let c = |used| ChunkUse { length: G, used };
        let f = facts(&[M, M], vec![c(G), c(G / 20), c(G / 3), c(G)]);
        let p = plan(&f, &req());
        assert_eq!(
            p.goal,
            Goal::MetadataChunk {
                profile: Profile::Raid1,
                devices: 2,
                bytes_per_device: 256 * M
            }
        );
        assert!(!p.goal_reached);
        // -dusage=10 would move the 5% chunk's data into a new chunk
        // (estimated to free nothing: left out); -dusage=40 relocates the
        // third-full one too, and one new chunk takes both: one RAID1
        // chunk, 2 GiB raw.
        let usages: Vec<u8> = p.steps.iter().map(|s| s.usage).collect();
        assert_eq!(usages, vec![40], "{p:?}");
        assert_eq!(p.steps[0].frees_raw_bytes, 2 * G);
        assert_eq!(
            p.steps[0].command.join(" "),
            "btrfs balance start -dusage=40 /mnt"
        );
        assert!(p.predicted_to_reach_goal);
        assert!(p.notes.iter().any(|n| n.contains("--with-metadata")));
    }

    #[test]
    fn a_goal_reached_plans_nothing_and_full_chunks_say_what_helps() {
        let c = |used| ChunkUse { length: G, used };
        let f = facts(&[G, G], vec![c(G / 2)]);
        let p = plan(&f, &req());
        assert!(p.goal_reached && p.steps.is_empty());
        let f = facts(&[M, M], vec![c(G - M), c(G - M)]);
        let p = plan(&f, &req());
        assert!(p.steps.is_empty() && !p.predicted_to_reach_goal);
        // What helps is said once, by the run's warning and hint (no step
        // to run): no note repeats it.
        assert!(
            !p.notes.iter().any(|n| n.contains("device add")),
            "{:?}",
            p.notes
        );
        // --goal: the unallocated sum.
        let f = facts(&[M, M], vec![c(0), c(G / 2), c(G / 2)]);
        let r = ReclaimRequest {
            goal_bytes: Some(5 * G),
            ..req()
        };
        let p = plan(&f, &r);
        assert_eq!(p.goal, Goal::Unallocated { bytes: 5 * G });
        assert!(!p.predicted_to_reach_goal, "{p:?}");
        assert!(p.notes.iter().any(|n| n.contains("an estimate")));
    }

    fn run(usage: u8, relocated: u64, before: u64, after: u64) -> StepRun {
        StepRun {
            kind: StepKind::Data,
            usage,
            chunks_relocated: relocated,
            skipped: false,
            unallocated_before: before,
            unallocated_after: after,
        }
    }

    #[test]
    fn a_step_that_freed_nothing_is_remembered_and_its_chunks_are_not_planned_again() {
        let c = |used| ChunkUse { length: G, used };
        // Two chunks a third full (their data in large extents) and two full.
        let chunks = vec![c(G), c(G / 3), c(G / 3), c(G)];
        let r = ReclaimRequest {
            goal_bytes: Some(9 * G),
            ..req()
        };
        let f = facts(&[M, M], chunks.clone());
        let first = plan(&f, &r);
        assert_eq!(
            first.steps.iter().map(|s| s.usage).collect::<Vec<_>>(),
            vec![40]
        );
        assert!(first.set_aside.is_empty());

        // What execute remembers: only a step that ran to its end and
        // gained nothing, with the chunks below its value after it.
        let after = vec![c(G), c(G), c(G / 3), c(G / 3)];
        assert!(fruitless(&run(40, 2, 2 * M, 2 * M), false, &after, 7).is_none());
        assert!(fruitless(&run(40, 2, 2 * M, 2 * M + G), true, &after, 7).is_none());
        assert!(fruitless(&run(40, 0, 2 * M, 2 * M), true, &after, 7).is_none());
        let f40 = fruitless(&run(40, 2, 2 * M, 2 * M), true, &after, 7).unwrap();
        assert_eq!(f40.chunks_after, vec![c(G / 3), c(G / 3)]);
        assert_eq!((f40.gained_bytes, f40.at), (0, 7));

        // The next plan on the same chunks: nothing to move for nothing,
        // and it says why.
        let mut again = facts(&[M, M], after.clone());
        again.fruitless = vec![f40.clone()];
        let p = plan(&again, &r);
        assert!(p.steps.is_empty(), "{:?}", p.steps);
        assert_eq!(p.set_aside, vec![f40.clone()]);
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("-dusage=40 ran here before and freed nothing")),
            "{:?}",
            p.notes
        );

        // Chunks that changed since (a file deleted): planned as usual.
        let mut changed = facts(&[M, M], vec![c(G), c(G), c(G / 3), c(G / 4)]);
        changed.fruitless = vec![f40.clone()];
        let p = plan(&changed, &r);
        assert!(p.set_aside.is_empty());
        assert_eq!(
            p.steps.iter().map(|s| s.usage).collect::<Vec<_>>(),
            vec![40]
        );

        // A chunk that could help besides them is still planned, without
        // counting on the remembered ones.
        let mut more = facts(
            &[M, M],
            vec![c(G), c(G), c(G / 3), c(G / 3), c(G / 2), c(G / 2)],
        );
        more.fruitless = vec![f40];
        let p = plan(&more, &r);
        assert_eq!(p.set_aside.len(), 1);
        assert_eq!(
            p.steps.iter().map(|s| s.usage).collect::<Vec<_>>(),
            vec![60]
        );
        assert_eq!(p.steps[0].chunks, 2, "{:?}", p.steps);
    }

    #[test]
    fn the_memory_is_kept_per_filesystem_and_a_foreign_file_is_not_trusted() {
        let t = tempfile::tempdir().unwrap();
        let store = MemoryStore::new(t.path());
        assert_eq!(store.load("abc").unwrap().fruitless, vec![]);
        let step = fruitless(
            &run(30, 1, 0, 0),
            true,
            &[ChunkUse {
                length: G,
                used: G / 4,
            }],
            1,
        )
        .unwrap();
        let m = Memory {
            fsid: "abc".into(),
            fruitless: vec![step],
        };
        store.save(&m).unwrap();
        assert_eq!(store.load("abc").unwrap(), m);
        assert_eq!(store.load("other").unwrap().fruitless, vec![]);
        std::fs::write(
            t.path().join("reclaim/def.json"),
            "{\"fsid\":\"abc\",\"fruitless\":[]}",
        )
        .unwrap();
        assert!(store.load("def").is_err());
    }
}
