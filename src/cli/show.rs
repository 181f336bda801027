//! `btrfs-lab show [MOUNT]`.

use std::path::PathBuf;

use clap::Args;

use btrfs_lab::error::Result;
use btrfs_lab::model::member::MemberState;
use btrfs_lab::report::progs_json;
use btrfs_lab::report::text::escape_control as esc;
use btrfs_lab::report::units::{UnitMode, pretty_size};
use btrfs_lab::space::show::{FsShow, ShowReport, show_one};
use btrfs_lab::space::{self};
use btrfs_lab::sys::fs::root::SysRoot;

use super::output::{Output, Paint, ProgsFormat};
use super::units::UnitArgs;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 every device is there without errors; 3 a member device is
missing (before 64); 64 a device's error counters are not all zero (as
`btrfs device stats --check`; the report names it); 1 error; 2 bad command
line."
)]
pub struct ShowArgs {
    /// A path inside a mounted btrfs [default: every mounted btrfs].
    #[arg(value_name = "MOUNT")]
    mount: Option<PathBuf>,
    #[command(flatten)]
    units: UnitArgs,
    /// Output format (`--json` gives the typed report).
    #[arg(long, value_enum, value_name = "FORMAT")]
    format: Option<ProgsFormat>,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
}

pub fn run(args: ShowArgs, out: &Output, state_dir: Option<PathBuf>) -> Result<u8> {
    let progs = ProgsFormat::progs_json(args.format, out)?;
    let root = SysRoot::from_option(args.sysroot.as_deref(), out);
    let targets = match &args.mount {
        Some(m) => vec![space::resolve(&root, m)?],
        None => space::mounted_btrfs(&root)?,
    };
    let state_dir = btrfs_lab::sys::fs::state::state_dir_of(&root, state_dir);
    let mut filesystems = Vec::new();
    for t in &targets {
        filesystems.push(show_one(&root, t, &state_dir)?);
    }
    let report = ShowReport { filesystems };
    if progs {
        out.document_text(&progs_json::to_text(&progs_json::filesystem_show(&report))?);
        return Ok(report.exit_status());
    }
    out.report(&report, |r| {
        if r.filesystems.is_empty() {
            return "no mounted btrfs\n".to_owned();
        }
        let texts: Vec<String> = r
            .filesystems
            .iter()
            .map(|f| render(f, args.units.mode(), out.paint))
            .collect();
        texts.join("\n")
    });
    Ok(report.exit_status())
}

/// `btrfs filesystem show` lines, then what it does not show: mount point,
/// generation, sizes, checksum, features and each device's error counters.
pub fn render(f: &FsShow, mode: UnitMode, paint: Paint) -> String {
    let label = f
        .label
        .as_ref()
        .map_or("none".to_owned(), |l| format!("'{}'", esc(l)));
    let mut t = format!("Label: {label}  uuid: {}\n", f.uuid);
    t.push_str(&format!(
        "\tTotal devices {} FS bytes used {}\n",
        f.total_devices,
        pretty_size(f.fs_bytes_used, mode)
    ));
    for d in &f.devices {
        if d.missing {
            t.push_str(&format!(
                "\tdevid {:>4} size {} used {} path <missing disk> {}\n\t  {}\n",
                d.devid,
                pretty_size(d.size_bytes, mode),
                pretty_size(d.used_bytes, mode),
                paint.bad("MISSING"),
                paint.dim("(btrfs-lab doctor says what it costs and what to do)")
            ));
            continue;
        }
        t.push_str(&format!(
            "\tdevid {:>4} size {} used {} path {}\n",
            d.devid,
            pretty_size(d.size_bytes, mode),
            pretty_size(d.used_bytes, mode),
            esc(&d.path)
        ));
        // What the kernel does not say yet: its drive gone, or back stale.
        let said = match d.state {
            MemberState::Vanished => Some(paint.bad("VANISHED: its drive is gone")),
            MemberState::Stale => Some(paint.warn("STALE: it missed writes")),
            MemberState::Returned => Some(paint.warn("RETURNED: not resynced by a scrub")),
            MemberState::Present | MemberState::Missing => None,
        };
        if let Some(said) = said {
            t.push_str(&format!(
                "\t  {said} {}\n",
                paint.dim("(btrfs-lab doctor says what to do)")
            ));
        }
    }
    let unlisted = f.total_devices.saturating_sub(f.devices.len() as u64);
    if unlisted > 0 {
        t.push_str(&format!(
            "\t*** {}\n\t  {}\n",
            paint.bad(&format!("{unlisted} more device(s) MISSING")),
            paint.dim("(btrfs-lab doctor says what it costs and what to do)")
        ));
    }
    t.push_str(&format!(
        "\tmounted at {}\n",
        esc(&f.mount_point.display().to_string())
    ));
    let checksum = match (&f.checksum, &f.checksum_driver) {
        (Some(c), Some(d)) => format!("{c} ({d})"),
        (Some(c), None) => c.clone(),
        _ => "unknown".to_owned(),
    };
    t.push_str(&format!(
        "\tgeneration {}, node size {}, sector size {}\n\tchecksum {checksum}\n",
        f.generation,
        pretty_size(u64::from(f.node_size), mode),
        pretty_size(u64::from(f.sector_size), mode)
    ));
    // A tab counts as one column for the filler: the text after it is
    // filled to 8 columns less, as a terminal shows it.
    t.push_str(&tabbed(&format!("features: {}", f.features.join(", "))));
    t.push_str("\terrors (write read flush corruption generation):\n");
    for d in &f.devices {
        let line = match &d.errors {
            Some(e) => {
                let counters = format!(
                    "{} {} {} {} {}",
                    e.write_io_errs,
                    e.read_io_errs,
                    e.flush_io_errs,
                    e.corruption_errs,
                    e.generation_errs
                );
                if d.has_errors {
                    format!(
                        "{counters}  {}\n\t    {}",
                        paint.bad("<- errors"),
                        paint.dim(
                            "check the drive and its cabling; a scrub repairs from other copies"
                        )
                    )
                } else {
                    counters
                }
            }
            None => "unknown (cannot read the counters)".to_owned(),
        };
        let name = if d.missing {
            "missing".to_owned()
        } else {
            esc(&d.path).into_owned()
        };
        t.push_str(&format!("\t  devid {:>4} {name}: {line}\n", d.devid));
    }
    t
}

/// `text` after a tab, filled to the output's width as a terminal shows a
/// tab (8 columns), further lines after a tab and two spaces.
fn tabbed(text: &str) -> String {
    let width = btrfs_lab::report::text::width().saturating_sub(8);
    let filled = btrfs_lab::report::text::fill(text, width, "", "  ");
    filled.lines().map(|l| format!("\t{l}\n")).collect()
}

use super::page::{BAD, FAIL, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["show"],
    documents: &["show"],
    output: super::page::Shape::Document,
    exits: &[
        row(
            status::OK,
            "every member device is there and its error counters are zero.",
        ),
        row(
            status::DEVICE_MISSING,
            "a member device of a filesystem shown is missing (missing in JSON, its \
             state vanished: its drive gone while the kernel still lists it, or fewer \
             devices listed than total_devices); it wins over 64.",
        ),
        row(
            status::DEVICE_ERRORS,
            "a device of a filesystem shown has a non-zero error counter (has_errors in \
             JSON).",
        ),
        FAIL,
        BAD,
    ],
    examples: &[
        (
            "Every btrfs, its devices and error counters.",
            "btrfs-lab show",
        ),
        ("One filesystem as JSON.", "btrfs-lab show --json /mnt/data"),
        (
            "As proposed for btrfs --format json filesystem show (PR #761).",
            "btrfs-lab show --format progs-json /mnt/data",
        ),
    ],
    see_also: &["btrfs-filesystem(8)", "btrfs-device(8)"],
    ..super::page::Declared::NONE
}];
