//! `links` on the fixture trees of tests/fixtures/links (expected findings
//! and ceilings for each, as their PROVENANCE.md state them), on this
//! machine (no NVMe), and on a real btrfs of loop devices.

use std::fs;
use std::path::{Path, PathBuf};

use btrfs_lab::links::array_ceiling_for_block_devices;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::{FsKind, SandboxRequest};
use btrfs_lab::sys::fs::root::SysRoot;
use serde_json::Value;

use crate::common::{TestEnv, assert_shape, bin, json, require_root, run};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/links")
        .join(name)
}

fn links(args: &[&str]) -> (i32, String, String) {
    run(std::process::Command::new(bin())
        .arg("links")
        .args(args)
        .env_remove("BTRFS_LAB_SYSROOT")
        .env("NO_COLOR", "1"))
}

/// `links --sysroot FIXTURE ARGS --json`, which must succeed.
fn report(name: &str, args: &[&str]) -> Value {
    let root = fixture(name);
    let mut all = vec!["--sysroot", root.to_str().unwrap(), "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = links(&all);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    json(&out)
}

fn device<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no device {name} in {r:#}"))
}

fn finding_kinds(d: &Value) -> Vec<String> {
    d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// Encoded bytes per second as GB/s with two decimals.
fn gbps(v: &Value) -> f64 {
    (v["encoded_bytes_per_sec"].as_f64().unwrap() / 1e7).round() / 100.0
}

#[test]
fn reference_machine_one_drive_capped_at_x2_and_one_behind_the_chipset() {
    let r = report("reference", &[]);
    assert_eq!(r["scope"], "all");
    assert_eq!(r["devices"].as_array().unwrap().len(), 3);

    let nvme0 = device(&r, "nvme0");
    assert!(finding_kinds(nvme0).is_empty());
    assert_eq!(gbps(&nvme0["ceiling"]), 7.88);
    assert_eq!(nvme0["hops"][1]["role"], "root-port");
    assert_eq!(nvme0["hops"][1]["max_generation"], 5);

    let nvme1 = device(&r, "nvme1");
    assert_eq!(finding_kinds(nvme1), ["capped-by-port"]);
    assert_eq!(gbps(&nvme1["ceiling"]), 3.94);
    assert_eq!(nvme1["ceiling"]["width"], 2);
    assert_eq!(nvme1["ceiling"]["limited_by"], "0000:00:01.3");
    assert_eq!(gbps(&nvme1["potential"]), 7.88);
    let msg = nvme1["findings"][0]["message"].as_str().unwrap();
    assert!(
        msg.contains("root port 0000:00:01.3 is x2, the drive x4"),
        "{msg}"
    );
    assert!(
        nvme1["findings"][0]["hint"]
            .as_str()
            .unwrap()
            .contains("check the BIOS lane settings")
    );

    let nvme2 = device(&r, "nvme2");
    assert_eq!(finding_kinds(nvme2), ["behind-chipset"]);
    assert_eq!(nvme2["findings"][0]["severity"], "info");
    assert_eq!(gbps(&nvme2["ceiling"]), 7.88);
    let roles: Vec<&str> = nvme2["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "endpoint",
            "switch-downstream",
            "switch-upstream",
            "root-port"
        ]
    );
    assert_eq!(nvme2["hops"][2]["chipset"], true);
    // One drive behind the chipset: nothing shared among the listed drives.
    assert_eq!(r["findings"], serde_json::json!([]));
    assert_eq!(r["summary"], "3 NVMe controllers, 1 warning");
}

#[test]
fn reference_array_raid0_is_held_back_by_the_x2_member() {
    let r = report("reference", &["/mnt/models"]);
    assert_eq!(r["scope"], "mount");
    let a = &r["array"];
    assert_eq!(a["fsid"], "0d5a1c9e-4c1b-4f3e-9a57-6f2b8e3c1d42");
    assert_eq!(a["data_profiles"], serde_json::json!(["raid0"]));
    let members: Vec<&str> = a["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["block_device"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["nvme0n1p2", "nvme1n1", "nvme2n1"]);
    assert_eq!(a["members"][0]["rests_on"], serde_json::json!(["nvme0"]));
    let c = &a["ceilings"][0];
    assert_eq!(c["profile"], "raid0");
    assert_eq!(gbps(&c["one_reader"]), 11.82);
    // 3.55 × 3 ≈ 10.6 GB/s measured on the reference machine.
    let high = c["one_reader"]["practical_high_bytes_per_sec"]
        .as_f64()
        .unwrap();
    assert!((10.5e9..10.7e9).contains(&high), "{high}");
    assert_eq!(c["held_back_by"], serde_json::json!(["nvme1n1"]));
    assert_eq!(gbps(&c["balanced"]), 19.69);
    assert_eq!(gbps(&c["potential"]), 23.63);
    // The partition nvme0n1p2 is followed to its drive.
    assert_eq!(
        device(&r, "nvme0")["block_devices"],
        serde_json::json!(["nvme0n1p2"])
    );
}

#[test]
fn the_ceiling_before_and_after_adding_a_device() {
    // What `device add` shows: adding the x2 drive to a two-drive RAID0
    // makes it slower.
    let root = SysRoot::new(fixture("reference"));
    let before = array_ceiling_for_block_devices(
        &root,
        &[PathBuf::from("/dev/nvme0n1p2"), PathBuf::from("nvme2n1")],
        Profile::Raid0,
    )
    .unwrap();
    let after = array_ceiling_for_block_devices(
        &root,
        &[
            PathBuf::from("/dev/nvme0n1p2"),
            PathBuf::from("nvme2n1"),
            PathBuf::from("/dev/nvme1n1"),
        ],
        Profile::Raid0,
    )
    .unwrap();
    let b = before.one_reader.unwrap().encoded_bytes_per_sec;
    let a = after.one_reader.unwrap().encoded_bytes_per_sec;
    assert_eq!(b, 15_753_846_154);
    assert_eq!(a, 11_815_384_615);
    assert_eq!(after.held_back_by, ["nvme1n1"]);
    assert!(
        array_ceiling_for_block_devices(&root, &[PathBuf::from("sdz")], Profile::Raid0).is_err()
    );
    let loops = array_ceiling_for_block_devices(
        &SysRoot::new(fixture("no-nvme")),
        &[PathBuf::from("loop0"), PathBuf::from("sda")],
        Profile::Raid1,
    )
    .unwrap();
    assert!(loops.one_reader.is_none());
    assert_eq!(loops.without_link_info, ["loop0", "sda"]);
}

#[test]
fn gen5_drive_in_a_gen4_slot_is_capped_by_speed() {
    let r = report("gen5-in-gen4", &["/data"]);
    let nvme0 = device(&r, "nvme0");
    assert_eq!(finding_kinds(nvme0), ["capped-by-port"]);
    assert!(
        nvme0["findings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("is Gen4, the drive Gen5")
    );
    assert_eq!(gbps(&nvme0["ceiling"]), 7.88);
    assert_eq!(gbps(&nvme0["potential"]), 15.75);
    // The other two are on Intel PCH root ports and share the DMI link.
    for n in ["nvme1", "nvme2"] {
        assert_eq!(finding_kinds(device(&r, n)), ["behind-chipset"]);
    }
    assert_eq!(r["findings"][0]["kind"], "shared-uplink");
    assert_eq!(
        r["findings"][0]["devices"],
        serde_json::json!(["nvme1", "nvme2"])
    );
    // LUKS members are followed to their drives.
    let a = &r["array"];
    assert_eq!(a["members"][0]["block_device"], "dm-0");
    assert_eq!(a["members"][0]["rests_on"], serde_json::json!(["nvme0"]));
    let c = &a["ceilings"][0];
    assert_eq!(c["profile"], "raid1");
    assert_eq!(gbps(&c["one_reader"]), 7.88);
    assert_eq!(gbps(&c["many_readers"]), 23.63);
    assert_eq!(gbps(&c["potential"]), 15.75);
    assert_eq!(c["held_back_by"], serde_json::json!([]));
}

#[test]
fn degraded_link_x1_of_x4() {
    let r = report("degraded", &[]);
    let nvme0 = device(&r, "nvme0");
    assert_eq!(finding_kinds(nvme0), ["degraded"]);
    assert_eq!(nvme0["findings"][0]["severity"], "warning");
    assert_eq!(gbps(&nvme0["ceiling"]), 1.97);
    assert_eq!(nvme0["ceiling"]["width"], 1);
    assert_eq!(gbps(&nvme0["potential"]), 7.88);
}

#[test]
fn four_drives_behind_a_switch_in_an_x8_slot_share_its_uplink() {
    let r = report("pcie-switch", &["/srv/scratch"]);
    assert_eq!(r["devices"].as_array().unwrap().len(), 4);
    for n in ["nvme0", "nvme1", "nvme2", "nvme3"] {
        let d = device(&r, n);
        assert!(finding_kinds(d).is_empty(), "{n}");
        assert_eq!(gbps(&d["ceiling"]), 3.94);
        assert_eq!(d["hops"].as_array().unwrap().len(), 4);
    }
    let shared = &r["findings"][0];
    assert_eq!(shared["kind"], "shared-uplink");
    assert_eq!(shared["severity"], "warning");
    assert_eq!(shared["devices"].as_array().unwrap().len(), 4);
    let msg = shared["message"].as_str().unwrap();
    assert!(msg.contains("could run x16"), "{msg}");
    assert!(msg.contains("at most 7.88 GB/s"), "{msg}");
    let c = &r["array"]["ceilings"][0];
    assert_eq!(gbps(&c["one_reader"]), 7.88);
    assert_eq!(gbps(&c["potential"]), 15.75);
    assert!(
        c["held_back_by"][0]
            .as_str()
            .unwrap()
            .contains("shared by 4 members")
    );
}

#[test]
fn no_nvme_fixture_says_so_in_one_line() {
    let root = fixture("no-nvme");
    let (code, out, err) = links(&["--sysroot", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "no NVMe controllers found\n");
    assert!(err.is_empty());
    let r = report("no-nvme", &[]);
    assert_eq!(r["devices"], serde_json::json!([]));
}

#[test]
fn devices_without_link_information_are_listed_as_such() {
    let r = report("no-nvme", &["/mnt/scratch"]);
    assert_eq!(device(&r, "sda")["kind"], "sata");
    assert_eq!(device(&r, "loop0")["kind"], "loop");
    for d in r["devices"].as_array().unwrap() {
        assert!(d["ceiling"].is_null());
        // The note names the device it has no information for.
        let note = d["note"].as_str().unwrap();
        let name = d["name"].as_str().unwrap();
        assert!(
            note.starts_with(&format!("no PCIe link information for {name}: ")),
            "{note}"
        );
    }
    assert_eq!(
        r["summary"],
        "2 other devices without PCIe link information (loop0, sda), no warnings"
    );
    let c = &r["array"]["ceilings"][0];
    assert!(c["one_reader"].is_null());
    assert_eq!(c["without_link_info"], serde_json::json!(["loop0", "sda"]));

    let named = report("no-nvme", &["/dev/vda1", "loop1"]);
    assert_eq!(named["scope"], "devices");
    assert_eq!(device(&named, "vda")["kind"], "virtio");
    assert_eq!(
        device(&named, "vda")["block_devices"],
        serde_json::json!(["vda1"])
    );

    let r = report("no-link-info", &["/mnt/remote"]);
    let fabrics = device(&r, "nvme0");
    assert_eq!(fabrics["kind"], "nvme-fabrics");
    assert_eq!(fabrics["transport"], "tcp");
    // The multipath head nvme0n1 is followed to its controller.
    assert_eq!(fabrics["block_devices"], serde_json::json!(["nvme0n1"]));
    let emulated = device(&r, "nvme1");
    assert_eq!(emulated["kind"], "nvme");
    assert!(emulated["ceiling"].is_null());
    assert!(
        emulated["note"]
            .as_str()
            .unwrap()
            .contains("not a PCIe device")
    );
    assert_eq!(r["array"]["data_profiles"], serde_json::json!(["single"]));
}

#[test]
fn thermal_counters_from_captured_log_pages() {
    let r = report("reference", &["--thermal"]);
    let t = &device(&r, "nvme2")["thermal"];
    assert_shape(
        t,
        &[
            ("temperature_celsius", "number"),
            ("temperature_warning", "bool"),
            ("warning_temperature_seconds", "number"),
            ("critical_temperature_seconds", "number"),
            ("tmt1.transitions", "number"),
            ("tmt1.seconds", "number"),
            ("tmt2.transitions", "number"),
            ("tmt2.seconds", "number"),
            ("sensors_celsius", "array"),
            ("available_spare_percent", "number"),
            ("percentage_used", "number"),
            ("power_on_hours", "number"),
        ],
    );
    assert_eq!(t["temperature_celsius"], 52);
    assert_eq!(t["tmt1"]["transitions"], 12);
    assert_eq!(t["tmt1"]["seconds"], 340);
    assert_eq!(t["tmt2"]["transitions"], 0);
    assert_eq!(t["warning_temperature_seconds"], 180);
    assert_eq!(t["power_on_hours"], 4321);
    assert!(device(&r, "nvme0")["thermal_error"].is_null());
    // Without --thermal nothing is read.
    assert!(device(&report("reference", &[]), "nvme2")["thermal"].is_null());
    // A controller without a captured page: said in the report, not fatal.
    let r = report("no-link-info", &["--thermal"]);
    assert!(device(&r, "nvme0")["thermal"].is_object());
    assert!(
        device(&r, "nvme1")["thermal_error"]
            .as_str()
            .unwrap()
            .contains("nvme-smart-log/nvme1")
    );
}

#[test]
fn json_shape() {
    let r = report("reference", &["/mnt/models"]);
    assert_shape(
        &r,
        &[
            ("sysroot", "string"),
            ("scope", "string"),
            ("devices", "array"),
            ("findings", "array"),
            ("array", "object"),
            ("summary", "string"),
            ("devices.0.name", "string"),
            ("devices.0.kind", "string"),
            ("devices.0.block_devices", "array"),
            ("devices.0.model", "string|null"),
            ("devices.0.serial", "string|null"),
            ("devices.0.firmware", "string|null"),
            ("devices.0.transport", "string|null"),
            ("devices.0.pci_address", "string|null"),
            ("devices.0.hops", "array"),
            ("devices.0.hops.0.address", "string"),
            ("devices.0.hops.0.role", "string"),
            ("devices.0.hops.0.chipset", "bool"),
            ("devices.0.hops.0.vendor_id", "string|null"),
            ("devices.0.hops.0.device_id", "string|null"),
            ("devices.0.hops.0.generation", "number|null"),
            ("devices.0.hops.0.speed_gts", "number|null"),
            ("devices.0.hops.0.width", "number|null"),
            ("devices.0.hops.0.max_generation", "number|null"),
            ("devices.0.hops.0.max_speed_gts", "number|null"),
            ("devices.0.hops.0.max_width", "number|null"),
            ("devices.0.ceiling", "object|null"),
            ("devices.0.ceiling.encoded_bytes_per_sec", "number"),
            ("devices.0.ceiling.practical_low_bytes_per_sec", "number"),
            ("devices.0.ceiling.practical_high_bytes_per_sec", "number"),
            ("devices.0.ceiling.generation", "number"),
            ("devices.0.ceiling.width", "number"),
            ("devices.0.ceiling.limited_by", "string"),
            ("devices.0.ceiling.limited_by_link", "string"),
            ("devices.0.potential", "object|null"),
            ("devices.0.findings", "array"),
            ("devices.0.note", "string|null"),
            ("devices.0.thermal", "object|null"),
            ("devices.0.thermal_error", "string|null"),
            ("devices.1.findings.0.kind", "string"),
            ("devices.1.findings.0.severity", "string"),
            ("devices.1.findings.0.devices", "array"),
            ("devices.1.findings.0.message", "string"),
            ("devices.1.findings.0.hint", "string|null"),
            ("array.mount", "string"),
            ("array.fsid", "string|null"),
            ("array.data_profiles", "array"),
            ("array.members.0.device", "string"),
            ("array.members.0.block_device", "string|null"),
            ("array.members.0.rests_on", "array"),
            ("array.members.0.ceiling", "object|null"),
            ("array.ceilings.0.profile", "string"),
            ("array.ceilings.0.members", "number"),
            ("array.ceilings.0.one_reader", "object|null"),
            ("array.ceilings.0.one_reader_low", "object|null"),
            ("array.ceilings.0.many_readers", "object|null"),
            ("array.ceilings.0.balanced", "object|null"),
            ("array.ceilings.0.potential", "object|null"),
            ("array.ceilings.0.held_back_by", "array"),
            ("array.ceilings.0.without_link_info", "array"),
            ("array.ceilings.0.summary", "string"),
        ],
    );
    let all = report("reference", &[]);
    assert_shape(&all, &[("array", "null")]);
}

/// `BTRFS_LAB_SYSROOT` selects a tree for an unprivileged user; as root it
/// is ignored (a note says so) and only `--sysroot` selects one.
#[test]
fn the_environment_variable_selects_the_sysroot_only_without_root() {
    let degraded = |out: &str| json(out)["devices"][0]["findings"][0]["kind"].clone();
    if !rustix::process::geteuid().is_root() {
        let (code, out, err) = run(std::process::Command::new(bin())
            .args(["links", "--json"])
            .env("BTRFS_LAB_SYSROOT", fixture("degraded")));
        assert_eq!(code, 0, "{err}");
        assert_eq!(degraded(&out), "degraded");
        return;
    }
    let (code, out, err) = run(std::process::Command::new(bin())
        .args(["links", "--json"])
        .env("BTRFS_LAB_SYSROOT", fixture("degraded")));
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["sysroot"], "/", "the running system was read");
    assert_eq!(
        err.trim_end(),
        format!(
            "btrfs-lab: note: BTRFS_LAB_SYSROOT is ignored when running as root; give --sysroot {} to read that tree",
            fixture("degraded").display()
        )
    );
    // --sysroot wins, without a note.
    let (code, out, err) = run(std::process::Command::new(bin())
        .args(["links", "--json", "--sysroot"])
        .arg(fixture("degraded"))
        .env("BTRFS_LAB_SYSROOT", fixture("reference")));
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    assert_eq!(degraded(&out), "degraded");
    // An unprivileged user still selects the tree with the variable.
    let env = TestEnv::new();
    let (code, out, err) = run(env
        .as_nobody(&[])
        .args(["links", "--json"])
        .env("BTRFS_LAB_SYSROOT", fixture("degraded")));
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    assert_eq!(degraded(&out), "degraded");
}

/// Runs `links ARGS` in a child limited to 1 GiB of address space, killed
/// if it has not finished after 60 s (a hang, not a slow run: the reads
/// here take milliseconds). Returns (status, stdout, stderr), or panics on
/// a hang.
fn links_bounded(args: &[&str]) -> (Option<i32>, String, String) {
    use std::io::Read;
    let mut child = std::process::Command::new("prlimit")
        .arg("--as=1073741824")
        .arg("--")
        .arg(bin())
        .arg("links")
        .args(args)
        .env_remove("BTRFS_LAB_SYSROOT")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut waited = 0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if waited >= 600 {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("links {args:?} hung: killed after 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        waited += 1;
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), out, err)
}

/// A captured tree is input: an attribute that is a link to /dev/zero, a
/// FIFO, a link to a root-only file outside the tree, or a huge file is
/// skipped (never read without a limit, never a hang, never printed).
#[test]
fn hostile_attributes_are_skipped_with_bounded_reads() {
    let t = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("shadow");
    fs::write(&secret, "ROOT-ONLY-SECRET\n").unwrap();
    fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let sys = t.path().join("sys");
    let f = sys.join("devices/pci0000:00/0000:00:01.1/0000:01:00.0");
    let ctrl = f.join("nvme/nvme0");
    fs::create_dir_all(&ctrl).unwrap();
    for (file, v) in [
        ("current_link_speed", "16.0 GT/s PCIe\n"),
        ("max_link_speed", "16.0 GT/s PCIe\n"),
        ("max_link_width", "4\n"),
        ("class", "0x010802\n"),
    ] {
        fs::write(f.join(file), v).unwrap();
    }
    // The width a FIFO (no writer: a blocking open or read hangs).
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.join("current_link_width"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    std::os::unix::fs::symlink("/dev/zero", ctrl.join("model")).unwrap();
    std::os::unix::fs::symlink(&secret, ctrl.join("serial")).unwrap();
    fs::write(ctrl.join("firmware_rev"), vec![b'7'; 1 << 20]).unwrap();
    fs::write(ctrl.join("transport"), "pcie\n").unwrap();
    std::os::unix::fs::symlink("../../../0000:01:00.0", ctrl.join("device")).unwrap();
    fs::create_dir_all(sys.join("class/nvme")).unwrap();
    std::os::unix::fs::symlink(
        "../../devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0",
        sys.join("class/nvme/nvme0"),
    )
    .unwrap();
    // A controller whose directory link leads out of the tree, to a
    // directory whose `model` is the secret.
    fs::create_dir_all(outside.path().join("nvme1")).unwrap();
    fs::copy(&secret, outside.path().join("nvme1/model")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("nvme1"), sys.join("class/nvme/nvme1")).unwrap();
    // The captured SMART log a link to /dev/zero.
    fs::create_dir_all(t.path().join("nvme-smart-log")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", t.path().join("nvme-smart-log/nvme0")).unwrap();

    let root = t.path().to_str().unwrap();
    let (code, out, err) = links_bounded(&["--sysroot", root, "--json", "--thermal"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("ROOT-ONLY-SECRET"), "{out}");
    assert!(!err.contains("ROOT-ONLY-SECRET"), "{err}");
    let r = json(&out);
    let nvme0 = device(&r, "nvme0");
    assert!(nvme0["model"].is_null(), "{nvme0:#}");
    assert!(nvme0["serial"].is_null(), "{nvme0:#}");
    assert!(nvme0["firmware"].is_null(), "{nvme0:#}");
    // The other attributes are read: the width (a FIFO) is unknown.
    assert!(nvme0["thermal_error"].is_string(), "{nvme0:#}");
    let hop = &nvme0["hops"][0];
    assert_eq!(hop["speed_gts"], 16.0, "{hop:#}");
    assert_eq!(hop["max_width"], 4, "{hop:#}");
    assert!(hop["width"].is_null(), "{hop:#}");
    let (code, out, err) = links_bounded(&["--sysroot", root]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains("ROOT-ONLY-SECRET"), "{out}");
}

#[test]
fn bad_input_gives_one_line_and_no_stdout() {
    let reference = fixture("reference");
    let r = reference.to_str().unwrap();
    let t = tempfile::tempdir().unwrap();
    let empty = t.path().to_str().unwrap();
    for (args, code, want) in [
        (
            vec!["--sysroot", r, "nvme9"],
            1,
            "nvme9 is neither a block device nor an NVMe controller",
        ),
        (
            vec!["--sysroot", r, "../../etc"],
            1,
            "is neither a block device",
        ),
        (
            vec!["--sysroot", r, "/mnt/models", "nvme0"],
            2,
            "give one mounted btrfs, or devices",
        ),
        (
            vec!["--sysroot", r, "/boot/efi"],
            1,
            "/boot/efi is not on a btrfs filesystem (it is on vfat)",
        ),
        (
            vec!["--sysroot", r, "/mnt/model"],
            1,
            "/mnt/model is not a mount point of the captured tree",
        ),
        (
            vec!["--sysroot", "/nonexistent/x"],
            1,
            "sysroot /nonexistent/x is not a directory",
        ),
        (vec!["--sysroot", empty], 1, "has no sys/ directory"),
        (vec!["--bogus"], 2, "unexpected argument"),
        (vec![""], 2, "an empty device name"),
        (
            vec!["/etc/passwd"],
            1,
            "is not a block device or an NVMe controller",
        ),
        (
            vec!["/dev/null"],
            1,
            "is not a block device or an NVMe controller",
        ),
        (vec!["/nonexistent/dev"], 1, "no such file or directory"),
    ] {
        let (c, out, err) = links(&args);
        assert_eq!(c, code, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.starts_with("btrfs-lab: error: "), "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(err.lines().count() <= 2, "{err}");
    }
}

#[test]
fn odd_trees_do_not_panic() {
    // Garbage attributes, dangling and looping links, links out of the tree.
    let t = tempfile::tempdir().unwrap();
    let sys = t.path().join("sys");
    let f = sys.join("devices/pci0000:00/0000:00:01.1/0000:01:00.0");
    let ctrl = f.join("nvme/nvme0");
    fs::create_dir_all(&ctrl).unwrap();
    for (file, v) in [
        ("current_link_speed", "Unknown\n"),
        ("current_link_width", "-1\n"),
        ("max_link_speed", "\u{fffd}\n"),
        ("max_link_width", "99999999999\n"),
        ("vendor", "zzz\n"),
    ] {
        fs::write(f.join(file), v).unwrap();
    }
    std::os::unix::fs::symlink("../../../0000:01:00.0", ctrl.join("device")).unwrap();
    fs::create_dir_all(sys.join("class/nvme")).unwrap();
    fs::create_dir_all(sys.join("class/block")).unwrap();
    std::os::unix::fs::symlink(
        "../../devices/pci0000:00/0000:00:01.1/0000:01:00.0/nvme/nvme0",
        sys.join("class/nvme/nvme0"),
    )
    .unwrap();
    std::os::unix::fs::symlink("nvme1", sys.join("class/nvme/nvme1")).unwrap();
    std::os::unix::fs::symlink("/etc", sys.join("class/nvme/nvme2")).unwrap();
    std::os::unix::fs::symlink("/dev/sda", sys.join("class/block/sda")).unwrap();
    let root = t.path().to_str().unwrap();
    let (code, out, err) = links(&["--sysroot", root, "--json", "--thermal"]);
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    let nvme0 = device(&r, "nvme0");
    assert!(nvme0["ceiling"].is_null());
    assert!(nvme0["note"].as_str().unwrap().contains("unknown"));
    assert!(nvme0["thermal_error"].is_string());
    let (code, _, err) = links(&["--sysroot", root, "sda"]);
    assert_eq!(code, 1, "{err}");
    let (code, _, err) = links(&["--sysroot", root]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn this_machine_without_nvme_says_so_in_one_line() {
    let has_nvme = fs::read_dir("/sys/class/nvme").is_ok_and(|mut d| d.next().is_some());
    let (code, out, err) = links(&[]);
    assert_eq!(code, 0, "{err}");
    if has_nvme {
        eprintln!("this machine has NVMe controllers: checking the report only");
        assert!(out.contains("NVMe controller"), "{out}");
    } else {
        assert_eq!(out, "no NVMe controllers found\n");
        assert!(err.is_empty(), "{err}");
        let (code, out, _) = links(&["--thermal", "--json"]);
        assert_eq!(code, 0);
        assert_eq!(json(&out)["devices"], serde_json::json!([]));
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_real_btrfs_on_loop_devices_lists_its_members_without_link_information() {
    if !require_root("links on a btrfs of loop devices") {
        return;
    }
    let mut env = TestEnv::new();
    let tmpfs = env.tmpfs("not-btrfs");
    let sandbox = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 512 << 20,
        fs: FsKind::Btrfs,
        data: Some(Profile::Raid0),
        ..SandboxRequest::default()
    });
    let mount = sandbox.mount_point().to_str().unwrap().to_owned();
    let (code, out, err) = links(&[&mount, "--json"]);
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    assert_eq!(r["scope"], "mount");
    let a = &r["array"];
    assert_eq!(a["data_profiles"], serde_json::json!(["raid0"]));
    assert_eq!(a["members"].as_array().unwrap().len(), 2);
    for m in a["members"].as_array().unwrap() {
        assert!(
            m["device"].as_str().unwrap().starts_with("/dev/loop"),
            "{m}"
        );
        assert!(
            m["block_device"].as_str().unwrap().starts_with("loop"),
            "{m}"
        );
    }
    // The loop devices are followed to the disk that holds their backing
    // files, found here independently: the files' st_dev in /sys/dev/block.
    let loops: Vec<String> = a["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["block_device"].as_str().unwrap().to_owned())
        .collect();
    let backing_disk = |lp: &str| -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let file = fs::read_to_string(format!("/sys/block/{lp}/loop/backing_file")).unwrap();
        let dev = fs::metadata(file.trim()).unwrap().dev();
        let (maj, min) = (libc::major(dev), libc::minor(dev));
        if maj == 0 {
            return None; // btrfs, tmpfs: no single block device number
        }
        let mut dir = fs::canonicalize(format!("/sys/dev/block/{maj}:{min}")).unwrap();
        if dir.join("partition").exists() {
            dir.pop();
        }
        Some(dir.file_name().unwrap().to_string_lossy().into_owned())
    };
    let devices = r["devices"].as_array().unwrap();
    let behind: Vec<Option<String>> = loops.iter().map(|l| backing_disk(l)).collect();
    for (lp, disk) in loops.iter().zip(&behind) {
        let Some(disk) = disk else { continue };
        let d = devices
            .iter()
            .find(|d| d["name"] == disk.as_str())
            .unwrap_or_else(|| {
                panic!("{lp} is backed by {disk}, which links does not name: {r:#}")
            });
        assert_ne!(d["kind"], "loop", "{d:#}");
        assert!(
            d["block_devices"]
                .as_array()
                .unwrap()
                .contains(&Value::from(lp.as_str())),
            "{d:#}"
        );
        let layer = d["through_loops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["device"] == lp.as_str())
            .unwrap_or_else(|| panic!("no loop layer {lp}: {d:#}"));
        assert!(
            layer["backing_file"].as_str().unwrap().ends_with(".img"),
            "{layer}"
        );
        assert_eq!(layer["devices"], serde_json::json!([disk]));
    }
    assert!(
        behind.iter().any(Option::is_some) || devices.iter().all(|d| d["kind"] == "loop"),
        "{r:#}"
    );
    // Both images on one disk (found independently above): links says so.
    if let [Some(a), Some(b)] = &behind[..]
        && a == b
    {
        let f = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == "shared-disk")
            .unwrap_or_else(|| panic!("two members on {a}, not said: {r:#}"));
        assert_eq!(f["devices"], serde_json::json!(loops), "{f}");
    }
    assert!(a["ceilings"][0]["one_reader"].is_null());
    assert_eq!(
        a["ceilings"][0]["without_link_info"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(a["fsid"].is_string());

    // A subdirectory of the mount works as well; a member device by path too.
    let sub = sandbox.mount_point().join("sub");
    fs::create_dir(&sub).unwrap();
    let (code, out, err) = links(&[sub.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("array "), "{out}");
    let member = a["members"][0]["device"].as_str().unwrap().to_owned();
    let (code, out, err) = links(&[&member, "--json"]);
    assert_eq!(code, 0, "{err}");
    let one = json(&out);
    match &behind[0] {
        Some(disk) => assert_eq!(one["devices"][0]["name"], disk.as_str(), "{one:#}"),
        None => assert_eq!(one["devices"][0]["kind"], "loop"),
    }
    let (code, text, _) = links(&[&member]);
    assert_eq!(code, 0);
    assert!(
        text.contains(&format!("via {}: backing file ", loops[0])),
        "{text}"
    );

    // A directory on another filesystem is refused in one line and a hint.
    let (code, out, err) = links(&[tmpfs.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("is not on a btrfs filesystem"), "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");
}

/// A loop device is followed to the disk behind its backing file (the
/// layout of this project's machine: ext4 on virtio vda); one on tmpfs
/// stays a loop device.
#[test]
fn loop_devices_are_followed_to_the_virtio_disk_behind_them() {
    let r = report("loop-on-virtio", &["/var/tmp/sbx/mnt"]);
    let devices = r["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{r:#}");
    let vda = device(&r, "vda");
    assert_eq!(vda["kind"], "virtio");
    assert_eq!(vda["block_devices"], serde_json::json!(["loop0", "loop1"]));
    let layers = vda["through_loops"].as_array().unwrap();
    assert_eq!(layers.len(), 2);
    assert_eq!(layers[0]["device"], "loop0");
    assert_eq!(layers[0]["backing_file"], "/var/tmp/sbx/dev0.img");
    assert_eq!(layers[0]["fs_type"], "ext4");
    assert_eq!(layers[0]["mount_point"], "/");
    assert_eq!(layers[0]["devices"], serde_json::json!(["vda"]));
    assert!(vda["note"].as_str().unwrap().contains("virtio"));
    let members = r["array"]["members"].as_array().unwrap();
    for m in members {
        assert_eq!(m["rests_on"], serde_json::json!(["vda"]), "{m}");
    }
    // Two members on one disk: said, as a note for RAID0 (no copies lost).
    let shared: Vec<&Value> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "shared-disk")
        .collect();
    assert_eq!(shared.len(), 1, "{r:#}");
    assert_eq!(shared[0]["devices"], serde_json::json!(["loop0", "loop1"]));
    assert_eq!(shared[0]["severity"], "info");
    assert!(
        shared[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("loop0, loop1 are one drive (vda)"),
        "{}",
        shared[0]
    );
    // A loop over a file in memory: nothing behind it to follow.
    let r = report("loop-on-virtio", &["loop2"]);
    let lp = device(&r, "loop2");
    assert_eq!(lp["kind"], "loop");
    assert_eq!(lp["through_loops"][0]["fs_type"], "tmpfs");
    assert_eq!(lp["through_loops"][0]["devices"], serde_json::json!([]));
    // Text: the way through the loop device, and the disk named.
    let (code, text, err) = links(&[
        "--sysroot",
        fixture("loop-on-virtio").to_str().unwrap(),
        "loop1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(text.starts_with("vda  (loop1)\n"), "{text}");
    assert!(
        text.contains("via loop1: backing file /var/tmp/sbx/dev1.img on ext4 (/), device vda"),
        "{text}"
    );
}
