//! External programs (mkfs.btrfs, btrfs, fio): found with `which`, run with
//! an argv (never a shell), their stderr kept in the error.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::error::{Error, ErrorKind, Result};

/// A program found on PATH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    /// Name looked up (`mkfs.btrfs`).
    pub name: String,
    /// Where it was found.
    pub path: PathBuf,
}

/// Finds `name` on PATH (and in the sbin directories, which a non-login root
/// shell may lack); the error names the Debian package that provides it.
pub fn find(name: &str, package: &str) -> Result<Tool> {
    let path = which::which(name)
        .or_else(|_| {
            let extra = std::env::var_os("PATH").unwrap_or_default();
            let mut dirs: Vec<PathBuf> = std::env::split_paths(&extra).collect();
            dirs.extend(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from));
            let joined = std::env::join_paths(dirs).unwrap_or_default();
            which::which_in(name, Some(joined), "/")
        })
        .map_err(|_| {
            Error::new(ErrorKind::Tool, format!("{name} not found"))
                .with_hint(format!("install it: apt-get install {package}"))
        })?;
    Ok(Tool {
        name: name.to_owned(),
        path,
    })
}

/// An argv shown to the user: words quoted only where a shell would need it,
/// so it can be copied and run as printed.
pub fn display_argv<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter()
        .map(|a| quote_word(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote_word(w: &str) -> String {
    let safe = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

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

    /// Runs the tool with `args`, stdin closed; a non-zero exit becomes an
    /// error that quotes the tool's last stderr line.
    pub fn run(&self, args: &[String]) -> Result<RunOutput> {
        let out = Command::new(&self.path)
            .args(args.iter().map(OsString::from))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::from_io(&e, "cannot run", &self.path))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            return Ok(RunOutput { stdout, stderr });
        }
        let why = last_meaningful_line(&stderr)
            .or_else(|| last_meaningful_line(&stdout))
            .unwrap_or_else(|| match out.status.code() {
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
mod tests {
    use super::*;

    #[test]
    fn quotes_only_where_needed() {
        assert_eq!(
            display_argv(&["mkfs.btrfs", "-d", "raid0", "/dev/loop1"]),
            "mkfs.btrfs -d raid0 /dev/loop1"
        );
        assert_eq!(display_argv(&["a b", "it's", ""]), "'a b' 'it'\\''s' ''");
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
}
