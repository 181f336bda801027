//! `device add` and `convert` on real sandboxes: data survives, interrupts
//! pause, kills leave a consistent filesystem, refusals change nothing.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::{FsKind, SandboxRequest};
use serde_json::Value;

use crate::common::{TestEnv, json, require_root, run};

const GIB: u64 = 1 << 30;

/// Writes `count` files of `mib` MiB of pseudo-random bytes.
fn fill(dir: &Path, count: usize, mib: usize) {
    for n in 0..count {
        let mut f = fs::File::create(dir.join(format!("file{n}"))).unwrap();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ n as u64;
        let mut block = vec![0u8; 1 << 20];
        for _ in 0..mib {
            for chunk in block.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes());
            }
            f.write_all(&block).unwrap();
        }
        f.sync_all().unwrap();
    }
}

/// sha256 of every file, by name (coreutils' sha256sum, reading through
/// the filesystem).
fn hashes(dir: &Path) -> BTreeMap<String, String> {
    let mut names: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    let out = Command::new("sha256sum").args(&names).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (h, n) = l.split_once("  ").unwrap();
            (n.to_owned(), h.to_owned())
        })
        .collect()
}

fn scrub_clean(mount: &Path) {
    let out = Command::new("btrfs")
        .args(["scrub", "start", "-B"])
        .arg(mount)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "scrub: {text}");
    assert!(text.contains("no errors found"), "scrub: {text}");
}

fn profiles(env: &TestEnv, mount: &Path) -> BTreeMap<String, Vec<String>> {
    let (code, stdout, stderr) = run(env.cmd().args(["df", "--json"]).arg(mount));
    assert_eq!(code, 0, "{stderr}");
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in json(&stdout)["records"].as_array().unwrap() {
        let t = r["type"].as_str().unwrap().to_owned();
        if t == "global_reserve" {
            continue;
        }
        m.entry(t)
            .or_default()
            .push(r["profile"].as_str().unwrap().to_owned());
    }
    for v in m.values_mut() {
        v.sort();
    }
    m
}

fn expect(data: &str, metadata: &str) -> BTreeMap<String, Vec<String>> {
    [("data", data), ("metadata", metadata), ("system", metadata)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), vec![v.to_owned()]))
        .collect()
}

/// The last JSON line of a JSON Lines run.
fn last_line(stdout: &str) -> Value {
    json(stdout.lines().last().expect("at least one JSON line"))
}

#[test]
fn grow_one_disk_to_three_and_convert_without_losing_a_byte() {
    if !require_root("device add + convert") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        size_bytes: 6 * GIB,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    fill(&m, 4, 256);
    let before = hashes(&m);
    let b = env.spare_device("b", 6 * GIB);
    let c = env.spare_device("c", 6 * GIB);

    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["device", "add", "--yes", "--json"])
        .arg(&m)
        .arg(&b)
        .arg(&c));
    assert_eq!(code, 0, "{stderr}");
    let added = json(&stdout);
    assert_eq!(added["result"]["devices"].as_array().unwrap().len(), 3);
    assert_eq!(added["result"]["raw_bytes"], 18 * GIB);
    assert_eq!(added["plan"]["commands"][0][0], "btrfs");

    let (code, stdout, stderr) = run(env
        .cmd()
        .args([
            "convert",
            "--yes",
            "--json",
            "--data",
            "raid0",
            "--metadata",
            "raid1",
        ])
        .arg(&m));
    assert_eq!(code, 0, "{stderr}");
    let first = json(stdout.lines().next().unwrap());
    assert_eq!(first["event"], "plan");
    assert!(
        first["plan"]["risks"][0]
            .as_str()
            .unwrap()
            .contains("one of the 3 devices")
    );
    assert!(stdout.lines().any(|l| json(l)["event"] == "progress"));
    let last = last_line(&stdout);
    assert_eq!(last["event"], "result");
    assert_eq!(last["outcome"], "completed");
    assert_eq!(profiles(&env, &m), expect("raid0", "raid1"));
    assert_eq!(hashes(&m), before);
    scrub_clean(&m);

    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["convert", "--yes", "--metadata", "raid1c3"])
        .arg(&m));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("WARNING: raid1c3 turns on the raid1c34 feature"),
        "{stdout}"
    );
    assert_eq!(profiles(&env, &m), expect("raid0", "raid1c3"));
    assert_eq!(hashes(&m), before);
    scrub_clean(&m);
    let (_, stdout, _) = run(env.cmd().args(["show", "--json"]).arg(&m));
    assert!(
        json(&stdout)["filesystems"][0]["features"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "raid1c34")
    );

    // Nothing left to do: said, and nothing runs.
    let (code, stdout, _) = run(env
        .cmd()
        .args(["convert", "--yes", "--data", "raid0"])
        .arg(&m));
    assert_eq!(code, 0);
    assert!(stdout.contains("nothing to convert"), "{stdout}");
}

fn three_device_sandbox(
    env: &TestEnv,
) -> (
    btrfs_lab::sandbox::Sandbox,
    PathBuf,
    BTreeMap<String, String>,
) {
    // 3 × 2 GiB: chunks are at most 10% of the filesystem, so 1.5 GiB of
    // data spans several chunks and a conversion takes several steps.
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 2 * GIB,
        data: Some(Profile::Raid0),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    fill(&m, 6, 256);
    let h = hashes(&m);
    (sbx, m, h)
}

fn start_convert(env: &TestEnv, m: &Path, data: &str) -> Child {
    env.cmd()
        .args(["convert", "--yes", "--data", data])
        .arg(m)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the kernel reports a balance with at least one chunk done.
fn wait_running(m: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(s)) = btrfs_lab::sys::btrfs::balance_status(m)
            && s.state & 1 != 0
            && s.completed >= 1
        {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn ctrl_c_pauses_and_resume_completes() {
    if !require_root("convert interrupted") {
        return;
    }
    let env = TestEnv::new();
    let (_sbx, m, before) = three_device_sandbox(&env);
    let child = start_convert(&env, &m, "raid1");
    assert!(wait_running(&m), "the balance never started");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(0) {
        // The last chunk finished before the pause took effect: nothing to resume.
        eprintln!("note: the conversion completed before the pause took effect");
        assert_eq!(profiles(&env, &m)["data"], vec!["raid1"]);
        return;
    }
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("pausing the balance"), "{stderr}");
    assert!(stderr.contains("--resume"), "{stderr}");
    let (code, stdout, _) = run(env.cmd().args(["convert", "--status", "--json"]).arg(&m));
    assert_eq!(code, 0);
    let status = json(&stdout);
    assert_eq!(status["balance"], "paused", "{status:#}");
    assert_eq!(status["data_target"], "raid1");
    assert_eq!(hashes(&m), before, "data intact while paused");

    let (code, _, stderr) = run(env.cmd().args(["convert", "--resume", "--yes"]).arg(&m));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(profiles(&env, &m), expect("raid1", "raid1"));
    assert_eq!(hashes(&m), before);
    scrub_clean(&m);
}

#[test]
fn sigkill_leaves_a_consistent_filesystem_and_a_rerun_finishes() {
    if !require_root("convert killed") {
        return;
    }
    let env = TestEnv::new();
    let (sbx, m, before) = three_device_sandbox(&env);
    let mut child = start_convert(&env, &m, "raid1");
    assert!(wait_running(&m), "the balance never started");
    child.kill().unwrap();
    let _ = child.wait();
    // The kernel cancels a balance whose process dies: none runs now.
    let deadline = Instant::now() + Duration::from_secs(30);
    while btrfs_lab::sys::btrfs::balance_status(&m).unwrap().is_some() && Instant::now() < deadline
    {
        thread::sleep(Duration::from_millis(50));
    }
    assert!(btrfs_lab::sys::btrfs::balance_status(&m).unwrap().is_none());
    let mixed = profiles(&env, &m);
    // The filesystem unmounts and mounts again, and scrubs clean.
    nix::mount::umount2(&m, nix::mount::MntFlags::empty()).unwrap();
    for d in sbx.devices() {
        btrfs_lab::sys::btrfs::scan_device(&d).unwrap();
    }
    btrfs_lab::sys::mounts::mount_device(&sbx.devices()[0], &m, "btrfs", None).unwrap();
    assert_eq!(hashes(&m), before);
    scrub_clean(&m);
    if mixed["data"].len() > 1 {
        let (code, _, stderr) = run(env.cmd().arg("df").arg(&m));
        assert_eq!(code, 0);
        assert!(
            stderr.contains("more than one profile for one type: Data: raid0, raid1"),
            "{stderr}"
        );
        let (_, stdout, _) = run(env.cmd().args(["convert", "--status"]).arg(&m));
        assert!(stdout.contains("mixed profiles"), "{stdout}");
    }
    let (code, _, stderr) = run(env
        .cmd()
        .args(["convert", "--yes", "--data", "raid1"])
        .arg(&m));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(profiles(&env, &m), expect("raid1", "raid1"));
    assert_eq!(hashes(&m), before);
}

/// Everything that identifies the filesystem's layout.
fn snapshot(env: &TestEnv, m: &Path) -> (String, Vec<String>) {
    let (_, df, _) = run(env.cmd().args(["df", "-b"]).arg(m));
    let (_, show, _) = run(env.cmd().args(["show", "--json"]).arg(m));
    let devices = json(&show)["filesystems"][0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| format!("{} {} {}", d["devid"], d["path"], d["size_bytes"]))
        .collect();
    (df, devices)
}

#[test]
fn refusals_change_nothing() {
    if !require_root("device add / convert refusals") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 2 * GIB,
        data: Some(Profile::Raid0),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    fill(&m, 1, 64);
    let before = snapshot(&env, &m);

    // raid1c3 with two devices.
    let (code, _, stderr) = run(env
        .cmd()
        .args(["convert", "--yes", "--metadata", "raid1c3"])
        .arg(&m));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("metadata profile raid1c3 needs at least 3 devices, this filesystem has 2"),
        "{stderr}"
    );

    // A mounted device, an ext4 device, a member, and not a block device.
    let ext4 = env.sandbox(SandboxRequest {
        fs: FsKind::Ext4,
        size_bytes: 512 << 20,
        ..SandboxRequest::default()
    });
    let mounted = ext4.devices()[0].clone();
    let unmounted = env.spare_device("e4", 512 << 20);
    let mkfs = Command::new("mkfs.ext4")
        .arg("-q")
        .arg(&unmounted)
        .output()
        .unwrap();
    assert!(mkfs.status.success());
    let member = sbx.devices()[0].clone();
    let cases: Vec<(PathBuf, &str)> = vec![
        (mounted.clone(), "is mounted at"),
        (
            unmounted.clone(),
            "carries signatures: ext4 at 0x438; --force wipes them",
        ),
        (member.clone(), "is already device 1 of this filesystem"),
        (PathBuf::from("/etc/passwd"), "is not a block device"),
        (env.path().join("nope"), "does not exist"),
    ];
    for (dev, want) in &cases {
        let (code, _, stderr) = run(env.cmd().args(["device", "add", "--yes"]).arg(&m).arg(dev));
        assert_eq!(code, 1, "{}: {stderr}", dev.display());
        assert!(
            stderr.lines().next().unwrap().contains(want),
            "{}: {stderr}",
            dev.display()
        );
    }
    // All at once: every reason is reported, not just the first.
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["device", "add", "--yes", "--json"])
        .arg(&m)
        .args(cases.iter().map(|c| &c.0)));
    assert_eq!(code, 1);
    let refusals = json(&stdout)["plan"]["refusals"]
        .as_array()
        .unwrap()
        .clone();
    for (_, want) in &cases {
        assert!(
            refusals
                .iter()
                .any(|r| r["message"].as_str().unwrap().contains(want)),
            "{want}: {refusals:#?}"
        );
    }
    assert!(stderr.contains("also:"), "{stderr}");
    // --force lifts only what it may: the ext4 signature, named in the plan.
    let (code, stdout, _) = run(env
        .cmd()
        .args(["device", "add", "--dry-run", "--force"])
        .arg(&m)
        .arg(&unmounted));
    assert_eq!(code, 0);
    assert!(stdout.contains("destroys ext4 signature"), "{stdout}");
    assert!(
        stdout.contains(&format!("wipefs --all {}", unmounted.display())),
        "{stdout}"
    );
    let (code, _, _) = run(env
        .cmd()
        .args(["device", "add", "--dry-run", "--force"])
        .arg(&m)
        .arg(&mounted));
    assert_eq!(code, 1, "--force never adds a mounted device");
    // A valid plan, dry run: shown, not done.
    let spare = env.spare_device("spare", 2 * GIB);
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["device", "add", "--dry-run"])
        .arg(&m)
        .arg(&spare));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "btrfs device add {} {}",
            spare.display(),
            m.display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("(dry run: nothing was done)"));
    let (code, stdout, _) = run(env
        .cmd()
        .args(["convert", "--dry-run", "--data", "raid1"])
        .arg(&m));
    assert_eq!(code, 0);
    assert!(
        stdout.contains("btrfs balance start -dconvert=raid1,soft"),
        "{stdout}"
    );
    // Without --yes and without a terminal: refused.
    let (code, _, stderr) = run(env.cmd().args(["convert", "--data", "raid1"]).arg(&m));
    assert_eq!(code, 1);
    assert!(stderr.contains("--yes"), "{stderr}");

    assert_eq!(
        snapshot(&env, &m),
        before,
        "a refusal changed the filesystem"
    );
    let sig = Command::new("wipefs")
        .args(["--no-act", "--json"])
        .arg(&unmounted)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&sig.stdout).contains("ext4"),
        "the ext4 signature must still be there"
    );
    assert!(!ext4.mount_point().join("lost+found").as_os_str().is_empty());
}

#[test]
fn admin_commands_need_root() {
    if !require_root("admin commands as an unprivileged user") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.record().dir.clone();
    let (code, _, stderr) = run(env
        .as_nobody(&[&dir])
        .args(["convert", "--yes", "--data", "dup"])
        .arg(sbx.mount_point()));
    assert_eq!(code, 1);
    assert!(stderr.contains("needs root"), "{stderr}");
    let (code, _, stderr) = run(env
        .as_nobody(&[&dir])
        .args(["device", "add", "--yes"])
        .arg(sbx.mount_point())
        .arg(&sbx.devices()[0]));
    assert_eq!(code, 1);
    assert!(stderr.contains("adding a device needs root"), "{stderr}");
}
