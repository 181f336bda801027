//! Running a scrub: one thread per device, progress, signals, the kernel
//! log, the saved state.

use crate::sys::kernel::settings::ScrubSpeedGuard;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use btrfs_uapi::scrub::ScrubProgress;

use super::log::{LogEvent, damaged_from, parse_log};
use super::progs;
use super::{
    DeviceScrub, Outcome, PlannedDevice, SavedScrub, ScrubPlan, ScrubRecord, ScrubReport,
    StateStore, Totals,
};
use crate::error::{Error, ErrorKind, Result};
use crate::report::progress::Meter;
use crate::sys::kernel::{btrfs, scrub, signals};
use crate::sys::tools::inhibit::SleepInhibitor;
use crate::ui::{self, Ui};

/// Sets `--limit` on every planned device (restored when dropped: every
/// exit path, a panic too), or says which device the kernel cannot limit.
fn set_limit(plan: &ScrubPlan, store: &StateStore, ui: &dyn Ui) -> Result<ScrubSpeedGuard> {
    let Some(limit) = plan.limit else {
        return Ok(ScrubSpeedGuard::none());
    };
    let mut devids = Vec::new();
    for d in &plan.devices {
        match &d.speed_max_file {
            Some(_) => devids.push(d.devid),
            None => ui.note(&format!(
                "device {} has no scrub_speed_max (kernel older than 5.14): --limit does not apply to it",
                d.devid
            )),
        }
    }
    ScrubSpeedGuard::set(&store.ledger(), &plan.fsid, &devids, limit)
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How often the positions reached are saved while a scrub runs.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(5);

/// One device's scrub thread: the kernel's counters and whether it was
/// cancelled.
type Worker = std::thread::JoinHandle<Result<(ScrubProgress, bool)>>;

/// Runs the plan: one thread per device; progress, signals and the saved
/// state from this one. Returns once every scrub ioctl returned.
pub fn execute(
    fs: &btrfs::FsHandle,
    plan: &ScrubPlan,
    saved: Option<SavedScrub>,
    store: &StateStore,
    signals: &signals::OperationSignals,
    ui: &dyn Ui,
) -> Result<ScrubReport> {
    let dir = fs.held_fd()?;
    refuse_a_running_scrub(fs, &plan.mount_point)?;
    let _limit = set_limit(plan, store, ui)?;
    let inhibitor = hold_off_suspend(&plan.mount_point, store, ui);
    let suspend_held_off = inhibitor.is_some();
    // Opened before the first scrub ioctl: every message of this run.
    let mut log = RunLog::open(plan);
    let started_at = now_secs();
    store.mark_running(&plan.fsid, started_at);
    let t0 = Instant::now();
    let workers = start_workers(fs, plan)?;
    let prior = prior_runs(plan, saved.as_ref());
    // btrfs-progs' record says "running" (with the earlier runs' figures)
    // from the start, and is replaced at the end.
    let resumed_at = saved.as_ref().filter(|_| plan.resume).map(|_| started_at);
    let starting = saved_state(
        plan,
        saved.as_ref(),
        prior.clone(),
        &not_started(plan),
        started_at,
        0.0,
    );
    let progs_failed = progs::write(&starting, resumed_at, true).err();
    let mut watch = Watch::new(plan, workers, &prior, ui);
    // Where each device got to, saved as it goes: after a kill, a crash or
    // a power cut the next `--resume` (or `scrub --all`) goes on from the
    // last checkpoint, not from the start.
    let checkpoint = |so_far: &[DeviceScrub]| {
        let mut whole = saved_state(
            plan,
            saved.as_ref(),
            prior.clone(),
            so_far,
            started_at,
            t0.elapsed().as_secs_f64(),
        );
        whole.finished = false;
        if store.save(&whole).is_ok() {
            let _ = progs::write(&whole, resumed_at, true);
        }
    };
    watch.until_every_device_returned(dir, signals, &mut log, &checkpoint);
    drop(inhibitor);
    let (devices, failure, stopped_by) = watch.end();
    let elapsed = t0.elapsed().as_secs_f64();
    let whole = saved_state(plan, saved.as_ref(), prior, &devices, started_at, elapsed);
    store.save(&whole)?;
    if let Some(e) = progs::write(&whole, resumed_at, false)
        .err()
        .or(progs_failed)
    {
        ui.note(&format!(
            "btrfs scrub status does not show this scrub (btrfs-lab scrub {} --status does): {}",
            plan.mount_point.display(),
            e.message()
        ));
    }
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(ScrubReport {
        mount_point: plan.mount_point.clone(),
        fsid: plan.fsid.clone(),
        outcome: if devices.iter().all(|d| d.finished) {
            Outcome::Finished
        } else {
            Outcome::Interrupted
        },
        resumed: plan.resume,
        readonly: plan.readonly,
        started_at,
        duration_seconds: t0.elapsed().as_secs_f64(),
        totals: Totals::of(&devices),
        scrub_totals: Totals::of(&whole.devices),
        scrub_duration_seconds: whole.duration_seconds,
        runs: whole.runs,
        devices,
        missing: plan.missing.clone(),
        suspend_held_off,
        damaged_files: damaged_from(&log.events),
        stopped_by,
    })
}

/// Busy when a scrub (ours or `btrfs scrub start`'s) runs already.
fn refuse_a_running_scrub(fs: &btrfs::FsHandle, mount: &Path) -> Result<()> {
    if super::running(fs)?.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Busy,
        format!("a scrub already runs on {}", mount.display()),
    )
    .with_hint(format!(
        "follow it with btrfs-lab scrub {} --status, or cancel it with --cancel",
        mount.display()
    )))
}

/// A systemd-logind sleep inhibitor for the run, or a notice that suspend
/// is not held off: a record on every run, a one-line note the first time
/// (per reason and state directory; `suspend_held_off` in the report says
/// it on every run).
fn hold_off_suspend(mount: &Path, store: &StateStore, ui: &dyn Ui) -> Option<SleepInhibitor> {
    match SleepInhibitor::hold(&format!("scrub of {}", mount.display())) {
        Ok(i) => Some(i),
        Err(why) => {
            let message = suspend_note(&why);
            ui::emit(
                ui,
                &ScrubRecord::Notice {
                    message: message.clone(),
                },
            );
            if store.first_time(&message) {
                ui.note(&message);
            }
            None
        }
    }
}

/// The one line that says suspend is not held off, and why.
pub(super) fn suspend_note(why: &str) -> String {
    format!("suspend is not held off ({why}): a suspend stops the scrub, --resume continues")
}

/// The kernel's messages of this run about the planned devices, read as
/// scrub errors (at most 100 000).
struct RunLog {
    follower: btrfs::KernelLogFollower,
    devices: Vec<String>,
    events: Vec<LogEvent>,
}

impl RunLog {
    fn open(plan: &ScrubPlan) -> Self {
        RunLog {
            follower: btrfs::KernelLogFollower::open(),
            devices: plan.devices.iter().map(|d| d.path.clone()).collect(),
            events: Vec::new(),
        }
    }

    /// Reads what the kernel logged since the last call.
    fn read(&mut self) {
        let (devices, events) = (&self.devices, &mut self.events);
        self.follower.drain(100_000, |msg| {
            if events.len() < 100_000
                && let Some(e) = parse_log(msg, devices)
            {
                events.push(e);
            }
        });
    }
}

/// One thread per planned device, each in its blocking scrub ioctl.
fn start_workers(
    fs: &btrfs::FsHandle,
    plan: &ScrubPlan,
) -> Result<Vec<(PlannedDevice, Option<Worker>)>> {
    let mut workers = Vec::new();
    for d in &plan.devices {
        let f = fs.try_clone()?;
        let (devid, start, ro) = (d.devid, d.start, plan.readonly);
        let h = std::thread::spawn(move || scrub::device(&f, devid, start, ro));
        workers.push((d.clone(), Some(h)));
    }
    Ok(workers)
}

/// Each planned device as it is before the kernel scrubbed any of it.
fn not_started(plan: &ScrubPlan) -> Vec<DeviceScrub> {
    plan.devices
        .iter()
        .map(|d| DeviceScrub {
            devid: d.devid,
            path: d.path.clone(),
            bytes_to_read: d.bytes_to_read,
            last_physical: d.start,
            ..DeviceScrub::default()
        })
        .collect()
}

/// The saved counters of the earlier runs of a resumed scrub (none for a
/// new one).
fn prior_runs(plan: &ScrubPlan, saved: Option<&SavedScrub>) -> Vec<DeviceScrub> {
    if plan.resume {
        saved.map(|s| s.devices.clone()).unwrap_or_default()
    } else {
        Vec::new()
    }
}

/// The run as the calling thread follows it: the threads' results, the
/// counters last seen, signals, progress.
struct Watch<'a> {
    mount: PathBuf,
    fsid: String,
    ui: &'a dyn Ui,
    workers: Vec<(PlannedDevice, Option<Worker>)>,
    results: Vec<Option<DeviceScrub>>,
    last_seen: Vec<DeviceScrub>,
    /// Bytes scrubbed by the earlier runs of a resumed scrub.
    prior_done: u64,
    /// Bytes to read in all (earlier runs included).
    total: u64,
    track: ui::Track<'a>,
    meter: Meter,
    cancelling: bool,
    /// The first signal's name.
    stopped_by: Option<String>,
    failure: Option<Error>,
    last_event: Instant,
}

impl<'a> Watch<'a> {
    fn new(
        plan: &ScrubPlan,
        workers: Vec<(PlannedDevice, Option<Worker>)>,
        prior: &[DeviceScrub],
        ui: &'a dyn Ui,
    ) -> Self {
        let total: u64 = plan.devices.iter().map(|d| d.bytes_to_read).sum::<u64>()
            + prior
                .iter()
                .filter(|d| d.finished)
                .map(|d| d.bytes_to_read)
                .sum::<u64>();
        let last_seen = not_started(plan);
        Watch {
            mount: plan.mount_point.clone(),
            fsid: plan.fsid.clone(),
            ui,
            results: vec![None; workers.len()],
            workers,
            last_seen,
            prior_done: prior.iter().map(|d| d.bytes_scrubbed).sum(),
            total,
            track: ui::Track::new(ui, "scrub", "scrubbing").records(false),
            meter: Meter::new(),
            cancelling: false,
            stopped_by: None,
            failure: None,
            last_event: Instant::now() - Duration::from_secs(10),
        }
    }

    /// Waits for signals, collects the threads that returned, cancels when
    /// asked (or when one failed) and shows progress, until every scrub
    /// ioctl returned.
    fn until_every_device_returned(
        &mut self,
        dir: BorrowedFd<'_>,
        signals: &signals::OperationSignals,
        log: &mut RunLog,
        checkpoint: &dyn Fn(&[DeviceScrub]),
    ) {
        let mut saved = Instant::now();
        loop {
            let (n, sig) = signals.wait(Duration::from_millis(250));
            if n > 0 {
                self.on_signal(sig.map_or("a signal", |s| s.name()));
            }
            self.collect_returned();
            if !self.workers.iter().any(|(_, h)| h.is_some()) {
                break;
            }
            if self.cancelling {
                // Again on every turn: a thread may not have entered the
                // ioctl yet when the first cancel came (ENOTCONN then).
                let _ = scrub::cancel(dir, &self.mount);
            }
            self.poll_counters(dir);
            log.read();
            self.show_progress();
            if saved.elapsed() >= CHECKPOINT_EVERY {
                saved = Instant::now();
                checkpoint(&self.so_far());
            }
        }
        log.read();
    }

    /// Each device's counters as far as they are known: the final ones of
    /// a device that returned, else the last progress read.
    fn so_far(&self) -> Vec<DeviceScrub> {
        self.results
            .iter()
            .zip(&self.last_seen)
            .map(|(r, seen)| r.clone().unwrap_or_else(|| seen.clone()))
            .collect()
    }

    /// The first signal cancels the scrub; later ones say it still stops.
    fn on_signal(&mut self, name: &str) {
        if self.cancelling {
            self.ui
                .note("still stopping: waiting until the kernel's scrub of every device returned");
        } else {
            self.stopped_by = Some(name.to_owned());
            ui::emit(
                self.ui,
                &ScrubRecord::Stopping {
                    signal: name.to_owned(),
                },
            );
            self.ui.note(&format!(
                "{name}: cancelling the scrub; what was done is kept, btrfs-lab scrub {} --resume continues",
                self.mount.display()
            ));
        }
        self.cancelling = true;
        self.meter.pausing();
    }

    /// Joins the threads that returned: their counters, or the first
    /// failure (which cancels the others).
    fn collect_returned(&mut self) {
        for (i, (d, h)) in self.workers.iter_mut().enumerate() {
            if !h.as_ref().is_some_and(|h| h.is_finished()) {
                continue;
            }
            let Some(h) = h.take() else { continue };
            match h.join() {
                Ok(Ok((p, cancelled))) => {
                    let mut r = DeviceScrub::of(d.devid, &d.path, d.bytes_to_read, &p);
                    r.finished = !cancelled;
                    self.results[i] = Some(r);
                }
                Ok(Err(e)) => {
                    self.failure.get_or_insert(e);
                    let mut r = self.last_seen[i].clone();
                    r.finished = false;
                    self.results[i] = Some(r);
                    self.cancelling = true;
                }
                Err(_) => {
                    self.failure.get_or_insert_with(|| {
                        Error::new(ErrorKind::Io, "a scrub thread panicked")
                    });
                    self.results[i] = Some(self.last_seen[i].clone());
                    self.cancelling = true;
                }
            }
        }
    }

    /// The counters of the devices still scrubbing (SCRUB_PROGRESS).
    fn poll_counters(&mut self, dir: BorrowedFd<'_>) {
        for (i, (d, h)) in self.workers.iter().enumerate() {
            if h.is_some()
                && let Ok(Some(p)) = scrub::progress(dir, d.devid, &self.mount)
            {
                self.last_seen[i] = DeviceScrub::of(d.devid, &d.path, d.bytes_to_read, &p);
            }
        }
    }

    /// The bar (or log line), and a progress record about once a second.
    fn show_progress(&mut self) {
        let now_done: u64 = (0..self.workers.len())
            .map(|i| {
                self.results[i]
                    .as_ref()
                    .unwrap_or(&self.last_seen[i])
                    .bytes_scrubbed
            })
            .sum();
        let done = self.prior_done + now_done;
        let reading = self.meter.observe(done.min(self.total), self.total);
        self.track.show(&reading, None);
        if self.last_event.elapsed() >= Duration::from_secs(1) {
            self.last_event = Instant::now();
            let errors: u64 = self.last_seen.iter().map(DeviceScrub::errors).sum();
            ui::emit(
                self.ui,
                &ScrubRecord::Progress {
                    fsid: self.fsid.clone(),
                    bytes_to_read: self.total,
                    bytes_scrubbed: done,
                    rate_bytes_per_sec: reading.rate_bytes_per_sec,
                    eta_seconds: reading.eta_seconds,
                    pace: reading.pace,
                    errors,
                },
            );
        }
    }

    /// This run's counters per device, the first failure, the signal that
    /// stopped it.
    fn end(self) -> (Vec<DeviceScrub>, Option<Error>, Option<String>) {
        self.track.finish();
        let devices = self
            .results
            .into_iter()
            .zip(self.last_seen)
            .map(|(r, l)| r.unwrap_or(l))
            .collect();
        (devices, self.failure, self.stopped_by)
    }
}

/// What is saved of the scrub: the sums of every run per device.
pub(super) fn saved_state(
    plan: &ScrubPlan,
    saved: Option<&SavedScrub>,
    prior: Vec<DeviceScrub>,
    devices: &[DeviceScrub],
    started_at: u64,
    elapsed: f64,
) -> SavedScrub {
    let mut sums = prior;
    for d in devices {
        match sums.iter_mut().find(|s| s.devid == d.devid) {
            Some(s) => *s = d.after(s),
            None => sums.push(d.clone()),
        }
    }
    let earlier = saved.filter(|_| plan.resume);
    SavedScrub {
        fsid: plan.fsid.clone(),
        started_at: earlier.map_or(started_at, |s| s.started_at),
        saved_at: now_secs(),
        finished: devices.iter().all(|d| d.finished) && sums.iter().all(|d| d.finished),
        readonly: plan.readonly,
        duration_seconds: elapsed + earlier.map_or(0.0, |s| s.duration_seconds),
        runs: earlier.map_or(0, |s| s.runs.max(1)) + 1,
        devices: sums,
    }
}
