//! `btrfs-lab capacity SIZE...` and `btrfs-lab capacity --from MOUNT`:
//! usable space of devices one has or plans, per data and metadata
//! profile (the planner is `btrfs_lab::space::capacity`).

use std::path::PathBuf;

use clap::Args;

use btrfs_lab::error::{Error, Result, exit};
use btrfs_lab::model::kernel::KernelVersion;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::report::text::wrap_hanging;
use btrfs_lab::space::capacity::{
    self, Basis, CapacityOption, CapacityReport, CapacityRequest, Changes, DEFAULT_METADATA_SHARE,
    MetadataShare, Origin, PlannedDevice, Width,
};
use btrfs_lab::sys::fs::root::SysRoot;

use super::output::Output;
use super::units::{UnitArgs, profile_arg, size, size_arg};

#[derive(Debug, Args)]
#[command(
    override_usage = "btrfs-lab capacity [OPTIONS] <SIZE>...\n       btrfs-lab capacity --from <MOUNT> [--add SIZE] [--remove DEVID] [OPTIONS]"
)]
pub struct CapacityArgs {
    /// Device sizes (2T 2T 4T; K, M, G, T are 1024-based, KB, MB, GB, TB
    /// 1000-based).
    #[arg(value_name = "SIZE", value_parser = size_arg, required_unless_present = "from", conflicts_with = "from")]
    sizes: Vec<u64>,
    /// Start from the devices of a mounted btrfs (and its metadata share).
    #[arg(long, value_name = "MOUNT")]
    from: Option<PathBuf>,
    /// With --from: a device of this size is added (repeatable).
    #[arg(long, value_name = "SIZE", value_parser = size_arg, requires = "from")]
    add: Vec<u64>,
    /// With --from: device DEVID is taken out (repeatable).
    #[arg(long, value_name = "DEVID", requires = "from")]
    remove: Vec<u64>,
    /// With --from: device DEVID is replaced by one of SIZE (repeatable).
    #[arg(long, value_name = "DEVID=SIZE", value_parser = replace_arg, requires = "from")]
    replace: Vec<(u64, u64)>,
    /// Data profile: single, dup, raid0, raid1, raid1c3, raid1c4, raid10,
    /// raid5, raid6 [default: each; a comma-separated list compares those].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = profile_arg)]
    data: Vec<Profile>,
    /// Metadata profile, as --data (system chunks follow it) [default: the
    /// filesystem's with --from, else raid1 (dup on one device); a list
    /// pairs each with each data profile].
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = profile_arg)]
    metadata: Vec<Profile>,
    /// Metadata as a percentage of data [default: measured with --from,
    /// else 1].
    #[arg(long, value_name = "PERCENT", value_parser = share_arg)]
    metadata_share: Option<f64>,
    /// The kernel whose allocator rules apply (6.1) [default: the running
    /// one].
    #[arg(long, value_name = "VERSION", value_parser = kernel_arg)]
    kernel: Option<KernelVersion>,
    #[command(flatten)]
    units: UnitArgs,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
}

fn replace_arg(s: &str) -> std::result::Result<(u64, u64), String> {
    let (id, sz) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not DEVID=SIZE (for example 2=8T)"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("'{id}' is not a devid"))?;
    Ok((id, size_arg(sz)?))
}

fn share_arg(s: &str) -> std::result::Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v / 100.0),
        _ => Err(format!("'{s}' is not a percentage from 0 to 100")),
    }
}

fn kernel_arg(s: &str) -> std::result::Result<KernelVersion, String> {
    KernelVersion::parse(s).ok_or_else(|| format!("'{s}' is not a kernel version (6.1)"))
}

pub fn run(args: CapacityArgs, out: &Output) -> Result<u8> {
    args.units.select();
    if args.from.is_none()
        && !(args.add.is_empty() && args.remove.is_empty() && args.replace.is_empty())
    {
        return Err(Error::usage(
            "--add, --remove and --replace change the devices of --from MOUNT",
        )
        .with_hint("without --from, give the size of every device: btrfs-lab capacity 2T 2T 4T"));
    }
    let running = KernelVersion::parse(&btrfs_lab::sys::kernel_release());
    let mut existing = None;
    let (devices, removed, measured, from, current_meta, fs_kernel) = match &args.from {
        Some(mount) => {
            let changes = Changes {
                add: args.add.clone(),
                remove: args.remove.clone(),
                replace: args.replace.clone(),
            };
            let m = capacity::read(
                &SysRoot::from_option(args.sysroot.as_deref(), out),
                mount,
                &changes,
            )?;
            existing = m.existing;
            (
                m.devices,
                m.removed,
                m.share,
                Some(m.mount_point),
                m.metadata,
                Some(m.kernel),
            )
        }
        None => (
            args.sizes
                .iter()
                .map(|&size| PlannedDevice {
                    devid: None,
                    size,
                    origin: Origin::Given,
                })
                .collect(),
            Vec::new(),
            None,
            None,
            None,
            None,
        ),
    };
    if devices.is_empty() {
        return Err(Error::usage("no devices left to plan on"));
    }
    if let Some(d) = devices.iter().find(|d| d.size < 16 << 20) {
        return Err(Error::usage(format!(
            "a device of {} is too small for btrfs",
            size(d.size)
        ))
        .with_hint("btrfs needs devices of at least 16MiB; mkfs.btrfs wants more"));
    }
    let share = match (args.metadata_share, measured) {
        (Some(r), _) => MetadataShare {
            ratio: r,
            source: "option".into(),
        },
        (None, Some(r)) => MetadataShare {
            ratio: r,
            source: "filesystem".into(),
        },
        (None, None) => MetadataShare {
            ratio: DEFAULT_METADATA_SHARE,
            source: "default".into(),
        },
    };
    let data = if args.data.is_empty() {
        Profile::ALL.to_vec()
    } else {
        args.data.clone()
    };
    let metadata = if !args.metadata.is_empty() {
        args.metadata.clone()
    } else if let Some(m) = current_meta {
        vec![m]
    } else if devices.len() == 1 {
        vec![Profile::Dup]
    } else {
        vec![Profile::Raid1]
    };
    let kernel = args
        .kernel
        .or(fs_kernel)
        .or(running)
        .unwrap_or(KernelVersion::new(6, 18));
    let req = CapacityRequest {
        devices,
        data,
        metadata,
        share,
        kernel,
        existing,
    };
    let report = capacity::plan(&req, from, removed);
    out.report(&report, render);
    Ok(exit::OK)
}

fn width(w: Width) -> String {
    if w.first == w.last {
        w.first.to_string()
    } else {
        format!("{}-{}", w.first, w.last)
    }
}

/// The table and the reasons, for a person.
pub fn render(r: &CapacityReport) -> String {
    let sizes: Vec<String> = r
        .devices
        .iter()
        .map(|d| {
            let tag = match d.origin {
                Origin::Given | Origin::Member => "",
                Origin::Added => " (added)",
                Origin::Replacement => " (replacement)",
            };
            match d.devid {
                Some(id) => format!("{id}: {}{tag}", size(d.size)),
                None => format!("{}{tag}", size(d.size)),
            }
        })
        .collect();
    let mut t = String::new();
    if let Some(m) = &r.from {
        t.push_str(&format!("From {}", m.display()));
        if !r.removed.is_empty() {
            let ids: Vec<String> = r.removed.iter().map(u64::to_string).collect();
            t.push_str(&format!(", without device {}", ids.join(", ")));
        }
        t.push('\n');
    }
    t.push_str(&wrap_hanging(
        &format!(
            "{} device{}, {} raw: {}",
            r.devices.len(),
            if r.devices.len() == 1 { "" } else { "s" },
            size(r.raw_bytes),
            sizes.join(", ")
        ),
        "",
        "  ",
    ));
    let source = match r.metadata_share.source.as_str() {
        "filesystem" => "measured on the filesystem",
        "option" => "--metadata-share",
        _ => "default; --from measures it",
    };
    t.push_str(&wrap_hanging(
        &format!(
            "Metadata: {:.1}% of data ({source}); kernel {}'s rules",
            r.metadata_share.ratio * 100.0,
            r.kernel
        ),
        "",
        "  ",
    ));
    t.push('\n');
    t.push_str(&format!(
        "{:<8} {:<8} {:>11} {:>11} {:>8} {:>5} {:>5}\n",
        "data", "metadata", "usable", "unusable", "survives", "read", "write"
    ));
    let mut notes = Vec::new();
    for o in &r.options {
        t.push_str(&row(o));
        if let Some(why) = &o.impossible {
            notes.push(format!("{}/{}: {why}", o.data, o.metadata));
        } else if let Some(why) = &o.unusable_reason {
            notes.push(format!("{}/{}: {why}", o.data, o.metadata));
        }
    }
    if r.options.iter().any(|o| o.basis == Basis::Filesystem) {
        t.push('\n');
        t.push_str(&wrap_hanging(
            "Rows in the filesystem's own profiles start from its chunks as they are; other rows, and any with --remove, from a filesystem made anew on these devices.",
            "",
            "",
        ));
    }
    if !notes.is_empty() {
        t.push_str("\nNot usable:\n");
        for n in notes {
            t.push_str(&wrap_hanging(&n, "  ", "    "));
        }
    }
    t.push('\n');
    t.push_str(&wrap_hanging(
        "usable: data that fits; unusable: raw space no chunk can take; survives: device failures; read, write: devices a large read or write spreads over (first chunks-last chunks)",
        "",
        "",
    ));
    t
}

fn row(o: &CapacityOption) -> String {
    if o.impossible.is_some() {
        return format!(
            "{:<8} {:<8} {:>11} {:>11} {:>8} {:>5} {:>5}\n",
            o.data.name(),
            o.metadata.name(),
            "-",
            "-",
            "-",
            "-",
            "-"
        );
    }
    format!(
        "{:<8} {:<8} {:>11} {:>11} {:>8} {:>5} {:>5}\n",
        o.data.name(),
        o.metadata.name(),
        size(o.usable_data_bytes),
        size(o.unusable_bytes),
        o.failures_survived,
        width(o.read_width),
        width(o.write_width)
    )
}

use super::page::{Row, row as exit_row};
use btrfs_lab::model::exit as status;

/// Its exit statuses.
pub const EXITS: &[Row] = &[
    exit_row(status::OK, "the capacities were computed."),
    exit_row(
        status::ERROR,
        "the filesystem of --from cannot be read (not a mounted btrfs).",
    ),
    exit_row(
        status::USAGE,
        "bad command line (an invalid size or profile, a devid --from does not have, --add, --remove or --replace without --from, \
         sizes with --from).",
    ),
];

/// Its manual page.
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["capacity"],
    documents: &["capacity"],
    output: super::page::Shape::Document,
    exits: EXITS,
    examples: &[
        (
            "2 + 2 + 4 TB: every data profile, metadata raid1.",
            "btrfs-lab capacity 2T 2T 4T",
        ),
        (
            "Three profiles compared, metadata raid1c3.",
            "btrfs-lab capacity 2T 2T 4T 4T --data raid1,raid10,raid5 --metadata raid1c3",
        ),
        (
            "What a fourth drive gives a mounted filesystem.",
            "btrfs-lab capacity --from /mnt/data --add 4T",
        ),
        (
            "Device 1 replaced by an 8 TB drive, device 3 taken out.",
            "btrfs-lab capacity --from /mnt/data --replace 1=8T --remove 3",
        ),
    ],
    see_also: &[
        "btrfs-lab-device(1)",
        "btrfs-lab-convert(1)",
        "mkfs.btrfs(8)",
    ],
    ..super::page::Declared::NONE
}];
