//! Re-runs that must tell the truth (issue 49): a replace whose NEW already
//! is device N says "done" only when it can tie that to the replace it
//! started (its record); a remove re-run after SIGKILL follows the kernel's
//! running remove, and a finished one has nothing to do; Ctrl-C during
//! `replace --scrub` is an interruption with the state said; a sandbox used
//! to rehearse add/replace/remove is taken down whole.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use btrfs_lab::device::remove::RemoveReport;
use btrfs_lab::device::replace::ReplaceReport;
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, bin, leftovers_now, require_root, run, streamed, typed};
use crate::device::{fill, members, wait_for};

const GIB: u64 = 1 << 30;

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn replace_is_already_done_only_for_the_replace_it_started() {
    if !require_root("device replace re-run") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 3,
        size_bytes: GIB,
        data: Some(Profile::Raid1),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let ms = m.to_str().unwrap();
    fill(&m, 2, 32);
    let new = env.spare_device("new", GIB);
    let news = new.to_str().unwrap();
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "device", "replace", ms, "2", news, "--yes"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(members(&m)[&2], news);

    // The same command again: tied to the record of the replace it
    // started, it does the steps after it (verify) and says so.
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "device", "replace", ms, "2", news, "--yes"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (_, again): (_, ReplaceReport) = streamed(&stdout);
    assert!(again.plan.following, "{:?}", again.plan);
    assert!(
        again.plan.notes.iter().any(|n| n.contains("has finished")),
        "{:?}",
        again.plan.notes
    );
    let r = again.result.expect("verified");
    assert_eq!((r.devid, r.path.as_str()), (2, news));

    // A member named as its own replacement, after that replace finished:
    // nothing ties it to a replace; refused, nothing changed (it was
    // "replaced … verified", exit 0).
    let before = members(&m);
    let one = before[&1].clone();
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["device", "replace", ms, "1", &one, "--yes"]));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!(
            "{one} already is device 1 of {ms}: nothing to replace"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("replaced"), "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("btrfs-lab:"))
            .count(),
        1,
        "{stderr}"
    );
    // Named by path too.
    let (code, _, stderr) = run(env
        .cmd()
        .args(["device", "replace", ms, &one, &one, "--yes"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("nothing to replace"), "{stderr}");

    // Without the record (another state directory), NEW being device 2 is
    // not proof of a replace: refused too.
    let other = env.path().join("other-state");
    let (code, stdout, stderr) = run(Command::new(bin())
        .arg("--state-dir")
        .arg(&other)
        .args(["device", "replace", ms, "2", news, "--yes"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null()));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!(
            "{news} already is device 2 of {ms}: nothing to replace"
        )),
        "{stderr}"
    );
    assert_eq!(members(&m), before);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn remove_rerun_after_sigkill_follows_the_kernel_then_has_nothing_to_do() {
    if !require_root("device remove re-run after SIGKILL") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 4,
        size_bytes: GIB,
        data: Some(Profile::Single),
        metadata: Some(Profile::Raid1),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let ms = m.to_str().unwrap();
    fill(&m, 8, 64);
    let fsid = btrfs_lab::sys::kernel::btrfs::fsid(&m).unwrap();
    let op = PathBuf::from(format!("/sys/fs/btrfs/{fsid}/exclusive_operation"));
    let running = || fs::read_to_string(&op).is_ok_and(|s| s.trim() == "device remove");
    assert!(members(&m).contains_key(&4));

    // SIGKILL once the kernel runs the remove.
    let mut child = env
        .cmd()
        .args(["device", "remove", ms, "4", "--yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(&running), "the remove never started");
    child.kill().unwrap();
    child.wait().unwrap();

    // The re-run finishes the remove. The killed process leaves the
    // kernel only once its ioctl returns: the relocation stops at the fatal
    // signal (the device stays a member, the re-run removes it), or, when
    // the kill came after the last chunk (seen on a loaded machine), the
    // remove completed and the re-run has nothing to do (one document).
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "device", "remove", ms, "4", "--yes"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!stderr.contains("exclusive operation"), "{stderr}");
    if stdout.starts_with("{\n") {
        let r: RemoveReport = typed(&stdout);
        assert!(r.plan.devices.is_empty(), "{stdout}");
        assert_eq!(r.plan.already_removed[0].devid, 4, "{stdout}");
    } else {
        let (_, r): (_, RemoveReport) = streamed(&stdout);
        let done = r.result.expect("a result");
        assert_eq!(
            done.removed.iter().map(|d| d.devid).collect::<Vec<_>>(),
            [4]
        );
        assert!(done.redundancy.ok, "{:?}", done.redundancy);
    }
    assert!(!members(&m).contains_key(&4));
    assert!(!running());

    // Once more: nothing to do, exit 0 (it was exit 1).
    let (code, stdout, stderr) = run(env.cmd().args(["device", "remove", ms, "4", "--yes"]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("nothing to do: 4 is no longer a member of {ms}")),
        "{stdout}{stderr}"
    );
    let (code, stdout, _) = run(env
        .cmd()
        .args(["--json", "device", "remove", ms, "4", "--yes"]));
    assert_eq!(code, 0);
    let r: RemoveReport = typed(&stdout);
    assert!(r.plan.devices.is_empty());
    assert_eq!(r.plan.already_removed[0].devid, 4);
    assert!(r.result.is_none());
    // A device that never was a member is still refused.
    let (code, _, stderr) = run(env.cmd().args(["device", "remove", ms, "9", "--yes"]));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("device id 9 is not a device of"),
        "{stderr}"
    );
}

#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn ctrl_c_during_the_scrub_after_a_replace_is_an_interruption() {
    if !require_root("device replace --scrub, SIGINT") {
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
    fill(&m, 2, 32);
    let new = env.spare_device("new", GIB);
    let news = new.to_str().unwrap();
    let args: Vec<&std::ffi::OsStr> = ["device", "replace", ms, "2", news, "--yes", "--scrub"]
        .into_iter()
        .map(std::ffi::OsStr::new)
        .collect();
    let (code, stdout, stderr) =
        crate::common::with_pause_at(&env, "device-replace-scrubbing", &args, |pid| {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGINT,
            )
            .unwrap();
        });
    assert_eq!(code, 130, "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!(
            "SIGINT: the replace is done (device 2 is now {news}, verified); the scrub of it was cancelled"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "scrub it: {}",
            btrfs_lab::report::text::display_argv(&[
                "btrfs-lab",
                "scrub",
                &m.display().to_string()
            ])
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("failed"), "{stderr}");
    assert_eq!(members(&m)[&2], news);
    // No scrub is left running.
    let out = Command::new("btrfs")
        .args(["scrub", "status"])
        .arg(&m)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(!status.contains("running"), "{status}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn down_takes_down_a_sandbox_used_to_rehearse_add_replace_and_remove() {
    if !require_root("sandbox down after a rehearsal") {
        return;
    }
    let env = TestEnv::new();
    let record = env
        .sandbox(SandboxRequest {
            devices: 2,
            size_bytes: GIB,
            data: Some(Profile::Raid1),
            metadata: Some(Profile::Raid1),
            ..SandboxRequest::default()
        })
        .keep();
    let m = record.mount_point.clone();
    let ms = m.to_str().unwrap();
    let dir = record.dir.clone();
    fill(&m, 2, 16);
    // Devices for the rehearsal, made in the sandbox's own directory.
    let attach = |name: &str| {
        let image = dir.join(name);
        fs::File::create_new(&image).unwrap().set_len(GIB).unwrap();
        btrfs_lab::sys::block::loopdev::attach(&image, true)
            .unwrap()
            .path
    };
    let added = attach("added.img");
    let new = attach("new.img");
    for args in [
        vec!["device", "add", ms, added.to_str().unwrap(), "--yes"],
        vec!["device", "replace", ms, "1", new.to_str().unwrap(), "--yes"],
        vec!["device", "remove", ms, "2", "--yes"],
    ] {
        let (code, stdout, stderr) = run(env.cmd().args(&args));
        assert_eq!(code, 0, "{args:?}: {stdout}{stderr}");
    }
    // None of the devices up attached is a member any more.
    let now: Vec<String> = members(&m).into_values().collect();
    for d in &record.devices {
        let l = d.loop_device.as_ref().unwrap().display().to_string();
        assert!(!now.contains(&l), "{l} in {now:?}");
    }

    // --forget says what it would leave, and how to remove each.
    let (code, stdout, stderr) =
        run(env
            .cmd()
            .args(["sandbox", "down", "--forget", "--dry-run", &record.name]));
    assert_eq!(code, 0, "{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(all.contains(&format!("(umount {ms})")), "{all}");
    assert!(
        all.contains(&format!("losetup -d {}", new.display())),
        "{all}"
    );
    assert!(
        all.contains(&format!("rm {}", dir.join("added.img").display())),
        "{all}"
    );
    assert!(all.contains("sandbox down --yes"), "{all}");

    let (code, stdout, stderr) = run(env.cmd().args(["sandbox", "down", "--yes", &record.name]));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains(&format!("unmounted {ms}")), "{stdout}");
    for l in [&added, &new] {
        assert!(stdout.contains(&l.display().to_string()), "{stdout}");
    }
    assert!(leftovers_now(&dir).is_empty(), "{:?}", leftovers_now(&dir));
    assert!(!dir.exists(), "{} is left", dir.display());
    assert!(env.store().load_all().unwrap().is_empty());
}
