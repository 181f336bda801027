//! `btrfs-lab apps`: the O_DIRECT users on a sandbox btrfs the test makes:
//! a QEMU process with cache=none on a checksummed and on a NOCOW
//! directory, a process holding a file O_DIRECT, loop devices with and
//! without direct I/O; and the real configuration files of the fixture
//! tree (tests/fixtures/apps/PROVENANCE.md) through --sysroot.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use btrfs_lab::apps::{AppKind, AppsReport};
use btrfs_lab::model::profile::Profile;
use btrfs_lab::probe::verdict::Verdict;
use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, require_root, run, typed};

/// A child process killed and reaped on every path.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn apps(env: &TestEnv, args: &[&str]) -> AppsReport {
    let (code, stdout, stderr) = run(env.cmd().arg("apps").arg("--json").args(args));
    assert_eq!(code, 0, "{stderr}");
    typed(&stdout)
}

/// What probe-dio's expectation says for a file on single-profile btrfs.
fn expected(nocow: bool) -> Option<Verdict> {
    btrfs_lab::probe::expect::expect(
        &btrfs_lab::sys::kernel_release(),
        "btrfs",
        &[Profile::Single],
        nocow,
        Verdict::Inconclusive,
    )
    .verdict
}

/// Waits until `pid` has `file` open (its fd links name it).
fn wait_open(pid: u32, file: &Path) -> bool {
    for _ in 0..500 {
        if fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|rd| {
            rd.flatten()
                .any(|e| fs::read_link(e.path()).is_ok_and(|l| l == file))
        }) {
            return true;
        }
        thread::sleep(Duration::from_millis(10));
    }
    false
}

fn image(path: &Path) -> PathBuf {
    let f = fs::File::create_new(path).unwrap();
    f.set_len(16 << 20).unwrap();
    path.to_path_buf()
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn qemu_a_direct_writer_and_loop_devices_on_a_sandbox() {
    if !require_root("apps on btrfs") {
        return;
    }
    let Ok(qemu) = which::which("qemu-system-x86_64") else {
        if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
            panic!("qemu-system-x86_64 is missing (scripts/install-deps.sh test installs it)");
        }
        eprintln!("apps: qemu-system-x86_64 is not installed: skipped");
        return;
    };
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();
    let vm = mnt.join("vm");
    let nocow = mnt.join("nocow");
    fs::create_dir(&vm).unwrap();
    fs::create_dir(&nocow).unwrap();
    btrfs_lab::sys::fs::filesystem::set_nocow_dir(&nocow, false).unwrap();
    let csum_img = image(&vm.join("a.img"));
    let nocow_img = image(&nocow.join("b.img"));

    // QEMU, paused (-S): it opens both images O_DIRECT (cache=none) for
    // writing (a drive without a device would stay read-only).
    let mut c = Command::new(&qemu);
    c.args([
        "-machine",
        "pc",
        "-accel",
        "tcg",
        "-m",
        "64",
        "-nodefaults",
        "-display",
        "none",
        "-S",
    ]);
    for (i, img) in [&csum_img, &nocow_img].iter().enumerate() {
        c.arg("-drive").arg(format!(
            "file={},format=raw,if=none,cache=none,id=d{i}",
            img.display()
        ));
        c.arg("-device").arg(format!("virtio-blk-pci,drive=d{i}"));
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let q = Killed(c.spawn().unwrap());
    let qpid = q.0.id();
    assert!(wait_open(qpid, &nocow_img), "qemu did not open its images");

    // Processes writing a file O_DIRECT, over and over, one in the
    // checksummed directory and one in the NOCOW one: apps' expectation is
    // checked against what probe-dio --pid measures of them.
    let writer = |file: &Path| {
        Killed(
            Command::new("python3")
                .arg("-c")
                .arg(format!(
                    "import os,mmap\nfd=os.open('{}', os.O_RDWR|os.O_DIRECT)\nb=mmap.mmap(-1, 1<<20)\nwhile True: os.pwritev(fd, [b], 0)",
                    file.display()
                ))
                .spawn()
                .unwrap(),
        )
    };
    let held = image(&vm.join("held.bin"));
    let held_nocow = image(&nocow.join("held.bin"));
    let py = writer(&held);
    let py_nocow = writer(&held_nocow);
    let ppid = py.0.id();
    assert!(wait_open(ppid, &held), "python did not open its file");
    assert!(
        wait_open(py_nocow.0.id(), &held_nocow),
        "python did not open its file"
    );

    // Loop devices, with and without direct I/O, held (autoclear) until the
    // end of the test.
    let mut loops = Vec::new();
    for (name, dio) in [("dio.img", true), ("buffered.img", false)] {
        let p = image(&vm.join(name));
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        loops.push((
            btrfs_lab::sys::block::loopdev::attach_file(&f, &p, dio).unwrap(),
            p,
            dio,
        ));
    }

    let r = apps(&env, &[mnt.to_str().unwrap()]);
    // QEMU: one entry per drive, the verdict per file.
    let q_apps: Vec<_> = r
        .apps
        .iter()
        .filter(|a| a.kind == AppKind::Qemu && a.pid == Some(qpid))
        .collect();
    assert_eq!(q_apps.len(), 2, "{r:#?}");
    for a in &q_apps {
        assert_eq!(a.o_direct, Some(true));
        assert!(a.setting.contains("cache=none"), "{}", a.setting);
        assert!(a.setting.contains("open O_DIRECT: fdinfo"), "{}", a.setting);
        let f = &a.files[0];
        let is_nocow = f.path == nocow_img;
        assert_eq!(f.place.nocow, Some(is_nocow), "{f:#?}");
        assert_eq!(f.place.fs_type.as_deref(), Some("btrfs"));
        assert_eq!(f.expected, expected(is_nocow), "{f:#?}");
        if f.expected == Some(Verdict::BufferedFallback) {
            assert!(a.change.contains("nocow --migrate"), "{}", a.change);
            assert!(a.tradeoff.contains("no btrfs checksums"), "{}", a.tradeoff);
        }
    }
    // The writers: kind process, the expectation per file is what
    // probe-dio --pid measures.
    for (child, file, is_nocow) in [(&py, &held, false), (&py_nocow, &held_nocow, true)] {
        let pid = child.0.id();
        let p = r
            .apps
            .iter()
            .find(|a| a.pid == Some(pid))
            .unwrap_or_else(|| panic!("python {pid} not found: {r:#?}"));
        assert_eq!(p.kind, AppKind::Process);
        assert_eq!(p.files[0].path, *file);
        assert_eq!(p.files[0].place.nocow, Some(is_nocow));
        assert_eq!(p.files[0].expected, expected(is_nocow));
        let (_, stdout, stderr) = run(env
            .cmd()
            .args(["probe-dio", "--json", "--seconds", "2", "--pid"])
            .arg(pid.to_string()));
        let m: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("{stderr}"));
        let measured = m["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == file.to_str().unwrap())
            .unwrap_or_else(|| panic!("{m:#}"))["verdict"]
            .clone();
        if let Some(v) = p.files[0].expected {
            assert_eq!(measured, v.name(), "expected {v:?}, measured {m:#}");
        }
    }
    // Loop devices: O_DIRECT as sysfs says (the driver may keep buffered
    // I/O when it cannot do direct I/O).
    for (att, img, asked) in &loops {
        let name = att.device.path.display().to_string();
        let a = r
            .apps
            .iter()
            .find(|a| a.kind == AppKind::Loop && a.name == name)
            .unwrap_or_else(|| panic!("{name} not found: {r:#?}"));
        let dio = fs::read_to_string(format!("/sys/block/loop{}/loop/dio", att.device.index))
            .unwrap()
            .trim()
            == "1";
        assert!(*asked || !dio);
        assert_eq!(a.o_direct, Some(dio), "{a:#?}");
        assert_eq!(a.files[0].path, *img);
        assert_eq!(
            a.files[0].expected,
            if dio { expected(false) } else { None }
        );
    }
    // doctor says it per app that falls back, on this filesystem.
    let falling = r.falling_back;
    let (_, stdout, stderr) = run(env.cmd().args(["doctor", "--json"]).arg(&mnt));
    let d: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("{stderr}"));
    let codes = d["filesystems"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "app-dio-fallback")
        .count();
    assert_eq!(codes, falling, "{d:#}");
    // The text names the files and the command that measures them.
    let (code, text, _) = run(env.cmd().arg("apps").arg(&mnt));
    assert_eq!(code, 0);
    assert!(text.contains(&csum_img.display().to_string()), "{text}");
    assert!(text.contains("btrfs-lab probe-dio"), "{text}");
    drop(loops);
    drop(py);
    drop(py_nocow);
    drop(q);
}

/// Offline: the real configuration files of Debian's MariaDB and
/// PostgreSQL packages and libvirt's test domain, read through --sysroot.
#[test]
fn the_fixture_tree_through_sysroot() {
    let env = TestEnv::new();
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/apps/sysroot");
    let r = apps(&env, &["--sysroot", tree.to_str().unwrap()]);
    let kinds: Vec<AppKind> = r.apps.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == AppKind::Libvirt).count(),
        5,
        "{kinds:?}"
    );
    assert!(kinds.contains(&AppKind::Mysql));
    assert!(kinds.contains(&AppKind::Postgresql));
    assert!(!kinds.contains(&AppKind::Loop), "no sysfs in the tree");
    assert_eq!(
        r.falling_back, 0,
        "files of an offline tree are not looked at"
    );
}

/// A postmaster stopped with SIGINT (fast shutdown) and waited for: its
/// children are gone before the sandbox is unmounted.
struct Postmaster(Child);

impl Drop for Postmaster {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = self.0.wait();
    }
}

/// The PostgreSQL binaries of this machine (Debian's layout, or PATH).
fn pg_bin(name: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir("/usr/lib/postgresql")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path().join("bin").join(name))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.pop().or_else(|| which::which(name).ok())
}

/// A running PostgreSQL whose data directory is NOCOW on a sandbox: apps
/// finds the postmaster, its -D, its postgresql.conf and says it writes
/// through the page cache (debug_io_direct unset). Runs where PostgreSQL is
/// installed (it is not in scripts/install-deps.sh: installing Debian's
/// server package starts a cluster of its own).
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_running_postgresql_on_a_nocow_data_directory() {
    if !require_root("apps with PostgreSQL") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let (Some(initdb), Some(postgres), Ok(Some(user))) = (
        pg_bin("initdb"),
        pg_bin("postgres"),
        nix::unistd::User::from_name("postgres"),
    ) else {
        // Debian's postgresql package is on the machines CI runs on; on
        // another, without it, this test has nothing to start.
        if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0") {
            panic!(
                "PostgreSQL (initdb, postgres and the postgres user) is missing: apt-get install postgresql"
            );
        }
        eprintln!("apps: PostgreSQL is not installed: skipped");
        return;
    };
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();
    // The postgres user walks to its data directory.
    let mut d = mnt.clone();
    while d.starts_with(env.path()) {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        if !d.pop() {
            break;
        }
    }
    let pg = mnt.join("pg");
    fs::create_dir(&pg).unwrap();
    btrfs_lab::sys::fs::filesystem::set_nocow_dir(&pg, false).unwrap();
    let data = pg.join("data");
    fs::create_dir(&data).unwrap();
    nix::unistd::chown(&pg, Some(user.uid), Some(user.gid)).unwrap();
    nix::unistd::chown(&data, Some(user.uid), Some(user.gid)).unwrap();
    let as_postgres = |exe: &Path| {
        let mut c = Command::new(exe);
        c.uid(user.uid.as_raw())
            .gid(user.gid.as_raw())
            .env("HOME", &pg)
            .current_dir(&pg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    };
    let ok = as_postgres(&initdb)
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust"])
        .status()
        .unwrap();
    assert!(ok.success(), "initdb failed");
    let pm = Postmaster(
        as_postgres(&postgres)
            .arg("-D")
            .arg(&data)
            .args(["-k", pg.to_str().unwrap(), "-c", "listen_addresses="])
            .spawn()
            .unwrap(),
    );
    let pid = pm.0.id();
    // Started once it wrote postmaster.pid (after exec: its command line
    // is postgres').
    for _ in 0..1000 {
        if data.join("postmaster.pid").exists() {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert!(
        data.join("postmaster.pid").exists(),
        "postgres did not start"
    );
    let r = apps(&env, &[mnt.to_str().unwrap()]);
    let a = r
        .apps
        .iter()
        .find(|a| a.pid == Some(pid))
        .unwrap_or_else(|| panic!("postgres {pid} not found: {r:#?}"));
    assert_eq!(a.kind, AppKind::Postgresql);
    assert_eq!(a.o_direct, Some(false));
    assert!(
        a.setting.contains("debug_io_direct not set"),
        "{}",
        a.setting
    );
    assert_eq!(a.source, data.join("postgresql.conf").display().to_string());
    assert_eq!(a.files[0].path, data);
    assert_eq!(a.files[0].place.nocow, Some(true));
    assert!(a.tradeoff.contains("no btrfs checksums"), "{}", a.tradeoff);
    drop(pm);
}
