//! The settings ledger on real loop-device btrfs (issue 49): a `scrub
//! --limit` killed with SIGKILL leaves its record and its limit, and the
//! next plain `scrub` puts the limit back and says so; a record whose
//! setting someone changed since is dropped, the value left alone; `doctor`
//! names a scrub limit set by hand; a huge-page record of a run that is gone
//! is settled without changing the machine.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::{Sandbox, SandboxRequest};
use btrfs_lab::sys::kernel::settings::{Record, Setting};

use crate::common::{TestEnv, require_root, run};
use crate::doctor::write_file;

fn sandbox(env: &TestEnv) -> Sandbox {
    env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 1 << 30,
        data: Some(Profile::Single),
        metadata: Some(Profile::Dup),
        ..SandboxRequest::default()
    })
}

fn fsid(m: &Path) -> String {
    btrfs_lab::sys::kernel::btrfs::fsid(m).unwrap()
}

fn speed_file(fsid: &str, devid: u64) -> PathBuf {
    PathBuf::from(format!(
        "/sys/fs/btrfs/{fsid}/devinfo/{devid}/scrub_speed_max"
    ))
}

fn speed_max(fsid: &str, devid: u64) -> u64 {
    fs::read_to_string(speed_file(fsid, devid))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Puts a scrub_speed_max the test set back when dropped (panics too).
struct SpeedGuard(PathBuf, u64);

impl Drop for SpeedGuard {
    fn drop(&mut self) {
        let _ = fs::write(&self.0, self.1.to_string());
    }
}

/// Cancels a scrub still running on the sandbox when the test ends.
struct CancelScrub(PathBuf);

impl Drop for CancelScrub {
    fn drop(&mut self) {
        let _ = btrfs_lab::sys::kernel::btrfs::FsHandle::open(&self.0)
            .map(|h| btrfs_lab::scrub::cancel(&h));
    }
}

fn ledger_dir(env: &TestEnv) -> PathBuf {
    env.store().dir().join("settings")
}

/// A pid no process has any more (a child that ran and was reaped).
fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// Writes a record as a killed run would have left it.
fn plant(env: &TestEnv, r: &Record) -> PathBuf {
    let dir = ledger_dir(env);
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(r.setting.record_name());
    fs::write(&path, serde_json::to_string(r).unwrap()).unwrap();
    path
}

fn waits(what: &str, mut done: impl FnMut() -> bool) {
    // Polling for a state, not timing it: the bound only stops a hang.
    for _ in 0..6000 {
        if done() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("never happened: {what}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn sigkill_during_a_limited_scrub_then_a_plain_scrub_puts_the_limit_back() {
    if !require_root("settings ledger: SIGKILL during scrub --limit") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env);
    let m = sbx.mount_point().to_path_buf();
    let _cancel = CancelScrub(m.clone());
    let fsid = fsid(&m);
    let before = speed_max(&fsid, 1);
    let _restore = SpeedGuard(speed_file(&fsid, 1), before);
    write_file(&m.join("big"), 300, 3).unwrap();
    let mut child = env
        .cmd()
        .arg("scrub")
        .arg(&m)
        .args(["--yes", "--limit", "20M", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let record = ledger_dir(&env).join(
        Setting::ScrubSpeedMax {
            fsid: fsid.clone(),
            devid: 1,
        }
        .record_name(),
    );
    waits("the limit set and recorded", || {
        record.exists() && speed_max(&fsid, 1) != before
    });
    let limit = speed_max(&fsid, 1);
    let pid = child.id();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = btrfs_lab::sys::kernel::btrfs::FsHandle::open(&m).map(|h| btrfs_lab::scrub::cancel(&h));
    child.wait().unwrap();
    waits("the kernel's scrub stopped", || {
        btrfs_lab::sys::kernel::btrfs::FsHandle::open(&m)
            .and_then(|h| btrfs_lab::scrub::running(&h))
            .is_ok_and(|r| r.is_empty())
    });
    // The kill left both the limit and its record.
    assert_eq!(speed_max(&fsid, 1), limit);
    let r: Record = serde_json::from_str(&fs::read_to_string(&record).unwrap()).unwrap();
    assert_eq!((r.before, r.set, r.pid), (before, limit, pid));
    assert_eq!(r.command, "scrub");

    // A plain scrub: the limit is put back first, in one line.
    let (code, _, err) = run(env.cmd().arg("scrub").arg(&m).args(["--yes", "--json"]));
    assert_eq!(code, 0, "{err}");
    let setting = Setting::ScrubSpeedMax {
        fsid: fsid.clone(),
        devid: 1,
    };
    let line = format!(
        "put back scrub_speed_max of devid 1 of {fsid} to {}, left by a killed btrfs-lab scrub (pid {pid})",
        setting.value(before)
    );
    assert_eq!(
        err.lines().filter(|l| l.contains(&line)).count(),
        1,
        "{err}"
    );
    assert_eq!(speed_max(&fsid, 1), before);
    assert!(!record.exists(), "the record is deleted once put back");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_limit_someone_changed_since_is_left_alone_and_the_record_dropped() {
    if !require_root("settings ledger: a setting changed by someone else") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env);
    let m = sbx.mount_point().to_path_buf();
    let fsid = fsid(&m);
    let before = speed_max(&fsid, 1);
    let _restore = SpeedGuard(speed_file(&fsid, 1), before);
    let setting = Setting::ScrubSpeedMax {
        fsid: fsid.clone(),
        devid: 1,
    };
    let pid = dead_pid();
    let record = plant(
        &env,
        &Record {
            setting: setting.clone(),
            before,
            set: 30 << 20,
            pid,
            start_ticks: 0,
            time: 0,
            command: "scrub".into(),
        },
    );
    // Someone set another limit after the killed run.
    fs::write(speed_file(&fsid, 1), (7u64 << 20).to_string()).unwrap();
    let (code, _, err) = run(env.cmd().arg("usage").arg(&m));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "scrub_speed_max of devid 1 of {fsid} was set to {} by a killed btrfs-lab scrub (pid {pid}), and has been changed since",
            setting.value(30 << 20)
        )),
        "{err}"
    );
    assert_eq!(speed_max(&fsid, 1), 7 << 20, "not overwritten");
    assert!(!record.exists(), "the record is dropped");
    // Nothing more is said on the next run.
    let (_, _, err) = run(env.cmd().arg("usage").arg(&m));
    assert!(!err.contains("scrub_speed_max"), "{err}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn doctor_names_a_scrub_limit_set_by_hand() {
    if !require_root("doctor: scrub-speed-limited") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env);
    let m = sbx.mount_point().to_path_buf();
    let fsid = fsid(&m);
    let before = speed_max(&fsid, 1);
    let doctor = || {
        let (_, out, err) = run(env.cmd().arg("doctor").arg(&m).arg("--json"));
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
        v["filesystems"][0]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == "scrub-speed-limited")
            .cloned()
            .collect::<Vec<_>>()
    };
    if before == 0 {
        assert!(doctor().is_empty());
    }
    let _restore = SpeedGuard(speed_file(&fsid, 1), before);
    fs::write(speed_file(&fsid, 1), (5u64 << 20).to_string()).unwrap();
    let found = doctor();
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!(f["severity"], "info", "set by hand: {f}");
    assert!(
        f["title"].as_str().unwrap().starts_with("device 1 ("),
        "{f}"
    );
    assert!(
        f["evidence"]
            .to_string()
            .contains("not btrfs-lab (no record)"),
        "{f}"
    );
    assert_eq!(
        f["command"].as_str().unwrap(),
        format!("echo 0 > {}", speed_file(&fsid, 1).display())
    );
    // The scrub plan and --status name it too.
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).args(["--dry-run", "--json"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("\"speed_max_now\":{}", 5u64 << 20)),
        "{out}"
    );
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).args(["--dry-run"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("scrub_speed_max is already"), "{out}");
    let (code, out, err) = run(env.cmd().arg("scrub").arg(&m).args(["--status", "--json"]));
    assert_eq!(code, 0, "{err}");
    let st: btrfs_lab::scrub::ScrubStatus = serde_json::from_str(&out).unwrap();
    assert_eq!(st.limits.len(), 1, "{out}");
    assert_eq!(
        (
            st.limits[0].devid,
            st.limits[0].bytes_per_second,
            st.limits[0].set_by.as_deref()
        ),
        (1, 5 << 20, None)
    );
    // None of them changed it.
    assert_eq!(speed_max(&fsid, 1), 5 << 20);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_huge_page_record_of_a_dead_run_is_settled_without_changing_the_machine() {
    if !require_root("settings ledger: vm.nr_hugepages record") {
        return;
    }
    // vm.nr_hugepages is the machine's: this test never writes it. A record
    // whose value is already back is dropped quietly; one whose value
    // someone changed is dropped and named. Neither writes the sysctl.
    let env = TestEnv::new();
    let now: u64 = fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let rec = |before: u64, set: u64| Record {
        setting: Setting::NrHugepages,
        before,
        set,
        pid: dead_pid(),
        start_ticks: 0,
        time: 0,
        command: "bench".into(),
    };
    let path = plant(&env, &rec(now, now + 8));
    let (code, _, err) = run(env.cmd().args(["completions", "bash"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        !err.contains("nr_hugepages"),
        "already back: nothing to say: {err}"
    );
    assert!(!path.exists());
    // Set to `now` from a value that was neither: someone else's.
    {
        let r = rec(now + 16, now + 32);
        let path = plant(&env, &r);
        let (_, _, err) = run(env.cmd().args(["completions", "bash"]));
        assert!(
            err.contains(&format!(
                "vm.nr_hugepages was set to {} by a killed btrfs-lab bench (pid {}), and has been changed since (it is {now} now)",
                now + 32,
                r.pid
            )),
            "{err}"
        );
        assert!(!path.exists());
    }
    let after: u64 = fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(after, now, "the machine's setting was not touched");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_record_other_users_could_have_written_is_not_used() {
    if !require_root("settings ledger: an untrusted record") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let sbx = sandbox(&env);
    let m = sbx.mount_point().to_path_buf();
    let fsid = fsid(&m);
    let before = speed_max(&fsid, 1);
    let _restore = SpeedGuard(speed_file(&fsid, 1), before);
    let set = (before + 1) << 20;
    let record = plant(
        &env,
        &Record {
            setting: Setting::ScrubSpeedMax {
                fsid: fsid.clone(),
                devid: 1,
            },
            before,
            set,
            pid: dead_pid(),
            start_ticks: 0,
            time: 0,
            command: "scrub".into(),
        },
    );
    fs::write(speed_file(&fsid, 1), set.to_string()).unwrap();
    // The ledger's directory writable by every user: a record there may be
    // anyone's, and root does not act on it.
    let dir = ledger_dir(&env);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let (code, _, err) = run(env.cmd().args(["completions", "bash"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("settings record not used"), "{err}");
    assert_eq!(speed_max(&fsid, 1), set, "not written");
    assert!(record.exists());
    // Root's own directory again: the record is used.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let (_, _, err) = run(env.cmd().args(["completions", "bash"]));
    assert!(err.contains("put back scrub_speed_max of devid 1"), "{err}");
    assert_eq!(speed_max(&fsid, 1), before);
    assert!(!record.exists());
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn as_another_user_nothing_is_put_back_and_one_line_says_so() {
    if !require_root("settings ledger: run by an unprivileged user") {
        return;
    }
    let env = TestEnv::new();
    let sbx = sandbox(&env);
    let m = sbx.mount_point().to_path_buf();
    let fsid = fsid(&m);
    let before = speed_max(&fsid, 1);
    let _restore = SpeedGuard(speed_file(&fsid, 1), before);
    let set = (before + 3) << 20;
    let record = plant(
        &env,
        &Record {
            setting: Setting::ScrubSpeedMax {
                fsid: fsid.clone(),
                devid: 1,
            },
            before,
            set,
            pid: dead_pid(),
            start_ticks: 0,
            time: 0,
            command: "scrub".into(),
        },
    );
    fs::write(speed_file(&fsid, 1), set.to_string()).unwrap();
    let state = env.store().dir().to_path_buf();
    let (code, _, err) = run(env
        .as_nobody(&[&state, &ledger_dir(&env)])
        .arg("--state-dir")
        .arg(&state)
        .args(["completions", "bash"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err.lines()
            .filter(
                |l| l.contains("kernel settings left by killed btrfs-lab runs are still in place")
            )
            .count(),
        1,
        "{err}"
    );
    assert!(
        err.contains(&format!("scrub_speed_max of devid 1 of {fsid}")),
        "{err}"
    );
    assert_eq!(speed_max(&fsid, 1), set, "not written by another user");
    assert!(record.exists());
}
