//! Running fio: behind a trait (as hyperfine's executor), with the real
//! runner (argv, no shell, JSON output, the job file written by us) and a
//! mock that the pure tests of the bench analysis use.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::parse::fio::{FioOutput, parse_fio_json};
use crate::sys::tools::{self, Tool};

/// Something that runs a fio job file and returns fio's JSON results.
pub trait FioRunner {
    /// fio's version (`fio-3.33`).
    fn version(&self) -> String;
    /// Runs the job file `text`, saved at `path` first. `stop` is polled
    /// while fio runs: when it returns an error, fio is killed and that
    /// error returned.
    fn run(&mut self, path: &Path, text: &str, stop: &dyn Fn() -> Result<()>) -> Result<FioOutput>;
    /// The same with fio's `--readonly` (a command-line option, not a job
    /// option): fio refuses any write, whatever the job file says.
    fn run_readonly(
        &mut self,
        path: &Path,
        text: &str,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput> {
        self.run(path, text, stop)
    }
    /// Runs the job file `text` (saved at `path`), calling `tick` about
    /// every 20 ms while fio runs. When `tick` returns `true` fio is asked
    /// to stop (SIGINT: it ends its jobs and still writes its results and
    /// logs) and the run is returned with `stopped` set.
    fn run_watched(
        &mut self,
        path: &Path,
        text: &str,
        tick: &mut dyn FnMut() -> bool,
    ) -> Result<WatchedRun> {
        let stopped = std::cell::Cell::new(false);
        let tick = std::cell::RefCell::new(tick);
        let out = self.run(path, text, &|| {
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

/// The real fio, found on PATH.
#[derive(Debug, Clone)]
pub struct RealFio {
    tool: Tool,
    version: String,
}

impl RealFio {
    /// Finds fio and asks its version.
    pub fn find() -> Result<Self> {
        let tool = tools::find("fio", "fio")?;
        let out = tool.run(&["--version".to_owned()])?;
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

/// Writes `text` to a new file at `path` (O_EXCL, no symlink followed).
pub fn write_new_file(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::from_io(&e, "cannot create", path))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Error::from_io(&e, "cannot write", path))
}

fn with_ext(path: &Path, ext: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(ext);
    PathBuf::from(p)
}

impl FioRunner for RealFio {
    fn version(&self) -> String {
        self.version.clone()
    }

    fn run(&mut self, path: &Path, text: &str, stop: &dyn Fn() -> Result<()>) -> Result<FioOutput> {
        self.spawn(path, text, false, stop)
    }

    fn run_readonly(
        &mut self,
        path: &Path,
        text: &str,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput> {
        self.spawn(path, text, true, stop)
    }

    fn run_watched(
        &mut self,
        path: &Path,
        text: &str,
        tick: &mut dyn FnMut() -> bool,
    ) -> Result<WatchedRun> {
        let Started {
            mut child,
            args,
            out_path,
            err_path,
        } = self.start(path, text, false)?;
        let mut stopped = false;
        let mut stop_sent: Option<std::time::Instant> = None;
        let status = loop {
            if !stopped && tick() {
                stopped = true;
            }
            if stopped {
                match stop_sent {
                    None => {
                        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
                        stop_sent = Some(std::time::Instant::now());
                    }
                    Some(t) if t.elapsed() > STOP_GRACE => {
                        let _ = child.kill();
                    }
                    Some(_) => {}
                }
            }
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(Error::from_io(&e, "cannot wait for", &self.tool.path)),
            }
        };
        let json = fs::read_to_string(&out_path).unwrap_or_default();
        if stopped {
            return Ok(WatchedRun {
                output: parse_fio_json(&json).ok(),
                stopped,
            });
        }
        self.check_status(status, &err_path, &args)?;
        Ok(WatchedRun {
            output: Some(parse_fio_json(&json)?),
            stopped,
        })
    }
}

/// A fio run just started: the child, its argv (for messages) and where
/// its JSON and stderr go.
struct Started {
    child: std::process::Child,
    args: Vec<String>,
    out_path: PathBuf,
    err_path: PathBuf,
}

impl RealFio {
    /// A failed fio is an error naming its last stderr line and the command.
    fn check_status(
        &self,
        status: std::process::ExitStatus,
        err_path: &Path,
        args: &[String],
    ) -> Result<()> {
        if status.success() {
            return Ok(());
        }
        let mut stderr = String::new();
        if let Ok(mut f) = File::open(err_path) {
            let _ = f.read_to_string(&mut stderr);
        }
        let why = stderr
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map_or_else(|| format!("exit status {status}"), str::to_owned);
        Err(
            Error::new(ErrorKind::Tool, format!("fio failed: {why}")).with_hint(format!(
                "the command was: {}",
                tools::display_argv(&self.tool.argv(args))
            )),
        )
    }

    /// Writes the job file (O_EXCL), creates the stderr file (O_EXCL,
    /// O_NOFOLLOW) and starts fio on it with JSON output, argv only.
    fn start(&self, path: &Path, text: &str, readonly: bool) -> Result<Started> {
        write_new_file(path, text)?;
        let out_path = with_ext(path, ".json");
        let err_path = with_ext(path, ".stderr");
        let err_file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&err_path)
            .map_err(|e| Error::from_io(&e, "cannot create", &err_path))?;
        let mut args = Vec::new();
        if readonly {
            args.push("--readonly".to_owned());
        }
        args.extend([
            "--output-format=json".to_owned(),
            format!("--output={}", out_path.display()),
            path.display().to_string(),
        ]);
        let child = Command::new(&self.tool.path)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file)
            .spawn()
            .map_err(|e| Error::from_io(&e, "cannot run", &self.tool.path))?;
        Ok(Started {
            child,
            args,
            out_path,
            err_path,
        })
    }

    fn spawn(
        &mut self,
        path: &Path,
        text: &str,
        readonly: bool,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput> {
        let Started {
            mut child,
            args,
            out_path,
            err_path,
        } = self.start(path, text, readonly)?;
        let status = loop {
            if let Err(e) = stop() {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(Error::from_io(&e, "cannot wait for", &self.tool.path)),
            }
        };
        // fio stops early on SIGINT from the terminal and still prints
        // its results: the caller's check decides what that means.
        stop()?;
        let json = fs::read_to_string(&out_path).unwrap_or_default();
        self.check_status(status, &err_path, &args)?;
        parse_fio_json(&json)
    }
}

/// A scripted fio: returns the outputs it was given, one per run, and
/// remembers the job files it was asked to run.
#[derive(Debug, Default)]
pub struct MockFio {
    /// Outputs still to return, in order.
    pub outputs: std::collections::VecDeque<FioOutput>,
    /// Job files received.
    pub jobs: Vec<String>,
}

impl FioRunner for MockFio {
    fn version(&self) -> String {
        "fio-mock".to_owned()
    }

    fn run(
        &mut self,
        _path: &Path,
        text: &str,
        stop: &dyn Fn() -> Result<()>,
    ) -> Result<FioOutput> {
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

    #[test]
    fn real_fio_runs_a_job_and_reports_failure_with_stderr() {
        let Ok(mut fio) = RealFio::find() else {
            eprintln!("fio not installed: skipped");
            return;
        };
        assert!(fio.version().starts_with("fio-"), "{}", fio.version());
        let t = tempfile::tempdir().unwrap();
        let data = t.path().join("d");
        fs::write(&data, vec![7u8; 1 << 20]).unwrap();
        let job = t.path().join("j.fio");
        let text = format!(
            "[global]\nfilename={}\nallow_file_create=0\n[r]\nrw=read\nbs=4k\nsize=1m\n",
            data.display()
        );
        let out = fio.run(&job, &text, &|| Ok(())).unwrap();
        assert_eq!(out.jobs[0].read.io_bytes, 1 << 20);
        // The job file stays where it was written.
        assert_eq!(fs::read_to_string(&job).unwrap(), text);
        // A job fio refuses: the error quotes fio.
        let bad = t.path().join("bad.fio");
        let e = fio.run(&bad, "[r]\nrw=nonsense\n", &|| Ok(())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Tool);
        assert!(e.message().starts_with("fio failed: "), "{}", e.message());
        // An existing job file is never overwritten.
        assert!(fio.run(&job, &text, &|| Ok(())).is_err());
    }

    #[test]
    fn a_stop_request_kills_fio() {
        let Ok(mut fio) = RealFio::find() else {
            return;
        };
        let t = tempfile::tempdir().unwrap();
        let job = t.path().join("j.fio");
        // A job that would run for an hour.
        let text = "[s]\nioengine=null\nsize=1g\ntime_based=1\nruntime=3600\n";
        let calls = std::cell::Cell::new(0);
        let e = fio
            .run(&job, text, &|| {
                calls.set(calls.get() + 1);
                if calls.get() > 3 {
                    Err(Error::interrupted())
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Interrupted);
    }
}
