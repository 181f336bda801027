//! Space and state of a mounted btrfs: `df` (from the kernel or parsed
//! from captured text), `usage` and `show`. Readers here gather what the
//! kernel says; the computations are pure and live in `usage` and the
//! models.

pub mod capacity;
pub mod findings;
pub(crate) mod room;
pub mod usage;

/// Which btrfs is at a path: shared with the other jobs through `sys`.
pub use crate::sys::fs::target::{BtrfsTarget, features, mounted_btrfs, resolve};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::space::{MixedProfiles, SpaceRecord, mixed_profiles};
use crate::parse::fi_df::{
    InputFormat, ParseOptions, SkippedLine, UnitBasis, UnitReading, parse_fi_df_with,
};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::{self, bg_type_of};
use findings::{Interpretation, SpaceFacts, interpret};

use usage::{DeviceFacts, UsageInput, UsageReport};

/// Where a df report's records come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum DfSource {
    /// Read from the kernel (SPACE_INFO ioctl) for a mounted filesystem.
    Kernel {
        /// The path given.
        path: PathBuf,
        /// Its mount point.
        mount_point: PathBuf,
    },
    /// Parsed from captured `btrfs filesystem df` output.
    Parsed {
        /// File name, or `-` for stdin.
        input: String,
        /// Text or JSON.
        format: InputFormat,
    },
}

/// The `df` report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DfReport {
    /// Where the records come from.
    pub source: DfSource,
    /// One per type and profile, in the kernel's (or the input's) order.
    pub records: Vec<SpaceRecord>,
    /// Types with more than one profile (an unfinished conversion).
    pub mixed_profiles: Vec<MixedProfiles>,
    /// btrfs-progs' multiple-profile warnings found in parsed input.
    pub input_warnings: Vec<String>,
    /// Rows of parsed input that cannot be true (used larger than total,
    /// beyond the rounding of the input), each named.
    pub inconsistencies: Vec<String>,
    /// Parsed input: lines skipped (line number and why); damaged rows are
    /// flagged `damaged`.
    #[serde(default)]
    pub skipped: Vec<SkippedLine>,
    /// Parsed input: what was undone around the rows (quote marks, ...).
    #[serde(default)]
    pub unwrapped: Box<[String]>,
    /// Parsed text: how its sizes were read (the unit rule, stated).
    #[serde(default)]
    pub units: Option<Box<UnitReading>>,
    /// Percentages and findings (worst first).
    #[serde(default)]
    pub interpretation: Box<Interpretation>,
}

/// A zoned filesystem (its `features/zoned` in sysfs).
fn zoned(root: &SysRoot, fsid: &str) -> bool {
    root.sys(&format!("fs/btrfs/{fsid}/features/zoned"))
        .exists()
}

/// The bytes a zoned filesystem cannot use in the block groups of `flags`.
fn zone_unusable(
    root: &SysRoot,
    fsid: &str,
    flags: btrfs_uapi::space::BlockGroupFlags,
) -> Option<u64> {
    use crate::model::space::BgType;
    let kind = match bg_type_of(flags) {
        BgType::Data | BgType::DataMetadata => "data",
        BgType::Metadata => "metadata",
        BgType::System => "system",
        _ => return None,
    };
    root.read_attr(&root.sys(&format!(
        "fs/btrfs/{fsid}/allocation/{kind}/bytes_zone_unusable"
    )))
    .ok()?
    .trim()
    .parse()
    .ok()
}

/// A path not on btrfs, for the commands that also read captures: the hint
/// names `--parse` (only they have it).
fn or_parse(e: Error, tool: &str) -> Error {
    if e.kind() == ErrorKind::WrongTarget && e.message().contains("is not on a btrfs filesystem") {
        e.with_hint(format!(
            "give a path inside a mounted btrfs; to read captured `btrfs filesystem {tool}` text use --parse"
        ))
    } else {
        e
    }
}

/// `df MOUNT`: the kernel's space info. The filesystem is resolved and
/// opened once ([`held`]); the records, the device count and the usage
/// document behind the findings are all read through that descriptor.
pub fn df_from_kernel(root: &SysRoot, path: &Path) -> Result<DfReport> {
    let (target, fs) = held(root, path, "df")?;
    let entries = fs.space_entries()?;
    let mut records = btrfs::space_records(&entries);
    let zoned = zoned(root, &target.fsid);
    for (r, e) in records.iter_mut().zip(&entries) {
        r.zone_unusable_bytes = zoned
            .then(|| zone_unusable(root, &target.fsid, e.flags))
            .flatten();
        r.zone_unusable_error_bytes = r.zone_unusable_bytes.map(|_| 0);
    }
    // FS_INFO (no root needed): the device count itself, not the fewest
    // the profiles imply (issue 33: "a filesystem of 2 devices" on 3).
    let devices = fs
        .fs_info()
        .ok()
        .and_then(|i| usize::try_from(i.num_devices).ok())
        .filter(|&n| n > 0);
    let mut interpretation = interpret(&SpaceFacts {
        records: &records,
        mount: Some(target.mount.mount_point.display().to_string()),
        devices,
        ..Default::default()
    });
    // A live filesystem's unallocated space is known: the findings are
    // `usage`'s (the same situation, the same finding), the table df's.
    if let Ok(report) = gather_usage(root, &fs, entries, None)
        && let Some(i) = document(root, &target, &fs, report).interpretation
    {
        interpretation.findings = i.findings;
    }
    Ok(DfReport {
        source: DfSource::Kernel {
            path: path.to_path_buf(),
            mount_point: target.mount.mount_point.clone(),
        },
        mixed_profiles: mixed_profiles(&records),
        records,
        input_warnings: Vec::new(),
        inconsistencies: Vec::new(),
        skipped: Vec::new(),
        unwrapped: Box::default(),
        units: None,
        interpretation: Box::new(interpretation),
    })
}

/// The mounted btrfs at `path`, resolved once and held open; `tool` names
/// the `btrfs filesystem` command whose capture `--parse` reads.
fn held(root: &SysRoot, path: &Path, tool: &str) -> Result<(BtrfsTarget, btrfs::FsHandle)> {
    crate::sys::fs::target::resolve_held(root, path).map_err(|e| or_parse(e, tool))
}

/// Input larger than this is not a `fi df` or `fi usage` capture.
pub(crate) const MAX_INPUT: u64 = 16 << 20;

/// The text of a capture to parse: `-` is stdin, anything else a file read
/// through [`crate::sys::fs::beneath::read_input_file`] (a regular file only, so
/// a FIFO or a device never blocks; a symbolic link followed only if root
/// owns it, so a user's link cannot make root read, and quote, a file only
/// root may read). At most [`MAX_INPUT`] bytes either way. `what` names the
/// capture in messages (`btrfs filesystem df`).
pub fn read_input(name: &str, what: &str) -> Result<String> {
    use std::io::Read;
    let too_large = || {
        Error::new(
            ErrorKind::Parse,
            format!("{name}: more than 16MiB; this is not `{what}` output"),
        )
    };
    let bytes = if name == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_INPUT + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {name}: {e}")))?;
        bytes
    } else {
        let label = format!("captured `{what}` output");
        crate::sys::fs::beneath::read_input_file(Path::new(name), MAX_INPUT, &label).map_err(|e| {
            match e.kind() {
                // Too large: input that is not a capture (status 1, as any
                // input that does not parse).
                ErrorKind::Usage => too_large(),
                ErrorKind::WrongTarget if e.message().contains("is a directory") => e.with_hint(
                    format!("--parse takes a file with captured `{what}` output; to read a mounted filesystem, give it without --parse"),
                ),
                _ => e,
            }
        })?
    };
    if bytes.len() as u64 > MAX_INPUT {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        Error::new(
            ErrorKind::Parse,
            format!(
                "{name}: not text (invalid UTF-8 at byte {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// `df --parse`: captured `btrfs filesystem df` text or JSON.
pub fn df_from_text(text: &str, input_name: &str, opts: ParseOptions) -> Result<DfReport> {
    let parsed = parse_fi_df_with(text, opts).map_err(|e| {
        Error::new(ErrorKind::Parse, format!("{input_name}: {e}"))
            .with_hint(if opts.strict {
                "--strict takes only exact `btrfs filesystem df [-b|--si|-k...] PATH` or `btrfs --format json filesystem df PATH` output; without it, prompts, quotes and other text around the rows are skipped"
            } else {
                "give the output of `btrfs filesystem df [-b|--si|-k...] PATH` or `btrfs --format json filesystem df PATH`"
            })
    })?;
    let interpretation = interpret(&SpaceFacts {
        records: &parsed.records,
        ambiguous_units: parsed.units.basis == UnitBasis::Ambiguous,
        ..Default::default()
    });
    Ok(DfReport {
        skipped: parsed.skipped,
        unwrapped: parsed.unwrapped.into_boxed_slice(),
        units: (parsed.format == InputFormat::Text).then(|| Box::new(parsed.units)),
        interpretation: Box::new(interpretation),
        source: DfSource::Parsed {
            input: input_name.to_owned(),
            format: parsed.format,
        },
        mixed_profiles: mixed_profiles(&parsed.records),
        inconsistencies: inconsistencies(&parsed.records),
        records: parsed.records,
        input_warnings: parsed.warnings,
    })
}

/// `usage --parse`: a capture of `btrfs filesystem usage`, with the same
/// figures as `usage --json` where the paste has them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ParsedUsageDocument {
    /// Where it comes from (`kind: parsed`).
    pub source: DfSource,
    /// The figures.
    #[serde(flatten)]
    pub report: UsageReport,
    /// Every size was printed in bytes.
    pub exact: bool,
    /// The largest rounding error of any size (0 when exact).
    pub max_error_bytes: u64,
    /// Lines skipped, with why.
    pub skipped: Vec<SkippedLine>,
    /// Overall fields the paste lacks (shown as 0).
    pub missing_fields: Vec<String>,
    /// How the sizes were read.
    pub units: UnitReading,
    /// Percentages and findings (worst first).
    pub interpretation: Interpretation,
}

/// The df-like records and the per-device unallocated space of a usage
/// report, for the interpretation.
pub(crate) fn usage_facts(
    report: &UsageReport,
    device_count: Option<usize>,
    error: u64,
) -> (Vec<SpaceRecord>, Option<Vec<i64>>) {
    let mut records: Vec<SpaceRecord> = report
        .block_groups
        .iter()
        .map(|b| {
            let mut r = SpaceRecord::exact(b.bg_type, b.profile, b.size_bytes, b.used_bytes, None);
            if error > 0 {
                r.exact = false;
                r.total_error_bytes = human_error(b.size_bytes).min(error);
                r.used_error_bytes = human_error(b.used_bytes).min(error);
            }
            r
        })
        .collect();
    if let Some(o) = &report.overall {
        let mut r = SpaceRecord::exact(
            crate::model::space::BgType::GlobalReserve,
            crate::model::space::BgProfile::Known(crate::model::profile::Profile::Single),
            o.global_reserve,
            o.global_reserve_used,
            None,
        );
        if error > 0 {
            r.exact = false;
            r.total_error_bytes = human_error(o.global_reserve).min(error);
            r.used_error_bytes = human_error(o.global_reserve_used).min(error);
        }
        records.push(r);
    }
    let unallocated = match (&report.unallocated, &report.overall) {
        (Some(u), _) if !u.is_empty() => Some(u.iter().map(|d| d.bytes).collect()),
        // One device: the overall figure is that device's.
        (_, Some(o)) if device_count == Some(1) => Some(vec![o.device_unallocated]),
        _ => None,
    };
    (records, unallocated)
}

/// The rounding error of a size printed human-readable (IEC, `%.2f`).
fn human_error(bytes: u64) -> u64 {
    let mut unit = 1u64;
    while unit < (1 << 60) && bytes >= unit * 1024 {
        unit *= 1024;
    }
    crate::report::units::rounding_error(bytes as f64 / unit as f64, unit)
}

/// `usage --parse`.
pub fn usage_from_text(text: &str, input_name: &str) -> Result<ParsedUsageDocument> {
    let parsed = crate::parse::fi_usage::parse_fi_usage(text).map_err(|e| {
        Error::new(ErrorKind::Parse, format!("{input_name}: {e}"))
            .with_hint("give the output of `btrfs filesystem usage [-b|-T|--si] PATH`")
    })?;
    let count = (!parsed.devices.is_empty()).then_some(parsed.devices.len());
    let (records, unallocated) = usage_facts(&parsed.report, count, parsed.max_error_bytes);
    let interpretation = interpret(&SpaceFacts {
        records: &records,
        unallocated,
        devices: count,
        devices_bytes: parsed
            .report
            .overall
            .as_ref()
            .map(|o| o.device_size)
            .filter(|&b| b > 0),
        ..Default::default()
    });
    Ok(ParsedUsageDocument {
        source: DfSource::Parsed {
            input: input_name.to_owned(),
            format: InputFormat::Text,
        },
        report: parsed.report,
        exact: parsed.exact,
        max_error_bytes: parsed.max_error_bytes,
        skipped: parsed.skipped,
        missing_fields: parsed.missing_fields,
        units: parsed.units,
        interpretation,
    })
}

/// Rows whose used space exceeds their total even allowing for the
/// rounding of the input: `Metadata, DUP: used=... is larger than total=...`.
pub fn inconsistencies(records: &[SpaceRecord]) -> Vec<String> {
    records
        .iter()
        .filter(|r| {
            r.used_bytes.saturating_sub(r.used_error_bytes)
                > r.total_bytes.saturating_add(r.total_error_bytes)
        })
        .map(|r| {
            format!(
                "{}, {}: used={} is larger than total={}",
                r.bg_type.progs_name(),
                r.profile.progs_name(),
                r.used_bytes,
                r.total_bytes
            )
        })
        .collect()
}

/// Size of a block device from sysfs (`/sys/class/block/NAME/size`, in
/// 512-byte sectors), readable without root.
pub(crate) fn block_device_size(root: &SysRoot, dev: &Path) -> Option<u64> {
    let real = crate::sys::block::blockdev::resolved(dev);
    let name = real.file_name()?.to_str()?.to_owned();
    let sectors: u64 = root
        .read_attr(&root.sys(&format!("class/block/{name}/size")))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    sectors.checked_mul(512)
}

/// `usage MOUNT --json`: the report with the filesystem it is about and
/// what the figures mean.
/// Each member's state is looked at with the last look's record and the
/// scrubs in `state_dir`.
pub fn usage_document(
    root: &SysRoot,
    path: &Path,
    state_dir: &Path,
) -> Result<usage::UsageDocument> {
    let (target, fs) = held(root, path, "usage")?;
    let report = gather_usage(root, &fs, fs.space_entries()?, Some(state_dir))?;
    Ok(document(root, &target, &fs, report))
}

/// A usage report with the filesystem it is about and its interpretation.
fn document(
    root: &SysRoot,
    target: &BtrfsTarget,
    fs: &btrfs::FsHandle,
    report: UsageReport,
) -> usage::UsageDocument {
    let count = report.unallocated.as_ref().map(Vec::len).filter(|&n| n > 0);
    let (records, unallocated) = usage_facts(&report, count, 0);
    let mut facts = SpaceFacts {
        records: &records,
        unallocated,
        devices: Some(report.devices.len()).filter(|&n| n > 0).or(count),
        mount: Some(target.mount.mount_point.display().to_string()),
        missing: report
            .devices
            .iter()
            .filter(|d| d.path == "missing")
            .map(|d| d.devid)
            .collect(),
        devices_bytes: report
            .overall
            .as_ref()
            .map(|o| o.device_size)
            .filter(|&b| b > 0),
        kernel: crate::model::kernel::KernelVersion::parse(&crate::sys::kernel_release()),
        balance: fs
            .balance_status()
            .ok()
            .flatten()
            .map(|b| crate::model::balance::BalanceInfo::from_status(&b)),
        ..Default::default()
    };
    let mut interpretation = interpret(&facts);
    // Each data chunk's usage (root only) names the exact -dusage value,
    // read only when a finding suggests a balance.
    if room::wants_chunk_usage(&interpretation.findings) {
        let block_group_tree = features(root, &target.fsid)
            .iter()
            .any(|x| x == "block_group_tree");
        facts.data_chunks = fs.chunk_usage(block_group_tree, false).ok().flatten();
        if facts.data_chunks.is_some() {
            interpretation = interpret(&facts);
        }
    }
    usage::UsageDocument {
        path: target.path.clone(),
        mount_point: target.mount.mount_point.clone(),
        uuid: target.fsid.clone(),
        report,
        interpretation: Some(interpretation),
    }
}

/// What the usage computation needs, read through the held filesystem
/// (`spaces`: its SPACE_INFO, already read), and the computation.
fn gather_usage(
    root: &SysRoot,
    fs: &btrfs::FsHandle,
    spaces: Vec<btrfs::SpaceEntry>,
    state_dir: Option<&Path>,
) -> Result<UsageReport> {
    let devices = fs
        .devices()?
        .into_iter()
        .map(|d| {
            let missing = d.path.is_empty();
            DeviceFacts {
                devid: d.devid,
                device_size: if missing {
                    Some(0)
                } else {
                    block_device_size(root, Path::new(&d.path))
                },
                path: if missing {
                    "missing".to_owned()
                } else {
                    d.path
                },
                size: d.total_bytes,
                missing,
                state: None,
            }
        })
        .collect::<Vec<_>>();
    let mut devices = devices;
    if let Some(state_dir) = state_dir {
        let members: Vec<(u64, &str, bool)> = devices
            .iter()
            .map(|d| (d.devid, d.path.as_str(), d.missing))
            .collect();
        let states = crate::doctor::members::states(
            root,
            fs.fsid(),
            &members,
            fs.fs_info()?.generation,
            state_dir,
        );
        for (d, st) in devices.iter_mut().zip(states) {
            d.state = Some(st);
        }
    }
    let input = UsageInput {
        spaces,
        devices,
        chunks: fs.chunk_infos()?,
        statfs_free: fs.available_bytes()?,
    };
    Ok(usage::compute(&input))
}

pub mod show;
