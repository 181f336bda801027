//! `device replace MOUNT OLD NEW`: the plan (pure, from the filesystem's
//! state, OLD's chunks and NEW's facts), carrying it out through
//! `btrfs replace start -B` in a session of its own (under systemd-inhibit
//! where logind runs), following the kernel's progress as a share of the
//! data to copy, and afterwards: NEW grown to its size, every chunk checked
//! for the redundancy its type has (btrfs-progs #1077), a scrub offered.

pub mod operation;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::device::add::NewDevice;
use crate::device::preflight::{Reason, device_reasons, same_device};
use crate::device::redundancy::RedundancyCheck;
use crate::device::started::{DeviceAt, StartedReplace, StartedStore};
use crate::error::{Error, ErrorKind, Result};
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::operation::state::{DeviceErrors, FsState};
use crate::parse::size::format_iec;
use crate::sys::block::blockdev::BlockDeviceFacts;
use crate::sys::kernel::btrfs::{ChunkRecord, DevExtent, FsHandle, bg_type_of, profile_of};
use crate::sys::kernel::signals::OperationSignals;
use crate::sys::tools::{self, display_argv};

/// OLD as the user named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldSpec {
    /// A btrfs device id (the only way to name a missing device).
    Devid(u64),
    /// A block device path.
    Path(PathBuf),
}

impl OldSpec {
    /// A number is a devid, anything else a path.
    pub fn parse(s: &str) -> Self {
        match s.parse::<u64>() {
            Ok(n) => OldSpec::Devid(n),
            Err(_) => OldSpec::Path(PathBuf::from(s)),
        }
    }
}

/// Where the copy reads from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ReadFrom {
    /// Other copies when OLD has read or checksum errors and every chunk on
    /// it has one; OLD otherwise.
    #[default]
    Auto,
    /// Other copies wherever one exists (`btrfs replace start -r`).
    Others,
    /// OLD (the kernel still falls back to a good copy on a read error).
    Old,
}

/// Options of `device replace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplaceOptions {
    /// Overwrite signatures on NEW (`btrfs replace start -f`).
    pub overwrite: bool,
    /// Where to read from.
    pub read_from: ReadFrom,
    /// Leave NEW at OLD's size.
    pub no_resize: bool,
}

/// The device being replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OldDevice {
    /// btrfs device id (NEW takes it over).
    pub devid: u64,
    /// Path; empty when missing.
    pub path: String,
    /// Missing from the filesystem.
    pub missing: bool,
    /// Size btrfs uses on it (NEW must have at least this).
    pub size: u64,
    /// Bytes of chunks on it: what the replace copies.
    pub allocated: u64,
    /// Its error counters, when readable.
    pub errors: Option<DeviceErrors>,
}

/// Bytes on OLD of one type and profile, and whether another copy exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OnOld {
    /// Type.
    pub kind: BgType,
    /// Profile.
    pub profile: Profile,
    /// Bytes of OLD's device extents.
    pub bytes: u64,
    /// Every byte of them has a copy on another device (RAID1*, RAID10,
    /// RAID5/6); false for SINGLE, DUP and RAID0: only OLD holds them.
    pub other_copy: bool,
}

/// How suspend is held off while the replace runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Inhibit {
    /// systemd-inhibit wraps the replace (logind runs).
    pub systemd_inhibit: bool,
    /// One sentence for the plan.
    pub note: String,
}

/// The plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplacePlan {
    /// Mount point.
    pub mount_point: PathBuf,
    /// OLD.
    pub old: Option<OldDevice>,
    /// NEW.
    pub new: Option<NewDevice>,
    /// What OLD holds, per type and profile.
    pub on_old: Vec<OnOld>,
    /// Bytes to copy (OLD's chunks; the kernel's own progress counts the
    /// whole device instead, btrfs-progs #869).
    pub bytes_to_copy: u64,
    /// Copies are read from other devices where they exist (`-r`).
    pub read_from_others: bool,
    /// Suspend held off, or why not.
    pub inhibit: Inhibit,
    /// A replace already runs (a re-run follows it instead of starting one).
    pub following: bool,
    /// Exactly the commands that will run, in order (the last ones after
    /// the replace: the resize).
    pub commands: Vec<Vec<String>>,
    /// What the user should know.
    pub notes: Vec<String>,
    /// Why it cannot go ahead.
    pub refusals: Vec<Reason>,
}

/// What the planner reads besides the filesystem's state.
#[derive(Debug, Clone)]
pub struct ReplaceFacts {
    /// Device extents of the filesystem.
    pub dev_extents: Vec<DevExtent>,
    /// The chunk tree.
    pub chunks: Vec<ChunkRecord>,
    /// Mounted read-only.
    pub read_only: bool,
    /// The kernel reports a replace running.
    pub replace_running: bool,
    /// The path of the running replace's target (devid 0), if one runs.
    pub running_target: Option<String>,
    /// The kernel reports the last replace since the mount finished (which
    /// one, it does not say).
    pub last_finished: bool,
    /// The last replace this tool started on the filesystem (its record in
    /// the state directory): what ties NEW already being device N to a
    /// replace that finished.
    pub started: Option<StartedReplace>,
    /// systemd-inhibit is there and logind runs.
    pub systemd_inhibit: Option<PathBuf>,
    /// Root.
    pub is_root: bool,
}

/// Finds OLD among the members.
fn find_old<'a>(
    fs: &'a FsState,
    old: &OldSpec,
) -> Option<&'a crate::operation::state::MemberDevice> {
    match old {
        OldSpec::Devid(id) => fs.devices.iter().find(|d| d.devid == *id),
        OldSpec::Path(p) => {
            let resolved = crate::sys::block::blockdev::resolved(p);
            fs.devices.iter().find(|d| same_device(&d.path, &resolved))
        }
    }
}

/// What OLD holds per type and profile, from the device extents.
pub(crate) fn holdings(devid: u64, facts: &ReplaceFacts) -> Vec<OnOld> {
    let mut out: Vec<OnOld> = Vec::new();
    for e in facts.dev_extents.iter().filter(|e| e.devid == devid) {
        let Some(c) = facts.chunks.iter().find(|c| c.logical == e.chunk_logical) else {
            continue;
        };
        let kind = bg_type_of(c.flags);
        let profile = profile_of(c.flags);
        match out
            .iter_mut()
            .find(|o| o.kind == kind && o.profile == profile)
        {
            Some(o) => o.bytes += e.length,
            None => out.push(OnOld {
                kind,
                profile,
                bytes: e.length,
                other_copy: profile.geometry().tolerated_failures > 0,
            }),
        }
    }
    out.sort_by_key(|o| (o.kind, o.profile));
    out
}

/// Whether the copy reads from the other copies (`-r`), with the notes on
/// OLD's errors and on chunks only OLD holds.
fn read_from_others(
    old_dev: Option<&OldDevice>,
    on_old: &[OnOld],
    read_from: ReadFrom,
    notes: &mut Vec<String>,
) -> bool {
    let unreadable = old_dev
        .and_then(|o| o.errors.as_ref())
        .map_or(0, |e| e.read + e.corruption);
    let all_copied = on_old.iter().all(|o| o.other_copy);
    let read_from_others = match read_from {
        ReadFrom::Others => true,
        ReadFrom::Old => false,
        ReadFrom::Auto => unreadable > 0 && all_copied && !on_old.is_empty(),
    };
    if let Some(o) = old_dev {
        if o.missing {
            notes.push(format!(
                "device {} is missing: everything is rebuilt from the other copies",
                o.devid
            ));
        } else if unreadable > 0 {
            notes.push(format!(
                "device {} has {unreadable} read/checksum error(s): {}",
                o.devid,
                if read_from_others {
                    "the copy reads from the other devices wherever a copy exists (-r)"
                } else if all_copied {
                    "it is still read from (--read-from old); the kernel falls back to another copy on an error"
                } else {
                    "some of its chunks have no other copy, so it must be read from"
                }
            ));
        }
        for h in on_old.iter().filter(|h| !h.other_copy) {
            let lose = if o.missing {
                "lost: the replace cannot rebuild them, and reports uncorrectable read errors"
            } else {
                "read from it: a block it cannot read is lost (the file that holds it is damaged)"
            };
            notes.push(format!(
                "{} of {} {} is only on device {} (no other copy): {lose}",
                format_iec(h.bytes),
                h.kind.json_name(),
                h.profile.name(),
                o.devid
            ));
        }
    }
    read_from_others
}

/// Plans replacing `old` with `new` (pure): the refusals in the order a
/// person reads them (the run, NEW's tie to a replace of ours, what runs on
/// the filesystem, OLD, NEW), then how the copy reads, suspend, the commands.
pub(crate) fn plan_replace(
    fs: &FsState,
    old: &OldSpec,
    new: &BlockDeviceFacts,
    opts: ReplaceOptions,
    facts: &ReplaceFacts,
) -> ReplacePlan {
    let m = fs.mount_point.display().to_string();
    let mut refusals = run_refusals(fs, facts, &m);
    let finished_onto = finished_onto(fs, old, new, facts);
    let following = facts.replace_running || finished_onto.is_some();
    // NEW already is the device to replace, and no replace of ours put it
    // there: nothing to replace.
    let already = (!following)
        .then(|| find_old(fs, old))
        .flatten()
        .filter(|d| same_device(&d.path, &new.path));
    if let Some(d) = already {
        refusals.push(already_that_device(new, d.devid, facts, &m));
    }
    refusals.extend(busy_refusals(fs, following, &m));
    let member = finished_onto.or_else(|| find_old(fs, old));
    let old_dev = member.map(|d| old_device(fs, d));
    if member.is_none() {
        refusals.push(not_a_member(fs, old, &m));
    }
    let on_old = old_dev
        .as_ref()
        .map_or_else(Vec::new, |o| holdings(o.devid, facts));
    let bytes_to_copy = old_dev.as_ref().map_or(0, |o| o.allocated);
    if !following && already.is_none() {
        refusals.extend(
            device_reasons(new, fs)
                .into_iter()
                .filter(|r| r.blocks(opts.overwrite)),
        );
    }
    if !following && let Some(r) = too_small(new, old_dev.as_ref(), &m) {
        refusals.push(r);
    }
    let mut notes = Vec::new();
    if finished_onto.is_some() {
        notes.push(format!(
            "the replace onto {} has finished: this run does the steps after it",
            new.given.display()
        ));
    } else if following {
        match (&facts.running_target, new.exists) {
            (Some(t), true) if !same_device(t, &new.path) => refusals.push(Reason::general(
                "other-replace-running",
                format!("a replace onto {t} is running, not onto {}; follow it with btrfs-lab device replace {m} --status, or stop it with --cancel", new.given.display()),
                false,
            )),
            _ => notes.push("a replace is already running: this run follows it, then resizes and verifies".to_owned()),
        }
    }
    let read_from_others = read_from_others(old_dev.as_ref(), &on_old, opts.read_from, &mut notes);
    let inhibit = inhibit(facts);
    notes.push(inhibit.note.clone());
    let mut commands = Vec::new();
    if !following {
        commands.push(start_command(
            &inhibit,
            read_from_others,
            opts,
            old_dev.as_ref().map_or(0, |o| o.devid),
            new,
            &m,
        ));
    }
    if let (Some(o), Some(size)) = (&old_dev, new.size)
        && size > o.size
        && !opts.no_resize
    {
        commands.push(vec![
            "btrfs".into(),
            "filesystem".into(),
            "resize".into(),
            format!("{}:max", o.devid),
            m.clone(),
        ]);
        notes.push(format!(
            "then device {} grows from {} to {} (--no-resize leaves it)",
            o.devid,
            format_iec(o.size),
            format_iec(size)
        ));
    }
    notes.push(
        "Ctrl-C leaves the replace running in the kernel: --status follows it, --cancel stops it, a re-run of this command follows it and finishes the steps after it".to_owned(),
    );
    ReplacePlan {
        mount_point: fs.mount_point.clone(),
        old: old_dev,
        new: (!following || new.exists).then(|| NewDevice {
            path: new.given.clone(),
            resolved: new.path.clone(),
            size: new.size.unwrap_or(0),
            wipes: if opts.overwrite {
                new.signatures.clone()
            } else {
                Vec::new()
            },
            partitions: Vec::new(),
        }),
        on_old,
        bytes_to_copy,
        read_from_others,
        inhibit,
        following,
        commands,
        notes,
        refusals,
    }
}

/// What refuses the run itself: no root, a filesystem mounted read-only.
fn run_refusals(fs: &FsState, facts: &ReplaceFacts, m: &str) -> Vec<Reason> {
    let mut refusals = Vec::new();
    if !facts.is_root {
        refusals.push(Reason::not_root("replacing a device"));
    }
    if facts.read_only {
        refusals.push(Reason::general(
            "read-only",
            format!("{m} is mounted read-only; a replace writes: remount it read-write (mount -o remount,rw{} {m}); a filesystem whose data has no copy of what the missing device held mounts only read-only: copy out what is left with btrfs-lab rescue {m} --copy-to DIR", if fs.devices.iter().any(|d| d.path.is_empty()) { ",degraded" } else { "" }),
            false,
        ));
    }
    refusals
}

/// NEW already took over (the replace ended while nobody followed it):
/// what is left is the resize and the checks. Only for the replace this
/// tool recorded starting (filesystem, devid, NEW's path and device
/// number): NEW being device N tells nothing by itself (it may always
/// have been).
fn finished_onto<'a>(
    fs: &'a FsState,
    old: &OldSpec,
    new: &BlockDeviceFacts,
    facts: &ReplaceFacts,
) -> Option<&'a crate::operation::state::MemberDevice> {
    facts
        .started
        .as_ref()
        .filter(|r| !facts.replace_running && r.fsid == fs.fsid && r.new.is(&new.path, new.devt))
        .filter(|r| match old {
            OldSpec::Devid(id) => *id == r.devid,
            OldSpec::Path(p) => {
                let p = crate::sys::block::blockdev::resolved(p);
                !r.old_path.is_empty() && Path::new(&r.old_path) == p
            }
        })
        .and_then(|r| {
            fs.devices
                .iter()
                .find(|d| d.devid == r.devid && same_device(&d.path, &new.path))
        })
}

/// NEW already is device `devid`, with no replace of ours on record.
fn already_that_device(
    new: &BlockDeviceFacts,
    devid: u64,
    facts: &ReplaceFacts,
    m: &str,
) -> Reason {
    Reason::general(
        "already-that-device",
        format!(
            "{} already is device {devid} of {m}: nothing to replace (no replace onto it that btrfs-lab started is on record{})",
            new.given.display(),
            if facts.last_finished {
                "; the replace that finished since the mount was another one"
            } else {
                ""
            }
        ),
        false,
    )
}

/// Another exclusive operation, or a paused balance, on the filesystem.
fn busy_refusals(fs: &FsState, following: bool, m: &str) -> Vec<Reason> {
    let mut refusals = Vec::new();
    match fs.exclusive_operation.as_deref() {
        None | Some("none") => {}
        Some("device replace") if following => {}
        Some(op) => refusals.push(Reason::general(
            "exclusive-operation",
            format!("another operation is running on this filesystem ({op}); wait until it ends, or see btrfs-lab convert {m} --status"),
            false,
        )),
    }
    if fs.balance.is_some_and(|b| b.paused) {
        refusals.push(Reason::general(
            "balance-paused",
            format!("a paused balance exists; resume it (btrfs-lab convert {m} --resume) or cancel it (--cancel) first"),
            false,
        ));
    }
    refusals
}

/// OLD as the plan shows it, with its error counters.
fn old_device(fs: &FsState, d: &crate::operation::state::MemberDevice) -> OldDevice {
    OldDevice {
        devid: d.devid,
        path: d.path.clone(),
        missing: d.path.is_empty(),
        size: d.size,
        allocated: d.allocated,
        errors: fs
            .device_errors
            .iter()
            .find(|e| e.devid == d.devid)
            .cloned(),
    }
}

/// OLD is not a member: the refusal names the members.
fn not_a_member(fs: &FsState, old: &OldSpec, m: &str) -> Reason {
    let (what, hint) = match old {
        OldSpec::Devid(id) => (format!("device id {id}"), ""),
        OldSpec::Path(p) => (
            p.display().to_string(),
            " (a missing device is named by its devid)",
        ),
    };
    Reason::general(
        "old-not-member",
        format!(
            "{what} is not a device of {m}{hint}; its devices: {}",
            crate::device::members_listed(fs)
        ),
        false,
    )
}

/// NEW smaller than the size btrfs uses of OLD.
fn too_small(new: &BlockDeviceFacts, old: Option<&OldDevice>, m: &str) -> Option<Reason> {
    let (o, size) = (old?, new.size?);
    (size < o.size).then(|| Reason::general(
        "new-too-small",
        format!(
            "{} has {}, less than the {} btrfs uses of device {}: the kernel copies OLD's whole size; shrink it first when its data fits (btrfs filesystem resize {}:{} {m}), or use a larger device",
            new.given.display(),
            format_iec(size),
            format_iec(o.size),
            o.devid,
            o.devid,
            size
        ),
        false,
    ))
}

/// How suspend is held off while the replace runs, or why it is not.
fn inhibit(facts: &ReplaceFacts) -> Inhibit {
    match &facts.systemd_inhibit {
        Some(_) => Inhibit {
            systemd_inhibit: true,
            note: "suspend and shutdown are held off while the replace runs (systemd-inhibit)".to_owned(),
        },
        None => Inhibit {
            systemd_inhibit: false,
            note: "nothing holds off suspend here (no systemd-logind): a suspend, hibernation or filesystem freeze cancels a running replace on kernels 6.19 and later, and a re-run starts it again from the beginning".to_owned(),
        },
    }
}

/// `btrfs replace start -B [-r] [-f] DEVID NEW MOUNT`, under
/// systemd-inhibit where it holds off suspend.
fn start_command(
    inhibit: &Inhibit,
    read_from_others: bool,
    opts: ReplaceOptions,
    devid: u64,
    new: &BlockDeviceFacts,
    m: &str,
) -> Vec<String> {
    let mut start = Vec::new();
    if inhibit.systemd_inhibit {
        start.extend(
            [
                "systemd-inhibit",
                "--what=sleep:shutdown",
                "--who=btrfs-lab",
                "--why=btrfs device replace",
                "--mode=block",
            ]
            .map(str::to_owned),
        );
    }
    start.extend(["btrfs", "replace", "start", "-B"].map(str::to_owned));
    if read_from_others {
        start.push("-r".to_owned());
    }
    if opts.overwrite {
        start.push("-f".to_owned());
    }
    start.push(devid.to_string());
    start.push(new.path.display().to_string());
    start.push(m.to_owned());
    start
}

/// Where the replace is, as a share of the data to copy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceProgress {
    /// Bytes of OLD's chunks to copy.
    pub bytes_total: u64,
    /// Bytes of them copied.
    pub bytes_done: u64,
    /// The kernel's own figure: the share of OLD's size passed, in ‰.
    pub device_permille: u64,
    /// Bytes per second over the last moves (20 s window); 0 while the
    /// rate is measured or stalled.
    pub rate_bytes_per_sec: f64,
    /// Seconds left at that rate; `null` until the estimate is stable.
    pub eta_seconds: Option<f64>,
    /// What the copy is doing, as far as the counts tell.
    #[serde(default = "crate::report::progress::running")]
    pub pace: crate::report::progress::Pace,
}

impl ReplaceProgress {
    /// As the one progress renderer reads it.
    pub fn reading(&self) -> crate::report::progress::Reading {
        crate::report::progress::Reading {
            done_bytes: self.bytes_done,
            total_bytes: self.bytes_total,
            rate_bytes_per_sec: (self.rate_bytes_per_sec > 0.0).then_some(self.rate_bytes_per_sec),
            eta_seconds: self.eta_seconds,
            pace: self.pace,
            idle_seconds: 0.0,
        }
    }
}

/// The bytes of `extents` (OLD's, by offset) below `cursor`: what the
/// replace has copied when the kernel's cursor is there (pure).
pub(crate) fn copied_below(extents: &[DevExtent], cursor: u64) -> u64 {
    extents
        .iter()
        .map(|e| cursor.saturating_sub(e.offset).min(e.length))
        .sum()
}

/// The state the kernel reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReplaceStateName {
    /// None ever ran since the mount.
    NeverStarted,
    /// Running.
    Running,
    /// The last one finished.
    Finished,
    /// The last one was cancelled.
    Cancelled,
    /// Suspended (the filesystem was unmounted while it ran; it continues
    /// at the next mount).
    Suspended,
}

impl From<btrfs_uapi::replace::ReplaceState> for ReplaceStateName {
    fn from(s: btrfs_uapi::replace::ReplaceState) -> Self {
        use btrfs_uapi::replace::ReplaceState as S;
        match s {
            S::NeverStarted => Self::NeverStarted,
            S::Started => Self::Running,
            S::Finished => Self::Finished,
            S::Canceled => Self::Cancelled,
            S::Suspended => Self::Suspended,
        }
    }
}

/// `device replace --status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceStatusReport {
    /// Mount point.
    pub mount_point: PathBuf,
    /// State.
    pub state: ReplaceStateName,
    /// The target while it runs (devid 0).
    pub target: Option<String>,
    /// The kernel's progress: share of the source device's size, in ‰.
    pub device_permille: u64,
    /// Write errors on the target so far.
    pub write_errors: u64,
    /// Blocks no copy could be read of (lost).
    pub uncorrectable_read_errors: u64,
    /// Seconds since the epoch when it began.
    pub started_at: Option<u64>,
    /// Seconds since the epoch when it stopped.
    pub stopped_at: Option<u64>,
}

fn epoch(t: Option<std::time::SystemTime>) -> Option<u64> {
    t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
}

/// Reads the replace status (root only).
pub fn status_of(fs: &FsHandle, mount_point: &Path) -> Result<ReplaceStatusReport> {
    if !crate::sys::is_root() {
        return Err(
            Error::new(ErrorKind::Permission, "the replace status needs root")
                .with_hint("run it as root"),
        );
    }
    let s = fs.replace_status()?;
    let target = fs.replace_target()?.map(|t| t.path);
    Ok(ReplaceStatusReport {
        mount_point: mount_point.to_path_buf(),
        state: s.state.into(),
        target,
        device_permille: s.progress_1000,
        write_errors: s.num_write_errors,
        uncorrectable_read_errors: s.num_uncorrectable_read_errors,
        started_at: epoch(s.time_started),
        stopped_at: epoch(s.time_stopped),
    })
}

/// What the replace did, verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceResult {
    /// The devid NEW now has (OLD's).
    pub devid: u64,
    /// NEW's path as the kernel lists it.
    pub path: String,
    /// Size btrfs uses on it now.
    pub size: u64,
    /// Write errors on NEW during the copy.
    pub write_errors: u64,
    /// Blocks that no copy could be read of: lost (the files that hold
    /// them are damaged).
    pub uncorrectable_read_errors: u64,
    /// Every chunk's redundancy after it.
    pub redundancy: RedundancyCheck,
    /// The scrub of NEW, offered.
    pub scrub_command: Vec<String>,
    /// Seconds the copy took (this run's share, when it followed).
    pub seconds: f64,
}

/// `device replace --json`: the plan, and what was done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceReport {
    /// The plan.
    pub plan: ReplacePlan,
    /// What was done and verified (absent with `--dry-run`, a refusal, or
    /// when a signal detached the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ReplaceResult>,
    /// A signal detached the run: the replace goes on in the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detached: Option<ReplaceDetached>,
}

/// A run that a signal detached from the replace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplaceDetached {
    /// `SIGINT`, `SIGTERM`, `SIGHUP`.
    pub signal: String,
    /// Where it was.
    pub progress: Option<ReplaceProgress>,
}

impl ReplaceReport {
    /// The plan alone: its record before anything is done.
    pub fn planned(plan: &ReplacePlan) -> Self {
        ReplaceReport {
            plan: plan.clone(),
            result: None,
            detached: None,
        }
    }
}

/// Finds systemd-inhibit when logind can honour it (systemd is PID 1).
pub fn find_systemd_inhibit() -> Option<PathBuf> {
    if !Path::new("/run/systemd/system").is_dir() {
        return None;
    }
    tools::find("systemd-inhibit", "systemd")
        .ok()
        .map(|t| t.path)
}

/// Records the replace before the kernel is asked (a re-run ties NEW being
/// device N to this replace, and to nothing else) and starts `first`.
fn start_replace(
    fs: &FsHandle,
    plan: &ReplacePlan,
    old: &OldDevice,
    store: &StartedStore,
    first: &[String],
) -> Result<std::process::Child> {
    let new = plan
        .new
        .as_ref()
        .ok_or_else(|| Error::new(ErrorKind::State, "no new device in the plan"))?;
    store.save_replace(&StartedReplace {
        fsid: fs.fsid().to_owned(),
        devid: old.devid,
        old_path: old.path.clone(),
        new: DeviceAt {
            path: new.resolved.display().to_string(),
            devt: crate::sys::block::blockdev::devt_of(&new.resolved),
        },
        started_unix: crate::device::started::now_unix(),
    })?;
    let mut argv = first.to_vec();
    if let Some(last) = argv.last_mut() {
        *last = fs.proc_path().display().to_string();
    }
    let tool = tools::find(
        &argv[0],
        if argv[0] == "btrfs" {
            "btrfs-progs"
        } else {
            "systemd"
        },
    )?;
    crate::sys::kernel::child::spawn_in_new_session(&tool.path, &argv[1..]).map_err(|e| {
        Error::new(
            ErrorKind::Tool,
            format!("cannot start {}: {e}", display_argv(first)),
        )
    })
}

/// Until the kernel says the replace runs (or the command failed).
fn wait_until_running(
    fs: &FsHandle,
    mut child: Option<&mut (std::process::Child, Vec<String>)>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = fs.replace_status()?;
        if s.state == btrfs_uapi::replace::ReplaceState::Started {
            break;
        }
        if let Some((c, shown)) = child.as_deref_mut()
            && let Some(status) = c
                .try_wait()
                .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?
        {
            let s = fs.replace_status()?;
            if status.success() && s.state == btrfs_uapi::replace::ReplaceState::Finished {
                break;
            }
            let stderr = crate::sys::kernel::child::read_stderr(c);
            return Err(Error::new(
                ErrorKind::Tool,
                format!(
                    "the replace did not start: {} (while running: {})",
                    stderr.trim().lines().last().unwrap_or("no message"),
                    display_argv(shown)
                ),
            )
            .with_hint("the filesystem is unchanged; see btrfs-lab show"));
        }
        if child.is_none() && s.state != btrfs_uapi::replace::ReplaceState::Started {
            break;
        }
        if Instant::now() > deadline {
            return Err(Error::new(
                ErrorKind::State,
                "the replace was started but the kernel does not report it running after 120 s",
            )
            .with_hint("see btrfs-lab device replace MOUNT --status and the kernel log"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The kernel ended the replace as "canceled": cancelled, or failed
/// (ENOSPC, EIO, ...: its errno is in what the starting command printed).
fn ended_unfinished(devid: u64, child: Option<&mut (std::process::Child, Vec<String>)>) -> Error {
    let started_here = child.is_some();
    let said = child.map(|(c, _)| {
        let _ = c.wait();
        crate::sys::kernel::child::read_stderr(c)
    });
    let last = said
        .as_deref()
        .and_then(|t| t.trim().lines().last())
        .unwrap_or("")
        .to_owned();
    if let Some((errno, next)) = crate::device::preflight::kernel_failure(&last) {
        return Error::new(
            ErrorKind::Tool,
            format!(
                "the replace of device {} failed: the kernel stopped it with {errno}; device {} is still a member ({last})",
                devid, devid
            ),
        )
        .with_hint(next);
    }
    let (what, hint) = if started_here {
        (
            "was cancelled (--cancel, a suspend or a freeze)",
            "run the same command again to start it anew",
        )
    } else {
        (
            "ended without finishing: cancelled, or failed (this run followed a replace started elsewhere, whose error it cannot read)",
            "see the kernel log (dmesg) for the reason; run the same command again to start it anew once it is dealt with",
        )
    };
    Error::new(
        ErrorKind::State,
        format!(
            "the replace of device {} {what}; device {} is still a member, unchanged",
            devid, devid
        ),
    )
    .with_hint(hint)
}

/// Carries out the plan: starts the replace (unless it follows one),
/// follows it to the end (`progress` hears each step), resizes and
/// verifies. A signal detaches: the replace goes on in the kernel.
pub fn execute_replace(
    fs: &FsHandle,
    plan: &ReplacePlan,
    store: &StartedStore,
    signals: &OperationSignals,
    progress: &mut dyn FnMut(&ReplaceProgress),
) -> Result<ReplaceReport> {
    let old = plan
        .old
        .as_ref()
        .ok_or_else(|| Error::new(ErrorKind::State, "no device to replace"))?;
    let extents: Vec<DevExtent> = fs
        .dev_extents()?
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.devid == old.devid)
        .collect();
    let total: u64 = extents.iter().map(|e| e.length).sum();
    let started = Instant::now();
    let mut child = None;
    let mut rest = plan.commands.as_slice();
    if !plan.following {
        let (first, more) = rest
            .split_first()
            .ok_or_else(|| Error::new(ErrorKind::State, "the plan has no command"))?;
        rest = more;
        child = Some((start_replace(fs, plan, old, store, first)?, first.clone()));
    }
    wait_until_running(fs, child.as_mut())?;
    // Follow.
    let mut meter = crate::report::progress::Meter::new();
    loop {
        let s = fs.replace_status()?;
        let cursor = (u128::from(s.progress_1000) * u128::from(old.size) / 1000) as u64;
        let done = if s.state == btrfs_uapi::replace::ReplaceState::Finished {
            total
        } else {
            copied_below(&extents, cursor).min(total)
        };
        let r = meter.observe(done, total);
        let p = ReplaceProgress {
            bytes_total: total,
            bytes_done: done,
            device_permille: s.progress_1000,
            rate_bytes_per_sec: r.rate_bytes_per_sec.unwrap_or(0.0),
            eta_seconds: r.eta_seconds,
            pace: r.pace,
        };
        progress(&p);
        use btrfs_uapi::replace::ReplaceState as S;
        match s.state {
            S::Started => {}
            S::Finished => break,
            S::Canceled => return Err(ended_unfinished(old.devid, child.as_mut())),
            S::Suspended | S::NeverStarted => {
                return Err(Error::new(
                    ErrorKind::State,
                    "the replace stopped (the filesystem was unmounted?); it continues at the next mount",
                ));
            }
        }
        let (n, which) = signals.wait(Duration::from_millis(500));
        if n > 0 {
            // The replace runs in its own session: it goes on.
            return Ok(ReplaceReport {
                detached: Some(ReplaceDetached {
                    signal: which.map_or("a signal", |w| w.name()).to_owned(),
                    progress: Some(p),
                }),
                ..ReplaceReport::planned(plan)
            });
        }
    }
    if let Some((mut c, shown)) = child {
        let status = c
            .wait()
            .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
        if !status.success() {
            let stderr = crate::sys::kernel::child::read_stderr(&mut c);
            let st = fs.replace_status()?;
            if st.state != btrfs_uapi::replace::ReplaceState::Finished {
                return Err(Error::new(
                    ErrorKind::Tool,
                    format!(
                        "the replace failed: {} (while running: {})",
                        stderr.trim().lines().last().unwrap_or("no message"),
                        display_argv(&shown)
                    ),
                ));
            }
        }
    }
    let s = fs.replace_status()?;
    if !rest.is_empty() {
        wait_exclusive_released(fs, signals)?;
    }
    for shown in rest {
        let mut argv = shown.clone();
        if let Some(last) = argv.last_mut() {
            *last = fs.proc_path().display().to_string();
        }
        let tool = tools::find(&argv[0], "btrfs-progs")?;
        tool.run(&argv[1..]).map_err(|e| {
            Error::new(
                e.kind(),
                format!(
                    "the replace is done, but {} failed: {}",
                    display_argv(shown),
                    e.message()
                ),
            )
            .with_hint("run it again by hand; the data is on the new device")
        })?;
    }
    let result = verify(fs, plan, old.devid, &s, started.elapsed().as_secs_f64())?;
    Ok(ReplaceReport {
        result: Some(result),
        ..ReplaceReport::planned(plan)
    })
}

/// The kernel marks a replace finished a moment before it lets go of the
/// filesystem's exclusive operation (a run that follows a replace it did
/// not start sees the first and not yet the second): what comes after it
/// (the resize) waits, at most a minute, until sysfs `exclusive_operation`
/// no longer says `device replace` (5.10 and later; an older kernel has no
/// such file and nothing is waited for). A signal ends the wait: the
/// replace is done, the resize is what the error names.
fn wait_exclusive_released(fs: &FsHandle, signals: &OperationSignals) -> Result<()> {
    let root = crate::sys::fs::root::SysRoot::host();
    for _ in 0..600 {
        match crate::operation::state::read_sysfs(&root, fs.fsid(), "exclusive_operation") {
            Some(op) if op == "device replace" => {}
            _ => return Ok(()),
        }
        let (n, _) = signals.wait(Duration::from_millis(100));
        if n > 0 {
            return Ok(());
        }
    }
    Ok(())
}

/// Checks that NEW took OLD's devid and size, and every chunk's redundancy.
fn verify(
    fs: &FsHandle,
    plan: &ReplacePlan,
    devid: u64,
    s: &btrfs_uapi::replace::ReplaceStatus,
    seconds: f64,
) -> Result<ReplaceResult> {
    let devices = fs.devices()?;
    let Some(now) = devices.iter().find(|d| d.devid == devid) else {
        return Err(Error::new(
            ErrorKind::State,
            format!("device {devid} is not a member after the replace"),
        ));
    };
    if let Some(new) = &plan.new
        && !same_device(&now.path, &new.resolved)
    {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "device {devid} is {} after the replace, not {}",
                if now.path.is_empty() {
                    "missing"
                } else {
                    &now.path
                },
                new.path.display()
            ),
        ));
    }
    let m = plan.mount_point.display().to_string();
    let present: Vec<u64> = devices
        .iter()
        .filter(|d| !d.path.is_empty())
        .map(|d| d.devid)
        .collect();
    let chunks = fs.chunk_records()?.unwrap_or_default();
    let redundancy = crate::device::redundancy::check(&chunks, &present, &m);
    Ok(ReplaceResult {
        devid,
        path: now.path.clone(),
        size: now.total_bytes,
        write_errors: s.num_write_errors,
        uncorrectable_read_errors: s.num_uncorrectable_read_errors,
        redundancy,
        scrub_command: vec![
            "btrfs".into(),
            "scrub".into(),
            "start".into(),
            "-B".into(),
            now.path.clone(),
        ],
        seconds,
    })
}

/// Opens the filesystem at `path` once, reads it, OLD's chunks and NEW,
/// and plans the replace.
pub fn prepare(
    root: &crate::sys::fs::root::SysRoot,
    path: &Path,
    old: &OldSpec,
    new: &Path,
    opts: ReplaceOptions,
    store: &StartedStore,
) -> Result<(FsHandle, FsState, ReplacePlan)> {
    let (fs, state) = crate::operation::state::open_state(root, path)?;
    let is_root = crate::sys::is_root();
    let (running, target, last_finished) = if is_root {
        let s = fs.replace_status()?;
        let running = s.state == btrfs_uapi::replace::ReplaceState::Started;
        let finished = s.state == btrfs_uapi::replace::ReplaceState::Finished;
        let target = if running {
            fs.replace_target()?.map(|t| t.path)
        } else {
            None
        };
        (running, target, finished)
    } else {
        (false, None, false)
    };
    let facts = ReplaceFacts {
        dev_extents: fs.dev_extents()?.unwrap_or_default(),
        chunks: fs.chunk_records()?.unwrap_or_default(),
        read_only: fs.read_only(),
        replace_running: running,
        running_target: target,
        last_finished,
        started: store.replace(&state.fsid),
        systemd_inhibit: find_systemd_inhibit(),
        is_root,
    };
    let new_facts = crate::sys::block::blockdev::inspect(root, new);
    let plan = plan_replace(&state, old, &new_facts, opts, &facts);
    Ok((fs, state, plan))
}

/// Opens the filesystem for `--status` / `--cancel`.
pub fn open(root: &crate::sys::fs::root::SysRoot, path: &Path) -> Result<(FsHandle, FsState)> {
    crate::operation::state::open_state(root, path)
}

/// `--cancel`, confirmed: stops the running replace; OLD stays a member.
pub fn cancel(fs: &FsHandle, path: &Path) -> Result<bool> {
    fs.check_path_still_here(path)?;
    fs.replace_cancel()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::KernelVersion;
    use crate::operation::state::MemberDevice;
    use btrfs_uapi::space::BlockGroupFlags as F;

    const GIB: u64 = 1 << 30;

    fn fs() -> FsState {
        FsState {
            path: "/mnt".into(),
            mount_point: "/mnt".into(),
            fsid: "x".into(),
            devices: (1..=3)
                .map(|i| MemberDevice {
                    devid: i,
                    path: format!("/dev/test-none-{i}"),
                    size: 4 * GIB,
                    allocated: GIB,
                })
                .collect(),
            spaces: Vec::new(),
            exclusive_operation: Some("none".into()),
            balance: None,
            kernel: KernelVersion::new(6, 18),
            features: Vec::new(),
            device_errors: Vec::new(),
        }
    }

    fn chunk(flags: F, logical: u64, devids: &[u64]) -> ChunkRecord {
        ChunkRecord {
            flags,
            logical,
            length: GIB,
            stripe_len: 64 << 10,
            num_stripes: devids.len() as u16,
            sub_stripes: 1,
            devids: devids.to_vec(),
        }
    }

    fn facts() -> ReplaceFacts {
        ReplaceFacts {
            chunks: vec![
                chunk(F::DATA | F::RAID0, GIB, &[1, 2, 3]),
                chunk(F::METADATA | F::RAID1, 2 * GIB, &[2, 3]),
            ],
            dev_extents: vec![
                DevExtent {
                    devid: 2,
                    offset: GIB,
                    length: GIB / 3,
                    chunk_logical: GIB,
                },
                DevExtent {
                    devid: 2,
                    offset: 2 * GIB,
                    length: GIB / 4,
                    chunk_logical: 2 * GIB,
                },
            ],
            read_only: false,
            replace_running: false,
            running_target: None,
            last_finished: false,
            started: None,
            systemd_inhibit: None,
            is_root: true,
        }
    }

    fn new(size: u64) -> BlockDeviceFacts {
        BlockDeviceFacts {
            exists: true,
            is_block: true,
            size: Some(size),
            ..BlockDeviceFacts::unknown(Path::new("/dev/nvme9n1"), Path::new("/dev/nvme9n1"))
        }
    }

    #[test]
    fn plans_the_replace_with_what_only_old_holds() {
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &new(8 * GIB),
            ReplaceOptions::default(),
            &facts(),
        );
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert_eq!(
            p.commands,
            vec![
                vec![
                    "btrfs",
                    "replace",
                    "start",
                    "-B",
                    "2",
                    "/dev/nvme9n1",
                    "/mnt"
                ],
                vec!["btrfs", "filesystem", "resize", "2:max", "/mnt"],
            ]
        );
        assert_eq!(p.on_old.len(), 2);
        let raid0 = p
            .on_old
            .iter()
            .find(|o| o.profile == Profile::Raid0)
            .unwrap();
        assert!(!raid0.other_copy);
        assert!(
            p.notes.iter().any(|n| n.contains("only on device 2")),
            "{:?}",
            p.notes
        );
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("nothing holds off suspend"))
        );
    }

    #[test]
    fn read_errors_with_copies_read_from_the_others_and_inhibit_wraps() {
        let mut f = fs();
        f.device_errors.push(DeviceErrors {
            devid: 2,
            path: "/dev/test-none-2".into(),
            read: 5,
            write: 0,
            flush: 0,
            corruption: 0,
            generation: 0,
        });
        let mut x = facts();
        x.chunks[0] = chunk(F::DATA | F::RAID1, GIB, &[1, 2]);
        x.systemd_inhibit = Some("/usr/bin/systemd-inhibit".into());
        let p = plan_replace(
            &f,
            &OldSpec::Devid(2),
            &new(4 * GIB),
            ReplaceOptions::default(),
            &x,
        );
        assert!(p.read_from_others);
        assert_eq!(p.commands.len(), 1, "same size: no resize");
        assert_eq!(p.commands[0][0], "systemd-inhibit");
        assert!(p.commands[0].contains(&"-r".to_owned()));
    }

    #[test]
    fn refusals() {
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(7),
            &new(GIB),
            ReplaceOptions::default(),
            &facts(),
        );
        let codes: Vec<&str> = p.refusals.iter().map(|r| &*r.code).collect();
        assert_eq!(codes, ["old-not-member"]);
        assert!(p.refusals[0].message.contains("2 /dev/test-none-2"));
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &new(GIB),
            ReplaceOptions::default(),
            &facts(),
        );
        assert_eq!(p.refusals[0].code, "new-too-small");
        let mut x = facts();
        x.read_only = true;
        x.is_root = false;
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &new(8 * GIB),
            ReplaceOptions::default(),
            &x,
        );
        let codes: Vec<&str> = p.refusals.iter().map(|r| &*r.code).collect();
        assert_eq!(codes, ["not-root", "read-only"]);
        // NEW already a member.
        let member = BlockDeviceFacts {
            exists: true,
            is_block: true,
            size: Some(8 * GIB),
            ..BlockDeviceFacts::unknown(
                Path::new("/dev/test-none-1"),
                Path::new("/dev/test-none-1"),
            )
        };
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &member,
            ReplaceOptions::default(),
            &facts(),
        );
        assert_eq!(p.refusals[0].code, "member");
    }

    #[test]
    fn new_already_that_device_is_done_only_with_the_record_of_our_replace() {
        // NEW (/dev/test-none-2) already is device 2; the kernel says the
        // last replace finished: without a record that ties it, refused.
        let member = BlockDeviceFacts {
            exists: true,
            is_block: true,
            size: Some(4 * GIB),
            devt: Some((7, 2)),
            ..BlockDeviceFacts::unknown(
                Path::new("/dev/test-none-2"),
                Path::new("/dev/test-none-2"),
            )
        };
        let mut x = facts();
        x.last_finished = true;
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &member,
            ReplaceOptions::default(),
            &x,
        );
        let codes: Vec<&str> = p.refusals.iter().map(|r| &*r.code).collect();
        assert_eq!(codes, ["already-that-device"]);
        assert!(
            p.refusals[0]
                .message
                .starts_with("/dev/test-none-2 already is device 2 of /mnt: nothing to replace"),
            "{}",
            p.refusals[0].message
        );
        assert!(!p.following);
        // The record of the replace this tool started onto it: followed.
        let record = StartedReplace {
            fsid: "x".into(),
            devid: 2,
            old_path: "/dev/test-none-old".into(),
            new: DeviceAt {
                path: "/dev/test-none-2".into(),
                devt: Some((7, 2)),
            },
            started_unix: 1,
        };
        x.started = Some(record.clone());
        let p = plan_replace(
            &fs(),
            &OldSpec::Devid(2),
            &member,
            ReplaceOptions::default(),
            &x,
        );
        assert!(p.refusals.is_empty(), "{:?}", p.refusals);
        assert!(p.following);
        assert!(p.notes.iter().any(|n| n.contains("has finished")));
        // A record of another filesystem, devid or device number ties nothing.
        for bad in [
            StartedReplace {
                fsid: "y".into(),
                ..record.clone()
            },
            StartedReplace {
                devid: 3,
                ..record.clone()
            },
            StartedReplace {
                new: DeviceAt {
                    path: "/dev/test-none-2".into(),
                    devt: Some((7, 99)),
                },
                ..record.clone()
            },
        ] {
            x.started = Some(bad);
            let p = plan_replace(
                &fs(),
                &OldSpec::Devid(2),
                &member,
                ReplaceOptions::default(),
                &x,
            );
            assert_eq!(p.refusals[0].code, "already-that-device");
        }
    }

    #[test]
    fn progress_is_a_share_of_the_data_not_of_the_device() {
        let e = facts().dev_extents;
        let on2: Vec<DevExtent> = e.into_iter().filter(|e| e.devid == 2).collect();
        assert_eq!(copied_below(&on2, 0), 0);
        // Halfway through the device's size, all of the first extent and
        // half... of nothing of the second (it starts at 2 GiB).
        assert_eq!(copied_below(&on2, 2 * GIB), GIB / 3);
        assert_eq!(copied_below(&on2, 4 * GIB), GIB / 3 + GIB / 4);
    }
}
