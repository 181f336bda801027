//! The running scrub: its counters, `--status`, `--cancel`.

use super::plan::bytes_to_read;
use super::{DeviceScrub, ScrubCancel, ScrubStatus, SpeedLimit, StateStore};
use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::root::SysRoot;
use crate::sys::kernel::{btrfs, scrub};

/// The scrub counters of each device of `mount` while a scrub runs
/// (empty when none runs).
pub fn running(fs: &btrfs::FsHandle) -> Result<Vec<DeviceScrub>> {
    let mount = fs.path();
    let f = fs.held_fd()?;
    let mut out = Vec::new();
    let mut used = None;
    for d in fs.devices()? {
        if d.path.is_empty() {
            continue;
        }
        let Some(p) = scrub::progress(f, d.devid, mount)? else {
            continue;
        };
        if used.is_none() {
            used = Some(bytes_to_read(fs)?.unwrap_or_default());
        }
        let to_read = used
            .as_ref()
            .and_then(|u| u.iter().find(|(id, _)| *id == d.devid))
            .map_or(d.bytes_used, |x| x.1);
        out.push(DeviceScrub::of(d.devid, &d.path, to_read, &p));
    }
    Ok(out)
}

/// `--status`.
pub fn status(fs: &btrfs::FsHandle, store: &StateStore) -> Result<ScrubStatus> {
    let fsid = fs.fsid().to_owned();
    let devices = running(fs)?;
    Ok(ScrubStatus {
        mount_point: fs.path().to_path_buf(),
        fsid: fsid.clone(),
        running: !devices.is_empty(),
        running_since: if devices.is_empty() {
            None
        } else {
            store.running_since(&fsid)
        },
        last: store.load(&fsid)?,
        limits: limits(fs, &fsid, store)?,
        devices,
    })
}

/// The scrub speed limits in force on `mount`'s devices, with who set them
/// when the settings ledger knows.
fn limits(fs: &btrfs::FsHandle, fsid: &str, store: &StateStore) -> Result<Vec<SpeedLimit>> {
    use crate::sys::kernel::settings::{self, Setting};
    let ledger = store.ledger();
    let mut out = Vec::new();
    for d in fs.devices()? {
        let Some(v) = btrfs::scrub_speed_max(&SysRoot::host(), fsid, d.devid).filter(|v| *v > 0)
        else {
            continue;
        };
        let set_by = ledger
            .find(&Setting::ScrubSpeedMax {
                fsid: fsid.to_owned(),
                devid: d.devid,
            })
            .map(|r| {
                format!(
                    "btrfs-lab {} (pid {}), {}",
                    r.command,
                    r.pid,
                    if settings::owner_running(&r) {
                        "running now"
                    } else {
                        "killed before it put the limit back"
                    }
                )
            });
        out.push(SpeedLimit {
            devid: d.devid,
            bytes_per_second: v,
            set_by,
        });
    }
    Ok(out)
}

/// `--cancel`: ENOTCONN (nothing runs) is an error of kind `State`.
pub fn cancel(fs: &btrfs::FsHandle) -> Result<ScrubCancel> {
    let mount = fs.path();
    if scrub::cancel(fs.held_fd()?, mount)? {
        Ok(ScrubCancel {
            mount_point: mount.to_path_buf(),
            cancelled: true,
        })
    } else {
        Err(Error::new(
            ErrorKind::State,
            format!("no scrub runs on {}", mount.display()),
        )
        .with_hint(format!(
            "btrfs-lab scrub {} --status shows the last one",
            mount.display()
        )))
    }
}
