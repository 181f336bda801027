//! Issue 24, bench: nothing left running or lying around, refusals before
//! anything runs, honest contracts. On real btrfs sandboxes, with real fio.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use btrfs_lab::bench::report::BenchReport;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::{Sandbox, SandboxRequest};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::bench::processes_in;
use crate::common::{TestEnv, listing, require_root, run};

fn btrfs(env: &TestEnv) -> Sandbox {
    env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 384 << 20,
        data: Some(Profile::Raid0),
        ..SandboxRequest::default()
    })
}

/// A small pseudo-random sequence (no dependency): the "random moments".
fn moments(seed: u64, n: usize, max_ms: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % max_ms
        })
        .collect()
}

/// The work directory bench made in `dir`, once it exists (named after
/// the child's pid: a killed run's directory is not it).
fn wait_for_work_dir(dir: &Path, child: &mut std::process::Child) -> Option<PathBuf> {
    let start = Instant::now();
    let ours = format!(".btrfs-lab-bench-{}-", child.id());
    while start.elapsed() < Duration::from_secs(60) {
        if let Some(p) = listing(dir).into_iter().find(|n| n.starts_with(&ours)) {
            return Some(dir.join(p));
        }
        if child.try_wait().unwrap().is_some() {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
    panic!("bench made no work directory in {}", dir.display());
}

/// Waits until no process works in `dir` any more (the kernel reaps killed
/// processes asynchronously); returns those still there after 5 s.
fn survivors(dir: &Path) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let left = processes_in(dir);
        if left.is_empty() || start.elapsed() > Duration::from_secs(5) {
            return left;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// INT, TERM and HUP at random moments of a run (the fill, a fio run,
/// between runs): exit 130, stdout empty, fio's whole tree gone at once
/// (before: fio's job process wrote on for the rest of --duration), and
/// nothing left in DIR.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_signal_at_any_moment_stops_fio_and_leaves_nothing() {
    if !require_root("bench interrupted at random moments") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let mnt = sb.mount_point().to_path_buf();
    let sigs = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];
    for (i, delay) in moments(0x9e37_79b9, 9, 2500).into_iter().enumerate() {
        let sig = sigs[i % 3];
        let mut child = env
            .cmd()
            .args([
                "bench",
                "--json",
                "--file-size",
                "32M",
                "--duration",
                "20",
                "--tests",
                "SEQ1M-Q8T1,RND4K-Q32T1",
            ])
            .arg(&mnt)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let Some(work) = wait_for_work_dir(&mnt, &mut child) else {
            panic!(
                "bench ended before it began: {:?}",
                child.wait_with_output()
            );
        };
        thread::sleep(Duration::from_millis(delay));
        kill(Pid::from_raw(child.id() as i32), sig).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(130),
            "{sig} after {delay} ms: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{sig}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(
            survivors(&work),
            Vec::<u32>::new(),
            "{sig} after {delay} ms: fio survived"
        );
        assert_eq!(
            listing(&mnt),
            Vec::<String>::new(),
            "{sig} after {delay} ms left files"
        );
    }
}

/// SIGKILL cannot be caught: fio dies with btrfs-lab (PR_SET_PDEATHSIG,
/// all jobs threads of one process) instead of writing on for the rest of
/// the run (`--sustained` starts fio the same way), and the next run
/// removes the directories the killed ones left, saying so.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn after_sigkill_fio_dies_and_the_next_run_sweeps() {
    if !require_root("bench killed") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let mnt = sb.mount_point().to_path_buf();
    for extra in [
        &["--tests", "SEQ1M-Q8T1"][..],
        &["--tests", "RND4K-Q32T1"][..],
    ] {
        let mut child = env
            .cmd()
            .args(["bench", "--file-size", "32M", "--duration", "30"])
            .args(extra)
            .arg(&mnt)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let work = wait_for_work_dir(&mnt, &mut child).expect("bench began");
        // Until fio runs in it (btrfs-lab holds it open, fio works in it).
        let start = Instant::now();
        while processes_in(&work).len() < 2 && start.elapsed() < Duration::from_secs(30) {
            thread::sleep(Duration::from_millis(20));
        }
        let running = processes_in(&work).len();
        kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
        child.wait().unwrap();
        assert!(running >= 2, "fio never started in {}", work.display());
        assert_eq!(
            survivors(&work),
            Vec::<u32>::new(),
            "{extra:?}: fio survived SIGKILL"
        );
        assert!(work.exists(), "SIGKILL cannot clean up");
    }
    // The next run sweeps what is left.
    let (code, stdout, stderr) = run(env
        .cmd()
        .args([
            "bench",
            "--json",
            "--file-size",
            "16M",
            "--duration",
            "1",
            "--rounds",
            "1",
        ])
        .args(["--tests", "SEQ1M-Q1T1"])
        .arg(&mnt));
    assert!(code == 0 || code == 3, "{stderr}");
    let r: BenchReport = crate::common::typed(&stdout);
    let swept = r
        .notes
        .iter()
        .filter(|n| n.contains("left by a bench run that was killed"))
        .count();
    // The second killed run already swept the first one's directory.
    assert_eq!(swept, 1, "{:?}", r.notes);
    assert_eq!(listing(&mnt), Vec::<String>::new());
}

/// A fio that never ends (a stuck device) is killed by the watchdog and
/// reported; a `fio --version` that hangs likewise. The fake fio is a shell
/// script first on PATH.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_hanging_fio_is_stopped_and_reported() {
    if !require_root("bench with a hanging fio") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let mnt = sb.mount_point().to_path_buf();
    let bin = env.path().join("fakebin");
    fs::create_dir(&bin).unwrap();
    let fake = bin.join("fio");
    // Answers --version at once unless told to hang; a job never ends.
    fs::write(
        &fake,
        "#!/bin/sh\nif [ \"$1\" = --version ]; then [ -n \"$HANG_VERSION\" ] && exec sleep 3600; echo fio-3.33; exit 0; fi\nexec sleep 3600\n",
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin:/usr/sbin:/sbin", bin.display());
    // A hanging `fio --version`.
    let start = Instant::now();
    let (code, stdout, stderr) = run(env
        .cmd()
        .env("PATH", &path)
        .env("HANG_VERSION", "1")
        .args(["bench", "--file-size", "16M", "--duration", "1"])
        .arg(&mnt));
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("did not answer within"), "{stderr}");
    assert!(
        start.elapsed() < Duration::from_secs(300),
        "it waited forever"
    );
    // A job that never ends: --duration 1 gives it 62 s.
    let (code, _, stderr) = run(env
        .cmd()
        .env("PATH", &path)
        .args([
            "bench",
            "--file-size",
            "16M",
            "--duration",
            "1",
            "--rounds",
            "1",
        ])
        .args(["--tests", "SEQ1M-Q1T1"])
        .arg(&mnt));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("fio was still running"), "{stderr}");
    assert!(stderr.contains("stopped it"), "{stderr}");
    assert!(stderr.contains("hint: a device may be stuck"), "{stderr}");
    assert_eq!(listing(&mnt), Vec::<String>::new());
}

/// Refusals come before any work: output files in a missing or read-only
/// directory, or that exist; `--sustained` on tmpfs, read-only or without
/// fio is refused before it asks. Nothing is created anywhere.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn refusals_come_before_the_run_and_the_question() {
    if !require_root("bench refusals before the run") {
        return;
    }
    let mut env = TestEnv::new();
    let sb = btrfs(&env);
    let mnt = sb.mount_point().to_path_buf();
    let ro = env.tmpfs("ro");
    crate::bench::remount(&ro, None, nix::mount::MsFlags::MS_RDONLY);
    let ro_btrfs = btrfs(&env);
    let ro_mnt = ro_btrfs.mount_point().to_path_buf();
    crate::bench::remount(&ro_mnt, None, nix::mount::MsFlags::MS_RDONLY);
    let missing = env.path().join("missing/report.html");
    let exists = env.path().join("exists.html");
    fs::write(&exists, "keep").unwrap();
    let roh = ro.join("r.html");
    for (flag, file, says) in [
        ("--report", &missing, "no such file or directory"),
        ("--save-jobs", &missing, "no such file or directory"),
        ("--report", &roh, "cannot write into"),
        (
            "--report",
            &exists,
            "exists; bench does not overwrite files",
        ),
    ] {
        let start = Instant::now();
        let (code, stdout, stderr) = run(env
            .cmd()
            .args(["bench", "--file-size", "16M", "--duration", "5", flag])
            .arg(file)
            .arg(&mnt));
        assert_eq!(code, 1, "{flag} {}: {stderr}", file.display());
        assert!(stdout.is_empty());
        assert!(stderr.contains(says), "{flag} {}: {stderr}", file.display());
        // Refused before the suite: nothing was measured (a suite of five
        // rounds of 5 s would take well over a minute).
        assert!(start.elapsed() < Duration::from_secs(60));
        assert_eq!(listing(&mnt), Vec::<String>::new());
    }
    assert_eq!(fs::read_to_string(&exists).unwrap(), "keep");

    // --sustained: refused before the question (stdin is not a terminal:
    // a question would fail with "cannot ask").
    let tmp = env.tmpfs("tmp");
    for (dir, path, says) in [
        (&tmp, None, "keeps files in memory"),
        (&ro_mnt, None, "read-only filesystem"),
        (&mnt, Some("/nonexistent"), "fio not found"),
    ] {
        let mut c = env.cmd();
        if let Some(p) = path {
            c.env("PATH", p);
        }
        let (code, _, stderr) = run(c.args(["bench", "--sustained", "256M"]).arg(dir));
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!stderr.contains("Start the write?"), "{stderr}");
        assert_eq!(listing(dir), Vec::<String>::new());
    }
    crate::bench::remount(&ro_mnt, None, nix::mount::MsFlags::empty());
}

/// `--compare` reads only bounded regular files, says what kind of report
/// it was given, accepts a UTF-8 byte-order mark, and never copies escape
/// sequences to the terminal.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn compare_is_bounded_typed_and_escaped() {
    if !require_root("bench --compare inputs") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let mnt = sb.mount_point().to_path_buf();
    let (code, stdout, stderr) = run(env
        .cmd()
        .args([
            "bench",
            "--json",
            "--file-size",
            "16M",
            "--duration",
            "1",
            "--rounds",
            "1",
        ])
        .args(["--tests", "SEQ1M-Q1T1"])
        .arg(&mnt));
    assert!(code == 0 || code == 3, "{stderr}");
    let a = env.path().join("a.json");
    fs::write(&a, &stdout).unwrap();
    // A BOM (Windows editors) and an escape sequence in a test name.
    let b = env.path().join("b.json");
    let mut v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    v["target"]["dir"] = serde_json::Value::String("/mnt/\u{1b}]0;owned\u{7}x".into());
    let mut f = fs::File::create(&b).unwrap();
    f.write_all("\u{feff}".as_bytes()).unwrap();
    f.write_all(v.to_string().as_bytes()).unwrap();
    drop(f);
    let (code, out, stderr) = run(env.cmd().args(["bench", "--compare"]).arg(&a).arg(&b));
    assert_eq!(code, 0, "{stderr}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");

    // A FIFO: refused at once (no writer would block it forever).
    let fifo = env.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (code, _, stderr) = run(env.cmd().args(["bench", "--compare"]).arg(&a).arg(&fifo));
    assert_eq!(code, 1);
    assert!(stderr.contains("a FIFO"), "{stderr}");
    // /dev/zero: refused, not read until memory runs out.
    let (code, _, stderr) = run(env.cmd().args(["bench", "--compare", "/dev/zero"]).arg(&a));
    assert_eq!(code, 1);
    assert!(stderr.contains("is a device"), "{stderr}");
    // A --sustained report: named as such.
    let s = env.path().join("s.json");
    let mut sv = v.clone();
    sv["btrfs_lab"]["document"] = "bench-sustained".into();
    fs::write(&s, sv.to_string()).unwrap();
    let (code, _, stderr) = run(env.cmd().args(["bench", "--compare"]).arg(&a).arg(&s));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("is a bench --sustained report; --compare compares suite reports"),
        "{stderr}"
    );
}

/// Another reader on the members during the bench (a second bench, a
/// scrub, a backup): the members move clearly more than fio did, and every
/// read figure is flagged `other_io` instead of being reported as checked
/// (before: "status ok, all figures checked against the devices").
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn other_io_on_the_members_is_flagged() {
    if !require_root("bench beside other I/O") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let mnt = sb.mount_point().to_path_buf();
    // Readers of the member devices, direct, in a loop, for the whole run.
    let mut readers: Vec<std::process::Child> = sb
        .devices()
        .iter()
        .map(|d| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "while :; do dd if={} of=/dev/null bs=1M iflag=direct status=none || exit 0; done",
                    d.display()
                ))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let (code, stdout, stderr) = run(env
        .cmd()
        .args([
            "bench",
            "--json",
            "--file-size",
            "32M",
            "--duration",
            "2",
            "--rounds",
            "1",
        ])
        .args(["--tests", "SEQ1M-Q1T1"])
        .arg(&mnt));
    for r in &mut readers {
        let _ = r.kill();
        let _ = r.wait();
    }
    assert_eq!(code, 3, "{stderr}");
    let r: BenchReport = crate::common::typed(&stdout);
    let read = r
        .results
        .iter()
        .find(|t| t.direction == btrfs_lab::bench::profile::Direction::Read)
        .unwrap();
    assert_eq!(
        read.status,
        btrfs_lab::bench::report::Status::Flagged,
        "{read:#?}"
    );
    assert!(
        read.checks
            .iter()
            .any(|c| c.code == btrfs_lab::model::finding::Code::BenchOtherIo
                && c.title.contains("quiet moment")),
        "{:#?}",
        read.checks
    );
    assert!(!r.summary.contains("all figures checked"), "{}", r.summary);
}

/// Bytes allocated below `dir` (a killed bench's work directory).
fn allocated_below(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                stack.push(e.path());
            } else {
                total += md.blocks() * 512;
            }
        }
    }
    total
}

/// A SIGKILLed bench whose test file holds more than half the free space:
/// the same command again is not refused for the space its leftover holds
/// (issue 49): the leftover is swept before the space is judged, and named.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_killed_benchs_leftover_is_swept_before_the_space_is_judged() {
    if !require_root("bench killed, space") {
        return;
    }
    let env = TestEnv::new();
    let sb = btrfs(&env);
    let mnt = sb.mount_point().to_path_buf();
    let vfs = nix::sys::statvfs::statvfs(&mnt).unwrap();
    let avail = vfs.blocks_available() as u64 * vfs.fragment_size() as u64;
    // More than half the free space, with bench's margin still fitting.
    let size = (avail * 55 / 100) >> 20 << 20;
    let size_arg = format!("{}M", size >> 20);
    let bench = |extra: &[&str]| {
        let mut c = env.cmd();
        c.args(["bench", "--file-size", &size_arg])
            .args(extra)
            .args(["--tests", "SEQ1M-Q1T1"])
            .arg(&mnt);
        c
    };
    let mut child = bench(&["--duration", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let work = wait_for_work_dir(&mnt, &mut child).expect("bench began");
    // Until its test file is laid out whole.
    let start = Instant::now();
    while allocated_below(&work) < size && start.elapsed() < Duration::from_secs(120) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    assert!(
        allocated_below(&work) >= size,
        "the test file was not laid out whole"
    );
    let _ = survivors(&work);
    let (code, stdout, stderr) =
        run(bench(&["--json", "--duration", "1", "--rounds", "1"]).arg("--no-history"));
    assert!(code == 0 || code == 3, "{stderr}");
    assert!(!stderr.contains("not enough free space"), "{stderr}");
    let r: BenchReport = crate::common::typed(&stdout);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("left by a bench run that was killed")),
        "{:?}",
        r.notes
    );
    assert_eq!(listing(&mnt), Vec::<String>::new());
}
