//! Carrying out a conversion: its balance ([`Conversion`], a
//! [`crate::balance::run::Job`]) run by the one balance run loop, then
//! verified.

use std::path::Path;

use super::{ConvertRequest, Event, Existing, Outcome, Targets, remaining_bytes};
use crate::balance::run::{self as balance_run, Begin, Job, Words};
use crate::convert::report::ResultRecord;
use crate::error::{Error, ErrorKind, Result};
use crate::model::balance::BalanceInfo;
use crate::operation::state::read_state_at;
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::btrfs::{self, FsHandle};
use crate::sys::kernel::ioctl::{BalanceArgs, BalanceStatus};
use crate::sys::kernel::signals::OperationSignals;

pub(crate) use crate::balance::run::{Pauser, kernel_failure};

/// How to start the balance.
#[derive(Debug, Clone, Copy)]
pub enum Start {
    /// A new conversion (or, per [`ConvertPlan::existing`], resume, follow
    /// or wait for the balance that exists, then finish what is left).
    Convert(ConvertRequest, Option<Existing>),
    /// Resume the paused one.
    Resume,
}

/// How a conversion begins, per the balance that exists (said through
/// `on_event`).
fn begin(h: &FsHandle, start: Start, on_event: &mut dyn FnMut(Event)) -> Begin {
    let m = h.path().display();
    match start {
        Start::Resume => Begin::Resume,
        Start::Convert(_, Some(Existing::Resume)) => {
            on_event(Event::Notice(format!(
                "a paused balance with these targets exists on {m}: resuming it"
            )));
            Begin::Resume
        }
        Start::Convert(_, Some(Existing::Follow)) => {
            on_event(Event::Notice(format!(
                "a balance with these targets is already running on {m} (another btrfs-lab, or one the kernel is cancelling because its process was killed): following it"
            )));
            Begin::Follow
        }
        Start::Convert(_, Some(Existing::WaitForCancel)) => {
            on_event(Event::Notice(format!(
                "a balance is being cancelled on {m}: waiting for it to end"
            )));
            Begin::Follow
        }
        Start::Convert(_, None) => Begin::New,
    }
}

/// A conversion's balance, as the run loop sees it.
struct Converting<'a> {
    root: &'a SysRoot,
    mount_point: &'a Path,
    targets: Targets,
    /// `None`: a resume (nothing of its own to start again).
    req: Option<ConvertRequest>,
}

impl Job for Converting<'_> {
    fn args(&self) -> BalanceArgs {
        match self.req {
            Some(r) => btrfs::convert_args(r.data, r.metadata, r.force),
            None => BalanceArgs::default(),
        }
    }

    fn remaining(&self, h: &FsHandle) -> u64 {
        remaining_bytes(h, self.targets)
    }

    fn is_mine(&self, s: &BalanceStatus) -> bool {
        BalanceInfo::from_status(s).targets() == self.targets
    }

    fn replan(&mut self, h: &FsHandle) -> Result<Option<Outcome>> {
        match self.req {
            Some(r) => replan_after_follow(self.root, h, self.mount_point, &r).map(|()| None),
            None => Ok(Some(Outcome::Cancelled)),
        }
    }

    fn words(&self) -> Words {
        Words {
            command: "convert",
            job: "conversion",
            done: "converted",
        }
    }
}

/// Runs a conversion on the open filesystem `h` ([`balance_run::run_balance`]):
/// starts (or resumes, or follows) the balance, reports progress, pauses on
/// signals. When a followed balance ends without finishing, the rest starts
/// only once planned again ([`super::balance_in_flux`]).
pub fn run_balance(
    root: &SysRoot,
    h: &FsHandle,
    mount_point: &Path,
    start: Start,
    targets: Targets,
    signals: &OperationSignals,
    on_event: &mut dyn FnMut(Event),
) -> Result<Outcome> {
    let first = begin(h, start, on_event);
    let mut job = Converting {
        root,
        mount_point,
        targets,
        req: match start {
            Start::Convert(r, _) => Some(r),
            Start::Resume => None,
        },
    };
    balance_run::run_balance(h, &mut job, first, signals, on_event)
}

/// How a conversion run ended.
#[derive(Debug)]
pub enum Finished {
    /// Every type is in its target profile (verified).
    Completed {
        /// The new `df` records.
        records: Vec<crate::model::space::SpaceRecord>,
        /// Logical bytes this run converted (those outside the targets
        /// when it began).
        bytes: u64,
        /// How long it ran.
        elapsed: std::time::Duration,
    },
    /// Paused (by a signal, or by someone else).
    Paused {
        /// Bytes still outside the targets.
        bytes_remaining: u64,
    },
    /// Someone cancelled it: [`Finished::error`] says what to do.
    Cancelled,
}

impl Finished {
    /// The last JSON record.
    pub fn record(&self) -> ResultRecord {
        match self {
            Finished::Completed { records, .. } => ResultRecord {
                outcome: Outcome::Completed,
                records: Some(records.clone()),
                bytes_remaining: None,
            },
            Finished::Paused { bytes_remaining } => ResultRecord {
                outcome: Outcome::Paused,
                records: None,
                bytes_remaining: Some(*bytes_remaining),
            },
            Finished::Cancelled => ResultRecord {
                outcome: Outcome::Cancelled,
                records: None,
                bytes_remaining: None,
            },
        }
    }

    /// The error to end with (cancelled), if any.
    pub fn error(&self, mount_point: &Path) -> Option<Error> {
        matches!(self, Finished::Cancelled).then(|| {
            Error::new(
                ErrorKind::State,
                format!(
                    "the conversion on {} was cancelled by someone else",
                    mount_point.display()
                ),
            )
            .with_hint("run the same convert again to finish it: converted chunks are skipped")
        })
    }
}

/// The conversion planned again once the balance it followed has ended
/// without finishing, now with the replay of [`super::plan_convert_on`] (a
/// settled filesystem: the transaction is committed first, so the block
/// groups' usage no longer counts what a cancelled relocation had copied).
/// `Err`: a refusal; nothing was started.
fn replan_after_follow(
    root: &SysRoot,
    fs: &FsHandle,
    mount_point: &Path,
    req: &ConvertRequest,
) -> Result<()> {
    fs.sync()?;
    let state = read_state_at(root, fs, mount_point)?;
    let layout = super::read_layout(fs, &state);
    let plan = super::plan_convert_on(&state, req, layout.as_ref());
    plan.check(req.force).map_err(|e| {
        let why = "the balance that was running ended without finishing; nothing else was started";
        let hint = match e.hint() {
            Some(h) => format!("{why}; {h}"),
            None => why.to_owned(),
        };
        e.with_hint(hint)
    })
}

/// Runs the conversion on the open filesystem `fs` ([`run_balance`]), then
/// verifies a completed one from the kernel and reads the new `df`.
pub fn execute(
    root: &SysRoot,
    fs: &FsHandle,
    mount_point: &Path,
    start: Start,
    targets: Targets,
    signals: &OperationSignals,
    on_event: &mut dyn FnMut(Event),
) -> Result<Finished> {
    let bytes = remaining_bytes(fs, targets);
    let began = std::time::Instant::now();
    match run_balance(root, fs, mount_point, start, targets, signals, on_event)? {
        Outcome::Completed => {
            let elapsed = began.elapsed();
            let state = read_state_at(root, fs, mount_point)?;
            super::verify(&state, targets)?;
            fs.check_path_still_here(fs.path())?;
            Ok(Finished::Completed {
                records: crate::sys::kernel::btrfs::space_records(&fs.space_entries()?),
                bytes,
                elapsed,
            })
        }
        Outcome::Paused => Ok(Finished::Paused {
            bytes_remaining: remaining_bytes(fs, targets),
        }),
        Outcome::Cancelled => Ok(Finished::Cancelled),
    }
}
