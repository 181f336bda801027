//! The balance ioctls as a conversion, a balance and a reclaim use them: BALANCE_V2's
//! ends told apart ([`Ended`]), BALANCE_CTL to pause or cancel (at once, on
//! a thread of its own: [`Pauser`]), their errno kept here.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::Duration;

pub(crate) use nix::errno::Errno;

use super::btrfs::FsHandle;
use super::ioctl::{BalanceArgs, BalanceEnd};
use crate::error::{Error, Result};

/// How a BALANCE_V2 call (a convert balance, or the resume) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// As the kernel returned it (finished, or a btrfs error code).
    Kernel(BalanceEnd),
    /// ECANCELED: paused or cancelled.
    Stopped,
    /// EINPROGRESS: another balance started at the same instant.
    AnotherRuns,
    /// ENOSPC: out of space.
    NoSpace,
    /// EXDEV: the descriptor is on another filesystem than recorded.
    OtherFilesystem,
    /// Any other failure.
    Failed(Errno),
}

impl Ended {
    fn of(r: std::result::Result<BalanceEnd, Errno>) -> Self {
        match r {
            Ok(end) => Ended::Kernel(end),
            Err(Errno::ECANCELED) => Ended::Stopped,
            Err(Errno::EINPROGRESS) => Ended::AnotherRuns,
            Err(Errno::ENOSPC) => Ended::NoSpace,
            Err(Errno::EXDEV) => Ended::OtherFilesystem,
            Err(e) => Ended::Failed(e),
        }
    }

    /// The thread that ran the balance went away without a word.
    pub(crate) fn lost() -> Self {
        Ended::Failed(Errno::EIO)
    }
}

/// Starts a balance with `args` (`None`: resumes the paused one) on `fs`
/// on a thread of its own; its end is sent once on the channel returned.
pub(crate) fn start(
    fs: &FsHandle,
    args: Option<BalanceArgs>,
) -> Result<(thread::JoinHandle<()>, mpsc::Receiver<Ended>)> {
    let fs = fs.try_clone()?;
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let _ = tx.send(Ended::of(fs.balance(args.as_ref())));
    });
    Ok((t, rx))
}

/// BALANCE_CTL pause: `Ok(false)` when no balance runs (ENOTCONN).
pub(crate) fn pause(fs: &FsHandle, path: &Path) -> Result<bool> {
    match fs.balance_control(true) {
        Ok(()) => Ok(true),
        Err(Errno::ENOTCONN) => Ok(false),
        Err(e) => Err(Error::from_errno(e, "cannot pause the balance on", path)),
    }
}

/// BALANCE_CTL cancel.
pub(crate) fn cancel(fs: &FsHandle) -> Result<()> {
    fs.balance_control(false)
        .map_err(|e| Error::from_errno(e, "cannot cancel the balance on", fs.path()))
}

/// Whether a balance failed with an I/O error.
pub(crate) fn is_io(e: Errno) -> bool {
    e == Errno::EIO
}

/// Asks the kernel to pause (or cancel) the balance on a thread of its
/// own, at once when asked (BALANCE_CTL blocks until the current chunk is
/// done), retrying while no balance runs yet (the ioctl thread may not have
/// entered the kernel).
pub(crate) struct Pauser {
    request: Option<mpsc::Sender<()>>,
    ended: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<std::result::Result<(), Errno>>>,
}

impl Pauser {
    /// Pauses when asked ([`Pauser::pause`]).
    pub(crate) fn new(h: &FsHandle) -> Result<Self> {
        Self::with(h, true)
    }

    /// Pauses (`pause` true) or cancels when asked.
    pub(crate) fn with(h: &FsHandle, pause: bool) -> Result<Self> {
        let h = h.try_clone()?;
        let (tx, rx) = mpsc::channel::<()>();
        let ended = Arc::new(AtomicBool::new(false));
        let seen_end = Arc::clone(&ended);
        let thread = thread::spawn(move || {
            if rx.recv().is_err() {
                return Ok(());
            }
            loop {
                match h.balance_control(pause) {
                    Ok(()) => return Ok(()),
                    Err(Errno::ENOTCONN) if !seen_end.load(Ordering::SeqCst) => {
                        thread::sleep(Duration::from_millis(10));
                    }
                    Err(Errno::ENOTCONN) => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        });
        Ok(Self {
            request: Some(tx),
            ended,
            thread: Some(thread),
        })
    }

    /// Asks for it (once is enough).
    pub(crate) fn pause(&self) {
        if let Some(tx) = &self.request {
            let _ = tx.send(());
        }
    }

    /// After the balance ended: stops retrying and joins the thread.
    pub(crate) fn finish(mut self) -> std::result::Result<(), Errno> {
        self.ended.store(true, Ordering::SeqCst);
        self.request = None;
        self.thread
            .take()
            .map_or(Ok(()), |t| t.join().unwrap_or(Ok(())))
    }
}
