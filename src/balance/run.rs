//! Running a balance, whatever it does (a conversion's, `balance`'s): the
//! BALANCE_V2 ioctl on a thread of its own, progress in bytes, rate and ETA,
//! and on SIGINT/SIGTERM/SIGHUP a pause asked of the kernel at once; the
//! process never exits while the balance runs in it (the kernel would
//! cancel it). A [`Job`] says what the balance is and how much is left;
//! [`Sink`] draws its events through the [`Ui`] and its JSON Lines record.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::model::balance::BalanceInfo;
use crate::parse::size::format_iec;
use crate::report::envelope::Document;
use crate::report::progress::{self, Reading};
use crate::sys::kernel::balance::{self, Ended, Errno};
use crate::sys::kernel::btrfs::{self, FsHandle};
use crate::sys::kernel::ioctl::{BalanceArgs, BalanceEnd, BalanceState, BalanceStatus};
use crate::sys::kernel::signals::{self, DetachNotice, OperationSignals, Received};
use crate::ui::{self, Ui};

/// BALANCE_CTL on a thread of its own (reclaim cancels with it).
pub(crate) use crate::sys::kernel::balance::Pauser;

/// What a running balance reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Progress {
    /// Chunks to relocate (0 when unknown, e.g. after a remount).
    pub chunks_expected: u64,
    /// Chunks relocated.
    pub chunks_done: u64,
    /// Logical bytes still to move (a conversion: used outside the target
    /// profiles; a balance: used in the chunks it relocates). The kernel
    /// frees a chunk's bytes once the whole chunk is moved: between chunks
    /// this is estimated from the rate of the chunks moved so far.
    pub bytes_remaining: u64,
    /// Logical bytes moved since this run started (estimated between
    /// chunks, as `bytes_remaining`; never goes back).
    pub(crate) bytes_done: u64,
    /// Bytes per second over the last moves (20 s window); 0 while the
    /// rate is measured, stalled or pausing.
    pub rate_bytes_per_sec: f64,
    /// Estimated seconds left: `null` until the estimate is stable, and
    /// while stalled or pausing.
    pub eta_seconds: Option<f64>,
    /// What the balance is doing, as far as the counts tell.
    #[serde(default = "crate::report::progress::running")]
    pub pace: crate::report::progress::Pace,
}

/// What happened to the balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It finished.
    Completed,
    /// It is paused (by us on a signal, or by someone else).
    Paused,
    /// Someone cancelled it.
    Cancelled,
}

/// Events while a balance runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Counters and bytes.
    Progress(Progress),
    /// A signal arrived; the kernel was asked to pause after the current chunk.
    Pausing(Option<Received>),
    /// Another signal while pausing: it changes nothing, the pause goes on.
    StillPausing,
    /// Something to know (resuming, following, waiting).
    Notice(String),
    /// The balance runs in the kernel (sent once per run).
    Running,
}

/// How a job is named in what the run says.
#[derive(Debug, Clone, Copy)]
pub struct Words {
    /// The command to run again (`convert`, `balance`).
    pub command: &'static str,
    /// The job (`conversion`, `balance`).
    pub job: &'static str,
    /// What its moved data is (`converted`, `spread`).
    pub done: &'static str,
}

/// What a balance run does, as the run loop needs it.
pub trait Job {
    /// The balance a new run starts.
    fn args(&self) -> BalanceArgs;
    /// Logical bytes still to move (progress; 0: done).
    fn remaining(&self, h: &FsHandle) -> u64;
    /// A balance someone else started is this job's (same kind of
    /// balance): it is followed rather than refused.
    fn is_mine(&self, s: &BalanceStatus) -> bool;
    /// Another balance, as a refusal names it.
    fn describe(&self, s: &BalanceStatus) -> String {
        let b = BalanceInfo::from_status(s);
        if b.data_target.is_some() || b.metadata_target.is_some() {
            format!("a conversion to {}", b.targets().describe())
        } else {
            "a balance without conversion".to_owned()
        }
    }
    /// A balance it followed ended unfinished: `Ok(None)` starts this
    /// job's own (planned again on the settled filesystem), `Ok(Some(o))`
    /// ends the run with `o` (a resume has nothing of its own to start:
    /// cancelled; nothing is left: completed); `Err` refuses, nothing
    /// started.
    fn replan(&mut self, h: &FsHandle) -> Result<Option<Outcome>>;
    /// Its words.
    fn words(&self) -> Words;
}

/// How the run begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// Starts the job's balance.
    New,
    /// Resumes the paused one.
    Resume,
    /// Follows the one running (or being cancelled) until it ends.
    Follow,
}

/// Progress bookkeeping of one run.
///
/// The kernel frees a chunk's bytes only once the whole chunk is
/// relocated (a data chunk holds up to 1 GiB, and the target profile's
/// usage grows as late), so the bytes it says are left fall a chunk at a
/// time. Between two chunks the bytes moved are interpolated: at the rate
/// of the chunks moved so far, through the chunk being moved (the average
/// of those left, per the kernel's chunk counters), slowing down near its
/// end so that the count never passes it and never stops; the count shown
/// never goes back.
pub(crate) struct Meter {
    initial: u64,
    first_done: Option<u64>,
    expected: u64,
    done: u64,
    /// When the run began (the rate of the chunks moved is taken from it).
    began: Instant,
    /// Bytes the kernel says are moved, and since when.
    confirmed: (u64, Instant),
    /// The count shown last (never goes back).
    shown: u64,
    /// Rate and ETA of the bytes moved (model::progress's rules).
    meter: progress::Meter,
}

/// Share of a chunk's bytes the interpolation reaches in a straight line;
/// the rest is approached ever more slowly.
const STRAIGHT: f64 = 0.9;

/// The share of a chunk moved after `x` times the time a chunk took so far:
/// `x` up to [`STRAIGHT`], then approaching 1 without reaching it.
fn chunk_share(x: f64) -> f64 {
    if x <= STRAIGHT {
        x.max(0.0)
    } else {
        let rest = 1.0 - STRAIGHT;
        1.0 - rest * (-(x - STRAIGHT) / rest).exp()
    }
}

impl Meter {
    fn new(initial: u64) -> Self {
        Self::new_at(initial, Instant::now())
    }

    fn new_at(initial: u64, now: Instant) -> Self {
        Self {
            initial,
            first_done: None,
            expected: 0,
            done: 0,
            began: now,
            confirmed: (0, now),
            shown: 0,
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

    fn progress(&mut self, remaining: u64) -> Progress {
        self.progress_at(Instant::now(), remaining)
    }

    /// The bytes moved by `now`: the kernel's, and between chunks the
    /// interpolation (none before the first chunk has moved, nor once
    /// pausing).
    fn estimate(&mut self, now: Instant, remaining: u64) -> u64 {
        let confirmed = self.initial.saturating_sub(remaining);
        if confirmed != self.confirmed.0 {
            self.confirmed = (confirmed, now);
        }
        let (base, since) = self.confirmed;
        let chunks_left = self.expected.saturating_sub(self.done);
        let took = since.saturating_duration_since(self.began).as_secs_f64();
        let mut estimate = base;
        if base > 0 && remaining > 0 && chunks_left > 0 && took > 0.0 && !self.meter.is_pausing() {
            let rate = base as f64 / took;
            let chunk = (remaining / chunks_left).max(1);
            let x = rate * now.saturating_duration_since(since).as_secs_f64() / chunk as f64;
            let ahead = (chunk_share(x) * chunk as f64) as u64;
            estimate = base + ahead.min(chunk - 1).min(remaining - 1);
        }
        self.shown = self.shown.max(estimate).min(self.initial);
        self.shown
    }

    fn progress_at(&mut self, now: Instant, remaining: u64) -> Progress {
        let bytes_done = self.estimate(now, remaining);
        let r = self.meter.observe_at(now, bytes_done, self.initial);
        Progress {
            chunks_expected: self.expected.max(self.done),
            chunks_done: self.done,
            bytes_remaining: self.initial - bytes_done,
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

/// One run: the job, the signals it heeds, where its events go, and
/// whether a pause was asked for.
struct Run<'a> {
    h: &'a FsHandle,
    job: &'a mut dyn Job,
    signals: &'a OperationSignals,
    on_event: &'a mut dyn FnMut(Event),
    pause_requested: bool,
}

/// After a balance ended: the run's outcome, or how to go on.
enum Next {
    Done(Outcome),
    Again(Begin),
}

/// Runs `job`'s balance on the open filesystem `h` from `begin`, reports
/// progress through `on_event`, and on SIGINT/SIGTERM/SIGHUP asks the
/// kernel to pause it at once, then waits until the balance has stopped:
/// the process never exits while the balance ioctl runs in it, whatever
/// signals follow. When a followed balance ends without finishing,
/// [`Job::replan`] decides whether the job's own may start.
pub fn run_balance(
    h: &FsHandle,
    job: &mut dyn Job,
    begin: Begin,
    signals: &OperationSignals,
    on_event: &mut dyn FnMut(Event),
) -> Result<Outcome> {
    let mut run = Run {
        h,
        job,
        signals,
        on_event,
        pause_requested: false,
    };
    let mut begin = begin;
    loop {
        let mut meter = Meter::new(run.job.remaining(h));
        let pauser = Pauser::new(h)?;
        let waited = run.wait(begin, &mut meter, &pauser);
        let pause_result = pauser.finish();
        match run.ended(waited?, &mut meter, pause_result.is_err())? {
            Next::Done(outcome) => return Ok(outcome),
            Next::Again(next) => begin = next,
        }
    }
}

impl Run<'_> {
    fn sample(&mut self, meter: &mut Meter) -> Progress {
        if let Ok(Some(s)) = self.h.balance_status() {
            meter.counters(s.expected, s.completed);
        }
        meter.progress(self.job.remaining(self.h))
    }

    /// Starts our balance (or follows the one running) and waits until it
    /// ends; signals ask the kernel to pause it; progress twice a second.
    fn wait(&mut self, begin: Begin, meter: &mut Meter, pauser: &Pauser) -> Result<Waited> {
        let h = self.h;
        let worker = match begin {
            Begin::New => Some(balance::start(h, Some(self.job.args()))?),
            Begin::Resume => Some(balance::start(h, None)?),
            Begin::Follow => None,
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
                let p = self.sample(meter);
                (self.on_event)(Event::Progress(p));
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
    fn ended(&mut self, waited: Waited, meter: &mut Meter, pause_failed: bool) -> Result<Next> {
        let h = self.h;
        let m = h.path().display();
        let w = self.job.words();
        match waited {
            Waited::Own(Ended::Kernel(BalanceEnd::Finished { expected, completed })) => {
                meter.counters(expected, completed);
                let p = meter.progress(self.job.remaining(h));
                (self.on_event)(Event::Progress(p));
                Ok(Next::Done(Outcome::Completed))
            }
            Waited::Own(Ended::Kernel(BalanceEnd::BtrfsError(code))) => Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "the kernel refused to start the balance on {m}: another exclusive operation (device add or remove, replace, resize) is running (btrfs error {code})"
                ),
            )
            .with_hint(format!("wait until it ends, then run the same {} again", w.command))),
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
                format!(
                    "the {} ran out of space on {m}; what was {} stays {}",
                    w.job, w.done, w.done
                ),
            )
            .with_hint(format!(
                "free space (delete files, or btrfs balance start -dusage=10) or add a device, then run the same {} again",
                w.command
            ))),
            Waited::Own(Ended::OtherFilesystem) => Err(Error::new(
                ErrorKind::State,
                format!("{m} is no longer the filesystem {} that was planned on", h.fsid()),
            )),
            Waited::Own(Ended::Failed(e)) => Err(kernel_failure(h, e, w.command)),
            Waited::Paused => Ok(Next::Done(Outcome::Paused)),
            Waited::Gone => self.followed_gone(meter, pause_failed),
        }
    }

    /// Someone else started a balance at the same instant: follow it when
    /// it is this job's.
    fn another_started(&mut self) -> Result<Next> {
        let h = self.h;
        let m = h.path().display();
        let w = self.job.words();
        match h.balance_status()? {
            Some(s) if self.job.is_mine(&s) && !self.pause_requested => {
                (self.on_event)(Event::Notice(format!(
                    "another process started the same kind of balance on {m} at the same moment: following it"
                )));
                Ok(Next::Again(Begin::Follow))
            }
            Some(s) => {
                let running = s.state.contains(BalanceState::RUNNING);
                Err(Error::new(
                    ErrorKind::Refused,
                    format!(
                        "cannot {}: {} is {} on {m}",
                        w.command,
                        self.job.describe(&s),
                        if running { "running" } else { "paused" }
                    ),
                )
                .with_hint(format!(
                    "watch it with `btrfs-lab {} {m} --status`, or `--pause` / `--resume` / `--cancel` it",
                    w.command
                )))
            }
            None => Err(Error::new(
                ErrorKind::Busy,
                format!("another balance was running on {m} when this one was to start; it has ended since"),
            )
            .with_hint(format!("run the same {} again", w.command))),
        }
    }

    /// The followed balance is gone: finished, or ended unfinished (then
    /// the job's own starts once planned again, unless a pause was asked
    /// for).
    fn followed_gone(&mut self, meter: &mut Meter, pause_failed: bool) -> Result<Next> {
        let left = self.job.remaining(self.h);
        let w = self.job.words();
        if left == 0 {
            (self.on_event)(Event::Progress(meter.progress(0)));
            return Ok(Next::Done(Outcome::Completed));
        }
        if self.pause_requested || pause_failed {
            return Err(Error::interrupted().with_hint(format!(
                "the balance that was followed ended before it was paused; nothing else was started; run the same {} again to finish the {} left",
                w.command,
                format_iec(left)
            )));
        }
        if let Some(outcome) = self.job.replan(self.h)? {
            return Ok(Next::Done(outcome));
        }
        (self.on_event)(Event::Notice(format!(
            "the balance that was running has ended without finishing (it was cancelled): starting the {}",
            w.job
        )));
        Ok(Next::Again(Begin::New))
    }
}

/// A balance the kernel failed (EINVAL, EIO, ...): what the kernel logged,
/// and for I/O errors which device's error counters rose.
/// `command` is what to run again (`convert`, `balance`, `reclaim`).
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
                (s.read_errs.saturating_add(s.corruption_errs) > 0).then(|| {
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
    Error::from_errno(e, "the balance failed on", h.path()).with_hint(hint)
}

/// A command's JSON Lines record, as a balance run sends its events.
pub trait RunRecord: Document {
    /// `{"event":"progress",...}`.
    fn progress(p: Progress) -> Self;
    /// `{"event":"pausing"}`.
    fn pausing() -> Self;
    /// `{"event":"notice","message":...}`.
    fn notice(message: String) -> Self;
}

/// Where the events of a running balance go: a bar on a terminal, a plain
/// line every few seconds otherwise, the command's JSON Lines records with
/// `--json`; a `--background` run's parent is told once it runs.
pub struct Sink<'a, R> {
    ui: &'a dyn Ui,
    detached: Option<DetachNotice>,
    track: ui::Track<'a>,
    record: std::marker::PhantomData<R>,
}

impl<'a, R: RunRecord> Sink<'a, R> {
    /// For `command` (`convert`), whose progress says `doing`
    /// (`converting`).
    pub fn new(
        ui: &'a dyn Ui,
        detached: Option<DetachNotice>,
        command: &'static str,
        doing: &'static str,
    ) -> Self {
        Self {
            ui,
            detached,
            // The command streams its own records.
            track: ui::Track::new(ui, command, doing).records(false),
            record: std::marker::PhantomData,
        }
    }

    /// Says one event.
    pub fn event(&mut self, e: Event) {
        match e {
            Event::Progress(p) => {
                if self.ui.json() {
                    ui::emit(self.ui, &R::progress(p));
                } else {
                    let chunks = format!("chunk {} of {}", p.chunks_done, p.chunks_expected);
                    self.track.show(&reading(&p), Some(&chunks));
                }
            }
            Event::Pausing(which) => {
                let why = match which {
                    Some(signals::Received::Hangup) => "the terminal went away (SIGHUP)",
                    Some(signals::Received::Terminate) => "terminated (SIGTERM)",
                    _ => "interrupted",
                };
                ui::emit(self.ui, &R::pausing());
                self.track.println(&format!(
                    "{why}: pausing the balance after the current chunk (it is paused, never cancelled; this waits until the kernel has paused it)"
                ));
            }
            Event::Running => {
                if let Some(mut n) = self.detached.take() {
                    n.started();
                }
            }
            Event::StillPausing => {
                self.track
                    .println("pausing, please wait: the kernel finishes the current chunk first");
            }
            Event::Notice(message) => {
                ui::emit(self.ui, &R::notice(message.clone()));
                self.track.println(&message);
            }
        }
    }

    /// The progress display ends (its last state stays in a log).
    pub fn finish(self) {
        self.track.finish();
    }
}

/// A balance's progress as the one progress renderer reads it: the bytes
/// moved by this run of the bytes it found to move.
fn reading(p: &Progress) -> Reading {
    Reading {
        done_bytes: p.bytes_done,
        total_bytes: p.bytes_done + p.bytes_remaining,
        rate_bytes_per_sec: (p.rate_bytes_per_sec > 0.0).then_some(p.rate_bytes_per_sec),
        eta_seconds: p.eta_seconds,
        pace: p.pace,
        idle_seconds: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_never_end_below_done_and_no_eta_at_the_start() {
        let mut m = Meter::new(100);
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

    #[test]
    fn bytes_move_between_chunks_at_the_rate_so_far_and_an_eta_shows() {
        const G: u64 = 1 << 30;
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let mut m = Meter::new_at(4 * G, t0);
        m.counters(4, 0);
        // Before the first chunk has moved: nothing to interpolate from.
        assert_eq!(m.progress_at(at(5.0), 4 * G).bytes_done, 0);
        m.counters(4, 1);
        assert_eq!(m.progress_at(at(10.0), 3 * G).bytes_done, G);
        // Half-way through the second chunk at 1 GiB per 10 s.
        let p = m.progress_at(at(15.0), 3 * G);
        assert_eq!(p.bytes_done, G + G / 2);
        assert_eq!(p.bytes_remaining, 4 * G - p.bytes_done);
        // Samples every half second: a rate, and a stable ETA.
        let mut last = p.bytes_done;
        let mut eta = None;
        for i in 1..=8 {
            let p = m.progress_at(at(15.0 + 0.5 * i as f64), 3 * G);
            assert!(p.bytes_done > last, "{p:?}");
            last = p.bytes_done;
            eta = p.eta_seconds;
        }
        let eta = eta.expect("an ETA once the interpolated count moves steadily");
        assert!((10.0..30.0).contains(&eta), "{eta}");
        // A chunk slower than the others: the count slows down short of
        // the chunk's end, and never passes it.
        let slow = m.progress_at(at(25.0), 3 * G).bytes_done;
        let slower = m.progress_at(at(30.0), 3 * G).bytes_done;
        assert!(
            last < slow && slow < slower && slower < 2 * G,
            "{slow} {slower}"
        );
        // A smaller chunk than the average ends: the count never goes back.
        m.counters(4, 2);
        let p = m.progress_at(at(61.0), 3 * G - G / 4);
        assert_eq!(p.bytes_done, slower);
        // Done.
        m.counters(4, 4);
        let p = m.progress_at(at(62.0), 0);
        assert_eq!((p.bytes_done, p.bytes_remaining), (4 * G, 0));
    }

    #[test]
    fn no_interpolation_once_pausing() {
        const G: u64 = 1 << 30;
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let mut m = Meter::new_at(2 * G, t0);
        m.counters(2, 1);
        m.progress_at(at(10.0), G);
        m.pausing();
        assert_eq!(m.progress_at(at(15.0), G).bytes_done, G);
    }
}
