//! `bench`: a CrystalDiskMark-style suite on fio whose every figure is
//! checked against what the kernel saw.
//!
//! fio does the I/O (btrfs-lab writes its job files and reads its JSON);
//! around each run btrfs-lab reads what fio cannot know: the member
//! devices' sector counters, the test file's page-cache residency, the
//! page cache dirtied by writes, the file's extents (compression, never
//! written regions), the array's PCIe ceiling and the drives' thermal
//! counters. A figure that fails a check is flagged with the reason and
//! is not given as a result.

mod measure;

use std::fs::File;
use std::path::{Path, PathBuf};

use super::analysis::CheckContext;
use super::buffers::{self as buffer_pages, BufferCost, Unmeasured};
use super::jobs::{self, JobSettings};
use super::kit::{
    self, Progress, TEST_FILE, Target, WorkDir, check_stop, install_signals, open_target,
    set_dir_mode, sweep_stale,
};
use super::members;
use super::profile::{self, Direction, TestSpec};
use super::report::{self, BenchReport, FileLayout, Status, TestResult, is_flag};
use super::sensors::{self, Sensors as _};
use crate::error::{Error, ErrorKind, Result};
use crate::hooks::Switch;
use crate::model::finding::Code;
use crate::parse::size::format_iec;
use crate::report::rate::format_mb;
use crate::report::text::escape_path;
use crate::sys::block::loopdev::FileIdentity;
use crate::sys::fs::beneath::{TrustedDir, identity_of};
use crate::sys::fs::filesystem;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::measure::files;
use crate::sys::tools::fio::FioRunner;
#[cfg(doc)]
pub(crate) use measure::fill_incompressible;
use measure::{FillMode, Measured, SuiteConfig, analyse, run_suite};

/// Default test file size.
pub(crate) const DEFAULT_SIZE: u64 = 1 << 30;
/// Default runs per test.
pub const DEFAULT_RUNS: u32 = 5;
/// Default seconds per run.
pub const DEFAULT_DURATION: u64 = 5;
/// Smallest test file.
pub(crate) const MIN_SIZE: u64 = 16 << 20;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// DIR: the test directory is made under it.
    pub dir: PathBuf,
    /// `default`, `nvme` or `custom`.
    pub profile: String,
    /// The tests.
    pub tests: Vec<TestSpec>,
    /// Test file size.
    pub size: u64,
    /// Runs per test.
    pub runs: u32,
    /// Seconds per run.
    pub duration_secs: u64,
    /// Seconds between runs.
    pub interval_secs: u64,
    /// Keep data checksums on the test file (no NOCOW).
    pub cow: bool,
    /// Also read each member device alone and all at once.
    pub members: bool,
    /// Also run every test as a 70/30 read/write mix (after the writes).
    pub mix: bool,
    /// `--hugepages`: reserve the huge pages the sequential tests' buffers
    /// need when too few are free (asked first), give them back after.
    pub hugepages: bool,
    /// May mount debugfs (the per-device dirtied counter) and tracefs (the
    /// test file's own dirtied pages) in a private mount namespace while
    /// they are opened (root; the process returns to its own namespace).
    pub allow_private_debugfs: bool,
    /// Where /proc and /sys are read.
    pub sysroot: SysRoot,
    /// `--state-dir`: where the settings ledger records `vm.nr_hugepages`
    /// before `--hugepages` raises it (default: btrfs-lab's state directory).
    pub state_dir: Option<PathBuf>,
}

impl BenchOptions {
    /// Defaults for DIR.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            profile: "default".into(),
            tests: profile::DEFAULT_TESTS.to_vec(),
            size: DEFAULT_SIZE,
            runs: DEFAULT_RUNS,
            duration_secs: DEFAULT_DURATION,
            interval_secs: 0,
            cow: false,
            members: false,
            mix: false,
            hugepages: false,
            allow_private_debugfs: false,
            sysroot: SysRoot::host(),
            state_dir: None,
        }
    }

    /// The file size in use: whole MiB.
    pub fn size_bytes(&self) -> u64 {
        self.size / (1 << 20) * (1 << 20)
    }

    /// Checks the numbers.
    pub fn validate(&self) -> Result<()> {
        if self.size_bytes() < MIN_SIZE {
            return Err(Error::usage(format!(
                "--file-size {} is too small: use {} or more",
                format_iec(self.size),
                format_iec(MIN_SIZE)
            )));
        }
        if !(1..=100).contains(&self.runs) {
            return Err(Error::usage("--rounds must be between 1 and 100"));
        }
        if !(1..=3600).contains(&self.duration_secs) {
            return Err(Error::usage(
                "--duration must be between 1 and 3600 seconds",
            ));
        }
        if self.interval_secs > 3600 {
            return Err(Error::usage("--interval must be at most 3600 seconds"));
        }
        if self.tests.is_empty() {
            return Err(Error::usage("no tests to run"));
        }
        for t in &self.tests {
            if jobs::range_per_thread(t, self.size_bytes()) == 0 {
                return Err(Error::usage(format!(
                    "--file-size {} is too small for {t}: each of its {} threads needs at least one block of its own",
                    format_iec(self.size),
                    t.threads
                )));
            }
        }
        Ok(())
    }

    /// Free space DIR needs: the file, plus a margin (with --cow the
    /// writes may allocate the file's size again before the old extents
    /// are freed).
    pub(crate) fn needed_space(&self) -> u64 {
        let size = self.size_bytes();
        let margin = (size / 10).max(64 << 20);
        if self.cow {
            2 * size + margin
        } else {
            size + margin
        }
    }
}

/// How the sequential tests' I/O buffers are backed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Buffers {
    /// Huge pages (`iomem=mmaphuge`): the true ceiling of large I/O.
    Huge {
        /// Bytes of one.
        page_bytes: u64,
        /// How many the tests need at once.
        pages: u64,
        /// `--hugepages`: `vm.nr_hugepages` now and during the run, when
        /// more must be reserved.
        reserve: Option<(u64, u64)>,
    },
    /// Ordinary pages, and why.
    Ordinary {
        /// Why not huge pages (empty: no sequential test).
        why: String,
    },
}

/// Huge pages when enough are free, or reserved with `--hugepages`;
/// otherwise ordinary buffers and why.
pub fn buffers(opts: &BenchOptions) -> Buffers {
    let Some(hp) = crate::sys::kernel::hugepages::read(&opts.sysroot) else {
        return Buffers::Ordinary {
            why: "this kernel has no huge pages".into(),
        };
    };
    let pages = jobs::huge_pages_needed(&opts.tests, hp.page_bytes);
    if pages == 0 {
        return Buffers::Ordinary { why: String::new() };
    }
    // Pages another bench reserved for itself are not this one's.
    let available = if crate::sys::kernel::hugepages::reserved_by_another_run() {
        0
    } else {
        hp.available()
    };
    if available >= pages {
        return Buffers::Huge {
            page_bytes: hp.page_bytes,
            pages,
            reserve: None,
        };
    }
    if opts.hugepages {
        let now = opts
            .sysroot
            .read_attr(&opts.sysroot.proc("sys/vm/nr_hugepages"))
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(hp.total);
        return Buffers::Huge {
            page_bytes: hp.page_bytes,
            pages,
            reserve: Some((now, now + (pages - available))),
        };
    }
    Buffers::Ordinary {
        why: format!(
            "{available} huge page{} of {} free, {pages} needed",
            if available == 1 { "" } else { "s" },
            crate::parse::size::format_iec(hp.page_bytes)
        ),
    }
}

/// The note of a run whose sequential tests used ordinary buffers, with
/// what they cost here (or why that could not be measured).
fn ordinary_buffers_note(why: &str, cost: std::result::Result<&BufferCost, &Unmeasured>) -> String {
    let measured = match cost {
        Ok(c) => c.describe(),
        Err(e) => format!("what that costs here could not be measured: {e}"),
    };
    format!(
        "fio's I/O buffers for the sequential tests were ordinary 4 KiB pages ({why}): large sequential figures can be below the drives' ceiling; {measured}; --hugepages reserves the huge pages they need for the run and gives them back"
    )
}

/// Creates the test file `TEST_FILE` empty in the held work directory
/// (O_EXCL, no link followed, inheriting the directory's NOCOW), so fio
/// never creates or lays it out itself.
pub(crate) fn create_test_file(work: &WorkDir) -> Result<(File, FileIdentity)> {
    let f = work.dir().create_file(TEST_FILE, 0o600)?;
    let id = FileIdentity::of(&f)
        .map_err(|e| Error::from_io(&e, "cannot stat", &work.dir().join(TEST_FILE)))?;
    Ok((f, id))
}

/// Checks, after a fio run, that the test file in the work directory is
/// still the file bench made, at its size, and (after writes) that fio
/// wrote it: its mtime moved.
fn check_test_file(
    work: &TrustedDir,
    file: &File,
    expected: FileIdentity,
    size: u64,
    mtime_before: Option<(i64, i64)>,
) -> Result<()> {
    let path = work.join(TEST_FILE);
    let wrong = |why: &str| {
        Error::new(
            ErrorKind::State,
            format!(
                "{} {why}: the figures would not be of the test file; stopped",
                escape_path(&path)
            ),
        )
    };
    let st = work.stat(TEST_FILE)?.ok_or_else(|| wrong("is gone"))?;
    if identity_of(&st) != expected {
        return Err(wrong("was replaced while fio ran"));
    }
    let held = files::fstat(file, &path)?;
    if held.st_size as u64 != size {
        return Err(wrong(&format!(
            "has {} bytes instead of {size}",
            held.st_size
        )));
    }
    if let Some(before) = mtime_before
        && files::mtime(&held) == before
    {
        return Err(wrong("was not written by fio's write run"));
    }
    Ok(())
}

/// The test file's mtime (seconds, nanoseconds).
fn mtime_of(file: &File) -> Option<(i64, i64)> {
    files::fstat(file, Path::new(""))
        .ok()
        .map(|st| files::mtime(&st))
}

/// Checks DIR and everything the run needs before anything changes (see
/// [`open_target`]), and that the test fits.
pub fn prepare(opts: &BenchOptions) -> Result<Target> {
    opts.validate()?;
    let mut target = open_target(&opts.sysroot, &opts.dir, "bench writes a test file")?;
    let need = opts.needed_space();
    // A killed run's work directory holds its test file: swept before the
    // space is judged (and named), never counted against this run.
    if target.info.available_bytes < need {
        target.swept = sweep_stale(&target.held);
        if !target.swept.is_empty() {
            target.info = target.held.filesystem(&opts.sysroot)?;
        }
    }
    if target.info.available_bytes < need {
        let left: Vec<&String> = target
            .swept
            .iter()
            .filter(|n| !n.starts_with("removed "))
            .collect();
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "not enough free space in {}: the test needs {} ({} test file + margin), {} is free",
                escape_path(&target.info.dir),
                format_iec(need),
                format_iec(opts.size_bytes()),
                format_iec(target.info.available_bytes)
            ) + &left.iter().map(|n| format!("; {n}")).collect::<String>(),
        )
        .with_hint("free some space or use a smaller --file-size"));
    }
    Ok(target)
}

/// What a suite run says while it runs, before its report.
#[derive(Debug, Clone, Copy)]
pub enum SuiteEvent<'a> {
    /// The test file is made: what the report's heading will say.
    Begun(report::Heading<'a>),
    /// A step begins: the fill, a run, a member's read.
    Step(&'a Progress),
    /// One test in one direction has done all its runs: its figure, checked
    /// with what is known by then. The report's is checked again at the end
    /// with the test file's layout after every write (what the writes
    /// stored), which may flag it.
    Figure(&'a TestResult),
}

/// Runs the bench (see the module documentation) on the target
/// [`prepare`] returned, its step, run and ETA on the `ui`'s progress bar;
/// `watch` gets the heading and each figure as it is done (the bar is
/// taken down while it runs, so that it may print).
pub fn measure(
    opts: &BenchOptions,
    target: Target,
    fio: &mut dyn FioRunner,
    fio_path: &Path,
    ui: &dyn crate::ui::Ui,
    watch: &mut dyn FnMut(SuiteEvent<'_>),
) -> Result<BenchReport> {
    const TEMPLATE: &str = "bench {msg}";
    let mut bar = ui.progress(TEMPLATE);
    let result = run(opts, target, fio, fio_path, &mut |e| match e {
        SuiteEvent::Step(p) => bar.set_message(p.line()),
        other => {
            bar.finish();
            watch(other);
            bar = ui.progress(TEMPLATE);
        }
    });
    bar.finish();
    result
}

/// [`prepare`] returned. `on` gets the heading once the test file is made,
/// each step as it begins (the fill, each run) and each figure as its runs
/// are done.
pub fn run(
    opts: &BenchOptions,
    mut target: Target,
    fio: &mut dyn FioRunner,
    fio_path: &Path,
    on: &mut dyn FnMut(SuiteEvent<'_>),
) -> Result<BenchReport> {
    let started_at = crate::report::envelope::rfc3339_seconds(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    let mut sens = sensors::RealSensors::open(
        &opts.sysroot,
        &target.held,
        &target.info.mount,
        &target.devices,
        opts.allow_private_debugfs,
    )?;
    install_signals()?;
    check_stop()?;
    let ceiling = sensors::ceiling(
        &opts.sysroot,
        &target.devices,
        target.data_profiles.first().copied(),
    );
    let thermal_before = sensors::thermal_read(&opts.sysroot, &target.devices);

    // From here on the system changes: leftovers of killed runs go, and the
    // test directory is made.
    let mut notes = std::mem::take(&mut target.swept);
    notes.extend(sweep_stale(&target.held));
    let buffers = buffers(opts);
    // Given back when this drops: at the end, on an error, a panic or a
    // signal (the run then returns through here).
    let _reserved = reserve_huge_pages(opts, &buffers, &mut notes)?;
    let is_btrfs = target.is_btrfs;
    let (held, target) = target.into_held();
    let work = WorkDir::create(held)?;
    let (mut setup, file) = TestFileSetup::create(&work, opts, is_btrfs)?;
    if let Buffers::Huge { page_bytes, .. } = &buffers {
        setup.settings.huge_page_bytes = Some(*page_bytes);
    }
    let job_file = jobs::suite_job(&opts.tests, opts.mix, &setup.settings);
    let system = kit::system_info(fio, fio_path);
    let params = report::Parameters {
        huge_page_buffers: setup.settings.huge_page_bytes.is_some(),
        ..parameters(opts, setup.size)
    };
    on(SuiteEvent::Begun(report::Heading {
        target: &target,
        parameters: &params,
        nocow: setup.nocow,
        system: &system,
    }));
    let check_file = file
        .try_clone()
        .map_err(|e| Error::from_io(&e, "cannot open", &setup.path))?;
    sens.set_file(file, &setup.path, setup.size);
    let mtime = std::cell::Cell::new(mtime_of(&check_file));
    let verify = |d: Direction| {
        let before = d.writes().then(|| mtime.get()).flatten();
        let r = check_test_file(work.dir(), &check_file, setup.id, setup.size, before);
        mtime.set(mtime_of(&check_file));
        r
    };
    let cfg = setup.suite_config(opts, work.dir(), &verify);
    // What the checks know before the run; the layout after the fill is
    // added once it is made.
    let ctx = check_context(opts, &target, setup.size, ceiling.as_ref(), (None, None));
    let measured = run_suite(&cfg, fio, &mut sens, &ctx, on)?;
    let buffer_cost = buffer_cost(&buffers, &setup, work.dir(), &mut notes)?;
    let layout_at_end = sens.layout()?;
    let thermal_after = sensors::thermal_read(&opts.sysroot, &target.devices);
    let members_scaling = if opts.members {
        Some(members::scale(
            fio,
            work.dir(),
            &target.devices,
            &opts.sysroot,
            opts.duration_secs,
            &mut |p| on(SuiteEvent::Step(p)),
        )?)
    } else {
        None
    };
    let counter_note = sens.counter_note.take();
    if let Some(label) = sens.trace_label() {
        notes.push(format!(
            "page_cache_write judges each write run by the page cache the test file itself dirtied ({label}), not by a counter other writers move"
        ));
    }
    notes.append(&mut sens.trace_notes);
    drop(sens);
    drop(check_file);
    let removal_note = work.remove()?;
    let finished = Finished {
        measured,
        buffer_cost,
        layout_at_end,
        thermal: sensors::thermal_delta(thermal_before, thermal_after),
        members_scaling,
        counter_note,
        removal_note,
        ceiling,
        notes,
        job_file,
        started_at,
    };
    Ok(assemble_report(
        opts,
        is_btrfs,
        target,
        &setup,
        finished,
        (system, params),
    ))
}

/// What the checks know about the bench as a whole: the test file's size,
/// the members, the mount, the ceiling, and the file's layout after the
/// fill and after every write, once known.
fn check_context(
    opts: &BenchOptions,
    target: &report::TargetInfo,
    size_bytes: u64,
    ceiling: Option<&report::CeilingInfo>,
    (layout, layout_after_writes): (Option<FileLayout>, Option<FileLayout>),
) -> CheckContext {
    CheckContext {
        size_bytes,
        devices_known: !target.devices.is_empty() && target.devices_missing.is_empty(),
        layout,
        layout_after_writes,
        compression_option: target.compression_option.clone(),
        ceiling_one_reader: ceiling.and_then(|c| c.one_reader_bytes_per_sec),
        ceiling_many_readers: ceiling.and_then(|c| c.many_readers_bytes_per_sec),
        cow: opts.cow,
        write_factor: target
            .data_profiles
            .iter()
            .map(|p| f64::from(p.max_write_factor()))
            .fold(1.0, f64::max),
    }
}

/// `--hugepages`: raises `vm.nr_hugepages` by what the buffers still
/// need (noted); put back when the reservation drops.
fn reserve_huge_pages(
    opts: &BenchOptions,
    buffers: &Buffers,
    notes: &mut Vec<String>,
) -> Result<Option<crate::sys::kernel::hugepages::Reservation>> {
    let Buffers::Huge {
        pages,
        reserve: Some((now, _)),
        ..
    } = buffers
    else {
        return Ok(None);
    };
    let avail = crate::sys::kernel::hugepages::read(&opts.sysroot).map_or(0, |h| h.available());
    let ledger = crate::sys::kernel::settings::Ledger::of(opts.state_dir.as_deref());
    let r = crate::sys::kernel::hugepages::reserve(
        &opts.sysroot,
        &ledger,
        pages.saturating_sub(avail),
    )?;
    notes.push(format!(
        "--hugepages: vm.nr_hugepages was raised from {now} to {} for the run and put back to {now} at its end",
        r.during
    ));
    Ok(Some(r))
}

/// Ordinary buffers for lack of huge pages: what they cost here, measured
/// once on the test file just used (noted).
fn buffer_cost(
    buffers: &Buffers,
    setup: &TestFileSetup,
    work: &TrustedDir,
    notes: &mut Vec<String>,
) -> Result<Option<BufferCost>> {
    let Buffers::Ordinary { why } = buffers else {
        return Ok(None);
    };
    if why.is_empty() {
        return Ok(None);
    }
    let cost = if setup.fallocate_only || setup.buffered {
        Err("the test file was not written through O_DIRECT (test hook)".to_owned())
    } else {
        buffer_pages::measure(work, TEST_FILE, setup.id, setup.size)?
    };
    notes.push(ordinary_buffers_note(why, cost.as_ref()));
    Ok(cost.ok())
}

/// The test file of a suite run, made and sized in the work directory.
struct TestFileSetup {
    id: FileIdentity,
    path: PathBuf,
    nocow: bool,
    size: u64,
    fallocate_only: bool,
    buffered: bool,
    settings: JobSettings<'static>,
}

impl TestFileSetup {
    /// Sets the directory's COW mode, makes the test file and sizes it;
    /// returns it open.
    fn create(work: &WorkDir, opts: &BenchOptions, is_btrfs: bool) -> Result<(Self, File)> {
        set_dir_mode(work, opts.cow, is_btrfs)?;
        let path = work.dir().join(TEST_FILE);
        let (file, id) = create_test_file(work)?;
        let nocow = is_btrfs
            && filesystem::inode_flags_of(&file, &path)?
                .is_some_and(|f| f.intersects(crate::sys::kernel::ioctl::FS_NOCOW_FL));
        let size = opts.size_bytes();
        let fallocate_only = Switch::BenchFallocateOnly.is_on();
        size_test_file(&file, &path, size, fallocate_only)?;
        let buffered = Switch::BenchBuffered.is_on();
        let settings = JobSettings {
            file: TEST_FILE,
            size_bytes: size,
            duration_secs: opts.duration_secs,
            direct: !buffered,
            compress_percentage: Switch::BenchCompressible
                .value()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
                .min(99),
            huge_page_bytes: None,
        };
        let setup = Self {
            id,
            path,
            nocow,
            size,
            fallocate_only,
            buffered,
            settings,
        };
        Ok((setup, file))
    }

    /// What the suite runs with this file.
    fn suite_config<'a>(
        &self,
        opts: &'a BenchOptions,
        work_dir: &'a TrustedDir,
        verify: &'a dyn Fn(Direction) -> Result<()>,
    ) -> SuiteConfig<'a> {
        SuiteConfig {
            tests: &opts.tests,
            settings: self.settings.clone(),
            runs: opts.runs,
            interval_secs: opts.interval_secs,
            work_dir,
            test_file: self.id,
            verify,
            fill: if self.fallocate_only {
                FillMode::Skip
            } else if self.settings.compress_percentage > 0 {
                FillMode::Fio
            } else {
                FillMode::Own
            },
            evict: !self.buffered,
            scale_claimed: Switch::BenchScaleClaimed
                .value()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1.0),
            mix: opts.mix,
        }
    }
}

/// What a suite run measured and noted, once the test directory is gone.
struct Finished {
    measured: Measured,
    buffer_cost: Option<BufferCost>,
    layout_at_end: Option<FileLayout>,
    thermal: Vec<report::ThermalInfo>,
    members_scaling: Option<report::MemberScaling>,
    counter_note: Option<String>,
    removal_note: Option<String>,
    ceiling: Option<report::CeilingInfo>,
    notes: Vec<String>,
    job_file: String,
    started_at: String,
}

/// The honesty checks over what was measured, and the report (pure).
fn assemble_report(
    opts: &BenchOptions,
    is_btrfs: bool,
    target: report::TargetInfo,
    setup: &TestFileSetup,
    f: Finished,
    (system, parameters): (report::SystemInfo, report::Parameters),
) -> BenchReport {
    let ctx = check_context(
        opts,
        &target,
        setup.size,
        f.ceiling.as_ref(),
        (f.measured.layout_after_fill, f.layout_at_end),
    );
    let results = analyse(&f.measured, &ctx);
    let mut members_scaling = f.members_scaling;
    if let Some(m) = members_scaling.as_mut() {
        m.array_bytes_per_sec = best_sequential_read(&results);
    }
    let mut notes = f.notes;
    notes.extend(f.removal_note);
    notes.extend(run_notes(
        opts,
        is_btrfs,
        &target.devices,
        &target.devices_missing,
        f.counter_note,
        f.ceiling.as_ref(),
        &f.thermal,
    ));
    let flagged = results
        .iter()
        .filter(|r| r.status == Status::Flagged)
        .count();
    let summary = summary_sentence(&results, flagged);
    let exit_code = if flagged > 0 { report::EXIT_FLAGGED } else { 0 };
    BenchReport {
        report_version: report::REPORT_VERSION,
        exit_code,
        summary,
        started_at: Some(f.started_at),
        system,
        target,
        parameters,
        test_file: report::TestFileInfo {
            path: setup.path.clone(),
            size_bytes: setup.size,
            nocow: setup.nocow,
            fill_seconds: f.measured.fill_seconds,
            fill_device_write_bytes: f.measured.fill_device_write_bytes,
            layout_after_fill: f.measured.layout_after_fill,
            layout_at_end: f.layout_at_end,
            removed: true,
        },
        results,
        ceiling: f.ceiling,
        thermal: f.thermal,
        members_scaling,
        notes,
        job_file: f.job_file,
        history: None,
        buffer_cost: f.buffer_cost,
    }
}

/// What the suite was asked to run.
fn parameters(opts: &BenchOptions, size: u64) -> report::Parameters {
    report::Parameters {
        profile: opts.profile.clone(),
        tests: opts.tests.clone(),
        size_bytes: size,
        runs: opts.runs,
        duration_secs: opts.duration_secs,
        interval_secs: opts.interval_secs,
        cow: opts.cow,
        ioengine: jobs::IOENGINE.to_owned(),
        mix_read_percent: opts.mix.then_some(profile::MIX_READ_PERCENT),
        huge_page_buffers: false,
    }
}

/// Sizes the test file: full size but sparse, so that fio writes every
/// byte in the fill instead of laying the file out first; or, with the
/// test hook, allocated (never written).
fn size_test_file(
    file: &std::fs::File,
    path: &Path,
    size: u64,
    fallocate_only: bool,
) -> Result<()> {
    if !fallocate_only {
        return file
            .set_len(size)
            .map_err(|e| Error::from_io(&e, "cannot size", path));
    }
    files::fallocate(file, size, path)
}

/// The best sequential read of the suite (what --members compares each
/// member's share with).
fn best_sequential_read(results: &[TestResult]) -> Option<f64> {
    results
        .iter()
        .filter(|r| r.direction == Direction::Read && r.test.pattern == profile::Pattern::Seq)
        .filter_map(|r| r.bytes_per_sec)
        .fold(None, |acc: Option<f64>, x| {
            Some(acc.map_or(x, |a| a.max(x)))
        })
}

/// The report's notes about how the run was made and what it could not
/// check (pure: from what the run found).
fn run_notes(
    opts: &BenchOptions,
    is_btrfs: bool,
    devices: &[report::MemberDevice],
    devices_missing: &[String],
    counter_note: Option<String>,
    ceiling: Option<&report::CeilingInfo>,
    thermal: &[report::ThermalInfo],
) -> Vec<String> {
    let mut notes = Vec::new();
    if is_btrfs && !opts.cow {
        notes.push("the test file is NOCOW (no data checksums), so O_DIRECT is direct unless the data profile keeps copies (DUP, RAID1*: buffered on 6.18 to 7.2, bounced from 7.3); --cow measures the checksummed path instead".to_owned());
    }
    if opts.cow {
        notes.push("--cow: the test file has data checksums; btrfs writes O_DIRECT to it directly before 6.15, through the page cache from 6.15 to 7.2 (the dirtied-page check shows it) and through a bounce buffer from 7.3 (no page cache, a copy: slower, not flagged); `btrfs-lab probe-dio` says which this kernel does".to_owned());
    }
    if !devices_missing.is_empty() {
        notes.push(format!(
            "/proc/diskstats does not show {}: the device cross-check could not run",
            devices_missing.join(", ")
        ));
    } else if devices.is_empty() {
        notes.push(
            "no block device counts this filesystem's I/O: the device cross-check could not run"
                .to_owned(),
        );
    }
    if let Some(why) = counter_note {
        notes.push(format!("dirtied pages: {why}"));
    }
    if let Some(c) = ceiling
        && c.one_reader_bytes_per_sec.is_none()
        && !c.without_link_info.is_empty()
    {
        notes.push(format!(
            "no PCIe link information for {}: no ceiling to check the figures against",
            c.without_link_info.join(", ")
        ));
    }
    for t in thermal {
        if t.tmt1_seconds + t.tmt2_seconds > 0 || t.transitions > 0 {
            notes.push(format!(
                "{} throttled during the bench: {} s light, {} s heavy ({} transitions); its figures are below what it gives cool",
                t.controller, t.tmt1_seconds, t.tmt2_seconds, t.transitions
            ));
        }
    }
    notes
}

fn summary_sentence(results: &[TestResult], flagged: usize) -> String {
    let best = results
        .iter()
        .filter(|r| r.direction == Direction::Read)
        .filter_map(|r| r.bytes_per_sec.map(|b| (r, b)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let mut s = match best {
        Some((r, b)) => format!("best read: {} at {}", r.name, format_mb(b)),
        None => "no read figure checked out".to_owned(),
    };
    if flagged > 0 {
        let codes: Vec<String> = {
            let mut c: Vec<Code> = results
                .iter()
                .flat_map(|r| r.checks.iter())
                .filter(|c| is_flag(c.severity))
                .map(|c| c.code)
                .collect();
            c.sort();
            c.dedup();
            c.iter().map(|c| c.short_name().to_owned()).collect()
        };
        s.push_str(&format!(
            "; {flagged} of {} figures flagged ({})",
            results.len(),
            codes.join(", ")
        ));
    } else {
        s.push_str(&format!(
            "; all {} figures checked against the devices",
            results.len()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        let ok = BenchOptions::new("/x");
        assert!(ok.validate().is_ok());
        assert_eq!(ok.needed_space(), (1 << 30) + (1 << 30) / 10);
        for bad in [
            BenchOptions {
                size: 1 << 20,
                ..ok.clone()
            },
            BenchOptions {
                runs: 0,
                ..ok.clone()
            },
            BenchOptions {
                duration_secs: 0,
                ..ok.clone()
            },
            BenchOptions {
                tests: vec![],
                ..ok.clone()
            },
            BenchOptions {
                size: 16 << 20,
                tests: vec![TestSpec::parse("SEQ1M-Q1T32").unwrap()],
                ..ok.clone()
            },
        ] {
            assert_eq!(bad.validate().unwrap_err().exit_code(), 2, "{bad:?}");
        }
    }
}
