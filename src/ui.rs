//! The `Ui` port: how a job talks to the person (or the script) running it
//! without knowing about terminals, colour or clap.
//!
//! A job gets a `&dyn Ui` and says through it what it would otherwise
//! print: notes (something not shown, and why), warnings with what to do,
//! errors it survives (one sandbox of several could not be removed), the
//! plan before a confirmation, progress, and JSON Lines events. The CLI
//! implements it (`cli/output.rs`: colour, terminal, `--quiet`, `--json`);
//! tests pass a [`RecordingUi`] and assert on what the job said. Library
//! code prints nothing itself: this module is the only place outside
//! `cli/` that writes to stderr (through [`StderrUi`], the default of a
//! guard that must report an error from `Drop`).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;

use crate::error::{Error, ErrorKind, Result};
use crate::report::envelope::{Document, Enveloped};
use crate::report::progress::{Meter, ProgressEvent, ProgressRecord, Reading, pace_words};
use crate::report::text::escape_control;

/// A progress indicator a job updates; drawn (or not) by the `Ui` that made it.
pub trait Progress {
    /// The total (bytes, chunks, seconds: whatever the template counts).
    fn set_length(&self, total: u64);
    /// How far it is.
    fn set_position(&self, done: u64);
    /// The text after the bar (rate, ETA, the current step).
    fn set_message(&self, message: String);
    /// Removes the indicator (the job is done with it).
    fn finish(&self);
    /// Whether it is drawn (a hidden one is not: the job then says its
    /// progress some other way, if at all).
    fn shown(&self) -> bool {
        false
    }
    /// A line printed above the indicator while it is drawn (a drawn one
    /// must not be overwritten by a plain write to its stream).
    fn println(&self, _line: &str) {}
}

/// What a job may say while it runs. Every method is cheap and never
/// fails: output problems are the implementation's to remember and report
/// at the end (stdout errors, `cli/output.rs`).
pub trait Ui {
    /// `--quiet`: only errors (and JSON with `--json`) go out.
    fn quiet(&self) -> bool;
    /// `--json`: the report goes out as JSON, so text meant for the person
    /// (a plan, a note repeating the report) may be left out.
    fn json(&self) -> bool;
    /// A note (something not shown, or ignored, and why); nothing with `--quiet`.
    fn note(&self, message: &str);
    /// A warning and what to do about it; nothing with `--quiet`.
    fn warn(&self, message: &str, hint: &str);
    /// An error the job goes on after (one item of several failed); shown
    /// even with `--quiet`. The job's status says something failed.
    fn error(&self, error: &Error);
    /// Text for the person at the terminal (the plan before its
    /// confirmation); nothing with `--quiet`.
    fn say(&self, text: &str);
    /// A line of a text run's own story on stdout, before its report
    /// ("creating a sandbox..."); nothing with `--json` or `--quiet`.
    fn status(&self, text: &str);
    /// Asks `question` before a change, unless `yes`. Refuses (an error of
    /// kind `Refused`) when nobody can answer, or when `--quiet` hid the
    /// plan to confirm.
    fn confirm(&self, question: &str, yes: bool) -> Result<()>;
    /// A progress indicator drawn with `template` (indicatif's syntax:
    /// `{bar:30} {pos}/{len} {msg}`); a hidden one when progress is not shown.
    fn progress(&self, template: &str) -> Box<dyn Progress>;
    /// One JSON Lines record, already in its envelope (see [`emit`]), or
    /// the error that kept it from being serialized.
    fn event_line(&self, line: std::result::Result<String, serde_json::Error>);
    /// The job has begun to change the system: what is held is written,
    /// later records go out at once, and an error ends the stream with an
    /// error record.
    fn started(&self);
    /// The step between a confirmation and the first change: what is held
    /// goes out and stdout is checked, so that an unwritable stdout refuses
    /// the command while nothing was changed. `look` is the command that
    /// shows what was done, for the error when the report cannot be
    /// written afterwards.
    fn before_change(&self, look: &str) -> Result<()> {
        let _ = look;
        self.started();
        Ok(())
    }
    /// A size as the person asked to see sizes (`--units`); IEC by default.
    fn size(&self, bytes: u64) -> String {
        crate::parse::size::format_iec(bytes)
    }
}

/// Progress as log lines, where no bar is drawn (no terminal): the first
/// state at once, then at most one line every `every`, and the last state
/// once more at the end when it was not the last line written, so a log
/// always ends with where the work ended (not with the 0 % of its start).
#[derive(Debug)]
pub struct LogLines {
    every: std::time::Duration,
    last: Option<std::time::Instant>,
    pending: Option<String>,
    written: Option<String>,
}

impl LogLines {
    /// Lines at most every `every`.
    pub fn new(every: std::time::Duration) -> Self {
        Self {
            every,
            last: None,
            pending: None,
            written: None,
        }
    }

    /// The line to write now, if one is due; otherwise `line` is kept as
    /// the latest state, for [`LogLines::finish`] (unless it is the line
    /// last written: the log does not end with the same line twice).
    pub fn update(&mut self, line: String) -> Option<String> {
        if self.last.is_none_or(|t| t.elapsed() >= self.every) {
            self.last = Some(std::time::Instant::now());
            self.pending = None;
            self.written = Some(line.clone());
            Some(line)
        } else {
            self.pending = (self.written.as_ref() != Some(&line)).then_some(line);
            None
        }
    }

    /// The latest state, if it was not written.
    pub fn finish(&mut self) -> Option<String> {
        self.pending.take()
    }
}

/// A job's progress as the person (or the script) sees it: a bar on a
/// terminal (bytes as the measure, the words after it fitted to the
/// width), a log line every few seconds without one (ending with the last
/// state), and with `--json` a [`ProgressRecord`] JSON Lines record at most
/// once a second (when the job streams its own records instead, it says so
/// with [`Track::records`]`(false)`). The one renderer of
/// [`crate::report::progress`]'s readings.
pub struct Track<'a> {
    ui: &'a dyn Ui,
    label: String,
    operation: Option<&'static str>,
    bar: Box<dyn Progress>,
    lines: LogLines,
    records: LogLines,
    log: bool,
}

/// How often a log line is written when no bar is drawn.
const TRACK_LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

impl<'a> Track<'a> {
    /// The progress of `operation` (its name in JSON records), drawn after
    /// `label` (`converting`, `replacing`).
    pub fn new(ui: &'a dyn Ui, operation: &'static str, label: &str) -> Self {
        let bar = if ui.json() || ui.quiet() {
            Box::new(HiddenProgress) as Box<dyn Progress>
        } else {
            ui.progress(&format!("{label} {{bar:12}} {{percent:>3}}% {{wide_msg}}"))
        };
        Self {
            ui,
            label: label.to_owned(),
            operation: Some(operation),
            bar,
            lines: LogLines::new(TRACK_LINE_EVERY),
            records: LogLines::new(std::time::Duration::from_secs(1)),
            log: true,
        }
    }

    /// Whether log lines are written when no bar is drawn (the default);
    /// `false` for a measurement whose report is the only output a script
    /// wants (probe-dio, read-test: a bar on a terminal, nothing in a log).
    pub fn log_lines(mut self, on: bool) -> Self {
        self.log = on;
        self
    }

    /// Whether this track writes the JSON records itself (the default) or
    /// the job streams records of its own (`convert`).
    pub fn records(mut self, own: bool) -> Self {
        if !own {
            self.operation = None;
        }
        self
    }

    /// The words after the bar: `1.20GiB of 4.00GiB, 250.00MiB/s, ETA 0m12s
    /// (STEP)` (sizes as `--units` asks). The step comes last: where the
    /// width is short, the detail is cut, not the rate or the ETA.
    pub fn words(&self, r: &Reading, step: Option<&str>) -> String {
        let sizes = if r.total_bytes > 0 {
            format!(
                "{} of {}",
                self.ui.size(r.done_bytes),
                self.ui.size(r.total_bytes)
            )
        } else {
            self.ui.size(r.done_bytes)
        };
        let pace = pace_words(r, |b| format!("{}/s", self.ui.size(b.round() as u64)));
        match step {
            Some(s) if !s.is_empty() => format!("{sizes}, {pace} ({})", escape_control(s)),
            _ => format!("{sizes}, {pace}"),
        }
    }

    /// Shows `r` (on `step`, when the work has steps).
    pub fn show(&mut self, r: &Reading, step: Option<&str>) {
        if self.ui.json() {
            if let Some(operation) = self.operation {
                let record = ProgressRecord {
                    event: ProgressEvent::Progress,
                    operation: operation.to_owned(),
                    step: step.map(str::to_owned),
                    reading: *r,
                };
                let line = serde_json::to_string(&Enveloped::new(&record));
                match line {
                    Ok(line) => {
                        if let Some(l) = self.records.update(line) {
                            self.ui.event_line(Ok(l));
                        }
                    }
                    Err(e) => self.ui.event_line(Err(e)),
                }
            }
            return;
        }
        let words = self.words(r, step);
        if self.bar.shown() {
            self.bar.set_length(r.total_bytes.max(1));
            self.bar
                .set_position(r.done_bytes.min(r.total_bytes.max(1)));
            self.bar.set_message(words);
        } else if self.log
            && let Some(line) = self.lines.update(format!("{}: {words}\n", self.label))
        {
            self.ui.say(&line);
        }
    }

    /// A line above the bar, or on its own when no bar is drawn.
    pub fn println(&self, line: &str) {
        if self.bar.shown() {
            self.bar.println(line);
        } else {
            self.ui.say(&format!("{line}\n"));
        }
    }

    /// Whether a bar is drawn.
    pub fn drawn(&self) -> bool {
        self.bar.shown()
    }

    /// Removes the bar (nothing of it stays on the screen) and writes the
    /// last state when it was not the last line or record written.
    pub fn finish(mut self) {
        self.bar.finish();
        if let Some(line) = self.lines.finish() {
            self.ui.say(&line);
        }
        if let Some(record) = self.records.finish() {
            self.ui.event_line(Ok(record));
        }
    }
}

/// A [`Track`] with its [`Meter`], behind the [`Progress`] trait: for a job
/// that counts bytes with `set_length`/`set_position` and names its step
/// with `set_message` (a file's name). Observes at most ten times a second.
pub struct TrackedBar<'a> {
    state: std::cell::RefCell<TrackedState<'a>>,
}

struct TrackedState<'a> {
    track: Option<Track<'a>>,
    meter: Meter,
    total: u64,
    done: u64,
    step: Option<String>,
    last: Option<std::time::Instant>,
}

impl<'a> TrackedBar<'a> {
    /// See [`Track::new`].
    pub fn new(ui: &'a dyn Ui, operation: &'static str, label: &str) -> Self {
        Self {
            state: std::cell::RefCell::new(TrackedState {
                track: Some(Track::new(ui, operation, label)),
                meter: Meter::new(),
                total: 0,
                done: 0,
                step: None,
                last: None,
            }),
        }
    }

    /// See [`Track::records`]: `false` for a command whose `--json` output
    /// is one document (probe-dio, read-test).
    pub fn records(self, own: bool) -> Self {
        {
            let mut st = self.state.borrow_mut();
            st.track = st.track.take().map(|t| t.records(own));
        }
        self
    }

    /// See [`Track::log_lines`].
    pub fn log_lines(self, on: bool) -> Self {
        {
            let mut st = self.state.borrow_mut();
            st.track = st.track.take().map(|t| t.log_lines(on));
        }
        self
    }

    fn update(&self, force: bool) {
        let mut st = self.state.borrow_mut();
        if !force
            && st
                .last
                .is_some_and(|t| t.elapsed() < std::time::Duration::from_millis(100))
        {
            return;
        }
        st.last = Some(std::time::Instant::now());
        let (done, total) = (st.done, st.total);
        let r = st.meter.observe(done, total);
        let step = st.step.clone();
        if let Some(t) = st.track.as_mut() {
            t.show(&r, step.as_deref());
        }
    }
}

impl Progress for TrackedBar<'_> {
    fn set_length(&self, total: u64) {
        self.state.borrow_mut().total = total;
    }
    fn set_position(&self, done: u64) {
        self.state.borrow_mut().done = done;
        self.update(false);
    }
    fn set_message(&self, message: String) {
        self.state.borrow_mut().step = Some(message);
    }
    fn finish(&self) {
        if self.state.borrow().track.is_none() {
            return;
        }
        // The last state, when there was one (a job refused before it began
        // has none to show).
        if self.state.borrow().last.is_some() {
            self.update(true);
        }
        if let Some(t) = self.state.borrow_mut().track.take() {
            t.finish();
        }
    }
    fn shown(&self) -> bool {
        self.state.borrow().track.as_ref().is_some_and(Track::drawn)
    }
    fn println(&self, line: &str) {
        if let Some(t) = self.state.borrow().track.as_ref() {
            t.println(line);
        }
    }
}

/// Sends `record` as one JSON Lines event through `ui`, in its envelope.
pub fn emit<T: Document>(ui: &dyn Ui, record: &T) {
    ui.event_line(serde_json::to_string(&Enveloped::new(record)));
}

/// A progress indicator that draws nothing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HiddenProgress;

impl Progress for HiddenProgress {
    fn set_length(&self, _: u64) {}
    fn set_position(&self, _: u64) {}
    fn set_message(&self, _: String) {}
    fn finish(&self) {}
}

/// The library's own plain `Ui`: notes, warnings and errors as one
/// `btrfs-lab: ...` line on stderr, no colour, no progress, no JSON; it
/// asks only on a terminal. For guards that must report from `Drop` when
/// nobody gave them a `Ui`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StderrUi {
    /// Leave out notes, warnings and plans.
    pub quiet: bool,
}

impl StderrUi {
    fn line(text: &str) {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

impl Ui for StderrUi {
    fn quiet(&self) -> bool {
        self.quiet
    }
    fn json(&self) -> bool {
        false
    }
    fn note(&self, message: &str) {
        if !self.quiet {
            Self::line(&format!("btrfs-lab: note: {}\n", escape_control(message)));
        }
    }
    fn warn(&self, message: &str, hint: &str) {
        if !self.quiet {
            Self::line(&format!(
                "btrfs-lab: warning: {}\nhint: {}\n",
                escape_control(message),
                escape_control(hint)
            ));
        }
    }
    fn error(&self, error: &Error) {
        let mut text = format!("btrfs-lab: error: {}\n", escape_control(error.message()));
        if let Some(h) = error.hint() {
            text.push_str(&format!("hint: {}\n", escape_control(h)));
        }
        Self::line(&text);
    }
    fn say(&self, text: &str) {
        if !self.quiet {
            Self::line(text);
        }
    }
    fn status(&self, text: &str) {
        self.say(text);
    }
    fn confirm(&self, question: &str, yes: bool) -> Result<()> {
        confirm_on_terminal(question, yes, self.quiet)
    }
    fn progress(&self, _template: &str) -> Box<dyn Progress> {
        Box::new(HiddenProgress)
    }
    fn event_line(&self, _line: std::result::Result<String, serde_json::Error>) {}
    fn started(&self) {}
}

/// The confirmation rule every `Ui` that talks to a terminal follows:
/// `yes` confirms; `--quiet` (the plan was not shown) and a stdin that is
/// not a terminal refuse with what to pass instead; otherwise the question
/// is asked on stderr and only `y`/`yes` confirms.
pub fn confirm_on_terminal(question: &str, yes: bool, quiet: bool) -> Result<()> {
    if yes {
        return Ok(());
    }
    if quiet {
        return Err(Error::new(
            ErrorKind::Refused,
            "confirmation needed, but --quiet hides the plan to confirm",
        )
        .with_hint("pass --yes to confirm, or leave out --quiet to see the plan and be asked"));
    }
    if !std::io::stdin().is_terminal() {
        return Err(Error::new(
            ErrorKind::Refused,
            "confirmation needed, but stdin is not a terminal",
        )
        .with_hint("pass --yes to confirm, or --dry-run to only see the plan"));
    }
    {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{question} [y/N] ");
        let _ = err.flush();
    }
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot read the answer: {e}")))?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Refused,
            "not confirmed; nothing was changed",
        ))
    }
}

/// One thing a job said, as a [`RecordingUi`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) enum Said {
    /// [`Ui::note`].
    Note(String),
    /// [`Ui::warn`]: message and hint.
    Warn(String, String),
    /// [`Ui::error`]: the message.
    Error(String),
    /// [`Ui::say`].
    Say(String),
    /// [`Ui::status`].
    Status(String),
    /// [`Ui::confirm`]: the question, and whether `yes` was passed.
    Confirm(String, bool),
    /// [`Ui::event_line`]: the serialized record.
    Event(String),
    /// [`Ui::started`].
    Started,
    /// [`Ui::progress`]: the template.
    Progress(String),
}

/// A `Ui` for tests: keeps everything a job says, answers confirmations
/// with a fixed answer, draws nothing.
#[derive(Debug, Default)]
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) struct RecordingUi {
    /// What `quiet()` answers.
    pub quiet: bool,
    /// What `json()` answers.
    pub json: bool,
    /// What an unanswered `confirm` (without `yes`) returns: confirm or refuse.
    pub(crate) answer_yes: bool,
    said: Mutex<Vec<Said>>,
}

#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
impl RecordingUi {
    /// A recording Ui that refuses confirmations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything said so far, in order.
    pub fn said(&self) -> Vec<Said> {
        self.said.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn push(&self, s: Said) {
        self.said.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }
}

impl Ui for RecordingUi {
    fn quiet(&self) -> bool {
        self.quiet
    }
    fn json(&self) -> bool {
        self.json
    }
    fn note(&self, message: &str) {
        self.push(Said::Note(message.to_owned()));
    }
    fn warn(&self, message: &str, hint: &str) {
        self.push(Said::Warn(message.to_owned(), hint.to_owned()));
    }
    fn error(&self, error: &Error) {
        self.push(Said::Error(error.message().to_owned()));
    }
    fn say(&self, text: &str) {
        self.push(Said::Say(text.to_owned()));
    }
    fn status(&self, text: &str) {
        self.push(Said::Status(text.to_owned()));
    }
    fn confirm(&self, question: &str, yes: bool) -> Result<()> {
        self.push(Said::Confirm(question.to_owned(), yes));
        if yes || self.answer_yes {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Refused,
                "not confirmed; nothing was changed",
            ))
        }
    }
    fn progress(&self, template: &str) -> Box<dyn Progress> {
        self.push(Said::Progress(template.to_owned()));
        Box::new(HiddenProgress)
    }
    fn event_line(&self, line: std::result::Result<String, serde_json::Error>) {
        match line {
            Ok(l) => self.push(Said::Event(l)),
            Err(e) => self.push(Said::Error(e.to_string())),
        }
    }
    fn started(&self) {
        self.push(Said::Started);
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn log_lines_end_with_the_last_state() {
        let mut l = LogLines::new(std::time::Duration::from_secs(3600));
        assert_eq!(l.update("0%".into()), Some("0%".into()));
        assert_eq!(l.update("50%".into()), None);
        assert_eq!(l.update("100%".into()), None);
        assert_eq!(l.finish(), Some("100%".into()));
        assert_eq!(l.finish(), None);
        let mut l = LogLines::new(std::time::Duration::ZERO);
        assert_eq!(l.update("a".into()), Some("a".into()));
        assert_eq!(l.update("b".into()), Some("b".into()));
        assert_eq!(l.finish(), None, "the last state was written");
        // A state that did not change since the line written is not repeated.
        let mut l = LogLines::new(std::time::Duration::from_secs(3600));
        assert_eq!(l.update("pausing".into()), Some("pausing".into()));
        assert_eq!(l.update("pausing".into()), None);
        assert_eq!(l.finish(), None);
    }

    use super::*;

    #[test]
    fn recording_ui_keeps_what_was_said_and_refuses_unless_told() {
        let ui = RecordingUi::new();
        ui.note("n");
        ui.warn("w", "h");
        ui.say("plan\n");
        let refused = ui.confirm("Go?", false).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Refused);
        assert!(ui.confirm("Go?", true).is_ok());
        assert_eq!(
            ui.said(),
            vec![
                Said::Note("n".into()),
                Said::Warn("w".into(), "h".into()),
                Said::Say("plan\n".into()),
                Said::Confirm("Go?".into(), false),
                Said::Confirm("Go?".into(), true),
            ]
        );
    }

    #[test]
    fn quiet_refuses_to_confirm_a_plan_it_did_not_show() {
        let refused = confirm_on_terminal("Proceed?", false, true).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Refused);
        assert!(
            refused.message().contains("--quiet"),
            "{}",
            refused.message()
        );
        assert!(confirm_on_terminal("Proceed?", true, true).is_ok());
    }
}
