//! `convert MOUNT --data P --metadata P` and `convert MOUNT --resume` as
//! [`Operation`]s: the filesystem held and planned on (a new conversion's
//! plan with its refusals, or the paused balance's targets), `--background`
//! through [`Operation::detach`], the balance run with its progress through
//! the [`Ui`] and its result as the last record ([`exec`]); a conversion
//! someone else cancelled is the run's error.

use std::path::{Path, PathBuf};

pub use super::exec::Conversion;
use super::report::{ConvertRecord, ResumePlan};
use super::{ConvertPlan, ConvertRequest, Finished, Start, Targets, exec, manage};
use crate::error::{Error, Result, exit};
use crate::operation::state::open_state;
use crate::operation::{Operation, Verdict};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::{self, DetachNotice, OperationSignals};
use crate::ui::Ui;

/// What a conversion acts on, held from the plan to the end.
struct Held {
    fs: FsHandle,
    mount_point: PathBuf,
}

/// What both conversions share: the path named, the filesystem held,
/// `--background`.
struct Job {
    mount: PathBuf,
    background: bool,
    held: Option<Held>,
    detached: Option<DetachNotice>,
}

impl Job {
    fn new(mount: PathBuf, background: bool) -> Self {
        Job {
            mount,
            background,
            held: None,
            detached: None,
        }
    }

    fn held(&self) -> &Held {
        self.held.as_ref().expect("convert: planned before it runs")
    }

    fn recheck(&self) -> Result<()> {
        self.held().fs.check_path_still_here(&self.mount)
    }

    fn look(&self) -> String {
        look(&self.held().mount_point)
    }

    /// `--background`: in the process the user started, `Some(status)`
    /// once the detached one said the balance runs (or ended early); in the
    /// detached one `None`, its notice kept for the balance's start.
    fn detach(&mut self, ui: &dyn Ui) -> Result<Option<u8>> {
        if !self.background {
            return Ok(None);
        }
        match signals::detach()? {
            signals::Detached::Child(n) => {
                self.detached = Some(n);
                Ok(None)
            }
            signals::Detached::Parent {
                ended_early: Some(code),
                ..
            } => Ok(Some(u8::try_from(code).unwrap_or(exit::ERROR))),
            signals::Detached::Parent {
                pid,
                ended_early: None,
            } => {
                let m = self.held().mount_point.display();
                ui.started();
                crate::ui::emit(ui, &ConvertRecord::Background { pid });
                ui.status(&format!(
                    "the conversion runs in the background (process {pid}); follow it with: btrfs-lab convert {m} --status (pause: --pause, cancel: --cancel)\n"
                ));
                Ok(Some(exit::OK))
            }
        }
    }

    fn execute(
        &mut self,
        start: Start,
        targets: Targets,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<Finished> {
        let detached = self.detached.take();
        let held = self.held();
        let on = Conversion {
            root: &SysRoot::host(),
            fs: &held.fs,
            mount_point: &held.mount_point,
            start,
            targets,
            signals,
        };
        convert_held(on, detached, ui)
    }
}

/// Runs the balance of `c` ([`exec::execute_with_ui`]: progress through
/// `ui`, the result as the last record); a conversion someone else
/// cancelled is an error. `detached`: a `--background` run, told once the
/// balance runs. `device add --then-convert` runs its conversion here.
pub fn convert_held(
    c: Conversion<'_>,
    detached: Option<DetachNotice>,
    ui: &dyn Ui,
) -> Result<Finished> {
    let mount_point = c.mount_point;
    let finished = exec::execute_with_ui(c, detached, ui)?;
    match finished.error(mount_point) {
        Some(e) => Err(e),
        None => Ok(finished),
    }
}

/// The exit status of how a conversion ended.
pub fn finished_status(finished: &Finished) -> u8 {
    match finished {
        Finished::Completed { .. } => exit::OK,
        Finished::Paused { .. } => exit::INTERRUPTED,
        Finished::Cancelled => exit::ERROR,
    }
}

/// Where a convert's change is seen (`--status`).
pub fn look(mount_point: &Path) -> String {
    format!("btrfs-lab convert {} --status", mount_point.display())
}

/// `convert MOUNT --data P --metadata P`.
pub struct Convert {
    job: Job,
    request: ConvertRequest,
}

impl Convert {
    /// Converts the btrfs at `mount` (as the user named it) to `request`'s
    /// profiles; `background`: detached once confirmed.
    pub fn new(mount: PathBuf, request: ConvertRequest, background: bool) -> Self {
        Convert {
            job: Job::new(mount, background),
            request,
        }
    }
}

impl Operation for Convert {
    type Plan = ConvertPlan;
    type Result = Finished;
    type Record = ConvertRecord;

    fn needs_root(&self) -> &'static str {
        "converting profiles needs root"
    }

    fn plan(&mut self, _ui: &dyn Ui) -> Result<ConvertPlan> {
        let req = self.request;
        if req.data.is_none() && req.metadata.is_none() {
            return Err(Error::usage(
                "give --data PROFILE, --metadata PROFILE or both (or --status, --pause, --resume, --cancel)",
            ));
        }
        let (fs, state) = open_state(&SysRoot::host(), &self.job.mount)?;
        let layout = super::read_layout(&fs, &state);
        let plan = super::plan_convert_on(&state, &req, layout.as_ref());
        self.job.held = Some(Held {
            fs,
            mount_point: state.mount_point,
        });
        Ok(plan)
    }

    fn plan_record(&self, plan: &ConvertPlan) -> ConvertRecord {
        ConvertRecord::Plan {
            plan: Some(Box::new(plan.clone())),
            resume: None,
        }
    }

    fn verdict(&self, plan: &ConvertPlan) -> Verdict {
        if let Err(e) = plan.check(self.request.force) {
            return Verdict::Refused(e);
        }
        if plan.nothing_to_do {
            return Verdict::NothingToDo(
                "nothing to convert: every type is already in its target profile\n".to_owned(),
            );
        }
        Verdict::Go
    }

    fn question(&self, plan: &ConvertPlan) -> String {
        if plan.risks.is_empty() {
            "Start the conversion?".to_owned()
        } else {
            "Start the conversion, accepting the risk above?".to_owned()
        }
    }

    fn confirmed_pause(&self) -> Option<&'static str> {
        Some("convert-confirmed")
    }

    fn recheck(&self) -> Result<()> {
        self.job.recheck()
    }

    fn look(&self, _plan: &ConvertPlan) -> String {
        self.job.look()
    }

    fn detach(&mut self, _plan: &ConvertPlan, ui: &dyn Ui) -> Result<Option<u8>> {
        self.job.detach(ui)
    }

    fn execute(
        &mut self,
        plan: &ConvertPlan,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<Finished> {
        let start = Start::Convert(self.request, plan.existing);
        self.job.execute(start, self.request.into(), signals, ui)
    }

    fn status(&self, finished: &Finished) -> u8 {
        finished_status(finished)
    }
}

/// What `convert --resume` resumes: the paused balance's targets and what
/// is left.
#[derive(Debug, Clone)]
pub struct Resumable {
    /// The mount point of the filesystem.
    pub mount_point: PathBuf,
    /// The paused balance's targets.
    pub targets: Targets,
    /// Its record.
    pub plan: ResumePlan,
}

/// `convert MOUNT --resume`.
pub struct Resume {
    job: Job,
}

impl Resume {
    /// Resumes the paused balance on the btrfs at `mount`.
    pub fn new(mount: PathBuf, background: bool) -> Self {
        Resume {
            job: Job::new(mount, background),
        }
    }
}

impl Operation for Resume {
    type Plan = Resumable;
    type Result = Finished;
    type Record = ConvertRecord;

    fn needs_root(&self) -> &'static str {
        "converting profiles needs root"
    }

    fn plan(&mut self, _ui: &dyn Ui) -> Result<Resumable> {
        let (fs, state, targets, plan) = manage::prepare_resume(&SysRoot::host(), &self.job.mount)?;
        self.job.held = Some(Held {
            fs,
            mount_point: state.mount_point.clone(),
        });
        Ok(Resumable {
            mount_point: state.mount_point,
            targets,
            plan,
        })
    }

    fn plan_record(&self, plan: &Resumable) -> ConvertRecord {
        ConvertRecord::Plan {
            plan: None,
            resume: Some(plan.plan.clone()),
        }
    }

    fn question(&self, _plan: &Resumable) -> String {
        "Resume?".to_owned()
    }

    fn recheck(&self) -> Result<()> {
        self.job.recheck()
    }

    fn look(&self, _plan: &Resumable) -> String {
        self.job.look()
    }

    fn detach(&mut self, _plan: &Resumable, ui: &dyn Ui) -> Result<Option<u8>> {
        self.job.detach(ui)
    }

    fn execute(
        &mut self,
        plan: &Resumable,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<Finished> {
        self.job.execute(Start::Resume, plan.targets, signals, ui)
    }

    fn status(&self, finished: &Finished) -> u8 {
        finished_status(finished)
    }
}
