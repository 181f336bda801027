//! Where output goes and how it looks: JSON or text, colour or not,
//! errors as one line, confirmation prompts.

use std::io::{self, IsTerminal, Write};
use std::sync::Mutex;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use owo_colors::OwoColorize;

use btrfs_lab::error::{Error, ErrorEvent, ErrorKind, Result};
use btrfs_lab::model::exit::{REPORT_NOT_WRITTEN, Status};
use btrfs_lab::report::envelope::{Document, Enveloped};
use btrfs_lab::report::text::escape_control;
use btrfs_lab::report::text::fit;
use btrfs_lab::ui::{self, Progress, Ui};

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and NO_COLOR is not set.
    #[default]
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

fn no_color_env() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
        || std::env::var_os("TERM").is_some_and(|t| t == "dumb")
}

impl ColorChoice {
    fn enabled(self, terminal: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => terminal && !no_color_env(),
        }
    }
}

/// Paints text when colour is on.
#[derive(Debug, Clone, Copy)]
pub struct Paint {
    on: bool,
}

impl Paint {
    /// Something good (a direct verdict).
    pub fn good(self, s: &str) -> String {
        if self.on {
            s.green().bold().to_string()
        } else {
            s.to_owned()
        }
    }
    /// Something bad.
    pub fn bad(self, s: &str) -> String {
        if self.on {
            s.red().bold().to_string()
        } else {
            s.to_owned()
        }
    }
    /// Something to look at.
    pub fn warn(self, s: &str) -> String {
        if self.on {
            s.yellow().bold().to_string()
        } else {
            s.to_owned()
        }
    }
    /// A heading.
    pub fn bold(self, s: &str) -> String {
        if self.on {
            s.bold().to_string()
        } else {
            s.to_owned()
        }
    }
    /// Secondary text.
    pub fn dim(self, s: &str) -> String {
        if self.on {
            s.dimmed().to_string()
        } else {
            s.to_owned()
        }
    }
}

/// `--format` of `show`, `usage` and `scrub --status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgsFormat {
    /// Text for a person (the default).
    Text,
    /// The JSON proposed for this command's `btrfs --format json`, for
    /// tools written for it (docs/json.md, "Upstream shapes").
    ProgsJson,
}

impl ProgsFormat {
    /// `Ok(true)` for `progs-json`; a usage error with `--json` (two JSON
    /// documents cannot share stdout).
    pub fn progs_json(format: Option<Self>, out: &Output) -> Result<bool> {
        let progs = format == Some(ProgsFormat::ProgsJson);
        if progs && out.json {
            return Err(
                Error::usage("--json and --format progs-json exclude each other").with_hint(
                    "pick one: --json for btrfs-lab's typed report, --format progs-json for \
                     the shape proposed for btrfs-progs",
                ),
            );
        }
        Ok(progs)
    }
}

/// The output settings of one run.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// `--json`.
    pub json: bool,
    /// Colour for stdout.
    pub paint: Paint,
    /// Colour for stderr.
    pub paint_err: Paint,
    /// stderr is a terminal (progress bars go there).
    pub stderr_terminal: bool,
    /// `--quiet`: errors only (JSON still goes out with `--json`).
    pub quiet: bool,
}

impl Output {
    /// Settings from the global options.
    pub fn new(json: bool, color: ColorChoice) -> Self {
        Self {
            json,
            paint: Paint {
                on: !json && color.enabled(io::stdout().is_terminal()),
            },
            paint_err: Paint {
                on: color.enabled(io::stderr().is_terminal()),
            },
            stderr_terminal: io::stderr().is_terminal(),
            quiet: false,
        }
    }

    /// `--quiet`: no text result, no notes, no warnings, no progress, no
    /// plan on stderr (so nothing can be confirmed interactively either:
    /// see [`confirm`]); errors and JSON still go out.
    pub fn with_quiet(mut self, quiet: bool) -> Self {
        self.quiet = quiet;
        self
    }

    /// True when progress should be drawn on stderr.
    pub fn show_progress(&self) -> bool {
        self.stderr_terminal && !self.json && !self.quiet
    }

    /// Text for the person at the terminal on stderr (a plan before its
    /// confirmation, progress lines without a bar); nothing with --quiet.
    pub fn say(&self, text: &str) {
        if !self.quiet {
            let _ = io::stderr().lock().write_all(fit(text).as_bytes());
        }
    }

    /// The one progress-bar constructor: a bar on stderr drawn with
    /// `template` (bytes, chunks, ...), or a hidden one when progress is not
    /// shown (`--json`, no terminal).
    pub fn byte_progress(&self, template: &str) -> ProgressBar {
        if !self.show_progress() {
            return ProgressBar::hidden();
        }
        let target = ProgressDrawTarget::term_like_with_hz(
            Box::new(NarrowStderr(console::Term::buffered_stderr())),
            20,
        );
        let b = ProgressBar::with_draw_target(Some(0), target);
        b.set_style(
            ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    }

    /// Prints a document for other programs (`--format progs-json`) to
    /// stdout: like JSON, also with --quiet.
    pub fn document_text(&self, text: &str) {
        let mut state = STDOUT.lock().unwrap_or_else(|e| e.into_inner());
        state.write(text.as_bytes());
    }

    /// Prints text to stdout. A closed pipe (`| head`) ends the output
    /// quietly; any other write error (`/dev/full`, a full disk) is
    /// remembered and turns the exit status into an error (`finish`).
    pub fn text(&self, text: &str) {
        if self.quiet && !self.json {
            return;
        }
        let mut state = STDOUT.lock().unwrap_or_else(|e| e.into_inner());
        if self.json && !state.started {
            // JSON is held until the command succeeds or its operation has
            // started: a refused command prints nothing on stdout.
            state.pending.push_str(text);
            return;
        }
        state.write(text.as_bytes());
    }

    /// Prints one JSON document to stdout, in its envelope (the tool's
    /// version, the document's name and schema version, host, time:
    /// docs/json.md).
    pub fn json_doc<T: Document>(&self, value: &T) {
        match serde_json::to_string_pretty(&Enveloped::new(value)) {
            Ok(mut text) => {
                text.push('\n');
                self.text(&text);
            }
            Err(e) => serialize_failed(&e),
        }
    }

    /// Prints a report: its JSON document with `--json`, otherwise the text
    /// `render` makes of it. The one place that decides between the two.
    pub fn report<T: Document>(&self, report: &T, render: impl FnOnce(&T) -> String) {
        if self.json {
            self.json_doc(report);
        } else {
            self.text(&fit(&render(report)));
        }
    }

    /// Prints one JSON Lines record with `--json`, otherwise the text
    /// `render` makes of it: [`Output::report`] for a long-running
    /// command's events.
    pub fn report_line<T: Document>(&self, record: &T, render: impl FnOnce(&T) -> String) {
        if self.json {
            self.json_line(record);
        } else {
            self.text(&fit(&render(record)));
        }
    }

    /// Prints one JSON Lines record (a progress event) to stdout, in its
    /// envelope like a document.
    pub fn json_line<T: Document>(&self, value: &T) {
        match serde_json::to_string(&Enveloped::new(value)) {
            Ok(mut text) => {
                text.push('\n');
                self.text(&text);
            }
            Err(e) => serialize_failed(&e),
        }
    }

    /// Marks the point where a long-running operation has begun to change
    /// the system: JSON held so far is printed, later records go out at
    /// once, and an error from here on ends the stream with an error record
    /// instead of leaving stdout empty.
    pub fn started(&self) {
        let mut state = STDOUT.lock().unwrap_or_else(|e| e.into_inner());
        if state.started {
            return;
        }
        state.started = true;
        let pending = std::mem::take(&mut state.pending);
        state.write(pending.as_bytes());
    }

    /// Ends the run: on success the held JSON is printed; on an error it is
    /// dropped (stdout stays empty), or, when a JSON Lines stream had
    /// started, an `{"event":"error"}` record ends it. Then stdout is
    /// flushed. Returns the write error to report and its exit status, if
    /// stdout could not be written (a closed pipe is not one): after
    /// [`Output::before_change`] on a run that succeeded,
    /// [`REPORT_NOT_WRITTEN`] with a line that says the change was made.
    pub fn finish(&self, error: Option<&Error>) -> Option<WriteFailure> {
        let mut state = STDOUT.lock().unwrap_or_else(|e| e.into_inner());
        let pending = std::mem::take(&mut state.pending);
        match error {
            None if state.unserializable.is_none() => state.write(pending.as_bytes()),
            None => {}
            Some(e) if self.json && state.started => {
                let record = ErrorEvent::new(e);
                if let Ok(line) = serde_json::to_string(&Enveloped::new(&record)) {
                    state.write(format!("{line}\n").as_bytes());
                }
            }
            Some(_) => {}
        }
        if !state.closed
            && state.failed.is_none()
            && let Err(e) = io::stdout().lock().flush()
        {
            state.record(e);
        }
        let failure = match state.unserializable.take() {
            Some(e) => e,
            None => Error::new(
                ErrorKind::Io,
                format!("cannot write the output: {}", state.failed.take()?),
            )
            .with_hint("stdout is full or unwritable; write to another file or disk"),
        };
        Some(match state.changed.take() {
            // The run changed the system: that it did is the news, and
            // where to see it (the command's own status is lost with its
            // report).
            Some(look) if error.is_none() => WriteFailure {
                error: Error::new(
                    ErrorKind::Io,
                    format!(
                        "the change WAS made, but its report could not be written ({}); see what was done: {look}",
                        failure.message()
                    ),
                )
                .with_hint(
                    "stdout became full or unwritable after the change; do not run the command \
                     again to get the report, look with the command above",
                ),
                status: REPORT_NOT_WRITTEN,
            },
            _ => WriteFailure {
                status: failure.status(),
                error: failure,
            },
        })
    }

    /// The one step between a changing command's confirmation and its
    /// first change: what is held (the plan) is written ([`Output::started`])
    /// and stdout flushed,
    /// then probed with an empty write (which `/dev/full` and a descriptor
    /// not open for writing refuse), so that an unwritable stdout refuses
    /// the command while nothing was changed (exit 1). From here on a write
    /// error means "done, but the report could not be written"
    /// ([`REPORT_NOT_WRITTEN`], from [`Output::finish`]); `look` is the
    /// command that shows what was done (`btrfs-lab show /mnt`), named in
    /// that error. A closed pipe is not an error, before or after.
    pub fn before_change(&self, look: impl Into<String>) -> Result<()> {
        // Held JSON (a plan record) goes out now: the stream has begun, and
        // a failure from here on ends it with an error record.
        let held = !STDOUT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pending
            .is_empty();
        if held {
            self.started();
        }
        if let Some(e) = self.flush_now() {
            return Err(Error::new(
                ErrorKind::Io,
                format!("{}; nothing was changed", e.message()),
            )
            .with_hint(
                "stdout is full or unwritable: write the output to another file or disk, then run \
                 the same command again",
            ));
        }
        let mut state = STDOUT.lock().unwrap_or_else(|e| e.into_inner());
        if !state.closed
            && let Err(e) = btrfs_lab::sys::stdout_writable()
        {
            state.record(e);
            if let Some(e) = state.failed.take() {
                state.closed = true;
                return Err(Error::new(
                    ErrorKind::Io,
                    format!("cannot write the output: {e}; nothing was changed"),
                )
                .with_hint(
                    "stdout is full or unwritable: write the output to another file or disk, \
                     then run the same command again",
                ));
            }
        }
        state.changed = Some(look.into());
        Ok(())
    }

    /// Writes what is held and flushes stdout now, for a command whose
    /// exit status must say that its output could not be written (doctor:
    /// UNKNOWN, not the generic 1). Returns that error (once: `finish`
    /// does not report it again, and nothing more is written); a closed
    /// pipe is not one.
    pub fn flush_now(&self) -> Option<Error> {
        let mut state = STDOUT.lock().unwrap_or_else(|e| e.into_inner());
        let pending = std::mem::take(&mut state.pending);
        state.write(pending.as_bytes());
        if !state.closed
            && state.failed.is_none()
            && let Err(e) = io::stdout().lock().flush()
        {
            state.record(e);
        }
        if let Some(e) = state.unserializable.take() {
            state.closed = true;
            return Some(e);
        }
        let failed = state.failed.take()?;
        state.closed = true;
        Some(
            Error::new(ErrorKind::Io, format!("cannot write the output: {failed}"))
                .with_hint("stdout is full or unwritable; write to another file or disk"),
        )
    }

    /// Prints an error: one line, plus a hint line when there is one.
    pub fn error(&self, e: &Error) {
        let p = self.paint_err;
        // Messages name paths and labels other users chose: control
        // characters never reach the terminal raw.
        let mut text = labelled("btrfs-lab: error: ", &escape_control(e.message())).replacen(
            "error:",
            &p.bad("error:"),
            1,
        );
        if let Some(h) = e.hint() {
            text.push_str(&labelled("hint: ", &escape_control(h)).replacen(
                "hint:",
                &p.dim("hint:"),
                1,
            ));
        }
        let _ = io::stderr().lock().write_all(text.as_bytes());
    }
}

impl Output {
    /// A warning on stderr, with what to do.
    pub fn warning_with_hint(&self, message: &str, hint: &str) {
        if self.quiet {
            return;
        }
        let p = self.paint_err;
        let text =
            labelled("btrfs-lab: warning: ", &escape_control(message)).replacen(
                "warning:",
                &p.warn("warning:"),
                1,
            ) + &labelled("hint: ", &escape_control(hint)).replacen("hint:", &p.dim("hint:"), 1);
        let _ = io::stderr().lock().write_all(text.as_bytes());
    }

    /// What the text report shows itself (`in_text_report`) but the JSON
    /// report does not as text (findings as warnings): `say` runs on a
    /// JSON run, and on a text run whose report leaves it out.
    pub fn aside(&self, in_text_report: bool, say: impl FnOnce(&Self)) {
        if self.json || !in_text_report {
            say(self);
        }
    }

    /// A note that repeats what the text report leaves out and the JSON
    /// report holds (error bounds, the plan a `--yes` run carries out):
    /// on stderr in a text run, nothing with `--json` or `--quiet`.
    pub fn text_note(&self, message: &str) {
        if !self.json {
            self.note(message);
        }
    }

    /// A note on stderr (something not shown, and why).
    pub fn note(&self, message: &str) {
        if self.quiet {
            return;
        }
        let message: Vec<_> = message.split('\n').map(escape_control).collect();
        let text = labelled("btrfs-lab: note: ", &message.join("\n"));
        let _ = io::stderr().lock().write_all(text.as_bytes());
    }
}

/// A progress bar on stderr (indicatif), as the jobs see it.
struct Bar(ProgressBar);

impl Progress for Bar {
    fn set_length(&self, total: u64) {
        self.0.set_length(total);
    }
    fn set_position(&self, done: u64) {
        self.0.set_position(done);
    }
    fn set_message(&self, message: String) {
        self.0.set_message(message);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
    fn shown(&self) -> bool {
        !self.0.is_hidden()
    }
    fn println(&self, line: &str) {
        // Not indicatif's println: it pads the line to the width it was told
        // (two columns short, see NarrowStderr) and writes the bar right
        // after it; the terminal wraps the line at its own width.
        self.0.suspend(|| {
            let _ = writeln!(io::stderr().lock(), "{line}");
        });
    }
}

/// The terminal side of the jobs' `Ui` port: colour on stderr, `--quiet`,
/// JSON Lines on stdout (held until `started`), the one confirmation rule.
impl Ui for Output {
    fn quiet(&self) -> bool {
        self.quiet
    }
    fn json(&self) -> bool {
        self.json
    }
    fn note(&self, message: &str) {
        Output::note(self, message);
    }
    fn warn(&self, message: &str, hint: &str) {
        self.warning_with_hint(message, hint);
    }
    fn error(&self, error: &Error) {
        Output::error(self, error);
    }
    fn say(&self, text: &str) {
        Output::say(self, text);
    }
    fn status(&self, text: &str) {
        if !self.json {
            self.text(&fit(text));
        }
    }
    fn confirm(&self, question: &str, yes: bool) -> Result<()> {
        ui::confirm_on_terminal(question, yes, self.quiet)
    }
    fn progress(&self, template: &str) -> Box<dyn Progress> {
        Box::new(Bar(self.byte_progress(template)))
    }
    fn event_line(&self, line: std::result::Result<String, serde_json::Error>) {
        if !self.json {
            return;
        }
        match line {
            Ok(mut text) => {
                text.push('\n');
                self.text(&text);
            }
            Err(e) => serialize_failed(&e),
        }
    }
    fn started(&self) {
        Output::started(self);
    }
    fn before_change(&self, look: &str) -> Result<()> {
        Output::before_change(self, look)
    }
    fn size(&self, bytes: u64) -> String {
        super::units::size(bytes)
    }
}

/// stdout could not be written: the error line and the exit status.
#[derive(Debug)]
pub struct WriteFailure {
    /// What to print.
    pub error: Error,
    /// The registry's status for it.
    pub status: Status,
}

/// What happened to stdout in this run.
struct StdoutState {
    /// JSON held back until success or the start of an operation.
    pending: String,
    /// An operation has started: write JSON at once.
    started: bool,
    /// The reader went away (EPIPE): stop writing, exit quietly.
    closed: bool,
    /// The first other write error.
    failed: Option<io::Error>,
    /// A report that could not be serialized (a bug, never a panic): the
    /// run ends with this error and nothing of that report on stdout.
    unserializable: Option<Error>,
    /// The run has passed [`Output::before_change`]: where to see what it
    /// did, for the error when stdout fails after that.
    changed: Option<String>,
}

static STDOUT: Mutex<StdoutState> = Mutex::new(StdoutState {
    pending: String::new(),
    started: false,
    closed: false,
    failed: None,
    unserializable: None,
    changed: None,
});

/// A JSON document or record that cannot be serialized: what was held is
/// dropped (a half document is never printed) and the run ends with one
/// error line, status 1.
fn serialize_failed(e: &serde_json::Error) {
    let mut state = STDOUT.lock().unwrap_or_else(|e| e.into_inner());
    state.pending.clear();
    if state.unserializable.is_none() {
        state.unserializable = Some(
            Error::new(
                ErrorKind::Io,
                format!("cannot write the JSON output: the report does not serialize ({e})"),
            )
            .with_hint("this is a bug in btrfs-lab; run the command without --json and report it"),
        );
    }
}

impl StdoutState {
    fn write(&mut self, bytes: &[u8]) {
        if self.closed || self.failed.is_some() || bytes.is_empty() {
            return;
        }
        let mut out = io::stdout().lock();
        if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
            self.record(e);
        }
    }

    fn record(&mut self, e: io::Error) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            self.closed = true;
        } else if self.failed.is_none() {
            self.failed = Some(e);
        }
    }
}

/// Asks before a change, unless `yes` (the rule of
/// [`btrfs_lab::ui::confirm_on_terminal`]: refused without a terminal, or
/// with `--quiet`, which hid the plan).
pub fn confirm(out: &Output, question: &str, yes: bool) -> Result<()> {
    ui::confirm_on_terminal(question, yes, out.quiet)
}

/// A message after its label (`btrfs-lab: error: `, `hint: `), filled to
/// the output's width, further lines indented two columns; ends with a
/// newline.
fn labelled(label: &str, message: &str) -> String {
    let mut t = btrfs_lab::report::text::wrap_message(label, message, "  ");
    t.push('\n');
    t
}

/// The one text wrapping ([`btrfs_lab::report::text::wrap`]).
pub use btrfs_lab::report::text::wrap;

/// A field of a report: `text` after `lead` (its label in a column),
/// filled to the output's width with the further lines at `rest`, the text
/// of each line painted with `paint` (not the label, not the indent), so
/// the label column stays aligned however the text wraps.
pub fn field(lead: &str, text: &str, rest: &str, paint: impl Fn(&str) -> String) -> String {
    let filled = btrfs_lab::report::text::wrap_hanging(text, lead, rest);
    if filled.is_empty() {
        return format!("{}\n", lead.trim_end());
    }
    let mut out = String::with_capacity(filled.len());
    for (i, line) in filled.lines().enumerate() {
        let lead = if i == 0 { lead } else { rest };
        out.push_str(lead);
        out.push_str(&paint(line.strip_prefix(lead).unwrap_or(line)));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_keeps_its_label_column() {
        let text = "word ".repeat(40);
        let f = field("  kernel    ", &text, "            ", |s| format!("<{s}>"));
        let lines: Vec<&str> = f.lines().collect();
        assert!(lines.len() > 1, "{f}");
        assert!(lines[0].starts_with("  kernel    <word"), "{f}");
        for l in &lines[1..] {
            assert!(l.starts_with("            <word"), "{f}");
        }
        assert!(lines.iter().all(|l| l.ends_with("word>")), "{f}");
        assert_eq!(field("  x ", "", "    ", str::to_owned), "  x\n");
    }

    #[test]
    fn wraps_words() {
        assert_eq!(wrap("aaa bbb ccc", "  "), "  aaa bbb ccc\n");
        assert_eq!(wrap("", "  "), "");
    }

    #[test]
    fn quiet_refuses_to_confirm_a_plan_it_did_not_show() {
        let out = Output::new(false, ColorChoice::Never).with_quiet(true);
        let refused = out.confirm("Proceed?", false).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Refused);
        assert!(
            refused.message().contains("--quiet"),
            "{}",
            refused.message()
        );
        assert!(out.confirm("Proceed?", true).is_ok());
    }

    /// A report that cannot be serialized (a map with non-string keys).
    #[derive(serde::Serialize, schemars::JsonSchema)]
    struct Unserializable {
        map: std::collections::BTreeMap<(u8, u8), u8>,
    }

    impl Document for Unserializable {
        const NAME: &'static str = "unserializable";
    }

    #[test]
    fn a_report_that_does_not_serialize_is_an_error_not_a_panic() {
        let out = Output::new(true, ColorChoice::Never);
        let bad = Unserializable {
            map: [((1, 2), 3)].into_iter().collect(),
        };
        out.json_doc(&bad);
        out.json_line(&bad);
        let WriteFailure { error: e, status } = out.finish(None).expect("an error");
        assert_eq!(status.code, 1);
        assert!(
            e.message().starts_with("cannot write the JSON output"),
            "{}",
            e.message()
        );
        assert!(!e.message().contains('\n'), "{}", e.message());
    }

    #[test]
    fn colour_choice() {
        assert!(ColorChoice::Always.enabled(false));
        assert!(!ColorChoice::Never.enabled(true));
        assert!(!ColorChoice::Auto.enabled(false));
    }
}

/// The terminal on stderr as the bar sees it: two columns narrower than it
/// is. indicatif pads the bar to the full width, which leaves the cursor in
/// the terminal's pending-wrap state; the `^C` a terminal echoes on Ctrl-C
/// then wraps onto a row the next redraw does not know of, and the bar's
/// old row stays on the screen (tests/it/admin.rs replays it on a pty at 80
/// columns). Two columns leave room for the echo, which the next redraw's
/// clear removes. Lines above the bar are written by [`Bar::println`].
#[derive(Debug)]
struct NarrowStderr(console::Term);

impl indicatif::TermLike for NarrowStderr {
    fn width(&self) -> u16 {
        self.0.size().1.saturating_sub(2).max(1)
    }
    fn height(&self) -> u16 {
        self.0.size().0
    }
    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_up(n)
    }
    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_down(n)
    }
    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_right(n)
    }
    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_left(n)
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.0.write_line(s)
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        self.0.write_str(s)
    }
    fn clear_line(&self) -> io::Result<()> {
        self.0.clear_line()
    }
    fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
}

/// The one definition of `--allow-untrusted-target`, flattened into every
/// command that writes into a place a user named (`--textfile`, rescue's
/// `--copy-to`).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct TargetArgs {
    /// Write even into a directory (or over a file) that a user other than
    /// root owns or can write, a sticky world-writable /tmp included (or one
    /// on its path): that user could read or change what is written there.
    /// Without it such a target is refused with the reason. A destination
    /// that is not a regular file (a device, a FIFO, a link) is refused all
    /// the same.
    #[arg(long)]
    pub allow_untrusted_target: bool,
}

/// The one definition of `--dry-run` and `--yes`, flattened into every
/// command that changes a system (the operation driver's
/// [`btrfs_lab::operation::Confirm`]).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct ConfirmArgs {
    /// Show the plan and do nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
}

impl From<ConfirmArgs> for btrfs_lab::operation::Confirm {
    fn from(a: ConfirmArgs) -> Self {
        btrfs_lab::operation::Confirm {
            dry_run: a.dry_run,
            yes: a.yes,
        }
    }
}
