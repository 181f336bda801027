//! `scrub MOUNT` as an [`Operation`]: the filesystem held and planned on
//! (a resume from the saved state), "no device to scrub" as a refusal, the
//! `--textfile` metrics written at the start and at the end on every path,
//! the report as the last record.

use std::path::{Path, PathBuf};

use super::{Request, SavedScrub, ScrubPlan, ScrubRecord, ScrubReport, StateStore};
use crate::error::{Error, ErrorKind, Result};
use crate::operation::{Operation, Verdict};
use crate::sys::fs::outfile::{OutputDir, split};
use crate::sys::fs::root::SysRoot;
use crate::sys::fs::target::resolve_held;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::OperationSignals;
use crate::ui::Ui;

/// `--textfile FILE`: the Prometheus metrics written there atomically.
#[derive(Debug, Clone)]
pub struct Textfile {
    /// The file.
    pub file: PathBuf,
    /// `--allow-untrusted-target`: a directory another user may write to.
    pub allow_untrusted: bool,
}

/// What the plan was made on, held until the end.
struct Held {
    fs: FsHandle,
    /// The mount point of the filesystem (the metrics' label).
    mount_point: PathBuf,
    /// The saved state of the last scrub, as it was before this run.
    saved: Option<SavedScrub>,
}

/// One `scrub MOUNT` run.
pub struct Scrub {
    mount: PathBuf,
    request: Request,
    store: StateStore,
    textfile: Option<Textfile>,
    held: Option<Held>,
}

impl Scrub {
    /// Scrubs the btrfs at `mount` (as the user named it), its state kept
    /// in `state_dir`.
    pub fn new(
        mount: PathBuf,
        request: Request,
        state_dir: &Path,
        textfile: Option<Textfile>,
    ) -> Self {
        Scrub {
            mount,
            request,
            store: StateStore::new(state_dir),
            textfile,
            held: None,
        }
    }

    fn held(&self) -> &Held {
        self.held.as_ref().expect("scrub: planned before it runs")
    }

    /// The metrics file's directory (opened after the confirmation) and
    /// its name, when asked for.
    fn open_textfile(&self) -> Result<Option<(OutputDir, std::ffi::OsString)>> {
        let Some(t) = &self.textfile else {
            return Ok(None);
        };
        let (dir, name) = split(&t.file)?;
        Ok(Some((
            OutputDir::open(&dir)?.allow_untrusted(t.allow_untrusted),
            name,
        )))
    }
}

/// The `--textfile` metrics of one filesystem.
struct MetricsFile<'a> {
    out: Option<(OutputDir, std::ffi::OsString)>,
    mount_point: &'a Path,
    fsid: &'a str,
}

impl MetricsFile<'_> {
    /// Writes the metrics: the last scrub (`last`), and whether one runs.
    fn write(&self, last: Option<&SavedScrub>, running: bool) -> Result<()> {
        if let Some((dir, name)) = &self.out {
            dir.write(
                name.clone(),
                super::metrics(self.mount_point, self.fsid, last, running).as_bytes(),
                0o644,
            )?;
        }
        Ok(())
    }
}

impl Operation for Scrub {
    type Plan = ScrubPlan;
    type Result = ScrubReport;
    type Record = ScrubRecord;

    fn needs_root(&self) -> &'static str {
        "scrub needs root (the scrub ioctls)"
    }

    fn plan(&mut self, ui: &dyn Ui) -> Result<ScrubPlan> {
        // MOUNT is opened once and held (a symbolic link another user
        // planted on the way is refused): the plan and the scrub ioctls act
        // on the directory held.
        let (target, fs) = resolve_held(&SysRoot::host(), &self.mount)?;
        let (plan, saved) = super::plan(&fs, &self.store, self.request)?;
        if !self.request.resume
            && let Some(s) = &saved
            && !s.finished
        {
            ui.note(&format!(
                "the last scrub of {} was interrupted; this one starts over (--resume continues it)",
                self.mount.display()
            ));
        }
        self.held = Some(Held {
            fs,
            mount_point: target.mount.mount_point.clone(),
            saved,
        });
        Ok(plan)
    }

    fn plan_record(&self, plan: &ScrubPlan) -> ScrubRecord {
        ScrubRecord::Plan { plan: plan.clone() }
    }

    fn verdict(&self, plan: &ScrubPlan) -> Verdict {
        if plan.devices.is_empty() {
            return Verdict::Refused(Error::new(
                ErrorKind::State,
                format!("no device of {} to scrub", self.mount.display()),
            ));
        }
        Verdict::Go
    }

    fn refusal_shows_plan(&self) -> bool {
        true
    }

    fn question(&self, _plan: &ScrubPlan) -> String {
        String::new()
    }

    /// A scrub does not ask (as `btrfs scrub start`): it reads, and what it
    /// writes is a block whose checksum failed, rewritten from a copy whose
    /// checksum holds (what every read of that block does too), so a cron
    /// line or a timer needs no `--yes`.
    fn ask(&self, _plan: &ScrubPlan) -> bool {
        false
    }

    fn recheck(&self) -> Result<()> {
        self.held().fs.check_path_still_here(&self.mount)
    }

    fn look(&self, _plan: &ScrubPlan) -> String {
        format!("btrfs-lab scrub {} --status", self.mount.display())
    }

    fn execute(
        &mut self,
        plan: &ScrubPlan,
        signals: &OperationSignals,
        ui: &dyn Ui,
    ) -> Result<ScrubReport> {
        let held = self.held();
        // The metrics file says "running" from the start (with the last
        // scrub's figures), and is written again at the end on every path.
        let metrics = MetricsFile {
            out: self.open_textfile()?,
            mount_point: &held.mount_point,
            fsid: &plan.fsid,
        };
        metrics.write(held.saved.as_ref(), true)?;
        ui.started();
        let result = super::execute(&held.fs, plan, held.saved.clone(), &self.store, signals, ui);
        let last = self
            .store
            .load(&plan.fsid)
            .ok()
            .flatten()
            .or_else(|| held.saved.clone());
        let written = metrics.write(last.as_ref(), false);
        let report = result?;
        written?;
        Ok(report)
    }

    fn result_record(&self, report: &ScrubReport) -> Option<ScrubRecord> {
        Some(ScrubRecord::Result {
            report: report.clone(),
        })
    }

    fn status(&self, report: &ScrubReport) -> u8 {
        report.exit_code()
    }
}
