//! `scrub MOUNT`: read every block of every device, verify its checksum and
//! repair from another copy where the profile has one.
//!
//! The kernel scrubs one device per `BTRFS_IOC_SCRUB` (blocking), so a run
//! has one thread per device (as btrfs-progs) and the calling thread polls
//! `SCRUB_PROGRESS` for progress and waits for signals. The first SIGINT,
//! SIGTERM or SIGHUP cancels the scrub (the kernel keeps `last_physical`
//! per device); the process returns only once every scrub ioctl did.
//! What was done is saved (atomically) under the state directory, and a
//! later `scrub MOUNT --resume` starts each device at its `last_physical`,
//! as `btrfs scrub resume` does.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::exit;
use crate::model::metrics::Metrics;
use crate::sys::fs::root::SysRoot;
use crate::sys::fs::state::StateRoom;
use crate::sys::kernel::{btrfs, ioctl, signals};
use crate::sys::tools::inhibit::SleepInhibitor;
use crate::ui::{self, Ui};

/// One device's counters (this run's, or the sum of the runs of a resumed
/// scrub in the saved state).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceScrub {
    /// The btrfs device id.
    pub devid: u64,
    /// Its block device (empty when missing).
    pub path: String,
    /// The bytes a scrub reads on this device: the used bytes of each chunk
    /// with a stripe on it (both copies of DUP, a share of a striped
    /// chunk), read from the chunk tree and the block group items at the
    /// start of the run; the device's allocated bytes when they cannot be
    /// read. Written data can make the real figure a little larger.
    pub bytes_to_read: u64,
    /// Data and tree bytes scrubbed.
    pub bytes_scrubbed: u64,
    /// Data extents scrubbed.
    pub data_extents: u64,
    /// Tree (metadata) extents scrubbed.
    pub tree_extents: u64,
    /// Read errors.
    pub read_errors: u64,
    /// Checksum mismatches.
    pub csum_errors: u64,
    /// Tree blocks that failed verification.
    pub verify_errors: u64,
    /// Bad superblock copies.
    pub super_errors: u64,
    /// Errors repaired from another copy.
    pub corrected: u64,
    /// Errors no good copy was found for.
    pub uncorrectable: u64,
    /// Errors that went away on a re-read.
    pub unverified: u64,
    /// Where on the device the scrub got to (the resume point).
    pub last_physical: u64,
    /// The device's scrub ran to its end.
    pub finished: bool,
}

impl DeviceScrub {
    /// Read, checksum, verify and superblock errors.
    pub fn errors(&self) -> u64 {
        self.read_errors + self.csum_errors + self.verify_errors + self.super_errors
    }

    /// The kernel's counters of one run (`p`) added to these.
    fn add(&mut self, p: &btrfs_uapi::scrub::ScrubProgress) {
        self.bytes_scrubbed += p.data_bytes_scrubbed + p.tree_bytes_scrubbed;
        self.data_extents += p.data_extents_scrubbed;
        self.tree_extents += p.tree_extents_scrubbed;
        self.read_errors += p.read_errors;
        self.csum_errors += p.csum_errors;
        self.verify_errors += p.verify_errors;
        self.super_errors += p.super_errors;
        self.corrected += p.corrected_errors;
        self.uncorrectable += p.uncorrectable_errors;
        self.unverified += p.unverified_errors;
        self.last_physical = self.last_physical.max(p.last_physical);
    }

    /// This device's counters of one run: the kernel's `p`.
    fn of(
        devid: u64,
        path: &str,
        bytes_to_read: u64,
        p: &btrfs_uapi::scrub::ScrubProgress,
    ) -> Self {
        let mut d = DeviceScrub {
            devid,
            path: path.to_owned(),
            bytes_to_read,
            ..DeviceScrub::default()
        };
        d.add(p);
        d.last_physical = p.last_physical;
        d
    }
}

/// The sums over the devices.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Totals {
    /// Bytes to read on every device scrubbed.
    pub bytes_to_read: u64,
    /// Bytes scrubbed (in this run).
    pub bytes_scrubbed: u64,
    /// Errors found (read, checksum, verify, superblock).
    pub errors: u64,
    /// Errors corrected.
    pub corrected: u64,
    /// Errors that could not be corrected.
    pub uncorrectable: u64,
}

impl Totals {
    /// The sums of `devices`.
    pub fn of(devices: &[DeviceScrub]) -> Self {
        let mut t = Totals::default();
        for d in devices {
            t.bytes_to_read += d.bytes_to_read;
            t.bytes_scrubbed += d.bytes_scrubbed;
            t.errors += d.errors();
            t.corrected += d.corrected;
            t.uncorrectable += d.uncorrectable;
        }
        t
    }
}

/// One device of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlannedDevice {
    /// The btrfs device id.
    pub devid: u64,
    /// Its block device (empty when missing: it is not scrubbed).
    pub path: String,
    /// The bytes the scrub reads on it (see [`DeviceScrub::bytes_to_read`]).
    pub bytes_to_read: u64,
    /// `bytes_to_read` is the device's allocated bytes (the usage of its
    /// chunks could not be read): the most it reads.
    #[serde(default)]
    pub allocated_only: bool,
    /// Where the scrub starts (0, or the saved last_physical on a resume).
    pub start: u64,
    /// Its scrub_speed_max setting file, when the kernel has it (5.14+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_max_file: Option<PathBuf>,
    /// A scrub speed limit in force before the run (scrub_speed_max, bytes
    /// per second; absent when there is none): the device scrubs at most
    /// that fast unless `--limit` replaces it for the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_max_now: Option<u64>,
}

/// What a run would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScrubPlan {
    /// The mount point given.
    pub mount_point: PathBuf,
    /// The filesystem's UUID.
    pub fsid: String,
    /// `--readonly`: report, repair nothing.
    pub readonly: bool,
    /// Continues a scrub that was interrupted.
    pub resume: bool,
    /// `--limit`: bytes per second per device, for this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// The devices to scrub (those already finished in a resume are left out).
    pub devices: Vec<PlannedDevice>,
    /// Devices not scrubbed: missing (degraded mount).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<u64>,
}

impl ScrubPlan {
    /// Bytes left to read.
    pub fn bytes_left(&self) -> u64 {
        self.devices
            .iter()
            .map(|d| d.bytes_to_read.saturating_sub(d.start.min(d.bytes_to_read)))
            .sum()
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Every device was scrubbed to its end.
    Finished,
    /// Cancelled by a signal; `--resume` continues.
    Interrupted,
}

/// The result of `scrub MOUNT`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScrubReport {
    /// The mount point given.
    pub mount_point: PathBuf,
    /// The filesystem's UUID.
    pub fsid: String,
    /// How it ended.
    pub outcome: Outcome,
    /// It continued an interrupted scrub.
    pub resumed: bool,
    /// Nothing was repaired (`--readonly`).
    pub readonly: bool,
    /// Start, seconds since the epoch.
    pub started_at: u64,
    /// How long this run took, seconds.
    pub duration_seconds: f64,
    /// This run's counters per device.
    pub devices: Vec<DeviceScrub>,
    /// Their sums.
    pub totals: Totals,
    /// Devices not scrubbed (missing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<u64>,
    /// A systemd-logind sleep inhibitor was held while it ran.
    #[serde(default)]
    pub suspend_held_off: bool,
    /// The files the kernel named for errors no good copy was found for
    /// (its log during the run: `checksum error at logical ... (path: ...)`
    /// and `unable to fixup ... at logical ...`); empty when none, or when
    /// the log could not be read (not root).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damaged_files: Vec<DamagedFile>,
}

/// A file with blocks a scrub could not repair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DamagedFile {
    /// The subvolume (tree) id the path is in (5: the top level).
    pub subvolume: u64,
    /// The inode number.
    pub inode: u64,
    /// The path inside that subvolume, as the kernel resolved it.
    pub path: String,
    /// The damaged blocks' offsets in the file, sorted.
    pub offsets: Vec<u64>,
    /// The uncorrectable errors the kernel reported in it (it may report
    /// several bad sectors of one range at the range's first offset).
    #[serde(default)]
    pub errors: u64,
}

/// What the kernel logs of one scrub error.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LogEvent {
    /// An error at `logical` in a file (`checksum error at logical L on
    /// dev D, physical P[,] root R[,] inode I[,] offset O ... (path: X)`).
    Named {
        logical: u64,
        root: u64,
        inode: u64,
        offset: u64,
        path: String,
    },
    /// No good copy of `logical` (`unable to fixup (regular) error at
    /// logical L on dev D ...`).
    Unfixed { logical: u64 },
}

/// Pure: one kernel log message about a device in `devices`, read as a
/// scrub error (the 6.1 and 6.4+ scrub wordings), or `None`.
fn parse_log(msg: &str, devices: &[String]) -> Option<LogEvent> {
    let ours = devices.iter().any(|d| {
        !d.is_empty()
            && (msg.ends_with(&format!(" on dev {d}"))
                || [",", " ", ":"]
                    .iter()
                    .any(|end| msg.contains(&format!(" on dev {d}{end}"))))
    });
    if !ours {
        return None;
    }
    let (_, rest) = msg.split_once("error at logical ")?;
    let logical: u64 = rest.split([' ', ',']).next()?.parse().ok()?;
    if msg.contains("unable to fixup") {
        return Some(LogEvent::Unfixed { logical });
    }
    let (fields, path) = rest.split_once("(path: ")?;
    let path = path.strip_suffix(')').unwrap_or(path).to_owned();
    let words: Vec<&str> = fields.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    let after = |name: &str| -> Option<u64> {
        let i = words.iter().position(|w| *w == name)?;
        words.get(i + 1)?.parse().ok()
    };
    Some(LogEvent::Named {
        logical,
        root: after("root")?,
        inode: after("inode")?,
        offset: after("offset")?,
        path,
    })
}

/// The damaged files among the log's events: those named for a logical
/// address the kernel could not fix up. At most 1000.
fn damaged_from(events: &[LogEvent]) -> Vec<DamagedFile> {
    let mut unfixed: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for e in events {
        if let LogEvent::Unfixed { logical } = e {
            *unfixed.entry(*logical).or_default() += 1;
        }
    }
    let mut files: std::collections::BTreeMap<(u64, u64), DamagedFile> =
        std::collections::BTreeMap::new();
    let mut counted: std::collections::BTreeSet<(u64, u64, u64)> =
        std::collections::BTreeSet::new();
    for e in events {
        if let LogEvent::Named {
            logical,
            root,
            inode,
            offset,
            path,
        } = e
            && let Some(&n) = unfixed.get(logical)
        {
            if files.len() >= 1000 && !files.contains_key(&(*root, *inode)) {
                continue;
            }
            let f = files.entry((*root, *inode)).or_insert_with(|| DamagedFile {
                subvolume: *root,
                inode: *inode,
                path: path.clone(),
                offsets: Vec::new(),
                errors: 0,
            });
            if !f.offsets.contains(offset) {
                f.offsets.push(*offset);
            }
            if counted.insert((*root, *inode, *logical)) {
                f.errors += n;
            }
        }
    }
    let mut v: Vec<DamagedFile> = files.into_values().collect();
    for f in &mut v {
        f.offsets.sort_unstable();
    }
    v
}

impl ScrubReport {
    /// The documented exit status of this report.
    pub fn exit_code(&self) -> u8 {
        if self.outcome == Outcome::Interrupted {
            exit::INTERRUPTED.code
        } else if self.totals.uncorrectable > 0 {
            exit::SCRUB_UNCORRECTABLE.code
        } else if self.totals.errors > 0 || self.totals.corrected > 0 {
            exit::SCRUB_CORRECTED.code
        } else {
            exit::OK.code
        }
    }
}

/// `scrub --json`'s JSON Lines records, tagged by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum ScrubRecord {
    /// The plan.
    Plan {
        /// What will be scrubbed.
        plan: ScrubPlan,
    },
    /// About once a second.
    Progress {
        /// Bytes to read (every device; earlier runs of a resumed scrub
        /// included).
        bytes_to_read: u64,
        /// Bytes read so far (earlier runs of a resumed scrub included).
        bytes_scrubbed: u64,
        /// Bytes per second over the last seconds (the one meter of every
        /// job, `model::progress`); `null` while measuring, stalled or
        /// stopping.
        rate_bytes_per_sec: Option<f64>,
        /// Seconds left, once the rate is stable.
        eta_seconds: Option<f64>,
        /// What the scrub is doing, as far as the counts tell.
        pace: crate::model::progress::Pace,
        /// Errors found so far.
        errors: u64,
    },
    /// A signal arrived: the scrub is being cancelled.
    Stopping {
        /// SIGINT, SIGTERM or SIGHUP.
        signal: String,
    },
    /// A sentence about the run (suspend not held off, a limit not set).
    Notice {
        /// One sentence.
        message: String,
    },
    /// The last record.
    Result {
        /// The report.
        report: ScrubReport,
    },
}

/// `scrub --status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScrubStatus {
    /// The mount point given.
    pub mount_point: PathBuf,
    /// The filesystem's UUID.
    pub fsid: String,
    /// A scrub runs now (ours or `btrfs scrub start`'s).
    pub running: bool,
    /// The running scrub's counters per device (from SCRUB_PROGRESS).
    pub devices: Vec<DeviceScrub>,
    /// What btrfs-lab saved of its last scrub of this filesystem.
    pub last: Option<SavedScrub>,
    /// The devices whose scrub speed is limited now (scrub_speed_max not
    /// 0): every scrub of them runs at most that fast.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<SpeedLimit>,
}

/// A device's scrub speed limit in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SpeedLimit {
    /// The btrfs device id.
    pub devid: u64,
    /// scrub_speed_max, bytes per second.
    pub bytes_per_second: u64,
    /// Who set it, when btrfs-lab's settings ledger has a record of it
    /// (`btrfs-lab scrub (pid 12), running now`); absent: set by hand or
    /// by another tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_by: Option<String>,
}

/// `scrub --cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScrubCancel {
    /// The mount point given.
    pub mount_point: PathBuf,
    /// The scrub was cancelled (the kernel keeps its progress).
    pub cancelled: bool,
}

/// The state file: what was done of the last scrub, per device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SavedScrub {
    /// The filesystem's UUID.
    pub fsid: String,
    /// When the scrub (its first run) started, seconds since the epoch.
    pub started_at: u64,
    /// When it was last saved, seconds since the epoch.
    pub saved_at: u64,
    /// Every device ran to its end.
    pub finished: bool,
    /// `--readonly`.
    pub readonly: bool,
    /// How long its runs took together, seconds.
    #[serde(default)]
    pub duration_seconds: f64,
    /// The sums of every run per device.
    pub devices: Vec<DeviceScrub>,
}

impl SavedScrub {
    /// Parses a state file.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| {
            Error::new(
                ErrorKind::Parse,
                format!(
                    "{} is not a btrfs-lab scrub state file: {e}",
                    path.display()
                ),
            )
            .with_hint("remove it to start the next scrub from the beginning")
        })
    }

    /// The device `devid`'s saved counters.
    pub fn device(&self, devid: u64) -> Option<&DeviceScrub> {
        self.devices.iter().find(|d| d.devid == devid)
    }
}

/// btrfs-lab's state directory when `--state-dir` is not given (the scrub
/// state is in its `scrub/`).
pub use crate::sys::fs::state::STATE_DIR;

/// Where the state of `fsid`'s scrub is kept (`STATE_DIR/scrub/FSID.json`).
pub struct StateStore {
    room: StateRoom,
    state_dir: PathBuf,
}

impl StateStore {
    /// `state_dir`/scrub.
    pub fn new(state_dir: &Path) -> Self {
        StateStore {
            room: StateRoom::new(state_dir, "scrub"),
            state_dir: state_dir.to_path_buf(),
        }
    }

    /// The ledger of kernel settings in the same state directory
    /// (`STATE/settings`).
    pub fn ledger(&self) -> crate::sys::kernel::settings::Ledger {
        crate::sys::kernel::settings::Ledger::new(&self.state_dir)
    }

    fn name(fsid: &str) -> String {
        format!("{fsid}.json")
    }

    /// The state file of `fsid`.
    pub fn file(&self, fsid: &str) -> PathBuf {
        self.room.file(&Self::name(fsid))
    }

    /// The saved state of `fsid`, if any.
    pub fn load(&self, fsid: &str) -> Result<Option<SavedScrub>> {
        match self.room.read(&Self::name(fsid))? {
            Some(t) => SavedScrub::parse(&t, &self.file(fsid)).map(Some),
            None => Ok(None),
        }
    }

    /// Replaces the saved state atomically.
    pub fn save(&self, s: &SavedScrub) -> Result<()> {
        self.room.save(&Self::name(&s.fsid), s)
    }
}

/// What the user asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Request {
    /// Report only (`btrfs scrub start -r`).
    pub readonly: bool,
    /// Bytes per second per device.
    pub limit: Option<u64>,
    /// Continue an interrupted scrub.
    pub resume: bool,
}

/// One device as the planner takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInput {
    /// The btrfs device id.
    pub devid: u64,
    /// Its block device (empty when missing).
    pub path: String,
    /// Its allocated bytes (DEV_INFO).
    pub allocated: u64,
    /// What a scrub reads on it (chunk usage), when it could be read.
    pub used: Option<u64>,
    /// Its scrub_speed_max file.
    pub speed_max_file: Option<PathBuf>,
    /// Its scrub_speed_max now (None or 0: no limit).
    pub speed_max_now: Option<u64>,
}

/// Pure: the plan from the devices and the saved state.
pub fn plan_from(
    mount_point: &Path,
    fsid: &str,
    devices: &[DeviceInput],
    saved: Option<&SavedScrub>,
    req: Request,
) -> Result<ScrubPlan> {
    let resumable = saved.filter(|s| !s.finished && s.fsid == fsid);
    if req.resume && resumable.is_none() {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "no interrupted scrub of {} to resume",
                mount_point.display()
            ),
        )
        .with_hint("start one without --resume"));
    }
    let resume = req.resume;
    let mut planned = Vec::new();
    let mut missing = Vec::new();
    for d in devices {
        if d.path.is_empty() {
            missing.push(d.devid);
            continue;
        }
        let prior = if resume {
            resumable.and_then(|s| s.device(d.devid))
        } else {
            None
        };
        if prior.is_some_and(|p| p.finished) {
            continue;
        }
        planned.push(PlannedDevice {
            devid: d.devid,
            path: d.path.clone(),
            bytes_to_read: d.used.unwrap_or(d.allocated),
            allocated_only: d.used.is_none(),
            start: prior.map_or(0, |p| p.last_physical),
            speed_max_file: d.speed_max_file.clone(),
            speed_max_now: d.speed_max_now.filter(|v| *v > 0),
        });
    }
    Ok(ScrubPlan {
        mount_point: mount_point.to_path_buf(),
        fsid: fsid.to_owned(),
        readonly: req.readonly,
        resume,
        limit: req.limit,
        devices: planned,
        missing,
    })
}

/// Reads the filesystem and the saved state and plans the run.
pub fn plan(
    fs: &btrfs::FsHandle,
    store: &StateStore,
    req: Request,
) -> Result<(ScrubPlan, Option<SavedScrub>)> {
    let mount = fs.path();
    let fsid = fs.fsid().to_owned();
    if !req.readonly && fs.read_only() {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "{} is mounted read-only: a scrub that repairs cannot write the good copies back",
                mount.display()
            ),
        )
        .with_hint("add --readonly to only find the errors, or remount it read-write (mount -o remount,rw)"));
    }
    let used = bytes_to_read(fs)?;
    let devs: Vec<_> = fs
        .devices()?
        .into_iter()
        .map(|d| DeviceInput {
            devid: d.devid,
            speed_max_file: btrfs::scrub_speed_max_file(&fsid, d.devid),
            speed_max_now: btrfs::scrub_speed_max(&SysRoot::host(), &fsid, d.devid),
            used: used
                .as_ref()
                .map(|u| u.iter().find(|(id, _)| *id == d.devid).map_or(0, |x| x.1)),
            path: d.path,
            allocated: d.bytes_used,
        })
        .collect();
    let saved = store.load(&fsid)?;
    let p = plan_from(mount, &fsid, &devs, saved.as_ref(), req)?;
    Ok((p, saved))
}

/// What a scrub reads on each device of the filesystem held (by devid),
/// when the chunk tree can be read.
fn bytes_to_read(fs: &btrfs::FsHandle) -> Result<Option<Vec<(u64, u64)>>> {
    let bgt = crate::sys::fs::target::features(&SysRoot::host(), fs.fsid())
        .iter()
        .any(|x| x == "block_group_tree");
    btrfs::scrub_bytes_per_device_of(fs.held_fd()?, bgt, fs.path())
}

/// The scrub counters of each device of `mount` while a scrub runs
/// (empty when none runs).
pub fn running(fs: &btrfs::FsHandle) -> Result<Vec<DeviceScrub>> {
    let mount = fs.path();
    let f = fs.held_fd()?;
    let mut out = Vec::new();
    let mut used = None;
    for d in fs.devices()? {
        if d.path.is_empty() {
            continue;
        }
        match btrfs_uapi::scrub::scrub_progress(f, d.devid) {
            Ok(Some(p)) => {
                if used.is_none() {
                    used = Some(bytes_to_read(fs)?.unwrap_or_default());
                }
                let to_read = used
                    .as_ref()
                    .and_then(|u| u.iter().find(|(id, _)| *id == d.devid))
                    .map_or(d.bytes_used, |x| x.1);
                out.push(DeviceScrub::of(d.devid, &d.path, to_read, &p));
            }
            Ok(None) => {}
            Err(e) => {
                return Err(Error::from_errno(
                    e,
                    "cannot read the scrub progress of",
                    mount,
                ));
            }
        }
    }
    Ok(out)
}

/// `--status`.
pub fn status(fs: &btrfs::FsHandle, store: &StateStore) -> Result<ScrubStatus> {
    let fsid = fs.fsid().to_owned();
    let devices = running(fs)?;
    Ok(ScrubStatus {
        mount_point: fs.path().to_path_buf(),
        fsid: fsid.clone(),
        running: !devices.is_empty(),
        last: store.load(&fsid)?,
        limits: limits(fs, &fsid, store)?,
        devices,
    })
}

/// The scrub speed limits in force on `mount`'s devices, with who set them
/// when the settings ledger knows.
fn limits(fs: &btrfs::FsHandle, fsid: &str, store: &StateStore) -> Result<Vec<SpeedLimit>> {
    use crate::sys::kernel::settings::{self, Setting};
    let ledger = store.ledger();
    let mut out = Vec::new();
    for d in fs.devices()? {
        let Some(v) = btrfs::scrub_speed_max(&SysRoot::host(), fsid, d.devid).filter(|v| *v > 0)
        else {
            continue;
        };
        let set_by = ledger
            .find(&Setting::ScrubSpeedMax {
                fsid: fsid.to_owned(),
                devid: d.devid,
            })
            .map(|r| {
                format!(
                    "btrfs-lab {} (pid {}), {}",
                    r.command,
                    r.pid,
                    if settings::owner_running(&r) {
                        "running now"
                    } else {
                        "killed before it put the limit back"
                    }
                )
            });
        out.push(SpeedLimit {
            devid: d.devid,
            bytes_per_second: v,
            set_by,
        });
    }
    Ok(out)
}

/// `--cancel`: ENOTCONN (nothing runs) is an error of kind `State`.
pub fn cancel(fs: &btrfs::FsHandle) -> Result<ScrubCancel> {
    let mount = fs.path();
    match btrfs_uapi::scrub::scrub_cancel(fs.held_fd()?) {
        Ok(()) => Ok(ScrubCancel {
            mount_point: mount.to_path_buf(),
            cancelled: true,
        }),
        Err(Errno::ENOTCONN) => Err(Error::new(
            ErrorKind::State,
            format!("no scrub runs on {}", mount.display()),
        )
        .with_hint(format!(
            "btrfs-lab scrub {} --status shows the last one",
            mount.display()
        ))),
        Err(e) => Err(Error::from_errno(e, "cannot cancel the scrub of", mount)),
    }
}

/// Sets `--limit` on every planned device (restored when dropped: every
/// exit path, a panic too), or says which device the kernel cannot limit.
fn set_limit(plan: &ScrubPlan, store: &StateStore, ui: &dyn Ui) -> Result<btrfs::ScrubSpeedGuard> {
    let Some(limit) = plan.limit else {
        return Ok(btrfs::ScrubSpeedGuard::none());
    };
    let mut devids = Vec::new();
    for d in &plan.devices {
        match &d.speed_max_file {
            Some(_) => devids.push(d.devid),
            None => ui.note(&format!(
                "device {} has no scrub_speed_max (kernel older than 5.14): --limit does not apply to it",
                d.devid
            )),
        }
    }
    btrfs::ScrubSpeedGuard::set(&store.ledger(), &plan.fsid, &devids, limit)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

type Worker =
    std::thread::JoinHandle<std::result::Result<(btrfs_uapi::scrub::ScrubProgress, bool), Errno>>;

/// Runs the plan: one thread per device; progress, signals and the saved
/// state from this one. Returns once every scrub ioctl returned.
pub fn execute(
    fs: &btrfs::FsHandle,
    plan: &ScrubPlan,
    saved: Option<SavedScrub>,
    store: &StateStore,
    signals: &signals::OperationSignals,
    ui: &dyn Ui,
) -> Result<ScrubReport> {
    let mount = &plan.mount_point;
    let dir = fs.held_fd()?;
    if !running(fs)?.is_empty() {
        return Err(Error::new(
            ErrorKind::Busy,
            format!("a scrub already runs on {}", mount.display()),
        )
        .with_hint(format!(
            "follow it with btrfs-lab scrub {} --status, or cancel it with --cancel",
            mount.display()
        )));
    }
    let _limit = set_limit(plan, store, ui)?;
    let inhibitor = match SleepInhibitor::hold(&format!("scrub of {}", mount.display())) {
        Ok(i) => Some(i),
        Err(why) => {
            let message = format!(
                "suspend is not held off while the scrub runs ({why}); a suspend pauses it, \
                 and kernels 6.19 and later cancel it: btrfs-lab scrub {} --resume then continues",
                mount.display()
            );
            ui::emit(
                ui,
                &ScrubRecord::Notice {
                    message: message.clone(),
                },
            );
            ui.note(&message);
            None
        }
    };
    let suspend_held_off = inhibitor.is_some();
    // Opened before the first scrub ioctl: every message of this run.
    let mut log = btrfs::KernelLogFollower::open();
    let dev_paths: Vec<String> = plan.devices.iter().map(|d| d.path.clone()).collect();
    let mut events: Vec<LogEvent> = Vec::new();
    let mut read_log = |events: &mut Vec<LogEvent>| {
        log.drain(100_000, |msg| {
            if events.len() < 100_000
                && let Some(e) = parse_log(msg, &dev_paths)
            {
                events.push(e);
            }
        });
    };
    let started_at = now_secs();
    let t0 = Instant::now();
    let mut workers: Vec<(PlannedDevice, Option<Worker>)> = Vec::new();
    for d in &plan.devices {
        let f = fs.try_clone()?;
        let (devid, start, ro) = (d.devid, d.start, plan.readonly);
        let h =
            std::thread::spawn(move || ioctl::scrub_device(f.held_fd_errno()?, devid, start, ro));
        workers.push((d.clone(), Some(h)));
    }
    let prior: Vec<DeviceScrub> = if plan.resume {
        saved
            .as_ref()
            .map(|s| s.devices.clone())
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let prior_done: u64 = prior.iter().map(|d| d.bytes_scrubbed).sum();
    let total: u64 = plan.devices.iter().map(|d| d.bytes_to_read).sum::<u64>()
        + prior
            .iter()
            .filter(|d| d.finished)
            .map(|d| d.bytes_to_read)
            .sum::<u64>();
    let mut track = ui::Track::new(ui, "scrub", "scrubbing").records(false);
    let mut meter = crate::model::progress::Meter::new();
    let mut results: Vec<Option<DeviceScrub>> = vec![None; workers.len()];
    let mut last_seen: Vec<DeviceScrub> = plan
        .devices
        .iter()
        .map(|d| DeviceScrub {
            devid: d.devid,
            path: d.path.clone(),
            bytes_to_read: d.bytes_to_read,
            last_physical: d.start,
            ..DeviceScrub::default()
        })
        .collect();
    let mut cancelling = false;
    let mut failure: Option<Error> = None;
    let mut last_event = Instant::now() - Duration::from_secs(10);
    loop {
        let (n, sig) = signals.wait(Duration::from_millis(250));
        if n > 0 {
            let name = sig.map_or("a signal", |s| s.name()).to_owned();
            if cancelling {
                ui.note(
                    "still stopping: waiting until the kernel's scrub of every device returned",
                );
            } else {
                ui::emit(
                    ui,
                    &ScrubRecord::Stopping {
                        signal: name.clone(),
                    },
                );
                ui.note(&format!(
                    "{name}: cancelling the scrub; what was done is kept, btrfs-lab scrub {} --resume continues",
                    mount.display()
                ));
            }
            cancelling = true;
            meter.pausing();
        }
        for (i, (d, h)) in workers.iter_mut().enumerate() {
            if h.as_ref().is_some_and(|h| h.is_finished())
                && let Some(h) = h.take()
            {
                match h.join() {
                    Ok(Ok((p, cancelled))) => {
                        let mut r = DeviceScrub::of(d.devid, &d.path, d.bytes_to_read, &p);
                        r.finished = !cancelled;
                        results[i] = Some(r);
                    }
                    Ok(Err(e)) => {
                        if failure.is_none() {
                            failure = Some(Error::from_errno(
                                e,
                                &format!("cannot scrub device {} of", d.devid),
                                mount,
                            ));
                        }
                        let mut r = last_seen[i].clone();
                        r.finished = false;
                        results[i] = Some(r);
                        cancelling = true;
                    }
                    Err(_) => {
                        failure.get_or_insert_with(|| {
                            Error::new(ErrorKind::Io, "a scrub thread panicked")
                        });
                        results[i] = Some(last_seen[i].clone());
                        cancelling = true;
                    }
                }
            }
        }
        let alive = workers.iter().any(|(_, h)| h.is_some());
        if !alive {
            break;
        }
        if cancelling {
            // Again on every turn: a thread may not have entered the
            // ioctl yet when the first cancel came (ENOTCONN then).
            let _ = btrfs_uapi::scrub::scrub_cancel(dir);
        }
        for (i, (d, h)) in workers.iter().enumerate() {
            if h.is_some()
                && let Ok(Some(p)) = btrfs_uapi::scrub::scrub_progress(dir, d.devid)
            {
                last_seen[i] = DeviceScrub::of(d.devid, &d.path, d.bytes_to_read, &p);
            }
        }
        let now_done: u64 = (0..workers.len())
            .map(|i| results[i].as_ref().unwrap_or(&last_seen[i]).bytes_scrubbed)
            .sum();
        let done = prior_done + now_done;
        read_log(&mut events);
        let reading = meter.observe(done.min(total), total);
        track.show(&reading, None);
        if last_event.elapsed() >= Duration::from_secs(1) {
            last_event = Instant::now();
            let errors: u64 = last_seen.iter().map(DeviceScrub::errors).sum();
            ui::emit(
                ui,
                &ScrubRecord::Progress {
                    bytes_to_read: total,
                    bytes_scrubbed: done,
                    rate_bytes_per_sec: reading.rate_bytes_per_sec,
                    eta_seconds: reading.eta_seconds,
                    pace: reading.pace,
                    errors,
                },
            );
        }
    }
    track.finish();
    read_log(&mut events);
    drop(inhibitor);
    let devices: Vec<DeviceScrub> = results
        .into_iter()
        .zip(last_seen)
        .map(|(r, l)| r.unwrap_or(l))
        .collect();
    let all_finished = devices.iter().all(|d| d.finished);
    // The saved state: the sums of every run per device.
    let mut sums: Vec<DeviceScrub> = prior.clone();
    for d in &devices {
        match sums.iter_mut().find(|s| s.devid == d.devid) {
            Some(s) => {
                let mut merged = d.clone();
                merged.bytes_scrubbed += s.bytes_scrubbed;
                merged.data_extents += s.data_extents;
                merged.tree_extents += s.tree_extents;
                merged.read_errors += s.read_errors;
                merged.csum_errors += s.csum_errors;
                merged.verify_errors += s.verify_errors;
                merged.super_errors += s.super_errors;
                merged.corrected += s.corrected;
                merged.uncorrectable += s.uncorrectable;
                merged.unverified += s.unverified;
                *s = merged;
            }
            None => sums.push(d.clone()),
        }
    }
    let state = SavedScrub {
        fsid: plan.fsid.clone(),
        started_at: if plan.resume {
            saved.as_ref().map_or(started_at, |s| s.started_at)
        } else {
            started_at
        },
        saved_at: now_secs(),
        finished: all_finished && sums.iter().all(|d| d.finished),
        readonly: plan.readonly,
        duration_seconds: t0.elapsed().as_secs_f64()
            + if plan.resume {
                saved.as_ref().map_or(0.0, |s| s.duration_seconds)
            } else {
                0.0
            },
        devices: sums,
    };
    store.save(&state)?;
    if let Some(e) = failure {
        return Err(e);
    }
    let totals = Totals::of(&devices);
    Ok(ScrubReport {
        mount_point: mount.clone(),
        fsid: plan.fsid.clone(),
        outcome: if all_finished {
            Outcome::Finished
        } else {
            Outcome::Interrupted
        },
        resumed: plan.resume,
        readonly: plan.readonly,
        started_at,
        duration_seconds: t0.elapsed().as_secs_f64(),
        devices,
        totals,
        missing: plan.missing.clone(),
        suspend_held_off,
        damaged_files: damaged_from(&events),
    })
}

/// The metrics of the last scrub of a filesystem (`last`: what btrfs-lab
/// saved of it, the sums of every run of a resumed scrub) and whether one
/// runs now, as Prometheus text for node_exporter's textfile collector.
/// Labelled as doctor's (`mountpoint`, `uuid`, then `devid`), and with
/// names of their own (doctor's `btrfs_lab_scrub_errors` and
/// `btrfs_lab_scrub_last_end_timestamp_seconds` are the record of any
/// scrub, btrfs-progs' too): both files can sit in one collector directory.
pub fn metrics(mount_point: &Path, fsid: &str, last: Option<&SavedScrub>, running: bool) -> String {
    let mp = mount_point.display().to_string();
    let fs: [(&str, &str); 2] = [("mountpoint", &mp), ("uuid", fsid)];
    let mut m = Metrics::default();
    m.add(
        "btrfs_lab_scrub_running",
        "gauge",
        "Whether btrfs-lab scrub runs on the filesystem (1 from its start, 0 once it ended).",
        &fs,
        f64::from(u8::from(running)),
    );
    let Some(last) = last else {
        return m.render();
    };
    m.add(
        "btrfs_lab_scrub_last_start_timestamp_seconds",
        "gauge",
        "When the last btrfs-lab scrub started (its first run when resumed), seconds since the epoch.",
        &fs,
        last.started_at as f64,
    );
    m.add(
        "btrfs_lab_scrub_last_saved_timestamp_seconds",
        "gauge",
        "When the last btrfs-lab scrub run ended (finished or interrupted), seconds since the epoch.",
        &fs,
        last.saved_at as f64,
    );
    m.add(
        "btrfs_lab_scrub_last_duration_seconds",
        "gauge",
        "How long the runs of the last btrfs-lab scrub took together.",
        &fs,
        last.duration_seconds,
    );
    m.add(
        "btrfs_lab_scrub_last_finished",
        "gauge",
        "Whether the last btrfs-lab scrub read every device to its end (1) or was interrupted (0: --resume continues it).",
        &fs,
        f64::from(u8::from(last.finished)),
    );
    for d in &last.devices {
        let devid = d.devid.to_string();
        let dev = [fs[0], fs[1], ("devid", devid.as_str())];
        m.add(
            "btrfs_lab_scrub_device_bytes_scrubbed",
            "gauge",
            "Bytes the last btrfs-lab scrub read on a device.",
            &dev,
            d.bytes_scrubbed as f64,
        );
        for (kind, v) in [
            ("read", d.read_errors),
            ("csum", d.csum_errors),
            ("verify", d.verify_errors),
            ("super", d.super_errors),
        ] {
            m.add(
                "btrfs_lab_scrub_device_errors",
                "gauge",
                "Errors the last btrfs-lab scrub found on a device, by kind.",
                &[dev[0], dev[1], dev[2], ("kind", kind)],
                v as f64,
            );
        }
        m.add(
            "btrfs_lab_scrub_device_corrected_errors",
            "gauge",
            "Errors the last btrfs-lab scrub repaired on a device.",
            &dev,
            d.corrected as f64,
        );
        m.add(
            "btrfs_lab_scrub_device_uncorrectable_errors",
            "gauge",
            "Errors the last btrfs-lab scrub found no good copy for on a device.",
            &dev,
            d.uncorrectable as f64,
        );
    }
    m.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_file_that_is_not_a_bounded_regular_file_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let store = StateStore::new(t.path());
        assert!(
            store.load("abc").unwrap().is_none(),
            "no state directory yet"
        );
        std::fs::create_dir_all(store.file("abc").parent().unwrap()).unwrap();
        assert!(store.load("abc").unwrap().is_none(), "none yet");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            store.file("abc"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = store.load("abc").unwrap_err();
        assert!(e.message().contains("it is a FIFO"), "{}", e.message());
        std::os::unix::fs::symlink("/dev/zero", store.file("def")).unwrap();
        assert!(store.load("def").is_err());
        std::fs::write(store.file("big"), vec![b' '; (1 << 20) + 1]).unwrap();
        let e = store.load("big").unwrap_err();
        assert!(e.message().contains("larger than"), "{}", e.message());
    }

    fn dev(devid: u64, path: &str, used: u64) -> DeviceInput {
        DeviceInput {
            devid,
            path: path.to_owned(),
            allocated: used * 2,
            used: Some(used),
            speed_max_file: None,
            speed_max_now: None,
        }
    }

    fn saved(finished: bool, last: &[(u64, u64, bool)]) -> SavedScrub {
        SavedScrub {
            fsid: "f".into(),
            started_at: 1,
            saved_at: 2,
            finished,
            readonly: false,
            duration_seconds: 1.0,
            devices: last
                .iter()
                .map(|&(devid, last_physical, finished)| DeviceScrub {
                    devid,
                    last_physical,
                    finished,
                    bytes_to_read: 100,
                    ..DeviceScrub::default()
                })
                .collect(),
        }
    }

    #[test]
    fn a_new_scrub_starts_every_present_device_at_zero() {
        let devs = [dev(1, "/dev/a", 100), dev(2, "", 100), dev(3, "/dev/c", 50)];
        let p = plan_from(Path::new("/m"), "f", &devs, None, Request::default()).unwrap();
        assert_eq!(
            p.devices.iter().map(|d| d.devid).collect::<Vec<_>>(),
            [1, 3]
        );
        assert!(p.devices.iter().all(|d| d.start == 0));
        assert_eq!(p.missing, [2]);
        assert_eq!(p.bytes_left(), 150);
    }

    #[test]
    fn a_resume_starts_at_last_physical_and_skips_finished_devices() {
        let devs = [dev(1, "/dev/a", 100), dev(2, "/dev/b", 100)];
        let s = saved(false, &[(1, 40, false), (2, 100, true)]);
        let req = Request {
            resume: true,
            ..Request::default()
        };
        let p = plan_from(Path::new("/m"), "f", &devs, Some(&s), req).unwrap();
        assert!(p.resume);
        assert_eq!(p.devices.len(), 1);
        assert_eq!((p.devices[0].devid, p.devices[0].start), (1, 40));
        assert_eq!(p.bytes_left(), 60);
    }

    #[test]
    fn nothing_to_resume_is_refused() {
        let devs = [dev(1, "/dev/a", 100)];
        let req = Request {
            resume: true,
            ..Request::default()
        };
        for s in [None, Some(saved(true, &[(1, 100, true)]))] {
            let e = plan_from(Path::new("/m"), "f", &devs, s.as_ref(), req).unwrap_err();
            assert!(
                e.message().contains("no interrupted scrub"),
                "{}",
                e.message()
            );
        }
    }

    #[test]
    fn state_file_round_trips_and_garbage_is_a_parse_error() {
        let s = saved(false, &[(1, 40, false)]);
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(SavedScrub::parse(&text, Path::new("x")).unwrap(), s);
        let e = SavedScrub::parse("{", Path::new("x")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Parse);
    }

    #[test]
    fn outcome_decides_the_exit_status() {
        let mut d = DeviceScrub {
            devid: 1,
            csum_errors: 2,
            corrected: 2,
            finished: true,
            ..DeviceScrub::default()
        };
        let mut r = ScrubReport {
            mount_point: "/m".into(),
            fsid: "f".into(),
            outcome: Outcome::Finished,
            resumed: false,
            readonly: false,
            started_at: 0,
            duration_seconds: 1.0,
            devices: vec![d.clone()],
            totals: Totals::of(std::slice::from_ref(&d)),
            missing: vec![],
            suspend_held_off: false,
            damaged_files: vec![],
        };
        assert_eq!(r.exit_code(), exit::SCRUB_CORRECTED.code);
        d.uncorrectable = 1;
        r.totals = Totals::of(std::slice::from_ref(&d));
        assert_eq!(r.exit_code(), exit::SCRUB_UNCORRECTABLE.code);
        r.outcome = Outcome::Interrupted;
        assert_eq!(r.exit_code(), exit::INTERRUPTED.code);
        r.devices.clear();
        r.totals = Totals::default();
        r.outcome = Outcome::Finished;
        assert_eq!(r.exit_code(), exit::OK.code);
        let s = saved(false, &[(1, 40, false)]);
        let m = metrics(Path::new("/m"), "f", Some(&s), true);
        assert!(
            m.contains("btrfs_lab_scrub_running{mountpoint=\"/m\",uuid=\"f\"} 1\n"),
            "{m}"
        );
        assert!(
            m.contains("btrfs_lab_scrub_last_finished{mountpoint=\"/m\",uuid=\"f\"} 0\n"),
            "{m}"
        );
        let first = metrics(Path::new("/m"), "f", None, true);
        assert_eq!(
            first.lines().filter(|l| !l.starts_with('#')).count(),
            1,
            "{first}"
        );
    }

    /// Logged by Linux 6.18 during `scrub::single_corruption_is_uncorrectable`
    /// (a 16 MiB file on a single-profile sandbox, blocks overwritten on the
    /// loop device), and the 6.1 wording (commas between the fields).
    const LOG: [&str; 6] = [
        "scrub: checksum error at logical 84148224 on dev /dev/loop1, physical 146210816 root 5 inode 257 offset 65536 length 4096 links 1 (path: file)",
        "scrub: unable to fixup (regular) error at logical 84148224 on dev /dev/loop1 physical 146210816",
        "scrub: checksum error at logical 84082688 on dev /dev/loop1, physical 146145280 root 5 inode 257 offset 0 length 4096 links 1 (path: file)",
        "checksum error at logical 99 on dev /dev/loop1, physical 7, root 256, inode 300, offset 8192, length 4096, links 1 (path: dir/a b)",
        "unable to fixup (regular) error at logical 99 on dev /dev/loop1",
        "scrub: checksum error at logical 5 on dev /dev/loop12, physical 5 root 5 inode 9 offset 0 length 4096 links 1 (path: other-fs)",
    ];

    #[test]
    fn damaged_files_are_those_the_kernel_could_not_fix_up() {
        let devs = vec!["/dev/loop1".to_owned()];
        let events: Vec<LogEvent> = LOG.iter().filter_map(|m| parse_log(m, &devs)).collect();
        assert_eq!(events.len(), 5, "the other filesystem's line is not ours");
        let v = damaged_from(&events);
        assert_eq!(
            v,
            [
                DamagedFile {
                    subvolume: 5,
                    inode: 257,
                    path: "file".into(),
                    offsets: vec![65536],
                    errors: 1,
                },
                DamagedFile {
                    subvolume: 256,
                    inode: 300,
                    path: "dir/a b".into(),
                    offsets: vec![8192],
                    errors: 1,
                },
            ],
            "the block at 0 was named but fixed up (no unable-to-fixup line)"
        );
        assert!(parse_log("BTRFS info: nothing here", &devs).is_none());
        assert!(parse_log("error at logical x on dev /dev/loop1,", &devs).is_none());
    }
}
