//! External programs (mkfs.btrfs, btrfs, fio): found with `which`, run with
//! an argv (never a shell), their stderr kept in the error.

pub mod fio;
mod group;
pub mod inhibit;
pub(crate) mod notify;
pub(crate) use group::interrupt_group;

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::sys::fs::beneath::TrustedDir;

use crate::error::{Error, ErrorKind, Result};

/// A program found on PATH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    /// Name looked up (`mkfs.btrfs`).
    pub name: String,
    /// Where it was found.
    pub path: PathBuf,
}

/// `promtool check metrics` of a Prometheus text (stdin): whether it
/// passed, and what it said (lint included). The one check of every
/// `--textfile` and `--format prometheus` in the tests.
pub fn promtool_check_metrics(text: &str) -> Result<(bool, String)> {
    use std::io::Write;
    let tool = find("promtool", "prometheus")?;
    let mut child = Command::new(&tool.path)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::new(ErrorKind::Tool, format!("cannot run promtool: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| Error::new(ErrorKind::Tool, format!("cannot feed promtool: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::new(ErrorKind::Tool, format!("promtool: {e}")))?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// Finds `name` on PATH (and in the sbin directories, which a non-login root
/// shell may lack); the error names the Debian package that provides it.
///
/// Only absolute `PATH` entries are searched: an empty entry or `.` would
/// make root run a program from the current directory (`./fio` planted by
/// whoever owns it).
pub fn find(name: &str, package: &str) -> Result<Tool> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = which::which_in(name, Some(search_path(&path)), "/").map_err(|_| {
        Error::new(ErrorKind::Tool, format!("{name} not found"))
            .with_hint(format!("install it: apt-get install {package}"))
    })?;
    Ok(Tool {
        name: name.to_owned(),
        path,
    })
}

/// The directories searched for tools: the absolute entries of `path`, in
/// order, then the sbin directories a non-login root shell may lack.
fn search_path(path: &OsStr) -> OsString {
    let mut dirs: Vec<PathBuf> = std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .collect();
    for extra in ["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from) {
        if !dirs.contains(&extra) {
            dirs.push(extra);
        }
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// Starts `program` with `args` in its own process group (a stop can signal
/// everything it started), with `dir` as its working directory when given
/// (`fchdir` to the held descriptor in the child: the directory is never
/// reached by path again), killed by the kernel if the thread that started
/// it exits first (`PR_SET_PDEATHSIG`).
pub(crate) fn spawn_in_group(
    program: &Path,
    args: &[String],
    dir: Option<&TrustedDir>,
    stdout: Stdio,
    stderr: Stdio,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    crate::sys::kernel::child::spawn_with_parent_death(&mut cmd, dir.map(|d| d.fd()))
}

/// The processes whose parent is `pid` (from /proc/PID/stat).
pub(crate) fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(child) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Kills the process group `child` leads (see [`spawn_in_group`]).
pub(crate) fn kill_group(child: &Child, sig: Signal) {
    if let Some(pid) = Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pid, sig);
    }
}

pub use crate::report::text::display_argv;

/// The result of a successful run.
#[derive(Debug)]
pub struct RunOutput {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Tool {
    /// The full argv (program path first) for display.
    pub fn argv(&self, args: &[String]) -> Vec<String> {
        std::iter::once(self.path.display().to_string())
            .chain(args.iter().cloned())
            .collect()
    }

    /// Like [`Tool::run`], but the tool (its whole process group) is killed
    /// and the run reported as stuck once it has run for `limit`.
    pub(crate) fn run_limited(&self, args: &[String], limit: Duration) -> Result<RunOutput> {
        let mut child = spawn_in_group(&self.path, args, None, Stdio::piped(), Stdio::piped())
            .map_err(|e| Error::from_io(&e, "cannot run", &self.path))?;
        let drain = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.by_ref().take(16 << 20).read_to_end(&mut buf);
                }
                buf
            })
        };
        let out_reader = drain(
            child
                .stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        );
        let err_reader = drain(
            child
                .stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        );
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if start.elapsed() > limit => {
                    kill_group(&child, Signal::KILL);
                    let _ = child.wait();
                    return Err(Error::new(
                        ErrorKind::Tool,
                        format!(
                            "{} did not answer within {} s: stopped it",
                            display_argv(&self.argv(args)),
                            limit.as_secs()
                        ),
                    )
                    .with_hint(
                        "is a device stuck, or the program broken? try running it by hand",
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(Error::from_io(&e, "cannot wait for", &self.path)),
            }
        };
        kill_group(&child, Signal::KILL);
        let stdout = out_reader.join().unwrap_or_default();
        let stderr = err_reader.join().unwrap_or_default();
        self.outcome(args, status, &stdout, &stderr)
    }

    /// Runs the tool with `args` on the terminal (stdout and stderr
    /// inherited, as a pager needs them) with `input` on its stdin, and
    /// waits for it; a non-zero exit is an error.
    pub fn run_on_terminal(&self, args: &[String], input: &[u8]) -> Result<()> {
        use std::io::Write;
        let mut child = Command::new(&self.path)
            .args(args.iter().map(OsString::from))
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|e| Error::from_io(&e, "cannot run", &self.path))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A pager that quits early closes its end: not an error.
            let _ = stdin.write_all(input);
        }
        let status = child
            .wait()
            .map_err(|e| Error::from_io(&e, "cannot wait for", &self.path))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Tool,
                format!("{} failed ({status})", display_argv(&self.argv(args))),
            ))
        }
    }

    /// Runs the tool with `args`, stdin closed; a non-zero exit becomes an
    /// error that quotes the tool's last stderr line.
    pub fn run(&self, args: &[String]) -> Result<RunOutput> {
        let out = Command::new(&self.path)
            .args(args.iter().map(OsString::from))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::from_io(&e, "cannot run", &self.path))?;
        self.outcome(args, out.status, &out.stdout, &out.stderr)
    }

    pub(crate) fn outcome(
        &self,
        args: &[String],
        status: std::process::ExitStatus,
        stdout: &[u8],
        stderr: &[u8],
    ) -> Result<RunOutput> {
        let stdout = String::from_utf8_lossy(stdout).into_owned();
        let stderr = String::from_utf8_lossy(stderr).into_owned();
        if status.success() {
            return Ok(RunOutput { stdout, stderr });
        }
        let why = last_meaningful_line(&stderr)
            .or_else(|| last_meaningful_line(&stdout))
            .unwrap_or_else(|| match status.code() {
                Some(c) => format!("exit status {c}"),
                None => "killed by a signal".to_owned(),
            });
        Err(
            Error::new(ErrorKind::Tool, format!("{} failed: {why}", self.name)).with_hint(format!(
                "the command was: {}",
                display_argv(&self.argv(args))
            )),
        )
    }
}

fn last_meaningful_line(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.trim_start_matches("ERROR: ").to_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn quotes_only_where_needed() {
        assert_eq!(
            display_argv(&["mkfs.btrfs", "-d", "raid0", "/dev/loop1"]),
            "mkfs.btrfs -d raid0 /dev/loop1"
        );
        assert_eq!(display_argv(&["a b", "it's", ""]), "'a b' 'it'\\''s' ''");
    }

    /// Hostile words (a mount point named after a USB label): what is
    /// printed, read back by a real shell, is the exact argv.
    pub(crate) fn shell_reads_back(printed: &str) -> Vec<String> {
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf '%s\\0' {printed}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{printed}");
        let mut v: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .split('\0')
            .map(str::to_owned)
            .collect();
        v.pop();
        v
    }

    pub(crate) const HOSTILE: &[&str] = &[
        "/mnt/usb disk",
        "/mnt/$(touch /tmp/pwned)",
        "/mnt/`id`",
        "/mnt/it's \"quoted\"",
        "/mnt/a\nb",
        "/mnt/tab\there\\",
        "/mnt/esc\u{1b}[31m\u{9b}x",
        "/mnt/semi;colon|pipe&amp*?[x]~",
        "",
    ];

    #[test]
    fn a_shell_reads_back_the_exact_argv() {
        for w in HOSTILE {
            let argv = ["btrfs", "device", "stats", "-z", w];
            let printed = display_argv(&argv);
            assert!(
                !printed.contains('\n'),
                "no raw control character: {printed}"
            );
            assert!(
                !printed.chars().any(char::is_control),
                "no raw control character: {printed:?}"
            );
            assert_eq!(shell_reads_back(&printed), argv, "{printed}");
        }
    }

    #[test]
    fn missing_tool_names_the_package() {
        let e = find("no-such-tool-btrfs-lab", "btrfs-progs").unwrap_err();
        assert_eq!(e.message(), "no-such-tool-btrfs-lab not found");
        assert_eq!(e.hint(), Some("install it: apt-get install btrfs-progs"));
    }

    #[test]
    fn failure_quotes_stderr() {
        let sh = find("sh", "dash").unwrap();
        let e = sh
            .run(&[
                "-c".into(),
                "echo oops >&2; echo 'ERROR: device busy' >&2; exit 3".into(),
            ])
            .unwrap_err();
        assert_eq!(e.message(), "sh failed: device busy");
    }

    #[test]
    fn only_absolute_path_entries_are_searched() {
        let p = search_path(OsStr::new(":.:bin:/usr/bin::/bin"));
        let dirs: Vec<PathBuf> = std::env::split_paths(&p).collect();
        assert_eq!(
            dirs,
            ["/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin"]
                .map(PathBuf::from)
                .to_vec()
        );
    }

    #[test]
    fn a_tool_that_does_not_answer_is_stopped() {
        let sh = find("sh", "dash").unwrap();
        // A child that would outlive the shell: the whole group goes.
        let e = sh
            .run_limited(
                &["-c".into(), "sleep 600 & sleep 600".into()],
                Duration::from_millis(200),
            )
            .unwrap_err();
        assert!(
            e.message().contains("did not answer within"),
            "{}",
            e.message()
        );
        let out = sh
            .run_limited(&["-c".into(), "echo hi".into()], Duration::from_secs(60))
            .unwrap();
        assert_eq!(out.stdout, "hi\n");
    }
}
