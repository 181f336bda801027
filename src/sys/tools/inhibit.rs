//! A systemd-logind sleep inhibitor held for as long as a long operation
//! runs (a scrub): `systemd-inhibit --what=sleep --mode=block` around a
//! `sleep infinity` of its own, killed (its whole process group) and
//! reaped when the guard drops. No D-Bus client in the tree: the program is
//! the interface (docs/decisions.md).

use std::process::{Child, Stdio};
use std::time::Duration;

use rustix::process::Signal;

/// The held inhibitor; dropping it lets the machine sleep again.
#[derive(Debug)]
pub struct SleepInhibitor {
    child: Child,
}

impl SleepInhibitor {
    /// Holds off suspend and hibernation with `why` as the reason logind
    /// shows; `Err(why not)` where systemd-inhibit or logind is missing.
    pub fn hold(why: &str) -> std::result::Result<Self, String> {
        let inhibit = super::find("systemd-inhibit", "systemd")
            .map_err(|_| "systemd-inhibit is not installed".to_owned())?;
        let sleep = super::find("sleep", "coreutils").map_err(|e| e.message().to_owned())?;
        let args = vec![
            "--what=sleep".to_owned(),
            "--who=btrfs-lab".to_owned(),
            format!("--why={why}"),
            "--mode=block".to_owned(),
            sleep.path.to_string_lossy().into_owned(),
            "infinity".to_owned(),
        ];
        let mut child =
            super::spawn_in_group(&inhibit.path, &args, None, Stdio::null(), Stdio::piped())
                .map_err(|e| format!("cannot start systemd-inhibit: {e}"))?;
        // Without logind it fails at once: give it a moment to say so.
        for _ in 0..20 {
            match child.try_wait() {
                Ok(Some(_)) => {
                    let text = crate::sys::kernel::child::read_stderr(&mut child);
                    let text = text.trim();
                    return Err(if text.is_empty() {
                        "systemd-inhibit failed (is systemd-logind running?)".to_owned()
                    } else {
                        format!("systemd-inhibit: {text}")
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("systemd-inhibit: {e}")),
            }
        }
        Ok(Self { child })
    }
}

impl Drop for SleepInhibitor {
    fn drop(&mut self) {
        super::kill_group(&self.child, Signal::TERM);
        let _ = self.child.wait();
    }
}
