//! The QEMU rig (docs/rig.md): Debian's own kernel packages booted with
//! emulated NVMe drives behind PCIe root ports, so scenarios run on real
//! kernels and a real NVMe driver stack with faults a loop device cannot
//! make (a throttled member, a write burst that runs out, a drive pulled out
//! with QMP `device_del`).
//!
//! The shell side lives in `tests/rig/`: `fetch-kernel.sh` (apt, a private
//! state dir, the exact versions recorded), `build-initramfs.sh` (busybox,
//! the modules, btrfs-lab and the tools with their libraries) and
//! `guest-init` (the guest's /init, results on ttyS1 between markers). This
//! module boots the guest, performs the host's actions when the guest asks
//! for them, and parses the results.
//!
//! Which kernels: `BTRFS_LAB_RIG_KERNELS` (comma-separated suites; default
//! [`DEFAULT_KERNELS`], what CI runs); `scripts/rig-matrix.sh` runs every
//! suite. The kernel cache: `BTRFS_LAB_RIG_CACHE` (default
//! `/var/tmp/btrfs-lab-rig-cache`). Everything else (images, the initramfs,
//! the logs, the QMP socket) lives in the test's own temp dir.

mod scenarios;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::common::bin;

/// The suites CI boots on every run: the oldest and the newest kernel of
/// the matrix (the scenarios other than probe-dio's run on the first).
pub const DEFAULT_KERNELS: &str = "bookworm,trixie-backports";
/// Every suite the rig knows (`scripts/rig-matrix.sh`).
pub const ALL_KERNELS: &[&str] = &[
    "bookworm",
    "bookworm-backports",
    "trixie",
    "trixie-backports",
    "sid",
];

fn rig_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rig")
}

fn find(tool: &str) -> Option<PathBuf> {
    which::which_in(
        tool,
        Some("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        "/",
    )
    .ok()
}

/// True if this machine can run the rig; a missing part fails the test
/// with what is missing (a test built to run never passes without
/// running: built by a user who is not root, the rig tests are ignored).
pub fn require_rig(test: &str) -> bool {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_owned());
    }
    for tool in [
        "qemu-system-x86_64",
        "busybox",
        "cpio",
        "modprobe",
        "depmod",
        "apt-get",
        "dpkg-deb",
        "strip",
        "btrfs",
        "mkfs.btrfs",
        "fio",
        "chattr",
        "dmsetup",
        "flock",
        "file",
    ] {
        if find(tool).is_none() {
            missing.push(tool.to_owned());
        }
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "{test} needs {} (install them with scripts/install-rig-deps.sh)",
        missing.join(", ")
    );
    panic!("a rig prerequisite is missing: {msg}");
}

/// The suites to boot, from `BTRFS_LAB_RIG_KERNELS` (or the default).
pub fn kernels() -> Vec<String> {
    let v = std::env::var("BTRFS_LAB_RIG_KERNELS").unwrap_or_default();
    let v = if v.trim().is_empty() {
        DEFAULT_KERNELS.to_owned()
    } else {
        v
    };
    let list: Vec<String> = v
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    for s in &list {
        assert!(
            ALL_KERNELS.contains(&s.as_str()),
            "BTRFS_LAB_RIG_KERNELS: unknown suite '{s}': use {}",
            ALL_KERNELS.join(", ")
        );
    }
    list
}

/// One guest at a time (2 cores; a TCG guest takes both), and one fetch of
/// a suite at a time within this process (the script also takes a lock).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fetched Debian kernel: the exact package and version.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub suite: String,
    pub package: String,
    pub version: String,
    /// `uname -r`.
    pub release: String,
    dir: PathBuf,
    vmlinuz: PathBuf,
}

impl Kernel {
    /// Fetches (or finds in the cache) the kernel of `suite`.
    pub fn fetch(suite: &str) -> Result<Kernel, String> {
        let cache = std::env::var_os("BTRFS_LAB_RIG_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp/btrfs-lab-rig-cache"));
        fs::create_dir_all(&cache).map_err(|e| format!("rig cache {}: {e}", cache.display()))?;
        let out = Command::new(rig_dir().join("fetch-kernel.sh"))
            .arg(suite)
            .arg(&cache)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("tests/rig/fetch-kernel.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "fetching the {suite} kernel failed (exit {:?}): {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dir = cache.join(suite);
        let env = fs::read_to_string(dir.join("kernel.env"))
            .map_err(|e| format!("{}: {e}", dir.join("kernel.env").display()))?;
        let field = |k: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .map(str::to_owned)
                .ok_or_else(|| format!("{}/kernel.env has no {k}", dir.display()))
        };
        Ok(Kernel {
            suite: suite.to_owned(),
            package: field("PACKAGE")?,
            version: field("VERSION")?,
            release: field("KREL")?,
            vmlinuz: dir.join("root").join(field("VMLINUZ")?),
            dir,
        })
    }

    fn vmlinuz(&self) -> PathBuf {
        self.vmlinuz.clone()
    }

    /// "trixie: linux-image-6.12.117+deb13-amd64 6.12.117-1".
    pub fn describe(&self) -> String {
        format!("{}: {} {}", self.suite, self.package, self.version)
    }
}

/// One emulated NVMe drive, behind its own pcie-root-port.
#[derive(Clone, Debug)]
pub struct Drive {
    pub size_bytes: u64,
    /// `throttling.bps-read` / `bps-write` of its -drive (a slow member).
    pub bps_read: Option<u64>,
    pub bps_write: Option<u64>,
    /// `throttling.bps-write-max` for `bps-write-max-length` seconds: a
    /// write burst that runs out (an SLC cache).
    pub bps_write_max: Option<u64>,
    pub bps_write_max_length: Option<u64>,
    /// The root port's `x-speed` (GT/s: "2_5", "5", "8", "16") and `x-width`.
    pub port_speed: Option<&'static str>,
    pub port_width: Option<u32>,
}

impl Drive {
    pub fn new(size_bytes: u64) -> Self {
        Drive {
            size_bytes,
            bps_read: None,
            bps_write: None,
            bps_write_max: None,
            bps_write_max_length: None,
            port_speed: None,
            port_width: None,
        }
    }
}

/// What the host does when the guest says `rig_wait NAME`.
#[derive(Clone, Debug)]
pub enum Action {
    /// QMP `device_del` of drive N (its id is `nvmeN`).
    DeviceDel(usize),
    /// Drive N put back after a [`Action::DeviceDel`]: its image opened
    /// again (`blockdev-add`, the old backend went with the device) and an
    /// NVMe controller with the same serial plugged into the same port.
    DeviceAdd(usize),
}

/// A guest to boot: its drives, the scenario (busybox sh, sourced by the
/// guest's init with `rig_run`, `rig_note` and `rig_wait` defined) and the
/// host's actions.
pub struct Guest {
    pub drives: Vec<Drive>,
    pub scenario: String,
    pub actions: BTreeMap<String, Action>,
    pub timeout: Duration,
    /// Reuse the drive images of an earlier boot (a second boot of the same
    /// "machine", e.g. with a drive missing): image paths by drive index.
    pub images: Option<Vec<Option<PathBuf>>>,
}

/// One `rig_run` in the guest.
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub rc: i32,
    pub stdout: String,
    pub stderr: String,
}

/// What a boot gave back.
#[derive(Debug)]
pub struct Outcome {
    pub kernel: Kernel,
    pub runs: BTreeMap<String, Run>,
    pub notes: Vec<String>,
    /// Drive index -> the guest's block device (the guest names controllers
    /// in probe order, not in the order of the drives).
    pub devices: BTreeMap<usize, String>,
    pub boot_secs: f64,
    pub total_secs: f64,
    /// The drive images (for a second boot).
    pub images: Vec<PathBuf>,
    /// The guest's console (kernel messages).
    pub console: String,
}

impl Outcome {
    /// The guest's block device of drive `i` (`/dev/nvmeXn1`).
    pub fn dev(&self, i: usize) -> &str {
        self.devices.get(&i).map(String::as_str).unwrap_or_else(|| {
            panic!(
                "[{}] no device for drive {i}: {:?}",
                self.kernel.describe(),
                self.devices
            )
        })
    }

    /// The run named `name`; panics with the guest's notes and console tail
    /// when the scenario did not run it.
    pub fn run(&self, name: &str) -> &Run {
        self.runs.get(name).unwrap_or_else(|| {
            panic!(
                "[{}] the guest reported no run '{name}' (runs: {:?}; notes: {:?})\nconsole tail:\n{}",
                self.kernel.describe(),
                self.runs.keys().collect::<Vec<_>>(),
                self.notes,
                tail(&self.console, 30)
            )
        })
    }

    /// The run's stdout as one btrfs-lab JSON document (schema-checked).
    pub fn json(&self, name: &str) -> serde_json::Value {
        let r = self.run(name);
        if r.stdout.trim().is_empty() {
            panic!(
                "[{}] run '{name}' printed no JSON (exit {}): {}",
                self.kernel.describe(),
                r.rc,
                r.stderr
            );
        }
        crate::common::json(&r.stdout)
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Kills and reaps the qemu this test started, on every path: on drop
/// (a return or a panic) its whole process group (qemu is its group's
/// leader, see [`spawn_qemu`]), then the child itself.
struct QemuChild(Option<Child>);

impl QemuChild {
    fn kill_group(c: &mut Child) {
        if let Some(pid) = rustix::process::Pid::from_raw(c.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = c.kill();
    }
}

impl Drop for QemuChild {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            Self::kill_group(&mut c);
            let _ = c.wait();
        }
    }
}

/// Starts qemu so that it never outlives this test process: in its own
/// process group (killed whole on drop), and with PR_SET_PDEATHSIG =
/// SIGKILL, so that a test process killed with SIGKILL (which runs no
/// drop) takes qemu with it. The death signal follows the thread that
/// forked (the test's thread), which waits for qemu before it returns.
fn spawn_qemu(cmd: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before exec and only
    // makes two async-signal-safe system calls (prctl, getppid) through
    // rustix, allocating nothing and taking no lock.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The parent may have died between fork and prctl: then no
            // signal will come, so do not start at all.
            let ppid = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
            if ppid != Some(parent as i32) {
                return Err(std::io::Error::other("the test process is gone"));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// The btrfs-lab the guest runs: the static release binary
/// (`scripts/release.sh --build-only`), never the debug test build.
/// `BTRFS_LAB_RIG_BINARY` names it (scripts/test.sh builds it and sets
/// it); unset, this builds it the same way once per test process, into
/// this build's target dir. Either way `file` must say it is static.
pub fn rig_binary() -> Result<PathBuf, String> {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let path = match std::env::var_os("BTRFS_LAB_RIG_BINARY").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => match built.as_ref() {
            Some(p) => p.clone(),
            None => {
                // target/debug/btrfs-lab -> target
                let target = bin()
                    .parent()
                    .and_then(Path::parent)
                    .map(Path::to_path_buf)
                    .ok_or("no target dir above the test binary")?;
                eprintln!(
                    "rig: BTRFS_LAB_RIG_BINARY is unset: building the static binary \
                     (scripts/release.sh --build-only, CARGO_TARGET_DIR={})",
                    target.display()
                );
                let out =
                    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/release.sh"))
                        .arg("--build-only")
                        .env("CARGO_TARGET_DIR", &target)
                        .stdin(Stdio::null())
                        .stderr(Stdio::inherit())
                        .output()
                        .map_err(|e| format!("scripts/release.sh --build-only: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "building the rig's static binary failed: scripts/release.sh --build-only exited {:?} (its messages are above)",
                        out.status.code()
                    ));
                }
                let p = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .last()
                    .map(|l| PathBuf::from(l.trim()))
                    .ok_or("scripts/release.sh --build-only printed no path")?;
                *built = Some(p.clone());
                p
            }
        },
    };
    check_static(&path)?;
    Ok(path)
}

/// `file -b PATH` must say "statically linked" (or "static-pie linked").
fn check_static(path: &Path) -> Result<(), String> {
    if !path.is_file() {
        return Err(format!(
            "the rig's binary {} does not exist: build it with scripts/release.sh --build-only \
             and name it in BTRFS_LAB_RIG_BINARY (or leave that unset to have the test build it)",
            path.display()
        ));
    }
    let file = find("file").ok_or("file not found: install file (scripts/install-rig-deps.sh)")?;
    let out = Command::new(file)
        .arg("-b")
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("file {}: {e}", path.display()))?;
    let kind = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if kind.contains("statically linked") || kind.contains("static-pie linked") {
        Ok(())
    } else {
        Err(format!(
            "the rig's binary {} is not static (file: {kind}): use scripts/release.sh --build-only's",
            path.display()
        ))
    }
}

fn shell_out(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed (exit {:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A newc cpio holding one file, `rig/scenario.sh` (appended to the base
/// initramfs: the kernel unpacks concatenated archives in order).
fn scenario_cpio(script: &str) -> Vec<u8> {
    fn entry(out: &mut Vec<u8>, ino: u32, mode: u32, name: &str, data: &[u8]) {
        let header = format!(
            "070701{ino:08X}{mode:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}",
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
        out.extend_from_slice(data);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
    }
    let mut out = Vec::new();
    entry(&mut out, 1, 0o040755, "rig", b"");
    entry(&mut out, 2, 0o100755, "rig/scenario.sh", script.as_bytes());
    entry(&mut out, 0, 0, "TRAILER!!!", b"");
    out
}

fn qmp(socket: &Path, command: &str) -> Result<String, String> {
    let mut s =
        UnixStream::connect(socket).map_err(|e| format!("QMP {}: {e}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut r = BufReader::new(s.try_clone().map_err(|e| e.to_string())?);
    let mut line = String::new();
    r.read_line(&mut line)
        .map_err(|e| format!("QMP greeting: {e}"))?;
    let mut answer = |cmd: &str| -> Result<String, String> {
        s.write_all(cmd.as_bytes())
            .and_then(|_| s.write_all(b"\n"))
            .map_err(|e| format!("QMP write: {e}"))?;
        loop {
            let mut l = String::new();
            if r.read_line(&mut l).map_err(|e| format!("QMP read: {e}"))? == 0 {
                return Err("QMP closed".into());
            }
            if l.contains("\"return\"") || l.contains("\"error\"") {
                return Ok(l);
            }
        }
    };
    answer(r#"{"execute":"qmp_capabilities"}"#)?;
    let a = answer(command)?;
    if a.contains("\"error\"") {
        return Err(format!("QMP {command}: {}", a.trim()));
    }
    Ok(a)
}

fn b64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => continue,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// Why a boot failed: a fault of the emulator, not of what the scenario
/// tests, is retried once.
enum BootError {
    /// The guest kernel panicked before its init ran, or oopsed on an
    /// `int3` trap: a breakpoint the kernel left while patching its own text
    /// (static keys, alternatives) that multi-threaded TCG executed after
    /// the patch ended (seen once in ttwu_do_activate on 7.3.4, in the
    /// scheduler, during a mount).
    Emulator(String),
    Other(String),
}

impl BootError {
    fn into_message(self) -> String {
        match self {
            BootError::Emulator(m) | BootError::Other(m) => m,
        }
    }
}

impl From<String> for BootError {
    fn from(m: String) -> Self {
        BootError::Other(m)
    }
}

impl From<&str> for BootError {
    fn from(m: &str) -> Self {
        BootError::Other(m.to_owned())
    }
}

/// The results channel so far: runs, notes, waits asked for, done.
#[derive(Default)]
struct Parsed {
    runs: BTreeMap<String, Run>,
    notes: Vec<String>,
    waits: Vec<String>,
    /// Drive index -> the guest's block device (`@@RIG-DEV N PATH@@`).
    devices: BTreeMap<usize, String>,
    done: bool,
}

fn parse_results(text: &str) -> Parsed {
    let mut p = Parsed::default();
    let mut cur: Option<(String, Run, u8, String, String)> = None;
    for raw in text.lines() {
        let line = raw.trim_end_matches('\r');
        if let Some(m) = line
            .strip_prefix("@@RIG-")
            .and_then(|l| l.strip_suffix("@@"))
        {
            if let Some(name) = m.strip_prefix("BEGIN ") {
                cur = Some((
                    name.to_owned(),
                    Run::default(),
                    0,
                    String::new(),
                    String::new(),
                ));
            } else if let Some(rc) = m.strip_prefix("RC ") {
                if let Some(c) = cur.as_mut() {
                    c.1.rc = rc.trim().parse().unwrap_or(-1);
                }
            } else if m == "STDOUT" {
                if let Some(c) = cur.as_mut() {
                    c.2 = 1;
                }
            } else if m == "STDERR" {
                if let Some(c) = cur.as_mut() {
                    c.2 = 2;
                }
            } else if m.starts_with("END ") {
                if let Some((name, mut run, _, o, e)) = cur.take() {
                    run.stdout = String::from_utf8_lossy(&b64_decode(&o)).into_owned();
                    run.stderr = String::from_utf8_lossy(&b64_decode(&e)).into_owned();
                    p.runs.insert(name, run);
                }
            } else if let Some(n) = m.strip_prefix("NOTE ") {
                p.notes.push(n.to_owned());
            } else if let Some(d) = m.strip_prefix("DEV ") {
                if let Some((i, path)) = d.split_once(' ')
                    && let Ok(i) = i.parse()
                {
                    p.devices.insert(i, path.to_owned());
                }
            } else if let Some(w) = m.strip_prefix("WAIT ") {
                p.waits.push(w.to_owned());
            } else if m == "DONE" {
                p.done = true;
            }
        } else if let Some(c) = cur.as_mut() {
            match c.2 {
                1 => c.3.push_str(line),
                2 => c.4.push_str(line),
                _ => {}
            }
        }
    }
    p
}

/// How long a guest that said DONE may take to power off.
const POWER_OFF_GRACE: Duration = Duration::from_secs(30);

impl Guest {
    pub fn new(drives: Vec<Drive>, scenario: &str) -> Self {
        Guest {
            drives,
            scenario: scenario.to_owned(),
            actions: BTreeMap::new(),
            timeout: Duration::from_secs(420),
            images: None,
        }
    }

    pub fn action(mut self, name: &str, a: Action) -> Self {
        self.actions.insert(name.to_owned(), a);
        self
    }

    /// Builds the initramfs and boots `kernel` in `work` (the test's temp
    /// dir); returns when the guest powered off after its scenario. Errors
    /// say which step failed, with the guest's last lines.
    ///
    /// A kernel that panics before its init ran (no note came back) is
    /// booted once more, said on stderr: multi-threaded TCG now and then
    /// trips over the kernel patching its own text at boot (an int3 oops
    /// in early boot seen once in about 20 boots of 6.12), a fault of the
    /// emulator, not of what the scenario tests.
    pub fn boot(&self, kernel: &Kernel, work: &Path) -> Result<Outcome, String> {
        match self.boot_once(kernel, work) {
            Err(BootError::Emulator(e)) => {
                eprintln!(
                    "rig: the guest kernel failed in a way of the emulator's (a panic before init, an int3 oops); booting once more\n{e}"
                );
                self.boot_once(kernel, work)
                    .map_err(BootError::into_message)
            }
            r => r.map_err(BootError::into_message),
        }
    }

    fn boot_once(&self, kernel: &Kernel, work: &Path) -> Result<Outcome, BootError> {
        let _one = one_at_a_time();
        let t0 = Instant::now();
        let base = work.join("base.cpio");
        let lab = rig_binary().map_err(|e| format!("[{}] {e}", kernel.describe()))?;
        shell_out(
            Command::new(rig_dir().join("build-initramfs.sh"))
                .arg(&kernel.dir)
                .arg(&lab)
                .arg(&base),
            "tests/rig/build-initramfs.sh",
        )?;
        let mut initrd = fs::read(&base).map_err(|e| format!("{}: {e}", base.display()))?;
        // The host's name, so the documents' envelopes are this build's
        // (tests/it/common.rs checks them as for a run on the host).
        let host: String = btrfs_lab::report::envelope::hostname()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .collect();
        let script = format!("hostname '{host}'\n{}", self.scenario);
        initrd.extend_from_slice(&scenario_cpio(&script));
        let initrd_path = work.join("initrd.cpio");
        fs::write(&initrd_path, &initrd).map_err(|e| format!("{}: {e}", initrd_path.display()))?;
        drop(initrd);
        let _ = fs::remove_file(&base);

        let console = work.join("console.log");
        let results = work.join("results.log");
        let qmp_sock = work.join("qmp.sock");
        for p in [&console, &results, &qmp_sock] {
            let _ = fs::remove_file(p);
        }
        let qemu = find("qemu-system-x86_64").ok_or(
            "qemu-system-x86_64 not found: install qemu-system-x86 (scripts/install-rig-deps.sh)",
        )?;
        let accel = std::env::var("BTRFS_LAB_RIG_ACCEL").unwrap_or_else(|_| "tcg".into());
        let mut args: Vec<String> = vec![
            "-M".into(),
            "q35".into(),
            // SSE4.2 and friends under TCG: crc32c-intel loads, as on hardware.
            "-cpu".into(),
            "max".into(),
            "-accel".into(),
            accel,
            "-m".into(),
            "1024".into(),
            "-smp".into(),
            "2".into(),
            "-nographic".into(),
            "-nodefaults".into(),
            "-no-reboot".into(),
            "-kernel".into(),
            kernel.vmlinuz().display().to_string(),
            "-initrd".into(),
            initrd_path.display().to_string(),
            "-append".into(),
            format!(
                "console=ttyS0 loglevel=4 panic=-1 rig.drives={}",
                self.drives.len()
            ),
            "-chardev".into(),
            format!("file,id=con,path={}", console.display()),
            "-serial".into(),
            "chardev:con".into(),
            "-chardev".into(),
            format!("file,id=res,path={}", results.display()),
            "-serial".into(),
            "chardev:res".into(),
            "-qmp".into(),
            format!("unix:{},server=on,wait=off", qmp_sock.display()),
        ];
        let mut images = Vec::new();
        for (i, d) in self.drives.iter().enumerate() {
            let img = match self
                .images
                .as_ref()
                .and_then(|v| v.get(i).cloned().flatten())
            {
                Some(p) => p,
                None => {
                    let p = work.join(format!("nvme{i}.img"));
                    let f = fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                    f.set_len(d.size_bytes)
                        .map_err(|e| format!("{}: {e}", p.display()))?;
                    p
                }
            };
            let mut port = format!(
                "pcie-root-port,id=rp{i},bus=pcie.0,chassis={},slot={}",
                i + 1,
                i + 1
            );
            if let Some(s) = d.port_speed {
                write!(port, ",x-speed={s}").unwrap();
            }
            if let Some(w) = d.port_width {
                write!(port, ",x-width={w}").unwrap();
            }
            let mut drive = format!(
                "if=none,id=d{i},file={},format=raw,cache=none,aio=threads",
                img.display()
            );
            for (k, v) in [
                ("bps-read", d.bps_read),
                ("bps-write", d.bps_write),
                ("bps-write-max", d.bps_write_max),
                ("bps-write-max-length", d.bps_write_max_length),
            ] {
                if let Some(v) = v {
                    write!(drive, ",throttling.{k}={v}").unwrap();
                }
            }
            args.extend([
                "-device".into(),
                port,
                "-drive".into(),
                drive,
                "-device".into(),
                format!("nvme,id=nvme{i},bus=rp{i},drive=d{i},serial=RIG{i:04}"),
            ]);
            images.push(img);
        }
        let child = spawn_qemu(
            Command::new(&qemu)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped()),
        )
        .map_err(|e| format!("{}: {e}", qemu.display()))?;
        let mut child = QemuChild(Some(child));
        let deadline = Instant::now() + self.timeout;
        let mut acted = 0usize;
        // When the guest said DONE: its results are all out and its drives
        // synced, so a guest that does not power off soon after is killed
        // rather than waited for (it has nothing left to tell).
        let mut done_at: Option<Instant> = None;
        let status = loop {
            let c = child.0.as_mut().unwrap();
            if let Some(st) = c.try_wait().map_err(|e| BootError::Other(e.to_string()))? {
                break Some(st);
            }
            let text = fs::read_to_string(&results).unwrap_or_default();
            let p = parse_results(&text);
            if p.done {
                let at = *done_at.get_or_insert_with(Instant::now);
                if at.elapsed() > POWER_OFF_GRACE {
                    eprintln!(
                        "rig: [{}] the guest did not power off {} s after its scenario; killed",
                        kernel.describe(),
                        POWER_OFF_GRACE.as_secs()
                    );
                    QemuChild::kill_group(c);
                    break Some(c.wait().map_err(|e| BootError::Other(e.to_string()))?);
                }
            }
            while acted < p.waits.len() {
                let name = &p.waits[acted];
                match self.actions.get(name) {
                    Some(Action::DeviceDel(n)) => {
                        qmp(
                            &qmp_sock,
                            &format!(
                                r#"{{"execute":"device_del","arguments":{{"id":"nvme{n}"}}}}"#
                            ),
                        )?;
                    }
                    Some(Action::DeviceAdd(n)) => {
                        let img = images.get(*n).ok_or("DeviceAdd: no such drive")?;
                        qmp(
                            &qmp_sock,
                            &format!(
                                r#"{{"execute":"blockdev-add","arguments":{{"driver":"raw","node-name":"back{n}","file":{{"driver":"file","filename":{},"aio":"threads","cache":{{"direct":true}}}}}}}}"#,
                                serde_json::Value::String(img.display().to_string())
                            ),
                        )?;
                        qmp(
                            &qmp_sock,
                            &format!(
                                r#"{{"execute":"device_add","arguments":{{"driver":"nvme","id":"nvme{n}back","bus":"rp{n}","drive":"back{n}","serial":"RIG{n:04}"}}}}"#
                            ),
                        )?;
                    }
                    None => {
                        return Err(format!(
                            "[{}] the guest waits for '{name}', which this test does not handle",
                            kernel.describe()
                        )
                        .into());
                    }
                }
                acted += 1;
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let console_text =
            String::from_utf8_lossy(&fs::read(&console).unwrap_or_default()).into_owned();
        let results_text = fs::read_to_string(&results).unwrap_or_default();
        let p = parse_results(&results_text);
        let stderr = match child.0.take() {
            Some(mut c) => {
                if status.is_none() {
                    QemuChild::kill_group(&mut c);
                }
                let _ = c.wait();
                let mut s = String::new();
                if let Some(mut e) = c.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut s);
                }
                s
            }
            None => String::new(),
        };
        let _ = fs::remove_file(&initrd_path);
        let last = format!(
            "last notes: {:?}; last runs: {:?}\nqemu stderr: {}\nconsole tail:\n{}",
            p.notes.iter().rev().take(5).collect::<Vec<_>>(),
            p.runs.keys().collect::<Vec<_>>(),
            stderr.trim(),
            tail(&console_text, 25)
        );
        match status {
            None => {
                return Err(format!(
                    "[{}] the guest timed out after {} s (qemu killed)\n{last}",
                    kernel.describe(),
                    self.timeout.as_secs()
                )
                .into());
            }
            Some(st) if !p.done => {
                let msg = format!(
                    "[{}] the guest stopped ({st}) before the end of its scenario\n{last}",
                    kernel.describe()
                );
                if emulator_fault(&p, &console_text) {
                    return Err(BootError::Emulator(msg));
                }
                return Err(msg.into());
            }
            Some(_) => {}
        }
        let boot_secs = p
            .notes
            .iter()
            .find_map(|n| {
                n.split("booted after ")
                    .nth(1)
                    .and_then(|s| s.split_whitespace().next())
                    .and_then(|s| s.parse().ok())
            })
            .unwrap_or(f64::NAN);
        let total_secs = t0.elapsed().as_secs_f64();
        eprintln!(
            "rig: {}: kernel up after {boot_secs:.1} s, {total_secs:.1} s in all; notes: {:?}",
            kernel.describe(),
            p.notes
        );
        Ok(Outcome {
            kernel: kernel.clone(),
            runs: p.runs,
            notes: p.notes,
            devices: p.devices,
            boot_secs,
            total_secs,
            images,
            console: console_text,
        })
    }
}

/// Whether a guest that stopped early failed because of the emulator: a
/// panic before its init ran, or an oops on an `int3` trap (text patching
/// under multi-threaded TCG). An oops of btrfs is never one of these.
fn emulator_fault(p: &Parsed, console: &str) -> bool {
    let before_init = p.notes.is_empty() && p.runs.is_empty() && console.contains("Kernel panic");
    before_init || console.contains("Oops: int3")
}

/// A temp dir for one guest's images and logs (under /var/tmp: a disk, not
/// RAM, for GiB-sized sparse images); removed when dropped.
pub fn workdir() -> tempfile::TempDir {
    fs::create_dir_all("/var/tmp").unwrap();
    tempfile::Builder::new()
        .prefix("btrfs-lab-rig-")
        .tempdir_in("/var/tmp")
        .expect("temp dir in /var/tmp")
}

#[test]
fn results_channel_parses_runs_notes_waits_and_done() {
    let text = "@@RIG-NOTE kernel 6.1 booted after 3.5 s@@\r\n@@RIG-BEGIN a b@@\n@@RIG-RC 3@@\n\
                @@RIG-STDOUT@@\naGVsbG8K\n@@RIG-STDERR@@\nZXJy\n@@RIG-END a b@@\n@@RIG-WAIT pull@@\n@@RIG-DEV 2 /dev/nvme0n1@@\n@@RIG-DONE@@\n";
    let p = parse_results(text);
    assert_eq!(p.notes, vec!["kernel 6.1 booted after 3.5 s"]);
    let r = &p.runs["a b"];
    assert_eq!(
        (r.rc, r.stdout.as_str(), r.stderr.as_str()),
        (3, "hello\n", "err")
    );
    assert_eq!(p.waits, vec!["pull"]);
    assert_eq!(p.devices[&2], "/dev/nvme0n1");
    assert!(p.done);
    // A run cut off by the guest dying is not reported as finished.
    let p = parse_results("@@RIG-BEGIN x@@\n@@RIG-RC 0@@\n@@RIG-STDOUT@@\naGk=\n");
    assert!(p.runs.is_empty() && !p.done);
}

#[test]
fn scenario_cpio_is_newc_with_a_trailer() {
    let c = scenario_cpio("echo hi\n");
    assert!(c.starts_with(b"070701"));
    assert!(c.len().is_multiple_of(4));
    let s = String::from_utf8_lossy(&c);
    assert!(s.contains("rig/scenario.sh") && s.contains("echo hi") && s.contains("TRAILER!!!"));
}

#[test]
fn emulator_faults_are_a_panic_before_init_or_an_int3_oops() {
    let none = Parsed::default();
    let mut ran = Parsed::default();
    ran.notes.push("kernel 7.3 booted after 3.4 s".into());
    assert!(emulator_fault(&none, "Kernel panic - not syncing: VFS"));
    assert!(!emulator_fault(&ran, "Kernel panic - not syncing: VFS"));
    assert!(emulator_fault(
        &ran,
        "Oops: int3: 0000 [#2] SMP NOPTI\nRIP: 0010:ttwu_do_activate+0x93/0x1b0\nKernel panic - not syncing: Fatal exception in interrupt"
    ));
    assert!(!emulator_fault(
        &ran,
        "BUG: kernel NULL pointer dereference\nRIP: 0010:btrfs_finish_ordered_io+0x1a\nKernel panic - not syncing"
    ));
}
