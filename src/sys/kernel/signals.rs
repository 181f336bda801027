//! Signals: one registration, three explicit modes.
//!
//! Every command that stops on a signal calls [`install_mode`] with its
//! [`Mode`] first thing ([`install`] and [`install_pausable`] name the two
//! most used). SIGINT, SIGTERM and SIGHUP (a dropped SSH session) then all
//! go to one handler (registered once per process, whatever the mode), which
//! counts them, remembers the last one, raises the flag [`interrupted`] /
//! [`check`] read at safe points, and does what the mode says:
//!
//! | mode | 1st signal | 2nd and later | used by |
//! |---|---|---|---|
//! | [`Mode::ExitOnSecond`] | stop at the next safe point, clean up, exit 130 | exit 130 at once | probe-dio, read-test, nocow, sandbox, doctor --deep, demo |
//! | [`Mode::CleanupFirst`] | stop at the next safe point, clean up, exit 130 | the same (never exits early: an early exit would leave the test file or the sandbox) | bench |
//! | [`Mode::Pausable`] | before [`begin_operation`]: exit 130 at once; during it: delivered through [`OperationSignals`] | the same | convert, device add |
//!
//! [`Mode::Pausable`] is for a kernel operation that must never be abandoned
//! (a balance runs inside our process: if the process dies while in the
//! ioctl, the kernel cancels it): from [`begin_operation`] on no signal ends
//! the process; each one wakes [`OperationSignals::wait`] at once (a
//! self-pipe), so the operation can ask the kernel to pause and wait for the
//! answer. When the [`OperationSignals`] is dropped a signal exits at once
//! again.
//!
//! [`install_mode`] may be called more than once: the handler is registered once,
//! the last mode given applies. [`catch_lease_breaks`] keeps SIGIO (a lease
//! break, `sys::kernel::lease`) from ending the process. [`detach`]:
//! `--background`, as `btrfs balance start --bg`.
#![allow(unsafe_code)]

use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGIO, SIGTERM};

use crate::error::{Error, ErrorKind, Result, exit};

/// What a signal does (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The first signal asks for a stop at a safe point; a second one exits
    /// at once (status 130).
    ExitOnSecond,
    /// Every signal asks for a stop at a safe point; none exits early, so
    /// the clean-up always runs.
    CleanupFirst,
    /// A signal exits at once (status 130) unless an operation has begun
    /// ([`begin_operation`]); during one, signals are delivered to it.
    Pausable,
}

impl Mode {
    fn raw(self) -> u8 {
        match self {
            Mode::ExitOnSecond => 1,
            Mode::CleanupFirst => 2,
            Mode::Pausable => 3,
        }
    }
}

/// The mode's [`Mode::raw`] (0 before [`install_mode`]).
static MODE: AtomicU8 = AtomicU8::new(0);
/// Set by the first SIGINT, SIGTERM or SIGHUP.
static FLAG: AtomicBool = AtomicBool::new(false);
/// How many arrived.
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// The number of the last one.
static LAST: AtomicI32 = AtomicI32::new(0);
/// [`Mode::Pausable`]: true while an operation runs (signals do not exit).
static IN_OPERATION: AtomicBool = AtomicBool::new(false);
/// The write end of the self-pipe (non-blocking), -1 until [`install_mode`] made it.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// The self-pipe: the read end, and the write end kept open for the
/// process's life (its number is in [`WAKE_FD`]).
static PIPE: OnceLock<(Mutex<UnixStream>, UnixStream)> = OnceLock::new();
/// The one registration's outcome.
static REGISTERED: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// The handler of SIGINT, SIGTERM and SIGHUP. Async-signal-safe: atomics,
/// a non-blocking `write` and `_exit` only.
fn on_signal(sig: i32) {
    let before = COUNT.fetch_add(1, Ordering::SeqCst);
    LAST.store(sig, Ordering::SeqCst);
    FLAG.store(true, Ordering::SeqCst);
    let exit_now = match MODE.load(Ordering::SeqCst) {
        1 => before > 0,
        3 => !IN_OPERATION.load(Ordering::SeqCst),
        _ => false,
    };
    if exit_now {
        signal_hook::low_level::exit(i32::from(exit::INTERRUPTED));
    }
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: `fd` is the write end kept open in `PIPE` for the life of
        // the process (never closed once stored).
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let _ = rustix::io::write(fd, &[1]);
    }
}

fn handler_error(e: &dyn std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("cannot install signal handlers: {e}"),
    )
}

/// Installs the handling of SIGINT, SIGTERM and SIGHUP in `mode` (see the
/// module documentation). Call it first thing, before anything is read or
/// planned. Safe to call more than once: the handler is registered once
/// (registered twice, one signal would count twice), the last mode applies.
pub(crate) fn install_mode(mode: Mode) -> Result<()> {
    if PIPE.get().is_none() {
        let (reader, writer) = UnixStream::pair().map_err(|e| handler_error(&e))?;
        writer
            .set_nonblocking(true)
            .map_err(|e| handler_error(&e))?;
        if PIPE.set((Mutex::new(reader), writer)).is_ok()
            && let Some((_, w)) = PIPE.get()
        {
            WAKE_FD.store(w.as_raw_fd(), Ordering::SeqCst);
        }
    }
    MODE.store(mode.raw(), Ordering::SeqCst);
    REGISTERED
        .get_or_init(|| {
            for sig in [SIGINT, SIGTERM, SIGHUP] {
                // SAFETY: `on_signal` is async-signal-safe (atomics, write,
                // _exit; see there); signal-hook keeps errno intact around it.
                unsafe { signal_hook::low_level::register(sig, move || on_signal(sig)) }
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .clone()
        .map_err(|e| handler_error(&e))
}

/// [`install_mode`] with [`Mode::ExitOnSecond`], the mode of most commands.
pub fn install() -> Result<()> {
    install_mode(Mode::ExitOnSecond)
}

/// [`install_mode`] with [`Mode::Pausable`] (convert, device add).
pub fn install_pausable() -> Result<()> {
    install_mode(Mode::Pausable)
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

/// From now on no signal ends the process: they are read from the returned
/// [`OperationSignals`]. A signal that arrived before this call has already
/// ended the process (nothing had begun). Switches to [`Mode::Pausable`].
pub fn begin_operation() -> Result<OperationSignals> {
    install_mode(Mode::Pausable)?;
    IN_OPERATION.store(true, Ordering::SeqCst);
    Ok(OperationSignals {
        seen: AtomicUsize::new(COUNT.load(Ordering::SeqCst)),
    })
}

/// Signals that arrived during an operation (see [`begin_operation`]).
#[derive(Debug)]
pub struct OperationSignals {
    /// [`COUNT`] as far as [`OperationSignals::wait`] has reported it.
    seen: AtomicUsize,
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
        let Some((pipe, _)) = PIPE.get() else {
            std::thread::sleep(timeout);
            return (0, None);
        };
        let mut reader = pipe.lock().unwrap_or_else(|e| e.into_inner());
        let _ = reader.set_read_timeout(Some(timeout.max(Duration::from_millis(1))));
        let mut buf = [0u8; 64];
        let _ = reader.read(&mut buf);
        self.arrived()
    }

    /// [`OperationSignals::wait`] that also returns as soon as the program
    /// `child` ends (its pidfd becomes readable): a loop that follows a
    /// program sees its end at once, not at its next tick. The child is not
    /// reaped here (`try_wait` does that).
    pub fn wait_child(
        &self,
        timeout: Duration,
        child: &std::process::Child,
    ) -> (usize, Option<Received>) {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let pidfd = i32::try_from(child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .and_then(|pid| {
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
            });
        let (Some((pipe, _)), Some(pidfd)) = (PIPE.get(), pidfd) else {
            // No pidfd (a kernel before 5.3): the tick alone.
            return self.wait(timeout);
        };
        let mut reader = pipe.lock().unwrap_or_else(|e| e.into_inner());
        let timeout = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let mut fds = [
            PollFd::new(&*reader, PollFlags::IN),
            PollFd::new(&pidfd, PollFlags::IN),
        ];
        let _ = poll(&mut fds, Some(&timeout));
        if fds[0].revents().contains(PollFlags::IN) {
            // Readable: this read does not block.
            let mut buf = [0u8; 64];
            let _ = reader.read(&mut buf);
        }
        self.arrived()
    }

    /// The signals counted since the last look, and the last one.
    fn arrived(&self) -> (usize, Option<Received>) {
        let now = COUNT.load(Ordering::SeqCst);
        let n = now.saturating_sub(self.seen.swap(now, Ordering::SeqCst));
        let last = match LAST.load(Ordering::SeqCst) {
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
        IN_OPERATION.store(false, Ordering::SeqCst);
    }
}

/// Set when a lease break signal (SIGIO) arrived (for information only).
static LEASE_BROKEN: OnceLock<std::sync::Arc<AtomicBool>> = OnceLock::new();

/// Keeps SIGIO, which the kernel sends to the holder of a lease someone
/// breaks (`sys::kernel::lease`), from ending the process (its default
/// action): registered once; it only sets a flag.
pub(crate) fn catch_lease_breaks() -> std::result::Result<(), nix::errno::Errno> {
    static REGISTERED: OnceLock<std::result::Result<(), nix::errno::Errno>> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        let flag = LEASE_BROKEN.get_or_init(|| std::sync::Arc::new(AtomicBool::new(false)));
        signal_hook::flag::register(SIGIO, std::sync::Arc::clone(flag))
            .map(|_| ())
            .map_err(|e| super::errno::of_io(&e))
    })
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
                let _ = rustix::stdio::dup2_stderr(&null);
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
    // (rustix has no fork: nix's.)
    let forked = unsafe { nix::unistd::fork() };
    match forked {
        Err(e) => Err(Error::new(
            ErrorKind::Io,
            format!("cannot go to the background: fork: {}", e.desc()),
        )),
        Ok(nix::unistd::ForkResult::Child) => {
            drop(reader);
            let _ = rustix::process::setsid();
            let _ = rustix::stdio::dup2_stdin(null.as_fd());
            let _ = rustix::stdio::dup2_stdout(null.as_fd());
            Ok(Detached::Child(DetachNotice { pipe: Some(writer) }))
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            let child = child.as_raw();
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

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::{Signal, raise};
    use std::io::Write;

    const CHILD: &str = "BTRFS_LAB_SIGNALS_TEST_CHILD";
    const NAME: &str = "sys::kernel::signals::tests::each_mode_under_int_int_term_hup";

    /// The child's side: install a mode, raise INT, INT, TERM, HUP at
    /// itself (`raise`: delivered before it returns), write a line after
    /// each that it survived.
    fn child(scenario: &str, out: &std::path::Path) {
        let mut log = std::fs::File::create(out).unwrap();
        let mut note = |s: &str| {
            writeln!(log, "{s}").unwrap();
            log.flush().unwrap();
        };
        let signals = [
            Signal::SIGINT,
            Signal::SIGINT,
            Signal::SIGTERM,
            Signal::SIGHUP,
        ];
        match scenario {
            "exit-on-second" | "cleanup-first" => {
                install_mode(if scenario == "exit-on-second" {
                    Mode::ExitOnSecond
                } else {
                    Mode::CleanupFirst
                })
                .unwrap();
                for (i, s) in signals.iter().enumerate() {
                    raise(*s).unwrap();
                    note(&format!("alive {} interrupted={}", i + 1, interrupted()));
                }
            }
            "pausable" => {
                install_pausable().unwrap();
                let op = begin_operation().unwrap();
                for (i, s) in signals.iter().enumerate() {
                    raise(*s).unwrap();
                    note(&format!("alive {}", i + 1));
                }
                let (mut n, mut last) = (0, None);
                for _ in 0..100 {
                    let (k, l) = op.wait(Duration::from_millis(100));
                    n += k;
                    last = l.or(last);
                    if n >= 4 {
                        break;
                    }
                }
                note(&format!(
                    "operation saw {n}, last {:?}",
                    last.map(Received::name)
                ));
                drop(op);
                raise(Signal::SIGINT).unwrap();
                note("alive after the operation");
            }
            "pausable-early" => {
                install_pausable().unwrap();
                raise(Signal::SIGTERM).unwrap();
                note("alive before the operation");
            }
            other => panic!("unknown scenario {other}"),
        }
        std::process::exit(0);
    }

    fn run(scenario: &str) -> (Option<i32>, String) {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("log");
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--test-threads=1", "--nocapture"])
            .env(CHILD, scenario)
            .env("BTRFS_LAB_SIGNALS_TEST_OUT", &out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        (
            status.code(),
            std::fs::read_to_string(&out).unwrap_or_default(),
        )
    }

    /// Each mode, in a child process of its own (handlers are per
    /// process): what INT, INT, TERM, HUP do.
    #[test]
    fn each_mode_under_int_int_term_hup() {
        if let Ok(scenario) = std::env::var(CHILD) {
            let out = std::env::var_os("BTRFS_LAB_SIGNALS_TEST_OUT").unwrap();
            child(&scenario, std::path::Path::new(&out));
        }
        // The first signal sets the flag; the second exits at once (130).
        assert_eq!(
            run("exit-on-second"),
            (Some(130), "alive 1 interrupted=true\n".to_owned())
        );
        // No signal exits early: the clean-up always runs.
        assert_eq!(
            run("cleanup-first"),
            (
                Some(0),
                "alive 1 interrupted=true\nalive 2 interrupted=true\n\
                 alive 3 interrupted=true\nalive 4 interrupted=true\n"
                    .to_owned()
            )
        );
        // During the operation every signal is delivered to it, none exits;
        // after it, a signal exits at once again.
        assert_eq!(
            run("pausable"),
            (
                Some(130),
                "alive 1\nalive 2\nalive 3\nalive 4\noperation saw 4, last Some(\"SIGHUP\")\n"
                    .to_owned()
            )
        );
        // Before the operation, the first signal exits at once.
        assert_eq!(run("pausable-early"), (Some(130), String::new()));
    }
}
