//! `--format progs-json`: btrfs-lab's own reports in the JSON shapes
//! proposed upstream for btrfs-progs, so tools written for those proposals
//! (btrfsd, Cockpit, scrutiny) read btrfs-lab too. One pure mapping per
//! command, from the typed report to the upstream shape; nothing here reads
//! the system. Sources and the choices made where a proposal is silent:
//! docs/json.md, "Upstream shapes".
//!
//! - `show` → `btrfs --format json filesystem show`, kdave/btrfs-progs
//!   PR #761 (head df1bd569): `filesystem-list` of filesystems with a
//!   `device-list`; a missing device has `missing: true`.
//! - `usage` → `btrfs --format json device usage`, kdave/btrfs-progs
//!   PR #1151: `device-usage`, one entry per device with its `chunks`.
//! - `scrub --status` → `btrfs --format json scrub status`, the structured
//!   status of kdave/btrfs-progs issue #1108 (an RFC): `scrub_session`
//!   and `scrub_device_session` keyed by devid.
//!
//! Every document starts with btrfs-progs' `"__header": {"version": "1"}`
//! (common/format-output.c `fmt_start`), as `btrfs --format json` prints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::usage::UsageReport;
use crate::scrub::{DeviceScrub, ScrubStatus};
use crate::space::show::ShowReport;

/// btrfs-progs' JSON format version (`fmt_start`: `"version": "1"`).
pub const FORMAT_VERSION: &str = "1";

/// `"__header"` of every btrfs-progs JSON document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Header {
    /// The format version, a string (`"1"`).
    pub version: String,
}

impl Default for Header {
    fn default() -> Self {
        Self {
            version: FORMAT_VERSION.to_owned(),
        }
    }
}

/// `btrfs --format json filesystem show` (PR #761).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FilesystemShow {
    /// The header.
    #[serde(rename = "__header")]
    pub header: Header,
    /// One entry per filesystem.
    #[serde(rename = "filesystem-list")]
    pub filesystems: Vec<ShowFilesystem>,
}

/// One filesystem of `filesystem show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShowFilesystem {
    /// The label, `none` when there is none (as the PR prints it).
    pub label: String,
    /// Filesystem UUID.
    pub uuid: String,
    /// Number of devices (the superblock's).
    pub total_devices: u64,
    /// Bytes used (the sum of SPACE_INFO used).
    pub used: u64,
    /// The devices by devid, then one entry per device the superblock
    /// counts but nothing lists.
    #[serde(rename = "device-list")]
    pub devices: Vec<ShowDevice>,
}

/// One device of `filesystem show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShowDevice {
    /// Device id (0 for a device nothing lists).
    pub devid: u64,
    /// Bytes btrfs uses on it (0 when missing).
    pub size: u64,
    /// Bytes allocated on it (0 when missing).
    pub used: u64,
    /// Block device path (empty when nothing names it).
    pub path: String,
    /// The device is missing.
    pub missing: bool,
}

/// `btrfs --format json device usage` (PR #1151).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceUsage {
    /// The header.
    #[serde(rename = "__header")]
    pub header: Header,
    /// One entry per device, by devid.
    #[serde(rename = "device-usage")]
    pub devices: Vec<UsageOfDevice>,
}

/// One device of `device usage`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageOfDevice {
    /// Block device path (`missing` for a missing device, as progs says).
    pub device: String,
    /// Device id.
    pub devid: u64,
    /// Size of the block device (0 when unknown, as progs prints it).
    pub device_size: u64,
    /// Bytes of the block device btrfs does not use.
    pub device_slack: u64,
    /// Chunks by type, profile and stripe count.
    pub chunks: Vec<UsageChunk>,
    /// Bytes btrfs may still allocate on it (negative after a shrink).
    pub unallocated: i64,
}

/// One line of `device usage` (`Data,RAID1:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UsageChunk {
    /// `Data`, `Metadata`, `System`, `Data+Metadata`.
    #[serde(rename = "type")]
    pub chunk_type: String,
    /// `single`, `DUP`, `RAID1`, ... (as progs prints it).
    pub profile: String,
    /// Stripes of each such chunk.
    pub num_stripes: u64,
    /// Raw bytes on this device.
    pub size: u64,
}

/// `btrfs --format json scrub status` (issue #1108's structured status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScrubStatusDoc {
    /// The header.
    #[serde(rename = "__header")]
    pub header: Header,
    /// Filesystem UUID.
    pub fsid: String,
    /// 1: no error left uncorrected; 0: uncorrectable errors (btrfs-lab's
    /// reading: the RFC does not define it; its example, 5 errors all
    /// corrected, says 1).
    pub health: u8,
    /// 1 while a scrub runs, else 0.
    pub running: u8,
    /// The running scrub, else the last one btrfs-lab saved.
    pub scrub_session: ScrubSession,
    /// The same per device, keyed by devid (a string, as JSON keys are).
    pub scrub_device_session: BTreeMap<String, DeviceSession>,
}

/// The counters of a session, as the RFC names them (struct
/// btrfs_scrub_progress's fields, in its order).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Counters {
    /// Data extents scrubbed.
    pub data_extents_scrubbed: u64,
    /// Tree extents scrubbed.
    pub tree_extents_scrubbed: u64,
    /// Data bytes scrubbed.
    pub data_bytes_scrubbed: u64,
    /// Tree bytes scrubbed.
    pub tree_bytes_scrubbed: u64,
    /// Read errors.
    pub read_errors: u64,
    /// Checksum errors.
    pub csum_errors: u64,
    /// Tree block verification errors.
    pub verify_errors: u64,
    /// Data blocks without checksum.
    pub no_csum: u64,
    /// Checksums discarded while read.
    pub csum_discards: u64,
    /// Superblock errors.
    pub super_errors: u64,
    /// Allocation failures in the kernel.
    pub malloc_errors: u64,
    /// Errors not corrected.
    pub uncorrectable_errors: u64,
    /// Errors corrected.
    pub corrected_errors: u64,
    /// Errors gone on a re-read.
    pub unverified_errors: u64,
}

/// `scrub_session`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ScrubSession {
    /// `running`, `finished`, `interrupted`, or `never` (nothing known).
    pub state: String,
    /// Start, seconds since the epoch (0: unknown).
    pub t_start: u64,
    /// Start of the resumed run, seconds since the epoch (0: not resumed,
    /// or not known).
    pub t_resumed: u64,
    /// Seconds the scrub ran.
    pub duration_seconds: u64,
    /// The counters.
    #[serde(flatten)]
    pub counters: Counters,
    /// Failures of the tool itself.
    pub operation_errors: OperationErrors,
}

/// `operation_errors`: what went wrong in the tool, not on the disk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OperationErrors {
    /// progs' progress thread failed (btrfs-lab has none: false).
    pub progress_thread_failed: bool,
    /// The status file could not be written.
    pub status_write_failed: bool,
}

/// One device of `scrub_device_session`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeviceSession {
    /// Block device path (empty when missing).
    pub device_path: String,
    /// The device is missing.
    pub missing: bool,
    /// As the top level's, for this device.
    pub health: u8,
    /// 1 while this device is scrubbed, else 0.
    pub running: u8,
    /// As the session's, for this device.
    pub state: String,
    /// As the session's.
    pub t_start: u64,
    /// As the session's.
    pub t_resumed: u64,
    /// As the session's (btrfs-lab keeps one duration per scrub).
    pub duration_seconds: u64,
    /// This device's counters.
    #[serde(flatten)]
    pub counters: Counters,
}

/// `show`'s report as `btrfs --format json filesystem show` (PR #761):
/// a missing device listed by the kernel keeps its devid and shows size
/// and used as 0 with `missing: true`; each device the superblock counts
/// but the kernel does not list is an entry `{devid: 0, size: 0, used: 0,
/// path: "", missing: true}` (the PR's last commit, one per device as its
/// review asked).
pub fn filesystem_show(report: &ShowReport) -> FilesystemShow {
    let filesystems = report
        .filesystems
        .iter()
        .map(|f| {
            let mut devices: Vec<ShowDevice> = f
                .devices
                .iter()
                .map(|d| ShowDevice {
                    devid: d.devid,
                    size: if d.missing { 0 } else { d.size_bytes },
                    used: if d.missing { 0 } else { d.used_bytes },
                    path: d.path.clone(),
                    missing: d.missing,
                })
                .collect();
            let unlisted = f.total_devices.saturating_sub(f.devices.len() as u64);
            devices.extend((0..unlisted).map(|_| ShowDevice {
                devid: 0,
                size: 0,
                used: 0,
                path: String::new(),
                missing: true,
            }));
            ShowFilesystem {
                label: f
                    .label
                    .clone()
                    .filter(|l| !l.is_empty())
                    .unwrap_or_else(|| "none".to_owned()),
                uuid: f.uuid.clone(),
                total_devices: f.total_devices,
                used: f.fs_bytes_used,
                devices,
            }
        })
        .collect();
    FilesystemShow {
        header: Header::default(),
        filesystems,
    }
}

/// `usage`'s report as `btrfs --format json device usage` (PR #1151).
/// Needs each device's chunks (the chunk tree: root), as btrfs-progs'
/// `device usage` does.
pub fn device_usage(report: &UsageReport) -> Result<DeviceUsage> {
    let mut devices = Vec::new();
    for d in &report.devices {
        let Some(chunks) = &d.chunks else {
            return Err(Error::new(
                ErrorKind::Permission,
                "the per-device chunks need the chunk tree, which only root may read",
            )
            .with_hint("run as root (btrfs device usage needs it too)"));
        };
        let allocated: u64 = chunks.iter().map(|c| c.size_bytes).sum();
        devices.push(UsageOfDevice {
            device: d.path.clone(),
            devid: d.devid,
            device_size: d.device_size_bytes.unwrap_or(0),
            device_slack: d.slack_bytes,
            chunks: chunks
                .iter()
                .map(|c| UsageChunk {
                    chunk_type: c.bg_type.progs_name().to_owned(),
                    profile: c.profile.progs_name(),
                    num_stripes: u64::from(c.num_stripes),
                    size: c.size_bytes,
                })
                .collect(),
            unallocated: d.size_bytes as i64 - allocated as i64,
        });
    }
    Ok(DeviceUsage {
        header: Header::default(),
        devices,
    })
}

fn counters(d: &DeviceScrub) -> Counters {
    Counters {
        data_extents_scrubbed: d.data_extents,
        tree_extents_scrubbed: d.tree_extents,
        data_bytes_scrubbed: d.bytes_scrubbed.saturating_sub(d.tree_bytes),
        tree_bytes_scrubbed: d.tree_bytes,
        read_errors: d.read_errors,
        csum_errors: d.csum_errors,
        verify_errors: d.verify_errors,
        no_csum: d.no_csum,
        csum_discards: d.csum_discards,
        super_errors: d.super_errors,
        malloc_errors: d.malloc_errors,
        uncorrectable_errors: d.uncorrectable,
        corrected_errors: d.corrected,
        unverified_errors: d.unverified,
    }
}

fn sum(a: Counters, b: &Counters) -> Counters {
    Counters {
        data_extents_scrubbed: a.data_extents_scrubbed + b.data_extents_scrubbed,
        tree_extents_scrubbed: a.tree_extents_scrubbed + b.tree_extents_scrubbed,
        data_bytes_scrubbed: a.data_bytes_scrubbed + b.data_bytes_scrubbed,
        tree_bytes_scrubbed: a.tree_bytes_scrubbed + b.tree_bytes_scrubbed,
        read_errors: a.read_errors + b.read_errors,
        csum_errors: a.csum_errors + b.csum_errors,
        verify_errors: a.verify_errors + b.verify_errors,
        no_csum: a.no_csum + b.no_csum,
        csum_discards: a.csum_discards + b.csum_discards,
        super_errors: a.super_errors + b.super_errors,
        malloc_errors: a.malloc_errors + b.malloc_errors,
        uncorrectable_errors: a.uncorrectable_errors + b.uncorrectable_errors,
        corrected_errors: a.corrected_errors + b.corrected_errors,
        unverified_errors: a.unverified_errors + b.unverified_errors,
    }
}

fn health(c: &Counters) -> u8 {
    u8::from(c.uncorrectable_errors == 0)
}

/// `scrub --status`'s report as the structured scrub status of issue
/// #1108. The session is the running scrub (its counters from
/// SCRUB_PROGRESS; its duration from `now` when btrfs-lab runs it), else
/// the last scrub btrfs-lab saved (`interrupted` when it did not finish),
/// else `never` with zero counters. `scrub_lifetime` is left out: its
/// counters need the sysfs files the RFC asks the kernel for, which no
/// kernel has.
pub fn scrub_status(status: &ScrubStatus, now: u64) -> ScrubStatusDoc {
    let (state, t_start, duration, devices): (&str, u64, u64, &[DeviceScrub]) = if status.running {
        let duration = status.running_since.map_or(0, |s| now.saturating_sub(s));
        (
            "running",
            status.running_since.unwrap_or(0),
            duration,
            &status.devices,
        )
    } else if let Some(last) = &status.last {
        (
            if last.finished {
                "finished"
            } else {
                "interrupted"
            },
            last.started_at,
            last.duration_seconds.round() as u64,
            &last.devices,
        )
    } else {
        ("never", 0, 0, &[])
    };
    // btrfs-lab does not keep when a resumed run started.
    let t_resumed = 0;
    let mut total = Counters::default();
    let mut per_device = BTreeMap::new();
    for d in devices {
        let c = counters(d);
        total = sum(total, &c);
        let device_running = status.running && !d.finished;
        let device_state = if device_running {
            "running"
        } else if d.finished {
            "finished"
        } else if status.running {
            // The scrub runs, this device's part is not running and did
            // not finish: it stopped (a missing device, an error).
            "interrupted"
        } else {
            state
        };
        per_device.insert(
            d.devid.to_string(),
            DeviceSession {
                device_path: d.path.clone(),
                missing: d.path.is_empty(),
                health: health(&c),
                running: u8::from(device_running),
                state: device_state.to_owned(),
                t_start,
                t_resumed,
                duration_seconds: duration,
                counters: c,
            },
        );
    }
    ScrubStatusDoc {
        header: Header::default(),
        fsid: status.fsid.clone(),
        health: health(&total),
        running: u8::from(status.running),
        scrub_session: ScrubSession {
            state: state.to_owned(),
            t_start,
            t_resumed,
            duration_seconds: duration,
            counters: total,
            operation_errors: OperationErrors::default(),
        },
        scrub_device_session: per_device,
    }
}

/// The document as btrfs-progs prints it: pretty, two-space indent, a
/// newline at the end.
pub fn to_text<T: Serialize>(doc: &T) -> Result<String> {
    let mut text = serde_json::to_string_pretty(doc)
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot write JSON: {e}")))?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests;
