//! The demo job: a sandbox btrfs, `probe-dio` on a checksummed and on a
//! NOCOW directory of it, the two reports side by side, the sandbox removed.
//!
//! Each probe runs in a child process of this binary (`probe-dio --json`):
//! the probe may enter a private mount namespace to mount tracefs or
//! debugfs, and the sandbox's own mount must stay in this process's
//! namespace, where its teardown unmounts it. The child's report is read
//! back as its type.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{DemoReport, DemoSandbox};
use crate::error::{Error, ErrorKind, Result, exit};
use crate::probe::report::ProbeReport;
use crate::sandbox::{self, Locations, SandboxRequest};
use crate::sys::{fs::filesystem, kernel::btrfs, kernel::signals, kernel_release};
use crate::ui::Ui;

/// What the demo is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemoOptions {
    /// Size of each probe's test file (`None`: probe-dio's own default,
    /// 4 MiB when its per-file tracepoints count the pages: enough for
    /// the verdict, which is all the demo shows).
    pub file_size: Option<u64>,
    /// Rounds of each probe (the medians decide).
    pub rounds: u32,
}

/// Runs the demo: the sandbox (torn down on every path), the two probes,
/// the report. Its story ("creating a sandbox...", "probing ...") goes to
/// `ui` as status lines; with `--quiet` the probes are quiet too.
pub fn run(opts: &DemoOptions, places: &Locations, ui: &dyn Ui) -> Result<DemoReport> {
    // The probes' numbers checked before anything is made (a --file-size
    // probe-dio refuses would otherwise fail after the sandbox was built).
    let mut check = crate::probe::ProbeOptions::new(".");
    check.size_bytes = opts.file_size;
    check.rounds = opts.rounds;
    check.validate()?;
    let exe = std::env::current_exe().map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot find the btrfs-lab executable: {e}"),
        )
    })?;
    ui.status("btrfs-lab demo: creating a sandbox btrfs on a loop device with direct I/O...\n");
    let request = SandboxRequest {
        name: Some(format!("demo-{}", crate::sys::fs::nonce::nonce())),
        ..SandboxRequest::default()
    };
    // Torn down when this guard drops: on success, error, or interrupt.
    let sbx = sandbox::up(&request, &places.store, &places.sandbox_root)?;
    let profiles = btrfs::block_group_profiles(sbx.mount_point())?;
    let checksummed = sbx.mount_point().join("checksummed");
    let nocow = sbx.mount_point().join("nocow");
    for d in [&checksummed, &nocow] {
        fs::create_dir(d).map_err(|e| Error::from_io(&e, "cannot create", d))?;
    }
    filesystem::set_nocow_dir(&nocow, false)?;

    let checksummed_report = probe(&exe, opts, "checksummed", &checksummed, ui)?;
    let nocow_report = probe(&exe, opts, "NOCOW", &nocow, ui)?;
    sbx.down()?;

    Ok(DemoReport {
        kernel: kernel_release(),
        sandbox: DemoSandbox {
            name: request.name.unwrap_or_default(),
            devices: 1,
            size_bytes: request.size_bytes,
            data_profiles: profiles.data,
            metadata_profiles: profiles.metadata,
            removed: true,
        },
        checksummed: checksummed_report,
        nocow: nocow_report,
    })
}

/// `probe-dio --json` on `dir` in a child process, its report read back.
fn probe(
    exe: &Path,
    opts: &DemoOptions,
    label: &str,
    dir: &Path,
    ui: &dyn Ui,
) -> Result<ProbeReport> {
    ui.status(&format!(
        "probing the {label} directory ({} rounds)...\n",
        opts.rounds
    ));
    let mut probe = Command::new(exe);
    if ui.quiet() {
        probe.arg("--quiet");
    }
    probe.arg("probe-dio").arg("--json");
    if let Some(size) = opts.file_size {
        probe.arg("--file-size").arg(size.to_string());
    }
    let child = probe
        .arg("--rounds")
        .arg(opts.rounds.to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot run probe-dio: {e}")))?;
    signals::check()?;
    let code = child.status.code();
    if code == Some(i32::from(exit::INTERRUPTED)) {
        return Err(Error::interrupted());
    }
    serde_json::from_slice(&child.stdout).map_err(|_| {
        Error::new(
            ErrorKind::Tool,
            format!("probe-dio on the {label} directory failed (exit status {code:?})"),
        )
    })
}
