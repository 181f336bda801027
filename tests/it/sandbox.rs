//! `sandbox up | down | list` on real loop devices.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::state::{DeviceRecord, SandboxRecord};
use btrfs_lab::sandbox::{FsKind, SandboxRequest, plan_up};
use btrfs_lab::sys::block::loopdev::{self, FileIdentity};

use crate::common::{TestEnv, assert_shape, json, require_root, run, typed};

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
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
        "--device-size",
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
    // The same document read back as the library's type.
    let up_typed: btrfs_lab::sandbox::report::UpReport = typed(&stdout);
    assert_eq!(up_typed.name, "cli");
    assert_eq!(up_typed.devices.len(), 3);
    assert!(up_typed.devices.iter().all(|d| d.direct_io));
    assert_eq!(
        up_typed.data_profiles,
        vec![btrfs_lab::model::profile::Profile::Raid0]
    );
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
    let typed_list: btrfs_lab::sandbox::report::ListReport = typed(&stdout);
    assert_eq!(typed_list.bad_records, 0);
    assert_eq!(
        typed_list.sandboxes[0].state,
        btrfs_lab::sandbox::SandboxState::Up
    );
    assert_eq!(list["sandboxes"][0]["name"], "cli");
    assert_eq!(list["sandboxes"][0]["state"], "up");
    assert_eq!(list["sandboxes"][0]["mounted"], true);

    // Without --yes and without a terminal, down refuses and changes nothing.
    let (code, _, stderr) = run(env.cmd().args(["sandbox", "down"]).arg(&mnt));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--yes"));
    assert!(
        crate::common::leftovers_now(env.path())
            .iter()
            .any(|l| l.starts_with("mount"))
    );

    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["sandbox", "down", "--yes", "--json"])
        .arg(&mnt));
    assert_eq!(code, 0, "{stderr}");
    let down = json(&stdout);
    let typed_down: btrfs_lab::sandbox::report::DownResult = typed(&stdout);
    assert_eq!(typed_down.removed[0].detached.len(), 3);
    assert_eq!(down["removed"][0]["name"], "cli");
    assert_eq!(down["removed"][0]["detached"].as_array().unwrap().len(), 3);
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    assert!(!env.sandbox_root().join("cli").exists());
    assert!(env.store().load_all().unwrap().is_empty());
    let (_, stdout, _) = run(env.cmd().args(["sandbox", "list"]));
    assert_eq!(stdout, "no sandboxes\n");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
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
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
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
    assert_eq!(crate::common::leftovers_now(env.path()).len(), 1);
    // The crash: the process's descriptors close.
    drop(attached);
    drop(f);
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());

    let (_, stdout, _) = run(env.cmd().args(["sandbox", "list", "--json"]));
    assert_eq!(json(&stdout)["sandboxes"][0]["state"], "down");
    // The text says what `down` means and what to do.
    let (_, stdout, _) = run(env.cmd().args(["sandbox", "list"]));
    assert!(stdout.contains("crashed "), "{stdout}");
    assert!(
        stdout.contains("down: nothing of it is mounted or attached, its files remain;"),
        "{stdout}"
    );
    assert!(!stdout.contains("partial"), "{stdout}");
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "crashed"]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "sandbox crashed removed: deleted 2 files and directories\n"
    );
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    assert!(!plan.dir.exists());
}

/// Unmounted by hand, a sandbox is `partial`: `list` says what that means
/// and what removes the rest, and that the size is each device's.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn list_explains_partial_and_the_size_per_device() {
    if !require_root("sandbox list partial") {
        return;
    }
    let env = TestEnv::new();
    let dir = env.path().join("sbx");
    let (code, _, stderr) = run(env.cmd().args([
        "sandbox",
        "up",
        "--name",
        "half",
        "--devices",
        "2",
        "--device-size",
        "256M",
        "--dir",
        dir.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "list"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.lines().next().unwrap().contains("DEVICES"),
        "{stdout}"
    );
    assert!(stdout.contains(" up "), "{stdout}");
    assert!(stdout.contains("2 × 256.00MiB"), "{stdout}");
    assert!(!stdout.contains("partial"), "{stdout}");
    nix::mount::umount2(&dir.join("mnt"), nix::mount::MntFlags::empty()).unwrap();
    // At a terminal's 80 columns (the other runs are not wrapped).
    let (code, stdout, stderr) = run(env.cmd().env("COLUMNS", "80").args(["sandbox", "list"]));
    assert_eq!(code, 0, "{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("half "))
        .expect(&stdout);
    assert!(row.contains(" partial "), "{stdout}");
    assert!(
        stdout.contains("partial: only some of it is mounted or attached"),
        "{stdout}"
    );
    assert!(stdout.contains("btrfs-lab sandbox down NAME"), "{stdout}");
    // The explanation below the table fits 80 columns.
    assert!(
        stdout.lines().skip(2).all(|l| l.chars().count() <= 80),
        "{stdout}"
    );
    let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "half"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

/// A record that names a loop device now bound to someone else's file, and a
/// mount point where something else is mounted: `down` touches neither.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
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
        crate::common::leftovers_now(env.path())
            .iter()
            .any(|l| l.starts_with("mount")),
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
    loopdev::detach_if_ours(
        &btrfs_lab::sys::fs::root::SysRoot::host(),
        &their_dev.path,
        who,
    )
    .unwrap();
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
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
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
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
        (vec!["--device-size".into(), "10M".into()], 2, "too small"),
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
    // demo with a --file-size the probes refuse: refused before a sandbox
    // is made (issue 49).
    let (code, stdout, stderr) = run(env.cmd().args(["demo", "--file-size", "1K"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("--file-size"), "{stderr}");
    assert!(!stderr.contains("creating a sandbox"), "{stderr}");
    assert_eq!(env.store().load_all().unwrap().len(), 1, "only dup");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
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

// ------------------------------------------------------------------------
// Issue 19 / 10.12: an unprivileged user racing root. Linux credentials are
// per thread, so a thread of this test that drops to uid/gid 65534 is that
// user, racing the command under test.

const NOBODY: u32 = 65534;

/// Runs `body` on a thread with uid and gid 65534 and no groups.
fn as_nobody_thread<T: Send + 'static>(
    body: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    thread::spawn(move || {
        let g = rustix::process::Gid::from_raw_unchecked(NOBODY);
        let u = rustix::process::Uid::from_raw_unchecked(NOBODY);
        rustix::thread::set_thread_groups(&[]).unwrap();
        rustix::thread::set_thread_res_gid(g, g, g).unwrap();
        rustix::thread::set_thread_res_uid(u, u, u).unwrap();
        assert_eq!(rustix::process::geteuid().as_raw(), NOBODY);
        body()
    })
}

/// A user swapping `a` and `b` (renameat2 RENAME_EXCHANGE) in a tight loop,
/// until stopped or after `max` attempts.
struct Racer {
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<(u64, u64)>>,
}

impl Racer {
    fn start(a: PathBuf, b: PathBuf, max: u64, prepare: impl FnOnce() + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = as_nobody_thread(move || {
            prepare();
            let (mut attempts, mut swaps) = (0u64, 0u64);
            while attempts < max && !flag.load(Ordering::Relaxed) {
                attempts += 1;
                let cwd = rustix::fs::CWD;
                if rustix::fs::renameat_with(cwd, &a, cwd, &b, rustix::fs::RenameFlags::EXCHANGE)
                    .is_ok()
                {
                    swaps += 1;
                }
            }
            (attempts, swaps)
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// Stops it: (attempts, successful swaps).
    fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn mkdir_mode(p: &Path, mode: u32) {
    fs::create_dir(p).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

fn mount_id_of(p: &Path) -> Option<u32> {
    let m = fs::read_to_string("/proc/self/mountinfo").unwrap();
    btrfs_lab::parse::mountinfo::parse_mountinfo(&m)
        .into_iter()
        .find(|e| e.mount_point == p)
        .map(|e| e.id)
}

/// Finding 1 (+6): a user created the sandbox root (or a `--dir` parent)
/// first, in a world-writable sticky directory like /var/tmp, and swaps
/// root's directories as fast as it can. `up` refuses, naming the directory
/// and its owner; nothing is ever attached or mounted. The environment
/// variable pointing there is ignored as root.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn up_refuses_a_sandbox_root_another_user_made_while_it_races() {
    if !require_root("sandbox up with a user's sandbox root") {
        return;
    }
    let env = TestEnv::new();
    fs::set_permissions(env.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let shared = env.path().join("shared");
    mkdir_mode(&shared, 0o1777);
    let theirs = shared.join("btrfs-lab");
    let t = theirs.clone();
    let racer = Racer::start(
        theirs.join("race"),
        theirs.join("evil"),
        50_000_000,
        move || {
            fs::create_dir(&t).unwrap();
            fs::set_permissions(&t, fs::Permissions::from_mode(0o777)).unwrap();
            fs::create_dir(t.join("evil")).unwrap();
            fs::File::create(t.join("evil/dev0.img"))
                .unwrap()
                .set_len(256 << 20)
                .unwrap();
        },
    );
    while !theirs.join("evil/dev0.img").exists() {
        thread::yield_now();
    }
    const ROUNDS: usize = 200;
    for i in 0..ROUNDS {
        let name = if i % 2 == 0 { "race" } else { "other" };
        let mut cmd = env.cmd();
        cmd.args(["sandbox", "up", "--device-size", "256M", "--name", name]);
        if i % 4 == 1 {
            cmd.arg("--dir").arg(theirs.join(name));
        } else {
            cmd.arg("--sandbox-root").arg(&theirs);
        }
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 1, "round {i}: {stderr}");
        assert!(stdout.is_empty());
        assert_eq!(
            first_line(&stderr),
            format!(
                "btrfs-lab: error: {} is not owned by root (owner uid 65534, mode 0777); as root, btrfs-lab only uses directories no other user can change",
                theirs.display()
            ),
            "round {i}"
        );
        assert!(
            env.leftovers().is_empty(),
            "round {i}: {:?}",
            env.leftovers()
        );
    }
    let (attempts, swaps) = racer.stop();
    eprintln!("racer: {attempts} exchange attempts, {swaps} swaps, {ROUNDS} refused ups");
    assert!(attempts > ROUNDS as u64);
    assert!(env.store().load_all().unwrap().is_empty());
    // root made nothing in the user's directory.
    assert_eq!(crate::common::listing(&theirs), vec!["evil"]);

    // The environment variable pointing there is ignored as root.
    let mut bare = std::process::Command::new(crate::common::bin());
    bare.args(["sandbox", "up", "--dry-run", "--name", "viaenv"])
        .env("BTRFS_LAB_SANDBOX_ROOT", &theirs)
        .env("NO_COLOR", "1");
    let (code, stdout, stderr) = run(&mut bare);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "btrfs-lab: note: ignoring BTRFS_LAB_SANDBOX_ROOT={} as root; use --sandbox-root DIR instead\n",
            theirs.display()
        )
    );
    assert!(
        stdout.contains("create directory /var/tmp/btrfs-lab/viaenv (mode 0700)"),
        "{stdout}"
    );
}

/// Finding 1, the path that proceeds: the sandbox root is made by root in a
/// sticky shared directory while a user tries to swap it, the sandbox
/// directory and the images. Every loop device `up` attaches is backed by
/// the root-owned image it created, and every mount is nosuid,nodev.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn up_in_a_shared_directory_attaches_only_its_own_images() {
    if !require_root("sandbox up racing a user") {
        return;
    }
    let env = TestEnv::new();
    fs::set_permissions(env.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let shared = env.path().join("shared");
    mkdir_mode(&shared, 0o1777);
    let root_dir = shared.join("btrfs-lab");
    let evil = shared.join("evil");
    let e2 = evil.clone();
    let racer1 = Racer::start(root_dir.clone(), evil.clone(), 50_000_000, move || {
        fs::create_dir(&e2).unwrap();
        fs::create_dir(e2.join("race")).unwrap();
        fs::File::create(e2.join("race/dev0.img"))
            .unwrap()
            .set_len(256 << 20)
            .unwrap();
    });
    let racer2 = Racer::start(
        root_dir.join("race/dev0.img"),
        evil.join("race/dev0.img"),
        50_000_000,
        || {},
    );
    const ROUNDS: usize = 25;
    for i in 0..ROUNDS {
        let (code, stdout, stderr) = run(env
            .cmd()
            .args([
                "sandbox",
                "up",
                "--json",
                "--device-size",
                "256M",
                "--name",
                "race",
            ])
            .arg("--sandbox-root")
            .arg(&root_dir));
        assert_eq!(code, 0, "round {i}: {stderr}");
        let up = json(&stdout);
        let image = PathBuf::from(up["devices"][0]["image"].as_str().unwrap());
        let dev = PathBuf::from(up["devices"][0]["loop_device"].as_str().unwrap());
        let meta = fs::symlink_metadata(&image).unwrap();
        assert_eq!(meta.uid(), 0, "round {i}: image owner");
        let bound = loopdev::backing_identity(&dev).unwrap().unwrap();
        assert_eq!(
            bound,
            FileIdentity {
                dev: meta.dev(),
                ino: meta.ino()
            },
            "round {i}: {} must be backed by root's image",
            dev.display()
        );
        let mnt = PathBuf::from(up["mount_point"].as_str().unwrap());
        let m = fs::read_to_string("/proc/self/mountinfo").unwrap();
        let entry = btrfs_lab::parse::mountinfo::parse_mountinfo(&m)
            .into_iter()
            .find(|e| e.mount_point == mnt)
            .expect("mounted");
        let opts: Vec<&str> = entry.options().collect();
        assert!(
            opts.contains(&"nosuid") && opts.contains(&"nodev"),
            "{opts:?}"
        );
        let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "race"]));
        assert_eq!(code, 0, "round {i}: {stderr}");
        assert!(
            env.leftovers().is_empty(),
            "round {i}: {:?}",
            env.leftovers()
        );
    }
    let (a1, s1) = racer1.stop();
    let (a2, s2) = racer2.stop();
    eprintln!("racers: {a1} + {a2} exchange attempts, {s1} + {s2} swaps, {ROUNDS} ups");
    assert_eq!((s1, s2), (0, 0), "the sticky bit and 0755 stop every swap");
    let mode = fs::metadata(&root_dir).unwrap();
    assert_eq!((mode.uid(), mode.permissions().mode() & 0o7777), (0, 0o755));
}

/// Finding 2: the sandbox's directory sits in a directory a user owns (as
/// an older version allowed); the user swaps it with one whose `mnt` is a
/// symlink to another btrfs's mount point. `down` refuses every time and
/// unmounts nothing; once the directory is root's again it removes exactly
/// its own sandbox.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn down_never_unmounts_through_a_swapped_directory() {
    if !require_root("sandbox down racing a user") {
        return;
    }
    let env = TestEnv::new();
    fs::set_permissions(env.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let victim = env.sandbox(SandboxRequest {
        name: Some("victim".into()),
        size_bytes: 256 << 20,
        ..SandboxRequest::default()
    });
    let victim_mnt = victim.mount_point().to_path_buf();
    let victim_id = mount_id_of(&victim_mnt).expect("victim mounted");
    let userdir = env.path().join("userdir");
    mkdir_mode(&userdir, 0o755);
    let sbx = userdir.join("sbx");
    let (code, _, stderr) = run(env
        .cmd()
        .args([
            "sandbox",
            "up",
            "--name",
            "target",
            "--device-size",
            "256M",
            "--dir",
        ])
        .arg(&sbx));
    assert_eq!(code, 0, "{stderr}");
    let target_mnt = sbx.join("mnt");
    let target_id = mount_id_of(&target_mnt).expect("target mounted");
    nix::unistd::chown(&userdir, Some(NOBODY.into()), Some(NOBODY.into())).unwrap();
    let evil = userdir.join("evil");
    let (e2, v2) = (evil.clone(), victim_mnt.clone());
    let racer = Racer::start(sbx.clone(), evil.clone(), 50_000_000, move || {
        fs::create_dir(&e2).unwrap();
        std::os::unix::fs::symlink(&v2, e2.join("mnt")).unwrap();
    });
    const ROUNDS: usize = 200;
    for i in 0..ROUNDS {
        let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "target"]));
        assert_eq!(code, 1, "round {i}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{} is not owned by root (owner uid 65534, mode 0755)",
                userdir.display()
            )) && stderr.contains("not touching sandbox target"),
            "round {i}: {stderr}"
        );
        assert_eq!(
            mount_id_of(&victim_mnt),
            Some(victim_id),
            "round {i}: victim unmounted"
        );
    }
    let (attempts, swaps) = racer.stop();
    eprintln!("racer: {attempts} exchange attempts, {swaps} swaps, {ROUNDS} refused downs");
    assert!(swaps > 0, "the race must really have run");
    // Put root's directory back, and the parent back in root's hands.
    if fs::symlink_metadata(&sbx).unwrap().uid() != 0 {
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            &sbx,
            rustix::fs::CWD,
            &evil,
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .unwrap();
    }
    nix::unistd::chown(&userdir, Some(0.into()), Some(0.into())).unwrap();
    assert!(
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .any(|l| l.starts_with(&format!("{target_id} "))),
        "the target's own mount was never touched"
    );
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "target"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!("unmounted {}", target_mnt.display())),
        "{stdout}"
    );
    assert_eq!(
        mount_id_of(&victim_mnt),
        Some(victim_id),
        "victim still mounted"
    );
    assert!(!sbx.exists());
    drop(victim);
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

fn planted_record(dir: &Path, name: &str, image_dir: &Path) -> SandboxRecord {
    let req = SandboxRequest {
        name: Some(name.into()),
        dir: Some(image_dir.to_path_buf()),
        ..SandboxRequest::default()
    };
    let plan = plan_up(&req, dir, "x").unwrap();
    let mut r = SandboxRecord::new(&plan);
    r.dir_created = true;
    r.mount_point_created = true;
    r.devices.push(DeviceRecord {
        image: plan.images[0].clone(),
        identity: None,
        loop_device: None,
        diskseq: None,
    });
    r
}

/// Finding 3 (+6): records that would make root delete a file it did not
/// create. A state directory other users can write (0777, or sticky 1777
/// like /tmp) is refused as a whole; a record with no identity never
/// deletes; a record another user owns, or a corrupt one, is reported and
/// skipped while the others are handled; the environment variable naming
/// the planted directory is ignored as root.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn planted_records_are_never_acted_on() {
    if !require_root("planted sandbox records") {
        return;
    }
    let env = TestEnv::new();
    fs::set_permissions(env.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // Root's precious file, named like a sandbox image.
    let victim_dir = env.path().join("victim");
    mkdir_mode(&victim_dir, 0o700);
    let precious = victim_dir.join("dev0.img");
    fs::write(&precious, "root's data").unwrap();
    fs::set_permissions(&precious, fs::Permissions::from_mode(0o600)).unwrap();
    let record = planted_record(env.path(), "planted", &victim_dir);
    let text = serde_json::to_string(&record).unwrap();

    for mode in [0o777, 0o1777] {
        let ww = env.path().join(format!("state-{mode:o}"));
        mkdir_mode(&ww, mode);
        let planted = ww.join("planted.json");
        let t2 = text.clone();
        let p2 = planted.clone();
        as_nobody_thread(move || fs::write(&p2, t2).unwrap())
            .join()
            .unwrap();
        for args in [&["list"][..], &["down", "--all", "--yes"][..]] {
            let (code, stdout, stderr) = run(env
                .cmd()
                .arg("sandbox")
                .args(args)
                .arg("--state-dir")
                .arg(&ww));
            assert_eq!(code, 1, "{args:?}: {stderr}");
            assert!(stdout.is_empty(), "{stdout}");
            assert_eq!(
                first_line(&stderr),
                format!(
                    "btrfs-lab: error: {} is writable by other users (owner uid 0, mode {mode:04o}); as root, btrfs-lab only uses directories no other user can change",
                    ww.display()
                )
            );
        }
        // Named by the environment instead: ignored as root.
        let mut bare = std::process::Command::new(crate::common::bin());
        bare.args(["sandbox", "list", "--json"])
            .env("BTRFS_LAB_STATE_DIR", &ww)
            .env("NO_COLOR", "1");
        let (_, stdout, stderr) = run(&mut bare);
        assert!(
            stderr.starts_with(&format!(
                "btrfs-lab: note: ignoring BTRFS_LAB_STATE_DIR={} as root; use --state-dir DIR instead\n",
                ww.display()
            )),
            "{stderr}"
        );
        assert!(!stdout.contains("planted"), "{stdout}");
        assert_eq!(fs::read_to_string(&precious).unwrap(), "root's data");
    }

    // In root's own state directory: a record with no recorded identity
    // (written by root, e.g. an up that crashed before creating the file,
    // and then the path was reused) never deletes.
    let store = env.store();
    store.create(&record).unwrap();
    // A record another user owns, and a corrupt one, next to a real sandbox.
    let mut foreign = planted_record(env.path(), "foreign", &victim_dir);
    foreign.devices[0].identity =
        Some(FileIdentity::of(&fs::File::open(&precious).unwrap()).unwrap());
    let foreign_path = store.dir().join("foreign.json");
    fs::write(&foreign_path, serde_json::to_string(&foreign).unwrap()).unwrap();
    nix::unistd::chown(&foreign_path, Some(NOBODY.into()), None).unwrap();
    fs::write(store.dir().join("corrupt.json"), "{\"version\": 1, \"na").unwrap();
    let real = env
        .sandbox(SandboxRequest {
            name: Some("real".into()),
            size_bytes: 256 << 20,
            ..SandboxRequest::default()
        })
        .keep();

    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "list"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stdout.contains("real ") && stdout.contains("planted "),
        "{stdout}"
    );
    assert!(!stdout.contains("foreign"), "{stdout}");
    assert!(
        stderr.contains("corrupt.json is not a sandbox record"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{} is owned by uid 65534 with mode 0644, not written by btrfs-lab; not acting on it",
            foreign_path.display()
        )),
        "{stderr}"
    );

    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--all", "--yes"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "note: {} has no recorded identity; left alone",
            precious.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("sandbox real removed: unmounted"),
        "{stdout}"
    );
    assert_eq!(fs::read_to_string(&precious).unwrap(), "root's data");
    assert!(!real.dir.exists());
    assert!(foreign_path.exists() && store.dir().join("corrupt.json").exists());
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

/// Issue 10.12: someone attached a loop device to the sandbox's image by
/// hand. `down` detaches only the device `up` attached (by name, backing
/// identity and disk sequence number), leaves theirs and the image, says so,
/// and finishes once theirs is gone.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn down_detaches_only_the_loop_device_up_attached() {
    if !require_root("sandbox down with a hand-attached loop device") {
        return;
    }
    let env = TestEnv::new();
    let (code, stdout, stderr) = run(env.cmd().args([
        "sandbox",
        "up",
        "--json",
        "--name",
        "hand",
        "--device-size",
        "256M",
    ]));
    assert_eq!(code, 0, "{stderr}");
    let up = json(&stdout);
    let image = PathBuf::from(up["devices"][0]["image"].as_str().unwrap());
    let ours = PathBuf::from(up["devices"][0]["loop_device"].as_str().unwrap());
    let theirs = loopdev::attach(&image, false).unwrap();
    let id = FileIdentity::of(&fs::File::open(&image).unwrap()).unwrap();

    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "hand"]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert_eq!(
        first_line(&stderr),
        format!(
            "btrfs-lab: error: sandbox hand: {} is bound to the sandbox's image but was not attached by sandbox up; left alone, and the image with it",
            theirs.path.display()
        )
    );
    assert_eq!(
        loopdev::backing_identity(&theirs.path).unwrap(),
        Some(id),
        "theirs stays"
    );
    assert_eq!(
        loopdev::backing_identity(&ours).unwrap(),
        None,
        "ours is detached"
    );
    assert!(image.exists());
    let records = env.store().load_all().unwrap();
    assert!(records.len() == 1, "the record stays for a retry");
    // The detachment is recorded: the kernel may hand that loop device
    // number to someone else before the retry (other tests do, here).
    assert_eq!(records[0].devices[0].loop_device, None);
    assert_eq!(records[0].devices[0].diskseq, None);

    loopdev::detach_if_ours(&btrfs_lab::sys::fs::root::SysRoot::host(), &theirs.path, id).unwrap();
    // Someone else now gets the lowest free loop device number, most likely
    // the one `up` had: the retry neither touches nor mentions it.
    let decoy_image = env.path().join("decoy.img");
    fs::File::create(&decoy_image)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let decoy = loopdev::attach(&decoy_image, false).unwrap();
    let decoy_id = FileIdentity::of(&fs::File::open(&decoy_image).unwrap()).unwrap();
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "hand"]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "sandbox hand removed: deleted 3 files and directories\n"
    );
    assert_eq!(
        loopdev::backing_identity(&decoy.path).unwrap(),
        Some(decoy_id),
        "{} was reused by someone else and stays theirs",
        decoy.path.display()
    );
    loopdev::detach_if_ours(
        &btrfs_lab::sys::fs::root::SysRoot::host(),
        &decoy.path,
        decoy_id,
    )
    .unwrap();
    fs::remove_file(&decoy_image).unwrap();
    assert!(!image.exists());
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

/// Record files in the test's state directory (valid or not).
fn record_files(env: &TestEnv) -> Vec<String> {
    let dir = env.store().dir().to_path_buf();
    if !dir.exists() {
        return Vec::new();
    }
    crate::common::listing(&dir)
}

/// `up --dir FILE` and `up --dir` on a directory another user made are
/// refused before anything is recorded: no record is left (before the fix
/// each left one that `down NAME` and `down --all` then failed on forever),
/// and a record an older `up` left that way (nothing made yet) is removed
/// by `down --all` without touching the file or the other user's directory.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn up_on_a_file_or_a_squatted_dir_leaves_no_record() {
    if !require_root("sandbox up on a file or a squatted directory") {
        return;
    }
    let env = TestEnv::new();
    fs::set_permissions(env.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let file = env.path().join("file");
    fs::write(&file, "user data\n").unwrap();
    let shared = env.path().join("shared");
    mkdir_mode(&shared, 0o1777);
    let squat = shared.join("squat");
    let (code, _, stderr) = run(std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "mkdir"])
        .arg(&squat));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(fs::metadata(&squat).unwrap().uid(), NOBODY);

    for (name, dir, want) in [
        ("onfile", &file, "exists and is not a directory"),
        ("squatted", &squat, "is not owned by root (owner uid 65534"),
    ] {
        let (code, stdout, stderr) = run(env.cmd().args([
            "sandbox",
            "up",
            "--name",
            name,
            "--device-size",
            "256M",
            "--dir",
            dir.to_str().unwrap(),
        ]));
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(first_line(&stderr).contains(want), "{name}: {stderr}");
        // One error, no "could not remove sandbox" from a teardown.
        assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
        assert!(
            record_files(&env).is_empty(),
            "{name}: {:?}",
            record_files(&env)
        );
    }
    // A record as the old `up` left it (claimed, nothing made): removed by
    // `down --all`, and what is at its directory is not touched.
    for (name, dir) in [("oldfile", &file), ("oldsquat", &squat)] {
        let plan = plan_up(
            &SandboxRequest {
                name: Some(name.into()),
                dir: Some(dir.to_path_buf()),
                ..SandboxRequest::default()
            },
            &env.sandbox_root(),
            name,
        )
        .unwrap();
        env.store().create(&SandboxRecord::new(&plan)).unwrap();
    }
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "--all"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("sandbox oldfile removed"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{} was not made by sandbox up; left alone",
            squat.display()
        )),
        "{stdout}"
    );
    assert!(record_files(&env).is_empty(), "{:?}", record_files(&env));
    assert_eq!(fs::read_to_string(&file).unwrap(), "user data\n");
    assert_eq!(fs::metadata(&squat).unwrap().uid(), NOBODY);
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
}

/// A sandbox `down` can never act on (its directory was replaced by another
/// one): `down --all` reports it, with the way out, and fails; `down NAME
/// --forget` says what it leaves in place and removes only the record;
/// `--forget` refuses `--all` and unknown names.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn forget_removes_only_the_record_of_a_sandbox_down_cannot_act_on() {
    if !require_root("sandbox down --forget") {
        return;
    }
    let env = TestEnv::new();
    let dir = env.path().join("sbx");
    let (code, _, stderr) = run(env.cmd().args([
        "sandbox",
        "up",
        "--name",
        "moved",
        "--device-size",
        "256M",
        "--dir",
        dir.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{stderr}");
    // Someone unmounts it, moves the directory away and puts another there.
    nix::mount::umount2(&dir.join("mnt"), nix::mount::MntFlags::empty()).unwrap();
    let moved = env.path().join("sbx-moved");
    fs::rename(&dir, &moved).unwrap();
    mkdir_mode(&dir, 0o700);
    fs::write(dir.join("keep"), "x").unwrap();

    for _ in 0..2 {
        let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "--all"]));
        assert_eq!(code, 1, "{stderr}");
        assert!(
            stderr.contains("is not the directory sandbox up made for moved"),
            "{stderr}"
        );
        assert!(
            stderr.contains("btrfs-lab sandbox down --forget moved"),
            "{stderr}"
        );
    }
    let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--forget", "--all"]));
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run(env
        .cmd()
        .args(["sandbox", "down", "--forget", "--yes", "nope"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("no record of a sandbox named 'nope'"),
        "{stderr}"
    );
    // Without --yes and without a terminal: says (on stderr, before the
    // question) what it would leave, asks, and is refused; the record stays.
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--forget", "moved"]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("--forget removes only its record"),
        "{stderr}"
    );
    assert!(stderr.contains("loop device /dev/loop"), "{stderr}");
    assert!(stderr.contains("confirmation needed"), "{stderr}");
    assert_eq!(record_files(&env), ["moved.json"]);

    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["sandbox", "down", "--forget", "--yes", "--json", "moved"]));
    assert_eq!(code, 0, "{stderr}");
    let doc = json(&stdout);
    let rep = &doc["removed"][0];
    assert_eq!(rep["name"], "moved");
    assert_eq!(
        rep["removed"][0],
        env.store().dir().join("moved.json").to_str().unwrap()
    );
    assert!(rep["detached"].as_array().unwrap().is_empty());
    assert!(
        rep["left"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().starts_with("loop device /dev/loop")),
        "{rep}"
    );
    assert!(record_files(&env).is_empty(), "{:?}", record_files(&env));
    // Nothing else was touched: the loop device is still attached to the
    // moved image, the other directory keeps its file.
    let now = crate::common::leftovers_now(env.path());
    assert_eq!(now.len(), 1, "{now:?}");
    assert!(moved.join("dev0.img").exists());
    assert_eq!(fs::read_to_string(dir.join("keep")).unwrap(), "x");
    let (code, stdout, _) = run(env.cmd().args(["sandbox", "down", "--yes", "--all"]));
    assert_eq!(
        (code, stdout.as_str()),
        (0, "no sandboxes; nothing to do\n")
    );
    // A record file that is not a record at all: `down --all` reports it
    // and fails; `--forget` removes that file, reading nothing in it.
    fs::write(env.store().dir().join("junk.json"), "{half a record").unwrap();
    let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "--all"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("junk.json is not a sandbox record"),
        "{stderr}"
    );
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["sandbox", "down", "--forget", "--yes", "junk"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("it is not a valid record"), "{stderr}");
    assert_eq!(stdout, "sandbox junk forgotten: its record is removed\n");
    assert!(record_files(&env).is_empty(), "{:?}", record_files(&env));
    // TestEnv's drop detaches the loop device bound to the moved image.
}

/// SIGINT (to the process group, as a terminal's Ctrl-C, which reaches mkfs
/// too), SIGTERM (to the process) and SIGHUP (to the process group, as a
/// dropped SSH session sends it) at pseudo-random moments of `sandbox up`
/// (seeded from the clock, the seed printed), until twelve runs were
/// interrupted (at most 36 attempts): each interrupted run exits 130 with
/// nothing left, before any `down`; a run that finished first, or was
/// killed by the signal before its handlers were installed (process
/// start-up: nothing made yet), is counted apart, and then too nothing is
/// left once `down --all` has run: no loop device, mount, image or record
/// of the test.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn signals_during_up_clean_up_and_exit_130() {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    if !require_root("sandbox up interrupted by signals") {
        return;
    }
    let env = TestEnv::new();
    let up = |name: &str| {
        let mut c = env.cmd();
        c.args([
            "sandbox",
            "up",
            "--name",
            name,
            "--devices",
            "3",
            "--device-size",
            "256M",
            "--data",
            "raid0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
        c
    };
    // How long one `up` takes here (the second of two runs: the first
    // warms the caches): the signals land within that span, which shrinks
    // to any run that finishes before its signal.
    let mut span = 0;
    for _ in 0..2 {
        let started = Instant::now();
        let (code, _, stderr) = run(&mut up("timing"));
        assert_eq!(code, 0, "{stderr}");
        span = started.elapsed().as_millis().max(20) as u64;
        let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "timing"]));
        assert_eq!(code, 0, "{stderr}");
    }

    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    eprintln!("signals during up: seed {seed}, up takes {span} ms");
    let (mut interrupted, mut finished_first, mut before_handlers) = (0, 0, 0);
    // Twelve interrupted runs, in at most 36 attempts.
    for i in 0..36 {
        if interrupted == 12 {
            break;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = 2 + seed % span;
        let signal = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP][i % 3];
        let name = format!("sig{i}");
        let started = Instant::now();
        let mut child = up(&name).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let pid = Pid::from_raw(child.id() as i32);
        let sent = if child.try_wait().unwrap().is_some() {
            false
        } else if signal != Signal::SIGTERM {
            // As a terminal's Ctrl-C or a dropped session does: the whole
            // process group, mkfs included.
            killpg(pid, signal).is_ok()
        } else {
            kill(pid, signal).is_ok()
        };
        let out = child.wait_with_output().unwrap();
        let took = started.elapsed().as_millis() as u64;
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        let what = format!(
            "run {i}: {signal} after {delay} ms (sent: {sent}): {:?}\n{stdout}{stderr}",
            out.status
        );
        eprintln!("{}", what.lines().next().unwrap());
        match out.status.code() {
            Some(130) => {
                assert!(sent, "{what}");
                interrupted += 1;
                assert!(stdout.is_empty(), "{what}");
                assert!(stderr.contains("interrupted"), "{what}");
                // Nothing left even before `down`.
                assert!(env.leftovers().is_empty(), "{what}: {:?}", env.leftovers());
                assert!(
                    record_files(&env).is_empty(),
                    "{what}: {:?}",
                    record_files(&env)
                );
            }
            // `up` had finished (the signal was not sent), or had made
            // and reported the sandbox when it came: the sandbox is up,
            // and `down` below removes it.
            Some(0) => {
                assert!(stdout.contains(&format!("sandbox {name} is up")), "{what}");
                finished_first += 1;
                span = span.min(took.max(20));
            }
            // Killed by the signal itself: it came before `up` had
            // installed its handlers (process start-up), when nothing is
            // made yet. Nothing may be left.
            None if sent
                && std::os::unix::process::ExitStatusExt::signal(&out.status)
                    == Some(signal as i32) =>
            {
                before_handlers += 1;
                assert!(env.leftovers().is_empty(), "{what}: {:?}", env.leftovers());
                assert!(
                    record_files(&env).is_empty(),
                    "{what}: {:?}",
                    record_files(&env)
                );
            }
            _ => panic!("{what}"),
        }
        let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "--all"]));
        assert_eq!(code, 0, "{what}\ndown: {stderr}");
        assert!(env.leftovers().is_empty(), "{what}: {:?}", env.leftovers());
        assert!(
            record_files(&env).is_empty(),
            "{what}: {:?}",
            record_files(&env)
        );
        let sandbox_dir = env.sandbox_root().join(&name);
        assert!(
            !sandbox_dir.exists(),
            "{what}: {} is left",
            sandbox_dir.display()
        );
    }
    eprintln!(
        "signals during up: {interrupted} interrupted, {finished_first} finished first, \
         {before_handlers} before the handlers"
    );
    assert_eq!(
        interrupted, 12,
        "only {interrupted} runs were interrupted in 36 ({finished_first} finished first, \
         {before_handlers} before the handlers)"
    );
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn down_all_removes_only_this_users_sandboxes_and_says_what_else_it_left() {
    if !require_root("sandbox down --all and its owners") {
        return;
    }
    let env = TestEnv::new();
    let up = |name: &str, sudo_uid: Option<&str>| {
        let mut c = env.cmd();
        c.args(["sandbox", "up", "--name", name, "--device-size", "256M"])
            .env_remove("SUDO_UID");
        if let Some(u) = sudo_uid {
            c.env("SUDO_UID", u);
        }
        let (code, stdout, stderr) = run(&mut c);
        assert_eq!(code, 0, "{stderr}");
        stdout
    };
    let printed = up("mine", None);
    up("theirs", Some("4242"));
    // The record says who made it.
    let (_, stdout, _) = run(env.cmd().args(["--json", "sandbox", "list"]));
    let list = json(&stdout);
    let by = |name: &str| {
        list["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()["made_by"]
            .clone()
    };
    assert_eq!(by("mine")["uid"], 0);
    assert_eq!(by("mine")["sudo_uid"], serde_json::Value::Null);
    assert_eq!(by("theirs")["sudo_uid"], 4242);
    assert_eq!(by("theirs")["command"][1], "--state-dir");

    // The command `up` printed works as printed: it names --state-dir.
    // (on the line after "remove it with:", a line of its own)
    let line = printed
        .lines()
        .skip_while(|l| *l != "remove it with:")
        .nth(1)
        .map(str::trim_start)
        .unwrap_or_else(|| panic!("{printed}"));
    let argv: Vec<&str> = line.split(' ').collect();
    assert_eq!(
        argv[..3],
        [
            "btrfs-lab",
            "--state-dir",
            env.store().dir().to_str().unwrap()
        ]
    );

    // --all: only this user's; the other is left, and named.
    let (code, _, stderr) = run(env
        .cmd()
        .args(["sandbox", "down", "--yes", "--all"])
        .env_remove("SUDO_UID"));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("left 1 sandbox, made by another user"),
        "{stderr}"
    );
    assert!(stderr.contains("theirs"), "{stderr}");
    let names = |env: &TestEnv| -> Vec<String> {
        env.store()
            .load_all()
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect()
    };
    assert_eq!(names(&env), ["theirs"]);
    // The same user through sudo is the same user.
    let (code, _, stderr) = run(env
        .cmd()
        .args(["sandbox", "down", "--yes", "--all", "--dry-run"])
        .env("SUDO_UID", "4242"));
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("left 1 sandbox"), "{stderr}");
    let (code, _, stderr) = run(env
        .cmd()
        .args(["sandbox", "down", "--yes", "--all", "--everyone"])
        .env_remove("SUDO_UID"));
    assert_eq!(code, 0, "{stderr}");
    assert!(names(&env).is_empty());
    assert!(env.leftovers().is_empty(), "{:?}", env.leftovers());
    let (code, _, stderr) = run(env.cmd().args(["sandbox", "down", "--everyone", "x"]));
    assert_eq!(code, 2, "--everyone without --all: {stderr}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn down_names_a_device_added_to_the_sandbox_later_and_leaves_it() {
    if !require_root("sandbox down with a device added later") {
        return;
    }
    let env = TestEnv::new();
    let (code, _, stderr) =
        run(env
            .cmd()
            .args(["sandbox", "up", "--name", "grown", "--device-size", "512M"]));
    assert_eq!(code, 0, "{stderr}");
    let spare = env.spare_device("spare", 512 << 20);
    let m = env.store().load_all().unwrap()[0].mount_point.clone();
    let (code, _, stderr) = run(env
        .cmd()
        .args(["device", "add", "--yes"])
        .arg(&m)
        .arg(&spare));
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", "grown"]));
    assert_eq!(code, 0, "{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains(&format!(
            "{} was added to the sandbox's filesystem after up (device 2): not made by up, left attached; if it is yours: losetup -d {}",
            spare.display(),
            spare.display()
        )),
        "{all}"
    );
    // Left attached (the environment detaches it).
    let name = spare.file_name().unwrap().to_str().unwrap();
    assert!(
        Path::new(&format!("/sys/block/{name}/loop/backing_file")).exists(),
        "{} was detached",
        spare.display()
    );
}
