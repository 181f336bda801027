//! A pseudo-terminal for tests of what a person at a terminal sees: the
//! program runs with the pty's slave as its controlling terminal (util-linux
//! `setsid --ctty`, so a `^C` typed into the master is a real Ctrl-C), and
//! everything it draws is replayed through a terminal emulator (`vt100`).

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;

/// A program running on a terminal of a fixed size.
pub struct PtyRun {
    pub child: Child,
    input: File,
    output: Arc<Mutex<Vec<u8>>>,
    reader: Option<thread::JoinHandle<()>>,
}

impl PtyRun {
    /// Starts `program args` on a `cols`×`rows` terminal (TERM=xterm).
    pub fn spawn(program: &Path, args: &[std::ffi::OsString], cols: u16, rows: u16) -> PtyRun {
        let size = nix::pty::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
        let setsid = ["/usr/bin/setsid", "/bin/setsid"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("util-linux setsid (scripts/install-deps.sh)");
        let child = Command::new(setsid)
            .arg("--ctty")
            .arg(program)
            .args(args)
            .env("TERM", "xterm")
            .env_remove("NO_COLOR")
            .env_remove("CI")
            .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
            .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
            .stderr(Stdio::from(pty.slave))
            .spawn()
            .expect("start the program on the pty");
        let input = File::from(pty.master.try_clone().unwrap());
        let mut master = File::from(pty.master);
        let output = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&output);
        let reader = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once every slave descriptor is closed: the program ended.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        PtyRun {
            child,
            input,
            output,
            reader: Some(reader),
        }
    }

    /// Types `bytes` (`b"\x03"` is Ctrl-C).
    pub fn type_bytes(&mut self, bytes: &[u8]) {
        self.input.write_all(bytes).unwrap();
    }

    /// Waits for the program and returns its exit code and every byte it
    /// wrote to the terminal.
    pub fn wait(mut self) -> (Option<i32>, Vec<u8>) {
        let status = self.child.wait().unwrap();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let out = self.output.lock().unwrap().clone();
        (status.code(), out)
    }
}

/// What a terminal of `cols`×`rows` shows after `bytes`, checked after every
/// write the program made as a person would see it: `check` gets the screen
/// after each chunk of 64 bytes (the program's writes arrive in pieces).
pub fn replay(
    bytes: &[u8],
    cols: u16,
    rows: u16,
    mut check: impl FnMut(&vt100::Screen),
) -> vt100::Screen {
    let nz =
        |n: u16| std::num::NonZeroU16::new(n).expect("a terminal of at least one row and column");
    let mut parser = vt100::Parser::new(nz(rows), nz(cols), 10_000);
    for chunk in bytes.chunks(64) {
        parser.process(chunk);
        check(parser.screen());
    }
    parser.screen().clone()
}

/// The rows of `screen` as text (trailing blanks removed), with whether
/// each one wraps onto the next.
pub fn rows(screen: &vt100::Screen) -> Vec<(String, bool)> {
    let (rows, cols) = screen.size();
    screen
        .rows(0, cols.get())
        .enumerate()
        .take(usize::from(rows.get()))
        .map(|(i, r)| (r.trim_end().to_owned(), screen.row_wrapped(i as u16)))
        .collect()
}
