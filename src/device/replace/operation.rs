//! `device replace` as an [`Operation`]: plan (its refusals, root among
//! them, as a verdict; a replace already running is followed without a
//! question), execute with progress, then the scrub of NEW if asked; a
//! signal detaches (the replace goes on in the kernel) and says so.

use std::path::PathBuf;

use super::{
    OldSpec, ReplaceDetached, ReplaceEnd, ReplaceOptions, ReplacePlan, ReplaceReport,
    ReplaceResult, ScrubAfter,
};
use crate::device::preflight::refused;
use crate::device::started::StartedStore;
use crate::error::{Error, ErrorKind, Result, exit};
use crate::model::exit::NOT_REDUNDANT;
use crate::operation::{Operation, PlanShape, Verdict, hooks};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::OperationSignals;
use crate::sys::tools::display_argv;
use crate::ui::{self, Track, Ui};

/// One `device replace MOUNT OLD NEW` run.
pub struct Replace {
    mount: PathBuf,
    old: OldSpec,
    new: PathBuf,
    opts: ReplaceOptions,
    scrub: bool,
    started: StartedStore,
    held: Option<FsHandle>,
}

/// What the run did: its report, and the scrub of NEW when asked
/// (`Err`: it found errors or could not run).
#[derive(Debug)]
pub struct Replaced {
    /// The plan and the verified result.
    pub report: ReplaceReport,
    /// The scrub of NEW (`--scrub`).
    pub scrubbed: Option<std::result::Result<(), Error>>,
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
    /// afterwards); `started` records what this tool started.
    pub fn new(
        mount: PathBuf,
        old: &str,
        new: PathBuf,
        opts: ReplaceOptions,
        scrub: bool,
        started: StartedStore,
    ) -> Self {
        Replace {
            mount,
            old: OldSpec::parse(old),
            new,
            opts,
            scrub,
            started,
            held: None,
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

/// A signal during `--scrub`: the replace is done and verified, the scrub
/// was cancelled; how to run it again.
fn scrub_interrupted(signal: &str, r: &ReplaceResult) -> Error {
    Error::new(
        ErrorKind::Interrupted,
        format!(
            "{signal}: the replace is done (device {} is now {}, verified); the scrub of it was cancelled",
            r.devid, r.path
        ),
    )
    .with_hint(format!(
        "continue the scrub where it stopped: btrfs scrub resume -B {}; or scrub it anew: {}",
        r.path,
        display_argv(&r.scrub_command)
    ))
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
        let (fs, _state, plan) = super::prepare(
            &SysRoot::host(),
            &self.mount,
            &self.old,
            &self.new,
            self.opts,
            &self.started,
        )?;
        self.held = Some(fs);
        Ok(plan)
    }

    fn plan_record(&self, plan: &ReplacePlan) -> ReplaceReport {
        ReplaceReport {
            plan: plan.clone(),
            result: None,
            detached: None,
        }
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
        let mut report = self.plan_record(plan);
        let r = match end? {
            ReplaceEnd::Detached(d) => {
                let e = detached_error(plan, &d, ui);
                report.detached = Some(d);
                ui::emit(ui, &report);
                return Err(e);
            }
            ReplaceEnd::Done(r) => r,
        };
        let scrubbed = if self.scrub && !r.path.is_empty() {
            ui.say(&format!(
                "scrubbing the new device: {}\n",
                display_argv(&r.scrub_command)
            ));
            hooks::pause_point("device-replace-scrubbing");
            Some(match super::scrub_new(&r, signals)? {
                ScrubAfter::Clean => Ok(()),
                ScrubAfter::Failed(e) => Err(e),
                ScrubAfter::Interrupted(signal) => {
                    let e = scrub_interrupted(signal, &r);
                    report.result = Some(r);
                    ui::emit(ui, &report);
                    return Err(e);
                }
            })
        } else {
            None
        };
        report.result = Some(r);
        Ok(Replaced { report, scrubbed })
    }

    fn result_record(&self, result: &Replaced) -> Option<ReplaceReport> {
        Some(result.report.clone())
    }

    fn status(&self, result: &Replaced) -> u8 {
        let r = result.result();
        if !r.redundancy.ok
            || r.uncorrectable_read_errors > 0
            || matches!(result.scrubbed, Some(Err(_)))
        {
            NOT_REDUNDANT.code
        } else {
            exit::OK
        }
    }
}
