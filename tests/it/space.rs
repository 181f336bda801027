//! `df`, `usage` and `show` against btrfs-progs on sandboxes in many states.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::{FsKind, Sandbox, SandboxRequest};
use serde_json::Value;

use crate::common::{TestEnv, assert_shape, json, require_root, run};

fn btrfs(args: &[&str], mount: &Path) -> String {
    let out = Command::new("btrfs")
        .args(args)
        .arg(mount)
        .output()
        .expect("run btrfs");
    assert!(
        out.status.success(),
        "btrfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn write_file(dir: &Path, name: &str, mib: usize) {
    let mut f = fs::File::create(dir.join(name)).unwrap();
    let block: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for _ in 0..mib {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
}

/// The sandboxes of the issue: single device, DUP, RAID0, RAID1, RAID1C3,
/// RAID10, mixed profiles left by an unfinished conversion, and a small
/// mixed block-group filesystem.
fn states(env: &TestEnv) -> Vec<(&'static str, Sandbox)> {
    let req = |devices, size_mib: u64, data, metadata, mkfs: &[&str]| SandboxRequest {
        devices,
        size_bytes: size_mib << 20,
        data,
        metadata,
        mkfs_args: mkfs.iter().map(|s| s.to_string()).collect(),
        ..SandboxRequest::default()
    };
    use Profile::*;
    let list = vec![
        ("single", req(1, 1024, None, None, &[])),
        ("dup", req(1, 1024, Some(Dup), Some(Dup), &[])),
        ("raid0", req(3, 1024, Some(Raid0), Some(Raid1), &[])),
        ("raid1", req(2, 1024, Some(Raid1), Some(Raid1), &[])),
        ("raid1c3", req(3, 1024, Some(Raid1c3), Some(Raid1c3), &[])),
        ("raid10", req(4, 1024, Some(Raid10), Some(Raid10), &[])),
        ("converting", req(2, 2048, Some(Single), Some(Raid1), &[])),
        ("mixed-bg", req(1, 512, None, None, &["--mixed"])),
    ];
    list.into_iter()
        .map(|(name, r)| {
            let sbx = env.sandbox(r);
            write_file(
                sbx.mount_point(),
                "data",
                if name == "mixed-bg" { 32 } else { 400 },
            );
            if name == "converting" {
                // Convert one data chunk only: an interrupted conversion.
                let _ = Command::new("btrfs")
                    .args(["balance", "start", "-dconvert=raid1,limit=1"])
                    .arg(sbx.mount_point())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            (name, sbx)
        })
        .collect()
}

fn key(r: &Value) -> (String, String, u64, u64) {
    (
        r["type"].as_str().unwrap().to_owned(),
        r["profile"].as_str().unwrap().to_owned(),
        r["total_bytes"].as_u64().unwrap(),
        r["used_bytes"].as_u64().unwrap(),
    )
}

fn lab_json(env: &TestEnv, args: &[&str], input: Option<&str>) -> Value {
    let mut c = env.cmd();
    c.args(args).arg("--json");
    if input.is_some() {
        c.stdin(Stdio::piped());
    }
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    if let Some(text) = input {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(&String::from_utf8(out.stdout).unwrap())
}

fn lab_text(env: &TestEnv, args: &[&str], mount: &Path) -> String {
    let (code, stdout, stderr) = run(env.cmd().args(args).arg(mount));
    assert_eq!(code, 0, "{args:?}: {stderr}");
    stdout
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn df_usage_show_agree_with_btrfs_progs() {
    if !require_root("df/usage/show against btrfs-progs") {
        return;
    }
    let env = TestEnv::new();
    let sandboxes = states(&env);
    // Without MOUNT, `show` lists every mounted btrfs, ours among them
    // (another test's may have device errors: status 64; or a missing
    // device: 3).
    let (code, out, err) = run(env.cmd().args(["show", "--json"]));
    assert!(code == 0 || code == 64 || code == 3, "{err}");
    let all = json(&out);
    let uuids: Vec<&str> = all["filesystems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["uuid"].as_str().unwrap())
        .collect();
    for (name, sbx) in &sandboxes {
        let uuid = btrfs_lab::sys::kernel::btrfs::fsid(sbx.mount_point()).unwrap();
        assert!(
            uuids.contains(&uuid.as_str()),
            "{name}: {uuid} not in {uuids:?}"
        );
    }
    for (name, sbx) in sandboxes {
        let m = sbx.mount_point();
        let ms = m.to_str().unwrap();

        // df: kernel JSON == parsed `-b` == parsed progs JSON, byte for byte.
        let kernel = lab_json(&env, &["df", ms], None);
        assert_df_shape(&kernel);
        let kernel_keys: Vec<_> = kernel["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(key)
            .collect();
        for progs_args in [
            &["filesystem", "df", "-b"][..],
            &["--format", "json", "filesystem", "df"][..],
        ] {
            let parsed = lab_json(&env, &["df", "--parse"], Some(&btrfs(progs_args, m)));
            let keys: Vec<_> = parsed["records"]
                .as_array()
                .unwrap()
                .iter()
                .map(key)
                .collect();
            assert_eq!(keys, kernel_keys, "{name}: {progs_args:?}");
            assert!(
                parsed["records"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|r| r["exact"] == true)
            );
        }
        // Human forms: within the stated rounding.
        for progs_args in [
            &["filesystem", "df"][..],
            &["filesystem", "df", "--si"],
            &["filesystem", "df", "-k"],
            &["filesystem", "df", "-g"],
        ] {
            let parsed = lab_json(&env, &["df", "--parse", "-"], Some(&btrfs(progs_args, m)));
            let recs = parsed["records"].as_array().unwrap();
            assert_eq!(recs.len(), kernel_keys.len(), "{name}: {progs_args:?}");
            for (r, k) in recs.iter().zip(&kernel_keys) {
                assert_eq!(
                    (r["type"].as_str().unwrap(), r["profile"].as_str().unwrap()),
                    (k.0.as_str(), k.1.as_str())
                );
                let within = |field: &str, truth: u64| {
                    let v = r[format!("{field}_bytes")].as_u64().unwrap();
                    let err = r[format!("{field}_error_bytes")].as_u64().unwrap();
                    assert!(
                        v.abs_diff(truth) <= err,
                        "{name} {progs_args:?}: {field} {v} ± {err} vs {truth}"
                    );
                };
                within("total", k.2);
                within("used", k.3);
            }
        }
        // Text output is btrfs-progs' own, in every unit form.
        for units in [
            &[][..],
            &["-b"],
            &["--si"],
            &["-k"],
            &["-m"],
            &["-g"],
            &["-t"],
            &["-H"],
        ] {
            let mut args = vec!["df"];
            args.extend_from_slice(units);
            let mut progs = vec!["filesystem", "df"];
            progs.extend_from_slice(units);
            assert_eq!(
                lab_text(&env, &args, m),
                btrfs(&progs, m),
                "{name}: df {units:?}"
            );
        }

        // usage: field by field against `btrfs filesystem usage -b`.
        let usage = lab_json(&env, &["usage", ms], None);
        assert_usage_shape(&usage);
        compare_usage(
            name,
            &usage,
            &parse_progs_usage(&btrfs(&["filesystem", "usage", "-b"], m)),
        );
        assert_eq!(
            lab_text(&env, &["usage", "-b"], m),
            btrfs(&["filesystem", "usage", "-b"], m),
            "{name}: usage -b"
        );
        assert_eq!(
            lab_text(&env, &["usage"], m),
            btrfs(&["filesystem", "usage"], m),
            "{name}: usage"
        );

        // show: against `btrfs filesystem show --raw` and `btrfs device stats`.
        let show = lab_json(&env, &["show", ms], None);
        assert_show_shape(&show);
        compare_show(
            name,
            &show["filesystems"][0],
            &btrfs(&["filesystem", "show", "--raw"], m),
            &btrfs(&["--format", "json", "device", "stats"], m),
        );

        if name == "converting" {
            let mixed = &kernel["mixed_profiles"];
            assert_eq!(mixed[0]["type"], "data", "{kernel:#}");
            assert_eq!(mixed[0]["profiles"], serde_json::json!(["single", "raid1"]));
            let (code, _, stderr) = run(env.cmd().arg("df").arg(m));
            assert_eq!(code, 0);
            assert!(
                stderr.contains("more than one profile for one type: Data: single, raid1"),
                "{stderr}"
            );
            assert_eq!(usage["overall"]["multiple_profiles"], true);
        } else {
            assert_eq!(kernel["mixed_profiles"], serde_json::json!([]), "{name}");
        }
        if name == "mixed-bg" {
            assert!(
                kernel_keys.iter().any(|k| k.0 == "data+metadata"),
                "{kernel_keys:?}"
            );
        }
    }
    assert!(
        crate::common::leftovers_now(env.path())
            .iter()
            .all(|l| l.starts_with("loop") || l.starts_with("mount"))
    );
}

fn assert_df_shape(v: &Value) {
    // Read back as the library's type, then checked key by key.
    let _: btrfs_lab::space::DfReport = serde_json::from_value(v.clone()).unwrap_or_else(|e| {
        panic!(
            "not a {}: {e}\n{v:#}",
            stringify!(btrfs_lab::space::DfReport)
        )
    });
    assert_shape(
        v,
        &[
            ("source.kind", "string"),
            ("source.path", "string"),
            ("source.mount_point", "string"),
            ("records", "array"),
            ("records.0.type", "string"),
            ("records.0.profile", "string"),
            ("records.0.total_bytes", "number"),
            ("records.0.used_bytes", "number"),
            ("records.0.zone_unusable_bytes", "number|null"),
            ("records.0.exact", "bool"),
            ("records.0.total_error_bytes", "number"),
            ("records.0.used_error_bytes", "number"),
            ("records.0.zone_unusable_error_bytes", "number|null"),
            ("mixed_profiles", "array"),
            ("input_warnings", "array"),
        ],
    );
}

fn assert_usage_shape(v: &Value) {
    // Read back as the library's type, then checked key by key.
    let _: btrfs_lab::space::usage::UsageDocument = serde_json::from_value(v.clone())
        .unwrap_or_else(|e| {
            panic!(
                "not a {}: {e}\n{v:#}",
                stringify!(btrfs_lab::space::usage::UsageDocument)
            )
        });
    assert_shape(
        v,
        &[
            ("interpretation", "object"),
            ("interpretation.findings", "array"),
            ("path", "string"),
            ("mount_point", "string"),
            ("uuid", "string"),
            ("overall.device_size", "number"),
            ("overall.device_allocated", "number"),
            ("overall.device_unallocated", "number"),
            ("overall.device_missing", "number"),
            ("overall.device_slack", "number"),
            ("overall.used", "number"),
            ("overall.free_estimated", "number"),
            ("overall.free_estimated_min", "number"),
            ("overall.free_statfs", "number"),
            ("overall.data_ratio", "number"),
            ("overall.metadata_ratio", "number"),
            ("overall.global_reserve", "number"),
            ("overall.global_reserve_used", "number"),
            ("overall.multiple_profiles", "bool"),
            ("overall.multiple_profile_types", "array"),
            ("block_groups.0.type", "string"),
            ("block_groups.0.profile", "string"),
            ("block_groups.0.size_bytes", "number"),
            ("block_groups.0.used_bytes", "number"),
            ("block_groups.0.used_percent", "number"),
            ("block_groups.0.devices", "array|null"),
            ("unallocated", "array|null"),
            ("chunk_tree_readable", "bool"),
            ("notes", "array"),
        ],
    );
}

fn assert_show_shape(v: &Value) {
    // Read back as the library's type, then checked key by key.
    let _: btrfs_lab::space::show::ShowReport =
        serde_json::from_value(v.clone()).unwrap_or_else(|e| {
            panic!(
                "not a {}: {e}\n{v:#}",
                stringify!(btrfs_lab::space::show::ShowReport)
            )
        });
    assert_shape(
        v,
        &[
            ("filesystems.0.label", "string|null"),
            ("filesystems.0.uuid", "string"),
            ("filesystems.0.mount_point", "string"),
            ("filesystems.0.generation", "number"),
            ("filesystems.0.node_size", "number"),
            ("filesystems.0.sector_size", "number"),
            ("filesystems.0.checksum", "string|null"),
            ("filesystems.0.checksum_driver", "string|null"),
            ("filesystems.0.features", "array"),
            ("filesystems.0.total_devices", "number"),
            ("filesystems.0.fs_bytes_used", "number"),
            ("filesystems.0.devices.0.devid", "number"),
            ("filesystems.0.devices.0.path", "string"),
            ("filesystems.0.devices.0.missing", "bool"),
            ("filesystems.0.devices.0.size_bytes", "number"),
            ("filesystems.0.devices.0.used_bytes", "number"),
            ("filesystems.0.devices.0.errors.corruption_errs", "number"),
            ("filesystems.0.devices.0.has_errors", "bool"),
        ],
    );
}

/// "Data,RAID0" → (size, used, [(path, bytes)])
type ProgsGroup = (String, u64, u64, Vec<(String, i64)>);

/// `btrfs filesystem usage -b`, parsed by the test itself.
#[derive(Debug, Default)]
struct ProgsUsage {
    overall: BTreeMap<String, String>,
    groups: Vec<ProgsGroup>,
    unallocated: Vec<(String, i64)>,
}

fn parse_progs_usage(text: &str) -> ProgsUsage {
    let mut u = ProgsUsage::default();
    let mut in_unallocated = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("    ") {
            let (k, v) = rest.split_once(':').unwrap();
            u.overall.insert(k.trim().to_owned(), v.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("   ") {
            let (path, bytes) = rest.split_once('\t').unwrap();
            let entry = (path.to_owned(), bytes.trim().parse().unwrap());
            if in_unallocated {
                u.unallocated.push(entry);
            } else {
                u.groups.last_mut().unwrap().3.push(entry);
            }
        } else if line == "Unallocated:" {
            in_unallocated = true;
        } else if let Some((name, rest)) = line.split_once(": Size:") {
            let (size, used) = rest.split_once(", Used:").unwrap();
            let used = used.split_whitespace().next().unwrap();
            u.groups.push((
                name.to_owned(),
                size.parse().unwrap(),
                used.parse().unwrap(),
                Vec::new(),
            ));
        }
    }
    u
}

fn compare_usage(name: &str, lab: &Value, progs: &ProgsUsage) {
    let o = &lab["overall"];
    let num = |k: &str| {
        progs.overall[k]
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    for (key, field) in [
        ("Device size", "device_size"),
        ("Device allocated", "device_allocated"),
        ("Device unallocated", "device_unallocated"),
        ("Device missing", "device_missing"),
        ("Device slack", "device_slack"),
        ("Used", "used"),
        ("Free (estimated)", "free_estimated"),
        ("Free (statfs, df)", "free_statfs"),
        ("Global reserve", "global_reserve"),
    ] {
        assert_eq!(o[field].as_f64().unwrap(), num(key), "{name}: {key}");
    }
    let min: f64 = progs.overall["Free (estimated)"]
        .split("min: ")
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .parse()
        .unwrap();
    assert_eq!(
        o["free_estimated_min"].as_f64().unwrap(),
        min,
        "{name}: min"
    );
    assert_eq!(
        format!("{:.2}", o["data_ratio"].as_f64().unwrap()),
        progs.overall["Data ratio"],
        "{name}"
    );
    assert_eq!(
        format!("{:.2}", o["metadata_ratio"].as_f64().unwrap()),
        progs.overall["Metadata ratio"],
        "{name}"
    );
    let multiple = progs.overall["Multiple profiles"].starts_with("yes");
    assert_eq!(
        o["multiple_profiles"].as_bool().unwrap(),
        multiple,
        "{name}"
    );
    let groups = lab["block_groups"].as_array().unwrap();
    assert_eq!(groups.len(), progs.groups.len(), "{name}");
    for (g, (pname, size, used, devs)) in groups.iter().zip(&progs.groups) {
        let bg = format!(
            "{},{}",
            g["type"].as_str().unwrap(),
            g["profile"].as_str().unwrap()
        );
        assert_eq!(bg.to_lowercase(), pname.to_lowercase(), "{name}");
        assert_eq!(g["size_bytes"].as_u64().unwrap(), *size, "{name} {pname}");
        assert_eq!(g["used_bytes"].as_u64().unwrap(), *used, "{name} {pname}");
        let lab_devs: Vec<(String, i64)> = g["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["path"].as_str().unwrap().to_owned(),
                    d["bytes"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(&lab_devs, devs, "{name} {pname}");
    }
    let lab_unalloc: Vec<(String, i64)> = lab["unallocated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().to_owned(),
                d["bytes"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(lab_unalloc, progs.unallocated, "{name}: unallocated");
}

fn compare_show(name: &str, lab: &Value, progs_show: &str, progs_stats: &str) {
    let mut lines = progs_show.lines();
    let head = lines.next().unwrap();
    assert!(
        head.contains(&format!("uuid: {}", lab["uuid"].as_str().unwrap())),
        "{name}: {head}"
    );
    assert!(
        head.contains(&format!("Label: '{}'", lab["label"].as_str().unwrap())),
        "{name}: {head}"
    );
    let totals = lines.next().unwrap();
    assert_eq!(
        totals.trim(),
        format!(
            "Total devices {} FS bytes used {}",
            lab["total_devices"], lab["fs_bytes_used"]
        ),
        "{name}"
    );
    let devices = lab["devices"].as_array().unwrap();
    for (line, d) in lines.filter(|l| l.contains("devid")).zip(devices) {
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>(),
            vec![
                "devid".to_owned(),
                d["devid"].to_string(),
                "size".to_owned(),
                d["size_bytes"].to_string(),
                "used".to_owned(),
                d["used_bytes"].to_string(),
                "path".to_owned(),
                d["path"].as_str().unwrap().to_owned()
            ],
            "{name}"
        );
    }
    let stats: Value = serde_json::from_str(progs_stats).unwrap();
    let stats = stats["device-stats"].as_array().unwrap();
    assert_eq!(stats.len(), devices.len());
    for (s, d) in stats.iter().zip(devices) {
        assert_eq!(s["device"].as_str().unwrap(), d["path"].as_str().unwrap());
        for k in [
            "write_io_errs",
            "read_io_errs",
            "flush_io_errs",
            "corruption_errs",
            "generation_errs",
        ] {
            let progs: u64 = match &s[k] {
                Value::String(v) => v.parse().unwrap(),
                v => v.as_u64().unwrap(),
            };
            assert_eq!(d["errors"][k].as_u64().unwrap(), progs, "{name}: {k}");
        }
    }
}

/// Corrupt one copy of a RAID1 filesystem; a scrub repairs it and counts the
/// errors; `show` reports and highlights them as `btrfs device stats` does.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn show_highlights_device_errors() {
    if !require_root("show with device errors") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point();
    write_file(m, "f", 200);
    let (code, _, err) = run(env.cmd().arg("show").arg(m));
    assert_eq!(code, 0, "no errors yet: {err}");
    {
        use std::io::{Seek, SeekFrom};
        let mut img = fs::OpenOptions::new()
            .write(true)
            .open(&sbx.record().devices[0].image)
            .unwrap();
        img.seek(SeekFrom::Start(200 << 20)).unwrap();
        let junk: Vec<u8> = (0..1 << 20)
            .map(|i: u32| (i.wrapping_mul(0x9E37_79B9) >> 7) as u8)
            .collect();
        for _ in 0..700 {
            img.write_all(&junk).unwrap();
        }
        img.sync_all().unwrap();
    }
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    let _ = Command::new("btrfs")
        .args(["scrub", "start", "-B"])
        .arg(m)
        .output()
        .unwrap();
    // Exit status 64 (bit 6, as `btrfs device stats --check`).
    let (code, out, err) = run(env.cmd().args(["show", "--json"]).arg(m));
    assert_eq!(code, 64, "{err}");
    let show = json(&out);
    let fs0 = &show["filesystems"][0];
    compare_show(
        "corrupted",
        fs0,
        &btrfs(&["filesystem", "show", "--raw"], m),
        &btrfs(&["--format", "json", "device", "stats"], m),
    );
    let d0 = &fs0["devices"][0];
    assert_eq!(d0["has_errors"], true, "{show:#}");
    assert!(d0["errors"]["corruption_errs"].as_u64().unwrap() > 0);
    assert_eq!(fs0["devices"][1]["has_errors"], false);
    let (code, text, _) = run(env.cmd().arg("show").arg(m));
    assert_eq!(code, 64);
    assert!(text.contains("<- errors"), "{text}");
    assert_eq!(text.matches("<- errors").count(), 1);
}

#[test]
fn bad_input_gets_one_line_and_no_stdout() {
    let env = TestEnv::new();
    let garbage = env.path().join("garbage.txt");
    fs::write(
        &garbage,
        "Data, single: total=1.00GiB, used=2.00GiB\nthis is not fi df\n",
    )
    .unwrap();
    let empty = env.path().join("empty.txt");
    fs::write(&empty, "").unwrap();
    let binary = env.path().join("bin");
    fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    let cases: Vec<(Vec<String>, i32, String)> = vec![
        (
            vec![
                "df".into(),
                "--parse".into(),
                "--strict".into(),
                garbage.display().to_string(),
            ],
            1,
            format!("{}: line 2: expected 'TYPE, PROFILE", garbage.display()),
        ),
        (
            vec!["df".into(), "--parse".into(), empty.display().to_string()],
            1,
            "no 'btrfs filesystem df' rows found".into(),
        ),
        (
            vec!["df".into(), "--parse".into(), binary.display().to_string()],
            1,
            "not text".into(),
        ),
        (
            vec![
                "df".into(),
                "--parse".into(),
                env.path().display().to_string(),
            ],
            1,
            "is a directory".into(),
        ),
        (
            vec!["df".into(), "--parse".into(), "/nonexistent/x".into()],
            1,
            "no such file or directory".into(),
        ),
        (
            vec!["df".into(), "/nonexistent/x".into()],
            1,
            "no such file or directory".into(),
        ),
        (
            vec!["df".into(), env.path().display().to_string()],
            1,
            "is not on a btrfs filesystem".into(),
        ),
        (
            vec!["usage".into(), env.path().display().to_string()],
            1,
            "is not on a btrfs filesystem".into(),
        ),
        (
            vec!["show".into(), env.path().display().to_string()],
            1,
            "is not on a btrfs filesystem".into(),
        ),
        (vec!["df".into()], 2, "required".into()),
        (
            vec!["df".into(), "--parse".into(), "a".into(), "b".into()],
            2,
            "unexpected argument".into(),
        ),
        (
            vec!["df".into(), "-b".into(), "-k".into(), "/".into()],
            2,
            "cannot be used with".into(),
        ),
    ];
    for (args, want_code, want) in cases {
        for json_flag in [false, true] {
            let mut c = env.cmd();
            c.args(&args);
            if json_flag {
                c.arg("--json");
            }
            let (code, stdout, stderr) = run(&mut c);
            assert_eq!(code, want_code, "{args:?}: {stderr}");
            assert!(stdout.is_empty(), "{args:?}: stdout {stdout}");
            assert!(
                stderr.starts_with("btrfs-lab: error: "),
                "{args:?}: {stderr}"
            );
            assert!(
                stderr.lines().next().unwrap().contains(&want),
                "{args:?}: {stderr}"
            );
            assert!(stderr.lines().count() <= 2, "{args:?}: {stderr}");
        }
    }
    // Garbage on stdin too.
    let mut child = env
        .cmd()
        .args(["df", "--parse"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Data, single: total=12QB, used=0\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Lenient: the damaged row is named in the one error line.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-: no 'btrfs filesystem df' rows found")
            && err.contains("(line 1: unknown unit in '12QB'"),
        "{err}"
    );
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn usage_without_root_says_what_it_cannot_show() {
    if !require_root("usage as an unprivileged user") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 512 << 20,
        ..SandboxRequest::default()
    });
    let dir = sbx.record().dir.clone();
    let as_nobody = |args: &[&str]| run(env.as_nobody(&[&dir]).args(args).arg(sbx.mount_point()));
    let (code, stdout, stderr) = as_nobody(&["usage", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v = json(&stdout);
    assert_eq!(v["chunk_tree_readable"], false);
    assert_eq!(v["unallocated"], Value::Null);
    assert!(v["overall"]["device_size"].as_u64().unwrap() > 0);
    assert!(
        stderr
            .contains("note: the per-device split needs the chunk tree, which only root may read"),
        "{stderr}"
    );
    let (code, stdout, _) = as_nobody(&["df", "-b"]);
    assert_eq!(code, 0);
    assert_eq!(
        stdout,
        btrfs(&["filesystem", "df", "-b"], sbx.mount_point())
    );
    let (code, _, stderr) = as_nobody(&["show", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let _ = FsKind::Btrfs;
}

/// `df --parse` of input that cannot be true warns, naming the row; a
/// capture of a conversion stopped half-way gives one warning and one hint
/// for all its mixed types, not one hint per type.
#[test]
fn df_parse_warns_once_and_names_impossible_rows() {
    let env = TestEnv::new();
    let parse = |text: &str| {
        let p = env.path().join("capture.txt");
        fs::write(&p, text).unwrap();
        let (code, out, err) = run(env.cmd().args(["df", "--parse"]).arg(&p));
        assert_eq!(code, 0, "{err}");
        let (_, json_out, _) = run(env.cmd().args(["df", "--parse", "--json"]).arg(&p));
        (out, err, json(&json_out))
    };
    let (out, err, r) = parse(
        "Data, single: total=1073741824, used=536870912\n\
         System, DUP: total=8388608, used=16384\n\
         Metadata, DUP: total=268435456, used=402653184\n",
    );
    assert!(
        out.contains("Metadata, DUP: total=256.00MiB, used=384.00MiB"),
        "{out}"
    );
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "btrfs-lab: warning: Metadata, DUP: used=402653184 is larger than total=268435456: the input is inconsistent",
            "hint: check that the capture was not edited or cut; the figures of this row mean nothing",
        ]
    );
    assert_eq!(
        r["inconsistencies"],
        serde_json::json!(["Metadata, DUP: used=402653184 is larger than total=268435456"])
    );
    // Rounded values: used may print above total within the rounding.
    let (_, err, r) = parse("Data, single: total=1.00GiB, used=1.00GiB\n");
    assert!(!err.contains("inconsistent"), "{err}");
    assert_eq!(r["inconsistencies"], serde_json::json!([]));

    // A paused conversion to raid1: three types with two profiles each.
    let (_, err, r) = parse(
        "Data, single: total=1073741824, used=536870912\n\
         Data, RAID1: total=268435456, used=0\n\
         System, DUP: total=8388608, used=16384\n\
         System, RAID1: total=8388608, used=0\n\
         Metadata, DUP: total=268435456, used=1048576\n\
         Metadata, RAID1: total=268435456, used=0\n",
    );
    assert_eq!(r["mixed_profiles"].as_array().unwrap().len(), 3);
    // One finding for all three types, on stdout with the command that
    // finishes the conversion (raid1: the profile every mixed type has).
    let (out, _, _) = parse(
        "Data, single: total=1073741824, used=536870912\n\
         Data, RAID1: total=268435456, used=0\n\
         System, DUP: total=8388608, used=16384\n\
         System, RAID1: total=8388608, used=0\n\
         Metadata, DUP: total=268435456, used=1048576\n\
         Metadata, RAID1: total=268435456, used=0\n",
    );
    assert!(!err.contains("conversion"), "{err}");
    assert_eq!(out.matches("unfinished-conversion").count(), 1, "{out}");
    assert!(
        out.contains("[warning] unfinished-conversion: more than one profile for one type: Data: single, raid1; System: dup, raid1; Metadata: dup, raid1"),
        "{out}"
    );
    assert!(
        out.contains("run: btrfs-lab convert MOUNT --data raid1 --metadata raid1"),
        "{out}"
    );
    let codes: Vec<&str> = r["interpretation"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    // data-no-redundancy: the merged code (was data-without-redundancy).
    assert_eq!(codes, ["unfinished-conversion", "data-no-redundancy"]);
}

/// A root-only file (shadow-like) that a user links to from a sticky
/// directory: `df --parse LINK` and `usage --parse LINK` as root refuse the
/// link (its owner named) and print nothing of the file, in text, `--strict`
/// and `--json` alike. Before: root followed the link and quoted the file's
/// lines in notes and errors.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn parse_refuses_a_users_link_to_a_root_only_file() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !require_root("df --parse through a user's symbolic link") {
        return;
    }
    let env = TestEnv::new();
    fs::set_permissions(env.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // The secret: one valid row (so a lenient read succeeds) and lines that
    // only root may read.
    let secret = env.path().join("secret");
    fs::write(
        &secret,
        "root:$6$SECRETHASHa8f0e1d2c3b4$qwertyuiopasdfghjklzxcvbnm:19700:0:99999:7:::\n\
         Data, single: total=1.00GiB, used=512.00MiB\n\
         daemon:*SECRETHASH2:19700:0:99999:7:::\n",
    )
    .unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let shared = env.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let link = shared.join("capture.txt");
    let (code, _, stderr) = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg("ln")
        .arg("-s")
        .arg(&secret)
        .arg(&link));
    assert_eq!(code, 0, "ln -s as uid 65534: {stderr}");
    assert_eq!(fs::symlink_metadata(&link).unwrap().uid(), 65534);
    let l = link.display().to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec!["df", "--parse", &l],
        vec!["df", "--parse", "--strict", &l],
        vec!["--json", "df", "--parse", &l],
        vec!["usage", "--parse", &l],
        vec!["--json", "usage", "--parse", &l],
    ];
    for args in cases {
        let (code, stdout, stderr) = run(env.cmd().args(&args));
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: stdout {stdout}");
        assert!(
            !stdout.contains("SECRETHASH") && !stderr.contains("SECRETHASH"),
            "{args:?}: the root-only file was read and quoted: {stderr}"
        );
        assert!(
            stderr.starts_with("btrfs-lab: error: ")
                && stderr.contains("is a symbolic link owned by uid 65534"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.lines().count() <= 2, "{args:?}: {stderr}");
    }
    // Root's own link to the same file is followed (root chose it).
    let own = env.path().join("own-link.txt");
    std::os::unix::fs::symlink(&secret, &own).unwrap();
    let (code, _, stderr) = run(env.cmd().args(["df", "--parse"]).arg(&own));
    assert_eq!(code, 0, "{stderr}");
    // The notes name the skipped lines with a short excerpt only: never a
    // whole line of the file.
    for line in stderr.lines().filter(|l| l.contains("skipped")) {
        assert!(
            !line.contains("qwertyuiopasdfghjklzxcvbnm:19700"),
            "a whole line quoted: {line}"
        );
    }
}

/// A FIFO with no writer: `df --parse` and `usage --parse` answer at once
/// with one line (exit 1, "wrong target"), never wait for a writer. Before:
/// they blocked in open() forever. (The wait below only keeps a regression
/// from hanging the suite; nothing is timed.)
#[test]
fn parse_of_a_fifo_is_refused_at_once() {
    let env = TestEnv::new();
    let fifo = env.path().join("capture.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for sub in ["df", "usage"] {
        for json_flag in [false, true] {
            let mut c = env.cmd();
            if json_flag {
                c.arg("--json");
            }
            let mut child = c
                .args([sub, "--parse"])
                .arg(&fifo)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut waited = 0;
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break Some(s);
                }
                if waited == 600 {
                    break None;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
                waited += 1;
            };
            if status.is_none() {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{sub} --parse FIFO is still waiting for a writer");
            }
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{sub}: {stderr}");
            assert!(out.stdout.is_empty(), "{sub}");
            assert!(
                stderr.starts_with("btrfs-lab: error: ")
                    && stderr.contains("is a FIFO (named pipe)"),
                "{sub}: {stderr}"
            );
            assert!(stderr.lines().count() <= 2, "{sub}: {stderr}");
        }
    }
}

/// A label with terminal escape sequences (OSC title, SGR colour, a bell)
/// on a real btrfs: `show` and `doctor` print it escaped (`\e`), never the
/// raw ESC byte, while `--json` keeps the label exact.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_label_with_escape_sequences_never_reaches_the_terminal_raw() {
    if !require_root("show with an escape sequence in the label") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 512 << 20,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let label = "\u{1b}]0;owned\u{7}\u{1b}[31mred";
    let out = Command::new("btrfs")
        .args(["filesystem", "label"])
        .arg(&m)
        .arg(label)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, stdout, stderr) = run(env.cmd().arg("show").arg(&m));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
        "{stdout:?}"
    );
    assert!(
        stdout.contains("Label: '\\e]0;owned\\x07\\e[31mred'"),
        "{stdout}"
    );
    let v = json(&run(env.cmd().args(["--json", "show"]).arg(&m)).1);
    assert_eq!(v["filesystems"][0]["label"], label);
    for args in [vec!["doctor"], vec!["doctor", "--format", "prometheus"]] {
        let (code, stdout, stderr) = run(env.cmd().args(&args).arg(&m));
        assert!(code <= 2, "{args:?}: {stderr}");
        assert!(
            !stdout.contains('\u{1b}') && !stderr.contains('\u{1b}'),
            "{args:?}: {stdout:?}"
        );
        assert!(
            stdout.contains(&m.display().to_string()),
            "{args:?}: {stdout}"
        );
    }
}

/// `df MOUNT` counts the devices (FS_INFO), as root and without root: a
/// 3-device filesystem whose profiles imply two (single data, RAID1
/// metadata) is "a filesystem of 3 devices" (issue 33), as `usage` says.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn df_counts_the_devices_not_what_the_profiles_imply() {
    if !require_root("df's device count") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 512 << 20,
        data: Some(btrfs_lab::model::profile::Profile::Single),
        metadata: Some(btrfs_lab::model::profile::Profile::Raid1),
        ..SandboxRequest::default()
    });
    write_file(sbx.mount_point(), "data", 16);
    let dir = sbx.record().dir.clone();
    let title = |v: &Value| -> String {
        v["interpretation"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == "data-no-redundancy")
            .unwrap_or_else(|| panic!("{v}"))["title"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (code, stdout, stderr) = run(env.cmd().args(["df", "--json"]).arg(sbx.mount_point()));
    assert_eq!(code, 0, "{stderr}");
    assert!(title(&json(&stdout)).ends_with("of 3 devices"), "{stdout}");
    let (code, stdout, stderr) = run(env
        .as_nobody(&[&dir])
        .args(["df", "--json"])
        .arg(sbx.mount_point()));
    assert_eq!(code, 0, "{stderr}");
    assert!(title(&json(&stdout)).ends_with("of 3 devices"), "{stdout}");
    let (code, stdout, stderr) = run(env.cmd().args(["usage", "--json"]).arg(sbx.mount_point()));
    assert_eq!(code, 0, "{stderr}");
    assert!(title(&json(&stdout)).ends_with("of 3 devices"), "{stdout}");
}
