//! scrub's documents: the plan, the report and its records, the status,
//! the cancel, and the saved state of the last scrub.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::exit;

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
    /// Of the bytes scrubbed, those of tree (metadata) blocks.
    #[serde(default)]
    pub tree_bytes: u64,
    /// Data blocks without a checksum (NOCOW files), not verified.
    #[serde(default)]
    pub no_csum: u64,
    /// Checksums of blocks freed while the scrub read them.
    #[serde(default)]
    pub csum_discards: u64,
    /// Blocks the kernel could not scrub for lack of memory.
    #[serde(default)]
    pub malloc_errors: u64,
}

impl DeviceScrub {
    /// Read, checksum, verify and superblock errors.
    pub fn errors(&self) -> u64 {
        self.read_errors + self.csum_errors + self.verify_errors + self.super_errors
    }

    /// The kernel's counters of one run (`p`) added to these.
    pub(super) fn add(&mut self, p: &btrfs_uapi::scrub::ScrubProgress) {
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
        self.tree_bytes += p.tree_bytes_scrubbed;
        self.no_csum += p.no_csum;
        self.csum_discards += p.csum_discards;
        self.malloc_errors += p.malloc_errors;
        self.last_physical = self.last_physical.max(p.last_physical);
    }

    /// These counters (a later run) with an earlier run's added: where
    /// the device got to and whether it finished stay this run's.
    pub(super) fn after(&self, earlier: &DeviceScrub) -> DeviceScrub {
        let mut d = self.clone();
        d.bytes_scrubbed += earlier.bytes_scrubbed;
        d.data_extents += earlier.data_extents;
        d.tree_extents += earlier.tree_extents;
        d.read_errors += earlier.read_errors;
        d.csum_errors += earlier.csum_errors;
        d.verify_errors += earlier.verify_errors;
        d.super_errors += earlier.super_errors;
        d.corrected += earlier.corrected;
        d.uncorrectable += earlier.uncorrectable;
        d.unverified += earlier.unverified;
        d.tree_bytes += earlier.tree_bytes;
        d.no_csum += earlier.no_csum;
        d.csum_discards += earlier.csum_discards;
        d.malloc_errors += earlier.malloc_errors;
        d
    }

    /// This device's counters of one run: the kernel's `p`.
    pub(super) fn of(
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
    /// Their sums (this run's).
    pub totals: Totals,
    /// The whole scrub's sums: this run's and, when it was resumed, the
    /// earlier runs' (from the saved state); the same as `totals` for a
    /// scrub in one run.
    #[serde(default)]
    pub scrub_totals: Totals,
    /// How long the whole scrub's runs took together, seconds.
    #[serde(default)]
    pub scrub_duration_seconds: f64,
    /// How many runs the whole scrub took (1, or more when resumed).
    #[serde(default)]
    pub runs: u32,
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
    /// The signal that cancelled it (`SIGINT`, ...), for the words of a
    /// caller that scrubbed as one step of its own job (`device replace
    /// --scrub`); not in the document.
    #[serde(skip)]
    pub stopped_by: Option<String>,
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
        /// The filesystem's UUID (`scrub --all --max-parallel N` runs
        /// several at once).
        #[serde(default)]
        fsid: String,
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
        pace: crate::report::progress::Pace,
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
    /// `scrub --all`: the first record, every mounted filesystem once and
    /// what is done with it; each one scrubbed then has its own records,
    /// plan to result.
    #[serde(rename = "all-plan")]
    AllPlan {
        /// The plan.
        plan: super::all::AllPlan,
    },
    /// `scrub --all`: the last record.
    #[serde(rename = "all-result")]
    AllResult {
        /// How each filesystem's scrub ended.
        report: super::all::AllReport,
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
    /// When the running scrub started, seconds since the epoch, when a
    /// btrfs-lab run scrubs (absent for `btrfs scrub start`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_since: Option<u64>,
    /// The running scrub's counters per device (from SCRUB_PROGRESS).
    pub devices: Vec<DeviceScrub>,
    /// What btrfs-lab saved of its last scrub of this filesystem.
    pub last: Option<SavedScrub>,
    /// The devices whose scrub speed is limited now (scrub_speed_max not
    /// 0): every scrub of them runs at most that fast.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<SpeedLimit>,
}

impl ScrubStatus {
    /// `since 2026-12-07T13:00:01Z` when a btrfs-lab run scrubs now.
    pub fn since(&self) -> Option<String> {
        self.running_since
            .map(|t| format!("since {}", crate::report::envelope::rfc3339_seconds(t)))
    }
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
    /// When its last run ended (finished or was interrupted: the state is
    /// saved at the end of each run), seconds since the epoch.
    pub saved_at: u64,
    /// Every device ran to its end.
    pub finished: bool,
    /// `--readonly`.
    pub readonly: bool,
    /// How long its runs took together, seconds.
    #[serde(default)]
    pub duration_seconds: f64,
    /// How many runs it took (1, or more when it was resumed; 0 in a
    /// state file written before this was counted).
    #[serde(default)]
    pub runs: u32,
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

    /// When it started, when its last run ended, how long its runs took
    /// and how many there were, in words:
    /// `started 2026-12-07T13:00:01Z, ended 2026-12-07T13:05:00Z, took 4m59s`
    /// (`stopped` when interrupted; `in 2 runs` when resumed).
    pub fn when(&self) -> String {
        use crate::report::envelope::rfc3339_seconds;
        format!(
            "started {}, {} {}, took {}{}",
            rfc3339_seconds(self.started_at),
            if self.finished { "ended" } else { "stopped" },
            rfc3339_seconds(self.saved_at),
            crate::report::rate::duration(self.duration_seconds),
            if self.runs > 1 {
                format!(" in {} runs", self.runs)
            } else {
                String::new()
            }
        )
    }

    /// The device `devid`'s saved counters.
    pub fn device(&self, devid: u64) -> Option<&DeviceScrub> {
        self.devices.iter().find(|d| d.devid == devid)
    }
}
