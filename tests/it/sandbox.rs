//! `sandbox up | down | list` on real loop devices.

use std::fs;
use std::path::PathBuf;
use std::thread;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::state::{DeviceRecord, SandboxRecord};
use btrfs_lab::sandbox::{FsKind, SandboxRequest, plan_up};
use btrfs_lab::sys::loopdev::{self, FileIdentity};

use crate::common::{TestEnv, assert_shape, json, require_root, run};

#[test]
fn up_list_down_through_the_cli() {
    if !require_root("sandbox up/list/down") {
        return;
    }
    let env = TestEnv::new();
    let (code, stdout, stderr) = run(env.cmd().args([
        "sandbox",
        "up",
        "--json",
        "--name",
        "cli",
        "--devices",
        "3",
        "--size",
        "512M",
        "--data",
        "raid0",
        "--metadata",
        "raid1c3",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let up = json(&stdout);
    assert_shape(
        &up,
        &[
            ("name", "string"),
            ("fs", "string"),
            ("mount_point", "string"),
            ("dir", "string"),
            ("size_bytes", "number"),
            ("devices", "array"),
            ("devices.0.loop_device", "string"),
            ("devices.0.image", "string"),
            ("devices.0.direct_io", "bool"),
            ("data_profiles", "array"),
            ("metadata_profiles", "array"),
            ("state_file", "string"),
        ],
    );
    assert_eq!(up["data_profiles"], serde_json::json!(["raid0"]));
    assert_eq!(up["metadata_profiles"], serde_json::json!(["raid1c3"]));
    let mnt = PathBuf::from(up["mount_point"].as_str().unwrap());
    let devices: Vec<String> = up["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["loop_device"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(devices.len(), 3);
    for d in &devices {
        let n = d.trim_start_matches("/dev/loop");
        let dio = fs::read_to_string(format!("/sys/block/loop{n}/loop/dio")).unwrap();
        assert_eq!(dio.trim(), "1", "{d} must do direct I/O");
    }
    // btrfs itself agrees on the profiles.
    let fi = std::process::Command::new("btrfs")
        .args(["filesystem", "df"])
        .arg(&mnt)
        .output()
        .unwrap();
    let fi = String::from_utf8_lossy(&fi.stdout);
    assert!(fi.contains("Data, RAID0"), "{fi}");
    assert!(fi.contains("Metadata, RAID1C3"), "{fi}");

    let (code, stdout, _) = run(env.cmd().args(["sandbox", "list", "--json"]));
    assert_eq!(code, 0);
    let list = json(&stdout);
    assert_eq!(list["sandboxes"][0]["name"], "cli");
    assert_eq!(list["sandboxes"][0]["state"], "up");
    assert_eq!(list["sandboxes"][0]["mounted"], true);

    // Without --yes and without a terminal, down refuses and changes nothing.
    let (code, _, stderr) = run(env.cmd().args(["sandbox", "down"]).arg(&mnt));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--yes"));
    assert!(env.leftovers().iter().any(|l| l.starts_with("mount")));

    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["sandbox", "down", "--yes", "--json"])
        .arg(&mnt));
    assert_eq!(code, 0, "{stderr}");
    let down = json(&stdout);
    assert_eq!(down["removed"][0]["name"], "cli");
    assert_eq!(down["removed"][0]["detached"].as_array().unwrap().len(), 3);
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    assert!(!env.sandbox_root().join("cli").exists());
    assert!(env.store().load_all().unwrap().is_empty());
    let (_, stdout, _) = run(env.cmd().args(["sandbox", "list"]));
    assert_eq!(stdout, "no sandboxes\n");
}

#[test]
fn guard_tears_down_on_panic() {
    if !require_root("sandbox guard") {
        return;
    }
    let env = TestEnv::new();
    let store = env.store();
    let root = env.sandbox_root();
    let result = thread::spawn(move || {
        let plan = plan_up(&SandboxRequest::default(), &root, "panics").unwrap();
        let _sbx = btrfs_lab::sandbox::Sandbox::up(&plan, &store).unwrap();
        panic!("test panic while a sandbox is up");
    })
    .join();
    assert!(result.is_err());
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    assert!(env.store().load_all().unwrap().is_empty());
}

/// `up` crashed after attaching a loop device but before recording it: the
/// device was attached with autoclear, held open, so the kernel frees it
/// when the process dies; `down` then removes the rest.
#[test]
fn down_cleans_up_after_a_crashed_up() {
    if !require_root("sandbox down after a crash") {
        return;
    }
    let env = TestEnv::new();
    let plan = plan_up(&SandboxRequest::default(), &env.sandbox_root(), "crashed").unwrap();
    fs::create_dir_all(&plan.dir).unwrap();
    let image = &plan.images[0];
    let f = fs::File::create_new(image).unwrap();
    f.set_len(plan.size_bytes).unwrap();
    let identity = FileIdentity::of(&f).unwrap();
    let mut record = SandboxRecord::new(&plan);
    record.dir_created = true;
    record.dir_identity = Some(FileIdentity::of(&fs::File::open(&plan.dir).unwrap()).unwrap());
    record.devices.push(DeviceRecord {
        image: image.clone(),
        identity: Some(identity),
        loop_device: None,
        diskseq: None,
    });
    env.store().create(&record).unwrap();
    let attached = loopdev::attach_file(&f, image, true).unwrap();
    assert_eq!(env.leftovers().len(), 1);
    // The crash: the process's descriptors close.
    drop(attached);
    drop(f);
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());

    let (_, stdout, _) = run(env.cmd().args(["sandbox", "list", "--json"]));
    assert_eq!(json(&stdout)["sandboxes"][0]["state"], "down");
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "crashed"]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "sandbox crashed removed: deleted 2 files and directories\n"
    );
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    assert!(!plan.dir.exists());
}

/// A record that names a loop device now bound to someone else's file, and a
/// mount point where something else is mounted: `down` touches neither.
#[test]
fn down_never_touches_what_it_did_not_make() {
    if !require_root("sandbox down safety") {
        return;
    }
    let mut env = TestEnv::new();
    let plan = plan_up(&SandboxRequest::default(), &env.sandbox_root(), "foreign").unwrap();
    fs::create_dir_all(&plan.dir).unwrap();
    // Someone else's file on a loop device; our record claims that device.
    let theirs = env.path().join("theirs.img");
    fs::File::create_new(&theirs)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let their_dev = loopdev::attach(&theirs, false).unwrap();
    let ours = &plan.images[0];
    let f = fs::File::create_new(ours).unwrap();
    f.set_len(plan.size_bytes).unwrap();
    let mut record = SandboxRecord::new(&plan);
    record.devices.push(DeviceRecord {
        image: ours.clone(),
        identity: Some(FileIdentity::of(&f).unwrap()),
        loop_device: Some(their_dev.path.clone()),
        diskseq: None,
    });
    // Something else mounted at our mount point.
    fs::create_dir_all(&plan.mount_point).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &plan.mount_point,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .unwrap();
    env.track_mount(plan.mount_point.clone());
    env.store().create(&record).unwrap();

    let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "foreign"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("did not mount"), "{stderr}");
    assert!(
        env.leftovers().iter().any(|l| l.starts_with("mount")),
        "the foreign mount must stay"
    );

    nix::mount::umount2(&plan.mount_point, nix::mount::MntFlags::empty()).unwrap();
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "foreign"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("is no longer the attachment sandbox up made; left alone"),
        "{stdout}"
    );
    assert_eq!(
        loopdev::backing_identity(&their_dev.path).unwrap(),
        Some(FileIdentity::of(&fs::File::open(&theirs).unwrap()).unwrap()),
        "their loop device must still be attached"
    );
    assert!(!ours.exists());
    let who = FileIdentity::of(&fs::File::open(&theirs).unwrap()).unwrap();
    loopdev::detach_if_ours(&btrfs_lab::sys::root::SysRoot::host(), &their_dev.path, who).unwrap();
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

#[test]
fn failed_mkfs_leaves_nothing_behind() {
    if !require_root("sandbox up failure") {
        return;
    }
    let env = TestEnv::new();
    let (code, stdout, stderr) = run(env.cmd().args([
        "sandbox",
        "up",
        "--name",
        "bad",
        "--mkfs-arg",
        "--no-such-option",
    ]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("btrfs-lab: error: mkfs.btrfs failed"),
        "{stderr}"
    );
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    assert!(!env.sandbox_root().join("bad").exists());
    assert!(env.store().load_all().unwrap().is_empty());
}

#[test]
fn refusals_are_one_line_and_change_nothing() {
    if !require_root("sandbox refusals") {
        return;
    }
    let mut env = TestEnv::new();
    let tmp = env.tmpfs("ram");
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec![
                "--devices".into(),
                "2".into(),
                "--metadata".into(),
                "raid1c3".into(),
            ],
            2,
            "needs at least 3 devices",
        ),
        (
            vec!["--devices".into(), "0".into()],
            2,
            "--devices must be between",
        ),
        (vec!["--size".into(), "10M".into()], 2, "too small"),
        (vec!["--data".into(), "raid7".into()], 2, "unknown profile"),
        (
            vec!["--name".into(), "Bad Name".into()],
            2,
            "invalid sandbox name",
        ),
        (
            vec!["--fs".into(), "ext4".into(), "--devices".into(), "2".into()],
            2,
            "exactly one device",
        ),
        (
            vec!["--dir".into(), tmp.join("sbx").display().to_string()],
            1,
            "cannot back loop devices",
        ),
    ];
    for (args, want_code, want) in cases {
        let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "up"]).args(&args));
        assert_eq!(code, want_code, "{args:?}: {stderr}");
        assert!(stdout.is_empty());
        assert!(stderr.starts_with("btrfs-lab: error: "), "{stderr}");
        assert!(
            stderr.lines().next().unwrap().contains(want),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"));
    }
    assert!(env.store().load_all().unwrap().is_empty());
    assert!(
        fs::read_dir(&tmp).unwrap().next().is_none(),
        "nothing created on the tmpfs"
    );
    let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "nosuch"]));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("no sandbox at or named 'nosuch'"),
        "{stderr}"
    );
    // Duplicate names are refused before anything is made.
    let _first = env.sandbox(SandboxRequest {
        name: Some("dup".into()),
        ..SandboxRequest::default()
    });
    let (code, _, stderr) = run(env.cmd().args(["sandbox", "up", "--name", "dup"]));
    assert_eq!(code, 1);
    assert!(stderr.contains("already exists"), "{stderr}");
    // Not root: one line, nothing made.
    let (code, _, stderr) = run(env
        .as_nobody(&[])
        .args(["sandbox", "up", "--dir"])
        .arg(env.path().join("nope")));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("needs root"), "{stderr}");
    assert!(!env.path().join("nope").exists());
}

#[test]
fn dry_run_changes_nothing() {
    if !require_root("sandbox dry run") {
        return;
    }
    let env = TestEnv::new();
    let (code, stdout, _) = run(env.cmd().args([
        "sandbox",
        "up",
        "--dry-run",
        "--json",
        "--name",
        "dry",
        "--devices",
        "2",
        "--data",
        "raid1",
    ]));
    assert_eq!(code, 0);
    let plan = json(&stdout);
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["plan"]["images"].as_array().unwrap().len(), 2);
    assert!(
        plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s.as_str().unwrap().contains("-d raid1"))
    );
    assert!(!env.sandbox_root().join("dry").exists());
    assert!(env.store().load_all().unwrap().is_empty());
    let _sbx = env.sandbox(SandboxRequest {
        name: Some("keep".into()),
        fs: FsKind::Btrfs,
        data: Some(Profile::Single),
        ..SandboxRequest::default()
    });
    let (code, stdout, _) = run(env.cmd().args(["sandbox", "down", "--dry-run", "--all"]));
    assert_eq!(code, 0);
    assert!(stdout.contains("unmount"), "{stdout}");
    assert_eq!(
        env.store().load_all().unwrap().len(),
        1,
        "dry run removed nothing"
    );
}
