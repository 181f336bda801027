//! What a child process does between fork and exec: the one `pre_exec` of
//! the crate, behind a safe function that also spawns (so the descriptor it
//! uses is borrowed for the whole fork).

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use rustix::process::Signal;

/// Spawns `cmd` with, in the child before exec: `fchdir` to `dir` when
/// given (the directory is never reached by path again), the kernel asked to
/// kill it when the thread that started it exits (`PR_SET_PDEATHSIG`), and a
/// check that the parent did not die before that request (the child fails
/// with `ESRCH` then, instead of outliving us).
pub(crate) fn spawn_with_parent_death(
    cmd: &mut Command,
    dir: Option<BorrowedFd<'_>>,
) -> std::io::Result<Child> {
    let dir_fd = dir.map(|d| d.as_raw_fd());
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes only
    // async-signal-safe system calls (fchdir, prctl, getppid) through rustix,
    // allocating nothing. `dir_fd` comes from `dir`, borrowed for this whole
    // function: it is open until `spawn` has returned (the child's copy lives
    // until exec; it is close-on-exec).
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = dir_fd {
                rustix::process::fchdir(BorrowedFd::borrow_raw(fd))?;
            }
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent may have died before the prctl: no signal would come.
            if rustix::process::getppid() != Some(parent) {
                return Err(rustix::io::Errno::SRCH.into());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Spawns `program args` in a session of its own (`setsid` in the child
/// before exec): no terminal signal (Ctrl-C, a hang-up) reaches it, and it
/// outlives this process: for an operation the kernel carries on in the
/// program's system call (`btrfs replace start -B`), which a Ctrl-C here
/// must leave running. stdin and stdout are /dev/null, stderr a pipe
/// ([`read_stderr`] after it ended).
pub(crate) fn spawn_in_new_session(
    program: &std::path::Path,
    args: &[String],
) -> std::io::Result<Child> {
    use std::process::Stdio;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the forked child before exec and makes one
    // async-signal-safe system call (setsid) through rustix, allocating
    // nothing.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()?;
            Ok(())
        });
    }
    cmd.spawn()
}

/// What a child started by [`spawn_in_new_session`] wrote on stderr, once
/// it has ended (at most 64 KiB).
pub(crate) fn read_stderr(child: &mut Child) -> String {
    use std::io::Read;
    let mut out = Vec::new();
    if let Some(e) = child.stderr.as_mut() {
        let _ = e.take(64 << 10).read_to_end(&mut out);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    #[test]
    fn the_child_starts_in_the_held_directory() {
        let t = tempfile::tempdir().unwrap();
        let dir = std::fs::File::open(t.path()).unwrap();
        let mut cmd = Command::new("pwd");
        cmd.stdout(Stdio::piped());
        let out = spawn_with_parent_death(&mut cmd, Some(std::os::fd::AsFd::as_fd(&dir)))
            .unwrap()
            .wait_with_output()
            .unwrap();
        assert!(out.status.success());
        let real = std::fs::canonicalize(t.path()).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim_end(),
            real.to_str().unwrap()
        );
    }
}
