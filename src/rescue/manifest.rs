//! The manifest in the target directory, `rescue-manifest.jsonl`: a header
//! line, one line per regular file in walk order (a [`FileRecord`]), an end
//! line. It is what makes a copy resumable with bounded memory:
//!
//! - The walk order is fixed (depth first, names sorted by bytes, which is
//!   the order of paths compared by components), and the source is a
//!   read-only mount, so a re-run meets the files in the order an earlier
//!   run wrote them: the old manifest is read alongside the walk (a merge),
//!   never loaded whole.
//! - A run writes its lines to `.rescue-manifest.jsonl.new` as it goes, a
//!   batch at a time: the batch's files are written and linked, the
//!   target's filesystem synced once, then the batch's lines appended and
//!   the `.new` file synced (a line never claims a file that is not on the
//!   disk); it renames it over the manifest when it ends; stopped early it first carries over the old
//!   lines it did not reach. A run killed outright leaves the `.new` file:
//!   the next run merges it (everything it has, then the old lines past its
//!   last path) before it starts, so nothing saved is forgotten.

use std::cmp::Ordering;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::rescue::report::FileRecord;
use crate::sys::fs::beneath::HeldDir;
use crate::sys::fs::rescue::{self as fsr, Kind};

/// The manifest's name in the target directory.
pub const MANIFEST: &str = "rescue-manifest.jsonl";
/// The lines of the run in progress.
pub(crate) const NEW: &str = ".rescue-manifest.jsonl.new";
/// A merge in progress (recovering a killed run's lines).
pub(crate) const MERGE: &str = ".rescue-manifest.jsonl.merge";

/// The first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Header {
    /// `btrfs-lab`.
    pub tool: String,
    /// The version that wrote it.
    pub version: String,
    /// The filesystem rescued from (a resume must be from the same one).
    pub fsid: String,
    /// MOUNT as given.
    pub mount: String,
}

/// The last line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct End {
    /// Every file was visited (false: a re-run resumes).
    pub complete: bool,
    /// When the run ended (RFC 3339, UTC).
    pub time: String,
}

/// One line of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "record", rename_all = "lowercase")]
#[allow(clippy::large_enum_variant)]
pub enum Line {
    /// The first line.
    Header(Header),
    /// A regular file.
    File(FileRecord),
    /// The last line.
    End(End),
}

/// A file record's path bytes.
pub(crate) fn key_of(r: &FileRecord) -> Vec<u8> {
    match &r.path_hex {
        Some(h) => unhex(h).unwrap_or_else(|| r.path.as_bytes().to_vec()),
        None => r.path.as_bytes().to_vec(),
    }
}

/// The walk order: paths compared component by component.
pub(crate) fn walk_order(a: &[u8], b: &[u8]) -> Ordering {
    Path::new(OsStr::from_bytes(a)).cmp(Path::new(OsStr::from_bytes(b)))
}

/// Hex of bytes.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The lines of a manifest file, read one at a time. A line that does not
/// parse (the last one of a run killed mid-write) ends it.
struct Lines {
    reader: BufReader<File>,
}

impl Lines {
    fn next(&mut self) -> Option<Line> {
        let mut buf = Vec::new();
        match self.reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => None,
            Ok(_) if buf.last() != Some(&b'\n') => None,
            Ok(_) => serde_json::from_slice(&buf).ok(),
        }
    }
}

/// The file records of an earlier run, read alongside the walk.
pub(crate) struct OldRecords {
    lines: Option<Lines>,
    peeked: Option<FileRecord>,
}

impl OldRecords {
    fn none() -> Self {
        Self {
            lines: None,
            peeked: None,
        }
    }

    fn next_file(&mut self) -> Option<FileRecord> {
        if let Some(p) = self.peeked.take() {
            return Some(p);
        }
        loop {
            match self.lines.as_mut()?.next()? {
                Line::File(f) => return Some(f),
                Line::Header(_) => {}
                Line::End(_) => return None,
            }
        }
    }

    /// The old record of the file `key`, if there is one; records of paths
    /// before it are dropped (the walk did not meet them).
    pub(crate) fn take(&mut self, key: &[u8]) -> Option<FileRecord> {
        while let Some(r) = self.next_file() {
            match walk_order(&key_of(&r), key) {
                Ordering::Less => {}
                Ordering::Equal => return Some(r),
                Ordering::Greater => {
                    self.peeked = Some(r);
                    return None;
                }
            }
        }
        None
    }
}

/// The manifest of a run: the new lines being written, the old ones read.
pub(crate) struct Manifest {
    dir_path: std::path::PathBuf,
    dir: std::os::fd::OwnedFd,
    out: BufWriter<File>,
    pub(crate) old: OldRecords,
    written: u64,
    /// The lines of the batch not yet synced, and how many.
    pending: Vec<u8>,
    staged: u64,
}

/// A line borrowing its record (what [`Manifest::stage`] writes).
#[derive(Serialize)]
#[serde(tag = "record", rename_all = "lowercase")]
enum LineRef<'a> {
    File(&'a FileRecord),
}

fn open_read(dir: &HeldDir, name: &str) -> Result<Option<Lines>> {
    match fsr::open_entry_read(dir, name) {
        Ok(f) => {
            let st = fsr::stat_file(&f, &dir.join(name))?;
            if fsr::kind(&st) != Kind::Regular {
                return Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!("{} is not a regular file", dir.join(name).display()),
                ));
            }
            Ok(Some(Lines {
                reader: BufReader::new(f),
            }))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn create(dir: &HeldDir, name: &str) -> Result<BufWriter<File>> {
    fsr::unlink_if_there(dir, name)?;
    dir.create_new_file(name, 0o600).map(BufWriter::new)
}

fn write_line(out: &mut BufWriter<File>, line: &Line, path: &Path) -> Result<()> {
    let mut text = serde_json::to_vec(line)
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot serialize a line: {e}")))?;
    text.push(b'\n');
    out.write_all(&text)
        .map_err(|e| Error::from_io(&e, "cannot write", path))
}

/// Flushes and syncs `out` (the file `from` in `dir`), then renames it over
/// `to` (`path`, for the errors).
fn sync_and_rename(
    dir: impl AsFd,
    out: &mut BufWriter<File>,
    from: &str,
    to: &str,
    path: &Path,
) -> Result<()> {
    out.flush()
        .map_err(|e| Error::from_io(&e, "cannot write", path))?;
    out.get_ref()
        .sync_all()
        .map_err(|e| Error::from_io(&e, "cannot write", path))?;
    fsr::rename_synced(dir, from, to, path)
}

/// Whether a run into the target of `dir` left anything (a manifest, or
/// the lines of a run killed early, even before its header was written).
pub(crate) fn recorded(dir: &HeldDir) -> Result<bool> {
    Ok(dir.stat(MANIFEST)?.is_some() || dir.stat(NEW)?.is_some())
}

/// The header of the manifest in `dir`, if there is one (`Err` when it is
/// there but not ours). The `.new` lines of a run killed before it wrote
/// its header (empty, or half a line) have none: ignored.
pub(crate) fn existing_header(dir: &HeldDir) -> Result<Option<Header>> {
    for name in [MANIFEST, NEW] {
        if let Some(mut lines) = open_read(dir, name)? {
            return match lines.next() {
                Some(Line::Header(h)) => Ok(Some(h)),
                _ if name == NEW => Ok(None),
                _ => Err(Error::new(
                    ErrorKind::WrongTarget,
                    format!(
                        "{} is not a btrfs-lab rescue manifest",
                        dir.join(name).display()
                    ),
                )
                .with_hint("choose an empty target directory")),
            };
        }
    }
    Ok(None)
}

impl Manifest {
    /// Starts the manifest of a run in `dir` (recovering the lines of a
    /// killed run first).
    pub(crate) fn begin(dir: &HeldDir, header: Header) -> Result<Manifest> {
        if let Some(mut killed) = open_read(dir, NEW)? {
            let mut out = create(dir, MERGE)?;
            let merge_path = dir.join(MERGE);
            write_line(&mut out, &Line::Header(header.clone()), &merge_path)?;
            let mut last: Option<Vec<u8>> = None;
            while let Some(line) = killed.next() {
                if let Line::File(f) = line {
                    last = Some(key_of(&f));
                    write_line(&mut out, &Line::File(f), &merge_path)?;
                }
            }
            let mut old = OldRecords {
                lines: open_read(dir, MANIFEST)?,
                peeked: None,
            };
            while let Some(f) = old.next_file() {
                if last
                    .as_deref()
                    .is_none_or(|l| walk_order(&key_of(&f), l) == Ordering::Greater)
                {
                    write_line(&mut out, &Line::File(f), &merge_path)?;
                }
            }
            write_line(
                &mut out,
                &Line::End(End {
                    complete: false,
                    time: now(),
                }),
                &merge_path,
            )?;
            sync_and_rename(dir.fd(), &mut out, MERGE, MANIFEST, &dir.join(MANIFEST))?;
            let _ = fsr::unlink_if_there(dir, NEW);
        }
        let old = OldRecords {
            lines: open_read(dir, MANIFEST)?,
            peeked: None,
        };
        let mut out = create(dir, NEW)?;
        write_line(&mut out, &Line::Header(header), &dir.join(NEW))?;
        let fd = fsr::reopen_dir(dir)?;
        // The name of the new file on the disk before the first batch's
        // fdatasync (which syncs its bytes, not its directory entry).
        fsr::sync_dir(&fd, dir.path())?;
        Ok(Manifest {
            dir_path: dir.path().to_path_buf(),
            dir: fd,
            out,
            old,
            written: 0,
            pending: Vec::new(),
            staged: 0,
        })
    }

    /// Adds a file's line to the batch waiting for the target's sync (a
    /// buffer reused from batch to batch: no allocation per file once it
    /// has grown to a batch's size). Nothing is written until
    /// [`Manifest::commit_batch`].
    pub(crate) fn stage(&mut self, r: &FileRecord) -> Result<()> {
        serde_json::to_writer(&mut self.pending, &LineRef::File(r))
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot serialize a line: {e}")))?;
        self.pending.push(b'\n');
        self.staged += 1;
        Ok(())
    }

    /// How many lines wait for [`Manifest::commit_batch`].
    pub(crate) fn staged(&self) -> u64 {
        self.staged
    }

    /// Appends the staged lines and syncs the file (`fdatasync`): called
    /// only once the target's filesystem is synced, so a line on the disk
    /// never claims a file whose data or name is not. A power cut in the
    /// middle leaves at worst half a line at the end, which a reader
    /// ignores.
    pub(crate) fn commit_batch(&mut self) -> Result<()> {
        if self.staged == 0 {
            return Ok(());
        }
        let path = self.dir_path.join(NEW);
        let e = |e: std::io::Error| Error::from_io(&e, "cannot write", &path);
        self.out.write_all(&self.pending).map_err(e)?;
        self.out.flush().map_err(e)?;
        self.out.get_ref().sync_data().map_err(e)?;
        self.written += self.staged;
        self.abandon_batch();
        Ok(())
    }

    /// Drops the staged lines (their files are not claimed: a re-run
    /// copies them again).
    pub(crate) fn abandon_batch(&mut self) {
        self.pending.clear();
        self.staged = 0;
    }

    /// Ends the run: the old lines not reached are carried over when it
    /// stopped early, the end line written, the file synced and renamed
    /// over the manifest.
    pub(crate) fn finish(mut self, complete: bool) -> Result<()> {
        let path = self.dir_path.join(NEW);
        debug_assert_eq!(self.staged, 0, "a batch neither committed nor abandoned");
        if !complete {
            while let Some(f) = self.old.next_file() {
                write_line(&mut self.out, &Line::File(f), &path)?;
            }
        }
        self.old = OldRecords::none();
        write_line(
            &mut self.out,
            &Line::End(End {
                complete,
                time: now(),
            }),
            &path,
        )?;
        let target = self.dir_path.join(MANIFEST);
        sync_and_rename(&self.dir, &mut self.out, NEW, MANIFEST, &target)
    }
}

fn now() -> String {
    crate::report::envelope::rfc3339(std::time::SystemTime::now())
}

/// Reads every line of a manifest file (tests and tools; a run never does).
pub fn read_lines(text: &str) -> Vec<Line> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_order_is_depth_first_with_sorted_names() {
        let mut v: Vec<&[u8]> = vec![b"a-c", b"a/b", b"a", b"b", b"a/b/c", b"a.x"];
        v.sort_by(|a, b| walk_order(a, b));
        assert_eq!(v, vec![&b"a"[..], b"a/b", b"a/b/c", b"a-c", b"a.x", b"b"]);
    }

    #[test]
    fn a_staged_line_is_the_line_of_its_record() {
        let r = FileRecord {
            path: "a/b".to_owned(),
            path_hex: None,
            size: 3,
            state: crate::rescue::report::FileState::Intact,
            damaged_ranges: Vec::new(),
            damaged_bytes: 0,
            judged: vec!["read back".to_owned()],
            saved: None,
            error: None,
        };
        let staged = serde_json::to_vec(&LineRef::File(&r)).unwrap();
        let owned = serde_json::to_vec(&Line::File(r.clone())).unwrap();
        assert_eq!(staged, owned);
        assert_eq!(
            read_lines(std::str::from_utf8(&staged).unwrap()),
            [Line::File(r)]
        );
    }

    #[test]
    fn hex_round_trips() {
        let b = [0u8, 0xff, b'a'];
        assert_eq!(unhex(&hex(&b)).unwrap(), b);
        assert!(unhex("abc").is_none());
    }
}
