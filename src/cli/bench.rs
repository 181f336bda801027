//! `btrfs-lab bench DIR`: arguments, progress and rendering; the work is
//! in `btrfs_lab::bench`.

use std::path::{Path, PathBuf};

use clap::Args;

use btrfs_lab::bench::compare::{self, Comparison};
use btrfs_lab::bench::history::{self, History, HistoryReport, Machine};
use btrfs_lab::bench::metadata::{ColdMethod as MetadataCold, MetadataOptions, MetadataReport};
use btrfs_lab::bench::profile::{self, Direction};
use btrfs_lab::bench::profiles::{self, ProfilesOptions, ProfilesReport};
use btrfs_lab::bench::report::HistoryEntry;
use btrfs_lab::bench::report::{self, BenchReport, Status, TestResult, is_flag};
use btrfs_lab::bench::sustained::{self, SustainedOptions, SustainedReport};
use btrfs_lab::bench::{self, BenchOptions, cliff, html, jobs};
use btrfs_lab::error::Result;
use btrfs_lab::report::rate::{mb_number, mb_number_fine};
use btrfs_lab::report::text::{escape_control, escape_path};
use btrfs_lab::sandbox::Locations;
use btrfs_lab::sys::fs::outfile::{OutputDir, split};
use btrfs_lab::sys::fs::root::SysRoot;
use btrfs_lab::sys::tools::fio::RealFio;

use super::output::{Output, Paint, confirm, wrap};
use super::units::{UnitArgs, size, size_arg};
use btrfs_lab::report::text::wrap_hanging;

pub const AFTER_HELP: &str = "\
Profiles (each test is run for reads, then for writes; all reads first):
  default     SEQ1M Q8T1, SEQ1M Q1T1, RND4K Q32T1, RND4K Q1T1
  nvme        SEQ1M Q8T1, SEQ128K Q32T1, RND4K Q32T16, RND4K Q1T1
  peak        SEQ1M Q8T1, RND4K Q32T16 (CrystalDiskMark's Peak Performance)
  real-world  SEQ1M Q1T1, RND4K Q1T1 (CrystalDiskMark's Real World Performance)
--mix also runs each test as a 70/30 mix of reads and writes at once, after
the writes (CrystalDiskMark's Mix): one figure for both, checked against the
devices' reads and writes apart.

fio does the I/O on a test file in a fresh directory under DIR, made NOCOW (so
O_DIRECT is direct) unless --cow, and fully written with incompressible data
before any read. Around every run btrfs-lab reads what fio cannot know: the
member devices' counters (/proc/diskstats), the test file's page cache
(mincore) and the page cache the test file's writes dirtied (its own pages,
traced per inode as root), compressed or never-written
extents (FIEMAP), the array's PCIe ceiling (links) and the NVMe thermal
counters. A figure that fails a check is flagged with the reason instead of
being reported. The directory is removed on every exit path.

MB/s are decimal (10^6 bytes per second), as CrystalDiskMark shows them.

--sustained [SIZE] writes one long sequential file instead (default: 80% of
the free space; --fill PERCENT, --time LIMIT) and finds the cliff where the
rate drops and stays down (an SSD's write cache filling); it asks first
(--yes). Ctrl-C stops it early and still prints the report (status 130).
--small-files creates --files empty files by --threads threads, syncs, stats
them cold, deletes them and syncs: files/s per phase. Cold for its own files
alone: as root the files are created in a memory cgroup of their own, which is
reclaimed before the stat phase, evicting their dentries and inodes and nothing
else of the machine's (btrfs's metadata blocks stay in memory). Without root,
or without a memory cgroup, the stat phase is warm, and the report says so and
why. --drop-caches (root) drops the page, dentry and inode caches of every
filesystem of the machine instead (sync, drop_caches=3): it warns, and asks
unless --yes; without root it is refused (status 1).
--small-files --compare-profiles raid1,raid1c3 runs it on throwaway sandboxes
(loop devices, one per profile, the same devices and size), never on your
filesystem; DIR, if given, is where their images go (--dry-run, --yes).
--dry-run in every mode makes every check of a real run (DIR, space, fio),
then prints the steps, the bytes it would write and (the suite) the fio job
file with --json; nothing is written.

The sequential tests' fio buffers are huge pages when enough are free (the
true ceiling of large I/O; with 4 KiB pages a note says what that may cost);
--hugepages reserves them for the run (vm.nr_hugepages, asks first) and puts
the setting back after.

Every suite run is saved in the bench history (SQLite; /var/lib/btrfs-lab/
bench.sqlite, --state-dir DIR/bench.sqlite or --db PATH; --no-history skips
it). --history [DIR] shows each test over the runs and names what changed in
the set-up (kernel, mount options, members, profile) beside every change
beyond the runs' noise. --compare RUN RUN... compares saved --json files or
history ids (12, #12) with the first one; ! marks a difference beyond the
noise of both runs (rounds that do not overlap, more than their spread, at
least 5%).

Exit status: 0 every figure checked out, 3 some figure is flagged, 1 error,
2 bad arguments, 130 interrupted (the test directory is removed).";

#[derive(Debug, Args)]
#[command(override_usage = "btrfs-lab bench [OPTIONS] <DIR>
       btrfs-lab bench --compare <RUN> <RUN>...
       btrfs-lab bench --history [DIR]")]
pub struct BenchArgs {
    /// Directory on the filesystem to measure (the test directory is made in it).
    #[arg(required_unless_present_any = ["compare", "compare_profiles", "history"])]
    dir: Option<PathBuf>,
    /// Test set: default, nvme, peak or real-world (CrystalDiskMark's).
    #[arg(long, default_value = "default", value_name = "NAME", value_parser = super::units::named(&profile::PROFILES, bench_profile), hide_possible_values = true)]
    profile: String,
    /// Also run every test as a mix of reads and writes at once (70% reads,
    /// CrystalDiskMark's Mix), after the writes.
    #[arg(long)]
    mix: bool,
    /// Reserve the huge pages the sequential tests' fio buffers need when
    /// too few are free (vm.nr_hugepages, root; asks first), and put the
    /// setting back after the run.
    #[arg(long)]
    hugepages: bool,
    /// Tests to run instead of a profile, comma-separated (SEQ1M-Q8T1,RND4K-Q32T16,...).
    #[arg(long, value_name = "LIST")]
    tests: Option<String>,
    /// Size of each test file.
    #[arg(long = "file-size", alias = "size", default_value = "1G", value_parser = size_arg, value_name = "SIZE")]
    size: u64,
    /// Rounds (the medians decide).
    #[arg(long = "rounds", alias = "runs", default_value_t = bench::DEFAULT_RUNS, value_name = "N")]
    runs: u32,
    /// Seconds per run.
    #[arg(long, default_value_t = bench::DEFAULT_DURATION, value_name = "SECS")]
    duration: u64,
    /// Seconds to wait between runs.
    #[arg(long, default_value_t = 0, value_name = "SECS")]
    interval: u64,
    /// Keep data checksums on the test file: measures the checksummed path
    /// (O_DIRECT writes are then buffered by btrfs, and flagged as such).
    #[arg(long)]
    cow: bool,
    /// Also read each member device alone and all at once (read-only).
    #[arg(long)]
    members: bool,
    /// Print the fio job file and stop (nothing is written).
    #[arg(long)]
    show_jobs: bool,
    /// Write an HTML report (SVG charts, no scripts); the fio job file is saved next to it as FILE.fio.
    #[arg(long, value_name = "FILE.html")]
    report: Option<PathBuf>,
    /// Save the fio job file here (with --show-jobs too: printed and saved, nothing run).
    #[arg(long, value_name = "FILE")]
    save_jobs: Option<PathBuf>,
    /// Also write the Prometheus metrics to FILE atomically (a temporary file
    /// in its directory, then rename), for node_exporter's textfile collector.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["compare", "show_jobs", "sustained", "metadata"])]
    textfile: Option<PathBuf>,
    #[command(flatten)]
    target: super::output::TargetArgs,
    /// Compare two or more saved runs instead of running: `bench --json`
    /// files or history ids (`12`, `#12`; a file named like a number is
    /// `./12`), the first the baseline; says which differences are beyond
    /// the runs' own noise.
    #[arg(long, num_args = 2.., value_name = "RUN", conflicts_with_all = ["dir", "members", "show_jobs", "report", "history"])]
    compare: Option<Vec<String>>,
    /// Show the stored runs' trend instead of running: each test over the
    /// runs, the changes beyond the runs' noise and what changed in the
    /// set-up beside them (kernel, mount options, members, profile). With
    /// DIR, only its filesystem's runs.
    #[arg(long, conflicts_with_all = ["members", "show_jobs", "report", "textfile", "sustained", "metadata", "dry_run", "no_history"])]
    history: bool,
    /// The history database [default: /var/lib/btrfs-lab/bench.sqlite,
    /// or DIR/bench.sqlite with --state-dir DIR].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Do not save this run in the history.
    #[arg(long, conflicts_with_all = ["compare"])]
    no_history: bool,
    /// One long sequential write instead of the suite: SIZE (default: 80% of
    /// the free space, or --fill), the rate each second, and the cliff where it
    /// drops and stays down (an SSD's write cache filling).
    #[arg(long, value_name = "SIZE", num_args = 0..=1, value_parser = size_arg, conflicts_with_all = ["compare", "members", "show_jobs"])]
    sustained: Option<Option<u64>>,
    /// With --sustained: write this percent of the free space.
    #[arg(long, value_name = "PERCENT", requires = "sustained")]
    fill: Option<u32>,
    /// With --sustained: stop after this long (90, 90s, 10m, 1h).
    #[arg(long = "time", value_name = "LIMIT", value_parser = duration_arg, requires = "sustained")]
    time_limit: Option<u64>,
    /// The small-file storm instead of the suite: --files empty files made
    /// by --threads threads, then syncfs; stat them cold; delete them, then
    /// syncfs. Files/s per phase and what the devices wrote.
    #[arg(
        long = "small-files",
        alias = "metadata",
        conflicts_with_all = ["compare", "members", "show_jobs", "sustained"]
    )]
    metadata: bool,
    /// With --small-files: make the stat phase cold by dropping the page,
    /// dentry and inode caches of every filesystem of this machine (sync,
    /// drop_caches=3; root; asks unless --yes), instead of evicting the
    /// storm's own dentries and inodes alone.
    #[arg(long, requires = "metadata", conflicts_with = "compare_profiles")]
    drop_caches: bool,
    /// With --small-files: how many files.
    #[arg(long, value_name = "N", default_value_t = bench::metadata::DEFAULT_FILES, requires = "metadata")]
    files: u64,
    /// With --small-files: how many threads create, stat and delete.
    #[arg(long, value_name = "N", default_value_t = bench::metadata::DEFAULT_THREADS, requires = "metadata")]
    threads: u32,
    /// With --small-files: run it on throwaway sandboxes instead, one per
    /// metadata profile (raid1,raid1c3,...), never on your filesystem; DIR,
    /// if given, is where their images go (default: --sandbox-root).
    #[arg(long, value_name = "LIST", requires = "metadata")]
    compare_profiles: Option<String>,
    /// Show the plan and do nothing.
    #[arg(long, conflicts_with_all = ["compare", "show_jobs"])]
    dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    yes: bool,
    #[arg(long, value_name = "DIR", help = super::units::SYSROOT_HELP)]
    sysroot: Option<PathBuf>,
    #[command(flatten)]
    units: UnitArgs,
}

fn options(args: &BenchArgs, dir: &Path, out: &Output) -> Result<BenchOptions> {
    let mut opts = BenchOptions::new(dir);
    match &args.tests {
        Some(list) => {
            opts.tests = profile::parse_tests(list)?;
            opts.profile = "custom".into();
        }
        None => {
            opts.tests = profile::profile_tests(&args.profile)?;
            opts.profile = args.profile.clone();
        }
    }
    opts.size = args.size;
    opts.runs = args.runs;
    opts.duration_secs = args.duration;
    opts.interval_secs = args.interval;
    opts.cow = args.cow;
    opts.members = args.members;
    opts.mix = args.mix;
    opts.hugepages = args.hugepages;
    // This process has no threads yet: it may unshare its mount namespace
    // to read the per-device dirtied counter in debugfs.
    opts.allow_private_debugfs = true;
    opts.sysroot = SysRoot::from_option(args.sysroot.as_deref(), out);
    opts.validate()?;
    Ok(opts)
}

fn duration_arg(v: &str) -> std::result::Result<u64, String> {
    let v = v.trim();
    let (num, mult) = match v.char_indices().last() {
        Some((i, 's')) => (&v[..i], 1),
        Some((i, 'm')) => (&v[..i], 60),
        Some((i, 'h')) => (&v[..i], 3600),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{v:?} is not a duration (90, 90s, 10m, 1h)"))
}

fn run_sustained(args: &BenchArgs, dir: &Path, size: Option<u64>, out: &Output) -> Result<u8> {
    let mut opts = SustainedOptions::new(dir);
    opts.size = size;
    opts.fill_percent = args.fill;
    opts.time_limit_secs = args.time_limit;
    opts.sysroot = SysRoot::from_option(args.sysroot.as_deref(), out);
    opts.validate()?;
    // Every refusal before the question: the output file, DIR (a user's
    // link, read-only, tmpfs, space), fio.
    let report_file = args
        .report
        .as_deref()
        .map(bench::OutputFile::prepare)
        .transpose()?;
    let target = bench::open_target(&opts.sysroot, dir, "--sustained writes a test file")?;
    let plan = sustained::plan(&opts, target)?;
    let mut fio = RealFio::find()?;
    if args.dry_run {
        let p = bench::plan::sustained(&opts, &plan);
        out.report(&p, bench::plan::BenchPlan::describe);
        return Ok(0);
    }
    plan.confirm(args.yes, out)?;
    out.before_change(NOTHING_KEPT)?;
    let fio_path = fio.path().to_path_buf();
    let report = sustained::measure(&opts, plan, &mut fio, &fio_path, out)?;
    if let Some(f) = report_file {
        f.write(&html::render_sustained(&report))?;
    }
    out.report(&report, render_sustained);
    Ok(report.exit_code)
}

/// Columns of a sustained run's sparklines: with the label before and a
/// member's size after, a line of 80.
const SPARK: usize = 54;

/// The text of `bench --sustained`: the verdict, the sparkline, each member.
pub fn render_sustained(r: &SustainedReport) -> String {
    let mut s = wrap_hanging(
        &format!(
            "bench --sustained {}: {} on {}",
            escape_path(&r.target.dir),
            r.target.fs_type,
            r.target
                .devices
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "",
        "  ",
    );
    let rates: Vec<f64> = r.series.iter().map(|p| p.bytes_per_sec).collect();
    let peak = rates.iter().copied().fold(0.0, f64::max);
    s.push_str(&format!(
        "  {} written in {}{}, sampled every {} ms\n",
        size(r.bytes_written),
        sustained::format_secs(r.seconds),
        if r.stopped_early {
            " (stopped early)"
        } else {
            ""
        },
        r.sample_period_msec
    ));
    let avg = if r.seconds > 0.0 {
        r.bytes_written as f64 / r.seconds
    } else {
        0.0
    };
    if rates.is_empty() || peak <= 0.0 {
        // No series: the run's average, never "peak 0.0".
        s.push_str(&format!(
            "  MB/s  no rate series; {} on average\n",
            mb_number_fine(avg)
        ));
    } else {
        s.push_str(&format!(
            "  {:<10}{}\n  {:<10}peak {}, {} on average\n",
            "MB/s",
            cliff::sparkline(&rates, SPARK),
            "",
            mb_number_fine(peak),
            mb_number_fine(avg)
        ));
    }
    let c = &r.series_check;
    s.push_str(&wrap(
        &format!(
            "series {} of {} written{}{}",
            size(c.series_bytes),
            size(c.bytes_written),
            c.device_bytes
                .map_or(String::new(), |d| format!("; members wrote {}", size(d))),
            if c.reconciled { "" } else { " (flagged)" }
        ),
        "  ",
    ));
    for m in &r.members {
        let mr: Vec<f64> = m.series.iter().map(|p| p.bytes_per_sec).collect();
        // The sparkline padded to its width, so the sizes line up.
        let spark = cliff::sparkline(&mr, SPARK);
        let pad = SPARK.saturating_sub(spark.chars().count());
        s.push_str(&format!(
            "  {:<10}{spark}{:pad$}  {:>10}\n",
            m.device,
            "",
            size(m.write_bytes)
        ));
    }
    for f in &r.findings {
        s.push('\n');
        s.push_str(&wrap(&f.title, "  "));
        for e in &f.evidence {
            s.push_str(&wrap_hanging(
                &format!("{}: {}", e.name, e.value),
                "    ",
                "      ",
            ));
        }
        s.push_str(&wrap(&f.why, "    "));
    }
    for n in &r.notes {
        s.push_str(&wrap(&format!("note: {n}"), "  "));
    }
    s.push('\n');
    s.push_str(&wrap(&r.summary, ""));
    s
}

fn run_metadata(args: &BenchArgs, dir: &Path, out: &Output) -> Result<u8> {
    let mut opts = MetadataOptions::new(dir);
    opts.files = args.files;
    opts.threads = args.threads;
    if args.drop_caches {
        opts.cold = bench::metadata::ColdMethod::DropCaches;
    }
    opts.sysroot = SysRoot::from_option(args.sysroot.as_deref(), out);
    opts.validate()?;
    let root = btrfs_lab::sys::is_root();
    if args.drop_caches && !root {
        return Err(btrfs_lab::error::Error::new(
            btrfs_lab::error::ErrorKind::Permission,
            "--drop-caches needs root: cannot write /proc/sys/vm/drop_caches",
        )
        .with_hint("run as root, or leave out --drop-caches (as root the stat phase is then cold for the storm's own files alone)"));
    }
    // The refusals of a real run (DIR held, not tmpfs, writable).
    drop(bench::open_target(
        &opts.sysroot,
        dir,
        "--small-files creates files",
    )?);
    if args.dry_run {
        let p = bench::plan::small_files(&opts, root);
        out.report(&p, bench::plan::BenchPlan::describe);
        return Ok(0);
    }
    if args.drop_caches {
        out.warning_with_hint(
            "--drop-caches drops the page, dentry and inode caches of every filesystem of this machine before the stat phase, not only the storm's: other programs read from disk again afterwards",
            "leave it out to evict the storm's own dentries and inodes alone",
        );
        confirm(
            out,
            "Drop the whole machine's caches before the stat phase?",
            args.yes,
        )?;
    }
    out.before_change(NOTHING_KEPT)?;
    let report = bench::metadata::measure(&opts, out)?;
    out.report(&report, render_metadata);
    Ok(report.exit_code)
}

/// Where a bench run that changed nothing lasting is seen when its report
/// could not be written ([`Output::before_change`]).
const NOTHING_KEPT: &str =
    "nothing (the settings it changed are put back, its test files removed): run it again";

/// The text of `bench --small-files`: one row per phase.
pub fn render_metadata(r: &MetadataReport) -> String {
    let first = format!(
        "bench --small-files {}: {} (metadata {}) on {}",
        escape_path(&r.target.dir),
        r.target.fs_type,
        if r.metadata_profiles.is_empty() {
            "-".to_owned()
        } else {
            r.metadata_profiles
                .iter()
                .map(|p| format!("{p:?}").to_lowercase())
                .collect::<Vec<_>>()
                .join("+")
        },
        r.target
            .devices
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    );
    let mut s = wrap_hanging(&first, "", "  ");
    s.push_str(&format!(
        "  {} files in {} directories, {} threads\n\n",
        r.files, r.dirs, r.threads
    ));
    s.push_str(&format!(
        "  {:<8}{:>12}{:>10}{:>10}{:>18}{:>14}\n",
        "phase", "files/s", "seconds", "sync s", "files/s with sync", "devices wrote"
    ));
    for p in &r.phases {
        s.push_str(&format!(
            "  {:<8}{:>12.0}{:>10.2}{:>10}{:>18.0}{:>14}\n",
            if p.name == "stat" && r.stat_cold {
                "stat*"
            } else {
                p.name.as_str()
            },
            p.files_per_sec,
            p.seconds,
            p.sync_seconds.map_or("-".into(), |x| format!("{x:.2}")),
            p.files_per_sec_with_sync,
            size(p.device_write_bytes)
        ));
    }
    s.push_str(&wrap(
        &format!(
            "{}stat phase {})",
            if r.stat_cold { "(* " } else { "(" },
            r.stat_cold_detail.trim_end_matches('.')
        ),
        "  ",
    ));
    if r.phases.first().is_some_and(|p| p.per_member.len() > 1) {
        s.push_str("\n  written per member (create, delete)\n");
        for (i, m) in r.phases[0].per_member.iter().enumerate() {
            let del = r.phases.get(2).and_then(|p| p.per_member.get(i));
            s.push_str(&format!(
                "    {:<12}{:>12}{:>12}\n",
                m.device,
                size(m.write_bytes),
                del.map_or("-".into(), |d| size(d.write_bytes))
            ));
        }
    }
    for n in &r.notes {
        s.push_str(&wrap(&format!("note: {n}"), "  "));
    }
    s.push('\n');
    s.push_str(&wrap(&r.summary, ""));
    s
}

fn run_compare_profiles(
    args: &BenchArgs,
    list: &str,
    out: &Output,
    places: Locations,
) -> Result<u8> {
    let opts = ProfilesOptions {
        profiles: profiles::parse_profiles(list)?,
        files: args.files,
        threads: args.threads,
        images_dir: args
            .dir
            .as_ref()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone())),
        sandbox_root: places.sandbox_root.clone(),
        sysroot: SysRoot::from_option(args.sysroot.as_deref(), out),
    };
    let stale: Vec<String> = profiles::stale_sandboxes(&places.store)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .collect();
    let plan = profiles::plan(&opts, &btrfs_lab::sys::fs::nonce::nonce(), stale)?;
    let steps = wrap_steps(&plan.describe());
    if args.dry_run {
        out.report(&plan, |_| format!("{steps}\n"));
        return Ok(0);
    }
    profiles::check_images_dir(&opts)?;
    profiles::preflight(&plan, &opts.sysroot)?;
    let question = format!(
        "{steps}\n\n{} sandbox(es) of {} × {} loop devices, made and removed one after the other; your filesystems are not touched.\nStart?",
        plan.runs.len(),
        plan.devices,
        size(plan.device_size_bytes)
    );
    if args.yes {
        out.text_note(&format!(
            "{} sandboxes of {} × {} loop devices, one after the other (--dry-run shows the steps)",
            plan.runs.len(),
            plan.devices,
            size(plan.device_size_bytes)
        ));
    } else {
        confirm(out, &question, false)?;
    }
    out.before_change(NOTHING_KEPT)?;
    let report = profiles::measure(&plan, &places.store, &opts.sysroot, out)?;
    out.report(&report, render_profiles);
    Ok(report.exit_code)
}

/// Steps, one a line, each filled to the width under its own indent
/// (a step's second line two columns further in); no newline at the end.
fn wrap_steps(steps: &[String]) -> String {
    let mut s = String::new();
    for step in steps {
        let text = step.trim_start();
        let lead = &step[..step.len() - text.len()];
        s.push_str(&wrap_hanging(text, lead, &format!("{lead}    ")));
    }
    s.truncate(s.trim_end_matches('\n').len());
    s
}

/// The text of `bench --small-files --compare-profiles`: per profile and phase
/// the figures and their ratio to the first profile.
pub fn render_profiles(r: &ProfilesReport) -> String {
    let x = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("×{v:.2}"));
    let mut s = wrap_hanging(
        &format!(
            "bench --small-files --compare-profiles: {} files, {} threads; each profile on its own btrfs of {} × {} loop devices (data {}) under {}",
            r.files,
            r.threads,
            r.devices,
            size(r.device_size_bytes),
            r.data_profile,
            escape_path(&r.images_dir)
        ),
        "",
        "  ",
    );
    s.push('\n');
    s.push_str(&format!(
        "  {:<9}{:<8}{:>10}{:>8}{:>9}{:>8}{:>12}{:>8}\n",
        "metadata", "phase", "files/s", "", "sync s", "", "wrote", ""
    ));
    for run in &r.runs {
        for (i, p) in run.report.phases.iter().enumerate() {
            let q = run.ratios.iter().find(|q| q.phase == p.name);
            let first = run.metadata == r.baseline;
            s.push_str(&format!(
                "  {:<9}{:<8}{:>10.0}{:>8}{:>9}{:>8}{:>12}{:>8}\n",
                if i == 0 { run.metadata.name() } else { "" },
                if p.name == "stat" && run.report.stat_cold {
                    "stat*"
                } else {
                    p.name.as_str()
                },
                p.files_per_sec,
                if first {
                    String::new()
                } else {
                    x(q.and_then(|q| q.files_per_sec))
                },
                p.sync_seconds.map_or("-".into(), |v| format!("{v:.2}")),
                if first || p.sync_seconds.is_none() {
                    String::new()
                } else {
                    x(q.and_then(|q| q.sync_seconds))
                },
                size(p.device_write_bytes),
                if first || p.device_write_bytes == 0 {
                    String::new()
                } else {
                    x(q.and_then(|q| q.device_write_bytes))
                },
            ));
        }
    }
    let cold = match r.runs.first().map(|x| &x.report) {
        Some(m) if m.stat_cold_method == MetadataCold::OwnCgroup => {
            "* cold: the storm's own dentries and inodes were evicted first, its memory cgroup reclaimed".to_owned()
        }
        Some(m) if m.stat_cold => "* cold: caches dropped first".to_owned(),
        Some(m) => format!("stat {}", m.stat_cold_detail),
        None => String::new(),
    };
    s.push_str(&wrap(
        &format!(
            "(× = against {}; {cold}; wrote = bytes the member devices wrote, the sync included)",
            r.baseline
        ),
        "  ",
    ));
    s.push_str("\n  written per member during the creates and their sync\n");
    for run in &r.runs {
        if let Some(c) = run.report.phases.first() {
            s.push_str(&wrap_hanging(
                &c.per_member
                    .iter()
                    .map(|m| format!("{} {}", m.device, size(m.write_bytes)))
                    .collect::<Vec<_>>()
                    .join(", "),
                &format!("    {:<9}", run.metadata.name()),
                "             ",
            ));
        }
    }
    for n in &r.notes {
        s.push_str(&wrap(&format!("note: {n}"), "  "));
    }
    s.push('\n');
    s.push_str(&wrap(&r.summary, ""));
    s
}

pub fn run(
    args: BenchArgs,
    out: &Output,
    places: (Option<PathBuf>, Option<PathBuf>),
) -> Result<u8> {
    args.units.select();
    if let Some(list) = &args.compare_profiles {
        return run_compare_profiles(&args, list, out, super::sandbox::locations(places, out));
    }
    let db = history::db_path(args.db.as_deref(), places.0.as_deref());
    if args.history {
        return run_history(&args, &db, out);
    }
    if let Some(list) = &args.compare {
        return run_compare(list, &db, out);
    }
    let dir = args
        .dir
        .clone()
        .expect("clap requires DIR without --compare");
    if args.metadata {
        return run_metadata(&args, &dir, out);
    }
    if let Some(size) = args.sustained {
        return run_sustained(&args, &dir, size, out);
    }
    run_suite(&args, &dir, &db, places.0, out)
}

/// The files a suite run writes besides its report on stdout, each
/// checked before the run.
struct SuiteOutputs {
    save_jobs: Option<bench::OutputFile>,
    report_file: Option<bench::OutputFile>,
    report_jobs: Option<bench::OutputFile>,
    textfile: Option<(OutputDir, std::ffi::OsString)>,
}

impl SuiteOutputs {
    /// `--save-jobs`, `--report` (and the job file beside it) and
    /// `--textfile`: refused now when they cannot be written.
    fn prepare(args: &BenchArgs) -> Result<Self> {
        let prepare =
            |p: &Option<PathBuf>| p.as_deref().map(bench::OutputFile::prepare).transpose();
        let save_jobs = prepare(&args.save_jobs)?;
        let report_file = prepare(&args.report)?;
        let report_jobs = match &report_file {
            Some(f) => {
                let s = f.sibling("fio")?;
                s.check_free().ok().map(|()| s)
            }
            None => None,
        };
        let textfile = match &args.textfile {
            Some(file) => {
                let (dir, name) = split(file)?;
                let dir =
                    OutputDir::open(&dir)?.allow_untrusted(args.target.allow_untrusted_target);
                Some((dir, name))
            }
            None => None,
        };
        Ok(Self {
            save_jobs,
            report_file,
            report_jobs,
            textfile,
        })
    }

    /// Writes them from the finished report.
    fn write(&self, report: &BenchReport) -> Result<()> {
        if let Some(f) = &self.save_jobs {
            f.write(&report.job_file)?;
        }
        if let Some(f) = &self.report_file {
            f.write(&html::render(report))?;
            if let Some(j) = &self.report_jobs {
                j.write(&report.job_file)?;
            }
        }
        if let Some((dir, name)) = &self.textfile {
            dir.write(
                name.clone(),
                bench::metrics::render(report).as_bytes(),
                0o644,
            )?;
        }
        Ok(())
    }
}

/// The suite's fio job file as it would run with these options.
fn suite_job_file(opts: &BenchOptions, buffers: &bench::Buffers) -> String {
    let huge_page_bytes = match buffers {
        bench::Buffers::Huge { page_bytes, .. } => Some(*page_bytes),
        bench::Buffers::Ordinary { .. } => None,
    };
    let settings = jobs::JobSettings {
        huge_page_bytes,
        file: bench::TEST_FILE,
        size_bytes: opts.size_bytes(),
        duration_secs: opts.duration_secs,
        direct: true,
        compress_percentage: 0,
    };
    jobs::suite_job(&opts.tests, opts.mix, &settings)
}

/// `--show-jobs`: prints the job file (and saves it with `--save-jobs`).
fn show_jobs(args: &BenchArgs, job_file: String, out: &Output) -> Result<u8> {
    let save = args
        .save_jobs
        .as_deref()
        .map(bench::OutputFile::prepare)
        .transpose()?;
    if let Some(f) = &save {
        f.write(&job_file)?;
    }
    out.text(&job_file);
    Ok(0)
}

/// What `--hugepages` will change on the whole machine, when it must.
fn reserve_step(buffers: &bench::Buffers) -> Option<String> {
    match buffers {
        bench::Buffers::Huge {
            pages,
            reserve: Some((now, during)),
            ..
        } => Some(format!(
            "reserve huge pages for the sequential tests' buffers ({pages} needed): vm.nr_hugepages {now} → {during} for the run, then back to {now} (after a kill, the next btrfs-lab command run as root puts it back from its record)"
        )),
        _ => None,
    }
}

/// `--dry-run`: the plan, with the reservation, history and metrics steps.
fn suite_plan(
    args: &BenchArgs,
    opts: &BenchOptions,
    (fio_path, job_file): (&Path, String),
    reserve: Option<&String>,
    (keep, db): (&Keep, &Path),
    member_devices: usize,
) -> bench::plan::BenchPlan {
    let mut plan = bench::plan::suite(opts, fio_path, job_file, member_devices);
    if let Some(r) = reserve {
        plan.steps.insert(0, r.clone());
    }
    if let Keep::Save = keep {
        plan.steps.push(format!(
            "save the run in the bench history {} (--no-history skips it)",
            escape_path(db)
        ));
    }
    if let Some(t) = &args.textfile {
        plan.steps.push(format!(
            "write its Prometheus metrics to {} (a temporary file, then rename)",
            escape_path(t)
        ));
    }
    plan
}

/// The history the run is saved in, opened (made, migrated) before
/// minutes of I/O: a database that cannot be written is said now, not
/// after the run.
fn open_history(keep: &Keep, db: &Path, out: &Output) -> Result<Option<History>> {
    Ok(match keep {
        Keep::Save => Some(History::open(db, true)?),
        Keep::No => None,
        Keep::NotRoot => {
            out.text_note(&format!(
                "this run is not saved in the history: {} is root's (--db PATH keeps your own)",
                escape_path(db)
            ));
            None
        }
    })
}

/// Saves the run in the history and notes where in the report; a run
/// that could not be saved is warned about, not failed.
fn save_in_history(history: &mut History, report: &mut BenchReport, out: &Output) {
    match history.save(report, &Machine::current()) {
        Ok(id) => {
            report.history = Some(HistoryEntry {
                db: history.path().to_path_buf(),
                id,
            })
        }
        Err(e) => out.warning_with_hint(
            &format!("the run was not saved in the history: {}", e.message()),
            e.hint().unwrap_or("--no-history runs without it"),
        ),
    }
}

/// The suite, with a progress bar; its heading and each figure printed
/// as they come.
fn measure_suite(
    opts: &BenchOptions,
    target: bench::Target,
    mut fio: RealFio,
    (out, stream): (&Output, &mut Stream),
) -> Result<BenchReport> {
    let fio_path = fio.path().to_path_buf();
    let mix = opts.mix.then_some(profile::MIX_READ_PERCENT);
    bench::measure(opts, target, &mut fio, &fio_path, out, &mut |e| {
        let text = stream.event(e, mix);
        if !text.is_empty() {
            out.text(&text);
        }
    })
}

/// The suite: every refusal before the run (output files, DIR, space, then
/// fio), the plan or the question, the run, then its report and files.
fn run_suite(
    args: &BenchArgs,
    dir: &Path,
    db: &Path,
    state_dir: Option<PathBuf>,
    out: &Output,
) -> Result<u8> {
    let mut opts = options(args, dir, out)?;
    let keep = keep_history(args, state_dir.is_some());
    opts.state_dir = state_dir;
    let buffers = bench::buffers(&opts);
    if args.show_jobs {
        // --save-jobs FILE with it: the same job file saved there too.
        return show_jobs(args, suite_job_file(&opts, &buffers), out);
    }
    let outputs = SuiteOutputs::prepare(args)?;
    let target = bench::prepare(&opts)?;
    let fio = RealFio::find()?;
    let fio_path = fio.path().to_path_buf();
    let reserve = reserve_step(&buffers);
    if args.dry_run {
        let member_devices = target.devices.len();
        drop(target);
        let job_file = suite_job_file(&opts, &buffers);
        let plan = suite_plan(
            args,
            &opts,
            (&fio_path, job_file),
            reserve.as_ref(),
            (&keep, db),
            member_devices,
        );
        out.report(&plan, bench::plan::BenchPlan::describe);
        return Ok(0);
    }
    if let Some(r) = &reserve {
        // A setting of the whole machine: asked first (--yes).
        if args.yes {
            out.text_note(&format!("bench will {r}"));
        } else {
            confirm(out, &format!("bench will {r}.\nContinue?"), false)?;
        }
    }
    out.before_change(match keep {
        Keep::Save => format!("btrfs-lab bench --history {}", escape_path(dir)),
        _ => NOTHING_KEPT.to_owned(),
    })?;
    let mut history = open_history(&keep, db, out)?;
    // JSON: one document, printed only on success: a failed or interrupted
    // run leaves stdout empty (docs/json.md), whatever it had begun. Text:
    // the heading and each figure as it is done, the rest at the end.
    let mut stream = Stream::new(out.paint, out.json);
    let mut report = measure_suite(&opts, target, fio, (out, &mut stream))?;
    if let Some(h) = history.as_mut() {
        save_in_history(h, &mut report, out);
    }
    outputs.write(&report)?;
    out.report(&report, |r| stream.rest(r));
    Ok(report.exit_code)
}

fn cells(r: Option<&TestResult>) -> [String; 5] {
    match r {
        None => ["-".into(), "".into(), "".into(), "".into(), "".into()],
        Some(r) if r.status == Status::Flagged => [
            "flagged".into(),
            String::new(),
            String::new(),
            String::new(),
            format!("claimed {}", mb_number(r.claimed_bytes_per_sec)),
        ],
        Some(r) => [
            r.bytes_per_sec.map_or("-".into(), mb_number),
            r.best_bytes_per_sec.map_or("-".into(), mb_number),
            r.iops.map_or("-".into(), |i| format!("{i:.0}")),
            r.lat_mean_us.map_or("-".into(), |l| format!("{l:.1}")),
            format!(
                "{}–{}",
                mb_number(r.bytes_per_sec_min),
                mb_number(r.bytes_per_sec_max)
            ),
        ],
    }
}

/// The completion-latency percentiles of one figure, µs (blank when
/// flagged or absent).
fn latency_cells(r: Option<&TestResult>) -> [String; 3] {
    let us = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    match r {
        None => ["-".into(), "".into(), "".into()],
        Some(r) if r.status == Status::Flagged => ["flagged".into(), "".into(), "".into()],
        Some(r) => [us(r.clat_p50_us), us(r.clat_p99_us), us(r.clat_p999_us)],
    }
}

/// The order the rate blocks come in: the order they run in.
const DIRECTIONS: [Direction; 3] = [Direction::Read, Direction::Write, Direction::Mix];

/// The CrystalDiskMark-like tables and the findings: the heading, a block
/// of rates per direction (what [`Stream`] prints figure by figure while
/// the suite runs), then [`render_tail`].
pub fn render(r: &BenchReport, p: Paint) -> String {
    let mut s = render_heading(&r.heading());
    for d in DIRECTIONS {
        for (i, x) in r.results.iter().filter(|x| x.direction == d).enumerate() {
            if i == 0 {
                s.push_str(&block_header(d, r.parameters.mix_read_percent, p));
            }
            s.push_str(&rate_row(x, p));
        }
    }
    s.push_str(&render_tail(r, p));
    s
}

/// Everything after the rate blocks: their footnote, the latencies, the
/// checks, the ceiling and heat, the members, the notes and the summary.
fn render_tail(r: &BenchReport, p: Paint) -> String {
    let mut names: Vec<&str> = Vec::new();
    for x in &r.results {
        if !names.contains(&x.name.as_str()) {
            names.push(&x.name);
        }
    }
    let mut s = rates_footnote(r);
    render_latencies(&mut s, r, p, &names);
    render_checks(&mut s, r, p);
    render_ceiling_and_thermal(&mut s, r);
    render_members(&mut s, r);
    render_notes_and_summary(&mut s, r);
    s
}

/// What was measured where, with what.
fn render_heading(h: &report::Heading<'_>) -> String {
    let profiles: Vec<String> = h
        .target
        .data_profiles
        .iter()
        .map(|x| format!("{x:?}").to_lowercase())
        .collect();
    let devs: Vec<&str> = h.target.devices.iter().map(|d| d.name.as_str()).collect();
    let mut s = wrap_hanging(
        &format!(
            "bench {}: {} {} on {}",
            escape_path(&h.target.dir),
            h.target.fs_type,
            profiles.join("+"),
            if devs.is_empty() {
                "?".to_owned()
            } else {
                devs.join(", ")
            }
        ),
        "",
        "  ",
    );
    s.push_str(&wrap(
        &format!(
            "{} test file {} ({}), {} × {} s, {} {}, kernel {}",
            h.parameters.profile,
            size(h.parameters.size_bytes),
            if h.nocow { "NOCOW" } else { "checksummed" },
            btrfs_lab::report::text::count(h.parameters.runs, "run", "runs"),
            h.parameters.duration_secs,
            h.system.fio_version,
            if h.parameters.huge_page_buffers {
                format!("{} (huge-page buffers)", h.parameters.ioengine)
            } else {
                h.parameters.ioengine.clone()
            },
            h.system.kernel
        ),
        "  ",
    ));
    s
}

/// The columns of a rate block: the test, MB/s, best, IOPS, mean latency,
/// the slowest and fastest run (under 80 columns).
fn rate_line(cells: [&str; 6]) -> String {
    let line = format!(
        "  {:<14}{:>10}{:>9}{:>9}{:>10}  {}",
        cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]
    );
    format!("{}\n", line.trim_end())
}

/// The head of one direction's block of rates, after a blank line.
fn block_header(d: Direction, mix_read_percent: Option<u32>, p: Paint) -> String {
    let name = match d {
        Direction::Mix => {
            let pct = mix_read_percent.unwrap_or(profile::MIX_READ_PERCENT);
            format!("mix {pct}/{}", 100 - pct)
        }
        _ => d.as_str().to_owned(),
    };
    let head = rate_line([&name, "MB/s", "best", "IOPS", "lat µs", "slowest–fastest"]);
    format!("\n{}", p.bold(&head))
}

/// One figure's row: its median, best, IOPS, mean latency and range, or
/// "flagged" and what fio claimed.
fn rate_row(x: &TestResult, p: Paint) -> String {
    let c = cells(Some(x));
    let first = if c[0] == "flagged" {
        p.bad(&format!("{:>10}", c[0]))
    } else {
        format!("{:>10}", c[0])
    };
    // The painted cell is padded before it is painted (escapes have no width).
    let line = format!(
        "  {:<14}{first}{:>9}{:>9}{:>10}  {}",
        x.name, c[1], c[2], c[3], c[4]
    );
    format!("{}\n", line.trim_end())
}

/// What the rate blocks' figures are.
fn rates_footnote(r: &BenchReport) -> String {
    let mut s = wrap(
        &format!(
            "(MB/s = 10^6 bytes/s; each figure is {}; best = the fastest run, as CrystalDiskMark reports the best of N; lat µs: the mean latency)",
            report::statistic(r.parameters.runs)
        ),
        "  ",
    );
    if let Some(pct) = r.parameters.mix_read_percent {
        s.push_str(&wrap(
            &format!(
                "(mix: reads and writes at once, {pct}% of the I/Os reads, as CrystalDiskMark's Mix; MB/s and IOPS of both together)"
            ),
            "  ",
        ));
    }
    s
}

/// The completion-latency percentiles of each test: reads and writes side
/// by side, the mixes in a block of their own.
fn render_latencies(s: &mut String, r: &BenchReport, p: Paint, names: &[&str]) {
    let find = |n: &str, d| r.results.iter().find(|x| x.name == n && x.direction == d);
    let paint = |c: &str| {
        if c == "flagged" {
            p.bad(&format!("{c:>10}"))
        } else {
            format!("{c:>10}")
        }
    };
    let latency_header = format!(
        "\n  {:<14}{:>10}{:>10}{:>10}  {:>10}{:>10}{:>10}\n",
        "clat µs", "read p50", "p99", "p99.9", "write p50", "p99", "p99.9"
    );
    s.push_str(&p.bold(&latency_header));
    for n in names {
        let rd = latency_cells(find(n, Direction::Read));
        let wr = latency_cells(find(n, Direction::Write));
        let row = format!(
            "  {:<14}{}{:>10}{:>10}  {}{:>10}{:>10}",
            n,
            paint(&rd[0]),
            rd[1],
            rd[2],
            paint(&wr[0]),
            wr[1],
            wr[2]
        );
        s.push_str(row.trim_end());
        s.push('\n');
    }
    if r.results.iter().any(|x| x.direction == Direction::Mix) {
        let header = format!(
            "\n  {:<14}{:>10}{:>10}{:>10}\n",
            "clat µs", "mix p50", "p99", "p99.9"
        );
        s.push_str(&p.bold(&header));
        for n in names {
            let Some(m) = find(n, Direction::Mix) else {
                continue;
            };
            let l = latency_cells(Some(m));
            let row = format!("  {:<14}{}{:>10}{:>10}", n, paint(&l[0]), l[1], l[2]);
            s.push_str(row.trim_end());
            s.push('\n');
        }
    }
    s.push_str(&wrap(
        &format!(
            "(fio's completion latency percentiles, each {})",
            report::statistic(r.parameters.runs)
        ),
        "  ",
    ));
}

/// The text of a suite run as it runs: the heading once the test file is
/// made, then each figure's row as its runs are done, under its
/// direction's header ([`render`]'s blocks, line for line); at the end
/// [`Stream::rest`]. Nothing with `--json` (the report is one document).
struct Stream {
    paint: Paint,
    /// Text goes out before the report (not with --json).
    on: bool,
    /// Rows printed, as printed.
    shown: Vec<(String, Direction, String)>,
    /// The direction of the block being printed.
    block: Option<Direction>,
    /// The heading is printed.
    begun: bool,
}

impl Stream {
    fn new(paint: Paint, json: bool) -> Self {
        Self {
            paint,
            on: !json,
            shown: Vec::new(),
            block: None,
            begun: false,
        }
    }

    /// The text to print now for `e` (empty: nothing).
    fn event(&mut self, e: bench::SuiteEvent<'_>, mix_read_percent: Option<u32>) -> String {
        if !self.on {
            return String::new();
        }
        match e {
            bench::SuiteEvent::Begun(h) => {
                self.begun = true;
                render_heading(&h)
            }
            bench::SuiteEvent::Figure(x) => {
                let mut text = String::new();
                if self.block != Some(x.direction) {
                    self.block = Some(x.direction);
                    text.push_str(&block_header(x.direction, mix_read_percent, self.paint));
                }
                let row = rate_row(x, self.paint);
                text.push_str(&row);
                self.shown.push((x.name.clone(), x.direction, row));
                text
            }
            bench::SuiteEvent::Step(_) => String::new(),
        }
    }

    /// What follows the rows printed: the figures the checks at the end
    /// changed (the test file's layout after every write), then
    /// [`render_tail`]. The whole [`render`] when nothing was printed.
    fn rest(&self, r: &BenchReport) -> String {
        let p = self.paint;
        if !self.on || !self.begun {
            return render(r, p);
        }
        let mut changed = String::new();
        for x in &r.results {
            let row = rate_row(x, p);
            let same = self
                .shown
                .iter()
                .any(|(n, d, shown)| *n == x.name && *d == x.direction && *shown == row);
            if !same {
                changed.push_str(&format!("  {} {}\n", x.name, x.direction.as_str()));
                changed.push_str(&row);
            }
        }
        let mut s = String::new();
        if !changed.is_empty() {
            s.push('\n');
            s.push_str(&wrap(
                "changed by the checks at the end of the run (the test file as the writes left it):",
                "  ",
            ));
            s.push_str(&changed);
        }
        s.push_str(&render_tail(r, p));
        s
    }
}

/// What the checks found, figure by figure.
fn render_checks(s: &mut String, r: &BenchReport, p: Paint) {
    let mut findings = String::new();
    for x in &r.results {
        for c in &x.checks {
            let tag = if is_flag(c.severity) {
                p.bad("flagged")
            } else {
                p.dim("note")
            };
            let code = c.code.short_name();
            findings.push_str(&format!(
                "  {} {} {tag} [{code}]\n",
                x.name,
                x.direction.as_str()
            ));
            findings.push_str(&wrap(&c.title, "      "));
        }
    }
    if !findings.is_empty() {
        s.push_str("\nchecks\n");
        s.push_str(&findings);
    }
}

/// The PCIe ceiling each figure is judged against, and the drives' heat.
fn render_ceiling_and_thermal(s: &mut String, r: &BenchReport) {
    if let Some(c) = &r.ceiling
        && let Some(one) = c.one_reader_bytes_per_sec
    {
        s.push_str(&format!(
            "\nceiling  {} MB/s one reader (PCIe links, encoded)\n",
            mb_number(one)
        ));
        for x in r.results.iter().filter(|x| x.ceiling_fraction.is_some()) {
            s.push_str(&format!(
                "  {} {}: {:.0}% of it\n",
                x.name,
                x.direction.as_str(),
                100.0 * x.ceiling_fraction.unwrap_or(0.0)
            ));
        }
    }
    for t in &r.thermal {
        match &t.error {
            Some(e) => s.push_str(&format!("thermal  {}: {e}\n", t.controller)),
            None => s.push_str(&format!(
                "thermal  {}: {}→{} °C, throttled {} s light, {} s heavy\n",
                t.controller,
                t.celsius_before.map_or("?".into(), |c| c.to_string()),
                t.celsius_after.map_or("?".into(), |c| c.to_string()),
                t.tmt1_seconds,
                t.tmt2_seconds
            )),
        }
    }
}

/// `--members`: each member alone and all at once.
fn render_members(s: &mut String, r: &BenchReport) {
    if let Some(m) = &r.members_scaling {
        s.push_str("\nmembers (O_DIRECT sequential reads, read-only)\n");
        for (a, t) in m.alone.iter().zip(m.together.iter()) {
            s.push_str(&format!(
                "  {:<16} alone {:>10} MB/s  together {:>10} MB/s\n",
                a.device,
                mb_number(a.bytes_per_sec),
                mb_number(t.bytes_per_sec)
            ));
        }
        s.push_str(&wrap(
            &format!(
                "sum {} MB/s, all at once {} MB/s, slowest × {} = {} MB/s{}",
                mb_number(m.sum_alone_bytes_per_sec),
                mb_number(m.together_bytes_per_sec),
                m.alone.len(),
                mb_number(m.slowest_times_n_bytes_per_sec),
                m.array_bytes_per_sec
                    .map_or(String::new(), |a| format!(", array {} MB/s", mb_number(a)))
            ),
            "  ",
        ));
        s.push_str(&wrap(&m.summary, "  "));
    }
}

/// The notes, the summary sentence and where the run was saved.
fn render_notes_and_summary(s: &mut String, r: &BenchReport) {
    if !r.notes.is_empty() {
        s.push('\n');
        for n in &r.notes {
            s.push_str(&wrap(&format!("note: {n}"), "  "));
        }
    }
    s.push('\n');
    s.push_str(&wrap(&r.summary, ""));
    if let Some(h) = &r.history {
        s.push_str(&wrap(
            &format!(
                "saved in the bench history as #{} (bench --history DIR: each test over the runs)",
                h.id
            ),
            "",
        ));
    }
}

/// Whether a suite run is saved in the history.
enum Keep {
    Save,
    No,
    /// Not root, and the default database is root's: said, not saved.
    NotRoot,
}

fn keep_history(args: &BenchArgs, state_dir_given: bool) -> Keep {
    if args.no_history {
        Keep::No
    } else if args.db.is_some() || state_dir_given || btrfs_lab::sys::is_root() {
        Keep::Save
    } else {
        Keep::NotRoot
    }
}

/// `bench --history [DIR]`.
fn run_history(args: &BenchArgs, db: &Path, out: &Output) -> Result<u8> {
    let h = History::open(db, false)?;
    let uuid = match &args.dir {
        Some(dir) => Some(bench::filesystem_uuid(dir)?),
        None => None,
    };
    let runs = h.runs(uuid.as_deref())?;
    let r = history::trend(db, args.dir.as_deref(), &runs);
    out.report(&r, render_history);
    Ok(0)
}

/// A `--compare` argument: a history id (`12`, `#12`) or a saved file.
fn history_id(arg: &str) -> Option<i64> {
    let digits = arg.strip_prefix('#').unwrap_or(arg);
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// `bench --compare RUN RUN...`.
fn run_compare(list: &[String], db: &Path, out: &Output) -> Result<u8> {
    let mut h: Option<History> = None;
    let mut inputs = Vec::with_capacity(list.len());
    for arg in list {
        match history_id(arg) {
            Some(id) => {
                if h.is_none() {
                    h = Some(History::open(db, false)?);
                }
                inputs.push(h.as_ref().expect("opened above").input(id)?);
            }
            None => inputs.push(compare::load_input(Path::new(arg))?),
        }
    }
    let c = compare::compare_many(&inputs);
    out.report(&c, render_compare);
    Ok(0)
}

/// The text of `bench --history`: per filesystem its runs, then each test
/// over them with its ratio to the run before and, beyond the noise, what
/// changed in the set-up.
pub fn render_history(r: &HistoryReport) -> String {
    let mut s = format!(
        "bench history  {}
",
        escape_path(&r.db)
    );
    for fs in &r.filesystems {
        s.push('\n');
        s.push_str(&wrap_hanging(
            &format!(
                "{} on {} ({})",
                fs.fs_uuid
                    .as_deref()
                    .map_or("a filesystem".to_owned(), |u| format!("filesystem {u}")),
                escape_control(&fs.mount_point),
                escape_control(&fs.hostname)
            ),
            "",
            "  ",
        ));
        for run in &fs.runs {
            let time = run.time.replace('T', " ");
            let lead = format!("  #{:<5}{}  ", run.id, time.trim_end_matches('Z'));
            match &run.setup {
                // The members on a line of their own: a wide array's list
                // is longer than the rest.
                Some(x) => {
                    s.push_str(&format!(
                        "{lead}{}  {}  {}\n",
                        escape_control(&x.kernel),
                        x.data_profiles.join("+"),
                        escape_control(&x.profile)
                    ));
                    s.push_str(&wrap(
                        &format!("on {}", escape_control(&x.members.join(", "))),
                        "         ",
                    ));
                }
                None => s.push_str(&format!("{lead}(a report this btrfs-lab cannot read)\n")),
            }
            for c in &run.changes {
                s.push_str(&wrap_hanging(
                    &escape_control(c),
                    "         changed: ",
                    "           ",
                ));
            }
        }
        for t in &fs.tests {
            s.push_str(&format!(
                "
  {} {}
",
                escape_control(&t.test),
                t.direction.as_str()
            ));
            for p in &t.points {
                let fig = match (p.status, p.bytes_per_sec) {
                    (Status::Ok, Some(b)) => format!("{:>10} MB/s", mb_number(b)),
                    _ => format!("{:>15}", "flagged"),
                };
                let spread = p
                    .spread
                    .map_or(String::new(), |x| format!("  spread {:.0}%", x * 100.0));
                let line = format!("    #{:<5}{fig}{spread}", p.run_id);
                match &p.change {
                    Some(c) if c.beyond_noise => {
                        let why = if c.setup_changes.is_empty() {
                            "nothing in the set-up changed".to_owned()
                        } else {
                            c.setup_changes.join("; ")
                        };
                        // Why on the lines after the figure, filled.
                        s.push_str(&format!(
                            "{line}  ×{:.2} beyond the noise ({:.0}%):\n",
                            c.ratio,
                            c.noise * 100.0
                        ));
                        s.push_str(&wrap(&escape_control(&why), "          "));
                    }
                    Some(c) => s.push_str(&format!("{line}  ×{:.2}\n", c.ratio)),
                    None => s.push_str(&format!("{line}\n")),
                }
            }
        }
    }
    s.push('\n');
    s.push_str(&wrap(&r.summary, ""));
    s
}

fn render_compare(c: &Comparison) -> String {
    let mut s = String::from("bench compare");
    for (i, r) in c.reports.iter().enumerate() {
        s.push_str(&format!(
            "{}#{} = {}{}\n",
            if i == 0 { "  " } else { "               " },
            i + 1,
            escape_control(&r.name),
            r.time
                .as_deref()
                .map_or(String::new(), |t| format!("  ({})", escape_control(t)))
        ));
    }
    for (i, r) in c.reports.iter().enumerate().skip(1) {
        for d in &r.changes {
            s.push_str(&wrap_hanging(
                &escape_control(d),
                &format!("  #{} vs #1: ", i + 1),
                "      ",
            ));
        }
    }
    // #1 and as many other runs as fit the width beside it (20 columns for
    // the test, 12 for #1, 19 for each other run); the next block repeats
    // the test and #1.
    let others: Vec<usize> = (1..c.reports.len()).collect();
    let fit = (btrfs_lab::report::text::width().saturating_sub(2 + 20 + 12) / 19).max(1);
    if others.is_empty() {
        s.push_str(&compare_table(c, &[0]));
    }
    for block in others.chunks(fit) {
        let cols: Vec<usize> = std::iter::once(0).chain(block.iter().copied()).collect();
        s.push_str(&compare_table(c, &cols));
    }
    if c.reports.len() > 1 {
        s.push('\n');
        s.push_str(&wrap(
            &format!(
                "×: to #1; ! beyond the noise of both runs (their rounds do not overlap and differ by more than their spread, at least {:.0}%)",
                c.min_noise * 100.0
            ),
            "  ",
        ));
    }
    s
}

/// The comparison's table with the runs `cols` (indexes into the reports;
/// `0`, the reference, first): a blank line, the header, a row per test.
fn compare_table(c: &Comparison, cols: &[usize]) -> String {
    let mut s = format!("\n  {:<20}", "test");
    for &i in cols {
        s.push_str(&format!(
            "{:>12}{}",
            format!("#{} MB/s", i + 1),
            if i == 0 { "" } else { "       " }
        ));
    }
    s.push('\n');
    for r in &c.rows {
        s.push_str(&format!(
            "  {:<20}",
            format!("{} {}", escape_control(&r.name), r.direction.as_str())
        ));
        for &i in cols {
            let Some(f) = r.figures.get(i) else { continue };
            let value = f
                .bytes_per_sec
                .map_or_else(|| f.note.clone().unwrap_or_else(|| "-".into()), mb_number);
            let ratio = match (f.ratio, f.beyond_noise) {
                (Some(x), Some(true)) => format!(" ×{x:.2}!"),
                (Some(x), _) => format!(" ×{x:.2} "),
                (None, _) if i > 0 => "       ".into(),
                (None, _) => String::new(),
            };
            s.push_str(&format!("{:>w$}{ratio}", escape_control(&value), w = 12));
        }
        s.push('\n');
    }
    // No trailing blanks (a ratio's column is kept for alignment only).
    s.split('\n')
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `--profile NAME`: kept as given (the bench library says what an unknown
/// name is); its names offered to shell completion.
fn bench_profile(s: &str) -> std::result::Result<String, String> {
    Ok(s.to_owned())
}

use super::page::{NOT_WRITTEN, row};
use btrfs_lab::model::exit as status;

/// What the manual pages of this command add to clap's help: real command
/// lines and the pages to read next (read by `man`).
pub const PAGES: &[super::page::Declared] = &[super::page::Declared {
    words: &["bench"],
    documents: &[
        "bench",
        "bench-compare",
        "bench-history",
        "bench-sustained",
        "bench-metadata",
        "bench-plan",
        "bench-profiles-plan",
        "bench-profiles",
    ],
    dry_run: true,
    output: super::page::Shape::Document,
    exits: &[
        row(
            status::OK,
            "every figure checked out against the devices, the page cache and the file's \
             extents (--sustained: whatever shape the series shows, once it adds up to \
             the bytes written; --compare: the files are bench reports).",
        ),
        row(
            status::FLAGGED,
            "at least one figure is flagged (results[].status = flagged, the reasons in \
             checks; --sustained: the series does not add up to the bytes written or the \
             members' counters, series_check.reason): it is not a result.",
        ),
        row(
            status::ERROR,
            "refused or failed (tmpfs, read-only, not enough free space for --file-size + \
             margin, fio missing or failing); the test directory is removed.",
        ),
        row(
            status::USAGE,
            "bad command line (--sustained SIZE under 256 MiB, --fill outside 1-95, ...).",
        ),
        NOT_WRITTEN,
        row(
            status::INTERRUPTED,
            "interrupted by SIGINT, SIGTERM or SIGHUP: fio is killed and the test directory \
             removed.",
        ),
    ],
    examples: &[
        (
            "The suite on a directory.",
            "btrfs-lab bench --file-size 2G /mnt/data",
        ),
        (
            "The figures for node_exporter's textfile collector too.",
            "btrfs-lab bench --textfile /var/lib/prometheus/node-exporter/btrfs-lab-bench.prom /mnt/data",
        ),
        (
            "Sustained writes until the drive's cache is full.",
            "btrfs-lab bench --sustained 4G --yes /mnt/data",
        ),
        (
            "Metadata operations.",
            "btrfs-lab bench --small-files --files 3000 --threads 2 /mnt/data",
        ),
        (
            "Each test's trend over the saved runs of this filesystem.",
            "btrfs-lab bench --history /mnt/data",
        ),
        (
            "Two saved runs and a saved file against the first.",
            "btrfs-lab bench --compare 12 15 before.json",
        ),
    ],
    see_also: &["fio(1)"],
}];

#[cfg(test)]
mod tests {
    use super::*;

    /// A result as `bench --json` writes it: `mb` MB/s per run, flagged
    /// (fio claimed twice what the devices moved) when `flag`.
    fn figure(name: &str, direction: &str, mb: &[f64], flag: bool) -> serde_json::Value {
        let (pattern, block, qd, threads) = match name {
            "SEQ1M Q8T1" => ("seq", 1 << 20, 8, 1),
            "SEQ128K Q32T1" => ("seq", 128 << 10, 32, 1),
            _ => ("rnd", 4096, 32, 16),
        };
        let med = btrfs_lab::bench::analysis::median(mb).unwrap() * 1e6;
        let ok = !flag;
        let runs: Vec<serde_json::Value> = mb
            .iter()
            .enumerate()
            .map(|(i, m)| {
                serde_json::json!({"run": i + 1, "claimed_bytes": (m * 1e6) as u64, "seconds": 1.0,
                    "bytes_per_sec": m * 1e6, "iops": m * 1e6 / 4096.0, "lat_mean_us": 123_456.7,
                    "clat_p50_us": 120_000.0, "clat_p99_us": 999_999.9, "clat_p999_us": 1_999_999.9,
                    "cores_per_thread": 0.1, "cpu_seconds_per_gib": 0.2,
                    "device_read_bytes": null, "device_write_bytes": null,
                    "resident_before_bytes": null, "dirtied_bytes": null, "checks": []})
            })
            .collect();
        serde_json::json!({
            "test": {"pattern": pattern, "block_bytes": block, "queue_depth": qd, "threads": threads},
            "direction": direction, "name": name, "status": if ok { "ok" } else { "flagged" },
            "bytes_per_sec": ok.then_some(med), "iops": ok.then_some(2_500_000.0),
            "lat_mean_us": ok.then_some(123_456.7),
            "best_bytes_per_sec": ok.then_some(mb.iter().copied().fold(0.0, f64::max) * 1e6),
            "best_iops": ok.then_some(2_600_000.0),
            "clat_p50_us": ok.then_some(120_000.0), "clat_p99_us": ok.then_some(999_999.9),
            "clat_p999_us": ok.then_some(1_999_999.9),
            "bytes_per_sec_min": mb.iter().copied().fold(f64::INFINITY, f64::min) * 1e6,
            "bytes_per_sec_max": mb.iter().copied().fold(0.0, f64::max) * 1e6,
            "claimed_bytes_per_sec": med,
            "cpu_seconds_per_gib": ok.then_some(0.2), "cores_per_thread": 0.1,
            "ceiling_fraction": null,
            "checks": if flag {
                serde_json::json!([{"code": "device_mismatch", "severity": "flag",
                    "message": "fio claims 2.00GiB read but the member devices read only 1.00GiB (50%): the rest did not come from the drives"}])
            } else {
                serde_json::json!([])
            },
            "runs": runs
        })
    }

    /// A report of the nvme profile's widest figures on an array of eight
    /// NVMe drives (26 GB/s), a flagged write and the mixes.
    fn report(runs: u32) -> BenchReport {
        let mut results = Vec::new();
        for d in ["read", "write", "mix"] {
            for (name, mb) in [
                ("SEQ1M Q8T1", [26_543.2, 26_001.9, 27_999.9]),
                ("SEQ128K Q32T1", [12_345.6, 13_000.1, 12_999.0]),
                ("RND4K Q32T16", [10_240.5, 10_999.9, 10_001.2]),
            ] {
                let flag = d == "write" && name == "SEQ128K Q32T1";
                results.push(figure(name, d, &mb[..runs as usize], flag));
            }
        }
        let json = serde_json::json!({
            "report_version": 1, "exit_code": 3, "summary": "best read: SEQ1M Q8T1 at 26543.2 MB/s; 1 of 9 figures flagged (device_mismatch)",
            "system": {"kernel": "6.18.44-fc-v1300-generic", "hostname": "h", "cpus": 64,
                "fio_version": "fio-3.33", "fio_path": "/usr/bin/fio"},
            "target": {"dir": "/srv/a-rather-long-directory-name/of/the/array", "mount_point": "/srv",
                "fs_type": "btrfs", "uuid": null, "source": "/dev/nvme0n1", "mount_options": [],
                "data_profiles": ["raid0"],
                "devices": (0..8).map(|i| serde_json::json!({"path": format!("/dev/nvme{i}n1"),
                    "name": format!("nvme{i}n1"), "major": 259, "minor": i})).collect::<Vec<_>>(),
                "devices_missing": [], "compression_option": null},
            "parameters": {"profile": "nvme", "tests": [], "size_bytes": 1u64 << 30, "runs": runs,
                "duration_secs": 5, "interval_secs": 0, "cow": false, "ioengine": "libaio",
                "mix_read_percent": 70, "huge_page_buffers": true},
            "test_file": {"path": "/x", "size_bytes": 1u64 << 30, "nocow": true, "fill_seconds": 0.0,
                "fill_device_write_bytes": null, "layout_after_fill": null, "layout_at_end": null,
                "removed": true},
            "results": results, "ceiling": null, "thermal": [], "members_scaling": null,
            "notes": ["the test file is NOCOW (no data checksums), so O_DIRECT is direct"],
            "job_file": ""
        });
        serde_json::from_value(json).unwrap()
    }

    fn plain() -> Paint {
        Output::new(false, super::super::output::ColorChoice::Never).paint
    }

    /// Issue 52 item 3: the table was 128 columns. Every line of the text
    /// fits 80, with 26 GB/s, 2.5 M IOPS, 2 s percentiles, a flagged row
    /// and the mixes.
    #[test]
    fn every_line_of_the_suite_fits_80_columns() {
        btrfs_lab::report::text::set_width(80);
        let text = render(&report(3), plain());
        for l in text.lines() {
            assert!(
                l.chars().count() <= 80,
                "{} columns: {l}",
                l.chars().count()
            );
        }
        // A block per direction, the figures in it.
        for head in ["  read ", "  write ", "  mix 70/30 "] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(head) && l.contains("slowest–fastest")),
                "{head} in {text}"
            );
        }
        assert!(
            text.contains(
                "  SEQ1M Q8T1       26543.2  27999.9  2500000  123456.7  26001.9–27999.9\n"
            ),
            "{text}"
        );
        let flagged = text
            .lines()
            .find(|l| l.starts_with("  SEQ128K Q32T1") && l.contains("flagged"))
            .unwrap();
        assert!(flagged.ends_with("  claimed 12999.0"), "{flagged}");
    }

    /// Issue 52: `--compare` of 4 or more runs was 91 columns and more.
    /// At 80 columns the runs go in blocks, each with the test and #1.
    #[test]
    fn a_comparison_of_many_runs_fits_80_columns() {
        btrfs_lab::report::text::set_width(80);
        let inputs: Vec<bench::compare::Input> = (1..=6)
            .map(|i| bench::compare::Input {
                name: format!("#{i}"),
                history_id: Some(i),
                time: Some("2026-12-07T18:00:00Z".into()),
                version: None,
                report: report(3),
            })
            .collect();
        let text = render_compare(&bench::compare::compare_many(&inputs));
        for l in text.lines() {
            assert!(
                l.chars().count() <= 80,
                "{} columns: {l}",
                l.chars().count()
            );
        }
        let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("  test ")).collect();
        assert_eq!(headers.len(), 3, "{text}");
        for h in &headers {
            assert!(h.contains("#1 MB/s"), "{h}");
        }
        for i in 2..=6 {
            assert_eq!(
                headers
                    .iter()
                    .filter(|h| h.contains(&format!("#{i} MB/s")))
                    .count(),
                1,
                "#{i} once: {text}"
            );
        }
        // Every block has a row per test.
        let rows = text
            .lines()
            .filter(|l| l.starts_with("  SEQ1M Q8T1 read"))
            .count();
        assert_eq!(rows, 3, "{text}");
    }

    /// Issue 52 item 9: "the middle run of 2 runs" was a mean.
    #[test]
    fn the_statistic_is_named() {
        btrfs_lab::report::text::set_width(80);
        let words = |t: String| t.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(words(render(&report(3), plain())).contains("each figure is the median of 3 runs"));
        let two = words(render(&report(2), plain()));
        assert!(two.contains("each figure is the mean of 2 runs"), "{two}");
        assert!(
            two.contains("percentiles, each the mean of 2 runs"),
            "{two}"
        );
        assert!(!two.contains("median of the runs"), "{two}");
    }

    /// What is printed as the figures come, then the rest, is the text of
    /// the whole report, line for line; with --json nothing comes before.
    #[test]
    fn the_figures_printed_as_they_come_are_the_report() {
        btrfs_lab::report::text::set_width(80);
        let r = report(3);
        let mut stream = Stream::new(plain(), false);
        let mix = r.parameters.mix_read_percent;
        let mut printed = stream.event(bench::SuiteEvent::Begun(r.heading()), mix);
        assert!(printed.starts_with("bench /srv/"), "{printed}");
        for x in &r.results {
            let now = stream.event(bench::SuiteEvent::Figure(x), mix);
            // Each figure's row as soon as it is done.
            assert!(now.ends_with(&rate_row(x, plain())), "{now}");
            printed.push_str(&now);
        }
        printed.push_str(&stream.rest(&r));
        assert_eq!(printed, render(&r, plain()));

        let mut json = Stream::new(plain(), true);
        assert!(
            json.event(bench::SuiteEvent::Begun(r.heading()), mix)
                .is_empty()
        );
        assert!(
            json.event(bench::SuiteEvent::Figure(&r.results[0]), mix)
                .is_empty()
        );
    }

    /// A figure the checks at the end flag (the file's layout after every
    /// write) is said again, flagged, before the rest.
    #[test]
    fn a_figure_the_end_changed_is_said_again() {
        btrfs_lab::report::text::set_width(80);
        let mut r = report(3);
        let mut stream = Stream::new(plain(), false);
        stream.event(bench::SuiteEvent::Begun(r.heading()), None);
        for x in &r.results {
            stream.event(bench::SuiteEvent::Figure(x), None);
        }
        // At the end, the first write is flagged after all.
        let w = r
            .results
            .iter()
            .position(|x| x.direction == Direction::Write)
            .unwrap();
        let flagged: TestResult =
            serde_json::from_value(figure("SEQ1M Q8T1", "write", &[1.0, 2.0, 3.0], true)).unwrap();
        r.results[w] = flagged;
        let rest = stream.rest(&r);
        let (changed, tail) = rest.split_once("(MB/s = 10^6").unwrap();
        assert!(
            changed.contains("changed by the checks at the end of the run"),
            "{rest}"
        );
        assert!(changed.contains("  SEQ1M Q8T1 write\n"), "{changed}");
        assert!(changed.contains("flagged"), "{changed}");
        assert_eq!(changed.matches("SEQ1M").count(), 2, "{changed}");
        assert!(tail.contains("checks"), "{tail}");
    }
}
