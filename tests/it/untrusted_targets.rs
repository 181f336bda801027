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

/// Runs `cmd`, killing it (and failing) if it has not ended in 120 s: a
/// guard against a hang, not a measure of speed.
fn run_or_kill(cmd: &mut std::process::Command) -> (i32, String, String) {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut waited = 0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if waited >= 1200 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        waited += 1;
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code().unwrap_or(-1), out, err)
}

/// `doctor --fstab FILE` as root: a symbolic link user nobody owns to a
/// root-only file is not followed (the file's content appears nowhere), a
/// FIFO is refused without blocking, a device node (the test's own 1:5,
/// like /dev/zero) and a file over 1 MiB are refused before being read.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn doctor_fstab_reads_only_bounded_regular_files() {
    if !require_root("doctor --fstab at a FIFO") {
        return;
    }
    let env = TestEnv::new();
    let dir = env.path().join("fstabs");
    fs::create_dir(&dir).unwrap();
    let secret = dir.join("secret");
    fs::write(&secret, "UUID=SECRET-4a1f / btrfs defaults 0 0\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let fifo = dir.join("fifo");
    mknodat(
        rustix::fs::CWD,
        &fifo,
        FileType::Fifo,
        Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
    let zero = dir.join("zero");
    mknodat(
        rustix::fs::CWD,
        &zero,
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        makedev(1, 5),
    )
    .unwrap();
    let big = dir.join("big");
    fs::File::create_new(&big)
        .unwrap()
        .set_len((1 << 20) + 1)
        .unwrap();
    for (path, why) in [
        (&link, "it is a symbolic link owned by uid 65534".to_owned()),
        (&fifo, "it is a FIFO, not a regular file".to_owned()),
        (
            &zero,
            "it is a character device, not a regular file".to_owned(),
        ),
        (&big, format!("it is larger than {} bytes", 1 << 20)),
    ] {
        for json in [false, true] {
            let mut cmd = env.cmd();
            if json {
                cmd.arg("--json");
            }
            cmd.args(["doctor", "--fstab"]).arg(path).arg("/");
            let (code, stdout, stderr) = run_or_kill(&mut cmd);
            assert_eq!(code, 3, "{stderr}");
            assert!(
                stderr.contains(&format!("not reading {}: {why}", path.display())),
                "{stderr}"
            );
            assert!(!stdout.contains("SECRET") && !stderr.contains("SECRET"));
        }
    }
    // Root's own link is followed.
    let own = dir.join("own");
    std::os::unix::fs::symlink(&secret, &own).unwrap();
    let (_, _, stderr) = run_or_kill(env.cmd().args(["doctor", "--fstab"]).arg(&own).arg("/"));
    assert!(!stderr.contains("not reading"), "{stderr}");
}
