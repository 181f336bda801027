//! `read-test --pid` watching real loaders on a RAID0 btrfs over three loop
//! devices: small C programs (tests/it/loaders/loader.c, compiled here with
//! `cc`) that read a fresh 512 MiB file by mmap, fread + memcpy, O_DIRECT
//! pread × 4 threads and buffered pread × 4 threads, and log their own
//! progress. The watcher's method, thread count and rate are checked
//! against what the loader itself measured in the same window (two
//! measurements of one run, not a timed assertion), the page cache's share
//! against a warm and a cold run. Bad input: a pid that exits mid-window,
//! one that reads nothing, a kernel thread, another user's process as
//! non-root, a reused pid (a /proc fixture whose start time changes).
//! Loaders by their signals: the same C loader started with the command
//! lines, process titles, library names and environment of KvikIO, a vLLM
//! worker with the Run:ai streamer and llama.cpp (docs/loaders.md gives
//! where each signal was copied from), and the real safetensors loader
//! from PyPI (tests/it/loaders/safetensors_load.py, in the venv
//! scripts/install-deps.sh makes).

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::readtest::watch::report::{Bottleneck, ReadWay, WatchReport, WindowEnd};
use btrfs_lab::sandbox::{Sandbox, SandboxRequest};

use crate::common::{TestEnv, require_root, run, typed};

const MIB: u64 = 1 << 20;
/// The loaders' file: large enough that a pass lasts a good part of the
/// window on a loop btrfs, small enough for the page cache (warm runs).
const FILE_BYTES: u64 = 512 * MIB;
const WINDOW_SECONDS: &str = "3";
/// The watcher's rate against the loader's own, same window.
const RATE_TOLERANCE: f64 = 0.15;

/// Compiles the loader into the test's directory.
fn loader_exe(env: &TestEnv) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/loaders/loader.c");
    let exe = env.path().join("loader");
    let out = Command::new("cc")
        .args(["-O2", "-pthread", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc (gcc) is needed to build the test loaders");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A 3-device RAID0 btrfs with a fresh incompressible file.
fn raid0_with_model(env: &TestEnv) -> (Sandbox, PathBuf) {
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid0),
        ..SandboxRequest::default()
    });
    let file = sbx.mount_point().join("model.gguf");
    write_model(&file, FILE_BYTES, false);
    (sbx, file)
}

/// Writes `len` bytes to a new file, synced: pseudo-random (xorshift64*,
/// incompressible), or, `compressible`, the same random KiB over and over.
fn write_model(file: &Path, len: u64, compressible: bool) {
    let mut f = fs::File::create(file).unwrap();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut block = vec![0u8; MIB as usize];
    for i in 0..len / MIB {
        if i == 0 || !compressible {
            for w in block.chunks_exact_mut(8) {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                w.copy_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
            }
            if compressible {
                let (head, _) = block.split_at(1024);
                let kib = head.to_vec();
                for c in block.chunks_exact_mut(1024) {
                    c.copy_from_slice(&kib);
                }
            }
        }
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
}

/// The world of a loader test: the environment, the compiled loader, the
/// btrfs and its file (None only where `require_root` lets a test return).
fn loader_setup(test: &str) -> Option<(TestEnv, PathBuf, Sandbox, PathBuf)> {
    if !require_root(test) {
        return None;
    }
    let env = TestEnv::new();
    let exe = loader_exe(&env);
    let (sbx, file) = raid0_with_model(&env);
    Some((env, exe, sbx, file))
}

/// The report of a `read-test --pid --json` started in the background.
fn report_of(watcher: Child) -> WatchReport {
    let out = watcher.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    typed(&String::from_utf8_lossy(&out.stdout))
}

/// A running loader; killed if the test ends early.
struct Loader {
    child: Child,
    log: PathBuf,
}

impl Loader {
    fn start(exe: &Path, mode: &str, file: &Path, threads: u32, cache: &str, log: PathBuf) -> Self {
        let mut c = Command::new(exe);
        c.arg(mode)
            .arg(file)
            .arg(threads.to_string())
            .arg(cache)
            .arg(&log);
        Self::started(c, log, mode).0
    }

    /// Spawns `c` and waits for its "ready" line; the pid that reads (the
    /// one the line names, else the child's).
    fn started(mut c: Command, log: PathBuf, what: &str) -> (Self, u32) {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("ready"), "loader {what} did not start");
        let pid = words.next().map_or(child.id(), |p| p.parse().unwrap());
        (Loader { child, log }, pid)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The loader started with a real loader's signals ([`StandIn`]); the
    /// pid that reads (the worker, when it forks under a title).
    fn stand_in(
        exe: &Path,
        (mode, file, threads, cache): (&str, &Path, u32, &str),
        log: PathBuf,
        s: StandIn<'_>,
    ) -> (Self, u32) {
        let mut c = Command::new(exe);
        c.arg0(s.argv[0])
            .args(&s.argv[1..])
            .env("LOADER_MODE", mode)
            .env("LOADER_FILE", file)
            .env("LOADER_THREADS", threads.to_string())
            .env("LOADER_CACHE", cache)
            .env("LOADER_LOG", &log)
            .envs(s.env.iter().copied());
        if let Some(l) = s.lib {
            c.env("LOADER_LIB", l);
        }
        if let Some(t) = s.title {
            c.env("LOADER_TITLE", t);
        }
        if let Some(e) = s.stderr {
            c.env("LOADER_PROGRESS", "1").stderr(e);
        }
        Self::started(c, log, &format!("{:?}", s.argv))
    }

    /// Stops it (closes its stdin) and reads its own measurements.
    fn finish(mut self) -> Vec<(u64, u64)> {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "loader failed: {status}");
        fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(|l| {
                let mut w = l.split_whitespace().map(|v| v.parse::<u64>().unwrap());
                (w.next().unwrap(), w.next().unwrap())
            })
            .collect()
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a stand-in shows of the real loader it stands for.
struct StandIn<'a> {
    /// Its command line, argv[0] first.
    argv: &'a [&'a str],
    /// Its environment.
    env: &'a [(&'a str, &'a str)],
    /// A library it loads (named like the real one's).
    lib: Option<&'a Path>,
    /// A process title: it forks and its child reads under this name.
    title: Option<&'a str>,
    /// Where its progress lines go (standard error).
    stderr: Option<fs::File>,
}

/// The loader's own bytes at wall time `ns`, interpolated between samples.
fn bytes_at(log: &[(u64, u64)], ns: f64) -> f64 {
    let i = log.partition_point(|(t, _)| (*t as f64) < ns);
    assert!(
        i > 0 && i < log.len(),
        "the window is outside the loader's log"
    );
    let ((t0, b0), (t1, b1)) = (log[i - 1], log[i]);
    b0 as f64 + (b1 - b0) as f64 * (ns - t0 as f64) / (t1 - t0).max(1) as f64
}

/// The loader's rate over the watcher's window.
fn loader_rate(log: &[(u64, u64)], r: &WatchReport) -> f64 {
    let t0 = r.started_unix_ms as f64 * 1e6;
    let t1 = t0 + r.seconds * 1e9;
    (bytes_at(log, t1) - bytes_at(log, t0)) / r.seconds
}

fn watch(env: &TestEnv, pid: u32, extra: &[&str]) -> WatchReport {
    watch_with(env.cmd(), pid, WINDOW_SECONDS, extra)
}

/// `--json read-test --pid PID --seconds N`.
fn pid_args(pid: u32, seconds: &str) -> Vec<String> {
    [
        "--json",
        "read-test",
        "--pid",
        &pid.to_string(),
        "--seconds",
        seconds,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `read-test --json --pid PID --seconds N` run by `c` (root or nobody).
fn watch_with(mut c: Command, pid: u32, seconds: &str, extra: &[&str]) -> WatchReport {
    let (code, stdout, stderr) = run(c.args(pid_args(pid, seconds)).args(extra));
    assert_eq!(code, 0, "read-test --pid failed: {stderr}");
    typed(&stdout)
}

/// A child killed when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn within(a: f64, b: f64) -> bool {
    b > 0.0 && (a / b - 1.0).abs() <= RATE_TOLERANCE
}

/// One loader watched: the report and the loader's own rate in the window.
fn watched(
    env: &TestEnv,
    exe: &Path,
    mode: &str,
    file: &Path,
    threads: u32,
    cache: &str,
    extra: &[&str],
) -> (WatchReport, f64) {
    let l = Loader::start(
        exe,
        mode,
        file,
        threads,
        cache,
        env.path().join(format!("{mode}-{cache}.log")),
    );
    let r = watch(env, l.pid(), extra);
    let log = l.finish();
    let own = loader_rate(&log, &r);
    eprintln!(
        "{mode} x{threads} {cache}: watcher {:.3} GB/s, loader {own:.3e} B/s, share {:?}, {}",
        r.rate_bytes_per_sec / 1e9,
        r.page_cache_share,
        r.summary
    );
    (r, own)
}

fn assert_loader(r: &WatchReport, own: f64, file: &Path, way: ReadWay, threads: u32) {
    let f = r
        .files
        .first()
        .unwrap_or_else(|| panic!("no file read: {r:#?}"));
    assert_eq!(f.path.file_name(), file.file_name(), "{r:#?}");
    assert_eq!(f.ways.first(), Some(&way), "{r:#?}");
    assert_eq!(f.o_direct, way == ReadWay::Direct, "{r:#?}");
    assert_eq!(f.fs_type.as_deref(), Some("btrfs"));
    assert_eq!(f.data_profiles, vec![Profile::Raid0]);
    // RAID0 over three: every member holds a third of the file, in 64 KiB
    // units in turn (its bytes once: no copies), named by its device.
    let members = f
        .members
        .as_ref()
        .expect("members (root reads the chunk tree)");
    assert_eq!(members.len(), 3, "{members:?}");
    assert_eq!(
        members.iter().map(|m| m.bytes).sum::<u64>(),
        f.size_bytes,
        "{members:?}"
    );
    for m in members {
        assert!(m.device.starts_with("/dev/loop"), "{members:?}");
        let third = f.size_bytes as f64 / 3.0;
        assert!(
            (m.bytes as f64 - third).abs() <= 0.05 * third,
            "{members:?}"
        );
    }
    assert_eq!(r.reading_threads, threads, "{:#?}", r.threads);
    assert!(
        within(r.rate_bytes_per_sec, own),
        "watcher {} B/s vs the loader's own {own} B/s",
        r.rate_bytes_per_sec
    );
    assert!(within(f.rate_bytes_per_sec, own), "{r:#?}");
    assert_eq!(r.window_end, WindowEnd::Complete);
    assert_ne!(r.bottleneck, Bottleneck::NotReading);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn four_loaders_method_threads_and_rate_match_their_own_measurement() {
    let Some((env, exe, _sbx, file)) = loader_setup("read-test --pid on a RAID0 btrfs") else {
        return;
    };

    let (r, own) = watched(&env, &exe, "mmap", &file, 1, "cold", &[]);
    assert_loader(&r, own, &file, ReadWay::Mmap, 1);
    assert!(r.mapped_in_bytes > 0 && r.read_call_bytes < MIB, "{r:#?}");

    // A saved read-test run of the same file is compared with.
    let saved = env.path().join("saved.json");
    let (code, stdout, stderr) = run(env
        .cmd()
        .args([
            "--json",
            "read-test",
            "--methods",
            "direct",
            "--rounds",
            "1",
            "--cache",
            "cold",
        ])
        .arg(&file));
    assert_eq!(code, 0, "{stderr}");
    fs::write(&saved, stdout).unwrap();
    let saved_arg = saved.to_str().unwrap();
    let (r, own) = watched(
        &env,
        &exe,
        "fread",
        &file,
        1,
        "cold",
        &["--saved", saved_arg],
    );
    assert_loader(&r, own, &file, ReadWay::Buffered, 1);
    assert!(r.page_cache_share.unwrap() < 0.2, "{r:#?}");
    // Not the devices' limit: the advice is O_DIRECT with threads.
    assert!(
        r.settings.iter().any(|s| s.change.contains("O_DIRECT")),
        "{:?}",
        r.settings
    );
    let s = r.saved_run.as_ref().expect("the saved run compared");
    assert_eq!(s.method.name(), "direct");
    assert!(s.rate_bytes_per_sec > 0.0);
    assert!(r.summary.contains("read-test measured"), "{}", r.summary);

    let (r, own) = watched(&env, &exe, "direct", &file, 4, "cold", &[]);
    assert_loader(&r, own, &file, ReadWay::Direct, 4);
    assert!(
        r.threads
            .iter()
            .filter(|t| t.reading)
            .all(|t| t.read_call_bytes > 0)
    );
    // The devices delivered what the O_DIRECT readers read (nothing cached).
    let d = r.devices.as_ref().expect("the btrfs members");
    assert_eq!(d.devices.len(), 3);
    assert!(within(d.rate_bytes_per_sec, own), "{d:#?} vs {own}");
    // Four threads waiting on the devices, nothing copied: storage-bound.
    assert_eq!(r.bottleneck, Bottleneck::Storage, "{}", r.summary);
    assert!(r.settings.is_empty(), "{:?}", r.settings);

    let (r, own) = watched(&env, &exe, "buffered", &file, 4, "cold", &[]);
    assert_loader(&r, own, &file, ReadWay::Buffered, 4);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn page_cache_share_tells_a_warm_run_from_a_cold_one() {
    let Some((env, exe, _sbx, file)) = loader_setup("read-test --pid warm and cold") else {
        return;
    };
    for (mode, way) in [("fread", ReadWay::Buffered), ("mmap", ReadWay::Mmap)] {
        let (cold, own) = watched(&env, &exe, mode, &file, 1, "cold", &[]);
        assert_loader(&cold, own, &file, way, 1);
        let cold_share = cold.page_cache_share.unwrap();
        assert!(cold_share < 0.2, "{mode} cold: {cold:#?}");
        assert!(cold.devices.as_ref().unwrap().bytes > 0);
        let (warm, own) = watched(&env, &exe, mode, &file, 1, "warm", &[]);
        assert_loader(&warm, own, &file, way, 1);
        let warm_share = warm.page_cache_share.unwrap();
        assert!(warm_share > 0.9, "{mode} warm: {warm:#?}");
        assert_eq!(warm.bottleneck, Bottleneck::PageCache, "{}", warm.summary);
        assert!(warm.storage_read_bytes < warm.read_call_bytes.max(warm.mapped_in_bytes) / 10);
        assert_eq!(warm.files[0].resident_bytes_after, Some(FILE_BYTES));
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_loader_that_exits_mid_window_is_reported_until_then() {
    let Some((env, exe, _sbx, file)) = loader_setup("read-test --pid, a loader that exits") else {
        return;
    };
    let l = Loader::start(&exe, "fread", &file, 1, "cold", env.path().join("exit.log"));
    let pid = l.pid();
    let watcher = env
        .cmd()
        .args(pid_args(pid, "30"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let it see some reading, then stop the loader.
    thread::sleep(Duration::from_secs(2));
    let _ = l.finish();
    let r = report_of(watcher);
    assert_eq!(r.window_end, WindowEnd::Exited, "{r:#?}");
    assert!(r.seconds < 30.0);
    assert!(r.summary.contains("exited"), "{}", r.summary);
    assert_eq!(
        r.files.first().map(|f| f.ways[0]),
        Some(ReadWay::Buffered),
        "{r:#?}"
    );
    assert!(r.read_call_bytes > MIB);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn bad_pids_are_one_line_each() {
    if !require_root("read-test --pid bad input") {
        return;
    }
    let env = TestEnv::new();
    let one_line = |code: i32, want: i32, stdout: &str, stderr: &str, says: &str| {
        assert_eq!(code, want, "{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert_eq!(
            stderr
                .trim()
                .lines()
                .filter(|l| !l.starts_with("hint"))
                .count(),
            1,
            "{stderr}"
        );
        assert!(stderr.contains(says), "{stderr}");
    };
    // Beyond pid_max: no such process.
    let max: u64 = fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (code, out, err) = run(env.cmd().args([
        "read-test",
        "--pid",
        &(max + 1).to_string(),
        "--seconds",
        "1",
    ]));
    one_line(code, 1, &out, &err, "no process with pid");
    // kthreadd.
    let (code, out, err) = run(env
        .cmd()
        .args(["read-test", "--pid", "2", "--seconds", "1"]));
    one_line(code, 1, &out, &err, "kernel thread");
    // Bad command lines.
    let (code, _, err) = run(env
        .cmd()
        .args(["read-test", "--pid", "1", "--seconds", "0"]));
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(env.cmd().args(["read-test", "--seconds", "3", "x"]));
    assert_eq!(code, 2, "{err}");
    let garbage = env.path().join("garbage.json");
    fs::write(&garbage, "not json").unwrap();
    let me = std::process::id().to_string();
    let (code, out, err) = run(env
        .cmd()
        .args(["read-test", "--pid", &me, "--seconds", "1", "--saved"])
        .arg(&garbage));
    one_line(code, 1, &out, &err, "is not a `read-test --json` report");

    // A process that reads nothing (not a loader: it only waits).
    let idle = Reaped(Command::new("sleep").arg("60").spawn().unwrap());
    let r = watch_with(env.cmd(), idle.0.id(), "1", &[]);
    assert_eq!(r.bottleneck, Bottleneck::NotReading);
    assert!(r.summary.contains("read nothing"), "{}", r.summary);
    assert!(r.files.is_empty());

    // As uid 65534: root's process is refused in one line, its own is watched.
    let (code, out, err) = run(env.as_nobody(&[]).args([
        "read-test",
        "--pid",
        &idle.0.id().to_string(),
        "--seconds",
        "1",
    ]));
    one_line(code, 1, &out, &err, "another user's process needs root");
    let own = Reaped(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sleep",
                "60",
            ])
            .spawn()
            .unwrap(),
    );
    // setpriv execs sleep: wait until the pid's owner is 65534.
    let mut owned = false;
    for _ in 0..200 {
        let status = fs::read_to_string(format!("/proc/{}/status", own.0.id())).unwrap_or_default();
        if status.lines().any(|l| l.starts_with("Uid:\t65534")) && status.contains("Name:\tsleep") {
            owned = true;
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert!(owned, "setpriv did not become sleep as 65534");
    let r = watch_with(env.as_nobody(&[]), own.0.id(), "1", &[]);
    assert_eq!(r.bottleneck, Bottleneck::NotReading);
}

/// A /proc fixture of one process whose start time the test changes while
/// it is watched: the pid was given to another process.
#[test]
fn a_reused_pid_is_detected_by_its_start_time() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("proc/4242");
    fs::create_dir_all(p.join("fd")).unwrap();
    fs::create_dir_all(p.join("fdinfo")).unwrap();
    fs::create_dir_all(p.join("task/4242")).unwrap();
    let uid = nix::unistd::getuid().as_raw();
    let stat = |start: u64| {
        format!(
            "4242 (loader) R 1 4242 4242 0 -1 4194560 100 0 0 0 50 5 0 0 20 0 1 0 {start} 1000 10 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
        )
    };
    let io = "rchar: 1000\nwchar: 0\nsyscr: 1\nsyscw: 0\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n";
    for dir in [p.clone(), p.join("task/4242")] {
        fs::write(dir.join("stat"), stat(1000)).unwrap();
        fs::write(dir.join("io"), io).unwrap();
        fs::write(dir.join("comm"), "loader\n").unwrap();
    }
    fs::write(
        p.join("status"),
        format!("Name:\tloader\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"),
    )
    .unwrap();
    fs::write(p.join("smaps"), "").unwrap();
    fs::write(p.join("cmdline"), "loader\0model.gguf\0").unwrap();
    fs::write(
        t.path().join("proc/diskstats"),
        "   7 3 loop3 1 0 8 0 0 0 0 0 0 0 0\n",
    )
    .unwrap();
    let watcher = Command::new(crate::common::bin())
        .args(["--json", "read-test", "--sysroot"])
        .arg(t.path())
        .args(["--pid", "4242", "--seconds", "20"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(1500));
    // Another process got pid 4242: a later start time.
    fs::write(p.join("stat.new"), stat(99_999)).unwrap();
    fs::rename(p.join("stat.new"), p.join("stat")).unwrap();
    let r = report_of(watcher);
    assert_eq!(r.window_end, WindowEnd::PidReused, "{r:#?}");
    assert!(r.seconds < 20.0 && r.seconds > 0.5, "{}", r.seconds);
    assert!(
        r.summary.contains("belonged to another process"),
        "{}",
        r.summary
    );
    assert_eq!(r.command, "loader");
}

/// RAID1 with one reading thread, and a file in compressed extents: the
/// traps are named.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn btrfs_traps_one_raid1_reader_and_compressed_extents() {
    if !require_root("read-test --pid, btrfs traps") {
        return;
    }
    let env = TestEnv::new();
    let exe = loader_exe(&env);
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let plain = sbx.mount_point().join("model.gguf");
    write_model(&plain, 256 * MIB, false);
    let (r, _) = watched(&env, &exe, "fread", &plain, 1, "cold", &[]);
    assert_eq!(r.files[0].data_profiles, vec![Profile::Raid1]);
    // RAID1: each of the two members holds a whole copy.
    let members = r.files[0].members.clone().expect("members");
    assert_eq!(members.len(), 2, "{members:?}");
    assert!(members.iter().all(|m| m.bytes == 256 * MIB), "{members:?}");
    assert_eq!(r.reading_threads, 1);
    assert!(
        r.traps.iter().any(|t| t.name == "raid1-read-policy"),
        "{:?}",
        r.traps
    );
    assert!(r.traps.iter().all(|t| t.name != "compressed"));
    // A directory with the compression attribute: new files are compressed.
    let dir = sbx.mount_point().join("zdir");
    fs::create_dir(&dir).unwrap();
    let (code, _, err) = run(Command::new("chattr").arg("+c").arg(&dir));
    assert_eq!(code, 0, "chattr +c: {err}");
    let packed = dir.join("model.gguf");
    write_model(&packed, 256 * MIB, true);
    let (r, _) = watched(&env, &exe, "fread", &packed, 1, "cold", &[]);
    let layout = r.files[0].layout.expect("FIEMAP of the file");
    assert!(layout.encoded_bytes > 0, "{layout:?}");
    assert!(
        r.traps.iter().any(|t| t.name == "compressed"),
        "{:?}",
        r.traps
    );
}

/// KvikIO (library and environment), a vLLM worker under its title with
/// the Run:ai streamer (the server's flags, its progress line with GB/s in
/// its log) and llama.cpp (`--load-mode mmap`, warm, with `--claimed`):
/// each named, with its own settings, request sizes and where its bytes
/// came from.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn stand_ins_named_like_real_loaders_are_recognised_and_advised() {
    let Some((env, exe, _sbx, file)) = loader_setup("read-test --pid, loaders by their signals")
    else {
        return;
    };
    // KvikIO's wheel installs libkvikio/lib64/libkvikio.so; KVIKIO_NTHREADS
    // defaults to 1 (KvikIO docs, runtime settings).
    let lib = env.path().join("libkvikio/lib64/libkvikio.so");
    fs::create_dir_all(lib.parent().unwrap()).unwrap();
    let (code, _, err) = run(Command::new("cc")
        .args(["-shared", "-fPIC", "-x", "c", "/dev/null", "-o"])
        .arg(&lib));
    assert_eq!(code, 0, "cc -shared: {err}");
    // Its progress goes to a log opened write-only (`2> kvikio-stderr.log`).
    let progress = env.path().join("kvikio-stderr.log");
    let (l, pid) = Loader::stand_in(
        &exe,
        ("direct", &file, 1, "cold"),
        env.path().join("kvikio.log"),
        StandIn {
            argv: &["python3", "bench_read.py", "--nthreads", "1"],
            env: &[("KVIKIO_NTHREADS", "1")],
            lib: Some(&lib),
            title: None,
            stderr: Some(fs::File::create(&progress).unwrap()),
        },
    );
    let r = watch(&env, pid, &[]);
    let _ = l.finish();
    let seen = r.loader.as_ref().unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(seen.program, "KvikIO", "{seen:?}");
    assert_eq!(seen.environment, ["KVIKIO_NTHREADS=1"]);
    assert!(
        seen.recognised_by
            .iter()
            .any(|e| e.contains("libkvikio.so")),
        "{seen:?}"
    );
    assert!(
        r.settings
            .iter()
            .any(|s| s.program == "KvikIO" && s.change.contains("KVIKIO_NTHREADS")),
        "{:?} ({})",
        r.settings,
        r.summary
    );
    // 4 MiB O_DIRECT preads (the loader's chunk), each one device request
    // or a few, about one in flight.
    let q = r.requests.as_ref().expect("request shape");
    let avg = q.read_call_bytes_avg.expect("read calls");
    assert!(avg > 3 * MIB && avg <= 4 * MIB, "{q:?}");
    assert!(q.device_requests > 0 && q.in_flight.unwrap() > 0.0, "{q:?}");
    let o = r.origin.as_ref().expect("origin");
    assert!(
        o.storage_bytes > 0 && o.page_cache_bytes < o.loader_bytes / 5,
        "{o:?}"
    );
    let c = r
        .claimed
        .as_ref()
        .unwrap_or_else(|| panic!("no figure read: {r:#?}"));
    assert!(c.source.contains("kvikio-stderr.log (fd 2)"), "{c:?}");
    assert!(c.page_cache_percent.unwrap() < 20.0, "O_DIRECT: {c:?}");

    // vLLM's EngineCore worker, titled by setproctitle; `vllm serve ...
    // --load-format runai_streamer` is its parent's command line (vLLM
    // docs, Run:ai Model Streamer); its progress goes to a log it can read.
    let progress = env.path().join("vllm-stderr.log");
    let log = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&progress)
        .unwrap();
    let (l, pid) = Loader::stand_in(
        &exe,
        ("buffered", &file, 2, "cold"),
        env.path().join("vllm.log"),
        StandIn {
            argv: &[
                "/usr/bin/python3",
                "/usr/local/bin/vllm",
                "serve",
                "Qwen/Qwen3-8B",
                "--load-format",
                "runai_streamer",
            ],
            env: &[("RUNAI_STREAMER_CONCURRENCY", "2")],
            lib: None,
            title: Some("VLLM::EngineCore"),
            stderr: Some(log),
        },
    );
    assert_ne!(pid, l.pid(), "the worker is the parent's child");
    let r = watch(&env, pid, &[]);
    let _ = l.finish();
    let seen = r.loader.as_ref().unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(seen.program, "Run:ai Model Streamer", "{seen:?}");
    assert_eq!(seen.engine.as_deref(), Some("vLLM"));
    assert_eq!(seen.format.as_deref(), Some("runai_streamer"));
    assert!(
        seen.recognised_by.iter().any(|e| e.contains("server")),
        "{seen:?}"
    );
    let c = r
        .claimed
        .as_ref()
        .unwrap_or_else(|| panic!("no figure read: {r:#?}"));
    assert!(c.source.contains("vllm-stderr.log"), "{c:?}");
    assert!(c.rate_bytes_per_sec > 0.0, "{c:?}");
    assert!(c.page_cache_percent.unwrap() < 50.0, "cold: {c:?}");

    // llama.cpp with the model in the page cache, and the figure it claims.
    let (l, pid) = Loader::stand_in(
        &exe,
        ("mmap", &file, 1, "warm"),
        env.path().join("llama.log"),
        StandIn {
            argv: &["llama-server", "-m", "model.gguf", "--load-mode", "mmap"],
            env: &[],
            lib: None,
            title: None,
            stderr: None,
        },
    );
    let r = watch(&env, pid, &["--claimed", "40GB/s"]);
    let _ = l.finish();
    let seen = r.loader.as_ref().unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(
        (seen.program.as_str(), seen.format.as_deref()),
        ("llama.cpp", Some("mmap"))
    );
    assert_eq!(r.bottleneck, Bottleneck::PageCache, "{}", r.summary);
    let c = r.claimed.as_ref().expect("--claimed");
    assert_eq!(c.source, "--claimed");
    assert!(c.page_cache_percent.unwrap() > 90.0, "{c:?}");
    assert!(c.text.contains("page cache"), "{c:?}");
    assert!(r.settings[0].change.contains("--mlock"), "{:?}", r.settings);
}

/// The Python of the real loaders: the venv scripts/install-deps.sh makes
/// (`btrfs_lab_install_loaders`), or BTRFS_LAB_TEST_PYTHON.
fn loaders_python() -> PathBuf {
    let p = std::env::var_os("BTRFS_LAB_TEST_PYTHON").map_or_else(
        || PathBuf::from("/var/tmp/btrfs-lab-py/bin/python"),
        PathBuf::from,
    );
    assert!(
        p.exists(),
        "{} is missing: scripts/test.sh makes it (scripts/install-deps.sh, btrfs_lab_install_loaders)",
        p.display()
    );
    p
}

/// The real safetensors package (PyPI) loading a file it wrote: named by
/// its Rust extension, read through its mapping, cold.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn the_real_safetensors_loader_is_named_and_read_through_its_mapping() {
    if !require_root("read-test --pid, safetensors") {
        return;
    }
    let py = loaders_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/loaders/safetensors_load.py");
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid0),
        ..SandboxRequest::default()
    });
    let file = sbx.mount_point().join("model-00001-of-00001.safetensors");
    let (code, _, err) = run(Command::new(&py)
        .arg(&script)
        .arg("make")
        .arg(&file)
        .arg("256"));
    assert_eq!(code, 0, "safetensors make: {err}");
    let mut child = Reaped(
        Command::new(&py)
            .arg(&script)
            .arg("load")
            .arg(&file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let r = watch(&env, child.0.id(), &[]);
    drop(child.0.stdin.take());
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status}");
    let seen = r.loader.as_ref().unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(seen.program, "safetensors", "{seen:?}");
    assert!(
        seen.recognised_by
            .iter()
            .any(|e| e.contains("_safetensors_rust")),
        "{seen:?}"
    );
    let f = r.files.first().unwrap_or_else(|| panic!("{r:#?}"));
    assert_eq!(f.path.file_name(), file.file_name());
    assert_eq!(f.ways.first(), Some(&ReadWay::Mmap), "{r:#?}");
    assert!(r.page_cache_share.unwrap() < 0.5, "cold: {r:#?}");
    assert!(
        r.settings
            .iter()
            .any(|s| s.program == "safetensors" && s.change.contains("instanttensor")),
        "{:?} ({})",
        r.settings,
        r.summary
    );
}
