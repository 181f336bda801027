//! Planning a replace: OLD and NEW checked, what OLD holds, how the copy
//! reads, suspend, the commands.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::device::add::NewDevice;
use crate::device::preflight::{Reason, device_reasons, same_device};
use crate::device::started::{StartedReplace, StartedStore};
use crate::error::Result;
use crate::model::profile::Profile;
use crate::model::space::BgType;
use crate::operation::state::{DeviceErrors, FsState};
use crate::parse::size::format_iec;
use crate::sys::block::blockdev::BlockDeviceFacts;
use crate::sys::kernel::btrfs::{ChunkRecord, DevExtent, FsHandle, bg_type_of, profile_of};
use crate::sys::tools::{self};

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
    /// Usable data capacity now and after (NEW at its size once resized;
    /// the allocator model of `btrfs-lab capacity`).
    #[serde(default)]
    pub usable: crate::space::capacity::UsableChange,
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
        .map_or(0, |e| e.unreadable());
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
    let replace = match (&old_dev, new.size) {
        (Some(o), Some(size)) if size > o.size && !opts.no_resize => vec![(o.devid, size)],
        _ => Vec::new(),
    };
    let usable = crate::space::capacity::usable_change(
        fs,
        &crate::space::capacity::Changes {
            replace,
            ..Default::default()
        },
    );
    ReplacePlan {
        usable,
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

/// Finds systemd-inhibit when logind can honour it (systemd is PID 1).
pub fn find_systemd_inhibit() -> Option<PathBuf> {
    if !Path::new("/run/systemd/system").is_dir() {
        return None;
    }
    tools::find("systemd-inhibit", "systemd")
        .ok()
        .map(|t| t.path)
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
