//! `scrub` on real sandboxes: corruption planted behind btrfs' back is
//! found and corrected on RAID1 and uncorrectable on single; a scrub
//! interrupted by SIGINT resumes from the saved last_physical; --status,
//! --cancel and --dry-run.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::{Sandbox, SandboxRequest};
use btrfs_lab::scrub::{
    Outcome, SavedScrub, ScrubCancel, ScrubRecord, ScrubReport, ScrubStatus, Totals,
};

use crate::common::{TestEnv, require_root, run, typed, typed_lines};
use crate::doctor::{first_extent, write_file};

fn sandbox(env: &TestEnv, devices: u32, data: Profile, metadata: Profile) -> Sandbox {
    env.sandbox(SandboxRequest {
        devices,
        size_bytes: 1 << 30,
        data: Some(data),
        metadata: Some(metadata),
        ..SandboxRequest::default()
    })
}

/// Overwrites 1 MiB of `file`'s first extent on one device (one copy on
/// RAID1), then drops the file's cache so the next read goes to the disk.
fn corrupt(m: &Path, file: &Path, member: &Path) {
    let out = Command::new("btrfs")
        .args(["filesystem", "sync"])
        .arg(m)
        .output()
        .unwrap();
    assert!(out.status.success());
    let (dev, physical) = first_extent(file, member);
    let out = Command::new("dd")
        .args([
            "if=/dev/urandom",
            "bs=4096",
            "count=256",
            "oflag=direct",
            "conv=notrunc",
        ])
        .arg(format!("of={}", dev.display()))
        .arg(format!("seek={}", physical / 4096))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop_cache(file);
}

/// POSIX_FADV_DONTNEED on one file (never the machine's caches).
fn drop_cache(file: &Path) {
    let f = fs::File::open(file).unwrap();
    nix::fcntl::posix_fadvise(
        &f,
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
    )
    .unwrap();
}

fn scrub(env: &TestEnv, m: &Path, extra: &[&str]) -> (i32, Vec<ScrubRecord>, String) {
    let (code, out, err) = run(env.cmd().arg("scrub").arg(m).args(extra).arg("--json"));
    let lines = if out.trim().is_empty() {
        Vec::new()
    } else {
        typed_lines::<ScrubRecord>(&out)
    };
    (code, lines, err)
}

fn report(records: &[ScrubRecord], err: &str) -> ScrubReport {
    match records.last() {
        Some(ScrubRecord::Result { report }) => report.clone(),
        other => panic!("no result record: {other:?}\n{err}"),
    }
}

fn state_file(env: &TestEnv, m: &Path) -> PathBuf {
    let fsid = btrfs_lab::sys::kernel::btrfs::fsid(m).unwrap();
    env.store().dir().join("scrub").join(format!("{fsid}.json"))
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn raid1_corruption_is_found_and_corrected() {
    if !require_root("scrub raid1 corruption") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env, 2, Profile::Raid1, Profile::Raid1);
    let m = sbx.mount_point().to_path_buf();
    let file = m.join("file");
    write_file(&file, 16, 3).unwrap();
    let want = fs::read(&file).unwrap();
    corrupt(&m, &file, &sbx.devices()[0]);
    let prom = env.path().join("scrub.prom");
    let (code, records, err) = scrub(&env, &m, &["--yes", "--textfile", prom.to_str().unwrap()]);
    let r = report(&records, &err);
    assert_eq!(r.outcome, Outcome::Finished, "{err}");
    let text = fs::read_to_string(&prom).unwrap();
    for name in [
        "btrfs_lab_scrub_last_start_timestamp_seconds{",
        "btrfs_lab_scrub_last_duration_seconds{",
        "btrfs_lab_scrub_last_finished{",
        "btrfs_lab_scrub_device_errors{",
        "btrfs_lab_scrub_device_corrected_errors{",
        "btrfs_lab_scrub_device_uncorrectable_errors{",
        "btrfs_lab_scrub_running{",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    // Beside doctor's file in one collector directory: no family twice,
    // promtool accepts both together.
    let (dcode, doctor_text, derr) =
        run(env.cmd().args(["doctor", "--format", "prometheus"]).arg(&m));
    assert!(dcode <= 2, "{derr}");
    let both = format!("{doctor_text}{text}");
    let (ok, said) = crate::common::promtool_check_metrics(&both);
    assert!(ok && said.trim().is_empty(), "promtool: {said}\n{both}");
    assert!(
        doctor_text.contains("btrfs_lab_scrub_errors{"),
        "{doctor_text}"
    );
    assert!(r.totals.errors > 0, "{r:?}");
    assert!(r.totals.corrected > 0, "{r:?}");
    assert_eq!(r.totals.uncorrectable, 0, "{r:?}");
    assert!(
        r.damaged_files.is_empty(),
        "repaired: {:?}",
        r.damaged_files
    );
    assert_eq!(
        code,
        i32::from(btrfs_lab::model::exit::SCRUB_CORRECTED.code),
        "{err}"
    );
    drop_cache(&file);
    assert_eq!(
        fs::read(&file).unwrap(),
        want,
        "the file is intact after the repair"
    );
    // Saved as finished: nothing to resume.
    let saved: SavedScrub =
        serde_json::from_str(&fs::read_to_string(state_file(&env, &m)).unwrap()).unwrap();
    assert!(saved.finished);
    let (code, _, err) = scrub(&env, &m, &["--yes", "--resume"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no interrupted scrub"), "{err}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn single_corruption_is_uncorrectable() {
    if !require_root("scrub single corruption") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env, 1, Profile::Single, Profile::Dup);
    let m = sbx.mount_point().to_path_buf();
    let file = m.join("file");
    write_file(&file, 16, 5).unwrap();
    corrupt(&m, &file, &sbx.devices()[0]);
    let (code, records, err) = scrub(&env, &m, &["--yes"]);
    let r = report(&records, &err);
    assert!(r.totals.uncorrectable > 0, "{r:?}");
    assert_eq!(
        code,
        i32::from(btrfs_lab::model::exit::SCRUB_UNCORRECTABLE.code),
        "{err}"
    );
    // The kernel's log names the file: the damaged blocks are in it.
    assert_eq!(r.damaged_files.len(), 1, "{:?}", r.damaged_files);
    let d = &r.damaged_files[0];
    assert_eq!((d.subvolume, d.path.as_str()), (5, "file"), "{d:?}");
    assert_eq!(d.inode, fs::metadata(&file).unwrap().ino());
    assert!(
        !d.offsets.is_empty() && d.offsets.iter().all(|&o| o < 16 << 20),
        "{d:?}"
    );
    // doctor reads btrfs-lab's record (btrfs-progs has none here) and
    // points at it.
    let (_, out, err) = run(env.cmd().args(["--json", "doctor"]).arg(&m));
    let dr: btrfs_lab::doctor::DoctorReport = typed(&out);
    let f = dr.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "scrub-errors")
        .unwrap_or_else(|| panic!("{out}\n{err}"));
    assert_eq!(f.severity, btrfs_lab::model::finding::Severity::Critical);
    assert_eq!(
        f.command.as_deref(),
        Some(format!("btrfs-lab scrub --status {}", m.display()).as_str())
    );
    // The text names rescue (the kernel rate-limits these messages: a
    // second scrub this soon finds the errors and may see no names).
    let (_, out, _) = run(env.cmd().arg("scrub").arg(&m).arg("--yes"));
    assert!(out.contains("btrfs-lab rescue"), "{out}");
}

/// Starts `scrub MOUNT --json` with `args` and returns the child once a
/// progress record with bytes read came out.
/// SIGINT to a scrub [`start_slow`] began: it exits 130 and its last
/// record is the report of the interrupted scrub.
fn interrupt(child: std::process::Child) -> ScrubReport {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(130), "{err}");
    let rest = rest_of_stdout();
    match typed(rest.last().expect("a result")) {
        ScrubRecord::Result { report } => report,
        _ => panic!("{rest:?}"),
    }
}

fn start_slow(env: &TestEnv, m: &Path, args: &[&str]) -> (std::process::Child, Vec<String>) {
    start_slow_cmd(env.cmd(), m, args)
}

/// [`start_slow`] with the command `cmd` (the binary and its global options).
fn start_slow_cmd(mut cmd: Command, m: &Path, args: &[&str]) -> (std::process::Child, Vec<String>) {
    let mut child = cmd
        .arg("scrub")
        .arg(m)
        .args(args)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = Vec::new();
    let mut reader = BufReader::new(stdout);
    loop {
        let mut l = String::new();
        let n = reader.read_line(&mut l).unwrap();
        assert!(n > 0, "scrub ended before progress: {lines:?}");
        let rec: ScrubRecord = typed(&l);
        lines.push(l);
        if let ScrubRecord::Progress { bytes_scrubbed, .. } = rec
            && bytes_scrubbed > 0
        {
            break;
        }
    }
    // The rest of stdout, read on a thread, so the child never blocks.
    let rest = std::thread::spawn(move || {
        let mut v = Vec::new();
        for l in reader.lines() {
            v.push(l.unwrap());
        }
        v
    });
    REST.with(|r| r.borrow_mut().push(rest));
    (child, lines)
}

thread_local! {
    static REST: std::cell::RefCell<Vec<std::thread::JoinHandle<Vec<String>>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn rest_of_stdout() -> Vec<String> {
    REST.with(|r| r.borrow_mut().pop().unwrap().join().unwrap())
}

/// Cancels a scrub still running on the sandbox when the test ends.
struct CancelScrub(PathBuf);

impl Drop for CancelScrub {
    fn drop(&mut self) {
        let _ = btrfs_lab::sys::kernel::btrfs::FsHandle::open(&self.0)
            .map(|h| btrfs_lab::scrub::cancel(&h));
    }
}

fn speed_max(m: &Path) -> Vec<String> {
    let fsid = btrfs_lab::sys::kernel::btrfs::fsid(m).unwrap();
    let mut v = Vec::new();
    if let Ok(rd) = fs::read_dir(format!("/sys/fs/btrfs/{fsid}/devinfo")) {
        for e in rd.flatten() {
            if let Ok(s) = fs::read_to_string(e.path().join("scrub_speed_max")) {
                v.push(s);
            }
        }
    }
    v
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn interrupted_scrub_resumes_where_it_stopped() {
    if !require_root("scrub interrupted and resumed") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env, 1, Profile::Single, Profile::Dup);
    let m = sbx.mount_point().to_path_buf();
    let _cancel = CancelScrub(m.clone());
    write_file(&m.join("big"), 300, 9).unwrap();
    let limits_before = speed_max(&m);
    let (child, _) = start_slow(&env, &m, &["--yes", "--limit", "20M"]);
    let first = interrupt(child);
    assert_eq!(first.outcome, Outcome::Interrupted);
    assert!(
        btrfs_lab::scrub::running(&btrfs_lab::sys::kernel::btrfs::FsHandle::open(&m).unwrap())
            .unwrap()
            .is_empty(),
        "no scrub runs after the command returned"
    );
    assert_eq!(speed_max(&m), limits_before, "scrub_speed_max restored");
    let saved: SavedScrub =
        serde_json::from_str(&fs::read_to_string(state_file(&env, &m)).unwrap()).unwrap();
    assert!(!saved.finished);
    assert!(
        saved.devices.iter().any(|d| d.last_physical > 0),
        "{saved:?}"
    );
    // --status says what was saved.
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).args(["--status", "--json"]));
    assert_eq!(code, 0, "{err}");
    let st: ScrubStatus = typed(&out);
    assert!(!st.running);
    assert_eq!(st.last.as_ref().map(|l| l.finished), Some(false));
    let last = st.last.as_ref().unwrap();
    assert_eq!(last.runs, 1);
    assert!(last.started_at <= last.saved_at, "{last:?}");
    assert_eq!(first.runs, 1);
    // In words: when it started and stopped, how long it took.
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).arg("--status"));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("; started 20") && out.contains("Z, stopped 20") && out.contains(", took "),
        "{out}"
    );
    // Resume.
    let (code, records, err) = scrub(&env, &m, &["--yes", "--resume"]);
    let r = report(&records, &err);
    assert_eq!(code, 0, "{err}");
    assert!(r.resumed);
    assert_eq!(r.outcome, Outcome::Finished);
    let ScrubRecord::Plan { plan } = &records[0] else {
        panic!("{records:?}")
    };
    assert!(plan.devices.iter().any(|d| d.start > 0), "{plan:?}");
    assert!(
        r.totals.bytes_scrubbed < r.totals.bytes_to_read,
        "the second run read less than the whole: {r:?}"
    );
    assert_eq!(r.totals.errors, 0);
    // The whole scrub: both runs' bytes and time.
    assert_eq!(r.runs, 2);
    assert_eq!(
        r.scrub_totals.bytes_scrubbed,
        first.totals.bytes_scrubbed + r.totals.bytes_scrubbed,
        "{first:?} {r:?}"
    );
    assert!(r.scrub_duration_seconds >= r.duration_seconds);
    let saved: SavedScrub =
        serde_json::from_str(&fs::read_to_string(state_file(&env, &m)).unwrap()).unwrap();
    assert!(saved.finished);
    assert_eq!(saved.runs, 2);
    assert_eq!(
        Totals::of(&saved.devices).bytes_scrubbed,
        r.scrub_totals.bytes_scrubbed
    );
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn status_cancel_and_dry_run() {
    if !require_root("scrub status cancel dry-run") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env, 1, Profile::Single, Profile::Dup);
    let m = sbx.mount_point().to_path_buf();
    let _cancel = CancelScrub(m.clone());
    write_file(&m.join("big"), 200, 11).unwrap();
    // --dry-run: the plan, nothing done.
    let limits_before = speed_max(&m);
    let (code, records, err) = scrub(&env, &m, &["--dry-run", "--limit", "1M"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        matches!(records.as_slice(), [ScrubRecord::Plan { .. }]),
        "{records:?}"
    );
    assert!(!state_file(&env, &m).exists());
    assert_eq!(speed_max(&m), limits_before);
    assert!(
        btrfs_lab::scrub::running(&btrfs_lab::sys::kernel::btrfs::FsHandle::open(&m).unwrap())
            .unwrap()
            .is_empty()
    );
    // Nothing to cancel.
    let (code, _, err) = run(env.cmd().arg("scrub").arg(&m).arg("--cancel"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no scrub runs on"), "{err}");
    // A running scrub: --status sees it, --cancel stops it.
    let (child, _) = start_slow(&env, &m, &["--yes", "--limit", "20M"]);
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).args(["--status", "--json"]));
    assert_eq!(code, 0, "{err}");
    let st: ScrubStatus = typed(&out);
    assert!(st.running, "{st:?}");
    assert!(st.devices.iter().any(|d| d.bytes_scrubbed > 0), "{st:?}");
    assert!(
        st.running_since.is_some(),
        "ours: it says since when: {st:?}"
    );
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).arg("--status"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(" (btrfs-lab's, since 20"), "{out}");
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).args(["--cancel", "--json"]));
    assert_eq!(code, 0, "{err}");
    let c: ScrubCancel = typed(&out);
    assert!(c.cancelled);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = rest_of_stdout();
    assert!(
        btrfs_lab::scrub::running(&btrfs_lab::sys::kernel::btrfs::FsHandle::open(&m).unwrap())
            .unwrap()
            .is_empty()
    );
    assert_eq!(speed_max(&m), limits_before, "scrub_speed_max restored");
}

/// A read-only mount: a repairing scrub is refused before anything starts
/// (no state saved), `--readonly` works; stdout on a full disk is one
/// error line and a failure, the state still saved.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn read_only_mount_and_a_full_stdout() {
    if !require_root("scrub on a read-only mount") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env, 1, Profile::Single, Profile::Dup);
    let m = sbx.mount_point().to_path_buf();
    write_file(&m.join("file"), 8, 1).unwrap();
    crate::common::remount(&m, "ro");
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).arg("--yes"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("is mounted read-only") && err.contains("--readonly"),
        "{err}"
    );
    assert!(!out.contains("Plan:"), "refused before the plan: {out}");
    assert!(!state_file(&env, &m).exists(), "a refusal saves nothing");
    let (code, records, err) = scrub(&env, &m, &["--yes", "--readonly"]);
    assert_eq!(code, 0, "{err}");
    let r = report(&records, &err);
    assert!(r.readonly && r.outcome == Outcome::Finished, "{r:?}");
    assert!(r.totals.bytes_scrubbed > 0, "{r:?}");
    let full = fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = env
        .cmd()
        .arg("scrub")
        .arg(&m)
        .args(["--yes", "--readonly"])
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write the output"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let saved: SavedScrub =
        serde_json::from_str(&fs::read_to_string(state_file(&env, &m)).unwrap()).unwrap();
    assert!(saved.finished && saved.readonly, "{saved:?}");
}

/// A degraded mount: the missing member is named and left out, the present
/// one is scrubbed to its end and its data checks out.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn degraded_mount_scrubs_the_members_present() {
    if !require_root("scrub on a degraded mount") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env, 2, Profile::Raid1, Profile::Raid1);
    let m = sbx.mount_point().to_path_buf();
    write_file(&m.join("file"), 16, 4).unwrap();
    let devs = sbx.devices();
    crate::common::lose_member(&m, &devs[0], &devs[1], "degraded");
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).arg("--dry-run"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("devid 2: missing, not scrubbed"), "{out}");
    let (code, records, err) = scrub(&env, &m, &["--yes"]);
    assert_eq!(code, 0, "{err}");
    let r = report(&records, &err);
    assert_eq!(r.missing, [2], "{r:?}");
    assert_eq!(r.devices.len(), 1, "{r:?}");
    assert!(
        r.devices[0].finished && r.devices[0].bytes_scrubbed >= 16 << 20,
        "{r:?}"
    );
    assert_eq!(r.totals.errors, 0, "{r:?}");
    let (_, out, _) = run(env.cmd().arg("scrub").arg(&m).arg("--yes"));
    assert!(out.contains("devid 2: missing, not scrubbed"), "{out}");
}

/// btrfs-progs' scrub record of one test filesystem in `/var/lib/btrfs`,
/// removed when dropped (the filesystem goes with the test).
struct ProgsRecord(PathBuf);

impl Drop for ProgsRecord {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// `btrfs scrub status [-R] M`: its exit status and stdout.
fn progs_status(m: &Path, raw: bool) -> (i32, String) {
    let mut c = Command::new("btrfs");
    c.args(["scrub", "status"]);
    if raw {
        c.arg("-R");
    }
    let out = c.arg(m).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `name: N` in `btrfs scrub status -R`'s output.
fn raw_field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn btrfs_progs_sees_a_btrfs_lab_scrub_and_resumes_it() {
    if !require_root("scrub record for btrfs-progs") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env, 1, Profile::Single, Profile::Dup);
    let m = sbx.mount_point().to_path_buf();
    let _cancel = CancelScrub(m.clone());
    let fsid = btrfs_lab::sys::kernel::btrfs::fsid(&m).unwrap();
    let record = Path::new(btrfs_lab::scrub::progs::PROGS_DIR)
        .join(btrfs_lab::scrub::progs::file_name(&fsid));
    let _record = ProgsRecord(record.clone());
    write_file(&m.join("big"), 300, 9).unwrap();
    // The record btrfs-progs reads, not this environment's: the hook unset.
    // No --yes, stdin not a terminal: a scrub does not ask.
    let mut cmd = env.cmd();
    cmd.env_remove(crate::common::PROGS_DIR_ENV);
    let (child, _) = start_slow_cmd(cmd, &m, &["--limit", "20M"]);
    let (code, out) = progs_status(&m, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Status:           running"), "{out}");
    let first = interrupt(child);
    let meta = fs::metadata(&record).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "as btrfs-progs writes it");
    // btrfs-progs: a cancelled scrub with this run's bytes.
    let (code, out) = progs_status(&m, false);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Status:           aborted"), "{out}");
    let (_, raw) = progs_status(&m, true);
    assert_eq!(
        raw_field(&raw, "data_bytes_scrubbed") + raw_field(&raw, "tree_bytes_scrubbed"),
        first.totals.bytes_scrubbed,
        "{raw}"
    );
    let stopped_at = raw_field(&raw, "last_physical");
    assert!(stopped_at > 0, "{raw}");
    // `btrfs scrub resume` continues it from where btrfs-lab stopped.
    let out = Command::new("btrfs")
        .args(["scrub", "resume", "-B"])
        .arg(&m)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let (_, out) = progs_status(&m, false);
    assert!(out.contains("Status:           finished"), "{out}");
    // A btrfs-lab scrub that finishes: btrfs-progs shows its figures.
    let mut cmd = env.cmd();
    cmd.env_remove(crate::common::PROGS_DIR_ENV);
    let (code, out, err) = run(cmd.arg("scrub").arg(&m).arg("--json"));
    assert_eq!(code, 0, "{err}");
    let records = typed_lines::<ScrubRecord>(&out);
    let r = report(&records, &err);
    assert_eq!(r.outcome, Outcome::Finished);
    let (_, out) = progs_status(&m, false);
    assert!(
        out.contains("Status:           finished") && out.contains("no errors found"),
        "{out}"
    );
    let (_, raw) = progs_status(&m, true);
    assert_eq!(
        raw_field(&raw, "data_bytes_scrubbed") + raw_field(&raw, "tree_bytes_scrubbed"),
        r.totals.bytes_scrubbed,
        "{raw}"
    );
    assert!(raw_field(&raw, "tree_bytes_scrubbed") > 0, "{raw}");
}

/// Mounts a test made beside a sandbox's, unmounted when dropped.
struct Unmount(Vec<PathBuf>);

impl Drop for Unmount {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = nix::mount::umount2(p, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// `scrub --all` in this environment only: the mounts under its directory
/// (never the machine's other filesystems).
fn scrub_all(env: &TestEnv, extra: &[&str]) -> (i32, Vec<ScrubRecord>, String) {
    let (code, out, err) = run(env
        .cmd()
        .env("BTRFS_LAB_SCRUB_ALL_UNDER", env.path())
        .args(["scrub", "--all", "--json"])
        .args(extra));
    let lines = if out.trim().is_empty() {
        Vec::new()
    } else {
        typed_lines::<ScrubRecord>(&out)
    };
    (code, lines, err)
}

fn all_plan(records: &[ScrubRecord]) -> btrfs_lab::scrub::all::AllPlan {
    match records.first() {
        Some(ScrubRecord::AllPlan { plan }) => plan.clone(),
        other => panic!("no all-plan first: {other:?}"),
    }
}

fn all_report(records: &[ScrubRecord]) -> btrfs_lab::scrub::all::AllReport {
    match records.last() {
        Some(ScrubRecord::AllResult { report }) => report.clone(),
        other => panic!("no all-result last: {other:?}"),
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn scrub_all_scrubs_each_filesystem_once_and_skips_the_recent() {
    use btrfs_lab::scrub::all::Choice;
    if !require_root("scrub --all") {
        return;
    }
    let env = TestEnv::new();
    let a = sandbox(&env, 1, Profile::Single, Profile::Dup);
    let b = sandbox(&env, 2, Profile::Raid1, Profile::Raid1);
    let (ma, mb) = (a.mount_point().to_path_buf(), b.mount_point().to_path_buf());
    write_file(&mb.join("f"), 20, 3).unwrap();
    // Filesystem A mounted twice more: a subvolume and the top again.
    let out = Command::new("btrfs")
        .args(["subvolume", "create"])
        .arg(ma.join("sv"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let source = fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(ma.to_str().unwrap()))
        .and_then(|l| l.split(" - ").nth(1))
        .and_then(|t| t.split(' ').nth(1))
        .unwrap()
        .to_owned();
    // Dropped before the sandboxes: their mounts go first.
    let mut extra = Unmount(Vec::new());
    for (name, opts) in [("sub", "subvol=sv"), ("again", "subvolid=5")] {
        let p = env.path().join(name);
        fs::create_dir(&p).unwrap();
        let out = Command::new("mount")
            .args(["-o", opts, &source])
            .arg(&p)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        extra.0.push(p);
    }
    let (code, records, err) = scrub_all(&env, &[]);
    assert_eq!(code, 0, "{err}");
    let plan = all_plan(&records);
    assert_eq!(plan.entries.len(), 2, "each filesystem once: {plan:?}");
    assert!(
        plan.entries.iter().all(|e| e.choice == Choice::Scrub),
        "{plan:?}"
    );
    let ea = plan.entries.iter().find(|e| e.mount_point == ma).unwrap();
    assert_eq!(ea.also_mounted_at.len(), 2, "{ea:?}");
    // One scrub each: two plans, two results, every device of each.
    let results: Vec<&ScrubReport> = records
        .iter()
        .filter_map(|r| match r {
            ScrubRecord::Result { report } => Some(report),
            _ => None,
        })
        .collect();
    let mut scrubbed: Vec<&Path> = results.iter().map(|r| r.mount_point.as_path()).collect();
    scrubbed.sort();
    let mut expected = vec![ma.as_path(), mb.as_path()];
    expected.sort();
    assert_eq!(scrubbed, expected);
    assert!(results.iter().all(|r| r.outcome == Outcome::Finished));
    let report = all_report(&records);
    assert_eq!(report.results.len(), 2);
    assert!(report.results.iter().all(|r| r.exit_status == 0));
    // doctor's metrics: the last complete scrub of each, none running;
    // promtool accepts them.
    let (_, metrics, err) = run(env
        .cmd()
        .args(["doctor", "--format", "prometheus"])
        .arg(&ma)
        .arg(&mb));
    let (ok, lint) = crate::common::promtool_check_metrics(&metrics);
    assert!(ok, "promtool check metrics:\n{lint}\n{metrics}\n{err}");
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.starts_with("btrfs_lab_scrub_last_complete_timestamp_seconds{"))
            .count(),
        2,
        "{metrics}"
    );
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.starts_with("btrfs_lab_scrub_in_progress{") && l.ends_with(" 0"))
            .count(),
        2,
        "{metrics}"
    );
    // Again: both were scrubbed within --min-age, nothing runs.
    let (code, records, err) = scrub_all(&env, &[]);
    assert_eq!(code, 0, "{err}");
    let plan = all_plan(&records);
    assert!(
        plan.entries.iter().all(|e| e.choice == Choice::Skip),
        "{plan:?}"
    );
    assert_eq!(records.len(), 2, "the plan and the end only: {records:?}");
    assert!(all_report(&records).results.is_empty());
    // --min-age 0: both again, two at once.
    let (code, records, err) = scrub_all(&env, &["--min-age", "0", "--max-parallel", "2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(all_report(&records).results.len(), 2);
    // Every progress record names its filesystem.
    assert!(records.iter().all(|r| match r {
        ScrubRecord::Progress { fsid, .. } => !fsid.is_empty(),
        _ => true,
    }));
    // In words: the plan names the other mounts, the end each filesystem.
    let (code, out, err) = run(env
        .cmd()
        .env("BTRFS_LAB_SCRUB_ALL_UNDER", env.path())
        .args(["scrub", "--all", "--dry-run"]));
    assert_eq!(code, 0, "{err}");
    let text = format!("{out}{err}");
    assert!(text.contains("also mounted at"), "{text}");
    assert!(text.contains("skip   "), "{text}");
    // A filesystem mounted read-only only: scrubbed read-only, not failed.
    let remount = |opts: &str| {
        let out = Command::new("mount")
            .args(["-o", opts])
            .arg(&mb)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    remount("remount,ro");
    let (code, records, err) = scrub_all(&env, &["--min-age", "0"]);
    remount("remount,rw");
    assert_eq!(code, 0, "{err}");
    let plan = all_plan(&records);
    let eb = plan.entries.iter().find(|e| e.mount_point == mb).unwrap();
    assert!(eb.read_only && eb.reason.contains("read-only"), "{eb:?}");
    assert!(records.iter().any(|r| matches!(r,
        ScrubRecord::Plan { plan } if plan.mount_point == mb && plan.readonly)));
    // --min-age without --all: a usage error, not a scrub that ignores it.
    let (code, _, err) = run(env.cmd().arg("scrub").arg(&ma).args(["--min-age", "3"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("go with --all"), "{err}");
    let (code, _, err) = run(env.cmd().args(["scrub", "--all"]).arg(&ma));
    assert_eq!(code, 2, "{err}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn scrub_all_resumes_a_scrub_killed_mid_run_from_its_saved_positions() {
    use btrfs_lab::scrub::all::Choice;
    if !require_root("scrub --all after SIGKILL") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env, 1, Profile::Single, Profile::Dup);
    let m = sbx.mount_point().to_path_buf();
    let _cancel = CancelScrub(m.clone());
    write_file(&m.join("big"), 300, 9).unwrap();
    let (mut child, _) = start_slow(&env, &m, &["--limit", "20M"]);
    // Past a checkpoint (every 5 s), then killed: nothing runs at its end.
    let state = state_file(&env, &m);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let saved: Option<SavedScrub> = fs::read_to_string(&state)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        if saved.is_some_and(|s| s.devices.iter().any(|d| d.last_physical > 0)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no checkpoint saved");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // While it runs, doctor's metrics say so, with its progress.
    let (_, metrics, _) = run(env.cmd().args(["doctor", "--format", "prometheus"]).arg(&m));
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("btrfs_lab_scrub_in_progress{") && l.ends_with(" 1")),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("btrfs_lab_scrub_in_progress_bytes_to_read{")),
        "{metrics}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel's scrub ends with the process (or is cancelled here).
    let h = btrfs_lab::sys::kernel::btrfs::FsHandle::open(&m).unwrap();
    let _ = btrfs_lab::scrub::cancel(&h);
    while !btrfs_lab::scrub::running(&h).unwrap().is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let saved: SavedScrub = serde_json::from_str(&fs::read_to_string(&state).unwrap()).unwrap();
    assert!(!saved.finished, "{saved:?}");
    let stopped_at = saved.devices[0].last_physical;
    let (code, records, err) = scrub_all(&env, &[]);
    assert_eq!(code, 0, "{err}");
    let plan = all_plan(&records);
    assert_eq!(plan.entries[0].choice, Choice::Resume, "{plan:?}");
    let ScrubRecord::Plan { plan: one } = &records[1] else {
        panic!("{records:?}")
    };
    assert!(one.resume, "{one:?}");
    assert_eq!(one.devices[0].start, stopped_at, "{one:?}");
    let r = records
        .iter()
        .find_map(|r| match r {
            ScrubRecord::Result { report } => Some(report.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(r.outcome, Outcome::Finished);
    assert_eq!(r.runs, 2, "{r:?}");
    assert!(r.totals.bytes_scrubbed < r.totals.bytes_to_read, "{r:?}");
}

/// contrib/systemd: the units `systemd-analyze verify` accepts (the binary
/// at the path the package installs it to replaced by this build), with
/// what issue 54 asked of them; the sleep hook starts the service after a
/// resume when the timer is enabled, and does nothing otherwise.
#[test]
fn the_scrub_units_verify_and_the_sleep_hook_resumes_after_a_suspend() {
    use std::os::unix::fs::PermissionsExt;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd");
    let t = tempfile::tempdir().unwrap();
    let bin = crate::common::bin();
    for unit in ["btrfs-lab-scrub.service", "btrfs-lab-scrub.timer"] {
        let text = fs::read_to_string(src.join(unit)).unwrap();
        fs::write(
            t.path().join(unit),
            text.replace("/usr/bin/btrfs-lab", bin.to_str().unwrap()),
        )
        .unwrap();
    }
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(t.path().join("btrfs-lab-scrub.service"))
        .arg(t.path().join("btrfs-lab-scrub.timer"))
        .output()
        .expect("systemd-analyze (Debian package systemd; scripts/install-deps.sh installs it)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
    let service = fs::read_to_string(src.join("btrfs-lab-scrub.service")).unwrap();
    for line in [
        "ExecStart=/usr/bin/btrfs-lab scrub --all",
        "ConditionACPower=true",
        "TimeoutStartSec=infinity",
        "IOSchedulingClass=idle",
        "SuccessExitStatus=3 130",
    ] {
        assert!(service.lines().any(|l| l == line), "{line} in {service}");
    }
    let timer = fs::read_to_string(src.join("btrfs-lab-scrub.timer")).unwrap();
    for line in [
        "Persistent=true",
        "OnCalendar=daily",
        "WantedBy=timers.target",
    ] {
        assert!(timer.lines().any(|l| l == line), "{line} in {timer}");
    }
    assert!(timer.lines().any(|l| l.starts_with("RandomizedDelaySec=")));
    // The names doctor's finding gives are the shipped ones.
    assert!(src.join(btrfs_lab::scrub::all::TIMER).exists());
    assert!(src.join(btrfs_lab::scrub::all::SERVICE).exists());

    // The sleep hook, with a systemctl that logs what it is asked.
    let hook = src.join("btrfs-lab-scrub.sleep");
    assert!(fs::metadata(&hook).unwrap().permissions().mode() & 0o111 != 0);
    let fake = t.path().join("bin");
    fs::create_dir(&fake).unwrap();
    let log = t.path().join("log");
    let systemctl = fake.join("systemctl");
    fs::write(
        &systemctl,
        format!(
            "#!/bin/sh\necho \"$*\" >> {}\n[ \"$1 $2\" = \"-q is-enabled\" ] && exit \"${{ENABLED:-1}}\"\nexit 0\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&systemctl, fs::Permissions::from_mode(0o755)).unwrap();
    let hook_run = |args: &[&str], enabled: &str| {
        let _ = fs::remove_file(&log);
        let st = Command::new("sh")
            .arg(&hook)
            .args(args)
            .env("PATH", format!("{}:/usr/bin:/bin", fake.display()))
            .env("ENABLED", enabled)
            .status()
            .unwrap();
        assert!(st.success());
        fs::read_to_string(&log).unwrap_or_default()
    };
    assert_eq!(
        hook_run(&["post", "suspend"], "0"),
        "-q is-enabled btrfs-lab-scrub.timer\n--no-block start btrfs-lab-scrub.service\n"
    );
    assert_eq!(
        hook_run(&["post", "hibernate"], "1"),
        "-q is-enabled btrfs-lab-scrub.timer\n"
    );
    assert_eq!(hook_run(&["pre", "suspend"], "0"), "");
}
