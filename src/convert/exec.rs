//! The conversion as a job: [`execute`](super::execute) with its progress
//! drawn through the [`Ui`] port (a bar on a terminal, a plain line every
//! few seconds otherwise, JSON Lines records with `--json`) and its result
//! sent as the last JSON Lines record. The CLI only renders the
//! [`Finished`] it returns.

use std::path::Path;

use super::{Finished, Progress, Start, Targets};
use crate::convert::report::ConvertRecord;
use crate::error::Result;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::{DetachNotice, OperationSignals};
use crate::ui::{self, Ui};

/// Where the events of a running conversion go.
type Sink<'a> = crate::balance::run::Sink<'a, ConvertRecord>;

impl crate::balance::run::RunRecord for ConvertRecord {
    fn progress(progress: Progress) -> Self {
        ConvertRecord::Progress { progress }
    }
    fn pausing() -> Self {
        ConvertRecord::Pausing
    }
    fn notice(message: String) -> Self {
        ConvertRecord::Notice { message }
    }
}

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
    let mut sink = Sink::new(ui, detached, "convert", "converting");
    let finished = super::execute(
        c.root,
        c.fs,
        c.mount_point,
        c.start,
        c.targets,
        c.signals,
        &mut |e| sink.event(e),
    );
    sink.finish();
    let finished = finished?;
    ui::emit(ui, &ConvertRecord::Result(finished.record()));
    Ok(finished)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::Event;
    use crate::ui::{RecordingUi, Said};

    fn progress(done: u64) -> Progress {
        Progress {
            chunks_done: done,
            chunks_expected: 4,
            bytes_done: done << 20,
            bytes_remaining: (4 - done) << 20,
            rate_bytes_per_sec: 1048576.0,
            eta_seconds: Some(90.0),
            pace: crate::report::progress::Pace::Running,
        }
    }

    #[test]
    fn json_progress_goes_out_as_records_and_text_as_lines_every_few_seconds() {
        let mut json = RecordingUi::new();
        json.json = true;
        let mut sink = Sink::new(&json, None, "convert", "converting");
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
        let mut sink = Sink::new(&text, None, "convert", "converting");
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
                "converting: 1.00MiB of 4.00MiB, 1.00MiB/s, ETA 1m30s (chunk 1 of 4)\n".into()
            )]
        );
        assert!(
            text.said().iter().all(|s| !matches!(s, Said::Event(_))),
            "no JSON records without --json"
        );
        // The log ends with the last state.
        sink.finish();
        assert_eq!(
            text.said().last(),
            Some(&Said::Say(
                "converting: 2.00MiB of 4.00MiB, 1.00MiB/s, ETA 1m30s (chunk 2 of 4)\n".into()
            ))
        );
    }
}
