//! `convert --status | --pause | --cancel | --resume`: managing the running
//! or paused conversion.

use std::path::Path;

use super::{Targets, remaining_bytes};
use crate::convert::report::{BalanceKind, PauseReport, ResumePlan, StatusReport};
use crate::error::{Error, ErrorKind, Result};
use crate::model::space::BgType;
use crate::operation::state::{FsState, open_state};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::balance;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::ioctl::BalanceState;

/// `--status` (root only: the balance ioctls need it).
pub fn status(root: &SysRoot, path: &Path) -> Result<StatusReport> {
    let (fs, state) = open_state(root, path)?;
    if !crate::sys::is_root() {
        return Err(
            Error::new(ErrorKind::Permission, "the balance status needs root")
                .with_hint("run it as root"),
        );
    }
    let (balance, targets) = match &state.balance {
        Some(b) => (
            if b.running {
                BalanceKind::Running
            } else {
                BalanceKind::Paused
            },
            b.targets(),
        ),
        None => (
            BalanceKind::None,
            Targets {
                data: None,
                metadata: None,
            },
        ),
    };
    let remaining = remaining_bytes(&fs, targets);
    Ok(StatusReport {
        mount_point: state.mount_point.clone(),
        balance,
        data_target: targets.data,
        metadata_target: targets.metadata,
        chunks_expected: state.balance.map(|b| b.expected),
        chunks_done: state.balance.map(|b| b.completed),
        counters_reset: state
            .balance
            .is_some_and(|b| !b.running && b.expected == 0 && b.completed == 0),
        bytes_remaining: state.balance.map(|_| remaining),
        data_profiles: state.profiles(BgType::Data),
        metadata_profiles: state.profiles(BgType::Metadata),
        device_errors: state
            .device_errors
            .iter()
            .filter(|d| d.unreadable() > 0)
            .cloned()
            .collect(),
    })
}

/// What `--pause` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paused {
    /// It paused the running balance.
    Now,
    /// It was paused already: nothing to do.
    Already,
}

impl Paused {
    /// The JSON document.
    pub fn report(self) -> PauseReport {
        PauseReport { paused: true }
    }
}

/// `--pause`: pauses the running balance (blocks until the kernel has);
/// a paused one is left as it is (success).
pub fn pause(root: &SysRoot, path: &Path) -> Result<(Paused, FsState)> {
    let (fs, state) = open_state(root, path)?;
    if state.balance.is_some_and(|b| b.paused) {
        return Ok((Paused::Already, state));
    }
    if balance::pause(&fs, &state.path)? {
        return Ok((Paused::Now, state));
    }
    // None ran: paused meanwhile (by the convert itself, or someone else)?
    let now = fs.balance_status()?;
    if now.is_some_and(|s| !s.state.contains(BalanceState::RUNNING)) {
        Ok((Paused::Already, state))
    } else {
        Err(Error::new(
            ErrorKind::State,
            format!("no balance is running on {}", state.mount_point.display()),
        ))
    }
}

/// `--cancel`, before the confirmation: the filesystem held open, and a
/// balance must exist.
pub fn prepare_cancel(root: &SysRoot, path: &Path) -> Result<(FsHandle, FsState)> {
    let (fs, state) = open_state(root, path)?;
    if state.balance.is_none() {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "no balance is running or paused on {}",
                state.mount_point.display()
            ),
        ));
    }
    Ok((fs, state))
}

/// `--cancel`, confirmed: `path` must still lead to the filesystem held.
pub fn cancel(fs: &FsHandle, path: &Path) -> Result<()> {
    fs.check_path_still_here(path)?;
    balance::cancel(fs)
}

/// `--resume`, before the confirmation: the paused balance's targets and
/// what is left.
pub fn prepare_resume(
    root: &SysRoot,
    path: &Path,
) -> Result<(FsHandle, FsState, Targets, ResumePlan)> {
    let (fs, state) = open_state(root, path)?;
    let Some(b) = state.balance.filter(|b| !b.running) else {
        return Err(Error::new(
            ErrorKind::State,
            match state.balance {
                Some(_) => "the balance is already running (see --status)".to_owned(),
                None => format!("no paused balance on {}", state.mount_point.display()),
            },
        ));
    };
    let targets = b.targets();
    let plan = ResumePlan {
        data: targets.data,
        metadata: targets.metadata,
        bytes_remaining: remaining_bytes(&fs, targets),
    };
    Ok((fs, state, targets, plan))
}
