//! `btrfs-lab probe-dio PATH`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use btrfs_lab::error::Result;
use btrfs_lab::model::profile::profile_list;
use btrfs_lab::parse::size::format_rate;
use btrfs_lab::probe::pid::{FileVerdict, PidOptions, PidReport};
use btrfs_lab::probe::verdict::{FileSummary, Verdict};
use btrfs_lab::probe::{self, EvidenceKind, ProbeOptions, ProbeReport};
use btrfs_lab::report::text::{escape_control, escape_path};
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::kernel::signals;
use btrfs_lab::sys::proc::counters::{CounterChoice, CounterKind};

use super::output::{Output, Paint, wrap};
use super::units::{SYSROOT_HELP, UnitArgs, size, size_arg};

pub const AFTER_HELP: &str = "\
Writes test files in PATH with O_DIRECT and measures, per file (kernel
tracepoints, as root) or with a counter, the data the writes put through the
page cache, and whether the kernel bounced them. On btrfs a control file in a
fresh NOCOW directory of the same filesystem is written the same way,
interleaved; the verdict line gives the cost against it. Test files are
created with O_EXCL under unique names and removed on every exit path.

Verdicts and exit status:
  direct             0  the writes bypassed the page cache
  buffered-fallback  3  the kernel turned the writes buffered (btrfs: data
                        checksums)
  profile-forced     4  the data profile (DUP, RAID1, ...) makes every
                        O_DIRECT write buffered
  inconclusive       5  too much noise to tell; the report says why
  direct-bounced     6  not through the page cache, but copied through a
                        bounce buffer (7.3 and later)
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
#[command(override_usage = "btrfs-lab probe-dio [OPTIONS] <PATH>
       btrfs-lab probe-dio --pid <PID> [--seconds <N>]")]
pub struct ProbeDioArgs {
    /// Directory to test (the probe writes and removes its files there).
    #[arg(required_unless_present = "pid")]
    path: Option<PathBuf>,
    /// Watch a running process instead: its files open for writing, and
    /// whether the ones it opened with O_DIRECT dirty the page cache (root).
    #[arg(long, value_name = "PID", conflicts_with_all = ["path", "file_size", "block_size", "rounds", "counter"])]
    pid: Option<u32>,
    /// With --pid: how long to watch, in seconds [default: 10].
    #[arg(long, value_name = "N")]
    seconds: Option<u32>,
    /// Size of each test file [default: 4M when the per-file tracepoints
    /// are used (root, tracefs), else 64M].
    #[arg(long = "file-size", alias = "size", value_parser = size_arg, value_name = "SIZE")]
    file_size: Option<u64>,
    /// Bytes per write call.
    #[arg(long, default_value = "1M", value_parser = size_arg, value_name = "SIZE")]
    block_size: u64,
    /// Rounds (the medians decide).
    #[arg(long, default_value_t = probe::DEFAULT_ROUNDS, value_name = "N")]
    rounds: u32,
    /// Which dirtied-page counter to use.
    #[arg(long, value_enum, default_value = "auto")]
    counter: CounterArg,
    #[arg(long, value_name = "DIR", help = SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
    #[command(flatten)]
    units: UnitArgs,
}

pub fn run(args: ProbeDioArgs, out: &Output) -> Result<u8> {
    signals::install()?;
    args.units.select();
    if args.seconds.is_some() && args.pid.is_none() {
        return Err(btrfs_lab::error::Error::usage(
            "--seconds goes with --pid: a directory probe is sized with --file-size and --rounds",
        ));
    }
    let sysroot = SysRoot::from_option(args.sysroot.as_deref(), out);
    let Some(path) = args.path.clone() else {
        let report = probe::pid::run(&args.pid_options(sysroot), out)?;
        out.report(&report, |r| render_pid(r, out.paint));
        return Ok(report.exit_code);
    };
    let report = probe::run(&args.probe_options(path, sysroot), out)?;
    out.report(&report, |r| render(r, out.paint));
    Ok(report.exit_code)
}

impl ProbeDioArgs {
    fn pid_options(&self, sysroot: SysRoot) -> PidOptions {
        PidOptions {
            pid: self.pid.unwrap_or(0),
            seconds: self.seconds.unwrap_or(probe::pid::DEFAULT_SECONDS),
            // No threads yet: it may unshare its mount namespace.
            allow_private_mounts: true,
            sysroot,
        }
    }

    fn probe_options(&self, path: PathBuf, sysroot: SysRoot) -> ProbeOptions {
        ProbeOptions {
            path,
            size_bytes: self.file_size,
            block_size: self.block_size,
            rounds: self.rounds,
            counter: match self.counter {
                CounterArg::Auto => CounterChoice::Auto,
                CounterArg::Bdi => CounterChoice::Bdi,
                CounterArg::Vmstat => CounterChoice::Vmstat,
            },
            // This process has no threads yet: it may unshare its mount namespace.
            allow_private_mounts: true,
            sysroot,
        }
    }
}

fn verdict_painted(v: Verdict, paint: Paint) -> String {
    match v {
        Verdict::Direct | Verdict::DirectBounced => paint.good(v.name()),
        Verdict::Inconclusive => paint.warn(v.name()),
        _ => paint.bad(v.name()),
    }
}

fn column(s: &FileSummary) -> [String; 5] {
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    let path = match (s.direct_share, s.bounced_share) {
        (None, _) => "not traced".to_owned(),
        (Some(d), Some(b)) if b > 0.0 => format!("{}, {} bounced", pct(d), pct(b)),
        (Some(d), _) => pct(d),
    };
    [
        size(s.bytes_written),
        size(s.dirtied_bytes_median),
        format!("{:.2}", s.ratio_median),
        path,
        format_rate(s.throughput_bytes_per_sec),
    ]
}

/// The text report.
pub fn render(r: &ProbeReport, paint: Paint) -> String {
    let mut t = format!(
        "{} {}\n",
        paint.bold("probe-dio"),
        escape_path(&r.filesystem.dir)
    );
    let cost = r
        .cost_sentence()
        .map_or(String::new(), |c| format!(" — {c}"));
    t.push_str(&format!(
        "verdict: {}{cost}\n{}\n\n",
        verdict_painted(r.verdict, paint),
        r.summary
    ));

    render_columns(&mut t, r, paint);

    render_filesystem(&mut t, r, paint);
    render_evidence(&mut t, r, paint);
    t.push('\n');
    t.push_str(&format!("{}\n", paint.bold("why")));
    t.push_str(&wrap(&r.explanation, "  "));
    if let Some(fix) = &r.fix {
        t.push_str(&format!("{}\n", paint.bold("fix")));
        t.push_str(&wrap(fix, "  "));
    }
    t
}

/// The test file's and the control's figures side by side.
fn render_columns(t: &mut String, r: &ProbeReport, paint: Paint) {
    let labels = [
        "written per round",
        "page cache (median)",
        "page cache / written",
        "direct-I/O path",
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
}

/// The filesystem, the directory, leftovers and the kernel.
fn render_filesystem(t: &mut String, r: &ProbeReport, paint: Paint) {
    let fs = &r.filesystem;
    let mut fs_line = format!(
        "{} on {}, mounted at {}",
        fs.fs_type,
        fs.source,
        escape_path(&fs.mount_point)
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
    t.push_str(&wrap(&r.expectation_sentence(), "              "));
    for name in &r.removed_trace_instances {
        t.push_str(&format!(
            "  leftover    {}\n",
            paint.dim(&format!("removed trace instance {name} (a killed probe's)"))
        ));
    }
}

/// What the verdict rests on: the evidence, the counter, the rounds and
/// what they cost.
fn render_evidence(t: &mut String, r: &ProbeReport, paint: Paint) {
    match r.evidence.source {
        EvidenceKind::Tracepoint => {
            t.push_str(&format!(
                "  evidence    per-file: page cache and direct-I/O calls of each test file ({}; exact, other writers do not count)\n",
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
        "  rounds      {} × {} per file in {} writes, fsync at the end\n",
        r.parameters.rounds,
        size(r.parameters.size_bytes),
        size(r.parameters.block_size)
    ));
    t.push_str(&format!(
        "  spent       {:.2} s, {} written\n",
        r.effort.seconds,
        size(r.effort.bytes_written)
    ));
    for reason in r
        .reasons
        .iter()
        .filter(|_| r.verdict != Verdict::Inconclusive)
    {
        t.push_str(&format!("  note        {}\n", paint.dim(reason)));
    }
}

fn file_verdict_painted(v: FileVerdict, paint: Paint) -> String {
    match v {
        FileVerdict::Direct | FileVerdict::DirectBounced => paint.good(v.name()),
        FileVerdict::BufferedFallback => paint.bad(v.name()),
        FileVerdict::Unknown => paint.warn(v.name()),
        _ => v.name().to_owned(),
    }
}

/// The text report of `--pid`.
pub fn render_pid(r: &PidReport, paint: Paint) -> String {
    let mut t = format!(
        "{} --pid {} ({})\n{}\n\n",
        paint.bold("probe-dio"),
        r.pid,
        escape_control(&r.command),
        escape_control(&r.summary)
    );
    for f in &r.files {
        let mut verdict = file_verdict_painted(f.verdict, paint);
        if !f.reasons.is_empty() {
            let names: Vec<&str> = f
                .reasons
                .iter()
                .map(|x| match x {
                    probe::pid::FallbackReason::Profile => "profile",
                    probe::pid::FallbackReason::Checksums => "checksums",
                    probe::pid::FallbackReason::Compression => "compression",
                })
                .collect();
            verdict.push_str(&format!(" ({})", names.join(", ")));
        }
        t.push_str(&format!("  {}\n", escape_path(&f.path)));
        let fds: Vec<String> = f.fds.iter().map(u32::to_string).collect();
        t.push_str(&format!(
            "    verdict {verdict}; fd {} {}; {} inode {} on {}",
            fds.join(","),
            if f.o_direct {
                "O_DIRECT"
            } else {
                "without O_DIRECT"
            },
            f.fs_type,
            f.inode,
            f.device
        ));
        if f.fs_type == "btrfs" {
            t.push_str(&format!(
                ", data {}, NOCOW {}",
                profile_list(&f.data_profiles),
                if f.nocow == Some(true) { "yes" } else { "no" }
            ));
        }
        t.push('\n');
        let dirtied = match (f.dirtied_folios, f.dirtied_bytes) {
            (Some(n), Some(b)) => format!("{n} folios ({})", size(b)),
            _ => "not watched".to_owned(),
        };
        let written = match f.bytes_written {
            Some(b) => format!(
                "{} (the process's write calls; the only file that changed)",
                size(b)
            ),
            None if f.activity.written() => {
                "yes (size, mtime or position changed; bytes per file unknown)".to_owned()
            }
            None => "nothing seen".to_owned(),
        };
        let path = match (f.direct_calls, f.bounced_calls) {
            (Some(d), Some(b)) if b > 0 => format!("; direct-I/O calls {d} ({b} bounced)"),
            (Some(d), _) => format!("; direct-I/O calls {d}"),
            (None, _) => String::new(),
        };
        t.push_str(&format!("    dirtied {dirtied}{path}; written {written}\n"));
        if let Some(n) = &f.note {
            t.push_str(&format!("    {}\n", paint.dim(&escape_control(n))));
        }
    }
    if r.read_only_files > 0 {
        t.push_str(&format!(
            "  {} file(s) open read-only, not watched\n",
            r.read_only_files
        ));
    }
    for d in r
        .skipped_descriptors
        .iter()
        .filter(|d| d.kind == btrfs_lab::sys::proc::pidfd::FdKind::OPath || d.path.is_absolute())
    {
        t.push_str(&format!(
            "  fd {} {}: {}, not read\n",
            d.fd,
            escape_control(&d.path.display().to_string()),
            d.kind.describe()
        ));
    }
    t.push('\n');
    let per = |b: Option<u64>| b.map_or("unknown".to_owned(), size);
    t.push_str(&format!(
        "  process     write calls {}, sent to storage {} in {:.1} s (per process, not per file)\n",
        per(r.process_write_call_bytes),
        per(r.process_storage_write_bytes),
        r.seconds
    ));
    t.push_str(&format!("  evidence    {}\n", r.evidence));
    if r.lost_events > 0 {
        t.push_str(&format!(
            "              {}\n",
            paint.warn(&format!(
                "the trace buffer lost {} events: counts are lower bounds",
                r.lost_events
            ))
        ));
    }
    for name in &r.removed_trace_instances {
        t.push_str(&format!(
            "  leftover    {}\n",
            paint.dim(&format!("removed trace instance {name} (a killed probe's)"))
        ));
    }
    t
}

use super::page::{BAD, FAIL, INT, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["probe-dio"],
    documents: &["probe-dio", "probe-dio-pid"],
    output: super::page::Shape::Document,
    exits: &[
        row(
            status::DIRECT,
            "direct: the O_DIRECT writes bypassed the page cache.",
        ),
        row(
            status::BUFFERED_FALLBACK,
            "buffered-fallback: the kernel turned the writes buffered (btrfs: data \
             checksums; the NOCOW control was direct); with --pid: a file the process \
             opened with O_DIRECT dirtied page-cache folios.",
        ),
        row(
            status::PROFILE_FORCED,
            "profile-forced: the data profile (DUP, RAID1, RAID1C3/4, RAID10, RAID5/6) \
             makes every O_DIRECT write buffered, NOCOW files included.",
        ),
        row(
            status::INCONCLUSIVE,
            "inconclusive: background writes or an in-between ratio made the measurement \
             unreliable; the report says why.",
        ),
        row(
            status::DIRECT_BOUNCED,
            "direct-bounced: the writes bypassed the page cache, but the kernel copied each \
             through a bounce buffer (7.3 and later: checksummed files, profiles with \
             copies); with --pid: a file's writes were bounced and none fell back.",
        ),
        FAIL,
        BAD,
        INT,
    ],
    examples: &[
        (
            "Are O_DIRECT writes in /mnt/data/db direct?",
            "btrfs-lab probe-dio --file-size 32M /mnt/data/db",
        ),
        (
            "Watch a running database for 3 seconds.",
            "btrfs-lab probe-dio --pid 1234 --seconds 3",
        ),
        (
            "The verdict as JSON.",
            "btrfs-lab probe-dio --json --file-size 32M /mnt/data/db",
        ),
    ],
    see_also: &["open(2)"],
    ..super::page::Declared::NONE
}];
