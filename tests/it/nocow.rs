//! `nocow` on real filesystems made by the tests: set-up, audit, migration
//! (with everything a file carries), interruption, refusals.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write;
#[cfg(feature = "test-hooks")]
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[cfg(feature = "test-hooks")]
use btrfs_lab::nocow::MARKER_XATTR;
use btrfs_lab::nocow::TEMP_PREFIX;
use btrfs_lab::sandbox::{FsKind, SandboxRequest};
use btrfs_lab::sys::kernel::ioctl::{FS_COMPR_FL, FS_NOCOW_FL};
use serde_json::Value;
use xattr::FileExt as _;

use crate::common::{TestEnv, assert_shape, json, require_root, run};

/// Everything a migration must keep, per file (and per directory: its
/// presence), keyed by the path below the root.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kept {
    kind: &'static str,
    size: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    atime: (i64, i64),
    mtime: (i64, i64),
    content: String,
    xattrs: Vec<(String, Vec<u8>)>,
}

fn flags_of(p: &Path) -> btrfs_lab::sys::kernel::ioctl::IFlags {
    btrfs_lab::sys::fs::filesystem::inode_flags(p)
        .unwrap()
        .unwrap_or(btrfs_lab::sys::kernel::ioctl::IFlags::empty())
}

fn snapshot(root: &Path) -> BTreeMap<PathBuf, Kept> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if m.is_dir() {
                stack.push(p.clone());
                out.insert(rel, kept(&p, &m, "dir".into()));
                continue;
            }
            // Read with O_NOATIME so looking does not change the atime.
            let f = fs::OpenOptions::new()
                .read(true)
                .custom_flags_noatime()
                .open(&p)
                .unwrap();
            let mut h = blake3::Hasher::new();
            h.update_reader(&f).unwrap();
            out.insert(rel, kept(&p, &m, h.finalize().to_hex().to_string()));
        }
    }
    out
}

trait NoAtime {
    fn custom_flags_noatime(&mut self) -> &mut Self;
}

impl NoAtime for fs::OpenOptions {
    fn custom_flags_noatime(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NOATIME)
    }
}

fn kept(p: &Path, m: &fs::Metadata, content: String) -> Kept {
    let f = File::open(p).unwrap();
    let mut xattrs: Vec<(String, Vec<u8>)> = f
        .list_xattr()
        .unwrap()
        .map(|n| {
            let v = f.get_xattr(&n).unwrap().unwrap_or_default();
            (n.to_string_lossy().into_owned(), v)
        })
        .collect();
    xattrs.sort();
    Kept {
        kind: if m.is_dir() { "dir" } else { "file" },
        size: if m.is_dir() { 0 } else { m.len() },
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        atime: if m.is_dir() {
            (0, 0)
        } else {
            (m.atime(), m.atime_nsec())
        },
        mtime: if m.is_dir() {
            (0, 0)
        } else {
            (m.mtime(), m.mtime_nsec())
        },
        content,
        xattrs,
    }
}

fn nocow(env: &TestEnv, args: &[&OsStr]) -> (i32, String, String) {
    run(env.cmd().arg("nocow").args(args))
}

fn os<S: AsRef<OsStr> + ?Sized>(s: &S) -> &OsStr {
    s.as_ref()
}

fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let f = File::open(p).unwrap();
    nix::sys::stat::futimens(
        &f,
        &nix::sys::time::TimeSpec::new(atime.0, atime.1),
        &nix::sys::time::TimeSpec::new(mtime.0, mtime.1),
    )
    .unwrap();
}

fn lsattr_flags(p: &Path, dir: bool) -> String {
    let mut c = Command::new("lsattr");
    if dir {
        c.arg("-d");
    }
    let out = c.arg(p).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A minimal POSIX ACL (system.posix_acl_access, version 2) that gives
/// user 1000 read and write.
fn acl_with_user_1000() -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 6, 1000),
        (0x04, 4, u32::MAX),
        (0x10, 6, u32::MAX),
        (0x20, 4, u32::MAX),
    ] {
        v.extend(tag.to_le_bytes());
        v.extend(perm.to_le_bytes());
        v.extend(id.to_le_bytes());
    }
    v
}

/// A directory of files that a migration must handle: random data, a
/// sparse image, an empty file, other owners and modes, odd timestamps,
/// user/trusted/security attributes and an ACL, a subdirectory.
fn populate(dir: &Path) {
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("data.bin"), random_bytes(9 << 20, 1)).unwrap();
    let sparse = File::create(dir.join("disk.img")).unwrap();
    sparse.set_len(256 << 20).unwrap();
    sparse
        .write_all_at(&random_bytes(1 << 20, 2), 10 << 20)
        .unwrap();
    sparse
        .write_all_at(&random_bytes(4096, 3), 200 << 20)
        .unwrap();
    drop(sparse);
    File::create(dir.join("empty")).unwrap();
    fs::write(dir.join("sub/small.conf"), "listen = 5432\n").unwrap();
    fs::write(dir.join("setuid-tool"), random_bytes(5000, 4)).unwrap();

    std::os::unix::fs::chown(dir.join("disk.img"), Some(1000), Some(1000)).unwrap();
    std::os::unix::fs::chown(dir.join("sub/small.conf"), Some(65534), Some(100)).unwrap();
    fs::set_permissions(dir.join("data.bin"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(dir.join("setuid-tool"), fs::Permissions::from_mode(0o4750)).unwrap();

    let f = File::open(dir.join("data.bin")).unwrap();
    f.set_xattr("user.origin", b"test suite").unwrap();
    f.set_xattr("user.binary", &[0, 1, 2, 255]).unwrap();
    f.set_xattr("trusted.btrfs-lab-test", b"root only").unwrap();
    f.set_xattr("security.btrfs-lab-test", b"label").unwrap();
    let f = File::open(dir.join("disk.img")).unwrap();
    f.set_xattr("system.posix_acl_access", &acl_with_user_1000())
        .unwrap();
    f.set_xattr("user.vm", b"guest-1").unwrap();

    set_times(
        &dir.join("data.bin"),
        (1_600_000_000, 123_456_789),
        (1_500_000_000, 987_654_321),
    );
    set_times(
        &dir.join("disk.img"),
        (1_700_000_000, 1),
        (1_650_000_000, 999_999_999),
    );
    set_times(
        &dir.join("sub/small.conf"),
        (1_000_000_000, 0),
        (1_000_000_001, 5),
    );
}

fn no_temp_files(dir: &Path) {
    for (p, _) in snapshot(dir) {
        assert!(
            !p.to_string_lossy().contains(TEMP_PREFIX),
            "temporary file left: {}",
            p.display()
        );
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn empty_directory_becomes_nocow_and_new_files_inherit_it() {
    if !require_root("nocow on btrfs") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point();

    // A missing directory (two levels) is created; the dry run changes nothing.
    let vm = mnt.join("lib/vm");
    let (code, stdout, _) = nocow(&env, &[os("--dry-run"), vm.as_os_str()]);
    assert_eq!(code, 0);
    assert!(stdout.contains("create directory"), "{stdout}");
    assert!(stdout.contains("(dry run: nothing was changed)"));
    assert!(!mnt.join("lib").exists());

    // Without a terminal and without --yes it refuses, and changes nothing.
    let (code, stdout, stderr) = nocow(&env, &[vm.as_os_str()]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(stderr.contains("confirmation needed"), "{stderr}");
    assert!(!mnt.join("lib").exists());

    let (code, stdout, stderr) = nocow(&env, &[os("--yes"), vm.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("verified"), "{stdout}");
    assert!(
        stderr.contains("no data checksums"),
        "the plan and its warnings: {stderr}"
    );
    assert!(stderr.contains("Snapshots still copy-on-write"));
    assert!(flags_of(&vm).contains(FS_NOCOW_FL), "ioctl");
    assert!(lsattr_flags(&vm, true).contains('C'), "lsattr -d");
    assert!(!flags_of(&mnt.join("lib")).contains(FS_NOCOW_FL));

    // Files created afterwards inherit it.
    let img = vm.join("guest.img");
    fs::write(&img, random_bytes(1 << 20, 9)).unwrap();
    assert!(flags_of(&img).contains(FS_NOCOW_FL));
    assert!(lsattr_flags(&img, false).contains('C'));

    // An existing empty directory, as JSON.
    let db = mnt.join("db");
    fs::create_dir(&db).unwrap();
    let (code, stdout, _) = nocow(&env, &[os("--json"), os("--yes"), db.as_os_str()]);
    assert_eq!(code, 0);
    let r = json(&stdout);
    assert_nocow_shape(&r);
    assert_eq!(r["result"]["dir_nocow"], true);
    assert_eq!(r["plan"]["steps"][0]["action"], "set-nocow");
    assert!(lsattr_flags(&db, true).contains('C'));

    // Again: nothing to do, no question asked.
    let (code, stdout, _) = nocow(&env, &[db.as_os_str()]);
    assert_eq!(code, 0);
    assert!(stdout.contains("NOCOW already"), "{stdout}");
}

fn assert_nocow_shape(r: &Value) {
    assert_shape(
        r,
        &[
            ("path", "string"),
            ("dir", "string"),
            ("dry_run", "bool"),
            ("filesystem.path", "string"),
            ("filesystem.dir", "string"),
            ("filesystem.is_dir", "bool"),
            ("filesystem.fs_type", "string"),
            ("filesystem.mount_point", "string"),
            ("filesystem.source", "string"),
            ("filesystem.read_only", "bool"),
            ("filesystem.data_profiles", "array"),
            ("filesystem.mount_options", "array"),
            ("filesystem.nocow", "bool|null"),
            ("filesystem.compression_attr", "bool|null"),
            ("filesystem.subvolume", "bool"),
            ("filesystem.available_bytes", "number"),
            ("filesystem.note", "string|null"),
            ("plan.steps", "array"),
            ("plan.staying", "array"),
            ("plan.space_needed_bytes", "number"),
            ("plan.parallel_migrations", "number"),
            ("plan.space_available_bytes", "number"),
            ("plan.warnings", "array"),
            ("plan.nothing_to_do", "string|null"),
            ("result", "object|null"),
            ("advice", "object|null"),
        ],
    );
    if r["result"].is_object() {
        assert_shape(
            r,
            &[
                ("result.created", "array"),
                ("result.subvolume", "string|null"),
                ("result.nocow_set", "array"),
                ("result.dir_nocow", "bool"),
                ("result.removed_leftovers", "array"),
                ("result.cleared_markers", "array"),
                ("result.switched", "array"),
                ("result.migrated", "array"),
                ("result.after.files", "number"),
                ("result.after.nocow_files", "number"),
                ("result.not_nocow", "array"),
            ],
        );
    }
}

fn assert_check_shape(r: &Value) {
    assert_shape(
        r,
        &[
            ("roots", "array"),
            ("roots.0.path", "string"),
            ("roots.0.fs_type", "string"),
            ("roots.0.nocow", "bool|null"),
            ("entries", "array"),
            ("summary.files", "number"),
            ("summary.nocow_files", "number"),
            ("summary.nocow_bytes", "number"),
            ("summary.switchable_files", "number"),
            ("summary.needs_migration_files", "number"),
            ("summary.needs_migration_bytes", "number"),
            ("summary.blocked_files", "number"),
            ("summary.blocked_bytes", "number"),
            ("summary.open_files", "number"),
            ("summary.leftovers", "number"),
            ("summary.directories", "number"),
            ("summary.nocow_directories", "number"),
            ("summary.largest_migration_bytes", "number"),
            ("skipped", "array"),
            ("notes", "array"),
            ("advice", "object|null"),
        ],
    );
    for e in r["entries"].as_array().unwrap() {
        assert_shape(
            e,
            &[
                ("path", "string"),
                ("kind", "string"),
                ("state", "string"),
                ("nocow", "bool"),
                ("compression_attr", "bool"),
                ("size_bytes", "number"),
                ("allocated_bytes", "number"),
                ("sparse", "bool"),
                ("links", "number"),
                ("uid", "number"),
                ("gid", "number"),
                ("mode", "number"),
                ("open_by", "array"),
                ("reason", "string|null"),
                ("marker", "bool"),
            ],
        );
    }
}

fn entry<'a>(r: &'a Value, path: &Path) -> &'a Value {
    r["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == path.to_str().unwrap())
        .unwrap_or_else(|| panic!("{} not in {r:#}", path.display()))
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn check_then_migrate_keeps_everything_and_probe_dio_is_direct() {
    if !require_root("nocow --migrate on btrfs") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.mount_point().join("images");
    populate(&dir);
    let before = snapshot(&dir);
    let sparse_alloc = fs::metadata(dir.join("disk.img")).unwrap().blocks() * 512;

    // The audit lists every file, changes nothing.
    let (code, stdout, _) = nocow(&env, &[os("--check"), os("--json"), dir.as_os_str()]);
    assert_eq!(code, 6, "--check: files that are not NOCOW");
    let r = json(&stdout);
    assert_check_shape(&r);
    assert_eq!(r["summary"]["files"], 5);
    assert_eq!(r["summary"]["needs_migration_files"], 4);
    assert_eq!(r["summary"]["switchable_files"], 1);
    assert_eq!(r["summary"]["directories"], 1);
    assert_eq!(r["summary"]["nocow_directories"], 0);
    let disk = entry(&r, &dir.join("disk.img"));
    assert_eq!(disk["state"], "needs-migration");
    assert_eq!(disk["sparse"], true);
    assert_eq!(disk["size_bytes"], 256 << 20);
    assert_eq!(entry(&r, &dir.join("empty"))["state"], "switchable");
    assert_eq!(entry(&r, &dir.join("sub"))["state"], "not-nocow");
    assert_eq!(snapshot(&dir), before);
    let (code, text, _) = nocow(&env, &[os("--check"), dir.as_os_str()]);
    assert_eq!(code, 6, "--check: files that are not NOCOW");
    assert!(text.contains("needs migration"), "{text}");
    assert!(text.contains("disk.img  (sparse)"), "{text}");
    assert!(
        text.contains(&format!(
            "hint: btrfs-lab nocow --migrate {} copies",
            dir.display()
        )),
        "{text}"
    );

    // Without --migrate the files are named and stay.
    let (code, stdout, _) = nocow(&env, &[os("--yes"), dir.as_os_str()]);
    assert_eq!(code, 0);
    assert!(stdout.contains("not NOCOW, and staying so"), "{stdout}");
    assert!(stdout.contains("data.bin"));
    assert!(flags_of(&dir).contains(FS_NOCOW_FL));
    assert!(!flags_of(&dir.join("data.bin")).contains(FS_NOCOW_FL));

    // The migration.
    let (code, stdout, stderr) = nocow(
        &env,
        &[os("--migrate"), os("--yes"), os("--json"), dir.as_os_str()],
    );
    assert_eq!(code, 0, "{stderr}");
    let r = json(&stdout);
    assert_nocow_shape(&r);
    let result = &r["result"];
    assert_eq!(result["migrated"].as_array().unwrap().len(), 4, "{r:#}");
    assert_eq!(result["switched"].as_array().unwrap().len(), 1);
    assert_eq!(result["after"]["nocow_files"], 5);
    assert_eq!(result["not_nocow"], serde_json::json!([]));
    for m in result["migrated"].as_array().unwrap() {
        assert_shape(
            m,
            &[
                ("path", "string"),
                ("size_bytes", "number"),
                ("allocated_before_bytes", "number"),
                ("allocated_after_bytes", "number"),
                ("copied_bytes", "number"),
                ("blake3", "string"),
                ("xattrs", "number"),
                ("compression_dropped", "bool"),
            ],
        );
    }

    let after = snapshot(&dir);
    assert_eq!(
        after, before,
        "content, mode, owner, times or xattrs changed"
    );
    for (rel, k) in &after {
        let p = dir.join(rel);
        assert!(
            flags_of(&p).contains(FS_NOCOW_FL),
            "{} not NOCOW",
            rel.display()
        );
        assert!(
            lsattr_flags(&p, k.kind == "dir").contains('C'),
            "lsattr {}",
            rel.display()
        );
    }
    let sparse_after = fs::metadata(dir.join("disk.img")).unwrap().blocks() * 512;
    assert!(
        sparse_after <= sparse_alloc + (64 << 10) && sparse_after + (64 << 10) >= sparse_alloc,
        "allocation {sparse_alloc} before, {sparse_after} after"
    );
    no_temp_files(&dir);

    // The audit now finds nothing to do: exit 0.
    let (code, text, _) = nocow(&env, &[os("--check"), dir.as_os_str()]);
    assert_eq!(code, 0, "{text}");

    // A second run has nothing left to migrate.
    let (code, stdout, _) = nocow(&env, &[os("--migrate"), dir.as_os_str()]);
    assert_eq!(code, 0);
    assert!(stdout.contains("NOCOW already"), "{stdout}");

    // And O_DIRECT writes in the directory are direct (single data profile).
    let (code, stdout, _) = run(env
        .cmd()
        .args(["probe-dio", "--json", "--file-size", "32M"])
        .arg(&dir));
    let p = json(&stdout);
    assert_eq!(p["verdict"], "direct", "{p:#}");
    assert_eq!(code, 0);
    assert_eq!(p["filesystem"]["target_nocow"], true);
}

/// Many small files in several directories: migrated many at a time (the
/// plan says how many and the room that takes), each one complete, with its
/// content and metadata, nothing left behind, and a second run finds
/// nothing to do.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn many_files_are_migrated_at_once_and_each_is_complete() {
    if !require_root("nocow --migrate of many files") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.mount_point().join("mail");
    for d in ["cur", "new", "tmp"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    let mut files = Vec::new();
    for i in 0..60u64 {
        let sub = ["cur", "new", "tmp", "."][(i % 4) as usize];
        let p = dir.join(sub).join(format!("m{i}"));
        // Sizes from a few bytes to a few MiB, some not a multiple of a
        // page or of the copy's buffer.
        let len = [17usize, 4096, 70_001, 1 << 20, (3 << 20) + 5][(i % 5) as usize];
        fs::write(&p, random_bytes(len, 100 + i)).unwrap();
        set_times(
            &p,
            (1_600_000_000 + i as i64, 7),
            (1_500_000_000 + i as i64, 9),
        );
        files.push(p);
    }
    let before = snapshot(&dir);

    let (code, stdout, stderr) = nocow(
        &env,
        &[os("--migrate"), os("--yes"), os("--json"), dir.as_os_str()],
    );
    assert_eq!(code, 0, "{stderr}");
    let r = json(&stdout);
    let plan = &r["plan"];
    let at_once = plan["parallel_migrations"].as_u64().unwrap();
    assert!(at_once > 1, "{plan:#}");
    assert!(at_once <= 16, "{plan:#}");
    // The room asked for is that of the largest copies made at once.
    let mut sizes: Vec<u64> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["allocated_bytes"].as_u64())
        .collect();
    assert_eq!(sizes.len(), files.len());
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let largest: u64 = sizes.iter().take(at_once as usize).sum();
    let needed = plan["space_needed_bytes"].as_u64().unwrap();
    assert!(needed > largest, "{needed} for {largest} of copies");
    assert_eq!(
        r["result"]["migrated"].as_array().unwrap().len(),
        files.len()
    );
    for p in &files {
        assert!(flags_of(p).contains(FS_NOCOW_FL), "{}", p.display());
    }
    assert_eq!(snapshot(&dir), before);
    no_temp_files(&dir);
    for d in ["cur", "new", "tmp"] {
        no_temp_files(&dir.join(d));
    }
    let (code, stdout, _) = nocow(&env, &[os("--check"), os("--json"), dir.as_os_str()]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(json(&stdout)["summary"]["nocow_files"], files.len());
}

#[cfg(feature = "test-hooks")]
/// Starts `nocow --migrate --yes DIR` with the test hook and waits until it
/// pauses at `point`.
fn start_paused(env: &TestEnv, dir: &Path, point: &str) -> std::process::Child {
    let hook = btrfs_lab::hooks::Pause::named(&format!("nocow-{point}")).unwrap();
    let mut child = env
        .cmd()
        .env(btrfs_lab::hooks::PAUSE_ENV, hook.name())
        .args(["nocow", "--migrate", "--yes"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let want = hook.message();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains(&want) => break,
            Some(Ok(_)) => {}
            _ => panic!("btrfs-lab ended before pausing at {point}"),
        }
    }
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    child
}

#[cfg(feature = "test-hooks")]
fn kill_9(child: &mut std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
}

#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn killed_migration_loses_nothing_and_a_rerun_completes() {
    if !require_root("nocow --migrate interrupted") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.mount_point().join("db");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("big.ibd"), random_bytes(96 << 20, 11)).unwrap();
    File::open(dir.join("big.ibd"))
        .unwrap()
        .set_xattr("user.kept", b"yes")
        .unwrap();
    let before = snapshot(&dir);

    // SIGKILL in the middle of the copy: the copy was an unnamed file, so
    // nothing is left and the original is as it was.
    let mut child = start_paused(&env, &dir, "copy");
    kill_9(&mut child);
    assert_eq!(snapshot(&dir), before);
    assert!(!flags_of(&dir.join("big.ibd")).contains(FS_NOCOW_FL));
    no_temp_files(&dir);

    // SIGINT there: exit 130, the same.
    let mut child = start_paused(&env, &dir, "copy");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(snapshot(&dir), before);
    no_temp_files(&dir);

    // SIGKILL after the copy got its name, just before the rename: a
    // leftover with the marker; the original still intact.
    let mut child = start_paused(&env, &dir, "linked");
    kill_9(&mut child);
    let names = crate::common::listing(&dir);
    let leftover: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with(TEMP_PREFIX))
        .collect();
    assert_eq!(leftover.len(), 1, "{names:?}");
    let leftover_path = dir.join(leftover[0]);
    assert!(
        File::open(&leftover_path)
            .unwrap()
            .get_xattr(MARKER_XATTR)
            .unwrap()
            .is_some()
    );
    let mut still = snapshot(&dir);
    still.retain(|p, _| !p.to_string_lossy().starts_with(TEMP_PREFIX));
    assert_eq!(still, before);
    let (_, stdout, _) = nocow(&env, &[os("--check"), os("--json"), dir.as_os_str()]);
    let r = json(&stdout);
    assert_eq!(r["summary"]["leftovers"], 1);
    assert_eq!(entry(&r, &leftover_path)["state"], "leftover");

    // A file with the prefix but without the marker is not ours: kept.
    let foreign = dir.join(format!("{TEMP_PREFIX}not-ours"));
    fs::write(&foreign, "user data").unwrap();

    // The re-run removes the leftover and completes.
    let (code, stdout, stderr) = nocow(&env, &[os("--migrate"), os("--yes"), dir.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("left by an interrupted migration"),
        "{stdout}"
    );
    assert!(!leftover_path.exists());
    assert_eq!(fs::read(&foreign).unwrap(), b"user data");
    fs::remove_file(&foreign).unwrap();
    assert_eq!(snapshot(&dir), before);
    assert!(flags_of(&dir.join("big.ibd")).contains(FS_NOCOW_FL));
    no_temp_files(&dir);
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn open_files_are_refused_without_force() {
    if !require_root("nocow --migrate with an open file") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.mount_point().join("vm");
    fs::create_dir(&dir).unwrap();
    let img = dir.join("running.img");
    fs::write(&img, random_bytes(2 << 20, 5)).unwrap();
    let before = snapshot(&dir);
    let mut holder = Command::new("sleep")
        .arg("600")
        .stdin(File::open(&img).unwrap())
        .spawn()
        .unwrap();

    let (code, stdout, _) = nocow(&env, &[os("--check"), dir.as_os_str()]);
    assert_eq!(code, 6, "--check: files that are not NOCOW");
    assert!(
        stdout.contains(&format!("open by pid {} (sleep 600)", holder.id())),
        "{stdout}"
    );

    let (code, stdout, stderr) = nocow(&env, &[os("--migrate"), os("--yes"), dir.as_os_str()]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(
        stderr.contains(&format!("pid {} (sleep 600)", holder.id())),
        "{stderr}"
    );
    assert!(stderr.contains("--include-open"));
    assert_eq!(stderr.lines().count(), 2, "{stderr}");
    assert_eq!(snapshot(&dir), before);
    assert!(
        !flags_of(&dir).contains(FS_NOCOW_FL),
        "nothing changed, not even the directory"
    );

    // A dry run shows the plan with the file marked, and changes nothing.
    let (code, stdout, stderr) = nocow(&env, &[os("--migrate"), os("--dry-run"), dir.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains(&format!(
            "[open by pid {} (sleep 600): will be refused at run time unless --include-open]",
            holder.id()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("(dry run: nothing was changed)"),
        "{stdout}"
    );
    assert_eq!(snapshot(&dir), before);

    // A fake /proc (an empty tree under BTRFS_LAB_SYSROOT) hides nothing:
    // the open-file check reads the real one.
    let fake = env.path().join("fake-root");
    fs::create_dir_all(fake.join("proc")).unwrap();
    fs::create_dir_all(fake.join("sys")).unwrap();
    let (code, stdout, stderr) = run(env
        .cmd()
        .env("BTRFS_LAB_SYSROOT", &fake)
        .args(["nocow", "--migrate", "--yes"])
        .arg(&dir));
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains(&format!("pid {} (sleep 600)", holder.id())),
        "{stderr}"
    );
    assert_eq!(snapshot(&dir), before);

    let (code, _, stderr) = nocow(
        &env,
        &[
            os("--migrate"),
            os("--include-open"),
            os("--yes"),
            dir.as_os_str(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("--include-open:"), "{stderr}");
    assert!(flags_of(&img).contains(FS_NOCOW_FL));
    assert_eq!(snapshot(&dir), before);
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn refusals_change_nothing() {
    if !require_root("nocow refusals") {
        return;
    }
    let mut env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point().to_path_buf();
    let dir = mnt.join("c");
    populate(&dir);

    // The compression attribute on the directory.
    let d = fs::File::open(&dir).unwrap();
    let f = btrfs_lab::sys::fs::filesystem::inode_flags_of(&d, &dir)
        .unwrap()
        .unwrap();
    btrfs_lab::sys::fs::filesystem::set_inode_flags_of(&d, &dir, f | FS_COMPR_FL).unwrap();
    let before = snapshot(&dir);
    for extra in [&[][..], &[os("--migrate")][..]] {
        let mut args = vec![os("--yes")];
        args.extend_from_slice(extra);
        args.push(dir.as_os_str());
        let (code, stdout, stderr) = nocow(&env, &args);
        assert_eq!(code, 1);
        assert!(stdout.is_empty());
        assert!(
            stderr.contains("has the compression attribute, which cannot be combined with NOCOW"),
            "{stderr}"
        );
        assert!(stderr.contains("hint: remove it first: chattr -c"));
        assert_eq!(snapshot(&dir), before);
        assert_eq!(flags_of(&dir) & (FS_NOCOW_FL | FS_COMPR_FL), FS_COMPR_FL);
    }
    // A compressed subdirectory only matters for --migrate.
    btrfs_lab::sys::fs::filesystem::set_inode_flags_of(&d, &dir, f).unwrap();
    let sub = dir.join("sub");
    let s = fs::File::open(&sub).unwrap();
    let sf = btrfs_lab::sys::fs::filesystem::inode_flags_of(&s, &sub)
        .unwrap()
        .unwrap();
    btrfs_lab::sys::fs::filesystem::set_inode_flags_of(&s, &sub, sf | FS_COMPR_FL).unwrap();
    let before = snapshot(&dir);
    let (code, _, stderr) = nocow(&env, &[os("--migrate"), os("--yes"), dir.as_os_str()]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("sub has the compression attribute"),
        "{stderr}"
    );
    assert_eq!(snapshot(&dir), before);
    assert!(!flags_of(&dir).contains(FS_NOCOW_FL));
    btrfs_lab::sys::fs::filesystem::set_inode_flags_of(&s, &sub, sf).unwrap();

    // Not enough space for the largest copy: checked first.
    let filler = mnt.join("filler");
    let free = nix::sys::statvfs::statvfs(&mnt).unwrap();
    let avail = free.blocks_available() * free.fragment_size();
    let f = File::create(&filler).unwrap();
    nix::fcntl::fallocate(
        &f,
        nix::fcntl::FallocateFlags::empty(),
        0,
        (avail - (40 << 20)) as i64,
    )
    .unwrap();
    f.sync_all().unwrap();
    drop(f);
    let before = snapshot(&dir);
    let (code, _, stderr) = nocow(&env, &[os("--migrate"), os("--yes"), dir.as_os_str()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not enough free space"), "{stderr}");
    assert_eq!(snapshot(&dir), before);
    fs::remove_file(&filler).unwrap();

    // A read-only filesystem.
    nix::mount::mount(
        None::<&str>,
        &mnt,
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT | nix::mount::MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .unwrap();
    // (A missing directory is created by `nocow DIR`; --migrate refuses it
    // as missing, see migrate_of_a_missing_directory_is_an_error_...)
    for (target, migrate) in [(dir.clone(), true), (mnt.join("new"), false)] {
        let mut args = vec![os("--yes"), target.as_os_str()];
        if migrate {
            args.insert(0, os("--migrate"));
        }
        let (code, stdout, stderr) = nocow(&env, &args);
        assert_eq!(code, 1);
        assert!(stdout.is_empty());
        assert!(stderr.contains("is on a read-only filesystem"), "{stderr}");
        assert!(stderr.contains("hint: remount it read-write"));
    }
    assert_eq!(snapshot(&dir), before);
    assert!(!mnt.join("new").exists());
    // --check still works on it.
    let (code, _, _) = nocow(&env, &[os("--check"), dir.as_os_str()]);
    assert_eq!(code, 6, "--check: files that are not NOCOW");
    nix::mount::mount(
        None::<&str>,
        &mnt,
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT,
        None::<&str>,
    )
    .unwrap();

    // Not btrfs: ext4 and tmpfs; nothing to do, nothing created.
    let ext4 = env.sandbox(SandboxRequest {
        fs: FsKind::Ext4,
        size_bytes: 64 << 20,
        ..SandboxRequest::default()
    });
    let tmp = env.tmpfs("ram");
    for root in [ext4.mount_point().to_path_buf(), tmp] {
        let target = root.join("vm");
        let (code, stdout, stderr) = nocow(&env, &[os("--yes"), target.as_os_str()]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains("nothing to do"), "{stdout}");
        assert!(stdout.contains("not btrfs"), "{stdout}");
        assert!(!target.exists());
        let (code, stdout, _) = nocow(&env, &[os("--check"), os("--json"), root.as_os_str()]);
        assert_eq!(code, 0);
        let r = json(&stdout);
        assert!(
            r["roots"][0]["note"]
                .as_str()
                .unwrap()
                .contains("not btrfs")
        );
        assert_eq!(r["entries"], serde_json::json!([]));
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn subvolume_is_created_with_nocow() {
    if !require_root("nocow --subvolume") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let images = sbx.mount_point().join("images");
    let (code, stdout, stderr) = nocow(
        &env,
        &[
            os("--subvolume"),
            os("--yes"),
            os("--for"),
            os("vm"),
            images.as_os_str(),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("subvolume of its own"), "{stderr}");
    assert!(stdout.contains("created    subvolume"), "{stdout}");
    assert!(stdout.contains("cache=none"), "advice for vm: {stdout}");
    assert_eq!(fs::metadata(&images).unwrap().ino(), 256);
    assert!(lsattr_flags(&images, true).contains('C'));
    let show = Command::new("btrfs")
        .args(["subvolume", "show"])
        .arg(&images)
        .output()
        .unwrap();
    assert!(show.status.success());

    // A plain directory cannot become a subvolume in place.
    let plain = sbx.mount_point().join("plain");
    fs::create_dir(&plain).unwrap();
    let (code, _, stderr) = nocow(&env, &[os("--subvolume"), os("--yes"), plain.as_os_str()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not a subvolume"), "{stderr}");
    assert!(!flags_of(&plain).contains(FS_NOCOW_FL));
}

#[test]
fn bad_command_lines_and_paths() {
    let env = TestEnv::new();
    for (args, status, words) in [
        (vec![], 2, "give the directory"),
        (vec!["a", "b"], 2, "one directory at a time"),
        (vec!["--check"], 2, "--check needs at least one PATH"),
        (vec!["--include-open", "x"], 2, "--migrate"),
        (vec!["--for", "oracle"], 2, "unknown service"),
        (vec!["--check", "--migrate", "x"], 2, "cannot be used with"),
        (
            vec!["--check", "/nonexistent/x"],
            1,
            "no such file or directory",
        ),
        (vec!["/proc/version"], 1, "exists and is not a directory"),
    ] {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let (code, stdout, stderr) = nocow(&env, &args);
        assert_eq!(code, status, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(
            stderr.starts_with("btrfs-lab: error: "),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(words), "{args:?}: {stderr}");
        assert!(stderr.lines().count() <= 2, "{stderr}");
    }
    let (code, stdout, _) = nocow(&env, &[os("--for"), os("postgres"), os("--json")]);
    assert_eq!(code, 0);
    let a = json(&stdout);
    assert_shape(
        &a,
        &[
            ("service", "string"),
            ("name", "string"),
            ("location", "string"),
            ("settings", "array"),
        ],
    );
    let _ = std::io::stdout().flush();
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn unprivileged_user_migrates_own_files_only() {
    if !require_root("nocow as an unprivileged user") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    for d in [env.path(), sbx.record().dir.as_path(), sbx.mount_point()] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let exe = env.path().join("btrfs-lab");
    fs::copy(crate::common::bin(), &exe).unwrap();
    let dir = sbx.mount_point().join("home");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("mine.qcow2"), random_bytes(3 << 20, 7)).unwrap();
    fs::write(dir.join("roots.conf"), "x").unwrap();
    for p in [dir.as_path(), &dir.join("mine.qcow2")] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let before = snapshot(&dir);
    let as_nobody = |args: &[&str]| {
        run(Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&exe)
            .arg("nocow")
            .args(args)
            .arg(&dir)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null()))
    };
    let (code, stdout, _) = as_nobody(&["--check"]);
    assert_eq!(code, 6, "--check: files that are not NOCOW");
    assert!(
        stdout.contains("could not be inspected (not root)"),
        "{stdout}"
    );
    let (code, stdout, stderr) = as_nobody(&["--migrate", "--yes"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("Not running as root"), "{stderr}");
    assert!(stdout.contains("owned by uid 0"), "{stdout}");
    assert!(flags_of(&dir.join("mine.qcow2")).contains(FS_NOCOW_FL));
    assert!(!flags_of(&dir.join("roots.conf")).contains(FS_NOCOW_FL));
    assert_eq!(snapshot(&dir), before);
}

/// One writer for one file: opens it O_APPEND, writes a numbered record,
/// closes it, sleeps 10–30 ms; again, until told to stop (or 5000 records).
/// Returns the records whose close() returned.
fn come_and_go_writer(
    path: PathBuf,
    tag: usize,
    seed: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut written = Vec::new();
        let mut x = seed | 1;
        for n in 0..5000u32 {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            let record = format!("record {tag} {n:06}\n");
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            f.write_all(record.as_bytes()).unwrap();
            drop(f); // close()
            written.push(record);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            std::thread::sleep(std::time::Duration::from_millis(10 + x % 21));
        }
        written
    })
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn migration_never_loses_a_write_from_writers_that_come_and_go() {
    if !require_root("nocow --migrate against a writer") {
        return;
    }
    const FILES: usize = 3;
    const MIGRATIONS: usize = 240;
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let base = sbx.mount_point().join("w");
    fs::create_dir(&base).unwrap();
    let (mut runs, mut migrated, mut refused, mut lost, mut records) = (0, 0, 0, 0, 0);
    let mut files_with_loss = 0;
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let mut lost_examples = Vec::new();
    while migrated + refused < MIGRATIONS && runs < 200 {
        let dir = base.join(format!("run{runs}"));
        fs::create_dir(&dir).unwrap();
        let paths: Vec<PathBuf> = (0..FILES)
            .map(|i| dir.join(format!("table{i}.db")))
            .collect();
        for (i, p) in paths.iter().enumerate() {
            fs::write(p, random_bytes(64 << 10, (runs * FILES + i) as u64)).unwrap();
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| come_and_go_writer(p.clone(), i, (runs * 7 + i) as u64, stop.clone()))
            .collect();
        let (code, _, stderr) = nocow(&env, &[os("--migrate"), os("--yes"), dir.as_os_str()]);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let written: Vec<Vec<String>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        runs += 1;
        if code != 0 {
            assert_eq!(code, 1, "{stderr}");
            assert!(stderr.contains("btrfs-lab: error: "), "{stderr}");
            let line = stderr
                .lines()
                .find(|l| l.contains("btrfs-lab: error: "))
                .unwrap();
            let why = line.split_once(".db").map_or(line, |(_, w)| w);
            *errors.entry(why.chars().take(60).collect()).or_default() += 1;
        }
        for (p, recs) in paths.iter().zip(&written) {
            let content = String::from_utf8(fs::read(p).unwrap()[64 << 10..].to_vec()).unwrap();
            let nocow = flags_of(p).contains(FS_NOCOW_FL);
            if nocow {
                migrated += 1;
            } else {
                refused += 1;
            }
            if code == 0 {
                assert!(nocow, "exit 0 but {} not NOCOW", p.display());
            }
            records += recs.len();
            let lost_before = lost;
            for r in recs {
                if !content.contains(r.as_str()) {
                    lost += 1;
                    if lost_examples.len() < 5 {
                        lost_examples.push(format!("{}: {}", p.display(), r.trim()));
                    }
                }
            }
            files_with_loss += usize::from(lost > lost_before);
        }
        no_temp_files(&dir);
    }
    eprintln!(
        "come-and-go writers: {runs} runs, {} file migrations attempted, {migrated} migrated, \
         {refused} refused, {records} records written, {lost} lost (in {files_with_loss} files) \
         {lost_examples:?}; refusals: {errors:?}",
        migrated + refused
    );
    assert!(migrated + refused >= MIGRATIONS);
    assert!(migrated > 0, "no file was migrated at all");
    assert_eq!(lost, 0, "records lost: {lost_examples:?}");
}

/// What root must never touch outside the user's directory: (dev, inode)
/// and inode flags of each entry, and each file's content.
fn outside_state(root: &Path) -> Vec<(PathBuf, u64, u64, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = fs::symlink_metadata(&p).unwrap();
        let content = if m.is_file() {
            fs::read(&p).unwrap()
        } else {
            Vec::new()
        };
        if m.is_dir() {
            for e in fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
        out.push((p.clone(), m.dev(), m.ino(), flags_of(&p).bits(), content));
    }
    out.sort();
    out
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn symlink_swaps_never_steer_root_outside_the_users_directory() {
    if !require_root("nocow --migrate against symlink swaps") {
        return;
    }
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const RUNS: usize = 200;
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let mnt = sbx.mount_point();
    // A root-owned tree outside the user's directory, not NOCOW.
    let secret = mnt.join("secret");
    // Its layout mirrors the user's (`deeper/`), so that a path through a
    // swapped-in link leads to real directories and files there: O_NOFOLLOW
    // on the last component alone does not stop that.
    fs::create_dir_all(secret.join("deeper/inner")).unwrap();
    fs::write(secret.join("deeper/key"), random_bytes(8192, 41)).unwrap();
    fs::write(secret.join("deeper/inner/db"), random_bytes(4096, 42)).unwrap();
    fs::set_permissions(secret.join("deeper/key"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o700)).unwrap();
    let homes = mnt.join("homes");
    fs::create_dir(&homes).unwrap();
    let outside_before = outside_state(&secret);

    let (mut ok, mut refused) = (0, 0);
    let swaps = Arc::new(AtomicU64::new(0));
    for run in 0..RUNS {
        // The user's directory: a subdirectory with a file of theirs, and a
        // link of theirs to the secret tree, all owned by uid 65534.
        let home = homes.join(format!("u{run}"));
        fs::create_dir_all(home.join("sub/deeper")).unwrap();
        fs::write(
            home.join("sub/deeper/data.bin"),
            random_bytes(4096, run as u64),
        )
        .unwrap();
        std::os::unix::fs::symlink(&secret, home.join("link")).unwrap();
        for p in [
            &home,
            &home.join("sub"),
            &home.join("sub/deeper"),
            &home.join("sub/deeper/data.bin"),
        ] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
        std::os::unix::fs::lchown(home.join("link"), Some(65534), Some(65534)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let attacker = {
            let dir = File::open(&home).unwrap();
            let (stop, swaps) = (stop.clone(), swaps.clone());
            std::thread::spawn(move || {
                // This thread only: uid and gid 65534.
                rustix::thread::set_thread_res_gid(
                    rustix::process::Gid::from_raw(65534),
                    rustix::process::Gid::from_raw(65534),
                    rustix::process::Gid::from_raw(65534),
                )
                .unwrap();
                rustix::thread::set_thread_res_uid(
                    rustix::process::Uid::from_raw(65534),
                    rustix::process::Uid::from_raw(65534),
                    rustix::process::Uid::from_raw(65534),
                )
                .unwrap();
                for _ in 0..2_000_000u32 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    rustix::fs::renameat_with(
                        &dir,
                        "sub",
                        &dir,
                        "link",
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let (code, _, stderr) = nocow(&env, &[os("--migrate"), os("--yes"), home.as_os_str()]);
        stop.store(true, Ordering::SeqCst);
        attacker.join().unwrap();
        match code {
            0 => ok += 1,
            1 => {
                assert!(stderr.contains("btrfs-lab: error: "), "{stderr}");
                refused += 1;
            }
            _ => panic!("exit {code}: {stderr}"),
        }
        assert_eq!(
            outside_state(&secret),
            outside_before,
            "run {run}: root changed the tree outside the user's directory\n{stderr}"
        );
    }
    eprintln!(
        "symlink swaps: {RUNS} runs, {ok} done, {refused} refused, {} swaps; the outside tree \
         unchanged",
        swaps.load(Ordering::Relaxed)
    );
    assert!(swaps.load(Ordering::Relaxed) > RUNS as u64);
}

/// A user's directory `homes/u` (uid 65534) next to a root-only tree
/// `secret` (0700, files that are not NOCOW), on a sandbox btrfs.
fn user_and_secret(env: &TestEnv, mnt: &Path) -> (PathBuf, PathBuf) {
    // The test's own directories down to the mount: traversable by 65534.
    for a in mnt.ancestors() {
        fs::set_permissions(a, fs::Permissions::from_mode(0o755)).unwrap();
        if a == env.path() {
            break;
        }
    }
    let secret = mnt.join("secret");
    fs::create_dir_all(secret.join("sub")).unwrap();
    fs::write(secret.join("root-only-key"), random_bytes(8192, 71)).unwrap();
    fs::write(secret.join("sub/root-only-db"), random_bytes(4096, 72)).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o700)).unwrap();
    let home = mnt.join("homes/u");
    fs::create_dir_all(&home).unwrap();
    fs::set_permissions(mnt.join("homes"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    (home, secret)
}

/// Runs `f` as uid/gid 65534 in a thread of its own (the rest of the test
/// stays root).
fn as_nobody_thread<F: FnOnce() + Send + 'static>(f: F) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let g = rustix::process::Gid::from_raw(65534);
        let u = rustix::process::Uid::from_raw(65534);
        rustix::thread::set_thread_res_gid(g, g, g).unwrap();
        rustix::thread::set_thread_res_uid(u, u, u).unwrap();
        f()
    })
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_users_link_at_the_top_is_refused_before_anything_runs() {
    if !require_root("nocow on a user's top-level link") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let (home, secret) = user_and_secret(&env, sbx.mount_point());
    // The user plants links to root's directory and to one of its files.
    let (link, flink) = (home.join("link"), home.join("flink"));
    as_nobody_thread({
        let (secret, link, flink) = (secret.clone(), link.clone(), flink.clone());
        move || {
            std::os::unix::fs::symlink(&secret, &link).unwrap();
            std::os::unix::fs::symlink(secret.join("root-only-key"), &flink).unwrap();
        }
    })
    .join()
    .unwrap();
    let before = outside_state(&secret);
    let runs: [&[&OsStr]; 6] = [
        &[os("--yes"), link.as_os_str()],
        &[os("--migrate"), os("--yes"), link.as_os_str()],
        &[os("--check"), link.as_os_str()],
        &[os("--check"), os("--json"), link.as_os_str()],
        &[os("--check"), flink.as_os_str()],
        &[
            os("--check"),
            os("--json"),
            home.as_os_str(),
            flink.as_os_str(),
        ],
    ];
    for args in runs {
        let (code, stdout, stderr) = nocow(&env, args);
        assert_eq!(code, 1, "{args:?}: {stdout}{stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(
            stderr.contains("is a symbolic link owned by uid 65534")
                && stderr.contains("follows only root's links"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("root-only"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().filter(|l| l.contains("error:")).count(), 1);
        assert_eq!(outside_state(&secret), before, "{args:?}");
        assert!(!flags_of(&secret).contains(FS_NOCOW_FL));
    }
    // Root's own link is followed.
    let rootlink = sbx.mount_point().join("rootlink");
    std::os::unix::fs::symlink(&secret, &rootlink).unwrap();
    let (code, stdout, stderr) = nocow(&env, &[os("--check"), rootlink.as_os_str()]);
    assert_eq!(code, 6, "{stderr}");
    assert!(stdout.contains("root-only-key"), "{stdout}");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_swap_race_at_the_top_never_reaches_roots_directory() {
    if !require_root("nocow against a top-level swap race") {
        return;
    }
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const RUNS: usize = 150;
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let (home, secret) = user_and_secret(&env, sbx.mount_point());
    let before = outside_state(&secret);
    let swaps = Arc::new(AtomicU64::new(0));
    let (mut done, mut refused) = (0, 0);
    for run in 0..RUNS {
        // The user's directory `d` (a file of theirs in it) and their link
        // to root's directory, exchanged over and over.
        let d = home.join("d");
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let attacker = as_nobody_thread({
            let (secret, stop, ready, swaps) =
                (secret.clone(), stop.clone(), ready.clone(), swaps.clone());
            let home = home.clone();
            move || {
                // Either name may hold either entry after the last run.
                for n in ["d", "link"] {
                    let _ = fs::remove_file(home.join(n));
                    let _ = fs::remove_dir_all(home.join(n));
                }
                fs::create_dir(home.join("d")).unwrap();
                fs::write(home.join("d/mine"), random_bytes(4096, run as u64)).unwrap();
                std::os::unix::fs::symlink(&secret, home.join("link")).unwrap();
                let dir = File::open(&home).unwrap();
                ready.store(true, Ordering::SeqCst);
                for _ in 0..5_000_000u32 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    rustix::fs::renameat_with(
                        &dir,
                        "d",
                        &dir,
                        "link",
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        while !ready.load(Ordering::SeqCst) {
            assert!(
                !attacker.is_finished(),
                "run {run}: the attacker could not start"
            );
            std::thread::yield_now();
        }
        let args: &[&OsStr] = match run % 3 {
            0 => &[os("--yes"), d.as_os_str()],
            1 => &[os("--migrate"), os("--yes"), d.as_os_str()],
            _ => &[os("--check"), d.as_os_str()],
        };
        let (code, stdout, stderr) = nocow(&env, args);
        stop.store(true, Ordering::SeqCst);
        attacker.join().unwrap();
        match code {
            0 | 6 => done += 1,
            1 => {
                assert!(stderr.contains("btrfs-lab: error: "), "{stderr}");
                refused += 1;
            }
            _ => panic!("run {run}: exit {code}: {stderr}"),
        }
        assert!(
            !stdout.contains("root-only") && !stderr.contains("root-only"),
            "run {run}: root's names were shown\n{stdout}{stderr}"
        );
        assert_eq!(
            outside_state(&secret),
            before,
            "run {run} ({args:?}): root changed its own directory\n{stderr}"
        );
        assert!(!flags_of(&secret).contains(FS_NOCOW_FL), "run {run}");
    }
    eprintln!(
        "top-level swaps: {RUNS} runs, {done} done, {refused} refused, {} swaps; root's directory unchanged",
        swaps.load(Ordering::Relaxed)
    );
    assert!(swaps.load(Ordering::Relaxed) > RUNS as u64);
    assert!(done > 0 && refused > 0, "{done} done, {refused} refused");
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn migrate_of_a_missing_directory_is_an_error_and_creates_nothing() {
    if !require_root("nocow --migrate on a missing directory") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let m = sbx.mount_point().join("M");
    fs::create_dir(&m).unwrap();
    let typo = m.join("typo");
    for json_flag in [false, true] {
        let (code, stdout, stderr) = run(env
            .cmd()
            .args(json_flag.then_some("--json"))
            .args(["nocow", "--migrate", "--yes"])
            .arg(&typo));
        assert_eq!(code, 1, "{stdout}{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(
            stderr.contains(
                "typo does not exist: --migrate moves the files of an existing directory"
            ),
            "{stderr}"
        );
        assert!(stderr.contains("hint: "), "{stderr}");
        assert!(!typo.exists());
        assert!(crate::common::listing(&m).is_empty());
    }
    // Without --migrate the directory is still created.
    let (code, _, stderr) = nocow(&env, &[os("--yes"), typo.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(flags_of(&typo).contains(FS_NOCOW_FL));
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn names_that_are_not_utf8_or_carry_escapes_are_reported_safely() {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    if !require_root("nocow with hostile names") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let (home, _) = user_and_secret(&env, sbx.mount_point());
    let hostile =
        std::ffi::OsString::from_vec(b"bad\xff\x1b[31mred\x1b]0;title\x07\nname".to_vec());
    let raw = home.join(&hostile);
    let mut f = File::create(&raw).unwrap();
    f.write_all(&random_bytes(8192, 5)).unwrap();
    drop(f);
    std::os::unix::fs::chown(&raw, Some(65534), Some(65534)).unwrap();
    fs::write(home.join("plain.db"), random_bytes(4096, 6)).unwrap();

    let (code, stdout, stderr) = nocow(&env, &[os("--check"), os("--json"), home.as_os_str()]);
    assert_eq!(code, 6, "{stderr}");
    let r = json(&stdout);
    let e = entry(&r, Path::new(&*raw.to_string_lossy()));
    let bytes: Vec<u8> = e["path_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u8)
        .collect();
    assert_eq!(bytes, raw.as_os_str().as_bytes());
    assert!(
        entry(&r, &home.join("plain.db"))
            .get("path_bytes")
            .is_none()
    );
    let back: btrfs_lab::nocow::CheckDocument = serde_json::from_value(r.clone()).unwrap();
    assert_eq!(back.check.entries.len(), 2);

    let (code, stdout, stderr) = nocow(&env, &[os("--check"), home.as_os_str()]);
    assert_eq!(code, 6, "{stderr}");
    assert!(
        !stdout.contains('\x1b') && !stdout.contains('\x07'),
        "{stdout:?}"
    );
    assert!(
        stdout.contains("bad\u{fffd}\\e[31mred\\e]0;title\\x07\\nname"),
        "{stdout}"
    );

    // The plan and the result (text and JSON) of a migration, too.
    let (code, stdout, stderr) = nocow(&env, &[os("--migrate"), os("--dry-run"), home.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !stdout.contains('\x1b') && !stdout.contains('\x07'),
        "{stdout:?}"
    );
    let (code, stdout, stderr) = run(env
        .cmd()
        .args(["--json", "nocow", "--migrate", "--yes"])
        .arg(&home));
    assert_eq!(code, 0, "{stderr}");
    let r = json(&stdout);
    assert_eq!(
        r["result"]["migrated"].as_array().unwrap().len(),
        2,
        "{r:#}"
    );
    assert!(flags_of(&raw).contains(FS_NOCOW_FL));
}

/// SIGHUP (a dropped SSH session) in the middle of a copy and once the copy
/// has its temporary name: exit 130, the original as it was, no temporary
/// file left.
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn sighup_mid_migration_cleans_up_and_exits_130() {
    if !require_root("nocow --migrate and SIGHUP") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.mount_point().join("db");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("big.ibd"), random_bytes(32 << 20, 13)).unwrap();
    let before = snapshot(&dir);
    for point in ["copy", "linked"] {
        let mut child = start_paused(&env, &dir, point);
        if point == "linked" {
            assert!(
                crate::common::listing(&dir)
                    .iter()
                    .any(|n| n.starts_with(TEMP_PREFIX)),
                "the copy has its temporary name"
            );
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(130), "{point}");
        assert_eq!(snapshot(&dir), before, "{point}");
        assert!(!flags_of(&dir.join("big.ibd")).contains(FS_NOCOW_FL));
        no_temp_files(&dir);
    }
}

/// SIGKILL right after the exchange (the original under the temporary
/// name, its verified copy, with the marker, under the file's name): the
/// audit names the swapped-out original a leftover, not a file to migrate,
/// and a re-run removes it and completes; content and metadata as before.
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn killed_right_after_the_swap_a_rerun_removes_the_original_and_completes() {
    if !require_root("nocow --migrate killed after the swap") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.mount_point().join("db");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("big.ibd"), random_bytes(16 << 20, 17)).unwrap();
    let before = snapshot(&dir);
    let mut child = start_paused(&env, &dir, "swapped");
    kill_9(&mut child);
    let names = crate::common::listing(&dir);
    let temps: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with(TEMP_PREFIX))
        .collect();
    assert_eq!(temps.len(), 1, "{names:?}");
    let temp = dir.join(temps[0]);
    // Under the file's name: the NOCOW copy, with the marker.
    assert!(flags_of(&dir.join("big.ibd")).contains(FS_NOCOW_FL));
    assert!(
        File::open(dir.join("big.ibd"))
            .unwrap()
            .get_xattr(MARKER_XATTR)
            .unwrap()
            .is_some()
    );
    let (code, stdout, _) = nocow(&env, &[os("--check"), os("--json"), dir.as_os_str()]);
    assert_eq!(code, 0, "only the leftover is not NOCOW: {stdout}");
    let r = json(&stdout);
    assert_eq!(r["summary"]["leftovers"], 1, "{r:#}");
    assert_eq!(entry(&r, &temp)["state"], "leftover", "{r:#}");

    let (code, stdout, stderr) = nocow(&env, &[os("--migrate"), os("--yes"), dir.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!temp.exists(), "{stdout}");
    assert_eq!(snapshot(&dir), before);
    assert!(flags_of(&dir.join("big.ibd")).contains(FS_NOCOW_FL));
    assert!(
        File::open(dir.join("big.ibd"))
            .unwrap()
            .get_xattr(MARKER_XATTR)
            .unwrap()
            .is_none()
    );
    no_temp_files(&dir);
}

/// SIGINT or SIGTERM in the middle of a migration of several files: exit
/// 130 and the run says how many files were moved and how to go on; the
/// files it names as moved are NOCOW, the others as they were, and running
/// the same command again moves the rest.
#[cfg(feature = "test-hooks")]
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn an_interrupted_migration_says_how_many_files_moved_and_the_same_command_goes_on() {
    if !require_root("nocow --migrate interrupted, then resumed") {
        return;
    }
    let env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.mount_point().join("vm");
    fs::create_dir(&dir).unwrap();
    let names: Vec<String> = (0..4).map(|i| format!("disk{i}.img")).collect();
    for (i, n) in names.iter().enumerate() {
        fs::write(dir.join(n), random_bytes((4 + i) << 20, 20 + i as u64)).unwrap();
    }
    let before = snapshot(&dir);
    for signal in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        let args = [os("nocow"), os("--migrate"), os("--yes"), dir.as_os_str()];
        let nocow_before = names
            .iter()
            .filter(|n| flags_of(&dir.join(n)).contains(FS_NOCOW_FL))
            .count();
        // One file is held at its copy; the others (copied at once, each
        // on a thread of its own) are moved meanwhile; then the signal.
        // Meanwhile a moved file is told by its new inode (stat only: an
        // open would break the run's lease on the original).
        let nocow = |d: &Path| {
            names
                .iter()
                .filter(|n| flags_of(&d.join(n)).contains(FS_NOCOW_FL))
                .count()
        };
        let inodes = |d: &Path| -> Vec<u64> {
            names
                .iter()
                .map(|n| fs::symlink_metadata(d.join(n)).map_or(0, |m| m.ino()))
                .collect()
        };
        let was = inodes(&dir);
        let moved_meanwhile = |d: &Path| {
            let now = inodes(d);
            was.iter().zip(&now).filter(|(a, b)| a != b).count() + nocow_before
        };
        let (code, _, stderr) = crate::common::with_pause_at(&env, "nocow-copy", &args, |pid| {
            let since = std::time::Instant::now();
            while moved_meanwhile(&dir) < names.len() - 1 && since.elapsed().as_secs() < 60 {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal).unwrap();
        });
        assert_eq!(code, 130, "{signal:?}: {stderr}");
        let left = names.len() - nocow(&dir);
        // The files left are planned again: the run moved some of those.
        let line = stderr
            .lines()
            .find(|l| l.contains(" moved"))
            .unwrap_or_else(|| panic!("{signal:?}: no count of the files moved: {stderr}"));
        let (moved, of) = line
            .split_once(" file")
            .and_then(|(head, _)| head.rsplit_once(": "))
            .and_then(|(_, n)| n.split_once(" of "))
            .map(|(a, b)| (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap()))
            .unwrap_or_else(|| panic!("{line}"));
        assert!(moved < of, "{line}");
        assert!(
            stderr.contains("run the same command again to go on"),
            "{stderr}"
        );
        no_temp_files(&dir);
        // The first run moved every file but the one held; the second had
        // that one left, and moved nothing.
        let want = if signal == nix::sys::signal::Signal::SIGINT {
            "interrupted; clean-up done: 3 of 4 files moved"
        } else {
            "interrupted; clean-up done: 0 of 1 file moved"
        };
        assert!(line.ends_with(&want), "{line}");
        assert_eq!((of - moved, left), (1, 1), "{line}");
        // Every file as it was (moved or not: a migration keeps all).
        assert_eq!(snapshot(&dir), before, "{signal:?}");
    }
    let (code, stdout, stderr) = nocow(&env, &[os("--migrate"), os("--yes"), dir.as_os_str()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for n in &names {
        assert!(flags_of(&dir.join(n)).contains(FS_NOCOW_FL), "{n}");
    }
    assert_eq!(snapshot(&dir), before);
    no_temp_files(&dir);
}
