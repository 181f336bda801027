//! Carrying out a remove one device at a time through `btrfs device
//! remove`, progress from the bytes left on the device, and on a signal a
//! stop that leaves the device a member (the kernel cancels the relocation
//! when the remove's process gets a fatal signal) so that a re-run
//! continues.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::plan::*;
use super::report::*;

use crate::device::started::{DeviceAt, RemovingDevice, StartedRemove, StartedStore};
use crate::error::{Error, ErrorKind, Result};
use crate::report::progress::Pace;
use crate::sys::kernel::btrfs::FsHandle;
use crate::sys::kernel::signals::OperationSignals;
use crate::sys::tools::{self, display_argv};
/// Carries out the plan, one device at a time.
pub fn execute_remove(
    fs: &FsHandle,
    plan: &RemovePlan,
    store: &StartedStore,
    signals: &OperationSignals,
    progress: &mut dyn FnMut(&RemoveProgress),
) -> Result<RemoveReport> {
    let mut removed = Vec::new();
    let mut kernel = Duration::ZERO;
    let steps = plan.commands.len();
    record_started(fs, plan, store)?;
    for (i, (shown, dev)) in plan.commands.iter().zip(&plan.devices).enumerate() {
        // A remove the kernel runs already (this device's, whose command
        // was killed, or another's): follow it to its end first; starting
        // one now would only fail ("another exclusive operation").
        let start_bytes = fs
            .devices()?
            .iter()
            .find(|d| d.devid == dev.devid)
            .map_or(dev.allocated, |d| d.bytes_used);
        let t0 = Instant::now();
        let step = Step {
            devid: dev.devid,
            step: i + 1,
            steps,
            bytes_start: start_bytes,
        };
        let gone = || Removed {
            devid: dev.devid,
            path: dev.path.clone(),
            bytes_moved: start_bytes,
            seconds: t0.elapsed().as_secs_f64(),
        };
        let interrupted = wait_for_running_remove(fs, dev.devid, signals, &mut |left| {
            progress(&step.at(left, 0.0, None, Pace::Running))
        })?;
        kernel += t0.elapsed();
        if let Some(signal) = interrupted
            && let Some(d) = fs.devices()?.into_iter().find(|d| d.devid == dev.devid)
        {
            return Ok(RemoveReport::stopped(
                plan,
                RemoveStopped {
                    signal: signal.to_owned(),
                    removed,
                    devid: dev.devid,
                    bytes_left: d.bytes_used,
                },
            ));
        }
        if !fs.devices()?.iter().any(|d| d.devid == dev.devid) {
            // The remove that ran took it out.
            removed.push(gone());
            continue;
        }
        let mut argv = shown.clone();
        if let Some(last) = argv.last_mut() {
            *last = fs.proc_path().display().to_string();
        }
        let tool = tools::find("btrfs", "btrfs-progs")?;
        let ran = Instant::now();
        let mut child =
            tools::spawn_in_group(&tool.path, &argv[1..], None, Stdio::null(), Stdio::piped())
                .map_err(|e| {
                    Error::new(
                        ErrorKind::Tool,
                        format!("cannot start {}: {e}", display_argv(shown)),
                    )
                })?;
        let mut signal: Option<&'static str> = None;
        let mut meter = crate::report::progress::Meter::new();
        let status = loop {
            if let Some(st) = child
                .try_wait()
                .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?
            {
                break st;
            }
            let left = fs
                .devices()?
                .iter()
                .find(|d| d.devid == dev.devid)
                .map_or(0, |d| d.bytes_used);
            let r = meter.observe(start_bytes.saturating_sub(left), start_bytes);
            progress(&step.at(
                left,
                r.rate_bytes_per_sec.unwrap_or(0.0),
                r.eta_seconds,
                r.pace,
            ));
            // Wakes at the command's end, not at the next tick.
            let (n, which) = signals.wait_child(Duration::from_millis(500), &child);
            if n > 0 && signal.is_none() {
                signal = Some(which.map_or("a signal", |w| w.name()));
                meter.pausing();
                // A fatal signal makes the kernel cancel the relocation
                // after the current extent; the device stays a member.
                tools::interrupt_group(&child);
            }
        };
        kernel += ran.elapsed();
        let stderr = crate::sys::kernel::child::read_stderr(&mut child);
        let still = fs.devices()?.into_iter().find(|d| d.devid == dev.devid);
        if still.is_none() {
            // Gone: the last state is nothing left on it.
            let secs = t0.elapsed().as_secs_f64();
            let rate = if secs > 0.0 {
                start_bytes as f64 / secs
            } else {
                0.0
            };
            progress(&step.at(0, rate, Some(0.0), Pace::Done));
        }
        match (status.success(), still) {
            (true, None) => removed.push(gone()),
            (_, Some(d)) if signal.is_some() => {
                return Ok(RemoveReport::stopped(
                    plan,
                    RemoveStopped {
                        signal: signal.unwrap_or("a signal").to_owned(),
                        removed,
                        devid: dev.devid,
                        bytes_left: d.bytes_used,
                    },
                ));
            }
            (_, None) => removed.push(gone()),
            (_, Some(_)) => return Err(remove_failed(dev.devid, shown, &stderr, &removed)),
        }
    }
    let checking = Instant::now();
    let mut result = verified(fs, plan, removed)?;
    result.phases.kernel = kernel.as_secs_f64();
    result.phases.verify = checking.elapsed().as_secs_f64();
    Ok(RemoveReport::done(plan, result))
}

/// One device's place in the plan, as its progress says it.
struct Step {
    devid: u64,
    step: usize,
    steps: usize,
    bytes_start: u64,
}

impl Step {
    /// Where it is: `bytes_left` on the device, at `rate` bytes a second.
    fn at(&self, bytes_left: u64, rate: f64, eta: Option<f64>, pace: Pace) -> RemoveProgress {
        RemoveProgress {
            devid: self.devid,
            step: self.step,
            steps: self.steps,
            bytes_start: self.bytes_start,
            bytes_left,
            rate_bytes_per_sec: rate,
            eta_seconds: eta,
            pace,
        }
    }
}

/// Records the remove before the kernel is asked: a re-run ties a device
/// that is no longer a member to this remove, and to nothing else.
fn record_started(fs: &FsHandle, plan: &RemovePlan, store: &StartedStore) -> Result<()> {
    if !plan.devices.is_empty() {
        store.save_remove(&StartedRemove {
            fsid: fs.fsid().to_owned(),
            devices: plan
                .devices
                .iter()
                .map(|d| RemovingDevice {
                    devid: d.devid,
                    device: DeviceAt {
                        path: d.path.clone(),
                        devt: crate::sys::block::blockdev::devt_of(Path::new(&d.path)),
                    },
                })
                .collect(),
            started_unix: crate::device::started::now_unix(),
        })?;
    }
    Ok(())
}

/// A device's removal that failed, with the kernel's reason where known
/// and what was removed before it.
fn remove_failed(devid: u64, shown: &[String], stderr: &str, removed: &[Removed]) -> Error {
    let why = stderr
        .trim()
        .lines()
        .last()
        .unwrap_or("no message")
        .to_owned();
    let failure = crate::device::preflight::kernel_failure(&why);
    let hint = failure.map_or(
        "the device is still a member; what moved stays moved (a consistent filesystem); see the kernel log",
        |(_, next)| next,
    );
    let why = match failure {
        Some((errno, _)) => format!("the kernel stopped it with {errno} ({why})"),
        None => why,
    };
    Error::new(
        ErrorKind::Tool,
        format!(
            "removing device {} failed: {why} (while running: {})",
            devid,
            display_argv(shown)
        ),
    )
    .with_hint(format!(
        "{hint}{}",
        if removed.is_empty() {
            String::new()
        } else {
            format!(
                "; removed before it: {}",
                removed
                    .iter()
                    .map(|r: &Removed| r.devid.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ))
}

/// After the last step: every device removed is gone, and every chunk's
/// redundancy on the devices that stay.
fn verified(fs: &FsHandle, plan: &RemovePlan, removed: Vec<Removed>) -> Result<RemoveResult> {
    let infos = fs.devices()?;
    for r in &removed {
        if infos.iter().any(|d| d.devid == r.devid) {
            return Err(Error::new(
                ErrorKind::State,
                format!("device {} is still a member after its removal", r.devid),
            ));
        }
    }
    let present: Vec<u64> = infos
        .iter()
        .filter(|d| !d.path.is_empty())
        .map(|d| d.devid)
        .collect();
    let chunks = fs.chunk_records()?.unwrap_or_default();
    let redundancy = crate::device::redundancy::check(
        &chunks,
        &present,
        &plan.mount_point.display().to_string(),
    );
    Ok(RemoveResult {
        removed,
        devices: infos
            .iter()
            .map(|d| crate::operation::state::MemberDevice {
                devid: d.devid,
                path: d.path.clone(),
                size: d.total_bytes,
                allocated: d.bytes_used,
            })
            .collect(),
        redundancy,
        next: crate::balance::operation::next_step(fs, &plan.mount_point),
        phases: Default::default(),
    })
}

/// While the kernel runs a `device remove` on `fs` (an earlier run's,
/// whose command outlived it), waits for its end, telling `progress` the
/// bytes left on `devid`. `Some(signal)` when a signal came first (the
/// kernel's remove goes on: it is not ours to stop).
fn wait_for_running_remove(
    fs: &FsHandle,
    devid: u64,
    signals: &OperationSignals,
    progress: &mut dyn FnMut(u64),
) -> Result<Option<&'static str>> {
    let root = crate::sys::fs::root::SysRoot::host();
    while crate::operation::state::read_sysfs(&root, fs.fsid(), "exclusive_operation").as_deref()
        == Some("device remove")
    {
        let left = fs
            .devices()?
            .iter()
            .find(|d| d.devid == devid)
            .map_or(0, |d| d.bytes_used);
        progress(left);
        let (n, which) = signals.wait(Duration::from_millis(500));
        if n > 0 {
            return Ok(Some(which.map_or("a signal", |w| w.name())));
        }
    }
    Ok(None)
}
