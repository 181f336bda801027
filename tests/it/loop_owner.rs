//! device add / replace with a loop device whose backing file another user
//! owns (what `udisksctl loop-setup` gives a desktop user): that user could
//! rewrite a member of root's filesystem under the kernel. Said, and
//! refused unless `--overwrite` (`--force`) is given (issue 48). The loop
//! device is the test's own, over a sparse file it chowns to uid 65534.

use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, require_root, run};

const GIB: u64 = 1 << 30;

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_loop_device_over_another_users_file_is_refused_without_overwrite() {
    if !require_root("device add/replace, a user's loop file") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 2,
        ..SandboxRequest::default()
    });
    let m = sbx.mount_point().to_str().unwrap().to_owned();
    let loop_dev = env.spare_device("users", 2 * GIB);
    let image = env.path().join("users.img");
    let uid = Some(rustix::fs::Uid::from_raw(65534));
    rustix::fs::chown(&image, uid, Some(rustix::fs::Gid::from_raw(65534))).unwrap();
    let d = loop_dev.to_str().unwrap();
    let says = "a file uid 65534 owns";
    for args in [
        vec!["device", "add", "--dry-run", &m, d],
        vec!["device", "replace", &m, "2", d, "--dry-run"],
    ] {
        let (code, out, err) = run(env.cmd().args(&args));
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains(image.to_str().unwrap()), "{args:?}: {err}");
        let (code, out, err) = run(env.cmd().args(&args).arg("--overwrite"));
        assert_eq!(code, 0, "{args:?} --overwrite: {err}");
        assert!(out.contains("dry run"), "{args:?}: {out}");
    }
    // Root's own loop file: no such reason.
    let root_dev = env.spare_device("roots", 2 * GIB);
    let (code, _, err) = run(env
        .cmd()
        .args(["device", "add", "--dry-run", &m])
        .arg(&root_dev));
    assert_eq!(code, 0, "{err}");
}
