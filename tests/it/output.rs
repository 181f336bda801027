//! stdout as a contract, for every subcommand: a write error (`/dev/full`,
//! a full disk) is an error exit with one line, a closed pipe is a quiet
//! exit, and a failed or refused `--json` run leaves stdout empty.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use btrfs_lab::model::profile::Profile;
use btrfs_lab::sandbox::SandboxRequest;

use crate::common::{TestEnv, bin, listing, require_root, run};

/// A `btrfs filesystem df` capture that parses.
const FI_DF: &str = "\
Data, single: total=8.00MiB, used=4.00MiB
System, DUP: total=8.00MiB, used=16.00KiB
Metadata, DUP: total=256.00MiB, used=112.00KiB
GlobalReserve, single: total=3.25MiB, used=0.00B
";

fn links_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/links/reference")
}

/// Commands that print something and succeed without root.
fn printing_commands(env: &TestEnv) -> Vec<Vec<String>> {
    let capture = env.path().join("fi-df.txt");
    fs::write(&capture, FI_DF).unwrap();
    let capture = capture.display().to_string();
    let sysroot = links_fixture().display().to_string();
    vec![
        vec!["df".into(), "--parse".into(), capture.clone()],
        vec!["--json".into(), "df".into(), "--parse".into(), capture],
        vec!["links".into(), "--sysroot".into(), sysroot.clone()],
        vec!["--json".into(), "links".into(), "--sysroot".into(), sysroot],
    ]
}

fn to_dev_full(cmd: &mut Command) -> (i32, String) {
    let full = fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = cmd
        .stdout(Stdio::from(full))
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_write_error(args: &[String], code: i32, stderr: &str) {
    assert_eq!(code, 1, "{args:?} to /dev/full: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("btrfs-lab: error: cannot write the output")),
        "{args:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
}

/// A pipe whose reading end is already closed: every write gets EPIPE.
fn closed_pipe() -> OwnedFd {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    write
}

#[test]
fn stdout_write_errors_exit_1_and_a_closed_pipe_is_quiet() {
    let env = TestEnv::new();
    for args in printing_commands(&env) {
        let (code, stderr) = to_dev_full(Command::new(bin()).args(&args));
        assert_write_error(&args, code, &stderr);

        let out = Command::new(bin())
            .args(&args)
            .stdout(Stdio::from(closed_pipe()))
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?} into a closed pipe");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("btrfs-lab: error"), "{args:?}: {stderr}");
    }
    // Help and version go to stdout too.
    for flag in ["--help", "--version"] {
        let (code, stderr) = to_dev_full(Command::new(bin()).arg(flag));
        assert_eq!(code, 1, "{flag} to /dev/full: {stderr}");
        assert!(stderr.contains("cannot write"), "{flag}: {stderr}");
    }
}

/// Every subcommand's failed `--json` run: exit status 1 or 2, one error
/// line on stderr, nothing on stdout.
#[test]
fn failed_json_runs_print_nothing_on_stdout() {
    let env = TestEnv::new();
    let garbage = env.path().join("garbage.txt");
    fs::write(&garbage, "this is not btrfs filesystem df output\n").unwrap();
    let garbage = garbage.display().to_string();
    let missing = "/nonexistent/btrfs-lab".to_owned();
    let cases: Vec<Vec<String>> = vec![
        vec![
            "sandbox".into(),
            "down".into(),
            "no-such-sandbox".into(),
            "--yes".into(),
        ],
        vec!["probe-dio".into(), missing.clone()],
        vec!["demo".into(), "--file-size".into(), "0".into()],
        vec!["df".into(), missing.clone()],
        vec!["df".into(), "--parse".into(), garbage],
        vec!["usage".into(), missing.clone()],
        vec!["show".into(), missing.clone()],
        vec!["capacity".into(), "--from".into(), missing.clone()],
        vec![
            "device".into(),
            "add".into(),
            missing.clone(),
            "/dev/null".into(),
        ],
        vec![
            "convert".into(),
            missing.clone(),
            "--data".into(),
            "raid1".into(),
        ],
        vec!["reclaim".into(), missing.clone()],
        vec!["scrub".into(), missing.clone(), "--status".into()],
        vec!["links".into(), missing.clone()],
        vec!["nocow".into(), "/dev/null".into()],
        vec!["nocow".into(), "--check".into(), missing.clone()],
        vec!["apps".into(), missing.clone()],
        vec!["bench".into(), missing.clone()],
        vec!["read-test".into(), missing.clone()],
        vec!["rescue".into(), missing.clone()],
        vec!["balance".into(), missing.clone()],
        vec!["explain".into(), missing.clone()],
        vec!["doctor".into(), missing],
        vec!["completions".into(), "bash".into()],
        vec!["man".into(), "nosuch".into()],
    ];
    let mut seen = std::collections::BTreeSet::new();
    for args in cases {
        seen.insert(args[0].clone());
        let (code, stdout, stderr) = run(env.cmd().arg("--json").args(&args));
        // doctor: 3, the monitoring plugins' UNKNOWN (0-2 are its verdicts).
        let allowed = if args[0] == "doctor" {
            code == 3
        } else {
            matches!(code, 1 | 2)
        };
        assert!(allowed, "{args:?}: exit {code}: {stderr}");
        assert_eq!(stdout, "", "{args:?} printed on stdout; stderr: {stderr}");
        assert!(
            stderr.starts_with("btrfs-lab: error: "),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // One case per subcommand of the CLI.
    let (_, help, _) = run(Command::new(bin()).arg("--help"));
    for name in subcommands_in_help(&help) {
        assert!(seen.contains(&name), "no failed --json case for `{name}`");
    }
}

/// The subcommand names listed under "Commands:" in `--help`.
fn subcommands_in_help(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A name sits two spaces in; deeper lines continue a wrapped description.
        .filter(|l| !l[2..].starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_owned)
        .collect()
}

/// On a real btrfs: a refused conversion or device add prints no plan on
/// stdout; `df --json` into a full disk is an error, not an empty file
/// with exit 0.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn refusals_and_full_disks_on_a_real_btrfs() {
    if !require_root("stdout contract on a sandbox btrfs") {
        return;
    }
    let mut env = TestEnv::new();
    let sbx = env.sandbox(SandboxRequest {
        devices: 1,
        size_bytes: 512 << 20,
        data: Some(Profile::Single),
        metadata: Some(Profile::Dup),
        ..SandboxRequest::default()
    });
    let mount = sbx.mount_point().display().to_string();
    let spare = env.spare_device("spare", 512 << 20).display().to_string();

    // Not confirmed (stdin is not a terminal, no --yes): refused, no plan.
    for args in [
        vec!["convert", mount.as_str(), "--data", "dup"],
        vec!["device", "add", mount.as_str(), spare.as_str()],
    ] {
        let (code, stdout, stderr) = run(env.cmd().arg("--json").args(&args));
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}: a refused run printed on stdout");
        assert!(stderr.contains("confirmation needed"), "{args:?}: {stderr}");
    }

    // df --json into /dev/full and into a file on a full filesystem.
    let args: Vec<String> = vec!["--json".into(), "df".into(), mount.clone()];
    let (code, stderr) = to_dev_full(env.cmd().args(&args));
    assert_write_error(&args, code, &stderr);

    let full = env.tmpfs("full");
    nix::mount::mount(
        None::<&str>,
        &full,
        None::<&str>,
        nix::mount::MsFlags::MS_REMOUNT,
        Some("size=64k"),
    )
    .unwrap();
    let filler = full.join("filler");
    let _ = fs::write(&filler, vec![0u8; 128 << 10]); // fills it (ENOSPC expected)
    let out_path = full.join("out.json");
    let out_file = fs::File::create(&out_path).unwrap();
    let out = env
        .cmd()
        .args(&args)
        .stdout(Stdio::from(out_file))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_write_error(&args, out.status.code().unwrap_or(-1), &stderr);
    assert!(stderr.contains("No space left"), "{stderr}");
}

/// `man --out-dir` as root through a directory of a user (uid 65534) in a
/// sticky directory: a link of theirs in the directory part is refused,
/// never followed, and while they swap their directory with a link to a
/// root directory (`renameat2(RENAME_EXCHANGE)`, a bounded loop), no page
/// ever lands in root's directory: the directory is held by descriptor and
/// every page written inside it. Before: the path was resolved again for
/// every page, and the 21 pages went into the root directory.
#[test]
#[cfg_attr(root_tests_ignored, ignore = "needs root (scripts/test.sh)")]
fn man_out_dir_never_follows_a_users_link() {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    if !require_root("man --out-dir through a user's link") {
        return;
    }
    const RUNS: usize = 12;
    let env = TestEnv::new();
    fs::set_permissions(env.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let rootdir = env.path().join("root-only");
    fs::create_dir(&rootdir).unwrap();
    let shared = env.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let as_nobody = |args: &[&std::ffi::OsStr]| {
        let (code, _, stderr) = run(Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .args(args));
        assert_eq!(code, 0, "{args:?} as uid 65534: {stderr}");
    };
    let link = shared.join("pages");
    as_nobody(&[
        "ln".as_ref(),
        "-s".as_ref(),
        rootdir.as_os_str(),
        link.as_os_str(),
    ]);
    for dir in [link.clone(), link.join("sub")] {
        let (code, stdout, stderr) = run(env.cmd().arg("man").arg("--out-dir").arg(&dir));
        assert_eq!(code, 1, "{}: {stderr}", dir.display());
        assert_eq!(stdout, "");
        assert!(
            stderr.starts_with("btrfs-lab: error: ")
                && stderr.contains("is a symbolic link owned by uid 65534"),
            "{stderr}"
        );
        assert_eq!(
            listing(&rootdir),
            Vec::<String>::new(),
            "pages in root's directory"
        );
    }

    // The race: their directory and their link to root's, exchanged.
    let theirs = shared.join("u");
    let swap = shared.join("l");
    as_nobody(&["mkdir".as_ref(), theirs.as_os_str()]);
    as_nobody(&[
        "ln".as_ref(),
        "-s".as_ref(),
        rootdir.as_os_str(),
        swap.as_os_str(),
    ]);
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let attacker = {
        let dir = fs::File::open(&shared).unwrap();
        let (stop, swaps) = (stop.clone(), swaps.clone());
        std::thread::spawn(move || {
            // This thread only: uid and gid 65534.
            let gid = rustix::process::Gid::from_raw(65534);
            rustix::thread::set_thread_res_gid(gid, gid, gid).unwrap();
            let uid = rustix::process::Uid::from_raw(65534);
            rustix::thread::set_thread_res_uid(uid, uid, uid).unwrap();
            for _ in 0..5_000_000u32 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                rustix::fs::renameat_with(&dir, "u", &dir, "l", rustix::fs::RenameFlags::EXCHANGE)
                    .unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (mut written, mut refused) = (0, 0);
    for run_no in 0..RUNS {
        let (code, _, stderr) = run(env.cmd().arg("man").arg("--out-dir").arg(&theirs));
        match code {
            0 => written += 1,
            1 => {
                assert!(stderr.starts_with("btrfs-lab: error: "), "{stderr}");
                refused += 1;
            }
            _ => panic!("run {run_no}: exit {code}: {stderr}"),
        }
        if !listing(&rootdir).is_empty() {
            stop.store(true, Ordering::SeqCst);
            attacker.join().unwrap();
            panic!(
                "run {run_no}: pages written into root's directory: {:?}",
                listing(&rootdir)
            );
        }
    }
    stop.store(true, Ordering::SeqCst);
    attacker.join().unwrap();
    eprintln!(
        "man --out-dir: {RUNS} runs, {written} written, {refused} refused, {} swaps; root's directory empty",
        swaps.load(Ordering::Relaxed)
    );
    assert!(swaps.load(Ordering::Relaxed) > RUNS as u64);
    assert_eq!(listing(&rootdir), Vec::<String>::new());
}

/// `NO_COLOR` only changes the default (no-color.org): `--color auto`
/// leaves the text plain with it set (here also because stdout is no
/// terminal), and an explicit `--color always` colours all the same;
/// `--color never` never colours.
#[test]
fn no_color_sets_the_default_and_color_always_wins() {
    let fixture = links_fixture();
    let links = |color: Option<&str>, no_color: bool| {
        let mut cmd = Command::new(bin());
        cmd.arg("links")
            .arg("--sysroot")
            .arg(&fixture)
            .env_remove("BTRFS_LAB_SYSROOT")
            .env("TERM", "xterm");
        if let Some(c) = color {
            cmd.args(["--color", c]);
        }
        if no_color {
            cmd.env("NO_COLOR", "1");
        } else {
            cmd.env_remove("NO_COLOR");
        }
        let (code, stdout, stderr) = run(&mut cmd);
        assert_eq!(code, 0, "{stderr}");
        assert!(!stdout.trim().is_empty());
        stdout.contains('\u{1b}')
    };
    assert!(
        links(Some("always"), true),
        "--color always with NO_COLOR set: plain"
    );
    assert!(links(Some("always"), false));
    assert!(!links(None, true), "NO_COLOR: coloured");
    assert!(!links(Some("auto"), false), "auto on a pipe: coloured");
    assert!(!links(Some("never"), false));
}
