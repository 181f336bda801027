//! `probe-dio`: are O_DIRECT writes in a directory really direct?
//!
//! Writes test files with O_DIRECT and measures how much page-cache data the
//! writes dirtied. On btrfs a control file in a fresh NOCOW directory of the
//! same filesystem is written the same way, interleaved, so a checksum-forced
//! fallback, a profile-forced one and background noise can be told apart.
//! The verdict comes from measurements, never from the kernel version.

pub mod expect;
pub mod pid;
pub mod report;
pub mod scratch;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::hooks::{Pause, Switch};
use crate::parse::size::format_iec;
use crate::sys::fs::beneath::HeldDir;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::direct_io::{AlignedBuffer, write_all_at};
use crate::sys::proc::counters::{self, CounterChoice, DirtyCounter};
use crate::sys::proc::tracefs::{self, FileCounts, FolioTrace, Watch};
use crate::sys::{fs::filesystem, kernel::signals, kernel_release};

use scratch::Scratch;

pub use report::{
    CounterInfo, CrossCheck, EvidenceInfo, EvidenceKind, FsContext, Parameters, ProbeReport,
};
pub use verdict::{Analysis, Round, Verdict};

/// Default bytes written per file per round when only a counter measures:
/// large enough that metadata is small next to it (what doctor's deep probe
/// writes). Stray writers are not: they dirty in proportion to the time a
/// write takes, so a bigger file does not drown them, and the idle windows
/// measure them instead (64 MiB and 256 MiB were never wrong and as often
/// inconclusive, idle and under a writer on the same filesystem, with the
/// per-filesystem and the machine-wide counter).
pub(crate) const DEFAULT_SIZE: u64 = 64 << 20;
/// Default bytes per file per round when the per-file tracepoints measure:
/// they see only the probe's own files, written by its own thread, so
/// other writers cannot disturb the count and a small file is exact (4 MiB
/// is 1024 pages, each counted: right in every measured run, idle and
/// under a buffered writer on the same filesystem; issue 28 and
/// `scripts/bench-probe-dio.sh`).
pub(crate) const DEFAULT_SIZE_TRACED: u64 = 4 << 20;
/// Default size of each O_DIRECT write.
pub(crate) const DEFAULT_BLOCK_SIZE: u64 = 1 << 20;
/// Default number of rounds.
pub const DEFAULT_ROUNDS: u32 = 3;
/// Page-size alignment covers every logical block size in use.
const ALIGN: usize = 4096;
/// Free space kept beyond the test file.
const SPACE_MARGIN: u64 = 16 << 20;

/// What to probe and how.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Directory to test.
    pub path: PathBuf,
    /// Bytes per file per round; `None`: [`DEFAULT_SIZE_TRACED`] when the
    /// per-file tracepoints can be used, else [`DEFAULT_SIZE`].
    pub size_bytes: Option<u64>,
    /// Bytes per write call.
    pub block_size: u64,
    /// Rounds.
    pub rounds: u32,
    /// Counter choice.
    pub counter: CounterChoice,
    /// May mount debugfs and tracefs in a private mount namespace of this
    /// process (only before it starts threads).
    pub allow_private_mounts: bool,
    /// Where /sys and /proc are read.
    pub sysroot: SysRoot,
}

impl ProbeOptions {
    /// Defaults for `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            size_bytes: None,
            block_size: DEFAULT_BLOCK_SIZE,
            rounds: DEFAULT_ROUNDS,
            counter: CounterChoice::Auto,
            allow_private_mounts: false,
            sysroot: SysRoot::host(),
        }
    }

    /// The size per file per round, given whether the tracepoints measure.
    pub(crate) fn size_for(&self, traced: bool) -> u64 {
        self.size_bytes.unwrap_or(if traced {
            DEFAULT_SIZE_TRACED.max(self.block_size)
        } else {
            DEFAULT_SIZE.max(self.block_size)
        })
    }

    /// Checks the numbers.
    pub fn validate(&self) -> Result<()> {
        let bs = self.block_size;
        if bs < ALIGN as u64 || !bs.is_multiple_of(ALIGN as u64) || bs > (64 << 20) {
            return Err(Error::usage(format!(
                "--block-size {} is invalid: use a multiple of 4KiB between 4KiB and 64MiB",
                format_iec(bs)
            )));
        }
        if let Some(size) = self.size_bytes {
            if size < bs || !size.is_multiple_of(bs) {
                return Err(Error::usage(format!(
                    "--file-size {} must be a multiple of --block-size {}",
                    format_iec(size),
                    format_iec(bs)
                )));
            }
            if size > (64 << 30) {
                return Err(Error::usage("--file-size is limited to 64GiB"));
            }
        }
        if !(1..=50).contains(&self.rounds) {
            return Err(Error::usage("--rounds must be between 1 and 50"));
        }
        Ok(())
    }
}

/// What [`inspect`] found besides the report's context.
struct Inspected {
    ctx: FsContext,
    /// The backing device as the writeback tracepoint names it.
    bdi: Option<String>,
    /// The superblock's device, as the filemap and iomap tracepoints name it.
    sb_dev: (u32, u32),
    available_bytes: u64,
}

/// Refuses a probe that would not fit.
fn check_space(ctx: &FsContext, available: u64, size: u64) -> Result<()> {
    let needed = size + SPACE_MARGIN;
    if available < needed && !Switch::ProbeSkipSpaceCheck.is_on() {
        return Err(Error::new(
            ErrorKind::NoSpace,
            format!(
                "not enough free space in {}: the probe needs {}, {} is available",
                ctx.dir.display(),
                format_iec(needed),
                format_iec(available)
            ),
        )
        .with_hint("free some space or use a smaller --file-size"));
    }
    Ok(())
}

/// Looks at `opts.path` and its filesystem; refuses what cannot be probed.
fn inspect(opts: &ProbeOptions, held: &HeldDir) -> Result<Inspected> {
    let info = held.filesystem(&opts.sysroot)?;
    let fs_type = info.mount.fs_type.clone();
    if filesystem::is_memory_backed(&fs_type) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "O_DIRECT is not supported on {}: it is on {fs_type}, which keeps files in memory",
                info.dir.display()
            ),
        )
        .with_hint("probe a directory on a disk filesystem (btrfs, ext4, xfs)"));
    }
    if info.read_only {
        return Err(Error::new(
            ErrorKind::ReadOnly,
            format!("{} is on a read-only filesystem", info.dir.display()),
        )
        .with_hint("the probe writes test files: remount read-write or choose another directory"));
    }
    let is_btrfs = fs_type == "btrfs";
    let (data_profiles, bdi) = if is_btrfs {
        let fsid = held.btrfs_fsid()?;
        (
            held.btrfs_data_profiles()?,
            counters::btrfs_bdi_name(&opts.sysroot, &fsid),
        )
    } else {
        (
            Vec::new(),
            counters::block_bdi_name(&opts.sysroot, info.mount.major, info.mount.minor),
        )
    };
    let flags = filesystem::inode_flags_of(&held.file()?, &info.dir)?;
    let nocow_meaningful = is_btrfs;
    let ctx = FsContext {
        fs_type,
        mount_point: info.mount.mount_point.clone(),
        source: info.mount.source.clone(),
        data_profiles,
        mount_options: crate::parse::mountinfo::relevant_mount_options(info.mount.options()),
        target_nocow: flags
            .filter(|_| nocow_meaningful)
            .map(|f| f.intersects(crate::sys::kernel::ioctl::FS_NOCOW_FL)),
        target_compressed: flags.map(|f| f.intersects(crate::sys::kernel::ioctl::FS_COMPR_FL)),
        dir: info.dir,
        dir_device: String::new(),
        dir_inode: 0,
    };
    Ok(Inspected {
        ctx,
        bdi,
        sb_dev: (info.mount.major, info.mount.minor),
        available_bytes: info.available_bytes,
    })
}

/// A private trace instance counting the folios the probe's own files
/// dirty, if tracefs and the tracepoint are there; else why not. Instances
/// of killed probes are removed first (their names are returned).
///
/// Where tracefs is not mounted, `allow_private_mounts` mounts it in a
/// private mount namespace only while its root is opened, and the process
/// returns to its own namespace at once ([`tracefs::locate_held`], as bench
/// does): `probe-dio` and `doctor --deep` use the same tracefs this way,
/// and neither holds copies of the system's mounts (other filesystems'
/// devices) for the rest of its run. Must be called before the process
/// starts threads.
pub(crate) fn open_trace(
    root: &SysRoot,
    allow_private_mounts: bool,
) -> (Option<FolioTrace>, Option<String>, Vec<String>) {
    if Switch::ProbeNoTrace.is_on() {
        return (
            None,
            Some("the tracepoint was turned off by a test hook".into()),
            Vec::new(),
        );
    }
    let (dir, held) = match tracefs::locate_held(root, allow_private_mounts) {
        Ok(d) => d,
        Err(why) => return (None, Some(why), Vec::new()),
    };
    let removed = tracefs::remove_stale(&dir, crate::sys::fs::scratch::pid_alive);
    match FolioTrace::create(&dir, &crate::sys::fs::nonce::nonce()) {
        Ok(mut t) => {
            t.hold(held);
            (Some(t), None, removed)
        }
        Err(e) => (None, Some(e.message().to_owned()), removed),
    }
}

/// Opens the directory to probe once, following only root's symbolic
/// links: a link another user planted on the way is refused with the
/// reason, before anything is written.
fn open_dir(path: &Path) -> Result<HeldDir> {
    let not_dir = || {
        Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not a directory", path.display()),
        )
        .with_hint("give a directory on the filesystem to test")
    };
    let Some((parent, name, st)) = HeldDir::resolve_entry(path)? else {
        return HeldDir::open(path);
    };
    if !crate::sys::kernel::measure::files::is_dir(&st) {
        return Err(not_dir());
    }
    let dir = parent.open_subdir(&name)?;
    if dir.identity()? != crate::sys::fs::beneath::identity_of(&st) {
        return Err(Error::new(
            ErrorKind::State,
            format!("{} was replaced while probe-dio opened it", path.display()),
        )
        .with_hint(
            "make sure nothing renames or replaces the directory, then run the probe again",
        ));
    }
    Ok(dir)
}

/// `probe-dio DIR`: runs the probe, the bytes written counted on the
/// `ui`'s meter (no JSON Lines records: `--json` is one document).
pub fn run(opts: &ProbeOptions, ui: &dyn crate::ui::Ui) -> Result<ProbeReport> {
    use crate::ui::Progress as _;
    let bar = crate::ui::TrackedBar::new(ui, "probe-dio", "probe-dio")
        .records(false)
        .log_lines(false);
    let result = measure(opts, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish();
    result
}

/// Runs the probe (`doctor --deep` silently). `progress(done, total)` is
/// called as bytes are written.
pub(crate) fn measure(
    opts: &ProbeOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<ProbeReport> {
    opts.validate()?;
    let started = Instant::now();
    // The directory is opened once, following only root's links (a link
    // another user planted on the way is refused here, before anything is
    // written); everything after goes through this descriptor.
    let held = open_dir(&opts.path)?;
    let Inspected {
        mut ctx,
        bdi,
        sb_dev,
        available_bytes,
    } = inspect(opts, &held)?;
    let (device, inode) = scratch::identity(&held.file()?)?;
    ctx.dir_device = device;
    ctx.dir_inode = inode;
    let (mut trace, mut trace_note, removed_trace_instances) = match &bdi {
        Some(_) => open_trace(&opts.sysroot, opts.allow_private_mounts),
        None => (
            None,
            Some("the backing device of this filesystem is unknown".into()),
            Vec::new(),
        ),
    };
    let size = opts.size_for(trace.is_some());
    check_space(&ctx, available_bytes, size)?;
    let removed_leftovers = scratch::remove_stale(&held.file()?);
    let (mut counter, counter_note) = counters::open_counter(
        &opts.sysroot,
        opts.counter,
        bdi.as_deref(),
        opts.allow_private_mounts,
    )?;
    let trace_label = trace.as_ref().map(FolioTrace::label);

    let mut scratch = Scratch::new(held)?;
    let tag = scratch::tag(std::process::id(), &crate::sys::fs::nonce::nonce());
    let (control_dir, control_note) = make_control(&mut scratch, &ctx, &tag)?;

    let mut buffer = AlignedBuffer::new(opts.block_size as usize, ALIGN);
    buffer.fill_random(u64::from(std::process::id()) ^ 0x9E37_79B9_7F4A_7C15);
    let files_per_round = if control_dir.is_some() { 2 } else { 1 };
    let total = size * u64::from(opts.rounds) * files_per_round;
    let mut done = 0u64;
    let mut on_bytes = |n: u64| {
        done += n;
        progress(done, total);
    };
    let writer = RoundWriter {
        opts,
        tag: &tag,
        with_control: control_dir.is_some(),
        buffer: &buffer,
        size,
        bdi: bdi.as_deref(),
        sb_dev,
    };
    let rounds = writer.write_rounds(&mut scratch, &mut counter, trace.as_mut(), &mut on_bytes)?;
    drop(scratch);
    let lost = trace.as_ref().map_or(0, FolioTrace::lost_events);
    drop(trace);
    if lost > 0 {
        trace_note = Some(format!(
            "the trace buffer lost {lost} events, so the per-file counts are incomplete"
        ));
    }
    let (analysis, evidence) = judge(
        &rounds,
        &ctx,
        &counter,
        trace_label.filter(|_| lost == 0),
        trace_note,
    );
    let bytes_written = rounds
        .iter()
        .map(|r| r.test.bytes_written + r.control.map_or(0, |c| c.bytes_written))
        .sum();
    let mut report = ProbeReport::new(
        opts,
        ctx,
        kernel_release(),
        (
            CounterInfo {
                source: counter.kind(),
                label: counter.label().to_owned(),
                note: counter_note,
            },
            evidence,
        ),
        control_note,
        analysis,
        rounds,
    );
    report.parameters.size_bytes = size;
    report.effort = report::Effort {
        seconds: started.elapsed().as_secs_f64(),
        bytes_written,
    };
    report.removed_leftovers = removed_leftovers;
    report.removed_trace_instances = removed_trace_instances;
    Ok(report)
}

/// On btrfs, the NOCOW control directory beside the test file (or why
/// there is none); elsewhere, no control.
fn make_control(
    scratch: &mut Scratch,
    ctx: &FsContext,
    tag: &str,
) -> Result<(Option<PathBuf>, Option<String>)> {
    Ok(if ctx.fs_type == "btrfs" {
        let name = format!("{tag}.nocow");
        let shown = ctx.dir.join(&name);
        let dir = scratch.make_control_dir(&name)?;
        match filesystem::set_nocow(dir, &shown, true) {
            Ok(()) => (Some(shown), None),
            Err(e) => (None, Some(format!("no NOCOW control: {}", e.message()))),
        }
    } else {
        (
            None,
            Some(format!(
                "no control file: NOCOW is a btrfs attribute, this is {}",
                ctx.fs_type
            )),
        )
    })
}

/// What every round writes with.
struct RoundWriter<'a> {
    opts: &'a ProbeOptions,
    tag: &'a str,
    with_control: bool,
    buffer: &'a AlignedBuffer,
    size: u64,
    bdi: Option<&'a str>,
    sb_dev: (u32, u32),
}

impl RoundWriter<'_> {
    /// Every round: the test file and the control (alternating which goes
    /// first), then an idle window.
    fn write_rounds(
        &self,
        scratch: &mut Scratch,
        counter: &mut DirtyCounter,
        mut trace: Option<&mut FolioTrace>,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<Vec<Round>> {
        let (opts, size, bdi, sb_dev, buffer) =
            (self.opts, self.size, self.bdi, self.sb_dev, self.buffer);
        let tag = self.tag;
        // With per-file evidence the verdict does not use the idle window (the
        // tracepoints count only the probe's own files): it serves only the
        // counter's cross-check, so it is kept short: a quarter of the round's
        // writing, 5 ms to 0.25 s.
        let (idle_share, idle_min, idle_max) = if trace.is_some() {
            (0.25, 0.005, 0.25)
        } else {
            (0.5, 0.2, 10.0)
        };
        let mut rounds = Vec::new();
        for r in 0..opts.rounds {
            let test_name = format!("{tag}-r{r}.test");
            let control_name = self.with_control.then(|| format!("r{r}.control"));
            let mut write = |in_control: bool, name: &str, scratch: &mut Scratch| {
                let sample = Sample {
                    in_control,
                    name,
                    buffer,
                    opts,
                    size,
                    bdi,
                    sb_dev,
                };
                let mut probes = Probes {
                    counter: &mut *counter,
                    trace: trace.as_deref_mut(),
                };
                write_sample(&sample, &mut probes, scratch, &mut *on_bytes)
            };
            // Alternate the order so neither file always runs first.
            let (test, control) = match &control_name {
                Some(cn) if r % 2 == 1 => {
                    let c = write(true, cn, scratch)?;
                    (write(false, &test_name, scratch)?, Some(c))
                }
                Some(cn) => {
                    let t = write(false, &test_name, scratch)?;
                    (t, Some(write(true, cn, scratch)?))
                }
                None => (write(false, &test_name, scratch)?, None),
            };
            let busy = test.seconds + control.map_or(test.seconds, |c| c.seconds);
            let idle = idle_sample(counter, (busy * idle_share).clamp(idle_min, idle_max))?;
            rounds.push(Round {
                test,
                control,
                idle,
            });
        }
        Ok(rounds)
    }
}

/// The verdict: by the per-file tracepoints when they saw every event
/// (`trace_label`), cross-checked by the counter; else by the counter.
fn judge(
    rounds: &[Round],
    ctx: &FsContext,
    counter: &DirtyCounter,
    trace_label: Option<String>,
    trace_note: Option<String>,
) -> (verdict::Analysis, EvidenceInfo) {
    let vctx = verdict::Context {
        data_profiles: ctx.data_profiles.clone(),
    };
    let by_counter = verdict::analyze(rounds, &vctx);
    let by_file = if trace_label.is_none() {
        None
    } else {
        verdict::analyze_per_file(rounds, &vctx, counters::page_size())
    };
    match (by_file, trace_label) {
        (Some(a), Some(label)) => {
            let cross = CrossCheck {
                source: counter.kind(),
                verdict: by_counter.verdict,
                agrees: by_counter.verdict == a.verdict,
            };
            (
                a,
                EvidenceInfo {
                    source: EvidenceKind::Tracepoint,
                    label,
                    note: None,
                    cross_check: Some(cross),
                },
            )
        }
        _ => (
            by_counter,
            EvidenceInfo {
                source: counter.kind().into(),
                label: counter.label().to_owned(),
                note: trace_note.map(|n| format!("per-file tracepoint not used: {n}")),
                cross_check: None,
            },
        ),
    }
}

/// One file to write.
struct Sample<'a> {
    in_control: bool,
    name: &'a str,
    buffer: &'a AlignedBuffer,
    opts: &'a ProbeOptions,
    /// Bytes to write.
    size: u64,
    /// The backing device, as the writeback tracepoint names it.
    bdi: Option<&'a str>,
    /// The superblock's device, as the filemap and iomap ones name it.
    sb_dev: (u32, u32),
}

/// What measures the dirtied pages.
struct Probes<'a> {
    counter: &'a mut DirtyCounter,
    trace: Option<&'a mut FolioTrace>,
}

fn write_sample(
    s: &Sample<'_>,
    probes: &mut Probes<'_>,
    scratch: &mut Scratch,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<verdict::WriteSample> {
    let (buffer, opts) = (s.buffer, s.opts);
    let path = &scratch.shown(s.in_control, s.name);
    signals::check()?;
    let file = scratch.create(s.in_control, s.name)?;
    let ino = std::os::unix::fs::MetadataExt::ino(
        &file
            .metadata()
            .map_err(|e| Error::from_io(&e, "cannot stat", path))?,
    );
    // The filter is set before the first byte is written: this file, and
    // only what this thread does to it (the writes happen here).
    let traced = match (probes.trace.as_deref_mut(), s.bdi) {
        (Some(t), Some(bdi)) => {
            let watch = Watch {
                bdi: bdi.to_owned(),
                dev: s.sb_dev,
                inodes: vec![ino],
            };
            t.watch(
                &[watch],
                Some(crate::sys::kernel::measure::ids::thread_id()),
            )?;
            Some(t.counts(s.sb_dev, ino))
        }
        _ => None,
    };
    let counter = &mut *probes.counter;
    let before = counter.read_bytes()?;
    let start = Instant::now();
    let mut offset = 0u64;
    let mut calls = 0u64;
    // Reading the trace (the kernel formats each event) is not part of the
    // write: it happens between writes only as often as the ring buffer
    // needs (`FolioTrace::bytes_between_drains`), and its time is taken out
    // of the figure, so the throughput, and the cost against NOCOW, are the
    // kernel's, not the tracing's.
    let drain_every = probes
        .trace
        .as_deref()
        .map_or(u64::MAX, FolioTrace::bytes_between_drains);
    let mut reading = Duration::ZERO;
    let mut since_drain = 0u64;
    while offset < s.size {
        signals::check()?;
        let n = opts.block_size.min(s.size - offset);
        write_all_at(&file, &buffer.as_slice()[..n as usize], offset, path)
            .map_err(|e| no_space_note(e, s.size))?;
        offset += n;
        calls += 1;
        since_drain += n;
        on_bytes(n);
        if let Some(t) = probes.trace.as_deref_mut()
            && since_drain >= drain_every
        {
            let d = Instant::now();
            t.drain()?;
            reading += d.elapsed();
            since_drain = 0;
        }
        Pause::ProbeWritten.here(" after its first write", &|| false)?;
    }
    file.sync_all()
        .map_err(|e| no_space_note(Error::from_io(&e, "cannot fsync", path), s.size))?;
    let seconds = start.elapsed().saturating_sub(reading).as_secs_f64();
    let after = probes.counter.read_bytes()?;
    let seen = match (probes.trace.as_deref_mut(), traced) {
        (Some(t), Some(was)) => {
            t.drain()?;
            let now = t.counts(s.sb_dev, ino);
            Some((t.events(), now, was))
        }
        _ => None,
    };
    drop(file);
    scratch.remove(s.in_control, s.name)?;
    let page = counters::page_size();
    let delta =
        |f: fn(&FileCounts) -> u64| seen.map(|(_, now, was)| f(&now).saturating_sub(f(&was)));
    let has = |f: fn(&tracefs::Events) -> bool| seen.is_some_and(|(e, _, _)| f(&e));
    Ok(verdict::WriteSample {
        bytes_written: s.size,
        dirtied_bytes: after.saturating_sub(before),
        dirtied_folios: delta(|c| c.dirtied_folios),
        cached_bytes: delta(|c| c.cached_pages)
            .filter(|_| has(|e| e.cache))
            .map(|p| p.saturating_mul(page)),
        write_calls: calls,
        direct_calls: delta(|c| c.dio_calls).filter(|_| has(|e| e.dio)),
        bounced_calls: delta(|c| c.bounced_calls)
            .filter(|_| has(|e| e.dio && e.bounce != tracefs::BounceRule::Unknown)),
        seconds,
    })
}

fn no_space_note(e: Error, size: u64) -> Error {
    if e.kind() == ErrorKind::NoSpace {
        Error::new(
            ErrorKind::NoSpace,
            format!("{} (the partial test file was removed)", e.message()),
        )
        .with_hint(format!(
            "free some space or use a smaller --file-size than {}",
            format_iec(size)
        ))
    } else {
        e
    }
}

fn idle_sample(counter: &mut DirtyCounter, seconds: f64) -> Result<verdict::IdleSample> {
    let before = counter.read_bytes()?;
    let start = Instant::now();
    let length = Duration::from_secs_f64(seconds);
    while start.elapsed() < length {
        signals::check()?;
        thread::sleep(Duration::from_millis(20).min(length.saturating_sub(start.elapsed())));
    }
    let seconds = start.elapsed().as_secs_f64();
    let after = counter.read_bytes()?;
    Ok(verdict::IdleSample {
        dirtied_bytes: after.saturating_sub(before),
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated() {
        let ok = ProbeOptions::new("/x");
        assert!(ok.validate().is_ok());
        for bad in [
            ProbeOptions {
                block_size: 1000,
                ..ok.clone()
            },
            ProbeOptions {
                block_size: 128 << 20,
                ..ok.clone()
            },
            ProbeOptions {
                size_bytes: Some(4096),
                ..ok.clone()
            },
            ProbeOptions {
                size_bytes: Some((1 << 20) + 4096),
                ..ok.clone()
            },
            ProbeOptions {
                rounds: 0,
                ..ok.clone()
            },
            ProbeOptions {
                size_bytes: Some(1 << 40),
                ..ok.clone()
            },
        ] {
            assert_eq!(bad.validate().unwrap_err().exit_code(), 2);
        }
    }

    #[test]
    fn keeps_only_mount_options_that_matter() {
        let opts = "rw,relatime,compress=zstd:3,ssd,space_cache=v2,nodatasum,subvol=/".split(',');
        assert_eq!(
            crate::parse::mountinfo::relevant_mount_options(opts),
            vec!["compress=zstd:3", "nodatasum"]
        );
    }
}
