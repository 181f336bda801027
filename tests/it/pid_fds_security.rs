//! `read-test --pid` / `probe-dio --pid` take another process's files with
//! `pidfd_getfd` and never open `/proc/PID/fd/N` (issue 48). On a btrfs the
//! test makes (loop device), a process of uid 65534 holds (1) an `O_PATH`
//! descriptor to a root-only file: root reports it as such and never opens
//! the file; (2) descriptor 5 swapped at least 10,000 times between a
//! regular file on the btrfs, a FIFO and a device node the test made
//! (mknod, 1:3, on a tmpfs it mounts) while
//! read-test --pid runs: every run returns and neither the FIFO nor the
//! device is ever opened by root. "Opened" is seen by inotify (`IN_OPEN` on
//! their directory, armed after the process opened them itself; its own
//! swaps are `dup2`, which open nothing), with one open by the test at the
//! end as the sentinel that shows the watch works.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use btrfs_lab::sandbox::SandboxRequest;
use rustix::fs::inotify;
use serde_json::Value;

use crate::common::{TestEnv, json, require_root, run};

const SWAPS: u64 = 10_000;

const HELPER: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* opath FILE: fd 5 is an O_PATH descriptor of FILE; waits for stdin.
   swap FILE FIFO DEV: opens the three once, then dup2s them in turn onto
   fd 5 until asked to stop (a line on stdin) and at least 10000 swaps are
   done; prints the number of swaps. */
int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "opath")) {
        int f = open(argv[2], O_PATH);
        if (f < 0 || dup2(f, 5) < 0) { perror("open"); return 1; }
        printf("ready\n"); fflush(stdout);
        char b[8]; if (read(0, b, sizeof b) < 0) return 1;
        return 0;
    }
    if (argc != 5 || strcmp(argv[1], "swap")) return 2;
    int fds[3];
    fds[0] = open(argv[2], O_RDONLY);
    fds[1] = open(argv[3], O_RDWR | O_NONBLOCK);
    fds[2] = open(argv[4], O_RDONLY);
    for (int i = 0; i < 3; i++) if (fds[i] < 0) { perror(argv[2 + i]); return 1; }
    if (dup2(fds[0], 5) < 0) return 1;
    printf("ready\n"); fflush(stdout);
    unsigned long n = 0; int stop = 0;
    for (;;) {
        int which = (n & 1) ? 0 : (1 + ((n >> 1) & 1));
        if (dup2(fds[which], 5) < 0) return 1;
        n++;
        if (n % 1000 == 0) {
            struct pollfd p = { .fd = 0, .events = POLLIN };
            if (!stop && poll(&p, 1, 0) > 0) stop = 1;
            if (stop && n >= 10000) break;
        }
    }
    printf("%lu\n", n); fflush(stdout);
    return 0;
}
"#;

fn helper_exe(env: &TestEnv) -> PathBuf {
    let src = env.path().join("fdswap.c");
    fs::write(&src, HELPER).unwrap();
    let exe = env.path().join("fdswap");
    let out = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc is needed to build the test helper");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::set_permissions(env.path(), fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

/// The helper as uid 65534, once it said "ready".
struct Helper {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Helper {
    fn start(exe: &Path, args: &[&Path]) -> Self {
        let mut child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        if line.trim() != "ready" {
            let _ = child.wait();
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
            panic!("the helper did not start: {err}");
        }
        Helper { child, out }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Asks it to stop; its last line.
    fn stop(mut self) -> String {
        self.child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(b"stop\n")
            .unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let _ = self.child.wait();
        line
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `IN_OPEN` of the entries of `dir`.
fn watch_opens(dir: &Path) -> OwnedFd {
    let fd = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(&fd, dir, inotify::WatchFlags::OPEN).unwrap();
    fd
}

/// The names opened since the watch was armed (all queued events).
fn opened(fd: &OwnedFd) -> Vec<String> {
    let mut buf = [MaybeUninit::uninit(); 8192];
    let mut r = inotify::Reader::new(fd, &mut buf);
    let mut names = Vec::new();
    while let Ok(e) = r.next() {
        if let Some(n) = e.file_name() {
            names.push(n.to_string_lossy().into_owned());
        }
    }
    names
}

fn sentinel(path: &Path) {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .unwrap();
}

/// Lets uid 65534 reach `dir` (the test's own directories only).
fn reachable(env: &TestEnv, dir: &Path) {
    for d in dir.ancestors().take_while(|d| d.starts_with(env.path())) {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn an_o_path_descriptor_to_a_root_only_file_is_named_and_never_opened() {
    if !require_root("--pid, O_PATH descriptor") {
        return;
    }
    let env = TestEnv::new();
    let exe = helper_exe(&env);
    let sbx = env.sandbox(SandboxRequest::default());
    let dir = sbx.mount_point().join("private");
    fs::create_dir(&dir).unwrap();
    reachable(&env, &dir);
    let secret = dir.join("secret");
    fs::write(&secret, vec![7u8; 1 << 20]).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
            .arg(&secret)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .code()
            != Some(0),
        "uid 65534 must not read the secret"
    );
    let h = Helper::start(&exe, &[Path::new("opath"), &secret]);
    let watch = watch_opens(&dir);
    let is_o_path = |v: &Value| {
        v["skipped_descriptors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["fd"] == 5 && d["kind"] == "o-path" && d["path"] == secret.to_str().unwrap())
    };
    let (code, out, err) =
        run(env
            .cmd()
            .args(["--json", "read-test", "--pid", &h.pid(), "--seconds", "1"]));
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    assert!(is_o_path(&r), "{out}");
    assert!(
        r["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["path"] != secret.to_str().unwrap()),
        "{out}"
    );
    let (code, out, err) =
        run(env
            .cmd()
            .args(["probe-dio", "--json", "--seconds", "1", "--pid", &h.pid()]));
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    assert!(is_o_path(&r), "{out}");
    assert!(r["files"].as_array().unwrap().is_empty(), "{out}");
    drop(h);
    sentinel(&secret);
    assert_eq!(
        opened(&watch),
        vec!["secret".to_owned()],
        "root opened the file"
    );
}

#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn a_descriptor_swapped_between_a_file_a_fifo_and_a_device_is_never_opened() {
    if !require_root("--pid, descriptor swaps") {
        return;
    }
    let mut env = TestEnv::new();
    let exe = helper_exe(&env);
    let sbx = env.sandbox(SandboxRequest::default());
    let m = sbx.mount_point();
    let file = m.join("model.bin");
    fs::write(&file, vec![1u8; 1 << 20]).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    reachable(&env, m);
    // The FIFO and the device node on a tmpfs the test mounts (the
    // sandbox's btrfs is mounted nodev).
    let nodes = env.tmpfs("nodes");
    reachable(&env, &nodes);
    let fifo = nodes.join("fifo");
    let dev = nodes.join("dev");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &dev,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    )
    .unwrap();
    for p in [&fifo, &dev] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o666)).unwrap();
    }
    let h = Helper::start(&exe, &[Path::new("swap"), &file, &fifo, &dev]);
    let watch = watch_opens(&nodes);
    for _ in 0..3 {
        let (code, out, err) =
            run(env
                .cmd()
                .args(["--json", "read-test", "--pid", &h.pid(), "--seconds", "1"]));
        assert_eq!(code, 0, "{err}");
        json(&out);
    }
    let (code, _, err) =
        run(env
            .cmd()
            .args(["probe-dio", "--json", "--seconds", "1", "--pid", &h.pid()]));
    assert!(code == 0 || code == 3 || code == 6, "{err}");
    let swaps: u64 = h.stop().trim().parse().unwrap();
    assert!(swaps >= SWAPS, "{swaps} swaps");
    sentinel(&fifo);
    sentinel(&dev);
    let mut seen = opened(&watch);
    seen.sort();
    assert_eq!(
        seen,
        vec!["dev".to_owned(), "fifo".to_owned()],
        "root opened a node"
    );
}
