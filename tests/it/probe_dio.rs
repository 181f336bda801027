//! `probe-dio` on real filesystems made by the tests.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::{FsKind, SandboxRequest};
use serde_json::Value;

use crate::common::{TestEnv, assert_shape, json, listing, require_root, run};

/// Small but well above metadata noise; 3 rounds as by default.
const SIZE: &str = "32M";

fn probe(env: &TestEnv, dir: &Path, extra: &[&str]) -> (i32, Value, String) {
    let before = listing(dir);
    let mut c = env.cmd();
    c.arg("probe-dio")
        .arg("--json")
        .arg("--file-size")
        .arg(SIZE)
        .args(extra)
        .arg(dir);
    let (code, stdout, stderr) = run(&mut c);
    assert_eq!(
        listing(dir),
        before,
        "probe-dio left files behind in {}",
        dir.display()
    );
    (code, json(&stdout), stderr)
}

fn text_probe(env: &TestEnv, dir: &Path) -> (i32, String) {
    let mut c = env.cmd();
    c.arg("probe-dio").arg("--file-size").arg(SIZE).arg(dir);
    let (code, stdout, _) = run(&mut c);
    (code, stdout)
}

fn assert_report_shape(r: &Value) {
    assert_shape(
        r,
        &[
            ("path", "string"),
            ("verdict", "string"),
            ("exit_code", "number"),
            ("summary", "string"),
            ("explanation", "string"),
            ("fix", "string|null"),
            ("reasons", "array"),
            ("kernel", "string"),
            ("filesystem.dir", "string"),
            ("filesystem.fs_type", "string"),
            ("filesystem.mount_point", "string"),
            ("filesystem.source", "string"),
            ("filesystem.data_profiles", "array"),
            ("filesystem.mount_options", "array"),
            ("filesystem.target_nocow", "bool|null"),
            ("filesystem.target_compressed", "bool|null"),
            ("filesystem.dir_device", "string"),
            ("filesystem.dir_inode", "number"),
            ("removed_leftovers", "array"),
            ("counter.source", "string"),
            ("counter.label", "string"),
            ("counter.note", "string|null"),
            ("parameters.size_bytes", "number"),
            ("parameters.block_size", "number"),
            ("parameters.rounds", "number"),
            ("test.bytes_written", "number"),
            ("test.dirtied_bytes_median", "number"),
            ("test.raw_ratio_median", "number"),
            ("test.ratio_median", "number"),
            ("test.ratio_min", "number"),
            ("test.ratio_max", "number"),
            ("test.throughput_bytes_per_sec", "number"),
            ("test.behaviour", "string"),
            ("control", "object|null"),
            ("control_note", "string|null"),
            ("noise.dirtied_bytes_per_sec", "number"),
            ("noise.ratio_median", "number"),
            ("noise.ratio_spread", "number"),
            ("rounds", "array"),
            ("rounds.0.test.bytes_written", "number"),
            ("rounds.0.test.dirtied_bytes", "number"),
            ("rounds.0.test.seconds", "number"),
            ("rounds.0.idle.dirtied_bytes", "number"),
            ("rounds.0.idle.seconds", "number"),
            ("rounds.0.test.write_calls", "number"),
            ("rounds.0.test.cached_bytes", "number|null"),
            ("rounds.0.test.direct_calls", "number|null"),
            ("rounds.0.test.bounced_calls", "number|null"),
            ("test.direct_share", "number|null"),
            ("test.bounced_share", "number|null"),
            ("nocow_ratio", "number|null"),
            ("cost", "object|null"),
            ("expected.verdict", "string|null"),
            ("expected.basis", "string"),
            ("expected.agrees", "bool|null"),
            ("effort.seconds", "number"),
            ("effort.bytes_written", "number"),
        ],
    );
    let verdicts = [
        "direct",
        "direct-bounced",
        "buffered-fallback",
        "profile-forced",
        "inconclusive",
    ];
    // The time and bytes to the verdict are the probe's own: every round's
    // test file, and its control when there is one.
    let files = if r["control"].is_null() { 1 } else { 2 };
    assert_eq!(
        r["effort"]["bytes_written"].as_u64().unwrap(),
        r["parameters"]["size_bytes"].as_u64().unwrap()
            * r["parameters"]["rounds"].as_u64().unwrap()
            * files
    );
    assert!(r["effort"]["seconds"].as_f64().unwrap() > 0.0);
    // The cost is the test file's throughput over the control's.
    match r["control"]["throughput_bytes_per_sec"].as_f64() {
        Some(c) => {
            let t = r["test"]["throughput_bytes_per_sec"].as_f64().unwrap();
            let ratio = r["nocow_ratio"].as_f64().unwrap();
            assert!((ratio - t / c).abs() < 1e-9, "{r:#}");
        }
        None => assert!(r["nocow_ratio"].is_null()),
    }
    // The cost round by round: one ratio per round, the median inside the
    // range, and "agrees" by the documented rule (max <= 1.25 x min).
    match r["control"].is_null() {
        true => assert!(r["cost"].is_null(), "{r:#}"),
        false => {
            let cost = &r["cost"];
            let ratios: Vec<f64> = cost["rounds"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            assert_eq!(
                ratios.len() as u64,
                r["parameters"]["rounds"].as_u64().unwrap()
            );
            let (min, max) = (cost["min"].as_f64().unwrap(), cost["max"].as_f64().unwrap());
            let median = cost["median"].as_f64().unwrap();
            assert!(min <= median && median <= max, "{cost:#}");
            assert!(ratios.iter().all(|x| (min..=max).contains(x)), "{cost:#}");
            assert_eq!(
                cost["agrees"].as_bool().unwrap(),
                ratios.len() >= 2 && max <= min * btrfs_lab::probe::verdict::COST_AGREE_MAX,
                "{cost:#}"
            );
        }
    }
    // The report reads back as its type.
    let back: btrfs_lab::probe::ProbeReport = serde_json::from_value(r.clone()).unwrap();
    assert_eq!(back.verdict.name(), r["verdict"].as_str().unwrap());
    assert!(verdicts.contains(&r["verdict"].as_str().unwrap()));
    assert!(["bdi", "vmstat"].contains(&r["counter"]["source"].as_str().unwrap()));
    assert_eq!(
        r["rounds"].as_array().unwrap().len() as u64,
        r["parameters"]["rounds"].as_u64().unwrap()
    );
    assert_eq!(r["parameters"]["size_bytes"], 32 << 20);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn checksummed_and_nocow_directories_on_single_btrfs() {
    if !require_root("probe-dio on btrfs") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();

    let (code, r, _) = probe(&env, &mnt, &[]);
    assert_report_shape(&r);
    assert_eq!(r["verdict"], "buffered-fallback", "{r:#}");
    assert_eq!(code, 3);
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["filesystem"]["fs_type"], "btrfs");
    assert_eq!(
        r["filesystem"]["data_profiles"],
        serde_json::json!(["single"])
    );
    assert_eq!(r["filesystem"]["target_nocow"], false);
    assert_eq!(
        r["counter"]["source"], "bdi",
        "running as root, the per-filesystem counter is readable"
    );
    assert_eq!(r["control"]["behaviour"], "direct");
    assert!(r["test"]["ratio_median"].as_f64().unwrap() > 0.9, "{r:#}");
    // The direct sign of the path, where the kernel traces it: the
    // checksummed writes never reached the direct-I/O path, the NOCOW
    // control's all did, and none was bounced.
    if let Some(share) = r["test"]["direct_share"].as_f64() {
        assert!(share < 0.5, "{r:#}");
        assert!(
            r["control"]["direct_share"].as_f64().unwrap() > 0.5,
            "{r:#}"
        );
        assert_eq!(r["control"]["bounced_share"].as_f64().unwrap_or(0.0), 0.0);
    }

    let nocow = mnt.join("db");
    fs::create_dir(&nocow).unwrap();
    btrfs_lab::sys::fs::filesystem::set_nocow_dir(&nocow, false).unwrap();
    let (code, r, _) = probe(&env, &nocow, &[]);
    assert_report_shape(&r);
    assert_eq!(r["verdict"], "direct", "{r:#}");
    assert_eq!(code, 0);
    assert_eq!(r["filesystem"]["target_nocow"], true);
    assert!(r["test"]["ratio_median"].as_f64().unwrap() < 0.1);

    // The text report says the same, with the cost in the verdict line,
    // the version's expectation, an explanation and a fix.
    let (code, text) = text_probe(&env, &mnt);
    assert_eq!(code, 3);
    assert!(
        text.starts_with(&format!(
            "probe-dio {}\nverdict: buffered-fallback — ",
            mnt.display()
        )),
        "{text}"
    );
    // A figure when the rounds agree, else the range: which one depends on
    // the machine, the shape does not.
    let verdict_line = text.lines().nth(1).unwrap();
    assert!(
        (verdict_line.contains("checksummed O_DIRECT runs at ")
            && verdict_line.ends_with("% in 3 rounds, through the page cache)"))
            || (verdict_line.contains("the cost varies here: ")
                && verdict_line.ends_with("% of NOCOW in 3 rounds")),
        "{text}"
    );
    assert!(text.contains("kernel version"), "{text}");
    assert!(text.contains("968f19c5b1b7"));
    assert!(text.contains("chattr +C"));
    drop(sbx);
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn the_default_size_is_small_when_the_tracepoints_measure() {
    if !require_root("probe-dio default size") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["probe-dio", "--json"])
        .arg(sbx.mount_point()));
    assert!(matches!(code, 0 | 3 | 6), "{stderr}");
    let r = json(&stdout);
    let size = r["parameters"]["size_bytes"].as_u64().unwrap();
    match r["evidence"]["source"].as_str().unwrap() {
        "tracepoint" => assert_eq!(size, 4 << 20, "{r:#}"),
        _ => assert_eq!(size, 64 << 20, "{r:#}"),
    }
    assert_eq!(r["rounds"][0]["test"]["bytes_written"].as_u64(), Some(size));
    assert_eq!(
        r["rounds"][0]["test"]["write_calls"].as_u64(),
        Some(size >> 20)
    );
    // Without the tracepoints the counter decides, from bigger files.
    let (code, stdout, stderr) = run(env
        .cmd()
        .env("BTRFS_LAB_PROBE_NO_TRACE", "1")
        .args(["probe-dio", "--json"])
        .arg(sbx.mount_point()));
    assert!(matches!(code, 0 | 3 | 6), "{stderr}");
    let r = json(&stdout);
    assert_ne!(r["evidence"]["source"], "tracepoint", "{r:#}");
    assert_eq!(
        r["parameters"]["size_bytes"].as_u64(),
        Some(64 << 20),
        "{r:#}"
    );
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn dup_data_forces_buffered_io_even_for_nocow() {
    if !require_root("probe-dio on DUP") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        data: Some(Profile::Dup),
        ..SandboxRequest::default()
    });
    let (code, r, _) = probe(&env, sbx.mount_point(), &[]);
    assert_report_shape(&r);
    assert_eq!(r["verdict"], "profile-forced", "{r:#}");
    assert_eq!(code, 4);
    assert_eq!(r["filesystem"]["data_profiles"], serde_json::json!(["dup"]));
    assert_eq!(r["control"]["behaviour"], "buffered");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn ext4_is_direct_without_a_control() {
    if !require_root("probe-dio on ext4") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        fs: FsKind::Ext4,
        size_bytes: 256 << 20,
        ..SandboxRequest::default()
    });
    let (code, r, _) = probe(&env, sbx.mount_point(), &[]);
    assert_report_shape(&r);
    assert_eq!(r["verdict"], "direct", "{r:#}");
    assert_eq!(code, 0);
    assert_eq!(r["filesystem"]["fs_type"], "ext4");
    assert_eq!(r["control"], Value::Null);
    assert!(r["control_note"].as_str().unwrap().contains("ext4"));
    assert_eq!(r["filesystem"]["target_nocow"], Value::Null);
    let (code, text) = text_probe(&env, sbx.mount_point());
    assert_eq!(code, 0);
    assert!(text.contains("verdict: direct"));
    assert!(text.contains("ext4 on /dev/loop"));
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn tmpfs_is_refused_with_one_clear_line() {
    if !require_root("probe-dio on tmpfs") {
        return;
    }
    let mut env = TestEnv::new();
    let t = env.tmpfs("tmp");
    let (code, stdout, stderr) = run(env.cmd().arg("probe-dio").arg("--json").arg(&t));
    assert_eq!(code, 1);
    assert!(
        stdout.is_empty(),
        "nothing on stdout for an error: {stdout}"
    );
    let first = stderr.lines().next().unwrap();
    assert!(
        first.starts_with("btrfs-lab: error: O_DIRECT is not supported"),
        "{stderr}"
    );
    assert!(first.contains("tmpfs"));
    assert!(!stderr.contains("panicked"));
    assert!(listing(&t).is_empty());
}

#[test]
fn bad_paths_get_one_line_each() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("file");
    fs::write(&file, "x").unwrap();
    let cases: [(&Path, &str); 2] = [
        (&t.path().join("missing"), "no such file or directory"),
        (&file, "is not a directory"),
    ];
    for (path, want) in cases {
        let (code, stdout, stderr) = run(Command::new(crate::common::bin())
            .arg("probe-dio")
            .arg(path));
        assert_eq!(code, 1, "{stderr}");
        assert!(stdout.is_empty());
        assert!(stderr.starts_with("btrfs-lab: error: "), "{stderr}");
        assert!(stderr.lines().next().unwrap().contains(want), "{stderr}");
        assert!(stderr.lines().count() <= 2, "{stderr}");
    }
    for args in [
        vec!["--file-size", "12Q"],
        vec!["--block-size", "1000"],
        vec!["--rounds", "0"],
        vec!["--file-size", "1M", "--block-size", "4M"],
    ] {
        let (code, stdout, stderr) = run(Command::new(crate::common::bin())
            .arg("probe-dio")
            .args(&args)
            .arg(t.path()));
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty());
        assert!(stderr.starts_with("btrfs-lab: error: "), "{stderr}");
    }
    assert_eq!(listing(t.path()), vec!["file"]);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn read_only_filesystem_is_refused() {
    if !require_root("probe-dio on a read-only btrfs") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point();
    nix::mount::mount(
        None::<&str>,
        mnt,
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT | nix::mount::MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .unwrap();
    let (code, stdout, stderr) = run(env.cmd().arg("probe-dio").arg(mnt));
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(stderr.contains("read-only filesystem"), "{stderr}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn no_permission_is_refused() {
    if !require_root("probe-dio as an unprivileged user") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    // `nobody` must reach the binary and the mount point, and be refused
    // only where it matters: creating files in the root-owned directory.
    let (code, stdout, stderr) = run(env
        .as_nobody(&[&sbx.record().dir])
        .arg("probe-dio")
        .arg("--file-size")
        .arg(SIZE)
        .arg(sbx.mount_point()));
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert!(listing(sbx.mount_point()).is_empty());
}

#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn no_space_removes_the_partial_file() {
    if !require_root("probe-dio on a full filesystem") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        fs: FsKind::Ext4,
        size_bytes: 64 << 20,
        ..SandboxRequest::default()
    });
    // Refused up front when the free space is visibly too small...
    let (code, _, stderr) = run(env
        .cmd()
        .args(["probe-dio", "--file-size", "128M"])
        .arg(sbx.mount_point()));
    assert_eq!(code, 1);
    assert!(stderr.contains("not enough free space"), "{stderr}");
    // ...and when the disk fills during the write (the up-front check is
    // skipped through the test hook), the partial file is removed.
    let (code, _, stderr) = run(env
        .cmd()
        .env(btrfs_lab::hooks::Switch::ProbeSkipSpaceCheck.env(), "1")
        .args(["probe-dio", "--file-size", "128M"])
        .arg(sbx.mount_point()));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no space left"), "{stderr}");
    assert!(stderr.contains("partial test file was removed"), "{stderr}");
    assert_eq!(listing(sbx.mount_point()), vec!["lost+found"]);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn interrupted_probe_cleans_up() {
    if !require_root("probe-dio interrupted") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();
    for signal in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        let child = env
            .cmd()
            .args(["probe-dio", "--file-size", "512M", "--rounds", "20"])
            .arg(&mnt)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until the probe has created its files, then interrupt it.
        let mut seen = false;
        for _ in 0..500 {
            if listing(&mnt)
                .iter()
                .any(|n| n.starts_with(".btrfs-lab-probe-"))
            {
                seen = true;
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        assert!(seen, "the probe never started writing");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{signal}: {stderr}");
        assert!(stderr.contains("interrupted"), "{stderr}");
        assert!(out.stdout.is_empty());
        assert!(
            listing(&mnt).is_empty(),
            "{signal} left {:?}",
            listing(&mnt)
        );
    }
}

/// A buffered writer on another filesystem dirties pages at a steady rate
/// while the NOCOW file is probed: the per-filesystem counter ignores it,
/// and the machine-wide counter's background subtraction must not mistake
/// it for a fallback.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn stays_right_under_a_concurrent_buffered_writer() {
    if !require_root("probe-dio with background noise") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let nocow = sbx.mount_point().join("nocow");
    fs::create_dir(&nocow).unwrap();
    btrfs_lab::sys::fs::filesystem::set_nocow_dir(&nocow, false).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let noise_file = env.path().join("noise.bin");
    let writer = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            use std::io::{Seek, Write};
            let mut f = fs::File::create(&noise_file).unwrap();
            let block = vec![0x5a_u8; 1 << 20];
            let mut written = 0u64;
            let mut steps = 0u32;
            // Bounded in bytes and time; rewrites one 64 MiB region.
            while !stop.load(Ordering::Relaxed) && steps < 200_000 {
                f.write_all(&block).unwrap();
                written += 1 << 20;
                steps += 1;
                if written >= 64 << 20 {
                    f.seek(std::io::SeekFrom::Start(0)).unwrap();
                    written = 0;
                }
                thread::sleep(Duration::from_millis(2));
            }
            let _ = fs::remove_file(&noise_file);
        })
    };
    let results: Vec<(String, String)> = ["auto", "vmstat"]
        .iter()
        .map(|counter| {
            let (_, r, _) = probe(&env, &nocow, &["--counter", counter]);
            (
                counter.to_string(),
                r["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(
        results[0].1, "direct",
        "per-filesystem counter under noise: {results:?}"
    );
    assert!(
        results[1].1 == "direct" || results[1].1 == "inconclusive",
        "the machine-wide counter must never call a NOCOW file buffered: {results:?}"
    );
}

/// Compression is a second reason for the fallback; the report names it.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn compression_is_named_as_a_second_reason() {
    if !require_root("probe-dio with compress-force") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point();
    nix::mount::mount(
        None::<&str>,
        mnt,
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT,
        Some("compress-force=zstd"),
    )
    .unwrap();
    let (code, r, _) = probe(&env, mnt, &[]);
    assert_eq!(code, 3, "{r:#}");
    assert!(
        r["filesystem"]["mount_options"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o.as_str().unwrap().starts_with("compress-force"))
    );
    assert!(
        r["explanation"]
            .as_str()
            .unwrap()
            .contains("Compression (the mount option compress-force"),
        "{r:#}"
    );
}

/// A probe killed with SIGKILL cannot clean up: its NOCOW control directory
/// and test file stay. The next probe in that directory removes them (their
/// pid is dead, the names are ours, the owner is root), and only them.
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_killed_probes_leftovers_are_removed_by_the_next_run() {
    use std::io::{BufRead, BufReader};
    if !require_root("probe-dio killed with SIGKILL") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();
    // Not ours to touch: a user's file, and a directory named like a
    // probe's whose pid (the test's own) is alive.
    fs::write(mnt.join("user.db"), "keep").unwrap();
    let alive = format!(".btrfs-lab-probe-{}-abcdef.nocow", std::process::id());
    fs::create_dir(mnt.join(&alive)).unwrap();

    let mut child = env
        .cmd()
        .env(
            btrfs_lab::hooks::PAUSE_ENV,
            btrfs_lab::hooks::Pause::ProbeWritten.name(),
        )
        .args(["probe-dio", "--file-size", SIZE])
        .arg(&mnt)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains(&btrfs_lab::hooks::Pause::ProbeWritten.message()),
        "{line}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let tag = format!(".btrfs-lab-probe-{pid}-");
    let left: Vec<String> = listing(&mnt)
        .into_iter()
        .filter(|n| n.starts_with(&tag))
        .collect();
    assert_eq!(left.len(), 2, "the killed probe left {left:?}");
    assert!(left.iter().any(|n| n.ends_with(".nocow")), "{left:?}");
    assert!(left.iter().any(|n| n.ends_with("-r0.test")), "{left:?}");

    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["probe-dio", "--json", "--rounds", "1", "--file-size", SIZE])
        .arg(&mnt));
    assert!([0, 3, 5].contains(&code), "{code}: {stderr}");
    let r = json(&stdout);
    assert_report_shape(&r);
    let mut removed: Vec<String> = r["removed_leftovers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    removed.sort();
    assert_eq!(removed, left);
    let mut now = listing(&mnt);
    now.sort();
    let mut want = vec![alive, "user.db".to_owned()];
    want.sort();
    assert_eq!(now, want);
    assert_eq!(fs::read_to_string(mnt.join("user.db")).unwrap(), "keep");
    // The directory's identity is the one written in.
    let meta = fs::metadata(&mnt).unwrap();
    assert_eq!(
        r["filesystem"]["dir_inode"],
        std::os::unix::fs::MetadataExt::ino(&meta)
    );
}

/// The directory is opened once and every test file is made relative to
/// it: swapping the directory for a link to another one in the middle of
/// the run (what a user who owns its parent can do) does not redirect a
/// single file there, and the report names the directory written in.
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_directory_swapped_for_a_link_does_not_redirect_the_test_files() {
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::fs::MetadataExt;
    if !require_root("probe-dio with a swapped directory") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();
    let dir = mnt.join("d");
    let victim = mnt.join("victim");
    fs::create_dir(&dir).unwrap();
    fs::create_dir(&victim).unwrap();
    let inode = fs::metadata(&dir).unwrap().ino();
    let go = env.path().join("go");
    let mut child = env
        .cmd()
        .env(
            btrfs_lab::hooks::PAUSE_ENV,
            btrfs_lab::hooks::Pause::ProbeWritten.until(&go),
        )
        .args(["probe-dio", "--json", "--rounds", "2", "--file-size", SIZE])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(
        line.contains(&btrfs_lab::hooks::Pause::ProbeWritten.message()),
        "{line}"
    );
    fs::rename(&dir, mnt.join("d.moved")).unwrap();
    std::os::unix::fs::symlink(&victim, &dir).unwrap();
    fs::write(&go, "").unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        [Some(0), Some(3), Some(5)].contains(&status.code()),
        "{status}: {rest}"
    );
    let r = json(&stdout);
    assert_eq!(r["filesystem"]["dir_inode"], inode);
    assert_eq!(r["rounds"].as_array().unwrap().len(), 2);
    assert!(listing(&victim).is_empty(), "{:?}", listing(&victim));
    assert!(listing(&mnt.join("d.moved")).is_empty());
}

/// Names of the trace instances of ours (`btrfs-lab-*`) and the global
/// trace settings the probe must never change, read through a tracefs
/// mounted in a private mount namespace of a child (`unshare -m`).
#[cfg(feature = "test-hooks")]
fn trace_state() -> (Vec<String>, String) {
    let script = "mount -t tracefs nodev /sys/kernel/tracing && cd /sys/kernel/tracing && \
                  ls instances; echo ---; cat tracing_on current_tracer buffer_size_kb set_event \
                  events/writeback/writeback_dirty_folio/enable events/writeback/writeback_dirty_folio/filter \
                  events/writeback/writeback_dirty_folio/trigger";
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (instances, global) = text.split_once("---\n").unwrap();
    (
        instances
            .lines()
            .filter(|n| n.starts_with("btrfs-lab-"))
            .map(str::to_owned)
            .collect(),
        global.to_owned(),
    )
}

/// A buffered `dd` rewriting a file in another directory of the same btrfs
/// (at least 2 GiB in all) while checksummed and NOCOW directories are
/// probed 10 times each: the per-file tracepoint decides every time and is
/// right every time; the per-filesystem counter, kept as a cross-check, is
/// disturbed by the writer.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn exact_verdicts_under_a_buffered_writer_on_the_same_filesystem() {
    if !require_root("probe-dio with a writer on the same filesystem") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();
    let (csum, nocow, other) = (mnt.join("csum"), mnt.join("nocow"), mnt.join("other"));
    for d in [&csum, &nocow, &other] {
        fs::create_dir(d).unwrap();
    }
    btrfs_lab::sys::fs::filesystem::set_nocow_dir(&nocow, false).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let noise = other.join("noise.bin");
    let writer = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut written = 0u64;
            // At least 2 GiB, and on until the probes are done (bounded).
            for _ in 0..200 {
                if stop.load(Ordering::Relaxed) && written >= 2 << 30 {
                    break;
                }
                let st = Command::new("dd")
                    .args([
                        "if=/dev/zero",
                        "bs=1M",
                        "count=256",
                        "conv=notrunc",
                        "status=none",
                    ])
                    .arg(format!("of={}", noise.display()))
                    .status()
                    .unwrap();
                assert!(st.success());
                written += 256 << 20;
            }
            written
        })
    };
    let mut wrong = Vec::new();
    let mut counter_disagreed = 0;
    let mut noisy = 0;
    for (dir, want) in [(&csum, "buffered-fallback"), (&nocow, "direct")] {
        for i in 0..10 {
            let (_, r, _) = probe(&env, dir, &["--rounds", "1"]);
            assert_eq!(r["evidence"]["source"], "tracepoint", "{r:#}");
            if r["verdict"] != want {
                wrong.push(format!("{} run {i}: {}", dir.display(), r["verdict"]));
            }
            if r["evidence"]["cross_check"]["agrees"] == false {
                counter_disagreed += 1;
            }
            let folios = r["rounds"][0]["test"]["dirtied_folios"].as_u64().unwrap();
            let expected = if want == "direct" {
                0
            } else {
                (32 << 20) / 4096
            };
            assert_eq!(folios, expected, "{r:#}");
            assert_eq!(r["rounds"][0]["control"]["dirtied_folios"], 0, "{r:#}");
            // The per-filesystem counter saw the writer: more dirtied than
            // the test file's own folios, or dirtying while idle.
            let counted = r["rounds"][0]["test"]["dirtied_bytes"].as_u64().unwrap();
            let idle = r["rounds"][0]["idle"]["dirtied_bytes"].as_u64().unwrap();
            if counted > folios * 4096 + (1 << 20) || idle > 0 {
                noisy += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    eprintln!(
        "same-filesystem noise: {written} bytes buffered; 20 probes, {} wrong; the counter saw the writer in {noisy}, its verdict disagreed in {counter_disagreed}",
        wrong.len()
    );
    assert!(written > 0, "the writer wrote nothing");
    assert!(wrong.is_empty(), "{wrong:?}");
    // How often the counter alone gets it wrong depends on the machine's
    // load; that the writer's pages reached the counter does not.
    assert!(
        noisy > 0,
        "the writer never showed in the per-filesystem counter: the test does not test noise"
    );
}

/// The tracepoint turned off (test hook): the per-filesystem counter
/// decides, and the report says why.
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn without_the_tracepoint_the_counter_decides() {
    if !require_root("probe-dio without the tracepoint") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mut c = env.cmd();
    c.env(btrfs_lab::hooks::Switch::ProbeNoTrace.env(), "1")
        .args(["probe-dio", "--json", "--file-size", SIZE])
        .arg(sbx.mount_point());
    let (code, stdout, _) = run(&mut c);
    let r = json(&stdout);
    assert_eq!(code, 3, "{r:#}");
    assert_eq!(r["evidence"]["source"], "bdi");
    assert!(
        r["evidence"]["note"]
            .as_str()
            .unwrap()
            .contains("test hook")
    );
    assert_eq!(r["evidence"]["cross_check"], Value::Null);
    assert_eq!(r["rounds"][0]["test"]["dirtied_folios"], Value::Null);
}

/// A helper `dd` writing with O_DIRECT to `file`, in a loop, until killed.
struct Writer(std::process::Child);

impl Writer {
    fn start(file: &Path, direct: bool) -> Self {
        let mut c = Command::new("sh");
        let flag = if direct { "oflag=direct" } else { "" };
        c.arg("-c").arg(format!(
            "exec dd if=/dev/zero of='{}' bs=1M count=100000 {flag} conv=notrunc status=none",
            file.display()
        ));
        let w = Writer(c.spawn().unwrap());
        // Wait until dd has the file open (its size grows).
        for _ in 0..500 {
            if fs::metadata(file).is_ok_and(|m| m.len() >= 4 << 20) {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        w
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pid_probe(env: &TestEnv, pid: u32) -> (i32, Value) {
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["probe-dio", "--json", "--seconds", "2", "--pid"])
        .arg(pid.to_string()));
    assert!(!stdout.is_empty(), "{code}: {stderr}");
    (code, json(&stdout))
}

fn the_file<'a>(r: &'a Value, path: &Path) -> &'a Value {
    r["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path.to_str().unwrap())
        .unwrap_or_else(|| panic!("{} not in {r:#}", path.display()))
}

/// `--pid` on dd writing with O_DIRECT: to a checksummed file (fallback,
/// checksums), to a NOCOW file (direct), to a NOCOW file on DUP data
/// (fallback, profile); dd without O_DIRECT is buffered by choice; a
/// process with no file open for writing says so.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn pid_reports_each_file_of_a_running_writer() {
    if !require_root("probe-dio --pid") {
        return;
    }
    let env = TestEnv::new();
    let single = env.sandbox(SandboxRequest::default());
    let dup = env.sandbox(SandboxRequest {
        data: Some(Profile::Dup),
        ..SandboxRequest::default()
    });
    let nocow = single.mount_point().join("nocow");
    let dup_nocow = dup.mount_point().join("nocow");
    for d in [&nocow, &dup_nocow] {
        fs::create_dir(d).unwrap();
        btrfs_lab::sys::fs::filesystem::set_nocow_dir(d, false).unwrap();
    }
    let cases = [
        (
            single.mount_point().join("csum.bin"),
            true,
            3,
            "buffered-fallback",
            vec!["checksums"],
        ),
        (nocow.join("db.bin"), true, 0, "direct", vec![]),
        (
            dup_nocow.join("vm.img"),
            true,
            3,
            "buffered-fallback",
            vec!["profile"],
        ),
        (
            single.mount_point().join("log.bin"),
            false,
            0,
            "buffered-by-choice",
            vec![],
        ),
    ];
    for (file, direct, want_code, want, reasons) in cases {
        // A trace buffer that overflowed on a busy machine (lost_events > 0)
        // leaves the counts incomplete, and the report says so: probe
        // again, as a user would, up to five times. How busy the machine
        // is (the suite's other tests run beside this one) is not
        // btrfs-lab's: the verdict below must hold either way (lost events
        // only ever lower the counts).
        let mut attempt = 0;
        let (code, r) = loop {
            attempt += 1;
            let w = Writer::start(&file, direct);
            let got = pid_probe(&env, w.0.id());
            drop(w);
            if got.1["lost_events"] == 0 || attempt == 5 {
                break got;
            }
            eprintln!(
                "--pid {}: {} trace events lost; again",
                file.display(),
                got.1["lost_events"]
            );
            let _ = fs::remove_file(&file);
        };
        // Room for the next writer: a buffered dd on a full sandbox would
        // stop at ENOSPC before the probe looks at it.
        fs::remove_file(&file).unwrap();
        let f = the_file(&r, &file);
        eprintln!(
            "--pid {}: {} folios {} written {}",
            file.display(),
            f["verdict"],
            f["dirtied_folios"],
            f["bytes_written"]
        );
        assert_eq!(f["verdict"], want, "{r:#}");
        assert_eq!(code, want_code, "{r:#}");
        assert_eq!(f["o_direct"], direct);
        assert_eq!(f["reasons"], serde_json::json!(reasons), "{r:#}");
        let folios = f["dirtied_folios"].as_u64().unwrap();
        if want == "direct" {
            assert_eq!(folios, 0);
            assert_eq!(f["activity"]["mtime_changed"], true);
        } else {
            assert!(folios > 256, "{r:#}");
        }
        if r["lost_events"] != 0 {
            eprintln!(
                "--pid {}: {} events still lost after 5 probes (a busy machine); the verdict held",
                file.display(),
                r["lost_events"]
            );
        }
        assert_eq!(r["removed_trace_instances"], serde_json::json!([]));
        let back: btrfs_lab::probe::pid::PidReport = serde_json::from_value(r.clone()).unwrap();
        assert_eq!(back.files.len(), r["files"].as_array().unwrap().len());
    }

    // Its stdout and stderr would otherwise be whatever the test runner's are
    // (a log file open for writing, when the suite's output is redirected).
    let mut idle = Command::new("sleep")
        .arg("30")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["probe-dio", "--seconds", "1", "--pid"])
        .arg(idle.id().to_string()));
    let _ = idle.kill();
    let _ = idle.wait();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("has no regular file open for writing")
            || stdout.contains("has no file open with O_DIRECT"),
        "{stdout}"
    );
    assert!(!stdout.contains("O_DIRECT;"), "{stdout}");
}

#[test]
fn pid_errors_are_one_line() {
    let env = TestEnv::new();
    let (code, stdout, stderr) = run(env.cmd().args(["probe-dio", "--pid", "4194304000"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("btrfs-lab: error: no process with pid 4194304000\nhint: "),
        "{stderr}"
    );
    let (code, _, stderr) = run(env.cmd().args(["probe-dio", "--pid", "1", "/tmp"]));
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run(env.cmd().args(["probe-dio", "--seconds", "3", "/tmp"]));
    assert_eq!(code, 2, "{stderr}");
}

/// The private trace instance is gone after SIGINT and SIGTERM (the probe
/// removes it) and after SIGKILL (the next run removes it: its pid is
/// dead); the global tracing settings are the same as before.
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn the_trace_instance_is_removed_on_every_exit_path() {
    use std::io::{BufRead, BufReader};
    if !require_root("probe-dio trace instance clean-up") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();
    let (before, global) = trace_state();
    let mut pids = Vec::new();
    for signal in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGKILL,
    ] {
        let mut child = env
            .cmd()
            .env(
                btrfs_lab::hooks::PAUSE_ENV,
                btrfs_lab::hooks::Pause::ProbeWritten.name(),
            )
            .args(["probe-dio", "--file-size", SIZE])
            .arg(&mnt)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        pids.push(pid);
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(
            line.contains(&btrfs_lab::hooks::Pause::ProbeWritten.message()),
            "{line}"
        );
        let mine = format!("btrfs-lab-{pid}-");
        let (during, _) = trace_state();
        assert_eq!(
            during.iter().filter(|n| n.starts_with(&mine)).count(),
            1,
            "the paused probe has its instance: {during:?}"
        );
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
        let status = child.wait().unwrap();
        let (after, now_global) = trace_state();
        assert_eq!(
            now_global, global,
            "{signal} changed the global trace settings"
        );
        let left: Vec<&String> = after.iter().filter(|n| n.starts_with(&mine)).collect();
        if signal == nix::sys::signal::Signal::SIGKILL {
            assert_eq!(status.code(), None);
            assert_eq!(left.len(), 1, "SIGKILL cannot clean up: {after:?}");
            let (code, stdout, stderr) = run(env
                .cmd()
                .args(["probe-dio", "--json", "--rounds", "1", "--file-size", SIZE])
                .arg(&mnt));
            assert_eq!(code, 3, "{stderr}");
            let r = json(&stdout);
            assert!(
                r["removed_trace_instances"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|n| n == left[0].as_str()),
                "{r:#}"
            );
            // The removed leftovers of the killed probe's files too.
            assert!(!r["removed_leftovers"].as_array().unwrap().is_empty());
        } else {
            assert_eq!(status.code(), Some(130), "{signal}");
            assert!(left.is_empty(), "{signal} left {left:?}");
        }
    }
    // Other tests' probes may run meanwhile: only our children's count.
    let (end, end_global) = trace_state();
    let ours = |n: &&String| {
        pids.iter()
            .any(|p| n.starts_with(&format!("btrfs-lab-{p}-")))
    };
    assert_eq!(end.iter().filter(ours).count(), 0, "{end:?}");
    assert_eq!(before.iter().filter(ours).count(), 0);
    assert_eq!(end_global, global);
    assert!(listing(&mnt).is_empty(), "{:?}", listing(&mnt));
}

/// Runs `f` as uid/gid 65534 in a thread of its own.
fn as_nobody_thread<F: FnOnce() + Send + 'static>(f: F) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let g = rustix::process::Gid::from_raw(65534);
        let u = rustix::process::Uid::from_raw(65534);
        rustix::thread::set_thread_res_gid(g, g, g).unwrap();
        rustix::thread::set_thread_res_uid(u, u, u).unwrap();
        f()
    })
}

/// A user's directory `homes/u` (uid 65534, reachable by them) and a
/// root-only directory `secret` on the sandbox at `mnt`.
fn user_and_secret(env: &TestEnv, mnt: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    for a in mnt.ancestors() {
        fs::set_permissions(a, fs::Permissions::from_mode(0o755)).unwrap();
        if a == env.path() {
            break;
        }
    }
    let secret = mnt.join("secret");
    fs::create_dir(&secret).unwrap();
    fs::write(secret.join("root-only"), "x").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o700)).unwrap();
    let home = mnt.join("homes/u");
    fs::create_dir_all(&home).unwrap();
    fs::set_permissions(mnt.join("homes"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    (home, secret)
}

/// What shows that anything was created or removed in `dir`: its entries
/// and its modification and change times.
fn dir_state(dir: &Path) -> (Vec<String>, i64, i64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(dir).unwrap();
    (
        listing(dir),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    )
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_users_link_to_roots_directory_is_refused_before_anything_is_written() {
    if !require_root("probe-dio on a user's link") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let (home, secret) = user_and_secret(&env, sbx.mount_point());
    let link = home.join("link");
    as_nobody_thread({
        let (secret, link) = (secret.clone(), link.clone());
        move || std::os::unix::fs::symlink(&secret, &link).unwrap()
    })
    .join()
    .unwrap();
    let before = dir_state(&secret);
    for json_flag in [false, true] {
        let mut c = env.cmd();
        c.arg("probe-dio")
            .args(json_flag.then_some("--json"))
            .args(["--file-size", "1M", "--block-size", "1M", "--rounds", "1"])
            .arg(&link);
        let (code, stdout, stderr) = run(&mut c);
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(
            stderr.contains("is a symbolic link owned by uid 65534")
                && stderr.contains("follows only root's links"),
            "{stderr}"
        );
        assert_eq!(dir_state(&secret), before);
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_swap_race_on_the_directory_never_writes_in_roots_directory() {
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::AtomicU64;
    if !require_root("probe-dio against a swap race") {
        return;
    }
    const RUNS: usize = 100;
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let (home, secret) = user_and_secret(&env, sbx.mount_point());
    let before = dir_state(&secret);
    let swaps = Arc::new(AtomicU64::new(0));
    let (mut done, mut refused) = (0, 0);
    for run_no in 0..RUNS {
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let attacker = as_nobody_thread({
            let (home, secret, stop, ready, swaps) = (
                home.clone(),
                secret.clone(),
                stop.clone(),
                ready.clone(),
                swaps.clone(),
            );
            move || {
                for n in ["d", "link"] {
                    let _ = fs::remove_file(home.join(n));
                    let _ = fs::remove_dir_all(home.join(n));
                }
                fs::create_dir(home.join("d")).unwrap();
                std::os::unix::fs::symlink(&secret, home.join("link")).unwrap();
                let dir = fs::File::open(&home).unwrap();
                ready.store(true, Ordering::SeqCst);
                for _ in 0..5_000_000u32 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    rustix::fs::renameat_with(
                        &dir,
                        "d",
                        &dir,
                        "link",
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        while !ready.load(Ordering::SeqCst) {
            assert!(!attacker.is_finished(), "run {run_no}: no attacker");
            thread::yield_now();
        }
        let mut c = env.cmd();
        c.args([
            "probe-dio",
            "--json",
            "--file-size",
            "1M",
            "--block-size",
            "1M",
        ])
        .args(["--rounds", "1"])
        .arg(home.join("d"));
        let (code, stdout, stderr) = run(&mut c);
        stop.store(true, Ordering::SeqCst);
        attacker.join().unwrap();
        match code {
            0 | 3 | 5 => {
                // It probed the user's own directory.
                let r = json(&stdout);
                let ino = [home.join("d"), home.join("link")]
                    .iter()
                    .filter_map(|p| fs::symlink_metadata(p).ok())
                    .find(|m| m.is_dir())
                    .map(|m| m.ino())
                    .unwrap();
                assert_eq!(r["filesystem"]["dir_inode"], ino, "run {run_no}");
                done += 1;
            }
            1 => {
                assert!(stdout.is_empty());
                assert!(stderr.contains("btrfs-lab: error: "), "{stderr}");
                refused += 1;
            }
            _ => panic!("run {run_no}: exit {code}: {stderr}"),
        }
        assert_eq!(
            dir_state(&secret),
            before,
            "run {run_no}: probe-dio wrote in root's directory\n{stderr}"
        );
    }
    eprintln!(
        "probe-dio swaps: {RUNS} runs, {done} probed the user's directory, {refused} refused, {} swaps; root's directory untouched",
        swaps.load(Ordering::Relaxed)
    );
    assert!(swaps.load(Ordering::Relaxed) > RUNS as u64);
    assert!(done > 0 && refused > 0, "{done} done, {refused} refused");
}

/// A user's process (uid 65534, `bash` then `sleep`) holding `names` in
/// `dir` open for writing (one descriptor each); killed when dropped.
fn user_process_with_files_open(dir: &Path, names: &[std::ffi::OsString]) -> Writer {
    use std::io::{BufRead, BufReader};
    // bash: one `exec {fd}>NAME` per argument, then a line on stdout, then
    // sleep with every descriptor inherited.
    let script = r#"cd "$1" || exit 1; shift
for n in "$@"; do exec {fd}>"$n" || exit 1; done
echo ready
exec sleep 120"#;
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["bash", "-c", script, "bash"])
        .arg(dir)
        .args(names)
        .stdout(std::process::Stdio::piped())
        .stdin(std::process::Stdio::null())
        // (stderr may be a log file the test run writes to)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    Writer(child)
}

/// `--pid` of a user's process with 300 files open for writing (more than
/// the tracepoint filter holds) and one whose name is not UTF-8 and carries
/// terminal escapes: the report is complete (JSON: lossy `path` plus
/// `path_bytes`; text: the escapes shown as `\e`, `\n`), the files that
/// could not be watched are said to be so.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn pid_with_many_files_and_a_hostile_name_is_reported_whole() {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    if !require_root("probe-dio --pid with many files") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let (home, _) = user_and_secret(&env, sbx.mount_point());
    let hostile =
        std::ffi::OsString::from_vec(b"bad\xff\x1b[31mred\x1b]0;title\x07\nname".to_vec());
    let mut names: Vec<std::ffi::OsString> =
        (0..300).map(|i| format!("f{i:03}.db").into()).collect();
    names.push(hostile.clone());
    let writer = user_process_with_files_open(&home, &names);
    let pid = writer.0.id();

    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["probe-dio", "--json", "--seconds", "1", "--pid"])
        .arg(pid.to_string()));
    assert_eq!(code, 0, "{stderr}");
    let r = json(&stdout);
    let all = r["files"].as_array().unwrap();
    // Only the files in the user's directory (whatever else the process
    // inherited).
    let files: Vec<&Value> = all
        .iter()
        .filter(|f| {
            f["path"]
                .as_str()
                .is_some_and(|p| Path::new(p).starts_with(&home))
        })
        .collect();
    assert_eq!(files.len(), 301, "{stderr}");
    let raw = home.join(&hostile);
    let h = files
        .iter()
        .find(|f| f["path_bytes"].is_array())
        .expect("the file whose name is not UTF-8 has path_bytes");
    assert_eq!(h["path"], raw.to_string_lossy().as_ref());
    let bytes: Vec<u8> = h["path_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(bytes, raw.as_os_str().as_bytes());
    assert_eq!(
        files
            .iter()
            .filter(|f| f.get("path_bytes").is_some())
            .count(),
        1,
        "path_bytes only where the name is not UTF-8"
    );
    let not_watched = all
        .iter()
        .filter(|f| {
            f["note"]
                .as_str()
                .is_some_and(|n| n.contains("not watched"))
        })
        .count();
    assert!(not_watched > 0 && not_watched < 301, "{not_watched}");
    assert!(
        r["summary"].as_str().unwrap().contains(&format!(
            "{} of the {} file(s) open for writing were watched",
            all.len() - not_watched,
            all.len()
        )),
        "{}",
        r["summary"]
    );
    let back: btrfs_lab::probe::pid::PidReport = serde_json::from_value(r.clone()).unwrap();
    assert_eq!(back.files.len(), all.len());

    // The text report: nothing raw reaches the terminal.
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["probe-dio", "--seconds", "1", "--pid"])
        .arg(pid.to_string()));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stdout.contains('\x1b') && !stdout.contains('\x07'),
        "{stdout:?}"
    );
    assert!(
        stdout.contains("bad\u{fffd}\\e[31mred\\e]0;title\\x07\\nname"),
        "{stdout}"
    );
    drop(writer);
}

/// SIGHUP (a dropped SSH session) in the middle of `probe-dio DIR` (paused
/// after its first write, its files and trace instance made) and of
/// `probe-dio --pid` (watching): exit 130, no scratch file and no trace
/// instance of that run left.
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn sighup_mid_run_cleans_up_and_exits_130() {
    use std::io::{BufRead, BufReader};
    if !require_root("probe-dio and SIGHUP") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();
    let hup = |pid: u32| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap()
    };
    let instances_of = |pid: u32| {
        let mine = format!("btrfs-lab-{pid}-");
        trace_state()
            .0
            .into_iter()
            .filter(|n| n.starts_with(&mine))
            .count()
    };

    // probe-dio DIR.
    let mut child = env
        .cmd()
        .env(
            btrfs_lab::hooks::PAUSE_ENV,
            btrfs_lab::hooks::Pause::ProbeWritten.name(),
        )
        .args(["probe-dio", "--file-size", SIZE])
        .arg(&mnt)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(
        line.contains(&btrfs_lab::hooks::Pause::ProbeWritten.message()),
        "{line}"
    );
    assert!(
        listing(&mnt)
            .iter()
            .any(|n| n.starts_with(".btrfs-lab-probe-")),
        "{:?}",
        listing(&mnt)
    );
    assert_eq!(instances_of(pid), 1);
    hup(pid);
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("interrupted"), "{rest}");
    assert!(listing(&mnt).is_empty(), "{:?}", listing(&mnt));
    assert_eq!(instances_of(pid), 0);

    // probe-dio --pid, watching a process with a file open for writing.
    let (dir, _) = user_and_secret(&env, &mnt);
    let writer = user_process_with_files_open(&dir, &["log.bin".into()]);
    let child = env
        .cmd()
        .args(["probe-dio", "--seconds", "60", "--pid"])
        .arg(writer.0.id().to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut watching = false;
    for _ in 0..200 {
        if instances_of(pid) == 1 {
            watching = true;
            break;
        }
        thread::sleep(Duration::from_millis(25));
    }
    assert!(watching, "probe-dio --pid never made its trace instance");
    hup(pid);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(instances_of(pid), 0);
    drop(writer);
}
