//! `nocow DIR` (and `--migrate`) as an [`Operation`]: observe and plan
//! (the root and owner rules are the plan's), the plan on stderr before
//! the question, execute with progress; the run's one document is its
//! report, with the result.

use crate::error::{Result, exit};
use crate::operation::{Operation, PlanShape, PlanShown, Verdict};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::signals::{self, OperationSignals};
use crate::ui::{Progress, TrackedBar, Ui};

use super::advice::Advice;
use super::migrate::ExecOptions;
use super::plan::{self, Observed, Request};
use super::{NocowReport, Outcome, Tick};

/// One `nocow DIR` run.
pub struct NocowDir {
    // nocow acts on the running system: /proc and /sys are never read
    // under a root prefix (BTRFS_LAB_SYSROOT), which could hide a process
    // that has a file open or a mount inside the directory.
    sysroot: SysRoot,
    request: Request,
    advice: Option<Advice>,
    observed: Option<Observed>,
}

impl NocowDir {
    /// The run `request` asks for; `advice` is `--for SERVICE`'s.
    pub fn new(request: Request, advice: Option<Advice>) -> Self {
        NocowDir {
            sysroot: SysRoot::host(),
            request,
            advice,
            observed: None,
        }
    }
}

impl Operation for NocowDir {
    type Plan = NocowReport;
    type Result = Outcome;
    type Record = NocowReport;

    fn needs_root(&self) -> &'static str {
        "nocow needs root for a directory it does not own"
    }

    /// A user prepares a directory of their own: the plan says what needs
    /// root ([`plan::plan`]).
    fn root_in_plan(&self) -> bool {
        true
    }

    fn plan_shape(&self) -> PlanShape {
        PlanShape::Document
    }

    fn plan_shown(&self) -> PlanShown {
        PlanShown::Stderr
    }

    fn dry_run_line(&self) -> &'static str {
        "(dry run: nothing was changed)\n"
    }

    fn plan(&mut self, _ui: &dyn Ui) -> Result<NocowReport> {
        let observed = super::observe(&self.sysroot, &self.request)?;
        let plan = plan::plan(&self.request, &observed)?;
        let report = NocowReport {
            path: self.request.dir.clone(),
            dir: super::target_dir(&observed),
            dry_run: self.request.dry_run,
            filesystem: observed.root.clone(),
            plan,
            result: None,
            advice: self.advice.clone(),
        };
        self.observed = Some(observed);
        Ok(report)
    }

    fn plan_record(&self, plan: &NocowReport) -> NocowReport {
        plan.clone()
    }

    fn verdict(&self, report: &NocowReport) -> Verdict {
        // The plan's text says why there is nothing to do.
        if report.plan.nothing_to_do.is_some() || report.plan.steps.is_empty() {
            return Verdict::NothingToDo(String::new());
        }
        Verdict::Go
    }

    fn question(&self, _plan: &NocowReport) -> String {
        "Proceed?".into()
    }

    /// Everything after the plan goes through the descriptors it holds.
    fn recheck(&self) -> Result<()> {
        Ok(())
    }

    fn look(&self, plan: &NocowReport) -> String {
        format!("btrfs-lab nocow --check {}", plan.dir.display())
    }

    fn execute(
        &mut self,
        report: &NocowReport,
        _signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<Outcome> {
        // The job stops at its next safe point on a signal; a second one
        // exits at once, as before the change.
        signals::install()?;
        // A signal while the plan was made or shown: nothing was done.
        signals::check()?;
        let observed = self
            .observed
            .as_ref()
            .expect("nocow: planned before it runs");
        let mut opts = ExecOptions::new(self.request.force);
        opts.root = observed
            .root_dir
            .clone()
            .map(|d| (observed.root.dir.clone(), d));
        let bar = TrackedBar::new(ui, "nocow-migrate", "migrating").records(false);
        let result = super::execute(
            &self.sysroot,
            &report.dir,
            &report.path,
            &report.filesystem,
            &report.plan,
            &mut opts,
            &mut progress(&report.plan, &report.dir, &bar),
        );
        let files_total = super::files_total(&report.plan);
        if result.is_ok() && files_total > 0 {
            bar.set_message(String::new());
            bar.set_position(files_total);
        }
        bar.finish();
        result
    }

    fn status(&self, _result: &Outcome) -> u8 {
        exit::OK
    }
}

/// The progress callback of [`super::execute`]: the bytes of every pass
/// (each file is read, written and read back) scaled to the files' bytes,
/// on `bar`, with the file being migrated.
fn progress<'b>(
    plan: &plan::Plan,
    dir: &'b std::path::Path,
    bar: &'b TrackedBar<'_>,
) -> impl FnMut(Tick<'_>) -> Result<()> + 'b {
    let passes_total = super::progress_total(plan);
    let files_total = super::files_total(plan);
    bar.set_length(files_total);
    let mut passes = 0u64;
    move |tick| {
        match tick {
            // Its name below the directory: the line stays short.
            Tick::File(p) => {
                bar.set_message(p.strip_prefix(dir).unwrap_or(p).display().to_string())
            }
            Tick::Bytes(n) => passes += n,
        }
        let done = if passes_total == 0 {
            0
        } else {
            (u128::from(passes.min(passes_total)) * u128::from(files_total)
                / u128::from(passes_total)) as u64
        };
        bar.set_position(done);
        Ok(())
    }
}
