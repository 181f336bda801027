//! Issue 23, bench: root never runs, writes or deletes what another user
//! chose. Each reproduction of the audit, on a real btrfs, with a directory
//! owned by user nobody (uid 65534) who plants names and races root's work
//! directory with `renameat2(RENAME_EXCHANGE)`; root's canary files must
//! come out unchanged.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use btrfs_lab::bench::report::BenchReport;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::{Sandbox, SandboxRequest};

use crate::common::{TestEnv, listing, require_root, run};

const NOBODY: u32 = 65534;

/// A one-device btrfs with room for a few 16 MiB benches.
fn btrfs(env: &TestEnv) -> Sandbox {
    env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 512 << 20,
        data: Some(Profile::Single),
        ..SandboxRequest::default()
    })
}

/// The shortest bench: one 16 MiB file, one round of one test.
const TINY: [&str; 8] = [
    "--file-size",
    "16M",
    "--duration",
    "1",
    "--rounds",
    "1",
    "--tests",
    "SEQ1M-Q1T1",
];

/// Makes every directory from the environment down to `dir` traversable,
/// so that nobody can reach their own directory.
fn traversable(env: &TestEnv, dir: &Path) {
    let mut p = dir.to_path_buf();
    while p.starts_with(env.path()) {
        let mode = fs::metadata(&p).unwrap().permissions().mode();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode | 0o755)).unwrap();
        if !p.pop() {
            break;
        }
    }
}

/// A directory on the btrfs owned by nobody: their home on the array.
fn users_dir(env: &TestEnv, mnt: &Path) -> PathBuf {
    let u = mnt.join("u");
    fs::create_dir(&u).unwrap();
    std::os::unix::fs::chown(&u, Some(NOBODY), Some(NOBODY)).unwrap();
    fs::set_permissions(&u, fs::Permissions::from_mode(0o755)).unwrap();
    traversable(env, &u);
    u
}

/// Runs `f` as nobody (a process of its own, through setpriv).
fn as_nobody(args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .stdin(Stdio::null());
    c
}

/// Root's canary: a 0700 directory with two 0600 files, outside the
/// user's reach. Returns the directory and its listing with contents.
fn canary(env: &TestEnv) -> (PathBuf, Vec<(String, Vec<u8>)>) {
    let dir = env.path().join("root-only");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("secret"), b"root's secret\n").unwrap();
    fs::write(dir.join("keep"), b"keep me\n").unwrap();
    for f in ["secret", "keep"] {
        fs::set_permissions(dir.join(f), fs::Permissions::from_mode(0o600)).unwrap();
    }
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    let state = contents(&dir);
    (dir, state)
}

fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    listing(dir)
        .into_iter()
        .map(|n| {
            let data = fs::read(dir.join(&n)).unwrap_or_default();
            (n, data)
        })
        .collect()
}

fn bench_json(env: &TestEnv, dir: &Path, extra: &[&str]) -> (i32, String, String) {
    run(env
        .cmd()
        .args(["bench", "--json"])
        .args(TINY)
        .args(extra)
        .arg(dir))
}

/// Finding 1: a newline in a directory name started a new job-file line
/// (`exec_prerun=sh pwn.sh`), so root ran the user's script. Reached
/// through the user's link it is refused before anything runs; given
/// directly, the bench runs, fio never sees the name, and the script never
/// runs.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_directory_name_never_reaches_fios_job_file() {
    if !require_root("bench in a user's directory") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let u = users_dir(&env, sb.mount_point());
    let marker = env.path().join("pwned");
    let script = u.join("pwn.sh");
    fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let evil = u.join(format!("q\nexec_prerun=sh {};", script.display()));
    let link = u.join("bench");
    let out = as_nobody(&["mkdir", "-p", evil.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let out = as_nobody(&["ln", "-s", evil.to_str().unwrap(), link.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    // Through the user's link: refused, with the reason, nothing made.
    let (code, stdout, stderr) = bench_json(&env, &link, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("is a symbolic link owned by uid 65534"),
        "{stderr}"
    );
    assert!(listing(&evil).is_empty(), "{:?}", listing(&evil));

    // The real directory: the bench runs; the saved jobs hold no byte of
    // the name; the script never ran.
    let jobs = env.path().join("saved.fio");
    let (code, stdout, stderr) = bench_json(&env, &evil, &["--save-jobs", jobs.to_str().unwrap()]);
    assert!(code == 0 || code == 3, "{stderr}");
    let r: BenchReport = crate::common::typed(&stdout);
    assert!(r.test_file.removed);
    assert!(!marker.exists(), "root ran the user's script");
    let saved = fs::read_to_string(&jobs).unwrap();
    assert!(!saved.contains("exec_prerun"), "{saved}");
    assert!(saved.lines().any(|l| l == "filename=bench.dat"), "{saved}");
    assert!(!r.job_file.contains("exec_prerun"));
    assert!(listing(&evil).is_empty(), "{:?}", listing(&evil));
}

/// Finding 2: fio cut `filename=` at `;` or `#`, so it opened the user's
/// link `t` (to a root file) instead of the test file in `t;x`, and filled
/// the root file with random data.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn fio_never_opens_another_file_than_the_test_file() {
    if !require_root("bench in a user's directory") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let u = users_dir(&env, sb.mount_point());
    let (victim_dir, before) = canary(&env);
    for (dir, link) in [("t;x", "t"), ("h#x", "h"), ("d$HOME", "d")] {
        let d = u.join(dir);
        let out = as_nobody(&["mkdir", d.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let l = u.join(link);
        let target = victim_dir.join("secret");
        let out = as_nobody(&["ln", "-s", target.to_str().unwrap(), l.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let (code, _, stderr) = bench_json(&env, &d, &[]);
        assert!(code == 0 || code == 3, "{dir}: {stderr}");
        assert_eq!(contents(&victim_dir), before, "{dir}: root's file changed");
        assert!(listing(&d).is_empty(), "{dir}: {:?}", listing(&d));
    }
}

/// The racer: nobody swaps every `.btrfs-lab-bench-*` entry of `dir` with
/// their own symbolic link to root's directory, back and forth, until
/// `stop` exists. Prints the number of swaps done.
const RACER: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
d, decoy, stop = sys.argv[1], sys.argv[2], sys.argv[3]
swaps = 0
loops = 0
while not os.path.exists(stop) and loops < 2000000:
    loops += 1
    try:
        names = os.listdir(d)
    except OSError:
        continue
    for n in names:
        if n.startswith(".btrfs-lab-bench-"):
            a = os.path.join(d, n).encode()
            b = decoy.encode()
            if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
                swaps += 1
                # Half the time leave the link in place for a while.
                if swaps % 2 == 0:
                    libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
print(swaps)
"#;

/// Finding 3: the work dir was reached by path at every step, so a user
/// who renamed it and put a link in its place made root delete every file
/// of a root directory, write test data into one, truncate another through
/// `--output=` and accept a forged result. Now every step is by
/// descriptor: over a few hundred swaps per run, root's directory keeps
/// its files byte for byte, and nothing is left in the user's directory
/// but what the user made.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_user_swapping_the_work_directory_never_redirects_root() {
    if !require_root("bench raced by a user") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let u = users_dir(&env, sb.mount_point());
    let (victim, before) = canary(&env);
    let decoy = u.join("decoy");
    let out = as_nobody(&[
        "ln",
        "-s",
        victim.to_str().unwrap(),
        decoy.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let script = env.path().join("racer.py");
    fs::write(&script, RACER).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let mut total_swaps = 0u64;
    for round in 0..3 {
        let stop = env.path().join(format!("stop-{round}"));
        let racer = as_nobody(&[
            "/usr/bin/python3",
            script.to_str().unwrap(),
            u.to_str().unwrap(),
            decoy.to_str().unwrap(),
            stop.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let (code, stdout, stderr) = bench_json(&env, &u, &[]);
        fs::write(&stop, "").unwrap();
        let out = racer.wait_with_output().unwrap();
        assert!(out.status.success(), "racer: {out:?}");
        let swaps: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        total_swaps += swaps;
        eprintln!(
            "round {round}: {swaps} swaps, bench exit {code}: {}",
            stderr.trim()
        );
        // Either the bench finished with its figures, or it stopped with
        // one clear line (its test file replaced, its directory moved):
        // never with figures of another file.
        if code == 0 || code == 3 {
            let r: BenchReport = crate::common::typed(&stdout);
            assert!(r.test_file.removed);
        } else {
            assert_eq!(code, 1, "{stderr}");
            assert!(
                stdout.is_empty() || stdout.contains("\"error\""),
                "{stdout}"
            );
            assert_eq!(
                stderr.lines().filter(|l| l.contains("error:")).count(),
                1,
                "{stderr}"
            );
        }
        assert_eq!(
            contents(&victim),
            before,
            "round {round}: root's directory changed"
        );
        // In the user's directory: their link, maybe our emptied work
        // directory (moved by them), never a file of ours.
        for n in listing(&u) {
            let p = u.join(&n);
            if n == "decoy" || n.starts_with(".btrfs-lab-bench-") {
                let m = fs::symlink_metadata(&p).unwrap();
                if m.is_dir() {
                    assert!(listing(&p).is_empty(), "{n} holds {:?}", listing(&p));
                    fs::remove_dir(&p).unwrap();
                }
                continue;
            }
            panic!("round {round}: {n} left in the user's directory");
        }
        // The decoy link is back for the next round.
        if fs::symlink_metadata(&decoy).is_err() {
            let out = as_nobody(&[
                "ln",
                "-s",
                victim.to_str().unwrap(),
                decoy.to_str().unwrap(),
            ])
            .output()
            .unwrap();
            assert!(out.status.success());
        }
    }
    assert!(
        total_swaps >= 100,
        "only {total_swaps} swaps: the race did not run"
    );
}

/// Killed runs leave their work directory (SIGKILL cannot be caught); the
/// next run removes it and says so, and leaves alone what only looks like
/// one (another user's, or a live process's).
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn stale_work_directories_of_killed_runs_are_swept() {
    if !require_root("bench sweeping stale work directories") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let mnt = sb.mount_point().to_path_buf();
    // A dead run's directory: a pid that cannot be running (above
    // pid_max), root's, 0700, with a test file and a nested directory.
    let dead = mnt.join(".btrfs-lab-bench-4194999-0a1b2c3d");
    fs::create_dir(&dead).unwrap();
    fs::set_permissions(&dead, fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(dead.join("bench.dat"), vec![1u8; 1 << 20]).unwrap();
    fs::create_dir(dead.join("d000000")).unwrap();
    fs::write(dead.join("d000000/f000000001"), b"").unwrap();
    // A live process's (ours): left alone.
    let live = mnt.join(format!(".btrfs-lab-bench-{}-00000000", std::process::id()));
    fs::create_dir(&live).unwrap();
    // Another user's look-alike: left alone, said so.
    let other = mnt.join(".btrfs-lab-bench-4194998-deadbeef");
    fs::create_dir(&other).unwrap();
    std::os::unix::fs::chown(&other, Some(NOBODY), Some(NOBODY)).unwrap();
    fs::write(other.join("theirs"), b"x").unwrap();
    let (code, stdout, stderr) = bench_json(&env, &mnt, &[]);
    assert!(code == 0 || code == 3, "{stderr}");
    let r: BenchReport = crate::common::typed(&stdout);
    assert!(!dead.exists(), "the dead run's directory is still there");
    assert!(
        r.notes.iter().any(|n| n.contains("removed")
            && n.contains(".btrfs-lab-bench-4194999-0a1b2c3d")
            && n.contains("pid 4194999")),
        "{:?}",
        r.notes
    );
    assert!(live.exists());
    assert!(other.join("theirs").exists());
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains(".btrfs-lab-bench-4194998-deadbeef") && n.contains("left alone")),
        "{:?}",
        r.notes
    );
    fs::remove_dir(&live).unwrap();
    fs::remove_file(other.join("theirs")).unwrap();
    fs::remove_dir(&other).unwrap();
}

/// Finding 7 (bench's part) and 9: a DIR whose name is not UTF-8 and holds
/// an escape sequence: `--json` reads back as the typed report with the
/// exact bytes in `dir_bytes` (never a panic), and the text output never
/// carries the raw escape sequence.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_hostile_directory_name_is_reported_safely() {
    use std::os::unix::ffi::OsStrExt;
    if !require_root("bench in a hostile directory name") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let name = std::ffi::OsStr::from_bytes(b"x\xff\x1b]0;owned\x07");
    let dir = sb.mount_point().join(name);
    fs::create_dir(&dir).unwrap();
    let (code, stdout, stderr) = bench_json(&env, &dir, &[]);
    assert!(code == 0 || code == 3, "{stderr}");
    let r: BenchReport = crate::common::typed(&stdout);
    assert_eq!(
        r.target.dir_bytes.as_deref(),
        Some(dir.as_os_str().as_bytes()),
        "{:?}",
        r.target.dir
    );
    let (code, text, stderr) = run(env.cmd().args(["bench"]).args(TINY).arg(&dir));
    assert!(code == 0 || code == 3, "{stderr}");
    assert!(
        !text.contains('\u{1b}') && !stderr.contains('\u{1b}'),
        "{text:?}"
    );
    assert!(listing(&dir).is_empty());
}
