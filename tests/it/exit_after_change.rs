//! Exit statuses that tell the truth about a change (issue 49): every
//! command that changes the system checks its stdout before the change
//! (`> /dev/full` refuses with 1 and nothing is changed), and a stdout that
//! fails only after the change (a file on a full filesystem, which an empty
//! write does not reveal) exits with `report-not-written` (74) and a line
//! that says the change was made and where to see it. The system's state is
//! checked after each run, as the status says it must be.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use btrfs_lab::model::exit::{ERROR, REPORT_NOT_WRITTEN};
use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, remount, require_root};

/// Runs `cmd` with `stdout` as its stdout: (exit status, stderr).
fn run_into(cmd: &mut Command, stdout: fs::File) -> (i32, String) {
    let out = cmd
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn dev_full() -> fs::File {
    fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

/// Refused before anything changed: 1, one error line saying so.
fn assert_refused(what: &str, code: i32, stderr: &str) {
    assert_failed_to_write(what, code, stderr);
    assert!(stderr.contains("nothing was changed"), "{what}: {stderr}");
}

/// 1 and one line: the output could not be written.
fn assert_failed_to_write(what: &str, code: i32, stderr: &str) {
    assert_eq!(code, i32::from(ERROR.code), "{what}: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("btrfs-lab: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{what}: {stderr}");
    assert!(
        errors[0].contains("cannot write the output"),
        "{what}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

/// Done, report lost: 74, one error line that says the change was made and
/// names `look`.
fn assert_done_not_written(what: &str, code: i32, stderr: &str, look: &str) {
    assert_eq!(code, i32::from(REPORT_NOT_WRITTEN.code), "{what}: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("btrfs-lab: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{what}: {stderr}");
    assert!(
        errors[0].contains("the change WAS made") && errors[0].contains(look),
        "{what}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

/// devid → path, as the kernel lists the members.
fn members(m: &Path) -> BTreeMap<u64, String> {
    btrfs_lab::sys::kernel::btrfs::devices(m)
        .unwrap()
        .into_iter()
        .map(|d| (d.devid, d.path))
        .collect()
}

fn data_profiles(m: &Path) -> Vec<Profile> {
    btrfs_lab::sys::kernel::btrfs::block_group_profiles(m)
        .unwrap()
        .data
}

/// `btrfs filesystem df -b M`: the allocation, byte for byte.
fn allocation(m: &Path) -> String {
    let out = Command::new("btrfs")
        .args(["filesystem", "df", "-b"])
        .arg(m)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn is_nocow(dir: &Path) -> bool {
    let out = Command::new("lsattr").arg("-d").arg(dir).output().unwrap();
    assert!(out.status.success(), "lsattr {}", dir.display());
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .next()
        .is_some_and(|flags| flags.contains('C'))
}

fn sandbox_names(env: &TestEnv) -> Vec<String> {
    let mut names: Vec<String> = env
        .store()
        .load_all()
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    names.sort();
    names
}

/// Every command that changes the system (every command with --yes or
/// --dry-run), `--yes --json > /dev/full`: exit 1 and nothing changed.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn changing_commands_into_dev_full_change_nothing() {
    if !require_root("changing commands into /dev/full") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 512 << 20,
        data: Some(Profile::Single),
        metadata: Some(Profile::Dup),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let ms = m.display().to_string();
    fs::write(m.join("data"), vec![7u8; 4 << 20]).unwrap();
    let dir = m.join("vm");
    fs::create_dir(&dir).unwrap();
    let spare = env.spare_device("spare", 512 << 20);
    let spare = spare.display().to_string();
    let before = members(&m);
    let second = before[&2].clone();
    let alloc = allocation(&m);
    let sandboxes = sandbox_names(&env);
    let bench_dir = m.join("bench");
    fs::create_dir(&bench_dir).unwrap();

    let cases: Vec<Vec<String>> = [
        vec!["device", "add", &ms, &spare],
        vec!["device", "remove", &ms, "2"],
        vec!["device", "replace", &ms, "2", &spare],
        vec!["convert", &ms, "--data", "raid1"],
        vec!["reclaim", &ms, "--goal", "64G"],
        vec!["scrub", &ms],
        vec!["nocow", &dir.display().to_string()],
        vec!["sandbox", "up", "--devices", "1", "--device-size", "512M"],
        vec!["sandbox", "down", &sbx.record().name],
        vec!["sandbox", "down", &sbx.record().name, "--forget"],
        vec!["scrub", &ms, "--cancel"],
        vec!["bench", &bench_dir.display().to_string(), "--small-files"],
    ]
    .iter()
    .map(|a| a.iter().map(|s| (*s).to_owned()).collect())
    .collect();
    for args in &cases {
        let (code, stderr) = run_into(env.cmd().arg("--json").args(args).arg("--yes"), dev_full());
        if args[0] == "reclaim" {
            // A fresh filesystem has no chunk whose relocation is estimated
            // to free space: reclaim ends at its plan (nothing changed),
            // before the step that checks the output.
            assert_failed_to_write("reclaim", code, &stderr);
        } else {
            assert_refused(&args.join(" "), code, &stderr);
        }
        // Nothing changed, whatever the command.
        assert_eq!(members(&m), before, "{args:?}");
        assert_eq!(data_profiles(&m), vec![Profile::Single], "{args:?}");
        assert_eq!(allocation(&m), alloc, "{args:?}");
        assert!(!is_nocow(&dir), "{args:?}");
        assert_eq!(sandbox_names(&env), sandboxes, "{args:?}");
        assert_eq!(
            crate::common::listing(&bench_dir),
            Vec::<String>::new(),
            "{args:?}"
        );
    }
    assert_eq!(members(&m)[&2], second);
    let scrub = Command::new("btrfs")
        .args(["scrub", "status"])
        .arg(&m)
        .output()
        .unwrap();
    let scrub = String::from_utf8_lossy(&scrub.stdout);
    assert!(scrub.contains("no stats available"), "a scrub ran: {scrub}");

    // rescue --copy-to (of a read-only btrfs): nothing copied.
    remount(&m, "ro");
    let target = env.path().join("rescued");
    let (code, stderr) = run_into(
        env.cmd()
            .args(["--json", "rescue"])
            .arg(&m)
            .arg("--copy-to")
            .arg(&target),
        dev_full(),
    );
    assert_refused("rescue --copy-to", code, &stderr);
    assert!(
        !target.exists() || crate::common::listing(&target).is_empty(),
        "rescue copied: {:?}",
        crate::common::listing(&target)
    );
}

/// stdout fails only after the change (a file on a full tmpfs: the check
/// before the change cannot see that, an empty write succeeds): the change
/// is made and the run exits 74 naming where to see it; a command whose
/// plan goes to stdout before the change (convert, scrub) is refused there
/// with 1 and changes nothing.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_report_lost_after_the_change_is_report_not_written() {
    if !require_root("stdout full after the change") {
        return;
    }
    let mut env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        size_bytes: 512 << 20,
        data: Some(Profile::Single),
        metadata: Some(Profile::Dup),
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let ms = m.display().to_string();
    fs::write(m.join("data"), vec![7u8; 4 << 20]).unwrap();
    let spare = env.spare_device("spare", 512 << 20);
    let full = env.tmpfs("full");
    nix::mount::mount(
        None::<&str>,
        &full,
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT,
        Some("size=64k"),
    )
    .unwrap();
    let _ = fs::write(full.join("filler"), vec![0u8; 128 << 10]); // ENOSPC expected
    let out_file = |name: &str| -> (PathBuf, fs::File) {
        let p = full.join(name);
        let f = fs::File::create(&p).unwrap();
        (p, f)
    };
    let show = format!("btrfs-lab show {ms}");

    // The plan first: held JSON that cannot be written refuses.
    for (name, args) in [
        ("convert", vec!["convert", &ms, "--data", "raid1"]),
        ("scrub", vec!["scrub", &ms]),
    ] {
        let (_, f) = out_file(name);
        let (code, stderr) = run_into(env.cmd().arg("--json").args(&args).arg("--yes"), f);
        assert_refused(name, code, &stderr);
    }
    assert_eq!(data_profiles(&m), vec![Profile::Single]);

    // device add: added, 74.
    let (p, f) = out_file("add");
    let (code, stderr) = run_into(
        env.cmd()
            .args(["--json", "device", "add", &ms])
            .arg(&spare)
            .arg("--yes"),
        f,
    );
    assert_done_not_written("device add", code, &stderr, &show);
    assert_eq!(fs::metadata(&p).unwrap().len(), 0);
    let now = members(&m);
    assert_eq!(now.len(), 3, "{now:?}");
    let added = *now
        .iter()
        .find(|(_, path)| Path::new(path.as_str()) == spare)
        .expect("the spare is a member")
        .0;

    // device remove: removed, 74 (its progress records fail too).
    let (_, f) = out_file("remove");
    let (code, stderr) = run_into(
        env.cmd().args([
            "--json",
            "device",
            "remove",
            &ms,
            &added.to_string(),
            "--yes",
        ]),
        f,
    );
    assert_done_not_written("device remove", code, &stderr, &show);
    assert_eq!(members(&m).len(), 2);

    // device replace: device 2 is the second spare now, 74 (its progress
    // records fail too).
    let spare2 = env.spare_device("spare2", 512 << 20);
    let (_, f) = out_file("replace");
    let (code, stderr) = run_into(
        env.cmd()
            .args(["--json", "device", "replace", &ms, "2"])
            .arg(&spare2)
            .arg("--yes"),
        f,
    );
    assert_done_not_written("device replace", code, &stderr, &show);
    assert_eq!(Path::new(&members(&m)[&2]), spare2);

    // nocow: the directory is NOCOW, 74.
    let dir = m.join("vm");
    fs::create_dir(&dir).unwrap();
    let (_, f) = out_file("nocow");
    let (code, stderr) = run_into(
        env.cmd().args(["--json", "nocow"]).arg(&dir).arg("--yes"),
        f,
    );
    assert_done_not_written("nocow", code, &stderr, "btrfs-lab nocow --check");
    assert!(is_nocow(&dir));

    // sandbox up and down: made, then removed, 74 each.
    let before = env.store().load_all().unwrap().len();
    let (_, f) = out_file("up");
    let (code, stderr) = run_into(
        env.cmd().args([
            "--json",
            "sandbox",
            "up",
            "--name",
            "exit74",
            "--devices",
            "1",
            "--device-size",
            "512M",
        ]),
        f,
    );
    assert_done_not_written("sandbox up", code, &stderr, "btrfs-lab sandbox list");
    assert_eq!(env.store().load_all().unwrap().len(), before + 1);
    let (_, f) = out_file("down");
    let (code, stderr) = run_into(
        env.cmd()
            .args(["--json", "sandbox", "down", "exit74", "--yes"]),
        f,
    );
    assert_done_not_written("sandbox down", code, &stderr, "btrfs-lab sandbox list");
    assert_eq!(env.store().load_all().unwrap().len(), before);
}

/// reclaim with chunks to relocate (a fragmented RAID1, as
/// tests/it/reclaim.rs makes it), `--yes --json > /dev/full`: its plan is
/// written before the first balance, the write fails, exit 1 and not a
/// chunk moved.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn reclaim_into_dev_full_moves_nothing() {
    if !require_root("reclaim into /dev/full") {
        return;
    }
    let env = TestEnv::new();
    let sbx = crate::reclaim::raid1(&env);
    let m = sbx.mount_point().to_path_buf();
    crate::reclaim::fill_and_fragment(&m, 4, 4);
    let alloc = allocation(&m);
    let (code, stderr) = run_into(
        env.cmd().args(["--json", "reclaim"]).arg(&m).arg("--yes"),
        dev_full(),
    );
    assert_refused("reclaim", code, &stderr);
    assert_eq!(allocation(&m), alloc, "reclaim moved chunks");
}
