//! The conversion as a job: [`execute`](super::execute) with its progress
//! drawn through the [`Ui`] port (a bar on a terminal, a plain line every
//! few seconds otherwise, JSON Lines records with `--json`) and its result
//! sent as the last JSON Lines record. The CLI only renders the
//! [`Finished`] it returns.

use std::path::Path;
use std::time::Duration;

use super::{Event, Finished, Progress, Start, Targets};
use crate::admin::report::ConvertRecord;
use crate::error::Result;
use crate::parse::size::format_rate;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::{self, DetachNotice, OperationSignals};
use crate::ui::{self, Ui};

/// The progress template of a conversion (chunks relocated of expected).
const TEMPLATE: &str = "converting {bar:30} {pos}/{len} chunks  {msg}";

/// How often a progress line is written when no bar is drawn.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// Where the events of a running conversion go.
struct Sink<'a> {
    ui: &'a dyn Ui,
    detached: Option<DetachNotice>,
    bar: Box<dyn ui::Progress>,
    lines: ui::LogLines,
}

impl<'a> Sink<'a> {
    fn new(ui: &'a dyn Ui, detached: Option<DetachNotice>) -> Self {
        Self {
            ui,
            detached,
            bar: ui.progress(TEMPLATE),
            lines: ui::LogLines::new(LINE_EVERY),
        }
    }

    fn describe(&self, p: &Progress) -> String {
        let eta = p
            .eta_seconds
            .map_or("ETA unknown".to_owned(), |s| format!("ETA {}", duration(s)));
        format!(
            "{} converted, {} left, {}, {eta}",
            self.ui.size(p.bytes_done),
            self.ui.size(p.bytes_remaining),
            format_rate(p.rate_bytes_per_sec)
        )
    }

    fn event(&mut self, e: Event) {
        match e {
            Event::Progress(p) => {
                if self.ui.json() {
                    ui::emit(self.ui, &ConvertRecord::Progress { progress: p });
                } else if self.bar.shown() {
                    self.bar.set_length(p.chunks_expected);
                    self.bar.set_position(p.chunks_done);
                    self.bar.set_message(self.describe(&p));
                } else if let Some(line) = self.lines.update(format!(
                    "progress: {}/{} chunks, {}\n",
                    p.chunks_done,
                    p.chunks_expected,
                    self.describe(&p)
                )) {
                    self.ui.say(&line);
                }
            }
            Event::Pausing(which) => {
                let why = match which {
                    Some(signals::Received::Hangup) => "the terminal went away (SIGHUP)",
                    Some(signals::Received::Terminate) => "terminated (SIGTERM)",
                    _ => "interrupted",
                };
                ui::emit(self.ui, &ConvertRecord::Pausing);
                self.say(&format!(
                    "{why}: pausing the balance after the current chunk (it is paused, never cancelled; this waits until the kernel has paused it)"
                ));
            }
            Event::Running => {
                if let Some(mut n) = self.detached.take() {
                    n.started();
                }
            }
            Event::StillPausing => {
                self.say("pausing, please wait: the kernel finishes the current chunk first");
            }
            Event::Notice(message) => {
                ui::emit(
                    self.ui,
                    &ConvertRecord::Notice {
                        message: message.clone(),
                    },
                );
                self.say(&message);
            }
        }
    }

    /// A line above the bar, or on its own when no bar is drawn.
    fn say(&self, message: &str) {
        if self.bar.shown() {
            self.bar.println(message);
        } else {
            self.ui.say(&format!("{message}\n"));
        }
    }
}

use crate::model::rate::duration;

/// What to convert, on which open filesystem, under which signals.
pub struct Conversion<'a> {
    /// Where /sys and /proc are read.
    pub root: &'a SysRoot,
    /// The filesystem held open since the plan.
    pub fs: &'a FsHandle,
    /// Its mount point (messages, the state read after).
    pub mount_point: &'a Path,
    /// A new conversion or a resume.
    pub start: Start,
    /// The target profiles.
    pub targets: Targets,
    /// Signals pause the balance from here on.
    pub signals: &'a OperationSignals,
}

/// Runs the conversion on `fs` ([`super::execute`]) and tells `ui` how it
/// goes: the operation has started, progress, pausing, notices, and the
/// result as the last JSON Lines record. `detached` (a `--background`
/// run) is told once the balance runs. Rendering the [`Finished`] it
/// returns is the caller's.
pub fn execute_with_ui(
    c: Conversion<'_>,
    detached: Option<DetachNotice>,
    ui: &dyn Ui,
) -> Result<Finished> {
    ui.started();
    let mut sink = Sink::new(ui, detached);
    let finished = super::execute(
        c.root,
        c.fs,
        c.mount_point,
        c.start,
        c.targets,
        c.signals,
        &mut |e| sink.event(e),
    );
    sink.bar.finish();
    if let Some(line) = sink.lines.finish() {
        ui.say(&line);
    }
    let finished = finished?;
    ui::emit(ui, &ConvertRecord::Result(finished.record()));
    Ok(finished)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ui::{RecordingUi, Said};

    fn progress(done: u64) -> Progress {
        Progress {
            chunks_done: done,
            chunks_expected: 4,
            bytes_done: done << 20,
            bytes_remaining: (4 - done) << 20,
            rate_bytes_per_sec: 1048576.0,
            eta_seconds: Some(90.0),
        }
    }

    #[test]
    fn json_progress_goes_out_as_records_and_text_as_lines_every_few_seconds() {
        let mut json = RecordingUi::new();
        json.json = true;
        let mut sink = Sink::new(&json, None);
        sink.event(Event::Progress(progress(1)));
        sink.event(Event::Progress(progress(2)));
        sink.event(Event::Notice("resuming".into()));
        let said = json.said();
        let events: Vec<&String> = said
            .iter()
            .filter_map(|s| match s {
                Said::Event(l) => Some(l),
                _ => None,
            })
            .collect();
        assert_eq!(events.len(), 3, "{said:?}");
        assert!(events[0].contains("\"progress\""), "{}", events[0]);
        assert!(events[2].contains("resuming"), "{}", events[2]);
        assert!(said.contains(&Said::Say("resuming\n".into())), "{said:?}");

        // Text without a bar: the first progress line at once, the next
        // only after LINE_EVERY (none within the same instant).
        let text = RecordingUi::new();
        let mut sink = Sink::new(&text, None);
        sink.event(Event::Progress(progress(1)));
        sink.event(Event::Progress(progress(2)));
        let lines: Vec<Said> = text
            .said()
            .into_iter()
            .filter(|s| matches!(s, Said::Say(_)))
            .collect();
        assert_eq!(
            lines,
            vec![Said::Say(
                "progress: 1/4 chunks, 1.00MiB converted, 3.00MiB left, 1.00MiB/s, ETA 1m30s\n"
                    .into()
            )]
        );
        assert!(
            text.said().iter().all(|s| !matches!(s, Said::Event(_))),
            "no JSON records without --json"
        );
        // The log ends with the last state.
        assert_eq!(
            sink.lines.finish().as_deref(),
            Some("progress: 2/4 chunks, 2.00MiB converted, 2.00MiB left, 1.00MiB/s, ETA 1m30s\n")
        );
    }
}
