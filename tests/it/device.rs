//! `device replace` and `device remove` on real sandboxes: the data
//! survives, a corrupted source is read around, Ctrl-C detaches a replace
//! (the kernel goes on) and stops a remove (the device stays a member), a
//! re-run finishes, chunks written without redundancy are found (btrfs-progs
//! #1077), refusals change nothing.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use btrfs_lab::device::remove::RemoveReport;
use btrfs_lab::device::replace::ReplaceReport;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::SandboxRequest;
use btrfs_lab::sys::kernel::btrfs::FsHandle;

use crate::common::{TestEnv, json, lose_member, require_root, run, streamed, typed, validate};

const GIB: u64 = 1 << 30;

/// Writes `count` files of `mib` MiB of pseudo-random bytes, then syncs.
pub(crate) fn fill(dir: &Path, count: usize, mib: usize) {
    for n in 0..count {
        let mut f = fs::File::create(dir.join(format!("file{n}"))).unwrap();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (n as u64 + 1);
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
    rustix::fs::syncfs(fs::File::open(dir).unwrap()).unwrap();
}

/// sha256 of every file, by name.
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

fn btrfs(args: &[&str], m: &Path) -> Output {
    Command::new("btrfs").args(args).arg(m).output().unwrap()
}

fn scrub_clean(m: &Path) {
    let out = btrfs(&["scrub", "start", "-B"], m);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("no errors found"),
        "scrub: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// devid → path, as the kernel lists the members.
pub(crate) fn members(m: &Path) -> BTreeMap<u64, String> {
    btrfs_lab::sys::kernel::btrfs::devices(m)
        .unwrap()
        .into_iter()
        .map(|d| (d.devid, d.path))
        .collect()
}

fn spawn(env: &TestEnv, args: &[&str]) -> Child {
    env.cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn sigint(child: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits (at most 120 s: a loaded machine) until `ready` holds.
pub(crate) fn wait_for(mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if ready() {
            return true;
        }
        thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Overwrites the first MiB of device `devid`'s first data stripe behind
/// btrfs' back, then lets a read-only scrub count the checksum errors.
fn corrupt(m: &Path, devid: u64, dev: &Path) {
    let h = FsHandle::open(m).unwrap();
    let chunks = h.chunk_records().unwrap().unwrap();
    let extents = h.dev_extents().unwrap().unwrap();
    let e = extents
        .iter()
        .find(|e| {
            e.devid == devid
                && chunks.iter().any(|c| {
                    c.logical == e.chunk_logical
                        && c.flags.contains(btrfs_uapi::space::BlockGroupFlags::DATA)
                })
        })
        .expect("a data stripe on the device");
    let out = Command::new("dd")
        .args([
            "if=/dev/zero",
            "bs=65536",
            "count=16",
            "oflag=direct",
            "conv=notrunc",
        ])
        .arg(format!("of={}", dev.display()))
        .arg(format!("seek={}", e.offset / 65536))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = btrfs(&["scrub", "start", "-B", "-r"], m);
    let stats = h.devices().unwrap();
    assert!(stats.iter().any(|d| d.devid == devid));
}

/// Cancels a replace still running when the test ends (a failed assertion
/// while the detached replace runs would leave the mount busy).
struct CancelReplace(PathBuf);

impl Drop for CancelReplace {
    fn drop(&mut self) {
        if let Ok(h) = FsHandle::open(&self.0) {
            let _ = h.replace_cancel();
            wait_for(|| {
                h.replace_status()
                    .is_ok_and(|s| s.state != btrfs_uapi::replace::ReplaceState::Started)
            });
        }
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn replace_reads_around_a_corrupted_source_survives_ctrl_c_and_verifies() {
    if !require_root("device replace") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: 2 * GIB,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let ms = m.to_str().unwrap();
    fill(&m, 6, 128);
    let before = hashes(&m);
    let devs = members(&m);
    let old_path = PathBuf::from(&devs[&2]);
    corrupt(&m, 2, &old_path);
    let new = env.spare_device("new", 3 * GIB);
    let news = new.to_str().unwrap();

    // The plan reads from the other copies, and grows NEW to its size.
    let (code, stdout, stderr) =
        run(env
            .cmd()
            .args(["--json", "device", "replace", ms, "2", news, "--dry-run"]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(validate(&json(&stdout), &stdout), "device-replace");
    let plan: ReplaceReport = typed(&stdout);
    let plan = plan.plan;
    assert!(plan.refusals.is_empty(), "{:?}", plan.refusals);
    assert!(plan.read_from_others, "{plan:?}");
    assert!(
        plan.commands[0].contains(&"-r".to_owned()),
        "{:?}",
        plan.commands
    );
    assert!(
        plan.commands
            .iter()
            .any(|c| c.contains(&"2:max".to_owned())),
        "{:?}",
        plan.commands
    );
    assert_eq!(members(&m), devs, "a dry run changes nothing");

    // Ctrl-C once the kernel runs it: the replace goes on.
    let _cancel = CancelReplace(m.clone());
    let child = spawn(&env, &["device", "replace", ms, "2", news, "--yes"]);
    let h = FsHandle::open(&m).unwrap();
    let started = wait_for(|| {
        h.replace_status()
            .is_ok_and(|s| s.state != btrfs_uapi::replace::ReplaceState::NeverStarted)
    });
    assert!(started, "the replace never started");
    sigint(&child);
    let (code, _, stderr) = finish(child);
    if code == 130 {
        assert!(
            stderr.contains("left the replace running in the kernel"),
            "{stderr}"
        );
        assert!(stderr.contains("--status"), "{stderr}");
    } else {
        // It ended before the signal was read: the run finished normally.
        assert_eq!(code, 0, "{stderr}");
    }
    let (code, stdout, _) = run(env
        .cmd()
        .args(["--json", "device", "replace", ms, "--status"]));
    assert_eq!(code, 0);
    assert_eq!(validate(&json(&stdout), &stdout), "device-replace-status");

    // A re-run follows it (or finds it finished) and does the rest.
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "device", "replace", ms, "2", news, "--yes"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (_, done): (_, ReplaceReport) = streamed(&stdout);
    let r = done.result.expect("a result");
    assert_eq!(r.devid, 2);
    assert_eq!(Path::new(&r.path), new);
    assert_eq!(r.size, 3 * GIB, "NEW was grown to its size");
    assert!(r.redundancy.ok, "{:?}", r.redundancy);
    assert_eq!(r.uncorrectable_read_errors, 0);
    let now = members(&m);
    assert_eq!(now[&2], news);
    assert!(!now.values().any(|p| Path::new(p) == old_path));
    assert_eq!(hashes(&m), before);
    scrub_clean(&m);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn replace_then_scrub_runs_btrfs_labs_scrub_of_the_new_device() {
    if !require_root("device replace --scrub") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: GIB,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let ms = m.to_str().unwrap();
    fill(&m, 2, 16);
    let before = hashes(&m);
    let new = env.spare_device("new", GIB);
    let news = new.to_str().unwrap();
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["device", "replace", ms, "2", news, "--yes", "--scrub"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("scrubbing the new device: {news}")),
        "{stderr}"
    );
    assert!(!stderr.contains("btrfs scrub start"), "{stderr}");
    assert!(
        stdout.contains("scrub of the new device: clean"),
        "{stdout}"
    );
    // btrfs-lab's scrub ran, of the new device alone: its state says so.
    let (code, stdout, stderr) = run(env.cmd().args(["--json", "scrub", ms, "--status"]));
    assert_eq!(code, 0, "{stderr}");
    let st: btrfs_lab::scrub::ScrubStatus = typed(&stdout);
    let last = st.last.expect("the scrub of the new device is saved");
    assert!(last.finished, "{last:?}");
    let devids: Vec<u64> = last.devices.iter().map(|d| d.devid).collect();
    assert_eq!(devids, [2]);
    assert!(last.devices[0].bytes_scrubbed > 0, "{last:?}");

    // --status after it: as much as `btrfs replace status` says (when it
    // started and finished, how long it took, the error counts), and the
    // next step is btrfs-lab's scrub.
    let (code, stdout, stderr) = run(env.cmd().args(["device", "replace", ms, "--status"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!("replace on {ms}: the last one finished\n")),
        "{stdout}"
    );
    let when = stdout.lines().nth(1).unwrap_or_default();
    assert!(
        when.starts_with("  started 20")
            && when.contains(", finished 20")
            && when.contains(", took "),
        "{stdout}"
    );
    assert!(
        stdout.contains("  errors: 0 write, 0 uncorrectable read\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with(&format!("  next: btrfs-lab scrub {ms}\n")),
        "{stdout}"
    );
    let (code, stdout, _) = run(env
        .cmd()
        .args(["--json", "device", "replace", ms, "--status"]));
    assert_eq!(code, 0);
    let st: btrfs_lab::device::replace::ReplaceStatusReport = typed(&stdout);
    let (start, stop) = (st.started_at.unwrap(), st.stopped_at.unwrap());
    assert!(start <= stop, "{st:?}");

    // With --json the stream is the replace's alone: progress, then its
    // document (no scrub records among them).
    let newer = env.spare_device("newer", GIB);
    let (code, stdout, stderr) = run(env.cmd().args([
        "--json",
        "device",
        "replace",
        ms,
        "2",
        newer.to_str().unwrap(),
        "--yes",
        "--scrub",
    ]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (_, done): (_, ReplaceReport) = streamed(&stdout);
    assert_eq!(Path::new(&done.result.expect("a result").path), newer);
    assert_eq!(hashes(&m), before);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_member_of_another_mounted_btrfs_is_named_as_such_not_busy() {
    if !require_root("device add of another filesystem's member") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        size_bytes: GIB,
        ..SandboxRequest::default()
    });
    let other = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: GIB,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let om = other.mount_point().display().to_string();
    let before = members(&m);
    let devs = other.devices();
    // The member the other filesystem was mounted from is a mount's
    // source; the second one is named by no mount: both are named as the
    // other filesystem's, neither as "busy", and --overwrite is not offered.
    for (dev, want) in [
        (&devs[0], "is mounted at".to_owned()),
        (
            &devs[1],
            format!("is a member of the btrfs mounted at {om}"),
        ),
    ] {
        let (code, stdout, stderr) = run(env
            .cmd()
            .args(["device", "add", "--yes", "--overwrite"])
            .arg(&m)
            .arg(dev));
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert!(stderr.contains(&want), "{}: {stderr}", dev.display());
        assert!(!stderr.contains("busy"), "{stderr}");
        assert!(!stderr.contains("--overwrite destroys it"), "{stderr}");
    }
    assert_eq!(members(&m), before, "a refusal changes nothing");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn replace_finds_chunks_written_without_redundancy_and_names_the_fix() {
    if !require_root("device replace #1077") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 2 * GIB,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let ms = m.to_str().unwrap();
    // Enough for several data chunks (at most 10% of the devices each).
    fill(&m, 6, 128);
    // What a degraded mount leaves behind: data chunks in SINGLE next to
    // the RAID1 ones.
    let out = btrfs(&["balance", "start", "-dconvert=single,soft,limit=1"], &m);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = hashes(&m);
    let new = env.spare_device("new", 2 * GIB);
    let (code, stdout, stderr) = run(env.cmd().args([
        "--json",
        "device",
        "replace",
        ms,
        "1",
        new.to_str().unwrap(),
        "--yes",
    ]));
    assert_eq!(code, 4, "not-redundant: {stdout}{stderr}");
    let r = streamed::<ReplaceReport>(&stdout).1.result.unwrap();
    assert!(!r.redundancy.ok);
    let weak = &r.redundancy.weak[0];
    assert_eq!(weak.profile, Profile::Single);
    assert_eq!(weak.reason, "fewer-copies");
    let fix = r.redundancy.fix.clone().unwrap();
    assert_eq!(fix, ["btrfs-lab", "convert", ms, "--data", "raid1"]);
    // The fix works and then the check is clean.
    let (code, _, stderr) = run(env.cmd().args(&fix[1..]).arg("--yes"));
    assert_eq!(code, 0, "{stderr}");
    let h = FsHandle::open(&m).unwrap();
    let check = btrfs_lab::device::redundancy::check(
        &h.chunk_records().unwrap().unwrap(),
        &members(&m).keys().copied().collect::<Vec<_>>(),
        ms,
    );
    assert!(check.ok, "{check:?}");
    assert_eq!(hashes(&m), before);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn remove_refuses_below_the_minimum_stops_on_ctrl_c_and_a_rerun_finishes() {
    if !require_root("device remove") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 4,
        size_bytes: 2 * GIB,
        data: Some(Profile::Raid0),
        metadata: Some(Profile::Raid1c3),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let ms = m.to_str().unwrap();
    fill(&m, 6, 128);
    let before = hashes(&m);
    let devs = members(&m);

    // Refusals: one line each, nothing changed.
    let (code, _, stderr) = run(env.cmd().args(["device", "remove", ms, "1", "2"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("raid1c3 needs 3"), "{stderr}");
    assert!(stderr.contains("btrfs-lab convert"), "{stderr}");
    assert!(stderr.contains("--metadata raid1"), "{stderr}");
    let (code, _, stderr) = run(env.cmd().args(["device", "remove", ms, "9"]));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("device id 9 is not a device of"),
        "{stderr}"
    );
    let (code, _, stderr) = run(env.cmd().args(["device", "remove", ms, "missing"]));
    assert_eq!(code, 1);
    assert!(stderr.contains("no device of"), "{stderr}");
    let (code, _, stderr) =
        run(env
            .as_nobody(&[])
            .args(["device", "remove", ms, "4", "--dry-run"]));
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("btrfs-lab:"))
            .count(),
        1,
        "{stderr}"
    );
    assert_eq!(members(&m), devs);

    // Ctrl-C while the kernel relocates: the device stays a member.
    let child = spawn(&env, &["device", "remove", ms, "4", "--yes"]);
    let fsid = btrfs_lab::sys::kernel::btrfs::fsid(&m).unwrap();
    let op = format!("/sys/fs/btrfs/{fsid}/exclusive_operation");
    let started = wait_for(|| fs::read_to_string(&op).is_ok_and(|s| s.trim() != "none"));
    assert!(started, "the remove never started");
    sigint(&child);
    let (code, _, stderr) = finish(child);
    if code == 130 {
        assert!(stderr.contains("device 4 is still a member"), "{stderr}");
        assert!(members(&m).contains_key(&4));
    } else {
        assert_eq!(code, 0, "{stderr}");
    }
    // A re-run continues (or finds nothing left of device 4).
    if members(&m).contains_key(&4) {
        let (code, stdout, stderr) = run(env
            .cmd()
            .args(["--json", "device", "remove", ms, "4", "--yes"]));
        assert_eq!(code, 0, "{stdout}{stderr}");
        let (progress, r) = streamed::<RemoveReport>(&stdout);
        assert!(progress.iter().all(|p| p.operation == "device-remove"));
        let r = r.result.unwrap();
        assert!(r.redundancy.ok, "{:?}", r.redundancy);
        assert_eq!(r.devices.len(), 3);
    }
    assert!(!members(&m).contains_key(&4));
    assert_eq!(hashes(&m), before);

    // Two at once, after lowering metadata to what one device allows.
    let (code, _, stderr) =
        run(env
            .cmd()
            .args(["convert", ms, "--metadata", "dup", "--yes", "--force"]));
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "device", "remove", ms, "1", "3", "--yes"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (_, r) = streamed::<RemoveReport>(&stdout);
    assert_eq!(r.plan.devices.len(), 2);
    let done = r.result.unwrap();
    assert_eq!(done.removed.len(), 2);
    assert_eq!(members(&m).keys().copied().collect::<Vec<_>>(), [2]);
    assert_eq!(hashes(&m), before);
    scrub_clean(&m);
}

/// A RAID1 sandbox of `devices` 1 GiB members with three 64 MiB files,
/// mounted `-o degraded` with its last member lost: the sandbox, the
/// mount, the files' hashes, the loop devices.
fn raid1_that_lost_a_member(
    env: &TestEnv,
    devices: u32,
) -> (
    btrfs_lab::sandbox::Sandbox,
    PathBuf,
    BTreeMap<String, String>,
    Vec<PathBuf>,
) {
    let sbx = env.sandbox(SandboxRequest {
        devices,
        size_bytes: GIB,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    fill(&m, 3, 64);
    let before = hashes(&m);
    let devs = sbx.devices();
    lose_member(&m, &devs[0], &devs[devices as usize - 1], "degraded");
    assert_eq!(
        members(&m)[&(devices as u64)],
        "",
        "the last devid is missing"
    );
    (sbx, m, before, devs)
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_missing_device_is_replaced_by_devid_and_redundancy_comes_back() {
    if !require_root("device replace of a missing device") {
        return;
    }
    let env = TestEnv::new();
    let (_sbx, m, before, devs) = raid1_that_lost_a_member(&env, 2);
    let ms = m.to_str().unwrap();
    let new = env.spare_device("new", GIB);
    let news = new.to_str().unwrap();

    // Named by path it is not found (it has none): the devid is the way.
    let gone = devs[1].to_str().unwrap();
    let (code, _, stderr) = run(env
        .cmd()
        .args(["device", "replace", ms, gone, news, "--dry-run"]));
    assert_ne!(code, 0, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let (code, stdout, stderr) =
        run(env
            .cmd()
            .args(["--json", "device", "replace", ms, "2", news, "--dry-run"]));
    assert_eq!(code, 0, "{stderr}");
    let plan = typed::<ReplaceReport>(&stdout).plan;
    assert!(plan.refusals.is_empty(), "{:?}", plan.refusals);

    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "device", "replace", ms, "2", news, "--yes"]));
    let r = streamed::<ReplaceReport>(&stdout)
        .1
        .result
        .expect("a result");
    assert_eq!(r.devid, 2);
    assert_eq!(Path::new(&r.path), new);
    // The degraded read-write mount may have allocated chunks with one copy
    // (the kernel cannot place a second): found, exit 4, and the soft
    // conversion named that fixes only them (btrfs-progs #1077).
    if code == 4 {
        assert!(!r.redundancy.ok);
        assert!(
            r.redundancy
                .weak
                .iter()
                .all(|w| w.profile == Profile::Single),
            "{:?}",
            r.redundancy
        );
        let fix = r.redundancy.fix.clone().expect("the fix");
        assert_eq!(fix[..3], ["btrfs-lab", "convert", ms]);
        let (code, out, err) = run(env.cmd().args(&fix[1..]).arg("--yes"));
        assert_eq!(code, 0, "{fix:?}: {out}{err}");
        let chunks = FsHandle::open(&m)
            .unwrap()
            .chunk_records()
            .unwrap()
            .unwrap();
        assert!(
            chunks
                .iter()
                .all(|c| btrfs_lab::sys::kernel::btrfs::profile_of(c.flags) == Profile::Raid1),
            "{chunks:?}"
        );
    } else {
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert!(r.redundancy.ok, "{:?}", r.redundancy);
    }
    let now = members(&m);
    assert_eq!(now[&2], news);
    assert!(now.values().all(|p| !p.is_empty()), "{now:?}");
    assert_eq!(hashes(&m), before);
    scrub_clean(&m);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn remove_missing_drops_the_lost_member_and_keeps_every_byte() {
    if !require_root("device remove missing") {
        return;
    }
    let env = TestEnv::new();
    let (_sbx, m, before, _) = raid1_that_lost_a_member(&env, 3);
    let ms = m.to_str().unwrap();

    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "device", "remove", ms, "missing", "--yes"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let r = streamed::<RemoveReport>(&stdout)
        .1
        .result
        .expect("a result");
    assert!(r.redundancy.ok, "{:?}", r.redundancy);
    let now = members(&m);
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(now.values().all(|p| !p.is_empty()), "{now:?}");
    assert_eq!(hashes(&m), before);
    scrub_clean(&m);

    // Nothing is missing any more: the remove of `missing` that this tool
    // recorded took it out, so the same command has nothing to do (exit 0,
    // issue 49); nothing changes.
    let (code, stdout, stderr) = run(env.cmd().args(["device", "remove", ms, "missing", "--yes"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("nothing to do: device 3 (missing) is no longer a member of"),
        "{stdout}"
    );
    assert_eq!(members(&m), now);
    // Without that record (another state directory) `missing` is refused.
    let (code, _, stderr) = run(std::process::Command::new(crate::common::bin())
        .arg("--state-dir")
        .arg(env.path().join("other-state"))
        .args(["device", "remove", ms, "missing", "--yes"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no device of"), "{stderr}");
    assert_eq!(members(&m), now);
}

/// One case of the remove space matrix: `removals` (devids) one after the
/// other, each planned by btrfs-lab and judged against the kernel.
struct RemoveCase {
    devices: u32,
    /// Size of each device, MiB.
    mib: u64,
    data: Profile,
    metadata: Profile,
    fill_mib: usize,
    removals: &'static [u64],
}

/// `device remove`'s space check (the relocation replayed chunk by chunk
/// onto the devices that stay) against the kernel (issue 49): every
/// "fits" completes, every refusal is a real ENOSPC when the kernel's own
/// `btrfs device remove` is forced; a "may run out" may go either way.
/// 4 × 1.5 GiB RAID1 with 649 MiB, device 3 then device 1: the second ran
/// the kernel out of space before.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn the_remove_plan_predicts_the_kernels_enospc() {
    if !require_root("remove space matrix") {
        return;
    }
    use Profile::{Raid1, Single};
    let case = |devices, mib, data, metadata, fill_mib, removals| RemoveCase {
        devices,
        mib,
        data,
        metadata,
        fill_mib,
        removals,
    };
    let cases = [
        case(4, 1536, Raid1, Raid1, 649, &[3, 1]),
        case(4, 1536, Raid1, Raid1, 649, &[1, 3]),
        case(3, 1024, Raid1, Raid1, 700, &[1]),
        case(3, 1024, Raid1, Raid1, 400, &[2]),
        case(3, 1024, Raid1, Raid1, 100, &[2]),
        case(3, 1024, Single, Raid1, 1500, &[1]),
        case(3, 1024, Single, Raid1, 1100, &[3]),
    ];
    let env = TestEnv::new();
    let (mut fits, mut refused, mut unsure) = (0, 0, 0);
    for c in &cases {
        let sbx = env.sandbox(SandboxRequest {
            devices: c.devices,
            size_bytes: c.mib << 20,
            data: Some(c.data),
            metadata: Some(c.metadata),
            ..SandboxRequest::default()
        });
        let m = sbx.mount_point().to_path_buf();
        fill(&m, 1, c.fill_mib);
        let before = hashes(&m);
        for &id in c.removals {
            let what = format!(
                "{} × {} MiB {}/{} with {} MiB, remove {id} (of {:?})",
                c.devices, c.mib, c.data, c.metadata, c.fill_mib, c.removals
            );
            let (code, stdout, stderr) = run(env
                .cmd()
                .args(["device", "remove", "--yes"])
                .arg(&m)
                .arg(id.to_string()));
            let warned = format!("{stdout}{stderr}").contains("space: may run out");
            if code == 0 {
                assert!(!members(&m).contains_key(&id), "{what}: still a member");
                if warned {
                    unsure += 1;
                } else {
                    fits += 1;
                }
                eprintln!(
                    "{what}: plan {}, the remove completed",
                    if warned { "warned" } else { "fits" }
                );
                continue;
            }
            if warned {
                unsure += 1;
                // ENOSPC, or the transaction aborted with ENOSPC and the
                // filesystem forced read-only (the metadata case).
                assert!(
                    stderr.contains("No space left on device")
                        || stderr.contains("Read-only file system"),
                    "{what}: warned, but the remove failed otherwise: {stdout}{stderr}"
                );
                eprintln!(
                    "{what}: plan warned, the kernel ran out of space: {}",
                    stderr.lines().next().unwrap_or("")
                );
                break;
            }
            refused += 1;
            assert_eq!(code, 1, "{what}: {stdout}{stderr}");
            assert!(
                stderr.contains("not enough space to remove"),
                "{what}: {stderr}"
            );
            assert!(
                members(&m).contains_key(&id),
                "{what}: the refusal changed something"
            );
            let out = btrfs(&["device", "remove", &id.to_string()], &m);
            let err = String::from_utf8_lossy(&out.stderr);
            // ENOSPC, or (where metadata ran out) the transaction aborted
            // with ENOSPC and the filesystem forced read-only: the remove
            // fails with EROFS.
            assert!(
                !out.status.success()
                    && (err.contains("No space left on device")
                        || err.contains("Read-only file system")),
                "{what}: refused, but the kernel's remove did not run out of space: {}{err}",
                String::from_utf8_lossy(&out.stdout)
            );
            eprintln!(
                "{what}: plan refused, the kernel ran out of space: {}",
                err.trim()
            );
            break;
        }
        assert_eq!(hashes(&m), before, "{c:?}", c = c.removals);
    }
    assert!(
        fits > 0 && refused > 0,
        "the matrix needs both outcomes to test anything: {fits} fit, {refused} refused ({unsure} warned)"
    );
    eprintln!("{fits} fit, {refused} refused, {unsure} warned");
}
