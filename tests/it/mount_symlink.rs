//! The commands that change a filesystem (convert, reclaim, scrub, device
//! add / replace / remove) open MOUNT once and hold it: a symbolic link
//! another user planted on the way to a btrfs is refused in one line, for
//! each of them, and nothing is planned for the filesystem it points to
//! (issue 48). `--dry-run` everywhere: nothing would be changed anyway.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, require_root, run};

const UID: u32 = 65534;

/// `dir/name`, a symbolic link to `to` owned by uid 65534 in a directory
/// that user owns.
fn planted(dir: &Path, to: &Path) -> std::path::PathBuf {
    fs::create_dir(dir).unwrap();
    let link = dir.join("array");
    std::os::unix::fs::symlink(to, &link).unwrap();
    let uid = Some(rustix::fs::Uid::from_raw(UID));
    let gid = Some(rustix::fs::Gid::from_raw(UID));
    rustix::fs::chownat(
        rustix::fs::CWD,
        &link,
        uid,
        gid,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
    rustix::fs::chown(dir, uid, gid).unwrap();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    link
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_planted_symlink_to_a_btrfs_is_refused_by_every_changing_command() {
    if !require_root("MOUNT through another user's symlink") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        ..SandboxRequest::default()
    });
    let spare = env.spare_device("spare", 1 << 30);
    let link = planted(&env.path().join("user"), sbx.mount_point());
    let l = link.to_str().unwrap();
    let s = spare.to_str().unwrap();
    let commands: [&[&str]; 6] = [
        &["convert", "--dry-run", "--data", "raid1", l],
        &["reclaim", "--dry-run", l],
        &["scrub", l, "--dry-run"],
        &["device", "add", "--dry-run", l, s],
        &["device", "replace", l, "2", s, "--dry-run"],
        &["device", "remove", l, "2", "--dry-run"],
    ];
    for args in commands {
        let (code, out, err) = run(env.cmd().args(args));
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        let lines: Vec<&str> = err
            .trim()
            .lines()
            .filter(|l| !l.starts_with("hint"))
            .collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(
            lines[0].contains("is a symbolic link owned by uid 65534"),
            "{args:?}: {err}"
        );
    }
    // Through the real mount point, the same dry runs are planned.
    let m = sbx.mount_point().to_str().unwrap();
    let (code, _, err) = run(env.cmd().args(["reclaim", "--dry-run", m]));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(env.cmd().args(["scrub", m, "--dry-run"]));
    assert_eq!(code, 0, "{err}");
}
