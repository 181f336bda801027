//! `device add` and `device add --then-convert` as [`Operation`]s: the
//! filesystem held and planned on (devices that are members already are
//! said as done), the add carried out and verified, and with
//! `--then-convert` the conversion planned again on the grown filesystem
//! and run ([`crate::convert::operation::convert_held`]) in the same run;
//! with `--then-balance` the balance, the same way ([`AddThenBalance`]).

use std::path::PathBuf;

use super::record::{AddConvertRecord, PlanDoc};
use super::{AddOptions, AddPlan, AddReport, AddResult};
use crate::balance::operation::{self as balance_op, Balance};
use crate::balance::report::{BalancePlan, BalanceRecord};
use crate::convert::operation::{Conversion, convert_held, finished_status};
use crate::convert::{ConvertRequest, Finished, Start};
use crate::device::preflight::refused;
use crate::error::{Error, Result, exit};
use crate::operation::state::FsState;
use crate::operation::{Operation, PlanShape, Verdict};
use crate::report::envelope::Enveloped;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::OperationSignals;
use crate::ui::{self, Ui};

/// The line said once the devices were added (the CLI's words).
pub type AddedText<'a> = &'a dyn Fn(&AddResult) -> String;

/// What both adds share: the request, the filesystem held.
struct Job<'a> {
    mount: PathBuf,
    devices: Vec<PathBuf>,
    opts: AddOptions,
    added_text: AddedText<'a>,
    held: Option<(FsHandle, FsState)>,
}

impl<'a> Job<'a> {
    fn held(&self) -> &(FsHandle, FsState) {
        self.held
            .as_ref()
            .expect("device add: planned before it runs")
    }

    fn plan(&mut self, convert: Option<ConvertRequest>) -> Result<AddPlan> {
        let (fs, state, plan) = super::prepare(
            &SysRoot::host(),
            &self.mount,
            &self.devices,
            self.opts,
            convert,
        )?;
        self.held = Some((fs, state));
        Ok(plan)
    }

    fn verdict(&self, plan: &AddPlan) -> Verdict {
        if plan.refusals.is_empty() {
            Verdict::Go
        } else {
            Verdict::Refused(refused("add", &plan.refusals))
        }
    }

    fn recheck(&self) -> Result<()> {
        self.held().0.check_path_still_here(&self.mount)
    }

    fn look(&self) -> String {
        format!("btrfs-lab show {}", self.held().1.mount_point.display())
    }

    fn add(&self, plan: &AddPlan) -> Result<AddResult> {
        let (fs, state) = self.held();
        super::execute_add(&SysRoot::host(), fs, &state.mount_point, plan)
    }
}

/// `device add MOUNT DEVICE...`.
pub struct Add<'a> {
    job: Job<'a>,
}

impl<'a> Add<'a> {
    /// Adds `devices` to the btrfs at `mount`; `added_text` says it.
    pub fn new(
        mount: PathBuf,
        devices: Vec<PathBuf>,
        opts: AddOptions,
        added_text: AddedText<'a>,
    ) -> Self {
        Add {
            job: Job {
                mount,
                devices,
                opts,
                added_text,
                held: None,
            },
        }
    }
}

impl Operation for Add<'_> {
    type Plan = AddPlan;
    type Result = AddResult;
    type Record = AddReport;

    fn needs_root(&self) -> &'static str {
        "adding a device needs root"
    }

    fn root_in_plan(&self) -> bool {
        true
    }

    fn plan_shape(&self) -> PlanShape {
        PlanShape::Document
    }

    fn plan(&mut self, _ui: &dyn Ui) -> Result<AddPlan> {
        self.job.plan(None)
    }

    /// Every device is already a member: what was asked for is there.
    fn said_already_done(&self, plan: &AddPlan, ui: &dyn Ui) -> bool {
        let Some(none) = super::nothing_to_add(&self.job.held().1, plan) else {
            return false;
        };
        if ui.json() {
            ui.event_line(serde_json::to_string_pretty(&Enveloped::new(&none)));
        } else {
            ui.status(
                &none
                    .already_members
                    .iter()
                    .map(|m| {
                        format!(
                            "nothing to do: {} is already device {} of this filesystem\n",
                            m.path.display(),
                            m.devid
                        )
                    })
                    .collect::<String>(),
            );
        }
        true
    }

    fn plan_record(&self, plan: &AddPlan) -> AddReport {
        AddReport {
            plan: plan.clone(),
            result: None,
        }
    }

    fn verdict(&self, plan: &AddPlan) -> Verdict {
        self.job.verdict(plan)
    }

    fn question(&self, _plan: &AddPlan) -> String {
        "Add the devices?".to_owned()
    }

    fn confirmed_pause(&self) -> Option<&'static str> {
        Some("device-add-confirmed")
    }

    fn recheck(&self) -> Result<()> {
        self.job.recheck()
    }

    fn look(&self, _plan: &AddPlan) -> String {
        self.job.look()
    }

    fn execute(
        &mut self,
        plan: &AddPlan,
        _signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<AddResult> {
        ui.started();
        let result = self.job.add(plan)?;
        // The one document: the plan and what was done.
        let done = AddReport {
            plan: plan.clone(),
            result: Some(result.clone()),
        };
        ui.event_line(serde_json::to_string_pretty(&Enveloped::new(&done)));
        ui.status(&(self.job.added_text)(&result));
        Ok(result)
    }

    fn status(&self, _result: &AddResult) -> u8 {
        exit::OK
    }
}

/// `device add --then-convert MOUNT DEVICE...`: the add, then the
/// conversion planned again on the grown filesystem and run.
pub struct AddThenConvert<'a> {
    job: Job<'a>,
    convert: ConvertRequest,
    /// The add's own refusals are none: a refusal (the conversion's) shows
    /// the plan first.
    add_allowed: bool,
}

impl<'a> AddThenConvert<'a> {
    /// Adds `devices` to the btrfs at `mount`, then converts to `convert`'s
    /// profiles; `added_text` says the add.
    pub fn new(
        mount: PathBuf,
        devices: Vec<PathBuf>,
        opts: AddOptions,
        convert: ConvertRequest,
        added_text: AddedText<'a>,
    ) -> Self {
        AddThenConvert {
            job: Job {
                mount,
                devices,
                opts,
                added_text,
                held: None,
            },
            convert,
            add_allowed: false,
        }
    }

    /// After the add: no signal came meanwhile, and the conversion planned
    /// again on the filesystem as it now is (`None`: nothing left).
    fn replan(&self, signals: &OperationSignals) -> Result<Option<crate::convert::ConvertPlan>> {
        let (fs, state) = self.job.held();
        if signals.wait(std::time::Duration::ZERO).0 > 0 {
            return Err(Error::interrupted().with_hint(format!(
                "the devices were added; the conversion was not started: btrfs-lab convert {} ...",
                state.mount_point.display()
            )));
        }
        super::replan_convert(&SysRoot::host(), fs, &state.mount_point, &self.convert)
    }
}

impl Operation for AddThenConvert<'_> {
    type Plan = AddPlan;
    /// The conversion's end (`None`: nothing was left to convert).
    type Result = Option<Finished>;
    type Record = AddConvertRecord;

    fn needs_root(&self) -> &'static str {
        "adding a device needs root"
    }

    fn root_in_plan(&self) -> bool {
        true
    }

    fn plan(&mut self, _ui: &dyn Ui) -> Result<AddPlan> {
        if self.convert.data.is_none() && self.convert.metadata.is_none() {
            return Err(Error::usage(
                "--then-convert needs --data PROFILE, --metadata PROFILE or both",
            ));
        }
        let plan = self.job.plan(Some(self.convert))?;
        self.add_allowed = plan.refusals.is_empty();
        Ok(plan)
    }

    fn plan_record(&self, plan: &AddPlan) -> AddConvertRecord {
        AddConvertRecord::Plan {
            plan: Some(PlanDoc::Add(Box::new(plan.clone()))),
            resume: None,
        }
    }

    fn verdict(&self, plan: &AddPlan) -> Verdict {
        if !plan.refusals.is_empty() {
            return self.job.verdict(plan);
        }
        match plan
            .then_convert
            .as_ref()
            .map(|c| c.check(self.convert.force))
        {
            Some(Err(e)) => Verdict::Refused(e),
            _ => Verdict::Go,
        }
    }

    fn refusal_shows_plan(&self) -> bool {
        self.add_allowed
    }

    fn question(&self, plan: &AddPlan) -> String {
        if plan
            .then_convert
            .as_ref()
            .is_some_and(|c| !c.risks.is_empty())
        {
            "Add the devices and convert, accepting the risk above?".to_owned()
        } else {
            "Add the devices and convert?".to_owned()
        }
    }

    fn confirmed_pause(&self) -> Option<&'static str> {
        Some("device-add-confirmed")
    }

    fn recheck(&self) -> Result<()> {
        self.job.recheck()
    }

    fn look(&self, _plan: &AddPlan) -> String {
        self.job.look()
    }

    fn execute(
        &mut self,
        plan: &AddPlan,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<Option<Finished>> {
        ui.started();
        let result = self.job.add(plan)?;
        ui::emit(
            ui,
            &AddConvertRecord::Added {
                result: result.clone(),
            },
        );
        ui.status(&(self.job.added_text)(&result));
        let Some(replanned) = self.replan(signals)? else {
            return Ok(None);
        };
        let (fs, state) = self.job.held();
        let on = Conversion {
            root: &SysRoot::host(),
            fs,
            mount_point: &state.mount_point,
            start: Start::Convert(self.convert, replanned.existing),
            targets: self.convert.into(),
            signals,
        };
        convert_held(on, None, ui).map(Some)
    }

    fn status(&self, finished: &Option<Finished>) -> u8 {
        finished.as_ref().map_or(exit::OK, finished_status)
    }
}

/// `device add --then-balance MOUNT DEVICE...`: the add, then the balance
/// planned again on the grown filesystem and run (`btrfs-lab balance`'s
/// own job: [`Balance`]), in one run with one confirmation.
pub struct AddThenBalance<'a> {
    job: Job<'a>,
    /// The add's own refusals are none: a refusal (the balance's) shows
    /// the plan first.
    add_allowed: bool,
}

impl<'a> AddThenBalance<'a> {
    /// Adds `devices` to the btrfs at `mount`, then balances; `added_text`
    /// says the add.
    pub fn new(
        mount: PathBuf,
        devices: Vec<PathBuf>,
        opts: AddOptions,
        added_text: AddedText<'a>,
    ) -> Self {
        AddThenBalance {
            job: Job {
                mount,
                devices,
                opts,
                added_text,
                held: None,
            },
            add_allowed: false,
        }
    }
}

/// The add's plan and the balance planned on the filesystem as it will be
/// after it (`None`: the add is refused).
pub type AddBalancePlan = (AddPlan, Option<BalancePlan>);

impl Operation for AddThenBalance<'_> {
    type Plan = AddBalancePlan;
    /// The balance planned after the add and how it ended (`None`: nothing
    /// was left to balance).
    type Result = Option<(BalancePlan, balance_op::Finished)>;
    type Record = BalanceRecord;

    fn needs_root(&self) -> &'static str {
        "adding a device needs root"
    }

    fn root_in_plan(&self) -> bool {
        true
    }

    fn plan(&mut self, _ui: &dyn Ui) -> Result<AddBalancePlan> {
        let mut plan = self.job.plan(None)?;
        self.add_allowed = plan.refusals.is_empty();
        if !self.add_allowed {
            return Ok((plan, None));
        }
        let (fs, state) = self.job.held();
        let layout = crate::operation::layout::read_layout(fs, state);
        let new: Vec<(String, u64)> = plan
            .devices
            .iter()
            .map(|d| (d.resolved.display().to_string(), d.size))
            .collect();
        let then = balance_op::plan_after_add(state, layout.as_ref(), &new);
        // The balance below is the next step.
        plan.notes.retain(|n| !n.starts_with("next, "));
        plan.notes.push(
            "then the balance below spreads the data that is there over all devices".to_owned(),
        );
        Ok((plan, Some(then)))
    }

    fn plan_record(&self, plan: &AddBalancePlan) -> BalanceRecord {
        BalanceRecord::Plan {
            plan: plan.1.clone().map(Box::new),
            add: Some(Box::new(plan.0.clone())),
        }
    }

    fn verdict(&self, plan: &AddBalancePlan) -> Verdict {
        if !plan.0.refusals.is_empty() {
            return self.job.verdict(&plan.0);
        }
        match plan
            .1
            .as_ref()
            .and_then(|b| balance_op::refusal(b, "cannot add the devices and balance"))
        {
            Some(e) => Verdict::Refused(e),
            None => Verdict::Go,
        }
    }

    fn refusal_shows_plan(&self) -> bool {
        self.add_allowed
    }

    fn question(&self, _plan: &AddBalancePlan) -> String {
        "Add the devices and balance?".to_owned()
    }

    fn confirmed_pause(&self) -> Option<&'static str> {
        Some("device-add-confirmed")
    }

    fn recheck(&self) -> Result<()> {
        self.job.recheck()
    }

    fn look(&self, _plan: &AddBalancePlan) -> String {
        self.job.look()
    }

    fn execute(
        &mut self,
        plan: &AddBalancePlan,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<Self::Result> {
        ui.started();
        let result = self.job.add(&plan.0)?;
        ui::emit(
            ui,
            &BalanceRecord::Added {
                result: result.clone(),
            },
        );
        ui.status(&(self.job.added_text)(&result));
        let (fs, state) = self.job.held();
        let m = state.mount_point.display();
        if signals.wait(std::time::Duration::ZERO).0 > 0 {
            return Err(Error::interrupted().with_hint(format!(
                "the devices were added; the balance was not started: btrfs-lab balance {m}"
            )));
        }
        let (mut op, planned) = Balance::held_by(fs.try_clone()?, &state.mount_point)?;
        if let Some(e) = balance_op::refusal(&planned, "the devices were added, but cannot balance")
        {
            return Err(e);
        }
        if balance_op::nothing_to_do(&planned) {
            ui.status(&balance_op::nothing_to_balance(&planned));
            return Ok(None);
        }
        let finished = op.execute(&planned, signals, ui)?;
        Ok(Some((planned, finished)))
    }

    fn result_record(&self, result: &Self::Result) -> Option<BalanceRecord> {
        result
            .as_ref()
            .map(|(_, f)| BalanceRecord::Result(f.result.clone()))
    }

    fn status(&self, result: &Self::Result) -> u8 {
        match result {
            None => exit::OK,
            Some((_, f)) => balance_op::status_of(f),
        }
    }
}
