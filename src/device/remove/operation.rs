//! `device remove` as an [`Operation`]: plan (its refusals, root among
//! them, and "already removed" as verdicts), execute one device at a time
//! with progress, a signal's stop said in the report.

use std::path::PathBuf;

use super::{RemovePlan, RemoveReport, RemoveSpec, RemoveStopped};
use crate::device::preflight::refused;
use crate::device::started::StartedStore;
use crate::error::{Error, ErrorKind, Result, exit};
use crate::model::exit::NOT_REDUNDANT;
use crate::operation::{Operation, PlanShape, Verdict};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::OperationSignals;
use crate::ui::{self, Track, Ui};

/// One `device remove MOUNT DEV...` run.
pub struct Remove {
    mount: PathBuf,
    specs: Vec<RemoveSpec>,
    started: StartedStore,
    held: Option<FsHandle>,
    /// Seconds reading the filesystem and planning took.
    planning: f64,
}

impl Remove {
    /// Remove the devices named (`specs`) from the btrfs at `mount`;
    /// `started` records what this tool started.
    pub fn new(mount: PathBuf, devices: &[String], started: StartedStore) -> Self {
        Remove {
            mount,
            specs: devices.iter().map(|d| RemoveSpec::parse(d)).collect(),
            started,
            held: None,
            planning: 0.0,
        }
    }

    fn fs(&self) -> &FsHandle {
        self.held
            .as_ref()
            .expect("device remove: planned before it runs")
    }
}

/// The error a signal's stop ends the run with.
fn stopped_error(s: &RemoveStopped, ui: &dyn Ui) -> Error {
    let before = if s.removed.is_empty() {
        String::new()
    } else {
        let ids: Vec<String> = s.removed.iter().map(|r| r.devid.to_string()).collect();
        format!("; removed before it: {}", ids.join(", "))
    };
    Error::new(
        ErrorKind::Interrupted,
        format!(
            "{}: stopped; device {} is still a member ({} left on it){before}",
            s.signal,
            s.devid,
            ui.size(s.bytes_left)
        ),
    )
    .with_hint("the filesystem is consistent; the same command again continues")
}

impl Operation for Remove {
    type Plan = RemovePlan;
    type Result = RemoveReport;
    type Record = RemoveReport;

    fn needs_root(&self) -> &'static str {
        "removing a device needs root"
    }

    fn root_in_plan(&self) -> bool {
        true
    }

    fn plan_shape(&self) -> PlanShape {
        PlanShape::Document
    }

    fn plan(&mut self, _ui: &dyn Ui) -> Result<RemovePlan> {
        let t0 = std::time::Instant::now();
        let (fs, _state, plan) =
            super::prepare(&SysRoot::host(), &self.mount, &self.specs, &self.started)?;
        self.planning = t0.elapsed().as_secs_f64();
        self.held = Some(fs);
        Ok(plan)
    }

    fn plan_record(&self, plan: &RemovePlan) -> RemoveReport {
        RemoveReport::planned(plan)
    }

    fn verdict(&self, plan: &RemovePlan) -> Verdict {
        if !plan.refusals.is_empty() {
            return Verdict::Refused(refused("remove", &plan.refusals));
        }
        match plan.nothing_to_do() {
            Some(done) => Verdict::AlreadyDone(format!("{done}\n")),
            None => Verdict::Go,
        }
    }

    fn question(&self, plan: &RemovePlan) -> String {
        if plan.devices.len() == 1 {
            "Remove the device?".into()
        } else {
            "Remove the devices?".into()
        }
    }

    fn confirmed_pause(&self) -> Option<&'static str> {
        Some("device-remove-confirmed")
    }

    fn recheck(&self) -> Result<()> {
        self.fs().check_path_still_here(&self.mount)
    }

    fn look(&self, plan: &RemovePlan) -> String {
        format!("btrfs-lab show {}", plan.mount_point.display())
    }

    fn execute(
        &mut self,
        plan: &RemovePlan,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<RemoveReport> {
        ui.started();
        let mut track = Track::new(ui, "device-remove", "removing");
        let end = super::execute_remove(self.fs(), plan, &self.started, signals, &mut |p| {
            track.show(&p.reading(), Some(&p.step()));
        });
        track.finish();
        let mut report = end?;
        if let Some(r) = report.result.as_mut() {
            r.phases.plan = self.planning;
        }
        if let Some(stopped) = &report.stopped {
            let e = stopped_error(stopped, ui);
            ui::emit(ui, &report);
            return Err(e);
        }
        Ok(report)
    }

    fn result_record(&self, result: &RemoveReport) -> Option<RemoveReport> {
        Some(result.clone())
    }

    fn status(&self, result: &RemoveReport) -> u8 {
        match &result.result {
            Some(r) if !r.redundancy.ok => NOT_REDUNDANT.code,
            _ => exit::OK,
        }
    }
}
