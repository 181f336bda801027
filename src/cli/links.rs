//! `btrfs-lab links [MOUNT | DEVICE...]`.

use std::path::PathBuf;

use clap::Args;

use btrfs_lab::error::{Result, exit};
use btrfs_lab::links::model::{ArrayReport, Bandwidth, DeviceReport, Finding, Hop, Severity};
use btrfs_lab::links::{self, LinksOptions, LinksReport};
use btrfs_lab::parse::nvme_smart::SmartThermal;
use btrfs_lab::parse::pcie::format_gbps;
use btrfs_lab::report::rate;
use btrfs_lab::sys::fs::root::SysRoot;

use super::output::{Output, Paint, wrap};

pub const AFTER_HELP: &str = "\
For each NVMe drive: its PCIe link and every hop up to the root port (switch
ports, chipset), each with its current and maximum speed and width. The
narrowest link sets the ceiling, shown after encoding and as a practical
estimate (0.85-0.9 of it). Findings: a link trained below what both ends
support, a port narrower or slower than the drive, a drive behind the
chipset, drives sharing one uplink.

With MOUNT (a mounted btrfs) the members are listed and the array's
ceiling is computed from the data profile: RAID0 reads at the slowest
member's pace times the number of members.

--thermal reads each drive's SMART log through the NVMe admin ioctl (root):
temperature, thermal throttling counts and times.

A loop device is followed to the block devices of the filesystem that holds
its backing file (every member of a btrfs), device-mapper and md devices to
their slaves, so a btrfs on loop devices names the disk behind them.
Ceilings are given in GiB/s and decimal GB/s. Devices without PCIe link
information (virtio, loop, SATA, NVMe over fabrics) are listed as such.

Exit status: 0 reported, 1 an error prevents the report, 2 bad command line.";

#[derive(Debug, Args)]
pub struct LinksArgs {
    /// A mounted btrfs, or devices (/dev/nvme0n1p2, nvme0n1, nvme0) [default: every NVMe controller].
    #[arg(value_name = "MOUNT|DEVICE")]
    targets: Vec<String>,
    /// Also read the SMART thermal counters (NVMe admin ioctl; needs root).
    #[arg(long)]
    thermal: bool,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
}

pub fn run(args: LinksArgs, out: &Output) -> Result<u8> {
    let opts = LinksOptions {
        sysroot: SysRoot::from_option(args.sysroot.as_deref(), out),
        targets: args.targets,
        thermal: args.thermal,
    };
    let report = links::run(&opts)?;
    out.report(&report, |r| render(r, out.paint));
    Ok(exit::OK)
}

fn link_text(generation: Option<u8>, width: Option<u8>, gts: Option<f64>) -> String {
    let g = generation.map_or("Gen?".to_owned(), |g| format!("Gen{g}"));
    let w = width.map_or("x?".to_owned(), |w| format!("x{w}"));
    let s = gts.map_or(String::new(), |s| format!(" {s} GT/s"));
    format!("{g} {w}{s}")
}

fn hop_line(h: &Hop, paint: Paint) -> String {
    let now = link_text(h.generation, h.width, h.speed_gts);
    let max = link_text(h.max_generation, h.max_width, None);
    let link = if h.generation.is_none() && h.width.is_none() && h.max_width.is_none() {
        paint.dim("no link attributes")
    } else {
        format!("{now:<18} max {max}")
    };
    format!(
        "  {:<13} {:<24} {}\n",
        h.address,
        h.role.describe(h.chipset),
        link.trim_end()
    )
}

/// `7.34 GiB/s (7.88 GB/s; about 6.70-7.09 GB/s in practice)`: both units,
/// as read-test prints its figures ([`rate::format_both`]).
fn bandwidth_text(b: &Bandwidth) -> String {
    let both = rate::format_both(b.encoded());
    format!(
        "{}; about {}-{} in practice)",
        both.trim_end_matches(')'),
        format_gbps(b.practical_low_bytes_per_sec as f64).trim_end_matches(" GB/s"),
        format_gbps(b.practical_high_bytes_per_sec as f64)
    )
}

fn finding_text(f: &Finding, paint: Paint, indent: &str) -> String {
    let (label, painted) = match f.severity {
        Severity::Critical | Severity::Warning => ("warning:", paint.warn("warning:")),
        Severity::Info => ("note:", paint.dim("note:")),
    };
    let mut t = wrap(&format!("{label} {}", f.title), indent);
    t = t.replacen(label, &painted, 1);
    if let Some(h) = &f.command {
        let inner = format!("{indent}  ");
        let hinted = wrap(&format!("hint: {h}"), &inner);
        t.push_str(&hinted.replacen("hint:", &paint.dim("hint:"), 1));
    }
    t
}

fn thermal_text(t: &SmartThermal) -> String {
    let temp = t
        .temperature_celsius
        .map_or("temperature not reported".to_owned(), |c| format!("{c} °C"));
    let warn = if t.temperature_warning {
        " (a temperature threshold is crossed now)"
    } else {
        ""
    };
    let minutes = |s: u64| s / 60;
    let times = |n: u32| match n {
        1 => "once".to_owned(),
        n => format!("{n} times"),
    };
    format!(
        "{temp}{warn}; throttled lightly (TMT1) {}, {} s in all; heavily (TMT2) {}, {} s; above the warning temperature {} min, critical {} min",
        times(t.tmt1.transitions),
        t.tmt1.seconds,
        times(t.tmt2.transitions),
        t.tmt2.seconds,
        minutes(t.warning_temperature_seconds),
        minutes(t.critical_temperature_seconds)
    )
}

fn device_text(d: &DeviceReport, paint: Paint) -> String {
    let mut head = paint.bold(&d.name);
    if let Some(m) = &d.model {
        head.push_str(&format!("  {m}"));
    }
    if let Some(s) = &d.serial {
        head.push_str(&format!("  {}", paint.dim(&format!("serial {s}"))));
    }
    if !d.block_devices.is_empty() && d.block_devices != [d.name.clone()] {
        head.push_str(&format!("  ({})", d.block_devices.join(", ")));
    }
    let mut t = format!("{head}\n");
    for h in &d.hops {
        t.push_str(&hop_line(h, paint));
    }
    if let Some(c) = &d.ceiling {
        let line = format!(
            "ceiling {}, Gen{} x{}, set by {}",
            bandwidth_text(&c.bandwidth),
            c.generation,
            c.width,
            c.limited_by_link
        );
        t.push_str(&wrap(&line, "  "));
    }
    for l in &d.through_loops {
        let on = match (&l.fs_type, &l.mount_point) {
            (Some(fs), Some(mp)) => format!(" on {fs} ({mp})"),
            _ => " (its filesystem is not in the mount table)".to_owned(),
        };
        let to = if l.devices.is_empty() {
            String::new()
        } else {
            format!(", device {}", l.devices.join(", "))
        };
        t.push_str(&wrap(
            &format!("via {}: backing file {}{on}{to}", l.device, l.backing_file),
            "  ",
        ));
    }
    if let Some(n) = &d.note {
        t.push_str(&wrap(n, "  "));
    }
    for f in &d.findings {
        t.push_str(&finding_text(f, paint, "  "));
    }
    if let Some(th) = &d.thermal {
        t.push_str(&wrap(&format!("thermal {}", thermal_text(th)), "  "));
    }
    if let Some(e) = &d.thermal_error {
        t.push_str(&wrap(&format!("thermal: {e}"), "  "));
    }
    t
}

fn array_text(a: &ArrayReport, paint: Paint) -> String {
    let profiles: Vec<&str> = a.data_profiles.iter().map(|p| p.name()).collect();
    let mut t = format!(
        "{} {}: data {}, {} members\n",
        paint.bold("array"),
        a.mount,
        if profiles.is_empty() {
            "none allocated yet".to_owned()
        } else {
            profiles.join("+")
        },
        a.members.len()
    );
    for m in &a.members {
        let ceiling = m
            .ceiling
            .as_ref()
            .map_or("no PCIe link information".to_owned(), |c| {
                rate::format_both(c.encoded())
            });
        let shown = m.block_device.as_deref().unwrap_or(&m.device);
        let on = if m.rests_on.is_empty() || m.rests_on == [shown] {
            String::new()
        } else {
            format!(" on {}", m.rests_on.join(", "))
        };
        t.push_str(&format!("  {:<24} {}\n", format!("{shown}{on}"), ceiling));
    }
    for c in &a.ceilings {
        match &c.one_reader {
            Some(b) => {
                let held = if c.held_back_by.is_empty() {
                    String::new()
                } else {
                    format!("  {}", paint.warn("held back"))
                };
                t.push_str(&format!(
                    "  {}: {} for one reader{held}\n",
                    paint.bold(c.profile.name()),
                    bandwidth_text(b)
                ));
            }
            None => t.push_str(&format!("  {}: no figures\n", paint.bold(c.profile.name()))),
        }
        t.push_str(&wrap(&c.summary, "    "));
    }
    t
}

/// The text report.
pub fn render(r: &LinksReport, paint: Paint) -> String {
    if r.devices.is_empty() && r.array.is_none() {
        return format!("{}\n", r.summary);
    }
    let mut t = String::new();
    for d in &r.devices {
        t.push_str(&device_text(d, paint));
        t.push('\n');
    }
    if !r.findings.is_empty() {
        t.push_str(&format!("{}\n", paint.bold("together")));
        for f in &r.findings {
            t.push_str(&finding_text(f, paint, "  "));
        }
        t.push('\n');
    }
    if let Some(a) = &r.array {
        t.push_str(&array_text(a, paint));
        t.push('\n');
    }
    t.push_str(&r.summary);
    t.push('\n');
    t
}

use super::page::{BAD, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["links"],
    documents: &["links"],
    output: super::page::Shape::Document,
    exits: &[
        row(
            status::OK,
            "the links were reported, whatever they show (a capped link is a warning in the \
             report).",
        ),
        row(
            status::ERROR,
            "cannot report: neither a mounted btrfs nor a device, an unreadable tree, \
             --thermal without root.",
        ),
        BAD,
    ],
    examples: &[
        ("The PCIe links of every NVMe drive.", "btrfs-lab links"),
        (
            "Those behind a filesystem, and its ceiling.",
            "btrfs-lab links /mnt/data",
        ),
        (
            "From a captured tree instead of this machine.",
            "btrfs-lab links --sysroot reference /mnt/models",
        ),
    ],
    see_also: &[],
    ..super::page::Declared::NONE
}];
