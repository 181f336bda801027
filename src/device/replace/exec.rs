//! Carrying out a replace: started in a session of its own, followed to
//! its end, resized, verified; a signal detaches.

use std::time::{Duration, Instant};

use crate::device::preflight::same_device;
use crate::device::started::{DeviceAt, StartedReplace, StartedStore};
use crate::error::{Error, ErrorKind, Result};
use crate::sys::kernel::btrfs::{DevExtent, FsHandle};
use crate::sys::kernel::signals::OperationSignals;
use crate::sys::tools::{self, display_argv};

use super::*;

/// Records the replace before the kernel is asked (a re-run ties NEW being
/// device N to this replace, and to nothing else) and starts `first`.
fn start_replace(
    fs: &FsHandle,
    plan: &ReplacePlan,
    old: &OldDevice,
    store: &StartedStore,
    first: &[String],
) -> Result<std::process::Child> {
    let new = plan
        .new
        .as_ref()
        .ok_or_else(|| Error::new(ErrorKind::State, "no new device in the plan"))?;
    store.save_replace(&StartedReplace {
        fsid: fs.fsid().to_owned(),
        devid: old.devid,
        old_path: old.path.clone(),
        new: DeviceAt {
            path: new.resolved.display().to_string(),
            devt: crate::sys::block::blockdev::devt_of(&new.resolved),
        },
        started_unix: crate::device::started::now_unix(),
    })?;
    let mut argv = first.to_vec();
    if let Some(last) = argv.last_mut() {
        *last = fs.proc_path().display().to_string();
    }
    let tool = tools::find(
        &argv[0],
        if argv[0] == "btrfs" {
            "btrfs-progs"
        } else {
            "systemd"
        },
    )?;
    crate::sys::kernel::child::spawn_in_new_session(&tool.path, &argv[1..]).map_err(|e| {
        Error::new(
            ErrorKind::Tool,
            format!("cannot start {}: {e}", display_argv(first)),
        )
    })
}

/// Until the kernel says the replace runs (or the command failed).
fn wait_until_running(
    fs: &FsHandle,
    mut child: Option<&mut (std::process::Child, Vec<String>)>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = fs.replace_status()?;
        if s.state == btrfs_uapi::replace::ReplaceState::Started {
            break;
        }
        if let Some((c, shown)) = child.as_deref_mut()
            && let Some(status) = c
                .try_wait()
                .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?
        {
            let s = fs.replace_status()?;
            if status.success() && s.state == btrfs_uapi::replace::ReplaceState::Finished {
                break;
            }
            let stderr = crate::sys::kernel::child::read_stderr(c);
            return Err(Error::new(
                ErrorKind::Tool,
                format!(
                    "the replace did not start: {} (while running: {})",
                    stderr.trim().lines().last().unwrap_or("no message"),
                    display_argv(shown)
                ),
            )
            .with_hint("the filesystem is unchanged; see btrfs-lab show"));
        }
        if child.is_none() && s.state != btrfs_uapi::replace::ReplaceState::Started {
            break;
        }
        if Instant::now() > deadline {
            return Err(Error::new(
                ErrorKind::State,
                "the replace was started but the kernel does not report it running after 120 s",
            )
            .with_hint("see btrfs-lab device replace MOUNT --status and the kernel log"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The kernel ended the replace as "canceled": cancelled, or failed
/// (ENOSPC, EIO, ...: its errno is in what the starting command printed).
fn ended_unfinished(devid: u64, child: Option<&mut (std::process::Child, Vec<String>)>) -> Error {
    let started_here = child.is_some();
    let said = child.map(|(c, _)| {
        let _ = c.wait();
        crate::sys::kernel::child::read_stderr(c)
    });
    let last = said
        .as_deref()
        .and_then(|t| t.trim().lines().last())
        .unwrap_or("")
        .to_owned();
    if let Some((errno, next)) = crate::device::preflight::kernel_failure(&last) {
        return Error::new(
            ErrorKind::Tool,
            format!(
                "the replace of device {} failed: the kernel stopped it with {errno}; device {} is still a member ({last})",
                devid, devid
            ),
        )
        .with_hint(next);
    }
    let (what, hint) = if started_here {
        (
            "was cancelled (--cancel, a suspend or a freeze)",
            "run the same command again to start it anew",
        )
    } else {
        (
            "ended without finishing: cancelled, or failed (this run followed a replace started elsewhere, whose error it cannot read)",
            "see the kernel log (dmesg) for the reason; run the same command again to start it anew once it is dealt with",
        )
    };
    Error::new(
        ErrorKind::State,
        format!(
            "the replace of device {} {what}; device {} is still a member, unchanged",
            devid, devid
        ),
    )
    .with_hint(hint)
}

/// Carries out the plan: starts the replace (unless it follows one),
/// follows it to the end (`progress` hears each step), resizes and
/// verifies. A signal detaches: the replace goes on in the kernel.
pub fn execute_replace(
    fs: &FsHandle,
    plan: &ReplacePlan,
    store: &StartedStore,
    signals: &OperationSignals,
    progress: &mut dyn FnMut(&ReplaceProgress),
) -> Result<ReplaceReport> {
    let old = plan
        .old
        .as_ref()
        .ok_or_else(|| Error::new(ErrorKind::State, "no device to replace"))?;
    let extents: Vec<DevExtent> = fs
        .dev_extents()?
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.devid == old.devid)
        .collect();
    let total: u64 = extents.iter().map(|e| e.length).sum();
    let started = Instant::now();
    let mut child = None;
    let mut rest = plan.commands.as_slice();
    if !plan.following {
        let (first, more) = rest
            .split_first()
            .ok_or_else(|| Error::new(ErrorKind::State, "the plan has no command"))?;
        rest = more;
        child = Some((start_replace(fs, plan, old, store, first)?, first.clone()));
    }
    wait_until_running(fs, child.as_mut())?;
    // Follow.
    let mut meter = crate::report::progress::Meter::new();
    loop {
        let s = fs.replace_status()?;
        let cursor = (u128::from(s.progress_1000) * u128::from(old.size) / 1000) as u64;
        let done = if s.state == btrfs_uapi::replace::ReplaceState::Finished {
            total
        } else {
            copied_below(&extents, cursor).min(total)
        };
        let r = meter.observe(done, total);
        let p = ReplaceProgress {
            bytes_total: total,
            bytes_done: done,
            device_permille: s.progress_1000,
            rate_bytes_per_sec: r.rate_bytes_per_sec.unwrap_or(0.0),
            eta_seconds: r.eta_seconds,
            pace: r.pace,
        };
        progress(&p);
        use btrfs_uapi::replace::ReplaceState as S;
        match s.state {
            S::Started => {}
            S::Finished => break,
            S::Canceled => return Err(ended_unfinished(old.devid, child.as_mut())),
            S::Suspended | S::NeverStarted => {
                return Err(Error::new(
                    ErrorKind::State,
                    "the replace stopped (the filesystem was unmounted?); it continues at the next mount",
                ));
            }
        }
        // With the starting command still running (`-B`), its end wakes
        // the loop at once: the replace has ended.
        let (n, which) = match &child {
            Some((c, _)) => signals.wait_child(Duration::from_millis(500), c),
            None => signals.wait(Duration::from_millis(500)),
        };
        if n > 0 {
            // The replace runs in its own session: it goes on.
            return Ok(ReplaceReport {
                detached: Some(ReplaceDetached {
                    signal: which.map_or("a signal", |w| w.name()).to_owned(),
                    progress: Some(p),
                }),
                ..ReplaceReport::planned(plan)
            });
        }
    }
    if let Some((mut c, shown)) = child {
        let status = c
            .wait()
            .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
        if !status.success() {
            let stderr = crate::sys::kernel::child::read_stderr(&mut c);
            let st = fs.replace_status()?;
            if st.state != btrfs_uapi::replace::ReplaceState::Finished {
                return Err(Error::new(
                    ErrorKind::Tool,
                    format!(
                        "the replace failed: {} (while running: {})",
                        stderr.trim().lines().last().unwrap_or("no message"),
                        display_argv(&shown)
                    ),
                ));
            }
        }
    }
    let s = fs.replace_status()?;
    if !rest.is_empty() {
        wait_exclusive_released(fs, signals)?;
    }
    for shown in rest {
        let mut argv = shown.clone();
        if let Some(last) = argv.last_mut() {
            *last = fs.proc_path().display().to_string();
        }
        let tool = tools::find(&argv[0], "btrfs-progs")?;
        tool.run(&argv[1..]).map_err(|e| {
            Error::new(
                e.kind(),
                format!(
                    "the replace is done, but {} failed: {}",
                    display_argv(shown),
                    e.message()
                ),
            )
            .with_hint("run it again by hand; the data is on the new device")
        })?;
    }
    let kernel = started.elapsed().as_secs_f64();
    let checking = Instant::now();
    let mut result = verify(fs, plan, old.devid, &s, kernel)?;
    result.phases.kernel = kernel;
    result.phases.verify = checking.elapsed().as_secs_f64();
    Ok(ReplaceReport {
        result: Some(result),
        ..ReplaceReport::planned(plan)
    })
}

/// The kernel marks a replace finished a moment before it lets go of the
/// filesystem's exclusive operation (a run that follows a replace it did
/// not start sees the first and not yet the second): what comes after it
/// (the resize) waits, at most a minute, until sysfs `exclusive_operation`
/// no longer says `device replace` (5.10 and later; an older kernel has no
/// such file and nothing is waited for). A signal ends the wait: the
/// replace is done, the resize is what the error names.
fn wait_exclusive_released(fs: &FsHandle, signals: &OperationSignals) -> Result<()> {
    let root = crate::sys::fs::root::SysRoot::host();
    for _ in 0..600 {
        match crate::operation::state::read_sysfs(&root, fs.fsid(), "exclusive_operation") {
            Some(op) if op == "device replace" => {}
            _ => return Ok(()),
        }
        let (n, _) = signals.wait(Duration::from_millis(100));
        if n > 0 {
            return Ok(());
        }
    }
    Ok(())
}

/// Checks that NEW took OLD's devid and size, and every chunk's redundancy.
fn verify(
    fs: &FsHandle,
    plan: &ReplacePlan,
    devid: u64,
    s: &btrfs_uapi::replace::ReplaceStatus,
    seconds: f64,
) -> Result<ReplaceResult> {
    let devices = fs.devices()?;
    let Some(now) = devices.iter().find(|d| d.devid == devid) else {
        return Err(Error::new(
            ErrorKind::State,
            format!("device {devid} is not a member after the replace"),
        ));
    };
    if let Some(new) = &plan.new
        && !same_device(&now.path, &new.resolved)
    {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "device {devid} is {} after the replace, not {}",
                if now.path.is_empty() {
                    "missing"
                } else {
                    &now.path
                },
                new.path.display()
            ),
        ));
    }
    let m = plan.mount_point.display().to_string();
    let present: Vec<u64> = devices
        .iter()
        .filter(|d| !d.path.is_empty())
        .map(|d| d.devid)
        .collect();
    let chunks = fs.chunk_records()?.unwrap_or_default();
    let redundancy = crate::device::redundancy::check(&chunks, &present, &m);
    Ok(ReplaceResult {
        devid,
        path: now.path.clone(),
        size: now.total_bytes,
        write_errors: s.num_write_errors,
        uncorrectable_read_errors: s.num_uncorrectable_read_errors,
        redundancy,
        scrub_command: vec!["btrfs-lab".into(), "scrub".into(), m.clone()],
        seconds,
        next: crate::balance::operation::next_step(fs, &plan.mount_point),
        phases: Default::default(),
    })
}
