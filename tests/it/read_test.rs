//! `read-test` on real filesystems made by the tests: a RAID0 btrfs over
//! three loop devices, ext4, tmpfs and ramfs.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::Duration;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::readtest::digest::{VerifyMode, digest_of};
use btrfs_lab::sandbox::{FsKind, Sandbox, SandboxRequest};
use serde_json::Value;

use crate::common::{TestEnv, assert_shape, json, require_root, run};

const MIB: u64 = 1 << 20;

/// Pseudo-random bytes (xorshift64*): incompressible, different per seed.
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Writes `bytes` to a new file, synced; returns the full checksum the
/// methods must report.
fn write_file(path: &Path, bytes: &[u8]) -> String {
    let mut f = fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
    digest_of(VerifyMode::Full, bytes).hex()
}

/// A 256 MiB ext4 sandbox.
fn ext4_sandbox(env: &TestEnv) -> Sandbox {
    env.sandbox(SandboxRequest {
        fs: FsKind::Ext4,
        size_bytes: 256 << 20,
        ..SandboxRequest::default()
    })
}

/// `read-test --json`; the cold cache only unless `extra` names `--cache`
/// (the warm runs have tests of their own).
fn read_test(env: &TestEnv, file: &Path, extra: &[&str]) -> (i32, Value, String) {
    let mut c = env.cmd();
    c.args(["read-test", "--json"]).args(extra);
    if !extra.contains(&"--cache") {
        c.args(["--cache", "cold"]);
    }
    c.arg(file);
    let (code, stdout, stderr) = run(&mut c);
    assert!(
        code == 0 || code == 3,
        "read-test failed ({code}): {stderr}"
    );
    (code, json(&stdout), stderr)
}

fn method<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["method"] == name)
        .unwrap_or_else(|| panic!("no method {name} in {r:#}"))
}

fn assert_report_shape(r: &Value) {
    assert_shape(
        r,
        &[
            ("path", "string"),
            ("exit_code", "number"),
            ("summary", "string"),
            ("kernel", "string"),
            ("file.path", "string"),
            ("file.size_bytes", "number"),
            ("file.fs_type", "string"),
            ("file.mount_point", "string"),
            ("file.source", "string"),
            ("file.memory_backed", "bool"),
            ("file.data_profiles", "array"),
            ("file.devices", "array"),
            ("file.layout", "object|null"),
            ("file.owner_uid", "number"),
            ("file.read_as_root_for_another_user", "bool"),
            ("parameters.methods", "array"),
            ("parameters.rounds", "number"),
            ("parameters.threads", "number"),
            ("parameters.chunk_bytes", "number"),
            ("parameters.in_flight_bytes", "number"),
            ("parameters.buffer_bytes", "number"),
            ("parameters.verify", "string"),
            ("parameters.drop_caches", "bool"),
            ("direct_io.used", "bool"),
            ("direct_io.note", "string|null"),
            ("direct_io.offset_align_bytes", "number"),
            ("direct_io.memory_align_bytes", "number"),
            ("direct_io.align_source", "string"),
            ("destination.bytes", "number"),
            ("destination.slots", "number"),
            ("destination.backing", "string"),
            ("destination.huge_page_bytes", "number|null"),
            ("destination.prefault_seconds", "number"),
            ("destination.bounce_bytes", "number"),
            ("cache.eviction", "string"),
            ("cache.verified_by", "string|null"),
            ("cache.note", "string|null"),
            ("methods", "array"),
            ("methods.0.method", "string"),
            ("methods.0.status", "string"),
            ("methods.0.reason", "string|null"),
            ("methods.0.note", "string|null"),
            ("methods.0.o_direct", "bool|null"),
            ("methods.0.rate_bytes_per_sec_median", "number|null"),
            ("methods.0.rate_bytes_per_sec_min", "number|null"),
            ("methods.0.rate_bytes_per_sec_max", "number|null"),
            ("methods.0.cpu_seconds_per_gib_median", "number|null"),
            ("methods.0.device_read_bytes_median", "number|null"),
            ("methods.0.runs", "array"),
            ("winner", "object|null"),
            ("checksum.mode", "string"),
            ("checksum.block_bytes", "number"),
            ("checksum.blocks", "number"),
            ("checksum.reference", "string|null"),
            ("checksum.digest", "string|null"),
            ("checksum.agree", "bool"),
            ("checksum.direct_matches_buffered", "bool|null"),
            ("checksum.mismatches", "array"),
            ("notes", "array"),
        ],
    );
    for m in r["methods"].as_array().unwrap() {
        assert!(["ok", "flagged", "unsupported"].contains(&m["status"].as_str().unwrap()));
        for run in m["runs"].as_array().unwrap() {
            assert_shape(
                run,
                &[
                    ("round", "number"),
                    ("sequence", "number"),
                    ("bytes_read", "number"),
                    ("seconds", "number"),
                    ("cpu_seconds", "number"),
                    ("device_read_bytes", "number|null"),
                    ("resident_before_bytes", "number|null"),
                    ("cache", "string"),
                    ("digest", "string"),
                    ("digest_blocks", "number"),
                    ("complete", "bool"),
                    ("flag", "string|null"),
                ],
            );
        }
    }
    if !r["winner"].is_null() {
        assert_shape(
            r,
            &[
                ("winner.method", "string"),
                ("winner.rate_bytes_per_sec", "number"),
                ("winner.runner_up", "object|null"),
                ("winner.vs_buffered", "object|null"),
            ],
        );
    }
}

/// The call that proves a cache cold on this kernel: cachestat from Linux
/// 6.5, mincore before.
fn residency_source() -> &'static str {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    if (major, minor) >= (6, 5) {
        "cachestat"
    } else {
        "mincore"
    }
}

/// Every method that ran read the whole file, cold, with the right bytes,
/// and the devices saw at least the file's size go by.
fn assert_all_methods_read_right(r: &Value, size: u64, digest: &str, devices_counted: bool) {
    assert_report_shape(r);
    assert_eq!(r["exit_code"], 0, "{r:#}");
    assert_eq!(r["file"]["size_bytes"], size);
    assert_eq!(r["checksum"]["mode"], "full");
    assert_eq!(r["checksum"]["blocks"], size.div_ceil(4096));
    assert_eq!(r["checksum"]["agree"], true, "{r:#}");
    assert_eq!(r["checksum"]["digest"], digest);
    assert_eq!(r["cache"]["verified_by"], residency_source());
    let rounds = r["parameters"]["rounds"].as_u64().unwrap();
    for m in r["methods"].as_array().unwrap() {
        let name = m["method"].as_str().unwrap();
        if m["status"] == "unsupported" {
            assert_eq!(
                name, "dontcache",
                "only dontcache may be unsupported: {m:#}"
            );
            assert!(m["reason"].as_str().unwrap().contains("RWF_DONTCACHE"));
            continue;
        }
        assert_eq!(m["status"], "ok", "{name}: {m:#}");
        let runs = m["runs"].as_array().unwrap();
        assert_eq!(runs.len() as u64, rounds, "{name}");
        for run in runs {
            assert_eq!(run["bytes_read"], size, "{name}");
            assert_eq!(run["digest"], digest, "{name} read other bytes");
            assert_eq!(run["complete"], true, "{name}");
            // mincore proved the cache cold before every run.
            assert_eq!(run["cache"], "cold", "{name}");
            assert_eq!(run["resident_before_bytes"], 0, "{name}");
            if devices_counted {
                assert!(
                    run["device_read_bytes"].as_u64().unwrap() >= size,
                    "{name}: a cold read moves at least the file through the devices: {run}"
                );
            }
        }
        assert!(m["rate_bytes_per_sec_median"].as_f64().unwrap() > 0.0);
        assert!(m["cpu_seconds_per_gib_median"].as_f64().unwrap() > 0.0);
    }
    assert!(r["winner"].is_object());
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn raid0_btrfs_every_method_reads_the_right_bytes_through_a_ring() {
    if !require_root("read-test on a RAID0 btrfs") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid0),
        ..SandboxRequest::default()
    });
    // Larger than --buffer, and not a multiple of 4 KiB.
    let size = 40 * MIB + 1234;
    let file = sbx.mount_point().join("model.bin");
    let digest = write_file(&file, &random_bytes(size as usize, 7));
    let (_, r, _) = read_test(
        &env,
        &file,
        &["--verify", "full", "--rounds", "2", "--buffer", "32M"],
    );
    assert_all_methods_read_right(&r, size, &digest, true);
    assert_eq!(r["file"]["fs_type"], "btrfs");
    assert_eq!(r["file"]["data_profiles"], serde_json::json!(["raid0"]));
    // The devices counted are the sandbox's three loop devices.
    let mut counted: Vec<String> = r["file"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| format!("/dev/{}", d["name"].as_str().unwrap()))
        .collect();
    counted.sort();
    let mut ours: Vec<String> = sbx
        .devices()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    ours.sort();
    assert_eq!(counted, ours);
    // 4 threads × 8 MiB: the 32 MiB ring has one slot per thread and wraps.
    assert_eq!(r["destination"]["bytes"], 32 * MIB);
    assert_eq!(r["destination"]["slots"], 4);
    assert_eq!(r["parameters"]["in_flight_bytes"], 32 * MIB);
    assert_eq!(r["direct_io"]["used"], true);
    assert_eq!(method(&r, "direct")["o_direct"], true);
    assert_eq!(r["checksum"]["direct_matches_buffered"], true);
    assert_eq!(r["file"]["layout"]["encoded_bytes"], 0);
    // Rounds interleave the methods in a rotating order.
    let first_of_round = |round: u64| -> String {
        r["methods"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| {
                m["runs"].as_array().unwrap().iter().map(move |run| {
                    (
                        run["round"].as_u64(),
                        run["sequence"].as_u64(),
                        m["method"].clone(),
                    )
                })
            })
            .filter(|(rd, _, _)| *rd == Some(round))
            .min_by_key(|(_, s, _)| *s)
            .map(|(_, _, m)| m.as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_ne!(first_of_round(1), first_of_round(2));

    // The text report gives a verdict per cache situation (the 40 MiB
    // file fits in memory: cold and warm by default); one round is no
    // range, so neither a win nor a tie: it cannot tell.
    let (code, text, _) = run(env.cmd().args(["read-test", "--rounds", "1"]).arg(&file));
    assert_eq!(code, 0);
    assert!(
        text.contains("verdict      cold: cannot tell from one round: "),
        "{text}"
    );
    assert!(
        text.contains("verdict      warm: cannot tell from one round: "),
        "{text}"
    );
    assert!(!text.contains(" wins at "), "{text}");
    assert!(!text.contains(": a tie"), "{text}");
    assert!(text.contains("if you cannot know, "), "{text}");
    assert!(text.contains(" GB/s"), "{text}");
    assert!(text.contains("btrfs raid0 on loop"), "{text}");
    assert!(text.contains("direct = buffered"), "{text}");

    // Without --buffer the destination is what the reads need, two chunks
    // per thread (64 MiB for 4 × 8 MiB), here cut to the file's 48 MiB of
    // whole chunks; never the whole gigabyte it used to prefault.
    let (_, r, _) = read_test(&env, &file, &["--rounds", "1", "--methods", "direct"]);
    assert_eq!(r["parameters"]["buffer_bytes"], 64 * MIB);
    assert_eq!(r["destination"]["bytes"], 48 * MIB);
    assert_eq!(r["destination"]["slots"], 6);
    match r["destination"]["backing"].as_str() {
        Some("huge-page-pool") => assert_eq!(r["destination"]["huge_page_bytes"], 48 * MIB),
        Some("transparent-huge-pages") => {}
        other => panic!("backing {other:?}"),
    }
    assert_eq!(r["cache"]["verified_by"], residency_source());
    drop(sbx);
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn ext4_every_method_reads_the_right_bytes_at_odd_sizes() {
    if !require_root("read-test on ext4") {
        return;
    }
    let env = TestEnv::new();
    let sbx = ext4_sandbox(&env);
    let size = 24 * MIB + 511;
    let file = sbx.mount_point().join("model.bin");
    let digest = write_file(&file, &random_bytes(size as usize, 11));
    // Another geometry: 3 threads × 1 MiB in an 8-slot ring.
    let (_, r, _) = read_test(
        &env,
        &file,
        &[
            "--verify",
            "full",
            "--rounds",
            "2",
            "--threads",
            "3",
            "--chunk",
            "1M",
            "--buffer",
            "8M",
        ],
    );
    assert_all_methods_read_right(&r, size, &digest, true);
    assert_eq!(r["file"]["fs_type"], "ext4");
    assert_eq!(r["direct_io"]["align_source"], "statx");
    assert_eq!(r["destination"]["slots"], 8);
    assert!(
        r["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("only 3.00MiB in flight")),
        "{r:#}"
    );

    // Sizes around the alignment: the tail is read right by every method.
    for (i, size) in [1u64, 100, 511, 4095, 4097, MIB + 1]
        .into_iter()
        .enumerate()
    {
        let f = sbx.mount_point().join(format!("odd-{i}"));
        let digest = write_file(&f, &random_bytes(size as usize, 100 + i as u64));
        let (_, r, _) = read_test(&env, &f, &["--verify", "full", "--rounds", "1"]);
        // Tiny files: metadata reads are within the slack, so only the
        // bytes and the cold cache are checked, not the device minimum.
        assert_all_methods_read_right(&r, size, &digest, false);
    }
}

#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_warm_cache_is_caught_by_the_device_counters() {
    if !require_root("read-test with a warm cache") {
        return;
    }
    let env = TestEnv::new();
    let sbx = ext4_sandbox(&env);
    let size = 32 * MIB;
    let file = sbx.mount_point().join("model.bin");
    write_file(&file, &random_bytes(size as usize, 3));
    let warm_up = || drop(fs::read(&file).unwrap());

    // The test hook skips the eviction and its mincore check: the buffered
    // and mmap figures come from the cache, and the devices say so.
    warm_up();
    let mut c = env.cmd();
    c.env(btrfs_lab::hooks::Switch::ReadTestSkipEviction.env(), "1")
        .args([
            "read-test",
            "--json",
            "--rounds",
            "1",
            "--methods",
            "buffered,mmap,direct",
        ])
        .arg(&file);
    let (code, stdout, stderr) = run(&mut c);
    assert_eq!(code, 0, "{stderr}");
    let r = json(&stdout);
    assert_report_shape(&r);
    assert_eq!(r["cache"]["eviction"], "skipped");
    assert!(r["cache"]["verified_by"].is_null());
    for name in ["buffered", "mmap"] {
        let m = method(&r, name);
        assert_eq!(m["status"], "flagged", "{name}: {m:#}");
        assert!(
            m["rate_bytes_per_sec_median"].is_null(),
            "not reported as a result"
        );
        let why = m["reason"].as_str().unwrap();
        assert!(why.contains("devices moved only"), "{why}");
        assert_eq!(m["runs"][0]["cache"], "unverified");
        assert!(m["runs"][0]["resident_before_bytes"].is_null());
    }
    // O_DIRECT does not read from the cache: its figure stands.
    assert_eq!(method(&r, "direct")["status"], "ok", "{r:#}");
    assert_eq!(r["winner"]["method"], "direct");
    assert!(r["notes"].as_array().unwrap().iter().any(|n| {
        n.as_str()
            .unwrap()
            .contains(btrfs_lab::hooks::Switch::ReadTestSkipEviction.env())
    }));
    // The text report says why.
    warm_up();
    let (_, text, _) = run(env
        .cmd()
        .env(btrfs_lab::hooks::Switch::ReadTestSkipEviction.env(), "1")
        .args(["read-test", "--rounds", "1", "--methods", "buffered"])
        .arg(&file));
    assert!(text.contains("flagged"), "{text}");
    assert!(text.contains("devices moved only"), "{text}");
    assert!(text.contains("NOT evicted"), "{text}");

    // Without the hook the same warm file is evicted and proven cold.
    warm_up();
    let (_, r, _) = read_test(
        &env,
        &file,
        &["--rounds", "1", "--methods", "buffered,mmap"],
    );
    for name in ["buffered", "mmap"] {
        let m = method(&r, name);
        assert_eq!(m["status"], "ok", "{m:#}");
        assert_eq!(m["runs"][0]["cache"], "cold");
        assert_eq!(m["runs"][0]["resident_before_bytes"], 0);
    }
}

/// Pages another process has mapped cannot be evicted: mincore sees them,
/// the run is marked warm and its method gets no figure.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn pages_that_cannot_be_evicted_flag_the_run() {
    if !require_root("read-test with a mapped file") {
        return;
    }
    let env = TestEnv::new();
    let sbx = ext4_sandbox(&env);
    let size = 8 * MIB;
    let file = sbx.mount_point().join("mapped.bin");
    write_file(&file, &random_bytes(size as usize, 8));
    let f = fs::File::open(&file).unwrap();
    let map = btrfs_lab::sys::kernel::memio::FileMap::new(&f, size as usize).unwrap();
    map.touch_pages(0, size as usize, 4096).unwrap();
    let (_, r, _) = read_test(&env, &file, &["--rounds", "1", "--methods", "buffered"]);
    drop(map);
    let m = method(&r, "buffered");
    assert_eq!(m["status"], "flagged", "{m:#}");
    assert_eq!(m["runs"][0]["cache"], "warm");
    assert!(m["runs"][0]["resident_before_bytes"].as_u64().unwrap() > 0);
    assert!(
        m["reason"]
            .as_str()
            .unwrap()
            .contains("still in the page cache"),
        "{m:#}"
    );
    assert!(r["winner"].is_null());
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn empty_file_reports_nothing_to_measure() {
    if !require_root("read-test on an empty file") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let file = sbx.mount_point().join("empty");
    fs::File::create(&file).unwrap();
    let (code, r, _) = read_test(&env, &file, &["--rounds", "1"]);
    assert_eq!(code, 0);
    assert_report_shape(&r);
    assert!(r["summary"].as_str().unwrap().contains("empty"), "{r:#}");
    assert!(r["winner"].is_null());
    assert_eq!(r["checksum"]["blocks"], 0);
    assert_eq!(r["checksum"]["agree"], true);
    for m in r["methods"].as_array().unwrap() {
        assert!(m["rate_bytes_per_sec_median"].is_null());
        for run in m["runs"].as_array().unwrap() {
            assert_eq!(run["bytes_read"], 0);
            assert_eq!(run["complete"], true);
        }
    }
    let (code, text, _) = run(env.cmd().args(["read-test", "--rounds", "1"]).arg(&file));
    assert_eq!(code, 0);
    assert!(text.contains("The file is empty"), "{text}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn memory_filesystems_fall_back_and_say_so() {
    if !require_root("read-test on tmpfs and ramfs") {
        return;
    }
    let mut env = TestEnv::new();
    let size = 8 * MIB + 100;
    let bytes = random_bytes(size as usize, 5);
    let digest = digest_of(VerifyMode::Full, &bytes).hex();

    // tmpfs accepts O_DIRECT (Linux 6.6+) but serves it from memory.
    let tmp = env.tmpfs("tmp");
    let file = tmp.join("model.bin");
    write_file(&file, &bytes);
    let (_, r, _) = read_test(&env, &file, &["--verify", "full", "--rounds", "1"]);
    assert_report_shape(&r);
    assert_eq!(r["file"]["fs_type"], "tmpfs");
    assert_eq!(r["file"]["memory_backed"], true);
    assert_eq!(r["file"]["devices"], serde_json::json!([]));
    assert_eq!(r["direct_io"]["used"], false);
    let note = r["direct_io"]["note"].as_str().unwrap();
    assert!(note.contains("not meaningful on tmpfs"), "{note}");
    assert_eq!(r["cache"]["eviction"], "none");
    assert!(
        r["summary"].as_str().unwrap().contains("from memory"),
        "{r:#}"
    );
    for name in ["direct", "direct-copy"] {
        let m = method(&r, name);
        assert_eq!(m["status"], "ok");
        assert_eq!(m["o_direct"], false);
        assert!(
            m["note"]
                .as_str()
                .unwrap()
                .contains("through the page cache")
        );
        assert_eq!(m["runs"][0]["cache"], "memory");
        assert_eq!(m["runs"][0]["digest"], digest.as_str());
    }
    assert_eq!(r["checksum"]["agree"], true);
    let (_, text, _) = run(env.cmd().args(["read-test", "--rounds", "1"]).arg(&file));
    assert!(text.contains("ok, no O_DIRECT"), "{text}");
    assert!(text.contains("All from memory"), "{text}");

    // ramfs refuses O_DIRECT at open (EINVAL): reported, then the fallback.
    let ram = env.path().join("ram");
    fs::create_dir(&ram).unwrap();
    nix::mount::mount(
        Some("ramfs"),
        &ram,
        Some("ramfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .unwrap();
    env.track_mount(ram.clone());
    let file = ram.join("model.bin");
    write_file(&file, &bytes);
    let (code, r, _) = read_test(
        &env,
        &file,
        &[
            "--verify",
            "full",
            "--rounds",
            "1",
            "--methods",
            "direct,buffered",
        ],
    );
    assert_eq!(code, 0);
    let note = r["direct_io"]["note"].as_str().unwrap();
    assert!(note.starts_with("O_DIRECT unsupported here"), "{note}");
    assert!(note.contains("EINVAL"), "{note}");
    assert_eq!(method(&r, "direct")["runs"][0]["digest"], digest.as_str());
    assert_eq!(r["checksum"]["direct_matches_buffered"], true);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn compressed_extents_and_holes_are_detected_and_explained() {
    if !require_root("read-test on compressed btrfs extents") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.mount_point().join("compressed");
    fs::create_dir(&dir).unwrap();
    let (code, _, stderr) = run(Command::new("chattr").arg("+c").arg(&dir));
    assert_eq!(code, 0, "{stderr}");
    let file = dir.join("model.bin");
    let text: Vec<u8> = b"tensor weights, very compressible. "
        .iter()
        .copied()
        .cycle()
        .take(16 << 20)
        .collect();
    let digest = write_file(&file, &text);
    let (_, r, _) = read_test(
        &env,
        &file,
        &[
            "--verify",
            "full",
            "--rounds",
            "1",
            "--methods",
            "direct,buffered",
        ],
    );
    let encoded = r["file"]["layout"]["encoded_bytes"].as_u64().unwrap();
    assert!(encoded > 8 << 20, "{r:#}");
    assert!(
        r["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("compressed extents")),
        "{r:#}"
    );
    // Fewer device bytes than file bytes, explained by compression: no flag.
    for name in ["direct", "buffered"] {
        let m = method(&r, name);
        assert_eq!(m["status"], "ok", "{m:#}");
        assert!(m["runs"][0]["device_read_bytes"].as_u64().unwrap() < 16 << 20);
        assert_eq!(m["runs"][0]["digest"], digest.as_str());
    }

    // A sparse file: the holes read as zeros without device I/O.
    let sparse = sbx.mount_point().join("sparse.bin");
    let mut bytes = vec![0u8; 16 << 20];
    bytes[..MIB as usize].copy_from_slice(&random_bytes(MIB as usize, 9));
    {
        let mut f = fs::File::create(&sparse).unwrap();
        f.write_all(&bytes[..MIB as usize]).unwrap();
        f.set_len(16 << 20).unwrap();
        f.sync_all().unwrap();
    }
    let (_, r, _) = read_test(&env, &sparse, &["--verify", "full", "--rounds", "1"]);
    assert!(
        r["file"]["layout"]["hole_bytes"].as_u64().unwrap() >= 14 << 20,
        "{r:#}"
    );
    assert_eq!(
        r["checksum"]["digest"],
        digest_of(VerifyMode::Full, &bytes).hex()
    );
    for m in r["methods"].as_array().unwrap() {
        assert_ne!(
            m["status"], "flagged",
            "holes explain the missing device bytes: {m:#}"
        );
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn drop_caches_as_root() {
    if !require_root("read-test --drop-caches") {
        return;
    }
    let env = TestEnv::new();
    let file = env.path().join("f.bin");
    let digest = write_file(&file, &random_bytes(3 * MIB as usize, 1));
    let (_, r, _) = read_test(
        &env,
        &file,
        &[
            "--drop-caches",
            "--rounds",
            "1",
            "--methods",
            "buffered",
            "--verify",
            "full",
        ],
    );
    assert_eq!(r["cache"]["eviction"], "drop-caches");
    assert_eq!(r["parameters"]["drop_caches"], true);
    let m = method(&r, "buffered");
    assert_eq!(m["runs"][0]["cache"], "cold");
    assert_eq!(m["runs"][0]["digest"], digest.as_str());
}

fn one_line_error(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        !lines.is_empty() && lines.len() <= 2,
        "one error line and at most a hint: {stderr}"
    );
    assert!(lines[0].starts_with("btrfs-lab: error: "), "{stderr}");
    if let Some(h) = lines.get(1) {
        assert!(h.starts_with("hint: "), "{stderr}");
    }
    lines[0]
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn bad_input_gets_one_clear_line() {
    if !require_root("read-test bad input") {
        return;
    }
    let env = TestEnv::new();
    let check = |args: &[&str], path: Option<&Path>, status: i32, wanted: &str| {
        let mut c = env.cmd();
        c.arg("read-test").args(args);
        if let Some(p) = path {
            c.arg(p);
        }
        let (code, stdout, stderr) = run(&mut c);
        assert_eq!(code, status, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: nothing on stdout: {stdout}");
        let line = one_line_error(&stderr);
        assert!(line.contains(wanted), "{args:?}: {line}");
    };
    let missing = env.path().join("missing.bin");
    check(&[], Some(&missing), 1, "no such file or directory");
    check(&["--json"], Some(&missing), 1, "no such file or directory");
    check(&[], Some(env.path()), 1, "is a directory, not a file");
    let fifo = env.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    check(&[], Some(&fifo), 1, "is not a regular file");
    let file = env.path().join("f.bin");
    write_file(&file, &random_bytes(4096, 2));
    check(
        &["--methods", "direct,fast"],
        Some(&file),
        2,
        "invalid value 'fast'",
    );
    check(&["--threads", "0"], Some(&file), 2, "--threads");
    check(&["--threads", "1,0,4"], Some(&file), 2, "--threads");
    check(
        &["--cache", "lukewarm"],
        Some(&file),
        2,
        "invalid value 'lukewarm'",
    );
    // A warm cache cannot hold a file larger than memory (a sparse 4 TiB
    // file: refused before anything is read).
    let huge = env.path().join("huge.bin");
    fs::File::create(&huge).unwrap().set_len(4 << 40).unwrap();
    check(
        &["--cache", "warm"],
        Some(&huge),
        1,
        "does not fit in the available memory",
    );
    check(
        &["--cache", "both", "--json"],
        Some(&huge),
        1,
        "a warm cache cannot hold it",
    );
    check(&["--chunk", "4097"], Some(&file), 2, "--chunk");
    check(
        &["--buffer", "1M"],
        Some(&file),
        2,
        "every thread needs a slot",
    );
    check(&["--rounds", "0"], Some(&file), 2, "--rounds");
    check(&[], None, 2, "required");

    // No read permission, as an unprivileged user.
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    let as_nobody =
        |args: &[&str], path: &Path| run(env.as_nobody(&[]).arg("read-test").args(args).arg(path));
    let (code, stdout, stderr) = as_nobody(&[], &file);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    let line = one_line_error(&stderr);
    assert!(line.contains("cannot read"), "{line}");
    assert!(line.contains("permission denied"), "{line}");
    // --drop-caches needs root, and says so before reading anything.
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, stderr) = as_nobody(&["--drop-caches"], &file);
    assert_eq!(code, 1, "{stderr}");
    assert!(one_line_error(&stderr).contains("--drop-caches needs root"));
    // Readable by nobody: it works without root, but mincore does not tell
    // an unprivileged reader about someone else's file, and it says so.
    let (code, stdout, stderr) =
        as_nobody(&["--json", "--rounds", "1", "--methods", "buffered"], &file);
    assert_eq!(code, 0, "{stderr}");
    let r = json(&stdout);
    assert_eq!(r["methods"][0]["status"], "ok", "{r:#}");
    assert_eq!(r["methods"][0]["runs"][0]["cache"], "unverified");
    assert!(r["cache"]["verified_by"].is_null());
    assert!(
        r["cache"]["note"].as_str().unwrap().contains("mincore"),
        "{r:#}"
    );
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn interrupt_stops_cleanly() {
    if !require_root("read-test interrupted") {
        return;
    }
    let env = TestEnv::new();
    let file: PathBuf = env.path().join("big.bin");
    write_file(&file, &random_bytes(64 * MIB as usize, 4));
    for signal in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        let child = env
            .cmd()
            .args(["read-test", "--json", "--rounds", "50"])
            .arg(&file)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        thread::sleep(Duration::from_millis(700));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{signal}: {stderr}");
        assert!(stderr.contains("interrupted"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

/// Runs `read-test --methods mmap` on `file` paused (test hook) after its
/// first mapped window, cuts the file to `cut_to` bytes, lets it go on and
/// returns (status, stdout, stderr after the pause, signal that ended it).
#[cfg(feature = "test-hooks")]
fn mmap_run_with_truncate(
    env: &TestEnv,
    file: &Path,
    cut_to: u64,
) -> (Option<i32>, String, String, Option<i32>) {
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::process::ExitStatusExt;
    let go = env.path().join(format!("go-{cut_to}"));
    let mut child = env
        .cmd()
        .env(
            btrfs_lab::hooks::PAUSE_ENV,
            btrfs_lab::hooks::Pause::ReadTestMmap.until(&go),
        )
        .args(["read-test", "--json", "--rounds", "1", "--methods", "mmap"])
        .arg(file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("read-test ended before the hook paused it: {seen}");
        }
        seen.push_str(&line);
        if line.contains(&btrfs_lab::hooks::Pause::ReadTestMmap.message()) {
            break;
        }
    }
    fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(cut_to)
        .unwrap();
    fs::write(&go, b"").unwrap();
    // What it said after the pause.
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
    (status.code(), stdout, rest, status.signal())
}

/// A file cut short while the mmap method reads it: the process is not
/// killed by SIGBUS, it says the file shrank, as the other methods do.
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn mmap_reports_a_file_that_shrinks_during_the_run() {
    if !require_root("read-test mmap on a shrinking file") {
        return;
    }
    let env = TestEnv::new();
    let size = 16 * MIB;
    // Cut at a page boundary a window ahead (the next fault is beyond the
    // end: SIGBUS before), and inside the last page (no fault: zeros).
    for cut_to in [3 * MIB + 5, size - 100] {
        let file = env.path().join(format!("shrinks-{cut_to}.bin"));
        write_file(&file, &random_bytes(size as usize, 9));
        let (code, stdout, stderr, signal) = mmap_run_with_truncate(&env, &file, cut_to);
        assert_eq!(signal, None, "killed by signal {signal:?}: {stderr}");
        assert_eq!(code, Some(1), "cut to {cut_to}: {stderr}");
        let line = one_line_error(&stderr);
        assert!(line.contains("shrank while read-test read it"), "{stderr}");
        assert!(
            line.contains(&format!("ended at byte {cut_to}")),
            "{stderr}"
        );
        assert!(stdout.is_empty(), "{stdout}");
    }
}

/// Root reading a file the invoking user does not own (through a link, say)
/// says so: a note and `read_as_root_for_another_user`.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn root_reading_another_users_file_says_so() {
    if !require_root("read-test of another user's file") {
        return;
    }
    let env = TestEnv::new();
    let file = env.path().join("secret.bin");
    write_file(&file, &random_bytes(MIB as usize, 12));
    let link = env.path().join("link.bin");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let run_as = |sudo_uid: Option<&str>| {
        let mut c = env.cmd();
        c.args([
            "read-test",
            "--json",
            "--rounds",
            "1",
            "--methods",
            "buffered",
        ])
        .arg(&link)
        .env_remove("SUDO_UID");
        if let Some(u) = sudo_uid {
            c.env("SUDO_UID", u);
        }
        let (code, stdout, stderr) = run(&mut c);
        assert_eq!(code, 0, "{stderr}");
        json(&stdout)
    };
    let note = |r: &Value| {
        r["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .find(|n| n.contains("not to the invoking user"))
            .map(str::to_owned)
    };
    // root's own file, run by root: nothing to say.
    let r = run_as(None);
    assert_eq!(r["file"]["owner_uid"], 0);
    assert_eq!(r["file"]["read_as_root_for_another_user"], false);
    assert_eq!(note(&r), None);
    // sudo from uid 65534: root's file is not theirs.
    let r = run_as(Some("65534"));
    assert_eq!(r["file"]["read_as_root_for_another_user"], true);
    let n = note(&r).expect("a note");
    assert!(n.contains("belongs to uid 0"), "{n}");
    assert!(n.contains("(uid 65534, from SUDO_UID)"), "{n}");
    // The same user's file is fine.
    nix::unistd::chown(&file, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    let r = run_as(Some("65534"));
    assert_eq!(r["file"]["owner_uid"], 65534);
    assert_eq!(r["file"]["read_as_root_for_another_user"], false);
    // A file of uid 65534 read by root without sudo: flagged.
    let r = run_as(None);
    assert_eq!(r["file"]["read_as_root_for_another_user"], true);
    assert!(note(&r).unwrap().contains("(uid 0)"), "{r:#}");
}

/// The loader question, warm and cold: with the file fitting in memory the
/// default measures both; every warm run starts with mincore finding the
/// whole file resident, and the page-cache readers are much faster warm.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn warm_runs_are_verified_resident_and_cached_readers_gain() {
    if !require_root("read-test warm and cold") {
        return;
    }
    let env = TestEnv::new();
    let sbx = ext4_sandbox(&env);
    let size = 64 * MIB;
    let file = sbx.mount_point().join("model.bin");
    let bytes = random_bytes(size as usize, 17);
    write_file(&file, &bytes);
    // Sampled (the default): a full checksum would make every method
    // CPU-bound in a debug build and hide what the cache changes.
    let digest = digest_of(VerifyMode::Sampled, &bytes).hex();
    // No --cache: the default.
    let mut c = env.cmd();
    c.args([
        "read-test",
        "--json",
        "--rounds",
        "3",
        "--methods",
        "direct,buffered,mmap",
    ])
    .arg(&file);
    let (code, stdout, stderr) = run(&mut c);
    assert_eq!(code, 0, "{stderr}");
    let r = json(&stdout);
    assert_report_shape(&r);
    assert_eq!(r["parameters"]["cache"], "both", "{r:#}");
    assert!(
        r["parameters"]["cache_default_reason"]
            .as_str()
            .unwrap()
            .contains("fits in the available memory")
    );
    assert_eq!(r["checksum"]["agree"], true, "{r:#}");
    let warm = r["warm_methods"].as_array().unwrap();
    assert_eq!(warm.len(), 3, "{r:#}");
    let median = |list: &Value, name: &str| -> f64 {
        let m = list
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["method"] == name)
            .unwrap();
        assert_eq!(m["status"], "ok", "{m:#}");
        m["rate_bytes_per_sec_median"].as_f64().unwrap()
    };
    for m in warm {
        let name = m["method"].as_str().unwrap();
        assert_eq!(m["cache"], "warm");
        assert_eq!(m["status"], "ok", "{name}: {m:#}");
        let runs = m["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 3, "{name}");
        for run in runs {
            // Verified, not assumed: mincore found every page resident.
            assert_eq!(run["cache"], "resident", "{name}: {run}");
            assert_eq!(run["resident_before_bytes"], size, "{name}: {run}");
            assert_eq!(run["digest"], digest.as_str(), "{name}");
            if name != "direct" {
                // The cache served it: the devices moved almost nothing.
                assert!(
                    run["device_read_bytes"].as_u64().unwrap() < size / 8,
                    "{name}: {run}"
                );
            }
        }
    }
    for m in r["methods"].as_array().unwrap() {
        assert_eq!(m["cache"], "cold");
        for run in m["runs"].as_array().unwrap() {
            assert_eq!(run["cache"], "cold");
            assert_eq!(run["resident_before_bytes"], 0);
        }
    }
    // What the cache gained, said, not asserted: a rate ratio is a timed
    // assertion (it failed on a loaded machine); that the cache served the
    // warm runs is checked above from the devices' counters.
    for name in ["buffered", "mmap"] {
        let ratio = median(&r["warm_methods"], name) / median(&r["methods"], name);
        eprintln!("{name}: warm/cold = {ratio:.2}");
    }
    // A verdict per situation, and the hedge between them.
    let verdicts = r["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2);
    assert_eq!(verdicts[0]["cache"], "cold");
    assert_eq!(verdicts[1]["cache"], "warm");
    let advice = r["advice"].as_str().unwrap();
    assert!(advice.starts_with("cold: use "), "{advice}");
    assert!(advice.contains("; warm: use "), "{advice}");
    assert!(advice.contains("if you cannot know, "), "{advice}");
    assert!(r["hedge"].is_object(), "{r:#}");
    // The typed report reads back.
    let back: btrfs_lab::readtest::ReadTestReport = serde_json::from_str(&stdout).unwrap();
    assert_eq!(back.warm_methods.len(), 3);
}

/// `--threads 1,2,4`: three rows per threaded method, the knee named, the
/// method list at the knee.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_thread_sweep_reports_a_row_per_count_and_names_the_knee() {
    if !require_root("read-test thread sweep") {
        return;
    }
    let env = TestEnv::new();
    let sbx = ext4_sandbox(&env);
    let size = 16 * MIB + 4097;
    let file = sbx.mount_point().join("model.bin");
    let digest = write_file(&file, &random_bytes(size as usize, 23));
    let (_, r, _) = read_test(
        &env,
        &file,
        &[
            "--threads",
            "4,1,2",
            "--rounds",
            "2",
            "--methods",
            "direct,direct-copy,buffered",
            "--verify",
            "full",
        ],
    );
    assert_report_shape(&r);
    assert_eq!(r["checksum"]["agree"], true, "{r:#}");
    assert_eq!(r["checksum"]["digest"], digest.as_str());
    assert_eq!(
        r["parameters"]["thread_counts"],
        serde_json::json!([1, 2, 4])
    );
    assert_eq!(r["parameters"]["threads"], 4);
    let sweep = r["sweep"].as_array().unwrap();
    for name in ["direct", "direct-copy"] {
        let rows: Vec<&Value> = sweep.iter().filter(|m| m["method"] == name).collect();
        let counts: Vec<u64> = rows
            .iter()
            .map(|m| m["threads"].as_u64().unwrap())
            .collect();
        assert_eq!(counts, [1, 2, 4], "{name}: {r:#}");
        for row in &rows {
            assert_eq!(row["status"], "ok", "{row:#}");
            assert_eq!(row["runs"].as_array().unwrap().len(), 2);
            for run in row["runs"].as_array().unwrap() {
                assert_eq!(run["bytes_read"], size);
                assert_eq!(run["digest"], digest.as_str());
            }
        }
        let knee = r["knees"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["method"] == name)
            .unwrap_or_else(|| panic!("no knee for {name}: {r:#}"));
        let k = knee["threads"].as_u64().unwrap();
        // The knee is the fewest threads within 5% of the best median.
        let best = rows
            .iter()
            .map(|m| m["rate_bytes_per_sec_median"].as_f64().unwrap())
            .fold(0.0, f64::max);
        let fewest = rows
            .iter()
            .find(|m| m["rate_bytes_per_sec_median"].as_f64().unwrap() >= 0.95 * best)
            .unwrap()["threads"]
            .as_u64()
            .unwrap();
        assert_eq!(k, fewest, "{r:#}");
        assert_eq!(
            method(&r, name)["threads"],
            k,
            "the method list holds the knee"
        );
    }
    assert!(sweep.iter().all(|m| m["method"] != "buffered"));
    assert!(method(&r, "buffered")["threads"].is_null());
    // The text table shows the sweep with the knee.
    let (code, text, _) = run(env
        .cmd()
        .args([
            "read-test",
            "--cache",
            "cold",
            "--rounds",
            "1",
            "--methods",
            "direct",
        ])
        .args(["--threads", "1,2,4"])
        .arg(&file));
    assert_eq!(code, 0);
    assert!(text.contains("thread sweep"), "{text}");
    for row in ["cold   direct×1", "cold   direct×2", "cold   direct×4"] {
        assert!(text.contains(row), "{row}: {text}");
    }
    assert!(text.contains("← knee"), "{text}");
    // One method measured: no winner wording, and the sweep's result is the
    // headline, said once (not "nothing to compare it with").
    assert!(!text.contains("wins"), "{text}");
    assert!(!text.contains("nothing to compare"), "{text}");
    let headline = text.lines().nth(1).unwrap_or_default();
    assert!(
        headline.starts_with("Cold: direct with ")
            && headline.contains("the fewest threads within 5% of the thread sweep's best"),
        "{text}"
    );
    assert_eq!(
        text.matches("the fewest threads within 5%").count(),
        1,
        "{text}"
    );
}

/// Runs `f` as uid/gid 65534 in a thread of its own.
fn as_nobody_thread<F: FnOnce() + Send + 'static>(f: F) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let g = rustix::process::Gid::from_raw(65534);
        let u = rustix::process::Uid::from_raw(65534);
        rustix::thread::set_thread_res_gid(g, g, g).unwrap();
        rustix::thread::set_thread_res_uid(u, u, u).unwrap();
        f()
    })
}

/// A user's directory (uid 65534, reachable by them) with a file of theirs
/// (1 MiB), next to a root-only file of another size (3 MiB, 0600) in a
/// root-only directory, on a sandbox btrfs.
fn user_file_and_secret(env: &TestEnv, mnt: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    for a in mnt.ancestors() {
        fs::set_permissions(a, fs::Permissions::from_mode(0o755)).unwrap();
        if a == env.path() {
            break;
        }
    }
    let secret_dir = mnt.join("secret");
    fs::create_dir(&secret_dir).unwrap();
    let secret = secret_dir.join("root-only.bin");
    write_file(&secret, &random_bytes(3 * MIB as usize, 91));
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(&secret_dir, fs::Permissions::from_mode(0o711)).unwrap();
    let home = mnt.join("homes/u");
    fs::create_dir_all(&home).unwrap();
    fs::set_permissions(mnt.join("homes"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    (home, secret)
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_users_link_to_a_root_only_file_is_refused() {
    if !require_root("read-test on a user's link") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let (home, secret) = user_file_and_secret(&env, sbx.mount_point());
    let link = home.join("model.bin");
    as_nobody_thread({
        let (secret, link) = (secret.clone(), link.clone());
        move || std::os::unix::fs::symlink(&secret, &link).unwrap()
    })
    .join()
    .unwrap();
    // A user's directory link on the way is refused the same way.
    let dirlink = home.join("models");
    as_nobody_thread({
        let (to, dirlink) = (secret.parent().unwrap().to_path_buf(), dirlink.clone());
        move || std::os::unix::fs::symlink(&to, &dirlink).unwrap()
    })
    .join()
    .unwrap();
    for path in [link.clone(), dirlink.join("root-only.bin")] {
        for json_flag in [false, true] {
            let mut c = env.cmd();
            c.args(json_flag.then_some("--json"))
                .args(["read-test", "--rounds", "1", "--methods", "buffered"])
                .arg(&path);
            let (code, stdout, stderr) = run(&mut c);
            assert_eq!(code, 1, "{path:?}: {stdout}{stderr}");
            assert!(stdout.is_empty(), "{stdout}");
            let line = one_line_error(&stderr);
            assert!(
                line.contains("is a symbolic link owned by uid 65534")
                    && line.contains("follows only root's links"),
                "{line}"
            );
        }
    }
    // Root's own link is followed.
    let rootlink = sbx.mount_point().join("rootlink.bin");
    std::os::unix::fs::symlink(&secret, &rootlink).unwrap();
    let (code, stdout, stderr) = run(env
        .cmd()
        .args([
            "--json",
            "read-test",
            "--rounds",
            "1",
            "--methods",
            "buffered",
        ])
        .arg(&rootlink));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(json(&stdout)["file"]["size_bytes"], 3 * MIB);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_swap_race_on_the_file_never_reads_a_root_only_file() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    if !require_root("read-test against a swap race") {
        return;
    }
    const RUNS: usize = 120;
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let (home, secret) = user_file_and_secret(&env, sbx.mount_point());
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
                for n in ["f", "l"] {
                    let _ = fs::remove_file(home.join(n));
                }
                write_file(&home.join("f"), &random_bytes(MIB as usize, run_no as u64));
                std::os::unix::fs::symlink(&secret, home.join("l")).unwrap();
                let dir = fs::File::open(&home).unwrap();
                ready.store(true, Ordering::SeqCst);
                for _ in 0..5_000_000u32 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    rustix::fs::renameat_with(
                        &dir,
                        "f",
                        &dir,
                        "l",
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        while !ready.load(Ordering::SeqCst) {
            assert!(!attacker.is_finished(), "run {run_no}: no attacker");
            std::thread::yield_now();
        }
        let (code, stdout, stderr) = run(env
            .cmd()
            .args([
                "--json",
                "read-test",
                "--rounds",
                "1",
                "--methods",
                "buffered",
            ])
            .arg(home.join("f")));
        stop.store(true, Ordering::SeqCst);
        attacker.join().unwrap();
        match code {
            0 => {
                let r = json(&stdout);
                assert_eq!(
                    r["file"]["size_bytes"], MIB,
                    "run {run_no}: root read the root-only file through the user's link"
                );
                assert_eq!(r["file"]["owner_uid"], 65534, "run {run_no}");
                done += 1;
            }
            1 => {
                assert!(stdout.is_empty(), "{stdout}");
                one_line_error(&stderr);
                refused += 1;
            }
            _ => panic!("run {run_no}: exit {code}: {stderr}"),
        }
    }
    eprintln!(
        "read-test swaps: {RUNS} runs, {done} read the user's file, {refused} refused, {} swaps",
        swaps.load(Ordering::Relaxed)
    );
    assert!(swaps.load(Ordering::Relaxed) > RUNS as u64);
    assert!(done > 0 && refused > 0, "{done} done, {refused} refused");
}

/// A file whose name is not UTF-8 and carries terminal escapes: `--json`
/// reports it (lossy `path`, exact `path_bytes`), the text escapes it.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_hostile_file_name_is_reported_safely() {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    if !require_root("read-test of a hostile name") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let name = std::ffi::OsString::from_vec(b"m\xff\x1b[2J\x1b]0;t\x07.bin".to_vec());
    let file = sbx.mount_point().join(&name);
    write_file(&file, &random_bytes(MIB as usize, 3));
    let (code, stdout, stderr) = run(env
        .cmd()
        .args([
            "--json",
            "read-test",
            "--rounds",
            "1",
            "--methods",
            "buffered",
        ])
        .arg(&file));
    assert_eq!(code, 0, "{stderr}");
    let r = json(&stdout);
    assert_eq!(r["file"]["path"], file.to_string_lossy().as_ref());
    let bytes: Vec<u8> = r["file"]["path_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(bytes, file.as_os_str().as_bytes());
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["read-test", "--rounds", "1", "--methods", "buffered"])
        .arg(&file));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stdout.contains('\x1b') && !stdout.contains('\x07'),
        "{stdout:?}"
    );
    assert!(
        stdout.contains("m\u{fffd}\\e[2J\\e]0;t\\x07.bin"),
        "{stdout}"
    );
}

/// `btrfs ARGS MOUNT` (btrfs-progs): its exit status and output.
fn btrfs_progs(args: &[&str], m: &Path) -> (i32, String) {
    let out = Command::new("btrfs").args(args).arg(m).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_file_written_before_a_device_add_is_said_to_be_striped_narrow() {
    if !require_root("read-test's stripe widths after a device add") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid0),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let file = m.join("model.bin");
    let size = 64 * MIB;
    write_file(&file, &random_bytes(size as usize, 11));
    let args = ["--rounds", "1", "--methods", "direct"];
    let balance_named = |r: &Value| {
        r["notes"].as_array().unwrap().iter().any(|n| {
            n.as_str()
                .unwrap()
                .contains(&format!("`btrfs-lab balance {}`", m.display()))
        })
    };
    // Written on three of three: full width, nothing to say.
    let (_, r, _) = read_test(&env, &file, &args);
    let w = &r["file"]["stripe_widths"];
    assert_eq!(w["profile"], "raid0", "{r:#}");
    assert_eq!(w["full_width"], 3);
    assert_eq!(w["narrow_bytes"], 0);
    assert!(!balance_named(&r), "{:#}", r["notes"]);

    let new = env.spare_device("fourth", 1 << 30);
    let (code, out) = btrfs_progs(&["device", "add", "-f", new.to_str().unwrap()], &m);
    assert_eq!(code, 0, "{out}");
    let (_, r, _) = read_test(&env, &file, &args);
    let w = &r["file"]["stripe_widths"];
    assert_eq!(w["full_width"], 4, "{r:#}");
    assert_eq!(w["narrow_bytes"], size, "{w:#}");
    assert_eq!(
        w["bytes_by_width"],
        serde_json::json!([{ "stripes": 3, "bytes": size }])
    );
    assert_eq!(w["read_stripes"], 3.0);
    assert_eq!(w["full_read_stripes"], 4);
    assert!(balance_named(&r), "{:#}", r["notes"]);
    // The text says it too.
    let (code, text, stderr) = run(env
        .cmd()
        .args(["read-test", "--cache", "cold"])
        .args(args)
        .arg(&file));
    assert!(code == 0 || code == 3, "{stderr}");
    // Notes are wrapped to the terminal: compared word by word.
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("striped over fewer devices than the array has")
            && words.contains(&format!("`btrfs-lab balance {}`", m.display())),
        "{text}"
    );

    // The command it names, run: full width again.
    let (code, out, err) = run(env.cmd().args(["balance", "--yes"]).arg(&m));
    assert_eq!(code, 0, "{out}{err}");
    let (_, r, _) = read_test(&env, &file, &args);
    let w = &r["file"]["stripe_widths"];
    assert_eq!(w["narrow_bytes"], 0, "{w:#}");
    assert_eq!(
        w["bytes_by_width"],
        serde_json::json!([{ "stripes": 4, "bytes": size }])
    );
    assert!(!balance_named(&r), "{:#}", r["notes"]);
}
