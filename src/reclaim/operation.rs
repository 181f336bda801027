//! `reclaim` as an [`Operation`]: open and plan, the verdicts (goal reached,
//! no step frees anything), execute with progress, remember fruitless steps.

use std::path::PathBuf;

use super::{Facts, MemoryStore, ReclaimPlan, ReclaimRecord, ReclaimRequest, ReclaimResult};
use crate::error::{Result, exit};
use crate::model::exit::GOAL_NOT_REACHED;
use crate::operation::{Operation, Verdict};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::OperationSignals;
use crate::ui::Ui;

/// One `reclaim MOUNT` run.
pub struct Reclaim {
    mount: PathBuf,
    request: ReclaimRequest,
    memory: MemoryStore,
    held: Option<(FsHandle, Facts)>,
}

impl Reclaim {
    /// Reclaim on the btrfs at `mount`, remembering in `state_dir`.
    pub fn new(mount: PathBuf, request: ReclaimRequest, state_dir: &std::path::Path) -> Self {
        Reclaim {
            mount,
            request,
            memory: MemoryStore::new(state_dir),
            held: None,
        }
    }

    fn held(&self) -> &(FsHandle, Facts) {
        self.held.as_ref().expect("reclaim: planned before it runs")
    }
}

impl Operation for Reclaim {
    type Plan = ReclaimPlan;
    type Result = ReclaimResult;
    type Record = ReclaimRecord;

    fn needs_root(&self) -> &'static str {
        "reclaiming space needs root"
    }

    fn plan(&mut self, ui: &dyn Ui) -> Result<ReclaimPlan> {
        let (fs, mut facts) = super::open(&SysRoot::host(), &self.mount, self.request.metadata)?;
        match self.memory.load(&facts.state.fsid) {
            Ok(m) => facts.fruitless = m.fruitless,
            Err(e) => ui.warn(
                &format!("{}: planning as if reclaim had never run here", e.message()),
                e.hint().unwrap_or(""),
            ),
        }
        let plan = super::plan(&facts, &self.request);
        self.held = Some((fs, facts));
        Ok(plan)
    }

    fn plan_record(&self, plan: &ReclaimPlan) -> ReclaimRecord {
        ReclaimRecord::Plan { plan: plan.clone() }
    }

    fn verdict(&self, plan: &ReclaimPlan) -> Verdict {
        let m = plan.mount_point.display();
        if plan.goal_reached {
            return Verdict::NothingToDo("nothing to do: the goal is reached already\n".into());
        }
        if plan.steps.is_empty() {
            return Verdict::Stop {
                warning: format!(
                    "no balance up to -dusage={} is estimated to free space on {m}: the data chunks are fuller, or moving their data takes as much room as it frees; nothing was changed",
                    plan.max_usage
                ),
                hint: format!(
                    "add a device (btrfs-lab device add {m} NEW_DEVICE) or delete files and the snapshots that hold them"
                ),
                status: GOAL_NOT_REACHED.code,
            };
        }
        Verdict::Go
    }

    fn question(&self, _plan: &ReclaimPlan) -> String {
        "Relocate these chunks?".into()
    }

    fn recheck(&self) -> Result<()> {
        self.held().0.check_path_still_here(&self.mount)
    }

    fn look(&self, plan: &ReclaimPlan) -> String {
        format!("btrfs-lab usage {}", plan.mount_point.display())
    }

    fn execute(
        &mut self,
        plan: &ReclaimPlan,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<ReclaimResult> {
        let (fs, facts) = self.held();
        super::execute_with_ui(fs, facts, plan, signals, ui)
    }

    fn verify(&mut self, plan: &ReclaimPlan, result: &ReclaimResult, ui: &dyn Ui) -> Result<()> {
        if let Err(e) = super::remember(&self.memory, &plan.fsid, result) {
            ui.warn(
                &format!(
                    "{}: the next run may plan the same fruitless steps again",
                    e.message()
                ),
                e.hint().unwrap_or(""),
            );
        }
        Ok(())
    }

    fn status(&self, result: &ReclaimResult) -> u8 {
        use super::ReclaimOutcome::*;
        match result.outcome {
            Reached => exit::OK,
            NotReached | NoSpace => GOAL_NOT_REACHED.code,
            Interrupted => exit::INTERRUPTED,
            Cancelled => exit::ERROR,
        }
    }
}
