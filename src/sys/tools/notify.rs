//! Telling someone at once, on the engines a machine already has: the
//! systemd journal (its native protocol: fields, a `MESSAGE_ID` to match
//! on) or a program the administrator installed (run with an argv, never a
//! shell; only one root holds).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// The journal's native socket.
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// How long a notify program may run before it is killed.
const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends one entry to the systemd journal: `fields` as `NAME=value`
/// (names upper case, digits and `_`), each value in the protocol's
/// length-prefixed form, so no byte of it can start another field.
pub(crate) fn journal_send(fields: &[(&str, &str)]) -> Result<()> {
    let mut msg = Vec::new();
    for (name, value) in fields {
        debug_assert!(
            name.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        );
        msg.extend_from_slice(name.as_bytes());
        msg.push(b'\n');
        msg.extend_from_slice(&(value.len() as u64).to_le_bytes());
        msg.extend_from_slice(value.as_bytes());
        msg.push(b'\n');
    }
    let sock = UnixDatagram::unbound()
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot open a socket: {e}")))?;
    sock.send_to(&msg, JOURNAL_SOCKET).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot write to the journal ({JOURNAL_SOCKET}): {e}"),
        )
        .with_hint("is systemd-journald running? --notify PROGRAM runs a program instead")
    })?;
    Ok(())
}

/// Whether root may run `program`: an absolute path to a regular file that
/// root owns and only root can change, in a directory that root owns and
/// only root can change (a program another user can replace would run as
/// root). The error says what is wrong.
pub(crate) fn check_hook(program: &Path) -> Result<()> {
    let bad = |why: String| {
        Error::new(
            ErrorKind::Usage,
            format!("--notify {}: {why}", program.display()),
        )
        .with_hint(
            "give `journal`, or the absolute path of a program root owns and only root can change",
        )
    };
    if !program.is_absolute() {
        return Err(bad("not an absolute path".into()));
    }
    let meta = std::fs::symlink_metadata(program).map_err(|e| bad(e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(bad("not a regular file (a link is not followed)".into()));
    }
    let held_by_root = |m: &std::fs::Metadata| m.uid() == 0 && m.mode() & 0o022 == 0;
    if !held_by_root(&meta) {
        return Err(bad(
            "another user owns it or can change it: root does not run it".into(),
        ));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(bad("not executable".into()));
    }
    if let Some(dir) = program.parent() {
        let d = std::fs::symlink_metadata(dir).map_err(|e| bad(e.to_string()))?;
        if !d.file_type().is_dir() || !held_by_root(&d) {
            return Err(bad(format!(
                "its directory {} is not one only root can change",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Runs `program` with `args` (stdin and stdout closed, its stderr kept for
/// the error), in its own process group, killed after 30 s. `Err` when it
/// cannot start, fails or runs too long.
pub(crate) fn run_hook(program: &Path, args: &[String]) -> Result<()> {
    check_hook(program)?;
    let mut child = super::spawn_in_group(program, args, None, Stdio::null(), Stdio::piped())
        .map_err(|e| {
            Error::new(
                ErrorKind::Tool,
                format!("cannot run {}: {e}", program.display()),
            )
        })?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() > HOOK_TIMEOUT => {
                super::kill_group(&child, rustix::process::Signal::KILL);
                let _ = child.wait();
                return Err(Error::new(
                    ErrorKind::Tool,
                    format!(
                        "{} ran over {} s: killed",
                        program.display(),
                        HOOK_TIMEOUT.as_secs()
                    ),
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Tool,
                    format!("{}: {e}", program.display()),
                ));
            }
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.by_ref().take(4096).read_to_string(&mut err);
    }
    Err(Error::new(
        ErrorKind::Tool,
        format!(
            "{} failed ({status}){}",
            program.display(),
            match err.trim() {
                "" => String::new(),
                e => format!(": {}", e.lines().next().unwrap_or_default()),
            }
        ),
    ))
}
