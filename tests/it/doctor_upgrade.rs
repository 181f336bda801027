//! `doctor --before-upgrade VERSION` on a real loop-device btrfs: a
//! filesystem mounted with the v1 space cache (this kernel, 6.18, still
//! allows it) gets `upgrade-space-cache-v1` for 7.3 and not for 6.12; an
//! fstab with the plain `usebackuproot` fails on 7.3; a bad VERSION is one
//! usage line and exit 3 (doctor's UNKNOWN, as every bad command line).

use std::fs;
use std::path::Path;
use std::process::Command;

use btrfs_lab::doctor::DoctorReport;
use btrfs_lab::model::finding::Severity;
use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, must, require_root, run, typed};

fn doctor(env: &TestEnv, m: &Path, extra: &[&str]) -> (i32, DoctorReport) {
    let (code, out, err) = run(env.cmd().args(["--json", "doctor"]).args(extra).arg(m));
    assert!(!err.contains("panicked"), "{err}");
    (code, typed(&out))
}

fn codes(r: &DoctorReport) -> Vec<(String, Severity)> {
    r.filesystems[0]
        .findings
        .iter()
        .map(|f| (f.code.to_string(), f.severity))
        .collect()
}

fn has(r: &DoctorReport, code: &str) -> bool {
    codes(r).iter().any(|(c, _)| c == code)
}

/// The running kernel's `major.minor`.
fn running() -> String {
    let release = btrfs_lab::sys::kernel_release();
    let mut it = release.split('.');
    format!("{}.{}", it.next().unwrap(), it.next().unwrap())
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn v1_space_cache_and_usebackuproot_before_upgrading_to_7_3() {
    if !require_root("doctor --before-upgrade") {
        return;
    }
    let env = TestEnv::new();
    // No free space tree at mkfs, then mounted with the v1 cache.
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 1 << 30,
        mkfs_args: vec!["-R".into(), "^free-space-tree".into()],
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_path_buf();
    let dev = sbx.devices()[0].clone();
    must(Command::new("umount").arg(&m));
    let mounted = Command::new("mount")
        .args(["-t", "btrfs", "-o", "space_cache=v1"])
        .arg(&dev)
        .arg(&m)
        .output()
        .unwrap();
    if !mounted.status.success() {
        // A kernel that refuses v1 already (7.3 and later fall back to no
        // cache instead of refusing, but a build may differ): say so and
        // leave the sandbox mounted as it was for its clean-up.
        must(Command::new("mount").arg(&dev).arg(&m));
        eprintln!(
            "this kernel does not mount with space_cache=v1: {}",
            String::from_utf8_lossy(&mounted.stderr)
        );
        return;
    }
    let opts = fs::read_to_string("/proc/self/mounts").unwrap();
    let v1 = opts
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(&*m.to_string_lossy()))
        .any(|l| l.contains("space_cache") && !l.contains("space_cache=v2"));
    if !v1 {
        eprintln!(
            "this kernel ({}) does not show the v1 cache in use: skipped",
            running()
        );
        return;
    }

    // 7.3: the upgrade finding, in place of space-cache-v1.
    let (code, r) = doctor(&env, &m, &["--before-upgrade", "7.3"]);
    assert_eq!(code, 1, "{:?}", codes(&r));
    assert!(has(&r, "upgrade-space-cache-v1"), "{:?}", codes(&r));
    assert!(
        !has(&r, "space-cache-v1"),
        "one finding per problem: {:?}",
        codes(&r)
    );
    let fi = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "upgrade-space-cache-v1")
        .unwrap();
    assert_eq!(fi.severity, Severity::Warning);
    assert!(fi.why.contains("545e560a5b0f"), "{}", fi.why);
    assert!(
        fi.command
            .as_deref()
            .is_some_and(|c| c.contains("clear_cache,space_cache=v2")),
        "{fi:?}"
    );
    let u = r.filesystems[0].before_upgrade.as_ref().unwrap();
    assert_eq!(u.target, "7.3");
    assert!(u.changes.iter().any(|c| *c == "upgrade-space-cache-v1"));

    // 6.12: nothing about 7.3's change; the audit still says v1.
    let (_, r) = doctor(&env, &m, &["--before-upgrade", "6.12"]);
    assert!(!has(&r, "upgrade-space-cache-v1"), "{:?}", codes(&r));
    assert!(has(&r, "space-cache-v1"), "{:?}", codes(&r));

    // An fstab that gives usebackuproot (and space_cache) fails on 7.3.
    let uuid = r.filesystems[0].uuid.clone();
    let tab = env.path().join("fstab");
    fs::write(
        &tab,
        format!(
            "UUID={uuid} {} btrfs noatime,space_cache,usebackuproot 0 0\n",
            m.display()
        ),
    )
    .unwrap();
    let tab_arg = tab.to_string_lossy().into_owned();
    let (_, r) = doctor(
        &env,
        &m,
        &["--fstab", &tab_arg, "--before-upgrade", "7.3.4"],
    );
    let fi = r.filesystems[0]
        .findings
        .iter()
        .find(|f| f.code == "upgrade-usebackuproot")
        .unwrap_or_else(|| panic!("{:?}", codes(&r)));
    assert!(
        fi.evidence
            .iter()
            .any(|e| e.name == "options for 7.3" && e.value == "noatime"),
        "{fi:?}"
    );
    let (_, r) = doctor(&env, &m, &["--fstab", &tab_arg, "--before-upgrade", "7.2"]);
    assert!(!has(&r, "upgrade-usebackuproot"), "{:?}", codes(&r));

    // The running kernel itself: nothing changes, said plainly.
    let (_, out, _) = run(env
        .cmd()
        .args(["doctor", "--before-upgrade", &running()])
        .arg(&m));
    assert!(
        out.contains(&format!(
            "on Linux {}: nothing changes for this filesystem",
            running()
        )),
        "{out}"
    );

    // Back to the free space tree, as the finding says: nothing for 7.3.
    must(Command::new("umount").arg(&m));
    must(
        Command::new("mount")
            .args(["-t", "btrfs", "-o", "clear_cache,space_cache=v2"])
            .arg(&dev)
            .arg(&m),
    );
    let (_, r) = doctor(&env, &m, &["--before-upgrade", "7.3"]);
    assert!(!has(&r, "upgrade-space-cache-v1"), "{:?}", codes(&r));
    assert!(!has(&r, "space-cache-v1"), "{:?}", codes(&r));
}

#[test]
fn a_bad_version_is_one_usage_line_and_exit_3() {
    let env = TestEnv::new();
    for bad in ["7", "7.x", "latest", ""] {
        let (code, out, err) = run(env.cmd().args(["doctor", "--before-upgrade", bad]));
        assert_eq!(code, 3, "{bad:?}: {err}");
        assert_eq!(out, "");
        assert!(
            err.starts_with("btrfs-lab: error:") && err.contains("--before-upgrade"),
            "{err}"
        );
    }
}
