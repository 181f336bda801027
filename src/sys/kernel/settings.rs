//! The ledger of kernel settings btrfs-lab changed: `scrub --limit` sets a
//! device's `scrub_speed_max`, `bench --hugepages` raises
//! `vm.nr_hugepages`. Before a setting is changed, a record (the setting,
//! its value before, the value set, the run's pid and start time, when,
//! which command) is written into `STATE/settings/` (the safe writer,
//! synced, the directory too); the run puts the value back at its end (and
//! on an error, a panic, or a signal it catches: the guard drops) and then
//! deletes the record. A SIGKILL leaves the record, and the next run of
//! any command ([`sweep`], at startup) puts the old value back when the
//! file still holds the value that was set, or drops the record and says
//! so when someone else changed it since.
//!
//! A record names its setting by kind ([`Setting`]), never by path, and
//! holds numbers only: what root writes back is one of the two known
//! files, with a number read from a file in a root-owned directory.
//! [`plan`] is the pure decision (record + what the file holds now →
//! [`Action`]).

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::sys::fs::beneath::open_beneath;
use crate::sys::fs::outfile::OutputDir;
use crate::sys::fs::root::SysRoot;

/// The ledger's directory inside the state directory.
pub const SUBDIR: &str = "settings";

/// The largest record read (they are a few hundred bytes).
const RECORD_CAP: u64 = 64 << 10;

/// A kernel setting btrfs-lab changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Setting {
    /// `/sys/fs/btrfs/FSID/devinfo/DEVID/scrub_speed_max` (bytes per
    /// second, 0: unlimited).
    ScrubSpeedMax {
        /// The filesystem's UUID.
        fsid: String,
        /// The device id.
        devid: u64,
    },
    /// `/proc/sys/vm/nr_hugepages`.
    NrHugepages,
}

impl Setting {
    /// Its file on this machine; None when the record is malformed (an
    /// fsid that is not a UUID).
    pub fn file(&self) -> Option<PathBuf> {
        match self {
            Setting::ScrubSpeedMax { fsid, devid } => {
                let ok =
                    fsid.len() == 36 && fsid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
                ok.then(|| {
                    PathBuf::from(format!(
                        "/sys/fs/btrfs/{fsid}/devinfo/{devid}/scrub_speed_max"
                    ))
                })
            }
            Setting::NrHugepages => Some(PathBuf::from("/proc/sys/vm/nr_hugepages")),
        }
    }

    /// Its name in messages (`scrub_speed_max of devid 2 of FSID`).
    pub fn describe(&self) -> String {
        match self {
            Setting::ScrubSpeedMax { fsid, devid } => {
                format!("scrub_speed_max of devid {devid} of {fsid}")
            }
            Setting::NrHugepages => "vm.nr_hugepages".to_owned(),
        }
    }

    /// A value in messages (`0 (unlimited)`).
    pub fn value(&self, v: u64) -> String {
        match self {
            Setting::ScrubSpeedMax { .. } if v == 0 => "0 (unlimited)".to_owned(),
            Setting::ScrubSpeedMax { .. } => format!(
                "{v} ({}/s)",
                crate::report::units::pretty_size(v, crate::report::units::UnitMode::default())
            ),
            Setting::NrHugepages => v.to_string(),
        }
    }

    /// The record's file name (one record per setting).
    pub fn record_name(&self) -> String {
        match self {
            Setting::ScrubSpeedMax { fsid, devid } => {
                format!("scrub_speed_max.{fsid}.{devid}.json")
            }
            Setting::NrHugepages => "nr_hugepages.json".to_owned(),
        }
    }

    /// Whether `current` is still what the run set: the same value; for
    /// `vm.nr_hugepages` also fewer than asked but more than before (the
    /// kernel reserves what it can find, and the file then reads less).
    fn still_ours(&self, current: u64, before: u64, set: u64) -> bool {
        match self {
            Setting::ScrubSpeedMax { .. } => current == set,
            Setting::NrHugepages if set > before => current > before && current <= set,
            Setting::NrHugepages => current == set,
        }
    }
}

/// One change, as written before it is made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// What was changed.
    pub setting: Setting,
    /// Its value before.
    pub before: u64,
    /// The value set.
    pub set: u64,
    /// The run that set it.
    pub pid: u32,
    /// Its start time after boot, clock ticks (tells a reused pid apart).
    pub start_ticks: u64,
    /// When, seconds since the epoch.
    pub time: u64,
    /// The command (`scrub`, `bench`).
    pub command: String,
}

impl Record {
    /// Who left it, for messages (`a killed btrfs-lab scrub (pid 123)`).
    fn by(&self) -> String {
        format!("a killed btrfs-lab {} (pid {})", self.command, self.pid)
    }
}

/// What to do with a record found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The run that wrote it is still running: nothing.
    InUse,
    /// The file still holds what was set: write `before` back, then delete
    /// the record.
    PutBack,
    /// The value is back already (the run died after putting it back):
    /// delete the record quietly.
    AlreadyBack,
    /// Someone else changed the setting since: delete the record, say so,
    /// leave the value.
    ChangedByOthers,
    /// The file is gone (the filesystem was unmounted: the setting went
    /// with it): delete the record.
    Gone,
}

/// Pure: what to do with `r` when its file holds `current` (None: no such
/// file) and its run is (`owner_alive`) or is not running.
pub fn plan(r: &Record, current: Option<u64>, owner_alive: bool) -> Action {
    if owner_alive {
        return Action::InUse;
    }
    match current {
        None => Action::Gone,
        Some(v) if r.setting.still_ours(v, r.before, r.set) => Action::PutBack,
        Some(v) if v == r.before => Action::AlreadyBack,
        Some(_) => Action::ChangedByOthers,
    }
}

/// The ledger in `state_dir` (`STATE/settings`).
#[derive(Debug, Clone)]
pub struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    /// `state_dir`/settings.
    pub fn new(state_dir: &Path) -> Self {
        Ledger {
            dir: state_dir.join(SUBDIR),
        }
    }

    /// `--state-dir` if given, else btrfs-lab's state directory.
    pub fn of(state_dir: Option<&Path>) -> Self {
        Self::new(state_dir.unwrap_or(Path::new(crate::sys::fs::state::STATE_DIR)))
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The records in it (with their file names); unreadable ones as
    /// errors to report. Empty when the directory does not exist.
    pub fn records(&self) -> Result<(Option<OutputDir>, Vec<Found>)> {
        let dir = match OutputDir::open(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok((None, Vec::new())),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for name in crate::sys::fs::beneath::HeldDir::open(&self.dir)?.names()? {
            let Some(n) = name.to_str() else { continue };
            if !n.ends_with(".json") || n.starts_with('.') {
                continue;
            }
            let path = dir.path().join(&name);
            let record = read_record(&dir, &name, &path);
            out.push(Found {
                name: n.to_owned(),
                record,
            });
        }
        Ok((Some(dir), out))
    }

    /// The record of `setting`, if there is one (for `doctor` and the
    /// scrub plan).
    pub fn find(&self, setting: &Setting) -> Option<Record> {
        let (_, found) = self.records().ok()?;
        found
            .into_iter()
            .filter_map(|f| f.record.ok())
            .find(|r| &r.setting == setting)
    }
}

/// A record file found in the ledger.
#[derive(Debug)]
pub struct Found {
    /// Its file name.
    pub name: String,
    /// What it holds, or why it could not be read.
    pub record: Result<Record>,
}

fn read_record(dir: &OutputDir, name: &OsStr, path: &Path) -> Result<Record> {
    let fd = open_beneath(
        dir.fd(),
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| Error::from_errno(crate::sys::kernel::errno::to_nix(e), "cannot read", path))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| {
        Error::from_errno(crate::sys::kernel::errno::to_nix(e), "cannot read", path)
    })?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(Error::new(
            ErrorKind::WrongTarget,
            format!("{} is not a regular file", path.display()),
        ));
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(RECORD_CAP)
        .read_to_string(&mut text)
        .map_err(|e| Error::from_io(&e, "cannot read", path))?;
    serde_json::from_str(&text).map_err(|e| {
        Error::new(
            ErrorKind::Parse,
            format!("{} is not a btrfs-lab settings record: {e}", path.display()),
        )
    })
}

/// Reads a setting's file as a number.
fn read_value(file: &Path) -> Result<u64> {
    let text =
        std::fs::read_to_string(file).map_err(|e| Error::from_io(&e, "cannot read", file))?;
    text.trim().parse().map_err(|_| {
        Error::new(
            ErrorKind::Parse,
            format!("{} is not a number: {:?}", file.display(), text.trim()),
        )
    })
}

fn write_value(file: &Path, v: u64) -> Result<()> {
    std::fs::write(file, v.to_string()).map_err(|e| Error::from_io(&e, "cannot write", file))
}

/// The value of `setting` now (None: no such file).
pub fn current(setting: &Setting) -> Option<u64> {
    setting.file().and_then(|f| read_value(&f).ok())
}

/// This process's start time (clock ticks after boot).
fn my_start_ticks() -> u64 {
    crate::sys::proc::task::stat_of(&SysRoot::host(), std::process::id()).map_or(0, |s| s.starttime)
}

/// Whether the run that wrote `r` is still running (the same pid and start
/// time, not a zombie).
fn owner_alive(r: &Record) -> bool {
    if r.pid == std::process::id() {
        return true;
    }
    match crate::sys::proc::task::stat_of(&SysRoot::host(), r.pid) {
        Ok(st) => st.starttime == r.start_ticks && st.state != 'Z' && st.state != 'X',
        Err(_) => false,
    }
}

/// Whether the run that wrote `r` is still running (for `doctor`).
pub fn owner_running(r: &Record) -> bool {
    owner_alive(r)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Makes a change durable in the directory (the rename or unlink survives
/// a crash).
fn sync_dir(dir: &OutputDir) {
    let _ = rustix::fs::fsync(dir.fd());
}

/// A setting changed by this run: its record is in the ledger, and the old
/// value is put back (then the record deleted) when this drops.
#[derive(Debug)]
pub struct Change {
    dir: OutputDir,
    name: String,
    file: PathBuf,
    record: Record,
}

impl Change {
    /// Records, then sets `setting` to `value`. A record of a run that is
    /// gone is dealt with first (as [`sweep`] does); one of a running run
    /// is refused (two runs must not both change the same setting).
    pub fn apply(ledger: &Ledger, setting: Setting, value: u64, command: &str) -> Result<Change> {
        let file = setting.file().ok_or_else(|| {
            Error::new(
                ErrorKind::Usage,
                format!("{} is not a setting btrfs-lab changes", setting.describe()),
            )
        })?;
        let dir = OutputDir::create(&ledger.dir, 0o755).map_err(|e| {
            let msg = format!(
                "cannot record the change of {} in {}: {}",
                setting.describe(),
                ledger.dir.display(),
                e.message()
            );
            Error::new(e.kind(), msg).with_hint(
                "btrfs-lab writes what it changes into its state directory first, so that a killed run's setting is put back; --state-dir names another one",
            )
        })?;
        let name = setting.record_name();
        if let Ok(old) = read_record(&dir, OsStr::new(&name), &dir.path().join(&name)) {
            if owner_alive(&old) {
                return Err(Error::new(
                    ErrorKind::Busy,
                    format!(
                        "{} is being changed by another btrfs-lab {} (pid {}) right now",
                        setting.describe(),
                        old.command,
                        old.pid
                    ),
                )
                .with_hint("wait for it to end"));
            }
            // Put back what a killed run left before reading "before".
            let _ = settle(&dir, &name, &old);
        }
        let before = read_value(&file)?;
        let record = Record {
            setting,
            before,
            set: value,
            pid: std::process::id(),
            start_ticks: my_start_ticks(),
            time: now(),
            command: command.to_owned(),
        };
        let text = serde_json::to_string_pretty(&record)
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot serialize: {e}")))?;
        dir.write(&name, text.as_bytes(), 0o644)?;
        sync_dir(&dir);
        let change = Change {
            dir,
            name,
            file,
            record,
        };
        // On a failure the drop puts `before` back and deletes the record.
        write_value(&change.file, value)?;
        Ok(change)
    }

    /// The value before.
    pub fn before(&self) -> u64 {
        self.record.before
    }

    /// Writes the value set again (the kernel reserves huge pages freed
    /// meanwhile).
    pub fn rewrite(&self) -> Result<()> {
        write_value(&self.file, self.record.set)
    }

    /// Its file.
    pub fn file(&self) -> &Path {
        &self.file
    }
}

impl Drop for Change {
    fn drop(&mut self) {
        // Put back first; the record goes only once that worked (else the
        // next run tries again).
        if write_value(&self.file, self.record.before).is_ok() {
            remove_record(&self.dir, &self.name);
        }
    }
}

fn remove_record(dir: &OutputDir, name: &str) {
    let _ = rustix::fs::unlinkat(dir.fd(), name, AtFlags::empty());
    sync_dir(dir);
}

/// Does what [`plan`] says for a record of a run that is gone; returns the
/// line that says what was done (None: nothing to say).
fn settle(dir: &OutputDir, name: &str, r: &Record) -> Option<String> {
    let current = r.setting.file().and_then(|f| {
        if f.exists() {
            read_value(&f).ok()
        } else {
            None
        }
    });
    let what = r.setting.describe();
    match plan(r, current, owner_alive(r)) {
        Action::InUse => None,
        Action::PutBack => {
            let file = r.setting.file()?;
            match write_value(&file, r.before) {
                Ok(()) => {
                    remove_record(dir, name);
                    Some(format!(
                        "put back {what} to {}, left by {}",
                        r.setting.value(r.before),
                        r.by()
                    ))
                }
                Err(e) => Some(format!(
                    "could not put back {what} to {}, left by {}: {}",
                    r.setting.value(r.before),
                    r.by(),
                    e.message()
                )),
            }
        }
        Action::AlreadyBack => {
            remove_record(dir, name);
            None
        }
        Action::ChangedByOthers => {
            remove_record(dir, name);
            Some(format!(
                "{what} was set to {} by {}, and has been changed since (it is {} now): left as it is, the record dropped",
                r.setting.value(r.set),
                r.by(),
                current.map_or_else(|| "?".to_owned(), |v| r.setting.value(v))
            ))
        }
        Action::Gone => {
            remove_record(dir, name);
            None
        }
    }
}

/// At the start of every command: the records of killed runs in the
/// ledger of `state_dir` (`--state-dir`, else the default), each put back
/// or dropped ([`plan`]); returns the lines to print (one per setting).
/// Not root: nothing is changed, and one line says that settings wait to
/// be put back. Nothing at all when the ledger does not exist.
pub fn sweep(state_dir: Option<&Path>) -> Vec<String> {
    let ledger = Ledger::of(state_dir);
    if !ledger.dir.exists() {
        return Vec::new();
    }
    let Ok((Some(dir), found)) = ledger.records() else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    if !crate::sys::is_root() {
        let waiting: Vec<String> = found
            .iter()
            .filter_map(|f| f.record.as_ref().ok())
            .filter(|r| plan(r, current(&r.setting), owner_alive(r)) == Action::PutBack)
            .map(|r| format!("{} ({})", r.setting.describe(), r.by()))
            .collect();
        if !waiting.is_empty() {
            lines.push(format!(
                "kernel settings left by killed btrfs-lab runs are still in place: {}; run any btrfs-lab command as root to put them back",
                waiting.join(", ")
            ));
        }
        return lines;
    }
    for f in found {
        // Only records no other user could have written are acted on.
        if let Err(e) = dir.check_destination(OsStr::new(&f.name)) {
            lines.push(format!("settings record not used: {}", e.message()));
            continue;
        }
        match f.record {
            Ok(r) => lines.extend(settle(&dir, &f.name, &r)),
            Err(e) => lines.push(format!("settings record not used: {}", e.message())),
        }
    }
    lines
}

/// Scrub speed limits set for one run, each a
/// [`Change`] of the settings ledger:
/// recorded before it is set, put back (and the record deleted) when this
/// is dropped (every exit path, a panic too); after a SIGKILL the next run
/// of any command puts it back from the record.
pub(crate) struct ScrubSpeedGuard {
    _changes: Vec<Change>,
}

impl ScrubSpeedGuard {
    /// Nothing set.
    pub(crate) fn none() -> Self {
        ScrubSpeedGuard {
            _changes: Vec::new(),
        }
    }

    /// Writes `limit` (bytes per second) to the `scrub_speed_max` of each
    /// of `devids` of `fsid`, each recorded in `ledger` first; on a failure
    /// the devices already set are put back.
    pub(crate) fn set(ledger: &Ledger, fsid: &str, devids: &[u64], limit: u64) -> Result<Self> {
        let mut changes = Vec::new();
        for &devid in devids {
            let setting = Setting::ScrubSpeedMax {
                fsid: fsid.to_owned(),
                devid,
            };
            changes.push(Change::apply(ledger, setting, limit, "scrub")?);
        }
        Ok(ScrubSpeedGuard { _changes: changes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(setting: Setting, before: u64, set: u64) -> Record {
        Record {
            setting,
            before,
            set,
            pid: 4242,
            start_ticks: 1,
            time: 0,
            command: "scrub".into(),
        }
    }

    fn scrub() -> Setting {
        Setting::ScrubSpeedMax {
            fsid: "5f0c1a8e-1111-2222-3333-444455556666".into(),
            devid: 2,
        }
    }

    #[test]
    fn a_killed_runs_scrub_limit_is_put_back_only_while_it_is_ours() {
        let r = rec(scrub(), 0, 10 << 20);
        assert_eq!(plan(&r, Some(10 << 20), false), Action::PutBack);
        assert_eq!(plan(&r, Some(10 << 20), true), Action::InUse);
        assert_eq!(plan(&r, Some(0), false), Action::AlreadyBack);
        assert_eq!(plan(&r, Some(5 << 20), false), Action::ChangedByOthers);
        assert_eq!(plan(&r, None, false), Action::Gone);
    }

    #[test]
    fn huge_pages_the_kernel_granted_in_part_are_still_ours() {
        let r = rec(Setting::NrHugepages, 4, 68);
        assert_eq!(plan(&r, Some(68), false), Action::PutBack);
        // The kernel found only 30 of the 64 pages asked for.
        assert_eq!(plan(&r, Some(34), false), Action::PutBack);
        assert_eq!(plan(&r, Some(4), false), Action::AlreadyBack);
        // Someone lowered it below what it was, or raised it beyond ours.
        assert_eq!(plan(&r, Some(2), false), Action::ChangedByOthers);
        assert_eq!(plan(&r, Some(100), false), Action::ChangedByOthers);
        assert_eq!(plan(&r, Some(68), true), Action::InUse);
    }

    #[test]
    fn a_record_names_only_the_two_known_files() {
        assert_eq!(
            scrub().file().unwrap(),
            Path::new(
                "/sys/fs/btrfs/5f0c1a8e-1111-2222-3333-444455556666/devinfo/2/scrub_speed_max"
            )
        );
        let evil = Setting::ScrubSpeedMax {
            fsid: "../../../../etc/passwd-aaaaaaaaaaaaaaaaaaaaaaaaaaaa".into(),
            devid: 1,
        };
        assert_eq!(evil.file(), None);
        assert_eq!(
            Setting::NrHugepages.file().unwrap(),
            Path::new("/proc/sys/vm/nr_hugepages")
        );
        // A record that names a path is not a record.
        let text = r#"{"setting":{"kind":"file","path":"/etc/shadow"},"before":0,"set":1,"pid":1,"start_ticks":0,"time":0,"command":"x"}"#;
        assert!(serde_json::from_str::<Record>(text).is_err());
    }

    #[test]
    fn records_round_trip_and_describe_their_values() {
        let r = rec(scrub(), 0, 10 << 20);
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), r);
        assert_eq!(scrub().value(0), "0 (unlimited)");
        assert_eq!(Setting::NrHugepages.value(12), "12");
        assert_eq!(r.by(), "a killed btrfs-lab scrub (pid 4242)");
    }

    #[test]
    fn a_change_of_a_file_the_kernel_lacks_fails_and_leaves_no_record() {
        // The ledger logic on a stand-in: a scrub setting whose file is
        // not there cannot be applied (and leaves no record).
        let tmp = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(tmp.path());
        let s = Setting::ScrubSpeedMax {
            fsid: "00000000-0000-0000-0000-000000000000".into(),
            devid: 1,
        };
        assert!(Change::apply(&ledger, s, 1 << 20, "scrub").is_err());
        assert!(ledger.records().unwrap().1.is_empty());
    }
}
