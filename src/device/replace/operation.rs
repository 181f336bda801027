//! `device replace` as an [`Operation`]: plan (its refusals, root among
//! them, as a verdict; a replace already running is followed without a
//! question), execute with progress, then the scrub of NEW if asked
//! (btrfs-lab's own scrub of that one device, on the filesystem held); a
//! signal detaches (the replace goes on in the kernel) and says so.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{OldSpec, ReplaceDetached, ReplaceOptions, ReplacePlan, ReplaceReport, ReplaceResult};
use crate::device::preflight::refused;
use crate::device::started::StartedStore;
use crate::error::{Error, ErrorKind, Result, exit};
use crate::model::exit::NOT_REDUNDANT;
use crate::operation::{Operation, PlanShape, Verdict, hooks};
use crate::scrub::{Outcome, Request, ScrubReport, StateStore};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::OperationSignals;
use crate::sys::tools::display_argv;
use crate::ui::{self, Progress, Track, Ui};

/// One `device replace MOUNT OLD NEW` run.
pub struct Replace {
    mount: PathBuf,
    old: OldSpec,
    new: PathBuf,
    opts: ReplaceOptions,
    scrub: bool,
    started: StartedStore,
    scrubs: StateStore,
    held: Option<FsHandle>,
    /// Seconds reading the filesystem and planning took.
    planning: f64,
}

/// What the run did: its report, and the scrub of NEW when asked
/// (`Err`: it could not run).
#[derive(Debug)]
pub struct Replaced {
    /// The plan and the verified result.
    pub report: ReplaceReport,
    /// The scrub of NEW (`--scrub`).
    pub scrubbed: Option<std::result::Result<ScrubReport, Error>>,
}

impl Replaced {
    /// The result (a run that returns one has it).
    pub fn result(&self) -> &ReplaceResult {
        self.report
            .result
            .as_ref()
            .expect("device replace: a finished run has its result")
    }
}

impl Replace {
    /// Replace `old` by `new` on the btrfs at `mount` (`scrub`: scrub NEW
    /// afterwards); what this tool started, and the scrub's state, are
    /// kept under `state_dir`.
    pub fn new(
        mount: PathBuf,
        old: &str,
        new: PathBuf,
        opts: ReplaceOptions,
        scrub: bool,
        state_dir: &Path,
    ) -> Self {
        Replace {
            mount,
            old: OldSpec::parse(old),
            new,
            opts,
            scrub,
            started: StartedStore::new(state_dir),
            scrubs: StateStore::new(state_dir),
            held: None,
            planning: 0.0,
        }
    }

    fn fs(&self) -> &FsHandle {
        self.held
            .as_ref()
            .expect("device replace: planned before it runs")
    }
}

/// A signal while the replace ran: it goes on in the kernel.
fn detached_error(plan: &ReplacePlan, d: &ReplaceDetached, ui: &dyn Ui) -> Error {
    let at = d.progress.map_or(String::new(), |p| {
        format!(
            " ({} of {} copied)",
            ui.size(p.bytes_done),
            ui.size(p.bytes_total)
        )
    });
    Error::new(
        ErrorKind::Interrupted,
        format!("{}: left the replace running in the kernel{at}", d.signal),
    )
    .with_hint(format!(
        "follow it: btrfs-lab device replace {} --status; stop it: --cancel; the same command again follows it and then resizes and verifies",
        plan.mount_point.display()
    ))
}

/// How the scrub of NEW after the replace (`--scrub`) ended.
enum ScrubAfter {
    /// It ran to its end (its errors found and corrected are in the report).
    Done(ScrubReport),
    /// It could not run.
    Failed(Error),
    /// A signal came: the scrub was cancelled (`started`: it had begun, and
    /// what it read is saved for `scrub MOUNT --resume`).
    Interrupted { signal: String, started: bool },
}

/// Scrubs device `devid` of the filesystem held, with btrfs-lab's scrub
/// (its state saved in `store`, its progress shown through `ui`, its JSON
/// records left out: the replace's document is the run's output). A signal
/// that came before it (while the replace ended) counts: it does not start.
fn scrub_new(
    fs: &FsHandle,
    devid: u64,
    store: &StateStore,
    signals: &OperationSignals,
    ui: &dyn Ui,
) -> ScrubAfter {
    let (n, which) = signals.wait(Duration::ZERO);
    if n > 0 {
        return ScrubAfter::Interrupted {
            signal: which.map_or("a signal", |w| w.name()).to_owned(),
            started: false,
        };
    }
    let ui = WithoutRecords(ui);
    let scrubbed =
        crate::scrub::plan(fs, store, Request::default()).and_then(|(mut plan, saved)| {
            plan.devices.retain(|d| d.devid == devid);
            plan.missing.clear();
            crate::scrub::execute(fs, &plan, saved, store, signals, &ui)
        });
    match scrubbed {
        Ok(r) if r.outcome == Outcome::Interrupted => ScrubAfter::Interrupted {
            signal: r.stopped_by.unwrap_or_else(|| "a signal".to_owned()),
            started: true,
        },
        Ok(r) => ScrubAfter::Done(r),
        Err(e) => ScrubAfter::Failed(e),
    }
}

/// A signal during `--scrub`: the replace is done and verified, the scrub
/// was cancelled; how to run it again.
fn scrub_interrupted(signal: &str, started: bool, plan: &ReplacePlan, r: &ReplaceResult) -> Error {
    let anew = display_argv(&r.scrub_command);
    Error::new(
        ErrorKind::Interrupted,
        format!(
            "{signal}: the replace is done (device {} is now {}, verified); the scrub of it was cancelled",
            r.devid, r.path
        ),
    )
    .with_hint(if started {
        format!(
            "continue the scrub where it stopped: btrfs-lab scrub {} --resume (it reads the other devices too); or scrub it anew: {anew}",
            plan.mount_point.display()
        )
    } else {
        format!("scrub it: {anew}")
    })
}

/// The caller's `Ui` without its JSON Lines records: the scrub inside a
/// replace shows its progress and notes, while `--json` gets the replace's
/// records alone, as before.
struct WithoutRecords<'a>(&'a dyn Ui);

impl Ui for WithoutRecords<'_> {
    fn quiet(&self) -> bool {
        self.0.quiet()
    }
    fn json(&self) -> bool {
        self.0.json()
    }
    fn note(&self, message: &str) {
        self.0.note(message);
    }
    fn warn(&self, message: &str, hint: &str) {
        self.0.warn(message, hint);
    }
    fn error(&self, error: &Error) {
        self.0.error(error);
    }
    fn say(&self, text: &str) {
        self.0.say(text);
    }
    fn status(&self, text: &str) {
        self.0.status(text);
    }
    fn confirm(&self, question: &str, yes: bool) -> Result<()> {
        self.0.confirm(question, yes)
    }
    fn progress(&self, template: &str) -> Box<dyn Progress> {
        self.0.progress(template)
    }
    fn event_line(&self, _line: std::result::Result<String, serde_json::Error>) {}
    fn started(&self) {
        self.0.started();
    }
    fn before_change(&self, look: &str) -> Result<()> {
        self.0.before_change(look)
    }
    fn size(&self, bytes: u64) -> String {
        self.0.size(bytes)
    }
}

impl Operation for Replace {
    type Plan = ReplacePlan;
    type Result = Replaced;
    type Record = ReplaceReport;

    fn needs_root(&self) -> &'static str {
        "replacing a device needs root"
    }

    fn root_in_plan(&self) -> bool {
        true
    }

    fn plan_shape(&self) -> PlanShape {
        PlanShape::Document
    }

    fn plan(&mut self, _ui: &dyn Ui) -> Result<ReplacePlan> {
        let t0 = std::time::Instant::now();
        let (fs, _state, plan) = super::prepare(
            &SysRoot::host(),
            &self.mount,
            &self.old,
            &self.new,
            self.opts,
            &self.started,
        )?;
        self.planning = t0.elapsed().as_secs_f64();
        self.held = Some(fs);
        Ok(plan)
    }

    fn plan_record(&self, plan: &ReplacePlan) -> ReplaceReport {
        ReplaceReport::planned(plan)
    }

    fn verdict(&self, plan: &ReplacePlan) -> Verdict {
        if plan.refusals.is_empty() {
            Verdict::Go
        } else {
            Verdict::Refused(refused("replace", &plan.refusals))
        }
    }

    fn question(&self, _plan: &ReplacePlan) -> String {
        "Replace the device?".into()
    }

    fn ask(&self, plan: &ReplacePlan) -> bool {
        !plan.following
    }

    fn confirmed_pause(&self) -> Option<&'static str> {
        Some("device-replace-confirmed")
    }

    fn recheck(&self) -> Result<()> {
        self.fs().check_path_still_here(&self.mount)
    }

    fn look(&self, plan: &ReplacePlan) -> String {
        format!("btrfs-lab show {}", plan.mount_point.display())
    }

    fn execute(
        &mut self,
        plan: &ReplacePlan,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<Replaced> {
        ui.started();
        let mut track = Track::new(ui, "device-replace", "replacing");
        let end = super::execute_replace(self.fs(), plan, &self.started, signals, &mut |p| {
            track.show(&p.reading(), None);
        });
        track.finish();
        let mut report = end?;
        if let Some(r) = report.result.as_mut() {
            r.phases.plan = self.planning;
        }
        let Some(r) = &report.result else {
            let e = match &report.detached {
                Some(d) => detached_error(plan, d, ui),
                None => Error::new(ErrorKind::State, "the replace ended without a result"),
            };
            ui::emit(ui, &report);
            return Err(e);
        };
        let scrubbed = if self.scrub && !r.path.is_empty() {
            ui.say(&format!("scrubbing the new device: {}\n", r.path));
            hooks::pause_point("device-replace-scrubbing");
            Some(
                match scrub_new(self.fs(), r.devid, &self.scrubs, signals, ui) {
                    ScrubAfter::Done(s) => Ok(s),
                    ScrubAfter::Failed(e) => Err(e),
                    ScrubAfter::Interrupted { signal, started } => {
                        let e = scrub_interrupted(&signal, started, plan, r);
                        ui::emit(ui, &report);
                        return Err(e);
                    }
                },
            )
        } else {
            None
        };
        Ok(Replaced { report, scrubbed })
    }

    fn result_record(&self, result: &Replaced) -> Option<ReplaceReport> {
        Some(result.report.clone())
    }

    fn status(&self, result: &Replaced) -> u8 {
        let r = result.result();
        let scrub_failed = match &result.scrubbed {
            Some(Ok(s)) => s.totals.uncorrectable > 0,
            Some(Err(_)) => true,
            None => false,
        };
        if !r.redundancy.ok || r.uncorrectable_read_errors > 0 || scrub_failed {
            NOT_REDUNDANT.code
        } else {
            exit::OK
        }
    }
}
