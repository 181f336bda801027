//! Issue 48: what root writes where a user said (`--textfile`) and reads
//! where a user said (`doctor --fstab`, scrub's state files) goes through
//! the safe path layer (`src/sys/fs/`): only regular files are replaced,
//! another user's directory is refused without `--allow-untrusted-target`,
//! and nothing that is not a bounded regular file is read.

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use rustix::fs::{FileType, Mode, makedev, mknodat};

use crate::common::{TestEnv, require_root, run};

/// `doctor` that cannot look (a path that does not exist) with `--textfile
/// PATH`: the textfile is the only thing it would write.
fn doctor_textfile(env: &TestEnv, path: &Path, extra: &[&str]) -> (i32, String) {
    let (code, _, stderr) = run(env
        .cmd()
        .args(["doctor", "/nonexistent/btrfs-lab"])
        .args(extra)
        .arg("--textfile")
        .arg(path));
    (code, stderr)
}

/// As root, `doctor --textfile` at a device node (the test's own `null`,
/// 1:3 like /dev/null), a FIFO or a symbolic link leaves it what it was;
/// in a directory another user owns it writes nothing unless
/// `--allow-untrusted-target`, and says why in one line.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn textfile_replaces_only_regular_files_in_root_directories() {
    if !require_root("doctor --textfile at a device node") {
        return;
    }
    let env = TestEnv::new();
    let dir = env.path().join("targets");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let null = dir.join("null");
    mknodat(
        rustix::fs::CWD,
        &null,
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        makedev(1, 3),
    )
    .unwrap();
    let fifo = dir.join("fifo");
    mknodat(
        rustix::fs::CWD,
        &fifo,
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let victim = dir.join("victim");
    fs::write(&victim, "keep\n").unwrap();
    let link = dir.join("link.prom");
    std::os::unix::fs::symlink(&victim, &link).unwrap();

    for (path, what) in [
        (&null, "a character device"),
        (&fifo, "a FIFO"),
        (&link, "a symbolic link"),
    ] {
        for extra in [&[][..], &["--allow-untrusted-target"][..]] {
            let (code, stderr) = doctor_textfile(&env, path, extra);
            assert_eq!(code, 3, "{stderr}");
            assert!(
                stderr.contains(&format!(
                    "not writing {}: it is {what}, not a regular file",
                    path.display()
                )),
                "{stderr}"
            );
            assert!(!stderr.contains("still holds"), "{stderr}");
        }
    }
    let ft = fs::symlink_metadata(&null).unwrap().file_type();
    assert!(ft.is_char_device(), "the device node stays one");
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(fs::read_to_string(&victim).unwrap(), "keep\n");
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["fifo", "link.prom", "null", "victim"],
        "no temporary left"
    );

    // A directory user nobody owns, and a sticky world-writable one.
    let theirs = dir.join("theirs");
    fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let sticky = dir.join("sticky");
    fs::create_dir(&sticky).unwrap();
    fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();
    for (d, why) in [
        (&theirs, "is owned by uid 65534".to_owned()),
        (
            &sticky,
            "is writable by other users (owner uid 0, mode 1777)".to_owned(),
        ),
    ] {
        let prom = d.join("btrfs.prom");
        let (code, stderr) = doctor_textfile(&env, &prom, &[]);
        assert_eq!(code, 3, "{stderr}");
        let line = stderr
            .lines()
            .find(|l| l.contains("not writing"))
            .unwrap_or_else(|| panic!("{stderr}"));
        assert!(
            line.contains(&format!("its directory {} {why}", d.display())),
            "{line}"
        );
        assert!(line.contains("pass --allow-untrusted-target"), "{line}");
        assert!(!prom.exists());
        assert_eq!(fs::read_dir(d).unwrap().count(), 0);
        let (code, stderr) = doctor_textfile(&env, &prom, &["--allow-untrusted-target"]);
        assert_eq!(code, 3, "{stderr}");
        let text = fs::read_to_string(&prom).unwrap();
        assert!(text.contains("btrfs_lab_doctor_success 0\n"), "{text}");
    }
}
