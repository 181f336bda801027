//! Running fio: behind a trait (as hyperfine's executor), with the real
//! runner and a mock that the pure tests of the bench analysis use.
//!
//! What keeps root safe and the machine clean when fio runs:
//! - fio runs **in the held work directory**: the child `fchdir`s to the
//!   directory's descriptor before `exec`, and every name fio is given (the
//!   job file, `--output`, the test file, logs) is a plain relative name that
//!   btrfs-lab chose ([`check_name`]). No path a user could influence is ever
//!   written into a job file, and nothing is reached again by path.
//! - every other value written into a job file goes through
//!   [`check_value`]: only characters fio reads back unchanged (no newline,
//!   `;`, `#`, `$`, `\`, `:`, space or control byte, UTF-8 only).
//! - fio runs in **its own process group** with `PR_SET_PDEATHSIG` (SIGKILL):
//!   a stop signals the whole group and waits for it; if btrfs-lab itself is
//!   killed, the kernel kills fio. Job files use `thread` so all of fio's
//!   jobs are threads of that one process.
//! - a **watchdog**: a run that outlives its job's runtime plus a margin is
//!   killed and reported (a stuck device), never waited for forever.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::parse::fio::{FioOutput, parse_fio_json};
use crate::sys::fs::beneath::TrustedDir;
use crate::sys::tools::{self, Tool};

/// Largest fio JSON document read back (a suite run is a few hundred KiB).
const MAX_JSON: u64 = 64 << 20;

/// How long a run may take: the job's own runtime, doubled, plus a minute
/// (fio's start-up, `end_fsync`, a slow device). Past that the run is
/// killed as stuck.
pub fn watchdog(expected: Duration) -> Duration {
    expected.saturating_mul(2) + Duration::from_secs(60)
}

/// Checks a name btrfs-lab gives fio (a job file, a test file, a log
/// prefix): one plain component of `[A-Za-z0-9._-]`, not starting with `.`
/// or `-`.
pub(crate) fn check_name(name: &str) -> Result<&str> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(name)
    } else {
        Err(Error::new(
            ErrorKind::State,
            format!("internal: {name:?} is not a name btrfs-lab gives fio"),
        ))
    }
}

/// Checks a value written into a fio job file (a member device's path):
/// only `[A-Za-z0-9._/+-]`, which fio's job-file parser reads back exactly
/// as written. Anything else (a newline would start a new option line,
/// `;` and `#` start comments, `$` expands variables, `\` and `:` are
/// escapes and separators, control bytes and non-UTF-8 are lossy) is
/// refused with the reason: root never writes a byte fio could read as
/// something else.
pub(crate) fn check_value<'a>(what: &str, value: &'a [u8]) -> Result<&'a str> {
    let bad = value
        .iter()
        .find(|&&b| !(b.is_ascii_alphanumeric() || b"._/+-".contains(&b)));
    match (bad, std::str::from_utf8(value)) {
        (None, Ok(s)) if !s.is_empty() => Ok(s),
        (Some(&b), _) => Err(Error::usage(format!(
            "{what} {} holds {}, which fio would read differently in a job file; btrfs-lab writes only plain names there",
            String::from_utf8_lossy(value).escape_debug(),
            if b.is_ascii_graphic() {
                format!("'{}'", b as char)
            } else {
                format!("the byte 0x{b:02x}")
            }
        ))
        .with_hint("use a device or directory whose name has only letters, digits and ._/+-")),
        _ => Err(Error::usage(format!("{what} is empty"))),
    }
}

/// Something that runs a fio job file and returns fio's JSON results.
pub trait FioRunner {
    /// fio's version (`fio-3.33`).
    fn version(&self) -> String;
    /// Runs the job file `text`, saved as `name` in the held directory
    /// `dir`, with `dir` as fio's working directory (every name in the job
    /// is relative to it). `stop` is polled while fio runs: when it returns
    /// an error, fio's process group is killed and that error returned. A
    /// run longer than `limit` is killed and reported as stuck.
    fn run(
        &mut self,
        dir: &TrustedDir,
        name: &str,
        text: &str,
        limit: Duration,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput>;
    /// The same with fio's `--readonly` (a command-line option, not a job
    /// option): fio refuses any write, whatever the job file says.
    fn run_readonly(
        &mut self,
        dir: &TrustedDir,
        name: &str,
        text: &str,
        limit: Duration,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput> {
        self.run(dir, name, text, limit, stop)
    }
    /// Runs the job file like [`FioRunner::run`], calling `tick` about
    /// every 20 ms while fio runs. When `tick` returns `true` fio is asked
    /// to stop (SIGINT to its group: it ends its jobs and still writes its
    /// results and logs) and the run is returned with `stopped` set.
    fn run_watched(
        &mut self,
        dir: &TrustedDir,
        name: &str,
        text: &str,
        tick: &mut dyn FnMut() -> bool,
    ) -> Result<WatchedRun> {
        let stopped = std::cell::Cell::new(false);
        let tick = std::cell::RefCell::new(tick);
        let out = self.run(dir, name, text, Duration::MAX, &|| {
            if (tick.borrow_mut())() {
                stopped.set(true);
                Err(Error::interrupted())
            } else {
                Ok(())
            }
        });
        match out {
            Ok(o) => Ok(WatchedRun {
                output: Some(o),
                stopped: false,
            }),
            Err(_) if stopped.get() => Ok(WatchedRun {
                output: None,
                stopped: true,
            }),
            Err(e) => Err(e),
        }
    }
}

/// What [`FioRunner::run_watched`] saw.
#[derive(Debug, Clone)]
pub struct WatchedRun {
    /// fio's results (absent when fio left none after a stop).
    pub output: Option<FioOutput>,
    /// The run was stopped before fio finished.
    pub stopped: bool,
}

/// How long fio gets to end its jobs after SIGINT before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// How long `fio --version` may take.
const VERSION_LIMIT: Duration = Duration::from_secs(20);

/// The real fio, found on PATH.
#[derive(Debug, Clone)]
pub struct RealFio {
    tool: Tool,
    version: String,
}

impl RealFio {
    /// Finds fio and asks its version (killed if it does not answer).
    pub fn find() -> Result<Self> {
        let tool = tools::find("fio", "fio")?;
        let out = tool.run_limited(&["--version".to_owned()], VERSION_LIMIT)?;
        Ok(Self {
            version: out.stdout.trim().to_owned(),
            tool,
        })
    }

    /// Where fio is.
    pub fn path(&self) -> &Path {
        &self.tool.path
    }
}

/// A running fio, in its own process group; killed (the whole group) and
/// reaped when dropped.
struct Running {
    child: Child,
    reaped: bool,
}

impl Running {
    fn signal_group(&self, sig: rustix::process::Signal) {
        if sig != rustix::process::Signal::KILL {
            for child in tools::children_of(self.child.id()) {
                if let Some(pid) = rustix::process::Pid::from_raw(child as i32) {
                    let _ = rustix::process::kill_process(pid, sig);
                }
            }
        }
        tools::kill_group(&self.child, sig);
    }

    /// Kills fio, its group and every process it started, and waits for
    /// fio. fio's job processes (without `thread`) each call `setsid`, so
    /// they leave fio's group: they are found by their parent before fio
    /// goes (after, they would belong to init).
    fn kill(&mut self) {
        for child in tools::children_of(self.child.id()) {
            if let Some(pid) = rustix::process::Pid::from_raw(child as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        self.signal_group(rustix::process::Signal::KILL);
        if !self.reaped {
            let _ = self.child.wait();
            self.reaped = true;
        }
        // Anything fio forked (it should not: `thread`) goes too.
        self.signal_group(rustix::process::Signal::KILL);
    }

    fn try_wait(&mut self, tool: &Path) -> Result<Option<std::process::ExitStatus>> {
        match self.child.try_wait() {
            Ok(Some(s)) => {
                self.reaped = true;
                // fio is gone; make sure nothing of its group stays.
                self.signal_group(rustix::process::Signal::KILL);
                Ok(Some(s))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(Error::from_io(&e, "cannot wait for", tool)),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill();
        }
    }
}

impl FioRunner for RealFio {
    fn version(&self) -> String {
        self.version.clone()
    }

    fn run(
        &mut self,
        dir: &TrustedDir,
        name: &str,
        text: &str,
        limit: Duration,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput> {
        self.spawn(dir, name, text, false, limit, stop)
    }

    fn run_readonly(
        &mut self,
        dir: &TrustedDir,
        name: &str,
        text: &str,
        limit: Duration,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput> {
        self.spawn(dir, name, text, true, limit, stop)
    }

    fn run_watched(
        &mut self,
        dir: &TrustedDir,
        name: &str,
        text: &str,
        tick: &mut dyn FnMut() -> bool,
    ) -> Result<WatchedRun> {
        let (mut running, args, names) = self.start(dir, name, text, false)?;
        let mut stopped = false;
        let mut stop_sent: Option<Instant> = None;
        let status = loop {
            if !stopped && tick() {
                stopped = true;
            }
            if stopped {
                match stop_sent {
                    None => {
                        running.signal_group(rustix::process::Signal::INT);
                        stop_sent = Some(Instant::now());
                    }
                    Some(t) if t.elapsed() > STOP_GRACE => running.kill(),
                    Some(_) => {}
                }
            }
            match running.try_wait(&self.tool.path)? {
                Some(s) => break s,
                None => thread::sleep(Duration::from_millis(20)),
            }
        };
        let json = read_json(dir, &names.json);
        if stopped {
            return Ok(WatchedRun {
                output: parse_fio_json(&json).ok(),
                stopped,
            });
        }
        self.check_status(status, dir, &names.stderr, &args, &json)?;
        Ok(WatchedRun {
            output: Some(parse_fio_json(&json)?),
            stopped,
        })
    }
}

/// The files of one run in the work directory.
struct RunNames {
    json: String,
    stderr: String,
}

fn read_json(dir: &TrustedDir, name: &str) -> String {
    let mut text = String::new();
    if let Ok(f) = dir.open_file(name, false) {
        let _ = f.take(MAX_JSON).read_to_string(&mut text);
    }
    text
}

impl RealFio {
    /// A failed fio is an error naming its last stderr line and the command.
    fn check_status(
        &self,
        status: std::process::ExitStatus,
        dir: &TrustedDir,
        stderr_name: &str,
        args: &[String],
        json: &str,
    ) -> Result<()> {
        if status.success() && !json.trim().is_empty() {
            return Ok(());
        }
        let mut stderr = String::new();
        if let Ok(f) = dir.open_file(stderr_name, false) {
            let _ = f.take(1 << 20).read_to_string(&mut stderr);
        }
        let last = stderr
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned);
        // A full filesystem: say so, whatever fio's wording.
        if stderr.contains("No space left on device") || stderr.contains("ENOSPC") {
            return Err(Error::new(
                ErrorKind::NoSpace,
                format!(
                    "no space left on {}: fio could not write its test file or results",
                    dir.path().display()
                ),
            )
            .with_hint("free some space or use a smaller --file-size"));
        }
        let why = match (last, status.success()) {
            (Some(l), _) => l,
            (None, true) => "it wrote no results".to_owned(),
            (None, false) => format!("exit status {status}"),
        };
        Err(
            Error::new(ErrorKind::Tool, format!("fio failed: {why}")).with_hint(format!(
                "the command was (in {}): {}",
                dir.path().display(),
                tools::display_argv(&self.tool.argv(args))
            )),
        )
    }

    /// Writes the job file (O_EXCL, in the held directory), creates the
    /// stderr file and starts fio on it with JSON output, argv only.
    fn start(
        &self,
        dir: &TrustedDir,
        name: &str,
        text: &str,
        readonly: bool,
    ) -> Result<(Running, Vec<String>, RunNames)> {
        let name = check_name(name)?;
        let names = RunNames {
            json: format!("{name}.json"),
            stderr: format!("{name}.stderr"),
        };
        let mut job = dir.create_file(name, 0o600)?;
        job.write_all(text.as_bytes())
            .map_err(|e| Error::from_io(&e, "cannot write", &dir.join(name)))?;
        drop(job);
        let err_file = dir.create_file(&names.stderr, 0o600)?;
        let mut args = Vec::new();
        if readonly {
            args.push("--readonly".to_owned());
        }
        args.extend([
            "--output-format=json".to_owned(),
            format!("--output={}", names.json),
            name.to_owned(),
        ]);
        let child = tools::spawn_in_group(
            &self.tool.path,
            &args,
            Some(dir),
            Stdio::null(),
            Stdio::from(err_file),
        )
        .map_err(|e| Error::from_io(&e, "cannot run", &self.tool.path))?;
        Ok((
            Running {
                child,
                reaped: false,
            },
            args,
            names,
        ))
    }

    fn spawn(
        &mut self,
        dir: &TrustedDir,
        name: &str,
        text: &str,
        readonly: bool,
        limit: Duration,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput> {
        let (mut running, args, names) = self.start(dir, name, text, readonly)?;
        let started = Instant::now();
        let status = loop {
            if let Err(e) = stop() {
                running.kill();
                return Err(e);
            }
            if started.elapsed() > limit {
                running.kill();
                return Err(Error::new(
                    ErrorKind::Tool,
                    format!(
                        "fio was still running {} s after it started (its job needs about {} s): stopped it",
                        started.elapsed().as_secs(),
                        limit.saturating_sub(Duration::from_secs(60)).as_secs() / 2
                    ),
                )
                .with_hint("a device may be stuck: look at dmesg and the drives' health before measuring again"));
            }
            match running.try_wait(&self.tool.path)? {
                Some(s) => break s,
                None => thread::sleep(Duration::from_millis(20)),
            }
        };
        stop()?;
        let json = read_json(dir, &names.json);
        self.check_status(status, dir, &names.stderr, &args, &json)?;
        parse_fio_json(&json)
    }
}

/// A scripted fio: returns the outputs it was given, one per run, and
/// remembers the job files it was asked to run.
#[derive(Debug, Default)]
#[cfg_attr(not(test), allow(dead_code))] // used by the unit tests
pub(crate) struct MockFio {
    /// Outputs still to return, in order.
    pub(crate) outputs: std::collections::VecDeque<FioOutput>,
    /// Job files received.
    pub jobs: Vec<String>,
}

impl FioRunner for MockFio {
    fn version(&self) -> String {
        "fio-mock".to_owned()
    }

    fn run(
        &mut self,
        _dir: &TrustedDir,
        name: &str,
        text: &str,
        _limit: Duration,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput> {
        check_name(name)?;
        stop()?;
        self.jobs.push(text.to_owned());
        self.outputs
            .pop_front()
            .ok_or_else(|| Error::new(ErrorKind::Tool, "mock fio: no output left"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fs::beneath::{HeldDir, TrustedDir};

    /// fio, or `None` (the test is skipped) when it is not installed; with
    /// `CI=true` a missing fio fails the test instead.
    fn fio() -> Option<RealFio> {
        match RealFio::find() {
            Ok(f) => Some(f),
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
                panic!("CI=true and fio is missing: {}", e.message())
            }
            Err(_) => {
                eprintln!("fio not installed: skipped");
                None
            }
        }
    }

    /// A private work directory in a temp dir, as bench makes one.
    fn work() -> (tempfile::TempDir, TrustedDir) {
        let t = tempfile::tempdir().unwrap();
        let held = HeldDir::open(t.path()).unwrap();
        let w = held.mkdir_private("w", 0o700).unwrap();
        (t, w)
    }

    #[test]
    fn names_and_values_are_checked() {
        for good in ["001-fill.fio", "bench.dat", "member-0.fio", "bw"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", ".x", "-x", "a/b", "a b", "a;b", "a\nb", "..", "x$y"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            check_value("device", b"/dev/nvme0n1").unwrap(),
            "/dev/nvme0n1"
        );
        for bad in [
            &b"/dev/x\nexec_prerun=sh"[..],
            b"/dev/a;b",
            b"/dev/a#b",
            b"/dev/${HOME}",
            b"/dev/a\\b",
            b"/dev/a:b",
            b"/dev/a b",
            b"/dev/\x1b[2J",
            b"/dev/\xff",
            b"",
        ] {
            let e = check_value("device", bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Usage, "{bad:?}");
        }
    }

    #[test]
    fn real_fio_runs_a_job_in_the_held_directory() {
        let Some(mut fio) = fio() else {
            return;
        };
        assert!(fio.version().starts_with("fio-"), "{}", fio.version());
        let (t, w) = work();
        let mut data = w.create_file("d", 0o600).unwrap();
        data.write_all(&vec![7u8; 1 << 20]).unwrap();
        let text =
            "[global]\nfilename=d\nallow_file_create=0\nthread\n[r]\nrw=read\nbs=4k\nsize=1m\n";
        let limit = watchdog(Duration::from_secs(5));
        let out = fio.run(&w, "j.fio", text, limit, &|| Ok(())).unwrap();
        assert_eq!(out.jobs[0].read.io_bytes, 1 << 20);
        // The job file, fio's JSON and stderr are in the work directory.
        assert_eq!(
            std::fs::read_to_string(t.path().join("w/j.fio")).unwrap(),
            text
        );
        assert!(t.path().join("w/j.fio.json").exists());
        // Renaming the work directory does not change where fio runs.
        std::fs::rename(t.path().join("w"), t.path().join("moved")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", t.path().join("w")).unwrap();
        let out = fio.run(&w, "k.fio", text, limit, &|| Ok(())).unwrap();
        assert_eq!(out.jobs[0].read.io_bytes, 1 << 20);
        assert!(t.path().join("moved/k.fio.json").exists());
        // A job fio refuses: the error quotes fio.
        let e = fio
            .run(&w, "bad.fio", "[r]\nrw=nonsense\n", limit, &|| Ok(()))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Tool);
        assert!(e.message().starts_with("fio failed: "), "{}", e.message());
        // An existing job file is never overwritten.
        assert!(fio.run(&w, "j.fio", text, limit, &|| Ok(())).is_err());
    }

    #[test]
    fn a_full_device_is_reported_as_no_space() {
        let Some(mut fio) = fio() else {
            return;
        };
        let (_t, w) = work();
        // /dev/full answers every write with ENOSPC, as a full filesystem.
        let text = "[w]\nfilename=/dev/full\nrw=write\nsize=1m\nthread\n";
        let e = fio
            .run(
                &w,
                "full.fio",
                text,
                watchdog(Duration::from_secs(5)),
                &|| Ok(()),
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NoSpace, "{}", e.message());
        assert!(
            e.message().starts_with("no space left on "),
            "{}",
            e.message()
        );
    }

    /// What fio's job-file parser stored for `filename=` (fio
    /// `--parse-only --debug=parse`).
    fn fio_parsed_filename(fio: &Path, value: &str) -> Option<String> {
        let t = tempfile::tempdir().unwrap();
        let job = t.path().join("j.fio");
        std::fs::write(&job, format!("[x]\nfilename={value}\nrw=read\nsize=1m\n")).unwrap();
        let out = std::process::Command::new(fio)
            .args(["--parse-only", "--debug=parse"])
            .arg(&job)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        text.lines().find_map(|l| {
            l.split_once("handle_option=filename, ptr=")
                .map(|(_, v)| v.to_owned())
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]

        /// Every value the validator accepts is read back by fio's parser
        /// exactly as written; arbitrary bytes are either accepted under
        /// that rule or refused with a usage error, never mangled.
        #[test]
        fn accepted_values_round_trip_through_fios_parser(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
            plain in "[A-Za-z0-9._/+-]{1,24}",
        ) {
            let Some(fio) = fio() else {
                return Ok(());
            };
            for candidate in [bytes.as_slice(), plain.as_bytes()] {
                match check_value("value", candidate) {
                    Ok(v) => {
                        let parsed = fio_parsed_filename(fio.path(), v);
                        proptest::prop_assert_eq!(parsed.as_deref(), Some(v));
                    }
                    Err(e) => proptest::prop_assert_eq!(e.kind(), ErrorKind::Usage),
                }
            }
        }
    }

    /// fio's process, found by its job file name in /proc (no pgrep).
    fn fio_pids_running(job: &str) -> Vec<i32> {
        let mut pids = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
                && cmd.split(|&b| b == 0).any(|a| a == job.as_bytes())
            {
                pids.push(pid);
            }
        }
        pids
    }

    #[test]
    fn a_stop_request_kills_fio_and_its_jobs() {
        let Some(mut fio) = fio() else {
            return;
        };
        let (_t, w) = work();
        let job = format!("stop-{}.fio", std::process::id());
        // Two jobs that would run for an hour, as processes (no `thread`):
        // the whole group goes.
        let text = "[s]\nioengine=null\nsize=1g\ntime_based=1\nruntime=3600\nnumjobs=2\n";
        let calls = std::cell::Cell::new(0);
        let e = fio
            .run(&w, &job, text, Duration::from_secs(3600), &|| {
                calls.set(calls.get() + 1);
                if calls.get() > 25 {
                    Err(Error::interrupted())
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Interrupted);
        // Killed processes may take a moment to be reaped by init.
        let mut left = fio_pids_running(&job);
        for _ in 0..100 {
            if left.is_empty() {
                break;
            }
            thread::sleep(Duration::from_millis(20));
            left = fio_pids_running(&job);
        }
        assert!(left.is_empty(), "fio processes left: {left:?}");
    }

    #[test]
    fn the_watchdog_kills_a_fio_that_does_not_end() {
        let Some(mut fio) = fio() else {
            return;
        };
        let (_t, w) = work();
        let job = format!("stuck-{}.fio", std::process::id());
        let text = "[s]\nioengine=null\nsize=1g\ntime_based=1\nruntime=3600\nthread\n";
        let e = fio
            .run(&w, &job, text, Duration::from_millis(300), &|| Ok(()))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Tool);
        assert!(e.message().contains("stopped it"), "{}", e.message());
        assert!(
            e.hint().unwrap_or_default().contains("stuck"),
            "{:?}",
            e.hint()
        );
        let mut left = fio_pids_running(&job);
        for _ in 0..100 {
            if left.is_empty() {
                break;
            }
            thread::sleep(Duration::from_millis(20));
            left = fio_pids_running(&job);
        }
        assert!(left.is_empty(), "fio processes left: {left:?}");
    }
}
