//! Signals.
//!
//! [`install`]: SIGINT, SIGTERM and SIGHUP (a dropped SSH session): the
//! first one asks the running operation to stop at a safe point and clean
//! up (exit status 130); a second one exits at once (probe-dio, read-test,
//! nocow, sandbox, bench, doctor --deep).
//!
//! [`install_pausable`]: for a kernel operation that must never be abandoned
//! (a balance runs inside our process: if the process dies while in the
//! ioctl, the kernel cancels it). SIGINT, SIGTERM and SIGHUP exit at once
//! (status 130) only until [`begin_operation`]; from then on no signal ends
//! the process: each one is delivered to the operation through
//! [`OperationSignals`], at once (a self-pipe), so it can ask the kernel to
//! pause and wait for the answer.
//!
//! [`detach`]: `--background`, as `btrfs balance start --bg`.
#![allow(unsafe_code)]

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::error::{Error, ErrorKind, Result, exit};

static FLAG: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

fn handler_error(e: &std::io::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("cannot install signal handlers: {e}"),
    )
}

/// Whether [`install`] has registered its handlers.
static INSTALLED: Mutex<bool> = Mutex::new(false);

/// Installs the handlers. Safe to call more than once: the handlers are
/// registered once (registered twice, the second pair would see the flag
/// the first pair just set and exit on the first signal).
pub fn install() -> Result<()> {
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if *installed {
        return Ok(());
    }
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        // Registered first, so it sees the flag as it was before this signal:
        // only a second signal exits immediately.
        signal_hook::flag::register_conditional_shutdown(
            sig,
            i32::from(exit::INTERRUPTED),
            Arc::clone(&FLAG),
        )
        .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&FLAG)))
        .map_err(|e| handler_error(&e))?;
    }
    *installed = true;
    Ok(())
}

/// True once SIGINT, SIGTERM or SIGHUP arrived.
pub fn interrupted() -> bool {
    FLAG.load(Ordering::SeqCst)
}

/// `Err(interrupted)` once a signal arrived: call at safe points.
pub fn check() -> Result<()> {
    if interrupted() {
        Err(Error::interrupted())
    } else {
        Ok(())
    }
}

/// True while no operation has begun: a signal then exits at once.
static EXIT_EARLY: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(true)));
/// The number of the last signal (SIGINT, SIGTERM or SIGHUP).
static LAST: LazyLock<Arc<AtomicUsize>> = LazyLock::new(|| Arc::new(AtomicUsize::new(0)));
/// The read end of the self-pipe each signal writes one byte to.
static PIPE: OnceLock<Mutex<UnixStream>> = OnceLock::new();

/// Installs the handlers for an operation that must pause, never die, on a
/// signal (see the module documentation). Call it first thing, before
/// anything is read or planned. Safe to call more than once.
pub fn install_pausable() -> Result<()> {
    if PIPE.get().is_some() {
        return Ok(());
    }
    let (reader, writer) = UnixStream::pair().map_err(|e| handler_error(&e))?;
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        let w = writer.try_clone().map_err(|e| handler_error(&e))?;
        // The conditional exit first: it sees EXIT_EARLY as it is when the
        // signal arrives.
        signal_hook::flag::register_conditional_shutdown(
            sig,
            i32::from(exit::INTERRUPTED),
            Arc::clone(&EXIT_EARLY),
        )
        .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&FLAG)))
        .and_then(|_| signal_hook::flag::register_usize(sig, Arc::clone(&LAST), sig as usize))
        .and_then(|_| signal_hook::low_level::pipe::register(sig, w))
        .map_err(|e| handler_error(&e))?;
    }
    let _ = PIPE.set(Mutex::new(reader));
    Ok(())
}

/// From now on no signal ends the process: they are read from the returned
/// [`OperationSignals`]. A signal that arrived before this call has already
/// ended the process (nothing had begun).
pub fn begin_operation() -> Result<OperationSignals> {
    install_pausable()?;
    EXIT_EARLY.store(false, Ordering::SeqCst);
    Ok(OperationSignals { _private: () })
}

/// Signals that arrived during an operation (see [`begin_operation`]).
#[derive(Debug)]
pub struct OperationSignals {
    _private: (),
}

/// A signal, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// SIGHUP (the terminal or SSH connection went away).
    Hangup,
}

impl Received {
    /// `SIGINT`, ...
    pub fn name(self) -> &'static str {
        match self {
            Received::Interrupt => "SIGINT",
            Received::Terminate => "SIGTERM",
            Received::Hangup => "SIGHUP",
        }
    }
}

impl OperationSignals {
    /// Waits up to `timeout` for signals; returns how many arrived (0 on
    /// timeout) and the last one. Returns as soon as one arrives.
    pub fn wait(&self, timeout: Duration) -> (usize, Option<Received>) {
        let Some(pipe) = PIPE.get() else {
            std::thread::sleep(timeout);
            return (0, None);
        };
        let mut reader = pipe.lock().unwrap_or_else(|e| e.into_inner());
        let _ = reader.set_read_timeout(Some(timeout.max(Duration::from_millis(1))));
        let mut buf = [0u8; 64];
        let n = reader.read(&mut buf).unwrap_or(0);
        let last = match LAST.load(Ordering::SeqCst) as i32 {
            SIGINT => Some(Received::Interrupt),
            SIGTERM => Some(Received::Terminate),
            SIGHUP => Some(Received::Hangup),
            _ => None,
        };
        (n, if n > 0 { last } else { None })
    }
}

impl Drop for OperationSignals {
    fn drop(&mut self) {
        // The operation is over: a later signal exits at once again.
        EXIT_EARLY.store(true, Ordering::SeqCst);
    }
}

/// The two sides of [`detach`].
#[derive(Debug)]
pub enum Detached {
    /// The process the user started: the operation goes on in `pid`.
    Parent {
        /// The detached process.
        pid: i32,
        /// `None`: the operation has begun (the detached process said so);
        /// `Some(status)`: it ended before that, with this exit status
        /// (its error was printed on this terminal).
        ended_early: Option<i32>,
    },
    /// The detached process: in a session of its own (no terminal, so no
    /// SIGHUP when it goes away), stdin and stdout on /dev/null; stderr
    /// stays until [`DetachNotice::started`].
    Child(DetachNotice),
}

/// Held by the detached process: tells the parent that the operation began.
#[derive(Debug)]
pub struct DetachNotice {
    pipe: Option<std::os::fd::OwnedFd>,
}

impl DetachNotice {
    /// The operation has begun: the parent may exit; stderr goes to
    /// /dev/null from now on (the terminal may be gone).
    pub fn started(&mut self) {
        if let Some(p) = self.pipe.take() {
            let _ = rustix::io::write(&p, b"1");
            if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
                let _ = nix::unistd::dup2_stderr(&null);
            }
        }
    }
}

/// Detaches the rest of the run from the terminal, as `btrfs balance start
/// --bg` does: forks; the child starts a new session and carries on; the
/// parent waits until the child says the operation began (or ended early)
/// and returns. Only while the process is single-threaded.
pub fn detach() -> Result<Detached> {
    use std::os::fd::AsFd;
    let tasks = std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count());
    if tasks != 1 {
        return Err(Error::new(
            ErrorKind::State,
            format!("cannot go to the background: the process has {tasks} threads"),
        ));
    }
    let (reader, writer) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot make a pipe: {e}")))?;
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot open /dev/null: {e}")))?;
    // SAFETY: the process has one thread (checked above), so the child
    // inherits no lock held by another thread; it goes on running this
    // program's code, as the only thread.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(Error::new(
            ErrorKind::Io,
            format!(
                "cannot go to the background: fork: {}",
                std::io::Error::last_os_error()
            ),
        )),
        0 => {
            drop(reader);
            let _ = rustix::process::setsid();
            let _ = nix::unistd::dup2_stdin(null.as_fd());
            let _ = nix::unistd::dup2_stdout(null.as_fd());
            Ok(Detached::Child(DetachNotice { pipe: Some(writer) }))
        }
        child => {
            drop(writer);
            let mut byte = [0u8; 1];
            let started = loop {
                match rustix::io::read(&reader, &mut byte) {
                    Ok(n) => break n == 1,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => break false,
                }
            };
            let ended_early = if started {
                None
            } else {
                let status = rustix::process::Pid::from_raw(child).and_then(|p| {
                    rustix::process::waitpid(Some(p), rustix::process::WaitOptions::empty())
                        .ok()
                        .flatten()
                });
                Some(
                    status
                        .and_then(|(_, s)| s.exit_status())
                        .unwrap_or(i32::from(exit::ERROR)),
                )
            };
            Ok(Detached::Parent {
                pid: child,
                ended_early,
            })
        }
    }
}
