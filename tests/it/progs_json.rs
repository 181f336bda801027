//! `--format progs-json` (issue 59) on real loop-device btrfs: the shapes
//! proposed for btrfs-progs (docs/json.md, "Upstream shapes") carry the
//! same figures as btrfs-lab's own `--json` and as btrfs-progs' text; a
//! missing member as PR #761 shows it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::SandboxRequest;
use serde_json::Value;

use crate::common::{TestEnv, json, lose_member, require_root, run};
use crate::doctor::write_file;

/// btrfs-lab's stdout as JSON (no envelope: the upstream shape).
fn progs_json(env: &TestEnv, args: &[&str], m: &Path) -> (i32, Value) {
    let (code, out, err) = run(env.cmd().args(args).args(["--format", "progs-json"]).arg(m));
    let v = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{args:?}: not one JSON document ({e}): {out}\n{err}"));
    (code, v)
}

fn lab_json(env: &TestEnv, args: &[&str], m: &Path) -> Value {
    let (_, out, err) = run(env.cmd().args(args).arg("--json").arg(m));
    assert!(!out.is_empty(), "{args:?}: {err}");
    json(&out)
}

fn progs(args: &[&str], m: &Path) -> String {
    let out = Command::new("btrfs").args(args).arg(m).output().unwrap();
    assert!(
        out.status.success(),
        "btrfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `btrfs --format json CMD M` when this btrfs-progs has it (6.2 has not
/// for these commands: then `None`).
fn progs_own_json(cmd: &[&str], m: &Path) -> Option<Value> {
    let out = Command::new("btrfs")
        .args(["--format", "json"])
        .args(cmd)
        .arg(m)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// The keys of every object, recursively (arrays by their first element).
fn keys(v: &Value, path: &str, into: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let p = format!("{path}.{k}");
                into.push(p.clone());
                keys(v, &p, into);
            }
        }
        Value::Array(a) => {
            if let Some(first) = a.first() {
                keys(first, &format!("{path}[]"), into);
            }
        }
        _ => {}
    }
}

fn assert_same_keys(ours: &Value, theirs: &Value, what: &str) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    keys(ours, "", &mut a);
    keys(theirs, "", &mut b);
    assert_eq!(a, b, "{what}: btrfs-progs' own JSON has other keys");
}

/// One device of `btrfs device usage -b`: size, slack, the chunk lines
/// (`Data,RAID1` or `Data,RAID6/3`, bytes), unallocated.
#[derive(Debug, Default)]
struct ProgsDevice {
    device_size: u64,
    slack: u64,
    chunks: Vec<(String, u64)>,
    unallocated: i64,
}

fn parse_device_usage(text: &str) -> BTreeMap<u64, (String, ProgsDevice)> {
    let mut out = BTreeMap::new();
    let mut current: Option<(u64, String, ProgsDevice)> = None;
    for line in text.lines() {
        if let Some((path, id)) = line.split_once(", ID: ") {
            if let Some((devid, p, d)) = current.take() {
                out.insert(devid, (p, d));
            }
            current = Some((
                id.trim().parse().unwrap(),
                path.to_owned(),
                ProgsDevice::default(),
            ));
            continue;
        }
        let Some((_, _, d)) = current.as_mut() else {
            continue;
        };
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name {
            "Device size" => d.device_size = value.parse().unwrap(),
            "Device slack" => d.slack = value.parse().unwrap(),
            "Unallocated" => d.unallocated = value.parse().unwrap(),
            _ => d.chunks.push((name.to_owned(), value.parse().unwrap())),
        }
    }
    if let Some((devid, p, d)) = current {
        out.insert(devid, (p, d));
    }
    out
}

/// `devid N size S used U path P` lines of `btrfs filesystem show --raw`.
fn parse_fi_show(text: &str) -> BTreeMap<u64, (u64, u64, String)> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&"devid")).then(|| {
                (
                    w[1].parse().unwrap(),
                    (
                        w[3].parse().unwrap(),
                        w[5].parse().unwrap(),
                        w[7].to_owned(),
                    ),
                )
            })
        })
        .collect()
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn show_and_usage_agree_with_btrfs_lab_and_btrfs_progs() {
    if !require_root("progs-json show and usage") {
        return;
    }
    let env = TestEnv::new();
    // Three kinds of chunk lines: RAID0 data over 3, RAID1 metadata and
    // system over 2.
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid0),
        metadata: Some(Profile::Raid1),
        mkfs_args: vec!["-L".into(), "pjson".into()],
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    write_file(&m.join("f"), 200, 3).unwrap();
    progs(&["filesystem", "sync"], &m);

    // show: the same figures as show --json, and as btrfs fi show --raw.
    let (code, ours) = progs_json(&env, &["show"], &m);
    assert_eq!(code, 0);
    assert_eq!(ours["__header"]["version"], "1");
    let lab = lab_json(&env, &["show"], &m);
    let (list, fs) = (&ours["filesystem-list"], &lab["filesystems"][0]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["label"], "pjson");
    assert_eq!(list[0]["uuid"], fs["uuid"]);
    assert_eq!(list[0]["total_devices"], fs["total_devices"]);
    assert_eq!(list[0]["used"], fs["fs_bytes_used"]);
    let devices = list[0]["device-list"].as_array().unwrap();
    assert_eq!(devices.len(), 3);
    let text = progs(&["filesystem", "show", "--raw"], &m);
    let theirs = parse_fi_show(&text);
    for (d, l) in devices.iter().zip(fs["devices"].as_array().unwrap()) {
        assert_eq!(d["devid"], l["devid"]);
        assert_eq!(d["size"], l["size_bytes"]);
        assert_eq!(d["used"], l["used_bytes"]);
        assert_eq!(d["path"], l["path"]);
        assert_eq!(d["missing"], false);
        let (size, used, path) = &theirs[&d["devid"].as_u64().unwrap()];
        assert_eq!(
            (d["size"].as_u64().unwrap(), d["used"].as_u64().unwrap()),
            (*size, *used),
            "{text}"
        );
        assert_eq!(d["path"].as_str().unwrap(), path, "{text}");
    }
    if let Some(own) = progs_own_json(&["filesystem", "show"], &m) {
        assert_same_keys(&ours, &own, "filesystem show");
    }

    // usage: each device as btrfs device usage -b shows it, and the same
    // figures as usage --json.
    let (code, ours) = progs_json(&env, &["usage"], &m);
    assert_eq!(code, 0);
    let lab = lab_json(&env, &["usage"], &m);
    let text = progs(&["device", "usage", "-b"], &m);
    let theirs = parse_device_usage(&text);
    let devices = ours["device-usage"].as_array().unwrap();
    assert_eq!(devices.len(), 3, "{ours}");
    assert_eq!(theirs.len(), 3, "{text}");
    let mut kinds = std::collections::BTreeSet::new();
    for (d, l) in devices.iter().zip(lab["devices"].as_array().unwrap()) {
        let devid = d["devid"].as_u64().unwrap();
        assert_eq!(d["devid"], l["devid"]);
        assert_eq!(d["device"], l["path"]);
        assert_eq!(d["device_slack"], l["slack_bytes"]);
        assert_eq!(d["device_size"], l["device_size_bytes"]);
        let (path, p) = &theirs[&devid];
        assert_eq!(d["device"].as_str().unwrap(), path, "{text}");
        assert_eq!(d["device_size"].as_u64().unwrap(), p.device_size, "{text}");
        assert_eq!(d["device_slack"].as_u64().unwrap(), p.slack, "{text}");
        assert_eq!(d["unallocated"].as_i64().unwrap(), p.unallocated, "{text}");
        // The chunk lines, in progs' order; a striped profile's line names
        // its stripe count (`Data,RAID0/3`).
        let lines: Vec<(String, u64)> = d["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let (t, prof, n) = (
                    c["type"].as_str().unwrap(),
                    c["profile"].as_str().unwrap(),
                    c["num_stripes"].as_u64().unwrap(),
                );
                kinds.insert(format!("{t},{prof}/{n}"));
                let name = if prof == "RAID0"
                    || prof == "RAID10"
                    || prof.starts_with("RAID5")
                    || prof.starts_with("RAID6")
                {
                    format!("{t},{prof}/{n}")
                } else {
                    format!("{t},{prof}")
                };
                (name, c["size"].as_u64().unwrap())
            })
            .collect();
        assert_eq!(lines, p.chunks, "devid {devid}: {text}");
        // The chunks and the per-profile split of usage --json agree.
        let total: u64 = lines.iter().map(|(_, b)| b).sum();
        let split: u64 = lab["block_groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|b| b["devices"].as_array().unwrap())
            .filter(|s| s["devid"].as_u64() == Some(devid))
            .map(|s| s["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(total, split, "devid {devid}");
    }
    assert!(
        kinds.iter().any(|k| k.starts_with("Data,RAID0/")) && kinds.contains("Metadata,RAID1/2"),
        "{kinds:?}"
    );
    if let Some(own) = progs_own_json(&["device", "usage"], &m) {
        assert_same_keys(&ours, &own, "device usage");
    }
    // --quiet silences text, not a document for programs.
    let (code, out, err) = run(env
        .cmd()
        .args(["--quiet", "usage", "--format", "progs-json"])
        .arg(&m));
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), ours);
    // Two JSON documents cannot share stdout.
    let (code, out, err) = run(env
        .cmd()
        .args(["show", "--json", "--format", "progs-json"])
        .arg(&m));
    assert_eq!(code, 2, "{err}");
    assert!(
        out.is_empty() && err.contains("exclude each other"),
        "{err}"
    );
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_missing_member_is_shown_as_pr761_shows_it() {
    if !require_root("progs-json missing member") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 1 << 30,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    write_file(&m.join("f"), 64, 5).unwrap();
    let devs = sbx.devices();
    lose_member(&m, &devs[0], &devs[2], "degraded");

    let (code, ours) = progs_json(&env, &["show"], &m);
    assert_eq!(code, 3, "show's status for a missing device: {ours}");
    let fs = &ours["filesystem-list"][0];
    assert_eq!(fs["total_devices"], 3);
    let list = fs["device-list"].as_array().unwrap();
    assert_eq!(list.len(), 3, "{ours}");
    let gone: Vec<&Value> = list.iter().filter(|d| d["missing"] == true).collect();
    assert_eq!(gone.len(), 1, "{ours}");
    assert_eq!(gone[0]["devid"], 3);
    assert_eq!(
        (gone[0]["size"].as_u64(), gone[0]["used"].as_u64()),
        (Some(0), Some(0))
    );
    for d in list.iter().filter(|d| d["missing"] == false) {
        assert!(d["size"].as_u64().unwrap() > 0);
        assert!(d["path"].as_str().unwrap().starts_with("/dev/"));
    }
    // btrfs-progs' text names the same device missing.
    let text = progs(&["filesystem", "show", "--raw"], &m);
    let line = text
        .lines()
        .find(|l| l.contains("MISSING") || l.contains("missing"))
        .unwrap_or_else(|| panic!("progs shows no missing device: {text}"));
    assert!(
        line.split_whitespace().nth(1) == Some("3") || line.contains("Some devices missing"),
        "{text}"
    );

    // usage: the missing member is listed as btrfs device usage lists it.
    let (code, ours) = progs_json(&env, &["usage"], &m);
    assert_eq!(code, 0, "{ours}");
    let text = progs(&["device", "usage", "-b"], &m);
    let theirs = parse_device_usage(&text);
    let d3 = ours["device-usage"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["devid"] == 3)
        .unwrap_or_else(|| panic!("{ours}"));
    assert_eq!(d3["device"].as_str().unwrap(), theirs[&3].0, "{text}");
    assert_eq!(
        d3["device_size"].as_u64().unwrap(),
        theirs[&3].1.device_size,
        "{text}"
    );
    assert_eq!(
        d3["unallocated"].as_i64().unwrap(),
        theirs[&3].1.unallocated,
        "{text}"
    );
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn scrub_status_carries_the_saved_scrubs_counters() {
    if !require_root("progs-json scrub status") {
        return;
    }
    let env = TestEnv::new();
    let sbx = crate::doctor::raid1_pair(&env);
    let m = sbx.mount_point().to_path_buf();
    // Nothing scrubbed yet: `never`.
    let (code, ours) = progs_json(&env, &["scrub", "--status"], &m);
    assert_eq!(code, 0);
    assert_eq!(ours["scrub_session"]["state"], "never", "{ours}");
    assert_eq!(ours["running"], 0);

    write_file(&m.join("f"), 32, 7).unwrap();
    progs(&["filesystem", "sync"], &m);
    let (code, _, err) = run(env.cmd().arg("scrub").arg(&m));
    assert_eq!(code, 0, "{err}");
    let (code, ours) = progs_json(&env, &["scrub", "--status"], &m);
    assert_eq!(code, 0);
    let lab = lab_json(&env, &["scrub", "--status"], &m);
    let last = &lab["last"];
    assert_eq!(ours["fsid"], lab["fsid"]);
    assert_eq!(
        (ours["running"].as_u64(), ours["health"].as_u64()),
        (Some(0), Some(1))
    );
    let s = &ours["scrub_session"];
    assert_eq!(s["state"], "finished");
    assert_eq!(s["t_start"], last["started_at"]);
    let sum = |k: &str| -> u64 {
        last["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d[k].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        s["data_bytes_scrubbed"].as_u64().unwrap() + s["tree_bytes_scrubbed"].as_u64().unwrap(),
        sum("bytes_scrubbed")
    );
    assert!(s["data_bytes_scrubbed"].as_u64().unwrap() > 0, "{ours}");
    assert_eq!(
        s["tree_bytes_scrubbed"].as_u64().unwrap(),
        sum("tree_bytes")
    );
    assert_eq!(
        s["data_extents_scrubbed"].as_u64().unwrap(),
        sum("data_extents")
    );
    assert_eq!(s["csum_errors"], 0);
    let per = ours["scrub_device_session"].as_object().unwrap();
    assert_eq!(per.len(), 2, "{ours}");
    for d in last["devices"].as_array().unwrap() {
        let mine = &per[&d["devid"].to_string()];
        assert_eq!(mine["device_path"], d["path"]);
        assert_eq!(mine["missing"], false);
        assert_eq!(mine["state"], "finished");
        assert_eq!(mine["tree_bytes_scrubbed"], d["tree_bytes"]);
    }
    if let Some(own) = progs_own_json(&["scrub", "status"], &m) {
        assert_same_keys(&ours, &own, "scrub status");
    }
    // --format goes with --status only.
    let (code, _, err) = run(env
        .cmd()
        .arg("scrub")
        .arg(&m)
        .args(["--format", "progs-json"]));
    assert_eq!(code, 2, "{err}");
}
