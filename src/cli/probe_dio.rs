//! `btrfs-lab probe-dio PATH`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use btrfs_lab::error::Result;
use btrfs_lab::parse::size::{format_iec, format_rate};
use btrfs_lab::probe::verdict::{FileSummary, Verdict, profile_list};
use btrfs_lab::probe::{self, EvidenceKind, ProbeOptions, ProbeReport};
use btrfs_lab::sys::counters::{CounterChoice, CounterKind};
use btrfs_lab::sys::root::SysRoot;
use btrfs_lab::sys::signals;

use super::output::{Output, Paint, wrap};
use super::units::size_arg;

pub const AFTER_HELP: &str = "\
Writes test files in PATH with O_DIRECT and measures the page-cache data the
writes dirtied. On btrfs a control file in a fresh NOCOW directory of the same
filesystem is written the same way, interleaved. Test files are created with
O_EXCL under unique names and removed on every exit path.

Verdicts and exit status:
  direct             0  the writes bypassed the page cache
  buffered-fallback  3  the kernel turned the writes buffered (btrfs: data checksums)
  profile-forced     4  the data profile (DUP, RAID1, ...) makes every O_DIRECT write buffered
  inconclusive       5  too much noise to tell; the report says why
Errors exit 1, bad arguments 2, an interrupt 130.";

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CounterArg {
    /// This filesystem's own counter (debugfs) when readable, else vmstat.
    Auto,
    /// Only the per-filesystem counter (root, debugfs).
    Bdi,
    /// Only the machine-wide /proc/vmstat counter.
    Vmstat,
}

#[derive(Debug, Args)]
pub struct ProbeDioArgs {
    /// Directory to test (the probe writes and removes its files there).
    path: PathBuf,
    /// Bytes written per file per round.
    #[arg(long, default_value = "256M", value_parser = size_arg, value_name = "SIZE")]
    size: u64,
    /// Bytes per write call.
    #[arg(long, default_value = "1M", value_parser = size_arg, value_name = "SIZE")]
    block_size: u64,
    /// Rounds (the medians decide).
    #[arg(long, default_value_t = probe::DEFAULT_ROUNDS, value_name = "N")]
    rounds: u32,
    /// Which dirtied-page counter to use.
    #[arg(long, value_enum, default_value = "auto")]
    counter: CounterArg,
    /// Read /sys and /proc under DIR (default: $BTRFS_LAB_SYSROOT or /).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
}

pub fn run(args: ProbeDioArgs, out: &Output) -> Result<u8> {
    signals::install()?;
    let opts = ProbeOptions {
        path: args.path,
        size_bytes: args.size,
        block_size: args.block_size,
        rounds: args.rounds,
        counter: match args.counter {
            CounterArg::Auto => CounterChoice::Auto,
            CounterArg::Bdi => CounterChoice::Bdi,
            CounterArg::Vmstat => CounterChoice::Vmstat,
        },
        // This process has no threads yet: it may unshare its mount namespace.
        allow_private_mounts: true,
        sysroot: SysRoot::from_option(args.sysroot.as_deref()),
    };
    let bar = out.byte_progress("probe-dio {bar:30} {bytes}/{total_bytes} {bytes_per_sec}");
    let result = probe::run(&opts, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let report = result?;
    if out.json {
        out.json_doc(&report);
    } else {
        out.text(&render(&report, out.paint));
    }
    Ok(report.exit_code)
}

fn verdict_painted(v: Verdict, paint: Paint) -> String {
    match v {
        Verdict::Direct => paint.good(v.name()),
        Verdict::Inconclusive => paint.warn(v.name()),
        _ => paint.bad(v.name()),
    }
}

fn column(s: &FileSummary) -> [String; 4] {
    [
        format_iec(s.bytes_written),
        format_iec(s.dirtied_bytes_median),
        format!("{:.2}", s.ratio_median),
        format_rate(s.throughput_bytes_per_sec),
    ]
}

/// The text report.
pub fn render(r: &ProbeReport, paint: Paint) -> String {
    let mut t = format!(
        "{} {}\n",
        paint.bold("probe-dio"),
        r.filesystem.dir.display()
    );
    t.push_str(&format!(
        "verdict: {}  {}\n\n",
        verdict_painted(r.verdict, paint),
        r.summary
    ));

    let labels = [
        "written per round",
        "dirtied (median)",
        "dirtied / written",
        "throughput",
    ];
    let test = column(&r.test);
    let control = r.control.as_ref().map(column);
    let header = match control {
        Some(_) => format!(
            "  {:<20} {}{} {}",
            "",
            paint.dim("test file"),
            " ".repeat(13),
            paint.dim("NOCOW control")
        ),
        None => format!("  {:<20} {}", "", paint.dim("test file")),
    };
    t.push_str(&header);
    t.push('\n');
    for (i, label) in labels.iter().enumerate() {
        let c = control.as_ref().map_or(String::new(), |c| c[i].clone());
        let row = format!("  {label:<20} {:<22} {c}", test[i]);
        t.push_str(row.trim_end());
        t.push('\n');
    }
    t.push('\n');

    let fs = &r.filesystem;
    let mut fs_line = format!(
        "{} on {}, mounted at {}",
        fs.fs_type,
        fs.source,
        fs.mount_point.display()
    );
    if fs.fs_type == "btrfs" {
        fs_line.push_str(&format!(", data {}", profile_list(&fs.data_profiles)));
    }
    t.push_str(&format!("  filesystem  {fs_line}\n"));
    let yes_no = |b: Option<bool>| match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "n/a",
    };
    let options = if fs.mount_options.is_empty() {
        "none that matter".to_owned()
    } else {
        fs.mount_options.join(",")
    };
    t.push_str(&format!(
        "  directory   NOCOW {}, compression attribute {}; mount options: {options}\n",
        yes_no(fs.target_nocow),
        yes_no(fs.target_compressed)
    ));
    t.push_str(&format!(
        "              written through one descriptor: device {} inode {}\n",
        fs.dir_device, fs.dir_inode
    ));
    for name in &r.removed_leftovers {
        t.push_str(&format!(
            "  leftover    {}\n",
            paint.dim(&format!("removed {name} (a killed probe's)"))
        ));
    }
    t.push_str(&format!("  kernel      {}\n", r.kernel));
    for name in &r.removed_trace_instances {
        t.push_str(&format!(
            "  leftover    {}\n",
            paint.dim(&format!("removed trace instance {name} (a killed probe's)"))
        ));
    }
    match r.evidence.source {
        EvidenceKind::Tracepoint => {
            t.push_str(&format!(
                "  evidence    per-file: folios each test file dirtied ({}; exact, other writers do not count)\n",
                r.evidence.label
            ));
            if let Some(c) = &r.evidence.cross_check {
                let said = if c.agrees {
                    format!("agrees ({})", c.verdict.name())
                } else {
                    format!(
                        "says {}: other writers on the filesystem disturb it",
                        c.verdict.name()
                    )
                };
                t.push_str(&format!("  cross-check the counter below {said}\n"));
            }
        }
        EvidenceKind::Bdi => t.push_str("  evidence    per-filesystem counter (below)\n"),
        EvidenceKind::Vmstat => t.push_str("  evidence    machine-wide counter (below)\n"),
    }
    if let Some(note) = &r.evidence.note {
        t.push_str(&format!("              {}\n", paint.dim(note)));
    }
    let scope = match r.counter.source {
        CounterKind::Bdi => "this filesystem only",
        CounterKind::Vmstat => "machine-wide",
    };
    t.push_str(&format!(
        "  counter     {} ({scope}); background {} ({:.2} of a test write)\n",
        r.counter.label,
        format_rate(r.noise.dirtied_bytes_per_sec),
        r.noise.ratio_median
    ));
    if let Some(note) = &r.counter.note {
        t.push_str(&format!("              {}\n", paint.dim(note)));
    }
    if let Some(note) = &r.control_note {
        t.push_str(&format!("  control     {}\n", paint.dim(note)));
    }
    t.push_str(&format!(
        "  rounds      {} × {} per file in {} writes, fsync at the end\n\n",
        r.parameters.rounds,
        format_iec(r.parameters.size_bytes),
        format_iec(r.parameters.block_size)
    ));
    t.push_str(&format!("{}\n", paint.bold("why")));
    t.push_str(&wrap(&r.explanation, 88, "  "));
    if let Some(fix) = &r.fix {
        t.push_str(&format!("{}\n", paint.bold("fix")));
        t.push_str(&wrap(fix, 88, "  "));
    }
    t
}
