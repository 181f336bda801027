//! `rescue MOUNT --copy-to DIR` as an [`Operation`]: the plan opens and
//! checks the mount and the target (what would be saved, from where to
//! where); execute walks and copies every file; verify closes the manifest
//! as complete. No question: nothing of the rescued filesystem changes, and
//! a re-run resumes. The run's one document is the report, the last of its
//! JSON Lines.

use super::manifest::MANIFEST;
use super::report::{FileRecord, RescueReport};
use super::{Opened, RescueRequest};
use crate::error::Result;
use crate::operation::{Operation, PlanShape, PlanShown};
use crate::sys::kernel::signals::{self, OperationSignals};
use crate::ui::Ui;

/// One `rescue --copy-to` run.
pub struct RescueCopy<'a> {
    request: RescueRequest,
    each: &'a mut dyn FnMut(&FileRecord),
    opened: Option<Opened>,
}

impl<'a> RescueCopy<'a> {
    /// The copy `request` asks for (its `copy_to` is set); `each` sees
    /// every file's record in walk order (for `--list`).
    pub fn new(request: RescueRequest, each: &'a mut dyn FnMut(&FileRecord)) -> Self {
        RescueCopy {
            request,
            each,
            opened: None,
        }
    }

    /// The command that shows what was done (the manifest, as the user
    /// knows the target).
    fn manifest_look(&self) -> String {
        let dir = self.request.copy_to.clone().unwrap_or_default();
        format!(
            "{} (the files copied and verified)",
            dir.join(MANIFEST).display()
        )
    }
}

impl Operation for RescueCopy<'_> {
    type Plan = RescueReport;
    type Result = RescueReport;
    type Record = RescueReport;

    fn needs_root(&self) -> &'static str {
        "rescue needs root"
    }

    /// The plan says why root is needed, and names the mount.
    fn root_in_plan(&self) -> bool {
        true
    }

    fn plan_shape(&self) -> PlanShape {
        PlanShape::Document
    }

    fn plan_shown(&self) -> PlanShown {
        PlanShown::Not
    }

    fn plan(&mut self, ui: &dyn Ui) -> Result<RescueReport> {
        signals::install()?;
        // Opening the target creates it and begins its manifest: stdout is
        // checked first, so an unwritable one refuses the run while nothing
        // was changed.
        ui.before_change(&self.manifest_look())?;
        let (opened, report) = super::open(&self.request)?;
        self.opened = Some(opened);
        Ok(report)
    }

    fn plan_record(&self, plan: &RescueReport) -> RescueReport {
        plan.clone()
    }

    fn question(&self, _plan: &RescueReport) -> String {
        String::new()
    }

    /// Nothing of the rescued filesystem changes, and a re-run resumes.
    fn ask(&self, _plan: &RescueReport) -> bool {
        false
    }

    /// The mount and the target are held since the plan.
    fn recheck(&self) -> Result<()> {
        Ok(())
    }

    fn look(&self, _plan: &RescueReport) -> String {
        self.manifest_look()
    }

    fn execute(
        &mut self,
        plan: &RescueReport,
        _signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<RescueReport> {
        // The copy stops after the current file on a signal (the manifest
        // consistent); a second one exits at once, as before the copy.
        signals::install()?;
        let opened = self
            .opened
            .as_mut()
            .expect("rescue: planned before it runs");
        super::walk_and_copy(opened, plan.clone(), &self.request, ui, self.each)
    }

    fn status(&self, result: &RescueReport) -> u8 {
        result.exit_status()
    }
}
