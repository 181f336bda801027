//! Carrying out a conversion: the balance ioctl on a thread of its own,
//! progress, and on SIGINT/SIGTERM/SIGHUP a pause asked of the kernel at
//! once; the process never exits while the balance runs in it.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{ConvertRequest, Event, Existing, Outcome, Progress, Targets, remaining_bytes};
use crate::convert::report::ResultRecord;
use crate::error::{Error, ErrorKind, Result};
use crate::model::balance::BalanceInfo;
use crate::operation::state::read_state_at;
use crate::parse::size::format_iec;
use crate::report::progress;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::balance::{self, Ended, Errno};
use crate::sys::kernel::btrfs::{self, FsHandle};
use crate::sys::kernel::ioctl::{BalanceEnd, BalanceState};
use crate::sys::kernel::signals::OperationSignals;

/// BALANCE_CTL on a thread of its own (reclaim cancels with it).
pub(crate) use crate::sys::kernel::balance::Pauser;

/// How to start the balance.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// A new conversion (or, per [`ConvertPlan::existing`], resume, follow
    /// or wait for the balance that exists, then finish what is left).
    Convert(ConvertRequest, Option<Existing>),
    /// Resume the paused one.
    Resume,
}

/// Progress bookkeeping of one run.
struct Meter {
    targets: Targets,
    initial: u64,
    first_done: Option<u64>,
    expected: u64,
    done: u64,
    /// Rate and ETA of the bytes converted (model::progress's rules).
    meter: progress::Meter,
}

impl Meter {
    fn new(h: &FsHandle, targets: Targets) -> Self {
        Self {
            targets,
            initial: remaining_bytes(h, targets),
            first_done: None,
            expected: 0,
            done: 0,
            meter: progress::Meter::new(),
        }
    }

    /// Takes the kernel's counters when there are some (a finished or
    /// vanished balance reports none: the last ones stay).
    fn counters(&mut self, expected: u64, done: u64) {
        if expected == 0 && done == 0 {
            return;
        }
        self.first_done.get_or_insert(done);
        self.expected = expected.max(done);
        self.done = done;
    }

    /// A pause was asked for: no ETA from now on.
    fn pausing(&mut self) {
        self.meter.pausing();
    }

    fn sample(&mut self, h: &FsHandle) -> Progress {
        if let Ok(Some(s)) = h.balance_status() {
            self.counters(s.expected, s.completed);
        }
        self.progress(remaining_bytes(h, self.targets))
    }

    fn progress(&mut self, remaining: u64) -> Progress {
        let bytes_done = self.initial.saturating_sub(remaining);
        let r = self.meter.observe(bytes_done, self.initial);
        Progress {
            chunks_expected: self.expected.max(self.done),
            chunks_done: self.done,
            bytes_remaining: remaining,
            bytes_done,
            rate_bytes_per_sec: r.rate_bytes_per_sec.unwrap_or(0.0),
            eta_seconds: r.eta_seconds,
            pace: r.pace,
        }
    }
}

/// How the waiting for a balance ended.
enum Waited {
    /// Our ioctl returned.
    Own(Ended),
    /// The followed balance is gone (finished or cancelled).
    Gone,
    /// The followed balance is paused.
    Paused,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Own { resume: bool },
    Follow,
}

/// One conversion's balance: what it converts, the signals it heeds, where
/// its events go, and whether a pause was asked for.
struct Run<'a> {
    h: &'a FsHandle,
    targets: Targets,
    /// `None`: a resume.
    req: Option<ConvertRequest>,
    signals: &'a OperationSignals,
    on_event: &'a mut dyn FnMut(Event),
    pause_requested: bool,
}

/// Runs a conversion: starts (or resumes, or follows) the balance on the
/// open filesystem `h`, reports progress, and on SIGINT/SIGTERM/SIGHUP asks
/// the kernel to pause it at once, then waits until the balance has
/// stopped: the process never exits while the balance ioctl runs in it (the
/// kernel would cancel the balance), whatever signals follow. When a
/// followed balance ends without finishing, `replan` decides whether the
/// rest may start (the plan made while it ran could not replay the
/// conversion: [`super::balance_in_flux`]); its error ends the run with
/// nothing started.
pub fn run_balance(
    h: &FsHandle,
    start: Start,
    targets: Targets,
    signals: &OperationSignals,
    on_event: &mut dyn FnMut(Event),
    replan: &mut dyn FnMut(&ConvertRequest) -> Result<()>,
) -> Result<Outcome> {
    let mut phase = first_phase(h, start, on_event);
    let mut run = Run {
        h,
        targets,
        req: match start {
            Start::Convert(r, _) => Some(r),
            Start::Resume => None,
        },
        signals,
        on_event,
        pause_requested: false,
    };
    loop {
        let mut meter = Meter::new(h, targets);
        let pauser = Pauser::new(h)?;
        let waited = run.wait(phase, &mut meter, &pauser);
        let pause_result = pauser.finish();
        match run.ended(waited?, &mut meter, pause_result.is_err(), replan)? {
            Next::Done(outcome) => return Ok(outcome),
            Next::Again(next) => phase = next,
        }
    }
}

/// What a new conversion does first, per the balance that exists (said
/// through `on_event`).
fn first_phase(h: &FsHandle, start: Start, on_event: &mut dyn FnMut(Event)) -> Phase {
    let m = h.path().display();
    match start {
        Start::Resume => Phase::Own { resume: true },
        Start::Convert(_, Some(Existing::Resume)) => {
            on_event(Event::Notice(format!(
                "a paused balance with these targets exists on {m}: resuming it"
            )));
            Phase::Own { resume: true }
        }
        Start::Convert(_, Some(Existing::Follow)) => {
            on_event(Event::Notice(format!(
                "a balance with these targets is already running on {m} (another btrfs-lab, or one the kernel is cancelling because its process was killed): following it"
            )));
            Phase::Follow
        }
        Start::Convert(_, Some(Existing::WaitForCancel)) => {
            on_event(Event::Notice(format!(
                "a balance is being cancelled on {m}: waiting for it to end"
            )));
            Phase::Follow
        }
        Start::Convert(_, None) => Phase::Own { resume: false },
    }
}

/// After a balance ended: the run's outcome, or the phase to go on with.
enum Next {
    Done(Outcome),
    Again(Phase),
}

impl Run<'_> {
    /// Starts our balance (or follows the one running) and waits until it
    /// ends; signals ask the kernel to pause it; progress twice a second.
    fn wait(&mut self, phase: Phase, meter: &mut Meter, pauser: &Pauser) -> Result<Waited> {
        let h = self.h;
        let worker = match phase {
            Phase::Own { resume } => {
                let (conv, force) = match self.req {
                    Some(r) if !resume => (btrfs::convert_targets(r.data, r.metadata), r.force),
                    _ => (Default::default(), false),
                };
                Some(balance::start(h, conv, force, resume)?)
            }
            Phase::Follow => None,
        };
        if self.pause_requested {
            pauser.pause();
        }
        let mut signalled = 0usize;
        let mut last_report = Instant::now();
        let mut running_seen = false;
        let waited = loop {
            if !running_seen
                && h.balance_status()
                    .ok()
                    .flatten()
                    .is_some_and(|s| s.state.contains(BalanceState::RUNNING))
            {
                running_seen = true;
                (self.on_event)(Event::Running);
            }
            if let Some((_, rx)) = &worker {
                match rx.try_recv() {
                    Ok(r) => break Waited::Own(r),
                    Err(mpsc::TryRecvError::Disconnected) => break Waited::Own(Ended::lost()),
                    Err(mpsc::TryRecvError::Empty) => {}
                }
            } else {
                match h.balance_status() {
                    Ok(None) => break Waited::Gone,
                    Ok(Some(s)) if !s.state.contains(BalanceState::RUNNING) => {
                        break Waited::Paused;
                    }
                    Ok(Some(s)) => meter.counters(s.expected, s.completed),
                    Err(e) => return Err(e),
                }
            }
            self.heed_signals(meter, pauser, &mut signalled);
            if last_report.elapsed() >= Duration::from_millis(500) {
                last_report = Instant::now();
                (self.on_event)(Event::Progress(meter.sample(h)));
            }
        };
        if let Some((t, _)) = worker {
            let _ = t.join();
        }
        Ok(waited)
    }

    /// Waits a moment for signals: the first asks the kernel to pause, the
    /// others are told to wait.
    fn heed_signals(&mut self, meter: &mut Meter, pauser: &Pauser, signalled: &mut usize) {
        let (n, which) = self.signals.wait(Duration::from_millis(100));
        if n == 0 {
            return;
        }
        *signalled += n;
        if !self.pause_requested {
            self.pause_requested = true;
            meter.pausing();
            pauser.pause();
            (self.on_event)(Event::Pausing(which));
            if *signalled > 1 {
                (self.on_event)(Event::StillPausing);
            }
        } else {
            (self.on_event)(Event::StillPausing);
        }
    }

    /// How the balance ended, as the run's outcome or error, or what to do
    /// next (follow one that started at the same instant, start once the
    /// followed one ended unfinished).
    fn ended(
        &mut self,
        waited: Waited,
        meter: &mut Meter,
        pause_failed: bool,
        replan: &mut dyn FnMut(&ConvertRequest) -> Result<()>,
    ) -> Result<Next> {
        let h = self.h;
        let m = h.path().display();
        match waited {
            Waited::Own(Ended::Kernel(BalanceEnd::Finished { expected, completed })) => {
                meter.counters(expected, completed);
                (self.on_event)(Event::Progress(
                    meter.progress(remaining_bytes(h, self.targets)),
                ));
                Ok(Next::Done(Outcome::Completed))
            }
            Waited::Own(Ended::Kernel(BalanceEnd::BtrfsError(code))) => Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "the kernel refused to start the balance on {m}: another exclusive operation (device add or remove, replace, resize) is running (btrfs error {code})"
                ),
            )
            .with_hint("wait until it ends, then run the same convert again")),
            Waited::Own(Ended::Stopped) => {
                // Paused, or cancelled by someone (also while a pause was
                // asked for).
                let paused = h
                    .balance_status()
                    .ok()
                    .flatten()
                    .is_some_and(|s| !s.state.contains(BalanceState::RUNNING));
                Ok(Next::Done(if paused {
                    Outcome::Paused
                } else {
                    Outcome::Cancelled
                }))
            }
            Waited::Own(Ended::AnotherRuns) => self.another_started(),
            Waited::Own(Ended::NoSpace) => Err(Error::new(
                ErrorKind::NoSpace,
                format!("the conversion ran out of space on {m}; what was converted stays converted"),
            )
            .with_hint("free space (delete files, or btrfs balance start -dusage=10) or add a device, then run the same convert again")),
            Waited::Own(Ended::OtherFilesystem) => Err(Error::new(
                ErrorKind::State,
                format!("{m} is no longer the filesystem {} that was planned on", h.fsid()),
            )),
            Waited::Own(Ended::Failed(e)) => Err(kernel_failure(h, e, "convert")),
            Waited::Paused => Ok(Next::Done(Outcome::Paused)),
            Waited::Gone => self.followed_gone(meter, pause_failed, replan),
        }
    }

    /// Someone else started a balance at the same instant: follow it when
    /// it has our targets.
    fn another_started(&mut self) -> Result<Next> {
        let h = self.h;
        let m = h.path().display();
        match h.balance_status()? {
            Some(s)
                if BalanceInfo::from_status(&s).targets() == self.targets
                    && !self.pause_requested =>
            {
                (self.on_event)(Event::Notice(format!(
                    "another process started a balance with these targets on {m} at the same moment: following it"
                )));
                Ok(Next::Again(Phase::Follow))
            }
            Some(s) => {
                let b = BalanceInfo::from_status(&s);
                Err(Error::new(
                    ErrorKind::Refused,
                    format!(
                        "cannot convert: a balance with other targets ({}) is {} on {m}",
                        b.targets().describe(),
                        if b.running { "running" } else { "paused" }
                    ),
                )
                .with_hint(format!("watch it with `btrfs-lab convert {m} --status`, or `--pause` / `--resume` / `--cancel` it")))
            }
            None => Err(Error::new(
                ErrorKind::Busy,
                format!("another balance was running on {m} when this one was to start; it has ended since"),
            )
            .with_hint("run the same convert again")),
        }
    }

    /// The followed balance is gone: finished, or ended unfinished (then
    /// the rest starts once planned again, unless a pause was asked for).
    fn followed_gone(
        &mut self,
        meter: &mut Meter,
        pause_failed: bool,
        replan: &mut dyn FnMut(&ConvertRequest) -> Result<()>,
    ) -> Result<Next> {
        let left = remaining_bytes(self.h, self.targets);
        if left == 0 {
            (self.on_event)(Event::Progress(meter.progress(0)));
            return Ok(Next::Done(Outcome::Completed));
        }
        if self.pause_requested || pause_failed {
            return Err(Error::interrupted().with_hint(format!(
                "the balance that was followed ended before it was paused; nothing else was started; run the same convert again to finish the {} left",
                format_iec(left)
            )));
        }
        let Some(r) = self.req else {
            return Ok(Next::Done(Outcome::Cancelled));
        };
        replan(&r)?;
        (self.on_event)(Event::Notice(
            "the balance that was running has ended without finishing (it was cancelled): starting the conversion".to_owned(),
        ));
        Ok(Next::Again(Phase::Own { resume: false }))
    }
}

/// A balance the kernel failed (EINVAL, EIO, ...): what the kernel logged,
/// and for I/O errors which device's error counters rose.
/// `command` is what to run again (`convert`, `reclaim`).
pub(crate) fn kernel_failure(h: &FsHandle, e: Errno, command: &str) -> Error {
    let devices: Vec<String> = h
        .devices()
        .unwrap_or_default()
        .iter()
        .filter_map(|d| {
            Path::new(&d.path)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .collect();
    let said = btrfs::kernel_log_about(&devices, 8);
    // The cause rather than the summary line ("ended with status: -5").
    let cause = said
        .iter()
        .rev()
        .find(|l| !l.contains("ended with status"))
        .or(said.last());
    let mut hint = match cause {
        Some(last) => format!("the kernel said: \"{last}\"; see `dmesg | grep -i btrfs` for more"),
        None => "see what the kernel said: `dmesg | grep -i btrfs`".to_owned(),
    };
    if balance::is_io(e) {
        let bad: Vec<String> = h
            .devices()
            .unwrap_or_default()
            .iter()
            .filter_map(|d| {
                let s = h.device_stats(d.devid).ok()?;
                (s.read_errs + s.corruption_errs > 0).then(|| {
                    format!(
                        "device {} ({}): {} read, {} corruption errors",
                        d.devid, d.path, s.read_errs, s.corruption_errs
                    )
                })
            })
            .collect();
        if !bad.is_empty() {
            hint = format!(
                "{hint}; {}; run a scrub (btrfs scrub start -B {}) to find and repair or name the damaged files, restore or delete them, then run the same {command} again",
                bad.join(", "),
                h.path().display()
            );
        } else {
            hint = format!(
                "{hint}; run a scrub (btrfs scrub start -B {}) before trying again",
                h.path().display()
            );
        }
    }
    let mut err = Error::from_errno(e, "the balance failed on", h.path());
    err = err.with_hint(hint);
    err
}

/// How a conversion run ended.
#[derive(Debug)]
pub enum Finished {
    /// Every type is in its target profile (verified); the new `df`
    /// records.
    Completed(Vec<crate::model::space::SpaceRecord>),
    /// Paused (by a signal, or by someone else).
    Paused {
        /// Bytes still outside the targets.
        bytes_remaining: u64,
    },
    /// Someone cancelled it: [`Finished::error`] says what to do.
    Cancelled,
}

impl Finished {
    /// The last JSON record.
    pub fn record(&self) -> ResultRecord {
        match self {
            Finished::Completed(records) => ResultRecord {
                outcome: Outcome::Completed,
                records: Some(records.clone()),
                bytes_remaining: None,
            },
            Finished::Paused { bytes_remaining } => ResultRecord {
                outcome: Outcome::Paused,
                records: None,
                bytes_remaining: Some(*bytes_remaining),
            },
            Finished::Cancelled => ResultRecord {
                outcome: Outcome::Cancelled,
                records: None,
                bytes_remaining: None,
            },
        }
    }

    /// The error to end with (cancelled), if any.
    pub fn error(&self, mount_point: &Path) -> Option<Error> {
        matches!(self, Finished::Cancelled).then(|| {
            Error::new(
                ErrorKind::State,
                format!(
                    "the conversion on {} was cancelled by someone else",
                    mount_point.display()
                ),
            )
            .with_hint("run the same convert again to finish it: converted chunks are skipped")
        })
    }
}

/// The conversion planned again once the balance it followed has ended
/// without finishing, now with the replay of [`super::plan_convert_on`] (a
/// settled filesystem: the transaction is committed first, so the block
/// groups' usage no longer counts what a cancelled relocation had copied).
/// `Err`: a refusal; nothing was started.
fn replan_after_follow(
    root: &SysRoot,
    fs: &FsHandle,
    mount_point: &Path,
    req: &ConvertRequest,
) -> Result<()> {
    fs.sync()?;
    let state = read_state_at(root, fs, mount_point)?;
    let layout = super::read_layout(fs, &state);
    let plan = super::plan_convert_on(&state, req, layout.as_ref());
    plan.check(req.force).map_err(|e| {
        let why = "the balance that was running ended without finishing; nothing else was started";
        let hint = match e.hint() {
            Some(h) => format!("{why}; {h}"),
            None => why.to_owned(),
        };
        e.with_hint(hint)
    })
}

/// Runs the conversion on the open filesystem `fs` ([`run_balance`]), then
/// verifies a completed one from the kernel and reads the new `df`.
pub fn execute(
    root: &SysRoot,
    fs: &FsHandle,
    mount_point: &Path,
    start: Start,
    targets: Targets,
    signals: &OperationSignals,
    on_event: &mut dyn FnMut(Event),
) -> Result<Finished> {
    let mut replan = |req: &ConvertRequest| replan_after_follow(root, fs, mount_point, req);
    match run_balance(fs, start, targets, signals, on_event, &mut replan)? {
        Outcome::Completed => {
            let state = read_state_at(root, fs, mount_point)?;
            super::verify(&state, targets)?;
            fs.check_path_still_here(fs.path())?;
            Ok(Finished::Completed(
                crate::sys::kernel::btrfs::space_records(&fs.space_entries()?),
            ))
        }
        Outcome::Paused => Ok(Finished::Paused {
            bytes_remaining: remaining_bytes(fs, targets),
        }),
        Outcome::Cancelled => Ok(Finished::Cancelled),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_never_end_below_done_and_no_eta_at_the_start() {
        let mut m = Meter {
            targets: Targets {
                data: None,
                metadata: None,
            },
            initial: 100,
            first_done: None,
            expected: 0,
            done: 0,
            meter: progress::Meter::new(),
        };
        let p = m.progress(100);
        assert_eq!((p.eta_seconds, p.pace), (None, progress::Pace::Measuring));
        m.counters(4, 1);
        m.counters(4, 2);
        // The kernel's final copy of the counters can say more done than expected.
        m.counters(0, 0);
        m.counters(0, 0);
        let p = m.progress(0);
        assert_eq!((p.chunks_done, p.chunks_expected), (2, 4));
        m.counters(1, 3);
        let p = m.progress(0);
        assert_eq!((p.chunks_done, p.chunks_expected), (3, 3));
    }
}
